//! The RFC 7415 §3.5 client: a leaky bucket in time units with a tolerance per
//! priority class.
//!
//! With target rate `r`, each request passed adds `T = 1/r` to the bucket, which drains
//! at one second per second. A request arriving when the drained content exceeds its
//! class's tolerance is reduced and leaves the bucket unchanged; otherwise it passes.
//! Category 1 uses `tau`, category 2 the larger `tau_priority` (the RFC's priority
//! thresholds), so under a steady overload category 2 requests still find room after
//! category 1 requests are refused. Over any interval of length `D` a class with
//! tolerance `τ` passes at most `(D + τ) / T + 1` requests.
//!
//! Randomisation (our reading of §3.5.3): when control starts, the bucket content is
//! drawn uniformly from `[0, tau]` rather than starting empty, so clients told to start
//! at the same instant do not all send a burst of the same size at once.

use crate::overload::Reduction;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RateBucket {
    /// Nanoseconds added per request; `None` for a rate of zero (everything reducible
    /// is refused).
    increment: Option<u64>,
    content: u64,
    last_pass: Time,
    tau: u64,
    tau_priority: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RateBucket {
    /// Starts control at `now` with a random initial content (see the module docs).
    pub fn start(
        rate: u64,
        tau: Duration,
        tau_priority: Duration,
        now: Time,
        rng: &mut ChaCha8Rng,
    ) -> Self {
        let tau = nanos(tau);
        let tau_priority = nanos(tau_priority).max(tau);
        let mut bucket = Self {
            increment: None,
            content: rng.gen_range(0..=tau),
            last_pass: now,
            tau,
            tau_priority,
        };
        bucket.set_rate(rate);
        bucket
    }

    /// A new target rate, requests per second; the bucket's content is kept.
    pub fn set_rate(&mut self, rate: u64) {
        self.increment = (rate > 0).then(|| (1_000_000_000 / rate).max(1));
    }

    /// The target rate in requests per second (0 when closed).
    pub fn rate(&self) -> u64 {
        self.increment.map_or(0, |t| 1_000_000_000 / t)
    }

    pub fn try_pass(&mut self, now: Time, rank: Reduction) -> bool {
        let tolerance = match rank {
            Reduction::Exempt => return true,
            Reduction::Normal => self.tau,
            Reduction::Priority => self.tau_priority,
        };
        let Some(increment) = self.increment else {
            return false;
        };
        let elapsed = nanos(now.saturating_since(self.last_pass));
        let drained = self.content.saturating_sub(elapsed);
        if drained > tolerance {
            return false;
        }
        self.content = drained.saturating_add(increment);
        self.last_pass = self.last_pass.max(now);
        true
    }
}
