//! `report.html` in a real browser: a tiny simulated sweep over two seeds, its page opened
//! in headless Chromium, and every plot on it checked to have drawn (the page's own script
//! marks the body once each image has decoded), then a screenshot of it checked to show
//! more than a blank page.

#[path = "../../../tests/external_tools.rs"]
mod external_tools;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// Two controls, two loads, two seeds, four simulated seconds: eight runs in about a second.
const TINY: &str = r#"
name = "tiny-report"
title = "Two controls <at> two loads"
paper = "Test & Co 2024"
figure = "Figure 0"
expectation = "Goodput follows \"min(offered, 1)\"."
[base]
duration_s = 4
warmup_s = 1
[sweep]
offered_load = [0.5, 2.0]
seeds = [1, 2]
[[variant]]
label = "none"
scenario = { re = { control = { algorithm = "none" } } }
[[variant]]
label = "win-cont"
scenario = { re = { control = { algorithm = "win-cont" } } }
"#;

/// Runs headless Chromium on `page` with `args`, its standard output into `stdout`;
/// stopped after a minute.
fn chromium(scratch: &Path, page: &Path, args: &[&str], stdout: &Path) {
    let mut child = Command::new("chromium")
        .args(["--headless=new", "--no-sandbox", "--disable-gpu"])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(stdout).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium {args:?}: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} did not finish in a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The opening `<body ...>` tag of the DOM Chromium dumped for `page`.
fn body_after_load(scratch: &Path, page: &Path) -> String {
    let dump = scratch.join("dom.html");
    chromium(scratch, page, &["--dump-dom"], &dump);
    let dom = std::fs::read_to_string(&dump).unwrap();
    let start = dom
        .find("<body")
        .unwrap_or_else(|| panic!("no body: {dom}"));
    let end = start + dom[start..].find('>').unwrap();
    dom[start..=end].to_owned()
}

fn svgs_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count()
}

#[test]
#[cfg_attr(missing_chromium, ignore = "needs chromium: apt-get install chromium")]
fn every_plot_of_a_report_renders_in_chromium() {
    external_tools::require("chromium");
    let scratch = tempfile::tempdir().unwrap();
    let scratch = scratch.path();
    let experiment = scratch.join("tiny.toml");
    std::fs::write(&experiment, TINY).unwrap();
    let out: PathBuf = scratch.join("out");
    let run = Command::new(SLUICE)
        .args(["sim"])
        .arg(&experiment)
        .args(["--jobs", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let page = out.join("report.html");
    let plots = svgs_in(&out);
    assert_eq!(plots, 3, "goodput, setup delay, retransmissions");

    let body = body_after_load(scratch, &page);
    assert!(body.contains("data-plots-loaded=\"true\""), "{body}");
    assert!(body.contains(&format!("data-plots=\"{plots}\"")), "{body}");
    assert!(body.contains("data-plots-broken=\"0\""), "{body}");

    // The same page with one plot missing: the mark says so, so the check above can fail.
    let html = std::fs::read_to_string(&page).unwrap();
    let broken = out.join("broken.html");
    std::fs::write(
        &broken,
        html.replacen("src=\"tiny-report.svg\"", "src=\"missing.svg\"", 1),
    )
    .unwrap();
    let body = body_after_load(scratch, &broken);
    assert!(body.contains("data-plots-loaded=\"false\""), "{body}");
    assert!(body.contains("data-plots-broken=\"1\""), "{body}");

    // What a reader sees: a page of plots and tables, not a blank one.
    let shot = scratch.join("report.png");
    chromium(
        scratch,
        &page,
        &[
            "--hide-scrollbars",
            "--window-size=1200,2000",
            &format!("--screenshot={}", shot.display()),
        ],
        &scratch.join("screenshot.log"),
    );
    let decoder = png::Decoder::new(std::io::Cursor::new(
        std::fs::read(&shot).expect("a screenshot"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![
        0;
        reader
            .output_buffer_size()
            .expect("a frame that fits memory")
    ];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((frame.width, frame.height), (1200, 2000));
    let channels = frame.color_type.samples();
    let pixels = &pixels[..frame.buffer_size()];
    let mut colours: Vec<&[u8]> = pixels.chunks(channels).collect();
    let inked = colours
        .iter()
        .filter(|p| p.iter().take(3).any(|c| *c < 200))
        .count();
    colours.sort_unstable();
    colours.dedup();
    // Text, axes, curves and the seeds' confidence bands: many colours and a fair share
    // of ink (a blank page has one colour and none).
    assert!(colours.len() > 50, "{} colours", colours.len());
    let share = inked as f64 / (frame.width * frame.height) as f64;
    assert!(share > 0.01, "{share} of the pixels inked");
}
