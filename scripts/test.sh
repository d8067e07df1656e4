#!/usr/bin/env bash
# The project's test command (the README's second line): installs what the tests need,
# builds the previous release's gateway for the rolling-upgrade test, then builds every
# target of the workspace (the gateway binary among them) and runs every test. Extra
# arguments go to `cargo test`.
#
# Needs, and installs with apt-get when run as root: nginx with its dav modules (the
# WebDAV storage-node tests), iptables (the partition test, which also needs root for
# its network namespaces) and rclone (the HTTPS tests). Without root, a missing one is
# named and the script stops. boto3, the aws cli and s3cmd (the HTTPS tests) come from
# pip, into the user's site.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
[ -x /usr/sbin/nginx ] || missing+=(nginx-full)
# The HTTPS tests (tests/tests/tls.rs) drive rclone, s3cmd, boto3 and the aws cli.
command -v rclone >/dev/null 2>&1 || missing+=(rclone)
[ -e /usr/lib/nginx/modules/ngx_http_dav_ext_module.so ] || missing+=(libnginx-mod-http-dav-ext)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/test.sh: the tests need ${missing[*]}; install them (apt-get install -y ${missing[*]}) or run this as root" >&2
        exit 2
    fi
    echo "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
fi

python_missing=()
python3 -c 'import boto3' 2>/dev/null || python_missing+=(boto3)
command -v aws >/dev/null 2>&1 || python_missing+=(awscli)
command -v s3cmd >/dev/null 2>&1 || python_missing+=(s3cmd)
if [ ${#python_missing[@]} -gt 0 ]; then
    echo "installing ${python_missing[*]} (pip install --user)"
    python3 -m pip install --quiet --user "${python_missing[@]}"
    if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
fi
export PATH="$HOME/.local/bin:$PATH"

echo "== the previous release's gateway (rolling-upgrade test)"
GATEWAY_PREVIOUS_BIN="$(bash scripts/previous-gateway.sh)"
export GATEWAY_PREVIOUS_BIN
echo "GATEWAY_PREVIOUS_BIN=$GATEWAY_PREVIOUS_BIN"

# One feature set for every target: `cargo build -p gateway` alone resolves the
# dependencies' features without the test targets' (tokio's test-util, ...) and built tokio
# and everything above it (hyper, axum, the AWS SDK, ...) a second time, minutes of CI. The
# binaries the e2e tests and the benchmark run (target/debug/gateway, bench, filedb) come
# out of this one build.
echo "== cargo build --workspace --all-targets --features bench/filedb && cargo test --workspace --features bench/filedb"
cargo build --workspace --all-targets --features bench/filedb
cargo test --workspace --features bench/filedb "$@"
