//! The receiving entity (RE, §4.2): the overloaded, transaction-stateful proxy. Its
//! receive stage is free; behind it a bounded FIFO queue (500 messages) feeds one
//! processor that serves each message in `1/service_rate` (2 ms) or, for a new INVITE it
//! rejects, in `1/reject_rate` (1/3000 s). Only at the end of service does the message
//! reach the RE's transaction layer and proxy logic, whose output leaves at once; sends
//! triggered by the RE's own transaction timers cost no processor time.
//!
//! Overload control hooks follow `sluice_control`'s driver sequence: feed-forward and
//! `on_arrival` at the receive stage, local admission (threshold rejection, §4.3) before
//! the queue, `on_queue` on every queue change, `on_processed` at the end of service, and
//! `feedback_for` on every message sent to an SE (piggybacked feedback, §2.4.3). With
//! `none`, a full queue simply drops (§4.3, "simple drop").

use bytes::Bytes;
use sluice_control::{
    AdmissionVerdict, AnyFeedbackGenerator, AnyLocalAdmission, Completion, FeedbackGenerator,
    LocalAdmission, MessageClass, MessageSummary, NeighbourId, QueueOccupancy,
};
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::{Message, Method};
use sluice_time::Time;
use sluice_txn::{ClientTxId, Event, Peer, Received, ServerTxId, TransactionLayer, Transmit, TxId};
use std::collections::VecDeque;
use std::time::Duration;

use crate::fx::{hash_bytes, FxHashMap, FxHashSet};
use crate::ledger::flag;
use crate::net::{NodeId, Packet, Role, Topology};
use crate::node::{Cx, Tu};
use crate::wire;

/// A message waiting for the processor.
#[derive(Debug)]
struct Queued {
    msg: Message,
    from: NodeId,
    arrived: Time,
    summary: MessageSummary,
    /// Local admission said reject: the processor answers 503 at the rejection cost.
    reject: bool,
    retrans: bool,
}

/// What the processor works on: a message, or a slice of another process's load `d`.
// Only one `InService` exists at a time, so boxing the message would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Work {
    Message(Queued),
    Background,
}

#[derive(Debug)]
struct InService {
    work: Work,
    started: Time,
    cost: Duration,
}

/// The receive stage's memory of INVITEs already seen, so that a retransmission is not
/// taken for a new session (§3.5) even while its original still waits in the queue.
/// Entries expire after 64·T1, when no copy can still be in flight.
#[derive(Debug)]
struct InviteMemory {
    seen: FxHashSet<u64>,
    order: VecDeque<(Time, u64)>,
    ttl: Duration,
    limit: usize,
    full: u64,
}

impl InviteMemory {
    /// True if `key` was not seen before.
    fn first_sight(&mut self, now: Time, key: u64) -> bool {
        while let Some(&(t, k)) = self.order.front() {
            if t + self.ttl > now {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&k);
        }
        if self.seen.contains(&key) {
            return false;
        }
        if self.seen.len() >= self.limit {
            self.full += 1;
            return true;
        }
        self.seen.insert(key);
        self.order.push_back((now, key));
        true
    }
}

#[derive(Debug)]
pub(crate) struct Re {
    pub id: NodeId,
    topo: Topology,
    callee: NodeId,
    callee_peer: Peer,
    ip: Vec<u8>,
    pub txn: TransactionLayer,
    pub feedback: AnyFeedbackGenerator,
    admission: AnyLocalAdmission,
    queue: VecDeque<Queued>,
    capacity: usize,
    /// De Cicco et al.'s INVITE queue (`re.invite_queue`); `queue` then holds the rest.
    split: bool,
    invite_queue: VecDeque<Queued>,
    invite_capacity: usize,
    occupancy: QueueOccupancy,
    in_service: Option<InService>,
    invite_cost: Duration,
    other_cost: Duration,
    reject_cost: Duration,
    /// Background load `d`: one job of `background_cost` every `BACKGROUND_PERIOD`.
    background_cost: Duration,
    next_background: Option<Time>,
    background_due: bool,
    /// When the PI's drain budget next allows an INVITE (only while the processor idles
    /// with INVITEs waiting).
    drain_wake: Option<Time>,
    c2s: FxHashMap<ClientTxId, ServerTxId>,
    invites: InviteMemory,
    /// Sends of the current step, held until feedback can be attached.
    pending: Vec<(NodeId, Bytes, bool)>,
    via: Vec<u8>,
    cur_retrans: bool,
    cur_reject: bool,
    accepted: bool,
}

/// The background job's period: the PI's sampling interval, fine enough that the CPU
/// measurements see a steady `d`.
const BACKGROUND_PERIOD: Duration = Duration::from_millis(10);

fn seconds_to_duration(s: f64) -> Duration {
    Duration::from_nanos((s * 1.0e9).round().max(0.0) as u64)
}

impl Re {
    pub fn new(
        topo: Topology,
        txn: TransactionLayer,
        feedback: AnyFeedbackGenerator,
        admission: AnyLocalAdmission,
        re: &crate::scenario::ReConfig,
    ) -> Self {
        let id = topo.re();
        let ttl = txn.config().t1_x64();
        Self {
            id,
            topo,
            callee: topo.callee(),
            callee_peer: topo.peer(topo.callee()),
            ip: topo.ip(id).to_string().into_bytes(),
            txn,
            feedback,
            admission,
            queue: VecDeque::with_capacity(re.queue_capacity as usize),
            capacity: re.queue_capacity as usize,
            split: re.invite_queue,
            invite_queue: VecDeque::new(),
            invite_capacity: re.invite_queue_capacity as usize,
            occupancy: QueueOccupancy::default(),
            in_service: None,
            invite_cost: seconds_to_duration(re.invite_cost_s()),
            other_cost: seconds_to_duration(re.other_cost_s()),
            reject_cost: seconds_to_duration(re.reject_cost_s()),
            background_cost: seconds_to_duration(
                re.background_load * BACKGROUND_PERIOD.as_secs_f64(),
            ),
            next_background: (re.background_load > 0.0).then_some(Time::ZERO),
            background_due: false,
            drain_wake: None,
            c2s: FxHashMap::default(),
            invites: InviteMemory {
                seen: FxHashSet::default(),
                order: VecDeque::new(),
                ttl,
                limit: 1 << 22,
                full: 0,
            },
            pending: Vec::with_capacity(8),
            via: Vec::with_capacity(96),
            cur_retrans: false,
            cur_reject: false,
            accepted: false,
        }
    }

    pub fn invite_memory_full(&self) -> u64 {
        self.invites.full
    }

    pub fn deadline(&mut self) -> Option<Time> {
        [
            self.txn.poll_timeout(),
            self.feedback.poll_timeout(),
            self.admission.poll_timeout(),
            self.drain_wake,
            self.next_background,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The receive stage. Returns when a service that this arrival started ends.
    pub fn on_packet(&mut self, cx: &mut Cx<'_>, packet: Packet) -> Option<Time> {
        let now = cx.now;
        cx.ledger.re_arrival(now, packet.retrans);
        let Ok(msg) = Message::parse(packet.bytes) else {
            cx.ledger.malformed += 1;
            return None;
        };
        let source = match self.topo.role(packet.from) {
            Role::Se(i) => Some(NeighbourId(i as u32)),
            _ => None,
        };
        if let (Some(n), Some(ff)) = (source, packet.feed_forward) {
            self.feedback.on_feed_forward(now, n, ff);
        }
        let summary = match msg.method() {
            Some(Method::Invite) => {
                cx.ledger.re_invite_arrival(now);
                let key = hash_bytes(msg.top_via_branch().unwrap_or_default());
                MessageSummary {
                    class: MessageClass::Invite,
                    starts_session: self.invites.first_sight(now, key),
                    source,
                }
            }
            Some(_) => MessageSummary::other_request(source),
            None => MessageSummary::response(source),
        };
        self.feedback.on_arrival(now, &summary);
        let queue_len = if self.split {
            self.invite_queue.len()
        } else {
            self.queue.len()
        };
        let verdict = self.admission.on_arrival(now, queue_len, &summary);
        let reject = verdict == AdmissionVerdict::Reject;
        let queued = Queued {
            msg,
            from: packet.from,
            arrived: now,
            summary,
            reject,
            retrans: packet.retrans,
        };
        if self.split && summary.class == MessageClass::Invite && !reject {
            if self.invite_queue.len() >= self.invite_capacity {
                cx.ledger.re_drop(now);
                return None;
            }
            self.occupancy.invites += 1;
            self.invite_queue.push_back(queued);
        } else {
            if self.queue.len() >= self.capacity {
                cx.ledger.re_drop(now);
                return None;
            }
            // In the split structure the INVITE count is the INVITE queue's alone.
            if summary.class == MessageClass::Invite && !self.split {
                self.occupancy.invites += 1;
            } else {
                self.occupancy.non_invites += 1;
            }
            self.queue.push_back(queued);
        }
        self.queue_changed(cx);
        self.start_next(cx)
    }

    fn waiting(&self) -> usize {
        self.queue.len() + self.invite_queue.len()
    }

    fn queue_changed(&mut self, cx: &mut Cx<'_>) {
        self.feedback.on_queue(cx.now, self.occupancy);
        self.admission.on_queue(cx.now, self.occupancy);
        cx.ledger.queue_level(cx.now, self.waiting());
    }

    /// Starts the next piece of work if the processor is idle: background load first,
    /// then the FIFO (in the split structure: everything but admitted INVITEs), then the
    /// INVITE queue, through the drain controller when the policy has one. Returns when
    /// the started work ends.
    fn start_next(&mut self, cx: &mut Cx<'_>) -> Option<Time> {
        if self.in_service.is_some() {
            return None;
        }
        self.drain_wake = None;
        if self.background_due {
            self.background_due = false;
            return Some(self.begin(cx.now, Work::Background, self.background_cost));
        }
        let q = if let Some(q) = self.queue.pop_front() {
            if q.summary.class == MessageClass::Invite && !self.split {
                self.occupancy.invites -= 1;
            } else {
                self.occupancy.non_invites -= 1;
            }
            q
        } else {
            let head = self.invite_queue.front()?.summary;
            let mut reject = false;
            if let Some(drain) = self.admission.drain_mut() {
                let Some(verdict) = drain.take(cx.now, &head) else {
                    self.drain_wake = drain.next_drain(cx.now);
                    return None;
                };
                reject = verdict == AdmissionVerdict::Reject;
            }
            let mut q = self.invite_queue.pop_front()?;
            q.reject = reject;
            self.occupancy.invites -= 1;
            q
        };
        self.queue_changed(cx);
        let cost = if q.reject {
            self.reject_cost
        } else if q.summary.class == MessageClass::Invite {
            self.invite_cost
        } else {
            self.other_cost
        };
        Some(self.begin(cx.now, Work::Message(q), cost))
    }

    fn begin(&mut self, now: Time, work: Work, cost: Duration) -> Time {
        self.in_service = Some(InService {
            work,
            started: now,
            cost,
        });
        now + cost
    }

    /// The processor finished its message. Returns when the next service ends.
    pub fn on_service_done(&mut self, cx: &mut Cx<'_>) -> Option<Time> {
        let InService {
            work,
            started,
            cost,
        } = self.in_service.take()?;
        let now = cx.now;
        cx.ledger.busy(started, now);
        let Work::Message(q) = work else {
            // Other processes' load: the CPU measurements see it, the SIP logic does not.
            self.admission.on_processed(
                now,
                &Completion {
                    message: MessageSummary::other_request(None),
                    service_time: cost,
                    queueing_delay: Duration::ZERO,
                    session_accepted: false,
                },
            );
            return self.start_next(cx);
        };
        self.cur_retrans = q.retrans;
        self.cur_reject = q.reject;
        self.accepted = false;
        let peer = self.topo.peer(q.from);
        let received = self.txn.handle_message(now, q.msg, peer);
        self.drain(cx);
        let message = MessageSummary {
            starts_session: q.summary.class == MessageClass::Invite
                && received == Received::NewTransaction,
            ..q.summary
        };
        let completion = Completion {
            message,
            service_time: cost,
            queueing_delay: started - q.arrived,
            session_accepted: self.accepted,
        };
        self.feedback.on_processed(now, &completion);
        self.admission.on_processed(now, &completion);
        if message.is_session_start() {
            cx.ledger
                .invite_served(started, completion.queueing_delay, q.reject);
        }
        self.cur_retrans = false;
        self.cur_reject = false;
        self.flush(cx);
        self.start_next(cx)
    }

    /// Timers: the transaction layer's, the controllers', the drain budget and the
    /// background load. Returns when a service this started ends.
    pub fn on_timeout(&mut self, cx: &mut Cx<'_>) -> Option<Time> {
        self.txn.handle_timeout(cx.now);
        self.feedback.handle_timeout(cx.now);
        self.admission.handle_timeout(cx.now);
        if let Some(at) = self.next_background.filter(|&at| at <= cx.now) {
            self.background_due = true;
            self.next_background = Some(at + BACKGROUND_PERIOD);
        }
        self.drain(cx);
        self.flush(cx);
        self.start_next(cx)
    }

    /// Sends what the step produced, with feedback on everything bound for an SE.
    fn flush(&mut self, cx: &mut Cx<'_>) {
        for (to, bytes, retrans) in self.pending.drain(..) {
            cx.send(self.id, to, bytes, retrans);
            if let Role::Se(i) = self.topo.role(to) {
                let fb = self.feedback.feedback_for(cx.now, NeighbourId(i as u32));
                if let Some(last) = cx.sends.last_mut() {
                    last.packet.feedback = fb;
                }
            }
        }
    }

    fn forward(&mut self, cx: &mut Cx<'_>, tx: ServerTxId, request: &Message) -> bool {
        let branch = request.top_via_branch().unwrap_or(b"z9hG4bK");
        wire::proxy_via(&mut self.via, &self.ip, branch, b'r');
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
            return false;
        };
        if let Ok(client) = self.txn.send_request(cx.now, msg, self.callee_peer) {
            self.c2s.insert(client, tx);
            true
        } else {
            let busy = edit::response_to(request, 503).build();
            let _ = self.txn.respond_bytes(cx.now, tx, 503, busy);
            false
        }
    }
}

impl Tu for Re {
    fn txn(&mut self) -> &mut TransactionLayer {
        &mut self.txn
    }

    fn on_transmit(&mut self, cx: &mut Cx<'_>, t: Transmit) {
        match self.topo.node_of(t.to) {
            Some(to) => self.pending.push((to, t.payload, t.retransmission)),
            None => cx.ledger.malformed += 1,
        }
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, e: Event) {
        match e {
            Event::Request { tx, request, .. } => match request.method() {
                Some(Method::Invite) => {
                    let call = wire::call_of(&request);
                    if self.cur_reject {
                        let busy = edit::response_to(&request, 503).build();
                        let _ = self.txn.respond_bytes(cx.now, tx, 503, busy);
                        if let Some(call) = call {
                            cx.ledger.mark(call, flag::REJECTED_BY_RE);
                        }
                    } else {
                        let trying = edit::response_to(&request, 100).build();
                        let _ = self.txn.respond_bytes(cx.now, tx, 100, trying);
                        self.accepted = self.forward(cx, tx, &request);
                    }
                }
                Some(_) => {
                    self.forward(cx, tx, &request);
                }
                None => {}
            },
            Event::Response { tx, response } => {
                let status = response.status().unwrap_or(0);
                if status == 100 {
                    // The callee's 100 Trying ends here (hop by hop, §16.7 step 5).
                    if let Some(call) = wire::call_of(&response) {
                        cx.ledger.mark(call, flag::TRYING_AT_RE);
                    }
                    return;
                }
                let Some(&server) = self.c2s.get(&tx) else {
                    return;
                };
                let bytes = edit::forward_response(
                    &response,
                    &ResponseEdits {
                        pop_via: true,
                        ..ResponseEdits::default()
                    },
                );
                let _ = self.txn.respond_bytes(cx.now, server, status, bytes);
            }
            Event::StrayResponse { response, .. } => {
                // A repeated 2xx from the callee: relay statelessly along the Via.
                let Some(to) =
                    wire::second_via_ip(&response).and_then(|ip| self.topo.node_of_ip(ip))
                else {
                    return;
                };
                let bytes = edit::forward_response(
                    &response,
                    &ResponseEdits {
                        pop_via: true,
                        ..ResponseEdits::default()
                    },
                );
                self.pending.push((to, bytes, self.cur_retrans));
            }
            Event::Ack2xx { request, .. } => {
                let branch = request.top_via_branch().unwrap_or(b"z9hG4bK");
                wire::proxy_via(&mut self.via, &self.ip, branch, b'r');
                let bytes = edit::forward_request(
                    &request,
                    &RequestEdits {
                        push_via: Some(&self.via),
                        decrement_max_forwards: true,
                        ..RequestEdits::default()
                    },
                );
                self.pending.push((self.callee, bytes, self.cur_retrans));
            }
            Event::Timeout {
                tx: TxId::Client(client),
                ..
            } => {
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
