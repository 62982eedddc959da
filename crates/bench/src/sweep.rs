//! `sluice sim`: an experiment's run points on every core, all of them or one shard's, and
//! the output folder they make (written by `sluice-report`).

use std::path::Path;

use sluice_report::shard::{write_partial, Shard};
use sluice_sim::experiment::{Experiment, Overrides, RunPoint};
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

/// Runs `shard`'s points of `e` (made from `text` and `overrides`) and writes its partial
/// output into `out`, for `sluice sim merge`; returns the point indices and reports.
pub fn run_shard(
    e: &Experiment,
    text: &str,
    overrides: &Overrides,
    shard: Shard,
    jobs: usize,
    out: &Path,
    console: &dyn Console,
) -> Result<Vec<(usize, RunReport)>, String> {
    let indices = shard.points(e.points.len());
    let points: Vec<RunPoint> = indices.iter().map(|&i| e.points[i].clone()).collect();
    console.begin(points.len() as u64);
    let reports = run_points(&points, jobs, console);
    console.finish();
    let runs: Vec<(usize, RunReport)> = indices.into_iter().zip(reports).collect();
    write_partial(out, text, overrides, shard, e, &runs)?;
    Ok(runs)
}
