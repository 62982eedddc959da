//! A sweep run in three shards and merged writes exactly what one unsharded run writes; the
//! merge refuses an incomplete or mixed set of shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_bench::console::Quiet;
use sluice_bench::sweep::{run_all, run_shard};
use sluice_report::experiment::write_all;
use sluice_report::shard::{merge, Shard};
use sluice_sim::experiment::{Experiment, Overrides};

/// Five points, so the shards hold 2, 2 and 1.
const SWEEP: &str = r#"
name = "shard-sweep"
title = "tiny sweep in shards"
[base]
duration_s = 8
warmup_s = 2
[sweep]
offered_load = [0.5, 1.5, 3.0, 6.0, 9.0]
seeds = [7]
[[variant]]
label = "rate-abs"
scenario = { re = { control = { algorithm = "rate-abs" } } }
"#;

/// Time series (with NaN where the RE had no estimate) and per-run plots.
const DYNAMIC: &str = r#"
name = "shard-dynamic"
title = "tiny dynamic load in shards"
kind = "dynamic"
seeds = [1]
[base]
duration_s = 10
warmup_s = 0
[[base.sources]]
name = "UA1"
share = 1.0
schedule = [{ at_s = 0.0, load = 0.4 }]
[[base.sources]]
name = "UA2"
share = 1.0
schedule = [{ at_s = 4.0, load = 2.0 }]
[plot]
dynamics = true
[[variant]]
label = "none"
scenario = { re = { control = { algorithm = "none" } } }
[[variant]]
label = "win-disc"
scenario = { re = { control = { algorithm = "win-disc" } } }
[[variant]]
label = "rate-abs"
scenario = { re = { control = { algorithm = "rate-abs" } } }
"#;

/// Four sampled topologies, small and short, judged against no control.
const SAMPLE: &str = r#"
name = "shard-sample"
title = "tiny topology sample in shards"
kind = "sample"
[sample]
topologies = 4
seed = 3
sources = [1, 3]
holding_time_s = [5, 10]
re_service_mps = [200, 400]
queue_capacity = [100, 300]
measure_s = 6
warmup_holding_times = 0.5
min_warmup_s = 3
[[variant]]
label = "none"
scenario = { re = { control = { algorithm = "none" } } }
[[variant]]
label = "win-cont"
scenario = { re = { control = { algorithm = "win-cont" } } }
"#;

/// A test's own folder, removed when the guard drops.
fn scratch_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sluice-shards-")
        .tempdir()
        .unwrap()
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Runs `text` whole and in three shards; returns the whole output's folder and the shards'.
fn whole_and_shards(root: &Path, text: &str, tag: &str) -> (PathBuf, Vec<PathBuf>) {
    let overrides = Overrides::default();
    let e = Experiment::from_toml(text, &overrides).unwrap();
    let whole = root.join(format!("{tag}-whole"));
    run_all(&e, 2, &whole, &Quiet).unwrap();
    let shards: Vec<PathBuf> = (1..=3)
        .map(|i| {
            let dir = root.join(format!("{tag}-shard{i}"));
            let runs = run_shard(
                &e,
                text,
                &overrides,
                Shard::new(i, 3).unwrap(),
                1,
                &dir,
                &Quiet,
            )
            .unwrap();
            assert_eq!(
                runs.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
                (i - 1..e.points.len()).step_by(3).collect::<Vec<_>>()
            );
            dir
        })
        .collect();
    (whole, shards)
}

fn assert_merge_equals(root: &Path, whole: &Path, shards: &[PathBuf], tag: &str) {
    // In any order.
    let mut given = shards.to_vec();
    given.reverse();
    let merged = merge(&given).unwrap();
    let out = root.join(format!("{tag}-merged"));
    write_all(&out, &merged.experiment, &merged.reports).unwrap();
    let (a, b) = (files(whole), files(&out));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same files"
    );
    for (name, bytes) in &a {
        assert!(bytes == &b[name], "{} differs", name.display());
    }
}

#[test]
fn three_shards_merged_are_the_unsharded_sweep_byte_for_byte() {
    let root = scratch_root();
    let (whole, shards) = whole_and_shards(root.path(), SWEEP, "sweep");
    assert!(files(&whole).len() >= 5, "summary, runs and three plots");
    assert_merge_equals(root.path(), &whole, &shards, "sweep");

    // A missing shard is named.
    let err = merge(&[shards[0].clone(), shards[2].clone()]).unwrap_err();
    assert!(err.contains("missing shard(s) 2/3"), "{err}");
    // A shard given twice is refused.
    let err = merge(&[shards[0].clone(), shards[1].clone(), shards[1].clone()]).unwrap_err();
    assert!(err.contains("shard 2/3 given twice"), "{err}");
    // Shards of another experiment (here: other overrides) do not mix.
    let other = root.path().join("sweep-other");
    let overrides = Overrides {
        duration_s: Some(6.0),
        ..Overrides::default()
    };
    let e = Experiment::from_toml(SWEEP, &overrides).unwrap();
    run_shard(
        &e,
        SWEEP,
        &overrides,
        Shard::new(2, 3).unwrap(),
        1,
        &other,
        &Quiet,
    )
    .unwrap();
    let err = merge(&[shards[0].clone(), other, shards[2].clone()]).unwrap_err();
    assert!(err.contains("different overrides"), "{err}");
    let text = SWEEP.replace("seeds = [7]", "seeds = [8]");
    let e = Experiment::from_toml(&text, &Overrides::default()).unwrap();
    let changed = root.path().join("sweep-changed");
    run_shard(
        &e,
        &text,
        &Overrides::default(),
        Shard::new(2, 3).unwrap(),
        1,
        &changed,
        &Quiet,
    )
    .unwrap();
    let err = merge(&[shards[0].clone(), changed, shards[2].clone()]).unwrap_err();
    assert!(err.contains("different experiments"), "{err}");

    // `--set` is an override the shards record: shards with one merge into the experiment
    // it makes, and do not mix with shards without it.
    let set = Overrides {
        set: vec!["sweep.offered_load=[0.5, 3.0]".into()],
        ..Overrides::default()
    };
    let e = Experiment::from_toml(SWEEP, &set).unwrap();
    let with_set: Vec<PathBuf> = (1..=3)
        .map(|i| {
            let dir = root.path().join(format!("sweep-set{i}"));
            run_shard(&e, SWEEP, &set, Shard::new(i, 3).unwrap(), 1, &dir, &Quiet).unwrap();
            dir
        })
        .collect();
    let merged = merge(&with_set).unwrap();
    assert_eq!(merged.overrides.set, set.set);
    assert_eq!(merged.experiment.points.len(), e.points.len());
    let xs: Vec<f64> = merged.experiment.points.iter().map(|p| p.x).collect();
    assert_eq!(xs, e.points.iter().map(|p| p.x).collect::<Vec<_>>());
    let err = merge(&[shards[0].clone(), with_set[1].clone(), shards[2].clone()]).unwrap_err();
    assert!(
        err.contains("different overrides") && err.contains("sweep.offered_load=[0.5, 3.0]"),
        "{err}"
    );
    // A folder that is not a shard's.
    let err = merge(&[whole]).unwrap_err();
    assert!(err.contains("not a shard's output"), "{err}");
}

#[test]
fn a_dynamic_experiments_shards_merge_into_its_time_series_and_plots() {
    let root = scratch_root();
    let (whole, shards) = whole_and_shards(root.path(), DYNAMIC, "dynamic");
    let names = files(&whole);
    assert!(
        names.keys().any(|p| p.starts_with("timeseries")),
        "{:?}",
        names.keys()
    );
    assert_merge_equals(root.path(), &whole, &shards, "dynamic");
}

#[test]
fn a_sampled_experiment_in_shards_merges_to_the_same_claims() {
    let root = scratch_root();
    let (whole, shards) = whole_and_shards(root.path(), SAMPLE, "sample");
    let written = files(&whole);
    for name in ["claims.csv", "worst.csv", "topologies.csv", "summary.csv"] {
        assert!(written.contains_key(Path::new(name)), "{name} written");
    }
    let claims = String::from_utf8(written[Path::new("claims.csv")].clone()).unwrap();
    assert_eq!(
        claims.lines().count(),
        1 + sluice_report::claims::Claim::ALL.len(),
        "one row per claim for the one control: {claims}"
    );
    let topologies = String::from_utf8(written[Path::new("topologies.csv")].clone()).unwrap();
    assert_eq!(topologies.lines().count(), 1 + 4, "{topologies}");
    assert_merge_equals(root.path(), &whole, &shards, "sample");
}
