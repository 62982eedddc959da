//! The control loop's signals, one sample per second, for the live dashboard
//! (`/dashboard` draws what `/signals` returns). The shell samples the core's counters
//! once per watch interval; the admin thread reads the last [`HISTORY`] samples. A fixed
//! number of samples of fixed size: the history holds the same memory after a minute as
//! after a month.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use sluice_control::{AdmissionMetrics, ReceiverMetrics};
use sluice_proxy_core::{CoreStats, DelayHistogram, KIND_LABELS};

use crate::watch::turned_away;

/// Samples kept: ten minutes at one a second.
pub const HISTORY: usize = 600;

/// One interval's signals. Rates are per second over the interval; a value the interval
/// gave no observation of (a delay with no call, a control value not computed yet) is
/// `null`, so the plot shows a gap rather than a 0 that reads as a measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Signal {
    /// Seconds since the proxy started, at the end of the interval.
    pub t: f64,
    /// INVITE datagrams received (retransmissions included).
    pub invites_in: f64,
    /// New requests turned away: rejected with 503 or dropped by local admission, full
    /// queues, the table's headroom, the memory budget or a next hop's control.
    pub turned_away: f64,
    /// 2xx responses sent (relayed calls answered; retransmissions included).
    pub ok_out: f64,
    /// Retransmissions that reached the proxy.
    pub retransmissions_in: f64,
    /// Processor busy fraction over the last second.
    pub occupancy: f64,
    /// Messages waiting for the processor (both queues).
    pub queue: usize,
    /// Mean queueing delay of the messages processed in the interval, seconds.
    pub queueing_delay: Option<f64>,
    /// Mean setup delay of the calls answered in the interval, seconds.
    pub setup_delay: Option<f64>,
    /// Local admission's control variable (see `AdmissionMetrics::control_value`).
    pub admission_control: Option<f64>,
    /// The CPU load local admission acts on.
    pub admission_cpu: Option<f64>,
    /// RE: the feedback algorithm's control variable.
    pub feedback_control: Option<f64>,
}

fn kind(counts: &sluice_proxy_core::KindCounts, label: &str) -> u64 {
    KIND_LABELS
        .iter()
        .position(|k| *k == label)
        .map_or(0, |i| counts.0[i])
}

fn mean_since(now: &DelayHistogram, before: &DelayHistogram) -> Option<f64> {
    let n = now.count.saturating_sub(before.count);
    (n > 0).then(|| (now.sum_seconds - before.sum_seconds).max(0.0) / n as f64)
}

/// The samples so far, shared between the shell (which adds) and the admin thread.
#[derive(Clone, Debug, Default)]
pub struct SignalHistory {
    samples: Arc<Mutex<VecDeque<Signal>>>,
}

impl SignalHistory {
    /// The samples taken after `t` seconds (all with `None`), oldest first.
    pub fn since(&self, t: Option<f64>) -> Vec<Signal> {
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        samples
            .iter()
            .filter(|s| t.is_none_or(|t| s.t > t))
            .cloned()
            .collect()
    }

    fn push(&self, signal: Signal) {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if samples.len() == HISTORY {
            samples.pop_front();
        }
        samples.push_back(signal);
    }
}

/// Turns successive counter snapshots into [`Signal`]s.
#[derive(Debug, Default)]
pub struct Sampler {
    last: Option<(Duration, CoreStats)>,
    pub history: SignalHistory,
}

impl Sampler {
    pub fn sample(
        &mut self,
        uptime: Duration,
        stats: &CoreStats,
        admission: &AdmissionMetrics,
        feedback: Option<&ReceiverMetrics>,
    ) {
        let Some((then, before)) = self.last.replace((uptime, *stats)) else {
            return;
        };
        let secs = uptime.saturating_sub(then).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let per_s = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
        self.history.push(Signal {
            t: uptime.as_secs_f64(),
            invites_in: per_s(
                kind(&stats.in_by_kind, "INVITE"),
                kind(&before.in_by_kind, "INVITE"),
            ),
            turned_away: per_s(turned_away(stats), turned_away(&before)),
            ok_out: per_s(
                kind(&stats.out_by_kind, "2xx"),
                kind(&before.out_by_kind, "2xx"),
            ),
            retransmissions_in: per_s(stats.retransmissions_seen(), before.retransmissions_seen()),
            occupancy: stats.occupancy,
            queue: stats.queue_len + stats.invite_queue_len,
            queueing_delay: mean_since(&stats.queueing_delay, &before.queueing_delay),
            setup_delay: mean_since(&stats.setup_delay, &before.setup_delay),
            admission_control: admission.control_value.filter(|v| v.is_finite()),
            admission_cpu: admission.cpu_load.filter(|v| v.is_finite()),
            feedback_control: feedback
                .and_then(|f| f.control_value)
                .filter(|v| v.is_finite()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_and_delays_without_calls_are_absent() {
        let mut sampler = Sampler::default();
        let mut stats = CoreStats::default();
        let admission = AdmissionMetrics::default();
        sampler.sample(Duration::from_secs(1), &stats, &admission, None);
        assert!(
            sampler.history.since(None).is_empty(),
            "the first call only sets the base"
        );
        stats.in_by_kind.0[0] = 100;
        stats.rejected_policy = 30;
        stats.setup_delay.observe(Duration::from_millis(20));
        stats.setup_delay.observe(Duration::from_millis(40));
        sampler.sample(Duration::from_secs(3), &stats, &admission, None);
        let s = &sampler.history.since(None)[0];
        assert!((s.invites_in - 50.0).abs() < 1e-9);
        assert!((s.turned_away - 15.0).abs() < 1e-9);
        assert!((s.setup_delay.unwrap() - 0.030).abs() < 1e-9);
        assert_eq!(
            s.queueing_delay, None,
            "no message processed: no delay, not 0"
        );
        assert_eq!(s.admission_control, None);
    }

    #[test]
    fn the_history_keeps_the_latest_samples_only() {
        let mut sampler = Sampler::default();
        let stats = CoreStats::default();
        let admission = AdmissionMetrics::default();
        for second in 0..(HISTORY as u64 + 50) {
            sampler.sample(Duration::from_secs(second), &stats, &admission, None);
        }
        let all = sampler.history.since(None);
        assert_eq!(all.len(), HISTORY);
        assert!((all.last().unwrap().t - (HISTORY + 49) as f64).abs() < 1e-9);
        assert_eq!(sampler.history.since(Some(640.0)).len(), 9);
    }
}
