//! containerd (Debian's package, started by the test with a private root, state and socket)
//! running torpor through its runc shim: `ctr run --runtime io.containerd.runc.v2
//! --runc-binary PATH-TO-TORPOR`. A busybox command's output and status; an HTTP server
//! started detached, paused (a request waits), resumed, signalled and deleted, with `ctr task
//! ls` showing each state, the holder in the container's cgroup (removed at delete), and
//! `kill --all` of the stopped task succeeding as runc's. The image is made offline: `podman save` of an image imported from
//! a root filesystem tarball, then `ctr images import`.
//!
//! Needs /dev/kvm, containerd and podman: without them the tests print "skipped" and pass,
//! unless TORPOR_REQUIRE_KVM=1 (`.ci/run` installs both).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use testutil::{free_port, http_get, Detached, Output, Rootfs, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");

struct Containerd {
    dir: TempDir,
    daemon: Child,
    image: String,
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Containerd {
    fn start() -> Option<Containerd> {
        if !testutil::require_kvm() {
            return None;
        }
        if !have("containerd") || !have("ctr") || !have("podman") {
            assert!(
                std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
                "containerd, ctr or podman is not installed"
            );
            eprintln!("skipped: containerd or podman not installed");
            return None;
        }
        let dir = TempDir::new("torpor-containerd");
        let p = dir.path();
        let config = format!(
            "version = 2\nroot = \"{r}/root\"\nstate = \"{r}/state\"\n[grpc]\n  address = \"{r}/c.sock\"\n",
            r = p.display()
        );
        std::fs::write(p.join("config.toml"), config).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(p.join("config.toml"))
            .stdout(std::fs::File::create(p.join("containerd.log")).unwrap())
            .stderr(std::fs::File::create(p.join("containerd.err")).unwrap())
            .spawn()
            .expect("starting containerd");
        let mut c = Containerd {
            dir,
            daemon,
            image: format!("localhost/torpor-ctr:{}", testutil::unique_token()),
        };
        let up = Detached::wait_until(Duration::from_secs(30), || c.ctr(&["version"]).code() == 0);
        assert!(up, "containerd did not start: {}", c.log());
        c.import_image();
        Some(c)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.err")).unwrap_or_default()
    }

    /// An image with busybox and pattern_server, through podman (private storage) and an
    /// OCI archive.
    fn import_image(&mut self) {
        let root = Rootfs::new();
        root.guest_program("pattern_server");
        let p = self.dir.path();
        let tar = p.join("rootfs.tar");
        let st = Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .arg("-chf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success());
        let podman = |args: &[&str]| {
            let mut c = Command::new("podman");
            // Every state directory of this podman is the test's own: with the default
            // --tmpdir (/run/libpod), one test's `system reset` removed the directory another
            // test's `save` was writing its status file to.
            c.arg("--root")
                .arg(p.join("podman"))
                .arg("--runroot")
                .arg(p.join("podman-run"))
                .arg("--tmpdir")
                .arg(p.join("podman-tmp"))
                .arg("--events-backend=file")
                .args(args);
            testutil::run_command(c, None, Duration::from_secs(120))
        };
        let o = podman(&["import", tar.to_str().unwrap(), &self.image]);
        assert_eq!(o.code(), 0, "podman import: {}", o.stderr_str());
        let archive = p.join("image.oci.tar");
        let o = podman(&[
            "save",
            "--format",
            "oci-archive",
            "-o",
            archive.to_str().unwrap(),
            &self.image,
        ]);
        assert_eq!(o.code(), 0, "podman save: {}", o.stderr_str());
        let _ = podman(&["system", "reset", "-f"]);
        let name = self.image.split(':').next().unwrap_or_default().to_string();
        let o = self.ctr(&[
            "images",
            "import",
            "--base-name",
            &name,
            archive.to_str().unwrap(),
        ]);
        assert_eq!(o.code(), 0, "ctr images import: {}", o.stderr_str());
    }

    fn ctr(&self, args: &[&str]) -> Output {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(self.dir.path().join("c.sock"))
            .args(args)
            .stdin(Stdio::null());
        testutil::run_command(c, None, Duration::from_secs(120))
    }

    fn run_args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec![
            "run",
            "--runtime",
            "io.containerd.runc.v2",
            "--runc-binary",
            BIN,
        ];
        v.extend_from_slice(extra);
        v
    }

    fn task_pid(&self, id: &str) -> u32 {
        let o = self.ctr(&["task", "ls"]);
        o.stdout_str()
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid for task {id}: {}", o.stdout_str()))
    }

    fn task_status(&self, id: &str) -> String {
        let o = self.ctr(&["task", "ls"]);
        o.stdout_str()
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap_or("")
            .to_string()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        // Shims and holders of killed tasks end by themselves; their overlay mounts go too.
        let root = self.dir.path().join("root");
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "grep -o '{} [^ ]*' /proc/self/mounts | cut -d' ' -f1 | sort -r | xargs -r umount -l",
                root.display()
            ))
            .status();
    }
}

#[test]
fn ctr_runs_a_command() {
    let Some(c) = Containerd::start() else { return };
    let img = c.image.clone();
    let args = c.run_args(&[
        "--rm",
        &img,
        "once",
        "/bin/busybox",
        "sh",
        "-c",
        "echo hello-ctr; exit 6",
    ]);
    let o = c.ctr(&args);
    assert_eq!(
        o.stdout_str(),
        "hello-ctr\n",
        "{}\n{}",
        o.stderr_str(),
        c.log()
    );
    assert_eq!(o.code(), 6, "{}", o.stderr_str());
}

#[test]
fn ctr_pauses_resumes_signals_and_deletes_a_server() {
    let Some(c) = Containerd::start() else { return };
    let port = free_port().to_string();
    let img = c.image.clone();
    let args = c.run_args(&[
        "-d",
        "--net-host",
        &img,
        "web",
        "/bin/pattern_server",
        &port,
        "8",
    ]);
    let o = c.ctr(&args);
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/", Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello\n")
    });
    assert!(up, "server not up: {}", c.log());
    assert_eq!(c.task_status("web"), "RUNNING");
    // The holder is in the container's cgroup (containerd's default cgroupsPath
    // /NAMESPACE/ID), where the shim reads its memory from.
    let pid = c.task_pid("web");
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let memory_cg = cgroup_dir("memory", "/default/web");
    if memory_cg.is_some() {
        assert!(
            cgroups.lines().any(|l| l.ends_with(":/default/web")),
            "holder {pid} not in /default/web: {cgroups}"
        );
    }

    let o = c.ctr(&["task", "pause", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(c.task_status("web"), "PAUSED");
    let waiting = std::thread::spawn(move || http_get(addr, "/verify", Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!waiting.is_finished(), "answered while paused");
    let o = c.ctr(&["task", "resume", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    let r = waiting.join().unwrap().expect("request made while paused");
    assert_eq!(r.body_str(), format!("ok {}\n", 8 * 131072));
    assert_eq!(c.task_status("web"), "RUNNING");

    let o = c.ctr(&["task", "kill", "-s", "SIGTERM", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert!(Detached::wait_until(Duration::from_secs(30), || c
        .task_status("web")
        == "STOPPED"));
    // runc's answer to `kill --all` of a stopped container: done (the CRI sends it after
    // every exit); a plain kill says "not running".
    let o = c.ctr(&["task", "kill", "--all", "-s", "SIGKILL", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    let o = c.ctr(&["task", "delete", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    let o = c.ctr(&["container", "delete", "web"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(c.task_status("web"), "");
    if let Some(d) = memory_cg {
        assert!(!d.exists(), "{} left after delete", d.display());
    }
}

/// The executable's file name of process `pid`.
fn exe_name(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default()
}

/// A container with `dev.torpor.hibernate-after` and `dev.torpor.dormant-after` goes dormant
/// by itself: its holder becomes `torpor-dormant` (same pid, in the same cgroup), which
/// containerd still sees RUNNING; a request wakes it in place with its memory intact, and it
/// goes dormant again; then it is killed and deleted as any task.
#[test]
fn ctr_a_dormant_container_is_running_and_wakes_on_a_request() {
    let Some(c) = Containerd::start() else { return };
    if testutil::platform_is_trap() {
        return;
    }
    let port = free_port().to_string();
    let img = c.image.clone();
    let args = c.run_args(&[
        "-d",
        "--net-host",
        "--annotation",
        "dev.torpor.hibernate-after=1s",
        "--annotation",
        "dev.torpor.dormant-after=1s",
        &img,
        "sleepy",
        "/bin/pattern_server",
        &port,
        "8",
    ]);
    let o = c.ctr(&args);
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let verify = || {
        http_get(addr, "/verify", Duration::from_secs(60))
            .map(|r| r.body_str())
            .unwrap_or_else(|e| format!("error: {e}"))
    };
    let up = Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/", Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello\n")
    });
    assert!(up, "server not up: {}", c.log());
    let pid = c.task_pid("sleepy");
    let cgroup = || std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let before = cgroup();
    for round in 1..=2 {
        let dormant = Detached::wait_until(Duration::from_secs(60), || {
            exe_name(pid) == "torpor-dormant"
        });
        assert!(dormant, "round {round}: not dormant: {}", exe_name(pid));
        assert_eq!(c.task_status("sleepy"), "RUNNING", "round {round}");
        assert_eq!(cgroup(), before, "round {round}: the same cgroup");
        assert_eq!(verify(), format!("ok {}\n", 8 * 131072), "round {round}");
        assert_eq!(exe_name(pid), "torpor", "round {round}: woken in place");
    }
    let o = c.ctr(&["task", "kill", "-s", "SIGKILL", "sleepy"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert!(Detached::wait_until(Duration::from_secs(30), || c
        .task_status("sleepy")
        == "STOPPED"));
    let o = c.ctr(&["task", "delete", "sleepy"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    let o = c.ctr(&["container", "delete", "sleepy"]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(c.task_status("sleepy"), "");
    assert!(Detached::process_ended(pid), "the holder is gone");
}

/// The directory of cgroup `path` in the v1 hierarchy of `controller`, when this host has
/// one (or the v2 tree's on a unified host).
fn cgroup_dir(controller: &str, path: &str) -> Option<std::path::PathBuf> {
    let base = std::path::Path::new("/sys/fs/cgroup");
    let root = if base.join("cgroup.controllers").exists() {
        base.to_path_buf()
    } else {
        base.join(controller)
    };
    root.is_dir()
        .then(|| root.join(path.trim_start_matches('/')))
}

/// `GET path` on port `port` from inside container `id` (its own network namespace), by
/// busybox's wget through `ctr task exec`.
fn get_inside(c: &Containerd, id: &str, port: &str, path: &str) -> String {
    let url = format!("http://127.0.0.1:{port}{path}");
    let exec_id = format!("get{}", testutil::unique_token());
    let o = c.ctr(&[
        "task",
        "exec",
        "--exec-id",
        &exec_id,
        id,
        "/bin/busybox",
        "wget",
        "-q",
        "-O",
        "-",
        &url,
    ]);
    if o.code() != 0 {
        return format!("error: {}", o.stderr_str());
    }
    o.stdout_str()
}

fn stop_and_delete(c: &Containerd, id: &str) {
    let pid = c.task_pid(id);
    let o = c.ctr(&["task", "kill", "-s", "SIGKILL", id]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert!(Detached::wait_until(Duration::from_secs(30), || c
        .task_status(id)
        == "STOPPED"));
    let o = c.ctr(&["task", "delete", id]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    let o = c.ctr(&["container", "delete", id]);
    assert_eq!(o.code(), 0, "{}", o.stderr_str());
    assert_eq!(c.task_status(id), "");
    assert!(
        Detached::wait_until(Duration::from_secs(10), || Detached::process_ended(pid)),
        "{id}'s holder is gone"
    );
}

/// A container whose config names a live template (`dev.torpor.template`) that consents
/// (`dev.torpor.forkable=true`) starts as a fork of it: it carries on with the template's
/// memory (8 MiB of pattern, where its own command line asks for 16), as a boot of its own,
/// and is deleted cleanly; a template that did not consent means a normal start.
#[test]
fn ctr_starts_a_container_as_a_fork_of_a_live_template() {
    let Some(c) = Containerd::start() else { return };
    let port = free_port().to_string();
    let img = c.image.clone();
    let o = c.ctr(&c.run_args(&[
        "-d",
        "--annotation",
        "dev.torpor.forkable=true",
        &img,
        "tpl",
        "/bin/pattern_server",
        &port,
        "8",
    ]));
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    let eight = format!("ok {}\n", 8 * 131072);
    let up = Detached::wait_until(Duration::from_secs(60), || {
        get_inside(&c, "tpl", &port, "/verify") == eight
    });
    assert!(
        up,
        "template not up: {}",
        get_inside(&c, "tpl", &port, "/verify")
    );
    let boot = |id: &str| {
        let o = c.ctr(&[
            "task",
            "exec",
            "--exec-id",
            &format!("boot{}", testutil::unique_token()),
            id,
            "/bin/busybox",
            "cat",
            "/proc/sys/kernel/random/boot_id",
        ]);
        assert_eq!(o.code(), 0, "{}", o.stderr_str());
        o.stdout_str()
    };
    let tpl_boot = boot("tpl");

    let o = c.ctr(&c.run_args(&[
        "-d",
        "--annotation",
        "dev.torpor.template=tpl",
        &img,
        "inst",
        "/bin/pattern_server",
        &port,
        "16",
    ]));
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    assert_eq!(c.task_status("inst"), "RUNNING");
    assert_eq!(get_inside(&c, "inst", &port, "/verify"), eight, "a fork");
    assert_ne!(boot("inst"), tpl_boot);
    // The template goes on as it was.
    assert_eq!(get_inside(&c, "tpl", &port, "/verify"), eight);

    // A container that did not consent to be forked is nobody's template.
    let o = c.ctr(&c.run_args(&["-d", &img, "plain", "/bin/pattern_server", &port, "8"]));
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    let o = c.ctr(&c.run_args(&[
        "-d",
        "--annotation",
        "dev.torpor.template=plain",
        &img,
        "fresh",
        "/bin/pattern_server",
        &port,
        "16",
    ]));
    assert_eq!(o.code(), 0, "{}\n{}", o.stderr_str(), c.log());
    let sixteen = format!("ok {}\n", 16 * 131072);
    let up = Detached::wait_until(Duration::from_secs(60), || {
        get_inside(&c, "fresh", &port, "/verify") == sixteen
    });
    assert!(
        up,
        "a normal start: {}",
        get_inside(&c, "fresh", &port, "/verify")
    );

    for id in ["inst", "fresh", "plain", "tpl"] {
        stop_and_delete(&c, id);
    }
}
