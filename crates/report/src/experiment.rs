//! The simulator's experiment output: `summary.csv` (one row per run), `runs.jsonl` (every
//! report in full), `timeseries/*.csv` for dynamic experiments and the SVG plots named after
//! the figure. Floats are written with fixed precision and runs in the points' order, so the
//! same reports give the same bytes.

use std::fmt::Write as _;
use std::path::Path;

use sluice_sim::experiment::{Experiment, Kind, RunPoint};
use sluice_sim::RunReport;

use crate::files::{create_dir, file_stem, write, CsvTable};
use crate::html::{write_page, ClaimRow, Page};
use crate::plot::{line_chart, line_chart_with_intervals, Axes, Interval, Series};
use crate::stats::MeanCi;

/// Writes every output file of `e`'s run into `out` (created if needed); `reports` are in
/// the order of `e.points`.
pub fn write_all(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    if reports.len() != e.points.len() {
        return Err(format!(
            "{}: {} reports for {} run points",
            e.name,
            reports.len(),
            e.points.len()
        ));
    }
    create_dir(out)?;
    write_summary(out, e, reports)?;
    write_runs_json(out, e, reports)?;
    if e.kind == Kind::Dynamic {
        write_timeseries(out, e, reports)?;
    }
    let mut plots = Vec::new();
    let mut claims = Vec::new();
    if e.kind == Kind::Sample {
        let results = crate::claims::evaluate(e, reports);
        plots = crate::claims::write_claims(out, e, &results)?;
        claims = crate::claims::claim_rows(&results);
    } else {
        draw(out, e, reports, &mut plots)?;
    }
    write_page(out, &page(e, plots, claims))
}

/// `report.html` of the experiment's output folder.
fn page(e: &Experiment, plots: Vec<String>, claims: Vec<ClaimRow>) -> Page {
    let source = [e.paper.as_str(), e.figure.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(", ");
    let mut xs: Vec<f64> = e.points.iter().map(|p| p.x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let seeds = seeds_per_point(e);
    let first = e.points.first().map(|p| &p.scenario);
    let timing = first.map_or(String::new(), |s| {
        if s.warmup_s > 0.0 {
            format!(
                "; {} simulated seconds each, the first {} left out as warm-up",
                s.duration_s, s.warmup_s
            )
        } else {
            format!("; {} simulated seconds each, no warm-up", s.duration_s)
        }
    });
    let what = match e.kind {
        Kind::Sample => format!(
            "{} runs: {} variants on {} sampled topologies{timing}.",
            e.points.len(),
            e.variants.len(),
            xs.len()
        ),
        Kind::Dynamic => format!(
            "{} runs: {} variants, {seeds} seed(s){timing}.",
            e.points.len(),
            e.variants.len()
        ),
        Kind::Sweep => format!(
            "{} runs: {} variants at {} values of {}, {seeds} seed(s) each{timing}.",
            e.points.len(),
            e.variants.len(),
            xs.len(),
            e.x_name
        ),
    };
    let mut notes = vec![what];
    if seeds > 1 && e.kind != Kind::Sample {
        notes.push(format!(
            "Curves are the means over the {seeds} seeds; the shaded bands (and error bars, \
             where the points are few) are the 95 % confidence intervals of those means \
             (Student's t, {} degree{} of freedom; cut at 0).",
            seeds - 1,
            if seeds == 2 { "" } else { "s" }
        ));
    }
    let mut files = vec![(
        "runs.jsonl".to_owned(),
        "every run's report in full, one JSON object a line".to_owned(),
    )];
    let tables = match e.kind {
        Kind::Sample => {
            files.push(("summary.csv".into(), "one row per run".into()));
            files.push((
                "topologies.csv".into(),
                "what was drawn for each topology".into(),
            ));
            vec![
                ("Claims per variant".to_owned(), "claims.csv".to_owned()),
                (
                    "Worst topologies per claim".to_owned(),
                    "worst.csv".to_owned(),
                ),
            ]
        }
        Kind::Dynamic => {
            files.push((
                "timeseries/".into(),
                "per run, second by second: goodput and offered load per source, queue, occupancy"
                    .into(),
            ));
            vec![(
                "Summary: one row per run".to_owned(),
                "summary.csv".to_owned(),
            )]
        }
        Kind::Sweep => vec![(
            "Summary: one row per run".to_owned(),
            "summary.csv".to_owned(),
        )],
    };
    Page {
        title: e.title.clone(),
        name: e.name.clone(),
        source,
        expectation: e.expectation.clone(),
        notes,
        plots,
        claims,
        tables,
        files,
    }
}

/// The columns of `summary.csv`, one row per run; the live benches' summaries add theirs
/// after these, so the simulator's and a bench's files read alike.
pub const SUMMARY_COLUMNS: [&str; 18] = [
    "experiment",
    "variant",
    "algorithm",
    "seed",
    "x",
    "offered_load",
    "goodput",
    "goodput_cps",
    "retrans_ratio",
    "setup_delay_p50_ms",
    "setup_delay_p99_ms",
    "occupancy",
    "reject_ratio",
    "offered_load_measured",
    "calls_offered",
    "calls_good",
    "re_queue_mean",
    "re_dropped",
];

/// One row per run. Floats have fixed precision so identical runs give identical files.
fn write_summary(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let mut csv = CsvTable::new(SUMMARY_COLUMNS);
    for (p, r) in e.points.iter().zip(reports) {
        csv.row([
            e.name.clone(),
            p.variant.clone(),
            p.scenario.re.control.algorithm.to_string(),
            p.seed.to_string(),
            p.x.to_string(),
            format!("{:.3}", p.offered_load),
            format!("{:.4}", r.goodput),
            format!("{:.3}", r.goodput_cps),
            format!("{:.4}", r.retrans_ratio),
            format!("{:.2}", r.setup_delay_p50_ms),
            format!("{:.2}", r.setup_delay_p99_ms),
            format!("{:.4}", r.occupancy),
            format!("{:.4}", r.reject_ratio),
            format!("{:.4}", r.offered_load),
            r.calls_offered.to_string(),
            r.calls_good.to_string(),
            format!("{:.2}", r.re_queue_mean),
            r.re_dropped.to_string(),
        ]);
    }
    write(&out.join("summary.csv"), &csv.into_text())
}

/// Every report in full, one JSON object per line, for analysis beyond the summary.
fn write_runs_json(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let mut text = String::new();
    for (p, r) in e.points.iter().zip(reports) {
        let line = serde_json::json!({ "variant": p.variant, "seed": p.seed, "x": p.x, "offered_load": p.offered_load, "report": r });
        let _ = writeln!(text, "{line}");
    }
    write(&out.join("runs.jsonl"), &text)
}

fn write_timeseries(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let dir = out.join("timeseries");
    create_dir(&dir)?;
    for (p, r) in e.points.iter().zip(reports) {
        let Some(ts) = &r.timeseries else { continue };
        let names: Vec<String> = r.per_source.iter().map(|s| s.name.clone()).collect();
        let mut csv = String::from("t_s");
        for n in &names {
            let _ = write!(csv, ",goodput_cps_{n}");
        }
        for n in &names {
            let _ = write!(csv, ",offered_cps_{n}");
        }
        csv.push_str(",goodput_cps_total,queue_len,occupancy\n");
        for pt in &ts.points {
            let _ = write!(csv, "{:.1}", pt.t_s);
            for g in &pt.goodput_cps {
                let _ = write!(csv, ",{g:.3}");
            }
            for o in &pt.offered_cps {
                let _ = write!(csv, ",{o:.3}");
            }
            let _ = writeln!(
                csv,
                ",{:.3},{:.2},{:.4}",
                pt.goodput_cps.iter().sum::<f64>(),
                pt.queue_len,
                pt.occupancy
            );
        }
        let name = format!("{}-seed{}.csv", file_stem(&p.variant), p.seed);
        write(&dir.join(name), &csv)?;
    }
    Ok(())
}

/// Per variant, in the sweep's load order: the mean over seeds of `y` at each x, and the
/// 95 % confidence interval of that mean (none with a single seed). Every quantity plotted
/// is a count or a share, never negative, so an interval is cut at 0.
fn sweep_series(
    e: &Experiment,
    reports: &[RunReport],
    y: impl Fn(&RunReport) -> f64,
) -> (Vec<Series>, Vec<Vec<Interval>>) {
    e.variants
        .iter()
        .map(|v| {
            let mut samples: Vec<(f64, Vec<f64>)> = Vec::new();
            for (p, r) in e
                .points
                .iter()
                .zip(reports)
                .filter(|(p, _)| &p.variant == v)
            {
                match samples.iter_mut().find(|q| (q.0 - p.x).abs() < 1e-12) {
                    Some(q) => q.1.push(y(r)),
                    None => samples.push((p.x, vec![y(r)])),
                }
            }
            let cis: Vec<(f64, MeanCi)> =
                samples.iter().map(|(x, ys)| (*x, MeanCi::of(ys))).collect();
            let series = Series {
                label: v.clone(),
                points: cis.iter().map(|(x, ci)| (*x, ci.mean)).collect(),
            };
            let intervals = cis
                .iter()
                .filter(|(_, ci)| ci.half_width.is_finite())
                .map(|(x, ci)| Interval {
                    x: *x,
                    low: ci.low().max(0.0),
                    high: ci.high(),
                })
                .collect();
            (series, intervals)
        })
        .unzip()
}

/// The number of seeds each point of `e` ran with (the most any point had).
fn seeds_per_point(e: &Experiment) -> usize {
    let mut seeds: Vec<u64> = e.points.iter().map(|p| p.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    seeds.len()
}

/// What a chart's title adds when its curves are means over seeds.
fn over_seeds(seeds: usize) -> String {
    if seeds > 1 {
        format!(" (mean of {seeds} seeds, 95 % CI)")
    } else {
        String::new()
    }
}

/// Draws the plots of `e`, adding each file's name to `plots` in the order a reader
/// should see them.
fn draw(
    out: &Path,
    e: &Experiment,
    reports: &[RunReport],
    plots: &mut Vec<String>,
) -> Result<(), String> {
    let title = if e.figure.is_empty() {
        e.title.clone()
    } else {
        format!("{}: {}", e.figure, e.title)
    };
    match e.kind {
        Kind::Sweep => {
            let title = format!("{title}{}", over_seeds(seeds_per_point(e)));
            let (goodput, goodput_ci) = sweep_series(e, reports, |r| r.goodput);
            let x_max = e.points.iter().map(|p| p.x).fold(0.0, f64::max);
            let ideal = Series {
                label: "theoretical maximum".into(),
                points: vec![(0.0, 0.0), (1.0, 1.0), (x_max.max(1.0), 1.0)],
            };
            let axes = Axes {
                title: &title,
                x_label: &e.plot.x_label,
                y_label: &e.plot.y_label,
                y_max: e.plot.y_max,
            };
            let ideal = match e.plot.optimal_goodput_target_cpu {
                Some(target_cpu) => optimal_goodput_series(reports, target_cpu, x_max),
                None => ideal,
            };
            let ideal = (e.plot.ideal_line && e.x_name == "offered_load").then_some(&ideal);
            let mut plot = |name: String,
                            axes: &Axes<'_>,
                            (series, intervals): (Vec<Series>, Vec<Vec<Interval>>),
                            reference: Option<&Series>|
             -> Result<(), String> {
                line_chart_with_intervals(&out.join(&name), axes, &series, &intervals, reference)?;
                plots.push(name);
                Ok(())
            };
            plot(
                format!("{}.svg", e.name),
                &axes,
                (goodput, goodput_ci),
                ideal,
            )?;
            // The goodput plot carries the figure's own title; the other two say what they show.
            let figure = if e.figure.is_empty() {
                e.name.as_str()
            } else {
                e.figure.as_str()
            };
            let setup_title = format!(
                "{figure}: session setup delay p99{}",
                over_seeds(seeds_per_point(e))
            );
            let axes = Axes {
                title: &setup_title,
                x_label: &e.plot.x_label,
                y_label: "Session setup delay p99 (ms)",
                y_max: 0.0,
            };
            plot(
                format!("{}-setup-delay.svg", e.name),
                &axes,
                sweep_series(e, reports, |r| r.setup_delay_p99_ms),
                None,
            )?;
            let retrans_title = format!(
                "{figure}: retransmitted share of RE arrivals{}",
                over_seeds(seeds_per_point(e))
            );
            let axes = Axes {
                title: &retrans_title,
                x_label: &e.plot.x_label,
                y_label: "Retransmitted share of RE arrivals",
                y_max: 0.0,
            };
            plot(
                format!("{}-retransmissions.svg", e.name),
                &axes,
                sweep_series(e, reports, |r| r.retrans_ratio),
                None,
            )
        }
        Kind::Sample => Ok(()),
        Kind::Dynamic => {
            let figure = if e.figure.is_empty() {
                e.name.as_str()
            } else {
                e.figure.as_str()
            };
            let y_max = e.plot.y_max;
            // With several seeds, each variant's mean over them leads its per-seed plots.
            for v in &e.variants {
                let runs: Vec<Vec<Series>> = e
                    .points
                    .iter()
                    .zip(reports)
                    .filter(|(p, _)| &p.variant == v)
                    .filter_map(|(_, r)| goodput_over_time(r))
                    .collect();
                if runs.len() < 2 {
                    continue;
                }
                let (series, intervals) = mean_over_runs(&runs);
                let t = format!(
                    "{figure}: {v} ({SMOOTHING_S:.0} s moving average, mean of {} seeds, 95 % CI)",
                    runs.len()
                );
                let name = format!("{}-{}-mean.svg", e.name, file_stem(v));
                line_chart_with_intervals(
                    &out.join(&name),
                    &goodput_axes(&t, y_max),
                    &series,
                    &intervals,
                    None,
                )?;
                plots.push(name);
            }
            for (p, r) in e.points.iter().zip(reports) {
                let (Some(ts), Some(series)) = (&r.timeseries, goodput_over_time(r)) else {
                    continue;
                };
                let t = format!(
                    "{figure}: {} ({SMOOTHING_S:.0} s moving average)",
                    p.variant
                );
                let name = format!("{}-{}-seed{}.svg", e.name, file_stem(&p.variant), p.seed);
                line_chart(&out.join(&name), &goodput_axes(&t, y_max), &series, None)?;
                plots.push(name);
                if e.plot.dynamics {
                    plots.extend(draw_dynamics(out, e, p, ts, figure)?);
                }
            }
            Ok(())
        }
    }
}

/// The axes of a dynamic run's goodput over time.
fn goodput_axes(title: &str, y_max: f64) -> Axes<'_> {
    Axes {
        title,
        x_label: "Time (s)",
        y_label: "Goodput (normalised to capacity)",
        y_max,
    }
}

/// A dynamic run's goodput per source and in total over time, normalised to capacity and
/// smoothed over [`SMOOTHING_S`]; `None` for a run without a time series.
fn goodput_over_time(r: &RunReport) -> Option<Vec<Series>> {
    let ts = r.timeseries.as_ref()?;
    let cap = r.capacity_cps.max(1e-9);
    let per_second = |f: &dyn Fn(&sluice_sim::SeriesPoint) -> f64| -> Vec<(f64, f64)> {
        smooth(
            &ts.points
                .iter()
                .map(|pt| (pt.t_s, f(pt) / cap))
                .collect::<Vec<_>>(),
            SMOOTHING_S,
        )
    };
    let mut series: Vec<Series> = r
        .per_source
        .iter()
        .enumerate()
        .map(|(i, s)| Series {
            label: s.name.clone(),
            points: per_second(&|pt| pt.goodput_cps.get(i).copied().unwrap_or(0.0)),
        })
        .collect();
    series.push(Series {
        label: "total".into(),
        points: per_second(&|pt| pt.goodput_cps.iter().sum::<f64>()),
    });
    Some(series)
}

/// The mean of the same curves of several runs, second by second, with its 95 %
/// confidence interval (cut at 0: goodput is never negative); as long as the shortest run.
fn mean_over_runs(runs: &[Vec<Series>]) -> (Vec<Series>, Vec<Vec<Interval>>) {
    let Some(first) = runs.first() else {
        return (Vec::new(), Vec::new());
    };
    first
        .iter()
        .enumerate()
        .map(|(k, curve)| {
            let len = runs
                .iter()
                .map(|run| run.get(k).map_or(0, |s| s.points.len()))
                .min()
                .unwrap_or(0);
            let cis: Vec<(f64, MeanCi)> = (0..len)
                .map(|i| {
                    let ys: Vec<f64> = runs.iter().map(|run| run[k].points[i].1).collect();
                    (curve.points[i].0, MeanCi::of(&ys))
                })
                .collect();
            (
                Series {
                    label: curve.label.clone(),
                    points: cis.iter().map(|(x, ci)| (*x, ci.mean)).collect(),
                },
                cis.iter()
                    .map(|(x, ci)| Interval {
                        x: *x,
                        low: ci.low().max(0.0),
                        high: ci.high(),
                    })
                    .collect(),
            )
        })
        .unzip()
}

/// The RE's dynamics of one run, as De Cicco et al.'s Figure 9: CPU load, accept ratio and
/// queue length (normalised to the INVITE queue's capacity) on one chart, the INVITEs'
/// queueing time on another. Seconds without INVITEs leave gaps rather than zeros.
fn draw_dynamics(
    out: &Path,
    e: &Experiment,
    p: &RunPoint,
    ts: &sluice_sim::TimeSeries,
    figure: &str,
) -> Result<[String; 2], String> {
    let q_max = p.scenario.re.invite_queue_capacity.max(1) as f64;
    let series_of = |label: &str, f: &dyn Fn(&sluice_sim::SeriesPoint) -> f64| Series {
        label: label.into(),
        points: ts
            .points
            .iter()
            .map(|pt| (pt.t_s, f(pt)))
            .filter(|(_, y)| y.is_finite())
            .collect(),
    };
    let fractions = vec![
        series_of("CPU load", &|pt| pt.occupancy),
        series_of("accept ratio", &|pt| pt.accept_ratio),
        series_of("queue length / q_M", &|pt| pt.queue_len / q_max),
    ];
    let t = format!("{figure}: {} (1 s bins)", p.variant);
    let axes = Axes {
        title: &t,
        x_label: "Time (s)",
        y_label: "Fraction",
        y_max: 1.1,
    };
    let stem = format!("{}-{}-seed{}", e.name, file_stem(&p.variant), p.seed);
    let names = [
        format!("{stem}-dynamics.svg"),
        format!("{stem}-queueing.svg"),
    ];
    line_chart(&out.join(&names[0]), &axes, &fractions, None)?;
    let queueing = vec![series_of("INVITE queueing time (ms)", &|pt| {
        pt.invite_queueing_ms
    })];
    let axes = Axes {
        title: &t,
        x_label: "Time (s)",
        y_label: "Queueing time (ms)",
        y_max: 0.0,
    };
    line_chart(&out.join(&names[1]), &axes, &queueing, None)?;
    Ok(names)
}

/// De Cicco et al.'s `g_opt(r)` (eq. 2) over `[0, x_max]` for the runs' cost ratio `β`
/// (the first run's: an experiment that varies `β` has no single bound).
fn optimal_goodput_series(reports: &[RunReport], target_cpu: f64, x_max: f64) -> Series {
    let beta = reports
        .iter()
        .map(|r| r.beta)
        .find(|b| *b > 1.0)
        .unwrap_or(f64::NAN);
    let steps = 200;
    Series {
        label: format!("g_opt (C_T = {target_cpu}, beta = {beta:.2})"),
        points: (0..=steps)
            .map(|i| {
                let r = x_max * f64::from(i) / f64::from(steps);
                (
                    r,
                    sluice_control::optimal::optimal_goodput(r, beta, target_cpu),
                )
            })
            .filter(|(_, g)| g.is_finite())
            .collect(),
    }
}

/// Plots of per-second goodput are smoothed over this window, as the paper's are; the CSV
/// files keep the raw seconds.
const SMOOTHING_S: f64 = 10.0;

/// Centred moving average over `window` seconds of (t, y) points spaced one second apart.
fn smooth(points: &[(f64, f64)], window: f64) -> Vec<(f64, f64)> {
    let half = (window / 2.0).max(0.0) as usize;
    (0..points.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + half + 1).min(points.len());
            let mean = points[lo..hi].iter().map(|p| p.1).sum::<f64>() / (hi - lo) as f64;
            (points[i].0, mean)
        })
        .collect()
}
