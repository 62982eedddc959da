//! `sluice load uac` and `sluice load uas`: the load generator on real UDP sockets or TCP
//! connections.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use sluice_load::shell::tcp::{self, Connections, TcpConfig};
use sluice_load::shell::{self, Run, Stop};
use sluice_load::{Hold, Schedule, SecondRow, Spacing, UacConfig, UacSummary, UasConfig};

use crate::units::parse_duration;

#[derive(Subcommand, Debug)]
pub enum LoadCommand {
    /// Place calls (INVITE, ACK, hold, BYE) at a rate and measure goodput, failures,
    /// retransmissions and post-dial delay.
    Uac(UacArgs),
    /// Answer calls (100, 180, 200 retransmitted until the ACK; BYE → 200).
    Uas(UasArgs),
}

/// How calls are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArrivalsArg {
    /// Evenly, 1/rate apart.
    Constant,
    /// A Poisson process at the rate.
    Poisson,
}

/// How long calls are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HoldArg {
    /// Every call for --hold.
    Constant,
    /// Exponentially distributed with mean --hold.
    Exponential,
}

/// What SIP goes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// Datagrams; the transaction timers retransmit what is lost.
    Udp,
    /// Connections (RFC 3261 §18): nothing retransmitted but the UAS's 200 OK until its ACK.
    Tcp,
}

/// Which TCP connections the UAC opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TcpConnectionsArg {
    /// One for the whole run (SIPp's -t t1).
    Shared,
    /// One for each call, closed 200 ms after it ends (SIPp's -t tn).
    PerCall,
}

#[derive(Args, Debug, Clone)]
pub struct UacArgs {
    /// Where the calls go: the proxy under test or a UAS (IPv4/IPv6 address and port).
    #[arg(long)]
    pub target: SocketAddr,
    /// Local address to send from (port 0: any; with --tcp-connections per-call, only its
    /// address is used).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind: SocketAddr,
    /// What the calls go over.
    #[arg(long, value_enum, default_value_t = TransportArg::Udp)]
    pub transport: TransportArg,
    /// Threads placing calls, each with its own socket (a port of --bind's address) and
    /// an equal share of the rate, so that one generator uses several cores (UDP). The
    /// summary is over all of them; per-second rows add their counts and leave the delay
    /// columns empty.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// With --transport tcp: one connection for the run (the default), or one per call.
    #[arg(long, value_enum)]
    pub tcp_connections: Option<TcpConnectionsArg>,
    /// Calls per second (constant over the run).
    #[arg(long, conflicts_with = "schedule")]
    pub rate: Option<f64>,
    /// Rate steps as SECONDS:RATE,... (e.g. 0:100,10:300,20:100), or a TOML file with
    /// `schedule = [[0, 100], [10, 300]]`.
    #[arg(long)]
    pub schedule: Option<String>,
    /// How calls are spaced in time.
    #[arg(long, value_enum, default_value_t = ArrivalsArg::Constant)]
    pub arrivals: ArrivalsArg,
    /// Seed of the random draws (Poisson arrivals, exponential holding times).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop starting calls after this long.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after starting this many calls.
    #[arg(long)]
    pub calls: Option<u64>,
    /// Time between ACK and BYE (the mean, with --hold-dist exponential).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub hold: Duration,
    /// How holding times are distributed.
    #[arg(long, value_enum, default_value_t = HoldArg::Constant)]
    pub hold_dist: HoldArg,
    /// Most calls in progress at once (calls due beyond it are refused and counted).
    #[arg(long, default_value_t = 100_000)]
    pub max_in_progress: usize,
    /// How long to wait for calls in progress after the last one started.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Request-URI of the INVITEs (default: sip:service@TARGET).
    #[arg(long)]
    pub request_uri: Option<String>,
    /// Size of the INVITE's session description in bytes (0: none). Over TCP, buffers
    /// hold bytes: Shen and Schulzrinne reckon an INVITE at about 1 KB with its SDP.
    #[arg(long, default_value_t = 0)]
    pub body_bytes: usize,
    /// Output folder for per_second.csv and summary.json (default: none, CSV rows on
    /// standard error and the summary on standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Exit with status 1 unless every call succeeded with no retransmission.
    #[arg(long)]
    pub expect_clean: bool,
}

#[derive(Args, Debug, Clone)]
pub struct UasArgs {
    /// Address to answer on (port 0: any free port, printed on standard error).
    #[arg(long, default_value = "127.0.0.1:5060")]
    pub listen: SocketAddr,
    /// What calls come over: UDP, or TCP (answered on the connection each request came in
    /// on).
    #[arg(long, value_enum, default_value_t = TransportArg::Udp)]
    pub transport: TransportArg,
    /// How long to run (required: every load run stops by itself).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Duration,
    /// Time between the INVITE and the 200 OK.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub answer_delay: Duration,
    /// Probability of answering an INVITE with 503 (for testing).
    #[arg(long, default_value_t = 0.0)]
    pub reject_503: f64,
    /// Seed of the --reject-503 draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Answer an INVITE with 180 and 200 only, without the 100 Trying first (as the UAS
    /// of Shen and Schulzrinne's testbed).
    #[arg(long)]
    pub no_trying: bool,
    /// Size of the 200 OK's session description in bytes (0: none).
    #[arg(long, default_value_t = 0)]
    pub body_bytes: usize,
    /// Output folder for summary.json (default: none, standard output only).
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

fn uac_config(args: &UacArgs) -> Result<UacConfig, String> {
    if args.duration.is_none() && args.calls.is_none() {
        return Err("give --duration and/or --calls: every load run stops by itself".into());
    }
    if args.tcp_connections.is_some() && args.transport != TransportArg::Tcp {
        return Err("--tcp-connections needs --transport tcp".into());
    }
    if args.threads == 0 || args.threads > 64 {
        return Err(format!("--threads {}: give 1 to 64", args.threads));
    }
    if args.threads > 1 && (args.transport != TransportArg::Udp || args.bind.port() != 0) {
        return Err(
            "--threads runs UDP, each thread on its own port: use --transport udp and a --bind \
             with port 0"
                .into(),
        );
    }
    if args.bind.ip().is_loopback() != args.target.ip().is_loopback() {
        return Err(format!(
            "--bind {} cannot reach --target {}: bind to an address of this host on the \
             target's network",
            args.bind, args.target
        ));
    }
    let mut cfg = UacConfig::new(args.bind, args.target, 0.0);
    cfg.schedule = schedule(args)?;
    cfg.spacing = match args.arrivals {
        ArrivalsArg::Constant => Spacing::Constant,
        ArrivalsArg::Poisson => Spacing::Poisson,
    };
    cfg.seed = args.seed;
    cfg.duration = args.duration;
    cfg.max_calls = args.calls;
    let hold = args.hold;
    cfg.hold = match args.hold_dist {
        HoldArg::Constant => Hold::Constant(hold),
        HoldArg::Exponential => Hold::Exponential(hold),
    };
    cfg.max_in_progress = args.max_in_progress.max(1);
    cfg.drain_timeout = args.drain_timeout;
    if let Some(uri) = &args.request_uri {
        cfg.request_uri.clone_from(uri);
    }
    cfg.run_token = sluice_bench::process::fresh_run_token();
    cfg.invite_body = session_description(args.body_bytes, args.bind.ip())?;
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

fn run_uac(args: &UacArgs) -> Result<UacReport, String> {
    let cfg = uac_config(args)?;
    let schedule = cfg
        .schedule
        .steps
        .iter()
        .map(|s| (s.at.as_secs_f64(), s.rate))
        .collect();
    let mut csv: Box<dyn Write> = match &args.out {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = dir.join("per_second.csv");
            Box::new(fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        None => Box::new(std::io::stderr()),
    };
    let _ = writeln!(csv, "{}", SecondRow::CSV_HEADER);
    let on_row = |row: &SecondRow| {
        let _ = writeln!(csv, "{}", row.csv());
    };
    let run = match args.transport {
        TransportArg::Udp if args.threads > 1 => {
            // One row a second: each thread's rows for that second added up, written once
            // every thread has given its own (what is left, at the end).
            let threads = args.threads;
            let mut waiting: std::collections::BTreeMap<u64, (SecondRow, usize)> =
                std::collections::BTreeMap::new();
            let mut on_row = on_row;
            let run =
                shell::run_uac_threads(args.bind, &cfg, threads, &Stop::default(), |_, row| {
                    let entry = waiting.entry(row.second).or_insert((
                        SecondRow {
                            pdd_p50_ms: None,
                            pdd_p99_ms: None,
                            ..*row
                        },
                        0,
                    ));
                    if entry.1 > 0 {
                        entry.0.absorb(row);
                    }
                    entry.1 += 1;
                    while let Some(first) = waiting.first_entry() {
                        if first.get().1 < threads {
                            break;
                        }
                        on_row(&first.remove().0);
                    }
                });
            for (row, _) in waiting.into_values() {
                on_row(&row);
            }
            run
        }
        TransportArg::Udp => {
            let socket =
                shell::bind_udp(args.bind).map_err(|e| format!("bind {}: {e}", args.bind))?;
            shell::run_uac(socket, cfg, &Stop::default(), on_row)
        }
        TransportArg::Tcp => {
            let tcp = TcpConfig {
                connections: match args.tcp_connections {
                    None | Some(TcpConnectionsArg::Shared) => Connections::Shared,
                    Some(TcpConnectionsArg::PerCall) => Connections::PerCall,
                },
                ..TcpConfig::default()
            };
            tcp::run_uac_tcp(args.bind, cfg, tcp, &Stop::default(), on_row)
        }
    }
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
    let bind_error = |e| format!("bind {}: {e}", args.listen);
    let stop = Stop {
        after: Some(args.duration),
        flag: None,
    };
    let run = match args.transport {
        TransportArg::Udp => {
            let socket = shell::bind_udp(args.listen).map_err(bind_error)?;
            let cfg = uas_config(args, socket.local_addr())?;
            shell::run_uas(socket, cfg, &stop)
        }
        TransportArg::Tcp => {
            let listener = tcp::bind_tcp(args.listen).map_err(bind_error)?;
            let cfg = uas_config(args, listener.local_addr())?;
            tcp::run_uas_tcp(listener, cfg, TcpConfig::default(), &stop)
        }
    }
    .map_err(|e| format!("uas: {e}"))?;
    write_summary(args.out.as_deref(), &run)
}

/// The UAS's settings for the address it is bound to, which it prints.
fn uas_config(args: &UasArgs, local: std::io::Result<SocketAddr>) -> Result<UasConfig, String> {
    let local = local.map_err(|e| e.to_string())?;
    // Tests and scripts read the port from this line when they listen on port 0.
    eprintln!("listening on {local}");
    let mut cfg = UasConfig::new(local);
    cfg.answer_delay = args.answer_delay;
    cfg.reject_probability = args.reject_503;
    cfg.seed = args.seed;
    cfg.sends_trying = !args.no_trying;
    cfg.answer_body = session_description(args.body_bytes, local.ip())?;
    Ok(cfg)
}

/// Bodies up to the simulator's limit: a message must stay well inside a UDP datagram.
fn session_description(bytes: usize, ip: std::net::IpAddr) -> Result<bytes::Bytes, String> {
    if bytes > sluice_sim::scenario::MAX_BODY {
        return Err(format!(
            "--body-bytes {bytes}: allowed up to {}",
            sluice_sim::scenario::MAX_BODY
        ));
    }
    Ok(sluice_sip::sdp::session_description(bytes, ip))
}
