//! The layout every backend shares (see the module docs of `disk`), and the stream type
//! their reads return.

use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::Stream;

use crate::vocab::Sha1;

/// The relative path of a content file: `<aa>/<bb>/<sha1 hex>`.
pub fn content_path(sha1: &Sha1) -> PathBuf {
    let hex = sha1.to_hex();
    [&hex[0..2], &hex[2..4], hex.as_str()].iter().collect()
}

/// The directory for uploads in flight.
pub const TMP_DIR: &str = "tmp";

/// A byte stream read from a disk.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;
