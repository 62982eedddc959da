//! `sluice bench soak` on real loopback sockets, shortened to three 4 s intervals (the
//! first warm-up), once with the PI in one proxy and once with win-cont in the hop-by-hop
//! topology, every proxy a child process. Assertions are coarse (the machine may be
//! loaded): the files and their shape, a resident memory read for every proxy, and goodput
//! well above a collapse; the verdict itself needs the long run.

use std::path::{Path, PathBuf};
use std::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// soak.csv as its header and its rows, split at commas.
fn csv(dir: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(dir.join("soak.csv")).unwrap();
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    (header, rows)
}

/// Runs a short soak of `control` and checks what every soak writes; returns the counted
/// intervals' mean normalised goodput.
fn short_soak(control: &str, proxies: &[&str]) -> f64 {
    let out = temp_dir(&format!("soak-{control}"));
    let run = Command::new(SLUICE)
        .args([
            "bench",
            "soak",
            "--control",
            control,
            "--duration",
            "12s",
            "--interval",
            "4s",
            "--warmup",
            "4s",
            "--ses",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let printed = format!("{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{printed}");
    assert!(
        stdout.contains("verdict: PASS") || stdout.contains("verdict: FAIL"),
        "{printed}"
    );
    let verdict = std::fs::read_to_string(out.join("verdict.txt")).unwrap();
    assert!(
        verdict.contains(
            "counted: intervals 2 to 3 (4 s to 12 s); interval 1 is warm-up (--warmup 4s)"
        ),
        "{verdict}"
    );
    assert!(out.join("soak.svg").is_file());
    // The report judges the verdict's claims: goodput, then each proxy's memory.
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<img src=\"soak.svg\""), "{report}");
    assert_eq!(report.matches("<td>goodput steady").count(), 1, "{report}");
    for p in proxies {
        assert!(
            report.contains(&format!(
                "<td>resident memory flat over the counted intervals</td><td>{p}</td>"
            )),
            "{p}: {report}"
        );
    }

    let (header, rows) = csv(&out);
    let at = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    for name in [
        "interval",
        "minute",
        "offered_cps",
        "goodput_cps",
        "goodput_norm",
        "rejected_503",
        "uas_2xx_retransmissions",
    ] {
        at(name);
    }
    assert_eq!(rows.len(), 3, "{printed}");
    let value = |row: &[String], name: &str| -> f64 { row[at(name)].parse().unwrap() };
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), header.len());
        assert_eq!(row[at("interval")], (i + 1).to_string());
        assert_eq!(row[at("counted")], if i == 0 { "0" } else { "1" });
        // Offered: 5x of 300 calls/s.
        let offered = value(row, "offered_cps");
        assert!((1300.0..1700.0).contains(&offered), "{offered}\n{printed}");
        for p in proxies {
            let rss = value(row, &format!("rss_mib_{p}"));
            assert!(rss > 1.0 && rss < 1000.0, "{p}: {rss}\n{printed}");
            // Read from the proxy's admin /status.
            let held = value(row, &format!("transactions_{p}"));
            assert!(held >= 0.0, "{p}\n{printed}");
        }
    }
    let counted: Vec<f64> = rows[1..].iter().map(|r| value(r, "goodput_norm")).collect();
    let _ = std::fs::remove_dir_all(&out);
    counted.iter().sum::<f64>() / counted.len() as f64
}

#[test]
fn pi_soak_writes_its_rows_and_keeps_goodput_near_the_optimum() {
    let goodput = short_soak("pi", &["proxy"]);
    // g_opt(5) with beta 8 is 0.31 of capacity; without control the proxy collapses.
    assert!(goodput > 0.2, "{goodput}");
}

#[test]
fn win_cont_soak_measures_the_re_and_every_se() {
    let goodput = short_soak("win-cont", &["re", "se1", "se2"]);
    // The SEs hold the RE near its capacity.
    assert!(goodput > 0.6, "{goodput}");
}

#[test]
fn bad_soak_options_are_clear_errors_and_nothing_runs() {
    for (args, says) in [
        (
            &["--control", "pi", "--duration", "1m", "--interval", "7s"][..],
            "whole number",
        ),
        (
            &["--control", "nonsense", "--duration", "1m"][..],
            "nonsense",
        ),
        (
            &["--control", "pi", "--duration", "1m", "--warmup", "60s"][..],
            "leaves no interval",
        ),
    ] {
        let run = Command::new(SLUICE)
            .args(["bench", "soak"])
            .args(args)
            .args(["--out"])
            .arg(temp_dir("soak-bad"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
