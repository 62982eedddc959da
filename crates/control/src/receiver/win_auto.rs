//! win-auto (window-autonomous), Shen, Schulzrinne & Nahum 2008, §3.5 and §5.4.
//!
//! Each SE's window starts at `W_0`, drops by one for every new INVITE received from it
//! and rises by one after the RE processes a new INVITE from it. Retransmitted INVITEs
//! cost processing but return nothing, so under congestion the windows freeze by
//! themselves and the backlog drains. No measurement, no timer.
//!
//! Optional delay binding `D` (§5.4): the increase is withheld while the processed
//! INVITE waited longer than `D`. The paper does not say what becomes of a withheld
//! increase; here it is deferred and paid back at the next completion whose queueing
//! delay is within `D`. Dropping it instead would shrink windows for good: once every
//! window reached zero no INVITE would arrive to reopen them.
//!
//! Defaults: `W_0 = 10` (§5.4: "a value in the order of ten works well"); no delay
//! binding (the paper's plain algorithm; §5.4 found `D = 200 ms` best when used).
//!
//! What it cannot do as published: hold a slow RE. The windows are counts that do not
//! depend on the RE's speed, so `n` SEs keep up to `n·W_0` INVITEs in process, with the
//! rest of their calls' messages behind them. In front of an RE of 100–300 messages/s
//! (15–40 calls/s) that is seconds of queue, past Timer A's 500 ms: the SEs retransmit
//! and goodput falls to 0.05–0.5 of capacity. Of 122 overloaded sampled topologies
//! (`experiments/sampled-topologies.toml`) it held 0.9 of capacity on none of the 40
//! with an RE under 300 messages/s, 16 of 42 at 300–1,500 and 29 of 40 above. The delay
//! binding does not cure it: with `D = 200 ms` four of those topologies went from 0.05,
//! 0.40, 0.27 and 0.52 to 0.58, 0.48, 0.30 and 0.49.
//!
//! A slot is taken when an INVITE arrives and given back when it is processed, so an
//! INVITE the RE then drops at its full queue keeps its slot for good: every drop shrinks
//! its SE's window by one. That is a brake the paper does not describe, and the figures
//! above depend on it. Giving those slots back (a drop as a processing that reopens the
//! slot) held the overload claim on 25 of the 122 topologies instead of 45, because the
//! SEs that overflow the queue then keep their windows; bounding the windows by the RE's
//! speed instead (`W ≤ μ·D/n` with `D` = 200 ms) held 74 of 122 but did harm below
//! capacity on 44 of 78, where windows too small for the offered load left calls waiting.

use super::{advertised, FeedbackGenerator, ReceiverMetrics};
use crate::active_sources::{ActiveSourceConfig, ActiveSources};
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WinAutoConfig {
    /// `W_0`.
    pub initial_window: u32,
    /// `D`, the optional queueing-delay binding.
    #[serde(rename = "delay_binding_ms", with = "crate::serde_millis::option")]
    #[schemars(with = "Option<u64>")]
    pub delay_binding: Option<Duration>,
}

impl Default for WinAutoConfig {
    fn default() -> Self {
        Self {
            initial_window: 10,
            delay_binding: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Window {
    whole: i64,
    /// Increases withheld by the delay binding.
    deferred: u32,
}

#[derive(Clone, Debug)]
pub struct WinAuto {
    initial_window: i64,
    delay_binding: Option<Duration>,
    sources: ActiveSources<Window>,
    deferred_total: u64,
    sequence: u64,
}

impl WinAuto {
    pub fn new(config: &WinAutoConfig, sources: &ActiveSourceConfig) -> Self {
        Self {
            initial_window: i64::from(config.initial_window),
            delay_binding: config.delay_binding,
            sources: ActiveSources::new(sources),
            deferred_total: 0,
            sequence: 0,
        }
    }

    fn fresh(&self) -> impl FnOnce() -> Window {
        let whole = self.initial_window;
        move || Window { whole, deferred: 0 }
    }

    /// Increases currently withheld by the delay binding, over all SEs.
    pub fn deferred(&self) -> u64 {
        self.deferred_total
    }
}

impl FeedbackGenerator for WinAuto {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        let fresh = self.fresh();
        let Some(id) = message.source else { return };
        let offers_load = message.is_session_start();
        if let Some(source) = self.sources.observe(now, id, offers_load, fresh) {
            if offers_load {
                source.state.whole -= 1;
            }
        }
    }
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward) {
        // win-auto has no way to honour shares (§6.2.3); the message still shows activity.
        let fresh = self.fresh();
        let offers_load = self.sources.rate_offers_load(feed_forward.offered_rate);
        self.sources.observe(now, from, offers_load, fresh);
    }
    fn on_queue(&mut self, _now: Time, _queue: QueueOccupancy) {}
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        let within_binding = self
            .delay_binding
            .is_none_or(|d| completion.queueing_delay <= d);
        if completion.message.is_session_start() {
            if let Some(source) = completion
                .message
                .source
                .and_then(|id| self.sources.get_mut(now, id))
            {
                if within_binding {
                    source.state.whole += 1;
                } else {
                    source.state.deferred += 1;
                    self.deferred_total += 1;
                }
            }
        }
        if within_binding && self.deferred_total > 0 {
            for (_, source) in self.sources.iter_mut() {
                source.state.whole += i64::from(source.state.deferred);
                source.state.deferred = 0;
            }
            self.deferred_total = 0;
        }
    }
    fn feedback_for(&mut self, now: Time, neighbour: NeighbourId) -> Option<Feedback> {
        let window = self.sources.get_mut(now, neighbour)?.state.whole;
        self.sequence += 1;
        Some(Feedback {
            sequence: self.sequence,
            value: FeedbackValue::Window(advertised(window)),
        })
    }
    fn handle_timeout(&mut self, now: Time) {
        self.sources.expire(now);
        // Deferred increases of expired sources are gone with them.
        self.deferred_total = self
            .sources
            .iter()
            .map(|(_, s)| u64::from(s.state.deferred))
            .sum();
    }
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
    fn metrics(&self) -> ReceiverMetrics {
        ReceiverMetrics {
            active_sources: self.sources.len(),
            sources_turned_away: self.sources.turned_away(),
            control_value: Some(
                self.sources
                    .iter()
                    .map(|(_, s)| s.state.whole.max(0) as f64)
                    .sum(),
            ),
            ..ReceiverMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::test_support::{processed, se, window_of};

    fn delayed(message: MessageSummary, waited_ms: u64) -> Completion {
        Completion {
            queueing_delay: Duration::from_millis(waited_ms),
            ..processed(message, true)
        }
    }

    #[test]
    fn new_invites_close_a_slot_and_their_processing_reopens_it() {
        let mut g = WinAuto::new(&WinAutoConfig::default(), &ActiveSourceConfig::default());
        let t = Time::from_millis(1);
        for _ in 0..3 {
            g.on_arrival(t, &MessageSummary::new_session(se(1)));
        }
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 7);
        g.on_processed(t, &processed(MessageSummary::new_session(se(1)), true));
        // Retransmissions and other messages do not reopen a slot.
        g.on_processed(t, &processed(MessageSummary::repeated_invite(se(1)), true));
        g.on_processed(t, &processed(MessageSummary::other_request(se(1)), false));
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 8);
        assert_eq!(g.poll_timeout(), None);
    }

    #[test]
    fn delay_binding_defers_increases_until_the_delay_falls_back() {
        let cfg = WinAutoConfig {
            initial_window: 2,
            delay_binding: Some(Duration::from_millis(200)),
        };
        let mut g = WinAuto::new(&cfg, &ActiveSourceConfig::default());
        let t = Time::from_millis(1);
        g.on_arrival(t, &MessageSummary::new_session(se(1)));
        g.on_arrival(t, &MessageSummary::new_session(se(1)));
        g.on_processed(t, &delayed(MessageSummary::new_session(se(1)), 250));
        g.on_processed(t, &delayed(MessageSummary::new_session(se(1)), 300));
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 0);
        assert_eq!(g.deferred(), 2);
        // Any completion within the binding pays the deferred increases back.
        g.on_processed(t, &delayed(MessageSummary::other_request(se(1)), 150));
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 2);
        assert_eq!(g.deferred(), 0);
    }
}
