#!/usr/bin/env bash
# Kubernetes CRI benchmark (#11): pod start to first HTTP response, and the first response
# after an idle hibernate, torpor against runc, through containerd's CRI (the ignored test
# bench_pod_start_and_wake of crates/torpor/tests/cri.rs: a private containerd, a Debian
# python3 http.server pod on a bridge network, driven over gRPC as the kubelet does).
#
#   sudo scripts/bench-cri.sh [RUNS]        # default 5 runs per runtime
#
# Prints a Markdown table (medians, min-max); needs what tests/cri.rs needs (root, /dev/kvm,
# containerd, runc, containernetworking-plugins, the Debian python root).
set -euo pipefail
cd "$(dirname "$0")/.."
export TORPOR_CRI_BENCH_RUNS="${1:-5}"
export TORPOR_REQUIRE_KVM=1
cargo test --release -p torpor --test cri -- --ignored --nocapture --test-threads 1 \
    bench_pod_start_and_wake 2>&1 | grep -E '^(\||medians|imported)'
