//! Percentage throttle, Shen, Schulzrinne & Nahum 2008, §2.4.2: the paper's enforcement
//! for rate-based feedback.
//!
//! Each new session is sent with probability `p` and blocked otherwise. With relative
//! feedback `p = f` directly; with an absolute rate `λ'` and the SE's measured offered
//! rate `λ`, `p = min(1, λ'/λ)` (block `1 − λ'/λ`). The random draw comes from the
//! enforcer's own seeded ChaCha8 stream. Discard mode only: a held request has no
//! natural release time under a coin toss.

use crate::types::FeedbackValue;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_time::Time;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Unlimited,
    Fraction(f64),
    Rate(f64),
}

#[derive(Clone, Debug)]
pub struct PercentageThrottle {
    target: Target,
    rng: ChaCha8Rng,
}

impl PercentageThrottle {
    /// Sends everything until the first feedback arrives.
    pub fn new(rng: ChaCha8Rng) -> Self {
        Self {
            target: Target::Unlimited,
            rng,
        }
    }

    /// The probability of sending the next session given the offered rate.
    pub fn pass_probability(&self, offered_rate: Option<f64>) -> f64 {
        match self.target {
            Target::Unlimited => 1.0,
            Target::Fraction(f) => f,
            Target::Rate(r) => match offered_rate {
                Some(o) if o > 0.0 => (r / o).min(1.0),
                _ => 1.0,
            },
        }
    }

    pub fn try_pass(&mut self, offered_rate: Option<f64>) -> bool {
        let p = self.pass_probability(offered_rate);
        p >= 1.0 || self.rng.gen::<f64>() < p
    }

    /// Applies rate or fraction feedback; a window cannot drive a percentage.
    pub fn on_feedback(&mut self, _now: Time, value: FeedbackValue) -> bool {
        match value {
            FeedbackValue::AcceptFraction(f) if !f.is_nan() => {
                self.target = Target::Fraction(f.clamp(0.0, 1.0));
            }
            FeedbackValue::Rate(r) if !r.is_nan() => self.target = Target::Rate(r.max(0.0)),
            _ => return false,
        }
        true
    }
}
