//! Simulations on every core. Each run is a pure function of its scenario, so running them
//! on threads changes nothing but the wall time: results come back in the input's order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sluice_sim::experiment::RunPoint;
use sluice_sim::{RunReport, Scenario};

use crate::console::Console;

/// The number of cores, the default for `--jobs`.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Runs `items` on `jobs` threads (at least one), taking the next item as a thread becomes
/// free; `done` is called from the worker thread after each run with the item's index and
/// report.
fn run_each<T: Sync>(
    items: &[T],
    jobs: usize,
    scenario: impl Fn(&T) -> &Scenario + Sync,
    done: impl Fn(usize, &RunReport) + Sync,
) -> Vec<RunReport> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<RunReport>>> = Mutex::new(vec![None; items.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let report = sluice_sim::run(scenario(item));
                done(i, &report);
                slots
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(report);
            });
        }
    });
    slots
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// Runs every point on `jobs` threads, advancing `console` after each.
pub fn run_points(points: &[RunPoint], jobs: usize, console: &dyn Console) -> Vec<RunReport> {
    run_each(points, jobs, |p| &p.scenario, |_, _| console.advance())
}

/// [`run_points`], also handing each point's report to `emit` in point order: a report
/// waits until every earlier point's has gone, so what `emit` prints reads as the final
/// table does, growing as the runs finish.
pub fn run_points_in_order(
    points: &[RunPoint],
    jobs: usize,
    console: &dyn Console,
    emit: impl Fn(&RunPoint, &RunReport) + Sync,
) -> Vec<RunReport> {
    run_in_order(
        points,
        jobs,
        |p| &p.scenario,
        console,
        |i, r| {
            emit(&points[i], r);
        },
    )
}

/// Runs `items` on `jobs` threads, handing each report with its index to `emit` in the
/// items' order as soon as it and every earlier one are done, and advancing `console`.
fn run_in_order<T: Sync>(
    items: &[T],
    jobs: usize,
    scenario: impl Fn(&T) -> &Scenario + Sync,
    console: &dyn Console,
    emit: impl Fn(usize, &RunReport) + Sync,
) -> Vec<RunReport> {
    // The next index to emit, and the finished reports waiting for it.
    let waiting: Mutex<(usize, BTreeMap<usize, RunReport>)> = Mutex::new((0, BTreeMap::new()));
    run_each(items, jobs, scenario, |i, report| {
        let mut guard = waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (next, ready) = &mut *guard;
        ready.insert(i, report.clone());
        while let Some(r) = ready.remove(next) {
            emit(*next, &r);
            *next += 1;
        }
        console.advance();
    })
}

/// Runs scenarios on `jobs` threads.
pub fn run_scenarios(scenarios: &[Scenario], jobs: usize) -> Vec<RunReport> {
    run_each(scenarios, jobs, |sc| sc, |_, _| {})
}

/// Runs `scenarios` on every core; the first run's error, if any, is the result.
pub fn simulate(scenarios: &[Scenario]) -> Result<Vec<RunReport>, String> {
    first_error(run_scenarios(scenarios, cores()))
}

/// [`simulate`], handing each run's index and report to `emit` in the scenarios' order as
/// the runs finish (so a table of them prints row by row), with `console`'s progress bar.
pub fn simulate_in_order(
    scenarios: &[Scenario],
    console: &dyn Console,
    emit: impl Fn(usize, &RunReport) + Sync,
) -> Result<Vec<RunReport>, String> {
    console.begin(scenarios.len() as u64);
    let reports = run_in_order(
        scenarios,
        cores(),
        |sc| sc,
        console,
        |i, r| {
            if r.error.is_none() {
                emit(i, r);
            }
        },
    );
    console.finish();
    first_error(reports)
}

fn first_error(reports: Vec<RunReport>) -> Result<Vec<RunReport>, String> {
    match reports.iter().find_map(|r| r.error.clone()) {
        Some(err) => Err(format!("simulator: {err}")),
        None => Ok(reports),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_the_jobs() {
        let scenarios: Vec<Scenario> = [0.5, 2.0, 1.0]
            .iter()
            .map(|&load| {
                toml::from_str(&format!(
                    "duration_s = 4\nwarmup_s = 1\noffered_load = {load}\n"
                ))
                .unwrap()
            })
            .collect();
        let one = run_scenarios(&scenarios, 1);
        let three = run_scenarios(&scenarios, 3);
        let json = |r: &[RunReport]| serde_json::to_string(r).unwrap();
        assert_eq!(json(&one), json(&three));
        // In order: the run offered 2x offered the most.
        assert!(one[1].offered_cps > one[2].offered_cps && one[2].offered_cps > one[0].offered_cps);
    }

    /// Collects what a run prints.
    #[derive(Default)]
    struct Lines(Mutex<Vec<String>>);

    impl Console for Lines {
        fn line(&self, text: &str) {
            self.0.lock().unwrap().push(text.to_owned());
        }
    }

    #[test]
    fn simulated_rows_come_out_in_order_as_the_runs_finish() {
        // The longest run first: on several threads the later ones finish before it, and
        // still wait for it.
        let scenarios: Vec<Scenario> = [12, 2, 2, 2]
            .iter()
            .enumerate()
            .map(|(i, duration)| {
                toml::from_str(&format!(
                    "duration_s = {duration}\nwarmup_s = 1\noffered_load = {}\n",
                    0.5 + i as f64
                ))
                .unwrap()
            })
            .collect();
        let console = Lines::default();
        let reports = simulate_in_order(&scenarios, &console, |i, r| {
            console.line(&format!("{i} {}", r.calls_offered));
        })
        .unwrap();
        let printed = console.0.into_inner().unwrap();
        let expected: Vec<String> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{i} {}", r.calls_offered))
            .collect();
        assert_eq!(printed, expected);
    }
}
