//! Time as the sans-IO state machines see it.
//!
//! `Time` is an integer count of nanoseconds since an origin the driver chooses: the
//! simulator starts at zero, the live shell maps one `std::time::Instant` taken at
//! start-up to zero. State machines never read a clock; they are handed a `Time`.
//! Durations are `std::time::Duration`, so configuration reads naturally.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// An instant on the driver's clock, in nanoseconds since its origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The driver's origin.
    pub const ZERO: Time = Time(0);
    /// Later than any instant a run can reach; useful as "never".
    pub const MAX: Time = Time(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros.saturating_mul(1_000))
    }
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000_000))
    }
    pub const fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1_000_000_000))
    }
    /// Seconds as a float, for metrics and plots.
    pub fn from_secs_f64(secs: f64) -> Time {
        if secs <= 0.0 {
            Time::ZERO
        } else {
            Time((secs * 1e9).min(u64::MAX as f64) as u64)
        }
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// Time elapsed since `earlier`, or zero if `earlier` is in the future.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    pub fn checked_add(self, d: Duration) -> Option<Time> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|n| self.0.checked_add(n))
            .map(Time)
    }
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Time {
        self.checked_add(d).unwrap_or(Time::MAX)
    }
    #[must_use]
    pub fn saturating_sub(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    /// Saturates at `Time::MAX` rather than wrapping: a deadline past the end of time is "never".
    fn add(self, d: Duration) -> Time {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    /// Saturating: an instant minus a later one is zero.
    fn sub(self, earlier: Time) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        self.saturating_sub(d)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Time::from_millis(1500);
        assert_eq!(t + Duration::from_millis(500), Time::from_secs(2));
        assert_eq!(Time::from_secs(1) - t, Duration::ZERO);
        assert_eq!(t - Time::from_secs(1), Duration::from_millis(500));
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::ZERO - Duration::from_secs(1), Time::ZERO);
    }

    #[test]
    fn display_is_seconds() {
        assert_eq!(Time::from_millis(1500).to_string(), "1.500000s");
    }
}
