//! The settler: confirms the references of cross-group writes whose entries were written.
//!
//! A write whose content another group owns takes its reference there first (`RefInc`,
//! pending in `ref_log`), then writes its entry (`ForeignRef`). Once the entry is
//! acknowledged the reference is known to be held, and `Settle { release: false }` drops
//! its pending row. Without it every such reference waits for the reconciler, past its
//! deadline and grace, which must ask the index group about each one (a `Fence` command
//! per reference, one at a time): a backlog that a steady rate of cross-group PUTs would
//! grow without end. Here the confirmations go in batches (one `Settle` per FileDB group,
//! gathered for [`GATHER`]), after the answer: a confirmation lost (a full queue, a leader
//! change, a crash) leaves the row to the reconciler, as before.
//!
//! Safe in any order with the rest: a confirmation of a reference already released or
//! settled changes nothing (`Unchanged`), and a dec that comes later for a confirmed
//! reference is its first (`DecBatch`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use placement::Sha1;
use tokio::sync::mpsc;

use super::replicas::Replicas;
use super::timeouts::now_ms;
use crate::Command;
use crate::groups::GroupId;
use crate::ref_log::{BATCH_MAX, Settle};

/// Bound on the confirmations waiting: past it they are left to the reconciler.
const QUEUE_MAX: usize = 65_536;
/// How long a batch gathers confirmations after its first.
const GATHER: Duration = Duration::from_millis(20);

/// Starts the settler of `replicas`.
pub fn start(replicas: &Arc<Replicas>) {
    let (tx, rx) = mpsc::channel(QUEUE_MAX);
    if replicas.set_settler(tx) {
        replicas.keep_task(tokio::spawn(run(Arc::downgrade(replicas), rx)));
    }
}

async fn run(replicas: Weak<Replicas>, mut rx: mpsc::Receiver<(Sha1, u64)>) {
    while let Some(first) = rx.recv().await {
        tokio::time::sleep(GATHER).await;
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Some(r) = replicas.upgrade() else { return };
        let map = match r.shard_map().await {
            Ok(map) => map,
            Err(e) => {
                tracing::debug!(error = %e, "no shard map: confirmations left to the reconciler");
                continue;
            }
        };
        let mut by_group: BTreeMap<GroupId, Vec<Settle>> = BTreeMap::new();
        for (sha1, ref_id) in batch {
            by_group
                .entry(map.filedb_group(&sha1.0))
                .or_default()
                .push(Settle {
                    sha1: sha1.0,
                    ref_id,
                    release: false,
                });
        }
        for (group, settles) in by_group {
            let cmd = Command::Settle {
                settles,
                now_ms: now_ms(),
            };
            if let Err(e) = r.send_on(&map, group, cmd).await {
                tracing::debug!(group, error = %e, "confirmations left to the reconciler");
            }
        }
    }
}
