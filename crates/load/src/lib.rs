//! The sluice load generator: sans-IO UAC and UAS call state machines over the transaction
//! layer, and the tokio shell that drives them on real sockets.
//!
//! * [`Uac`] starts calls on an arrival schedule ([`rate`]: constant, Poisson, steps) and
//!   measures what the overload papers measure: goodput (calls set up within 10 s), failures
//!   by cause, retransmissions by message type, post-dial delay percentiles.
//! * [`Uas`] answers them (100, 180, 200 retransmitted until the ACK), optionally late or with
//!   a 503.
//! * [`shell`] runs either on one UDP socket in a single-threaded tokio runtime, or over TCP
//!   connections ([`shell::tcp`]).
//!
//! The cores take `now` from the driver and never read a clock, so tests drive them with
//! made-up time.

use std::net::SocketAddr;

use bytes::Bytes;
use sluice_txn::Origin;
pub use sluice_txn::{Peer, Transport};

pub mod rate;
pub mod shell;
pub mod stats;
pub mod uac;
pub mod uas;

pub use rate::{Arrivals, Schedule, Spacing};
pub use stats::{Counts, Failures, Kind, KindCounts, SecondRow};
pub use uac::{Hold, Uac, UacConfig, UacSummary};
pub use uas::{Uas, UasConfig, UasCounts};

/// A message to send. `origin` is set for what the transaction layer produced, so that a
/// send failure can be reported back to it.
#[derive(Clone, Debug)]
pub struct Out {
    pub to: SocketAddr,
    /// What to send it over: a response goes back over the transport its request came on.
    pub transport: Transport,
    pub payload: Bytes,
    pub origin: Option<Origin>,
    /// The call it belongs to, set by the UAC over a reliable transport: a driver that gives
    /// each call a connection of its own keys the connection by it.
    pub call: Option<u64>,
}
