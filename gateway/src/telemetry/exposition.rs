//! `/_metrics`: a [`Snapshot`] and the live request families, encoded by
//! `prometheus-client` in the OpenMetrics text format (which Prometheus scrapes).
//!
//! Each scrape builds a fresh registry: the request families are shared clones (their
//! counts live on), the rest are gauges and counters set from the snapshot's values. That
//! costs a few hundred small allocations per scrape and keeps one source for every number.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::requests::RequestMetrics;
use super::snapshot::{PAIR_FLAGS, ROLES, Snapshot};

/// The content type of the text below.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DiskLabels {
    disk: String,
    pair: u32,
    index: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PairLabels {
    pair: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PairFlagLabels {
    pair: u32,
    flag: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: u32,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: u64) {
    let g: Gauge = Gauge::default();
    g.set(to_i64(v));
    r.register(name, help, g);
}

fn float_gauge(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

/// The text of one scrape.
pub fn render(s: &Snapshot, requests: &RequestMetrics) -> Result<String, std::fmt::Error> {
    let mut r = Registry::default();
    requests.register(&mut r);
    stored(&mut r, s);
    disks(&mut r, s);
    valkyrie(&mut r, s);
    unmove(&mut r, s);
    raft(&mut r, s);
    groups(&mut r, s);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)?;
    Ok(out)
}

fn stored(r: &mut Registry, s: &Snapshot) {
    gauge(
        r,
        "gateway_stats_scans",
        "Scans of the metadata behind gateway_stored_* finished since start",
        s.stats_scans,
    );
    // Before the first scan ends the stored gauges are absent rather than a false 0.
    let Some(st) = &s.stored else { return };
    let values: [(&str, &str, u64); 9] = [
        (
            "gateway_stored_logical_bytes",
            "Sum of object sizes over all keys (what clients stored)",
            st.logical_bytes,
        ),
        (
            "gateway_stored_physical_bytes",
            "Sizes of the distinct contents times 2 copies (what the disks hold)",
            st.physical_bytes,
        ),
        ("gateway_stored_objects", "Objects (keys)", st.objects),
        (
            "gateway_stored_parts",
            "Parts of multipart uploads in progress",
            st.parts,
        ),
        (
            "gateway_stored_contents",
            "Distinct contents (FileDB records)",
            st.contents,
        ),
        (
            "gateway_stored_references",
            "References to contents (sum over FileDB)",
            st.references,
        ),
        (
            "gateway_stored_do_not_delete",
            "Contents flagged DO_NOT_DELETE (reference arithmetic went wrong)",
            st.do_not_delete,
        ),
        (
            "gateway_stored_deleting",
            "Contents without references, waiting for Valkyrie",
            st.deleting,
        ),
        (
            "gateway_stored_unsized_contents",
            "Contents whose size the last scan could not learn (left out of physical bytes)",
            st.unsized_contents,
        ),
    ];
    for (name, help, v) in values {
        gauge(r, name, help, v);
    }
    gauge(
        r,
        "gateway_stats_scan_timestamp_seconds",
        "Unix time the last scan ended",
        st.scanned_at_secs,
    );
    float_gauge(
        r,
        "gateway_stats_scan_duration_seconds",
        "How long the last scan took",
        st.scan_duration_secs,
    );
}

fn disks(r: &mut Registry, s: &Snapshot) {
    let free = Family::<DiskLabels, Gauge>::default();
    let capacity = Family::<DiskLabels, Gauge>::default();
    let flags = Family::<PairFlagLabels, Gauge>::default();
    let writable = Family::<PairLabels, Gauge>::default();
    for (id, p) in &s.pairs {
        for (index, disk) in p.disks.iter().enumerate() {
            let l = DiskLabels {
                disk: disk.as_str().to_owned(),
                pair: id.0,
                index: index as u32,
            };
            free.get_or_create(&l).set(to_i64(p.free_bytes[index]));
            capacity
                .get_or_create(&l)
                .set(to_i64(p.capacity_bytes[index]));
        }
        for (flag, name) in PAIR_FLAGS {
            flags
                .get_or_create(&PairFlagLabels {
                    pair: id.0,
                    flag: name,
                })
                .set(i64::from(p.flags.contains(flag)));
        }
        writable
            .get_or_create(&PairLabels { pair: id.0 })
            .set(i64::from(p.flags.writable()));
    }
    r.register(
        "gateway_disk_free_bytes",
        "Free bytes of each disk of each pair (last measurement)",
        free,
    );
    r.register(
        "gateway_disk_capacity_bytes",
        "Capacity of each disk of each pair (last measurement)",
        capacity,
    );
    r.register(
        "gateway_pair_flag",
        "1 when the pair carries the flag (LOCKED, READ_ONLY, DRAINING)",
        flags,
    );
    r.register(
        "gateway_pair_writable",
        "1 when new content may be written to the pair",
        writable,
    );
}

/// The in-process workers' counters, under the names the Valkyrie binary has always used.
fn valkyrie(r: &mut Registry, s: &Snapshot) {
    type Pick = fn(&valkyrie::MetricsSnapshot) -> u64;
    let counters: [(&str, &str, Pick); 11] = [
        (
            "valkyrie_files_scanned",
            "Names visited by the scrubber",
            |m| m.files_scanned,
        ),
        (
            "valkyrie_bytes_verified",
            "Bytes read that hash to their name",
            |m| m.bytes_verified,
        ),
        (
            "valkyrie_repaired",
            "Copies rewritten from the other disk of the pair",
            |m| m.repaired,
        ),
        (
            "valkyrie_quarantined",
            "Content files renamed to <sha1>.deleted.<ts>",
            |m| m.quarantined,
        ),
        (
            "valkyrie_deleted",
            "Quarantined files deleted after the quarantine",
            |m| m.deleted,
        ),
        (
            "valkyrie_junk_removed",
            "Verified copies of content recorded on another pair, removed",
            |m| m.junk_removed,
        ),
        (
            "valkyrie_temp_removed",
            "Abandoned uploads removed from tmp/",
            |m| m.temp_removed,
        ),
        (
            "valkyrie_restored",
            "Quarantined copies renamed back",
            |m| m.restored,
        ),
        (
            "valkyrie_deleting_removed",
            "Deleting entries removed from the catalog",
            |m| m.deleting_removed,
        ),
        (
            "valkyrie_errors",
            "Failed operations (each is logged)",
            |m| m.errors,
        ),
        ("valkyrie_scrub_passes", "Scrub passes finished", |m| {
            m.passes_done
        }),
    ];
    let gauges: [(&str, &str, Pick); 2] = [
        (
            "valkyrie_scrub_pass_started_seconds",
            "Unix time the current scrub pass started",
            |m| m.pass_started_secs,
        ),
        (
            "valkyrie_scrub_pass_files_done",
            "Names visited in the current scrub pass",
            |m| m.pass_files_done,
        ),
    ];
    let label = |w: &super::snapshot::WorkerView| DiskLabels {
        disk: w.disk.clone(),
        pair: w.pair.0,
        index: w.index as u32,
    };
    for (name, help, pick) in counters {
        let f = Family::<DiskLabels, Counter>::default();
        for w in &s.workers {
            f.get_or_create(&label(w)).inc_by(pick(&w.counters));
        }
        r.register(name, help, f);
    }
    for (name, help, pick) in gauges {
        let f = Family::<DiskLabels, Gauge>::default();
        for w in &s.workers {
            f.get_or_create(&label(w)).set(to_i64(pick(&w.counters)));
        }
        r.register(name, help, f);
    }
}

fn unmove(r: &mut Registry, s: &Snapshot) {
    type Pick = fn(&valkyrie::UnmoveProgress) -> u64;
    let gauges: [(&str, &str, Pick); 6] = [
        (
            "gateway_unmove_files",
            "Content files on the surviving disk when the drain started",
            |d| d.files_total,
        ),
        (
            "gateway_unmove_files_done",
            "Content files walked by the drain so far",
            |d| d.files_done,
        ),
        (
            "gateway_unmove_bytes",
            "Bytes on the surviving disk when the drain started",
            |d| d.bytes_total,
        ),
        (
            "gateway_unmove_bytes_done",
            "Bytes walked by the drain so far",
            |d| d.bytes_done,
        ),
        (
            "gateway_unmove_files_failed",
            "Files the drain could not move (still on the failed pair)",
            |d| d.files_failed,
        ),
        (
            "gateway_unmove_finished",
            "1 when the drain of the pair has finished",
            |d| u64::from(d.finished),
        ),
    ];
    for (name, help, pick) in gauges {
        let f = Family::<PairLabels, Gauge>::default();
        for d in &s.drains {
            f.get_or_create(&PairLabels { pair: d.pair })
                .set(to_i64(pick(d)));
        }
        r.register(name, help, f);
    }
}

fn raft(r: &mut Registry, s: &Snapshot) {
    let v = &s.raft;
    let role = Family::<RoleLabels, Gauge>::default();
    for name in ROLES {
        role.get_or_create(&RoleLabels { role: name })
            .set(i64::from(name == v.role));
    }
    r.register(
        "gateway_raft_role",
        "1 for this node's role in the metadata group",
        role,
    );
    gauge(r, "gateway_raft_node_id", "This node's id", v.node_id);
    gauge(r, "gateway_raft_term", "Current Raft term", v.term);
    gauge(
        r,
        "gateway_raft_leader_id",
        "The leader this node knows (0: none)",
        v.leader.unwrap_or(0),
    );
    gauge(
        r,
        "gateway_raft_voters",
        "Voters of the group",
        v.voters.len() as u64,
    );
    gauge(
        r,
        "gateway_raft_last_log_index",
        "Index of the last entry in this node's log",
        v.last_log_index,
    );
    gauge(
        r,
        "gateway_raft_commit_index",
        "Highest committed index this node knows (the leader: held by a majority)",
        v.commit_index,
    );
    gauge(
        r,
        "gateway_raft_applied_index",
        "Index of the last entry applied to this node's state machine",
        v.applied_index,
    );
}

/// Per metadata group: this node's replica's records and lag and the group's leader (for
/// the groups this node holds a replica of), and every group's replica count.
fn groups(r: &mut Registry, s: &Snapshot) {
    let Some(status) = &s.groups else {
        return;
    };
    type Pick = fn(&meta::raft::GroupStatus) -> Option<u64>;
    let gauges: [(&str, &str, Pick); 4] = [
        (
            "gateway_group_records",
            "Records in every table of this node's replica of the group",
            |g| g.held.then_some(g.records),
        ),
        (
            "gateway_group_lag",
            "Log entries of the group this node holds but has not applied yet",
            |g| g.held.then_some(g.lag),
        ),
        (
            "gateway_group_leader_id",
            "The group's leader (0 while there is none)",
            |g| g.held.then(|| g.leader.unwrap_or(0)),
        ),
        ("gateway_group_replicas", "Voters of the group", |g| {
            Some(g.replicas.len() as u64)
        }),
    ];
    for (name, help, pick) in gauges {
        let f = Family::<GroupLabels, Gauge>::default();
        for g in &status.groups {
            let Some(value) = pick(g) else { continue };
            f.get_or_create(&GroupLabels {
                group: g.id,
                kind: g.kind.name(),
            })
            .set(to_i64(value));
        }
        r.register(name, help, f);
    }
    gauge(
        r,
        "gateway_shard_map_version",
        "Version of the shard map this node routes by",
        status.version,
    );
}
