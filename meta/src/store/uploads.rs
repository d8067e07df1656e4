//! Reads of the multipart uploads in progress and their parts.

use redb::{ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::checksums::{self, OBJECT_CHECKSUMS, PartChecksums, UPLOAD_CHECKSUMS, UploadChecksums};
use crate::tables::{self, PARTS, PartRecord, UPLOADS, UploadRecord};

impl MetaStore {
    /// An upload's checksum declaration and its parts' checksums (none for an upload
    /// that declared none and whose parts carried none).
    pub fn upload_checksums(&self, upload_id: &str) -> Result<UploadChecksums, MetaError> {
        let txn = self.db().begin_read()?;
        match txn.open_table(UPLOAD_CHECKSUMS) {
            Ok(table) => checksums::read_upload(&table, upload_id),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(UploadChecksums::default()),
            Err(e) => Err(e.into()),
        }
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
        let txn = self.db().begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        match table.get(upload_id)? {
            Some(v) => Ok(Some(tables::decode_versioned("uploads", v.value())?)),
            None => Ok(None),
        }
    }

    pub fn parts(
        &self,
        upload_id: &str,
    ) -> Result<std::collections::BTreeMap<u32, PartRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(PARTS)?;
        let mut out = std::collections::BTreeMap::new();
        for entry in table.range((upload_id, 0)..=(upload_id, u32::MAX))? {
            let (k, v) = entry?;
            out.insert(k.value().1, tables::decode_versioned("parts", v.value())?);
        }
        Ok(out)
    }

    /// Uploads in progress in `bucket` whose key starts with `prefix`, after the
    /// (key, upload id) marker, at most `max`; and whether more remain. Uploads are few
    /// (they end in minutes), so this scans the table.
    pub fn uploads(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<&(String, String)>,
        max: usize,
    ) -> Result<(Vec<(String, UploadRecord)>, bool), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        let mut all = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let u: UploadRecord = tables::decode_versioned("uploads", v.value())?;
            if u.bucket == bucket && u.key.starts_with(prefix) {
                all.push((k.value().to_string(), u));
            }
        }
        all.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        let mut page: Vec<_> = all
            .into_iter()
            .filter(|(id, u)| after.is_none_or(|(k, i)| (&u.key, id) > (k, i)))
            .take(max + 1)
            .collect();
        let truncated = page.len() > max;
        page.truncate(max);
        Ok((page, truncated))
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
