//! Runs one scenario and prints a one-line summary (and the full JSON with `--json`).
//!
//! `cargo run --release -p sluice-sim --example run -- <algorithm> <load> [duration_s] [seed] [--json]`

use sluice_control::ControlConfig;
use sluice_sim::{run, Scenario};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let series = args.iter().any(|a| a == "--series");
    let args: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let algorithm = args.first().map_or("none", |s| s.as_str());
    let load: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let duration: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(600.0);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let text = if algorithm.contains('=') {
        algorithm.replace(';', "\n")
    } else {
        format!("algorithm = \"{algorithm}\"")
    };
    let control: ControlConfig = match toml::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mut s = Scenario {
        seed,
        duration_s: duration,
        warmup_s: (duration / 6.0).min(100.0),
        offered_load: load,
        timeseries: series,
        ..Scenario::default()
    };
    s.re.control = control;
    if let Ok(extra) = std::env::var("SIM_EXTRA") {
        // Extra scenario fields as TOML, merged over the command line's.
        let mut table = toml::Table::try_from(&s).unwrap_or_default();
        if let Ok(over) = extra.replace(';', "\n").parse::<toml::Table>() {
            for (k, v) in over {
                table.insert(k, v);
            }
        }
        match toml::Value::Table(table).try_into() {
            Ok(merged) => s = merged,
            Err(e) => {
                eprintln!("SIM_EXTRA: {e}");
                std::process::exit(2);
            }
        }
    }
    let t = Instant::now();
    let r = run(&s);
    let wall = t.elapsed().as_secs_f64();
    println!(
        "{algorithm:9} load {load:4.2} offered {:5.3} goodput {:5.3} occ {:5.3} rej {:5.3} retx {:5.3} q {:6.1}/{:3} drop {:6} p50 {:8.1} ms p99 {:8.1} ms | msgs {} ev {} wall {:.2}s = {:.2} M msg/s",
        r.offered_load,
        r.goodput,
        r.occupancy,
        r.reject_ratio,
        r.retrans_ratio,
        r.re_queue_mean,
        r.re_queue_max,
        r.re_dropped,
        r.setup_delay_p50_ms,
        r.setup_delay_p99_ms,
        r.messages_simulated,
        r.events_processed,
        wall,
        r.messages_simulated as f64 / wall / 1e6
    );
    if let Some(ts) = &r.timeseries {
        for p in &ts.points {
            println!(
                "t {:5.0} off {:?} good {:?} q {:6.1} occ {:4.2} mu {:6.1} nsess {:6.2} ctl {:8.2}",
                p.t_s,
                p.offered_cps,
                p.goodput_cps,
                p.queue_len,
                p.occupancy,
                p.re_service_rate,
                p.re_sessions,
                p.re_control_value
            );
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    }
}
