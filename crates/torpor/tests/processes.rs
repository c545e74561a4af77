//! Processes: fork, execve, wait4, vfork/posix_spawn and pipes between processes, checked
//! against native runs: `tests/guest/processes.c` and busybox `sh -c` pipelines must print
//! the same bytes and end with the same status in torpor as on the host.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::time::{Duration, Instant};

use testutil::{Output, Rootfs, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// A root with busybox, its applets as symlinks in /bin, and `bin/processes`.
fn shell_root() -> Rootfs {
    let r = Rootfs::new();
    for applet in [
        "sh", "echo", "wc", "cat", "tr", "sort", "head", "seq", "sleep", "true", "false",
        "readlink", "grep",
    ] {
        r.symlink(&format!("/bin/{applet}"), "busybox");
    }
    r
}

#[track_caller]
fn assert_same(what: &str, nat: &Output, got: &Output) {
    got.assert_same_stdout(nat, what);
    assert_eq!(
        got.code(),
        nat.code(),
        "{what}: status differs; torpor stderr: {}",
        got.stderr_str()
    );
}

/// Runs `tests/guest/NAME.c` natively and in torpor in the shell root, checks that both end
/// alike with the same output, and returns torpor's run.
#[track_caller]
fn guest_same_as_native(name: &str) -> Output {
    let r = shell_root();
    let prog = r.guest_program(name);
    let nat = testutil::native(
        &r.host_path(&format!("bin/{name}")),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native run: {nat:?}");
    let got = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_same(name, &nat, &got);
    got
}

#[test]
fn fork_exec_wait_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let got = guest_same_as_native("processes");
    assert!(got.stdout_str().ends_with("done\n"));
    // execveat (ENOSYS before) ran the program by a directory fd and by an open file.
    for line in [
        "[by execveat] env FROM_PARENT=dirfd",
        "[by fexecve] env FROM_PARENT=fd",
        // clone's sharing flags between processes (EINVAL before).
        "CLONE_FILES|CLONE_FS: child's fd open here 1, cwd /tmp, umask 027",
        "close_range UNSHARE in a CLONE_FILES child: 0, still open here 1",
        "CLONE_PARENT: grandchild reaped by its grandparent 1, status 7",
        // Robust mutexes (set_robust_list was recorded nowhere: the next locker hung).
        "robust mutex of a dead process: EOWNERDEAD, consistent 0, unlock 0",
        "robust mutex of a dead thread: EOWNERDEAD",
        "get_robust_list: 0, head set 1, len 24",
        // Job control (stop signals terminated the process before).
        "job: stopped child reported 1, WIFSTOPPED 1, WSTOPSIG 19",
        "job: stopped child's state T",
        "job: SIGCHLD for the stop 1, for the continue 1",
        "job: threads of a stopped process still 1",
        "job: SIGKILL while stopped: 1, killed by 9",
        "job: SA_NOCLDSTOP: stop reported 1, SIGCHLDs 0",
    ] {
        assert!(
            got.stdout_str().contains(line),
            "no {line:?} in:\n{}",
            got.stdout_str()
        );
    }
}

/// A process ended by SIGABRT with RLIMIT_CORE raised leaves an ELF core file in its working
/// directory (mode 0600, ET_CORE, the registers' note, the child's own memory) and its parent
/// sees WCOREDUMP and CLD_DUMPED; with RLIMIT_CORE 0 (the sandbox's default) there is no
/// file (`processes core`; not compared with a native run, whose result depends on the host's
/// core_pattern).
#[test]
fn core_dumps_as_linux_writes_them() {
    if !testutil::require_kvm() {
        return;
    }
    let r = shell_root();
    let prog = r.guest_program("processes");
    let got = torpor()
        .run(r.path(), &prog)
        .arg("core")
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_code(0);
    assert_eq!(
        got.stdout_str(),
        "core: limit raised: signal 6, WCOREDUMP 1, si_code CLD_DUMPED\n\
         core: file mode 600, ELF 1, ET_CORE 1\n\
         core: NT_PRSTATUS with SIGABRT 1, the child's memory in it 1\n\
         core: limit 0: signal 6, WCOREDUMP 0, si_code CLD_KILLED\n\
         core: with RLIMIT_CORE 0 a file 0\n"
    );
}

/// Process groups, sessions, waitid, pidfds, PR_SET_PDEATHSIG and daemonising
/// (`tests/guest/sessions.c`) behave as natively.
#[test]
fn sessions_and_groups_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let got = guest_same_as_native("sessions");
    assert!(got.stdout_str().ends_with("done\n"));
}

/// POSIX record locks between processes (`tests/guest/record_locks.c`): they exclude each
/// other, F_GETLK names the holder, a close by the holder releases them and a close by
/// another process does not, fork inherits none, F_SETLKW waits for the holder and fails
/// with EDEADLK where it would wait for a process waiting for the caller, as natively.
/// (Every process of a sandbox is one host process: its host POSIX locks excluded nobody.)
#[test]
fn record_locks_exclude_the_sandbox_s_processes_from_each_other() {
    if !testutil::require_kvm() {
        return;
    }
    let got = guest_same_as_native("record_locks");
    for line in [
        "child write [5,6): EAGAIN",
        "child asks [0,20): parent write [0,+10)",
        "parent asks [10,15): child write [10,+5)",
        "parent waited for [10,15): ok",
        "parent waits for the waiting child's [1,2): EDEADLK",
        "child waited for the parent's [0,1): ok",
    ] {
        assert!(
            got.stdout_str().contains(line),
            "no {line:?} in:\n{}",
            got.stdout_str()
        );
    }
}

/// What fcntl makes signal a process (`tests/guest/fcntl_signals.c`): file owners and
/// F_SETSIG, a pipe with O_ASYNC written by another process, a read lease broken by an open
/// for writing (which waits for the holder, or fails with O_NONBLOCK), directory notification
/// (F_NOTIFY) of a creation, a rename, attribute changes, a child's deletion; and
/// F_CREATED_QUERY; as natively.
#[test]
fn fcntl_owners_leases_and_dnotify_signal_as_natively() {
    if !testutil::require_kvm() {
        return;
    }
    let got = guest_same_as_native("fcntl_signals");
    let out = got.stdout_str();
    for line in [
        "pipe written by a child (signal 10, owner process): SIGUSR1 code=1 fd=ours band=0x41",
        "pipe written by a child (signal 0, owner group): SIGIO from the kernel",
        "child's non-blocking open for writing: EAGAIN",
        "holder told: SIGUSR2 code=3",
        "child's open for writing: ok",
        "rename within: SIGRTMIN+1 code=3",
        "a child's delete: SIGRTMIN+1 code=3 fd=ours",
        "one shot, again: none",
        "F_CREATED_QUERY after creating: 1",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(out.ends_with("done\n"));
}

/// execve from a non-main thread of a process whose other threads sleep, wait on a
/// condition variable and spin (`tests/guest/exec_threads.c`): they end, the new program
/// runs alone with the same pid, as natively.
#[test]
fn execve_from_a_thread_ends_the_others() {
    if !testutil::require_kvm() {
        return;
    }
    let got = guest_same_as_native("exec_threads");
    assert!(got
        .stdout_str()
        .contains("after exec: same pid=1 tid is pid=1 threads=1"));
}

/// setuid/setgroups in a process with threads (glibc's SIGSETXID to every thread) and
/// pthread_cancel (SIGCANCEL) work: a signal one thread sends another carries SI_TKILL and the
/// sender's pid, which glibc's handlers check (`tests/guest/setxid_threads.c`).
#[test]
fn id_changes_and_cancellation_with_threads() {
    if !testutil::require_kvm() {
        return;
    }
    guest_same_as_native("setxid_threads");
}

/// Runs `sh -c SCRIPT` with busybox natively (applets found through PATH in the root's bin)
/// and in torpor, and compares.
#[track_caller]
fn shell_same_as_native(r: &Rootfs, script: &str) -> Output {
    let path = format!("{}/bin", r.path().display());
    let nat = testutil::native(
        &r.host_path("bin/busybox"),
        &["sh", "-c", script],
        r.path(),
        &[("PATH", path.as_str())],
        None,
    );
    let got = torpor()
        .run(r.path(), "/bin/sh")
        .args(["-c", script])
        .guest_env("PATH=/bin")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_same(script, &nat, &got);
    got
}

#[test]
fn busybox_sh_pipelines_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = shell_root();
    let out = shell_same_as_native(&r, "echo hello world | wc -c");
    assert_eq!(out.stdout_str().trim(), "12");
    shell_same_as_native(
        &r,
        "seq 1 2000 | sort -r | head -3; echo a b c | tr a-z A-Z | cat",
    );
    shell_same_as_native(
        &r,
        "x=$(echo sub | tr a-z A-Z); echo \"x=$x\"; (exit 7); echo $?",
    );
    shell_same_as_native(&r, "false | true; echo $?; true | false; echo $?; exit 5").assert_code(5);
    shell_same_as_native(
        &r,
        "sleep 0.1 & p=$!; wait $p; echo bg $?; nosuchcommand 2>tmp/err; echo missing $?",
    );
    shell_same_as_native(&r, "exec echo replaced; echo not reached");
    shell_same_as_native(&r, "sleep 30 & kill $!; wait $!; echo killed $?");
}

#[test]
fn children_end_with_the_first_process() {
    if !testutil::require_kvm() {
        return;
    }
    let r = shell_root();
    let start = Instant::now();
    let got = torpor()
        .run(r.path(), "/bin/sh")
        .args(["-c", "sleep 60 & echo started"])
        .guest_env("PATH=/bin")
        .host_env("TORPOR_LOG", "off")
        .timeout(Duration::from_secs(50))
        .output();
    assert_eq!(got.stdout_str(), "started\n", "{got:?}");
    assert_eq!(got.code(), 0, "{got:?}");
    assert!(
        start.elapsed() < Duration::from_secs(50),
        "the sandbox waited for its orphaned child"
    );
}

#[test]
fn proc_self_describes_the_calling_process() {
    if !testutil::require_kvm() {
        return;
    }
    let r = shell_root();
    r.file("/tmp/input.txt", "data\n");
    let script = "cat /proc/self/cmdline | tr '\\0' '|'; echo; \
                  readlink /proc/self/fd/0 < /tmp/input.txt; \
                  grep -E '^(PPid|Threads)' /proc/self/status; echo $$";
    let got = torpor()
        .run(r.path(), "/bin/sh")
        .args(["-c", script])
        .guest_env("PATH=/bin")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(got.code(), 0, "{got:?}");
    assert_eq!(
        got.stdout_str(),
        "cat|/proc/self/cmdline|\n/tmp/input.txt\nPPid:\t1\nThreads:\t1\n1\n",
        "stderr: {}",
        got.stderr_str()
    );
}
