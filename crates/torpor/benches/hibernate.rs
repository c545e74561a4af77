//! Hibernate benchmark: prints a table, asserts nothing about speed.
//!
//! Run with `cargo bench -p torpor --bench hibernate`. Wakes are by page faults (`--wake-mode
//! fault`; `benches/reap.rs` compares REAP). For a small application (pattern_server
//! with 4 MiB) and a large one (256 MiB), over RUNS hibernate/wake cycles of one sandbox:
//!
//! - PSS of the holder process hot (after a request), hibernated, and woken (after the first
//!   request, and after a request that touches every page);
//! - deflate time and throughput (bytes written to the swap file / deflate time);
//! - first-request latency after a wake (a request touching little, `GET /`), beside the
//!   same request on the hot sandbox measured in the same run, and their ratio;
//! - the full-inflation request (`GET /verify`, every page) after a wake, beside hot.
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

fn bench(mib: u64, memory: &str) {
    let root = Rootfs::new();
    let prog = root.guest_program("pattern_server");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    let bin = testutil::torpor_bin();
    let sb = Detached::start(
        &bin,
        &[
            "--memory",
            memory,
            "--publish",
            &publish,
            "--wake-mode",
            "fault",
        ],
        root.path(),
        &prog,
        &["8080", &mib.to_string()],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(Detached::wait_until(Duration::from_secs(300), || http_get(
        addr,
        "/",
        Duration::from_secs(5)
    )
    .is_ok()));
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
        let report = sb.ok("hibernate", &[]);
        let report: String = report.split_whitespace().collect();
        let took = json_field(&report, "took_us")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let swap = json_field(&report, "swap_bytes")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        deflate_ms.push(took / 1e3);
        swap_mb.push(swap / 1e6);
        deflate_mbps.push(if took > 0.0 { swap / took } else { 0.0 });
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
    row("deflate time", "ms", &deflate_ms);
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

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    bench(4, "64M");
    bench(256, "512M");
}
