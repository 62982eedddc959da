#![allow(clippy::needless_range_loop)] // parallel per-parameter arrays

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const OPTIMUM: [f64; 4] = [3.5, 10.3, 19.2, 130.5];

fn quadratic(weights: [f64; 4], optimum: [f64; 4]) -> impl FnMut(&[f64; 4]) -> f64 {
    move |theta| {
        0.29 + (0..4)
            .map(|i| weights[i] * (theta[i] - optimum[i]).powi(2))
            .sum::<f64>()
    }
}

#[test]
fn converges_on_a_quadratic_and_settles() {
    let mut cost = quadratic([0.004; 4], OPTIMUM);
    let r = tune(&mut cost, &EsConfig::default(), 1500);
    for i in 0..4 {
        assert!(
            (r.estimate[i] - OPTIMUM[i]).abs() < 0.5,
            "θ̂ = {:?}",
            r.estimate
        );
    }
    // Settled: over the last 400 iterations the estimate only ripples (the dither
    // leaking through the integrator) around a mean that no longer moves.
    let tail = &r.trajectory[r.trajectory.len() - 400..];
    let mean = |steps: &[EsStep], i: usize| {
        steps.iter().map(|s| s.estimate[i]).sum::<f64>() / steps.len() as f64
    };
    for i in 0..4 {
        let (lo, hi) = tail.iter().fold((f64::MAX, f64::MIN), |(lo, hi), s| {
            (lo.min(s.estimate[i]), hi.max(s.estimate[i]))
        });
        assert!(hi - lo < 1.0, "θ̂_{i} wanders over {lo}..{hi}");
        let (early, late) = tail.split_at(200);
        assert!((mean(early, i) - mean(late, i)).abs() < 0.1);
        assert!(
            (mean(late, i) - OPTIMUM[i]).abs() < 0.25,
            "θ̂_{i} settles at {}",
            mean(late, i)
        );
    }
    let first = r.trajectory[0].cost;
    assert!(r.best_cost < first);
    assert!(r.trajectory.last().unwrap().cost < 0.29 + 0.02);
}

#[test]
fn anti_windup_keeps_an_optimum_outside_the_bounds_from_dragging_the_estimate_away() {
    // The cost keeps falling towards negative K_pc, which cannot be run. (The paper's
    // γ = 10 suits costs of order 1 whose slopes are a few hundredths per unit, like
    // its J; much steeper costs make the loop itself unstable.)
    let optimum = [-3.0, 10.3, 19.2, 130.5];
    let run = |k_aw: f64| {
        let config = EsConfig {
            k_aw,
            ..EsConfig::default()
        };
        let mut cost = quadratic([0.004; 4], optimum);
        tune(&mut cost, &config, 1500)
    };
    let guarded = run(0.5);
    for s in &guarded.trajectory {
        assert!(s.theta.iter().all(|x| *x >= 0.0), "ran {:?}", s.theta);
    }
    let mut es = ExtremumSeeking::new(&EsConfig {
        k_aw: 0.5,
        ..EsConfig::default()
    });
    let mut cost = quadratic([0.004; 4], optimum);
    for _ in 0..1500 {
        let t = es.next_theta();
        es.report(cost(&t));
    }
    let raw = es.raw_estimate()[0];
    assert!(raw > -2.0 && raw < 1.0, "θ̂_0 = {raw}");
    assert!(guarded.estimate[0].abs() < 1e-12);
    // The other parameters still find their optimum.
    for i in 1..4 {
        assert!(
            (guarded.estimate[i] - optimum[i]).abs() < 0.5,
            "{:?}",
            guarded.estimate
        );
    }
    // Without back-calculation the integrator drifts further into the infeasible side.
    let unguarded = run(0.0).trajectory.last().unwrap().estimate[0];
    assert!(unguarded < raw, "{unguarded} vs {raw}");
}

#[test]
fn upper_bounds_hold_too() {
    let config = EsConfig {
        upper: Some([5.0, 100.0, 100.0, 125.0]),
        k_aw: 0.5,
        ..EsConfig::default()
    };
    let mut cost = quadratic([0.004; 4], OPTIMUM);
    let r = tune(&mut cost, &config, 1500);
    assert!(r
        .trajectory
        .iter()
        .all(|s| s.theta[3] <= 125.0 && s.theta[0] <= 5.0));
    assert!((r.estimate[3] - 125.0).abs() < 1e-9);
}

#[test]
fn noisy_tuning_repeats_exactly_for_a_seed() {
    let run = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut clean = quadratic([0.004; 4], OPTIMUM);
        let mut noisy = move |theta: &[f64; 4]| clean(theta) + rng.gen_range(-0.01..0.01);
        tune(&mut noisy, &EsConfig::default(), 300)
    };
    assert_eq!(run(4), run(4));
    assert_ne!(run(4), run(5));
}

#[test]
fn unmeasurable_costs_are_skipped_not_propagated() {
    let mut n = 0;
    let mut flaky = |theta: &[f64; 4]| {
        n += 1;
        if n % 3 == 0 || n == 1 {
            f64::NAN
        } else {
            theta.iter().sum::<f64>() * 1e-3
        }
    };
    let r = tune(&mut flaky, &EsConfig::default(), 30);
    assert_eq!(r.invalid_costs, 11);
    assert!(r.trajectory.iter().all(|s| s.cost.is_finite()));
    assert!(r.estimate.iter().all(|x| x.is_finite()));
    let mut es = ExtremumSeeking::new(&EsConfig {
        h: f64::NAN,
        gamma: [f64::INFINITY; 4],
        theta0: [f64::NAN; 4],
        lower: [f64::NAN; 4],
        upper: Some([f64::NAN, -1.0, 1e300, 5.0]),
        ..EsConfig::default()
    });
    for _ in 0..10 {
        let t = es.next_theta();
        assert!(t.iter().all(|x| !x.is_nan()));
        es.report(1e308);
    }
}

#[test]
fn a_step_limit_bounds_how_far_one_cost_spike_throws_the_estimate() {
    let limited = EsConfig {
        max_step: Some([0.5, 0.5, 0.5, 0.5]),
        ..EsConfig::default()
    };
    for (config, bounded) in [(EsConfig::default(), false), (limited, true)] {
        let mut es = ExtremumSeeking::new(&config);
        es.report(1.0);
        es.report(1.0);
        let before = es.raw_estimate();
        es.report(50.0);
        let after = es.raw_estimate();
        let moved = (0..4)
            .map(|i| (after[i] - before[i]).abs())
            .fold(0.0, f64::max);
        if bounded {
            assert!(moved <= 0.5 + 1e-12, "moved {moved}");
        } else {
            assert!(moved > 10.0, "the paper's ES should jump, moved {moved}");
        }
    }
}
