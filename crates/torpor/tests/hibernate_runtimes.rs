//! Hibernation of multi-threaded language runtimes: the Go net/http, Node.js and Java
//! hello-worlds (each with several threads: Go's Ms, V8's and libuv's workers, the JVM's
//! compiler and GC threads) are hibernated and woken several times, with page-fault and REAP
//! wakes, and must answer every request correctly; while hibernated their PSS must drop.
//!
//! Needs /dev/kvm and the Debian roots of `scripts/build-rootfs.sh`: without them each test
//! prints "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use std::net::SocketAddr;
use std::time::Duration;

use testutil::Detached;

const NODE_SERVER: &str =
    r#"require('http').createServer((q, s) => s.end('hello from node\n')).listen(8080)"#;

fn get(addr: SocketAddr, what: &str) -> String {
    testutil::http_get(addr, "/", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .body_str()
}

/// Starts `program` detached from root `name` with `wake_mode`, waits for its first answer,
/// then hibernates and wakes it `cycles` times, checking each answer contains `want`.
fn hibernate_cycles(name: &str, program: &str, args: &[&str], want: &str, wake_mode: &str) {
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
        std::path::Path::new(env!("CARGO_BIN_EXE_torpor")),
        &["--memory", "1G", "-p", &publish, "--wake-mode", wake_mode],
        &root,
        program,
        args,
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(
        testutil::answers_within(addr, Duration::from_secs(120)),
        "{name} did not answer within 120 s"
    );
    let threads = std::fs::read_dir(format!("/proc/{}/task", sb.pid()))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(
        threads > 3,
        "{name}: expected a multi-threaded sandbox, holder has {threads} threads"
    );
    for cycle in 0..4 {
        let hot_pss = sb.stat_u64("pss_bytes");
        // A socket with something to read (the last client's FIN not yet handled) wakes the
        // sandbox at once, as it should: hibernate again once the server has caught up.
        let mut state = String::new();
        for _ in 0..20 {
            sb.ok("hibernate", &[]);
            state = sb.stat("state");
            if state == "hibernated" {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(state, "hibernated", "{name} cycle {cycle}");
        let cold_pss = sb.stat_u64("pss_bytes");
        // The runtime's own few MiB stay: a small app's PSS does not fall by as much.
        assert!(
            cold_pss < hot_pss * 3 / 4,
            "{name} cycle {cycle}: PSS {hot_pss} hot, {cold_pss} hibernated"
        );
        let wakes_before = sb.stat_u64("wakes");
        for i in 0..3 {
            let body = get(addr, &format!("{name} cycle {cycle} request {i}"));
            assert!(body.contains(want), "{name} cycle {cycle}: {body:?}");
        }
        assert_eq!(
            sb.stat_u64("wakes"),
            wakes_before + 1,
            "{name} cycle {cycle}: one wake"
        );
    }
    sb.ok("delete", &["--force"]);
}

#[test]
fn go_server_hibernates_and_wakes_by_faults() {
    hibernate_cycles("go", "/app/hello", &[], "Hello", "fault");
}

#[test]
fn node_server_hibernates_and_wakes_with_reap() {
    hibernate_cycles(
        "node",
        "/usr/bin/node",
        &["-e", NODE_SERVER],
        "hello from node",
        "reap",
    );
}

#[test]
fn java_server_hibernates_and_wakes() {
    hibernate_cycles(
        "java",
        "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        &["-cp", "/app", "Hello"],
        "hello from java",
        "auto",
    );
}
