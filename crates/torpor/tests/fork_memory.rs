//! A forked process's memory is its own: writes after a fork stay private to each side
//! (issue 35's tests, which copy-on-write fork must keep passing).
//!
//! `tests/guest/cow_fork.c` fills 64 MiB, forks a child that forks a grandchild, each writes
//! its own pattern into a share of the pages and checks every word of every page, then
//! writes and checks again after a pause. Run straight through, torpor prints what native
//! Linux prints; with the pause, the sandbox is hibernated and woken, or checkpointed and
//! restored, in between, and every process still sees only its own writes.
//!
//! Each test needs /dev/kvm, or the trap platform: without them it prints "skipped" and
//! passes, unless TORPOR_REQUIRE_KVM=1.

use std::path::Path;
use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

/// The pattern's size, MiB.
const MIB: &str = "64";
/// Room for three copies of it (a fork copies private memory today).
const MEMORY: [&str; 2] = ["--memory", "512M"];

/// What the program prints when every process saw only its own writes.
const PRIVATE: &str = "\
after the forks, parent: 0 of 16384 pages differ
after the forks, child: 0 of 16384 pages differ
after the forks, grandchild: 0 of 16384 pages differ
ready
after the pause, parent: 0 of 16384 pages differ
after the pause, child: 0 of 16384 pages differ
after the pause, grandchild: 0 of 16384 pages differ
child and grandchild exited: yes
writes stay private to each side
";

fn bin() -> &'static Path {
    env!("CARGO_BIN_EXE_torpor").as_ref()
}

fn log_of(sb: &Detached) -> String {
    std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default()
}

fn exited_with(sb: &Detached, code: i32) -> bool {
    sb.verb("state", &[])
        .stdout_str()
        .contains(&format!("\"exitStatus\": {code}"))
}

/// [`PRIVATE`] up to its pause, and after it.
fn private_before_and_after_pause() -> (&'static str, &'static str) {
    let at = PRIVATE.find("ready\n").map_or(0, |i| i + "ready\n".len());
    PRIVATE.split_at(at)
}

/// `cow_fork 64 wait` started detached, once its processes have forked, written and checked
/// (and found every page as it should be).
fn paused(r: &Rootfs) -> Detached {
    paused_in(r, &[], &MEMORY)
}

/// [`paused`] with the variables `env` set for the holder and the run options `options`.
fn paused_in(r: &Rootfs, env: &[(&str, &str)], options: &[&str]) -> Detached {
    let prog = r.guest_program("cow_fork");
    let sb = Detached::start_with_env(bin(), env, options, r.path(), &prog, &[MIB, "wait"]);
    assert!(
        Detached::wait_until(Duration::from_secs(120), || log_of(&sb).contains("ready")),
        "the program never got ready: {}",
        log_of(&sb)
    );
    assert_eq!(log_of(&sb), private_before_and_after_pause().0);
    sb
}

/// Lets `sb`'s program go on past its pause and checks that it ends as [`PRIVATE`] says:
/// `log_before` is what its output log already holds (a restored sandbox's is new).
fn assert_private_after_pause(sb: &Detached, log_before: &str) {
    sb.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(120), || exited_with(sb, 0)),
        "{}\n{}",
        log_of(sb),
        sb.ok("state", &[])
    );
    assert_eq!(
        log_of(sb),
        format!("{log_before}{}", private_before_and_after_pause().1)
    );
}

#[test]
fn writes_after_a_fork_are_private_like_native() {
    if !testutil::require_kvm() {
        return;
    }
    let got = like_native(&Rootfs::new(), "cow_fork", MEMORY[1], &[MIB], None);
    assert!(
        got.stdout_str()
            .ends_with("writes stay private to each side\n"),
        "{}",
        got.stdout_str()
    );
}

#[test]
fn writes_after_a_fork_stay_private_across_a_hibernation() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let sb = paused(&r);
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    // The signal wakes it: every process's pages come back from its swap file.
    assert_private_after_pause(&sb, private_before_and_after_pause().0);
}

#[test]
fn writes_after_a_fork_stay_private_across_a_checkpoint_and_restore() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let sb = paused(&r);
    let (_t, dir) = sb.checkpoint_to_temp();
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    // The restored sandbox has a directory, and an output log, of its own.
    assert_private_after_pause(&restored, "");
}

/// A fork from a process whose other threads run (`tests/guest/cow_threads.c`): one writes
/// the whole array round after round, one waits in `read()` into a buffer. The child sees
/// no write made after its fork, neither the writer's (on trap, the parent's entries become
/// read-only before the fork returns) nor the read's, which completes after the fork into
/// the parent's buffer only (its frames pinned, copied for the child). As natively, on both
/// platforms.
#[test]
fn a_fork_beside_running_threads_keeps_the_child_s_memory_as_it_was() {
    if !testutil::require_kvm() {
        return;
    }
    like_native(&Rootfs::new(), "cow_threads", MEMORY[1], &[], None);
}

/// `tests/guest/NAME.c ARGS` in a sandbox of `memory` (with `TORPOR_COW_FORK=cow` if given),
/// which must print what it prints natively and exit 0 as it does; its output.
fn like_native(
    r: &Rootfs,
    name: &str,
    memory: &str,
    args: &[&str],
    cow: Option<&str>,
) -> testutil::Output {
    let prog = r.guest_program(name);
    let nat = testutil::native(
        &r.host_path(&format!("bin/{name}")),
        args,
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native run: {nat:?}");
    let mut cmd = Torpor::new(bin())
        .run(r.path(), &prog)
        .memory(memory)
        .args(args)
        .host_env("TORPOR_LOG", "off");
    if let Some(cow) = cow {
        cmd = cmd.host_env("TORPOR_COW_FORK", cow);
    }
    let got = cmd.output();
    got.assert_same_stdout(&nat, name);
    assert_eq!(got.code(), 0, "torpor stderr: {}", got.stderr_str());
    got
}

/// Whether a test of the copy-on-write fork runs here: on the trap platform (the KVM
/// platform copies at fork whatever `TORPOR_COW_FORK` says; S3 shares there).
fn copy_on_write_platform() -> bool {
    if !testutil::require_kvm() {
        return false;
    }
    if !testutil::platform_is_trap() {
        eprintln!("the KVM platform copies at fork: tested on trap");
        return false;
    }
    true
}

/// `prog ARGS` in a sandbox of `memory` with `TORPOR_COW_FORK` set to `cow`.
fn run_cow(r: &Rootfs, prog: &str, memory: &str, args: &[&str], cow: &str) -> testutil::Output {
    Torpor::new(bin())
        .run(r.path(), prog)
        .memory(memory)
        .args(args)
        .host_env("TORPOR_COW_FORK", cow)
        .output()
}

/// With `TORPOR_COW_FORK=1` on the trap platform, a fork shares the parent's frames
/// copy-on-write (`docs/design/cow-fork.md`, S1): the three processes fit in 160 MiB, where
/// three copies of the 64 MiB pattern (192 MiB) would not (a copying fork fails with ENOMEM
/// there), and every write stays private to its side, as natively. The KVM platform copies
/// whatever the variable says (S3 shares there).
#[test]
fn a_copy_on_write_fork_shares_frames_and_keeps_writes_private() {
    if !copy_on_write_platform() {
        return;
    }
    let r = Rootfs::new();
    like_native(&r, "cow_fork", "160M", &[MIB], Some("1"));
    // The same program copying at fork does not fit: the limit above is a real one.
    let copied = run_cow(&r, &r.guest_program("cow_fork"), "160M", &[MIB], "0");
    assert_ne!(copied.code(), 0, "{}", copied.stdout_str());
}

/// `cow_fork 64 wait` as [`paused`] starts it, its forks sharing frames (trap,
/// `TORPOR_COW_FORK=1`) in 160 MiB, where three copies of the pattern would not fit.
fn paused_sharing(r: &Rootfs) -> Detached {
    paused_in(r, &[("TORPOR_COW_FORK", "1")], &["--memory", "160M"])
}

/// A sandbox whose processes share frames copy-on-write hibernates as one family
/// (`docs/design/cow-fork.md`, S2): the three processes of `cow_fork 64 wait` (trap,
/// `TORPOR_COW_FORK=1`, in 160 MiB, where three copies would not fit) deflate into one swap
/// store that holds each frame once (the parent's 64 MiB and the pages each child wrote:
/// 117 MiB, where a copy per process would be 192 MiB), listed under the parent with the
/// pids that share it; woken, every process still sees only its own writes.
#[test]
fn a_family_sharing_frames_hibernates_once_and_keeps_writes_private() {
    if !copy_on_write_platform() {
        return;
    }
    let r = Rootfs::new();
    let sb = paused_sharing(&r);
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    let stats: serde_json::Value =
        serde_json::from_str(&sb.ok("stats", &[])).expect("stats is JSON");
    let families = stats["processes"].as_array().expect("processes");
    assert_eq!(families.len(), 1, "one family: {families:?}");
    assert_eq!(
        families[0]["sharing"].as_array().map(Vec::len),
        Some(2),
        "the child and the grandchild share the parent's memory: {families:?}"
    );
    let swap = families[0]["swap_bytes"].as_u64().expect("swap_bytes");
    let mib = 1 << 20;
    assert!(
        (117 * mib..136 * mib).contains(&swap),
        "each frame written once (117 MiB of pattern pages): {swap} bytes"
    );
    assert_private_after_pause(&sb, private_before_and_after_pause().0);
}

/// A checkpoint of processes that share frames copy-on-write saves their memory once (one
/// image, under the parent's pid; checkpoint format 1.10), and the restore shares the frames
/// again: the restored sandbox runs in the same 160 MiB, where three copies would not fit,
/// and every process still sees only its own writes.
#[test]
fn a_family_sharing_frames_is_checkpointed_once_and_restored_sharing() {
    if !copy_on_write_platform() {
        return;
    }
    let r = Rootfs::new();
    let sb = paused_sharing(&r);
    let (_t, dir) = sb.checkpoint_to_temp();
    let images: Vec<String> = std::fs::read_dir(&dir)
        .expect("checkpoint directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("mem-") && n.ends_with(".img"))
        .collect();
    assert_eq!(
        images.len(),
        1,
        "one memory image for the family: {images:?}"
    );
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    assert_private_after_pause(&restored, "");
}

/// `/proc/PID/smaps` counts a frame a fork shares as Linux does (`tests/guest/cow_pss.c`):
/// shared and dirty, its `Pss` divided by the processes that map it; a copy the child made
/// is the parent's own again. The same figures as natively (trap, where forks share).
#[test]
fn smaps_divides_a_shared_frame_among_the_processes_that_map_it() {
    if !copy_on_write_platform() {
        return;
    }
    like_native(&Rootfs::new(), "cow_pss", "256M", &[], Some("1"));
}

/// The memory limit holds when copy-on-write copies come late (trap, `TORPOR_COW_FORK=1`):
/// a parent of 96 MiB forks in a 160 MiB sandbox (a copying fork fails there with ENOMEM),
/// its child writes every page again, and the OOM killer ends the child once the copies
/// reach the limit; the parent's pages are untouched and it ends normally.
#[test]
fn late_copies_meet_the_memory_limit() {
    if !copy_on_write_platform() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("cow_late");
    let run = |cow: &str| run_cow(&r, &prog, "160M", &["96"], cow);
    let shared = run("1");
    assert_eq!(
        shared.stdout_str(),
        "child: signal 9\nparent ok\n",
        "{}",
        shared.stderr_str()
    );
    assert_eq!(shared.code(), 0);
    assert!(
        shared.stderr_str().contains("out of sandbox memory"),
        "{}",
        shared.stderr_str()
    );
    let copied = run("0");
    assert_eq!(copied.code(), 1, "{}", copied.stdout_str());
}
