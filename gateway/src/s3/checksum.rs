//! Flexible checksums: `x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}`.
//!
//! Current SDKs send one by default, in a header or (with `aws-chunked` bodies) in a
//! trailer. The body is checksummed as it streams; a mismatch ends the body with BadDigest,
//! which aborts the upload before anything is stored. The verified value is kept with the
//! object and returned on GET/HEAD when the client asks with `x-amz-checksum-mode: ENABLED`.

use bytes::Bytes;
use futures_util::Stream;
use http::HeaderMap;

use super::body_check::{EndCheck, check_at_end};
use super::chunked::TrailerSlot;
use super::error::{ErrorCode, S3Error};
use crate::store::ChecksumSlot;
use meta::Checksum;

use crate::checksums::Hasher;
pub use crate::checksums::{Algorithm, crc32_base64};

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

/// COMPOSITE for a value with `-<parts>`, else FULL_OBJECT: how S3 tells them apart.
pub fn checksum_type(c: &Checksum) -> &'static str {
    if c.value.contains('-') {
        meta::checksums::ChecksumType::Composite.name()
    } else {
        meta::checksums::ChecksumType::FullObject.name()
    }
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
    use base64::Engine as _;
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
