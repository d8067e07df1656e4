//! Reads of the multipart uploads in progress and their parts.

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

use super::MetaStore;
use crate::MetaError;
use crate::checksums::{
    self, OBJECT_CHECKSUMS, PartChecksums, UPLOAD_CHECKSUMS, UploadChecksum, UploadChecksums,
};
use crate::list::{Cursor, Span, Walked};
use crate::tables::{self, PARTS, PartRecord, UPLOADS, UploadRecord};

/// A page of ListMultipartUploads (or the part of one an index group read): each upload
/// by id with its record and the checksum it declared, ordered by key then id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadsPage {
    pub uploads: Vec<(String, UploadRecord, Option<UploadChecksum>)>,
    pub truncated: bool,
    /// Where the walk goes on in a later index group (see [`crate::list::ListPage`]).
    pub resume: Option<Cursor>,
}

impl Walked for UploadsPage {
    fn entries(&self) -> usize {
        self.uploads.len()
    }

    fn truncated(&self) -> bool {
        self.truncated
    }

    fn resume(&self) -> Option<&Cursor> {
        self.resume.as_ref()
    }

    fn append(&mut self, part: Self) {
        self.uploads.extend(part.uploads);
        self.truncated = part.truncated;
    }
}

impl MetaStore {
    /// An upload's checksum declaration and its parts' checksums (none for an upload
    /// that declared none and whose parts carried none).
    pub fn upload_checksums(&self, upload_id: &str) -> Result<UploadChecksums, MetaError> {
        upload_checksums_in(&self.db().begin_read()?, upload_id)
    }

    /// The part checksums of the object whose reference is (sha1, magic), if it was
    /// completed from parts that carried its upload's algorithm.
    pub fn object_part_checksums(
        &self,
        sha1: &placement::Sha1,
        magic: placement::Magic,
    ) -> Result<Option<PartChecksums>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = match txn.open_table(OBJECT_CHECKSUMS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        table
            .get((sha1.0, magic.get()))?
            .map(|v| PartChecksums::decode(v.value()))
            .transpose()
    }

    pub fn upload(&self, upload_id: &str) -> Result<Option<UploadRecord>, MetaError> {
        upload_in(&self.db().begin_read()?, upload_id)
    }

    pub fn parts(&self, upload_id: &str) -> Result<BTreeMap<u32, PartRecord>, MetaError> {
        parts_in(&self.db().begin_read()?, upload_id)
    }

    /// Calls `f` with every part of every upload in progress.
    pub fn for_each_part(&self, mut f: impl FnMut(&str, u32, PartRecord)) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(PARTS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (upload, number) = k.value();
            f(
                upload,
                number,
                tables::decode_versioned("parts", v.value())?,
            );
        }
        Ok(())
    }

    /// Up to `limit` uploads in progress in `bucket` (the uploads table is keyed by id,
    /// so this is one pass over it: uploads in progress are few, abandoned ones are
    /// bounded by `--upload-max-age-secs`).
    pub fn uploads_in(&self, bucket: &str, limit: usize) -> Result<Vec<String>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry?;
            let upload: UploadRecord = tables::decode_versioned("uploads", v.value())?;
            if upload.bucket == bucket {
                out.push(k.value().to_string());
            }
        }
        Ok(out)
    }

    /// Up to `limit` uploads in progress (any bucket) after upload id `after`.
    pub fn uploads_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UploadRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db().begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in table.range::<&str>((start, Bound::Unbounded))? {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry?;
            out.push((
                k.value().to_string(),
                tables::decode_versioned("uploads", v.value())?,
            ));
        }
        Ok(out)
    }
}

/// An upload's checksum declaration and its parts' checksums as `txn` sees them.
pub(crate) fn upload_checksums_in(
    txn: &ReadTransaction,
    upload_id: &str,
) -> Result<UploadChecksums, MetaError> {
    match txn.open_table(UPLOAD_CHECKSUMS) {
        Ok(table) => checksums::read_upload(&table, upload_id),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(UploadChecksums::default()),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn upload_in(
    txn: &ReadTransaction,
    upload_id: &str,
) -> Result<Option<UploadRecord>, MetaError> {
    let table = txn.open_table(UPLOADS)?;
    match table.get(upload_id)? {
        Some(v) => Ok(Some(tables::decode_versioned("uploads", v.value())?)),
        None => Ok(None),
    }
}

pub(crate) fn parts_in(
    txn: &ReadTransaction,
    upload_id: &str,
) -> Result<BTreeMap<u32, PartRecord>, MetaError> {
    let table = txn.open_table(PARTS)?;
    let mut out = BTreeMap::new();
    for entry in table.range((upload_id, 0)..=(upload_id, u32::MAX))? {
        let (k, v) = entry?;
        out.insert(k.value().1, tables::decode_versioned("parts", v.value())?);
    }
    Ok(out)
}

/// The uploads in progress in `bucket` whose key starts with `prefix` and lies in `span`,
/// after the (key, upload id) marker `after`: at most `span.room`, and whether more
/// remain in the span. Uploads are few (they end in minutes, abandoned ones are bounded by
/// `--upload-max-age-secs`), so this scans the table, which is keyed by id.
pub(crate) fn uploads_span_in(
    txn: &ReadTransaction,
    bucket: &str,
    prefix: &str,
    after: Option<&(String, String)>,
    span: &Span,
) -> Result<UploadsPage, MetaError> {
    let within = |key: &[u8]| {
        key.starts_with(prefix.as_bytes())
            && match &span.from {
                Cursor::At(f) => key >= f.as_slice(),
                Cursor::After(f) => key > f.as_slice(),
            }
            && span.until.as_deref().is_none_or(|u| key < u)
    };
    let table = txn.open_table(UPLOADS)?;
    let mut all = Vec::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        let u: UploadRecord = tables::decode_versioned("uploads", v.value())?;
        let id = k.value();
        if u.bucket == bucket
            && within(u.key.as_bytes())
            && after.is_none_or(|(ak, ai)| (u.key.as_str(), id) > (ak.as_str(), ai.as_str()))
        {
            all.push((id.to_string(), u));
        }
    }
    all.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
    let truncated = all.len() > span.room;
    all.truncate(span.room);
    let declared = match txn.open_table(UPLOAD_CHECKSUMS) {
        Ok(table) => Some(table),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let mut page = UploadsPage {
        truncated,
        resume: None,
        uploads: Vec::with_capacity(all.len()),
    };
    for (id, upload) in all {
        // Row 0 of an upload's checksums is its declaration.
        let checksum = match &declared {
            Some(table) => table
                .get((id.as_str(), 0))?
                .map(|v| UploadChecksum::decode(v.value()))
                .transpose()?,
            None => None,
        };
        page.uploads.push((id, upload, checksum));
    }
    if !page.truncated {
        page.resume = Cursor::at_end(span.until.as_deref(), prefix.as_bytes());
    }
    Ok(page)
}
