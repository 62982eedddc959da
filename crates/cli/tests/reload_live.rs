//! SIGHUP reloads a running `sluice proxy`, live on loopback: calls flow through it at 100
//! calls/s, each held 2 s, while its config file is rewritten to send new calls to a
//! second UAS and to run threshold admission, then signalled. A broken file signalled
//! after that leaves the running configuration alone. Every call completes, the calls
//! before the reload end (their BYEs) at the first UAS, and those after go to the second.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_load::shell::{spawn_loopback_uac, spawn_loopback_uas};
use sluice_load::{Hold, UacConfig};
use sluice_proxy::ProxyConfig;

const RATE: f64 = 100.0;
const OFFER_S: u64 = 6;

fn status(admin: SocketAddr) -> serde_json::Value {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(1)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /status HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    serde_json::from_str(&text[text.find("\r\n\r\n").unwrap() + 4..]).unwrap()
}

/// SIGHUP through the shell's own `kill`, so the test needs no procps on the machine.
fn hangup(pid: u32) {
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -HUP {pid}")])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn sighup_reroutes_new_calls_and_loses_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let stop_uas = Arc::<AtomicBool>::default();
    let (uas_a, thread_a) = spawn_loopback_uas(stop_uas.clone()).unwrap();
    let (uas_b, thread_b) = spawn_loopback_uas(stop_uas.clone()).unwrap();

    let proxy_addr = SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ));
    let admin = SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ));
    let mut config = ProxyConfig {
        listen: proxy_addr,
        next_hop: Some(uas_a),
        admin: Some(admin),
        duration_s: Some(OFFER_S as f64 + 12.0),
        shutdown_grace_s: 0.5,
        ..ProxyConfig::default()
    };
    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--log-format", "json", "proxy", "--config"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.contains("listening"), "{first}");
        let log = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
    }

    let mut uac = UacConfig::new("127.0.0.1:0".parse().unwrap(), proxy_addr, RATE);
    uac.duration = Some(Duration::from_secs(OFFER_S));
    uac.hold = Hold::Constant(Duration::from_secs(2));
    uac.drain_timeout = Duration::from_secs(4);
    let uac = spawn_loopback_uac(uac, Duration::from_secs(OFFER_S + 8), |_| {});

    std::thread::sleep(Duration::from_secs(3));
    let before = status(admin);
    config.next_hop = Some(uas_b);
    config.control.algorithm = "threshold".parse().unwrap();
    std::fs::write(&file, config.to_toml()).unwrap();
    hangup(child.id());
    std::thread::sleep(Duration::from_secs(1));
    // A file that does not parse: logged, and the proxy runs on as it was.
    std::fs::write(&file, "queue_capacity = \"many\"\n").unwrap();
    hangup(child.id());

    let run = uac.join().unwrap().unwrap();
    let after = status(admin);
    assert!(child.wait().unwrap().success(), "the proxy ran to its end");
    stop_uas.store(true, Ordering::Relaxed);
    let (a, b) = (
        thread_a.join().unwrap().unwrap().summary,
        thread_b.join().unwrap().unwrap().summary,
    );
    let s = &run.summary;
    eprintln!(
        "offered {}, set up {}, completed {}; UAS A {} INVITEs / {} BYEs, UAS B {} / {}",
        s.offered, s.successful, s.completed, a.invites, a.byes, b.invites, b.byes
    );
    assert!(s.offered >= 550, "{s:?}");
    assert_eq!(s.successful, s.offered, "every call set up: {s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
    assert_eq!(
        s.completed, s.offered,
        "every call ended with its BYE answered: {s:?}"
    );
    assert!(
        a.invites > 200 && b.invites > 200,
        "both UASes took calls: {a:?} {b:?}"
    );
    assert_eq!(
        a.byes, a.answered,
        "the calls set up before the reload ended where they began"
    );
    assert_eq!(b.byes, b.answered);
    assert!(after["transactions_refused"] == before["transactions_refused"]);

    let log = log.lock().unwrap().join("\n");
    assert!(
        log.contains("configuration reloaded") && log.contains("next_hop, control"),
        "{log}"
    );
    assert!(log.contains("configuration not reloaded"), "{log}");
}
