//! ListObjectVersions over `objects` (current versions) and `versions` (noncurrent ones and
//! delete markers), merged in (key ascending, version newest first) order, with prefix,
//! delimiter roll-up and the key and version-id markers (see `docs/versions.md`).
//!
//! A page is one read transaction. Across pages the markers are positions: a version
//! written after a page is newer than every version of its key, so it sorts before the
//! marker and is not listed later, while no version that existed throughout is skipped or
//! listed twice.

use std::ops::Bound;

use redb::ReadableTable;

use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::list::{self, MAX_KEYS_LIMIT, Span, prefix_end, roll_up, utf8};
use crate::versions::{
    VersionId, VersionRecord, VersionView, decode_current, null_number, order_of,
};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionsQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (`key-marker`), or inside it with `version_marker`.
    pub key_marker: Option<String>,
    /// Start after this version of `key_marker` (`version-id-marker`).
    pub version_marker: Option<VersionId>,
    pub max_keys: usize,
}

impl VersionsQuery {
    /// Where the listing starts: the key its first group is found by. With a version
    /// marker the first group's read starts inside `key_marker` (see [`list_versions_span`]).
    pub fn start(&self) -> list::Cursor {
        match (&self.key_marker, self.version_marker) {
            (Some(k), Some(_)) => list::Cursor::At(k.as_bytes().to_vec()),
            (Some(k), None) if k.as_bytes() >= self.prefix.as_bytes() => {
                list::Cursor::After(k.as_bytes().to_vec())
            }
            _ => list::Cursor::At(self.prefix.as_bytes().to_vec()),
        }
    }

    /// Entries a page holds at most.
    pub fn max(&self) -> usize {
        self.max_keys.min(MAX_KEYS_LIMIT)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionsPage {
    /// Each version with its key, in listing order.
    pub versions: Vec<(String, VersionView)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// Where the next page starts (`NextKeyMarker`, `NextVersionIdMarker`).
    pub next_key_marker: Option<String>,
    pub next_version_marker: Option<String>,
    /// Where the walk goes on in a later index group (see [`crate::list::ListPage`]).
    pub resume: Option<list::Cursor>,
}

impl VersionsPage {
    /// A whole page names no next markers unless it is truncated.
    pub fn finish(mut self) -> VersionsPage {
        if !self.truncated {
            self.next_key_marker = None;
            self.next_version_marker = None;
        }
        self.resume = None;
        self
    }
}

impl list::Walked for VersionsPage {
    fn entries(&self) -> usize {
        self.versions.len() + self.common_prefixes.len()
    }

    fn truncated(&self) -> bool {
        self.truncated
    }

    fn resume(&self) -> Option<&list::Cursor> {
        self.resume.as_ref()
    }

    fn append(&mut self, part: Self) {
        if part.entries() > 0 {
            self.next_key_marker = part.next_key_marker;
            self.next_version_marker = part.next_version_marker;
        }
        self.versions.extend(part.versions);
        self.common_prefixes.extend(part.common_prefixes);
        self.truncated = part.truncated;
    }
}

/// Where the walk stands: before a key, or inside one after some of its versions.
enum Cursor {
    /// Keys at or after this one (`true`: strictly after).
    Key(Vec<u8>, bool),
    /// This key's `versions` entries older than `number` (`None`: all of them; its
    /// current object has been listed).
    Inside(Vec<u8>, Option<u64>),
}

impl Cursor {
    fn of(at: &list::Cursor) -> Cursor {
        match at {
            list::Cursor::At(k) => Cursor::Key(k.clone(), false),
            list::Cursor::After(k) => Cursor::Key(k.clone(), true),
        }
    }
}

/// The tables a listing reads, from one read transaction.
pub struct Tables<O, V, N> {
    pub objects: O,
    pub versions: V,
    pub null_versions: N,
}

/// A page of `bucket` held in one group's tables whole.
pub fn list_versions(
    tables: &Tables<
        impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8], u64), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8]), u64>,
    >,
    bucket: &str,
    q: &VersionsQuery,
) -> Result<VersionsPage, MetaError> {
    if q.max() == 0 {
        return Ok(VersionsPage::default());
    }
    let span = Span {
        from: q.start(),
        until: None,
        room: q.max(),
    };
    Ok(list_versions_span(tables, bucket, q, &span)?.finish())
}

/// The part of a page of `bucket` that lies in `span`. The first span of a walk (the one
/// that starts at [`VersionsQuery::start`]) starts inside `key_marker` when a version
/// marker is given; every later one starts before a key.
pub fn list_versions_span(
    tables: &Tables<
        impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8], u64), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8]), u64>,
    >,
    bucket: &str,
    q: &VersionsQuery,
    span: &Span,
) -> Result<VersionsPage, MetaError> {
    let (objects, versions) = (&tables.objects, &tables.versions);
    let mut page = VersionsPage::default();
    let max_keys = span.room.min(MAX_KEYS_LIMIT);
    let prefix = q.prefix.as_bytes();
    let until = span.until.as_deref();
    let at_end = || list::Cursor::at_end(until, prefix);
    let mut cursor = match (&q.key_marker, q.version_marker) {
        (Some(k), Some(v)) if span.from == q.start() => inside_after(tables, bucket, k, v)?,
        _ => Cursor::of(&span.from),
    };
    let full = |page: &VersionsPage| page.versions.len() + page.common_prefixes.len() >= max_keys;
    // Every iteration lists one version, rolls up one prefix or skips a listed one, moves
    // to the next key, or stops: bounded by max_keys + 1 listings plus the keys they span.
    loop {
        let (key, after) = match cursor {
            Cursor::Inside(key, after) => {
                // The rest of this key's noncurrent versions, newest first.
                let start = match after {
                    Some(n) => Bound::Excluded((bucket, key.as_slice(), order_of(n))),
                    None => Bound::Included((bucket, key.as_slice(), 0)),
                };
                let end = Bound::Included((bucket, key.as_slice(), u64::MAX));
                let next = versions.range::<(&str, &[u8], u64)>((start, end))?.next();
                let Some(entry) = next else {
                    cursor = Cursor::Key(key, true);
                    continue;
                };
                if full(&page) {
                    page.truncated = true;
                    break;
                }
                let (k, v) = entry?;
                let number = u64::MAX - k.value().2;
                let record = VersionRecord::decode(v.value())?;
                // The newest entry is the current version only when there is no current
                // object (then it is a delete marker, by the design's invariant 2).
                let latest = after.is_none()
                    && objects.get((bucket, key.as_slice()))?.is_none()
                    && is_newest(versions, bucket, &key, number)?;
                push(&mut page, &key, VersionView::of(record, latest))?;
                cursor = Cursor::Inside(key, Some(number));
                continue;
            }
            Cursor::Key(key, after) => (key, after),
        };
        let at = if after {
            list::Cursor::After(key)
        } else {
            list::Cursor::At(key)
        };
        if at.past(prefix) {
            break;
        }
        if until.is_some_and(|u| at.key() >= u) {
            // A rolled-up prefix carried the cursor past this interval.
            page.resume = Some(at);
            break;
        }
        let (key, after) = match at {
            list::Cursor::At(key) => (key, false),
            list::Cursor::After(key) => (key, true),
        };
        let Some(next) = next_key(objects, versions, bucket, &key, after)? else {
            page.resume = at_end();
            break;
        };
        if until.is_some_and(|u| next.as_slice() >= u) {
            page.resume = at_end();
            break;
        }
        if !next.starts_with(prefix) {
            break;
        }
        if let Some(cp) = roll_up(&next, prefix, q.delimiter.as_deref()) {
            // Resumed from a page that ended on this prefix: listed already.
            let listed = q.version_marker.is_none()
                && q.key_marker.as_deref().map(str::as_bytes) == Some(cp.as_slice());
            if !listed {
                if full(&page) {
                    page.truncated = true;
                    break;
                }
                page.common_prefixes.push(utf8(&cp)?);
                page.next_key_marker = Some(utf8(&cp)?);
                page.next_version_marker = None;
            }
            match prefix_end(&cp) {
                Some(end) => cursor = Cursor::Key(end, false),
                None => break,
            }
            continue;
        }
        if let Some(v) = objects.get((bucket, next.as_slice()))? {
            if full(&page) {
                page.truncated = true;
                break;
            }
            let (record, stamp) = decode_current(v.value())?;
            push(&mut page, &next, VersionView::current(record, stamp))?;
        }
        cursor = Cursor::Inside(next, None);
    }
    Ok(page)
}

fn push(page: &mut VersionsPage, key: &[u8], view: VersionView) -> Result<(), MetaError> {
    let key = utf8(key)?;
    page.next_key_marker = Some(key.clone());
    page.next_version_marker = Some(view.id());
    page.versions.push((key, view));
    Ok(())
}

/// The cursor just after version `marker` of `key`: after its current object if the
/// marker names it, else after the `versions` entry with the marker's number (null: the
/// number the null index gives). A marker that names no version resumes where that
/// number would sort, as S3 resumes from a position, not an existing version.
fn inside_after(
    tables: &Tables<
        impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8], u64), &'static [u8]>,
        impl ReadableTable<(&'static str, &'static [u8]), u64>,
    >,
    bucket: &str,
    key: &str,
    marker: VersionId,
) -> Result<Cursor, MetaError> {
    let k = key.as_bytes();
    if let Some(v) = tables.objects.get((bucket, k))? {
        let (record, stamp) = decode_current(v.value())?;
        if marker.names(stamp, Some(record.magic)) {
            return Ok(Cursor::Inside(k.to_vec(), None));
        }
    }
    let number = match marker {
        VersionId::Numbered { number, .. } => number,
        // A null version no longer there: resume after the key.
        VersionId::Null => match null_number(&tables.null_versions, bucket, key)? {
            Some(number) => number,
            None => return Ok(Cursor::Key(k.to_vec(), true)),
        },
    };
    Ok(Cursor::Inside(k.to_vec(), Some(number)))
}

/// Whether `number` is the newest `versions` entry of `key`.
fn is_newest(
    versions: &impl ReadableTable<(&'static str, &'static [u8], u64), &'static [u8]>,
    bucket: &str,
    key: &[u8],
    number: u64,
) -> Result<bool, MetaError> {
    let first = versions
        .range::<(&str, &[u8], u64)>((bucket, key, 0)..=(bucket, key, u64::MAX))?
        .next()
        .transpose()?;
    Ok(first.is_some_and(|(k, _)| k.value().2 == order_of(number)))
}

/// The first key at or after `from` (strictly after with `after`) that has a current
/// object or a `versions` entry in `bucket`.
fn next_key(
    objects: &impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
    versions: &impl ReadableTable<(&'static str, &'static [u8], u64), &'static [u8]>,
    bucket: &str,
    from: &[u8],
    after: bool,
) -> Result<Option<Vec<u8>>, MetaError> {
    let start = if after {
        Bound::Excluded((bucket, from))
    } else {
        Bound::Included((bucket, from))
    };
    let in_objects = match objects
        .range::<(&str, &[u8])>((start, Bound::Unbounded))?
        .next()
    {
        Some(entry) => {
            let (k, _) = entry?;
            let (b, key) = k.value();
            (b == bucket).then(|| key.to_vec())
        }
        None => None,
    };
    // (key, u64::MAX) is the last entry a key can have: excluding it starts at the next key.
    let start = if after {
        Bound::Excluded((bucket, from, u64::MAX))
    } else {
        Bound::Included((bucket, from, 0))
    };
    let in_versions = match versions
        .range::<(&str, &[u8], u64)>((start, Bound::Unbounded))?
        .next()
    {
        Some(entry) => {
            let (k, _) = entry?;
            let (b, key, _) = k.value();
            (b == bucket).then(|| key.to_vec())
        }
        None => None,
    };
    Ok(match (in_objects, in_versions) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

#[cfg(test)]
mod tests {
    use placement::{Magic, PairId, Sha1};

    use super::*;
    use crate::versions::Versioning;
    use crate::{Command, ContentSource, MetaStore, NewObject};

    /// Keys with prefixes and a delimiter to roll up, some written before versioning.
    const KEYS: [&str; 7] = ["a", "b/1", "b/2", "b/c/3", "c", "d/1", "e"];

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A versioned bucket after a seeded mix of PUTs, DELETEs (markers) and DELETEs of
    /// one version, with an unversioned bucket on each side of it.
    fn store(seed: u64) -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        let mut magic = 0u32;
        let mut put = |s: &MetaStore, bucket: &str, key: &str| {
            magic += 1;
            s.execute(&Command::PutObject {
                bucket: bucket.into(),
                key: key.into(),
                object: NewObject::new(
                    Sha1([(magic % 5) as u8; 20]),
                    Magic::new(magic).unwrap(),
                    1,
                    0,
                    [0; 16],
                ),
                source: ContentSource::Stored(PairId(0)),
                now_secs: 1,
                precondition: None,
            })
            .unwrap();
        };
        for b in ["a", "bkt", "c"] {
            s.execute(&Command::CreateBucket {
                bucket: b.into(),
                created_ms: 0,
            })
            .unwrap();
        }
        for key in KEYS {
            put(&s, "a", key);
            put(&s, "c", key);
        }
        for key in &KEYS[..3] {
            put(&s, "bkt", key);
        }
        s.execute(&Command::SetBucketVersioning {
            bucket: "bkt".into(),
            state: Versioning::Enabled,
        })
        .unwrap();
        let mut rng = Rng(seed);
        for _ in 0..120 {
            let key = KEYS[rng.below(KEYS.len() as u64) as usize];
            match rng.below(6) {
                0..=2 => put(&s, "bkt", key),
                3 => {
                    s.execute(&Command::DeleteObject {
                        bucket: "bkt".into(),
                        key: key.into(),
                        now_secs: 2,
                    })
                    .unwrap();
                }
                _ => {
                    let all = s.versions_of("bkt", key, 1000).unwrap();
                    if !all.is_empty() {
                        let pick = &all[rng.below(all.len() as u64) as usize];
                        s.execute(&Command::DeleteVersion {
                            bucket: "bkt".into(),
                            key: key.into(),
                            version: VersionId::parse(&pick.id()).unwrap(),
                            now_secs: 3,
                            bypass_governance: false,
                        })
                        .unwrap();
                    }
                }
            }
        }
        (dir, s)
    }

    /// One listed version: key, id, latest, delete marker.
    type Listed = (String, String, bool, bool);

    /// What a listing must hold, from the reads of one key at a time, in listing order.
    fn expected(s: &MetaStore, prefix: &str) -> Vec<Listed> {
        let mut out = Vec::new();
        for key in KEYS.iter().filter(|k| k.starts_with(prefix)) {
            for v in s.versions_of("bkt", key, 1000).unwrap() {
                out.push((key.to_string(), v.id(), v.latest, v.record.is_none()));
            }
        }
        out
    }

    fn walk(
        s: &MetaStore,
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: usize,
    ) -> (Vec<Listed>, Vec<String>) {
        let mut listed = Vec::new();
        let mut prefixes = Vec::new();
        let mut q = VersionsQuery {
            prefix: prefix.into(),
            delimiter: delimiter.map(Into::into),
            max_keys,
            ..VersionsQuery::default()
        };
        for _ in 0..500 {
            let page = s.list_versions("bkt", &q).unwrap();
            assert!(page.versions.len() + page.common_prefixes.len() <= max_keys);
            listed.extend(
                page.versions
                    .iter()
                    .map(|(k, v)| (k.clone(), v.id(), v.latest, v.record.is_none())),
            );
            prefixes.extend(page.common_prefixes.iter().cloned());
            if !page.truncated {
                assert!(page.next_key_marker.is_none());
                return (listed, prefixes);
            }
            q.key_marker = page.next_key_marker.clone();
            q.version_marker = page
                .next_version_marker
                .as_deref()
                .map(|v| VersionId::parse(v).unwrap());
        }
        panic!("listing did not end");
    }

    #[test]
    fn pages_list_every_version_once_in_order() {
        for seed in 1..=12 {
            let (_d, s) = store(seed);
            let whole = expected(&s, "");
            assert!(
                whole.len() > KEYS.len(),
                "seed {seed}: a few versions per key"
            );
            for max_keys in [1, 2, 3, 7, 1000] {
                let (listed, prefixes) = walk(&s, "", None, max_keys);
                assert_eq!(listed, whole, "seed {seed}, max-keys {max_keys}");
                assert!(prefixes.is_empty());
                let (listed, _) = walk(&s, "b/", None, max_keys);
                assert_eq!(listed, expected(&s, "b/"), "seed {seed}, prefix b/");
            }
        }
    }

    #[test]
    fn a_delimiter_rolls_keys_up_once_across_pages() {
        for seed in 1..=6 {
            let (_d, s) = store(seed);
            let has = |p: &str| !expected(&s, p).is_empty();
            for max_keys in [1, 2, 5, 1000] {
                let (listed, prefixes) = walk(&s, "", Some("/"), max_keys);
                let top: Vec<_> = expected(&s, "")
                    .into_iter()
                    .filter(|(k, ..)| !k.contains('/'))
                    .collect();
                assert_eq!(listed, top, "seed {seed}, max-keys {max_keys}");
                let want: Vec<&str> = ["b/", "d/"].into_iter().filter(|p| has(p)).collect();
                assert_eq!(prefixes, want, "seed {seed}, max-keys {max_keys}");
                let (_, prefixes) = walk(&s, "b/", Some("/"), max_keys);
                let want: Vec<&str> = ["b/c/"].into_iter().filter(|p| has(p)).collect();
                assert_eq!(prefixes, want);
            }
        }
    }

    /// `whole`'s rows of bucket "bkt" copied raw into one store per interval between
    /// `cuts`, each also given stale rows of the interval after its own (as a group holds
    /// them after a split, before its cleanup): its current objects, not its versions, so
    /// that a read of them would list something else.
    fn spread(whole: &MetaStore, cuts: &[&str], dir: &std::path::Path) -> Vec<MetaStore> {
        use crate::tables::{NULL_VERSIONS, OBJECTS, VERSIONS};
        use redb::ReadableDatabase as _;
        let owner = |key: &[u8]| cuts.partition_point(|c| c.as_bytes() <= key);
        let stores: Vec<MetaStore> = (0..=cuts.len())
            .map(|i| MetaStore::open(&dir.join(format!("g{i}.redb"))).unwrap())
            .collect();
        let read = whole.db().begin_read().unwrap();
        for (i, store) in stores.iter().enumerate() {
            let owns = |key: &[u8]| owner(key) == i;
            let takes = |key: &[u8]| owner(key) == i || owner(key) == i + 1;
            let txn = store.db().begin_write().unwrap();
            {
                let mut objects = txn.open_table(OBJECTS).unwrap();
                for row in read.open_table(OBJECTS).unwrap().iter().unwrap() {
                    let (k, v) = row.unwrap();
                    let (b, key) = k.value();
                    if b == "bkt" && takes(key) {
                        objects.insert((b, key), v.value()).unwrap();
                    }
                }
                let mut versions = txn.open_table(VERSIONS).unwrap();
                for row in read.open_table(VERSIONS).unwrap().iter().unwrap() {
                    let (k, v) = row.unwrap();
                    let (b, key, n) = k.value();
                    if b == "bkt" && owns(key) {
                        versions.insert((b, key, n), v.value()).unwrap();
                    }
                }
                let mut nulls = txn.open_table(NULL_VERSIONS).unwrap();
                for row in read.open_table(NULL_VERSIONS).unwrap().iter().unwrap() {
                    let (k, v) = row.unwrap();
                    let (b, key) = k.value();
                    if b == "bkt" && owns(key) {
                        nulls.insert((b, key), v.value()).unwrap();
                    }
                }
            }
            txn.commit().unwrap();
        }
        stores
    }

    /// Versions spread over index groups at cuts between, inside and at the edges of
    /// rolled-up prefixes, with stale rows beside: every page walked across the groups
    /// equals the page of the one store holding all, with its markers, for every page
    /// size and with and without a prefix and delimiter.
    #[tokio::test]
    async fn a_walk_across_groups_lists_versions_as_one_group() {
        use redb::ReadableDatabase as _;
        let mut pages = 0;
        for seed in 1..=6 {
            let (d, whole) = store(seed);
            for cuts in [vec!["b/2"], vec!["b/", "b/c", "d"], vec!["a", "c", "e"]] {
                let sub = tempfile::tempdir_in(d.path()).unwrap();
                let stores = spread(&whole, &cuts, sub.path());
                let span_of = |key: &[u8]| {
                    let at = cuts.partition_point(|c| c.as_bytes() <= key);
                    (at, cuts.get(at).map(|c| c.as_bytes().to_vec()))
                };
                for (prefix, delimiter) in [("", None), ("", Some("/")), ("b/", Some("/"))] {
                    for max_keys in [1, 2, 3, 1000] {
                        let mut q = VersionsQuery {
                            prefix: prefix.into(),
                            delimiter: delimiter.map(Into::into),
                            max_keys,
                            ..VersionsQuery::default()
                        };
                        for _ in 0..500 {
                            let want = whole.list_versions("bkt", &q).unwrap();
                            let got: VersionsPage =
                                list::walk(q.start(), q.max(), span_of, |i, span| {
                                    let q = q.clone();
                                    let db = stores[i].db();
                                    async move {
                                        let txn = db.begin_read()?;
                                        let tables = Tables {
                                            objects: txn.open_table(crate::tables::OBJECTS)?,
                                            versions: txn.open_table(crate::tables::VERSIONS)?,
                                            null_versions: txn
                                                .open_table(crate::tables::NULL_VERSIONS)?,
                                        };
                                        list_versions_span(&tables, "bkt", &q, &span)
                                    }
                                })
                                .await
                                .unwrap();
                            let got = got.finish();
                            assert_eq!(got, want, "seed {seed}, cuts {cuts:?}, {q:?}");
                            pages += 1;
                            if !want.truncated {
                                break;
                            }
                            q.key_marker = want.next_key_marker.clone();
                            q.version_marker = want
                                .next_version_marker
                                .as_deref()
                                .map(|v| VersionId::parse(v).unwrap());
                        }
                    }
                }
            }
        }
        assert!(pages > 500, "{pages} pages");
    }

    #[test]
    fn max_keys_zero_is_an_empty_page_and_other_buckets_never_show() {
        let (_d, s) = store(3);
        let page = s
            .list_versions(
                "bkt",
                &VersionsQuery {
                    max_keys: 0,
                    ..VersionsQuery::default()
                },
            )
            .unwrap();
        assert!(page.versions.is_empty() && !page.truncated);
        let (listed, _) = walk(&s, "", None, 1000);
        assert!(listed.iter().all(|(k, ..)| KEYS.contains(&k.as_str())));
        // Unversioned neighbours list their objects as null versions, each the latest.
        let page = s
            .list_versions(
                "a",
                &VersionsQuery {
                    max_keys: 1000,
                    ..VersionsQuery::default()
                },
            )
            .unwrap();
        assert_eq!(page.versions.len(), KEYS.len());
        assert!(
            page.versions
                .iter()
                .all(|(_, v)| v.id() == "null" && v.latest)
        );
    }
}
