//! The calling side, sans IO: starts calls on the arrival schedule, and per call sends
//! INVITE, ACKs the 2xx (again for every retransmitted 2xx, RFC 3261 §13.2.2.4), holds, and
//! hangs up with a BYE. ACK and BYE carry the route set (the 2xx's Record-Route, reversed)
//! and go to the remote target (the 2xx's Contact), so they traverse a record-routing proxy.
//! INVITE and BYE retransmissions come from the transaction layer.
//!
//! Every message goes to the configured next hop (an outbound proxy, or the UAS itself):
//! the route set's first entry is that proxy in the topologies the generator is for.
//!
//! Over TCP (`UacConfig::transport`) the requests say so (Via `SIP/2.0/TCP`, Contact
//! `;transport=tcp`) and the transaction layer runs no retransmission timers. Each message
//! names its call ([`Out::call`]), and the core reports each call's end
//! ([`Uac::poll_ended_call`]), so that a driver can give every call a connection of its own
//! and close it with the call; a driver whose connection breaks tells the core
//! ([`Uac::handle_connection_lost`]), since no retransmission would ever find out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use sluice_sip::{HeaderName, Message, Method, NameAddr};
use sluice_time::Time;
use sluice_txn::{ClientTxId, Event, Origin, Peer, Received, TransactionLayer, Transport, TxId};

use crate::rate::{Arrivals, Schedule, Spacing};
use crate::stats::{Counts, DelaySummary, Delays, Kind, SecondRow};
use crate::Out;

/// How long a call stays up between ACK and BYE.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hold {
    Constant(Duration),
    /// Exponentially distributed with this mean.
    Exponential(Duration),
}

#[derive(Clone, Debug)]
pub struct UacConfig {
    /// This side's address, written into Via, From and Contact. Port 0 writes the address
    /// alone: a driver with a connection per call has no one port to name.
    pub local: SocketAddr,
    /// Where every request goes: the proxy under test, or the UAS.
    pub next_hop: SocketAddr,
    /// What every request goes over.
    pub transport: Transport,
    /// Request-URI of the INVITEs (default `sip:service@<next_hop>`).
    pub request_uri: String,
    pub schedule: Schedule,
    pub spacing: Spacing,
    pub seed: u64,
    /// Stop starting calls after this long.
    pub duration: Option<Duration>,
    /// Stop starting calls after this many.
    pub max_calls: Option<u64>,
    pub hold: Hold,
    /// Most calls in progress at once; calls due beyond it are refused and counted.
    pub max_in_progress: usize,
    /// A call counts as successful if its ACK goes out within this long of its INVITE.
    pub setup_limit: Duration,
    /// After the last call starts, how long to wait for calls in progress to end.
    pub drain_timeout: Duration,
    /// The summary's delay percentiles (post-dial delays, setup) count only calls started
    /// this long after the start: a warm-up left out of them as it is left out of a bench's
    /// goodput window. The per-second rows keep every call.
    pub delays_from: Duration,
    /// Likewise, calls started this long after the start or later are left out (none:
    /// no end): a driver that goes on offering load past its window, so the window's last
    /// calls meet the same load as the others, counts the window alone.
    pub delays_until: Option<Duration>,
    pub txn: sluice_txn::Config,
    /// Distinguishes this run's Call-IDs and branches from earlier runs against the same peer.
    pub run_token: u64,
    /// The INVITE's session description ([`sluice_sip::sdp::session_description`]; empty:
    /// none).
    pub invite_body: Bytes,
    /// Keep a record of each call started in the delays' window that got its 2xx
    /// ([`Uac::take_answered`]), for a driver that also sees the UAS's ACKs: the ACK's
    /// arrival is what the simulator's good call waits for, and the caller cannot see it.
    /// At most [`MAX_ANSWERED_RECORDS`]; the rest are counted in the summary.
    pub record_answered: bool,
}

/// Most records [`UacConfig::record_answered`] keeps (about 100 bytes each).
pub const MAX_ANSWERED_RECORDS: usize = 1 << 22;

/// A call that got its 2xx, as [`UacConfig::record_answered`] keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnsweredCall {
    pub call_id: Bytes,
    /// When its first INVITE went out.
    pub started: Time,
    /// A 180 reached the caller before the 2xx.
    pub seen_180: bool,
}

impl UacConfig {
    pub fn new(local: SocketAddr, next_hop: SocketAddr, rate: f64) -> UacConfig {
        UacConfig {
            local,
            next_hop,
            transport: Transport::Udp,
            request_uri: format!("sip:service@{next_hop}"),
            schedule: Schedule::constant(rate),
            spacing: Spacing::Constant,
            seed: 1,
            duration: None,
            max_calls: None,
            hold: Hold::Constant(Duration::ZERO),
            max_in_progress: 100_000,
            setup_limit: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(40),
            delays_from: Duration::ZERO,
            delays_until: None,
            txn: sluice_txn::Config::default(),
            run_token: 0,
            invite_body: Bytes::new(),
            record_answered: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Inviting,
    /// ACK sent; BYE at the hangup time.
    Established,
    ByeSent,
}

#[derive(Debug)]
struct Call {
    started: Time,
    phase: Phase,
    seen_100: bool,
    seen_180: bool,
    /// The ACK for the 2xx, kept to answer its retransmissions.
    ack: Option<Bytes>,
    bye: Option<Bytes>,
    /// The call's latest client transaction (INVITE, then BYE); possibly ended since.
    tx: Option<ClientTxId>,
}

/// The UAC core. Drive it with [`Uac::handle_datagram`] (or [`Uac::handle_message`]) and
/// [`Uac::handle_timeout`]; take messages from [`Uac::poll_transmit`] and per-second rows
/// from [`Uac::poll_row`].
#[derive(Debug)]
pub struct Uac {
    cfg: UacConfig,
    /// `cfg.local` and `cfg.run_token` as written in every request.
    local: String,
    token: String,
    /// The Via's protocol and the Contact's URI parameters for `cfg.transport`.
    via: &'static [u8],
    contact_params: &'static [u8],
    txn: TransactionLayer,
    peer: Peer,
    arrivals: Arrivals,
    hold_rng: ChaCha8Rng,
    start: Time,
    next_call: u64,
    calls: HashMap<u64, Call>,
    tx_calls: HashMap<ClientTxId, u64>,
    hangups: BinaryHeap<Reverse<(Time, u64)>>,
    out: VecDeque<Out>,
    /// Calls that ended, for the driver (kept only over a reliable transport).
    ended_calls: VecDeque<u64>,
    /// The ACKs of answered calls that ended, to answer their 2xx retransmissions.
    ended_acks: EndedAcks,
    /// Set when the last call has started: the drain deadline runs from here.
    arrivals_ended: Option<Time>,
    done: bool,
    // Reporting.
    second: Counts,
    total: Counts,
    pdd_second: Delays,
    pdd_200: Delays,
    pdd_180: Delays,
    setup: Delays,
    next_row: Time,
    rows: VecDeque<SecondRow>,
    rows_dropped: u64,
    peak_in_progress: usize,
    messages_sent: u64,
    messages_received: u64,
    malformed_received: u64,
    unknown_call_responses: u64,
    late_provisionals: u64,
    ended: Option<Time>,
    answered: Vec<AnsweredCall>,
    answered_unrecorded: u64,
}

/// Rows kept while the driver does not take them.
const MAX_QUEUED_ROWS: usize = 3600;

/// The ACKs of calls that ended after their 2xx, each kept for 64*T1: a 2xx repeated after
/// the call's BYE was answered (its first ACK lost or late on the way) is still ACKed, as
/// RFC 3261 §13.2.2.4 asks for every 2xx and RFC 6026 keeps the INVITE's client transaction
/// for (Timer M). At most `limit` entries; the oldest go first, counted.
#[derive(Debug)]
struct EndedAcks {
    acks: HashMap<u64, Bytes>,
    by_age: VecDeque<(Time, u64)>,
    limit: usize,
    forgotten_early: u64,
}

impl EndedAcks {
    fn new(limit: usize) -> EndedAcks {
        EndedAcks {
            acks: HashMap::new(),
            by_age: VecDeque::new(),
            limit: limit.max(1),
            forgotten_early: 0,
        }
    }

    fn keep(&mut self, now: Time, call: u64, ack: Bytes, for_how_long: Duration) {
        while let Some(&(until, old)) = self.by_age.front() {
            let full = self.by_age.len() >= self.limit;
            if until > now && !full {
                break;
            }
            if until > now {
                self.forgotten_early += 1;
            }
            self.by_age.pop_front();
            self.acks.remove(&old);
        }
        self.by_age.push_back((now + for_how_long, call));
        self.acks.insert(call, ack);
    }

    fn get(&self, call: u64) -> Option<Bytes> {
        self.acks.get(&call).cloned()
    }
}

impl Uac {
    pub fn new(cfg: UacConfig, now: Time) -> Uac {
        let arrivals = Arrivals::new(
            cfg.schedule.clone(),
            cfg.spacing,
            cfg.seed,
            now,
            cfg.duration,
            cfg.max_calls,
        );
        Uac {
            txn: TransactionLayer::new(cfg.txn),
            peer: Peer {
                addr: cfg.next_hop,
                transport: cfg.transport,
            },
            hold_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_401d),
            arrivals,
            start: now,
            next_call: 0,
            calls: HashMap::new(),
            tx_calls: HashMap::new(),
            hangups: BinaryHeap::new(),
            out: VecDeque::new(),
            ended_calls: VecDeque::new(),
            ended_acks: EndedAcks::new(cfg.max_in_progress),
            arrivals_ended: None,
            done: false,
            second: Counts::default(),
            total: Counts::default(),
            pdd_second: Delays::default(),
            pdd_200: Delays::default(),
            pdd_180: Delays::default(),
            setup: Delays::default(),
            next_row: now + Duration::from_secs(1),
            rows: VecDeque::new(),
            rows_dropped: 0,
            peak_in_progress: 0,
            messages_sent: 0,
            messages_received: 0,
            malformed_received: 0,
            unknown_call_responses: 0,
            late_provisionals: 0,
            ended: None,
            answered: Vec::new(),
            answered_unrecorded: 0,
            local: sent_by(cfg.local),
            token: cfg.run_token.to_string(),
            via: match cfg.transport {
                Transport::Udp => b"Via: SIP/2.0/UDP ",
                Transport::Tcp => b"Via: SIP/2.0/TCP ",
            },
            contact_params: match cfg.transport {
                Transport::Udp => b"",
                Transport::Tcp => b";transport=tcp",
            },
            cfg,
        }
    }

    /// The calls [`UacConfig::record_answered`] kept, taken out.
    pub fn take_answered(&mut self) -> Vec<AnsweredCall> {
        std::mem::take(&mut self.answered)
    }

    /// True once every call has ended (or the drain timeout passed after the last start).
    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn in_progress(&self) -> usize {
        self.calls.len()
    }

    pub fn poll_transmit(&mut self) -> Option<Out> {
        self.out.pop_front()
    }

    pub fn poll_row(&mut self) -> Option<SecondRow> {
        self.rows.pop_front()
    }

    /// A call that ended (completed, failed or refused after its INVITE went out), so that
    /// a driver can close the connection it gave the call. Only over a reliable transport;
    /// a driver that takes none of them keeps one entry per call.
    pub fn poll_ended_call(&mut self) -> Option<u64> {
        self.ended_calls.pop_front()
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        if self.done {
            return None;
        }
        let mut t = self.next_row;
        for c in [
            self.arrivals.peek(),
            self.txn.poll_timeout(),
            self.hangups.peek().map(|Reverse((at, _))| *at),
            self.arrivals_ended.map(|e| e + self.cfg.drain_timeout),
        ]
        .into_iter()
        .flatten()
        {
            t = t.min(c);
        }
        Some(t)
    }

    /// Starts the calls that are due, sends the BYEs whose hold time is over, runs the
    /// transaction timers and closes the seconds that have passed.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.done {
            return;
        }
        // Seconds that ended before `now` close first: what happens at `now` belongs to the next.
        while self.next_row <= now {
            self.close_second();
        }
        self.txn.handle_timeout(now);
        self.drain(now);
        while self.arrivals.pop_due(now).is_some() {
            self.start_call(now);
        }
        if self.arrivals.peek().is_none() && self.arrivals_ended.is_none() {
            self.arrivals_ended = Some(now);
        }
        while let Some(&Reverse((at, call))) = self.hangups.peek() {
            if at > now {
                break;
            }
            self.hangups.pop();
            self.hang_up(now, call);
        }
        if let Some(ended) = self.arrivals_ended {
            if self.calls.is_empty() || now >= ended + self.cfg.drain_timeout {
                self.finish(now);
            }
        }
    }

    /// A datagram arrived from `from`.
    pub fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.handle_message(now, payload, Peer::udp(from));
    }

    /// A message arrived from `from`: a datagram, or one framed from a connection.
    pub fn handle_message(&mut self, now: Time, payload: Bytes, from: Peer) {
        while !self.done && self.next_row <= now {
            self.close_second();
        }
        self.messages_received += 1;
        let Ok(msg) = Message::parse(payload) else {
            self.malformed_received += 1;
            return;
        };
        let kind = Kind::of(&msg);
        if self.txn.handle_message(now, msg, from) == Received::Absorbed {
            self.count_retransmission_received(kind);
        }
        self.drain(now);
    }

    /// Sending something failed.
    pub fn handle_transport_error(&mut self, now: Time, origin: Option<Origin>) {
        if let Some(origin) = origin {
            self.txn.handle_transport_error(origin);
            self.drain(now);
        }
    }

    /// The connection that carried `call` (or, with `None`, every call) broke: the
    /// transactions waiting on it fail with a transport error, as a failed send does
    /// (RFC 3261 §18.4). A call between its ACK and BYE is untouched; its BYE goes out on
    /// whatever connection the driver has then.
    pub fn handle_connection_lost(&mut self, now: Time, call: Option<u64>) {
        let txs: Vec<ClientTxId> = if let Some(n) = call {
            self.calls.get(&n).and_then(|c| c.tx).into_iter().collect()
        } else {
            let mut txs: Vec<(u64, ClientTxId)> = self
                .calls
                .iter()
                .filter_map(|(&n, c)| Some((n, c.tx?)))
                .collect();
            // In call order, so that a run's counts do not depend on the map's order.
            txs.sort_unstable_by_key(|&(n, _)| n);
            txs.into_iter().map(|(_, tx)| tx).collect()
        };
        for tx in txs {
            // Ignored for a transaction that already ended.
            self.txn.handle_transport_error(Origin::Client(tx));
        }
        self.drain(now);
    }

    fn count_retransmission_received(&mut self, kind: Kind) {
        self.second.retransmissions_received.add(kind);
    }

    fn start_call(&mut self, now: Time) {
        if self.calls.len() >= self.cfg.max_in_progress {
            self.second.refused += 1;
            return;
        }
        let n = self.next_call;
        self.next_call += 1;
        let invite = self.request(b"INVITE", n, b'i', 1, None, None, None);
        let Ok(invite) = Message::parse(invite) else {
            self.second.refused += 1;
            return;
        };
        match self.txn.send_request(now, invite, self.peer) {
            Ok(tx) => {
                self.tx_calls.insert(tx, n);
                self.calls.insert(
                    n,
                    Call {
                        started: now,
                        phase: Phase::Inviting,
                        seen_100: false,
                        seen_180: false,
                        ack: None,
                        bye: None,
                        tx: Some(tx),
                    },
                );
                self.peak_in_progress = self.peak_in_progress.max(self.calls.len());
                self.second.offered += 1;
            }
            Err(_) => self.second.refused += 1,
        }
        self.drain(now);
    }

    fn hang_up(&mut self, now: Time, n: u64) {
        let Some(call) = self.calls.get_mut(&n) else {
            return;
        };
        let Some(bye) = call.bye.take() else {
            return;
        };
        call.phase = Phase::ByeSent;
        match Message::parse(bye) {
            Ok(bye) => match self.txn.send_request(now, bye, self.peer) {
                Ok(tx) => {
                    self.tx_calls.insert(tx, n);
                    if let Some(call) = self.calls.get_mut(&n) {
                        call.tx = Some(tx);
                    }
                }
                Err(_) => self.end_call(now, n, |c| c.failed.bye += 1),
            },
            Err(_) => self.end_call(now, n, |c| c.failed.bye += 1),
        }
        self.drain(now);
    }

    fn drain(&mut self, now: Time) {
        loop {
            let mut idle = true;
            while let Some(t) = self.txn.poll_transmit() {
                idle = false;
                if t.retransmission {
                    self.second
                        .retransmissions_sent
                        .add(Kind::of_wire(&t.payload));
                }
                self.messages_sent += 1;
                // Only a driver of connections needs the call (and UDP skips the lookup).
                let call = match t.origin {
                    Origin::Client(tx) if self.cfg.transport.is_reliable() => {
                        self.tx_calls.get(&tx).copied()
                    }
                    _ => None,
                };
                self.out.push_back(Out {
                    to: t.to.addr,
                    transport: t.to.transport,
                    payload: t.payload,
                    origin: Some(t.origin),
                    call,
                });
            }
            while let Some(e) = self.txn.poll_event() {
                idle = false;
                self.on_event(now, e);
            }
            if idle {
                break;
            }
        }
    }

    fn on_event(&mut self, now: Time, e: Event) {
        match e {
            Event::Response { tx, response } => {
                let Some(&n) = self.tx_calls.get(&tx) else {
                    return;
                };
                match response.cseq().map(|c| &c.method) {
                    Some(Method::Invite) => self.on_invite_response(now, n, &response),
                    Some(Method::Bye) => match response.status() {
                        Some(200..=299) => self.end_call(now, n, |c| c.completed += 1),
                        Some(300..) => self.end_call(now, n, |c| c.failed.bye += 1),
                        _ => {}
                    },
                    _ => {}
                }
            }
            Event::StrayResponse { response, .. } => {
                // A provisional after the 2xx ended the transaction was overtaken on the way
                // (e.g. by a proxy with several workers): late, not a retransmission.
                if response.status().is_some_and(|s| s < 200) {
                    self.late_provisionals += 1;
                    return;
                }
                self.count_retransmission_received(Kind::of(&response));
                // A repeated 2xx: ACK it again (§13.2.2.4).
                if let (Some(200..=299), Some(Method::Invite)) =
                    (response.status(), response.cseq().map(|c| &c.method))
                {
                    let n = call_number(&response);
                    let ack = n.and_then(|n| {
                        self.calls
                            .get(&n)
                            .and_then(|c| c.ack.clone())
                            .or_else(|| self.ended_acks.get(n))
                    });
                    match (n, ack) {
                        (Some(n), Some(ack)) => self.send_ack(n, ack, true),
                        _ => self.unknown_call_responses += 1,
                    }
                }
            }
            Event::Timeout {
                tx: TxId::Client(tx),
                ..
            } => {
                if let Some(&n) = self.tx_calls.get(&tx) {
                    self.fail_call(now, n, |c| &mut c.failed.timeout);
                }
            }
            Event::TransportError {
                origin: Origin::Client(tx),
            } => {
                if let Some(&n) = self.tx_calls.get(&tx) {
                    self.fail_call(now, n, |c| &mut c.failed.transport);
                }
            }
            Event::Terminated {
                tx: TxId::Client(tx),
            } => {
                self.tx_calls.remove(&tx);
            }
            Event::Request { tx, .. } => {
                // The generator's UAC takes no requests (a BYE from the far end would be
                // answered by a fuller UA); end the transaction rather than leave it open.
                self.txn.terminate_tx(TxId::Server(tx));
            }
            _ => {}
        }
    }

    /// Ends a call that failed: in the INVITE phase by `cause`, later as a BYE failure.
    fn fail_call(&mut self, now: Time, n: u64, cause: fn(&mut Counts) -> &mut u64) {
        let inviting = self
            .calls
            .get(&n)
            .is_some_and(|c| c.phase == Phase::Inviting);
        if inviting {
            self.end_call(now, n, |c| *cause(c) += 1);
        } else {
            self.end_call(now, n, |c| c.failed.bye += 1);
        }
    }

    fn end_call(&mut self, now: Time, n: u64, count: impl FnOnce(&mut Counts)) {
        if let Some(call) = self.calls.remove(&n) {
            if let Some(ack) = call.ack {
                self.ended_acks.keep(now, n, ack, 64 * self.cfg.txn.t1);
            }
            count(&mut self.second);
            if self.cfg.transport.is_reliable() {
                self.ended_calls.push_back(n);
            }
        }
    }

    fn on_invite_response(&mut self, now: Time, n: u64, response: &Message) {
        let Some(status) = response.status() else {
            return;
        };
        let Some(call) = self.calls.get_mut(&n) else {
            return;
        };
        let since = now.saturating_since(call.started);
        let in_window = call.started >= self.start + self.cfg.delays_from
            && self
                .cfg
                .delays_until
                .is_none_or(|until| call.started < self.start + until);
        match status {
            100 => {
                if std::mem::replace(&mut call.seen_100, true) {
                    self.second.retransmissions_received.add(Kind::Provisional);
                }
            }
            101..=199 => {
                if std::mem::replace(&mut call.seen_180, true) {
                    self.second.retransmissions_received.add(Kind::Provisional);
                } else if in_window {
                    self.pdd_180.record(since);
                }
            }
            200..=299 if call.phase == Phase::Inviting => {
                let started = call.started;
                if in_window {
                    self.pdd_200.record(since);
                }
                self.pdd_second.record(since);
                if in_window && self.cfg.record_answered {
                    match response.call_id() {
                        Some(id) if self.answered.len() < MAX_ANSWERED_RECORDS => {
                            self.answered.push(AnsweredCall {
                                call_id: Bytes::copy_from_slice(id),
                                started,
                                seen_180: self.calls.get(&n).is_some_and(|c| c.seen_180),
                            });
                        }
                        _ => self.answered_unrecorded += 1,
                    }
                }
                let (ack, bye) = self.dialog_requests(n, response);
                let call = self.calls.get_mut(&n).expect("looked up above");
                call.phase = Phase::Established;
                let seen_180 = call.seen_180;
                call.ack = Some(ack.clone());
                call.bye = Some(bye);
                self.send_ack(n, ack, false);
                // Setup ends when the ACK goes out (now).
                let setup = now.saturating_since(started);
                if in_window {
                    self.setup.record(setup);
                }
                if setup <= self.cfg.setup_limit {
                    self.second.successful += 1;
                    if seen_180 {
                        self.second.successful_with_180 += 1;
                    }
                } else {
                    self.second.failed.slow_setup += 1;
                }
                let hold = self.hold_time();
                if hold.is_zero() {
                    self.hang_up(now, n);
                } else {
                    self.hangups.push(Reverse((now + hold, n)));
                }
            }
            200..=299 => {}
            503 => self.end_call(now, n, |c| c.failed.rejected_503 += 1),
            408 => self.end_call(now, n, |c| c.failed.timeout += 1),
            _ => self.end_call(now, n, |c| c.failed.other_final += 1),
        }
    }

    fn send_ack(&mut self, n: u64, ack: Bytes, repeat: bool) {
        if repeat {
            self.second.retransmissions_sent.add(Kind::Ack);
        }
        self.messages_sent += 1;
        self.out.push_back(Out {
            to: self.cfg.next_hop,
            transport: self.cfg.transport,
            payload: ack,
            origin: None,
            call: Some(n),
        });
    }

    fn hold_time(&mut self) -> Duration {
        match self.cfg.hold {
            Hold::Constant(d) => d,
            Hold::Exponential(mean) if mean.is_zero() => Duration::ZERO,
            Hold::Exponential(mean) => {
                let exp = Exp::new(1.0 / mean.as_secs_f64()).expect("mean checked > 0");
                Duration::from_secs_f64(exp.sample(&mut self.hold_rng).min(1e6))
            }
        }
    }

    /// The ACK and BYE of the dialog a 2xx established: remote target from its Contact,
    /// route set from its Record-Route in reverse (RFC 3261 §12.1.2), To with the tag.
    fn dialog_requests(&self, n: u64, ok: &Message) -> (Bytes, Bytes) {
        let target = ok
            .header(HeaderName::Contact)
            .and_then(NameAddr::parse)
            .map(|na| na.uri.to_vec());
        let mut routes: Vec<&[u8]> = ok
            .header_values(HeaderName::RecordRoute)
            .filter_map(Result::ok)
            .collect();
        routes.reverse();
        let to = ok.header(HeaderName::To);
        let ack = self.request(b"ACK", n, b'a', 1, target.as_deref(), Some(&routes), to);
        let bye = self.request(b"BYE", n, b'b', 2, target.as_deref(), Some(&routes), to);
        (ack, bye)
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        method: &[u8],
        n: u64,
        branch_kind: u8,
        cseq: u32,
        target: Option<&[u8]>,
        routes: Option<&[&[u8]]>,
        to: Option<&[u8]>,
    ) -> Bytes {
        let mut num = itoa::Buffer::new();
        let n = num.format(n).as_bytes();
        let token = self.token.as_bytes();
        let local = self.local.as_bytes();
        let ruri = self.cfg.request_uri.as_bytes();
        let mut b = BytesMut::with_capacity(512);
        let mut put = |parts: &[&[u8]]| {
            for p in parts {
                b.put_slice(p);
            }
        };
        put(&[method, b" ", target.unwrap_or(ruri), b" SIP/2.0\r\n"]);
        put(&[
            self.via,
            local,
            b";branch=z9hG4bK-",
            token,
            b"-",
            n,
            &[b'-', branch_kind],
            b";rport\r\n",
        ]);
        for r in routes.unwrap_or_default() {
            put(&[b"Route: ", r, b"\r\n"]);
        }
        put(&[
            b"Max-Forwards: 70\r\nFrom: <sip:sluice@",
            local,
            b">;tag=",
            n,
            b"\r\nTo: ",
        ]);
        match to {
            Some(to) => put(&[to]),
            None => put(&[b"<", ruri, b">"]),
        }
        put(&[
            b"\r\nCall-ID: ",
            n,
            b"-",
            token,
            b"@sluice\r\nCSeq: ",
            itoa::Buffer::new().format(cseq).as_bytes(),
            b" ",
            method,
            b"\r\n",
        ]);
        if method == b"INVITE" {
            put(&[
                b"Contact: <sip:sluice@",
                local,
                self.contact_params,
                b">\r\n",
            ]);
        }
        let body = if method == b"INVITE" {
            &self.cfg.invite_body[..]
        } else {
            &[]
        };
        if body.is_empty() {
            put(&[b"Content-Length: 0\r\n\r\n"]);
        } else {
            put(&[
                b"Content-Type: ",
                sluice_sip::sdp::CONTENT_TYPE.as_bytes(),
                b"\r\nContent-Length: ",
                itoa::Buffer::new().format(body.len()).as_bytes(),
                b"\r\n\r\n",
                body,
            ]);
        }
        b.freeze()
    }

    fn close_second(&mut self) {
        // The row is labelled with the end of its interval; a final partial second rounds up.
        let second = self
            .next_row
            .saturating_since(self.start)
            .as_secs_f64()
            .ceil() as u64;
        let row = SecondRow {
            second,
            counts: self.second,
            pdd_p50_ms: self.pdd_second.quantile_ms(0.5),
            pdd_p99_ms: self.pdd_second.quantile_ms(0.99),
            in_progress: self.calls.len(),
        };
        self.total.accumulate(&self.second);
        self.second = Counts::default();
        self.pdd_second.reset();
        if self.rows.len() >= MAX_QUEUED_ROWS {
            self.rows.pop_front();
            self.rows_dropped += 1;
        }
        self.rows.push_back(row);
        self.next_row += Duration::from_secs(1);
    }

    /// Stops: the last, partial second becomes a row; calls still in progress are unfinished.
    fn finish(&mut self, now: Time) {
        if now > self.next_row - Duration::from_secs(1) {
            self.next_row = now;
            self.close_second();
        }
        self.ended = Some(now);
        self.done = true;
    }

    /// The run so far (complete once [`is_done`](Self::is_done)).
    pub fn summary(&self) -> UacSummary {
        Uac::summary_of(std::slice::from_ref(self))
    }

    /// One report for several UACs run side by side (`sluice load uac --threads`): counts
    /// and delay histograms added, the longest run's duration; `peak_in_progress` is the
    /// sum of each one's peak.
    pub fn summary_of(parts: &[Uac]) -> UacSummary {
        let mut counts = Counts::default();
        let mut pdd_200 = Delays::default();
        let mut pdd_180 = Delays::default();
        let mut setup = Delays::default();
        let mut s = UacSummary::default();
        for u in parts {
            counts.accumulate(&u.total);
            counts.accumulate(&u.second);
            pdd_200.merge(&u.pdd_200);
            pdd_180.merge(&u.pdd_180);
            setup.merge(&u.setup);
            s.duration_s = s.duration_s.max(
                u.ended
                    .unwrap_or(u.next_row)
                    .saturating_since(u.start)
                    .as_secs_f64(),
            );
            s.unfinished += u.calls.len() as u64;
            s.admitted_unanswered += u
                .calls
                .values()
                .filter(|c| c.phase == Phase::Inviting && (c.seen_100 || c.seen_180))
                .count() as u64;
            s.peak_in_progress += u.peak_in_progress;
            s.messages_sent += u.messages_sent;
            s.messages_received += u.messages_received;
            s.malformed_received += u.malformed_received;
            s.unknown_call_responses += u.unknown_call_responses;
            s.late_provisionals += u.late_provisionals;
            s.answered_unrecorded += u.answered_unrecorded;
            s.ended_acks_forgotten_early += u.ended_acks.forgotten_early;
            s.transaction_table_refusals += u.txn.stats().refused.table_full;
            s.rows_dropped += u.rows_dropped;
        }
        s.offered = counts.offered;
        s.successful = counts.successful;
        s.successful_with_180 = counts.successful_with_180;
        s.failed = counts.failed.total();
        s.failures = counts.failed;
        s.refused = counts.refused;
        s.completed = counts.completed;
        s.retransmissions_sent = counts.retransmissions_sent.total();
        s.retransmissions_received = counts.retransmissions_received.total();
        s.retransmissions_sent_by_type = counts.retransmissions_sent;
        s.retransmissions_received_by_type = counts.retransmissions_received;
        s.pdd_200 = pdd_200.summary();
        s.pdd_180 = pdd_180.summary();
        s.setup = setup.summary();
        s
    }
}

/// `addr` as a Via sent-by or URI host: without the port when it is 0.
fn sent_by(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) if a.port() == 0 => a.ip().to_string(),
        SocketAddr::V6(a) if a.port() == 0 => format!("[{}]", a.ip()),
        _ => addr.to_string(),
    }
}

/// The call number in a Call-ID this UAC wrote (`<n>-<token>@sluice`).
fn call_number(msg: &Message) -> Option<u64> {
    let id = msg.call_id()?;
    let end = id.iter().position(|&b| b == b'-')?;
    std::str::from_utf8(&id[..end]).ok()?.parse().ok()
}

/// The final report of a UAC run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UacSummary {
    pub duration_s: f64,
    pub offered: u64,
    pub successful: u64,
    /// Of `successful`, the calls whose 180 reached the caller (see [`Counts`]).
    pub successful_with_180: u64,
    /// Calls that failed to set up (the causes in `failures`; BYE failures not included).
    pub failed: u64,
    pub failures: crate::stats::Failures,
    pub refused: u64,
    pub completed: u64,
    /// Calls still in progress when the drain timeout ran out.
    pub unfinished: u64,
    /// Of `unfinished`, calls whose INVITE was admitted (a provisional came back) but got
    /// no final response: a proxy must end every INVITE it admits with one (RFC 3261
    /// §16.7-§16.9, its own 408 if need be), so at the end of a run this must be 0.
    pub admitted_unanswered: u64,
    pub retransmissions_sent: u64,
    pub retransmissions_received: u64,
    pub retransmissions_sent_by_type: crate::stats::KindCounts,
    pub retransmissions_received_by_type: crate::stats::KindCounts,
    /// Post-dial delay: INVITE to 200.
    pub pdd_200: DelaySummary,
    /// INVITE to the first 180.
    pub pdd_180: DelaySummary,
    /// INVITE to ACK.
    pub setup: DelaySummary,
    pub peak_in_progress: usize,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub malformed_received: u64,
    /// Responses for calls no longer known (e.g. a 2xx retransmitted after the call ended).
    pub unknown_call_responses: u64,
    /// Provisional responses that arrived after the call's 2xx (reordered on the way).
    pub late_provisionals: u64,
    pub transaction_table_refusals: u64,
    pub rows_dropped: u64,
    /// Answered calls [`UacConfig::record_answered`] could not keep (over its limit).
    pub answered_unrecorded: u64,
    /// ACKs of ended calls let go before 64*T1 because `max_in_progress` of them were kept:
    /// a 2xx repeated after that goes unanswered (an unknown call's response).
    pub ended_acks_forgotten_early: u64,
}

impl UacSummary {
    /// No failed, refused or unfinished call, no BYE failure and no retransmission either way.
    pub fn clean(&self) -> bool {
        self.failed == 0
            && self.failures.bye == 0
            && self.refused == 0
            && self.unfinished == 0
            && self.retransmissions_sent == 0
            && self.retransmissions_received == 0
    }
}
