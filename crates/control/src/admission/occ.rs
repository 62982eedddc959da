//! Local occupancy control (OCC) as De Cicco, Cofano & Mascolo ran it (journal version
//! §VII; conference version §4.2), after Hilt & Widjaja, "Controlling Overload in
//! Networks of SIP Servers" (ICNP 2008).
//!
//! Each new INVITE is accepted with probability `f` and rejected (503) otherwise. The
//! CPU load is measured every `T_m`; every `T_c` the acceptance probability is updated
//! multiplicatively from `C_k`, the load over that control interval:
//!
//! `f_{k+1} = f_min` if `φ_k f_k < f_min`; `1` if `φ_k f_k > 1`; `φ_k f_k` otherwise,
//! with `φ_k = min(C_T / C_k, φ_max)`.
//!
//! `C_k` is the mean of the interval's `T_m` measurements (neither paper says how the
//! measurements of one control interval combine). Acting on the latest `T_m` alone
//! throws away nine tenths of them, and on a server of a few hundred messages/s one
//! 100 ms window holds a few dozen services: a Poisson burst at 0.7–0.8 load reads
//! above `C_T` often enough that OCC turned away 2–8 % of the calls no control carries
//! (16 of 65 sampled topologies below `C_T`). The mean over the interval gives the same
//! reading under sustained overload (every window reads 1) and lags a load step by at
//! most one `T_c`.
//!
//! Messages are not queued by the policy (Kamailio forwarded them synchronously). A
//! measured load of zero means no load and takes the largest increase `φ_max`.
//! `f` starts at 1. The coin tosses come from a ChaCha8 stream seeded from the config.
//!
//! By default it also rejects every new INVITE while the queue holds 250 ms of work
//! (`work_mark_ms`), as the local threshold does, held to half the time the queue takes to
//! drain. A saturated processor reads a load of 1 however far it is overloaded, so `f`
//! is only multiplied by `C_T` each control interval: from 1 to 0.1 takes 22 s at
//! `C_T = 0.9`, while the queue is full and callers retransmit. The papers' RE
//! (`Scenario::paper_re` in the simulator) turns the mark off.
//!
//! With the mark, a control interval whose load is past `C_T` lowers `f` from 1 only if
//! the queue also reached the mark in it, as the PI's CPU loop waits for it: a Poisson
//! burst below capacity keeps a slow server fully busy for a whole interval and reads
//! past `C_T`. Without this, OCC carried less than 0.98 of what no control carries on 3
//! of 65 sampled topologies below `C_T` (servers of 147–231 messages/s at 0.79–0.89x);
//! with it, 0.985–0.992 on the same three. Under overload the queue reaches the mark
//! within the first interval. Once `f` is below 1 the measured load alone moves it, as published. A
//! driver that samples the CPU itself (the proxy at native speed, where the backlog waits
//! in the socket's buffer, out of the queue's sight) gets the CPU alone.
//!
//! Defaults (§VII, "as suggested in" Hilt & Widjaja): `T_c = 1 s`, `T_m = 0.1 s`,
//! `f_min = 0.02`, `φ_max = 5`. De Cicco et al. ran OCC with `C_T = 0.8` and `0.9`
//! (Fig. 11); the default here is 0.9.

use super::cpu::CpuMeter;
use super::threshold::WorkMark;
use super::{fraction_or, non_negative_or, AdmissionMetrics, LocalAdmission};
use crate::estimation::sane_interval;
use crate::receiver::occupancy_fraction_step;
use crate::types::{AdmissionVerdict, Completion, MessageSummary, QueueOccupancy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OccConfig {
    /// `C_T`, the target CPU load, in `(0, 1]`.
    pub target_cpu: f64,
    /// `T_c`, the control interval.
    #[serde(rename = "control_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub control_interval: Duration,
    /// `T_m`, the CPU measurement interval.
    #[serde(rename = "measurement_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub measurement_interval: Duration,
    /// `f_min`, the least acceptance probability.
    pub min_fraction: f64,
    /// `φ_max`, the largest multiplicative increase per control interval.
    pub max_increase: f64,
    /// Also reject new INVITEs while the queue holds this much work, as the local threshold
    /// does (`threshold.work_mark_ms`), held to half the queue's drain time; unset: 250 ms,
    /// half of T1; 0: the acceptance probability alone, as De Cicco et al. ran it. A
    /// saturated processor reads a load of 1 however far it is overloaded, so `f` is only
    /// multiplied by `C_T` each control interval while the queue overflows.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

impl Default for OccConfig {
    fn default() -> Self {
        Self {
            target_cpu: 0.9,
            control_interval: Duration::from_secs(1),
            measurement_interval: Duration::from_millis(100),
            min_fraction: 0.02,
            max_increase: 5.0,
            work_mark: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct LocalOcc {
    target: f64,
    control_interval: Duration,
    measurement_interval: Duration,
    min_fraction: f64,
    max_increase: f64,
    meter: CpuMeter,
    next_measure: Time,
    next_control: Time,
    /// Sum and count of the `T_m` measurements since the last control step.
    interval_load_sum: f64,
    interval_measurements: u32,
    fraction: f64,
    rng: ChaCha8Rng,
    rejected: u64,
    /// Rejects while the queue holds `work_mark_ms` of work.
    work_mark: WorkMark,
    /// Whether an arrival found the queue at the work mark since the last control step.
    mark_reached: bool,
}

impl LocalOcc {
    /// In front of a queue of `queue_capacity` messages, counting a queued INVITE's work
    /// as `session_length` messages. Timers start at `now`; `seed` selects the coin-toss
    /// stream.
    pub fn new(
        config: &OccConfig,
        seed: u64,
        now: Time,
        queue_capacity: usize,
        session_length: f64,
    ) -> Self {
        let control_interval = sane_interval(config.control_interval);
        let measurement_interval = sane_interval(config.measurement_interval);
        Self {
            target: fraction_or(config.target_cpu, 0.9).max(f64::MIN_POSITIVE),
            control_interval,
            measurement_interval,
            min_fraction: fraction_or(config.min_fraction, 0.02),
            max_increase: non_negative_or(config.max_increase, 5.0).max(1.0),
            meter: CpuMeter::new(now),
            next_measure: now + measurement_interval,
            next_control: now + control_interval,
            interval_load_sum: 0.0,
            interval_measurements: 0,
            fraction: 1.0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            rejected: 0,
            work_mark: WorkMark::new(config.work_mark, queue_capacity, session_length),
            mark_reached: false,
        }
    }

    /// The acceptance probability `f`.
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// The latest `T_m` CPU load measurement.
    pub fn cpu_load(&self) -> Option<f64> {
        self.meter.last()
    }

    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

impl LocalAdmission for LocalOcc {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        let over_work = self.work_mark.exceeded(now, queue_len, message);
        self.mark_reached |= over_work;
        if !message.is_session_start() {
            return AdmissionVerdict::Admit;
        }
        // The coin is tossed only below 1, so that a run the mark never touches draws
        // what it drew without the mark.
        if !over_work && (self.fraction >= 1.0 || self.rng.gen::<f64>() < self.fraction) {
            AdmissionVerdict::Admit
        } else {
            self.rejected += 1;
            AdmissionVerdict::Reject
        }
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        self.work_mark.on_queue(now, queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.work_mark.on_processed(now, completion);
        self.meter.on_processed(completion.service_time);
    }
    fn on_cpu_sample(&mut self, _now: Time, busy_fraction: f64) {
        self.meter.on_sample(busy_fraction);
    }
    fn handle_timeout(&mut self, now: Time) {
        if now >= self.next_measure {
            if let Some(load) = self.meter.close(now) {
                self.interval_load_sum += load;
                self.interval_measurements += 1;
            }
            self.next_measure = now + self.measurement_interval;
        }
        if now >= self.next_control {
            // An interval without a measurement of its own keeps acting on the last one.
            let load = if self.interval_measurements > 0 {
                Some(self.interval_load_sum / f64::from(self.interval_measurements))
            } else {
                self.meter.last()
            };
            self.interval_load_sum = 0.0;
            self.interval_measurements = 0;
            // While it accepts every call, OCC starts lowering `f` only once the queue has
            // also reached the work mark (ours: see the module docs). A driver that samples
            // the CPU itself serves each message as it reads it, so no queue shows its
            // backlog: there the CPU alone decides, as published.
            let burst_served = self.fraction >= 1.0
                && self.work_mark.is_set()
                && !self.meter.is_external()
                && !self.mark_reached;
            self.mark_reached = self.work_mark.is_rejecting();
            if let (Some(load), false) = (load, burst_served) {
                self.fraction = occupancy_fraction_step(
                    self.fraction,
                    load,
                    self.target,
                    self.max_increase,
                    self.min_fraction,
                );
            }
            self.next_control = now + self.control_interval;
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        Some(self.next_measure.min(self.next_control))
    }
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics {
            rejected: self.rejected,
            control_value: Some(self.fraction),
            cpu_load: self.meter.last(),
            ..AdmissionMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::NeighbourId;

    fn run_interval(o: &mut LocalOcc, start_ms: u64, load: f64) {
        // Ten T_m windows of one control interval, each at `load`.
        for k in 1..=10 {
            o.on_cpu_sample(Time::from_millis(start_ms + k * 100 - 1), load);
            o.handle_timeout(Time::from_millis(start_ms + k * 100));
        }
    }

    #[test]
    fn acceptance_is_multiplicative_and_clamped_at_f_min_and_one() {
        let mut o = LocalOcc::new(&OccConfig::default(), 1, Time::ZERO, 1000, 7.0);
        assert!((o.fraction() - 1.0).abs() < 1e-12);
        // Load 1.0 against C_T = 0.9: f shrinks by 0.9 per control interval.
        run_interval(&mut o, 0, 1.0);
        assert!((o.fraction() - 0.9).abs() < 1e-12);
        run_interval(&mut o, 1000, 1.0);
        assert!((o.fraction() - 0.81).abs() < 1e-12);
        // Sustained overload bottoms out at f_min and stays there.
        for s in 2..60 {
            run_interval(&mut o, s * 1000, 1.0);
        }
        assert!((o.fraction() - 0.02).abs() < 1e-12);
        // Light load grows f by at most φ_max per interval: 0.02 → 0.1 → 0.5 → 1.
        run_interval(&mut o, 60_000, 0.01);
        assert!((o.fraction() - 0.1).abs() < 1e-12);
        run_interval(&mut o, 61_000, 0.0);
        assert!((o.fraction() - 0.5).abs() < 1e-12);
        // φ = 0.9 / 0.3 = 3 would give 1.5: clamped at 1.
        run_interval(&mut o, 62_000, 0.3);
        assert!((o.fraction() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn acts_on_the_mean_load_of_the_control_interval_not_its_latest_window() {
        // The paper's OCC: the CPU alone decides.
        let paper = OccConfig {
            work_mark: Some(Duration::ZERO),
            ..OccConfig::default()
        };
        let mut o = LocalOcc::new(&paper, 1, Time::ZERO, 1000, 7.0);
        let done = |ms| Completion {
            message: MessageSummary::other_request(None),
            service_time: Duration::from_millis(ms),
            queueing_delay: Duration::ZERO,
            session_accepted: false,
        };
        // Nine windows at 0.8, then one fully busy: the latest window reads 1, the
        // interval 0.82, under C_T = 0.9, so nothing is rejected.
        for k in 1..=10u64 {
            let busy = if k == 10 { 100 } else { 80 };
            o.on_processed(Time::from_millis(k * 100 - 50), &done(busy));
            o.handle_timeout(Time::from_millis(k * 100));
        }
        assert!((o.cpu_load().unwrap() - 1.0).abs() < 1e-12);
        assert!((o.fraction() - 1.0).abs() < 1e-12);
        // An interval at 0.95 on average: f = 0.9 / 0.95.
        for k in 11..=20u64 {
            let busy = if k % 2 == 0 { 100 } else { 90 };
            o.on_processed(Time::from_millis(k * 100 - 50), &done(busy));
            o.handle_timeout(Time::from_millis(k * 100));
        }
        assert!((o.fraction() - 0.9 / 0.95).abs() < 1e-12);
        assert_eq!(o.poll_timeout(), Some(Time::from_millis(2100)));
    }

    #[test]
    fn a_busy_interval_lowers_f_only_once_the_queue_has_reached_the_work_mark() {
        // Service times of 10 ms: a queued INVITE is 70 ms of work, and the 250 ms mark
        // holds at 4 queued INVITEs (half the drain of 1,000 messages is 5 s).
        let mut o = LocalOcc::new(&OccConfig::default(), 1, Time::ZERO, 1000, 7.0);
        let invite = MessageSummary::new_session(Some(NeighbourId(1)));
        let busy_interval = |o: &mut LocalOcc, start_ms: u64, queued_invites: u32| {
            for k in 1..=10u64 {
                let t = Time::from_millis(start_ms + k * 100 - 50);
                let queue = QueueOccupancy {
                    invites: queued_invites,
                    non_invites: 0,
                };
                o.on_queue(t, queue);
                let _ = o.on_arrival(t, queued_invites as usize, &invite);
                // Ten services of 10 ms fill the window: a load of 1.
                for _ in 0..10 {
                    o.on_processed(
                        t,
                        &Completion {
                            message: MessageSummary::other_request(None),
                            service_time: Duration::from_millis(10),
                            queueing_delay: Duration::ZERO,
                            session_accepted: false,
                        },
                    );
                }
                o.handle_timeout(Time::from_millis(start_ms + k * 100));
            }
        };
        // A burst: fully busy for a whole interval, with two INVITEs queued at most.
        busy_interval(&mut o, 0, 2);
        assert!((o.fraction() - 1.0).abs() < 1e-12, "{}", o.fraction());
        assert_eq!(o.rejected(), 0);
        // Overload: the queue holds 10 INVITEs (700 ms of work), past the mark.
        busy_interval(&mut o, 1000, 10);
        assert!((o.fraction() - 0.9).abs() < 1e-12, "{}", o.fraction());
        assert!(o.rejected() > 0);
        // Once f is below 1 the load alone moves it, whatever the queue holds.
        busy_interval(&mut o, 2000, 0);
        assert!((o.fraction() - 0.81).abs() < 1e-12, "{}", o.fraction());
        // The paper's OCC lowers f on the burst itself.
        let paper = OccConfig {
            work_mark: Some(Duration::ZERO),
            ..OccConfig::default()
        };
        let mut p = LocalOcc::new(&paper, 1, Time::ZERO, 1000, 7.0);
        busy_interval(&mut p, 0, 2);
        assert!((p.fraction() - 0.9).abs() < 1e-12, "{}", p.fraction());
    }

    #[test]
    fn rejects_new_invites_with_probability_one_minus_f_repeatably() {
        let run = |seed| {
            let mut o = LocalOcc::new(&OccConfig::default(), seed, Time::ZERO, 1000, 7.0);
            // Overload drives f down by 0.9 per interval to f_min (0.9^37 < 0.02) ...
            for s in 0..40 {
                run_interval(&mut o, s * 1000, 1.0);
            }
            // ... and light load brings it back up by φ = 5, then by φ = 2.5.
            run_interval(&mut o, 40_000, 0.18);
            run_interval(&mut o, 41_000, 0.36);
            let f = o.fraction();
            let invite = MessageSummary::new_session(Some(NeighbourId(1)));
            let verdicts: Vec<_> = (0..4000)
                .map(|_| o.on_arrival(Time::from_secs(9), 0, &invite))
                .collect();
            (f, verdicts)
        };
        let (f, a) = run(7);
        assert!((f - 0.25).abs() < 1e-12);
        let admitted = a.iter().filter(|v| **v == AdmissionVerdict::Admit).count() as f64;
        assert!((admitted / 4000.0 - 0.25).abs() < 0.03, "{admitted}");
        assert_eq!(run(7).1, a);
        assert_ne!(run(8).1, a);
        let mut o = LocalOcc::new(&OccConfig::default(), 7, Time::ZERO, 1000, 7.0);
        o.fraction = 0.02;
        assert_eq!(
            o.on_arrival(Time::ZERO, 0, &MessageSummary::other_request(None)),
            AdmissionVerdict::Admit
        );
    }

    /// A saturated processor reads a load of 1 however full its queue: the work mark
    /// turns new INVITEs away while `f` is still 1, and lets them in again once the queue
    /// drains; with the mark at 0 only `f` decides, as published.
    #[test]
    fn the_work_mark_rejects_while_the_acceptance_probability_is_still_one() {
        let invite = MessageSummary::new_session(Some(NeighbourId(1)));
        let served = Completion {
            message: MessageSummary::other_request(None),
            service_time: Duration::from_millis(5),
            queueing_delay: Duration::ZERO,
            session_accepted: false,
        };
        let queue = |invites| QueueOccupancy {
            invites,
            non_invites: 0,
        };
        let published = OccConfig {
            work_mark: Some(Duration::ZERO),
            ..OccConfig::default()
        };
        for (config, rejects_when_full) in [(OccConfig::default(), true), (published, false)] {
            // A queue of 1,000 messages at 5 ms drains in 5 s: the 250 ms mark stands.
            let mut o = LocalOcc::new(&config, 1, Time::ZERO, 1000, 7.0);
            o.on_processed(Time::ZERO, &served);
            // 10 INVITEs of 7 messages at 5 ms: 350 ms of work.
            o.on_queue(Time::ZERO, queue(10));
            assert!((o.fraction() - 1.0).abs() < 1e-12);
            let verdict = o.on_arrival(Time::ZERO, 10, &invite);
            assert_eq!(verdict == AdmissionVerdict::Reject, rejects_when_full);
            // Other messages belong to admitted sessions.
            assert_eq!(
                o.on_arrival(Time::ZERO, 10, &MessageSummary::other_request(None)),
                AdmissionVerdict::Admit
            );
            o.on_queue(Time::ZERO, queue(1));
            assert_eq!(
                o.on_arrival(Time::ZERO, 1, &invite),
                AdmissionVerdict::Admit
            );
            assert_eq!(o.rejected(), u64::from(rejects_when_full));
        }
    }
}
