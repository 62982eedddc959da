//! Threshold rejection, Shen, Schulzrinne & Nahum 2008, §4.3.
//!
//! When the queue length reaches the high watermark, new INVITEs are rejected (other
//! messages are still admitted, since they belong to sessions already accepted);
//! admission of new INVITEs resumes only once the queue length falls below the low
//! watermark. The gap between the two is hysteresis, so the policy does not flap.
//!
//! The paper gives no watermark values. Defaults here: 80 % and 60 % of the queue the
//! policy watches (400 and 300 of the paper's 500-message queue), leaving room above the
//! high mark for the non-INVITE traffic of sessions already admitted. They are shares
//! rather than counts so that the default suits any queue: a fixed 400 would never
//! trigger in front of a smaller queue and would trigger late in front of a larger one.

use super::{AdmissionMetrics, LocalAdmission};
use crate::types::{AdmissionVerdict, MessageSummary};
use serde::{Deserialize, Serialize};
use sluice_time::Time;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdConfig {
    /// Start rejecting new INVITEs when the queue holds this many messages (unset: 80 %
    /// of the watched queue's capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<usize>,
    /// Stop rejecting when the queue holds fewer than this many (unset: 60 %).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_watermark: Option<usize>,
}

/// A share of a queue's capacity, in whole messages (at least 1 for a non-empty queue).
pub(crate) fn share_of(queue_capacity: usize, share: f64) -> usize {
    ((queue_capacity as f64 * share).round() as usize).clamp(1, queue_capacity.max(1))
}

impl ThresholdConfig {
    /// The high and low watermarks in front of a queue of `queue_capacity` messages.
    pub fn marks(&self, queue_capacity: usize) -> (usize, usize) {
        (
            self.high_watermark
                .unwrap_or_else(|| share_of(queue_capacity, 0.8)),
            self.low_watermark
                .unwrap_or_else(|| share_of(queue_capacity, 0.6)),
        )
    }
}

#[derive(Clone, Debug)]
pub struct ThresholdRejection {
    high: usize,
    low: usize,
    rejecting: bool,
    rejected: u64,
}

impl ThresholdRejection {
    /// In front of a queue of `queue_capacity` messages. A low watermark above the high one
    /// is lowered to it (no hysteresis, still sane).
    pub fn new(config: &ThresholdConfig, queue_capacity: usize) -> Self {
        let (high, low) = config.marks(queue_capacity);
        Self::with_marks(high, low)
    }

    pub(crate) fn with_marks(high: usize, low: usize) -> Self {
        Self {
            high,
            low: low.min(high),
            rejecting: false,
            rejected: 0,
        }
    }

    pub fn is_rejecting(&self) -> bool {
        self.rejecting
    }

    /// New INVITEs rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

impl LocalAdmission for ThresholdRejection {
    fn on_arrival(
        &mut self,
        _now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        if queue_len >= self.high {
            self.rejecting = true;
        } else if queue_len < self.low {
            self.rejecting = false;
        }
        if self.rejecting && message.is_session_start() {
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
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics {
            rejected: self.rejected,
            control_value: Some(if self.rejecting { 1.0 } else { 0.0 }),
            ..AdmissionMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NeighbourId;

    #[test]
    fn rejects_from_high_until_below_low() {
        let mut t = ThresholdRejection::new(
            &ThresholdConfig {
                high_watermark: Some(10),
                low_watermark: Some(5),
            },
            500,
        );
        let invite = MessageSummary::new_session(Some(NeighbourId(1)));
        let verdicts: Vec<bool> = [0, 9, 10, 12, 9, 6, 5, 4, 6, 9, 10]
            .iter()
            .map(|&len| t.on_arrival(Time::ZERO, len, &invite) == AdmissionVerdict::Reject)
            .collect();
        assert_eq!(
            verdicts,
            vec![false, false, true, true, true, true, true, false, false, false, true]
        );
        assert_eq!(t.rejected(), 6);
    }

    #[test]
    fn default_marks_are_shares_of_the_watched_queue() {
        let d = ThresholdConfig::default();
        assert_eq!(d.marks(500), (400, 300), "the paper's queue");
        assert_eq!(d.marks(100), (80, 60));
        assert_eq!(d.marks(1), (1, 1));
        let set = ThresholdConfig {
            high_watermark: Some(7),
            low_watermark: None,
        };
        assert_eq!(set.marks(100), (7, 60), "a set mark is kept as it is");
    }

    #[test]
    fn only_new_invites_are_rejected() {
        let mut t = ThresholdRejection::new(
            &ThresholdConfig {
                high_watermark: Some(1),
                low_watermark: Some(0),
            },
            500,
        );
        let src = Some(NeighbourId(1));
        for m in [
            MessageSummary::other_request(src),
            MessageSummary::response(src),
            MessageSummary::repeated_invite(src),
        ] {
            assert_eq!(t.on_arrival(Time::ZERO, 100, &m), AdmissionVerdict::Admit);
        }
        assert!(t.is_rejecting());
        assert_eq!(
            t.on_arrival(Time::ZERO, 100, &MessageSummary::new_session(src)),
            AdmissionVerdict::Reject
        );
    }
}
