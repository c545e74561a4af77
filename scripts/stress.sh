#!/usr/bin/env bash
# The long stress campaign of the defence-in-depth issue (item 4), whose short form is
# crates/torpor/tests/stress.rs. RUNS times (default 10), each in a fresh sandbox:
#   procs:  tests/guest/stress.c with 100 processes x 8 threads x 50 rounds (page-table churn,
#           signal storms, every byte checked);
#   shell:  busybox sh starting 1,000 background `sleep 1` processes and waiting for them;
#   hib:    stress.c with 1 process x 4 threads x 4000 rounds, hibernated and woken 10 times
#           while it runs.
# A run that does not end with status 0 and the expected line is a sandbox death. Prints a
# Markdown table (also written to OUT, default docs/results/stress.md).
#
#   cargo build --release && sudo scripts/stress.sh [RUNS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
out=${2:-docs/results/stress.md}
bin=$PWD/target/release/torpor
[ -x "$bin" ] || { echo "stress.sh: build first: cargo build --release" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/bin" "$root/tmp"
cp "$(command -v busybox)" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
ln -s busybox "$root/bin/sleep"
gcc -O2 -static -pthread -o "$root/bin/stress" tests/guest/stress.c
export TORPOR_STATE_DIR=$work/state
mkdir -p "$TORPOR_STATE_DIR"

declare -A deaths=([procs]=0 [shell]=0 [hib]=0)
declare -A secs=([procs]="" [shell]="" [hib]="")
now() { date +%s.%N; }
note() { echo "stress.sh: $*" >&2; }

for i in $(seq 1 "$runs"); do
    t0=$(now)
    o=$("$bin" run --memory 2G "$root" -- /bin/stress 100 8 50 2>"$work/err") && rc=0 || rc=$?
    secs[procs]+=" $(echo "$(now) - $t0" | bc)"
    if [ $rc -ne 0 ] || [ "$o" != "stress: 101 processes x 8 threads x 50 rounds, 0 failed" ]; then
        deaths[procs]=$((deaths[procs] + 1)); note "procs run $i: status $rc: $o $(tail -3 "$work/err")"
    fi

    t0=$(now)
    o=$("$bin" run --memory 2G "$root" -- /bin/sh -c \
        'i=0; while [ $i -lt 1000 ]; do /bin/sleep 1 & i=$((i+1)); done; wait; echo ok' \
        2>"$work/err") && rc=0 || rc=$?
    secs[shell]+=" $(echo "$(now) - $t0" | bc)"
    if [ $rc -ne 0 ] || [ "$o" != "ok" ]; then
        deaths[shell]=$((deaths[shell] + 1)); note "shell run $i: status $rc: $o $(tail -3 "$work/err")"
    fi

    t0=$(now)
    id=stress$i
    "$bin" run -d --name "$id" "$root" -- /bin/stress 0 4 4000 >/dev/null
    cycles=0
    for _ in $(seq 1 10); do
        "$bin" hibernate "$id" >/dev/null 2>&1 || break
        sleep 0.1
        "$bin" wake "$id" >/dev/null
        cycles=$((cycles + 1))
        sleep 0.2
    done
    while "$bin" stats "$id" 2>/dev/null | grep -qv '"state":"stopped"'; do sleep 0.2; done
    log=$(cat "$TORPOR_STATE_DIR/$id/output.log" 2>/dev/null || true)
    "$bin" delete --force "$id" >/dev/null 2>&1 || true
    secs[hib]+=" $(echo "$(now) - $t0" | bc)"
    if ! grep -q "4000 rounds, 0 failed" <<<"$log"; then
        deaths[hib]=$((deaths[hib] + 1)); note "hib run $i ($cycles cycles): $log"
    else
        note "hib run $i: $cycles hibernate/wake cycles under load"
    fi
    note "run $i of $runs done"
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.1f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
{
    echo "# Stress campaign"
    echo
    echo "\`scripts/stress.sh $runs\` on $(date -u +%Y-%m-%d), $(nproc) cores, kernel $(uname -r);"
    echo "torpor $(git rev-parse --short HEAD). A death is a run that did not end with status 0"
    echo "and every byte checked."
    echo
    echo "| load | runs | sandbox deaths | median seconds per run |"
    echo "|---|---|---|---|"
    echo "| 101 processes x 8 threads x 50 rounds (stress.c) | $runs | ${deaths[procs]} | $(echo "${secs[procs]}" | median) |"
    echo "| busybox sh, 1,000 background processes | $runs | ${deaths[shell]} | $(echo "${secs[shell]}" | median) |"
    echo "| 4 threads x 4000 rounds, 10 hibernate/wake cycles during the load | $runs | ${deaths[hib]} | $(echo "${secs[hib]}" | median) |"
} | tee "$out"
[ "${deaths[procs]}${deaths[shell]}${deaths[hib]}" = "000" ]
