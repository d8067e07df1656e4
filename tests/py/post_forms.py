"""POST Object forms as a web back end makes them and a client sends them (tests/tests/post_upload.rs).

Reads a job as JSON on stdin: {"endpoint", "region", "access_key", "secret_key", "bucket",
"cases": [...]}. Each case is signed, then posted with `requests` (multipart/form-data, the
fields before the file), and answered with one JSON line: {"name", "status", "headers",
"body"}. A case:
  "sign": "v4"   boto3's generate_presigned_post (SigV4) with "key", "fields", "conditions",
                 "expires_in" (negative: already expired); or
  "sign": "v2"   the V2 form: base64 policy and base64 HMAC-SHA1 signature, computed here
                 with hmac/hashlib, as the S3 documentation describes it ("policy_text":
                 sign this text as the policy instead); or
  "sign": "none" no policy and no signature (an anonymous form);
  "as": [access_key, secret_key]  sign with these instead of the job's;
  "tamper_policy": rewrite the policy after signing (the signature no longer matches);
  "set": fields to set after signing (the policy is not changed: extra or altered fields);
  "drop": fields to remove after signing;
  "file": [filename, base64 bytes, content type]; absent: no file part at all;
  "host": post to "/" with this Host (virtual-hosted style) instead of to the bucket's path.
"""

import base64
import datetime
import hashlib
import hmac
import json
import sys

import boto3
import requests
from botocore.client import Config


def v2_form(job, case, access_key, secret_key):
    expiration = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        seconds=case.get("expires_in", 600)
    )
    conditions = [{"bucket": job["bucket"]}, {"key": case["key"]}] + case.get("conditions", [])
    text = case.get("policy_text") or json.dumps(
        {"expiration": expiration.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "conditions": conditions}
    )
    policy = base64.b64encode(text.encode()).decode()
    signature = base64.b64encode(
        hmac.new(secret_key.encode(), policy.encode(), hashlib.sha1).digest()
    ).decode()
    fields = dict(case.get("fields", {}))
    fields.update(
        {"key": case["key"], "AWSAccessKeyId": access_key, "policy": policy, "signature": signature}
    )
    return {"url": job["endpoint"] + "/" + job["bucket"], "fields": fields}


def v4_form(job, case, access_key, secret_key):
    client = boto3.client(
        "s3",
        endpoint_url=job["endpoint"],
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=job["region"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    return client.generate_presigned_post(
        job["bucket"],
        case["key"],
        Fields=case.get("fields", {}),
        Conditions=case.get("conditions", []),
        ExpiresIn=case.get("expires_in", 600),
    )


def tampered(policy_b64):
    doc = json.loads(base64.b64decode(policy_b64))
    doc["conditions"] = [
        ["starts-with", "$key", ""] if isinstance(c, list) and c[:2] == ["starts-with", "$key"] else c
        for c in doc["conditions"]
    ] + [["starts-with", "$x-amz-meta-evil", ""]]
    return base64.b64encode(json.dumps(doc).encode()).decode()


def run(job, case):
    access_key, secret_key = case.get("as", [job["access_key"], job["secret_key"]])
    sign = case.get("sign", "v4")
    if sign == "v4":
        form = v4_form(job, case, access_key, secret_key)
    elif sign == "v2":
        form = v2_form(job, case, access_key, secret_key)
    else:
        form = {"url": job["endpoint"] + "/" + job["bucket"], "fields": dict(case.get("fields", {}))}
    fields = dict(form["fields"])
    if case.get("tamper_policy"):
        fields["policy"] = tampered(fields["policy"])
    for name in case.get("drop", []):
        fields.pop(name, None)
    fields.update(case.get("set", {}))
    files = None
    if "file" in case:
        name, data, ctype = case["file"]
        files = {"file": (name, base64.b64decode(data), ctype)}
    else:
        # requests only sends multipart/form-data with a file; an empty extra part keeps
        # the body a form without a `file` field.
        files = {"x-ignore-nothing": (None, "")}
    url, headers = form["url"], {}
    if "host" in case:
        # Virtual-hosted style: the bucket in the Host, the form posted to "/".
        url, headers = job["endpoint"] + "/", {"Host": case["host"]}
    resp = requests.post(
        url, data=fields, files=files, headers=headers, allow_redirects=False, timeout=120
    )
    return {
        "name": case["name"],
        "status": resp.status_code,
        "headers": {k.lower(): v for k, v in resp.headers.items()},
        "body": resp.text,
    }


def main():
    job = json.load(sys.stdin)
    for case in job["cases"]:
        print(json.dumps(run(job, case)), flush=True)


if __name__ == "__main__":
    main()
