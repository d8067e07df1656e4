//! Access-key commands, applied by [`crate::keys`]: a key created or deleted, and its
//! rights on a bucket.

use redb::WriteTransaction;

use crate::keys::{self, KeyRecord, Rights};
use crate::tables::check_bucket;
use crate::{MetaError, Response};

/// `CreateKey`.
pub(super) fn create(
    txn: &WriteTransaction,
    access_key: &str,
    record: &KeyRecord,
) -> Result<Response, MetaError> {
    keys::create_key(txn, access_key, record).map(|()| Response::Done)
}

/// `DeleteKey`.
pub(super) fn delete(txn: &WriteTransaction, access_key: &str) -> Result<Response, MetaError> {
    keys::delete_key(txn, access_key).map(|()| Response::Done)
}

/// `SetKeyRights`: on an existing bucket only.
pub(super) fn set_rights(
    txn: &WriteTransaction,
    access_key: &str,
    bucket: &str,
    set: Rights,
    clear: Rights,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    keys::change_grant(txn, access_key, bucket, set, clear).map(|()| Response::Done)
}
