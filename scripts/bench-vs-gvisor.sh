#!/usr/bin/env bash
# torpor on both platforms beside gVisor (issue 16): the Python and Node.js hello servers of
# `torpor-bench paper` (crates/bench/src/paper/apps/hello.py, hello.js), each in its Debian
# root, on this machine:
#   native   the runtime in a chroot of the root
#   runsc    Debian's package, --platform=ptrace, netstack with loopback alone
#   kvm      torpor run -d --platform kvm, the port published
#   trap     torpor run -d --platform trap, the port published
# For each, RUNS times (default 5):
#   - start: from the command's launch to the first answer. The host asks (curl) where it can
#     reach the server; for runsc, whose sandbox the host cannot reach here (this runsc
#     release takes any network namespace with net.core.rmem_default, namespaced since Linux
#     6.x, for the host's and refuses it; with --network=host its sockets are not the host's
#     either), a static probe asks from inside (tests/apps/http_probe.c, `runsc exec`; about
#     30 ms of each runsc start figure is that exec);
#   - hot latency, two ways: REQS requests one after the other, each on a new connection,
#     median and p99: (a) from the host (not runsc), (b) from a client in the same sandbox
#     (a static C client: chroot, `runsc exec`, and `torpor exec` in an OCI container of the
#     same bundle run aside), which pays the sandbox's system-call costs on both ends;
#   - PSS of the whole process tree, idle (runsc: its sandbox and gofer; torpor: the holder,
#     its janitor and file broker, and on trap the stub factory and stubs).
# Prints and writes a Markdown table to OUT (default docs/results/platforms-gvisor.md), with
# each configuration's hot latency over native's, measured in the same run.
#
#   cargo build --release && sudo scripts/bench-vs-gvisor.sh [RUNS] [REQS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
reqs=${2:-300}
out=${3:-docs/results/platforms-gvisor.md}
[ -x target/release/torpor ] || { echo "bench-vs-gvisor.sh: build first: cargo build --release" >&2; exit 2; }
command -v runsc >/dev/null || { echo "bench-vs-gvisor.sh: runsc is needed (apt-get install runsc)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-vs-gvisor.sh: run as root" >&2; exit 2; }
work=$(mktemp -d)
# A copy: a build during the run does not change the binary measured.
bin=$work/torpor-bin
cp target/release/torpor "$bin"
cache=${TORPOR_ROOTFS_CACHE:-$HOME/.cache/torpor/rootfs}
for app in python node; do
    exe=/usr/bin/python3
    [ "$app" = node ] && exe=/usr/bin/node
    if [ ! -x "$cache/$app$exe" ]; then
        bash scripts/build-rootfs.sh "$app" "$cache/$app" >/dev/null
    fi
    mkdir -p "$cache/$app/app/paper"
    gcc -O2 -static -o "$cache/$app/app/http_probe" tests/apps/http_probe.c
done
# Python is in both roots (Debian's node root has python3 too? if not, the in-sandbox client of
# the node server runs as a static C client: see client_cmd).
cp crates/bench/src/paper/apps/hello.py "$cache/python/app/paper/hello.py"
cp crates/bench/src/paper/apps/hello.js "$cache/node/app/paper/hello.js"
cat >"$work/client.c" <<'C'
/* REQS sequential GETs of 127.0.0.1:PORT, a new connection each; prints "median_ms p99_ms". */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int one(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) return 1;
    const char req[] = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(s, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) return 1;
    char buf[4096]; size_t n = 0; ssize_t r;
    while (n < sizeof buf - 1 && (r = read(s, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0; close(s);
    return strstr(buf, "hello") ? 0 : 1;
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int port = atoi(argv[1]), n = atoi(argv[2]);
    for (int i = 0; i < 20; i++) if (one(port)) return 1;
    double *v = malloc(sizeof *v * n);
    for (int i = 0; i < n; i++) { double t = now(); if (one(port)) return 1; v[i] = now() - t; }
    qsort(v, n, sizeof *v, cmp);
    printf("%.3f %.3f\n", v[n / 2], v[(int)(n * 0.99) < n ? (int)(n * 0.99) : n - 1]);
    return 0;
}
C
for app in python node; do
    gcc -O2 -static -o "$cache/$app/app/http_client" "$work/client.c"
done
mkdir -p "$work/bundle" "$work/torpor"
pids=()
cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    for id in $(runsc --root "$work/runsc" list -quiet 2>/dev/null); do
        runsc --root "$work/runsc" delete -force "$id" >/dev/null 2>&1 || true
    done
    TORPOR_STATE_DIR=$work/torpor "$bin" list 2>/dev/null | awk 'NR>1 {print $1}' |
        while read -r id; do TORPOR_STATE_DIR=$work/torpor "$bin" delete -f "$id" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT

tp() { TORPOR_LOG=off TORPOR_STATE_DIR=$work/torpor "$bin" "$@"; }
rs() { runsc --root "$work/runsc" --platform=ptrace --network=none --ignore-cgroups "$@"; }
# The app's root and command line (without the port): set by use_app.
root=
cmd=()
use_app() {
    root=$cache/$1
    case $1 in
        python) cmd=(/usr/bin/python3 /app/paper/hello.py) ;;
        node) cmd=(/usr/bin/node /app/paper/hello.js) ;;
    esac
    rm -f "$work/bundle/rootfs" "$work/bundle/config.json"
    ln -s "$root" "$work/bundle/rootfs"
    (cd "$work/bundle" && runsc spec -- "${cmd[@]}" 8080)
    python3 - "$work/bundle/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["root"] = {"path": "rootfs", "readonly": True}
c["process"]["terminal"] = False
json.dump(c, open(p, "w"), indent=1)
PY
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
# Polls `$@` (a command that succeeds once the server answers) for up to 60 s; prints the ms
# since START_NS.
first_answer() {
    local start=$1
    shift
    local deadline=$(($(now_ns) + 60000000000))
    while [ "$(now_ns)" -lt "$deadline" ]; do
        if "$@" >/dev/null 2>&1; then
            echo $((($(now_ns) - start) / 1000000))
            return 0
        fi
        sleep 0.005
    done
    return 1
}
host_get() { curl -s --max-time 2 "http://127.0.0.1:$1/" | grep -qi hello; }
# REQS sequential requests from the host to PORT, a new connection each: "median_ms p99_ms".
host_latencies() {
    python3 - "$1" "$reqs" <<'PY'
import http.client, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def one():
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/")
    body = c.getresponse().read()
    c.close()
    assert b"hello" in body.lower(), body
    return (time.perf_counter() - t) * 1e3
for _ in range(20):
    one()
v = sorted(one() for _ in range(n))
print(f"{v[len(v) // 2]:.3f} {v[min(len(v) - 1, int(len(v) * 0.99))]:.3f}")
PY
}
descendants() {
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}
# PSS (KiB) of PID and every process below it.
tree_pss() {
    local total=0 p k
    for p in $(descendants "$1") "$1"; do
        k=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
        total=$((total + ${k:-0}))
    done
    echo "$total"
}

declare -A first host inside pss
record() { # KEY FIELD VALUE
    case $2 in
        first) first[$1]+="$3 " ;;
        host) host[$1]+="$3 " ;;
        inside) inside[$1]+="$3 " ;;
        pss) pss[$1]+="$3 " ;;
    esac
}
for app in python node; do
    use_app "$app"
    for kind in native runsc kvm trap; do
        key=$app/$kind
        for i in $(seq 1 "$runs"); do
            port=$(free_port)
            name=b$port
            t0=$(now_ns)
            case $kind in
                native)
                    chroot "$root" "${cmd[@]}" "$port" >/dev/null 2>&1 &
                    pid=$!
                    pids+=("$pid")
                    ms=$(first_answer "$t0" host_get "$port") || { echo "$key: no answer" >&2; continue; }
                    read -r hm hp < <(host_latencies "$port")
                    read -r im ip < <(chroot "$root" /app/http_client "$port" "$reqs")
                    ;;
                runsc)
                    rs run --bundle "$work/bundle" "$name" </dev/null >/dev/null 2>&1 &
                    pid=$!
                    pids+=("$pid")
                    ms=$(first_answer "$t0" rs exec "$name" /app/http_probe 8080) || { echo "$key: no answer" >&2; continue; }
                    hm=—
                    hp=—
                    read -r im ip < <(rs exec "$name" /app/http_client 8080 "$reqs")
                    ;;
                kvm | trap)
                    tp --platform "$kind" run -d --name "$name" -p "127.0.0.1:$port:8080" "$root" \
                        -- "${cmd[@]}" 8080 >/dev/null
                    pid=$(tp stats "$name" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
                    ms=$(first_answer "$t0" host_get "$port") || { echo "$key: no answer" >&2; continue; }
                    read -r hm hp < <(host_latencies "$port")
                    # From inside: `torpor exec` runs in an OCI container of torpor (the same
                    # bundle as runsc's), started aside once the host's figures are taken.
                    sleep 0.5
                    k=$(tree_pss "$pid")
                    tp delete -f "$name" >/dev/null 2>&1 || true
                    tp --platform "$kind" run -d --bundle "$work/bundle" "o$name" </dev/null >/dev/null
                    first_answer "$(now_ns)" tp exec "o$name" /app/http_probe 8080 >/dev/null ||
                        { echo "$key: no answer inside" >&2; continue; }
                    read -r im ip < <(tp exec "o$name" /app/http_client 8080 "$reqs")
                    tp delete -f "o$name" >/dev/null 2>&1 || true
                    ;;
            esac
            if [ "$kind" = native ] || [ "$kind" = runsc ]; then
                sleep 0.5
                k=$(tree_pss "$pid")
            fi
            record "$key" first "$ms"
            record "$key" host "$hm/$hp"
            record "$key" inside "$im/$ip"
            record "$key" pss "$k"
            echo "$key run $i: first answer $ms ms; from the host $hm ms (p99 $hp); from inside $im ms (p99 $ip); PSS $k KiB"
            case $kind in
                runsc) rs kill "$name" KILL >/dev/null 2>&1 || true
                       rs delete -force "$name" >/dev/null 2>&1 || true ;;
                native) kill "$pid" 2>/dev/null || true ;;
            esac
            if [ "$kind" = native ] || [ "$kind" = runsc ]; then
                wait "$pid" 2>/dev/null || true
            fi
        done
    done
done

med_of() { tr ' ' '\n' | grep -v '^$' | grep -v '—' | sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "—"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
# The median of the first or second half of "a/b" samples.
part() { tr ' ' '\n' | grep -v '^$' | cut -d/ -f"$1" | med_of; }
row() {
    local key=$1 label=$2
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" \
        "$(echo "${first[$key]:-}" | med_of)" \
        "$(echo "${host[$key]:-}" | part 1)" "$(echo "${host[$key]:-}" | part 2)" \
        "$(echo "${inside[$key]:-}" | part 1)" "$(echo "${inside[$key]:-}" | part 2)" \
        "$(echo "${pss[$key]:-}" | med_of | awk '{ if ($1 == "—") print $1; else printf "%.1f", $1 / 1024 }')"
}
ratio() { # KEY NATIVE_KEY FIELD(host|inside)
    local v n
    if [ "$3" = host ]; then
        v=$(echo "${host[$1]:-}" | part 1); n=$(echo "${host[$2]:-}" | part 1)
    else
        v=$(echo "${inside[$1]:-}" | part 1); n=$(echo "${inside[$2]:-}" | part 1)
    fi
    awk -v n="$n" -v v="$v" 'BEGIN { if (n == "—" || v == "—" || n == 0) print "—"; else printf "%.2f x", v / n }'
}
{
    echo "# torpor on both platforms beside gVisor"
    echo
    echo "\`sudo scripts/bench-vs-gvisor.sh $runs $reqs\`, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)," \
        "on $(nproc) CPUs ($(uname -r)); runsc $(runsc --version 2>/dev/null | head -1 | awk '{print $NF}') (ptrace platform)."
    echo "The Python and Node.js hello servers of \`torpor-bench paper\`, each in its Debian root. Medians of $runs runs."
    echo "Hot latency: $reqs sequential requests, a new connection each, median (p99), in ms, from the host and from"
    echo "a static client inside the same sandbox (both ends then pay the sandbox's costs). runsc cannot be reached"
    echo "from the host here (see the script's header): its start is measured by a probe inside (about 30 ms of it is"
    echo "\`runsc exec\`). PSS: the whole process tree, idle."
    echo
    echo "| | start to first answer (ms) | hot, from the host | p99 | hot, from inside | p99 | PSS (MiB) |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for app in python node; do
        label=Python
        [ "$app" = node ] && label=Node.js
        row "$app/native" "$label: native (chroot)"
        row "$app/runsc" "$label: gVisor runsc"
        row "$app/kvm" "$label: torpor, KVM platform"
        row "$app/trap" "$label: torpor, trap platform"
    done
    echo
    echo "Hot latency (median) over native's, same run:"
    echo
    echo "| | from the host | from inside |"
    echo "|---|---:|---:|"
    for app in python node; do
        for kind in runsc kvm trap; do
            echo "| $app, $kind | $(ratio "$app/$kind" "$app/native" host) | $(ratio "$app/$kind" "$app/native" inside) |"
        done
    done
} | tee "$out"
