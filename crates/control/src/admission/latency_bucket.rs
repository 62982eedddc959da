//! Latency-driven token bucket in the style of Project Clearwater's load monitor
//! (Sprout's `LoadMonitor`, itself after Welsh & Culler, "Adaptive Overload Control for
//! Busy Internet Servers", USITS 2003).
//!
//! New INVITEs need a token from a bucket of depth `B` refilled at rate `R`; without one
//! they are rejected (503). Every other message is admitted. The processor's reported
//! latency per message (queueing delay plus service time of every completion) feeds an
//! EWMA `L̃` with weight 1/8. Every `N` completions, or after `T_adj` without `N`, the
//! relative error `e = (L̃ − L_T) / L_T` adjusts the rate:
//! - `e > 0` (too slow): multiplicative decrease, `R ← max(R / d, R_min)`;
//! - `e < −ε` (room to spare) and the bucket was actually limiting — at least half the
//!   tokens the period could have granted were taken, `accepted ≥ ½ R Δt` —: additive
//!   increase scaled by the headroom, `R ← min(R + (−e) B i, R_max)`;
//! - otherwise `R` stays.
//!
//! The "was limiting" condition keeps an idle server from raising its rate forever and
//! then meeting a surge unprotected. `L̃` starts at `L_T`.
//!
//! Two guards of sluice's, each for a server the defaults do not fit:
//! - the target in force is at most half the time the watched queue takes to drain at the
//!   smoothed service time: in front of a fast server with a short queue, 100 ms is more
//!   than the queue holds, the latency never reaches it, `R` grows without end and the full
//!   queue drops what it cannot hold;
//! - like the local threshold, it rejects every new INVITE while the queue holds
//!   `work_mark_ms` of work (250 ms), held like the target to half the queue's drain time:
//!   in front of a slow server the full bucket and the initial rate admit seconds of work
//!   before the first adjustment, and in front of a fast one with a short queue 250 ms is
//!   more than the queue holds.
//!
//! Defaults: `L_T = 100 ms`, `d = 1.2`, `i = 0.5`, `ε = 0.005`, `N = 20`, `T_adj = 2 s`,
//! EWMA weight 1/8, initial rate 100/s and `R_min = 10/s` follow Clearwater's load
//! monitor. Ours: `B = 20` tokens (Clearwater's 1000 suits a far larger node; 20 is a
//! few hundred ms of the simulator's ~70 sessions/s) and no `R_max`.

use super::threshold::{smoothed_service_time, WorkMark};
use super::{fraction_or, non_negative_or, AdmissionMetrics, LocalAdmission};
use crate::estimation::sane_interval;
use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyBucketConfig {
    /// `L_T`, the target latency.
    #[serde(rename = "target_latency_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub target_latency: Duration,
    /// Token rate before the first adjustment, INVITEs/s.
    pub initial_rate: f64,
    /// `R_min`, INVITEs/s.
    pub min_rate: f64,
    /// `R_max`, INVITEs/s; unset means unbounded.
    pub max_rate: Option<f64>,
    /// `B`, the bucket depth in tokens (the bucket starts full).
    pub bucket_depth: f64,
    /// `d`, the divisor of a decrease (> 1).
    pub decrease_factor: f64,
    /// `i`, the share of `B` per unit of relative headroom added by an increase.
    pub increase_factor: f64,
    /// `ε`, how far below target (relative) the latency must be for an increase.
    pub increase_margin: f64,
    /// EWMA weight of the newest latency sample.
    pub latency_weight: f64,
    /// `N`, completions between adjustments.
    pub adjust_every: u32,
    /// `T_adj`, the longest time between adjustments.
    #[serde(rename = "adjust_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub adjust_interval: Duration,
    /// Also reject new INVITEs while the queue holds this much work, as the local threshold
    /// does (`threshold.work_mark_ms`), held to half the queue's drain time; unset: 250 ms,
    /// half of T1; 0: none.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

impl Default for LatencyBucketConfig {
    fn default() -> Self {
        Self {
            target_latency: Duration::from_millis(100),
            initial_rate: 100.0,
            min_rate: 10.0,
            max_rate: None,
            bucket_depth: 20.0,
            decrease_factor: 1.2,
            increase_factor: 0.5,
            increase_margin: 0.005,
            latency_weight: 0.125,
            adjust_every: 20,
            adjust_interval: Duration::from_secs(2),
            work_mark: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct LatencyBucket {
    target: f64,
    min_rate: f64,
    max_rate: f64,
    depth: f64,
    decrease: f64,
    increase: f64,
    margin: f64,
    weight: f64,
    adjust_every: u32,
    adjust_interval: Duration,
    rate: f64,
    tokens: f64,
    refilled_at: Time,
    latency: f64,
    completions: u32,
    accepted: u64,
    last_adjust: Time,
    rejected: u64,
    /// Messages the watched queue holds.
    queue_capacity: usize,
    /// Smoothed service time of a message the processor did not reject, seconds.
    service_time: Option<f64>,
    /// Rejects while the queue holds `work_mark_ms` of work.
    work_mark: WorkMark,
}

impl LatencyBucket {
    /// In front of a queue of `queue_capacity` messages, counting a queued INVITE's work
    /// as `session_length` messages. Timers start at `now`.
    pub fn new(
        config: &LatencyBucketConfig,
        now: Time,
        queue_capacity: usize,
        session_length: f64,
    ) -> Self {
        let target = config.target_latency.as_secs_f64().max(1e-6);
        let min_rate = non_negative_or(config.min_rate, 10.0);
        let max_rate = match config.max_rate {
            Some(m) if m.is_finite() && m >= min_rate => m,
            _ => f64::INFINITY,
        };
        let depth = non_negative_or(config.bucket_depth, 20.0).max(1.0);
        Self {
            target,
            min_rate,
            max_rate,
            depth,
            decrease: non_negative_or(config.decrease_factor, 1.2).max(1.0),
            increase: non_negative_or(config.increase_factor, 0.5),
            margin: non_negative_or(config.increase_margin, 0.005),
            weight: fraction_or(config.latency_weight, 0.125).max(f64::MIN_POSITIVE),
            adjust_every: config.adjust_every.max(1),
            adjust_interval: sane_interval(config.adjust_interval),
            rate: non_negative_or(config.initial_rate, 100.0).clamp(min_rate, max_rate),
            tokens: depth,
            refilled_at: now,
            latency: target,
            completions: 0,
            accepted: 0,
            last_adjust: now,
            rejected: 0,
            queue_capacity,
            service_time: None,
            work_mark: WorkMark::new(config.work_mark, queue_capacity, session_length),
        }
    }

    /// The target in force, seconds: `L_T`, or half the watched queue's drain time if
    /// that is shorter.
    pub fn target_in_force(&self) -> f64 {
        self.service_time.map_or(self.target, |t| {
            self.target.min(0.5 * self.queue_capacity as f64 * t)
        })
    }

    /// `R`, INVITEs/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// `L̃`, seconds.
    pub fn smoothed_latency(&self) -> f64 {
        self.latency
    }

    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    fn refill(&mut self, now: Time) {
        let dt = now.saturating_since(self.refilled_at).as_secs_f64();
        self.tokens = (self.tokens + self.rate * dt).min(self.depth);
        self.refilled_at = self.refilled_at.max(now);
    }

    fn adjust(&mut self, now: Time) {
        self.refill(now);
        let elapsed = now.saturating_since(self.last_adjust).as_secs_f64();
        let target = self.target_in_force();
        let error = (self.latency - target) / target;
        if error > 0.0 {
            self.rate = (self.rate / self.decrease).max(self.min_rate);
        } else if error < -self.margin && self.accepted as f64 >= 0.5 * self.rate * elapsed {
            self.rate = (self.rate - error * self.depth * self.increase).min(self.max_rate);
        }
        self.completions = 0;
        self.accepted = 0;
        self.last_adjust = now;
    }
}

impl LocalAdmission for LatencyBucket {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        let over_work = self.work_mark.exceeded(now, queue_len, message);
        if !message.is_session_start() {
            return AdmissionVerdict::Admit;
        }
        self.refill(now);
        if !over_work && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.accepted += 1;
            AdmissionVerdict::Admit
        } else {
            self.rejected += 1;
            AdmissionVerdict::Reject
        }
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        self.work_mark.on_queue(now, queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.work_mark.on_processed(now, completion);
        self.service_time = smoothed_service_time(self.service_time, completion);
        let sample = completion
            .queueing_delay
            .saturating_add(completion.service_time)
            .as_secs_f64();
        self.latency += self.weight * (sample - self.latency);
        self.completions += 1;
        if self.completions >= self.adjust_every {
            self.adjust(now);
        }
    }
    fn handle_timeout(&mut self, now: Time) {
        if now >= self.last_adjust + self.adjust_interval {
            self.adjust(now);
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        Some(self.last_adjust + self.adjust_interval)
    }
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics {
            rejected: self.rejected,
            control_value: Some(self.rate),
            latency: Some(self.latency),
            ..AdmissionMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NeighbourId;

    fn done(latency_ms: u64) -> Completion {
        Completion {
            message: MessageSummary::other_request(None),
            service_time: Duration::from_millis(1),
            queueing_delay: Duration::from_millis(latency_ms.saturating_sub(1)),
            session_accepted: false,
        }
    }

    fn invite() -> MessageSummary {
        MessageSummary::new_session(Some(NeighbourId(1)))
    }

    #[test]
    fn latency_above_target_cuts_the_rate_multiplicatively_down_to_the_floor() {
        let mut b = LatencyBucket::new(&LatencyBucketConfig::default(), Time::ZERO, 1000, 1.0);
        assert!((b.rate() - 100.0).abs() < 1e-12);
        // 20 completions at 400 ms: L̃ rises above 100 ms, one adjustment: 100 / 1.2.
        for _ in 0..20 {
            b.on_processed(Time::from_millis(100), &done(400));
        }
        assert!(b.smoothed_latency() > 0.1);
        assert!((b.rate() - 100.0 / 1.2).abs() < 1e-9);
        for _ in 0..20 {
            b.on_processed(Time::from_millis(200), &done(400));
        }
        assert!((b.rate() - 100.0 / 1.44).abs() < 1e-9);
        for k in 0..400 {
            b.on_processed(Time::from_millis(300 + k), &done(400));
        }
        assert!((b.rate() - 10.0).abs() < 1e-12);
    }

    #[test]
    fn in_front_of_a_short_queue_the_target_is_half_its_drain_time() {
        // 100 messages at 0.5 ms each drain in 50 ms: a 100 ms latency is never reached,
        // so the target in force is 25 ms, and 40 ms of latency cuts the rate.
        let served = |latency_ms: u64| Completion {
            message: MessageSummary::other_request(None),
            service_time: Duration::from_micros(500),
            queueing_delay: Duration::from_millis(latency_ms),
            session_accepted: false,
        };
        let mut short = LatencyBucket::new(&LatencyBucketConfig::default(), Time::ZERO, 100, 1.0);
        let mut long = LatencyBucket::new(&LatencyBucketConfig::default(), Time::ZERO, 1000, 1.0);
        for b in [&mut short, &mut long] {
            for _ in 0..40 {
                b.on_processed(Time::from_millis(100), &served(40));
            }
        }
        assert!((short.target_in_force() - 0.025).abs() < 1e-9);
        assert!(short.rate() < 100.0 / 1.2 + 1e-9, "{}", short.rate());
        // 500 messages' drain time is 250 ms: L_T holds, and 40 ms is below it.
        assert!((long.target_in_force() - 0.1).abs() < 1e-9);
        assert!(long.rate() >= 100.0, "{}", long.rate());
    }

    #[test]
    fn recovers_additively_only_while_the_bucket_limits() {
        let mut b = LatencyBucket::new(&LatencyBucketConfig::default(), Time::ZERO, 1000, 1.0);
        b.rate = 10.0;
        // Fast replies but nobody asking for tokens: no increase at the 2 s timer.
        for _ in 0..19 {
            b.on_processed(Time::from_millis(10), &done(1));
        }
        b.handle_timeout(Time::from_secs(2));
        assert!((b.rate() - 10.0).abs() < 1e-12);
        // Now INVITEs press on the bucket (every 10 ms, far above the rate) while the
        // latency stays near 1 ms: each adjustment adds (−e) · B · i = (1 − L̃/L_T) · 10,
        // the same step whatever the rate (additive, not multiplicative).
        for period in 1..=3u64 {
            let start = 2000 * period;
            for k in 0..200 {
                b.on_arrival(Time::from_millis(start + k * 10), 0, &invite());
            }
            for _ in 0..19 {
                b.on_processed(Time::from_millis(start + 1990), &done(1));
            }
            let before = b.rate();
            let headroom = 1.0 - b.smoothed_latency() / 0.1;
            b.handle_timeout(Time::from_millis(start + 2000));
            assert!(headroom > 0.9);
            assert!((b.rate() - before - headroom * 10.0).abs() < 1e-9);
        }
        assert!(b.rate() > 37.0);
        assert!(b.rejected() > 0);
    }

    #[test]
    fn bucket_gates_new_invites_only() {
        let mut b = LatencyBucket::new(
            &LatencyBucketConfig {
                bucket_depth: 3.0,
                initial_rate: 10.0,
                ..LatencyBucketConfig::default()
            },
            Time::ZERO,
            1000,
            1.0,
        );
        let t = Time::ZERO;
        let verdicts: Vec<_> = (0..5).map(|_| b.on_arrival(t, 0, &invite())).collect();
        assert_eq!(
            verdicts
                .iter()
                .filter(|v| **v == AdmissionVerdict::Admit)
                .count(),
            3
        );
        assert_eq!(
            b.on_arrival(t, 0, &MessageSummary::other_request(None)),
            AdmissionVerdict::Admit
        );
        // 100 ms at 10/s refills one token.
        assert_eq!(
            b.on_arrival(Time::from_millis(100), 0, &invite()),
            AdmissionVerdict::Admit
        );
        assert_eq!(
            b.on_arrival(Time::from_millis(100), 0, &invite()),
            AdmissionVerdict::Reject
        );
    }

    /// In front of a queue of 20 messages served in 5 ms each (100 ms to drain) the
    /// 250 ms work mark would never fire; held to half the drain time it rejects from
    /// 50 ms of work, each queued INVITE counted with its session.
    #[test]
    fn the_work_mark_is_held_to_half_the_queue_s_drain_time() {
        let mut b = LatencyBucket::new(
            &LatencyBucketConfig {
                bucket_depth: 1000.0,
                ..LatencyBucketConfig::default()
            },
            Time::ZERO,
            20,
            7.0,
        );
        b.on_processed(
            Time::ZERO,
            &Completion {
                service_time: Duration::from_millis(5),
                queueing_delay: Duration::ZERO,
                ..done(5)
            },
        );
        for (non_invites, verdict) in [
            (2, AdmissionVerdict::Admit),
            (3, AdmissionVerdict::Reject),
            (0, AdmissionVerdict::Admit),
        ] {
            b.on_queue(
                Time::ZERO,
                QueueOccupancy {
                    invites: 1,
                    non_invites,
                },
            );
            assert_eq!(
                b.on_arrival(Time::ZERO, 1 + non_invites as usize, &invite()),
                verdict,
                "one INVITE and {non_invites} other messages"
            );
        }
    }
}
