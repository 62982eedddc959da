//! A tuning run interrupted after some iterations and resumed ends where one run straight
//! through ends, file for file.

use std::ops::ControlFlow;
use std::path::Path;

use sluice_bench::console::Quiet;
use sluice_bench::tuning::{tune, Tuned, Tuning};
use sluice_sim::tuning::TuningExperiment;

const FILE: &str = r#"
name = "resume-test"
title = "short tuning"
iterations = 5
reference_theta = [3.5, 10.3, 19.2, 130.5]
[base]
duration_s = 10
warmup_s = 0
sources = [{ name = "UAC" }]
call = { holding_time_s = 0.5, callee_sends_trying = false, arrivals = "constant" }
re = { invite_queue = true, cost_forward_us = 2000, cost_other_us = 0, cost_reject_us = 533.3333, control = { algorithm = "pi" } }
[cost]
loads = [2.0]
run_length_ms = 2000
repetitions = 1
keep_best = 1
[es]
theta0 = [3.0, 9.0, 18.0, 120.0]
"#;

/// A folder of its own, removed when the returned guard drops.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sluice-tune-{name}-"))
        .tempdir()
        .unwrap()
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn run(
    e: &TuningExperiment,
    out: &Path,
    resume: bool,
    stop_after: Option<u64>,
) -> Result<Tuned, String> {
    let t = Tuning {
        experiment: e,
        text: FILE,
        out,
        jobs: 1,
        resume,
    };
    tune(&t, &Quiet, &mut |done| {
        if stop_after == Some(done) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
}

#[test]
fn an_interrupted_run_resumed_ends_as_one_run_straight_through() {
    let e = TuningExperiment::from_toml(FILE).unwrap();
    let straight_guard = scratch("straight");
    let straight = straight_guard.path().to_path_buf();
    let Tuned::Finished(done) = run(&e, &straight, false, None).unwrap() else {
        panic!("not stopped");
    };
    assert_eq!(done.result.trajectory.len(), 5);

    let split_guard = scratch("split");
    let split = split_guard.path().to_path_buf();
    assert!(matches!(
        run(&e, &split, false, Some(2)).unwrap(),
        Tuned::Stopped(2)
    ));
    // What the interruption left: two iterations on disk, no result.
    assert_eq!(read(&split, "trajectory.csv").lines().count(), 1 + 2);
    assert!(!split.join("result.json").exists());
    let Tuned::Finished(resumed) = run(&e, &split, true, None).unwrap() else {
        panic!("not stopped");
    };
    for f in ["trajectory.csv", "state.json", "result.json"] {
        assert_eq!(read(&straight, f), read(&split, f), "{f}");
    }
    assert_eq!(resumed.result.trajectory, done.result.trajectory);
    assert_eq!(resumed.final_cost.to_bits(), done.final_cost.to_bits());
}

#[test]
fn a_resume_needs_the_same_settings_and_a_state() {
    let e = TuningExperiment::from_toml(FILE).unwrap();
    let dir_guard = scratch("settings");
    let dir = dir_guard.path().to_path_buf();
    let err = run(&e, &dir, true, None).unwrap_err();
    assert!(err.contains("nothing to resume"), "{err}");
    assert!(matches!(
        run(&e, &dir, false, Some(1)).unwrap(),
        Tuned::Stopped(1)
    ));
    let mut other = e.clone();
    other.es.theta0[0] = 4.0;
    let err = run(&other, &dir, true, None).unwrap_err();
    assert!(err.contains("other settings"), "{err}");
    // Fewer iterations than are done already cannot be resumed to.
    let mut shorter = e.clone();
    shorter.iterations = 1;
    assert!(matches!(
        run(&shorter, &dir, true, None),
        Ok(Tuned::Finished(_))
    ));
    let mut none = e;
    none.iterations = 0;
    assert!(run(&none, &dir, true, None)
        .unwrap_err()
        .contains("more than the 0 asked for"));
}
