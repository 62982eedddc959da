//! `sluice proxy`: run the SIP proxy (see the `sluice-proxy` crate docs for the flag set).

use std::io::Write as _;
use std::net::SocketAddr;

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sluice_control::Algorithm;
use sluice_proxy::{resolve_host_port, Proxy, ProxyConfig};

use crate::logging::LogFormat;
use crate::units::{micros, parse_duration, whole_seconds};

/// Every flag but `--config` and `--print-config` overrides the config key of its name
/// (`--queue-capacity` sets `queue_capacity`, `--control-algorithm` sets
/// `control.algorithm`); a key kept in a unit (`_s`, `_us`) takes a duration with its unit.
#[derive(Args, Clone, Debug)]
pub struct ProxyArgs {
    /// TOML config file (every field optional; flags below override it).
    #[arg(long)]
    config: Option<String>,
    /// UDP address to listen on, host:port (port 0: any free port).
    #[arg(long, value_parser = resolve_host_port)]
    listen: Option<SocketAddr>,
    /// Default next hop for requests, host:port (a name is resolved at start).
    #[arg(long, value_parser = resolve_host_port)]
    next_hop: Option<SocketAddr>,
    /// host[:port] written into Via and Record-Route (default: the bound address).
    #[arg(long)]
    advertise: Option<String>,
    /// Processor FIFO capacity, messages.
    #[arg(long)]
    queue_capacity: Option<usize>,
    /// Emulated processor time per fully processed INVITE (and, unless --cost-other is
    /// given, per other message), e.g. 250us (`cost_forward_us`).
    #[arg(long, value_parser = parse_duration)]
    cost_forward: Option<Duration>,
    /// Emulated processor time per rejected INVITE, e.g. 40us (`cost_reject_us`).
    #[arg(long, value_parser = parse_duration)]
    cost_reject: Option<Duration>,
    /// Emulated processor time per message other than an INVITE (`cost_other_us`).
    #[arg(long, value_parser = parse_duration)]
    cost_other: Option<Duration>,
    /// Admitted INVITEs wait in their own queue behind everything else (De Cicco et al.).
    #[arg(long)]
    invite_queue: bool,
    /// Overload control algorithm (pi implies --invite-queue).
    #[arg(long, value_parser = algorithm_parser())]
    control_algorithm: Option<Algorithm>,
    /// Retry-After on rejections, whole seconds (0s: none).
    #[arg(long, value_parser = parse_duration)]
    retry_after: Option<Duration>,
    /// Transaction table limit.
    #[arg(long)]
    max_transactions: Option<usize>,
    /// What transactions and queued messages may hold, MiB (`memory_budget_mb`).
    #[arg(long)]
    memory_budget_mb: Option<usize>,
    /// UDP threads sharing the proxy, each on its own socket of the port (0: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Admin HTTP address, host:port: /metrics, /status, /signals and /dashboard.
    #[arg(long, value_parser = resolve_host_port)]
    admin: Option<SocketAddr>,
    /// How long a graceful shutdown waits for running transactions (`shutdown_grace_s`).
    #[arg(long, value_parser = parse_duration)]
    shutdown_grace: Option<Duration>,
    /// Stop after this long (`duration_s`).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// UDP only: no TCP listener on the same port (`tcp.listen = false`).
    #[arg(long)]
    no_tcp: bool,
    /// Send requests to the configured next hops over TCP (`tcp.to_next_hops`).
    #[arg(long)]
    tcp_to_next_hops: bool,
    /// TCP connections per next hop: ics (one) or ecs (another for new INVITEs)
    /// (`tcp.connection_split`).
    #[arg(long, value_parser = ["ics", "ecs"])]
    connection_split: Option<String>,
    /// Reject a new INVITE while its TCP connection to the next hop holds unsent bytes
    /// (`tcp.smart_forwarding`, Shen and Schulzrinne 2010).
    #[arg(long)]
    smart_forwarding: bool,
    /// SO_RCVBUF of accepted TCP connections, bytes (`tcp.listen_receive_buffer`).
    #[arg(long)]
    listen_receive_buffer: Option<usize>,
    /// Print the effective config as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

/// The algorithm names as clap's possible values, so a wrong one lists the right ones.
fn algorithm_parser() -> impl TypedValueParser<Value = Algorithm> {
    PossibleValuesParser::new(Algorithm::ALL.map(Algorithm::name)).try_map(|s| s.parse())
}

fn effective_config(args: &ProxyArgs) -> Result<ProxyConfig, String> {
    let mut c = match &args.config {
        Some(path) => ProxyConfig::from_file(path).map_err(|e| e.to_string())?,
        None => ProxyConfig::default(),
    };
    if let Some(v) = args.listen {
        c.listen = v;
    }
    if let Some(v) = args.next_hop {
        c.next_hop = Some(v);
    }
    if let Some(v) = &args.advertise {
        c.advertise = Some(v.clone());
    }
    if let Some(v) = args.queue_capacity {
        c.queue_capacity = v;
    }
    if let Some(v) = args.cost_forward {
        c.cost_forward_us = micros(v);
    }
    if let Some(v) = args.cost_reject {
        c.cost_reject_us = micros(v);
    }
    if let Some(v) = args.cost_other {
        c.cost_other_us = Some(micros(v));
    }
    if args.invite_queue {
        c.invite_queue = true;
    }
    if args.no_tcp {
        c.tcp.listen = false;
    }
    if args.tcp_to_next_hops {
        c.tcp.to_next_hops = true;
    }
    if let Some(v) = &args.connection_split {
        c.tcp.connection_split = if v == "ecs" {
            sluice_proxy::ConnectionSplit::Ecs
        } else {
            sluice_proxy::ConnectionSplit::Ics
        };
    }
    if args.smart_forwarding {
        c.tcp.smart_forwarding = true;
    }
    if let Some(v) = args.listen_receive_buffer {
        c.tcp.listen_receive_buffer = v;
    }
    if let Some(v) = args.control_algorithm {
        c.control.algorithm = v;
        // On the command line, asking for the draining policy asks for its queue.
        if v.drains_invite_queue() {
            c.invite_queue = true;
        }
    }
    if let Some(v) = args.retry_after {
        c.retry_after_s = u32::try_from(whole_seconds("--retry-after", v)?)
            .map_err(|_| "--retry-after: too long".to_owned())?;
    }
    if let Some(v) = args.max_transactions {
        c.max_transactions = v;
    }
    if let Some(v) = args.memory_budget_mb {
        c.memory_budget_mb = v;
    }
    if let Some(v) = args.workers {
        c.workers = v;
    }
    if let Some(v) = args.admin {
        c.admin = Some(v);
    }
    if let Some(v) = args.shutdown_grace {
        c.shutdown_grace_s = v.as_secs_f64();
    }
    if let Some(v) = args.duration {
        c.duration_s = Some(v.as_secs_f64());
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

pub fn run(args: &ProxyArgs, log_format: LogFormat) -> Result<(), String> {
    let config = effective_config(args)?;
    if args.print_config {
        print!("{}", config.to_commented_toml());
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let report = runtime.block_on(async move {
        // Handlers first, so a signal arriving right after start-up is not fatal.
        let signals = Signals::install();
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let listen = config.listen;
        let proxy = Proxy::bind(config)
            .await
            .map_err(|e| format!("cannot start the proxy on {listen}: {e}"))?;
        // As text these lines are an interface (scripts read the bound port from them);
        // as JSON they are events like the rest of the log.
        let (udp, admin) = (proxy.local_addr(), proxy.admin_addr());
        if log_format == LogFormat::Json {
            let admin = admin.map_or_else(String::new, |a| a.to_string());
            tracing::info!(%udp, admin, "listening");
        } else {
            // One write, errors ignored: a supervisor may close standard error as soon
            // as it has read the first line, and `eprintln!` would panic on that.
            use std::fmt::Write as _;
            let mut lines = format!("sluice proxy: listening on udp {udp}\n");
            if let Some(t) = proxy.tcp_addr() {
                let _ = writeln!(lines, "sluice proxy: listening on tcp {t}");
            }
            if let Some(a) = admin {
                let _ = writeln!(lines, "sluice proxy: admin on http {a}");
            }
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), lines.as_bytes());
        }
        let reload = proxy.reload_handle();
        let reload_args = args.clone();
        tokio::spawn(async move {
            let Ok(mut hangups) = hangups else {
                tracing::warn!("cannot handle SIGHUP: the configuration cannot be reloaded");
                return;
            };
            while hangups.recv().await.is_some() {
                // The file read again, the flags on top, checked as at start: a bad file
                // leaves the running configuration as it is.
                match effective_config(&reload_args) {
                    Ok(config) => {
                        if !reload.reload(config) {
                            tracing::warn!("SIGHUP: reloads arrive faster than the proxy applies them; this one is dropped");
                        }
                    }
                    Err(e) => tracing::error!("SIGHUP: configuration not reloaded: {e}"),
                }
            }
        });
        let stop = proxy.shutdown_handle();
        tokio::spawn(async move {
            signals.wait().await;
            stop.shutdown();
            // Not eprintln!: with standard error closed it would panic this task.
            let _ = writeln!(
                std::io::stderr(),
                "sluice proxy: shutting down (new INVITEs get 503)"
            );
        });
        proxy.run().await.map_err(|e| format!("proxy failed: {e}"))
    })?;
    println!("{:#}", report.to_json());
    Ok(())
}

/// SIGINT and SIGTERM, both starting the graceful shutdown.
pub(crate) struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    pub(crate) fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Signals(Some((int, term))),
            // Without handlers the proxy still stops by --duration or the default action.
            _ => Signals(None),
        }
    }

    pub(crate) async fn wait(self) {
        let Some((mut int, mut term)) = self.0 else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
