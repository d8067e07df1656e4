//! Group commit: commands submitted at the same moment travel in one log entry.
//!
//! openraft 0.9's core appends (and fsyncs) one client write at a time, so batching has to
//! happen before it: commands queue here, and whenever fewer than [`IN_FLIGHT_MAX`]
//! batches are being committed, everything queued (up to [`BATCH_COMMANDS_MAX`]) leaves
//! as one [`Batch`]. Under load, batches grow to the number of waiting clients; with one
//! client, each command goes alone and waits for nothing. On the leader a batch is a local
//! `client_write`; on a follower it is forwarded to the leader over `/_cluster/write`.
//!
//! Every command has a deadline for its append: [`APPEND_DEADLINE`] after it was submitted
//! on its node, and [`WRITE_TIMEOUT`] after a leader received it forwarded. A batch past
//! the deadline of one of its commands is never sent to a leader's log; its commands fail
//! with `Unavailable`, not appended anywhere. So a command reaches a log within
//! [`APPEND_BOUND`] of its submission or never: an upload's files, written before its
//! command, cannot be taken for orphans by a scrubber that waits longer than that and
//! fences (see `Metadata::read_fenced`) before it decides.
//!
//! A batch is retried on another node only when the answer says it was not appended (the
//! node was not the leader). Any other failure (timeout, lost connection) leaves the
//! outcome unknown: the commands fail with `Unavailable` and are not acknowledged, though
//! they may still be applied. The caller's data path never depends on them being absent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::members::{leader_gone, member_addr, wait_group_leader};
use super::network::{Call, Rpc, RpcError};
use super::timeouts::WRITE_TIMEOUT;
use super::types::{Batch, BatchResult, MetaRaft, NodeId};
use crate::{Command, MetaError, Response};

/// Batches being committed at once. One: openraft 0.9's core appends each client write
/// as its own entry with its own fsync, one after the other, so a second batch in flight
/// only splits the waiting commands over more fsyncs. Measured (`bench --only raft-rates`,
/// fresh ext4, two interleaved runs each, medians): one node 64 KiB PUT 1 746-1 769 vs
/// 1 512-1 540 ops/s with two in flight and about 1 500 with three, inc/dec 15 300-15 900
/// vs 12 900-13 100 and 10 600-10 900; three nodes PUT 1 015-1 070 vs 979-982, inc/dec
/// unchanged (4 600-4 940 in all three). Batches form while the previous one commits.
const IN_FLIGHT_MAX: usize = 1;
/// Batches a follower forwards at once. More than one: the leader queues forwarded
/// commands with its own and packs them into its next entry, so a follower that waited
/// for its previous batch's answer before sending the next would only make its commands
/// miss that entry. Three nodes, inc/dec, four interleaved runs each: 5 159-5 701 per
/// second against 4 713-5 290 with one batch forwarded at a time.
const FORWARD_IN_FLIGHT_MAX: usize = 4;
/// Bound on the commands of one batch (a log entry stays well under a replication RPC's
/// body bound even with CompleteUpload's part lists).
const BATCH_COMMANDS_MAX: usize = 512;
/// Bound on commands waiting to be batched; a full queue makes submitters wait.
const QUEUE_MAX: usize = 8192;
/// Bound on redirects when the leader changes under a batch.
const REDIRECTS_MAX: usize = 3;
/// A command submitted on a node is appended to a leader's log within this long, or never.
pub const APPEND_DEADLINE: Duration = Duration::from_secs(20);
/// The longest a command may take from its submission to a leader's log: its own node's
/// deadline, the forwarding RPC's timeout, then the deadline of the leader that received
/// it (a forwarded command may wait that long in the leader's queue).
pub const APPEND_BOUND: Duration =
    Duration::from_secs(APPEND_DEADLINE.as_secs() + 2 * WRITE_TIMEOUT.as_secs());

/// The leader's answer to a forwarded batch.
#[derive(Debug, Serialize, Deserialize)]
pub enum WriteReply {
    Done(BatchResult),
    /// Not appended: this node does not lead (it names the leader it knows).
    NotLeader(Option<NodeId>),
    /// The outcome is unknown (timeout, shutdown).
    Unavailable(String),
}

/// Why a batch has no answer from a log.
#[derive(Clone, Debug)]
pub(crate) enum Unsent {
    /// Appended to no log (no leader found, its deadline passed first, the proposer
    /// stopped): safe to send again.
    NotAppended(String),
    /// Its outcome is unknown (a timeout, a leader lost while it held the batch): it may
    /// still commit.
    Unknown(String),
}

impl From<Unsent> for MetaError {
    fn from(u: Unsent) -> Self {
        match u {
            Unsent::NotAppended(why) | Unsent::Unknown(why) => MetaError::Unavailable(why),
        }
    }
}

/// A command's answer from the proposer: the state machine's result, or why it has none.
pub(crate) type Answer = Result<Result<Response, MetaError>, Unsent>;

struct Pending {
    cmd: Command,
    reply: oneshot::Sender<Answer>,
    /// Not appended to a log after this instant (see [`APPEND_DEADLINE`]).
    deadline: Instant,
}

pub struct Proposer {
    queue: mpsc::Sender<Pending>,
}

impl Proposer {
    pub fn start(raft: MetaRaft, rpc: Rpc, me: NodeId) -> Self {
        let (queue, mut rx) = mpsc::channel::<Pending>(QUEUE_MAX);
        let appending = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
        let forwarding = Arc::new(Semaphore::new(FORWARD_IN_FLIGHT_MAX));
        tokio::spawn(async move {
            loop {
                let Some(first) = rx.recv().await else { return };
                // The role decides the bound; a leader change in between only costs a
                // redirect (see `send`).
                let leading = raft.metrics().borrow().current_leader == Some(me);
                let permits = if leading { &appending } else { &forwarding };
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let mut pending = vec![first];
                while pending.len() < BATCH_COMMANDS_MAX {
                    match rx.try_recv() {
                        Ok(p) => pending.push(p),
                        Err(_) => break,
                    }
                }
                let (raft, rpc) = (raft.clone(), rpc.clone());
                tokio::spawn(async move {
                    commit(&raft, &rpc, me, pending).await;
                    drop(permit);
                });
            }
        });
        Proposer { queue }
    }

    pub async fn submit(&self, cmd: Command) -> Result<Response, MetaError> {
        self.submit_answer(cmd)
            .await
            .unwrap_or_else(|unsent| Err(unsent.into()))
    }

    /// [`Proposer::submit`], with why a command has no answer from the log.
    pub(crate) async fn submit_answer(&self, cmd: Command) -> Answer {
        let rx = self.enqueue(cmd, Instant::now() + APPEND_DEADLINE).await?;
        rx.await.unwrap_or_else(|_| Err(answer_lost()))
    }

    /// Queues every command of a batch forwarded by a follower, in its order, and answers
    /// one result per command. On the leader, forwarded commands so join the local ones in
    /// the next log entry: each entry costs the leader one serial fsync (openraft's core
    /// awaits each append), so a batch of a few commands from each follower appended as an
    /// entry of its own would cap the group at the fsyncs per second.
    pub(crate) async fn submit_all(&self, cmds: Vec<Command>) -> Vec<Answer> {
        // The follower that sent them gives up after WRITE_TIMEOUT; so does this node.
        let deadline = Instant::now() + WRITE_TIMEOUT;
        let mut waiting = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            waiting.push(self.enqueue(cmd, deadline).await);
        }
        let mut results = Vec::with_capacity(waiting.len());
        for w in waiting {
            results.push(match w {
                Ok(rx) => rx.await.unwrap_or_else(|_| Err(answer_lost())),
                Err(e) => Err(e),
            });
        }
        results
    }

    async fn enqueue(
        &self,
        cmd: Command,
        deadline: Instant,
    ) -> Result<oneshot::Receiver<Answer>, Unsent> {
        let (reply, rx) = oneshot::channel();
        self.queue
            .send(Pending {
                cmd,
                reply,
                deadline,
            })
            .await
            .map_err(|_| shutting_down())?;
        Ok(rx)
    }
}

/// The proposer's task ended before the command reached it (its node shuts down).
fn shutting_down() -> Unsent {
    Unsent::NotAppended("metadata is shutting down".into())
}

/// The task committing the command's batch ended without an answer (its node shuts down):
/// the batch may have been appended.
fn answer_lost() -> Unsent {
    Unsent::Unknown("metadata is shutting down; the command's outcome is unknown".into())
}

async fn commit(raft: &MetaRaft, rpc: &Rpc, me: NodeId, pending: Vec<Pending>) {
    let deadline = pending
        .iter()
        .map(|p| p.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    let (cmds, replies): (Vec<_>, Vec<_>) = pending.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let n = cmds.len();
    let outcome = send(raft, rpc, me, Batch(cmds), deadline).await;
    match outcome {
        Ok(BatchResult(results)) if results.len() == n => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok(result));
            }
        }
        Ok(BatchResult(results)) => {
            let e = MetaError::Storage(format!("{} results for {n} commands", results.len()));
            for reply in replies {
                let _ = reply.send(Ok(Err(e.clone())));
            }
        }
        Err(unsent) => {
            for reply in replies {
                let _ = reply.send(Err(unsent.clone()));
            }
        }
    }
}

/// Commits an empty batch through the log: once it is applied, every entry that any
/// leader's log held before it is applied too, and any entry that is in no such log can
/// never commit (a later leader's log would have to hold it). With [`APPEND_BOUND`], the
/// fence a deletion decision needs (see `Metadata::read_fenced`).
pub async fn fence(raft: &MetaRaft, rpc: &Rpc, me: NodeId) -> Result<(), MetaError> {
    send(
        raft,
        rpc,
        me,
        Batch(Vec::new()),
        Instant::now() + WRITE_TIMEOUT,
    )
    .await
    .map(drop)
    .map_err(MetaError::from)
}

/// Commits a batch on whichever node leads, following redirects a bounded number of times;
/// never sends it to a log after `deadline` (it then fails, appended nowhere). A leader
/// that answers it was not appended (it leads no more, or its replica left the group with
/// a move) costs a wait for the leader this node knows next, within the deadline.
async fn send(
    raft: &MetaRaft,
    rpc: &Rpc,
    me: NodeId,
    batch: Batch,
    deadline: Instant,
) -> Result<BatchResult, Unsent> {
    let mut hint: Option<NodeId> = None;
    let mut redirects = 0;
    loop {
        let leader = match hint.take() {
            Some(l) => l,
            None => wait_leader(raft, rpc.group()).await?,
        };
        if Instant::now() >= deadline {
            return Err(Unsent::NotAppended(
                "the command reached no leader before its append deadline; not appended".into(),
            ));
        }
        let reply = if leader == me {
            leader_write(raft, batch.clone()).await
        } else {
            let Ok(addr) = member_addr(raft, leader) else {
                // A redirect to a node this replica does not know as a member (it left
                // with a membership change this replica has not applied): wait for the
                // leader this replica knows.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            // A leader that stops answering (killed, paused, cut off) would hold this batch,
            // and the forwarding permit it took, for the whole timeout while the group
            // elects another: the batch is given up as soon as this node knows of another
            // leader (or of an election), so the commands behind it go to the new one.
            // Its outcome stays unknown (the old leader may have appended it, and the new
            // one commit it), so its commands fail with Unavailable, as after a timeout.
            tokio::select! {
                r = rpc.call(&addr, Call::Write, &batch, WRITE_TIMEOUT) => match r {
                    Ok(r) => r,
                    // Its replica is gone (a move took it off that node), or it could not
                    // read the batch: nothing appended there, and the group's next leader
                    // takes it. (An unreachable leader fails the batch at once, as before:
                    // in a minority cut off by a partition, waiting for another leader
                    // would hold every request for the whole append deadline.)
                    Err(RpcError::Status(_, 400 | 404, _)) => WriteReply::NotLeader(None),
                    Err(e) => WriteReply::Unavailable(e.to_string()),
                },
                () = leader_gone(raft, leader) => WriteReply::Unavailable(format!(
                    "node {leader} stopped leading while a batch was forwarded to it; its outcome is unknown"
                )),
            }
        };
        match reply {
            WriteReply::Done(r) => return Ok(r),
            WriteReply::Unavailable(e) => return Err(Unsent::Unknown(e)),
            WriteReply::NotLeader(next) => {
                // Not appended anywhere: safe to send again, to the leader it named, or
                // after waiting for a new one (bounded by the deadline above).
                hint = next.filter(|n| *n != leader);
                if hint.is_some() {
                    redirects += 1;
                    if redirects > REDIRECTS_MAX {
                        return Err(Unsent::NotAppended("the leader kept changing".into()));
                    }
                } else {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}

async fn wait_leader(raft: &MetaRaft, group: crate::groups::GroupId) -> Result<NodeId, Unsent> {
    wait_group_leader(raft, group).await.map_err(|waited| {
        Unsent::NotAppended(format!(
            "no metadata leader within {waited:?} (is a majority of the nodes up?)"
        ))
    })
}

/// Appends a batch on this node, which must lead; waits until it is applied here, or
/// until this node stops leading: a leader cut off by a partition learns of the new one
/// when the partition heals, and the batch then fails at once (its outcome unknown: the
/// new leader may commit it) instead of holding the one append slot, and every command
/// queued behind it, until its timeout.
pub(crate) async fn leader_write(raft: &MetaRaft, batch: Batch) -> WriteReply {
    let (me, leading) = {
        let m = raft.metrics().borrow().clone();
        (m.id, m.current_leader == Some(m.id))
    };
    let write = async {
        if !leading {
            // openraft answers ForwardToLeader: not appended, sent again elsewhere.
            return Some(raft.client_write(batch).await);
        }
        tokio::select! {
            r = raft.client_write(batch) => Some(r),
            () = leader_gone(raft, me) => None,
        }
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(None) => WriteReply::Unavailable(format!(
            "node {me} stopped leading while it appended a batch; its outcome is unknown"
        )),
        Ok(Some(Ok(resp))) => WriteReply::Done(resp.data),
        Ok(Some(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))))) => {
            WriteReply::NotLeader(f.leader_id)
        }
        Ok(Some(Err(e))) => WriteReply::Unavailable(e.to_string()),
        Err(_) => WriteReply::Unavailable(format!(
            "not committed within {WRITE_TIMEOUT:?} (no quorum?)"
        )),
    }
}
