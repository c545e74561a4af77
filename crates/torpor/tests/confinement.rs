//! The runtime confines itself once its sandbox is set up (`crates/torpor/src/confine/`):
//! the holder's own `/proc/PID/status` shows a seccomp filter, `no_new_privs` and no
//! capability (a root holder's file broker keeps the file capabilities); a forbidden call made by the confined holder (a test-only
//! hook tries `execve("/bin/sh")`, as a compromised handler would) kills it, and nothing runs;
//! the confined holder cannot open host files outside its root and state directory (Landlock).
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::path::PathBuf;
use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

/// A field of a `/proc/PID/status` file.
fn status_field(status: &str, name: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

#[test]
fn the_holder_runs_under_seccomp_without_spare_capabilities() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("http_server");
    let sb = Detached::start(&bin(), &[], r.path(), &prog, &["8080"]);
    let pid = sb.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("holder status");
    assert_eq!(status_field(&status, "Seccomp"), "2", "filter mode");
    assert_eq!(status_field(&status, "NoNewPrivs"), "1");
    // Running as root: no capability but CAP_SETGID and CAP_SETUID, whose only calls the
    // filter allows are setfsgid, setfsuid and setgroups (the handler threads make the
    // application's file calls with its ids), and CAP_FSETID (the host drops it for a thread
    // acting as another user) (the friendly form's copy-on-write root is taken
    // down by its janitor, not by the holder; no port is published below 1024; the
    // userfaultfd comes from /dev/userfaultfd, Linux 6.1, so no CAP_SYS_PTRACE). The file
    // capabilities the handlers need on the application's behalf (CHOWN, DAC_OVERRIDE,
    // DAC_READ_SEARCH, FOWNER, FSETID) are the file broker's, a child process confined to
    // the root and to the file calls it makes for the holder.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            std::path::Path::new("/dev/userfaultfd").exists(),
            "these hosts have /dev/userfaultfd"
        );
        let setid = (1u64 << 4) | (1 << 6) | (1 << 7);
        for (set, want) in [
            ("CapEff", setid),
            ("CapPrm", setid),
            ("CapBnd", setid),
            ("CapInh", 0),
            ("CapAmb", 0),
        ] {
            let v = u64::from_str_radix(&status_field(&status, set), 16).expect("hex");
            assert_eq!(v, want, "holder {set} = {v:#x}");
        }
        // Its broker: the node's, which every detached root sandbox of the state root shares
        // (it keeps CAP_NET_BIND_SERVICE too, for a sandbox's low published port), else a
        // child of its own.
        let own = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .expect("the holder's children")
            .split_whitespace()
            .find(|c| {
                std::fs::read_to_string(format!("/proc/{c}/comm"))
                    .is_ok_and(|n| n.trim() == "torpor-broker")
            })
            .map(str::to_string);
        let node = node_broker_of(sb.state_base());
        assert!(
            own.is_none() || node.is_none(),
            "a broker of its own and the node's"
        );
        let file_caps = (1u64 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4);
        let (broker, kept) = match (own, node) {
            (Some(b), _) => (b, file_caps),
            (None, Some(b)) => (b, file_caps | (1 << 10)),
            (None, None) => panic!("a root holder has a file broker"),
        };
        let bs = std::fs::read_to_string(format!("/proc/{broker}/status")).expect("broker status");
        for set in ["CapPrm", "CapBnd"] {
            let v = u64::from_str_radix(&status_field(&bs, set), 16).expect("hex");
            assert_eq!(v, kept, "broker {set} = {v:#x}");
        }
        // Effective: per call, the application's own file capabilities among them.
        let eff = u64::from_str_radix(&status_field(&bs, "CapEff"), 16).expect("hex");
        assert_eq!(eff & !kept, 0, "broker CapEff = {eff:#x}");
        assert_eq!(status_field(&bs, "Seccomp"), "2", "the broker's filter");
        assert_eq!(status_field(&bs, "NoNewPrivs"), "1");
        // No outbound access: the holder is in a network namespace of its own (loopback
        // only), the broker in the host's, where it makes the published ports' sockets.
        let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).expect("ns/net");
        let host = netns("self");
        assert_ne!(
            netns(&pid.to_string()),
            host,
            "the holder's network namespace"
        );
        assert_eq!(netns(&broker), host, "the broker's network namespace");
        // `torpor stats` counts the memory of the holder's helpers (janitor, broker) apart.
        assert!(sb.stat_u64("helpers_pss_bytes") > 0, "the helpers' PSS");
        // A process holding just those capabilities, as a compromised holder of another
        // sandbox would, cannot read this holder through /proc (it is not dumpable).
        let o = std::process::Command::new("setpriv")
            .args([
                "--bounding-set",
                "-all,+chown,+dac_override,+dac_read_search,+fowner,+fsetid",
                "cat",
            ])
            .arg(format!("/proc/{pid}/environ"))
            .output()
            .expect("setpriv (util-linux)");
        assert!(
            !o.status.success(),
            "another holder could read this one's /proc/PID/environ"
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // Confined, it still hibernates and wakes (userfaultfd, files, epoll).
    sb.ok("hibernate", &[]);
    sb.ok("wake", &[]);
    assert_eq!(sb.stat("state"), "woken");
    // Every thread carries the filter (TSYNC), those started later included; the userfaultfd
    // thread (started by the first deflate) one more of its own role, and the control thread
    // one of its own (its request threads, and what they start, inherit it).
    let mut pager_seen = false;
    let mut control_seen = false;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let task = task.expect("task").path();
        let st = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        if st.is_empty() {
            continue;
        }
        assert_eq!(status_field(&st, "Seccomp"), "2", "{}", task.display());
        let filters: u32 = status_field(&st, "Seccomp_filters")
            .parse()
            .expect("a count");
        let name = status_field(&st, "Name");
        let uffd = name == "uffd";
        let control = name == "control";
        pager_seen |= uffd;
        control_seen |= control;
        match (uffd, control) {
            // The pager's two, and the control role's when a control request started it.
            (true, _) => assert!((3..=4).contains(&filters), "{}", task.display()),
            (_, true) => assert_eq!(filters, 2, "{}", task.display()),
            _ => assert_eq!(filters, 1, "{} ({name})", task.display()),
        }
    }
    assert!(pager_seen, "a userfaultfd thread runs after a hibernate");
    assert!(control_seen, "the control thread runs");
}

#[test]
fn a_forbidden_call_kills_the_runtime() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("hello");
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_TEST_FORBIDDEN_CALL", "execve")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(
        out.code(),
        128 + libc::SIGSYS,
        "killed by SIGSYS; stdout {:?} stderr {:?}",
        out.stdout_str(),
        out.stderr_str()
    );
    assert!(
        out.stdout_str().is_empty(),
        "nothing ran: {}",
        out.stdout_str()
    );
    // Without the hook the same sandbox runs.
    let ok = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(ok.code(), 0, "{}", ok.stderr_str());
}

/// The control thread's own filter (stacked on the process's) kills the runtime on a call
/// the handlers may make but the control role never does: a test-only hook makes the control
/// thread open a socket once in its role.
#[test]
fn a_forbidden_call_of_the_control_role_kills_the_runtime() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("http_server");
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .arg("8080")
        .host_env("TORPOR_TEST_FORBIDDEN_CALL", "control-socket")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(
        out.code(),
        128 + libc::SIGSYS,
        "killed by SIGSYS; stderr {:?}",
        out.stderr_str()
    );
    assert!(
        !out.stderr_str().contains("forbidden socket returned"),
        "the socket call returned: {}",
        out.stderr_str()
    );
}

/// A friendly-form holder cannot open host files outside its root and state directory
/// (Landlock), and its janitor still takes its copy-on-write root down and removes its state
/// directory at the end, also when the holder is killed.
#[test]
fn a_holder_cannot_open_host_files_and_its_janitor_cleans_up() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("hello");
    let state = testutil::TempDir::new("torpor-janitor-state");
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_TEST_FORBIDDEN_CALL", "open")
        .host_env("TORPOR_LOG", "off")
        .host_env(
            "TORPOR_STATE_DIR",
            state.path().to_str().expect("utf-8 path"),
        )
        .output();
    assert_eq!(out.code(), 0, "{}", out.stderr_str());
    assert!(
        out.stderr_str()
            .contains("the host's /etc/passwd: Permission denied"),
        "{}",
        out.stderr_str()
    );
    // Of /proc, only its own entries: not another process's environment.
    assert!(
        out.stderr_str()
            .contains("/proc/1/environ: Permission denied"),
        "{}",
        out.stderr_str()
    );
    // Its device nodes are its own (uid 0 owns the host's and could change their modes), and
    // no host terminal is in its /dev/pts.
    assert!(
        out.stderr_str()
            .contains("own /dev: true, host terminals seen: 0"),
        "{}",
        out.stderr_str()
    );
    // Nor signal a host process (Landlock's signal scope; uid 0 alone would allow it).
    assert!(
        out.stderr_str()
            .contains("signal to the host's init: Operation not permitted"),
        "{}",
        out.stderr_str()
    );
    // (Hidden entries are the runtime's own, not a sandbox's: the node's file broker.)
    let left = || {
        std::fs::read_dir(state.path())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name())
                    .filter(|n| !n.to_string_lossy().starts_with('.'))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(
        left().is_empty(),
        "the state directory is removed: {:?}",
        left()
    );
    // A holder killed outright: its janitor takes the root down; the directory stays for
    // `torpor state` (which then removes it, saying the sandbox is gone and what it said last).
    let sb = Detached::start_in(
        &bin(),
        testutil::TempDir::new("torpor-janitor-state"),
        &[],
        r.path(),
        &r.guest_program("http_server"),
        &["8080"],
    )
    .unwrap_or_else(|o| panic!("run -d: {}", o.stderr_str()));
    let dir = sb.dir();
    assert!(dir.join("root/merged").is_dir());
    let pid = sb.pid();
    // Once its program has said it listens (ready is earlier: when the program starts).
    let said = Detached::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(dir.join("output.log"))
            .is_ok_and(|l| l.contains("http_server: listening on port 8080"))
    });
    assert!(said, "the program's first line in its output log");
    // SAFETY: killing the sandbox's own holder process.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let janitor_done = Detached::wait_until(Duration::from_secs(10), || {
        // No process of the sandbox is left in its mount namespace: neither the holder nor
        // its janitor (their namespace, and the overlay with it, is gone).
        std::fs::read_dir("/proc").is_ok_and(|d| {
            !d.flatten().any(|e| {
                std::fs::read_link(e.path().join("cwd")).is_ok()
                    && std::fs::read_to_string(e.path().join("cmdline"))
                        .is_ok_and(|c| c.contains(&sb.id) && c.starts_with("torpor"))
            })
        })
    });
    assert!(janitor_done, "the holder and its janitor are gone");
    let o = sb.verb("state", &[]);
    assert!(o.stderr_str().contains("is gone"), "{}", o.stderr_str());
    // With what it said last: its log goes with the directory.
    assert!(
        o.stderr_str()
            .contains("its last output:\nhttp_server: listening on port 8080"),
        "{}",
        o.stderr_str()
    );
    assert!(!dir.exists(), "state removed it");
}

/// An OCI container's holder cannot open host files outside its root and state directory,
/// signal a host process, or reach a host abstract Unix socket (Landlock's scopes).
#[test]
fn an_oci_holder_cannot_open_host_files() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("hello");
    let bundle = testutil::TempDir::new("torpor-bundle");
    std::os::unix::fs::symlink(r.path(), bundle.path().join("rootfs")).expect("rootfs link");
    let config = format!(
        r#"{{"ociVersion":"1.0.2","process":{{"terminal":false,"user":{{"uid":0,"gid":0}},"args":["{prog}"],"env":["PATH=/bin"],"cwd":"/"}},"root":{{"path":"rootfs"}}}}"#
    );
    std::fs::write(bundle.path().join("config.json"), config).expect("config.json");
    let state = testutil::TempDir::new("torpor-oci-state");
    // A host abstract socket: the holder shares the host's network namespace here.
    let name = format!("torpor-test-abstract-{}", std::process::id());
    let listener = {
        use std::os::linux::net::SocketAddrExt;
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .expect("abstract name");
        std::os::unix::net::UnixListener::bind_addr(&a).expect("abstract listener")
    };
    let out = std::process::Command::new(bin())
        .env("TORPOR_TEST_FORBIDDEN_CALL", "open")
        .env("TORPOR_TEST_ABSTRACT", &name)
        .env("TORPOR_LOG", "off")
        .arg("--root")
        .arg(state.path())
        .args(["run", "--bundle"])
        .arg(bundle.path())
        .arg("landlock1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("torpor run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the host's /etc/passwd: Permission denied"),
        "{stderr}"
    );
    assert!(
        stderr.contains("signal to the host's init: Operation not permitted"),
        "{stderr}"
    );
    assert!(
        stderr.contains("own /dev: true, host terminals seen: 0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the host's abstract socket: Operation not permitted"),
        "{stderr}"
    );
    drop(listener);
}

/// Host objects handed to the application (the host's /dev/null, the runtime's stdio, an
/// eventfd's shared anonymous inode) keep their metadata: chmod, chown, utimes and xattrs on
/// them are EPERM, and the host's /dev/null is unchanged afterwards.
#[test]
fn host_objects_keep_their_metadata() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("host_objects");
    let before = std::fs::metadata("/dev/null").expect("/dev/null");
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(out.code(), 0, "{}", out.stderr_str());
    let text = out.stdout_str();
    for line in text.lines().skip(1).take(8) {
        // Through /proc/self/fd the path is not found in a root without /proc: no change
        // either way.
        let refused = line.ends_with(": EPERM")
            || (line.starts_with("chmod /proc/self/fd") && line.ends_with(": ENOENT"));
        assert!(refused, "{line}\n{text}");
    }
    assert!(text.contains("/dev/null mode still 0666: 1"), "{text}");
    let after = std::fs::metadata("/dev/null").expect("/dev/null");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (before.mode(), before.uid(), before.gid()),
        (after.mode(), after.uid(), after.gid())
    );
}

/// A root holder without capabilities creates files in a directory of another user through
/// its broker, with the mode the application asked and its own umask, as Linux does for root.
#[test]
fn files_made_through_the_broker_keep_the_application_s_mode() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // a rootless holder has no broker
    }
    let r = Rootfs::new();
    r.dir("/priv");
    let priv_dir = r.host_path("/priv");
    std::os::unix::fs::chown(&priv_dir, Some(1234), Some(1234)).expect("chown");
    std::fs::set_permissions(
        &priv_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), "/bin/busybox")
        .args([
            "sh",
            "-c",
            "umask 0; touch /priv/f; mkdir /priv/d; umask 027; touch /priv/g; \
             stat -c '%a %u' /priv/f /priv/d /priv/g",
        ])
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(out.code(), 0, "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), "666 0\n777 0\n640 0\n", "{out:?}");
}

/// A call the file broker makes for the holder never blocks it: a blocking open of a FIFO
/// that only the broker may open (another user's, mode 0600) with no writer returned nothing
/// and held every later broker call of the sandbox (a hang found by the syscall fuzzer). Now
/// the broker opens without blocking (`tests/guest/fifo_broker.c`: the other thread's file is
/// read; the FIFO's read end opens at once, where Linux would wait for a writer).
#[test]
fn a_fifo_opened_through_the_broker_does_not_hold_the_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // no broker without root
    }
    let r = Rootfs::new();
    let prog = r.guest_program("fifo_broker");
    r.file("/data/private", "secret");
    let fifo = r.host_path("data/fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for p in [fifo.clone(), r.host_path("data/private")] {
        std::os::unix::fs::chown(&p, Some(1000), Some(1000)).expect("chown");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
    }
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .timeout(std::time::Duration::from_secs(30))
        .output();
    out.assert_code(0);
    assert!(out.stdout_str().contains("private: secret"), "{out:?}");
}

/// The pid of the node's file broker serving the state root `state`, if one runs.
fn node_broker_of(state: &std::path::Path) -> Option<String> {
    let want = format!("--node\0{}\0", state.display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains(&want)
            .then_some(name)
    })
}
