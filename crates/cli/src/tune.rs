//! `sluice tune`: Extremum Seeking tuning of the PI gains against the simulator (De Cicco,
//! Cofano & Mascolo §VI), writing the trajectory of `θ` and `J` (CSV and SVG, like their
//! Figure 6) and the result; `--resume` continues an interrupted run.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use sluice_bench::builtin;
use sluice_bench::parallel::cores;
use sluice_bench::tuning::{tune, Tuned, Tuning};
use sluice_report::tuning::{settling, SETTLING_WINDOW};
use sluice_sim::experiment::Experiment;
use sluice_sim::tuning::TuningExperiment;

use crate::meta::{self, Meta};
use crate::terminal::Terminal;
use crate::units::parse_duration;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// A tuning experiment: a TOML file, or the name of a built-in one (see --list).
    experiment: Option<String>,
    /// List the built-in tuning experiments and exit.
    #[arg(long)]
    list: bool,
    /// Output folder (default: out/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start from these gains instead of the file's: K_pc,K_ic,K_pq,K_iq.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    theta0: Option<Vec<f64>>,
    /// ES iterations instead of the file's.
    #[arg(long)]
    iterations: Option<u64>,
    /// Length of each step experiment instead of the file's.
    #[arg(long, value_parser = parse_duration)]
    run_length: Option<Duration>,
    /// Change one value of the tuning file before it is read, as `sluice sim --set`
    /// (e.g. `cost.repetitions=2`). Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Parallel simulations (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Continue the interrupted run in the output folder from its last finished iteration
    /// (same experiment, --theta0 and --run-length; --iterations may be raised).
    #[arg(long)]
    resume: bool,
}

pub fn run(args: &TuneArgs) -> Result<(), String> {
    if args.list {
        for (name, title) in builtin::titles(builtin::TUNING) {
            println!("{name:<28} {title}");
        }
        return Ok(());
    }
    let which = args
        .experiment
        .as_deref()
        .ok_or("name a tuning experiment (see `sluice tune --list`)")?;
    let mut text = builtin::text(builtin::TUNING, which, "tune")?;
    let mut e = if args.set.is_empty() {
        TuningExperiment::from_toml(&text)?
    } else {
        let read =
            |set: &[String]| TuningExperiment::from_document(Experiment::document(&text, set)?);
        let e = read(&args.set).map_err(|err| {
            // Name the assignment that breaks the file, if one does by itself.
            match args
                .set
                .iter()
                .find(|a| read(std::slice::from_ref(a)).is_err())
            {
                Some(a) if !err.starts_with("--set ") => format!("--set {a}: {err}"),
                _ => err,
            }
        })?;
        // The changed file is the experiment from here on: --resume compares it too.
        let doc = Experiment::document(&text, &args.set)?;
        text = toml::to_string(&doc).map_err(|err| err.to_string())?;
        e
    };
    if let Some(t) = &args.theta0 {
        let [k_pc, k_ic, k_pq, k_iq] = t[..] else {
            return Err(format!(
                "--theta0 takes four numbers K_pc,K_ic,K_pq,K_iq, got {}",
                t.len()
            ));
        };
        e.es.theta0 = [k_pc, k_ic, k_pq, k_iq];
    }
    if let Some(n) = args.iterations {
        if n == 0 || n > sluice_sim::tuning::MAX_ITERATIONS {
            return Err(format!(
                "--iterations must be between 1 and {}",
                sluice_sim::tuning::MAX_ITERATIONS
            ));
        }
        e.iterations = n;
    }
    if let Some(d) = args.run_length {
        if d.is_zero() || d.as_secs_f64() > 1.0e5 {
            return Err(format!(
                "--run-length must be above 0s and at most 100000s, got {}",
                humantime::format_duration(d)
            ));
        }
        e.cost.run_length = d;
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out").join(&e.name));
    std::fs::create_dir_all(&out).map_err(|err| format!("creating {}: {err}", out.display()))?;
    let document: toml::Table = toml::from_str(&text).map_err(|err| err.to_string())?;
    let resolved = serde_json::json!({
        "name": e.name,
        "file": document,
        "set": args.set,
        "theta0": e.es.theta0,
        "iterations": e.iterations,
        "run_length_s": e.cost.run_length.as_secs_f64(),
    });
    let meta = Meta::experiment(resolved, vec![e.base.seed]);
    let jobs = args.jobs.unwrap_or_else(cores).max(1);

    let started = Instant::now();
    eprintln!(
        "{}: {} iterations of {} step runs ({} s each), theta(0) = {:?}",
        e.name,
        e.iterations,
        e.cost.loads.len() * e.cost.repetitions,
        e.cost.run_length.as_secs_f64(),
        e.es.theta0
    );
    let tuning = Tuning {
        experiment: &e,
        text: &text,
        out: &out,
        jobs,
        resume: args.resume,
    };
    let console = Terminal::new("iterations");
    let Tuned::Finished(outcome) = tune(&tuning, &console, &mut |_| ControlFlow::Continue(()))?
    else {
        return Err("the tuning stopped before its last iteration".into());
    };
    meta::write(&out, &meta)?;
    let wall = started.elapsed().as_secs_f64();
    let (result, final_cost) = (&outcome.result, outcome.final_cost);
    let first_cost = outcome.first_cost();
    let settle = settling(&result.trajectory, SETTLING_WINDOW);
    let fmt = |t: &[f64; 4]| format!("[{:.2}, {:.2}, {:.2}, {:.2}]", t[0], t[1], t[2], t[3]);
    println!(
        "theta(0)          {}  J = {first_cost:.4}",
        fmt(&e.es.theta0)
    );
    println!(
        "final estimate    {}  J = {final_cost:.4}  ({:+.1}% vs theta(0))",
        fmt(&result.estimate),
        100.0 * (final_cost / first_cost - 1.0)
    );
    println!(
        "best evaluated    {}  J = {:.4}",
        fmt(&result.best_theta),
        result.best_cost
    );
    if let Some((t, c)) = outcome.reference {
        println!("reference         {}  J = {c:.4}", fmt(&t));
    }
    match settle {
        Some(s) => println!(
            "settling over the last 10 iterations: theta moved at most {:.1}% of its norm; per gain range {} ({})",
            100.0 * s.vector,
            fmt(&s.range),
            s.relative
                .iter()
                .map(|r| format!("{:.1}%", 100.0 * r))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => println!("settling: fewer than 10 iterations"),
    }
    eprintln!(
        "{wall:.1} s wall ({jobs} jobs); output in {}",
        out.display()
    );
    Ok(())
}
