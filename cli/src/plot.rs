//! `bench --plot FILE.svg`: the run's latency histogram as a picture.
//!
//! Latencies span decades (a pair in 100 µs, a stall in 50 ms), so the x axis is logarithmic
//! and the buckets are equally wide on it: twenty per decade. The y axis is the share of the
//! run's rounds in each bucket, so that lock rounds and pairs, counted differently, compare.

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;

use crate::exit::{self, Failure};
use crate::stats::{human_us, QUANTILES};

/// Buckets per decade of latency.
const PER_DECADE: f64 = 20.0;

/// A histogram's buckets: (low µs, high µs, share of all its samples), empty ones left out.
fn buckets(h: &Histogram<u64>) -> Vec<(f64, f64, f64)> {
    let total = h.len().max(1) as f64;
    let width = 10f64.powf(1.0 / PER_DECADE);
    let mut out: Vec<(f64, f64, f64)> = Vec::new();
    for v in h.iter_recorded() {
        let us = (v.value_iterated_to() as f64).max(1.0);
        let i = (us.log10() * PER_DECADE).floor();
        let lo = 10f64.powf(i / PER_DECADE);
        let share = v.count_at_value() as f64 / total;
        match out.last_mut() {
            Some(last) if (last.0 - lo).abs() < lo * 1e-9 => last.2 += share,
            _ => out.push((lo, lo * width, share)),
        }
    }
    out
}

/// Draws `series` (a label and a histogram of microseconds each) into `path`, with the first
/// one's quantiles marked; `caption` heads the picture.
pub fn histogram(
    path: &Path,
    caption: &str,
    series: &[(&str, &Histogram<u64>)],
) -> Result<(), Failure> {
    draw(path, caption, series)
        .map_err(|e| Failure::new(exit::OS, format!("--plot {}: {e}", path.display())))
}

fn draw(
    path: &Path,
    caption: &str,
    series: &[(&str, &Histogram<u64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let bars: Vec<Vec<(f64, f64, f64)>> = series.iter().map(|(_, h)| buckets(h)).collect();
    let all = bars.iter().flatten();
    let lo = all.clone().map(|b| b.0).fold(f64::MAX, f64::min);
    let hi = all.clone().map(|b| b.1).fold(0.0, f64::max);
    let top = all.map(|b| b.2).fold(0.0, f64::max);
    let (lo, hi) = if lo < hi {
        (lo / 1.5, hi * 1.5)
    } else {
        (1.0, 10.0)
    };

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..(top * 1.15).max(0.01))?;
    chart
        .configure_mesh()
        .x_desc("latency (log scale)")
        .y_desc("share of rounds")
        .x_label_formatter(&|us| human_us(us.round() as u64))
        .y_label_formatter(&|s| format!("{:.0}%", s * 100.0))
        .light_line_style(WHITE)
        .draw()?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (i, ((label, _), b)) in series.iter().zip(&bars).enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(b.iter().map(|&(x0, x1, share)| {
                Rectangle::new([(x0, 0.0), (x1, share)], color.mix(0.45).filled())
            }))?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    // The first series' quantiles, as the report prints them, labels staggered downwards so
    // that close ones do not overwrite each other.
    if let Some((label, h)) = series.first() {
        for (i, (name, q)) in QUANTILES.into_iter().enumerate() {
            let us = h.value_at_quantile(q).max(1) as f64;
            let y = top * (1.1 - 0.07 * i as f64);
            chart.draw_series(LineSeries::new(
                [(us, 0.0), (us, y)],
                BLACK.mix(0.6).stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(Text::new(
                format!(" {label} {name} {}", human_us(us as u64)),
                (us, y),
                ("sans-serif", 12),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_a_twentieth_of_a_decade_and_shares_add_up() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for us in [100, 101, 105, 120, 1_000, 1_000, 50_000] {
            h.record(us).unwrap();
        }
        let b = buckets(&h);
        let total: f64 = b.iter().map(|x| x.2).sum();
        assert!((total - 1.0).abs() < 1e-9, "{b:?}");
        // 100, 101 and 105 share [100, 112.2); 120 is in the next; 1000 twice; 50000 alone.
        assert_eq!(b.len(), 4, "{b:?}");
        assert!((b[0].0 - 100.0).abs() < 1e-6 && (b[0].2 - 3.0 / 7.0).abs() < 1e-9);
        assert!((b[1].2 - 1.0 / 7.0).abs() < 1e-9);
        assert!((b[2].2 - 2.0 / 7.0).abs() < 1e-9);
        for (lo, hi, _) in b {
            assert!((hi / lo - 10f64.powf(0.05)).abs() < 1e-9);
        }
    }

    #[test]
    fn an_empty_run_still_draws() {
        let h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let dir = std::env::temp_dir().join(format!("redlock-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.svg");
        histogram(&path, "nothing", &[("pair", &h)]).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("<svg"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
