//! The guest's counting HTTP server (`tests/guest/http_server.c`) in a detached sandbox: its
//! bodies say how many requests it has served, which tells whether a sandbox carried on with
//! its memory (a wake, a restore, a fork) or started anew.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::{free_port, http_get, Detached, Rootfs};

/// The port the server listens on inside the sandbox.
pub const GUEST_PORT: &str = "8080";

/// The request counter in a body of the server.
pub fn counter(body: &str) -> u64 {
    body.strip_prefix("hello from http_server: request ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected body {body:?}"))
}

/// The server started detached by the `torpor` binary `bin` in a copy of `r`, published on a
/// free port of 127.0.0.1, once it answers there (its first request, `/up`, counted).
pub fn start(bin: &Path, r: &Rootfs) -> (Detached, SocketAddr) {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let publish = format!("127.0.0.1:{port}:{GUEST_PORT}");
    let prog = r.guest_program("http_server");
    let sb = Detached::start(bin, &["-p", &publish], r.path(), &prog, &[GUEST_PORT]);
    let up = Detached::wait_until(Duration::from_secs(60), || {
        http_get(addr, "/up", Duration::from_secs(5)).is_ok()
    });
    assert!(up, "the server does not answer on {addr}");
    (sb, addr)
}

/// One request's counter.
pub fn get(addr: SocketAddr) -> u64 {
    let resp = http_get(addr, "/n", Duration::from_secs(30)).expect("a response");
    assert_eq!(resp.status, 200, "{resp:?}");
    counter(&resp.body_str())
}
