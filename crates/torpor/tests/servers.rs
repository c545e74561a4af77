//! Real server software from Debian's packages, each in a sandbox built from the `servers`
//! root (`scripts/build-rootfs.sh servers`), driven by real clients on the host, hibernated
//! and woken 5 times with every answer checked:
//!
//! - nginx (`nginx-light`): a master and 2 workers (three VMs sharing the listening socket
//!   and shared memory), `curl` from the host;
//! - PostgreSQL 15: `initdb` and `postgres` as the `postgres` user (`--user`), a postmaster
//!   and its background processes sharing 128 MiB of shared memory and semaphores, `psql`
//!   from the host inserting rows and reading them back after each wake;
//! - Redis: `redis-server`, `redis-cli` and `redis-benchmark` from the host, and a
//!   connection kept open across every hibernate whose next command wakes the sandbox;
//! - memcached with Debian's default options (it listens on IPv4 and on IPv6 with
//!   `IPV6_V6ONLY`, IPv6 first), as the `memcache` user, `memccp` and `memccat` from the host
//!   (libmemcached-tools).
//!
//! Each test needs /dev/kvm, the Debian root and the clients (curl, psql from
//! postgresql-client, redis-cli and redis-benchmark from redis-tools, memccp and memccat from
//! libmemcached-tools; `scripts/test.sh`
//! installs them): without them it prints "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use testutil::{Detached, TempDir};

const CYCLES: usize = 5;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

/// The `servers` root and the host clients `tools`, or None (skipped) when unavailable.
fn prerequisites(tools: &[&str]) -> Option<PathBuf> {
    if !testutil::require_kvm() {
        return None;
    }
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            if std::env::var("TORPOR_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("{tool} is not installed (scripts/test.sh installs it)");
            }
            println!("skipped: {tool} is not installed");
            return None;
        }
    }
    testutil::debian_rootfs("servers")
}

/// Runs a host client; its stdout, or a panic with its output.
fn client(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls a client until it succeeds (the server is starting).
fn wait_for(what: &str, sb: &Detached, mut ready: impl FnMut() -> bool) {
    let up = Detached::wait_until(Duration::from_secs(90), &mut ready);
    if !up {
        let log = std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default();
        panic!("{what} did not come up; its output:\n{log}");
    }
}

/// Hibernates the sandbox and checks that it is, with every process's memory reported (one
/// report per memory: processes forked copy-on-write share their parent's, listed in its
/// report's `sharing`). Work
/// that arrived just as it deflated wakes it at once, as it must (a client's last bytes that a
/// server process had not read yet: psql's Terminate message to its backend); then it is
/// hibernated again, at most 3 times. Returns how many such wakes there were.
fn hibernate(sb: &Detached, processes: usize) -> u64 {
    let mut early = 0;
    loop {
        sb.ok("hibernate", &[]);
        let state = sb.stat("state");
        if state == "hibernated" {
            break;
        }
        assert!(
            early < 3 && (state == "hibernate-running" || state == "woken"),
            "not hibernated after {early} early wakes: {state}"
        );
        early += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let stats = sb.ok("stats", &[]);
    let v: serde_json::Value = serde_json::from_str(&stats).expect("stats is JSON");
    let n: usize = v["processes"].as_array().map_or(0, |reports| {
        reports
            .iter()
            .map(|r| 1 + r["sharing"].as_array().map_or(0, Vec::len))
            .sum()
    });
    assert!(
        n >= processes,
        "every process is deflated: {n} reports, {processes} processes expected: {stats}"
    );
    early
}

fn curl(port: u16, path: &str) -> String {
    client(
        "curl",
        Command::new("curl").args([
            "-sS",
            "--max-time",
            "30",
            &format!("http://127.0.0.1:{port}{path}"),
        ]),
    )
}

#[test]
fn nginx_master_and_workers_hibernate_and_wake() {
    let Some(root) = prerequisites(&["curl"]) else {
        return;
    };
    let conf = TempDir::new("torpor-nginx");
    std::fs::write(
        conf.path().join("nginx.conf"),
        "worker_processes 2;\ndaemon off;\nmaster_process on;\npid /tmp/nginx.pid;\n\
         error_log stderr notice;\nevents { worker_connections 64; }\n\
         http {\n  access_log off;\n  server {\n    listen 8080;\n    root /var/www/html;\n\
         index index.nginx-debian.html;\n\
         location /hello { return 200 \"hello from nginx\\n\"; }\n  }\n}\n",
    )
    .expect("writing nginx.conf");
    let port = testutil::free_port();
    let publish = format!("{port}:8080");
    let volume = format!("{}:/etc/torpor:ro", conf.path().display());
    let sb = Detached::start(
        &bin(),
        &["-p", &publish, "-v", &volume],
        &root,
        "/usr/sbin/nginx",
        &["-c", "/etc/torpor/nginx.conf"],
    );
    wait_for("nginx", &sb, || {
        Command::new("curl")
            .args([
                "-sf",
                "--max-time",
                "2",
                &format!("http://127.0.0.1:{port}/hello"),
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    // The master and its two workers.
    let log = std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default();
    assert!(
        log.matches("start worker process").count() >= 2,
        "two workers: {log}"
    );
    let mut early = 0;
    for cycle in 0..CYCLES {
        early += hibernate(&sb, 3);
        assert_eq!(curl(port, "/hello"), "hello from nginx\n", "cycle {cycle}");
        let page = curl(port, "/");
        assert!(page.contains("Welcome to nginx"), "cycle {cycle}: {page}");
        for _ in 0..10 {
            assert_eq!(curl(port, "/hello"), "hello from nginx\n");
        }
    }
    assert_eq!(sb.stat_u64("wakes"), CYCLES as u64 + early);
    // A fork of the master and its workers (their accept mutex is anonymous shared memory,
    // their channels Unix socket pairs passed between them) serves on a port of its own, and
    // the template serves on.
    let other = testutil::free_port();
    let publish = format!("127.0.0.1:{other}:8080");
    let fork = sb
        .fork_beside(&["-p", &publish])
        .unwrap_or_else(|o| panic!("the fork of nginx: {}", o.stderr_str()));
    for _ in 0..10 {
        assert_eq!(curl(other, "/hello"), "hello from nginx\n");
    }
    assert!(curl(other, "/").contains("Welcome to nginx"));
    let ps = fork.ok("ps", &[]);
    assert_eq!(ps.matches("/usr/sbin/nginx").count(), 3, "{ps}");
    assert_eq!(curl(port, "/hello"), "hello from nginx\n");
}

fn psql(port: u16, sql: &str) -> String {
    client(
        "psql",
        Command::new("psql").env("PGCONNECT_TIMEOUT", "30").args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-X",
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ]),
    )
    .trim()
    .to_string()
}

#[test]
fn postgresql_rows_survive_hibernation() {
    let Some(root) = prerequisites(&["psql"]) else {
        return;
    };
    let port = testutil::free_port();
    let publish = format!("{port}:5432");
    let bin_dir = "/usr/lib/postgresql/15/bin";
    let script = format!(
        "{bin_dir}/initdb -D /var/lib/postgresql/data -A trust >/dev/null && exec \
         {bin_dir}/postgres -D /var/lib/postgresql/data -c listen_addresses=* \
         -c unix_socket_directories=/tmp"
    );
    let sb = Detached::start(
        &bin(),
        &["-u", "postgres", "-p", &publish],
        &root,
        "/bin/sh",
        &["-c", &script],
    );
    wait_for("postgres", &sb, || {
        Command::new("psql")
            .env("PGCONNECT_TIMEOUT", "2")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
            .args(["-X", "-tAc", "select 1"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert_eq!(psql(port, "select current_user"), "postgres");
    psql(
        port,
        "create table t(i int primary key, s text); \
         insert into t select g, md5(g::text) from generate_series(1, 20000) g;",
    );
    let digest =
        "select count(*) || ' ' || sum(i) || ' ' || md5(string_agg(s, ',' order by i)) from t";
    let mut expected = psql(port, digest);
    let mut rows = 20000u64;
    let mut sum: u64 = (1..=20000u64).sum();
    assert!(
        expected.starts_with(&format!("{rows} {sum} ")),
        "{expected}"
    );
    let mut early = 0;
    for cycle in 0..CYCLES {
        // A postmaster, a checkpointer, a background writer, a WAL writer, an autovacuum
        // launcher and a logical replication launcher.
        early += hibernate(&sb, 5);
        // The query that wakes it reads every row back.
        assert_eq!(psql(port, digest), expected, "cycle {cycle}: rows changed");
        let id = 100_000 + cycle as u64;
        psql(port, &format!("insert into t values ({id}, md5('{id}'))"));
        rows += 1;
        sum += id;
        expected = psql(port, digest);
        assert!(
            expected.starts_with(&format!("{rows} {sum} ")),
            "cycle {cycle}: {expected}"
        );
    }
    assert_eq!(sb.stat_u64("wakes"), CYCLES as u64 + early);
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    client(
        "redis-cli",
        Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args),
    )
    .trim()
    .to_string()
}

#[test]
fn redis_answers_redis_benchmark_across_hibernations() {
    let Some(root) = prerequisites(&["redis-cli", "redis-benchmark"]) else {
        return;
    };
    let port = testutil::free_port();
    let publish = format!("{port}:6379");
    let sb = Detached::start(
        &bin(),
        &["-p", &publish],
        &root,
        "/usr/bin/redis-server",
        &["--port", "6379", "--save", "", "--appendonly", "no"],
    );
    wait_for("redis", &sb, || {
        Command::new("redis-cli")
            .args(["-p", &port.to_string(), "ping"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
    });
    let value: String = (0..4096)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(redis_cli(port, &["set", "big", &value]), "OK");
    // A connection opened before the hibernates stays open across them: its next command
    // wakes the sandbox and its answer arrives on it (inline commands, RESP replies).
    let mut kept = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    kept.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let mut ask = |cmd: &str| -> String {
        use std::io::{Read, Write};
        kept.write_all(format!("{cmd}\r\n").as_bytes())
            .expect("send");
        let mut buf = [0u8; 256];
        let n = kept.read(&mut buf).expect("answer on the kept connection");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(ask("PING"), "+PONG\r\n");
    let mut early = 0;
    for cycle in 0..CYCLES {
        early += hibernate(&sb, 1);
        assert_eq!(
            ask(&format!("ECHO kept{cycle}")),
            format!("${}\r\nkept{cycle}\r\n", 4 + cycle.to_string().len()),
            "cycle {cycle}: the kept connection"
        );
        early += hibernate(&sb, 1);
        assert_eq!(redis_cli(port, &["get", "big"]), value, "cycle {cycle}");
        assert_eq!(
            redis_cli(port, &["incr", "counter"]),
            (cycle + 1).to_string()
        );
        let bench = client(
            "redis-benchmark",
            Command::new("redis-benchmark").args([
                "-p",
                &port.to_string(),
                "-q",
                "-n",
                "2000",
                "-c",
                "8",
                "-t",
                "set,get,lpush",
            ]),
        );
        for op in ["SET", "GET", "LPUSH"] {
            assert!(
                bench.contains(&format!("{op}: ")) && bench.contains("requests per second"),
                "cycle {cycle}: {op} missing: {bench}"
            );
        }
    }
    assert_eq!(redis_cli(port, &["get", "counter"]), CYCLES.to_string());
    assert_eq!(sb.stat_u64("wakes"), 2 * CYCLES as u64 + early);
}

/// A libmemcached tool against the server on `port`; its output without the newline
/// `memccat` ends a value with.
fn memc(tool: &str, port: u16, args: &[&str]) -> String {
    let out = client(
        tool,
        Command::new(tool)
            .arg(format!("--servers=127.0.0.1:{port}"))
            .args(args),
    );
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

#[test]
fn memcached_with_its_default_options_serves_across_hibernations() {
    let Some(root) = prerequisites(&["memccp", "memccat"]) else {
        return;
    };
    let port = testutil::free_port();
    let publish = format!("{port}:11211");
    // No option but the user: memcached binds [::]:11211 (IPV6_V6ONLY) and 0.0.0.0:11211.
    let sb = Detached::start(
        &bin(),
        &["-p", &publish, "--user", "memcache"],
        &root,
        "memcached",
        &[],
    );
    let dir = TempDir::new("memcached-client");
    let file = dir.path().join("greeting");
    let value: String = (0..2000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    std::fs::write(&file, &value).expect("write the value file");
    wait_for("memcached", &sb, || {
        Command::new("memccp")
            .arg(format!("--servers=127.0.0.1:{port}"))
            .arg(&file)
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert_eq!(memc("memccat", port, &["greeting"]), value);
    let mut early = 0;
    for cycle in 0..CYCLES {
        early += hibernate(&sb, 1);
        assert_eq!(
            memc("memccat", port, &["greeting"]),
            value,
            "cycle {cycle}: the value stored before the hibernates"
        );
        let f = dir.path().join(format!("k{cycle}"));
        std::fs::write(&f, format!("v{cycle}")).expect("write");
        memc("memccp", port, &[f.to_str().expect("utf-8 path")]);
    }
    for cycle in 0..CYCLES {
        assert_eq!(
            memc("memccat", port, &[&format!("k{cycle}")]),
            format!("v{cycle}")
        );
    }
    assert_eq!(sb.stat_u64("wakes"), CYCLES as u64 + early);
}
