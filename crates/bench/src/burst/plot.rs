//! `burst.png`: latency percentiles of every burst, grouped by workload and size, one bar
//! per place the burst was aimed (native, hot, hibernated): the bar is the p99, a black tick
//! the p50, a whisker the max, on a logarithmic millisecond axis. A burst with failures is
//! drawn to the top and marked.

use std::path::Path;

use anyhow::anyhow;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Mode;
use super::Row;
use crate::paper::plot::ensure_font;

const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1400, 700);
const SERIES: [(Mode, &str, RGBColor); 3] = [
    (Mode::Native, "Native", RGBColor(0x4e, 0x79, 0xa7)),
    (Mode::Hot, "torpor, hot", RGBColor(0xf2, 0x8e, 0x2b)),
    (
        Mode::Hibernated,
        "torpor, hibernated",
        RGBColor(0xe1, 0x57, 0x59),
    ),
];

/// Draws the plot of `rows` into `path`.
///
/// # Errors
/// No rows, the font cannot be loaded, or drawing or writing fails.
pub fn plot(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for r in rows {
        if !groups.contains(&(r.workload.clone(), r.n)) {
            groups.push((r.workload.clone(), r.n));
        }
    }
    if groups.is_empty() {
        return Err(anyhow!("nothing was measured"));
    }
    ensure_font()?;
    let finite = rows
        .iter()
        .flat_map(|r| [r.p50, r.p99, r.max])
        .filter(|v| v.is_finite() && *v > 0.0);
    let lo = finite.clone().fold(f64::INFINITY, f64::min);
    let hi = finite.fold(0.0_f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 1.5).log10().ceil()),
        )
    } else {
        (0.1, 1000.0)
    };
    let fail = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Bursts: latency from the burst's start (bar p99, tick p50, whisker max)",
            (FAMILY, 24),
        )
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(
            RangedCoordf64::from(0.0..groups.len() as f64),
            (lo..hi).log_scale(),
        )
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("Latency (ms, log scale)")
        .y_label_formatter(&|v| {
            if *v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        })
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(|e| fail(&e))?;
    let bar_w = 0.8 / SERIES.len() as f64;
    let label = TextStyle::from((FAMILY, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    let mark = TextStyle::from((FAMILY, 12).into_font())
        .pos(Pos::new(HPos::Center, VPos::Bottom))
        .color(&RED);
    for (i, (w, n)) in groups.iter().enumerate() {
        let xc = i as f64 + 0.5;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{w} ×{n}"),
                (xc, lo),
                label.clone(),
            )))
            .map_err(|e| fail(&e))?;
        for (j, (mode, _, color)) in SERIES.iter().enumerate() {
            let Some(r) = rows
                .iter()
                .find(|r| r.workload == *w && r.n == *n && r.mode == *mode)
            else {
                continue;
            };
            let x0 = i as f64 + 0.1 + j as f64 * bar_w;
            let x1 = x0 + bar_w * 0.9;
            let xm = (x0 + x1) / 2.0;
            let top = |v: f64| if v.is_finite() { v } else { hi };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, lo), (x1, top(r.p99))],
                    color.filled(),
                )))
                .map_err(|e| fail(&e))?;
            if r.p50.is_finite() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x0, r.p50), (x1, r.p50)],
                        BLACK.stroke_width(3),
                    )))
                    .map_err(|e| fail(&e))?;
            }
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(xm, top(r.p99)), (xm, top(r.max))],
                    BLACK.stroke_width(1),
                )))
                .map_err(|e| fail(&e))?;
            if r.failures > 0 {
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("{} failed", r.failures),
                        (xm, hi),
                        mark.clone(),
                    )))
                    .map_err(|e| fail(&e))?;
            }
        }
    }
    for (mode, name, color) in SERIES {
        let _ = mode;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, lo), (0.0, lo)],
                color.filled(),
            )))
            .map_err(|e| fail(&e))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FAMILY, 16))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
