//! `sluice load` on real loopback sockets: UAC against UAS directly, through Kamailio
//! (tests/kamailio/proxy.cfg; skipped with a notice if `kamailio` is not installed) and
//! through `sluice proxy`. Each run is a few seconds.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../../tests/external_tools.rs"]
mod external_tools;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A child process that is stopped when the test ends, pass or fail.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SIGTERM first: Kamailio then stops its worker processes too.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a process and returns it with the address it printed as `<prefix> ADDR` on stderr.
fn spawn_listening(cmd: &mut Command, prefix: &str) -> (Guard, SocketAddr) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("piped");
    let mut lines = BufReader::new(stderr).lines();
    let guard = Guard(child);
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        if let Some(addr) = line.strip_prefix(prefix) {
            let addr = addr.trim().parse().expect("address");
            // Keep draining stderr so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return (guard, addr);
        }
    }
    panic!("{cmd:?} exited without printing `{prefix} ADDR`");
}

fn start_uas(duration_s: u32) -> (Guard, SocketAddr) {
    spawn_listening(
        Command::new(SLUICE).args([
            "load",
            "uas",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            &format!("{duration_s}s"),
        ]),
        "listening on ",
    )
}

/// Runs `sluice load uac` to completion and returns its summary and per-second CSV rows.
fn run_uac(target: SocketAddr, rate: u32, calls: u32, extra: &[&str]) -> (Value, Vec<Vec<String>>) {
    let dir = std::env::temp_dir().join(format!(
        "sluice-load-test-{}-{}",
        std::process::id(),
        target.port()
    ));
    let out = Command::new(SLUICE)
        .args([
            "load",
            "uac",
            "--target",
            &target.to_string(),
            "--rate",
            &rate.to_string(),
            "--calls",
            &calls.to_string(),
            "--drain-timeout",
            "5s",
            "--out",
        ])
        .arg(&dir)
        .args(extra)
        .output()
        .expect("run uac");
    assert!(
        out.status.success(),
        "uac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary, stdout, "summary.json and standard output agree");
    let csv = std::fs::read_to_string(dir.join("per_second.csv")).unwrap();
    let rows = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (summary, rows)
}

fn column(rows: &[Vec<String>], index: usize) -> u64 {
    rows.iter().map(|r| r[index].parse::<u64>().unwrap()).sum()
}

/// Every call set up and torn down, nothing retransmitted, and the per-second rows add up
/// to the summary.
fn assert_clean(summary: &Value, rows: &[Vec<String>], calls: u64) {
    let s = &summary["summary"];
    for (field, want) in [
        ("offered", calls),
        ("successful", calls),
        ("completed", calls),
        ("failed", 0),
        ("refused", 0),
        ("unfinished", 0),
        ("retransmissions_sent", 0),
        ("retransmissions_received", 0),
        ("malformed_received", 0),
        // INVITE, ACK, BYE out; 100 (from a proxy or the UAS), 180, 200, 200 back at least.
        ("messages_sent", 3 * calls),
    ] {
        assert_eq!(s[field].as_u64(), Some(want), "{field} in {s:#}");
    }
    assert_eq!(s["failures"]["bye"].as_u64(), Some(0));
    assert_eq!(s["pdd_200"]["count"].as_u64(), Some(calls));
    assert!(s["messages_received"].as_u64().unwrap() >= 4 * calls);
    // time_s, offered, successful, failed, ..., completed is column 11.
    assert_eq!(column(rows, 1), calls, "offered per second adds up");
    assert_eq!(column(rows, 2), calls, "successful per second adds up");
    assert_eq!(column(rows, 3), 0);
    assert_eq!(column(rows, 11), calls, "completed per second adds up");
}

#[test]
fn uac_against_uas_directly() {
    let (_uas, uas_addr) = start_uas(30);
    let (summary, rows) = run_uac(uas_addr, 1000, 3000, &["--hold", "50ms"]);
    assert_clean(&summary, &rows, 3000);
    // At 1000 calls/s for 3 s: three full seconds of about 1000 each.
    assert!(rows.len() >= 3, "{rows:?}");
    let setup = &summary["summary"]["setup"];
    assert!(setup["p99_ms"].as_f64().unwrap() < 100.0, "{setup}");
}

/// `--threads 3`: three sockets and three UACs at a third of the rate each, one summary
/// (counts and delay histograms added) and per-second rows that add up, delays left empty.
#[test]
fn uac_on_three_threads_places_every_call_once_and_reports_them_together() {
    let (_uas, uas_addr) = start_uas(30);
    let (summary, rows) = run_uac(uas_addr, 900, 1801, &["--hold", "50ms", "--threads", "3"]);
    assert_clean(&summary, &rows, 1801);
    assert!(rows.len() >= 2, "{rows:?}");
    // pdd_p50_ms is column 19: a quantile of one thread's calls is not the run's.
    assert!(rows.iter().all(|r| r[19].is_empty()), "{rows:?}");
}

#[test]
fn uac_threads_need_udp_and_an_os_chosen_port() {
    for extra in [
        &["--threads", "2", "--transport", "tcp"][..],
        &["--threads", "2", "--bind", "127.0.0.1:5999"][..],
        &["--threads", "0"][..],
    ] {
        let out = Command::new(SLUICE)
            .args(["load", "uac", "--target", "127.0.0.1:5060", "--rate", "1"])
            .args(["--duration", "1s"])
            .args(extra)
            .output()
            .expect("run uac");
        assert!(!out.status.success(), "{extra:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--threads"), "{extra:?}: {err}");
    }
}

#[test]
fn uac_counts_503_from_the_uas_as_failures() {
    let (_uas, uas_addr) = spawn_listening(
        Command::new(SLUICE).args([
            "load",
            "uas",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "30s",
            "--reject-503",
            "0.25",
        ]),
        "listening on ",
    );
    let (summary, _) = run_uac(uas_addr, 500, 800, &[]);
    let s = &summary["summary"];
    let rejected = s["failures"]["rejected_503"].as_u64().unwrap();
    assert_eq!(s["failed"].as_u64(), Some(rejected));
    assert_eq!(s["successful"].as_u64().unwrap() + rejected, 800);
    // 25% of 800 = 200; the seeded draw stays near it.
    assert!((140..260).contains(&rejected), "{rejected}");
}

fn free_udp_port() -> u16 {
    sluice_bench::process::free_sip_port().unwrap()
}

/// Waits until the proxy answers (an OPTIONS relayed to the UAS comes back).
fn wait_for(addr: SocketAddr) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let local = sock.local_addr().unwrap();
    let mut buf = [0u8; 4096];
    for i in 0..100 {
        let options = format!(
            "OPTIONS sip:probe@{addr} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-w{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:t@{local}>;tag=w{i}\r\nTo: <sip:probe@{addr}>\r\n\
             Call-ID: wait-{i}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        sock.send_to(options.as_bytes(), addr).unwrap();
        if sock.recv_from(&mut buf).is_ok() {
            return;
        }
    }
    panic!("nothing answers on {addr}");
}

#[test]
#[cfg_attr(missing_kamailio, ignore = "needs kamailio: apt-get install kamailio")]
fn uac_through_kamailio_to_uas() {
    external_tools::require("kamailio");
    let (_uas, uas_addr) = start_uas(30);
    let port = free_udp_port();
    let cfg = workspace_root().join("tests/kamailio/proxy.cfg");
    let kamailio = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg)
        .args(["-DD", "-E", "-m", "256", "-n", "1", "-l"])
        .arg(format!("udp:127.0.0.1:{port}"))
        .arg("-A")
        .arg(format!("NEXT_HOP=\"sip:{uas_addr}\""))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kamailio");
    let _kamailio = Guard(kamailio);
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for(proxy);
    let (summary, rows) = run_uac(proxy, 500, 2000, &[]);
    assert_clean(&summary, &rows, 2000);
}

#[test]
fn uac_through_sluice_proxy_to_uas() {
    let (_uas, uas_addr) = start_uas(30);
    let (_proxy, proxy_addr) = spawn_listening(
        Command::new(SLUICE).args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--next-hop",
            &uas_addr.to_string(),
            "--duration",
            "30s",
        ]),
        "sluice proxy: listening on udp ",
    );
    let (summary, rows) = run_uac(proxy_addr, 1000, 3000, &[]);
    assert_clean(&summary, &rows, 3000);
}
