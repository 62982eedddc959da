//! `sluice bench beta`: a proxy's own `β`, the CPU cost of a forwarded call over a rejected
//! one, measured at its native speed on loopback.
//!
//! De Cicco et al.'s bound on any local control, `g_opt(r)`, depends on `β` alone (with the
//! CPU target), so the live local-control sweeps (`bench overload`, emulated capacity) take
//! it from here rather than from a guess. Each proxy runs twice at the same call rate: once
//! forwarding every call, once answering every INVITE with 503 (sluice: threshold rejection
//! with both watermarks at 0, so every new INVITE is rejected at the receive stage; Kamailio:
//! its ratelimit module with a TAILDROP limit of 0). The cost of a call is the proxy
//! process's CPU time (user + system, so the socket calls count) per offered call, as
//! `bench proxy` measures it.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::console::Console;
use crate::netns::Hosts;
use crate::process::{kamailio_command, sluice_proxy_command};
use crate::proxy_bench::{bench_one, step_header, Generator, ProxyBench};

/// `sluice bench beta`'s settings.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Beta {
    /// Call rate of every run, calls/s.
    pub rate: f64,
    /// Seconds of calls per run.
    pub secs: f64,
    /// Also measure Kamailio with `kamailio_cfg`.
    pub kamailio: bool,
    pub kamailio_cfg: PathBuf,
    /// Directory for beta.json.
    pub out: Option<PathBuf>,
}

/// One proxy's measurement: its `β`.
#[derive(Debug, Clone, Serialize)]
pub struct CostRatio {
    pub proxy: String,
    pub rate: f64,
    /// Proxy CPU time per forwarded call, microseconds.
    pub forwarded_us: f64,
    /// Proxy CPU time per rejected call (INVITE, 503, ACK), microseconds.
    pub rejected_us: f64,
    pub beta: f64,
}

/// sluice's config that rejects every new INVITE at the receive stage.
const REJECT_ALL: &str = "[control]\nalgorithm = \"threshold\"\n\
[control.threshold]\nhigh_watermark = 0\nlow_watermark = 0\n";

pub fn bench_beta(args: &Beta, console: &dyn Console) -> Result<(), String> {
    if !(args.rate > 0.0 && args.secs > 0.0) {
        return Err("need --rate > 0 and --duration above 0s".into());
    }
    let reject_cfg = std::env::temp_dir().join(format!("sluice-beta-{}.toml", std::process::id()));
    let sluice = sluice_proxy_command(1)?;
    let mut pairs = vec![(
        "sluice".to_owned(),
        sluice.clone(),
        format!("{sluice} --config '{}'", reject_cfg.display()),
    )];
    if args.kamailio {
        let kamailio = kamailio_command(&args.kamailio_cfg, 1)?;
        pairs.push((
            "kamailio".to_owned(),
            kamailio.clone(),
            format!("{kamailio} -A 'RL_PIPE=\"0:TAILDROP:0\"'"),
        ));
    }
    std::fs::write(&reject_cfg, REJECT_ALL)
        .map_err(|e| format!("{}: {e}", reject_cfg.display()))?;
    let bench = ProxyBench {
        proxies: Vec::new(),
        start: args.rate,
        step: args.rate,
        max: args.rate,
        step_secs: args.secs,
        drain: 3.0,
        generator: Generator::Sluice,
        sipp_scenarios: PathBuf::from("tests/sipp"),
        kamailio_cfg: args.kamailio_cfg.clone(),
        out: None,
        netns: false,
    };
    let mut results = Vec::new();
    console.line(&step_header());
    console.begin(2 * pairs.len() as u64);
    let outcome = (|| {
        for (label, forward, reject) in &pairs {
            let forwarded = bench_one(forward, &bench, &Hosts::loopback(), console)?;
            let rejected = bench_one(reject, &bench, &Hosts::loopback(), console)?;
            let (Some(f), Some(r)) = (forwarded.steps.first(), rejected.steps.first()) else {
                return Err(format!("{label}: no measurement"));
            };
            if !f.clean {
                return Err(format!(
                    "{label}: the forwarding run at {} calls/s was not clean ({} failed, {} retransmissions): lower --rate",
                    args.rate, f.failed, f.retransmissions_sent
                ));
            }
            let all_rejected = r
                .failures
                .is_some_and(|x| x.rejected_503 == r.offered && r.offered > 0);
            if !all_rejected {
                return Err(format!(
                    "{label}: the rejecting run answered {:?} of {} calls with 503",
                    r.failures.map(|x| x.rejected_503),
                    r.offered
                ));
            }
            let (Some(fu), Some(ru)) = (f.proxy_us_per_call, r.proxy_us_per_call) else {
                return Err(format!("{label}: the proxy's CPU time could not be read"));
            };
            results.push(CostRatio {
                proxy: label.clone(),
                rate: args.rate,
                forwarded_us: fu,
                rejected_us: ru,
                beta: fu / ru,
            });
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&reject_cfg);
    console.finish();
    outcome?;
    let mut table = format!(
        "\n{:<10} {:>8} {:>18} {:>18} {:>7}\n",
        "proxy", "calls/s", "forwarded us/call", "rejected us/call", "beta"
    );
    for b in &results {
        let _ = writeln!(
            table,
            "{:<10} {:>8.0} {:>18.1} {:>18.1} {:>7.2}",
            b.proxy, b.rate, b.forwarded_us, b.rejected_us, b.beta
        );
    }
    for line in table.lines() {
        console.line(line);
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("beta.json"), format!("{json}\n")).map_err(|e| e.to_string())?;
    }
    Ok(())
}
