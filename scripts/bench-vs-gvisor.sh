#!/usr/bin/env bash
# torpor on both platforms beside gVisor (issue 16): the Python hello server of `torpor bench
# paper` (crates/torpor/src/paper/apps/hello.py) in the same Debian root, on this machine:
#   native   python3 in a chroot of the root
#   runsc    Debian's package, --platform=ptrace, --network=host (its netstack cannot take a
#            network namespace's interfaces on Linux 6.x, see bench-runsc-snapshot.sh)
#   kvm      torpor run --platform kvm, the port published
#   trap     torpor run --platform trap, the port published
# For each, RUNS times (default 5): start to the first answer (from the command's launch),
# then REQS requests one after the other, each on a new connection (median and p99 of the
# latencies), then the PSS of the whole process tree (runsc: its sandbox and gofer; torpor: the
# holder, its janitor and file broker, and on trap the stub factory and stubs), idle.
# Prints and writes a Markdown table to OUT (default docs/results/platforms-gvisor.md).
#
#   cargo build --release && sudo scripts/bench-vs-gvisor.sh [RUNS] [REQS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
reqs=${2:-300}
out=${3:-docs/results/platforms-gvisor.md}
bin=$PWD/target/release/torpor
[ -x "$bin" ] || { echo "bench-vs-gvisor.sh: build first: cargo build --release" >&2; exit 2; }
command -v runsc >/dev/null || { echo "bench-vs-gvisor.sh: runsc is needed (apt-get install runsc)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-vs-gvisor.sh: run as root" >&2; exit 2; }
root=${TORPOR_ROOTFS_CACHE:-$HOME/.cache/torpor/rootfs}/python
if [ ! -x "$root/usr/bin/python3" ]; then
    bash scripts/build-rootfs.sh python "$root" >/dev/null
fi
work=$(mktemp -d)
mkdir -p "$root/app/paper" "$work/bundle"
cp crates/torpor/src/paper/apps/hello.py "$root/app/paper/hello.py"
ln -s "$root" "$work/bundle/rootfs"
pids=()
cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    for id in $(runsc --root "$work/runsc" list -quiet 2>/dev/null); do
        runsc --root "$work/runsc" delete -force "$id" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
# Waits for the first answer on PORT; prints the ms since START_NS, or fails after 60 s.
first_answer() {
    local port=$1 start=$2
    for _ in $(seq 1 12000); do
        if curl -s --max-time 2 "http://127.0.0.1:$port/" 2>/dev/null | grep -q hello; then
            echo $((($(now_ns) - start) / 1000000))
            return 0
        fi
        sleep 0.005
    done
    return 1
}
# REQS sequential requests, a new connection each: prints "median_ms p99_ms".
latencies() {
    python3 - "$1" "$reqs" <<'EOF'
import http.client, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def one():
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/")
    r = c.getresponse()
    body = r.read()
    c.close()
    assert b"hello" in body, body
    return (time.perf_counter() - t) * 1e3
for _ in range(20):
    one()
v = sorted(one() for _ in range(n))
print(f"{v[len(v) // 2]:.3f} {v[min(len(v) - 1, int(len(v) * 0.99))]:.3f}")
EOF
}
# PSS (KiB) of PID and every process below it.
tree_pss() {
    local total=0 p
    for p in $(descendants "$1") "$1"; do
        local k
        k=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + ${k:-0}))
    done
    echo "$total"
}
descendants() {
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}

(cd "$work/bundle" && runsc spec -- /usr/bin/python3 /app/paper/hello.py 8080)
spec_port() {
    python3 - "$work/bundle/config.json" "$1" <<'EOF'
import json, sys
p, port = sys.argv[1], sys.argv[2]
c = json.load(open(p))
c["root"] = {"path": "rootfs", "readonly": True}
c["process"]["terminal"] = False
c["process"]["args"] = ["/usr/bin/python3", "/app/paper/hello.py", port]
json.dump(c, open(p, "w"), indent=1)
EOF
}

# Starts one server of KIND on PORT in the background; prints its pid.
start() {
    local kind=$1 port=$2
    case $kind in
        native) chroot "$root" /usr/bin/python3 /app/paper/hello.py "$port" >/dev/null 2>&1 & ;;
        runsc)
            spec_port "$port"
            runsc --root "$work/runsc" --platform=ptrace --network=host --ignore-cgroups \
                run --bundle "$work/bundle" "bench-$port" </dev/null >/dev/null 2>&1 & ;;
        kvm | trap)
            TORPOR_LOG=off TORPOR_STATE_DIR=$work/torpor "$bin" --platform "$kind" run \
                -p "127.0.0.1:$port:8080" "$root" -- /usr/bin/python3 /app/paper/hello.py 8080 \
                </dev/null >/dev/null 2>&1 & ;;
    esac
    echo $!
}

declare -A first med p99 pss
for kind in native runsc kvm trap; do
    for i in $(seq 1 "$runs"); do
        port=$(free_port)
        t0=$(now_ns)
        pid=$(start "$kind" "$port")
        pids+=("$pid")
        if ! ms=$(first_answer "$port" "$t0"); then
            echo "$kind run $i: no answer" >&2
            kill -9 "$pid" 2>/dev/null || true
            continue
        fi
        read -r m p < <(latencies "$port")
        sleep 0.5
        k=$(tree_pss "$pid")
        first[$kind]+="$ms "
        med[$kind]+="$m "
        p99[$kind]+="$p "
        pss[$kind]+="$k "
        echo "$kind run $i: first answer $ms ms, latency median $m ms p99 $p ms, PSS $k KiB"
        if [ "$kind" = runsc ]; then
            runsc --root "$work/runsc" kill "bench-$port" KILL >/dev/null 2>&1 || true
            runsc --root "$work/runsc" delete -force "bench-$port" >/dev/null 2>&1 || true
        fi
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
done

med_of() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "—"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
row() {
    local kind=$1 label=$2
    printf '| %s | %s | %s | %s | %s |\n' "$label" \
        "$(echo "${first[$kind]:-}" | med_of)" "$(echo "${med[$kind]:-}" | med_of)" \
        "$(echo "${p99[$kind]:-}" | med_of)" \
        "$(echo "${pss[$kind]:-}" | med_of | awk '{ if ($1 == "—") print $1; else printf "%.1f", $1 / 1024 }')"
}
{
    echo "# torpor on both platforms beside gVisor"
    echo
    echo "\`sudo scripts/bench-vs-gvisor.sh $runs $reqs\`, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)," \
        "on $(nproc) CPUs ($(uname -r)); runsc $(runsc --version 2>/dev/null | head -1 | awk '{print $NF}')."
    echo "The Python hello server of \`torpor bench paper\` in the same Debian root. Medians of $runs runs;"
    echo "latencies over $reqs sequential requests, a new connection each; PSS of the whole process tree, idle."
    echo
    echo "| | start to first answer (ms) | hot latency, median (ms) | hot latency, p99 (ms) | PSS (MiB) |"
    echo "|---|---:|---:|---:|---:|"
    row native "native (chroot)"
    row runsc "gVisor runsc (ptrace, host network)"
    row kvm "torpor, KVM platform"
    row trap "torpor, trap platform"
} | tee "$out"
