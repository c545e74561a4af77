//! Load that once killed sandboxes or corrupted their memory, as short runs (the long
//! campaign is `scripts/stress.sh`, figures in `docs/results/stress.md`):
//! - `tests/guest/stress.c`: dozens of processes with several threads each, mapping, filling,
//!   unmapping and protecting pages while signals fly; every byte is checked;
//! - a busybox shell starting hundreds of background processes at once;
//! - hibernate and wake cycles while a multi-threaded process is under that load;
//! - a fork bomb, stopped at `--pids-limit` with `EAGAIN`.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");

fn torpor() -> Torpor {
    Torpor::new(BIN)
}

#[test]
fn processes_threads_and_signal_storms_keep_every_byte() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("stress");
    for round in 0..2 {
        let got = torpor()
            .run(r.path(), &prog)
            .args(["30", "4", "30"])
            .option("--memory", "1G")
            .timeout(Duration::from_secs(300))
            .output();
        assert_eq!(
            got.stdout_str(),
            "stress: 31 processes x 4 threads x 30 rounds, 0 failed\n",
            "round {round}: status {}, stderr:\n{}",
            got.code(),
            got.stderr_str()
        );
        assert_eq!(got.code(), 0, "round {round}: {}", got.stderr_str());
    }
}

#[test]
fn shell_starts_hundreds_of_background_processes() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.symlink("/bin/sh", "busybox")
        .symlink("/bin/true", "busybox");
    let script = "i=0; while [ $i -lt 300 ]; do /bin/true & i=$((i+1)); done; wait; echo ok";
    let got = torpor()
        .run(r.path(), "/bin/sh")
        .args(["-c", script])
        .timeout(Duration::from_secs(300))
        .output();
    assert_eq!(
        (got.code(), got.stdout_str().as_str()),
        (0, "ok\n"),
        "stderr:\n{}",
        got.stderr_str()
    );
}

#[test]
fn hibernate_and_wake_during_load() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("stress");
    let sb = Detached::start(BIN.as_ref(), &[], r.path(), &prog, &["0", "4", "3000"]);
    let mut cycles = 0;
    for _ in 0..5 {
        if sb.stat("state") == "stopped" {
            break;
        }
        let h = sb.verb("hibernate", &[]);
        if h.code() != 0 {
            // Only a program that has just ended may refuse.
            assert_eq!(sb.stat("state"), "stopped", "hibernate: {}", h.stderr_str());
            break;
        }
        assert_eq!(sb.stat("state"), "hibernated");
        std::thread::sleep(Duration::from_millis(100));
        sb.ok("wake", &[]);
        cycles += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        cycles >= 2,
        "only {cycles} hibernate cycles before the load ended"
    );
    let done = Detached::wait_until(Duration::from_secs(300), || sb.stat("state") == "stopped");
    assert!(done, "the load did not finish");
    let log = std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default();
    assert!(
        log.contains("stress: 1 processes x 4 threads x 3000 rounds, 0 failed"),
        "after {cycles} cycles, output:\n{log}"
    );
}

#[test]
fn a_fork_bomb_stops_at_the_pids_limit() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("forkbomb");
    let got = torpor()
        .run(r.path(), &prog)
        .option("--pids-limit", "64")
        .timeout(Duration::from_secs(300))
        .output();
    assert_eq!(
        (got.code(), got.stdout_str().as_str()),
        (
            0,
            "fork failed after 63: Resource temporarily unavailable\n"
        ),
        "stderr:\n{}",
        got.stderr_str()
    );
}
