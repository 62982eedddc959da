//! `sluice load` over TCP on loopback: sluice's UAC against sluice's UAS with one shared
//! connection and with one per call, and against SIPp both ways (`-t t1`, `-t tn`; skipped
//! with a notice when `sipp` is not installed); and through a proxy over TCP on both
//! sides: `sluice proxy`, and Kamailio (skipped with a notice when it is not installed).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../../tests/external_tools.rs"]
mod external_tools;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
/// Calls of each SIPp run.
const CALLS: u32 = 200;

/// A child process killed when the test ends, pass or fail.
struct Guard(Option<Child>);

impl Guard {
    /// Waits for the child to exit by itself and returns its output.
    fn wait(mut self) -> Output {
        self.0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("wait")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else { return };
        // SIGTERM first: Kamailio then stops its worker processes too (SIGKILL would leave
        // them running, holding their port).
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-load-tcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `sluice load uas --transport tcp` on a free port for `duration`, writing its summary to
/// `out`: the process and its address.
fn start_uas(duration: &str, out: &Path) -> (Guard, SocketAddr) {
    let mut child = Command::new(SLUICE)
        .args([
            "load",
            "uas",
            "--transport",
            "tcp",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--duration", duration, "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uas");
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let guard = Guard(Some(child));
    for line in lines.by_ref() {
        if let Some(addr) = line.expect("stderr").strip_prefix("listening on ") {
            let addr = addr.trim().parse().expect("address");
            std::thread::spawn(move || for _ in lines {});
            return (guard, addr);
        }
    }
    panic!("the UAS exited without saying where it listens");
}

/// Runs `sluice load uac --transport tcp` to the end: its summary.
fn run_uac(target: SocketAddr, calls: u32, extra: &[&str]) -> Value {
    let out = Command::new(SLUICE)
        .args(["load", "uac", "--transport", "tcp", "--target"])
        .arg(target.to_string())
        .args(["--rate", "100", "--calls", &calls.to_string()])
        .args(["--hold", "20ms", "--drain-timeout", "10s"])
        .args(extra)
        .output()
        .expect("run uac");
    assert!(
        out.status.success(),
        "uac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("summary on standard output")
}

/// Every call set up and torn down, nothing retransmitted or lost either way.
fn assert_uac_clean(summary: &Value, calls: u64) {
    let s = &summary["summary"];
    for (field, want) in [
        ("offered", calls),
        ("successful", calls),
        ("completed", calls),
        ("failed", 0),
        ("unfinished", 0),
        ("retransmissions_sent", 0),
        ("retransmissions_received", 0),
        ("malformed_received", 0),
    ] {
        assert_eq!(s[field].as_u64(), Some(want), "{field} in {s:#}");
    }
    assert_eq!(s["failures"]["bye"].as_u64(), Some(0), "{s:#}");
}

fn read_summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("summary.json"))
        .expect("JSON")
}

#[test]
fn uac_against_uas_over_tcp_shared_and_per_call() {
    let dir = scratch("sluice");
    let (uas, addr) = start_uas("8s", &dir);
    let shared = run_uac(addr, 300, &[]);
    assert_uac_clean(&shared, 300);
    assert_eq!(
        shared["tcp"],
        serde_json::json!({"opened": 1, "failed": 0, "closed": 1, "bytes_dropped": 0})
    );
    let per_call = run_uac(addr, 300, &["--tcp-connections", "per-call"]);
    assert_uac_clean(&per_call, 300);
    assert_eq!(
        per_call["tcp"],
        serde_json::json!({"opened": 300, "failed": 0, "closed": 300, "bytes_dropped": 0})
    );
    let status = uas.wait().status;
    assert!(status.success(), "{status}");
    let run = read_summary(&dir);
    let u = &run["summary"];
    for field in ["invites", "answered", "acks", "byes"] {
        assert_eq!(u[field].as_u64(), Some(600), "{field} in {u:#}");
    }
    assert_eq!(u["retransmissions_sent"].as_u64(), Some(0), "{u:#}");
    assert_eq!(u["retransmissions_received"].as_u64(), Some(0), "{u:#}");
    assert_eq!(run["tcp"]["opened"].as_u64(), Some(301), "{run:#}");
    assert_eq!(run["tcp"]["failed"].as_u64(), Some(0), "{run:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn udp_summaries_have_no_tcp_counters() {
    let out = Command::new(SLUICE)
        .args(["load", "uac", "--target", "127.0.0.1:9", "--rate", "10"])
        .args(["--calls", "1", "--drain-timeout", "100ms"])
        .output()
        .expect("run uac");
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary.get("tcp").is_none(), "{summary:#}");
}

#[test]
fn tcp_connections_need_tcp() {
    let out = Command::new(SLUICE)
        .args(["load", "uac", "--target", "127.0.0.1:9", "--rate", "10"])
        .args(["--calls", "1", "--tcp-connections", "per-call"])
        .output()
        .expect("run uac");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tcp-connections needs --transport tcp"),
        "{err}"
    );
}

fn free_port() -> u16 {
    // Free for TCP and UDP alike: SIPp binds both.
    sluice_bench::process::free_sip_port().unwrap()
}

/// SIPp with a built-in scenario over TCP, writing its statistics into `dir`.
fn sipp(scenario: &str, transport: &str, dir: &Path, port: u16, calls: u32) -> Command {
    let mut cmd = Command::new("sipp");
    // Whatever else SIPp writes (a fatal error's default statistics file) lands there too.
    cmd.current_dir(dir)
        .args(["-sn", scenario, "-t", transport, "-i", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-m", &calls.to_string()])
        .args(["-nostdin", "-timeout", "60s", "-trace_stat", "-stf"])
        .arg(dir.join(format!("{scenario}-{transport}-stats.csv")))
        .args(["-trace_err", "-error_file"])
        .arg(dir.join(format!("{scenario}-{transport}-errors.log")))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// A cumulative counter from the last row of a SIPp `-trace_stat` file.
fn sipp_stat(dir: &Path, file: &str, column: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap_or_default().split(';').collect();
    let last: Vec<&str> = lines.next_back().unwrap_or_default().split(';').collect();
    header
        .iter()
        .position(|h| *h == column)
        .and_then(|i| last.get(i))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {column} in {file}: {text}"))
}

fn errors(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("errors.log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

#[test]
#[cfg_attr(missing_sipp, ignore = "needs sipp: apt-get install sip-tester")]
fn sluice_uac_drives_sipp_uas_over_tcp_shared_and_per_call() {
    external_tools::require("sipp");
    let dir = scratch("sipp-uas");
    for (connections, opened) in [("shared", 1), ("per-call", u64::from(CALLS))] {
        let port = free_port();
        let sipp_uas = Guard(Some(
            sipp("uas", "t1", &dir, port, CALLS).spawn().expect("sipp"),
        ));
        let deadline = Instant::now() + Duration::from_secs(10);
        // Waits for SIPp's port to open without connecting: SIPp would take a probe's
        // connection for a caller's.
        while !listening(port) {
            assert!(Instant::now() < deadline, "SIPp does not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let target = SocketAddr::from(([127, 0, 0, 1], port));
        let summary = run_uac(target, CALLS, &["--tcp-connections", connections]);
        assert_uac_clean(&summary, u64::from(CALLS));
        assert_eq!(
            summary["tcp"]["opened"].as_u64(),
            Some(opened),
            "{summary:#}"
        );
        let out = sipp_uas.wait();
        assert!(
            out.status.success(),
            "SIPp against {connections}: {} {}",
            out.status,
            errors(&dir)
        );
        // SIPp's statistics file is rewritten by each run.
        let stats = "uas-t1-stats.csv";
        assert_eq!(
            sipp_stat(&dir, stats, "SuccessfulCall(C)"),
            u64::from(CALLS)
        );
        assert_eq!(sipp_stat(&dir, stats, "FailedCall(C)"), 0);
        assert_eq!(sipp_stat(&dir, stats, "Retransmissions(C)"), 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether something listens on TCP `port` of 127.0.0.1, from the kernel's table.
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines()
            .any(|l| l.contains(&format!("0100007F{hex}")) && l.contains(" 0A "))
    })
}

#[test]
#[cfg_attr(missing_sipp, ignore = "needs sipp: apt-get install sip-tester")]
fn sipp_uac_drives_sluice_uas_over_tcp_shared_and_per_call() {
    external_tools::require("sipp");
    let dir = scratch("sipp-uac");
    let (uas, addr) = start_uas("10s", &dir);
    for transport in ["t1", "tn"] {
        let out = sipp("uac", transport, &dir, free_port(), CALLS)
            // Below the open-file limit, which SIPp insists on for a socket per call.
            .args(["-r", "100", "-max_socket", "1000"])
            .arg(addr.to_string())
            .output()
            .expect("run sipp");
        assert!(
            out.status.success(),
            "SIPp -t {transport}: {} {}",
            out.status,
            errors(&dir)
        );
        let stats = format!("uac-{transport}-stats.csv");
        assert_eq!(
            sipp_stat(&dir, &stats, "SuccessfulCall(C)"),
            u64::from(CALLS)
        );
        assert_eq!(sipp_stat(&dir, &stats, "FailedCall(C)"), 0);
        assert_eq!(sipp_stat(&dir, &stats, "Retransmissions(C)"), 0);
    }
    let status = uas.wait().status;
    assert!(status.success(), "{status}");
    let run = read_summary(&dir);
    let u = &run["summary"];
    for field in ["invites", "answered", "acks", "byes"] {
        assert_eq!(
            u[field].as_u64(),
            Some(2 * u64::from(CALLS)),
            "{field} in {u:#}"
        );
    }
    assert_eq!(u["retransmissions_sent"].as_u64(), Some(0), "{u:#}");
    // One connection for -t t1, one per call for -t tn.
    assert_eq!(
        run["tcp"]["opened"].as_u64(),
        Some(1 + u64::from(CALLS)),
        "{run:#}"
    );
    assert_eq!(run["tcp"]["failed"].as_u64(), Some(0), "{run:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until something accepts TCP connections on `addr`.
fn wait_for_tcp(addr: SocketAddr) {
    let start = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nothing listens on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn uac_through_sluice_proxy_over_tcp_to_uas() {
    let dir = scratch("sluice-proxy");
    let (uas, uas_addr) = start_uas("40s", &dir.join("uas"));
    let port = free_port();
    let proxy = Command::new(SLUICE)
        .args(["proxy", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--next-hop", &uas_addr.to_string(), "--tcp-to-next-hops"])
        .args(["--duration", "40s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn proxy");
    let _proxy = Guard(Some(proxy));
    let proxy_addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_tcp(proxy_addr);
    let summary = run_uac(proxy_addr, 600, &[]);
    assert_uac_clean(&summary, 600);
    drop(uas);
}

#[test]
#[cfg_attr(missing_kamailio, ignore = "needs kamailio: apt-get install kamailio")]
fn uac_through_kamailio_over_tcp_to_uas() {
    external_tools::require("kamailio");
    let dir = scratch("kamailio");
    let (uas, uas_addr) = start_uas("40s", &dir.join("uas"));
    let port = free_port();
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/kamailio/proxy.cfg");
    let kamailio = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg)
        .args(["-DD", "-E", "-m", "256", "-n", "1", "-A", "WITH_TCP", "-l"])
        .arg(format!("tcp:127.0.0.1:{port}"))
        .arg("-A")
        .arg(format!("NEXT_HOP=\"sip:{uas_addr};transport=tcp\""))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kamailio");
    let _kamailio = Guard(Some(kamailio));
    let proxy_addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_tcp(proxy_addr);
    let summary = run_uac(proxy_addr, 600, &[]);
    assert_uac_clean(&summary, 600);
    drop(uas);
}
