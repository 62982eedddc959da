//! `sluice bench overload` and `sluice demo`: the local-control experiments of the papers
//! on real sockets. A sluice UAS, the proxy under test (sluice with emulated capacity and
//! one local control per variant, or any command such as Kamailio with its ratelimit
//! module) and a sluice UAC run on loopback; the offered load sweeps multiples of the
//! proxy's capacity, one fixed-length run per point, and the results go into the same
//! `summary.csv` columns as `sluice sim` and an SVG of goodput against `g_opt(r)`.
//!
//! ```text
//! sluice bench overload [--loads 0.5,1,2,4] [--duration 20s] [--variants none:fifo,pi,...]
//!     [--capacity 300] [--beta 6] [--cost-other 0s] [--experiment experiments/decicco-fig11-12.toml]
//!     [--proxy-capacity 2000 --proxy-label kamailio-red --proxy-cmd "kamailio -f tests/kamailio/ratelimit.cfg \
//!        -DD -E -m 1024 -n 1 -l udp:{listen} -A 'NEXT_HOP=\"sip:{next_hop}\"' -A 'RL_PIPE=\"0:RED:1500\"'"]
//! sluice demo [--duration 8s] [--beta 8]
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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_control::Algorithm;
use sluice_load::shell::{self, Stop};
use sluice_load::{Hold, SecondRow, UacConfig};
use sluice_proxy::{ProxyConfig, ProxyReport};
use sluice_report::html::Page;

use crate::config::{Caller, OverloadConfig};
use crate::console::{say, Console};
use crate::netns::{self, Lan};
use crate::output::{write_outputs, write_sweep_page, written_line};
use crate::point::{ms, native_beta, CallerRun, PointResult, Timing};
use crate::process::{
    process_tree_cpu, start_command, start_sluice, start_sluice_on, start_uas, start_uas_at,
    Running,
};
use crate::proxy_config::{emulated_capacity, set_costs, OTHERS_FORWARDED, OTHERS_REJECTED};
use crate::sipp::SippUac;

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

/// The calling side of the points of a sweep.
#[derive(Clone, Copy, Debug)]
pub struct Callers<'a> {
    pub caller: Caller,
    /// SIPp's scenario, for `Caller::Sipp` and `Caller::Both`.
    pub sipp_scenario: &'a Path,
    /// `--netns`: the callees, the proxy and the callers each in a host of this LAN (its
    /// hosts 0, 1 and 2); `None`: all on loopback.
    pub hosts: Option<&'a Lan>,
}

/// The LAN of `--netns` for one proxy: its hosts in the order [`Callers::hosts`] reads.
pub fn local_lan() -> Result<Lan, String> {
    Lan::create(&["callees", "proxy", "callers"])
}

impl Callers<'_> {
    /// sluice's UAC alone.
    pub fn sluice() -> Callers<'static> {
        Callers {
            caller: Caller::Sluice,
            sipp_scenario: Path::new(""),
            hosts: None,
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
    console: &dyn Console,
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
    say!(
        console,
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
    console.begin((variants.len() * loads.len() * callers.each().len()) as u64);
    for v in variants {
        for &x in loads {
            for &caller in callers.each() {
                for p in run_point(
                    name,
                    v,
                    x,
                    timing,
                    caller,
                    callers.sipp_scenario,
                    callers.hosts,
                )? {
                    crate::point::note_unanswered(&p, console);
                    say!(
                        console,
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
                console.advance();
            }
        }
    }
    console.finish();
    Ok(out)
}

fn run_point(
    name: &str,
    v: &Variant,
    x: f64,
    timing: Timing,
    caller: Caller,
    sipp_scenario: &Path,
    hosts: Option<&Lan>,
) -> Result<Vec<PointResult>, String> {
    let Timing { duration, hold, .. } = timing;
    let capacity = v.capacity();
    if !capacity.is_finite() {
        return Err(format!("{}: no emulated capacity", v.label));
    }
    let rate = x * capacity;
    let host = |i: usize| hosts.and_then(|lan| lan.host(i));
    let (uas_addr, uas_flag, uas) = match host(0) {
        Some((ns, ip)) => netns::within(Some(ns), || start_uas_at(ip, duration))?,
        None => start_uas(duration)?,
    };
    // Calls still in progress after the arrivals get this long; the window is over by then.
    let drain = 2.0;
    let budget = duration + drain + 30.0;
    let started = match &v.target {
        Target::Sluice(c) => match host(1) {
            Some((ns, ip)) => netns::within(Some(ns), || {
                start_sluice_on((**c).clone(), SocketAddr::new(ip, 5060), uas_addr, budget)
            }),
            None => start_sluice((**c).clone(), uas_addr, budget),
        },
        Target::Command { template, .. } => start_command(template, uas_addr, budget),
    };
    let (proxy_addr, running) = match started {
        Ok(s) => s,
        Err(e) => {
            uas_flag.store(true, Ordering::Relaxed);
            let _ = uas.join();
            return Err(e);
        }
    };
    let cpu0 = match &running {
        Running::Command(c) => process_tree_cpu(c.id()),
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
            let ours = sluice_uac(proxy_addr, None, rate / 2.0, timing, drain, x);
            let theirs = theirs
                .join()
                .unwrap_or_else(|_| Err("sipp thread panicked".into()));
            vec![(Caller::Sluice, ours), (Caller::Sipp, theirs)]
        }),
        Caller::Sluice | Caller::Both => vec![(
            Caller::Sluice,
            // The UAC runs on this thread: in the callers' namespace for the run.
            netns::within(host(2).map(|h| h.0), || {
                sluice_uac(proxy_addr, host(2).map(|h| h.1), rate, timing, drain, x)
            }),
        )],
    };
    let cpu = match &running {
        Running::Command(c) => process_tree_cpu(c.id()).zip(cpu0).map(|(b, a)| b - a),
        Running::Sluice { .. } => None,
    };
    let wall = wall0.elapsed().as_secs_f64();
    let (report, proxy_cpu) = match running.finish() {
        Some((r, c)) => (Some(r), c),
        None => (None, None),
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
        goodput_at_uas: None,
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
        admitted_unanswered: uac.admitted_unanswered,
        rows,
        per_source: Vec::new(),
    }
}

/// `sluice load uac` at `rate` through `target` for one point, as a [`CallerRun`].
fn sluice_uac(
    target: SocketAddr,
    local_ip: Option<std::net::IpAddr>,
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
    let local_ip = local_ip.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    let socket = shell::bind_udp(SocketAddr::new(local_ip, 0)).map_err(|e| e.to_string())?;
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
        admitted_unanswered: Some(s.admitted_unanswered),
    })
}

/// A sweep to run: name, title, variants, loads and the `β` of the `g_opt` curve.
type Plan = (String, String, Vec<Variant>, Vec<f64>, f64);

/// The variants and loads of a simulator experiment, mapped onto the proxy.
fn from_experiment(
    path: &Path,
    args: &OverloadConfig,
    console: &dyn Console,
) -> Result<Plan, String> {
    use sluice_sim::experiment::{Experiment, Overrides};
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
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
            say!(
                console,
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

/// `sluice bench overload` with one proxy under test.
pub fn bench(args: &OverloadConfig, console: &dyn Console) -> Result<(), String> {
    let (name, title, mut variants, loads, beta) = if let Some(path) = &args.experiment {
        from_experiment(path, args, console)?
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
    for v in &mut variants {
        if let Target::Sluice(c) = &mut v.target {
            c.workers = args.workers;
        }
    }
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
            say!(
                console,
                "{}: emulated capacity {:.0} calls/s (INVITE {} us, other {} us, 503 {} us), beta {:.2}",
                v.label,
                emulated_capacity(c),
                c.cost_forward_us,
                c.cost_other().as_micros(),
                c.cost_reject_us,
                c.emulated_beta(OTHERS_FORWARDED, OTHERS_REJECTED).unwrap_or(f64::NAN),
            );
        } else if let Target::Command { capacity, .. } = &v.target {
            say!(
                console,
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
    if args.netns && (args.generator != Caller::Sluice || !args.proxy_cmd.is_empty()) {
        return Err(
            "--netns runs sluice's UAC and proxies only (no --generator sipp, no --proxy-cmd)"
                .into(),
        );
    }
    let lan = args.netns.then(local_lan).transpose()?;
    if let Some(lan) = &lan {
        let ip = |i| lan.host(i).map_or(String::new(), |h| h.1.to_string());
        say!(
            console,
            "hosts, each in its network namespace on one bridge: callees {}, proxy {}, callers {}",
            ip(0),
            ip(1),
            ip(2)
        );
    }
    let callers = Callers {
        caller: args.generator,
        sipp_scenario: &args.sipp_scenario,
        hosts: lan.as_ref(),
    };
    let points = sweep(&name, &variants, &loads, timing, callers, console)?;
    report_beta(&points, beta, console);
    if matches!(args.generator, Caller::Both | Caller::Split) {
        print_agreement(&points, console);
    }
    let plots = write_outputs(&args.out, &name, &title, &points, Some(beta))?;
    let report = write_sweep_page(
        &args.out,
        Page {
            title,
            name: name.clone(),
            source: "live: sluice load -> the proxy under test -> sluice UAS on loopback".into(),
            expectation: G_OPT_EXPECTATION.into(),
            notes: vec![sweep_note(&loads, timing, beta)],
            plots,
            ..Page::default()
        },
    )?;
    console.line(&report);
    say!(
        console,
        "{}",
        written_line(points.len(), started.elapsed(), &args.out, &name)
    );
    Ok(())
}

/// What a live sweep of local controls should show, for its report.
const G_OPT_EXPECTATION: &str = "No local control keeps more goodput than g_opt(r) (De Cicco et al.; the dashed curve at the run's beta), which falls to 0 beyond r = 0.9 beta: the rejections alone then fill the proxy. A good control stays close to it; without control the queue fills with calls their callers have given up on, and goodput collapses.";

/// How a live sweep ran, for its report.
fn sweep_note(loads: &[f64], timing: Timing, beta: f64) -> String {
    let loads: Vec<String> = loads.iter().map(f64::to_string).collect();
    format!(
        "Offered load {} times the proxy's capacity, {} s of arrivals a point, the first {} s left out; emulated beta {beta:.2}.",
        loads.join(", "),
        timing.duration,
        timing.warmup
    )
}

/// sluice's UAC against SIPp at each point both ran: goodput and the UAC's retransmissions
/// per offered call, with the differences.
fn print_agreement(points: &[PointResult], console: &dyn Console) {
    say!(
        console,
        "\nsluice load against SIPp, same proxy and load (goodput normalised; retransmissions per offered call):"
    );
    say!(
        console,
        "{:<16} {:>5} {:>10} {:>10} {:>8} {:>9} {:>12} {:>12} {:>9}",
        "variant",
        "x",
        "goodput",
        "SIPp",
        "diff",
        "rel diff",
        "retrans/call",
        "SIPp",
        "rel diff"
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
        say!(
            console,
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

fn report_beta(points: &[PointResult], beta: f64, console: &dyn Console) {
    match native_beta(points) {
        Some((a, b, native)) => say!(
            console,
            "beta: emulated {beta:.2}; sluice's native CPU per call (proxy thread CPU time, least squares over the points): forwarded {a:.1} us, rejected {b:.1} us, native beta {native:.2}"
        ),
        None => say!(console, "beta: emulated {beta:.2} (too few rejected calls to measure the native one)"),
    }
}

// ---- sluice demo ----

/// `sluice demo`'s settings.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Demo {
    /// Seconds of arrivals per point.
    pub duration: f64,
    /// Emulated capacity, calls/s.
    pub capacity: f64,
    /// A forwarded call's emulated cost over a rejected one's.
    pub beta: f64,
    /// Where the table's CSV and the SVG go.
    pub out: PathBuf,
}

/// `sluice demo`: the live local-control comparison in about a minute.
pub fn demo(args: &Demo, console: &dyn Console) -> Result<(), String> {
    let beta = args.beta;
    say!(
        console,
        "sluice demo: UAC -> sluice proxy (emulated capacity {:.0} calls/s) -> UAS on 127.0.0.1,\n\
         offered load r = 1x, 2x and 4x capacity, {} s each, without overload control and with\n\
         De Cicco et al.'s dual-loop PI. Rejecting a call with 503 costs the proxy 1/beta of\n\
         forwarding it (beta = {beta}). A local control that keeps the processor busy a share\n\
         C_T = 0.9 of the time carries at most g_opt(r) = (C_T beta - r) / (beta - 1) of\n\
         capacity once r > C_T (De Cicco et al. eq. 2; 0 beyond r = C_T beta): the rest of the\n\
         time goes on rejecting. So the PI carries about 0.89 of capacity at 1x, by design: it\n\
         holds the processor at its target C_T and rejects the rest.\n",
        args.capacity,
        args.duration
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
    let points = sweep(
        "demo",
        &variants,
        &loads,
        timing,
        Callers::sluice(),
        console,
    )?;
    console.line("");
    say!(
        console,
        "{:<6} {:>11} {:>12} {:>12} {:>16} {:>14}",
        "load",
        "control",
        "goodput/s",
        "of capacity",
        "retransmissions",
        "setup p99 ms"
    );
    for x in loads {
        for p in points.iter().filter(|p| (p.x - x).abs() < 1e-9) {
            say!(
                console,
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
    let title = "sluice demo: goodput without control and with PI";
    let plots = write_outputs(&args.out, "demo", title, &points, Some(beta))?;
    let report = write_sweep_page(
        &args.out,
        Page {
            title: title.into(),
            name: "demo".into(),
            source: "live: sluice load -> sluice proxy -> sluice UAS on loopback".into(),
            expectation: G_OPT_EXPECTATION.into(),
            notes: vec![sweep_note(&loads, timing, beta)],
            plots,
            ..Page::default()
        },
    )?;
    console.line(&report);
    say!(
        console,
        "\nWithout control the proxy's queue fills with work callers have already given up on\n\
         (their retransmissions add to it) and goodput collapses; PI rejects the excess cheaply\n\
         and keeps goodput near the optimum g_opt(r). Plot: {}",
        args.out.join("demo.svg").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::Quiet;

    fn experiment(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../experiments/{name}.toml"))
    }

    #[test]
    fn an_experiments_variants_and_loads_become_proxies_at_the_given_capacity() {
        let args = OverloadConfig {
            capacity: 400.0,
            ..OverloadConfig::default()
        };
        let (name, _, variants, loads, beta) =
            from_experiment(&experiment("decicco-fig11-12"), &args, &Quiet).unwrap();
        assert_eq!(name, "decicco-fig11-12");
        let labels: Vec<&str> = variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "PI",
                "OCC 80%",
                "OCC 90%",
                "Ohta",
                "RED-like",
                "latency bucket",
                "no control"
            ]
        );
        assert_eq!(loads.len(), 12);
        assert!((loads[0] - 0.5).abs() < 1e-12 && (loads[11] - 3.0).abs() < 1e-12);
        // The experiment's beta (3.75) carries over; --capacity sets the scale.
        // (Costs are kept to the nanosecond: 5 ms / 3.75 is 1,333,333 ns.)
        assert!((beta - 3.75).abs() < 1e-5, "{beta}");
        for v in &variants {
            let Target::Sluice(c) = &v.target else {
                panic!("{}: not sluice", v.label);
            };
            assert!((emulated_capacity(c) - 400.0).abs() < 1.0, "{}", v.label);
            let b = c.emulated_beta(OTHERS_FORWARDED, OTHERS_REJECTED).unwrap();
            assert!((b - 3.75).abs() < 0.01, "{}: {b}", v.label);
            assert!(c.invite_queue, "{}: De Cicco's structure", v.label);
        }
        assert_eq!(variants[0].algorithm(), "pi");
    }

    #[test]
    fn a_variant_name_picks_policy_structure_and_costs() {
        let v = sluice_variant("ohta:fifo", 500.0, 100, 5.0).unwrap();
        let Target::Sluice(c) = &v.target else {
            panic!("not sluice")
        };
        assert!(!c.invite_queue);
        assert_eq!(c.control.algorithm, Algorithm::Ohta);
        // 2000 us a call: 600 for the six other messages, 1400 for the INVITE; 400 a
        // rejected call: 300 its 503, 100 the ACK for it.
        assert_eq!(
            (c.cost_forward_us, c.cost_other_us, c.cost_reject_us),
            (1400.0, Some(100.0), 300.0)
        );
        assert!(sluice_variant("nonsense", 500.0, 0, 5.0).is_err());
        assert!(
            sluice_variant("pi", 500.0, 400, 5.0).is_err(),
            "no time left for the INVITE"
        );
        assert!(
            sluice_variant("pi", 500.0, 0, 1.0).is_err(),
            "beta must exceed 1"
        );
    }
}
