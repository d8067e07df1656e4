//! Bucket listing over the `objects` table: prefix, delimiter roll-up and pagination.
//!
//! Each step seeks with a fresh range, so a common prefix that covers a million keys costs
//! one seek, not a million reads: after rolling keys up under `photos/`, the next seek
//! starts at the first key after every key that begins with `photos/`.

use std::ops::Bound;

use redb::ReadableTable;

use super::MetaError;
use super::tables::ObjectRecord;

/// Keys returned per page at most, as S3 does.
pub const MAX_KEYS_LIMIT: usize = 1000;

#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// List keys strictly after this one (start-after, marker or a continuation token).
    pub after: Option<Vec<u8>>,
    pub max_keys: usize,
}

#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub objects: Vec<(String, ObjectRecord)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned: where the next page starts.
    pub last: Option<Vec<u8>>,
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

pub fn list(
    table: &impl ReadableTable<(&'static str, &'static [u8]), &'static [u8]>,
    bucket: &str,
    q: &ListQuery,
) -> Result<ListPage, MetaError> {
    let mut page = ListPage::default();
    let max_keys = q.max_keys.min(MAX_KEYS_LIMIT);
    // max-keys=0 asks for nothing: S3 answers an empty page that is not truncated (a
    // truncated page with nothing in it has no key or token to continue from).
    if max_keys == 0 {
        return Ok(page);
    }
    let prefix = q.prefix.as_bytes();
    let mut cursor: Bound<Vec<u8>> = match &q.after {
        Some(after) if after.as_slice() >= prefix => Bound::Excluded(after.clone()),
        _ => Bound::Included(prefix.to_vec()),
    };
    // Every iteration either emits an entry, skips a rolled-up prefix once, or stops;
    // emitted entries are bounded by max_keys + 1, skips by the entries they cover.
    loop {
        let start = match &cursor {
            Bound::Included(k) => Bound::Included((bucket, k.as_slice())),
            Bound::Excluded(k) => Bound::Excluded((bucket, k.as_slice())),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut range = table.range::<(&str, &[u8])>((start, Bound::Unbounded))?;
        let Some(entry) = range.next() else { break };
        let (k, v) = entry?;
        let (b, key) = k.value();
        if b != bucket || !key.starts_with(prefix) {
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
                Some(end) => cursor = Bound::Included(end),
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
        cursor = Bound::Excluded(key.to_vec());
    }
    Ok(page)
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

    #[test]
    fn prefix_end_handles_carry() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
