//! The tuner's files: `trajectory.csv` (θ, θ̂ and J per iteration, written and flushed as
//! each iteration ends), `state.json` (what a resumed run needs to continue exactly),
//! `result.json`, and `cost.svg` and `theta.svg` (De Cicco et al.'s Figure 6).
//!
//! The Extremum Seeking optimizer is deterministic given the costs it is handed, so the
//! state is the list of measured costs: a resumed run hands them to a fresh optimizer again
//! and continues from the same `θ`, filter state and measurement count (which seeds the
//! next runs) as the run that was interrupted.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sluice_control::tuning::{EsStep, TuneResult};
use sluice_sim::tuning::TuningExperiment;

use crate::files::{read, replace, sha256_hex, write};
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

/// `trajectory.csv`, open for appending.
#[derive(Debug)]
pub struct Trajectory {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl Trajectory {
    /// Starts `out/trajectory.csv` afresh with the iterations already done (a resumed run's).
    pub fn create(out: &Path, done: &[EsStep]) -> Result<Trajectory, String> {
        let path = out.join("trajectory.csv");
        let mut text = String::from(TRAJECTORY_HEADER);
        for s in done {
            text.push_str(&trajectory_row(s));
        }
        write(&path, &text)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        Ok(Trajectory { file, path })
    }

    /// Appends one iteration and hands it to the file system at once, so an interrupted
    /// run leaves every finished iteration on disk.
    pub fn push(&mut self, step: &EsStep) -> Result<(), String> {
        self.file
            .write_all(trajectory_row(step).as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }
}

/// `state.json`: the costs measured so far, and what they were measured for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneState {
    pub experiment: String,
    /// [`settings_sha256`] of the run: a resumed run must match it.
    pub settings_sha256: String,
    /// `J` of every measurement the optimizer was handed, in order; `null` where it could
    /// not be measured.
    pub costs: Vec<Option<f64>>,
}

const STATE: &str = "state.json";

impl TuneState {
    /// The state in `out`, if there is one.
    pub fn load(out: &Path) -> Result<Option<TuneState>, String> {
        let path = out.join(STATE);
        if !path.exists() {
            return Ok(None);
        }
        serde_json::from_str(&read(&path)?)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Replaces `out/state.json` (through a temporary file: an interruption leaves the old
    /// state whole).
    pub fn save(&self, out: &Path) -> Result<(), String> {
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        replace(&out.join(STATE), format!("{json}\n").as_bytes())
    }
}

/// What identifies a tuning run's trajectory: the experiment text and the optimizer's and
/// cost's settings after the command line's changes (`--theta0`, `--run-length`). The
/// iteration count is not part of it: a run can be resumed to go further.
pub fn settings_sha256(text: &str, e: &TuningExperiment) -> String {
    let settings = serde_json::json!({ "es": e.es, "cost": e.cost });
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(settings.to_string().as_bytes());
    sha256_hex(&bytes)
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

/// Writes `result.json`, `cost.svg` and `theta.svg`, and the whole `trajectory.csv` again.
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

    #[test]
    fn the_trajectory_grows_a_row_per_iteration_on_disk() {
        let dir = std::env::temp_dir().join(format!("sluice-report-traj-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Trajectory::create(&dir, &[step(0, [1.0, 2.0, 3.0, 4.0])]).unwrap();
        t.push(&step(1, [1.5, 2.0, 3.0, 4.0])).unwrap();
        // Read while the file is still open: the row is there already.
        let text = std::fs::read_to_string(dir.join("trajectory.csv")).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows[2].starts_with("1,1.5000,2.0000"), "{}", rows[2]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn state_round_trips_exactly_and_marks_unmeasured_costs() {
        let dir = std::env::temp_dir().join(format!("sluice-report-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(TuneState::load(&dir).unwrap(), None);
        let state = TuneState {
            experiment: "t".into(),
            settings_sha256: "ab".into(),
            costs: vec![Some(0.1 + 0.2), None, Some(1.0 / 3.0)],
        };
        state.save(&dir).unwrap();
        assert_eq!(TuneState::load(&dir).unwrap(), Some(state));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
