//! `sluice sim`: an experiment's run points on every core, and the output folder they make
//! (written by `sluice-report`).

use std::path::Path;

use sluice_sim::experiment::Experiment;
use sluice_sim::RunReport;

use crate::console::Console;
use crate::parallel::run_points;

/// Runs every point of `e` on `jobs` threads and writes the whole output into `out`;
/// returns the reports in point order.
pub fn run_all(
    e: &Experiment,
    jobs: usize,
    out: &Path,
    console: &dyn Console,
) -> Result<Vec<RunReport>, String> {
    console.begin(e.points.len() as u64);
    let reports = run_points(&e.points, jobs, console);
    console.finish();
    sluice_report::experiment::write_all(out, e, &reports)?;
    Ok(reports)
}
