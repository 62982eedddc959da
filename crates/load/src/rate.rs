//! When calls start: constant spacing, Poisson arrivals (seeded) or a step schedule of rates,
//! bounded by a duration and/or a call count. Pure arithmetic over `Time`, no clock.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use sluice_time::Time;

/// How inter-arrival gaps are drawn at a given rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Spacing {
    /// Evenly spaced: 1/rate apart.
    Constant,
    /// Exponential gaps with mean 1/rate (a Poisson process), from a seeded RNG.
    Poisson,
}

/// One step of a schedule: from `at` (since the start) on, `rate` calls per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Step {
    pub at: Duration,
    pub rate: f64,
}

/// A rate over time: a list of steps sorted by start; the first applies from zero.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    pub steps: Vec<Step>,
}

impl Schedule {
    pub fn constant(rate: f64) -> Schedule {
        Schedule {
            steps: vec![Step {
                at: Duration::ZERO,
                rate,
            }],
        }
    }

    /// Parses `secs:rate,secs:rate,...` (e.g. `0:100,10:300,20:100`).
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let mut steps = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (at, rate) = part
                .split_once(':')
                .ok_or_else(|| format!("schedule step `{part}` is not SECONDS:RATE"))?;
            let at: f64 = at
                .trim()
                .parse()
                .map_err(|_| format!("schedule step `{part}`: bad seconds"))?;
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| format!("schedule step `{part}`: bad rate"))?;
            steps.push((at, rate));
        }
        Schedule::from_pairs(&steps)
    }

    /// Builds a schedule from `(seconds, calls per second)` pairs, checking them.
    pub fn from_pairs(pairs: &[(f64, f64)]) -> Result<Schedule, String> {
        if pairs.is_empty() {
            return Err("schedule has no steps".into());
        }
        let mut steps = Vec::with_capacity(pairs.len());
        for &(at, rate) in pairs {
            if !(0.0..1e9).contains(&at) {
                return Err(format!(
                    "schedule time {at} is not a number of seconds >= 0"
                ));
            }
            if !(rate.is_finite() && (0.0..=10_000_000.0).contains(&rate)) {
                return Err(format!(
                    "schedule rate {rate} is not within 0..=1e7 calls/s"
                ));
            }
            steps.push(Step {
                at: Duration::from_secs_f64(at),
                rate,
            });
        }
        if steps.windows(2).any(|w| w[0].at >= w[1].at) {
            return Err("schedule times must increase".into());
        }
        if steps[0].at != Duration::ZERO {
            steps.insert(
                0,
                Step {
                    at: Duration::ZERO,
                    rate: 0.0,
                },
            );
        }
        Ok(Schedule { steps })
    }

    /// The step in force at `since_start`, and when the next one begins.
    fn step_at(&self, since_start: Duration) -> (f64, Option<Duration>) {
        let i = self
            .steps
            .partition_point(|s| s.at <= since_start)
            .saturating_sub(1);
        (self.steps[i].rate, self.steps.get(i + 1).map(|s| s.at))
    }
}

/// Produces call start times in order.
#[derive(Debug)]
pub struct Arrivals {
    schedule: Schedule,
    spacing: Spacing,
    rng: ChaCha8Rng,
    start: Time,
    end: Option<Time>,
    remaining: Option<u64>,
    next: Option<Time>,
    /// Constant spacing: the start of the current step and the calls placed in it, so that
    /// call k is at origin + k/rate without accumulated rounding.
    step_origin: Time,
    step_calls: u64,
}

impl Arrivals {
    /// Arrivals from `start` on, until `duration` has passed and/or `max_calls` were produced
    /// (at least one bound should be given; without both it runs while the schedule has a rate).
    pub fn new(
        schedule: Schedule,
        spacing: Spacing,
        seed: u64,
        start: Time,
        duration: Option<Duration>,
        max_calls: Option<u64>,
    ) -> Arrivals {
        let mut a = Arrivals {
            schedule,
            spacing,
            rng: ChaCha8Rng::seed_from_u64(seed),
            start,
            end: duration.map(|d| start + d),
            remaining: max_calls,
            next: None,
            step_origin: start,
            step_calls: 0,
        };
        a.next = a.after(start, true);
        a
    }

    /// When the next call is due, if any.
    pub fn peek(&self) -> Option<Time> {
        self.next
    }

    /// Takes the next call if it is due at or before `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<Time> {
        let due = self.next.filter(|&t| t <= now)?;
        if let Some(r) = self.remaining.as_mut() {
            *r -= 1;
        }
        self.next = self.after(due, false);
        Some(due)
    }

    /// The first arrival after `from`. Gaps are drawn at the rate in force at `from`; a gap
    /// that crosses into a new step is redrawn from the step boundary (memoryless for Poisson;
    /// a constant rate restarts its spacing there, with the step's first call at the boundary).
    fn after(&mut self, mut from: Time, first: bool) -> Option<Time> {
        if self.remaining == Some(0) {
            return None;
        }
        if first {
            self.step_origin = from;
            self.step_calls = 0;
        }
        loop {
            if self.end.is_some_and(|end| from >= end) {
                return None;
            }
            let since = from.saturating_since(self.start);
            let (rate, next_step) = self.schedule.step_at(since);
            let boundary = next_step.map(|d| self.start + d);
            if rate <= 0.0 {
                from = boundary?;
                self.step_origin = from;
                self.step_calls = 0;
                continue;
            }
            let t = match self.spacing {
                Spacing::Constant => self.step_origin + secs(self.step_calls as f64 / rate),
                Spacing::Poisson => {
                    let exp = Exp::new(rate).expect("rate checked > 0");
                    from + secs(exp.sample(&mut self.rng))
                }
            };
            match boundary {
                Some(b) if t >= b => {
                    from = b;
                    self.step_origin = b;
                    self.step_calls = 0;
                }
                _ => {
                    self.step_calls += 1;
                    return match self.end {
                        Some(end) if t >= end => None,
                        _ => Some(t),
                    };
                }
            }
        }
    }
}

/// Seconds as a `Duration`; a gap too long to represent (a vanishing rate) is "never"
/// (`Time` + `Duration::MAX` saturates at `Time::MAX`, which no driver reaches).
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(mut a: Arrivals) -> Vec<Time> {
        let mut v = Vec::new();
        while let Some(t) = a.pop_due(Time::MAX) {
            v.push(t);
        }
        v
    }

    #[test]
    fn constant_rate_is_evenly_spaced_and_bounded_by_duration() {
        let a = Arrivals::new(
            Schedule::constant(100.0),
            Spacing::Constant,
            1,
            Time::from_secs(1),
            Some(Duration::from_secs(2)),
            None,
        );
        let v = all(a);
        assert_eq!(v.len(), 200);
        assert_eq!(v[0], Time::from_secs(1));
        assert_eq!(v[1], Time::from_millis(1010));
        assert!(*v.last().unwrap() < Time::from_secs(3));
    }

    #[test]
    fn call_bound_stops_arrivals() {
        let a = Arrivals::new(
            Schedule::constant(1000.0),
            Spacing::Poisson,
            7,
            Time::ZERO,
            None,
            Some(55),
        );
        assert_eq!(all(a).len(), 55);
    }

    #[test]
    fn poisson_is_seeded_and_has_the_right_mean() {
        let make = |seed| {
            all(Arrivals::new(
                Schedule::constant(1000.0),
                Spacing::Poisson,
                seed,
                Time::ZERO,
                Some(Duration::from_secs(20)),
                None,
            ))
        };
        let a = make(3);
        assert_eq!(a, make(3));
        assert_ne!(a, make(4));
        // 20,000 expected; a Poisson count's sd is ~141.
        assert!((19_400..20_600).contains(&a.len()), "{}", a.len());
    }

    #[test]
    fn schedule_steps_change_the_rate() {
        let s = Schedule::parse("0:100, 1:300,2:0").unwrap();
        let v = all(Arrivals::new(
            s,
            Spacing::Constant,
            0,
            Time::ZERO,
            Some(Duration::from_secs(5)),
            None,
        ));
        let in_first = v.iter().filter(|t| **t < Time::from_secs(1)).count();
        assert_eq!(in_first, 100);
        assert_eq!(v.len() - in_first, 300);
        assert!(*v.last().unwrap() < Time::from_secs(2));
    }

    #[test]
    fn a_vanishing_rate_never_panics() {
        for spacing in [Spacing::Constant, Spacing::Poisson] {
            let mut a = Arrivals::new(
                Schedule::constant(1e-300),
                spacing,
                1,
                Time::ZERO,
                None,
                Some(3),
            );
            // The first constant-spaced call is at the start; after it, nothing is ever due.
            while a.pop_due(Time::from_secs(1_000_000)).is_some() {}
            assert!(a.peek().is_none_or(|t| t > Time::from_secs(1_000_000)));
        }
    }

    #[test]
    fn bad_schedules_are_errors() {
        assert!(Schedule::parse("").is_err());
        assert!(Schedule::parse("0:100,0:200").is_err());
        assert!(Schedule::parse("5").is_err());
        assert!(Schedule::parse("0:-1").is_err());
        assert!(Schedule::parse("0:nan").is_err());
        // A schedule starting later is silent before its first step.
        assert!(Schedule::parse("2:10").unwrap().steps[0].rate == 0.0);
    }
}
