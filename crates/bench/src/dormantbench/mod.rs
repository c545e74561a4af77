//! `torpor-bench dormant`: the dormant tier against the hibernated one (issue 30), on the
//! Python, Node.js and Go hellos: the first response after a wake from each (the dormant
//! wake restores the sandbox in place from its state directory), the time to go dormant, and
//! what each tier keeps on the host (PSS of the holder or dormant process, and of its helper
//! processes; threads; processes); then the dormant tier's density: `--instances` instances
//! of one Python checkpoint started dormant (`run --from DIR --dormant`, as a platform
//! provisions many instances of one function), with `--hibernate-after` and
//! `--dormant-after` so that a woken one goes back to sleep: host memory per instance
//! (MemAvailable before and after) beside the sum of PSS, processes, idle CPU, a seeded Zipf
//! stream of requests over all of them (first-request latency of dormant targets), and a
//! final request to every one; each count of `--instances` in turn (a fresh set each), with
//! a plot of host memory and the stream's wake p99 against it. Writes `dormant.md`,
//! `dormant.csv` and `dormant.png`.

mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::paper::driver::{Driver, Sandbox};
use crate::paper::workloads::{self, Workload};

/// Arguments of `torpor-bench dormant`.
#[derive(clap::Args, Debug)]
pub struct DormantArgs {
    /// Where dormant.md and dormant.csv go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Wakes of each kind per workload.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub reps: u32,
    /// Python instances started dormant at once for the density figures, one set after
    /// the other for a list (comma separated: 100,1000,10000); 0: none.
    #[arg(long, value_delimiter = ',', default_value = "100",
          value_parser = clap::value_parser!(u32).range(0..=20000))]
    pub instances: Vec<u32>,
    /// Requests in the Zipf stream over the dormant instances.
    #[arg(long, default_value_t = 2000)]
    pub requests: usize,
    /// The Zipf exponent of the instances' popularity.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Seed of the request stream.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Only these workloads (comma separated: python,node,go).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// The figures of one workload.
#[derive(Debug, Default)]
pub struct Row {
    /// Workload label.
    pub label: String,
    /// Hot requests, ms.
    pub hot: Vec<f64>,
    /// First request after a hibernate, ms.
    pub hibernated_wake: Vec<f64>,
    /// First request after `torpor dormant`, ms.
    pub dormant_wake: Vec<f64>,
    /// `torpor dormant` from a hot sandbox to the dormant process answering, ms.
    pub go_dormant: Vec<f64>,
    /// Per tier (hot, hibernated, dormant): PSS of the holder (or dormant process) and of
    /// its helpers, bytes; threads of the holder.
    pub memory: Vec<TierMemory>,
    /// What went wrong.
    pub errors: Vec<String>,
}

/// What one tier keeps on the host.
#[derive(Debug, Clone)]
pub struct TierMemory {
    /// hot, hibernated or dormant.
    pub tier: &'static str,
    /// PSS of the holder (dormant: the dormant process), bytes.
    pub holder_pss: f64,
    /// PSS of its helper processes (janitor, file broker), bytes.
    pub helpers_pss: f64,
    /// Processes: the holder and its helpers.
    pub processes: usize,
    /// Threads of the holder.
    pub threads: u64,
}

/// The density run: many instances started dormant.
#[derive(Debug, Default)]
pub struct Many {
    /// Instances.
    pub n: usize,
    /// Seconds to start them all.
    pub start_s: f64,
    /// MemAvailable fell by this much per instance from before their start to all dormant,
    /// bytes.
    pub host_per_sandbox: f64,
    /// Mean PSS of a dormant process plus its helpers, bytes.
    pub pss_per_sandbox: f64,
    /// Mean processes per instance (the dormant process and its helpers).
    pub processes_per_sandbox: f64,
    /// CPU of all the dormant processes and their helpers while idle, in CPUs.
    pub idle_cpu: f64,
    /// The stream's requests to dormant instances (first requests), ms (failed ones: NaN).
    pub to_dormant: Vec<f64>,
    /// The stream's other requests, ms.
    pub others: Vec<f64>,
    /// Requests of the stream that failed.
    pub stream_failures: usize,
    /// The first few failures: instance, its state before the request, the error.
    pub failure_samples: Vec<String>,
    /// Instances that did not answer the final request correctly.
    pub final_failures: usize,
    /// Requests in the stream, and the Zipf exponent and seed.
    pub stream: (usize, f64, u64),
    /// What went wrong.
    pub errors: Vec<String>,
}

/// Runs the benchmark.
///
/// # Errors
/// If the output cannot be written; a workload's failure is recorded in the report.
pub fn run(args: DormantArgs) -> anyhow::Result<u8> {
    let names = ["python", "node", "go"];
    for o in &args.only {
        anyhow::ensure!(names.contains(&o.as_str()), "unknown workload {o:?}");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    let started = Instant::now();
    let most = args.instances.iter().copied().max().unwrap_or(0);
    let mut info = crate::paper::run_info(args.reps as usize, most as usize, false);
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let driver = Driver::new(&state_base)?;
    let all = workloads::all();
    let mut rows = Vec::new();
    for w in all.iter().filter(|w| {
        names.contains(&w.name) && (args.only.is_empty() || args.only.iter().any(|o| o == w.name))
    }) {
        eprintln!("[{:>4.0} s] {}", started.elapsed().as_secs_f64(), w.label);
        let mut row = Row {
            label: w.label.to_string(),
            ..Row::default()
        };
        let r = workloads::ensure_root(w.root).and_then(|root| {
            workloads::install(w, &root)?;
            let sb = driver.start(w, &root, "auto")?;
            sb.wait_ready(w)?;
            one(&sb, w, args.reps, &mut row)
        });
        if let Err(e) = r {
            row.errors.push(format!("{e:#}"));
        }
        for e in &row.errors {
            eprintln!("  ERROR: {e}");
        }
        rows.push(row);
    }
    let python = args.only.is_empty() || args.only.iter().any(|o| o == "python");
    let mut sets = Vec::new();
    for &n in args.instances.iter().filter(|&&n| n > 0 && python) {
        let mut many = Many {
            n: n as usize,
            stream: (args.requests, args.zipf, args.seed),
            ..Many::default()
        };
        eprintln!(
            "[{:>4.0} s] {n} Python sandboxes dormant at once",
            started.elapsed().as_secs_f64()
        );
        if let Some(w) = all.iter().find(|w| w.name == "python") {
            if let Err(e) = workloads::ensure_root(w.root)
                .and_then(|root| many_dormant(&driver, w, &root, &args, &mut many))
            {
                many.errors.push(format!("{e:#}"));
            }
        }
        sets.push(many);
    }
    info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &info, &rows, &sets)?;
    eprintln!(
        "torpor-bench dormant: done in {:.0} s; wrote {}",
        info.took_s,
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let failed =
        rows.iter().any(|r| !r.errors.is_empty()) || sets.iter().any(|m| !m.errors.is_empty());
    Ok(u8::from(failed))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The tier's memory as `torpor stats` reports it.
fn tier(sb: &Sandbox<'_>, name: &'static str) -> anyhow::Result<TierMemory> {
    let s = sb.stats()?;
    let num = |k: &str| s.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    let pid = s
        .get("pid")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let platform: Vec<u64> = ["platform_pids", "platform_shared_pids"]
        .iter()
        .filter_map(|k| s.get(*k).and_then(serde_json::Value::as_array))
        .flatten()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let helpers = children(pid)
        .into_iter()
        .filter(|c| !platform.contains(c))
        .count();
    Ok(TierMemory {
        tier: name,
        holder_pss: num("pss_bytes"),
        helpers_pss: num("helpers_pss_bytes"),
        processes: 1 + helpers,
        threads: threads(pid),
    })
}

/// The child processes of every thread of `pid`.
fn children(pid: u64) -> Vec<u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect()
}

/// Threads of process `pid` (0 if gone).
fn threads(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn one(sb: &Sandbox<'_>, w: &Workload, reps: u32, row: &mut Row) -> anyhow::Result<()> {
    for _ in 0..5 {
        sb.request(w)?;
    }
    for _ in 0..reps {
        row.hot.push(sb.request(w)?);
    }
    row.memory.push(tier(sb, "hot")?);
    for i in 0..reps {
        sb.hibernate()?;
        if i == 0 {
            row.memory.push(tier(sb, "hibernated")?);
        }
        row.hibernated_wake.push(sb.request(w)?);
    }
    for i in 0..reps {
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        sb.dormant()?;
        row.go_dormant.push(ms(t.elapsed()));
        if i == 0 {
            row.memory.push(tier(sb, "dormant")?);
        }
        row.dormant_wake.push(sb.request(w)?);
    }
    Ok(())
}

/// MemAvailable of the host, bytes.
fn mem_available() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib * 1024.0)
}

/// A stream request slower than this is reported as it happens, ms.
const SLOW_MS: f64 = 120.0;

fn many_dormant(
    d: &Driver,
    w: &Workload,
    root: &std::path::Path,
    args: &DormantArgs,
    m: &mut Many,
) -> anyhow::Result<()> {
    use rand::SeedableRng;
    use rand_distr::Distribution;
    workloads::install(w, root)?;
    let scratch = std::env::temp_dir().join(format!("torpor-dormantbench-{}", std::process::id()));
    let _ = torpor::cowroot::remove_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let dir = scratch.join("template");
    d.checkpoint(&d.start_primed(w, root)?, &dir)?;
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_secs(1));
    let before = mem_available();
    let t = Instant::now();
    let mut all = Vec::with_capacity(m.n);
    let policy = ["--hibernate-after", "2s", "--dormant-after", "2s"];
    for i in 0..m.n {
        all.push(d.start_dormant_instance(w, &dir, &policy)?);
        if (i + 1) % 1000 == 0 {
            eprintln!("  {} of {} started", i + 1, m.n);
        }
    }
    m.start_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    m.host_per_sandbox = (before - mem_available()) / m.n as f64;
    let (mut pss, mut procs, mut pids) = (0.0, 0usize, Vec::new());
    for sb in &all {
        let t = tier(sb, "dormant")?;
        pss += t.holder_pss + t.helpers_pss;
        procs += t.processes;
        if let Some(pid) = sb.stats()?.get("pid").and_then(serde_json::Value::as_u64) {
            pids.push(pid);
            pids.extend(children(pid));
        }
    }
    m.pss_per_sandbox = pss / m.n as f64;
    m.processes_per_sandbox = procs as f64 / m.n as f64;
    let cpu = |pids: &[u64]| -> u64 {
        pids.iter()
            .filter_map(|&p| torpor::procfs::cpu_time_us(p as u32))
            .sum()
    };
    let (c0, t0) = (cpu(&pids), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    m.idle_cpu = cpu(&pids).saturating_sub(c0) as f64 / t0.elapsed().as_micros() as f64;
    eprintln!(
        "  {} dormant: {:.2} MiB of host memory each, PSS {:.2} MiB, {:.1} processes, {:.2} % of a CPU in all",
        m.n,
        m.host_per_sandbox / 1048576.0,
        m.pss_per_sandbox / 1048576.0,
        m.processes_per_sandbox,
        m.idle_cpu * 100.0
    );
    let zipf = rand_distr::Zipf::new(m.n as f64, args.zipf).context("Zipf distribution")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let stream = Instant::now();
    for _ in 0..args.requests {
        let i = (zipf.sample(&mut rng) as usize).clamp(1, m.n) - 1;
        let state = all[i].state().unwrap_or_else(|e| format!("? ({e:#})"));
        let result = all[i].request(w);
        if let Ok(ms) = result {
            if ms > SLOW_MS {
                // When in the stream, to line slow requests up with the host's own records.
                let unix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                eprintln!(
                    "  slow: {ms:.0} ms to {} ({state}) at {:.3} s into the stream (unix {unix:.3})",
                    all[i].id,
                    stream.elapsed().as_secs_f64()
                );
            }
        }
        match result {
            Ok(ms) if state == "dormant" => m.to_dormant.push(ms),
            Ok(ms) => m.others.push(ms),
            Err(e) => {
                m.stream_failures += 1;
                if m.failure_samples.len() < 5 {
                    m.failure_samples
                        .push(format!("{} ({state}): {e:#}", all[i].id));
                }
            }
        }
    }
    for sb in &all {
        if let Err(e) = sb.request(w) {
            m.final_failures += 1;
            if m.failure_samples.len() < 10 {
                m.failure_samples.push(format!("{} (final): {e:#}", sb.id));
            }
        }
    }
    drop(all);
    let _ = torpor::cowroot::remove_all(&scratch);
    Ok(())
}
