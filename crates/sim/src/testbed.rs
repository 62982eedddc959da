//! A deterministic network of sans-IO endpoints on one virtual clock, for tests and small
//! experiments that put the product's own cores together (the proxy core, the load
//! generator's UAC and UAS) without sockets: datagrams between addresses with one link
//! delay, delivered in time order (ties in send order), each endpoint woken at its own
//! deadline. The scenario engine (`sluice_sim::run`) is the same idea specialised to the
//! papers' topology and measurements.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_proxy_core::ProxyCore;
use sluice_time::Time;

/// What the testbed needs of an endpoint: the sans-IO surface every sluice core has.
pub trait Endpoint {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr);
    fn handle_timeout(&mut self, now: Time);
    /// The next datagram to send: destination and bytes.
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)>;
    fn poll_timeout(&mut self) -> Option<Time>;
}

impl Endpoint for ProxyCore {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        ProxyCore::handle_datagram(self, now, payload, from);
    }
    fn handle_timeout(&mut self, now: Time) {
        ProxyCore::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        ProxyCore::poll_transmit(self).map(|t| (t.to, t.payload))
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        ProxyCore::poll_timeout(self)
    }
}

/// A datagram in flight: (arrival, send order, from, to, payload), earliest first.
type InFlight = Reverse<(Time, u64, SocketAddr, SocketAddr, Bytes)>;

/// Endpoints by address and the datagrams between them.
pub struct Testbed<'a> {
    now: Time,
    link: Duration,
    endpoints: BTreeMap<SocketAddr, &'a mut dyn Endpoint>,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    /// Datagrams to an address with no endpoint (dropped).
    pub undeliverable: u64,
}

impl std::fmt::Debug for Testbed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("now", &self.now)
            .field("endpoints", &self.endpoints.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'a> Testbed<'a> {
    /// An empty network whose every link delays a datagram by `link`.
    pub fn new(link: Duration) -> Self {
        Self {
            now: Time::ZERO,
            link,
            endpoints: BTreeMap::new(),
            wire: BinaryHeap::new(),
            seq: 0,
            undeliverable: 0,
        }
    }

    /// Puts `endpoint` at `addr` (what it sends comes from there).
    pub fn attach(&mut self, addr: SocketAddr, endpoint: &'a mut dyn Endpoint) {
        self.endpoints.insert(addr, endpoint);
    }

    pub fn now(&self) -> Time {
        self.now
    }

    /// Runs until `until`, or until `done` says so after a step, or nothing is left to do.
    pub fn run_until(&mut self, until: Time, mut done: impl FnMut(Time) -> bool) {
        loop {
            let now = self.now;
            let mut moved = false;
            for (&from, endpoint) in &mut self.endpoints {
                endpoint.handle_timeout(now);
                while let Some((to, payload)) = endpoint.poll_transmit() {
                    moved = true;
                    self.seq += 1;
                    self.wire
                        .push(Reverse((now + self.link, self.seq, from, to, payload)));
                }
            }
            while let Some(Reverse((t, ..))) = self.wire.peek() {
                if *t > now {
                    break;
                }
                let Some(Reverse((_, _, from, to, payload))) = self.wire.pop() else {
                    break;
                };
                moved = true;
                match self.endpoints.get_mut(&to) {
                    Some(endpoint) => endpoint.handle_datagram(now, payload, from),
                    None => self.undeliverable += 1,
                }
            }
            if done(now) || now >= until {
                return;
            }
            let next = self
                .endpoints
                .values_mut()
                .filter_map(|e| e.poll_timeout())
                .chain(self.wire.peek().map(|Reverse((t, ..))| *t))
                .min();
            match next {
                // Work due now (after a delivery) runs in the next step at the same instant;
                // a deadline that stays in the past without anything moving would spin.
                Some(t) if t <= now && !moved => self.now = now + Duration::from_nanos(1),
                Some(t) => self.now = t.max(now).min(until),
                None => return,
            }
        }
    }
}
