#!/usr/bin/env bash
# The test command of README.md: installs what the tests need (Debian packages, as root),
# then runs the whole test suite. Extra arguments go to `cargo test`.
#
#   sudo scripts/test.sh            # or, as root: scripts/test.sh
#
# TORPOR_REQUIRE_KVM=1 (set by .ci/run) makes tests that need /dev/kvm, podman, containerd
# or the Debian roots fail instead of skipping. TORPOR_SKIP_APT=1 skips the installation.
# The suite runs twice: on the default platform (KVM where /dev/kvm opens), then on the trap
# platform with /dev/kvm hidden (TORPOR_TRAP_PASS=0 skips that pass).
set -euo pipefail
cd "$(dirname "$0")/.."

# busybox-static: the applets the end-to-end tests compare with native runs;
# gcc + libc6-dev: static guest programs (tests/guest/*.c) and the demo;
# curl: a real HTTP client for the --publish test;
# debootstrap: the Debian root filesystems of the language-runtime tests
# (scripts/build-rootfs.sh, cached in $HOME/.cache/torpor/rootfs);
# openjdk-17-jdk-headless: javac, for the Java hello-world those tests run;
# fonts-dejavu-core: the font `torpor-bench paper` draws its plots with;
# bc: scripts/stress.sh's figures;
# postgresql-client (psql), redis-tools (redis-cli, redis-benchmark), libmemcached-tools
# (memccp, memccat): the real clients of the server tests (crates/torpor/tests/servers.rs;
# curl serves nginx's);
# protobuf-compiler (protoc): the k8s-cri crate's build script compiles the CRI's protobuf
# definitions (the CRI client of crates/torpor/tests/cri.rs).
base="busybox-static gcc libc6-dev curl debootstrap openjdk-17-jdk-headless fonts-dejavu-core bc postgresql-client redis-tools libmemcached-tools protobuf-compiler"
# podman (with its network stack: netavark, aardvark-dns, iptables) and containerd (ctr, the
# runc shim): the OCI runtime tests drive torpor through them (crates/torpor/tests/podman.rs,
# containerd.rs; the containerd test starts its own daemon); runc, containernetworking-plugins
# (bridge, host-local, loopback in /usr/lib/cni) and iproute2: the Kubernetes CRI test
# (cri.rs) runs a pod on torpor and on runc through containerd's CRI on a bridge network.
# criu: podman checks for it (and its version) before `container checkpoint`, whatever the
# runtime (podman.rs checkpoints and restores a container on torpor).
engines="podman netavark aardvark-dns iptables containerd runc containernetworking-plugins iproute2 criu"

if [ "${TORPOR_SKIP_APT:-0}" != 1 ]; then
    missing=$(for p in $base $engines; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done)
    if [ -n "$missing" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "scripts/test.sh: missing Debian packages:" $missing >&2
            echo "run as root (sudo scripts/test.sh), or install them first" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        # shellcheck disable=SC2086
        apt-get install -y --no-install-recommends $base
        # shellcheck disable=SC2086
        apt-get install -y $engines
    fi
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null; then
    echo "scripts/test.sh: cargo not found (looked in PATH and \$HOME/.cargo/bin)" >&2
    exit 1
fi
cargo --version
# The layering check (scripts/check-layers.py): no crate names one above it, no new circle
# between the modules of a crate.
python3 scripts/check-layers.py
cargo test --workspace --release "$@"

# The same suite on the trap platform (no KVM: every syscall of the application traps in a
# process of its own), on a host where /dev/kvm is hidden: a private mount namespace with
# /dev/null over it. TORPOR_TRAP_PASS=0 skips it.
if [ "${TORPOR_TRAP_PASS:-1}" = 1 ]; then
    echo "== the test suite again on the trap platform, /dev/kvm hidden"
    unshare -m --propagation private -- sh -c '
        if [ -e /dev/kvm ]; then mount --bind /dev/null /dev/kvm; fi
        TORPOR_PLATFORM=trap exec cargo test --workspace --release "$@"' sh "$@"
fi
