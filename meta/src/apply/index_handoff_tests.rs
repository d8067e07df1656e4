//! An index split's copy through `MetaStore::execute` on two real stores: G (a group of
//! everything, as root is before any split) hands the keys of bucket `b` from `k05` on to
//! a new group H. Every row of the interval (objects, versions, the null version, an
//! upload and its parts, the part checksums' owners, the version counter) arrives in H as
//! it was in G, in small pages each copied twice; G refuses writes of the interval from
//! the hand-off, answers its reads until the hand-off ends, and drops the rows in bounded
//! batches afterwards; H refuses rows of keys it does not own, a part before its upload,
//! and anything after its seal.

use placement::{Magic, PairId, Sha1};

use crate::groups::{GroupId, IndexStart, ROOT, ShardMap, SplitAt};
use crate::index_handoff::{IndexCursor, IndexRow};
use crate::ownership::KeyInterval;
use crate::store::index::{IndexAnswer, IndexQuery};
use crate::tables::Versioning;
use crate::{
    Command, ContentSource, MetaError, MetaStore, NewObject, PartRecord, Response, UploadRecord,
};

fn cut() -> IndexStart {
    IndexStart::new("b", "k05")
}

/// What H receives: b's keys from the cut on, and every bucket after b.
fn moved() -> KeyInterval {
    (cut(), None)
}

fn planned() -> (ShardMap, GroupId) {
    ShardMap::single(vec![1])
        .unwrap()
        .split(ROOT, SplitAt::Key(cut()), vec![1])
        .unwrap()
}

fn put(bucket: &str, key: &str, n: u32) -> Command {
    Command::PutObject {
        bucket: bucket.into(),
        key: key.into(),
        object: NewObject::new(
            Sha1([n as u8; 20]),
            Magic::new(n).unwrap(),
            n as u64,
            0,
            [0; 16],
        ),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
        precondition: None,
    }
}

fn ok(store: &MetaStore, cmd: &Command) -> Response {
    store
        .execute(cmd)
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// G: buckets b (versioned, so some keys have several versions and a null one) and c,
/// keys on both sides of the cut, an upload with three parts on each side.
fn filled(dir: &std::path::Path) -> MetaStore {
    let g = MetaStore::open(&dir.join("g.redb")).unwrap();
    for bucket in ["b", "c"] {
        ok(
            &g,
            &Command::CreateBucket {
                bucket: bucket.into(),
                created_ms: 1,
            },
        );
    }
    for n in 0..10u32 {
        ok(&g, &put("b", &format!("k{n:02}"), n + 1));
    }
    ok(
        &g,
        &Command::SetBucketVersioning {
            bucket: "b".into(),
            state: Versioning::Enabled,
        },
    );
    for n in [2u32, 6, 7] {
        ok(&g, &put("b", &format!("k{n:02}"), 50 + n));
    }
    ok(&g, &put("c", "x", 90));
    for (key, id) in [("k01", "up-low"), ("k08", "up-high")] {
        ok(
            &g,
            &Command::CreateUpload {
                upload_id: id.into(),
                upload: UploadRecord {
                    bucket: "b".into(),
                    key: key.into(),
                    content_type: None,
                    user_meta: Vec::new(),
                    headers: Vec::new(),
                    created_ms: 1,
                },
            },
        );
        for part_number in 1..=3u32 {
            ok(
                &g,
                &Command::PutPart {
                    upload_id: id.into(),
                    part_number,
                    part: PartRecord {
                        sha1: Sha1([100 + part_number as u8; 20]),
                        magic: Magic::new(100 + part_number).unwrap(),
                        size_bytes: 5,
                        md5: [0; 16],
                        crc32: 0,
                        created_ms: 1,
                    },
                    source: ContentSource::Stored(PairId(0)),
                    now_secs: 1,
                },
            );
        }
    }
    g
}

/// Every row of `interval` in `store`, page by page of `limit`; the pages counted.
fn all_rows(store: &MetaStore, interval: &KeyInterval, limit: u32) -> (Vec<IndexRow>, usize) {
    let (mut rows, mut pages) = (Vec::new(), 0);
    let mut from: Option<IndexCursor> = None;
    loop {
        let page = store.index_rows(interval, from.as_ref(), limit).unwrap();
        assert!(page.rows.len() <= limit as usize, "a page over its limit");
        pages += 1;
        assert!(pages < 1_000, "the pages never end");
        rows.extend(page.rows);
        match page.next {
            Some(next) => from = Some(next),
            None => return (rows, pages),
        }
    }
}

fn object_read(store: &MetaStore, key: &str) -> Result<IndexAnswer, MetaError> {
    store.index_read(&IndexQuery::Object {
        bucket: "b".into(),
        key: key.into(),
    })
}

#[test]
fn an_index_interval_moves_row_for_row_and_is_dropped_in_bounded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let g = filled(dir.path());
    let h = MetaStore::open(&dir.path().join("h.redb")).unwrap();
    let (map, new) = planned();
    let (before, _) = all_rows(&g, &moved(), 1024);
    let kinds = |rows: &[IndexRow], f: fn(&IndexRow) -> bool| rows.iter().filter(|r| f(r)).count();
    // b's k05-k09 and c's x.
    assert_eq!(kinds(&before, |r| matches!(r, IndexRow::Object { .. })), 6);
    assert!(kinds(&before, |r| matches!(r, IndexRow::Version { .. })) >= 2);
    assert!(kinds(&before, |r| matches!(r, IndexRow::NullVersion { .. })) >= 2);
    assert_eq!(kinds(&before, |r| matches!(r, IndexRow::Upload { .. })), 1);
    assert_eq!(kinds(&before, |r| matches!(r, IndexRow::Part { .. })), 3);
    assert!(matches!(before.last(), Some(IndexRow::Seq { value }) if *value > 0));

    // H owns the interval first; rows of another key are refused.
    ok(
        &h,
        &Command::SetOwnership {
            group: new,
            map: map.clone(),
        },
    );
    let outside = Command::IngestIndex {
        group: new,
        rows: vec![IndexRow::NullVersion {
            bucket: "b".into(),
            key: b"k04".to_vec(),
            number: 1,
        }],
    };
    assert!(matches!(h.execute(&outside), Err(MetaError::Moved { .. })));
    let orphan = Command::IngestIndex {
        group: new,
        rows: vec![IndexRow::Part {
            id: "up-high".into(),
            part: 1,
            value: vec![1],
        }],
    };
    assert!(matches!(
        h.execute(&orphan),
        Err(MetaError::InvalidCommand(_))
    ));

    // G hands off: writes of the interval are refused, its reads still answered.
    let hand_off = Command::HandOff {
        group: ROOT,
        map: map.clone(),
    };
    assert_eq!(ok(&g, &hand_off), Response::MapVersion(map.version));
    assert!(matches!(
        g.execute(&put("b", "k06", 70)),
        Err(MetaError::Moved { .. })
    ));
    ok(&g, &put("b", "k04", 71));
    assert!(matches!(
        object_read(&g, "k06"),
        Ok(IndexAnswer::Object(Some(_)))
    ));

    // What G holds of the interval now (its version counter moved with the write of k04).
    let (before, _) = all_rows(&g, &moved(), 1024);

    // The copy in pages of 3 rows, each page sent twice.
    let mut from: Option<IndexCursor> = None;
    let mut pages = 0;
    loop {
        let page = g.index_rows(&moved(), from.as_ref(), 3).unwrap();
        pages += 1;
        if !page.rows.is_empty() {
            let cmd = Command::IngestIndex {
                group: new,
                rows: page.rows.clone(),
            };
            assert_eq!(ok(&h, &cmd), Response::Ingested(page.rows.len() as u32));
            assert_eq!(ok(&h, &cmd), Response::Ingested(page.rows.len() as u32));
        }
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    assert!(pages > 5, "{pages} pages");
    let (copied, _) = all_rows(&h, &moved(), 1024);
    assert_eq!(copied, before, "H holds the interval's rows as G did");
    ok(
        &h,
        &Command::Seal {
            group: new,
            map_version: map.version,
        },
    );
    assert_eq!(
        h.execute(&Command::IngestIndex {
            group: new,
            rows: before.clone()
        }),
        Ok(Response::Sealed)
    );
    // H answers the moved keys, and no other.
    assert!(matches!(
        object_read(&h, "k06"),
        Ok(IndexAnswer::Object(Some(_)))
    ));
    assert!(matches!(
        object_read(&h, "k04"),
        Err(MetaError::Moved { .. })
    ));

    // The audit's count: each entry once, by the group owning its key, though G still
    // holds the moved rows (a count of all G's rows would name them twice).
    let named = |store: &MetaStore| {
        let refs = store
            .index_refs(&([0; 20], None), &Default::default(), &[])
            .unwrap();
        refs.named.values().map(|t| t.count).sum::<u32>()
    };
    let entries = |rows: &[IndexRow]| {
        rows.iter()
            .filter(|r| match r {
                IndexRow::Object { .. } | IndexRow::Part { .. } => true,
                IndexRow::Version { value, .. } => matches!(
                    crate::versions::VersionRecord::decode(value),
                    Ok(crate::versions::VersionRecord::Object { .. })
                ),
                _ => false,
            })
            .count() as u32
    };
    let (kept_rows, _) = all_rows(&g, &(IndexStart::default(), Some(cut())), 1024);
    assert_eq!(named(&h), entries(&before));
    assert_eq!(named(&g), entries(&kept_rows));

    // The end of the hand-off: G's reads of the interval are Moved; the drop, 4 rows a
    // batch, leaves G without a row of it and keeps every other.
    ok(
        &g,
        &Command::EndHandOff {
            group: ROOT,
            map_version: map.version,
        },
    );
    assert!(matches!(
        object_read(&g, "k06"),
        Err(MetaError::Moved { .. })
    ));
    let (kept, _) = all_rows(&g, &(IndexStart::default(), Some(cut())), 1024);
    let mut batches = 0;
    loop {
        batches += 1;
        assert!(batches < 100, "the drop never ends");
        match ok(
            &g,
            &Command::DropHandedOff {
                group: ROOT,
                map_version: map.version,
                limit: 4,
            },
        ) {
            Response::Dropped { removed, done } => {
                assert!(removed <= 4);
                if done {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(batches >= 4, "{batches} batches");
    assert!(g.handoff().unwrap().is_none());
    let (left, _) = all_rows(&g, &moved(), 1024);
    assert!(
        left.iter().all(|r| matches!(r, IndexRow::Seq { .. })),
        "{left:?}"
    );
    assert_eq!(
        all_rows(&g, &(IndexStart::default(), Some(cut())), 1024).0,
        kept
    );
    assert_eq!(g.object("c", "x").unwrap(), None);
    assert_eq!(
        g.object("b", "k04").unwrap().map(|o| o.size_bytes),
        Some(71)
    );
    assert!(g.upload("up-low").unwrap().is_some());
    assert!(g.upload("up-high").unwrap().is_none());
    assert!(g.parts("up-high").unwrap().is_empty());
}

/// Every value an index split persists or sends round-trips through its own type.
#[test]
fn index_rows_cursors_and_the_command_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let g = filled(dir.path());
    let page = g.index_rows(&moved(), None, 4).unwrap();
    let bytes = postcard::to_stdvec(&page).unwrap();
    assert_eq!(
        postcard::from_bytes::<crate::index_handoff::IndexPage>(&bytes).unwrap(),
        page
    );
    let (rows, _) = all_rows(&g, &moved(), 1024);
    let cmd = Command::IngestIndex { group: 3, rows };
    let bytes = postcard::to_stdvec(&cmd).unwrap();
    assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    assert_eq!(cmd.format_version(), 10);
}

/// Pages of every size hold at most their limit and add up to the whole, in order.
#[test]
fn pages_of_every_size_hold_at_most_their_limit_and_add_up_to_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let g = filled(dir.path());
    for interval in [moved(), (IndexStart::default(), None)] {
        let (whole, _) = all_rows(&g, &interval, 1024);
        for limit in 2..=40 {
            let (rows, pages) = all_rows(&g, &interval, limit);
            assert_eq!(rows, whole, "pages of {limit}");
            assert!(pages >= whole.len() / limit as usize, "pages of {limit}");
        }
    }
}
