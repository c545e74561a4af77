#!/usr/bin/env bash
# An exec into a hibernated sandbox beside a plain wake of it (issue 32, item 6): how long
# `torpor exec ID true` takes when the sandbox is hot, when it is hibernated (the exec wakes
# it), and how long `torpor wake ID` of the same hibernated sandbox takes; medians of RUNS.
#
#   cargo build --release && sudo scripts/bench-exec.sh [RUNS]     (default 10)
#
# The sandbox is busybox `nc -l` (idle, waiting for a connection) in a root of the host's
# static busybox. Prints a Markdown table (docs/results/exec.md keeps one).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
torpor=${TORPOR_BIN:-target/release/torpor}
[ -x "$torpor" ] || { echo "bench-exec.sh: no $torpor (cargo build --release)" >&2; exit 2; }
[ -x /bin/busybox ] || { echo "bench-exec.sh: no /bin/busybox (apt-get install busybox-static)" >&2; exit 2; }
work=$(mktemp -d /tmp/torpor-bench-exec.XXXXXX)
export TORPOR_STATE_DIR="$work/state"
id=""
cleanup() { [ -n "$id" ] && "$torpor" delete --force "$id" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/root/bin" "$work/root/tmp"
cp /bin/busybox "$work/root/bin/"
id=$("$torpor" run -d "$work/root" -- /bin/busybox nc -l -p 9000)
sleep 1

now_us() { echo $(( $(date +%s%N) / 1000 )); }
# Times a command in microseconds.
timed() { local t0 t1; t0=$(now_us); "$@" >/dev/null; t1=$(now_us); echo $((t1 - t0)); }
median() { sort -n | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

hot=() exec_hib=() wake=()
for _ in $(seq "$runs"); do
    hot+=("$(timed "$torpor" exec "$id" /bin/busybox true)")
    "$torpor" hibernate "$id" >/dev/null
    exec_hib+=("$(timed "$torpor" exec "$id" /bin/busybox true)")
    "$torpor" hibernate "$id" >/dev/null
    wake+=("$(timed "$torpor" wake "$id")")
done
m_hot=$(printf '%s\n' "${hot[@]}" | median)
m_exec=$(printf '%s\n' "${exec_hib[@]}" | median)
m_wake=$(printf '%s\n' "${wake[@]}" | median)
ratio=$(awk -v a="$m_exec" -v b="$m_wake" 'BEGIN {printf "%.2f", a / b}')
platform=$("$torpor" stats "$id" | sed -n 's/.*"platform": *"\([a-z]*\)".*/\1/p')
echo "| ${platform:-?}, medians of $runs | ms |"
echo "|---|---:|"
awk -v v="$m_hot" 'BEGIN {printf "| exec of a hot sandbox | %.1f |\n", v / 1000}'
awk -v v="$m_exec" 'BEGIN {printf "| exec of a hibernated sandbox (wakes it) | %.1f |\n", v / 1000}'
awk -v v="$m_wake" 'BEGIN {printf "| wake of the same hibernated sandbox | %.1f |\n", v / 1000}'
echo "| exec hibernated / wake | ${ratio} x |"
