#!/usr/bin/env bash
# Instruction profiles of the write path: a gateway binary under valgrind --tool=callgrind,
# driven by a real SigV4 client (curl --aws-sigv4), one profile per phase.
#
# Usage: bench/callgrind.sh GATEWAY_BIN OUT_DIR
#
#   GATEWAY_BIN  the gateway binary to profile (a release build: it keeps line tables)
#   OUT_DIR      created if missing; gets per phase PHASE.callgrind (the profile),
#                PHASE.self.txt and PHASE.inclusive.txt (callgrind_annotate, by self and by
#                inclusive cost), PHASE.functions.txt (self cost per function, whatever source
#                file its inlined code came from: Ir, share of the phase, syscalls made),
#                PHASE.functions-inclusive.txt (the same, inclusive),
#                PHASE.syscalls.txt (the functions that made syscalls, most first) and
#                summary.txt (instructions and syscalls per request of each phase)
#
# Environment (all optional):
#   CG_SMALL=300          unique 64 KiB PUTs            (phase "small")
#   CG_BIG=10             unique 8 MiB PUTs             (phase "big")
#   CG_DUP=300            one 64 KiB body under CG_DUP keys, stored once before (phase "dup")
#   CG_SEED=20261124      seed of the bodies: the same seed gives the same bytes, so two
#                         binaries hash, name and place the same content
#   CG_START_SECS=300     longest wait for the gateway's "listening on" line
#   CG_PHASE_SECS=3600    longest wait for one phase's client
#   CG_RUNNING_FILE=      a file that exists while valgrind runs (others can avoid
#                         benchmarking then), removed on exit
#
# What is measured: the gateway starts on a fresh data folder with --listen 127.0.0.1:0 (it
# picks a free port and prints it), the bootstrap key from GATEWAY_ACCESS_KEY /
# GATEWAY_SECRET_KEY, Valkyrie's scrub and the stats scan pushed a day away so that no
# background pass lands in a phase. A warm-up (one bucket, a few PUTs of other bodies, the
# duplicate body's first copy) runs, then the counters are reset; each phase is one curl
# process that sends its PUTs one after the other on one kept-alive connection, then
# `callgrind_control --dump` writes the phase's profile and resets the counters. All
# threads are collected (valgrind runs them one at a time, which changes timing, not the
# instruction count). Callgrind counts user-space instructions only: what the kernel does
# for a syscall (copies into the page cache, fsync, syncfs) is not in Ir; --collect-systime
# counts the syscalls themselves (sysCount; the sysTime event beside it is wall time under
# valgrind, not worth comparing).
#
# Needs: valgrind (callgrind_control, callgrind_annotate), curl >= 7.75 (--aws-sigv4), openssl.

set -euo pipefail

if [[ $# -ne 2 ]]; then
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
gateway_bin=$(realpath "$1")
out_dir=$2
[[ -x $gateway_bin ]] || { echo "not an executable: $gateway_bin" >&2; exit 2; }
for tool in valgrind callgrind_control callgrind_annotate curl openssl; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done

small_n=${CG_SMALL:-300}
big_n=${CG_BIG:-10}
dup_n=${CG_DUP:-300}
seed=${CG_SEED:-20261124}
start_secs=${CG_START_SECS:-300}
phase_secs=${CG_PHASE_SECS:-3600}
running_file=${CG_RUNNING_FILE:-}
for n in "$small_n" "$big_n" "$dup_n" "$start_secs" "$phase_secs"; do
    [[ $n =~ ^[1-9][0-9]{0,6}$ ]] || { echo "not a count from 1 to 9999999: $n" >&2; exit 2; }
done

access_key=callgrindkey
secret_key=callgrindsecret0123456789
small_bytes=65536
big_bytes=$((8 * 1024 * 1024))
warm_n=20

mkdir -p "$out_dir"
out_dir=$(realpath "$out_dir")
work=$(mktemp -d "${TMPDIR:-/tmp}/callgrind.XXXXXX")
gateway_pid=
client_pid=

cleanup() {
    local status=$?
    if [[ -n $client_pid ]]; then
        kill -TERM "$client_pid" 2>/dev/null || true
        wait "$client_pid" 2>/dev/null || true
    fi
    if [[ -n $gateway_pid ]] && kill -0 "$gateway_pid" 2>/dev/null; then
        kill -TERM "$gateway_pid" 2>/dev/null || true
        # valgrind writes its last dump on the way out: a bounded wait, then the hard way
        for _ in $(seq 1 120); do
            kill -0 "$gateway_pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$gateway_pid" 2>/dev/null || true
        wait "$gateway_pid" 2>/dev/null || true
    fi
    [[ -n $running_file ]] && rm -f "$running_file"
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'echo "$0: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT TERM

# Bodies: one AES-CTR keystream cut into pieces, so that the seed fixes every byte.
# $1 folder, $2 count, $3 size, $4 stream name (distinct streams give distinct bodies)
make_bodies() {
    mkdir -p "$1"
    head -c $(($2 * $3)) /dev/zero |
        openssl enc -aes-128-ctr -nosalt -pbkdf2 -pass "pass:$seed-$4" |
        (cd "$1" && split -a 5 -d -b "$3" - body.)
    local made
    made=$(find "$1" -name 'body.*' | wc -l)
    [[ $made -eq $2 ]] || { echo "made $made of $2 bodies in $1" >&2; return 1; }
}

sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret_key"
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")

# PUTs every body of folder $1 (or the one file $1 $3 times) under keys $2/NNNNN, in one
# curl process on one connection; fails unless every answer is 200.
put_all() {
    local src=$1 prefix=$2 repeat=${3:-0} config=$work/curl.cfg i=0 f
    : >"$config"
    if [[ $repeat -gt 0 ]]; then
        for i in $(seq -w 1 "$repeat"); do
            printf 'url = "%s/bkt/%s/%s"\nupload-file = "%s"\n' "$base" "$prefix" "$i" "$src" >>"$config"
        done
    else
        for f in "$src"/body.*; do
            printf 'url = "%s/bkt/%s/%s"\nupload-file = "%s"\n' "$base" "$prefix" "${f##*.}" "$f" >>"$config"
        done
    fi
    local want codes bad
    want=$(grep -c '^url' "$config")
    # In the background and waited for, so that a signal to this script is handled at once
    timeout "$phase_secs" curl -sS -o /dev/null -w '%{http_code}\n' \
        --max-time "$phase_secs" "${sign[@]}" -K "$config" >"$work/codes" &
    client_pid=$!
    wait "$client_pid"
    client_pid=
    codes=$(<"$work/codes")
    bad=$(grep -vc '^200$' <<<"$codes" || true)
    if [[ $(wc -l <<<"$codes") -ne $want || $bad -ne 0 ]]; then
        echo "$prefix: $bad of $want PUTs not answered 200" >&2
        return 1
    fi
}

control() {
    timeout 300 callgrind_control --vgdb-prefix="$work/vgdb" "$@" "$gateway_pid" \
        >"$work/control.log" 2>&1 || { cat "$work/control.log" >&2; return 1; }
}

# Dumps the counters since the last dump to file $2 (named $1 inside) and resets them. Each
# dump is moved away at once, so the new one is the only cg.out.N in $work.
dump_to() {
    local dumps
    control --dump="$1"
    mapfile -t dumps < <(find "$work" -maxdepth 1 -name 'cg.out.*')
    [[ ${#dumps[@]} -eq 1 ]] || { echo "expected one dump for $1, found ${#dumps[@]}" >&2; return 1; }
    mv "${dumps[0]}" "$2"
}

echo "bodies (seed $seed) ..." >&2
make_bodies "$work/warm" "$warm_n" "$small_bytes" warm
make_bodies "$work/small" "$small_n" "$small_bytes" small
make_bodies "$work/big" "$big_n" "$big_bytes" big
make_bodies "$work/warmbig" 1 "$big_bytes" warmbig
make_bodies "$work/dup" 1 "$small_bytes" dup

mkdir "$work/data"
: >"$work/stdout.log"
[[ -n $running_file ]] && touch "$running_file"
GATEWAY_ACCESS_KEY=$access_key GATEWAY_SECRET_KEY=$secret_key \
    nice -n 10 valgrind --tool=callgrind --dump-instr=no --collect-systime=yes \
    --callgrind-out-file="$work/cg.out" --vgdb-prefix="$work/vgdb" \
    --log-file="$work/valgrind.log" \
    "$gateway_bin" serve --data "$work/data" --listen 127.0.0.1:0 \
    --scrub-interval-secs 86400 --stats-scan-secs 86400 \
    >"$work/stdout.log" 2>"$work/stderr.log" </dev/null &
gateway_pid=$!

port=
for _ in $(seq 1 $((start_secs * 2))); do
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/stdout.log")
    [[ -n $port ]] && break
    kill -0 "$gateway_pid" 2>/dev/null || break
    sleep 0.5
done
if [[ -z $port ]]; then
    echo "the gateway did not print 'listening on' within ${start_secs}s:" >&2
    tail -n 20 "$work/stderr.log" "$work/valgrind.log" >&2
    exit 1
fi
base=http://127.0.0.1:$port
echo "gateway under callgrind at $base (pid $gateway_pid)" >&2

code=$(timeout 300 curl -sS -o /dev/null -w '%{http_code}' "${sign[@]}" -X PUT "$base/bkt")
[[ $code == 200 ]] || { echo "CreateBucket answered $code" >&2; exit 1; }
put_all "$work/warm" warm
put_all "$work/warmbig" warmbig
put_all "$work/dup/body.00000" dupfirst 1
# The warm-up's counters are dumped and dropped: in valgrind 3.19 `callgrind_control --zero`
# resets the instruction counts but not the syscall counts, a dump resets both.
dump_to warmup "$work/warmup.callgrind"

phases=(small big dup)
declare -A requests=([small]=$small_n [big]=$big_n [dup]=$dup_n)
for phase in "${phases[@]}"; do
    echo "phase $phase: ${requests[$phase]} PUTs ..." >&2
    case $phase in
    small) put_all "$work/small" small ;;
    big) put_all "$work/big" big ;;
    dup) put_all "$work/dup/body.00000" dup "$dup_n" ;;
    esac
    dump_to "$phase" "$out_dir/$phase.callgrind"
done

# Cost per function, summed over the source files its code came from (callgrind_annotate
# lists a function once per file inlined into it). Lines "S Ir share% syscalls name [object]"
# (self cost) and "I Ir share% name [object]" (inclusive: the calls into it from other
# functions; a function that calls itself through others is counted once per level).
cost_by_function() {
    awk '
        function define(kind, s,    id, name) {
            # "(id) name" defines a compressed name, "(id)" uses it, "name" is uncompressed
            if (match(s, /^\([0-9]+\)/)) {
                id = kind substr(s, 2, RLENGTH - 2); name = substr(s, RLENGTH + 2)
                if (name != "") names[id] = name
                return id
            }
            names[kind s] = s
            return kind s
        }
        function object(f,    o) { o = names[obj[f]]; sub(/.*\//, "", o); return o }
        /^events:/ { for (i = 2; i <= NF; i++) if ($i == "sysCount") sys_col = i; next }
        /^ob=/ { ob = define("ob", substr($0, 4)); next }
        /^cob=/ { cob = define("ob", substr($0, 5)); next }
        /^fn=/ { fn = define("fn", substr($0, 4)); obj[fn] = ob; after_call = 0; cob = ""; next }
        /^cfn=/ {
            callee = define("fn", substr($0, 5))
            if (!(callee in obj)) obj[callee] = cob != "" ? cob : ob
            cob = ""
            next
        }
        /^calls=/ { after_call = 1; next }
        /^totals:/ { total = $2; next }
        /^[0-9+*-]/ {
            if (after_call) {  # a call line: the inclusive cost of the callee
                after_call = 0
                if (callee != fn) incl[callee] += $2
                next
            }
            ir[fn] += $2
            if (sys_col) sys[fn] += $sys_col
        }
        END {
            for (f in ir) if (ir[f] > 0 || sys[f] > 0)
                printf "S %15d %6.2f%% %9d  %s [%s]\n", ir[f], 100 * ir[f] / total, sys[f], names[f], object(f)
            for (f in incl) if (incl[f] > 0)
                printf "I %15d %6.2f%%  %s [%s]\n", incl[f], 100 * incl[f] / total, names[f], object(f)
        }
    ' "$1"
}

for phase in "${phases[@]}"; do
    profile=$out_dir/$phase.callgrind
    # Functions already on a stack when the counters were reset have "calls=0" lines, which
    # callgrind_annotate 3.19 counts as self cost of the caller: annotate a copy without them.
    sed 's/^calls=0 /calls=1 /' "$profile" >"$work/annotate.callgrind"
    callgrind_annotate --auto=no "$work/annotate.callgrind" >"$out_dir/$phase.self.txt"
    callgrind_annotate --auto=no --inclusive=yes "$work/annotate.callgrind" >"$out_dir/$phase.inclusive.txt"
    cost_by_function "$profile" >"$work/costs.txt"
    sed -n 's/^S //p' "$work/costs.txt" | sort -k1,1nr >"$out_dir/$phase.functions.txt"
    # Inclusive, without the copies callgrind names fn'2, fn'3 for deeper recursion levels
    sed -n 's/^I //p' "$work/costs.txt" | grep -v "'[0-9]* \[" | sort -k1,1nr \
        >"$out_dir/$phase.functions-inclusive.txt"
    # Syscalls by the function that made them (mostly libc's wrappers), most first.
    awk '$3 > 0' "$out_dir/$phase.functions.txt" | sort -k3,3nr >"$out_dir/$phase.syscalls.txt"
done

# Syscalls whose count follows the timing (valgrind has no vDSO, so every clock read is a
# syscall; futex, through libc's syscall(), and epoll_wait count wake-ups and waits) are
# counted apart from the rest, which the requests themselves make.
{
    echo "binary: $gateway_bin"
    echo "bodies: seed $seed; small $small_n x 64 KiB unique, big $big_n x 8 MiB unique, dup $dup_n x one 64 KiB body"
    printf '%-6s %9s %14s %14s %14s %14s\n' phase requests 'Ir total' 'Ir/request' 'syscalls/req' 'of which timed'
    for phase in "${phases[@]}"; do
        # "totals: Ir sysCount sysTime" (events in that order, see --collect-systime)
        read -r total syscalls _ < <(sed -n 's/^totals: *//p' "$out_dir/$phase.callgrind")
        timed=$(awk '$4 ~ /^(clock_gettime|syscall$|epoll_wait$)/ { n += $3 } END { print n + 0 }' \
            "$out_dir/$phase.syscalls.txt")
        printf '%-6s %9d %14d %14d %14s %14s\n' "$phase" "${requests[$phase]}" "$total" \
            $((total / requests[$phase])) \
            "$(awk -v s="$syscalls" -v n="${requests[$phase]}" 'BEGIN { printf "%.1f", s / n }')" \
            "$(awk -v s="$timed" -v n="${requests[$phase]}" 'BEGIN { printf "%.1f", s / n }')"
    done
} | tee "$out_dir/summary.txt"
echo "profiles and annotations in $out_dir" >&2
