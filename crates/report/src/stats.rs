//! The mean of a few runs and how far it can be trusted: plots of several seeds draw the
//! mean with its 95 % confidence interval from Student's t-distribution, which is what a
//! handful of seeds needs (the normal 1.96 would understate the spread of 2 or 3 runs).

/// `t(0.975, df)` for `df` = 1 to 30, from the standard tables.
const T975: [f64; 30] = [
    12.706_205, 4.302_653, 3.182_446, 2.776_445, 2.570_582, 2.446_912, 2.364_624, 2.306_004,
    2.262_157, 2.228_139, 2.200_985, 2.178_813, 2.160_369, 2.144_787, 2.131_450, 2.119_905,
    2.109_816, 2.100_922, 2.093_024, 2.085_963, 2.079_614, 2.073_873, 2.068_658, 2.063_899,
    2.059_539, 2.055_529, 2.051_831, 2.048_407, 2.045_230, 2.042_272,
];

/// The 0.975 quantile of Student's t with `df` degrees of freedom (`NaN` for none).
/// Above 30 the Cornish-Fisher expansion around the normal quantile, within 1e-5 there.
pub fn t975(df: usize) -> f64 {
    if df == 0 {
        return f64::NAN;
    }
    if let Some(t) = T975.get(df - 1) {
        return *t;
    }
    let z: f64 = 1.959_963_985;
    let n = df as f64;
    let g1 = (z.powi(3) + z) / 4.0;
    let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
    let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
    let g4 = (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5)
        - 1920.0 * z.powi(3)
        - 945.0 * z)
        / 92_160.0;
    z + g1 / n + g2 / n.powi(2) + g3 / n.powi(3) + g4 / n.powi(4)
}

/// A sample's mean and the half-width of its 95 % confidence interval (`NaN` for fewer
/// than two values: one run says nothing of the spread).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanCi {
    pub mean: f64,
    pub half_width: f64,
    pub n: usize,
}

impl MeanCi {
    pub fn of(values: &[f64]) -> MeanCi {
        let n = values.len();
        if n == 0 {
            return MeanCi {
                mean: f64::NAN,
                half_width: f64::NAN,
                n,
            };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return MeanCi {
                mean,
                half_width: f64::NAN,
                n,
            };
        }
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        MeanCi {
            mean,
            half_width: t975(n - 1) * (variance / n as f64).sqrt(),
            n,
        }
    }

    pub fn low(&self) -> f64 {
        self.mean - self.half_width
    }

    pub fn high(&self) -> f64 {
        self.mean + self.half_width
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantiles_match_the_tables_on_both_sides_of_thirty() {
        // Published values of t(0.975, df).
        for (df, t) in [
            (1, 12.7062),
            (2, 4.3027),
            (10, 2.2281),
            (30, 2.0423),
            (31, 2.0395),
            (40, 2.0211),
            (60, 2.0003),
            (120, 1.9799),
            (1000, 1.9623),
        ] {
            assert!((t975(df) - t).abs() < 1e-4, "df {df}: {} vs {t}", t975(df));
        }
        assert!(t975(0).is_nan());
        // Decreasing towards the normal quantile.
        for df in 1..200 {
            assert!(t975(df + 1) < t975(df), "df {df}");
        }
        assert!(t975(100_000) > 1.959_96 && t975(100_000) < 1.96);
    }

    #[test]
    fn the_interval_of_a_sample() {
        // Mean 2, sample standard deviation 1, three values: 4.3027 / sqrt(3).
        let ci = MeanCi::of(&[1.0, 2.0, 3.0]);
        assert!((ci.mean - 2.0).abs() < 1e-12);
        assert!((ci.half_width - 4.302_653 / 3f64.sqrt()).abs() < 1e-6);
        assert!((ci.low() + ci.high() - 4.0).abs() < 1e-12);
        // Equal values: no spread.
        assert!(MeanCi::of(&[0.5, 0.5]).half_width.abs() < 1e-15);
        let one = MeanCi::of(&[0.7]);
        assert!((one.mean - 0.7).abs() < 1e-15 && one.half_width.is_nan());
        assert!(MeanCi::of(&[]).mean.is_nan());
    }
}
