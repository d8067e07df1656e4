//! Object tags beside the version they belong to: a seeded random sequence of tagged and
//! untagged PUTs, tag changes on any version, delete markers and DELETEs of one version,
//! with versioning suspended and enabled now and then, checked against a model after
//! every step (each version's tags, read by id and in the key's list); then the writes of
//! an unversioned bucket, multipart uploads and bucket tags.

use std::collections::BTreeMap;

use placement::{Magic, PairId, Sha1};

use crate::acl::CannedAcl;
use crate::tags::{Tag, TagSet};
use crate::versions::{VersionId, Versioning};
use crate::{
    Command, ContentSource, MetaError, MetaStore, NewObject, PartRecord, Response, UploadRecord,
};

const KEYS: [&str; 2] = ["a", "b"];
const STEPS: usize = 500;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.execute(&Command::CreateBucket {
        bucket: "bkt".into(),
        created_ms: 1,
    })
    .unwrap();
    (dir, s)
}

fn tags(n: u64) -> TagSet {
    TagSet(vec![Tag::new("step", n.to_string()), Tag::new("k", "v")])
}

fn put_cmd(key: &str, n: u8, magic: u32) -> Command {
    Command::PutObject {
        bucket: "bkt".into(),
        key: key.into(),
        object: NewObject::new(Sha1([n; 20]), Magic::new(magic).unwrap(), 1, 0, [n; 16]),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 10,
        precondition: None,
    }
}

/// A PUT, under `Tagged` when it has tags.
fn put(s: &MetaStore, key: &str, n: u8, magic: u32, with: &TagSet) -> Response {
    let cmd = put_cmd(key, n, magic);
    let cmd = if with.is_empty() {
        cmd
    } else {
        Command::Tagged {
            bucket: "bkt".into(),
            key: key.into(),
            tags: with.clone(),
            command: Box::new(cmd),
        }
    };
    s.execute(&cmd).unwrap()
}

fn current_tags(s: &MetaStore, key: &str) -> Option<TagSet> {
    match s.current_version("bkt", key).unwrap() {
        crate::CurrentVersion::Object { tags, .. } => Some(tags),
        _ => None,
    }
}

/// One version in the model: its id, its tags, whether it is a marker.
#[derive(Clone, Debug)]
struct Model {
    id: String,
    tags: TagSet,
    marker: bool,
}

#[test]
fn tags_follow_their_version_through_random_writes() {
    let (_d, s) = store();
    s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Enabled,
    })
    .unwrap();
    let mut model: BTreeMap<&str, Vec<Model>> = KEYS.iter().map(|k| (*k, Vec::new())).collect();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut state = Versioning::Enabled;
    let (mut tagged_puts, mut retagged, mut promoted, mut nulls_replaced) = (0, 0, 0, 0);
    for step in 0..STEPS as u64 {
        if rng.below(25) == 0 {
            state = match state {
                Versioning::Enabled => Versioning::Suspended,
                _ => Versioning::Enabled,
            };
            s.execute(&Command::SetBucketVersioning {
                bucket: "bkt".into(),
                state,
            })
            .unwrap();
        }
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let versions = model.get_mut(key).unwrap();
        let suspended = state == Versioning::Suspended;
        match rng.below(10) {
            0..=3 => {
                let with = if rng.below(3) == 0 {
                    TagSet::default()
                } else {
                    tagged_puts += 1;
                    tags(step)
                };
                let magic = (rng.next() as u32).max(1);
                let r = put(&s, key, (step % 5) as u8 + 1, magic, &with);
                let Response::VersionStored { version_id, .. } = r else {
                    panic!("step {step}: {r:?}");
                };
                if suspended {
                    let before = versions.len();
                    versions.retain(|m| m.id != "null");
                    nulls_replaced += before - versions.len();
                }
                versions.insert(
                    0,
                    Model {
                        id: version_id,
                        tags: with,
                        marker: false,
                    },
                );
            }
            4 => {
                let r = s
                    .execute(&Command::DeleteObject {
                        bucket: "bkt".into(),
                        key: key.into(),
                        now_secs: 11,
                    })
                    .unwrap();
                let Response::MarkerAdded { version_id } = r else {
                    panic!("step {step}: {r:?}");
                };
                if suspended {
                    versions.retain(|m| m.id != "null");
                }
                versions.insert(
                    0,
                    Model {
                        id: version_id,
                        tags: TagSet::default(),
                        marker: true,
                    },
                );
            }
            5..=7 if !versions.is_empty() => {
                // New tags (or none) on any version, named by id or, for the current
                // object, without one.
                let i = rng.below(versions.len() as u64) as usize;
                let with = if rng.below(4) == 0 {
                    TagSet::default()
                } else {
                    tags(step + 10_000)
                };
                let by_id = !(i == 0 && !versions[0].marker && rng.below(2) == 0);
                let r = s.execute(&Command::SetObjectTags {
                    bucket: "bkt".into(),
                    key: key.into(),
                    version: by_id.then(|| VersionId::parse(&versions[i].id).unwrap()),
                    tags: with.clone(),
                });
                if versions[i].marker {
                    assert!(
                        matches!(r, Err(MetaError::InvalidCommand(_))),
                        "step {step}: {r:?}"
                    );
                } else {
                    assert_eq!(
                        r,
                        Ok(Response::TagsSet {
                            version_id: Some(versions[i].id.clone())
                        }),
                        "step {step}"
                    );
                    versions[i].tags = with;
                    retagged += 1;
                }
            }
            _ if !versions.is_empty() => {
                // The newest half the time: the one whose removal promotes the next.
                let i = match rng.below(2) {
                    0 => 0,
                    _ => rng.below(versions.len() as u64) as usize,
                };
                let r = s.execute(&Command::DeleteVersion {
                    bucket: "bkt".into(),
                    key: key.into(),
                    version: VersionId::parse(&versions[i].id).unwrap(),
                    now_secs: 12,
                    bypass_governance: false,
                });
                assert!(
                    matches!(r, Ok(Response::VersionDeleted { .. })),
                    "step {step}"
                );
                versions.remove(i);
                // The version below the current one comes back as current, with its tags.
                if i == 0 && versions.first().is_some_and(|m| !m.marker) {
                    promoted += 1;
                }
            }
            _ => {}
        }
        let want = &model[key];
        let got = s.versions_of("bkt", key, 10_000).unwrap();
        assert_eq!(got.len(), want.len(), "step {step}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.id(), w.id, "step {step}");
            assert_eq!(g.tags, w.tags, "step {step} {key} {}", w.id);
            let by_id = s
                .version("bkt", key, VersionId::parse(&w.id).unwrap())
                .unwrap()
                .unwrap();
            assert_eq!(by_id.tags, w.tags, "step {step} {key} {} by id", w.id);
        }
        let want_current = want.first().filter(|m| !m.marker).map(|m| m.tags.clone());
        assert_eq!(current_tags(&s, key), want_current, "step {step} {key}");
    }
    assert!(
        tagged_puts > 80 && retagged > 50 && promoted > 10 && nulls_replaced > 3,
        "{tagged_puts} {retagged} {promoted} {nulls_replaced}"
    );
}

#[test]
fn an_unversioned_object_loses_its_tags_with_it() {
    let (_d, s) = store();
    assert!(matches!(
        put(&s, "k", 1, 5, &tags(1)),
        Response::ObjectPut { .. }
    ));
    assert_eq!(current_tags(&s, "k"), Some(tags(1)));
    // Tags changed in place answer no version id in an unversioned bucket.
    let set = |with: TagSet| {
        s.execute(&Command::SetObjectTags {
            bucket: "bkt".into(),
            key: "k".into(),
            version: None,
            tags: with,
        })
    };
    assert_eq!(set(tags(2)), Ok(Response::TagsSet { version_id: None }));
    assert_eq!(current_tags(&s, "k"), Some(tags(2)));
    // Tags that break S3's rules are refused, the old ones kept.
    let reserved = TagSet(vec![Tag::new("aws:x", "1")]);
    assert!(matches!(set(reserved), Err(MetaError::InvalidCommand(_))));
    assert_eq!(current_tags(&s, "k"), Some(tags(2)));
    // An overwrite without tags has none.
    put(&s, "k", 2, 6, &TagSet::default());
    assert_eq!(current_tags(&s, "k"), Some(TagSet::default()));
    put(&s, "k", 3, 7, &tags(3));
    s.execute(&Command::DeleteObject {
        bucket: "bkt".into(),
        key: "k".into(),
        now_secs: 1,
    })
    .unwrap();
    assert_eq!(current_tags(&s, "k"), None);
    assert_eq!(set(tags(4)), Err(MetaError::NoSuchKey));
    // A write whose content has gone writes nothing, and tags nothing.
    let gone = Command::Tagged {
        bucket: "bkt".into(),
        key: "k".into(),
        tags: tags(5),
        command: Box::new(Command::PutObject {
            bucket: "bkt".into(),
            key: "k".into(),
            object: NewObject::new(Sha1([9; 20]), Magic::new(9).unwrap(), 1, 0, [9; 16]),
            source: ContentSource::Existing,
            now_secs: 10,
            precondition: None,
        }),
    };
    assert_eq!(s.execute(&gone), Ok(Response::ContentGone));
    assert_eq!(current_tags(&s, "k"), None);
    // Tags that break S3's rules, or that name another key, are refused whole.
    let bad = Command::Tagged {
        bucket: "bkt".into(),
        key: "k".into(),
        tags: TagSet(vec![Tag::new("aws:x", "1")]),
        command: Box::new(put_cmd("k", 1, 5)),
    };
    assert!(matches!(s.execute(&bad), Err(MetaError::InvalidCommand(_))));
    let elsewhere = Command::Tagged {
        bucket: "bkt".into(),
        key: "other".into(),
        tags: tags(6),
        command: Box::new(put_cmd("k", 1, 5)),
    };
    assert!(matches!(
        s.execute(&elsewhere),
        Err(MetaError::Unexpected(_))
    ));
    assert_eq!(current_tags(&s, "k"), None);
    assert_eq!(bad.format_version(), 4);
}

#[test]
fn an_upload_gives_its_tags_to_the_object_it_completes_into() {
    let (_d, s) = store();
    let upload = UploadRecord {
        bucket: "bkt".into(),
        key: "k".into(),
        content_type: None,
        user_meta: Vec::new(),
        headers: Vec::new(),
        created_ms: 1,
    };
    let create = |id: &str| {
        s.execute(&Command::Tagged {
            bucket: "bkt".into(),
            key: "k".into(),
            tags: tags(7),
            command: Box::new(Command::CreateUpload {
                upload_id: id.into(),
                upload: upload.clone(),
            }),
        })
        .unwrap();
    };
    create("u1");
    create("u2");
    let part = PartRecord {
        sha1: Sha1([1; 20]),
        magic: Magic::new(11).unwrap(),
        size_bytes: 1,
        md5: [1; 16],
        crc32: 0,
        created_ms: 1,
    };
    s.execute(&Command::PutPart {
        upload_id: "u1".into(),
        part_number: 1,
        part: part.clone(),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
    })
    .unwrap();
    s.execute(&Command::CompleteUpload {
        upload_id: "u1".into(),
        object: NewObject::new(Sha1([2; 20]), Magic::new(12).unwrap(), 1, 0, [2; 16]),
        parts: vec![(1, part.sha1)],
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
    })
    .unwrap();
    assert_eq!(current_tags(&s, "k"), Some(tags(7)));
    s.execute(&Command::AbortUpload {
        upload_id: "u2".into(),
        now_secs: 1,
    })
    .unwrap();
    let db = s.db();
    let txn = redb::ReadableDatabase::begin_read(&*db).unwrap();
    let left = txn.open_table(crate::extras::UPLOAD_EXTRAS).unwrap();
    assert!(
        redb::ReadableTableMetadata::is_empty(&left).unwrap(),
        "an ended upload's tags go with it"
    );
}

#[test]
fn bucket_tags_go_with_the_bucket() {
    let (_d, s) = store();
    let set = |with: TagSet| {
        s.execute(&Command::SetBucketTags {
            bucket: "bkt".into(),
            tags: with,
        })
    };
    assert_eq!(s.bucket_tags("bkt"), Ok(TagSet::default()));
    assert_eq!(set(tags(1)), Ok(Response::Done));
    assert_eq!(s.bucket_tags("bkt"), Ok(tags(1)));
    let many = TagSet((0..51).map(|i| Tag::new(format!("k{i}"), "")).collect());
    assert!(matches!(set(many), Err(MetaError::InvalidCommand(_))));
    assert_eq!(s.bucket_tags("bkt"), Ok(tags(1)));
    s.execute(&Command::DeleteBucket {
        bucket: "bkt".into(),
    })
    .unwrap();
    assert_eq!(s.bucket_tags("bkt"), Err(MetaError::NoSuchBucket));
    assert_eq!(set(tags(2)), Err(MetaError::NoSuchBucket));
    s.execute(&Command::CreateBucket {
        bucket: "bkt".into(),
        created_ms: 2,
    })
    .unwrap();
    assert_eq!(s.bucket_tags("bkt"), Ok(TagSet::default()));
}

fn current_acl(s: &MetaStore, key: &str) -> Option<CannedAcl> {
    match s.current_version("bkt", key).unwrap() {
        crate::CurrentVersion::Object { acl, .. } => Some(acl),
        _ => None,
    }
}

/// A canned ACL is kept like tags: beside the version (moving with it when it becomes
/// noncurrent), beside an upload for its object, beside a bucket created with it.
#[test]
fn an_acl_stays_with_its_version_upload_and_bucket() {
    let (_d, s) = store();
    s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Enabled,
    })
    .unwrap();
    let public = Command::with_acl("bkt", "k", CannedAcl::PublicRead, put_cmd("k", 1, 5));
    assert_eq!(public.format_version(), 4);
    let Response::VersionStored { version_id: v1, .. } = s.execute(&public).unwrap() else {
        panic!("a versioned PUT");
    };
    assert_eq!(current_acl(&s, "k"), Some(CannedAcl::PublicRead));
    put(&s, "k", 2, 6, &tags(1));
    assert_eq!(current_acl(&s, "k"), Some(CannedAcl::Private));
    let old = VersionId::parse(&v1).unwrap();
    assert_eq!(
        s.version("bkt", "k", old).unwrap().unwrap().acl,
        CannedAcl::PublicRead
    );
    // Changed in place by id, the tags kept.
    let r = s.execute(&Command::SetObjectAcl {
        bucket: "bkt".into(),
        key: "k".into(),
        version: None,
        acl: CannedAcl::PublicRead,
    });
    assert!(matches!(
        r,
        Ok(Response::AclSet {
            version_id: Some(_)
        })
    ));
    assert_eq!(current_acl(&s, "k"), Some(CannedAcl::PublicRead));
    assert_eq!(current_tags(&s, "k"), Some(tags(1)));
    // An upload created public gives that to its object.
    let upload = UploadRecord {
        bucket: "bkt".into(),
        key: "mp".into(),
        content_type: None,
        user_meta: Vec::new(),
        headers: Vec::new(),
        created_ms: 1,
    };
    let create = Command::CreateUpload {
        upload_id: "u".into(),
        upload,
    };
    // With tags and an ACL both: an upload under both wrappers, which leaves the key's
    // current object as it is until the upload completes.
    put(&s, "mp", 4, 14, &TagSet::default());
    let create = Command::tagged("bkt", "mp", &tags(2), create);
    s.execute(&Command::with_acl(
        "bkt",
        "mp",
        CannedAcl::PublicRead,
        create,
    ))
    .unwrap();
    assert_eq!(current_acl(&s, "mp"), Some(CannedAcl::Private));
    assert_eq!(current_tags(&s, "mp"), Some(TagSet::default()));
    s.execute(&Command::CompleteUpload {
        upload_id: "u".into(),
        object: NewObject::new(Sha1([3; 20]), Magic::new(13).unwrap(), 1, 0, [3; 16]),
        parts: Vec::new(),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
    })
    .unwrap();
    assert_eq!(current_acl(&s, "mp"), Some(CannedAcl::PublicRead));
    assert_eq!(current_tags(&s, "mp"), Some(tags(2)));
    // A bucket created public; private again; its ACL gone with it.
    let create = Command::CreateOwnedBucket {
        bucket: "pub".into(),
        created_ms: 1,
        owner: None,
    };
    s.execute(&Command::with_acl("pub", "", CannedAcl::PublicRead, create))
        .unwrap();
    assert_eq!(s.bucket_extras("pub").unwrap().acl, CannedAcl::PublicRead);
    s.execute(&Command::SetBucketAcl {
        bucket: "pub".into(),
        acl: CannedAcl::Private,
    })
    .unwrap();
    assert_eq!(s.bucket_extras("pub").unwrap().acl, CannedAcl::Private);
    s.execute(&Command::SetBucketAcl {
        bucket: "pub".into(),
        acl: CannedAcl::PublicRead,
    })
    .unwrap();
    s.execute(&Command::DeleteBucket {
        bucket: "pub".into(),
    })
    .unwrap();
    s.execute(&Command::CreateBucket {
        bucket: "pub".into(),
        created_ms: 2,
    })
    .unwrap();
    assert_eq!(s.bucket_extras("pub").unwrap().acl, CannedAcl::Private);
}
