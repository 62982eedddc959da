//! The receive stage's memory of initial INVITEs, so that a retransmission is not taken for
//! a new session (the simulator's RE keeps the same memory). Without it, a retransmitted
//! INVITE whose original still waits in the queue would be rejected as a new call and its
//! caller would see a 503 for a call the proxy goes on to forward.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::Duration;

use sluice_time::Time;

/// What the memory knows of an INVITE's branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sighting {
    /// Not seen before (or the memory is full): a new session.
    First,
    /// Seen, and still waiting in the INVITE queue.
    RepeatWaiting,
    /// Seen, and taken by the processor (or not queued apart).
    Repeat,
    /// Seen, and rejected: answer the retransmission with the same stateless 503.
    RepeatRejected,
    /// Seen, and answered 2xx: absorbed, as RFC 6026's Accepted state absorbs it (§8.7),
    /// where RFC 3261's ended transaction would have it proxied again.
    RepeatAnswered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Taken,
    Rejected,
    Answered,
}

/// Bounded in both structures: at most `limit` entries in the order of sightings (and so
/// in the map), each forgotten `ttl` (64·T1) after it was first seen, when no copy can
/// still be in flight.
#[derive(Debug)]
pub(crate) struct InviteMemory {
    /// Keyed by [`InviteMemory::key`], already a keyed hash: the map's own is a plain mix.
    seen: HashMap<u64, (State, Time), foldhash::fast::FixedState>,
    /// Keyed per process: the branch and Call-ID come from peers, so a fixed hash would
    /// let them choose colliding keys.
    hasher: foldhash::quality::RandomState,
    order: VecDeque<(Time, u64)>,
    ttl: Duration,
    limit: usize,
    /// INVITEs taken for new sessions unremembered because the memory was full.
    pub full: u64,
}

impl InviteMemory {
    /// The key of an INVITE: its top Via branch and sent-by, and its Call-ID (branch and
    /// sent-by would do for RFC 3261 clients; the Call-ID guards against clients that reuse
    /// branches).
    pub(crate) fn key(&self, branch: &[u8], sent_by: &[u8], call_id: &[u8]) -> u64 {
        self.hasher.hash_one((branch, sent_by, call_id))
    }

    pub fn new(ttl: Duration, limit: usize) -> Self {
        Self {
            seen: HashMap::default(),
            hasher: foldhash::quality::RandomState::default(),
            order: VecDeque::new(),
            ttl,
            limit,
            full: 0,
        }
    }

    pub fn sight(&mut self, now: Time, key: u64) -> Sighting {
        while let Some(&(t, k)) = self.order.front() {
            if t + self.ttl > now {
                break;
            }
            self.order.pop_front();
            // Only the sighting that made the entry ends it (a forgotten key seen again
            // has a newer one).
            if self.seen.get(&k).is_some_and(|&(_, at)| at == t) {
                self.seen.remove(&k);
            }
        }
        match self.seen.get(&key) {
            Some((State::Rejected, _)) => return Sighting::RepeatRejected,
            Some((State::Waiting, _)) => return Sighting::RepeatWaiting,
            Some((State::Taken, _)) => return Sighting::Repeat,
            Some((State::Answered, _)) => return Sighting::RepeatAnswered,
            None => {}
        }
        // The order holds every live entry and the stale ones of forgotten keys: bounding
        // it bounds both.
        if self.order.len() >= self.limit {
            self.full += 1;
            return Sighting::First;
        }
        self.seen.insert(key, (State::Waiting, now));
        self.order.push_back((now, key));
        Sighting::First
    }

    /// The INVITE of this key was answered 503 by the admission policy.
    pub fn rejected(&mut self, key: u64) {
        if let Some((r, _)) = self.seen.get_mut(&key) {
            *r = State::Rejected;
        }
    }

    /// The processor took the INVITE of this key (or it never waited in a queue).
    pub fn taken(&mut self, key: u64) {
        if let Some((r, _)) = self.seen.get_mut(&key) {
            if *r == State::Waiting {
                *r = State::Taken;
            }
        }
    }

    /// The INVITE of this key was answered 2xx upstream.
    pub fn answered(&mut self, key: u64) {
        if let Some((r, _)) = self.seen.get_mut(&key) {
            if *r != State::Rejected {
                *r = State::Answered;
            }
        }
    }

    /// The INVITE of this key was dropped unqueued: its retransmission is a first sight.
    pub fn forget(&mut self, key: u64) {
        self.seen.remove(&key);
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.seen.len(), self.order.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_recognised_until_they_expire_and_the_memory_is_bounded() {
        let mut m = InviteMemory::new(Duration::from_secs(32), 2);
        assert_eq!(m.sight(Time::ZERO, 1), Sighting::First);
        assert_eq!(m.sight(Time::from_millis(500), 1), Sighting::RepeatWaiting);
        m.taken(1);
        assert_eq!(m.sight(Time::from_millis(600), 1), Sighting::Repeat);
        m.answered(1);
        assert_eq!(m.sight(Time::from_millis(700), 1), Sighting::RepeatAnswered);
        m.rejected(1);
        assert_eq!(m.sight(Time::from_secs(1), 1), Sighting::RepeatRejected);
        // A rejected call's 503 stands: no 2xx can follow it.
        m.answered(1);
        assert_eq!(m.sight(Time::from_secs(1), 1), Sighting::RepeatRejected);
        assert_eq!(m.sight(Time::from_secs(1), 2), Sighting::First);
        // Full: a third branch is taken for new but not remembered.
        assert_eq!(m.sight(Time::from_secs(1), 3), Sighting::First);
        assert_eq!(m.sight(Time::from_secs(1), 3), Sighting::First);
        assert_eq!((m.len(), m.full), ((2, 2), 2));
        // 64·T1 later the first is forgotten; a dropped one at once.
        assert_eq!(m.sight(Time::from_secs(32), 1), Sighting::First);
        m.forget(1);
        assert_eq!(m.sight(Time::from_secs(32), 1), Sighting::First);
    }

    #[test]
    fn dropped_and_resent_requests_cannot_grow_the_order_past_the_limit() {
        let mut m = InviteMemory::new(Duration::from_secs(32), 4);
        // A flood whose every request is dropped at a full queue and sent again.
        for i in 0..1000u64 {
            let t = Time::from_millis(i);
            m.sight(t, i % 3);
            m.forget(i % 3);
        }
        let (seen, order) = m.len();
        assert!(seen <= 4 && order <= 4, "{seen} {order}");
        assert!(m.full > 0);
    }
}
