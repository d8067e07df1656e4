#!/usr/bin/env bash
# Smoke test of the gateway with the aws cli: mb, cp up (10 MiB and small), ls, cp down and
# cmp, rm, rb. Starts target/debug/gateway (or $GATEWAY_BIN) on a temp data dir with
# --listen 127.0.0.1:0 and kills it on exit. Prints "awscli smoke: N passed, M failed".
set -euo pipefail

# Session-specific settings must not leak into the cli (no TLS here anyway).
unset AWS_CA_BUNDLE AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_REGION 2>/dev/null || true

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${GATEWAY_BIN:-$ROOT/target/debug/gateway}"
if [ ! -x "$BIN" ]; then
    echo "build it first: cargo build -p gateway (no gateway binary at $BIN)" >&2
    exit 1
fi
if ! aws --version >/dev/null 2>&1; then
    echo "the aws cli is missing: pip install awscli" >&2
    exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/smoke-awscli.XXXXXX")"
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

export GATEWAY_ACCESS_KEY="SMOKE$(rand_hex 8 | tr 'a-f' 'A-F')"
export GATEWAY_SECRET_KEY="$(rand_hex 20)"
export GATEWAY_ADMIN_TOKEN="$(rand_hex 16)"
export AWS_ACCESS_KEY_ID="$GATEWAY_ACCESS_KEY"
export AWS_SECRET_ACCESS_KEY="$GATEWAY_SECRET_KEY"
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
# One attempt per command: a retried failure is still a failure.
export AWS_RETRY_MODE=standard
export AWS_MAX_ATTEMPTS=1
# A config of our own: single PUTs up to 64 MB (the gateway has no multipart yet).
export AWS_CONFIG_FILE="$WORK/aws-config"
export AWS_SHARED_CREDENTIALS_FILE="$WORK/aws-credentials"
: >"$AWS_SHARED_CREDENTIALS_FILE"
aws configure set default.s3.multipart_threshold 64MB
aws configure set default.s3.multipart_chunksize 64MB

mkdir -p "$WORK/data"
"$BIN" serve --data "$WORK/data" --listen 127.0.0.1:0 >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GW_PID=$!

show_gateway_output() {
    echo "---- gateway stdout (tail) ----" >&2
    tail -n 40 "$WORK/gateway.out" >&2 || true
    echo "---- gateway stderr (tail) ----" >&2
    tail -n 80 "$WORK/gateway.err" >&2 || true
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
        show_gateway_output
        exit 1
    fi
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "no 'listening on' line within 30 s" >&2
    show_gateway_output
    exit 1
fi
echo "gateway listening on 127.0.0.1:$PORT"

awss3() { aws --endpoint-url "http://127.0.0.1:$PORT" s3 "$@"; }

PASSED=0
FAILED=0
# step NAME COMMAND...: runs the command, counts it, shows its output when it fails.
step() {
    local name="$1"
    shift
    if "$@" >"$WORK/step.out" 2>&1; then
        PASSED=$((PASSED + 1))
        echo "ok   $name"
    else
        FAILED=$((FAILED + 1))
        echo "FAIL $name"
        sed 's/^/     /' "$WORK/step.out"
    fi
}

BUCKET="smoke-bucket"
head -c $((10 * 1024 * 1024)) /dev/urandom >"$WORK/big.bin"
printf 'a small file for the aws cli smoke test\n' >"$WORK/small.txt"

lists_bucket() {
    local out
    out="$(awss3 ls)" || return 1
    echo "$out"
    grep -qE "[[:space:]]$BUCKET\$" <<<"$out"
}
lists_no_bucket() {
    local out
    out="$(awss3 ls)" || return 1
    echo "$out"
    ! grep -qE "[[:space:]]$BUCKET\$" <<<"$out"
}
lists_both_files() {
    local out big_size small_size
    big_size="$(stat -c %s "$WORK/big.bin")"
    small_size="$(stat -c %s "$WORK/small.txt")"
    out="$(awss3 ls "s3://$BUCKET/")" || return 1
    echo "$out"
    grep -qE "[[:space:]]$big_size big\.bin\$" <<<"$out" &&
        grep -qE "[[:space:]]$small_size small\.txt\$" <<<"$out"
}
lists_nothing() {
    local out
    out="$(awss3 ls "s3://$BUCKET/")" || return 1
    echo "$out"
    [ -z "$out" ]
}
download_and_cmp() {
    awss3 cp --no-progress "s3://$BUCKET/$1" "$WORK/down-$1" && cmp "$WORK/$1" "$WORK/down-$1"
}

step "s3 mb" awss3 mb "s3://$BUCKET"
step "s3 ls lists the bucket" lists_bucket
step "s3 cp up 10 MiB" awss3 cp --no-progress "$WORK/big.bin" "s3://$BUCKET/big.bin"
step "s3 cp up small" awss3 cp --no-progress "$WORK/small.txt" "s3://$BUCKET/small.txt"
step "s3 ls lists both files with sizes" lists_both_files
step "s3 cp down 10 MiB and cmp" download_and_cmp big.bin
step "s3 cp down small and cmp" download_and_cmp small.txt
step "s3 rm 10 MiB" awss3 rm "s3://$BUCKET/big.bin"
step "s3 rm small" awss3 rm "s3://$BUCKET/small.txt"
step "s3 ls of the emptied bucket is empty" lists_nothing
step "s3 rb" awss3 rb "s3://$BUCKET"
step "s3 ls no longer lists the bucket" lists_no_bucket

if ! kill -0 "$GW_PID" 2>/dev/null; then
    echo "the gateway died during the smoke test" >&2
    FAILED=$((FAILED + 1))
fi
if [ "$FAILED" -ne 0 ]; then
    show_gateway_output
fi
echo "awscli smoke: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
