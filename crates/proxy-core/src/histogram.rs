//! Fixed-bucket delay histograms the core keeps for `/metrics`: counts per bucket and a
//! sum, as a Prometheus histogram needs. A fixed array, so the stats stay `Copy` and an
//! observation costs a few comparisons on the hot path, with no allocation.

use std::time::Duration;

/// Upper bounds of the buckets, in seconds (the last bucket, above them all, is `+Inf`).
/// From 100 µs (an unloaded proxy's queueing delay) to 10 s (past Timer A's doubling to
/// 4 s, where a caller has long retransmitted): the range where overload shows.
pub const DELAY_BUCKETS_S: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];

/// Observations of a delay: how many fell in each bucket (not cumulative), the last
/// entry counting those above every bound.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DelayHistogram {
    pub buckets: [u64; DELAY_BUCKETS_S.len() + 1],
    pub sum_seconds: f64,
    pub count: u64,
}

impl DelayHistogram {
    pub fn observe(&mut self, delay: Duration) {
        let s = delay.as_secs_f64();
        let i = DELAY_BUCKETS_S.partition_point(|&bound| bound < s);
        self.buckets[i] += 1;
        self.sum_seconds += s;
        self.count += 1;
    }

    /// The delay below which a fraction `q` of observations fell, as the upper bound of
    /// the bucket that holds it (`None` without observations; `+Inf` for the last).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(DELAY_BUCKETS_S.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_on_a_bound_counts_in_that_bucket_and_above_all_in_the_last() {
        let mut h = DelayHistogram::default();
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_micros(1_001));
        h.observe(Duration::ZERO);
        h.observe(Duration::from_secs(30));
        assert_eq!(h.buckets[0], 1, "zero in the first bucket");
        assert_eq!(h.buckets[3], 1, "1 ms is in the bucket whose bound is 1 ms");
        assert_eq!(h.buckets[4], 1, "just above 1 ms is in the next");
        assert_eq!(
            h.buckets[DELAY_BUCKETS_S.len()],
            1,
            "30 s is above every bound"
        );
        assert_eq!(h.count, 4);
        assert!((h.sum_seconds - 30.002_001).abs() < 1e-9);
    }

    #[test]
    fn quantile_bound_names_the_bucket_holding_the_rank() {
        let mut h = DelayHistogram::default();
        assert_eq!(h.quantile_bound(0.5), None);
        for _ in 0..9 {
            h.observe(Duration::from_millis(3));
        }
        h.observe(Duration::from_millis(400));
        assert_eq!(h.quantile_bound(0.5), Some(0.005));
        assert_eq!(h.quantile_bound(0.9), Some(0.005));
        assert_eq!(h.quantile_bound(0.99), Some(0.5));
    }
}
