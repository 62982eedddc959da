//! The dialog peers: addresses a proxy that does not route by Request-URI may still send
//! in-dialog requests to, because a call through it named them. When the proxy relays the
//! 2xx to an INVITE it record-routed, the caller's Contact, the callee's Contact and every
//! element of the route set become peers for a while, so that a BYE or re-INVITE from
//! either side reaches the other. Nobody can add a peer without completing a call through
//! the proxy, and each peer costs one entry: the proxy cannot be made to send to arbitrary
//! addresses, nor to hold memory beyond `limit` entries.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use sluice_time::Time;

/// Bounded in both structures: one queue entry per peer in the map, and at most `limit`
/// peers (each about 48 bytes in each). A renewed peer keeps its one queue entry, moved to
/// the back when it comes up: a trunk whose every call names the same two peers holds two
/// entries, not two per call until the limit.
#[derive(Debug)]
pub(crate) struct DialogPeers {
    /// The latest expiry of each peer.
    until: HashMap<SocketAddr, Time, foldhash::fast::RandomState>,
    /// Each peer once, in the order of its expiry when queued; a peer renewed since is
    /// queued again at the back with its new expiry when it comes up.
    order: VecDeque<(Time, SocketAddr)>,
    ttl: Duration,
    limit: usize,
    /// Peers forgotten before their time because `limit` was reached.
    pub evicted: u64,
}

impl DialogPeers {
    pub(crate) fn new(ttl: Duration, limit: usize) -> Self {
        Self {
            until: HashMap::default(),
            order: VecDeque::new(),
            ttl,
            limit,
            evicted: 0,
        }
    }

    pub(crate) fn add(&mut self, now: Time, peer: SocketAddr) {
        if self.limit == 0 {
            return;
        }
        self.expire(now);
        let until = now + self.ttl;
        if self.until.insert(peer, until).is_none() {
            self.order.push_back((until, peer));
        }
        while self.until.len() > self.limit {
            let Some((at, old)) = self.order.pop_front() else {
                break;
            };
            match self.until.get(&old) {
                Some(&renewed) if renewed > at => self.order.push_back((renewed, old)),
                _ => {
                    self.until.remove(&old);
                    self.evicted += 1;
                }
            }
        }
    }

    pub(crate) fn contains(&self, now: Time, peer: SocketAddr) -> bool {
        self.until.get(&peer).is_some_and(|&until| until > now)
    }

    pub(crate) fn len(&self) -> usize {
        self.until.len()
    }

    /// Drops the peers at the front whose time is up; one renewed since goes to the back.
    /// A renewed peer can come to sit behind one that expires sooner, which then waits
    /// for it: `contains` reads the map, so only the memory is late, never the answer.
    fn expire(&mut self, now: Time) {
        while let Some(&(at, peer)) = self.order.front() {
            if at > now {
                break;
            }
            self.order.pop_front();
            match self.until.get(&peer) {
                Some(&until) if until > now => self.order.push_back((until, peer)),
                _ => {
                    self.until.remove(&peer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[test]
    fn peers_expire_renew_and_stay_within_the_limit() {
        let mut p = DialogPeers::new(Duration::from_secs(10), 2);
        p.add(Time::ZERO, addr(1));
        p.add(Time::from_secs(5), addr(2));
        assert!(p.contains(Time::from_secs(9), addr(1)));
        assert!(!p.contains(Time::from_secs(10), addr(1)), "expired");
        // Renewed: the old entry's expiry no longer removes it.
        p.add(Time::from_secs(8), addr(1));
        assert_eq!(
            p.evicted, 0,
            "the stale entry of a renewed peer is no eviction"
        );
        // A third live peer pushes the oldest live one out before its time.
        p.add(Time::from_secs(11), addr(3));
        assert!(!p.contains(Time::from_secs(11), addr(2)));
        assert!(p.contains(Time::from_secs(12), addr(1)));
        assert!(p.contains(Time::from_secs(12), addr(3)));
        assert_eq!(p.evicted, 1);
        p.add(Time::from_secs(12), addr(4));
        assert!(!p.contains(Time::from_secs(12), addr(1)));
        assert_eq!(p.evicted, 2);
        assert!(p.len() <= 2 && p.order.len() <= 2);
    }

    #[test]
    fn a_peer_named_by_every_call_takes_one_entry() {
        let mut p = DialogPeers::new(Duration::from_secs(10), 1_000);
        for ms in 0..100_000 {
            p.add(Time::from_millis(ms), addr(1));
            p.add(Time::from_millis(ms), addr(2));
        }
        assert_eq!((p.len(), p.order.len(), p.evicted), (2, 2, 0));
        assert!(p.contains(Time::from_millis(109_998), addr(1)));
        assert!(!p.contains(Time::from_millis(110_000), addr(1)));
        // Expired, they go at the next addition.
        p.add(Time::from_secs(200), addr(3));
        assert_eq!((p.len(), p.order.len()), (1, 1));
    }
}
