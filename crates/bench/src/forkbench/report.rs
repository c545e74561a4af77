//! `fork.md` and `fork.csv` of `torpor-bench fork`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Memory, Row};
use crate::paper::model::{quantile, samples_csv, RunInfo, Summary};
use crate::snapbench::report::fmt;

/// `median (p99)`, or a dash.
fn cell(v: &[f64]) -> String {
    match Summary::of(v) {
        Some(s) if v.len() > 1 => format!("{} ({})", fmt(s.median), fmt(quantile(v, 0.99))),
        Some(s) => fmt(s.median),
        None => "—".into(),
    }
}

fn median(v: &[f64]) -> Option<f64> {
    Summary::of(v).map(|s| s.median)
}

fn mib(b: f64) -> String {
    format!("{:.2}", b / (1024.0 * 1024.0))
}

/// Writes the report into `out`; returns the files written.
///
/// # Errors
/// If a file cannot be written.
pub fn write(
    out: &Path,
    info: &RunInfo,
    rows: &[Row],
    memory: &[Memory],
    memory_errors: &[String],
) -> anyhow::Result<Vec<PathBuf>> {
    let mut md = String::new();
    let _ = writeln!(md, "# Sandbox fork: a new instance of a warm function\n");
    let _ = writeln!(
        md,
        "Issue 31: `torpor fork TEMPLATE -d -p PORT` starts a new sandbox that carries on from \
         the live sandbox TEMPLATE as it is (`docs/design/fork.md`). Beside it, in the same \
         run, the other ways to get a new instance answering: a cold start, a clone of a \
         checkpoint, and the REAP wake of a hibernated sandbox. Raw samples: `fork.csv`.\n"
    );
    let _ = writeln!(md, "## How this was produced\n");
    let _ = writeln!(md, "- command: `{}`", info.command);
    let _ = writeln!(md, "- started: {} ({:.0} s)", info.started, info.took_s);
    let _ = writeln!(md, "- host: {}", info.host);
    let _ = writeln!(md, "- torpor: {}, platform {}", info.version, info.platform);
    let _ = writeln!(
        md,
        "- every figure runs from the launch of the command (`run -d`, `run -d --from`, \
         `fork -d`) to the first correct response, the page cache warm (a host starting many \
         instances of one function); the template is warmed by three requests first. \
         **First fork**: of the hot template, which writes its image and leaves it \
         hibernated. **Fork**: later forks, from that image (nothing of the template runs \
         between them). **REAP wake**: a request to the template hibernated again, its \
         working set recorded.\n"
    );
    let _ = writeln!(
        md,
        "## From the command to the first response, ms: median (p99)\n"
    );
    let _ = writeln!(
        md,
        "| workload | cold start | clone | first fork | fork | REAP wake | next request | cold / fork |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let ratio = match (median(&r.cold), median(&r.fork)) {
            (Some(c), Some(f)) if f > 0.0 => format!("{:.1}x", c / f),
            _ => "—".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            cell(&r.cold),
            cell(&r.clone),
            cell(&r.first_fork),
            cell(&r.fork),
            cell(&r.reap_wake),
            cell(&r.hot),
            ratio
        );
    }
    for r in rows.iter().filter(|r| !r.errors.is_empty()) {
        let _ = writeln!(md, "\n{}: **failed**: {}", r.label, r.errors.join("; "));
    }
    if !memory.is_empty() || !memory_errors.is_empty() {
        let _ = writeln!(md, "\n## Python instances alive at once\n");
        let _ = writeln!(
            md,
            "Host memory: the fall of `MemAvailable` from before the first start, per \
             instance; PSS: the sum over the instances of their holder's, platform stubs' \
             and helpers' PSS (`torpor stats`), after each answered once, and after 100 more \
             requests each.\n"
        );
        let _ = writeln!(
            md,
            "| kind | instances | start all, s | host MiB each, first | host MiB each, after 100 | PSS MiB total, first | PSS MiB total, after 100 |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
        for m in memory {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {} | {} | {} | {} |",
                m.kind,
                m.n,
                m.start_s,
                mib(m.host_first),
                mib(m.host_after),
                mib(m.pss_first),
                mib(m.pss_after)
            );
        }
        if let [f, c] = memory {
            if c.host_after > 0.0 && c.pss_after > 0.0 {
                let _ = writeln!(
                    md,
                    "\nForked against cold-started after 100 requests: host memory {:.0} %, \
                     PSS {:.0} %.",
                    100.0 * f.host_after / c.host_after,
                    100.0 * f.pss_after / c.pss_after
                );
            }
        }
        for e in memory_errors {
            let _ = writeln!(md, "\n**failed**: {e}");
        }
    }
    let md_path = out.join("fork.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    let csv = samples_csv(rows.iter().flat_map(|r| {
        [
            ("cold", &r.cold),
            ("clone", &r.clone),
            ("first_fork", &r.first_fork),
            ("fork", &r.fork),
            ("reap_wake", &r.reap_wake),
            ("hot", &r.hot),
        ]
        .map(|(kind, v)| (r.label.as_str(), kind, v.as_slice()))
    }));
    let csv_path = out.join("fork.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    Ok(vec![md_path, csv_path])
}
