//! HTTPS on the S3 listener: the certificate and key from PEM files, reloaded from disk
//! without a restart.
//!
//! - **Versions and protocols**: TLS 1.2 and 1.3 only (rustls speaks nothing older), with
//!   the aws-lc-rs provider; ALPN offers `h2` then `http/1.1`. Plain HTTP sent to the port
//!   fails the handshake and is never served.
//! - **Reload**: [`Certificate`] is the server's certificate resolver; it hands out the
//!   certificate loaded last. [`watch`] reloads it on SIGHUP and when either file changes
//!   (its modification time, length, inode or device, the target's when the path is a
//!   symlink, as cert-manager and Kubernetes secret volumes replace them), looked at every
//!   [`POLL_SECS`]. A new certificate applies to new handshakes only: a connection in
//!   flight keeps the session it has. New files that do not load (unreadable, bad PEM, a
//!   key that does not match) leave the old certificate in force, with an error logged;
//!   they are tried again when they change again or on the next SIGHUP.
//! - **Bounds**: a PEM file of more than [`PEM_FILE_BYTES_MAX`] is refused; the handshake
//!   is bounded by the connection's header read timeout ([`crate::server::connections`]).
//!
//! Back of the envelope: a poll is two `stat` calls every 5 s; a reload reads two files of a
//! few KiB and parses one key, well under a millisecond; a handshake costs one signature
//! (~50 µs for ECDSA P-256, ~1 ms for RSA 2048) and ~30 KiB of buffers per connection.

pub mod certificate;
pub mod cluster;

pub use certificate::{
    Certificate, PEM_FILE_BYTES_MAX, POLL_SECS, TlsError, TlsFiles, acceptor, watch,
};

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;

/// What a listener speaks besides plain HTTP: S3 TLS (`--tls-cert`), the cluster side
/// ([`cluster`]), both or neither.
#[derive(Clone, Default)]
pub struct ListenerTls {
    pub s3: Option<TlsAcceptor>,
    pub cluster: Option<Arc<cluster::ClusterTls>>,
}

impl ListenerTls {
    /// Neither TLS side: plain HTTP only.
    pub fn is_plain(&self) -> bool {
        self.s3.is_none() && self.cluster.is_none()
    }

    /// The handshake of a new connection: plain HTTP or TLS on the S3 side as before, and
    /// with the cluster side the dispatch of [`cluster::accept`]. `wrap` puts the bounds of
    /// the connection around the socket once its first byte is known. The caller bounds
    /// the whole of it.
    pub async fn accept<IO>(
        &self,
        stream: tokio::net::TcpStream,
        wrap: impl FnOnce(tokio::net::TcpStream) -> IO,
    ) -> std::io::Result<cluster::Accepted<IO>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let Some(cluster) = &self.cluster else {
            return match &self.s3 {
                None => Ok(cluster::Accepted::Plain(wrap(stream))),
                Some(s3) => Ok(cluster::Accepted::Tls {
                    stream: Box::new(s3.accept(wrap(stream)).await?),
                    cluster: false,
                }),
            };
        };
        let Some(first) = cluster::peek_first_byte(&stream).await? else {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        };
        cluster::accept(wrap(stream), first, self.s3.as_ref(), cluster).await
    }
}
