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
    stacked_charts(
        path,
        &[Panel {
            axes: *axes,
            series,
            reference,
        }],
    )
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
        draw_panel(area, panel).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;
type PlotError<'b> = DrawingAreaErrorKind<<SVGBackend<'b> as DrawingBackend>::ErrorType>;

fn draw_panel<'b>(area: &Area<'b>, panel: &Panel<'_>) -> Result<(), PlotError<'b>> {
    let Panel {
        axes,
        series,
        reference,
    } = *panel;
    let all = series.iter().chain(reference).flat_map(|s| s.points.iter());
    let x_max = all.clone().map(|p| p.0).fold(0.0_f64, f64::max).max(1e-9) * 1.02;
    let y_max = if axes.y_max > 0.0 {
        axes.y_max
    } else {
        all.map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.1
    };
    let mut chart = ChartBuilder::on(area)
        .caption(axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
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
