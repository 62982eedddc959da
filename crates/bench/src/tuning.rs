//! `sluice tune`: Extremum Seeking of the PI gains against the simulator (De Cicco, Cofano &
//! Mascolo §VI). One measurement of `J(θ)` is the experiment's step runs at `θ` on `jobs`
//! threads, seeded by the measurement's number (`TuningExperiment::step_scenarios`).

use std::path::Path;

use sluice_control::tuning::{tune as run_es, ExperimentRunner};
use sluice_report::tuning::{write_result, TuneOutcome};
use sluice_sim::tuning::{SimRunner, TuningExperiment};
use sluice_sim::Scenario;

use crate::parallel::run_scenarios;

/// Runs the tuning and writes its files into `out`.
pub fn tune(e: &TuningExperiment, jobs: usize, out: &Path) -> Result<TuneOutcome, String> {
    let mut runner = SimRunner::new(e, |scenarios: &[Scenario]| run_scenarios(scenarios, jobs));
    let result = run_es(&mut runner, &e.es, e.iterations);
    // Without dither, at the estimate where ES settled, and at the reference gains.
    let final_cost = runner.cost(&result.estimate);
    let reference = e.reference_theta.map(|t| (t, runner.cost(&t)));
    let outcome = TuneOutcome {
        result,
        final_cost,
        reference,
    };
    write_result(out, e, &outcome)?;
    Ok(outcome)
}
