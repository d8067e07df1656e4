//! What an object version, an upload or a bucket carries beside its record: tags and a
//! canned ACL. [`crate::tables::ObjectRecord`], `UploadRecord` and `BucketRecord`'s older
//! formats travel in Raft log commands whose encoding is not self-describing, so none of
//! them gains a field: an object version keeps its [`Extras`] in its own `objects` or
//! `versions` value (see [`crate::versions`]), so they move and vanish with the version;
//! an upload and a bucket keep theirs in a table of their own:
//!
//! - [`BUCKET_EXTRAS`]: bucket name -> [`Extras`] (PutBucketTagging, PutBucketAcl),
//!   dropped with the bucket's record.
//! - [`UPLOAD_EXTRAS`]: upload id -> [`Extras`] (CreateMultipartUpload's `x-amz-tagging`
//!   and `x-amz-acl`), given to the completed object and dropped with the upload.
//!
//! Stored as a list of items, each present only when set ([`Extra`]), so that a later item
//! is a new variant (appended: a variant's index is its encoding), never a new shape.
//! Written only when there is something: a version, upload or bucket without tags or ACL
//! stores exactly the bytes it stored before.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::acl::CannedAcl;
use crate::tables::{decode_versioned, encode_versioned};
use crate::tags::TagSet;

/// Bucket name -> [`Extras`].
pub const BUCKET_EXTRAS: TableDefinition<&str, &[u8]> = TableDefinition::new("bucket_extras");
/// Upload id -> the [`Extras`] the completed object gets.
pub const UPLOAD_EXTRAS: TableDefinition<&str, &[u8]> = TableDefinition::new("upload_extras");

/// Tags and a canned ACL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    pub tags: TagSet,
    pub acl: CannedAcl,
}

/// One item of [`Extras`] as stored.
#[derive(Serialize, Deserialize)]
pub(crate) enum Extra {
    Tags(TagSet),
    Acl(CannedAcl),
}

impl Extras {
    pub const NONE: Extras = Extras {
        tags: TagSet(Vec::new()),
        acl: CannedAcl::Private,
    };

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.acl == CannedAcl::Private
    }

    pub(crate) fn items(&self) -> Vec<Extra> {
        let mut out = Vec::new();
        if !self.tags.is_empty() {
            out.push(Extra::Tags(self.tags.clone()));
        }
        if self.acl != CannedAcl::Private {
            out.push(Extra::Acl(self.acl));
        }
        out
    }

    pub(crate) fn from_items(items: Vec<Extra>) -> Extras {
        let mut out = Extras::default();
        for item in items {
            match item {
                Extra::Tags(tags) => out.tags = tags,
                Extra::Acl(acl) => out.acl = acl,
            }
        }
        out
    }

    /// The value of a [`BUCKET_EXTRAS`] or [`UPLOAD_EXTRAS`] entry.
    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        encode_versioned(&self.items())
    }

    pub fn decode(table: &'static str, bytes: &[u8]) -> Result<Extras, MetaError> {
        decode_versioned::<Vec<Extra>>(table, bytes).map(Extras::from_items)
    }
}

/// The extras of a table's entry `name` (none when it has no entry).
pub fn get(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    what: &'static str,
    name: &str,
) -> Result<Extras, MetaError> {
    match table.get(name)? {
        Some(v) => Extras::decode(what, v.value()),
        None => Ok(Extras::default()),
    }
}

/// Changes the extras of a table's entry `name` with `f`; an entry left with nothing is
/// removed.
pub(crate) fn update(
    txn: &WriteTransaction,
    (table, what): (TableDefinition<&str, &[u8]>, &'static str),
    name: &str,
    f: impl FnOnce(&mut Extras),
) -> Result<(), MetaError> {
    let mut t = txn.open_table(table)?;
    let mut extras = get(&t, what, name)?;
    f(&mut extras);
    if extras.is_empty() {
        t.remove(name)?;
    } else {
        t.insert(name, extras.encode()?.as_slice())?;
    }
    Ok(())
}

/// Removes a table's entry `name` (its bucket or upload is gone).
pub(crate) fn forget(
    txn: &WriteTransaction,
    table: TableDefinition<&str, &[u8]>,
    name: &str,
) -> Result<(), MetaError> {
    txn.open_table(table)?.remove(name)?;
    Ok(())
}

/// The bucket table and its name, for [`update`].
pub(crate) const BUCKETS_OF: (TableDefinition<&str, &[u8]>, &str) =
    (BUCKET_EXTRAS, "bucket_extras");
/// The upload table and its name, for [`update`].
pub(crate) const UPLOADS_OF: (TableDefinition<&str, &[u8]>, &str) =
    (UPLOAD_EXTRAS, "upload_extras");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::Tag;

    #[test]
    fn extras_round_trip_through_their_own_type() {
        for extras in [
            Extras::default(),
            Extras {
                tags: TagSet(vec![Tag::new("a", "1")]),
                acl: CannedAcl::Private,
            },
            Extras {
                tags: TagSet::default(),
                acl: CannedAcl::PublicRead,
            },
            Extras {
                tags: TagSet(vec![Tag::new("a", "1"), Tag::new("b", "")]),
                acl: CannedAcl::PublicRead,
            },
        ] {
            let bytes = extras.encode().unwrap();
            assert_eq!(Extras::decode("t", &bytes).unwrap(), extras);
        }
        // Only what is set is written: the list's length, then each item.
        assert_eq!(Extras::default().encode().unwrap(), [1, 0]);
        let public = Extras {
            tags: TagSet::default(),
            acl: CannedAcl::PublicRead,
        };
        assert_eq!(public.encode().unwrap(), [1, 1, 1, 1]);
        assert!(Extras::decode("t", &[1, 1, 9]).is_err());
        assert!(Extras::decode("t", &[]).is_err());
    }
}
