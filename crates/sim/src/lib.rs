//! sluice-sim: a deterministic discrete-event simulator of SIP server overload control,
//! built to reproduce Shen, Schulzrinne & Nahum, "Application Layer Feedback-based SIP
//! Server Overload Control" (CUCS-031-08, 2008), §4–§6.
//!
//! The simulator models only what is physical — Poisson caller populations, links, the
//! overloaded server's queue and processor — and runs the project's own sans-IO state
//! machines for everything else: real SIP bytes built and parsed with `sluice-sip`, every
//! retransmission from `sluice-txn` transaction layers (one per node), and the overload
//! controllers of `sluice-control` (RE feedback generators, SE throttles, local
//! admission). A figure from here is therefore evidence about the proxy's code.
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
//! Modules: [`scenario`] (the model's knobs, §4.2), [`report`] (metrics), `engine` (the
//! event loop), `ua` (caller and callee populations), `se` (edge proxies), `re` (the
//! overloaded proxy), `net` (topology and links), `ledger` (measurement), and
//! [`experiment`] (experiment files and sweeps).
//!
//! # Modelling choices the paper leaves open
//! - Feedback (RE → SE) and feed-forward (SE → RE) ride beside the SIP bytes of the
//!   datagram they piggyback on (the paper's "overload header"), as typed values.
//! - Only the RE's processor costs time. Sends triggered by the RE's own transaction
//!   timers (e.g. a 503 retransmitted by Timer G) are free; SEs and user agents act
//!   instantly (§4.2: infinite capacity).
//! - An SE that rejects a new INVITE answers 503 straight away; one that forwards or holds
//!   it answers 100 Trying first. The RE answers every INVITE it forwards with 100 Trying;
//!   the callee's 100 ends at the RE (hop by hop).
//! - Repeated 2xx responses and the end-to-end ACK are relayed statelessly; the caller's
//!   UA core ACKs every copy of the 2xx.
//! - A proxy whose client transaction times out ends the matching server transaction
//!   without a 408; the caller's own Timer B/F reports the failure. A callee whose 2xx is
//!   never ACKed gives up after 64·T1 without sending a BYE.
//! - The run continues `call.setup_deadline_s` past `duration_s`, arrivals included, so
//!   the calls started at the end of the measurement window can complete.

mod engine;
pub mod experiment;
mod ledger;
mod net;
mod node;
mod proxy_node;
pub mod report;
pub mod scenario;
pub mod testbed;
pub mod tuning;
mod ua;
mod wire;

pub use report::{ControlTrace, Refusals, RunReport, SeriesPoint, SourceReport, TimeSeries};
pub use scenario::{ArrivalProcess, CallConfig, LinkConfig, LoadStep, Scenario, SourceConfig};
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
