//! The server (RE) side of RFC 7339: per upstream neighbour, translate the feedback the
//! configured algorithm computed (a window, a target rate or an acceptance fraction)
//! into the parameters of the algorithm that neighbour offered, and number them.
//!
//! - Negotiation (RFC 7339 §5.2): the first algorithm in the client's `oc-algo` list
//!   that this server supports and can express its feedback in.
//! - `loss` (§7): `oc = 100 (1 − f)` from an acceptance fraction `f`, or
//!   `100 (1 − r / λ)` from a target rate `r` and the neighbour's offered rate `λ`.
//! - `rate` (RFC 7415): `oc = r`, or `f λ` from a fraction when the neighbour feeds its
//!   offered rate forward (without it, such feedback is counted as unconvertible: list
//!   `loss` first in `supported` for rate-occ).
//! - `sluicewin`: `oc` = the window; windows are never repeated, as each one replaces
//!   the client's count.
//! - `sluicerate`: `oc` = the rate in thousandths of a session per second, or `f λ` from
//!   a fraction against a fed-forward offered rate, like `rate`.
//! - `sluiceload`: `oc` = the CPU occupancy and `sluice-mem` the memory occupancy, in
//!   thousandths, repeated like `loss` and `rate` until the next report.
//! - `λ` is the neighbour's fed-forward rate when it sends one, else the rate of
//!   session starts arriving from it scaled back by the loss asked for while they were
//!   counted (arrivals are what is left after the client's reduction; see `offered.rs`).
//! - `oc-seq` (§5.2): one counter for the whole server, strictly increasing: the integer
//!   part follows `epoch_secs + now` so a restarted server still numbers above what it
//!   sent before, and several values within one second step the five fraction digits.
//! - When the algorithm has no new value, a participating neighbour gets the last
//!   `loss`/`rate` value again with a fresh `oc-seq`, so its validity does not lapse
//!   while the server is still in control.

use crate::overload::offered::OfferedEstimator;
use crate::overload::{
    parse_feed_forward, OcAlgorithm, OcSequence, RequestTraits, SLUICE_RATE_SCALE,
};
use crate::types::{FeedForward, Feedback, FeedbackValue, NeighbourId};
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Server settings; in files durations are milliseconds (`validity_ms = 500`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OcServerConfig {
    /// Algorithms this server will negotiate.
    pub supported: Vec<OcAlgorithm>,
    /// `oc-validity` for `loss` and `rate`.
    #[serde(rename = "validity_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub validity: Duration,
    /// `oc-validity` for windows; longer, because a window is only refreshed by traffic
    /// the client sends, and an idle client at a zero window would otherwise go open.
    #[serde(rename = "window_validity_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub window_validity: Duration,
    /// Neighbours with state at most; more are turned away and counted.
    pub max_neighbours: usize,
    /// Wall-clock seconds (UNIX time) at the driver's time origin: the base of `oc-seq`.
    pub epoch_secs: u64,
    /// Interval over which each neighbour's arrivals are counted to estimate the load it
    /// offers (scaled up by what its control passes), milliseconds.
    #[serde(rename = "meter_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub meter_interval: Duration,
    /// Weight of the newest interval in the meter's exponentially weighted average.
    pub meter_smoothing_weight: f64,
    /// Echo a client's count of sessions sent beside each window (`sluice-wack`, see
    /// [`crate::overload::WINDOW_ACK_PARAM`]), so it can take the sessions in flight off
    /// the window; the proxy does it for win-disc and win-cont, whose windows are
    /// budgets. `false`: the window alone, as Shen et al. feed it back.
    pub window_acks: bool,
}

impl Default for OcServerConfig {
    fn default() -> Self {
        Self {
            supported: OcAlgorithm::ALL.to_vec(),
            validity: Duration::from_millis(500),
            window_validity: Duration::from_secs(5),
            max_neighbours: 1024,
            epoch_secs: 0,
            meter_interval: Duration::from_millis(100),
            meter_smoothing_weight: 0.2,
            window_acks: true,
        }
    }
}

/// The parameters to put on the top Via of a response to a participating client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OcParams {
    pub oc: u64,
    pub algorithm: OcAlgorithm,
    pub validity_ms: u64,
    pub seq: OcSequence,
    /// `sluice-mem` (`sluiceload` only): memory occupancy in thousandths.
    pub memory: Option<u64>,
}

impl OcParams {
    /// Name/value pairs, in wire order, for `ResponseEdits::top_via_params` (relayed
    /// responses) or `ResponseBuilder::top_via_params` (generated ones); `oc-algo` is
    /// quoted as the grammar requires.
    pub fn pairs(&self) -> [(&'static str, String); 4] {
        [
            ("oc", self.oc.to_string()),
            ("oc-algo", format!("\"{}\"", self.algorithm.token())),
            ("oc-validity", self.validity_ms.to_string()),
            ("oc-seq", self.seq.to_string()),
        ]
    }

    /// Appends `;oc=…;oc-algo="…";oc-validity=…;oc-seq=…` to a Via value that has none
    /// of them yet. A client's Via already carries `oc` and its `oc-algo` list, so to
    /// stamp it use [`OcParams::pairs`] with the codec's edits, which replace them.
    pub fn append_to(&self, via: &mut String) {
        for (name, value) in self.pairs().into_iter().chain(self.extra_pair()) {
            let _ = write!(via, ";{name}={value}");
        }
    }

    /// The sluice parameter that goes beside the four of [`OcParams::pairs`], if any
    /// (`sluice-mem` for `sluiceload`).
    pub fn extra_pair(&self) -> Option<(&'static str, String)> {
        self.memory
            .map(|m| (crate::overload::MEMORY_PARAM, m.to_string()))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OcServerStats {
    /// Responses that got parameters.
    pub stamped: u64,
    /// Participating clients with no algorithm in common.
    pub no_common_algorithm: u64,
    /// Feedback that could not be expressed (no offered-rate estimate yet, or a window
    /// for a rate-based client).
    pub unconvertible: u64,
    pub feed_forward_accepted: u64,
    /// `sluice-ff` values that were not a finite non-negative number.
    pub feed_forward_malformed: u64,
    pub neighbours_turned_away: u64,
}

#[derive(Clone, Debug)]
struct Neighbour {
    /// The last loss/rate/fraction value, repeated while nothing newer arrives.
    last: Option<FeedbackValue>,
    /// A window was sent since the last release: windows are not repeated, so later
    /// responses without a new one say nothing (the window in force stands).
    window_sent: bool,
    arrivals: OfferedEstimator,
    fed_forward: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct OcServer {
    config: OcServerConfig,
    neighbours: HashMap<NeighbourId, Neighbour>,
    last_seq: Option<OcSequence>,
    stats: OcServerStats,
}

impl OcServer {
    pub fn new(config: OcServerConfig) -> Self {
        Self {
            config,
            neighbours: HashMap::new(),
            last_seq: None,
            stats: OcServerStats::default(),
        }
    }

    pub fn stats(&self) -> OcServerStats {
        self.stats
    }

    /// The first offered algorithm this server supports (unknown tokens are skipped).
    pub fn negotiate<S: AsRef<str>>(&self, offered: &[S]) -> Option<OcAlgorithm> {
        offered
            .iter()
            .filter_map(|t| OcAlgorithm::from_token(t.as_ref()))
            .find(|a| self.config.supported.contains(a))
    }

    fn neighbour(&mut self, now: Time, id: NeighbourId) -> Option<&mut Neighbour> {
        if !self.neighbours.contains_key(&id) {
            if self.neighbours.len() >= self.config.max_neighbours {
                self.stats.neighbours_turned_away += 1;
                return None;
            }
            let meter = OfferedEstimator::new(
                self.config.meter_interval,
                self.config.meter_smoothing_weight,
                now,
            );
            self.neighbours.insert(
                id,
                Neighbour {
                    last: None,
                    window_sent: false,
                    arrivals: meter,
                    fed_forward: None,
                },
            );
        }
        self.neighbours.get_mut(&id)
    }

    /// A request arrived from configured neighbour `from`; `feed_forward` is the raw
    /// `sluice-ff` value of its top Via. Returns the feed-forward for the feedback
    /// generator.
    pub fn on_request(
        &mut self,
        now: Time,
        from: NeighbourId,
        request: &RequestTraits,
        feed_forward: Option<&[u8]>,
    ) -> Option<FeedForward> {
        let ff = feed_forward.map(parse_feed_forward);
        match ff {
            Some(None) => self.stats.feed_forward_malformed += 1,
            Some(Some(_)) => self.stats.feed_forward_accepted += 1,
            None => {}
        }
        let neighbour = self.neighbour(now, from)?;
        if request.starts_session() {
            neighbour.arrivals.record(now);
        }
        let offered_rate = ff.flatten()?;
        neighbour.fed_forward = Some(offered_rate);
        Some(FeedForward { offered_rate })
    }

    /// The parameters for a response to `to`, whose top Via carried `oc` and the
    /// `oc-algo` list `offered`; `feedback` is what the generator returned for `to`.
    /// `None`: add nothing.
    pub fn response_params<S: AsRef<str>>(
        &mut self,
        now: Time,
        to: NeighbourId,
        offered: &[S],
        feedback: Option<Feedback>,
    ) -> Option<OcParams> {
        let Some(algorithm) = self.negotiate(offered) else {
            self.stats.no_common_algorithm += 1;
            return None;
        };
        let neighbour = self.neighbour(now, to)?;
        let value = match feedback.map(|f| f.value) {
            Some(v @ FeedbackValue::Window(_)) => {
                neighbour.window_sent = true;
                v
            }
            Some(v) => {
                neighbour.last = Some(v);
                v
            }
            None => match neighbour.last {
                Some(v) => v,
                None if neighbour.window_sent => return None,
                // Nothing to ask yet (e.g. before the generator's first control step). An
                // unstamped response would tell the client this server does not take part
                // (RFC 7339 §6); `oc=0` with `oc-validity=0` says it does, and asks nothing.
                None => {
                    self.stats.stamped += 1;
                    return Some(OcParams {
                        oc: 0,
                        algorithm,
                        validity_ms: 0,
                        seq: self.next_seq(now),
                        memory: None,
                    });
                }
            },
        };
        let Some(oc) = translate(neighbour, now, value, algorithm) else {
            self.stats.unconvertible += 1;
            return None;
        };
        let memory = match (algorithm, value) {
            (OcAlgorithm::SluiceLoad, FeedbackValue::Load { memory, .. }) => {
                Some(thousandths(memory))
            }
            _ => None,
        };
        let validity = if algorithm == OcAlgorithm::SluiceWindow {
            self.config.window_validity
        } else {
            self.config.validity
        };
        self.stats.stamped += 1;
        Some(OcParams {
            oc,
            algorithm,
            validity_ms: u64::try_from(validity.as_millis()).unwrap_or(u64::MAX),
            seq: self.next_seq(now),
            memory,
        })
    }

    /// Parameters that end control at a participating client at once (`oc=0`,
    /// `oc-validity=0`, RFC 7339 §5): for when the server leaves overload control, e.g.
    /// its algorithm is switched off. The neighbour's repeated value is forgotten.
    pub fn release_params<S: AsRef<str>>(
        &mut self,
        now: Time,
        to: NeighbourId,
        offered: &[S],
    ) -> Option<OcParams> {
        let algorithm = self.negotiate(offered)?;
        if let Some(neighbour) = self.neighbours.get_mut(&to) {
            neighbour.last = None;
            neighbour.window_sent = false;
            neighbour.arrivals.set_pass(now, 1.0);
        }
        self.stats.stamped += 1;
        Some(OcParams {
            oc: 0,
            algorithm,
            validity_ms: 0,
            seq: self.next_seq(now),
            memory: None,
        })
    }

    fn next_seq(&mut self, now: Time) -> OcSequence {
        let clock = OcSequence::whole(
            self.config
                .epoch_secs
                .saturating_add(now.as_nanos() / 1_000_000_000),
        );
        let seq = match self.last_seq {
            Some(last) if last >= clock => last.successor(),
            _ => clock,
        };
        self.last_seq = Some(seq);
        seq
    }
}

/// The neighbour's offered session rate before its reduction, if known.
fn offered_rate(neighbour: &mut Neighbour, now: Time) -> Option<f64> {
    if let Some(ff) = neighbour.fed_forward {
        return Some(ff);
    }
    neighbour.arrivals.rate(now)
}

fn translate(
    neighbour: &mut Neighbour,
    now: Time,
    value: FeedbackValue,
    algorithm: OcAlgorithm,
) -> Option<u64> {
    let loss = match (algorithm, value) {
        (OcAlgorithm::SluiceWindow, FeedbackValue::Window(w)) => return Some(u64::from(w)),
        (OcAlgorithm::SluiceLoad, FeedbackValue::Load { cpu, .. }) => {
            return Some(thousandths(cpu))
        }
        (OcAlgorithm::Loss, FeedbackValue::AcceptFraction(f)) if !f.is_nan() => {
            1.0 - f.clamp(0.0, 1.0)
        }
        (OcAlgorithm::Loss, FeedbackValue::Rate(r)) if !r.is_nan() => {
            let offered = offered_rate(neighbour, now)?;
            if offered <= 0.0 {
                0.0
            } else {
                (1.0 - r / offered).clamp(0.0, 1.0)
            }
        }
        (OcAlgorithm::Rate, FeedbackValue::Rate(r)) => return rate_value(r),
        (OcAlgorithm::SluiceRate, FeedbackValue::Rate(r)) => {
            return rate_value(r * SLUICE_RATE_SCALE)
        }
        // Arrivals under a rate limit say nothing about the load behind it, so a
        // fraction becomes a rate only against a fed-forward offered rate.
        (OcAlgorithm::Rate, FeedbackValue::AcceptFraction(f)) if !f.is_nan() => {
            let offered = neighbour.fed_forward?;
            return rate_value(f.clamp(0.0, 1.0) * offered);
        }
        (OcAlgorithm::SluiceRate, FeedbackValue::AcceptFraction(f)) if !f.is_nan() => {
            let offered = neighbour.fed_forward?;
            return rate_value(f.clamp(0.0, 1.0) * offered * SLUICE_RATE_SCALE);
        }
        _ => return None,
    };
    let percent = (loss * 100.0).round();
    neighbour.arrivals.set_pass(now, 1.0 - percent / 100.0);
    // In [0, 100] by the clamps above.
    Some(percent as u64)
}

/// An occupancy in `[0, 1]` as thousandths (NaN: full).
fn thousandths(occupancy: f64) -> u64 {
    let o = if occupancy.is_nan() {
        1.0
    } else {
        occupancy.clamp(0.0, 1.0)
    };
    (o * crate::overload::SLUICE_LOAD_SCALE).round() as u64
}

/// A rate as `oc`: whole requests per second, never rounded down to a full stop.
fn rate_value(rate: f64) -> Option<u64> {
    if rate.is_nan() || rate < 0.0 {
        return None;
    }
    if rate == 0.0 {
        return Some(0);
    }
    Some(rate.round().clamp(1.0, f64::from(u32::MAX)) as u64)
}
