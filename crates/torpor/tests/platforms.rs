//! The two platforms side by side: the same guest programs give the same output on KVM and on
//! trap, `--platform` chooses, and `torpor stats` names the platform and counts the trap
//! platform's stub processes in the sandbox's memory.
//!
//! The KVM half of each comparison needs /dev/kvm (skipped without it, failed with
//! `TORPOR_REQUIRE_KVM=1` unless the suite runs on trap: `TORPOR_PLATFORM=trap`); the trap
//! platform needs no device.

use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Whether the KVM half can run here (not in the suite's trap pass, which hides /dev/kvm).
fn kvm_here() -> bool {
    !testutil::platform_is_trap() && testutil::require_kvm()
}

/// Runs `program ARGS` on `platform`; its exit code and standard output.
fn run_on(platform: &str, r: &Rootfs, program: &str, args: &[&str]) -> (i32, String) {
    let out = torpor()
        .run(r.path(), program)
        .option("--platform", platform)
        .args(args.iter().map(|a| a.to_string()))
        .host_env("TORPOR_LOG", "off")
        .output();
    (out.code(), out.stdout_str().to_string())
}

/// Programs that exercise files, pipes, ptys and shared file mappings, signals with their
/// frames and FPU state, fork, exec and wait print the same facts on both platforms (each
/// also matches a native run in its own test).
#[test]
fn guest_programs_print_the_same_on_both_platforms() {
    if !kvm_here() {
        return;
    }
    let r = Rootfs::new();
    // Each with the status it ends with natively (signals ends with abort()).
    for (name, args, code) in [
        ("misc_io", &[][..], 0),
        ("signals", &[][..], 134),
        ("processes", &[][..], 0),
    ] {
        let prog = r.guest_program(name);
        let kvm = run_on("kvm", &r, &prog, args);
        let trap = run_on("trap", &r, &prog, args);
        assert_eq!(kvm.0, code, "{name} on kvm: {}", kvm.1);
        assert_eq!(trap, kvm, "{name}: trap differs from kvm");
    }
}

/// `--platform trap` runs a sandbox on the trap platform wherever: `torpor stats` names it,
/// lists its stub processes (one stub, and apart the stub factory, which shares the
/// holder's memory), and counts the stub's memory in
/// `pss_bytes`; the sandbox hibernates and wakes, and its stubs end with it.
#[test]
fn stats_name_the_trap_platform_and_count_its_stubs() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (sb, addr) = Detached::http_server(
        env!("CARGO_BIN_EXE_torpor").as_ref(),
        &r,
        &["--platform", "trap"],
        None,
    );
    let stats: serde_json::Value = serde_json::from_str(&sb.ok("stats", &[])).unwrap();
    assert_eq!(stats["platform"], "trap", "{stats}");
    let pids: Vec<u64> = stats["platform_pids"]
        .as_array()
        .expect("platform_pids")
        .iter()
        .filter_map(|p| p.as_u64())
        .collect();
    assert_eq!(pids.len(), 1, "one stub: {stats}");
    // The stub factory shares the holder's memory: listed apart, not counted again.
    let shared = stats["platform_shared_pids"]
        .as_array()
        .expect("platform_shared_pids");
    assert_eq!(shared.len(), 1, "the stub factory: {stats}");
    let factory = shared[0].as_u64().expect("a pid") as u32;
    assert!(!pids.contains(&u64::from(factory)), "{stats}");
    // Counted as a helper, it would add the holder's whole PSS (its memory is the holder's).
    let helpers = stats["helpers_pss_bytes"]
        .as_u64()
        .expect("helpers_pss_bytes");
    let holder = stats["holder_pss_bytes"]
        .as_u64()
        .expect("holder_pss_bytes");
    assert!(helpers < holder, "the factory counted as a helper: {stats}");
    let mut stubs_kib = 0;
    for p in &pids {
        let pss = testutil::pss_kib(*p as u32);
        assert!(pss.is_some(), "{p} lives and its PSS is readable");
        stubs_kib += pss.unwrap_or(0);
    }
    // pss_bytes is the holder's PSS plus the stubs' (which the test reads again a moment
    // later: a little slack there).
    let field = |f: &str| {
        stats[f]
            .as_u64()
            .unwrap_or_else(|| panic!("{f} in {stats}"))
    };
    let (total, holder, platform) = (
        field("pss_bytes"),
        field("holder_pss_bytes"),
        field("platform_pss_bytes"),
    );
    assert_eq!(total, holder + platform, "{stats}");
    assert!(
        platform > 0 && (platform / 1024).abs_diff(stubs_kib) < 256,
        "the stubs' PSS {platform} B counted, {stubs_kib} KiB read here"
    );
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    assert!(testutil::http_get(addr, "/", Duration::from_secs(10)).is_ok());
    sb.ok("delete", &["-f"]);
    assert!(
        Detached::wait_until(Duration::from_secs(10), || pids
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())),
        "the stubs ended with the sandbox"
    );
}

/// A platform name torpor does not know is a clear error.
#[test]
fn an_unknown_platform_is_refused() {
    let r = Rootfs::new();
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .host_env("TORPOR_PLATFORM", "qemu")
        .arg("true")
        .output();
    assert_eq!(out.code(), 125, "{out:?}");
    assert!(
        out.stderr_str().contains("TORPOR_PLATFORM=qemu"),
        "{}",
        out.stderr_str()
    );
}

/// On the trap platform programs get the host's vDSO (`AT_SYSINFO_EHDR`), so their clock
/// calls need no trap, and what they read there never disagrees with the clock system calls
/// (also for gettimeofday, time and a CPU-time clock, which the vDSO hands to the system
/// call); `TORPOR_TRAP_VDSO=off` leaves it out. KVM gives no vDSO: the same program reads
/// the same clocks through system calls.
#[test]
fn clocks_read_through_the_vdso_agree_with_the_system_calls() {
    let r = Rootfs::new();
    let prog = r.guest_program("vdso_clock");
    let (code, out) = run_on("trap", &r, &prog, &[]);
    assert_eq!((code, out.as_str()), (0, "vdso\nclocks agree\n"));
    let off = torpor()
        .run(r.path(), &prog)
        .option("--platform", "trap")
        .host_env("TORPOR_LOG", "off")
        .host_env("TORPOR_TRAP_VDSO", "off")
        .output();
    assert_eq!(
        (off.code(), off.stdout_str().as_str()),
        (0, "no vdso\nclocks agree\n"),
        "{off:?}"
    );
    if kvm_here() {
        let (code, out) = run_on("kvm", &r, &prog, &[]);
        assert_eq!((code, out.as_str()), (0, "no vdso\nclocks agree\n"));
    }
}
