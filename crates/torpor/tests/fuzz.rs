//! Short runs of the fuzzers (issue 13, item 5), inside the normal test command.
//!
//! - The coverage-guided targets' harness functions (`fuzz/src/*.rs`, included here as
//!   source): every committed seed input (`fuzz/seeds/TARGET/`) and a few thousand mutations
//!   of them from a fixed seed, without libFuzzer or nightly flags. `TORPOR_FUZZ_MUTATIONS=N`
//!   changes the count. The campaigns are `scripts/fuzz.sh libfuzzer`.
//! - The guest syscall fuzzer (`tests/guest/syscall_fuzz.c`): a few fixed seeds of random
//!   syscalls with random arguments, from one thread and from four; the sandbox must end
//!   with the program's own exit and its summary line, never a torpor error. The long
//!   campaign is `scripts/fuzz.sh syscalls`.
//! - Regression tests for the bugs the fuzzers found.
//!
//! See docs/SECURITY.md, "Fuzzing".

use std::process::Command;
use std::time::Duration;

use testutil::{native, run_command, Output, Rootfs, Torpor};

#[path = "../../../fuzz/src/util.rs"]
#[allow(dead_code)]
mod util;

#[path = "../../../fuzz/src/elf.rs"]
#[allow(dead_code)]
mod elf;

#[path = "../../../fuzz/src/shebang.rs"]
#[allow(dead_code)]
mod shebang;

#[path = "../../../fuzz/src/pagefile.rs"]
#[allow(dead_code)]
mod pagefile;

#[path = "../../../fuzz/src/oci.rs"]
#[allow(dead_code)]
mod oci;

#[path = "../../../fuzz/src/bundle.rs"]
#[allow(dead_code)]
mod bundle;

/// Runs every seed of `target` through `harness`, then mutations of them.
fn replay(target: &str, harness: fn(&[u8])) {
    let dir = testutil::workspace_root().join("fuzz/seeds").join(target);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read seed"))
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    for (name, data) in &seeds {
        let r = std::panic::catch_unwind(|| harness(data));
        assert!(r.is_ok(), "{target}: seed {name} fails the harness");
    }
    let n: usize = std::env::var("TORPOR_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let mut rng = util::Rng(
        target
            .bytes()
            .fold(0x5eed_u64, |h, b| h.wrapping_mul(131) ^ u64::from(b)),
    );
    for i in 0..n {
        let a = &seeds[rng.below(seeds.len())].1;
        let b = &seeds[rng.below(seeds.len())].1;
        let input = util::mutate(&mut rng, a, b);
        let r = std::panic::catch_unwind(|| harness(&input));
        assert!(
            r.is_ok(),
            "{target}: mutation {i} fails the harness; input (hex): {}",
            input.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
    }
    util::remove_scratch_dirs();
    println!("{target}: {} seeds, {n} mutations", seeds.len());
}

#[test]
fn fuzz_replay_elf() {
    replay("elf", elf::run);
}

/// Also the regression test of the #! parsing divergences the target found (a NUL in the
/// line, an interpreter path cut off at 256 bytes).
#[test]
fn fuzz_replay_shebang() {
    replay("shebang", shebang::run);
}

#[test]
fn fuzz_replay_swapfile() {
    replay("swapfile", pagefile::run_swap);
}

#[test]
fn fuzz_replay_reapfile() {
    replay("reapfile", pagefile::run_reap);
}

#[test]
fn fuzz_replay_pagefile_corrupt() {
    replay("pagefile_corrupt", pagefile::run_corrupt);
}

/// config.json: the `oci_spec` seeds and the `bundle` ones, parsed as a spec.
#[test]
fn fuzz_replay_oci_spec() {
    replay("oci_spec", oci::run_spec);
    replay("bundle", oci::run_spec);
}

/// The `bundle` target: `Bundle::load` of the torpor library on a bundle directory.
#[test]
fn fuzz_replay_bundle() {
    replay("bundle", bundle::run);
}

#[test]
fn fuzz_replay_control() {
    replay("control", oci::run_control);
}

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Runs `cmd` in a network namespace of its own (loopback only) when we are root and
/// `unshare` exists, so that no random datagram can leave the machine even if the sandbox's
/// connect policy had a hole; otherwise as it is.
fn isolated(cmd: Command) -> Command {
    // SAFETY: no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let probe = Command::new("unshare")
        .args(["--net", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !probe {
        return cmd;
    }
    let mut w = Command::new("unshare");
    w.args([
        "--net",
        "--",
        "sh",
        "-c",
        "ip link set lo up 2>/dev/null; exec \"$0\" \"$@\"",
    ])
    .arg(cmd.get_program())
    .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    w
}

/// Lines of torpor's own stderr that mean the runtime, not the program, failed.
fn runtime_failure(out: &Output) -> Option<String> {
    let err = out.stderr_str();
    err.lines()
        .find(|l| {
            l.contains("sandbox failed")
                || l.contains("panicked")
                || l.contains("ring-0 stub")
                || l.contains("torpor: ")
                || l.contains(" ERROR ")
        })
        .map(str::to_string)
}

fn run_syscall_fuzz(r: &Rootfs, prog: &str, seed: u64, count: u64, threads: u32) {
    let b = torpor()
        .run(r.path(), prog)
        .args([seed.to_string(), count.to_string()])
        .args(["-t".to_string(), threads.to_string()])
        .host_env("TORPOR_LOG", "error")
        .timeout(Duration::from_secs(120));
    let out = run_command(isolated(b.command()), None, Duration::from_secs(120));
    let line = out
        .stdout_str()
        .lines()
        .find(|l| l.starts_with("syscall_fuzz: seed="))
        .map(str::to_string);
    assert!(
        out.code() == 0 && runtime_failure(&out).is_none(),
        "syscall_fuzz seed {seed}: the sandbox did not end with the program's exit 0 \
         (replay: scripts/fuzz.sh syscalls with seed {seed}, or the program's -v flag)\n{out:?}"
    );
    let line = line.unwrap_or_else(|| panic!("seed {seed}: no summary line\n{out:?}"));
    assert!(
        line.contains(&format!(" done={count} ")),
        "seed {seed}: {line}"
    );
    println!("{line}");
}

#[test]
fn syscall_fuzz_fixed_seeds_end_normally() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("syscall_fuzz");
    for seed in 1..=4 {
        run_syscall_fuzz(&r, &prog, seed, 5_000, 1);
    }
    for seed in 5..=6 {
        run_syscall_fuzz(&r, &prog, seed, 10_000, 4);
    }
}

/// Found by syscall_fuzz: nanosleep and clock_nanosleep slept on the host for the whole
/// duration, deaf to signals, exit and park requests (a guest could hang itself and its
/// hibernate for up to 2^63 s).
#[test]
fn sleeps_end_early_on_a_signal_like_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("sleep_interrupt");
    let nat = native(
        &testutil::guest_program("sleep_interrupt"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native\n{nat:?}");
    let got = torpor()
        .run(r.path(), &prog)
        .timeout(Duration::from_secs(60))
        .output();
    assert_eq!(got.code(), 0, "{got:?}");
    assert_eq!(got.stdout_str(), nat.stdout_str(), "{got:?}");
    assert!(!got.stdout_str().contains("late"), "{got:?}");
}

/// Found by `syscall_fuzz -t`: exit_group from one thread left a thread blocked in nanosleep,
/// rt_sigsuspend, pause or rt_sigtimedwait (and a child process in them when the sandbox's
/// init ended) waiting forever, so the sandbox never ended.
#[test]
fn exit_group_ends_threads_blocked_in_any_call() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("exit_blocked");
    for call in [
        "read",
        "accept",
        "futex",
        "epoll",
        "poll",
        "eventfd",
        "flock",
        "recv",
        "sleep",
        "wait",
        "sigsuspend",
    ] {
        let started = std::time::Instant::now();
        let got = torpor()
            .run(r.path(), &prog)
            .arg(call)
            .timeout(Duration::from_secs(60))
            .output();
        assert_eq!(got.code(), 7, "{call}: {got:?}");
        assert_eq!(got.stdout_str(), format!("{call}: exit_group\n"), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{call}: the sandbox took {:?} to end",
            started.elapsed()
        );
    }
}
