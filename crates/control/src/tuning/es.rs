//! Discrete Extremum Seeking with anti-windup, De Cicco, Cofano & Mascolo (journal
//! version), §VI-A, eqs. (11)–(13), after Killingsworth & Krstić (2006) with the
//! back-calculation of Tan, Li & Mareels (2013).
//!
//! Iteration `k` runs the experiment at `θ(k)` and measures `J(θ(k))`; then
//!
//! ```text
//! ζ(k)        = −h ζ(k−1) + J(θ(k−1))                                          (11)
//! θ̂_i(k+1)   = θ̂_i(k) + k_aw (sat(θ_i(k)) − θ_i(k))
//!               − γ_i α_i cos(ω_i k) (J(θ(k)) − (1+h) ζ(k))                    (12)
//! θ_i(k+1)    = θ̂_i(k+1) + α_i cos(ω_i (k+1))                                  (13)
//! ```
//!
//! `J − (1+h)ζ` is the high-pass filter `(z − 1)/(z + h)` removing the cost's DC part;
//! demodulating by the dither `α_i cos(ω_i k)` leaves a gradient estimate, and the
//! integrator with step `γ_i` descends it. The paper saturates at 0 only
//! (`sat(θ_i, 0)`, gains cannot be negative); here `sat` clamps into configurable
//! `[lower_i, upper_i]` (default `[0, ∞)`). An infeasible `θ` cannot be run, so the
//! experiment is run at `sat(θ(k))` ([`ExtremumSeeking::next_theta`]); the
//! back-calculation term pulls the estimate back toward the feasible set.
//!
//! Start: `θ(0) = θ_0` (the paper's "initial conditions", Table I), so
//! `θ̂(0) = θ_0 − α`; `ζ(0) = J(θ(0))/(1 + h)`, which starts the high-pass filter at
//! rest instead of treating the first cost as a step.
//!
//! Defaults (§VI-C): `γ = [10, 10, 10, 10]`, `h = 0.5`, `α = [1, 1, 1, 1]`,
//! `ω = [2.82, 2.54, 2.28, 2.06]` rad/iteration, `k_aw = 0.003`, `θ_0 = θ_1 =
//! [12, 12, 20, 130]` (Table I, run 1), `θ = [K_pc, K_ic, K_pq, K_iq]`.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EsConfig {
    /// `γ_i`, integrator step sizes.
    pub gamma: [f64; 4],
    /// `h`, the high-pass filter pole (|h| < 1).
    pub h: f64,
    /// `α_i`, dither amplitudes.
    pub alpha: [f64; 4],
    /// `ω_i`, dither frequencies, rad per iteration.
    pub omega: [f64; 4],
    /// `k_aw`, the anti-windup back-calculation gain.
    pub k_aw: f64,
    /// `θ(0)`.
    pub theta0: [f64; 4],
    /// Lower bounds of the feasible parameters (the paper: 0).
    pub lower: [f64; 4],
    /// Upper bounds; unset means none.
    pub upper: Option<[f64; 4]>,
    /// Largest change of `θ̂_i` in one iteration; unset means none (the paper's ES).
    /// sluice's addition: at the edge of stability a measured cost can jump by an order of
    /// magnitude from one iteration to the next (0.84 to 18.7 in the simulator when K_pc
    /// reached 0), and eq. (12) then throws `θ̂` hundreds of units away, into a flat
    /// region the dither cannot climb out of. The limit bounds that damage.
    pub max_step: Option<[f64; 4]>,
}

impl Default for EsConfig {
    fn default() -> Self {
        Self {
            gamma: [10.0; 4],
            h: 0.5,
            alpha: [1.0; 4],
            omega: [2.82, 2.54, 2.28, 2.06],
            k_aw: 0.003,
            theta0: [12.0, 12.0, 20.0, 130.0],
            lower: [0.0; 4],
            upper: None,
            max_step: None,
        }
    }
}

/// One iteration of the optimizer's history.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EsStep {
    /// `k`.
    pub iteration: u64,
    /// The parameters the experiment ran with, `sat(θ(k))`.
    pub theta: [f64; 4],
    /// `θ̂(k)`, the estimate before the dither.
    pub estimate: [f64; 4],
    /// The cost reported for the run (after substitution of a non-finite one).
    pub cost: f64,
}

/// The sans-IO optimizer: ask [`next_theta`](Self::next_theta), run the experiment,
/// hand its cost to [`report`](Self::report), repeat.
#[derive(Clone, Debug)]
pub struct ExtremumSeeking {
    gamma: [f64; 4],
    h: f64,
    alpha: [f64; 4],
    omega: [f64; 4],
    k_aw: f64,
    lower: [f64; 4],
    upper: [f64; 4],
    max_step: Option<[f64; 4]>,
    k: u64,
    estimate: [f64; 4],
    theta: [f64; 4],
    zeta: f64,
    previous_cost: Option<f64>,
    invalid_costs: u64,
    trajectory: Vec<EsStep>,
}

fn finite_or(x: f64, fallback: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        fallback
    }
}

impl ExtremumSeeking {
    /// Parameters that are not finite fall back to the paper's; `h` is kept inside
    /// `(−1, 1)` so the filter is stable; an upper bound below the lower one is raised.
    pub fn new(config: &EsConfig) -> Self {
        let paper = EsConfig::default();
        let mut lower = [0.0; 4];
        let mut upper = [f64::INFINITY; 4];
        let mut gamma = [0.0; 4];
        let mut alpha = [0.0; 4];
        let mut omega = [0.0; 4];
        let mut theta = [0.0; 4];
        for i in 0..4 {
            lower[i] = if config.lower[i].is_nan() {
                0.0
            } else {
                config.lower[i]
            };
            if let Some(u) = config.upper {
                if !u[i].is_nan() {
                    upper[i] = u[i].max(lower[i]);
                }
            }
            gamma[i] = finite_or(config.gamma[i], paper.gamma[i]);
            alpha[i] = finite_or(config.alpha[i], paper.alpha[i]);
            omega[i] = finite_or(config.omega[i], paper.omega[i]);
            theta[i] = finite_or(config.theta0[i], paper.theta0[i]);
        }
        let estimate = std::array::from_fn(|i| theta[i] - alpha[i]);
        Self {
            gamma,
            h: finite_or(config.h, paper.h).clamp(-0.999, 0.999),
            alpha,
            omega,
            k_aw: finite_or(config.k_aw, paper.k_aw),
            lower,
            upper,
            max_step: config
                .max_step
                .map(|m| std::array::from_fn(|i| if m[i].is_nan() { 0.0 } else { m[i] })),
            k: 0,
            estimate,
            theta,
            zeta: 0.0,
            previous_cost: None,
            invalid_costs: 0,
            trajectory: Vec::new(),
        }
    }

    fn saturate(&self, theta: [f64; 4]) -> [f64; 4] {
        std::array::from_fn(|i| theta[i].clamp(self.lower[i], self.upper[i]))
    }

    /// The parameters to run the next experiment with: `sat(θ(k))`.
    pub fn next_theta(&self) -> [f64; 4] {
        self.saturate(self.theta)
    }

    /// `θ̂(k)`, clamped into the bounds: the optimizer's current best guess without
    /// the dither.
    pub fn estimate(&self) -> [f64; 4] {
        self.saturate(self.estimate)
    }

    /// `θ̂(k)` as the integrator holds it (it may lie outside the bounds).
    pub fn raw_estimate(&self) -> [f64; 4] {
        self.estimate
    }

    /// `k`, the number of costs reported so far.
    pub fn iteration(&self) -> u64 {
        self.k
    }

    /// Costs that were not finite (replaced by the previous cost, or ignored if there
    /// was none).
    pub fn invalid_costs(&self) -> u64 {
        self.invalid_costs
    }

    pub fn trajectory(&self) -> &[EsStep] {
        &self.trajectory
    }

    /// The measured cost `J(θ(k))` of the experiment run at [`Self::next_theta`];
    /// advances to `k + 1`.
    #[allow(clippy::needless_range_loop)] // parallel per-parameter arrays
    pub fn report(&mut self, cost: f64) {
        let cost = if cost.is_finite() {
            cost
        } else {
            self.invalid_costs += 1;
            match self.previous_cost {
                Some(c) => c,
                None => return,
            }
        };
        let k = self.k as f64;
        self.trajectory.push(EsStep {
            iteration: self.k,
            theta: self.next_theta(),
            estimate: self.estimate,
            cost,
        });
        // Eq. (11); the first sample starts the filter at rest.
        self.zeta = match self.previous_cost {
            None => cost / (1.0 + self.h),
            Some(previous) => -self.h * self.zeta + previous,
        };
        let high_passed = cost - (1.0 + self.h) * self.zeta;
        let saturated = self.next_theta();
        for i in 0..4 {
            // Eq. (12).
            let back_calculation = self.k_aw * (saturated[i] - self.theta[i]);
            let gradient = self.alpha[i] * (self.omega[i] * k).cos() * high_passed;
            let mut step = back_calculation - self.gamma[i] * gradient;
            if let Some(limit) = self.max_step.map(|m| m[i]).filter(|m| *m > 0.0) {
                step = step.clamp(-limit, limit);
            }
            let next = self.estimate[i] + step;
            if next.is_finite() {
                self.estimate[i] = next;
            }
        }
        self.previous_cost = Some(cost);
        self.k += 1;
        let k = self.k as f64;
        // Eq. (13).
        for i in 0..4 {
            self.theta[i] = self.estimate[i] + self.alpha[i] * (self.omega[i] * k).cos();
        }
    }
}
