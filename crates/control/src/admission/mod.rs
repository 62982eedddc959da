//! Local admission at the RE's receive stage, and the local overload controls that only
//! use the RE's own measurements.
//!
//! - [`AdmitAll`] (`none`): no control. The RE's bounded FIFO queue belongs to the
//!   driver, and the driver drops whatever arrives when it is full ("simple drop").
//! - [`ThresholdRejection`] (`threshold`): reject new INVITEs between a high and a low
//!   queue watermark (Shen, Schulzrinne & Nahum 2008, §4.3).
//! - [`Ohta`] (`ohta`): the same bang-bang rule with Ohta's watermarks as De Cicco et al.
//!   ran it (400/800 of a 1000-message queue).
//! - [`LocalOcc`] (`occ`): Hilt & Widjaja's local occupancy controller as De Cicco et al.
//!   ran it (acceptance probability from the measured CPU load).
//! - [`RedRejection`] (`red`): Montazerolghaem & Yaghmaee's RED-like random rejection on
//!   the averaged queue length.
//! - [`DualLoopPi`] (`pi`): De Cicco, Cofano & Mascolo's two PI loops. It also drains the
//!   INVITE queue, see [`DrainController`].
//! - [`LatencyBucket`] (`latency-bucket`): a token bucket whose rate follows the smoothed
//!   latency, in the style of Project Clearwater's load monitor.
//!
//! # Driving a local controller
//! The calls of the crate-level RE sequence, plus three optional inputs every policy
//! accepts (policies that do not need one ignore it):
//! - [`LocalAdmission::on_queue`] whenever the queue's contents change (the PI needs the
//!   INVITE queue length `q`);
//! - [`LocalAdmission::on_processed`] when the processor finishes a message (CPU busy
//!   time for OCC and the PI, latency for the latency bucket);
//! - [`LocalAdmission::on_cpu_sample`] if the driver measures the CPU itself. The first
//!   sample switches the policy from the busy time of completions to these samples.
//!
//! `pi` needs more: see [`DrainController`] for the draining sequence.
//!
//! # What no local control can do
//! A local control still pays for every INVITE it turns away: a 503 costs `1/β` of a
//! forwarded call. Its goodput at `r` times capacity is therefore at most
//! `g_opt(r) = (C_T β − r)/(β − 1)` ([`crate::optimal`], De Cicco, Cofano & Mascolo,
//! Proposition 1), whatever its rule. At `r = 10` and `C_T = 1` that reaches 0.9 of
//! capacity only for `β ≥ 91`: on the live bench's emulated RE (seven messages a call at
//! 476 µs, a rejection at 79 µs: `β ≈ 42`) the bound is 0.78, and at sluice's native `β`
//! of 5–8 it is 0. So "at least 0.9 of capacity from 1x to 10x" is out of reach for every policy
//! here by construction; only feedback, which moves the rejections to the SEs, can meet
//! it. What the policies can be held to is a share of `g_opt(r)` and no harm below
//! capacity.

mod cpu;
mod latency_bucket;
mod occ;
mod ohta;
pub mod pi;
mod red;
mod threshold;

pub use latency_bucket::{LatencyBucket, LatencyBucketConfig};
pub use occ::{LocalOcc, OccConfig};
pub use ohta::{Ohta, OhtaConfig};
pub use pi::{DualLoopPi, PiConfig, PiLoop, RejectSelection};
pub use red::{red_reject_probability, RedConfig, RedRejection};
pub use threshold::{ThresholdConfig, ThresholdRejection, LOCAL_DRAIN_SHARE};

use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use sluice_time::Time;

/// The RE's receive-stage policy.
pub trait LocalAdmission {
    /// A message arrived; `queue_len` is the number of messages already queued.
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict;
    fn handle_timeout(&mut self, now: Time);
    fn poll_timeout(&self) -> Option<Time>;
    /// The queue's contents changed. For `pi`, `invites` is the INVITE queue it drains.
    fn on_queue(&mut self, _now: Time, _queue: QueueOccupancy) {}
    /// The processor finished a message (rejections included).
    fn on_processed(&mut self, _now: Time, _completion: &Completion) {}
    /// A CPU load measurement, the busy fraction in `[0, 1]` since the previous one.
    /// Values that are not finite are ignored; others are clamped into `[0, 1]`.
    fn on_cpu_sample(&mut self, _now: Time, _busy_fraction: f64) {}
    /// Counters and the current control variable, for metrics and plots.
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics::default()
    }
}

/// A snapshot of a local policy's state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdmissionMetrics {
    /// New INVITEs this policy rejected so far (at arrival, or at draining for `pi`).
    pub rejected: u64,
    /// The policy's control variable: 1 while rejecting, else 0 (`threshold`, `ohta`);
    /// the acceptance probability `f` (`occ`); the rejection probability `P_rej`
    /// (`red`); the reject ratio `α` (`pi`); the token rate in INVITEs/s
    /// (`latency-bucket`).
    pub control_value: Option<f64>,
    /// The CPU load the policy acts on: the last `T_m` measurement (`occ`) or the
    /// filtered load `C̃` (`pi`).
    pub cpu_load: Option<f64>,
    /// `pi`: the commanded INVITE drain rate `u`, INVITEs/s.
    pub drain_rate: Option<f64>,
    /// `pi`: the queue set-point `q_T`, INVITEs.
    pub queue_target: Option<f64>,
    /// `latency-bucket`: the smoothed latency, seconds.
    pub latency: Option<f64>,
}

/// The draining side of a controller whose worker takes INVITEs from a queue at a
/// controlled rate (De Cicco et al. §IV-B; only [`DualLoopPi`] so far).
///
/// # Driver sequence
/// The driver keeps INVITEs (new and retransmitted) in their own FIFO of at most
/// [`max_queue`](Self::max_queue) messages, dropping arrivals when it is full (the
/// paper's drop-tail queue). Other messages do not wait in it; in Kamailio they are
/// processed synchronously as they arrive (§V), which a simulator can model by serving
/// them ahead of the INVITE queue.
/// 1. Every INVITE arrival: `on_arrival(now, queue_len, &summary)` (always `Admit`; it
///    feeds the arrival-rate measurement), then enqueue or drop.
/// 2. Whenever the INVITE queue changes: `on_queue(now, QueueOccupancy { invites, .. })`.
/// 3. CPU load: `on_processed(now, &completion)` for every finished message, or
///    `on_cpu_sample(now, busy)` if the driver measures the CPU itself.
/// 4. Whenever the worker could take an INVITE: while the queue is non-empty, call
///    `take(now, &summary)` for its head; `Some(Admit)` → dequeue and forward it,
///    `Some(Reject)` → dequeue and answer 503, `None` → leave it queued.
///    [`drain_budget`](Self::drain_budget) says how many `take`s would succeed now.
/// 5. Sleep until the earlier of `poll_timeout()` (the 10 ms control tick; call
///    `handle_timeout(now)`) and, while INVITEs wait, `next_drain(now)`; then go to 4.
pub trait DrainController {
    /// Whole INVITEs the worker may take out of the queue now.
    fn drain_budget(&mut self, now: Time) -> u32;
    /// The worker takes the INVITE at the head of the queue if the budget allows:
    /// `None` if it must wait, else forward (`Admit`) or answer 503 (`Reject`).
    fn take(&mut self, now: Time, message: &MessageSummary) -> Option<AdmissionVerdict>;
    /// When the next whole INVITE of budget accrues at the current drain rate (`now`
    /// if one is available already); `None` while the drain rate is zero, in which case
    /// only the next control tick (`poll_timeout`) can change it.
    fn next_drain(&self, now: Time) -> Option<Time>;
    /// The INVITE queue's capacity `q_M` the driver should enforce.
    fn max_queue(&self) -> usize;
    /// Whether the worker should now take INVITEs in their arrival order among the other
    /// messages, rather than only when no other message waits: while the drain is not
    /// paced, serving INVITEs behind everything else only delays them.
    fn in_arrival_order(&self) -> bool {
        false
    }
}

/// No control: admit everything; a full queue drops (in the driver).
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmitAll;

impl LocalAdmission for AdmitAll {
    fn on_arrival(
        &mut self,
        _now: Time,
        _queue_len: usize,
        _message: &MessageSummary,
    ) -> AdmissionVerdict {
        AdmissionVerdict::Admit
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
}

/// Any local admission policy, chosen from a config.
#[derive(Clone, Debug)]
pub enum AnyLocalAdmission {
    AdmitAll(AdmitAll),
    Threshold(ThresholdRejection),
    Ohta(Ohta),
    Occ(LocalOcc),
    Red(RedRejection),
    Pi(DualLoopPi),
    LatencyBucket(LatencyBucket),
}

impl AnyLocalAdmission {
    /// The draining side, for policies that drain the INVITE queue themselves (`pi`).
    pub fn drain_mut(&mut self) -> Option<&mut dyn DrainController> {
        match self {
            Self::Pi(p) => Some(p),
            _ => None,
        }
    }

    /// True if the driver must drain the INVITE queue through [`Self::drain_mut`].
    pub fn drains(&self) -> bool {
        matches!(self, Self::Pi(_))
    }
}

macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            AnyLocalAdmission::AdmitAll($p) => $e,
            AnyLocalAdmission::Threshold($p) => $e,
            AnyLocalAdmission::Ohta($p) => $e,
            AnyLocalAdmission::Occ($p) => $e,
            AnyLocalAdmission::Red($p) => $e,
            AnyLocalAdmission::Pi($p) => $e,
            AnyLocalAdmission::LatencyBucket($p) => $e,
        }
    };
}

impl LocalAdmission for AnyLocalAdmission {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        each!(self, p => p.on_arrival(now, queue_len, message))
    }
    fn handle_timeout(&mut self, now: Time) {
        each!(self, p => p.handle_timeout(now));
    }
    fn poll_timeout(&self) -> Option<Time> {
        each!(self, p => p.poll_timeout())
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        each!(self, p => p.on_queue(now, queue));
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        each!(self, p => p.on_processed(now, completion));
    }
    fn on_cpu_sample(&mut self, now: Time, busy_fraction: f64) {
        each!(self, p => p.on_cpu_sample(now, busy_fraction));
    }
    fn metrics(&self) -> AdmissionMetrics {
        each!(self, p => p.metrics())
    }
}

/// A fraction parameter from a config: not-a-number falls back, others are clamped.
pub(crate) fn fraction_or(x: f64, fallback: f64) -> f64 {
    if x.is_nan() {
        fallback
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// A non-negative finite parameter from a config, else the fallback.
pub(crate) fn non_negative_or(x: f64, fallback: f64) -> f64 {
    if x.is_finite() && x >= 0.0 {
        x
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, ControlConfig};
    use std::time::Duration;

    #[test]
    fn every_local_policy_survives_nonsense_configs_and_inputs() {
        let mut cfg = ControlConfig::default();
        cfg.occ.target_cpu = f64::NAN;
        cfg.occ.control_interval = Duration::ZERO;
        cfg.occ.measurement_interval = Duration::ZERO;
        cfg.occ.max_increase = f64::INFINITY;
        cfg.red.queue_weight = f64::NAN;
        cfg.red.th_low = Some(f64::NAN);
        cfg.red.th_high = Some(-5.0);
        cfg.ohta.lo_wm = Some(900);
        cfg.latency_bucket.target_latency = Duration::ZERO;
        cfg.latency_bucket.adjust_interval = Duration::ZERO;
        cfg.latency_bucket.adjust_every = 0;
        cfg.latency_bucket.initial_rate = f64::NAN;
        cfg.latency_bucket.bucket_depth = f64::NEG_INFINITY;
        cfg.latency_bucket.decrease_factor = 0.0;
        cfg.pi.sample_interval = Duration::ZERO;
        for algorithm in Algorithm::ALL {
            cfg.algorithm = algorithm;
            let mut a = cfg.build_local_admission(Time::ZERO, 800);
            for k in 0..50u64 {
                let t = Time::from_micros(k * 300);
                let m = if k % 2 == 0 {
                    MessageSummary::new_session(None)
                } else {
                    MessageSummary::response(None)
                };
                a.on_arrival(t, (k as usize) * 100, &m);
                a.on_queue(t, QueueOccupancy::default());
                a.on_cpu_sample(t, if k % 3 == 0 { f64::NAN } else { 2.0 });
                a.on_processed(
                    t,
                    &Completion {
                        message: m,
                        service_time: Duration::MAX,
                        queueing_delay: Duration::MAX,
                        session_accepted: false,
                    },
                );
                if let Some(d) = a.poll_timeout() {
                    a.handle_timeout(d.max(t));
                }
                if let Some(d) = a.drain_mut() {
                    let _ = d.drain_budget(t);
                    let _ = d.take(t, &m);
                    let _ = d.next_drain(t);
                }
                let metrics = a.metrics();
                assert!(
                    !metrics.control_value.is_some_and(f64::is_nan),
                    "{algorithm}"
                );
            }
        }
    }
}
