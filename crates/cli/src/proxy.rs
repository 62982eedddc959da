//! `sluice proxy`: run the SIP proxy (see the `sluice-proxy` crate docs for the flag set).

use std::io::Write as _;
use std::net::SocketAddr;

use clap::Args;
use sluice_proxy::{resolve_host_port, Proxy, ProxyConfig};

use crate::logging::LogFormat;

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
    queue: Option<usize>,
    /// Emulated processor time per fully processed INVITE (and, unless --cost-other-us is
    /// given, per other message), microseconds.
    #[arg(long)]
    cost_forward_us: Option<f64>,
    /// Emulated processor time per rejected INVITE, microseconds.
    #[arg(long)]
    cost_reject_us: Option<f64>,
    /// Emulated processor time per message other than an INVITE, microseconds.
    #[arg(long)]
    cost_other_us: Option<f64>,
    /// Admitted INVITEs wait in their own queue behind everything else (De Cicco et al.).
    #[arg(long)]
    invite_queue: bool,
    /// Local overload control (`control.algorithm`): none, threshold, ohta, occ, red, pi,
    /// latency-bucket (pi implies --invite-queue).
    #[arg(long)]
    admission: Option<String>,
    /// Retry-After seconds on rejections (0: none).
    #[arg(long)]
    retry_after: Option<u32>,
    /// Transaction table limit.
    #[arg(long)]
    max_transactions: Option<usize>,
    /// Admin HTTP address, host:port: /metrics, /status, /signals and /dashboard.
    #[arg(long, value_parser = resolve_host_port)]
    admin: Option<SocketAddr>,
    /// Seconds a graceful shutdown waits for running transactions.
    #[arg(long)]
    grace: Option<f64>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Print the effective config as TOML and exit.
    #[arg(long)]
    print_config: bool,
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
    if let Some(v) = args.queue {
        c.queue_capacity = v;
    }
    if let Some(v) = args.cost_forward_us {
        c.cost_forward_us = v;
    }
    if let Some(v) = args.cost_reject_us {
        c.cost_reject_us = v;
    }
    if let Some(v) = args.cost_other_us {
        c.cost_other_us = Some(v);
    }
    if args.invite_queue {
        c.invite_queue = true;
    }
    if let Some(v) = &args.admission {
        c.control.algorithm = v.parse().map_err(|e| format!("--admission: {e}"))?;
        // On the command line, asking for the draining policy asks for its queue.
        if c.control.algorithm.drains_invite_queue() {
            c.invite_queue = true;
        }
    }
    if let Some(v) = args.retry_after {
        c.retry_after_s = v;
    }
    if let Some(v) = args.max_transactions {
        c.max_transactions = v;
    }
    if let Some(v) = args.admin {
        c.admin = Some(v);
    }
    if let Some(v) = args.grace {
        c.shutdown_grace_s = v;
    }
    if let Some(v) = args.duration {
        c.duration_s = Some(v);
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
            eprintln!("sluice proxy: listening on udp {udp}");
            if let Some(a) = admin {
                eprintln!("sluice proxy: admin on http {a}");
            }
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
