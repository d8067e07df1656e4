//! Who owns what, as S3 shows it: each access key is a distinct owner. Its canonical ID is
//! 64 hex digits (the shape of S3's canonical user IDs), derived from the access key id
//! so that it is stable across restarts and the same on every node without being stored;
//! its display name is the access key id. A bucket's owner is the key that created it:
//! the bootstrap key for its own buckets and for every bucket from before access keys.
//! Objects and multipart uploads report their bucket's owner, as the key that wrote them
//! is not recorded.

use sha2::{Digest as _, Sha256};

use super::access::Caller;
use super::xml::XmlWriter;
use crate::state::AppState;
use meta::BucketRecord;

/// An S3 `Owner` (or `Initiator`, or a grant's `Grantee`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub id: String,
    pub display_name: String,
}

impl Owner {
    /// The owner that is access key `access_key`.
    pub fn of_key(access_key: &str) -> Owner {
        // A fixed prefix keeps the ID from being the hash of the bare key id.
        let digest = Sha256::new()
            .chain_update(b"dedup-gateway owner\0")
            .chain_update(access_key.as_bytes())
            .finalize();
        Owner {
            id: hex::encode(digest),
            display_name: access_key.to_string(),
        }
    }

    /// The key that signed the request.
    pub fn of_caller(app: &AppState, caller: &Caller) -> Owner {
        match caller {
            // An anonymous caller owns nothing; it is never asked (no listing of buckets).
            Caller::Bootstrap | Caller::Anonymous => Owner::of_key(app.credentials.access_key()),
            Caller::Key(k) => Owner::of_key(k),
        }
    }

    /// The key that created the bucket.
    pub fn of_bucket(app: &AppState, record: &BucketRecord) -> Owner {
        match &record.owner {
            Some(k) => Owner::of_key(k),
            None => Owner::of_key(app.credentials.access_key()),
        }
    }

    /// `<tag><ID>..</ID><DisplayName>..</DisplayName></tag>`.
    pub fn write(&self, w: &mut XmlWriter, tag: &str) {
        w.open(tag);
        w.leaf("ID", &self.id);
        w.leaf("DisplayName", &self.display_name);
        w.close(tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_a_distinct_stable_owner() {
        let a = Owner::of_key("GKALICE");
        let b = Owner::of_key("GKBOB");
        assert_ne!(a.id, b.id);
        assert_eq!(a, Owner::of_key("GKALICE"));
        assert_eq!(a.id.len(), 64);
        assert!(a.id.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a.display_name, "GKALICE");
    }
}
