//! Attacks from the same network, replayed against a live proxy on loopback sockets: each
//! test sends what an attacker would and checks that it no longer works (and that the
//! proxy's real work goes on).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use sluice_control::overload::OcAlgorithm;
use sluice_load::shell::{bind_udp, run_uac, Stop};
use sluice_load::{SecondRow, UacConfig};
use sluice_proxy::{HopRole, ProxyConfig};

mod common;
use common::{Running, Uas};

fn on(ip: [u8; 4]) -> SocketAddr {
    SocketAddr::from((ip, 0))
}

fn localhost0() -> SocketAddr {
    on([127, 0, 0, 1])
}

fn config(next_hop: Option<SocketAddr>) -> ProxyConfig {
    ProxyConfig {
        listen: localhost0(),
        next_hop,
        shutdown_grace_s: 0.5,
        ..ProxyConfig::default()
    }
}

fn socket(at: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind(at).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Everything `s` receives until it has been quiet for `quiet`.
fn drain(s: &UdpSocket, quiet: Duration) -> Vec<String> {
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut buf = vec![0u8; 65_536];
    let mut got = Vec::new();
    while let Ok((n, _)) = s.recv_from(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    got
}

fn status_of(msg: &str) -> Option<u16> {
    msg.strip_prefix("SIP/2.0 ")?.get(..3)?.parse().ok()
}

/// A request from `from` with the given start-line target and extra header lines.
fn request(method: &str, uri: &str, from: SocketAddr, call: &str, extra: &str) -> String {
    format!(
        "{method} {uri} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bK-{call}\r\n\
         Max-Forwards: 70\r\n\
         {extra}\
         From: <sip:attacker@{from}>;tag=a-{call}\r\n\
         To: <sip:target@example.com>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 {method}\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

#[test]
fn forged_feedback_from_the_next_hops_address_leaves_admission_unchanged() {
    // The "RE" is a socket of the test's: what it sends comes from the next hop's own
    // address, as a spoofed datagram would.
    let re = socket(localhost0());
    let re_addr = re.local_addr().unwrap();
    let mut se = config(Some(re_addr));
    se.overload.role = HopRole::Se;
    se.overload.client.algorithms = vec![OcAlgorithm::Loss];
    let proxy = Running::start(se);
    let uac = socket(localhost0());
    let uac_addr = uac.local_addr().unwrap();
    // The forgery: full rejection for an hour, with the largest oc-seq there is, on a
    // response whose branch has the proxy's prefix but answers nothing it sent.
    let forged = format!(
        "SIP/2.0 100 Trying\r\n\
         Via: SIP/2.0/UDP {};branch=z9hG4bKsl1.0000000000000000;oc=100;oc-algo=\"loss\";\
         oc-validity=3600000;oc-seq=999999999999.99999\r\n\
         Via: SIP/2.0/UDP {uac_addr};branch=z9hG4bK-x\r\n\
         From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: forged\r\n\
         CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
        proxy.addr
    );
    re.send_to(forged.as_bytes(), proxy.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..10 {
        let invite = request(
            "INVITE",
            "sip:b@example.com",
            uac_addr,
            &format!("f{i}"),
            "",
        );
        uac.send_to(invite.as_bytes(), proxy.addr).unwrap();
    }
    let forwarded = drain(&re, Duration::from_millis(300));
    let answers = drain(&uac, Duration::from_millis(100));
    assert_eq!(
        forwarded
            .iter()
            .filter(|m| m.starts_with("INVITE "))
            .count(),
        10,
        "every INVITE is forwarded despite the forgery"
    );
    assert!(
        answers.iter().all(|m| status_of(m) == Some(100)),
        "{answers:?}"
    );
    // Genuine feedback, on a response to a forwarded INVITE, still takes effect.
    let first = &forwarded[0];
    // The SE's Via declares `oc`; the server's value replaces the declaration.
    let via = first.lines().find(|l| l.starts_with("Via: ")).unwrap();
    let via = via.split(";oc").next().unwrap();
    let mut genuine = format!(
        "SIP/2.0 100 Trying\r\n{via};oc=100;oc-algo=\"loss\";oc-validity=10000;oc-seq=5.0\r\n"
    );
    for line in first
        .lines()
        .skip(1)
        .filter(|l| {
            l.starts_with("Via: ")
                || l.starts_with("From: ")
                || l.starts_with("To: ")
                || l.starts_with("Call-ID: ")
                || l.starts_with("CSeq: ")
        })
        .skip(1)
    {
        genuine.push_str(line);
        genuine.push_str("\r\n");
    }
    genuine.push_str("Content-Length: 0\r\n\r\n");
    re.send_to(genuine.as_bytes(), proxy.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let invite = request("INVITE", "sip:b@example.com", uac_addr, "after", "");
    uac.send_to(invite.as_bytes(), proxy.addr).unwrap();
    let answers = drain(&uac, Duration::from_millis(300));
    let report = proxy.finish();
    assert!(
        answers.iter().any(|m| status_of(m) == Some(503)),
        "{answers:?}"
    );
    assert_eq!(report.stats.hop.feedback_without_transaction, 1);
    assert_eq!(report.stats.hop.client.applied, 1, "{:?}", report.stats.hop);
}

#[test]
fn a_wildcard_bound_proxy_sent_a_request_for_itself_answers_482_at_once() {
    // The worst configuration: bound to every interface, no next hop, routing by
    // Request-URI. The request names another loopback address of the same host.
    let mut cfg = config(None);
    cfg.listen = SocketAddr::from(([0, 0, 0, 0], 0));
    cfg.route_by_request_uri = true;
    let proxy = Running::start(cfg);
    let port = proxy.addr.port();
    let client = socket(localhost0());
    let from = client.local_addr().unwrap();
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let options = request(
        "OPTIONS",
        &format!("sip:x@127.0.0.2:{port}"),
        from,
        "self",
        &format!("Route: <sip:127.0.0.3:{port};lr>\r\n"),
    );
    client.send_to(options.as_bytes(), to).unwrap();
    let answers = drain(&client, Duration::from_millis(300));
    let report = proxy.finish();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        matches!(status_of(&answers[0]), Some(482 | 483)),
        "{answers:?}"
    );
    assert!(report.stats.datagrams_in <= 3, "{:?}", report.stats);
    assert!(report.stats.transactions <= 2);
}

#[test]
fn two_proxies_that_route_to_each_other_stop_the_loop_at_the_first_return() {
    let a_addr = std::net::SocketAddr::new(
        localhost0().ip(),
        sluice_sys::free_sip_port(localhost0().ip()).unwrap(),
    );
    let b = Running::start(config(Some(a_addr)));
    let mut a_cfg = config(Some(b.addr));
    a_cfg.listen = a_addr;
    let a = Running::start(a_cfg);
    let client = socket(localhost0());
    let from = client.local_addr().unwrap();
    let options = request("OPTIONS", "sip:x@example.com", from, "ab", "");
    client.send_to(options.as_bytes(), a.addr).unwrap();
    let answers = drain(&client, Duration::from_millis(500));
    let (ra, rb) = (a.finish(), b.finish());
    assert!(
        answers.iter().any(|m| status_of(m) == Some(482)),
        "{answers:?}"
    );
    // A -> B -> A (loop found), 482 back: a handful of datagrams, not seventy hops.
    assert!(
        ra.stats.datagrams_in + rb.stats.datagrams_in <= 6,
        "{} {}",
        ra.stats.datagrams_in,
        rb.stats.datagrams_in
    );
    assert_eq!(ra.stats.loops + rb.stats.loops, 1);
}

#[test]
fn a_route_or_request_uri_to_a_third_address_gets_403_and_nothing_reaches_it() {
    let victim = socket(localhost0());
    let victim_addr = victim.local_addr().unwrap();
    let next_hop = socket(localhost0());
    let proxy = Running::start(config(Some(next_hop.local_addr().unwrap())));
    let bare = Running::start(config(None));
    let client = socket(localhost0());
    let from = client.local_addr().unwrap();
    let routed = request(
        "MESSAGE",
        "sip:x@example.com",
        from,
        "r1",
        &format!("Route: <sip:{victim_addr};lr>\r\n"),
    );
    client.send_to(routed.as_bytes(), proxy.addr).unwrap();
    let by_uri = request("MESSAGE", &format!("sip:x@{victim_addr}"), from, "r2", "");
    client.send_to(by_uri.as_bytes(), bare.addr).unwrap();
    let answers = drain(&client, Duration::from_millis(300));
    assert_eq!(
        answers.iter().filter(|m| status_of(m) == Some(403)).count(),
        2,
        "{answers:?}"
    );
    assert!(drain(&victim, Duration::from_millis(300)).is_empty());
    assert!(drain(&next_hop, Duration::from_millis(10)).is_empty());
    let (p, b) = (proxy.finish(), bare.finish());
    assert_eq!(
        p.stats.forbidden_destinations + b.stats.forbidden_destinations,
        2
    );
}

#[test]
fn a_stray_response_is_not_relayed_to_the_address_its_vias_name() {
    let victim = socket(localhost0());
    let victim_addr = victim.local_addr().unwrap();
    let proxy = Running::start(config(Some(localhost0())));
    let attacker = socket(localhost0());
    // Our branch prefix, but a sent-by that is not this proxy's; and a 486, which no
    // transaction-less relay would send on anyway.
    for (sent_by, status) in [("192.0.2.9:5060", 200), (&*proxy.addr.to_string(), 486)] {
        let stray = format!(
            "SIP/2.0 {status} X\r\n\
             Via: SIP/2.0/UDP {sent_by};branch=z9hG4bKsl9.000000000000aaaaaaaa\r\n\
             Via: SIP/2.0/UDP {victim_addr};branch=z9hG4bK-v\r\n\
             From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: stray\r\n\
             CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        );
        attacker.send_to(stray.as_bytes(), proxy.addr).unwrap();
    }
    assert!(drain(&victim, Duration::from_millis(300)).is_empty());
    let report = proxy.finish();
    assert_eq!(report.stats.dropped_stray_responses, 2);
}

/// The next hop answers a forwarded INVITE with 180s as fast as it can. Each one re-arms
/// Timer C (RFC 3261 §16.7 step 2) and is relayed, as it must be; the deadlines it
/// supersedes are trimmed as they come, not left to wait for Timer C (181 s) to fire.
#[test]
fn a_next_hop_flooding_180s_leaves_the_timer_c_queue_bounded_and_the_call_answered() {
    let callee = socket(localhost0());
    let proxy = Running::start(config(Some(callee.local_addr().unwrap())));
    let caller = socket(localhost0());
    let from = caller.local_addr().unwrap();
    let invite = request("INVITE", "sip:target@example.com", from, "ringing", "");
    caller.send_to(invite.as_bytes(), proxy.addr).unwrap();
    let mut buf = vec![0u8; 65_536];
    let (n, _) = callee.recv_from(&mut buf).unwrap();
    let forwarded = String::from_utf8_lossy(&buf[..n]).into_owned();
    // A response to the forwarded INVITE: its Vias, From, Call-ID and CSeq, a To tag.
    let answer = |status: &str| {
        let mut lines = vec![format!("SIP/2.0 {status}")];
        for line in forwarded.lines().skip(1) {
            if line.is_empty() {
                break;
            }
            let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
            match name.as_str() {
                "via" | "from" | "call-id" | "cseq" => lines.push(line.to_string()),
                "to" => lines.push(format!("{line};tag=callee")),
                _ => {}
            }
        }
        lines.push("Content-Length: 0\r\n\r\n".to_string());
        lines.join("\r\n")
    };
    // The caller reads throughout, as a UA does: a full receive buffer would drop the
    // 200 at the caller, not at the proxy.
    let reader = caller.try_clone().unwrap();
    let at_caller = std::thread::spawn(move || {
        reader
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = vec![0u8; 65_536];
        let mut got = Vec::new();
        while let Ok((n, _)) = reader.recv_from(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = status_of(&msg) == Some(200);
            got.push(msg);
            if done {
                break;
            }
        }
        got
    });
    let ringing = answer("180 Ringing");
    for i in 0..20_000 {
        callee.send_to(ringing.as_bytes(), proxy.addr).unwrap();
        // Now and then let the proxy catch up, so that most of the flood is read.
        if i % 200 == 199 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    callee
        .send_to(answer("200 OK").as_bytes(), proxy.addr)
        .unwrap();
    let at_caller = at_caller.join().unwrap();
    let report = proxy.finish();
    let relayed_180s = report.stats.forwarded_responses.saturating_sub(1);
    eprintln!(
        "{relayed_180s} 180s relayed; Timer C queue at the end {}",
        report.stats.timer_c_queued
    );
    // Enough of the flood got through to have outgrown the bound several times over.
    assert!(relayed_180s > 8 * 1024, "{:?}", report.stats);
    assert!(
        report.stats.timer_c_queued <= 2 * 1024,
        "{:?}",
        report.stats
    );
    assert_eq!(report.stats.timer_c_cancels, 0);
    let statuses: Vec<u16> = at_caller.iter().filter_map(|m| status_of(m)).collect();
    assert_eq!(statuses.last(), Some(&200), "{} answers", statuses.len());
}

#[test]
fn a_request_whose_body_is_shorter_than_its_content_length_gets_400() {
    let proxy = Running::start(config(Some(localhost0())));
    let client = socket(localhost0());
    let from = client.local_addr().unwrap();
    let short = request("MESSAGE", "sip:x@example.com", from, "cl", "")
        .replace("Content-Length: 0", "Content-Length: 100")
        + "only a little";
    client.send_to(short.as_bytes(), proxy.addr).unwrap();
    let answers = drain(&client, Duration::from_millis(300));
    let report = proxy.finish();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(status_of(&answers[0]), Some(400));
    assert_eq!(report.stats.bad_content_length, 1);
}

/// Real calls from 127.0.0.1 at half the capacity while 127.0.0.2 floods new requests
/// (OPTIONS, and INVITEs with invented To tags) at ten times it.
#[test]
fn a_flood_of_new_requests_at_10x_leaves_real_calls_at_0_9_and_their_byes_are_never_refused() {
    const CAPACITY: f64 = 100.0;
    let uas = Uas::start_on(localhost0());
    let uas_addr = uas.addr;
    let mut cfg = config(Some(uas_addr));
    // 7 messages a call at 1430 us each: about 100 calls/s.
    cfg.cost_forward_us = 1430.0;
    cfg.cost_reject_us = 240.0;
    cfg.queue_capacity = 2000;
    // Above the real caller's 50 calls/s; the flood's 1,000 a second are cut to 60.
    cfg.new_requests_per_source = 60.0;
    let proxy = Running::start(cfg);
    let target = proxy.addr;
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flood = {
        let flooding = std::sync::Arc::clone(&flooding);
        std::thread::spawn(move || {
            let s = UdpSocket::bind(on([127, 0, 0, 2])).unwrap();
            let from = s.local_addr().unwrap();
            let mut sent = 0u64;
            let start = Instant::now();
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                let call = format!("flood{sent}");
                let m = if sent.is_multiple_of(2) {
                    request("OPTIONS", "sip:x@example.com", from, &call, "")
                } else {
                    request("INVITE", "sip:x@example.com", from, &call, "").replace(
                        "To: <sip:target@example.com>",
                        "To: <sip:target@example.com>;tag=invented",
                    )
                };
                let _ = s.send_to(m.as_bytes(), target);
                sent += 1;
                // 10x capacity: 1,000 requests a second.
                let due = start + Duration::from_micros(sent * 1000);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            sent
        })
    };
    let seconds = 8;
    let mut uac = UacConfig::new(localhost0(), target, 0.5 * CAPACITY);
    uac.duration = Some(Duration::from_secs(seconds));
    uac.drain_timeout = Duration::from_secs(3);
    let mut rows: Vec<SecondRow> = Vec::new();
    let run = run_uac(
        bind_udp(localhost0()).unwrap(),
        uac,
        &Stop {
            after: Some(Duration::from_secs(seconds + 6)),
            ..Stop::default()
        },
        |r| rows.push(*r),
    )
    .unwrap();
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    let report = proxy.finish();
    uas.finish();
    let offered: u64 = rows.iter().map(|r| r.counts.offered).sum();
    let good: u64 = rows.iter().map(|r| r.counts.successful).sum();
    eprintln!(
        "flood of {flooded}: real calls {good} of {offered}; proxy dropped {} over the source limit; {:?}",
        report.stats.dropped_rate_limit, run.summary.failures
    );
    assert!(offered > 300, "{offered}");
    assert!(good as f64 >= 0.9 * offered as f64, "{good} of {offered}");
    assert!(
        report.stats.dropped_rate_limit > flooded / 2,
        "{:?}",
        report.stats
    );
    assert_eq!(run.summary.failures.bye, 0, "{:?}", run.summary.failures);
}

#[test]
fn slow_admin_clients_do_not_delay_sip_processing_and_are_cut_off() {
    let mut cfg = config(Some(localhost0()));
    cfg.admin = Some(localhost0());
    let proxy = Running::start(cfg);
    let admin = proxy.admin.unwrap();
    // Half-sent requests on more connections than the endpoint serves at once.
    let mut stalled: Vec<TcpStream> = (0..24)
        .filter_map(|_| TcpStream::connect(admin).ok())
        .collect();
    for c in &mut stalled {
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    }
    // Meanwhile the SIP side answers at once (483 for Max-Forwards 0, from the proxy).
    let client = socket(localhost0());
    let from = client.local_addr().unwrap();
    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let m = request("OPTIONS", "sip:x@example.com", from, &format!("mf{i}"), "")
            .replace("Max-Forwards: 70", "Max-Forwards: 0");
        let sent = Instant::now();
        client.send_to(m.as_bytes(), proxy.addr).unwrap();
        let mut buf = [0u8; 4096];
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), Some(483));
        worst = worst.max(sent.elapsed());
    }
    assert!(
        worst < Duration::from_millis(100),
        "slowest SIP answer {worst:?}"
    );
    // The stalled connections are closed by the header read timeout (5 s).
    std::thread::sleep(Duration::from_secs(6));
    let mut still_open = 0;
    for c in &mut stalled {
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // Closed: end of stream (perhaps after a 408), or reset; open: the read times out.
        let mut rest = Vec::new();
        if let Err(e) = c.read_to_end(&mut rest) {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                still_open += 1;
            }
        }
    }
    assert_eq!(still_open, 0, "of {} stalled connections", stalled.len());
    // And a well-behaved scrape works afterwards.
    let mut c = TcpStream::connect(admin).unwrap();
    c.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let report = proxy.finish();
    assert_eq!(report.stats.too_many_hops, 20);
}

#[test]
fn at_the_end_of_the_grace_period_every_admitted_invite_gets_a_final_response() {
    // A next hop that never answers: the calls stay pending until the shutdown.
    let silent = socket(localhost0());
    let mut cfg = config(Some(silent.local_addr().unwrap()));
    cfg.shutdown_grace_s = 0.3;
    let proxy = Running::start(cfg);
    let uac = socket(localhost0());
    let from = uac.local_addr().unwrap();
    for i in 0..10 {
        let m = request("INVITE", "sip:x@example.com", from, &format!("g{i}"), "");
        uac.send_to(m.as_bytes(), proxy.addr).unwrap();
    }
    let first = drain(&uac, Duration::from_millis(200));
    assert_eq!(
        first.iter().filter(|m| status_of(m) == Some(100)).count(),
        10
    );
    let report = proxy.finish();
    let finals: Vec<u16> = drain(&uac, Duration::from_millis(300))
        .iter()
        .filter_map(|m| status_of(m))
        .filter(|s| *s >= 200)
        .collect();
    assert_eq!(finals.len(), 10, "{finals:?}");
    assert!(finals.iter().all(|s| matches!(s, 408 | 503)));
    assert_eq!(report.stats.abandoned_at_shutdown, 10);
    drop(silent);
}
