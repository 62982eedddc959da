//! The operator's view of a proxy under load, live on loopback: a `sluice proxy` process
//! with De Cicco et al.'s PI at an emulated 200 calls/s, offered three times that by
//! sluice's UAC. While the PI regulates:
//! * `/metrics` passes `promtool check metrics` and carries the control loop's state (the
//!   PI's control value and CPU load, the delay histograms);
//! * `/dashboard`, loaded in headless Chromium, has drawn the samples `/signals` serves.
//!
//! Set `SLUICE_SCREENSHOT_DIR` to keep the dashboard's screenshot.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_bench::local::{sluice_variant, Target};
use sluice_load::shell::{spawn_loopback_uac, spawn_loopback_uas};
use sluice_load::UacConfig;

#[path = "../../../tests/external_tools.rs"]
mod external_tools;

const CAPACITY: f64 = 200.0;
const OFFERED: f64 = 600.0;
const OFFER_S: u64 = 12;

fn free_tcp() -> SocketAddr {
    SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ))
}

fn get(admin: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(1)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.split_whitespace().nth(1) == Some("200"),
        "{path}: {head}"
    );
    body.to_owned()
}

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromium(args: &[&str], url: &str, profile: &std::path::Path) -> std::process::Output {
    Command::new("chromium")
        .args(["--headless=new", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs")
}

/// The value of `name="..."` in the first tag of `dom` whose text contains `marker`.
fn attribute<'a>(dom: &'a str, marker: &str, name: &str) -> Option<&'a str> {
    let at = dom.find(marker)?;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let value = &tag[tag.find(&format!("{name}=\""))? + name.len() + 2..];
    value.split('"').next()
}

#[test]
#[cfg_attr(
    any(missing_promtool, missing_chromium),
    ignore = "needs promtool and chromium: apt-get install prometheus chromium"
)]
fn the_dashboard_and_metrics_show_the_pi_regulating() {
    external_tools::require("promtool");
    external_tools::require("chromium");
    let dir = tempfile::tempdir().unwrap();
    let uas_stop = Arc::<AtomicBool>::default();
    let (uas_addr, uas) = spawn_loopback_uas(uas_stop.clone()).unwrap();

    let Target::Sluice(config) = sluice_variant("pi", CAPACITY, 0, 8.0).unwrap().target else {
        unreachable!("a sluice variant")
    };
    let mut config = *config;
    let proxy_addr = SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ));
    let admin = free_tcp();
    config.listen = proxy_addr;
    config.next_hop = Some(uas_addr);
    config.admin = Some(admin);
    config.duration_s = Some(OFFER_S as f64 + 20.0);
    config.shutdown_grace_s = 0.5;
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["proxy", "--config"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let proxy = Proxy(child);
    loop {
        let line = lines.next().expect("the proxy says it listens").unwrap();
        if line.contains("admin on http") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});

    let mut uac = UacConfig::new("127.0.0.1:0".parse().unwrap(), proxy_addr, OFFERED);
    uac.duration = Some(Duration::from_secs(OFFER_S));
    uac.drain_timeout = Duration::from_secs(2);
    let uac = spawn_loopback_uac(uac, Duration::from_secs(OFFER_S + 6), |_| {});
    // Past the PI's first seconds, while the load lasts.
    std::thread::sleep(Duration::from_secs(6));

    let metrics = get(admin, "/metrics");
    let value = |name: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    let control = value("sluice_proxy_admission_control_value").expect("the PI's control value");
    let cpu = value("sluice_proxy_admission_cpu_load_ratio").expect("the PI's CPU load");
    assert!(
        control > 0.2,
        "at 3x the PI rejects a good share of INVITEs: reject ratio {control}\n{metrics}"
    );
    assert!((0.5..=1.0).contains(&cpu), "filtered CPU load {cpu}");
    assert!(metrics.contains("sluice_proxy_control_info{algorithm=\"pi\"} 1"));
    let answered = value("sluice_proxy_setup_delay_seconds_count").unwrap();
    eprintln!(
        "at 3x, 6 s in: PI reject ratio {control:.3}, filtered CPU load {cpu:.3}, {answered} calls \
         answered, {} metric lines",
        metrics.lines().count()
    );
    assert!(answered > 100.0, "calls answered: {answered}");
    external_tools::require_promtool_accepts(&metrics);

    let signals: serde_json::Value = serde_json::from_str(&get(admin, "/signals")).unwrap();
    let samples = signals["samples"].as_array().unwrap();
    assert!(samples.len() >= 4, "one sample a second: {signals}");
    let last = samples.last().unwrap();
    assert!(last["turned_away"].as_f64().unwrap() > 0.0, "{last}");
    assert!(last["admission_control"].as_f64().is_some(), "{last}");

    let url = format!("http://{admin}/dashboard");
    let profile = dir.path().join("chromium");
    let out = chromium(
        &["--virtual-time-budget=4000", "--dump-dom"],
        &url,
        &profile,
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let drawn: usize = attribute(&dom, "data-samples", "data-samples")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no data-samples in the page:\n{dom}"));
    assert!(drawn >= 4, "the page holds {drawn} samples:\n{dom}");
    for chart in ["rates", "load", "queue", "delay"] {
        let points: usize = attribute(&dom, &format!("id=\"{chart}\""), "data-points")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(points > 0, "chart {chart} drew nothing:\n{dom}");
    }
    assert!(dom.contains("<polyline"), "no line drawn:\n{dom}");
    assert!(
        dom.contains("control: pi"),
        "the state line names the control"
    );

    let shot = dir.path().join("dashboard.png");
    let out = chromium(
        &[
            "--virtual-time-budget=3000",
            "--window-size=1280,1100",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
        &profile,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(png.len() > 20_000, "a page with plots, not a blank one");
    if let Some(keep) = std::env::var_os("SLUICE_SCREENSHOT_DIR") {
        std::fs::copy(&shot, std::path::Path::new(&keep).join("dashboard.png")).unwrap();
    }

    let run = uac.join().unwrap().unwrap();
    assert!(run.summary.successful > 0);
    drop(proxy);
    uas_stop.store(true, Ordering::Relaxed);
    let _ = uas.join();
}
