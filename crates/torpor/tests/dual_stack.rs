//! Dual-stack listeners on a published port (issue 32, item 3): a server with an IPv6-only
//! and an IPv4 listener on one port, bound in either order (memcached, Redis and PostgreSQL
//! do so), starts as natively; the published port reaches the IPv4 listener on the host's
//! IPv4 address, and with `--publish [::1]:...` the IPv6 one on the host's IPv6 loopback; from
//! inside the sandbox `::1` and `127.0.0.1` reach their own listener.
//!
//! Needs /dev/kvm (or the trap platform) and the Debian `python` root: without them it prints
//! "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use testutil::Detached;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

/// What the listener behind `addr` says it is (`v4` or `v6`).
fn family_at(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut s = String::new();
    c.read_to_string(&mut s).expect("read the answer");
    s.trim().to_string()
}

fn start(root: &std::path::Path, publish: &str, order: &str) -> Detached {
    let script = testutil::workspace_root().join("tests/apps/dualstack/server.py");
    let sb = Detached::start(
        &bin(),
        &[
            "-p",
            publish,
            "--volume",
            &format!("{}:/app/server.py:ro", script.display()),
        ],
        root,
        "python3",
        &["/app/server.py", "8080", order],
    );
    let log = sb.dir().join("output.log");
    let up = Detached::wait_until(Duration::from_secs(90), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"))
    });
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(up, "the server did not start ({order}); its output:\n{out}");
    assert!(
        out.contains("inside v6 v4"),
        "inside the sandbox ({order}):\n{out}"
    );
    sb
}

#[test]
fn ipv6_only_and_ipv4_listeners_share_a_published_port_in_either_order() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    for order in ["6first", "4first"] {
        let port = testutil::free_port();
        let sb = start(&root, &format!("127.0.0.1:{port}:8080"), order);
        assert_eq!(family_at(([127, 0, 0, 1], port).into()), "v4", "{order}");
        drop(sb);
        // Published on the host's IPv6 loopback: the IPv6 listener answers there.
        let port = testutil::free_port();
        let sb = start(&root, &format!("[::1]:{port}:8080"), order);
        let v6: SocketAddr = format!("[::1]:{port}").parse().expect("address");
        assert_eq!(family_at(v6), "v6", "{order}");
        drop(sb);
    }
}
