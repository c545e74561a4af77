//! `snapshots.md` and `snapshots.csv` of `torpor-bench snapshots`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{summary, LatencyRow, MemoryResult};
use crate::paper::model::RunInfo;

/// `median (min–max)`, or a dash.
fn cell(v: &[f64]) -> String {
    match summary(v) {
        Some(s) => format!("{} ({}–{})", fmt(s.median), fmt(s.min), fmt(s.max)),
        None => "—".into(),
    }
}

/// Three significant figures.
pub(crate) fn fmt(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn median(v: &[f64]) -> Option<f64> {
    summary(v).map(|s| s.median)
}

/// `a / b` of the medians, as a percentage.
fn share(a: &[f64], b: &[f64]) -> String {
    match (median(a), median(b)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.0} %", 100.0 * a / b),
        _ => "—".into(),
    }
}

/// Writes the report into `out`; returns the files written.
///
/// # Errors
/// If a file cannot be written.
pub fn write(
    out: &Path,
    info: &RunInfo,
    rows: &[LatencyRow],
    m: &MemoryResult,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut md = String::new();
    let _ = writeln!(md, "# Checkpoints, restores and clones\n");
    let _ = writeln!(
        md,
        "What checkpoints buy (issue 14): the first response of a sandbox restored from a \
         checkpoint (`torpor restore`) and of a clone (`torpor run --from`) against a cold \
         start, on the paper's eight workloads; and the memory of many clones of one Python \
         server against as many cold-started and as many hibernated-then-woken ones. Raw \
         samples: `snapshots.csv`.\n"
    );
    let _ = writeln!(md, "## How this was produced\n");
    let _ = writeln!(md, "- Command: `{}`", info.command);
    let _ = writeln!(md, "- Started: {}", info.started);
    let _ = writeln!(md, "- Host: {}", info.host);
    let _ = writeln!(md, "- torpor: {}", info.version);
    let _ = writeln!(
        md,
        "- {} repetitions of each latency; {} instances of each kind for the memory",
        info.reps, info.instances
    );
    let _ = writeln!(md, "- Took: {:.0} s", info.took_s);
    for n in &info.notes {
        let _ = writeln!(md, "- {n}");
    }
    let _ = writeln!(md, "\n## First response\n");
    let _ = writeln!(
        md,
        "Median (min–max) in ms, from the command's launch to the first correct response. \
         Restore: `torpor restore -d DIR`, the sandbox restored hibernated and woken by the \
         request, its pages faulting in from the checkpoint's memory image. First clone: \
         `torpor run -d --from DIR`, making the clones' memory file from the image first. \
         Clone: later clones, which map that file copy-on-write.\n"
    );
    let _ = writeln!(
        md,
        "| Workload | Cold start | Restore | First clone | Clone | Restore/cold | Clone/cold | Checkpoint | Size |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} MiB |",
            r.label,
            cell(&r.cold),
            cell(&r.restore),
            cell(&r.clone_first),
            cell(&r.clone),
            share(&r.restore, &r.cold),
            share(&r.clone, &r.cold),
            cell(&r.checkpoint),
            r.checkpoint_bytes as f64 / (1 << 20) as f64
        );
    }
    let errors: Vec<String> = rows
        .iter()
        .flat_map(|r| r.errors.iter().map(move |e| format!("{}: {e}", r.label)))
        .chain(m.errors.iter().map(|e| format!("memory: {e}")))
        .collect();
    if m.instances > 0 {
        let mib = |v: &[f64]| v.iter().map(|b| b / (1 << 20) as f64).collect::<Vec<_>>();
        let total = |v: &[f64]| v.iter().sum::<f64>() / (1 << 20) as f64;
        let _ = writeln!(md, "\n## Memory of {} Python servers\n", m.instances);
        let _ = writeln!(
            md,
            "PSS of each holder (`torpor stats`, its `/proc/PID/smaps_rollup`) with {} of a kind \
             running at once, each having answered a request: median (min–max) and the sum, \
             in MiB. Clones share the pages of the checkpoint's memory image they only read \
             (one copy in the host page cache, its PSS split among them); cold-started servers \
             each build their own heap; woken ones hold what the request brought back.\n",
            m.instances
        );
        let _ = writeln!(md, "| Kind | PSS each | Total | Total vs cold |");
        let _ = writeln!(md, "|---|---:|---:|---:|");
        for (name, v) in [
            ("Clones of one checkpoint", &m.clones),
            ("Cold-started", &m.cold),
            ("Hibernated, then woken", &m.woken),
        ] {
            let _ = writeln!(
                md,
                "| {name} | {} | {:.1} | {} |",
                cell(&mib(v)),
                total(v),
                share(&[total(v)], &[total(&m.cold)])
            );
        }
    }
    if !errors.is_empty() {
        let _ = writeln!(md, "\n## Errors\n");
        for e in errors {
            let _ = writeln!(md, "- {e}");
        }
    }
    let mut csv = String::from("workload,measure,sample,value\n");
    for r in rows {
        for (what, v) in [
            ("cold_ms", &r.cold),
            ("checkpoint_ms", &r.checkpoint),
            ("restore_ms", &r.restore),
            ("clone_first_ms", &r.clone_first),
            ("clone_ms", &r.clone),
        ] {
            for (i, x) in v.iter().enumerate() {
                let _ = writeln!(csv, "{},{what},{i},{x:.3}", r.label);
            }
        }
    }
    for (what, v) in [
        ("clone_pss_bytes", &m.clones),
        ("cold_pss_bytes", &m.cold),
        ("woken_pss_bytes", &m.woken),
    ] {
        for (i, x) in v.iter().enumerate() {
            let _ = writeln!(csv, "Python hello,{what},{i},{x:.0}");
        }
    }
    let md_path = out.join("snapshots.md");
    let csv_path = out.join("snapshots.csv");
    std::fs::write(&md_path, md)?;
    std::fs::write(&csv_path, csv)?;
    Ok(vec![md_path, csv_path])
}
