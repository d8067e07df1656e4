#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECS each, default 25: 13 targets, under
# 6 minutes after the build). New inputs go to a temporary corpus; the seeds in corpus/ are
# only read. A crash fails the run and leaves its input in fuzz/artifacts/<target>/: fix it,
# with a unit test in the parser's module, and add the input to corpus/<target>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

secs="${FUZZ_SECS:-25}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked
fi
# libFuzzer's instrumentation needs nightly flags: the nightly toolchain when there is
# one, else the stable compiler allowed to take them.
if rustup run nightly rustc --version >/dev/null 2>&1; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi
"${fuzz[@]}" build
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in $("${fuzz[@]}" list); do
    echo "== fuzz $target (${secs}s)"
    mkdir -p "$work/$target"
    "${fuzz[@]}" run "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
