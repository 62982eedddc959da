//! `sluice sim`: run an experiment (a TOML file or a built-in name) in the simulator and write
//! `summary.csv`, per-run JSON, time series and SVG plots into an output folder; or one shard
//! of its runs, and `sluice sim merge` to join the shards.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use sluice_bench::builtin;
use sluice_bench::parallel::cores;
use sluice_bench::sweep::{run_all, run_shard, table_head, table_row};
use sluice_report::shard::{merge, Shard};
use sluice_sim::experiment::{Experiment, Kind, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::terminal::Terminal;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// An experiment: a TOML file, or the name of a built-in one (see --list).
    #[arg(required_unless_present = "list")]
    experiment: Option<String>,
    /// List the built-in experiments and exit.
    #[arg(long)]
    list: bool,
    /// Output folder (default: out/NAME, with --shard out/NAME/shard-I-of-N).
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
    /// Run only shard I of N (I/N, from 1): the points whose index is I-1 modulo N, written
    /// as a partial output for `sluice sim merge`. `env`: from a job array's environment,
    /// Kubernetes' JOB_COMPLETION_INDEX (from 0; give --shards) or Slurm's
    /// SLURM_ARRAY_TASK_ID (from SLURM_ARRAY_TASK_MIN; count SLURM_ARRAY_TASK_COUNT).
    #[arg(long, value_name = "I/N|env")]
    shard: Option<String>,
    /// The number of shards, with --shard env (a Kubernetes Indexed Job's completions).
    #[arg(long, requires = "shard")]
    shards: Option<usize>,
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Join the partial outputs of `sluice sim ... --shard I/N` (one folder per shard, all of
    /// them) into the output one unsharded run writes.
    Merge {
        /// The shards' output folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Output folder (default: out/NAME).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn run(args: &SimArgs) -> Result<(), String> {
    if let Some(SimCommand::Merge { dirs, out }) = &args.command {
        return merge_shards(dirs, out.as_deref());
    }
    if args.list {
        for (name, title) in builtin::titles(builtin::SIMULATOR) {
            println!("{name:<28} {title}");
        }
        for (name, title) in builtin::titles(builtin::TUNING) {
            println!("{name:<28} {title} (run with `sluice tune {name}`)");
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
    let shard = match args.shard.as_deref() {
        None => None,
        Some("env") => Some(Shard::from_env(|v| std::env::var(v).ok(), args.shards)?),
        Some(spec) if args.shards.is_none() => Some(Shard::parse(spec)?),
        Some(_) => return Err("--shards goes with --shard env".into()),
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let dir = Path::new("out").join(&experiment.name);
        match shard {
            Some(s) => dir.join(format!("shard-{}-of-{}", s.index(), s.count())),
            None => dir,
        }
    });
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let jobs = args.jobs.unwrap_or_else(cores).max(1);
    let console = Terminal::new("runs");
    let started = Instant::now();
    let runs: Vec<(usize, RunReport)> = match shard {
        None => run_all(&experiment, jobs, &out, &console)?
            .into_iter()
            .enumerate()
            .collect(),
        Some(s) => run_shard(&experiment, &text, &overrides, s, jobs, &out, &console)?,
    };
    let wall = started.elapsed().as_secs_f64();
    if experiment.kind == Kind::Sample {
        // The rows went by as the runs ended; hundreds of them are summed up by the claims.
        let reports: Vec<RunReport> = runs.iter().map(|(_, r)| r.clone()).collect();
        println!(
            "{} ({}; x = {})",
            experiment.title, experiment.name, experiment.x_name
        );
        print_claims(&experiment, &reports);
    }
    let messages: u64 = runs.iter().map(|(_, r)| r.messages_simulated).sum();
    let what = match shard {
        None => String::new(),
        Some(s) => format!(" of shard {s}"),
    };
    eprintln!(
        "{} runs{what} in {wall:.1} s wall ({jobs} jobs, {:.2} M simulated messages/s); output in {}",
        runs.len(),
        messages as f64 / wall.max(1e-9) / 1e6,
        out.display()
    );
    Ok(())
}

fn print_claims(e: &Experiment, reports: &[RunReport]) {
    if reports.len() != e.points.len() {
        println!("(a shard: the claims are judged once the shards are merged)");
        return;
    }
    let results = match sluice_report::claims::evaluate(e, reports) {
        Ok(r) => r,
        Err(err) => {
            println!("{err}");
            return;
        }
    };
    println!(
        "{:<20} {:<9} {:>10} {:>8} {:>9} {:>10} {:>10}",
        "variant", "claim", "topologies", "holding", "share", "worst at", "worst/req"
    );
    for c in &results {
        let worst = c.verdicts.first();
        println!(
            "{:<20} {:<9} {:>10} {:>8} {:>9.3} {:>10} {:>10}",
            c.variant,
            c.claim.name(),
            c.verdicts.len(),
            c.holding(),
            c.share(),
            worst.map_or("-".into(), |v| v.topology.to_string()),
            worst.map_or("-".into(), |v| format!("{:.3}/{:.3}", v.value, v.required)),
        );
    }
}

fn merge_shards(dirs: &[PathBuf], out: Option<&Path>) -> Result<(), String> {
    let merged = merge(dirs)?;
    let e = &merged.experiment;
    let out = out.map_or_else(|| Path::new("out").join(&e.name), Path::to_owned);
    sluice_report::experiment::write_all(&out, e, &merged.reports)?;
    print_table(e, e.points.iter().zip(&merged.reports));
    eprintln!(
        "{} shards, {} runs merged; output in {}",
        dirs.len(),
        merged.reports.len(),
        out.display()
    );
    Ok(())
}

fn print_table<'a>(e: &Experiment, runs: impl Iterator<Item = (&'a RunPoint, &'a RunReport)>) {
    if e.kind == Kind::Sample {
        println!("{} ({}; x = {})", e.title, e.name, e.x_name);
        // Hundreds of runs: the claims say what they show (the runs are in summary.csv).
        let reports: Vec<RunReport> = runs.map(|(_, r)| r.clone()).collect();
        print_claims(e, &reports);
        return;
    }
    for line in table_head(e) {
        println!("{line}");
    }
    for (p, r) in runs {
        println!("{}", table_row(p, r));
    }
}
