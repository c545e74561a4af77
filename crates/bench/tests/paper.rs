//! `torpor-bench paper` end to end, on the quickest workload: the Go hello-world with
//! `--quick --only go` must produce every output file, with every metric measured and a
//! report that shows them beside the paper's figures.
//!
//! Needs /dev/kvm and the Go root of `scripts/build-rootfs.sh`: without them the test prints
//! "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use std::process::Command;
use std::time::Duration;

#[test]
fn quick_run_on_go_writes_every_output() {
    if !testutil::require_kvm() {
        return;
    }
    if testutil::debian_rootfs("go").is_none() {
        return;
    }
    let out = testutil::TempDir::new("paper-out");
    // The benchmark drives the `torpor` command that `cargo test --workspace` builds beside it.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_torpor-bench"));
    cmd.env("TORPOR_BIN", testutil::built_torpor_bin())
        .args(["paper", "--quick", "--only", "go", "--out"])
        .arg(out.path());
    let o = testutil::run_command(cmd, None, Duration::from_secs(600));
    assert_eq!(o.code(), 0, "torpor-bench paper failed: {}", o.stderr_str());
    for f in [
        "samples.csv",
        "summary.csv",
        "paper.md",
        "fig6_latency.png",
        "fig7_memory.png",
    ] {
        let len = std::fs::metadata(out.path().join(f))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 0, "{f} is missing or empty");
    }
    let summary = std::fs::read_to_string(out.path().join("summary.csv")).unwrap();
    for metric in [
        "cold_ms",
        "hot_ms",
        "fault_wake_ms",
        "reap_wake_ms",
        "woken_ms",
        "pss_hot_bytes",
        "pss_hibernated_bytes",
        "pss_woken_bytes",
    ] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("go,{metric},")))
            .unwrap_or_else(|| panic!("no go,{metric} row in summary.csv:\n{summary}"));
        let n: usize = row
            .split(',')
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(n >= 3, "go {metric}: {n} samples ({row})");
    }
    let md = std::fs::read_to_string(out.path().join("paper.md")).unwrap();
    assert!(md.contains("Go hello"), "{md}");
    assert!(
        md.contains("paper 25"),
        "the paper's Go ratio is shown:\n{md}"
    );
    // Hibernation really deflated every instance.
    let samples = std::fs::read_to_string(out.path().join("samples.csv")).unwrap();
    let median = |metric: &str| {
        let mut v: Vec<f64> = samples
            .lines()
            .filter(|l| l.starts_with(&format!("go,{metric},")))
            .filter_map(|l| l.rsplit(',').next()?.parse().ok())
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert!(
        median("pss_hibernated_bytes") < median("pss_hot_bytes"),
        "hibernated PSS below hot"
    );
}
