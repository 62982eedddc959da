//! `sluice bench overload` and `sluice demo`: the local-control experiments of the papers
//! on real sockets. A sluice UAS, the proxy under test (sluice with emulated capacity and
//! one local control per variant, or any command such as Kamailio with its ratelimit
//! module) and a sluice UAC run on loopback; the offered load sweeps multiples of the
//! proxy's capacity, one fixed-length run per point, and the results go into the same
//! `summary.csv` columns as `sluice sim` and an SVG of goodput against `g_opt(r)`.
//!
//! ```text
//! sluice bench overload [--loads 0.5,1,2,4] [--duration 20] [--variants none:fifo,pi,...]
//!     [--capacity 300] [--beta 6] [--cost-other-us 0] [--experiment experiments/decicco-fig11-12.toml]
//!     [--proxy-capacity 2000 --proxy-label kamailio-red --proxy-cmd "kamailio -f tests/kamailio/ratelimit.cfg \
//!        -DD -E -m 1024 -n 1 -l udp:{listen} -A 'NEXT_HOP=\"sip:{next_hop}\"' -A 'RL_PIPE=\"0:RED:1500\"'"]
//! sluice demo [--duration 8] [--beta 8]
//! ```
//!
//! sluice's capacity is emulated (virtual processor time per message, see `sluice_proxy`),
//! so its loads are exact multiples of it and the machine's load barely matters. A
//! `--proxy-cmd` proxy runs at its native speed: its loads are multiples of the capacity
//! given with `--proxy-capacity` (measure it first, e.g. `sluice bench proxy`), its goodput
//! is normalised by that, and the UAC, UAS and proxy share the machine's cores, so its
//! curve is comparable with sluice's only as a normalised curve.
//!
//! `β`, the cost of a forwarded call over a rejected one, bounds what any local control can
//! do (`g_opt(r)`, De Cicco et al.). sluice's emulated `β` is set with `--beta`; its native
//! one is measured on every run from the proxy thread's CPU time (least squares over the
//! points of forwarded and rejected calls) and printed.
//!
//! Measurement window: each point runs `duration` seconds of arrivals; goodput, offered
//! load and retransmissions are counted over the UAC's per-second rows after `warmup`
//! (the controllers settle, and without control the queue needs time to fill and
//! collapse). Setup delays are over the calls started after the warm-up (sluice's UAC;
//! SIPp's are over the whole point). A call is good when its ACK went out
//! within 10 s of its INVITE (the UAC's setup limit).

use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use sluice_control::optimal::optimal_goodput;
use sluice_control::Algorithm;
use sluice_load::shell::{self, Stop};
use sluice_load::{Hold, SecondRow, UacConfig, UasConfig};
use sluice_proxy::{Proxy, ProxyConfig, ProxyReport, ShutdownHandle};

use crate::plot::{self, Axes, Series};
use crate::sim::file_stem;
use crate::sipp::{CallerRun, SippUac};

/// The sluice variants a sweep runs by default: every local control of the control crate.
pub const ALL_VARIANTS: &str = "none:fifo,none,threshold,ohta,occ,red,pi,latency-bucket";

/// Other messages a call sends through the proxy besides its INVITE, forwarded (100, 180,
/// 200, ACK, BYE, 200) and rejected (none: the proxy absorbs the ACK for its stateless 503
/// at the receive stage), for `β` and the capacity.
const OTHERS_FORWARDED: f64 = 6.0;
const OTHERS_REJECTED: f64 = 1.0;

/// `C_T` of the `g_opt(r)` curve: the PI's default target.
const TARGET_CPU: f64 = 0.9;

#[derive(Args, Debug, Clone)]
pub struct OverloadArgs {
    /// Offered loads, as multiples of the proxy's capacity (default 0.5,1,2,4, or the
    /// experiment's sweep with --experiment).
    #[arg(long, value_delimiter = ',')]
    pub loads: Option<Vec<f64>>,
    /// Seconds of arrivals per point.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Seconds at the start of each point not counted (default: a quarter of --duration).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// sluice local controls to run, comma-separated (none, threshold, ohta, occ, red, pi,
    /// latency-bucket); an empty list runs only --proxy-cmd.
    /// `POLICY:fifo` runs it in the proxy's plain structure (one FIFO for every message)
    /// instead of De Cicco et al.'s INVITE queue.
    #[arg(long, value_delimiter = ',', default_value = ALL_VARIANTS)]
    pub variants: Vec<String>,
    /// sluice's emulated capacity, calls/s: an INVITE processed in full costs
    /// 1/capacity minus what the other messages of a call cost.
    #[arg(long, default_value_t = 300.0)]
    pub capacity: f64,
    /// Emulated cost of every message other than an INVITE, microseconds (0: De Cicco et
    /// al.'s model, where only INVITEs cost).
    #[arg(long, default_value_t = 0)]
    pub cost_other_us: u64,
    /// `β`: a forwarded call's emulated cost over a rejected call's (sets cost_reject_us).
    /// The default is near sluice's own: `sluice bench beta` measures it (its process's
    /// CPU per forwarded call over per rejected call at native speed: 4.7 to 7.7 here at
    /// 2,000 to 6,000 calls/s; Kamailio 8.9), and every run prints a rougher estimate from
    /// its own points.
    #[arg(long, default_value_t = 6.0)]
    pub beta: f64,
    /// A proxy command to compare with (e.g. Kamailio with tests/kamailio/ratelimit.cfg),
    /// run per point with `{listen}`, `{next_hop}`, `{listen_port}`, `{next_hop_port}` and
    /// `{duration}` replaced as in `sluice bench proxy`. Repeatable.
    #[arg(long)]
    pub proxy_cmd: Vec<String>,
    /// Labels for the --proxy-cmd curves, in order (default: proxy-cmd-N).
    #[arg(long)]
    pub proxy_label: Vec<String>,
    /// Capacity of the --proxy-cmd proxies, calls/s (it has no emulated capacity: measure
    /// it first, e.g. with `sluice bench proxy`); their loads are multiples of it.
    #[arg(long)]
    pub proxy_capacity: Option<f64>,
    /// Take variants and the offered-load sweep from a simulator experiment TOML (its
    /// `control` tables and `re` settings map onto the proxy's config).
    #[arg(long)]
    pub experiment: Option<PathBuf>,
    /// Call holding time, seconds (BYE this long after the ACK).
    #[arg(long, default_value_t = 0.0)]
    pub hold: f64,
    /// Output directory for summary.csv, points.jsonl, series.csv and the SVGs.
    #[arg(long, default_value = "overload-out")]
    pub out: PathBuf,
    /// Who places the calls: sluice's UAC, SIPp (--sipp-scenario, measured the same way),
    /// both one after the other at every point, or `split`: both in the same run, each
    /// offering half the load to the one proxy, so both see the same overload; `both` and
    /// `split` end with a table of how far they agree.
    #[arg(long, value_enum, default_value_t = Caller::Sluice)]
    pub generator: Caller,
    /// SIPp's UAC scenario for --generator sipp|both|split: it must time setup as rtd 1 and split
    /// it at 10 s (see the file).
    #[arg(long, default_value = "tests/sipp/uac-setup.xml")]
    pub sipp_scenario: PathBuf,
    /// Hop-by-hop topology (see `hop_bench`): this many UACs, each calling through its own
    /// SE, into one RE with the emulated capacity. Default 3 when --variants or
    /// --experiment are hop-by-hop (e.g. `rate-abs/rate`, `win-disc`).
    #[arg(long)]
    pub ses: Option<usize>,
    /// Topology: the RE's queueing-delay budget D_B for win-disc, win-cont and rate-abs,
    /// and win-auto's delay binding, milliseconds (default: the variant's, Table 2's
    /// 200 ms D_B and no binding). The RE lets its queue hold about this much work, so it
    /// bounds the setup delay the feedback aims for.
    #[arg(long)]
    pub budget_delay_ms: Option<u64>,
    /// Topology: the SEs' RFC 7415 tolerance τ, milliseconds: how much of a burst above the
    /// fed-back rate an SE lets through. Default: what the simulator's SEs let through, whose
    /// token bucket holds `bucket_depth` sessions (5: 40 ms at 100 calls/s per SE).
    #[arg(long)]
    pub se_rate_tau_ms: Option<u64>,
    /// A dynamic experiment (load schedules, e.g. shen2008-fig27-31) in the topology: its
    /// schedule's times are multiplied by this (0.25 runs the 1600 s pattern in 400 s);
    /// SIP's timers are not scaled.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Topology with --experiment: simulated seconds per point of the simulator's run of
    /// the same experiment, the first fifth warm-up (default: the live point's --duration
    /// and --warmup, so both measure the same window of the same start-up).
    #[arg(long)]
    pub sim_duration: Option<f64>,
}

/// The calling side of a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Caller {
    Sluice,
    Sipp,
    Both,
    /// sluice's UAC and SIPp at once, half the offered load each. A collapsing proxy
    /// oscillates over tens of seconds, so two runs of one generator differ by more than
    /// the generators do; in one run both callers meet the same queue at the same moments,
    /// and what is left between their numbers is the generators themselves: how they
    /// count, and how they send (a full drop-tail queue favours the smoother sender, see
    /// docs/ARCHITECTURE.md).
    Split,
}

/// One proxy setting of a sweep.
#[derive(Clone, Debug)]
pub struct Variant {
    pub label: String,
    pub target: Target,
}

#[derive(Clone, Debug)]
pub enum Target {
    /// sluice's proxy in this process, with this config (listen and next hop are set per
    /// point).
    Sluice(Box<ProxyConfig>),
    /// A command, with the capacity its loads are multiples of.
    Command { template: String, capacity: f64 },
}

impl Variant {
    fn capacity(&self) -> f64 {
        match &self.target {
            Target::Sluice(c) => emulated_capacity(c),
            Target::Command { capacity, .. } => *capacity,
        }
    }
    fn algorithm(&self) -> String {
        match &self.target {
            Target::Sluice(c) => c.control.algorithm.to_string(),
            Target::Command { .. } => "external".into(),
        }
    }
}

/// Calls/s the emulated costs allow when every call is forwarded.
pub fn emulated_capacity(c: &ProxyConfig) -> f64 {
    let per_call = c.cost_forward().as_secs_f64() + OTHERS_FORWARDED * c.cost_other().as_secs_f64();
    if per_call > 0.0 {
        1.0 / per_call
    } else {
        f64::INFINITY
    }
}

/// The proxy config of one sluice variant: De Cicco et al.'s structure (INVITE queue of
/// 800 behind a main FIFO of 1000, as `experiments/decicco-fig11-12.toml`), Ohta and RED
/// with their 1000-INVITE queue, and emulated costs for `capacity` calls/s and `β`.
pub fn sluice_variant(
    policy: &str,
    capacity: f64,
    cost_other_us: u64,
    beta: f64,
) -> Result<Variant, String> {
    let mut c = ProxyConfig::default();
    // `POLICY:fifo`: the proxy's plain structure, one FIFO for every message.
    let (name, fifo) = match policy.strip_suffix(":fifo") {
        Some(name) => (name, true),
        None => (policy, false),
    };
    c.control.algorithm = name
        .parse::<Algorithm>()
        .map_err(|e| format!("variant {policy}: {e}"))?;
    c.invite_queue = !fifo;
    c.queue_capacity = 1000;
    c.invite_queue_capacity = match c.control.algorithm {
        Algorithm::Ohta | Algorithm::Red => 1000,
        _ => 800,
    };
    set_costs(&mut c, capacity, cost_other_us, beta)?;
    c.validate().map_err(|e| format!("variant {policy}: {e}"))?;
    Ok(Variant {
        label: policy.to_owned(),
        target: Target::Sluice(Box::new(c)),
    })
}

fn set_costs(
    c: &mut ProxyConfig,
    capacity: f64,
    cost_other_us: u64,
    beta: f64,
) -> Result<(), String> {
    if !(capacity > 0.0 && capacity.is_finite() && beta > 1.0 && beta.is_finite()) {
        return Err(format!(
            "need capacity > 0 and beta > 1 (got {capacity}, {beta})"
        ));
    }
    let call_us = 1e6 / capacity;
    let other = cost_other_us as f64;
    let invite_us = call_us - OTHERS_FORWARDED * other;
    if invite_us < 1.0 {
        return Err(format!(
            "cost_other_us {cost_other_us} leaves nothing for the INVITE at {capacity} calls/s"
        ));
    }
    // β = (invite + 6 other) / (reject + the ACK of its 503)
    let reject_us = call_us / beta - OTHERS_REJECTED * other;
    if reject_us < 0.0 {
        return Err(format!(
            "beta {beta} is too high for cost_other_us {cost_other_us}"
        ));
    }
    c.cost_forward_us = invite_us;
    c.cost_other_us = Some(other);
    c.cost_reject_us = reject_us;
    Ok(())
}

/// What one point measured. The first fields are `sluice sim`'s summary columns.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub experiment: String,
    pub variant: String,
    /// Who placed the calls: `sluice` or `sipp`.
    pub caller: &'static str,
    /// The seconds (rows) counted.
    #[serde(skip)]
    pub window: std::ops::RangeInclusive<u64>,
    pub algorithm: String,
    pub x: f64,
    /// Offered calls/s over the window / capacity.
    pub offered_load_measured: f64,
    pub capacity_cps: f64,
    pub goodput: f64,
    pub goodput_cps: f64,
    /// Normalised goodput by Shen et al.'s rule, as far as the caller sees it: of the
    /// calls set up within 10 s, those whose 180 reached the caller (the simulator's
    /// goodput needs all five setup messages, and nobody retransmits a 180). `None` where
    /// the caller does not report it (SIPp).
    pub goodput_with_180: Option<f64>,
    /// Retransmissions the UAC and UAS sent / all messages they sent (what reached the
    /// proxy), over the window.
    pub retrans_ratio: f64,
    pub setup_delay_p50_ms: Option<f64>,
    pub setup_delay_p99_ms: Option<f64>,
    /// sluice: the emulated processor's busy fraction; a command: its processes' CPU
    /// time over the wall time.
    pub occupancy: Option<f64>,
    /// INVITEs answered 503 / calls offered, over the window.
    pub reject_ratio: f64,
    pub calls_offered: u64,
    pub calls_good: u64,
    /// Arrivals the proxy dropped at a full queue (sluice only).
    pub proxy_dropped: Option<u64>,
    pub uac_retransmissions_sent: u64,
    pub uac_retransmissions_received: u64,
    /// 2xx retransmissions the UAS sent (a 2xx not ACKed in time).
    pub uas_2xx_retransmissions: u64,
    /// sluice: calls forwarded and rejected, and the CPU time of the proxy's thread.
    pub forwarded_calls: Option<u64>,
    pub rejected_calls: Option<u64>,
    pub proxy_cpu_s: Option<f64>,
    #[serde(skip)]
    pub rows: Vec<SecondRow>,
    /// Topology runs: each source's own rows (`rows` is their sum per second).
    #[serde(skip)]
    pub per_source: Vec<(String, Vec<SecondRow>)>,
}

/// Seconds of a point: arrivals, the uncounted start, and the hold between ACK and BYE.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub duration: f64,
    pub warmup: f64,
    pub hold: f64,
}

/// The calling side of the points of a sweep.
#[derive(Clone, Copy, Debug)]
pub struct Callers<'a> {
    pub caller: Caller,
    /// SIPp's scenario, for `Caller::Sipp` and `Caller::Both`.
    pub sipp_scenario: &'a Path,
}

impl Callers<'_> {
    /// sluice's UAC alone.
    pub fn sluice() -> Callers<'static> {
        Callers {
            caller: Caller::Sluice,
            sipp_scenario: Path::new(""),
        }
    }

    fn each(self) -> &'static [Caller] {
        match self.caller {
            Caller::Sluice => &[Caller::Sluice],
            Caller::Sipp => &[Caller::Sipp],
            Caller::Both => &[Caller::Sluice, Caller::Sipp],
            Caller::Split => &[Caller::Split],
        }
    }
}

/// Runs every variant at every load (with each caller), printing a line per point.
pub fn sweep(
    name: &str,
    variants: &[Variant],
    loads: &[f64],
    timing: Timing,
    callers: Callers<'_>,
) -> Result<Vec<PointResult>, String> {
    let Timing {
        duration, warmup, ..
    } = timing;
    if !(duration > 0.0 && duration.is_finite() && (0.0..duration).contains(&warmup)) {
        return Err("need --duration > 0 and 0 <= --warmup < --duration".into());
    }
    if loads.iter().any(|l| !(*l > 0.0 && l.is_finite())) || loads.is_empty() {
        return Err("--loads must be positive numbers".into());
    }
    println!(
        "{:<16} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6}",
        "variant",
        "x",
        "offered",
        "goodput",
        "norm",
        "reject",
        "retrans",
        "setup p50",
        "setup p99",
        "busy"
    );
    let mut out = Vec::new();
    for v in variants {
        for &x in loads {
            for &caller in callers.each() {
                for p in run_point(name, v, x, timing, caller, callers.sipp_scenario)? {
                    println!(
                        "{:<16} {:>5} {:>8.0} {:>8.1} {:>8.3} {:>8.3} {:>8.4} {:>9} {:>9} {:>6}",
                        p.variant,
                        p.x,
                        p.offered_load_measured * p.capacity_cps,
                        p.goodput_cps,
                        p.goodput,
                        p.reject_ratio,
                        p.retrans_ratio,
                        ms(p.setup_delay_p50_ms),
                        ms(p.setup_delay_p99_ms),
                        p.occupancy
                            .map_or("-".into(), |o| format!("{:.0}%", o * 100.0)),
                    );
                    out.push(p);
                }
            }
        }
    }
    Ok(out)
}

pub(crate) fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// A proxy running for one point.
pub(crate) enum Running {
    Sluice {
        stop: ShutdownHandle,
        /// The report, and the CPU seconds the proxy's thread used.
        thread: std::thread::JoinHandle<std::io::Result<(ProxyReport, Option<f64>)>>,
    },
    Command(std::process::Child),
}

pub(crate) fn start_sluice(
    config: ProxyConfig,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    start_sluice_on(
        config,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        next_hop,
        budget_s,
    )
}

/// [`start_sluice`] on a given address (the topology's SEs, whose addresses the RE must
/// know first).
pub(crate) fn start_sluice_on(
    mut config: ProxyConfig,
    listen: SocketAddr,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    config.listen = listen;
    config.next_hop = Some(next_hop);
    // Stops by itself even if this process never asks it to.
    config.duration_s = Some(budget_s);
    config.shutdown_grace_s = 1.0;
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let cpu0 = shell::thread_cpu_seconds();
        let report = rt.block_on(async move {
            let proxy = Proxy::bind(config).await?;
            let _ = tx.send((proxy.local_addr(), proxy.shutdown_handle()));
            proxy.run().await
        })?;
        let cpu = shell::thread_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
        Ok((report, cpu))
    });
    let (addr, stop) = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the sluice proxy did not start".to_owned())?;
    Ok((addr, Running::Sluice { stop, thread }))
}

fn start_command(
    template: &str,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let command = template
        .replace("{listen}", &listen.to_string())
        .replace("{next_hop}", &next_hop.to_string())
        .replace("{listen_port}", &listen.port().to_string())
        .replace("{next_hop_port}", &next_hop.port().to_string())
        .replace("{duration}", &format!("{budget_s:.0}"));
    let child = std::process::Command::new("sh")
        .args(["-c", &format!("exec {command}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("{command}: {e}"))?;
    let mut running = Running::Command(child);
    if !shell::probe(listen, Duration::from_secs(10)) {
        stop(&mut running);
        return Err(format!("{command}: no answer on {listen} within 10 s"));
    }
    Ok((listen, running))
}

/// Stops a proxy; sluice's report comes back.
pub(crate) fn stop(running: &mut Running) -> Option<ProxyReport> {
    match running {
        Running::Sluice { stop, .. } => {
            stop.shutdown();
            None
        }
        Running::Command(child) => {
            if let Ok(Some(_)) = child.try_wait() {
                return None;
            }
            // SIGTERM lets Kamailio stop its workers; kill after 3 s.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// The UAS of one point (its counters are the point's): its address, the flag that stops
/// it, and its thread. It stops by itself 120 s after `duration` in any case.
pub(crate) fn start_uas(duration: f64) -> Result<(SocketAddr, Arc<AtomicBool>, UasThread), String> {
    let uas_socket =
        shell::bind_udp(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    let uas_addr = uas_socket.local_addr().map_err(|e| e.to_string())?;
    let uas_flag = Arc::new(AtomicBool::new(false));
    let uas_stop = Stop {
        after: Some(Duration::from_secs_f64(duration + 120.0)),
        flag: Some(uas_flag.clone()),
    };
    let uas =
        std::thread::spawn(move || shell::run_uas(uas_socket, UasConfig::new(uas_addr), &uas_stop));
    Ok((uas_addr, uas_flag, uas))
}

pub(crate) type UasThread =
    std::thread::JoinHandle<std::io::Result<shell::Run<sluice_load::UasCounts>>>;

fn run_point(
    name: &str,
    v: &Variant,
    x: f64,
    timing: Timing,
    caller: Caller,
    sipp_scenario: &Path,
) -> Result<Vec<PointResult>, String> {
    let Timing { duration, hold, .. } = timing;
    let capacity = v.capacity();
    if !capacity.is_finite() {
        return Err(format!("{}: no emulated capacity", v.label));
    }
    let rate = x * capacity;
    let (uas_addr, uas_flag, uas) = start_uas(duration)?;
    // Calls still in progress after the arrivals get this long; the window is over by then.
    let drain = 2.0;
    let budget = duration + drain + 30.0;
    let started = match &v.target {
        Target::Sluice(c) => start_sluice((**c).clone(), uas_addr, budget),
        Target::Command { template, .. } => start_command(template, uas_addr, budget),
    };
    let (proxy_addr, mut running) = match started {
        Ok(s) => s,
        Err(e) => {
            uas_flag.store(true, Ordering::Relaxed);
            let _ = uas.join();
            return Err(e);
        }
    };
    let cpu0 = match &running {
        Running::Command(c) => crate::load::process_tree_cpu(c.id()),
        Running::Sluice { .. } => None,
    };
    let wall0 = Instant::now();
    let sipp = |rate: f64| {
        SippUac {
            scenario: sipp_scenario,
            target: proxy_addr,
            rate,
            duration,
            hold,
            budget,
        }
        .run()
    };
    let runs: Vec<(Caller, Result<CallerRun, String>)> = match caller {
        Caller::Sipp => vec![(Caller::Sipp, sipp(rate))],
        Caller::Split => std::thread::scope(|s| {
            let theirs = s.spawn(|| sipp(rate / 2.0));
            let ours = sluice_uac(proxy_addr, rate / 2.0, timing, drain, x);
            let theirs = theirs
                .join()
                .unwrap_or_else(|_| Err("sipp thread panicked".into()));
            vec![(Caller::Sluice, ours), (Caller::Sipp, theirs)]
        }),
        Caller::Sluice | Caller::Both => vec![(
            Caller::Sluice,
            sluice_uac(proxy_addr, rate, timing, drain, x),
        )],
    };
    let cpu = match &running {
        Running::Command(c) => crate::load::process_tree_cpu(c.id())
            .zip(cpu0)
            .map(|(b, a)| b - a),
        Running::Sluice { .. } => None,
    };
    let wall = wall0.elapsed().as_secs_f64();
    stop(&mut running);
    let (report, proxy_cpu) = match running {
        Running::Sluice { thread, .. } => match thread.join().ok().and_then(Result::ok) {
            Some((r, c)) => (Some(r), c),
            None => (None, None),
        },
        Running::Command(_) => (None, None),
    };
    uas_flag.store(true, Ordering::Relaxed);
    let uas = uas
        .join()
        .map_err(|_| "uas thread panicked".to_owned())?
        .map_err(|e| format!("uas: {e}"))?;
    let occupancy = match &report {
        Some(r) => Some(r.stats.busy_virtual.as_secs_f64() / r.elapsed.as_secs_f64().max(1e-9)),
        None => cpu.map(|c| c / wall.max(1e-9)),
    };
    let share = 1.0 / runs.len() as f64;
    let mut points = Vec::new();
    for (i, (who, uac)) in runs.into_iter().enumerate() {
        let shared = Shared {
            share,
            uas: &uas.summary,
            report: report.as_ref(),
            occupancy,
            owns_proxy_counters: i == 0,
            proxy_cpu,
        };
        points.push(point_result(name, v, x, timing, who, uac?, &shared));
    }
    Ok(points)
}

/// What the callers of one point share: the proxy and the UAS. With two callers each gets
/// `share` of the offered load; the UAS's messages are split in that proportion.
struct Shared<'a> {
    share: f64,
    uas: &'a sluice_load::UasCounts,
    /// Whether this caller's point carries the proxy's counters (forwarded and rejected
    /// calls, CPU time): one caller per point does, so a fit over the points counts them once.
    owns_proxy_counters: bool,
    report: Option<&'a ProxyReport>,
    occupancy: Option<f64>,
    proxy_cpu: Option<f64>,
}

/// One caller's result at a point: its rows over the window, normalised by its share of
/// the capacity.
fn point_result(
    name: &str,
    v: &Variant,
    x: f64,
    timing: Timing,
    caller: Caller,
    uac: CallerRun,
    shared: &Shared<'_>,
) -> PointResult {
    let Timing {
        duration, warmup, ..
    } = timing;
    let capacity = v.capacity() * shared.share;
    let uas = shared.uas;
    let rows = uac.rows;
    // The window: rows (seconds) after the warm-up, up to the end of arrivals.
    let first = warmup.ceil() as u64 + 1;
    let last = duration.floor() as u64;
    let window: Vec<&SecondRow> = rows
        .iter()
        .filter(|r| r.second >= first && r.second <= last)
        .collect();
    let secs = window.len().max(1) as f64;
    let offered: u64 = window.iter().map(|r| r.counts.offered).sum();
    let good: u64 = window.iter().map(|r| r.counts.successful).sum();
    let good_with_180: u64 = window.iter().map(|r| r.counts.successful_with_180).sum();
    let rejected: u64 = window.iter().map(|r| r.counts.failed.rejected_503).sum();
    let retrans: u64 = window
        .iter()
        .map(|r| r.counts.retransmissions_sent.total())
        .sum();
    // Messages that reached the proxy: what the UAC and the UAS sent. The UAS's own
    // retransmissions are counted over the whole point (its counters are not per second).
    let point_fraction = secs / uac.duration_s.max(1e-9);
    let uas_sent = uas.messages_sent as f64 * shared.share;
    let sent_window = (uac.messages_sent as f64 + uas_sent) * point_fraction;
    let uas_retrans = uas.retransmissions_sent as f64 * shared.share * point_fraction;
    let retrans_ratio = if sent_window > 0.0 {
        (retrans as f64 + uas_retrans) / sent_window
    } else {
        0.0
    };
    let report = shared.report;
    let proxy_report = report.filter(|_| shared.owns_proxy_counters);
    PointResult {
        experiment: name.to_owned(),
        variant: match caller {
            Caller::Sipp => format!("{} (SIPp)", v.label),
            _ => v.label.clone(),
        },
        caller: match caller {
            Caller::Sipp => "sipp",
            _ => "sluice",
        },
        window: first..=last,
        algorithm: v.algorithm(),
        x,
        offered_load_measured: offered as f64 / secs / capacity,
        capacity_cps: capacity,
        goodput: good as f64 / secs / capacity,
        goodput_cps: good as f64 / secs,
        goodput_with_180: (caller != Caller::Sipp).then(|| good_with_180 as f64 / secs / capacity),
        retrans_ratio,
        setup_delay_p50_ms: uac.setup_p50_ms,
        setup_delay_p99_ms: uac.setup_p99_ms,
        occupancy: shared.occupancy,
        reject_ratio: if offered > 0 {
            rejected as f64 / offered as f64
        } else {
            0.0
        },
        calls_offered: offered,
        calls_good: good,
        proxy_dropped: report.map(|r| r.stats.dropped_queue_full),
        uac_retransmissions_sent: uac.retransmissions_sent,
        uac_retransmissions_received: uac.retransmissions_received,
        uas_2xx_retransmissions: uas.retransmissions_sent,
        forwarded_calls: proxy_report.map(|_| uas.invites),
        rejected_calls: proxy_report.map(|r| r.stats.rejected_policy),
        proxy_cpu_s: proxy_report.and(shared.proxy_cpu),
        rows,
        per_source: Vec::new(),
    }
}

/// `sluice load uac` at `rate` through `target` for one point, as a [`CallerRun`].
fn sluice_uac(
    target: SocketAddr,
    rate: f64,
    timing: Timing,
    drain: f64,
    x: f64,
) -> Result<CallerRun, String> {
    let Timing {
        duration,
        warmup,
        hold,
    } = timing;
    let socket =
        shell::bind_udp(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let mut cfg = UacConfig::new(local, target, rate);
    cfg.duration = Some(Duration::from_secs_f64(duration));
    cfg.hold = Hold::Constant(Duration::from_secs_f64(hold.max(0.0)));
    cfg.drain_timeout = Duration::from_secs_f64(drain);
    cfg.delays_from = Duration::from_secs_f64(warmup);
    cfg.max_in_progress = 1_000_000;
    cfg.run_token = u64::from(std::process::id()) << 16 ^ (x * 1000.0) as u64;
    run_sluice_uac(socket, cfg)
}

/// Runs sluice's UAC on `socket` (bound to `cfg.local`) until it is done, as a [`CallerRun`].
pub(crate) fn run_sluice_uac(
    socket: std::net::UdpSocket,
    cfg: UacConfig,
) -> Result<CallerRun, String> {
    let mut rows = Vec::new();
    let run = shell::run_uac(socket, cfg, &Stop::default(), |r| rows.push(*r))
        .map_err(|e| format!("uac: {e}"))?;
    let s = &run.summary;
    Ok(CallerRun {
        rows,
        duration_s: s.duration_s,
        messages_sent: s.messages_sent,
        retransmissions_sent: s.retransmissions_sent,
        retransmissions_received: s.retransmissions_received,
        setup_p50_ms: s.setup.p50_ms,
        setup_p99_ms: s.setup.p99_ms,
    })
}

/// sluice's native `β`: the proxy thread's CPU time per forwarded and per rejected call by
/// least squares over the points (`cpu = a·forwarded + b·rejected`), `β = a/b`. `None` without
/// enough rejected calls to tell the two apart.
pub fn native_beta(points: &[PointResult]) -> Option<(f64, f64, f64)> {
    let (mut ff, mut fj, mut jj, mut fy, mut jy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let (Some(f), Some(j), Some(y)) = (p.forwarded_calls, p.rejected_calls, p.proxy_cpu_s)
        else {
            continue;
        };
        let (f, j) = (f as f64, j as f64);
        ff += f * f;
        fj += f * j;
        jj += j * j;
        fy += f * y;
        jy += j * y;
    }
    let det = ff * jj - fj * fj;
    if det <= 1e-9 * ff * jj || jj == 0.0 {
        return None;
    }
    let a = (fy * jj - jy * fj) / det;
    let b = (jy * ff - fy * fj) / det;
    (a > 0.0 && b > 0.0).then(|| (a * 1e6, b * 1e6, a / b))
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

pub(crate) fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// summary.csv (the columns of `sluice sim`, then live-only ones), points.jsonl,
/// series.csv (per point, source and second, the caller's row: `sluice` or `sipp`, or in a
/// topology each UAC's) and the goodput SVG.
pub fn write_outputs(
    out: &Path,
    name: &str,
    title: &str,
    points: &[PointResult],
    beta: Option<f64>,
) -> Result<(), String> {
    fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut csv = String::from(
        "experiment,variant,algorithm,seed,x,offered_load,goodput,goodput_cps,retrans_ratio,setup_delay_p50_ms,setup_delay_p99_ms,occupancy,reject_ratio,offered_load_measured,calls_offered,calls_good,re_queue_mean,re_dropped,capacity_cps,uac_retrans_sent,uas_2xx_retrans,goodput_with_180\n",
    );
    let o = |v: Option<f64>, prec: usize| v.map_or(String::new(), |v| format!("{v:.prec$}"));
    for p in points {
        let _ = writeln!(
            csv,
            "{},{},{},0,{},{:.3},{:.4},{:.3},{:.4},{},{},{},{:.4},{:.4},{},{},,{},{:.1},{},{},{}",
            csv_field(&p.experiment),
            csv_field(&p.variant),
            p.algorithm,
            p.x,
            p.x,
            p.goodput,
            p.goodput_cps,
            p.retrans_ratio,
            o(p.setup_delay_p50_ms, 2),
            o(p.setup_delay_p99_ms, 2),
            o(p.occupancy, 4),
            p.reject_ratio,
            p.offered_load_measured,
            p.calls_offered,
            p.calls_good,
            p.proxy_dropped.map_or(String::new(), |d| d.to_string()),
            p.capacity_cps,
            p.uac_retransmissions_sent,
            p.uas_2xx_retransmissions,
            o(p.goodput_with_180, 4),
        );
    }
    write(&out.join("summary.csv"), &csv)?;
    let mut jsonl = String::new();
    let mut series = format!("variant,x,source,{}\n", SecondRow::CSV_HEADER);
    for p in points {
        let _ = writeln!(
            jsonl,
            "{}",
            serde_json::to_string(p).map_err(|e| e.to_string())?
        );
        let whole = [(p.caller.to_owned(), p.rows.clone())];
        let sources = if p.per_source.is_empty() {
            &whole[..]
        } else {
            &p.per_source[..]
        };
        for (source, rows) in sources {
            for r in rows {
                let _ = writeln!(
                    series,
                    "{},{},{},{}",
                    csv_field(&p.variant),
                    p.x,
                    csv_field(source),
                    r.csv()
                );
            }
        }
    }
    write(&out.join("points.jsonl"), &jsonl)?;
    write(&out.join("series.csv"), &series)?;

    let mut labels: Vec<&str> = Vec::new();
    for p in points {
        if !labels.contains(&p.variant.as_str()) {
            labels.push(&p.variant);
        }
    }
    let curve = |f: &dyn Fn(&PointResult) -> f64| -> Vec<Series> {
        labels
            .iter()
            .map(|l| Series {
                label: (*l).to_owned(),
                points: points
                    .iter()
                    .filter(|p| p.variant == *l)
                    .map(|p| (p.x, f(p)))
                    .collect(),
            })
            .collect()
    };
    let x_max = points.iter().map(|p| p.x).fold(1.0_f64, f64::max);
    let ideal = beta.map(|b| Series {
        label: format!("g_opt(r), beta {b:.2}, C_T {TARGET_CPU}"),
        points: (0..=200)
            .map(|i| {
                let r = x_max * f64::from(i) / 200.0;
                (r, optimal_goodput(r, b, TARGET_CPU))
            })
            .collect(),
    });
    let stem = file_stem(name);
    plot::line_chart(
        &out.join(format!("{stem}.svg")),
        &Axes {
            title,
            x_label: "offered load (multiples of the proxy's capacity)",
            y_label: "goodput (normalised)",
            y_max: 1.1,
        },
        &curve(&|p| p.goodput),
        ideal.as_ref(),
    )?;
    plot::line_chart(
        &out.join(format!("{stem}-retrans.svg")),
        &Axes {
            title: &format!("{title}: retransmission ratio"),
            x_label: "offered load (multiples of the proxy's capacity)",
            y_label: "retransmissions / messages",
            y_max: 0.0,
        },
        &curve(&|p| p.retrans_ratio),
        None,
    )?;
    // Proxies at their native speed (--proxy-cmd) differ in capacity, so a normalised curve
    // hides what an operator sees: calls/s set up at the same offered calls/s.
    let native: Vec<Series> = labels
        .iter()
        .filter(|l| {
            points
                .iter()
                .any(|p| p.variant == **l && p.algorithm == "external")
        })
        .map(|l| Series {
            label: (*l).to_owned(),
            points: points
                .iter()
                .filter(|p| p.variant == *l)
                .map(|p| (p.x * p.capacity_cps, p.goodput_cps))
                .collect(),
        })
        .collect();
    if native.is_empty() {
        return Ok(());
    }
    plot::line_chart(
        &out.join(format!("{stem}-native.svg")),
        &Axes {
            title: &format!("{title}: proxies at native speed"),
            x_label: "offered load (calls/s)",
            y_label: "goodput (calls/s)",
            y_max: 0.0,
        },
        &native,
        None,
    )
}

/// A sweep to run: name, title, variants, loads and the `β` of the `g_opt` curve.
type Plan = (String, String, Vec<Variant>, Vec<f64>, f64);

/// The variants and loads of a simulator experiment, mapped onto the proxy.
fn from_experiment(path: &Path, args: &OverloadArgs) -> Result<Plan, String> {
    use sluice_sim::experiment::{Experiment, Overrides};
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let e = Experiment::from_toml(&text, &Overrides::default())?;
    let mut variants: Vec<Variant> = Vec::new();
    let mut loads: Vec<f64> = Vec::new();
    let mut beta = args.beta;
    for p in &e.points {
        if !loads.iter().any(|l| (l - p.offered_load).abs() < 1e-9) {
            loads.push(p.offered_load);
        }
        if variants.iter().any(|v| v.label == p.variant) {
            continue;
        }
        let algorithm = p.scenario.re.control.algorithm;
        if !algorithm.is_local() {
            println!(
                "{}: {algorithm} is not a local control; skipped (hop-by-hop is not in this bench)",
                p.variant
            );
            continue;
        }
        // The experiment's RE at --capacity: the same ratios (other/INVITE, β) and the
        // same seconds of work in its queues.
        let mut sc = p.scenario.clone();
        sc.scale_to_capacity(args.capacity);
        beta = sc.effective_beta();
        let c = sc.re;
        c.validate()
            .map_err(|err| format!("{}: {err}", p.variant))?;
        variants.push(Variant {
            label: p.variant.clone(),
            target: Target::Sluice(Box::new(c)),
        });
    }
    Ok((e.name.clone(), e.title.clone(), variants, loads, beta))
}

pub fn bench_overload(args: &OverloadArgs) -> Result<(), String> {
    if crate::hop_bench::is_topology(args)? {
        return crate::hop_bench::bench(args);
    }
    let (name, title, mut variants, loads, beta) = if let Some(path) = &args.experiment {
        from_experiment(path, args)?
    } else {
        let mut variants = Vec::new();
        for v in args.variants.iter().filter(|v| !v.is_empty()) {
            variants.push(sluice_variant(
                v,
                args.capacity,
                args.cost_other_us,
                args.beta,
            )?);
        }
        (
            "live-local".to_owned(),
            "Live local overload control, one proxy".to_owned(),
            variants,
            vec![0.5, 1.0, 2.0, 4.0],
            args.beta,
        )
    };
    let loads = args.loads.clone().unwrap_or(loads);
    if !args.proxy_cmd.is_empty() {
        let capacity = args.proxy_capacity.ok_or(
            "--proxy-cmd needs --proxy-capacity (calls/s; measure it with `sluice bench proxy`)",
        )?;
        for (i, template) in args.proxy_cmd.iter().enumerate() {
            variants.push(Variant {
                label: args
                    .proxy_label
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("proxy-cmd-{}", i + 1)),
                target: Target::Command {
                    template: template.clone(),
                    capacity,
                },
            });
        }
    }
    if variants.is_empty() {
        return Err("nothing to run: no --variants and no --proxy-cmd".into());
    }
    for v in &variants {
        if let Target::Sluice(c) = &v.target {
            println!(
                "{}: emulated capacity {:.0} calls/s (INVITE {} us, other {} us, 503 {} us), beta {:.2}",
                v.label,
                emulated_capacity(c),
                c.cost_forward_us,
                c.cost_other().as_micros(),
                c.cost_reject_us,
                c.emulated_beta(OTHERS_FORWARDED, OTHERS_REJECTED).unwrap_or(f64::NAN),
            );
        } else if let Target::Command { capacity, .. } = &v.target {
            println!(
                "{}: an external proxy at its native speed; loads are multiples of the {capacity:.0} calls/s given by --proxy-capacity",
                v.label
            );
        }
    }
    let warmup = args.warmup.unwrap_or(args.duration / 4.0);
    let started = Instant::now();
    let timing = Timing {
        duration: args.duration,
        warmup,
        hold: args.hold,
    };
    let callers = Callers {
        caller: args.generator,
        sipp_scenario: &args.sipp_scenario,
    };
    let points = sweep(&name, &variants, &loads, timing, callers)?;
    report_beta(&points, beta);
    if matches!(args.generator, Caller::Both | Caller::Split) {
        print_agreement(&points);
    }
    write_outputs(&args.out, &name, &title, &points, Some(beta))?;
    println!(
        "{} points in {:.0} s; {} written (summary.csv, points.jsonl, series.csv, {}.svg)",
        points.len(),
        started.elapsed().as_secs_f64(),
        args.out.display(),
        file_stem(&name)
    );
    Ok(())
}

/// sluice's UAC against SIPp at each point both ran: goodput and the UAC's retransmissions
/// per offered call, with the differences.
fn print_agreement(points: &[PointResult]) {
    println!(
        "\nsluice load against SIPp, same proxy and load (goodput normalised; retransmissions per offered call):"
    );
    println!(
        "{:<16} {:>5} {:>10} {:>10} {:>8} {:>9} {:>12} {:>12} {:>9}",
        "variant", "x", "goodput", "SIPp", "diff", "rel diff", "retrans/call", "SIPp", "rel diff"
    );
    let per_call = |p: &PointResult| {
        let retrans: u64 = p
            .rows
            .iter()
            .filter(|r| p.window.contains(&r.second))
            .map(|r| r.counts.retransmissions_sent.total())
            .sum();
        retrans as f64 / p.calls_offered.max(1) as f64
    };
    let rel = |a: f64, b: f64| {
        let scale = a.abs().max(b.abs());
        if scale > 0.0 {
            (a - b).abs() / scale
        } else {
            0.0
        }
    };
    for p in points.iter().filter(|p| p.caller == "sluice") {
        let Some(q) = points.iter().find(|q| {
            q.caller == "sipp"
                && (q.x - p.x).abs() < 1e-9
                && q.variant == format!("{} (SIPp)", p.variant)
        }) else {
            continue;
        };
        let (r1, r2) = (per_call(p), per_call(q));
        println!(
            "{:<16} {:>5} {:>10.3} {:>10.3} {:>8.3} {:>8.1}% {:>12.3} {:>12.3} {:>8.1}%",
            p.variant,
            p.x,
            p.goodput,
            q.goodput,
            p.goodput - q.goodput,
            rel(p.goodput, q.goodput) * 100.0,
            r1,
            r2,
            rel(r1, r2) * 100.0,
        );
    }
}

fn report_beta(points: &[PointResult], beta: f64) {
    match native_beta(points) {
        Some((a, b, native)) => println!(
            "beta: emulated {beta:.2}; sluice's native CPU per call (proxy thread CPU time, least squares over the points): forwarded {a:.1} us, rejected {b:.1} us, native beta {native:.2}"
        ),
        None => println!("beta: emulated {beta:.2} (too few rejected calls to measure the native one)"),
    }
}

// ---- sluice demo ----

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Seconds of arrivals per point (6 points: no control and PI at 1x, 2x, 4x).
    #[arg(long, default_value_t = 8.0)]
    pub duration: f64,
    /// Emulated capacity, calls/s.
    #[arg(long, default_value_t = 300.0)]
    pub capacity: f64,
    /// A forwarded call's emulated cost over a rejected one's: 8, a cheap rejection path
    /// (sluice's native ratio measured 3.4 to 6.5 here, see `bench overload --beta`). No
    /// local control can do better than `g_opt(r)`, 0 beyond `r_max = 0.9 β`: with β below
    /// 4.4 nothing local holds 4x.
    #[arg(long, default_value_t = 8.0)]
    pub beta: f64,
    /// Where the table's CSV and the SVG go.
    #[arg(long, default_value = "demo-out")]
    pub out: PathBuf,
}

/// `sluice demo`: the live local-control comparison in about a minute.
pub fn demo(args: &DemoArgs) -> Result<(), String> {
    let beta = args.beta;
    println!(
        "sluice demo: UAC -> sluice proxy (emulated capacity {:.0} calls/s) -> UAS on 127.0.0.1,\n\
         offered load 1x, 2x and 4x capacity, {} s each, without overload control and with the\n\
         dual-loop PI. A rejected call costs the proxy 1/{beta} of a forwarded one; no local\n\
         control can do better than g_opt(r) (De Cicco et al.), which is 0 beyond r = 0.9 beta.\n",
        args.capacity, args.duration
    );
    // No control is the proxy as configured by default: one FIFO for every message.
    let mut variants = vec![
        sluice_variant("none:fifo", args.capacity, 0, beta)?,
        sluice_variant("pi", args.capacity, 0, beta)?,
    ];
    variants[0].label = "no control".into();
    variants[1].label = "PI".into();
    let loads = [1.0, 2.0, 4.0];
    let warmup = (args.duration / 4.0).min(3.0);
    let timing = Timing {
        duration: args.duration,
        warmup,
        hold: 0.0,
    };
    let points = sweep("demo", &variants, &loads, timing, Callers::sluice())?;
    println!();
    println!(
        "{:<6} {:>11} {:>12} {:>12} {:>16} {:>14}",
        "load", "control", "goodput/s", "of capacity", "retransmissions", "setup p99 ms"
    );
    for x in loads {
        for p in points.iter().filter(|p| (p.x - x).abs() < 1e-9) {
            println!(
                "{:<6} {:>11} {:>12.0} {:>11.0}% {:>16} {:>14}",
                format!("{x}x"),
                p.variant,
                p.goodput_cps,
                p.goodput * 100.0,
                p.uac_retransmissions_sent + p.uas_2xx_retransmissions,
                ms(p.setup_delay_p99_ms),
            );
        }
    }
    write_outputs(
        &args.out,
        "demo",
        "sluice demo: goodput without control and with PI",
        &points,
        Some(beta),
    )?;
    println!(
        "\nWithout control the proxy's queue fills with work callers have already given up on\n\
         (their retransmissions add to it) and goodput collapses; PI rejects the excess cheaply\n\
         and keeps goodput near the optimum g_opt(r). Plot: {}",
        args.out.join("demo.svg").display()
    );
    Ok(())
}
