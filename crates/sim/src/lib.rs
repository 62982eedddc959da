//! sluice-sim: a deterministic discrete-event simulator of SIP server overload control,
//! built to reproduce Shen, Schulzrinne & Nahum, "Application Layer Feedback-based SIP
//! Server Overload Control" (CUCS-031-08, 2008), §4–§6.
//!
//! The simulator models only what is physical — Poisson caller populations, links, the
//! overloaded server's queue and processor — and runs the project's own sans-IO state
//! machines for everything else: real SIP bytes built and parsed with `sluice-sip`, every
//! retransmission from `sluice-txn` transaction layers (one per node), and at the RE and
//! every SE the proxy core of `sluice-proxy-core` with its overload controls, the code
//! `sluice proxy` runs. A figure from here is therefore evidence about the proxy's code.
//!
//! ```
//! let mut s = sluice_sim::Scenario::default();
//! s.duration_s = 20.0;
//! s.warmup_s = 5.0;
//! s.offered_load = 0.5;
//! s.validate().unwrap();
//! let r = sluice_sim::run(&s);
//! assert!((r.goodput - 0.5).abs() < 0.15);
//! ```
//!
//! Modules: [`scenario`] (the model's knobs, §4.2; the RE and SEs are `sluice proxy`
//! configurations), [`report`] (metrics), `engine` (the event loop), `ua` (caller and
//! callee populations), `proxy_node` (a [`sluice_proxy_core::ProxyCore`] at a node: the RE
//! and every SE), `net` (topology and links), `tcp` (TCP connections: buffers, flow
//! control, reading only while a proxy's queue has room), `ledger` (measurement), [`testbed`]
//! (sans-IO endpoints on one clock, for tests of the proxy and the load generator), and
//! [`experiment`] (experiment files and sweeps).
//!
//! # Modelling choices the paper leaves open
//! - The RE and the SEs are the product's proxy core, configured by the same TOML tables
//!   as `sluice proxy`. Feedback (RE → SE) and feed-forward (SE → RE) travel as Via
//!   parameters in the SIP bytes: RFC 7339 `oc`, `oc-algo`, `oc-validity`, `oc-seq`, RFC
//!   7415 `rate`, and sluice's window and rate extensions (see `sluice_control::overload`).
//! - Only the RE's processor costs time (its emulated per-message costs, `re.cost_*_us`).
//!   Sends triggered by the RE's own transaction timers (e.g. a relayed request resent
//!   by Timer E) are free; SEs and user agents act instantly (§4.2: infinite capacity).
//! - A proxy that rejects a new INVITE answers with a stateless 503 and absorbs the ACK
//!   for it, as the live proxy does; one that forwards it answers 100 Trying first. The
//!   callee's 100 ends at the RE (hop by hop).
//! - Repeated 2xx responses and the end-to-end ACK are relayed statelessly; the caller's
//!   UA core ACKs every copy of the 2xx.
//! - A proxy whose client transaction times out answers 408 upstream (RFC 3261 §16.9). A
//!   callee whose 2xx is never ACKed gives up after 64·T1 without sending a BYE.
//! - The run continues `call.setup_deadline_s` past `duration_s`, arrivals included, so
//!   the calls started at the end of the measurement window can complete.
//! - Over TCP (Shen and Schulzrinne 2010) each connection is a lossless byte stream with
//!   bounded socket buffers and flow control; acknowledgements and window updates are
//!   instant and connections need no handshake (see `tcp`).

mod engine;
pub mod experiment;
mod ledger;
mod net;
mod node;
mod proxy_node;
pub mod report;
pub mod sample;
pub mod scenario;
mod tcp;
pub mod testbed;
pub mod tuning;
mod ua;
mod wire;

pub use report::{
    ControlTrace, Refusals, RunReport, SeriesPoint, SourceReport, TcpReport, TimeSeries,
    WriteQueueDrops,
};
pub use scenario::{
    ArrivalProcess, CallConfig, LinkConfig, LoadStep, Scenario, SourceConfig, TcpModel,
};
pub use sluice_proxy_core::{ProxyConfig, SipTimers};

/// Runs one scenario to completion. Deterministic: the same scenario (seed included)
/// gives a byte-identical `serde_json` serialisation of the report.
///
/// An invalid scenario (see [`Scenario::validate`]) yields an empty report whose
/// `error` field says why; nothing panics.
pub fn run(scenario: &Scenario) -> RunReport {
    if let Err(e) = scenario.validate() {
        return RunReport {
            capacity_cps: scenario.capacity_cps(),
            error: Some(e),
            ..RunReport::default()
        };
    }
    engine::Engine::new(scenario).run()
}

/// Like [`run`], but an invalid scenario is an error instead of an empty report.
pub fn try_run(scenario: &Scenario) -> Result<RunReport, String> {
    scenario.validate()?;
    Ok(engine::Engine::new(scenario).run())
}
