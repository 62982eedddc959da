//! `sluice tune`: Extremum Seeking tuning of the PI gains against the simulator (De Cicco,
//! Cofano & Mascolo §VI), writing the trajectory of `θ` and `J` (CSV and SVG, like their
//! Figure 6) and the result.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use sluice_control::tuning::{tune, EsStep, ExperimentRunner};
use sluice_sim::tuning::{SimRunner, TuningExperiment};
use sluice_sim::{RunReport, Scenario};

use crate::plot::{self, Axes, Series};

/// Tuning experiments compiled into the binary.
pub const BUILTIN: &[(&str, &str)] = &[(
    "decicco-es-tuning",
    include_str!("../../../experiments/decicco-es-tuning.toml"),
)];

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// A tuning experiment: a TOML file, or the name of a built-in one (see --list).
    experiment: Option<String>,
    /// List the built-in tuning experiments and exit.
    #[arg(long)]
    list: bool,
    /// Output folder (default: out/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start from these gains instead of the file's: K_pc,K_ic,K_pq,K_iq.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    theta0: Option<Vec<f64>>,
    /// ES iterations instead of the file's.
    #[arg(long)]
    iterations: Option<u64>,
    /// Length of each step experiment in seconds instead of the file's.
    #[arg(long)]
    run_length: Option<f64>,
    /// Parallel simulations (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
}

/// How far the estimate moved over the last `window` iterations.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Settling {
    /// Per gain, max − min.
    range: [f64; 4],
    /// Per gain, the range over the gain's mean magnitude (a gain wandering around 0 makes it
    /// large: that is not settled).
    relative: [f64; 4],
    /// θ as a vector: the farthest the estimate was from its final value, over the final
    /// value's Euclidean norm. A small gain in a flat direction of J can wander by a large
    /// fraction of itself while θ as a whole stays put; both figures are reported.
    vector: f64,
}

fn settling(trajectory: &[EsStep], window: usize) -> Option<Settling> {
    if trajectory.len() < window || window == 0 {
        return None;
    }
    let tail = &trajectory[trajectory.len() - window..];
    let last = tail[window - 1].estimate;
    let mut range = [0.0; 4];
    let mut relative = [0.0; 4];
    for i in 0..4 {
        let values: Vec<f64> = tail.iter().map(|s| s.estimate[i]).collect();
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = values.iter().map(|v| v.abs()).sum::<f64>() / window as f64;
        range[i] = max - min;
        relative[i] = (max - min) / mean.max(1e-9);
    }
    let norm = |v: [f64; 4]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let farthest = tail
        .iter()
        .map(|s| norm(std::array::from_fn(|i| s.estimate[i] - last[i])))
        .fold(0.0, f64::max);
    Some(Settling {
        range,
        relative,
        vector: farthest / norm(last).max(1e-9),
    })
}

pub fn run(args: &TuneArgs) -> Result<(), String> {
    if args.list {
        crate::sim::list_builtins(BUILTIN);
        return Ok(());
    }
    let which = args
        .experiment
        .as_deref()
        .ok_or("name a tuning experiment (see `sluice tune --list`)")?;
    let text = crate::sim::experiment_text(BUILTIN, which, "tune")?;
    let mut e = TuningExperiment::from_toml(&text)?;
    if let Some(t) = &args.theta0 {
        let [k_pc, k_ic, k_pq, k_iq] = t[..] else {
            return Err(format!(
                "--theta0 takes four numbers K_pc,K_ic,K_pq,K_iq, got {}",
                t.len()
            ));
        };
        e.es.theta0 = [k_pc, k_ic, k_pq, k_iq];
    }
    if let Some(n) = args.iterations {
        if n == 0 || n > sluice_sim::tuning::MAX_ITERATIONS {
            return Err(format!(
                "--iterations must be between 1 and {}",
                sluice_sim::tuning::MAX_ITERATIONS
            ));
        }
        e.iterations = n;
    }
    if let Some(s) = args.run_length {
        if !(s.is_finite() && s > 0.0 && s <= 1.0e5) {
            return Err(format!("--run-length must be in (0, 1e5] seconds, got {s}"));
        }
        e.cost.run_length = std::time::Duration::from_secs_f64(s);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out").join(&e.name));
    std::fs::create_dir_all(&out).map_err(|err| format!("creating {}: {err}", out.display()))?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let run_all = |scenarios: &[Scenario]| -> Vec<RunReport> { run_parallel(scenarios, jobs) };

    let started = Instant::now();
    eprintln!(
        "{}: {} iterations of {} step runs ({} s each), theta(0) = {:?}",
        e.name,
        e.iterations,
        e.cost.loads.len() * e.cost.repetitions,
        e.cost.run_length.as_secs_f64(),
        e.es.theta0
    );
    let mut runner = SimRunner::new(&e, run_all);
    let result = tune(&mut runner, &e.es, e.iterations);
    // Without dither, at the estimate where ES settled, and at the reference gains.
    let final_cost = runner.cost(&result.estimate);
    let reference_cost = e.reference_theta.map(|t| (t, runner.cost(&t)));
    let wall = started.elapsed().as_secs_f64();

    let first_cost = result.trajectory.first().map_or(f64::NAN, |s| s.cost);
    let settle = settling(&result.trajectory, 10);
    write_trajectory(&out, &result.trajectory)?;
    draw(&out, &e, &result.trajectory)?;
    let json = serde_json::json!({
        "experiment": e.name,
        "theta0": e.es.theta0,
        "iterations": e.iterations,
        "first_cost": first_cost,
        "final_estimate": result.estimate,
        "final_cost": final_cost,
        "cost_reduction": 1.0 - final_cost / first_cost,
        "best_theta": result.best_theta,
        "best_cost": result.best_cost,
        "settling_last_10": settle.map(|s| serde_json::json!({
            "range": s.range,
            "relative_range": s.relative,
            "vector_relative_move": s.vector,
            "theta_within_5_percent": s.vector < 0.05,
            "every_gain_within_5_percent": s.relative.iter().all(|r| *r < 0.05),
        })),
        "reference_theta": reference_cost.map(|(t, _)| t),
        "reference_cost": reference_cost.map(|(_, c)| c),
        "invalid_costs": result.invalid_costs,
    });
    std::fs::write(out.join("result.json"), format!("{json:#}\n"))
        .map_err(|err| format!("writing result.json: {err}"))?;

    let fmt = |t: &[f64; 4]| format!("[{:.2}, {:.2}, {:.2}, {:.2}]", t[0], t[1], t[2], t[3]);
    println!(
        "theta(0)          {}  J = {first_cost:.4}",
        fmt(&e.es.theta0)
    );
    println!(
        "final estimate    {}  J = {final_cost:.4}  ({:+.1}% vs theta(0))",
        fmt(&result.estimate),
        100.0 * (final_cost / first_cost - 1.0)
    );
    println!(
        "best evaluated    {}  J = {:.4}",
        fmt(&result.best_theta),
        result.best_cost
    );
    if let Some((t, c)) = reference_cost {
        println!("reference         {}  J = {c:.4}", fmt(&t));
    }
    match settle {
        Some(s) => println!(
            "settling over the last 10 iterations: theta moved at most {:.1}% of its norm; per gain range {} ({})",
            100.0 * s.vector,
            fmt(&s.range),
            s.relative
                .iter()
                .map(|r| format!("{:.1}%", 100.0 * r))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => println!("settling: fewer than 10 iterations"),
    }
    eprintln!(
        "{wall:.1} s wall ({jobs} jobs); output in {}",
        out.display()
    );
    Ok(())
}

/// Runs scenarios on `jobs` threads, results in the input's order.
fn run_parallel(scenarios: &[Scenario], jobs: usize) -> Vec<RunReport> {
    let points: Vec<sluice_sim::experiment::RunPoint> = scenarios
        .iter()
        .map(|sc| sluice_sim::experiment::RunPoint {
            variant: String::new(),
            offered_load: sc.offered_load,
            x: sc.offered_load,
            seed: sc.seed,
            scenario: sc.clone(),
        })
        .collect();
    crate::sim::run_points_quiet(&points, jobs)
}

fn write_trajectory(out: &Path, trajectory: &[EsStep]) -> Result<(), String> {
    let mut csv =
        String::from("iteration,k_pc,k_ic,k_pq,k_iq,est_k_pc,est_k_ic,est_k_pq,est_k_iq,cost\n");
    for s in trajectory {
        let _ = writeln!(
            csv,
            "{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.5}",
            s.iteration,
            s.theta[0],
            s.theta[1],
            s.theta[2],
            s.theta[3],
            s.estimate[0],
            s.estimate[1],
            s.estimate[2],
            s.estimate[3],
            s.cost
        );
    }
    std::fs::write(out.join("trajectory.csv"), csv)
        .map_err(|err| format!("writing trajectory.csv: {err}"))
}

fn draw(out: &Path, e: &TuningExperiment, trajectory: &[EsStep]) -> Result<(), String> {
    let title = if e.figure.is_empty() {
        e.title.clone()
    } else {
        format!("{}: {}", e.figure, e.title)
    };
    let cost = vec![Series {
        label: "J(theta(k))".into(),
        points: trajectory
            .iter()
            .map(|s| (s.iteration as f64, s.cost))
            .filter(|(_, c)| c.is_finite())
            .collect(),
    }];
    let axes = Axes {
        title: &title,
        x_label: "Iteration k",
        y_label: "Cost J",
        y_max: 0.0,
    };
    plot::line_chart(&out.join("cost.svg"), &axes, &cost, None)?;
    let names = ["K_pc", "K_ic", "K_pq", "K_iq"];
    let gains: Vec<Series> = (0..4)
        .map(|i| Series {
            label: names[i].into(),
            points: trajectory
                .iter()
                .map(|s| (s.iteration as f64, s.estimate[i]))
                .collect(),
        })
        .collect();
    let axes = Axes {
        title: &title,
        x_label: "Iteration k",
        y_label: "Gain estimate",
        y_max: 0.0,
    };
    plot::line_chart(&out.join("theta.svg"), &axes, &gains, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(k: u64, estimate: [f64; 4]) -> EsStep {
        EsStep {
            iteration: k,
            theta: estimate,
            estimate,
            cost: 1.0,
        }
    }

    #[test]
    fn a_small_gain_wandering_is_unsettled_per_gain_but_not_as_a_vector() {
        // K_pc swings 2 ± 0.3 while the others hold: 30 % of K_pc, under 1 % of θ.
        let t: Vec<EsStep> = (0..10)
            .map(|k| {
                let kpc = if k % 2 == 0 { 1.7 } else { 2.3 };
                step(k, [kpc, 40.0, 26.0, 130.0])
            })
            .collect();
        let s = settling(&t, 10).unwrap();
        assert!((s.range[0] - 0.6).abs() < 1e-9);
        assert!(s.relative[0] > 0.25);
        assert!(s.relative[1..].iter().all(|r| *r == 0.0));
        assert!(s.vector < 0.01, "{}", s.vector);
    }

    #[test]
    fn a_drifting_theta_is_unsettled_as_a_vector() {
        let t: Vec<EsStep> = (0..10)
            .map(|k| step(k, [3.0, 10.0 + 2.0 * k as f64, 20.0, 30.0]))
            .collect();
        let s = settling(&t, 10).unwrap();
        // 18 of a final norm of about 48.
        assert!(s.vector > 0.3, "{}", s.vector);
        assert!(settling(&t, 11).is_none());
    }
}
