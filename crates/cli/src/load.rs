//! `sluice load uac` and `sluice load uas`: the load generator on real UDP sockets.

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use sluice_load::shell::{self, Run, Stop};
use sluice_load::{Hold, Schedule, SecondRow, Spacing, UacConfig, UacSummary, UasConfig};

#[derive(Subcommand, Debug)]
pub enum LoadCommand {
    /// Place calls (INVITE, ACK, hold, BYE) at a rate and measure goodput, failures,
    /// retransmissions and post-dial delay.
    Uac(UacArgs),
    /// Answer calls (100, 180, 200 retransmitted until the ACK; BYE → 200).
    Uas(UasArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArrivalsArg {
    Constant,
    Poisson,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HoldArg {
    Constant,
    Exponential,
}

#[derive(Args, Debug, Clone)]
pub struct UacArgs {
    /// Where the calls go: the proxy under test or a UAS (IPv4/IPv6 address and port).
    #[arg(long)]
    pub target: SocketAddr,
    /// Local address to send from (port 0: any).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind: SocketAddr,
    /// Calls per second (constant over the run).
    #[arg(long, conflicts_with = "schedule")]
    pub rate: Option<f64>,
    /// Rate steps as SECONDS:RATE,... (e.g. 0:100,10:300,20:100), or a TOML file with
    /// `schedule = [[0, 100], [10, 300]]`.
    #[arg(long)]
    pub schedule: Option<String>,
    #[arg(long, value_enum, default_value_t = ArrivalsArg::Constant)]
    pub arrivals: ArrivalsArg,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop starting calls after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Stop after starting this many calls.
    #[arg(long)]
    pub calls: Option<u64>,
    /// Seconds between ACK and BYE (the mean, with --hold-dist exponential).
    #[arg(long, default_value_t = 0.0)]
    pub hold: f64,
    #[arg(long, value_enum, default_value_t = HoldArg::Constant)]
    pub hold_dist: HoldArg,
    /// Most calls in progress at once (calls due beyond it are refused and counted).
    #[arg(long, default_value_t = 100_000)]
    pub max_in_progress: usize,
    /// Seconds to wait for calls in progress after the last one started.
    #[arg(long, default_value_t = 40.0)]
    pub drain_timeout: f64,
    /// Request-URI of the INVITEs (default: sip:service@TARGET).
    #[arg(long)]
    pub request_uri: Option<String>,
    /// Directory for per_second.csv and summary.json (default: CSV rows on standard error,
    /// the summary on standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Exit with status 1 unless every call succeeded with no retransmission.
    #[arg(long)]
    pub expect_clean: bool,
}

#[derive(Args, Debug, Clone)]
pub struct UasArgs {
    #[arg(long, default_value = "127.0.0.1:5060")]
    pub listen: SocketAddr,
    /// Seconds to run (required: every load run stops by itself).
    #[arg(long)]
    pub duration: f64,
    /// Milliseconds between the INVITE and the 200 OK.
    #[arg(long, default_value_t = 0.0)]
    pub answer_delay_ms: f64,
    /// Probability of answering an INVITE with 503 (for testing).
    #[arg(long, default_value_t = 0.0)]
    pub reject_503: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for summary.json (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(command: &LoadCommand) -> Result<(), String> {
    match command {
        LoadCommand::Uac(args) => {
            let report = run_uac(args)?;
            if args.expect_clean && !report.run.summary.clean() {
                return Err("the run was not clean (failed calls or retransmissions)".into());
            }
            Ok(())
        }
        LoadCommand::Uas(args) => run_uas(args),
    }
}

fn seconds(what: &str, s: f64) -> Result<Duration, String> {
    if s.is_finite() && (0.0..1e9).contains(&s) {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("{what} must be a number of seconds >= 0, not {s}"))
    }
}

fn schedule(args: &UacArgs) -> Result<Schedule, String> {
    match (&args.rate, &args.schedule) {
        (Some(rate), None) => Schedule::from_pairs(&[(0.0, *rate)]),
        (None, Some(spec)) if Path::new(spec).extension().is_some_and(|e| e == "toml") => {
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct File {
                schedule: Vec<(f64, f64)>,
            }
            let text = fs::read_to_string(spec).map_err(|e| format!("{spec}: {e}"))?;
            let file: File = toml::from_str(&text).map_err(|e| format!("{spec}: {e}"))?;
            Schedule::from_pairs(&file.schedule)
        }
        (None, Some(spec)) => Schedule::parse(spec),
        _ => Err("give --rate or --schedule".into()),
    }
}

pub fn uac_config(args: &UacArgs) -> Result<UacConfig, String> {
    if args.duration.is_none() && args.calls.is_none() {
        return Err("give --duration and/or --calls: every load run stops by itself".into());
    }
    if !args.target.ip().is_loopback() {
        return Err(format!(
            "{}: load traffic only goes to loopback addresses (127.0.0.0/8, ::1)",
            args.target
        ));
    }
    let mut cfg = UacConfig::new(args.bind, args.target, 0.0);
    cfg.schedule = schedule(args)?;
    cfg.spacing = match args.arrivals {
        ArrivalsArg::Constant => Spacing::Constant,
        ArrivalsArg::Poisson => Spacing::Poisson,
    };
    cfg.seed = args.seed;
    cfg.duration = args
        .duration
        .map(|d| seconds("--duration", d))
        .transpose()?;
    cfg.max_calls = args.calls;
    let hold = seconds("--hold", args.hold)?;
    cfg.hold = match args.hold_dist {
        HoldArg::Constant => Hold::Constant(hold),
        HoldArg::Exponential => Hold::Exponential(hold),
    };
    cfg.max_in_progress = args.max_in_progress.max(1);
    cfg.drain_timeout = seconds("--drain-timeout", args.drain_timeout)?;
    if let Some(uri) = &args.request_uri {
        cfg.request_uri.clone_from(uri);
    }
    // Distinct Call-IDs and branches per run, so a UAS or proxy that outlives one run does
    // not take the next run's calls for retransmissions.
    cfg.run_token = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_000_000);
    Ok(cfg)
}

/// A UAC run as written to summary.json.
#[derive(Debug, Serialize)]
pub struct UacReport {
    pub target: SocketAddr,
    pub schedule: Vec<(f64, f64)>,
    #[serde(flatten)]
    pub run: Run<UacSummary>,
    /// Successful calls per wall second over the run.
    pub goodput_per_s: f64,
}

pub fn run_uac(args: &UacArgs) -> Result<UacReport, String> {
    let cfg = uac_config(args)?;
    let schedule = cfg
        .schedule
        .steps
        .iter()
        .map(|s| (s.at.as_secs_f64(), s.rate))
        .collect();
    let socket = shell::bind_udp(args.bind).map_err(|e| format!("bind {}: {e}", args.bind))?;
    let mut csv: Box<dyn Write> = match &args.out {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = dir.join("per_second.csv");
            Box::new(fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        None => Box::new(std::io::stderr()),
    };
    let _ = writeln!(csv, "{}", SecondRow::CSV_HEADER);
    let run = shell::run_uac(socket, cfg, &Stop::default(), |row| {
        let _ = writeln!(csv, "{}", row.csv());
    })
    .map_err(|e| format!("uac: {e}"))?;
    let _ = csv.flush();
    let goodput_per_s = if run.summary.duration_s > 0.0 {
        run.summary.successful as f64 / run.summary.duration_s
    } else {
        0.0
    };
    let report = UacReport {
        target: args.target,
        schedule,
        run,
        goodput_per_s,
    };
    write_summary(args.out.as_deref(), &report)?;
    Ok(report)
}

fn write_summary(out: Option<&Path>, report: &impl Serialize) -> Result<(), String> {
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    if let Some(dir) = out {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("summary.json");
        fs::write(&path, format!("{json}\n")).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("{json}");
    Ok(())
}

fn run_uas(args: &UasArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.reject_503) {
        return Err("--reject-503 is a probability in [0, 1]".into());
    }
    let socket = shell::bind_udp(args.listen).map_err(|e| format!("bind {}: {e}", args.listen))?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    // Tests and scripts read the port from this line when they listen on port 0.
    eprintln!("listening on {local}");
    let mut cfg = UasConfig::new(local);
    cfg.answer_delay = seconds("--answer-delay-ms", args.answer_delay_ms / 1000.0)?;
    cfg.reject_probability = args.reject_503;
    cfg.seed = args.seed;
    let stop = Stop {
        after: Some(seconds("--duration", args.duration)?),
        flag: None,
    };
    let run = shell::run_uas(socket, cfg, &stop).map_err(|e| format!("uas: {e}"))?;
    write_summary(args.out.as_deref(), &run)
}

// ---- sluice bench proxy ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GeneratorArg {
    Sluice,
    Sipp,
}

#[derive(Args, Debug, Clone)]
pub struct ProxyBenchArgs {
    /// Proxy under test, repeatable to compare in one run: `sluice` (this binary's
    /// `sluice proxy`), `kamailio` or `kamailio:N` (tests/kamailio/proxy.cfg with N worker
    /// processes), or a command line with the placeholders {listen}, {next_hop},
    /// {listen_port}, {next_hop_port} and {duration} (run with `sh -c`); `none` calls the UAS
    /// directly (the generator's own maximum).
    #[arg(long = "proxy", default_value = "sluice")]
    pub proxies: Vec<String>,
    /// First call rate, calls/s.
    #[arg(long, default_value_t = 500.0)]
    pub start: f64,
    /// Rate increase per step, calls/s.
    #[arg(long, default_value_t = 500.0)]
    pub step: f64,
    /// Highest rate tried.
    #[arg(long, default_value_t = 30_000.0)]
    pub max: f64,
    /// Seconds of calls per step.
    #[arg(long, default_value_t = 4.0)]
    pub step_secs: f64,
    /// Seconds a step waits for its calls to finish; calls still running then count against
    /// the step.
    #[arg(long, default_value_t = 3.0)]
    pub drain: f64,
    /// Load generator at both ends: sluice (`load uac`/`load uas` in this process) or SIPp
    /// (the scenarios in --sipp-scenarios, a SIPp UAS and UAC per step).
    #[arg(long, value_enum, default_value_t = GeneratorArg::Sluice)]
    pub generator: GeneratorArg,
    /// Directory holding SIPp's uac.xml and uas.xml (calls through a record-routing proxy).
    #[arg(long, default_value = "tests/sipp")]
    pub sipp_scenarios: PathBuf,
    /// Kamailio config for the `kamailio` proxy.
    #[arg(long, default_value = "tests/kamailio/proxy.cfg")]
    pub kamailio_cfg: PathBuf,
    /// Directory for bench_proxy.csv and bench_proxy.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
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

fn free_udp_port() -> Result<u16, String> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.port())
}

/// sluice's own proxy as a bench command, with the placeholders `proxy_command` fills.
pub(crate) fn sluice_proxy_command() -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(format!(
        "'{}' proxy --listen {{listen}} --next-hop {{next_hop}} --duration {{duration}}",
        exe.display()
    ))
}

/// Kamailio with `cfg` and `workers` UDP workers as a bench command, with the placeholders
/// `proxy_command` fills.
pub(crate) fn kamailio_command(cfg: &Path, workers: u32) -> Result<String, String> {
    if !cfg.is_file() {
        return Err(format!(
            "{}: no such file (run from the repository root or give --kamailio-cfg)",
            cfg.display()
        ));
    }
    Ok(format!(
        "kamailio -f '{}' -DD -E -m 1024 -n {workers} -l udp:{{listen}} -A 'NEXT_HOP=\"sip:{{next_hop}}\"'",
        cfg.display()
    ))
}

fn proxy_command(
    spec: &str,
    args: &ProxyBenchArgs,
    listen: SocketAddr,
    next_hop: SocketAddr,
    duration: f64,
) -> Result<String, String> {
    let command = if spec == "sluice" {
        sluice_proxy_command()?
    } else if let Some(workers) = (spec == "kamailio")
        .then_some("1")
        .or_else(|| spec.strip_prefix("kamailio:"))
    {
        let workers: u32 = workers
            .parse()
            .map_err(|_| format!("--proxy {spec}: expected kamailio or kamailio:N"))?;
        kamailio_command(&args.kamailio_cfg, workers)?
    } else {
        spec.to_owned()
    };
    let template = format!("exec {command}");
    Ok(template
        .replace("{listen}", &listen.to_string())
        .replace("{next_hop}", &next_hop.to_string())
        .replace("{listen_port}", &listen.port().to_string())
        .replace("{next_hop_port}", &next_hop.port().to_string())
        .replace("{duration}", &format!("{duration:.0}")))
}

/// CPU seconds (user + system) of `pid` and its direct children (e.g. Kamailio's workers),
/// from /proc.
pub(crate) fn process_tree_cpu(pid: u32) -> Option<f64> {
    let fields = |stat: &str| -> Option<(u32, u64)> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ppid = f.get(1)?.parse().ok()?;
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some((ppid, ticks))
    };
    let (_, own) = fields(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let mut total = own;
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(name) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Ok(stat) = fs::read_to_string(format!("/proc/{name}/stat")) {
            if let Some((ppid, ticks)) = fields(&stat) {
                if ppid == pid {
                    total += ticks;
                }
            }
        }
    }
    Some(total as f64 / 100.0)
}

/// Asks a process this bench started to stop (SIGTERM lets Kamailio stop its workers),
/// then kills it if it is still there after 3 s.
fn stop_child(child: &mut std::process::Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The UAS a bench runs against: sluice's in a thread of this process for the whole run, or
/// SIPp started per step (tests/sipp/uas.xml).
enum BenchUas {
    Sluice {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: std::thread::JoinHandle<std::io::Result<Run<sluice_load::UasCounts>>>,
        /// The UAS thread's /proc stat file, for its CPU time per step.
        stat: Option<String>,
    },
    Sipp,
}

pub(crate) fn bench_one(spec: &str, args: &ProxyBenchArgs) -> Result<BenchResult, String> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let (uas, uas_addr) = match args.generator {
        GeneratorArg::Sluice => {
            let socket = shell::bind_udp("127.0.0.1:0".parse().expect("literal"))
                .map_err(|e| e.to_string())?;
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
        GeneratorArg::Sipp => (
            BenchUas::Sipp,
            SocketAddr::from(([127, 0, 0, 1], free_udp_port()?)),
        ),
    };
    // `none`: the UAC calls the UAS directly, which measures the generator itself.
    let direct = spec == "none";
    let listen = if direct {
        uas_addr
    } else {
        SocketAddr::from(([127, 0, 0, 1], free_udp_port()?))
    };
    let steps = ((args.max - args.start) / args.step).floor().max(0.0) + 1.0;
    let budget = steps * (args.step_secs + args.drain + 4.0) + 30.0;
    let (command, mut child) = if direct {
        ("(no proxy)".to_owned(), None)
    } else {
        let command = proxy_command(spec, args, listen, uas_addr, budget)?;
        eprintln!("bench proxy {spec}: {command}");
        let child = std::process::Command::new("sh")
            .args(["-c", &command])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{command}: {e}"))?;
        (command, Some(child))
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
        let answered = direct || shell::probe(listen, Duration::from_secs(10));
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
            let started = std::time::Instant::now();
            let mut step = match args.generator {
                GeneratorArg::Sluice => sluice_step(spec, rate, args, listen)?,
                GeneratorArg::Sipp => sipp_step(spec, rate, args, listen, uas_addr)?,
            };
            let wall = started.elapsed().as_secs_f64();
            let used = proxy_cpu().zip(cpu0).map(|(b, a)| b - a);
            step.proxy_cpu = used.map(|c| c / wall);
            step.uas_cpu = uas_cpu().zip(uas0).map(|(b, a)| (b - a) / wall);
            step.proxy_us_per_call = used
                .filter(|_| step.offered > 0)
                .map(|c| c * 1e6 / step.offered as f64);
            print_step(&step);
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
    args: &ProxyBenchArgs,
    target: SocketAddr,
) -> Result<BenchStep, String> {
    let uac_args = UacArgs {
        target,
        bind: "127.0.0.1:0".parse().expect("literal"),
        rate: Some(rate),
        schedule: None,
        arrivals: ArrivalsArg::Constant,
        seed: 1,
        duration: Some(args.step_secs),
        calls: None,
        hold: 0.0,
        hold_dist: HoldArg::Constant,
        max_in_progress: 1_000_000,
        drain_timeout: args.drain,
        request_uri: None,
        out: None,
        expect_clean: false,
    };
    let cfg = uac_config(&uac_args)?;
    let socket = shell::bind_udp(uac_args.bind).map_err(|e| e.to_string())?;
    let run =
        shell::run_uac(socket, cfg, &Stop::default(), |_| {}).map_err(|e| format!("uac: {e}"))?;
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
        clean: s.clean(),
        note: None,
    })
}

/// The last row of a SIPp `-trace_stat` file as name → value.
fn sipp_stats(path: &Path) -> Result<std::collections::HashMap<String, String>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| format!("{}: empty", path.display()))?;
    let last = lines
        .next_back()
        .ok_or_else(|| format!("{}: no rows", path.display()))?;
    Ok(header
        .split(';')
        .zip(last.split(';'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

fn stat(stats: &std::collections::HashMap<String, String>, key: &str) -> u64 {
    stats
        .get(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// One step with SIPp at both ends (tests/sipp/uac.xml and uas.xml, which route ACK and BYE
/// through the proxy): a UAS for exactly this step's calls, then the UAC at `rate`.
fn sipp_step(
    spec: &str,
    rate: f64,
    args: &ProxyBenchArgs,
    proxy: SocketAddr,
    uas_addr: SocketAddr,
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
        .args(["-p", &free_udp_port()?.to_string(), "-s", "service"])
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
    let c = sipp_stats(&uac_stat)?;
    let s = sipp_stats(&uas_stat).unwrap_or_default();
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

fn print_step(s: &BenchStep) {
    println!(
        "{:<14} {:>8.0} {:>8} {:>8} {:>6} {:>6} {:>7}/{:<7} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} {} {}",
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
        if s.clean { "clean" } else { "FAILED" },
        s.note.as_deref().unwrap_or("")
    );
}

pub(crate) fn print_step_header() {
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>6} {:>6} {:>15} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} verdict",
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
        "uas"
    );
}

pub fn bench_proxy(args: &ProxyBenchArgs) -> Result<(), String> {
    if !(args.start > 0.0 && args.step > 0.0 && args.max >= args.start) {
        return Err("need 0 < --start <= --max and --step > 0".into());
    }
    print_step_header();
    if args.generator == GeneratorArg::Sipp {
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
    let mut results = Vec::new();
    for spec in &args.proxies {
        results.push(bench_one(spec, args)?);
    }
    println!();
    for r in &results {
        match r.max_clean_rate {
            Some(rate) => println!(
                "{:<14} sustains {rate:.0} calls/s with no failed call and no retransmission",
                r.proxy
            ),
            None => println!(
                "{:<14} failed already at {:.0} calls/s",
                r.proxy, args.start
            ),
        }
    }
    if let (Some(first), true) = (results.first(), results.len() > 1) {
        for other in &results[1..] {
            if let (Some(a), Some(b)) = (first.max_clean_rate, other.max_clean_rate) {
                println!("{} / {}: {:.2}x", first.proxy, other.proxy, a / b);
            }
        }
    }
    if let Some(dir) = &args.out {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        fs::write(dir.join("bench_proxy.json"), format!("{json}\n")).map_err(|e| e.to_string())?;
        let mut csv = String::from(
            "proxy,rate,offered,successful,failed,unfinished,refused,retrans_sent,retrans_received,pdd_p50_ms,pdd_p99_ms,proxy_cpu,proxy_us_per_call,uac_cpu,uas_cpu,clean\n",
        );
        let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
        for s in results.iter().flat_map(|r| &r.steps) {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                s.proxy,
                s.rate,
                s.offered,
                s.successful,
                s.failed,
                s.unfinished,
                s.refused,
                s.retransmissions_sent,
                s.retransmissions_received,
                o(s.pdd_p50_ms),
                o(s.pdd_p99_ms),
                o(s.proxy_cpu),
                o(s.proxy_us_per_call),
                o(s.uac_cpu),
                o(s.uas_cpu),
                s.clean
            );
        }
        fs::write(dir.join("bench_proxy.csv"), csv).map_err(|e| e.to_string())?;
    }
    Ok(())
}
