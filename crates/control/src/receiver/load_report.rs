//! The RE's side of the fuzzy window (Montazerolghaem & Yaghmaee 2014, §V): it reports
//! its own CPU and memory occupancy, and each SE sets its window from them
//! ([`crate::fuzzy`]). The RE computes no window and keeps no per-SE state, which is
//! the paper's point (§VII.B.1: "the downstream server did not need to know about the
//! number of upstream servers").
//!
//! - CPU: the processor's busy fraction (the occupancy rate-occ binds on) over the last
//!   [`CPU_INTERVALS`] measurement intervals of the estimator, a second at its default
//!   100 ms, as the paper samples it (§IV: "regular sampling (every second)"). Over one
//!   100 ms interval the busy fraction of a server offered 0.95 of its capacity is above
//!   0.95 about as often as below, and each such interval shrank every SE's window: live,
//!   4 % of the calls were turned away at 0.95x.
//! - Memory: the driver's [`FeedbackGenerator::on_memory`] values, averaged over the last
//!   measurement interval weighted by how long each held: the queue fills within a fraction
//!   of a second of overload, and this is the input that reports it at once. The proxy
//!   reports the fullest of its bounded stores: the receive queue against its capacity,
//!   and the transactions against the table limit and the memory budget. Under overload
//!   the queue fills first (the paper's Fig. 11); the other two guard the budgets behind
//!   the table headroom. The queue also counts as full once its oldest message has waited
//!   T1, in proportion below that: past T1 every sender retransmits, whatever share of the
//!   room the queue takes. In front of a slow RE a queue holds seconds of work, and read
//!   as room alone it was Low (under a tenth) while the INVITEs already waited past T1;
//!   on 59 sampled topologies overloaded with a queue of more than half a second, the
//!   window held goodput on 37 with the wait counted, 34 without.
//!
//! Every SE gets the same report, the one of the last closed interval; before the first
//! interval closes there is none.

use super::{FeedbackGenerator, ReceiverCore, ReceiverMetrics};
use crate::active_sources::ActiveSourceConfig;
use crate::estimation::EstimatorConfig;
use crate::fairness::Fairness;
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use sluice_time::Time;
use std::collections::VecDeque;

/// Measurement intervals the reported CPU occupancy is averaged over.
pub const CPU_INTERVALS: usize = 10;

#[derive(Clone, Debug)]
pub struct LoadReport {
    core: ReceiverCore<()>,
    /// The memory occupancy now, since `memory_since`.
    memory_now: f64,
    memory_since: Time,
    /// Memory-seconds accumulated in the open interval, and its start.
    memory_area: f64,
    interval_start: Time,
    intervals_seen: u64,
    /// The busy fractions of the last [`CPU_INTERVALS`] intervals.
    cpu_history: VecDeque<f64>,
    report: Option<Feedback>,
}

impl LoadReport {
    pub fn new(estimator: &EstimatorConfig, sources: &ActiveSourceConfig, now: Time) -> Self {
        Self {
            core: ReceiverCore::new(estimator, sources, Fairness::ProviderCentric, now),
            memory_now: 0.0,
            memory_since: now,
            memory_area: 0.0,
            interval_start: now,
            intervals_seen: 0,
            cpu_history: VecDeque::with_capacity(CPU_INTERVALS),
            report: None,
        }
    }

    fn accumulate(&mut self, now: Time) {
        let held = now.saturating_since(self.memory_since).as_secs_f64();
        self.memory_area += self.memory_now * held;
        self.memory_since = now;
    }

    /// The report in force, if an interval has closed.
    pub fn report(&self) -> Option<(f64, f64)> {
        match self.report.map(|f| f.value) {
            Some(FeedbackValue::Load { cpu, memory }) => Some((cpu, memory)),
            _ => None,
        }
    }
}

impl FeedbackGenerator for LoadReport {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        self.core.arrival(now, message, || ());
    }
    fn on_feed_forward(&mut self, _now: Time, _from: NeighbourId, _feed_forward: FeedForward) {}
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        self.core.estimator.on_queue(queue);
    }
    fn on_memory(&mut self, now: Time, occupancy: f64) {
        self.accumulate(now);
        self.memory_now = if occupancy.is_nan() {
            1.0
        } else {
            occupancy.clamp(0.0, 1.0)
        };
    }
    fn on_processed(&mut self, _now: Time, completion: &Completion) {
        self.core.estimator.on_processed(completion);
    }
    fn feedback_for(&mut self, _now: Time, _neighbour: NeighbourId) -> Option<Feedback> {
        self.report
    }
    fn handle_timeout(&mut self, now: Time) {
        self.core.estimator.handle_timeout(now);
        let closed = self.core.estimator.intervals_closed();
        if closed == self.intervals_seen {
            return;
        }
        self.intervals_seen = closed;
        self.accumulate(now);
        let span = now.saturating_since(self.interval_start).as_secs_f64();
        let memory = if span > 0.0 {
            (self.memory_area / span).clamp(0.0, 1.0)
        } else {
            self.memory_now
        };
        self.memory_area = 0.0;
        self.interval_start = now;
        if self.cpu_history.len() == CPU_INTERVALS {
            self.cpu_history.pop_front();
        }
        self.cpu_history
            .push_back(self.core.estimator.occupancy().unwrap_or(0.0));
        let cpu = self.cpu_history.iter().sum::<f64>() / self.cpu_history.len() as f64;
        self.report = Some(self.core.stamp(FeedbackValue::Load { cpu, memory }));
    }
    fn poll_timeout(&self) -> Option<Time> {
        self.core.estimator.poll_timeout()
    }
    fn metrics(&self) -> ReceiverMetrics {
        self.core.metrics(self.report().map(|(_, memory)| memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::test_support::{processed, se};
    use std::time::Duration;

    #[test]
    fn reports_busy_fraction_of_the_last_second_and_memory_of_the_last_interval() {
        let est = EstimatorConfig::default();
        let mut g = LoadReport::new(&est, &ActiveSourceConfig::default(), Time::ZERO);
        assert_eq!(g.feedback_for(Time::ZERO, NeighbourId(0)), None);
        // 100 ms interval: 30 ms busy; memory 0.2 for 25 ms, then 0.6 for 75 ms.
        for k in 0..15 {
            let mut done = processed(MessageSummary::new_session(se(0)), true);
            done.service_time = Duration::from_millis(2);
            g.on_processed(Time::from_millis(k * 5), &done);
        }
        g.on_memory(Time::ZERO, 0.2);
        g.on_memory(Time::from_millis(25), 0.6);
        g.handle_timeout(Time::from_millis(100));
        let fb = g
            .feedback_for(Time::from_millis(100), NeighbourId(3))
            .unwrap();
        let FeedbackValue::Load { cpu, memory } = fb.value else {
            panic!("{fb:?}")
        };
        assert!((cpu - 0.3).abs() < 1e-9, "cpu {cpu}");
        assert!((memory - 0.5).abs() < 1e-9, "memory {memory}");
        // Every SE gets the same report until the next interval closes.
        assert_eq!(
            g.feedback_for(Time::from_millis(150), NeighbourId(0)),
            Some(fb)
        );
        g.on_memory(Time::from_millis(150), f64::NAN);
        g.handle_timeout(Time::from_millis(200));
        let (cpu, memory) = g.report().unwrap();
        assert!(
            (cpu - 0.15).abs() < 1e-9,
            "a busy and an idle interval: {cpu}"
        );
        assert!((memory - 0.8).abs() < 1e-9, "0.6 then full: {memory}");
        // CPU is the mean of the last ten intervals: ten idle ones forget the busy one.
        for k in 3..=10 {
            g.handle_timeout(Time::from_millis(k * 100));
        }
        assert!(g.report().unwrap().0 > 0.0);
        g.handle_timeout(Time::from_millis(1100));
        assert!(g.report().unwrap().0.abs() < 1e-12);
    }
}
