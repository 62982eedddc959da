//! rate-occ (relative rate feedback, the OCC occupancy algorithm), Shen, Schulzrinne &
//! Nahum 2008, §3.7, eq. 3.
//!
//! Processor occupancy `ρ` is measured every `T_m` (§3.1 estimator). Every `T_c` the
//! acceptance fraction is updated multiplicatively, `f ← clamp(φ·f, f_min, 1)` with
//! `φ = min(ρ_B / ρ, φ_max)` (eq. 3), and every SE is told the same `f`, which makes
//! the scheme user-centric fair by construction (§6.2.2). `f` starts at 1.
//!
//! Defaults (§3.7, Table 2): `ρ_B = 0.85`, `φ_max = 5`, `f_min = 0.02`, `T_c = 200 ms`
//! (`T_m = 100 ms` in the estimator config; rate-occ2 uses 14 ms for both).
//!
//! sluice's addition, `queue_gate_ms`: `f` is lowered only while the estimated queueing
//! delay exceeds 200 ms (held to half the queue's work with `queue_bounded_budget`). Read
//! over a 100 ms window, a slow server's Poisson bursts push `ρ` above `ρ_B` at 0.6–0.8 of
//! its capacity, and each such reading rejected calls the server had room for. Under
//! overload the queue passes the gate within an interval or two, and eq. 3 then lowers `f`.
//! On 200 sampled topologies (seed 1) the gate took no-harm from 45 to 77 of 78 and
//! overload (0.9 of capacity, 0.85 over lossy links) from 8 to 108 of 122. The queue then
//! passes the gate before `f` falls: the backstop's work mark behind it
//! (`ControlConfig::backstop`) bounds it. The papers' RE (`Scenario::paper_re` in the
//! simulator) sets the gate to 0.
//!
//! What it cannot do as published: hold 0.9 of capacity under overload. It holds the
//! processor's occupancy at `ρ_B`, so goodput settles near `ρ_B` of capacity or below:
//! live, three SEs at 10x of 300 calls/s carry 0.78 (0.78–0.84 over links with 10 ms and
//! 0.5 % loss a hop), and the sampled topologies 0.6–0.87 (overload holds on 106 of 122,
//! with 14 of the 16 misses on REs under 190 messages/s, busy 0.88–0.95 of the time).
//! Raising `ρ_B` towards 1 removes the headroom that absorbs a control interval's lag
//! (`φ_max = 5` lets `f` grow fivefold in one interval). That is the algorithm's design,
//! not a defect to tune.

use super::{queue_bounded_budget, ControlClock, FeedbackGenerator, ReceiverCore, ReceiverMetrics};
use crate::active_sources::ActiveSourceConfig;
use crate::estimation::EstimatorConfig;
use crate::fairness::Fairness;
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RateOccConfig {
    /// `ρ_B`, the target processor occupancy, in `(0, 1]`.
    pub target_occupancy: f64,
    /// `T_c`.
    #[serde(rename = "control_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub control_interval: Duration,
    /// `φ_max`, the largest multiplicative increase per interval.
    pub max_increase: f64,
    /// `f_min`, the least acceptance fraction.
    pub min_fraction: f64,
    /// Lower `f` only while the estimated queueing delay `d_q` (§3.1) exceeds this; unset:
    /// 200 ms, the windows' `D_B`; 0: whenever `ρ > ρ_B`, as in the paper. A processor
    /// busy for a control interval with its queue short is serving what it is offered,
    /// not falling behind.
    #[serde(
        rename = "queue_gate_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub queue_gate: Option<Duration>,
}

impl Default for RateOccConfig {
    fn default() -> Self {
        Self {
            target_occupancy: 0.85,
            control_interval: Duration::from_millis(200),
            max_increase: 5.0,
            min_fraction: 0.02,
            queue_gate: None,
        }
    }
}

/// Eq. 3: the next acceptance fraction from the current one and the measured occupancy.
/// A measured occupancy of zero (or less, or not a number) means no load at all and
/// takes the largest increase.
pub fn next_fraction(
    fraction: f64,
    occupancy: f64,
    target: f64,
    max_increase: f64,
    min_fraction: f64,
) -> f64 {
    let phi = if occupancy > 0.0 {
        (target / occupancy).min(max_increase)
    } else {
        max_increase
    };
    let next = phi * fraction;
    if next.is_nan() {
        1.0
    } else {
        next.clamp(min_fraction, 1.0)
    }
}

#[derive(Clone, Debug)]
pub struct RateOcc {
    target: f64,
    clock: ControlClock,
    max_increase: f64,
    min_fraction: f64,
    core: ReceiverCore<()>,
    fraction: f64,
    queue_gate: Duration,
    /// The RE's queue in messages, when the gate is held to it.
    queue_capacity: Option<f64>,
}

/// The queue gate when none is configured: the windows' `D_B` (Shen et al., Table 2).
const DEFAULT_QUEUE_GATE: Duration = Duration::from_millis(200);

impl RateOcc {
    pub fn new(
        config: &RateOccConfig,
        estimator: &EstimatorConfig,
        sources: &ActiveSourceConfig,
        now: Time,
    ) -> Self {
        let or = |x: f64, fallback: f64| if x.is_finite() { x } else { fallback };
        Self {
            target: or(config.target_occupancy, 0.85).clamp(f64::MIN_POSITIVE, 1.0),
            clock: ControlClock::new(config.control_interval, now),
            max_increase: or(config.max_increase, 5.0).max(1.0),
            min_fraction: or(config.min_fraction, 0.02).clamp(0.0, 1.0),
            core: ReceiverCore::new(estimator, sources, Fairness::UserCentric, now),
            fraction: 1.0,
            queue_gate: config.queue_gate.unwrap_or(DEFAULT_QUEUE_GATE),
            queue_capacity: None,
        }
    }

    /// Holds the queue gate to half of the work a queue of `messages` holds, as the
    /// windows' and rate-abs's budgets ([`queue_bounded_budget`]): a gate longer than the
    /// queue never opens, and `f` would never fall.
    #[must_use]
    pub fn bounded_by_queue(mut self, messages: usize) -> Self {
        self.queue_capacity = Some(messages as f64);
        self
    }

    /// The current acceptance fraction `f`.
    pub fn fraction(&self) -> f64 {
        self.fraction
    }
}

impl FeedbackGenerator for RateOcc {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        self.core.arrival(now, message, || ());
    }
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward) {
        self.core.feed_forward(now, from, feed_forward, || ());
    }
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        self.core.estimator.on_queue(queue);
    }
    fn on_processed(&mut self, _now: Time, completion: &Completion) {
        self.core.estimator.on_processed(completion);
    }
    /// The same fraction for every neighbour: relative feedback needs no allocation.
    fn feedback_for(&mut self, _now: Time, _neighbour: NeighbourId) -> Option<Feedback> {
        Some(
            self.core
                .stamp(FeedbackValue::AcceptFraction(self.fraction)),
        )
    }
    fn handle_timeout(&mut self, now: Time) {
        self.core.estimator.handle_timeout(now);
        if self.clock.due(now) {
            if let Some(rho) = self.core.estimator.occupancy() {
                let next = next_fraction(
                    self.fraction,
                    rho,
                    self.target,
                    self.max_increase,
                    self.min_fraction,
                );
                let estimator = &self.core.estimator;
                let gate = queue_bounded_budget(self.queue_gate, estimator, self.queue_capacity);
                let falling_behind = self.queue_gate.is_zero()
                    || estimator
                        .queueing_delay()
                        .is_none_or(|d_q| d_q.as_secs_f64() > gate);
                if next >= self.fraction || falling_behind {
                    self.fraction = next;
                }
            }
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        let measure = self.core.estimator.poll_timeout().unwrap_or(Time::MAX);
        Some(measure.min(self.clock.deadline()))
    }
    fn metrics(&self) -> ReceiverMetrics {
        self.core.metrics(Some(self.fraction))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::test_support::{processed, se};

    #[test]
    fn eq3_is_multiplicative_with_clamps_at_f_min_phi_max_and_one() {
        let step = |f, rho| next_fraction(f, rho, 0.85, 5.0, 0.02);
        // Over target: shrink by ρ_B/ρ.
        assert!((step(0.5, 1.0) - 0.425).abs() < 1e-12);
        // Far under target: grow by at most φ_max.
        assert!((step(0.1, 0.01) - 0.5).abs() < 1e-12);
        assert!((step(0.1, 0.0) - 0.5).abs() < 1e-12);
        // Never above 1, never below f_min.
        assert!((step(0.9, 0.5) - 1.0).abs() < 1e-12);
        assert!((step(0.021, 1.0) - 0.02).abs() < 1e-12);
        // Repeated overload bottoms out at f_min and stays there.
        let mut f = 1.0;
        for _ in 0..100 {
            f = step(f, 1.0);
        }
        assert!((f - 0.02).abs() < 1e-12);
        assert!((step(0.5, f64::NAN) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn control_uses_the_measured_occupancy_each_interval() {
        let mut g = RateOcc::new(
            &RateOccConfig {
                queue_gate: Some(Duration::ZERO),
                ..RateOccConfig::default()
            },
            &EstimatorConfig::default(),
            &ActiveSourceConfig::default(),
            Time::ZERO,
        );
        // Busy the whole time: 50 × 2 ms per 100 ms interval → ρ = 1.
        for k in 0..4u64 {
            for _ in 0..50 {
                g.on_processed(
                    Time::from_millis(k * 100 + 1),
                    &processed(MessageSummary::other_request(se(1)), false),
                );
            }
            g.handle_timeout(Time::from_millis((k + 1) * 100));
        }
        // Two control steps (200 ms, 400 ms), each × 0.85.
        assert!((g.fraction() - 0.85 * 0.85).abs() < 1e-12);
        let fb = g
            .feedback_for(Time::from_millis(400), NeighbourId(42))
            .unwrap();
        assert_eq!(fb.value, FeedbackValue::AcceptFraction(g.fraction()));
    }

    #[test]
    fn with_the_queue_gate_a_busy_processor_lowers_f_only_once_its_queue_waits() {
        let generator = |gate_ms: Option<u64>| {
            RateOcc::new(
                &RateOccConfig {
                    queue_gate: gate_ms.map(Duration::from_millis),
                    ..RateOccConfig::default()
                },
                &EstimatorConfig::default(),
                &ActiveSourceConfig::default(),
                Time::ZERO,
            )
        };
        // Busy the whole time on new sessions (50 × 2 ms per 100 ms: ρ = 1, μ = 500
        // sessions/s), with `invites` queued: 20 are 40 ms of queue, 200 are 400 ms.
        let run = |g: &mut RateOcc, invites: u32, from_ms: u64| {
            for k in 0..2u64 {
                g.on_queue(
                    Time::ZERO,
                    QueueOccupancy {
                        invites,
                        non_invites: 0,
                    },
                );
                for _ in 0..50 {
                    g.on_processed(
                        Time::from_millis(from_ms + k * 100 + 1),
                        &processed(MessageSummary::new_session(se(1)), true),
                    );
                }
                g.handle_timeout(Time::from_millis(from_ms + (k + 1) * 100));
            }
        };
        let mut paper = generator(Some(0));
        let mut gated = generator(None);
        run(&mut paper, 20, 0);
        run(&mut gated, 20, 0);
        assert!((paper.fraction() - 0.85).abs() < 1e-12);
        assert!(
            (gated.fraction() - 1.0).abs() < 1e-12,
            "{}",
            gated.fraction()
        );
        // Past the gate the gated generator follows eq. 3 as well.
        run(&mut gated, 200, 200);
        assert!(
            (gated.fraction() - 0.85).abs() < 1e-12,
            "{}",
            gated.fraction()
        );
    }
}
