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
    // Every file but meta.json (which records when and how it was run) is the same.
    let files = |d: &str| {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "meta.json")
            .collect();
        names.sort();
        names
    };
    assert_eq!(files("a"), files("b"));
    for name in files("a") {
        assert_eq!(
            std::fs::read(dir.join("a").join(&name)).unwrap(),
            std::fs::read(dir.join("b").join(&name)).unwrap(),
            "{name} differs between two runs"
        );
    }
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

/// The experiment's file, the one given on the command line, as `sluice sim` reads it.
fn meta(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap()
}

#[test]
fn set_overrides_reach_the_runs_and_meta_json_records_them() {
    let dir_guard = scratch("set");
    let dir = dir_guard.path().to_path_buf();
    let file = dir.join("exp.toml");
    std::fs::write(&file, EXPERIMENT).unwrap();
    let out = dir.join("out");
    let (code, _, stderr) = sluice(&[
        "sim",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--set",
        "sweep.offered_load=[0.5]",
        "--set",
        "sweep.seeds=[7, 8]",
        "--set",
        "variant.1.label=window",
        "--duration",
        "20s",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert_eq!(
        summary.lines().count(),
        5,
        "two variants, one load, two seeds:\n{summary}"
    );
    assert!(
        summary.contains(",window,"),
        "the relabelled variant:\n{summary}"
    );
    let m = meta(&out);
    let args: Vec<&str> = m["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.ends_with(&["--duration", "20s"]), "{args:?}");
    assert!(args.contains(&"variant.1.label=window"), "{args:?}");
    assert_eq!(m["experiment"]["name"], "cli-test");
    assert_eq!(
        m["experiment"]["file"]["sweep"]["seeds"],
        serde_json::json!([7, 8])
    );
    assert_eq!(m["experiment"]["file"]["variant"][1]["label"], "window");
    assert_eq!(m["experiment"]["overrides"]["duration_s"], 20.0);
    assert_eq!(m["seeds"], serde_json::json!([7, 8]));
    assert_eq!(m["sluice_version"], env!("CARGO_PKG_VERSION"));
    assert!(m["cores"].as_u64().unwrap() >= 1);
    assert!(m["started"].as_str().unwrap().ends_with('Z'));

    // A key the experiment does not have is named, whichever table it is in.
    for (set, says) in [
        (
            "base.re.queue_capacityy=5",
            "unknown field `queue_capacityy`",
        ),
        ("sweeps.seeds=[1]", "unknown field `sweeps`"),
        ("variant.5.label=x", "variant is an array of 2"),
        ("name", "expected PATH=VALUE"),
    ] {
        let (code, _, stderr) = sluice(&[
            "sim",
            file.to_str().unwrap(),
            "--out",
            dir.join("bad").to_str().unwrap(),
            "--set",
            set,
        ]);
        assert_eq!(code, 1, "{set}");
        assert!(stderr.contains(&format!("--set {set}")), "{set}: {stderr}");
        assert!(stderr.contains(says), "{set}: {stderr}");
    }
    assert!(!dir.join("bad").join("meta.json").exists());
}

#[test]
fn print_scenario_prints_the_experiment_the_run_reads() {
    let dir_guard = scratch("print");
    let dir = dir_guard.path().to_path_buf();
    let file = dir.join("exp.toml");
    std::fs::write(&file, EXPERIMENT).unwrap();
    let (code, printed, stderr) = sluice(&[
        "sim",
        "--print-scenario",
        file.to_str().unwrap(),
        "--set",
        "base.re.queue_capacity=77",
        "--seed",
        "9",
        "--load",
        "3",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: toml::Table = toml::from_str(&printed).unwrap();
    assert_eq!(doc["base"]["re"]["queue_capacity"].as_integer(), Some(77));
    assert_eq!(doc["sweep"]["seeds"].as_array().unwrap().len(), 1);
    assert_eq!(doc["sweep"]["offered_load"].as_array().unwrap().len(), 1);
    // Run as printed, with no flags, it gives the bytes the flags give.
    let printed_file = dir.join("printed.toml");
    std::fs::write(&printed_file, &printed).unwrap();
    let run = |args: &[&str], out: &str| {
        let out = dir.join(out);
        let mut all = vec!["sim", "--out", out.to_str().unwrap()];
        all.extend_from_slice(args);
        let (code, _, stderr) = sluice(&all);
        assert_eq!(code, 0, "{stderr}");
        std::fs::read(out.join("summary.csv")).unwrap()
    };
    let flagged = run(
        &[
            file.to_str().unwrap(),
            "--set",
            "base.re.queue_capacity=77",
            "--seed",
            "9",
            "--load",
            "3",
        ],
        "flagged",
    );
    assert_eq!(flagged, run(&[printed_file.to_str().unwrap()], "printed"));
    // A built-in one by name.
    let (code, printed, _) = sluice(&["sim", "--print-scenario", "shen2008-fig04"]);
    assert_eq!(code, 0);
    assert!(printed.contains("name = \"shen2008-fig04\""), "{printed}");
    // --duration acts on every run, not on the file: it is refused with what to use.
    let (code, _, stderr) = sluice(&[
        "sim",
        "--print-scenario",
        "shen2008-fig04",
        "--duration",
        "30s",
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--set base.duration_s="), "{stderr}");
}
