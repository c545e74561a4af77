//! `torpor-bench dormant`: the dormant tier against the hibernated one (issue 30), on the
//! Python, Node.js and Go hellos: the first response after a wake from each (the dormant
//! wake restores the sandbox in place from its state directory), the time to go dormant, and
//! what each tier keeps on the host (PSS of the holder or dormant process, and of its helper
//! processes; threads; processes); then `--instances` Python sandboxes made dormant at once:
//! host memory per sandbox (MemAvailable before and after) beside the sum of PSS, and every
//! one answering a request afterwards. Writes `dormant.md` and `dormant.csv`.

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
    /// Python sandboxes made dormant at once for the memory figures (0: none).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=2000))]
    pub instances: u32,
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

/// The many-sandboxes run.
#[derive(Debug, Default)]
pub struct Many {
    /// Sandboxes.
    pub n: usize,
    /// MemAvailable fell by this much per sandbox from before their start to all dormant,
    /// bytes.
    pub host_per_sandbox: f64,
    /// Mean PSS of a dormant process plus its helpers, bytes.
    pub pss_per_sandbox: f64,
    /// The same while all were hibernated, before going dormant.
    pub hibernated_host_per_sandbox: f64,
    /// First request to each after all were dormant, ms.
    pub wakes: Vec<f64>,
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
    let mut info = crate::paper::run_info(args.reps as usize, args.instances as usize, false);
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
    let mut many = Many {
        n: args.instances as usize,
        ..Many::default()
    };
    if args.instances > 0 && (args.only.is_empty() || args.only.iter().any(|o| o == "python")) {
        eprintln!(
            "[{:>4.0} s] {} Python sandboxes dormant at once",
            started.elapsed().as_secs_f64(),
            args.instances
        );
        if let Some(w) = all.iter().find(|w| w.name == "python") {
            if let Err(e) = workloads::ensure_root(w.root)
                .and_then(|root| many_dormant(&driver, w, &root, &mut many))
            {
                many.errors.push(format!("{e:#}"));
            }
        }
    }
    info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &info, &rows, &many)?;
    eprintln!(
        "torpor-bench dormant: done in {:.0} s; wrote {}",
        info.took_s,
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let failed = rows.iter().any(|r| !r.errors.is_empty()) || !many.errors.is_empty();
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

fn many_dormant(
    d: &Driver,
    w: &Workload,
    root: &std::path::Path,
    m: &mut Many,
) -> anyhow::Result<()> {
    workloads::install(w, root)?;
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_secs(1));
    let before = mem_available();
    let mut all = Vec::with_capacity(m.n);
    for _ in 0..m.n {
        let sb = d.start(w, root, "auto")?;
        sb.wait_ready(w)?;
        sb.request(w)?;
        sb.hibernate()?;
        all.push(sb);
    }
    std::thread::sleep(Duration::from_secs(2));
    m.hibernated_host_per_sandbox = (before - mem_available()) / m.n as f64;
    let mut pss = 0.0;
    for sb in &all {
        sb.dormant()?;
    }
    std::thread::sleep(Duration::from_secs(2));
    m.host_per_sandbox = (before - mem_available()) / m.n as f64;
    for sb in &all {
        let t = tier(sb, "dormant")?;
        pss += t.holder_pss + t.helpers_pss;
    }
    m.pss_per_sandbox = pss / m.n as f64;
    for sb in &all {
        m.wakes.push(sb.request(w)?);
    }
    Ok(())
}
