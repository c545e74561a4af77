//! `torpor-bench burst`: bursts of concurrent connections at a hot and at a hibernated
//! sandbox, against the same program run natively in the same run; and many sandboxes
//! woken at once.
//!
//! For each chosen workload of the paper (`paper/workloads.rs`: the Python, Node.js and Go
//! hello-worlds by default) and each burst size, it measures three bursts: the program run
//! natively ([`crate::paper::native`], as `bench paper`'s baseline), a hot sandbox, and the same sandbox just hibernated (its files
//! evicted from the host page cache unless `--warm-cache`). Each burst opens every connection
//! at the same instant ([`client`]) and records every latency, the failures and the rise of
//! the host's listen-overflow counter. The wake latency of a single request is measured on
//! the same sandbox, so that the report can set each hibernated burst's p99 beside "the wake
//! plus twice the native p99". Then `--wakes` sandboxes are hibernated and woken by one
//! request each, all at once. Results: `burst.md`, `burst.csv`, `burst-wakes.csv` and a plot
//! of latency percentiles, `burst.png` ([`report`], [`plot`]).

pub mod client;
pub mod plot;
pub mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::paper::driver::{self, Driver, Sandbox};
use crate::paper::workloads::{self, Workload};
use client::{Burst, Target};

/// Options of `torpor-bench burst`.
#[derive(clap::Args, Debug)]
pub struct BurstArgs {
    /// One burst of each kind (not three) and 20 sandboxes for the simultaneous wakes: a few
    /// minutes.
    #[arg(long)]
    pub quick: bool,
    /// Where burst.md, the CSV files and the plot go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Workloads (comma separated; any of the paper's: python,node,go,java,…).
    #[arg(long, value_delimiter = ',', default_value = "python,node,go")]
    pub only: Vec<String>,
    /// Burst sizes: concurrent connections (comma separated, 1 to 2000).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub sizes: Vec<usize>,
    /// Sandboxes (of the first workload) woken at once by one request each (0: skip; at
    /// most 200). Default 100, or 20 with --quick.
    #[arg(long)]
    pub wakes: Option<usize>,
    /// How long a connection may wait for its answer.
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Keep the host page cache (by default the sandbox's swap and REAP files and its root's
    /// files are evicted before every hibernated burst, as after a long idle period).
    #[arg(long)]
    pub warm_cache: bool,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = torpor::units::parse_duration(s)?;
    if d.is_zero() || d > Duration::from_secs(600) {
        return Err(format!("timeout {s:?}: between 1ms and 10m"));
    }
    Ok(d)
}

/// Requests that warm a server up before it is measured (JIT compilers, caches).
const WARMUP: usize = 20;
/// Pause after a burst or before a hibernate: the server closes the last connections.
const SETTLE: Duration = Duration::from_millis(300);

/// Where a burst was aimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The program run natively.
    Native,
    /// A hot sandbox.
    Hot,
    /// A sandbox just hibernated: the burst wakes it.
    Hibernated,
}

impl Mode {
    /// Name in tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Hot => "hot",
            Mode::Hibernated => "hibernated",
        }
    }
}

/// One burst measured.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Workload name.
    pub workload: String,
    /// Where it was aimed.
    pub mode: Mode,
    /// Repetition.
    pub rep: usize,
    /// What it gave.
    pub burst: Burst,
}

/// Everything a run measured.
#[derive(Debug, Default)]
pub struct Results {
    /// Bursts.
    pub samples: Vec<Sample>,
    /// Single-request wake latency per workload (ms, each measured wake).
    pub wake_ms: Vec<(String, Vec<f64>)>,
    /// The simultaneous wakes: (workload, hot burst, hibernated burst).
    pub wakes: Option<(String, Burst, Burst)>,
    /// Errors that ended a workload's measurements.
    pub errors: Vec<String>,
    /// The command line, the host, the version, notes.
    pub info: crate::paper::model::RunInfo,
}

/// Runs the benchmark; returns the exit code.
///
/// # Errors
/// Bad options, or the output directory cannot be written; a workload's failure is recorded
/// in the report and the run goes on.
pub fn run(args: BurstArgs) -> anyhow::Result<u8> {
    let all = workloads::all();
    let mut chosen = Vec::new();
    for o in &args.only {
        let w = all.iter().find(|w| w.name == o).with_context(|| {
            format!(
                "unknown workload {o:?} (known: {})",
                all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        chosen.push(w);
    }
    if args.sizes.is_empty() || args.sizes.iter().any(|&n| n == 0 || n > 2000) {
        anyhow::bail!("--sizes: each between 1 and 2000");
    }
    let wakes = args.wakes.unwrap_or(if args.quick { 20 } else { 100 });
    if wakes > 200 {
        anyhow::bail!("--wakes: at most 200");
    }
    let reps = if args.quick { 1 } else { 3 };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    client::raise_fd_limit();
    let started = Instant::now();
    let mut res = Results {
        info: crate::paper::run_info(reps, wakes, args.quick),
        ..Results::default()
    };
    res.info.notes.push(format!(
        "Each burst opens all its connections at the same instant (one client thread each, \
         released together), sends one `GET` on each and waits up to {} s for the answer; \
         latencies count from that instant. A failure counts as slower than any answer in the \
         percentiles. Listen overflows: the rise of the host's `TcpExtListenOverflows` \
         (`/proc/net/netstat`, which `nstat` reads) during the burst. {reps} burst(s) of each \
         kind; the tables give the median of each figure over them.",
        args.timeout.as_secs()
    ));
    res.info.notes.push(if args.warm_cache {
        "`--warm-cache`: nothing is evicted from the host page cache before a wake.".into()
    } else {
        "Before every hibernated burst and measured wake, the sandbox's swap and REAP files \
         and its root's files are evicted from the host page cache, as after a long idle \
         period."
            .into()
    });
    res.info.notes.push(
        "Native: the same program, in the same root filesystem (a chroot with a `/proc` of \
         its own), on the host. \
         Sandboxes: `torpor run -d` with the default `--wake-mode auto` (the first wake \
         records the working set, later ones prefetch it)."
            .into(),
    );
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let d = Driver::new(&state_base)?;
    let say = |what: &str| eprintln!("[{:7.1}s] {what}", started.elapsed().as_secs_f64());
    for w in &chosen {
        say(&format!("{}: preparing the root filesystem", w.name));
        let r = workloads::ensure_root(w.root).and_then(|root| {
            workloads::install(w, &root)?;
            measure(&d, w, &root, &args, reps, &say, &mut res)
        });
        if let Err(e) = r {
            say(&format!("{}: ERROR: {e:#}", w.name));
            res.errors.push(format!("{}: {e:#}", w.name));
        }
    }
    if wakes > 0 {
        if let Some(w) = chosen.first() {
            say(&format!("{wakes} {} sandboxes woken at once", w.name));
            let r = workloads::ensure_root(w.root)
                .and_then(|root| many_wakes(&d, w, &root, wakes, &args));
            match r {
                Ok(x) => res.wakes = Some((w.name.to_string(), x.0, x.1)),
                Err(e) => {
                    say(&format!("simultaneous wakes: ERROR: {e:#}"));
                    res.errors.push(format!("simultaneous wakes: {e:#}"));
                }
            }
        }
    }
    res.info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &res)?;
    print!("{}", report::summary(&res));
    say(&format!(
        "torpor-bench burst: done; wrote {}",
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(u8::from(!res.errors.is_empty()))
}

fn target(w: &Workload, addr: std::net::SocketAddr) -> Target {
    Target {
        addr,
        path: w.path,
        expect: w.expect,
    }
}

/// Native, hot and hibernated bursts of every size for `w`, and its single-request wakes.
fn measure(
    d: &Driver,
    w: &Workload,
    root: &Path,
    args: &BurstArgs,
    reps: usize,
    say: &dyn Fn(&str),
    res: &mut Results,
) -> anyhow::Result<()> {
    let root_files = if args.warm_cache {
        Vec::new()
    } else {
        driver::files_under(root)
    };
    let record = |res: &mut Results, mode: Mode, rep: usize, b: Burst| {
        say(&format!(
            "{} {} burst of {}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} failed, {} \
             listen overflows",
            w.name,
            mode.name(),
            b.n,
            b.quantile(0.5),
            b.quantile(0.99),
            b.max(),
            b.failures,
            b.overflows
        ));
        for e in &b.errors {
            say(&format!("  failure: {e}"));
        }
        res.samples.push(Sample {
            workload: w.name.to_string(),
            mode,
            rep,
            burst: b,
        });
    };
    {
        say(&format!("{}: native", w.name));
        let mut native = crate::paper::native::Native::start(w, root, &std::env::temp_dir())?;
        native.wait_ready(w)?;
        let t = target(w, native.addr);
        warm(&t, args.timeout)?;
        for &n in &args.sizes {
            for rep in 0..reps {
                std::thread::sleep(SETTLE);
                record(res, Mode::Native, rep, client::burst(&t, n, args.timeout));
            }
        }
    }
    say(&format!("{}: sandbox", w.name));
    let sb = d.start(w, root, "auto")?;
    sb.wait_ready(w)?;
    let t = target(w, sb.addr);
    warm(&t, args.timeout)?;
    for &n in &args.sizes {
        for rep in 0..reps {
            std::thread::sleep(SETTLE);
            record(res, Mode::Hot, rep, client::burst(&t, n, args.timeout));
        }
    }
    // The first wake records the working set (auto mode): not measured.
    hibernate(&sb, &root_files, true)?;
    warm(&t, args.timeout)?;
    let mut wake_ms = Vec::new();
    for _ in 0..reps.max(3) {
        hibernate(&sb, &root_files, !args.warm_cache)?;
        let t0 = Instant::now();
        crate::paper::http::timed_get(t.addr, t.path, t.expect, args.timeout)?;
        wake_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    say(&format!(
        "{}: single-request wakes (ms): {wake_ms:.1?}",
        w.name
    ));
    res.wake_ms.push((w.name.to_string(), wake_ms));
    for &n in &args.sizes {
        for rep in 0..reps {
            hibernate(&sb, &root_files, !args.warm_cache)?;
            record(
                res,
                Mode::Hibernated,
                rep,
                client::burst(&t, n, args.timeout),
            );
        }
    }
    Ok(())
}

/// Warm-up requests, one at a time.
fn warm(t: &Target, timeout: Duration) -> anyhow::Result<()> {
    for _ in 0..WARMUP {
        crate::paper::http::timed_get(t.addr, t.path, t.expect, timeout)?;
    }
    Ok(())
}

/// Hibernates `sb` once it has finished with the last connections, then evicts its files
/// (and its root's) from the host page cache if `evict`.
fn hibernate(sb: &Sandbox<'_>, root_files: &[PathBuf], evict: bool) -> anyhow::Result<()> {
    std::thread::sleep(SETTLE);
    sb.hibernate()?;
    if evict {
        let mut files = sb.state_files();
        files.extend_from_slice(root_files);
        driver::evict(&files);
    }
    Ok(())
}

/// `n` sandboxes of `w`, hot: one request each at once; then hibernated: one request each at
/// once (the wakes).
fn many_wakes(
    d: &Driver,
    w: &Workload,
    root: &Path,
    n: usize,
    args: &BurstArgs,
) -> anyhow::Result<(Burst, Burst)> {
    let mut sandboxes = Vec::with_capacity(n);
    for i in 0..n {
        let sb = d.start(w, root, "auto")?;
        sb.wait_ready(w)
            .with_context(|| format!("sandbox {} of {n}", i + 1))?;
        sandboxes.push(sb);
    }
    let targets: Vec<Target> = sandboxes.iter().map(|sb| target(w, sb.addr)).collect();
    for t in &targets {
        crate::paper::http::timed_get(t.addr, t.path, t.expect, args.timeout)?;
    }
    std::thread::sleep(SETTLE);
    let hot = client::burst_many(&targets, args.timeout);
    let mut files = if args.warm_cache {
        Vec::new()
    } else {
        driver::files_under(root)
    };
    std::thread::sleep(SETTLE);
    for sb in &sandboxes {
        sb.hibernate()?;
        if !args.warm_cache {
            files.extend(sb.state_files());
        }
    }
    driver::evict(&files);
    let woken = client::burst_many(&targets, args.timeout);
    Ok((hot, woken))
}

/// The figures of one kind of burst (workload, where, size), over its repetitions.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Workload.
    pub workload: String,
    /// Connections.
    pub n: usize,
    /// Where it was aimed.
    pub mode: Mode,
    /// Median over the repetitions of each burst's p50, p99 and max (ms).
    pub p50: f64,
    /// See `p50`.
    pub p99: f64,
    /// See `p50`.
    pub max: f64,
    /// Failures over all repetitions.
    pub failures: usize,
    /// Connections over all repetitions.
    pub total: usize,
    /// Listen overflows over all repetitions.
    pub overflows: u64,
}
