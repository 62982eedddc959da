//! `sluice bench`: speed checks that report numbers against the project's targets.

use std::time::Instant;

use clap::{Args, Subcommand};
use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::Scenario;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Simulator speed: simulated SIP messages per wall-clock second on one core, and the
    /// wall time of the whole Shen 2008 fig. 21 sweep on all cores.
    Sim(SimBenchArgs),
    /// Proxy throughput on loopback: a UAS, the proxy under test (sluice, Kamailio or any
    /// command) and a UAC; ramps the call rate and reports the highest rate with no failed
    /// call and no retransmission.
    Proxy(crate::load::ProxyBenchArgs),
    /// Local overload control live: a UAS, the proxy under test with emulated capacity (or
    /// any command) and a UAC on loopback; sweeps offered load as multiples of capacity for
    /// each control and writes summary.csv (the columns of `sluice sim`) and SVGs.
    Overload(crate::overload::OverloadArgs),
    /// A proxy's own β for g_opt(r): its CPU time per forwarded call over per rejected call,
    /// each from a run at the same rate on loopback (sluice, and Kamailio with --kamailio).
    Beta(crate::beta::BetaArgs),
}

#[derive(Args, Debug)]
pub struct SimBenchArgs {
    /// Simulated seconds of the single-core runs.
    #[arg(long, default_value_t = 120.0)]
    duration: f64,
    /// Parallel runs for the sweep (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only the single-core measurement.
    #[arg(long)]
    skip_sweep: bool,
}

/// Issue targets: 2 million simulated messages per second per core; fig. 21 in 30 s.
const TARGET_MESSAGES_PER_SECOND: f64 = 2.0e6;
const TARGET_SWEEP_SECONDS: f64 = 30.0;

pub fn run(command: &BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Sim(args) => bench_sim(args),
        BenchCommand::Proxy(args) => crate::load::bench_proxy(args),
        BenchCommand::Overload(args) => crate::overload::bench_overload(args),
        BenchCommand::Beta(args) => crate::beta::bench_beta(args),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets target"
    } else {
        "MISSES target"
    }
}

fn bench_sim(args: &SimBenchArgs) -> Result<(), String> {
    println!("single core, {} simulated s per run:", args.duration);
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
        println!(
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
    let text = crate::sim::BUILTIN
        .iter()
        .find(|(name, _)| *name == "shen2008-fig21")
        .map(|(_, text)| *text)
        .ok_or("the fig21 experiment is not built in")?;
    let experiment = Experiment::from_toml(text, &Overrides::default())?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let started = Instant::now();
    let reports = crate::sim::run_points(&experiment.points, jobs);
    let wall = started.elapsed().as_secs_f64();
    let messages: u64 = reports.iter().map(|r| r.messages_simulated).sum();
    println!(
        "fig. 21 sweep: {} runs of {} simulated s on {jobs} jobs in {wall:.1} s wall, {:.2} M messages/s  ({} {TARGET_SWEEP_SECONDS:.0} s)",
        reports.len(),
        experiment.points.first().map_or(0.0, |p| p.scenario.duration_s),
        messages as f64 / wall.max(1e-9) / 1e6,
        verdict(wall <= TARGET_SWEEP_SECONDS)
    );
    Ok(())
}
