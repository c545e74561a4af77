//! The OCI runtime command line end to end, driven as an engine drives runc: `create`
//! (with `--pid-file`, the caller's stdio passed to the program), `state`, `start`, `kill`,
//! `pause`/`resume`, `delete`, the OCI `run`, every bad-bundle case (exit status 1, a clear
//! message, nothing left behind), `--log-format json`; and the friendly form's copy-on-write
//! root (two sandboxes from one root never see each other's files, the root is never
//! modified).
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use testutil::{free_port, http_get, Detached, Output, Rootfs, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");

/// A bundle directory: `rootfs/` (a test root with busybox) and `config.json`.
struct TestBundle {
    dir: TempDir,
    root: Rootfs,
}

impl TestBundle {
    fn new(args: &[&str], extra: &str) -> TestBundle {
        let dir = TempDir::new("torpor-bundle");
        let root = Rootfs::new();
        std::os::unix::fs::symlink(root.path(), dir.path().join("rootfs")).unwrap();
        let b = TestBundle { dir, root };
        b.write_config(args, extra);
        b
    }

    fn write_config(&self, args: &[&str], extra: &str) {
        let args = serde_json_list(args);
        let config = format!(
            r#"{{"ociVersion":"1.0.2","process":{{"terminal":false,"user":{{"uid":0,"gid":0}},"args":{args},"env":["PATH=/bin"],"cwd":"/"}},"root":{{"path":"rootfs"}},"hostname":"t","annotations":{{"k":"v"}}{extra}}}"#
        );
        std::fs::write(self.dir.path().join("config.json"), config).unwrap();
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn serde_json_list(a: &[&str]) -> String {
    let items: Vec<String> = a.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(","))
}

/// `torpor --root STATE ARGS…` with stdout and stderr in files (a created container's holder
/// keeps the caller's streams open, as runc's init does).
struct Oci {
    state: TempDir,
    out: PathBuf,
    err: PathBuf,
}

impl Oci {
    fn new() -> Oci {
        let state = TempDir::new("torpor-oci-state");
        let out = state.path().join("stdout");
        let err = state.path().join("stderr");
        Oci { state, out, err }
    }

    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = Command::new(BIN);
        c.arg("--root").arg(self.state.path()).args(args);
        let out = std::fs::File::create(&self.out).unwrap();
        let err = std::fs::File::create(&self.err).unwrap();
        c.stdin(Stdio::null()).stdout(out).stderr(err);
        let started = std::time::Instant::now();
        let status = c.status().expect("running torpor");
        Output {
            status,
            stdout: std::fs::read(&self.out).unwrap_or_default(),
            stderr: std::fs::read(&self.err).unwrap_or_default(),
            elapsed: started.elapsed(),
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert_eq!(o.code(), 0, "torpor {args:?}: {}", o.stderr_str());
        o.stdout_str()
    }

    fn state(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["state", id])).expect("state JSON")
    }

    fn status(&self, id: &str) -> String {
        self.state(id)["status"].as_str().unwrap_or("").to_string()
    }

    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(self.state.path())
            .map(|r| {
                r.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[test]
fn create_start_state_delete() {
    if !testutil::require_kvm() {
        return;
    }
    let b = TestBundle::new(
        &[
            "/bin/busybox",
            "sh",
            "-c",
            "echo hello from $0; /bin/busybox sleep 2; exit 3",
        ],
        "",
    );
    let oci = Oci::new();
    let pid_file = oci.state.path().join("pid.txt");
    let program_out = oci.state.path().join("program.out");
    // The program's stdout is create's.
    let mut c = Command::new(BIN);
    c.arg("--root")
        .arg(oci.state.path())
        .args(["create", "--bundle"])
        .arg(b.path())
        .arg("--pid-file")
        .arg(&pid_file)
        .arg("c1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&program_out).unwrap())
        .stderr(std::fs::File::create(&oci.err).unwrap());
    let status = c.status().unwrap();
    assert!(
        status.success(),
        "create: {}",
        std::fs::read_to_string(&oci.err).unwrap_or_default()
    );

    let st = oci.state("c1");
    assert_eq!(st["status"], "created");
    assert_eq!(st["ociVersion"], "1.0.2");
    assert_eq!(st["id"], "c1");
    assert_eq!(st["annotations"]["k"], "v");
    assert_eq!(
        Path::new(st["bundle"].as_str().unwrap()),
        b.path().canonicalize().unwrap()
    );
    let pid: u64 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(st["pid"].as_u64(), Some(pid));
    assert_eq!(
        std::fs::read_to_string(&program_out).unwrap(),
        "",
        "ran before start"
    );

    oci.ok(&["start", "c1"]);
    assert_eq!(oci.status("c1"), "running");
    assert!(
        oci.cmd(&["start", "c1"]).code() == 1,
        "a second start fails"
    );
    let stopped = Detached::wait_until(Duration::from_secs(60), || oci.status("c1") == "stopped");
    assert!(stopped, "never stopped: {:?}", oci.state("c1"));
    let st = oci.state("c1");
    assert_eq!(st["pid"], 0);
    assert_eq!(st["exitStatus"], 3);
    assert_eq!(
        std::fs::read_to_string(&program_out).unwrap(),
        "hello from sh\n"
    );
    // A stopped container cannot be signalled; it can be deleted, once.
    assert_eq!(oci.cmd(&["kill", "c1", "TERM"]).code(), 1);
    oci.ok(&["delete", "c1"]);
    assert!(oci.leftovers().is_empty(), "{:?}", oci.leftovers());
    let o = oci.cmd(&["state", "c1"]);
    assert_ne!(o.code(), 0);
    assert!(o.stderr_str().contains("c1"), "{}", o.stderr_str());
}

#[test]
fn kill_before_start_and_delete_force() {
    if !testutil::require_kvm() {
        return;
    }
    let b = TestBundle::new(&["/bin/busybox", "sleep", "100"], "");
    let oci = Oci::new();
    oci.ok(&["create", "--bundle", b.path().to_str().unwrap(), "c2"]);
    oci.ok(&["kill", "c2", "KILL"]);
    assert!(Detached::wait_until(Duration::from_secs(30), || oci
        .status("c2")
        == "stopped"));
    assert_eq!(oci.state("c2")["exitStatus"], 137);
    oci.ok(&["delete", "c2"]);

    oci.ok(&["create", "--bundle", b.path().to_str().unwrap(), "c3"]);
    oci.ok(&["start", "c3"]);
    assert_eq!(oci.status("c3"), "running");
    let o = oci.cmd(&["delete", "c3"]);
    assert_eq!(o.code(), 1, "delete of a running container needs --force");
    oci.ok(&["delete", "--force", "c3"]);
    assert!(oci.leftovers().is_empty(), "{:?}", oci.leftovers());
}

#[test]
fn oci_run_passes_the_exit_status_through() {
    if !testutil::require_kvm() {
        return;
    }
    // uname's node name is config.json's hostname ("t").
    let b = TestBundle::new(
        &[
            "/bin/busybox",
            "sh",
            "-c",
            "echo out; busybox hostname; exit 7",
        ],
        "",
    );
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "r1"]);
    assert_eq!(o.code(), 7, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "out\nt\n");
    assert!(oci.leftovers().is_empty(), "{:?}", oci.leftovers());
}

#[test]
fn pause_holds_requests_until_resume() {
    if !testutil::require_kvm() {
        return;
    }
    let port = free_port().to_string();
    let b = TestBundle::new(&["/bin/pattern_server", &port, "8"], "");
    b.root.guest_program("pattern_server");
    let oci = Oci::new();
    oci.ok(&["create", "--bundle", b.path().to_str().unwrap(), "p1"]);
    oci.ok(&["start", "p1"]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/", Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello\n")
    }));
    oci.ok(&["pause", "p1"]);
    assert_eq!(oci.status("p1"), "paused");
    let waiting = std::thread::spawn(move || http_get(addr, "/verify", Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!waiting.is_finished(), "answered while paused");
    assert_eq!(
        oci.status("p1"),
        "paused",
        "a request woke a paused container"
    );
    oci.ok(&["resume", "p1"]);
    let r = waiting
        .join()
        .unwrap()
        .expect("the request made while paused");
    assert!(r.body_str().starts_with("ok "), "{}", r.body_str());
    assert_eq!(oci.status("p1"), "running");
    // A paused container can be killed.
    oci.ok(&["pause", "p1"]);
    oci.ok(&["kill", "p1", "KILL"]);
    assert!(Detached::wait_until(Duration::from_secs(30), || oci
        .status("p1")
        == "stopped"));
    oci.ok(&["delete", "p1"]);
}

/// An OCI holder has no janitor: when it dies by SIGKILL while paused (its memory in its
/// swap files), its state stays for the engine's `state` and `delete`, but its page files go
/// at the next torpor command on that state root.
#[test]
fn a_killed_oci_holder_loses_its_page_files_at_the_next_command() {
    if !testutil::require_kvm() {
        return;
    }
    let port = free_port().to_string();
    let b = TestBundle::new(&["/bin/pattern_server", &port, "8"], "");
    b.root.guest_program("pattern_server");
    let oci = Oci::new();
    oci.ok(&["create", "--bundle", b.path().to_str().unwrap(), "k1"]);
    oci.ok(&["start", "k1"]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/", Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello\n")
    }));
    oci.ok(&["pause", "k1"]);
    let dir = oci.state.path().join("k1");
    let page_files = || hibernate::engine::page_files(&dir);
    assert!(
        !page_files().is_empty(),
        "a paused container has swap files"
    );
    let pid = oci.state("k1")["pid"].as_i64().expect("the holder's pid") as i32;
    // SAFETY: killing the test's own holder process.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(Detached::wait_until(Duration::from_secs(30), || {
        oci.status("k1") == "stopped"
    }));
    oci.ok(&["list"]);
    assert_eq!(
        page_files(),
        Vec::<std::path::PathBuf>::new(),
        "page files after `list`"
    );
    assert!(
        dir.exists(),
        "the stopped container's state stays until delete"
    );
    oci.ok(&["delete", "k1"]);
    assert!(!dir.exists());
}

#[test]
fn bad_bundles_fail_create_cleanly() {
    if !testutil::require_kvm() {
        return;
    }
    let oci = Oci::new();
    type Case = (&'static str, Box<dyn Fn(&TestBundle)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "missing config.json",
            Box::new(|b| std::fs::remove_file(b.path().join("config.json")).unwrap()),
            "no config.json",
        ),
        (
            "invalid JSON",
            Box::new(|b| std::fs::write(b.path().join("config.json"), "{\"oci").unwrap()),
            "invalid config.json",
        ),
        (
            "unknown ociVersion",
            Box::new(|b| {
                let p = b.path().join("config.json");
                let t = std::fs::read_to_string(&p)
                    .unwrap()
                    .replace("1.0.2", "7.0.0");
                std::fs::write(p, t).unwrap()
            }),
            "ociVersion",
        ),
        (
            "args[0] not found",
            Box::new(|b| b.write_config(&["/bin/nope"], "")),
            "not found",
        ),
        (
            "not an ELF program",
            Box::new(|b| {
                b.root.file("bin/text", "just text\n");
                b.write_config(&["/bin/text"], "")
            }),
            "",
        ),
    ];
    for (what, spoil, needle) in cases {
        let b = TestBundle::new(&["/bin/busybox", "true"], "");
        spoil(&b);
        let o = oci.cmd(&["create", "--bundle", b.path().to_str().unwrap(), "bad"]);
        assert_eq!(o.code(), 1, "{what}: {}", o.stderr_str());
        let err = o.stderr_str();
        assert!(err.starts_with("torpor: "), "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
        assert!(
            oci.leftovers().is_empty(),
            "{what}: left {:?}",
            oci.leftovers()
        );
    }
    let o = oci.cmd(&["create", "--bundle", "/nonexistent/bundle", "bad"]);
    assert_eq!(o.code(), 1);
    assert!(
        o.stderr_str().contains("not a directory"),
        "{}",
        o.stderr_str()
    );
}

#[test]
fn json_log_lines_name_the_error() {
    if !testutil::require_kvm() {
        return;
    }
    let oci = Oci::new();
    let log = oci.state.path().join("log.json");
    let o = oci.cmd(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        "/nonexistent",
        "x",
    ]);
    assert_eq!(o.code(), 1);
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a log line")).unwrap();
    assert_eq!(last["level"], "error");
    assert!(last["msg"].as_str().unwrap().contains("nonexistent"));
    assert!(last["time"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn readonly_root_refuses_writes() {
    if !testutil::require_kvm() {
        return;
    }
    let b = TestBundle::new(
        &["/bin/busybox", "sh", "-c", "echo x > /f && echo wrote"],
        "",
    );
    let p = b.path().join("config.json");
    let t = std::fs::read_to_string(&p)
        .unwrap()
        .replace(r#""path":"rootfs""#, r#""path":"rootfs","readonly":true"#);
    std::fs::write(p, t).unwrap();
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "ro"]);
    assert_ne!(o.code(), 0, "{}", o.stdout_str());
    assert!(
        o.stderr_str().contains("Read-only file system"),
        "{}",
        o.stderr_str()
    );
    assert!(!b.root.host_path("f").exists());
}

#[test]
fn friendly_form_writes_go_to_the_sandbox_own_layer() {
    if !testutil::require_kvm() {
        return;
    }
    let root = Rootfs::new();
    let state = TempDir::new("torpor-cow-state");
    let run = |script: &str| {
        let o = Command::new(BIN)
            .env("TORPOR_STATE_DIR", state.path())
            .arg("run")
            .arg(root.path())
            .args(["--", "/bin/busybox", "sh", "-c", script])
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    // One sandbox writes and removes; it sees its own changes.
    let (code, out) = run("echo x > /data.txt && /bin/busybox cat /data.txt");
    assert_eq!((code, out.as_str()), (0, "x\n"));
    assert!(
        !root.host_path("data.txt").exists(),
        "the host's root was modified"
    );
    // Another sandbox from the same root does not see them.
    let (code, out) = run("/bin/busybox cat /data.txt 2>/dev/null || echo absent");
    assert_eq!(code, 0);
    assert!(out.contains("absent"), "{out}");
    // The layers went with their sandboxes (hidden entries are the runtime's own: the node's
    // file broker).
    let left: Vec<_> = std::fs::read_dir(state.path())
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn process_user_is_what_the_application_sees() {
    if !testutil::require_kvm() {
        return;
    }
    let b = TestBundle::new(&["/bin/busybox", "id"], "");
    let p = b.path().join("config.json");
    let t = std::fs::read_to_string(&p).unwrap().replace(
        r#""user":{"uid":0,"gid":0}"#,
        r#""user":{"uid":1000,"gid":100,"additionalGids":[5,20]}"#,
    );
    std::fs::write(p, t).unwrap();
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "u1"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "uid=1000 gid=100 groups=5,20\n");
}

/// `process.capabilities` holds root to file modes when it lacks CAP_DAC_OVERRIDE (and
/// CAP_DAC_READ_SEARCH), as runc's container would be; with runc's default set it is not.
#[test]
fn process_capabilities_without_dac_override_hold_root_to_modes() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root (file owners)");
        return;
    }
    let script =
        "busybox cat /home/private; echo read $?; busybox chown 0 /home/private; echo chown $?";
    let b = TestBundle::new(&["/bin/busybox", "sh", "-c", script], "");
    b.root.file("/home/private", "1000's\n");
    let f = b.root.host_path("/home/private");
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let caps = r#"["CAP_CHOWN","CAP_FOWNER","CAP_SETUID","CAP_SETGID","CAP_KILL"]"#;
    let p = b.path().join("config.json");
    let t = std::fs::read_to_string(&p).unwrap().replace(
        r#""cwd":"/""#,
        &format!(
            r#""cwd":"/","capabilities":{{"bounding":{caps},"effective":{caps},"permitted":{caps}}}"#
        ),
    );
    std::fs::write(&p, t).unwrap();
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "nodac"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "read 1\nchown 0\n", "{}", o.stderr_str());
    assert!(
        o.stderr_str().contains("Permission denied"),
        "{}",
        o.stderr_str()
    );
    // Without capabilities in the configuration: runc's default set, CAP_DAC_OVERRIDE in it.
    let b = TestBundle::new(&["/bin/busybox", "cat", "/home/private"], "");
    b.root.file("/home/private", "1000's\n");
    let f = b.root.host_path("/home/private");
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "dac"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "1000's\n");
}

#[test]
fn volumes_and_tmpfs_are_mounted_inside_the_root_only() {
    if !testutil::require_kvm() {
        return;
    }
    let vol = TempDir::new("torpor-volume");
    std::fs::write(vol.path().join("in.txt"), "from the host\n").unwrap();
    let mounts = format!(
        r#","mounts":[{{"destination":"/data","type":"bind","source":"{}","options":["rbind"]}},{{"destination":"/ro","type":"bind","source":"{}","options":["bind","ro"]}},{{"destination":"/scratch","type":"tmpfs","source":"tmpfs","options":["size=1m"]}}]"#,
        vol.path().display(),
        vol.path().display()
    );
    let script = "/bin/busybox cat /data/in.txt; echo out > /data/out.txt; \
                  echo x > /ro/y 2>/dev/null || echo ro refused; \
                  echo t > /scratch/t && /bin/busybox cat /scratch/t";
    let b = TestBundle::new(&["/bin/busybox", "sh", "-c", script], &mounts);
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "v1"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "from the host\nro refused\nt\n");
    assert_eq!(
        std::fs::read_to_string(vol.path().join("out.txt")).unwrap(),
        "out\n"
    );
    // The destination with `..` was refused, not mounted outside the root.
    assert!(o.stderr_str().contains("escape") || !Path::new("/escape").exists());
    assert!(!Path::new("/escape").exists());
    assert!(
        !b.root.host_path("scratch/t").exists(),
        "tmpfs contents reached the image"
    );
}

#[test]
fn process_rlimits_apply_inside_the_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let script = "ulimit -n; ulimit -s; ulimit -n 50; ulimit -n";
    let b = TestBundle::new(&["/bin/busybox", "sh", "-c", script], "");
    let p = b.path().join("config.json");
    let t = std::fs::read_to_string(&p).unwrap().replace(
        r#""cwd":"/""#,
        r#""cwd":"/","rlimits":[{"type":"RLIMIT_NOFILE","hard":1048576,"soft":1024},{"type":"RLIMIT_STACK","hard":18446744073709551615,"soft":16777216}]"#,
    );
    std::fs::write(p, t).unwrap();
    let oci = Oci::new();
    let o = oci.cmd(&["run", "--bundle", b.path().to_str().unwrap(), "rl"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str(), "1024\n16384\n50\n");
}

#[test]
fn checkpoint_and_restore_as_an_engine_calls_them() {
    if !testutil::require_kvm() {
        return;
    }
    let port = free_port().to_string();
    let b = TestBundle::new(&["/bin/pattern_server", &port, "8"], "");
    b.root.guest_program("pattern_server");
    let oci = Oci::new();
    let bundle = b.path().to_str().unwrap();
    oci.ok(&["run", "--detach", "--bundle", bundle, "c1"]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let verified = || {
        http_get(addr, "/verify", Duration::from_secs(30))
            .is_ok_and(|r| r.body_str().starts_with("ok "))
    };
    assert!(Detached::wait_until(Duration::from_secs(60), verified));
    // runc's form, as podman calls it: the image directory exists (empty), a work path.
    let t = TempDir::new("torpor-oci-ckpt");
    let image = t.path().join("image");
    std::fs::create_dir(&image).unwrap();
    let work = t.path().join("work");
    oci.ok(&[
        "checkpoint",
        "--image-path",
        image.to_str().unwrap(),
        "--work-path",
        work.to_str().unwrap(),
        "c1",
    ]);
    assert!(image.join("MANIFEST").is_file());
    // As runc leaves it: stopped, its state kept until the engine deletes it.
    assert!(Detached::wait_until(Duration::from_secs(30), || oci
        .status("c1")
        == "stopped"));
    oci.ok(&["delete", "c1"]);
    let pid_file = t.path().join("pid");
    oci.ok(&[
        "restore",
        "--image-path",
        image.to_str().unwrap(),
        "--work-path",
        work.to_str().unwrap(),
        "--bundle",
        bundle,
        "--detach",
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c2",
    ]);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(oci.status("c2"), "running");
    // The same server, its 8 MiB pattern intact, on the same port.
    assert!(Detached::wait_until(Duration::from_secs(60), verified));
    // A damaged checkpoint starts nothing.
    std::fs::remove_file(image.join("MANIFEST")).unwrap();
    let bad = oci.cmd(&[
        "restore",
        "--image-path",
        image.to_str().unwrap(),
        "--bundle",
        bundle,
        "--detach",
        "c3",
    ]);
    assert_eq!(bad.code(), 1, "{}", bad.stderr_str());
    assert!(bad.stderr_str().contains("incomplete checkpoint"));
    assert!(!oci.leftovers().contains(&"c3".to_string()));
    oci.ok(&["kill", "c2", "KILL"]);
    assert!(Detached::wait_until(Duration::from_secs(30), || oci
        .status("c2")
        == "stopped"));
    oci.ok(&["delete", "c2"]);
}
