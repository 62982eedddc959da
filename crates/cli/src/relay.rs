//! `sluice relay`: an impaired UDP link between loopback nodes (see `sluice-impair`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use sluice_impair::{ImpairConfig, ImpairStats, Relay, RelayConfig, DEFAULT_MAX_CLIENTS};

use crate::proxy::Signals;
use crate::units::{millis, parse_duration};

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Where the clients (side A) send, a loopback address (port 0: any free port).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where their datagrams go (side B), a loopback address; what it sends back to the
    /// relay goes to the client it came for.
    #[arg(long)]
    pub upstream: SocketAddr,
    /// One-way delay, each way.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub delay: Duration,
    /// Uniform jitter of ± this much on the delay (order is kept unless --reorder).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub jitter: Duration,
    /// Probability that a datagram is lost, each way.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Probability that a datagram skips the delay and overtakes those in flight (netem's
    /// reorder).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Seed of the draws (each client and direction gets a stream of its own).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Bytes in flight per client and direction beyond which datagrams are dropped.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_in_flight_bytes: usize,
    /// Clients served at once (each gets its own socket towards the upstream).
    #[arg(long, default_value_t = DEFAULT_MAX_CLIENTS)]
    pub max_clients: usize,
    /// Stop after this long (SIGINT or SIGTERM stop it earlier).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print the final counters as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn config(a: &RelayArgs) -> Result<RelayConfig, String> {
    if a.duration.is_zero() {
        return Err("--duration must be above 0s".into());
    }
    let link = ImpairConfig {
        delay_ms: millis(a.delay),
        jitter_ms: millis(a.jitter),
        loss: a.loss,
        reorder: a.reorder,
        max_in_flight_bytes: a.max_in_flight_bytes,
        seed: a.seed,
    };
    // The link's errors name its keys; the flags are those keys less their unit.
    link.validate().map_err(|e| {
        let e = e
            .replace("delay_ms", "delay")
            .replace("jitter_ms", "jitter");
        format!("--{}", e.replace('_', "-"))
    })?;
    let mut c = RelayConfig::new(a.listen, a.upstream, &link);
    c.max_clients = a.max_clients;
    c.duration = Some(a.duration);
    c.validate()?;
    Ok(c)
}

pub fn run(args: &RelayArgs) -> Result<(), String> {
    let config = config(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let stats = runtime.block_on(async move {
        let signals = Signals::install();
        let (listen, upstream) = (config.listen, config.upstream);
        let relay =
            Relay::bind(config).map_err(|e| format!("cannot start the relay on {listen}: {e}"))?;
        eprintln!(
            "sluice relay: listening on udp {}, upstream {upstream}",
            relay.local_addr()
        );
        let stop = relay.stop_handle();
        tokio::spawn(async move {
            signals.wait().await;
            stop.stop();
        });
        Ok::<_, String>(relay.run().await)
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&stats).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let row = |name: &str, s: &ImpairStats| {
        format!(
            "{name:<10} {:>10} {:>8} {:>12} {:>10}",
            s.forwarded, s.dropped_loss, s.dropped_budget, s.reordered
        )
    };
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>8} {:>12} {:>10}",
        "direction", "forwarded", "lost", "over budget", "reordered"
    );
    let _ = writeln!(out, "{}", row("A -> B", &stats.forward));
    let _ = writeln!(out, "{}", row("B -> A", &stats.backward));
    let _ = writeln!(
        out,
        "clients {}, refused {}, foreign {}, not sent {}, socket errors {}",
        stats.clients, stats.clients_refused, stats.foreign, stats.send_failed, stats.socket_errors
    );
    Ok(())
}
