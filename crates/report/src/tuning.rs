//! The tuner's files: `trajectory.csv` (θ, θ̂ and J per iteration), `result.json`, and
//! `cost.svg` and `theta.svg` (De Cicco et al.'s Figure 6).

use std::fmt::Write as _;
use std::path::Path;

use sluice_control::tuning::{EsStep, TuneResult};
use sluice_sim::tuning::TuningExperiment;

use crate::files::write;
use crate::plot::{line_chart, Axes, Series};

const TRAJECTORY_HEADER: &str =
    "iteration,k_pc,k_ic,k_pq,k_iq,est_k_pc,est_k_ic,est_k_pq,est_k_iq,cost\n";

fn trajectory_row(s: &EsStep) -> String {
    format!(
        "{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.5}\n",
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
    )
}

/// A finished tuning run: the optimizer's result, `J` without dither at its final
/// estimate, and the reference gains with their `J`.
#[derive(Clone, Debug)]
pub struct TuneOutcome {
    pub result: TuneResult,
    pub final_cost: f64,
    pub reference: Option<([f64; 4], f64)>,
}

impl TuneOutcome {
    /// `J` of the first iteration.
    pub fn first_cost(&self) -> f64 {
        self.result.trajectory.first().map_or(f64::NAN, |s| s.cost)
    }
}

/// How far the estimate moved over the last `window` iterations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settling {
    /// Per gain, max − min.
    pub range: [f64; 4],
    /// Per gain, the range over the gain's mean magnitude (a gain wandering around 0 makes it
    /// large: that is not settled).
    pub relative: [f64; 4],
    /// θ as a vector: the farthest the estimate was from its final value, over the final
    /// value's Euclidean norm. A small gain in a flat direction of J can wander by a large
    /// fraction of itself while θ as a whole stays put; both figures are reported.
    pub vector: f64,
}

pub fn settling(trajectory: &[EsStep], window: usize) -> Option<Settling> {
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

/// The window [`settling`] is reported over.
pub const SETTLING_WINDOW: usize = 10;

/// Writes `trajectory.csv`, `result.json`, `cost.svg` and `theta.svg`.
pub fn write_result(out: &Path, e: &TuningExperiment, o: &TuneOutcome) -> Result<(), String> {
    let r = &o.result;
    let first_cost = o.first_cost();
    let settle = settling(&r.trajectory, SETTLING_WINDOW);
    let mut csv = String::from(TRAJECTORY_HEADER);
    for s in &r.trajectory {
        csv.push_str(&trajectory_row(s));
    }
    write(&out.join("trajectory.csv"), &csv)?;
    draw(out, e, &r.trajectory)?;
    let json = serde_json::json!({
        "experiment": e.name,
        "theta0": e.es.theta0,
        "iterations": e.iterations,
        "first_cost": first_cost,
        "final_estimate": r.estimate,
        "final_cost": o.final_cost,
        "cost_reduction": 1.0 - o.final_cost / first_cost,
        "best_theta": r.best_theta,
        "best_cost": r.best_cost,
        "settling_last_10": settle.map(|s| serde_json::json!({
            "range": s.range,
            "relative_range": s.relative,
            "vector_relative_move": s.vector,
            "theta_within_5_percent": s.vector < 0.05,
            "every_gain_within_5_percent": s.relative.iter().all(|r| *r < 0.05),
        })),
        "reference_theta": o.reference.map(|(t, _)| t),
        "reference_cost": o.reference.map(|(_, c)| c),
        "invalid_costs": r.invalid_costs,
    });
    let mut text = String::new();
    let _ = writeln!(text, "{json:#}");
    write(&out.join("result.json"), &text)
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
    line_chart(&out.join("cost.svg"), &axes, &cost, None)?;
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
    line_chart(&out.join("theta.svg"), &axes, &gains, None)
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
