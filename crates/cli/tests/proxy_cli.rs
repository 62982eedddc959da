//! `sluice proxy` from outside: effective config, config errors, a bounded run, and graceful
//! shutdown on SIGTERM (503 to new INVITEs while draining is covered by the core tests).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn print_config_shows_file_values_with_flags_on_top() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/proxy.toml");
    let (code, out, err) = sluice(&[
        "proxy",
        "--config",
        example,
        "--queue-capacity",
        "1234",
        "--control-algorithm",
        "threshold",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queue_capacity = 1234\n"), "{out}");
    assert!(out.contains("algorithm = \"threshold\"\n"), "{out}");
    // From the file, untouched by flags.
    assert!(out.contains("next_hop = \"127.0.0.1:5070\"\n"), "{out}");
    assert!(out.contains("user = \"carol\"\n"), "{out}");
}

#[test]
fn bad_configs_are_named_clearly() {
    let dir = std::env::temp_dir().join(format!("sluice-proxy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "queue_capacity = 10\nqueue_size = 5\n").unwrap();
    let (code, _, err) = sluice(&["proxy", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown field `queue_size`") && err.contains("bad.toml"),
        "{err}"
    );
    let (code, _, err) = sluice(&["proxy", "--queue-capacity", "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("queue_capacity must be at least 1"), "{err}");
    let (code, _, err) = sluice(&["proxy", "--control-algorithm", "win-disc"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("computes feedback for upstream neighbours"),
        "{err}"
    );
    // Values out of range: every one named, with its key and what is allowed.
    let out_of_range = dir.join("range.toml");
    std::fs::write(
        &out_of_range,
        "[control]\nalgorithm = \"pi\"\n[control.pi]\ntarget_cpu = 7\nk_pc = -3\n",
    )
    .unwrap();
    let (code, _, err) = sluice(&["proxy", "--config", out_of_range.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("control.pi.target_cpu = 7: allowed above 0, up to 1")
            && err.contains("control.pi.k_pc = -3: allowed 0 or more"),
        "{err}"
    );
    let queues = dir.join("queues.toml");
    std::fs::write(
        &queues,
        "[tcp]\nwrite_queue_bytes = 1048576\nwrite_queues_total_bytes = 65536\n",
    )
    .unwrap();
    let (code, _, err) = sluice(&["proxy", "--config", queues.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "tcp.write_queues_total_bytes = 65536: allowed tcp.write_queue_bytes (1048576) or more"
        ),
        "{err}"
    );
    let (code, _, err) = sluice(&["proxy", "--config", "/nonexistent/proxy.toml"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read /nonexistent/proxy.toml"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flags_name_their_config_keys_and_take_units() {
    let (code, out, err) = sluice(&[
        "proxy",
        "--cost-forward",
        "2ms",
        "--cost-reject",
        "250us",
        "--retry-after",
        "5s",
        "--shutdown-grace",
        "1m",
        "--duration",
        "1h",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    for line in [
        "cost_forward_us = 2000.0\n",
        "cost_reject_us = 250.0\n",
        "retry_after_s = 5\n",
        "shutdown_grace_s = 60.0\n",
        "duration_s = 3600.0\n",
    ] {
        assert!(out.contains(line), "{line:?} not in {out}");
    }
    // A bare number is not taken as seconds: the error says to add a unit.
    let (code, _, err) = sluice(&["proxy", "--duration", "20"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`20`: add a unit, such as 20s or 20ms"),
        "{err}"
    );
    let (code, _, err) = sluice(&["proxy", "--retry-after", "1500ms"]);
    assert_eq!(code, 1);
    assert!(err.contains("--retry-after takes whole seconds"), "{err}");
    // An unknown algorithm lists the known ones.
    let (code, _, err) = sluice(&["proxy", "--control-algorithm", "foo"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value 'foo'") && err.contains("threshold") && err.contains("pi"),
        "{err}"
    );
}

#[test]
fn duration_ends_the_run_and_prints_a_report() {
    let (code, out, err) = sluice(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--next-hop",
        "127.0.0.1:9",
        "--duration",
        "300ms",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("listening on udp 127.0.0.1:"), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["datagrams_in"], 0);
}

/// Starts `sluice proxy` on a free port with these extra arguments; returns the child,
/// the address it reports listening on, and its standard error, which must stay open
/// while it runs (a proxy whose stderr is closed cannot report its shutdown).
fn spawn_proxy(args: &[&str]) -> (std::process::Child, String, impl BufRead) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("sluice proxy: listening on udp ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (child, addr, stderr)
}

/// SIGTERM to a child process.
fn terminate(child: &std::process::Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

#[test]
fn sigterm_drains_and_exits_cleanly() {
    let (child, addr, _stderr) =
        spawn_proxy(&["--next-hop", "127.0.0.1:9", "--shutdown-grace", "10s"]);
    // An OPTIONS the proxy answers itself (400: no From), to show it is serving.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock.send_to(
        b"OPTIONS sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKo\r\n\
          To: <sip:x@127.0.0.1>\r\nCall-ID: o\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        &addr,
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"SIP/2.0 400 "));

    let started = Instant::now();
    terminate(&child);
    let out = child.wait_with_output().unwrap();
    // Nothing was running, so the drain ends at once rather than after the 10 s grace.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["dropped"]["invalid"], 1);
}

#[test]
fn sigterm_with_calls_in_flight_answers_every_admitted_invite() {
    // A next hop that never answers: the calls are still open when the signal comes.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let next_hop = silent.local_addr().unwrap().to_string();
    let (child, addr, _stderr) =
        spawn_proxy(&["--next-hop", &next_hop, "--shutdown-grace", "500ms"]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = sock.local_addr().unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    for i in 0..5 {
        let invite = format!(
            "INVITE sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKt{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:a@{me}>;tag=f{i}\r\nTo: <sip:x@127.0.0.1>\r\n\
             Call-ID: term{i}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        );
        sock.send_to(invite.as_bytes(), &addr).unwrap();
    }
    let mut buf = [0u8; 2048];
    let mut statuses = Vec::new();
    while statuses.len() < 5 {
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        statuses.push(String::from_utf8_lossy(&buf[n.min(8)..n.min(11)]).into_owned());
    }
    assert!(statuses.iter().all(|s| s == "100"), "{statuses:?}");
    terminate(&child);
    let mut finals = Vec::new();
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        let status = String::from_utf8_lossy(&buf[n.min(8)..n.min(11)]).into_owned();
        if status != "100" {
            finals.push(status);
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(finals.len(), 5, "{finals:?}");
    assert!(
        finals.iter().all(|s| s == "408" || s == "503"),
        "{finals:?}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["generated"]["abandoned_at_shutdown"], 5);
    drop(silent);
}

#[test]
fn sigterm_stops_a_proxy_whose_standard_error_was_closed() {
    // A supervisor that stops reading standard error must not make SIGTERM a no-op.
    let (mut child, _addr, stderr) =
        spawn_proxy(&["--next-hop", "127.0.0.1:9", "--shutdown-grace", "1s"]);
    drop(stderr);
    terminate(&child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// `--log-format json`: every line on standard error is a JSON event, and the control
/// loop's state changes are among them. A burst into a short queue of a slow proxy turns
/// INVITEs away (overload entered, with how many); a quiet second ends it (left).
#[test]
fn json_log_reports_overload_entered_and_left() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let next_hop = silent.local_addr().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--log-format", "json", "proxy", "--listen", "127.0.0.1:0"])
        .args(["--next-hop", &next_hop, "--queue-capacity", "20"])
        .args([
            "--cost-forward",
            "20ms",
            "--duration",
            "4s",
            "--shutdown-grace",
            "500ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let listening: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(listening["fields"]["message"], "listening", "{first}");
    let addr = listening["fields"]["udp"].as_str().unwrap().to_owned();

    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = sock.local_addr().unwrap();
    for i in 0..200 {
        let invite = format!(
            "INVITE sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bKj{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:a@{me}>;tag=f{i}\r\nTo: <sip:x@127.0.0.1>\r\n\
             Call-ID: json{i}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        );
        sock.send_to(invite.as_bytes(), &addr).unwrap();
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let mut report = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut report).unwrap();
    assert!(child.wait().unwrap().success());
    let events: Vec<serde_json::Value> = rest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let find = |prefix: &str| {
        events
            .iter()
            .find(|e| {
                e["target"] == "sluice::control"
                    && e["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(prefix))
            })
            .unwrap_or_else(|| panic!("no '{prefix}' in {rest}; report {report}"))
    };
    let entered = find("overload entered");
    assert_eq!(entered["level"], "WARN");
    assert!(
        entered["fields"]["turned_away"].as_u64().unwrap() > 0,
        "{entered}"
    );
    let left = find("overload left");
    // The total, which the burst's first interval may not have held all of.
    assert!(
        left["fields"]["turned_away"].as_u64() >= entered["fields"]["turned_away"].as_u64(),
        "{rest}"
    );
    drop(silent);
}
