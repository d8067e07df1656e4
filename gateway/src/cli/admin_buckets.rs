//! `gateway admin buckets ...`: deleting a bucket, with its contents on `--force`.

use http::Method;

use super::admin::{AdminClient, render_jobs};

#[derive(Clone, Debug, clap::Subcommand)]
pub enum BucketsCommand {
    /// Delete an empty bucket; with --force, start a job that deletes its objects and
    /// uploads in progress, then the bucket (prints the job; --watch follows it).
    Delete {
        bucket: String,
        /// Delete the contents too, in a background job (a whole mailbox at once)
        #[arg(long)]
        force: bool,
        /// With --force: follow the job until it ends (a progress bar on a terminal)
        #[arg(long, requires = "force")]
        watch: bool,
    },
}

impl AdminClient {
    /// Runs a buckets command and returns the text to print. A watched job that does not
    /// end "done" is an error (the bucket is still there), with the job's own reason.
    pub async fn buckets(&self, cmd: BucketsCommand) -> Result<String, String> {
        match cmd {
            BucketsCommand::Delete {
                bucket,
                force: false,
                ..
            } => {
                self.call(Method::DELETE, &format!("/_admin/buckets/{bucket}"), None)
                    .await?;
                Ok(format!("deleted bucket {bucket}\n"))
            }
            BucketsCommand::Delete {
                bucket,
                force: true,
                watch,
            } => {
                let body = serde_json::json!({ "op": "delete-bucket", "bucket": bucket });
                let v = self
                    .call(Method::POST, "/_admin/jobs", Some(body.to_string()))
                    .await?;
                let Some(id) = v.get("id").and_then(|i| i.as_u64()) else {
                    return Err(format!("the new job has no id: {v}"));
                };
                if !watch {
                    return Ok(format!("job {id}\n{}", render_jobs(&[v])));
                }
                eprintln!("job {id}");
                let end = self.watch_job_end(id).await?;
                let text = render_jobs(std::slice::from_ref(&end));
                match end.get("state").and_then(|s| s.as_str()) {
                    Some("done") => Ok(text),
                    _ => Err(format!("bucket {bucket} not deleted:\n{text}")),
                }
            }
        }
    }
}
