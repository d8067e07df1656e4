//! Checksum algorithms of S3's flexible checksums (CRC32, CRC32C, CRC64NVME, SHA1,
//! SHA256) and how part checksums make a multipart object's: composite (the checksum of
//! the binary part checksums, `-<parts>`) or full-object (the CRC of the whole object,
//! combined from the part CRCs and sizes). The S3 layer verifies bodies with them
//! (`s3::checksum`); the store computes what completion and part copies need.

use base64::Engine as _;
use sha2::Digest as _;

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

    /// S3's name in `x-amz-checksum-algorithm` and `ChecksumAlgorithm` elements.
    pub fn s3_name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The XML element that carries a value of this algorithm (`ChecksumCRC32`, ...).
    pub fn element(self) -> String {
        format!("Checksum{}", self.s3_name())
    }

    /// Whether a full-object checksum can be made of part checksums (CRCs only).
    pub fn is_crc(self) -> bool {
        matches!(
            self,
            Algorithm::Crc32 | Algorithm::Crc32c | Algorithm::Crc64Nvme
        )
    }

    /// The length of a digest in bytes.
    fn digest_bytes(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64Nvme => 8,
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }

    /// The base64 checksum of `data`.
    pub fn digest(self, data: &[u8]) -> String {
        let mut h = self.hasher();
        h.update(data);
        h.finish()
    }

    /// The reflected polynomial and width of a CRC algorithm.
    fn crc_params(self) -> Option<(u64, u32)> {
        match self {
            Algorithm::Crc32 => Some((u64::from(crc::CRC_32_ISO_HDLC.poly.reverse_bits()), 32)),
            Algorithm::Crc32c => Some((u64::from(crc::CRC_32_ISCSI.poly.reverse_bits()), 32)),
            Algorithm::Crc64Nvme => Some((crc::CRC_64_NVME.poly.reverse_bits(), 64)),
            Algorithm::Sha1 | Algorithm::Sha256 => None,
        }
    }

    pub fn hasher(self) -> Hasher {
        match self {
            Algorithm::Crc32 => Hasher::Crc32(crc32fast::Hasher::new()),
            Algorithm::Crc32c => Hasher::Crc32c(CRC32C.digest()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(CRC64NVME.digest()),
            Algorithm::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }
}

pub enum Hasher {
    Crc32(crc32fast::Hasher),
    Crc32c(crc::Digest<'static, u32, crc::Table<16>>),
    Crc64Nvme(crc::Digest<'static, u64, crc::Table<16>>),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    pub fn update(&mut self, buf: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(buf),
            Hasher::Crc32c(h) => h.update(buf),
            Hasher::Crc64Nvme(h) => h.update(buf),
            Hasher::Sha1(h) => h.update(buf),
            Hasher::Sha256(h) => h.update(buf),
        }
    }

    /// The base64 of the big-endian digest, as S3 writes checksums.
    pub fn finish(self) -> String {
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

/// A base64 checksum value of `alg` as its digest bytes; None if it is not one.
pub fn decode_value(alg: Algorithm, value: &str) -> Option<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    (bytes.len() == alg.digest_bytes()).then_some(bytes)
}

/// S3's composite checksum of a multipart object: the checksum of the parts' binary
/// checksums, concatenated in part order, with `-<parts>` appended. None if a part value
/// is not a checksum of `alg`.
pub fn composite(alg: Algorithm, parts: &[String]) -> Option<String> {
    let mut h = alg.hasher();
    for p in parts {
        h.update(&decode_value(alg, p)?);
    }
    Some(format!("{}-{}", h.finish(), parts.len()))
}

/// S3's full-object checksum of a multipart object from its parts' CRCs and sizes: the CRC
/// of the whole object, without reading it (each part's CRC is shifted past the bytes
/// after it). None for a non-CRC algorithm or a value that is not a CRC of `alg`.
pub fn full_object(alg: Algorithm, parts: &[(String, u64)]) -> Option<String> {
    let (poly, width) = alg.crc_params()?;
    let combine = CrcCombine::new(poly, width);
    let mut crc: Option<u64> = None;
    for (value, size) in parts {
        let bytes = decode_value(alg, value)?;
        let part = bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        crc = Some(match crc {
            None => part,
            Some(c) => combine.combine(c, part, *size),
        });
    }
    // No part: the CRC of nothing.
    let crc = crc.unwrap_or(0);
    let bytes = crc.to_be_bytes();
    Some(base64::engine::general_purpose::STANDARD.encode(&bytes[8 - alg.digest_bytes()..]))
}

/// The base64 CRC32 S3 reports for a CRC32 the store keeps.
pub fn crc32_base64(crc32: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(crc32.to_be_bytes())
}

/// zlib's `crc32_combine` (x^(8n) mod P, by squaring), for any reflected CRC of width 32
/// or 64 whose initial value and final xor are equal (CRC-32, CRC-32C and CRC-64/NVME
/// all start from and xor with all ones): crc(A ‖ B) = (crc(A) · x^(8·|B|) mod P) ⊕ crc(B).
struct CrcCombine {
    poly: u64,
    width: u32,
    /// x^(2^k) mod P for k = 0..67 (a length in bytes times 8 has at most 67 bits).
    powers: [u64; 67],
}

impl CrcCombine {
    fn new(poly: u64, width: u32) -> Self {
        let mut c = CrcCombine {
            poly,
            width,
            powers: [0; 67],
        };
        // x^1, in the reflected representation: the second highest bit.
        let mut p = 1u64 << (width - 2);
        for k in 0..c.powers.len() {
            c.powers[k] = p;
            p = c.multiply(p, p);
        }
        c
    }

    /// a·b mod P, reflected.
    fn multiply(&self, a: u64, mut b: u64) -> u64 {
        let mut m = 1u64 << (self.width - 1);
        let mut product = 0;
        while m != 0 {
            if a & m != 0 {
                product ^= b;
            }
            m >>= 1;
            b = if b & 1 != 0 {
                (b >> 1) ^ self.poly
            } else {
                b >> 1
            };
        }
        product
    }

    fn combine(&self, crc1: u64, crc2: u64, len2: u64) -> u64 {
        // x^(8·len2) mod P: the product of x^(2^k) over the bits k of 8·len2.
        let mut shift = 1u64 << (self.width - 1);
        let mut n = u128::from(len2) << 3;
        let mut k = 0;
        while n != 0 && k < self.powers.len() {
            if n & 1 != 0 {
                shift = self.multiply(self.powers[k], shift);
            }
            n >>= 1;
            k += 1;
        }
        self.multiply(shift, crc1) ^ crc2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full-object CRC made of part CRCs is the CRC of the concatenated bytes, and a
    /// composite checksum the checksum of the binary part checksums, for every split.
    #[test]
    fn part_checksums_combine_into_the_whole_objects() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let splits: [&[usize]; 5] = [
            &[0],
            &[1, 4999],
            &[1000, 1000, 3000],
            &[4999, 1],
            &[0, 0, 5000],
        ];
        for alg in Algorithm::ALL {
            for sizes in splits {
                let mut parts = Vec::new();
                let mut at = 0;
                for &n in sizes {
                    let n = n.min(data.len() - at);
                    parts.push((alg.digest(&data[at..at + n]), n as u64));
                    at += n;
                }
                if at < data.len() {
                    parts.push((alg.digest(&data[at..]), (data.len() - at) as u64));
                }
                let values: Vec<String> = parts.iter().map(|(v, _)| v.clone()).collect();
                let mut binary = Vec::new();
                for v in &values {
                    binary.extend(decode_value(alg, v).unwrap());
                }
                assert_eq!(
                    composite(alg, &values).unwrap(),
                    format!("{}-{}", alg.digest(&binary), values.len())
                );
                if alg.is_crc() {
                    assert_eq!(
                        full_object(alg, &parts).unwrap(),
                        alg.digest(&data),
                        "{alg:?} {sizes:?}"
                    );
                } else {
                    assert_eq!(full_object(alg, &parts), None);
                }
            }
        }
        // The CRC catalogue's check value, from "1234" and "56789".
        let b64 = base64::engine::general_purpose::STANDARD;
        let parts = [
            (Algorithm::Crc64Nvme.digest(b"1234"), 4),
            (Algorithm::Crc64Nvme.digest(b"56789"), 5),
        ];
        assert_eq!(
            full_object(Algorithm::Crc64Nvme, &parts).unwrap(),
            b64.encode(0xAE8B14860A799888u64.to_be_bytes())
        );
        // A value of another algorithm, or not base64, is not combined.
        let wrong = [(Algorithm::Sha1.digest(b"x"), 1)];
        assert_eq!(full_object(Algorithm::Crc32, &wrong), None);
        assert_eq!(composite(Algorithm::Crc32, &["%%".to_string()]), None);
    }
}
