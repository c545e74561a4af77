#!/usr/bin/env bash
# Start to first response through each way of starting a sandbox, medians of RUNS (default 5):
#   torpor run -d ROOT -- server        the friendly form (copy-on-write root, --publish)
#   torpor run -d --bundle B ID         the OCI form, as an engine's shim calls it
#   podman run -d -p … (torpor)         podman with --runtime torpor, its own port forwarding
#   podman run -d -p … (runc)           the same with Debian's runc, where it runs here
# The server is tests/guest/pattern_server.c (static), answering GET / with "hello". Writes a
# Markdown table to OUT (default docs/results/oci.md).
#
#   cargo build --release && sudo scripts/bench-oci.sh [RUNS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
out=${2:-docs/results/oci.md}
bin=$PWD/target/release/torpor
[ -x "$bin" ] || { echo "bench-oci.sh: build first: cargo build --release" >&2; exit 2; }
command -v podman >/dev/null || { echo "bench-oci.sh: podman is needed" >&2; exit 2; }

work=$(mktemp -d)
cleanup() {
    podman --root "$work/storage" --runroot "$work/run" rm -f -a >/dev/null 2>&1 || true
    podman --root "$work/storage" --runroot "$work/run" system reset -f >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
root=$work/rootfs
mkdir -p "$root/bin" "$work/bundle"
cp "$(command -v busybox)" "$root/bin/busybox"
gcc -O2 -static -o "$root/bin/pattern_server" tests/guest/pattern_server.c
tar -C "$root" -cf "$work/image.tar" .
pm() { podman --root "$work/storage" --runroot "$work/run" --events-backend=file "$@"; }
pm import "$work/image.tar" localhost/bench-oci:1 >/dev/null
ln -s "$root" "$work/bundle/rootfs"
export TORPOR_STATE_DIR=$work/state

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Waits for "hello" on PORT; prints the milliseconds since START, or "fail".
first_response() {
    local port=$1 start=$2
    for _ in $(seq 1 600); do
        if [ "$(curl -s -m 2 "http://127.0.0.1:$port/" 2>/dev/null)" = hello ]; then
            echo $(($(now_ms) - start))
            return
        fi
        sleep 0.01
    done
    echo fail
}
median() { tr ' ' '\n' | { grep -E '^[0-9]+$' || true; } | sort -n | awk '{a[NR]=$1} END {if (NR==0) print "-"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A ms
runc_error=""
for i in $(seq 1 "$runs"); do
    port=$((20000 + RANDOM % 20000))
    t=$(now_ms)
    "$bin" run -d --name f$i --publish 127.0.0.1:$port:8080 "$root" -- /bin/pattern_server 8080 1 >/dev/null
    ms[friendly]+=" $(first_response $port $t)"
    "$bin" delete --force f$i

    port=$((20000 + RANDOM % 20000))
    cat > "$work/bundle/config.json" <<EOF
{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/pattern_server","$port","1"],"env":["PATH=/bin"],"cwd":"/"},"root":{"path":"rootfs"}}
EOF
    t=$(now_ms)
    "$bin" run -d --bundle "$work/bundle" o$i </dev/null >/dev/null 2>&1
    ms[oci]+=" $(first_response $port $t)"
    "$bin" delete --force o$i

    port=$((20000 + RANDOM % 20000))
    t=$(now_ms)
    pm --runtime "$bin" run -d --name p$i -p 127.0.0.1:$port:8080 localhost/bench-oci:1 /bin/pattern_server 8080 1 >/dev/null
    ms[podman]+=" $(first_response $port $t)"
    pm rm -f p$i >/dev/null

    port=$((20000 + RANDOM % 20000))
    t=$(now_ms)
    if err=$(pm --runtime "$(command -v runc || echo runc)" run -d --name r$i -p 127.0.0.1:$port:8080 localhost/bench-oci:1 /bin/pattern_server 8080 1 2>&1 >/dev/null); then
        ms[runc]+=" $(first_response $port $t)"
    else
        runc_error=$(echo "$err" | tail -1)
    fi
    pm rm -f r$i >/dev/null 2>&1 || true
    echo "bench-oci.sh: run $i of $runs" >&2
done

f=$(echo "${ms[friendly]}" | median)
o=$(echo "${ms[oci]}" | median)
p=$(echo "${ms[podman]}" | median)
r=$(echo "${ms[runc]:-}" | median)
ratio() { if [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]] && [ "$2" != 0 ]; then printf "%.2f" "$(echo "scale=4; $1 / $2" | bc)"; else echo "-"; fi; }
{
    echo "# Start to first response: the OCI path"
    echo
    echo "\`scripts/bench-oci.sh $runs\` on $(date -u +%Y-%m-%d), $(nproc) cores, kernel $(uname -r), torpor"
    echo "$(git rev-parse --short HEAD), $(podman --version). A static HTTP server (pattern_server"
    echo "with 1 MiB); start = the command is issued, end = the first \`GET /\` answered. Medians"
    echo "of $runs runs, in milliseconds."
    echo
    echo "| how | median ms | ratio to \`torpor run\` | all runs |"
    echo "|---|---|---|---|"
    echo "| \`torpor run -d\` (friendly form, copy-on-write root) | $f | 1.00 |${ms[friendly]} |"
    echo "| \`torpor run -d --bundle\` (OCI form) | $o | $(ratio "$o" "$f") |${ms[oci]} |"
    echo "| \`podman run -d -p\` with torpor | $p | $(ratio "$p" "$f") |${ms[podman]} |"
    if [ -n "${ms[runc]:-}" ]; then
        echo "| \`podman run -d -p\` with runc | $r | $(ratio "$r" "$f") |${ms[runc]} |"
    else
        echo "| \`podman run -d -p\` with runc | does not run here | - | \`$runc_error\` |"
    fi
} | tee "$out"
