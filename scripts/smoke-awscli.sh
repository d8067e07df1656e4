#!/usr/bin/env bash
# Smoke test of a started gateway with the aws cli: mb, cp up and down (40 MiB, which goes
# multipart), sync, ls, s3api calls, presign fetched with curl, rm, rb. It is the awscli
# section of the client matrix, which starts target/debug/gateway (or $GATEWAY_BIN) on a
# temp data folder and prints "client-matrix: N passed, M failed".
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/client-matrix.sh" awscli
