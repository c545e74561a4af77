#!/usr/bin/env bash
# Checkpoint and restore beside gVisor (issue 14): the Python hello server of `torpor-bench
# paper` (crates/bench/src/paper/apps/hello.py) in the same Debian root, on this machine:
#   runsc (Debian's package, --platform=ptrace, netstack)   run, checkpoint, restore
#   torpor                                                  run -d, checkpoint, restore, run --from
# Each time is from the command's launch to the first correct answer (or to the command's
# end for checkpoints), median (min-max) of RUNS (default 5). Writes a Markdown table to OUT
# (default docs/results/snapshots-runsc.md).
#
# How runsc's server is reached: this runsc release (20221219) cannot give its netstack the
# interfaces of a network namespace on this kernel (it takes any namespace with
# net.core.rmem_default, namespaced since Linux 6.x, for the host's root namespace and
# refuses), and refuses to checkpoint with --network=host. So its sandbox has netstack with
# loopback alone (--network=none), and the answer is asked from inside by a static probe
# (tests/apps/http_probe.c) through `runsc exec`; the script measures what one exec of the
# probe costs against a running server and reports it beside the figures, which include it.
#
#   cargo build --release && sudo scripts/bench-runsc-snapshot.sh [RUNS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
out=${2:-docs/results/snapshots-runsc.md}
bin=$PWD/target/release/torpor
[ -x "$bin" ] || { echo "bench-runsc-snapshot.sh: build first: cargo build --release" >&2; exit 2; }
command -v runsc >/dev/null || { echo "bench-runsc-snapshot.sh: runsc is needed (apt-get install runsc)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-runsc-snapshot.sh: run as root" >&2; exit 2; }
root=${TORPOR_ROOTFS_CACHE:-$HOME/.cache/torpor/rootfs}/python
if [ ! -x "$root/usr/bin/python3" ]; then
    bash scripts/build-rootfs.sh python "$root" >/dev/null
fi

work=$(mktemp -d)
rs() { runsc --root "$work/runsc" --platform=ptrace --network=none --ignore-cgroups "$@" </dev/null; }
cleanup() {
    for id in $(runsc --root "$work/runsc" list -quiet 2>/dev/null); do
        runsc --root "$work/runsc" delete -force "$id" >/dev/null 2>&1 || true
    done
    TORPOR_STATE_DIR=$work/torpor "$bin" list 2>/dev/null | awk 'NR>1 {print $1}' |
        while read -r id; do TORPOR_STATE_DIR=$work/torpor "$bin" delete -f "$id" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$root/app/paper" "$work/bundle"
cp crates/bench/src/paper/apps/hello.py "$root/app/paper/hello.py"
gcc -O2 -static -o "$root/app/http_probe" tests/apps/http_probe.c
ln -s "$root" "$work/bundle/rootfs"
(cd "$work/bundle" && runsc spec -- /usr/bin/python3 /app/paper/hello.py 8080)
python3 - "$work/bundle/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["root"] = {"path": "rootfs", "readonly": True}
c["process"]["terminal"] = False
json.dump(c, open(p, "w"), indent=1)
EOF

now_ns() { date +%s%N; }
ms_since() { echo $((($(now_ns) - $1) / 1000000)); }
evict() { sync; find "$@" -type f -exec python3 -c 'import os,sys
for f in sys.argv[1:]:
    try:
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
    except OSError: pass' {} + 2>/dev/null || true; }
# Polls the probe inside runsc container ID until it answers; "fail" after 60 s.
runsc_answers() {
    for _ in $(seq 1 600); do
        rs exec "$1" /app/http_probe 8080 >/dev/null 2>&1 && return 0
        sleep 0.02
    done
    return 1
}
# Polls the host port until the server answers.
host_answers() {
    for _ in $(seq 1 3000); do
        curl -s --max-time 2 "http://127.0.0.1:$1/" 2>/dev/null | grep -q hello && return 0
        sleep 0.005
    done
    return 1
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "—"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%d (%d–%d)", m, a[1], a[NR]}'; }

declare -A t
add() { t[$1]+="$2"$'\n'; }
for i in $(seq 1 "$runs"); do
    # gVisor: cold start, the probe's own cost, checkpoint, restore.
    evict "$root"
    s=$(now_ns); rs run --detach --bundle "$work/bundle" "c$i" >/dev/null
    runsc_answers "c$i" && add runsc_cold "$(ms_since "$s")"
    s=$(now_ns); rs exec "c$i" /app/http_probe 8080 >/dev/null && add runsc_probe "$(ms_since "$s")"
    rm -rf "$work/img$i"; mkdir -p "$work/img$i"
    s=$(now_ns); rs checkpoint --image-path "$work/img$i" "c$i" >/dev/null && add runsc_ckpt "$(ms_since "$s")"
    add runsc_size "$(du -sk "$work/img$i" | cut -f1)"
    rs delete -force "c$i" >/dev/null 2>&1 || true
    evict "$root" "$work/img$i"
    s=$(now_ns); rs restore --detach --image-path "$work/img$i" --bundle "$work/bundle" "r$i" >/dev/null
    runsc_answers "r$i" && add runsc_restore "$(ms_since "$s")"
    rs delete -force "r$i" >/dev/null 2>&1 || true

    # torpor: the same server, published on the host.
    export TORPOR_STATE_DIR=$work/torpor
    port=$((20000 + RANDOM % 20000))
    evict "$root"
    s=$(now_ns); "$bin" run -d --name "t$i" -p "127.0.0.1:$port:8080" "$root" -- /usr/bin/python3 /app/paper/hello.py 8080 >/dev/null
    host_answers "$port" && add torpor_cold "$(ms_since "$s")"
    for _ in 1 2 3; do curl -s "http://127.0.0.1:$port/" >/dev/null; done
    s=$(now_ns); "$bin" checkpoint "t$i" "$work/ck$i" >/dev/null && add torpor_ckpt "$(ms_since "$s")"
    add torpor_size "$(du -sk "$work/ck$i" | cut -f1)"
    evict "$root" "$work/ck$i"
    s=$(now_ns); "$bin" restore -d --name "r$i" "$work/ck$i" >/dev/null
    host_answers "$port" && add torpor_restore "$(ms_since "$s")"
    "$bin" delete -f "r$i" >/dev/null
    s=$(now_ns); "$bin" run -d --from "$work/ck$i" --name "k$i" -p "127.0.0.1:$port:8080" >/dev/null
    host_answers "$port" && add torpor_clone_first "$(ms_since "$s")"
    "$bin" delete -f "k$i" >/dev/null
    s=$(now_ns); "$bin" run -d --from "$work/ck$i" --name "l$i" -p "127.0.0.1:$port:8080" >/dev/null
    host_answers "$port" && add torpor_clone "$(ms_since "$s")"
    "$bin" delete -f "l$i" >/dev/null
    unset TORPOR_STATE_DIR
done
m() { printf '%s' "${t[$1]:-}" | grep -v '^$' | median; }
{
    echo "# Checkpoint and restore beside gVisor"
    echo
    echo "The Python hello server of \`torpor-bench paper\` in the same Debian root, $runs runs, median (min–max) in ms:"
    echo "launch to the first correct answer (checkpoints: to the command's end). The root's files (and the"
    echo "checkpoint's, before a restore) are evicted from the page cache first. Produced by"
    echo "\`scripts/bench-runsc-snapshot.sh $runs\` on $(date -u +%Y-%m-%d), $(uname -r), $(nproc) CPUs;"
    echo "$(runsc --version | head -1), torpor $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo
    echo "| | cold start | checkpoint | checkpoint size | restore | first clone | clone |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    echo "| gVisor \`runsc\` (ptrace, netstack) | $(m runsc_cold) | $(m runsc_ckpt) | $(m runsc_size) KiB | $(m runsc_restore) | — | — |"
    echo "| torpor | $(m torpor_cold) | $(m torpor_ckpt) | $(m torpor_size) KiB | $(m torpor_restore) | $(m torpor_clone_first) | $(m torpor_clone) |"
    echo
    echo "- gVisor's figures include one \`runsc exec\` of a static probe asking the server from inside the"
    echo "  sandbox (see the script's header for why): $(m runsc_probe) ms each against a running server."
    echo "  torpor's server is asked from the host through its published port."
    echo "- gVisor's checkpoint stops the container (as torpor's without \`--leave-running\`); its restore"
    echo "  loads the whole state file before the application runs; torpor's restore pages memory in as it is"
    echo "  touched, and a clone maps the checkpoint's memory copy-on-write."
} > "$out"
cat "$out"
