#!/usr/bin/env bash
# Why a woken Video sandbox holds more memory on trap than on KVM (issue 16): the workload of
# `torpor-bench paper` (FunctionBench's video_processing, OpenCV) in one sandbox, as the
# bench's PSS phase runs it: ready, WARM warm-up requests (default 10, as the bench),
# hibernated, then two requests. For each platform and each condition, RUNS times (default 3):
#   as-is      the workload as the bench runs it
#   1-thread   OpenCV's thread pool of one thread (OPENCV_FOR_THREADS_NUM=1): the parallel
#              work no longer splits between two application threads
#   1-cpu      torpor and the application on one host CPU (taskset -c 0)
# and prints the medians of: the bytes the wake brought back from the swap (`fault_bytes` of
# `torpor stats`: the pages the requests touched, read in runs) and the sandbox's PSS.
# Needs the bench's Python root (`torpor-bench paper --only video` builds it) and root.
#
#   cargo build --release && sudo scripts/bench-video-woken.sh [RUNS] [WARM]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
warm=${2:-10}
root=${TORPOR_ROOTFS_CACHE:-$HOME/.cache/torpor/rootfs}/python
[ -x target/release/torpor ] || { echo "bench-video-woken.sh: build first: cargo build --release" >&2; exit 2; }
[ -f "$root/app/paper/video_server.py" ] || { echo "bench-video-woken.sh: no $root/app/paper/video_server.py: run torpor-bench paper --only video first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-video-woken.sh: run as root" >&2; exit 2; }
work=$(mktemp -d)
# A copy: a build during the run does not change the binary measured.
bin=$work/torpor-bin
cp target/release/torpor "$bin"
export TORPOR_STATE_DIR=$work/state
cleanup() {
    local d
    for d in "$TORPOR_STATE_DIR"/*/; do
        [ -d "$d" ] && "$bin" delete --force "$(basename "$d")" >/dev/null 2>&1
    done
    rm -rf "$work"
}
trap cleanup EXIT
port=19480

# One run: prints "fault_bytes pss_bytes" of the woken sandbox.
measure() {
    local platform=$1 condition=$2 pin=() env=() id stats
    case $condition in
        1-thread) env=(-e OPENCV_FOR_THREADS_NUM=1) ;;
        1-cpu) pin=(taskset -c 0) ;;
    esac
    port=$((port + 1))
    id=$("${pin[@]}" "$bin" --platform "$platform" run -d --memory 2G "${env[@]}" \
        -p "127.0.0.1:$port:$port" "$root" -- /usr/bin/python3 /app/paper/video_server.py "$port")
    for _ in $(seq 120); do curl -sf -m 10 "localhost:$port/video" >/dev/null && break; sleep 0.5; done
    for _ in $(seq "$warm"); do curl -sf "localhost:$port/video" >/dev/null; done
    "$bin" hibernate "$id" >/dev/null
    curl -sf "localhost:$port/video" >/dev/null
    curl -sf "localhost:$port/video" >/dev/null
    sleep 1
    stats=$("$bin" stats "$id")
    "$bin" delete --force "$id" >/dev/null
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["fault_bytes"], d["pss_bytes"])' "$stats"
}

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

printf '%-8s %-9s %22s %16s\n' platform condition "brought back (MiB)" "PSS (MiB)"
for condition in as-is 1-thread 1-cpu; do
    for platform in kvm trap; do
        samples=$(for _ in $(seq "$runs"); do measure "$platform" "$condition"; done)
        back=$(awk '{print $1}' <<<"$samples" | median)
        pss=$(awk '{print $2}' <<<"$samples" | median)
        printf '%-8s %-9s %22.2f %16.2f\n' "$platform" "$condition" \
            "$(awk -v b="$back" 'BEGIN {print b / 1048576}')" \
            "$(awk -v b="$pss" 'BEGIN {print b / 1048576}')"
    done
done
