//! Canned ACLs (S3's `x-amz-acl`), as far as this gateway honours them: an object version
//! or a bucket is private (its owner has FULL_CONTROL: the only grant) or public-read
//! (anyone, signed or not, may also read it; for a bucket: read every object in it and
//! list it). Grants to other accounts have no meaning here (an access key's rights on a
//! bucket are `gateway admin keys allow`): the S3 layer refuses them with NotImplemented.

use serde::{Deserialize, Serialize};

/// Variants are appended, never reordered: a variant's index is its encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CannedAcl {
    #[default]
    Private,
    PublicRead,
}

impl CannedAcl {
    /// S3's name of the canned ACL.
    pub fn name(self) -> &'static str {
        match self {
            CannedAcl::Private => "private",
            CannedAcl::PublicRead => "public-read",
        }
    }

    /// Whether anyone may read.
    pub fn is_public(self) -> bool {
        self == CannedAcl::PublicRead
    }
}
