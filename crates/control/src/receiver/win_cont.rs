//! win-cont (window-continuous), Shen, Schulzrinne & Nahum 2008, §3.4, with the improved
//! allocation of §6.2.1.
//!
//! The RE bounds the sessions it holds to `N_sess_max = μ·D_B`. Each SE's window starts
//! at `W_0` and drops by one per new INVITE received from it. After every processed
//! message the RE computes the room left, `w_left = N_sess_max − N_sess`, and when it
//! reaches the overall threshold `W_ovth` hands it out:
//! - [`WinContAllocation::Share`] (§3.4): each active SE's fractional window grows by its
//!   share `w_left / N_SE` (or its fed-forward share under double feed); once that
//!   reaches the individual threshold `W_indvth`, the integer part moves into the
//!   advertised window and the fraction is carried to the next update.
//! - [`WinContAllocation::Lottery`] (§6.2.1): the fraction of `w_left` is carried in a
//!   single RE-wide leftover, and the integer part goes to one SE drawn with
//!   probability equal to its share (the paper's non-overlapping ranges over 0–100),
//!   which keeps small windows from being split into fractions that rarely add up.
//!
//! - [`WinContAllocation::Level`] (default): §3.4's "the difference between N_sess_max and
//!   N_sess is the available window to be sent as feedback" read as a level: each SE's
//!   window is set to its share of the room after every processed message.
//!
//! Defaults: `D_B = 200 ms` (Table 2), `W_ovth = W_indvth = 1` (§3.4),
//! `W_0 = 14` (`μ_eng·T_c` with 72 sessions/s and 200 ms, §3.4), level allocation. In
//! sluice's simulator (Shen 2008 topology, 250 s runs) the increment reading (`Share`)
//! gave goodput 0.46 / 0.89 / 1.00 at offered load 0.5 / 1 / 8.4, the level reading
//! 0.50 / 0.95 / 1.00.
//!
//! Interpretation (`deduct_outstanding`, on by default): §3.4 calls `N_sess_max − N_sess`
//! "the available window", a level, yet adds it to the windows after *every* processed
//! message. Taken literally, an RE processing 500 msg/s with one session of room grants
//! about 500 windows a second; unless the SEs spend each window at once, windows pile up
//! and the control stops controlling (our closed-loop test fills the 500-message queue).
//! So by default the room is net of the whole windows advertised but not yet used.
//! Carried fractions are not deducted: with a room of one session shared by four SEs,
//! each share stays below one window, and deducting the fractions would stop the room
//! from ever adding up to a whole window for anyone. `deduct_outstanding = false` gives
//! the literal reading.
//!
//! Limit: `N_sess_max = μ·D_B` counts the sessions queued at the RE, not those on the
//! links, and one `D_B` serves two ends that pull apart over long links. On 200 sampled
//! topologies (seed 1) win-cont keeps 0.9 of capacity (0.85 over lossy links) on 118 of
//! the 122 overloaded. Measured over 300 s, three of the four misses stay:
//! - A fast RE behind 50 ms links (528 messages/s, 4.5x): busy 0.996, goodput 0.889. Its
//!   queue (85 ms on average) taken twice, by the 2xx and by its ACK, plus six link
//!   crossings, passes T1 for a third of the calls: every such call adds a 2xx, an ACK, a
//!   BYE and its 200 retransmitted through the RE. With `D_B = 100 ms`: 0.980.
//! - Slow REs behind 48 ms links (103 and 125 messages/s, 1.1x–1.6x): `μ·D_B` is three
//!   sessions, split into windows of less than one session per SE, each refilled a round
//!   trip after use, and an SE rejects what finds no window; the RE is busy only
//!   0.88–0.90 (goodput 0.86 and 0.80 over lossy links). With `D_B = 100 ms` these fall to
//!   0.78 and 0.78; with SEs that hold one session for a window (`blocking = "keep"`,
//!   `hold_limit = 1`) as well, to 0.903 and 0.827 (the lossy one still misses).
//! - The fourth (111 messages/s, 12 ms links, 1.3 % loss) is at 0.851 over 300 s.
//!
//! So `D_B` stays the paper's 200 ms: below it, slow REs lose more than long links gain.

use super::{advertised, queue_share_budget, FeedbackGenerator, ReceiverCore, ReceiverMetrics};
use crate::active_sources::ActiveSourceConfig;
use crate::estimation::EstimatorConfig;
use crate::fairness::{pick_by_share, Fairness, Lent, MarginIn};
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

/// How win-cont hands out the room left.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum WinContAllocation {
    /// §3.4 read as an increment: every SE's fractional window grows by its share of the
    /// room after each processed message, with a per-SE fractional carry.
    Share,
    /// §6.2.1: the whole room goes to one SE drawn in proportion to its share.
    Lottery,
    /// §3.4 read as a level: after every processed message each SE's window is *set* to
    /// its share of the room `N_sess_max − N_sess` (whole part advertised, the fraction
    /// dithered over updates through a per-SE carry). Nothing piles up, so no deduction
    /// is needed, and a slot an SE frees comes back to whoever has the share rather than
    /// being split among SEs that are not sending (which starves a bursty source at light
    /// load under `Share`: in sluice's simulator, 0.46 goodput at offered load 0.5).
    #[default]
    Level,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WinContConfig {
    /// `D_B`, the queueing-delay budget (must be positive: `N_sess_max = μ·D_B`).
    #[serde(rename = "budget_delay_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub budget_delay: Duration,
    /// `W_ovth`: least room, in sessions, worth an update (held at 1 or more).
    pub overall_threshold: f64,
    /// `W_indvth`: least fractional window moved into an SE's advertised window
    /// (held at 1 or more, since only whole windows can be advertised).
    pub individual_threshold: f64,
    /// `W_0`.
    pub initial_window: u32,
    pub allocation: WinContAllocation,
    /// Subtract windows promised but not yet used from the room left (see module docs;
    /// `false` is the paper's literal update). Only the increment allocations (`share`,
    /// `lottery`) use it: a `level` window is recomputed, never accumulated.
    pub deduct_outstanding: bool,
}

impl Default for WinContConfig {
    fn default() -> Self {
        Self {
            budget_delay: Duration::from_millis(200),
            overall_threshold: 1.0,
            individual_threshold: 1.0,
            initial_window: 14,
            allocation: WinContAllocation::Level,
            deduct_outstanding: true,
        }
    }
}

/// Per-SE state: the whole window advertised and the fraction carried towards the next.
/// Share of the RE's queue the delay budget may fill when held to it
/// ([`WinCont::bounded_by_queue`]): all of it, where rate-abs and win-disc take half. A
/// level window must also absorb a round trip's Poisson bursts at the SE, and the
/// threshold backstop catches what overshoots; at half the queue win-cont carried 0.83
/// of capacity where no control carried 0.90 (three SEs 47 ms away, 0.9x).
const QUEUE_SHARE: f64 = 1.0;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Window {
    whole: i64,
    carry: f64,
}

fn at_least_one(x: f64) -> f64 {
    if x.is_nan() {
        1.0
    } else {
        x.max(1.0)
    }
}

#[derive(Clone, Debug)]
pub struct WinCont {
    budget_delay: Duration,
    overall_threshold: f64,
    individual_threshold: f64,
    initial_window: i64,
    allocation: WinContAllocation,
    deduct_outstanding: bool,
    core: ReceiverCore<Window>,
    /// `w_left'` of §6.2.1: the fraction of room not yet handed out.
    leftover: f64,
    rng: ChaCha8Rng,
    granted: u64,
    /// The RE's queue in messages, when the budget is held to it.
    queue_capacity: Option<f64>,
}

impl WinCont {
    pub fn new(
        config: &WinContConfig,
        estimator: &EstimatorConfig,
        sources: &ActiveSourceConfig,
        fairness: Fairness,
        seed: u64,
        now: Time,
    ) -> Self {
        Self {
            budget_delay: config.budget_delay,
            overall_threshold: at_least_one(config.overall_threshold),
            individual_threshold: at_least_one(config.individual_threshold),
            initial_window: i64::from(config.initial_window),
            allocation: config.allocation,
            deduct_outstanding: config.deduct_outstanding,
            core: ReceiverCore::new(estimator, sources, fairness, now),
            leftover: 0.0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            granted: 0,
            queue_capacity: None,
        }
    }

    /// Holds `D_B` to the work a queue of `messages` holds (all of it, `QUEUE_SHARE`);
    /// with the level allocation each SE's window then also gets back the sessions it
    /// reports in flight, which the links hold and the queue need not.
    #[must_use]
    pub fn bounded_by_queue(mut self, messages: usize) -> Self {
        self.queue_capacity = Some(messages as f64);
        self.core.track_demand();
        self
    }

    /// Lends each SE what the others do not want of their shares
    /// ([`ReceiverCore::lent_shares`]); the level allocation only, where a share is of
    /// the room now rather than of what is handed out.
    #[must_use]
    pub fn lending_unused(mut self) -> Self {
        self.core.lend_unused();
        self
    }

    fn fresh(&self) -> impl FnOnce() -> Window {
        let whole = self.initial_window;
        move || Window { whole, carry: 0.0 }
    }

    /// Whole windows handed out since start.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// The room-left update the paper runs after every processed message.
    fn allocate(&mut self, now: Time) {
        let shares = self.core.shares(now);
        if shares.is_empty() {
            return;
        }
        let mu = self.core.estimator.control_service_rate();
        let max_sessions = mu
            * queue_share_budget(
                self.budget_delay,
                &self.core.estimator,
                self.queue_capacity,
                QUEUE_SHARE,
            );
        let bounded = self.queue_capacity.is_some();
        let mut room = max_sessions - self.core.estimator.sessions_in_system();
        if self.allocation == WinContAllocation::Level {
            let Lent {
                shares,
                burst_sessions,
            } = self
                .core
                .lent_shares(now, shares, mu, max_sessions / mu, MarginIn::Sessions);
            // Bounded by the queue, the window also covers the sessions on the link, and a
            // queue over its budget takes its excess off that; otherwise the room is
            // the window.
            let (room, in_flight) = if bounded {
                (room, self.core.in_flight_allowances(now, &shares, mu))
            } else {
                (room.max(0.0), vec![0.0; shares.len()])
            };
            for (((id, share), in_flight), burst) in
                shares.into_iter().zip(in_flight).zip(burst_sessions)
            {
                let Some(source) = self.core.sources.get_mut(now, id) else {
                    continue;
                };
                let w = &mut source.state;
                let level = (room * share + w.carry + in_flight + burst).max(0.0);
                let whole = level.floor();
                w.carry = (level - whole).clamp(0.0, 1.0);
                w.whole = whole as i64;
            }
            return;
        }
        if self.deduct_outstanding {
            let promised: f64 = self
                .core
                .sources
                .iter()
                .map(|(_, s)| s.state.whole.max(0) as f64)
                .sum();
            room -= promised;
        }
        match self.allocation {
            WinContAllocation::Share => {
                if room < self.overall_threshold {
                    return;
                }
                for (id, share) in shares {
                    let Some(source) = self.core.sources.get_mut(now, id) else {
                        continue;
                    };
                    let w = &mut source.state;
                    w.carry += room * share;
                    if w.carry >= self.individual_threshold {
                        let whole = w.carry.floor();
                        w.whole = w.whole.saturating_add(whole as i64);
                        w.carry -= whole;
                        self.granted = self.granted.saturating_add(whole as u64);
                    }
                }
            }
            WinContAllocation::Level => {}
            WinContAllocation::Lottery => {
                let room = room + self.leftover;
                if room < self.overall_threshold {
                    return;
                }
                let whole = room.floor();
                self.leftover = room - whole;
                let draw: f64 = self.rng.gen();
                if let Some(id) = pick_by_share(&shares, draw) {
                    if let Some(source) = self.core.sources.get_mut(now, id) {
                        source.state.whole = source.state.whole.saturating_add(whole as i64);
                        self.granted = self.granted.saturating_add(whole as u64);
                    }
                }
            }
        }
    }
}

impl FeedbackGenerator for WinCont {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        let fresh = self.fresh();
        if let Some(source) = self.core.arrival(now, message, fresh) {
            if message.is_session_start() {
                source.state.whole -= 1;
            }
        }
    }
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward) {
        let fresh = self.fresh();
        self.core.feed_forward(now, from, feed_forward, fresh);
    }
    fn on_in_flight(&mut self, now: Time, from: NeighbourId, sessions: f64) {
        self.core.in_flight(now, from, sessions);
    }
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        self.core.estimator.on_queue(queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.core.estimator.on_processed(completion);
        self.allocate(now);
    }
    fn feedback_for(&mut self, now: Time, neighbour: NeighbourId) -> Option<Feedback> {
        let window = self.core.sources.get_mut(now, neighbour)?.state.whole;
        Some(self.core.stamp(FeedbackValue::Window(advertised(window))))
    }
    fn handle_timeout(&mut self, now: Time) {
        self.core.estimator.handle_timeout(now);
    }
    fn poll_timeout(&self) -> Option<Time> {
        self.core.estimator.poll_timeout()
    }
    fn metrics(&self) -> ReceiverMetrics {
        let total = self
            .core
            .sources
            .iter()
            .map(|(_, s)| s.state.whole.max(0) as f64)
            .sum();
        self.core.metrics(Some(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::test_support::{processed, se, window_of};

    /// With the default 5/s floor and no measurement, `N_sess_max = 5 · 0.2 = 1`.
    /// A 20/s floor gives `N_sess_max = 4` without having to drive the estimator.
    fn win_cont(config: &WinContConfig, fairness: Fairness, floor: f64) -> WinCont {
        let est = EstimatorConfig {
            // The laws under test take μ as given: measure it literally (§3.1).
            service_rate_basis: crate::estimation::ServiceRateBasis::WallTime,
            service_rate_floor: floor,
            ..Default::default()
        };
        WinCont::new(
            config,
            &est,
            &ActiveSourceConfig::default(),
            fairness,
            7,
            Time::ZERO,
        )
    }

    fn other(id: u32) -> Completion {
        processed(MessageSummary::other_request(se(id)), false)
    }

    #[test]
    fn level_allocation_sets_each_window_to_its_share_of_the_room() {
        // N_sess_max = 20/s · 0.2 s = 4 sessions, empty queue; two SEs share it.
        let cfg = WinContConfig {
            allocation: WinContAllocation::Level,
            ..WinContConfig::default()
        };
        let mut g = win_cont(&cfg, Fairness::ProviderCentric, 20.0);
        for id in [1, 2] {
            g.on_feed_forward(
                Time::from_millis(1),
                NeighbourId(id),
                FeedForward { offered_rate: 1.0 },
            );
        }
        g.on_processed(Time::from_millis(2), &other(1));
        assert_eq!(
            window_of(g.feedback_for(Time::from_millis(2), NeighbourId(1))),
            2
        );
        assert_eq!(
            window_of(g.feedback_for(Time::from_millis(2), NeighbourId(2))),
            2
        );
        // Windows are levels: processing more messages does not pile them up.
        for _ in 0..100 {
            g.on_processed(Time::from_millis(3), &other(1));
        }
        assert_eq!(
            window_of(g.feedback_for(Time::from_millis(3), NeighbourId(1))),
            2
        );
        // A new INVITE takes a slot until the next update recomputes the level.
        g.on_arrival(Time::from_millis(4), &MessageSummary::new_session(se(1)));
        assert_eq!(
            window_of(g.feedback_for(Time::from_millis(4), NeighbourId(1))),
            1
        );
    }

    #[test]
    fn held_to_its_queue_a_window_gets_back_the_sessions_in_flight_at_its_rate() {
        // μ = 20/s (the floor); a queue of 14 messages at L_sess = 7 holds 0.1 s of work,
        // so N_sess_max = 2 (the paper's 200 ms would give 4).
        let at = Time::from_millis;
        let window = |bounded: bool, reports: &[f64], arrivals: u64| {
            let g = win_cont(&WinContConfig::default(), Fairness::ProviderCentric, 20.0);
            let mut g = if bounded { g.bounded_by_queue(14) } else { g };
            g.on_feed_forward(at(1), NeighbourId(1), FeedForward { offered_rate: 1.0 });
            for k in 0..arrivals {
                g.on_arrival(at(1 + k), &MessageSummary::new_session(se(1)));
            }
            for &sessions in reports {
                g.on_in_flight(at(1), NeighbourId(1), sessions);
            }
            g.on_processed(at(201), &other(1));
            window_of(g.feedback_for(at(201), NeighbourId(1)))
        };
        // The room of 2 and the 6 on the link.
        assert_eq!(window(true, &[6.0], 0), 8);
        // The latest report counts, held to half a second at μ (a forged one opens no more).
        assert_eq!(window(true, &[6.0, 1_000.0], 0), 12);
        // Sending 8 in the first 200 ms, 40/s, twice what μ allows: half of the 6 is
        // given back, or the report alone would keep the excess going.
        assert_eq!(window(true, &[6.0], 8), 5);
        // The paper's budget: reports change nothing.
        assert_eq!(window(false, &[6.0], 0), 4);
    }

    #[test]
    fn fractional_carry_accumulates_into_whole_windows() {
        // Room 5/s · 250 ms = 1.25 split among 4 SEs: 0.3125 each per processed
        // message (all exact in binary, so the boundaries are exact too).
        let run = |deduct_outstanding| {
            let cfg = WinContConfig {
                allocation: WinContAllocation::Share,
                initial_window: 0,
                budget_delay: Duration::from_millis(250),
                deduct_outstanding,
                ..Default::default()
            };
            let mut g = win_cont(&cfg, Fairness::ProviderCentric, 5.0);
            let t = Time::from_millis(1);
            for id in 1..=4 {
                g.on_feed_forward(t, NeighbourId(id), FeedForward { offered_rate: 1.0 });
            }
            let seen: Vec<u32> = (0..16)
                .map(|_| {
                    g.on_processed(t, &other(1));
                    window_of(g.feedback_for(t, NeighbourId(1)))
                })
                .collect();
            let others: Vec<u32> = (2..=4)
                .map(|id| window_of(g.feedback_for(t, NeighbourId(id))))
                .collect();
            (seen, others, g.granted())
        };
        // Paper's literal update: whole windows appear at 0.3125·k ≥ 1, 2, ...: after
        // messages 4, 7, 10, 13, 16, and nothing is lost: 16 · 1.25 = 20 in total.
        let (seen, others, granted) = run(false);
        assert_eq!(seen, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5]);
        assert_eq!((others, granted), (vec![5, 5, 5], 20));
        // Net of promised windows: the same fractions still add up to a whole window
        // each, then the unused windows use up the room and grants stop.
        let (seen, others, granted) = run(true);
        assert_eq!(seen, vec![0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!((others, granted), (vec![1, 1, 1], 4));
    }

    #[test]
    fn no_grant_below_the_overall_threshold_and_invites_consume_windows() {
        let cfg = WinContConfig {
            allocation: WinContAllocation::Share,
            initial_window: 2,
            overall_threshold: 2.0,
            ..Default::default()
        };
        // N_sess_max = 1.5 < W_ovth = 2: nothing is handed out.
        let mut g = win_cont(&cfg, Fairness::ProviderCentric, 7.5);
        let t = Time::from_millis(1);
        g.on_arrival(t, &MessageSummary::new_session(se(1)));
        for _ in 0..10 {
            g.on_processed(t, &other(1));
        }
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 1);
        g.on_arrival(t, &MessageSummary::new_session(se(1)));
        g.on_arrival(t, &MessageSummary::new_session(se(1)));
        // Overdrawn windows are advertised as zero.
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 0);
    }

    #[test]
    fn a_full_server_grants_nothing() {
        let share = WinContConfig {
            allocation: WinContAllocation::Share,
            ..WinContConfig::default()
        };
        let mut g = win_cont(&share, Fairness::ProviderCentric, 20.0);
        let t = Time::from_millis(1);
        g.on_feed_forward(t, NeighbourId(1), FeedForward { offered_rate: 1.0 });
        // N_sess = 4 = N_sess_max: no room.
        g.on_queue(
            t,
            QueueOccupancy {
                invites: 4,
                non_invites: 0,
            },
        );
        g.on_processed(t, &other(1));
        assert_eq!(g.granted(), 0);
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 14);

        // As a level, a full server's windows are zero whatever was granted before.
        let mut g = win_cont(&WinContConfig::default(), Fairness::ProviderCentric, 20.0);
        g.on_feed_forward(t, NeighbourId(1), FeedForward { offered_rate: 1.0 });
        g.on_queue(
            t,
            QueueOccupancy {
                invites: 4,
                non_invites: 0,
            },
        );
        g.on_processed(t, &other(1));
        assert_eq!(window_of(g.feedback_for(t, NeighbourId(1))), 0);
    }

    #[test]
    fn deducting_outstanding_grants_bounds_the_total_window() {
        let run = |deduct_outstanding| {
            let cfg = WinContConfig {
                allocation: WinContAllocation::Share,
                initial_window: 0,
                deduct_outstanding,
                ..Default::default()
            };
            let mut g = win_cont(&cfg, Fairness::ProviderCentric, 20.0);
            let t = Time::from_millis(1);
            g.on_feed_forward(t, NeighbourId(1), FeedForward { offered_rate: 1.0 });
            for _ in 0..100 {
                g.on_processed(t, &other(1));
            }
            window_of(g.feedback_for(t, NeighbourId(1)))
        };
        // N_sess_max = 4 and an idle SE: the literal update grants 4 per message.
        assert_eq!(run(false), 400);
        assert_eq!(run(true), 4);
    }

    #[test]
    fn lottery_allocation_follows_fed_forward_shares() {
        let cfg = WinContConfig {
            initial_window: 0,
            allocation: WinContAllocation::Lottery,
            deduct_outstanding: false,
            ..Default::default()
        };
        // Literal update, so every one of many updates allocates: room 1.5 per update,
        // one whole window each time, the half carried over.
        let mut g = win_cont(&cfg, Fairness::UserCentric, 7.5);
        let t = Time::from_millis(1);
        for (id, load) in [(1, 10.0), (2, 30.0), (3, 60.0)] {
            g.on_feed_forward(t, NeighbourId(id), FeedForward { offered_rate: load });
        }
        for _ in 0..20_000 {
            g.on_processed(t, &other(1));
        }
        let windows: Vec<f64> = (1..=3)
            .map(|id| f64::from(window_of(g.feedback_for(t, NeighbourId(id)))))
            .collect();
        let total: f64 = windows.iter().sum();
        // Carried halves add a second window every other update: 1.5 per update.
        assert!((total - 30_000.0).abs() <= 1.0, "total {total}");
        for (w, expected) in windows.iter().zip([0.1, 0.3, 0.6]) {
            assert!(
                (w / total - expected).abs() < 0.015,
                "share {} vs {expected}",
                w / total
            );
        }
    }

    #[test]
    fn same_seed_same_lottery() {
        let run = |seed| {
            let cfg = WinContConfig {
                initial_window: 0,
                allocation: WinContAllocation::Lottery,
                deduct_outstanding: false,
                ..Default::default()
            };
            let est = EstimatorConfig {
                // The laws under test take μ as given: measure it literally (§3.1).
                service_rate_basis: crate::estimation::ServiceRateBasis::WallTime,
                service_rate_floor: 7.5,
                ..Default::default()
            };
            let mut g = WinCont::new(
                &cfg,
                &est,
                &ActiveSourceConfig::default(),
                Fairness::ProviderCentric,
                seed,
                Time::ZERO,
            );
            let t = Time::from_millis(1);
            for id in 1..=3 {
                g.on_feed_forward(t, NeighbourId(id), FeedForward { offered_rate: 1.0 });
            }
            (0..200)
                .map(|_| {
                    g.on_processed(t, &other(1));
                    (1..=3)
                        .map(|id| window_of(g.feedback_for(t, NeighbourId(id))))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
