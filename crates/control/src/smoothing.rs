//! Standard smoothing (§3.1: "standard smoothing functions can be applied to the
//! periodically measured μ"): an exponentially weighted moving average.
//!
//! The paper names no smoothing constant; callers pass the weight of the newest sample.

/// Exponentially weighted moving average that ignores samples which are not finite,
/// so one bad measurement cannot poison every later estimate.
#[derive(Clone, Debug)]
pub struct Ewma {
    weight: f64,
    value: Option<f64>,
}

impl Ewma {
    /// `weight` is the share of the newest sample, clamped into `(0, 1]`; a weight that
    /// is not a number falls back to 1 (no smoothing) rather than freezing the average.
    pub fn new(weight: f64) -> Self {
        let weight = if weight.is_nan() {
            1.0
        } else {
            weight.clamp(f64::MIN_POSITIVE, 1.0)
        };
        Self {
            weight,
            value: None,
        }
    }

    /// Folds in a sample; the first sample is taken as is. Returns the new average.
    pub fn update(&mut self, sample: f64) -> Option<f64> {
        if sample.is_finite() {
            self.value = Some(match self.value {
                None => sample,
                Some(old) => old + self.weight * (sample - old),
            });
        }
        self.value
    }

    pub fn value(&self) -> Option<f64> {
        self.value
    }

    pub fn weight(&self) -> f64 {
        self.weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_is_taken_then_moves_by_weight() {
        let mut e = Ewma::new(0.25);
        assert_eq!(e.value(), None);
        assert_eq!(e.update(8.0), Some(8.0));
        // 8 + 0.25 * (0 - 8) = 6
        assert_eq!(e.update(0.0), Some(6.0));
    }

    #[test]
    fn converges_to_a_constant_input() {
        let mut e = Ewma::new(0.1);
        e.update(0.0);
        for _ in 0..200 {
            e.update(50.0);
        }
        assert!((e.value().unwrap() - 50.0).abs() < 1e-6);
    }

    #[test]
    fn non_finite_samples_and_weights_are_harmless() {
        let mut e = Ewma::new(f64::NAN);
        assert!((e.weight() - 1.0).abs() < f64::EPSILON);
        e.update(3.0);
        e.update(f64::NAN);
        e.update(f64::INFINITY);
        assert_eq!(e.value(), Some(3.0));
        assert!(Ewma::new(-1.0).weight() > 0.0);
        assert!((Ewma::new(7.0).weight() - 1.0).abs() < f64::EPSILON);
    }
}
