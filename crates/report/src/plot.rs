//! SVG plots drawn like the papers' figures (plotters, SVG backend: no fonts or system
//! libraries needed, deterministic output).

use std::path::Path;

use plotters::prelude::*;

/// One curve: a label and its points.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Axis text and limits.
#[derive(Clone, Copy, Debug)]
pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// The y axis's upper end when the data fit under it (goodput plots use 1.1); 0 fits
    /// the axis to the data.
    pub y_max: f64,
}

/// Colours and point markers cycle so that up to a dozen curves stay distinguishable in print.
fn style(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 0, 0),
        RGBColor(150, 150, 150),
    ];
    PALETTE[i % PALETTE.len()]
}

/// A line chart with point markers; `reference` is drawn dashed (e.g. the ideal goodput).
pub fn line_chart(
    path: &Path,
    axes: &Axes<'_>,
    series: &[Series],
    reference: Option<&Series>,
) -> Result<(), String> {
    stacked_charts(
        path,
        &[Panel {
            axes: *axes,
            series,
            reference,
        }],
    )
}

/// A confidence interval around a plotted mean at `x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub x: f64,
    pub low: f64,
    pub high: f64,
}

/// [`line_chart`] of means, each `series[i]` with its confidence intervals
/// `intervals[i]` drawn as a shaded band in its colour, and error bars where there are at
/// most 40 (a series whose intervals are empty is drawn as a plain line).
pub fn line_chart_with_intervals(
    path: &Path,
    axes: &Axes<'_>,
    series: &[Series],
    intervals: &[Vec<Interval>],
    reference: Option<&Series>,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panel = Panel {
        axes: *axes,
        series,
        reference,
    };
    draw_panel(&root, &panel, intervals).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// One chart of [`stacked_charts`].
#[derive(Clone, Copy, Debug)]
pub struct Panel<'a> {
    pub axes: Axes<'a>,
    pub series: &'a [Series],
    /// Drawn dashed.
    pub reference: Option<&'a Series>,
}

/// Line charts one above the other in one SVG (e.g. a quantity and what it costs, over
/// the same time axis), each with its own y axis and legend.
pub fn stacked_charts(path: &Path, panels: &[Panel<'_>]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let height = 520 + 360 * u32::try_from(panels.len().saturating_sub(1)).unwrap_or(0);
    let root = SVGBackend::new(path, (800, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(area, panel, &[]).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;
type PlotError<'b> = DrawingAreaErrorKind<<SVGBackend<'b> as DrawingBackend>::ErrorType>;

/// The y axis's range: from 0 (or below, for negative data) to `y_max` when the axes give
/// one and the data fit under it, else to a little above the highest value, so nothing
/// drawn is cut off (a goodput a little over 1 included).
fn y_range(axes: &Axes<'_>, ys: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = ys
        .filter(|y| y.is_finite())
        .fold((0.0_f64, 0.0_f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let top = if axes.y_max > 0.0 {
        if hi <= axes.y_max {
            axes.y_max
        } else {
            hi + 0.05 * (hi - lo)
        }
    } else {
        hi.max(1e-9) * 1.1
    };
    let bottom = if lo < 0.0 {
        lo - 0.05 * (top - lo)
    } else {
        0.0
    };
    (bottom, top)
}

fn draw_panel<'b>(
    area: &Area<'b>,
    panel: &Panel<'_>,
    intervals: &[Vec<Interval>],
) -> Result<(), PlotError<'b>> {
    let Panel {
        axes,
        series,
        reference,
    } = *panel;
    let all = series.iter().chain(reference).flat_map(|s| s.points.iter());
    let x_max = all
        .clone()
        .map(|p| p.0)
        .filter(|x| x.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.02;
    let bounds = intervals.iter().flatten().flat_map(|i| [i.low, i.high]);
    let (y_min, y_max) = y_range(&axes, all.map(|p| p.1).chain(bounds));
    let mut chart = ChartBuilder::on(area)
        .caption(axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, y_min..y_max)?;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    if let Some(r) = reference {
        let dashed = DashedLineSeries::new(
            r.points.iter().copied(),
            6,
            4,
            BLACK.mix(0.5).stroke_width(1),
        );
        chart
            .draw_series(dashed)?
            .label(r.label.as_str())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    }
    // Bands first, so that every line is drawn over them.
    for (i, band) in intervals.iter().enumerate().take(series.len()) {
        let band: Vec<&Interval> = band
            .iter()
            .filter(|b| b.low.is_finite() && b.high.is_finite())
            .collect();
        let color = style(i);
        if band.len() >= 2 {
            let outline: Vec<(f64, f64)> = band
                .iter()
                .map(|b| (b.x, b.high))
                .chain(band.iter().rev().map(|b| (b.x, b.low)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                color.mix(0.15).filled(),
            )))?;
        }
        // Error bars where they stay apart (as the point markers); a dense band is enough.
        if band.len() > 40 {
            continue;
        }
        let cap = x_max * 0.005;
        chart.draw_series(band.iter().flat_map(|b| {
            [
                PathElement::new(vec![(b.x, b.low), (b.x, b.high)], color.stroke_width(1)),
                PathElement::new(
                    vec![(b.x - cap, b.low), (b.x + cap, b.low)],
                    color.stroke_width(1),
                ),
                PathElement::new(
                    vec![(b.x - cap, b.high), (b.x + cap, b.high)],
                    color.stroke_width(1),
                ),
            ]
        }))?;
    }
    for (i, s) in series.iter().enumerate() {
        let color = style(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.points.len() <= 40 {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    const AXES: Axes<'static> = Axes {
        title: "t",
        x_label: "x",
        y_label: "y",
        y_max: 1.1,
    };

    #[test]
    fn the_y_axis_fits_values_above_its_usual_end() {
        assert_eq!(y_range(&AXES, [0.2, 0.9, 1.05].into_iter()), (0.0, 1.1));
        let (bottom, top) = y_range(&AXES, [0.2, 1.18, f64::NAN].into_iter());
        assert!(bottom == 0.0 && top > 1.18, "{top}");
        let fitted = Axes { y_max: 0.0, ..AXES };
        let (bottom, top) = y_range(&fitted, [-0.5, 2.0].into_iter());
        assert!(bottom < -0.5 && top > 2.0, "{bottom} {top}");
    }

    #[test]
    fn intervals_are_drawn_as_bands_under_the_means() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ci.svg");
        let series = [Series {
            label: "mean".into(),
            points: vec![(0.5, 0.5), (1.0, 1.02), (2.0, 0.9)],
        }];
        let intervals = [vec![
            Interval {
                x: 0.5,
                low: 0.45,
                high: 0.55,
            },
            Interval {
                x: 1.0,
                low: 0.98,
                high: 1.16,
            },
            Interval {
                x: 2.0,
                low: 0.8,
                high: 1.0,
            },
        ]];
        line_chart_with_intervals(&path, &AXES, &series, &intervals, None).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert_eq!(svg.matches("<polygon").count(), 1, "one band");
        // The band's top (1.16) is above 1.1, so the axis reaches past it: its last
        // label is 1.2.
        assert!(svg.contains("\n1.2\n"), "{svg}");
        // Each interval has its error bar and two caps, drawn as lines; a hundred
        // intervals have none, which would hide the band.
        let lines = |series: &[Series], intervals: &[Vec<Interval>]| {
            let path = dir.path().join("lines.svg");
            line_chart_with_intervals(&path, &AXES, series, intervals, None).unwrap();
            std::fs::read_to_string(&path)
                .unwrap()
                .matches("<polyline")
                .count()
        };
        let sparse = intervals[0]
            .iter()
            .map(|i| Interval { high: 1.05, ..*i })
            .collect();
        assert_eq!(
            lines(&series, &[sparse]),
            lines(&series, &[Vec::new()]) + 3 * 3
        );
        let dense = [Series {
            label: "mean".into(),
            points: (0..100).map(|i| (f64::from(i), 0.5)).collect(),
        }];
        let dense_intervals = (0..100)
            .map(|i| Interval {
                x: f64::from(i),
                low: 0.4,
                high: 0.6,
            })
            .collect();
        assert_eq!(
            lines(&dense, &[dense_intervals]),
            lines(&dense, &[Vec::new()])
        );
        // One run (no interval): a plain line.
        let plain = dir.path().join("plain.svg");
        line_chart_with_intervals(&plain, &AXES, &series, &[Vec::new()], None).unwrap();
        let svg = std::fs::read_to_string(&plain).unwrap();
        assert!(!svg.contains("<polygon"));
    }
}
