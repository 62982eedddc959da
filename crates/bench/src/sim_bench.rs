//! `sluice bench sim`: the simulator's speed against the project's targets, simulated SIP
//! messages per wall-clock second on one core and the wall time of Shen 2008 fig. 21's
//! sweep on every core.

use std::time::Instant;

use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::Scenario;

use crate::console::{say, Console};
use crate::parallel::run_points;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct SimBench {
    /// Simulated seconds of the single-core runs.
    pub duration: f64,
    /// Parallel runs for the sweep.
    pub jobs: usize,
    /// Only the single-core measurement.
    pub skip_sweep: bool,
}

/// Target: 1 million simulated messages per second per core, with the proxy core and
/// the transaction layer at every node (a sweep gets faster by more jobs or shards).
const TARGET_MESSAGES_PER_SECOND: f64 = 1.0e6;

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets target"
    } else {
        "MISSES target"
    }
}

pub fn bench_sim(args: &SimBench, console: &dyn Console) -> Result<(), String> {
    say!(
        console,
        "single core, {} simulated s per run:",
        args.duration
    );
    for (label, control) in [
        ("win-cont, load 4", r#"{ algorithm = "win-cont" }"#),
        ("no control, load 4", r#"{ algorithm = "none" }"#),
    ] {
        let scenario: Scenario = toml::from_str(&format!(
            "duration_s = {}\nwarmup_s = {}\noffered_load = 4.0\nre = {{ control = {control} }}\n",
            args.duration,
            (args.duration / 2.0).min(100.0)
        ))
        .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let report = sluice_sim::run(&scenario);
        let wall = started.elapsed().as_secs_f64();
        let rate = report.messages_simulated as f64 / wall.max(1e-9);
        say!(
            console,
            "  {label:<20} {:>10} messages ({} events) in {wall:>6.2} s = {:>5.2} M messages/s  ({} {:.0} M/s)",
            report.messages_simulated,
            report.events_processed,
            rate / 1e6,
            verdict(rate >= TARGET_MESSAGES_PER_SECOND),
            TARGET_MESSAGES_PER_SECOND / 1e6
        );
    }
    if args.skip_sweep {
        return Ok(());
    }
    let text = crate::builtin::text(crate::builtin::SIMULATOR, "shen2008-fig21", "sim")?;
    let experiment = Experiment::from_toml(&text, &Overrides::default())?;
    let jobs = args.jobs.max(1);
    let started = Instant::now();
    console.begin(experiment.points.len() as u64);
    let reports = run_points(&experiment.points, jobs, console);
    console.finish();
    let wall = started.elapsed().as_secs_f64();
    let messages: u64 = reports.iter().map(|r| r.messages_simulated).sum();
    let rate = messages as f64 / wall.max(1e-9);
    say!(
        console,
        "fig. 21 sweep: {} runs of {} simulated s on {jobs} jobs in {wall:.1} s wall, {:.2} M messages/s, {:.2} M per job  ({} {:.0} M/s per job)",
        reports.len(),
        experiment.points.first().map_or(0.0, |p| p.scenario.duration_s),
        rate / 1e6,
        rate / jobs as f64 / 1e6,
        verdict(rate / jobs as f64 >= TARGET_MESSAGES_PER_SECOND),
        TARGET_MESSAGES_PER_SECOND / 1e6
    );
    Ok(())
}
