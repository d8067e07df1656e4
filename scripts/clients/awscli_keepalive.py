#!/usr/bin/env python3
"""awscli section of scripts/client-matrix.sh: an empty PUT, then a PUT with a body, over one
keep-alive connection, made with the aws cli's own HTTP stack (the botocore it ships).

Usage: awscli_keepalive.py ENDPOINT BUCKET WORKDIR

`aws s3 cp --recursive` and `aws s3 sync` send every PutObject with "Expect: 100-continue"
(file bodies, empty ones included) and reuse pooled connections. A server that answers the
empty PUT with its final response and no interim "100 Continue" (RFC-compliant; hyper does
this) leaves the aws cli's botocore (< 1.44) parsing the next response on that connection
against the stale status line, and the next PUT ends in a read timeout (botocore issue
#3755). Which upload follows the empty one depends on thread timing in the cli, so `s3 sync`
of a tree with an empty file fails only sometimes; here the order is fixed: it fails every
time or never. Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""

import hashlib
import os
import sys

import awscli  # noqa: F401  (from here on `import botocore` is the cli's own copy)
import botocore
import botocore.session
from botocore.config import Config


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint, bucket, work = sys.argv[1:4]
    print("aws cli botocore %s (%s)" % (botocore.__version__, os.path.dirname(botocore.__file__)))
    s3 = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            read_timeout=15,
            connect_timeout=10,
            max_pool_connections=1,
        ),
    )
    empty = os.path.join(work, "keepalive-empty.txt")
    other = os.path.join(work, "keepalive-other.txt")
    body = b"uploaded right after an empty file, on the same connection\n"
    with open(empty, "wb"):
        pass
    with open(other, "wb") as f:
        f.write(body)
    for key, path in (("keepalive/a-empty.txt", empty), ("keepalive/b-other.txt", other)):
        try:
            with open(path, "rb") as f:
                resp = s3.put_object(Bucket=bucket, Key=key, Body=f)
        except Exception as e:  # the failure this check is about: say what it was, briefly
            print("PUT %s (%d bytes) failed: %s: %s" % (key, os.path.getsize(path), type(e).__name__, e))
            return 1
        print("PUT %s -> %s ETag %s" % (key, resp["ResponseMetadata"]["HTTPStatusCode"], resp.get("ETag")))
    for key, want in (("keepalive/a-empty.txt", b""), ("keepalive/b-other.txt", body)):
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if got != want:
            print(
                "GET %s: %d bytes, sha256 %s; want %d bytes"
                % (key, len(got), hashlib.sha256(got).hexdigest(), len(want))
            )
            return 1
    for key in ("keepalive/a-empty.txt", "keepalive/b-other.txt"):
        s3.delete_object(Bucket=bucket, Key=key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
