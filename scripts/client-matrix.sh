#!/usr/bin/env bash
# S3 client-compatibility matrix: real clients (aws cli, boto3, rclone, s3cmd) against one
# gateway. Every check round-trips bytes exactly (cmp / diff -r / sha256) or compares what the
# client reports with what was sent.
#
#   scripts/client-matrix.sh                  # every section: awscli boto3 rclone s3cmd
#   scripts/client-matrix.sh boto3 rclone     # only these sections
#   CLIENT_MATRIX_DEBUG=1 scripts/client-matrix.sh s3cmd   # clients' wire-level debug output
#
# Starts target/debug/gateway (or $GATEWAY_BIN) on a temp data dir with --listen 127.0.0.1:0
# and kills it on exit. Installs nothing: a missing client is a failed check (.ci/run installs
# them). Every client command runs under `timeout`; every loop is bounded. Prints one line per
# check ("ok   ..." / "FAIL ..." with the client's error output) and last exactly one line
# "client-matrix: N passed, M failed"; exits 1 if M > 0.
set -euo pipefail

# Session-specific settings must not leak into the clients (plain HTTP to 127.0.0.1 only;
# with AWS_CA_BUNDLE set Debian's rclone refuses to start). The checksum variables are unset
# so that every client runs with its own defaults.
unset AWS_CA_BUNDLE AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_REGION AWS_REQUEST_CHECKSUM_CALCULATION \
    AWS_RESPONSE_CHECKSUM_VALIDATION AWS_USE_DUALSTACK_ENDPOINT RCLONE_CONFIG \
    http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy 2>/dev/null || true
export NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${GATEWAY_BIN:-$ROOT/target/debug/gateway}"
ALL_SECTIONS=(awscli boto3 rclone s3cmd)
DEBUG="${CLIENT_MATRIX_DEBUG:-0}"
# Lines of a failed check's output to show (more with the clients' debug output on).
SHOW_LINES=40
if [ "$DEBUG" = "1" ]; then SHOW_LINES=400; fi
# Upper bound for one client command, in seconds.
CMD_TIMEOUT="${CLIENT_MATRIX_CMD_TIMEOUT:-120}"

usage() {
    echo "usage: $0 [section...]   sections: ${ALL_SECTIONS[*]}" >&2
    exit 2
}

SECTIONS=()
for arg in "$@"; do
    case "$arg" in
    awscli | boto3 | rclone | s3cmd) SECTIONS+=("$arg") ;;
    -h | --help) usage ;;
    *)
        echo "unknown section: $arg" >&2
        usage
        ;;
    esac
done
if [ "${#SECTIONS[@]}" -eq 0 ]; then
    SECTIONS=("${ALL_SECTIONS[@]}")
fi

if [ ! -x "$BIN" ]; then
    echo "build it first: cargo build -p gateway (no gateway binary at $BIN)" >&2
    exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/client-matrix.XXXXXX")"
GW_PID=""
cleanup() {
    if [ -n "$GW_PID" ]; then
        kill "$GW_PID" 2>/dev/null || true
        wait "$GW_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

export GATEWAY_ACCESS_KEY="MATRIX$(rand_hex 7 | tr 'a-f' 'A-F')"
export GATEWAY_SECRET_KEY="$(rand_hex 20)"
export GATEWAY_ADMIN_TOKEN="$(rand_hex 16)"
export AWS_ACCESS_KEY_ID="$GATEWAY_ACCESS_KEY"
export AWS_SECRET_ACCESS_KEY="$GATEWAY_SECRET_KEY"
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
# One attempt per call: a retried failure is still a failure.
export AWS_RETRY_MODE=standard
export AWS_MAX_ATTEMPTS=1
# Empty config and credentials files of our own: the clients' defaults, nothing from ~/.aws.
export AWS_CONFIG_FILE="$WORK/aws-config"
export AWS_SHARED_CREDENTIALS_FILE="$WORK/aws-credentials"
: >"$AWS_CONFIG_FILE"
: >"$AWS_SHARED_CREDENTIALS_FILE"

mkdir -p "$WORK/data"
"$BIN" serve --data "$WORK/data" --listen 127.0.0.1:0 >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GW_PID=$!

show_gateway_output() {
    echo "---- gateway stdout (tail) ----"
    tail -n 20 "$WORK/gateway.out" || true
    echo "---- gateway stderr (tail) ----"
    tail -n 40 "$WORK/gateway.err" | sed 's/\x1b\[[0-9;]*m//g' || true
}

# Wait (at most 30 s) for the one "listening on 127.0.0.1:PORT" line.
PORT=""
for _ in $(seq 1 300); do
    line="$(grep -m1 -E '^listening on 127\.0\.0\.1:[0-9]+$' "$WORK/gateway.out" || true)"
    if [ -n "$line" ]; then
        PORT="${line##*:}"
        break
    fi
    if ! kill -0 "$GW_PID" 2>/dev/null; then
        echo "the gateway exited before listening" >&2
        show_gateway_output >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "no 'listening on' line within 30 s" >&2
    show_gateway_output >&2
    exit 1
fi
ENDPOINT="http://127.0.0.1:$PORT"
echo "gateway listening on 127.0.0.1:$PORT"

PASSED=0
FAILED=0
FAILED_NAMES=()
pass() {
    PASSED=$((PASSED + 1))
    echo "ok   $1"
}
fail() {
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$1")
    echo "FAIL $1"
}
# check NAME COMMAND...: runs the command, counts it, shows the tail of its output when it
# fails. COMMAND may be a function: functions used here chain their steps with && or
# `|| return 1`, since errexit is off inside an `if`.
check() {
    local name="$1"
    shift
    if "$@" >"$WORK/check.out" 2>&1; then
        pass "$name"
    else
        fail "$name"
        tail -n "$SHOW_LINES" "$WORK/check.out" | sed 's/^/     /'
    fi
}
# require_tool SECTION COMMAND...: a missing client is a failure (install it), never a skip.
require_tool() {
    local section="$1"
    shift
    if "$@" >"$WORK/tool.out" 2>&1; then
        return 0
    fi
    local shown="$*"
    fail "$section: client installed"
    echo "     \`${shown#tmo }\` failed:"
    tail -n 10 "$WORK/tool.out" | sed 's/^/     /'
    echo "     install it: see .ci/run (apt-get install rclone; pip install awscli boto3 s3cmd)"
    return 1
}

tmo() { timeout -k 5 "$CMD_TIMEOUT" "$@"; }

# make_file PATH MIB: MIB mebibytes of random bytes.
make_file() { head -c $(($2 * 1024 * 1024)) /dev/urandom >"$1"; }

# make_tree DIR: a small tree with the names people actually use (spaces, '+', '=', '~',
# UTF-8, an empty file, nested folders).
make_tree() {
    local d="$1"
    mkdir -p "$d/sub/deeper" "$d/with space"
    printf 'top-level file\n' >"$d/a.txt"
    head -c 100000 /dev/urandom >"$d/sub/b.bin"
    printf 'deeper\n' >"$d/sub/deeper/c.txt"
    : >"$d/empty.txt"
    printf 'space\n' >"$d/with space/d e.txt"
    printf 'plus\n' >"$d/plus+sign=eq~tilde.txt"
    printf 'utf-8\n' >"$d/ünïcödé-файл.txt"
}

# fetch_url URL OUT: plain GET with curl; prints the status and body on anything but 200.
fetch_url() {
    local code
    code="$(curl -sS --max-time 60 -o "$2" -w '%{http_code}' "$1")" || return 1
    if [ "$code" != "200" ]; then
        echo "HTTP $code for GET $1"
        head -c 2000 "$2"
        echo
        return 1
    fi
}

# ---------------------------------------------------------------------------------- awscli

# 30 s without a byte from a server on 127.0.0.1 is a failure (the cli's default is 60 s).
aws_() {
    if [ "$DEBUG" = "1" ]; then
        tmo aws --debug --cli-read-timeout 30 --endpoint-url "$ENDPOINT" "$@"
    else
        tmo aws --cli-read-timeout 30 --endpoint-url "$ENDPOINT" "$@"
    fi
}

# 40 MiB with --checksum-algorithm: a composite checksum of 5 parts, read back with
# head-object --checksum-mode ENABLED. CRC32C needs the cli's CRT (awscrt); CRC32 without.
awscli_cp_checksum() {
    local alg=CRC32C out
    tmo python3 -c 'import awscrt' 2>/dev/null || alg=CRC32
    aws_ s3 cp --no-progress --checksum-algorithm "$alg" "$AD/big.bin" \
        "s3://$AB/big/40mib-$alg.bin" || return 1
    out="$(aws_ s3api head-object --bucket "$AB" --key "big/40mib-$alg.bin" \
        --checksum-mode ENABLED --query "[Checksum$alg, ChecksumType]" --output text)" ||
        return 1
    echo "head-object ($alg): $out"
    case "$out" in
    *-5*COMPOSITE*) ;;
    *)
        echo "want a $alg composite checksum of 5 parts (\"<base64>-5\", COMPOSITE)"
        return 1
        ;;
    esac
}

# 40 MiB in the cli's default 8 MiB parts: a multipart upload of 5 parts, ETag "...-5".
awscli_cp_up_multipart() {
    local etag
    aws_ s3 cp --no-progress "$AD/big.bin" "s3://$AB/big/40mib.bin" || return 1
    etag="$(aws_ s3api head-object --bucket "$AB" --key big/40mib.bin --query ETag \
        --output text)" || return 1
    echo "ETag: $etag"
    case "$etag" in
    *-5\") ;;
    *)
        echo "want a multipart ETag of 5 parts (\"<hex>-5\")"
        return 1
        ;;
    esac
}
awscli_cp_down_cmp() {
    aws_ s3 cp --no-progress "s3://$AB/big/40mib.bin" "$AD/big.down" &&
        cmp "$AD/big.bin" "$AD/big.down"
}
awscli_sync_down_diff() {
    aws_ s3 sync --no-progress "s3://$AB/tree/" "$AD/tree.down/" &&
        diff -r "$AD/tree" "$AD/tree.down"
}
awscli_put_object() {
    aws_ s3api put-object --bucket "$AB" --key "api/obj.bin" --body "$AD/api.bin" \
        --content-type application/octet-stream --metadata k=v
}
awscli_head_object() {
    local out want
    want="$(stat -c %s "$AD/api.bin")	application/octet-stream	v"
    out="$(aws_ s3api head-object --bucket "$AB" --key api/obj.bin \
        --query '[ContentLength,ContentType,Metadata.k]' --output text)" || return 1
    echo "head-object: $out"
    [ "$out" = "$want" ] || {
        echo "want: $want"
        return 1
    }
}
awscli_get_object() {
    aws_ s3api get-object --bucket "$AB" --key api/obj.bin "$AD/api.down" >"$AD/get.json" &&
        cat "$AD/get.json" && cmp "$AD/api.bin" "$AD/api.down"
}
awscli_list_v2() {
    local out want
    out="$(aws_ s3api list-objects-v2 --bucket "$AB" --prefix api/ --query 'Contents[].Key' \
        --output text)" || return 1
    want="api/obj.bin"
    echo "keys under api/: $out"
    [ "$out" = "$want" ] || {
        echo "want: $want"
        return 1
    }
}
awscli_copy_object() {
    aws_ s3api copy-object --bucket "$AB" --key api/copy.bin --copy-source "$AB/api/obj.bin" &&
        aws_ s3api get-object --bucket "$AB" --key api/copy.bin "$AD/copy.down" >/dev/null &&
        cmp "$AD/api.bin" "$AD/copy.down"
}
# Versioning through s3api in a bucket of its own: two versions, the older read back by
# id, a delete marker listed as latest, every version removed by id, the bucket deleted.
awscli_versions() {
    local vb="$AB-versions" v1 v2 listed out
    aws_ s3api create-bucket --bucket "$vb" >/dev/null &&
        aws_ s3api put-bucket-versioning --bucket "$vb" \
            --versioning-configuration Status=Enabled &&
        [ "$(aws_ s3api get-bucket-versioning --bucket "$vb" --query Status --output text)" = Enabled ] ||
        return 1
    v1="$(aws_ s3api put-object --bucket "$vb" --key k --body "$AD/tree/a.txt" \
        --query VersionId --output text)" || return 1
    v2="$(aws_ s3api put-object --bucket "$vb" --key k --body "$AD/api.bin" \
        --query VersionId --output text)" || return 1
    echo "versions: $v1 $v2"
    [ "$v1" != "$v2" ] || return 1
    aws_ s3api get-object --bucket "$vb" --key k --version-id "$v1" "$AD/v1.down" >/dev/null &&
        cmp "$AD/tree/a.txt" "$AD/v1.down" || return 1
    aws_ s3api delete-object --bucket "$vb" --key k >/dev/null || return 1
    listed="$(aws_ s3api list-object-versions --bucket "$vb" \
        --query '[length(Versions), length(DeleteMarkers), DeleteMarkers[0].IsLatest]' \
        --output text)" || return 1
    echo "versions, markers, marker latest: $listed"
    [ "$(echo "$listed" | tr -s '[:space:]' ' ')" = "2 1 True " ] || return 1
    out="$(aws_ s3api list-object-versions --bucket "$vb" \
        --query '[Versions[].VersionId, DeleteMarkers[].VersionId][]' --output text)" || return 1
    for id in $out; do
        aws_ s3api delete-object --bucket "$vb" --key k --version-id "$id" >/dev/null || return 1
    done
    aws_ s3api delete-bucket --bucket "$vb"
}
# Tags through s3api: put-object --tagging, get/put/delete-object-tagging, copy-object with
# the REPLACE directive, and bucket tagging (NoSuchTagSet once deleted).
awscli_tagging() {
    local got
    aws_ s3api put-object --bucket "$AB" --key api/tagged.bin --body "$AD/api.bin" \
        --tagging 'team=blue&note=two%20words' >/dev/null || return 1
    got="$(aws_ s3api get-object-tagging --bucket "$AB" --key api/tagged.bin \
        --query 'join(`,`, TagSet[].join(`=`, [Key, Value]))' --output text)" || return 1
    echo "tags: $got"
    [ "$got" = "team=blue,note=two words" ] || return 1
    aws_ s3api put-object-tagging --bucket "$AB" --key api/tagged.bin \
        --tagging 'TagSet=[{Key=k,Value=v}]' &&
        aws_ s3api copy-object --bucket "$AB" --key api/tagged-copy.bin \
            --copy-source "$AB/api/tagged.bin" --tagging-directive REPLACE \
            --tagging 'copied=yes' >/dev/null || return 1
    got="$(aws_ s3api get-object-tagging --bucket "$AB" --key api/tagged-copy.bin \
        --query 'TagSet[0].Key' --output text)" || return 1
    echo "copy's tag: $got"
    [ "$got" = "copied" ] || return 1
    aws_ s3api delete-object-tagging --bucket "$AB" --key api/tagged.bin &&
        got="$(aws_ s3api get-object-tagging --bucket "$AB" --key api/tagged.bin \
            --query 'length(TagSet)' --output text)" || return 1
    echo "tags left: $got"
    [ "$got" = "0" ] || return 1
    aws_ s3api put-bucket-tagging --bucket "$AB" \
        --tagging 'TagSet=[{Key=cost,Value=42}]' &&
        got="$(aws_ s3api get-bucket-tagging --bucket "$AB" \
            --query 'TagSet[0].Value' --output text)" || return 1
    echo "bucket tag: $got"
    [ "$got" = "42" ] || return 1
    aws_ s3api delete-bucket-tagging --bucket "$AB" || return 1
    if aws_ s3api get-bucket-tagging --bucket "$AB" >"$AD/tagging.out" 2>&1; then
        echo "get-bucket-tagging after delete succeeded"
        return 1
    fi
    grep -q NoSuchTagSet "$AD/tagging.out"
}
# Canned ACLs: s3 cp --acl public-read read with plain curl (no signature), get-object-acl
# naming AllUsers READ, put-object-acl private closing it again.
awscli_acl() {
    local code grants
    aws_ s3 cp --no-progress --acl public-read "$AD/api.bin" "s3://$AB/api/public.bin" &&
        fetch_url "$ENDPOINT/$AB/api/public.bin" "$AD/public.down" &&
        cmp "$AD/api.bin" "$AD/public.down" || return 1
    grants="$(aws_ s3api get-object-acl --bucket "$AB" --key api/public.bin \
        --query 'join(`,`, sort(Grants[].Permission))' --output text)" || return 1
    echo "grants: $grants"
    [ "$grants" = "FULL_CONTROL,READ" ] || return 1
    aws_ s3api put-object-acl --bucket "$AB" --key api/public.bin --acl private || return 1
    code="$(curl -sS --max-time 60 -o /dev/null -w '%{http_code}' \
        "$ENDPOINT/$AB/api/public.bin")" || return 1
    echo "anonymous GET after put-object-acl private: $code"
    [ "$code" = "403" ]
}
awscli_delete_objects() {
    local out left
    aws_ s3api put-object --bucket "$AB" --key api/del1.txt --body "$AD/tree/a.txt" >/dev/null &&
        aws_ s3api put-object --bucket "$AB" --key api/del2.txt --body "$AD/tree/a.txt" \
            >/dev/null || return 1
    out="$(aws_ s3api delete-objects --bucket "$AB" \
        --delete '{"Objects":[{"Key":"api/del1.txt"},{"Key":"api/del2.txt"}],"Quiet":false}' \
        --query '[join(`,`, sort(Deleted[].Key)), length(Errors || `[]`)]' --output text)" ||
        return 1
    echo "deleted, errors: $out"
    [ "$out" = "api/del1.txt,api/del2.txt	0" ] || return 1
    # --no-paginate: the cli's paginator drops KeyCount from the merged result.
    left="$(aws_ s3api list-objects-v2 --no-paginate --bucket "$AB" --prefix api/del \
        --query 'KeyCount' --output text)" || return 1
    echo "KeyCount under api/del after delete-objects: $left"
    [ "$left" = "0" ]
}
awscli_presign_curl() {
    local url
    # SigV4 explicitly: aws cli v1 presigns with SigV2 query auth
    # (AWSAccessKeyId/Signature/Expires) unless s3.signature_version is s3v4: a config file
    # of its own for this one command, so that nothing else changes.
    printf '[default]\ns3 =\n    signature_version = s3v4\n' >"$AD/aws-config-s3v4"
    url="$(AWS_CONFIG_FILE="$AD/aws-config-s3v4" aws_ s3 presign "s3://$AB/api/obj.bin" \
        --expires-in 300)" || return 1
    case "$url" in
    *X-Amz-Algorithm=AWS4-HMAC-SHA256*) ;;
    *)
        echo "not a SigV4 presigned URL: $url"
        return 1
        ;;
    esac
    echo "url: $url"
    fetch_url "$url" "$AD/presigned.down" && cmp "$AD/api.bin" "$AD/presigned.down"
}
awscli_presign_default_curl() {
    local url
    # With its default settings aws cli v1 presigns with SigV2 query auth
    # (AWSAccessKeyId/Signature/Expires); the gateway accepts those for GET and HEAD.
    url="$(aws_ s3 presign "s3://$AB/api/obj.bin" --expires-in 300)" || return 1
    echo "url: $url"
    fetch_url "$url" "$AD/presigned-default.down" && cmp "$AD/api.bin" "$AD/presigned-default.down"
}
awscli_rm_recursive() {
    local out
    aws_ s3 rm --recursive "s3://$AB/" || return 1
    out="$(aws_ s3 ls --recursive "s3://$AB/")" || return 1
    echo "left: $out"
    [ -z "$out" ]
}
awscli_rb() {
    local out
    aws_ s3 rb "s3://$AB" || return 1
    out="$(aws_ s3 ls)" || return 1
    echo "$out"
    ! grep -qE "[[:space:]]$AB\$" <<<"$out"
}

section_awscli() {
    echo "== awscli"
    require_tool awscli tmo aws --version || return 0
    tmo aws --version 2>&1 | sed 's/^/   /'
    AB="mx-awscli"
    AD="$WORK/awscli"
    mkdir -p "$AD"
    make_file "$AD/big.bin" 40
    make_file "$AD/api.bin" 1
    make_tree "$AD/tree"
    check "awscli: s3 mb" aws_ s3 mb "s3://$AB"
    # No multipart settings: the cli's defaults (8 MB threshold and parts) make this multipart.
    check "awscli: s3 cp up 40 MiB (multipart, default settings)" awscli_cp_up_multipart
    check "awscli: s3 cp down 40 MiB + cmp" awscli_cp_down_cmp
    check "awscli: s3 cp 40 MiB --checksum-algorithm, head-object --checksum-mode ENABLED" \
        awscli_cp_checksum
    check "awscli: s3 sync tree up" aws_ s3 sync --no-progress "$AD/tree" "s3://$AB/tree/"
    check "awscli: s3 sync tree down + diff -r" awscli_sync_down_diff
    # What makes `s3 sync` above fail at random, in a fixed order (see the script).
    check "awscli: empty PUT then PUT on one connection (the cli's botocore, Expect: 100-continue)" \
        tmo python3 "$ROOT/scripts/clients/awscli_keepalive.py" "$ENDPOINT" "$AB" "$AD"
    check "awscli: s3api put-object (content-type, metadata)" awscli_put_object
    check "awscli: s3api head-object (length, type, metadata)" awscli_head_object
    check "awscli: s3api get-object + cmp" awscli_get_object
    check "awscli: s3api list-objects-v2" awscli_list_v2
    check "awscli: s3api copy-object + get + cmp" awscli_copy_object
    check "awscli: s3api delete-objects" awscli_delete_objects
    check "awscli: s3api object and bucket tagging (put/get/delete, copy REPLACE)" awscli_tagging
    check "awscli: s3 cp --acl public-read + anonymous curl, get/put-object-acl" awscli_acl
    check "awscli: s3api versioning, get-object --version-id, list-object-versions" awscli_versions
    check "awscli: s3 presign (s3v4) + curl + cmp" awscli_presign_curl
    check "awscli: s3 presign (default settings) + curl + cmp" awscli_presign_default_curl
    check "awscli: s3 rm --recursive" awscli_rm_recursive
    check "awscli: s3 rb" awscli_rb
}

# ----------------------------------------------------------------------------------- boto3

section_boto3() {
    echo "== boto3"
    require_tool boto3 tmo python3 -c 'import boto3' || return 0
    local bd="$WORK/boto3" rc=0 ok fails
    mkdir -p "$bd"
    # 170 s: the script's own calls have 60 s read timeouts and one attempt each.
    timeout -k 5 170 python3 "$ROOT/scripts/clients/boto3_matrix.py" "$ENDPOINT" mx-boto3 "$bd" \
        >"$bd/out" 2>"$bd/err" || rc=$?
    cat "$bd/out"
    ok="$(grep -c '^ok   ' "$bd/out" || true)"
    fails="$(grep -c '^FAIL ' "$bd/out" || true)"
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + fails))
    while IFS= read -r l; do FAILED_NAMES+=("${l#FAIL }"); done < <(grep '^FAIL ' "$bd/out" || true)
    if [ "$rc" -ne 0 ] || ! grep -q '^boto3 checks: ' "$bd/out"; then
        fail "boto3: scripts/clients/boto3_matrix.py ran to its end (exit $rc)"
        tail -n 40 "$bd/err" | sed 's/^/     /'
    elif [ "$DEBUG" = "1" ]; then
        cat "$bd/err"
    fi
}

# ---------------------------------------------------------------------------------- rclone

rc_() {
    local extra=()
    if [ "$DEBUG" = "1" ]; then extra=(-vv --dump headers); fi
    tmo rclone --config "$WORK/rclone.conf" --retries 1 --low-level-retries 1 \
        --contimeout 10s --timeout 60s "${extra[@]}" "$@"
}
# The multipart settings: 30 MiB goes up in 5 MiB parts.
RC_MP=(--s3-upload-cutoff 8M --s3-chunk-size 5M)

rclone_mkdir() {
    local out
    rc_ mkdir "gw:$RB" || return 1
    out="$(rc_ lsd gw:)" || return 1
    echo "$out"
    grep -qE " $RB\$" <<<"$out"
}
# rclone_check: `rclone check` must exit 0 and say "0 differences found".
rclone_check() {
    rc_ check "$RD/tree" "gw:$RB" >"$RD/check.log" 2>&1
    local rc=$?
    cat "$RD/check.log"
    [ "$rc" -eq 0 ] && grep -q ' 0 differences found' "$RD/check.log"
}
rclone_sync_modified() {
    # Change one file (other size and content), delete one (and its folder, now empty: S3 has
    # no empty folders to copy back down), add one.
    printf 'top-level file, changed by the rclone section\n' >"$RD/tree/a.txt" &&
        rm "$RD/tree/sub/deeper/c.txt" && rmdir "$RD/tree/sub/deeper" &&
        printf 'new\n' >"$RD/tree/sub/new.txt" &&
        rc_ sync "${RC_MP[@]}" "$RD/tree" "gw:$RB"
}
rclone_lsf() {
    local want got
    want="$(cd "$RD/tree" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)"
    got="$(rc_ lsf -R --files-only "gw:$RB" | LC_ALL=C sort)" || return 1
    echo "lsf:"
    echo "$got"
    [ "$got" = "$want" ] || {
        echo "want:"
        echo "$want"
        return 1
    }
}
rclone_copy_down() {
    rc_ copy "gw:$RB" "$RD/down" && diff -r "$RD/tree" "$RD/down"
}
rclone_delete() {
    local out
    rc_ delete "gw:$RB" || return 1
    out="$(rc_ lsf -R "gw:$RB")" || return 1
    echo "left: $out"
    [ -z "$out" ]
}
rclone_rmdir() {
    local out
    rc_ rmdir "gw:$RB" || return 1
    out="$(rc_ lsd gw:)" || return 1
    echo "$out"
    ! grep -qE " $RB\$" <<<"$out"
}

section_rclone() {
    echo "== rclone"
    require_tool rclone tmo rclone version || return 0
    tmo rclone version 2>&1 | sed -n '1s/^/   /p'
    RB="mx-rclone"
    RD="$WORK/rclone"
    mkdir -p "$RD"
    : >"$WORK/rclone.conf"
    export RCLONE_CONFIG_GW_TYPE=s3
    export RCLONE_CONFIG_GW_PROVIDER=Other
    export RCLONE_CONFIG_GW_ENDPOINT="$ENDPOINT"
    export RCLONE_CONFIG_GW_ACCESS_KEY_ID="$GATEWAY_ACCESS_KEY"
    export RCLONE_CONFIG_GW_SECRET_ACCESS_KEY="$GATEWAY_SECRET_KEY"
    export RCLONE_CONFIG_GW_REGION=us-east-1
    export RCLONE_CONFIG_GW_FORCE_PATH_STYLE=true
    make_tree "$RD/tree"
    make_file "$RD/tree/sub/30mib.bin" 30
    check "rclone: mkdir (bucket)" rclone_mkdir
    check "rclone: copy tree with a 30 MiB file (multipart, 5M chunks)" \
        rc_ copy "${RC_MP[@]}" "$RD/tree" "gw:$RB"
    check "rclone: check after copy (0 differences)" rclone_check
    check "rclone: sync after modify/delete/add" rclone_sync_modified
    check "rclone: check after sync (0 differences)" rclone_check
    check "rclone: lsf lists exactly the local files" rclone_lsf
    check "rclone: copy down + diff -r" rclone_copy_down
    check "rclone: delete (all files)" rclone_delete
    check "rclone: rmdir (bucket)" rclone_rmdir
}

# ---------------------------------------------------------------------------------- s3cmd

s3c_() {
    local extra=()
    if [ "$DEBUG" = "1" ]; then extra=(-d); fi
    tmo s3cmd -c "$SD/s3cfg" --no-progress "${extra[@]}" "$@"
}

s3cmd_ls() {
    local out small big
    small="$(stat -c %s "$SD/small.txt")"
    big="$(stat -c %s "$SD/big.bin")"
    out="$(s3c_ ls "s3://$SB")" || return 1
    echo "$out"
    grep -qE "[[:space:]]$small[[:space:]]+s3://$SB/small\.txt\$" <<<"$out" &&
        grep -qE "[[:space:]]$big[[:space:]]+s3://$SB/big\.bin\$" <<<"$out"
}
s3cmd_get() {
    s3c_ get "s3://$SB/$1" "$SD/$1.down" && cmp "$SD/$1" "$SD/$1.down"
}
s3cmd_del() {
    local out
    s3c_ del "s3://$SB/small.txt" "s3://$SB/big.bin" || return 1
    out="$(s3c_ ls "s3://$SB")" || return 1
    echo "left: $out"
    [ -z "$out" ]
}
s3cmd_rb() {
    local out
    s3c_ rb "s3://$SB" || return 1
    out="$(s3c_ ls)" || return 1
    echo "$out"
    ! grep -q "s3://$SB\$" <<<"$out"
}

section_s3cmd() {
    echo "== s3cmd"
    require_tool s3cmd tmo s3cmd --version || return 0
    tmo s3cmd --version 2>&1 | sed 's/^/   /'
    SB="mx-s3cmd"
    SD="$WORK/s3cmd"
    mkdir -p "$SD"
    # host_bucket without %(bucket)s: path-style requests.
    cat >"$SD/s3cfg" <<EOF
[default]
access_key = $GATEWAY_ACCESS_KEY
secret_key = $GATEWAY_SECRET_KEY
host_base = 127.0.0.1:$PORT
host_bucket = 127.0.0.1:$PORT
bucket_location = us-east-1
use_https = False
signature_v2 = False
check_ssl_certificate = False
proxy_host =
multipart_chunk_size_mb = 5
EOF
    printf 'a small file for s3cmd\n' >"$SD/small.txt"
    make_file "$SD/big.bin" 20
    check "s3cmd: mb" s3c_ mb "s3://$SB"
    check "s3cmd: put small" s3c_ put "$SD/small.txt" "s3://$SB/small.txt"
    check "s3cmd: put 20 MiB (multipart, 5 MB chunks)" \
        s3c_ put --multipart-chunk-size-mb=5 "$SD/big.bin" "s3://$SB/big.bin"
    check "s3cmd: ls (both objects with sizes)" s3cmd_ls
    check "s3cmd: get small + cmp" s3cmd_get small.txt
    check "s3cmd: get 20 MiB + cmp" s3cmd_get big.bin
    check "s3cmd: del" s3cmd_del
    check "s3cmd: rb" s3cmd_rb
}

# ------------------------------------------------------------------------------------ main

START=$SECONDS
for s in "${SECTIONS[@]}"; do
    t0=$SECONDS
    "section_$s"
    echo "   ($s: $((SECONDS - t0)) s)"
    if ! kill -0 "$GW_PID" 2>/dev/null; then
        fail "gateway still running after the $s section"
        break
    fi
done

if [ "$FAILED" -ne 0 ]; then
    show_gateway_output
    echo "---- failed checks ----"
    for n in "${FAILED_NAMES[@]}"; do echo "  $n"; done
fi
echo "(total $((SECONDS - START)) s)"
echo "client-matrix: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
