//! Versioned buckets against a model: a seeded random sequence of PUTs, DELETEs (delete
//! markers) and DELETEs of one version, on a few keys whose first versions come from
//! before versioning, with versioning suspended and enabled again now and then (a
//! suspended write replaces the null version wherever it is), checked after every step: the versions of each key newest first
//! with their ids and kinds, the current version, the design's invariants, and every
//! content's reference count in FileDB (one per object version).

use std::collections::BTreeMap;

use placement::{Magic, PairId, Sha1};
use redb::ReadableDatabase;

use crate::tables::{NULL_VERSIONS, OBJECTS, VERSIONS};
use crate::versions::{VersionId, VersionRecord, Versioning, decode_current};
use crate::{Command, ContentSource, MetaError, MetaStore, NewObject, Response};

const KEYS: [&str; 3] = ["a", "b", "c"];
const STEPS: usize = 600;

/// One version in the model: its id and its content (None: a delete marker).
#[derive(Clone, Debug, PartialEq)]
struct Model {
    id: String,
    content: Option<u8>,
}

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

fn sha(n: u8) -> Sha1 {
    Sha1([n; 20])
}

fn put(s: &MetaStore, key: &str, n: u8, magic: u32) -> Response {
    s.execute(&Command::PutObject {
        bucket: "bkt".into(),
        key: key.into(),
        object: NewObject::new(sha(n), Magic::new(magic).unwrap(), 1, 0, [n; 16]),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 10,
        precondition: None,
    })
    .unwrap()
}

/// The invariants of `docs/versions.md` for one key, read from the tables themselves.
fn check_invariants(s: &MetaStore, key: &str) {
    let db = s.db();
    let txn = db.begin_read().unwrap();
    let current = txn
        .open_table(OBJECTS)
        .unwrap()
        .get(("bkt", key.as_bytes()))
        .unwrap()
        .map(|v| decode_current(v.value()).unwrap());
    let table = txn.open_table(VERSIONS).unwrap();
    let entries: Vec<(u64, VersionRecord)> = table
        .range(("bkt", key.as_bytes(), 0)..=("bkt", key.as_bytes(), u64::MAX))
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (
                u64::MAX - k.value().2,
                VersionRecord::decode(v.value()).unwrap(),
            )
        })
        .collect();
    for w in entries.windows(2) {
        assert!(w[0].0 > w[1].0, "{key}: versions newest first");
    }
    for (number, entry) in &entries {
        assert_eq!(*number, entry.stamp().number, "{key}: keyed by its number");
    }
    // Invariant 3, and the null index names exactly the null entry of `versions`.
    let nulls: Vec<u64> = entries
        .iter()
        .filter(|(_, e)| e.stamp().null)
        .map(|(n, _)| *n)
        .collect();
    let current_null = current.as_ref().is_some_and(|(_, stamp)| stamp.null);
    assert!(
        nulls.len() + usize::from(current_null) <= 1,
        "{key}: invariant 3, one null version at most"
    );
    let indexed = txn
        .open_table(NULL_VERSIONS)
        .unwrap()
        .get(("bkt", key.as_bytes()))
        .unwrap()
        .map(|v| v.value());
    assert_eq!(indexed, nulls.first().copied(), "{key}: the null index");
    match (&current, entries.first()) {
        (Some((_, stamp)), Some((newest, _))) => {
            assert!(stamp.number > *newest, "{key}: invariant 1")
        }
        (None, Some((_, VersionRecord::Object { .. }))) => {
            panic!("{key}: invariant 2, a noncurrent object is the newest version")
        }
        _ => {}
    }
}

#[test]
fn versions_follow_the_model_through_random_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.execute(&Command::CreateBucket {
        bucket: "bkt".into(),
        created_ms: 1,
    })
    .unwrap();
    let mut model: BTreeMap<&str, Vec<Model>> = KEYS.iter().map(|k| (*k, Vec::new())).collect();
    // The first two keys have an object from before versioning: the null version.
    for (i, key) in KEYS[..2].iter().enumerate() {
        assert!(matches!(
            put(&s, key, i as u8 + 1, 7),
            Response::ObjectPut { .. }
        ));
        model.get_mut(key).unwrap().push(Model {
            id: "null".into(),
            content: Some(i as u8 + 1),
        });
    }
    s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Enabled,
    })
    .unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut puts, mut markers, mut removed, mut missing) = (0, 0, 0, 0);
    let (mut state, mut suspended_writes) = (Versioning::Enabled, 0);
    for step in 0..STEPS {
        if rng.below(30) == 0 {
            // Suspend, or enable again: the versions stay as they are.
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
        // A suspended bucket's write replaces the null version, wherever it is.
        let suspended = state == Versioning::Suspended;
        match rng.below(10) {
            0..=4 => {
                let n = rng.below(6) as u8 + 1;
                let magic = (rng.next() as u32).max(1);
                let Response::VersionStored { version_id, .. } = put(&s, key, n, magic) else {
                    panic!("step {step}: a versioned PUT answers its version");
                };
                if suspended {
                    assert_eq!(version_id, "null", "step {step}");
                    versions.retain(|m| m.id != "null");
                    suspended_writes += 1;
                }
                versions.insert(
                    0,
                    Model {
                        id: version_id,
                        content: Some(n),
                    },
                );
                puts += 1;
            }
            5..=6 => {
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
                    assert_eq!(version_id, "null", "step {step}");
                    versions.retain(|m| m.id != "null");
                    suspended_writes += 1;
                }
                versions.insert(
                    0,
                    Model {
                        id: version_id,
                        content: None,
                    },
                );
                markers += 1;
            }
            _ => {
                let pick = if versions.is_empty() || rng.below(8) == 0 {
                    None
                } else {
                    Some(rng.below(versions.len() as u64) as usize)
                };
                let id = match pick {
                    Some(i) => versions[i].id.clone(),
                    None => format!("{:016x}{:08x}", rng.below(1000), 1),
                };
                let r = s.execute(&Command::DeleteVersion {
                    bucket: "bkt".into(),
                    key: key.into(),
                    version: VersionId::parse(&id).unwrap(),
                    now_secs: 12,
                    bypass_governance: false,
                });
                match pick {
                    Some(i) => {
                        let gone = versions.remove(i);
                        assert_eq!(
                            r,
                            Ok(Response::VersionDeleted {
                                version_id: gone.id,
                                marker: gone.content.is_none(),
                            }),
                            "step {step}"
                        );
                        removed += 1;
                    }
                    None => {
                        assert_eq!(r, Err(MetaError::NoSuchVersion), "step {step}: {id}");
                        missing += 1;
                    }
                }
            }
        }
        // The key's versions, newest first, as the model has them.
        let got = s.versions_of("bkt", key, 10_000).unwrap();
        let want = &model[key];
        assert_eq!(got.len(), want.len(), "step {step} {key}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.id(), w.id, "step {step} {key} #{i}");
            assert_eq!(
                g.record.as_ref().map(|r| r.sha1),
                w.content.map(sha),
                "step {step}"
            );
            assert_eq!(g.latest, i == 0, "step {step} {key} #{i} latest");
            let by_id = s
                .version("bkt", key, VersionId::parse(&w.id).unwrap())
                .unwrap()
                .unwrap_or_else(|| panic!("step {step}: {} not found by id", w.id));
            assert_eq!(&by_id, g);
        }
        let current = s.object("bkt", key).unwrap();
        let want_current = want.first().and_then(|m| m.content);
        assert_eq!(
            current.map(|r| r.sha1),
            want_current.map(sha),
            "step {step}"
        );
        check_invariants(&s, key);
        // One reference per object version, none for markers.
        for n in 1..=6u8 {
            let versions_of_n = model
                .values()
                .flatten()
                .filter(|m| m.content == Some(n))
                .count() as u32;
            let refs = s.file(&sha(n)).unwrap().map_or(0, |f| f.refs);
            assert_eq!(
                refs, versions_of_n,
                "step {step}: references of content {n}"
            );
        }
    }
    assert!(
        puts > 100 && markers > 50 && removed > 50 && missing > 5 && suspended_writes > 30,
        "{puts} {markers} {removed} {missing} {suspended_writes}"
    );

    // A bucket with versions left is not empty; once every version is gone, it deletes.
    let delete = Command::DeleteBucket {
        bucket: "bkt".into(),
    };
    assert_eq!(s.execute(&delete), Err(MetaError::BucketNotEmpty));
    for key in KEYS {
        for v in model[key].clone() {
            s.execute(&Command::DeleteVersion {
                bucket: "bkt".into(),
                key: key.into(),
                version: VersionId::parse(&v.id).unwrap(),
                now_secs: 13,
                bypass_governance: false,
            })
            .unwrap();
        }
    }
    for n in 1..=6u8 {
        assert_eq!(s.file(&sha(n)).unwrap().map_or(0, |f| f.refs), 0);
    }
    s.execute(&delete).unwrap();
}

#[test]
fn never_back_to_unversioned_and_many_key_deletes_wait_for_their_step() {
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.execute(&Command::CreateBucket {
        bucket: "bkt".into(),
        created_ms: 1,
    })
    .unwrap();
    let r = s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Unversioned,
    });
    assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
    let r = s.execute(&Command::SetBucketVersioning {
        bucket: "nope".into(),
        state: Versioning::Enabled,
    });
    assert_eq!(r, Err(MetaError::NoSuchBucket));
    s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Enabled,
    })
    .unwrap();
    assert_eq!(
        s.bucket("bkt").unwrap().unwrap().versioning,
        Versioning::Enabled
    );
    let r = s.execute(&Command::DeleteObjects {
        bucket: "bkt".into(),
        keys: vec!["a".into()],
        now_secs: 1,
    });
    assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
    for cmd in [
        Command::SetBucketVersioning {
            bucket: "bkt".into(),
            state: Versioning::Enabled,
        },
        Command::DeleteVersion {
            bucket: "bkt".into(),
            key: "k".into(),
            version: VersionId::Null,
            now_secs: 1,
            bypass_governance: false,
        },
    ] {
        assert_eq!(cmd.format_version(), 4);
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    }
    for r in [
        Response::VersionStored {
            seq: 3,
            version_id: "x".into(),
        },
        Response::MarkerAdded {
            version_id: "y".into(),
        },
        Response::VersionDeleted {
            version_id: "z".into(),
            marker: true,
        },
    ] {
        let bytes = postcard::to_stdvec(&r).unwrap();
        assert_eq!(postcard::from_bytes::<Response>(&bytes).unwrap(), r);
    }
    let e = postcard::to_stdvec(&MetaError::NoSuchVersion).unwrap();
    assert_eq!(
        postcard::from_bytes::<MetaError>(&e).unwrap(),
        MetaError::NoSuchVersion
    );
}

fn put_at(s: &MetaStore, key: &str, n: u8, magic: u32, now_secs: u64) -> Response {
    let mut object = NewObject::new(sha(n), Magic::new(magic).unwrap(), 1, 0, [n; 16]);
    object.created_ms = now_secs * 1000;
    s.execute(&Command::PutObject {
        bucket: "bkt".into(),
        key: key.into(),
        object,
        source: ContentSource::Stored(PairId(0)),
        now_secs,
        precondition: None,
    })
    .unwrap()
}

fn id_of(r: Response) -> String {
    match r {
        Response::VersionStored { version_id, .. } | Response::MarkerAdded { version_id } => {
            version_id
        }
        other => panic!("{other:?}"),
    }
}

/// Lifecycle on a versioned bucket: expiring a current version adds a delete marker,
/// noncurrent versions go after NoncurrentDays beyond the newest kept, a lone delete
/// marker goes, and each removal releases its content once; the rules' version actions
/// survive the record's encoding.
#[test]
fn lifecycle_expires_versions_by_the_rules_in_force() {
    use crate::lifecycle::{
        Expiration, LifecycleRecord, LifecycleRule, RuleFilter, VersionActions,
    };
    const DAY: u64 = 10;
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.execute(&Command::CreateBucket {
        bucket: "bkt".into(),
        created_ms: 1,
    })
    .unwrap();
    s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Enabled,
    })
    .unwrap();
    let versions_rule = LifecycleRule {
        id: "versions".into(),
        enabled: true,
        filter: RuleFilter::Prefix("v/".into()),
        expiration: None,
        abort_upload_days: None,
        versions: VersionActions {
            noncurrent_days: Some(1),
            newer_noncurrent: Some(1),
            expired_object_delete_marker: true,
        },
    };
    let current_rule = LifecycleRule {
        id: "current".into(),
        enabled: true,
        filter: RuleFilter::Prefix("exp/".into()),
        expiration: Some(Expiration::Days(1)),
        abort_upload_days: None,
        versions: VersionActions::default(),
    };
    let rules = vec![versions_rule, current_rule];
    let set = Command::set_lifecycle("bkt".into(), Some(rules.clone()));
    assert!(matches!(
        set,
        Command::SetBucketLifecycleWithVersions { .. }
    ));
    s.execute(&set).unwrap();
    assert_eq!(s.lifecycle("bkt").unwrap().unwrap().rules, rules);

    // v/k: three versions; v1 noncurrent since t=20, v2 since t=30.
    let v1 = id_of(put_at(&s, "v/k", 1, 11, 10));
    let v2 = id_of(put_at(&s, "v/k", 2, 12, 20));
    let v3 = id_of(put_at(&s, "v/k", 3, 13, 30));
    let number = |id: &str| match VersionId::parse(id).unwrap() {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => panic!("numbered"),
    };
    let expire = |entries: Vec<(String, u64)>, now_secs| match s
        .execute(&Command::ExpireVersions {
            bucket: "bkt".into(),
            versions: entries,
            resume_after: Some(("v/k".into(), 1)),
            day_secs: DAY,
            now_secs,
        })
        .unwrap()
    {
        Response::ObjectsDeleted(d) => d,
        other => panic!("{other:?}"),
    };
    let both = vec![
        ("v/k".to_string(), number(&v1)),
        ("v/k".to_string(), number(&v2)),
    ];
    // Not yet due at t=39 (day of t=20 plus one, rounded up: t=40).
    assert_eq!(expire(both.clone(), 39), [false, false]);
    // At t=45 v1 is due and beyond the one newest kept; v2 is the one kept.
    assert_eq!(expire(both.clone(), 45), [true, false]);
    assert_eq!(s.file(&sha(1)).unwrap(), None, "v1's content released");
    assert_eq!(expire(both, 1000), [false, false], "v1 gone, v2 kept");
    assert_eq!(
        s.lifecycle("bkt").unwrap().unwrap().versions_resume_after,
        Some(("v/k".to_string(), 1))
    );
    let left: Vec<String> = s
        .versions_of("bkt", "v/k", 10)
        .unwrap()
        .iter()
        .map(|v| v.id())
        .collect();
    assert_eq!(left, [v3.clone(), v2.clone()]);

    // A lone delete marker goes; one with a version under it stays.
    let marker = id_of(
        s.execute(&Command::DeleteObject {
            bucket: "bkt".into(),
            key: "v/k".into(),
            now_secs: 50,
        })
        .unwrap(),
    );
    assert_eq!(expire(vec![("v/k".into(), number(&marker))], 1000), [false]);
    for id in [&v3, &v2] {
        s.execute(&Command::DeleteVersion {
            bucket: "bkt".into(),
            key: "v/k".into(),
            version: VersionId::parse(id).unwrap(),
            now_secs: 60,
            bypass_governance: false,
        })
        .unwrap();
    }
    assert_eq!(expire(vec![("v/k".into(), number(&marker))], 1000), [true]);
    assert!(s.versions_of("bkt", "v/k", 10).unwrap().is_empty());

    // Expiring a current version adds a marker on top; the version stays.
    let Response::VersionStored { seq, version_id } = put_at(&s, "exp/a", 4, 14, 10) else {
        panic!("versioned PUT");
    };
    let r = s
        .execute(&Command::ExpireObjects {
            bucket: "bkt".into(),
            objects: vec![("exp/a".into(), seq)],
            resume_after: None,
            day_secs: DAY,
            now_secs: 1000,
        })
        .unwrap();
    assert_eq!(r, Response::ObjectsDeleted(vec![true]));
    let after = s.versions_of("bkt", "exp/a", 10).unwrap();
    assert_eq!(after.len(), 2);
    assert!(
        after[0].record.is_none() && after[0].latest,
        "a current marker"
    );
    assert_eq!(after[1].id(), version_id);
    assert_eq!(s.file(&sha(4)).unwrap().map(|f| f.refs), Some(1));
    check_invariants(&s, "exp/a");

    // The record round-trips through both formats.
    let plain = LifecycleRecord {
        rules: vec![rules[1].clone()],
        resume_after: Some("k".into()),
        versions_resume_after: None,
    };
    let bytes = plain.encode().unwrap();
    assert_eq!(bytes[0], 1, "no version action: the format of before");
    assert_eq!(LifecycleRecord::decode(&bytes).unwrap(), plain);
    let full = LifecycleRecord {
        rules,
        resume_after: None,
        versions_resume_after: Some(("x".into(), 7)),
    };
    let bytes = full.encode().unwrap();
    assert_eq!(bytes[0], 2);
    assert_eq!(LifecycleRecord::decode(&bytes).unwrap(), full);
    assert!(matches!(
        Command::set_lifecycle("b".into(), Some(plain.rules.clone())),
        Command::SetBucketLifecycle { .. }
    ));
    for cmd in [
        Command::set_lifecycle("b".into(), Some(full.rules.clone())),
        Command::ExpireVersions {
            bucket: "b".into(),
            versions: vec![("k".into(), 3)],
            resume_after: Some(("k".into(), 3)),
            day_secs: 1,
            now_secs: 2,
        },
    ] {
        assert_eq!(cmd.format_version(), 4);
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    }
}

/// Object lock: a locked bucket's versions get its default retention; no command removes a
/// version while its lock holds (GOVERNANCE yields to the bypass, COMPLIANCE and legal hold
/// to nothing), retention changes follow S3's rules, and versioning stays Enabled.
#[test]
fn locked_versions_survive_every_delete_path() {
    use crate::command::LockChange;
    use crate::versions::{
        DefaultRetention, LockConfig, LockMode, ObjectLock, Retention, RetentionPeriod,
    };
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.execute(&Command::CreateLockedBucket {
        bucket: "bkt".into(),
        created_ms: 1,
        owner: None,
    })
    .unwrap();
    let bucket = s.bucket("bkt").unwrap().unwrap();
    assert_eq!(bucket.versioning, Versioning::Enabled);
    let r = s.execute(&Command::SetBucketVersioning {
        bucket: "bkt".into(),
        state: Versioning::Suspended,
    });
    assert!(matches!(r, Err(MetaError::InvalidBucketState(_))), "{r:?}");
    s.execute(&Command::SetObjectLockConfig {
        bucket: "bkt".into(),
        config: LockConfig {
            default_retention: Some(DefaultRetention {
                mode: LockMode::Governance,
                period: RetentionPeriod::Days(1),
            }),
        },
    })
    .unwrap();
    // now_secs 10: the default retention runs to 10 s + 1 day.
    let gov = id_of(put_at(&s, "k", 1, 21, 10));
    let lock_of = |id: &str| {
        s.version("bkt", "k", VersionId::parse(id).unwrap())
            .unwrap()
            .unwrap()
            .stamp
            .lock
    };
    assert_eq!(
        lock_of(&gov).retention,
        Some(Retention {
            mode: LockMode::Governance,
            until_ms: 10_000 + 86_400_000,
        })
    );
    let delete = |id: &str, bypass: bool, now_secs: u64| {
        s.execute(&Command::DeleteVersion {
            bucket: "bkt".into(),
            key: "k".into(),
            version: VersionId::parse(id).unwrap(),
            now_secs,
            bypass_governance: bypass,
        })
    };
    assert_eq!(delete(&gov, false, 20), Err(MetaError::ObjectLocked));
    // A COMPLIANCE version written under `Locked`, on top.
    let mut object = NewObject::new(sha(2), Magic::new(22).unwrap(), 1, 0, [2; 16]);
    object.created_ms = 20_000;
    let compliance = Retention {
        mode: LockMode::Compliance,
        until_ms: 500_000,
    };
    let r = s
        .execute(&Command::Locked {
            bucket: "bkt".into(),
            key: "k".into(),
            change: LockChange {
                retention: Some(Some(compliance)),
                legal_hold: None,
            },
            command: Box::new(Command::PutObject {
                bucket: "bkt".into(),
                key: "k".into(),
                object,
                source: ContentSource::Stored(PairId(0)),
                now_secs: 20,
                precondition: None,
            }),
        })
        .unwrap();
    let comp = id_of(r);
    assert_eq!(lock_of(&comp).retention, Some(compliance));
    assert_eq!(delete(&comp, true, 30), Err(MetaError::ObjectLocked));
    // A DELETE without an id adds a marker: allowed, nothing released.
    let marker = id_of(
        s.execute(&Command::DeleteObject {
            bucket: "bkt".into(),
            key: "k".into(),
            now_secs: 30,
        })
        .unwrap(),
    );
    // Retention changes: COMPLIANCE cannot be shortened, GOVERNANCE only with the bypass.
    let set = |id: &str, change: LockChange, bypass: bool| {
        s.execute(&Command::SetObjectLock {
            bucket: "bkt".into(),
            key: "k".into(),
            version: Some(VersionId::parse(id).unwrap()),
            change,
            bypass_governance: bypass,
            now_ms: 40_000,
        })
    };
    let shorten = LockChange {
        retention: Some(Some(Retention {
            mode: LockMode::Compliance,
            until_ms: 100_000,
        })),
        legal_hold: None,
    };
    assert_eq!(set(&comp, shorten, true), Err(MetaError::ObjectLocked));
    let remove = LockChange {
        retention: Some(None),
        legal_hold: None,
    };
    assert_eq!(set(&gov, remove, false), Err(MetaError::ObjectLocked));
    let hold = LockChange {
        retention: None,
        legal_hold: Some(true),
    };
    set(&gov, hold, false).unwrap();
    set(&gov, remove, true).unwrap();
    assert_eq!(
        lock_of(&gov),
        ObjectLock {
            retention: None,
            legal_hold: true
        }
    );
    assert_eq!(
        delete(&gov, true, 50),
        Err(MetaError::ObjectLocked),
        "legal hold"
    );
    // Lifecycle skips locked versions, whatever the rules say.
    let number = |id: &str| match VersionId::parse(id).unwrap() {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => panic!("numbered"),
    };
    let rule = crate::lifecycle::LifecycleRule {
        id: "all".into(),
        enabled: true,
        filter: crate::lifecycle::RuleFilter::All,
        expiration: None,
        abort_upload_days: None,
        versions: crate::lifecycle::VersionActions {
            noncurrent_days: Some(1),
            newer_noncurrent: None,
            expired_object_delete_marker: true,
        },
    };
    s.execute(&Command::set_lifecycle("bkt".into(), Some(vec![rule])))
        .unwrap();
    let r = s
        .execute(&Command::ExpireVersions {
            bucket: "bkt".into(),
            versions: vec![("k".into(), number(&gov)), ("k".into(), number(&comp))],
            resume_after: None,
            day_secs: 1,
            now_secs: 400,
        })
        .unwrap();
    assert_eq!(r, Response::ObjectsDeleted(vec![false, false]));
    // Once the hold is released and the retention has passed, the version goes.
    set(
        &gov,
        LockChange {
            retention: None,
            legal_hold: Some(false),
        },
        false,
    )
    .unwrap();
    delete(&gov, false, 60).unwrap();
    assert_eq!(delete(&comp, false, 499), Err(MetaError::ObjectLocked));
    delete(&comp, false, 500).unwrap();
    delete(&marker, false, 500).unwrap();
    assert!(s.versions_of("bkt", "k", 10).unwrap().is_empty());
    for n in [1u8, 2] {
        assert_eq!(s.file(&sha(n)).unwrap(), None, "content {n} released once");
    }
    for cmd in [
        Command::CreateLockedBucket {
            bucket: "b".into(),
            created_ms: 1,
            owner: Some("k".into()),
        },
        Command::SetObjectLock {
            bucket: "b".into(),
            key: "k".into(),
            version: None,
            change: shorten,
            bypass_governance: true,
            now_ms: 3,
        },
    ] {
        assert_eq!(cmd.format_version(), 4);
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    }
}
