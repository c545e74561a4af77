//! `torpor-bench snapshots`: what checkpoints buy a serverless platform, on the paper's eight
//! workloads (issue 14): the first response of a sandbox restored from a checkpoint
//! (`torpor restore`) and of a clone (`torpor run --from`), against a cold start, each with
//! the page cache dropped as `bench paper` does; and the memory of many clones of one Python
//! server running at once against as many cold-started and as many hibernated-then-woken
//! servers. Writes `snapshots.md` and `snapshots.csv`.

pub(crate) mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::paper::driver::{self, Driver, Sandbox};
use crate::paper::model::Summary;
use crate::paper::workloads::{self, Workload};

/// Arguments of `torpor-bench snapshots`.
#[derive(clap::Args, Debug)]
pub struct SnapshotsArgs {
    /// Where snapshots.md and snapshots.csv go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Repetitions of each latency measurement.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: u32,
    /// Python servers of each kind running at once for the memory comparison (0: none).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=500))]
    pub instances: u32,
    /// Only these workloads (comma separated: python,node,go,java,float,image-small,
    /// image-large,video).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// Latencies of one workload, in ms.
#[derive(Debug, Default)]
pub struct LatencyRow {
    /// Workload label.
    pub label: String,
    /// Cold starts: launch to the first correct response.
    pub cold: Vec<f64>,
    /// Checkpoints of a warmed-up sandbox (`torpor checkpoint`, to the command's end).
    pub checkpoint: Vec<f64>,
    /// Checkpoint size in bytes (all files).
    pub checkpoint_bytes: u64,
    /// Restores: `torpor restore -d` to the first correct response.
    pub restore: Vec<f64>,
    /// The first clone (its memory file made from the image, the page cache dropped).
    pub clone_first: Vec<f64>,
    /// Later clones (the checkpoint's files cached).
    pub clone: Vec<f64>,
    /// What went wrong.
    pub errors: Vec<String>,
}

/// The memory comparison: the PSS of each instance, in bytes, by kind.
#[derive(Debug, Default)]
pub struct MemoryResult {
    /// Instances of each kind.
    pub instances: usize,
    /// Clones of one checkpoint, all running, each answered once.
    pub clones: Vec<f64>,
    /// Cold-started servers, each answered once.
    pub cold: Vec<f64>,
    /// Servers hibernated, then woken by a request.
    pub woken: Vec<f64>,
    /// What went wrong.
    pub errors: Vec<String>,
}

/// Runs the benchmark.
///
/// # Errors
/// If the output cannot be written; a workload's failure is recorded in the report.
pub fn run(args: SnapshotsArgs) -> anyhow::Result<u8> {
    let all = workloads::all();
    for o in &args.only {
        if !all.iter().any(|w| w.name == o) {
            anyhow::bail!("unknown workload {o:?}");
        }
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    let started = Instant::now();
    let mut info = crate::paper::run_info(args.reps as usize, args.instances as usize, false);
    info.notes.push(
        "Before every cold start, restore and first clone, the root filesystem's files and the \
         checkpoint's files are evicted from the host page cache (written back, then \
         POSIX_FADV_DONTNEED); later clones find the checkpoint's files cached, as on a host \
         that starts many instances of one template."
            .into(),
    );
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let driver = Driver::new(&state_base)?;
    let scratch = state_base.join(format!("torpor-snapbench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut rows = Vec::new();
    for w in all
        .iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| o == w.name))
    {
        eprintln!(
            "[{:>4.0} s] {}: latency",
            started.elapsed().as_secs_f64(),
            w.label
        );
        let mut row = LatencyRow {
            label: w.label.to_string(),
            ..LatencyRow::default()
        };
        match workloads::ensure_root(w.root).and_then(|root| {
            workloads::install(w, &root)?;
            Ok(root)
        }) {
            Ok(root) => {
                if let Err(e) = latencies(&driver, w, &root, &scratch, args.reps, &mut row) {
                    row.errors.push(format!("{e:#}"));
                }
            }
            Err(e) => row.errors.push(format!("{e:#}")),
        }
        for e in &row.errors {
            eprintln!("  ERROR: {e}");
        }
        rows.push(row);
    }
    let mut memory = MemoryResult {
        instances: args.instances as usize,
        ..MemoryResult::default()
    };
    if args.instances > 0 && (args.only.is_empty() || args.only.iter().any(|o| o == "python")) {
        eprintln!(
            "[{:>4.0} s] {} Python servers of each kind: memory",
            started.elapsed().as_secs_f64(),
            args.instances
        );
        if let Some(w) = all.iter().find(|w| w.name == "python") {
            if let Err(e) = workloads::ensure_root(w.root).and_then(|root| {
                mem_compare(&driver, w, &root, &scratch, &mut memory).map(|()| root)
            }) {
                memory.errors.push(format!("{e:#}"));
            }
        }
    }
    let _ = torpor::cowroot::remove_all(&scratch);
    info.took_s = started.elapsed().as_secs_f64();
    let files = report::write(&args.out, &info, &rows, &memory)?;
    eprintln!(
        "torpor-bench snapshots: done in {:.0} s; wrote {}",
        info.took_s,
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let failed = rows.iter().any(|r| !r.errors.is_empty()) || !memory.errors.is_empty();
    Ok(u8::from(failed))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A started sandbox's time to its first correct answer, counted from `t`.
fn first_answer(sb: &Sandbox<'_>, w: &Workload, t: Instant) -> anyhow::Result<f64> {
    sb.wait_ready(w)?;
    Ok(ms(t.elapsed()))
}

/// The sizes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    driver::files_under(dir)
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

fn latencies(
    d: &Driver,
    w: &Workload,
    root: &Path,
    scratch: &Path,
    reps: u32,
    row: &mut LatencyRow,
) -> anyhow::Result<()> {
    let root_files = driver::files_under(root);
    for _ in 0..reps {
        driver::evict(&root_files);
        let t = Instant::now();
        let sb = d.start(w, root, "auto")?;
        row.cold.push(first_answer(&sb, w, t)?);
    }
    // The template: started, answered and warmed up, then checkpointed (reps times, the
    // last one kept).
    let dir = scratch.join(w.name);
    for i in 0..reps {
        let _ = torpor::cowroot::remove_all(&dir);
        let sb = d.start_warm(w, root)?;
        let t = Instant::now();
        d.checkpoint(&sb, &dir)?;
        row.checkpoint.push(ms(t.elapsed()));
        if i + 1 == reps {
            row.checkpoint_bytes = bytes_under(&dir);
        }
    }
    let mut cold_files = root_files.clone();
    cold_files.extend(driver::files_under(&dir));
    for _ in 0..reps {
        driver::evict(&cold_files);
        let t = Instant::now();
        let sb = d.start_from_checkpoint(w, &dir, false)?;
        row.restore.push(first_answer(&sb, w, t)?);
    }
    for _ in 0..reps {
        // The first clone of a template makes its memory file.
        for f in driver::files_under(&dir) {
            if f.extension().is_some_and(|e| e == "raw") {
                let _ = std::fs::remove_file(f);
            }
        }
        driver::evict(&cold_files);
        let t = Instant::now();
        let sb = d.start_from_checkpoint(w, &dir, true)?;
        row.clone_first.push(first_answer(&sb, w, t)?);
    }
    for _ in 0..reps {
        let t = Instant::now();
        let sb = d.start_from_checkpoint(w, &dir, true)?;
        row.clone.push(first_answer(&sb, w, t)?);
    }
    Ok(())
}

/// Starts `n` sandboxes with `start`, each answering once, and records their PSS.
fn run_many<'d>(
    n: usize,
    w: &Workload,
    mut start: impl FnMut() -> anyhow::Result<Sandbox<'d>>,
    after: impl Fn(&Sandbox<'d>) -> anyhow::Result<()>,
    out: &mut Vec<f64>,
) -> anyhow::Result<()> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let sb = start()?;
        sb.wait_ready(w)?;
        all.push(sb);
    }
    for sb in &all {
        after(sb)?;
    }
    // Let the last answers settle before reading the memory.
    std::thread::sleep(Duration::from_millis(500));
    for sb in &all {
        out.push(sb.pss()?);
    }
    Ok(())
}

fn mem_compare(
    d: &Driver,
    w: &Workload,
    root: &Path,
    scratch: &Path,
    m: &mut MemoryResult,
) -> anyhow::Result<()> {
    workloads::install(w, root)?;
    let n = m.instances;
    let dir = scratch.join("template");
    let _ = torpor::cowroot::remove_all(&dir);
    d.checkpoint(&d.start_warm(w, root)?, &dir)?;
    let answer = |sb: &Sandbox<'_>| sb.request(w).map(|_| ());
    if let Err(e) = run_many(
        n,
        w,
        || d.start_from_checkpoint(w, &dir, true),
        answer,
        &mut m.clones,
    ) {
        m.errors.push(format!("clones: {e:#}"));
    }
    if let Err(e) = run_many(n, w, || d.start(w, root, "auto"), answer, &mut m.cold) {
        m.errors.push(format!("cold: {e:#}"));
    }
    let wake = |sb: &Sandbox<'_>| {
        std::thread::sleep(Duration::from_millis(100));
        sb.hibernate()?;
        sb.request(w).map(|_| ())
    };
    if let Err(e) = run_many(n, w, || d.start(w, root, "auto"), wake, &mut m.woken) {
        m.errors.push(format!("woken: {e:#}"));
    }
    Ok(())
}

/// The median and spread of `v`, if any.
pub fn summary(v: &[f64]) -> Option<Summary> {
    Summary::of(v)
}
