//! A rate limit on new requests per source address, so that one sender flooding the proxy
//! with new work (OPTIONS, MESSAGE, INVITEs with invented tags) cannot take the admission
//! that other sources' calls need: its excess is dropped at the receive stage, before it
//! costs the processor anything.
//!
//! One token bucket per source IP (not port: a sender picks ports freely), refilled at
//! `rate` tokens a second up to one second's worth. The table is bounded: once it holds
//! `max_sources`, sources not in it share one overflow bucket, so that spoofing many
//! addresses buys no more than one more source's share.

use std::collections::HashMap;
use std::net::IpAddr;

use sluice_time::Time;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Time,
}

impl Bucket {
    fn take(&mut self, now: Time, rate: f64) -> bool {
        let elapsed = now.saturating_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate.max(1.0));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug)]
pub(crate) struct SourceLimiter {
    /// New requests a second per source; 0 is no limit.
    rate: f64,
    buckets: HashMap<IpAddr, Bucket, foldhash::fast::RandomState>,
    overflow: Bucket,
    max_sources: usize,
    /// When a full table may next be swept for buckets that are full again (at most once
    /// a second: a sweep per new source would let a flood of sources cost O(n) each).
    next_sweep: Time,
}

impl SourceLimiter {
    pub(crate) fn new(rate: f64, max_sources: usize, now: Time) -> Self {
        let full = Bucket {
            tokens: rate.max(1.0),
            at: now,
        };
        Self {
            rate,
            buckets: HashMap::default(),
            overflow: full,
            max_sources,
            next_sweep: now,
        }
    }

    /// Whether a new request from `source` may go on.
    pub(crate) fn allow(&mut self, now: Time, source: IpAddr) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        if let Some(b) = self.buckets.get_mut(&source) {
            return b.take(now, self.rate);
        }
        if self.buckets.len() >= self.max_sources && now >= self.next_sweep {
            // A full bucket is as good as none: forget those.
            self.next_sweep = now + std::time::Duration::from_secs(1);
            let rate = self.rate;
            self.buckets.retain(|_, b| {
                let mut probe = *b;
                probe.take(now, rate);
                probe.tokens + 1.0 < rate.max(1.0)
            });
        }
        if self.buckets.len() >= self.max_sources {
            return self.overflow.take(now, self.rate);
        }
        let mut b = Bucket {
            tokens: self.rate.max(1.0),
            at: now,
        };
        let allowed = b.take(now, self.rate);
        self.buckets.insert(source, b);
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_gets_its_rate_and_the_table_stays_bounded() {
        let mut l = SourceLimiter::new(10.0, 2, Time::ZERO);
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let granted = |l: &mut SourceLimiter, ip, n: u64| {
            (0..n)
                .filter(|i| l.allow(Time::from_millis(i * 10), ip))
                .count()
        };
        // 100 requests in one second from one source: its burst of 10 and 9 more.
        assert!((18..=20).contains(&granted(&mut l, a, 100)));
        // Another source is not held back by the first.
        assert_eq!(granted(&mut l, b, 5), 5);
        // Many more sources while the table is full: one takes the place of the idle
        // second source, the rest share one bucket.
        let many: u64 = (3..200u8)
            .map(|i| u64::from(l.allow(Time::from_millis(990), IpAddr::from([198, 51, 100, i]))))
            .sum();
        assert!(many <= 11, "{many}");
        assert!(l.buckets.len() <= 2);
        // No limit at all with rate 0.
        let mut off = SourceLimiter::new(0.0, 2, Time::ZERO);
        assert_eq!(granted(&mut off, a, 100), 100);
    }
}
