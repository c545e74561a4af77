#!/usr/bin/env bash
# Builds, once, a Debian root filesystem for torpor's language-runtime tests.
#
#   scripts/build-rootfs.sh NAME [CACHE_DIR]
#
# NAME is one of the keys of PACKAGES below (base, python, node, java, go,
# servers, wsgi, cpython-tests).
# The root filesystem is CACHE_DIR/NAME (CACHE_DIR defaults to
# ${TORPOR_ROOTFS_CACHE:-$HOME/.cache/torpor/rootfs}); its path is the only
# line printed on stdout, progress goes to stderr.
#
# It is `debootstrap --variant=minbase` of the host's Debian suite
# (VERSION_CODENAME of /etc/os-release) from the mirror the host's apt
# sources use for that suite (TORPOR_DEBIAN_MIRROR overrides it), plus the
# packages of NAME installed with apt-get in a chroot. A root is complete when
# it holds .torpor-complete, which records NAME's package list
# (`packages=...`): when that list is still the one in PACKAGES below, this
# script does nothing (without root); when the list has changed, or the marker
# has none, the root is rebuilt. A root is built in a temporary directory
# beside it and only then put in place (an outdated root stays usable until
# that moment), so an interrupted build never leaves a root that looks
# complete; concurrent runs for the same NAME wait for each other (flock).
# Needs root and debootstrap to build.
set -euo pipefail

# Debian packages installed in each root filesystem (space separated).
# Extend here; a new NAME only needs a line.
declare -A PACKAGES=(
    [base]=""
    # python3-pil, python3-opencv: the imaging workloads (FunctionBench's
    # image resize and video processing; crates/torpor/tests/imaging.rs).
    [python]="python3 python3-pil python3-opencv"
    # ca-certificates: Debian's node warns on every start without its bundle.
    [node]="nodejs ca-certificates"
    [java]="openjdk-17-jre-headless"
    [go]=""
    # The servers of crates/torpor/tests/servers.rs (nginx master + workers,
    # PostgreSQL 15, Redis, memcached); their clients (curl, psql,
    # redis-benchmark) run on the host. procps: the ps, pgrep and top an
    # operator runs inside (crates/torpor/tests/proc_tools.rs).
    [servers]="nginx-light postgresql-15 redis-server memcached procps"
    # Debian's gunicorn serving a preloaded app (the copy-on-write fork
    # benchmark, crates/bench/benches/cow.rs: pre-fork workers' memory).
    [wsgi]="python3 gunicorn"
    # CPython's own regression tests (scripts/cpython-tests.sh runs them
    # natively in a chroot and in torpor: docs/results/cpython-tests.md).
    [cpython-tests]="python3 libpython3.11-testsuite"
)
# Packages needed only while building (installed, used by a build step, then
# purged with whatever they pulled in).
declare -A BUILD_PACKAGES=(
    [go]="golang-go"
)

prog=build-rootfs
log() { echo "$prog: $*" >&2; }
die() { echo "$prog: error: $*" >&2; exit 1; }

usage() {
    cat >&2 <<EOF
usage: $0 NAME [CACHE_DIR]
  NAME: one of: ${!PACKAGES[*]}
  CACHE_DIR: default \${TORPOR_ROOTFS_CACHE:-\$HOME/.cache/torpor/rootfs}
Builds CACHE_DIR/NAME once (debootstrap --variant=minbase + packages) and prints its path.
EOF
    exit 2
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
name=$1
case $name in -h|--help) usage ;; esac
[ -n "${PACKAGES[$name]+set}" ] || die "unknown root filesystem '$name' (known: ${!PACKAGES[*]})"

if [ $# -ge 2 ]; then
    cache=$2
elif [ -n "${TORPOR_ROOTFS_CACHE:-}" ]; then
    cache=$TORPOR_ROOTFS_CACHE
else
    [ -n "${HOME:-}" ] || die "neither CACHE_DIR, TORPOR_ROOTFS_CACHE nor HOME is set"
    cache=$HOME/.cache/torpor/rootfs
fi
mkdir -p "$cache" || die "cannot create cache directory $cache"
cache=$(cd "$cache" && pwd -P)
final=$cache/$name
marker=.torpor-complete
pkgs=${PACKAGES[$name]}

# Says whether $final is complete and built with today's package list.
up_to_date() {
    [ -f "$final/$marker" ] && grep -qxF "packages=$pkgs" "$final/$marker"
}

if up_to_date; then
    echo "$final"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot need it): sudo $0 $*"
command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"
command -v chroot >/dev/null || die "chroot not found (coreutils)"
command -v flock >/dev/null || die "flock not found (util-linux)"

# One build per NAME at a time; a run that waited finds the root complete.
exec 9>"$cache/.$name.lock"
if ! flock -n 9; then
    log "waiting for another build of '$name' ($cache/.$name.lock)"
    flock 9
fi
if up_to_date; then
    echo "$final"
    exit 0
fi
if [ -e "$final/$marker" ]; then
    log "'$name' was built with other packages ($(grep -m1 '^packages=' "$final/$marker" \
        || echo 'no packages= line')); rebuilding with packages=$pkgs"
fi

# --- the suite and the mirror ---------------------------------------------

suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || die "no VERSION_CODENAME in /etc/os-release: is this Debian?"

# The first URI of an enabled `deb` source for $suite, deb822 (*.sources)
# files first, then one-line (sources.list, *.list) ones.
mirror_from_apt_sources() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$1" '
            BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; enabled = "yes"
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^[ \t]*#/ || !match(line, /^[A-Za-z-]+:/)) continue
                    key = tolower(substr(line, 1, RLENGTH - 1))
                    val = substr(line, RLENGTH + 1)
                    gsub(/^[ \t]+|[ \t]+$/, "", val)
                    if (key == "types") types = val
                    else if (key == "uris") uris = val
                    else if (key == "suites") suites = val
                    else if (key == "enabled") enabled = tolower(val)
                }
                if (enabled == "no") next
                if (index(" " types " ", " deb ") == 0) next
                if (index(" " suites " ", " " suite " ") == 0) next
                split(uris, u, /[ \t]+/)
                if (u[1] != "") { print u[1]; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v suite="$1" '
            $1 != "deb" { next }
            {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f"
    done
}

if [ -n "${TORPOR_DEBIAN_MIRROR:-}" ]; then
    mirror=$TORPOR_DEBIAN_MIRROR
else
    mirror=$(mirror_from_apt_sources "$suite" | head -n 1)
    [ -n "$mirror" ] || die "no enabled 'deb' source for suite '$suite' in /etc/apt/sources.list*; set TORPOR_DEBIAN_MIRROR"
fi
case $mirror in
    http://*|https://*|file:/*) ;;
    *) die "unsupported mirror URI '$mirror' (need http, https or file; set TORPOR_DEBIAN_MIRROR)" ;;
esac

# --- helpers -----------------------------------------------------------------

# Removes a directory tree without ever crossing into a mount inside it
# (a leftover /proc, or a /dev debootstrap bound from the host).
remove_tree() {
    local dir=$1 mnt
    [ -e "$dir" ] || return 0
    # Unmount anything still mounted below it, deepest first.
    while read -r mnt; do
        umount -l "$mnt" 2>/dev/null || true
    done < <(awk -v d="$dir/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    rm -rf --one-file-system -- "$dir"
}

# Runs a long command (debootstrap, apt-get) in its own process group, in the
# background, so that an INT or TERM to this script is handled at once: the
# EXIT trap stops the whole group (stop_child), then removes the temporary root.
child=
run() {
    setsid -w "$@" &
    child=$!
    local rc=0
    wait "$child" || rc=$?
    child=
    return "$rc"
}
stop_child() {
    [ -n "${child:-}" ] || return 0
    log "stopping the build (process group $child)"
    kill -TERM -- "-$child" 2>/dev/null || true
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 -- "-$child" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
    child=
}

# Can we give chroot commands a private /proc that vanishes with them?
if unshare --mount --propagation private true 2>/dev/null; then
    private_proc=1
else
    private_proc=0
    log "unshare --mount unavailable: chroot commands run without /proc"
fi

# Runs a command inside root $tmp with a clean environment. Its stdout goes to
# stderr (this script's stdout is only the final path).
in_root() {
    local env=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
               HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
    if [ "$private_proc" = 1 ]; then
        run unshare --mount --propagation private -- sh -c \
            'root=$1; shift; mount -t proc proc "$root/proc" && exec chroot "$root" "$@"' \
            sh "$tmp" "${env[@]}" "$@" >&2
    else
        run chroot "$tmp" "${env[@]}" "$@" >&2
    fi
}

# Build step for `go`: a static net/http hello-world at /app/hello, listening
# on $PORT (default 8080), built with Debian's golang-go inside the root.
build_go() {
    mkdir -p "$tmp/app" "$tmp/tmp/hello"
    cat >"$tmp/tmp/hello/main.go" <<'EOF'
// A net/http hello-world: answers "Hello, World!" on $PORT (default 8080).
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "Hello, World!")
	})
	log.Printf("listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, nil))
}
EOF
    in_root sh -c 'cd /tmp/hello && CGO_ENABLED=0 GOCACHE=/tmp/go-cache GOPATH=/tmp/go-path \
        go build -trimpath -ldflags="-s -w" -o /app/hello main.go' || die "go build of /app/hello failed"
    rm -rf "$tmp/tmp/hello" "$tmp/tmp/go-cache" "$tmp/tmp/go-path"
    # A dynamic binary names its interpreter (ld-linux-x86-64.so.2).
    if grep -q 'ld-linux' "$tmp/app/hello"; then
        die "/app/hello is not static"
    fi
}

# --- build -------------------------------------------------------------------

# Leftovers of interrupted builds, and a root without its marker.
for old in "$cache/.$name.tmp."*; do
    [ -e "$old" ] || continue
    log "removing the leftover of an interrupted build: $old"
    remove_tree "$old"
done
for old in "$cache/.$name.old."*; do
    [ -e "$old" ] || continue
    log "removing an outdated root left behind: $old"
    remove_tree "$old"
done
if [ -e "$final" ] && [ ! -e "$final/$marker" ]; then
    log "removing incomplete $final (no $marker)"
    remove_tree "$final"
fi

tmp=$(mktemp -d "$cache/.$name.tmp.XXXXXX")
chmod 755 "$tmp"
trap 'status=$?; stop_child; if [ -n "${tmp:-}" ]; then remove_tree "$tmp"; fi; exit $status' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$(date +%s)
build_pkgs=${BUILD_PACKAGES[$name]:-}
log "building '$name': debootstrap --variant=minbase $suite from $mirror${pkgs:+, then: $pkgs}"
log "into $tmp"

# Debian's .debs are kept for the next root (debootstrap's own cache).
mkdir -p "$cache/.debs"
run debootstrap --variant=minbase --cache-dir="$cache/.debs" "$suite" "$tmp" "$mirror" >&2 \
    || die "debootstrap failed (mirror $mirror, suite $suite)"

if [ -n "$pkgs$build_pkgs" ]; then
    # No daemon may start from a package's maintainer scripts.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"
    in_root apt-get update -q || die "apt-get update failed in the chroot"
    # shellcheck disable=SC2086 # word splitting of the package lists is intended
    in_root apt-get install -y -q --no-install-recommends $pkgs $build_pkgs \
        || die "apt-get install $pkgs $build_pkgs failed in the chroot"
    if declare -F "build_$name" >/dev/null; then
        "build_$name"
    fi
    if [ -n "$build_pkgs" ]; then
        # shellcheck disable=SC2086
        in_root apt-get purge -y -q --autoremove $build_pkgs || die "apt-get purge $build_pkgs failed"
    fi
    rm -f "$tmp/usr/sbin/policy-rc.d"
fi

# Keep it small: no apt caches or lists, logs, man or info pages, message
# translations (the locale.alias file stays) or documentation (the copyright
# files stay).
in_root apt-get clean || true
rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin "$tmp"/var/cache/debconf/*-old \
    "$tmp"/var/log/* "$tmp"/usr/share/man/* "$tmp"/usr/share/info/* "$tmp"/root/.cache
find "$tmp/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
find "$tmp/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$tmp/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$tmp/tmp" -mindepth 1 -delete

elapsed=$(( $(date +%s) - start ))
{
    echo "name=$name"
    echo "suite=$suite"
    echo "mirror=$mirror"
    echo "packages=$pkgs"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "build_seconds=$elapsed"
} >"$tmp/$marker"

# An outdated root (complete, other packages) is moved aside, the new one
# renamed into place, then the old one removed: $final is missing only
# between the two renames, and never holds a mix of both.
outdated=
if [ -e "$final" ]; then
    outdated=$(mktemp -d "$cache/.$name.old.XXXXXX")
    mv -T "$final" "$outdated"
fi
mv -T "$tmp" "$final"
tmp=
if [ -n "$outdated" ]; then
    log "removing the outdated root (moved to $outdated)"
    remove_tree "$outdated"
fi
size=$(du -sh --one-file-system "$final" | cut -f1)
log "'$name' ready: $final ($size, built in ${elapsed}s)"
echo "$final"
