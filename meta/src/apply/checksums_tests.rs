//! Multipart checksums beside the upload, part and object records: kept by the format-4
//! commands, carried to the completed object, and gone with whatever they describe.

use placement::{Magic, PairId, Sha1};

use crate::checksums::{ChecksumType, PartChecksums, UploadChecksum};
use crate::{
    Checksum, Command, ContentSource, MetaStore, NewObject, PartRecord, Response, UploadRecord,
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

fn upload() -> UploadRecord {
    UploadRecord {
        bucket: "b".into(),
        key: "k".into(),
        content_type: None,
        user_meta: Vec::new(),
        headers: Vec::new(),
        created_ms: 1,
    }
}

fn part(n: u8) -> PartRecord {
    PartRecord {
        sha1: sha(n),
        magic: Magic::new(u32::from(n) + 10).unwrap(),
        size_bytes: 1,
        md5: [n; 16],
        crc32: 0,
        created_ms: 1,
    }
}

fn crc(v: &str) -> Checksum {
    Checksum {
        algorithm: "crc32c".into(),
        value: v.into(),
    }
}

fn create(s: &MetaStore, id: &str) {
    let cmd = Command::CreateUploadWithChecksum {
        upload_id: id.into(),
        upload: upload(),
        checksum: UploadChecksum {
            algorithm: "crc32c".into(),
            kind: ChecksumType::Composite,
        },
    };
    assert_eq!(cmd.format_version(), 4);
    assert_eq!(s.execute(&cmd).unwrap(), Response::Done);
}

fn put(s: &MetaStore, id: &str, number: u32, n: u8, checksum: Option<Checksum>) {
    let cmd = match checksum {
        Some(checksum) => Command::PutPartWithChecksum {
            upload_id: id.into(),
            part_number: number,
            part: part(n),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
            checksum,
        },
        None => Command::PutPart {
            upload_id: id.into(),
            part_number: number,
            part: part(n),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
        },
    };
    assert_eq!(s.execute(&cmd).unwrap(), Response::PartPut);
}

fn complete(s: &MetaStore, id: &str, object: &NewObject, parts: &[(u32, u8)]) {
    s.execute(&Command::CompleteUpload {
        upload_id: id.into(),
        object: object.clone(),
        parts: parts.iter().map(|(n, p)| (*n, sha(*p))).collect(),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 2,
    })
    .unwrap();
}

#[test]
fn part_checksums_follow_the_upload_into_the_object_and_leave_with_it() {
    let (_d, s) = store();
    create(&s, "u1");
    put(&s, "u1", 1, 1, Some(crc("AAAAAQ==")));
    put(&s, "u1", 2, 2, Some(crc("AAAAAg==")));
    // A part put again without a checksum keeps none of the one it replaces.
    put(&s, "u1", 3, 3, Some(crc("AAAAAw==")));
    put(&s, "u1", 3, 4, None);
    let found = s.upload_checksums("u1").unwrap();
    assert_eq!(found.declared.unwrap().kind, ChecksumType::Composite);
    assert_eq!(found.parts.keys().copied().collect::<Vec<_>>(), [1, 2]);

    let mut object = NewObject::new(sha(9), Magic::new(99).unwrap(), 2, 0, [9; 16]);
    object.checksum = Some(crc("abcd-2"));
    object.part_sizes = vec![1, 1];
    complete(&s, "u1", &object, &[(1, 1), (2, 2)]);
    assert_eq!(
        s.object_part_checksums(&object.sha1, object.magic).unwrap(),
        Some(PartChecksums {
            algorithm: "crc32c".into(),
            parts: vec!["AAAAAQ==".into(), "AAAAAg==".into()],
        })
    );
    assert_eq!(s.upload_checksums("u1").unwrap(), Default::default());
    assert_eq!(
        s.object("b", "k").unwrap().unwrap().checksum,
        Some(crc("abcd-2"))
    );

    // Deleting the object releases its reference, and its part checksums with it.
    s.execute(&Command::DeleteObject {
        bucket: "b".into(),
        key: "k".into(),
        now_secs: 3,
    })
    .unwrap();
    assert_eq!(
        s.object_part_checksums(&object.sha1, object.magic).unwrap(),
        None
    );
}

#[test]
fn an_object_keeps_part_checksums_only_when_every_part_has_one_and_aborts_drop_them() {
    let (_d, s) = store();
    create(&s, "u1");
    put(&s, "u1", 1, 1, Some(crc("AAAAAQ==")));
    put(&s, "u1", 2, 2, None);
    let object = NewObject::new(sha(9), Magic::new(99).unwrap(), 2, 0, [9; 16]);
    complete(&s, "u1", &object, &[(1, 1), (2, 2)]);
    assert_eq!(
        s.object_part_checksums(&object.sha1, object.magic).unwrap(),
        None
    );

    create(&s, "u2");
    put(&s, "u2", 1, 5, Some(crc("AAAAAQ==")));
    s.execute(&Command::AbortUpload {
        upload_id: "u2".into(),
        now_secs: 3,
    })
    .unwrap();
    assert_eq!(s.upload_checksums("u2").unwrap(), Default::default());
}

#[test]
fn the_new_commands_round_trip_and_keep_the_old_ones_in_place() {
    let c = Command::PutPartWithChecksum {
        upload_id: "u".into(),
        part_number: 7,
        part: part(1),
        source: ContentSource::Existing,
        now_secs: 5,
        checksum: crc("AAAAAQ=="),
    };
    let bytes = postcard::to_stdvec(&c).unwrap();
    assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), c);
    let c = Command::CreateUploadWithChecksum {
        upload_id: "u".into(),
        upload: upload(),
        checksum: UploadChecksum {
            algorithm: "crc64nvme".into(),
            kind: ChecksumType::FullObject,
        },
    };
    let bytes = postcard::to_stdvec(&c).unwrap();
    assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), c);
    assert_eq!(c.format_version(), 4);
    // The old upload commands still need format 1.
    let old = Command::CreateUpload {
        upload_id: "u".into(),
        upload: upload(),
    };
    assert_eq!(old.format_version(), 1);
}
