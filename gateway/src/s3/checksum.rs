//! Flexible checksums: `x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}`.
//!
//! Current SDKs send one by default, in a header or (with `aws-chunked` bodies) in a
//! trailer. The body is checksummed as it streams; a mismatch ends the body with BadDigest,
//! which aborts the upload before anything is stored. The verified value is kept with the
//! object and returned on GET/HEAD when the client asks with `x-amz-checksum-mode: ENABLED`.

use base64::Engine as _;
use bytes::Bytes;
use futures_util::Stream;
use http::HeaderMap;
use sha2::Digest as _;

use super::body_check::{EndCheck, check_at_end};
use super::chunked::TrailerSlot;
use super::error::{ErrorCode, S3Error};
use crate::store::ChecksumSlot;
use meta::Checksum;

const CRC32C: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
const CRC64NVME: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_NVME);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64Nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "crc32",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Crc64Nvme => "crc64nvme",
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
        }
    }

    pub fn header(self) -> String {
        format!("x-amz-checksum-{}", self.name())
    }

    pub fn parse(name: &str) -> Option<Self> {
        let n = name.trim().to_ascii_lowercase();
        let n = n.strip_prefix("x-amz-checksum-").unwrap_or(&n);
        Algorithm::ALL.into_iter().find(|a| a.name() == n)
    }

    fn hasher(self) -> Hasher {
        match self {
            Algorithm::Crc32 => Hasher::Crc32(crc32fast::Hasher::new()),
            Algorithm::Crc32c => Hasher::Crc32c(CRC32C.digest()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(CRC64NVME.digest()),
            Algorithm::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }
}

enum Hasher {
    Crc32(crc32fast::Hasher),
    Crc32c(crc::Digest<'static, u32, crc::Table<16>>),
    Crc64Nvme(crc::Digest<'static, u64, crc::Table<16>>),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn update(&mut self, buf: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(buf),
            Hasher::Crc32c(h) => h.update(buf),
            Hasher::Crc64Nvme(h) => h.update(buf),
            Hasher::Sha1(h) => h.update(buf),
            Hasher::Sha256(h) => h.update(buf),
        }
    }

    /// The base64 of the big-endian digest, as S3 writes checksums.
    fn finish(self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        match self {
            Hasher::Crc32(h) => b64.encode(h.finalize().to_be_bytes()),
            Hasher::Crc32c(h) => b64.encode(h.finalize().to_be_bytes()),
            Hasher::Crc64Nvme(h) => b64.encode(h.finalize().to_be_bytes()),
            Hasher::Sha1(h) => b64.encode(h.finalize()),
            Hasher::Sha256(h) => b64.encode(h.finalize()),
        }
    }
}

/// The base64 CRC32 S3 reports for a CRC32 we already keep.
pub fn crc32_base64(crc32: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(crc32.to_be_bytes())
}

/// Where the expected value comes from.
#[derive(Clone)]
pub enum Expected {
    Header(String),
    Trailer(TrailerSlot),
    /// The client named the algorithm but sent no value: compute and keep it.
    Compute,
}

/// What a request asks to be checked, from its headers.
pub fn requested(
    headers: &HeaderMap,
    trailers: Option<&TrailerSlot>,
) -> Result<Option<(Algorithm, Expected)>, S3Error> {
    let invalid = |m: String| S3Error::new(ErrorCode::InvalidRequest, m);
    let mut found = None;
    for alg in Algorithm::ALL {
        if let Some(v) = headers.get(alg.header()) {
            if found.is_some() {
                return Err(invalid("Expecting a single x-amz-checksum- header".into()));
            }
            let v = v
                .to_str()
                .map_err(|_| invalid(format!("{} is not valid text", alg.header())))?;
            found = Some((alg, Expected::Header(v.trim().to_string())));
        }
    }
    if found.is_some() {
        return Ok(found);
    }
    if let Some(t) = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()) {
        let alg = Algorithm::parse(t).ok_or_else(|| invalid(format!("unsupported trailer {t}")))?;
        let slot =
            trailers.ok_or_else(|| invalid("x-amz-trailer needs an aws-chunked body".into()))?;
        return Ok(Some((alg, Expected::Trailer(slot.clone()))));
    }
    if let Some(a) = headers
        .get("x-amz-sdk-checksum-algorithm")
        .and_then(|v| v.to_str().ok())
    {
        let alg = Algorithm::parse(a)
            .ok_or_else(|| invalid(format!("unsupported checksum algorithm {a}")))?;
        return Ok(Some((alg, Expected::Compute)));
    }
    Ok(None)
}

fn bad_digest(alg: Algorithm) -> S3Error {
    S3Error::new(
        ErrorCode::BadDigest,
        format!(
            "The {} you specified did not match the calculated checksum.",
            alg.header()
        ),
    )
}

/// Wraps a body: checksums it as it streams and, at its end, compares with the expected
/// value, ending in BadDigest on a mismatch; a verified value goes into `out`.
pub fn verify<S>(
    body: S,
    alg: Algorithm,
    expected: Expected,
    out: ChecksumSlot,
) -> impl Stream<Item = Result<Bytes, S3Error>> + Unpin + Send
where
    S: Stream<Item = Result<Bytes, S3Error>> + Unpin + Send + 'static,
{
    check_at_end(
        body,
        FlexibleChecksum {
            alg,
            hasher: alg.hasher(),
            expected,
            out,
        },
    )
}

struct FlexibleChecksum {
    alg: Algorithm,
    hasher: Hasher,
    expected: Expected,
    out: ChecksumSlot,
}

impl EndCheck for FlexibleChecksum {
    type Error = S3Error;

    fn update(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
    }

    fn finish(self) -> Result<(), S3Error> {
        let computed = self.hasher.finish();
        let header = self.alg.header();
        let want = match &self.expected {
            Expected::Header(v) => Some(v.clone()),
            Expected::Trailer(slot) => Some(
                slot.get()
                    .and_then(|t| t.get(&header).map(str::to_string))
                    .ok_or_else(|| {
                        S3Error::new(
                            ErrorCode::InvalidRequest,
                            format!("the trailer {header} was announced but not sent"),
                        )
                    })?,
            ),
            Expected::Compute => None,
        };
        if want.is_some_and(|w| w.trim() != computed) {
            return Err(bad_digest(self.alg));
        }
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = Some(Checksum {
            algorithm: self.alg.name().to_string(),
            value: computed,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    fn digest(alg: Algorithm, data: &[u8]) -> String {
        let mut h = alg.hasher();
        h.update(data);
        h.finish()
    }

    #[test]
    fn known_check_values() {
        // The CRC catalogue's check values over "123456789".
        let b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(
            digest(Algorithm::Crc32, b"123456789"),
            b64.encode(0xCBF43926u32.to_be_bytes())
        );
        assert_eq!(
            digest(Algorithm::Crc32c, b"123456789"),
            b64.encode(0xE3069283u32.to_be_bytes())
        );
        assert_eq!(
            digest(Algorithm::Crc64Nvme, b"123456789"),
            b64.encode(0xAE8B14860A799888u64.to_be_bytes())
        );
        assert_eq!(
            digest(Algorithm::Sha256, b""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        assert_eq!(digest(Algorithm::Sha1, b""), "2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
    }

    #[tokio::test]
    async fn a_wrong_value_ends_the_body_in_bad_digest() {
        let body = futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"1234")),
            Ok(Bytes::from_static(b"56789")),
        ]);
        let out = ChecksumSlot::default();
        let good = digest(Algorithm::Crc32c, b"123456789");
        let items: Vec<_> = verify(
            body,
            Algorithm::Crc32c,
            Expected::Header(good.clone()),
            out.clone(),
        )
        .collect()
        .await;
        assert!(items.iter().all(|i| i.is_ok()));
        assert_eq!(
            out.lock().unwrap().as_ref().map(|c| c.value.clone()),
            Some(good)
        );

        let body = futures_util::stream::iter(vec![Ok(Bytes::from_static(b"123456789"))]);
        let out = ChecksumSlot::default();
        let items: Vec<_> = verify(
            body,
            Algorithm::Crc32,
            Expected::Header("AAAAAA==".into()),
            out.clone(),
        )
        .collect()
        .await;
        assert_eq!(
            items.last().unwrap().as_ref().unwrap_err().code,
            ErrorCode::BadDigest
        );
        assert!(out.lock().unwrap().is_none());
    }
}
