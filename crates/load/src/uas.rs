//! The answering side, sans IO: 100 Trying and 180 Ringing at once, then 200 OK (after an
//! optional answer delay), retransmitted by the transaction layer until the ACK
//! (RFC 3261 §13.3.1.4); or, with a configured probability, 503. Every response echoes the
//! request's Record-Route (§12.1.1) and the 200 carries a Contact, so the caller's ACK and
//! BYE come back through a record-routing proxy. BYE ends the dialog with 200.
//!
//! Requests may come over UDP or TCP: responses go back over the transport (and, for the
//! driver, the connection) the request came on, and the 200's Contact says
//! `;transport=tcp` for a request that came over TCP. The 2xx is retransmitted until the
//! ACK over TCP too, as §13.3.1.4 asks, unless `txn.retransmit_2xx_over_reliable` is off.
//!
//! A dialog is remembered by Call-ID until its BYE (or, if none comes, for `dialog_ttl`), so
//! that an INVITE retransmitted after the 2xx ended the server transaction is recognised as a
//! retransmission rather than answered as a new call.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sluice_sip::{edit, Message, Method};
use sluice_time::Time;
use sluice_txn::{Event, Origin, Peer, Received, ServerTxId, TransactionLayer, Transport, TxId};

use crate::stats::{Kind, KindCounts};
use crate::Out;

#[derive(Clone, Debug)]
pub struct UasConfig {
    /// This side's address, written into Contact.
    pub local: SocketAddr,
    /// Written into Contact instead of `local`: where in-dialog requests reach this UAS
    /// when something sits in front of it (a relay impairing its link).
    pub contact: Option<SocketAddr>,
    /// Time between the INVITE and the 200 OK (provisionals go at once).
    pub answer_delay: Duration,
    /// Probability of answering an INVITE with 503 instead (for testing failure counting).
    pub reject_probability: f64,
    pub seed: u64,
    /// Most dialogs remembered (and answers pending) at once; INVITEs beyond are answered
    /// 503 and counted.
    pub max_dialogs: usize,
    /// A dialog that sees no BYE is forgotten after this long.
    pub dialog_ttl: Duration,
    pub txn: sluice_txn::Config,
    /// Whether an INVITE gets a 100 Trying before the 180 (a UAS need not send one, RFC
    /// 3261 §8.2.6.1; Shen and Schulzrinne's testbed did not, 2010 Fig. 13).
    pub sends_trying: bool,
    /// The 200 OK's session description ([`sluice_sip::sdp::session_description`]; empty:
    /// none).
    pub answer_body: Bytes,
    /// Keep the Call-ID and arrival of every ACK to a 2xx ([`Uas::take_acks`]),
    /// for a driver that also sees the callers' calls. At most `max_dialogs` records; the
    /// rest are counted (`acks_unrecorded`).
    pub record_acks: bool,
}

impl UasConfig {
    pub fn new(local: SocketAddr) -> UasConfig {
        UasConfig {
            local,
            contact: None,
            answer_delay: Duration::ZERO,
            reject_probability: 0.0,
            seed: 1,
            max_dialogs: 1 << 20,
            dialog_ttl: Duration::from_mins(5),
            txn: sluice_txn::Config::default(),
            sends_trying: true,
            answer_body: Bytes::new(),
            record_acks: false,
        }
    }
}

/// What the UAS did, for the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UasCounts {
    pub invites: u64,
    pub answered: u64,
    pub rejected_503: u64,
    /// INVITEs turned away because `max_dialogs` was reached (answered 503).
    pub refused: u64,
    pub acks: u64,
    pub byes: u64,
    /// BYEs for no known dialog (answered 481).
    pub unknown_byes: u64,
    /// Dialogs forgotten after `dialog_ttl` without a BYE.
    pub expired_dialogs: u64,
    /// 2xx never ACKed within 64*T1.
    pub unacked_2xx: u64,
    /// Final non-2xx responses never ACKed (Timer H).
    pub unacked_error: u64,
    pub other_requests: u64,
    pub messages_received: u64,
    pub messages_sent: u64,
    pub malformed_received: u64,
    pub retransmissions_sent: u64,
    pub retransmissions_received: u64,
    pub retransmissions_sent_by_type: KindCounts,
    pub retransmissions_received_by_type: KindCounts,
    /// Requests the transaction table refused (full).
    pub transaction_table_refusals: u64,
    /// ACKs [`UasConfig::record_acks`] could not keep (over its limit).
    pub acks_unrecorded: u64,
}

#[derive(Debug)]
struct PendingAnswer {
    due: Time,
    tx: ServerTxId,
    request: Message,
    from: Peer,
}

/// The UAS core; driven like [`crate::Uac`].
#[derive(Debug)]
pub struct Uas {
    cfg: UasConfig,
    contact: String,
    contact_tcp: String,
    txn: TransactionLayer,
    rng: ChaCha8Rng,
    /// Call-ID → when the INVITE arrived.
    dialogs: HashMap<Bytes, Time>,
    /// Call-IDs in arrival order, for expiry (entries whose dialog ended are skipped).
    expiry: VecDeque<(Time, Bytes)>,
    pending: VecDeque<PendingAnswer>,
    out: VecDeque<Out>,
    counts: UasCounts,
    /// Call-ID and arrival of each ACK that stopped a 2xx, when recorded.
    acks: Vec<(Bytes, Time)>,
}

impl Uas {
    pub fn new(cfg: UasConfig) -> Uas {
        let contact = cfg.contact.unwrap_or(cfg.local);
        Uas {
            contact: format!("<sip:uas@{contact}>"),
            contact_tcp: format!("<sip:uas@{contact};transport=tcp>"),
            txn: TransactionLayer::new(cfg.txn),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            dialogs: HashMap::new(),
            expiry: VecDeque::new(),
            pending: VecDeque::new(),
            out: VecDeque::new(),
            counts: UasCounts::default(),
            acks: Vec::new(),
            cfg,
        }
    }

    pub fn counts(&self) -> UasCounts {
        let mut c = self.counts;
        c.retransmissions_sent = c.retransmissions_sent_by_type.total();
        c.retransmissions_received = c.retransmissions_received_by_type.total();
        c.transaction_table_refusals = self.txn.stats().refused.table_full;
        c
    }

    /// The ACKs [`UasConfig::record_acks`] kept, taken out.
    pub fn take_acks(&mut self) -> Vec<(Bytes, Time)> {
        std::mem::take(&mut self.acks)
    }

    pub fn dialogs(&self) -> usize {
        self.dialogs.len()
    }

    /// Entries in the dialog expiry queue (a memory gauge: about the dialogs in progress).
    pub fn expiry_entries(&self) -> usize {
        self.expiry.len()
    }

    pub fn poll_transmit(&mut self) -> Option<Out> {
        self.out.pop_front()
    }

    pub fn poll_timeout(&mut self) -> Option<Time> {
        [
            self.txn.poll_timeout(),
            self.pending.front().map(|p| p.due),
            self.expiry.front().map(|(t, _)| *t + self.cfg.dialog_ttl),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn handle_timeout(&mut self, now: Time) {
        self.txn.handle_timeout(now);
        while self.pending.front().is_some_and(|p| p.due <= now) {
            let p = self.pending.pop_front().expect("checked");
            self.answer(now, p.tx, &p.request, p.from);
        }
        // Entries of dialogs that ended (BYE) go at once, so the queue stays about as long as
        // the calls in progress; a dialog still there after the TTL is forgotten.
        while let Some((t, id)) = self.expiry.front() {
            let live = self.dialogs.get(id) == Some(t);
            if live && *t + self.cfg.dialog_ttl > now {
                break;
            }
            let (_, id) = self.expiry.pop_front().expect("checked");
            if live {
                self.dialogs.remove(&id);
                self.counts.expired_dialogs += 1;
            }
        }
        self.drain(now);
    }

    pub fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.handle_message(now, payload, Peer::udp(from));
    }

    /// A message arrived from `from`: a datagram, or one framed from a connection.
    pub fn handle_message(&mut self, now: Time, payload: Bytes, from: Peer) {
        self.counts.messages_received += 1;
        let Ok(msg) = Message::parse(payload) else {
            self.counts.malformed_received += 1;
            return;
        };
        let kind = Kind::of(&msg);
        let r = self.txn.handle_message(now, msg, from);
        // The ACK for a 3xx–6xx is absorbed too, but it is no retransmission.
        if r == Received::Absorbed && kind != Kind::Ack {
            self.counts.retransmissions_received_by_type.add(kind);
        }
        self.drain(now);
    }

    pub fn handle_transport_error(&mut self, now: Time, origin: Option<Origin>) {
        if let Some(origin) = origin {
            self.txn.handle_transport_error(origin);
            self.drain(now);
        }
    }

    fn drain(&mut self, now: Time) {
        loop {
            let mut idle = true;
            while let Some(t) = self.txn.poll_transmit() {
                idle = false;
                if t.retransmission {
                    let kind = match t.origin {
                        Origin::Reliable2xx(_) => Kind::OkInvite,
                        _ => Kind::of_wire(&t.payload),
                    };
                    self.counts.retransmissions_sent_by_type.add(kind);
                }
                self.counts.messages_sent += 1;
                self.out.push_back(Out {
                    to: t.to.addr,
                    transport: t.to.transport,
                    payload: t.payload,
                    origin: Some(t.origin),
                    call: None,
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
            Event::Request {
                tx,
                request,
                from,
                cancels,
            } => match request.method() {
                Some(Method::Invite) => self.on_invite(now, tx, request, from),
                Some(Method::Bye) => {
                    self.counts.byes += 1;
                    let known = request
                        .call_id()
                        .is_some_and(|id| self.dialogs.remove(id).is_some());
                    let status = if known {
                        200
                    } else {
                        self.counts.unknown_byes += 1;
                        481
                    };
                    let resp = edit::response_to(&request, status).build();
                    let _ = self.txn.respond_bytes(now, tx, status, resp);
                }
                Some(Method::Cancel) => {
                    self.counts.other_requests += 1;
                    let resp = edit::response_to(&request, 200).build();
                    let _ = self.txn.respond_bytes(now, tx, 200, resp);
                    if let Some(invite) = cancels {
                        self.cancel_pending(now, invite);
                    }
                }
                _ => {
                    self.counts.other_requests += 1;
                    let resp = edit::response_to(&request, 501).build();
                    let _ = self.txn.respond_bytes(now, tx, 501, resp);
                }
            },
            Event::Ack2xx {
                stopped, request, ..
            } => {
                // Every ACK, whether or not its 2xx was still being retransmitted (the UAS
                // may have given it up, or failed to send it, before the ACK came): the
                // call's caller got the 2xx either way.
                if self.cfg.record_acks {
                    match request.call_id() {
                        Some(id) if self.acks.len() < self.cfg.max_dialogs => {
                            self.acks.push((Bytes::copy_from_slice(id), now));
                        }
                        _ => self.counts.acks_unrecorded += 1,
                    }
                }
                if stopped.is_some() {
                    self.counts.acks += 1;
                } else {
                    // The caller ACKs each copy of a retransmitted 2xx; the first stopped it.
                    self.counts.retransmissions_received_by_type.add(Kind::Ack);
                }
            }
            Event::GaveUp2xx { .. } => self.counts.unacked_2xx += 1,
            Event::Timeout {
                tx: TxId::Server(_),
                ..
            } => self.counts.unacked_error += 1,
            // Event::Refused is counted in the layer's stats (transaction_table_refusals);
            // nothing is sent, the caller's retransmission will try again.
            _ => {}
        }
    }

    fn on_invite(&mut self, now: Time, tx: ServerTxId, request: Message, from: Peer) {
        let Some(call_id) = request.call_id().map(Bytes::copy_from_slice) else {
            let resp = edit::response_to(&request, 400).build();
            let _ = self.txn.respond_bytes(now, tx, 400, resp);
            return;
        };
        if self.dialogs.contains_key(&call_id) {
            // Retransmitted after the 2xx ended its transaction: the 2xx retransmission
            // (or the dialog already confirmed) answers it.
            self.counts
                .retransmissions_received_by_type
                .add(Kind::Invite);
            self.txn.terminate_tx(TxId::Server(tx));
            return;
        }
        self.counts.invites += 1;
        if self.dialogs.len() >= self.cfg.max_dialogs {
            self.counts.refused += 1;
            self.reject(now, tx, &request);
            return;
        }
        if self.cfg.sends_trying {
            let _ = self
                .txn
                .respond_bytes(now, tx, 100, edit::response_to(&request, 100).build());
        }
        if self.cfg.reject_probability > 0.0
            && self.rng.gen_bool(self.cfg.reject_probability.min(1.0))
        {
            self.counts.rejected_503 += 1;
            self.reject(now, tx, &request);
            return;
        }
        let ringing = self.response(&request, 180, None);
        let _ = self.txn.respond_bytes(now, tx, 180, ringing);
        self.dialogs.insert(call_id.clone(), now);
        self.expiry.push_back((now, call_id));
        if self.cfg.answer_delay.is_zero() {
            self.answer(now, tx, &request, from);
        } else {
            self.pending.push_back(PendingAnswer {
                due: now + self.cfg.answer_delay,
                tx,
                request,
                from,
            });
        }
    }

    fn reject(&mut self, now: Time, tx: ServerTxId, request: &Message) {
        let resp = self.response(request, 503, None);
        let _ = self.txn.respond_bytes(now, tx, 503, resp);
    }

    fn cancel_pending(&mut self, now: Time, invite: ServerTxId) {
        if let Some(i) = self.pending.iter().position(|p| p.tx == invite) {
            let p = self.pending.remove(i).expect("index from position");
            if let Some(id) = p.request.call_id() {
                self.dialogs.remove(id);
            }
            let resp = self.response(&p.request, 487, None);
            let _ = self.txn.respond_bytes(now, invite, 487, resp);
        }
    }

    /// The 2xx belongs to the UA core (§13.3.1.4): the server transaction ends and the
    /// layer retransmits the 2xx until the ACK.
    fn answer(&mut self, now: Time, tx: ServerTxId, request: &Message, from: Peer) {
        self.txn.terminate_tx(TxId::Server(tx));
        let ok = self.response(request, 200, Some(from.transport));
        match Message::parse(ok) {
            Ok(ok) => match self.txn.send_2xx_reliably(now, ok, from) {
                Ok(_) => self.counts.answered += 1,
                Err(_) => self.counts.refused += 1,
            },
            Err(_) => self.counts.refused += 1,
        }
    }

    /// A response echoing the request's Record-Route; with `contact`, a Contact for in-dialog
    /// requests over that transport.
    fn response(&self, request: &Message, status: u16, contact: Option<Transport>) -> Bytes {
        let mut b = edit::response_to(request, status)
            .to_tag("sluice-uas")
            .record_route();
        match contact {
            Some(Transport::Udp) => b = b.header("Contact", self.contact.as_bytes()),
            Some(Transport::Tcp) => b = b.header("Contact", self.contact_tcp.as_bytes()),
            None => {}
        }
        if status == 200 && !self.cfg.answer_body.is_empty() {
            b = b.body(sluice_sip::sdp::CONTENT_TYPE, &self.cfg.answer_body);
        }
        b.build()
    }
}
