//! The report of `torpor-bench density`: `density.md`, `density.csv` (one row per phase) and
//! `density.png` (host memory and PSS per hibernated sandbox against N).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use plotters::prelude::*;

use super::{Phase, Results};

const MIB: f64 = 1024.0 * 1024.0;

/// The `q` quantile of the latencies of the requests `pick` selects (failures slowest).
pub fn quantile(phase: &Phase, to_hibernated: bool, q: f64) -> f64 {
    let mut v: Vec<f64> = phase
        .stream
        .iter()
        .filter(|r| r.to_hibernated == to_hibernated)
        .map(|r| r.ms.unwrap_or(f64::INFINITY))
        .collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn count(phase: &Phase, to_hibernated: bool) -> usize {
    phase
        .stream
        .iter()
        .filter(|r| r.to_hibernated == to_hibernated)
        .count()
}

fn failures(phase: &Phase) -> usize {
    phase.stream.iter().filter(|r| r.ms.is_none()).count()
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v.is_infinite() {
        "failed".into()
    } else {
        format!("{v:.1}")
    }
}

/// One line for the terminal.
pub fn phase_line(p: &Phase) -> String {
    format!(
        "N={}: host {:.2} MiB/sandbox, PSS {:.2} MiB/sandbox, idle CPU {:.2} %, wake p50 {} \
         p99 {} ms ({} wakes), hot p50 {} ms, {} stream failures, {} final failures",
        p.n,
        p.host_bytes as f64 / p.n.max(1) as f64 / MIB,
        p.pss_bytes as f64 / p.n.max(1) as f64 / MIB,
        p.idle_cpu * 100.0,
        ms(quantile(p, true, 0.5)),
        ms(quantile(p, true, 0.99)),
        count(p, true),
        ms(quantile(p, false, 0.5)),
        failures(p),
        p.final_failures
    )
}

/// Writes the files; returns their paths.
///
/// # Errors
/// A file cannot be written (a plot that cannot be drawn is said in density.md).
pub fn write(out: &Path, res: &Results) -> anyhow::Result<Vec<PathBuf>> {
    let mut csv = String::from(
        "workload,instances,start_s,settle_s,host_bytes_per_sandbox,pss_bytes_per_sandbox,\
         idle_cpu_share,wakes,wake_p50_ms,wake_p99_ms,hot_requests,hot_p50_ms,hot_p99_ms,\
         stream_failures,final_failures\n",
    );
    for p in &res.phases {
        let n = p.n.max(1) as f64;
        let _ = writeln!(
            csv,
            "{},{},{:.1},{:.1},{:.0},{:.0},{:.5},{},{:.3},{:.3},{},{:.3},{:.3},{},{}",
            res.workload,
            p.n,
            p.start_s,
            p.settle_s,
            p.host_bytes as f64 / n,
            p.pss_bytes as f64 / n,
            p.idle_cpu,
            count(p, true),
            quantile(p, true, 0.5),
            quantile(p, true, 0.99),
            count(p, false),
            quantile(p, false, 0.5),
            quantile(p, false, 0.99),
            failures(p),
            p.final_failures
        );
    }
    let png = out.join("density.png");
    let plot = plot(&png, res);
    let md = markdown(res, plot.as_ref().err().map(|e| format!("{e:#}")));
    let mut written = Vec::new();
    for (p, text) in [(out.join("density.md"), md), (out.join("density.csv"), csv)] {
        std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))?;
        written.push(p);
    }
    if plot.is_ok() {
        written.push(png);
    }
    Ok(written)
}

/// The Markdown report.
pub fn markdown(res: &Results, plot_error: Option<String>) -> String {
    let i = &res.info;
    let mut s = String::new();
    let _ = writeln!(s, "# Density: `torpor-bench density`\n");
    let _ = writeln!(
        s,
        "Command: `{}`  \nStarted: {} (took {:.0} s)  \nHost: {}  \nVersion: {}\n",
        i.command, i.started, i.took_s, i.host, i.version
    );
    let _ = writeln!(s, "## Hibernated sandboxes\n");
    let _ = writeln!(
        s,
        "| sandboxes | started in | all hibernated after | host memory per sandbox | PSS per sandbox | CPU, all idle |\n\
         |---:|---:|---:|---:|---:|---:|"
    );
    for p in &res.phases {
        let n = p.n.max(1) as f64;
        let _ = writeln!(
            s,
            "| {} | {:.0} s | {:.1} s | {:.2} MiB | {:.2} MiB | {:.2} % of a CPU |",
            p.n,
            p.start_s,
            p.settle_s,
            p.host_bytes as f64 / n / MIB,
            p.pss_bytes as f64 / n / MIB,
            p.idle_cpu * 100.0
        );
    }
    let _ = writeln!(
        s,
        "\n## Requests (Zipf stream), then one to every sandbox\n"
    );
    let _ = writeln!(
        s,
        "| sandboxes | wakes | wake p50 | wake p99 | requests to awake sandboxes | their p50 | their p99 | stream failures | final check |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for p in &res.phases {
        let _ = writeln!(
            s,
            "| {} | {} | {} ms | {} ms | {} | {} ms | {} ms | {} | {} |",
            p.n,
            count(p, true),
            ms(quantile(p, true, 0.5)),
            ms(quantile(p, true, 0.99)),
            count(p, false),
            ms(quantile(p, false, 0.5)),
            ms(quantile(p, false, 0.99)),
            failures(p),
            if p.final_failures == 0 && p.errors.is_empty() {
                format!("all {} answered", p.n)
            } else {
                format!("**{} failed**", p.final_failures)
            }
        );
    }
    let wake99: Vec<(usize, f64)> = res
        .phases
        .iter()
        .map(|p| (p.n, quantile(p, true, 0.99)))
        .collect();
    if let (Some(first), Some(last)) = (wake99.first(), wake99.last()) {
        if wake99.len() > 1 && first.1.is_finite() && last.1.is_finite() {
            let _ = writeln!(
                s,
                "\nWake p99 at {} sandboxes against at {}: {:.2}×.",
                last.0,
                first.0,
                last.1 / first.1
            );
        }
    }
    let _ = writeln!(s, "\n## Plot\n");
    match plot_error {
        None => {
            let _ = writeln!(s, "![memory per hibernated sandbox against N](density.png)");
        }
        Some(e) => {
            let _ = writeln!(s, "Not drawn: {e}");
        }
    }
    for p in res.phases.iter().filter(|p| !p.errors.is_empty()) {
        let _ = writeln!(s, "\n**Errors at N = {}:** {}", p.n, p.errors.join("; "));
    }
    let _ = writeln!(s, "\n## Method\n");
    for n in &i.notes {
        let _ = writeln!(s, "- {n}");
    }
    s
}

/// Host memory and PSS per hibernated sandbox (MiB) against N (log axis).
fn plot(path: &Path, res: &Results) -> anyhow::Result<()> {
    let pts: Vec<(f64, f64, f64)> = res
        .phases
        .iter()
        .filter(|p| p.errors.is_empty() && p.n > 0)
        .map(|p| {
            let n = p.n as f64;
            (
                n,
                p.host_bytes as f64 / n / MIB,
                p.pss_bytes as f64 / n / MIB,
            )
        })
        .collect();
    if pts.is_empty() {
        return Err(anyhow!("no phase completed"));
    }
    crate::paper::plot::ensure_font()?;
    let fail = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let x_hi = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 2.0;
    let y_hi = pts.iter().flat_map(|p| [p.1, p.2]).fold(1.0, f64::max) * 1.3;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Memory per hibernated {} sandbox", res.workload),
            ("sans-serif", 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..x_hi).log_scale(), 0.0..y_hi)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("sandboxes (log scale)")
        .y_desc("MiB per sandbox")
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| fail(&e))?;
    let series = [
        (
            "host memory (MemAvailable fall / N)",
            RGBColor(0xe1, 0x57, 0x59),
            1,
        ),
        ("PSS of the holder", RGBColor(0x4e, 0x79, 0xa7), 2),
    ];
    for (name, color, k) in series {
        let data: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.0, if k == 1 { p.1 } else { p.2 }))
            .collect();
        crate::paper::plot::line_with_dots(&mut chart, name, color, &data)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Request;
    use super::*;

    #[test]
    fn wakes_and_awake_requests_apart() {
        let r = |ms: Option<f64>, h| Request {
            ms,
            to_hibernated: h,
        };
        let p = Phase {
            n: 10,
            host_bytes: 40 * 1024 * 1024,
            pss_bytes: 30 * 1024 * 1024,
            stream: vec![
                r(Some(20.0), true),
                r(Some(30.0), true),
                r(Some(1.0), false),
                r(None, false),
            ],
            ..Phase::default()
        };
        assert_eq!(quantile(&p, true, 0.5), 20.0);
        assert_eq!(quantile(&p, true, 0.99), 30.0);
        assert!(quantile(&p, false, 0.99).is_infinite());
        assert_eq!((count(&p, true), failures(&p)), (2, 1));
        let line = phase_line(&p);
        assert!(line.contains("host 4.00 MiB/sandbox") && line.contains("1 stream failures"));
        let res = Results {
            workload: "python".into(),
            phases: vec![p],
            ..Results::default()
        };
        let md = markdown(&res, Some("no font".into()));
        assert!(
            md.contains("| 10 | 2 | 20.0 ms | 30.0 ms | 2 | 1.0 ms | failed ms | 1 |"),
            "{md}"
        );
    }
}
