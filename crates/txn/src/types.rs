//! The public vocabulary of the transaction layer: peers, transmits, ids, events, timers,
//! configuration and counters.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_sip::Message;

use crate::slab::SlotKey;

/// The transport a peer is reached over. Reliable transports switch off the retransmission
/// timers A, E and G and set D, I and K to zero (RFC 3261 §17.1.1.2, §17.1.2.2, §17.2.1, §17.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub const fn is_reliable(self) -> bool {
        matches!(self, Transport::Tcp)
    }
}

/// Where a message came from or goes to. The simulator may use made-up addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Peer {
    pub addr: SocketAddr,
    pub transport: Transport,
}

impl Peer {
    pub const fn udp(addr: SocketAddr) -> Peer {
        Peer {
            addr,
            transport: Transport::Udp,
        }
    }
    pub const fn tcp(addr: SocketAddr) -> Peer {
        Peer {
            addr,
            transport: Transport::Tcp,
        }
    }
}

/// A client transaction (this side sent the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientTxId(pub(crate) SlotKey);

/// A server transaction (this side received the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerTxId(pub(crate) SlotKey);

/// A 2xx that the UAS core retransmits until ACKed (RFC 3261 §13.3.1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reliable2xxId(pub(crate) SlotKey);

/// Either kind of transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxId {
    Client(ClientTxId),
    Server(ServerTxId),
}

/// What produced a transmit, so that the driver can report a transport failure back
/// ([`crate::TransactionLayer::handle_transport_error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    Client(ClientTxId),
    Server(ServerTxId),
    Reliable2xx(Reliable2xxId),
}

/// A message to put on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: Peer,
    pub payload: Bytes,
    pub origin: Origin,
    /// A timer- or retransmission-triggered copy of something already sent (the simulator and
    /// metrics tell retransmissions apart from first transmissions with this).
    pub retransmission: bool,
}

/// The RFC 3261 §17 timers (Table 4), plus the two of the UAS 2xx retransmission (§13.3.1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// INVITE request retransmission (client, Calling).
    A,
    /// INVITE transaction timeout (client, Calling).
    B,
    /// Wait for response retransmissions (client INVITE, Completed).
    D,
    /// Non-INVITE request retransmission (client, Trying/Proceeding).
    E,
    /// Non-INVITE transaction timeout (client).
    F,
    /// INVITE final response retransmission (server, Completed).
    G,
    /// Wait for ACK (server INVITE, Completed).
    H,
    /// Wait for ACK retransmissions (server INVITE, Confirmed).
    I,
    /// Wait for request retransmissions (server non-INVITE, Completed).
    J,
    /// Wait for response retransmissions (client non-INVITE, Completed).
    K,
    /// UAS 2xx retransmission (§13.3.1.4).
    Retransmit2xx,
    /// UAS 2xx never ACKed within 64*T1 (§13.3.1.4).
    GiveUp2xx,
}

/// What the transaction user hears, in the order things happened.
#[derive(Clone, Debug)]
pub enum Event {
    /// A request created a server transaction; answer it with
    /// [`crate::TransactionLayer::respond`]. For a CANCEL, `cancels` is the INVITE server
    /// transaction it matches (RFC 3261 §9.2), if one exists.
    Request {
        tx: ServerTxId,
        request: Message,
        from: Peer,
        cancels: Option<ServerTxId>,
    },
    /// A response for a client transaction: every provisional, the 2xx, and the first
    /// 3xx–6xx (retransmissions of a final response are absorbed).
    Response { tx: ClientTxId, response: Message },
    /// A response that matches no client transaction (RFC 3261 §18.1.2): for a proxy, usually
    /// a retransmitted 2xx to forward statelessly (§16.7, §16.11).
    StrayResponse { response: Message, from: Peer },
    /// An ACK that matches no INVITE server transaction: the ACK for a 2xx, which a proxy
    /// forwards statelessly (§16.11) and a UAS takes as confirmation. `stopped` is set when
    /// it stopped a [`crate::TransactionLayer::send_2xx_reliably`] retransmission.
    Ack2xx {
        request: Message,
        from: Peer,
        stopped: Option<Reliable2xxId>,
    },
    /// A request that needed a new server transaction while the table was full; the TU may
    /// answer it statelessly (e.g. 503) or drop it. Counted in [`Stats::refused`].
    Refused { request: Message, from: Peer },
    /// Timer B or F (client) or H (server) fired: the transaction failed (§17.1.1.2,
    /// §17.1.2.2, §17.2.1). `Terminated` follows.
    Timeout { tx: TxId, timer: Timer },
    /// The driver reported that a transmit from this origin failed (§17.1.4, §17.2.4).
    /// For a transaction, `Terminated` follows; a reliable 2xx is dropped.
    TransportError { origin: Origin },
    /// The transaction left the table; its id is dead from now on.
    Terminated { tx: TxId },
    /// A reliably sent 2xx was not ACKed within 64*T1 (§13.3.1.4): the TU should end the
    /// session with a BYE. `response` and `to` are what was being retransmitted.
    GaveUp2xx {
        id: Reliable2xxId,
        response: Message,
        to: Peer,
    },
}

/// What [`crate::TransactionLayer::handle_message`] did with a message, for the driver's
/// accounting (e.g. how much work the TU was spared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A request created a server transaction (an [`Event::Request`] follows).
    NewTransaction,
    /// A response was passed up through its client transaction.
    Delivered,
    /// A retransmission (or an ACK for a non-2xx) was absorbed by its transaction.
    Absorbed,
    /// Passed up as [`Event::StrayResponse`] or [`Event::Ack2xx`].
    Stray,
    /// A new server transaction was refused: the table is full.
    Refused,
    /// Missing what transaction matching needs (branch, CSeq, a parsable top Via).
    Malformed,
    /// Matched a transaction that has no use for it in its state (counted).
    Ignored,
}

/// Why the layer would not start a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The table is at its configured maximum.
    TableFull,
    /// A transaction with the same matching key is already in the table.
    Duplicate,
    /// The message is not what the call needs (a request with a Via branch and CSeq; for
    /// [`crate::TransactionLayer::send_2xx_reliably`] a 2xx to an INVITE with a Call-ID).
    Malformed,
    /// ACK never gets a client transaction (§17.1: the TU sends an ACK for a 2xx itself).
    Ack,
    /// The transaction is not in a state that allows it (e.g. CANCEL before a provisional,
    /// §9.1), or the id is dead.
    WrongState,
}

/// Why [`crate::TransactionLayer::respond`] did not send a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespondError {
    /// The id is dead: the transaction terminated (or never existed).
    UnknownTransaction,
    /// Not a response.
    NotAResponse,
    /// A final response was already sent (§17.2.1, §17.2.2).
    WrongState,
}

/// Timer values and table limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// RTT estimate (RFC 3261 §17.1.1.1): 500 ms.
    pub t1: Duration,
    /// Maximum retransmit interval for non-INVITE requests and INVITE responses: 4 s.
    pub t2: Duration,
    /// Maximum time a message stays in the network: 5 s (Timers I and K).
    pub t4: Duration,
    /// Timer D over unreliable transports: "at least 32 s" (Table 4).
    pub timer_d: Duration,
    /// Most transactions (client and server together) the table holds.
    pub max_transactions: usize,
    /// Most 2xx responses retransmitted at once for the UAS core.
    pub max_reliable_2xx: usize,
    /// §13.3.1.4 retransmits a 2xx "independent of whatever transport protocols are used";
    /// set false to skip it over reliable transports (the ACK timeout still runs).
    pub retransmit_2xx_over_reliable: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
            timer_d: Duration::from_secs(32),
            max_transactions: 1 << 20,
            max_reliable_2xx: 1 << 16,
            retransmit_2xx_over_reliable: true,
        }
    }
}

impl Config {
    /// The configuration the layer runs with: a zero T1 or T2 would re-arm a retransmission
    /// timer at the instant it fired and never let `handle_timeout` return, so both are at
    /// least 1 ms, and T2 is at least T1.
    #[must_use]
    pub fn sanitized(mut self) -> Config {
        self.t1 = self.t1.max(Duration::from_millis(1));
        self.t2 = self.t2.max(self.t1);
        self
    }

    /// 64*T1: Timers B, F, H, J and the 2xx give-up.
    pub fn t1_x64(&self) -> Duration {
        self.t1.saturating_mul(64)
    }
}

/// Retransmissions sent, by what was retransmitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retransmissions {
    /// INVITE requests (Timer A).
    pub invite: u64,
    /// Non-INVITE requests (Timer E).
    pub non_invite: u64,
    /// Server-transaction responses: Timer G, and replies to absorbed request retransmissions.
    pub response: u64,
    /// ACKs re-sent for retransmitted 3xx–6xx (§17.1.1.2).
    pub ack: u64,
    /// UAS 2xx (§13.3.1.4).
    pub ok_2xx: u64,
}

/// Messages absorbed by a transaction instead of reaching the TU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Absorbed {
    /// Request retransmissions at server transactions.
    pub requests: u64,
    /// ACKs for 3xx–6xx at INVITE server transactions.
    pub acks: u64,
    /// Final response retransmissions at completed client transactions.
    pub responses: u64,
}

/// How many times each timer fired (B, F, H and GiveUp2xx are the timeouts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimersFired {
    pub a: u64,
    pub b: u64,
    pub d: u64,
    pub e: u64,
    pub f: u64,
    pub g: u64,
    pub h: u64,
    pub i: u64,
    pub j: u64,
    pub k: u64,
    pub retransmit_2xx: u64,
    pub give_up_2xx: u64,
}

impl TimersFired {
    pub(crate) fn count(&mut self, timer: Timer) {
        let c = match timer {
            Timer::A => &mut self.a,
            Timer::B => &mut self.b,
            Timer::D => &mut self.d,
            Timer::E => &mut self.e,
            Timer::F => &mut self.f,
            Timer::G => &mut self.g,
            Timer::H => &mut self.h,
            Timer::I => &mut self.i,
            Timer::J => &mut self.j,
            Timer::K => &mut self.k,
            Timer::Retransmit2xx => &mut self.retransmit_2xx,
            Timer::GiveUp2xx => &mut self.give_up_2xx,
        };
        *c += 1;
    }
}

/// What the table turned away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Client or server transactions refused because the table was full.
    pub table_full: u64,
    /// `send_request` with a key already in the table.
    pub duplicate: u64,
    /// 2xx retransmissions refused because their table was full.
    pub reliable_2xx_full: u64,
}

/// Counters. All monotonic except the gauges marked as such.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub client_created: u64,
    pub server_created: u64,
    pub terminated: u64,
    /// Gauge: the most transactions the table has held at once.
    pub peak_transactions: usize,
    pub refused: Refusals,
    pub retransmissions: Retransmissions,
    pub absorbed: Absorbed,
    pub fired: TimersFired,
    pub stray_responses: u64,
    pub stray_acks: u64,
    /// Messages without what matching needs (branch, CSeq, top Via).
    pub malformed: u64,
    /// Messages or TU calls a transaction had no use for in its state.
    pub ignored: u64,
    pub transport_errors: u64,
    pub reliable_2xx_started: u64,
    pub reliable_2xx_acked: u64,
}
