//! The goodput bound of any local, rate-based SIP overload control: De Cicco, Cofano &
//! Mascolo (journal version), §IV-A, Proposition 1, eqs. (1)–(5).
//!
//! CPU model, eq. (1): `C = (1 − α) r + α r / β + d`, with `r = ρ/ρ_M` the INVITE rate
//! normalised by the largest rate the server forwards without overload, `α` the
//! fraction rejected, `β > 1` the ratio of the cost of forwarding an INVITE to the cost
//! of rejecting one, and `d` the load of other processes (0 for the bound).
//! Holding `C = C_T` gives the reject fraction of eq. (3),
//! `α(r) = β/(β − 1) · (1 − C_T/r)`, and the bound of eq. (2):
//!
//! ```text
//! g_opt(r) = r                               r < C_T
//!          = (C_T β − r) / (β − 1)            C_T ≤ r < β C_T      (eq. 4)
//!          = 0                               r ≥ β C_T = r_max     (eq. 5)
//! ```
//!
//! Parameters outside the proposition's hypotheses (`β ≤ 1`, `C_T ∉ (0, 1]`, `r < 0`,
//! anything not a number) give NaN rather than a bound.

fn valid(r: f64, beta: f64, target_cpu: f64) -> bool {
    r >= 0.0 && beta > 1.0 && beta.is_finite() && target_cpu > 0.0 && target_cpu <= 1.0
}

/// `g_opt(r)`, eq. (2): the most normalised goodput any local overload control can
/// keep at normalised offered rate `r` while holding the CPU at `target_cpu`.
pub fn optimal_goodput(r: f64, beta: f64, target_cpu: f64) -> f64 {
    if !valid(r, beta, target_cpu) {
        return f64::NAN;
    }
    if r < target_cpu {
        r
    } else if r < beta * target_cpu {
        (target_cpu * beta - r) / (beta - 1.0)
    } else {
        0.0
    }
}

/// `α(r)`, eq. (3), clamped into `[0, 1]`: the fraction of INVITEs to reject so that
/// the CPU load is `target_cpu` (0 when no rejection is needed, 1 beyond `r_max`).
pub fn optimal_reject_fraction(r: f64, beta: f64, target_cpu: f64) -> f64 {
    if !valid(r, beta, target_cpu) {
        return f64::NAN;
    }
    if r <= target_cpu {
        0.0
    } else {
        (beta / (beta - 1.0) * (1.0 - target_cpu / r)).clamp(0.0, 1.0)
    }
}

/// `r_max = C_T β`, eq. (5): the largest normalised rate at which rejecting everything
/// still keeps the CPU at the target.
pub fn max_controllable_rate(beta: f64, target_cpu: f64) -> f64 {
    if valid(0.0, beta, target_cpu) {
        target_cpu * beta
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BETA: f64 = 6.0;
    const CT: f64 = 0.9;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn below_the_target_everything_is_goodput() {
        for r in [0.0, 0.3, 0.899] {
            assert!(close(optimal_goodput(r, BETA, CT), r));
            assert!(close(optimal_reject_fraction(r, BETA, CT), 0.0));
        }
    }

    #[test]
    fn between_the_target_and_r_max_goodput_falls_linearly_with_slope_minus_one_over_beta_minus_one(
    ) {
        // Continuous at C_T, zero at r_max = C_T β = 5.4.
        assert!(close(optimal_goodput(CT, BETA, CT), CT));
        assert!(close(optimal_goodput(2.0, BETA, CT), (5.4 - 2.0) / 5.0));
        let slope = optimal_goodput(3.0, BETA, CT) - optimal_goodput(2.0, BETA, CT);
        assert!(close(slope, -1.0 / (BETA - 1.0)));
        // The goodput is what eq. (3) forwards, and eq. (1) then sits at C_T.
        for r in [1.0, 2.0, 4.0, 5.3] {
            let a = optimal_reject_fraction(r, BETA, CT);
            assert!(close(optimal_goodput(r, BETA, CT), (1.0 - a) * r));
            assert!(close((1.0 - a) * r + a * r / BETA, CT));
        }
    }

    #[test]
    fn beyond_r_max_nothing_gets_through() {
        assert!(close(max_controllable_rate(BETA, CT), 5.4));
        for r in [5.4, 6.0, 100.0] {
            assert!(close(optimal_goodput(r, BETA, CT), 0.0));
            assert!(close(optimal_reject_fraction(r, BETA, CT), 1.0));
        }
    }

    #[test]
    fn parameters_outside_the_hypotheses_give_nan() {
        assert!(optimal_goodput(1.0, 1.0, CT).is_nan());
        assert!(optimal_goodput(1.0, BETA, 0.0).is_nan());
        assert!(optimal_goodput(1.0, BETA, 1.5).is_nan());
        assert!(optimal_goodput(-1.0, BETA, CT).is_nan());
        assert!(optimal_goodput(f64::NAN, BETA, CT).is_nan());
        assert!(optimal_reject_fraction(1.0, f64::INFINITY, CT).is_nan());
        assert!(max_controllable_rate(0.5, CT).is_nan());
    }
}
