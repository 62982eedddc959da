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

use clap::Args;
use serde::Serialize;

use crate::load::{
    bench_one, kamailio_command, print_step_header, sluice_proxy_command, GeneratorArg,
    ProxyBenchArgs,
};

#[derive(Args, Debug)]
pub struct BetaArgs {
    /// Call rate of every run, calls/s (below the proxy's capacity: a forwarding run that
    /// fails or retransmits measures a collapse, not a cost).
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Seconds of calls per run.
    #[arg(long, default_value_t = 8.0)]
    pub secs: f64,
    /// Also measure Kamailio with `--kamailio-cfg` (tests/kamailio/ratelimit.cfg, one worker).
    #[arg(long)]
    pub kamailio: bool,
    /// Kamailio config with the ratelimit module and an `RL_PIPE` define.
    #[arg(long, default_value = "tests/kamailio/ratelimit.cfg")]
    pub kamailio_cfg: PathBuf,
    /// Directory for beta.json.
    #[arg(long)]
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
const REJECT_ALL: &str = "[admission]\npolicy = \"threshold\"\n\
[admission.threshold]\nhigh_watermark = 0\nlow_watermark = 0\n";

pub fn bench_beta(args: &BetaArgs) -> Result<(), String> {
    if !(args.rate > 0.0 && args.secs > 0.0) {
        return Err("need --rate > 0 and --secs > 0".into());
    }
    let reject_cfg = std::env::temp_dir().join(format!("sluice-beta-{}.toml", std::process::id()));
    let sluice = sluice_proxy_command()?;
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
    let bench = ProxyBenchArgs {
        proxies: Vec::new(),
        start: args.rate,
        step: args.rate,
        max: args.rate,
        step_secs: args.secs,
        drain: 3.0,
        generator: GeneratorArg::Sluice,
        sipp_scenarios: PathBuf::from("tests/sipp"),
        kamailio_cfg: args.kamailio_cfg.clone(),
        out: None,
    };
    let mut results = Vec::new();
    print_step_header();
    let outcome = (|| {
        for (label, forward, reject) in &pairs {
            let forwarded = bench_one(forward, &bench)?;
            let rejected = bench_one(reject, &bench)?;
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
    print!("{table}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("beta.json"), format!("{json}\n")).map_err(|e| e.to_string())?;
    }
    Ok(())
}
