//! Hibernate benchmark: prints a table, asserts nothing about speed.
//!
//! Run with `cargo bench -p torpor-bench --bench hibernate`. Wakes are by page faults (`--wake-mode
//! fault`; `benches/reap.rs` compares REAP). For a small application (pattern_server
//! with 4 MiB) and a large one (256 MiB), over RUNS hibernate/wake cycles of one sandbox:
//!
//! - PSS of the holder process hot (after a request), hibernated, and woken (after the first
//!   request, and after a request that touches every page);
//! - deflate time and throughput (bytes written to the swap file / deflate time) of a full
//!   deflate (`hibernate --compact`: every page written afresh);
//! - first-request latency after a wake (a request touching little, `GET /`), beside the
//!   same request on the hot sandbox measured in the same run, and their ratio;
//! - the full-inflation request (`GET /verify`, every page) after a wake, beside hot.
//!
//! Then, for 256 MiB, later deflates against the first (`later_deflates`): in each of RUNS
//! fresh sandboxes, the first deflate, a second one after a request that dirties 1 % of the
//! pattern (`GET /dirty/100`), the same second deflate with `--compact` (what every deflate
//! cost before swap layers and write tracking), and a third after a request that reads every
//! page and dirties 1 % (`GET /verify` then `/dirty/100`: clean pages are recognised).
//!
//! Medians with the spread (min-max). Absolute times on the development machines (software
//! KVM) are far above hardware; ratios are what carry over.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testutil::{free_port, http_get, json_field, median, Detached, Rootfs};

const RUNS: usize = 5;

fn row(name: &str, unit: &str, v: &[f64]) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "  {name:<44} {:>12.2} {unit:<6} ({min:.2} - {max:.2})",
        median(v)
    );
}

fn get_ms(addr: SocketAddr, path: &str) -> f64 {
    let t = Instant::now();
    let r = http_get(addr, path, Duration::from_secs(300)).expect("request");
    assert!(
        !r.body_str().starts_with("bad"),
        "pattern damaged: {}",
        r.body_str()
    );
    t.elapsed().as_secs_f64() * 1e3
}

/// `pattern_server` holding `mib` MiB in a sandbox of `memory` (page-fault wakes), once it
/// answers; and its address.
fn start_pattern(root: &Rootfs, mib: u64, memory: &str) -> (Detached, SocketAddr) {
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let opts = [
        "--memory",
        memory,
        "--publish",
        &publish,
        "--wake-mode",
        "fault",
    ];
    let sb = Detached::start(
        &testutil::built_torpor_bin(),
        &opts,
        root.path(),
        &prog,
        &["8080", &mib.to_string()],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = || http_get(addr, "/", Duration::from_secs(5)).is_ok();
    assert!(Detached::wait_until(Duration::from_secs(300), up));
    (sb, addr)
}

fn bench(mib: u64, memory: &str) {
    let root = Rootfs::new();
    let (sb, addr) = start_pattern(&root, mib, memory);
    let mb = |b: u64| b as f64 / 1e6;
    let (mut hot_pss, mut hib_pss, mut woken_pss, mut full_pss) = (vec![], vec![], vec![], vec![]);
    let (mut deflate_ms, mut deflate_mbps, mut swap_mb) = (vec![], vec![], vec![]);
    let (mut hot_first, mut wake_first, mut hot_full, mut wake_full, mut ratio_first) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut faults_first, mut faults_full) = (vec![], vec![]);
    // Warm up: every page resident once.
    get_ms(addr, "/verify");
    for _ in 0..RUNS {
        get_ms(addr, "/verify");
        let h1 = get_ms(addr, "/");
        hot_first.push(h1);
        hot_full.push(get_ms(addr, "/verify"));
        hot_pss.push(mb(sb.stat_u64("pss_bytes")));
        let (took_ms, written_mb) = hibernate(&sb, &["--compact"]);
        deflate_ms.push(took_ms);
        swap_mb.push(written_mb);
        deflate_mbps.push(if took_ms > 0.0 {
            written_mb * 1e3 / took_ms
        } else {
            0.0
        });
        hib_pss.push(mb(sb.stat_u64("pss_bytes")));
        let f0 = sb.stat_u64("faults");
        let w1 = get_ms(addr, "/");
        wake_first.push(w1);
        ratio_first.push(w1 / h1);
        let f1 = sb.stat_u64("faults");
        faults_first.push((f1 - f0) as f64);
        woken_pss.push(mb(sb.stat_u64("pss_bytes")));
        wake_full.push(get_ms(addr, "/verify"));
        faults_full.push((sb.stat_u64("faults") - f1) as f64);
        full_pss.push(mb(sb.stat_u64("pss_bytes")));
    }
    println!(
        "pattern_server with {mib} MiB (guest memory {memory}), {RUNS} cycles: median (min - max)"
    );
    row("PSS hot", "MB", &hot_pss);
    row("PSS hibernated", "MB", &hib_pss);
    row("PSS woken, after GET /", "MB", &woken_pss);
    row("PSS woken, after GET /verify (all pages)", "MB", &full_pss);
    let r: Vec<f64> = hib_pss
        .iter()
        .zip(&hot_pss)
        .map(|(a, b)| 100.0 * a / b)
        .collect();
    row("hibernated / hot PSS", "%", &r);
    let r: Vec<f64> = woken_pss
        .iter()
        .zip(&hot_pss)
        .map(|(a, b)| 100.0 * a / b)
        .collect();
    row("woken (GET /) / hot PSS", "%", &r);
    row("deflate time (full, --compact)", "ms", &deflate_ms);
    row("swap file written", "MB", &swap_mb);
    row("deflate throughput", "MB/s", &deflate_mbps);
    row("GET / hot", "ms", &hot_first);
    row("GET / first after wake (fault swap-in)", "ms", &wake_first);
    row("  ratio wake / hot", "x", &ratio_first);
    row("  uffd faults served", "", &faults_first);
    row("GET /verify hot", "ms", &hot_full);
    row("GET /verify after wake (all pages back)", "ms", &wake_full);
    row("  uffd faults served", "", &faults_full);
    println!();
}

/// A hibernate with `extra` options: its deflate time (ms) and the swap it wrote (MB).
fn hibernate(sb: &Detached, extra: &[&str]) -> (f64, f64) {
    let report: String = sb.ok("hibernate", extra).split_whitespace().collect();
    let num = |f: &str| {
        json_field(&report, f)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (num("took_us") / 1e3, num("swap_written_bytes") / 1e6)
}

fn later_deflates(mib: u64, memory: &str) {
    let root = Rootfs::new();
    let (mut first, mut second, mut full, mut third) = (vec![], vec![], vec![], vec![]);
    let (mut first_mb, mut second_mb, mut full_mb, mut third_mb) = (vec![], vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let (sb, addr) = start_pattern(&root, mib, memory);
        get_ms(addr, "/verify");
        let (t, mb) = hibernate(&sb, &[]);
        first.push(t);
        first_mb.push(mb);
        get_ms(addr, "/dirty/100");
        let (t, mb) = hibernate(&sb, &[]);
        second.push(t);
        second_mb.push(mb);
        // The same again, written in full.
        get_ms(addr, "/dirty/100");
        let (t, mb) = hibernate(&sb, &["--compact"]);
        full.push(t);
        full_mb.push(mb);
        get_ms(addr, "/verify");
        get_ms(addr, "/dirty/100");
        let (t, mb) = hibernate(&sb, &[]);
        third.push(t);
        third_mb.push(mb);
        get_ms(addr, "/verify");
        sb.ok("delete", &["--force"]);
    }
    println!("later deflates, pattern_server with {mib} MiB, {RUNS} sandboxes: median (min - max)");
    row("first deflate", "ms", &first);
    row("  written", "MB", &first_mb);
    row("second deflate, after dirtying 1 %", "ms", &second);
    row("  written", "MB", &second_mb);
    row("second deflate written in full (--compact)", "ms", &full);
    row("  written", "MB", &full_mb);
    row("deflate after reading all, dirtying 1 %", "ms", &third);
    row("  written", "MB", &third_mb);
    let ratio =
        |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x / y).collect() };
    row("first / second deflate", "x", &ratio(&first, &second));
    row("full / second deflate", "x", &ratio(&full, &second));
    row("first / after reading all", "x", &ratio(&first, &third));
    println!();
}

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    later_deflates(256, "512M");
    bench(4, "64M");
    bench(256, "512M");
}
