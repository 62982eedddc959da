//! A sending entity (SE, §2.2 and §4.2): a transaction-stateful edge proxy with infinite
//! capacity between one caller population and the RE. It asks its `sluice_control`
//! throttle whether to forward each new session to the RE (§2.4.2): a rejected INVITE is
//! answered with 503 at once; a forwarded or held one with 100 Trying at once (so callers
//! never retransmit), applies the feedback the RE piggybacks on its messages (§2.4.3), and, with
//! double feed, piggybacks its offered load on every message it sends the RE (§6.1.2).
//!
//! Responses are relayed on their server transaction; the end-to-end ACK and repeated 2xx
//! responses, which belong to no transaction, are relayed statelessly (RFC 3261 §16.7,
//! §16.11).

use bytes::Bytes;
use sluice_control::{FeedbackEnforcer, MessageSummary, RequestId, Throttle, ThrottleVerdict};
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::{Message, Method};
use sluice_txn::{ClientTxId, Event, Peer, ServerTxId, TransactionLayer, Transmit, TxId};

use crate::fx::FxHashMap;
use crate::ledger::flag;
use crate::net::{NodeId, Packet, Topology};
use crate::node::{Cx, Tu};
use crate::wire;

#[derive(Debug)]
pub(crate) struct Se {
    pub id: NodeId,
    caller: NodeId,
    re: NodeId,
    caller_peer: Peer,
    re_peer: Peer,
    ip: Vec<u8>,
    pub txn: TransactionLayer,
    pub throttle: Throttle,
    /// Client transaction towards the RE → server transaction from the caller.
    c2s: FxHashMap<ClientTxId, ServerTxId>,
    /// Keep mode: held INVITEs by request id (the call number). Bounded by the
    /// throttle's hold limit, which never holds more than that.
    held: FxHashMap<u64, (ServerTxId, Message)>,
    hold_limit: usize,
    pub hold_full: u64,
    via: Vec<u8>,
    /// The datagram being handled was a retransmission (relayed statelessly as one).
    cur_retrans: bool,
}

impl Se {
    pub fn new(
        topo: Topology,
        index: usize,
        txn: TransactionLayer,
        throttle: Throttle,
        hold_limit: usize,
    ) -> Self {
        let id = topo.se(index);
        Self {
            id,
            caller: topo.caller(index),
            re: topo.re(),
            caller_peer: topo.peer(topo.caller(index)),
            re_peer: topo.peer(topo.re()),
            ip: topo.ip(id).to_string().into_bytes(),
            txn,
            throttle,
            c2s: FxHashMap::default(),
            held: FxHashMap::default(),
            hold_limit,
            hold_full: 0,
            via: Vec::with_capacity(96),
            cur_retrans: false,
        }
    }

    pub fn on_packet(&mut self, cx: &mut Cx<'_>, packet: Packet) {
        let from_re = packet.from == self.re;
        if from_re {
            if let Some(fb) = packet.feedback {
                self.throttle.on_feedback(cx.now, &fb);
                self.release(cx);
            }
        }
        self.cur_retrans = packet.retrans;
        match Message::parse(packet.bytes) {
            Ok(msg) => {
                let peer = if from_re {
                    self.re_peer
                } else {
                    self.caller_peer
                };
                self.txn.handle_message(cx.now, msg, peer);
                self.drain(cx);
            }
            Err(_) => cx.ledger.malformed += 1,
        }
        self.cur_retrans = false;
    }

    pub fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.txn.handle_timeout(cx.now);
        self.throttle.handle_timeout(cx.now);
        self.release(cx);
        self.drain(cx);
    }

    pub fn deadline(&mut self) -> Option<sluice_time::Time> {
        match (self.txn.poll_timeout(), self.throttle.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sends what the throttle released from the hold queue.
    fn release(&mut self, cx: &mut Cx<'_>) {
        while let Some(id) = self.throttle.poll_release() {
            if let Some((tx, request)) = self.held.remove(&id.0) {
                self.forward(cx, tx, &request);
            }
        }
    }

    /// Forwards a request to the RE on a new client transaction.
    fn forward(&mut self, cx: &mut Cx<'_>, tx: ServerTxId, request: &Message) {
        let branch = request.top_via_branch().unwrap_or(b"z9hG4bK");
        wire::proxy_via(&mut self.via, &self.ip, branch, b's');
        let bytes = edit::forward_request(
            request,
            &RequestEdits {
                push_via: Some(&self.via),
                decrement_max_forwards: true,
                ..RequestEdits::default()
            },
        );
        let Ok(msg) = Message::parse(bytes) else {
            cx.ledger.malformed += 1;
            return;
        };
        if let Ok(client) = self.txn.send_request(cx.now, msg, self.re_peer) {
            self.c2s.insert(client, tx);
        } else {
            let busy = edit::response_to(request, 503).build();
            let _ = self.txn.respond_bytes(cx.now, tx, 503, busy);
        }
    }

    fn reject(&mut self, cx: &mut Cx<'_>, tx: ServerTxId, request: &Message, call: Option<u32>) {
        let busy = edit::response_to(request, 503).build();
        let _ = self.txn.respond_bytes(cx.now, tx, 503, busy);
        if let Some(call) = call {
            cx.ledger.mark(call, flag::REJECTED_BY_SE);
        }
    }

    fn on_invite(&mut self, cx: &mut Cx<'_>, tx: ServerTxId, request: Message) {
        let call = wire::call_of(&request);
        let id = RequestId(call.map_or(u64::MAX, u64::from));
        let verdict = self
            .throttle
            .admit(cx.now, id, &MessageSummary::new_session(None));
        if verdict == ThrottleVerdict::Reject {
            // Decided at once: the 503 is the first response, no 100 Trying needed
            // (RFC 3261 §17.2.1 asks for a 100 only when the TU may take over 200 ms).
            self.reject(cx, tx, &request, call);
            return;
        }
        let trying = edit::response_to(&request, 100).build();
        let _ = self.txn.respond_bytes(cx.now, tx, 100, trying);
        if verdict == ThrottleVerdict::Forward {
            self.forward(cx, tx, &request);
        } else if self.held.len() < self.hold_limit && !self.held.contains_key(&id.0) {
            self.held.insert(id.0, (tx, request));
        } else {
            self.hold_full += 1;
            self.reject(cx, tx, &request, call);
        }
    }

    /// Relays a message statelessly, pushing this proxy's Via on requests.
    fn relay_request(&mut self, cx: &mut Cx<'_>, request: &Message) {
        let branch = request.top_via_branch().unwrap_or(b"z9hG4bK");
        wire::proxy_via(&mut self.via, &self.ip, branch, b's');
        let bytes = edit::forward_request(
            request,
            &RequestEdits {
                push_via: Some(&self.via),
                decrement_max_forwards: true,
                ..RequestEdits::default()
            },
        );
        self.send_to_re(cx, bytes, self.cur_retrans);
    }

    fn send_to_re(&mut self, cx: &mut Cx<'_>, bytes: Bytes, retrans: bool) {
        cx.send(self.id, self.re, bytes, retrans);
        if let Some(last) = cx.sends.last_mut() {
            last.packet.feed_forward = self.throttle.feed_forward(cx.now);
        }
    }
}

impl Tu for Se {
    fn txn(&mut self) -> &mut TransactionLayer {
        &mut self.txn
    }

    fn on_transmit(&mut self, cx: &mut Cx<'_>, t: Transmit) {
        if t.to == self.re_peer {
            self.send_to_re(cx, t.payload, t.retransmission);
        } else {
            cx.send(self.id, self.caller, t.payload, t.retransmission);
        }
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, e: Event) {
        match e {
            Event::Request { tx, request, .. } => match request.method() {
                Some(Method::Invite) => self.on_invite(cx, tx, request),
                Some(_) => self.forward(cx, tx, &request),
                None => {}
            },
            Event::Response { tx, response } => {
                let Some(&server) = self.c2s.get(&tx) else {
                    return;
                };
                let status = response.status().unwrap_or(0);
                // 100 Trying is hop by hop (§16.7 step 5): not relayed.
                if status > 100 {
                    let bytes = edit::forward_response(
                        &response,
                        &ResponseEdits {
                            pop_via: true,
                            ..ResponseEdits::default()
                        },
                    );
                    let _ = self.txn.respond_bytes(cx.now, server, status, bytes);
                }
            }
            // A repeated 2xx from the RE: relay it statelessly to the caller.
            Event::StrayResponse { response, .. } if wire::second_via_ip(&response).is_some() => {
                let bytes = edit::forward_response(
                    &response,
                    &ResponseEdits {
                        pop_via: true,
                        ..ResponseEdits::default()
                    },
                );
                cx.send(self.id, self.caller, bytes, self.cur_retrans);
            }
            Event::Ack2xx { request, from, .. } if from == self.caller_peer => {
                self.relay_request(cx, &request);
            }
            Event::Timeout {
                tx: TxId::Client(client),
                ..
            } => {
                // The RE never answered: give up on the caller's transaction too (its own
                // Timer B/F reports the failure).
                if let Some(server) = self.c2s.remove(&client) {
                    self.txn.terminate_tx(TxId::Server(server));
                }
            }
            Event::Terminated {
                tx: TxId::Client(client),
            } => {
                self.c2s.remove(&client);
            }
            _ => {}
        }
    }
}
