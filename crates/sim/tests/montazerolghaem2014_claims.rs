//! Short, seeded versions of what `experiments/montazerolghaem2014-*.toml` reproduce at
//! length: the fuzzy window (Montazerolghaem & Yaghmaee 2014) holds the core proxy near its
//! capacity from 1x to 4x where no control collapses, harms nothing below capacity, and
//! splits the capacity equally between edge proxies.

use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::{run, RunReport};

fn experiment(name: &str, duration_s: Option<f64>, loads: Option<Vec<f64>>) -> Experiment {
    let path = format!(
        "{}/../../experiments/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let overrides = Overrides {
        seeds: Some(vec![2]),
        duration_s,
        loads,
        ..Overrides::default()
    };
    Experiment::from_toml(&text, &overrides).unwrap()
}

#[test]
fn fuzzy_window_holds_capacity_to_4x_and_harms_nothing_below_it() {
    let loads = [0.9, 1.0, 2.0, 4.0];
    let e = experiment(
        "montazerolghaem2014-fig26",
        Some(30.0),
        Some(loads.to_vec()),
    );
    let runs: Vec<(String, f64, RunReport)> = e
        .points
        .iter()
        .filter(|p| p.variant == "fuzzy" || p.variant == "no control")
        .map(|p| (p.variant.clone(), p.x, run(&p.scenario)))
        .collect();
    let find = |variant: &str, load: f64| {
        &runs
            .iter()
            .find(|(v, l, _)| v == variant && (l - load).abs() < 1e-9)
            .unwrap()
            .2
    };
    // Below capacity: what no control carries, which is all that is offered.
    let (fuzzy, none) = (find("fuzzy", 0.9), find("no control", 0.9));
    assert!(
        (fuzzy.goodput - none.goodput).abs() <= 0.02 * none.goodput,
        "0.9x: fuzzy {:.3}, no control {:.3}",
        fuzzy.goodput,
        none.goodput
    );
    assert!((fuzzy.goodput - fuzzy.offered_load).abs() <= 0.02 * fuzzy.offered_load);
    for load in [1.0, 2.0, 4.0] {
        let f = find("fuzzy", load);
        assert!(
            f.goodput >= 0.9,
            "fuzzy at {load}x: goodput {:.3}",
            f.goodput
        );
        assert!(
            f.retrans_ratio < 0.01,
            "fuzzy at {load}x: retransmission ratio {:.3}",
            f.retrans_ratio
        );
    }
    // Without control the same proxy collapses.
    assert!(find("no control", 2.0).goodput < 0.1);
}

/// Mean per-source goodput (calls/s) over `[from_s, to_s)` of a dynamic run.
fn shares(r: &RunReport, from_s: f64, to_s: f64) -> Vec<f64> {
    let ts = r
        .timeseries
        .as_ref()
        .expect("dynamic runs keep a time series");
    let points: Vec<_> = ts
        .points
        .iter()
        .filter(|p| p.t_s >= from_s && p.t_s < to_s)
        .collect();
    let n = points.len() as f64;
    (0..r.per_source.len())
        .map(|i| points.iter().map(|p| p.goodput_cps[i]).sum::<f64>() / n)
        .collect()
}

#[test]
fn fuzzy_windows_split_the_core_equally_between_edges() {
    let e = experiment("montazerolghaem2014-fig30", None, None);
    let point = e.points.iter().find(|p| p.variant == "fuzzy").unwrap();
    let mut scenario = point.scenario.clone();
    // Shortened: each phase 40 s instead of 100 s.
    scenario.duration_s = 120.0;
    scenario.sources[1].schedule = vec![
        sluice_sim::LoadStep {
            at_s: 40.0,
            load: 0.93,
        },
        sluice_sim::LoadStep {
            at_s: 80.0,
            load: 0.0,
        },
    ];
    let r = run(&scenario);
    let both = shares(&r, 50.0, 80.0);
    let total: f64 = both.iter().sum();
    let jain = total * total / (both.len() as f64 * both.iter().map(|g| g * g).sum::<f64>());
    for g in &both {
        assert!(
            (g / total - 0.5).abs() <= 0.07,
            "shares {both:?} of {total:.1} calls/s"
        );
    }
    assert!(jain > 0.99, "Jain index {jain:.4}");
    assert!(total >= 0.9 * r.capacity_cps, "together {total:.1} calls/s");
    // Alone, an edge gets what it offers (0.93 of capacity) before and after.
    for (from, to) in [(10.0, 40.0), (90.0, 120.0)] {
        let alone = shares(&r, from, to)[0];
        assert!(
            alone >= 0.9 * r.capacity_cps,
            "edge1 alone over {from}-{to} s: {alone:.1} calls/s"
        );
    }
}
