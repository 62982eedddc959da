//! `sluice sim`: an experiment's run points on every core, all of them or one shard's, and
//! the output folder they make (written by `sluice-report`).

use std::path::Path;

use sluice_report::shard::{write_partial, Shard};
use sluice_sim::experiment::{Experiment, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::console::{note, Console};
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
    check_answered(e, reports.iter().enumerate(), console);
    sluice_report::experiment::write_all(out, e, &reports)?;
    Ok(reports)
}

/// The invariant every run is checked for: each INVITE a proxy admitted got a final
/// response. A run that breaks it is named on the console (its report has the count).
fn check_answered<'a>(
    e: &Experiment,
    runs: impl Iterator<Item = (usize, &'a RunReport)>,
    console: &dyn Console,
) {
    for (i, r) in runs.filter(|(_, r)| r.admitted_unanswered > 0) {
        let p = &e.points[i];
        note!(
            console,
            "INVARIANT BROKEN: {}, x = {}, seed {}: {} of {} admitted INVITEs never got a final response",
            p.variant,
            p.x,
            p.seed,
            r.admitted_unanswered,
            r.admitted_checked
        );
    }
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
    check_answered(e, runs.iter().map(|(i, r)| (*i, r)), console);
    write_partial(out, text, overrides, shard, e, &runs)?;
    Ok(runs)
}
