//! The SE's measurement of its own offered session load, before throttling.
//!
//! Percentage throttling of an absolute rate needs it (block `1 − λ'/λ`, §2.4.2) and
//! the double-feed architecture feeds it forward to the RE (§6.1.2). Session starts are
//! counted per interval and smoothed with an EWMA; intervals are closed lazily on the
//! next event, so the meter needs no timer.

use crate::estimation::sane_interval;
use crate::smoothing::Ewma;
use sluice_time::Time;
use std::time::Duration;

/// Empty intervals folded in at most per catch-up; after that many zero samples the
/// average is at zero for any useful weight anyway.
const MAX_CATCH_UP: u64 = 64;

#[derive(Clone, Debug)]
pub struct OfferedLoadMeter {
    interval: Duration,
    start: Time,
    count: u64,
    rate: Ewma,
}

impl OfferedLoadMeter {
    pub fn new(interval: Duration, smoothing_weight: f64, now: Time) -> Self {
        Self {
            interval: sane_interval(interval),
            start: now,
            count: 0,
            rate: Ewma::new(smoothing_weight),
        }
    }

    fn roll(&mut self, now: Time) {
        let elapsed = now - self.start;
        if elapsed < self.interval {
            return;
        }
        let whole =
            (elapsed.as_nanos() / self.interval.as_nanos()).min(u128::from(u64::MAX)) as u64;
        self.rate
            .update(self.count as f64 / self.interval.as_secs_f64());
        for _ in 1..whole.min(MAX_CATCH_UP) {
            self.rate.update(0.0);
        }
        self.count = 0;
        let advance = u64::try_from(self.interval.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(whole);
        self.start += Duration::from_nanos(advance);
    }

    /// One session start offered at `now`.
    pub fn record(&mut self, now: Time) {
        self.roll(now);
        self.count += 1;
    }

    /// Smoothed offered rate in sessions/s; `None` until the first interval has closed.
    pub fn rate(&mut self, now: Time) -> Option<f64> {
        self.roll(now);
        self.rate.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_steady_rate_and_decays_when_idle() {
        let mut m = OfferedLoadMeter::new(Duration::from_millis(100), 0.5, Time::ZERO);
        assert_eq!(m.rate(Time::from_millis(50)), None);
        // 40 per second: one every 25 ms for 2 s.
        for k in 0..80 {
            m.record(Time::from_millis(k * 25));
        }
        assert!((m.rate(Time::from_millis(2000)).unwrap() - 40.0).abs() < 1e-9);
        // Ten idle seconds: the estimate falls to (almost) nothing without a timer.
        assert!(m.rate(Time::from_secs(12)).unwrap() < 1e-9);
    }
}
