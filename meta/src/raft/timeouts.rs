//! The time bounds of a request that needs the group: finding a leader, committing a
//! command, confirming a read index; and the wall clock that commands carry.

use std::time::Duration;

/// Bound on waiting for a leader to be known before a request fails with 503.
pub const LEADER_WAIT: Duration = Duration::from_secs(3);
/// Bound on waiting for the leader of a group other than root: such a group elects when
/// a move takes its leader away (a planned election, one to three seconds, longer on a
/// loaded machine), and a call from another node waits as long for it (`SEND_BUDGET`).
pub const GROUP_LEADER_WAIT: Duration = Duration::from_secs(8);
/// Bound on a command's commit (append on a quorum, apply on the leader).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a read-index round.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Milliseconds since the epoch: the stamp a command carries (deadlines, release and fence
/// times), taken by the node that proposes it so that every replica applies the same.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
