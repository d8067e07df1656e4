#!/usr/bin/env python3
"""boto3 section of scripts/client-matrix.sh.

Usage: boto3_matrix.py ENDPOINT BUCKET WORKDIR

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. boto3 runs with its own
defaults for checksums (request_checksum_calculation / response_checksum_validation are
neither set here nor in the environment the caller gives us); only the endpoint, path-style
addressing and a single attempt per call (total_max_attempts=1: a retried failure is still a
failure) are set. Presigned URLs are checked from the default client and from a second one with signature_version="s3v4":
botocore presigns S3 URLs with SigV2 query auth by default; the gateway accepts both.

Prints one line per check, "ok   NAME" or "FAIL NAME" followed by indented details (the S3
error code, HTTP status and message for a ClientError), and last a line
"boto3 checks: passed=N failed=M" that the caller adds to its counts.
Set CLIENT_MATRIX_DEBUG=1 to get botocore's wire-level debug log on stderr.
"""

import base64
import hashlib
import logging
import os
import sys
import time
import traceback
import urllib.error
import urllib.request
import zlib

import boto3
import botocore
import botocore.compat
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

MIB = 1024 * 1024

PASSED = 0
FAILED = 0


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def describe(exc):
    """One or more lines saying what went wrong, S3 error code first."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        lines = [
            "ClientError: code=%s http=%s message=%r"
            % (err.get("Code"), meta.get("HTTPStatusCode"), err.get("Message")),
            "  operation: %s" % exc.operation_name,
        ]
        headers = meta.get("HTTPHeaders") or {}
        if headers:
            lines.append(
                "  response headers: "
                + ", ".join("%s: %s" % (k, v) for k, v in sorted(headers.items()))
            )
        return lines
    if isinstance(exc, CheckFailed):
        return ["check: %s" % exc]
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return ["%s: %s" % (type(exc).__name__, exc)] + [
        l.rstrip() for l in "".join(tb[-6:]).splitlines()
    ]


def check(name, fn):
    global PASSED, FAILED
    try:
        fn()
    except Exception as exc:  # every failure is counted, none stops the run
        FAILED += 1
        print("FAIL boto3: %s" % name, flush=True)
        for line in describe(exc):
            print("     %s" % line, flush=True)
        return False
    PASSED += 1
    print("ok   boto3: %s" % name, flush=True)
    return True


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(MIB)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint, bucket, work = sys.argv[1:4]
    if os.environ.get("CLIENT_MATRIX_DEBUG") == "1":
        boto3.set_stream_logger("botocore", logging.DEBUG)
    print(
        "boto3 %s, botocore %s" % (boto3.__version__, botocore.__version__), flush=True
    )

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
        ),
    )

    s3v4 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )

    small = b"a small body for boto3\n"
    one_mib = os.urandom(MIB)
    big_path = os.path.join(work, "boto3-20mib.bin")
    with open(big_path, "wb") as f:
        for _ in range(20):
            f.write(os.urandom(MIB))

    def create_bucket():
        s3.create_bucket(Bucket=bucket)
        s3.head_bucket(Bucket=bucket)

    check("create_bucket", create_bucket)

    def put_get(key, body):
        def run():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            expect(
                got == body,
                "get_object returned %d bytes (sha256 %s), put %d bytes (sha256 %s)"
                % (
                    len(got),
                    hashlib.sha256(got).hexdigest(),
                    len(body),
                    hashlib.sha256(body).hexdigest(),
                ),
            )

        return run

    check("put_object/get_object small", put_get("small.txt", small))
    check("put_object/get_object 1 MiB", put_get("one-mib.bin", one_mib))

    transfer = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)

    def upload_file():
        s3.upload_file(big_path, bucket, "big/20mib.bin", Config=transfer)
        head = s3.head_object(Bucket=bucket, Key="big/20mib.bin")
        size, etag = head["ContentLength"], head["ETag"]
        expect(size == 20 * MIB, "head_object ContentLength %d, want %d" % (size, 20 * MIB))
        # 20 MiB in 8 MiB parts: a multipart upload of 3 parts.
        expect(etag.endswith('-3"'), "ETag %s, want a multipart ETag of 3 parts" % etag)

    uploaded = check("upload_file 20 MiB (multipart, 8 MiB parts)", upload_file)

    def download_file():
        expect(uploaded, "nothing to download: upload_file failed")
        down = os.path.join(work, "boto3-20mib.down")
        s3.download_file(bucket, "big/20mib.bin", down, Config=transfer)
        a, b = sha256_file(big_path), sha256_file(down)
        expect(a == b, "downloaded sha256 %s != uploaded %s" % (b, a))

    check("download_file 20 MiB and compare", download_file)

    def composite_crc32(path, part):
        # S3's composite checksum: CRC32 of the parts' binary CRC32s, "-<parts>".
        binary, n = b"", 0
        with open(path, "rb") as f:
            while True:
                chunk = f.read(part)
                if not chunk:
                    break
                binary += zlib.crc32(chunk).to_bytes(4, "big")
                n += 1
        return "%s-%d" % (base64.b64encode(zlib.crc32(binary).to_bytes(4, "big")).decode(), n)

    def multipart_checksums():
        # Default settings: boto3 asks for CRC32 on the upload and each part.
        key = "big/20mib-default.bin"
        s3.upload_file(big_path, bucket, key, Config=transfer)
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        want = composite_crc32(big_path, 8 * MIB)
        got = head.get("ChecksumCRC32")
        expect(got == want, "default upload_file: ChecksumCRC32 %r, want %r" % (got, want))
        expect(head.get("ChecksumType") == "COMPOSITE", "ChecksumType %r" % head.get("ChecksumType"))
        # Each algorithm named on upload_file, read back with ChecksumMode=ENABLED.
        # CRC32C and CRC64NVME need botocore[crt] (awscrt) on the client side.
        algs = ["CRC32", "SHA1", "SHA256"]
        if getattr(botocore.compat, "HAS_CRT", False):
            algs += ["CRC32C", "CRC64NVME"]
        else:
            print("     (CRC32C, CRC64NVME skipped: no botocore[crt])", flush=True)
        for alg in algs:
            key = "big/20mib-%s.bin" % alg.lower()
            s3.upload_file(
                big_path, bucket, key, Config=transfer, ExtraArgs={"ChecksumAlgorithm": alg}
            )
            head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            got = head.get("Checksum" + alg)
            full = alg == "CRC64NVME"
            expect(got, "%s: no Checksum%s in %r" % (alg, alg, head))
            expect(
                full != got.endswith("-3"),
                "%s: checksum %r (want %s)" % (alg, got, "full object" if full else "-3"),
            )
            kind = "FULL_OBJECT" if full else "COMPOSITE"
            expect(head.get("ChecksumType") == kind, "%s: ChecksumType %r" % (alg, head.get("ChecksumType")))
            if alg == "CRC32":
                expect(got == want, "CRC32: %r, want %r" % (got, want))
            if alg == "SHA256":
                parts = []
                with open(big_path, "rb") as f:
                    while True:
                        chunk = f.read(8 * MIB)
                        if not chunk:
                            break
                        parts.append(hashlib.sha256(chunk).digest())
                want256 = "%s-%d" % (
                    base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode(),
                    len(parts),
                )
                expect(got == want256, "SHA256: %r, want %r" % (got, want256))
            attrs = s3.get_object_attributes(
                Bucket=bucket, Key=key, ObjectAttributes=["Checksum", "ObjectParts", "ETag"]
            )
            expect(
                attrs.get("Checksum", {}).get("Checksum" + alg) == got,
                "%s: get_object_attributes %r" % (alg, attrs.get("Checksum")),
            )
            expect(
                attrs.get("ObjectParts", {}).get("TotalPartsCount") == 3,
                "%s: ObjectParts %r" % (alg, attrs.get("ObjectParts")),
            )
            down = os.path.join(work, "boto3-%s.down" % alg)
            s3.download_file(bucket, key, down, Config=transfer)
            expect(sha256_file(down) == sha256_file(big_path), "%s: download differs" % alg)

    check(
        "upload_file multipart checksums (default CRC32, each ChecksumAlgorithm), head_object ChecksumMode=ENABLED",
        multipart_checksums,
    )

    def presigned_disposition(client=None, sigv4=True):
        disposition = 'attachment; filename="price-list.pdf"'
        s3.put_object(
            Bucket=bucket, Key="mail/price-list.pdf", Body=one_mib, ContentType="application/pdf"
        )
        # botocore presigns S3 URLs with SigV2 query auth unless signature_version is set;
        # the gateway accepts both, and both are checked.
        url = (client or s3v4).generate_presigned_url(
            "get_object",
            Params={
                "Bucket": bucket,
                "Key": "mail/price-list.pdf",
                "ResponseContentDisposition": disposition,
            },
            ExpiresIn=300,
        )
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = resp.read()
                got = resp.headers.get("Content-Disposition")
                status = resp.status
        except urllib.error.HTTPError as e:
            raise CheckFailed(
                "GET presigned URL -> HTTP %d: %s" % (e.code, e.read()[:600].decode("utf-8", "replace"))
            )
        expect(status == 200, "status %d" % status)
        expect(body == one_mib, "body differs (%d bytes)" % len(body))
        if sigv4:
            expect("X-Amz-Algorithm=AWS4-HMAC-SHA256" in url, "not a SigV4 presigned URL: %s" % url)
        expect(got == disposition, "Content-Disposition %r, want %r" % (got, disposition))

    check("presigned (s3v4) GET with ResponseContentDisposition via urllib", presigned_disposition)
    check(
        "presigned (boto3's default signature) GET with ResponseContentDisposition via urllib",
        lambda: presigned_disposition(client=s3, sigv4=False),
    )

    def copy_object():
        s3.put_object(Bucket=bucket, Key="copy/src.bin", Body=one_mib)
        s3.copy_object(
            Bucket=bucket, Key="copy/dst.bin", CopySource={"Bucket": bucket, "Key": "copy/src.bin"}
        )
        got = s3.get_object(Bucket=bucket, Key="copy/dst.bin")["Body"].read()
        expect(got == one_mib, "copy has %d bytes, differs from the source" % len(got))

    check("copy_object", copy_object)

    def delete_objects():
        keys = ["del/a.txt", "del/b.txt", "del/c.txt"]
        for k in keys:
            s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
        resp = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[:2]]}
        )
        deleted = sorted(d["Key"] for d in resp.get("Deleted", []))
        expect(not resp.get("Errors"), "Errors in the response: %r" % resp.get("Errors"))
        expect(deleted == keys[:2], "Deleted %r, want %r" % (deleted, keys[:2]))
        left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="del/").get("Contents", [])]
        expect(left == ["del/c.txt"], "left under del/: %r, want ['del/c.txt']" % left)

    check("delete_objects", delete_objects)

    def paginate():
        want = ["page/key-%02d" % i for i in range(30)]
        for k in want:
            s3.put_object(Bucket=bucket, Key=k, Body=b"x")
        pages = 0
        got = []
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="page/", PaginationConfig={"PageSize": 10, "MaxItems": 1000}
        ):
            pages += 1
            expect(pages <= 10, "more than 10 pages for 30 keys at 10 a page")
            got.extend(o["Key"] for o in page.get("Contents", []))
        expect(got == want, "listed %d keys %r..., want the 30 keys in order" % (len(got), got[:5]))
        expect(pages == 3, "%d pages, want 3" % pages)

    check("list_objects_v2 paginator over 30 keys (10 a page)", paginate)

    def metadata():
        s3.put_object(
            Bucket=bucket,
            Key="meta/obj.txt",
            Body=small,
            Metadata={"k": "v"},
            ContentType="text/plain; charset=utf-8",
        )
        head = s3.head_object(Bucket=bucket, Key="meta/obj.txt")
        expect(head.get("Metadata") == {"k": "v"}, "Metadata %r" % head.get("Metadata"))
        expect(
            head.get("ContentType") == "text/plain; charset=utf-8",
            "ContentType %r" % head.get("ContentType"),
        )
        expect(head.get("ContentLength") == len(small), "ContentLength %r" % head.get("ContentLength"))

    check("head_object Metadata/ContentType round trip", metadata)

    def conditional():
        etag = s3.head_object(Bucket=bucket, Key="small.txt")["ETag"]
        try:
            s3.get_object(Bucket=bucket, Key="small.txt", IfNoneMatch=etag)
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = e.response.get("Error", {}).get("Code")
            expect(status == 304, "ClientError code=%s http=%s, want 304" % (code, status))
            return
        raise CheckFailed("get_object IfNoneMatch=%s returned 200, want 304" % etag)

    check("get_object IfNoneMatch=ETag -> 304", conditional)

    def tags():
        s3.put_object(Bucket=bucket, Key="tags/a.txt", Body=small, Tagging="team=blue&tier=hot")
        got = s3.get_object_tagging(Bucket=bucket, Key="tags/a.txt")["TagSet"]
        want = [{"Key": "team", "Value": "blue"}, {"Key": "tier", "Value": "hot"}]
        expect(got == want, "TagSet %r, want %r" % (got, want))
        count = s3.get_object(Bucket=bucket, Key="tags/a.txt").get("TagCount")
        expect(count == 2, "TagCount %r, want 2" % count)
        s3.put_object_tagging(
            Bucket=bucket, Key="tags/a.txt", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}
        )
        s3.copy_object(
            Bucket=bucket,
            Key="tags/b.txt",
            CopySource={"Bucket": bucket, "Key": "tags/a.txt"},
            TaggingDirective="REPLACE",
            Tagging="copied=yes",
        )
        got = s3.get_object_tagging(Bucket=bucket, Key="tags/b.txt")["TagSet"]
        expect(got == [{"Key": "copied", "Value": "yes"}], "copy's TagSet %r" % got)
        s3.delete_object_tagging(Bucket=bucket, Key="tags/a.txt")
        got = s3.get_object_tagging(Bucket=bucket, Key="tags/a.txt")["TagSet"]
        expect(got == [], "TagSet after delete_object_tagging %r" % got)
        try:
            s3.put_object_tagging(
                Bucket=bucket,
                Key="tags/a.txt",
                Tagging={"TagSet": [{"Key": "aws:x", "Value": "1"}]},
            )
            raise CheckFailed("an aws: key was accepted")
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            expect(code == "InvalidTag", "aws: key answered %s, want InvalidTag" % code)
        s3.put_bucket_tagging(
            Bucket=bucket, Tagging={"TagSet": [{"Key": "cost", "Value": "42"}]}
        )
        got = s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
        expect(got == [{"Key": "cost", "Value": "42"}], "bucket TagSet %r" % got)
        s3.delete_bucket_tagging(Bucket=bucket)
        try:
            s3.get_bucket_tagging(Bucket=bucket)
            raise CheckFailed("get_bucket_tagging after delete answered 200")
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            expect(code == "NoSuchTagSet", "answered %s, want NoSuchTagSet" % code)

    check("object and bucket tagging (put/get/delete, Tagging=, copy REPLACE, TagCount)", tags)

    def anonymous_status(path):
        try:
            with urllib.request.urlopen(endpoint + path, timeout=60) as resp:
                resp.read()
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code

    def acls():
        all_users = "http://acs.amazonaws.com/groups/global/AllUsers"
        s3.put_object(Bucket=bucket, Key="acl/pub.txt", Body=small, ACL="public-read")
        status = anonymous_status("/%s/acl/pub.txt" % bucket)
        expect(status == 200, "anonymous GET of a public-read object: %s" % status)
        grants = s3.get_object_acl(Bucket=bucket, Key="acl/pub.txt")["Grants"]
        public = [g for g in grants if g["Grantee"].get("URI") == all_users]
        expect(len(grants) == 2 and public and public[0]["Permission"] == "READ",
               "grants %r" % grants)
        s3.put_object_acl(Bucket=bucket, Key="acl/pub.txt", ACL="private")
        status = anonymous_status("/%s/acl/pub.txt" % bucket)
        expect(status == 403, "anonymous GET after put_object_acl private: %s" % status)
        open_bucket = bucket + "-public"
        s3.create_bucket(Bucket=open_bucket, ACL="public-read")
        s3.put_object(Bucket=open_bucket, Key="a.txt", Body=b"a")
        status = anonymous_status("/%s?list-type=2" % open_bucket)
        expect(status == 200, "anonymous listing of a public-read bucket: %s" % status)
        s3.put_bucket_acl(Bucket=open_bucket, ACL="private")
        status = anonymous_status("/%s/a.txt" % open_bucket)
        expect(status == 403, "anonymous GET after put_bucket_acl private: %s" % status)
        try:
            s3.put_object_acl(Bucket=bucket, Key="acl/pub.txt", ACL="authenticated-read")
            raise CheckFailed("authenticated-read was accepted")
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            expect(code == "NotImplemented", "authenticated-read answered %s" % code)
        s3.delete_object(Bucket=open_bucket, Key="a.txt")
        s3.delete_bucket(Bucket=open_bucket)

    check("canned ACLs: public-read object and bucket read anonymously, get/put_object_acl, put_bucket_acl", acls)

    def cleanup():
        keys = []
        token = None
        for _ in range(100):
            kw = {"Bucket": bucket}
            if token:
                kw["ContinuationToken"] = token
            resp = s3.list_objects_v2(**kw)
            keys.extend(o["Key"] for o in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                break
            token = resp["NextContinuationToken"]
        # Plain DeleteObject here, so that this check does not depend on DeleteObjects.
        for k in keys:
            s3.delete_object(Bucket=bucket, Key=k)
        s3.delete_bucket(Bucket=bucket)
        names = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
        expect(bucket not in names, "bucket still listed after delete_bucket")

    check("delete_object all, delete_bucket", cleanup)

    versioned = bucket + "-versions"

    def versions_life():
        s3.create_bucket(Bucket=versioned)
        s3.put_object(Bucket=versioned, Key="k", Body=b"before versioning")
        s3.put_bucket_versioning(
            Bucket=versioned, VersioningConfiguration={"Status": "Enabled"}
        )
        status = s3.get_bucket_versioning(Bucket=versioned).get("Status")
        expect(status == "Enabled", "versioning status %r" % status)
        ids = [
            s3.put_object(Bucket=versioned, Key="k", Body=b"v%d" % i)["VersionId"]
            for i in range(3)
        ]
        expect(len(set(ids)) == 3, "three distinct version ids %r" % ids)
        for i, vid in enumerate(ids):
            got = s3.get_object(Bucket=versioned, Key="k", VersionId=vid)
            expect(got["Body"].read() == b"v%d" % i, "version %d's body" % i)
            expect(got["VersionId"] == vid, "GET names its version")
        null = s3.get_object(Bucket=versioned, Key="k", VersionId="null")
        expect(null["Body"].read() == b"before versioning", "the null version")
        marker = s3.delete_object(Bucket=versioned, Key="k")
        expect(marker.get("DeleteMarker") is True, "DELETE adds a delete marker")
        try:
            s3.get_object(Bucket=versioned, Key="k")
            raise CheckFailed("GET after a delete marker succeeded")
        except ClientError as e:
            expect(e.response["Error"]["Code"] == "NoSuchKey", "NoSuchKey after a marker")
        pages = s3.get_paginator("list_object_versions").paginate(
            Bucket=versioned, PaginationConfig={"PageSize": 2}
        )
        versions, markers = [], []
        for page in pages:
            versions.extend(page.get("Versions", []))
            markers.extend(page.get("DeleteMarkers", []))
        expect(len(versions) == 4, "four versions listed, got %d" % len(versions))
        expect(len(markers) == 1 and markers[0]["IsLatest"], "one latest marker")
        s3.delete_object(Bucket=versioned, Key="k", VersionId=marker["VersionId"])
        current = s3.get_object(Bucket=versioned, Key="k")
        expect(current["VersionId"] == ids[2], "the marker removed, v2 is current")
        out = s3.delete_objects(
            Bucket=versioned,
            Delete={"Objects": [{"Key": "k", "VersionId": v} for v in ids + ["null"]]},
        )
        expect(not out.get("Errors"), "delete_objects errors %r" % out.get("Errors"))
        expect(len(out.get("Deleted", [])) == 4, "four versions deleted")
        left = s3.list_object_versions(Bucket=versioned)
        expect(not left.get("Versions") and not left.get("DeleteMarkers"), "nothing left")
        s3.delete_bucket(Bucket=versioned)

    check(
        "versioning: put/get by VersionId, delete marker, list_object_versions paginator, "
        "delete_objects by version",
        versions_life,
    )

    locked = bucket + "-lock"

    def object_lock():
        import datetime

        s3.create_bucket(Bucket=locked, ObjectLockEnabledForBucket=True)
        s3.put_object_lock_configuration(
            Bucket=locked,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
            },
        )
        vid = s3.put_object(Bucket=locked, Key="mail", Body=b"kept")["VersionId"]
        head = s3.head_object(Bucket=locked, Key="mail")
        expect(head.get("ObjectLockMode") == "GOVERNANCE", "default retention on the version")
        try:
            s3.delete_object(Bucket=locked, Key="mail", VersionId=vid)
            raise CheckFailed("a locked version was deleted")
        except ClientError as e:
            expect(e.response["Error"]["Code"] == "AccessDenied", "AccessDenied while locked")
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=2)
        s3.put_object_retention(
            Bucket=locked,
            Key="mail",
            VersionId=vid,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until},
        )
        got = s3.get_object_retention(Bucket=locked, Key="mail", VersionId=vid)
        expect(got["Retention"]["Mode"] == "GOVERNANCE", "retention read back")
        s3.put_object_legal_hold(
            Bucket=locked, Key="mail", VersionId=vid, LegalHold={"Status": "ON"}
        )
        hold = s3.get_object_legal_hold(Bucket=locked, Key="mail", VersionId=vid)
        expect(hold["LegalHold"]["Status"] == "ON", "legal hold read back")
        s3.put_object_legal_hold(
            Bucket=locked, Key="mail", VersionId=vid, LegalHold={"Status": "OFF"}
        )
        s3.delete_object(
            Bucket=locked, Key="mail", VersionId=vid, BypassGovernanceRetention=True
        )
        s3.delete_bucket(Bucket=locked)

    check(
        "object lock: default retention, AccessDenied while locked, retention and legal "
        "hold, delete with BypassGovernanceRetention",
        object_lock,
    )

    print("boto3 checks: passed=%d failed=%d" % (PASSED, FAILED), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
