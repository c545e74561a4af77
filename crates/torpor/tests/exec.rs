//! A running sandbox seen from outside (issue 37): `torpor exec` into a sandbox started with
//! `torpor run` (the process joins the sandbox, its root and its processes, its output and
//! exit status come back to the caller, a program named without a path is found on its PATH
//! in the sandbox's root, a hibernated sandbox is woken for it), `torpor ps`, and what a
//! holder killed by SIGKILL leaves: its output, not its swap files; `exec -it` through a
//! pseudo-terminal.

use std::path::PathBuf;

use testutil::{Detached, Rootfs};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

#[test]
fn exec_joins_a_friendly_sandbox_hot_and_hibernated() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.symlink("/bin/sh", "busybox")
        .symlink("/bin/cat", "busybox")
        .symlink("/bin/tr", "busybox")
        .symlink("/bin/id", "busybox")
        .file(
            "/etc/passwd",
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/sh\n",
        )
        .file("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
        .file("/etc/secret", "root's\n");
    std::fs::set_permissions(
        r.host_path("/etc/secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let sb = Detached::start(
        &bin(),
        &[],
        r.path(),
        "/bin/busybox",
        &[
            "sh",
            "-c",
            "echo only-in-the-sandbox > /tmp/mark; exec busybox nc -l -p 9000",
        ],
    );
    let script = "echo pid=$$; cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /tmp/mark; exit 3";
    let check = |when: &str| {
        let o = sb.verb("exec", &["sh", "-c", script]);
        assert_eq!(
            o.code(),
            3,
            "{when}: exit status passed back: {}",
            o.stderr_str()
        );
        let out = o.stdout_str();
        let pid: i32 = out
            .lines()
            .find_map(|l| l.strip_prefix("pid="))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{when}: no pid in {out:?}"));
        assert!(
            pid > 1,
            "{when}: a process of the sandbox of its own: {out}"
        );
        assert!(
            out.contains("busybox nc -l -p 9000"),
            "{when}: sees the sandbox's pid 1: {out}"
        );
        assert!(
            out.contains("only-in-the-sandbox"),
            "{when}: sees the sandbox's files: {out}"
        );
    };
    // Until its first process has exec'd nc, which waits for a connection (idle, so the
    // sandbox can hibernate).
    Detached::wait_until(std::time::Duration::from_secs(30), || {
        sb.verb("exec", &["cat", "/proc/1/cmdline"])
            .stdout_str()
            .contains("nc")
    });
    check("hot");
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    // torpor ps lists the processes with their pids inside, without waking the sandbox.
    let ps = sb.ok("ps", &[]);
    let first = ps
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no pid 1 in {ps}"));
    assert!(first.ends_with("busybox nc -l -p 9000"), "{ps}");
    assert_eq!(sb.stat("state"), "hibernated", "ps does not wake it");
    check("hibernated");
    assert_ne!(sb.stat("state"), "hibernated", "the exec woke it");

    // -u: another user of the sandbox, held to its permissions.
    let mut cmd = std::process::Command::new(bin());
    cmd.env("TORPOR_STATE_DIR", sb.state_base()).args([
        "exec",
        "-u",
        "nobody",
        &sb.id,
        "sh",
        "-c",
        "id -u; echo $HOME; cat /etc/secret",
    ]);
    let o = testutil::run_command(cmd, None, std::time::Duration::from_secs(60));
    assert_eq!(
        o.stdout_str(),
        "65534\n/nonexistent\n",
        "{}",
        o.stderr_str()
    );
    assert!(
        o.stderr_str().contains("Permission denied"),
        "{}",
        o.stderr_str()
    );
    assert_eq!(o.code(), 1);
    assert_eq!(
        sb.verb("exec", &["cat", "/etc/secret"]).stdout_str(),
        "root's\n"
    );

    // What it cannot do is said, not half done.
    let o = sb.verb("exec", &["no-such-program"]);
    assert_ne!(o.code(), 0);
    assert!(o.stderr_str().contains("not found"), "{}", o.stderr_str());
    // A signal the caller gets reaches the process (as `podman exec`'s signal proxy).
    let mut cmd = std::process::Command::new(bin());
    cmd.env("TORPOR_STATE_DIR", sb.state_base())
        .args([
            "exec",
            &sb.id,
            "sh",
            "-c",
            "echo waiting; exec busybox sleep 1000",
        ])
        .stdout(std::process::Stdio::piped());
    let mut caller = cmd.spawn().expect("torpor exec");
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(caller.stdout.take().expect("stdout")),
        &mut first,
    )
    .expect("the process's first line");
    assert_eq!(first, "waiting\n");
    // SAFETY: signalling the test's own child.
    unsafe { libc::kill(caller.id() as i32, libc::SIGTERM) };
    let ended = Detached::wait_until(std::time::Duration::from_secs(30), || {
        matches!(caller.try_wait(), Ok(Some(_)))
    });
    assert!(ended, "SIGTERM did not end the exec'd sleep");
    let status = caller.wait().expect("wait");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");

    // -t without a terminal of the caller's: the process gets one all the same.
    let mut cmd = std::process::Command::new(bin());
    cmd.env("TORPOR_STATE_DIR", sb.state_base()).args([
        "exec",
        "-t",
        &sb.id,
        "sh",
        "-c",
        "test -t 0 && test -t 1 && echo on-a-tty",
    ]);
    let o = testutil::run_command(cmd, None, std::time::Duration::from_secs(60));
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert!(o.stdout_str().contains("on-a-tty"), "{}", o.stdout_str());
}

/// `torpor exec -it ID /bin/sh` driven as a user would, through a pseudo-terminal: the shell
/// prompts, runs a command, sees the caller's window size and its changes, a Ctrl-C ends the
/// `sleep` it runs (and not the shell), and `exit 3` is this command's status. The sandbox is
/// hibernated first: the exec wakes it.
#[test]
fn exec_it_gives_a_shell_a_terminal() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.symlink("/bin/sh", "busybox")
        .symlink("/bin/sleep", "busybox")
        .symlink("/bin/stty", "busybox");
    let sb = Detached::start(
        &bin(),
        &[],
        r.path(),
        "/bin/busybox",
        &["nc", "-l", "-p", "9000"],
    );
    Detached::wait_until(std::time::Duration::from_secs(30), || {
        sb.verb("hibernate", &[]).code() == 0
    });
    assert_eq!(sb.stat("state"), "hibernated");
    let mut term = testutil::Terminal::open(30, 100);
    let mut cmd = std::process::Command::new(bin());
    cmd.env("TORPOR_STATE_DIR", sb.state_base())
        .args(["exec", "-it", &sb.id, "/bin/sh"]);
    let mut child = term.spawn(cmd);
    term.expect("# ", "the shell's prompt");
    term.send("echo sum-$((6*7))\r");
    term.expect("sum-42", "a command's output");
    term.send("stty size\r");
    term.expect("30 100", "the caller's window size");
    term.resize(40, 120);
    term.send("stty size\r");
    term.expect("40 120", "the new window size");
    term.send("sleep 1000\r");
    std::thread::sleep(std::time::Duration::from_millis(500));
    term.send("\x03");
    term.send("echo after-$((1+1))\r");
    term.expect("after-2", "the shell again after Ctrl-C ended its sleep");
    term.send("exit 3\r");
    let status = term.wait(&mut child, std::time::Duration::from_secs(30));
    assert_eq!(
        status,
        Some(3),
        "exit status; the terminal showed:\n{}",
        term.seen()
    );
    assert_ne!(sb.stat("state"), "stopped", "the sandbox outlives the exec");
}

#[test]
fn a_killed_hibernated_holder_leaves_nothing_after_the_next_command() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let sb = Detached::start(
        &bin(),
        &[],
        r.path(),
        "/bin/busybox",
        &["sh", "-c", "echo started; exec busybox nc -l -p 9000"],
    );
    let dir = sb.dir();
    let page_files = || hibernate::engine::page_files(&dir);
    Detached::wait_until(std::time::Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("output.log")).is_ok_and(|l| l.contains("started"))
    });
    sb.ok("hibernate", &[]);
    assert!(
        !page_files().is_empty(),
        "a hibernated sandbox has swap files"
    );
    // SAFETY: killing the test's own holder process.
    unsafe { libc::kill(sb.pid() as i32, libc::SIGKILL) };
    // A hibernated detached sandbox let its janitor go (one process while it sleeps): the
    // next torpor command on its state root removes what the dead holder left, its swap
    // files with the rest (as after a dormant one's death).
    let gone = Detached::wait_until(std::time::Duration::from_secs(10), || {
        let out = sb.verb_in_base(&["list"]);
        out.status.success() && page_files().is_empty() && !dir.exists()
    });
    assert!(
        gone,
        "left after the holder's death and a list: {:?}",
        page_files()
    );
}
