//! The files of a live sweep: `summary.csv` (the columns of `sluice sim`, then live-only
//! ones), `points.jsonl`, `series.csv` and the SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use sluice_control::optimal::optimal_goodput;
use sluice_load::SecondRow;
use sluice_report::experiment::SUMMARY_COLUMNS;
use sluice_report::files::{create_dir, file_stem, write, CsvTable};
use sluice_report::html::{write_page, Page, FILE};
use sluice_report::plot::{line_chart, Axes, Series};

use crate::point::PointResult;
use crate::proxy_config::TARGET_CPU;

/// What a sweep says when its files are written.
pub fn written_line(points: usize, elapsed: std::time::Duration, out: &Path, name: &str) -> String {
    format!(
        "{points} points in {:.0} s; {} written (summary.csv, points.jsonl, series.csv, {}.svg)",
        elapsed.as_secs_f64(),
        out.display(),
        file_stem(name)
    )
}

/// summary.csv (the columns of `sluice sim`, then live-only ones), points.jsonl,
/// series.csv (per point, source and second, the caller's row: `sluice` or `sipp`, or in a
/// topology each UAC's) and the SVG plots; returns the plots' file names.
pub fn write_outputs(
    out: &Path,
    name: &str,
    title: &str,
    points: &[PointResult],
    beta: Option<f64>,
) -> Result<Vec<String>, String> {
    create_dir(out)?;
    let mut csv = CsvTable::new(SUMMARY_COLUMNS.into_iter().chain([
        "capacity_cps",
        "uac_retrans_sent",
        "uas_2xx_retrans",
        "goodput_with_180",
        "goodput_at_uas",
    ]));
    let o = |v: Option<f64>, prec: usize| v.map_or(String::new(), |v| format!("{v:.prec$}"));
    for p in points {
        csv.row([
            p.experiment.clone(),
            p.variant.clone(),
            p.algorithm.clone(),
            "0".to_owned(),
            p.x.to_string(),
            format!("{:.3}", p.x),
            format!("{:.4}", p.goodput),
            format!("{:.3}", p.goodput_cps),
            format!("{:.4}", p.retrans_ratio),
            o(p.setup_delay_p50_ms, 2),
            o(p.setup_delay_p99_ms, 2),
            o(p.occupancy, 4),
            format!("{:.4}", p.reject_ratio),
            format!("{:.4}", p.offered_load_measured),
            p.calls_offered.to_string(),
            p.calls_good.to_string(),
            String::new(),
            p.proxy_dropped.map_or(String::new(), |d| d.to_string()),
            format!("{:.1}", p.capacity_cps),
            p.uac_retransmissions_sent.to_string(),
            p.uas_2xx_retransmissions.to_string(),
            o(p.goodput_with_180, 4),
            o(p.goodput_at_uas, 4),
        ]);
    }
    write(&out.join("summary.csv"), &csv.into_text())?;
    let mut jsonl = String::new();
    let mut series = CsvTable::new(
        ["variant", "x", "source"]
            .into_iter()
            .chain(SecondRow::CSV_HEADER.split(',')),
    );
    for p in points {
        let _ = writeln!(
            jsonl,
            "{}",
            serde_json::to_string(p).map_err(|e| e.to_string())?
        );
        let whole = [(p.caller.to_owned(), p.rows.clone())];
        let sources = if p.per_source.is_empty() {
            &whole[..]
        } else {
            &p.per_source[..]
        };
        for (source, rows) in sources {
            for r in rows {
                let x = p.x.to_string();
                let row = r.csv();
                series.row(
                    [p.variant.as_str(), x.as_str(), source.as_str()]
                        .into_iter()
                        .chain(row.split(',')),
                );
            }
        }
    }
    write(&out.join("points.jsonl"), &jsonl)?;
    write(&out.join("series.csv"), &series.into_text())?;

    let mut labels: Vec<&str> = Vec::new();
    for p in points {
        if !labels.contains(&p.variant.as_str()) {
            labels.push(&p.variant);
        }
    }
    let curve = |f: &dyn Fn(&PointResult) -> f64| -> Vec<Series> {
        labels
            .iter()
            .map(|l| Series {
                label: (*l).to_owned(),
                points: points
                    .iter()
                    .filter(|p| p.variant == *l)
                    .map(|p| (p.x, f(p)))
                    .collect(),
            })
            .collect()
    };
    let x_max = points.iter().map(|p| p.x).fold(1.0_f64, f64::max);
    let ideal = beta.map(|b| Series {
        label: format!("g_opt(r), beta {b:.2}, C_T {TARGET_CPU}"),
        points: (0..=200)
            .map(|i| {
                let r = x_max * f64::from(i) / 200.0;
                (r, optimal_goodput(r, b, TARGET_CPU))
            })
            .collect(),
    });
    let stem = file_stem(name);
    let mut plots = vec![format!("{stem}.svg"), format!("{stem}-retrans.svg")];
    line_chart(
        &out.join(&plots[0]),
        &Axes {
            title,
            x_label: "offered load (multiples of the proxy's capacity)",
            y_label: "goodput (normalised)",
            y_max: 1.1,
        },
        &curve(&|p| p.goodput),
        ideal.as_ref(),
    )?;
    line_chart(
        &out.join(&plots[1]),
        &Axes {
            title: &format!("{title}: retransmission ratio"),
            x_label: "offered load (multiples of the proxy's capacity)",
            y_label: "retransmissions / messages",
            y_max: 0.0,
        },
        &curve(&|p| p.retrans_ratio),
        None,
    )?;
    // Proxies at their native speed (--proxy-cmd) differ in capacity, so a normalised curve
    // hides what an operator sees: calls/s set up at the same offered calls/s.
    let native: Vec<Series> = labels
        .iter()
        .filter(|l| {
            points
                .iter()
                .any(|p| p.variant == **l && p.algorithm == "external")
        })
        .map(|l| Series {
            label: (*l).to_owned(),
            points: points
                .iter()
                .filter(|p| p.variant == *l)
                .map(|p| (p.x * p.capacity_cps, p.goodput_cps))
                .collect(),
        })
        .collect();
    if native.is_empty() {
        return Ok(plots);
    }
    plots.push(format!("{stem}-native.svg"));
    line_chart(
        &out.join(&plots[2]),
        &Axes {
            title: &format!("{title}: proxies at native speed"),
            x_label: "offered load (calls/s)",
            y_label: "goodput (calls/s)",
            y_max: 0.0,
        },
        &native,
        None,
    )?;
    Ok(plots)
}

/// `report.html` of a live sweep's folder: `plots` (file names in `out`), the summary
/// table, `claims` and the other files [`write_outputs`] wrote; returns what to print.
pub fn write_sweep_page(out: &Path, page: Page) -> Result<String, String> {
    let mut page = page;
    page.tables
        .push(("Summary: one row per point".into(), "summary.csv".into()));
    page.files.extend([
        (
            "points.jsonl".to_owned(),
            "every point's results in full, one JSON object a line".to_owned(),
        ),
        (
            "series.csv".to_owned(),
            "per point, source and second: the callers' counts".to_owned(),
        ),
    ]);
    write_page(out, &page)?;
    Ok(format!("report: {}", out.join(FILE).display()))
}
