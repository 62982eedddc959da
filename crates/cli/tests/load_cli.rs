//! `sluice load` argument checking: every run must stop by itself, traffic leaves loopback
//! only from a `--bind` address off it, schedules parsed from flags or TOML with clear
//! errors.

use std::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn uac(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(SLUICE)
        .args(["load", "uac"])
        .args(args)
        .output()
        .expect("run sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_run_without_an_end_is_refused() {
    let (ok, _, err) = uac(&["--target", "127.0.0.1:5060", "--rate", "10"]);
    assert!(!ok);
    assert!(err.contains("--duration and/or --calls"), "{err}");
}

#[test]
fn load_leaves_loopback_only_from_an_address_off_it() {
    // The default --bind is 127.0.0.1:0: a target elsewhere is refused before anything is
    // sent, and the error says what to give.
    let (ok, _, err) = uac(&["--target", "192.0.2.1:5060", "--rate", "10", "--calls", "1"]);
    assert!(!ok);
    assert!(
        err.contains("--bind 127.0.0.1:0 cannot reach --target 192.0.2.1:5060"),
        "{err}"
    );
}

#[test]
fn bad_schedules_name_the_problem() {
    for (spec, want) in [
        ("0:10,0:20", "must increase"),
        ("5", "SECONDS:RATE"),
        ("0:-3", "not within"),
    ] {
        let (ok, _, err) = uac(&[
            "--target",
            "127.0.0.1:9",
            "--schedule",
            spec,
            "--calls",
            "1",
        ]);
        assert!(!ok, "{spec}");
        assert!(err.contains(want), "{spec}: {err}");
    }
}

#[test]
fn a_toml_schedule_runs_and_the_summary_echoes_it() {
    let dir = std::env::temp_dir().join(format!("sluice-load-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("steps.toml");
    std::fs::write(&file, "schedule = [[0, 0], [0.2, 50]]\n").unwrap();
    // Nobody listens on the discard port: the calls stay unanswered, and with a 0.1 s drain
    // timeout the run ends by itself with them unfinished.
    let (ok, stdout, err) = uac(&[
        "--target",
        "127.0.0.1:9",
        "--schedule",
        file.to_str().unwrap(),
        "--duration",
        "400ms",
        "--drain-timeout",
        "100ms",
    ]);
    assert!(ok, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["schedule"],
        serde_json::json!([[0.0, 0.0], [0.2, 50.0]])
    );
    // 50 calls/s from 0.2 s to 0.4 s: 10 calls, none answered.
    assert_eq!(summary["summary"]["offered"], 10);
    assert_eq!(summary["summary"]["unfinished"], 10);
    assert_eq!(summary["summary"]["successful"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}
