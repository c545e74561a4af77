//! The report of `torpor-bench share`: `share.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{Mode, Results};

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

fn mib(v: f64) -> String {
    if v.is_finite() {
        format!("{:.2} MiB", v / MIB)
    } else {
        "n/a".into()
    }
}

fn num(v: f64, unit: &str) -> String {
    if v.is_finite() {
        format!("{v:.1} {unit}")
    } else {
        "n/a".into()
    }
}

fn samples(v: &[f64], scale: f64) -> String {
    v.iter()
        .map(|x| format!("{:.1}", x / scale))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `share.md` under `out`; returns its path.
///
/// # Errors
/// The file cannot be written.
pub fn write(out: &Path, res: &Results) -> anyhow::Result<PathBuf> {
    let path = out.join("share.md");
    std::fs::write(&path, markdown(res)).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

fn mode(res: &Results, shared: bool) -> Option<&Mode> {
    res.modes.iter().find(|m| m.shared == shared)
}

/// The Markdown report.
pub fn markdown(res: &Results) -> String {
    let i = &res.info;
    let n = res.instances;
    let mut s = String::new();
    let _ = writeln!(s, "# Shared file pages: `torpor-bench share`\n");
    let _ = writeln!(
        s,
        "Command: `{}`  \nStarted: {} (took {:.0} s)  \nHost: {}  \nVersion: {}\n",
        i.command, i.started, i.took_s, i.host, i.version
    );
    let _ = writeln!(
        s,
        "## Memory: {n} {} sandboxes hot at once\n",
        res.workloads.0
    );
    let _ = writeln!(
        s,
        "| file pages | PSS of one alone | {n} × that | sum of the {n} PSS | per sandbox | sum / ({n} × one) |\n\
         |---|---:|---:|---:|---:|---:|"
    );
    for m in &res.modes {
        let one = Mode::median(&m.single_pss);
        let sum = Mode::median(&m.group_pss);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.2} |",
            if m.shared { "shared" } else { "copied" },
            mib(one),
            mib(one * n as f64),
            mib(sum),
            mib(sum / n as f64),
            sum / (one * n as f64)
        );
    }
    if let (Some(on), Some(off)) = (mode(res, true), mode(res, false)) {
        let (a, b) = (Mode::median(&on.group_pss), Mode::median(&off.group_pss));
        let _ = writeln!(
            s,
            "\nThe {n} sandboxes together: {} with shared file pages against {} copied \
             ({} saved, {:.0} % less).",
            mib(a),
            mib(b),
            mib(b - a),
            (1.0 - a / b) * 100.0
        );
    }
    let _ = writeln!(
        s,
        "\n## Wake: {} hello, first request after a page-fault wake\n",
        res.workloads.1
    );
    let _ = writeln!(
        s,
        "| file pages | first request after wake (median) | samples (ms) | hot request (median) |\n\
         |---|---:|---|---:|"
    );
    for m in &res.modes {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            if m.shared { "shared" } else { "copied" },
            num(Mode::median(&m.wake_ms), "ms"),
            samples(&m.wake_ms, 1.0),
            num(Mode::median(&m.hot_ms), "ms"),
        );
    }
    if let (Some(on), Some(off)) = (mode(res, true), mode(res, false)) {
        let (a, b) = (Mode::median(&on.wake_ms), Mode::median(&off.wake_ms));
        let _ = writeln!(
            s,
            "\nCopied / shared: {:.2} ({} → {}; the paper: 25 → 11 ms, 2.3).",
            b / a,
            num(b, "ms"),
            num(a, "ms")
        );
    }
    let _ = writeln!(s, "\n## Samples\n");
    for m in &res.modes {
        let _ = writeln!(
            s,
            "- {}: PSS of one (MiB): {}; sum of {n} (MiB): {}",
            if m.shared { "shared" } else { "copied" },
            samples(&m.single_pss, MIB),
            samples(&m.group_pss, MIB)
        );
        for e in &m.errors {
            let _ = writeln!(s, "  - **error**: {e}");
        }
    }
    let _ = writeln!(s, "\n## Method\n");
    for note in &i.notes {
        let _ = writeln!(s, "- {note}");
    }
    s
}
