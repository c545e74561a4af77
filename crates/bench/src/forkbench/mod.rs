//! `torpor-bench fork`: sandbox fork (issue 31) against the other ways to get an instance of
//! a function answering, on the Python, Node.js, Go and Java hellos, in one run: a cold start
//! (`run -d`), a clone of a checkpoint (`run -d --from`, its files cached), the first fork of
//! a hot template (which writes the template's image), forks of the warm template (its image
//! written: the template stays hibernated between forks), and a REAP wake of the template.
//! Each figure runs from the command's launch to the first correct response. Then, for the
//! Python hello, `--instances` forks of one template alive at once against as many cold
//! starts: host memory (MemAvailable) and PSS (holder, stubs, helpers), after their first
//! response and after 100 requests each. Writes `fork.md` and `fork.csv`.

mod report;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::paper::driver::{Driver, Sandbox};
use crate::paper::workloads::{self, Workload};

/// Arguments of `torpor-bench fork`.
#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// Where fork.md and fork.csv go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Cold starts, clones and REAP wakes per workload.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Forks of each warm template (the p50/p99 figures).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub forks: u32,
    /// Python instances alive at once for the memory figures, forked and cold-started (0:
    /// none).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub instances: u32,
    /// Only these workloads (comma separated: python,node,go,java).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// The start-up figures of one workload, ms from the command's launch to the first correct
/// response.
#[derive(Debug, Default)]
pub struct Row {
    /// Workload label.
    pub label: String,
    /// `run -d`.
    pub cold: Vec<f64>,
    /// `run -d --from` a checkpoint whose files are cached.
    pub clone: Vec<f64>,
    /// The first fork of a hot template (its image written).
    pub first_fork: Vec<f64>,
    /// Forks of the warm template.
    pub fork: Vec<f64>,
    /// Requests to a hibernated template recorded for REAP.
    pub reap_wake: Vec<f64>,
    /// The request after a fork's first response.
    pub hot: Vec<f64>,
    /// What went wrong.
    pub errors: Vec<String>,
}

/// Memory of many instances of one kind alive at once.
#[derive(Debug, Default, Clone)]
pub struct Memory {
    /// forked or cold-started.
    pub kind: &'static str,
    /// Instances.
    pub n: usize,
    /// MemAvailable's fall per instance from before the first start to all answered once,
    /// bytes.
    pub host_first: f64,
    /// The same after 100 requests to each.
    pub host_after: f64,
    /// Sum of PSS (holder, stubs, helpers) after the first response, bytes.
    pub pss_first: f64,
    /// The same after 100 requests each.
    pub pss_after: f64,
    /// Seconds to start them all.
    pub start_s: f64,
}

/// Runs the benchmark.
///
/// # Errors
/// If the output cannot be written; a workload's failure is recorded in the report.
pub fn run(args: ForkArgs) -> anyhow::Result<u8> {
    let names = ["python", "node", "go", "java"];
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
    let scratch = state_base.join(format!("torpor-forkbench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let all = workloads::all();
    let chosen = |w: &&Workload| {
        names.contains(&w.name) && (args.only.is_empty() || args.only.iter().any(|o| o == w.name))
    };
    let mut rows = Vec::new();
    for w in all.iter().filter(chosen) {
        eprintln!("[{:>4.0} s] {}", started.elapsed().as_secs_f64(), w.label);
        let mut row = Row {
            label: w.label.to_string(),
            ..Row::default()
        };
        let r = workloads::ensure_root(w.root).and_then(|root| {
            workloads::install(w, &root)?;
            startups(&driver, w, &root, &scratch, &args, &mut row)
        });
        if let Err(e) = r {
            row.errors.push(format!("{e:#}"));
        }
        for e in &row.errors {
            eprintln!("  ERROR: {e}");
        }
        rows.push(row);
    }
    let mut memory = Vec::new();
    let mut memory_errors = Vec::new();
    if args.instances > 0 && (args.only.is_empty() || args.only.iter().any(|o| o == "python")) {
        if let Some(w) = all.iter().find(|w| w.name == "python") {
            eprintln!(
                "[{:>4.0} s] {} Python instances of each kind: memory",
                started.elapsed().as_secs_f64(),
                args.instances
            );
            match workloads::ensure_root(w.root)
                .and_then(|root| memories(&driver, w, &root, args.instances as usize))
            {
                Ok(m) => memory = m,
                Err(e) => memory_errors.push(format!("{e:#}")),
            }
        }
    }
    let _ = torpor::cowroot::remove_all(&scratch);
    info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &info, &rows, &memory, &memory_errors)?;
    eprintln!(
        "torpor-bench fork: done in {:.0} s; wrote {}",
        info.took_s,
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let failed = rows.iter().any(|r| !r.errors.is_empty()) || !memory_errors.is_empty();
    Ok(u8::from(failed))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A new instance's time to its first correct answer, from `t` (before its command).
fn first_answer(sb: &Sandbox<'_>, w: &Workload, t: Instant) -> anyhow::Result<f64> {
    sb.wait_ready(w)?;
    Ok(ms(t))
}

fn startups(
    d: &Driver,
    w: &Workload,
    root: &std::path::Path,
    scratch: &std::path::Path,
    args: &ForkArgs,
    row: &mut Row,
) -> anyhow::Result<()> {
    for _ in 0..args.reps {
        let t = Instant::now();
        let sb = d.start(w, root, "auto")?;
        row.cold.push(first_answer(&sb, w, t)?);
    }
    // Clones of a checkpoint of a warm sandbox (the first one makes the clones' memory file:
    // not counted, as the checkpoint's files are cached for the others).
    let dir = scratch.join(w.name);
    {
        let sb = d.start_warm(w, root)?;
        d.checkpoint(&sb, &dir)?;
    }
    for i in 0..=args.reps {
        let t = Instant::now();
        let sb = d.start_from_checkpoint(w, &dir, true)?;
        let v = first_answer(&sb, w, t)?;
        if i > 0 {
            row.clone.push(v);
        }
    }
    let _ = torpor::cowroot::remove_all(&dir);
    // Forks: the first of a hot template writes its image and leaves it hibernated; the next
    // ones start from that image while the template stays so.
    let template = d.start_warm(w, root)?;
    let t = Instant::now();
    let first = d.fork(w, &template)?;
    row.first_fork.push(first_answer(&first, w, t)?);
    drop(first);
    for _ in 0..args.forks {
        let t = Instant::now();
        let inst = d.fork(w, &template)?;
        row.fork.push(first_answer(&inst, w, t)?);
        if row.hot.len() < args.reps as usize {
            row.hot.push(inst.request(w)?);
        }
    }
    // The template's REAP wakes: the first wake records the working set, the next ones
    // prefetch it.
    template.request(w)?;
    template.hibernate()?;
    template.request(w)?;
    for _ in 0..args.reps {
        template.hibernate()?;
        row.reap_wake.push(template.request(w)?);
    }
    Ok(())
}

/// The PSS of `sb`'s whole process tree: holder, platform stubs and helpers, bytes.
fn tree_pss(sb: &Sandbox<'_>) -> anyhow::Result<f64> {
    let s = sb.stats()?;
    let num = |k: &str| s.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    Ok(num("pss_bytes") + num("platform_pss_bytes") + num("helpers_pss_bytes"))
}

/// MemAvailable once it has stayed within 2 MiB for a second (at most 60 s of waiting).
fn settled_mem_available() -> anyhow::Result<f64> {
    let read = || {
        torpor::keepalive::mem_available()
            .context("MemAvailable")
            .map(|m| m as f64)
    };
    let mut last = read()?;
    for _ in 0..60 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = read()?;
        if (now - last).abs() < 2.0 * 1024.0 * 1024.0 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// `n` forks of one template alive at once, then `n` cold-started instances.
fn memories(
    d: &Driver,
    w: &Workload,
    root: &std::path::Path,
    n: usize,
) -> anyhow::Result<Vec<Memory>> {
    let mut out = Vec::new();
    let template = d.start_warm(w, root)?;
    // The template's image is written by a first fork, outside the measure.
    drop(d.fork(w, &template)?);
    for kind in ["forked", "cold-started"] {
        // What the last phase's sandboxes held comes back to the host some time after their
        // delete (network namespaces are torn down in the background): counted as this
        // phase's otherwise.
        let before = settled_mem_available()?;
        let t = Instant::now();
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            let sb = if kind == "forked" {
                d.fork(w, &template)?
            } else {
                d.start(w, root, "auto")?
            };
            sb.wait_ready(w)?;
            all.push(sb);
        }
        let start_s = t.elapsed().as_secs_f64();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let first = torpor::keepalive::mem_available().context("MemAvailable")? as f64;
        let pss_first: f64 = all.iter().map(tree_pss).sum::<anyhow::Result<f64>>()?;
        for sb in &all {
            for _ in 0..100 {
                sb.request(w)?;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let after = torpor::keepalive::mem_available().context("MemAvailable")? as f64;
        let pss_after: f64 = all.iter().map(tree_pss).sum::<anyhow::Result<f64>>()?;
        out.push(Memory {
            kind,
            n,
            host_first: (before - first) / n as f64,
            host_after: (before - after) / n as f64,
            pss_first,
            pss_after,
            start_s,
        });
        drop(all);
    }
    Ok(out)
}
