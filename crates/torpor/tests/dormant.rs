//! Dormant sandboxes (issue 30): `torpor dormant ID` turns the holder into one small process
//! (`torpor-dormant`: one thread, no VM) that keeps the published port and the control
//! socket; a connection wakes the sandbox in place with its memory as it was, `state` and
//! `stats` answer without a wake, `delete` ends it without one, and after a SIGKILL the next
//! verb finds it gone and removes its state. On the trap platform `dormant` is refused with the reason.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use testutil::counting::{self, GUEST_PORT};
use testutil::{free_port, http_get, Detached, Rootfs};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

fn start(r: &Rootfs) -> (Detached, SocketAddr) {
    counting::start(&bin(), r)
}

fn get_counter(addr: SocketAddr) -> u64 {
    counting::get(addr)
}

fn status(sb: &Detached) -> String {
    let out = sb.verb("state", &[]);
    assert_eq!(out.code(), 0, "state: {}", out.stderr_str());
    testutil::json_field(&out.stdout_str(), "status").unwrap_or_default()
}

/// The process's executable's file name and its thread count.
fn process(pid: u32) -> (String, u32) {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0);
    (exe, threads)
}

/// Makes the sandbox dormant and checks what it has become.
fn go_dormant(sb: &Detached, pid: u32) {
    let out = sb.verb("dormant", &[]);
    assert_eq!(out.code(), 0, "dormant: {}", out.stderr_str());
    assert_eq!(status(sb), "dormant");
    assert_eq!(
        process(pid),
        ("torpor-dormant".to_string(), 1),
        "the same process, one thread of torpor-dormant"
    );
    assert!(sb.dir().join("dormant/checkpoint/MANIFEST").is_file());
    // Its only process: no janitor, and a root holder's file broker is the node's.
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    assert!(
        children.trim().is_empty(),
        "the dormant process has children: {children}"
    );
    for f in ["dormant", "dormant/wake.json", "dormant/status.json"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(sb.dir().join(f))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode & 0o077, 0, "{f}: {mode:o}, the owner's only");
    }
}

#[test]
fn a_dormant_sandbox_wakes_in_place_on_a_connection() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (sb, addr) = start(&r);
    let pid = sb.pid();
    let before = get_counter(addr);
    if testutil::platform_is_trap() {
        let out = sb.verb("dormant", &[]);
        assert_ne!(out.code(), 0, "the trap platform cannot go dormant yet");
        assert!(
            out.stderr_str().contains("trap platform cannot go dormant"),
            "{}",
            out.stderr_str()
        );
        assert_eq!(get_counter(addr), before + 1, "and the sandbox serves on");
        return;
    }
    for round in 1..=2 {
        go_dormant(&sb, pid);
        if round == 2 {
            // The first wake recorded a working set: the checkpoint carries it (a page list
            // over its layered memory), and the next wake prefetches it in one batch.
            let reap = std::fs::read_dir(sb.dir().join("dormant/checkpoint"))
                .expect("the checkpoint")
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("workset-"));
            assert!(reap, "round 2: no working set in the checkpoint");
        }
        // Read-only verbs are answered by the dormant process itself.
        let stats = sb.verb("stats", &[]);
        assert_eq!(stats.code(), 0, "stats: {}", stats.stderr_str());
        assert!(stats.stdout_str().contains("\"state\":\"dormant\""));
        assert_eq!(process(pid).0, "torpor-dormant", "stats did not wake it");
        // A connection wakes it: the same process, the server's memory as it was.
        assert_eq!(get_counter(addr), before + round, "round {round}");
        assert_eq!(process(pid).0, "torpor", "round {round}: woken in place");
        assert_ne!(status(&sb), "dormant");
        assert_eq!(sb.pid(), pid);
        if round == 2 {
            // Read in while the sandbox was built (`hibernate::engine::page_in`), and
            // counted as the wake's prefetch.
            let stats = sb.verb("stats", &[]).stdout_str();
            let v: serde_json::Value = serde_json::from_str(&stats).expect("stats: JSON");
            let prefetched = v
                .get("prefetched_bytes")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_else(|| panic!("no prefetched_bytes in {stats}"));
            assert!(
                prefetched > 0,
                "round 2: no working set prefetched: {stats}"
            );
        }
    }
    // A control verb that needs the guest wakes it too, and is served.
    go_dormant(&sb, pid);
    let out = sb.verb("exec", &["/bin/busybox", "echo", "woken by exec"]);
    assert_eq!(out.code(), 0, "exec: {}", out.stderr_str());
    assert_eq!(out.stdout_str().trim(), "woken by exec");
    assert_eq!(process(pid).0, "torpor", "woken in place");
    assert_host_files_after_a_wake(&sb);
    assert_eq!(get_counter(addr), before + 3, "the server's memory intact");
    // A woken sandbox (its janitor gone) is deleted as any: nothing left.
    let out = sb.verb("delete", &["--force"]);
    assert_eq!(out.code(), 0, "delete: {}", out.stderr_str());
    assert!(Detached::process_ended(pid), "the holder ended");
    assert!(!sb.dir().exists(), "its state directory is gone");
}

#[test]
fn delete_and_sigkill_of_a_dormant_sandbox_leave_nothing() {
    if !testutil::require_kvm() || testutil::platform_is_trap() {
        return;
    }
    let r = Rootfs::new();
    // delete: answered by the dormant process, which ends without a wake.
    let (sb, addr) = start(&r);
    let pid = sb.pid();
    get_counter(addr);
    go_dormant(&sb, pid);
    let out = sb.verb("delete", &["--force"]);
    assert_eq!(out.code(), 0, "delete: {}", out.stderr_str());
    assert!(Detached::process_ended(pid), "the dormant process ended");
    assert!(!sb.dir().exists(), "its state directory is gone");
    assert!(
        std::net::TcpListener::bind(addr).is_ok(),
        "its published port is free"
    );
    // SIGKILL: the dormant process is the sandbox's only process (its janitor left when it
    // went dormant, its broker ends with it); the next verb reports it gone and removes its
    // state, checkpoint included.
    let (sb, addr) = start(&r);
    let pid = sb.pid();
    get_counter(addr);
    go_dormant(&sb, pid);
    // SAFETY: killing the sandbox's own process, as an operator's kill -9 would.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let ended = Detached::wait_until(Duration::from_secs(10), || Detached::process_ended(pid));
    assert!(ended, "the dormant process outlived SIGKILL");
    assert!(
        std::net::TcpListener::bind(addr).is_ok(),
        "its published port is free"
    );
    let out = sb.verb("state", &[]);
    assert_ne!(out.code(), 0, "a killed sandbox is reported gone");
    assert!(!sb.dir().exists(), "and its directory removed");
}

/// A line-counting server in Python: each line it reads on a connection comes back numbered
/// (one count for the whole server), connections served one after the other. It listens on
/// `[::]`, dual-stack, as Python's own servers do.
const COUNTER_SERVER: &str = r#"
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 8080))
s.listen(16)
n = 0
while True:
    c, _ = s.accept()
    with c, c.makefile("rb") as r:
        for line in r:
            n += 1
            c.sendall(b"%d %s" % (n, line))
"#;

/// Sends `line` on `c` and reads the numbered answer.
fn exchange(c: &mut std::net::TcpStream, line: &str) -> String {
    use std::io::{BufRead, Write};
    c.write_all(format!("{line}\n").as_bytes()).expect("send");
    let mut r = std::io::BufReader::new(c.try_clone().expect("clone"));
    let mut answer = String::new();
    r.read_line(&mut answer).expect("an answer");
    answer.trim_end().to_string()
}

/// A connection opened before the sandbox went dormant is kept open by the dormant process:
/// bytes sent on it wake the sandbox, and the server answers on the same connection, its
/// count intact; a new connection is served after it.
#[test]
fn a_kept_connection_wakes_a_dormant_sandbox_and_is_answered() {
    if !testutil::require_kvm() || testutil::platform_is_trap() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Published on every host address (0.0.0.0), which the server's `[::]` serves.
    let publish = format!("{port}:{GUEST_PORT}");
    let sb = Detached::start(
        &bin(),
        &["-p", &publish],
        &root,
        "python3",
        &["-c", COUNTER_SERVER],
    );
    let mut kept = None;
    let up = Detached::wait_until(Duration::from_secs(60), || {
        kept = std::net::TcpStream::connect(addr).ok();
        kept.is_some()
    });
    assert!(up, "the server does not listen on {addr}");
    let mut kept = kept.expect("a connection");
    kept.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert_eq!(exchange(&mut kept, "before"), "1 before");
    let pid = sb.pid();
    go_dormant(&sb, pid);
    assert_eq!(
        exchange(&mut kept, "while dormant"),
        "2 while dormant",
        "the kept connection is answered after the wake"
    );
    assert_eq!(process(pid).0, "torpor", "woken in place");
    assert_eq!(exchange(&mut kept, "after"), "3 after");
    drop(kept);
    let mut fresh = std::net::TcpStream::connect(addr).expect("a new connection");
    fresh
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert_eq!(exchange(&mut fresh, "new"), "4 new");
}

/// `--hibernate-after` and `--dormant-after`: an idle sandbox hibernates by itself, then goes
/// dormant by itself, and its next request is served with its memory intact.
#[test]
fn an_idle_sandbox_goes_dormant_by_itself() {
    if !testutil::require_kvm() || testutil::platform_is_trap() {
        return;
    }
    let r = Rootfs::new();
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let publish = format!("127.0.0.1:{port}:{GUEST_PORT}");
    let prog = r.guest_program("http_server");
    let sb = Detached::start(
        &bin(),
        &[
            "-p",
            &publish,
            "--hibernate-after",
            "1s",
            "--dormant-after",
            "1s",
        ],
        r.path(),
        &prog,
        &[GUEST_PORT],
    );
    let up = Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/up", Duration::from_secs(5)).is_ok()
    });
    assert!(up, "the server does not answer on {addr}");
    let pid = sb.pid();
    let before = get_counter(addr);
    let dormant = Detached::wait_until(Duration::from_secs(60), || status(&sb) == "dormant");
    assert!(dormant, "not dormant after 60 s idle: {}", status(&sb));
    assert_eq!(process(pid), ("torpor-dormant".to_string(), 1));
    assert_eq!(get_counter(addr), before + 1);
    // Woken, the policy holds again: dormant once more, round after round (each woken holder
    // goes dormant from a dormancy's checkpoint: a park request lost while the wake ended,
    // or taken over by the keep-alive's hibernate, left it hibernated or dormant without
    // its checkpoint and its listener).
    for round in 2..=4 {
        let again = Detached::wait_until(Duration::from_secs(60), || status(&sb) == "dormant");
        assert!(again, "round {round}: not dormant again: {}", status(&sb));
        assert!(
            sb.dir().join("dormant/checkpoint/MANIFEST").is_file(),
            "round {round}: the dormant state has its checkpoint"
        );
        assert_eq!(get_counter(addr), before + round);
    }
    let log = std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default();
    assert!(
        !log.contains("--dormant-after"),
        "no dormancy failed: {log}"
    );
}

/// `run --from DIR --dormant`: instances of one checkpoint started dormant (nothing run, no
/// VM), each on its own port; each one's first request restores it in place, carrying on
/// from the checkpointed count on its own.
#[test]
fn instances_of_a_checkpoint_start_dormant_and_count_on_their_own() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (template, addr) = start(&r);
    let at_checkpoint = get_counter(addr);
    let template_boot = boot_id(&template);
    let ckpt = testutil::TempDir::new("torpor-dormant-ckpt");
    let dir = ckpt.path().join("c");
    let out = template.verb("checkpoint", &[dir.to_str().expect("utf-8")]);
    assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
    let mut instances = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let publish = format!("127.0.0.1:{port}:{GUEST_PORT}");
        match template.clone_beside(&["--dormant", "-p", &publish], &dir) {
            Err(out) if testutil::platform_is_trap() => {
                assert!(
                    out.stderr_str().contains("cannot go dormant"),
                    "the trap platform's refusal: {}",
                    out.stderr_str()
                );
                return;
            }
            Err(out) => panic!("run --from --dormant: {}", out.stderr_str()),
            Ok(sb) => instances.push((sb, SocketAddr::from(([127, 0, 0, 1], port)))),
        }
    }
    assert!(!testutil::platform_is_trap(), "the trap platform refuses");
    for (sb, _) in &instances {
        assert_eq!(status(sb), "dormant", "{} starts dormant", sb.id);
        assert_eq!(process(sb.pid()), ("torpor-dormant".to_string(), 1));
    }
    for (n, (sb, a)) in instances.iter().enumerate() {
        assert_eq!(
            get_counter(*a),
            at_checkpoint + 1,
            "instance {n} carries on from the checkpoint"
        );
        assert_eq!(
            get_counter(*a),
            at_checkpoint + 2,
            "instance {n} counts on its own"
        );
        assert_eq!(process(sb.pid()).0, "torpor", "{} woken", sb.id);
    }
    // Each is a boot of its own, not its template's.
    let boots: std::collections::HashSet<String> =
        instances.iter().map(|(sb, _)| boot_id(sb)).collect();
    assert_eq!(boots.len(), instances.len());
    assert!(!boots.contains(&template_boot));
    // An instance provisioned dormant has the host's files from its start.
    assert_host_files_after_a_wake(&instances[0].0);
    // Dormant again, an instance keeps only what it changed: its checkpoint stacks its own
    // pages over the checkpoint's image, linked (one copy on the disk for all instances).
    let (sb, a) = &instances[0];
    go_dormant(sb, sb.pid());
    let own = sb.dir().join("dormant/checkpoint");
    let inode = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0)
    };
    assert_eq!(
        inode(&own.join("mem-1.base-0.img")),
        inode(&dir.join("mem-1.img")),
        "the base image is the checkpoint's, linked"
    );
    let delta = std::fs::metadata(own.join("mem-1.img")).map_or(u64::MAX, |m| m.len());
    let image = std::fs::metadata(dir.join("mem-1.img")).map_or(0, |m| m.len());
    assert!(
        delta < image / 2,
        "the instance's own pages ({delta} bytes) against the image's ({image})"
    );
    assert_eq!(get_counter(*a), at_checkpoint + 3, "and it wakes with them");
}

/// What a program in `sb` reads of the files torpor makes from the host's (tunables, online
/// CPUs) is the host's: a holder woken from dormancy, confined from its first instruction,
/// has them from its record (it read every tunable as empty and one CPU online before).
fn assert_host_files_after_a_wake(sb: &Detached) {
    for f in [
        "/proc/sys/net/core/somaxconn",
        "/proc/sys/fs/nr_open",
        "/proc/sys/fs/pipe-max-size",
        "/sys/devices/system/cpu/online",
    ] {
        let host = std::fs::read_to_string(f).expect("the host's file");
        let out = sb.verb("exec", &["/bin/busybox", "cat", f]);
        assert_eq!(out.code(), 0, "exec cat {f}: {}", out.stderr_str());
        assert_eq!(out.stdout_str(), host, "{f} after a dormant wake");
    }
}

/// The sandbox's boot id, as its programs read it.
fn boot_id(sb: &Detached) -> String {
    let out = sb.verb(
        "exec",
        &["/bin/busybox", "cat", "/proc/sys/kernel/random/boot_id"],
    );
    assert_eq!(out.code(), 0, "exec cat: {}", out.stderr_str());
    out.stdout_str().trim().to_string()
}

/// A Python instance started dormant, woken by each request, goes dormant again by itself
/// from its hibernated state (its checkpoint written without a wake), round after round past
/// the four images a layered checkpoint stacks (the fifth writes the whole image again): it
/// answers every time. Python maps its interpreter and libraries from files: a checkpoint of
/// a hibernated sandbox rewrites its page tables, whose older bytes the REAP file of its last
/// deflate still held (a wake that prefetched them ran into a file window that was not there).
#[test]
fn a_python_instance_goes_dormant_from_hibernated_round_after_round() {
    if !testutil::require_kvm() || testutil::platform_is_trap() {
        return;
    }
    let Some((sb, addr)) = testutil::python_http_server(&bin()) else {
        return;
    };
    testutil::assert_directory_listing(addr, "the template");
    let ckpt = testutil::TempDir::new("torpor-dormant-py");
    let dir = ckpt.path().join("c");
    let out = sb.verb("checkpoint", &[dir.to_str().expect("utf-8")]);
    assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
    let iport = free_port();
    let inst = sb
        .clone_beside(
            &[
                "--dormant",
                "-p",
                &format!("127.0.0.1:{iport}:8080"),
                "--hibernate-after",
                "1s",
                "--dormant-after",
                "1s",
            ],
            &dir,
        )
        .unwrap_or_else(|o| panic!("run --from --dormant: {}", o.stderr_str()));
    let iaddr = SocketAddr::from(([127, 0, 0, 1], iport));
    for round in 1..=7 {
        assert_eq!(status(&inst), "dormant", "round {round}: dormant before");
        testutil::assert_directory_listing(iaddr, &format!("round {round}"));
        let again = Detached::wait_until(Duration::from_secs(60), || status(&inst) == "dormant");
        assert!(again, "round {round}: not dormant again: {}", status(&inst));
    }
}
