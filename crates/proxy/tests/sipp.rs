//! Interop over real UDP sockets on 127.0.0.1: SIPp UAC -> sluice proxy -> SIPp UAS, with
//! garbage datagrams mixed into the stream, then the admin endpoint checked with promtool.
//! Skipped (with a notice) when `sipp` is not installed; CI installs it (`sip-tester`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_proxy::ProxyConfig;

mod common;
use common::Running;
#[path = "../../../tests/external_tools.rs"]
mod external_tools;

const CALLS: u32 = 3000;
const RATE: u32 = 500;

fn free_udp_port() -> u16 {
    sluice_sys::free_sip_port([127, 0, 0, 1].into()).unwrap()
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/sipp")
        .join(name)
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let (head, body) = body.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The last row of a SIPp `-trace_stat` file as (column, value) pairs.
fn last_stats(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap_or_default().split(';').collect();
    let last: Vec<&str> = lines.next_back().unwrap_or_default().split(';').collect();
    header
        .iter()
        .zip(last)
        .map(|(h, v)| ((*h).to_owned(), v.to_owned()))
        .collect()
}

fn stat(stats: &[(String, String)], name: &str) -> u64 {
    stats
        .iter()
        .find(|(h, _)| h == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in SIPp stats: {stats:?}"))
}

/// Sends garbage at the proxy while calls run; returns how many 400s came back.
fn spray_garbage(proxy: SocketAddr, rounds: usize) -> usize {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let invalid = b"OPTIONS sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKbad\r\n\
                    To: <sip:x@127.0.0.1>\r\nCall-ID: bad\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
    let oversized = vec![b'X'; 6_000];
    let mut answers = 0;
    let mut buf = [0u8; 2048];
    for i in 0..rounds {
        let junk: &[u8] = match i % 4 {
            0 => b"not sip at all",
            1 => &oversized,
            2 => b"INVITE sip:x SIP/2.0\r\nVia: broken\r\n",
            _ => invalid,
        };
        sock.send_to(junk, proxy).unwrap();
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            if buf[..n].starts_with(b"SIP/2.0 400 ") {
                answers += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        if buf[..n].starts_with(b"SIP/2.0 400 ") {
            answers += 1;
        }
    }
    answers
}

#[test]
#[cfg_attr(
    any(missing_sipp, missing_promtool),
    ignore = "needs sipp and promtool: apt-get install sip-tester prometheus"
)]
fn sipp_calls_through_the_proxy_complete_with_garbage_mixed_in() {
    external_tools::require("sipp");
    external_tools::require("promtool");
    let dir = std::env::temp_dir().join(format!("sluice-proxy-sipp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let uas_port = free_udp_port();
    let uac_port = free_udp_port();
    let proxy = Running::start(ProxyConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        next_hop: Some(SocketAddr::from(([127, 0, 0, 1], uas_port))),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        max_datagram: 4_096,
        shutdown_grace_s: 2.0,
        ..ProxyConfig::default()
    });

    let sipp = |role: &str, extra: &[String]| {
        let mut cmd = Command::new("sipp");
        cmd.args(extra)
            .arg("-sf")
            .arg(scenario(&format!("{role}.xml")))
            .args(["-i", "127.0.0.1", "-m", &CALLS.to_string()])
            .args(["-buff_size", "1048576", "-nostdin", "-timeout", "60s"])
            .arg("-trace_stat")
            .arg("-stf")
            .arg(dir.join(format!("{role}-stats.csv")))
            .arg("-trace_err")
            .arg("-error_file")
            .arg(dir.join(format!("{role}-errors.log")))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().expect("sipp starts")
    };
    let mut uas = sipp("uas", &["-p".into(), uas_port.to_string()]);
    std::thread::sleep(Duration::from_millis(300));
    let mut uac = sipp(
        "uac",
        &[
            proxy.addr.to_string(),
            "-p".into(),
            uac_port.to_string(),
            "-s".into(),
            "bob".into(),
            "-r".into(),
            RATE.to_string(),
        ],
    );
    let proxy_addr = proxy.addr;
    let garbage = std::thread::spawn(move || spray_garbage(proxy_addr, 400));

    let uac_status = uac.wait().unwrap();
    let uas_status = uas.wait().unwrap();
    let bad_request_answers = garbage.join().unwrap();
    let uac_stats = last_stats(&dir.join("uac-stats.csv"));
    let uas_stats = last_stats(&dir.join("uas-stats.csv"));
    let errors = std::fs::read_to_string(dir.join("uac-errors.log")).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("uas-errors.log")).unwrap_or_default();

    let admin = proxy.admin.expect("admin endpoint configured");
    let status_json = http_get(admin, "/status");
    let metrics = http_get(admin, "/metrics");
    let report = proxy.finish();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(
        uac_status.success() && uas_status.success(),
        "sipp uac {uac_status}, uas {uas_status}; errors:\n{errors}"
    );
    for (who, stats) in [("uac", &uac_stats), ("uas", &uas_stats)] {
        assert_eq!(stat(stats, "SuccessfulCall(C)"), u64::from(CALLS), "{who}");
        assert_eq!(stat(stats, "FailedCall(C)"), 0, "{who}");
        assert_eq!(stat(stats, "FailedUnexpectedMessage(C)"), 0, "{who}");
    }
    let s = report.stats;
    // INVITE and BYE of every call went through a client transaction, every ACK statelessly.
    assert_eq!(s.forwarded_requests, 2 * u64::from(CALLS));
    assert_eq!(s.forwarded_acks, u64::from(CALLS));
    assert_eq!(s.dropped_queue_full, 0);
    // 100 of each garbage kind: not SIP, oversized, truncated SIP, and an invalid request.
    assert_eq!(s.oversized, 100);
    assert_eq!(s.malformed, 200);
    assert_eq!(s.invalid, 100);
    assert!(bad_request_answers > 0, "no 400 came back");
    let status: serde_json::Value = serde_json::from_str(&status_json).unwrap();
    assert!(status["admitted"].as_u64().unwrap() >= 5 * u64::from(CALLS));

    external_tools::require_promtool_accepts(&metrics);
}
