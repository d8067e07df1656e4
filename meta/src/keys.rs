//! Access keys and their bucket rights: the `keys` table, its record, and the in-memory
//! map the signature check reads.
//!
//! A key is `access key id -> {name, secret, created, grants}`, where `grants` maps a
//! bucket to the [`Rights`] this key has on it. Buckets a key created are its own through
//! the bucket record's owner (`BucketRecord::owner`), not through a grant. The bootstrap
//! key (`GATEWAY_ACCESS_KEY` or the generated `credentials` file) is not in this table: it
//! is each node's own and has every right.
//!
//! Back of the envelope: a record is ~100 bytes plus ~20 per grant; at the [`KEYS_MAX`]
//! bound with a few grants each the whole table is a few MiB, so it is held in memory
//! whole ([`KeyCache`]) and reloaded after each command that changes it. The signature
//! check of every request then costs a hash map lookup, not a redb read.
//!
//! The secret is stored as it is: SigV4 and V2 signatures are HMACs keyed with it (or a key
//! derived from it per day and region), so the gateway must hold it. It is protected like
//! the rest of the metadata (the data folder's permissions, the cluster secret between
//! nodes); it never appears in a `Debug` output, a log line or a listing.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::MetaError;
use super::tables::{decode_versioned, encode_versioned};

/// Access key id -> postcard [`KeyRecord`].
pub const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");

/// At most this many keys: the table is loaded whole into memory.
pub const KEYS_MAX: usize = 10_000;
/// At most this many buckets granted to one key (its own buckets do not count).
pub const GRANTS_PER_KEY_MAX: usize = 1_000;
/// A key's name is a label for operators, at most this many bytes.
pub const KEY_NAME_BYTES_MAX: usize = 128;

/// What a key may do on a bucket: bit 0 read, bit 1 write, bit 2 owner (everything the
/// bucket's creator may do, which includes read and write).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rights(u8);

impl Rights {
    pub const NONE: Rights = Rights(0);
    /// GET, HEAD, listings of objects, uploads and parts, bucket settings.
    pub const READ: Rights = Rights(1);
    /// PUT, copy onto, delete, multipart uploads.
    pub const WRITE: Rights = Rights(2);
    /// Deleting the bucket and changing its settings (CORS), plus read and write.
    pub const OWNER: Rights = Rights(4);
    const ALL_BITS: u8 = 7;

    pub fn from_flags(read: bool, write: bool, owner: bool) -> Self {
        Rights(u8::from(read) | u8::from(write) << 1 | u8::from(owner) << 2)
    }

    pub fn with(self, other: Rights) -> Self {
        Rights((self.0 | other.0) & Self::ALL_BITS)
    }

    pub fn without(self, other: Rights) -> Self {
        Rights(self.0 & !other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 & Self::ALL_BITS == 0
    }

    /// Whether these rights allow what `need` asks: owner allows everything.
    pub fn allows(self, need: Rights) -> bool {
        self.0 & Self::OWNER.0 != 0 || (self.0 & need.0) == need.0
    }

    /// The rights' names, for listings: `read`, `write`, `owner`.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::READ, "read"),
            (Self::WRITE, "write"),
            (Self::OWNER, "owner"),
        ]
        .into_iter()
        .filter(|(r, _)| self.0 & r.0 != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

/// A secret access key. Its `Debug` hides it, so a command or record in a log line never
/// shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: String) -> Self {
        Secret(secret)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// One access key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The operator's label (`keys create NAME`); not unique.
    pub name: String,
    pub secret: Secret,
    pub created_ms: u64,
    /// Rights on buckets this key does not own; no entry is "no rights".
    pub grants: BTreeMap<String, Rights>,
}

impl KeyRecord {
    /// The rights this key was granted on `bucket` (not counting ownership).
    pub fn granted(&self, bucket: &str) -> Rights {
        self.grants.get(bucket).copied().unwrap_or_default()
    }

    /// Changes the grant on `bucket`; a grant left empty is removed.
    pub fn change_grant(
        &mut self,
        bucket: &str,
        set: Rights,
        clear: Rights,
    ) -> Result<Rights, MetaError> {
        let now = self.granted(bucket).with(set).without(clear);
        if now.is_empty() {
            self.grants.remove(bucket);
        } else {
            if !self.grants.contains_key(bucket) && self.grants.len() >= GRANTS_PER_KEY_MAX {
                return Err(MetaError::KeyLimit(format!(
                    "a key may be granted at most {GRANTS_PER_KEY_MAX} buckets"
                )));
            }
            self.grants.insert(bucket.to_string(), now);
        }
        Ok(now)
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        encode_versioned(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        decode_versioned("keys", bytes)
    }
}

/// Every key, by access key id, as of the last command applied.
pub type KeyMap = HashMap<String, KeyRecord>;

/// The in-memory copy of the `keys` table. Replaced whole (readers keep the `Arc` they
/// took), so a lookup never waits on a reload.
#[derive(Default)]
pub struct KeyCache {
    map: RwLock<Arc<KeyMap>>,
}

impl KeyCache {
    pub fn get(&self) -> Arc<KeyMap> {
        match self.map.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set(&self, map: KeyMap) {
        let mut g = match self.map.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *g = Arc::new(map);
    }
}

/// Reads the whole `keys` table (at most [`KEYS_MAX`] records).
pub fn load(table: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<KeyMap, MetaError> {
    let mut out = KeyMap::new();
    for entry in table.iter()?.take(KEYS_MAX) {
        let (k, v) = entry?;
        out.insert(k.value().to_string(), KeyRecord::decode(v.value())?);
    }
    Ok(out)
}

/// `CreateKey`: a new id only, within [`KEYS_MAX`].
pub(super) fn create_key(
    txn: &WriteTransaction,
    access_key: &str,
    record: &KeyRecord,
) -> Result<(), MetaError> {
    let mut table = txn.open_table(KEYS)?;
    if table.get(access_key)?.is_some() {
        return Err(MetaError::AccessKeyExists);
    }
    if table.len()? >= KEYS_MAX as u64 {
        return Err(MetaError::KeyLimit(format!(
            "at most {KEYS_MAX} access keys"
        )));
    }
    if record.name.len() > KEY_NAME_BYTES_MAX {
        return Err(MetaError::KeyLimit(format!(
            "a key's name is at most {KEY_NAME_BYTES_MAX} bytes"
        )));
    }
    table.insert(access_key, record.encode()?.as_slice())?;
    Ok(())
}

/// `DeleteKey`.
pub(super) fn delete_key(txn: &WriteTransaction, access_key: &str) -> Result<(), MetaError> {
    match txn.open_table(KEYS)?.remove(access_key)? {
        Some(_) => Ok(()),
        None => Err(MetaError::NoSuchAccessKey),
    }
}

/// `SetKeyRights` (the caller checked that the bucket exists).
pub(super) fn change_grant(
    txn: &WriteTransaction,
    access_key: &str,
    bucket: &str,
    set: Rights,
    clear: Rights,
) -> Result<(), MetaError> {
    let mut table = txn.open_table(KEYS)?;
    let mut record = match table.get(access_key)? {
        Some(v) => KeyRecord::decode(v.value())?,
        None => return Err(MetaError::NoSuchAccessKey),
    };
    record.change_grant(bucket, set, clear)?;
    table.insert(access_key, record.encode()?.as_slice())?;
    Ok(())
}

/// A deleted bucket's grants go with it: every key is visited (at most [`KEYS_MAX`]).
pub(super) fn drop_grants(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    let mut table = txn.open_table(KEYS)?;
    let mut changed = Vec::new();
    for entry in table.iter()?.take(KEYS_MAX) {
        let (k, v) = entry?;
        let mut record = KeyRecord::decode(v.value())?;
        if record.grants.remove(bucket).is_some() {
            changed.push((k.value().to_string(), record));
        }
    }
    for (k, record) in changed {
        table.insert(k.as_str(), record.encode()?.as_slice())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_allows_everything_and_read_does_not_allow_write() {
        let r = Rights::READ;
        assert!(r.allows(Rights::READ));
        assert!(!r.allows(Rights::WRITE));
        assert!(!r.allows(Rights::OWNER));
        assert!(Rights::OWNER.allows(Rights::WRITE));
        assert!(Rights::from_flags(true, true, false).allows(Rights::WRITE));
        assert_eq!(
            Rights::from_flags(true, false, true).names(),
            vec!["read", "owner"]
        );
    }

    #[test]
    fn grants_are_added_changed_and_removed_when_empty() {
        let mut k = KeyRecord {
            name: "app".into(),
            secret: Secret::new("s".into()),
            created_ms: 1,
            grants: BTreeMap::new(),
        };
        assert_eq!(
            k.change_grant("b", Rights::READ.with(Rights::WRITE), Rights::NONE),
            Ok(Rights::from_flags(true, true, false))
        );
        assert_eq!(
            k.change_grant("b", Rights::NONE, Rights::WRITE),
            Ok(Rights::READ)
        );
        assert_eq!(
            k.change_grant("b", Rights::NONE, Rights::READ),
            Ok(Rights::NONE)
        );
        assert!(k.grants.is_empty());
        let bytes = k.encode().unwrap();
        assert_eq!(KeyRecord::decode(&bytes).unwrap(), k);
    }

    #[test]
    fn a_secret_never_shows_in_debug() {
        let k = KeyRecord {
            name: "app".into(),
            secret: Secret::new("very-secret".into()),
            created_ms: 1,
            grants: BTreeMap::new(),
        };
        assert!(!format!("{k:?}").contains("very-secret"));
    }
}
