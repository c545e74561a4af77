#!/usr/bin/env bash
# The cost of permission checks on the open/stat hot path (issue 36): a file server's
# stat + open + fstat + read 4 KiB + close of a file three directories deep
# (tests/guest/open_stat_loop.c), as root (the runtime's own ids: no switch) and as nobody
# (every file call made with the caller's filesystem ids), on each platform, beside the same
# loop run natively. With OLD_BIN (a torpor binary built before the checks), the same runs
# with it too. Prints a Markdown table of medians (ns per iteration; each cell the median of
# RUNS sandbox runs, each run the median of 7 rounds of ITER iterations).
#
#   cargo build --release && sudo scripts/bench-permissions.sh [OLD_BIN] [RUNS] [ITER]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-}
runs=${2:-5}
iter=${3:-2000}
[ -x target/release/torpor ] || { echo "bench-permissions.sh: build first: cargo build --release" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-permissions.sh: run as root" >&2; exit 2; }
[ -z "$old" ] || [ -x "$old" ] || { echo "bench-permissions.sh: $old is not executable" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp target/release/torpor "$work/new"
[ -z "$old" ] || cp "$old" "$work/old"
root=$work/root
mkdir -p "$root/bin" "$root/etc" "$root/srv/a/b/c" "$root/tmp"
gcc -static -O2 -o "$root/bin/open_stat_loop" tests/guest/open_stat_loop.c
printf 'root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
head -c 4096 /dev/urandom > "$root/srv/a/b/c/index.html"
chmod 644 "$root/srv/a/b/c/index.html"
file=/srv/a/b/c/index.html

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# One cell: BIN PLATFORM USER -> median ns per iteration over RUNS sandboxes.
cell() {
    local bin=$1 platform=$2 user=$3 args=()
    [ "$user" = root ] || args=(--user "$user")
    for _ in $(seq "$runs"); do
        TORPOR_LOG=off "$work/$bin" run --platform "$platform" "${args[@]}" "$root" -- \
            /bin/open_stat_loop "$file" "$iter" 7
    done | median
}

# Natively, as root and as nobody (a path walk as a user other than the files' owner costs
# the host more: its permission checks are the same ones torpor's holder then pays).
native_as() {
    local spec=()
    [ "$1" = root ] || spec=(--userspec=65534:65534)
    for _ in $(seq "$runs"); do
        (cd "$root" && chroot "${spec[@]}" . /bin/open_stat_loop "$file" "$iter" 7)
    done | median
}
declare -A native=([root]=$(native_as root) [nobody]=$(native_as nobody))
bins=(new)
[ -z "$old" ] || bins=(old new)
echo "| platform | user | $(for b in "${bins[@]}"; do printf '%s ns/iter | ' "$b"; done)native ns/iter |"
echo "|---|---|$(for _ in "${bins[@]}"; do printf -- '---:|'; done)---:|"
for platform in kvm trap; do
    for user in root nobody; do
        row="| $platform | $user |"
        for b in "${bins[@]}"; do
            row="$row $(cell "$b" "$platform" "$user") |"
        done
        echo "$row ${native[$user]} |"
    done
done
