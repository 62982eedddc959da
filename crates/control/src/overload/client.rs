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
//!
//! The extensions `sluicewin` and `sluicerate` are enforced by Shen et al.'s [`Throttle`]
//! (§2.4.2): a window, or for a rate the percentage throttle against this client's
//! measured offered rate (or a token bucket, leaky bucket or call gapping). In keep mode a
//! blocked session is held instead of rejected ([`OcVerdict::Hold`]) and handed back by
//! [`OcClient::poll_release`] when the throttle lets it go; when control ends, everything
//! held is released.
//!
//! `sluiceload` sets a window of INVITEs in transit with the fuzzy controller
//! ([`crate::fuzzy`]) from the server's reported CPU and memory occupancy. An INVITE is
//! in transit from when the driver sends it ([`OcClient::on_session_sent`]) until the
//! first response to it from the server, or the end of its transaction
//! ([`OcClient::on_session_answered`]): the "requests waiting for response" of the
//! paper's window (§I) and RFC 6357 §9.3's messages in transit.

use crate::enforcer::{
    BlockingMode, FeedbackEnforcer, OfferedLoadMeter, Throttle, ThrottleKind, ThrottleSpec,
};
use crate::fuzzy::{FuzzyWindow, FuzzyWindowConfig};
use crate::overload::loss::LossThrottle;
use crate::overload::rate::RateBucket;
use crate::overload::{
    OcAlgorithm, OcSequence, Reduction, RequestTraits, FEED_FORWARD_PARAM, SLUICE_LOAD_SCALE,
    SLUICE_RATE_SCALE, WINDOW_IN_FLIGHT_PARAM, WINDOW_SENT_PARAM,
};
use crate::types::{Feedback, FeedbackValue, MessageSummary, RequestId, ThrottleVerdict};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::fmt::Write as _;
use std::time::Duration;

/// Client settings; in files durations are milliseconds (`default_validity_ms = 500`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OcClientConfig {
    /// The algorithms offered in `oc-algo`, most preferred first.
    pub algorithms: Vec<OcAlgorithm>,
    /// How long a value holds when the response has no `oc-validity`.
    #[serde(rename = "default_validity_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub default_validity: Duration,
    /// Longer `oc-validity` values are shortened to this, so that no single response,
    /// genuine or not, can hold this client under control for long: a server keeps its
    /// control alive by restamping every response (RFC 7339 §5.2), so a short cap costs it
    /// nothing. Ours: 30 s.
    #[serde(rename = "max_validity_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub max_validity: Duration,
    /// An `oc-seq` whose integer part runs further ahead of the last applied one than the
    /// seconds since then plus this is ignored and counted (`seq_jump`). A server's
    /// sequence follows its clock (RFC 7339 §5.2 suggests a timestamp, and sluice's server
    /// uses one), so only a forged or broken value jumps far ahead, and one that did would
    /// make every genuine response after it look stale. Ours: 10 s.
    pub max_seq_lead_s: u64,
    /// Weight of each request in the loss algorithm's category mix estimate.
    pub loss_mix_weight: f64,
    /// RFC 7415 tolerance for category 1 requests.
    #[serde(rename = "rate_tau_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub rate_tau: Duration,
    /// RFC 7415 tolerance for category 2 (priority) requests; at least `rate_tau`.
    #[serde(rename = "rate_tau_priority_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub rate_tau_priority: Duration,
    /// The window extension's probe (see [`crate::enforcer::WindowThrottle`]); `None`
    /// disables it. Default 200 ms, Table 2's control interval `T_c`: an SE whose window
    /// ran out before the RE's next interval opened it hears of the new window one
    /// interval later. At start-up, with one SE and calls held for tens of seconds, the
    /// first `W_0` sessions are answered within milliseconds and nothing else carries
    /// feedback; a probe slower than the RE's one-second source expiry finds a new entry
    /// at `W_0` each time, and the SE sent `W_0` calls a second for 10 s live.
    #[serde(rename = "window_probe_after_ms", with = "crate::serde_millis::option")]
    #[schemars(with = "Option<u64>")]
    pub window_probe_after: Option<Duration>,
    /// How `sluicerate` is enforced (Shen et al. §2.4.2): `percentage` (the paper's
    /// pairing for rate feedback), `token-bucket`, `leaky-bucket` or `call-gapping`.
    pub rate_throttle: ThrottleKind,
    /// What a `sluicewin`/`sluicerate` throttle does with a blocked session: `discard`
    /// (answer 503), `keep` (hold it until the throttle lets it go, up to `hold_limit`) or
    /// `keep-bursts` (hold one while fewer than a tenth of the sessions offered are
    /// blocked, discard otherwise; the percentage throttle always discards). Unset: keep
    /// for the leaky bucket, keep-bursts for the window, discard otherwise. Below capacity
    /// a window of a few sessions in front of a slow RE blocks the excess of a Poisson
    /// burst: on the 78 sampled topologies offered less than 0.95x (seed 1), win-cont
    /// discarding carried 0.97–0.98 of what no control carries on three (REs of 100–180
    /// messages/s, 4–9 SEs) and at least 0.98 with keep-bursts on all 78; on the 122
    /// overloaded it held the overload claim on 118 either way (on 200 others, seed 2:
    /// no-harm 63 → 65 of 67, overload 130 → 128 of 133, ARCHITECTURE gives both windows).
    /// `keep` with one session held did as well below capacity but cost up to 0.07 of
    /// capacity under overload on REs under 250 messages/s (118 → 115): the held sessions,
    /// released with the feedback that opens the window, reach the RE bunched and its
    /// backstop rejects them.
    pub blocking: Option<BlockingMode>,
    /// Sessions held at most in keep mode (the leaky bucket's depth; keep-bursts holds
    /// one); more are rejected and counted. Ours: 50, a couple of seconds of a per-client
    /// share of the paper's load.
    pub hold_limit: usize,
    /// The token bucket's depth in sessions. Ours: 5, about one `D_B` (200 ms) of a
    /// per-client share of the paper's 72 sessions/s.
    pub bucket_depth: u32,
    /// Send `sluice-ff`, the sessions offered before throttling (double feed, Shen et al.
    /// §6.1.2). An RE splitting by it (user-centric) or lending what an SE does not want
    /// (`control.lend_unused_share`) reads it; others ignore it. The papers' SEs send it
    /// only under double feed.
    pub feed_forward: bool,
    /// Interval over which the sessions offered towards this next hop, before throttling,
    /// are counted (percentage throttling of a rate, double feed), milliseconds.
    #[serde(rename = "meter_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub meter_interval: Duration,
    /// Weight of the newest interval in the meter's exponentially weighted average.
    pub meter_smoothing_weight: f64,
    /// The fuzzy window `sluiceload` sets (Montazerolghaem & Yaghmaee 2014).
    pub fuzzy: FuzzyWindowConfig,
}

impl Default for OcClientConfig {
    fn default() -> Self {
        Self {
            algorithms: vec![OcAlgorithm::Loss, OcAlgorithm::Rate],
            default_validity: Duration::from_millis(500),
            max_validity: Duration::from_secs(30),
            max_seq_lead_s: 10,
            loss_mix_weight: 0.01,
            rate_tau: Duration::from_millis(20),
            rate_tau_priority: Duration::from_millis(100),
            window_probe_after: Some(Duration::from_millis(200)),
            rate_throttle: ThrottleKind::Percentage,
            blocking: None,
            hold_limit: 50,
            bucket_depth: 5,
            feed_forward: true,
            meter_interval: Duration::from_millis(100),
            meter_smoothing_weight: 0.2,
            fuzzy: FuzzyWindowConfig::default(),
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
    /// `sluice-wack`: the server's echo of the sessions this client had sent when it wrote
    /// the latest request the server had received ([`crate::overload::WINDOW_ACK_PARAM`]).
    pub window_ack: Option<u64>,
    /// `sluice-mem`: the server's memory occupancy in thousandths (`sluiceload`).
    pub memory: Option<u64>,
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
    /// `oc-seq` further ahead of the last applied than time allows (`max_seq_lead_s`).
    SeqJump,
    /// An algorithm this client did not offer.
    UnknownAlgorithm,
    /// `oc` or `oc-validity` outside what the algorithm allows.
    OutOfRange,
}

impl OcClientConfig {
    /// Checks what serde cannot: the `sluicerate` throttle and its blocking mode.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        match self.rate_throttle {
            ThrottleKind::None | ThrottleKind::Window => {
                Err(crate::ConfigError::NotARateThrottle(self.rate_throttle))
            }
            _ => self.throttle_spec(OcAlgorithm::SluiceRate).validate(),
        }
    }

    /// The throttle enforcing `algorithm` (one of the sluice extensions).
    fn throttle_spec(&self, algorithm: OcAlgorithm) -> ThrottleSpec {
        let kind = if algorithm == OcAlgorithm::SluiceWindow {
            ThrottleKind::Window
        } else {
            self.rate_throttle
        };
        let blocking = self.blocking.unwrap_or(match kind {
            ThrottleKind::LeakyBucket => BlockingMode::Keep,
            ThrottleKind::Window => BlockingMode::KeepBursts,
            _ => BlockingMode::Discard,
        });
        ThrottleSpec {
            kind,
            blocking,
            hold_limit: self.hold_limit,
            bucket_depth: self.bucket_depth,
            initial_window: None,
            probe_after: self.window_probe_after,
            meter_interval: self.meter_interval,
            meter_smoothing_weight: self.meter_smoothing_weight,
            feed_forward: false,
        }
    }
}

/// The client's decision about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcVerdict {
    Forward,
    /// Reduced: answer the caller instead of sending it.
    Reject,
    /// Held (keep mode): the driver keeps the request under this id until
    /// [`OcClient::poll_release`] returns it.
    Hold(RequestId),
}

/// Counters; every ignored parameter set and every reduced request is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OcClientStats {
    pub applied: u64,
    pub stopped: u64,
    pub expired: u64,
    pub stale: u64,
    pub missing_seq: u64,
    /// Sequence values too far ahead of the last applied (`max_seq_lead_s`).
    pub seq_jump: u64,
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
    /// Sessions held in keep mode, and held ones later released.
    pub held: u64,
    pub released: u64,
    /// Sessions rejected because the hold queue was full (keep mode).
    pub hold_overflow: u64,
}

// One long-lived instance per next hop: boxing the variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Control {
    Off,
    Loss(LossThrottle),
    Rate(RateBucket),
    /// A sluice extension (`sluicewin` or `sluicerate`) and the value in force.
    Sluice {
        algorithm: OcAlgorithm,
        throttle: Throttle,
        value: u64,
    },
    /// `sluiceload`: the fuzzy window.
    Fuzzy(FuzzyWindow),
}

#[derive(Clone, Debug)]
pub struct OcClient {
    config: OcClientConfig,
    control: Control,
    /// When the applied value stops holding; `None` while control is off.
    expires: Option<Time>,
    /// The last applied `oc-seq`, and when it was applied.
    last_seq: Option<OcSequence>,
    last_seq_at: Time,
    rng: ChaCha8Rng,
    meter: OfferedLoadMeter,
    /// Numbers the values handed to a [`Throttle`], and the sessions it holds.
    feedback_seq: u64,
    next_request: u64,
    /// Held sessions let go when control ended, to hand back before anything else.
    released: std::collections::VecDeque<RequestId>,
    /// New sessions sent to the server so far, from [`OcClient::with_session_count_base`]:
    /// written on every request offering windows, echoed by the server.
    sessions_sent: u64,
    /// The last count the server echoed beside a window, while windows are in force.
    window_ack: Option<u64>,
    /// Session-starting INVITEs sent and not yet answered (the fuzzy window's count).
    in_transit: u64,
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
            last_seq_at: now,
            rng,
            meter,
            feedback_seq: 0,
            next_request: 0,
            released: std::collections::VecDeque::new(),
            sessions_sent: 0,
            window_ack: None,
            in_transit: 0,
            stats: OcClientStats::default(),
        }
    }

    /// Starts the count of sessions sent at `base`. Give a base that grows across
    /// restarts faster than sessions are sent (the driver uses wall-clock seconds × 2^20),
    /// so that a server still holding the count of this client's previous run never
    /// echoes more than this run has sent.
    #[must_use]
    pub fn with_session_count_base(mut self, base: u64) -> Self {
        self.sessions_sent = base;
        self
    }

    /// New sessions sent to the server so far (from the base).
    pub fn sessions_sent(&self) -> u64 {
        self.sessions_sent
    }

    /// The driver sent a session-starting INVITE to the server.
    pub fn on_session_sent(&mut self) {
        self.in_transit += 1;
    }

    /// The first response from the server to a session-starting INVITE it was sent, or the
    /// end of its transaction without one (once per [`OcClient::on_session_sent`]).
    pub fn on_session_answered(&mut self) {
        self.in_transit = self.in_transit.saturating_sub(1);
    }

    /// Session-starting INVITEs sent and not yet answered.
    pub fn in_transit(&self) -> u64 {
        self.in_transit
    }

    /// The algorithm currently in force, if any.
    pub fn active(&self) -> Option<OcAlgorithm> {
        match self.control {
            Control::Off => None,
            Control::Loss(_) => Some(OcAlgorithm::Loss),
            Control::Rate(_) => Some(OcAlgorithm::Rate),
            Control::Sluice { algorithm, .. } => Some(algorithm),
            Control::Fuzzy(_) => Some(OcAlgorithm::SluiceLoad),
        }
    }

    /// The `oc` value in force (loss percent, rate per second, window slots left, or
    /// `sluicerate`'s thousandths of a session per second; `sluiceload`: the window).
    pub fn value(&self) -> Option<i64> {
        match &self.control {
            Control::Off => None,
            Control::Fuzzy(w) => Some(w.window().floor() as i64),
            Control::Loss(l) => Some(i64::from(l.percent())),
            Control::Rate(r) => i64::try_from(r.rate()).ok(),
            Control::Sluice {
                algorithm: OcAlgorithm::SluiceWindow,
                throttle,
                ..
            } => throttle.window_slots(),
            Control::Sluice { value, .. } => i64::try_from(*value).ok(),
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
        if self.config.algorithms.contains(&OcAlgorithm::SluiceWindow) {
            let _ = write!(via, ";{WINDOW_SENT_PARAM}={}", self.sessions_sent);
            if let Some(acked) = self.window_ack {
                let _ = write!(
                    via,
                    ";{WINDOW_IN_FLIGHT_PARAM}={}",
                    self.sessions_sent - acked
                );
            }
        }
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
            OcUpdate::SeqJump => self.stats.seq_jump += 1,
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
        if let Some(last) = self.last_seq {
            if seq <= last {
                return OcUpdate::Stale;
            }
            let lead =
                now.saturating_since(self.last_seq_at).as_secs() + self.config.max_seq_lead_s;
            if seq.integer > last.integer.saturating_add(lead) {
                return OcUpdate::SeqJump;
            }
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
            self.last_seq_at = now;
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
            OcAlgorithm::SluiceRate => oc <= u64::from(u32::MAX) * 1000,
            OcAlgorithm::SluiceLoad => {
                let full = SLUICE_LOAD_SCALE as u64;
                oc <= full && response.memory.is_some_and(|m| m <= full)
            }
        };
        if !in_range {
            return OcUpdate::OutOfRange;
        }
        self.last_seq = Some(seq);
        self.last_seq_at = now;
        self.apply(now, algorithm, oc, response);
        self.expires = Some(now + validity);
        OcUpdate::Applied
    }

    /// `oc` is in range for `algorithm` (checked by the caller).
    fn apply(&mut self, now: Time, algorithm: OcAlgorithm, oc: u64, response: &OcResponse<'_>) {
        let small = u32::try_from(oc).unwrap_or(u32::MAX);
        match (&mut self.control, algorithm) {
            (control, OcAlgorithm::SluiceLoad) => {
                if !matches!(control, Control::Fuzzy(_)) {
                    self.stop();
                    self.control = Control::Fuzzy(FuzzyWindow::new(&self.config.fuzzy));
                }
                if let Control::Fuzzy(w) = &mut self.control {
                    let memory = response.memory.unwrap_or(0) as f64 / SLUICE_LOAD_SCALE;
                    w.on_report(now, oc as f64 / SLUICE_LOAD_SCALE, memory, self.in_transit);
                }
            }
            (Control::Loss(l), OcAlgorithm::Loss) => l.set_percent(small),
            (Control::Rate(r), OcAlgorithm::Rate) => r.set_rate(oc),
            (_, OcAlgorithm::Loss) => {
                self.stop();
                let rng = ChaCha8Rng::seed_from_u64(self.rng.gen());
                self.control =
                    Control::Loss(LossThrottle::new(small, self.config.loss_mix_weight, rng));
            }
            (_, OcAlgorithm::Rate) => {
                self.stop();
                self.control = Control::Rate(RateBucket::start(
                    oc,
                    self.config.rate_tau,
                    self.config.rate_tau_priority,
                    now,
                    &mut self.rng,
                ));
            }
            (_, OcAlgorithm::SluiceWindow | OcAlgorithm::SluiceRate) => {
                self.apply_sluice(now, algorithm, oc, response.window_ack);
            }
        }
    }

    /// Hands a sluice extension's value to its throttle, starting one if another (or no)
    /// algorithm was in force.
    fn apply_sluice(
        &mut self,
        now: Time,
        algorithm: OcAlgorithm,
        oc: u64,
        window_ack: Option<u64>,
    ) {
        let same = matches!(&self.control, Control::Sluice { algorithm: a, .. } if *a == algorithm);
        if !same {
            self.stop();
            let spec = self.config.throttle_spec(algorithm);
            // Built from a validated config; an invalid one leaves control off.
            let Ok(throttle) =
                Throttle::with_meter(&spec, self.meter.clone(), self.rng.gen(), 0, now)
            else {
                return;
            };
            self.control = Control::Sluice {
                algorithm,
                throttle,
                value: oc,
            };
        }
        let feedback_value = if algorithm == OcAlgorithm::SluiceWindow {
            // The window counts the sessions the server has received; those sent after the
            // echoed count are still on the way and take their slots from it. An echo above
            // the count is not this run's (or not the server's): the window stands as sent.
            let acked = window_ack.filter(|&acked| acked <= self.sessions_sent);
            if acked.is_some() {
                self.window_ack = acked;
            }
            let in_flight = acked.map_or(0, |acked| self.sessions_sent - acked);
            let slots = oc.saturating_sub(in_flight);
            FeedbackValue::Window(u32::try_from(slots).unwrap_or(u32::MAX))
        } else {
            FeedbackValue::Rate(oc as f64 / SLUICE_RATE_SCALE)
        };
        self.feedback_seq += 1;
        let feedback = Feedback {
            sequence: self.feedback_seq,
            value: feedback_value,
        };
        if let Control::Sluice {
            throttle, value, ..
        } = &mut self.control
        {
            *value = oc;
            throttle.on_feedback(now, &feedback);
        }
    }

    /// Ends control; sessions a throttle was holding go out now.
    fn stop(&mut self) {
        if let Control::Sluice { throttle, .. } = &mut self.control {
            throttle.release_all();
            while let Some(id) = throttle.poll_release() {
                self.released.push_back(id);
            }
        }
        self.control = Control::Off;
        self.expires = None;
        self.window_ack = None;
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
            // Shen et al.'s throttles count sessions (§2.4): other requests pass, and a
            // priority INVITE takes a slot when there is one but is never refused or held.
            Control::Sluice { throttle, .. } if request.starts_session() => {
                let before = throttle.stats();
                let pass = if rank == Reduction::Priority {
                    throttle.take_if_available(now);
                    true
                } else {
                    self.next_request += 1;
                    let id = RequestId(self.next_request);
                    match throttle.admit(now, id, &MessageSummary::new_session(None)) {
                        ThrottleVerdict::Forward => true,
                        ThrottleVerdict::Reject => false,
                        ThrottleVerdict::Hold => {
                            self.stats.held += 1;
                            return OcVerdict::Hold(id);
                        }
                    }
                };
                let after = throttle.stats();
                self.stats.window_probes += after.window_probes - before.window_probes;
                self.stats.hold_overflow += after.hold_overflow - before.hold_overflow;
                pass
            }
            // A priority INVITE is never refused (as above).
            Control::Fuzzy(w) if request.starts_session() && rank != Reduction::Priority => {
                w.allows(self.in_transit)
            }
            Control::Off | Control::Sluice { .. } | Control::Fuzzy(_) => true,
        };
        if pass {
            self.stats.forwarded += 1;
            if request.starts_session() {
                self.sessions_sent += 1;
            }
            OcVerdict::Forward
        } else {
            match rank {
                Reduction::Priority => self.stats.rejected_priority += 1,
                _ => self.stats.rejected_normal += 1,
            }
            OcVerdict::Reject
        }
    }

    /// A held session the driver may now send (keep mode), oldest first.
    pub fn poll_release(&mut self) -> Option<RequestId> {
        let id = self
            .released
            .pop_front()
            .or_else(|| match &mut self.control {
                Control::Sluice { throttle, .. } => throttle.poll_release(),
                _ => None,
            })?;
        self.stats.released += 1;
        self.stats.forwarded += 1;
        // Only new sessions are held.
        self.sessions_sent += 1;
        Some(id)
    }

    /// When the value in force expires, or a held session may go ([`Time::ZERO`]: one
    /// may go now).
    pub fn poll_timeout(&self) -> Option<Time> {
        let release = match &self.control {
            _ if !self.released.is_empty() => Some(Time::ZERO),
            Control::Sluice { throttle, .. } if throttle.has_releases() => Some(Time::ZERO),
            Control::Sluice { throttle, .. } => throttle.poll_timeout(),
            _ => None,
        };
        match (self.expires, release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Ends control if its validity has run out; lets held sessions go when due.
    pub fn handle_timeout(&mut self, now: Time) {
        self.expire(now);
        if let Control::Sluice { throttle, .. } = &mut self.control {
            throttle.handle_timeout(now);
        }
    }
}
