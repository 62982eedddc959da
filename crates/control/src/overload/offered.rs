//! The server's estimate of a neighbour's offered session rate before the neighbour's
//! own reduction, from the session starts that reach it.
//!
//! Arrivals are what is left after the client dropped its share: over an interval in
//! which the client passed a fraction `p(t)` of an offered rate `λ`, `λ ∫p dt` arrive.
//! So each measurement interval divides its arrival count by the time integral of the
//! pass fraction the server asked for during it (the loss it sent is what the client
//! applies), and the per-interval estimates are smoothed. Scaling by the latest loss
//! instead would feed back on itself: a loss raised just now would inflate arrivals
//! counted before it took effect, raising the loss further.

use crate::estimation::sane_interval;
use crate::smoothing::Ewma;
use sluice_time::Time;
use std::time::Duration;

/// The smallest pass fraction arrivals are scaled by, so the estimate stays finite.
const MIN_PASS: f64 = 0.01;

#[derive(Clone, Debug)]
pub(crate) struct OfferedEstimator {
    interval: Duration,
    start: Time,
    arrivals: u64,
    /// `∫ p dt` in seconds since `start`, up to `changed`.
    pass_seconds: f64,
    pass: f64,
    changed: Time,
    rate: Ewma,
}

impl OfferedEstimator {
    pub(crate) fn new(interval: Duration, smoothing_weight: f64, now: Time) -> Self {
        Self {
            interval: sane_interval(interval),
            start: now,
            arrivals: 0,
            pass_seconds: 0.0,
            pass: 1.0,
            changed: now,
            rate: Ewma::new(smoothing_weight),
        }
    }

    fn accumulate(&mut self, now: Time) {
        if now > self.changed {
            self.pass_seconds += self.pass * (now - self.changed).as_secs_f64();
            self.changed = now;
        }
    }

    /// Closes the interval once it has run; an idle stretch counts as one long interval.
    fn roll(&mut self, now: Time) {
        if now.saturating_since(self.start) < self.interval {
            return;
        }
        self.accumulate(now);
        let elapsed = (now - self.start).as_secs_f64();
        let pass = (self.pass_seconds / elapsed).max(MIN_PASS);
        #[allow(clippy::cast_precision_loss)] // Counts per interval are far below 2^52.
        self.rate.update(self.arrivals as f64 / elapsed / pass);
        self.start = now;
        self.arrivals = 0;
        self.pass_seconds = 0.0;
    }

    pub(crate) fn record(&mut self, now: Time) {
        self.roll(now);
        self.arrivals += 1;
    }

    /// The client now passes `pass` of its offered load (from the loss just sent).
    pub(crate) fn set_pass(&mut self, now: Time, pass: f64) {
        self.roll(now);
        self.accumulate(now);
        self.pass = pass.clamp(0.0, 1.0);
    }

    /// Smoothed offered rate, sessions per second; `None` before the first interval.
    pub(crate) fn rate(&mut self, now: Time) -> Option<f64> {
        self.roll(now);
        self.rate.value()
    }
}
