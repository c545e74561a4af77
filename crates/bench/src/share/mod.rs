//! `torpor-bench share`: what sharing the clean pages of program text and libraries through
//! the host's page cache (`mm`'s `pagecache.rs`) saves, against copying them into each
//! sandbox's own memory (`torpor run --no-share-files`).
//!
//! Two measurements, each with sharing on and off:
//! - **memory**: N sandboxes of one image (the paper's Python hello by default) hot at once,
//!   one request each: the sum of their holders' PSS against N times the PSS of one sandbox
//!   running alone (medians of `--reps` runs of each);
//! - **wake**: the first request after a hibernate with page-fault wake (`--wake-mode
//!   fault`) of the paper's Node.js hello, the page cache left as it is (the shared binary
//!   stays cached, as on a host running many sandboxes of one image): the paper's
//!   experiment (25 → 11 ms with shared binaries). Median of `--reps` wakes.
//!
//! Results: `share.md`.

pub mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::paper::driver::{Driver, Sandbox};
use crate::paper::model::Summary;
use crate::paper::workloads::{self, Workload};

/// Options of `torpor-bench share`.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// Sandboxes hot at once for the memory measurement.
    #[arg(long, default_value_t = 10)]
    pub instances: usize,
    /// Runs of each measurement (the report gives medians).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// The workload of the memory measurement.
    #[arg(long, default_value = "python")]
    pub memory_workload: String,
    /// The workload of the wake measurement.
    #[arg(long, default_value = "node")]
    pub wake_workload: String,
    /// Where share.md goes.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
}

/// What one mode (sharing on or off) measured.
#[derive(Clone, Debug, Default)]
pub struct Mode {
    /// Whether clean file pages were shared.
    pub shared: bool,
    /// PSS of one sandbox alone, one sample per run (bytes).
    pub single_pss: Vec<f64>,
    /// Sum of the PSS of N sandboxes hot at once, one sample per run (bytes).
    pub group_pss: Vec<f64>,
    /// First request after a page-fault wake (ms), one per wake.
    pub wake_ms: Vec<f64>,
    /// Hot requests (ms) before the first hibernate.
    pub hot_ms: Vec<f64>,
    /// Errors that cut a measurement short.
    pub errors: Vec<String>,
}

/// The run.
#[derive(Debug, Default)]
pub struct Results {
    /// Command line, host, version, notes.
    pub info: crate::paper::model::RunInfo,
    /// Sandboxes of the memory measurement.
    pub instances: usize,
    /// The workloads (memory, wake).
    pub workloads: (String, String),
    /// Sharing on, then off.
    pub modes: Vec<Mode>,
}

impl Mode {
    /// The median of `v`, or NaN.
    pub fn median(v: &[f64]) -> f64 {
        Summary::of(v).map_or(f64::NAN, |s| s.median)
    }
}

fn workload<'a>(all: &'a [Workload], name: &str) -> anyhow::Result<&'a Workload> {
    all.iter().find(|w| w.name == name).with_context(|| {
        format!(
            "unknown workload {name:?} (known: {})",
            all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Runs the benchmark; returns the exit code.
///
/// # Errors
/// Bad options, or the output directory cannot be written.
pub fn run(args: ShareArgs) -> anyhow::Result<u8> {
    let all = workloads::all();
    let wm = workload(&all, &args.memory_workload)?;
    let ww = workload(&all, &args.wake_workload)?;
    if args.instances == 0 || args.instances > 200 || args.reps == 0 || args.reps > 100 {
        anyhow::bail!("--instances: 1 to 200; --reps: 1 to 100");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    let started = Instant::now();
    let say = |what: &str| eprintln!("[{:7.1}s] {what}", started.elapsed().as_secs_f64());
    let mut roots = Vec::new();
    for w in [wm, ww] {
        say(&format!("{}: preparing the root filesystem", w.name));
        let root = workloads::ensure_root(w.root)?;
        workloads::install(w, &root)?;
        roots.push(root);
    }
    let mut res = Results {
        info: crate::paper::run_info(args.reps, args.instances, false),
        instances: args.instances,
        workloads: (wm.name.to_string(), ww.name.to_string()),
        modes: Vec::new(),
    };
    res.info.notes.push(format!(
        "Sharing on: the default (pages of read-only private mappings of program files map \
         the host's page cache; writable ones copy at the first touch). Sharing off: `torpor run \
         --no-share-files` (every page copied into the sandbox's own memory, as before). \
         Memory: {n} {w} sandboxes started one after the other and all hot at once, one \
         request each, then 2 s to settle; the sum of their holders' PSS \
         (`torpor stats`, `/proc/PID/smaps_rollup`) against {n} times the PSS of one {w} \
         sandbox running alone. PSS divides a shared page among the processes mapping it, so \
         page-cache pages the holders share count once in the sum.",
        n = args.instances,
        w = wm.name
    ));
    res.info.notes.push(format!(
        "Wake: one {w} sandbox with `--wake-mode fault`, 5 hot requests, then {r} times: \
         hibernate (`torpor hibernate`), then one request, timed from connect to the end of \
         the answer. Nothing is evicted from the page cache: the binary and libraries stay \
         cached, as on a host running many sandboxes of one image. With sharing, their pages \
         come back through KVM's own faults on the page cache; without, each is read by the \
         userfaultfd handler (`pread` + `UFFDIO_COPY`).",
        w = ww.name,
        r = args.reps
    ));
    res.info.notes.push(
        "Reading the memory table: with pages copied, the sum is still a little under N \
         times one, since the holders share the torpor binary and the host's libraries. With \
         sharing, one sandbox alone is slightly larger than with copies: its holder maps \
         whole page-cache pages the guest reaches (and those KVM maps ahead of it), where \
         the copies held only what was faulted in; from the second sandbox on, each pays \
         only its share. Writable private mappings (a library's data) are copied in both \
         modes (`mm`'s `cow.rs` says why)."
            .to_string(),
    );
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    for shared in [true, false] {
        let label = if shared { "shared" } else { "copied" };
        let extra: &[&str] = if shared { &[] } else { &["--no-share-files"] };
        let mut mode = Mode {
            shared,
            ..Mode::default()
        };
        let d = Driver::new(&state_base)?;
        if let Err(e) = memory(&d, wm, &roots[0], extra, &args, &say, label, &mut mode) {
            say(&format!("{label}: memory: ERROR: {e:#}"));
            mode.errors.push(format!("memory: {e:#}"));
        }
        if let Err(e) = wake(&d, ww, &roots[1], extra, &args, &say, label, &mut mode) {
            say(&format!("{label}: wake: ERROR: {e:#}"));
            mode.errors.push(format!("wake: {e:#}"));
        }
        res.modes.push(mode);
    }
    res.info.took_s = started.elapsed().as_secs_f64();
    let file = report::write(&args.out, &res)?;
    say(&format!(
        "torpor-bench share: done; wrote {}",
        file.display()
    ));
    Ok(u8::from(res.modes.iter().any(|m| !m.errors.is_empty())))
}

/// Starts `w` with `extra` options and waits until it answers a first request.
fn start_ready<'d>(
    d: &'d Driver,
    w: &Workload,
    root: &Path,
    wake_mode: &str,
    extra: &[&str],
) -> anyhow::Result<Sandbox<'d>> {
    let sb = d.start_with(w, root, wake_mode, extra)?;
    sb.wait_ready(w)?;
    Ok(sb)
}

/// The memory measurement of one mode.
#[allow(clippy::too_many_arguments)]
fn memory(
    d: &Driver,
    w: &Workload,
    root: &Path,
    extra: &[&str],
    args: &ShareArgs,
    say: &dyn Fn(&str),
    label: &str,
    mode: &mut Mode,
) -> anyhow::Result<()> {
    const SETTLE: Duration = Duration::from_secs(2);
    for i in 0..args.reps {
        let one = start_ready(d, w, root, "auto", extra)?;
        one.request(w)?;
        std::thread::sleep(SETTLE);
        let pss = one.pss()?;
        drop(one);
        let mut group = Vec::with_capacity(args.instances);
        for _ in 0..args.instances {
            group.push(start_ready(d, w, root, "auto", extra)?);
        }
        for sb in &group {
            sb.request(w)?;
        }
        std::thread::sleep(SETTLE);
        let mut sum = 0.0;
        for sb in &group {
            sum += sb.pss()?;
        }
        drop(group);
        say(&format!(
            "{label} {}/{}: one {:.2} MiB; {} together {:.2} MiB ({:.2} each)",
            i + 1,
            args.reps,
            pss / report::MIB,
            args.instances,
            sum / report::MIB,
            sum / args.instances as f64 / report::MIB
        ));
        mode.single_pss.push(pss);
        mode.group_pss.push(sum);
    }
    Ok(())
}

/// The wake measurement of one mode.
#[allow(clippy::too_many_arguments)]
fn wake(
    d: &Driver,
    w: &Workload,
    root: &Path,
    extra: &[&str],
    args: &ShareArgs,
    say: &dyn Fn(&str),
    label: &str,
    mode: &mut Mode,
) -> anyhow::Result<()> {
    let sb = start_ready(d, w, root, "fault", extra)?;
    for _ in 0..5 {
        mode.hot_ms.push(sb.request(w)?);
    }
    for i in 0..args.reps {
        std::thread::sleep(Duration::from_millis(500));
        sb.hibernate()?;
        let v = sb.request(w)?;
        // The rest of what the request path touches comes back before the next cycle.
        sb.request(w)?;
        say(&format!(
            "{label} wake {}/{}: first request {v:.1} ms",
            i + 1,
            args.reps
        ));
        mode.wake_ms.push(v);
    }
    Ok(())
}
