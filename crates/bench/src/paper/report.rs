//! The files `torpor-bench paper` leaves in its output directory:
//!
//! ```text
//! samples.csv        workload,metric,rep,value           one row per sample (rep from 1)
//! summary.csv        workload,metric,n,median,min,max    one row per workload × metric;
//!                                                        n = 0 and empty fields if not measured
//! fig6_latency.png   Figure 6 (plot::plot_latency)
//! fig7_memory.png    Figure 7 (plot::plot_memory)
//! paper.md           the report: run, tables, torpor vs paper, generated findings
//! ```
//!
//! `metric` is [`Metric::key`]; values are raw (ms, bytes), printed in full precision.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::model::{Metric, RunInfo, Summary, WorkloadResult};
use super::plot;
use super::reference::{self, PaperFigures};

/// What is printed for a missing value.
pub const MISSING: &str = "—";

/// File name of the Figure 6 plot.
pub const FIG6: &str = "fig6_latency.png";

/// File name of the Figure 7 plot.
pub const FIG7: &str = "fig7_memory.png";

/// Bytes per MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// Writes `samples.csv`, `summary.csv`, the two plots and `paper.md` into `out_dir` (created
/// if needed) and returns the paths written. A plot that cannot be drawn (no font, say) does
/// not stop the report: `paper.md` then says why in place of the image.
///
/// # Errors
///
/// `out_dir` cannot be created, or a CSV or Markdown file cannot be written.
pub fn write_report(
    out_dir: &Path,
    info: &RunInfo,
    results: &[WorkloadResult],
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut written = Vec::new();
    written.push(write_file(out_dir, "samples.csv", &samples_csv(results))?);
    written.push(write_file(out_dir, "summary.csv", &summary_csv(results))?);
    let mut plot_errors = [None, None];
    for (i, name) in [FIG6, FIG7].into_iter().enumerate() {
        let path = out_dir.join(name);
        let drawn = if i == 0 {
            plot::plot_latency(&path, results)
        } else {
            plot::plot_memory(&path, results)
        };
        match drawn {
            Ok(()) => written.push(path),
            Err(e) => plot_errors[i] = Some(format!("{e:#}")),
        }
    }
    let md = markdown(info, results, &plot_errors);
    written.push(write_file(out_dir, "paper.md", &md)?);
    Ok(written)
}

/// Writes `text` to `dir/name` and returns the path.
fn write_file(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `samples.csv`: `workload,metric,rep,value`, one row per sample, `rep` counting from 1 in
/// the order taken.
pub fn samples_csv(results: &[WorkloadResult]) -> String {
    let mut out = String::from("workload,metric,rep,value\n");
    for w in results {
        for m in Metric::ALL {
            for (i, v) in w.samples.get(&m).into_iter().flatten().enumerate() {
                let _ = writeln!(out, "{},{},{},{}", csv_field(&w.name), m.key(), i + 1, v);
            }
        }
    }
    out
}

/// `summary.csv`: `workload,metric,n,median,min,max`, one row per workload and metric; a
/// metric not measured has `n` 0 and empty statistics.
pub fn summary_csv(results: &[WorkloadResult]) -> String {
    let mut out = String::from("workload,metric,n,median,min,max\n");
    for w in results {
        for m in Metric::ALL {
            let name = csv_field(&w.name);
            let _ = match w.summary(m) {
                Some(s) => writeln!(
                    out,
                    "{name},{},{},{},{},{}",
                    m.key(),
                    s.n,
                    s.median,
                    s.min,
                    s.max
                ),
                None => writeln!(out, "{name},{},0,,,", m.key()),
            };
        }
    }
    out
}

/// A CSV field, quoted if it holds a comma, quote or line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A number with about three significant digits: `1234`, `56.7`, `8.91`, `0.123`.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// Median with its min–max spread, `scale` dividing every value: `12.3 (11.9–13.0)`; just
/// the median for a single sample or no spread; [`MISSING`] without samples.
pub fn fmt_summary(s: Option<Summary>, scale: f64) -> String {
    match s {
        None => MISSING.to_string(),
        Some(s) if s.n < 2 || s.max <= s.min => fmt_num(s.median / scale),
        Some(s) => format!(
            "{} ({}–{})",
            fmt_num(s.median / scale),
            fmt_num(s.min / scale),
            fmt_num(s.max / scale)
        ),
    }
}

/// A ratio as a percentage: one decimal under 10 % (`4.1 %`), none above (`56 %`).
pub fn fmt_pct(r: Option<f64>) -> String {
    match r {
        None => MISSING.to_string(),
        Some(r) if (r * 100.0).abs() < 10.0 => format!("{:.1} %", r * 100.0),
        Some(r) => format!("{:.0} %", r * 100.0),
    }
}

/// A paper ratio as a whole percentage, the precision the paper gives (`3 %`, `10 %`).
fn fmt_paper_pct(r: Option<f64>) -> String {
    match r {
        None => MISSING.to_string(),
        Some(r) => format!("{:.0} %", r * 100.0),
    }
}

/// A ratio as a factor: `1.35×`.
pub fn fmt_factor(r: Option<f64>) -> String {
    match r {
        None => MISSING.to_string(),
        Some(r) => format!("{r:.2}×"),
    }
}

/// A paper factor: every one the paper gives means "about equal" (see
/// [`reference`]), hence `≈1.0×`.
fn fmt_paper_factor(r: Option<f64>) -> String {
    match r {
        None => MISSING.to_string(),
        Some(r) => format!("≈{r:.1}×"),
    }
}

/// The section setting each workload's hot latency beside the same server's run natively
/// (a chroot of its root on the host), their requests taken in turn in the same run.
pub fn native_section(results: &[WorkloadResult]) -> String {
    let mut md = String::from("## Hot latency beside native\n\n");
    md.push_str(
        "The same server run natively (in a chroot of its root, on the host), its requests \
         taken in turn with the sandbox's hot ones, from the same client. Median (min–max) \
         in ms; the ratio is of the medians. Issue 16 asks the Python and Node.js hellos to \
         stay within 1.5× of native on the trap platform.\n\n",
    );
    md.push_str("| Workload | Native | Hot | Hot/native |\n|---|---:|---:|---:|\n");
    for w in results {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            cell(label(w)),
            fmt_summary(w.summary(Metric::NativeHotMs), 1.0),
            fmt_summary(w.summary(Metric::HotMs), 1.0),
            w.ratio(Metric::HotMs, Metric::NativeHotMs)
                .map_or(MISSING.to_string(), |r| format!("{r:.2}×"))
        );
    }
    md.push('\n');
    md
}

/// Ours beside the paper's: `4.1 % (paper 25 %)`.
pub fn ratio_cell(ours: Option<f64>, paper: Option<f64>, percent: bool) -> String {
    if percent {
        format!("{} (paper {})", fmt_pct(ours), fmt_paper_pct(paper))
    } else {
        format!("{} (paper {})", fmt_factor(ours), fmt_paper_factor(paper))
    }
}

/// Our ratios of one workload, the same quantities as [`PaperFigures`].
fn our_figures(w: &WorkloadResult) -> PaperFigures {
    PaperFigures {
        hibernated_over_hot_pss: w.ratio(Metric::PssHibernated, Metric::PssHot),
        woken_over_hot_pss: w.ratio(Metric::PssWoken, Metric::PssHot),
        reap_over_cold: w.ratio(Metric::ReapWakeMs, Metric::ColdMs),
        fault_over_reap: w.ratio(Metric::FaultWakeMs, Metric::ReapWakeMs),
        woken_over_hot_latency: w.ratio(Metric::WokenMs, Metric::HotMs),
    }
}

/// One of the three targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Hibernated/hot PSS at or below the paper's ratio.
    HibernatedPss,
    /// First request with REAP at or below the paper's share of the cold start.
    ReapFirstRequest,
    /// Woken latency within 10 % of hot.
    WokenLatency,
}

/// How one workload fares against one target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// Our ratio.
    pub ours: f64,
    /// The bar it is held to.
    pub limit: f64,
    /// Whether the bar is not the workload's own figure from the paper but the top of the
    /// paper's stated range (the paper gives no figure for this workload).
    pub range_top: bool,
}

impl Verdict {
    /// Whether the target is met.
    pub fn met(&self) -> bool {
        self.ours <= self.limit
    }
}

/// How workload `w` fares against `target`; `None` if we lack the measurement.
pub fn verdict(w: &WorkloadResult, target: Target) -> Option<Verdict> {
    let ours = our_figures(w);
    let paper = reference::paper_figures(&w.name);
    let (ours, paper, top) = match target {
        Target::HibernatedPss => (
            ours.hibernated_over_hot_pss?,
            paper.hibernated_over_hot_pss,
            reference::HIBERNATED_OVER_HOT_PSS_RANGE.1,
        ),
        Target::ReapFirstRequest => (
            ours.reap_over_cold?,
            paper.reap_over_cold,
            reference::REAP_OVER_COLD_RANGE.1,
        ),
        Target::WokenLatency => {
            return Some(Verdict {
                ours: ours.woken_over_hot_latency?,
                limit: reference::WOKEN_OVER_HOT_LATENCY_LIMIT,
                range_top: false,
            })
        }
    };
    Some(Verdict {
        ours,
        limit: paper.unwrap_or(top),
        range_top: paper.is_none(),
    })
}

/// The table cell of a verdict: `✓ met`, `✗ missed`, with `†` when held to the top of the
/// paper's range; [`MISSING`] without a measurement.
pub fn verdict_cell(v: Option<Verdict>) -> String {
    match v {
        None => MISSING.to_string(),
        Some(v) => format!(
            "{}{}",
            if v.met() { "✓ met" } else { "✗ missed" },
            if v.range_top { " †" } else { "" }
        ),
    }
}

/// A table cell: pipes escaped, line breaks flattened.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The label of a workload for tables and text.
fn label(w: &WorkloadResult) -> &str {
    if w.label.is_empty() {
        &w.name
    } else {
        &w.label
    }
}

/// A duration in seconds as `1 h 02 min`, `3 min 05 s` or `42.0 s`.
fn fmt_duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return MISSING.to_string();
    }
    let whole = s.round() as u64;
    if whole >= 3600 {
        format!("{} h {:02} min", whole / 3600, whole % 3600 / 60)
    } else if whole >= 60 {
        format!("{} min {:02} s", whole / 60, whole % 60)
    } else {
        format!("{s:.1} s")
    }
}

/// `text`, or [`MISSING`] if empty.
fn or_missing(text: &str) -> &str {
    if text.trim().is_empty() {
        MISSING
    } else {
        text
    }
}

/// The whole of `paper.md`. `plot_errors` holds, for Figure 6 then Figure 7, why the plot
/// could not be drawn, if it could not.
pub fn markdown(
    info: &RunInfo,
    results: &[WorkloadResult],
    plot_errors: &[Option<String>; 2],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# torpor vs the Hibernate Container paper\n");
    let _ = writeln!(
        md,
        "The evaluation of \"Hibernate Container: A Deflated Container Mode for Fast Startup \
         and High-density Deployment in Serverless Computing\" (Figures 6 and 7), run on \
         torpor. Raw samples are in `samples.csv`, their summaries in `summary.csv`.\n"
    );

    md.push_str("## How this was produced\n\n");
    let _ = writeln!(md, "- Command: `{}`", or_missing(&info.command));
    let _ = writeln!(md, "- Started: {}", or_missing(&info.started));
    let _ = writeln!(md, "- Host: {}", or_missing(&info.host));
    let _ = writeln!(
        md,
        "- Platform: {} (`--platform`)",
        or_missing(&info.platform)
    );
    let _ = writeln!(md, "- torpor: {}", or_missing(&info.version));
    let _ = writeln!(
        md,
        "- Mode: {}; {} repetitions of each latency measurement; PSS with {} instances running",
        if info.quick {
            "quick (`--quick`)"
        } else {
            "full"
        },
        info.reps,
        info.instances
    );
    let _ = writeln!(md, "- Took: {}", fmt_duration(info.took_s));
    if !info.notes.is_empty() {
        md.push_str("- Notes:\n");
        for n in &info.notes {
            let _ = writeln!(md, "  - {}", n.replace('\n', " "));
        }
    }
    md.push('\n');

    md.push_str("## Latency (Figure 6)\n\n");
    md.push_str("Median (min–max) in ms. Cold start: runtime launch to the first response. ");
    md.push_str("Fault and REAP wake: the first request after a hibernate, pages coming back ");
    md.push_str("by page faults or by prefetch of the recorded working set. Woken: later ");
    md.push_str("requests to the woken sandbox. Clone start: a clone of the warmed-up ");
    md.push_str("sandbox's checkpoint (`torpor run --from`) to its first response, the ");
    md.push_str("checkpoint's and the root's files evicted first (`torpor-bench snapshots` ");
    md.push_str("has restores and more).\n\n");
    md.push_str("| Workload | Cold start | Hot | Fault wake | REAP wake | Woken | Clone start |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for w in results {
        let _ = write!(md, "| {} |", cell(label(w)));
        for m in [
            Metric::ColdMs,
            Metric::HotMs,
            Metric::FaultWakeMs,
            Metric::ReapWakeMs,
            Metric::WokenMs,
            Metric::CloneMs,
        ] {
            let _ = write!(md, " {} |", fmt_summary(w.summary(m), 1.0));
        }
        md.push('\n');
    }
    md.push('\n');

    md.push_str(&native_section(results));

    md.push_str("## Memory (Figure 7)\n\n");
    let _ = writeln!(
        md,
        "PSS of one sandbox, median (min–max) in MiB, with {} instances running.\n",
        info.instances
    );
    md.push_str("| Workload | Hot | Hibernated | Woken |\n");
    md.push_str("|---|---:|---:|---:|\n");
    for w in results {
        let _ = write!(md, "| {} |", cell(label(w)));
        for m in [Metric::PssHot, Metric::PssHibernated, Metric::PssWoken] {
            let _ = write!(md, " {} |", fmt_summary(w.summary(m), MIB));
        }
        md.push('\n');
    }
    md.push('\n');

    md.push_str("## torpor vs paper\n\n");
    md.push_str("Ratios of medians, ours first, the paper's in brackets. Targets: hibernated ");
    md.push_str("PSS at or below the paper's share of hot; first request with REAP at or below ");
    md.push_str("the paper's share of the cold start; woken latency within 10 % of hot ");
    md.push_str("(woken/hot ≤ 1.10).\n\n");
    md.push_str(
        "| Workload | Hibernated/hot PSS | Woken/hot PSS | REAP/cold | Fault/REAP | \
         Woken/hot latency | PSS target | REAP target | Woken target |\n",
    );
    md.push_str("|---|---:|---:|---:|---:|---:|:---:|:---:|:---:|\n");
    for w in results {
        let ours = our_figures(w);
        let paper = reference::paper_figures(&w.name);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(label(w)),
            ratio_cell(
                ours.hibernated_over_hot_pss,
                paper.hibernated_over_hot_pss,
                true
            ),
            ratio_cell(ours.woken_over_hot_pss, paper.woken_over_hot_pss, true),
            ratio_cell(ours.reap_over_cold, paper.reap_over_cold, true),
            ratio_cell(ours.fault_over_reap, paper.fault_over_reap, false),
            ratio_cell(
                ours.woken_over_hot_latency,
                paper.woken_over_hot_latency,
                false
            ),
            verdict_cell(verdict(w, Target::HibernatedPss)),
            verdict_cell(verdict(w, Target::ReapFirstRequest)),
            verdict_cell(verdict(w, Target::WokenLatency)),
        );
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "† The paper gives no figure for this workload; held to the top of its stated range \
         ({} hibernated/hot PSS, {} REAP/cold).\n",
        fmt_paper_pct(Some(reference::HIBERNATED_OVER_HOT_PSS_RANGE.1)),
        fmt_paper_pct(Some(reference::REAP_OVER_COLD_RANGE.1)),
    );
    md.push_str(
        "The paper's figures come from the text of its §4.1 and §4.2 (the extremes of each \
         range), some derived from whole-MB values; \"≈1.0×\" stands for \"about the same\" \
         (woken vs hot latency) and \"negligible difference\" (fault vs REAP for the 2.6 MB \
         image). The paper's 2.6 MB image figures are set beside our `image-large`. Details: \
         `crates/bench/src/paper/reference.rs`.\n\n",
    );

    md.push_str("## Plots\n\n");
    for (file, alt, err) in [
        (FIG6, "Figure 6: latency", &plot_errors[0]),
        (FIG7, "Figure 7: memory", &plot_errors[1]),
    ] {
        match err {
            None => {
                let _ = writeln!(md, "![{alt}]({file})\n");
            }
            Some(e) => {
                let _ = writeln!(md, "{alt}: not drawn ({}).\n", e.replace('\n', " "));
            }
        }
    }

    md.push_str("## Figure 6: latency\n\n");
    md.push_str(&latency_findings(results, &info.platform));
    md.push_str("\n\n## Figure 7: memory\n\n");
    md.push_str(&memory_findings(results));
    md.push('\n');

    let retried: Vec<_> = results.iter().filter(|w| !w.retries.is_empty()).collect();
    if !retried.is_empty() {
        md.push_str(
            "\n## Sandboxes started again\n\nA sandbox that did not answer was started again \
             once; these failures happened (the measurements use the second start):\n\n",
        );
        for w in retried {
            for e in &w.retries {
                let _ = writeln!(md, "- {}: {}", label(w), e.replace('\n', " "));
            }
        }
    }
    let errors: Vec<_> = results.iter().filter(|w| !w.errors.is_empty()).collect();
    if !errors.is_empty() {
        md.push_str("\n## Errors\n\n");
        for w in errors {
            for e in &w.errors {
                let _ = writeln!(md, "- {}: {}", label(w), e.replace('\n', " "));
            }
        }
    }
    md
}

/// `A (x), B (y) and C (z)`.
fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The lines on one target: a sentence with the count, then a bullet per workload, misses
/// first, each with our ratio against the bar.
fn target_block(
    results: &[WorkloadResult],
    target: Target,
    what: &str,
    show: impl Fn(&Verdict) -> String,
) -> String {
    let mut met = Vec::new();
    let mut missed = Vec::new();
    let mut unmeasured = Vec::new();
    for w in results {
        match verdict(w, target) {
            Some(v) if v.met() => met.push(format!("- ✓ {}: {}", label(w), show(&v))),
            Some(v) => missed.push(format!("- ✗ {}: {}", label(w), show(&v))),
            None => unmeasured.push(label(w).to_string()),
        }
    }
    let measured = met.len() + missed.len();
    let mut s = if measured == 0 {
        format!("{what}: no workload measured.")
    } else {
        format!(
            "{what}: met by {} of {measured} measured workloads.",
            met.len()
        )
    };
    if !unmeasured.is_empty() {
        let _ = write!(s, " Not measured: {}.", join(&unmeasured));
    }
    if measured > 0 {
        s.push_str("\n\n");
        s.push_str(&[missed, met].concat().join("\n"));
    }
    s
}

/// A ratio held to its bar: `4.1 % vs 25 % (20.9 points under)`.
fn pct_against(v: &Verdict) -> String {
    let diff = (v.ours - v.limit) * 100.0;
    format!(
        "{} vs {}{} ({:.1} points {})",
        fmt_pct(Some(v.ours)),
        fmt_paper_pct(Some(v.limit)),
        if v.range_top { " †" } else { "" },
        diff.abs(),
        if diff <= 0.0 { "under" } else { "over" }
    )
}

/// A value with the label of its workload.
type Labelled<'a> = (f64, &'a str);

/// The smallest and largest value of `f` over the workloads, with their labels.
fn extremes(
    results: &[WorkloadResult],
    f: impl Fn(&WorkloadResult) -> Option<f64>,
) -> Option<(Labelled<'_>, Labelled<'_>)> {
    let vals: Vec<Labelled> = results
        .iter()
        .filter_map(|w| f(w).map(|v| (v, label(w))))
        .collect();
    let lo = vals.iter().copied().min_by(|a, b| a.0.total_cmp(&b.0))?;
    let hi = vals.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some((lo, hi))
}

/// The generated paragraph under "Figure 6: latency".
pub fn latency_findings(results: &[WorkloadResult], platform: &str) -> String {
    let mut out = Vec::new();
    out.push(target_block(
        results,
        Target::ReapFirstRequest,
        "First request after a hibernate with REAP at or below the paper's share of the cold \
         start",
        pct_against,
    ));
    out.push(target_block(
        results,
        Target::WokenLatency,
        "Woken latency within 10 % of hot",
        |v| {
            let diff = (v.ours - 1.0) * 100.0;
            format!(
                "woken/hot {} ({:.0} % {})",
                fmt_factor(Some(v.ours)),
                diff.abs(),
                if diff <= 0.0 { "faster" } else { "slower" }
            )
        },
    ));
    if let Some(((lo, lo_w), (hi, hi_w))) =
        extremes(results, |w| w.ratio(Metric::ReapWakeMs, Metric::ColdMs))
    {
        out.push(format!(
            "REAP's first request costs {} ({lo_w}) to {} ({hi_w}) of a cold start; the paper \
             reports {} (Python and Go hello) to {} (image 2.6 MB).",
            fmt_pct(Some(lo)),
            fmt_pct(Some(hi)),
            fmt_paper_pct(Some(reference::REAP_OVER_COLD_RANGE.0)),
            fmt_paper_pct(Some(reference::REAP_OVER_COLD_RANGE.1)),
        ));
    }
    if let Some(((lo, lo_w), (hi, hi_w))) = extremes(results, |w| {
        Some(w.median(Metric::ColdMs)? - w.median(Metric::ReapWakeMs)?)
    }) {
        out.push(format!(
            "REAP saves {} ms ({lo_w}) to {} ms ({hi_w}) of the cold start; the paper {:.0} ms \
             (Go hello) to {:.0} ms (video).",
            fmt_num(lo),
            fmt_num(hi),
            reference::REAP_SAVES_MS_RANGE.0,
            reference::REAP_SAVES_MS_RANGE.1,
        ));
    }
    let fault: Vec<(f64, &str)> = results
        .iter()
        .filter_map(|w| {
            w.ratio(Metric::FaultWakeMs, Metric::ReapWakeMs)
                .map(|r| (r, label(w)))
        })
        .collect();
    if !fault.is_empty() {
        let slower: Vec<String> = fault
            .iter()
            .filter(|(r, _)| *r < 1.0)
            .map(|(r, l)| format!("{l} (fault/REAP {})", fmt_factor(Some(*r))))
            .collect();
        let mut s = format!(
            "REAP beats page-fault wake on {} of {} measured workloads",
            fault.len() - slower.len(),
            fault.len()
        );
        if !slower.is_empty() {
            let _ = write!(s, "; page-fault wake is faster on {}", join(&slower));
        }
        s.push_str(
            ". The paper finds REAP faster on every workload but the 2.6 MB image, where the \
             difference is negligible.",
        );
        out.push(s);
    }
    out.push(if platform == "trap" {
        latency_why_trap(results)
    } else {
        latency_why(results)
    });
    out.join("\n\n")
}

/// Why the latency figures fall where they do on the trap platform.
fn latency_why_trap(results: &[WorkloadResult]) -> String {
    let hot = extremes(results, |w| w.median(Metric::HotMs));
    let hot_range = hot.map_or(MISSING.to_string(), |((lo, _), (hi, _))| {
        format!("{} to {} ms", fmt_num(lo), fmt_num(hi))
    });
    format!(
        "**Why.** On the trap platform the application runs in a host process of its own \
         whose every system call is a SIGSYS trap handed to torpor through shared memory and \
         a futex: a few microseconds where these machines' KVM takes 75-150 µs an exit \
         (`cargo bench -p torpor-bench --bench core` measures both, with their bare mechanisms). \
         Clock reads make no trap at all (the host's vDSO is given to the application), and \
         each application thread and the runtime thread serving it share one CPU while the \
         thread makes calls, so that a hand-off is a context switch, not a wake of another \
         CPU. A hot request takes {hot_range} here. A wake brings pages back the same way as \
         on KVM (REAP prefetch or userfaultfd faults on the runtime's mapping of guest \
         memory); on top, the application's process maps them again: the prefetched set in \
         batches right after a REAP prefetch, and each page touched outside it at its first \
         touch (a fault and a mapper round trip), with those of its neighbours already back. \
         A deflate writes every page brought back since the last one (no write tracking \
         through the runtime's mapping: the application writes through its own). Clones copy \
         the checkpoint's memory into a memfd instead of mapping the image. The rest of the \
         spread is this 2-CPU machine's noise (see the min-max ranges)."
    )
}

/// Median of `m` for workload `name`, formatted, or [`MISSING`].
fn median_of(results: &[WorkloadResult], name: &str, m: Metric, scale: f64) -> String {
    results
        .iter()
        .find(|w| w.name == name)
        .and_then(|w| w.median(m))
        .map_or(MISSING.to_string(), |v| fmt_num(v / scale))
}

/// Why the latency figures fall where they do (the numbers come from `results`; the costs
/// of this machine's KVM from `cargo bench -p torpor-bench --bench core`, see README.md).
fn latency_why(results: &[WorkloadResult]) -> String {
    let hot = extremes(results, |w| w.median(Metric::HotMs));
    let hot_range = hot.map_or(MISSING.to_string(), |((lo, _), (hi, _))| {
        format!("{} to {} ms", fmt_num(lo), fmt_num(hi))
    });
    let go_cold = median_of(results, "go", Metric::ColdMs, 1.0);
    let go_hot = median_of(results, "go", Metric::HotMs, 1.0);
    let go_three = results
        .iter()
        .find(|w| w.name == "go")
        .and_then(|w| w.median(Metric::ColdMs))
        .map_or(MISSING.to_string(), |c| fmt_num(c * 0.03));
    format!(
        "**Why.** These machines' KVM is a software hypervisor with shadow paging (kvm_pvm): \
         every syscall of the application costs about 150 µs and every first touch of a guest \
         page about 50 µs (`cargo bench -p torpor-bench --bench core`), where hardware takes 1-2 µs. \
         A hot request already takes {hot_range} here. A wake adds, whichever way the pages \
         come back, one shadow-MMU fault per page the request touches (the deflate's \
         `MADV_DONTNEED` dropped those entries) on top of reading the pages (REAP: one \
         sequential read of the recorded set; page faults: one userfaultfd round trip per run \
         of 16 pages). Where a runtime starts fast, that floor is a large share of its cold \
         start: Go's cold start is {go_cold} ms, and the paper's 3 % of it would be {go_three} \
         ms, less than one hot request here ({go_hot} ms). Where start-up is long (Node.js, \
         Java, and the FunctionBench apps importing Pillow or OpenCV) the REAP first request \
         is a small share of the cold start, far under the paper's 67 %. REAP beats page \
         faults where a request touches many pages it did not write (the runtimes' code and \
         heaps), and loses its edge where computing dominates (OpenCV's video: over a second \
         of work per request). Woken latency is measured after one unmeasured request that \
         follows the first; by then the userfaultfd handler is no longer involved (`torpor \
         stats` counts no further faults), yet woken requests of the smallest workloads stay \
         a few tenths of a millisecond slower than hot ones, which is where the woken target \
         is missed; we have not found where that time goes. The rest of the spread is this \
         2-CPU machine's noise (see the min-max ranges)."
    )
}

/// The generated paragraph under "Figure 7: memory".
pub fn memory_findings(results: &[WorkloadResult]) -> String {
    let mut out = Vec::new();
    out.push(target_block(
        results,
        Target::HibernatedPss,
        "Hibernated PSS at or below the paper's share of hot",
        pct_against,
    ));
    if let Some(((lo, lo_w), (hi, hi_w))) =
        extremes(results, |w| w.ratio(Metric::PssHibernated, Metric::PssHot))
    {
        out.push(format!(
            "A hibernated sandbox holds {} ({lo_w}) to {} ({hi_w}) of a hot one's PSS; the \
             paper reports {} (video) to {} (Go hello).",
            fmt_pct(Some(lo)),
            fmt_pct(Some(hi)),
            fmt_paper_pct(Some(reference::HIBERNATED_OVER_HOT_PSS_RANGE.0)),
            fmt_paper_pct(Some(reference::HIBERNATED_OVER_HOT_PSS_RANGE.1)),
        ));
    }
    let saved = |w: &WorkloadResult| {
        Some((
            w.median(Metric::PssHot)? - w.median(Metric::PssHibernated)?,
            w.median(Metric::PssHot)?,
        ))
    };
    if let Some(((lo, lo_w), (hi, hi_w))) = extremes(results, |w| saved(w).map(|s| s.0)) {
        let of = |l: &str| {
            results
                .iter()
                .find(|w| label(w) == l)
                .and_then(saved)
                .map_or(MISSING.to_string(), |s| fmt_num(s.1 / MIB))
        };
        out.push(format!(
            "Hibernating saves {} MiB of {} MiB ({lo_w}) to {} MiB of {} MiB ({hi_w}); the \
             paper 12 MB of 16 MB (Go hello) to 252 MB of 281 MB (image 2.6 MB).",
            fmt_num(lo / MIB),
            of(lo_w),
            fmt_num(hi / MIB),
            of(hi_w),
        ));
    }
    if let Some(((lo, lo_w), (hi, hi_w))) =
        extremes(results, |w| w.ratio(Metric::PssWoken, Metric::PssHot))
    {
        let against: Vec<String> = results
            .iter()
            .filter_map(|w| {
                let ours = w.ratio(Metric::PssWoken, Metric::PssHot)?;
                let paper = reference::paper_figures(&w.name).woken_over_hot_pss?;
                Some(format!(
                    "- {}: {} vs the paper's {} ({})",
                    label(w),
                    fmt_pct(Some(ours)),
                    fmt_paper_pct(Some(paper)),
                    if ours <= paper {
                        "at or below"
                    } else {
                        "above"
                    },
                ))
            })
            .collect();
        let mut s = format!(
            "A woken sandbox holds {} ({lo_w}) to {} ({hi_w}) of a hot one's PSS; the paper \
             reports {} (Node.js hello) to {} (image 2.6 MB)",
            fmt_pct(Some(lo)),
            fmt_pct(Some(hi)),
            fmt_paper_pct(Some(reference::WOKEN_OVER_HOT_PSS_RANGE.0)),
            fmt_paper_pct(Some(reference::WOKEN_OVER_HOT_PSS_RANGE.1)),
        );
        if against.is_empty() {
            s.push('.');
        } else {
            s.push_str(". Against the paper's figures:\n\n");
            s.push_str(&against.join("\n"));
        }
        out.push(s);
    }
    out.push(memory_why(results));
    out.join("\n\n")
}

/// Why the memory figures fall where they do.
fn memory_why(results: &[WorkloadResult]) -> String {
    let floor = extremes(results, |w| w.median(Metric::PssHibernated));
    let floor_range = floor.map_or(MISSING.to_string(), |((lo, _), (hi, _))| {
        format!("{} to {} MiB", fmt_num(lo / MIB), fmt_num(hi / MIB))
    });
    let go_hot = median_of(results, "go", Metric::PssHot, MIB);
    format!(
        "**Why.** A hibernated sandbox keeps no guest page but a few the platform needs (its \
         ring-0 tables and stubs, the guest page tables); what remains is the holder process: \
         the torpor binary's code (shared by the instances, so divided among them in PSS), its \
         heap (the page-state map, 4 bytes per guest page but only where pages were ever \
         used, the page allocator's counts, the fd table), and the stacks of its threads (one \
         per application thread). That floor, {floor_range} here, is what a hibernated \
         sandbox costs whatever the application. Against big applications (Pillow, OpenCV, \
         Node.js, Java) it is a few percent of hot, below the paper's ratios; against a Go \
         hello-world, whose hot sandbox is only {go_hot} MiB in torpor (the paper's Quark \
         sandbox: 16 MB), the same floor is a larger share. A woken sandbox holds what its \
         requests touched since the wake: the runtime's start-up pages stay in the swap file, \
         which is why woken sandboxes stay well below hot ones."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, label: &str) -> WorkloadResult {
        WorkloadResult {
            name: name.into(),
            label: label.into(),
            ..WorkloadResult::default()
        }
    }

    #[test]
    fn native_beside_hot() {
        let mut py = workload("python", "Python hello");
        for (hot, native) in [(0.30, 0.20), (0.33, 0.21), (0.27, 0.19)] {
            py.push(Metric::HotMs, hot);
            py.push(Metric::NativeHotMs, native);
        }
        let java = workload("java", "Java hello");
        let md = native_section(&[py, java]);
        assert!(
            md.contains("| Python hello | 0.200 (0.190–0.210) | 0.300 (0.270–0.330) | 1.50× |"),
            "{md}"
        );
        assert!(
            md.contains(&format!(
                "| Java hello | {MISSING} | {MISSING} | {MISSING} |"
            )),
            "{md}"
        );
    }

    /// Go measured in full, Java without REAP and PSS, with an error.
    fn results() -> Vec<WorkloadResult> {
        let mut go = workload("go", "Go hello");
        for (m, vs) in [
            (Metric::ColdMs, [300.0, 320.0, 310.0]),
            (Metric::HotMs, [1.0, 1.2, 1.1]),
            (Metric::FaultWakeMs, [20.0, 22.0, 21.0]),
            (Metric::ReapWakeMs, [6.0, 6.2, 6.1]),
            (Metric::WokenMs, [1.1, 1.3, 1.2]),
        ] {
            for v in vs {
                go.push(m, v);
            }
        }
        go.push(Metric::PssHot, 16.0 * MIB);
        go.push(Metric::PssHibernated, 2.0 * MIB);
        go.push(Metric::PssWoken, 6.0 * MIB);
        let mut java = workload("java", "Java hello");
        java.push(Metric::ColdMs, 1500.0);
        java.push(Metric::HotMs, 2.0);
        java.push(Metric::WokenMs, 3.0);
        java.errors.push("REAP wake: timed out".into());
        vec![go, java]
    }

    #[test]
    fn samples_rows() {
        let csv = samples_csv(&results());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "workload,metric,rep,value");
        assert_eq!(lines[1], "go,cold_ms,1,300");
        assert_eq!(lines[2], "go,cold_ms,2,320");
        assert!(lines.contains(&"go,pss_hot_bytes,1,16777216"));
        assert!(lines.contains(&"java,woken_ms,1,3"));
        // 5 latencies × 3 + 3 PSS for go, 3 for java, plus the header.
        assert_eq!(lines.len(), 1 + 15 + 3 + 3);
    }

    #[test]
    fn summary_rows() {
        let csv = summary_csv(&results());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "workload,metric,n,median,min,max");
        assert_eq!(lines[1], "go,cold_ms,3,310,300,320");
        assert!(lines.contains(&"java,reap_wake_ms,0,,,"));
        assert_eq!(lines.len(), 1 + 2 * Metric::ALL.len());
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }

    #[test]
    fn cells() {
        assert_eq!(
            ratio_cell(Some(0.041), Some(0.25), true),
            "4.1 % (paper 25 %)"
        );
        assert_eq!(ratio_cell(Some(0.5625), None, true), "56 % (paper —)");
        assert_eq!(ratio_cell(None, Some(0.03), true), "— (paper 3 %)");
        assert_eq!(
            ratio_cell(Some(1.349), Some(1.0), false),
            "1.35× (paper ≈1.0×)"
        );
        assert_eq!(fmt_summary(None, 1.0), "—");
        let s = Summary::of(&[11.9, 12.34, 13.0]);
        assert_eq!(fmt_summary(s, 1.0), "12.3 (11.9–13.0)");
        assert_eq!(fmt_summary(Summary::of(&[0.5]), 1.0), "0.500");
        assert_eq!(fmt_duration(3725.0), "1 h 02 min");
        assert_eq!(fmt_duration(42.0), "42.0 s");
    }

    #[test]
    fn verdicts() {
        let r = results();
        let v = verdict(&r[0], Target::HibernatedPss).unwrap();
        assert_eq!(
            (v.ours, v.limit, v.range_top, v.met()),
            (0.125, 0.25, false, true)
        );
        let v = verdict(&r[0], Target::ReapFirstRequest).unwrap();
        assert!(v.met(), "6.1 / 310 = 2.0 % is under the paper's 3 %: {v:?}");
        let v = verdict(&r[0], Target::WokenLatency).unwrap();
        assert!(v.met());
        assert_eq!(verdict(&r[1], Target::ReapFirstRequest), None);
        let v = verdict(&r[1], Target::WokenLatency).unwrap();
        assert!(!v.met());
        assert_eq!(verdict_cell(None), "—");
    }

    #[test]
    fn markdown_report() {
        let info = RunInfo {
            command: "torpor-bench paper --quick".into(),
            quick: true,
            reps: 3,
            instances: 10,
            ..RunInfo::default()
        };
        let md = markdown(&info, &results(), &[None, Some("no font".into())]);
        let row = |prefix: &str| {
            md.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no row {prefix:?} in\n{md}"))
                .to_string()
        };
        // Latency table: Java's fault and REAP wake are missing.
        assert_eq!(
            row("| Java hello | 1500"),
            "| Java hello | 1500 | 2.00 | — | — | 3.00 | — |"
        );
        assert_eq!(
            row("| Go hello | 310"),
            "| Go hello | 310 (300–320) | 1.10 (1.00–1.20) | 21.0 (20.0–22.0) | 6.10 \
             (6.00–6.20) | 1.20 (1.10–1.30) | — |"
        );
        // Native table: Java has no native figure.
        assert_eq!(row("| Java hello | —"), "| Java hello | — | 2.00 | — |");
        // Memory table: Java has no PSS.
        let memory = md.split("## Memory").nth(1).expect("a memory section");
        assert!(
            memory.contains("\n| Java hello | — | — | — |\n"),
            "{memory}"
        );
        // Ratio table.
        let go = row("| Go hello | 12");
        assert!(go.starts_with("| Go hello | 12 % (paper 25 %) | 38 % (paper 56 %) |"));
        assert!(go.ends_with("| ✓ met | ✓ met | ✓ met |"), "{go}");
        assert_eq!(
            row("| Java hello | — (paper —)"),
            "| Java hello | — (paper —) | — (paper —) | — (paper —) | — (paper —) | 1.50× \
             (paper ≈1.0×) | — | — | ✗ missed |"
        );
        assert!(md.contains("![Figure 6: latency](fig6_latency.png)"));
        assert!(md.contains("Figure 7: memory: not drawn (no font)."));
        assert!(md.contains("## Figure 6: latency\n"));
        assert!(md.contains("## Figure 7: memory\n"));
        assert!(md.contains("- Java hello: REAP wake: timed out"));
        assert!(md.contains("Mode: quick (`--quick`); 3 repetitions"));
        assert!(md.contains("Started: —"));
    }

    #[test]
    fn report_files() {
        let dir = std::env::temp_dir().join(format!("torpor-report-test-{}", std::process::id()));
        let paths = write_report(&dir, &RunInfo::default(), &results()).unwrap();
        for name in ["samples.csv", "summary.csv", "paper.md"] {
            assert!(paths.contains(&dir.join(name)), "{name} in {paths:?}");
            assert!(std::fs::metadata(dir.join(name)).unwrap().len() > 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
