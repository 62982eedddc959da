//! Threshold rejection, Shen, Schulzrinne & Nahum 2008, §4.3.
//!
//! When the queue length reaches the high watermark, new INVITEs are rejected (other
//! messages are still admitted, since they belong to sessions already accepted);
//! admission of new INVITEs resumes only once the queue length falls below the low
//! watermark. The gap between the two is hysteresis, so the policy does not flap.
//!
//! The paper gives no watermark values. Defaults here: high 400, low 300 messages, i.e.
//! 80 % and 60 % of the paper's 500-message queue, leaving room above the high mark for
//! the non-INVITE traffic of sessions already admitted.

use super::{AdmissionMetrics, LocalAdmission};
use crate::types::{AdmissionVerdict, MessageSummary};
use serde::{Deserialize, Serialize};
use sluice_time::Time;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdConfig {
    /// Start rejecting new INVITEs when the queue holds this many messages.
    pub high_watermark: usize,
    /// Stop rejecting when the queue holds fewer than this many.
    pub low_watermark: usize,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            high_watermark: 400,
            low_watermark: 300,
        }
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
    /// A low watermark above the high one is lowered to it (no hysteresis, still sane).
    pub fn new(config: &ThresholdConfig) -> Self {
        Self {
            high: config.high_watermark,
            low: config.low_watermark.min(config.high_watermark),
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
        let mut t = ThresholdRejection::new(&ThresholdConfig {
            high_watermark: 10,
            low_watermark: 5,
        });
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
    fn only_new_invites_are_rejected() {
        let mut t = ThresholdRejection::new(&ThresholdConfig {
            high_watermark: 1,
            low_watermark: 0,
        });
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
