//! RED-like local rejection, Montazerolghaem & Yaghmaee, "An Overload Window Control
//! Method Based on Fuzzy Logic to Improve SIP Performance" (IJICTR 6(4), 2014), §III,
//! eqs. (1)–(2).
//!
//! On every message arrival the average queue length is updated,
//! `Q_avg(n) = (1 − W_q) Q_avg(n−1) + W_q Q(n)` (eq. 1), where `Q(n)` is the queue length
//! the arrival finds, and then compared with two thresholds: below `TH_low` the message
//! is accepted, above `TH_high` it is rejected, and in between it is rejected with
//! probability `P_rej = (Q_avg − TH_low) / (TH_high − TH_low)` (eq. 2).
//!
//! The paper rejects "messages" with a 503; here, as everywhere in this crate, only
//! session-starting INVITEs are rejected (a 503 cannot usefully answer an ACK or a
//! response, and the other requests belong to sessions already admitted). Every
//! arrival still updates `Q_avg`. `Q_avg` starts at 0. The coin tosses come from a
//! ChaCha8 stream seeded from the config.
//!
//! Defaults (§III): `W_q = 0.1`, `TH_low = 400`, `TH_high = 1000` messages, in front of the
//! paper's queue of 1,000: here 40 % and all of the queue the policy watches, so that they
//! suit any queue (400 messages never reach a queue of 300), as the threshold's and Ohta's
//! watermarks. Set counts win.
//!
//! By default every new INVITE is also rejected while the queue holds 250 ms of work
//! (`work_mark_ms`), as the local threshold does: in front of a slow server 40 % of the
//! queue is seconds of work, and INVITEs that wait past T1 come back as retransmissions. The
//! mark is held to half the time the queue takes to drain, as the threshold's; under
//! overload it then decides before `Q_avg` does (see Ohta's module). The papers' RE
//! (`Scenario::paper_re` in the simulator) turns the mark off.

use super::threshold::WorkMark;
use super::{fraction_or, non_negative_or, AdmissionMetrics, LocalAdmission};
use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RedConfig {
    /// `W_q`, the weight of the newest queue length in `Q_avg`, in `(0, 1]`.
    pub queue_weight: f64,
    /// `TH_low`, messages (unset: 40 % of the watched queue's capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub th_low: Option<f64>,
    /// `TH_high`, messages (unset: all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub th_high: Option<f64>,
    /// Also reject every new INVITE while the queue holds this much work, as the local
    /// threshold does (`threshold.work_mark_ms`); unset: 250 ms, half of T1; 0: `Q_avg`
    /// alone, as in the paper. Its thresholds are in messages, and in front of a slow
    /// server 40 % of the queue is seconds of work, past T1.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

impl Default for RedConfig {
    fn default() -> Self {
        Self {
            queue_weight: 0.1,
            th_low: None,
            th_high: None,
            work_mark: None,
        }
    }
}

/// Eq. (2) with its two outer regions: 0 below `TH_low`, 1 above `TH_high`, linear in
/// between. Equal thresholds make a step at the threshold; a NaN average rejects nothing.
pub fn red_reject_probability(q_avg: f64, th_low: f64, th_high: f64) -> f64 {
    if q_avg.is_nan() || q_avg < th_low {
        0.0
    } else if q_avg > th_high || th_high <= th_low {
        1.0
    } else {
        ((q_avg - th_low) / (th_high - th_low)).clamp(0.0, 1.0)
    }
}

#[derive(Clone, Debug)]
pub struct RedRejection {
    weight: f64,
    th_low: f64,
    th_high: f64,
    q_avg: f64,
    rng: ChaCha8Rng,
    /// Rejects while the queue holds `work_mark_ms` of work.
    work_mark: WorkMark,
    rejected: u64,
}

impl RedRejection {
    /// In front of a queue of `queue_capacity` messages. A `TH_high` below `TH_low` is
    /// raised to it. The work mark counts a queued INVITE as `session_length` messages.
    pub fn new(config: &RedConfig, seed: u64, queue_capacity: usize, session_length: f64) -> Self {
        let queue = queue_capacity as f64;
        let th_low = non_negative_or(config.th_low.unwrap_or(0.4 * queue), 0.4 * queue);
        Self {
            weight: fraction_or(config.queue_weight, 0.1).max(f64::MIN_POSITIVE),
            th_low,
            th_high: non_negative_or(config.th_high.unwrap_or(queue), queue).max(th_low),
            q_avg: 0.0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            work_mark: WorkMark::new(config.work_mark, queue_capacity, session_length),
            rejected: 0,
        }
    }

    /// `Q_avg`.
    pub fn average_queue(&self) -> f64 {
        self.q_avg
    }

    /// `P_rej` at the current `Q_avg`.
    pub fn reject_probability(&self) -> f64 {
        red_reject_probability(self.q_avg, self.th_low, self.th_high)
    }

    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

impl LocalAdmission for RedRejection {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        self.q_avg += self.weight * (queue_len as f64 - self.q_avg);
        let over_work = self.work_mark.exceeded(now, queue_len, message);
        if !message.is_session_start() {
            return AdmissionVerdict::Admit;
        }
        let p = self.reject_probability();
        // No coin is drawn past the work mark, so that the draws below it stay the same.
        let reject = over_work || p >= 1.0 || (p > 0.0 && self.rng.gen::<f64>() < p);
        if reject {
            self.rejected += 1;
            AdmissionVerdict::Reject
        } else {
            AdmissionVerdict::Admit
        }
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        self.work_mark.on_queue(now, queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.work_mark.on_processed(now, completion);
    }
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics {
            rejected: self.rejected,
            control_value: Some(self.reject_probability()),
            ..AdmissionMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NeighbourId;

    #[test]
    fn probability_is_zero_below_low_linear_between_and_one_above_high() {
        let p = |q| red_reject_probability(q, 400.0, 1000.0);
        assert!(p(0.0).abs() < 1e-12);
        assert!(p(399.9).abs() < 1e-12);
        assert!(p(400.0).abs() < 1e-12);
        assert!((p(550.0) - 0.25).abs() < 1e-12);
        assert!((p(700.0) - 0.5).abs() < 1e-12);
        assert!((p(1000.0) - 1.0).abs() < 1e-12);
        assert!((p(5000.0) - 1.0).abs() < 1e-12);
        assert!(p(f64::NAN).abs() < 1e-12);
        assert!((red_reject_probability(5.0, 5.0, 5.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn average_moves_a_tenth_of_the_way_on_every_arrival() {
        let mut r = RedRejection::new(&RedConfig::default(), 3, 1000, 1.0);
        let ack = MessageSummary::other_request(Some(NeighbourId(1)));
        r.on_arrival(Time::ZERO, 1000, &ack);
        assert!((r.average_queue() - 100.0).abs() < 1e-9);
        r.on_arrival(Time::ZERO, 1000, &ack);
        assert!((r.average_queue() - 190.0).abs() < 1e-9);
        r.on_arrival(Time::ZERO, 0, &ack);
        assert!((r.average_queue() - 171.0).abs() < 1e-9);
        // A long run at a constant length converges to it.
        for _ in 0..300 {
            r.on_arrival(Time::ZERO, 700, &ack);
        }
        assert!((r.average_queue() - 700.0).abs() < 1e-6);
        assert!((r.reject_probability() - 0.5).abs() < 1e-6);
        assert_eq!(r.rejected(), 0, "only new INVITEs are rejected");
    }

    #[test]
    fn rejects_new_invites_at_the_probability_repeatably() {
        let run = |seed| {
            let mut r = RedRejection::new(&RedConfig::default(), seed, 1000, 1.0);
            let invite = MessageSummary::new_session(Some(NeighbourId(1)));
            (0..4000)
                .map(|_| r.on_arrival(Time::ZERO, 850, &invite))
                .collect::<Vec<_>>()
        };
        let a = run(11);
        // Q_avg reaches 850 within ~100 arrivals: P_rej = 0.75 from then on.
        let late = &a[200..];
        let rejected = late
            .iter()
            .filter(|v| **v == AdmissionVerdict::Reject)
            .count() as f64;
        assert!((rejected / late.len() as f64 - 0.75).abs() < 0.03);
        assert_eq!(a[0], AdmissionVerdict::Admit, "Q_avg starts at 0");
        assert_eq!(run(11), a);
        assert_ne!(run(12), a);
    }
}
