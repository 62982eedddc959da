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
//!
//! As the local control, and as the backstop behind a feedback algorithm
//! (`ControlConfig::backstop`), it also watches the queue's work in time,
//! [`ThresholdRejection::with_delay_mark`]: a share of a long queue can hold seconds of
//! work, and an INVITE admitted into it brings its session's later messages too. A UAS
//! retransmits its 2xx when the ACK is not back within T1 (500 ms, RFC 3261 §13.3.1.4),
//! and both cross the queue; so by default it rejects while the queue holds more than
//! half of T1 of work, counting each queued INVITE with its session's later messages (as
//! eq. 1 of Shen, Schulzrinne & Nahum 2008, §3.1, counts sessions).

use super::{AdmissionMetrics, LocalAdmission};
use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

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
    /// As the local control, also reject new INVITEs while the queue holds this much work
    /// ([`ThresholdRejection::with_delay_mark`]); unset: 250 ms, half of T1; 0: the
    /// watermarks alone, as in the paper. In front of a slow server 80 % of the queue is
    /// seconds of work, past T1, and every caller retransmits: on 200 sampled topologies
    /// (seed 1) the threshold held 0.9 of its optimal goodput on 45 of the 122 overloaded
    /// with the watermarks alone and on 105 with this mark. As the local control the mark
    /// is held to half the time the queue takes to drain: 114 of 122, and no harm still on
    /// all 78 below capacity. As a backstop behind feedback the mark is
    /// `backstop_work_ms`, not held.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

/// A share of a queue's capacity, in whole messages (at least 1 for a non-empty queue).
pub(crate) fn share_of(queue_capacity: usize, share: f64) -> usize {
    ((queue_capacity as f64 * share).round() as usize).clamp(1, queue_capacity.max(1))
}

/// A local control's work mark when none is configured: half of T1.
pub(crate) const DEFAULT_WORK_MARK: Duration = Duration::from_millis(250);

impl ThresholdConfig {
    /// The work mark in force as the local control (see the field).
    pub fn work_mark(&self) -> Duration {
        self.work_mark.unwrap_or(DEFAULT_WORK_MARK)
    }

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
    delay_mark: Option<DelayMark>,
    rejecting: bool,
    rejected: u64,
}

/// The queue's work in time, as a second pair of marks.
#[derive(Clone, Debug)]
struct DelayMark {
    /// Start rejecting at this much work, seconds; stop below `low`.
    high: f64,
    low: f64,
    /// Messages per session, for eq. 1.
    session_length: f64,
    /// Smoothed service time of a message the processor did not reject, seconds; none
    /// before the first.
    service_time: Option<f64>,
    queue: QueueOccupancy,
    /// When the mark is held to the queue ([`ThresholdRejection::held_to_queue`]): the
    /// watched queue's capacity in messages times the share of its drain time held to.
    held_messages: Option<f64>,
}

/// The share of its queue's drain time a local control's work mark is held to
/// ([`ThresholdRejection::held_to_queue`]).
pub const LOCAL_DRAIN_SHARE: f64 = 0.5;

/// Weight of the latest service time in the smoothed one: a few dozen messages, so the
/// mark holds from the first milliseconds of a run.
const SERVICE_TIME_GAIN: f64 = 1.0 / 32.0;

/// The smoothed service time of a message the processor did not reject, seconds, after
/// `completion` (a rejection's cheap service would understate the work queued behind it).
pub(crate) fn smoothed_service_time(smoothed: Option<f64>, completion: &Completion) -> Option<f64> {
    if completion.message.is_session_start() && !completion.session_accepted {
        return smoothed;
    }
    let t = completion.service_time.as_secs_f64();
    Some(smoothed.map_or(t, |s| s + SERVICE_TIME_GAIN * (t - s)))
}

impl DelayMark {
    /// The high mark in force, seconds: the configured one, or the share of the watched
    /// queue's drain time at the smoothed service time if that is shorter.
    fn high_in_force(&self) -> f64 {
        match (self.held_messages, self.service_time) {
            (Some(messages), Some(t)) => self.high.min(messages * t),
            _ => self.high,
        }
    }

    /// The queue's work: each INVITE with its session's later messages, each other
    /// message itself, at a message's service time; zero before any message was served.
    fn work(&self) -> f64 {
        let messages =
            f64::from(self.queue.invites) * self.session_length + f64::from(self.queue.non_invites);
        self.service_time.map_or(0.0, |t| messages * t)
    }
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
            delay_mark: None,
            rejecting: false,
            rejected: 0,
        }
    }

    /// Also rejects new INVITEs from when the queue holds `high` of work, counting each
    /// queued INVITE with the rest of its session (`session_length` messages in all), until
    /// it holds less than three quarters of it. A zero `high` adds nothing.
    #[must_use]
    pub fn with_delay_mark(mut self, high: Duration, session_length: f64) -> Self {
        let high = high.as_secs_f64();
        self.delay_mark = (high > 0.0).then(|| DelayMark {
            high,
            low: 0.75 * high,
            session_length: if session_length.is_finite() {
                session_length.max(1.0)
            } else {
                1.0
            },
            service_time: None,
            queue: QueueOccupancy::default(),
            held_messages: None,
        });
        self
    }

    /// Holds the work mark to `drain_share` of the time the watched queue of
    /// `queue_capacity` messages takes to drain ([`LOCAL_DRAIN_SHARE`] for a local
    /// control, as the latency bucket holds its target). In front of a fast server with a
    /// short queue, 250 ms of work is more than the queue holds: the mark never fires, and
    /// the sessions admitted below the watermarks bring their later messages into a queue
    /// that is then full (with 35–50 ms links they arrive together, a round trip after
    /// their INVITEs) and drops them.
    #[must_use]
    pub fn held_to_queue(mut self, queue_capacity: usize, drain_share: f64) -> Self {
        if let Some(d) = self.delay_mark.as_mut() {
            d.held_messages = Some(queue_capacity as f64 * drain_share);
        }
        self
    }

    pub fn is_rejecting(&self) -> bool {
        self.rejecting
    }

    /// New INVITEs rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

/// The work mark of a local control whose own marks are not the queue's work (RED, OCC,
/// the latency bucket): [`ThresholdRejection::with_delay_mark`] without watermarks, held
/// to [`LOCAL_DRAIN_SHARE`] of the watched queue's drain time; none when it is zero.
#[derive(Clone, Debug)]
pub(crate) struct WorkMark(Option<ThresholdRejection>);

impl WorkMark {
    /// `mark` as configured (unset: [`DEFAULT_WORK_MARK`]) in front of a queue of
    /// `queue_capacity` messages, a queued INVITE counted as `session_length` messages.
    pub(crate) fn new(mark: Option<Duration>, queue_capacity: usize, session_length: f64) -> Self {
        let high = mark.unwrap_or(DEFAULT_WORK_MARK);
        Self((!high.is_zero()).then(|| {
            ThresholdRejection::with_marks(usize::MAX, usize::MAX)
                .with_delay_mark(high, session_length)
                .held_to_queue(queue_capacity, LOCAL_DRAIN_SHARE)
        }))
    }

    /// Whether there is a mark (it is not zero).
    pub(crate) fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Whether new INVITEs are being turned away: from when an arrival found the queue at
    /// the mark until one found it below its low side.
    pub(crate) fn is_rejecting(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(ThresholdRejection::is_rejecting)
    }

    /// Whether new INVITEs are turned away as `message` arrives: from the mark until the
    /// queue's work falls below its low side.
    pub(crate) fn exceeded(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> bool {
        self.0.as_mut().is_some_and(|mark| {
            mark.on_arrival(now, queue_len, message);
            mark.is_rejecting()
        })
    }

    pub(crate) fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        if let Some(mark) = self.0.as_mut() {
            mark.on_queue(now, queue);
        }
    }

    pub(crate) fn on_processed(&mut self, now: Time, completion: &Completion) {
        if let Some(mark) = self.0.as_mut() {
            mark.on_processed(now, completion);
        }
    }
}

impl LocalAdmission for ThresholdRejection {
    fn on_arrival(
        &mut self,
        _now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        let work = self.delay_mark.as_ref().map(|d| {
            let high = d.high_in_force();
            (d.work(), high, high * d.low / d.high)
        });
        // A queue that holds no work holds no mark's worth either: a server whose messages
        // so far cost nothing (a probe served first where only INVITEs cost emulated time)
        // has a held mark of zero, and `0 >= 0` would reject every INVITE for good, none of
        // them then served to correct the estimate.
        if queue_len >= self.high || work.is_some_and(|(w, high, _)| w > 0.0 && w >= high) {
            self.rejecting = true;
        } else if queue_len < self.low && work.is_none_or(|(w, _, low)| w < low || w == 0.0) {
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
    fn on_queue(&mut self, _now: Time, queue: QueueOccupancy) {
        if let Some(d) = self.delay_mark.as_mut() {
            d.queue = queue;
        }
    }
    fn on_processed(&mut self, _now: Time, completion: &Completion) {
        if let Some(d) = self.delay_mark.as_mut() {
            d.service_time = smoothed_service_time(d.service_time, completion);
        }
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
                work_mark: None,
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
            work_mark: None,
        };
        assert_eq!(set.marks(100), (7, 60), "a set mark is kept as it is");
    }

    #[test]
    fn only_new_invites_are_rejected() {
        let mut t = ThresholdRejection::new(
            &ThresholdConfig {
                high_watermark: Some(1),
                low_watermark: Some(0),
                work_mark: None,
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

    fn served(service_ms: u64, message: MessageSummary, accepted: bool) -> Completion {
        Completion {
            message,
            service_time: Duration::from_millis(service_ms),
            queueing_delay: Duration::ZERO,
            session_accepted: accepted,
        }
    }

    #[test]
    fn the_delay_mark_counts_queued_invites_with_their_sessions_and_ignores_rejections() {
        // Marks in messages that a short queue never reaches; 250 ms of work at 7
        // messages a session.
        let mut t = ThresholdRejection::with_marks(1000, 800)
            .with_delay_mark(Duration::from_millis(250), 7.0);
        let src = Some(NeighbourId(1));
        let invite = MessageSummary::new_session(src);
        let rejects = |t: &mut ThresholdRejection| {
            t.on_arrival(Time::ZERO, 0, &invite) == AdmissionVerdict::Reject
        };
        // Before any message is served the work is unknown: nothing is rejected.
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 100,
                non_invites: 0,
            },
        );
        assert!(!rejects(&mut t));
        // 5 ms a message: 7 INVITEs are 245 ms of sessions, 8 are 280 ms.
        t.on_processed(Time::ZERO, &served(5, MessageSummary::response(src), false));
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 7,
                non_invites: 0,
            },
        );
        assert!(!rejects(&mut t));
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 8,
                non_invites: 0,
            },
        );
        assert!(rejects(&mut t));
        // A rejection's cheap service does not lower the estimate.
        for _ in 0..100 {
            t.on_processed(Time::ZERO, &served(0, invite, false));
        }
        assert!(rejects(&mut t));
        // Hysteresis: still rejecting at 210 ms (6 INVITEs), admitting below 187.5 ms.
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 6,
                non_invites: 0,
            },
        );
        assert!(rejects(&mut t));
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 5,
                non_invites: 2,
            },
        );
        assert!(!rejects(&mut t), "175 + 10 ms of work");
        // Other messages count once each.
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 0,
                non_invites: 49,
            },
        );
        assert!(!rejects(&mut t));
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 0,
                non_invites: 50,
            },
        );
        assert!(rejects(&mut t));
        // Held to a queue of 20 messages at 5 ms each (100 ms to drain), the mark is 50 ms,
        // and the hysteresis keeps its proportion: reject from 50 ms, admit below 37.5 ms.
        let mut held = ThresholdRejection::with_marks(1000, 800)
            .with_delay_mark(Duration::from_millis(250), 7.0)
            .held_to_queue(20, LOCAL_DRAIN_SHARE);
        held.on_processed(Time::ZERO, &served(5, MessageSummary::response(src), false));
        for (invites, non_invites, rejected) in
            [(1, 2, false), (1, 3, true), (1, 1, true), (1, 0, false)]
        {
            held.on_queue(
                Time::ZERO,
                QueueOccupancy {
                    invites,
                    non_invites,
                },
            );
            assert_eq!(
                rejects(&mut held),
                rejected,
                "{invites} INVITEs, {non_invites} others"
            );
        }
        // The marks in messages still hold on their own.
        let mut marks_only =
            ThresholdRejection::with_marks(10, 5).with_delay_mark(Duration::ZERO, 7.0);
        marks_only.on_processed(Time::ZERO, &served(5, MessageSummary::response(src), false));
        marks_only.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 100,
                non_invites: 0,
            },
        );
        assert!(!rejects(&mut marks_only));
        assert_eq!(
            marks_only.on_arrival(Time::ZERO, 10, &invite),
            AdmissionVerdict::Reject
        );
    }

    #[test]
    fn a_held_mark_is_not_stuck_when_the_first_messages_served_cost_nothing() {
        // Emulated cost on INVITEs only: an OPTIONS probe served first takes no time, so
        // the held mark and the queue's work are both zero.
        let mut t = ThresholdRejection::with_marks(usize::MAX, usize::MAX)
            .with_delay_mark(Duration::from_millis(250), 7.0)
            .held_to_queue(800, LOCAL_DRAIN_SHARE);
        let src = Some(NeighbourId(1));
        let invite = MessageSummary::new_session(src);
        t.on_processed(Time::ZERO, &served(0, MessageSummary::response(src), false));
        for invites in [0, 3] {
            t.on_queue(
                Time::ZERO,
                QueueOccupancy {
                    invites,
                    non_invites: 0,
                },
            );
            assert_eq!(
                t.on_arrival(Time::ZERO, invites as usize, &invite),
                AdmissionVerdict::Admit,
                "{invites} queued"
            );
        }
        // Once an INVITE's cost is known, the mark holds as usual: 400 messages' worth.
        t.on_processed(Time::ZERO, &served(3, invite, true));
        t.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites: 60,
                non_invites: 0,
            },
        );
        assert_eq!(
            t.on_arrival(Time::ZERO, 60, &invite),
            AdmissionVerdict::Reject
        );
    }
}
