//! Elections with a pre-vote: a node starts an election only when a majority of the
//! voters (itself included) agree that no leader is in contact with them.
//!
//! Why: openraft 0.9 has no pre-vote (it exists only in its 0.10 alpha line). Without one,
//! a node cut off from the group by a partition times out again and again, raising its
//! term each time; when the partition heals, its higher term deposes the healthy leader
//! (the leader's next append is answered with the higher vote) and the group pays one more
//! election, 1-3 s without writes, for nothing. So openraft's own election timer is off
//! (`Config::enable_elect = false`) and this task decides when to call
//! `trigger().elect()`:
//!
//! - Every node notes when it last heard from a leader (an accepted append, heartbeat or
//!   snapshot chunk: [`LeaderContact::touch`]); a leader is always in contact.
//! - A voter that has heard nothing for openraft's leader lease (`election_timeout_max`)
//!   plus a random part of `election_timeout_min` asks every other voter
//!   `/_cluster/pre-vote`. A peer grants when it has not heard from a leader for the lease
//!   either, is not a leader itself, may vote at all, and the candidate's log is at least
//!   as up to date as its own (the rule of a real vote, so a lagging node does not win
//!   pre-votes it would lose for real).
//! - With grants from a majority of the voters the node calls an election; openraft's
//!   real vote then follows its ordinary rules (its own lease check agrees, since a
//!   pre-vote is only granted after the same lease has run out). Otherwise it waits
//!   another randomized timeout. Its term never moves while it cannot win.
//!
//! A peer that answers with an HTTP error runs a release without pre-votes (a rolling
//! upgrade: its router takes the path for an S3 request and answers 403): its real vote
//! decides for it, so its answer counts as a grant. An unreachable peer counts as a
//! refusal.
//!
//! Timing with the default timeout (500 ms): a dead, paused or cut-off leader is
//! replaced after 1.0-1.5 s without contact plus one pre-vote and one vote round trip,
//! the same as openraft's own timer (lease, then timeout) before.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use openraft::{LogId, ServerState};
use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::log::LogStore;
use super::members::member_addr;
use super::network::{Call, Rpc, RpcError};
use super::types::{MetaRaft, NodeId};

/// How often the elector looks at the time since the last contact.
const TICK: Duration = Duration::from_millis(50);

/// When this node last heard from a leader, as milliseconds since `base`.
pub struct LeaderContact {
    base: Instant,
    last_ms: AtomicU64,
}

impl LeaderContact {
    /// Starts as "just heard": a node that starts gives the group's leader a lease's time
    /// to reach it before it asks for an election.
    pub fn new() -> Self {
        LeaderContact {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// A leader was heard from just now.
    pub fn touch(&self) {
        let now = self.base.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Time since a leader was last heard from.
    pub fn silence(&self) -> Duration {
        let now = self.base.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

impl Default for LeaderContact {
    fn default() -> Self {
        Self::new()
    }
}

/// A candidate's question: would you vote for me in `term` with this log?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    /// The term the candidate would campaign in (its current term plus one).
    pub term: u64,
    pub last_log_id: Option<LogId<NodeId>>,
}

/// A peer's answer; `refused` says why when not granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    pub granted: bool,
    pub refused: Option<String>,
}

/// What a node knows of itself when it answers a pre-vote.
pub struct Voter<'a> {
    pub state: ServerState,
    pub current_term: u64,
    pub last_log_id: Option<LogId<NodeId>>,
    /// Time since it last heard from a leader.
    pub silence: Duration,
    /// openraft's leader lease: a real vote is refused within it.
    pub lease: Duration,
    /// False while a node with an emptied data folder has not caught up.
    pub may_vote: bool,
    pub voters: &'a BTreeSet<NodeId>,
}

/// The peer's side of a pre-vote: a pure decision, so its rules are tested alone.
pub fn answer(me: &Voter<'_>, req: &PreVoteRequest) -> PreVoteResponse {
    let refuse = |why: String| PreVoteResponse {
        granted: false,
        refused: Some(why),
    };
    if !me.may_vote {
        return refuse("rejoining: no vote before catching up".into());
    }
    if !me.voters.contains(&req.candidate) {
        return refuse(format!("node {} is not a voter", req.candidate));
    }
    if me.state == ServerState::Leader {
        return refuse("this node leads".into());
    }
    if me.silence < me.lease {
        return refuse(format!(
            "heard from the leader {} ms ago",
            me.silence.as_millis()
        ));
    }
    if req.term <= me.current_term {
        return refuse(format!(
            "term {} is not past this node's term {}",
            req.term, me.current_term
        ));
    }
    if req.last_log_id < me.last_log_id {
        return refuse(format!(
            "the candidate's log ends at {:?}, this node's at {:?}",
            req.last_log_id, me.last_log_id
        ));
    }
    PreVoteResponse {
        granted: true,
        refused: None,
    }
}

/// Whether `grants` out of `voters` (the candidate's own included) is a majority.
pub fn is_majority(grants: usize, voters: usize) -> bool {
    grants * 2 > voters
}

/// The elector's view of the node it runs on.
pub struct Elector {
    pub raft: MetaRaft,
    pub rpc: Rpc,
    pub log: LogStore,
    pub me: NodeId,
    pub contact: Arc<LeaderContact>,
    pub election_timeout_min: Duration,
    pub lease: Duration,
}

impl Elector {
    /// Runs until the Raft node shuts down.
    pub async fn run(self) {
        let mut wait = self.randomized_wait();
        // The next attempt after one that did not lead to a leader. Kept apart from the
        // contact with a leader: noting an attempt as contact made this node refuse the
        // other nodes' pre-votes ("heard from the leader") for a lease although no leader
        // existed, so a node that could win waited on chance (up to 60 s once).
        let mut not_before = Instant::now();
        loop {
            tokio::time::sleep(TICK).await;
            let m = self.raft.metrics().borrow().clone();
            if matches!(m.state, ServerState::Shutdown) {
                return;
            }
            if m.state == ServerState::Leader {
                self.contact.touch();
                continue;
            }
            let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
            if !voters.contains(&self.me) {
                continue;
            }
            // Alone in the group: nobody else can lead, and nobody needs asking.
            let alone = voters.len() == 1;
            if !alone && (self.contact.silence() < wait || Instant::now() < not_before) {
                continue;
            }
            let last_log_id = match self.log.last_log_id().await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "elector: cannot read the log's end");
                    continue;
                }
            };
            let req = PreVoteRequest {
                candidate: self.me,
                term: m.current_term + 1,
                last_log_id,
            };
            let grants = if alone {
                1
            } else {
                1 + self.ask(&voters, &req).await
            };
            // The answers took time (an unreachable peer, its whole timeout): meanwhile
            // this node may have voted in another's election or heard a new leader. An
            // election now would depose that leader for nothing.
            let still = {
                let now = self.raft.metrics().borrow().clone();
                now.current_term == m.current_term
                    && now.state != ServerState::Leader
                    && (alone || self.contact.silence() >= self.lease)
            };
            if still && is_majority(grants, voters.len()) {
                tracing::info!(
                    term = req.term,
                    grants,
                    voters = voters.len(),
                    "no leader heard from: pre-vote won, calling an election"
                );
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
            }
            // Either way, the next attempt comes a randomized timeout later (the election
            // just called, or a leader, usually settles it first).
            not_before = Instant::now() + self.randomized_retry();
            wait = self.randomized_wait();
        }
    }

    /// The lease plus a random part of the shortest timeout, so that two nodes timing out
    /// together rarely ask at once.
    fn randomized_wait(&self) -> Duration {
        let jitter_ms = self.election_timeout_min.as_millis().max(1) as u64;
        self.lease + Duration::from_millis(rand::rng().random_range(0..jitter_ms))
    }

    /// Between two attempts of this node: the shortest timeout plus a random part of it.
    fn randomized_retry(&self) -> Duration {
        let min_ms = self.election_timeout_min.as_millis().max(1) as u64;
        Duration::from_millis(min_ms + rand::rng().random_range(0..min_ms))
    }

    /// Asks every other voter at once; the number of grants, counted until they make a
    /// majority with this node's own (an unreachable peer is not waited for then).
    async fn ask(&self, voters: &BTreeSet<NodeId>, req: &PreVoteRequest) -> usize {
        use futures_util::StreamExt as _;
        let timeout = self.election_timeout_min;
        let mut asks = futures_util::stream::FuturesUnordered::new();
        for &id in voters.iter().filter(|&&id| id != self.me) {
            let Ok(addr) = member_addr(&self.raft, id) else {
                continue;
            };
            let rpc = self.rpc.clone();
            let req = *req;
            asks.push(async move {
                match rpc
                    .call::<_, PreVoteResponse>(&addr, Call::PreVote, &req, timeout)
                    .await
                {
                    Ok(r) => {
                        if let Some(why) = &r.refused {
                            tracing::debug!(peer = id, why, "pre-vote refused");
                        }
                        r.granted
                    }
                    // A release without pre-votes (root only: groups came later) or a
                    // peer without this group's replica yet: its real vote decides.
                    Err(RpcError::Status(..)) => true,
                    Err(e) => {
                        tracing::debug!(peer = id, error = %e, "pre-vote not answered");
                        false
                    }
                }
            });
        }
        let mut grants = 0;
        while let Some(granted) = asks.next().await {
            grants += usize::from(granted);
            if is_majority(1 + grants, voters.len()) {
                break;
            }
        }
        grants
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn follower(voters: &BTreeSet<NodeId>) -> Voter<'_> {
        Voter {
            state: ServerState::Follower,
            current_term: 4,
            last_log_id: log(4, 100),
            silence: Duration::from_millis(1500),
            lease: Duration::from_millis(1000),
            may_vote: true,
            voters,
        }
    }

    fn req(term: u64, last: Option<LogId<NodeId>>) -> PreVoteRequest {
        PreVoteRequest {
            candidate: 2,
            term,
            last_log_id: last,
        }
    }

    #[test]
    fn a_pre_vote_is_granted_only_when_no_leader_is_heard_and_the_log_is_as_new() {
        let voters: BTreeSet<NodeId> = [1, 2, 3].into();
        let me = follower(&voters);
        assert!(answer(&me, &req(5, log(4, 100))).granted);
        assert!(answer(&me, &req(5, log(4, 120))).granted);
        assert!(answer(&me, &req(9, log(5, 1))).granted, "a later term wins");

        // A leader heard within the lease: the candidate is the one cut off.
        let heard = Voter {
            silence: Duration::from_millis(200),
            ..follower(&voters)
        };
        assert!(!answer(&heard, &req(5, log(4, 100))).granted);
        // A shorter log, or an older last term.
        assert!(!answer(&me, &req(5, log(4, 99))).granted);
        assert!(!answer(&me, &req(5, log(3, 500))).granted);
        assert!(!answer(&me, &req(5, None)).granted);
        // A term that is not past ours.
        assert!(!answer(&me, &req(4, log(4, 100))).granted);
        // Leaders, rejoining nodes and non-voters refuse.
        let leader = Voter {
            state: ServerState::Leader,
            ..follower(&voters)
        };
        assert!(!answer(&leader, &req(5, log(4, 100))).granted);
        let rejoining = Voter {
            may_vote: false,
            ..follower(&voters)
        };
        assert!(!answer(&rejoining, &req(5, log(4, 100))).granted);
        let learner = PreVoteRequest {
            candidate: 7,
            ..req(5, log(4, 100))
        };
        let refused = answer(&me, &learner);
        assert!(!refused.granted);
        assert!(refused.refused.is_some_and(|w| w.contains("not a voter")));
    }

    #[test]
    fn majorities() {
        assert!(is_majority(1, 1));
        assert!(!is_majority(1, 2));
        assert!(is_majority(2, 3));
        assert!(!is_majority(1, 3));
        assert!(is_majority(3, 5));
        assert!(!is_majority(2, 5));
    }

    #[test]
    fn a_pre_vote_round_trips_through_its_wire_format() {
        let r = req(7, log(6, 42));
        let bytes = postcard::to_stdvec(&r).unwrap();
        assert_eq!(postcard::from_bytes::<PreVoteRequest>(&bytes).unwrap(), r);
        for resp in [
            PreVoteResponse {
                granted: true,
                refused: None,
            },
            PreVoteResponse {
                granted: false,
                refused: Some("this node leads".into()),
            },
        ] {
            let bytes = postcard::to_stdvec(&resp).unwrap();
            assert_eq!(
                postcard::from_bytes::<PreVoteResponse>(&bytes).unwrap(),
                resp
            );
        }
    }

    #[test]
    fn contact_silence_grows_and_resets() {
        let c = LeaderContact::new();
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.silence() >= Duration::from_millis(20));
        c.touch();
        assert!(c.silence() < Duration::from_millis(20));
    }
}
