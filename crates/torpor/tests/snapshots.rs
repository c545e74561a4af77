//! Checkpoint and restore (issue 14, slice S3 of `docs/design/snapshots.md`): a sandbox is
//! checkpointed, its holder stopped, and a new holder restored from the checkpoint carries on
//! where it was; a damaged checkpoint starts nothing.

use std::path::Path;
use std::time::Duration;

use testutil::{Detached, Rootfs, TempDir};

fn bin() -> &'static Path {
    env!("CARGO_BIN_EXE_torpor").as_ref()
}

fn log_of(sb: &Detached) -> String {
    std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default()
}

/// `checkpoint_state ARGS` started detached, once it says it is ready.
fn ready_sandbox(r: &Rootfs, options: &[&str], args: &[&str]) -> Detached {
    let prog = r.guest_program("checkpoint_state");
    let sb = Detached::start(bin(), options, r.path(), &prog, args);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || log_of(&sb).contains("ready")),
        "the program never got ready: {}",
        log_of(&sb)
    );
    sb
}

/// Whether `torpor state` reports the application's exit status `code`.
fn exited_with(sb: &Detached, code: i32) -> bool {
    let o = sb.verb("state", &[]);
    o.stdout_str().contains(&format!("\"exitStatus\": {code}"))
}

/// A restored sandbox is hibernated once its first task has parked, which `restore -d` waits
/// for before it returns.
fn assert_hibernated(sb: &Detached) {
    assert_eq!(sb.stat("state"), "hibernated");
}

#[test]
fn a_restored_sandbox_carries_on_with_its_memory_threads_descriptors_and_sockets() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let port = testutil::free_port();
    let publish = format!("{port}:8080");
    let sb = ready_sandbox(&r, &["-p", &publish], &["256", "3", "8080"]);
    let (_t, dir) = sb.checkpoint_to_temp();
    assert!(dir.join("MANIFEST").is_file());
    // Without --leave-running the sandbox is gone: its holder exited, its state removed.
    assert!(
        Detached::wait_until(Duration::from_secs(30), || !sb.dir().exists()),
        "the checkpointed sandbox is still there"
    );
    // Its process is gone, its memory was never read back: the restore pages it in.
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    assert_hibernated(&restored);
    assert_eq!(restored.stat_u64("faults"), 0);
    restored.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || log_of(&restored)
            .contains("serving")),
        "no output after the restore: {}",
        log_of(&restored)
    );
    // The listening socket listens again on the published port.
    let mut answer = String::new();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    std::io::Read::read_to_string(&mut c, &mut answer).expect("read");
    assert_eq!(answer, "restored\n");
    assert!(
        Detached::wait_until(Duration::from_secs(30), || exited_with(&restored, 0)),
        "the restored program did not exit 0: {}\n{}",
        log_of(&restored),
        restored.ok("state", &[])
    );
    assert_eq!(
        log_of(&restored),
        "epoll: 1 ready, data 2\n\
         pattern: 0 of 33554432 words differ\n\
         pipe: 17 bytes \"bytes in the pipe\"\n\
         eventfd: 42\n\
         file: \"llo world\"\n\
         SIGUSR2 pending: 1\n\
         POSIX timer: kept 1, its signal pending: 1\n\
         threads: 3 of 3 kept their state\n\
         pid unchanged: 1\n\
         all state kept\n\
         serving\n"
    );
    // The memory came back as it was touched.
    assert!(restored.stat_u64("fault_bytes") >= 256 << 20);
}

/// A checkpoint of `checkpoint_state 16`, its sandbox stopped.
fn checkpointed(r: &Rootfs, t: &TempDir) -> (Detached, std::path::PathBuf) {
    let sb = ready_sandbox(r, &[], &["16"]);
    let dir = t.path().join("ckpt");
    let out = sb.verb("checkpoint", &[dir.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
    (sb, dir)
}

/// Restoring the damaged copy `damage` makes of the checkpoint fails with a message
/// holding `expect`, and starts nothing.
fn refused(sb: &Detached, dir: &Path, name: &str, damage: impl Fn(&Path), expect: &str) {
    let copy = dir.with_file_name(name);
    let o = testutil::run_command(
        {
            let mut c = std::process::Command::new("cp");
            c.arg("-a").arg(dir).arg(&copy);
            c
        },
        None,
        Duration::from_secs(60),
    );
    assert_eq!(o.code(), 0, "cp: {}", o.stderr_str());
    damage(&copy);
    let e = match sb.restore_beside(&[], &copy) {
        Ok(restored) => panic!("{name}: restored {} from a damaged checkpoint", restored.id),
        Err(e) => e,
    };
    assert_ne!(e.code(), 0);
    assert!(
        e.stderr_str().contains(expect),
        "{name}: the error does not say {expect:?}: {}",
        e.stderr_str()
    );
    // Nothing started: no sandbox directory but the checkpointed one's (gone) in the root.
    let left: Vec<_> = std::fs::read_dir(sb.state_base())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{name}: left {left:?}");
}

#[test]
fn a_damaged_checkpoint_is_refused_before_anything_starts() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let t = TempDir::new("torpor-ckpt");
    let (sb, dir) = checkpointed(&r, &t);
    assert!(Detached::wait_until(Duration::from_secs(30), || !sb
        .dir()
        .exists()));
    let flip = |file: &'static str, at: u64| {
        move |d: &Path| {
            use std::os::unix::fs::FileExt;
            let p = d.join(file);
            let mut perm = std::fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            std::fs::set_permissions(&p, perm).unwrap();
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&p)
                .unwrap();
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, at).unwrap();
            b[0] ^= 0x20;
            f.write_all_at(&b, at).unwrap();
        }
    };
    refused(
        &sb,
        &dir,
        "state-flipped",
        flip("state.json", 100),
        "corrupt checkpoint file",
    );
    refused(
        &sb,
        &dir,
        "blobs-flipped",
        flip("blobs.bin", 70),
        "corrupt checkpoint file",
    );
    refused(
        &sb,
        &dir,
        "memory-truncated",
        |d| {
            let p = d.join("mem-1.img");
            let len = std::fs::metadata(&p).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.set_len(len - 4096).unwrap();
        },
        "mem-1.img",
    );
    refused(
        &sb,
        &dir,
        "no-manifest",
        |d| std::fs::remove_file(d.join("MANIFEST")).unwrap(),
        "incomplete checkpoint",
    );
    refused(
        &sb,
        &dir,
        "state-missing",
        |d| std::fs::remove_file(d.join("state.json")).unwrap(),
        "is missing",
    );
    // A checkpoint made by a later format (its MANIFEST re-enveloped, so every checksum
    // holds): the version is what is refused.
    refused(
        &sb,
        &dir,
        "newer-format",
        |d| {
            use hibernate::snapshot::{envelope, Kind};
            let p = d.join("MANIFEST");
            let mut perm = std::fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
            std::fs::set_permissions(&p, perm).unwrap();
            let payload = envelope::read(&p, Kind::Manifest).unwrap();
            let mut v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
            v["format"]["major"] = serde_json::json!(hibernate::snapshot::FORMAT_MAJOR + 1);
            std::fs::write(
                &p,
                envelope::encode(Kind::Manifest, v.to_string().as_bytes()),
            )
            .unwrap();
        },
        "this torpor reads",
    );
    // The undamaged checkpoint still restores.
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    restored.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || log_of(&restored)
            .contains("all state kept")),
        "{}",
        log_of(&restored)
    );
}

#[test]
fn leave_running_keeps_the_sandbox_and_a_checkpoint_never_overwrites() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let t = TempDir::new("torpor-ckpt");
    let sb = ready_sandbox(&r, &[], &["16"]);
    let dir = t.path().join("ckpt");
    let d = dir.to_str().unwrap();
    let out = sb.verb("checkpoint", &["--leave-running", d]);
    assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
    // A second checkpoint into the same directory is refused; the sandbox goes on.
    let again = sb.verb("checkpoint", &["--leave-running", d]);
    assert_ne!(again.code(), 0);
    assert!(
        again.stderr_str().contains("already exists"),
        "{}",
        again.stderr_str()
    );
    // The original runs on and finishes; so does its restored copy, independently.
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    sb.ok("kill", &["SIGUSR1"]);
    restored.ok("kill", &["SIGUSR1"]);
    for s in [&sb, &restored] {
        assert!(
            Detached::wait_until(Duration::from_secs(60), || log_of(s)
                .contains("all state kept")),
            "{}: {}",
            s.id,
            log_of(s)
        );
        assert!(Detached::wait_until(Duration::from_secs(30), || {
            exited_with(s, 0)
        }));
    }
}

/// The HTTP server `program` of Debian root `name` round-trips: answered, checkpointed (its
/// holder gone), restored, answered again; then the restored sandbox hibernates (its memory
/// image stays a layer under its own swap) and wakes, and answers once more.
fn server_round_trip(name: &str, program: &str, args: &[&str], want: &str) {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs(name) else {
        return;
    };
    if name == "java" {
        testutil::build_java_hello(&root);
    }
    let port = testutil::free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let sb = Detached::start(
        bin(),
        &["--memory", "1G", "-p", &publish],
        &root,
        program,
        args,
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let get = |what: &str| {
        testutil::http_get(addr, "/", Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{name} {what}: {e}"))
            .body_str()
    };
    assert!(
        testutil::answers_within(addr, Duration::from_secs(120)),
        "{name} did not answer within 120 s"
    );
    let t = TempDir::new("torpor-ckpt");
    let dir = t.path().join(name);
    let out = sb.verb("checkpoint", &[dir.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "{name} checkpoint: {}", out.stderr_str());
    assert!(Detached::wait_until(Duration::from_secs(30), || !sb
        .dir()
        .exists()));
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("{name} restore: {}", o.stderr_str()));
    assert_hibernated(&restored);
    for what in ["first request after the restore", "second request"] {
        assert!(get(what).contains(want), "{name} {what}");
    }
    let mut state = String::new();
    for _ in 0..20 {
        restored.ok("hibernate", &[]);
        state = restored.stat("state");
        if state == "hibernated" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        state, "hibernated",
        "{name}: the restored sandbox hibernates"
    );
    assert!(get("request after a hibernate").contains(want), "{name}");
}

#[test]
fn python_server_round_trips() {
    server_round_trip(
        "python",
        "/usr/bin/python3",
        &["-m", "http.server", "8080"],
        "Directory listing",
    );
}

/// A hibernated sandbox is checkpointed where it sleeps: no wake (its wake count and its
/// state do not change), and the checkpoint is whole: a clone of it serves, and so does
/// the original afterwards. Python's server maps its interpreter and libraries from files,
/// whose page-table entries the checkpoint drops after the deflate that hibernated it.
#[test]
fn a_hibernated_sandbox_is_checkpointed_without_a_wake() {
    if !testutil::require_kvm() {
        return;
    }
    let Some((sb, addr)) = testutil::python_http_server(bin()) else {
        return;
    };
    testutil::assert_directory_listing(addr, "a request before the hibernate");
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    let wakes = sb.stat_u64("wakes");
    let t = TempDir::new("torpor-ckpt");
    let dir = t.path().join("hibernated");
    let out = sb.verb("checkpoint", &["--leave-running", dir.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
    assert_eq!(
        sb.stat("state"),
        "hibernated",
        "still asleep after the checkpoint"
    );
    assert_eq!(
        sb.stat_u64("wakes"),
        wakes,
        "the checkpoint woke the sandbox"
    );
    // A clone of the checkpoint (a restore under its own ID and port) serves.
    let port2 = testutil::free_port();
    let publish2 = format!("127.0.0.1:{port2}:8080");
    let _clone = sb
        .clone_beside(&["-p", &publish2], &dir)
        .unwrap_or_else(|o| panic!("clone: {}", o.stderr_str()));
    let addr2: std::net::SocketAddr = format!("127.0.0.1:{port2}").parse().unwrap();
    testutil::assert_directory_listing(addr2, "the clone");
    testutil::assert_directory_listing(addr, "the original, woken after the checkpoint");
}

#[test]
fn node_server_round_trips() {
    server_round_trip(
        "node",
        "/usr/bin/node",
        &[
            "-e",
            "require('http').createServer((q, s) => s.end('hello from node\\n')).listen(8080)",
        ],
        "hello from node",
    );
}

#[test]
fn go_server_round_trips() {
    server_round_trip("go", "/app/hello", &[], "Hello");
}

#[test]
fn java_server_round_trips() {
    server_round_trip(
        "java",
        "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        &["-cp", "/app", "Hello"],
        "hello from java",
    );
}

#[test]
fn clones_of_one_checkpoint_run_at_once_sharing_its_memory() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    // With a port, each clone ends its checks listening (unpublished: in its own namespace).
    let sb = ready_sandbox(&r, &[], &["128", "2", "8080"]);
    let (_t, dir) = sb.checkpoint_to_temp();
    let clones: Vec<Detached> = (0..3)
        .map(|_| {
            sb.clone_beside(&[], &dir)
                .unwrap_or_else(|o| panic!("run --from: {}", o.stderr_str()))
        })
        .collect();
    // A clone hibernates like any sandbox: its first deflate writes what it holds (the
    // image's pages and its own) and makes its memory anonymous.
    clones[0].ok("hibernate", &[]);
    assert_hibernated(&clones[0]);
    assert!(clones[0].stat_u64("swap_bytes") > 0);
    for c in &clones {
        c.ok("kill", &["SIGUSR1"]);
    }
    for c in &clones {
        assert!(
            Detached::wait_until(Duration::from_secs(60), || log_of(c).contains("serving")),
            "{}: {}",
            c.id,
            log_of(c)
        );
        let log = log_of(c);
        assert!(log.contains("all state kept"), "{}: {log}", c.id);
        assert!(log.contains("pattern: 0 of 16777216 words differ"));
        assert!(log.contains("threads: 2 of 2 kept their state"));
    }
    // Each clone read the whole 128 MiB pattern, and none of the two not hibernated holds a
    // copy of it: the pages are the memory image's, in the host's page cache once for all.
    // (Not on the trap platform: its stubs map only memfds, so each clone's memory is a copy
    // of the image.)
    if testutil::platform_is_trap() {
        return;
    }
    for c in &clones[1..] {
        let pss = c.stat_u64("pss_bytes");
        assert!(pss < 100 << 20, "{}: PSS {pss}", c.id);
    }
}

#[test]
fn a_sandbox_of_two_processes_and_their_pipes_round_trips() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("checkpoint_procs");
    let sb = Detached::start(bin(), &[], r.path(), &prog, &[]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || log_of(&sb).contains("ready")),
        "{}",
        log_of(&sb)
    );
    let (_t, dir) = sb.checkpoint_to_temp();
    // One memory image per memory: a process's own, or one for a parent and the child it
    // forked sharing its frames copy-on-write (trap).
    let images = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .count();
    assert_eq!(images, if testutil::forks_share_memory() { 1 } else { 2 });
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    restored.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || exited_with(&restored, 0)),
        "{}\n{}",
        log_of(&restored),
        restored.ok("state", &[])
    );
    assert_eq!(
        log_of(&restored),
        "child answered: pong 0\n\
         child exit: 7\n\
         parent pattern: 0 words differ\n\
         both processes kept their state\n"
    );
    // And a clone of it, the same.
    let clone = sb
        .clone_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("run --from: {}", o.stderr_str()));
    clone.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || exited_with(&clone, 0)),
        "{}",
        log_of(&clone)
    );
    assert!(log_of(&clone).contains("both processes kept their state"));
}

#[test]
fn monotonic_time_continues_from_the_checkpoint() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("clock_gap");
    let sb = Detached::start(bin(), &[], r.path(), &prog, &[]);
    assert!(Detached::wait_until(Duration::from_secs(60), || log_of(
        &sb
    )
    .contains("ready")));
    let (_t, dir) = sb.checkpoint_to_temp();
    // Time passes while the sandbox is only a checkpoint.
    std::thread::sleep(Duration::from_millis(2500));
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    restored.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || exited_with(&restored, 0)),
        "{}",
        log_of(&restored)
    );
    // As root, the restore's time namespace hides the gap; without the right to make one,
    // the host's clock shows it.
    let want = if is_root() {
        "monotonic continued\n"
    } else {
        "monotonic counted the gap\n"
    };
    assert_eq!(log_of(&restored), want);
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
