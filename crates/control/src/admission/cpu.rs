//! CPU load measurement shared by the controllers that act on it (OCC, the PI).
//!
//! The load over a measurement window is the processor's busy fraction. By default it
//! is the service time of the messages completed in the window divided by the window's
//! length. A message is credited when it completes, so a window can collect more busy
//! time than its length (a long service that began in an earlier window); the excess
//! is carried into the next window rather than clipped, which keeps a saturated
//! processor reading 1 on average even with windows shorter than one service.
//! A driver that measures the CPU itself hands in samples instead: the first explicit
//! sample switches the meter to the mean of the samples received in each window (or the
//! latest one if a window received none), and completions are ignored from then on.

use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct CpuMeter {
    window_start: Time,
    busy: Duration,
    external: bool,
    sample_sum: f64,
    samples: u32,
    latest_sample: Option<f64>,
    last: Option<f64>,
}

impl CpuMeter {
    pub fn new(now: Time) -> Self {
        Self {
            window_start: now,
            busy: Duration::ZERO,
            external: false,
            sample_sum: 0.0,
            samples: 0,
            latest_sample: None,
            last: None,
        }
    }

    pub fn on_processed(&mut self, service_time: Duration) {
        if !self.external {
            self.busy = self.busy.saturating_add(service_time);
        }
    }

    /// Whether the driver measures the CPU itself (explicit samples) rather than through
    /// the service times of the messages it completes.
    pub fn is_external(&self) -> bool {
        self.external
    }

    pub fn on_sample(&mut self, busy_fraction: f64) {
        if busy_fraction.is_finite() {
            let b = busy_fraction.clamp(0.0, 1.0);
            self.external = true;
            self.sample_sum += b;
            self.samples += 1;
            self.latest_sample = Some(b);
        }
    }

    /// Closes the window at `now` and returns its load; `None` if nothing can be said
    /// (an empty window, or no explicit sample yet in external mode). A window that
    /// cannot be measured keeps the previous measurement as [`Self::last`].
    pub fn close(&mut self, now: Time) -> Option<f64> {
        let elapsed = now.saturating_since(self.window_start).as_secs_f64();
        let value = if self.external {
            if self.samples > 0 {
                Some(self.sample_sum / f64::from(self.samples))
            } else {
                self.latest_sample
            }
        } else if elapsed > 0.0 {
            Some((self.busy.as_secs_f64() / elapsed).clamp(0.0, 1.0))
        } else {
            None
        };
        if elapsed > 0.0 || self.external {
            let window = now.saturating_since(self.window_start);
            self.window_start = now;
            // Busy time beyond the window belongs to the next one (at most one window's
            // worth, so a bogus huge service time cannot pin the load at 1 for long).
            self.busy = if self.external {
                Duration::ZERO
            } else {
                self.busy.saturating_sub(window).min(window)
            };
            self.sample_sum = 0.0;
            self.samples = 0;
        }
        if value.is_some() {
            self.last = value;
        }
        value
    }

    /// The most recent measurement.
    pub fn last(&self) -> Option<f64> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_of_the_window_then_explicit_samples_take_over() {
        let mut m = CpuMeter::new(Time::ZERO);
        m.on_processed(Duration::from_millis(3));
        m.on_processed(Duration::from_millis(2));
        assert!((m.close(Time::from_millis(10)).unwrap() - 0.5).abs() < 1e-12);
        // A zero-length window says nothing and keeps the last value.
        assert_eq!(m.close(Time::from_millis(10)), None);
        assert!((m.last().unwrap() - 0.5).abs() < 1e-12);
        // 15 ms of service completing in a 10 ms window: 1 now, 5 ms carried over.
        m.on_processed(Duration::from_millis(15));
        assert!((m.close(Time::from_millis(20)).unwrap() - 1.0).abs() < 1e-12);
        m.on_processed(Duration::from_millis(1));
        assert!((m.close(Time::from_millis(30)).unwrap() - 0.6).abs() < 1e-12);
        m.on_processed(Duration::from_secs(1));
        assert!((m.close(Time::from_millis(40)).unwrap() - 1.0).abs() < 1e-12);
        assert!((m.close(Time::from_millis(50)).unwrap() - 1.0).abs() < 1e-12);
        assert!(m.close(Time::from_millis(60)).unwrap().abs() < 1e-12);
        m.on_sample(0.2);
        m.on_sample(f64::NAN);
        m.on_sample(0.4);
        m.on_processed(Duration::from_millis(10));
        assert!((m.close(Time::from_millis(70)).unwrap() - 0.3).abs() < 1e-12);
        assert!((m.close(Time::from_millis(80)).unwrap() - 0.4).abs() < 1e-12);
        m.on_sample(7.0);
        assert!((m.close(Time::from_millis(90)).unwrap() - 1.0).abs() < 1e-12);
    }
}
