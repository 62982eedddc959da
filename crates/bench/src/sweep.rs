//! `sluice sim`: an experiment's run points on every core, all of them or one shard's, and
//! the output folder they make (written by `sluice-report`).

use std::path::Path;

use sluice_report::shard::{write_partial, Shard};
use sluice_sim::experiment::{Experiment, Kind, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::console::{note, Console};
use crate::parallel::run_points_in_order;

/// The printed table's title and column heads.
pub fn table_head(e: &Experiment) -> [String; 2] {
    [
        format!("{} ({}; x = {})", e.title, e.name, e.x_name),
        format!(
            "{:<24} {:>6} {:>5} {:>8} {:>9} {:>8} {:>9} {:>9} {:>7}",
            "variant", "x", "seed", "goodput", "good cps", "retrans", "p50 ms", "p99 ms", "occup"
        ),
    ]
}

/// One run's row of the printed table. A run where no call was set up has no setup
/// delay: its columns say `-`, not 0, which would read as instant setup.
pub fn table_row(p: &RunPoint, r: &RunReport) -> String {
    let delay = |ms: f64| {
        if r.calls_good == 0 {
            "-".to_owned()
        } else {
            format!("{ms:.1}")
        }
    };
    format!(
        "{:<24} {:>6.2} {:>5} {:>8.3} {:>9.1} {:>8.3} {:>9} {:>9} {:>7.3}",
        p.variant,
        p.x,
        p.seed,
        r.goodput,
        r.goodput_cps,
        r.retrans_ratio,
        delay(r.setup_delay_p50_ms),
        delay(r.setup_delay_p99_ms),
        r.occupancy
    )
}

/// Runs `points` of `e`, printing the table's rows on `console` as they are done, in
/// order (a sampled experiment's hundreds of runs are summed up by its claims instead).
fn run_printing(
    e: &Experiment,
    points: &[RunPoint],
    jobs: usize,
    console: &dyn Console,
) -> Vec<RunReport> {
    let rows = e.kind != Kind::Sample;
    if rows {
        for line in table_head(e) {
            console.line(&line);
        }
    }
    console.begin(points.len() as u64);
    let reports = run_points_in_order(points, jobs, console, |p, r| {
        if rows {
            console.line(&table_row(p, r));
        }
    });
    console.finish();
    reports
}

/// Runs every point of `e` on `jobs` threads, printing its table on `console` as the runs
/// end, and writes the whole output into `out`; returns the reports in point order.
pub fn run_all(
    e: &Experiment,
    jobs: usize,
    out: &Path,
    console: &dyn Console,
) -> Result<Vec<RunReport>, String> {
    let reports = run_printing(e, &e.points, jobs, console);
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
    let reports = run_printing(e, &points, jobs, console);
    let runs: Vec<(usize, RunReport)> = indices.into_iter().zip(reports).collect();
    check_answered(e, runs.iter().map(|(i, r)| (*i, r)), console);
    write_partial(out, text, overrides, shard, e, &runs)?;
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sim::Scenario;

    #[test]
    fn a_run_without_a_set_up_call_has_no_setup_delay_in_the_table() {
        let point = RunPoint {
            variant: "no control".into(),
            offered_load: 5.0,
            x: 5.0,
            seed: 1,
            scenario: Scenario::default(),
        };
        let collapsed = RunReport {
            goodput: 0.0,
            ..RunReport::default()
        };
        let row = table_row(&point, &collapsed);
        let columns: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            &columns[columns.len() - 3..columns.len() - 1],
            ["-", "-"],
            "{row}"
        );
        let served = RunReport {
            calls_good: 10,
            setup_delay_p50_ms: 12.34,
            setup_delay_p99_ms: 56.78,
            ..RunReport::default()
        };
        let row = table_row(&point, &served);
        assert!(row.contains(" 12.3 ") && row.contains(" 56.8 "), "{row}");
    }
}
