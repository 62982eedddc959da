//! `sluice sim` from outside: files written, byte-identical output for a seed, clear errors.

use std::path::Path;
use std::process::Command;

const EXPERIMENT: &str = r#"
name = "cli-test"
title = "tiny sweep"
[base]
duration_s = 40
warmup_s = 10
[sweep]
offered_load = [0.5, 3.0]
seeds = [5]
[[variant]]
label = "none"
scenario = { re = { control = { algorithm = "none" } } }
[[variant]]
label = "win-cont"
scenario = { re = { control = { algorithm = "win-cont" } } }
"#;

fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A folder of its own, removed when the returned guard drops.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sluice-cli-test-{name}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn a_run_writes_summary_runs_and_plots_identically_for_a_seed() {
    let dir_guard = scratch("runs");
    let dir = dir_guard.path().to_path_buf();
    let file = dir.join("exp.toml");
    std::fs::write(&file, EXPERIMENT).unwrap();
    let mut summaries = Vec::new();
    for out in ["a", "b"] {
        let out = dir.join(out);
        let (code, stdout, stderr) = sluice(&[
            "sim",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--jobs",
            "2",
        ]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains("win-cont"), "{stdout}");
        for f in [
            "summary.csv",
            "runs.jsonl",
            "cli-test.svg",
            "cli-test-setup-delay.svg",
        ] {
            assert!(Path::new(&out).join(f).exists(), "{f} missing");
        }
        summaries.push(std::fs::read(out.join("summary.csv")).unwrap());
    }
    assert_eq!(
        summaries[0], summaries[1],
        "same seed, same bytes, however many jobs"
    );
    let text = String::from_utf8(summaries.remove(0)).unwrap();
    let header = text.lines().next().unwrap();
    for column in [
        "experiment",
        "algorithm",
        "offered_load",
        "goodput",
        "goodput_cps",
        "retrans_ratio",
        "setup_delay_p50_ms",
        "setup_delay_p99_ms",
        "occupancy",
        "reject_ratio",
    ] {
        assert!(header.split(',').any(|c| c == column), "column {column}");
    }
    assert_eq!(text.lines().count(), 5, "a header and four runs");
}

#[test]
fn list_names_the_built_in_figures() {
    let (code, stdout, _) = sluice(&["sim", "--list"]);
    assert_eq!(code, 0);
    for name in ["shen2008-fig04", "shen2008-fig21", "shen2008-fig27-31"] {
        assert!(stdout.contains(name), "{name}");
    }
    // The tuner's experiment is listed too, with the command that runs it.
    assert!(stdout.contains("sluice tune decicco-es-tuning"), "{stdout}");
}

#[test]
fn bad_experiments_fail_with_one_clear_line() {
    let (code, _, stderr) = sluice(&["sim", "no-such-experiment"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a built-in experiment"), "{stderr}");
    let dir_guard = scratch("bad");
    let dir = dir_guard.path().to_path_buf();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        EXPERIMENT.replace("duration_s = 40", "duration_s = -1"),
    )
    .unwrap();
    let (code, _, stderr) = sluice(&[
        "sim",
        file.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.starts_with("error: experiment cli-test"), "{stderr}");
}
