//! `sluice sim`: run an experiment (a TOML file or a built-in name) in the simulator and write
//! `summary.csv`, per-run JSON, time series and SVG plots into an output folder.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::Args;
use sluice_sim::experiment::{Experiment, Kind, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::plot::{self, Axes, Series};

/// The experiments shipped with sluice, embedded so `sluice sim NAME` needs no files.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "decicco-fig09",
        include_str!("../../../experiments/decicco-fig09.toml"),
    ),
    (
        "decicco-fig11-12",
        include_str!("../../../experiments/decicco-fig11-12.toml"),
    ),
    (
        "shen2008-eq2-rate-abs-c",
        include_str!("../../../experiments/shen2008-eq2-rate-abs-c.toml"),
    ),
    (
        "shen2008-fig04",
        include_str!("../../../experiments/shen2008-fig04.toml"),
    ),
    (
        "shen2008-fig07",
        include_str!("../../../experiments/shen2008-fig07.toml"),
    ),
    (
        "shen2008-fig08",
        include_str!("../../../experiments/shen2008-fig08.toml"),
    ),
    (
        "shen2008-fig09",
        include_str!("../../../experiments/shen2008-fig09.toml"),
    ),
    (
        "shen2008-fig10",
        include_str!("../../../experiments/shen2008-fig10.toml"),
    ),
    (
        "shen2008-fig11",
        include_str!("../../../experiments/shen2008-fig11.toml"),
    ),
    (
        "shen2008-fig12",
        include_str!("../../../experiments/shen2008-fig12.toml"),
    ),
    (
        "shen2008-fig13",
        include_str!("../../../experiments/shen2008-fig13.toml"),
    ),
    (
        "shen2008-fig14",
        include_str!("../../../experiments/shen2008-fig14.toml"),
    ),
    (
        "shen2008-fig15",
        include_str!("../../../experiments/shen2008-fig15.toml"),
    ),
    (
        "shen2008-fig16",
        include_str!("../../../experiments/shen2008-fig16.toml"),
    ),
    (
        "shen2008-fig17",
        include_str!("../../../experiments/shen2008-fig17.toml"),
    ),
    (
        "shen2008-fig18",
        include_str!("../../../experiments/shen2008-fig18.toml"),
    ),
    (
        "shen2008-fig19",
        include_str!("../../../experiments/shen2008-fig19.toml"),
    ),
    (
        "shen2008-fig20",
        include_str!("../../../experiments/shen2008-fig20.toml"),
    ),
    (
        "shen2008-fig21",
        include_str!("../../../experiments/shen2008-fig21.toml"),
    ),
    (
        "shen2008-fig21-low-delay",
        include_str!("../../../experiments/shen2008-fig21-low-delay.toml"),
    ),
    (
        "shen2008-fig24-26",
        include_str!("../../../experiments/shen2008-fig24-26.toml"),
    ),
    (
        "shen2008-fig27-31",
        include_str!("../../../experiments/shen2008-fig27-31.toml"),
    ),
    (
        "shen2008-fig32-37",
        include_str!("../../../experiments/shen2008-fig32-37.toml"),
    ),
];

#[derive(Args, Debug)]
pub struct SimArgs {
    /// An experiment: a TOML file, or the name of a built-in one (see --list).
    #[arg(required_unless_present = "list")]
    experiment: Option<String>,
    /// List the built-in experiments and exit.
    #[arg(long)]
    list: bool,
    /// Output folder (default: out/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run with these seeds instead of the experiment's (repeatable).
    #[arg(long = "seed")]
    seeds: Vec<u64>,
    /// Parallel runs (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Simulated seconds per run instead of the experiment's (warm-up scales with it).
    #[arg(long)]
    duration: Option<f64>,
    /// Only these offered loads of the sweep (repeatable).
    #[arg(long = "load")]
    loads: Vec<f64>,
}

pub fn run(args: &SimArgs) -> Result<(), String> {
    if args.list {
        list_builtins(BUILTIN);
        return Ok(());
    }
    let which = args.experiment.as_deref().unwrap_or_default();
    let text = experiment_text(BUILTIN, which, "sim")?;
    let overrides = Overrides {
        seeds: (!args.seeds.is_empty()).then(|| args.seeds.clone()),
        duration_s: args.duration,
        loads: (!args.loads.is_empty()).then(|| args.loads.clone()),
    };
    let experiment = Experiment::from_toml(&text, &overrides)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out").join(&experiment.name));
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);

    let started = Instant::now();
    let reports = run_points(&experiment.points, jobs);
    let wall = started.elapsed().as_secs_f64();

    write_summary(&out, &experiment, &reports)?;
    write_runs_json(&out, &experiment, &reports)?;
    if experiment.kind == Kind::Dynamic {
        write_timeseries(&out, &experiment, &reports)?;
    }
    draw(&out, &experiment, &reports)?;
    print_table(&experiment, &reports);
    let messages: u64 = reports.iter().map(|r| r.messages_simulated).sum();
    eprintln!(
        "{} runs in {wall:.1} s wall ({jobs} jobs, {:.2} M simulated messages/s); output in {}",
        reports.len(),
        messages as f64 / wall.max(1e-9) / 1e6,
        out.display()
    );
    Ok(())
}

/// Prints each built-in experiment's name and title.
pub(crate) fn list_builtins(builtins: &[(&str, &str)]) {
    for (name, text) in builtins {
        let title = toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("title").and_then(|v| v.as_str().map(str::to_owned)))
            .unwrap_or_default();
        println!("{name:<28} {title}");
    }
}

/// The text of a built-in experiment by name, else of the file at that path.
pub(crate) fn experiment_text(
    builtins: &[(&str, &str)],
    which: &str,
    command: &str,
) -> Result<String, String> {
    match builtins.iter().find(|(name, _)| *name == which) {
        Some((_, text)) => Ok((*text).to_owned()),
        None => std::fs::read_to_string(which).map_err(|e| {
            format!("{which}: not a built-in experiment (see `sluice {command} --list`) and not a readable file: {e}")
        }),
    }
}

/// Runs every point on `jobs` threads; results come back in the points' order, so output
/// does not depend on scheduling.
pub(crate) fn run_points(points: &[RunPoint], jobs: usize) -> Vec<RunReport> {
    // Progress is for people watching a terminal; logs and pipes get the summary only.
    let show_progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    run_points_with(points, jobs, show_progress)
}

/// [`run_points`] without progress output (for callers that run many small batches).
pub(crate) fn run_points_quiet(points: &[RunPoint], jobs: usize) -> Vec<RunReport> {
    run_points_with(points, jobs, false)
}

fn run_points_with(points: &[RunPoint], jobs: usize, show_progress: bool) -> Vec<RunReport> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<RunReport>>> = Mutex::new(vec![None; points.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(points.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(point) = points.get(i) else { break };
                let report = sluice_sim::run(&point.scenario);
                slots
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(report);
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if show_progress {
                    eprint!(
                        "\r[{n}/{}] {} at x = {}        ",
                        points.len(),
                        point.variant,
                        point.x
                    );
                }
            });
        }
    });
    if show_progress {
        eprintln!();
    }
    slots
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|r| r.expect("every point ran"))
        .collect()
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// One row per run. Floats have fixed precision so identical runs give identical files.
fn write_summary(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let mut csv = String::from(
        "experiment,variant,algorithm,seed,x,offered_load,goodput,goodput_cps,retrans_ratio,setup_delay_p50_ms,setup_delay_p99_ms,occupancy,reject_ratio,offered_load_measured,calls_offered,calls_good,re_queue_mean,re_dropped\n",
    );
    for (p, r) in e.points.iter().zip(reports) {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.3},{:.4},{:.3},{:.4},{:.2},{:.2},{:.4},{:.4},{:.4},{},{},{:.2},{}",
            e.name,
            csv_field(&p.variant),
            p.scenario.re.control.algorithm,
            p.seed,
            p.x,
            p.offered_load,
            r.goodput,
            r.goodput_cps,
            r.retrans_ratio,
            r.setup_delay_p50_ms,
            r.setup_delay_p99_ms,
            r.occupancy,
            r.reject_ratio,
            r.offered_load,
            r.calls_offered,
            r.calls_good,
            r.re_queue_mean,
            r.re_dropped,
        );
    }
    write_file(&out.join("summary.csv"), &csv)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Every report in full, one JSON object per line, for analysis beyond the summary.
fn write_runs_json(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let mut text = String::new();
    for (p, r) in e.points.iter().zip(reports) {
        let line = serde_json::json!({ "variant": p.variant, "seed": p.seed, "x": p.x, "offered_load": p.offered_load, "report": r });
        let _ = writeln!(text, "{line}");
    }
    write_file(&out.join("runs.jsonl"), &text)
}

/// A label as a file name: ASCII letters, digits and `-` kept, everything else `_`.
pub(crate) fn file_stem(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_timeseries(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let dir = out.join("timeseries");
    std::fs::create_dir_all(&dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
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
        write_file(&dir.join(name), &csv)?;
    }
    Ok(())
}

/// Mean over seeds of (x, y) per variant, in the sweep's load order.
fn sweep_series(
    e: &Experiment,
    reports: &[RunReport],
    y: impl Fn(&RunReport) -> f64,
) -> Vec<Series> {
    e.variants
        .iter()
        .map(|v| {
            let mut points: Vec<(f64, f64, usize)> = Vec::new();
            for (p, r) in e
                .points
                .iter()
                .zip(reports)
                .filter(|(p, _)| &p.variant == v)
            {
                match points.iter_mut().find(|q| (q.0 - p.x).abs() < 1e-12) {
                    Some(q) => {
                        q.1 += y(r);
                        q.2 += 1;
                    }
                    None => points.push((p.x, y(r), 1)),
                }
            }
            Series {
                label: v.clone(),
                points: points
                    .into_iter()
                    .map(|(x, s, n)| (x, s / n as f64))
                    .collect(),
            }
        })
        .collect()
}

fn draw(out: &Path, e: &Experiment, reports: &[RunReport]) -> Result<(), String> {
    let title = if e.figure.is_empty() {
        e.title.clone()
    } else {
        format!("{}: {}", e.figure, e.title)
    };
    match e.kind {
        Kind::Sweep => {
            let goodput = sweep_series(e, reports, |r| r.goodput);
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
            plot::line_chart(&out.join(format!("{}.svg", e.name)), &axes, &goodput, ideal)?;
            let delay = sweep_series(e, reports, |r| r.setup_delay_p99_ms);
            let axes = Axes {
                title: &title,
                x_label: &e.plot.x_label,
                y_label: "Session setup delay p99 (ms)",
                y_max: 0.0,
            };
            plot::line_chart(
                &out.join(format!("{}-setup-delay.svg", e.name)),
                &axes,
                &delay,
                None,
            )?;
            let retrans = sweep_series(e, reports, |r| r.retrans_ratio);
            let axes = Axes {
                title: &title,
                x_label: &e.plot.x_label,
                y_label: "Retransmitted share of RE arrivals",
                y_max: 0.0,
            };
            plot::line_chart(
                &out.join(format!("{}-retransmissions.svg", e.name)),
                &axes,
                &retrans,
                None,
            )
        }
        Kind::Dynamic => {
            for (p, r) in e.points.iter().zip(reports) {
                let Some(ts) = &r.timeseries else { continue };
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
                let figure = if e.figure.is_empty() {
                    e.name.as_str()
                } else {
                    e.figure.as_str()
                };
                let t = format!(
                    "{figure}: {} ({SMOOTHING_S:.0} s moving average)",
                    p.variant
                );
                let axes = Axes {
                    title: &t,
                    x_label: "Time (s)",
                    y_label: "Goodput (normalised to capacity)",
                    y_max: e.plot.y_max,
                };
                let name = format!("{}-{}-seed{}.svg", e.name, file_stem(&p.variant), p.seed);
                plot::line_chart(&out.join(name), &axes, &series, None)?;
                if e.plot.dynamics {
                    draw_dynamics(out, e, p, ts, figure)?;
                }
            }
            Ok(())
        }
    }
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
) -> Result<(), String> {
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
    plot::line_chart(
        &out.join(format!("{stem}-dynamics.svg")),
        &axes,
        &fractions,
        None,
    )?;
    let queueing = vec![series_of("INVITE queueing time (ms)", &|pt| {
        pt.invite_queueing_ms
    })];
    let axes = Axes {
        title: &t,
        x_label: "Time (s)",
        y_label: "Queueing time (ms)",
        y_max: 0.0,
    };
    plot::line_chart(
        &out.join(format!("{stem}-queueing.svg")),
        &axes,
        &queueing,
        None,
    )
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

fn print_table(e: &Experiment, reports: &[RunReport]) {
    println!("{} ({}; x = {})", e.title, e.name, e.x_name);
    println!(
        "{:<24} {:>6} {:>5} {:>8} {:>9} {:>8} {:>9} {:>9} {:>7}",
        "variant", "x", "seed", "goodput", "good cps", "retrans", "p50 ms", "p99 ms", "occup"
    );
    for (p, r) in e.points.iter().zip(reports) {
        println!(
            "{:<24} {:>6.2} {:>5} {:>8.3} {:>9.1} {:>8.3} {:>9.1} {:>9.1} {:>7.3}",
            p.variant,
            p.x,
            p.seed,
            r.goodput,
            r.goodput_cps,
            r.retrans_ratio,
            r.setup_delay_p50_ms,
            r.setup_delay_p99_ms,
            r.occupancy
        );
    }
}
