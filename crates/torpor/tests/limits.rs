//! The memory limit bounds a whole sandbox, all its processes together (each is its own VM
//! with its own allocator, counted against one budget): four processes that each hold
//! 200 MiB in a 512 MiB sandbox cannot all live; the largest are killed with SIGKILL one at a
//! time, as Linux's OOM killer does in a memory cgroup, the others finish, and a sandbox
//! beside it is not touched (`tests/guest/memory_hog.c`).
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

#[test]
fn sandbox_memory_is_bounded_across_its_processes() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let hog = r.guest_program("memory_hog");
    // A neighbour that must not notice.
    let (neighbour, addr) =
        Detached::http_server(&PathBuf::from(env!("CARGO_BIN_EXE_torpor")), &r, &[], None);
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &hog)
        .option("--memory", "512M")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(out.code(), 0, "{}", out.stderr_str());
    let line = out.stdout_str();
    let field = |name: &str| -> u32 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    assert!(field("killed") >= 2, "at most two fit: {line}");
    assert!(field("finished") >= 1, "the survivors finish: {line}");
    assert_eq!(field("other"), 0, "{line}");
    // With room for all of them, none is killed.
    let roomy = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &hog)
        .option("--memory", "1G")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(roomy.stdout_str(), "killed=0 finished=4 other=0\n");
    let resp = testutil::http_get(addr, "/", Duration::from_secs(5)).expect("neighbour answers");
    assert!(!resp.body_str().is_empty());
    drop(neighbour);
}

/// A hibernate whose swap could exceed `--swap-quota` fails with a clear error and leaves
/// the sandbox hot (serving, nothing written); a quota with room lets it hibernate.
#[test]
fn swap_quota_keeps_the_sandbox_hot() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_torpor"));
    let (sb, addr) = Detached::http_server(&bin, &r, &["--swap-quota", "64K"], None);
    let o = sb.verb("hibernate", &[]);
    assert_ne!(o.code(), 0, "the quota must refuse it");
    assert!(o.stderr_str().contains("swap quota"), "{}", o.stderr_str());
    let state = sb.stat("state");
    assert!(state == "hot" || state == "running", "{state}");
    let swap_files = std::fs::read_dir(sb.dir())
        .expect("state dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("swap"))
        .count();
    assert_eq!(swap_files, 0, "nothing written");
    assert!(testutil::http_get(addr, "/", Duration::from_secs(5)).is_ok());

    let (roomy, addr2) = Detached::http_server(&bin, &r, &["--swap-quota", "1G"], None);
    roomy.ok("hibernate", &[]);
    assert_eq!(roomy.stat("state"), "hibernated");
    assert!(testutil::http_get(addr2, "/", Duration::from_secs(5)).is_ok());
}

/// `--cpus`: the holder runs in a cgroup of its own (`/torpor/ID`) with that CFS quota, a
/// CPU-bound program is throttled by it, and the cgroup goes with the sandbox.
#[test]
fn a_cpu_limit_throttles_the_sandbox_in_a_cgroup_of_its_own() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_torpor"));
    let server = r.guest_program("http_server");
    let sb = Detached::start(&bin, &["--cpus", "0.25"], r.path(), &server, &["8080"]);
    let cgroups = std::fs::read_to_string(format!("/proc/{}/cgroup", sb.pid())).expect("cgroup");
    let want = format!("/torpor/{}", sb.id);
    let cpu_line = cgroups
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "cpu") || c.is_empty())
        })
        .unwrap_or_else(|| panic!("a cpu hierarchy: {cgroups}"));
    assert!(cpu_line.ends_with(&want), "{cpu_line} is {want}");
    // cgroup v1's cpu controller, or v2's unified hierarchy.
    let v1 = PathBuf::from("/sys/fs/cgroup/cpu").join(want.trim_start_matches('/'));
    let v2 = PathBuf::from("/sys/fs/cgroup").join(want.trim_start_matches('/'));
    let (dir, quota) = if v1.join("cpu.cfs_quota_us").exists() {
        let q = std::fs::read_to_string(v1.join("cpu.cfs_quota_us")).expect("quota");
        (v1, q.trim().to_string())
    } else {
        let q = std::fs::read_to_string(v2.join("cpu.max")).expect("cpu.max");
        (v2, q.split_whitespace().next().unwrap_or("").to_string())
    };
    assert_eq!(quota, "25000", "a quarter of 100 ms");
    // A CPU-bound sandbox is held to its quota: its cgroup throttles it (`nr_throttled` in
    // cpu.stat, v1 or v2), whatever else loads the host (the wall time of a run says
    // little on a busy 2-CPU machine: the sandbox's start then dominates it).
    let stat = |dir: &Path| -> u64 {
        std::fs::read_to_string(dir.join("cpu.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let spin = Detached::start(
        &bin,
        &["--cpus", "0.1"],
        r.path(),
        "/bin/busybox",
        &["sh", "-c", "while :; do :; done"],
    );
    let spin_dir = dir.parent().expect("the torpor cgroup").join(&spin.id);
    let throttled = Detached::wait_until(Duration::from_secs(30), || stat(&spin_dir) > 0);
    assert!(
        throttled,
        "{} never throttled: {:?}",
        spin_dir.display(),
        std::fs::read_to_string(spin_dir.join("cpu.stat"))
    );
    spin.ok("delete", &["--force"]);
    sb.ok("delete", &["--force"]);
    assert!(
        Detached::wait_until(Duration::from_secs(10), || !dir.exists()
            && !spin_dir.exists()),
        "{} removed with the sandbox",
        dir.display()
    );
}
