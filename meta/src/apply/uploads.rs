//! Multipart upload commands: an upload begun, its parts put, and its end (completed into
//! an object, or aborted). Each part is content in its own right, referenced in FileDB
//! until the upload ends.

use placement::Sha1;
use redb::{ReadableTable, WriteTransaction};

use super::objects::store_object;
use super::refs::{Holder, reference, release};
use crate::checksums::{self, UploadChecksum};
use crate::command::{ContentSource, NewObject};
use crate::extras::{self, UPLOAD_EXTRAS};
use crate::tables::{self, Checksum, PARTS, PartRecord, UPLOADS, UploadRecord, check_bucket};
use crate::{MetaError, Response};

/// `CreateUpload`: records a new upload in an existing bucket.
pub(super) fn create(
    txn: &WriteTransaction,
    upload_id: &str,
    upload: &UploadRecord,
) -> Result<Response, MetaError> {
    check_bucket(txn, &upload.bucket)?;
    let mut uploads = txn.open_table(UPLOADS)?;
    if uploads.get(upload_id)?.is_some() {
        return Err(MetaError::Corrupt(format!("upload id {upload_id} reused")));
    }
    uploads.insert(upload_id, tables::encode_versioned(upload)?.as_slice())?;
    Ok(Response::Done)
}

/// `CreateUploadWithChecksum`: `create`, with the upload's checksum declaration beside it.
pub(super) fn create_with_checksum(
    txn: &WriteTransaction,
    upload_id: &str,
    upload: &UploadRecord,
    checksum: &UploadChecksum,
) -> Result<Response, MetaError> {
    let done = create(txn, upload_id, upload)?;
    checksums::put_upload(txn, upload_id, checksum)?;
    Ok(done)
}

/// `PutPart` (`checksum` None) and `PutPartWithChecksum`: references the part's content
/// (unless an `Existing` one has gone) and stores the part with its checksum (a part put
/// without one leaves none of the part it replaces), releasing the content of the part it
/// replaces.
pub(super) fn put_part_with_checksum(
    txn: &WriteTransaction,
    upload_id: &str,
    (part_number, part): (u32, &PartRecord),
    source: ContentSource,
    now_secs: u64,
    checksum: Option<&Checksum>,
) -> Result<Response, MetaError> {
    let upload = read_upload(txn, upload_id)?;
    if !reference(txn, &part.sha1, part.magic, source)? {
        return Ok(Response::ContentGone);
    }
    checksums::put_part(txn, upload_id, part_number, checksum)?;
    let bytes = tables::encode_versioned(part)?;
    let replaced = txn
        .open_table(PARTS)?
        .insert((upload_id, part_number), bytes.as_slice())?
        .map(|v| tables::decode_versioned::<PartRecord>("parts", v.value()))
        .transpose()?;
    if let Some(old) = replaced {
        let holder = Holder::part(&upload, upload_id, part_number);
        release(txn, &old.sha1, old.magic, now_secs, holder)?;
    }
    Ok(Response::PartPut)
}

/// `CompleteUpload`: if the parts are still those the caller read, the object becomes
/// bucket/key and the upload with its parts is dropped.
pub(super) fn complete(
    txn: &WriteTransaction,
    upload_id: &str,
    object: &NewObject,
    parts: &[(u32, Sha1)],
    source: ContentSource,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let upload = read_upload(txn, upload_id)?;
    check_bucket(txn, &upload.bucket)?;
    {
        let table = txn.open_table(PARTS)?;
        for (number, sha1) in parts {
            let current = table
                .get((upload_id, *number))?
                .map(|v| tables::decode_versioned::<PartRecord>("parts", v.value()))
                .transpose()?;
            if current.is_none_or(|p| p.sha1 != *sha1) {
                return Err(MetaError::InvalidPart(format!(
                    "part {number} changed or vanished"
                )));
            }
        }
    }
    if !reference(txn, &object.sha1, object.magic, source)? {
        return Ok(Response::ContentGone);
    }
    let numbers: Vec<u32> = parts.iter().map(|(n, _)| *n).collect();
    // The tags and ACL CreateMultipartUpload gave go to the object (dropped with the
    // upload).
    let given = extras::get(&txn.open_table(UPLOAD_EXTRAS)?, "upload_extras", upload_id)?;
    checksums::keep_for_object(
        txn,
        upload_id,
        &numbers,
        (&object.sha1.0, object.magic.get()),
    )?;
    drop_upload_of(txn, upload_id, &upload, now_secs)?;
    let response = store_object(txn, &upload.bucket, &upload.key, object, now_secs)?;
    if !given.is_empty() {
        super::versions::update_current(txn, &upload.bucket, &upload.key, |e| *e = given)?;
    }
    Ok(response)
}

/// `AbortUpload`: drops an upload and dereferences its parts.
pub(super) fn abort(
    txn: &WriteTransaction,
    upload_id: &str,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let upload = read_upload(txn, upload_id)?;
    drop_upload_of(txn, upload_id, &upload, now_secs)?;
    Ok(Response::Done)
}

/// Removes an upload and its parts, dereferencing every part's content.
pub(super) fn drop_upload(
    txn: &WriteTransaction,
    upload_id: &str,
    now_secs: u64,
) -> Result<(), MetaError> {
    let upload = read_upload(txn, upload_id)?;
    drop_upload_of(txn, upload_id, &upload, now_secs)
}

/// [`drop_upload`] of an upload already read.
fn drop_upload_of(
    txn: &WriteTransaction,
    upload_id: &str,
    upload: &UploadRecord,
    now_secs: u64,
) -> Result<(), MetaError> {
    let mut parts_gone = Vec::new();
    {
        let mut parts = txn.open_table(PARTS)?;
        for entry in parts.extract_from_if((upload_id, 0)..=(upload_id, u32::MAX), |_, _| true)? {
            let (k, v) = entry?;
            let number = k.value().1;
            parts_gone.push((
                number,
                tables::decode_versioned::<PartRecord>("parts", v.value())?,
            ));
        }
    }
    for (number, part) in parts_gone {
        let holder = Holder::part(upload, upload_id, number);
        release(txn, &part.sha1, part.magic, now_secs, holder)?;
    }
    txn.open_table(UPLOADS)?.remove(upload_id)?;
    checksums::drop_upload(txn, upload_id)?;
    extras::forget(txn, UPLOAD_EXTRAS, upload_id)?;
    Ok(())
}

pub(super) fn read_upload(
    txn: &WriteTransaction,
    upload_id: &str,
) -> Result<UploadRecord, MetaError> {
    find_upload(txn, upload_id)?.ok_or(MetaError::NoSuchUpload)
}

/// The upload `upload_id`, if it is in progress.
pub(super) fn find_upload(
    txn: &WriteTransaction,
    upload_id: &str,
) -> Result<Option<UploadRecord>, MetaError> {
    txn.open_table(UPLOADS)?
        .get(upload_id)?
        .map(|v| tables::decode_versioned("uploads", v.value()))
        .transpose()
}
