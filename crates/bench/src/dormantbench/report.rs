//! `dormant.md` and `dormant.csv` of `torpor-bench dormant`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Many, Row};
use crate::paper::model::{quantile, samples_csv, RunInfo, Summary};
use crate::snapbench::report::fmt;

/// `median (p90)`, or a dash.
fn cell(v: &[f64]) -> String {
    match Summary::of(v) {
        Some(s) => format!("{} ({})", fmt(s.median), fmt(p90(v))),
        None => "—".into(),
    }
}

/// The 90th percentile (nearest rank).
fn p90(v: &[f64]) -> f64 {
    quantile(v, 0.9)
}

fn mib(b: f64) -> String {
    format!("{:.2}", b / (1024.0 * 1024.0))
}

/// Writes the report into `out`; returns the files written.
///
/// # Errors
/// If a file cannot be written.
pub fn write(out: &Path, info: &RunInfo, rows: &[Row], m: &Many) -> anyhow::Result<Vec<PathBuf>> {
    let mut md = String::new();
    let _ = writeln!(md, "# Dormant sandboxes against hibernated ones\n");
    let _ = writeln!(
        md,
        "Issue 30's third tier: `torpor dormant ID` writes the sandbox's state into its state \
         directory and turns its holder into `torpor-dormant` (same pid, one thread, no VM, no \
         guest memory), which keeps the published port, the kept connections and the control \
         socket; the next request restores the sandbox in place. Here each hello is woken \
         from either tier by its next request, in one run; then many Python sandboxes are \
         made dormant at once. Raw samples: `dormant.csv`.\n"
    );
    let _ = writeln!(md, "## How this was produced\n");
    let _ = writeln!(md, "- command: `{}`", info.command);
    let _ = writeln!(md, "- started: {} ({:.0} s)", info.started, info.took_s);
    let _ = writeln!(md, "- host: {}", info.host);
    let _ = writeln!(md, "- torpor: {}, platform {}", info.version, info.platform);
    let _ = writeln!(
        md,
        "- each workload: one sandbox (`run -d --wake-mode auto`), 5 warm-up requests, then \
         {} hot requests, {} hibernate + request, {} dormant + request (a new connection \
         each); memory from `torpor stats` (PSS of the holder or the dormant process, and of \
         its helper processes: the janitor, and the file broker of a root holder)\n",
        info.reps, info.reps, info.reps
    );
    let _ = writeln!(md, "## First response after a wake, ms: median (p90)\n");
    let _ = writeln!(
        md,
        "| workload | hot request | hibernated wake | dormant wake | dormant / hibernated | go dormant |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let ratio = match (
            Summary::of(&r.dormant_wake),
            Summary::of(&r.hibernated_wake),
        ) {
            (Some(d), Some(h)) if h.median > 0.0 => format!("{:.2}", d.median / h.median),
            _ => "—".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            r.label,
            cell(&r.hot),
            cell(&r.hibernated_wake),
            cell(&r.dormant_wake),
            ratio,
            cell(&r.go_dormant)
        );
    }
    let _ = writeln!(md, "\n## What each tier keeps\n");
    let _ = writeln!(
        md,
        "| workload | tier | holder PSS, MiB | helpers PSS, MiB | processes | holder threads |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
    for r in rows {
        for t in &r.memory {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                r.label,
                t.tier,
                mib(t.holder_pss),
                mib(t.helpers_pss),
                t.processes,
                t.threads
            );
        }
    }
    if m.n > 0 {
        let (requests, zipf, seed) = m.stream;
        let _ = writeln!(
            md,
            "\n## {} instances of one Python checkpoint, started dormant\n",
            m.n
        );
        let _ = writeln!(
            md,
            "TEMPLATE: a checkpoint of a warmed-up Python hello taken after one hibernation \
             and one request (so that it carries that request's working set, which an \
             instance prefetches at its first wake). \
             Each instance: `torpor run -d --from TEMPLATE --dormant -p PORT:8080 \
             --hibernate-after 2s --dormant-after 2s` (a woken instance hibernates when idle, \
             then goes dormant again). Host memory: the fall of `MemAvailable` from before the \
             first start to all dormant, divided by N. Then a stream of {requests} requests, \
             one at a time, to instances drawn from a Zipf distribution of exponent {zipf} \
             (seed {seed}), and one more request to every instance, which must be answered \
             correctly.\n"
        );
        let _ = writeln!(md, "| | per instance |");
        let _ = writeln!(md, "|---|---:|");
        let _ = writeln!(md, "| started in (all), s | {:.1} |", m.start_s);
        let _ = writeln!(
            md,
            "| host memory, all dormant (MemAvailable drop / N), MiB | {} |",
            mib(m.host_per_sandbox)
        );
        let _ = writeln!(
            md,
            "| PSS of the dormant process and its helpers, MiB | {} |",
            mib(m.pss_per_sandbox)
        );
        let _ = writeln!(
            md,
            "| processes (the dormant one and its helpers) | {:.1} |",
            m.processes_per_sandbox
        );
        let _ = writeln!(
            md,
            "| CPU of all of them while idle, % of one CPU | {:.2} |",
            m.idle_cpu * 100.0
        );
        let _ = writeln!(
            md,
            "| stream: requests to a dormant instance ({}), ms: median (p90), p99 | {}, {} |",
            m.to_dormant.len(),
            cell(&m.to_dormant),
            fmt(quantile(&m.to_dormant, 0.99))
        );
        let _ = writeln!(
            md,
            "| stream: the other requests ({}), ms: median (p90), p99 | {}, {} |",
            m.others.len(),
            cell(&m.others),
            fmt(quantile(&m.others, 0.99))
        );
        let _ = writeln!(md, "| stream: failed requests | {} |", m.stream_failures);
        let _ = writeln!(
            md,
            "| final request: answered | {} of {} |",
            m.n - m.final_failures,
            m.n
        );
        if !m.failure_samples.is_empty() {
            let _ = writeln!(md, "\nFailed requests (the first ones):\n");
            for f in &m.failure_samples {
                let _ = writeln!(md, "- {f}");
            }
        }
    }
    let errors: Vec<String> = rows
        .iter()
        .flat_map(|r| r.errors.iter().map(move |e| format!("{}: {e}", r.label)))
        .chain(m.errors.iter().map(|e| format!("many: {e}")))
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(md, "\n## Errors\n");
        for e in errors {
            let _ = writeln!(md, "- {e}");
        }
    }
    let md_path = out.join("dormant.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    let mut csv = samples_csv(rows.iter().flat_map(|r| {
        [
            ("hot", &r.hot),
            ("hibernated_wake", &r.hibernated_wake),
            ("dormant_wake", &r.dormant_wake),
            ("go_dormant", &r.go_dormant),
        ]
        .map(|(kind, v)| (r.label.as_str(), kind, v.as_slice()))
    }));
    for x in &m.to_dormant {
        let _ = writeln!(csv, "instances,stream_to_dormant,{x:.3}");
    }
    for x in &m.others {
        let _ = writeln!(csv, "instances,stream_other,{x:.3}");
    }
    let csv_path = out.join("dormant.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    Ok(vec![md_path, csv_path])
}

use anyhow::Context as _;
