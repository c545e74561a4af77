//! A static HTTP server in the sandbox, reached from the host through
//! `--publish`: by curl and by a Rust client making 1,000 sequential requests,
//! each on a new connection.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use testutil::net::read_response;
use testutil::{free_port, http_get, Rootfs, Running, Torpor};

const GUEST_PORT: u16 = 8080;
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

fn body(n: u64, path: &str) -> String {
    format!("hello from http_server: request {n} path {path}\n")
}

/// Parses the request counter out of a response body.
fn counter(body: &str) -> u64 {
    body.strip_prefix("hello from http_server: request ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected body {body:?}"))
}

/// Starts http_server under torpor with GUEST_PORT published on a free host
/// port, and waits for its first response. Returns the sandbox, the host
/// address and the counter the first request got.
fn start_server(r: &Rootfs) -> (Running, SocketAddr, u64) {
    let prog = r.guest_program("http_server");
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut server = torpor()
        .run(r.path(), &prog)
        .publish(&format!("127.0.0.1:{port}:{GUEST_PORT}"))
        .arg(GUEST_PORT.to_string())
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(resp) = http_get(addr, "/first", Duration::from_secs(10)) {
            assert_eq!(resp.status, 200, "{resp:?}");
            let n = counter(&resp.body_str());
            assert_eq!(resp.body_str(), body(n, "/first"));
            return (server, addr, n);
        }
        if server.has_exited() || Instant::now() > deadline {
            let out = server.kill();
            panic!("http_server under torpor never answered on {addr}\n{out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl (apt-get install curl): {e}"));
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 body")
}

#[test]
fn http_server_answers_1000_sequential_requests() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (server, addr, mut n) = start_server(&r);
    let url = |path: &str| format!("http://{addr}{path}");

    // curl: one request, two on a kept-alive connection, and one that asks to close.
    n += 1;
    assert_eq!(curl(&[&url("/curl")]), body(n, "/curl"));
    assert_eq!(
        curl(&[&url("/ka1"), &url("/ka2")]),
        format!("{}{}", body(n + 1, "/ka1"), body(n + 2, "/ka2"))
    );
    n += 2;
    n += 1;
    assert_eq!(
        curl(&["-H", "Connection: close", &url("/close")]),
        body(n, "/close")
    );

    // 1,000 sequential requests, each on a new connection.
    let started = Instant::now();
    for i in 0..1000 {
        n += 1;
        let path = format!("/req/{i}");
        let resp = http_get(addr, &path, IO_TIMEOUT).unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(resp.status, 200, "request {i}: {resp:?}");
        assert_eq!(resp.body_str(), body(n, &path), "request {i}");
    }
    println!("1000 requests in {:?}", started.elapsed());

    // Keep-alive from Rust: three requests on one connection.
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    for i in 0..3 {
        n += 1;
        write!(s, "GET /keep/{i} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let resp = read_response(&mut s).expect("keep-alive response");
        assert_eq!(resp.body_str(), body(n, &format!("/keep/{i}")));
        assert_eq!(resp.header("connection"), Some("keep-alive"));
    }
    drop(s);

    // /quit ends the server cleanly.
    n += 1;
    let resp = http_get(addr, "/quit", IO_TIMEOUT).expect("quit");
    assert_eq!(resp.body_str(), body(n, "/quit"));
    let out = server.wait(Duration::from_secs(60));
    out.assert_code(0);
    assert!(
        out.stdout_str()
            .contains(&format!("http_server: served {n} requests")),
        "{out:?}"
    );
}

#[test]
fn unpublished_port_is_not_reachable_from_the_host() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("http_server");
    let guest_port = free_port();
    let mut server = torpor()
        .run(r.path(), &prog)
        .arg(guest_port.to_string())
        .spawn();
    // Wait until the server reports listening, or exits (a refused bind is fine too).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&server.stdout_so_far()).contains("listening")
        && !server.has_exited()
    {
        assert!(
            Instant::now() < deadline,
            "http_server neither listened nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for host in [[127, 0, 0, 1], [0, 0, 0, 0]] {
        let addr: SocketAddr = (host, guest_port).into();
        if let Ok(resp) = http_get(addr, "/leak", Duration::from_secs(5)) {
            let out = server.kill();
            panic!("an unpublished guest port answered on the host at {addr}: {resp:?}\n{out:?}");
        }
    }
    drop(server);
}

/// Binding a guest port twice is EADDRINUSE, as on Linux (`tests/guest/dup_bind.c` against a
/// native run); UDP beside TCP, a rebind after close and SO_REUSEPORT are allowed. In the
/// holder's own network namespace (a root holder's default) unpublished ports are the
/// namespace's own: one port on two loopback addresses, and a dual-stack IPv6 listener reached
/// by an IPv4 client, as natively.
#[test]
fn a_second_bind_of_a_port_is_eaddrinuse() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("dup_bind");
    let nat = testutil::native(
        &r.host_path("bin/dup_bind"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    let got = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(got.stdout_str(), nat.stdout_str(), "{}", got.stderr_str());
    assert!(got.stdout_str().contains("second: EADDRINUSE"));
    assert!(got
        .stdout_str()
        .contains("IPv4 client: ok, accepted from ::ffff:127.0.0.1"));
}

/// A sandbox sees its own network interfaces and no others (`tests/guest/interfaces.c`):
/// in the holder's own namespace, netlink routing sockets and interface ioctls show `lo`
/// alone, with 127.0.0.1 and ::1, and adding an address is EPERM; a holder in the host's
/// namespace (`TORPOR_NETNS=0`) offers neither (the host's interfaces stay unseen).
#[test]
fn the_sandbox_sees_its_own_interfaces_only() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("interfaces");
    let got = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_code(0);
    assert_eq!(
        got.stdout_str(),
        "interface 1 lo\nif_nametoindex(lo): 1\naddress lo 127.0.0.1\naddress lo ::1\n\
         SIOCGIFCONF: 0 length 40, 1 entries: lo\n\
         /proc/net/dev: ok, 1 interface line(s), lo 1\n\
         RTM_NEWADDR: Operation not permitted\n",
        "{}",
        got.stderr_str()
    );
    let host_ns = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .host_env("TORPOR_NETNS", "0")
        .output();
    host_ns.assert_code(0);
    assert!(
        host_ns
            .stdout_str()
            .starts_with("if_nameindex: Address family not supported by protocol\n"),
        "{}",
        host_ns.stdout_str()
    );
    assert!(host_ns
        .stdout_str()
        .contains("if_nametoindex(lo): 0 No such device"));
    assert!(host_ns
        .stdout_str()
        .contains("SIOCGIFCONF: 0 length 0, 0 entries:\n"));
    assert!(host_ns
        .stdout_str()
        .contains("/proc/net/dev: No such file or directory"));
}

/// `delete --force` returns only once the sandbox is gone (issue 32 item 6): its holder
/// ended and its published port free, so a new sandbox publishing the same port at once
/// starts and answers. The server is Python's threading HTTP server with a client connection
/// open and idle, so one of its threads is blocked in a read when the delete comes. Three
/// rounds, each on the port the one before used.
#[test]
fn delete_force_returns_once_the_published_port_is_free() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_torpor"));
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let publish = format!("{port}:{GUEST_PORT}");
    let start = || {
        let sb = testutil::Detached::start(
            &bin,
            &["-p", &publish],
            &root,
            "python3",
            &["-m", "http.server", "-d", "/", &GUEST_PORT.to_string()],
        );
        let up = testutil::Detached::wait_until(Duration::from_secs(60), || {
            http_get(addr, "/", Duration::from_secs(5)).is_ok()
        });
        assert!(up, "the server does not answer on {addr}");
        sb
    };
    let mut sb = start();
    for round in 0..3 {
        let pid = sb.pid();
        // A connection the server has accepted and waits on.
        let idle = TcpStream::connect(addr).expect("connect");
        std::thread::sleep(Duration::from_millis(200));
        let out = sb.verb("delete", &["--force"]);
        assert_eq!(out.code(), 0, "delete --force: {}", out.stderr_str());
        assert!(
            testutil::Detached::process_ended(pid),
            "round {round}: the holder {pid} outlived delete --force"
        );
        // Nothing listens on the port any more (SO_REUSEADDR, as Rust sets it, lets a bind
        // pass over connections in TIME_WAIT, not over a listener).
        let probe = std::net::TcpListener::bind(addr)
            .unwrap_or_else(|e| panic!("round {round}: {addr} still taken after delete: {e}"));
        drop((probe, idle));
        sb = start();
    }
}
