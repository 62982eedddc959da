//! One direction of an impaired link, sans IO: each datagram handed to
//! [`Impairment::on_packet`] is lost or given the instant it is to be delivered.
//!
//! * Delay: `delay_ms` plus a uniform draw in `[-jitter_ms, +jitter_ms]`, clamped at 0.
//! * Order: jitter alone never reorders. A datagram is delivered no earlier than the one
//!   before it (the time drawn, or the previous delivery time if that is later), so a link
//!   stays FIFO unless asked to reorder. When datagrams come closer together than the
//!   jitter's spread, that guard raises most delays towards `delay_ms + jitter_ms`.
//! * Reordering (netem's definition): with probability `reorder` a datagram skips the delay
//!   and the ordering guard and is delivered at once, ahead of any still in flight; the
//!   others wait as above. With no delay and no jitter nothing is in flight to overtake.
//! * Loss: Bernoulli per datagram with probability `loss`.
//! * Budget: a datagram is in flight from its arrival to its delivery time; one that would
//!   take the bytes in flight over `max_in_flight_bytes` is dropped and counted, so a relay
//!   holding the datagrams is bounded in memory whatever the delay and the rate.
//!
//! Every datagram draws the same three numbers from a ChaCha8 stream seeded by `seed`
//! (loss, reorder, jitter, in that order) whether or not a setting uses them, so which
//! datagrams are lost depends only on the seed and the loss probability.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;

/// What a datagram held in flight costs besides its payload (its queue entry and
/// allocation), so that empty datagrams count against the budget too.
pub const PER_DATAGRAM_OVERHEAD: usize = 64;

/// Largest delay or jitter accepted, milliseconds (the simulator's bound on link delays).
pub const MAX_DELAY_MS: f64 = 1e6;

/// Settings of one direction of a link. The default impairs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpairConfig {
    /// One-way delay, milliseconds.
    pub delay_ms: f64,
    /// Half-width of the uniform jitter added to the delay, milliseconds.
    pub jitter_ms: f64,
    /// Probability that a datagram is lost, in `[0, 1]`.
    pub loss: f64,
    /// Probability that a datagram is delivered at once, ahead of those in flight, in `[0, 1]`.
    pub reorder: f64,
    /// Bytes in flight (payload plus [`PER_DATAGRAM_OVERHEAD`] each) beyond which datagrams
    /// are dropped.
    pub max_in_flight_bytes: usize,
    /// Seed of the loss, reorder and jitter draws.
    pub seed: u64,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        ImpairConfig {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            loss: 0.0,
            reorder: 0.0,
            max_in_flight_bytes: 4 << 20,
            seed: 1,
        }
    }
}

impl ImpairConfig {
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [("delay_ms", self.delay_ms), ("jitter_ms", self.jitter_ms)] {
            if !(v.is_finite() && (0.0..=MAX_DELAY_MS).contains(&v)) {
                return Err(format!(
                    "{name} must be a number of milliseconds in [0, {MAX_DELAY_MS}], got {v}"
                ));
            }
        }
        for (name, v) in [("loss", self.loss), ("reorder", self.reorder)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be a probability in [0, 1], got {v}"));
            }
        }
        if self.max_in_flight_bytes == 0 {
            return Err("max_in_flight_bytes must be at least 1".into());
        }
        Ok(())
    }

    /// Whether datagrams pass untouched: no delay, no jitter, no loss (reordering needs
    /// something in flight to overtake).
    pub fn is_transparent(&self) -> bool {
        self.delay_ms == 0.0 && self.jitter_ms == 0.0 && self.loss == 0.0
    }
}

/// Why a datagram was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The loss draw.
    Loss,
    /// It would have taken the bytes in flight over the budget.
    Budget,
}

/// What becomes of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it at `at` (`now` or later). `reordered`: it goes ahead of a datagram that
    /// arrived before it and is still in flight.
    Deliver {
        at: Time,
        reordered: bool,
    },
    Drop(DropReason),
}

/// What an [`Impairment`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImpairStats {
    /// Datagrams given a delivery time.
    pub forwarded: u64,
    pub dropped_loss: u64,
    pub dropped_budget: u64,
    /// Of `forwarded`, those delivered ahead of an earlier datagram.
    pub reordered: u64,
}

impl ImpairStats {
    pub fn accumulate(&mut self, other: &ImpairStats) {
        self.forwarded += other.forwarded;
        self.dropped_loss += other.dropped_loss;
        self.dropped_budget += other.dropped_budget;
        self.reordered += other.reordered;
    }

    /// Datagrams handed in.
    pub fn offered(&self) -> u64 {
        self.forwarded + self.dropped_loss + self.dropped_budget
    }
}

/// One direction of an impaired link (see the module docs).
#[derive(Debug)]
pub struct Impairment {
    delay_ns: f64,
    jitter_ns: f64,
    loss: f64,
    reorder: f64,
    budget: usize,
    rng: ChaCha8Rng,
    /// The latest delivery time given to a datagram that kept its order.
    last_ordered: Time,
    /// (delivery time, bytes charged) of the datagrams in flight.
    in_flight: BinaryHeap<Reverse<(Time, usize)>>,
    in_flight_bytes: usize,
    stats: ImpairStats,
}

impl Impairment {
    pub fn new(config: &ImpairConfig) -> Result<Impairment, String> {
        config.validate()?;
        Ok(Impairment {
            delay_ns: config.delay_ms * 1e6,
            jitter_ns: config.jitter_ms * 1e6,
            loss: config.loss,
            reorder: config.reorder,
            budget: config.max_in_flight_bytes,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            last_ordered: Time::ZERO,
            in_flight: BinaryHeap::new(),
            in_flight_bytes: 0,
            stats: ImpairStats::default(),
        })
    }

    /// A datagram of `len` bytes arrived at `now` (never earlier than the previous call's).
    pub fn on_packet(&mut self, now: Time, len: usize) -> Verdict {
        while let Some(&Reverse((at, bytes))) = self.in_flight.peek() {
            if at > now {
                break;
            }
            self.in_flight.pop();
            self.in_flight_bytes -= bytes;
        }
        let lost = self.rng.gen::<f64>() < self.loss;
        let skips = self.rng.gen::<f64>() < self.reorder;
        let spread = 2.0 * self.rng.gen::<f64>() - 1.0;
        if lost {
            self.stats.dropped_loss += 1;
            return Verdict::Drop(DropReason::Loss);
        }
        let at = if skips {
            now
        } else {
            let offset = (self.delay_ns + self.jitter_ns * spread).max(0.0).round();
            (now + Duration::from_nanos(offset as u64)).max(self.last_ordered)
        };
        if at > now {
            let charge = len.saturating_add(PER_DATAGRAM_OVERHEAD);
            if self.in_flight_bytes.saturating_add(charge) > self.budget {
                self.stats.dropped_budget += 1;
                return Verdict::Drop(DropReason::Budget);
            }
            self.in_flight_bytes += charge;
            self.in_flight.push(Reverse((at, charge)));
        }
        let reordered = skips && at < self.last_ordered;
        if !skips {
            self.last_ordered = at;
        }
        self.stats.forwarded += 1;
        self.stats.reordered += u64::from(reordered);
        Verdict::Deliver { at, reordered }
    }

    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// Bytes charged for the datagrams whose delivery time was after the last `now` seen.
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight_bytes
    }
}

/// A seed for stream `stream` of `seed` (SplitMix64's finaliser over both): the relay's
/// directions and clients, and a bench's hops, get unrelated streams from one seed.
pub fn stream_seed(seed: u64, stream: u64) -> u64 {
    let mix = |mut x: u64| {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    mix(seed ^ mix(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Time {
        Time::from_millis(v)
    }

    fn impairment(config: ImpairConfig) -> Impairment {
        Impairment::new(&config).unwrap()
    }

    fn at(v: Verdict) -> Time {
        match v {
            Verdict::Deliver { at, .. } => at,
            Verdict::Drop(r) => panic!("dropped: {r:?}"),
        }
    }

    #[test]
    fn without_jitter_every_datagram_waits_exactly_the_delay() {
        let mut link = impairment(ImpairConfig {
            delay_ms: 10.0,
            ..ImpairConfig::default()
        });
        let arrivals = [0, 1, 1, 5, 40, 41];
        let delivered: Vec<Time> = arrivals
            .iter()
            .map(|&t| at(link.on_packet(ms(t), 500)))
            .collect();
        let expected: Vec<Time> = arrivals.iter().map(|&t| ms(t + 10)).collect();
        assert_eq!(delivered, expected);
        let fractional = impairment(ImpairConfig {
            delay_ms: 0.25,
            ..ImpairConfig::default()
        })
        .on_packet(ms(3), 1);
        assert_eq!(at(fractional), ms(3) + Duration::from_micros(250));
        assert_eq!(
            link.stats(),
            ImpairStats {
                forwarded: 6,
                ..ImpairStats::default()
            }
        );
    }

    #[test]
    fn no_impairment_delivers_at_once_and_holds_nothing() {
        let mut link = impairment(ImpairConfig::default());
        assert!(ImpairConfig::default().is_transparent());
        for t in 0..100 {
            assert_eq!(
                link.on_packet(ms(t), 70_000),
                Verdict::Deliver {
                    at: ms(t),
                    reordered: false
                }
            );
        }
        assert_eq!(link.in_flight_bytes(), 0);
    }

    #[test]
    fn loss_rate_over_100k_datagrams_is_within_five_standard_deviations() {
        for p in [0.005, 0.2] {
            let mut link = impairment(ImpairConfig {
                loss: p,
                delay_ms: 1.0,
                seed: 7,
                ..ImpairConfig::default()
            });
            let n = 100_000u64;
            for i in 0..n {
                let _ = link.on_packet(Time::from_micros(i * 100), 300);
            }
            let s = link.stats();
            assert_eq!(s.offered(), n);
            let expected = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            let lost = s.dropped_loss as f64;
            assert!(
                (lost - expected).abs() < 5.0 * sd,
                "p {p}: {lost} lost, expected {expected} ± {sd}"
            );
            assert_eq!(s.dropped_budget, 0);
        }
        let mut all = impairment(ImpairConfig {
            loss: 1.0,
            ..ImpairConfig::default()
        });
        assert!((0..1000).all(|t| all.on_packet(ms(t), 1) == Verdict::Drop(DropReason::Loss)));
    }

    fn verdicts(config: &ImpairConfig) -> Vec<Verdict> {
        let mut link = Impairment::new(config).unwrap();
        (0..5_000u64)
            .map(|i| link.on_packet(Time::from_micros(i * 250), 400))
            .collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_verdicts() {
        let config = ImpairConfig {
            delay_ms: 10.0,
            jitter_ms: 4.0,
            loss: 0.05,
            reorder: 0.1,
            seed: 42,
            ..ImpairConfig::default()
        };
        assert_eq!(verdicts(&config), verdicts(&config));
        let other = ImpairConfig { seed: 43, ..config };
        assert_ne!(verdicts(&config), verdicts(&other));
        // The loss draws do not depend on the other settings.
        let lost = |c: &ImpairConfig| -> Vec<bool> {
            verdicts(c)
                .iter()
                .map(|v| matches!(v, Verdict::Drop(_)))
                .collect()
        };
        let plain = ImpairConfig {
            jitter_ms: 0.0,
            reorder: 0.0,
            ..config
        };
        assert_eq!(lost(&config), lost(&plain));
    }

    #[test]
    fn jitter_without_reorder_keeps_the_order() {
        let config = ImpairConfig {
            delay_ms: 10.0,
            jitter_ms: 8.0,
            seed: 3,
            ..ImpairConfig::default()
        };
        // Dense: a datagram every 0.1 ms, far closer than the jitter's spread.
        let mut link = impairment(config);
        let mut last = Time::ZERO;
        for i in 0..10_000u64 {
            let Verdict::Deliver { at, reordered } =
                link.on_packet(Time::from_micros(i * 100), 200)
            else {
                panic!("nothing is lost");
            };
            assert!(!reordered);
            assert!(at >= last, "datagram {i} delivered before its predecessor");
            last = at;
        }
        assert_eq!(link.stats().reordered, 0);
        // Sparse (20 ms apart, more than the spread): the draws alone, over [2, 18] ms.
        let mut link = impairment(config);
        let delays: Vec<f64> = (0..2_000u64)
            .map(|i| {
                let now = ms(i * 20);
                (at(link.on_packet(now, 200)) - now).as_secs_f64() * 1e3
            })
            .collect();
        let min = delays.iter().copied().fold(f64::INFINITY, f64::min);
        let max = delays.iter().copied().fold(0.0, f64::max);
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((2.0 - 1e-6..2.1).contains(&min), "min {min}");
        assert!((17.9..=18.0 + 1e-6).contains(&max), "max {max}");
        assert!((mean - 10.0).abs() < 0.5, "mean {mean}");
        // Large jitter clamps at zero delay rather than going back in time.
        let mut wide = impairment(ImpairConfig {
            delay_ms: 1.0,
            jitter_ms: 50.0,
            ..ImpairConfig::default()
        });
        for t in 0..1000 {
            assert!(at(wide.on_packet(ms(t * 100), 1)) >= ms(t * 100));
        }
    }

    #[test]
    fn reordered_datagrams_go_at_once_ahead_of_those_in_flight() {
        let p = 0.25;
        let mut link = impairment(ImpairConfig {
            delay_ms: 10.0,
            reorder: p,
            seed: 9,
            ..ImpairConfig::default()
        });
        let n = 20_000u64;
        let (mut at_once, mut overtook) = (0u64, 0u64);
        let mut last_delayed = Time::ZERO;
        for i in 0..n {
            let now = ms(i);
            match link.on_packet(now, 100) {
                Verdict::Deliver { at, reordered } if at == now => {
                    // Reordered when a delayed datagram is still in flight.
                    assert_eq!(reordered, last_delayed > now);
                    at_once += 1;
                    overtook += u64::from(reordered);
                }
                Verdict::Deliver { at, reordered } => {
                    assert_eq!(at, now + Duration::from_millis(10));
                    assert!(!reordered);
                    last_delayed = at;
                }
                Verdict::Drop(r) => panic!("dropped: {r:?}"),
            }
        }
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (at_once as f64 - n as f64 * p).abs() < 5.0 * sd,
            "{at_once} of {n} at once"
        );
        assert_eq!(link.stats().reordered, overtook);
        // One every millisecond with 10 ms of delay: almost every one sent at once overtakes.
        assert!(overtook + 5 >= at_once, "{overtook} of {at_once}");
    }

    #[test]
    fn datagrams_over_the_budget_are_dropped_and_counted() {
        let len = 100;
        let mut link = impairment(ImpairConfig {
            delay_ms: 10.0,
            max_in_flight_bytes: 3 * (len + PER_DATAGRAM_OVERHEAD),
            ..ImpairConfig::default()
        });
        for _ in 0..3 {
            assert!(matches!(
                link.on_packet(ms(0), len),
                Verdict::Deliver { .. }
            ));
        }
        assert_eq!(
            link.on_packet(ms(1), len),
            Verdict::Drop(DropReason::Budget)
        );
        // A smaller datagram does not fit either: the budget is full to the byte.
        assert_eq!(link.on_packet(ms(2), 0), Verdict::Drop(DropReason::Budget));
        assert_eq!(link.in_flight_bytes(), 3 * (len + PER_DATAGRAM_OVERHEAD));
        // Once the first three are delivered (at 10 ms) there is room again.
        assert_eq!(at(link.on_packet(ms(10), len)), ms(20));
        assert_eq!(link.in_flight_bytes(), len + PER_DATAGRAM_OVERHEAD);
        let s = link.stats();
        assert_eq!((s.forwarded, s.dropped_budget, s.dropped_loss), (4, 2, 0));
    }

    #[test]
    fn bad_settings_are_refused_with_the_field_named() {
        let cases: [(ImpairConfig, &str); 7] = [
            (
                ImpairConfig {
                    delay_ms: -1.0,
                    ..ImpairConfig::default()
                },
                "delay_ms",
            ),
            (
                ImpairConfig {
                    delay_ms: f64::INFINITY,
                    ..ImpairConfig::default()
                },
                "delay_ms",
            ),
            (
                ImpairConfig {
                    jitter_ms: f64::NAN,
                    ..ImpairConfig::default()
                },
                "jitter_ms",
            ),
            (
                ImpairConfig {
                    loss: 1.5,
                    ..ImpairConfig::default()
                },
                "loss",
            ),
            (
                ImpairConfig {
                    loss: f64::NAN,
                    ..ImpairConfig::default()
                },
                "loss",
            ),
            (
                ImpairConfig {
                    reorder: -0.1,
                    ..ImpairConfig::default()
                },
                "reorder",
            ),
            (
                ImpairConfig {
                    max_in_flight_bytes: 0,
                    ..ImpairConfig::default()
                },
                "max_in_flight_bytes",
            ),
        ];
        for (config, field) in cases {
            let e = Impairment::new(&config).unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn a_toml_table_sets_what_it_names_and_refuses_unknown_fields() {
        let c: ImpairConfig = toml::from_str("delay_ms = 10\nloss = 0.005").unwrap();
        assert_eq!(
            c,
            ImpairConfig {
                delay_ms: 10.0,
                loss: 0.005,
                ..ImpairConfig::default()
            }
        );
        assert_eq!(c.max_in_flight_bytes, 4 << 20);
        let e = toml::from_str::<ImpairConfig>("delay = 10").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn streams_of_one_seed_differ() {
        assert_ne!(stream_seed(1, 0), stream_seed(1, 1));
        assert_ne!(stream_seed(1, 0), stream_seed(2, 0));
        assert_eq!(stream_seed(5, 3), stream_seed(5, 3));
    }
}
