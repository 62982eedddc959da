//! The user-agent populations of §4.1–4.2: each caller node stands for infinitely many
//! callers (one INVITE client transaction per call), the callee node for infinitely many
//! callees that answer at once with 100 Trying, 180 Ringing and 200 OK (Figure 1). Both
//! have infinite capacity: they act the instant a message arrives.
//!
//! All retransmissions come from `sluice_txn`: INVITE (Timer A) and BYE (Timer E) at the
//! caller, the callee's 2xx until the ACK (RFC 3261 §13.3.1.4). The caller's UA core
//! answers every repeated 200 with another ACK (§13.2.2.4) and hangs up with a BYE after
//! the call's exponential holding time. Over TCP (Shen and Schulzrinne 2010) the layers run
//! with `Peer::tcp`: no Timers A and E, only the 2xx retransmission until the ACK.

use bytes::Bytes;
use sluice_proxy_core::Lane;
use sluice_sip::{edit, Message, Method};
use sluice_txn::{Event, Origin, Peer, ServerTxId, TransactionLayer, Transmit, Transport, TxId};
use std::net::SocketAddr;

use crate::ledger::flag;
use crate::net::NodeId;
use crate::node::{Cx, Tu};
use crate::wire::{self, CallerTemplates};

/// A caller population behind SE `index`.
#[derive(Debug)]
pub(crate) struct Caller {
    pub id: NodeId,
    se: NodeId,
    /// The SE over UDP or, with `tcp.callers`, over one TCP connection.
    se_peer: Peer,
    pub txn: TransactionLayer,
    tpl: CallerTemplates,
}

impl Caller {
    pub fn new(
        cx_topo: crate::net::Topology,
        index: usize,
        txn: TransactionLayer,
        (tcp, body_bytes): (bool, usize),
    ) -> Self {
        let id = cx_topo.caller(index);
        let se = cx_topo.se(index);
        let udp = cx_topo.peer(se);
        Self {
            id,
            se,
            se_peer: if tcp { Peer::tcp(udp.addr) } else { udp },
            txn,
            tpl: CallerTemplates::new(
                cx_topo.ip(id),
                cx_topo.ip(se),
                cx_topo.ip(cx_topo.re()),
                tcp,
                sluice_sip::sdp::session_description(body_bytes, cx_topo.ip(id).into()),
            ),
        }
    }

    /// Hands a message for the SE to the network, on the caller's connection over TCP.
    fn send(&self, cx: &mut Cx<'_>, (bytes, retrans): (Bytes, bool), origin: Option<Origin>) {
        if self.se_peer.transport == Transport::Tcp {
            cx.send_stream(
                self.id,
                (self.se_peer.addr, Lane::Shared),
                (bytes, retrans),
                origin,
            );
        } else {
            cx.send(self.id, self.se, bytes, retrans);
        }
    }

    /// Sends the INVITE of a new call.
    pub fn start_call(&mut self, cx: &mut Cx<'_>, call: u32) {
        match Message::parse(self.tpl.invite(call)) {
            Ok(invite) => {
                // A refusal (full table) is counted in the layer's stats; the call fails.
                let _ = self.txn.send_request(cx.now, invite, self.se_peer);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
        self.drain(cx);
    }

    /// The holding time is over: BYE.
    pub fn hang_up(&mut self, cx: &mut Cx<'_>, call: u32) {
        if !cx.ledger.mark(call, flag::HUNG_UP) {
            return;
        }
        match Message::parse(self.tpl.bye(call)) {
            Ok(bye) => {
                let _ = self.txn.send_request(cx.now, bye, self.se_peer);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
        self.drain(cx);
    }

    pub fn on_message(&mut self, cx: &mut Cx<'_>, bytes: Bytes) {
        match Message::parse(bytes) {
            Ok(msg) => {
                self.txn.handle_message(cx.now, msg, self.se_peer);
                self.drain(cx);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
    }

    pub fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.txn.handle_timeout(cx.now);
        self.drain(cx);
    }

    fn ack(&mut self, cx: &mut Cx<'_>, call: u32, repeat: bool) {
        let ack = self.tpl.ack(call);
        if repeat {
            cx.ledger.retransmission(&ack);
        }
        self.send(cx, (ack, repeat), None);
    }
}

fn invite_response(msg: &Message) -> Option<(u32, u16)> {
    let status = msg.status()?;
    if msg.cseq()?.method != Method::Invite {
        return None;
    }
    Some((wire::call_of(msg)?, status))
}

impl Tu for Caller {
    fn txn(&mut self) -> &mut TransactionLayer {
        &mut self.txn
    }

    fn on_transmit(&mut self, cx: &mut Cx<'_>, t: Transmit) {
        self.send(cx, (t.payload, t.retransmission), Some(t.origin));
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, e: Event) {
        match e {
            Event::Response { response, .. } => {
                let Some((call, status)) = invite_response(&response) else {
                    return;
                };
                if status < 200 {
                    cx.ledger.provisional(cx.now, call);
                } else {
                    cx.ledger.mark(call, flag::FINAL_AT_CALLER);
                }
                match status {
                    180..=199 => {
                        cx.ledger.mark(call, flag::RINGING_AT_CALLER);
                    }
                    200..=299 if cx.ledger.mark(call, flag::OK_AT_CALLER) => {
                        cx.ledger.answered(cx.now, call);
                        self.ack(cx, call, false);
                        if let Some(rec) = cx.ledger.call(call) {
                            let at = cx.now + std::time::Duration::from_nanos(rec.hold_ns);
                            cx.hangups.push((at, call));
                        }
                    }
                    503 => {
                        cx.ledger.mark(call, flag::REJECTED_SEEN);
                    }
                    _ => {}
                }
            }
            Event::StrayResponse { response, .. } => {
                // A repeated 2xx: the UA core ACKs every copy (§13.2.2.4).
                if let Some((call, 200..=299)) = invite_response(&response) {
                    if cx.ledger.has(call, flag::OK_AT_CALLER) {
                        self.ack(cx, call, true);
                    }
                }
            }
            Event::Request { tx, .. } => {
                // Callers receive no requests in this model.
                self.txn.terminate_tx(TxId::Server(tx));
            }
            _ => {}
        }
    }
}

/// The callee population behind the RE.
#[derive(Debug)]
pub(crate) struct Callee {
    pub id: NodeId,
    re: NodeId,
    re_peer: Peer,
    pub txn: TransactionLayer,
    sends_trying: bool,
    /// The answer's session description (empty: none).
    body: Bytes,
}

impl Callee {
    pub fn new(
        topo: crate::net::Topology,
        txn: TransactionLayer,
        sends_trying: bool,
        body_bytes: usize,
    ) -> Self {
        Self {
            id: topo.callee(),
            re: topo.re(),
            re_peer: topo.peer(topo.re()),
            txn,
            sends_trying,
            body: sluice_sip::sdp::session_description(body_bytes, topo.ip(topo.callee()).into()),
        }
    }

    /// A message from the RE: a datagram (`from` is `None`), or read from the TCP
    /// connection whose remote address is `from`.
    pub fn on_message(&mut self, cx: &mut Cx<'_>, bytes: Bytes, from: Option<SocketAddr>) {
        let peer = from.map_or(self.re_peer, Peer::tcp);
        match Message::parse(bytes) {
            Ok(msg) => {
                self.txn.handle_message(cx.now, msg, peer);
                self.drain(cx);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
    }

    pub fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.txn.handle_timeout(cx.now);
        self.drain(cx);
    }

    fn answer(&mut self, cx: &mut Cx<'_>, tx: ServerTxId, request: &Message, from: Peer) {
        let Some(call) = wire::call_of(request) else {
            self.txn.terminate_tx(TxId::Server(tx));
            return;
        };
        // A repeated INVITE after the 2xx went out (RFC 3261 before RFC 6026 gives it a
        // new server transaction): the 2xx retransmission already answers it.
        if !cx.ledger.mark(call, flag::INVITE_AT_CALLEE) {
            self.txn.terminate_tx(TxId::Server(tx));
            return;
        }
        let now = cx.now;
        if self.sends_trying {
            let _ = self
                .txn
                .respond_bytes(now, tx, 100, edit::response_to(request, 100).build());
        }
        let tcp = from.transport == Transport::Tcp;
        let ringing = wire::callee_response(request, 180, tcp, b"");
        let _ = self.txn.respond_bytes(now, tx, 180, ringing);
        // The 2xx belongs to the UA core, which retransmits it until the ACK.
        self.txn.terminate_tx(TxId::Server(tx));
        let ok = wire::callee_response(request, 200, tcp, &self.body);
        match Message::parse(ok) {
            Ok(ok) => {
                let _ = self.txn.send_2xx_reliably(now, ok, from);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
    }
}

impl Tu for Callee {
    fn txn(&mut self) -> &mut TransactionLayer {
        &mut self.txn
    }

    fn on_transmit(&mut self, cx: &mut Cx<'_>, t: Transmit) {
        // Over TCP, back on the connection the request came in on.
        if t.to.transport == Transport::Tcp {
            cx.send_stream(
                self.id,
                (t.to.addr, Lane::Shared),
                (t.payload, t.retransmission),
                Some(t.origin),
            );
        } else {
            cx.send(self.id, self.re, t.payload, t.retransmission);
        }
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, e: Event) {
        match e {
            Event::Request {
                tx, request, from, ..
            } => match request.method() {
                Some(Method::Invite) => self.answer(cx, tx, &request, from),
                Some(Method::Bye) => {
                    let ok = edit::response_to(&request, 200).build();
                    let _ = self.txn.respond_bytes(cx.now, tx, 200, ok);
                }
                _ => {
                    let no = edit::response_to(&request, 501).build();
                    let _ = self.txn.respond_bytes(cx.now, tx, 501, no);
                }
            },
            Event::Ack2xx { request, .. } => {
                if let Some(call) = wire::call_of(&request) {
                    cx.ledger.ack_at_callee(cx.now, call);
                }
            }
            _ => {}
        }
    }
}
