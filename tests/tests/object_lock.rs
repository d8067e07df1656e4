//! Object lock through the Rust SDK (WORM retention for mail archives): a bucket created
//! with object lock (versioning on for good), its default retention, per-version
//! retention and legal hold at PUT and afterwards, and every delete path refused while a
//! lock holds (GOVERNANCE yields to `x-amz-bypass-governance-retention` from the owner,
//! COMPLIANCE and legal hold to nothing); the content of a locked version stays
//! referenced, and `gateway fsck` is exact.

use std::time::{Duration, SystemTime};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    BucketVersioningStatus, DefaultRetention, Delete, ObjectIdentifier, ObjectLockConfiguration,
    ObjectLockEnabled, ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode,
    ObjectLockRetention, ObjectLockRetentionMode, ObjectLockRule, VersioningConfiguration,
};
use e2e::{Gateway, create_bucket, random_body, s3_error, sha1_hex};

const BUCKET: &str = "archive";

async fn put(s3: &Client, key: &str, body: &[u8]) -> String {
    s3.put_object()
        .bucket(BUCKET)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .expect("put")
        .version_id()
        .expect("version id")
        .to_string()
}

async fn delete_version(s3: &Client, key: &str, id: &str, bypass: bool) -> (u16, String) {
    let mut req = s3.delete_object().bucket(BUCKET).key(key).version_id(id);
    if bypass {
        req = req.bypass_governance_retention(true);
    }
    match req.send().await {
        Ok(_) => (204, String::new()),
        Err(e) => s3_error::<(), _>(Err(e)),
    }
}

fn refs(gw: &Gateway, body: &[u8]) -> Option<u64> {
    gw.admin_file(&sha1_hex(body)).and_then(|f| f.refs)
}

#[tokio::test]
async fn locked_versions_survive_every_delete_path() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    s3.create_bucket()
        .bucket(BUCKET)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .expect("create a bucket with object lock");
    let versioning = s3
        .get_bucket_versioning()
        .bucket(BUCKET)
        .send()
        .await
        .expect("versioning");
    assert_eq!(versioning.status(), Some(&BucketVersioningStatus::Enabled));
    let suspend = s3
        .put_bucket_versioning()
        .bucket(BUCKET)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await;
    assert_eq!(s3_error(suspend), (409, "InvalidBucketState".to_string()));
    s3.put_object_lock_configuration()
        .bucket(BUCKET)
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .rule(
                    ObjectLockRule::builder()
                        .default_retention(
                            DefaultRetention::builder()
                                .mode(ObjectLockRetentionMode::Governance)
                                .days(1)
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("default retention");
    let config = s3
        .get_object_lock_configuration()
        .bucket(BUCKET)
        .send()
        .await
        .expect("get lock configuration");
    let rule = config
        .object_lock_configuration()
        .and_then(|c| c.rule())
        .and_then(|r| r.default_retention())
        .expect("default retention read back");
    assert_eq!(rule.days(), Some(1));

    // The default retention: GOVERNANCE, a day.
    let (a, b) = (random_body(81, 4000), random_body(82, 5000));
    let va = put(&s3, "mail/a", &a).await;
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key("mail/a")
        .send()
        .await
        .expect("head");
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Governance));
    assert_eq!(
        delete_version(&s3, "mail/a", &va, false).await,
        (403, "AccessDenied".to_string())
    );
    // DeleteObjects by version: refused per key, the same way.
    let out = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("mail/a")
                        .version_id(&va)
                        .build()
                        .expect("id"),
                )
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .expect("delete objects");
    assert_eq!(out.errors().len(), 1);
    assert_eq!(out.errors()[0].code(), Some("AccessDenied"));
    assert_eq!(
        refs(&gw, &a),
        Some(1),
        "the locked version keeps its reference"
    );

    // COMPLIANCE for a few seconds, and a legal hold, at PUT.
    let until = SystemTime::now() + Duration::from_secs(4);
    let vb = s3
        .put_object()
        .bucket(BUCKET)
        .key("mail/b")
        .body(ByteStream::from(b.clone()))
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(DateTime::from(until))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await
        .expect("put with a lock")
        .version_id()
        .expect("id")
        .to_string();
    let retention = s3
        .get_object_retention()
        .bucket(BUCKET)
        .key("mail/b")
        .version_id(&vb)
        .send()
        .await
        .expect("retention");
    assert_eq!(
        retention.retention().and_then(|r| r.mode()),
        Some(&ObjectLockRetentionMode::Compliance)
    );
    assert_eq!(
        delete_version(&s3, "mail/b", &vb, true).await,
        (403, "AccessDenied".to_string()),
        "COMPLIANCE and a legal hold yield to nothing"
    );
    s3.put_object_legal_hold()
        .bucket(BUCKET)
        .key("mail/b")
        .version_id(&vb)
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::Off)
                .build(),
        )
        .send()
        .await
        .expect("release the hold");
    // COMPLIANCE cannot be shortened, even with the bypass.
    let shorten = s3
        .put_object_retention()
        .bucket(BUCKET)
        .key("mail/b")
        .version_id(&vb)
        .bypass_governance_retention(true)
        .retention(
            ObjectLockRetention::builder()
                .mode(ObjectLockRetentionMode::Compliance)
                .retain_until_date(DateTime::from(SystemTime::now() + Duration::from_secs(1)))
                .build(),
        )
        .send()
        .await;
    assert_eq!(s3_error(shorten), (403, "AccessDenied".to_string()));
    assert_eq!(
        delete_version(&s3, "mail/b", &vb, true).await,
        (403, "AccessDenied".to_string())
    );
    // A DELETE without an id adds a marker: allowed; the version stays.
    let marker = s3
        .delete_object()
        .bucket(BUCKET)
        .key("mail/b")
        .send()
        .await
        .expect("marker");
    assert_eq!(marker.delete_marker(), Some(true));
    assert_eq!(refs(&gw, &b), Some(1));

    // GOVERNANCE yields to the owner's bypass.
    assert_eq!(delete_version(&s3, "mail/a", &va, true).await.0, 204);
    assert_eq!(refs(&gw, &a), None, "released once the lock let it go");
    // COMPLIANCE ends at its date.
    let wait =
        until.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_millis(1200);
    tokio::time::sleep(wait).await;
    assert_eq!(delete_version(&s3, "mail/b", &vb, false).await.0, 204);
    assert_eq!(refs(&gw, &b), None);

    // A copy takes the lock its request asks for; a multipart upload asking for one is
    // refused (its record has no place for it), never started without it.
    let vc = s3
        .copy_object()
        .bucket(BUCKET)
        .key("mail/copy")
        .copy_source(format!("{BUCKET}/mail/b?versionId={vb}"))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await;
    // mail/b's version was removed above: the copy source is gone.
    assert_eq!(s3_error(vc).0, 404);
    let vd = put(&s3, "mail/d", &b).await;
    let copy = s3
        .copy_object()
        .bucket(BUCKET)
        .key("mail/copy")
        .copy_source(format!("{BUCKET}/mail/d?versionId={vd}"))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await
        .expect("copy with a legal hold");
    let copied = copy.version_id().expect("id").to_string();
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key("mail/copy")
        .version_id(&copied)
        .send()
        .await
        .expect("head the copy");
    assert_eq!(
        head.object_lock_legal_hold_status(),
        Some(&ObjectLockLegalHoldStatus::On)
    );
    assert_eq!(
        delete_version(&s3, "mail/copy", &copied, true).await.1,
        "AccessDenied"
    );
    let multipart = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("mail/big")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await;
    assert_eq!(s3_error(multipart), (501, "NotImplemented".to_string()));

    // A lock asked of a bucket without object lock is refused, nothing stored.
    create_bucket(&s3, "plain").await;
    let refused = s3
        .put_object()
        .bucket("plain")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await;
    assert_eq!(s3_error(refused), (400, "InvalidRequest".to_string()));
    let absent = s3.head_object().bucket("plain").key("k").send().await;
    assert_eq!(s3_error(absent).0, 404);
    let no_config = s3
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await;
    assert_eq!(
        s3_error(no_config),
        (404, "ObjectLockConfigurationNotFoundError".to_string())
    );

    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}
