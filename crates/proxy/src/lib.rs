//! The sluice SIP proxy: the tokio shell that drives the sans-IO [`ProxyCore`] (crate
//! `sluice-proxy-core`, re-exported here) on a real socket, and the admin HTTP endpoint.
//!
//! # Interface (for the load generator, the bench and the CLI)
//!
//! As a command:
//!
//! ```text
//! sluice proxy --listen 127.0.0.1:5060 --next-hop 127.0.0.1:5070 [--duration 30s]
//!              [--config proxy.toml] [--queue-capacity 500] [--cost-forward 0s]
//!              [--cost-reject 0s] [--cost-other 250us] [--invite-queue]
//!              [--control-algorithm none|threshold|ohta|occ|red|pi|latency-bucket|...]
//!              [--retry-after 0s] [--admin 127.0.0.1:9090] [--max-transactions N]
//!              [--shutdown-grace 5s] [--print-config] [--advertise HOST:PORT]
//! ```
//!
//! Flags override the TOML file ([`ProxyConfig`], every field defaulted, unknown fields are an
//! error). `--listen 127.0.0.1:0` binds an OS-chosen port; the bound address is printed on
//! standard error as `sluice proxy: listening on udp ADDR` (and `admin on http ADDR`). With
//! `tcp.listen` (the default) the proxy also accepts TCP on the same port (RFC 3261 §18);
//! `[tcp]` in the file sets connections to next hops, their limits and the TCP overload
//! controls (see `sluice_proxy_core::TcpConfig`).
//! `--duration 30s` stops the proxy after that long; SIGINT/SIGTERM start a graceful shutdown
//! (new INVITEs get 503, running transactions finish, at most `shutdown_grace_s`). At exit a
//! JSON summary ([`ProxyReport`]) is printed on standard output.
//!
//! The shell logs through `tracing` (the binary installs the subscriber: `--log-format`,
//! `RUST_LOG`): warnings about its environment, and once a second what [`watch`] finds in
//! the core's counters (overload entered or left, bad input).
//!
//! In process (any tokio runtime; a current-thread runtime is the fastest):
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! let mut config = sluice_proxy::ProxyConfig::default();
//! config.listen = "127.0.0.1:0".parse().unwrap();
//! config.next_hop = Some("127.0.0.1:5070".parse().unwrap());
//! let proxy = sluice_proxy::Proxy::bind(config).await?;
//! let addr = proxy.local_addr();        // where to send SIP
//! let stop = proxy.shutdown_handle();   // stop.shutdown() starts the graceful drain
//! let running = tokio::spawn(proxy.run());
//! // ... send traffic to `addr` ...
//! stop.shutdown();
//! let report = running.await.unwrap()?; // counters at exit
//! # Ok(()) }
//! ```
//!
//! The proxy's logic, its processing structure, cost model, routing and overload control
//! are documented in `sluice-proxy-core`.

mod admin;
mod icmp;
mod shell;
pub mod signals;
mod tcp;
mod udp_port;
pub mod watch;

pub use shell::{worker_count, Proxy, ProxyReport, ReloadHandle, ShutdownHandle};
pub use sluice_proxy_core::*;
pub use tcp::{raise_open_files_limit, TcpStats};
