//! Linearizable reads: the read-index protocol, with concurrent reads sharing one round.
//!
//! A read must see every write acknowledged before it started. The leader confirms it
//! still leads with a heartbeat round to a quorum and names its commit index (the read
//! index); the reader then waits until its own state machine has applied that index and
//! reads locally. A follower asks the leader for the index over `/_cluster/read-index`.
//!
//! A round answers every read that arrived before the round started. A read arriving
//! while a round runs waits for the next one, which starts as soon as the current one
//! ends: under load, one round (one heartbeat to a quorum) serves many reads.
//!
//! A round that fails for a reason that passes (no leader known yet, the leader replaced
//! while asked, a heartbeat round that did not reach a quorum within openraft's heartbeat
//! interval on a busy machine) is tried again until [`ROUND_BUDGET`] is spent: a read has
//! no side effect, and an index confirmed by a later attempt is still taken after the
//! read started, so the retry keeps the read linearizable while sparing the client a 503
//! for a leader change that completes within the budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::members::{leader_gone, member_addr, wait_group_leader};
use super::network::{Call, Rpc};
use super::timeouts::{LEADER_WAIT, READ_TIMEOUT};
use super::types::{MetaRaft, NodeId};
use crate::MetaError;

/// Bound on one round, its retries included: the time to elect a leader and confirm a
/// read index with it. A read waiting on a round fails with 503 after this much.
pub const ROUND_BUDGET: Duration = LEADER_WAIT.saturating_add(READ_TIMEOUT);
/// Pause between two attempts of a round (openraft's metrics name a new leader within a
/// few of these after an election).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Rounds {
    /// The number of the last round started.
    started: u64,
    running: bool,
    /// A read is waiting for a round after the running one.
    wanted: bool,
}

type Outcome = (u64, Result<u64, MetaError>);

pub struct ReadBarrier {
    raft: MetaRaft,
    rpc: Rpc,
    me: NodeId,
    rounds: Arc<Mutex<Rounds>>,
    /// (round number, its read index or error) of the last finished round.
    done: watch::Sender<Outcome>,
}

fn lock(m: &Mutex<Rounds>) -> std::sync::MutexGuard<'_, Rounds> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl ReadBarrier {
    pub fn new(raft: MetaRaft, rpc: Rpc, me: NodeId) -> Self {
        let (done, _) = watch::channel((0, Ok(0)));
        ReadBarrier {
            raft,
            rpc,
            me,
            rounds: Arc::new(Mutex::new(Rounds::default())),
            done,
        }
    }

    /// A read index valid for a read that starts now.
    pub async fn read_index(&self) -> Result<u64, MetaError> {
        let mut done = self.done.subscribe();
        let target = {
            let mut r = lock(&self.rounds);
            if r.running {
                r.wanted = true;
                r.started + 1
            } else {
                r.running = true;
                r.started += 1;
                self.spawn_rounds(r.started);
                r.started
            }
        };
        let wait = done.wait_for(|(round, _)| *round >= target);
        // The round itself ends within its budget; the margin covers the hand-off.
        match tokio::time::timeout(ROUND_BUDGET + Duration::from_secs(1), wait).await {
            Ok(Ok(outcome)) => outcome.1.clone(),
            _ => Err(MetaError::Unavailable(
                "read index not confirmed in time".into(),
            )),
        }
    }

    /// Runs round `first`, then one more round for as long as reads keep waiting.
    fn spawn_rounds(&self, first: u64) {
        let (raft, rpc, me) = (self.raft.clone(), self.rpc.clone(), self.me);
        let rounds = self.rounds.clone();
        let done = self.done.clone();
        tokio::spawn(async move {
            let mut round = first;
            loop {
                let result = one_round(&raft, &rpc, me).await;
                let _ = done.send_replace((round, result));
                let mut r = lock(&rounds);
                if r.wanted {
                    r.wanted = false;
                    r.started += 1;
                    round = r.started;
                } else {
                    r.running = false;
                    return;
                }
            }
        });
    }
}

/// One round: attempts until one confirms a read index or [`ROUND_BUDGET`] is spent.
async fn one_round(raft: &MetaRaft, rpc: &Rpc, me: NodeId) -> Result<u64, MetaError> {
    let deadline = tokio::time::Instant::now() + ROUND_BUDGET;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let error = match tokio::time::timeout(left, attempt(raft, rpc, me)).await {
            Ok(Ok(index)) => return Ok(index),
            Ok(Err(e)) => e,
            Err(_) => MetaError::Unavailable(format!(
                "read index not confirmed within {ROUND_BUDGET:?} ({attempts} attempts)"
            )),
        };
        // A stopped Raft (its replica dropped after a move) never confirms anything: the
        // caller goes to another replica instead of waiting out the budget here.
        if tokio::time::Instant::now() + RETRY_PAUSE >= deadline
            || raft.metrics().borrow().state == openraft::ServerState::Shutdown
        {
            return Err(error);
        }
        tracing::debug!(attempts, %error, "read index not confirmed; trying again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// One attempt at a read index: from this node if it leads, else from the leader.
async fn attempt(raft: &MetaRaft, rpc: &Rpc, me: NodeId) -> Result<u64, MetaError> {
    let leader = wait_group_leader(raft, rpc.group())
        .await
        .map_err(|waited| {
            MetaError::Unavailable(format!(
                "no metadata leader within {waited:?} (is a majority of the nodes up?)"
            ))
        })?;
    if leader == me {
        return local_read_index(raft).await;
    }
    let addr = member_addr(raft, leader)?;
    // As for forwarded writes: a leader replaced while it is asked holds the round (and
    // every read waiting on it) no longer than it takes this node to learn of it.
    tokio::select! {
        r = rpc.call::<(), Result<u64, MetaError>>(&addr, Call::ReadIndex, &(), READ_TIMEOUT) => match r {
            Ok(r) => r,
            Err(e) => Err(MetaError::Unavailable(e.to_string())),
        },
        () = leader_gone(raft, leader) => Err(MetaError::Unavailable(format!(
            "node {leader} stopped leading while asked for a read index"
        ))),
    }
}

/// The read index of this node as leader: confirmed by a quorum's heartbeat answers.
///
/// openraft's read log id is its commit index, or the first entry of the leader's term if
/// that is later. A leader restarted by `kill -9` before anyone else was elected comes
/// back as leader of the same term with the commit index it last saved, which may lag
/// (it is saved without fsync, after the commit): entries it had committed and
/// acknowledged since are in its log but above that index, and a read at it would miss
/// them. Every acknowledged write is in the leader's log, so the read index is raised to
/// the last entry of that log: a read may wait for entries still being replicated (they
/// commit under this leader, or the wait times out with a 503), never miss one.
pub async fn local_read_index(raft: &MetaRaft) -> Result<u64, MetaError> {
    match tokio::time::timeout(READ_TIMEOUT, raft.get_read_log_id()).await {
        Ok(Ok((read, _applied))) => {
            let last = raft.metrics().borrow().last_log_index.unwrap_or(0);
            Ok(read.map_or(0, |l| l.index).max(last))
        }
        Ok(Err(e)) => Err(MetaError::Unavailable(e.to_string())),
        Err(_) => Err(MetaError::Unavailable(format!(
            "leadership not confirmed by a quorum within {READ_TIMEOUT:?}"
        ))),
    }
}
