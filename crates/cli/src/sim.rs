//! `sluice sim`: run an experiment (a TOML file or a built-in name) in the simulator and write
//! `summary.csv`, per-run JSON, time series and SVG plots into an output folder; or one shard
//! of its runs, and `sluice sim merge` to join the shards.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sluice_bench::builtin;
use sluice_bench::parallel::cores;
use sluice_bench::sweep::{run_all, run_shard, table_head, table_row};
use sluice_report::shard::{merge, Shard};
use sluice_sim::experiment::{Experiment, Kind, Overrides, RunPoint};
use sluice_sim::RunReport;

use crate::meta::{self, Meta};
use crate::terminal::Terminal;
use crate::units::parse_duration;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// An experiment: a TOML file, or the name of a built-in one (see --list).
    #[arg(required_unless_present_any = ["list", "print_scenario"])]
    experiment: Option<String>,
    /// Print this experiment (a file or a built-in name) as the TOML the run would read,
    /// with --set, --seed and --load written in, and exit.
    #[arg(long, value_name = "NAME|FILE", conflicts_with_all = ["experiment", "list"])]
    print_scenario: Option<String>,
    /// Change one value of the experiment file before it is read: a dotted path and a TOML
    /// value (a bare word is a string), e.g. `base.re.queue_capacity=500`,
    /// `sweep.seeds=[1,2,3]`, `variant.0.label=fast`. Repeatable; shards record them.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
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
    /// Simulated time per run instead of the experiment's (warm-up scales with it).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
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
    let overrides = Overrides {
        seeds: (!args.seeds.is_empty()).then(|| args.seeds.clone()),
        duration_s: args.duration.map(|d| d.as_secs_f64()),
        loads: (!args.loads.is_empty()).then(|| args.loads.clone()),
        set: args.set.clone(),
    };
    if let Some(which) = &args.print_scenario {
        let text = builtin::text(builtin::SIMULATOR, which, "sim")?;
        let doc = Experiment::resolved_document(&text, &overrides)?;
        let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
        println!("{}", text.trim_end());
        return Ok(());
    }
    let which = args.experiment.as_deref().unwrap_or_default();
    let text = builtin::text(builtin::SIMULATOR, which, "sim")?;
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
    let meta = experiment_meta(&text, &overrides, &experiment)?;
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
    meta::write(&out, &meta)?;
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
    let results = sluice_report::claims::evaluate(e, reports);
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

/// What `meta.json` records of a simulated experiment: the file as read (after --set), the
/// command-line overrides on top of it, and the seeds of its runs.
fn experiment_meta(text: &str, overrides: &Overrides, e: &Experiment) -> Result<Meta, String> {
    let document = Experiment::document(text, &overrides.set)?;
    let resolved = serde_json::json!({
        "name": e.name,
        "file": document,
        "overrides": {
            "seeds": overrides.seeds,
            "duration_s": overrides.duration_s,
            "loads": overrides.loads,
            "set": overrides.set,
        },
        "runs": e.points.len(),
    });
    let mut seeds: Vec<u64> = e.points.iter().map(|p| p.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    Ok(Meta::experiment(resolved, seeds))
}

fn merge_shards(dirs: &[PathBuf], out: Option<&Path>) -> Result<(), String> {
    let merged = merge(dirs)?;
    let e = &merged.experiment;
    let out = out.map_or_else(|| Path::new("out").join(&e.name), Path::to_owned);
    let meta = experiment_meta(&merged.text, &merged.overrides, e)?;
    sluice_report::experiment::write_all(&out, e, &merged.reports)?;
    meta::write(&out, &meta)?;
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
