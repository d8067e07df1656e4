//! Canned ACLs for public links: `x-amz-acl` on PutObject, CopyObject,
//! CreateMultipartUpload and CreateBucket (Rust SDK), Put/Get{Bucket,Object}Acl with the
//! header and with an AccessControlPolicy document, and what unsigned requests (plain
//! HTTP, no signature) may then do: GET and HEAD of a public-read object or of any object
//! of a public-read bucket, a listing of a public-read bucket; everything else 403
//! AccessDenied. Grants this gateway does not keep answer 501 NotImplemented, leaving the
//! ACL as it was.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    AccessControlPolicy, BucketCannedAcl, CompletedMultipartUpload, CompletedPart, Grant, Grantee,
    ObjectCannedAcl, Owner, Permission, Type,
};
use e2e::{Gateway, create_bucket, put_bytes, s3_error};

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

fn anonymous(gw: &Gateway, method: &str, target: &str) -> (u16, String) {
    let resp = gw
        .raw(method, target, &[], b"")
        .unwrap_or_else(|e| panic!("{method} {target}: {e}"));
    (resp.status, resp.text())
}

/// The grants of an object's ACL as (grantee, permission): the owner's ID or a group URI.
async fn object_grants(s3: &Client, bucket: &str, key: &str) -> Vec<(String, String)> {
    let acl = s3
        .get_object_acl()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObjectAcl {key}: {e:?}"));
    let owner = acl.owner().and_then(|o| o.id()).unwrap_or("").to_string();
    grants_of(acl.grants(), &owner)
}

fn grants_of(grants: &[Grant], owner: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = grants
        .iter()
        .map(|g| {
            let grantee = g.grantee().expect("grantee");
            let who = match (grantee.id(), grantee.uri()) {
                (Some(id), _) if id == owner => "owner".to_string(),
                (Some(id), _) => id.to_string(),
                (None, Some(uri)) => uri.to_string(),
                _ => "?".to_string(),
            };
            (
                who,
                g.permission()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

fn private_grants() -> Vec<(String, String)> {
    vec![("owner".into(), "FULL_CONTROL".into())]
}

fn public_grants() -> Vec<(String, String)> {
    vec![
        (ALL_USERS.into(), "READ".into()),
        ("owner".into(), "FULL_CONTROL".into()),
    ]
}

#[tokio::test]
async fn a_public_read_object_serves_anonymous_reads_and_nothing_else() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    s3.put_object()
        .bucket("bkt")
        .key("pub.txt")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"for everyone"))
        .send()
        .await
        .expect("PUT public-read");
    put_bytes(&s3, "bkt", "private.txt", b"mine").await;

    let (status, body) = anonymous(&gw, "GET", "/bkt/pub.txt");
    assert_eq!((status, body.as_str()), (200, "for everyone"));
    assert_eq!(anonymous(&gw, "HEAD", "/bkt/pub.txt").0, 200);
    for (method, target) in [
        ("GET", "/bkt/private.txt"),
        ("HEAD", "/bkt/private.txt"),
        ("GET", "/bkt/missing"),
        ("GET", "/bkt"),
        ("GET", "/bkt?list-type=2"),
        ("GET", "/"),
        ("GET", "/bkt/pub.txt?acl"),
        ("GET", "/bkt/pub.txt?tagging"),
        ("PUT", "/bkt/pub.txt"),
        ("DELETE", "/bkt/pub.txt"),
        ("GET", "/nobucket/pub.txt"),
    ] {
        let (status, body) = anonymous(&gw, method, target);
        assert_eq!(status, 403, "{method} {target}: {body}");
        if method != "HEAD" {
            assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
        }
    }
    assert_eq!(object_grants(&s3, "bkt", "pub.txt").await, public_grants());
    assert_eq!(
        object_grants(&s3, "bkt", "private.txt").await,
        private_grants()
    );

    // PutObjectAcl with the header: private again, and anonymous reads stop.
    s3.put_object_acl()
        .bucket("bkt")
        .key("pub.txt")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .expect("PutObjectAcl private");
    assert_eq!(anonymous(&gw, "GET", "/bkt/pub.txt").0, 403);
    assert_eq!(object_grants(&s3, "bkt", "pub.txt").await, private_grants());

    // With a document whose grants are public-read's.
    let owner_id = s3
        .get_object_acl()
        .bucket("bkt")
        .key("private.txt")
        .send()
        .await
        .expect("GetObjectAcl")
        .owner()
        .and_then(|o| o.id())
        .expect("owner id")
        .to_string();
    let owner_grant = Grant::builder()
        .grantee(
            Grantee::builder()
                .r#type(Type::CanonicalUser)
                .id(&owner_id)
                .build()
                .expect("grantee"),
        )
        .permission(Permission::FullControl)
        .build();
    let everyone = |permission: Permission| {
        Grant::builder()
            .grantee(
                Grantee::builder()
                    .r#type(Type::Group)
                    .uri(ALL_USERS)
                    .build()
                    .expect("grantee"),
            )
            .permission(permission)
            .build()
    };
    let policy = |grants: Vec<Grant>| {
        AccessControlPolicy::builder()
            .owner(Owner::builder().id(&owner_id).build())
            .set_grants(Some(grants))
            .build()
    };
    s3.put_object_acl()
        .bucket("bkt")
        .key("private.txt")
        .access_control_policy(policy(vec![
            owner_grant.clone(),
            everyone(Permission::Read),
        ]))
        .send()
        .await
        .expect("PutObjectAcl with a public-read document");
    assert_eq!(
        anonymous(&gw, "GET", "/bkt/private.txt"),
        (200, "mine".to_string())
    );
    assert_eq!(
        object_grants(&s3, "bkt", "private.txt").await,
        public_grants()
    );

    // Grants this gateway does not keep: 501, the ACL as it was.
    let (status, code) = s3_error(
        s3.put_object_acl()
            .bucket("bkt")
            .key("private.txt")
            .access_control_policy(policy(vec![owner_grant, everyone(Permission::Write)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    let (status, code) = s3_error(
        s3.put_object_acl()
            .bucket("bkt")
            .key("private.txt")
            .grant_read("id=someone")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    let (status, code) = s3_error(
        s3.put_object_acl()
            .bucket("bkt")
            .key("private.txt")
            .acl(ObjectCannedAcl::AuthenticatedRead)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    assert_eq!(
        object_grants(&s3, "bkt", "private.txt").await,
        public_grants()
    );
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("other.txt")
            .acl(ObjectCannedAcl::PublicReadWrite)
            .body(ByteStream::from_static(b"refused"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    assert_eq!(anonymous(&gw, "GET", "/bkt/other.txt").0, 403);
    let (status, _) = s3_error(s3.get_object().bucket("bkt").key("other.txt").send().await);
    assert_eq!(status, 404, "nothing stored");

    // An overwrite without an ACL is private: the ACL belongs to the version.
    put_bytes(&s3, "bkt", "private.txt", b"mine again").await;
    assert_eq!(anonymous(&gw, "GET", "/bkt/private.txt").0, 403);
}

#[tokio::test]
async fn copies_uploads_and_public_buckets() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "src", b"source").await;
    s3.copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source("bkt/src")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .expect("copy public-read");
    assert_eq!(
        anonymous(&gw, "GET", "/bkt/copy"),
        (200, "source".to_string())
    );
    // A copy of a public object is private unless it asks.
    s3.copy_object()
        .bucket("bkt")
        .key("copy2")
        .copy_source("bkt/copy")
        .send()
        .await
        .expect("copy");
    assert_eq!(anonymous(&gw, "GET", "/bkt/copy2").0, 403);

    // An upload with tags and an ACL both; the key's current object keeps its own until
    // the upload completes.
    put_bytes(&s3, "bkt", "mp", b"before").await;
    let id = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .acl(ObjectCannedAcl::PublicRead)
        .tagging("k=v")
        .send()
        .await
        .expect("CreateMultipartUpload")
        .upload_id()
        .expect("upload id")
        .to_string();
    assert_eq!(anonymous(&gw, "GET", "/bkt/mp").0, 403);
    let part = s3
        .upload_part()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"one part"))
        .send()
        .await
        .expect("UploadPart");
    s3.complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().expect("etag"))
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("complete");
    assert_eq!(
        anonymous(&gw, "GET", "/bkt/mp"),
        (200, "one part".to_string())
    );
    let tags = s3
        .get_object_tagging()
        .bucket("bkt")
        .key("mp")
        .send()
        .await
        .expect("GetObjectTagging");
    assert_eq!(tags.tag_set().len(), 1);

    // A public-read bucket: every object reads, the bucket lists, a missing key is 404.
    s3.create_bucket()
        .bucket("open")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .expect("CreateBucket public-read");
    put_bytes(&s3, "open", "a.txt", b"a").await;
    assert_eq!(anonymous(&gw, "GET", "/open/a.txt"), (200, "a".to_string()));
    let (status, body) = anonymous(&gw, "GET", "/open?list-type=2");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<Key>a.txt</Key>"), "{body}");
    let (status, body) = anonymous(&gw, "GET", "/open");
    assert_eq!(status, 200, "{body}");
    assert_eq!(anonymous(&gw, "HEAD", "/open").0, 200);
    let (status, body) = anonymous(&gw, "GET", "/open/missing");
    assert_eq!(status, 404);
    assert!(body.contains("NoSuchKey"), "{body}");
    assert_eq!(anonymous(&gw, "PUT", "/open/b.txt").0, 403);
    assert_eq!(anonymous(&gw, "GET", "/open?acl").0, 403);
    let acl = s3
        .get_bucket_acl()
        .bucket("open")
        .send()
        .await
        .expect("GetBucketAcl");
    let owner = acl.owner().and_then(|o| o.id()).unwrap_or("").to_string();
    assert_eq!(grants_of(acl.grants(), &owner), public_grants());
    // Private again: nothing anonymous.
    s3.put_bucket_acl()
        .bucket("open")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .expect("PutBucketAcl private");
    assert_eq!(anonymous(&gw, "GET", "/open/a.txt").0, 403);
    assert_eq!(anonymous(&gw, "GET", "/open?list-type=2").0, 403);
    let acl = s3
        .get_bucket_acl()
        .bucket("open")
        .send()
        .await
        .expect("GetBucketAcl");
    assert_eq!(grants_of(acl.grants(), &owner), private_grants());
    let (status, code) = s3_error(
        s3.put_bucket_acl()
            .bucket("open")
            .acl(BucketCannedAcl::AuthenticatedRead)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
}
