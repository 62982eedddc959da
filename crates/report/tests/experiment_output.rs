//! The simulator's output folder for tiny experiments: which files, what is in them, and the
//! same bytes for the same reports.

use std::path::Path;

use sluice_report::experiment::write_all;
use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::RunReport;

const SWEEP: &str = r#"
name = "report-sweep"
title = "tiny sweep"
[base]
duration_s = 12
warmup_s = 4
[sweep]
offered_load = [0.5, 2.0]
seeds = [3]
[[variant]]
label = "none"
scenario = { re = { control = { algorithm = "none" } } }
[[variant]]
label = "win, cont"
scenario = { re = { control = { algorithm = "win-cont" } } }
"#;

const DYNAMIC: &str = r#"
name = "report-dynamic"
title = "tiny dynamic"
kind = "dynamic"
seeds = [1]
[base]
duration_s = 12
warmup_s = 0
[[base.sources]]
name = "UA1"
share = 1.0
schedule = [{ at_s = 0.0, load = 0.5 }]
[[base.sources]]
name = "UA2"
share = 1.0
schedule = [{ at_s = 6.0, load = 1.5 }]
[plot]
dynamics = true
[[variant]]
label = "rate-abs"
scenario = { re = { control = { algorithm = "rate-abs" } } }
"#;

/// Two seeds, two loads, one control, and an expectation that needs escaping.
const SEEDED: &str = r#"
name = "report-seeds"
title = "tiny sweep over seeds"
paper = "Someone & Other 2008"
figure = "Figure 1"
expectation = "Goodput <= 1 & \"no collapse\"."
[base]
duration_s = 8
warmup_s = 2
[sweep]
offered_load = [0.5, 3.0]
seeds = [1, 2]
[[variant]]
label = "win-cont"
scenario = { re = { control = { algorithm = "win-cont" } } }
"#;

/// A folder of its own, removed when the returned guard drops.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sluice-report-{name}-"))
        .tempdir()
        .unwrap()
}

fn run(text: &str) -> (Experiment, Vec<RunReport>) {
    let e = Experiment::from_toml(text, &Overrides::default()).unwrap();
    let reports = e
        .points
        .iter()
        .map(|p| sluice_sim::run(&p.scenario))
        .collect();
    (e, reports)
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn a_sweep_writes_one_row_and_one_json_line_per_run_and_three_plots() {
    let (e, reports) = run(SWEEP);
    let a_guard = scratch("sweep-a");
    let a = a_guard.path().to_path_buf();
    write_all(&a, &e, &reports).unwrap();
    let summary = read(&a, "summary.csv");
    let rows: Vec<&str> = summary.lines().collect();
    assert_eq!(rows.len(), 1 + e.points.len());
    assert!(rows[0].starts_with("experiment,variant,algorithm,seed,x,offered_load,goodput,"));
    // The label with a comma is quoted; its algorithm follows it.
    assert!(
        rows.iter()
            .any(|r| r.starts_with("report-sweep,\"win, cont\",win-cont,3,2,")),
        "{summary}"
    );
    let goodput_column = rows[0].split(',').position(|c| c == "goodput").unwrap();
    let runs = read(&a, "runs.jsonl");
    assert_eq!(runs.lines().count(), e.points.len());
    for ((line, row), r) in runs.lines().zip(&rows[1..]).zip(&reports) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["report"]["calls_good"], r.calls_good);
        if !row.contains('"') {
            let cell = row.split(',').nth(goodput_column).unwrap();
            assert_eq!(cell, format!("{:.4}", r.goodput));
        }
    }
    for svg in [
        "report-sweep.svg",
        "report-sweep-setup-delay.svg",
        "report-sweep-retransmissions.svg",
    ] {
        assert!(read(&a, svg).starts_with("<svg"), "{svg}");
    }
    assert!(!a.join("timeseries").exists(), "a sweep has no time series");
    // The same reports again: the same bytes.
    let b_guard = scratch("sweep-b");
    let b = b_guard.path().to_path_buf();
    write_all(&b, &e, &reports).unwrap();
    for f in [
        "summary.csv",
        "runs.jsonl",
        "report-sweep.svg",
        "report.html",
    ] {
        assert_eq!(read(&a, f), read(&b, f), "{f}");
    }
    assert!(write_all(&b, &e, &reports[1..]).is_err(), "a report short");
}

#[test]
fn a_dynamic_run_writes_its_time_series_and_per_run_plots() {
    let (e, reports) = run(DYNAMIC);
    let dir_guard = scratch("dynamic");
    let dir = dir_guard.path().to_path_buf();
    write_all(&dir, &e, &reports).unwrap();
    let csv = read(&dir, "timeseries/rate-abs-seed1.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "t_s,goodput_cps_UA1,goodput_cps_UA2,offered_cps_UA1,offered_cps_UA2,goodput_cps_total,queue_len,occupancy"
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 12, "one row per simulated second");
    for r in &rows {
        assert!(
            (r[5] - (r[1] + r[2])).abs() < 2e-3,
            "total is the sum: {r:?}"
        );
    }
    // UA2 offers nothing before 6 s and something after.
    assert!(rows[..6].iter().all(|r| r[4] == 0.0));
    assert!(rows[7..].iter().any(|r| r[4] > 0.0));
    for svg in [
        "report-dynamic-rate-abs-seed1.svg",
        "report-dynamic-rate-abs-seed1-dynamics.svg",
        "report-dynamic-rate-abs-seed1-queueing.svg",
    ] {
        assert!(read(&dir, svg).starts_with("<svg"), "{svg}");
    }
}

/// The `src` of every `<img>` on a page.
fn images(html: &str) -> Vec<String> {
    html.split("<img src=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

#[test]
fn the_report_shows_every_plot_the_expectation_and_the_summary() {
    let (e, reports) = run(SEEDED);
    let guard = scratch("seeds");
    let dir = guard.path();
    write_all(dir, &e, &reports).unwrap();
    let html = read(dir, "report.html");
    let mut svgs: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "svg"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    svgs.sort();
    let mut shown = images(&html);
    assert_eq!(shown[0], "report-seeds.svg", "the goodput plot leads");
    shown.sort();
    assert_eq!(shown, svgs, "every plot written, and only those");
    assert!(html.contains("<h1>tiny sweep over seeds</h1>"));
    assert!(html.contains("Someone &amp; Other 2008, Figure 1"));
    assert!(html.contains("Goodput &lt;= 1 &amp; &quot;no collapse&quot;."));
    assert!(html.contains("2 seed(s) each"));
    // A summary row per run.
    let table = &html[html.find("summary.csv").unwrap()..];
    assert_eq!(
        table.matches("<tr><td>report-seeds</td>").count(),
        e.points.len()
    );
    // Two seeds: the means are drawn with their confidence intervals, a band per curve.
    let goodput = read(dir, "report-seeds.svg");
    assert!(goodput.contains("mean of 2 seeds, 95 % CI"));
    assert_eq!(goodput.matches("<polygon").count(), 1);
    // Nothing of the time or the machine: the same runs give the same page.
    let again = scratch("seeds-again");
    write_all(again.path(), &e, &reports).unwrap();
    assert_eq!(html, read(again.path(), "report.html"));
}

#[test]
fn a_dynamic_experiment_over_seeds_leads_with_each_variants_mean() {
    let text = DYNAMIC.replace("seeds = [1]", "seeds = [1, 2]");
    let (e, reports) = run(&text);
    let guard = scratch("dynamic-seeds");
    let dir = guard.path();
    write_all(dir, &e, &reports).unwrap();
    let shown = images(&read(dir, "report.html"));
    assert_eq!(
        shown,
        [
            "report-dynamic-rate-abs-mean.svg",
            "report-dynamic-rate-abs-seed1.svg",
            "report-dynamic-rate-abs-seed1-dynamics.svg",
            "report-dynamic-rate-abs-seed1-queueing.svg",
            "report-dynamic-rate-abs-seed2.svg",
            "report-dynamic-rate-abs-seed2-dynamics.svg",
            "report-dynamic-rate-abs-seed2-queueing.svg",
        ]
    );
    let mean = read(dir, "report-dynamic-rate-abs-mean.svg");
    // A band for each source and the total.
    assert_eq!(mean.matches("<polygon").count(), 3, "{mean}");
}
