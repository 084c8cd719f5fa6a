//! The table's pictures, drawn as SVG with plotters: throughput against callers, and the
//! latency distribution as a percentile curve (the HdrHistogram way of showing a tail: the
//! x axis counts nines, so 90%, 99% and 99.9% are equally far apart).

use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;

use super::Samples;

/// One client's line: its label, whether it is this project's (drawn heavier), its points.
pub struct Line {
    pub label: String,
    pub ours: bool,
    pub points: Vec<(f64, f64)>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Bounds of a log axis around `values`, padded by a quarter of a decade on each side.
fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    (lo / 10f64.powf(0.25), hi * 10f64.powf(0.25))
}

fn style(i: usize, ours: bool) -> ShapeStyle {
    let color = Palette99::pick(i).to_rgba();
    ShapeStyle {
        color,
        filled: true,
        stroke_width: if ours { 3 } else { 1 },
    }
}

/// A linear axis with ticks where the caller wants them (plotters' own `with_key_points`
/// wrapper loses the label formatter of `f64` axes).
struct Ticked {
    from: f64,
    to: f64,
    keys: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = (self.to - self.from).max(f64::MIN_POSITIVE);
        let at = (value - self.from) / span;
        limit.0 + (at * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.max_num_points() == 0 {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.from..self.to
    }
}

/// The x axis of a picture: its title, its range, how a tick is labelled, and either a log
/// scale (`keys: None`) or a linear one ticked at `keys`.
struct XAxis<'a> {
    desc: &'a str,
    range: (f64, f64),
    label: &'a dyn Fn(&f64) -> String,
    keys: Option<Vec<f64>>,
}

/// Draws lines of `(x, y)` points on log-log axes.
fn draw(
    path: &Path,
    caption: &str,
    x: XAxis<'_>,
    y_desc: &str,
    lines: &[Line],
) -> Result<(), String> {
    let XAxis {
        desc: x_desc,
        range: x_range,
        label: x_label,
        keys: x_keys,
    } = x;
    let root = SVGBackend::new(path, (1040, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(caption, ("sans-serif", 22)).map_err(err)?;
    // The legend gets a column of its own, so that it never hides a line.
    let (plot_area, legend_area) = root.split_horizontally(760);
    for (i, line) in lines.iter().enumerate() {
        let s = style(i, line.ours);
        let y = 60 + 26 * i as i32;
        legend_area
            .draw(&PathElement::new(vec![(4, y), (34, y)], s))
            .map_err(err)?;
        legend_area
            .draw(&Text::new(
                line.label.as_str(),
                (42, y - 8),
                ("sans-serif", 14),
            ))
            .map_err(err)?;
    }
    let (ylo, yhi) = log_bounds(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)));
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(80);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(x_label)
                .y_label_formatter(&|y| format!("{y}"))
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(err)?;
            for (i, line) in lines.iter().enumerate() {
                let s = style(i, line.ours);
                chart
                    .draw_series(LineSeries::new(line.points.iter().copied(), s))
                    .map_err(err)?;
                if line.points.len() <= 16 {
                    chart
                        .draw_series(
                            line.points
                                .iter()
                                .map(|p| Circle::new(*p, 3 + line.ours as u32, s.filled())),
                        )
                        .map_err(err)?;
                }
            }
        }};
    }
    match x_keys {
        None => body!(builder
            .build_cartesian_2d((x_range.0..x_range.1).log_scale(), (ylo..yhi).log_scale())
            .map_err(err)?),
        Some(keys) => body!(builder
            .build_cartesian_2d(
                Ticked {
                    from: x_range.0,
                    to: x_range.1,
                    keys
                },
                (ylo..yhi).log_scale()
            )
            .map_err(err)?),
    }
    root.present().map_err(err)
}

/// Pairs per second against the number of callers, one line per client.
pub fn throughput(path: &Path, caption: &str, lines: &[Line]) -> Result<(), String> {
    against_count(
        path,
        caption,
        "concurrent callers",
        "lock + unlock pairs per second",
        lines,
    )
}

/// A figure against a count on the x axis (callers, contenders), both axes logarithmic, one
/// line per client; points that are not positive numbers are left out.
pub fn against_count(
    path: &Path,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
) -> Result<(), String> {
    let lines: Vec<Line> = lines
        .iter()
        .map(|l| Line {
            label: l.label.clone(),
            ours: l.ours,
            points: l
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.0 > 0.0 && p.1.is_finite() && p.1 > 0.0)
                .collect(),
        })
        .collect();
    let (lo, hi) = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = if lo > hi { (1.0, 10.0) } else { (lo, hi) };
    draw(
        path,
        caption,
        XAxis {
            desc: x_desc,
            range: (lo / 1.3, hi * 1.3),
            label: &|x| format!("{x:.0}"),
            keys: None,
        },
        y_desc,
        &lines,
    )
}

/// The median on the nines axis: `-log10(1 - 0.5)`.
const MEDIAN: f64 = std::f64::consts::LOG10_2;

/// The percentiles drawn: from the median to `1 - 10^-max_nines`, in steps of a tenth of a nine.
fn nines(max_nines: f64) -> impl Iterator<Item = f64> {
    std::iter::once(MEDIAN).chain((4..=(max_nines * 10.0) as u32).map(|n| n as f64 / 10.0))
}

/// A percentile's label for a nines value: 1 → "90%", 2 → "99%", 2.5 → "99.7%".
fn percentile_label(n: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-n));
    let digits = (n.ceil() as usize).saturating_sub(2).min(4);
    format!("{p:.digits$}%")
}

/// The latency distribution of several clients: milliseconds against percentile, the
/// percentile axis in nines, up to the deepest percentile every client's samples can show
/// (at least ten samples beyond it), at most 99.99%.
pub fn latency(
    path: &Path,
    caption: &str,
    clients: &[(String, bool, &Samples)],
) -> Result<(), String> {
    let fewest = clients
        .iter()
        .map(|c| c.2 .0.len())
        .min()
        .unwrap_or(0)
        .max(1);
    let max_nines = ((fewest as f64 / 10.0).log10()).clamp(1.0, 4.0);
    let lines: Vec<Line> = clients
        .iter()
        .map(|(label, ours, samples)| {
            let mut v = samples.0.clone();
            v.sort_unstable();
            let points = nines(max_nines)
                .filter(|_| !v.is_empty())
                .map(|n| {
                    let q = 1.0 - 10f64.powf(-n);
                    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
                    (n, v[rank - 1] as f64 / 1e6)
                })
                .collect();
            Line {
                label: label.clone(),
                ours: *ours,
                points,
            }
        })
        .collect();
    // Ticks at the median and at every whole nine.
    let keys: Vec<f64> = std::iter::once(MEDIAN)
        .chain((1..=max_nines.floor() as u32).map(f64::from))
        .collect();
    draw(
        path,
        caption,
        XAxis {
            desc: "percentile",
            range: (MEDIAN, max_nines),
            label: &|n| percentile_label(*n),
            keys: Some(keys),
        },
        "lock + unlock pair, ms",
        &lines,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_labelled_by_their_nines() {
        assert_eq!(percentile_label(1.0), "90%");
        assert_eq!(percentile_label(2.0), "99%");
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(0.3), "50%");
        assert_eq!(percentile_label(MEDIAN), "50%");
    }
}
