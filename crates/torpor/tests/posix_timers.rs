//! POSIX per-process timers: `tests/guest/posix_timers.c` run natively and under torpor must
//! print the same lines and end with the same status (errors and ids in Linux's order, a
//! periodic SIGEV_SIGNAL timer's signals and overruns, SI_TIMER with si_timerid and
//! si_value, timer_gettime and settime's old value, TIMER_ABSTIME, overruns while the signal
//! is blocked and their cap, SIGEV_THREAD_ID, timer_delete, the C library's SIGEV_THREAD,
//! SIGEV_NONE, the default SIGALRM event, signalfd, the CPU-time clocks, fork and exec).
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use testutil::{Rootfs, Torpor};

#[test]
fn posix_timers_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("posix_timers");
    let nat = testutil::native(
        &testutil::guest_program("posix_timers"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native run of posix_timers: {nat:?}");
    let got = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_same_stdout(&nat, "posix_timers");
    assert_eq!(
        got.code(),
        nat.code(),
        "posix_timers: status differs; stderr: {}",
        got.stderr_str()
    );
}
