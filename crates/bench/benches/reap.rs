//! REAP benchmark: first request after a hibernate, page-fault wake vs REAP wake, with the
//! host page cache dropped before each wake. Prints a table, asserts nothing about speed.
//!
//! Run with `cargo bench -p torpor-bench --bench reap` (as root: dropping the page cache writes
//! /proc/sys/vm/drop_caches). pattern_server holds a 256 MiB heap; its `GET /touch/K` request
//! touches a working set of K MiB (4, 16, 64). For each K, one sandbox wakes by page faults
//! (`--wake-mode fault`) and one by REAP (`--wake-mode reap`: the first wake records, later
//! wakes prefetch); medians over RUNS wakes of each. Also the prefetch throughput beside the
//! disk's sequential read throughput, measured in the same run on a file of the same size in
//! the same directory with a cold cache.

use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testutil::{free_port, http_get, median, Detached, Rootfs};

const RUNS: usize = 5;
const HEAP_MIB: u64 = 256;

fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{min:.1}-{max:.1}")
}

fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        eprintln!("warning: cannot drop the page cache (not root?): wakes read from memory");
    }
}

struct App {
    sb: Detached,
    addr: SocketAddr,
    _root: Rootfs,
}

fn start(mode: &str) -> App {
    let root = Rootfs::new();
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let bin = testutil::built_torpor_bin();
    let sb = Detached::start(
        &bin,
        &[
            "--memory",
            "512M",
            "--publish",
            &publish,
            "--wake-mode",
            mode,
        ],
        root.path(),
        &prog,
        &["8080", &HEAP_MIB.to_string()],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(Detached::wait_until(Duration::from_secs(300), || http_get(
        addr,
        "/",
        Duration::from_secs(5)
    )
    .is_ok()));
    App {
        sb,
        addr,
        _root: root,
    }
}

fn touch_ms(app: &App, mib: u64) -> f64 {
    let t = Instant::now();
    let r =
        http_get(app.addr, &format!("/touch/{mib}"), Duration::from_secs(300)).expect("request");
    assert!(r.body_str().starts_with("touched"), "{}", r.body_str());
    t.elapsed().as_secs_f64() * 1e3
}

/// Hibernates, drops the page cache, and times the first request: (latency ms, faults
/// during the request, prefetched bytes, prefetch µs).
fn cold_wake(app: &App, mib: u64) -> (f64, f64, f64, f64) {
    app.sb.ok("hibernate", &[]);
    drop_caches();
    let f0 = app.sb.stat_u64("faults");
    let ms = touch_ms(app, mib);
    let faults = (app.sb.stat_u64("faults") - f0) as f64;
    (
        ms,
        faults,
        app.sb.stat_u64("prefetched_bytes") as f64,
        app.sb.stat_u64("prefetch_us") as f64,
    )
}

fn disk_seq_read_mbps(dir: &std::path::Path, bytes: usize) -> f64 {
    let p = dir.join("seqread.bin");
    let block = vec![0x5au8; 1 << 20];
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&p).unwrap();
        for _ in 0..bytes.div_ceil(1 << 20) {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
    }
    drop_caches();
    let t = Instant::now();
    let mut f = std::fs::File::open(&p).unwrap();
    let mut buf = vec![0u8; 2 << 20];
    let mut total = 0usize;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    let _ = std::fs::remove_file(&p);
    total as f64 / 1e6 / t.elapsed().as_secs_f64()
}

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    println!(
        "first request after hibernate, {HEAP_MIB} MiB heap, page cache dropped before each wake"
    );
    println!("median of {RUNS} wakes (spread min-max)\n");
    println!(
        "{:>6} | {:>16} {:>8} | {:>16} {:>9} {:>10} | {:>7} | {:>14} {:>12}",
        "set",
        "fault wake ms",
        "faults",
        "REAP wake ms",
        "faults",
        "prefetch",
        "speedup",
        "prefetch MB/s",
        "disk MB/s"
    );
    for mib in [4u64, 16, 64] {
        let fault = start("fault");
        touch_ms(&fault, mib);
        let (mut f_ms, mut f_faults) = (vec![], vec![]);
        for _ in 0..RUNS {
            let (ms, faults, _, _) = cold_wake(&fault, mib);
            f_ms.push(ms);
            f_faults.push(faults);
        }
        drop(fault);
        let reap = start("reap");
        // Record: the first wake after a hibernate records the request's working set.
        reap.sb.ok("hibernate", &[]);
        touch_ms(&reap, mib);
        let (mut r_ms, mut r_res, mut r_bytes, mut r_mbps) = (vec![], vec![], vec![], vec![]);
        for _ in 0..RUNS {
            let (ms, faults, bytes, us) = cold_wake(&reap, mib);
            r_ms.push(ms);
            r_res.push(faults);
            r_bytes.push(bytes / 1e6);
            r_mbps.push(if us > 0.0 { bytes / us } else { 0.0 });
        }
        let disk = disk_seq_read_mbps(reap.sb.state_base(), (median(&r_bytes) * 1e6) as usize);
        println!(
            "{:>4}Mi | {:>7.1} ({:>7}) {:>8.0} | {:>7.1} ({:>7}) {:>9.0} {:>8.1}MB | {:>6.2}x | {:>14.0} {:>12.0}",
            mib,
            median(&f_ms),
            spread(&f_ms),
            median(&f_faults),
            median(&r_ms),
            spread(&r_ms),
            median(&r_res),
            median(&r_bytes),
            median(&f_ms) / median(&r_ms),
            median(&r_mbps),
            disk
        );
    }
}
