//! No feedback: the RE side of the baselines of §4.3 (simple drop, threshold rejection).
//!
//! It still runs the §3.1 estimator so a driver can plot service rate, session length
//! and occupancy for uncontrolled runs exactly as for controlled ones.

use super::{FeedbackGenerator, ReceiverCore, ReceiverMetrics};
use crate::active_sources::ActiveSourceConfig;
use crate::estimation::EstimatorConfig;
use crate::fairness::Fairness;
use crate::types::{
    Completion, FeedForward, Feedback, MessageSummary, NeighbourId, QueueOccupancy,
};
use sluice_time::Time;

#[derive(Clone, Debug)]
pub struct NoFeedback {
    core: ReceiverCore<()>,
}

impl NoFeedback {
    pub fn new(estimator: &EstimatorConfig, sources: &ActiveSourceConfig, now: Time) -> Self {
        Self {
            core: ReceiverCore::new(estimator, sources, Fairness::ProviderCentric, now),
        }
    }
}

impl FeedbackGenerator for NoFeedback {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        self.core.arrival(now, message, || ());
    }
    fn on_feed_forward(&mut self, _now: Time, _from: NeighbourId, _feed_forward: FeedForward) {}
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        self.core.estimator.on_queue(queue);
    }
    fn on_processed(&mut self, _now: Time, completion: &Completion) {
        self.core.estimator.on_processed(completion);
    }
    fn feedback_for(&mut self, _now: Time, _neighbour: NeighbourId) -> Option<Feedback> {
        None
    }
    fn handle_timeout(&mut self, now: Time) {
        self.core.estimator.handle_timeout(now);
    }
    fn poll_timeout(&self) -> Option<Time> {
        self.core.estimator.poll_timeout()
    }
    fn metrics(&self) -> ReceiverMetrics {
        self.core.metrics(None)
    }
}
