//! Bucket listing over the `objects` table: prefix, delimiter roll-up and pagination,
//! across index groups.
//!
//! Each step seeks with a fresh range, so a common prefix that covers a million keys costs
//! one seek, not a million reads: after rolling keys up under `photos/`, the next seek
//! starts at the first key after every key that begins with `photos/`.
//!
//! A bucket's keys may lie in several index groups, each owning an interval. A listing
//! walks them in key order with one [`Cursor`] ([`walk`]): each group reads its own
//! interval only ([`Span`]), from the cursor and with the room the page has left, and
//! says where the walk goes on. A common prefix rolled up in one group moves the cursor
//! past every key under it, so the next group never lists it again: a page is exact and
//! ordered across a boundary.

use std::future::Future;
use std::ops::Bound;

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::MetaError;
use super::tables::ObjectRecord;

/// Keys returned per page at most, as S3 does.
pub const MAX_KEYS_LIMIT: usize = 1000;

/// Bound on the groups one page visits: far above any map (each visit moves the cursor
/// into a later interval), so only a listing that fails to advance meets it.
const WALK_STEPS_MAX: usize = 1 << 16;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// List keys strictly after this one (start-after, marker or a continuation token).
    pub after: Option<Vec<u8>>,
    pub max_keys: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub objects: Vec<(String, ObjectRecord)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned: where the next page starts.
    pub last: Option<Vec<u8>>,
    /// Where the walk goes on in a later index group: set by a [`Span`]'s read that
    /// reached its interval's end with room left. Never set in a whole page.
    pub resume: Option<Cursor>,
}

/// A place in a bucket's keys (bytes: the end of a rolled-up prefix need not be UTF-8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cursor {
    /// This key and those after it.
    At(Vec<u8>),
    /// The keys after this one.
    After(Vec<u8>),
}

impl Cursor {
    pub fn key(&self) -> &[u8] {
        match self {
            Cursor::At(k) | Cursor::After(k) => k,
        }
    }

    fn bound<'a>(&'a self, bucket: &'a str) -> Bound<(&'a str, &'a [u8])> {
        match self {
            Cursor::At(k) => Bound::Included((bucket, k.as_slice())),
            Cursor::After(k) => Bound::Excluded((bucket, k.as_slice())),
        }
    }

    /// Whether the walk is past every key under `prefix`.
    pub(crate) fn past(&self, prefix: &[u8]) -> bool {
        let key = self.key();
        !key.starts_with(prefix) && key > prefix
    }

    /// Where a listing resumes at `until`, the end of an interval it read to the end of,
    /// or None when no key under `prefix` lies there or beyond.
    pub(crate) fn at_end(until: Option<&[u8]>, prefix: &[u8]) -> Option<Cursor> {
        until
            .map(|u| Cursor::At(u.to_vec()))
            .filter(|c| !c.past(prefix))
    }
}

/// The part of a listing one index group reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub from: Cursor,
    /// Where the group's interval ends in the bucket (None: past its last key).
    pub until: Option<Vec<u8>>,
    /// Entries the page has room for; with 0 the read only finds whether one follows.
    pub room: usize,
}

impl ListQuery {
    /// Where the listing starts.
    pub fn start(&self) -> Cursor {
        match &self.after {
            Some(after) if after.as_slice() >= self.prefix.as_bytes() => {
                Cursor::After(after.clone())
            }
            _ => Cursor::At(self.prefix.as_bytes().to_vec()),
        }
    }

    /// Entries a page holds at most.
    pub fn max(&self) -> usize {
        self.max_keys.min(MAX_KEYS_LIMIT)
    }
}

/// The smallest byte string greater than every string that starts with `prefix`, or
/// `None` when there is none (a prefix of all 0xff bytes).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A page of `bucket` held in one table whole (one group owning every key).
pub fn list(
    table: &impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
    bucket: &str,
    q: &ListQuery,
) -> Result<ListPage, MetaError> {
    // max-keys=0 asks for nothing: S3 answers an empty page that is not truncated (a
    // truncated page with nothing in it has no key or token to continue from).
    if q.max() == 0 {
        return Ok(ListPage::default());
    }
    let span = Span {
        from: q.start(),
        until: None,
        room: q.max(),
    };
    list_span(table, bucket, q, &span)
}

/// The part of a page of `bucket` that lies in `span`.
pub fn list_span(
    table: &impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
    bucket: &str,
    q: &ListQuery,
    span: &Span,
) -> Result<ListPage, MetaError> {
    let mut page = ListPage::default();
    let max_keys = span.room.min(MAX_KEYS_LIMIT);
    let prefix = q.prefix.as_bytes();
    let until = span.until.as_deref();
    let mut cursor = span.from.clone();
    // Every iteration either emits an entry, skips a rolled-up prefix once, or stops;
    // emitted entries are bounded by max_keys + 1, skips by the entries they cover.
    loop {
        if cursor.past(prefix) {
            break;
        }
        if until.is_some_and(|u| cursor.key() >= u) {
            // A rolled-up prefix carried the cursor past this interval.
            page.resume = Some(cursor);
            break;
        }
        let mut range = table.range::<(&str, &[u8])>((cursor.bound(bucket), Bound::Unbounded))?;
        let Some(entry) = range.next() else {
            page.resume = Cursor::at_end(until, prefix);
            break;
        };
        let (k, v) = entry?;
        let (b, key) = k.value();
        if b != bucket || until.is_some_and(|u| key >= u) {
            page.resume = Cursor::at_end(until, prefix);
            break;
        }
        if !key.starts_with(prefix) {
            break;
        }
        if let Some(cp) = roll_up(key, prefix, q.delimiter.as_deref()) {
            let resumed_inside = q.after.as_deref() == Some(cp.as_slice());
            if !resumed_inside {
                if page.objects.len() + page.common_prefixes.len() >= max_keys {
                    page.truncated = true;
                    break;
                }
                page.common_prefixes.push(utf8(&cp)?);
                page.last = Some(cp.clone());
            }
            match prefix_end(&cp) {
                Some(end) => cursor = Cursor::At(end),
                None => break,
            }
            continue;
        }
        if page.objects.len() + page.common_prefixes.len() >= max_keys {
            page.truncated = true;
            break;
        }
        let record: ObjectRecord = crate::versions::decode_object(v.value())?;
        page.objects.push((utf8(key)?, record));
        page.last = Some(key.to_vec());
        cursor = Cursor::After(key.to_vec());
    }
    Ok(page)
}

/// A page a listing's [`walk`] puts together from the parts its groups read.
pub trait Walked: Default {
    /// Entries in the page.
    fn entries(&self) -> usize;
    fn truncated(&self) -> bool;
    /// Where a part says the walk goes on.
    fn resume(&self) -> Option<&Cursor>;
    /// Appends the part a later group read (its `resume` taken by the walk).
    fn append(&mut self, part: Self);
}

impl Walked for ListPage {
    fn entries(&self) -> usize {
        self.objects.len() + self.common_prefixes.len()
    }

    fn truncated(&self) -> bool {
        self.truncated
    }

    fn resume(&self) -> Option<&Cursor> {
        self.resume.as_ref()
    }

    fn append(&mut self, part: Self) {
        if part.entries() > 0 {
            self.last = part.last;
        }
        self.objects.extend(part.objects);
        self.common_prefixes.extend(part.common_prefixes);
        self.truncated = part.truncated;
    }
}

/// A page of at most `max` entries from `start`, read group by group: `span_of` names
/// the group owning a key and where its interval ends in the bucket (the shard map's
/// [`crate::groups::ShardMap::index_span`]), `read` reads a [`Span`] in a group.
pub async fn walk<P, G, Fut>(
    start: Cursor,
    max: usize,
    span_of: impl Fn(&[u8]) -> (G, Option<Vec<u8>>),
    mut read: impl FnMut(G, Span) -> Fut,
) -> Result<P, MetaError>
where
    P: Walked,
    Fut: Future<Output = Result<P, MetaError>>,
{
    let mut page = P::default();
    if max == 0 {
        return Ok(page);
    }
    let mut from = start;
    for _ in 0..WALK_STEPS_MAX {
        let (group, until) = span_of(from.key());
        let span = Span {
            from: from.clone(),
            until,
            room: max.saturating_sub(page.entries()),
        };
        let part = read(group, span).await?;
        let next = part.resume().cloned();
        page.append(part);
        if page.truncated() {
            return Ok(page);
        }
        match next {
            Some(next) if next.key() > from.key() => from = next,
            Some(next) => {
                return Err(MetaError::Unexpected(format!(
                    "a listing did not advance past {:?} (resumed at {next:?})",
                    from.key()
                )));
            }
            None => return Ok(page),
        }
    }
    Err(MetaError::Unexpected(format!(
        "a listing visited {WALK_STEPS_MAX} groups"
    )))
}

/// The common prefix `key` (under `prefix`) rolls up into with `delimiter`, if any: the
/// key up to and including the first delimiter after the prefix.
pub(crate) fn roll_up(key: &[u8], prefix: &[u8], delimiter: Option<&str>) -> Option<Vec<u8>> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    let rest = key.get(prefix.len()..)?;
    find(rest, d.as_bytes()).map(|at| key[..prefix.len() + at + d.len()].to_vec())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(crate) fn utf8(bytes: &[u8]) -> Result<String, MetaError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| MetaError::Corrupt("objects: key is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::super::{Command, ContentSource, MetaStore, NewObject};
    use super::*;
    use placement::{Magic, PairId, Sha1};

    fn store_with(keys: &[&str]) -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        for b in ["a", "b", "c"] {
            s.execute(&Command::CreateBucket {
                bucket: b.into(),
                created_ms: 0,
            })
            .unwrap();
        }
        for (i, k) in keys.iter().enumerate() {
            for b in ["a", "b", "c"] {
                s.execute(&Command::PutObject {
                    bucket: b.into(),
                    key: k.to_string(),
                    object: NewObject::new(
                        Sha1([i as u8; 20]),
                        Magic::new(i as u32 + 1).unwrap(),
                        1,
                        0,
                        [0; 16],
                    ),
                    source: ContentSource::Stored(PairId(0)),
                    now_secs: 0,
                    precondition: None,
                })
                .unwrap();
            }
        }
        (dir, s)
    }

    fn page(
        s: &MetaStore,
        prefix: &str,
        delim: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> (Vec<String>, Vec<String>, bool) {
        let p = s
            .list_objects(
                "b",
                &ListQuery {
                    prefix: prefix.into(),
                    delimiter: delim.map(Into::into),
                    after: after.map(|a| a.as_bytes().to_vec()),
                    max_keys: max,
                },
            )
            .unwrap();
        (
            p.objects.into_iter().map(|(k, _)| k).collect(),
            p.common_prefixes,
            p.truncated,
        )
    }

    #[test]
    fn prefix_and_delimiter_roll_up() {
        let (_d, s) = store_with(&[
            "a.txt",
            "photos/1.jpg",
            "photos/2.jpg",
            "photos/x/3.jpg",
            "z",
        ]);
        let (keys, cps, t) = page(&s, "", Some("/"), None, 1000);
        assert_eq!(keys, ["a.txt", "z"]);
        assert_eq!(cps, ["photos/"]);
        assert!(!t);
        let (keys, cps, _) = page(&s, "photos/", Some("/"), None, 1000);
        assert_eq!(keys, ["photos/1.jpg", "photos/2.jpg"]);
        assert_eq!(cps, ["photos/x/"]);
        let (keys, _, _) = page(&s, "photos/", None, None, 1000);
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn pagination_visits_every_entry_once() {
        let (_d, s) = store_with(&["a", "b/1", "b/2", "c", "d/1", "e"]);
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..10 {
            let p = s
                .list_objects(
                    "b",
                    &ListQuery {
                        prefix: String::new(),
                        delimiter: Some("/".into()),
                        after: after.as_ref().map(|a| a.as_bytes().to_vec()),
                        max_keys: 2,
                    },
                )
                .unwrap();
            seen.extend(p.objects.iter().map(|(k, _)| k.clone()));
            seen.extend(p.common_prefixes.iter().cloned());
            if !p.truncated {
                break;
            }
            after = p.last.map(|l| String::from_utf8(l).unwrap());
        }
        seen.sort();
        assert_eq!(seen, ["a", "b/", "c", "d/", "e"]);
    }

    #[test]
    fn listing_stays_inside_the_bucket_and_start_after() {
        let (_d, s) = store_with(&["k1", "k2", "k3"]);
        let (keys, _, t) = page(&s, "", None, Some("k1"), 1000);
        assert_eq!(keys, ["k2", "k3"]);
        assert!(!t);
        let (keys, _, t) = page(&s, "", None, None, 2);
        assert_eq!(keys, ["k1", "k2"]);
        assert!(t);
        // max-keys=0: empty and not truncated, as S3 answers (s3-tests *_maxkeys_zero).
        let (keys, _, t) = page(&s, "", None, None, 0);
        assert!(keys.is_empty() && !t);
    }

    /// One page as keys with sizes, prefixes and truncation.
    type Seen = (Vec<(String, u64)>, Vec<String>, bool);

    fn seen(page: &ListPage) -> Seen {
        let keys = page
            .objects
            .iter()
            .map(|(k, r)| (k.clone(), r.size_bytes))
            .collect();
        (keys, page.common_prefixes.clone(), page.truncated)
    }

    /// Reads every page of `q` through [`walk`] over `stores`, store `i` owning the keys
    /// of bucket "b" from `cuts[i - 1]` to `cuts[i]` (store 0 from the start): each page as
    /// its keys, prefixes and truncation, the next page after the last entry.
    async fn walked_pages(stores: &[MetaStore], cuts: &[Vec<u8>], mut q: ListQuery) -> Vec<Seen> {
        let span_of = |key: &[u8]| {
            let at = cuts.partition_point(|c| c.as_slice() <= key);
            (at, cuts.get(at).cloned())
        };
        let mut pages = Vec::new();
        for _ in 0..200 {
            let page: ListPage = walk(q.start(), q.max(), span_of, |i, span| {
                let q = q.clone();
                async move {
                    use redb::ReadableDatabase as _;
                    let txn = stores[i].db().begin_read()?;
                    let table = txn.open_table(crate::tables::OBJECTS)?;
                    list_span(&table, "b", &q, &span)
                }
            })
            .await
            .unwrap();
            pages.push(seen(&page));
            if !page.truncated {
                return pages;
            }
            q.after = page.last;
        }
        panic!("no last page");
    }

    /// The same pages from one store holding every key.
    fn whole_pages(store: &MetaStore, mut q: ListQuery) -> Vec<Seen> {
        let mut pages = Vec::new();
        for _ in 0..200 {
            let page = store.list_objects("b", &q).unwrap();
            pages.push(seen(&page));
            if !page.truncated {
                return pages;
            }
            q.after = page.last;
        }
        panic!("no last page");
    }

    fn put(s: &MetaStore, bucket: &str, key: &str, size: u64) {
        s.execute(&Command::PutObject {
            bucket: bucket.into(),
            key: key.into(),
            object: NewObject::new(Sha1([1; 20]), Magic::new(1).unwrap(), size, 0, [0; 16]),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 0,
            precondition: None,
        })
        .unwrap();
    }

    /// Random keys spread over one to four "groups" at random cuts, each also holding
    /// stale keys outside its interval (as a group does right after a split, before its
    /// cleanup): every page walked across them equals the page one store holding every
    /// key gives, for random prefixes, delimiters, starts and page sizes.
    #[tokio::test]
    async fn a_walk_across_groups_pages_exactly_as_one_group() {
        use rand::{RngExt as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let alphabet = ["a", "b", "/", "x"];
        let word = |rng: &mut rand::rngs::StdRng, max: usize| -> String {
            (0..rng.random_range(1..=max))
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut checked = 0;
        for round in 0..12 {
            let groups = rng.random_range(1..=4usize);
            let mut cuts: Vec<Vec<u8>> = (1..groups)
                .map(|_| word(&mut rng, 3).into_bytes())
                .collect();
            cuts.sort();
            cuts.dedup();
            let open = |name: String| {
                let s = MetaStore::open(&dir.path().join(name)).unwrap();
                for b in ["a", "b", "c"] {
                    s.execute(&Command::CreateBucket {
                        bucket: b.into(),
                        created_ms: 0,
                    })
                    .unwrap();
                }
                s
            };
            let whole = open(format!("whole-{round}"));
            let stores: Vec<MetaStore> = (0..=cuts.len())
                .map(|i| open(format!("g{round}-{i}")))
                .collect();
            for _ in 0..80 {
                let key = word(&mut rng, 5);
                let size = rng.random_range(1..1000u64);
                let owner = cuts.partition_point(|c| c.as_slice() <= key.as_bytes());
                put(&whole, "b", &key, size);
                put(&stores[owner], "b", &key, size);
                // Neighbour buckets, and a stale copy in a group that does not own it.
                put(&stores[rng.random_range(0..stores.len())], "a", &key, 0);
                put(&stores[rng.random_range(0..stores.len())], "c", &key, 0);
                let other = rng.random_range(0..stores.len());
                if other != owner {
                    put(&stores[other], "b", &key, 1_000_000);
                }
            }
            for _ in 0..25 {
                let q = ListQuery {
                    prefix: if rng.random_bool(0.5) {
                        String::new()
                    } else {
                        word(&mut rng, 2)
                    },
                    delimiter: rng.random_bool(0.6).then(|| "/".to_string()),
                    after: rng.random_bool(0.3).then(|| word(&mut rng, 3).into_bytes()),
                    max_keys: rng.random_range(0..8),
                };
                let want = whole_pages(&whole, q.clone());
                let got = walked_pages(&stores, &cuts, q.clone()).await;
                assert_eq!(got, want, "cuts {cuts:?}, query {q:?}");
                checked += want.len();
            }
        }
        assert!(checked > 300, "{checked} pages");
    }

    #[test]
    fn prefix_end_handles_carry() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
