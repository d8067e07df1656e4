#!/usr/bin/env bash
# Builds the gateway of the previous release (the commit named in scripts/previous-release)
# for the rolling-upgrade test, and prints the binary's path (also written to
# target/previous/gateway-path). The source is checked out in a git worktree under
# target/previous/src and built into this checkout's own target folder, so the
# dependencies built for the current tree are reused and only the gateway crates compile.
# Run the current tree's `cargo build -p gateway` after it: the build of the previous
# release leaves its binary at target/debug/gateway until then.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
commit="$(tr -d '[:space:]' < scripts/previous-release)"
out="$root/target/previous"
bin="$out/gateway-$commit"
if [ ! -x "$bin" ]; then
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        # A shallow clone: fetch the commit from where the clone came from, if anywhere.
        git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$commit" 2>/dev/null || true
    fi
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "scripts/previous-gateway.sh: commit $commit (scripts/previous-release) is not in this clone; clone the repository with its history" >&2
        exit 2
    fi
    mkdir -p "$out"
    src="$out/src"
    if [ -e "$src" ]; then
        git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
        git worktree prune
    fi
    git worktree add --detach "$src" "$commit" >&2
    # With the current tree's dev profile (Cargo.toml), not the old one's: the same
    # settings are what lets the dependencies' builds be shared.
    (cd "$src" && CARGO_TARGET_DIR="$root/target" cargo build -p gateway \
        --config 'profile.dev.debug="line-tables-only"' \
        --config 'profile.dev.package."*".debug=false' \
        --config 'profile.dev.package."*".opt-level=2' >&2)
    cp "$root/target/debug/gateway" "$bin.tmp"
    mv "$bin.tmp" "$bin"
    git worktree remove --force "$src"
fi
echo "$bin" > "$out/gateway-path"
echo "$bin"
