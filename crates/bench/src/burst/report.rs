//! The report of `torpor-bench burst`: `burst.md` (tables, the bound each hibernated burst is
//! held to, the simultaneous wakes, the plot), `burst.csv` (one row per burst) and
//! `burst-wakes.csv`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::client::Burst;
use super::{Mode, Results, Sample};

pub use super::Row;

/// The median of `v` (NaN if empty; infinities sort last).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One row per (workload, size, mode), in the order measured.
pub fn rows(samples: &[Sample]) -> Vec<Row> {
    let mut keys: Vec<(String, usize, Mode)> = Vec::new();
    for s in samples {
        let k = (s.workload.clone(), s.burst.n, s.mode);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // Workload, then size, then native, hot, hibernated.
    let order = |m: Mode| m as u8;
    let first = |w: &str| keys.iter().position(|k| k.0 == w).unwrap_or(0);
    let mut sorted = keys.clone();
    sorted.sort_by_key(|k| (first(&k.0), k.1, order(k.2)));
    sorted
        .into_iter()
        .map(|(workload, n, mode)| {
            let of: Vec<&Burst> = samples
                .iter()
                .filter(|s| s.workload == workload && s.burst.n == n && s.mode == mode)
                .map(|s| &s.burst)
                .collect();
            let m =
                |f: &dyn Fn(&Burst) -> f64| median(&of.iter().map(|b| f(b)).collect::<Vec<_>>());
            Row {
                p50: m(&|b| b.quantile(0.5)),
                p99: m(&|b| b.quantile(0.99)),
                max: m(&|b| b.max()),
                failures: of.iter().map(|b| b.failures).sum(),
                total: of.iter().map(|b| b.n).sum(),
                overflows: of.iter().map(|b| b.overflows).sum(),
                workload,
                n,
                mode,
            }
        })
        .collect()
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v.is_infinite() {
        "failed".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The bound a hibernated burst's p99 is held to: the single-request wake plus twice the
/// native p99 of the same burst.
pub fn bound(wake_ms: f64, native_p99: f64) -> f64 {
    wake_ms + 2.0 * native_p99
}

/// Writes the report files into `out`; returns their paths.
///
/// # Errors
/// If a file cannot be written (a plot that cannot be drawn is said in burst.md instead).
pub fn write(out: &Path, res: &Results) -> anyhow::Result<Vec<PathBuf>> {
    let rows = rows(&res.samples);
    let mut csv = String::from(
        "workload,mode,connections,rep,p50_ms,p99_ms,max_ms,answered,failures,listen_overflows\n",
    );
    for s in &res.samples {
        let b = &s.burst;
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.3},{:.3},{:.3},{},{},{}",
            s.workload,
            s.mode.name(),
            b.n,
            s.rep,
            b.quantile(0.5),
            b.quantile(0.99),
            b.max(),
            b.answered_ms.len(),
            b.failures,
            b.overflows
        );
    }
    let mut wakes_csv =
        String::from("workload,sandboxes,mode,p50_ms,p99_ms,max_ms,answered,failures\n");
    if let Some((w, hot, woken)) = &res.wakes {
        for (mode, b) in [("hot", hot), ("hibernated", woken)] {
            let _ = writeln!(
                wakes_csv,
                "{w},{},{mode},{:.3},{:.3},{:.3},{},{}",
                b.n,
                b.quantile(0.5),
                b.quantile(0.99),
                b.max(),
                b.answered_ms.len(),
                b.failures
            );
        }
    }
    let png = out.join("burst.png");
    let plot = super::plot::plot(&png, &rows);
    let md = markdown(res, &rows, plot.as_ref().err().map(|e| format!("{e:#}")));
    let files = [
        (out.join("burst.md"), md),
        (out.join("burst.csv"), csv),
        (out.join("burst-wakes.csv"), wakes_csv),
    ];
    let mut written = Vec::new();
    for (p, text) in files {
        std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))?;
        written.push(p);
    }
    if plot.is_ok() {
        written.push(png);
    }
    Ok(written)
}

/// The Markdown report.
pub fn markdown(res: &Results, rows: &[Row], plot_error: Option<String>) -> String {
    let i = &res.info;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Bursts at hibernated sandboxes: `torpor-bench burst`\n"
    );
    let _ = writeln!(
        s,
        "Command: `{}`  \nStarted: {} (took {:.0} s)  \nHost: {}  \nVersion: {}\n",
        i.command, i.started, i.took_s, i.host, i.version
    );
    let _ = writeln!(
        s,
        "Every connection of a burst opens at the same instant; p50, p99 and max are \
         latencies from that instant (ms), the median over the repetitions. *failures*: \
         connections not answered correctly in time, over all repetitions. *overflows*: \
         connections the host dropped at a full accept queue (`TcpExtListenOverflows`).\n"
    );
    let _ = writeln!(s, "## Bursts\n");
    let _ = writeln!(
        s,
        "| workload | connections | where | p50 | p99 | max | failures | overflows |\n\
         |---|---:|---|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {}/{} | {} |",
            r.workload,
            r.n,
            r.mode.name(),
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.failures,
            r.total,
            r.overflows
        );
    }
    let _ = writeln!(
        s,
        "\n## A hibernated burst against the wake and the native burst\n"
    );
    let _ = writeln!(
        s,
        "The goal: every connection answered, no overflow, and the p99 of a burst at a \
         hibernated sandbox within the wake latency of a single request (median of the \
         measured wakes) plus twice the native p99 of the same burst; and, the part the \
         wake is answerable for, within the wake plus the p99 of the same burst at the hot \
         sandbox (a wake must not serialise the burst behind page-ins).\n"
    );
    let _ = writeln!(
        s,
        "| workload | connections | single wake | native p99 | bound | hot p99 | wake + hot p99 | hibernated p99 | all answered, no overflow | within the bound | within wake + hot |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
    );
    for r in rows.iter().filter(|r| r.mode == Mode::Hibernated) {
        let wake = res
            .wake_ms
            .iter()
            .find(|(w, _)| *w == r.workload)
            .map_or(f64::NAN, |(_, v)| median(v));
        let native = rows
            .iter()
            .find(|n| n.workload == r.workload && n.n == r.n && n.mode == Mode::Native)
            .map_or(f64::NAN, |n| n.p99);
        let hot = rows
            .iter()
            .find(|n| n.workload == r.workload && n.n == r.n && n.mode == Mode::Hot)
            .map_or(f64::NAN, |n| n.p99);
        let b = bound(wake, native);
        let yes = |c: bool| if c { "yes" } else { "**no**" };
        let (bound_txt, within) = if native.is_infinite() {
            ("none (native failed)".to_string(), "yes (native failed)")
        } else {
            (ms(b), yes(r.p99 <= b))
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.n,
            ms(wake),
            ms(native),
            bound_txt,
            ms(hot),
            ms(wake + hot),
            ms(r.p99),
            yes(r.failures == 0 && r.overflows == 0),
            within,
            yes(r.p99 <= wake + hot)
        );
    }
    if let Some((w, hot, woken)) = &res.wakes {
        let _ = writeln!(s, "\n## Many sandboxes woken at once\n");
        let _ = writeln!(
            s,
            "{} sandboxes of the {w} workload, one request each, all sent at the same \
             instant: first hot, then just hibernated (so that the burst wakes all of them \
             at once).\n",
            hot.n
        );
        let _ = writeln!(
            s,
            "| sandboxes | p50 | p99 | max | failures |\n|---|---:|---:|---:|---:|"
        );
        for (what, b) in [("hot", hot), ("hibernated (woken)", woken)] {
            let _ = writeln!(
                s,
                "| {} {what} | {} | {} | {} | {}/{} |",
                b.n,
                ms(b.quantile(0.5)),
                ms(b.quantile(0.99)),
                ms(b.max()),
                b.failures,
                b.n
            );
        }
    }
    let _ = writeln!(s, "\n## Plot\n");
    match plot_error {
        None => {
            let _ = writeln!(
                s,
                "![latency percentiles of the bursts](burst.png)\n\nBars: p99 (median over \
                 the repetitions); black tick: p50; whisker: max. Logarithmic scale."
            );
        }
        Some(e) => {
            let _ = writeln!(s, "Not drawn: {e}");
        }
    }
    if !res.errors.is_empty() {
        let _ = writeln!(s, "\n## Errors\n");
        for e in &res.errors {
            let _ = writeln!(s, "- {e}");
        }
    }
    let _ = writeln!(s, "\n## Method\n");
    for n in &i.notes {
        let _ = writeln!(s, "- {n}");
    }
    s
}

/// A few lines for the terminal.
pub fn summary(res: &Results) -> String {
    let mut s = String::new();
    for r in rows(&res.samples) {
        let _ = writeln!(
            s,
            "{:<8} {:>5} {:<10} p50 {:>8} p99 {:>8} max {:>8} failures {}/{} overflows {}",
            r.workload,
            r.n,
            r.mode.name(),
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.failures,
            r.total,
            r.overflows
        );
    }
    if let Some((w, hot, woken)) = &res.wakes {
        let _ = writeln!(
            s,
            "{} {w} sandboxes at once: hot p99 {} ms; woken p50 {} p99 {} max {} ms, {} failed",
            hot.n,
            ms(hot.quantile(0.99)),
            ms(woken.quantile(0.5)),
            ms(woken.quantile(0.99)),
            ms(woken.max()),
            woken.failures
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(w: &str, mode: Mode, rep: usize, lat: &[f64], failures: usize) -> Sample {
        Sample {
            workload: w.into(),
            mode,
            rep,
            burst: Burst {
                n: lat.len() + failures,
                answered_ms: lat.to_vec(),
                failures,
                ..Burst::default()
            },
        }
    }

    #[test]
    fn rows_take_medians_over_repetitions_in_order() {
        let samples = vec![
            sample("py", Mode::Hot, 0, &[1.0, 2.0], 0),
            sample("py", Mode::Native, 0, &[1.0, 1.0], 0),
            sample("py", Mode::Hot, 1, &[3.0, 4.0], 0),
            sample("py", Mode::Hot, 2, &[5.0, 6.0], 0),
            sample("py", Mode::Hibernated, 0, &[7.0], 1),
        ];
        let r = rows(&samples);
        assert_eq!(
            r.iter().map(|r| r.mode).collect::<Vec<_>>(),
            vec![Mode::Native, Mode::Hot, Mode::Hibernated]
        );
        assert_eq!((r[1].p50, r[1].max, r[1].total), (3.0, 4.0, 6));
        assert!(r[2].p99.is_infinite());
        assert_eq!(r[2].failures, 1);
        assert_eq!(median(&[1.0, f64::INFINITY, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
        assert_eq!(bound(100.0, 5.0), 110.0);
    }

    #[test]
    fn the_report_says_what_failed() {
        let res = Results {
            samples: vec![
                sample("py", Mode::Native, 0, &[1.0], 0),
                sample("py", Mode::Hibernated, 0, &[], 1),
            ],
            wake_ms: vec![("py".into(), vec![50.0])],
            ..Results::default()
        };
        let r = rows(&res.samples);
        let md = markdown(&res, &r, Some("no font".into()));
        assert!(
            md.contains(
                "| py | 1 | 50.0 | 1.0 | 52.0 | n/a | n/a | failed | **no** | **no** | **no** |"
            ),
            "{md}"
        );
        assert!(md.contains("Not drawn: no font"));
    }
}
