//! sluice-impair: an impaired link for live runs, in user space (no netem needed).
//!
//! * [`Impairment`] is one direction of a link as a sans-IO state machine: handed each
//!   datagram's arrival time and size, it says when to deliver it or why it is dropped
//!   (one-way delay, jitter that keeps order, netem-style reordering, Bernoulli loss, a
//!   budget of bytes in flight), all drawn from one seeded stream.
//! * [`Relay`] is its tokio shell: a UDP relay between clients on one side and a fixed
//!   upstream on the other, each direction impaired. Like a NAT, it gives every client its
//!   own upstream socket, so the upstream tells clients apart by source address and its
//!   replies reach the client that sent; clients named up front get their sockets at start,
//!   at addresses known before the first datagram. It only listens on and sends to
//!   loopback addresses, and stops by itself.
//!
//! `sluice relay` runs one from the command line, and `sluice bench overload` puts one on
//! every hop of the hop-by-hop topology.

mod impairment;
mod relay;

pub use impairment::{
    stream_seed, DropReason, ImpairConfig, ImpairStats, Impairment, Verdict, MAX_DELAY_MS,
    PER_DATAGRAM_OVERHEAD,
};
pub use relay::{
    spawn, Relay, RelayAddrs, RelayConfig, RelayCounters, RelayStats, RelayThread, StopHandle,
    DEFAULT_MAX_CLIENTS,
};
