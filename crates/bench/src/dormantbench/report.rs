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
pub fn write(
    out: &Path,
    info: &RunInfo,
    rows: &[Row],
    sets: &[Many],
) -> anyhow::Result<Vec<PathBuf>> {
    let mut md = String::new();
    let mut written = Vec::new();
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
    if !sets.is_empty() {
        let (requests, zipf, seed) = sets[0].stream;
        let counts: Vec<String> = sets.iter().map(|m| m.n.to_string()).collect();
        let _ = writeln!(
            md,
            "\n## {} instances of one Python checkpoint, started dormant\n",
            counts.join(", ")
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
             correctly. Each count is a fresh set of instances (the previous one deleted), \
             in this order.\n"
        );
        let _ = writeln!(md, "| per instance | {} |", counts.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(sets.len()));
        let mut row = |label: &str, f: &dyn Fn(&Many) -> String| {
            let cells: Vec<String> = sets.iter().map(f).collect();
            let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        };
        row("started in (all), s", &|m| format!("{:.1}", m.start_s));
        row(
            "host memory, all dormant (MemAvailable drop / N), MiB",
            &|m| mib(m.host_per_sandbox),
        );
        row("PSS of the dormant process and its helpers, MiB", &|m| {
            mib(m.pss_per_sandbox)
        });
        row("processes (the dormant one and its helpers)", &|m| {
            format!("{:.1}", m.processes_per_sandbox)
        });
        row("CPU of all of them while idle, % of one CPU", &|m| {
            format!("{:.2}", m.idle_cpu * 100.0)
        });
        row("stream: requests to a dormant instance", &|m| {
            m.to_dormant.len().to_string()
        });
        row("their first response, ms: median (p90), p99", &|m| {
            format!(
                "{}, {}",
                cell(&m.to_dormant),
                fmt(quantile(&m.to_dormant, 0.99))
            )
        });
        row("stream: the other requests", &|m| {
            m.others.len().to_string()
        });
        row("their response, ms: median (p90), p99", &|m| {
            format!("{}, {}", cell(&m.others), fmt(quantile(&m.others, 0.99)))
        });
        row("stream: failed requests", &|m| {
            m.stream_failures.to_string()
        });
        row("final request: answered", &|m| {
            format!("{} of {}", m.n - m.final_failures, m.n)
        });
        for m in sets.iter().filter(|m| !m.failure_samples.is_empty()) {
            let _ = writeln!(md, "\nFailed requests at {} (the first ones):\n", m.n);
            for f in &m.failure_samples {
                let _ = writeln!(md, "- {f}");
            }
        }
        let plot_path = out.join("dormant.png");
        match plot(&plot_path, sets) {
            Ok(()) => {
                let _ = writeln!(
                    md,
                    "\n![memory per dormant instance and the stream's wake p99 against N](dormant.png)"
                );
                written.push(plot_path);
            }
            Err(e) => {
                let _ = writeln!(md, "\n(no plot: {e:#})");
            }
        }
    }
    let errors: Vec<String> = rows
        .iter()
        .flat_map(|r| r.errors.iter().map(move |e| format!("{}: {e}", r.label)))
        .chain(sets.iter().flat_map(|m| {
            m.errors
                .iter()
                .map(move |e| format!("{} instances: {e}", m.n))
        }))
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
    for m in sets {
        for x in &m.to_dormant {
            let _ = writeln!(csv, "instances_{},stream_to_dormant,{x:.3}", m.n);
        }
        for x in &m.others {
            let _ = writeln!(csv, "instances_{},stream_other,{x:.3}", m.n);
        }
    }
    let csv_path = out.join("dormant.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    written.extend([md_path, csv_path]);
    Ok(written)
}

/// A named series of a plot, in its colour: (N, value) points.
type Series = (&'static str, plotters::style::RGBColor, Vec<(f64, f64)>);

/// A plot's panel: its title, its y axis's unit, and two series.
struct Panel {
    title: &'static str,
    unit: &'static str,
    series: [Series; 2],
}

/// Two panels against N (log axis): host memory and PSS per dormant instance, MiB; the
/// stream's first responses from dormant instances, median and p99, ms.
fn plot(path: &Path, sets: &[Many]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let ok: Vec<&Many> = sets
        .iter()
        .filter(|m| m.errors.is_empty() && !m.to_dormant.is_empty())
        .collect();
    anyhow::ensure!(!ok.is_empty(), "no set of instances completed");
    crate::paper::plot::ensure_font()?;
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let x_hi = ok.iter().map(|m| m.n as f64).fold(1.0, f64::max) * 2.0;
    let x_lo = ok.iter().map(|m| m.n as f64).fold(f64::MAX, f64::min) / 2.0;
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(600);
    let red = RGBColor(0xe1, 0x57, 0x59);
    let blue = RGBColor(0x4e, 0x79, 0xa7);
    let mib_of = |b: f64| b / (1024.0 * 1024.0);
    let panels = [
        Panel {
            title: "Memory per dormant instance",
            unit: "MiB per instance",
            series: [
                (
                    "host memory (MemAvailable fall / N)",
                    red,
                    ok.iter()
                        .map(|m| (m.n as f64, mib_of(m.host_per_sandbox)))
                        .collect(),
                ),
                (
                    "PSS of the dormant process",
                    blue,
                    ok.iter()
                        .map(|m| (m.n as f64, mib_of(m.pss_per_sandbox)))
                        .collect(),
                ),
            ],
        },
        Panel {
            title: "First response from a dormant instance",
            unit: "ms",
            series: [
                (
                    "p99",
                    red,
                    ok.iter()
                        .map(|m| (m.n as f64, quantile(&m.to_dormant, 0.99)))
                        .collect(),
                ),
                (
                    "median",
                    blue,
                    ok.iter()
                        .map(|m| (m.n as f64, quantile(&m.to_dormant, 0.5)))
                        .collect(),
                ),
            ],
        },
    ];
    for (
        area,
        Panel {
            title,
            unit,
            series,
        },
    ) in [&left, &right].into_iter().zip(panels)
    {
        let y_hi = series
            .iter()
            .flat_map(|(_, _, d)| d.iter().map(|p| p.1))
            .fold(0.5, f64::max)
            * 1.3;
        // MemAvailable moves with the rest of the host: a small set's share can fall below 0.
        let y_lo = series
            .iter()
            .flat_map(|(_, _, d)| d.iter().map(|p| p.1))
            .fold(0.0, f64::min)
            * 1.3;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), y_lo..y_hi)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("instances (log scale)")
            .y_desc(unit)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(|e| fail(&e))?;
        for (name, color, data) in series {
            crate::paper::plot::line_with_dots(&mut chart, name, color, &data)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

use anyhow::Context as _;
