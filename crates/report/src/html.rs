//! `report.html`: one static page per output folder that puts what an experiment expects,
//! its plots, its tables and its claims side by side, for reading in any browser without a
//! server. The plots are the folder's own SVG files, linked by relative path, so the page
//! and the folder move together. Everything on it comes from the run (no times, no host
//! names), so the simulator's same seeds give the same page, byte for byte.
//!
//! A short inline script marks the body once the page has loaded: `data-plots-loaded` is
//! `true` when every plot decoded and drew (`naturalWidth > 0`), `false` otherwise, and the
//! plots that did not are outlined. A headless browser's `--dump-dom` reads that mark.

use std::fmt::Write as _;
use std::path::Path;

use crate::files::{read, write};

/// The page's file name in an output folder.
pub const FILE: &str = "report.html";

/// Tables longer than this show their first rows and link the whole file.
pub const MAX_TABLE_ROWS: usize = 300;

/// What a report says, in the order the page shows it.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The experiment's title.
    pub title: String,
    /// The experiment's name (its file or bench).
    pub name: String,
    /// Where the experiment comes from: paper and figure, when it reproduces one.
    pub source: String,
    /// What the paper (or the bench) expects to see.
    pub expectation: String,
    /// Paragraphs on what was run and how the plots are drawn.
    pub notes: Vec<String>,
    /// The plots: SVG files in the folder, by name.
    pub plots: Vec<String>,
    /// Claims and whether this run bears them out.
    pub claims: Vec<ClaimRow>,
    /// CSV files in the folder shown as tables: (caption, file name).
    pub tables: Vec<(String, String)>,
    /// Other files in the folder worth a link: (file name, what it holds).
    pub files: Vec<(String, String)>,
}

/// One claim judged on one subject (a variant, a point, a proxy).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRow {
    /// What is claimed, in words.
    pub claim: String,
    /// What it is judged on.
    pub subject: String,
    /// What the claim requires, as text (a bound, a tolerance).
    pub required: String,
    /// What this run measured.
    pub measured: String,
    pub pass: bool,
}

/// `text` safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A relative link to a file of the folder: each path segment percent-encoded where it
/// is not a plain letter, digit or one of `-_.~`, so any file name stays one link.
fn href(file: &str) -> String {
    let mut out = String::with_capacity(file.len());
    for b in file.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Writes `page` as `dir/report.html`; the tables are read from `dir`.
pub fn write_page(dir: &Path, page: &Page) -> Result<(), String> {
    let html = render(dir, page)?;
    write(&dir.join(FILE), &html)
}

const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.source { color: #555; margin-top: 0; }
.expectation { border-left: 4px solid #0072b2; background: #f2f7fb; padding: 0.6em 1em; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figure img.broken { outline: 3px solid #c00; min-height: 2em; }
figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.pass { color: #05693a; font-weight: bold; }
td.fail { color: #b00000; font-weight: bold; }
.scroll { overflow-x: auto; }
";

/// Marks the body once every image has loaded (or failed): `data-plots-loaded`,
/// `data-plots` (how many) and `data-plots-broken` (how many did not draw).
const SCRIPT: &str = "
window.addEventListener('load', function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (img) { return !(img.complete && img.naturalWidth > 0); });
  broken.forEach(function (img) { img.classList.add('broken'); });
  document.body.dataset.plots = String(images.length);
  document.body.dataset.plotsBroken = String(broken.length);
  document.body.dataset.plotsLoaded = broken.length === 0 ? 'true' : 'false';
});
";

/// The page's HTML.
pub fn render(dir: &Path, page: &Page) -> Result<String, String> {
    let mut h = String::new();
    let heading = if page.title.is_empty() {
        page.name.as_str()
    } else {
        page.title.as_str()
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n",
        escape(&if page.name.is_empty() || page.name == heading {
            heading.to_owned()
        } else {
            format!("{}: {heading}", page.name)
        })
    );
    let _ = writeln!(h, "<h1>{}</h1>", escape(heading));
    let mut source = Vec::new();
    if !page.source.is_empty() {
        source.push(escape(&page.source));
    }
    if !page.name.is_empty() {
        source.push(format!("experiment <code>{}</code>", escape(&page.name)));
    }
    if !source.is_empty() {
        let _ = writeln!(h, "<p class=\"source\">{}</p>", source.join(" &middot; "));
    }
    if !page.expectation.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Expected</h2>\n<p class=\"expectation\">{}</p>",
            escape(&page.expectation)
        );
    }
    for note in &page.notes {
        let _ = writeln!(h, "<p>{}</p>", escape(note));
    }
    if !page.claims.is_empty() {
        render_claims(&mut h, &page.claims);
    }
    if !page.plots.is_empty() {
        let _ = writeln!(h, "<h2>Plots</h2>");
        for plot in &page.plots {
            let _ = writeln!(
                h,
                "<figure><img src=\"{}\" alt=\"{}\"><figcaption><a href=\"{}\">{}</a></figcaption></figure>",
                escape(&href(plot)),
                escape(plot),
                escape(&href(plot)),
                escape(plot)
            );
        }
    }
    for (caption, file) in &page.tables {
        render_table(&mut h, dir, caption, file)?;
    }
    if !page.files.is_empty() {
        let _ = writeln!(h, "<h2>Files</h2>\n<ul>");
        for (file, what) in &page.files {
            let _ = writeln!(
                h,
                "<li><a href=\"{}\">{}</a>: {}</li>",
                escape(&href(file)),
                escape(file),
                escape(what)
            );
        }
        let _ = writeln!(h, "</ul>");
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

fn render_claims(h: &mut String, claims: &[ClaimRow]) {
    let passed = claims.iter().filter(|c| c.pass).count();
    let _ = writeln!(
        h,
        "<h2>Claims</h2>\n<p>{passed} of {} hold.</p>\n<div class=\"scroll\"><table>\n\
         <tr><th>claim</th><th>on</th><th>required</th><th>measured</th><th>result</th></tr>",
        claims.len()
    );
    for c in claims {
        let (class, word) = if c.pass {
            ("pass", "pass")
        } else {
            ("fail", "FAIL")
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{word}</td></tr>",
            escape(&c.claim),
            escape(&c.subject),
            escape(&c.required),
            escape(&c.measured),
        );
    }
    let _ = writeln!(h, "</table></div>");
}

/// Whether a CSV cell reads as a number (right-aligned).
fn numeric(cell: &str) -> bool {
    !cell.is_empty() && cell.parse::<f64>().is_ok()
}

fn render_table(h: &mut String, dir: &Path, caption: &str, file: &str) -> Result<(), String> {
    let path = dir.join(file);
    let text = read(&path)?;
    let rows = parse_csv(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some((head, body)) = rows.split_first() else {
        return Ok(());
    };
    let _ = writeln!(
        h,
        "<h2>{}</h2>\n<p><a href=\"{}\">{}</a>, {} row{}{}</p>\n<div class=\"scroll\"><table>",
        escape(caption),
        escape(&href(file)),
        escape(file),
        body.len(),
        if body.len() == 1 { "" } else { "s" },
        if body.len() > MAX_TABLE_ROWS {
            format!(" (the first {MAX_TABLE_ROWS} shown)")
        } else {
            String::new()
        }
    );
    h.push_str("<tr>");
    for cell in head {
        let _ = write!(h, "<th>{}</th>", escape(cell));
    }
    h.push_str("</tr>\n");
    for row in body.iter().take(MAX_TABLE_ROWS) {
        h.push_str("<tr>");
        for cell in row {
            if numeric(cell) {
                let _ = write!(h, "<td class=\"num\">{}</td>", escape(cell));
            } else {
                let _ = write!(h, "<td>{}</td>", escape(cell));
            }
        }
        h.push_str("</tr>\n");
    }
    let _ = writeln!(h, "</table></div>");
    Ok(())
}

/// The records of a CSV text (RFC 4180: quoted fields may hold commas, quotes and line
/// breaks), the header first.
pub fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    reader
        .records()
        .enumerate()
        .map(|(i, r)| {
            r.map(|r| r.iter().map(str::to_owned).collect())
                .map_err(|e| format!("record {}: {e}", i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_files_is_escaped() {
        assert_eq!(
            escape("<b>\"R&D\"</b> 'x'"),
            "&lt;b&gt;&quot;R&amp;D&quot;&lt;/b&gt; &#39;x&#39;"
        );
    }

    #[test]
    fn links_keep_one_file_name_whatever_it_holds() {
        assert_eq!(href("fig-a_b.svg"), "fig-a_b.svg");
        assert_eq!(href("a b\"#?.svg"), "a%20b%22%23%3F.svg");
    }

    #[test]
    fn a_page_shows_expectation_claims_plots_and_tables_escaped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("summary.csv"),
            "variant,goodput\n\"<script>alert(1)</script>, a\",0.98\nplain,1.02\n",
        )
        .unwrap();
        let page = Page {
            title: "Goodput <under> load".into(),
            name: "exp&1".into(),
            source: "Someone 2008, Figure 1".into(),
            expectation: "Goodput stays at \"1\".".into(),
            notes: vec!["2 seeds".into()],
            plots: vec!["exp 1.svg".into()],
            claims: vec![
                ClaimRow {
                    claim: "holds".into(),
                    subject: "a<b".into(),
                    required: ">= 0.9".into(),
                    measured: "0.95".into(),
                    pass: true,
                },
                ClaimRow {
                    claim: "holds".into(),
                    subject: "c".into(),
                    required: ">= 0.9".into(),
                    measured: "0.5".into(),
                    pass: false,
                },
            ],
            tables: vec![("Summary".into(), "summary.csv".into())],
            files: vec![("runs.jsonl".into(), "every report".into())],
        };
        let html = render(dir.path(), &page).unwrap();
        assert!(
            html.contains("<h1>Goodput &lt;under&gt; load</h1>"),
            "{html}"
        );
        assert!(html.contains("experiment <code>exp&amp;1</code>"));
        assert!(html.contains("Goodput stays at &quot;1&quot;."));
        assert!(html.contains("<img src=\"exp%201.svg\""));
        assert!(html.contains("<td>&lt;script&gt;alert(1)&lt;/script&gt;, a</td>"));
        assert!(html.contains("<td class=\"num\">1.02</td>"));
        assert!(html.contains("1 of 2 hold."));
        assert!(html.contains("<td>a&lt;b</td>"));
        assert!(html.contains("<td class=\"fail\">FAIL</td>"));
        // The only script is the page's own; nothing is fetched from elsewhere.
        assert_eq!(html.matches("<script>").count(), 1);
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn a_long_table_is_cut_and_linked() {
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("n\n");
        for i in 0..MAX_TABLE_ROWS + 5 {
            let _ = writeln!(csv, "{i}");
        }
        std::fs::write(dir.path().join("t.csv"), csv).unwrap();
        let page = Page {
            tables: vec![("T".into(), "t.csv".into())],
            ..Page::default()
        };
        let html = render(dir.path(), &page).unwrap();
        assert!(html.contains(&format!(
            "{} rows (the first {MAX_TABLE_ROWS} shown)",
            MAX_TABLE_ROWS + 5
        )));
        assert!(html.contains(&format!("<td class=\"num\">{}</td>", MAX_TABLE_ROWS - 1)));
        assert!(!html.contains(&format!("<td class=\"num\">{MAX_TABLE_ROWS}</td>")));
    }

    #[test]
    fn a_missing_table_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let page = Page {
            tables: vec![("T".into(), "gone.csv".into())],
            ..Page::default()
        };
        let err = render(dir.path(), &page).unwrap_err();
        assert!(err.contains("gone.csv"), "{err}");
    }
}
