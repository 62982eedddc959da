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
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let all = series.iter().chain(reference).flat_map(|s| s.points.iter());
    let x_max = all.clone().map(|p| p.0).fold(0.0_f64, f64::max).max(1e-9) * 1.02;
    let y_max = if axes.y_max > 0.0 {
        axes.y_max
    } else {
        all.map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.1
    };
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| err(&e))?;
    if let Some(r) = reference {
        let dashed = DashedLineSeries::new(
            r.points.iter().copied(),
            6,
            4,
            BLACK.mix(0.5).stroke_width(1),
        );
        chart
            .draw_series(dashed)
            .map_err(|e| err(&e))?
            .label(r.label.as_str())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    }
    for (i, s) in series.iter().enumerate() {
        let color = style(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.points.len() <= 40 {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
