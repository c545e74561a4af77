//! podman (Debian's package) with `--runtime` pointing at torpor, on an image made offline by
//! `podman import` of a root filesystem tarball (busybox and the static `pattern_server`):
//! `podman run --rm` output and exit status identical to a native run; `run -d -p` served
//! through podman's own port forwarding; `pause` (the holder's PSS falls to the hibernated
//! level, a request made meanwhile is answered after `unpause`); `exec`; `stop` and `rm`;
//! `run -it` with a terminal (through `script`, a real pseudo-terminal).
//!
//! podman keeps its storage in a temporary directory of the test (`--root`, `--runroot`),
//! its events in a file. Needs /dev/kvm and podman: without them the tests print "skipped" and
//! pass, unless TORPOR_REQUIRE_KVM=1 (`.ci/run` installs podman).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use testutil::{free_port, http_get, Detached, Output, Rootfs, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");

/// A podman with private storage and an imported image.
struct Podman {
    dir: TempDir,
    image: String,
    root: Rootfs,
}

impl Podman {
    /// None (test skipped) without KVM or podman.
    fn new() -> Option<Podman> {
        if !testutil::require_kvm() {
            return None;
        }
        let found = Command::new("podman")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
                "podman is not installed (apt-get install podman)"
            );
            eprintln!("skipped: podman not installed");
            return None;
        }
        let dir = TempDir::new("torpor-podman");
        let root = Rootfs::new();
        root.guest_program("pattern_server");
        for applet in ["sh", "echo", "cat", "ls", "true", "sleep"] {
            root.symlink(&format!("/bin/{applet}"), "busybox");
        }
        let tar = dir.path().join("image.tar");
        // The test root's files may be links to the host's (busybox): follow them.
        tar_of(root.path(), &tar, true);
        let image = format!("localhost/torpor-test:{}", testutil::unique_token());
        let p = Podman { dir, image, root };
        let o = p.cmd(&["import", tar.to_str().unwrap(), &p.image]);
        assert_eq!(o.code(), 0, "podman import: {}", o.stderr_str());
        Some(p)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.dir.path().join("storage"))
            .arg("--runroot")
            .arg(self.dir.path().join("run"))
            // Its own libpod state too: the default /run/libpod is shared by the tests that
            // run at once, and one of them failed creating /run/libpod/alive there.
            .arg("--tmpdir")
            .arg(self.dir.path().join("tmp"))
            .arg("--events-backend=file")
            .arg("--runtime")
            .arg(BIN)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn cmd(&self, args: &[&str]) -> Output {
        testutil::run_command(self.command(args), None, Duration::from_secs(180))
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert_eq!(o.code(), 0, "podman {args:?}: {}", o.stderr_str());
        o.stdout_str()
    }
}

/// A tarball of the directory `src` (links followed when `follow`; the kernel's own /proc,
/// /sys and /dev left out), for `podman import`.
fn tar_of(src: &Path, dst: &Path, follow: bool) {
    let st = Command::new("tar")
        .arg("-C")
        .arg(src)
        .args(["--exclude=./proc", "--exclude=./sys", "--exclude=./dev"])
        .arg(if follow { "-chf" } else { "-cf" })
        .arg(dst)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success(), "tar of {}", src.display());
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd(&["rm", "-f", "-a"]);
        let _ = self.cmd(&["rmi", "-f", "-a"]);
        // podman's storage holds overlay mounts: unmount before the directory goes.
        let _ = self.cmd(&["system", "reset", "-f"]);
    }
}

#[test]
fn podman_run_matches_native() {
    let Some(p) = Podman::new() else { return };
    // Relative paths: the native run's working directory is the image root, the container's
    // is its /.
    let script = "echo out; echo err >&2; /bin/busybox ls bin | /bin/busybox head -3; exit 5";
    let native = testutil::native(
        &p.root.host_path("bin/busybox"),
        &["sh", "-c", script],
        p.root.path(),
        &[("PATH", &format!("{}/bin", p.root.path().display()))],
        None,
    );
    let got = p.cmd(&["run", "--rm", &p.image, "/bin/busybox", "sh", "-c", script]);
    assert_eq!(got.code(), 5, "{}", got.stderr_str());
    assert_eq!(got.stdout_str(), native.stdout_str());
    assert!(got.stderr_str().contains("err"), "{}", got.stderr_str());
}

fn pss_kib(pid: &str) -> u64 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    t.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn podman_serves_pauses_execs_and_stops() {
    let Some(p) = Podman::new() else { return };
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    p.ok(&[
        "run",
        "-d",
        "--name",
        "web",
        "-p",
        &publish,
        &p.image,
        "/bin/pattern_server",
        "8080",
        "32",
    ]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/", Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello\n")
    });
    assert!(up, "not served through podman's port forwarding");
    let pid = p
        .ok(&["inspect", "-f", "{{.State.Pid}}", "web"])
        .trim()
        .to_string();
    let hot = pss_kib(&pid);

    p.ok(&["pause", "web"]);
    assert_eq!(
        p.ok(&["inspect", "-f", "{{.State.Status}}", "web"]).trim(),
        "paused"
    );
    let paused = pss_kib(&pid);
    assert!(
        paused * 2 < hot,
        "PSS {paused} KiB paused against {hot} KiB running"
    );
    let waiting = std::thread::spawn(move || http_get(addr, "/verify", Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!waiting.is_finished(), "answered while paused");
    p.ok(&["unpause", "web"]);
    let r = waiting
        .join()
        .unwrap()
        .expect("the request made while paused");
    assert_eq!(r.body_str(), format!("ok {}\n", 32 * 131072));

    let out = p.ok(&["exec", "web", "/bin/busybox", "echo", "from exec"]);
    assert_eq!(out, "from exec\n");
    let o = p.cmd(&["exec", "web", "/bin/busybox", "sh", "-c", "exit 9"]);
    assert_eq!(o.code(), 9, "{}", o.stderr_str());

    p.ok(&["stop", "-t", "5", "web"]);
    let status = p.ok(&[
        "inspect",
        "-f",
        "{{.State.Status}} {{.State.ExitCode}}",
        "web",
    ]);
    assert_eq!(status.trim(), "exited 143");
    p.ok(&["rm", "web"]);
    assert!(http_get(addr, "/", Duration::from_secs(2)).is_err());
}

#[test]
fn podman_run_it_gives_a_shell_on_a_terminal() {
    let Some(p) = Podman::new() else { return };
    if !Path::new("/usr/bin/script").exists() {
        panic!("script(1) is missing (bsdutils)");
    }
    // script(1) gives podman a real pseudo-terminal; the shell reads what we type.
    let storage = p.dir.path().join("storage");
    let run = p.dir.path().join("run");
    let podman = format!(
        "podman --root {} --runroot {} --events-backend=file --runtime {BIN} run -it --rm {} /bin/sh",
        storage.display(),
        run.display(),
        p.image
    );
    let mut child = Command::new("script")
        .args(["-qec", &podman, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let wait_for = |what: &str| {
        Detached::wait_until(Duration::from_secs(120), || {
            seen.lock().unwrap().contains(what)
        })
    };
    use std::io::Write;
    // Type only once the shell prompts: input typed earlier may be flushed by its TCSETSF.
    assert!(wait_for("# "), "no prompt:\n{}", seen.lock().unwrap());
    stdin.write_all(b"echo typed-$((6*7))\n").unwrap();
    assert!(wait_for("typed-42"), "no answer:\n{}", seen.lock().unwrap());
    stdin.write_all(b"exit 4\n").unwrap();
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    drop(stdin);
    let out = std::process::Output {
        stdout: seen.lock().unwrap().clone().into_bytes(),
        ..out
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("typed-42"),
        "terminal output:\n{text}\nstderr:\n{err}"
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "terminal output:\n{text}\nstderr:\n{err}"
    );
}

#[test]
fn podman_serves_debian_python_through_its_port_forwarding() {
    let Some(p) = Podman::new() else { return };
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    // An image of Debian's python3 root, imported offline.
    let tar = p.dir.path().join("python.tar");
    tar_of(&root, &tar, false);
    let image = format!("localhost/torpor-python:{}", testutil::unique_token());
    p.ok(&["import", tar.to_str().unwrap(), &image]);
    let _ = std::fs::remove_file(&tar);
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    p.ok(&[
        "run",
        "-d",
        "--name",
        "py",
        "-p",
        &publish,
        "-w",
        "/tmp",
        &image,
        "python3",
        "-m",
        "http.server",
        "8080",
    ]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let served = Detached::wait_until(Duration::from_secs(120), || {
        http_get(addr, "/", Duration::from_secs(10))
            .is_ok_and(|r| r.body_str().contains("Directory listing for /"))
    });
    let logs = p.cmd(&["logs", "py"]);
    assert!(
        served,
        "python's http.server not reached: {}",
        logs.stderr_str()
    );
    p.ok(&["rm", "-f", "py"]);
}

#[test]
fn podman_checkpoints_and_restores_a_container() {
    let Some(p) = Podman::new() else { return };
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    p.ok(&[
        "run",
        "-d",
        "--name",
        "ck",
        "-p",
        &publish,
        &p.image,
        "/bin/pattern_server",
        "8080",
        "16",
    ]);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let verified = || {
        http_get(addr, "/verify", Duration::from_secs(30))
            .is_ok_and(|r| r.body_str().starts_with("ok "))
    };
    assert!(Detached::wait_until(Duration::from_secs(60), verified));
    // podman runs `torpor checkpoint --image-path … --work-path … ID`, then stops the
    // container; `restore` runs `torpor restore --image-path … --bundle … --detach` under
    // conmon, in the container's new network namespace.
    p.ok(&["container", "checkpoint", "ck"]);
    assert!(p
        .ok(&["inspect", "-f", "{{.State.Status}}", "ck"])
        .trim()
        .starts_with("exited"));
    p.ok(&["container", "restore", "ck"]);
    assert_eq!(
        p.ok(&["inspect", "-f", "{{.State.Status}}", "ck"]).trim(),
        "running"
    );
    // The same server, its 16 MiB pattern intact, through podman's port forwarding again.
    assert!(Detached::wait_until(Duration::from_secs(60), verified));
    p.ok(&["rm", "-f", "ck"]);
}
