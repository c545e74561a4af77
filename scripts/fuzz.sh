#!/usr/bin/env bash
# Fuzzing campaigns (issue 13, item 5; docs/SECURITY.md, "Fuzzing"). Short runs of the same
# fuzzers are part of `cargo test --workspace --release` (crates/torpor/tests/fuzz.rs).
#
#   scripts/fuzz.sh syscalls [SEEDS] [COUNT] [FIRST_SEED] [THREADS]
#       tests/guest/syscall_fuzz.c under `torpor run`, SEEDS runs (default 200) of COUNT
#       random syscalls each (default 10000), seeds FIRST_SEED.. (default 1), from THREADS
#       threads at once (default 1: one thread and a watchdog process). Each run must end
#       with the program's own exit 0 and its summary line. Classifies every other end as a
#       runtime crash (torpor's stderr says the sandbox failed, a panic, a ring-0 stub fault),
#       a hang (no end within 300 s) or a program death (a signal or a status without a runtime
#       error: a fuzzer bug or a kernel bug to look at). Needs `cargo build --release` first.
#       As root, each run is in a network namespace of its own (loopback only).
#
#   scripts/fuzz.sh libfuzzer [SECONDS] [TARGET...]
#       The coverage-guided targets of fuzz/ (cargo-fuzz, libFuzzer), one after the other, one
#       process each (no -jobs), SECONDS each (default 600), starting from the committed seeds (fuzz/seeds/TARGET)
#       and the local corpus fuzz/corpus/TARGET (not committed, kept between runs).
#       Needs `cargo install cargo-fuzz`; the stable toolchain is used with RUSTC_BOOTSTRAP=1.
#       All targets are built first, with debug assertions and overflow checks (FUZZ_NO_BUILD=1
#       reuses the binaries already built).
#       Prints libFuzzer's final line (executions, cov, ft, corpus) per target; a crash stops
#       that target with its input in fuzz/artifacts/TARGET/.
#
#   scripts/fuzz.sh replay [TARGET...]
#       Runs every committed seed input (fuzz/seeds/TARGET) through the targets once.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-syscalls}
shift || true
note() { echo "fuzz.sh: $*" >&2; }

targets_all="elf shebang swapfile reapfile pagefile_corrupt oci_spec bundle control"

case "$mode" in
syscalls)
    seeds=${1:-200}
    count=${2:-10000}
    first=${3:-1}
    threads=${4:-1}
    bin=$PWD/target/release/torpor
    [ -x "$bin" ] || { note "build first: cargo build --release"; exit 2; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/root/bin" "$work/state"
    gcc -O2 -static -Wall -o "$work/root/bin/syscall_fuzz" tests/guest/syscall_fuzz.c
    export TORPOR_STATE_DIR=$work/state TORPOR_LOG=error
    wrap=()
    if [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
        wrap=(unshare --net -- sh -c 'ip link set lo up 2>/dev/null; exec "$0" "$@"')
    fi
    total=0 ok=0 err=0 enosys=0 efault=0 eintr=0 sigs=0 clean=0 crashes=0 hangs=0 deaths=0
    failed=()
    t0=$(date +%s)
    for seed in $(seq "$first" $((first + seeds - 1))); do
        rc=0
        timeout 300 "${wrap[@]}" "$bin" run "$work/root" -- /bin/syscall_fuzz "$seed" "$count" -t "$threads" \
            >"$work/out" 2>"$work/err" || rc=$?
        line=$(grep -a '^syscall_fuzz: seed=' "$work/out" | tail -1 || true)
        if grep -aqE 'sandbox failed|panicked|ring-0 stub|^torpor: | ERROR ' "$work/err"; then
            crashes=$((crashes + 1)); failed+=("$seed:crash")
            note "seed $seed: RUNTIME CRASH (status $rc): $(grep -aE 'sandbox failed|panicked|ring-0 stub|^torpor: | ERROR ' "$work/err" | head -3)"
        elif [ $rc = 124 ]; then
            hangs=$((hangs + 1)); failed+=("$seed:hang"); note "seed $seed: HANG (300 s)"
        elif [ $rc != 0 ] || [ -z "$line" ]; then
            deaths=$((deaths + 1)); failed+=("$seed:status$rc")
            note "seed $seed: program death, status $rc: $(tail -c 300 "$work/out" | tr '\n' ' ')"
        else
            clean=$((clean + 1))
        fi
        if [ -n "$line" ]; then
            get() { echo "$line" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }
            total=$((total + $(get done))); ok=$((ok + $(get ok))); err=$((err + $(get err)))
            enosys=$((enosys + $(get enosys))); efault=$((efault + $(get efault)))
            eintr=$((eintr + $(get eintr))); sigs=$((sigs + $(get signals)))
        fi
    done
    secs=$(($(date +%s) - t0))
    echo "syscall fuzz: $seeds seeds ($first..$((first + seeds - 1))) x $count calls, $threads thread(s), in ${secs} s"
    echo "  syscalls issued: $total (ok $ok, errors $err: ENOSYS $enosys, EFAULT $efault, EINTR $eintr), signals handled: $sigs"
    echo "  runs ended normally: $clean; runtime crashes: $crashes; hangs: $hangs; program deaths: $deaths"
    [ ${#failed[@]} -eq 0 ] || echo "  failing seeds: ${failed[*]}"
    [ $((crashes + hangs + deaths)) -eq 0 ]
    ;;
libfuzzer)
    secs=${1:-600}
    shift || true
    targets=${*:-$targets_all}
    command -v cargo-fuzz >/dev/null || { note "cargo install cargo-fuzz"; exit 2; }
    bins=fuzz/target/x86_64-unknown-linux-gnu/release
    if [ -z "${FUZZ_NO_BUILD:-}" ]; then
        (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build --release --debug-assertions) || exit 2
    fi
    for t in $targets; do
        mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
        note "$t: ${secs} s"
        rc=0
        "$bins/$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -max_total_time="$secs" \
            -print_final_stats=1 -rss_limit_mb=4096 -timeout=20 \
            -artifact_prefix="fuzz/artifacts/$t/" >"fuzz/artifacts/$t/last.log" 2>&1 || rc=$?
        final=$(grep -aE '^#[0-9]+' "fuzz/artifacts/$t/last.log" | tail -1)
        execs=$(grep -a 'stat::number_of_executed_units' "fuzz/artifacts/$t/last.log" | awk '{print $2}')
        echo "$t: status $rc, ${secs} s, executions ${execs:-?}, final: $final"
        [ $rc = 0 ] || grep -aE 'panicked|ERROR|SUMMARY|Test unit written' "fuzz/artifacts/$t/last.log" | head -5
    done
    ;;
replay)
    targets=${*:-$targets_all}
    for t in $targets; do
        (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$t" "seeds/$t" -- -runs=0) \
            >/dev/null 2>&1 && echo "$t: ok" || { echo "$t: FAILED"; exit 1; }
    done
    ;;
*)
    note "usage: fuzz.sh syscalls [SEEDS] [COUNT] [FIRST_SEED] | libfuzzer [SECONDS] [TARGET...] | replay [TARGET...]"
    exit 2
    ;;
esac
