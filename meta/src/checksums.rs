//! Multipart checksums (`x-amz-checksum-algorithm`, `x-amz-checksum-type`): what an upload
//! declared, each part's checksum, and the part checksums of a completed object.
//!
//! [`UploadRecord`](crate::tables::UploadRecord), [`PartRecord`](crate::tables::PartRecord)
//! and [`ObjectRecord`](crate::tables::ObjectRecord) travel inside Raft log commands whose
//! encoding is not self-describing, so none of them gains a field: this data lives beside
//! them, in two tables of its own, written only by the format-4 commands that carry it.
//!
//! - [`UPLOAD_CHECKSUMS`]: (upload id, 0) -> [`UploadChecksum`], the upload's declaration;
//!   (upload id, n) -> [`Checksum`], part n's. Dropped with the upload.
//! - [`OBJECT_CHECKSUMS`]: (content sha1, magic) of an object's reference ->
//!   [`PartChecksums`], the checksums of the parts it was completed from. The magic is the
//!   reference's own, so the entry goes when that reference is released (whatever removes
//!   the object, `apply::refs::release` is the one way out).
//!
//! The object's own checksum (composite `<base64>-<parts>` or full-object) stays in
//! `ObjectRecord::checksum`, which older formats already carry; its type is told by the
//! `-<parts>` suffix, as S3 writes composite checksums.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::tables::{Checksum, decode_versioned, encode_versioned};

/// (upload id, 0): the upload's [`UploadChecksum`]; (upload id, part number): the part's
/// [`Checksum`].
pub const UPLOAD_CHECKSUMS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("upload_checksums");
/// (sha1, magic) of an object's reference -> [`PartChecksums`].
pub const OBJECT_CHECKSUMS: TableDefinition<([u8; 20], u32), &[u8]> =
    TableDefinition::new("object_checksums");

/// Bound on an algorithm name or a base64 checksum value kept here (the longest real
/// value, a SHA-256 in base64, is 44 characters; a composite one adds `-10000`).
pub const VALUE_BYTES_MAX: usize = 64;

/// How part checksums make the object's (S3's `x-amz-checksum-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChecksumType {
    /// The checksum of the parts' binary checksums, `-<parts>` appended.
    Composite,
    /// The checksum of the whole object's bytes (CRC algorithms only).
    FullObject,
}

impl ChecksumType {
    /// S3's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::Composite => "COMPOSITE",
            ChecksumType::FullObject => "FULL_OBJECT",
        }
    }
}

/// What CreateMultipartUpload declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadChecksum {
    /// Lowercase algorithm name, as [`Checksum::algorithm`].
    pub algorithm: String,
    pub kind: ChecksumType,
}

/// The checksums of a completed object's parts, in part order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartChecksums {
    pub algorithm: String,
    /// Base64 values, one per part.
    pub parts: Vec<String>,
}

impl UploadChecksum {
    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        encode_versioned(self)
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        decode_versioned("upload_checksums", bytes)
    }
}

impl PartChecksums {
    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        encode_versioned(self)
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        decode_versioned("object_checksums", bytes)
    }
}

/// A part's checksum as stored in [`UPLOAD_CHECKSUMS`].
pub fn encode_part(c: &Checksum) -> Result<Vec<u8>, MetaError> {
    encode_versioned(c)
}

pub fn decode_part(bytes: &[u8]) -> Result<Checksum, MetaError> {
    decode_versioned("upload_checksums", bytes)
}

/// Records an upload's declaration.
pub fn put_upload(
    txn: &WriteTransaction,
    upload_id: &str,
    checksum: &UploadChecksum,
) -> Result<(), MetaError> {
    txn.open_table(UPLOAD_CHECKSUMS)?
        .insert((upload_id, 0), checksum.encode()?.as_slice())?;
    Ok(())
}

/// Sets (or with `None` clears) part `number`'s checksum.
pub fn put_part(
    txn: &WriteTransaction,
    upload_id: &str,
    number: u32,
    checksum: Option<&Checksum>,
) -> Result<(), MetaError> {
    let mut table = txn.open_table(UPLOAD_CHECKSUMS)?;
    match checksum {
        Some(c) => {
            table.insert((upload_id, number), encode_part(c)?.as_slice())?;
        }
        None => {
            table.remove((upload_id, number))?;
        }
    }
    Ok(())
}

/// The declaration of an upload and its parts' checksums, as `table` holds them.
pub fn read_upload(
    table: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
    upload_id: &str,
) -> Result<UploadChecksums, MetaError> {
    let mut out = UploadChecksums::default();
    for entry in table.range((upload_id, 0)..=(upload_id, u32::MAX))? {
        let (k, v) = entry?;
        match k.value().1 {
            0 => out.declared = Some(UploadChecksum::decode(v.value())?),
            n => {
                out.parts.insert(n, decode_part(v.value())?);
            }
        }
    }
    Ok(out)
}

/// An upload's checksums: its declaration and each part's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadChecksums {
    pub declared: Option<UploadChecksum>,
    pub parts: std::collections::BTreeMap<u32, Checksum>,
}

/// Drops an upload's entries (it completed or was aborted).
pub fn drop_upload(txn: &WriteTransaction, upload_id: &str) -> Result<(), MetaError> {
    let mut table = txn.open_table(UPLOAD_CHECKSUMS)?;
    for entry in table.extract_from_if((upload_id, 0)..=(upload_id, u32::MAX), |_, _| true)? {
        entry?;
    }
    Ok(())
}

/// At completion: if the upload declared an algorithm and each of `parts` has a checksum
/// of it, the object referenced by (sha1, magic) keeps them (GetObjectAttributes, GET of a
/// part). Called before [`drop_upload`].
pub fn keep_for_object(
    txn: &WriteTransaction,
    upload_id: &str,
    parts: &[u32],
    object: (&[u8; 20], u32),
) -> Result<(), MetaError> {
    let found = read_upload(&txn.open_table(UPLOAD_CHECKSUMS)?, upload_id)?;
    let Some(declared) = found.declared else {
        return Ok(());
    };
    let mut values = Vec::with_capacity(parts.len());
    for n in parts {
        match found.parts.get(n) {
            Some(c) if c.algorithm == declared.algorithm => values.push(c.value.clone()),
            _ => return Ok(()),
        }
    }
    let record = PartChecksums {
        algorithm: declared.algorithm,
        parts: values,
    };
    txn.open_table(OBJECT_CHECKSUMS)?
        .insert((*object.0, object.1), record.encode()?.as_slice())?;
    Ok(())
}

/// The reference (sha1, magic) is gone: so are its part checksums.
pub fn release(txn: &WriteTransaction, sha1: &[u8; 20], magic: u32) -> Result<(), MetaError> {
    txn.open_table(OBJECT_CHECKSUMS)?.remove((*sha1, magic))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_own_types() {
        for kind in [ChecksumType::Composite, ChecksumType::FullObject] {
            let u = UploadChecksum {
                algorithm: "crc32c".into(),
                kind,
            };
            assert_eq!(UploadChecksum::decode(&u.encode().unwrap()).unwrap(), u);
        }
        let p = PartChecksums {
            algorithm: "sha256".into(),
            parts: vec!["47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".into(); 3],
        };
        assert_eq!(PartChecksums::decode(&p.encode().unwrap()).unwrap(), p);
        let c = Checksum {
            algorithm: "crc64nvme".into(),
            value: "AAAAAAAAAAA=".into(),
        };
        assert_eq!(decode_part(&encode_part(&c).unwrap()).unwrap(), c);
        assert!(UploadChecksum::decode(&[9, 0]).is_err());
        assert!(PartChecksums::decode(&[]).is_err());
    }

    /// The bytes of this format, written down: a change to the types that moves them
    /// breaks every data folder and log that holds them.
    #[test]
    fn the_encoding_is_stable() {
        let u = UploadChecksum {
            algorithm: "crc32".into(),
            kind: ChecksumType::FullObject,
        };
        assert_eq!(u.encode().unwrap(), [1, 5, b'c', b'r', b'c', b'3', b'2', 1]);
        let p = PartChecksums {
            algorithm: "sha1".into(),
            parts: vec!["x".into()],
        };
        assert_eq!(
            p.encode().unwrap(),
            [1, 4, b's', b'h', b'a', b'1', 1, 1, b'x']
        );
    }
}
