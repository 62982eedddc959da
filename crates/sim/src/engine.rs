//! The discrete-event loop (§4.1: the paper used OPNET; this is a plain binary heap over
//! an integer clock). Virtual time starts at zero; events at the same instant run in the
//! order they were scheduled. Every random draw comes from a ChaCha stream derived from
//! the scenario seed and named by what it drives (a source's arrivals and holding times,
//! one direction of one link), so adding a source perturbs no other stream.
//!
//! Events: datagram deliveries, TCP bytes reaching a receive buffer (`tcp`), node deadlines
//! (transaction timers, the proxies' processor completions, controller intervals, throttle
//! releases — one armed event per node, re-armed lazily), call arrivals (Poisson,
//! piecewise-constant rate, §4.2 and §6.2), and hang-ups after the holding time.

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1};
use sluice_proxy_core::ProxyCore;
use sluice_time::Time;
use sluice_txn::TransactionLayer;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use crate::ledger::Ledger;
use crate::net::{Links, NodeId, Packet, Role, Send, Topology};
use crate::node::{Cx, Tu};
use crate::proxy_node::{Place, ProxyNode};
use crate::report::{RunReport, TcpReport, WriteQueueDrops};
use crate::scenario::{splitmix, ArrivalProcess, Scenario};
use crate::tcp::{Sockets, Streams};
use crate::ua::{Callee, Caller};

/// A handler's context from the engine's fields, borrowed apart from the nodes.
macro_rules! cx {
    ($engine:ident) => {
        Cx {
            now: $engine.now,
            sends: &mut $engine.sends,
            ledger: &mut $engine.ledger,
            hangups: &mut $engine.hangups,
        }
    };
}

/// `Stream`: bytes on one direction of a TCP connection reach the receiver's buffer.
#[derive(Clone, Copy, Debug)]
enum Ev {
    Deliver { to: NodeId, slot: u32 },
    Stream { half: u32 },
    Timer { node: NodeId },
    Arrival { source: u32 },
    HangUp { call: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so the max-heap pops the earliest (then first-scheduled) entry.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The future event list plus the datagrams in flight.
///
/// Most events happen at the instant they are scheduled (zero link delay is the paper's
/// default), so those skip the heap and wait in a FIFO. The order is still exactly
/// (time, scheduling sequence): heap entries due now were all scheduled before the clock
/// reached now, so they come before anything in the FIFO.
#[derive(Debug, Default)]
struct Agenda {
    now: u64,
    heap: BinaryHeap<Entry>,
    fifo: VecDeque<Ev>,
    seq: u64,
    packets: Vec<Option<Packet>>,
    free: Vec<u32>,
}

impl Agenda {
    fn push(&mut self, at: Time, ev: Ev) {
        let at = at.as_nanos();
        if at == self.now {
            self.fifo.push_back(ev);
        } else {
            self.seq += 1;
            self.heap.push(Entry {
                at,
                seq: self.seq,
                ev,
            });
        }
    }

    /// The next event and its time, advancing the clock.
    fn pop(&mut self) -> Option<(u64, Ev)> {
        if let Some(top) = self.heap.peek() {
            if top.at == self.now || self.fifo.is_empty() {
                let e = self.heap.pop()?;
                self.now = e.at;
                return Some((e.at, e.ev));
            }
        }
        self.fifo.pop_front().map(|ev| (self.now, ev))
    }

    fn stash(&mut self, p: Packet) -> u32 {
        if let Some(i) = self.free.pop() {
            self.packets[i as usize] = Some(p);
            i
        } else {
            self.packets.push(Some(p));
            (self.packets.len() - 1) as u32
        }
    }

    fn take(&mut self, slot: u32) -> Option<Packet> {
        let p = self.packets.get_mut(slot as usize)?.take();
        if p.is_some() {
            self.free.push(slot);
        }
        p
    }
}

/// A caller population's arrival process.
#[derive(Debug)]
struct Source {
    rng: ChaCha8Rng,
    /// `(from, calls per second)`, ascending; the rate holds until the next step.
    steps: Vec<(Time, f64)>,
    mean_hold_s: f64,
    /// Evenly spaced arrivals (SIPp's `-r`) instead of Poisson.
    constant: bool,
}

impl Source {
    /// The next arrival after `t`, before `end` (Poisson with piecewise-constant rate:
    /// memorylessness lets a draw that crosses a step restart at the step).
    fn next_after(&mut self, mut t: Time, end: Time) -> Option<Time> {
        loop {
            let k = self.steps.partition_point(|&(at, _)| at <= t);
            let rate = if k == 0 { 0.0 } else { self.steps[k - 1].1 };
            let boundary = self.steps.get(k).map_or(end, |&(at, _)| at.min(end));
            if rate > 0.0 {
                let gap: f64 = if self.constant {
                    1.0
                } else {
                    Exp1.sample(&mut self.rng)
                };
                let at = t + secs(gap / rate);
                if at < boundary {
                    return Some(at);
                }
            }
            if boundary >= end {
                return None;
            }
            t = boundary;
        }
    }

    fn holding_ns(&mut self) -> u64 {
        let h: f64 = Exp1.sample(&mut self.rng);
        secs(h * self.mean_hold_s).as_nanos() as u64
    }
}

fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::from_nanos((s * 1.0e9).min(1.0e18) as u64)
    } else {
        Duration::ZERO
    }
}

/// A seeded ChaCha stream named by `stream`.
fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

pub(crate) struct Engine {
    now: Time,
    end: Time,
    topo: Topology,
    agenda: Agenda,
    armed: Vec<Option<Time>>,
    callers: Vec<Caller>,
    ses: Vec<ProxyNode>,
    re: ProxyNode,
    callee: Callee,
    sources: Vec<Source>,
    links: Links,
    streams: Streams,
    /// Some hop runs over TCP: the report says what the connections did.
    tcp: bool,
    ledger: Ledger,
    sends: Vec<Send>,
    /// Scratch: the sends of one dispatch that no connection took, with their origin.
    failed_sends: Vec<(NodeId, Option<sluice_txn::Origin>)>,
    hangups: Vec<(Time, u32)>,
    events: u64,
    /// End of the next time-series bin whose controller sample is due.
    next_sample: u64,
    capacity_cps: f64,
    beta: f64,
    names: Vec<String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("now", &self.now)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds the model. The scenario must be valid.
    pub fn new(sc: &Scenario) -> Self {
        let n = sc.sources.len();
        let topo = Topology { sources: n };
        let cfg = sc
            .sip
            .txn_config(sluice_txn::Config::default().max_transactions);
        let callers = (0..n)
            .map(|i| {
                let ua = (sc.tcp.callers, sc.call.body_bytes);
                Caller::new(topo, i, TransactionLayer::new(cfg), ua)
            })
            .collect();
        let proxy = |config: &sluice_proxy_core::ProxyConfig, id: NodeId, place| {
            let core = ProxyCore::new(config, topo.peer(id).addr, Time::ZERO);
            ProxyNode::new(id, core, place, topo)
        };
        // The scenario's proxy tables wired to the address plan.
        let addr = |id: NodeId| topo.peer(id).addr;
        let ses = (0..n)
            .map(|i| {
                let config = sc.se_proxy(i, addr(topo.se(i)), addr(topo.re()));
                proxy(&config, topo.se(i), Place::Se)
            })
            .collect();
        let neighbours: Vec<_> = (0..n).map(|i| addr(topo.se(i))).collect();
        let re_config = sc.re_proxy(addr(topo.re()), addr(topo.callee()), &neighbours);
        let re = proxy(&re_config, topo.re(), Place::Re);
        let callee = Callee::new(
            topo,
            TransactionLayer::new(cfg),
            sc.call.callee_sends_trying,
            sc.call.body_bytes,
        );
        let (send, receive) = (sc.tcp.send_buffer, sc.tcp.receive_buffer);
        let ua = Sockets::of_user_agent(send, receive, sc.tcp.ua_write_queue);
        let sockets = (0..topo.nodes())
            .map(|k| match topo.role(NodeId(k as u32)) {
                Role::Se(_) => Sockets::of_proxy(&sc.se.tcp, send, receive),
                Role::Re => Sockets::of_proxy(&sc.re.tcp, send, receive),
                Role::Caller(_) | Role::Callee => ua,
            })
            .collect();
        let cap = sc.capacity_cps();
        let sources = sc
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let steps = if s.schedule.is_empty() {
                    vec![(Time::ZERO, sc.source_rate_cps(i, 0.0))]
                } else {
                    s.schedule
                        .iter()
                        .map(|st| (Time::from_secs_f64(st.at_s), st.load * cap))
                        .collect()
                };
                Source {
                    rng: stream(sc.seed, (3 << 40) + i as u64),
                    steps,
                    mean_hold_s: sc.call.holding_time_s,
                    constant: sc.call.arrivals == ArrivalProcess::Constant,
                }
            })
            .collect();
        let ledger = Ledger::new(
            n,
            (
                Time::from_secs_f64(sc.warmup_s),
                Time::from_secs_f64(sc.duration_s),
            ),
            secs(sc.call.setup_deadline_s).as_nanos() as u64,
            // A proxy may hold an INVITE it admitted until its Timer C fires (counted from
            // the last provisional it relayed) and then wait 64·T1 for the CANCEL's answer
            // before it gives up with 408; a second for the way back.
            (sc.se.timer_c().max(sc.re.timer_c())
                + sc.se
                    .sip
                    .txn_config(1)
                    .t1_x64()
                    .max(sc.re.sip.txn_config(1).t1_x64())
                + Duration::from_secs(1))
            .as_nanos() as u64,
            sc.call.callee_sends_trying,
            sc.timeseries,
            sc.control_trace,
        );
        Self {
            now: Time::ZERO,
            end: Time::from_secs_f64(sc.end_s()),
            topo,
            agenda: Agenda::default(),
            armed: vec![None; topo.nodes()],
            callers,
            ses,
            re,
            callee,
            sources,
            links: Links::new(topo, &sc.link, splitmix(sc.seed)),
            streams: Streams::new(topo, sockets),
            tcp: sc.uses_tcp(),
            ledger,
            sends: Vec::with_capacity(16),
            failed_sends: Vec::new(),
            hangups: Vec::new(),
            events: 0,
            next_sample: 1_000_000_000,
            capacity_cps: cap,
            beta: sc.effective_beta(),
            names: sc.sources.iter().map(|s| s.name.clone()).collect(),
        }
    }

    pub fn run(mut self) -> RunReport {
        for i in 0..self.sources.len() {
            if let Some(at) = self.sources[i].next_after(Time::ZERO, self.end) {
                self.agenda.push(at, Ev::Arrival { source: i as u32 });
            }
        }
        let end = self.end.as_nanos();
        while let Some((at, ev)) = self.agenda.pop() {
            if at > end {
                break;
            }
            while at >= self.next_sample && self.sample_due() {
                let b = (self.next_sample / 1_000_000_000 - 1) as usize;
                if let Some(m) = self.re.core.feedback_metrics() {
                    self.ledger.sample(b, &m);
                }
                self.next_sample += 1_000_000_000;
            }
            self.now = Time::from_nanos(at);
            self.events += 1;
            match ev {
                Ev::Deliver { to, slot } => {
                    if let Some(p) = self.agenda.take(slot) {
                        self.ledger.messages += 1;
                        self.deliver(to, p);
                        self.after(to, false);
                    }
                }
                Ev::Stream { half } => {
                    self.streams.arrive(half, self.now);
                    // What arrived left the sender's send buffer: room for its write queue.
                    self.pump(half);
                    let node = self.streams.reader(half);
                    self.read_all(node);
                    self.after(node, false);
                }
                Ev::Timer { node } => {
                    if self.armed[node.0 as usize] == Some(self.now) {
                        self.armed[node.0 as usize] = None;
                        self.timeout(node);
                        // The processor moved: its queue may take what waits in the
                        // receive buffers.
                        self.dispatch();
                        self.read_all(node);
                        self.after(node, true);
                    }
                }
                Ev::Arrival { source } => {
                    let i = source as usize;
                    let hold = self.sources[i].holding_ns();
                    let call = self.ledger.new_call(self.now, i, hold);
                    let mut cx = cx!(self);
                    self.callers[i].start_call(&mut cx, call);
                    if let Some(at) = self.sources[i].next_after(self.now, self.end) {
                        self.agenda.push(at, Ev::Arrival { source });
                    }
                    self.after(self.topo.caller(i), false);
                }
                Ev::HangUp { call } => {
                    if let Some(i) = self.ledger.call(call).map(|c| usize::from(c.source)) {
                        let mut cx = cx!(self);
                        self.callers[i].hang_up(&mut cx, call);
                        self.after(self.topo.caller(i), false);
                    }
                }
            }
        }
        self.report()
    }

    fn sample_due(&self) -> bool {
        ((self.next_sample / 1_000_000_000) as usize) <= self.ledger.bins()
    }

    fn deliver(&mut self, to: NodeId, p: Packet) {
        self.sync(to);
        let mut cx = cx!(self);
        match self.topo.role(to) {
            Role::Caller(i) => self.callers[i].on_message(&mut cx, p.bytes),
            Role::Se(i) => self.ses[i].on_packet(&mut cx, p),
            Role::Re => self.re.on_packet(&mut cx, p),
            Role::Callee => self.callee.on_message(&mut cx, p.bytes, None),
        }
    }

    /// A message read from a TCP connection; `from` is its remote address as `to` names it.
    fn deliver_stream(&mut self, to: NodeId, bytes: Bytes, from: SocketAddr, retrans: bool) {
        self.sync(to);
        let mut cx = cx!(self);
        match self.topo.role(to) {
            Role::Caller(i) => self.callers[i].on_message(&mut cx, bytes),
            Role::Se(i) => self.ses[i].on_stream_message(&mut cx, bytes, from, retrans),
            Role::Re => self.re.on_stream_message(&mut cx, bytes, from, retrans),
            Role::Callee => self.callee.on_message(&mut cx, bytes, Some(from)),
        }
    }

    /// Smart forwarding's input (Shen and Schulzrinne 2010, §6.2), before a proxy's next
    /// input: every connection it writes whose undelivered bytes changed since it was told.
    fn sync(&mut self, node: NodeId) {
        let proxy = match self.topo.role(node) {
            Role::Se(i) => &mut self.ses[i],
            Role::Re => &mut self.re,
            Role::Caller(_) | Role::Callee => return,
        };
        self.streams
            .changed_unsent(node, |to, lane, unsent| proxy.send_queue(to, lane, unsent));
    }

    /// The write queues' drops summed by role, in the units of the live bench's report.
    fn write_queue_drops_by_role(&self) -> WriteQueueDrops {
        let mut d = WriteQueueDrops::default();
        for (node, &(messages, bytes)) in self.streams.dropped_by.iter().enumerate() {
            match self.topo.role(NodeId(node as u32)) {
                Role::Caller(_) => d.callers_bytes += bytes,
                Role::Se(_) => d.ses_messages += messages,
                Role::Re => d.re_messages += messages,
                Role::Callee => d.callee_bytes += bytes,
            }
        }
        d
    }

    /// Whether `node` reads another message now: a proxy while its core's queue has room,
    /// a user agent always (§4.2: infinite capacity).
    fn has_room(&mut self, node: NodeId) -> bool {
        let mut cx = cx!(self);
        match self.topo.role(node) {
            Role::Se(i) => self.ses[i].has_room(&mut cx),
            Role::Re => self.re.has_room(&mut cx),
            Role::Caller(_) | Role::Callee => true,
        }
    }

    /// Reads `node`'s receive buffers while it has room (the back-pressure of §5), a
    /// connection at a time (`Streams::next_to_read`); each message's sends go out before the
    /// next is read, so smart forwarding sees them.
    fn read_all(&mut self, node: NodeId) {
        while let Some(h) = self.streams.next_to_read(node) {
            let room = self.has_room(node);
            self.dispatch();
            if !room {
                break;
            }
            self.streams.begin_read(node, h);
            let read = self.streams.read_one(h);
            // Reading opened the window.
            self.pump(h);
            if let Some((bytes, retrans, from)) = read {
                self.ledger.messages += 1;
                self.deliver_stream(node, bytes, from, retrans);
                self.dispatch();
            }
        }
    }

    /// Puts what a connection's buffers and window let through on the wire.
    fn pump(&mut self, half: u32) {
        if let Some(at) = self.streams.pump(half, self.now) {
            self.agenda.push(at, Ev::Stream { half });
        }
    }

    fn timeout(&mut self, node: NodeId) {
        self.sync(node);
        let mut cx = cx!(self);
        match self.topo.role(node) {
            Role::Caller(i) => self.callers[i].on_timeout(&mut cx),
            Role::Se(i) => self.ses[i].on_timeout(&mut cx),
            Role::Re => self.re.on_timeout(&mut cx),
            Role::Callee => self.callee.on_timeout(&mut cx),
        }
    }

    fn deadline(&mut self, node: NodeId) -> Option<Time> {
        match self.topo.role(node) {
            Role::Caller(i) => self.callers[i].txn.poll_timeout(),
            Role::Se(i) => self.ses[i].deadline(),
            Role::Re => self.re.deadline(),
            Role::Callee => self.callee.txn.poll_timeout(),
        }
    }

    /// Puts what the nodes sent on the wire or into their connections and schedules their
    /// hang-ups.
    fn dispatch(&mut self) {
        // Each sender hears of what its connections could not take, as in the live shells;
        // what it sends in answer goes out in turn (a refused message is never retried
        // here, so this ends).
        while !self.sends.is_empty() || !self.hangups.is_empty() {
            self.dispatch_once();
        }
    }

    fn dispatch_once(&mut self) {
        let mut failed = std::mem::take(&mut self.failed_sends);
        for s in self.sends.drain(..) {
            if let Some((to, lane)) = s.stream {
                let links = &self.links;
                let from = s.packet.from;
                let written = self.streams.write(
                    from,
                    to,
                    lane,
                    (s.packet.bytes, s.packet.retrans),
                    |a, b| links.delay(a, b),
                );
                match written {
                    Some(half) => {
                        if let Some(at) = self.streams.pump(half, self.now) {
                            self.agenda.push(at, Ev::Stream { half });
                        }
                    }
                    None => failed.push((from, s.origin)),
                }
                continue;
            }
            match self.links.transit(self.now, s.packet.from, s.to) {
                Some(at) => {
                    let slot = self.agenda.stash(s.packet);
                    self.agenda.push(at, Ev::Deliver { to: s.to, slot });
                }
                None => self.ledger.lost += 1,
            }
        }
        for (at, call) in self.hangups.drain(..) {
            self.agenda.push(at, Ev::HangUp { call });
        }
        for (node, origin) in failed.drain(..) {
            self.send_failed(node, origin);
        }
        self.failed_sends = failed;
    }

    /// `node`'s connection could not take a message of `origin`.
    fn send_failed(&mut self, node: NodeId, origin: Option<sluice_txn::Origin>) {
        let mut cx = cx!(self);
        match self.topo.role(node) {
            Role::Caller(i) => self.callers[i].on_send_error(&mut cx, origin),
            Role::Se(i) => self.ses[i].on_send_error(&mut cx, origin),
            Role::Re => self.re.on_send_error(&mut cx, origin),
            Role::Callee => self.callee.on_send_error(&mut cx, origin),
        }
        self.rearm(node, false);
    }

    /// Dispatches what the nodes sent and re-arms `node`'s deadline.
    fn after(&mut self, node: NodeId, fired: bool) {
        self.dispatch();
        self.rearm(node, fired);
    }

    /// Arms `node`'s timer for its deadline, if that is earlier than the one armed.
    fn rearm(&mut self, node: NodeId, fired: bool) {
        if let Some(d) = self.deadline(node) {
            // A deadline that did not move past the instant just handled would spin.
            let floor = if fired {
                self.now + Duration::from_nanos(1)
            } else {
                self.now
            };
            let d = d.max(floor);
            let slot = &mut self.armed[node.0 as usize];
            if slot.is_none_or(|a| d < a) {
                *slot = Some(d);
                self.agenda.push(d, Ev::Timer { node });
            }
        }
    }

    fn report(mut self) -> RunReport {
        let mut r = RunReport::default();
        let names = std::mem::take(&mut self.names);
        self.ledger
            .finish(self.now, self.capacity_cps, &names, &mut r);
        r.beta = self.beta;
        r.events_processed = self.events;
        r.simulated_s = self.end.as_secs_f64();
        let mut table_full = 0;
        for c in &self.callers {
            table_full += c.txn.stats().refused.table_full;
        }
        let now = self.now;
        for (s, se) in r.per_source.iter_mut().zip(&mut self.ses) {
            let st = se.core.stats(now);
            table_full += st.txn.refused.table_full;
            s.window_probes = st.hop.client.window_probes;
            s.feedback_applied = st.hop.client.applied;
            r.refusals.se_hold_full += st.hop.client.hold_overflow;
        }
        let re = self.re.core.stats(now);
        table_full += re.txn.refused.table_full;
        table_full += self.callee.txn.stats().refused.table_full;
        r.refusals.txn_table_full = table_full;
        r.refusals.re_invite_memory_full = re.invite_memory_full;
        r.refusals.malformed += self.streams.malformed + self.streams.unroutable;
        if self.tcp {
            let (pdd_p50_ms, pdd_p99_ms) = self.ledger.pdd_percentiles_ms();
            let smart: u64 = self
                .ses
                .iter_mut()
                .map(|se| se.core.stats(now).rejected_smart_forwarding)
                .sum();
            r.tcp = Some(TcpReport {
                pdd_p50_ms,
                pdd_p99_ms,
                rejected_smart_forwarding: smart + re.rejected_smart_forwarding,
                write_queue_drops: self.streams.drops,
                dropped_by: self.write_queue_drops_by_role(),
                re_messages_read: self.streams.read_by[self.topo.re().0 as usize],
                re_messages_in: sluice_proxy_core::KIND_LABELS
                    .iter()
                    .zip(re.in_by_kind.0)
                    .filter(|&(_, n)| n > 0)
                    .map(|(k, n)| ((*k).to_owned(), n))
                    .collect(),
            });
        }
        r
    }
}
