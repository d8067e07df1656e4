//! Cross-group references through `MetaStore::execute` on two real stores: an index group
//! (root, which keeps the keys and half of the sha1s) and a FileDB group owning the other
//! half. Every reference counted once whatever crashes, resends and fences happen, and no
//! content freed while an entry names it.

use placement::{Magic, PairId, Sha1};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redb::{ReadableDatabase as _, ReadableTable as _};

use crate::groups::{GroupId, ROOT, ShardMap, SplitAt};
use crate::outbox::{self, FENCE_KEEP_MS, FenceOutcome, OutboxEntry, OutboxRow};
use crate::ownership::Ownership;
use crate::ref_log::{RefDec, RefOutcome, Settle};
use crate::tables::OBJECTS;
use crate::{
    Command, ContentSource, DecOutcome, MetaError, MetaStore, NewObject, PartRecord, Response,
    UploadRecord,
};

const NOW: u64 = 1_800_000_000_000;
const DEADLINE_MS: u64 = 300_000;
/// Root keeps the sha1s below this; the FileDB group owns the rest.
const CUT: [u8; 20] = [0x80; 20];

struct Groups {
    _dir: tempfile::TempDir,
    index: MetaStore,
    filedb: MetaStore,
    filedb_id: GroupId,
    map: ShardMap,
}

fn split_map() -> (ShardMap, GroupId) {
    ShardMap::single(vec![1])
        .unwrap()
        .split(ROOT, SplitAt::Sha1(CUT), vec![1])
        .unwrap()
}

fn groups() -> Groups {
    let dir = tempfile::tempdir().unwrap();
    let index = MetaStore::open(&dir.path().join("index.redb")).unwrap();
    let filedb = MetaStore::open(&dir.path().join("filedb.redb")).unwrap();
    let (map, filedb_id) = split_map();
    for (store, group) in [(&index, ROOT), (&filedb, filedb_id)] {
        let r = store.execute(&Command::SetOwnership {
            group,
            map: map.clone(),
        });
        assert_eq!(r, Ok(Response::MapVersion(map.version)));
    }
    index
        .execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
    Groups {
        _dir: dir,
        index,
        filedb,
        filedb_id,
        map,
    }
}

fn sha(n: u8) -> Sha1 {
    Sha1([n; 20])
}

fn magic(n: u32) -> Magic {
    Magic::new(n).unwrap()
}

fn obj(content: u8, m: u32) -> NewObject {
    NewObject::new(sha(content), magic(m), 1, 0, [content; 16])
}

fn put(key: &str, content: u8, m: u32) -> Command {
    Command::PutObject {
        bucket: "b".into(),
        key: key.into(),
        object: obj(content, m),
        source: ContentSource::Stored(PairId(0)),
        now_secs: NOW / 1000,
        precondition: None,
    }
}

fn ref_inc(content: u8, m: u32, ref_id: u64, key: &str, now_ms: u64) -> Command {
    Command::RefInc {
        sha1: sha(content),
        magic: magic(m),
        ref_id,
        pair: Some(PairId(0)),
        bucket: "b".into(),
        key: key.into(),
        deadline_ms: NOW + DEADLINE_MS,
        now_ms,
    }
}

fn foreign(key: &str, ref_id: u64, command: Command) -> Command {
    Command::ForeignRef {
        bucket: "b".into(),
        key: key.into(),
        ref_id,
        command: Box::new(command),
    }
}

fn delete(key: &str) -> Command {
    Command::DeleteObject {
        bucket: "b".into(),
        key: key.into(),
        now_secs: NOW / 1000,
    }
}

fn refs(store: &MetaStore, content: u8) -> Option<(u32, u32)> {
    store
        .file(&sha(content))
        .unwrap()
        .map(|r| (r.refs, r.magic))
}

/// The index leader's drain: every outbox row's dec in its FileDB group, then the rows
/// dropped. Answers what the decs did.
fn drain(g: &Groups) -> Vec<RefOutcome> {
    let (rows, outcomes) = send_decs(g, NOW);
    done(g, &rows);
    outcomes
}

/// The outbox's decs sent to the FileDB group (the rows left in place): the rows and
/// what their decs did.
fn send_decs(g: &Groups, now_ms: u64) -> (Vec<OutboxEntry>, Vec<RefOutcome>) {
    let rows = g.index.outbox(1000).unwrap();
    if rows.is_empty() {
        return (rows, Vec::new());
    }
    let decs = rows.iter().map(OutboxEntry::dec).collect();
    match g.filedb.execute(&Command::DecBatch { decs, now_ms }) {
        Ok(Response::RefOutcomes(o)) => (rows, o),
        other => panic!("{other:?}"),
    }
}

fn done(g: &Groups, rows: &[OutboxEntry]) {
    let rows = rows.iter().map(OutboxEntry::row).collect();
    g.index.execute(&Command::OutboxDone { rows }).unwrap();
}

#[test]
fn a_group_refuses_what_it_does_not_own_and_keeps_its_ownership_forward_only() {
    let g = groups();
    let moved = Err(MetaError::Moved {
        map_version: g.map.version,
    });
    // FileDB commands on the wrong side, each way.
    let inc_high = Command::InsertOrInc {
        sha1: sha(0x90),
        magic: magic(1),
        pair: PairId(0),
    };
    let inc_low = Command::InsertOrInc {
        sha1: sha(0x10),
        magic: magic(1),
        pair: PairId(0),
    };
    assert_eq!(g.index.execute(&inc_high), moved);
    assert_eq!(g.filedb.execute(&inc_low), moved);
    assert!(g.index.execute(&inc_low).is_ok());
    assert!(g.filedb.execute(&inc_high).is_ok());
    let dec_batch_high = Command::DecBatch {
        decs: vec![RefDec {
            sha1: [0x90; 20],
            ref_id: 1,
            magic: magic(1),
        }],
        now_ms: NOW,
    };
    assert_eq!(g.index.execute(&dec_batch_high), moved);
    // A plain write of foreign content (a gateway with a stale map), and a ForeignRef of
    // content this group owns: both Moved, nothing written.
    assert_eq!(g.index.execute(&put("k", 0x90, 5)), moved);
    assert_eq!(g.index.execute(&foreign("k", 9, put("k", 0x10, 5))), moved);
    assert_eq!(g.index.object("b", "k").unwrap(), None);
    assert_eq!(refs(&g.index, 0x10), Some((1, 1)));
    // Forward only: an older map changes nothing, another group's id is refused.
    let older = ShardMap::single(vec![1]).unwrap();
    assert_eq!(
        g.index.execute(&Command::SetOwnership {
            group: ROOT,
            map: older
        }),
        Ok(Response::MapVersion(g.map.version))
    );
    assert!(matches!(
        g.index.execute(&Command::SetOwnership {
            group: g.filedb_id,
            map: g.map.clone()
        }),
        Err(MetaError::InvalidCommand(_))
    ));
    assert!(matches!(
        g.index.execute(&Command::SetOwnership {
            group: 77,
            map: g.map.clone()
        }),
        Err(MetaError::InvalidCommand(_))
    ));
    let own = g.index.ownership().unwrap().unwrap();
    assert_eq!(own, Ownership::of(&g.map, ROOT).unwrap());
    assert!(own.owns_sha1(&[0x7f; 20]) && !own.owns_sha1(&CUT));
    assert_eq!(own.gaps(), vec![(CUT, None)]);
    let other = g.filedb.ownership().unwrap().unwrap();
    assert_eq!(other.gaps(), vec![([0; 20], Some(CUT))]);
    // A later map that leaves the group its interval (root's is split further): taken.
    let (back, _) = g
        .map
        .split(ROOT, SplitAt::Sha1([0x40; 20]), vec![1])
        .unwrap();
    assert!(
        g.filedb
            .execute(&Command::SetOwnership {
                group: g.filedb_id,
                map: back,
            })
            .is_ok(),
        "a map that leaves the group its interval"
    );
    assert_eq!(g.filedb.ownership().unwrap().unwrap().sha1, other.sha1);
    // The row round-trips, and damage is an error.
    let bytes = own.encode().unwrap();
    assert_eq!(Ownership::decode(&bytes).unwrap(), own);
    assert!(Ownership::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(Ownership::decode(&[]).is_err());
    assert!(Ownership::decode(&[9]).is_err());
}

#[test]
fn a_cross_group_put_is_released_through_the_outbox_once() {
    let g = groups();
    // The FileDB half first, then the entry.
    g.filedb.execute(&ref_inc(0x90, 5, 11, "k", NOW)).unwrap();
    let r = g
        .index
        .execute(&foreign("k", 11, put("k", 0x90, 5)))
        .unwrap();
    assert!(
        matches!(r, Response::ObjectPut { replaced: None, .. }),
        "{r:?}"
    );
    assert_eq!(refs(&g.filedb, 0x90), Some((1, 5)));
    assert_eq!(refs(&g.index, 0x90), None, "not referenced twice");
    // The same reference again (a resent write): refused, nothing changes.
    assert!(matches!(
        g.index.execute(&foreign("k", 11, put("k", 0x90, 5))),
        Err(MetaError::InvalidCommand(_))
    ));
    // The reconciler asks: present.
    let fence = Command::Fence {
        bucket: "b".into(),
        key: "k".into(),
        ref_id: 11,
        now_ms: NOW,
    };
    assert_eq!(
        g.index.execute(&fence),
        Ok(Response::Fence(FenceOutcome::Present))
    );
    // Overwritten by content root owns: the old reference goes to the outbox.
    let r = g.index.execute(&put("k", 0x10, 6)).unwrap();
    assert!(
        matches!(
            r,
            Response::ObjectPut {
                released: Some(DecOutcome::Outbox),
                ..
            }
        ),
        "{r:?}"
    );
    let rows = g.index.outbox(10).unwrap();
    assert_eq!(
        rows,
        vec![OutboxEntry {
            bucket: "b".into(),
            key: "k".into(),
            ref_id: 11,
            sha1: [0x90; 20],
            magic: magic(5),
        }]
    );
    // Still present while its dec is owed.
    assert_eq!(
        g.index.execute(&fence),
        Ok(Response::Fence(FenceOutcome::Present))
    );
    assert_eq!(refs(&g.filedb, 0x90), Some((1, 5)), "not before the drain");
    assert_eq!(drain(&g), vec![RefOutcome::Released(DecOutcome::Deleting)]);
    assert_eq!(refs(&g.filedb, 0x90), None);
    assert!(g.filedb.deleting(&sha(0x90)).unwrap().is_some());
    // A resent batch (the answer was lost before OutboxDone) changes nothing.
    let resent = Command::DecBatch {
        decs: vec![RefDec {
            sha1: [0x90; 20],
            ref_id: 11,
            magic: magic(5),
        }],
        now_ms: NOW,
    };
    assert_eq!(
        g.filedb.execute(&resent),
        Ok(Response::RefOutcomes(vec![RefOutcome::Unchanged]))
    );
    assert!(g.index.outbox(10).unwrap().is_empty());
    // OutboxDone of rows already gone drops nothing.
    done(&g, &rows);
    // The owned content went in place: one reference, dec'd in place on delete.
    assert_eq!(refs(&g.index, 0x10), Some((1, 6)));
    let r = g.index.execute(&delete("k")).unwrap();
    assert!(matches!(
        r,
        Response::ObjectDeleted {
            released: Some(DecOutcome::Deleting),
            ..
        }
    ));
    assert!(g.index.outbox(10).unwrap().is_empty());
}

#[test]
fn a_reference_whose_entry_never_came_is_fenced_and_released() {
    let g = groups();
    // A gateway died after the inc: the row is pending.
    g.filedb
        .execute(&ref_inc(0xa0, 7, 21, "lost", NOW))
        .unwrap();
    // Another entry holds the same content, so the release must leave it live.
    g.filedb
        .execute(&ref_inc(0xa0, 8, 22, "kept", NOW))
        .unwrap();
    g.index
        .execute(&foreign("kept", 22, put("kept", 0xa0, 8)))
        .unwrap();
    assert_eq!(refs(&g.filedb, 0xa0), Some((2, 15)));
    // The reconciler, past the deadline: both pending; one present, one fenced.
    let due = g.filedb.pending_refs(NOW + DEADLINE_MS + 1, 100).unwrap();
    assert_eq!(due.len(), 2);
    let mut settles = Vec::new();
    for p in &due {
        let crate::ref_log::RefState::Pending { bucket, key, .. } = &p.state else {
            panic!("{p:?}");
        };
        let answer = g
            .index
            .execute(&Command::Fence {
                bucket: bucket.clone(),
                key: key.clone(),
                ref_id: p.ref_id,
                now_ms: NOW + DEADLINE_MS + 1,
            })
            .unwrap();
        let release = answer == Response::Fence(FenceOutcome::Fenced);
        assert_eq!(release, p.ref_id == 21, "{p:?}");
        settles.push(Settle {
            sha1: p.sha1,
            ref_id: p.ref_id,
            release,
        });
    }
    // The late entry arrives after the fence: refused, nothing written.
    assert_eq!(
        g.index.execute(&foreign("lost", 21, put("lost", 0xa0, 7))),
        Err(MetaError::Fenced)
    );
    assert_eq!(g.index.object("b", "lost").unwrap(), None);
    let outcomes = g
        .filedb
        .execute(&Command::Settle {
            settles,
            now_ms: NOW + DEADLINE_MS + 1,
        })
        .unwrap();
    assert!(matches!(outcomes, Response::RefOutcomes(ref o) if o.len() == 2));
    assert_eq!(refs(&g.filedb, 0xa0), Some((1, 8)), "the kept one only");
    assert!(g.filedb.pending_refs(u64::MAX, 100).unwrap().is_empty());
    // Fences expire after a week, oldest first, in bounded batches.
    let expire = |now_ms| {
        g.index
            .execute(&Command::ExpireFences { now_ms, limit: 10 })
            .unwrap()
    };
    assert_eq!(expire(NOW + FENCE_KEEP_MS), Response::FencesExpired(0));
    assert_eq!(
        expire(NOW + DEADLINE_MS + 2 + FENCE_KEEP_MS),
        Response::FencesExpired(1)
    );
    assert_eq!(
        expire(NOW + DEADLINE_MS + 2 + FENCE_KEEP_MS),
        Response::FencesExpired(0)
    );
}

#[test]
fn parts_and_their_completion_keep_and_release_their_own_references() {
    let g = groups();
    g.index
        .execute(&Command::CreateUpload {
            upload_id: "u1".into(),
            upload: UploadRecord {
                bucket: "b".into(),
                key: "big".into(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        })
        .unwrap();
    let part = |content: u8, m: u32| PartRecord {
        sha1: sha(content),
        magic: magic(m),
        size_bytes: 5,
        md5: [content; 16],
        crc32: 0,
        created_ms: 2,
    };
    let put_part = |number: u32, content: u8, m: u32| Command::PutPart {
        upload_id: "u1".into(),
        part_number: number,
        part: part(content, m),
        source: ContentSource::Stored(PairId(0)),
        now_secs: NOW / 1000,
    };
    // Part 1 foreign, part 2 owned, part 1 put again with other foreign content.
    g.filedb.execute(&ref_inc(0x90, 3, 31, "big", NOW)).unwrap();
    g.index
        .execute(&foreign("big", 31, put_part(1, 0x90, 3)))
        .unwrap();
    g.index.execute(&put_part(2, 0x10, 4)).unwrap();
    g.filedb.execute(&ref_inc(0xa0, 5, 32, "big", NOW)).unwrap();
    g.index
        .execute(&foreign("big", 32, put_part(1, 0xa0, 5)))
        .unwrap();
    // The replaced part's reference is owed, under its own ref_id.
    let owed: Vec<u64> = g
        .index
        .outbox(10)
        .unwrap()
        .iter()
        .map(|e| e.ref_id)
        .collect();
    assert_eq!(owed, vec![31]);
    // Completion: the object's own content (foreign) under its own reference; both parts
    // released, the foreign one through the outbox, the owned one in place.
    g.filedb.execute(&ref_inc(0xb0, 9, 33, "big", NOW)).unwrap();
    let complete = Command::CompleteUpload {
        upload_id: "u1".into(),
        object: obj(0xb0, 9),
        parts: vec![(1, sha(0xa0)), (2, sha(0x10))],
        source: ContentSource::Stored(PairId(0)),
        now_secs: NOW / 1000,
    };
    g.index.execute(&foreign("big", 33, complete)).unwrap();
    let mut owed: Vec<u64> = g
        .index
        .outbox(10)
        .unwrap()
        .iter()
        .map(|e| e.ref_id)
        .collect();
    owed.sort();
    assert_eq!(owed, vec![31, 32]);
    assert_eq!(
        refs(&g.index, 0x10),
        None,
        "the owned part released in place"
    );
    drain(&g);
    assert_eq!(refs(&g.filedb, 0x90), None);
    assert_eq!(refs(&g.filedb, 0xa0), None);
    assert_eq!(refs(&g.filedb, 0xb0), Some((1, 9)));
    // Deleting the object owes its reference, 33.
    g.index.execute(&delete("big")).unwrap();
    let owed: Vec<u64> = g
        .index
        .outbox(10)
        .unwrap()
        .iter()
        .map(|e| e.ref_id)
        .collect();
    assert_eq!(owed, vec![33]);
    drain(&g);
    assert_eq!(refs(&g.filedb, 0xb0), None);
}

#[test]
fn an_entry_written_before_its_range_moved_is_released_under_a_derived_id() {
    let dir = tempfile::tempdir().unwrap();
    let index = MetaStore::open(&dir.path().join("index.redb")).unwrap();
    index
        .execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
    // One group of everything: the reference is taken in place, no ref_id.
    index.execute(&put("old", 0x90, 5)).unwrap();
    let seq = index.object("b", "old").unwrap().unwrap().seq;
    // The range cannot move away while its records are here.
    let (map, filedb_id) = split_map();
    let give_away = Command::SetOwnership {
        group: ROOT,
        map: map.clone(),
    };
    assert!(matches!(
        index.execute(&give_away),
        Err(MetaError::InvalidCommand(_))
    ));
    assert_eq!(index.ownership().unwrap(), None);
    // Moved with its records (a split's work, here by hand), then given away.
    {
        let db = index.db();
        let txn = db.begin_write().unwrap();
        txn.open_table(crate::tables::FILES)
            .unwrap()
            .remove([0x90; 20])
            .unwrap();
        txn.commit().unwrap();
    }
    index.execute(&give_away).unwrap();
    let filedb = MetaStore::open(&dir.path().join("filedb.redb")).unwrap();
    filedb
        .execute(&Command::SetOwnership {
            group: filedb_id,
            map,
        })
        .unwrap();
    filedb
        .execute(&Command::InsertOrInc {
            sha1: sha(0x90),
            magic: magic(5),
            pair: PairId(0),
        })
        .unwrap();
    index.execute(&delete("old")).unwrap();
    let rows = index.outbox(10).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].ref_id, outbox::derived_object_ref(seq));
    // Its dec is the first of that id: released.
    let dec = Command::DecBatch {
        decs: vec![RefDec {
            sha1: rows[0].sha1,
            ref_id: rows[0].ref_id,
            magic: rows[0].magic,
        }],
        now_ms: NOW,
    };
    assert_eq!(
        filedb.execute(&dec),
        Ok(Response::RefOutcomes(vec![RefOutcome::Released(
            DecOutcome::Deleting
        )]))
    );
    // A derived id is never one a ForeignRef may carry.
    assert!(matches!(
        index.execute(&foreign("x", outbox::DERIVED | 1, put("x", 0x90, 5))),
        Err(MetaError::InvalidCommand(_))
    ));
}

/// The live entries naming each content, from the index's `objects`.
fn entries_naming(index: &MetaStore) -> std::collections::BTreeMap<[u8; 20], u32> {
    let db = index.db();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(OBJECTS).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for row in table.iter().unwrap() {
        let (_, v) = row.unwrap();
        let record = crate::versions::decode_object(v.value()).unwrap();
        *out.entry(record.sha1.0).or_default() += 1;
    }
    out
}

/// The design's invariant: for every sha1, its group's refs are at least the entries
/// naming it, so no content is freed while an entry names it.
fn check_invariant(g: &Groups, contents: &[u8]) {
    let named = entries_naming(&g.index);
    for &c in contents {
        let owner = if [c; 20] < CUT { &g.index } else { &g.filedb };
        let have = refs(owner, c).map_or(0, |(r, _)| r);
        let want = named.get(&[c; 20]).copied().unwrap_or(0);
        assert!(have >= want, "content {c:#x}: refs {have} < entries {want}");
    }
}

/// Random histories of cross-group and in-place writes and deletes, with gateways stalling
/// between the inc and the entry (their entry arriving late, or never), resent entries,
/// drains that lose their answer, and the reconciler running at random: the invariant
/// holds after every step, and once every outbox is drained and every pending reference
/// settled, refs equal entries exactly and content no entry names is on its way to
/// deletion.
#[test]
fn random_histories_never_free_named_content_and_end_exact() {
    const CONTENTS: [u8; 4] = [0x10, 0x20, 0x90, 0xa0];
    // (late entries written, late entries fenced, never sent)
    let mut seen = (0, 0, 0);
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let g = groups();
        let mut next_ref = 1u64;
        let mut now = NOW;
        let mut late: Vec<Command> = Vec::new();
        for _ in 0..150 {
            now += rng.random_range(0..20_000);
            let key = format!("k{}", rng.random_range(0..6));
            let content = CONTENTS[rng.random_range(0..CONTENTS.len())];
            let m = rng.random_range(1..u32::MAX);
            match rng.random_range(0..10) {
                0..=4 if content < 0x80 => {
                    g.index.execute(&put(&key, content, m)).unwrap();
                }
                0..=4 => {
                    let ref_id = next_ref;
                    next_ref += 1;
                    let mut inc = ref_inc(content, m, ref_id, &key, now);
                    if let Command::RefInc { deadline_ms, .. } = &mut inc {
                        *deadline_ms = now + DEADLINE_MS;
                    }
                    // Sent once or twice (a lost answer).
                    for _ in 0..rng.random_range(1..3) {
                        g.filedb.execute(&inc).unwrap();
                    }
                    check_invariant(&g, &CONTENTS);
                    let write = foreign(&key, ref_id, put(&key, content, m));
                    if rng.random_ratio(1, 4) {
                        // The gateway stalls before the entry: sent late, or never.
                        late.push(write);
                        continue;
                    }
                    match g.index.execute(&write) {
                        Ok(_) => {}
                        // The reconciler got there first.
                        Err(MetaError::Fenced) => {}
                        Err(e) => panic!("{e}"),
                    }
                    // Resent: refused, changes nothing.
                    if rng.random_ratio(1, 4) {
                        assert!(g.index.execute(&write).is_err());
                    }
                }
                5 | 6 => {
                    g.index.execute(&delete(&key)).unwrap();
                }
                7 => {
                    // A drain whose OutboxDone is lost half the time: resent later.
                    let (rows, _) = send_decs(&g, now);
                    if rng.random_bool(0.5) {
                        done(&g, &rows);
                    }
                }
                8 if !late.is_empty() => {
                    let write = late.swap_remove(rng.random_range(0..late.len()));
                    match g.index.execute(&write) {
                        Ok(_) => seen.0 += 1,
                        Err(MetaError::Fenced) => seen.1 += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                _ => reconcile(&g, now),
            }
            check_invariant(&g, &CONTENTS);
        }
        seen.2 += late.len();
        // The end: everything drained and settled.
        drain(&g);
        reconcile(&g, now + DEADLINE_MS + 1);
        assert!(g.filedb.pending_refs(u64::MAX, 10).unwrap().is_empty());
        let named = entries_naming(&g.index);
        for c in CONTENTS {
            let owner = if c < 0x80 { &g.index } else { &g.filedb };
            let have = refs(owner, c).map_or(0, |(r, _)| r);
            let want = named.get(&[c; 20]).copied().unwrap_or(0);
            assert_eq!(have, want, "seed {seed}, content {c:#x}");
            if want == 0 {
                assert!(
                    owner.deleting(&sha(c)).unwrap().is_some() || refs(owner, c).is_none(),
                    "seed {seed}: {c:#x} unreferenced but kept"
                );
            }
        }
    }
    // Each kind of stall happened: (429, 35, 69) when written.
    assert!(seen.0 > 0 && seen.1 > 0 && seen.2 > 0, "{seen:?}");
}

/// The reconciler on the FileDB group: each reference pending past its deadline is fenced
/// in the index group (or found there), then settled.
fn reconcile(g: &Groups, now_ms: u64) {
    let due = g.filedb.pending_refs(now_ms, 100).unwrap();
    if due.is_empty() {
        return;
    }
    let mut settles = Vec::new();
    for p in due {
        let crate::ref_log::RefState::Pending { bucket, key, .. } = p.state else {
            panic!("{p:?}");
        };
        let answer = g
            .index
            .execute(&Command::Fence {
                bucket,
                key,
                ref_id: p.ref_id,
                now_ms,
            })
            .unwrap();
        settles.push(Settle {
            sha1: p.sha1,
            ref_id: p.ref_id,
            release: answer == Response::Fence(FenceOutcome::Fenced),
        });
    }
    g.filedb
        .execute(&Command::Settle { settles, now_ms })
        .unwrap();
}

#[test]
fn the_commands_and_rows_round_trip_and_travel_in_snapshots() {
    let g = groups();
    for cmd in [
        Command::SetOwnership {
            group: 3,
            map: g.map.clone(),
        },
        foreign("k", 5, put("k", 0x90, 1)),
        Command::OutboxDone {
            rows: vec![OutboxRow {
                bucket: "b".into(),
                key: "k".into(),
                ref_id: u64::MAX,
            }],
        },
        Command::Fence {
            bucket: "b".into(),
            key: "k".into(),
            ref_id: 1,
            now_ms: 2,
        },
        Command::ExpireFences {
            now_ms: 3,
            limit: 4,
        },
    ] {
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 6);
    }
    for resp in [
        Response::OutboxDone(3),
        Response::Fence(FenceOutcome::Present),
        Response::Fence(FenceOutcome::Fenced),
        Response::FencesExpired(2),
        Response::ObjectDeleted {
            removed: None,
            released: Some(DecOutcome::Outbox),
        },
    ] {
        let bytes = postcard::to_stdvec(&resp).unwrap();
        assert_eq!(postcard::from_bytes::<Response>(&bytes).unwrap(), resp);
    }
    for e in [MetaError::Moved { map_version: 9 }, MetaError::Fenced] {
        let bytes = postcard::to_stdvec(&e).unwrap();
        assert_eq!(postcard::from_bytes::<MetaError>(&bytes).unwrap(), e);
    }
    // Fill every new table of the index group, then through a snapshot.
    let fresh = tempfile::tempdir().unwrap();
    let single = MetaStore::open(&fresh.path().join("single.redb")).unwrap();
    let before = single.digest().unwrap();
    for table in [
        "ownership",
        "outbox",
        "held_refs",
        "object_ref_ids",
        "part_ref_ids",
        "fences",
        "fence_ages",
    ] {
        assert!(!before.tables.contains_key(table), "{table}");
    }
    g.filedb.execute(&ref_inc(0x90, 5, 1, "k", NOW)).unwrap();
    g.index
        .execute(&foreign("k", 1, put("k", 0x90, 5)))
        .unwrap();
    g.filedb.execute(&ref_inc(0xa0, 6, 2, "k", NOW)).unwrap();
    g.index
        .execute(&foreign("k", 2, put("k", 0xa0, 6)))
        .unwrap();
    g.index
        .execute(&Command::Fence {
            bucket: "b".into(),
            key: "gone".into(),
            ref_id: 3,
            now_ms: NOW,
        })
        .unwrap();
    g.index
        .execute(&Command::CreateUpload {
            upload_id: "u".into(),
            upload: UploadRecord {
                bucket: "b".into(),
                key: "p".into(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        })
        .unwrap();
    g.filedb.execute(&ref_inc(0xb0, 7, 4, "p", NOW)).unwrap();
    g.index
        .execute(&foreign(
            "p",
            4,
            Command::PutPart {
                upload_id: "u".into(),
                part_number: 1,
                part: PartRecord {
                    sha1: sha(0xb0),
                    magic: magic(7),
                    size_bytes: 1,
                    md5: [0; 16],
                    crc32: 0,
                    created_ms: 1,
                },
                source: ContentSource::Stored(PairId(0)),
                now_secs: 1,
            },
        ))
        .unwrap();
    let want = g.index.digest().unwrap();
    for table in [
        "ownership",
        "outbox",
        "held_refs",
        "object_ref_ids",
        "part_ref_ids",
        "fences",
        "fence_ages",
    ] {
        assert!(want.tables.contains_key(table), "{table}");
    }
    let loaded = g.index.through_snapshot(fresh.path());
    assert_eq!(loaded.digest().unwrap().tables, want.tables);
    assert_eq!(loaded.ownership().unwrap(), g.index.ownership().unwrap());
    assert_eq!(loaded.outbox(10).unwrap(), g.index.outbox(10).unwrap());
}

/// The reconciler proposes an expiry only when the front of an age index is past its
/// keep: exactly at the keep it is not, one millisecond later it is, for released rows
/// and fences alike, and the expiry then removes what the look said was due.
#[test]
fn expiry_is_due_exactly_past_the_keep() {
    use crate::ref_log::RELEASED_KEEP_MS;
    let g = groups();
    assert_eq!(g.filedb.expiry_due(u64::MAX).unwrap(), (false, false));
    g.filedb.execute(&ref_inc(0x90, 5, 1, "k", NOW)).unwrap();
    g.filedb
        .execute(&Command::Settle {
            settles: vec![Settle {
                sha1: [0x90; 20],
                ref_id: 1,
                release: true,
            }],
            now_ms: NOW,
        })
        .unwrap();
    g.index
        .execute(&Command::Fence {
            bucket: "b".into(),
            key: "k".into(),
            ref_id: 2,
            now_ms: NOW,
        })
        .unwrap();
    assert_eq!(
        g.filedb.expiry_due(NOW + RELEASED_KEEP_MS).unwrap(),
        (false, false)
    );
    assert_eq!(
        g.filedb.expiry_due(NOW + RELEASED_KEEP_MS + 1).unwrap(),
        (true, false)
    );
    assert_eq!(
        g.index.expiry_due(NOW + FENCE_KEEP_MS).unwrap(),
        (false, false)
    );
    assert_eq!(
        g.index.expiry_due(NOW + FENCE_KEEP_MS + 1).unwrap(),
        (false, true)
    );
    let expire = Command::ExpireReleased {
        now_ms: NOW + RELEASED_KEEP_MS + 1,
        limit: 10,
    };
    assert_eq!(g.filedb.execute(&expire), Ok(Response::RefsExpired(1)));
    let expire = Command::ExpireFences {
        now_ms: NOW + FENCE_KEEP_MS + 1,
        limit: 10,
    };
    assert_eq!(g.index.execute(&expire), Ok(Response::FencesExpired(1)));
    assert_eq!(g.filedb.expiry_due(u64::MAX).unwrap(), (false, false));
    assert_eq!(g.index.expiry_due(u64::MAX).unwrap(), (false, false));
}

/// The gaps of an ownership are the complement of its intervals, whatever their number
/// and wherever they sit.
#[test]
fn the_gaps_of_an_ownership_are_what_it_does_not_own() {
    let own = |sha1: Vec<([u8; 20], Option<[u8; 20]>)>| Ownership {
        group: 1,
        map_version: 2,
        sha1,
        keys: Vec::new(),
    };
    let (a, b, c) = ([0x20; 20], [0x40; 20], [0x80; 20]);
    assert_eq!(own(vec![]).gaps(), vec![([0; 20], None)]);
    assert_eq!(own(vec![([0; 20], None)]).gaps(), vec![]);
    assert_eq!(
        own(vec![(a, Some(b)), (c, None)]).gaps(),
        vec![([0; 20], Some(a)), (b, Some(c))]
    );
    assert_eq!(
        own(vec![([0; 20], Some(a)), (b, Some(c))]).gaps(),
        vec![(a, Some(b)), (c, None)]
    );
    // Every sha1 is owned or in exactly one gap.
    let o = own(vec![(a, Some(b)), (c, None)]);
    for n in 0..=255u8 {
        let sha1 = [n; 20];
        let in_gaps = o
            .gaps()
            .iter()
            .filter(|(s, e)| s <= &sha1 && e.is_none_or(|e| sha1 < e))
            .count();
        assert_eq!(usize::from(!o.owns_sha1(&sha1)), in_gaps, "{n:#x}");
    }
}
