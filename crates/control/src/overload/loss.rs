//! The RFC 7339 §7.2 default loss algorithm at the client.
//!
//! The server asks for a share `L = oc / 100` of the client's reducible requests to be
//! dropped. The client meets it with a random draw per request, taking category 1
//! (normal) requests first: with `c` the share of category 1 among reducible requests,
//! - if `c ≥ L`, a category 1 request is dropped with probability `L / c` and category 2
//!   requests pass;
//! - otherwise every category 1 request is dropped and a category 2 request with
//!   probability `(L − c) / (1 − c)`.
//!
//! Either way the expected loss over all reducible requests is `L`. `c` is a running
//! estimate: an exponentially weighted average of "this request was category 1" over
//! the requests offered. Exempt requests never reach this throttle.

use crate::overload::Reduction;
use crate::smoothing::Ewma;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
pub struct LossThrottle {
    /// Requested loss, `0..=100` percent.
    percent: u32,
    normal_share: Ewma,
    rng: ChaCha8Rng,
}

impl LossThrottle {
    /// `mix_weight` is the weight of each new request in the category mix estimate.
    pub fn new(percent: u32, mix_weight: f64, rng: ChaCha8Rng) -> Self {
        // The estimate starts from "all normal", not from the first request: a priority
        // request first would set it to 0, and at a small weight it would then stay below
        // the requested loss for hundreds of requests, dropping priority requests that the
        // normal ones could have covered (what §7.2 forbids).
        let mut normal_share = Ewma::new(mix_weight);
        normal_share.update(1.0);
        Self {
            percent: percent.min(100),
            normal_share,
            rng,
        }
    }

    pub fn percent(&self) -> u32 {
        self.percent
    }

    pub fn set_percent(&mut self, percent: u32) {
        self.percent = percent.min(100);
    }

    /// The estimated share of category 1 among reducible requests (1 before any).
    pub fn normal_share(&self) -> f64 {
        self.normal_share.value().unwrap_or(1.0)
    }

    /// The probability of dropping a request of `rank` at the current estimate.
    pub fn drop_probability(&self, rank: Reduction) -> f64 {
        let loss = f64::from(self.percent) / 100.0;
        if loss <= 0.0 {
            return 0.0;
        }
        let normal = self.normal_share();
        match rank {
            Reduction::Exempt => 0.0,
            Reduction::Normal if normal >= loss => loss / normal,
            Reduction::Normal => 1.0,
            Reduction::Priority if normal >= loss => 0.0,
            Reduction::Priority => ((loss - normal) / (1.0 - normal)).clamp(0.0, 1.0),
        }
    }

    /// Counts the request in the mix and decides: `true` passes it.
    pub fn try_pass(&mut self, rank: Reduction) -> bool {
        if rank == Reduction::Exempt {
            return true;
        }
        self.normal_share
            .update(if rank == Reduction::Normal { 1.0 } else { 0.0 });
        let p = self.drop_probability(rank);
        !(p >= 1.0 || (p > 0.0 && self.rng.gen::<f64>() < p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn priority_requests_first_in_line_are_not_taken_for_the_whole_mix() {
        let mut t = LossThrottle::new(50, 0.01, ChaCha8Rng::seed_from_u64(1));
        // The first request is priority: the mix estimate must not jump to "no normal
        // requests at all", or priority requests would be dropped.
        assert!(t.try_pass(Reduction::Priority));
        assert!(t.drop_probability(Reduction::Priority) < 1e-12);
        let (mut normal, mut normal_dropped, mut priority_dropped) = (0u32, 0u32, 0u32);
        for i in 0..4000 {
            if i % 5 == 0 {
                priority_dropped += u32::from(!t.try_pass(Reduction::Priority));
            } else {
                normal += 1;
                normal_dropped += u32::from(!t.try_pass(Reduction::Normal));
            }
        }
        assert_eq!(priority_dropped, 0);
        // 50 % of all is 62.5 % of the normal four fifths once the estimate has settled;
        // it starts from all-normal (50 % of normal), so the average lies in between.
        let share = f64::from(normal_dropped) / f64::from(normal);
        assert!((0.55..0.64).contains(&share), "{share}");
        assert!(
            (t.normal_share() - 0.8).abs() < 0.05,
            "{}",
            t.normal_share()
        );
    }

    #[test]
    fn priority_is_reduced_once_normal_requests_cannot_cover_the_loss() {
        let mut t = LossThrottle::new(90, 0.05, ChaCha8Rng::seed_from_u64(2));
        for i in 0..400 {
            t.try_pass(if i % 2 == 0 {
                Reduction::Priority
            } else {
                Reduction::Normal
            });
        }
        // Half normal, 90 % asked: every normal request and 80 % of priority ones.
        assert!((t.drop_probability(Reduction::Normal) - 1.0).abs() < 1e-12);
        let p = t.drop_probability(Reduction::Priority);
        assert!((p - 0.8).abs() < 0.05, "{p}");
    }
}
