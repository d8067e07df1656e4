//! The group's members as this node's Raft metrics show them: a member's address, and
//! the moment a leader stops being one.

use std::time::Duration;

use super::timeouts::{GROUP_LEADER_WAIT, LEADER_WAIT};
use super::types::{MetaRaft, NodeId};
use crate::MetaError;

/// The S3 address (which also carries the `/_cluster/` RPCs) of a member.
pub(crate) fn member_addr(raft: &MetaRaft, id: NodeId) -> Result<String, MetaError> {
    raft.metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&id)
        .map(|n| n.addr.clone())
        .ok_or_else(|| MetaError::Unavailable(format!("node {id} is not a member")))
}

/// Resolves once this node no longer names `leader` as the group's leader (an election
/// began, another node won, or Raft shut down).
pub(crate) async fn leader_gone(raft: &MetaRaft, leader: NodeId) {
    let mut metrics = raft.metrics();
    let _ = metrics.wait_for(|m| m.current_leader != Some(leader)).await;
}

/// The leader this node knows of, if it is a member of the membership this node holds: a
/// leader a membership change removed (a group's replica moved off its node) stays named
/// in the metrics until the next election, and is no leader to forward to.
pub(crate) fn member_leader(
    m: &openraft::RaftMetrics<NodeId, super::types::Node>,
) -> Option<NodeId> {
    m.current_leader
        .filter(|l| m.membership_config.membership().get_node(l).is_some())
}

/// Waits for a leader that is a member ([`member_leader`]): within [`LEADER_WAIT`], or
/// three times it when the leader this replica names was removed by a membership change
/// (a group's replica moved off its node: the others elect a leader once its lease runs
/// out, a planned change that a slow machine may stretch past one wait). None when none
/// came.
pub(crate) async fn wait_member_leader(raft: &MetaRaft) -> Option<NodeId> {
    let removed = {
        let m = raft.metrics();
        let m = m.borrow();
        m.current_leader.is_some() && member_leader(&m).is_none()
    };
    let limit = if removed {
        LEADER_WAIT * 3
    } else {
        LEADER_WAIT
    };
    wait_member_leader_for(raft, limit).await
}

/// [`wait_member_leader`] in root; in another group up to [`GROUP_LEADER_WAIT`]. Answers
/// the leader, or the bound waited.
pub(crate) async fn wait_group_leader(
    raft: &MetaRaft,
    group: crate::groups::GroupId,
) -> Result<NodeId, Duration> {
    if group == crate::groups::ROOT {
        return wait_member_leader(raft).await.ok_or(LEADER_WAIT);
    }
    wait_member_leader_for(raft, GROUP_LEADER_WAIT)
        .await
        .ok_or(GROUP_LEADER_WAIT)
}

/// Waits up to `limit` for a leader that is a member; None when none came.
pub(crate) async fn wait_member_leader_for(raft: &MetaRaft, limit: Duration) -> Option<NodeId> {
    let mut metrics = raft.metrics();
    let wait = metrics.wait_for(|m| member_leader(m).is_some());
    match tokio::time::timeout(limit, wait).await {
        Ok(Ok(m)) => member_leader(&m),
        _ => None,
    }
}
