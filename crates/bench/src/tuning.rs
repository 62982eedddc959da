//! `sluice tune`: Extremum Seeking of the PI gains against the simulator (De Cicco, Cofano &
//! Mascolo §VI), one ES iteration at a time so that every iteration is on disk when it ends
//! and an interrupted run can be resumed to the same result.
//!
//! One measurement of `J(θ)` is the experiment's step runs at `θ` on `jobs` threads, seeded
//! by the measurement's number (`TuningExperiment::step_scenarios`). The optimizer is
//! deterministic, so a resumed run hands the stored costs to a fresh optimizer, which
//! reaches the interrupted run's state exactly, and measures on from the next number.

use std::ops::ControlFlow;
use std::path::Path;

use sluice_control::tuning::{ExtremumSeeking, TuneResult};
use sluice_report::tuning::{settings_sha256, write_result, Trajectory, TuneOutcome, TuneState};
use sluice_sim::tuning::TuningExperiment;

use crate::console::Console;
use crate::parallel::run_scenarios;

/// A tuning run to start or resume.
#[derive(Clone, Copy, Debug)]
pub struct Tuning<'a> {
    pub experiment: &'a TuningExperiment,
    /// The experiment's text: with the settings it identifies the run a resume continues.
    pub text: &'a str,
    pub out: &'a Path,
    pub jobs: usize,
    /// Continue the run in `out` (its `state.json`) instead of starting afresh.
    pub resume: bool,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub enum Tuned {
    /// Every iteration ran; the result files are written.
    Finished(Box<TuneOutcome>),
    /// The caller stopped it after this many iterations; `resume` continues it.
    Stopped(u64),
}

/// Runs the tuning, or resumes it: `state.json` and `trajectory.csv` in `out` grow by one
/// iteration as each ends. `console` counts the iterations this call runs;
/// `on_iteration` is told the number done so far after each and may stop the run there.
pub fn tune(
    t: &Tuning<'_>,
    console: &dyn Console,
    on_iteration: &mut dyn FnMut(u64) -> ControlFlow<()>,
) -> Result<Tuned, String> {
    let e = t.experiment;
    let mut state = TuneState {
        experiment: e.name.clone(),
        settings_sha256: settings_sha256(t.text, e),
        costs: Vec::new(),
    };
    if t.resume {
        let stored = TuneState::load(t.out)?.ok_or_else(|| {
            format!(
                "{}: nothing to resume (no state.json); run without --resume",
                t.out.display()
            )
        })?;
        if stored.experiment != state.experiment || stored.settings_sha256 != state.settings_sha256
        {
            return Err(format!(
                "{}: the run there tuned {} with other settings; resume with the same experiment, --theta0 and --run-length",
                t.out.display(),
                stored.experiment
            ));
        }
        if stored.costs.len() as u64 > e.iterations {
            return Err(format!(
                "{}: {} iterations done already, more than the {} asked for",
                t.out.display(),
                stored.costs.len(),
                e.iterations
            ));
        }
        state.costs = stored.costs;
    }
    let mut es = ExtremumSeeking::new(&e.es);
    for cost in &state.costs {
        es.report(cost.unwrap_or(f64::NAN));
    }
    let mut trajectory = Trajectory::create(t.out, es.trajectory())?;
    state.save(t.out)?;
    let measure = |theta: &[f64; 4], measurement: u64| {
        let scenarios = e.step_scenarios(theta, measurement);
        let reports = run_scenarios(&scenarios, t.jobs);
        e.cost_of(&scenarios, &reports)
    };
    console.begin(e.iterations - state.costs.len() as u64);
    while (state.costs.len() as u64) < e.iterations {
        let cost = measure(&es.next_theta(), state.costs.len() as u64);
        let before = es.trajectory().len();
        es.report(cost);
        if let Some(step) = es.trajectory().get(before) {
            trajectory.push(step)?;
        }
        state.costs.push(cost.is_finite().then_some(cost));
        state.save(t.out)?;
        console.advance();
        let done = state.costs.len() as u64;
        if on_iteration(done).is_break() && done < e.iterations {
            console.finish();
            return Ok(Tuned::Stopped(done));
        }
    }
    console.finish();
    // Without dither, at the estimate where ES settled, and at the reference gains.
    let next = state.costs.len() as u64;
    let final_cost = measure(&es.estimate(), next);
    let reference = e
        .reference_theta
        .map(|theta| (theta, measure(&theta, next + 1)));
    let (best_theta, best_cost) = es
        .trajectory()
        .iter()
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
        .map_or((es.next_theta(), f64::NAN), |s| (s.theta, s.cost));
    let outcome = TuneOutcome {
        result: TuneResult {
            estimate: es.estimate(),
            best_theta,
            best_cost,
            trajectory: es.trajectory().to_vec(),
            invalid_costs: es.invalid_costs(),
        },
        final_cost,
        reference,
    };
    write_result(t.out, e, &outcome)?;
    Ok(Tuned::Finished(Box::new(outcome)))
}
