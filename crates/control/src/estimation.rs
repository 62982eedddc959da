//! Dynamic SIP session estimation, Shen, Schulzrinne & Nahum 2008, §3.1.
//!
//! "Start session check": every measurement interval `T_m` the RE counts the INVITEs it
//! accepted and the messages it processed, and estimates
//! - the session service rate `μ = N_inv_accepted / T_m`,
//! - the session length `L_sess = N_msg_processed / N_inv_accepted`,
//! - the sessions in the system, eq. 1: `N_sess = N_inv + N_noninv / (L_sess - 1)`,
//!   from the queue's current INVITE and non-INVITE counts (always the instant value,
//!   as §5.7 prescribes),
//!
//! and, for rate-occ (§3.7), the processor occupancy over the interval (busy time / T_m).
//!
//! One deliberate refinement, on by default ([`ServiceRateBasis::BusyTime`]): `μ` is
//! measured as sessions accepted per second of *processor busy time* rather than per
//! second of wall time. §3.1 wants the session *service* rate and notes that "under normal
//! working conditions" the acceptance rate is roughly equal to it; that holds when the
//! processor is saturated, where both bases agree. Below saturation the wall-time rate is
//! the offered rate, and a window or rate computed from it admits no more than what came
//! last interval, so a throttled source can only shrink (observed in sluice's simulator:
//! win-disc at offered load 1 settled near 0.5 goodput). `ServiceRateBasis::WallTime`
//! restores the literal definition.
//! `μ` and `L_sess` are smoothed with an EWMA.
//!
//! Defaults: `T_m = 100 ms` (Table 2); initial `L_sess = 7`, the seven messages of the
//! paper's call flow (§2.1). Not from the paper: the smoothing weight (0.25, roughly a
//! half-second memory at `T_m = 100 ms`, enough to average out the handful of INVITEs an
//! interval holds) and a floor on the `μ` used for control (see
//! [`EstimatorConfig::service_rate_floor`]).

use crate::smoothing::Ewma;
use crate::types::{Completion, QueueOccupancy};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

/// The shortest interval any timer in this crate accepts; shorter configured values are
/// raised to it so a zero interval cannot make a driver spin on the same instant.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

pub(crate) fn sane_interval(d: Duration) -> Duration {
    d.max(MIN_INTERVAL)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EstimatorConfig {
    /// `T_m`, the measurement interval (Table 2: 100 ms; 14 ms for rate-occ2).
    #[serde(rename = "measurement_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub measurement_interval: Duration,
    /// EWMA weight of the newest `μ` and `L_sess` sample (not given in the paper).
    pub smoothing_weight: f64,
    /// `L_sess` before the first interval with an accepted INVITE (paper: 7 messages).
    pub initial_session_length: f64,
    /// Lower bound, in sessions per second, on the `μ` that window and rate algorithms
    /// compute with. Not in the paper. `μ` is an *acceptance* rate, so a window or rate
    /// derived from a μ near zero admits nearly nothing, which keeps μ near zero: a
    /// lightly loaded source could be starved for good. The default, 5/s, is one session
    /// per default `D_B` (200 ms), the least for which win-cont's `N_sess_max = μ·D_B`
    /// reaches one session; it is far below the paper's 72 sessions/s capacity, so it
    /// never binds in overload.
    pub service_rate_floor: f64,
    /// What `μ` is measured against; see the module docs.
    pub service_rate_basis: ServiceRateBasis,
}

/// The denominator of the `μ` estimate.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceRateBasis {
    /// Accepted sessions per second of processor busy time: the service rate at any load.
    #[default]
    BusyTime,
    /// Accepted sessions per second of wall time (§3.1 read literally).
    WallTime,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            measurement_interval: Duration::from_millis(100),
            smoothing_weight: 0.25,
            initial_session_length: 7.0,
            service_rate_floor: 5.0,
            service_rate_basis: ServiceRateBasis::BusyTime,
        }
    }
}

/// Eq. 1: sessions represented by the queue's contents. Each waiting INVITE is a
/// session not yet started; each other message is `1 / (L_sess - 1)` of a session
/// already in progress. `L_sess - 1` is held at 1 or more because every session has
/// at least one message after its INVITE, which also keeps the division finite.
pub fn sessions_in_queue(queue: QueueOccupancy, session_length: f64) -> f64 {
    let later_messages_per_session = if session_length.is_finite() {
        (session_length - 1.0).max(1.0)
    } else {
        1.0
    };
    f64::from(queue.invites) + f64::from(queue.non_invites) / later_messages_per_session
}

/// The §3.1 estimator. Feed it completions and queue snapshots; call
/// [`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout).
#[derive(Clone, Debug)]
pub struct SessionEstimator {
    interval: Duration,
    basis: ServiceRateBasis,
    floor: f64,
    interval_start: Time,
    processed: u64,
    accepted: u64,
    busy: Duration,
    service_rate: Ewma,
    session_length: Ewma,
    initial_session_length: f64,
    occupancy: Option<f64>,
    queue: QueueOccupancy,
    intervals_closed: u64,
}

impl SessionEstimator {
    /// The first measurement interval starts at `now`.
    pub fn new(config: &EstimatorConfig, now: Time) -> Self {
        let initial = config.initial_session_length;
        Self {
            interval: sane_interval(config.measurement_interval),
            basis: config.service_rate_basis,
            floor: if config.service_rate_floor.is_finite() {
                config.service_rate_floor.max(0.0)
            } else {
                0.0
            },
            interval_start: now,
            processed: 0,
            accepted: 0,
            busy: Duration::ZERO,
            service_rate: Ewma::new(config.smoothing_weight),
            session_length: Ewma::new(config.smoothing_weight),
            initial_session_length: if initial.is_finite() && initial >= 1.0 {
                initial
            } else {
                7.0
            },
            occupancy: None,
            queue: QueueOccupancy::default(),
            intervals_closed: 0,
        }
    }

    pub fn on_processed(&mut self, completion: &Completion) {
        self.processed += 1;
        if completion.session_accepted && completion.message.is_session_start() {
            self.accepted += 1;
        }
        self.busy = self.busy.saturating_add(completion.service_time);
    }

    pub fn on_queue(&mut self, queue: QueueOccupancy) {
        self.queue = queue;
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        Some(self.interval_start + self.interval)
    }

    /// Closes the measurement interval if it is due. A late call closes one interval
    /// spanning the whole elapsed time, so rates stay rates even if the driver lags.
    pub fn handle_timeout(&mut self, now: Time) {
        if now < self.interval_start + self.interval {
            return;
        }
        let elapsed = (now - self.interval_start).as_secs_f64();
        let busy = self.busy.as_secs_f64().min(elapsed);
        match self.basis {
            ServiceRateBasis::WallTime => {
                self.service_rate.update(self.accepted as f64 / elapsed);
            }
            // An idle interval says nothing about the service rate: keep the estimate.
            ServiceRateBasis::BusyTime if busy > 0.0 => {
                self.service_rate.update(self.accepted as f64 / busy);
            }
            ServiceRateBasis::BusyTime => {}
        }
        if self.accepted > 0 {
            self.session_length
                .update(self.processed as f64 / self.accepted as f64);
        }
        self.occupancy = Some((self.busy.as_secs_f64() / elapsed).clamp(0.0, 1.0));
        self.processed = 0;
        self.accepted = 0;
        self.busy = Duration::ZERO;
        self.interval_start = now;
        self.intervals_closed += 1;
    }

    /// Smoothed `μ` in sessions per second; `None` before the first interval closes.
    pub fn service_rate(&self) -> Option<f64> {
        self.service_rate.value()
    }

    /// The `μ` control algorithms use: the estimate held at or above the configured
    /// floor (and the floor itself before the first measurement).
    pub fn control_service_rate(&self) -> f64 {
        self.service_rate().unwrap_or(0.0).max(self.floor)
    }

    /// Smoothed `L_sess`, messages per session.
    pub fn session_length(&self) -> f64 {
        self.session_length
            .value()
            .unwrap_or(self.initial_session_length)
    }

    /// Eq. 1 on the latest queue snapshot.
    pub fn sessions_in_system(&self) -> f64 {
        sessions_in_queue(self.queue, self.session_length())
    }

    /// Processor occupancy (busy fraction) over the last closed interval.
    pub fn occupancy(&self) -> Option<f64> {
        self.occupancy
    }

    /// `d_q = N_sess / μ` (§3.6), using the control service rate; `None` if that rate is 0.
    pub fn queueing_delay(&self) -> Option<Duration> {
        let mu = self.control_service_rate();
        (mu > 0.0).then(|| Duration::from_secs_f64((self.sessions_in_system() / mu).min(1e9)))
    }

    pub fn intervals_closed(&self) -> u64 {
        self.intervals_closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{MessageSummary, NeighbourId};

    fn completion(message: MessageSummary, accepted: bool) -> Completion {
        Completion {
            message,
            service_time: Duration::from_millis(2),
            queueing_delay: Duration::ZERO,
            session_accepted: accepted,
        }
    }

    fn no_smoothing() -> EstimatorConfig {
        EstimatorConfig {
            smoothing_weight: 1.0,
            ..EstimatorConfig::default()
        }
    }

    #[test]
    fn eq1_counts_invites_whole_and_other_messages_as_session_fractions() {
        // 3 waiting INVITEs plus 12 later messages of 7-message sessions: 3 + 12/6 = 5.
        let q = QueueOccupancy {
            invites: 3,
            non_invites: 12,
        };
        assert!((sessions_in_queue(q, 7.0) - 5.0).abs() < 1e-12);
        // Degenerate session lengths neither divide by zero nor go negative.
        assert!((sessions_in_queue(q, 1.0) - 15.0).abs() < 1e-12);
        assert!((sessions_in_queue(q, f64::NAN) - 15.0).abs() < 1e-12);
    }

    #[test]
    fn start_session_check_measures_rate_and_length_from_one_interval() {
        // In one 100 ms interval: 10 accepted INVITEs and 60 other messages, as a
        // 7-message call flow would produce; one retransmitted INVITE is processed too.
        let mut est = SessionEstimator::new(&no_smoothing(), Time::ZERO);
        let src = Some(NeighbourId(1));
        for _ in 0..10 {
            est.on_processed(&completion(MessageSummary::new_session(src), true));
        }
        for _ in 0..59 {
            est.on_processed(&completion(MessageSummary::other_request(src), false));
        }
        est.on_processed(&completion(MessageSummary::repeated_invite(src), true));
        assert_eq!(est.poll_timeout(), Some(Time::from_millis(100)));
        est.handle_timeout(Time::from_millis(100));
        // μ = 10 / 0.1 s; L_sess = 70 / 10.
        assert!((est.service_rate().unwrap() - 100.0).abs() < 1e-9);
        assert!((est.session_length() - 7.0).abs() < 1e-9);
        // 70 completions of 2 ms in 100 ms: fully busy, clamped to 1.
        assert!((est.occupancy().unwrap() - 1.0).abs() < 1e-12);
        // Eq. 1 uses the measured length: 2 INVITEs + 18 others = 2 + 18/6.
        est.on_queue(QueueOccupancy {
            invites: 2,
            non_invites: 18,
        });
        assert!((est.sessions_in_system() - 5.0).abs() < 1e-9);
        // d_q = N_sess / μ = 5 / 100 s.
        assert_eq!(est.queueing_delay(), Some(Duration::from_millis(50)));
    }

    #[test]
    fn rejected_invites_do_not_count_as_accepted_and_occupancy_is_busy_share() {
        let mut est = SessionEstimator::new(&no_smoothing(), Time::ZERO);
        for _ in 0..5 {
            est.on_processed(&completion(MessageSummary::new_session(None), false));
        }
        est.handle_timeout(Time::from_millis(100));
        assert_eq!(est.service_rate(), Some(0.0));
        // Session length keeps its prior when nothing was accepted.
        assert!((est.session_length() - 7.0).abs() < 1e-12);
        // 5 × 2 ms of 100 ms.
        assert!((est.occupancy().unwrap() - 0.1).abs() < 1e-12);
        // The control rate never drops below the floor.
        assert!((est.control_service_rate() - 5.0).abs() < 1e-12);
    }

    #[test]
    fn below_saturation_mu_is_the_service_rate_not_the_arrival_rate() {
        // 7-message sessions at 2 ms per message: the processor can serve 500/7 ≈ 71.4
        // sessions/s. Only 2 sessions arrive in 100 ms (14 messages, 28 ms busy).
        let sample = |basis| {
            let mut est = SessionEstimator::new(
                &EstimatorConfig {
                    service_rate_basis: basis,
                    ..no_smoothing()
                },
                Time::ZERO,
            );
            for _ in 0..2 {
                est.on_processed(&completion(MessageSummary::new_session(None), true));
                for _ in 0..6 {
                    est.on_processed(&completion(MessageSummary::other_request(None), false));
                }
            }
            est.handle_timeout(Time::from_millis(100));
            est.service_rate().unwrap()
        };
        assert!((sample(ServiceRateBasis::BusyTime) - 500.0 / 7.0).abs() < 1e-9);
        assert!(
            (sample(ServiceRateBasis::WallTime) - 20.0).abs() < 1e-9,
            "the literal §3.1 estimate is the arrival rate"
        );
    }

    #[test]
    fn an_idle_interval_keeps_the_busy_time_estimate() {
        let mut est = SessionEstimator::new(&no_smoothing(), Time::ZERO);
        est.on_processed(&completion(MessageSummary::new_session(None), true));
        est.handle_timeout(Time::from_millis(100));
        let before = est.service_rate().unwrap();
        est.handle_timeout(Time::from_millis(200));
        assert_eq!(est.service_rate(), Some(before));
    }

    #[test]
    fn timer_does_not_fire_early_and_late_calls_use_the_real_elapsed_time() {
        let wall = EstimatorConfig {
            service_rate_basis: ServiceRateBasis::WallTime,
            ..no_smoothing()
        };
        let mut est = SessionEstimator::new(&wall, Time::from_secs(1));
        est.handle_timeout(Time::from_millis(1050));
        assert_eq!(est.intervals_closed(), 0);
        for _ in 0..30 {
            est.on_processed(&completion(MessageSummary::new_session(None), true));
        }
        // Called 200 ms late: one interval of 300 ms.
        est.handle_timeout(Time::from_millis(1300));
        assert_eq!(est.intervals_closed(), 1);
        assert!((est.service_rate().unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(est.poll_timeout(), Some(Time::from_millis(1400)));
    }

    #[test]
    fn zero_interval_is_raised_to_the_minimum() {
        let cfg = EstimatorConfig {
            measurement_interval: Duration::ZERO,
            ..Default::default()
        };
        let est = SessionEstimator::new(&cfg, Time::ZERO);
        assert_eq!(est.poll_timeout(), Some(Time::ZERO + MIN_INTERVAL));
    }
}
