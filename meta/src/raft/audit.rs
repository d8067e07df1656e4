//! The audit across the groups ([`crate::audit`] compares; this walks): the sha1 space in
//! slices small enough for memory, each slice's FileDB rows from the groups the map gives
//! them, then the references root's index names there, compared; a slice with
//! differences is read and compared again, and only a difference found again with the
//! same (Δrefs, Δmagic) is confirmed. A confirmed danger (FileDB counts fewer references
//! than entries name) marks the record DO_NOT_DELETE.
//!
//! The index is read in each group owning key intervals, after its read barrier, in one
//! read transaction per slice and group; each counts the keys it owns (rows a split left
//! behind are its new owner's), and no pass runs while an index split copies.

use serde::{Deserialize, Serialize};

use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::audit::{Compared, FileDbRefs, Finding, Kind, Pending, Slice, Tally, compare, slices};
use crate::handoff::{FileRow, ROWS_MAX, RowTable};
use crate::ref_log::RefState;
use crate::{Command, MetaError, Response};

/// Index entries per slice: a slice's references and records (about 60 bytes each in
/// memory) stay within some tens of MB.
pub const SLICE_ENTRIES: u64 = 1 << 20;
/// Bound on the slices of one pass (and on the index scans it makes).
const SLICES_MAX: u64 = 4096;
/// Bound on the findings a report lists (all are counted, and all dangers marked).
pub const FINDINGS_LISTED_MAX: usize = 1000;

/// What one pass of the audit found (`POST /_admin/groups/audit`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    pub slices: u32,
    /// FileDB records compared.
    pub contents: u64,
    /// References the entries and the native API name, in the contents compared.
    pub references: u64,
    /// References in flight between groups, counted as FileDB counts them.
    pub in_flight: u64,
    /// Records already marked DO_NOT_DELETE (passed over).
    pub do_not_delete: u64,
    /// Differences the second read did not find again (writes between the reads).
    pub unconfirmed: u64,
    /// Confirmed differences, counted.
    pub confirmed: u64,
    /// Confirmed differences, the first [`FINDINGS_LISTED_MAX`].
    pub findings: Vec<Finding>,
    /// Records marked DO_NOT_DELETE by this pass.
    pub marked: Vec<placement::Sha1>,
}

impl Replicas {
    /// One pass of the audit over every content; with `mark`, each confirmed danger's
    /// record gets DO_NOT_DELETE.
    pub async fn audit(&self, mark: bool) -> Result<AuditReport, MetaError> {
        // During an index split's copy the moved keys' entries are in two groups, or in
        // part of one: a pass then would find differences that are none.
        let map = self.shard_map().await?;
        if let Some(plan) = self.root().read_local(|s| s.planned_map()).await?
            && plan
                .groups()
                .any(|g| g.kind == crate::groups::GroupKind::Index && map.group(g.id).is_none())
        {
            return Err(MetaError::Unavailable(
                "an index split is under way: the audit runs once its map is committed".into(),
            ));
        }
        let entries = self.root().read_local(|s| s.index_entries()).await?;
        let n = (entries / SLICE_ENTRIES + 1).min(SLICES_MAX);
        let mut report = AuditReport {
            slices: u32::try_from(n).unwrap_or(u32::MAX),
            ..AuditReport::default()
        };
        for slice in slices(report.slices) {
            let first = self.audit_slice(slice).await?;
            let confirmed = if first.findings.is_empty() {
                Vec::new()
            } else {
                let again = self.audit_slice(slice).await?;
                confirm(&first.findings, &again.findings)
            };
            report.contents += first.contents;
            report.references += first.references;
            report.in_flight += first.in_flight;
            report.do_not_delete += first.do_not_delete;
            report.unconfirmed += (first.findings.len() - confirmed.len()) as u64;
            report.confirmed += confirmed.len() as u64;
            for f in confirmed {
                if mark
                    && f.kind == Kind::Danger
                    && let (Some(refs), Some(magic)) = (f.refs, f.magic)
                {
                    let cmd = Command::AuditMark {
                        sha1: f.sha1,
                        refs,
                        magic,
                    };
                    if self.execute(cmd).await? == Response::Marked(true) {
                        tracing::error!(
                            sha1 = %f.sha1,
                            refs,
                            named = f.named.count,
                            "audit: FileDB counts fewer references than entries name; marked DO_NOT_DELETE"
                        );
                        report.marked.push(f.sha1);
                    }
                }
                if report.findings.len() < FINDINGS_LISTED_MAX {
                    report.findings.push(f);
                }
            }
        }
        Ok(report)
    }

    /// Reads one slice: FileDB's rows first (records, native references, pending
    /// references), then the index's references, and compares them.
    async fn audit_slice(&self, slice: Slice) -> Result<Compared, MetaError> {
        let mut filedb = FileDbRefs::default();
        self.each_filedb_row_in(RowTable::Files, slice, ROWS_MAX, |row| {
            if let FileRow::File { sha1, record } = row {
                filedb.files.insert(sha1, record);
            }
        })
        .await?;
        self.each_filedb_row_in(RowTable::NativeRefs, slice, ROWS_MAX, |row| {
            if let FileRow::NativeRefs { sha1, count, magic } = row {
                filedb.natives.insert(sha1, Tally { count, magic });
            }
        })
        .await?;
        self.each_filedb_row_in(RowTable::RefLog, slice, ROWS_MAX, |row| {
            let FileRow::Ref {
                sha1,
                ref_id,
                state,
            } = row
            else {
                return;
            };
            match state {
                RefState::Pending {
                    magic, bucket, key, ..
                } => filedb.pending.push(Pending {
                    sha1,
                    ref_id,
                    magic,
                    bucket,
                    key,
                }),
                RefState::Released { .. } => {
                    filedb.released.insert((sha1, ref_id));
                }
            }
        })
        .await?;
        // Each index group's entries, after its read barrier: a group counts the keys it
        // owns, and the pending references of those keys only.
        let map = self.shard_map().await?;
        let mut index = Vec::new();
        for group in index_groups(&map) {
            let query = ReadQuery::IndexRefs {
                slice,
                released: filedb.released.clone(),
                pending: filedb
                    .pending
                    .iter()
                    .filter(|p| map.index_group(&p.bucket, &p.key) == group)
                    .cloned()
                    .collect(),
            };
            match self.read_in(&map, group, query).await? {
                ReadAnswer::IndexRefs(refs) => index.push(refs),
                other => return Err(MetaError::Unexpected(format!("{other:?}"))),
            }
        }
        Ok(compare(&filedb, &index))
    }
}

/// The groups owning some key interval of the index, ascending (root among them while it
/// owns keys).
fn index_groups(map: &crate::groups::ShardMap) -> Vec<crate::groups::GroupId> {
    let mut groups: Vec<_> = map.index_intervals().map(|(_, _, g)| g).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The findings of `first` that `again` found too, of the same kind and difference.
fn confirm(first: &[Finding], again: &[Finding]) -> Vec<Finding> {
    first
        .iter()
        .filter(|f| {
            again
                .iter()
                .any(|g| g.sha1 == f.sha1 && g.kind == f.kind && g.delta() == f.delta())
        })
        .map(|f| {
            // The second read's record: the one a mark must still find.
            again
                .iter()
                .find(|g| g.sha1 == f.sha1)
                .cloned()
                .unwrap_or_else(|| f.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::Sha1;

    fn finding(b: u8, kind: Kind, refs: u32, magic: u32, named: u32) -> Finding {
        Finding {
            sha1: Sha1([b; 20]),
            kind,
            refs: Some(refs),
            magic: Some(magic),
            named: Tally {
                count: named,
                magic: 0,
            },
        }
    }

    #[test]
    fn a_difference_is_confirmed_only_when_found_again_alike() {
        let first = vec![
            finding(1, Kind::Leak, 3, 7, 2),
            finding(2, Kind::Danger, 1, 7, 2),
            finding(3, Kind::Leak, 3, 7, 2),
        ];
        // 1 again alike; 2 with another magic (a write in flight); 3 gone.
        let again = vec![
            finding(1, Kind::Leak, 3, 7, 2),
            finding(2, Kind::Danger, 1, 9, 2),
        ];
        let got = confirm(&first, &again);
        assert_eq!(got, vec![finding(1, Kind::Leak, 3, 7, 2)]);
        assert!(confirm(&first, &[]).is_empty());
    }

    #[test]
    fn the_report_round_trips_through_json() {
        let report = AuditReport {
            slices: 3,
            contents: u64::MAX,
            findings: vec![finding(4, Kind::Magic, 1, 2, 1)],
            marked: vec![Sha1([5; 20])],
            ..AuditReport::default()
        };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<AuditReport>(&json).unwrap(), report);
    }
}
