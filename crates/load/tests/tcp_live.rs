//! The UAC and UAS over TCP on loopback, both through the tokio shell: one connection
//! shared by every call, and one per call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_load::shell::tcp::{
    spawn_loopback_uac_tcp, spawn_loopback_uas_tcp, Connections, TcpConfig,
};
use sluice_load::{Hold, UacConfig};

const CALLS: u64 = 300;

fn calls_complete_over(connections: Connections) {
    let stop = Arc::new(AtomicBool::new(false));
    let (uas_addr, uas) = spawn_loopback_uas_tcp(TcpConfig::default(), stop.clone()).unwrap();
    let mut cfg = UacConfig::new(uas_addr, uas_addr, 150.0);
    cfg.max_calls = Some(CALLS);
    cfg.hold = Hold::Constant(Duration::from_millis(50));
    cfg.drain_timeout = Duration::from_secs(5);
    let tcp = TcpConfig {
        connections,
        ..TcpConfig::default()
    };
    let uac = spawn_loopback_uac_tcp(cfg, tcp, Duration::from_secs(30), |_| {})
        .join()
        .unwrap()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let uas = uas.join().unwrap().unwrap();
    let s = &uac.summary;
    assert_eq!(
        (s.offered, s.successful, s.completed, s.failed, s.unfinished),
        (CALLS, CALLS, CALLS, 0, 0),
        "{connections:?}: {s:#?}"
    );
    assert_eq!(s.failures.bye, 0);
    assert!(s.clean(), "{connections:?}: {s:#?}");
    assert_eq!(s.malformed_received, 0);
    let u = &uas.summary;
    assert_eq!(
        (u.invites, u.answered, u.acks, u.byes),
        (CALLS, CALLS, CALLS, CALLS)
    );
    assert_eq!((u.retransmissions_sent, u.retransmissions_received), (0, 0));
    let (c, a) = (uac.tcp.unwrap(), uas.tcp.unwrap());
    let want = match connections {
        Connections::Shared => 1,
        Connections::PerCall => CALLS,
    };
    for (side, counts) in [("uac", c), ("uas", a)] {
        assert_eq!(
            (counts.opened, counts.failed, counts.bytes_dropped),
            (want, 0, 0),
            "{connections:?} {side}: {counts:?}"
        );
        assert_eq!(counts.closed, want, "{connections:?} {side}: {counts:?}");
    }
    println!(
        "{connections:?}: {} calls completed, {} retransmissions; uac {c:?}, uas {a:?}",
        s.completed,
        s.retransmissions_sent + s.retransmissions_received + u.retransmissions_sent
    );
}

#[test]
fn calls_over_one_shared_connection_complete() {
    calls_complete_over(Connections::Shared);
}

#[test]
fn calls_over_a_connection_each_complete() {
    calls_complete_over(Connections::PerCall);
}

fn invite(branch: &str, call_id: &str, from: std::net::SocketAddr) -> String {
    format!(
        "INVITE sip:service@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP {from};branch=z9hG4bK-{branch}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:t@{from}>;tag=1\r\nTo: <sip:service@127.0.0.1>\r\n\
         Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:t@{from};transport=tcp>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// Reads from `stream` until `framer` has `n` messages (or the read times out).
fn read_messages(
    stream: &mut std::net::TcpStream,
    framer: &mut sluice_sip::StreamFramer,
    n: usize,
) -> Vec<String> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < n {
        while let Some(m) = framer.next_message().unwrap() {
            out.push(String::from_utf8(m.to_vec()).unwrap());
        }
        if out.len() >= n {
            break;
        }
        let got = stream.read(&mut buf).expect("a response in time");
        assert!(got > 0, "closed after {out:?}");
        framer.push(&buf[..got]);
    }
    out
}

#[test]
fn the_uas_frames_split_messages_answers_pings_and_drops_an_oversized_stream() {
    use std::io::{Read, Write};
    let stop = Arc::new(AtomicBool::new(false));
    let tcp = TcpConfig {
        max_message_size: 2_000,
        ..TcpConfig::default()
    };
    let (uas_addr, uas) = spawn_loopback_uas_tcp(tcp, stop.clone()).unwrap();
    let mut client = std::net::TcpStream::connect(uas_addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let me = client.local_addr().unwrap();
    // RFC 5626 §4.4.1: a double-CRLF ping gets a single CRLF.
    client.write_all(b"\r\n\r\n").unwrap();
    let mut pong = [0u8; 2];
    client.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"\r\n");
    // An INVITE in three pieces, a keep-alive before it.
    let text = format!("\r\n{}", invite("1", "split-1", me));
    for piece in [&text[..20], &text[20..100], &text[100..]] {
        client.write_all(piece.as_bytes()).unwrap();
        client.flush().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut framer = sluice_sip::StreamFramer::new(65_536);
    let answers = read_messages(&mut client, &mut framer, 3);
    let starts: Vec<&str> = answers.iter().map(|m| &m[..11]).collect();
    assert_eq!(starts, ["SIP/2.0 100", "SIP/2.0 180", "SIP/2.0 200"]);
    assert!(
        answers[2].contains(&format!("Contact: <sip:uas@{uas_addr};transport=tcp>\r\n")),
        "{}",
        answers[2]
    );
    let ack = format!(
        "ACK sip:uas@{uas_addr};transport=tcp SIP/2.0\r\nVia: SIP/2.0/TCP {me};branch=z9hG4bK-2\r\n\
         Max-Forwards: 70\r\nFrom: <sip:t@{me}>;tag=1\r\nTo: <sip:service@127.0.0.1>;tag=sluice-uas\r\n\
         Call-ID: split-1\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
    );
    client.write_all(ack.as_bytes()).unwrap();
    // A message past the limit: the stream can no longer be framed, and is closed.
    client
        .write_all(b"OPTIONS sip:x SIP/2.0\r\nContent-Length: 5000\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    // Closed (or reset, for the bytes it left unread), long before the 5 s read timeout.
    if let Err(e) = client.read_to_end(&mut rest) {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(rest.is_empty(), "{rest:?}");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let uas = uas.join().unwrap().unwrap();
    let u = &uas.summary;
    assert_eq!((u.invites, u.answered, u.acks), (1, 1, 1));
    assert_eq!(u.retransmissions_sent, 0);
    let c = uas.tcp.unwrap();
    assert_eq!((c.opened, c.failed, c.closed), (1, 1, 0), "{c:?}");
}

#[test]
fn the_write_queue_is_bounded_and_what_it_drops_is_counted() {
    use std::io::{Read, Write};
    let stop = Arc::new(AtomicBool::new(false));
    // Smaller than any response: each is dropped whole.
    let tcp = TcpConfig {
        write_queue_bytes: 100,
        ..TcpConfig::default()
    };
    let (uas_addr, uas) = spawn_loopback_uas_tcp(tcp, stop.clone()).unwrap();
    let mut client = std::net::TcpStream::connect(uas_addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let me = client.local_addr().unwrap();
    client
        .write_all(invite("1", "bounded-1", me).as_bytes())
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(client.read(&mut buf).is_err(), "nothing comes back");
    stop.store(true, Ordering::Relaxed);
    let uas = uas.join().unwrap().unwrap();
    let c = uas.tcp.unwrap();
    // 100 Trying, 180 Ringing and 200 OK, each a few hundred bytes.
    assert!(c.bytes_dropped > 600, "{c:?}");
    assert_eq!(uas.summary.invites, 1);
    // The 200 failed to go out: no retransmission of it is pending, nor counted.
    assert_eq!(uas.summary.retransmissions_sent, 0);
}

/// Accepts connections, reads what comes and closes each after its first bytes.
fn hang_up_on_everyone() -> std::net::SocketAddr {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
        }
    });
    addr
}

#[test]
fn calls_on_a_connection_the_peer_closes_fail_at_once() {
    for connections in [Connections::Shared, Connections::PerCall] {
        let target = hang_up_on_everyone();
        let mut cfg = UacConfig::new(target, target, 50.0);
        cfg.max_calls = Some(5);
        cfg.drain_timeout = Duration::from_secs(20);
        let tcp = TcpConfig {
            connections,
            ..TcpConfig::default()
        };
        let started = std::time::Instant::now();
        let run = spawn_loopback_uac_tcp(cfg, tcp, Duration::from_secs(30), |_| {})
            .join()
            .unwrap()
            .unwrap();
        let s = &run.summary;
        assert_eq!(
            (s.offered, s.failures.transport, s.unfinished),
            (5, 5, 0),
            "{connections:?}: {s:#?}"
        );
        // Without the report, each would wait for Timer B (32 s).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{connections:?}"
        );
        let c = run.tcp.unwrap();
        assert!(c.opened >= 1 && c.opened <= 5, "{connections:?}: {c:?}");
        assert_eq!(c.closed + c.failed, c.opened, "{connections:?}: {c:?}");
    }
}

#[test]
fn with_nobody_listening_a_shared_connection_is_an_error_and_per_call_ones_fail() {
    let port = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        sluice_sys::free_sip_port([127, 0, 0, 1].into()).unwrap(),
    ));
    // The listener is gone: connects are refused.
    let mut cfg = UacConfig::new(port, port, 100.0);
    cfg.max_calls = Some(3);
    let err = spawn_loopback_uac_tcp(
        cfg.clone(),
        TcpConfig::default(),
        Duration::from_secs(10),
        |_| {},
    )
    .join()
    .unwrap()
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let tcp = TcpConfig {
        connections: Connections::PerCall,
        ..TcpConfig::default()
    };
    let run = spawn_loopback_uac_tcp(cfg, tcp, Duration::from_secs(10), |_| {})
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(run.summary.failures.transport, 3);
    let c = run.tcp.unwrap();
    assert_eq!((c.opened, c.failed), (0, 3), "{c:?}");
    assert!(c.bytes_dropped > 0, "the INVITEs never went out: {c:?}");
}
