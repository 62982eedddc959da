//! Active source estimation, Shen, Schulzrinne & Nahum 2008, §3.2.
//!
//! The RE keeps one entry per SE it has recently heard from; an entry expires one
//! second (the paper's value) after that SE's last message that offered load: a new
//! INVITE, or a fed-forward offered load above zero. Other messages (ACK, BYE, responses)
//! reach an existing entry but do not keep it alive: an SE whose callers have stopped
//! calling still sends BYEs for half a minute, and counting it would hand its share of
//! the capacity to nobody (seen in sluice's simulator: after a source left, rate-abs held
//! only 0.81 and then 0.56 of capacity). `N_SE` is the number of
//! live entries. Entries also carry the per-SE state of the algorithm that owns the
//! table and, for the double-feed architecture (§6.1.2), the SE's last fed-forward
//! offered load.
//!
//! The table is bounded: a new SE that finds it full (after expiry) is turned away and
//! counted. Expiry is applied lazily whenever the table is touched with a `now`, which
//! is observationally the same as a timer per entry and needs no deadline.

use crate::types::NeighbourId;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ActiveSourceConfig {
    /// Entry lifetime after a source's last message (paper: 1 s).
    #[serde(rename = "expiry_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub expiry: Duration,
    /// Most sources tracked at once; the live proxy should allow at least its number of
    /// configured neighbours.
    pub max_sources: usize,
}

impl Default for ActiveSourceConfig {
    fn default() -> Self {
        Self {
            expiry: Duration::from_secs(1),
            max_sources: 256,
        }
    }
}

/// One active source.
#[derive(Clone, Debug, PartialEq)]
pub struct Source<S> {
    pub last_seen: Time,
    /// Last fed-forward offered load (sessions/s), if the SE reports one.
    pub offered_rate: Option<f64>,
    /// Sessions the SE last reported on their way here (the window's in-flight echo).
    pub in_flight: Option<f64>,
    pub state: S,
}

/// The §3.2 table, generic over the per-source state of the algorithm using it.
#[derive(Clone, Debug)]
pub struct ActiveSources<S> {
    expiry: Duration,
    limit: usize,
    entries: BTreeMap<NeighbourId, Source<S>>,
    turned_away: u64,
    expired: u64,
}

impl<S> ActiveSources<S> {
    pub fn new(config: &ActiveSourceConfig) -> Self {
        Self {
            expiry: config.expiry,
            limit: config.max_sources,
            entries: BTreeMap::new(),
            turned_away: 0,
            expired: 0,
        }
    }

    /// Drops entries whose last message is `expiry` or more in the past.
    pub fn expire(&mut self, now: Time) {
        let expiry = self.expiry;
        let before = self.entries.len();
        self.entries.retain(|_, s| now - s.last_seen < expiry);
        self.expired += (before - self.entries.len()) as u64;
    }

    /// Records load offered by `id` at `now`, creating its entry with `init` if needed.
    /// Returns `None` (and counts it) when a new source finds the table full.
    pub fn touch(
        &mut self,
        now: Time,
        id: NeighbourId,
        init: impl FnOnce() -> S,
    ) -> Option<&mut Source<S>> {
        self.expire(now);
        if !self.entries.contains_key(&id) && self.entries.len() >= self.limit {
            self.turned_away += 1;
            return None;
        }
        let entry = self.entries.entry(id).or_insert_with(|| Source {
            last_seen: now,
            offered_rate: None,
            in_flight: None,
            state: init(),
        });
        entry.last_seen = entry.last_seen.max(now);
        Some(entry)
    }

    /// Whether a fed-forward rate (sessions/s) counts as offering load: at least one session
    /// per expiry period. A slower source would expire between its INVITEs anyway, and an
    /// SE's decaying meter keeps reporting a small positive rate long after its callers
    /// have stopped, which would keep a departed SE in the table.
    pub fn rate_offers_load(&self, sessions_per_second: f64) -> bool {
        sessions_per_second * self.expiry.as_secs_f64() >= 1.0
    }

    /// The live entry for `id` when a message offers load (`offers_load`, see the module
    /// docs) or, otherwise, only if the entry exists, without refreshing it.
    pub fn observe(
        &mut self,
        now: Time,
        id: NeighbourId,
        offers_load: bool,
        init: impl FnOnce() -> S,
    ) -> Option<&mut Source<S>> {
        if offers_load {
            self.touch(now, id, init)
        } else {
            self.get_mut(now, id)
        }
    }

    /// The live entry for `id`, without refreshing it.
    pub fn get_mut(&mut self, now: Time, id: NeighbourId) -> Option<&mut Source<S>> {
        self.expire(now);
        self.entries.get_mut(&id)
    }

    /// `N_SE` at `now`.
    pub fn count(&mut self, now: Time) -> usize {
        self.expire(now);
        self.entries.len()
    }

    /// The entry of `id` (expired or not).
    pub fn peek(&self, id: NeighbourId) -> Option<&Source<S>> {
        self.entries.get(&id)
    }

    /// Whether `id` has an entry (expired or not).
    pub fn contains(&self, id: NeighbourId) -> bool {
        self.entries.contains_key(&id)
    }

    /// Live entries in neighbour order (call [`expire`](Self::expire) first).
    pub fn iter(&self) -> impl Iterator<Item = (NeighbourId, &Source<S>)> {
        self.entries.iter().map(|(id, s)| (*id, s))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (NeighbourId, &mut Source<S>)> {
        self.entries.iter_mut().map(|(id, s)| (*id, s))
    }

    /// Entries held, as of the last expiry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// New sources refused because the table was full.
    pub fn turned_away(&self) -> u64 {
        self.turned_away
    }

    /// Entries removed by expiry so far.
    pub fn expired(&self) -> u64 {
        self.expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_that_offer_no_load_do_not_keep_a_source_alive() {
        let mut t = table(8);
        t.observe(Time::ZERO, NeighbourId(1), true, || ());
        // BYEs and responses every 100 ms for two seconds: reached, but not refreshed.
        for ms in (100..2000).step_by(100) {
            let seen = t
                .observe(Time::from_millis(ms), NeighbourId(1), false, || ())
                .is_some();
            assert_eq!(seen, ms < 1000, "at {ms} ms");
        }
        assert_eq!(t.count(Time::from_millis(2000)), 0);
        // A message that offers no load never creates an entry.
        assert!(t
            .observe(Time::from_millis(2000), NeighbourId(2), false, || ())
            .is_none());
    }

    fn table(limit: usize) -> ActiveSources<()> {
        ActiveSources::new(&ActiveSourceConfig {
            max_sources: limit,
            ..Default::default()
        })
    }

    #[test]
    fn a_source_expires_one_second_after_its_last_message() {
        let mut t = table(8);
        t.touch(Time::ZERO, NeighbourId(1), || ());
        t.touch(Time::from_millis(600), NeighbourId(2), || ());
        t.touch(Time::from_millis(500), NeighbourId(1), || ());
        assert_eq!(t.count(Time::from_millis(1499)), 2);
        // Source 1 was last heard at 0.5 s.
        assert_eq!(t.count(Time::from_millis(1500)), 1);
        assert_eq!(t.count(Time::from_millis(1599)), 1);
        assert_eq!(t.count(Time::from_millis(1600)), 0);
        assert_eq!(t.expired(), 2);
    }

    #[test]
    fn a_full_table_turns_new_sources_away_but_not_known_ones() {
        let mut t = table(2);
        assert!(t.touch(Time::ZERO, NeighbourId(1), || ()).is_some());
        assert!(t.touch(Time::ZERO, NeighbourId(2), || ()).is_some());
        assert!(t.touch(Time::ZERO, NeighbourId(3), || ()).is_none());
        assert!(t
            .touch(Time::from_millis(10), NeighbourId(1), || ())
            .is_some());
        assert_eq!(t.turned_away(), 1);
        // Once entries expire there is room again.
        assert!(t.touch(Time::from_secs(2), NeighbourId(3), || ()).is_some());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn iteration_is_in_neighbour_order() {
        let mut t = table(8);
        for id in [5, 1, 3] {
            t.touch(Time::ZERO, NeighbourId(id), || ());
        }
        let ids: Vec<u32> = t.iter().map(|(id, _)| id.0).collect();
        assert_eq!(ids, vec![1, 3, 5]);
    }
}
