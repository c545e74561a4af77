//! Signal delivery: `tests/guest/signals.c` run natively and under torpor must print the same
//! lines and end with the same status (handlers for faults and for signals the program sends
//! itself, rt_sigreturn restoring registers and FPU state, masks, sigsuspend, sigtimedwait,
//! the alternate stack, SA_RESETHAND, SA_NODEFER, abort()), plus a signal sent from outside
//! with `torpor kill` running the application's handler.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

#[track_caller]
fn same_as_native(mode: Option<&str>, expect_code: i32) {
    let r = Rootfs::new();
    let prog = r.guest_program("signals");
    let args: Vec<&str> = mode.into_iter().collect();
    let nat = testutil::native(
        &testutil::guest_program("signals"),
        &args,
        r.path(),
        &[],
        None,
    );
    let got = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .args(&args)
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(
        nat.code(),
        expect_code,
        "native run of signals {mode:?}: {nat:?}"
    );
    got.assert_same_stdout(&nat, &format!("signals {mode:?}"));
    assert_eq!(
        got.code(),
        nat.code(),
        "signals {mode:?}: status differs; stderr: {}",
        got.stderr_str()
    );
}

#[test]
fn handlers_sigreturn_masks_altstack_and_abort_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    same_as_native(None, 134);
}

#[test]
fn delivery_on_a_wild_stack_is_fatal_sigsegv() {
    if !testutil::require_kvm() {
        return;
    }
    same_as_native(Some("badstack"), 139);
}

#[test]
fn handler_without_sa_restorer_is_fatal_sigsegv() {
    if !testutil::require_kvm() {
        return;
    }
    same_as_native(Some("norestorer"), 139);
}

#[test]
fn torpor_kill_runs_the_application_handler() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("signals");
    let sb = Detached::start(
        env!("CARGO_BIN_EXE_torpor").as_ref(),
        &[],
        r.path(),
        &prog,
        &["wait"],
    );
    let log = sb.dir().join("output.log");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        Detached::wait_until(Duration::from_secs(30), || read_log().contains("ready")),
        "the program never got ready: {}",
        read_log()
    );
    sb.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(30), || read_log()
            .contains("sigsuspend returned")),
        "no handler output after torpor kill: {}",
        read_log()
    );
    assert_eq!(
        read_log(),
        "ready\nwait: got SIGUSR1\nwait: sigsuspend returned -1\n"
    );
    assert!(
        Detached::wait_until(Duration::from_secs(30), || json_status(&sb) == Some(0)),
        "the program did not exit 0 after its handler: {}",
        sb.ok("state", &[])
    );
}

#[test]
fn interrupted_syscalls_restart_as_on_linux() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("signals");
    let sb = Detached::start(
        env!("CARGO_BIN_EXE_torpor").as_ref(),
        &[],
        r.path(),
        &prog,
        &["restart"],
    );
    let log = sb.dir().join("output.log");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait_for = |what: &str| {
        assert!(
            Detached::wait_until(Duration::from_secs(30), || read_log().contains(what)),
            "no {what:?} in the output: {}",
            read_log()
        );
    };
    wait_for("ready");
    // Ignored by default: accept neither fails nor returns.
    sb.ok("kill", &["SIGWINCH"]);
    std::thread::sleep(Duration::from_millis(300));
    // SA_RESTART: the handler runs, accept goes on.
    sb.ok("kill", &["SIGUSR2"]);
    wait_for("handler 12");
    std::thread::sleep(Duration::from_millis(300));
    // No SA_RESTART: accept fails with EINTR after the handler.
    sb.ok("kill", &["SIGTERM"]);
    wait_for("accept ->");
    assert_eq!(
        read_log(),
        "ready\nhandler 12\nhandler 15\naccept -> -1 EINTR\n"
    );
    assert!(Detached::wait_until(
        Duration::from_secs(30),
        || json_status(&sb) == Some(0)
    ));
}

fn json_status(sb: &Detached) -> Option<i32> {
    let s = sb.verb("state", &[]).stdout_str();
    testutil::json_field(&s, "exitStatus").and_then(|v| v.parse().ok())
}
