//! Sampled topologies: many seeded variations of the §4.2 model, so that a claim about a
//! control ("no harm below capacity", "holds 0.9 of capacity from 1x to 10x") is checked
//! on more than the papers' own set-ups.
//!
//! Each topology draws, from its own random stream (topology `k` is the same whatever the
//! count): the number of SEs and their unequal shares, the call holding time, the RE's
//! service rate and queue, the links' delay and loss, and the offered load. Loads come
//! from two strata, below capacity (`[load_min, below_capacity_max)`) and overloaded
//! (`[1, load_max]`, log-uniform, so 1x–2x is as well covered as 5x–10x), because the
//! claims differ there; links are lossless for a share of the topologies so both claims
//! that depend on loss have their own population.
//!
//! A topology is a TOML table merged over the experiment's `base` (and under each
//! variant), so the variant picks the control and the topology everything else.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::scenario::splitmix;
use crate::Scenario;

/// The `[sample]` table of an experiment.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SampleSpec {
    /// How many topologies.
    pub topologies: u32,
    /// Seed of the sampling (each topology's run seed is derived from it).
    pub seed: u64,
    /// Number of SEs, inclusive range.
    pub sources: [u32; 2],
    /// Each SE's share is log-uniform in this range (so shares differ up to tenfold).
    pub share: [f64; 2],
    /// Mean call holding time, seconds, uniform.
    pub holding_time_s: [f64; 2],
    /// The RE's processor, messages per second, log-uniform.
    pub re_service_mps: [f64; 2],
    /// The RE's queue, messages, log-uniform.
    pub queue_capacity: [u32; 2],
    /// One-way delay of every hop, milliseconds, uniform.
    pub link_delay_ms: [f64; 2],
    /// Loss probability of every hop for the lossy topologies, uniform.
    pub link_loss: [f64; 2],
    /// Share of topologies with lossless links.
    pub lossless_share: f64,
    /// Lowest and highest offered load.
    pub offered_load: [f64; 2],
    /// Share of topologies offered less than `below_capacity_max`.
    pub below_capacity_share: f64,
    /// Upper end (exclusive) of the below-capacity stratum.
    pub below_capacity_max: f64,
    /// Seconds measured after the warm-up.
    pub measure_s: f64,
    /// Warm-up in mean holding times (BYEs reach their steady rate over a few of them),
    /// at least `min_warmup_s`.
    pub warmup_holding_times: f64,
    pub min_warmup_s: f64,
    /// Only these topologies of the `topologies` drawn, by number (from 0): to run again
    /// the worst cases of an earlier run (its `worst.csv`) without the rest. Each is the
    /// same topology with the same seed as in the whole run.
    pub only: Option<Vec<u32>>,
}

impl Default for SampleSpec {
    fn default() -> Self {
        Self {
            topologies: 200,
            seed: 1,
            sources: [1, 10],
            share: [0.1, 1.0],
            holding_time_s: [10.0, 120.0],
            re_service_mps: [100.0, 5000.0],
            queue_capacity: [100, 1000],
            link_delay_ms: [0.0, 50.0],
            link_loss: [0.0, 0.02],
            lossless_share: 0.5,
            offered_load: [0.5, 10.0],
            below_capacity_share: 0.4,
            below_capacity_max: 0.95,
            measure_s: 60.0,
            warmup_holding_times: 2.0,
            min_warmup_s: 20.0,
            only: None,
        }
    }
}

/// One drawn topology: its number, its run seed and the table to merge.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub index: u32,
    pub seed: u64,
    pub table: toml::Table,
}

fn ordered(name: &str, lo: f64, hi: f64, min: f64) -> Result<(), String> {
    if lo.is_finite() && hi.is_finite() && lo >= min && lo <= hi {
        Ok(())
    } else {
        Err(format!(
            "sample.{name} must be [low, high] with {min} <= low <= high, got [{lo}, {hi}]"
        ))
    }
}

fn fraction(name: &str, v: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("sample.{name} must be in [0, 1], got {v}"))
    }
}

impl SampleSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.topologies == 0 || self.topologies > 100_000 {
            return Err(format!(
                "sample.topologies must be 1..=100000, got {}",
                self.topologies
            ));
        }
        let [s_lo, s_hi] = self.sources;
        ordered("sources", f64::from(s_lo), f64::from(s_hi), 1.0)?;
        if s_hi as usize > crate::scenario::MAX_SOURCES {
            return Err(format!(
                "sample.sources: at most {} sources",
                crate::scenario::MAX_SOURCES
            ));
        }
        ordered("share", self.share[0], self.share[1], f64::MIN_POSITIVE)?;
        ordered(
            "holding_time_s",
            self.holding_time_s[0],
            self.holding_time_s[1],
            f64::MIN_POSITIVE,
        )?;
        ordered(
            "re_service_mps",
            self.re_service_mps[0],
            self.re_service_mps[1],
            1.0,
        )?;
        ordered(
            "queue_capacity",
            f64::from(self.queue_capacity[0]),
            f64::from(self.queue_capacity[1]),
            1.0,
        )?;
        ordered(
            "link_delay_ms",
            self.link_delay_ms[0],
            self.link_delay_ms[1],
            0.0,
        )?;
        ordered("link_loss", self.link_loss[0], self.link_loss[1], 0.0)?;
        if self.link_loss[1] >= 1.0 {
            return Err("sample.link_loss must stay below 1".into());
        }
        fraction("lossless_share", self.lossless_share)?;
        fraction("below_capacity_share", self.below_capacity_share)?;
        ordered(
            "offered_load",
            self.offered_load[0],
            self.offered_load[1],
            f64::MIN_POSITIVE,
        )?;
        if self.below_capacity_share > 0.0
            && !(self.offered_load[0] < self.below_capacity_max && self.below_capacity_max <= 1.0)
        {
            return Err(format!(
                "sample.below_capacity_max ({}) must be in (offered_load low, 1]",
                self.below_capacity_max
            ));
        }
        if self.below_capacity_share < 1.0 && self.offered_load[1] < 1.0 {
            return Err("sample.offered_load must reach 1 for the overloaded stratum".into());
        }
        for (name, v) in [
            ("measure_s", self.measure_s),
            ("warmup_holding_times", self.warmup_holding_times),
            ("min_warmup_s", self.min_warmup_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "sample.{name} must be a finite number >= 0, got {v}"
                ));
            }
        }
        if self.measure_s <= 0.0 {
            return Err("sample.measure_s must be > 0".into());
        }
        if let Some(only) = &self.only {
            if only.is_empty() {
                return Err("sample.only must name at least one topology".into());
            }
            if let Some(k) = only.iter().find(|&&k| k >= self.topologies) {
                return Err(format!(
                    "sample.only: topology {k} is not among the {} drawn (numbered from 0)",
                    self.topologies
                ));
            }
        }
        Ok(())
    }

    /// The numbers of the topologies to run, in order, each once.
    pub fn indices(&self) -> Vec<u32> {
        match &self.only {
            Some(only) => {
                let mut k = only.clone();
                k.sort_unstable();
                k.dedup();
                k
            }
            None => (0..self.topologies).collect(),
        }
    }

    /// Topology `index`, drawn from its own stream of `seed`.
    pub fn topology(&self, index: u32, base: &Scenario) -> Topology {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(u64::from(index) + 1);
        let uniform = |rng: &mut ChaCha8Rng, [lo, hi]: [f64; 2]| {
            if hi > lo {
                rng.gen_range(lo..=hi)
            } else {
                lo
            }
        };
        let log_uniform = |rng: &mut ChaCha8Rng, [lo, hi]: [f64; 2]| {
            if hi > lo {
                (rng.gen_range(lo.ln()..=hi.ln())).exp()
            } else {
                lo
            }
        };
        let sources = rng.gen_range(self.sources[0]..=self.sources[1]);
        let shares: Vec<f64> = (0..sources)
            .map(|_| log_uniform(&mut rng, self.share))
            .collect();
        let holding = uniform(&mut rng, self.holding_time_s);
        let service = log_uniform(&mut rng, self.re_service_mps);
        let queue = log_uniform(
            &mut rng,
            [
                f64::from(self.queue_capacity[0]),
                f64::from(self.queue_capacity[1]),
            ],
        )
        .round();
        let delay = uniform(&mut rng, self.link_delay_ms);
        let lossless = rng.gen_bool(self.lossless_share);
        let loss = if lossless {
            0.0
        } else {
            uniform(&mut rng, self.link_loss)
        };
        let below = rng.gen_bool(self.below_capacity_share);
        let load = if below {
            uniform(&mut rng, [self.offered_load[0], self.below_capacity_max])
                .min(self.below_capacity_max * (1.0 - 1e-9))
        } else {
            log_uniform(
                &mut rng,
                [1.0_f64.max(self.offered_load[0]), self.offered_load[1]],
            )
        };
        // The RE keeps the base's cost ratio of a 503 to a forwarded message (β).
        let forward_us = 1.0e6 / service;
        let reject_us = base.re.cost_reject_us * forward_us / base.re.cost_forward_us;
        // 63 bits: a TOML integer is an i64.
        let seed = splitmix(self.seed ^ splitmix(u64::from(index) + 1)) >> 1;

        let round = |v: f64, digits: i32| {
            let k = 10f64.powi(digits);
            (v * k).round() / k
        };
        // The warm-up follows the holding time the run gets (rounded as written).
        let holding = round(holding, 1);
        let warmup = (self.warmup_holding_times * holding).max(self.min_warmup_s);
        let mut table = toml::Table::new();
        let float = |v: f64| toml::Value::Float(v);
        table.insert("offered_load".into(), float(round(load, 4)));
        table.insert("warmup_s".into(), float(round(warmup, 3)));
        table.insert(
            "duration_s".into(),
            float(round(warmup + self.measure_s, 3)),
        );
        let sources: toml::value::Array = shares
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut t = toml::Table::new();
                t.insert("name".into(), toml::Value::String(format!("UA{}", i + 1)));
                t.insert("share".into(), float(round(*s, 4)));
                toml::Value::Table(t)
            })
            .collect();
        table.insert("sources".into(), toml::Value::Array(sources));
        let mut re = toml::Table::new();
        re.insert("cost_forward_us".into(), float(forward_us));
        re.insert("cost_reject_us".into(), float(reject_us));
        let queue = toml::Value::Integer(queue as i64);
        re.insert("queue_capacity".into(), queue.clone());
        re.insert("invite_queue_capacity".into(), queue);
        table.insert("re".into(), toml::Value::Table(re));
        let mut call = toml::Table::new();
        call.insert("holding_time_s".into(), float(holding));
        table.insert("call".into(), toml::Value::Table(call));
        let mut link = toml::Table::new();
        link.insert("delay_ms".into(), float(round(delay, 2)));
        link.insert("loss".into(), float(round(loss, 5)));
        table.insert("link".into(), toml::Value::Table(link));
        Topology { index, seed, table }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_are_reproducible_independent_and_in_range() {
        let spec = SampleSpec::default();
        let base = Scenario::default();
        let a = spec.topology(7, &base);
        assert_eq!(a, spec.topology(7, &base), "same seed, same topology");
        assert_ne!(a.table, spec.topology(8, &base).table);
        let mut below = 0;
        let mut lossless = 0;
        for k in 0..400 {
            let t = spec.topology(k, &base);
            let s: Scenario = toml::Value::Table(t.table.clone()).try_into().unwrap();
            s.validate().unwrap();
            assert!((1..=10).contains(&s.sources.len()));
            assert!((10.0..=120.0).contains(&s.call.holding_time_s));
            let mps = 1.0e6 / s.re.cost_forward_us;
            assert!((99.9..=5000.1).contains(&mps), "{mps}");
            assert!((100..=1000).contains(&s.re.queue_capacity));
            assert!((0.0..=50.0).contains(&s.link.delay_ms));
            assert!((0.0..=0.02).contains(&s.link.loss));
            assert!(
                (s.re.cost_reject_us / s.re.cost_forward_us
                    - base.re.cost_reject_us / base.re.cost_forward_us)
                    .abs()
                    < 1e-9,
                "the RE's cost ratio is the base's"
            );
            assert!(s.offered_load < 0.95 || s.offered_load >= 1.0);
            below += usize::from(s.offered_load < 0.95);
            lossless += usize::from(s.link.loss == 0.0);
            assert!(s.warmup_s >= 2.0 * s.call.holding_time_s - 0.1);
        }
        assert!(
            (120..=200).contains(&below),
            "{below} of 400 below capacity"
        );
        assert!(
            (160..=240).contains(&lossless),
            "{lossless} of 400 lossless"
        );
    }

    #[test]
    fn bad_ranges_are_named() {
        let spec = SampleSpec {
            link_loss: [0.0, 1.5],
            ..SampleSpec::default()
        };
        assert!(spec.validate().unwrap_err().contains("link_loss"));
        let spec = SampleSpec {
            sources: [3, 2],
            ..SampleSpec::default()
        };
        assert!(spec.validate().unwrap_err().contains("sources"));
        assert!(SampleSpec::default().validate().is_ok());
        let spec = SampleSpec {
            only: Some(vec![3, 200]),
            ..SampleSpec::default()
        };
        assert!(spec.validate().unwrap_err().contains("topology 200"));
    }

    #[test]
    fn only_picks_topologies_by_number_in_order_once() {
        let spec = SampleSpec {
            only: Some(vec![42, 7, 42]),
            ..SampleSpec::default()
        };
        spec.validate().unwrap();
        assert_eq!(spec.indices(), vec![7, 42]);
        assert_eq!(SampleSpec::default().indices().len(), 200);
    }
}
