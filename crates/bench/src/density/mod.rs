//! `torpor-bench density`: how many hibernated sandboxes one machine holds, and what their
//! first requests cost.
//!
//! For each count N (`--instances 10,100,1000`), N sandboxes of one workload (the paper's
//! Python hello by default) are started with the keep-alive policy (`--hibernate-after`) and
//! left to hibernate by themselves. Then it measures the host memory they cost (the fall of
//! `MemAvailable` over the whole phase, divided by N, beside the sum of the holders' PSS), the
//! CPU they use while all idle, a stream of requests whose targets follow a Zipf popularity
//! (seeded), with the latency of the first request to a hibernated sandbox apart from the
//! others, and finally one request to every sandbox, each of which must answer correctly.
//! Results: `density.md`, `density.csv`, `density.png` (memory per sandbox against N).

pub mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::SeedableRng;
use rand_distr::Distribution;

use crate::paper::driver::{Driver, Sandbox};
use crate::paper::workloads::{self, Workload};

/// Options of `torpor-bench density`.
#[derive(clap::Args, Debug)]
pub struct DensityArgs {
    /// Sandbox counts, one phase each (comma separated, 1 to 2000).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub instances: Vec<usize>,
    /// The workload (one of the paper's: python, node, go…).
    #[arg(long, default_value = "python")]
    pub workload: String,
    /// The keep-alive policy the sandboxes run with.
    #[arg(long, default_value = "2s", value_parser = torpor::keepalive::parse_after)]
    pub hibernate_after: Duration,
    /// Requests in the Zipf stream of each phase.
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    /// The Zipf exponent of the targets' popularity.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Seed of the request stream.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Sandboxes started at once.
    #[arg(long, default_value_t = 2)]
    pub parallel: usize,
    /// Where density.md, density.csv and density.png go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
}

/// One request of the stream.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// Latency (ms), or `None` if it failed.
    pub ms: Option<f64>,
    /// Whether its target was hibernated when it was sent.
    pub to_hibernated: bool,
}

/// What one phase (N sandboxes) measured.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// Sandboxes.
    pub n: usize,
    /// Seconds to start them all.
    pub start_s: f64,
    /// Seconds from the last start until all were hibernated.
    pub settle_s: f64,
    /// Fall of MemAvailable from before the first start to all hibernated (bytes).
    pub host_bytes: i64,
    /// Sum of the holders' PSS, all hibernated (bytes).
    pub pss_bytes: u64,
    /// Share of one CPU used by all holders together while all were hibernated.
    pub idle_cpu: f64,
    /// The Zipf stream.
    pub stream: Vec<Request>,
    /// Sandboxes that did not answer the final request correctly.
    pub final_failures: usize,
    /// Errors that cut the phase short.
    pub errors: Vec<String>,
}

/// The run: its info and its phases.
#[derive(Debug, Default)]
pub struct Results {
    /// Command line, host, version, notes.
    pub info: crate::paper::model::RunInfo,
    /// The workload.
    pub workload: String,
    /// One per N.
    pub phases: Vec<Phase>,
}

/// Runs the benchmark; returns the exit code.
///
/// # Errors
/// Bad options, or the output directory cannot be written.
pub fn run(args: DensityArgs) -> anyhow::Result<u8> {
    let all = workloads::all();
    let w = all
        .iter()
        .find(|w| w.name == args.workload)
        .with_context(|| {
            format!(
                "unknown workload {:?} (known: {})",
                args.workload,
                all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
            )
        })?;
    if args.instances.is_empty() || args.instances.iter().any(|&n| n == 0 || n > 2000) {
        anyhow::bail!("--instances: each between 1 and 2000");
    }
    if !(args.zipf > 0.0 && args.zipf.is_finite()) {
        anyhow::bail!("--zipf: a positive exponent");
    }
    if args.parallel == 0 || args.parallel > 16 {
        anyhow::bail!("--parallel: between 1 and 16");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    crate::burst::client::raise_fd_limit();
    let started = Instant::now();
    let say = |what: &str| eprintln!("[{:7.1}s] {what}", started.elapsed().as_secs_f64());
    say(&format!("{}: preparing the root filesystem", w.name));
    let root = workloads::ensure_root(w.root)?;
    workloads::install(w, &root)?;
    let mut res = Results {
        info: crate::paper::run_info(1, *args.instances.iter().max().unwrap_or(&0), false),
        workload: w.name.to_string(),
        phases: Vec::new(),
    };
    res.info.notes.push(format!(
        "Each phase starts N sandboxes of the {} workload, {} at a time, each with \
         `--hibernate-after {}` (the keep-alive policy hibernates them; nothing else does), \
         and waits until all are hibernated. Host memory: the fall of `MemAvailable` \
         (`/proc/meminfo`) from before the first start to all hibernated, divided by N: it \
         counts what the holders' PSS misses (KVM's kernel memory, page tables, the page \
         cache of the swap files that stays resident). Idle CPU: the holders' CPU time over \
         10 s with all hibernated.",
        w.name,
        args.parallel,
        humantime::format_duration(args.hibernate_after)
    ));
    res.info.notes.push(format!(
        "The request stream: {} requests, one at a time, to targets drawn from a Zipf \
         distribution of exponent {} over the N sandboxes (seed {}), as a serverless \
         platform's few popular and many rare functions; a request counts as a wake when its \
         target was hibernated when it was sent (torpor stats). Then every sandbox gets one \
         request, which must be answered correctly.",
        args.requests, args.zipf, args.seed
    ));
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    for &n in &args.instances {
        say(&format!("{n} sandboxes"));
        let d = Driver::new(&state_base)?;
        let mut phase = Phase {
            n,
            ..Phase::default()
        };
        if let Err(e) = measure(&d, w, &root, n, &args, &say, &mut phase) {
            say(&format!("{n} sandboxes: ERROR: {e:#}"));
            phase.errors.push(format!("{e:#}"));
        }
        say(&report::phase_line(&phase));
        res.phases.push(phase);
        // The sandboxes go with the driver (deleted), before the next phase measures.
        say("deleting the sandboxes");
    }
    res.info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &res)?;
    say(&format!(
        "torpor-bench density: done; wrote {}",
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(u8::from(
        res.phases
            .iter()
            .any(|p| !p.errors.is_empty() || p.final_failures > 0),
    ))
}

/// One phase: start, settle, measure, stream, check every sandbox.
fn measure(
    d: &Driver,
    w: &Workload,
    root: &std::path::Path,
    n: usize,
    args: &DensityArgs,
    say: &dyn Fn(&str),
    phase: &mut Phase,
) -> anyhow::Result<()> {
    let mem_before = torpor::keepalive::mem_available().context("MemAvailable")?;
    let after = humantime::format_duration(args.hibernate_after).to_string();
    let t = Instant::now();
    let mut sandboxes: Vec<Sandbox<'_>> = Vec::with_capacity(n);
    while sandboxes.len() < n {
        let batch = args.parallel.min(n - sandboxes.len());
        let started: Vec<Sandbox<'_>> = (0..batch)
            .map(|_| d.start_with(w, root, "auto", &["--hibernate-after", &after]))
            .collect::<anyhow::Result<_>>()?;
        for sb in &started {
            sb.wait_ready(w)?;
        }
        sandboxes.extend(started);
        if sandboxes.len().is_multiple_of(100) {
            say(&format!("{} of {n} started", sandboxes.len()));
        }
    }
    phase.start_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let deadline = args.hibernate_after * 3 + Duration::from_secs(60);
    loop {
        let awake = sandboxes
            .iter()
            .filter(|sb| sb.state().map_or(true, |s| s != "hibernated"))
            .count();
        if awake == 0 {
            break;
        }
        if t.elapsed() > deadline {
            anyhow::bail!("{awake} of {n} sandboxes not hibernated after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    phase.settle_s = t.elapsed().as_secs_f64();
    let mem_after = torpor::keepalive::mem_available().context("MemAvailable")?;
    phase.host_bytes = mem_before as i64 - mem_after as i64;
    let mut pids = Vec::with_capacity(n);
    for sb in &sandboxes {
        let stats = sb.stats()?;
        let field = |k: &str| stats.get(k).and_then(serde_json::Value::as_u64);
        pids.push(field("pid").context("no pid in torpor stats")? as u32);
        phase.pss_bytes += field("pss_bytes").context("no pss_bytes in torpor stats")?;
    }
    let cpu = |pids: &[u32]| -> u64 {
        pids.iter()
            .filter_map(|&p| torpor::procfs::cpu_time_us(p))
            .sum()
    };
    let (c0, t0) = (cpu(&pids), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    phase.idle_cpu = cpu(&pids).saturating_sub(c0) as f64 / t0.elapsed().as_micros() as f64;
    say(&format!(
        "{n} hibernated: {:.2} MiB of host memory each, PSS {:.2} MiB each, {:.2} % of a CPU \
         in all",
        phase.host_bytes as f64 / n as f64 / 1048576.0,
        phase.pss_bytes as f64 / n as f64 / 1048576.0,
        phase.idle_cpu * 100.0
    ));
    // The stream: a target is hibernated if the policy had time to act since its last request.
    let zipf = rand_distr::Zipf::new(n as f64, args.zipf).context("Zipf distribution")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut last: Vec<Option<Instant>> = vec![None; n];
    for _ in 0..args.requests {
        let i = (zipf.sample(&mut rng) as usize).clamp(1, n) - 1;
        let to_hibernated = match last[i] {
            None => true,
            Some(t) if t.elapsed() > args.hibernate_after / 2 => {
                sandboxes[i].state().is_ok_and(|s| s == "hibernated")
            }
            Some(_) => false,
        };
        let ms = sandboxes[i].request(w).ok();
        last[i] = Some(Instant::now());
        phase.stream.push(Request { ms, to_hibernated });
    }
    // Every sandbox answers.
    for sb in &sandboxes {
        if sb.request(w).is_err() {
            phase.final_failures += 1;
        }
    }
    Ok(())
}
