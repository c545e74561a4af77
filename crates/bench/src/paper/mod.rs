//! `torpor-bench paper`: the paper's evaluation (its Figures 6 and 7) on this machine.
//!
//! For each workload (`workloads.rs`) it measures, through the `torpor` command itself:
//! cold start (launch to the first correct response), hot request latency, the first request
//! after a hibernate with page-fault wake and with REAP wake, woken request latency, and the
//! PSS of hot, hibernated and woken sandboxes with several instances running. Results go to
//! CSV files, a Markdown report with the paper's ratios beside ours, and two PNG plots
//! (`report.rs`, `plot.rs`, the paper's figures in `reference.rs`).

pub mod driver;
pub mod http;
pub mod model;
pub mod native;
pub mod plot;
pub mod reference;
pub mod report;
pub mod workloads;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use driver::{Driver, Sandbox};
use model::{Metric, RunInfo, WorkloadResult};
use workloads::Workload;

/// Options of `torpor-bench paper`.
#[derive(clap::Args, Debug)]
pub struct PaperArgs {
    /// Fewer repetitions and instances (every workload still runs): under 10 minutes.
    #[arg(long)]
    pub quick: bool,
    /// Where the CSV files, paper.md and the plots go.
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    /// Keep the host page cache (by default the sandbox's swap and REAP files and its root
    /// filesystem's files are evicted before every wake and cold start, as after a long idle
    /// period; with this, wakes read files the host still caches).
    #[arg(long)]
    pub warm_cache: bool,
    /// Only these workloads (comma separated: python,node,go,java,float,image-small,
    /// image-large,video).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// Repetition counts.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Cold starts, hibernate/wake cycles per wake mode.
    reps: usize,
    /// Requests before measuring: the runtime warms up (JIT compilers: Node.js, Java), so
    /// that "hot" means an initialised sandbox.
    warmup: usize,
    /// Hot requests (at most; see `budget`).
    hot: usize,
    /// Woken requests after each wake (at most).
    woken: usize,
    /// Instances for the PSS measurement.
    instances: usize,
    /// Time budget of a series of requests: a slow workload takes fewer (at least 3).
    budget: Duration,
}

const FULL: Plan = Plan {
    reps: 5,
    warmup: 10,
    hot: 100,
    woken: 5,
    instances: 10,
    budget: Duration::from_secs(20),
};

const QUICK: Plan = Plan {
    reps: 3,
    warmup: 5,
    hot: 20,
    woken: 3,
    instances: 3,
    budget: Duration::from_secs(6),
};

/// Pause before a hibernate, so that the server has finished with the last connection.
const SETTLE: Duration = Duration::from_millis(200);

/// Progress lines on stderr.
struct Progress {
    start: Instant,
    total: usize,
    index: usize,
}

impl Progress {
    fn say(&self, w: &Workload, what: &str) {
        let mut e = std::io::stderr().lock();
        let _ = writeln!(
            e,
            "[{:7.1}s] ({}/{}) {:<12} {what}",
            self.start.elapsed().as_secs_f64(),
            self.index,
            self.total,
            w.name
        );
    }
}

/// Runs the benchmark; returns the exit code.
///
/// # Errors
/// If the output directory cannot be written; a workload's own failure is recorded in its
/// results and the run goes on.
pub fn run(args: PaperArgs) -> anyhow::Result<u8> {
    let plan = if args.quick { QUICK } else { FULL };
    let all = workloads::all();
    for o in &args.only {
        if !all.iter().any(|w| w.name == o) {
            anyhow::bail!(
                "unknown workload {o:?} (known: {})",
                all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let chosen: Vec<&Workload> = all
        .iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| o == w.name))
        .collect();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create output directory {}", args.out.display()))?;
    let started = Instant::now();
    let mut info = run_info(plan.reps, plan.instances, args.quick);
    let evict = !args.warm_cache;
    info.notes.push(if evict {
        "Before every measured wake, the sandbox's swap and REAP files and every file of its \
         root filesystem are evicted from the host page cache (written back, then \
         POSIX_FADV_DONTNEED), and before every cold start the root's files: the wake reads \
         them from disk, as after a long idle period, while the rest of the host (the torpor \
         binary, host libraries) stays cached, as on a host that runs many sandboxes."
            .into()
    } else {
        "`--warm-cache`: nothing is evicted from the host page cache, so wakes and cold \
         starts read files the host still caches (the swap and REAP files written at the \
         hibernate among them)."
            .into()
    });
    info.notes.push(format!(
        "Each latency series: up to {} hot requests and {} woken requests per wake (after one \
         unmeasured request following the first), fewer for a slow workload (a series stops after {} s, with at least 3 requests); {} requests warm \
         each sandbox first. Cold starts and wakes: {} each. PSS: {} instances of the workload \
         running at once, each measured (torpor stats: the holder's /proc/PID/smaps_rollup, and on the trap platform its stub \
         processes' too).",
        plan.hot,
        plan.woken,
        plan.budget.as_secs(),
        plan.warmup,
        plan.reps,
        plan.instances
    ));
    info.notes.push(
        "Page-fault wake: `--wake-mode fault`. REAP wake: `--wake-mode reap`, after one \
         recording wake. PSS instances use the default `--wake-mode auto`."
            .into(),
    );
    let state_base =
        std::env::var_os("TORPOR_STATE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let driver = Driver::new(&state_base)?;
    let mut results = Vec::new();
    let mut progress = Progress {
        start: started,
        total: chosen.len(),
        index: 0,
    };
    for w in chosen {
        progress.index += 1;
        let mut r = WorkloadResult {
            name: w.name.to_string(),
            label: w.label.to_string(),
            ..WorkloadResult::default()
        };
        progress.say(w, "preparing the root filesystem");
        match workloads::ensure_root(w.root).and_then(|root| {
            workloads::install(w, &root)?;
            Ok(root)
        }) {
            Ok(root) => measure(&driver, w, &root, plan, evict, &progress, &mut r),
            Err(e) => r.errors.push(format!("{e:#}")),
        }
        for e in &r.errors {
            progress.say(w, &format!("ERROR: {e}"));
        }
        results.push(r);
    }
    info.took_s = started.elapsed().as_secs_f64();
    // Also draws the two plots (or says in paper.md why it could not).
    let files = report::write_report(&args.out, &info, &results)?;
    print_summary(&results);
    eprintln!(
        "torpor-bench paper: done in {:.0} s; wrote {} and the plots in {}",
        info.took_s,
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        args.out.display()
    );
    Ok(if results.iter().any(|r| !r.errors.is_empty()) {
        1
    } else {
        0
    })
}

/// Runs every measurement of `w`; a failure ends this workload's measurements (recorded as
/// an error), keeping what was measured.
fn measure(
    d: &Driver,
    w: &Workload,
    root: &Path,
    plan: Plan,
    evict: bool,
    p: &Progress,
    r: &mut WorkloadResult,
) {
    let root_files = if evict {
        driver::files_under(root)
    } else {
        Vec::new()
    };
    let steps: [(&str, StepFn); 5] = [
        ("cold start", cold),
        ("hot, page-fault wake, woken", fault_wakes),
        ("REAP wake", reap_wakes),
        ("clone start", clone_starts),
        ("PSS", pss),
    ];
    for (name, step) in steps {
        let ctx = Ctx {
            d,
            w,
            root,
            plan,
            evict,
            root_files: &root_files,
            p,
        };
        if let Err(e) = step(&ctx, r) {
            r.errors.push(format!("{name}: {e:#}"));
        }
    }
}

type StepFn = fn(&Ctx<'_>, &mut WorkloadResult) -> anyhow::Result<()>;

struct Ctx<'a> {
    d: &'a Driver,
    w: &'a Workload,
    root: &'a Path,
    plan: Plan,
    /// Evict the sandbox's files from the host page cache before wakes and cold starts.
    evict: bool,
    /// The root filesystem's files.
    root_files: &'a [PathBuf],
    p: &'a Progress,
}

impl Ctx<'_> {
    fn say(&self, what: &str) {
        self.p.say(self.w, what);
    }

    /// A ready, warmed-up sandbox. One that fails to start is started again once; the
    /// failure is kept for the report.
    fn start_ready(&self, mode: &str, retries: &mut Vec<String>) -> anyhow::Result<Sandbox<'_>> {
        let start = || -> anyhow::Result<Sandbox<'_>> {
            let sb = self.d.start(self.w, self.root, mode)?;
            sb.wait_ready(self.w)?;
            Ok(sb)
        };
        let sb = match start() {
            Ok(sb) => sb,
            Err(e) => {
                self.say(&format!("start failed, starting again: {e:#}"));
                retries.push(format!("{e:#}"));
                start()?
            }
        };
        for _ in 0..self.plan.warmup {
            sb.request(self.w)?;
        }
        Ok(sb)
    }

    /// The workload's server run natively from the same root, ready and warmed up.
    fn start_native(&self) -> anyhow::Result<native::Native> {
        let mut n = native::Native::start(self.w, self.root, &std::env::temp_dir())?;
        n.wait_ready(self.w)?;
        for _ in 0..self.plan.warmup {
            n.request(self.w)?;
        }
        Ok(n)
    }

    /// [`Ctx::series`], each request to the sandbox followed by one to `native` (if any):
    /// the sandbox's latencies and the native ones.
    fn series_beside(
        &self,
        sb: &Sandbox<'_>,
        native: Option<&native::Native>,
        max: usize,
    ) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let t = Instant::now();
        let (mut v, mut base) = (Vec::new(), Vec::new());
        while v.len() < max && (v.len() < 3 || t.elapsed() < self.plan.budget) {
            v.push(sb.request(self.w)?);
            if let Some(n) = native {
                base.push(n.request(self.w)?);
            }
        }
        Ok((v, base))
    }

    /// Up to `max` timed requests within the plan's budget (at least 3).
    fn series(&self, sb: &Sandbox<'_>, max: usize) -> anyhow::Result<Vec<f64>> {
        let t = Instant::now();
        let mut v = Vec::new();
        while v.len() < max && (v.len() < 3 || t.elapsed() < self.plan.budget) {
            v.push(sb.request(self.w)?);
        }
        Ok(v)
    }

    fn hibernate(&self, sb: &Sandbox<'_>) -> anyhow::Result<()> {
        std::thread::sleep(SETTLE);
        sb.hibernate()?;
        if self.evict {
            let mut files = sb.state_files();
            files.extend_from_slice(self.root_files);
            driver::evict(&files);
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn cold(c: &Ctx<'_>, r: &mut WorkloadResult) -> anyhow::Result<()> {
    for i in 0..c.plan.reps {
        if c.evict {
            driver::evict(c.root_files);
        }
        let t = Instant::now();
        let sb = c.d.start(c.w, c.root, "fault")?;
        sb.wait_ready(c.w)?;
        let v = ms(t.elapsed());
        r.push(Metric::ColdMs, v);
        c.say(&format!("cold start {}/{}: {v:.0} ms", i + 1, c.plan.reps));
    }
    Ok(())
}

/// Clones of a warmed-up sandbox's checkpoint: launch to the first response, the
/// checkpoint's files (its memory file made afresh by the first) and the root's evicted.
fn clone_starts(c: &Ctx<'_>, r: &mut WorkloadResult) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "torpor-paper-template-{}-{}",
        std::process::id(),
        c.w.name
    ));
    let _ = torpor::cowroot::remove_all(&dir);
    let result = (|| -> anyhow::Result<()> {
        {
            let sb = c.start_ready("auto", &mut r.retries)?;
            std::thread::sleep(SETTLE);
            c.d.checkpoint(&sb, &dir)?;
        }
        for i in 0..c.plan.reps {
            if c.evict {
                let mut files = driver::files_under(&dir);
                files.extend_from_slice(c.root_files);
                driver::evict(&files);
            }
            let t = Instant::now();
            let sb = c.d.start_from_checkpoint(c.w, &dir, true)?;
            sb.wait_ready(c.w)?;
            let v = ms(t.elapsed());
            r.push(Metric::CloneMs, v);
            c.say(&format!("clone start {}/{}: {v:.0} ms", i + 1, c.plan.reps));
        }
        Ok(())
    })();
    let _ = torpor::cowroot::remove_all(&dir);
    result
}

fn fault_wakes(c: &Ctx<'_>, r: &mut WorkloadResult) -> anyhow::Result<()> {
    let sb = c.start_ready("fault", &mut r.retries)?;
    // The same server run natively, its requests in turn with the sandbox's (a failure to
    // run it is reported; the sandbox's measurements go on).
    let native = match c.start_native() {
        Ok(n) => Some(n),
        Err(e) => {
            r.errors.push(format!("native baseline: {e:#}"));
            None
        }
    };
    let (hot, base) = c.series_beside(&sb, native.as_ref(), c.plan.hot)?;
    drop(native);
    let median = |v: &[f64]| model::Summary::of(v).map_or(0.0, |s| s.median);
    c.say(&format!(
        "hot: {} requests, median {:.2} ms (native {:.2} ms)",
        hot.len(),
        median(&hot),
        median(&base)
    ));
    for v in hot {
        r.push(Metric::HotMs, v);
    }
    for v in base {
        r.push(Metric::NativeHotMs, v);
    }
    for i in 0..c.plan.reps {
        c.hibernate(&sb)?;
        let v = sb.request(c.w)?;
        r.push(Metric::FaultWakeMs, v);
        // One more request brings back what the first one did not touch (its reply path,
        // say); the woken series starts after it.
        sb.request(c.w)?;
        let woken = c.series(&sb, c.plan.woken)?;
        c.say(&format!(
            "page-fault wake {}/{}: first request {v:.1} ms, woken median {:.1} ms",
            i + 1,
            c.plan.reps,
            model::Summary::of(&woken).map_or(0.0, |s| s.median)
        ));
        for v in woken {
            r.push(Metric::WokenMs, v);
        }
    }
    Ok(())
}

fn reap_wakes(c: &Ctx<'_>, r: &mut WorkloadResult) -> anyhow::Result<()> {
    let sb = c.start_ready("reap", &mut r.retries)?;
    // The first wake records the working set; the next hibernate writes the REAP file.
    c.hibernate(&sb)?;
    sb.request(c.w)?;
    for i in 0..c.plan.reps {
        c.hibernate(&sb)?;
        let v = sb.request(c.w)?;
        r.push(Metric::ReapWakeMs, v);
        c.say(&format!(
            "REAP wake {}/{}: first request {v:.1} ms",
            i + 1,
            c.plan.reps
        ));
    }
    Ok(())
}

fn pss(c: &Ctx<'_>, r: &mut WorkloadResult) -> anyhow::Result<()> {
    let n = c.plan.instances;
    let mut sbs = Vec::new();
    for i in 0..n {
        sbs.push(c.start_ready("auto", &mut r.retries)?);
        c.say(&format!("PSS: instance {}/{n} ready", i + 1));
    }
    std::thread::sleep(SETTLE);
    let mut hot = Vec::new();
    for sb in &sbs {
        hot.push(sb.pss()?);
    }
    let mut hib = Vec::new();
    for sb in &sbs {
        sb.hibernate()?;
    }
    for sb in &sbs {
        hib.push(sb.pss()?);
    }
    for sb in &sbs {
        sb.request(c.w)?;
        sb.request(c.w)?;
    }
    std::thread::sleep(SETTLE);
    let mut woken = Vec::new();
    for sb in &sbs {
        woken.push(sb.pss()?);
    }
    let mib = |v: &[f64]| model::Summary::of(v).map_or(0.0, |s| s.median / f64::from(1 << 20));
    c.say(&format!(
        "PSS with {n} instances: hot {:.1} MiB, hibernated {:.1} MiB, woken {:.1} MiB",
        mib(&hot),
        mib(&hib),
        mib(&woken)
    ));
    for (m, v) in [
        (Metric::PssHot, hot),
        (Metric::PssHibernated, hib),
        (Metric::PssWoken, woken),
    ] {
        for x in v {
            r.push(m, x);
        }
    }
    Ok(())
}

/// Prints the medians as a plain table on stdout.
fn print_summary(results: &[WorkloadResult]) {
    println!(
        "{:<14} {:>9} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9}",
        "workload",
        "cold ms",
        "hot ms",
        "fault ms",
        "REAP ms",
        "woken ms",
        "hot MiB",
        "hib MiB",
        "woken MiB"
    );
    for r in results {
        let f = |m: Metric| {
            r.median(m).map_or("-".to_string(), |v| {
                if m.is_latency() {
                    format!("{v:.1}")
                } else {
                    format!("{:.1}", v / f64::from(1 << 20))
                }
            })
        };
        println!(
            "{:<14} {:>9} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9}",
            r.name,
            f(Metric::ColdMs),
            f(Metric::HotMs),
            f(Metric::FaultWakeMs),
            f(Metric::ReapWakeMs),
            f(Metric::WokenMs),
            f(Metric::PssHot),
            f(Metric::PssHibernated),
            f(Metric::PssWoken)
        );
    }
}

/// What a benchmark's report says of its run: the command line, the start time, the host
/// and torpor's version (the notes and the duration are the benchmark's to fill in).
pub fn run_info(reps: usize, instances: usize, quick: bool) -> RunInfo {
    RunInfo {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        quick,
        reps,
        instances,
        started: command_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        host: host_description(),
        version: format!(
            "torpor {} ({})",
            env!("CARGO_PKG_VERSION"),
            command_line("git", &["rev-parse", "--short", "HEAD"])
        ),
        platform: torpor::platforms::resolved().name().to_string(),
        ..RunInfo::default()
    }
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".into(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
        )
}

fn host_description() -> String {
    let kvm = if Path::new("/sys/module/kvm_pvm").exists() {
        "kvm_pvm (software shadow paging)"
    } else if Path::new("/sys/module/kvm_intel").exists() {
        "kvm_intel"
    } else if Path::new("/sys/module/kvm_amd").exists() {
        "kvm_amd"
    } else {
        "unknown KVM"
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb >> 20);
    format!(
        "Linux {}, {cpus} CPUs, {mem} GiB, {kvm}",
        command_line("uname", &["-r"])
    )
}
