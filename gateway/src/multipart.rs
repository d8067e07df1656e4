//! Multipart uploads: parts are content in their own right, the result is one file.
//!
//! Each part is stored like any body (two copies, content-addressed, deduplicated) and
//! referenced in FileDB by the upload. Completing the upload streams the parts, in order,
//! into one new content file, commits the object, and dereferences every part in the same
//! command, so the parts' files go the usual way through `deleting` and Valkyrie. Uploading
//! the same bytes in three parts or in one PUT therefore ends as the same single file.
//! The price is one extra write of the object's bytes at completion; the gain is that
//! nothing but content files ever sits on the disks and no part is ever lost with a disk.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use md5::Digest as _;
use placement::read::Expect;
use placement::{Magic, Sha1};

use crate::checksums::{self, Algorithm};
use crate::store::{
    ChecksumSlot, CommitError, ContentReadError, ObjectAttrs, ObjectStore, ReadBody, StoreError,
    Stored, UploadError, now_ms, now_secs,
};
use meta::acl::CannedAcl;
use meta::checksums::{ChecksumType, UploadChecksum, UploadChecksums};
use meta::tags::TagSet;
use meta::{
    Checksum, Command, MetaError, NewObject, ObjectPut, ObjectRecord, PartPut, PartRecord,
    Referenced, UploadRecord, UploadsPage, WritePrecondition,
};

pub use crate::store::{PART_BYTES_MIN, PART_NUMBER_MAX};

/// Which part of which upload a request writes.
#[derive(Clone, Copy, Debug)]
pub struct PartTarget<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub upload_id: &'a str,
    pub number: u32,
}

/// A part as the client names it in CompleteMultipartUpload.
#[derive(Clone, Debug)]
pub struct PartRef {
    pub number: u32,
    pub etag: String,
    /// The part's checksum as the client names it (`<ChecksumCRC32>`...), if it does.
    pub checksum: Option<Checksum>,
}

/// The algorithm an upload declared, as this crate knows it.
fn declared_algorithm(declared: &UploadChecksum) -> Result<Algorithm, StoreError> {
    Algorithm::parse(&declared.algorithm).ok_or_else(|| {
        StoreError::Internal(format!(
            "upload checksum algorithm {:?} unknown",
            declared.algorithm
        ))
    })
}

/// The ETag S3 gives the object that `parts` (with the ETags the client names) complete:
/// the MD5 of the parts' binary MD5s, `-<count>`. None if an ETag is not an MD5.
fn multipart_etag(parts: &[PartRef]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    let mut md5s = md5::Md5::new();
    for p in parts {
        let mut md5 = [0u8; 16];
        hex::decode_to_slice(p.etag.trim().trim_matches('"'), &mut md5).ok()?;
        md5s.update(md5);
    }
    Some(format!(
        "\"{}-{}\"",
        hex::encode(md5s.finalize()),
        parts.len()
    ))
}

impl ObjectStore {
    async fn upload_record(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadRecord, StoreError> {
        self.replicas()
            .upload(bucket, key, upload_id)
            .await
            .map_err(|e| StoreError::meta(e, bucket))?
            .ok_or(StoreError::NoSuchUpload)
    }

    pub async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        attrs: ObjectAttrs,
        checksum: Option<UploadChecksum>,
        (tags, acl): (&TagSet, CannedAcl),
    ) -> Result<String, StoreError> {
        self.check_key(key)?;
        self.check_attrs(&attrs)?;
        let upload_id = format!("{:032x}", rand::random::<u128>());
        let upload = UploadRecord {
            bucket: bucket.to_string(),
            key: key.to_string(),
            content_type: attrs.content_type,
            user_meta: attrs.user_meta,
            headers: attrs.headers,
            created_ms: now_ms(),
        };
        let cmd = match checksum {
            Some(checksum) => Command::CreateUploadWithChecksum {
                upload_id: upload_id.clone(),
                upload,
                checksum,
            },
            None => Command::CreateUpload {
                upload_id: upload_id.clone(),
                upload,
            },
        };
        // The tags wait beside the upload for the object it completes into.
        let cmd = Command::tagged(bucket, key, tags, cmd);
        let cmd = Command::with_acl(bucket, key, acl, cmd);
        self.execute(cmd)
            .await
            .map_err(|e| StoreError::meta(e, bucket))?;
        Ok(upload_id)
    }

    /// The upload must belong to bucket/key, as S3 checks: the index read answers none
    /// for an upload of another key (`IndexQuery::Upload`).
    pub async fn check_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadRecord, StoreError> {
        self.upload_record(bucket, key, upload_id).await
    }

    /// An upload's checksum declaration and its parts' checksums.
    pub async fn upload_checksums(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadChecksums, StoreError> {
        self.replicas()
            .upload_checksums(bucket, key, upload_id)
            .await
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// The part checksums a completed multipart object keeps (see `meta::checksums`).
    pub async fn object_part_checksums(
        &self,
        record: &ObjectRecord,
    ) -> Result<Option<meta::checksums::PartChecksums>, StoreError> {
        let (sha1, magic) = (record.sha1, record.magic);
        self.meta_read(move |m| m.object_part_checksums(&sha1, magic))
            .await
    }

    fn check_part_number(n: u32) -> Result<(), StoreError> {
        if (1..=PART_NUMBER_MAX).contains(&n) {
            Ok(())
        } else {
            Err(StoreError::PartNumberOutOfRange(n))
        }
    }

    /// Stores one part from a body; an error item in `body` aborts it as
    /// [`UploadError::Body`].
    pub async fn put_part<S, E>(
        &self,
        target: PartTarget<'_>,
        size_bytes: Option<u64>,
        content_md5: Option<[u8; 16]>,
        body: S,
        checksum: Option<ChecksumSlot>,
    ) -> Result<(PartRecord, Option<Checksum>), UploadError<E>>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
    {
        let PartTarget {
            bucket,
            key,
            upload_id,
            number,
        } = target;
        Self::check_part_number(number)?;
        self.check_upload(bucket, key, upload_id).await?;
        let staged = self.stage(size_bytes, body).await?;
        if content_md5.is_some_and(|m| m != staged.digests.md5) {
            staged.discard().await;
            return Err(StoreError::Md5Mismatch.into());
        }
        let d = staged.digests;
        let part = PartRecord {
            sha1: d.sha1,
            magic: Magic::random(),
            size_bytes: d.size_bytes,
            md5: d.md5,
            crc32: d.crc32,
            created_ms: now_ms(),
        };
        // Filled by the body's checksum check once the body has been read.
        let checksum =
            checksum.and_then(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take());
        let command = |source| part_command(upload_id, number, &part, source, checksum.clone());
        match self
            .commit_content::<PartPut>(staged, Some((bucket, key)), command)
            .await
        {
            Ok(PartPut) => Ok((part, checksum)),
            Err(e) => Err(e.in_bucket(bucket).into()),
        }
    }

    /// UploadPartCopy: a whole single-part source becomes the part without a byte read
    /// (its MD5 is the part's ETag); a range, or a multipart source whose body MD5 is not
    /// known, is read and stored as a new part.
    /// `source` is the record read of `from` (bucket, key).
    pub async fn put_part_copy(
        &self,
        target: PartTarget<'_>,
        source: ObjectRecord,
        from: (&str, &str),
        range: Option<(u64, u64)>,
        algorithm: Option<Algorithm>,
    ) -> Result<(PartRecord, Option<Checksum>), StoreError> {
        let PartTarget {
            bucket,
            key,
            upload_id,
            number,
        } = target;
        Self::check_part_number(number)?;
        self.check_upload(bucket, key, upload_id).await?;
        let whole = range.is_none_or(|(first, last)| first == 0 && last + 1 == source.size_bytes);
        // The source's own checksum serves the part when it is one of the upload's
        // algorithm over the same bytes; else the bytes are read and checksummed.
        let known = match algorithm {
            None => Some(None),
            Some(Algorithm::Crc32) if source.checksum.is_none() => Some(Some(Checksum {
                algorithm: Algorithm::Crc32.name().to_string(),
                value: crate::checksums::crc32_base64(source.crc32),
            })),
            Some(alg) => source
                .checksum
                .clone()
                .filter(|c| c.algorithm == alg.name() && !c.value.contains('-'))
                .map(Some),
        };
        if whole
            && source.part_sizes.is_empty()
            && let Some(checksum) = known
        {
            let part = PartRecord {
                sha1: source.sha1,
                magic: Magic::random(),
                size_bytes: source.size_bytes,
                md5: source.md5,
                crc32: source.crc32,
                created_ms: now_ms(),
            };
            let cmd = part_command(
                upload_id,
                number,
                &part,
                meta::ContentSource::Existing,
                checksum.clone(),
            );
            return match self
                .replicas()
                .referencing::<PartPut>(Some((bucket, key)), cmd)
                .await
            {
                Ok(Referenced::Done(PartPut)) => Ok((part, checksum)),
                Ok(Referenced::ContentGone) => {
                    Err(self.released(from.0, from.1, &source, source.sha1).await)
                }
                Err(e) => Err(StoreError::meta(e, bucket)),
            };
        }
        let (first, last) = range.unwrap_or((0, source.size_bytes.saturating_sub(1)));
        let len = if source.size_bytes == 0 {
            0
        } else {
            last - first + 1
        };
        let expect = Expect {
            size_bytes: source.size_bytes,
            crc32: source.crc32,
        };
        let body = match self.read_content(source.sha1, expect, range).await {
            Ok(body) => body,
            Err(ContentReadError::NoRecord(sha1)) => {
                return Err(self.released(from.0, from.1, &source, sha1).await);
            }
            Err(e) => return Err(StoreError::Read(e)),
        };
        let Some(alg) = algorithm else {
            // The body is stored content: its failure is the store's own.
            return self
                .put_part(target, Some(len), None, read_body_stream(body), None)
                .await
                .map_err(StoreError::from);
        };
        let slot = ChecksumSlot::default();
        let body = checksummed(read_body_stream(body), alg, slot.clone());
        self.put_part(target, Some(len), None, body, Some(slot))
            .await
            .map_err(StoreError::from)
    }

    pub async fn parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<BTreeMap<u32, PartRecord>, StoreError> {
        self.replicas()
            .parts(bucket, key, upload_id)
            .await
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// Concatenates the named parts into one content file and makes it bucket/key, if
    /// `precondition` (`If-None-Match: *`, `If-Match`) holds when the command applies. A
    /// condition that fails is found before the parts are read where it already fails
    /// then; one that a racing writer breaks meanwhile leaves the upload as it was and
    /// the concatenated copies as junk for Valkyrie.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        requested: Vec<PartRef>,
        precondition: Option<WritePrecondition>,
        whole: Option<Checksum>,
    ) -> Result<Stored, StoreError> {
        let upload = match self.check_upload(bucket, key, upload_id).await {
            Err(StoreError::NoSuchUpload) => {
                return self.completed_already(bucket, key, &requested).await;
            }
            other => other?,
        };
        if let Some(pre) = &precondition {
            self.check_write_precondition(bucket, key, pre).await?;
        }
        if requested.is_empty() {
            return Err(StoreError::NoPartsNamed);
        }
        let stored = self.parts(bucket, key, upload_id).await?;
        let mut chosen: Vec<(u32, PartRecord)> = Vec::with_capacity(requested.len());
        for (i, r) in requested.iter().enumerate() {
            if i > 0 && r.number <= requested[i - 1].number {
                return Err(StoreError::PartsOutOfOrder);
            }
            let part = stored
                .get(&r.number)
                .ok_or(StoreError::InvalidPart(r.number))?;
            let given = r.etag.trim().trim_matches('"');
            if given != hex::encode(part.md5) {
                return Err(StoreError::InvalidPart(r.number));
            }
            chosen.push((r.number, part.clone()));
        }
        let last = chosen.len() - 1;
        if let Some((n, _)) = chosen
            .iter()
            .enumerate()
            .find(|(i, (_, p))| *i < last && p.size_bytes < PART_BYTES_MIN)
            .map(|(_, p)| p)
        {
            return Err(StoreError::PartTooSmall(*n));
        }
        let checksum = self
            .completed_checksum(
                (bucket, key, upload_id),
                &requested,
                &chosen,
                whole.as_ref(),
            )
            .await?;
        let size_bytes: u64 = chosen.iter().map(|(_, p)| p.size_bytes).sum();
        if size_bytes > self.limits().object_bytes_max {
            return Err(StoreError::EntityTooLarge {
                max_bytes: self.limits().object_bytes_max,
            });
        }
        // Stream the parts, verified, into one new upload.
        let mut readers = Vec::with_capacity(chosen.len());
        for (_, p) in &chosen {
            let expect = Expect {
                size_bytes: p.size_bytes,
                crc32: p.crc32,
            };
            readers.push(
                self.content_reader(p.sha1, expect)
                    .await
                    .map_err(StoreError::Read)?,
            );
        }
        let body = futures_util::stream::iter(readers)
            .then(|reader| reader.open())
            .map(|r| match r {
                Ok(body) => read_body_stream(body).left_stream(),
                Err(e) => futures_util::stream::iter([Err(StoreError::Read(e))]).right_stream(),
            })
            .flatten();
        // The body is stored content: its failure is the store's own.
        let staged = self
            .stage(Some(size_bytes), Box::pin(body))
            .await
            .map_err(StoreError::from)?;
        let mut md5s = md5::Md5::new();
        for (_, p) in &chosen {
            md5s.update(p.md5);
        }
        let d = staged.digests;
        // An upload that declared no algorithm: a CRC32 sent at completion is checked
        // against the whole object's, which every object has.
        if let Some(w) = whole.as_ref().filter(|_| checksum.is_none())
            && w.value.trim() != crate::checksums::crc32_base64(d.crc32)
        {
            staged.discard().await;
            return Err(StoreError::ChecksumMismatch(format!(
                "The x-amz-checksum-{} you specified did not match the calculated checksum.",
                w.algorithm
            )));
        }
        let mut object = NewObject::new(
            d.sha1,
            Magic::random(),
            d.size_bytes,
            d.crc32,
            md5s.finalize().into(),
        );
        object.created_ms = now_ms();
        object.content_type = upload.content_type;
        object.user_meta = upload.user_meta;
        object.headers = upload.headers;
        object.part_sizes = chosen.iter().map(|(_, p)| p.size_bytes).collect();
        object.checksum = checksum;
        let parts: Vec<(u32, Sha1)> = chosen.iter().map(|(n, p)| (*n, p.sha1)).collect();
        let command = |source| {
            let complete = Command::CompleteUpload {
                upload_id: upload_id.to_string(),
                object: object.clone(),
                parts: parts.clone(),
                source,
                now_secs: now_secs(),
            };
            match &precondition {
                Some(pre) => Command::Conditional {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    precondition: pre.clone(),
                    command: Box::new(complete),
                },
                None => complete,
            }
        };
        match self
            .commit_content::<ObjectPut>(staged, Some((bucket, key)), command)
            .await
        {
            Ok(put) => Ok(Stored {
                record: object.into_record(put.seq),
                version_id: put.version_id,
            }),
            // A racing completion of the same upload got there first.
            Err(CommitError::Meta(MetaError::NoSuchUpload)) => {
                self.completed_already(bucket, key, &requested).await
            }
            Err(CommitError::Meta(e)) if precondition.is_some() => {
                Err(StoreError::conditional(e, bucket, key))
            }
            Err(e) => Err(e.in_bucket(bucket)),
        }
    }

    /// The checksum the object of a completion gets, from what the upload declared and
    /// its parts' checksums: each part named with a checksum must have that one (else
    /// InvalidPart), a composite upload needs each part's named (InvalidRequest, as S3),
    /// and a full-object checksum sent at completion must be the object's (BadDigest).
    /// None for an upload that declared no algorithm.
    async fn completed_checksum(
        &self,
        (bucket, key, upload_id): (&str, &str, &str),
        requested: &[PartRef],
        chosen: &[(u32, PartRecord)],
        whole: Option<&Checksum>,
    ) -> Result<Option<Checksum>, StoreError> {
        let sums = self.upload_checksums(bucket, key, upload_id).await?;
        let Some(declared) = sums.declared else {
            if let Some(w) = whole
                && w.algorithm != Algorithm::Crc32.name()
            {
                return Err(StoreError::ChecksumInvalid(format!(
                    "The upload was created without a checksum algorithm: x-amz-checksum-{} cannot be checked",
                    w.algorithm
                )));
            }
            // A part named with a checksum the gateway does not keep cannot be checked.
            if let Some(r) = requested.iter().find(|r| r.checksum.is_some()) {
                return Err(StoreError::InvalidPart(r.number));
            }
            return Ok(None);
        };
        let alg = declared_algorithm(&declared)?;
        let mut parts = Vec::with_capacity(chosen.len());
        for (r, (n, p)) in requested.iter().zip(chosen) {
            let stored = sums
                .parts
                .get(n)
                .filter(|c| c.algorithm == alg.name())
                .ok_or(StoreError::InvalidPart(*n))?;
            match &r.checksum {
                Some(c) if c.algorithm != stored.algorithm || c.value.trim() != stored.value => {
                    return Err(StoreError::InvalidPart(*n));
                }
                None if declared.kind == ChecksumType::Composite => {
                    return Err(StoreError::ChecksumInvalid(format!(
                        "The upload was created using a {} checksum. The complete request must include the checksum for each part. It was missing for part {n} in the request.",
                        alg.name()
                    )));
                }
                _ => {}
            }
            parts.push((stored.value.clone(), p.size_bytes));
        }
        let value = match declared.kind {
            ChecksumType::Composite => {
                let values: Vec<String> = parts.into_iter().map(|(v, _)| v).collect();
                checksums::composite(alg, &values)
            }
            ChecksumType::FullObject => checksums::full_object(alg, &parts),
        }
        .ok_or_else(|| {
            StoreError::Internal(format!(
                "upload {upload_id}: a stored part checksum is not one"
            ))
        })?;
        if let Some(w) = whole {
            if w.algorithm != alg.name() {
                return Err(StoreError::ChecksumInvalid(format!(
                    "The upload was created using a {} checksum: x-amz-checksum-{} does not apply",
                    alg.name(),
                    w.algorithm
                )));
            }
            let given = w.value.trim();
            // A composite value may be sent with or without its `-<parts>`.
            let ours = value.as_str();
            let bare = ours.rsplit_once('-').map_or(ours, |(b, _)| b);
            if given != ours && !(declared.kind == ChecksumType::Composite && given == bare) {
                return Err(StoreError::ChecksumMismatch(format!(
                    "The x-amz-checksum-{} you specified did not match the calculated checksum.",
                    alg.name()
                )));
            }
        }
        Ok(Some(Checksum {
            algorithm: alg.name().to_string(),
            value,
        }))
    }

    /// A CompleteMultipartUpload of an upload that is gone: if the key's object is what
    /// the named parts make (its multipart ETag is theirs), the upload was completed, by a
    /// first attempt whose answer was lost or by a racing one, and that object is the
    /// answer, as S3 answers such a retry. Otherwise `NoSuchUpload`.
    async fn completed_already(
        &self,
        bucket: &str,
        key: &str,
        requested: &[PartRef],
    ) -> Result<Stored, StoreError> {
        let Some(etag) = multipart_etag(requested) else {
            return Err(StoreError::NoSuchUpload);
        };
        match self.head_current(bucket, key).await {
            Ok(head) if head.record.etag() == etag => Ok(Stored {
                record: head.record,
                version_id: head.version_id,
            }),
            Ok(_) | Err(StoreError::NoSuchKey(_) | StoreError::CurrentIsDeleteMarker { .. }) => {
                Err(StoreError::NoSuchUpload)
            }
            Err(e) => Err(e),
        }
    }

    pub async fn abort_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        self.check_upload(bucket, key, upload_id).await?;
        let cmd = Command::AbortUpload {
            upload_id: upload_id.to_string(),
            now_secs: now_secs(),
        };
        // Named by id only: it goes to the group owning the upload's key.
        match self.replicas().execute_at(bucket, key, cmd).await {
            Ok(_) => Ok(()),
            Err(MetaError::NoSuchUpload) => Err(StoreError::NoSuchUpload),
            Err(e) => Err(StoreError::meta(e, bucket)),
        }
    }

    /// Uploads in progress in a bucket, ordered by key then upload id, each with the
    /// checksum it declared.
    pub async fn uploads(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<(String, String)>,
        max: usize,
    ) -> Result<UploadsPage, StoreError> {
        self.bucket(bucket).await?;
        self.replicas()
            .uploads(bucket, prefix, after, max)
            .await
            .map_err(|e| StoreError::meta(e, bucket))
    }
}

/// The command that stores a part: with its checksum (format 4) only when it has one.
fn part_command(
    upload_id: &str,
    number: u32,
    part: &PartRecord,
    source: meta::ContentSource,
    checksum: Option<Checksum>,
) -> Command {
    match checksum {
        Some(checksum) => Command::PutPartWithChecksum {
            upload_id: upload_id.to_string(),
            part_number: number,
            part: part.clone(),
            source,
            now_secs: now_secs(),
            checksum,
        },
        None => Command::PutPart {
            upload_id: upload_id.to_string(),
            part_number: number,
            part: part.clone(),
            source,
            now_secs: now_secs(),
        },
    }
}

/// `body` checksummed with `alg` as it streams; the value is left in `slot` at its end.
fn checksummed(
    body: impl Stream<Item = Result<Bytes, StoreError>> + Unpin + Send + 'static,
    alg: Algorithm,
    slot: ChecksumSlot,
) -> impl Stream<Item = Result<Bytes, StoreError>> + Unpin + Send {
    let hasher = std::sync::Arc::new(std::sync::Mutex::new(Some(alg.hasher())));
    let at_end = hasher.clone();
    let lock = |m: &std::sync::Mutex<Option<checksums::Hasher>>| {
        std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()))
    };
    Box::pin(
        body.map(move |chunk| {
            if let Ok(b) = &chunk
                && let Some(h) = hasher.lock().unwrap_or_else(|e| e.into_inner()).as_mut()
            {
                h.update(b);
            }
            chunk
        })
        .chain(
            futures_util::stream::once(async move {
                if let Some(h) = lock(&at_end) {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Checksum {
                        algorithm: alg.name().to_string(),
                        value: h.finish(),
                    });
                }
                None
            })
            .filter_map(|end: Option<Result<Bytes, StoreError>>| async move { end }),
        ),
    )
}

/// A read body as a stream of bytes, for feeding it into another upload.
pub fn read_body_stream(
    body: ReadBody,
) -> impl Stream<Item = Result<Bytes, StoreError>> + Unpin + Send {
    match body {
        ReadBody::Buffered(b) => futures_util::stream::iter([Ok(b)]).left_stream(),
        ReadBody::Stream(s) => s
            .map(|r| r.map_err(|e| StoreError::Internal(format!("reading a stored copy: {e}"))))
            .right_stream(),
    }
}
