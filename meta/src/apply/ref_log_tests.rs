//! `RefInc`, `Settle`, `DecBatch` and `ExpireReleased` through `MetaStore::execute`: every
//! reference counted once whatever is resent, and a model check over random histories.

use placement::{Magic, PairId, Sha1};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::ref_log::{EXPIRE_MAX, RELEASED_KEEP_MS, RefDec, RefOutcome, RefState, Settle};
use crate::{Command, DecOutcome, MetaError, MetaStore, Response};

const SHA1: Sha1 = Sha1([0xab; 20]);
const NOW: u64 = 1_800_000_000_000;

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    (dir, store)
}

fn magic(n: u32) -> Magic {
    Magic::new(n).unwrap()
}

fn inc(ref_id: u64, m: u32, stored: bool, now_ms: u64) -> Command {
    Command::RefInc {
        sha1: SHA1,
        magic: magic(m),
        ref_id,
        pair: stored.then_some(PairId(3)),
        bucket: "mail".into(),
        key: format!("inbox/{ref_id}"),
        deadline_ms: NOW + 300_000,
        now_ms,
    }
}

fn refs(store: &MetaStore) -> Option<(u32, u32)> {
    store.file(&SHA1).unwrap().map(|r| (r.refs, r.magic))
}

fn row(store: &MetaStore, ref_id: u64) -> Option<RefState> {
    store.ref_state(&SHA1.0, ref_id).unwrap()
}

fn outcomes(r: Result<Response, MetaError>) -> Vec<RefOutcome> {
    match r.unwrap() {
        Response::RefOutcomes(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_inc_sent_twice_takes_one_reference_and_a_late_or_released_one_none() {
    let (_dir, store) = store();
    // Content that is not there, without a pair: NotFound, and no row.
    assert_eq!(
        store.execute(&inc(1, 5, false, NOW)),
        Err(MetaError::NotFound)
    );
    assert_eq!(row(&store, 1), None);
    for _ in 0..2 {
        let r = store.execute(&inc(1, 5, true, NOW)).unwrap();
        assert!(matches!(r, Response::RefTaken(rec) if rec.refs == 1 && rec.magic == 5));
    }
    assert_eq!(refs(&store), Some((1, 5)));
    assert!(matches!(
        row(&store, 1),
        Some(RefState::Pending { magic: 5, .. })
    ));
    // The same reference with another magic: a bug, refused.
    assert!(matches!(
        store.execute(&inc(1, 6, true, NOW)),
        Err(MetaError::InvalidCommand(_))
    ));
    // Past its deadline.
    assert_eq!(
        store.execute(&inc(2, 7, false, NOW + 300_001)),
        Err(MetaError::RefPastDeadline)
    );
    assert_eq!(refs(&store), Some((1, 5)));
    // A second reference, then its release by the reconciler; its inc resent after that
    // is refused, so its index entry is never written.
    store.execute(&inc(2, 7, false, NOW)).unwrap();
    let settled = store.execute(&Command::Settle {
        settles: vec![Settle {
            sha1: SHA1.0,
            ref_id: 2,
            release: true,
        }],
        now_ms: NOW + 400_000,
    });
    assert_eq!(
        outcomes(settled),
        vec![RefOutcome::Released(DecOutcome::Live { refs: 1 })]
    );
    assert_eq!(
        store.execute(&inc(2, 7, false, NOW)),
        Err(MetaError::RefReleased)
    );
    assert_eq!(refs(&store), Some((1, 5)));
}

#[test]
fn settles_and_decs_apply_once_and_a_wrong_magic_changes_nothing() {
    let (_dir, store) = store();
    store.execute(&inc(1, 5, true, NOW)).unwrap();
    store.execute(&inc(2, 9, false, NOW)).unwrap();
    // Confirmed: the row goes, the reference stays; a second settle finds nothing.
    let confirm = Command::Settle {
        settles: vec![Settle {
            sha1: SHA1.0,
            ref_id: 1,
            release: false,
        }],
        now_ms: NOW,
    };
    assert_eq!(
        outcomes(store.execute(&confirm)),
        vec![RefOutcome::Confirmed]
    );
    assert_eq!(
        outcomes(store.execute(&confirm)),
        vec![RefOutcome::Unchanged]
    );
    assert_eq!(row(&store, 1), None);
    assert_eq!(refs(&store), Some((2, 14)));
    // A dec with the wrong magic: nothing changes.
    let wrong = Command::DecBatch {
        decs: vec![RefDec {
            sha1: SHA1.0,
            ref_id: 2,
            magic: magic(8),
        }],
        now_ms: NOW,
    };
    assert_eq!(
        outcomes(store.execute(&wrong)),
        vec![RefOutcome::MagicMismatch { recorded: 9 }]
    );
    assert_eq!(refs(&store), Some((2, 14)));
    // The outbox's decs, each sent twice: the pending one is settled by its dec, the
    // confirmed one (no row) dec'd once; the content then deletable.
    let decs = Command::DecBatch {
        decs: vec![
            RefDec {
                sha1: SHA1.0,
                ref_id: 2,
                magic: magic(9),
            },
            RefDec {
                sha1: SHA1.0,
                ref_id: 1,
                magic: magic(5),
            },
        ],
        now_ms: NOW + 1,
    };
    assert_eq!(
        outcomes(store.execute(&decs)),
        vec![
            RefOutcome::Released(DecOutcome::Live { refs: 1 }),
            RefOutcome::Released(DecOutcome::Deleting)
        ]
    );
    assert_eq!(
        outcomes(store.execute(&decs)),
        vec![RefOutcome::Unchanged, RefOutcome::Unchanged]
    );
    assert_eq!(refs(&store), None);
    assert!(store.deleting(&SHA1).unwrap().is_some());
    // Bounded.
    let many = Command::DecBatch {
        decs: vec![
            RefDec {
                sha1: SHA1.0,
                ref_id: 3,
                magic: magic(1)
            };
            crate::ref_log::BATCH_MAX + 1
        ],
        now_ms: NOW,
    };
    assert!(matches!(
        store.execute(&many),
        Err(MetaError::InvalidCommand(_))
    ));
}

#[test]
fn released_rows_expire_after_a_day_oldest_first_in_bounded_batches() {
    let (_dir, store) = store();
    store.execute(&inc(1, 5, true, NOW)).unwrap();
    for id in 2..=6u64 {
        store.execute(&inc(id, 5, false, NOW)).unwrap();
    }
    // Released one by one, a minute apart.
    for id in 1..=5u64 {
        store
            .execute(&Command::DecBatch {
                decs: vec![RefDec {
                    sha1: SHA1.0,
                    ref_id: id,
                    magic: magic(5),
                }],
                now_ms: NOW + id * 60_000,
            })
            .unwrap();
    }
    let expire = |now_ms, limit| match store.execute(&Command::ExpireReleased { now_ms, limit }) {
        Ok(Response::RefsExpired(n)) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(expire(NOW + RELEASED_KEEP_MS, 100), 0, "none a day old yet");
    assert_eq!(expire(NOW + RELEASED_KEEP_MS + 3 * 60_000 + 1, 2), 2);
    assert_eq!(row(&store, 1), None);
    assert_eq!(row(&store, 2), None);
    assert!(matches!(row(&store, 3), Some(RefState::Released { .. })));
    assert_eq!(expire(NOW + 2 * RELEASED_KEEP_MS, EXPIRE_MAX + 1), 3);
    // The pending reference is no released row: it stays.
    assert!(matches!(row(&store, 6), Some(RefState::Pending { .. })));
    assert_eq!(refs(&store), Some((1, 5)));
}

/// Random histories over a few references: each is taken (its inc sent 1-3 times), then
/// confirmed or released by the reconciler or dec'd from an outbox, with settles and decs
/// resent and reordered. Whatever the order, the record holds exactly the references not
/// yet released, and the content is deletable exactly when none is left.
#[test]
fn random_histories_count_every_reference_once() {
    let mut rng = StdRng::seed_from_u64(27);
    for _history in 0..200 {
        let (_dir, store) = store();
        let count = rng.random_range(1..6u64);
        let magics: Vec<u32> = (0..count).map(|_| rng.random_range(1..u32::MAX)).collect();
        let mut messages: Vec<Command> = Vec::new();
        // The incs first (an inc always precedes its index entry, hence any dec of it).
        for id in 0..count {
            for _ in 0..rng.random_range(1..4) {
                let stored = id == 0 || rng.random_bool(0.5);
                let mut cmd = inc(id, magics[id as usize], stored, NOW);
                if let Command::RefInc { pair, .. } = &mut cmd {
                    // Content exists once the first inc (with a pair) is in.
                    *pair = stored.then_some(PairId(3));
                }
                store.execute(&cmd).unwrap();
            }
        }
        let mut live: Vec<bool> = vec![true; count as usize];
        for id in 0..count {
            let end = rng.random_range(0..4);
            let dec = Command::DecBatch {
                decs: vec![RefDec {
                    sha1: SHA1.0,
                    ref_id: id,
                    magic: magic(magics[id as usize]),
                }],
                now_ms: NOW + 10,
            };
            let settle = |release| Command::Settle {
                settles: vec![Settle {
                    sha1: SHA1.0,
                    ref_id: id,
                    release,
                }],
                now_ms: NOW + 10,
            };
            match end {
                // Kept: confirmed by the reconciler, maybe twice.
                0 => {
                    messages.push(settle(false));
                    messages.push(settle(false));
                }
                // An orphan released by the reconciler, the settle resent.
                1 => {
                    live[id as usize] = false;
                    messages.push(settle(true));
                    messages.push(settle(true));
                }
                // Confirmed, later deleted: its dec sent twice.
                2 => {
                    live[id as usize] = false;
                    messages.push(settle(false));
                    messages.push(dec.clone());
                    messages.push(dec);
                }
                // Deleted before the reconciler looked: the dec settles it.
                _ => {
                    live[id as usize] = false;
                    messages.push(dec.clone());
                    messages.push(dec);
                }
            }
        }
        // A confirm after the release of the same reference would be the reconciler
        // contradicting itself; every other order may happen, so interleave the
        // references' messages at random while keeping each reference's own order.
        let mut queues: Vec<Vec<Command>> = Vec::new();
        let mut i = 0;
        for id in 0..count {
            let n = messages[i..].iter().take_while(|c| ref_of(c) == id).count();
            queues.push(messages[i..i + n].to_vec());
            i += n;
        }
        while queues.iter().any(|q| !q.is_empty()) {
            let q = rng.random_range(0..queues.len());
            if !queues[q].is_empty() {
                let cmd = queues[q].remove(0);
                store.execute(&cmd).unwrap();
            }
        }
        let want_refs = live.iter().filter(|l| **l).count() as u32;
        let want_magic = (0..count as usize)
            .filter(|i| live[*i])
            .fold(0u32, |m, i| m.wrapping_add(magics[i]));
        if want_refs == 0 {
            assert_eq!(refs(&store), None, "every reference released");
            assert!(store.deleting(&SHA1).unwrap().is_some());
        } else {
            assert_eq!(refs(&store), Some((want_refs, want_magic)));
        }
    }
}

fn ref_of(cmd: &Command) -> u64 {
    match cmd {
        Command::Settle { settles, .. } => settles[0].ref_id,
        Command::DecBatch { decs, .. } => decs[0].ref_id,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_commands_round_trip_through_their_encoding() {
    for cmd in [
        inc(7, 3, true, NOW),
        Command::Settle {
            settles: vec![Settle {
                sha1: [1; 20],
                ref_id: u64::MAX,
                release: true,
            }],
            now_ms: 1,
        },
        Command::DecBatch {
            decs: vec![RefDec {
                sha1: [2; 20],
                ref_id: 0,
                magic: magic(u32::MAX),
            }],
            now_ms: 2,
        },
        Command::ExpireReleased {
            now_ms: 3,
            limit: 4,
        },
    ] {
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 5);
    }
    for resp in [
        Response::RefOutcomes(vec![
            RefOutcome::Released(DecOutcome::Deleting),
            RefOutcome::Confirmed,
            RefOutcome::Unchanged,
            RefOutcome::MagicMismatch { recorded: 4 },
        ]),
        Response::RefsExpired(9),
    ] {
        let bytes = postcard::to_stdvec(&resp).unwrap();
        assert_eq!(postcard::from_bytes::<Response>(&bytes).unwrap(), resp);
    }
}

#[test]
fn the_rows_travel_in_snapshots_and_join_the_digest_once_written() {
    let (dir, store) = store();
    let before = store.digest().unwrap();
    for table in ["ref_log", "ref_pending", "ref_released"] {
        assert!(!before.tables.contains_key(table), "{table}");
    }
    store.execute(&inc(1, 5, true, NOW)).unwrap();
    store.execute(&inc(2, 6, false, NOW)).unwrap();
    store
        .execute(&Command::DecBatch {
            decs: vec![RefDec {
                sha1: SHA1.0,
                ref_id: 2,
                magic: magic(6),
            }],
            now_ms: NOW,
        })
        .unwrap();
    let want = store.digest().unwrap();
    for table in ["ref_log", "ref_pending", "ref_released"] {
        assert!(want.tables.contains_key(table), "{table}");
    }
    let loaded = store.through_snapshot(dir.path());
    assert_eq!(loaded.digest().unwrap().tables, want.tables);
    assert!(matches!(
        loaded.ref_state(&SHA1.0, 1).unwrap(),
        Some(RefState::Pending { magic: 5, .. })
    ));
}
