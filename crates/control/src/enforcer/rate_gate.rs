//! Token bucket, leaky bucket and automatic call gapping, Shen, Schulzrinne & Nahum
//! 2008, §2.4.2, as one generic cell rate algorithm (GCRA) in integer nanoseconds.
//!
//! With target rate `r` (from rate feedback, or `f ×` the measured offered rate for
//! relative feedback), one send opportunity accrues every `1/r` and at most `burst`
//! can be banked. The paper's three mechanisms are settings of it:
//! - token bucket: `burst` = bucket depth; bursts pass straight through;
//! - leaky bucket: `burst = 1` in keep mode, so bursts wait in the hold queue (whose
//!   size is the bucket depth) and leave evenly spaced;
//! - automatic call gapping: `burst = 1`: after a session is sent, the next may go only
//!   once the gap `1/r` has passed ("a bucket with zero burst size").
//!
//! Over any closed interval of length `T` starting full, at most `r·T + burst`
//! sessions pass. Before the first feedback nothing is limited.

use crate::types::FeedbackValue;
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spacing {
    Unlimited,
    Closed,
    Every(Duration),
}

#[derive(Clone, Debug)]
pub struct RateGate {
    spacing: Spacing,
    burst: u32,
    /// Theoretical arrival time: when the bank would next be empty of banked time.
    tat: Time,
}

impl RateGate {
    /// `burst` is held at 1 or more.
    pub fn new(burst: u32) -> Self {
        Self {
            spacing: Spacing::Unlimited,
            burst: burst.max(1),
            tat: Time::ZERO,
        }
    }

    fn tolerance(&self, every: Duration) -> Duration {
        every.checked_mul(self.burst - 1).unwrap_or(Duration::MAX)
    }

    pub fn try_pass(&mut self, now: Time) -> bool {
        match self.spacing {
            Spacing::Unlimited => true,
            Spacing::Closed => false,
            Spacing::Every(every) => {
                if self.tat - self.tolerance(every) <= now {
                    self.tat = self.tat.max(now) + every;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// The earliest instant `try_pass` can succeed.
    pub fn next_opening(&self) -> Option<Time> {
        match self.spacing {
            Spacing::Every(every) => Some(self.tat - self.tolerance(every)),
            Spacing::Unlimited | Spacing::Closed => None,
        }
    }

    /// Sets the rate in sessions per second; zero (or less) closes the gate.
    pub fn set_rate(&mut self, rate: f64) {
        self.spacing = if rate.is_nan() || rate <= 0.0 {
            Spacing::Closed
        } else if rate.is_infinite() {
            Spacing::Unlimited
        } else {
            let nanos = (1e9 / rate).clamp(1.0, 1e18);
            Spacing::Every(Duration::from_nanos(nanos as u64))
        };
    }

    /// Applies rate feedback, or relative feedback scaled by the offered rate (ignored
    /// while the offered rate is unknown). A window cannot drive a rate.
    pub fn on_feedback(&mut self, value: FeedbackValue, offered_rate: Option<f64>) -> bool {
        match (value, offered_rate) {
            (FeedbackValue::Rate(r), _) if !r.is_nan() => self.set_rate(r),
            (FeedbackValue::AcceptFraction(f), Some(o)) if !f.is_nan() && o.is_finite() => {
                self.set_rate(f.clamp(0.0, 1.0) * o);
            }
            _ => return false,
        }
        true
    }
}
