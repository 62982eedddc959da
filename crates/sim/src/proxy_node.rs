//! A simulated SIP proxy: the product's own [`ProxyCore`] at a node of the topology. This
//! adapter only moves bytes and reports facts: datagrams in (with the simulator's
//! retransmission mark) and messages read from TCP connections, the core's transmits out
//! to the nodes or connections their addresses name, and the core's [`Record`]s into the
//! ledger. The receive stage, queue, processor, transaction user and overload control are
//! the core's, exactly as `sluice proxy` runs them.

use bytes::Bytes;
use sluice_proxy_core::{Lane, Processed, ProxyCore, Record, Transport};
use sluice_time::Time;
use std::net::SocketAddr;

use crate::ledger::flag;
use crate::net::{NodeId, Packet, Topology};
use crate::node::Cx;
use crate::wire;

/// What the ledger learns from a proxy: the RE reports its queue, processor and
/// rejections; an SE only its rejections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Se,
    Re,
}

#[derive(Debug)]
pub(crate) struct ProxyNode {
    pub id: NodeId,
    pub core: ProxyCore,
    place: Place,
    topo: Topology,
    /// The core's deadline as of the end of the last input (nothing changes it between
    /// then and the engine's question, and asking costs a look at every timer source).
    deadline: Option<Time>,
}

impl ProxyNode {
    pub fn new(id: NodeId, mut core: ProxyCore, place: Place, topo: Topology) -> Self {
        core.enable_records();
        Self {
            id,
            core,
            place,
            topo,
            deadline: None,
        }
    }

    pub fn on_packet(&mut self, cx: &mut Cx<'_>, packet: Packet) {
        let from = self.topo.peer(packet.from).addr;
        self.receive(cx, packet.bytes, from, packet.retrans, false);
    }

    /// A whole message read from a TCP connection whose remote address (as this node names
    /// it) is `from`.
    pub fn on_stream_message(
        &mut self,
        cx: &mut Cx<'_>,
        bytes: Bytes,
        from: SocketAddr,
        retrans: bool,
    ) {
        self.receive(cx, bytes, from, retrans, true);
    }

    fn receive(
        &mut self,
        cx: &mut Cx<'_>,
        bytes: Bytes,
        from: SocketAddr,
        retrans: bool,
        stream: bool,
    ) {
        let now = cx.now;
        if self.place == Place::Re {
            cx.ledger.re_arrival(now, retrans);
            if bytes.starts_with(b"INVITE ") {
                cx.ledger.re_invite_arrival(now);
            }
        }
        if stream {
            // The simulator's mark is for the ledger only: over TCP nothing is a copy of a
            // datagram.
            self.core.handle_stream_message(now, bytes, from);
        } else {
            self.core.handle_datagram_marked(now, bytes, from, retrans);
        }
        // Work the processor can finish at this instant (an SE's, with no emulated cost)
        // is done now, as the live shell does after a batch of datagrams.
        self.deadline = self.core.poll_timeout();
        let mut changed = false;
        if self.deadline.is_some_and(|t| t <= now) {
            self.core.handle_timeout(now);
            changed = true;
        }
        if self.flush(cx) || changed {
            self.deadline = self.core.poll_timeout();
        }
    }

    /// Whether the core's queue takes another message now (a stream reader asks before
    /// each one). Asking runs the processor up to now, which may send and record.
    pub fn has_room(&mut self, cx: &mut Cx<'_>) -> bool {
        let room = self.core.has_room(cx.now);
        self.flush(cx);
        self.deadline = self.core.poll_timeout();
        room
    }

    /// Smart forwarding's input: the bytes the connection to `to` on `lane` holds undelivered.
    pub fn send_queue(&mut self, to: SocketAddr, lane: Lane, unsent: usize) {
        self.core.handle_send_queue(to, lane, unsent);
    }

    /// A connection could not take a message of `origin` (its write queue was full): the
    /// core hears of it as the live shell tells it (§16.9).
    pub fn on_send_error(&mut self, cx: &mut Cx<'_>, origin: Option<sluice_txn::Origin>) {
        self.core.handle_send_error(cx.now, origin);
        self.flush(cx);
        self.deadline = self.core.poll_timeout();
    }

    pub fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.core.handle_timeout(cx.now);
        self.flush(cx);
        self.deadline = self.core.poll_timeout();
    }

    pub fn deadline(&self) -> Option<Time> {
        self.deadline
    }

    /// Hands the core's datagrams to the network and its records to the ledger. True when
    /// the core may have changed its deadline while doing so: an RE stamps fresh feedback
    /// on each retransmitted response as it leaves, which consults its feedback generator.
    fn flush(&mut self, cx: &mut Cx<'_>) -> bool {
        let mut restamped = false;
        while let Some(t) = self.core.poll_transmit() {
            restamped |= t.retransmission && self.place == Place::Re;
            // The proxy's own timers' copies are counted by kind, as every node's are.
            if t.retransmission && t.origin.is_some() {
                cx.ledger.retransmission(&t.payload);
            }
            if t.transport == Transport::Tcp {
                cx.send_stream(
                    self.id,
                    (t.to, t.lane),
                    (t.payload, t.retransmission),
                    t.origin,
                );
                continue;
            }
            match self.topo.node_of_addr(t.to) {
                Some(to) => cx.send(self.id, to, t.payload, t.retransmission),
                None => cx.ledger.malformed += 1,
            }
        }
        while let Some(r) = self.core.poll_record() {
            self.record(cx, r);
        }
        restamped
    }

    fn record(&self, cx: &mut Cx<'_>, record: Record) {
        match (self.place, record) {
            (Place::Re, Record::Dropped { at }) => cx.ledger.re_drop(at),
            (Place::Re, Record::Queue { at, waiting }) => cx.ledger.queue_level(at, waiting),
            (Place::Re, Record::Busy { start, end }) => cx.ledger.busy(start, end),
            (place, Record::Processed(p)) => processed(cx, place, &p),
            (Place::Se, _) => {}
        }
    }
}

fn call_of(call_id: &Bytes) -> Option<u32> {
    wire::call_of_call_id(call_id)
}

/// The facts of one processed message for the call ledger.
fn processed(cx: &mut Cx<'_>, place: Place, p: &Processed) {
    let rejected_invite = p.invite && p.rejected;
    match place {
        Place::Se if rejected_invite => {
            if let Some(call) = call_of(&p.call_id) {
                cx.ledger.mark(call, flag::REJECTED_BY_SE);
            }
        }
        Place::Se => {}
        Place::Re => {
            if p.session_start {
                cx.ledger
                    .invite_served(p.start, p.queueing_delay, p.rejected);
            }
            let mark = if rejected_invite {
                flag::REJECTED_BY_RE
            } else if p.status == Some(100) {
                // The callee's 100 Trying ends at the RE (hop by hop, §16.7 step 5).
                flag::TRYING_AT_RE
            } else {
                return;
            };
            if let Some(call) = call_of(&p.call_id) {
                cx.ledger.mark(call, mark);
            }
        }
    }
}
