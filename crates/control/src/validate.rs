//! Range checks of the control configuration, for the operator. The algorithms also
//! sanitise what they are given (a bad number falls back to its default or is clamped), so
//! that no input can make them panic; but a `target_cpu = 7` that silently runs as 0.9 is
//! a mistake nobody sees. [`ControlConfig::validate`] names every value out of its range:
//! key, value and what is allowed, before anything runs.

use std::time::Duration;

use crate::config::ControlConfig;
use crate::fuzzy::FuzzyWindowConfig;

/// Collects the values out of range under one key prefix.
#[derive(Debug, Default)]
pub(crate) struct Ranges {
    errors: Vec<String>,
}

impl Ranges {
    fn check(&mut self, key: &str, value: impl std::fmt::Display, ok: bool, allowed: &str) {
        if !ok {
            self.errors
                .push(format!("{key} = {value}: allowed {allowed}"));
        }
    }

    /// `0 <= v <= 1`.
    pub(crate) fn fraction(&mut self, key: &str, v: f64) {
        self.check(key, v, (0.0..=1.0).contains(&v), "from 0 to 1");
    }

    /// `0 < v <= 1`.
    pub(crate) fn share(&mut self, key: &str, v: f64) {
        self.check(key, v, v > 0.0 && v <= 1.0, "above 0, up to 1");
    }

    pub(crate) fn non_negative(&mut self, key: &str, v: f64) {
        self.check(key, v, v >= 0.0 && v.is_finite(), "0 or more");
    }

    pub(crate) fn positive(&mut self, key: &str, v: f64) {
        self.check(key, v, v > 0.0 && v.is_finite(), "above 0");
    }

    pub(crate) fn at_least(&mut self, key: &str, v: f64, min: f64) {
        self.check(key, v, v >= min && v.is_finite(), &format!("{min} or more"));
    }

    /// A period a timer runs on: longer than zero (zero would run it at every instant).
    pub(crate) fn interval(&mut self, key: &str, d: Duration) {
        let ms = d.as_secs_f64() * 1e3;
        self.check(key, ms, !d.is_zero(), "above 0 ms");
    }

    /// `low <= high`, when both are given.
    pub(crate) fn ordered(&mut self, low_key: &str, low: f64, high_key: &str, high: f64) {
        self.check(
            low_key,
            low,
            low <= high,
            &format!("up to {high_key} ({high})"),
        );
    }

    pub(crate) fn finish(self) -> Result<(), String> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors.join("; "))
        }
    }
}

impl ControlConfig {
    /// Every value out of range, named as `control.TABLE.KEY = VALUE: allowed RANGE`.
    /// All tables are checked, not only the selected algorithm's: a wrong value waiting in
    /// a table is wrong on the day the algorithm is switched.
    pub fn validate(&self) -> Result<(), String> {
        let mut r = Ranges::default();
        if let Some(share) = self.backstop_drain_share {
            r.fraction("control.backstop_drain_share", share);
        }
        let e = &self.estimator;
        r.interval(
            "control.estimator.measurement_interval_ms",
            e.measurement_interval,
        );
        r.share("control.estimator.smoothing_weight", e.smoothing_weight);
        r.at_least(
            "control.estimator.initial_session_length",
            e.initial_session_length,
            1.0,
        );
        r.non_negative("control.estimator.service_rate_floor", e.service_rate_floor);
        r.interval(
            "control.active_sources.expiry_ms",
            self.active_sources.expiry,
        );
        r.at_least(
            "control.active_sources.max_sources",
            self.active_sources.max_sources as f64,
            1.0,
        );
        if let (Some(low), Some(high)) =
            (self.threshold.low_watermark, self.threshold.high_watermark)
        {
            r.ordered(
                "control.threshold.low_watermark",
                low as f64,
                "high_watermark",
                high as f64,
            );
        }
        if let (Some(low), Some(high)) = (self.ohta.lo_wm, self.ohta.hi_wm) {
            r.ordered("control.ohta.lo_wm", low as f64, "hi_wm", high as f64);
        }
        r.interval(
            "control.win_disc.control_interval_ms",
            self.win_disc.control_interval,
        );
        r.non_negative(
            "control.win_cont.overall_threshold",
            self.win_cont.overall_threshold,
        );
        r.non_negative(
            "control.win_cont.individual_threshold",
            self.win_cont.individual_threshold,
        );
        let ra = &self.rate_abs;
        r.interval("control.rate_abs.control_interval_ms", ra.control_interval);
        r.non_negative("control.rate_abs.min_rate", ra.min_rate);
        let ro = &self.rate_occ;
        r.share("control.rate_occ.target_occupancy", ro.target_occupancy);
        r.interval("control.rate_occ.control_interval_ms", ro.control_interval);
        r.positive("control.rate_occ.max_increase", ro.max_increase);
        r.fraction("control.rate_occ.min_fraction", ro.min_fraction);
        let occ = &self.occ;
        r.share("control.occ.target_cpu", occ.target_cpu);
        r.interval("control.occ.control_interval_ms", occ.control_interval);
        r.interval(
            "control.occ.measurement_interval_ms",
            occ.measurement_interval,
        );
        r.fraction("control.occ.min_fraction", occ.min_fraction);
        r.positive("control.occ.max_increase", occ.max_increase);
        let red = &self.red;
        r.share("control.red.queue_weight", red.queue_weight);
        if let Some(low) = red.th_low {
            r.non_negative("control.red.th_low", low);
            if let Some(high) = red.th_high {
                r.ordered("control.red.th_low", low, "th_high", high);
            }
        }
        if let Some(high) = red.th_high {
            r.non_negative("control.red.th_high", high);
        }
        let pi = &self.pi;
        r.share("control.pi.target_cpu", pi.target_cpu);
        r.interval("control.pi.sample_interval_ms", pi.sample_interval);
        for (key, gain) in [
            ("control.pi.k_pc", pi.k_pc),
            ("control.pi.k_ic", pi.k_ic),
            ("control.pi.k_pq", pi.k_pq),
            ("control.pi.k_iq", pi.k_iq),
        ] {
            r.non_negative(key, gain);
        }
        if let Some(rate) = pi.max_drain_rate {
            r.positive("control.pi.max_drain_rate", rate);
        }
        let lb = &self.latency_bucket;
        r.interval(
            "control.latency_bucket.target_latency_ms",
            lb.target_latency,
        );
        r.non_negative("control.latency_bucket.min_rate", lb.min_rate);
        r.ordered(
            "control.latency_bucket.min_rate",
            lb.min_rate,
            "initial_rate",
            lb.initial_rate,
        );
        if let Some(max) = lb.max_rate {
            r.ordered(
                "control.latency_bucket.initial_rate",
                lb.initial_rate,
                "max_rate",
                max,
            );
        }
        r.positive("control.latency_bucket.bucket_depth", lb.bucket_depth);
        r.at_least(
            "control.latency_bucket.decrease_factor",
            lb.decrease_factor,
            1.0,
        );
        r.non_negative("control.latency_bucket.increase_factor", lb.increase_factor);
        r.non_negative("control.latency_bucket.increase_margin", lb.increase_margin);
        r.share("control.latency_bucket.latency_weight", lb.latency_weight);
        r.at_least(
            "control.latency_bucket.adjust_every",
            f64::from(lb.adjust_every),
            1.0,
        );
        r.interval(
            "control.latency_bucket.adjust_interval_ms",
            lb.adjust_interval,
        );
        r.finish()
    }
}

impl FuzzyWindowConfig {
    /// Every value out of range, named under `prefix` (where the table sits).
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        let mut r = Ranges::default();
        let key = |k: &str| format!("{prefix}.{k}");
        r.at_least(&key("min_window"), self.min_window, 1.0);
        r.ordered(
            &key("min_window"),
            self.min_window,
            "max_window",
            self.max_window,
        );
        r.check(
            &key("initial_window"),
            self.initial_window,
            self.initial_window >= self.min_window && self.initial_window <= self.max_window,
            &format!(
                "from min_window ({}) to max_window ({})",
                self.min_window, self.max_window
            ),
        );
        r.interval(&key("update_interval_ms"), self.update_interval);
        r.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_in_range() {
        assert_eq!(ControlConfig::default().validate(), Ok(()));
        assert_eq!(
            FuzzyWindowConfig::default().validate("overload.client.fuzzy"),
            Ok(())
        );
    }

    #[test]
    fn each_value_out_of_range_is_named_with_its_key_value_and_range() {
        let text = "backstop_drain_share = 1.5\n\
                    [pi]\ntarget_cpu = 7\nk_pc = -3\n[red]\nth_low = 500\nth_high = 100\n\
                    [estimator]\nmeasurement_interval_ms = 0\n";
        let cfg: ControlConfig = toml::from_str(text).unwrap();
        let err = cfg.validate().unwrap_err();
        for part in [
            "control.pi.target_cpu = 7: allowed above 0, up to 1",
            "control.pi.k_pc = -3: allowed 0 or more",
            "control.red.th_low = 500: allowed up to th_high (100)",
            "control.estimator.measurement_interval_ms = 0: allowed above 0 ms",
            "control.backstop_drain_share = 1.5: allowed from 0 to 1",
        ] {
            assert!(err.contains(part), "{part} not in: {err}");
        }
        assert_eq!(err.matches("; ").count(), 4, "{err}");
        let fuzzy = FuzzyWindowConfig {
            initial_window: 0.5,
            ..FuzzyWindowConfig::default()
        };
        let err = fuzzy.validate("f").unwrap_err();
        assert!(
            err.starts_with("f.initial_window = 0.5: allowed from min_window"),
            "{err}"
        );
    }
}
