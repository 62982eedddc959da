//! Short, seeded versions of the claims of De Cicco, Cofano & Mascolo (journal version) that
//! `experiments/decicco-*.toml` reproduce at length: the dual-loop PI holds near the
//! optimal-goodput bound `g_opt(r)` with few retransmissions and short call setup, while
//! OCC and Ohta fall apart. Thresholds are the acceptance criteria.

use sluice_control::optimal::optimal_goodput;
use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::{run, RunReport};

fn fig11_12(duration_s: f64, loads: &[f64]) -> Vec<(String, f64, RunReport)> {
    let path = format!(
        "{}/../../experiments/decicco-fig11-12.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let overrides = Overrides {
        seeds: Some(vec![3]),
        duration_s: Some(duration_s),
        loads: Some(loads.to_vec()),
        ..Overrides::default()
    };
    let e = Experiment::from_toml(&text, &overrides).unwrap();
    e.points
        .iter()
        .map(|p| (p.variant.clone(), p.x, run(&p.scenario)))
        .collect()
}

fn find<'a>(runs: &'a [(String, f64, RunReport)], variant: &str, load: f64) -> &'a RunReport {
    &runs
        .iter()
        .find(|(v, l, _)| v == variant && (l - load).abs() < 1e-9)
        .unwrap()
        .2
}

#[test]
fn pi_tracks_the_optimal_goodput_bound_with_few_retransmissions_and_fast_setup() {
    let loads = [1.0, 1.4, 1.8, 2.0, 2.5];
    let runs = fig11_12(40.0, &loads);
    for &r in &loads {
        let pi = find(&runs, "PI", r);
        assert!(pi.beta > 3.7 && pi.beta < 3.8, "beta {}", pi.beta);
        let bound = optimal_goodput(r, pi.beta, 0.9);
        assert!(
            pi.goodput >= 0.9 * bound,
            "PI at r = {r}: goodput {:.3} < 0.9 g_opt = {:.3}",
            pi.goodput,
            0.9 * bound
        );
        assert!(
            pi.retrans_ratio < 0.1,
            "PI at r = {r}: retransmission ratio {:.3}",
            pi.retrans_ratio
        );
        // Call establishment within 2x the queueing target T_q = 50 ms.
        assert!(
            pi.setup_delay_mean_ms < 100.0,
            "PI at r = {r}: mean setup {:.1} ms",
            pi.setup_delay_mean_ms
        );
    }
}

#[test]
fn at_twice_capacity_pi_beats_occ_and_ohta_and_ohta_collapses_past_one() {
    let runs = fig11_12(40.0, &[1.2, 2.0]);
    let pi = find(&runs, "PI", 2.0).goodput;
    for other in ["OCC 80%", "OCC 90%", "Ohta"] {
        let g = find(&runs, other, 2.0).goodput;
        assert!(
            pi > g + 0.05,
            "at r = 2 PI {pi:.3} does not beat {other} {g:.3}"
        );
    }
    // Ohta's step-like drop once r exceeds 1: far below what PI keeps at the same load.
    let ohta = find(&runs, "Ohta", 1.2);
    let pi = find(&runs, "PI", 1.2);
    assert!(
        ohta.goodput < 0.6 * pi.goodput,
        "Ohta at 1.2: {:.3} vs PI {:.3}",
        ohta.goodput,
        pi.goodput
    );
}
