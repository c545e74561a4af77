#!/usr/bin/env bash
# Redis saving its dataset in the background (BGSAVE) while it answers: issue 35's gate for
# copy-on-write fork (500 MiB of data; the memory during the save at most 1.3x before it).
#
#   scripts/bench-redis-bgsave.sh [MIB] > docs/results/redis-bgsave.md
#
# Debian's redis-server (the `servers` root of scripts/build-rootfs.sh), natively in a chroot
# of that root and in torpor on each platform this host has (KVM where /dev/kvm opens, and
# trap, copying with TORPOR_COW_FORK=0 and sharing copy-on-write, its default), one after the
# other. For each: DEBUG POPULATE fills MIB MiB (default 500) in 1 KiB values; then BGSAVE
# forks the saving child while redis-benchmark (on the host) runs GETs and SETs of random
# keys; memory is sampled every 100 ms until the save ends. Reported: the memory before the
# save, its peak during it, their ratio, the save's duration, and the throughput and p99
# latency of the benchmark run across the save (it starts 0.5 s before the BGSAVE and may
# end before or after it). Memory: natively the PSS of the server's process tree
# (smaps_rollup), in torpor `torpor stats`' pss_bytes (the holder and its stub processes).
# Needs root, the servers root, redis-cli and redis-benchmark (redis-tools). Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-500}
torpor=$PWD/target/release/torpor
cargo build --release -q -p torpor
root=$(scripts/build-rootfs.sh servers)
state=$(mktemp -d /tmp/torpor-bench-bgsave.XXXXXX)
export TORPOR_STATE_DIR=$state
port=16579
native_pid=
cleanup() {
    $torpor delete --force rd >/dev/null 2>&1 || true
    if [ -n "$native_pid" ]; then kill -9 "$native_pid" 2>/dev/null || true; fi
    rm -rf "$state" "$root/tmp/bgsave-native"
}
trap cleanup EXIT

keys=$((mib * 1024))
server_args=(--port 6379 --save "" --appendonly no --enable-debug-command yes)

tree_pss() { # tree_pss PID: the PSS of PID and its descendants, bytes
    local total=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        local kb
        kb=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + ${kb:-0} * 1024))
    done
    echo $total
}
mib_of() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
cli() { redis-cli -p "$port" "$@"; }
saving() { cli info persistence | grep -q '^rdb_bgsave_in_progress:1'; }

# measure NAME PSS_CMD: fills the server, then BGSAVE under load; prints a table row.
measure() {
    local name=$1 pss_cmd=$2
    until cli ping >/dev/null 2>&1; do sleep 0.05; done
    cli debug populate "$keys" key 1024 >/dev/null
    sleep 1
    local before peak now t0 t1 bench
    before=$($pss_cmd)
    peak=$before
    bench=$(mktemp)
    redis-benchmark -p "$port" -q -n 200000 -r "$keys" -d 1024 -t get,set --csv >"$bench" 2>/dev/null &
    local bench_pid=$!
    sleep 0.5
    t0=$(date +%s%N)
    cli bgsave >/dev/null
    until ! saving; do
        now=$($pss_cmd)
        if [ "$now" -gt "$peak" ]; then peak=$now; fi
        sleep 0.1
    done
    t1=$(date +%s%N)
    wait "$bench_pid" || true
    local saved
    saved=$(cli info persistence | awk -F: '/^rdb_last_bgsave_status/ {print $2}' | tr -d '\r')
    local rps p99
    rps=$(python3 - "$bench" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0] if rows else []
get = lambda r, k: r[head.index(k)] if k in head else "?"
print(", ".join("%s %s rps, p99 %s ms" % (r[0], get(r, "rps").split(".")[0], get(r, "p99_latency_ms")) for r in rows[1:]))
PY
)
    rm -f "$bench"
    echo "| $name | $(mib_of "$before") | $(mib_of "$peak") | $(awk -v a="$peak" -v b="$before" 'BEGIN {printf "%.2f", a / b}') | $(((t1 - t0) / 1000000)) ms, $saved | $rps |"
}

echo "# Redis BGSAVE while answering"
echo
echo "\`scripts/bench-redis-bgsave.sh $mib\`, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r), torpor $(git rev-parse --short HEAD);"
echo "$keys keys of 1 KiB (DEBUG POPULATE), then BGSAVE while redis-benchmark runs 200,000 GETs"
echo "and SETs of random keys (one connection per client, 50 clients). Memory in MiB."
echo
echo "| configuration | memory before | peak during the save | peak / before | save | redis-benchmark across the save |"
echo "|---|---:|---:|---:|---:|---|"

mkdir -p "$root/tmp/bgsave-native"
chroot "$root" /usr/bin/redis-server "${server_args[@]}" --port "$port" --dir /tmp/bgsave-native >/dev/null 2>&1 &
native_pid=$!
measure native "tree_pss $native_pid"
kill "$native_pid"; wait "$native_pid" 2>/dev/null || true
native_pid=
rm -rf "$root/tmp/bgsave-native"

torpor_pss() { $torpor stats rd | python3 -c "import json,sys; print(json.load(sys.stdin)['pss_bytes'])"; }
configs=()
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then configs+=("kvm:1"); fi
configs+=("trap:0" "trap:1")
for c in "${configs[@]}"; do
    platform=${c%%:*} cow=${c##*:}
    label=$platform
    if [ "$platform" = trap ]; then
        if [ "$cow" = 1 ]; then label="trap, CoW"; else label="trap, copying (TORPOR_COW_FORK=0)"; fi
    fi
    TORPOR_PLATFORM=$platform TORPOR_COW_FORK=$cow $torpor run -d --name rd --memory 4G \
        -p "$port:6379" "$root" -- /usr/bin/redis-server "${server_args[@]}" --dir /tmp >/dev/null
    measure "$label" torpor_pss
    $torpor delete --force rd >/dev/null
done
