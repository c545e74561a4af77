//! Shared file pages: clean pages of private file mappings (program text, libraries) are
//! the host's page cache, shared between processes and sandboxes, and copied on write.
//!
//! - `tests/guest/file_cow.c` (a private mapping written, fork, MADV_DONTNEED, read(2) into
//!   a mapping, RELRO-style mprotect, mremap, a write to the file by write(2) and through a
//!   MAP_SHARED mapping, truncation) prints the same bytes in torpor as natively, and the
//!   root's file is never written;
//! - the Python HTTP server: its holder maps the python binary from the root (Debian links
//!   libpython into it), shared with a second sandbox of the same root; it answers hot and
//!   after page-fault and REAP wakes; with `--no-share-files` the holder maps no file of the
//!   root.
//!
//! Each test needs /dev/kvm (and the Debian `python` root for the second): without them it
//! prints "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use testutil::{Detached, Rootfs, Torpor};

const PAGE: usize = 4096;

#[test]
fn private_file_mappings_copy_on_write_like_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.dir("data");
    let host_file = vec![b'L'; 2 * PAGE];
    std::fs::write(r.host_path("data/host-file"), &host_file).unwrap();
    let prog = r.guest_program("file_cow");
    let nat = testutil::native(&r.host_path("bin/file_cow"), &["data"], r.path(), &[], None);
    assert_eq!(nat.code(), 0, "native run: {nat:?}");
    // The native run wrote its own data file in the root: torpor starts from the same state.
    let got = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .arg("data")
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_same_stdout(&nat, "file_cow");
    assert_eq!(got.code(), 0, "torpor stderr: {}", got.stderr_str());
    let out = got.stdout_str();
    assert!(out.contains("host-file: was L, mapping q, file L"), "{out}");
    assert!(
        out.contains("file written: read-only mapping C -> ZW, written page keeps x"),
        "{out}"
    );
    assert!(
        out.contains("shared store: read-only mapping D -> S"),
        "{out}"
    );
    assert!(out.contains("child wrote: c c c, file A"), "{out}");
    assert!(out.contains("parent keeps: A x Z p"), "{out}");
    assert!(out.ends_with("SIGBUS reading the lost page\n"), "{out}");
    assert_eq!(
        std::fs::read(r.host_path("data/host-file")).unwrap(),
        host_file,
        "the root's file was written"
    );
}

/// The holder's mappings of files whose path contains `name` (page-cache windows), from
/// /proc/PID/maps.
fn files_mapped(pid: u32, name: &str) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains(name))
        .map(str::to_string)
        .collect()
}

/// `field` (`Rss`, `Shared_Clean`…) of the holder's mappings whose line names `name` (KiB),
/// summed, from smaps.
fn smaps_kib(pid: u32, name: &str, field: &str) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut inside = false;
    let mut total = 0;
    for l in smaps.lines() {
        if l.contains('-') && l.split_whitespace().count() >= 5 && !l.ends_with("kB") {
            inside = l.contains(name);
        } else if inside {
            if let Some(v) = l.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
                total += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// The holder's pid and those of the platform's processes (`torpor stats`: the trap
/// platform's stubs).
fn sandbox_pids(sb: &Detached) -> Vec<u32> {
    let stats: serde_json::Value =
        serde_json::from_str(&sb.ok("stats", &[])).expect("stats are JSON");
    let mut pids = vec![sb.pid()];
    if let Some(a) = stats.get("platform_pids").and_then(|v| v.as_array()) {
        pids.extend(a.iter().filter_map(|p| p.as_u64()).map(|p| p as u32));
    }
    pids
}

fn get(addr: SocketAddr, what: &str) -> String {
    testutil::http_get(addr, "/", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .body_str()
}

fn start_python(first: Option<&Detached>, root: &Path, extra: &[&str]) -> (Detached, SocketAddr) {
    let port = testutil::free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let mut opts = vec!["--memory", "512M", "-p", publish.as_str()];
    opts.extend_from_slice(extra);
    let args = ["-m", "http.server", "8080", "-d", "/usr/share"];
    let sb = match first {
        None => Detached::start(
            Path::new(env!("CARGO_BIN_EXE_torpor")),
            &opts,
            root,
            "/usr/bin/python3",
            &args,
        ),
        Some(f) => f.start_beside(&opts, root, "/usr/bin/python3", &args),
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(
        Detached::wait_until(Duration::from_secs(60), || testutil::http_get(
            addr,
            "/",
            Duration::from_secs(5)
        )
        .is_ok()),
        "python did not answer"
    );
    (sb, addr)
}

fn hibernate(sb: &Detached, what: &str) {
    for _ in 0..20 {
        sb.ok("hibernate", &[]);
        if sb.stat("state") == "hibernated" {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: does not stay hibernated");
}

#[test]
fn python_server_shares_its_binary_hot_and_after_wakes() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("python") else {
        return;
    };
    let (a, addr_a) = start_python(None, &root, &["--wake-mode", "fault"]);
    let (b, addr_b) = start_python(Some(&a), &root, &["--wake-mode", "reap"]);
    for (sb, addr, name) in [(&a, addr_a, "fault"), (&b, addr_b, "reap")] {
        assert!(get(addr, name).contains("Directory listing"));
        let libs = files_mapped(sb.pid(), "/usr/bin/python3");
        assert!(
            !libs.is_empty(),
            "{name}: the holder maps no window of the python binary:\n{}",
            std::fs::read_to_string(format!("/proc/{}/maps", sb.pid())).unwrap_or_default()
        );
        assert!(
            libs.iter()
                .all(|l| l.split_whitespace().nth(1) == Some("r--s")),
            "{name}: page-cache windows are read-only shared mappings: {libs:?}"
        );
    }
    // The two sandboxes share the python binary's page-cache pages (mapped by the holders; on
    // the trap platform by the stub processes, which run the code).
    let shared: u64 = sandbox_pids(&a)
        .into_iter()
        .map(|p| smaps_kib(p, "/usr/bin/python3", "Shared_Clean"))
        .sum();
    assert!(
        shared > 256,
        "python pages shared between the two sandboxes: {shared} KiB"
    );
    for cycle in 0..3 {
        for (sb, addr, name) in [(&a, addr_a, "fault"), (&b, addr_b, "reap")] {
            let hot = sb.stat_u64("pss_bytes");
            hibernate(sb, name);
            let cold = sb.stat_u64("pss_bytes");
            // The page-cache pages are dropped from the holder, not swapped.
            let resident = smaps_kib(sb.pid(), "/usr/bin/python3", "Rss");
            assert_eq!(resident, 0, "{name} cycle {cycle}: python pages resident");
            assert!(
                cold < hot * 3 / 4,
                "{name} cycle {cycle}: PSS {hot} hot, {cold} hibernated"
            );
            for i in 0..3 {
                let body = get(addr, &format!("{name} cycle {cycle} request {i}"));
                assert!(body.contains("Directory listing"), "{name}: {body:?}");
            }
        }
    }
    // Sharing off: the same server copies its pages; the holder maps no file of the root.
    let (c, addr_c) = start_python(Some(&a), &root, &["--no-share-files"]);
    assert!(get(addr_c, "no-share").contains("Directory listing"));
    assert!(
        files_mapped(c.pid(), "/usr/bin/python3").is_empty(),
        "--no-share-files still maps the python binary"
    );
    for sb in [&a, &b, &c] {
        sb.ok("delete", &["--force"]);
    }
}
