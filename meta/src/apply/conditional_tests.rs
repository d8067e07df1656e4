//! Write conditions checked inside the command (`Conditional`, `DeleteObjectsMatching`,
//! `If-Match: *` on PutObject): a condition that fails changes nothing, references
//! included; one that holds lets the write through exactly once.

use placement::{Magic, PairId, Sha1};

use crate::{
    Command, ContentSource, DeleteOutcome, MetaError, MetaStore, NewObject, PartRecord, Response,
    UploadRecord, WritePrecondition, cluster_version,
};

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    store
        .execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
    (dir, store)
}

fn sha(n: u8) -> Sha1 {
    Sha1([n; 20])
}

/// An object whose content is `sha(n)` and whose ETag is `etag(n)`.
fn obj(n: u8) -> NewObject {
    NewObject::new(
        sha(n),
        Magic::new(u32::from(n) + 100).unwrap(),
        1,
        0,
        [n; 16],
    )
}

fn etag(n: u8) -> String {
    format!("\"{}\"", hex::encode([n; 16]))
}

fn put(
    s: &MetaStore,
    key: &str,
    n: u8,
    precondition: Option<WritePrecondition>,
) -> Result<Response, MetaError> {
    s.execute(&Command::PutObject {
        bucket: "b".into(),
        key: key.into(),
        object: obj(n),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 5,
        precondition,
    })
}

fn refs(s: &MetaStore, n: u8) -> Option<u32> {
    s.file(&sha(n)).unwrap().map(|f| f.refs)
}

fn conditional(key: &str, precondition: WritePrecondition, command: Command) -> Command {
    Command::Conditional {
        bucket: "b".into(),
        key: key.into(),
        precondition,
        command: Box::new(command),
    }
}

fn delete(key: &str) -> Command {
    Command::DeleteObject {
        bucket: "b".into(),
        key: key.into(),
        now_secs: 6,
    }
}

#[test]
fn if_match_any_on_put_needs_the_key() {
    let (_d, s) = store();
    assert_eq!(
        put(&s, "k", 1, Some(WritePrecondition::MatchAny)),
        Err(MetaError::NoSuchKey)
    );
    assert_eq!(refs(&s, 1), None, "a refused write references nothing");
    put(&s, "k", 1, None).unwrap();
    put(&s, "k", 2, Some(WritePrecondition::MatchAny)).unwrap();
    assert_eq!(s.object("b", "k").unwrap().unwrap().sha1, sha(2));
    assert_eq!(refs(&s, 2), Some(1));
}

#[test]
fn a_conditional_delete_removes_only_the_object_it_names() {
    let (_d, s) = store();
    put(&s, "k", 1, None).unwrap();
    let wrong = conditional("k", WritePrecondition::Match(etag(9)), delete("k"));
    assert_eq!(s.execute(&wrong), Err(MetaError::PreconditionFailed));
    assert_eq!(s.object("b", "k").unwrap().unwrap().sha1, sha(1));
    assert_eq!(refs(&s, 1), Some(1));

    let right = conditional("k", WritePrecondition::Match(etag(1)), delete("k"));
    assert!(matches!(
        s.execute(&right),
        Ok(Response::ObjectDeleted {
            removed: Some(_),
            ..
        })
    ));
    assert!(s.object("b", "k").unwrap().is_none());
    assert!(s.deleting(&sha(1)).unwrap().is_some(), "released once");
    // Gone now: If-Match on a missing key is NoSuchKey, for a tag or for `*`.
    assert_eq!(s.execute(&right), Err(MetaError::NoSuchKey));
    let any = conditional("k", WritePrecondition::MatchAny, delete("k"));
    assert_eq!(s.execute(&any), Err(MetaError::NoSuchKey));
}

#[test]
fn a_conditional_complete_leaves_the_upload_when_refused() {
    let (_d, s) = store();
    put(&s, "k", 1, None).unwrap();
    s.execute(&Command::CreateUpload {
        upload_id: "u".into(),
        upload: UploadRecord {
            bucket: "b".into(),
            key: "k".into(),
            content_type: None,
            user_meta: Vec::new(),
            headers: Vec::new(),
            created_ms: 1,
        },
    })
    .unwrap();
    s.execute(&Command::PutPart {
        upload_id: "u".into(),
        part_number: 1,
        part: PartRecord {
            sha1: sha(3),
            magic: Magic::new(3).unwrap(),
            size_bytes: 1,
            md5: [3; 16],
            crc32: 0,
            created_ms: 1,
        },
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
    })
    .unwrap();
    let complete = Command::CompleteUpload {
        upload_id: "u".into(),
        object: obj(4),
        parts: vec![(1, sha(3))],
        source: ContentSource::Stored(PairId(0)),
        now_secs: 2,
    };
    let refused = conditional("k", WritePrecondition::NoneMatchAny, complete.clone());
    assert_eq!(s.execute(&refused), Err(MetaError::PreconditionFailed));
    assert!(s.upload("u").unwrap().is_some(), "the upload stays");
    assert_eq!(s.parts("u").unwrap().len(), 1);
    assert_eq!(refs(&s, 4), None, "the completed content is not referenced");
    assert_eq!(refs(&s, 3), Some(1));

    // A condition on another key than the upload's is a bug of the caller: refused.
    let elsewhere = conditional("other", WritePrecondition::NoneMatchAny, complete.clone());
    assert!(matches!(
        s.execute(&elsewhere),
        Err(MetaError::Unexpected(_))
    ));

    let swap = conditional("k", WritePrecondition::Match(etag(1)), complete);
    assert!(matches!(s.execute(&swap), Ok(Response::ObjectPut { .. })));
    assert_eq!(s.object("b", "k").unwrap().unwrap().sha1, sha(4));
    assert!(s.upload("u").unwrap().is_none());
    assert_eq!(refs(&s, 4), Some(1));
    assert!(
        s.deleting(&sha(1)).unwrap().is_some(),
        "the replaced content released"
    );
}

#[test]
fn a_conditional_copy_checks_the_destination() {
    let (_d, s) = store();
    put(&s, "src", 1, None).unwrap();
    put(&s, "dst", 2, None).unwrap();
    let from_seq = s.object("b", "src").unwrap().unwrap().seq;
    let mut copied = obj(1);
    copied.magic = Magic::new(77).unwrap();
    let copy = Command::CopyObject {
        bucket: "b".into(),
        key: "dst".into(),
        object: copied,
        from_bucket: "b".into(),
        from_key: "src".into(),
        from_seq,
        now_secs: 3,
    };
    let refused = conditional("dst", WritePrecondition::NoneMatchAny, copy.clone());
    assert_eq!(s.execute(&refused), Err(MetaError::PreconditionFailed));
    assert_eq!(refs(&s, 1), Some(1));
    assert_eq!(s.object("b", "dst").unwrap().unwrap().sha1, sha(2));
    let swap = conditional("dst", WritePrecondition::Match(etag(2)), copy);
    assert!(matches!(s.execute(&swap), Ok(Response::ObjectPut { .. })));
    assert_eq!(refs(&s, 1), Some(2));
    assert_eq!(s.object("b", "dst").unwrap().unwrap().sha1, sha(1));
}

#[test]
fn only_the_writes_s3_lets_carry_a_condition_are_guarded() {
    let (_d, s) = store();
    put(&s, "k", 1, None).unwrap();
    let nested = conditional(
        "k",
        WritePrecondition::MatchAny,
        conditional("k", WritePrecondition::MatchAny, delete("k")),
    );
    assert!(matches!(s.execute(&nested), Err(MetaError::Unexpected(_))));
    let bucket = conditional(
        "k",
        WritePrecondition::MatchAny,
        Command::DeleteBucket { bucket: "b".into() },
    );
    assert!(matches!(s.execute(&bucket), Err(MetaError::Unexpected(_))));
    assert!(s.object("b", "k").unwrap().is_some());
    let missing_bucket = Command::Conditional {
        bucket: "nope".into(),
        key: "k".into(),
        precondition: WritePrecondition::MatchAny,
        command: Box::new(Command::DeleteObject {
            bucket: "nope".into(),
            key: "k".into(),
            now_secs: 1,
        }),
    };
    assert_eq!(s.execute(&missing_bucket), Err(MetaError::NoSuchBucket));
}

#[test]
fn delete_objects_matching_answers_each_key() {
    let (_d, s) = store();
    put(&s, "a", 1, None).unwrap();
    put(&s, "b", 2, None).unwrap();
    put(&s, "c", 3, None).unwrap();
    let cmd = Command::DeleteObjectsMatching {
        bucket: "b".into(),
        objects: vec![
            ("a".into(), Some(WritePrecondition::Match(etag(1)))),
            ("b".into(), Some(WritePrecondition::Match(etag(9)))),
            ("c".into(), None),
            ("d".into(), None),
            ("e".into(), Some(WritePrecondition::MatchAny)),
        ],
        now_secs: 4,
    };
    assert_eq!(
        s.execute(&cmd).unwrap(),
        Response::ObjectsDeletedMatching(vec![
            DeleteOutcome::Deleted,
            DeleteOutcome::PreconditionFailed,
            DeleteOutcome::Deleted,
            DeleteOutcome::Absent,
            DeleteOutcome::NoSuchKey,
        ])
    );
    assert!(s.object("b", "a").unwrap().is_none());
    assert_eq!(s.object("b", "b").unwrap().unwrap().sha1, sha(2));
    assert!(s.object("b", "c").unwrap().is_none());
    assert!(s.deleting(&sha(1)).unwrap().is_some());
    assert_eq!(refs(&s, 2), Some(1));

    let too_many = Command::DeleteObjectsMatching {
        bucket: "b".into(),
        objects: (0..=super::DELETE_KEYS_MAX)
            .map(|i| (format!("k{i}"), None))
            .collect(),
        now_secs: 4,
    };
    assert!(matches!(
        s.execute(&too_many),
        Err(MetaError::Unexpected(_))
    ));
}

/// The new commands need format 3; the old ones keep their encoding, the new values
/// round-trip through their own types.
#[test]
fn conditions_are_format_three_and_round_trip() {
    let guarded = conditional("k", WritePrecondition::Match(etag(1)), delete("k"));
    let matching = Command::DeleteObjectsMatching {
        bucket: "b".into(),
        objects: vec![("k".into(), Some(WritePrecondition::MatchAny))],
        now_secs: 1,
    };
    let put_any = Command::PutObject {
        bucket: "b".into(),
        key: "k".into(),
        object: obj(1),
        source: ContentSource::Existing,
        now_secs: 1,
        precondition: Some(WritePrecondition::MatchAny),
    };
    for cmd in [&guarded, &matching, &put_any] {
        assert_eq!(cmd.format_version(), 3, "{cmd:?}");
        assert!(cmd.format_version() <= cluster_version::FORMAT_VERSION);
        let bytes = postcard::to_stdvec(cmd).unwrap();
        assert_eq!(&postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    }
    let put_match = Command::PutObject {
        bucket: "b".into(),
        key: "k".into(),
        object: obj(1),
        source: ContentSource::Existing,
        now_secs: 1,
        precondition: Some(WritePrecondition::Match(etag(1))),
    };
    assert_eq!(put_match.format_version(), 1);
    assert_eq!(
        postcard::to_stdvec(&WritePrecondition::Match("x".into())).unwrap()[0],
        1,
        "Match keeps its tag"
    );
    let response = Response::ObjectsDeletedMatching(vec![
        DeleteOutcome::Deleted,
        DeleteOutcome::Absent,
        DeleteOutcome::PreconditionFailed,
        DeleteOutcome::NoSuchKey,
    ]);
    let bytes = postcard::to_stdvec(&response).unwrap();
    assert_eq!(postcard::from_bytes::<Response>(&bytes).unwrap(), response);
}
