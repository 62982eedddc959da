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
        Self {
            percent: percent.min(100),
            normal_share: Ewma::new(mix_weight),
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
