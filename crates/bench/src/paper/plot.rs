//! PNG plots of `torpor-bench paper` in the style of the paper's Figures 6 and 7: grouped bars,
//! one group per workload, the median as the bar and the min–max spread as a whisker.
//!
//! Drawn with `plotters` on its bitmap backend, text through `ab_glyph` from a TrueType font
//! loaded at run time ([`FONT_PATH`], Debian package `fonts-dejavu-core`), so no system font
//! library is linked.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::model::{Metric, WorkloadResult};

/// The TrueType font the plots are drawn with.
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The Debian package that provides [`FONT_PATH`].
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// Font family name the font is registered under (plotters' name for `FontFamily::SansSerif`).
const FAMILY: &str = "sans-serif";

/// Pixel size of the images.
const SIZE: (u32, u32) = (1400, 700);

/// Height of the band above the chart holding the title and the legend.
const HEADER_H: u32 = 90;

/// Bars of Figure 6, in order: metric, legend text, colour.
const LATENCY_BARS: [(Metric, &str, RGBColor); 5] = [
    (Metric::ColdMs, "Cold start", RGBColor(0x4e, 0x79, 0xa7)),
    (Metric::HotMs, "Hot", RGBColor(0xf2, 0x8e, 0x2b)),
    (
        Metric::FaultWakeMs,
        "Hibernate, page-fault wake",
        RGBColor(0xe1, 0x57, 0x59),
    ),
    (
        Metric::ReapWakeMs,
        "Hibernate, REAP wake",
        RGBColor(0x76, 0xb7, 0xb2),
    ),
    (Metric::WokenMs, "Woken", RGBColor(0x59, 0xa1, 0x4f)),
];

/// Bars of Figure 7, in order: metric, legend text, colour.
const MEMORY_BARS: [(Metric, &str, RGBColor); 3] = [
    (Metric::PssHot, "Hot", RGBColor(0xf2, 0x8e, 0x2b)),
    (
        Metric::PssHibernated,
        "Hibernated",
        RGBColor(0x4e, 0x79, 0xa7),
    ),
    (Metric::PssWoken, "Woken", RGBColor(0x59, 0xa1, 0x4f)),
];

/// Bytes per MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// Loads [`FONT_PATH`] and registers it with plotters, once per process.
///
/// # Errors
///
/// The font file is missing or unreadable (the message names [`FONT_PACKAGE`]), or it is not a
/// font ab_glyph can parse.
pub fn ensure_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!(
                    "cannot read the plot font {FONT_PATH} ({e}); install the Debian package \
                     {FONT_PACKAGE} (apt-get install {FONT_PACKAGE})"
                )
            })?;
            // plotters keeps fonts for the whole process; this runs once per process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            register_font(FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a TrueType font ab_glyph can read"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Draws Figure 6: per workload, bars for cold start, hot, first request after a hibernate
/// (page-fault and REAP wake) and woken latency, on a logarithmic millisecond axis, with
/// min–max whiskers. Missing measurements are marked "n/a".
///
/// # Errors
///
/// The font cannot be loaded ([`ensure_font`]), or drawing or writing `path` fails.
pub fn plot_latency(path: &Path, results: &[WorkloadResult]) -> anyhow::Result<()> {
    let values = collect(results, &LATENCY_BARS, 1.0, true);
    let (lo, hi) = log_bounds(&values);
    draw(
        path,
        "Figure 6: request latency (median, whiskers min–max)",
        "Latency (ms, log scale)",
        &LATENCY_BARS,
        results,
        &values,
        (lo..hi).log_scale(),
        lo,
        false,
    )
}

/// Draws Figure 7: per workload, bars for the PSS of a hot, a hibernated and a woken sandbox,
/// in MiB on a logarithmic axis (hibernated hello-worlds hold a few MiB, a hot video sandbox
/// hundreds), each labelled with its median, with min–max whiskers. Missing measurements are
/// marked "n/a".
///
/// # Errors
///
/// The font cannot be loaded ([`ensure_font`]), or drawing or writing `path` fails.
pub fn plot_memory(path: &Path, results: &[WorkloadResult]) -> anyhow::Result<()> {
    let values = collect(results, &MEMORY_BARS, MIB, true);
    let (lo, hi) = log_bounds(&values);
    draw(
        path,
        "Figure 7: memory per sandbox, PSS (median, whiskers min–max)",
        "PSS (MiB, log scale)",
        &MEMORY_BARS,
        results,
        &values,
        (lo..hi).log_scale(),
        lo,
        true,
    )
}

/// One bar: median, min and max, already in the plot's unit.
#[derive(Clone, Copy, Debug)]
struct Bar {
    median: f64,
    min: f64,
    max: f64,
}

/// The bars of each workload (outer) and series (inner), `None` where not measured (or not
/// positive, for a log axis).
fn collect(
    results: &[WorkloadResult],
    series: &[(Metric, &str, RGBColor)],
    unit: f64,
    log: bool,
) -> Vec<Vec<Option<Bar>>> {
    results
        .iter()
        .map(|w| {
            series
                .iter()
                .map(|(m, _, _)| {
                    let s = w.summary(*m)?;
                    let bar = Bar {
                        median: s.median / unit,
                        min: s.min / unit,
                        max: s.max / unit,
                    };
                    (!log || bar.min > 0.0).then_some(bar)
                })
                .collect()
        })
        .collect()
}

/// Bounds of a log axis: whole decades around every value, at least one decade.
fn log_bounds(values: &[Vec<Option<Bar>>]) -> (f64, f64) {
    let bars = values.iter().flatten().flatten();
    let lo = bars.clone().map(|b| b.min).fold(f64::INFINITY, f64::min);
    let hi = bars.map(|b| b.max).fold(0.0_f64, f64::max);
    let (lo, mut hi) = if !lo.is_finite() || hi <= 0.0 {
        (0.1, 10.0)
    } else {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil()),
        )
    };
    if hi <= lo {
        hi = lo * 10.0;
    }
    // A hair outside the decades, so that rounding in the axis keeps their ticks.
    (lo * 0.999, hi * 1.001)
}

/// An axis label without float noise: `0.1`, `5`, `1000`.
fn tick(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A bar's value label: `281`, `4.2`, `0.35`.
fn short(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Splits a workload label in two lines at the space nearest its middle when `too_wide` says
/// it does not fit on one.
fn label_lines(label: &str, too_wide: impl Fn(&str) -> bool) -> Vec<String> {
    if !too_wide(label) {
        return vec![label.to_string()];
    }
    let mid = label.len() / 2;
    match label
        .char_indices()
        .filter(|(_, c)| *c == ' ')
        .min_by_key(|(i, _)| i.abs_diff(mid))
    {
        Some((i, _)) => vec![label[..i].to_string(), label[i + 1..].to_string()],
        None => vec![label.to_string()],
    }
}

/// Draws one grouped-bar chart into `path`. `y` is the y axis; bars start at `base`; with
/// `value_labels`, each bar's median is printed above it.
#[allow(clippy::too_many_arguments)]
fn draw<Y>(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(Metric, &str, RGBColor)],
    results: &[WorkloadResult],
    values: &[Vec<Option<Bar>>],
    y: Y,
    base: f64,
    value_labels: bool,
) -> anyhow::Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    ensure_font()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (header, body) = root.split_vertically(HEADER_H);

    // Title and legend, centred above the chart.
    let title_style = TextStyle::from((FAMILY, 26).into_font())
        .pos(Pos::new(HPos::Center, VPos::Top))
        .color(&BLACK);
    header
        .draw_text(title, &title_style, (SIZE.0 as i32 / 2, 12))
        .map_err(|e| fail(&e))?;
    let legend_font = (FAMILY, 18).into_font();
    let legend_style = TextStyle::from(legend_font.clone()).pos(Pos::new(HPos::Left, VPos::Center));
    let swatch = 16;
    let gap = 28;
    let widths: Vec<i32> = series
        .iter()
        .map(|(_, name, _)| {
            header
                .estimate_text_size(name, &legend_style)
                .map(|(w, _)| w as i32)
                .map_err(|e| fail(&e))
        })
        .collect::<anyhow::Result<_>>()?;
    let total: i32 =
        widths.iter().map(|w| swatch + 6 + w).sum::<i32>() + gap * (series.len() as i32 - 1);
    let mut x = (SIZE.0 as i32 - total) / 2;
    let ly = 64;
    for ((_, name, color), w) in series.iter().zip(&widths) {
        header
            .draw(&Rectangle::new(
                [(x, ly - swatch / 2), (x + swatch, ly + swatch / 2)],
                color.filled(),
            ))
            .map_err(|e| fail(&e))?;
        header
            .draw_text(name, &legend_style, (x + swatch + 6, ly))
            .map_err(|e| fail(&e))?;
        x += swatch + 6 + w + gap;
    }

    // The chart: x runs over workload slots [i, i + 1).
    let n = results.len().max(1);
    let mut chart = ChartBuilder::on(&body)
        .margin_left(10)
        .margin_right(30)
        .margin_bottom(10)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(RangedCoordf64::from(0.0..n as f64), y)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(12)
        .y_label_formatter(&|v| tick(*v))
        .y_desc(y_desc)
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .bold_line_style(RGBColor(0xcc, 0xcc, 0xcc))
        .draw()
        .map_err(|e| fail(&e))?;

    let y_top = chart.y_range().end;
    let k = series.len() as f64;
    let group = 0.8;
    let bar_w = group / k;
    let na_style = TextStyle::from((FAMILY, 12).into_font())
        .pos(Pos::new(HPos::Center, VPos::Bottom))
        .color(&RGBColor(0x88, 0x88, 0x88));
    let value_style = TextStyle::from((FAMILY, 13).into_font())
        .pos(Pos::new(HPos::Center, VPos::Bottom))
        .color(&BLACK);
    for (i, bars) in values.iter().enumerate() {
        for (j, bar) in bars.iter().enumerate() {
            let x0 = i as f64 + (1.0 - group) / 2.0 + j as f64 * bar_w;
            let x1 = x0 + bar_w;
            let xc = (x0 + x1) / 2.0;
            let Some(b) = bar else {
                let (px, py) = chart.backend_coord(&(xc, base));
                root.draw_text("n/a", &na_style, (px, py - 3))
                    .map_err(|e| fail(&e))?;
                continue;
            };
            let color = series[j].2;
            let top = b.median.min(y_top);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0 + bar_w * 0.06, base), (x1 - bar_w * 0.06, top)],
                    color.filled(),
                )))
                .map_err(|e| fail(&e))?;
            let (_, py_min) = chart.backend_coord(&(xc, b.min));
            let (_, py_max) = chart.backend_coord(&(xc, b.max.min(y_top)));
            if py_min - py_max >= 4 {
                let cap = bar_w * 0.2;
                let whisker = BLACK.stroke_width(2);
                let lines = [
                    vec![(xc, b.min), (xc, b.max.min(y_top))],
                    vec![(xc - cap, b.min), (xc + cap, b.min)],
                    vec![(xc - cap, b.max), (xc + cap, b.max)],
                ];
                chart
                    .draw_series(lines.into_iter().map(|l| PathElement::new(l, whisker)))
                    .map_err(|e| fail(&e))?;
            }
            if value_labels {
                let (px, py) = chart.backend_coord(&(xc, b.max.max(b.median).min(y_top)));
                root.draw_text(&short(b.median), &value_style, (px, py - 4))
                    .map_err(|e| fail(&e))?;
            }
        }
    }

    // Workload names under their groups, on two lines when one is too wide for a slot.
    let label_style = TextStyle::from((FAMILY, 18).into_font())
        .pos(Pos::new(HPos::Center, VPos::Top))
        .color(&BLACK);
    let (slot0, _) = chart.backend_coord(&(0.0, base));
    let (slot1, _) = chart.backend_coord(&(1.0, base));
    let slot_px = (slot1 - slot0) as u32;
    for (i, w) in results.iter().enumerate() {
        let label = if w.label.is_empty() {
            &w.name
        } else {
            &w.label
        };
        let lines = label_lines(label, |s| {
            root.estimate_text_size(s, &label_style)
                .map(|(w, _)| w + 8 > slot_px)
                .unwrap_or(false)
        });
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, base));
        for (l, line) in lines.iter().enumerate() {
            root.draw_text(line, &label_style, (px, py + 8 + 22 * l as i32))
                .map_err(|e| fail(&e))?;
        }
    }

    root.present()
        .map_err(|e| fail(&e))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The coordinates of a plot against a count of sandboxes: N on a log axis, a value on a
/// linear one.
pub type AgainstN = Cartesian2d<LogCoord<f64>, RangedCoordf64>;

/// Draws `data` on `chart` as a line with a dot at each point, in `color`, named `name` in
/// the legend.
///
/// # Errors
/// The backend's.
pub fn line_with_dots<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, AgainstN>,
    name: &str,
    color: RGBColor,
    data: &[(f64, f64)],
) -> anyhow::Result<()> {
    let fail = |e: &dyn std::fmt::Display| anyhow!("drawing {name}: {e}");
    chart
        .draw_series(std::iter::once(PathElement::new(
            data.to_vec(),
            color.stroke_width(3),
        )))
        .map_err(|e| fail(&e))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    chart
        .draw_series(
            data.iter()
                .map(|&(x, y)| Circle::new((x, y), 5, color.filled())),
        )
        .map_err(|e| fail(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result set covering hello-world to video magnitudes, with a latency and a PSS missing.
    pub(crate) fn sample_results() -> Vec<WorkloadResult> {
        let specs: [(&str, &str, f64, f64, f64); 8] = [
            ("python", "Python hello", 900.0, 0.6, 20.0),
            ("node", "Node.js hello", 600.0, 0.5, 30.0),
            ("go", "Go hello", 300.0, 0.3, 16.0),
            ("java", "Java hello", 1500.0, 0.9, 60.0),
            ("float", "Float operation", 950.0, 2.0, 22.0),
            ("image-small", "Image (Pillow) small", 1400.0, 60.0, 150.0),
            ("image-large", "Image (Pillow) 2.6 MB", 1600.0, 180.0, 281.0),
            ("video", "Video (OpenCV)", 4000.0, 1300.0, 226.0),
        ];
        specs
            .iter()
            .map(|&(name, label, cold, hot, pss)| {
                let mut w = WorkloadResult {
                    name: name.into(),
                    label: label.into(),
                    ..WorkloadResult::default()
                };
                for (k, kp) in [(0.9, 0.99), (1.0, 1.0), (1.2, 1.02)] {
                    w.push(Metric::ColdMs, cold * k);
                    w.push(Metric::HotMs, hot * k);
                    w.push(Metric::FaultWakeMs, (hot + cold * 0.08) * k);
                    if name != "java" {
                        w.push(Metric::ReapWakeMs, (hot + cold * 0.04) * k);
                    }
                    w.push(Metric::WokenMs, hot * 1.05 * k);
                    w.push(Metric::PssHot, pss * MIB * kp);
                    w.push(Metric::PssHibernated, pss * 0.1 * MIB * kp);
                    if name != "float" {
                        w.push(Metric::PssWoken, pss * 0.5 * MIB * kp);
                    }
                }
                w
            })
            .collect()
    }

    #[test]
    fn ticks_and_labels() {
        assert_eq!(tick(0.1), "0.1");
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(label_lines("Go hello", |_| false), ["Go hello"]);
        assert_eq!(
            label_lines("Image 2.6 MB, large output", |_| true),
            ["Image 2.6 MB,", "large output"]
        );
        assert_eq!(label_lines("Video", |_| true), ["Video"]);
        let near = |(a, b): (f64, f64), (c, d): (f64, f64)| {
            assert!(
                (a / c - 1.0).abs() < 0.01 && (b / d - 1.0).abs() < 0.01,
                "{a} {b}"
            )
        };
        near(log_bounds(&[vec![None]]), (0.1, 10.0));
        let b = Bar {
            median: 5.0,
            min: 0.3,
            max: 4000.0,
        };
        near(log_bounds(&[vec![Some(b)]]), (0.1, 10000.0));
    }

    #[test]
    fn plots_are_written() {
        if !Path::new(FONT_PATH).exists() {
            println!("skipped: {FONT_PATH} is missing (Debian package {FONT_PACKAGE})");
            return;
        }
        let dir = std::env::temp_dir().join(format!("torpor-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let results = sample_results();
        let lat = dir.join("fig6_latency.png");
        let mem = dir.join("fig7_memory.png");
        plot_latency(&lat, &results).unwrap();
        plot_memory(&mem, &results).unwrap();
        for p in [&lat, &mem] {
            let bytes = std::fs::read(p).unwrap();
            assert!(bytes.len() > 1000, "{} is too small", p.display());
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", p.display());
        }
        // Nothing measured at all still draws (empty axes).
        plot_latency(&dir.join("empty.png"), &[]).unwrap();
        if std::env::var_os("TORPOR_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        } else {
            println!("plots kept in {}", dir.display());
        }
    }
}
