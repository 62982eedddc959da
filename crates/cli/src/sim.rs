//! `sluice sim`: run an experiment (a TOML file or a built-in name) in the simulator and write
//! `summary.csv`, per-run JSON, time series and SVG plots into an output folder.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use sluice_bench::builtin;
use sluice_bench::parallel::cores;
use sluice_bench::sweep::run_all;
use sluice_sim::experiment::{Experiment, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::terminal::Terminal;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// An experiment: a TOML file, or the name of a built-in one (see --list).
    #[arg(required_unless_present = "list")]
    experiment: Option<String>,
    /// List the built-in experiments and exit.
    #[arg(long)]
    list: bool,
    /// Output folder (default: out/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run with these seeds instead of the experiment's (repeatable).
    #[arg(long = "seed")]
    seeds: Vec<u64>,
    /// Parallel runs (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Simulated seconds per run instead of the experiment's (warm-up scales with it).
    #[arg(long)]
    duration: Option<f64>,
    /// Only these offered loads of the sweep (repeatable).
    #[arg(long = "load")]
    loads: Vec<f64>,
}

pub fn run(args: &SimArgs) -> Result<(), String> {
    if args.list {
        for (name, title) in builtin::titles(builtin::SIMULATOR) {
            println!("{name:<28} {title}");
        }
        return Ok(());
    }
    let which = args.experiment.as_deref().unwrap_or_default();
    let text = builtin::text(builtin::SIMULATOR, which, "sim")?;
    let overrides = Overrides {
        seeds: (!args.seeds.is_empty()).then(|| args.seeds.clone()),
        duration_s: args.duration,
        loads: (!args.loads.is_empty()).then(|| args.loads.clone()),
    };
    let experiment = Experiment::from_toml(&text, &overrides)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out").join(&experiment.name));
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let jobs = args.jobs.unwrap_or_else(cores).max(1);
    let console = Terminal::open();
    let started = Instant::now();
    let reports = run_all(&experiment, jobs, &out, &console)?;
    let wall = started.elapsed().as_secs_f64();
    print_table(&experiment, experiment.points.iter().zip(&reports));
    let messages: u64 = reports.iter().map(|r| r.messages_simulated).sum();
    eprintln!(
        "{} runs in {wall:.1} s wall ({jobs} jobs, {:.2} M simulated messages/s); output in {}",
        reports.len(),
        messages as f64 / wall.max(1e-9) / 1e6,
        out.display()
    );
    Ok(())
}

fn print_table<'a>(e: &Experiment, runs: impl Iterator<Item = (&'a RunPoint, &'a RunReport)>) {
    println!("{} ({}; x = {})", e.title, e.name, e.x_name);
    println!(
        "{:<24} {:>6} {:>5} {:>8} {:>9} {:>8} {:>9} {:>9} {:>7}",
        "variant", "x", "seed", "goodput", "good cps", "retrans", "p50 ms", "p99 ms", "occup"
    );
    for (p, r) in runs {
        println!(
            "{:<24} {:>6.2} {:>5} {:>8.3} {:>9.1} {:>8.3} {:>9.1} {:>9.1} {:>7.3}",
            p.variant,
            p.x,
            p.seed,
            r.goodput,
            r.goodput_cps,
            r.retrans_ratio,
            r.setup_delay_p50_ms,
            r.setup_delay_p99_ms,
            r.occupancy
        );
    }
}
