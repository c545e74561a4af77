//! `torpor-dormant` as a dormant sandbox uses it: it answers `state` and `stats` without
//! waking, and a connection to a watched listener, or a control request it cannot answer,
//! execs the wake command with every descriptor inherited and nothing consumed (the waiting
//! connection is accepted and its bytes read by the woken program; the request is read by it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// The woken program: with `--woken-by 4` it accepts the connection waiting on the inherited
/// listener (fd 4) and echoes its bytes upper-cased; with another descriptor (a control
/// connection) it reads the request line and answers it.
const WAKE: &str = r#"
import socket, sys, json
fd = int(sys.argv[sys.argv.index("--woken-by") + 1])
if fd == 4:
    l = socket.socket(fileno=4)
    c, _ = l.accept()
    c.sendall(c.recv(100).upper() + b" woken-by-listener")
else:
    c = socket.socket(fileno=fd)
    line = c.makefile("rb").readline()
    c.sendall(json.dumps({"ok": True, "data": {"woken-by-request": json.loads(line)["op"]}}).encode() + b"\n")
"#;

struct Dormant {
    child: Child,
    dir: PathBuf,
    control: PathBuf,
    tcp: std::net::SocketAddr,
}

impl Drop for Dormant {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(name: &str) -> Dormant {
    let dir = std::env::temp_dir().join(format!("torpor-dormant-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    let status = dir.join("status.json");
    std::fs::write(
        &status,
        r#"{"state":{"id":"d1","status":"dormant"},"stats":{"state":"dormant","rss":4096}}"#,
    )
    .expect("status file");
    let control = dir.join("control.sock");
    let unix = UnixListener::bind(&control).expect("control listener");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("watched listener");
    let addr = tcp.local_addr().expect("address");
    let (u, t) = (unix.as_raw_fd(), tcp.as_raw_fd());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_torpor-dormant"));
    cmd.arg("--status").arg(&status).args([
        "--control",
        "3",
        "--watch",
        "4",
        "--",
        "python3",
        "-c",
        WAKE,
    ]);
    // SAFETY: between fork and exec only fcntl and dup2 (async-signal-safe) on descriptors
    // this test owns: the listeners become the child's 3 and 4, without close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            // Out of the way first: either listener may be 3 or 4 in this process.
            let (u, t) = (
                libc::fcntl(u, libc::F_DUPFD, 100),
                libc::fcntl(t, libc::F_DUPFD, 100),
            );
            if u < 0 || t < 0 || libc::dup2(u, 3) < 0 || libc::dup2(t, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("torpor-dormant starts");
    drop((unix, tcp));
    Dormant {
        child,
        dir,
        control,
        tcp: addr,
    }
}

fn request(d: &Dormant, line: &str) -> String {
    let mut s = UnixStream::connect(&d.control).expect("connect to the control socket");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(format!("{line}\n").as_bytes()).expect("send");
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).expect("answer");
    answer
}

#[test]
fn stats_is_answered_without_a_wake_and_a_connection_wakes_it_with_no_byte_lost() {
    let mut d = start("conn");
    for _ in 0..3 {
        let a = request(&d, r#"{"op":"stats"}"#);
        assert!(a.contains(r#""rss":4096"#), "{a}");
        let a = request(&d, r#"{"op":"state"}"#);
        assert!(a.contains(r#""status":"dormant""#), "{a}");
    }
    assert!(
        d.child.try_wait().expect("try_wait").is_none(),
        "the read-only verbs woke it"
    );
    let mut c = TcpStream::connect(d.tcp).expect("connect to the watched listener");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(b"hello").expect("send");
    let mut got = String::new();
    c.read_to_string(&mut got)
        .expect("the woken program's answer");
    assert_eq!(got, "HELLO woken-by-listener");
    assert!(d.child.wait().expect("wait").success());
}

#[test]
fn a_request_it_cannot_answer_wakes_it_and_reaches_the_woken_program() {
    let mut d = start("req");
    let a = request(
        &d,
        r#"{"op":"exec","args":["/bin/true"],"env":[],"cwd":"/"}"#,
    );
    assert_eq!(
        a.trim(),
        r#"{"ok": true, "data": {"woken-by-request": "exec"}}"#
    );
    assert!(d.child.wait().expect("wait").success());
}

#[test]
fn a_bad_command_line_or_status_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_torpor-dormant"))
        .args(["--control", "3", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--status is required"));
    let out = Command::new(env!("CARGO_BIN_EXE_torpor-dormant"))
        .args([
            "--status",
            "/nonexistent/status.json",
            "--control",
            "0",
            "--",
            "true",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
}
