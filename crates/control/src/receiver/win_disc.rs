//! win-disc (window-discrete), Shen, Schulzrinne & Nahum 2008, §3.3.
//!
//! Each SE has a window `w_i`, starting at `W_0`, decremented for every new INVITE the
//! RE receives from it. At the end of every control interval `T_c` the RE computes the
//! total it can accept next interval within the queueing-delay budget `D_B`,
//! `w = μ·T_c + μ·D_B − N_sess`, and sets every active SE's window to its share of `w`,
//! rounded: `round(w / N_SE)` provider-centric, or in proportion to fed-forward load
//! under double feed (§6.2.1). `μ` and `N_sess` come from §3.1, `N_SE` from §3.2.
//!
//! Defaults (Table 2): `D_B = 200 ms`, `T_c = 200 ms` (`T_m = 100 ms` lives in the
//! estimator config). `W_0 = 14`, the paper's suggested `μ_eng·T_c` with its 72
//! sessions/s engineered rate and `T_c = 200 ms`.
//!
//! Limit, as published: the window is spent as it arrives. An SE offered several times its
//! share spends a whole interval's window within a fraction of the interval, so the RE
//! receives `T_c` of sessions in a burst on top of its `D_B`. In front of a queue that
//! holds less than that (a fast RE with a queue of 25–75 ms of work), each burst overflows
//! it and every drop comes back as a retransmission. Held to the queue
//! (`bounded_by_queue`), `T_c` is held like `D_B` while the SEs feed forward more than `μ`,
//! down to 50 ms ([`MIN_INTERVAL`]): on 200 sampled topologies (seed 1) the overloaded ones
//! that keep 0.9 of capacity (0.85 over lossy links) went from 108 to 113 of 122, no-harm
//! and no-delay unchanged (78 of 78, 76 of 76); on 200 others (seed 2) from 105 to 109 of
//! 133, below capacity nothing moved (65 of 67). Shorter intervals starve the SEs over
//! links of 30 ms or more (an RE of 3,991 messages/s behind 34 ms links at 1.4x went 0.95 →
//! 0.83 at 12.5 ms), and below capacity they cost goodput, so the interval keeps `T_c`
//! there. At 50 ms it still starves some near 1.5x (seed 2: one SE 24 ms away at 1.46x, 108
//! messages of queue, 0.94 → 0.74 with the RE idle a quarter of the time). What remains is
//! the 2xx–ACK loop over links of 40 ms or more: queued twice and carried over six such
//! links, it passes T1 for part of the calls, and no one `T_c` or `D_B` holds all of those
//! topologies (goodput went up on some and down on others at every pair of 25–100 ms tried,
//! and a floor of 35 or 75 ms instead of 50 moved as many topologies each way). Of the 23
//! with such links win-disc holds 17 (win-cont 20); of the 99 with shorter links, 96.
//! win-cont, whose window follows the queue message by message, is the window to run over
//! long links.

use super::{
    advertised, queue_bounded_budget, ControlClock, FeedbackGenerator, ReceiverCore,
    ReceiverMetrics,
};
use crate::active_sources::ActiveSourceConfig;
use crate::estimation::EstimatorConfig;
use crate::fairness::{Fairness, Lent, MarginIn};
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WinDiscConfig {
    /// `D_B`, the queueing-delay budget.
    #[serde(rename = "budget_delay_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub budget_delay: Duration,
    /// `T_c`, the control interval.
    #[serde(rename = "control_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub control_interval: Duration,
    /// `W_0`, each SE's window before the first control interval.
    pub initial_window: u32,
}

impl Default for WinDiscConfig {
    fn default() -> Self {
        Self {
            budget_delay: Duration::from_millis(200),
            control_interval: Duration::from_millis(200),
            initial_window: 14,
        }
    }
}

/// The shortest interval a short queue holds `T_c` to: a window for less than this no
/// longer outlasts the feedback's round trip over links of 30 ms or more, and the SEs
/// wait for windows the RE could serve (the module documentation gives the runs).
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct WinDisc {
    budget_delay: Duration,
    clock: ControlClock,
    initial_window: i64,
    core: ReceiverCore<i64>,
    total_window: Option<f64>,
    /// The RE's queue in messages, when the budget is held to it.
    queue_capacity: Option<f64>,
}

impl WinDisc {
    pub fn new(
        config: &WinDiscConfig,
        estimator: &EstimatorConfig,
        sources: &ActiveSourceConfig,
        fairness: Fairness,
        now: Time,
    ) -> Self {
        Self {
            budget_delay: config.budget_delay,
            clock: ControlClock::new(config.control_interval, now),
            initial_window: i64::from(config.initial_window),
            core: ReceiverCore::new(estimator, sources, fairness, now),
            total_window: None,
            queue_capacity: None,
        }
    }

    /// Holds `D_B` to the work a queue of `messages` holds (half of it, `QUEUE_BUDGET_SHARE`),
    /// and `T_c` too: an SE offered more than its share spends an interval's window as a
    /// burst, so the burst and the budget together must fit the queue. Each SE's window
    /// then also gets back the sessions it reports in flight, which the links hold and the
    /// queue need not.
    #[must_use]
    pub fn bounded_by_queue(mut self, messages: usize) -> Self {
        self.queue_capacity = Some(messages as f64);
        self.core.track_demand();
        self
    }

    /// Lends each SE what the others do not want of their shares
    /// ([`ReceiverCore::lent_shares`]).
    #[must_use]
    pub fn lending_unused(mut self) -> Self {
        self.core.lend_unused();
        self
    }

    /// `T_c`, held to the queue like the budget while the SEs feed forward more than `μ`
    /// (only then does an SE spend its window faster than it refills), but never below
    /// [`MIN_INTERVAL`].
    fn interval(&self, shares: &[(NeighbourId, f64)], mu: f64) -> Duration {
        let configured = self.clock.interval();
        let offered: Option<f64> = shares
            .iter()
            .map(|(id, _)| self.core.sources.peek(*id).and_then(|s| s.offered_rate))
            .sum();
        if offered.is_none_or(|offered| offered <= mu) {
            return configured;
        }
        let held = queue_bounded_budget(configured, &self.core.estimator, self.queue_capacity);
        Duration::from_secs_f64(held).clamp(MIN_INTERVAL.min(configured), configured)
    }

    fn control(&mut self, now: Time) {
        let mu = self.core.estimator.control_service_rate();
        let budget =
            queue_bounded_budget(self.budget_delay, &self.core.estimator, self.queue_capacity);
        let shares = self.core.shares(now);
        let interval = self.interval(&shares, mu);
        self.clock.reschedule(now + interval);
        let horizon = interval.as_secs_f64() + budget;
        let total = (mu * horizon - self.core.estimator.sessions_in_system()).max(0.0);
        self.total_window = Some(total);
        let Lent {
            shares,
            burst_sessions,
        } = self
            .core
            .lent_shares(now, shares, mu, horizon, MarginIn::Share);
        let in_flight = if self.queue_capacity.is_some() {
            self.core.in_flight_allowances(now, &shares, mu)
        } else {
            vec![0.0; shares.len()]
        };
        for (((id, share), in_flight), burst) in
            shares.into_iter().zip(in_flight).zip(burst_sessions)
        {
            if let Some(source) = self.core.sources.get_mut(now, id) {
                // `as` saturates, so even an absurd estimate cannot wrap.
                source.state = (total * share + burst + in_flight).round() as i64;
            }
        }
    }
}

impl FeedbackGenerator for WinDisc {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        let w0 = self.initial_window;
        if let Some(source) = self.core.arrival(now, message, || w0) {
            if message.is_session_start() {
                source.state -= 1;
            }
        }
    }
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward) {
        let w0 = self.initial_window;
        self.core.feed_forward(now, from, feed_forward, || w0);
    }
    fn on_in_flight(&mut self, now: Time, from: NeighbourId, sessions: f64) {
        self.core.in_flight(now, from, sessions);
    }
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        self.core.estimator.on_queue(queue);
    }
    fn on_processed(&mut self, _now: Time, completion: &Completion) {
        self.core.estimator.on_processed(completion);
    }
    fn feedback_for(&mut self, now: Time, neighbour: NeighbourId) -> Option<Feedback> {
        let window = self.core.sources.get_mut(now, neighbour)?.state;
        Some(self.core.stamp(FeedbackValue::Window(advertised(window))))
    }
    fn handle_timeout(&mut self, now: Time) {
        // Measurement first, so a control step at the same instant sees the fresh μ.
        self.core.estimator.handle_timeout(now);
        if self.clock.due(now) {
            self.control(now);
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        let measure = self.core.estimator.poll_timeout().unwrap_or(Time::MAX);
        Some(measure.min(self.clock.deadline()))
    }
    fn metrics(&self) -> ReceiverMetrics {
        self.core.metrics(self.total_window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::test_support::{processed, se, window_of};
    use crate::receiver::QUEUE_BUDGET_SHARE;

    fn win_disc(fairness: Fairness) -> WinDisc {
        let est = EstimatorConfig {
            // The laws under test take μ as given: measure it literally (§3.1).
            service_rate_basis: crate::estimation::ServiceRateBasis::WallTime,
            smoothing_weight: 1.0,
            ..Default::default()
        };
        WinDisc::new(
            &WinDiscConfig::default(),
            &est,
            &ActiveSourceConfig::default(),
            fairness,
            Time::ZERO,
        )
    }

    /// Drives both timers up to `until`.
    fn run_timers(g: &mut WinDisc, until: Time) {
        while let Some(t) = g.poll_timeout().filter(|t| *t <= until) {
            g.handle_timeout(t);
        }
    }

    /// 10 accepted INVITEs (with 60 other messages) in the first 100 ms and again in the
    /// second, so μ = 100/s at 200 ms, while SEs 1–3 each feed forward `offered_each`.
    fn measure_100_sessions_a_second(g: &mut WinDisc, offered_each: f64) {
        for step in [Time::from_millis(50), Time::from_millis(150)] {
            for id in 1..=3 {
                let offered = FeedForward {
                    offered_rate: offered_each,
                };
                g.on_feed_forward(step, NeighbourId(id), offered);
            }
            for _ in 0..10 {
                g.on_processed(step, &processed(MessageSummary::new_session(se(1)), true));
            }
            for _ in 0..60 {
                g.on_processed(
                    step,
                    &processed(MessageSummary::other_request(se(1)), false),
                );
            }
            run_timers(g, step + Duration::from_millis(50));
        }
    }

    #[test]
    fn windows_start_at_w0_and_shrink_with_each_new_invite() {
        let mut g = win_disc(Fairness::ProviderCentric);
        let now = Time::from_millis(1);
        g.on_arrival(now, &MessageSummary::new_session(se(1)));
        g.on_arrival(now, &MessageSummary::new_session(se(1)));
        g.on_arrival(now, &MessageSummary::repeated_invite(se(1)));
        g.on_feed_forward(now, NeighbourId(1), FeedForward { offered_rate: 1.0 });
        assert_eq!(window_of(g.feedback_for(now, NeighbourId(1))), 12);
        // A neighbour the RE has not heard from gets no feedback.
        assert_eq!(g.feedback_for(now, NeighbourId(9)), None);
    }

    #[test]
    fn control_interval_sets_the_budget_window_split_equally() {
        let mut g = win_disc(Fairness::ProviderCentric);
        // Backlog: 4 INVITEs and 12 other messages: N_sess = 4 + 12/6 = 6.
        g.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 4,
                non_invites: 12,
            },
        );
        measure_100_sessions_a_second(&mut g, 1.0);
        // w = 100·0.2 + 100·0.2 − 6 = 34; each of 3 SEs gets round(34/3) = 11.
        assert!((g.metrics().control_value.unwrap() - 34.0).abs() < 1e-9);
        for id in 1..=3 {
            assert_eq!(
                window_of(g.feedback_for(Time::from_millis(200), NeighbourId(id))),
                11
            );
        }
        assert_eq!(g.poll_timeout(), Some(Time::from_millis(300)));
    }

    #[test]
    fn held_to_a_short_queue_the_interval_shortens_only_while_the_ses_offer_more_than_mu() {
        for (offered_each, overloaded) in [(20.0, false), (60.0, true)] {
            let mut g = win_disc(Fairness::ProviderCentric).bounded_by_queue(84);
            // Three SEs feed forward 60 or 180 sessions/s in all.
            measure_100_sessions_a_second(&mut g, offered_each);
            let mu = g.core.estimator.control_service_rate();
            let work = 84.0 / (g.core.estimator.session_length() * mu);
            let held = Duration::from_secs_f64(QUEUE_BUDGET_SHARE * work);
            assert!(held > MIN_INTERVAL && held < Duration::from_millis(100));
            let next = g.poll_timeout().unwrap();
            if overloaded {
                assert_eq!(next, Time::from_millis(200) + held);
                // The window covers the shorter interval: μ·(T_c + D_B) − N_sess, both held.
                let horizon = 2.0 * held.as_secs_f64();
                assert!((g.metrics().control_value.unwrap() - mu * horizon).abs() < 1e-6);
            } else {
                assert_eq!(next, Time::from_millis(300), "T_m's step, not T_c's");
                assert_eq!(g.clock.deadline(), Time::from_millis(400));
            }
        }
    }

    #[test]
    fn double_feed_splits_the_window_in_proportion_to_offered_load() {
        let mut g = win_disc(Fairness::UserCentric);
        for (id, load) in [(1, 10.0), (2, 30.0), (3, 60.0)] {
            g.on_feed_forward(
                Time::from_millis(10),
                NeighbourId(id),
                FeedForward { offered_rate: load },
            );
        }
        // 25 accepted INVITEs per 100 ms: μ = 250/s, empty queue: w = 250·0.4 = 100.
        for step in [Time::from_millis(50), Time::from_millis(150)] {
            for _ in 0..25 {
                g.on_processed(step, &processed(MessageSummary::new_session(se(1)), true));
            }
            run_timers(&mut g, step + Duration::from_millis(50));
        }
        run_timers(&mut g, Time::from_millis(200));
        let windows: Vec<u32> = (1..=3)
            .map(|id| window_of(g.feedback_for(Time::from_millis(200), NeighbourId(id))))
            .collect();
        assert_eq!(windows, vec![10, 30, 60]);
    }

    #[test]
    fn backlog_beyond_the_budget_closes_every_window() {
        let mut g = win_disc(Fairness::ProviderCentric);
        g.on_arrival(Time::ZERO, &MessageSummary::new_session(se(1)));
        g.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 400,
                non_invites: 0,
            },
        );
        run_timers(&mut g, Time::from_millis(200));
        assert_eq!(
            window_of(g.feedback_for(Time::from_millis(200), NeighbourId(1))),
            0
        );
        assert_eq!(g.metrics().control_value, Some(0.0));
    }

    #[test]
    fn feedback_sequence_numbers_increase() {
        let mut g = win_disc(Fairness::ProviderCentric);
        g.on_arrival(Time::ZERO, &MessageSummary::new_session(se(1)));
        let a = g.feedback_for(Time::ZERO, NeighbourId(1)).unwrap().sequence;
        let b = g.feedback_for(Time::ZERO, NeighbourId(1)).unwrap().sequence;
        assert!(b > a);
    }
}
