//! `gateway admin keys ...`: the client of [`gateway::api::keys`].

use http::Method;
use serde_json::Value;

use super::admin::AdminClient;

#[derive(Clone, Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create an access key; prints `access_key: ...` and `secret_key: ...` (the secret is
    /// shown only this once).
    Create { name: String },
    /// Every access key with its grants (never a secret).
    List,
    /// One key: its name, the buckets it owns and its grants.
    Info { key: String },
    /// Delete a key: its requests are refused at once.
    Delete { key: String },
    /// Grant a key rights on a bucket.
    Allow {
        #[command(flatten)]
        rights: RightsArgs,
        bucket: String,
        /// The access key id.
        key: String,
    },
    /// Take rights on a bucket away from a key.
    Deny {
        #[command(flatten)]
        rights: RightsArgs,
        bucket: String,
        /// The access key id.
        key: String,
    },
}

#[derive(Clone, Debug, clap::Args)]
pub struct RightsArgs {
    /// GET, HEAD, listings, bucket settings.
    #[arg(long)]
    read: bool,
    /// PUT, copy onto, delete, multipart uploads.
    #[arg(long)]
    write: bool,
    /// Everything the bucket's creator may do (delete it, change its CORS rules).
    #[arg(long)]
    owner: bool,
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(|x| x.as_str()).unwrap_or("")
}

/// `bucket=read,write` for each grant, or `-`.
fn grants(v: &Value) -> String {
    let list: Vec<String> = v
        .get("grants")
        .and_then(|g| g.as_object())
        .map(|g| {
            g.iter()
                .map(|(b, r)| {
                    let names: Vec<&str> = r
                        .as_array()
                        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                        .unwrap_or_default();
                    format!("{b}={}", names.join(","))
                })
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        "-".into()
    } else {
        list.join(" ")
    }
}

fn info_text(v: &Value) -> String {
    let owns: Vec<&str> = v
        .get("owns")
        .and_then(|o| o.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    format!(
        "access_key: {}\nname: {}\ncreated: {}\nowns: {}\ngrants: {}\n",
        text(v, "access_key"),
        text(v, "name"),
        gateway::s3::iso8601(v.get("created_ms").and_then(|c| c.as_u64()).unwrap_or(0)),
        if owns.is_empty() {
            "-".to_string()
        } else {
            owns.join(" ")
        },
        grants(v)
    )
}

impl AdminClient {
    /// Runs a keys command and returns the text to print.
    pub async fn keys(&self, cmd: KeysCommand) -> Result<String, String> {
        match cmd {
            KeysCommand::Create { name } => {
                let body = serde_json::json!({ "name": name }).to_string();
                let v = self.call(Method::POST, "/_admin/keys", Some(body)).await?;
                Ok(format!(
                    "access_key: {}\nsecret_key: {}\n",
                    text(&v, "access_key"),
                    text(&v, "secret_key")
                ))
            }
            KeysCommand::List => {
                let v = self.call(Method::GET, "/_admin/keys", None).await?;
                let mut out = format!("{:<22} {:<24} {}\n", "ACCESS KEY", "NAME", "GRANTS");
                for k in v
                    .get("keys")
                    .and_then(|k| k.as_array())
                    .into_iter()
                    .flatten()
                {
                    out.push_str(&format!(
                        "{:<22} {:<24} {}\n",
                        text(k, "access_key"),
                        text(k, "name"),
                        grants(k)
                    ));
                }
                Ok(out)
            }
            KeysCommand::Info { key } => {
                let v = self.call(Method::GET, &key_path(&key, ""), None).await?;
                Ok(info_text(&v))
            }
            KeysCommand::Delete { key } => {
                self.call(Method::DELETE, &key_path(&key, ""), None).await?;
                Ok(format!("deleted {key}\n"))
            }
            KeysCommand::Allow {
                rights,
                bucket,
                key,
            } => self.grant(&key, "allow", &bucket, &rights).await,
            KeysCommand::Deny {
                rights,
                bucket,
                key,
            } => self.grant(&key, "deny", &bucket, &rights).await,
        }
    }

    async fn grant(
        &self,
        key: &str,
        action: &str,
        bucket: &str,
        r: &RightsArgs,
    ) -> Result<String, String> {
        if !(r.read || r.write || r.owner) {
            return Err("name at least one of --read, --write, --owner".into());
        }
        let body = serde_json::json!({
            "bucket": bucket, "read": r.read, "write": r.write, "owner": r.owner,
        })
        .to_string();
        let v = self
            .call(Method::POST, &key_path(key, action), Some(body))
            .await?;
        Ok(info_text(&v))
    }
}

/// `/_admin/keys/KEY[/action]`, the key escaped (it is a path segment).
fn key_path(key: &str, action: &str) -> String {
    let key = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
    if action.is_empty() {
        format!("/_admin/keys/{key}")
    } else {
        format!("/_admin/keys/{key}/{action}")
    }
}
