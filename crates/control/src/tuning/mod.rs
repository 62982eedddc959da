//! Offline tuning of the PI gains by Extremum Seeking, De Cicco, Cofano & Mascolo
//! (journal version), §VI.
//!
//! [`ExtremumSeeking`] is the sans-IO optimizer (eqs. 11–13); [`CostConfig`] computes
//! the cost `J` of eqs. (15)–(17) from step experiments; [`ExperimentRunner`] is what a
//! driver (the simulator behind `sluice tune`, or a testbed) implements to measure
//! `J(θ)`; [`tune`] runs the loop.
//!
//! A runner for the paper's procedure, for each `θ = [K_pc, K_ic, K_pq, K_iq]`: build
//! the PI with [`crate::admission::PiConfig::with_gains`], run `repetitions` step
//! experiments of `run_length` at each load of [`CostConfig::loads`], record the
//! filtered normalised arrival rate and CPU load of each run as [`StepMeasurement`]s,
//! and return [`CostConfig::cost`]. Give each run its own seed derived from the
//! iteration so the whole tuning repeats exactly.

mod cost;
mod es;

pub use cost::{CostConfig, CostSample, StepMeasurement};
pub use es::{EsConfig, EsStep, ExtremumSeeking};

/// Measures the cost of one parameter vector (one ES iteration).
pub trait ExperimentRunner {
    /// `J(θ)`; a non-finite value means the experiment failed to measure it.
    fn cost(&mut self, theta: &[f64; 4]) -> f64;
}

impl<F: FnMut(&[f64; 4]) -> f64> ExperimentRunner for F {
    fn cost(&mut self, theta: &[f64; 4]) -> f64 {
        self(theta)
    }
}

/// What a tuning run found.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneResult {
    /// `θ̂` after the last iteration, clamped into the bounds: where ES settled.
    pub estimate: [f64; 4],
    /// The evaluated parameters with the lowest measured cost, and that cost.
    pub best_theta: [f64; 4],
    pub best_cost: f64,
    /// Every iteration, in order.
    pub trajectory: Vec<EsStep>,
    /// Costs the runner could not measure.
    pub invalid_costs: u64,
}

/// Runs `iterations` ES iterations against `runner`.
pub fn tune<R: ExperimentRunner + ?Sized>(
    runner: &mut R,
    config: &EsConfig,
    iterations: u64,
) -> TuneResult {
    let mut es = ExtremumSeeking::new(config);
    for _ in 0..iterations {
        let theta = es.next_theta();
        let cost = runner.cost(&theta);
        es.report(cost);
    }
    let (best_theta, best_cost) = es
        .trajectory()
        .iter()
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
        .map_or((es.next_theta(), f64::NAN), |s| (s.theta, s.cost));
    TuneResult {
        estimate: es.estimate(),
        best_theta,
        best_cost,
        trajectory: es.trajectory().to_vec(),
        invalid_costs: es.invalid_costs(),
    }
}

#[cfg(test)]
mod tests;
