//! A split's copy through `MetaStore::execute` on two real stores: G (a group of
//! everything, as root is before any split) hands the sha1s from 0x80 up to a new group H.
//! Every row of the interval arrives in H as it was in G, in pages that may be copied
//! again; G refuses writes of the interval from the hand-off and reads from its end, and
//! drops the rows in bounded batches afterwards.

use placement::{Magic, PairId, Sha1};

use crate::groups::{GroupId, ROOT, ShardMap, SplitAt};
use crate::handoff::{FileRow, HandOff, ROWS_MAX, RowTable};
use crate::ref_log::{RefDec, RefState};
use crate::tables::DeletingRecord;
use crate::{Command, DecOutcome, FileRecord, MetaError, MetaStore, Response};

const NOW: u64 = 1_800_000_000_000;
const CUT: [u8; 20] = [0x80; 20];
const UPPER: ([u8; 20], Option<[u8; 20]>) = (CUT, None);

fn sha(n: u8) -> Sha1 {
    Sha1([n; 20])
}

fn magic(n: u32) -> Magic {
    Magic::new(n).unwrap()
}

fn planned() -> (ShardMap, GroupId) {
    ShardMap::single(vec![1])
        .unwrap()
        .split(ROOT, SplitAt::Sha1(CUT), vec![1])
        .unwrap()
}

fn insert(store: &MetaStore, content: u8) {
    store
        .execute(&Command::InsertOrInc {
            sha1: sha(content),
            magic: magic(3),
            pair: PairId(0),
        })
        .unwrap();
}

/// G with rows of every kind on both sides of the cut: records (one with native
/// references), `deleting` entries, and pending and released `ref_log` rows.
fn filled(dir: &std::path::Path) -> MetaStore {
    let g = MetaStore::open(&dir.join("g.redb")).unwrap();
    for c in [0x10, 0x20, 0x90, 0xa0, 0xb0, 0xc0] {
        insert(&g, c);
    }
    for c in [0x20, 0xb0] {
        let r = g.execute(&Command::Dec {
            sha1: sha(c),
            magic: magic(3),
            now_secs: 7,
        });
        assert_eq!(r, Ok(Response::Dec(DecOutcome::Deleting)));
    }
    g.execute(&Command::Inc {
        sha1: sha(0x90),
        magic: magic(4),
    })
    .unwrap();
    for (content, ref_id) in [(0x10, 1), (0xa0, 2), (0xa0, 3), (0xc0, 4)] {
        g.execute(&Command::RefInc {
            sha1: sha(content),
            magic: magic(5),
            ref_id,
            pair: None,
            bucket: "b".into(),
            key: format!("k{ref_id}"),
            deadline_ms: NOW + ref_id,
            now_ms: NOW,
        })
        .unwrap();
    }
    g.execute(&Command::DecBatch {
        decs: vec![RefDec {
            sha1: [0xa0; 20],
            ref_id: 3,
            magic: magic(5),
        }],
        now_ms: NOW,
    })
    .unwrap();
    g
}

/// Every row of `store` in `interval`, table by table, in pages of `page`.
fn all_rows(store: &MetaStore, interval: ([u8; 20], Option<[u8; 20]>), page: u32) -> Vec<FileRow> {
    let mut out = Vec::new();
    for table in RowTable::ALL {
        let mut after = None;
        loop {
            let rows = store.file_rows(table, interval, after, page).unwrap();
            assert!(rows.len() <= page as usize);
            let Some(last) = rows.last() else { break };
            after = Some(last.cursor());
            out.extend(rows);
        }
    }
    out
}

/// Copies G's rows of the interval to H in pages of `page`, as the split's driver does.
fn copy(g: &MetaStore, h: &MetaStore, h_id: GroupId, page: u32) -> usize {
    let rows = all_rows(g, UPPER, page);
    for chunk in rows.chunks(page as usize) {
        let r = h.execute(&Command::Ingest {
            group: h_id,
            rows: chunk.to_vec(),
        });
        assert_eq!(r, Ok(Response::Ingested(chunk.len() as u32)));
    }
    rows.len()
}

#[test]
fn a_split_copies_every_row_and_hands_the_interval_over() {
    let dir = tempfile::tempdir().unwrap();
    let g = filled(dir.path());
    let h = MetaStore::open(&dir.path().join("h.redb")).unwrap();
    let (map, h_id) = planned();
    let before = all_rows(&g, UPPER, ROWS_MAX);
    let kinds = |rows: &[FileRow]| {
        let mut k = [0; 4];
        for r in rows {
            k[match r {
                FileRow::File { .. } => 0,
                FileRow::Deleting { .. } => 1,
                FileRow::NativeRefs { .. } => 2,
                FileRow::Ref { .. } => 3,
            }] += 1;
        }
        k
    };
    // 0x90, 0xa0, 0xc0 live and natively referenced (inserted through the native
    // API's command); 0xb0 deleting; three refs.
    assert_eq!(kinds(&before), [3, 1, 3, 3]);
    let below = all_rows(&g, ([0; 20], Some(CUT)), ROWS_MAX);
    assert_eq!(kinds(&below), [1, 1, 1, 1]);

    // H receives nothing before it owns the interval, and nothing outside it.
    let early = h.execute(&Command::Ingest {
        group: h_id,
        rows: before[..1].to_vec(),
    });
    assert!(
        matches!(early, Err(MetaError::InvalidCommand(_))),
        "{early:?}"
    );
    let own = Command::SetOwnership {
        group: h_id,
        map: map.clone(),
    };
    assert_eq!(h.execute(&own), Ok(Response::MapVersion(map.version)));
    let outside = h.execute(&Command::Ingest {
        group: h_id,
        rows: below[..1].to_vec(),
    });
    assert_eq!(
        outside,
        Err(MetaError::Moved {
            map_version: map.version
        })
    );

    // The hand-off: writes of the interval are refused, reads still answered; the rest
    // of G goes on as before.
    let hand_off = Command::HandOff {
        group: ROOT,
        map: map.clone(),
    };
    assert_eq!(g.execute(&hand_off), Ok(Response::MapVersion(map.version)));
    assert_eq!(g.execute(&hand_off), Ok(Response::MapVersion(map.version)));
    assert_eq!(
        g.handoff().unwrap(),
        Some(HandOff {
            map_version: map.version,
            sha1: vec![UPPER],
            readable: true,
            keys: Vec::new(),
            uploads_dropped_to: None,
        })
    );
    let inc = |c: u8| Command::Inc {
        sha1: sha(c),
        magic: magic(9),
    };
    assert_eq!(
        g.execute(&inc(0x90)),
        Err(MetaError::Moved {
            map_version: map.version
        })
    );
    g.execute(&inc(0x10)).unwrap();
    assert_eq!(g.file_if_owned(&sha(0x90)).unwrap().unwrap().refs, 2);
    let later = map
        .split(ROOT, SplitAt::Sha1([0x40; 20]), vec![1])
        .unwrap()
        .0;
    let again = g.execute(&Command::HandOff {
        group: ROOT,
        map: later,
    });
    assert!(
        matches!(again, Err(MetaError::InvalidCommand(_))),
        "{again:?}"
    );
    let dropping = g.execute(&Command::DropHandedOff {
        group: ROOT,
        map_version: map.version,
        limit: 10,
    });
    assert!(
        matches!(dropping, Err(MetaError::InvalidCommand(_))),
        "{dropping:?}"
    );

    // The copy, in pages of two, run twice: H holds exactly G's rows of the interval.
    assert_eq!(copy(&g, &h, h_id, 2), before.len());
    let once = h.digest().unwrap();
    assert_eq!(copy(&g, &h, h_id, 3), before.len());
    assert_eq!(h.digest().unwrap().tables, once.tables);
    assert_eq!(all_rows(&h, UPPER, 2), before);
    assert!(all_rows(&h, ([0; 20], Some(CUT)), ROWS_MAX).is_empty());
    // The reference indexes came along: the pending rows by deadline, in order.
    let pending: Vec<u64> = h
        .pending_refs(NOW + 100, 10)
        .unwrap()
        .into_iter()
        .map(|p| p.ref_id)
        .collect();
    assert_eq!(pending, [2, 4]);
    assert!(
        h.expiry_due(NOW + crate::ref_log::RELEASED_KEEP_MS + 1)
            .unwrap()
            .0
    );
    // The copy sealed; H serves the interval as G did, and a page of a driver that lost
    // root's leadership mid-copy (the record as G had it) writes nothing over it.
    let seal = Command::Seal {
        group: h_id,
        map_version: map.version,
    };
    assert_eq!(h.execute(&seal), Ok(Response::MapVersion(map.version)));
    assert_eq!(h.execute(&seal), Ok(Response::MapVersion(map.version)));
    let r = h.execute(&inc(0x90));
    assert!(
        matches!(r, Ok(Response::File(FileRecord { refs: 3, .. }))),
        "{r:?}"
    );
    let stale = Command::Ingest {
        group: h_id,
        rows: before.clone(),
    };
    assert_eq!(h.execute(&stale), Ok(Response::Sealed));
    assert_eq!(h.file_if_owned(&sha(0x90)).unwrap().unwrap().refs, 3);

    // The end of the hand-off: reads are Moved too; then the drop, in batches of two.
    let end = Command::EndHandOff {
        group: ROOT,
        map_version: map.version,
    };
    assert_eq!(g.execute(&end), Ok(Response::MapVersion(map.version)));
    assert_eq!(
        g.file_if_owned(&sha(0x90)),
        Err(MetaError::Moved {
            map_version: map.version
        })
    );
    let mut batches = 0;
    let mut removed = 0;
    loop {
        batches += 1;
        assert!(batches < 20);
        match g.execute(&Command::DropHandedOff {
            group: ROOT,
            map_version: map.version,
            limit: 2,
        }) {
            Ok(Response::Dropped { removed: n, done }) => {
                assert!(n <= 2);
                removed += n;
                if done {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(removed as usize, before.len());
    assert_eq!(batches, before.len().div_ceil(2) + 1);
    assert!(all_rows(&g, UPPER, ROWS_MAX).is_empty());
    assert_eq!(g.handoff().unwrap(), None);
    assert!(
        g.pending_refs(u64::MAX, 10)
            .unwrap()
            .iter()
            .all(|p| p.sha1 < CUT)
    );
    // What G kept is what it had below the cut (0x10 inc'd once more since).
    assert_eq!(
        all_rows(&g, ([0; 20], Some(CUT)), ROWS_MAX).len(),
        below.len()
    );
    // Resent steps change nothing.
    assert_eq!(g.execute(&end), Ok(Response::MapVersion(map.version)));
    assert_eq!(
        g.execute(&Command::DropHandedOff {
            group: ROOT,
            map_version: map.version,
            limit: 2,
        }),
        Ok(Response::Dropped {
            removed: 0,
            done: true
        })
    );
    assert_eq!(g.execute(&hand_off), Ok(Response::MapVersion(map.version)));
    // The map following into the ownership row later changes nothing either.
    assert_eq!(
        g.execute(&Command::SetOwnership {
            group: ROOT,
            map: map.clone()
        }),
        Ok(Response::MapVersion(map.version))
    );
    // Another group's commands are refused.
    let wrong = h.execute(&Command::EndHandOff {
        group: ROOT,
        map_version: map.version,
    });
    assert!(
        matches!(wrong, Err(MetaError::InvalidCommand(_))),
        "{wrong:?}"
    );
}

/// What a group gives away is its old intervals less its new ones, whatever their shape.
#[test]
fn what_a_group_gives_away_is_what_it_no_longer_keeps() {
    use crate::handoff::given_away;
    let s = |n: u8| [n; 20];
    assert_eq!(
        given_away(&[(s(0), None)], &[(s(0), Some(s(0x80)))]),
        vec![(s(0x80), None)]
    );
    assert_eq!(
        given_away(&[(s(0), None)], &[(s(0x80), None)]),
        vec![(s(0), Some(s(0x80)))]
    );
    assert_eq!(
        given_away(
            &[(s(0x10), Some(s(0x40))), (s(0x60), None)],
            &[(s(0x10), Some(s(0x20))), (s(0x60), Some(s(0x70)))]
        ),
        vec![(s(0x20), Some(s(0x40))), (s(0x70), None)]
    );
    assert_eq!(given_away(&[(s(0), None)], &[(s(0), None)]), vec![]);
    assert_eq!(given_away(&[(s(0), None)], &[]), vec![(s(0), None)]);
    // Key intervals alike: root keeps b's keys below k30 and gives the rest away.
    let k = |b: &str, key: &str| crate::groups::IndexStart::new(b, key);
    assert_eq!(
        given_away(&[(k("", ""), None)], &[(k("", ""), Some(k("b", "k30")))]),
        vec![(k("b", "k30"), None)]
    );
    // Against a sampled membership check.
    let have = vec![(s(0x10), Some(s(0x50))), (s(0x90), None)];
    let keep = vec![(s(0x20), Some(s(0x30))), (s(0x40), Some(s(0xa0)))];
    let given = given_away(&have, &keep);
    for b in 0..=255u8 {
        let x = [b; 20];
        let expect = crate::handoff::within(&have, &x) && !crate::handoff::within(&keep, &x);
        assert_eq!(crate::handoff::within(&given, &x), expect, "{b:#x}");
    }
}

/// The split's commands, rows and record round-trip through their own types, and the
/// hand-off row travels in a snapshot.
#[test]
fn the_split_commands_and_rows_round_trip_and_travel_in_snapshots() {
    let (map, h_id) = planned();
    let rows = vec![
        FileRow::File {
            sha1: sha(0x90),
            record: FileRecord {
                refs: u32::MAX,
                magic: 7,
                flags: 1,
                pair: PairId(3),
            },
        },
        FileRow::Deleting {
            sha1: sha(0x91),
            record: DeletingRecord {
                pair: PairId(u32::MAX),
                since_secs: u64::MAX,
            },
        },
        FileRow::NativeRefs {
            sha1: sha(0x92),
            count: 2,
            magic: u32::MAX,
        },
        FileRow::Ref {
            sha1: sha(0x93),
            ref_id: u64::MAX >> 1,
            state: RefState::Pending {
                magic: 5,
                bucket: "b".into(),
                key: "k".into(),
                deadline_ms: 9,
            },
        },
        FileRow::Ref {
            sha1: sha(0x94),
            ref_id: 0,
            state: RefState::Released {
                magic: 6,
                released_ms: 10,
            },
        },
    ];
    for cmd in [
        Command::HandOff {
            group: ROOT,
            map: map.clone(),
        },
        Command::EndHandOff {
            group: 2,
            map_version: u64::MAX,
        },
        Command::DropHandedOff {
            group: 3,
            map_version: 4,
            limit: u32::MAX,
        },
        Command::Ingest {
            group: h_id,
            rows: rows.clone(),
        },
        Command::Seal {
            group: h_id,
            map_version: 9,
        },
    ] {
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 7);
    }
    for resp in [
        Response::Dropped {
            removed: 3,
            done: false,
        },
        Response::Ingested(u32::MAX),
        Response::Sealed,
    ] {
        let bytes = postcard::to_stdvec(&resp).unwrap();
        assert_eq!(postcard::from_bytes::<Response>(&bytes).unwrap(), resp);
    }
    let record = HandOff {
        map_version: 5,
        sha1: vec![(CUT, Some([0xc0; 20])), ([0xd0; 20], None)],
        readable: false,
        keys: Vec::new(),
        uploads_dropped_to: None,
    };
    // A FileDB split's row keeps format 1, byte for byte what it was.
    let v1 = record.encode().unwrap();
    assert_eq!(v1[0], 1);
    assert_eq!(HandOff::decode(&v1).unwrap(), record);
    // An index split's row (format 2): key intervals and the drop's place among uploads.
    let keys = HandOff {
        map_version: 6,
        sha1: Vec::new(),
        readable: true,
        keys: vec![
            (
                crate::groups::IndexStart::new("b", "k30"),
                Some(crate::groups::IndexStart::new("c", "")),
            ),
            (crate::groups::IndexStart::new("d", "a/b"), None),
        ],
        uploads_dropped_to: Some("up-7".into()),
    };
    let v2 = keys.encode().unwrap();
    assert_eq!(v2[0], 2);
    assert_eq!(HandOff::decode(&v2).unwrap(), keys);
    assert!(HandOff::decode(&[9, 0]).is_err());

    // A hand-off under way, through a snapshot.
    let dir = tempfile::tempdir().unwrap();
    let g = filled(dir.path());
    g.execute(&Command::HandOff { group: ROOT, map }).unwrap();
    let loaded = g.through_snapshot(dir.path());
    assert_eq!(loaded.digest().unwrap().tables, g.digest().unwrap().tables);
    assert_eq!(loaded.handoff().unwrap(), g.handoff().unwrap());
    assert!(loaded.handoff().unwrap().is_some_and(|h| h.readable));
}
