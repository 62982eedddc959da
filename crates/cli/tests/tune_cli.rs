//! `sluice tune` from outside: `--set` and `--run-length` reach the tuning, and meta.json
//! records them; a `--set` the file cannot take is named.

use std::process::Command;

const TUNING: &str = r#"
name = "cli-tune"
title = "one short iteration"
iterations = 3
[base]
duration_s = 10
warmup_s = 0
sources = [{ name = "UAC" }]
call = { holding_time_s = 0.5, callee_sends_trying = false, arrivals = "constant" }
re = { invite_queue = true, cost_forward_us = 2000, cost_other_us = 0, cost_reject_us = 533.3333, control = { algorithm = "pi" } }
[cost]
loads = [2.0]
run_length_ms = 8000
repetitions = 1
keep_best = 1
"#;

fn sluice(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn set_and_run_length_reach_the_tuning_and_meta_json() {
    let dir = tempfile::Builder::new()
        .prefix("sluice-cli-tune-")
        .tempdir()
        .unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, TUNING).unwrap();
    let out = dir.path().join("out");
    let (code, stderr) = sluice(&[
        "tune",
        file.to_str().unwrap(),
        "--iterations",
        "1",
        "--run-length",
        "2s",
        "--set",
        "cost.loads=[1.5]",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("(2 s each)"), "{stderr}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["experiment"]["file"]["cost"]["loads"],
        serde_json::json!([1.5])
    );
    assert_eq!(
        meta["experiment"]["set"],
        serde_json::json!(["cost.loads=[1.5]"])
    );
    assert_eq!(meta["experiment"]["run_length_s"], 2.0);
    assert_eq!(meta["experiment"]["iterations"], 1);
    assert_eq!(meta["seeds"], serde_json::json!([1]));
    assert_eq!(meta["command_line"][1], "tune");
    assert!(out.join("trajectory.csv").is_file());

    let bad = dir.path().join("bad");
    let (code, stderr) = sluice(&[
        "tune",
        file.to_str().unwrap(),
        "--set",
        "cost.lods=1",
        "--out",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--set cost.lods=1: unknown field `lods`"),
        "{stderr}"
    );
    let (code, stderr) = sluice(&["tune", file.to_str().unwrap(), "--run-length", "2"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("add a unit"), "{stderr}");
}
