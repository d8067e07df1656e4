//! The three flags of TLS to `https://` storage nodes, shared by the `valkyrie` binary and
//! `gateway fsck` (`gateway serve` resolves the same settings from flags and its config
//! file): the CA the nodes' certificates must chain to, and the client certificate.

use std::path::PathBuf;

use placement::disk::{StorageTls, WebDavConfig};

/// `--storage-ca`, `--storage-cert`, `--storage-key`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct StorageTlsArgs {
    /// An https:// storage node: the CA bundle (PEM) its certificate must chain to (never
    /// the system roots).
    #[arg(long)]
    pub storage_ca: Option<PathBuf>,
    /// The client certificate chain (PEM) presented to https:// storage nodes, with
    /// --storage-key.
    #[arg(long)]
    pub storage_cert: Option<PathBuf>,
    /// The private key (PEM) of --storage-cert.
    #[arg(long)]
    pub storage_key: Option<PathBuf>,
}

impl StorageTlsArgs {
    /// Sets the process's storage-node client ([`WebDavConfig::set_process`]); call it
    /// before any disk is opened. The error says which file or flag is wrong.
    pub fn install(&self) -> Result<(), String> {
        let tls = StorageTls::from_settings(
            self.storage_ca.as_deref(),
            self.storage_cert.as_deref(),
            self.storage_key.as_deref(),
        )?;
        WebDavConfig::set_process(WebDavConfig {
            tls,
            ..WebDavConfig::default()
        });
        Ok(())
    }
}
