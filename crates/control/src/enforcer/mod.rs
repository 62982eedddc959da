//! Feedback enforcement at the sending entity (SE), Shen, Schulzrinne & Nahum 2008, §2.4.2.
//!
//! One [`Throttle`] per next-hop RE (the driver keeps them per configured neighbour).
//! It combines one regulation mechanism — [`PercentageThrottle`], [`WindowThrottle`],
//! or a [`RateGate`] configured as token bucket, leaky bucket or call gapping — with a
//! blocking mode:
//! - discard: a blocked session is rejected upstream at once;
//! - keep: it waits in a bounded FIFO hold queue and is released, in order, when the
//!   mechanism allows (a time reported by `poll_timeout`, or new feedback). A full hold
//!   queue rejects and counts the overflow;
//! - keep-bursts: one blocked session waits as in keep mode while the throttle blocks
//!   less than [`BURST_BLOCKED_SHARE`] of what it is offered, and is rejected otherwise
//!   (always, behind the percentage throttle, whose coin toss gives no release time).
//!
//! Only session-starting INVITEs are regulated; every other message belongs to a
//! session already admitted and is always forwarded. The throttle also meters its
//! offered session rate, which the double-feed architecture (§6.1.2) feeds forward.

mod meter;
mod percentage;
mod rate_gate;
mod window;

pub use meter::OfferedLoadMeter;
pub use percentage::PercentageThrottle;
pub use rate_gate::RateGate;
pub use window::WindowThrottle;

use crate::smoothing::Ewma;
use crate::types::{FeedForward, Feedback, MessageSummary, RequestId, ThrottleVerdict};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// The SE side of a feedback loop. See the crate docs for the order a driver calls these in.
pub trait FeedbackEnforcer {
    /// Feedback from the RE arrived on a message. Drain `poll_release` afterwards.
    fn on_feedback(&mut self, now: Time, feedback: &Feedback);
    /// A request bound for the RE. Only session starts can be blocked.
    fn admit(&mut self, now: Time, request: RequestId, message: &MessageSummary)
        -> ThrottleVerdict;
    /// A held request that may now be sent (keep mode), oldest first.
    fn poll_release(&mut self) -> Option<RequestId>;
    /// Feed-forward to piggyback on the next message to the RE, if enabled and measured.
    fn feed_forward(&mut self, now: Time) -> Option<FeedForward>;
    /// Releases what is due at `now`. Drain `poll_release` afterwards.
    fn handle_timeout(&mut self, now: Time);
    /// When held requests may next be released.
    fn poll_timeout(&self) -> Option<Time>;
    fn stats(&self) -> EnforcerStats;
}

/// The regulation mechanism at the SE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ThrottleKind {
    /// No regulation (the baselines).
    None,
    Percentage,
    Window,
    TokenBucket,
    LeakyBucket,
    CallGapping,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BlockingMode {
    #[default]
    Discard,
    Keep,
    /// Keep one session while blocking is rare (a burst), discard under overload. Below
    /// capacity a window of a few sessions in front of a slow RE blocks a Poisson burst's
    /// excess, and the one call held rides the next slot instead of a 503; under overload
    /// holding buys nothing and its release, bunched with the feedback that opens the
    /// window, brings the RE bursts its backstop rejects (the `sluicewin` default, see
    /// `OcClientConfig::blocking`).
    KeepBursts,
}

/// Below this share of session starts blocked (smoothed over about the last
/// `1 / BLOCKED_SHARE_WEIGHT` of them), keep-bursts holds a blocked one.
pub const BURST_BLOCKED_SHARE: f64 = 0.1;
/// Weight of each session start in the blocked share keep-bursts watches.
const BLOCKED_SHARE_WEIGHT: f64 = 1.0 / 32.0;

/// Errors in an enforcement or control configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0:?} throttling cannot run in keep mode: a coin toss gives no release time")]
    KeepNotSupported(ThrottleKind),
    #[error("a leaky bucket is keep mode by definition; use call gapping to discard")]
    LeakyBucketNeedsKeep,
    #[error(
        "{0:?} cannot enforce a rate: use percentage, token-bucket, leaky-bucket or call-gapping"
    )]
    NotARateThrottle(ThrottleKind),
}

/// A fully resolved throttle configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ThrottleSpec {
    pub kind: ThrottleKind,
    pub blocking: BlockingMode,
    /// Hold queue bound in keep mode (the leaky bucket's depth).
    pub hold_limit: usize,
    /// Token bucket depth in sessions.
    pub bucket_depth: u32,
    /// Window before the first feedback; `None` leaves the window open until then.
    pub initial_window: Option<u32>,
    /// Window probe (see [`WindowThrottle`]); `None` disables it.
    pub probe_after: Option<Duration>,
    pub meter_interval: Duration,
    pub meter_smoothing_weight: f64,
    /// Report offered load to the RE (double feed).
    pub feed_forward: bool,
}

impl ThrottleSpec {
    pub fn validate(&self) -> Result<(), ConfigError> {
        match (self.kind, self.blocking) {
            (ThrottleKind::Percentage, BlockingMode::Keep) => {
                Err(ConfigError::KeepNotSupported(self.kind))
            }
            (ThrottleKind::LeakyBucket, BlockingMode::Discard | BlockingMode::KeepBursts) => {
                Err(ConfigError::LeakyBucketNeedsKeep)
            }
            _ => Ok(()),
        }
    }
}

/// Counters a throttle keeps; every refusal is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnforcerStats {
    /// Session starts offered.
    pub offered: u64,
    /// Session starts sent to the RE (directly or after holding).
    pub forwarded: u64,
    /// Session starts rejected upstream (including hold overflow).
    pub rejected: u64,
    /// Session starts put in the hold queue.
    pub held: u64,
    /// Held session starts later released.
    pub released: u64,
    /// Rejections because the hold queue was full.
    pub hold_overflow: u64,
    /// Requests currently held.
    pub holding: usize,
    /// Sessions let through by the window probe.
    pub window_probes: u64,
    pub feedback_applied: u64,
    /// Feedback older than feedback already applied.
    pub feedback_stale: u64,
    /// Feedback of a kind this mechanism cannot use.
    pub feedback_ignored: u64,
}

// One long-lived instance per next hop: boxing the RNG would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Mechanism {
    Unthrottled,
    Percentage(PercentageThrottle),
    Window(WindowThrottle),
    Rate(RateGate),
}

/// A backwards jump in feedback sequence larger than this is taken as an RE restart
/// (its numbering begins again) rather than as a reordered old message.
const REORDER_WINDOW: u64 = 1 << 16;

/// The SE enforcer: one mechanism, one blocking mode, a bounded hold queue, a meter.
#[derive(Clone, Debug)]
pub struct Throttle {
    mechanism: Mechanism,
    blocking: BlockingMode,
    hold: VecDeque<RequestId>,
    hold_limit: usize,
    released: VecDeque<RequestId>,
    meter: OfferedLoadMeter,
    /// Share of session starts not let through at once (keep-bursts).
    blocked_share: Ewma,
    feed_forward: bool,
    last_sequence: Option<u64>,
    stats: EnforcerStats,
}

impl Throttle {
    /// `seed` and `stream` select the throttle's random stream (percentage only); give
    /// each SE its own `stream` so they do not toss the same coins.
    pub fn new(
        spec: &ThrottleSpec,
        seed: u64,
        stream: u64,
        now: Time,
    ) -> Result<Self, ConfigError> {
        let meter = OfferedLoadMeter::new(spec.meter_interval, spec.meter_smoothing_weight, now);
        Self::with_meter(spec, meter, seed, stream, now)
    }

    /// As [`Throttle::new`], measuring the offered load with `meter` (e.g. a copy of one
    /// that has been measuring already, so a percentage throttle knows the offered rate
    /// from the start).
    pub fn with_meter(
        spec: &ThrottleSpec,
        meter: OfferedLoadMeter,
        seed: u64,
        stream: u64,
        now: Time,
    ) -> Result<Self, ConfigError> {
        spec.validate()?;
        let mechanism = match spec.kind {
            ThrottleKind::None => Mechanism::Unthrottled,
            ThrottleKind::Percentage => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(stream);
                Mechanism::Percentage(PercentageThrottle::new(rng))
            }
            ThrottleKind::Window => Mechanism::Window(WindowThrottle::new(
                spec.initial_window,
                spec.probe_after,
                now,
            )),
            ThrottleKind::TokenBucket => Mechanism::Rate(RateGate::new(spec.bucket_depth)),
            ThrottleKind::LeakyBucket | ThrottleKind::CallGapping => {
                Mechanism::Rate(RateGate::new(1))
            }
        };
        Ok(Self {
            mechanism,
            blocking: spec.blocking,
            hold: VecDeque::new(),
            hold_limit: spec.hold_limit,
            released: VecDeque::new(),
            meter,
            blocked_share: Ewma::new(BLOCKED_SHARE_WEIGHT),
            feed_forward: spec.feed_forward,
            last_sequence: None,
            stats: EnforcerStats::default(),
        })
    }

    fn try_pass(&mut self, now: Time) -> bool {
        match &mut self.mechanism {
            Mechanism::Unthrottled => true,
            Mechanism::Percentage(p) => {
                let offered = self.meter.rate(now);
                p.try_pass(offered)
            }
            Mechanism::Window(w) => {
                let probes = w.probes();
                let pass = w.try_pass(now);
                self.stats.window_probes += w.probes() - probes;
                pass
            }
            Mechanism::Rate(g) => g.try_pass(now),
        }
    }

    /// Moves held requests that may go now to the release list, oldest first.
    fn pump(&mut self, now: Time) {
        while !self.hold.is_empty() && self.try_pass(now) {
            if let Some(id) = self.hold.pop_front() {
                self.released.push_back(id);
                self.stats.released += 1;
                self.stats.forwarded += 1;
            }
        }
    }

    fn is_stale(&self, sequence: u64) -> bool {
        self.last_sequence
            .is_some_and(|last| sequence < last && last - sequence <= REORDER_WINDOW)
    }

    /// Lets a session through if the mechanism has room now and nothing is held, without
    /// holding or rejecting it otherwise (for requests that must go anyway, such as
    /// priority ones, but should use a slot when there is one).
    pub fn take_if_available(&mut self, now: Time) -> bool {
        self.meter.record(now);
        let pass = self.hold.is_empty() && self.try_pass(now);
        if pass {
            self.stats.offered += 1;
            self.stats.forwarded += 1;
        }
        pass
    }

    /// Whether held requests wait in the release list (`poll_release`).
    pub fn has_releases(&self) -> bool {
        !self.released.is_empty()
    }

    /// Releases everything held (control is ending); returns how many.
    pub fn release_all(&mut self) -> u64 {
        let n = self.hold.len() as u64;
        self.stats.released += n;
        self.stats.forwarded += n;
        self.released.extend(self.hold.drain(..));
        n
    }

    /// Slots left in a window throttle (`None` for other mechanisms or an open window).
    pub fn window_slots(&self) -> Option<i64> {
        match &self.mechanism {
            Mechanism::Window(w) => w.slots(),
            _ => None,
        }
    }
}

impl FeedbackEnforcer for Throttle {
    fn on_feedback(&mut self, now: Time, feedback: &Feedback) {
        if self.is_stale(feedback.sequence) {
            self.stats.feedback_stale += 1;
            return;
        }
        let applied = match &mut self.mechanism {
            Mechanism::Unthrottled => false,
            Mechanism::Percentage(p) => p.on_feedback(now, feedback.value),
            Mechanism::Window(w) => w.on_feedback(now, feedback.value),
            Mechanism::Rate(g) => {
                let offered = self.meter.rate(now);
                g.on_feedback(feedback.value, offered)
            }
        };
        if applied {
            self.last_sequence = Some(feedback.sequence);
            self.stats.feedback_applied += 1;
            self.pump(now);
        } else {
            self.stats.feedback_ignored += 1;
        }
    }

    fn admit(
        &mut self,
        now: Time,
        request: RequestId,
        message: &MessageSummary,
    ) -> ThrottleVerdict {
        if !message.is_session_start() {
            return ThrottleVerdict::Forward;
        }
        self.stats.offered += 1;
        self.meter.record(now);
        // Keep mode is FIFO: nothing overtakes a held request.
        let passed = self.hold.is_empty() && self.try_pass(now);
        let blocked_share = if self.blocking == BlockingMode::KeepBursts {
            self.blocked_share.update(if passed { 0.0 } else { 1.0 })
        } else {
            None
        };
        if passed {
            self.stats.forwarded += 1;
            return ThrottleVerdict::Forward;
        }
        // A coin toss gives no release time to wait for.
        let can_wait = !matches!(self.mechanism, Mechanism::Percentage(_));
        let hold_limit = match self.blocking {
            BlockingMode::Keep => self.hold_limit,
            BlockingMode::KeepBursts
                if can_wait && blocked_share.is_some_and(|b| b < BURST_BLOCKED_SHARE) =>
            {
                1
            }
            BlockingMode::Discard | BlockingMode::KeepBursts => 0,
        };
        if self.hold.len() < hold_limit {
            self.hold.push_back(request);
            self.stats.held += 1;
            return ThrottleVerdict::Hold;
        }
        if hold_limit > 0 {
            self.stats.hold_overflow += 1;
        }
        self.stats.rejected += 1;
        ThrottleVerdict::Reject
    }

    fn poll_release(&mut self) -> Option<RequestId> {
        self.released.pop_front()
    }

    fn feed_forward(&mut self, now: Time) -> Option<FeedForward> {
        if !self.feed_forward {
            return None;
        }
        self.meter
            .rate(now)
            .map(|offered_rate| FeedForward { offered_rate })
    }

    fn handle_timeout(&mut self, now: Time) {
        self.pump(now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.hold.is_empty() {
            return None;
        }
        match &self.mechanism {
            Mechanism::Window(w) => w.next_opening(),
            Mechanism::Rate(g) => g.next_opening(),
            Mechanism::Unthrottled | Mechanism::Percentage(_) => None,
        }
    }

    fn stats(&self) -> EnforcerStats {
        EnforcerStats {
            holding: self.hold.len(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests;
