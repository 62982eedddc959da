//! `sluice bench proxy`: a proxy's highest clean call rate on loopback. A UAS, the proxy
//! under test (sluice, Kamailio or any command) and a UAC; the rate rises step by step
//! until a step has a failed call or a retransmission. The generator at both ends is
//! sluice's (in this process) or SIPp's (started per step, `tests/sipp/uac.xml` and
//! `uas.xml`, which route ACK and BYE through the proxy). A proxy named with `/tcp`
//! (`sluice/tcp`, `kamailio/tcp`, `kamailio:2/tcp`) is run over TCP on both sides: the
//! generator's UAC connects to it (one connection, SIPp's `-t t1`) and it connects to the
//! UAS.

use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sluice_load::shell::{self, Run, Stop};
use sluice_load::{Schedule, UacConfig, UasConfig};
use sluice_report::files::CsvTable;
use sluice_report::html::{write_page, Page};

use crate::console::{note, say, Console};
use crate::netns::{Hosts, Testbed};
use crate::process::{
    fill_template, free_sip_port, fresh_run_token, kamailio_command, process_tree_cpu,
    sluice_proxy_command, spawn_command, stop_child, udp_receive_buffer_drops,
};
use crate::sipp::{last_stats, stat};

/// The load generator at both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    Sluice,
    Sipp,
}

/// `sluice bench proxy`'s settings; the CLI's `--help` explains each.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProxyBench {
    /// `sluice`, `sluice:N`, `kamailio`, `kamailio:N`, `none` or a command template; `/tcp`
    /// after a name runs it over TCP.
    pub proxies: Vec<String>,
    /// First rate, step and highest rate, calls/s.
    pub start: f64,
    pub step: f64,
    pub max: f64,
    /// Seconds of calls per step, and how long a step waits for them to finish.
    pub step_secs: f64,
    pub drain: f64,
    pub generator: Generator,
    /// Directory holding SIPp's uac.xml and uas.xml.
    pub sipp_scenarios: PathBuf,
    /// Kamailio config for the `kamailio` proxy.
    pub kamailio_cfg: PathBuf,
    /// Directory for bench_proxy.csv and bench_proxy.json.
    pub out: Option<PathBuf>,
    /// The proxy in a network namespace of its own, reached over a veth pair.
    pub netns: bool,
}

/// One rate step against one proxy.
#[derive(Debug, Clone, Serialize)]
pub struct BenchStep {
    pub proxy: String,
    pub rate: f64,
    pub offered: u64,
    pub successful: u64,
    pub failed: u64,
    pub unfinished: u64,
    pub refused: u64,
    /// By cause (sluice generator only).
    pub failures: Option<sluice_load::Failures>,
    pub retransmissions_sent: u64,
    pub retransmissions_received: u64,
    pub pdd_p50_ms: Option<f64>,
    pub pdd_p99_ms: Option<f64>,
    /// CPU the proxy (and its worker processes) used per wall second of the step, in cores.
    pub proxy_cpu: Option<f64>,
    /// The proxy's CPU time per offered call, microseconds: its cost, whatever else the
    /// machine runs.
    pub proxy_us_per_call: Option<f64>,
    /// CPU the generator's UAC thread used per wall second, in cores.
    pub uac_cpu: Option<f64>,
    /// Likewise for the UAS thread (sluice generator).
    pub uas_cpu: Option<f64>,
    /// Datagrams the kernel dropped at full UDP receive buffers during the step, in the
    /// proxy's network namespace (`--netns`; on loopback they count under the generator's).
    pub proxy_host_drops: Option<u64>,
    /// Likewise in the generator's namespace.
    pub generator_host_drops: Option<u64>,
    pub clean: bool,
    /// Why a step counts as failed when the counters do not say it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub proxy: String,
    pub command: String,
    /// Highest rate with no failed call and no retransmission (None: not even the first).
    pub max_clean_rate: Option<f64>,
    pub steps: Vec<BenchStep>,
}

/// A proxy name without its `/tcp`, and whether it had one.
fn transport_of(spec: &str) -> (&str, bool) {
    match spec.strip_suffix("/tcp") {
        Some(name) => (name, true),
        None => (spec, false),
    }
}

/// sluice's flags for a transaction table (and memory budget) that holds what `max_rate`
/// calls/s leave behind: about 37 transaction-seconds a call (a BYE's server transaction
/// lingers 32 s, `max_transactions`' documentation), for 40 s of calls, at about 1.5 KB
/// each. The bench measures the processor, not the default table, which is sized for
/// 9,700 calls/s.
fn table_for(max_rate: f64) -> String {
    let defaults = sluice_proxy::ProxyConfig::default();
    let transactions = ((max_rate * 37.0 * 1.25) as usize).max(defaults.max_transactions);
    let budget_mb = (transactions * 3 / 2 / 1024 * 2).max(defaults.memory_budget_mb);
    format!(" --max-transactions {transactions} --memory-budget-mb {budget_mb}")
}

fn proxy_command(
    spec: &str,
    args: &ProxyBench,
    listen: SocketAddr,
    next_hop: SocketAddr,
    duration: f64,
) -> Result<String, String> {
    let (name, tcp) = transport_of(spec);
    let command = if let Some(workers) = (name == "sluice")
        .then_some("1")
        .or_else(|| name.strip_prefix("sluice:"))
    {
        let workers: usize = workers
            .parse()
            .ok()
            .filter(|w| (1..=sluice_proxy::MAX_WORKERS).contains(w))
            .ok_or_else(|| format!("--proxy {spec}: expected sluice or sluice:N, N ≥ 1"))?;
        let command = sluice_proxy_command(workers)? + &table_for(args.max);
        if tcp {
            command + " --tcp-to-next-hops"
        } else {
            command
        }
    } else if let Some(workers) = (name == "kamailio")
        .then_some("1")
        .or_else(|| name.strip_prefix("kamailio:"))
    {
        let workers: u32 = workers
            .parse()
            .map_err(|_| format!("--proxy {spec}: expected kamailio or kamailio:N"))?;
        let command = kamailio_command(&args.kamailio_cfg, workers)?;
        if tcp {
            // TCP beside UDP (the probe comes over UDP), as many TCP workers as UDP ones,
            // and the UAS reached over TCP.
            command.replace(
                "-l udp:{listen} -A 'NEXT_HOP=\"sip:{next_hop}\"'",
                &format!(
                    "-A WITH_TCP -N {workers} -l udp:{{listen}} -l tcp:{{listen}} \
                     -A 'NEXT_HOP=\"sip:{{next_hop}};transport=tcp\"'"
                ),
            )
        } else {
            command
        }
    } else if tcp {
        return Err(format!(
            "--proxy {spec}: /tcp applies to sluice and kamailio; give a command template \
             its own TCP options"
        ));
    } else {
        spec.to_owned()
    };
    Ok(fill_template(&command, listen, next_hop, duration))
}

/// The UAS a bench runs against: sluice's in a thread of this process for the whole run, or
/// SIPp started per step (tests/sipp/uas.xml).
enum BenchUas {
    Sluice {
        stop: Arc<AtomicBool>,
        thread: UasThread,
        /// The UAS thread's /proc stat file, for its CPU time per step.
        stat: Option<String>,
    },
    Sipp,
}

type UasThread = std::thread::JoinHandle<std::io::Result<Run<sluice_load::UasCounts>>>;

/// sluice's UAS over TCP on a fresh loopback port, in a thread, until `flag` is set.
fn sluice_tcp_uas(
    flag: Arc<AtomicBool>,
) -> Result<(SocketAddr, UasThread, Option<String>), String> {
    let listener =
        shell::tcp::bind_tcp("127.0.0.1:0".parse().expect("literal")).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = Stop {
        after: None,
        flag: Some(flag),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(shell::thread_stat_path());
        shell::tcp::run_uas_tcp(
            listener,
            UasConfig::new(addr),
            shell::tcp::TcpConfig::default(),
            &stop,
        )
    });
    Ok((addr, thread, rx.recv().ok().flatten()))
}

/// Ramps the rate against one proxy (`spec` as in [`ProxyBench::proxies`]) until a step
/// fails; prints a row per step.
pub fn bench_one(
    spec: &str,
    args: &ProxyBench,
    hosts: &Hosts,
    console: &dyn Console,
) -> Result<BenchResult, String> {
    let tcp = transport_of(spec).1;
    let (uas, uas_addr) = match args.generator {
        Generator::Sluice if tcp => {
            let flag = Arc::new(AtomicBool::new(false));
            let (addr, thread, stat) = sluice_tcp_uas(flag.clone())?;
            (
                BenchUas::Sluice {
                    stop: flag,
                    thread,
                    stat,
                },
                addr,
            )
        }
        Generator::Sluice => {
            let socket =
                shell::bind_udp(SocketAddr::new(hosts.generator, 0)).map_err(|e| e.to_string())?;
            let addr = socket.local_addr().map_err(|e| e.to_string())?;
            let flag = Arc::new(AtomicBool::new(false));
            let stop = Stop {
                after: None,
                flag: Some(flag.clone()),
            };
            let (tx, rx) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let _ = tx.send(shell::thread_stat_path());
                shell::run_uas(socket, UasConfig::new(addr), &stop)
            });
            let stat = rx.recv().ok().flatten();
            (
                BenchUas::Sluice {
                    stop: flag,
                    thread,
                    stat,
                },
                addr,
            )
        }
        Generator::Sipp => (
            BenchUas::Sipp,
            SocketAddr::from(([127, 0, 0, 1], free_sip_port()?)),
        ),
    };
    // `none`: the UAC calls the UAS directly, which measures the generator itself.
    let direct = spec == "none";
    let listen = if direct {
        uas_addr
    } else {
        SocketAddr::new(hosts.proxy, free_sip_port()?)
    };
    let budget = max_steps(args) as f64 * (args.step_secs + args.drain + 4.0) + 30.0;
    let (command, mut child) = if direct {
        ("(no proxy)".to_owned(), None)
    } else {
        let filled = hosts.in_proxy_netns(&proxy_command(spec, args, listen, uas_addr, budget)?);
        let command = format!("exec {filled}");
        note!(console, "bench proxy {spec}: {command}");
        (command, Some(spawn_command(&filled)?))
    };
    let result = (|| {
        // SIPp's UAS starts per step: until then a sluice UAS answers the probe.
        let stand_in = match &uas {
            BenchUas::Sipp => {
                let socket = shell::bind_udp(uas_addr).map_err(|e| e.to_string())?;
                let flag = Arc::new(AtomicBool::new(false));
                let stop = Stop {
                    after: Some(Duration::from_secs(20)),
                    flag: Some(flag.clone()),
                };
                let t = std::thread::spawn(move || {
                    shell::run_uas(socket, UasConfig::new(uas_addr), &stop)
                });
                Some((flag, t))
            }
            BenchUas::Sluice { .. } => None,
        };
        let answered =
            direct || shell::probe_from(hosts.generator, listen, Duration::from_secs(10));
        if let Some((flag, t)) = stand_in {
            flag.store(true, Ordering::Relaxed);
            let _ = t.join();
        }
        if !answered {
            return Err(format!("{spec}: no answer on {listen} within 10 s"));
        }
        let mut steps = Vec::new();
        let mut rate = args.start;
        while rate <= args.max {
            let proxy_cpu = || child.as_ref().and_then(|c| process_tree_cpu(c.id()));
            let cpu0 = proxy_cpu();
            let uas_cpu = || match &uas {
                BenchUas::Sluice {
                    stat: Some(path), ..
                } => shell::cpu_seconds_in(path),
                _ => None,
            };
            let uas0 = uas_cpu();
            let proxy_drops = || {
                hosts
                    .proxy_netns
                    .as_ref()
                    .and(child.as_ref())
                    .and_then(|c| udp_receive_buffer_drops(Some(c.id())))
            };
            let drops0 = (proxy_drops(), udp_receive_buffer_drops(None));
            let started = std::time::Instant::now();
            let mut step = match args.generator {
                Generator::Sluice => sluice_step(spec, rate, args, hosts, listen, tcp)?,
                Generator::Sipp => sipp_step(spec, rate, args, listen, uas_addr, tcp)?,
            };
            let wall = started.elapsed().as_secs_f64();
            let used = proxy_cpu().zip(cpu0).map(|(b, a)| b - a);
            step.proxy_cpu = used.map(|c| c / wall);
            step.uas_cpu = uas_cpu().zip(uas0).map(|(b, a)| (b - a) / wall);
            step.proxy_host_drops = proxy_drops()
                .zip(drops0.0)
                .map(|(b, a)| b.saturating_sub(a));
            step.generator_host_drops = udp_receive_buffer_drops(None)
                .zip(drops0.1)
                .map(|(b, a)| b.saturating_sub(a));
            step.proxy_us_per_call = used
                .filter(|_| step.offered > 0)
                .map(|c| c * 1e6 / step.offered as f64);
            say!(console, "{}", step_row(&step));
            console.advance();
            let clean = step.clean;
            steps.push(step);
            if !clean {
                break;
            }
            rate += args.step;
            // Let the proxy's finished transactions expire between steps.
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(steps)
    })();
    if let Some(child) = child.as_mut() {
        stop_child(child);
    }
    if let BenchUas::Sluice { stop, thread, .. } = uas {
        stop.store(true, Ordering::Relaxed);
        let _ = thread.join();
    }
    let steps = result?;
    // The steps a failure cut short count as done.
    for _ in steps.len() as u64..max_steps(args) {
        console.advance();
    }
    let max_clean_rate = steps.iter().rev().find(|s| s.clean).map(|s| s.rate);
    Ok(BenchResult {
        proxy: spec.to_owned(),
        command,
        max_clean_rate,
        steps,
    })
}

fn sluice_step(
    spec: &str,
    rate: f64,
    args: &ProxyBench,
    hosts: &Hosts,
    target: SocketAddr,
    tcp: bool,
) -> Result<BenchStep, String> {
    let bind = SocketAddr::new(hosts.generator, 0);
    let mut cfg = UacConfig::new(bind, target, rate);
    cfg.schedule = Schedule::from_pairs(&[(0.0, rate)])?;
    cfg.duration = Some(Duration::from_secs_f64(args.step_secs));
    cfg.max_in_progress = 1_000_000;
    cfg.drain_timeout = Duration::from_secs_f64(args.drain);
    cfg.run_token = fresh_run_token();
    let run = if tcp {
        shell::tcp::run_uac_tcp(
            bind,
            cfg,
            shell::tcp::TcpConfig::default(),
            &Stop::default(),
            |_| {},
        )
    } else {
        let socket = shell::bind_udp(bind).map_err(|e| e.to_string())?;
        shell::run_uac(socket, cfg, &Stop::default(), |_| {})
    }
    .map_err(|e| format!("uac: {e}"))?;
    let s = &run.summary;
    Ok(BenchStep {
        proxy: spec.to_owned(),
        rate,
        offered: s.offered,
        successful: s.successful,
        failed: s.failed + s.failures.bye,
        unfinished: s.unfinished,
        refused: s.refused,
        failures: Some(s.failures),
        retransmissions_sent: s.retransmissions_sent,
        retransmissions_received: s.retransmissions_received,
        pdd_p50_ms: s.pdd_200.p50_ms,
        pdd_p99_ms: s.pdd_200.p99_ms,
        proxy_cpu: None,
        proxy_us_per_call: None,
        uac_cpu: run.cpu_s.map(|c| c / run.wall_s),
        uas_cpu: None,
        proxy_host_drops: None,
        generator_host_drops: None,
        clean: s.clean(),
        note: None,
    })
}

/// One step with SIPp at both ends (tests/sipp/uac.xml and uas.xml, which route ACK and BYE
/// through the proxy): a UAS for exactly this step's calls, then the UAC at `rate`.
fn sipp_step(
    spec: &str,
    rate: f64,
    args: &ProxyBench,
    proxy: SocketAddr,
    uas_addr: SocketAddr,
    tcp: bool,
) -> Result<BenchStep, String> {
    let calls = (rate * args.step_secs).round().max(1.0) as u64;
    let dir = std::env::temp_dir().join(format!("sluice-bench-sipp-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (uas_stat, uac_stat) = (dir.join("uas.csv"), dir.join("uac.csv"));
    let _ = fs::remove_file(&uas_stat);
    let _ = fs::remove_file(&uac_stat);
    let timeout = format!("{:.0}s", args.step_secs + args.drain + 2.0);
    let common = |cmd: &mut std::process::Command| {
        cmd.args(["-i", "127.0.0.1", "-buff_size", "1048576", "-nostdin"])
            .args(if tcp {
                // One connection for the step; SIPp's default socket limit exceeds most
                // hosts' open-files limit, which it refuses to start with.
                &["-t", "t1", "-max_socket", "4096"][..]
            } else {
                &[]
            })
            .args([
                "-timeout",
                &timeout,
                "-trace_stat",
                "-fd",
                "1",
                "-trace_err",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
    };
    let mut uas = std::process::Command::new("sipp");
    uas.arg("-sf")
        .arg(args.sipp_scenarios.join("uas.xml"))
        .args(["-p", &uas_addr.port().to_string(), "-m", &calls.to_string()])
        .arg("-stf")
        .arg(&uas_stat)
        .arg("-error_file")
        .arg(dir.join(format!("uas-{rate:.0}-errors.log")));
    common(&mut uas);
    let mut uas = uas.spawn().map_err(|e| format!("sipp (uas): {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let mut uac = std::process::Command::new("sipp");
    uac.arg(proxy.to_string())
        .arg("-sf")
        .arg(args.sipp_scenarios.join("uac.xml"))
        .args(["-p", &free_sip_port()?.to_string(), "-s", "service"])
        .args(["-r", &format!("{rate:.0}"), "-m", &calls.to_string()])
        .args(["-l", &(calls.max(1000)).to_string()])
        .arg("-stf")
        .arg(&uac_stat)
        .arg("-error_file")
        .arg(dir.join(format!("uac-{rate:.0}-errors.log")));
    common(&mut uac);
    let status = uac.status().map_err(|e| format!("sipp (uac): {e}"))?;
    // The UAS ends after its last call; give it the drain time, then stop it.
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(args.drain + 1.0);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = uas.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop_child(&mut uas);
    let c = last_stats(&uac_stat)?;
    let s = last_stats(&uas_stat).unwrap_or_default();
    let offered = stat(&c, "TotalCallCreated");
    let successful = stat(&c, "SuccessfulCall(C)");
    // A call either end of SIPp saw fail (e.g. an unexpected message at the UAS).
    let failed = stat(&c, "FailedCall(C)") + stat(&s, "FailedCall(C)");
    let retransmissions_sent = stat(&c, "Retransmissions(C)") + stat(&s, "Retransmissions(C)");
    let unfinished = offered.saturating_sub(successful + failed);
    Ok(BenchStep {
        proxy: format!("{spec} (sipp)"),
        rate,
        offered,
        successful,
        failed,
        unfinished,
        refused: calls.saturating_sub(offered),
        failures: None,
        retransmissions_sent,
        // SIPp counts what it resent; what it received again is not in its statistics.
        retransmissions_received: 0,
        pdd_p50_ms: None,
        pdd_p99_ms: None,
        proxy_cpu: None,
        proxy_us_per_call: None,
        uac_cpu: None,
        uas_cpu: None,
        proxy_host_drops: None,
        generator_host_drops: None,
        clean: status.success()
            && offered == calls
            && successful == calls
            && failed == 0
            && retransmissions_sent == 0,
        note: (!status.success() || failed > 0).then(|| {
            format!(
                "sipp uac: {status}; SIPp's errors in {}",
                dir.join(format!("ua*-{rate:.0}-errors.log")).display()
            )
        }),
    })
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// A step's row of the printed table.
pub fn step_row(s: &BenchStep) -> String {
    format!(
        "{:<14} {:>8.0} {:>8} {:>8} {:>6} {:>6} {:>7}/{:<7} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} {:>6}/{:<6} {} {}",
        s.proxy,
        s.rate,
        s.offered,
        s.successful,
        s.failed,
        s.unfinished,
        s.retransmissions_sent,
        s.retransmissions_received,
        opt_ms(s.pdd_p50_ms),
        opt_ms(s.pdd_p99_ms),
        s.proxy_cpu
            .map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
        s.proxy_us_per_call
            .map_or("-".into(), |c| format!("{c:.1}")),
        s.uac_cpu
            .map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
        s.uas_cpu
            .map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
        s.proxy_host_drops.map_or("-".into(), |d| d.to_string()),
        s.generator_host_drops
            .map_or("-".into(), |d| d.to_string()),
        if s.clean { "clean" } else { "FAILED" },
        s.note.as_deref().unwrap_or("")
    )
}

/// The header of the printed table of steps.
pub fn step_header() -> String {
    format!(
        "{:<14} {:>8} {:>8} {:>8} {:>6} {:>6} {:>15} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} {:>13} verdict",
        "proxy",
        "rate/s",
        "offered",
        "ok",
        "failed",
        "unfin",
        "retrans tx/rx",
        "pdd p50",
        "pdd p99",
        "proxy",
        "us/call",
        "uac",
        "uas",
        "drops px/gen"
    )
}

/// Rate steps of one proxy at most.
fn max_steps(args: &ProxyBench) -> u64 {
    ((args.max - args.start) / args.step).floor().max(0.0) as u64 + 1
}

pub fn bench_proxy(args: &ProxyBench, console: &dyn Console) -> Result<(), String> {
    if !(args.start > 0.0 && args.step > 0.0 && args.max >= args.start) {
        return Err("need 0 < --rate-start <= --rate-max and --rate-step > 0".into());
    }
    console.line(&step_header());
    if args.generator == Generator::Sipp {
        for file in ["uac.xml", "uas.xml"] {
            let path = args.sipp_scenarios.join(file);
            if !path.is_file() {
                return Err(format!(
                    "{}: no such file (run from the repository root or give --sipp-scenarios)",
                    path.display()
                ));
            }
        }
    }
    if args.netns
        && (args.generator != Generator::Sluice || args.proxies.iter().any(|p| transport_of(p).1))
    {
        return Err("--netns runs sluice's generator over UDP only".into());
    }
    // Held to the end: dropping it deletes the namespace.
    let testbed = args.netns.then(Testbed::create).transpose()?;
    let loopback = Hosts::loopback();
    let hosts = testbed.as_ref().map_or(&loopback, Testbed::hosts);
    if let Some(ns) = &hosts.proxy_netns {
        note!(
            console,
            "bench proxy: the proxy in namespace {ns} at {}, the generator at {} over a veth pair",
            hosts.proxy,
            hosts.generator
        );
    }
    let mut results = Vec::new();
    // At most: a proxy that stays clean runs every step.
    console.begin(max_steps(args) * args.proxies.len() as u64);
    for spec in &args.proxies {
        results.push(bench_one(spec, args, hosts, console)?);
    }
    console.finish();
    console.line("");
    for r in &results {
        match r.max_clean_rate {
            Some(rate) => say!(
                console,
                "{:<14} sustains {rate:.0} calls/s with no failed call and no retransmission",
                r.proxy
            ),
            None => say!(
                console,
                "{:<14} failed already at {:.0} calls/s",
                r.proxy,
                args.start
            ),
        }
    }
    if let (Some(first), true) = (results.first(), results.len() > 1) {
        for other in &results[1..] {
            if let (Some(a), Some(b)) = (first.max_clean_rate, other.max_clean_rate) {
                say!(console, "{} / {}: {:.2}x", first.proxy, other.proxy, a / b);
            }
        }
    }
    if let Some(dir) = &args.out {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        fs::write(dir.join("bench_proxy.json"), format!("{json}\n")).map_err(|e| e.to_string())?;
        let mut csv = CsvTable::new([
            "proxy",
            "rate",
            "offered",
            "successful",
            "failed",
            "unfinished",
            "refused",
            "retrans_sent",
            "retrans_received",
            "pdd_p50_ms",
            "pdd_p99_ms",
            "proxy_cpu",
            "proxy_us_per_call",
            "uac_cpu",
            "uas_cpu",
            "proxy_host_drops",
            "generator_host_drops",
            "clean",
        ]);
        let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
        for s in results.iter().flat_map(|r| &r.steps) {
            csv.row([
                s.proxy.clone(),
                s.rate.to_string(),
                s.offered.to_string(),
                s.successful.to_string(),
                s.failed.to_string(),
                s.unfinished.to_string(),
                s.refused.to_string(),
                s.retransmissions_sent.to_string(),
                s.retransmissions_received.to_string(),
                o(s.pdd_p50_ms),
                o(s.pdd_p99_ms),
                o(s.proxy_cpu),
                o(s.proxy_us_per_call),
                o(s.uac_cpu),
                o(s.uas_cpu),
                s.proxy_host_drops.map_or(String::new(), |d| d.to_string()),
                s.generator_host_drops
                    .map_or(String::new(), |d| d.to_string()),
                s.clean.to_string(),
            ]);
        }
        fs::write(dir.join("bench_proxy.csv"), csv.into_text()).map_err(|e| e.to_string())?;
        let notes = results
            .iter()
            .map(|r| match r.max_clean_rate {
                Some(rate) => format!(
                    "{} sustains {rate:.0} calls/s with no failed call and no retransmission.",
                    r.proxy
                ),
                None => format!("{} failed already at {:.0} calls/s.", r.proxy, args.start),
            })
            .collect();
        write_page(
            dir,
            &Page {
                title: "A proxy's highest clean call rate".into(),
                name: "bench-proxy".into(),
                source: "live: UAC -> the proxy -> UAS on loopback".into(),
                expectation: "The offered rate steps up until a step has a failed call or a retransmission; the last clean step is the proxy's highest clean call rate.".into(),
                notes,
                tables: vec![("Every rate step".into(), "bench_proxy.csv".into())],
                files: vec![("bench_proxy.json".into(), "every step in full".into())],
                ..Page::default()
            },
        )?;
    }
    Ok(())
}
