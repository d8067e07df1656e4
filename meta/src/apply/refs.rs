//! Taking and releasing references: what every command adding or removing an object's or
//! a part's reference goes through (the record moves themselves are in `file_rows.rs`).
//!
//! Content another group owns (`ownership.rs`) is neither inc'd nor dec'd here: its
//! reference was taken there beforehand (`RefInc`, checked by `cross.rs` before the
//! command runs), and its release goes to the outbox (`outbox.rs`).

use placement::{Magic, Sha1};
use redb::WriteTransaction;

use super::file_rows::{dec_content, inc, insert_or_inc};

use crate::command::ContentSource;
use crate::outbox::{self, HELD, OBJECT_REF_IDS, OUTBOX, PART_REF_IDS};
use crate::ref_log::{RefDec, RefOutcome};
use crate::tables::{FILES, ObjectRecord, UploadRecord};
use crate::{DecOutcome, MetaError, checksums, ownership};

/// Adds the reference of a new object or part. `Ok(false)`: the `Existing` content has
/// gone and nothing changed. Content another group owns was referenced there (the command
/// is a `ForeignRef`): nothing to do here.
pub(super) fn reference(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    source: ContentSource,
) -> Result<bool, MetaError> {
    if !ownership::owns_sha1(txn, &sha1.0)? {
        return Ok(true);
    }
    let mut files = txn.open_table(FILES)?;
    match source {
        ContentSource::Existing => match inc(&mut files, sha1, magic) {
            Ok(_) => Ok(true),
            Err(MetaError::NotFound) => Ok(false),
            Err(e) => Err(e),
        },
        ContentSource::Stored(pair) => insert_or_inc(&mut files, sha1, magic, pair).map(|_| true),
    }
}

/// What holds a reference: an object version or a part, under its key.
#[derive(Clone, Copy, Debug)]
pub(super) enum Holder<'a> {
    Object {
        bucket: &'a str,
        key: &'a str,
        seq: u64,
    },
    Part {
        bucket: &'a str,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
    },
}

impl<'a> Holder<'a> {
    pub(super) fn object(bucket: &'a str, key: &'a str, record: &ObjectRecord) -> Self {
        Holder::Object {
            bucket,
            key,
            seq: record.seq,
        }
    }

    pub(super) fn part(upload: &'a UploadRecord, upload_id: &'a str, number: u32) -> Self {
        Holder::Part {
            bucket: &upload.bucket,
            key: &upload.key,
            upload_id,
            number,
        }
    }

    /// The (bucket, key) the reference is held under.
    fn key(&self) -> (&'a str, &'a str) {
        match *self {
            Holder::Object { bucket, key, .. } | Holder::Part { bucket, key, .. } => (bucket, key),
        }
    }

    /// The ref_id a holder that kept none is released under (see [`crate::outbox`]).
    fn derived_ref(&self) -> u64 {
        match *self {
            Holder::Object { seq, .. } => outbox::derived_object_ref(seq),
            Holder::Part {
                upload_id, number, ..
            } => outbox::derived_part_ref(upload_id, number),
        }
    }
}

/// Dereferences the content of a removed object or part. A missing record is reported,
/// not fatal: the object is gone either way and failing would leave the client unable to
/// delete it. Content another group owns is dec'd there later: its dec goes to the outbox
/// under the reference's ref_id.
pub(super) fn release(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    now_secs: u64,
    holder: Holder<'_>,
) -> Result<DecOutcome, MetaError> {
    checksums::release(txn, &sha1.0, magic.get())?;
    let ref_id = forget_ref_id(txn, holder)?;
    if ownership::owns_sha1(txn, &sha1.0)? {
        return match ref_id {
            None => dec_content(txn, sha1, magic, now_secs),
            // Taken in another group whose range has since come here with its `ref_log`
            // rows: released by its ref_id, so that the reconciler never settles it again.
            Some(ref_id) => {
                let dec = RefDec {
                    sha1: sha1.0,
                    ref_id,
                    magic,
                };
                match super::ref_log::dec_batch(txn, &[dec], now_secs.saturating_mul(1000))?[..] {
                    [RefOutcome::Released(outcome)] => Ok(outcome),
                    _ => Ok(DecOutcome::Missing),
                }
            }
        };
    }
    let (bucket, key) = holder.key();
    let ref_id = ref_id.unwrap_or_else(|| holder.derived_ref());
    txn.open_table(OUTBOX)?.insert(
        (bucket, key.as_bytes(), ref_id),
        outbox::encode_value(&sha1.0, magic),
    )?;
    Ok(DecOutcome::Outbox)
}

/// Removes the ref_id a holder kept (it had one if its reference was taken in another
/// group), and its row in `held_refs`.
fn forget_ref_id(txn: &WriteTransaction, holder: Holder<'_>) -> Result<Option<u64>, MetaError> {
    let ref_id = match holder {
        Holder::Object { bucket, key, seq } => txn
            .open_table(OBJECT_REF_IDS)?
            .remove((bucket, key.as_bytes(), seq))?
            .map(|v| v.value()),
        Holder::Part {
            upload_id, number, ..
        } => txn
            .open_table(PART_REF_IDS)?
            .remove((upload_id, number))?
            .map(|v| v.value()),
    };
    if let Some(id) = ref_id {
        let (bucket, key) = holder.key();
        txn.open_table(HELD)?.remove((bucket, key.as_bytes(), id))?;
    }
    Ok(ref_id)
}
