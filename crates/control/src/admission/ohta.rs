//! Ohta's queue-based bang-bang control as De Cicco, Cofano & Mascolo ran it (journal
//! version §VII; conference version §4.2), after M. Ohta, "Overload control in a SIP
//! signaling network" (2006).
//!
//! Two states. In *normal* every message is admitted; when the queue length reaches the
//! high watermark `hi_wm` the server enters *congestion* and rejects new INVITEs; it
//! returns to normal once the queue length falls below the low watermark `lo_wm`.
//! De Cicco et al. write that the congested server rejects "all the requests"; as in
//! the rest of this crate only session-starting INVITEs are rejected, since the other
//! requests belong to sessions already admitted and a 503 would waste them.
//!
//! Defaults (De Cicco et al. §VII, "as suggested in" Hilt & Widjaja 2008): `lo_wm = 400`,
//! `hi_wm = 800`, queue buffer 1000 messages, taken here as 40 % and 80 % of the queue the
//! policy watches, so that they suit any queue (a fixed 800 never triggers in front of a
//! smaller one). The buffer is the driver's queue (its capacity set there); the controller
//! only reads the queue length.
//!
//! By default it also rejects while the queue holds 250 ms of work (`work_mark_ms`), as the
//! local threshold does: in front of a slow server its watermarks are seconds of work, and
//! INVITEs that wait past T1 come back as retransmissions. The mark is held to half the
//! time the queue takes to drain, as the threshold's. The papers' RE
//! (`Scenario::paper_re` in the simulator) turns the mark off.
//!
//! With the mark, Ohta, the threshold and RED ran the same on all 200 sampled topologies
//! (`experiments/sampled-topologies.toml`, seed 1): under overload the queue reaches the
//! work mark before any of their marks in messages, because a queued INVITE counts with
//! its session's later messages. Their own marks decide only with `work_mark_ms = 0`.

use super::threshold::{share_of, DEFAULT_WORK_MARK, LOCAL_DRAIN_SHARE};
use super::{AdmissionMetrics, LocalAdmission, ThresholdRejection};
use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OhtaConfig {
    /// Enter congestion when the queue holds this many messages (unset: 80 % of the
    /// watched queue's capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hi_wm: Option<usize>,
    /// Leave congestion when the queue holds fewer than this many (unset: 40 %).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lo_wm: Option<usize>,
    /// Also reject new INVITEs while the queue holds this much work, as the local threshold
    /// does (`threshold.work_mark_ms`); unset: 250 ms, half of T1; 0: the watermarks
    /// alone, as De Cicco et al. ran it. Its watermarks are in messages, and in front of a
    /// slow server 80 % of the queue is seconds of work, past T1.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

impl OhtaConfig {
    /// `hi_wm` and `lo_wm` in front of a queue of `queue_capacity` messages.
    pub fn marks(&self, queue_capacity: usize) -> (usize, usize) {
        (
            self.hi_wm.unwrap_or_else(|| share_of(queue_capacity, 0.8)),
            self.lo_wm.unwrap_or_else(|| share_of(queue_capacity, 0.4)),
        )
    }

    /// The work mark in force (see the field).
    pub fn work_mark(&self) -> Duration {
        self.work_mark.unwrap_or(DEFAULT_WORK_MARK)
    }
}

#[derive(Clone, Debug)]
pub struct Ohta {
    inner: ThresholdRejection,
}

impl Ohta {
    /// In front of a queue of `queue_capacity` messages, counting a queued INVITE's work
    /// as `session_length` messages. A `lo_wm` above `hi_wm` is lowered to it.
    pub fn new(config: &OhtaConfig, queue_capacity: usize, session_length: f64) -> Self {
        let (hi, lo) = config.marks(queue_capacity);
        Self {
            inner: ThresholdRejection::with_marks(hi, lo)
                .with_delay_mark(config.work_mark(), session_length)
                .held_to_queue(queue_capacity, LOCAL_DRAIN_SHARE),
        }
    }

    /// True in the congestion state.
    pub fn is_congested(&self) -> bool {
        self.inner.is_rejecting()
    }

    pub fn rejected(&self) -> u64 {
        self.inner.rejected()
    }
}

impl LocalAdmission for Ohta {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        self.inner.on_arrival(now, queue_len, message)
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        self.inner.on_queue(now, queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.inner.on_processed(now, completion);
    }
    fn metrics(&self) -> AdmissionMetrics {
        self.inner.metrics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NeighbourId;

    #[test]
    fn congestion_starts_at_hi_wm_and_lasts_until_below_lo_wm() {
        let mut o = Ohta::new(&OhtaConfig::default(), 1000, 1.0);
        let invite = MessageSummary::new_session(Some(NeighbourId(1)));
        let mut reject_at =
            |len| o.on_arrival(Time::ZERO, len, &invite) == AdmissionVerdict::Reject;
        // Normal below hi_wm, however high.
        assert!(!reject_at(0));
        assert!(!reject_at(799));
        // Congested from hi_wm on ...
        assert!(reject_at(800));
        // ... and through the whole hysteresis band, down to lo_wm itself.
        assert!(reject_at(700));
        assert!(reject_at(401));
        assert!(reject_at(400));
        // Normal again below lo_wm, and through the band on the way up.
        assert!(!reject_at(399));
        assert!(!reject_at(600));
        assert!(!reject_at(799));
        assert!(reject_at(1000));
        assert_eq!(o.rejected(), 5);
        assert!(o.is_congested());
        assert_eq!(o.metrics().control_value, Some(1.0));
    }

    #[test]
    fn congestion_spares_messages_of_admitted_sessions() {
        let mut o = Ohta::new(&OhtaConfig::default(), 1000, 1.0);
        let src = Some(NeighbourId(1));
        assert_eq!(
            o.on_arrival(Time::ZERO, 900, &MessageSummary::new_session(src)),
            AdmissionVerdict::Reject
        );
        for m in [
            MessageSummary::other_request(src),
            MessageSummary::response(src),
            MessageSummary::repeated_invite(src),
        ] {
            assert_eq!(o.on_arrival(Time::ZERO, 900, &m), AdmissionVerdict::Admit);
        }
    }
}
