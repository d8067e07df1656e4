//! The redb tables and the byte format of their records.
//!
//! FileDB's record and its reference rules have their own file, [`filedb`], with the
//! back of the envelope for the table that grows with every distinct attachment.
//! Hot tables (`files`, `deleting`) use fixed-size little-endian records with no serde;
//! cold or variable ones (`objects`, `buckets`, `pairs`) use postcard behind a version byte.

use placement::{Magic, PairId, PairRecord, Sha1};
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use super::MetaError;

pub use super::filedb::{FLAG_DO_NOT_DELETE, FileRecord};

/// FileDB (the article's space0): sha1 -> refs, magic, flags, pair.
pub const FILES: TableDefinition<[u8; 20], [u8; 16]> = TableDefinition::new("files");
/// The article's space1: content whose last reference is gone, waiting for Valkyrie.
pub const DELETING: TableDefinition<[u8; 20], [u8; 12]> = TableDefinition::new("deleting");
/// PairDB: pair id -> postcard [`PairRecord`].
pub const PAIRS: TableDefinition<u32, &[u8]> = TableDefinition::new("pairs");
/// Bucket name -> postcard [`BucketRecord`].
pub const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
/// The S3 index: (bucket, key bytes) -> postcard [`ObjectRecord`]. Keys are bytes so that
/// listing can seek past a common prefix by incrementing its last byte.
pub const OBJECTS: TableDefinition<(&str, &[u8]), &[u8]> = TableDefinition::new("objects");
/// Noncurrent object versions and delete markers of versioned buckets (see
/// `docs/versions.md`): (bucket, key bytes, `u64::MAX - number`, newest first) ->
/// [`crate::versions::VersionRecord`]. The current version of a key stays in [`OBJECTS`].
pub const VERSIONS: TableDefinition<(&str, &[u8], u64), &[u8]> = TableDefinition::new("versions");
/// Where a key's `null` version is when it is in [`VERSIONS`] (a noncurrent null version,
/// or a null delete marker): (bucket, key bytes) -> its number. A suspended bucket's PUT
/// and DELETE replace the null version wherever it is, and a key may have any number of
/// versions: this keeps that one lookup.
pub const NULL_VERSIONS: TableDefinition<(&str, &[u8]), u64> =
    TableDefinition::new("null_versions");
/// Multipart uploads in progress: upload id -> postcard [`UploadRecord`].
pub const UPLOADS: TableDefinition<&str, &[u8]> = TableDefinition::new("uploads");
/// Parts of uploads in progress: (upload id, part number) -> postcard [`PartRecord`].
/// Each part is content in its own right, referenced in FileDB until the upload ends.
pub const PARTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("parts");
/// Named counters (the object sequence number).
pub const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

pub const OBJECT_SEQ: &str = "object_seq";

/// The state machine's own Raft bookkeeping, written in the same transactions as the
/// commands: `last_applied` (postcard `Option<LogId>`) and `membership` (postcard
/// `StoredMembership`). See `raft/machine.rs`.
pub const RAFT_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");

/// Record format version prefixed to every postcard value.
const FORMAT_V1: u8 = 1;

/// One `deleting` entry: the pair that held the content and since when it is unreferenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletingRecord {
    pub pair: PairId,
    pub since_secs: u64,
}

impl DeletingRecord {
    pub fn encode(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        out[0..4].copy_from_slice(&self.pair.0.to_le_bytes());
        out[4..12].copy_from_slice(&self.since_secs.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8; 12]) -> Self {
        let mut since = [0u8; 8];
        since.copy_from_slice(&b[4..12]);
        DeletingRecord {
            pair: PairId(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            since_secs: u64::from_le_bytes(since),
        }
    }
}

/// GOVERNANCE yields to a caller allowed to bypass it; COMPLIANCE to nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockMode {
    Governance,
    Compliance,
}

/// A bucket's object lock configuration (`PutObjectLockConfiguration`): the retention a
/// new version gets when its write names none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    pub default_retention: Option<DefaultRetention>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: LockMode,
    pub period: RetentionPeriod,
}

/// S3 takes days or years (a year is 365 days, as S3 counts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetentionPeriod {
    Days(u32),
    Years(u32),
}

/// A bucket's versioning state. It leaves `Unversioned` once and never comes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Versioning {
    #[default]
    Unversioned,
    Enabled,
    Suspended,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub created_ms: u64,
    /// The bucket's CORS rules (PutBucketCors), for browser downloads.
    pub cors: Option<Vec<CorsRule>>,
    /// The access key that created the bucket; `None` is the bootstrap key (and every
    /// bucket created before keys existed).
    pub owner: Option<String>,
    /// Whether PUT and DELETE keep the versions they replace (see `docs/versions.md`).
    pub versioning: Versioning,
    /// Object lock, enabled for good (with versioning) when set.
    pub object_lock: Option<LockConfig>,
}

/// A bucket record as written before versioning (format 2).
#[derive(Serialize, Deserialize)]
struct BucketRecordV2 {
    created_ms: u64,
    cors: Option<Vec<CorsRule>>,
    owner: Option<String>,
}

/// A bucket record as written before owners: read as owned by the bootstrap key.
#[derive(Deserialize)]
struct BucketRecordV1 {
    created_ms: u64,
    cors: Option<Vec<CorsRule>>,
}

/// Version byte of bucket records with an owner.
const BUCKET_FORMAT_V2: u8 = 2;
/// Version byte of bucket records with a versioning state, written only for a bucket whose
/// state is not `Unversioned`: a group that never turns versioning on keeps format 2.
const BUCKET_FORMAT_V3: u8 = 3;

impl BucketRecord {
    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        let corrupt = |e: postcard::Error| MetaError::Corrupt(e.to_string());
        if self.versioning == Versioning::Unversioned && self.object_lock.is_none() {
            let v2 = BucketRecordV2 {
                created_ms: self.created_ms,
                cors: self.cors.clone(),
                owner: self.owner.clone(),
            };
            let mut out = vec![BUCKET_FORMAT_V2];
            out.extend(postcard::to_stdvec(&v2).map_err(corrupt)?);
            return Ok(out);
        }
        let mut out = vec![BUCKET_FORMAT_V3];
        out.extend(postcard::to_stdvec(self).map_err(corrupt)?);
        Ok(out)
    }

    /// The versioning state of an encoded record, without decoding the rest of it: every
    /// format before 3 is unversioned (a GET asks this of every read).
    pub fn versioning_of(bytes: &[u8]) -> Result<Versioning, MetaError> {
        match bytes.first() {
            Some(&BUCKET_FORMAT_V3) => Ok(Self::decode(bytes)?.versioning),
            _ => Ok(Versioning::Unversioned),
        }
    }

    /// Reads every version, so a data folder from before owners or versions opens
    /// unchanged (its records are rewritten only when a command changes them).
    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        let corrupt = |e: postcard::Error| MetaError::Corrupt(format!("buckets: {e}"));
        match bytes.split_first() {
            Some((&BUCKET_FORMAT_V3, rest)) => postcard::from_bytes(rest).map_err(corrupt),
            Some((&BUCKET_FORMAT_V2, rest)) => {
                let v2: BucketRecordV2 = postcard::from_bytes(rest).map_err(corrupt)?;
                Ok(BucketRecord {
                    created_ms: v2.created_ms,
                    cors: v2.cors,
                    owner: v2.owner,
                    versioning: Versioning::Unversioned,
                    object_lock: None,
                })
            }
            _ => {
                let v1: BucketRecordV1 = decode_versioned("buckets", bytes)?;
                Ok(BucketRecord {
                    created_ms: v1.created_ms,
                    cors: v1.cors,
                    owner: None,
                    versioning: Versioning::Unversioned,
                    object_lock: None,
                })
            }
        }
    }
}

/// One CORS rule, as S3's `CORSRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    pub id: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub max_age_secs: Option<u32>,
}

/// One S3 object: the index entry that references a content file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub sha1: Sha1,
    /// This reference's own magic, so that deleting the object subtracts exactly what
    /// creating it added.
    pub magic: Magic,
    pub size_bytes: u64,
    pub crc32: u32,
    pub md5: [u8; 16],
    pub content_type: Option<String>,
    /// `x-amz-meta-*` pairs, names lowercased without the prefix, in request order.
    pub user_meta: Vec<(String, String)>,
    pub created_ms: u64,
    /// Monotonic sequence number, assigned by `apply`.
    pub seq: u64,
    /// Standard headers stored with the object and returned on GET/HEAD
    /// (Content-Encoding, Content-Disposition, Content-Language, Cache-Control, Expires),
    /// lowercase names.
    pub headers: Vec<(String, String)>,
    /// Sizes of the parts of a multipart upload, in order; empty for a single PUT. With
    /// parts, `md5` is the MD5 of the parts' binary MD5s, as S3's multipart ETag.
    pub part_sizes: Vec<u64>,
    /// The flexible checksum the client sent with the body, if any.
    pub checksum: Option<Checksum>,
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub bucket: String,
    pub key: String,
    pub content_type: Option<String>,
    pub user_meta: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub created_ms: u64,
}

/// One uploaded part: a reference to its content, with the digests S3 reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub sha1: Sha1,
    pub magic: Magic,
    pub size_bytes: u64,
    pub md5: [u8; 16],
    pub crc32: u32,
    pub created_ms: u64,
}

impl PartRecord {
    pub fn etag(&self) -> String {
        format!("\"{}\"", hex::encode(self.md5))
    }
}

/// A flexible checksum (`x-amz-checksum-*`) as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    /// Lowercase algorithm name: crc32, crc32c, crc64nvme, sha1, sha256.
    pub algorithm: String,
    /// The base64 value.
    pub value: String,
}

impl ObjectRecord {
    /// A single-part object with no optional attributes; `seq` is set by `apply`.
    pub fn new(sha1: Sha1, magic: Magic, size_bytes: u64, crc32: u32, md5: [u8; 16]) -> Self {
        ObjectRecord {
            sha1,
            magic,
            size_bytes,
            crc32,
            md5,
            content_type: None,
            user_meta: Vec::new(),
            created_ms: 0,
            seq: 0,
            headers: Vec::new(),
            part_sizes: Vec::new(),
            checksum: None,
        }
    }

    /// The S3 ETag: the quoted hex MD5 of the body, or of the part MD5s with `-<parts>`.
    pub fn etag(&self) -> String {
        if self.part_sizes.is_empty() {
            format!("\"{}\"", hex::encode(self.md5))
        } else {
            format!("\"{}-{}\"", hex::encode(self.md5), self.part_sizes.len())
        }
    }

    /// Sets the sequence number `apply` assigns.
    pub fn into_record(mut self, seq: u64) -> Self {
        self.seq = seq;
        self
    }
}

pub fn encode_versioned<T: Serialize>(value: &T) -> Result<Vec<u8>, MetaError> {
    let mut out = vec![FORMAT_V1];
    out.extend(postcard::to_stdvec(value).map_err(|e| MetaError::Corrupt(e.to_string()))?);
    Ok(out)
}

pub fn decode_versioned<T: for<'de> Deserialize<'de>>(
    table: &'static str,
    bytes: &[u8],
) -> Result<T, MetaError> {
    match bytes.split_first() {
        Some((&FORMAT_V1, rest)) => {
            postcard::from_bytes(rest).map_err(|e| MetaError::Corrupt(format!("{table}: {e}")))
        }
        Some((v, _)) => Err(MetaError::Corrupt(format!(
            "{table}: unknown record version {v}"
        ))),
        None => Err(MetaError::Corrupt(format!("{table}: empty record"))),
    }
}

pub fn encode_pair(record: &PairRecord) -> Result<Vec<u8>, MetaError> {
    encode_versioned(record)
}

/// Fails with [`MetaError::NoSuchBucket`] unless `bucket` exists.
pub fn check_bucket(txn: &redb::WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    use redb::ReadableTable as _;
    match txn.open_table(BUCKETS)?.get(bucket)? {
        Some(_) => Ok(()),
        None => Err(MetaError::NoSuchBucket),
    }
}

/// The first key of `bucket`, if it holds any object.
pub fn first_key_of(
    txn: &redb::WriteTransaction,
    bucket: &str,
) -> Result<Option<String>, MetaError> {
    use redb::ReadableTable as _;
    let objects = txn.open_table(OBJECTS)?;
    let mut range = objects.range((bucket, &[][..])..)?;
    match range.next() {
        Some(entry) => {
            let (k, _) = entry?;
            let (b, key) = k.value();
            Ok((b == bucket).then(|| String::from_utf8_lossy(key).into_owned()))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_records_round_trip_in_12_bytes() {
        let d = DeletingRecord {
            pair: PairId(3),
            since_secs: 1_700_000_000,
        };
        assert_eq!(DeletingRecord::decode(&d.encode()), d);
    }

    #[test]
    fn unknown_versions_are_errors_not_panics() {
        assert!(BucketRecord::decode(&[9, 1, 2]).is_err());
        assert!(BucketRecord::decode(&[]).is_err());
        let b = BucketRecord {
            created_ms: 5,
            cors: None,
            owner: Some("GKAPP".into()),
            versioning: Versioning::Unversioned,
            object_lock: None,
        };
        let bytes = b.encode().unwrap();
        assert_eq!(
            bytes[0], BUCKET_FORMAT_V2,
            "unversioned: the bytes of before versions"
        );
        assert_eq!(BucketRecord::decode(&bytes).unwrap(), b);
        for versioning in [Versioning::Enabled, Versioning::Suspended] {
            let v = BucketRecord {
                versioning,
                ..b.clone()
            };
            let bytes = v.encode().unwrap();
            assert_eq!(bytes[0], BUCKET_FORMAT_V3);
            assert_eq!(BucketRecord::decode(&bytes).unwrap(), v);
        }
        let locked = BucketRecord {
            versioning: Versioning::Enabled,
            object_lock: Some(crate::versions::LockConfig {
                default_retention: Some(crate::versions::DefaultRetention {
                    mode: crate::versions::LockMode::Compliance,
                    period: crate::versions::RetentionPeriod::Days(7),
                }),
            }),
            ..b.clone()
        };
        let bytes = locked.encode().unwrap();
        assert_eq!(BucketRecord::decode(&bytes).unwrap(), locked);
    }

    #[test]
    fn bucket_records_from_before_owners_belong_to_the_bootstrap_key() {
        #[derive(Serialize)]
        struct Old {
            created_ms: u64,
            cors: Option<Vec<CorsRule>>,
        }
        let old = encode_versioned(&Old {
            created_ms: 7,
            cors: None,
        })
        .unwrap();
        assert_eq!(
            BucketRecord::decode(&old).unwrap(),
            BucketRecord {
                created_ms: 7,
                cors: None,
                owner: None,
                versioning: Versioning::Unversioned,
                object_lock: None,
            }
        );
    }
}
