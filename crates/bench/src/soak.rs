//! `sluice bench soak`: one control held at a fixed overload for a long time, measured
//! interval by interval, to show that neither its goodput drifts nor its proxies' memory
//! grows.
//!
//! ```text
//! sluice bench soak --control pi [--load 5] [--duration 30m] [--interval 60s] [--warmup 2m]
//!     [--capacity 300] [--beta 8] [--hold 0s] [--out out/soak/pi]
//! sluice bench soak --control win-cont [--ses 3] ...
//! ```
//!
//! A local control (`pi`, `occ`, ...; `POLICY:fifo` as in `bench overload`) runs in one
//! proxy built by [`crate::local::sluice_variant`]: UAC -> proxy -> UAS. A hop-by-hop
//! variant (`win-cont`, `rate-abs/rate`, ...) runs the topology of [`crate::topology`]:
//! one UAC per SE, UACs -> SEs -> RE -> UAS. Either way the offered load is `--load` times
//! the (RE's) emulated capacity, for `--duration` of arrivals. Every proxy is a child
//! process, `sluice proxy --config FILE` (the config beside the results, its output in
//! `proxy-NAME.log`), so that its resident memory is its own; the UACs and the UAS are
//! threads of this process. Everything is on 127.0.0.1 and stops by itself: the UACs after
//! their arrivals and a 2 s drain, the proxies after their own `duration_s` even if this
//! process dies.
//!
//! Every `--interval` one row: the calls the UACs offered and set up (ACK sent within
//! 10 s of the INVITE: goodput) and the 503s and timeouts they got in that interval, their
//! retransmissions, the 2xx the UAS had to retransmit, and per proxy `VmRSS` from
//! /proc/PID/status and the transactions it holds (its admin `/status`, on a loopback
//! port). Rows are read 1.5 s after their interval ends, when the UACs have closed its last
//! second.
//!
//! Verdict, over the intervals that start at or after `--warmup` (the first two minutes
//! by default: the controller settles and the transaction tables fill to their steady
//! level, BYE transactions lingering 32 s): goodput in every one within ±5 % of their mean,
//! and each proxy's resident memory, its maximum and minimum, within ±10 % of its mean. The
//! verdict is printed and written to `verdict.txt`; a failing verdict is not an error.
//!
//! Files: `soak.csv` (rewritten after every interval, so an interrupted run keeps what it
//! measured), `soak.svg` (goodput and resident memory per interval), `verdict.txt`.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_control::optimal::optimal_goodput;
use sluice_load::shell::{self, Stop};
use sluice_load::{Counts, Hold, Spacing, UacConfig, UasCounts};
use sluice_proxy::ProxyConfig;
use sluice_report::files::{create_dir, file_stem, replace, write, CsvTable};
use sluice_report::html::{write_page, ClaimRow, Page};
use sluice_report::plot::{stacked_charts, Axes, Panel, Series};
use sluice_sim::ArrivalProcess;

use crate::console::{say, Console};
use crate::local::{sluice_variant, Target};
use crate::process::{
    free_sip_port, fresh_run_token, load_average, resident_mib, start_sluice_process,
    start_uas_live, stop_child, LiveUas,
};
use crate::proxy_config::{emulated_capacity, TARGET_CPU};
use crate::topology::{is_hop_spec, proxy_configs, variant_from_spec, Wiring};

/// Goodput of every counted interval may differ from their mean by this fraction.
pub const GOODPUT_TOLERANCE: f64 = 0.05;
/// Each proxy's resident memory, its maximum and minimum over the counted intervals, may
/// differ from its mean by this fraction.
pub const RSS_TOLERANCE: f64 = 0.10;

/// Most intervals a run may have: the rows stay a few kilobytes.
const MAX_INTERVALS: u64 = 100_000;
/// Seconds the UACs wait for their calls in progress after their arrivals end.
const DRAIN_S: f64 = 2.0;
/// How long after an interval ends its row is read: the UACs close a second within about
/// 100 ms of its end, and the UAS's counters are refreshed every 200 ms.
const SETTLE: Duration = Duration::from_millis(1500);

/// `sluice bench soak`'s settings; the CLI's `--help` explains each.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SoakConfig {
    /// A local control (`pi`, `POLICY:fifo`) or a hop-by-hop variant (`win-cont`,
    /// `ALGORITHM/WIRE`).
    pub control: String,
    /// Offered load, a multiple of the (RE's) emulated capacity.
    pub load: f64,
    /// Minutes of arrivals: a whole number of intervals.
    pub minutes: f64,
    /// Seconds per row.
    pub interval_s: u64,
    /// Seconds at the start that the verdict leaves out.
    pub warmup_s: u64,
    /// Emulated capacity, calls/s (the single proxy's, or the RE's).
    pub capacity: f64,
    /// Local controls: a forwarded call's emulated cost over a rejected one's.
    pub beta: f64,
    /// Local controls: emulated cost of every message other than an INVITE, microseconds.
    pub cost_other_us: u64,
    /// Hop-by-hop: SEs (one UAC each) in front of the RE.
    pub ses: usize,
    /// Seconds between ACK and BYE.
    pub hold: f64,
    /// Where the files go (`None`: [`default_out`]).
    pub out: Option<PathBuf>,
    /// The `sluice` executable whose `proxy` subcommand runs the proxies (`None`: this
    /// process's own executable).
    pub proxy_exe: Option<PathBuf>,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            control: "pi".into(),
            load: 5.0,
            minutes: 30.0,
            interval_s: 60,
            warmup_s: 120,
            capacity: 300.0,
            beta: 8.0,
            cost_other_us: 0,
            ses: 3,
            hold: 0.0,
            out: None,
            proxy_exe: None,
        }
    }
}

/// What runs: the proxies' configs, named (not yet wired to their addresses for a local
/// control, whose port is picked at start), and how the UACs call.
enum Setup {
    Local(Box<ProxyConfig>),
    Hop(Box<crate::topology::HopVariant>),
}

struct Plan {
    setup: Setup,
    /// The single proxy's or the RE's emulated capacity, calls/s.
    capacity: f64,
    /// `g_opt(load)` for a local control, normalised.
    optimal: Option<f64>,
    intervals: u64,
    /// The first interval (0-based) the verdict counts.
    first_counted: u64,
    out: PathBuf,
}

/// Where a soak of `control` writes unless told: `out/soak/CONTROL`.
pub fn default_out(control: &str) -> PathBuf {
    Path::new("out/soak").join(file_stem(control.trim()))
}

fn plan(args: &SoakConfig) -> Result<Plan, String> {
    let SoakConfig {
        load,
        minutes,
        interval_s,
        warmup_s,
        capacity,
        hold,
        ses,
        ..
    } = *args;
    if !(load > 0.0 && load.is_finite()) {
        return Err(format!("--load must be a positive number, not {load}"));
    }
    if !(capacity > 0.0 && capacity.is_finite()) {
        return Err(format!(
            "--capacity must be a positive number, not {capacity}"
        ));
    }
    if !(0.0..=3600.0).contains(&hold) {
        return Err(format!("--hold must be 0 to 3600 s, not {hold}"));
    }
    let spec = args.control.trim();
    if spec.is_empty() || spec.contains(',') {
        return Err("--control takes one control, e.g. pi or win-cont".into());
    }
    let (setup, capacity, optimal) = if is_hop_spec(spec) {
        if !(1..=32).contains(&ses) {
            return Err(format!("--ses must be 1 to 32, not {ses}"));
        }
        let v = variant_from_spec(spec, capacity, None)?;
        let capacity = emulated_capacity(&v.scenario.re);
        (Setup::Hop(Box::new(v)), capacity, None)
    } else {
        let v = sluice_variant(spec, capacity, args.cost_other_us, args.beta)?;
        let Target::Sluice(c) = v.target else {
            return Err(format!("{spec}: not a sluice proxy"));
        };
        let capacity = emulated_capacity(&c);
        (
            Setup::Local(c),
            capacity,
            Some(optimal_goodput(load, args.beta, TARGET_CPU)),
        )
    };
    if !capacity.is_finite() {
        return Err(format!("{spec}: no emulated capacity"));
    }
    if interval_s == 0 {
        return Err("--interval must be at least 1s".into());
    }
    let total_s = minutes * 60.0;
    let intervals = (total_s / interval_s as f64).round();
    if !(minutes > 0.0 && total_s.is_finite())
        || intervals < 1.0
        || (intervals * interval_s as f64 - total_s).abs() > 1e-6
    {
        return Err(format!(
            "--duration {total_s} s must be a positive whole number of --interval {interval_s} s intervals"
        ));
    }
    let intervals = intervals as u64;
    if intervals > MAX_INTERVALS {
        return Err(format!(
            "{intervals} intervals: at most {MAX_INTERVALS} (a longer --interval)"
        ));
    }
    let first_counted = warmup_s.div_ceil(interval_s);
    if first_counted >= intervals {
        return Err(format!(
            "--warmup {warmup_s}s leaves no interval to judge in {total_s} s"
        ));
    }
    let out = args.out.clone().unwrap_or_else(|| default_out(spec));
    Ok(Plan {
        setup,
        capacity,
        optimal,
        intervals,
        first_counted,
        out,
    })
}

/// One interval's row.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// 1-based.
    pub interval: u64,
    pub end_s: u64,
    /// Counted by the verdict (after the warm-up).
    pub counted: bool,
    /// The UACs' counters over the interval.
    pub calls: Counts,
    /// 2xx the UAS retransmitted in the interval.
    pub uas_2xx_retransmissions: u64,
    /// Per proxy, in the order of the run's proxy names: resident memory and transactions held at the
    /// interval's end (`None`: not readable).
    pub rss_mib: Vec<Option<f64>>,
    pub transactions: Vec<Option<u64>>,
}

impl Row {
    fn goodput_cps(&self, interval_s: u64) -> f64 {
        self.calls.successful as f64 / interval_s as f64
    }
}

/// The proxies of a run, child processes stopped when this is dropped.
struct Proxies {
    names: Vec<String>,
    children: Vec<std::process::Child>,
    admins: Vec<SocketAddr>,
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop_child(c);
        }
    }
}

impl Proxies {
    /// Starts `configs` in order (each next hop first), each as `name`, listening on
    /// `listen` and forwarding to `next_hop`, with its admin endpoint on a free port.
    fn start(
        exe: &Path,
        configs: Vec<(String, ProxyConfig, SocketAddr, SocketAddr)>,
        budget_s: f64,
        out: &Path,
    ) -> Result<Proxies, String> {
        let mut p = Proxies {
            names: Vec::new(),
            children: Vec::new(),
            admins: Vec::new(),
        };
        for (name, mut config, listen, next_hop) in configs {
            let admin = free_tcp_port()?;
            config.admin = Some(admin);
            let child = start_sluice_process(
                exe,
                config,
                listen,
                next_hop,
                budget_s,
                &out.join(format!("proxy-{name}.toml")),
                &out.join(format!("proxy-{name}.log")),
            )
            .map_err(|e| format!("{name}: {e}"))?;
            p.names.push(name);
            p.children.push(child);
            p.admins.push(admin);
        }
        Ok(p)
    }

    /// The first proxy that is no longer running, and how it ended.
    fn exited(&mut self) -> Option<String> {
        self.children
            .iter_mut()
            .zip(&self.names)
            .find_map(|(c, name)| match c.try_wait() {
                Ok(Some(status)) => Some(format!("proxy {name} exited ({status})")),
                _ => None,
            })
    }
}

/// A free TCP port on 127.0.0.1 (free when asked).
fn free_tcp_port() -> Result<SocketAddr, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map_err(|e| e.to_string())
}

/// Transactions a proxy holds, from its admin `/status` (`None`: no answer within 2 s).
fn held_transactions(admin: SocketAddr) -> Option<u64> {
    let timeout = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&admin, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut buf = Vec::new();
    // The document is a few kilobytes; the bound only guards against a wrong peer.
    s.take(1 << 20).read_to_end(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    serde_json::from_str::<serde_json::Value>(body)
        .ok()?
        .get("transactions")?
        .as_u64()
}

/// `sluice bench soak`.
pub fn bench_soak(args: &SoakConfig, console: &dyn Console) -> Result<(), String> {
    let plan = plan(args)?;
    let exe = match &args.proxy_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| format!("this executable: {e}"))?,
    };
    create_dir(&plan.out)?;
    let total_s = plan.intervals * args.interval_s;
    let rate = args.load * plan.capacity;
    let topology = match &plan.setup {
        Setup::Local(_) => "UAC -> proxy -> UAS".to_owned(),
        Setup::Hop(v) => format!(
            "{} UACs -> {} SEs -> RE -> UAS, {}",
            args.ses, args.ses, v.label
        ),
    };
    say!(
        console,
        "soak: {} at {}x of {:.0} calls/s ({rate:.0} calls/s offered), {} intervals of {} s; {topology}",
        args.control,
        args.load,
        plan.capacity,
        plan.intervals,
        args.interval_s
    );
    if let Some(g) = plan.optimal {
        say!(
            console,
            "g_opt({}) = {g:.3} of capacity with beta {} (the most any local control keeps)",
            args.load,
            args.beta
        );
    }
    let uas = start_uas_live(total_s as f64 + DRAIN_S)?;
    let result = run(&plan, args, &exe, &uas, console);
    uas.flag.store(true, Ordering::Relaxed);
    let _ = uas.thread.join();
    let (names, rows) = result?;
    let verdict = Verdict::of(&rows, &names, args.interval_s);
    let text = verdict_text(&verdict, &plan, args);
    write(&plan.out.join("verdict.txt"), &text)?;
    plot(&plan.out.join("soak.svg"), &rows, &names, &verdict, args)?;
    write_page(
        &plan.out,
        &Page {
            title: format!("Soak: {} at {}x capacity", args.control, args.load),
            name: format!("soak-{}", args.control),
            source: format!("live: {topology} on loopback"),
            expectation: format!(
                "At a fixed overload the control holds goodput steady and its proxies' memory flat for the whole run: goodput per interval within ±{:.0} % of the counted intervals' mean, each proxy's resident memory within ±{:.0} % of its mean.",
                GOODPUT_TOLERANCE * 100.0,
                RSS_TOLERANCE * 100.0
            ),
            notes: text.lines().take(2).map(str::to_owned).collect(),
            plots: vec!["soak.svg".into()],
            claims: verdict_claims(&verdict),
            tables: vec![("Every interval".into(), "soak.csv".into())],
            files: vec![("verdict.txt".into(), "the verdict as printed".into())],
        },
    )?;
    console.line("");
    for line in text.lines() {
        console.line(line);
    }
    say!(
        console,
        "written: {} (report.html, soak.csv, soak.svg, verdict.txt, proxy-*.toml, proxy-*.log)",
        plan.out.display()
    );
    Ok(())
}

/// Starts the proxies and the UACs, reads a row every interval, and stops them.
fn run(
    plan: &Plan,
    args: &SoakConfig,
    exe: &Path,
    uas: &LiveUas,
    console: &dyn Console,
) -> Result<(Vec<String>, Vec<Row>), String> {
    let interval_s = args.interval_s;
    let total_s = (plan.intervals * interval_s) as f64;
    let budget = total_s + DRAIN_S + 30.0;
    let localhost = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let (configs, targets, spacing, wiring) = match &plan.setup {
        Setup::Local(c) => {
            let listen = localhost(free_sip_port()?);
            let configs = vec![("proxy".to_owned(), (**c).clone(), listen, uas.addr)];
            // As `bench overload`'s single proxy: calls evenly spaced, like SIPp's -r.
            (configs, vec![listen], Spacing::Constant, None)
        }
        Setup::Hop(v) => {
            let w = Wiring::new(v, args.ses, uas.addr, 0.0, budget, None)?;
            if w.relays.is_some() {
                w.stop();
                return Err(format!("{}: the soak runs without link relays", v.label));
            }
            let (re, ses) = proxy_configs(v, &w);
            let mut configs = vec![("re".to_owned(), re, w.re, w.uas_front)];
            for (i, se) in ses.into_iter().enumerate() {
                configs.push((format!("se{}", i + 1), se, w.ses[i], w.re_front));
            }
            let spacing = match v.scenario.call.arrivals {
                ArrivalProcess::Poisson => Spacing::Poisson,
                ArrivalProcess::Constant => Spacing::Constant,
            };
            (configs, w.ses_front.clone(), spacing, Some(w))
        }
    };
    let started = Proxies::start(exe, configs, budget, &plan.out);
    if let Some(w) = wiring {
        // No relays: the wiring holds nothing once the proxies have their ports.
        w.stop();
    }
    let mut proxies = started?;
    let names = proxies.names.clone();
    say!(
        console,
        "offered and goodput: calls/s; 503, timeout and retrans (the UACs'), 2xx rt (the UAS's): in the interval"
    );
    say!(
        console,
        "{:>4} {:>6} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7} {:>6}{}",
        "int",
        "end s",
        "offered",
        "goodput",
        "norm",
        "503",
        "timeout",
        "retrans",
        "2xx rt",
        names.iter().fold(String::new(), |mut h, n| {
            let _ = write!(h, " {:>10} {:>10}", format!("{n} MiB"), format!("{n} txns"));
            h
        })
    );

    let buckets: Mutex<Vec<Counts>> = Mutex::new(vec![Counts::default(); plan.intervals as usize]);
    let abort = Arc::new(AtomicBool::new(false));
    let rate = args.load * plan.capacity / targets.len() as f64;
    let token = fresh_run_token();
    let started = Instant::now();
    let mut rows: Vec<Row> = Vec::with_capacity(plan.intervals as usize);
    let mut failure: Option<String> = None;
    console.begin(plan.intervals);
    let uacs: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .enumerate()
            .map(|(i, &target)| {
                let (buckets, abort) = (&buckets, abort.clone());
                scope.spawn(move || {
                    let socket = shell::bind_udp(localhost(0)).map_err(|e| format!("uac: {e}"))?;
                    let local = socket.local_addr().map_err(|e| e.to_string())?;
                    let mut cfg = UacConfig::new(local, target, rate);
                    cfg.duration = Some(Duration::from_secs_f64(total_s));
                    cfg.hold = Hold::Constant(Duration::from_secs_f64(args.hold));
                    cfg.drain_timeout = Duration::from_secs_f64(DRAIN_S);
                    cfg.delays_from = Duration::from_secs(args.warmup_s);
                    cfg.max_in_progress = 200_000;
                    cfg.spacing = spacing;
                    cfg.seed = i as u64 + 1;
                    cfg.run_token = token.wrapping_add(i as u64);
                    let stop = Stop {
                        after: None,
                        flag: Some(abort),
                    };
                    shell::run_uac(socket, cfg, &stop, |r| {
                        // Row `second` covers [second - 1, second).
                        let k = (r.second.saturating_sub(1) / interval_s) as usize;
                        if let Some(b) = buckets.lock().ok().as_mut().and_then(|b| b.get_mut(k)) {
                            b.accumulate(&r.counts);
                        }
                    })
                    .map(|_| ())
                    .map_err(|e| format!("uac: {e}"))
                })
            })
            .collect();
        let mut uas_before = UasCounts::default();
        'intervals: for k in 0..plan.intervals {
            let due = started + Duration::from_secs((k + 1) * interval_s) + SETTLE;
            loop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                if let Some(e) = proxies.exited() {
                    failure = Some(e);
                    break 'intervals;
                }
                // A UAC ends by itself once its arrivals are over and its calls done.
                let arriving = now < started + Duration::from_secs_f64(total_s);
                if arriving
                    && handles
                        .iter()
                        .any(std::thread::ScopedJoinHandle::is_finished)
                {
                    failure = Some("a UAC stopped before its arrivals ended".into());
                    break 'intervals;
                }
                std::thread::sleep((due - now).min(Duration::from_millis(200)));
            }
            let row = read_row(
                k,
                interval_s,
                &buckets,
                uas,
                &mut uas_before,
                &proxies,
                plan,
            );
            let written = row.and_then(|row| {
                say!(console, "{}", table_line(&row, interval_s, plan.capacity));
                console.advance();
                rows.push(row);
                let csv = soak_csv(&names, &rows, interval_s, plan.capacity);
                replace(&plan.out.join("soak.csv"), csv.as_bytes())
            });
            if let Err(e) = written {
                failure = Some(e);
                break;
            }
        }
        if failure.is_some() {
            abort.store(true, Ordering::Relaxed);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("uac thread panicked".into()))
            })
            .collect()
    });
    console.finish();
    drop(proxies);
    if let Some(e) = failure {
        return Err(format!(
            "{e} after {} of {} intervals (see {})",
            rows.len(),
            plan.intervals,
            plan.out.display()
        ));
    }
    for r in uacs {
        r?;
    }
    if let Some(l) = load_average() {
        say!(console, "load average at the end: {l:.1}");
    }
    Ok((names, rows))
}

/// Interval `k`'s row (0-based), read now: the UACs' counters of that interval, what the
/// UAS retransmitted since `uas_before` (then moved on to now), and the proxies' memory and
/// transactions.
fn read_row(
    k: u64,
    interval_s: u64,
    buckets: &Mutex<Vec<Counts>>,
    uas: &LiveUas,
    uas_before: &mut UasCounts,
    proxies: &Proxies,
    plan: &Plan,
) -> Result<Row, String> {
    let calls = buckets
        .lock()
        .map_err(|_| "uac counters poisoned".to_owned())?
        .get(k as usize)
        .copied()
        .unwrap_or_default();
    let uas_now = *uas
        .counts
        .lock()
        .map_err(|_| "uas counters poisoned".to_owned())?;
    let retransmitted = |c: &UasCounts| c.retransmissions_sent_by_type.ok_invite;
    let row = Row {
        interval: k + 1,
        end_s: (k + 1) * interval_s,
        counted: k >= plan.first_counted,
        calls,
        uas_2xx_retransmissions: retransmitted(&uas_now).saturating_sub(retransmitted(uas_before)),
        rss_mib: proxies
            .children
            .iter()
            .map(|c| resident_mib(c.id()))
            .collect(),
        transactions: proxies
            .admins
            .iter()
            .map(|&a| held_transactions(a))
            .collect(),
    };
    *uas_before = uas_now;
    Ok(row)
}

/// soak.csv: a row per interval, then per proxy its resident memory and transactions.
fn soak_csv(names: &[String], rows: &[Row], interval_s: u64, capacity: f64) -> String {
    let mut csv = CsvTable::new(
        [
            "interval",
            "end_s",
            "minute",
            "counted",
            "offered_cps",
            "goodput_cps",
            "goodput_norm",
            "rejected_503",
            "timeouts",
            "uac_retransmissions",
            "uas_2xx_retransmissions",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(names.iter().map(|n| format!("rss_mib_{n}")))
        .chain(names.iter().map(|n| format!("transactions_{n}"))),
    );
    for r in rows {
        let c = &r.calls;
        csv.row(
            [
                r.interval.to_string(),
                r.end_s.to_string(),
                format!("{:.3}", r.end_s as f64 / 60.0),
                u8::from(r.counted).to_string(),
                format!("{:.2}", c.offered as f64 / interval_s as f64),
                format!("{:.2}", r.goodput_cps(interval_s)),
                format!("{:.4}", r.goodput_cps(interval_s) / capacity),
                c.failed.rejected_503.to_string(),
                c.failed.timeout.to_string(),
                c.retransmissions_sent.total().to_string(),
                r.uas_2xx_retransmissions.to_string(),
            ]
            .into_iter()
            .chain(
                r.rss_mib
                    .iter()
                    .map(|m| m.map_or(String::new(), |m| format!("{m:.2}"))),
            )
            .chain(
                r.transactions
                    .iter()
                    .map(|t| t.map_or(String::new(), |t| t.to_string())),
            ),
        );
    }
    csv.into_text()
}

fn table_line(r: &Row, interval_s: u64, capacity: f64) -> String {
    let c = &r.calls;
    let per_proxy =
        r.rss_mib
            .iter()
            .zip(&r.transactions)
            .fold(String::new(), |mut line, (m, t)| {
                let _ = write!(
                    line,
                    " {:>10} {:>10}",
                    m.map_or("-".into(), |m| format!("{m:.1}")),
                    t.map_or("-".into(), |t| t.to_string())
                );
                line
            });
    format!(
        "{:>4} {:>6} {:>8.1} {:>8.1} {:>6.3} {:>7} {:>7} {:>7} {:>6}{per_proxy}{}",
        r.interval,
        r.end_s,
        c.offered as f64 / interval_s as f64,
        r.goodput_cps(interval_s),
        r.goodput_cps(interval_s) / capacity,
        c.failed.rejected_503,
        c.failed.timeout,
        c.retransmissions_sent.total(),
        r.uas_2xx_retransmissions,
        if r.counted { "" } else { "  (warm-up)" }
    )
}

/// Mean, minimum and maximum of a quantity over the counted intervals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` without values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        Some(Spread {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// The larger of (max − mean)/mean and (mean − min)/mean; infinite for a mean of 0.
    pub fn deviation(&self) -> f64 {
        if self.mean > 0.0 {
            ((self.max - self.mean) / self.mean).max((self.mean - self.min) / self.mean)
        } else {
            f64::INFINITY
        }
    }

    pub fn within(&self, tolerance: f64) -> bool {
        self.deviation() <= tolerance
    }
}

/// The soak's two claims over the counted intervals.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The counted intervals, 1-based, first and last (`None`: none was measured).
    pub counted: Option<(u64, u64)>,
    /// Goodput, calls/s.
    pub goodput: Option<Spread>,
    /// Per proxy: its resident memory in MiB (`None`: missing in a counted interval), and
    /// its least-squares trend in MiB per minute.
    pub rss: Vec<(String, Option<Spread>, Option<f64>)>,
}

impl Verdict {
    pub fn of(rows: &[Row], names: &[String], interval_s: u64) -> Verdict {
        let counted: Vec<&Row> = rows.iter().filter(|r| r.counted).collect();
        let goodput: Vec<f64> = counted.iter().map(|r| r.goodput_cps(interval_s)).collect();
        let rss = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let points: Option<Vec<(f64, f64)>> = counted
                    .iter()
                    .map(|r| {
                        r.rss_mib
                            .get(i)
                            .copied()
                            .flatten()
                            .map(|m| (r.end_s as f64 / 60.0, m))
                    })
                    .collect();
                let values: Vec<f64> = points.iter().flatten().map(|p| p.1).collect();
                let spread = points.as_ref().and_then(|_| Spread::of(&values));
                (name.clone(), spread, points.and_then(|p| slope(&p)))
            })
            .collect();
        Verdict {
            counted: counted
                .first()
                .zip(counted.last())
                .map(|(a, b)| (a.interval, b.interval)),
            goodput: Spread::of(&goodput),
            rss,
        }
    }

    pub fn goodput_pass(&self) -> bool {
        self.goodput.is_some_and(|g| g.within(GOODPUT_TOLERANCE))
    }

    pub fn rss_pass(&self) -> bool {
        !self.rss.is_empty()
            && self
                .rss
                .iter()
                .all(|(_, s, _)| s.is_some_and(|s| s.within(RSS_TOLERANCE)))
    }

    pub fn pass(&self) -> bool {
        self.counted.is_some() && self.goodput_pass() && self.rss_pass()
    }
}

/// Least-squares slope of `points`; `None` for fewer than two distinct x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

fn pass_fail(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn verdict_text(v: &Verdict, plan: &Plan, args: &SoakConfig) -> String {
    let secs = args.interval_s;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "soak {}: {}x of {:.0} calls/s, {} intervals of {secs} s",
        args.control, args.load, plan.capacity, plan.intervals
    );
    match v.counted {
        Some((first, last)) => {
            let warm = match first - 1 {
                0 => "no warm-up".to_owned(),
                1 => "interval 1 is warm-up".to_owned(),
                n => format!("intervals 1 to {n} are warm-up"),
            };
            let _ = writeln!(
                t,
                "counted: intervals {first} to {last} ({} s to {} s); {warm} (--warmup {}s)",
                (first - 1) * secs,
                last * secs,
                args.warmup_s
            );
        }
        None => {
            let _ = writeln!(t, "counted: no interval was measured after the warm-up");
        }
    }
    let pct = |x: f64, mean: f64| 100.0 * (x - mean) / mean;
    match v.goodput {
        Some(g) => {
            let of_opt = plan
                .optimal
                .filter(|o| *o > 0.0)
                .map_or(String::new(), |o| {
                    format!(", {:.2} of g_opt", g.mean / plan.capacity / o)
                });
            let _ = writeln!(
                t,
                "goodput: mean {:.1} calls/s ({:.3} of capacity{of_opt}), min {:.1} ({:+.1} %), max {:.1} ({:+.1} %); within ±{:.0} %: {}",
                g.mean,
                g.mean / plan.capacity,
                g.min,
                pct(g.min, g.mean),
                g.max,
                pct(g.max, g.mean),
                GOODPUT_TOLERANCE * 100.0,
                pass_fail(v.goodput_pass())
            );
        }
        None => {
            let _ = writeln!(t, "goodput: not measured: FAIL");
        }
    }
    for (name, s, trend) in &v.rss {
        match s {
            Some(s) => {
                let _ = writeln!(
                    t,
                    "resident memory {name}: mean {:.1} MiB, min {:.1} ({:+.1} %), max {:.1} ({:+.1} %), trend {} MiB/min; within ±{:.0} %: {}",
                    s.mean,
                    s.min,
                    pct(s.min, s.mean),
                    s.max,
                    pct(s.max, s.mean),
                    trend.map_or("-".into(), |t| format!("{t:+.3}")),
                    RSS_TOLERANCE * 100.0,
                    pass_fail(s.within(RSS_TOLERANCE))
                );
            }
            None => {
                let _ = writeln!(
                    t,
                    "resident memory {name}: not read in every counted interval: FAIL"
                );
            }
        }
    }
    let _ = writeln!(t, "verdict: {}", pass_fail(v.pass()));
    t
}

/// The verdict's claims as the report shows them.
fn verdict_claims(v: &Verdict) -> Vec<ClaimRow> {
    let pct = |x: f64, mean: f64| 100.0 * (x - mean) / mean;
    let spread = |s: Option<Spread>, unit: &str| {
        s.map_or("not measured in every counted interval".to_owned(), |s| {
            format!(
                "mean {:.1} {unit}, min {:+.1} %, max {:+.1} %",
                s.mean,
                pct(s.min, s.mean),
                pct(s.max, s.mean)
            )
        })
    };
    let mut claims = vec![ClaimRow {
        claim: "goodput steady over the counted intervals".into(),
        subject: "goodput".into(),
        required: format!("within ±{:.0} % of the mean", GOODPUT_TOLERANCE * 100.0),
        measured: spread(v.goodput, "calls/s"),
        pass: v.counted.is_some() && v.goodput_pass(),
    }];
    for (name, s, trend) in &v.rss {
        let trend = trend.map_or(String::new(), |t| format!(", trend {t:+.3} MiB/min"));
        claims.push(ClaimRow {
            claim: "resident memory flat over the counted intervals".into(),
            subject: name.clone(),
            required: format!("within ±{:.0} % of the mean", RSS_TOLERANCE * 100.0),
            measured: format!("{}{trend}", spread(*s, "MiB")),
            pass: v.counted.is_some() && s.is_some_and(|s| s.within(RSS_TOLERANCE)),
        });
    }
    claims
}

/// Goodput per interval above (with the counted intervals' mean dashed), each proxy's
/// resident memory below.
fn plot(
    path: &Path,
    rows: &[Row],
    names: &[String],
    v: &Verdict,
    args: &SoakConfig,
) -> Result<(), String> {
    let minute = |r: &Row| r.end_s as f64 / 60.0;
    let goodput = [Series {
        label: "goodput (calls/s)".into(),
        points: rows
            .iter()
            .map(|r| (minute(r), r.goodput_cps(args.interval_s)))
            .collect(),
    }];
    let mean = v.goodput.zip(v.counted).map(|(g, (a, b))| Series {
        label: format!(
            "mean after warm-up, ±{:.0} % allowed",
            GOODPUT_TOLERANCE * 100.0
        ),
        points: vec![
            ((a - 1) as f64 * args.interval_s as f64 / 60.0, g.mean),
            (b as f64 * args.interval_s as f64 / 60.0, g.mean),
        ],
    });
    let rss: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Series {
            label: n.clone(),
            points: rows
                .iter()
                .filter_map(|r| r.rss_mib.get(i).copied().flatten().map(|m| (minute(r), m)))
                .collect(),
        })
        .collect();
    let title = format!(
        "Soak: {} at {}x capacity, goodput per {} s",
        args.control, args.load, args.interval_s
    );
    stacked_charts(
        path,
        &[
            Panel {
                axes: Axes {
                    title: &title,
                    x_label: "minutes",
                    y_label: "calls/s",
                    y_max: 0.0,
                },
                series: &goodput,
                reference: mean.as_ref(),
            },
            Panel {
                axes: Axes {
                    title: "Resident memory per proxy (VmRSS)",
                    x_label: "minutes",
                    y_label: "MiB",
                    y_max: 0.0,
                },
                series: &rss,
                reference: None,
            },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(interval: u64, counted: bool, good: u64, rss: f64) -> Row {
        Row {
            interval,
            end_s: interval * 10,
            counted,
            calls: Counts {
                successful: good,
                ..Counts::default()
            },
            rss_mib: vec![Some(rss)],
            transactions: vec![None],
            ..Row::default()
        }
    }

    #[test]
    fn only_intervals_after_the_warm_up_count() {
        let names = ["proxy".to_owned()];
        // A warm-up far off both claims, then steady intervals.
        let rows = [
            row(1, false, 10, 5.0),
            row(2, true, 1000, 50.0),
            row(3, true, 1040, 54.0),
            row(4, true, 960, 46.0),
        ];
        let v = Verdict::of(&rows, &names, 10);
        assert_eq!(v.counted, Some((2, 4)));
        let g = v.goodput.unwrap();
        assert!((g.mean - 100.0).abs() < 1e-9 && (g.deviation() - 0.04).abs() < 1e-9);
        assert!(v.goodput_pass() && v.rss_pass() && v.pass());
        // Least squares over (1/3, 50), (1/2, 54), (2/3, 46) minutes and MiB.
        let trend = v.rss[0].2.unwrap();
        assert!((trend + 12.0).abs() < 1e-9, "{trend}");
    }

    #[test]
    fn a_drift_or_a_missing_reading_fails() {
        let names = ["re".to_owned()];
        let drift = [row(1, true, 1000, 50.0), row(2, true, 1120, 50.0)];
        let v = Verdict::of(&drift, &names, 10);
        assert!(!v.goodput_pass() && v.rss_pass() && !v.pass());
        let mut grows = [row(1, true, 1000, 40.0), row(2, true, 1000, 50.0)];
        assert!(!Verdict::of(&grows, &names, 10).rss_pass());
        grows[1].rss_mib = vec![None];
        let v = Verdict::of(&grows, &names, 10);
        assert!(v.rss[0].1.is_none() && !v.pass());
        let zero = [row(1, true, 0, 40.0), row(2, true, 0, 40.0)];
        assert!(!Verdict::of(&zero, &names, 10).goodput_pass());
        assert!(!Verdict::of(&[row(1, false, 10, 1.0)], &names, 10).pass());
    }

    #[test]
    fn bad_options_are_clear_errors() {
        let ok = SoakConfig::default();
        let p = plan(&ok).unwrap();
        assert_eq!((p.intervals, p.first_counted), (30, 2));
        assert!((p.capacity - 300.0).abs() < 0.5, "{}", p.capacity);
        let g = p.optimal.unwrap();
        assert!((g - optimal_goodput(5.0, 8.0, TARGET_CPU)).abs() < 1e-12);
        assert_eq!(p.out, Path::new("out/soak/pi"));
        let hop = plan(&SoakConfig {
            control: "win-cont".into(),
            ..SoakConfig::default()
        })
        .unwrap();
        assert!(matches!(hop.setup, Setup::Hop(_)) && hop.optimal.is_none());
        for (bad, says) in [
            (
                SoakConfig {
                    minutes: 1.0,
                    interval_s: 7,
                    ..SoakConfig::default()
                },
                "whole number",
            ),
            (
                SoakConfig {
                    minutes: 2.0,
                    ..SoakConfig::default()
                },
                "leaves no interval",
            ),
            (
                SoakConfig {
                    interval_s: 0,
                    ..SoakConfig::default()
                },
                "at least 1",
            ),
            (
                SoakConfig {
                    load: f64::NAN,
                    ..SoakConfig::default()
                },
                "--load",
            ),
            (
                SoakConfig {
                    control: "nonsense".into(),
                    ..SoakConfig::default()
                },
                "nonsense",
            ),
            (
                SoakConfig {
                    control: "pi,win-cont".into(),
                    ..SoakConfig::default()
                },
                "one control",
            ),
            (
                SoakConfig {
                    control: "win-cont".into(),
                    ses: 0,
                    ..SoakConfig::default()
                },
                "--ses",
            ),
        ] {
            let e = plan(&bad).err().unwrap_or_default();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
