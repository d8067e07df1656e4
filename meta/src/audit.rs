//! The audit (`docs/scaling.md`, section 3): FileDB's `(refs, magic)` of each content
//! against the references that name it, the backstop for bugs, restored backups and hand
//! edits that the article's Valkyrie pass is.
//!
//! A content's expected count is one per index entry that names it (current objects,
//! noncurrent versions, upload parts) plus its native references (FileDB's own table),
//! and its expected magic the wrapping sum of theirs. References in flight between
//! groups count as FileDB counts them (as `gateway fsck` does): a reference pending in
//! `ref_log` that no entry holds yet (its gateway stopped between inc and entry; the
//! reconciler releases it after its deadline), and a dec owed in an index group's
//! `outbox` that its FileDB group has not applied (no `Released` row). The index and
//! FileDB are read in separate transactions, possibly on separate groups, so a
//! difference may be a write that landed between the two reads; the caller confirms a
//! difference only when the next pass finds the same `(Δrefs, Δmagic)` (every reference
//! has its own random magic, so a write in flight shows another Δmagic each time).
//!
//! What a confirmed difference means:
//! - [`Kind::Leak`]: FileDB counts more than the entries name. The content stays on disk
//!   for nothing; reported (the native API's references are counted, so this is not
//!   them).
//! - [`Kind::Danger`]: FileDB counts fewer. The last dec would free content an entry
//!   still names: the record gets DO_NOT_DELETE ([`crate::Command::AuditMark`]), the
//!   article's own alarm, which keeps it on disk for good.
//! - [`Kind::Magic`]: the right number of references but not the ones taken (some
//!   reference was released with another's magic); reported, the article's arithmetic
//!   already keeps such content.
//! - [`Kind::NoRecord`]: entries name a content FileDB has no record of (its last dec
//!   freed it, or the record was lost): reported.

use std::collections::{BTreeMap, BTreeSet};

use placement::Sha1;
use redb::{ReadTransaction, ReadableTable as _};
use serde::{Deserialize, Serialize};

use crate::tables::{OBJECTS, PARTS, VERSIONS};
use crate::versions::VersionRecord;
use crate::{FileRecord, MetaError};

/// A slice of the sha1 space, `[start, end)` (no end: to the last sha1).
pub type Slice = ([u8; 20], Option<[u8; 20]>);

/// References counted for one content: how many, and the wrapping sum of their magics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub count: u32,
    pub magic: u32,
}

impl Tally {
    pub fn add(&mut self, count: u32, magic: u32) {
        self.count = self.count.saturating_add(count);
        self.magic = self.magic.wrapping_add(magic);
    }
}

/// What an index group's entries name in a slice (one read transaction).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRefs {
    pub named: BTreeMap<Sha1, Tally>,
    /// References counted in flight: pending ones no entry holds, decs owed.
    pub in_flight: u64,
}

/// A reference pending in a FileDB group's `ref_log`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub sha1: Sha1,
    pub ref_id: u64,
    pub magic: u32,
    pub bucket: String,
    pub key: String,
}

/// What FileDB holds in a slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileDbRefs {
    pub files: BTreeMap<Sha1, FileRecord>,
    pub natives: BTreeMap<Sha1, Tally>,
    pub pending: Vec<Pending>,
    /// References released (`Released` rows of `ref_log`): an outbox row of one owes
    /// nothing more.
    pub released: BTreeSet<(Sha1, u64)>,
}

/// The kind of a difference (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Leak,
    Danger,
    Magic,
    NoRecord,
}

/// One content whose record does not match the references that name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub sha1: Sha1,
    pub kind: Kind,
    /// FileDB's record (None: no record).
    pub refs: Option<u32>,
    pub magic: Option<u32>,
    /// The references the entries and the native API name.
    pub named: Tally,
}

impl Finding {
    /// The difference a second pass must find again to confirm it: (Δrefs, Δmagic).
    pub fn delta(&self) -> (i64, u32) {
        (
            i64::from(self.refs.unwrap_or(0)) - i64::from(self.named.count),
            self.magic.unwrap_or(0).wrapping_sub(self.named.magic),
        )
    }
}

/// What one comparison of a slice found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compared {
    /// Records compared.
    pub contents: u64,
    /// References the index and the native API name, in contents compared.
    pub references: u64,
    /// References in flight between groups, counted.
    pub in_flight: u64,
    /// Records already marked DO_NOT_DELETE (passed over: the alarm is raised).
    pub do_not_delete: u64,
    pub findings: Vec<Finding>,
}

/// Compares FileDB with the index's references in one slice (see the module's text).
pub fn compare(filedb: &FileDbRefs, index: &[IndexRefs]) -> Compared {
    let mut named: BTreeMap<Sha1, Tally> = filedb.natives.clone();
    let mut out = Compared::default();
    for group in index {
        for (sha1, t) in &group.named {
            named.entry(*sha1).or_default().add(t.count, t.magic);
        }
        out.in_flight += group.in_flight;
    }
    let sha1s: BTreeSet<Sha1> = filedb.files.keys().chain(named.keys()).copied().collect();
    for sha1 in sha1s {
        let want = named.get(&sha1).copied().unwrap_or_default();
        let Some(record) = filedb.files.get(&sha1) else {
            out.findings.push(Finding {
                sha1,
                kind: Kind::NoRecord,
                refs: None,
                magic: None,
                named: want,
            });
            continue;
        };
        if record.do_not_delete() {
            out.do_not_delete += 1;
            continue;
        }
        out.contents += 1;
        out.references += u64::from(want.count);
        let kind = if record.refs > want.count {
            Kind::Leak
        } else if record.refs < want.count {
            Kind::Danger
        } else if record.magic != want.magic {
            Kind::Magic
        } else {
            continue;
        };
        out.findings.push(Finding {
            sha1,
            kind,
            refs: Some(record.refs),
            magic: Some(record.magic),
            named: want,
        });
    }
    out
}

/// Whether `sha1` lies in `slice`.
pub fn in_slice(slice: &Slice, sha1: &Sha1) -> bool {
    sha1.0 >= slice.0 && slice.1.is_none_or(|end| sha1.0 < end)
}

/// `n` slices of equal width covering the sha1 space (by the first four bytes), at least
/// one.
pub fn slices(n: u32) -> Vec<Slice> {
    let n = u64::from(n.max(1));
    let start = |i: u64| {
        let mut s = [0u8; 20];
        let at = u32::try_from((i << 32) / n).unwrap_or(u32::MAX);
        s[..4].copy_from_slice(&at.to_be_bytes());
        s
    };
    (0..n)
        .map(|i| (start(i), (i + 1 < n).then(|| start(i + 1))))
        .collect()
}

/// The references this group's index names in `slice` (current objects, noncurrent
/// versions, upload parts), with those in flight that `filedb` (the slice's FileDB rows)
/// still counts: its pending references that no entry or outbox row here holds, and the
/// decs owed in this outbox that it has not applied. One read transaction.
pub fn index_refs(
    txn: &ReadTransaction,
    slice: &Slice,
    released: &BTreeSet<(Sha1, u64)>,
    pending: &[Pending],
) -> Result<IndexRefs, MetaError> {
    // Only the keys this group owns: rows a split left behind (dropped in batches after
    // the map's commit) are counted by the group that owns them now.
    let own = crate::ownership::read_at(txn)?;
    let owns = |bucket: &str, key: &[u8]| own.as_ref().is_none_or(|o| o.owns_key(bucket, key));
    let mut out = IndexRefs::default();
    let mut named: BTreeMap<Sha1, Tally> = BTreeMap::new();
    let mut add = |sha1: Sha1, magic: u32| {
        if in_slice(slice, &sha1) {
            named.entry(sha1).or_default().add(1, magic);
        }
    };
    for row in txn.open_table(OBJECTS)?.iter()? {
        let (k, v) = row?;
        let (bucket, key) = k.value();
        if owns(bucket, key) {
            let o = crate::versions::decode_object(v.value())?;
            add(o.sha1, o.magic.get());
        }
    }
    for row in txn.open_table(VERSIONS)?.iter()? {
        let (k, v) = row?;
        let (bucket, key, _) = k.value();
        if !owns(bucket, key) {
            continue;
        }
        if let VersionRecord::Object { record, .. } = VersionRecord::decode(v.value())? {
            add(record.sha1, record.magic.get());
        }
    }
    let uploads = txn.open_table(crate::tables::UPLOADS)?;
    // Whether each upload met is of a key this group owns (one entry per upload).
    let mut upload_owned: BTreeMap<String, bool> = BTreeMap::new();
    for row in txn.open_table(PARTS)?.iter()? {
        let (k, v) = row?;
        let (id, _) = k.value();
        let owned = match upload_owned.get(id) {
            Some(owned) => *owned,
            None => {
                let owned = match uploads.get(id)? {
                    Some(u) => {
                        let u: crate::tables::UploadRecord =
                            crate::tables::decode_versioned("uploads", u.value())?;
                        owns(&u.bucket, u.key.as_bytes())
                    }
                    None => own.is_none(),
                };
                upload_owned.insert(id.to_string(), owned);
                owned
            }
        };
        if owned {
            let p: crate::tables::PartRecord = crate::tables::decode_versioned("parts", v.value())?;
            add(p.sha1, p.magic.get());
        }
    }
    let outbox = txn.open_table(crate::outbox::OUTBOX)?;
    for row in outbox.iter()? {
        let (k, v) = row?;
        let (bucket, key, ref_id) = k.value();
        if !owns(bucket, key) {
            continue;
        }
        let (sha1, magic) = crate::outbox::decode_value(&v.value())?;
        let sha1 = Sha1(sha1);
        if !released.contains(&(sha1, ref_id)) {
            add(sha1, magic.get());
            out.in_flight += 1;
        }
    }
    let held = txn.open_table(crate::outbox::HELD)?;
    for p in pending.iter().filter(|p| owns(&p.bucket, p.key.as_bytes())) {
        let at = (p.bucket.as_str(), p.key.as_bytes(), p.ref_id);
        if held.get(at)?.is_none() && outbox.get(at)?.is_none() {
            add(p.sha1, p.magic);
            out.in_flight += 1;
        }
    }
    out.named = named;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::PairId;

    fn record(refs: u32, magic: u32, flags: u32) -> FileRecord {
        FileRecord {
            refs,
            magic,
            flags,
            pair: PairId(1),
        }
    }

    fn tally(count: u32, magic: u32) -> Tally {
        Tally { count, magic }
    }

    #[test]
    fn each_kind_of_difference_is_found_and_marked_contents_are_passed_over() {
        let s = |b: u8| Sha1([b; 20]);
        let mut filedb = FileDbRefs::default();
        // 1: exact (an entry and a native reference); 2: a leak; 3: danger; 4: magic;
        // 5: no record; 8: marked.
        filedb.files.insert(s(1), record(2, 10 + 20, 0));
        filedb.natives.insert(s(1), tally(1, 20));
        filedb.files.insert(s(2), record(2, 7, 0));
        filedb.files.insert(s(3), record(1, 5, 0));
        filedb.files.insert(s(4), record(1, 99, 0));
        filedb
            .files
            .insert(s(8), record(0, 3, crate::tables::FLAG_DO_NOT_DELETE));
        let mut index = IndexRefs::default();
        index.named.insert(s(1), tally(1, 10));
        index.named.insert(s(2), tally(1, 3));
        index.named.insert(s(4), tally(1, 98));
        index.named.insert(s(5), tally(1, 1));
        index.named.insert(s(8), tally(1, 3));
        let mut other = IndexRefs::default();
        other.named.insert(s(3), tally(2, 5));
        other.in_flight = 2;
        let got = compare(&filedb, &[index, other]);
        let kinds: Vec<(u8, Kind)> = got.findings.iter().map(|f| (f.sha1.0[0], f.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                (2, Kind::Leak),
                (3, Kind::Danger),
                (4, Kind::Magic),
                (5, Kind::NoRecord)
            ]
        );
        assert_eq!((got.contents, got.references), (4, 2 + 1 + 2 + 1));
        assert_eq!((got.in_flight, got.do_not_delete), (2, 1));
        assert_eq!(got.findings[0].delta(), (1, 4));
        assert_eq!(got.findings[1].delta(), (-1, 0));
        assert_eq!(got.findings[3].delta(), (-1, u32::MAX));
    }

    #[test]
    fn slices_cover_the_sha1_space_once_in_order() {
        for n in [0, 1, 2, 3, 7, 256, 1000] {
            let all = slices(n);
            assert_eq!(all.len(), n.max(1) as usize);
            assert_eq!(all[0].0, [0u8; 20]);
            assert_eq!(all.last().unwrap().1, None);
            for w in all.windows(2) {
                assert_eq!(w[0].1, Some(w[1].0));
                assert!(w[0].0 < w[1].0);
            }
            for b in [0u8, 1, 0x7f, 0x80, 0xfe, 0xff] {
                let sha1 = Sha1([b; 20]);
                assert_eq!(all.iter().filter(|sl| in_slice(sl, &sha1)).count(), 1);
            }
        }
    }

    #[test]
    fn a_finding_round_trips_through_its_encodings() {
        let f = Finding {
            sha1: Sha1([9; 20]),
            kind: Kind::Danger,
            refs: Some(u32::MAX),
            magic: None,
            named: tally(3, u32::MAX),
        };
        let bytes = postcard::to_stdvec(&f).unwrap();
        assert_eq!(postcard::from_bytes::<Finding>(&bytes).unwrap(), f);
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Finding>(&json).unwrap(), f);
    }
}
