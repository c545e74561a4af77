//! Hibernate mode end to end: a real static server in a detached sandbox, deflated to its swap
//! file and woken by requests (page-fault swap-in), over many cycles; memory and CPU while
//! hibernated; concurrent wakes; disk full; a corrupted swap file; the verbs.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use testutil::{free_port, http_get, Detached, Rootfs, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");
const WORDS_PER_MIB: u64 = (1 << 20) / 8;

struct App {
    sb: Detached,
    addr: SocketAddr,
    mib: u64,
    _root: Rootfs,
}

/// Starts pattern_server with `mib` MiB under torpor and waits until it answers.
fn start(mib: u64, memory: &str) -> App {
    start_with(mib, memory, &[])
}

fn start_with(mib: u64, memory: &str, extra: &[&str]) -> App {
    let root = Rootfs::new();
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let mut opts = vec!["--memory", memory, "--publish", &publish];
    opts.extend_from_slice(extra);
    let sb = Detached::start(
        BIN.as_ref(),
        &opts,
        root.path(),
        &prog,
        &["8080", &mib.to_string()],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = Detached::wait_until(Duration::from_secs(120), || {
        http_get(addr, "/", Duration::from_secs(5))
            .map(|r| r.body_str() == "hello\n")
            .unwrap_or(false)
    });
    assert!(up, "pattern_server did not come up");
    App {
        sb,
        addr,
        mib,
        _root: root,
    }
}

impl App {
    fn verify(&self) -> String {
        http_get(self.addr, "/verify", Duration::from_secs(120))
            .map(|r| r.body_str())
            .unwrap_or_else(|e| format!("error: {e}"))
    }
    fn expect_ok(&self) {
        assert_eq!(self.verify(), format!("ok {}\n", self.mib * WORDS_PER_MIB));
    }
    fn state(&self) -> String {
        self.sb.stat("state")
    }
}

#[test]
fn pattern_survives_50_hibernate_wake_cycles() {
    fifty_cycles("fault");
}

#[test]
fn pattern_survives_50_reap_cycles() {
    fifty_cycles("reap");
}

fn fifty_cycles(mode: &str) {
    if !testutil::require_kvm() {
        return;
    }
    let app = start_with(256, "512M", &["--wake-mode", mode]);
    app.expect_ok();
    let hot_pss = app.sb.stat_u64("pss_bytes");
    for cycle in 0..50 {
        app.sb.ok("hibernate", &[]);
        assert_eq!(app.state(), "hibernated", "cycle {cycle}");
        if cycle == 0 {
            // Hibernated PSS at most 10 % of hot.
            let pss = app.sb.stat_u64("pss_bytes");
            eprintln!(
                "hot PSS {hot_pss} B, hibernated PSS {pss} B ({:.1} %)",
                100.0 * pss as f64 / hot_pss as f64
            );
            assert!(
                hot_pss > 256 << 20,
                "hot PSS {hot_pss} holds the 256 MiB pattern"
            );
            assert!(
                pss * 10 <= hot_pss,
                "hibernated PSS {pss} > 10 % of hot {hot_pss}"
            );
            // No CPU while hibernated.
            let cpu0 = app.sb.stat_u64("cpu_time_us");
            std::thread::sleep(Duration::from_secs(10));
            let cpu1 = app.sb.stat_u64("cpu_time_us");
            // `stats` itself runs on a control thread: allow its own few milliseconds.
            assert!(
                cpu1 - cpu0 <= 20_000,
                "CPU time grew by {} µs while hibernated",
                cpu1 - cpu0
            );
            assert_eq!(app.state(), "hibernated");
        }
        app.expect_ok();
        // Back in accept() shortly after answering: idle after a hibernate is "woken".
        assert!(
            Detached::wait_until(Duration::from_secs(10), || app.state() == "woken"),
            "cycle {cycle}: {}",
            app.state()
        );
        let prefetched = app.sb.stat_u64("prefetched_bytes");
        if mode == "reap" && cycle >= 1 {
            // The first wake recorded /verify's working set (every page); later wakes
            // prefetch it, and few pages fault outside it.
            assert!(
                prefetched >= 256 << 20,
                "cycle {cycle}: prefetched only {prefetched} B"
            );
            let residual = app.sb.stat_u64("residual_faults");
            assert!(residual < 64, "cycle {cycle}: {residual} residual faults");
            // And the program's text the set touched, read ahead from the file (its code
            // is the page cache's, not in the REAP file).
            let files = app.sb.stat_u64("prefetched_file_bytes");
            assert!(files >= 4096, "cycle {cycle}: no file page read ahead");
        }
        if mode == "fault" {
            assert_eq!(prefetched, 0);
        }
    }
    assert_eq!(app.sb.stat_u64("deflates"), 50);
    assert_eq!(app.sb.stat_u64("wakes"), 50);
}

#[test]
fn concurrent_requests_wake_it_once() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start(16, "128M");
    app.sb.ok("hibernate", &[]);
    let addr = app.addr;
    let want = format!("ok {}\n", 16 * WORDS_PER_MIB);
    let threads: Vec<_> = (0..32)
        .map(|_| {
            std::thread::spawn(move || {
                http_get(addr, "/verify", Duration::from_secs(120)).map(|r| r.body_str())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap().expect("request answered"), want);
    }
    assert_eq!(app.sb.stat_u64("wakes"), 1, "one inflation for 32 requests");
    assert_eq!(app.sb.stat_u64("deflates"), 1);
}

#[test]
fn sigstop_hibernates_and_sigcont_wakes() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start(8, "64M");
    app.sb.ok("kill", &["SIGSTOP"]);
    assert_eq!(app.state(), "hibernated");
    app.sb.ok("kill", &["SIGCONT"]);
    assert!(Detached::wait_until(Duration::from_secs(10), || app
        .state()
        == "woken"));
    app.expect_ok();
    // Hibernate again from woken, and wake by request.
    app.sb.ok("hibernate", &[]);
    app.expect_ok();
    assert_eq!(app.sb.stat_u64("wakes"), 2);
}

#[test]
fn illegal_requests_are_clear_errors() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start(4, "64M");
    let o = app.sb.verb("wake", &[]);
    assert_eq!(o.code(), 125);
    assert!(
        o.stderr_str().contains("cannot wake a sandbox that is"),
        "{}",
        o.stderr_str()
    );
    app.sb.ok("hibernate", &[]);
    let o = app.sb.verb("hibernate", &[]);
    assert_eq!(o.code(), 125);
    assert!(
        o.stderr_str()
            .contains("cannot hibernate a sandbox that is hibernated"),
        "{}",
        o.stderr_str()
    );
    let o = app.sb.verb("delete", &[]);
    assert_eq!(
        o.code(),
        125,
        "delete without --force refuses a live sandbox"
    );
    let o = app.sb.verb("kill", &["SIGBOGUS"]);
    assert_eq!(o.code(), 125);
    app.expect_ok();
}

#[test]
fn delete_of_a_hibernated_sandbox_removes_everything() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start(16, "64M");
    app.sb.ok("hibernate", &[]);
    let dir = app.sb.dir();
    let pid = app.sb.pid();
    assert!(std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("swap")));
    if !testutil::platform_is_trap() {
        // A hibernated detached sandbox is one process: its janitor left (the trap
        // platform's stubs are the holder's children).
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        assert!(
            children.trim().is_empty(),
            "the holder has children: {children}"
        );
    }
    // Woken and hibernated again without a janitor, it is still deleted in full.
    app.expect_ok();
    app.sb.ok("hibernate", &[]);
    app.sb.ok("delete", &["--force"]);
    assert!(!dir.exists(), "{} still exists", dir.display());
    assert!(
        Detached::process_ended(pid),
        "the sandbox process {pid} survived delete"
    );
    assert!(
        TcpStream::connect_timeout(&app.addr, Duration::from_secs(2)).is_err(),
        "the port still listens"
    );
    assert_eq!(app.sb.verb("state", &[]).code(), 125);
}

#[test]
fn corrupted_swap_file_stops_the_sandbox_loudly() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start(16, "64M");
    app.sb.ok("hibernate", &[]);
    let dir = app.sb.dir();
    let pid = app.sb.pid();
    let swap = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("swap"))
        .expect("a swap file");
    // Flip a byte in every data slot (header 4 KiB; index 16 B/slot and a 32 B trailer at the end).
    let mut bytes = std::fs::read(&swap).unwrap();
    let slots = (bytes.len() - 4096 - 32) / (4096 + 16);
    assert!(
        slots > 4000,
        "the 16 MiB pattern was swapped out ({slots} slots)"
    );
    for k in 0..slots {
        bytes[4096 + k * 4096 + 123] ^= 0x5a;
    }
    std::fs::write(&swap, &bytes).unwrap();
    // The application must never see wrong bytes: no "ok", no "bad" — the sandbox stops.
    let r = app.verify();
    assert!(
        !r.starts_with("ok") && !r.starts_with("bad"),
        "the application answered {r:?}"
    );
    let gone = Detached::wait_until(Duration::from_secs(20), || {
        // SAFETY: probing a pid with signal 0.
        let r = unsafe { libc::kill(pid as i32, 0) };
        r != 0
    });
    assert!(gone, "the sandbox process kept running on corrupt data");
    let o = app.sb.verb("state", &[]);
    assert_eq!(o.code(), 125);
    assert!(
        o.stderr_str().contains("corrupt"),
        "state says: {}",
        o.stderr_str()
    );
}

#[test]
fn disk_full_during_deflate_keeps_the_sandbox_hot() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let state = TempDir::new("torpor-small");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs"])
        .arg(state.path())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(mounted, "mount -t tmpfs failed");
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _umount = Umount(state.path().to_path_buf());
    let root = Rootfs::new();
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let sb = Detached::start_in(
        BIN.as_ref(),
        state,
        &["--memory", "64M", "--publish", &publish],
        root.path(),
        &prog,
        &["8080", "32"],
    )
    .unwrap_or_else(|o| panic!("start: {}", o.stderr_str()));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(Detached::wait_until(Duration::from_secs(60), || http_get(
        addr,
        "/",
        Duration::from_secs(5)
    )
    .is_ok()));
    let before = sb.stat("state");
    let o = sb.verb("hibernate", &[]);
    assert_eq!(o.code(), 125, "hibernate must fail on a full disk");
    assert!(
        o.stderr_str().to_lowercase().contains("disk full") || o.stderr_str().contains("No space"),
        "{}",
        o.stderr_str()
    );
    assert_eq!(sb.stat("state"), before, "the sandbox stays as it was");
    let r = http_get(addr, "/verify", Duration::from_secs(60))
        .unwrap()
        .body_str();
    assert_eq!(r, format!("ok {}\n", 32 * WORDS_PER_MIB));
    // No half-written swap file is left behind.
    assert!(!std::fs::read_dir(sb.dir()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("swap")));
    sb.ok("delete", &["--force"]);
}

#[test]
fn program_file_changed_while_hibernated_stops_the_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    // Pages copied from the program file (`--no-share-files`): dropped by the deflate and
    // read back from the file, so a changed file is caught. Shared from the page cache (the
    // default), they are the file itself, as a mapped file is on Linux: there is nothing
    // dropped to check against.
    let app = start_with(4, "64M", &["--no-share-files"]);
    let report = app.sb.ok("hibernate", &[]);
    assert!(
        report_u64(&report, "file_pages") > 0,
        "clean program pages were dropped: {report}"
    );
    let pid = app.sb.pid();
    // Rewrite the program file in place (same inode): its dropped pages no longer match.
    let path = app._root.host_path("bin/pattern_server");
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().skip(0x1000) {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();
    let r = app.verify();
    assert!(
        !r.starts_with("ok") && !r.starts_with("bad") && !r.starts_with("hello"),
        "the application answered {r:?}"
    );
    let gone = Detached::wait_until(Duration::from_secs(20), || {
        // SAFETY: probing a pid with signal 0.
        let r = unsafe { libc::kill(pid as i32, 0) };
        r != 0
    });
    assert!(gone, "the sandbox kept running on changed program bytes");
    let o = app.sb.verb("state", &[]);
    assert!(
        o.stderr_str().contains("changed on the host"),
        "state says: {}",
        o.stderr_str()
    );
}

/// A burst of 500 concurrent connections at a hibernated sandbox whose server asked for a
/// backlog of 128: every one is answered (the host socket holds them all while the sandbox
/// wakes), none dropped and retried by the client's SYN timer.
#[test]
fn a_burst_at_a_hibernated_sandbox_is_answered_in_full() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let (sb, addr) = http_server_sandbox(&r);
    sb.ok("hibernate", &[]);
    let overflows_before = listen_overflows();
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..500)
        .map(|_| {
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let ok = testutil::http_get(addr, "/", Duration::from_secs(60)).is_ok();
                (ok, t0.elapsed())
            })
        })
        .collect();
    let results: Vec<(bool, Duration)> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .collect();
    let answered = results.iter().filter(|(ok, _)| *ok).count();
    let slowest = results.iter().map(|(_, d)| *d).max().unwrap_or_default();
    println!(
        "burst of 500: {answered} answered, slowest {slowest:?}, all within {:?}",
        started.elapsed()
    );
    assert_eq!(answered, 500, "every connection answered");
    // No connection was dropped at the door (the host's TcpExtListenOverflows counter).
    assert_eq!(listen_overflows() - overflows_before, 0, "listen overflows");
}

/// `tests/guest/http_server.c` in a detached sandbox of `r`, published on a free port, once it
/// answers; and its address.
fn http_server_sandbox(r: &Rootfs) -> (Detached, SocketAddr) {
    http_server_sandbox_with(r, &[], None)
}

/// [`http_server_sandbox`] with more `torpor run` options, in the state directory of `beside`
/// if given.
fn http_server_sandbox_with(
    r: &Rootfs,
    extra: &[&str],
    beside: Option<&Detached>,
) -> (Detached, SocketAddr) {
    Detached::http_server(BIN.as_ref(), r, extra, beside)
}

/// The host's `TcpExt: ListenOverflows` counter (`/proc/net/netstat`).
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "ListenOverflows")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// A hibernate asked for while a request is being served waits for its answer (which would
/// otherwise freeze with nothing left to wake the sandbox), then hibernates; the next request
/// wakes it as usual.
#[test]
fn a_hibernate_waits_for_the_request_in_flight() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let (sb, addr) = http_server_sandbox(&r);
    // /slow takes 0.8 s to answer.
    let slow =
        std::thread::spawn(move || testutil::http_get(addr, "/slow", Duration::from_secs(30)));
    assert!(Detached::wait_until(Duration::from_secs(5), || sb
        .stat("state")
        == "running"));
    sb.ok("hibernate", &[]);
    let answer = slow
        .join()
        .expect("client")
        .expect("the in-flight request is answered");
    assert!(
        answer.body_str().contains("path /slow"),
        "{}",
        answer.body_str()
    );
    assert_eq!(sb.stat("state"), "hibernated");
    assert!(testutil::http_get(addr, "/", Duration::from_secs(10)).is_ok());
}

/// With `--wait`, a hibernate gives up on a request that takes longer, with a clear refusal,
/// and the sandbox goes on serving as if nothing was asked: the request is answered and a
/// later hibernate succeeds.
#[test]
fn a_hibernate_refuses_once_its_wait_for_the_request_in_flight_ends() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let (sb, addr) = http_server_sandbox(&r);
    // /slow takes 0.8 s to answer; the hibernate waits 100 ms.
    let slow =
        std::thread::spawn(move || testutil::http_get(addr, "/slow", Duration::from_secs(30)));
    assert!(Detached::wait_until(Duration::from_secs(5), || sb
        .stat("state")
        == "running"));
    let o = sb.verb("hibernate", &["--wait", "100ms"]);
    assert_ne!(o.code(), 0, "refused: {}", o.stdout_str());
    assert!(
        o.stderr_str().contains("not hibernated"),
        "a clear refusal: {}",
        o.stderr_str()
    );
    let answer = slow
        .join()
        .expect("client")
        .expect("the request in flight is answered");
    assert!(answer.body_str().contains("path /slow"));
    assert!(Detached::wait_until(Duration::from_secs(5), || sb
        .stat("state")
        == "hot"));
    sb.ok("hibernate", &[]);
    assert_eq!(sb.stat("state"), "hibernated");
    assert!(testutil::http_get(addr, "/", Duration::from_secs(10)).is_ok());
    // A bad duration is the CLI's error, before the sandbox is asked.
    let o = sb.verb("hibernate", &["--wait", "soon"]);
    assert_ne!(o.code(), 0);
    assert!(
        o.stderr_str().contains("bad duration"),
        "{}",
        o.stderr_str()
    );
}

/// A request that arrives while the sandbox deflates (256 MiB to write) waits in the host's
/// queue and is answered after the deflate, by the wake it triggers, with intact memory.
#[test]
fn a_request_arriving_during_a_deflate_is_answered_after_it() {
    let Some(app) = testutil::require_kvm().then(|| start(256, "512M")) else {
        return;
    };
    let mut overlapped = 0;
    for round in 0..3 {
        let id_dir = app.sb.state_base().to_path_buf();
        let id = app.sb.dir();
        let id = id.file_name().expect("id").to_string_lossy().into_owned();
        let t0 = std::time::Instant::now();
        let deflate = std::thread::spawn(move || {
            let o = std::process::Command::new(BIN)
                .env("TORPOR_STATE_DIR", id_dir)
                .args(["hibernate", &id])
                .output()
                .expect("torpor hibernate");
            (o, t0.elapsed())
        });
        // The deflate is under way once the hibernate has parked the sandbox.
        std::thread::sleep(Duration::from_millis(60));
        let sent = t0.elapsed();
        let answer = app.verify();
        let (o, deflated) = deflate.join().expect("hibernate thread");
        assert!(
            o.status.success(),
            "round {round}: hibernate: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            answer,
            format!("ok {}\n", app.mib * WORDS_PER_MIB),
            "round {round}"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&o.stdout).expect("hibernate prints its report");
        let took = report["took_us"].as_u64().unwrap_or(0);
        // Answered by a wake after the deflate (not served before it: then the sandbox
        // would still be hibernated now).
        let state = app.state();
        println!(
            "round {round}: request sent at {sent:?}, hibernate returned at {deflated:?} \
             (deflate {took} us), now {state}"
        );
        if state != "hibernated" {
            overlapped += 1;
        }
        app.expect_ok();
    }
    assert!(overlapped > 0, "no request arrived during a deflate");
    assert!(app.sb.stat_u64("wakes") >= 3);
}

/// `--hibernate-after`: an idle sandbox hibernates by itself, the next request wakes it, and
/// once idle again it hibernates again; one kept busy by requests does not.
#[test]
fn an_idle_sandbox_hibernates_by_itself_and_a_busy_one_does_not() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let prog = r.guest_program("http_server");
    let (sb, addr) = http_server_sandbox_with(&r, &["--hibernate-after", "1s"], None);
    // Busy: a request every 200 ms for 3 s keeps it awake.
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        assert!(http_get(addr, "/", Duration::from_secs(10)).is_ok());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_ne!(sb.stat("state"), "hibernated", "hibernated while busy");
    assert_eq!(sb.stat_u64("wakes"), 0);
    // Idle: hibernated within a few seconds.
    assert!(
        Detached::wait_until(Duration::from_secs(15), || sb.stat("state") == "hibernated"),
        "not hibernated after 15 s idle: {}",
        sb.stat("state")
    );
    for round in 1..=2u64 {
        let answer = http_get(addr, "/", Duration::from_secs(10)).expect("woken by a request");
        assert!(answer.body_str().contains("hello from http_server"));
        assert_eq!(sb.stat_u64("wakes"), round);
        assert!(
            Detached::wait_until(Duration::from_secs(15), || sb.stat("state") == "hibernated"),
            "round {round}: not hibernated again"
        );
    }
    // A bad duration is refused before anything starts.
    let o = testutil::run_command(
        {
            let mut c = std::process::Command::new(BIN);
            c.args(["run", "--hibernate-after", "5ms"])
                .arg(r.path())
                .args(["--", &prog]);
            c
        },
        None,
        Duration::from_secs(30),
    );
    assert_ne!(o.code(), 0);
    assert!(o.stderr_str().contains("too short"), "{}", o.stderr_str());
}

/// A keep-alive client that sent a request before a hibernate gets its next answers on the
/// same connection after it: its bytes wake the sandbox, twice over.
#[test]
fn a_keep_alive_connection_outlives_hibernates() {
    use std::io::Write;
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let (sb, addr) = http_server_sandbox(&r);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    for i in 0..3 {
        write!(s, "GET /keep/{i} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let resp = testutil::read_response(&mut s).expect("keep-alive response");
        assert!(
            resp.body_str().contains(&format!("path /keep/{i}")),
            "{resp:?}"
        );
        assert_eq!(resp.header("connection"), Some("keep-alive"));
        sb.ok("hibernate", &[]);
        assert_eq!(sb.stat("state"), "hibernated", "round {i}");
    }
    write!(s, "GET /keep/last HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let resp = testutil::read_response(&mut s).expect("an answer after the last hibernate");
    assert!(resp.body_str().contains("path /keep/last"), "{resp:?}");
    assert_eq!(sb.stat_u64("wakes"), 3);
}

/// `torpor list` shows each sandbox's state, idle time, memory and wakes; `torpor stats
/// --prometheus` the same figures in the Prometheus text format.
#[test]
fn list_and_prometheus_show_a_hibernated_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let (sb, addr) = http_server_sandbox(&r);
    sb.ok("hibernate", &[]);
    assert!(http_get(addr, "/", Duration::from_secs(10)).is_ok());
    sb.ok("hibernate", &[]);
    let torpor = |args: &[&str]| {
        let mut c = std::process::Command::new(BIN);
        c.env("TORPOR_STATE_DIR", sb.state_base()).args(args);
        testutil::run_command(c, None, Duration::from_secs(60))
    };
    let id = sb
        .dir()
        .file_name()
        .expect("id")
        .to_string_lossy()
        .into_owned();
    let list = torpor(&["list"]);
    assert_eq!(list.code(), 0, "{}", list.stderr_str());
    let text = list.stdout_str();
    let line = text
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} listed: {text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[1], "hibernated", "{text}");
    assert_eq!(cols.last().copied(), Some("1"), "one wake: {text}");
    let prom = torpor(&["stats", "--prometheus"]);
    assert_eq!(prom.code(), 0, "{}", prom.stderr_str());
    let p = prom.stdout_str();
    assert!(
        p.contains(&format!(
            "torpor_state{{id=\"{id}\",state=\"hibernated\"}} 1"
        )),
        "{p}"
    );
    assert!(
        p.contains(&format!("torpor_wakes_total{{id=\"{id}\"}} 1\n")),
        "{p}"
    );
    assert!(p.contains("# TYPE torpor_pss_bytes gauge"), "{p}");
    let no_id = torpor(&["stats"]);
    assert_ne!(no_id.code(), 0);
    assert!(
        no_id.stderr_str().contains("--prometheus"),
        "{}",
        no_id.stderr_str()
    );
}

/// Memory pressure (`--memory-floor` above what the host has available): idle sandboxes
/// hibernate early, longest idle first, through the registry they share, and one kept busy
/// does not.
#[test]
fn under_memory_pressure_idle_sandboxes_hibernate_longest_idle_first() {
    if !testutil::require_kvm() {
        return;
    }
    let r = testutil::Rootfs::new();
    let floor = ["--memory-floor", "100000G"];
    let mut sandboxes: Vec<(Detached, SocketAddr)> = Vec::new();
    for _ in 0..4 {
        let beside = sandboxes.first().map(|(sb, _)| sb);
        let started = http_server_sandbox_with(&r, &floor, beside);
        sandboxes.push(started);
    }
    // Every sandbox is kept busy, then left idle in the order 2, 0, 1, 600 ms apart; 3 stays
    // busy throughout.
    let t0 = std::time::Instant::now();
    let quiet_at = [600u64, 1200, 0, u64::MAX];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pingers: Vec<_> = sandboxes
        .iter()
        .zip(quiet_at)
        .map(|((_, addr), quiet)| {
            let (addr, stop) = (*addr, stop.clone());
            std::thread::spawn(move || {
                let mut failures = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst)
                    && t0.elapsed() < Duration::from_millis(quiet)
                {
                    if http_get(addr, "/", Duration::from_secs(10)).is_err() {
                        failures += 1;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                failures
            })
        })
        .collect();
    let hibernated = |i: usize| sandboxes[i].0.stat("state") == "hibernated";
    let all_three = Detached::wait_until(Duration::from_secs(30), || {
        hibernated(0) && hibernated(1) && hibernated(2)
    });
    let busy_state = sandboxes[3].0.stat("state");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for p in pingers {
        assert_eq!(p.join().expect("pinger"), 0, "every request answered");
    }
    assert!(all_three, "the idle sandboxes hibernated under pressure");
    assert_ne!(busy_state, "hibernated", "the busy sandbox stayed awake");
    let since = |i: usize| sandboxes[i].0.stat_u64("state_since_unix_us");
    let (s2, s0, s1) = (since(2), since(0), since(1));
    assert!(
        s2 < s0 && s0 < s1,
        "longest idle first: hibernated at {s2} (2), {s0} (0), {s1} (1)"
    );
    for (sb, addr) in &sandboxes[..3] {
        assert!(http_get(*addr, "/", Duration::from_secs(10)).is_ok());
        assert!(sb.stat_u64("wakes") >= 1);
    }
}

/// A field of a `torpor hibernate` report, as a number.
fn report_u64(report: &str, field: &str) -> u64 {
    testutil::json_field(&report.split_whitespace().collect::<String>(), field)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {field} in {report}"))
}

/// A later deflate writes only what changed since the last: pages still swapped out keep their
/// slots (a new swap layer holds the rest), pages read back but not written keep theirs too
/// (write-protected by userfaultfd), dirtied pages are written again, and after enough layers
/// the swap is compacted into one; the pattern, with every rewrite, survives throughout.
#[test]
fn later_deflates_write_only_what_changed() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start_with(64, "256M", &["--wake-mode", "fault"]);
    app.expect_ok();
    let pages = 64 * 256;
    let first = app.sb.ok("hibernate", &[]);
    let w1 = report_u64(&first, "written_pages");
    assert!(w1 >= pages, "the first deflate wrote {w1} pages: {first}");

    // A request that dirties 1 % of the pattern, spread over it.
    let r = http_get(app.addr, "/dirty/100", Duration::from_secs(60)).unwrap();
    assert_eq!(r.body_str(), format!("dirtied {}\n", pages.div_ceil(100)));
    let second = app.sb.ok("hibernate", &[]);
    let w2 = report_u64(&second, "written_pages");
    eprintln!("first deflate wrote {w1} pages, the second {w2}: {second}");
    // Written: the dirtied pages and the neighbours their faults brought in (without write
    // tracking every resident page is written again: on the trap platform, whose stubs write
    // through mappings of their own, the brought-in neighbours are written too).
    let tracking = !testutil::platform_is_trap();
    let bound = if tracking { w1 / 4 } else { w1 / 2 };
    assert!(
        w2 < bound,
        "the second deflate wrote {w2} pages of {w1}: {second}"
    );
    // Kept without writing: pages never touched since (carried), and, with write tracking,
    // neighbours the page faults brought along but the request did not write (clean).
    let kept = report_u64(&second, "carried_pages") + report_u64(&second, "clean_pages");
    let want = if tracking { pages * 3 / 4 } else { pages / 2 };
    assert!(kept >= want, "{second}");
    assert_eq!(report_u64(&second, "swap_layers"), 2, "{second}");

    // Every page read back (/verify), none written: with write tracking nothing to write
    // again, without it (TORPOR_UFFD_WP=0) everything is.
    app.expect_ok();
    let third = app.sb.ok("hibernate", &[]);
    let w3 = report_u64(&third, "written_pages");
    let clean = report_u64(&third, "clean_pages");
    assert!(
        w3 + clean >= pages * 9 / 10,
        "after a read of everything: {third}"
    );
    app.expect_ok();

    // Rewrites of ever other pages on every wake: dead slots pile up in the older layers
    // until a compaction folds the live ones into one layer.
    let mut compacted = false;
    for (round, stride) in [2, 3, 5, 7, 11, 13, 17, 19].into_iter().enumerate() {
        let r = http_get(
            app.addr,
            &format!("/dirty/{stride}"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(r.body_str().starts_with("dirtied"), "{}", r.body_str());
        let report = app.sb.ok("hibernate", &[]);
        let layers = report_u64(&report, "swap_layers");
        assert!(layers <= 8, "round {round}: {report}");
        compacted |=
            report.contains("\"compacted\": true") || report.contains("\"compacted\":true");
        app.expect_ok();
    }
    // (Without write tracking every page read back is written again, so no old layer keeps
    // live slots for long: nothing to compact.)
    assert!(
        compacted || !tracking,
        "eight rounds of rewrites never compacted the swap"
    );
    let files = std::fs::read_dir(app.sb.dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("swap"))
        })
        .count();
    assert!((1..=8).contains(&files), "{files} swap files");
}

/// A wake that records a new working set instead of prefetching the old one leaves the old
/// set's untouched pages in the old REAP file; the next deflate, which rewrites the REAP file
/// with the new set, must move those pages to the swap (they once kept their REAP slots and
/// then read another page's bytes from the new file: Redis crashed in jemalloc).
#[test]
fn pages_of_a_replaced_working_set_survive() {
    if !testutil::require_kvm() {
        return;
    }
    let app = start_with(64, "256M", &["--wake-mode", "auto"]);
    app.expect_ok();
    let get = |path: &str| {
        http_get(app.addr, path, Duration::from_secs(60))
            .map(|r| r.body_str())
            .unwrap_or_else(|e| format!("error: {e}"))
    };
    // 1. Deflate; a wake that records 8 MiB as the working set; deflate into a REAP file.
    app.sb.ok("hibernate", &[]);
    assert!(get("/touch/8").starts_with("touched 8"));
    app.sb.ok("hibernate", &[]);
    // 2. A prefetching wake, then every page read: far more faults than the set explains,
    //    so the next wake records afresh.
    assert_eq!(get("/"), "hello\n");
    app.expect_ok();
    app.sb.ok("hibernate", &[]);
    // 3. The recording wake touches little: the old set's pages stay in the old REAP file.
    assert_eq!(get("/"), "hello\n");
    let report = app.sb.ok("hibernate", &[]);
    // 4. Everything reads back as it was.
    app.expect_ok();
    assert!(
        report_u64(&report, "carried_pages") > 0,
        "the old set's pages moved to the swap: {report}"
    );
}

/// A deflate walks the page tables (for clean pages of read-only file mappings) before it
/// reads which pages are resident, so that page tables the walk brings back from the swap
/// count as resident: a residency read taken before the walk took such a page table, back
/// write-protected and unwritten, for a page the guest had dropped, and the next wake found
/// the entries gone (Node.js died of it after two or three hibernates, its relocated data
/// read again from the file). Here the pattern is a written, read-only private file mapping,
/// whose page tables every deflate walks and a wake that answers `/` does not touch.
#[test]
fn page_tables_brought_back_by_the_deflate_itself_survive() {
    if !testutil::require_kvm() {
        return;
    }
    let root = Rootfs::new();
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let sb = Detached::start(
        BIN.as_ref(),
        &[
            "--memory",
            "256M",
            "--publish",
            &publish,
            "--wake-mode",
            "fault",
        ],
        root.path(),
        &prog,
        &["8080", "16", "0x5eed", "/pattern.bin"],
    );
    let app = App {
        sb,
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        mib: 16,
        _root: root,
    };
    let up = Detached::wait_until(Duration::from_secs(120), || {
        http_get(app.addr, "/", Duration::from_secs(5))
            .map(|r| r.body_str() == "hello\n")
            .unwrap_or(false)
    });
    assert!(up, "pattern_server did not come up");
    app.expect_ok();
    for round in 0..3 {
        app.sb.ok("hibernate", &[]);
        let r = http_get(app.addr, "/", Duration::from_secs(60)).unwrap();
        assert_eq!(r.body_str(), "hello\n", "round {round}");
    }
    app.sb.ok("hibernate", &[]);
    app.expect_ok();
    let r = http_get(app.addr, "/dirty/7", Duration::from_secs(60)).unwrap();
    assert!(r.body_str().starts_with("dirtied"), "{}", r.body_str());
    app.sb.ok("hibernate", &[]);
    app.expect_ok();
}

/// A hibernate asked for while a wake is still inflating waits for the wake's end and is then
/// taken: the park request made as the wake ends is the next park's, not withdrawn with the
/// wake's (it was, and the hibernate failed after its ten seconds with the sandbox blocked
/// in its poll).
#[test]
fn a_hibernate_asked_while_a_wake_ends_is_taken() {
    if !testutil::require_kvm() {
        return;
    }
    // A working set of 128 MiB, which each wake prefetches (tens of milliseconds).
    let app = start_with(128, "512M", &["--wake-mode", "reap"]);
    app.expect_ok();
    let mut taken = 0;
    for round in 0..12 {
        app.sb.ok("hibernate", &[]);
        app.expect_ok();
        app.sb.ok("hibernate", &[]);
        let waking = std::thread::scope(|s| {
            let wake = s.spawn(|| app.sb.verb("wake", &[]));
            std::thread::sleep(Duration::from_millis(2 + round % 8));
            let hib = app.sb.verb("hibernate", &[]);
            (wake.join().expect("wake"), hib)
        });
        let (wake, hib) = waking;
        assert_eq!(wake.code(), 0, "round {round}: wake: {}", wake.stderr_str());
        // Before the wake began, the hibernate finds the sandbox hibernated still: refused.
        // Otherwise it must be taken.
        let err = hib.stderr_str();
        assert!(
            hib.code() == 0 || err.contains("is hibernated"),
            "round {round}: hibernate during the wake: {err}"
        );
        if hib.code() == 0 {
            taken += 1;
            app.sb.ok("wake", &[]);
        }
    }
    eprintln!("{taken} of 12 hibernates taken during a wake");
    app.expect_ok();
}
