//! AF_UNIX sockets: `tests/guest/unix_sockets.c` must print the same bytes natively and in
//! torpor (stream, datagram and seqpacket sockets, socketpair, path and abstract names and what
//! getsockname/getpeername/accept/recvfrom report of them, autobind, Linux's errnos,
//! SCM_RIGHTS of a file, a pipe, a directory and a socket between processes, MSG_CTRUNC,
//! SCM_CREDENTIALS and SO_PEERCRED in the processes' own pids, MSG_PEEK, nonblocking EAGAIN);
//! path escapes stay in the root; abstract names are private to each sandbox; a Unix listener
//! wakes a hibernated sandbox; Debian's Python runs `multiprocessing` over Unix sockets.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use testutil::{Detached, Rootfs, Running, TempDir, Torpor};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");

fn torpor() -> Torpor {
    Torpor::new(BIN)
}

#[test]
fn unix_sockets_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("unix_sockets");
    let nat = testutil::native(
        &r.host_path("bin/unix_sockets"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native run: {}", nat.stdout_str());
    assert!(nat.stdout_str().ends_with("failures 0\ndone\n"));
    let got = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_same_stdout(&nat, "unix sockets");
    assert_eq!(got.code(), 0, "{}", got.stderr_str());
}

#[test]
fn unix_socket_paths_cannot_escape_the_root() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("unix_sockets");
    let name = format!("torpor-escape-{}", testutil::unique_token());
    let got = torpor()
        .run(r.path(), &prog)
        .args(["escape", name.as_str()])
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(
        got.stdout_str(),
        "bind dotdot: 0\ninside root: 1\nbind through dir symlink: 0\ninside root: 1\n\
         bind over symlink: -1 EADDRINUSE\nconnect through symlink: 0\n\
         proc fd bind fails: 1\n",
        "{}",
        got.stderr_str()
    );
    for suffix in ["dotdot", "viadir", "final"] {
        let host = std::path::Path::new("/tmp").join(format!("{name}-{suffix}"));
        assert!(
            !host.exists(),
            "{} was created outside the root",
            host.display()
        );
    }
    // The friendly form writes to its own overlay layer: the image is untouched too.
    assert!(!r.host_path(&format!("tmp/{name}-dotdot")).exists());
}

/// Waits until `run`'s stdout contains `what`.
fn wait_for_output(run: &Running, what: &str) -> bool {
    Detached::wait_until(Duration::from_secs(60), || {
        String::from_utf8_lossy(&run.stdout_so_far()).contains(what)
    })
}

#[test]
fn abstract_names_are_private_to_each_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("unix_sockets");
    let name = format!("torpor-shared-{}", testutil::unique_token());
    let cmd = torpor()
        .run(r.path(), &prog)
        .args(["abstract-serve", name.as_str()])
        .host_env("TORPOR_LOG", "off")
        .command();
    let mut a = Running::spawn(cmd, None);
    assert!(
        wait_for_output(&a, "listening"),
        "{}",
        String::from_utf8_lossy(&a.stderr_so_far())
    );
    // Another sandbox neither reaches A's listener nor collides with its name.
    let b = torpor()
        .run(r.path(), &prog)
        .args(["abstract-connect", name.as_str()])
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(
        b.stdout_str(),
        "connect: -1 ECONNREFUSED\nbind: 0\n",
        "{}",
        b.stderr_str()
    );
    // Nor does the host see the name.
    let mut host_name = vec![0u8];
    host_name.extend_from_slice(name.as_bytes());
    let host = std::os::unix::net::SocketAddr::from_abstract_name(&host_name[1..])
        .and_then(|addr| UnixStream::connect_addr(&addr));
    assert!(
        host.is_err(),
        "the host reached the sandbox's abstract name"
    );
    a.kill();
}

#[test]
fn unix_listener_wakes_a_hibernated_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("unix_sockets");
    // The friendly form's root is an overlay only the holder sees: a volume makes the
    // socket's directory a host directory.
    let vol = TempDir::new("torpor-unix-vol");
    let volume = format!("{}:/sock", vol.path().display());
    let sb = Detached::start(
        BIN.as_ref(),
        &["--volume", &volume],
        r.path(),
        &prog,
        &["serve", "/sock/s"],
    );
    let sock = vol.path().join("s");
    let ask = |line: &str| -> std::io::Result<String> {
        let mut c = UnixStream::connect(&sock)?;
        c.set_read_timeout(Some(Duration::from_secs(60)))?;
        c.write_all(line.as_bytes())?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    };
    assert!(
        Detached::wait_until(Duration::from_secs(60), || ask("up").is_ok()),
        "the server did not come up"
    );
    for cycle in 0..3 {
        // Idle in accept: hot (first cycle) or woken (later ones).
        assert!(Detached::wait_until(Duration::from_secs(10), || {
            matches!(sb.stat("state").as_str(), "hot" | "woken")
        }));
        sb.ok("hibernate", &[]);
        assert_eq!(sb.stat("state"), "hibernated");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(sb.stat("state"), "hibernated", "woke without a request");
        let msg = format!("ping {cycle}");
        assert_eq!(ask(&msg).unwrap(), format!("echo: {msg}"));
        assert_eq!(sb.stat_u64("wakes"), cycle + 1);
    }
}

#[test]
fn python_multiprocessing_over_unix_sockets() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    let script = r#"
import multiprocessing as mp, os, socket, subprocess, sys
from multiprocessing.connection import Listener

def square(x):
    return x * x

if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        print("pool", pool.map(square, range(6)))
    with mp.Manager() as m:
        d = m.dict()
        ps = [mp.Process(target=d.__setitem__, args=(i, i * 10)) for i in range(3)]
        [p.start() for p in ps]
        [p.join() for p in ps]
        print("manager", sorted(d.items()))
    path = "/tmp/mpc.sock"
    with Listener(path, family="AF_UNIX", authkey=b"k") as lis:
        child = subprocess.Popen([sys.executable, "-c",
            "from multiprocessing.connection import Client\n"
            f"c = Client({path!r}, family='AF_UNIX', authkey=b'k')\n"
            "c.send({'hello': [1, 2]}); print('client got', c.recv(), flush=True)"])
        with lis.accept() as conn:
            print("listener got", conn.recv(), flush=True)
            conn.send("bye")
        child.wait()
        print("listener address", lis.address)
    a, b = socket.socketpair()
    r, w = os.pipe()
    os.write(w, b"through a pipe")
    socket.send_fds(a, [b"x"], [r])
    msg, fds, flags, addr = socket.recv_fds(b, 10, 4)
    print("recv_fds", msg, len(fds), os.read(fds[0], 20))
    s = socket.socket(socket.AF_UNIX)
    s.bind("\0py-abstract")
    print("abstract", s.getsockname())
"#;
    let got = torpor()
        .run(&root, "/usr/bin/python3")
        .args(["-c", script])
        .memory("1G")
        .host_env("TORPOR_LOG", "off")
        .timeout(Duration::from_secs(180))
        .output();
    assert_eq!(
        got.stdout_str(),
        "pool [0, 1, 4, 9, 16, 25]\nmanager [(0, 0), (1, 10), (2, 20)]\n\
         listener got {'hello': [1, 2]}\nclient got bye\nlistener address /tmp/mpc.sock\n\
         recv_fds b'x' 1 b'through a pipe'\nabstract b'\\x00py-abstract'\n",
        "{}",
        got.stderr_str()
    );
    assert_eq!(got.code(), 0);
}
