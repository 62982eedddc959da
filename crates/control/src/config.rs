//! Experiment-file configuration and the factory that turns it into controllers.
//!
//! Every knob is a field with the paper's value as default (Table 2 and §3), so a TOML
//! table naming only `algorithm` reproduces the paper's setup:
//!
//! ```toml
//! algorithm = "win-cont"        # none | threshold | win-disc | win-cont | win-auto | rate-abs | rate-occ | fuzzy
//!                               # local only: ohta | occ | red | pi | latency-bucket
//! fairness = "user-centric"     # or "provider-centric" (default)
//! [win_cont]
//! budget_delay_ms = 200
//! ```
//!
//! The local controls take their tables the same way, e.g.
//! `algorithm = "pi"` with `[pi]` `k_pc = 3.5`, `target_cpu = 0.8`; they build through
//! [`ControlConfig::build_local_admission`]. How an SE enforces the feedback is the SE's
//! own setting ([`crate::overload::OcClientConfig`]): the wire algorithm it negotiates
//! picks the paper's pairing (§2.4.2), a window throttle for `sluicewin`, a percentage
//! throttle for `sluicerate`.

use crate::active_sources::ActiveSourceConfig;
use crate::admission::{
    AdmitAll, AnyLocalAdmission, DualLoopPi, LatencyBucket, LatencyBucketConfig, LocalOcc,
    OccConfig, Ohta, OhtaConfig, PiConfig, RedConfig, RedRejection, ThresholdConfig,
    ThresholdRejection, LOCAL_DRAIN_SHARE,
};
use crate::estimation::EstimatorConfig;
use crate::fairness::Fairness;
use crate::overload::OcAlgorithm;
use crate::receiver::{
    AnyFeedbackGenerator, LoadReport, NoFeedback, RateAbs, RateAbsConfig, RateOcc, RateOccConfig,
    WinAuto, WinAutoConfig, WinCont, WinContConfig, WinDisc, WinDiscConfig,
};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The algorithms, named as in the paper.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum Algorithm {
    /// No control: simple drop at the full queue (§4.3).
    #[default]
    #[serde(rename = "none")]
    None,
    /// Threshold rejection with high and low watermarks (§4.3).
    #[serde(rename = "threshold")]
    Threshold,
    #[serde(rename = "win-disc")]
    WinDisc,
    #[serde(rename = "win-cont")]
    WinCont,
    #[serde(rename = "win-auto")]
    WinAuto,
    #[serde(rename = "rate-abs")]
    RateAbs,
    #[serde(rename = "rate-occ")]
    RateOcc,
    /// Ohta's queue bang-bang control as De Cicco et al. ran it (local).
    #[serde(rename = "ohta")]
    Ohta,
    /// Local occupancy control (Hilt & Widjaja, as De Cicco et al. ran it).
    #[serde(rename = "occ")]
    Occ,
    /// RED-like random rejection (Montazerolghaem & Yaghmaee 2014, §III).
    #[serde(rename = "red")]
    Red,
    /// De Cicco et al.'s dual-loop PI; the driver drains the INVITE queue through it.
    #[serde(rename = "pi")]
    Pi,
    /// Latency-driven token bucket in the style of Clearwater's load monitor.
    #[serde(rename = "latency-bucket")]
    LatencyBucket,
    /// Montazerolghaem & Yaghmaee 2014: the RE reports its CPU and memory occupancy, each
    /// SE sets its window with a fuzzy controller ([`crate::fuzzy`]). The RE's backstop
    /// is the threshold with its work mark, as behind every feedback algorithm, not the
    /// paper's RED-like rejection (`red`): RED's marks are in messages, so in front of a
    /// slow RE the queue held seconds past T1 and every sender retransmitted. On 200
    /// sampled topologies (seed 1) the fuzzy window held 0.9 of capacity (0.85 lossy) on
    /// 106 of 122 overloaded ones with the threshold (its work mark held to the queue, see
    /// `backstop_work`), 100 with the mark unheld, 87 with RED, where ten fell under 0.3.
    #[serde(rename = "fuzzy")]
    Fuzzy,
}

impl Algorithm {
    pub const ALL: [Algorithm; 13] = [
        Algorithm::None,
        Algorithm::Threshold,
        Algorithm::WinDisc,
        Algorithm::WinCont,
        Algorithm::WinAuto,
        Algorithm::RateAbs,
        Algorithm::RateOcc,
        Algorithm::Ohta,
        Algorithm::Occ,
        Algorithm::Red,
        Algorithm::Pi,
        Algorithm::LatencyBucket,
        Algorithm::Fuzzy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::None => "none",
            Algorithm::Threshold => "threshold",
            Algorithm::WinDisc => "win-disc",
            Algorithm::WinCont => "win-cont",
            Algorithm::WinAuto => "win-auto",
            Algorithm::RateAbs => "rate-abs",
            Algorithm::RateOcc => "rate-occ",
            Algorithm::Ohta => "ohta",
            Algorithm::Occ => "occ",
            Algorithm::Red => "red",
            Algorithm::Pi => "pi",
            Algorithm::LatencyBucket => "latency-bucket",
            Algorithm::Fuzzy => "fuzzy",
        }
    }

    /// True for the policies that act only at the RE itself (no feedback, no SE throttle).
    pub fn is_local(self) -> bool {
        self.feedback_kind().is_none()
    }

    /// True if the driver must drain the INVITE queue through the admission policy
    /// (see [`crate::admission::DrainController`]).
    pub fn drains_invite_queue(self) -> bool {
        self == Algorithm::Pi
    }

    /// The `oc-algo` algorithms that can carry its feedback (RFC 7339 §5.2), the paper's
    /// own enforcement first: windows as `sluicewin`; rate-abs's absolute rate as
    /// `sluicerate`, RFC 7415 `rate`, or RFC 7339 `loss` against the client's offered rate;
    /// rate-occ's acceptance fraction as `loss` (or `rate` against a fed-forward offered
    /// rate). Empty for the local controls.
    pub fn wire_algorithms(self) -> &'static [OcAlgorithm] {
        match self.feedback_kind() {
            None => &[],
            Some("window") => &[OcAlgorithm::SluiceWindow],
            Some("load") => &[OcAlgorithm::SluiceLoad],
            Some("rate") => &[
                OcAlgorithm::SluiceRate,
                OcAlgorithm::Rate,
                OcAlgorithm::Loss,
            ],
            Some(_) => &[OcAlgorithm::Loss, OcAlgorithm::Rate],
        }
    }

    /// What the algorithm feeds back, if anything.
    fn feedback_kind(self) -> Option<&'static str> {
        match self {
            Algorithm::None
            | Algorithm::Threshold
            | Algorithm::Ohta
            | Algorithm::Occ
            | Algorithm::Red
            | Algorithm::Pi
            | Algorithm::LatencyBucket => None,
            Algorithm::WinDisc | Algorithm::WinCont | Algorithm::WinAuto => Some("window"),
            Algorithm::RateAbs => Some("rate"),
            Algorithm::RateOcc => Some("acceptance-fraction"),
            Algorithm::Fuzzy => Some("load"),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown overload control algorithm {0:?}")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

/// Everything needed to build one proxy's controllers: its local admission policy and, as
/// a receiving entity, its feedback generator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ControlConfig {
    pub algorithm: Algorithm,
    /// Seed for every random choice (win-cont lottery, percentage throttles).
    #[serde(with = "crate::serde_seed")]
    #[schemars(with = "u64")]
    pub seed: u64,
    /// How the RE splits what it admits among its SEs. Unset (the default): max-min
    /// for rate-abs and provider-centric (the paper's equal split) for the others. An equal
    /// rate throttles the larger SEs below capacity while the smaller leave theirs unused:
    /// on 48 sampled topologies (seed 1) rate-abs kept the no-harm claim on 5 of 18 with
    /// the equal split and 12 of 18 with max-min (worst 0.63 and 0.76 of what no control
    /// carries), and the overload claim on 27 and 29 of 30. The windows keep the equal
    /// split: with max-min win-disc gave the SE offering least 0.27 of the goodput, not a
    /// third, in the closed-loop control test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness: Option<Fairness>,
    /// Hold the delay budget `D_B` of rate-abs, win-disc (half of the work the RE's queue
    /// holds, `receiver::QUEUE_BUDGET_SHARE`) and win-cont (all of it), rate-occ's queue
    /// gate (half) and, while the SEs feed forward more than the RE serves, win-disc's
    /// control interval `T_c` (half, at least 50 ms), to the queue;
    /// `false` runs the paper's budget as configured, whatever the queue. A window must
    /// also cover the sessions on the links (μ times the round trip), which no queue
    /// holds: held to the queue, each SE's window gets back what it reports in flight
    /// (`sluice-wflight`, from SEs that get the window echo, `overload.server.window_acks`).
    /// Without that, win-cont held to the queue fell from 0.96 to 0.36 of capacity over
    /// 47 ms links in front of a 71 ms queue.
    pub queue_bounded_budget: bool,
    /// win-disc, win-cont and rate-abs lend each SE what the others do not want of their
    /// shares, while the loads the SEs feed forward (`overload.client.feed_forward`, on by
    /// default) fit the capacity: each SE may then take what its callers offer plus all
    /// that nobody wants, and never less than its share. Past capacity the split is the
    /// configured one. Without it, an equal split in front of a short queue throttles a
    /// large SE below capacity while small ones leave their windows idle. On the four
    /// topologies below capacity of 16 sampled (seed 1), with SEs of unequal shares, the
    /// worst part of what no control carries rose from 0.80 to 0.98 (win-disc) and from
    /// 0.78 to 0.95 (win-cont) with lending, and to 0.998 and 0.991 once the RE echoed the
    /// highest `sluice-wsent` over lossy links; the no-harm claim then held on all four,
    /// where it had held on one and two; on 200 sampled, on 77 (win-disc) and 76 (win-cont)
    /// of the 78 below capacity. rate-abs lends only while its queue is within `D_B`; on
    /// the same 200 it then keeps no-harm on 77 of 78, against 62 without. An SE that does
    /// not feed forward lends nothing and borrows nothing, and the others still lend.
    /// `false`: the paper's split.
    pub lend_unused_share: bool,
    /// An RE running a feedback algorithm also rejects new INVITEs itself while its queue
    /// is past the threshold marks (`threshold`, 80/60 % of the queue by default). Feedback
    /// acts a round trip late and a window can overshoot a short queue; a 503 then costs
    /// the RE less than the drops and retransmissions of a full queue. `false`: the
    /// papers' RE, which only feeds back.
    pub backstop: bool,
    /// The backstop also rejects new INVITEs while the queue holds this much work,
    /// counting each queued INVITE with its session's later messages (0: the marks alone).
    /// Unset (the default): 250 ms, half of T1, behind rate-abs, rate-occ, win-cont and
    /// the fuzzy window; 300 ms behind win-disc; none behind win-auto. Half of T1 so that
    /// a 2xx and its ACK, each crossing the queue, are back within T1 and the UAS does not
    /// retransmit (RFC 3261 §13.3.1.4). A rate algorithm's SEs send unthrottled
    /// until the first rate reaches them: from an idle start straight into 10x, rate-abs's
    /// first rate came after its first control interval, behind enough admitted sessions
    /// to keep the UAS retransmitting for seconds (849 2xx retransmissions live; 0 with
    /// this mark). A budget window counts only the sessions it sees: over long lossy links
    /// it overshoots while the later messages of its sessions are still on the links, and
    /// retransmissions then fill the queue (simulated, 3 SEs at 10x over 40 ms links losing
    /// 2 % a hop: win-disc 0.75 of capacity without the mark, 0.95 with it; win-cont 1.02
    /// and 0.95). win-disc spends each interval's window at once, so its queue reaches
    /// `T_c + D_B` (400 ms) by design: at half of T1 the mark rejects at the RE what the
    /// windows let in (live on loopback at 10x, 0.90 of capacity against 0.96 at 300 ms),
    /// while at 350 ms the queue leaves too little of T1 to a 2xx and its ACK over links of
    /// 40-45 ms (16 sampled topologies, seed 1: the overload claim held on 9 of 12 at
    /// 350 ms and on 11 of 12 at 300 ms, where one SE at 6x over 46 ms links losing 1.5 %
    /// a hop went from 0.83 to 0.88 of capacity). win-auto's window counts INVITEs in
    /// process, so its queue is mostly INVITEs, each counted here with a whole session:
    /// live at 10x over 10 ms links losing 0.5 % a hop it carried 0.84 with the mark.
    /// Behind the fuzzy window the mark in force is at most the time the queue takes to
    /// drain at the smoothed service time: in front of a fast RE with a short queue 250 ms
    /// is more than the queue holds, the mark never fires, and the windows, set a round
    /// trip late from a report, overrun the queue. On 200 sampled topologies (seed 1) the
    /// fuzzy window held overload on 106 of 122 with the mark so held and 100 without (all
    /// six gained on REs of 1,400-4,700 messages/s; no-harm and no-delay unchanged). Held
    /// to half the drain time, as the local controls hold theirs, it gained on some and
    /// lost up to 0.14 of capacity on others (of the first 40 topologies); behind win-disc,
    /// whose windows fill the queue by design, a held mark rejected what they let in
    /// (overload on 16 of the first 27 overloaded topologies, against 24 unheld).
    #[serde(
        rename = "backstop_work_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub backstop_work: Option<Duration>,
    /// The share of the RE queue's drain time, at the smoothed service time, that the
    /// backstop's work mark is held to (0: not held, the mark as `backstop_work_ms` sets
    /// it). Unset (the default): 1, the whole drain time, behind the fuzzy window; not held
    /// behind the other feedback algorithms (see `backstop_work_ms`). Held to the whole
    /// drain time behind win-cont, rate-abs and rate-occ, the first 40 sampled topologies
    /// (seed 1) held the overload claim as often as unheld or once less, and win-cont's
    /// goodput fell on 7 of the 10 topologies it moved by more than 0.5 %, by up to 0.05 of
    /// capacity (win-cont's and rate-abs's budgets are already held to the queue, see
    /// `queue_bounded_budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backstop_drain_share: Option<f64>,
    pub estimator: EstimatorConfig,
    pub active_sources: ActiveSourceConfig,
    pub threshold: ThresholdConfig,
    pub win_disc: WinDiscConfig,
    pub win_cont: WinContConfig,
    pub win_auto: WinAutoConfig,
    pub rate_abs: RateAbsConfig,
    pub rate_occ: RateOccConfig,
    pub ohta: OhtaConfig,
    pub occ: OccConfig,
    pub red: RedConfig,
    pub pi: PiConfig,
    pub latency_bucket: LatencyBucketConfig,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::default(),
            seed: 0,
            fairness: None,
            queue_bounded_budget: true,
            lend_unused_share: true,
            backstop: true,
            backstop_work: None,
            backstop_drain_share: None,
            estimator: EstimatorConfig::default(),
            active_sources: ActiveSourceConfig::default(),
            threshold: ThresholdConfig::default(),
            win_disc: WinDiscConfig::default(),
            win_cont: WinContConfig::default(),
            win_auto: WinAutoConfig::default(),
            rate_abs: RateAbsConfig::default(),
            rate_occ: RateOccConfig::default(),
            ohta: OhtaConfig::default(),
            occ: OccConfig::default(),
            red: RedConfig::default(),
            pi: PiConfig::default(),
            latency_bucket: LatencyBucketConfig::default(),
        }
    }
}

impl ControlConfig {
    /// The paper's defaults for one algorithm.
    pub fn for_algorithm(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            ..Self::default()
        }
    }

    /// The backstop's work mark in force: the configured one, else the algorithm's (see
    /// the field).
    pub fn backstop_work(&self) -> Duration {
        self.backstop_work.unwrap_or(match self.algorithm {
            Algorithm::WinDisc => Duration::from_millis(300),
            // Its window counts the INVITEs in process, not a budget of work.
            Algorithm::WinAuto => Duration::ZERO,
            _ => Duration::from_millis(250),
        })
    }

    /// The share of the RE queue's drain time the backstop's work mark is held to, if it
    /// is held: the configured one, else the whole of it behind the fuzzy window (see
    /// the field and `backstop_work`).
    pub fn backstop_drain_share(&self) -> Option<f64> {
        match self.backstop_drain_share {
            Some(share) => (share > 0.0).then_some(share),
            None => (self.algorithm == Algorithm::Fuzzy).then_some(1.0),
        }
    }

    /// The fairness in force: the configured one, else max-min for rate-abs and
    /// provider-centric for the others (see the field).
    pub fn fairness(&self) -> Fairness {
        self.fairness.unwrap_or(match self.algorithm {
            Algorithm::RateAbs => Fairness::MaxMin,
            _ => Fairness::ProviderCentric,
        })
    }

    /// The proxy's receive-stage policy: the local control for `threshold`, `ohta`, `occ`,
    /// `red`, `pi` and `latency-bucket`, the threshold backstop for a feedback algorithm
    /// (unless `backstop` is off), otherwise admit everything (the driver's bounded queue
    /// drops when full). Timers start at `now`; `watched_queue_capacity` is the
    /// capacity of the queue the policy watches (the INVITE queue `q_M` when the driver
    /// splits its queues): the PI's queue loop caps its set-point with it, and the
    /// threshold and Ohta watermarks default to shares of it.
    /// Random draws use `seed` (stream 0, like the feedback generator, which the local
    /// policies never run alongside).
    pub fn build_local_admission(
        &self,
        now: Time,
        watched_queue_capacity: usize,
    ) -> AnyLocalAdmission {
        // The watermarks, and a work mark unless it is zero (`with_delay_mark` adds none).
        let threshold = |work: Duration| {
            ThresholdRejection::new(&self.threshold, watched_queue_capacity)
                .with_delay_mark(work, self.estimator.initial_session_length)
        };
        match self.algorithm {
            Algorithm::Threshold => AnyLocalAdmission::Threshold(
                threshold(self.threshold.work_mark())
                    .held_to_queue(watched_queue_capacity, LOCAL_DRAIN_SHARE),
            ),
            Algorithm::Ohta => AnyLocalAdmission::Ohta(Ohta::new(
                &self.ohta,
                watched_queue_capacity,
                self.estimator.initial_session_length,
            )),
            Algorithm::Occ => AnyLocalAdmission::Occ(LocalOcc::new(
                &self.occ,
                self.seed,
                now,
                watched_queue_capacity,
                self.estimator.initial_session_length,
            )),
            Algorithm::Red => AnyLocalAdmission::Red(RedRejection::new(
                &self.red,
                self.seed,
                watched_queue_capacity,
                self.estimator.initial_session_length,
            )),
            Algorithm::Pi => AnyLocalAdmission::Pi(DualLoopPi::new(
                &self.pi,
                watched_queue_capacity,
                self.estimator.initial_session_length,
                self.seed,
                now,
            )),
            Algorithm::LatencyBucket => AnyLocalAdmission::LatencyBucket(LatencyBucket::new(
                &self.latency_bucket,
                now,
                watched_queue_capacity,
                self.estimator.initial_session_length,
            )),
            Algorithm::WinDisc
            | Algorithm::WinCont
            | Algorithm::WinAuto
            | Algorithm::RateAbs
            | Algorithm::RateOcc
            | Algorithm::Fuzzy => {
                if self.backstop {
                    let backstop = threshold(self.backstop_work());
                    AnyLocalAdmission::Threshold(match self.backstop_drain_share() {
                        Some(share) => backstop.held_to_queue(watched_queue_capacity, share),
                        None => backstop,
                    })
                } else {
                    AnyLocalAdmission::AdmitAll(AdmitAll)
                }
            }
            Algorithm::None => AnyLocalAdmission::AdmitAll(AdmitAll),
        }
    }

    /// The RE's feedback generator; the baselines get one that only estimates.
    /// Its timers start at `now`; `queue_capacity` is the RE's queue in messages, when
    /// the driver bounds it (see `queue_bounded_budget`).
    pub fn build_feedback_generator(
        &self,
        now: Time,
        queue_capacity: Option<usize>,
    ) -> AnyFeedbackGenerator {
        // §5.7: "T_m = min(100 ms, T_c)". Applied to rate-occ, whose occupancy is meaningful
        // over any interval: measuring more slowly than it acts feeds each step a stale
        // occupancy. Not applied to the μ-based algorithms: a 14 ms window holds about one
        // session at 72 sessions/s, and μ becomes noise (win-disc at T_c = 14 ms fell from
        // 1.00 to 0.72 goodput at load 8.4 in sluice's simulator when T_m followed T_c).
        let control_interval = match self.algorithm {
            Algorithm::RateOcc => Some(self.rate_occ.control_interval),
            _ => None,
        };
        let est = &EstimatorConfig {
            measurement_interval: control_interval
                .map_or(self.estimator.measurement_interval, |tc| {
                    self.estimator.measurement_interval.min(tc)
                }),
            ..self.estimator.clone()
        };
        let (src, fair) = (&self.active_sources, self.fairness());
        let bound = queue_capacity.filter(|_| self.queue_bounded_budget);
        match self.algorithm {
            Algorithm::None
            | Algorithm::Threshold
            | Algorithm::Ohta
            | Algorithm::Occ
            | Algorithm::Red
            | Algorithm::Pi
            | Algorithm::LatencyBucket => {
                AnyFeedbackGenerator::None(NoFeedback::new(est, src, now))
            }
            Algorithm::WinDisc => {
                let mut g = WinDisc::new(&self.win_disc, est, src, fair, now);
                if self.lend_unused_share {
                    g = g.lending_unused();
                }
                AnyFeedbackGenerator::WinDisc(match bound {
                    Some(q) => g.bounded_by_queue(q),
                    None => g,
                })
            }
            Algorithm::WinCont => {
                let mut g = WinCont::new(&self.win_cont, est, src, fair, self.seed, now);
                if self.lend_unused_share {
                    g = g.lending_unused();
                }
                AnyFeedbackGenerator::WinCont(match bound {
                    Some(q) => g.bounded_by_queue(q),
                    None => g,
                })
            }
            Algorithm::WinAuto => AnyFeedbackGenerator::WinAuto(WinAuto::new(&self.win_auto, src)),
            Algorithm::RateAbs => {
                let mut g = RateAbs::new(&self.rate_abs, est, src, fair, now);
                if self.lend_unused_share {
                    g = g.lending_unused();
                }
                AnyFeedbackGenerator::RateAbs(match bound {
                    Some(q) => g.bounded_by_queue(q),
                    None => g,
                })
            }
            Algorithm::RateOcc => {
                let g = RateOcc::new(&self.rate_occ, est, src, now);
                AnyFeedbackGenerator::RateOcc(match bound {
                    Some(q) => g.bounded_by_queue(q),
                    None => g,
                })
            }
            Algorithm::Fuzzy => AnyFeedbackGenerator::LoadReport(LoadReport::new(est, src, now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::FeedbackGenerator;
    use std::time::Duration;

    #[test]
    fn every_seed_survives_toml() {
        for seed in [0, 7, i64::MAX as u64, 1 << 63, u64::MAX] {
            let cfg = ControlConfig {
                seed,
                ..ControlConfig::default()
            };
            let text = toml::to_string(&cfg).unwrap();
            let back: ControlConfig = toml::from_str(&text).unwrap();
            assert_eq!(back.seed, seed, "{text}");
        }
        // Ordinary seeds stay integers; a large one is a string, and either is read.
        assert!(toml::to_string(&ControlConfig::default())
            .unwrap()
            .contains("seed = 0"));
        let read: ControlConfig = toml::from_str("seed = \"12\"").unwrap();
        assert_eq!(read.seed, 12);
        for bad in ["seed = \"-1\"", "seed = -1", "seed = 1.5"] {
            let err = toml::from_str::<ControlConfig>(bad).unwrap_err();
            assert!(
                err.to_string().contains("a seed, an integer"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn rate_occ_measures_at_least_as_often_as_it_acts() {
        // §5.7: T_m = min(100 ms, T_c). With T_c = 14 ms and the default T_m = 100 ms, the
        // first control step at 14 ms already has an occupancy measured over 14 ms.
        let cfg: ControlConfig =
            toml::from_str("algorithm = \"rate-occ\"\nrate_occ = { control_interval_ms = 14 }")
                .unwrap();
        let mut g = cfg.build_feedback_generator(Time::ZERO, None);
        let done = crate::receiver::test_support::processed(
            crate::types::MessageSummary::new_session(None),
            true,
        );
        g.on_processed(Time::from_millis(5), &done);
        g.handle_timeout(Time::from_millis(14));
        let occupancy = g
            .metrics()
            .occupancy
            .expect("measured at the first control step");
        assert!(
            (occupancy - 2.0 / 14.0).abs() < 1e-9,
            "2 ms busy in 14 ms, got {occupancy}"
        );
        // A longer T_c leaves the default T_m alone.
        let cfg: ControlConfig = toml::from_str("algorithm = \"rate-occ\"").unwrap();
        let mut g = cfg.build_feedback_generator(Time::ZERO, None);
        g.handle_timeout(Time::from_millis(14));
        assert_eq!(g.metrics().occupancy, None);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            let cfg: ControlConfig = toml::from_str(&format!("algorithm = \"{a}\"")).unwrap();
            assert_eq!(cfg.algorithm, a);
        }
        assert!("win_cont".parse::<Algorithm>().is_err());
    }

    #[test]
    fn an_empty_file_gives_the_papers_defaults() {
        let cfg: ControlConfig = toml::from_str("").unwrap();
        assert_eq!(cfg, ControlConfig::default());
        assert_eq!(cfg.win_disc.budget_delay, Duration::from_millis(200));
        assert_eq!(cfg.win_disc.control_interval, Duration::from_millis(200));
        let work = |algorithm| ControlConfig::for_algorithm(algorithm).backstop_work();
        assert_eq!(work(Algorithm::RateAbs), Duration::from_millis(250));
        assert_eq!(work(Algorithm::WinCont), Duration::from_millis(250));
        assert_eq!(work(Algorithm::WinDisc), Duration::from_millis(300));
        assert_eq!(work(Algorithm::WinAuto), Duration::ZERO);
        let set: ControlConfig =
            toml::from_str("algorithm = \"win-auto\"\nbackstop_work_ms = 100").unwrap();
        assert_eq!(set.backstop_work(), Duration::from_millis(100));
        assert_eq!(
            cfg.estimator.measurement_interval,
            Duration::from_millis(100)
        );
        assert!((cfg.rate_occ.target_occupancy - 0.85).abs() < 1e-12);
        assert!((cfg.rate_occ.max_increase - 5.0).abs() < 1e-12);
        assert!((cfg.rate_occ.min_fraction - 0.02).abs() < 1e-12);
        assert_eq!(cfg.active_sources.expiry, Duration::from_secs(1));
    }

    #[test]
    fn fields_parse_in_milliseconds_and_typos_are_rejected() {
        let cfg: ControlConfig = toml::from_str(
            "algorithm = \"rate-occ\"\nfairness = \"user-centric\"\n[rate_occ]\ncontrol_interval_ms = 14\n\
             [estimator]\nmeasurement_interval_ms = 14\n[win_auto]\ndelay_binding_ms = 200\n",
        )
        .unwrap();
        assert_eq!(cfg.rate_occ.control_interval, Duration::from_millis(14));
        assert_eq!(cfg.win_auto.delay_binding, Some(Duration::from_millis(200)));
        assert!(toml::from_str::<ControlConfig>("[win_cont]\nbudget_delay = 200").is_err());
        assert!(toml::from_str::<ControlConfig>("[rate_abs]\nc_ms = -5").is_err());
        assert!(toml::from_str::<ControlConfig>("algorithm = \"win_cont\"").is_err());
        // Enforcement is the SE's own setting, not the RE's control table.
        assert!(toml::from_str::<ControlConfig>("[enforcement]\nthrottle = \"window\"").is_err());
    }

    /// What `local` says to a new INVITE after serving a message in 5 ms, with `invites`
    /// INVITEs queued and nothing else.
    fn verdict_after_5_ms_service(
        mut local: AnyLocalAdmission,
        invites: u32,
    ) -> crate::types::AdmissionVerdict {
        use crate::admission::LocalAdmission;
        use crate::types::{Completion, MessageSummary, NeighbourId, QueueOccupancy};
        let src = Some(NeighbourId(1));
        local.on_processed(
            Time::ZERO,
            &Completion {
                message: MessageSummary::response(src),
                service_time: Duration::from_millis(5),
                queueing_delay: Duration::ZERO,
                session_accepted: false,
            },
        );
        local.on_queue(
            Time::ZERO,
            QueueOccupancy {
                invites,
                non_invites: 0,
            },
        );
        local.on_arrival(
            Time::ZERO,
            invites as usize,
            &MessageSummary::new_session(src),
        )
    }

    #[test]
    fn behind_the_fuzzy_window_the_backstop_holds_its_work_mark_to_the_queue() {
        use crate::types::AdmissionVerdict;
        // A queue of 20 messages served at 5 ms each drains in 100 ms. Queued INVITEs
        // count with their sessions (7 messages): 2 are 70 ms of work, 3 are 105 ms.
        let verdict = |algorithm, invites| {
            verdict_after_5_ms_service(
                ControlConfig::for_algorithm(algorithm).build_local_admission(Time::ZERO, 20),
                invites,
            )
        };
        assert_eq!(verdict(Algorithm::Fuzzy, 2), AdmissionVerdict::Admit);
        assert_eq!(verdict(Algorithm::Fuzzy, 3), AdmissionVerdict::Reject);
        // Behind the other feedback algorithms the mark stays 250 ms (300 for win-disc).
        for a in [Algorithm::WinCont, Algorithm::WinDisc, Algorithm::RateAbs] {
            assert_eq!(verdict(a, 3), AdmissionVerdict::Admit, "{a}");
        }
        // The configured share wins either way: 0 lets the fuzzy window's mark go unheld,
        // a share holds another algorithm's.
        let configured = |algorithm, share| {
            let cfg = ControlConfig {
                backstop_drain_share: Some(share),
                ..ControlConfig::for_algorithm(algorithm)
            };
            verdict_after_5_ms_service(cfg.build_local_admission(Time::ZERO, 20), 3)
        };
        assert_eq!(configured(Algorithm::Fuzzy, 0.0), AdmissionVerdict::Admit);
        assert_eq!(
            configured(Algorithm::WinCont, 1.0),
            AdmissionVerdict::Reject
        );
    }

    #[test]
    fn every_algorithm_builds_a_generator_and_a_policy() {
        for a in Algorithm::ALL {
            let cfg = ControlConfig::for_algorithm(a);
            let g = cfg.build_feedback_generator(Time::ZERO, None);
            assert_eq!(g.metrics().active_sources, 0);
            let local = cfg.build_local_admission(Time::ZERO, 800);
            // A feedback algorithm's RE keeps the threshold as its backstop, the fuzzy
            // window's too.
            let expected_backstop = !a.is_local();
            assert_eq!(
                matches!(local, AnyLocalAdmission::AdmitAll(_)),
                a == Algorithm::None,
                "{a}"
            );
            assert_eq!(
                matches!(local, AnyLocalAdmission::Threshold(_)),
                a == Algorithm::Threshold || expected_backstop,
                "{a}"
            );
            assert_eq!(
                matches!(local, AnyLocalAdmission::Red(_)),
                a == Algorithm::Red,
                "{a}"
            );
            let without = ControlConfig {
                backstop: false,
                ..cfg.clone()
            };
            assert_eq!(
                matches!(
                    without.build_local_admission(Time::ZERO, 800),
                    AnyLocalAdmission::AdmitAll(_)
                ),
                !a.is_local() || a == Algorithm::None,
                "{a} without a backstop"
            );
        }
    }

    #[test]
    #[allow(clippy::float_cmp)] // parsed literals compared with themselves
    fn local_controls_build_from_their_tables_with_the_papers_defaults() {
        use crate::admission::LocalAdmission;
        let cfg: ControlConfig = toml::from_str(
            "algorithm = \"pi\"\nseed = 9\n[pi]\nk_pc = 2.5\ntarget_queueing_delay_ms = 40\n\
             max_drain_rate = 500\n",
        )
        .unwrap();
        assert_eq!(cfg.pi.gains(), [2.5, 10.3, 19.2, 130.5]);
        assert_eq!(cfg.pi.target_queueing_delay, Duration::from_millis(40));
        assert_eq!(cfg.pi.sample_interval, Duration::from_millis(10));
        let mut a = cfg.build_local_admission(Time::ZERO, 640);
        assert!(a.drains() && cfg.algorithm.drains_invite_queue());
        assert_eq!(
            a.drain_mut().unwrap().max_queue(),
            640,
            "q_M is the driver's queue"
        );
        assert_eq!(a.poll_timeout(), Some(Time::from_millis(10)));

        let d = ControlConfig::default();
        assert_eq!(
            d.ohta.marks(1000),
            (800, 400),
            "De Cicco et al.'s, of their buffer"
        );
        assert_eq!(d.occ.control_interval, Duration::from_secs(1));
        assert_eq!(d.occ.measurement_interval, Duration::from_millis(100));
        assert!((d.occ.min_fraction - 0.02).abs() < 1e-12);
        assert!((d.occ.max_increase - 5.0).abs() < 1e-12);
        assert!((d.red.queue_weight - 0.1).abs() < 1e-12);
        assert_eq!((d.red.th_low, d.red.th_high), (None, None));
        assert_eq!(d.latency_bucket.target_latency, Duration::from_millis(100));

        for (name, drains) in [
            ("ohta", false),
            ("occ", false),
            ("red", false),
            ("pi", true),
            ("latency-bucket", false),
        ] {
            let a: Algorithm = name.parse().unwrap();
            assert!(a.is_local());
            let mut built = ControlConfig::for_algorithm(a).build_local_admission(Time::ZERO, 800);
            assert_eq!(built.drains(), drains, "{name}");
            assert!(built.drain_mut().is_some() == drains);
            assert!(!matches!(built, AnyLocalAdmission::AdmitAll(_)), "{name}");
        }
        for a in [Algorithm::None, Algorithm::WinCont, Algorithm::RateOcc] {
            let cfg = ControlConfig {
                backstop: false,
                ..ControlConfig::for_algorithm(a)
            };
            assert!(matches!(
                cfg.build_local_admission(Time::ZERO, 800),
                AnyLocalAdmission::AdmitAll(_)
            ));
        }
        assert!(toml::from_str::<ControlConfig>("[pi]\nk_p = 1").is_err());
        assert!(toml::from_str::<ControlConfig>("[occ]\ncontrol_interval = 1").is_err());
    }

    #[test]
    fn the_local_controls_with_marks_in_messages_also_reject_on_work() {
        use crate::types::AdmissionVerdict;
        // 5 ms a message and 7 messages a session: 10 queued INVITEs are 350 ms of work,
        // in a queue of 1,000 whose marks in messages are hundreds.
        let verdict = |algorithm: Algorithm, work_mark: Option<Duration>| {
            let mut cfg = ControlConfig {
                algorithm,
                ..ControlConfig::default()
            };
            cfg.threshold.work_mark = work_mark;
            cfg.ohta.work_mark = work_mark;
            cfg.red.work_mark = work_mark;
            cfg.latency_bucket.work_mark = work_mark;
            verdict_after_5_ms_service(cfg.build_local_admission(Time::ZERO, 1000), 10)
        };
        for algorithm in [
            Algorithm::Threshold,
            Algorithm::Ohta,
            Algorithm::Red,
            Algorithm::LatencyBucket,
        ] {
            assert_eq!(
                verdict(algorithm, None),
                AdmissionVerdict::Reject,
                "{algorithm:?} by default"
            );
            assert_eq!(
                verdict(algorithm, Some(Duration::from_millis(400))),
                AdmissionVerdict::Admit,
                "{algorithm:?} under a 400 ms mark"
            );
            assert_eq!(
                verdict(algorithm, Some(Duration::ZERO)),
                AdmissionVerdict::Admit,
                "{algorithm:?} with its marks in messages alone"
            );
        }
    }
}
