//! The client (SE) side of RFC 7339 for one next hop: it declares support in the Via
//! of each request, applies the parameters the server returns, and reduces requests
//! while control is in force.
//!
//! Acceptance (RFC 7339 §5.2–§5.5): a response's `oc` is applied only if its `oc-seq`
//! is newer than the last applied (equal or older ones are stale and ignored), its
//! algorithm is one this client offered, and its value is in range; everything else is
//! ignored and counted. An applied value holds for `oc-validity` milliseconds (a
//! configured default when absent); `oc-validity=0` ends control at once, and so does
//! the expiry of the validity period. A `loss` value of 0 is kept as "drop nothing".

use crate::enforcer::{OfferedLoadMeter, WindowThrottle};
use crate::overload::loss::LossThrottle;
use crate::overload::rate::RateBucket;
use crate::overload::{OcAlgorithm, OcSequence, Reduction, RequestTraits, FEED_FORWARD_PARAM};
use crate::types::FeedbackValue;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::fmt::Write as _;
use std::time::Duration;

/// Client settings; in files durations are milliseconds (`default_validity_ms = 500`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OcClientConfig {
    /// The algorithms offered in `oc-algo`, most preferred first.
    pub algorithms: Vec<OcAlgorithm>,
    /// How long a value holds when the response has no `oc-validity`.
    #[serde(rename = "default_validity_ms", with = "crate::serde_millis")]
    pub default_validity: Duration,
    /// Longer `oc-validity` values are shortened to this (state kept per next hop is bounded).
    #[serde(rename = "max_validity_ms", with = "crate::serde_millis")]
    pub max_validity: Duration,
    /// Weight of each request in the loss algorithm's category mix estimate.
    pub loss_mix_weight: f64,
    /// RFC 7415 tolerance for category 1 requests.
    #[serde(rename = "rate_tau_ms", with = "crate::serde_millis")]
    pub rate_tau: Duration,
    /// RFC 7415 tolerance for category 2 (priority) requests; at least `rate_tau`.
    #[serde(rename = "rate_tau_priority_ms", with = "crate::serde_millis")]
    pub rate_tau_priority: Duration,
    /// The window extension's probe (see [`WindowThrottle`]); `None` disables it.
    #[serde(rename = "window_probe_after_ms", with = "crate::serde_millis::option")]
    pub window_probe_after: Option<Duration>,
    /// Send `sluice-ff` (double feed).
    pub feed_forward: bool,
    #[serde(rename = "meter_interval_ms", with = "crate::serde_millis")]
    pub meter_interval: Duration,
    pub meter_smoothing_weight: f64,
}

impl Default for OcClientConfig {
    fn default() -> Self {
        Self {
            algorithms: vec![OcAlgorithm::Loss, OcAlgorithm::Rate],
            default_validity: Duration::from_millis(500),
            max_validity: Duration::from_secs(3600),
            loss_mix_weight: 0.01,
            rate_tau: Duration::from_millis(20),
            rate_tau_priority: Duration::from_millis(100),
            window_probe_after: Some(Duration::from_secs(1)),
            feed_forward: false,
            meter_interval: Duration::from_millis(100),
            meter_smoothing_weight: 0.2,
        }
    }
}

/// The overload control parameters of one response's top Via, as the codec parsed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OcResponse<'a> {
    /// `oc=<value>`; `None` when absent or present without a value.
    pub oc: Option<u64>,
    /// The single algorithm the server chose (`oc-algo`), unquoted.
    pub algorithm: Option<&'a str>,
    pub validity_ms: Option<u64>,
    pub seq: Option<OcSequence>,
}

/// What became of a response's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcUpdate {
    /// No `oc` value: nothing to do.
    Absent,
    /// Control is in force with the new value.
    Applied,
    /// `oc-validity=0`: control ended.
    Stopped,
    /// `oc-seq` not newer than the last applied.
    Stale,
    /// `oc-seq` missing (the server must send it).
    MissingSeq,
    /// An algorithm this client did not offer.
    UnknownAlgorithm,
    /// `oc` or `oc-validity` outside what the algorithm allows.
    OutOfRange,
}

/// The client's decision about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcVerdict {
    Forward,
    /// Reduced: answer the caller instead of sending it.
    Reject,
}

/// Counters; every ignored parameter set and every reduced request is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OcClientStats {
    pub applied: u64,
    pub stopped: u64,
    pub expired: u64,
    pub stale: u64,
    pub missing_seq: u64,
    pub unknown_algorithm: u64,
    pub out_of_range: u64,
    /// Parameters the codec could not parse (reported through `on_malformed`).
    pub malformed: u64,
    /// Reducible requests offered (category 1 and 2).
    pub offered: u64,
    pub forwarded: u64,
    pub rejected_normal: u64,
    pub rejected_priority: u64,
    pub exempt: u64,
    pub window_probes: u64,
}

// One long-lived instance per next hop: boxing the variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Control {
    Off,
    Loss(LossThrottle),
    Rate(RateBucket),
    Window(WindowThrottle),
}

#[derive(Clone, Debug)]
pub struct OcClient {
    config: OcClientConfig,
    control: Control,
    /// When the applied value stops holding; `None` while control is off.
    expires: Option<Time>,
    last_seq: Option<OcSequence>,
    rng: ChaCha8Rng,
    meter: OfferedLoadMeter,
    stats: OcClientStats,
}

impl OcClient {
    /// `seed` and `stream` select this client's random stream; give each next hop its
    /// own `stream`.
    /// A repeated algorithm list is cleaned up, and `loss` is added when it is missing.
    pub fn new(mut config: OcClientConfig, seed: u64, stream: u64, now: Time) -> Self {
        let mut seen = Vec::with_capacity(config.algorithms.len());
        config.algorithms.retain(|a| {
            let first = !seen.contains(a);
            seen.push(*a);
            first
        });
        // RFC 7339 §4.2, §5.1: the offered list MUST contain `loss`, the algorithm every
        // participant implements; it goes last, so the configured preference stands.
        if !config.algorithms.contains(&OcAlgorithm::Loss) {
            config.algorithms.push(OcAlgorithm::Loss);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        let meter =
            OfferedLoadMeter::new(config.meter_interval, config.meter_smoothing_weight, now);
        Self {
            config,
            control: Control::Off,
            expires: None,
            last_seq: None,
            rng,
            meter,
            stats: OcClientStats::default(),
        }
    }

    /// The algorithm currently in force, if any.
    pub fn active(&self) -> Option<OcAlgorithm> {
        match self.control {
            Control::Off => None,
            Control::Loss(_) => Some(OcAlgorithm::Loss),
            Control::Rate(_) => Some(OcAlgorithm::Rate),
            Control::Window(_) => Some(OcAlgorithm::SluiceWindow),
        }
    }

    /// The `oc` value in force (loss percent, rate per second, or window slots left).
    pub fn value(&self) -> Option<i64> {
        match &self.control {
            Control::Off => None,
            Control::Loss(l) => Some(i64::from(l.percent())),
            Control::Rate(r) => i64::try_from(r.rate()).ok(),
            Control::Window(w) => w.slots(),
        }
    }

    pub fn stats(&self) -> OcClientStats {
        self.stats
    }

    /// Appends `;oc;oc-algo="…"` (and `;sluice-ff=…` with double feed once measured) to
    /// the Via value this proxy pushes on a request bound for the server.
    pub fn append_request_params(&mut self, now: Time, via: &mut String) {
        via.push_str(";oc;oc-algo=\"");
        for (i, algorithm) in self.config.algorithms.iter().enumerate() {
            if i > 0 {
                via.push(',');
            }
            via.push_str(algorithm.token());
        }
        via.push('"');
        if let Some(rate) = self.feed_forward(now) {
            // Three decimals are plenty for a session rate and keep the text short.
            let _ = write!(via, ";{FEED_FORWARD_PARAM}={rate:.3}");
        }
    }

    /// The offered session rate to feed forward, if double feed is on and measured.
    pub fn feed_forward(&mut self, now: Time) -> Option<f64> {
        if self.config.feed_forward {
            self.meter.rate(now)
        } else {
            None
        }
    }

    /// A response's top Via had an overload parameter that did not parse (RFC 7339
    /// says to ignore it); counted only.
    pub fn on_malformed(&mut self) {
        self.stats.malformed += 1;
    }

    /// Applies a response's parameters (see the module docs for what is accepted).
    pub fn on_response(&mut self, now: Time, response: &OcResponse<'_>) -> OcUpdate {
        self.expire(now);
        let update = self.accept(now, response);
        match update {
            OcUpdate::Absent => {}
            OcUpdate::Applied => self.stats.applied += 1,
            OcUpdate::Stopped => self.stats.stopped += 1,
            OcUpdate::Stale => self.stats.stale += 1,
            OcUpdate::MissingSeq => self.stats.missing_seq += 1,
            OcUpdate::UnknownAlgorithm => self.stats.unknown_algorithm += 1,
            OcUpdate::OutOfRange => self.stats.out_of_range += 1,
        }
        update
    }

    fn accept(&mut self, now: Time, response: &OcResponse<'_>) -> OcUpdate {
        let Some(oc) = response.oc else {
            return OcUpdate::Absent;
        };
        let Some(seq) = response.seq else {
            return OcUpdate::MissingSeq;
        };
        if self.last_seq.is_some_and(|last| seq <= last) {
            return OcUpdate::Stale;
        }
        // RFC 7339 makes `loss` the algorithm every participant implements, so a
        // response that names none is read as `loss`.
        let algorithm = match response.algorithm {
            None => Some(OcAlgorithm::Loss),
            Some(token) => OcAlgorithm::from_token(token),
        };
        let Some(algorithm) = algorithm.filter(|a| self.config.algorithms.contains(a)) else {
            return OcUpdate::UnknownAlgorithm;
        };
        // `oc-validity=0` ends control whatever `oc` says (RFC 7339 §4.3, §5.7; the client
        // SHOULD ignore `oc` then), so it is checked before the value's range.
        if response.validity_ms == Some(0) {
            self.stop();
            self.last_seq = Some(seq);
            return OcUpdate::Stopped;
        }
        // The client MUST honour the server's validity (§5.5): a longer one than this
        // client keeps state for is shortened, not ignored.
        let validity = response
            .validity_ms
            .map_or(self.config.default_validity, Duration::from_millis)
            .min(self.config.max_validity);
        let in_range = match algorithm {
            OcAlgorithm::Loss => oc <= 100,
            OcAlgorithm::Rate | OcAlgorithm::SluiceWindow => u32::try_from(oc).is_ok(),
        };
        if !in_range {
            return OcUpdate::OutOfRange;
        }
        self.last_seq = Some(seq);
        self.apply(now, algorithm, oc);
        self.expires = Some(now + validity);
        OcUpdate::Applied
    }

    /// `oc` is in range for `algorithm` (checked by the caller).
    fn apply(&mut self, now: Time, algorithm: OcAlgorithm, oc: u64) {
        let small = u32::try_from(oc).unwrap_or(u32::MAX);
        match (&mut self.control, algorithm) {
            (Control::Loss(l), OcAlgorithm::Loss) => l.set_percent(small),
            (Control::Rate(r), OcAlgorithm::Rate) => r.set_rate(oc),
            (Control::Window(w), OcAlgorithm::SluiceWindow) => {
                w.on_feedback(now, FeedbackValue::Window(small));
            }
            (_, OcAlgorithm::Loss) => {
                let rng = ChaCha8Rng::seed_from_u64(self.rng.gen());
                self.control =
                    Control::Loss(LossThrottle::new(small, self.config.loss_mix_weight, rng));
            }
            (_, OcAlgorithm::Rate) => {
                self.control = Control::Rate(RateBucket::start(
                    oc,
                    self.config.rate_tau,
                    self.config.rate_tau_priority,
                    now,
                    &mut self.rng,
                ));
            }
            (_, OcAlgorithm::SluiceWindow) => {
                let mut w = WindowThrottle::new(None, self.config.window_probe_after, now);
                w.on_feedback(now, FeedbackValue::Window(small));
                self.control = Control::Window(w);
            }
        }
    }

    fn stop(&mut self) {
        self.control = Control::Off;
        self.expires = None;
    }

    /// At expiry the stored values, `oc-seq` included, go back to their defaults (RFC 7339
    /// §5.4): a next hop that restarted with a smaller `oc-seq` is heard again from then on,
    /// not ignored until its counter passes the old one.
    fn expire(&mut self, now: Time) {
        if self.expires.is_some_and(|at| now >= at) {
            self.stop();
            self.last_seq = None;
            self.stats.expired += 1;
        }
    }

    /// Decides about one request bound for the server.
    pub fn admit(&mut self, now: Time, request: &RequestTraits) -> OcVerdict {
        self.expire(now);
        let rank = request.reduction();
        if rank == Reduction::Exempt {
            self.stats.exempt += 1;
            return OcVerdict::Forward;
        }
        self.stats.offered += 1;
        if request.starts_session() {
            self.meter.record(now);
        }
        let pass = match &mut self.control {
            Control::Loss(l) => l.try_pass(rank),
            Control::Rate(r) => r.try_pass(now, rank),
            // Windows count sessions (Shen et al. §2.4.1): other requests pass, and a
            // priority INVITE takes a slot when there is one but is never refused.
            Control::Window(w) if request.starts_session() => {
                let probes = w.probes();
                let pass = w.try_pass(now) || rank == Reduction::Priority;
                self.stats.window_probes += w.probes() - probes;
                pass
            }
            Control::Off | Control::Window(_) => true,
        };
        if pass {
            self.stats.forwarded += 1;
            OcVerdict::Forward
        } else {
            match rank {
                Reduction::Priority => self.stats.rejected_priority += 1,
                _ => self.stats.rejected_normal += 1,
            }
            OcVerdict::Reject
        }
    }

    /// When the value in force expires.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.expires
    }

    /// Ends control if its validity has run out.
    pub fn handle_timeout(&mut self, now: Time) {
        self.expire(now);
    }
}
