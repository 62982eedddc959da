//! Walks the state machines of RFC 3261 §17 (Figures 5–8), §13.3.1.4 and the table limits
//! with real SIP text, a virtual clock, and a driver that jumps from deadline to deadline.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_sip::{edit, HeaderName, Message, Method};
use sluice_time::Time;
use sluice_txn::{
    Config, Event, Origin, Peer, Received, Refused, RespondError, Timer, TransactionLayer,
    Transmit, TxId,
};

// ---- message helpers: real SIP text through Message::parse ----

struct Req<'a> {
    method: &'a str,
    branch: &'a str,
    sent_by: &'a str,
    transport: &'a str,
    call_id: &'a str,
    cseq: u32,
}

impl Default for Req<'_> {
    fn default() -> Self {
        Req {
            method: "INVITE",
            branch: "z9hG4bK-1",
            sent_by: "192.0.2.1:5060",
            transport: "UDP",
            call_id: "call-1@example.com",
            cseq: 1,
        }
    }
}

impl Req<'_> {
    fn msg(&self) -> Message {
        let Req {
            method,
            branch,
            sent_by,
            transport,
            call_id,
            cseq,
        } = self;
        let cseq_method = if *method == "ACK" { "ACK" } else { method };
        let text = format!(
            "{method} sip:bob@example.com SIP/2.0\r\n\
             Via: SIP/2.0/{transport} {sent_by};branch={branch}\r\n\
             Max-Forwards: 70\r\n\
             From: Alice <sip:alice@example.com>;tag=a1\r\n\
             To: Bob <sip:bob@example.com>\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} {cseq_method}\r\n\
             Content-Length: 0\r\n\r\n"
        );
        Message::parse(Bytes::from(text)).expect("test request parses")
    }
}

fn invite(branch: &str) -> Message {
    Req {
        branch,
        ..Req::default()
    }
    .msg()
}

fn non_invite(method: &str, branch: &str) -> Message {
    Req {
        method,
        branch,
        ..Req::default()
    }
    .msg()
}

fn response(request: &Message, status: u16) -> Message {
    let bytes = edit::response_to(request, status).to_tag("b2").build();
    Message::parse(bytes).expect("test response parses")
}

fn udp(last: u8) -> Peer {
    Peer::udp(SocketAddr::from(([192, 0, 2, last], 5060)))
}

fn tcp(last: u8) -> Peer {
    Peer::tcp(SocketAddr::from(([192, 0, 2, last], 5060)))
}

fn ms(n: u64) -> Time {
    Time::from_millis(n)
}

// ---- a tiny driver: the simulator's loop in miniature ----

struct Run {
    layer: TransactionLayer,
    now: Time,
    sent: Vec<(Time, Transmit)>,
    events: Vec<(Time, Event)>,
}

impl Run {
    fn new() -> Run {
        Run::with(Config::default())
    }

    fn with(config: Config) -> Run {
        Run {
            layer: TransactionLayer::new(config),
            now: Time::ZERO,
            sent: Vec::new(),
            events: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(t) = self.layer.poll_transmit() {
            self.sent.push((self.now, t));
        }
        while let Some(e) = self.layer.poll_event() {
            self.events.push((self.now, e));
        }
    }

    /// Fires every deadline up to and including `until`, then sets the clock there.
    fn advance(&mut self, until: Time) {
        while let Some(t) = self.layer.poll_timeout() {
            if t > until {
                break;
            }
            assert!(
                t >= self.now,
                "deadline {t} is in the past (now {})",
                self.now
            );
            self.now = t;
            self.layer.handle_timeout(t);
            self.drain();
        }
        self.now = until;
    }

    fn receive(&mut self, at: Time, msg: Message, from: Peer) -> Received {
        self.advance(at);
        let r = self.layer.handle_message(at, msg, from);
        self.drain();
        r
    }

    fn take_sent(&mut self) -> Vec<(Time, Transmit)> {
        std::mem::take(&mut self.sent)
    }

    fn take_events(&mut self) -> Vec<(Time, Event)> {
        std::mem::take(&mut self.events)
    }

    fn retransmission_times(&mut self) -> Vec<Time> {
        self.take_sent()
            .into_iter()
            .filter(|(_, t)| t.retransmission)
            .map(|(at, _)| at)
            .collect()
    }
}

fn times(ms_list: &[u64]) -> Vec<Time> {
    ms_list.iter().map(|&m| ms(m)).collect()
}

/// Event kinds with their times, for compact assertions.
fn kinds(events: &[(Time, Event)]) -> Vec<(Time, String)> {
    events
        .iter()
        .map(|(at, e)| {
            let k = match e {
                Event::Request { request, .. } => {
                    format!("request {}", request.method().map_or("?", Method::as_str))
                }
                Event::Response { response, .. } => {
                    format!("response {}", response.status().unwrap_or(0))
                }
                Event::StrayResponse { response, .. } => {
                    format!("stray {}", response.status().unwrap_or(0))
                }
                Event::Ack2xx { stopped, .. } => format!("ack2xx stopped={}", stopped.is_some()),
                Event::Refused { .. } => "refused".into(),
                Event::Timeout { timer, .. } => format!("timeout {timer:?}"),
                Event::TransportError { .. } => "transport error".into(),
                Event::Terminated { .. } => "terminated".into(),
                Event::GaveUp2xx { .. } => "gave up 2xx".into(),
            };
            (*at, k)
        })
        .collect()
}

fn ev(at_ms: u64, k: &str) -> (Time, String) {
    (ms(at_ms), k.to_string())
}

// ---- INVITE client transaction (Figure 5, §17.1.1) ----

#[test]
fn invite_client_retransmits_on_timer_a_and_times_out_on_timer_b() {
    let mut run = Run::new();
    let id = run
        .layer
        .send_request(Time::ZERO, invite("z9hG4bK-a"), udp(2))
        .unwrap();
    run.drain();
    assert_eq!(run.sent.len(), 1);
    assert!(!run.sent[0].1.retransmission);
    assert_eq!(run.layer.poll_timeout(), Some(ms(500)));
    run.advance(Time::from_secs(100));
    assert_eq!(
        run.retransmission_times(),
        times(&[500, 1_500, 3_500, 7_500, 15_500, 31_500])
    );
    assert_eq!(
        kinds(&run.events),
        vec![ev(32_000, "timeout B"), ev(32_000, "terminated")]
    );
    assert!(matches!(
        run.events[0].1,
        Event::Timeout { tx: TxId::Client(c), timer: Timer::B } if c == id
    ));
    assert!(run.layer.is_empty());
    assert_eq!(run.layer.poll_timeout(), None);
    let s = run.layer.stats();
    assert_eq!(s.retransmissions.invite, 6);
    assert_eq!((s.fired.a, s.fired.b), (6, 1));
}

#[test]
fn invite_client_provisional_stops_retransmission_and_2xx_terminates() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-p");
    run.layer
        .send_request(Time::ZERO, inv.clone(), udp(2))
        .unwrap();
    run.drain();
    run.take_sent();
    assert_eq!(
        run.receive(ms(700), response(&inv, 100), udp(2)),
        Received::Delivered
    );
    // Proceeding: no Timer A, and no Timer B either (it only guards Calling).
    assert_eq!(run.layer.poll_timeout(), None);
    run.advance(Time::from_secs(60));
    assert_eq!(run.retransmission_times(), times(&[500]));
    assert_eq!(
        run.receive(ms(60_000), response(&inv, 180), udp(2)),
        Received::Delivered
    );
    assert_eq!(
        run.receive(ms(61_000), response(&inv, 200), udp(2)),
        Received::Delivered
    );
    assert_eq!(
        kinds(&run.take_events()),
        vec![
            ev(700, "response 100"),
            ev(60_000, "response 180"),
            ev(61_000, "response 200"),
            ev(61_000, "terminated")
        ]
    );
    assert!(run.layer.is_empty());
    // A retransmitted 2xx now matches nothing: passed up for stateless forwarding (§16.7).
    assert_eq!(
        run.receive(ms(61_500), response(&inv, 200), udp(2)),
        Received::Stray
    );
    assert_eq!(kinds(&run.take_events()), vec![ev(61_500, "stray 200")]);
}

#[test]
fn invite_client_acks_non_2xx_and_absorbs_retransmissions_until_timer_d() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-n");
    run.layer
        .send_request(Time::ZERO, inv.clone(), udp(2))
        .unwrap();
    run.drain();
    let busy = response(&inv, 486);
    assert_eq!(
        run.receive(ms(1_000), busy.clone(), udp(2)),
        Received::Delivered
    );
    let sent = run.take_sent();
    // Original INVITE, the Timer A retransmission at 0.5 s, then the ACK.
    assert_eq!(sent.len(), 3);
    let (at, ack) = &sent[2];
    assert_eq!(*at, ms(1_000));
    assert!(!ack.retransmission);
    assert_eq!(ack.to, udp(2));
    let ack = Message::parse(ack.payload.clone()).unwrap();
    assert_eq!(ack.method(), Some(&Method::Ack));
    assert_eq!(ack.top_via_branch(), Some(&b"z9hG4bK-n"[..]));
    assert_eq!(
        ack.cseq().map(|c| (c.seq, c.method.clone())),
        Some((1, Method::Ack))
    );
    assert_eq!(ack.header(HeaderName::To), busy.header(HeaderName::To));

    // Each retransmitted final response gets the ACK again and stays away from the TU.
    assert_eq!(
        run.receive(ms(2_000), busy.clone(), udp(2)),
        Received::Absorbed
    );
    assert_eq!(run.receive(ms(3_000), busy, udp(2)), Received::Absorbed);
    let again = run.take_sent();
    assert_eq!(again.len(), 2);
    assert!(again
        .iter()
        .all(|(_, t)| t.retransmission && t.payload == sent[2].1.payload));
    run.advance(Time::from_secs(100));
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(1_000, "response 486"), ev(33_000, "terminated")]
    );
    let s = run.layer.stats();
    assert_eq!(
        (s.retransmissions.ack, s.absorbed.responses, s.fired.d),
        (2, 2, 1)
    );
    assert!(run.layer.is_empty());
}

#[test]
fn invite_client_over_tcp_has_no_timer_a_and_zero_timer_d() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-t");
    run.layer
        .send_request(Time::ZERO, inv.clone(), tcp(2))
        .unwrap();
    run.drain();
    assert_eq!(run.layer.poll_timeout(), Some(Time::from_secs(32)));
    run.receive(ms(300), response(&inv, 503), tcp(2));
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(300, "response 503"), ev(300, "terminated")]
    );
    let sent = run.take_sent();
    assert_eq!(sent.len(), 2, "INVITE and ACK only");
    assert!(sent.iter().all(|(_, t)| !t.retransmission));
    assert!(run.layer.is_empty());
}

// ---- non-INVITE client transaction (Figure 6, §17.1.2) ----

#[test]
fn non_invite_client_timer_e_caps_at_t2_until_timer_f() {
    let mut run = Run::new();
    run.layer
        .send_request(Time::ZERO, non_invite("OPTIONS", "z9hG4bK-o"), udp(2))
        .unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert_eq!(
        run.retransmission_times(),
        times(&[500, 1_500, 3_500, 7_500, 11_500, 15_500, 19_500, 23_500, 27_500, 31_500])
    );
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(32_000, "timeout F"), ev(32_000, "terminated")]
    );
    assert_eq!(run.layer.stats().retransmissions.non_invite, 10);
}

#[test]
fn non_invite_client_retransmits_at_t2_after_provisional_then_timer_k() {
    let mut run = Run::new();
    let bye = non_invite("BYE", "z9hG4bK-b");
    run.layer
        .send_request(Time::ZERO, bye.clone(), udp(2))
        .unwrap();
    run.drain();
    assert_eq!(
        run.receive(ms(700), response(&bye, 100), udp(2)),
        Received::Delivered
    );
    // The pending Timer E keeps its deadline (1.5 s); from then on it is T2.
    run.advance(ms(10_000));
    assert_eq!(
        run.retransmission_times(),
        times(&[500, 1_500, 5_500, 9_500])
    );
    assert_eq!(
        run.receive(ms(10_000), response(&bye, 200), udp(2)),
        Received::Delivered
    );
    assert_eq!(
        run.receive(ms(11_000), response(&bye, 200), udp(2)),
        Received::Absorbed
    );
    run.advance(Time::from_secs(100));
    assert!(run.take_sent().is_empty());
    assert_eq!(
        kinds(&run.take_events()),
        vec![
            ev(700, "response 100"),
            ev(10_000, "response 200"),
            ev(15_000, "terminated")
        ]
    );
    assert_eq!(run.layer.stats().fired.k, 1);
}

#[test]
fn non_invite_client_over_tcp_never_retransmits_and_ends_on_final() {
    let mut run = Run::new();
    let reg = non_invite("REGISTER", "z9hG4bK-r");
    run.layer.send_request(Time::ZERO, reg, tcp(2)).unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert_eq!(run.take_sent().len(), 1);
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(32_000, "timeout F"), ev(32_000, "terminated")]
    );
    let opt = non_invite("OPTIONS", "z9hG4bK-r2");
    run.layer
        .send_request(run.now, opt.clone(), tcp(2))
        .unwrap();
    run.drain();
    run.receive(ms(100_100), response(&opt, 200), tcp(2));
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(100_100, "response 200"), ev(100_100, "terminated")]
    );
}

// ---- INVITE server transaction (Figure 7, §17.2.1) ----

#[test]
fn invite_server_absorbs_retransmissions_and_retransmits_final_on_timer_g_until_ack() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-s");
    assert_eq!(
        run.receive(Time::ZERO, inv.clone(), udp(9)),
        Received::NewTransaction
    );
    let Some((
        _,
        Event::Request {
            tx, from, cancels, ..
        },
    )) = run.events.first().cloned()
    else {
        panic!("expected a request event, got {:?}", run.events);
    };
    assert_eq!((from, cancels), (udp(9), None));
    run.take_events();

    // Retransmission before any response: absorbed, nothing to re-send.
    assert_eq!(
        run.receive(ms(500), inv.clone(), udp(9)),
        Received::Absorbed
    );
    assert!(run.take_sent().is_empty());

    let ringing = response(&inv, 180);
    run.layer.respond(run.now, tx, &ringing).unwrap();
    run.drain();
    assert_eq!(run.take_sent().len(), 1);
    // Retransmission in Proceeding: the last provisional goes out again.
    assert_eq!(
        run.receive(ms(1_000), inv.clone(), udp(9)),
        Received::Absorbed
    );
    let resent = run.take_sent();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].1.payload, ringing.wire());
    assert!(resent[0].1.retransmission);
    assert_eq!(resent[0].1.to, udp(9));

    // A 3xx–6xx: Completed, Timer G from 1 s on (T1, doubling, capped at T2).
    let busy = response(&inv, 486);
    run.advance(ms(1_000));
    run.layer.respond(run.now, tx, &busy).unwrap();
    run.drain();
    run.take_sent();
    assert_eq!(
        run.layer.respond(run.now, tx, &busy),
        Err(RespondError::WrongState)
    );
    run.advance(ms(16_000));
    assert_eq!(
        run.retransmission_times(),
        times(&[1_500, 2_500, 4_500, 8_500, 12_500])
    );
    // Request retransmission in Completed: the final response again.
    assert_eq!(
        run.receive(ms(16_000), inv.clone(), udp(9)),
        Received::Absorbed
    );
    assert_eq!(run.take_sent()[0].1.payload, busy.wire());

    // The ACK (same branch, method ACK) is absorbed: Confirmed, no more G, Timer I.
    let ack = Req {
        method: "ACK",
        branch: "z9hG4bK-s",
        ..Req::default()
    }
    .msg();
    assert_eq!(
        run.receive(ms(16_100), ack.clone(), udp(9)),
        Received::Absorbed
    );
    assert_eq!(run.receive(ms(16_200), ack, udp(9)), Received::Absorbed);
    assert_eq!(run.receive(ms(16_300), inv, udp(9)), Received::Absorbed);
    run.advance(Time::from_secs(100));
    assert!(run.take_sent().is_empty());
    assert_eq!(kinds(&run.take_events()), vec![ev(21_100, "terminated")]);
    let s = run.layer.stats();
    assert_eq!((s.absorbed.acks, s.absorbed.requests, s.fired.i), (2, 4, 1));
    assert_eq!(s.retransmissions.response, 2 + 5);
    assert!(run.layer.is_empty());
}

#[test]
fn matches_server_looks_up_an_acks_invite_by_branch_and_sent_by_without_consuming_it() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-m");
    run.receive(Time::ZERO, inv.clone(), udp(9));
    let ack = |branch, sent_by| {
        Req {
            method: "ACK",
            branch,
            sent_by,
            ..Req::default()
        }
        .msg()
    };
    assert!(run
        .layer
        .matches_server(&ack("z9hG4bK-m", "192.0.2.1:5060")));
    assert!(run.layer.matches_server(&inv));
    // §17.2.3: the branch and the sent-by both take part; a BYE is not its INVITE.
    assert!(!run
        .layer
        .matches_server(&ack("z9hG4bK-other", "192.0.2.1:5060")));
    assert!(!run
        .layer
        .matches_server(&ack("z9hG4bK-m", "192.0.2.7:5060")));
    assert!(!run.layer.matches_server(&non_invite("BYE", "z9hG4bK-m")));
    // Looking absorbs nothing.
    assert_eq!(run.layer.stats().absorbed.acks, 0);
}

#[test]
fn invite_server_timer_h_reports_a_missing_ack() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-h");
    run.receive(Time::ZERO, inv.clone(), udp(9));
    let Some((_, Event::Request { tx, .. })) = run.take_events().into_iter().next() else {
        panic!("no request");
    };
    run.layer
        .respond(Time::ZERO, tx, &response(&inv, 404))
        .unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert_eq!(
        run.retransmission_times(),
        times(&[500, 1_500, 3_500, 7_500, 11_500, 15_500, 19_500, 23_500, 27_500, 31_500])
    );
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(32_000, "timeout H"), ev(32_000, "terminated")]
    );
}

#[test]
fn invite_server_2xx_passes_through_and_ends_the_transaction() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-2");
    run.receive(Time::ZERO, inv.clone(), udp(9));
    let Some((_, Event::Request { tx, .. })) = run.take_events().into_iter().next() else {
        panic!("no request");
    };
    run.layer.respond(ms(10), tx, &response(&inv, 100)).unwrap();
    run.layer.respond(ms(20), tx, &response(&inv, 200)).unwrap();
    run.drain();
    assert_eq!(run.take_sent().len(), 2);
    assert_eq!(kinds(&run.take_events()), vec![ev(0, "terminated")]);
    assert!(run.layer.is_empty());
    assert_eq!(
        run.layer.respond(ms(30), tx, &response(&inv, 200)),
        Err(RespondError::UnknownTransaction)
    );
    // The ACK for the 2xx has its own branch and matches nothing: reported, not dropped.
    let ack = Req {
        method: "ACK",
        branch: "z9hG4bK-2-ack",
        ..Req::default()
    }
    .msg();
    assert_eq!(run.receive(ms(40), ack, udp(9)), Received::Stray);
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(40, "ack2xx stopped=false")]
    );
}

#[test]
fn invite_server_over_tcp_has_no_timer_g_and_zero_timer_i() {
    let mut run = Run::new();
    let inv = Req {
        transport: "TCP",
        ..Req::default()
    }
    .msg();
    run.receive(Time::ZERO, inv.clone(), tcp(9));
    let Some((_, Event::Request { tx, .. })) = run.take_events().into_iter().next() else {
        panic!("no request");
    };
    run.layer
        .respond(Time::ZERO, tx, &response(&inv, 486))
        .unwrap();
    run.drain();
    assert_eq!(
        run.layer.poll_timeout(),
        Some(Time::from_secs(32)),
        "only Timer H"
    );
    let ack = Req {
        method: "ACK",
        transport: "TCP",
        ..Req::default()
    }
    .msg();
    assert_eq!(run.receive(ms(100), ack, tcp(9)), Received::Absorbed);
    assert_eq!(kinds(&run.take_events()), vec![ev(100, "terminated")]);
    assert_eq!(run.take_sent().len(), 1);
}

// ---- non-INVITE server transaction (Figure 8, §17.2.2) ----

#[test]
fn non_invite_server_absorbs_retransmissions_and_waits_timer_j() {
    let mut run = Run::new();
    let bye = non_invite("BYE", "z9hG4bK-j");
    assert_eq!(
        run.receive(Time::ZERO, bye.clone(), udp(9)),
        Received::NewTransaction
    );
    let Some((_, Event::Request { tx, .. })) = run.take_events().into_iter().next() else {
        panic!("no request");
    };
    // Trying: absorbed, nothing to send.
    assert_eq!(
        run.receive(ms(500), bye.clone(), udp(9)),
        Received::Absorbed
    );
    assert!(run.take_sent().is_empty());
    let trying = response(&bye, 100);
    run.layer.respond(ms(600), tx, &trying).unwrap();
    run.drain();
    run.take_sent();
    assert_eq!(
        run.receive(ms(1_500), bye.clone(), udp(9)),
        Received::Absorbed
    );
    assert_eq!(run.take_sent()[0].1.payload, trying.wire());
    let ok = response(&bye, 200);
    run.layer.respond(ms(2_000), tx, &ok).unwrap();
    run.drain();
    run.take_sent();
    assert_eq!(run.receive(ms(3_500), bye, udp(9)), Received::Absorbed);
    let resent = run.take_sent();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].1.payload, ok.wire());
    run.advance(Time::from_secs(100));
    assert_eq!(kinds(&run.take_events()), vec![ev(34_000, "terminated")]);
    assert_eq!(run.layer.stats().fired.j, 1);
    assert!(run.layer.is_empty());
}

#[test]
fn non_invite_server_over_tcp_ends_at_once() {
    let mut run = Run::new();
    let msg = Req {
        method: "MESSAGE",
        transport: "TCP",
        ..Req::default()
    }
    .msg();
    run.receive(Time::ZERO, msg.clone(), tcp(9));
    let Some((_, Event::Request { tx, .. })) = run.take_events().into_iter().next() else {
        panic!("no request");
    };
    run.layer.respond(ms(5), tx, &response(&msg, 202)).unwrap();
    run.drain();
    assert_eq!(kinds(&run.take_events()), vec![ev(0, "terminated")]);
    assert!(run.layer.is_empty());
}

// ---- UAS 2xx retransmission (§13.3.1.4) ----

#[test]
fn uas_2xx_retransmits_until_64_t1_then_gives_up() {
    let mut run = Run::new();
    let ok = response(&invite("z9hG4bK-u"), 200);
    let id = run.layer.send_2xx_reliably(Time::ZERO, ok, udp(2)).unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert_eq!(
        run.retransmission_times(),
        times(&[500, 1_500, 3_500, 7_500, 11_500, 15_500, 19_500, 23_500, 27_500, 31_500])
    );
    let events = run.take_events();
    assert_eq!(kinds(&events), vec![ev(32_000, "gave up 2xx")]);
    assert!(
        matches!(&events[0].1, Event::GaveUp2xx { id: g, to, .. } if *g == id && *to == udp(2))
    );
    assert_eq!(run.layer.reliable_2xx_len(), 0);
    assert_eq!(run.layer.stats().fired.give_up_2xx, 1);
}

#[test]
fn uas_2xx_retransmission_stops_at_the_ack() {
    let mut run = Run::new();
    let inv = invite("z9hG4bK-k");
    let id = run
        .layer
        .send_2xx_reliably(Time::ZERO, response(&inv, 200), udp(2))
        .unwrap();
    assert_eq!(
        run.layer
            .send_2xx_reliably(Time::ZERO, response(&inv, 200), udp(2)),
        Err(Refused::Duplicate)
    );
    run.drain();
    let ack = Req {
        method: "ACK",
        branch: "z9hG4bK-k-ack",
        ..Req::default()
    }
    .msg();
    assert_eq!(run.receive(ms(2_000), ack, udp(2)), Received::Stray);
    let events = run.take_events();
    assert!(matches!(&events[0].1, Event::Ack2xx { stopped: Some(s), .. } if *s == id));
    run.advance(Time::from_secs(100));
    assert_eq!(run.retransmission_times(), times(&[500, 1_500]));
    assert!(run.take_events().is_empty());
    assert_eq!(run.layer.stats().reliable_2xx_acked, 1);
    assert_eq!(run.layer.poll_timeout(), None);
}

#[test]
fn uas_2xx_is_retransmitted_over_tcp_unless_configured_off() {
    let mut run = Run::new();
    let ok = response(&invite("z9hG4bK-v"), 200);
    run.layer
        .send_2xx_reliably(Time::ZERO, ok.clone(), tcp(2))
        .unwrap();
    run.drain();
    run.advance(ms(4_000));
    assert_eq!(run.retransmission_times(), times(&[500, 1_500, 3_500]));

    let mut run = Run::with(Config {
        retransmit_2xx_over_reliable: false,
        ..Config::default()
    });
    run.layer.send_2xx_reliably(Time::ZERO, ok, tcp(2)).unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert!(run.retransmission_times().is_empty());
    assert_eq!(kinds(&run.take_events()), vec![ev(32_000, "gave up 2xx")]);
}

// ---- reliable transports, matching, CANCEL ----

#[test]
fn reliable_transport_never_emits_a_retransmission() {
    let mut run = Run::new();
    run.layer
        .send_request(Time::ZERO, invite("z9hG4bK-r1"), tcp(2))
        .unwrap();
    run.layer
        .send_request(Time::ZERO, non_invite("OPTIONS", "z9hG4bK-r2"), tcp(2))
        .unwrap();
    let inv = Req {
        branch: "z9hG4bK-r3",
        transport: "TCP",
        ..Req::default()
    }
    .msg();
    run.layer.handle_message(Time::ZERO, inv.clone(), tcp(9));
    run.drain();
    let server = run
        .take_events()
        .into_iter()
        .find_map(|(_, e)| match e {
            Event::Request { tx, .. } => Some(tx),
            _ => None,
        })
        .unwrap();
    run.layer
        .respond(Time::ZERO, server, &response(&inv, 500))
        .unwrap();
    run.drain();
    run.advance(Time::from_secs(100));
    assert!(run.sent.iter().all(|(_, t)| !t.retransmission));
    assert_eq!(run.sent.len(), 3);
    let s = run.layer.stats();
    assert_eq!((s.fired.a, s.fired.e, s.fired.g), (0, 0, 0));
    assert_eq!((s.fired.b, s.fired.f, s.fired.h), (1, 1, 1));
    assert!(run.layer.is_empty());
}

#[test]
fn server_matching_uses_branch_sent_by_and_method() {
    let mut run = Run::new();
    let a = Req::default().msg();
    assert_eq!(run.receive(Time::ZERO, a, udp(9)), Received::NewTransaction);
    // Same branch, sent-by host in another case and the default port spelled out: same.
    let b = Req {
        sent_by: "192.0.2.1",
        ..Req::default()
    }
    .msg();
    assert_eq!(run.receive(ms(1), b, udp(9)), Received::Absorbed);
    // Same branch from another sent-by: another transaction.
    let c = Req {
        sent_by: "192.0.2.7:5060",
        ..Req::default()
    }
    .msg();
    assert_eq!(run.receive(ms(2), c, udp(9)), Received::NewTransaction);
    let named = |host| {
        Req {
            branch: "z9hG4bK-dns",
            sent_by: host,
            ..Req::default()
        }
        .msg()
    };
    assert_eq!(
        run.receive(ms(3), named("PC33.example.com"), udp(9)),
        Received::NewTransaction
    );
    assert_eq!(
        run.receive(ms(4), named("pc33.EXAMPLE.com:5060"), udp(9)),
        Received::Absorbed
    );
    // Same branch, another method: its own transaction.
    let bye = non_invite("BYE", "z9hG4bK-1");
    assert_eq!(run.receive(ms(5), bye, udp(9)), Received::NewTransaction);
    assert_eq!(run.layer.len(), 4);
}

#[test]
fn cancel_names_its_invite_and_client_cancel_waits_for_a_provisional() {
    let mut run = Run::new();
    // Server side: the CANCEL is its own transaction and names the INVITE it matches (§9.2).
    let inv = invite("z9hG4bK-c");
    run.receive(Time::ZERO, inv, udp(9));
    let cancel = non_invite("CANCEL", "z9hG4bK-c");
    assert_eq!(
        run.receive(ms(10), cancel, udp(9)),
        Received::NewTransaction
    );
    let events = run.take_events();
    let (Event::Request { tx: invite_tx, .. }, Event::Request { cancels, .. }) =
        (&events[0].1, &events[1].1)
    else {
        panic!("{events:?}");
    };
    assert_eq!(*cancels, Some(*invite_tx));

    // Client side.
    let mut run = Run::new();
    let inv = invite("z9hG4bK-cc");
    let id = run
        .layer
        .send_request(Time::ZERO, inv.clone(), udp(2))
        .unwrap();
    assert_eq!(run.layer.cancel(Time::ZERO, id), Err(Refused::WrongState));
    run.drain();
    run.receive(ms(100), response(&inv, 180), udp(2));
    run.take_sent();
    let cancel_id = run.layer.cancel(ms(100), id).unwrap();
    run.drain();
    let sent = run.take_sent();
    let cancel = Message::parse(sent[0].1.payload.clone()).unwrap();
    assert_eq!(cancel.method(), Some(&Method::Cancel));
    assert_eq!(cancel.top_via_branch(), Some(&b"z9hG4bK-cc"[..]));
    // The 200 to the CANCEL ends the CANCEL transaction; the 487 ends the INVITE one.
    run.receive(ms(200), response(&cancel, 200), udp(2));
    run.receive(ms(210), response(&inv, 487), udp(2));
    let events = run.take_events();
    assert!(
        matches!(&events[1].1, Event::Response { tx, response } if *tx == cancel_id && response.status() == Some(200))
    );
    assert!(
        matches!(&events[2].1, Event::Response { tx, response } if *tx == id && response.status() == Some(487))
    );
}

// ---- limits, stray and malformed input, transport errors ----

#[test]
fn table_limit_refuses_and_counts_then_frees_slots_as_transactions_end() {
    let mut run = Run::with(Config {
        max_transactions: 2,
        ..Config::default()
    });
    run.layer
        .send_request(Time::ZERO, invite("z9hG4bK-l1"), udp(2))
        .unwrap();
    run.layer
        .send_request(Time::ZERO, non_invite("OPTIONS", "z9hG4bK-l2"), udp(2))
        .unwrap();
    assert_eq!(
        run.layer
            .send_request(Time::ZERO, invite("z9hG4bK-l3"), udp(2)),
        Err(Refused::TableFull)
    );
    assert_eq!(
        run.layer
            .send_request(Time::ZERO, invite("z9hG4bK-l1"), udp(2)),
        Err(Refused::Duplicate)
    );
    assert_eq!(
        run.receive(Time::ZERO, invite("z9hG4bK-l4"), udp(9)),
        Received::Refused
    );
    assert!(kinds(&run.take_events()).contains(&ev(0, "refused")));
    assert_eq!(run.layer.stats().refused.table_full, 2);
    assert_eq!(run.layer.stats().refused.duplicate, 1);
    assert_eq!(run.layer.stats().peak_transactions, 2);
    run.advance(Time::from_secs(40));
    assert!(run.layer.is_empty());
    run.layer
        .send_request(run.now, invite("z9hG4bK-l5"), udp(2))
        .unwrap();
    assert_eq!(
        run.layer
            .send_request(run.now, invite("z9hG4bK-l5"), udp(2)),
        Err(Refused::Duplicate)
    );
}

#[test]
fn table_and_timer_queue_return_to_empty_after_mixed_load() {
    let mut run = Run::new();
    for i in 0..2_000u32 {
        let at = ms(u64::from(i));
        run.advance(at);
        let branch = format!("z9hG4bK-m{i}");
        let call_id = format!("call-m{i}");
        let peer = if i % 3 == 0 { tcp(2) } else { udp(2) };
        let req = Req {
            method: if i % 2 == 0 { "INVITE" } else { "OPTIONS" },
            branch: &branch,
            call_id: &call_id,
            ..Req::default()
        }
        .msg();
        run.layer.send_request(at, req.clone(), peer).unwrap();
        // Server side of the same request, as a proxy would see it.
        run.layer.handle_message(at, req.clone(), peer);
        run.drain();
        let server = run.events.iter().rev().find_map(|(_, e)| match e {
            Event::Request { tx, .. } => Some(*tx),
            _ => None,
        });
        let status = [100, 180, 200, 486, 0][i as usize % 5];
        if status != 0 {
            let resp = response(&req, status);
            run.layer.respond(at, server.unwrap(), &resp).unwrap();
            run.layer.handle_message(at, resp, peer);
        }
        if i % 7 == 0 {
            let inv = Req {
                branch: &branch,
                call_id: &call_id,
                ..Req::default()
            }
            .msg();
            let ok = response(&inv, 200);
            run.layer.send_2xx_reliably(at, ok, peer).unwrap();
        }
        run.drain();
    }
    assert!(run.layer.len() > 1_000);
    // Provisional-only INVITE transactions wait for the TU (Timer C is the TU's): end them.
    let stuck: Vec<TxId> = {
        let mut live = std::collections::BTreeSet::new();
        for (_, e) in &run.events {
            match e {
                Event::Request { tx, .. } => {
                    live.insert(TxId::Server(*tx));
                }
                Event::Response { tx, .. } => {
                    live.insert(TxId::Client(*tx));
                }
                Event::Terminated { tx } => {
                    live.remove(tx);
                }
                _ => {}
            }
        }
        live.into_iter().collect()
    };
    run.advance(Time::from_secs(200));
    for tx in stuck {
        run.layer.terminate_tx(tx);
    }
    run.drain();
    run.advance(Time::from_secs(400));
    assert!(run.layer.is_empty(), "{} left", run.layer.len());
    assert_eq!(run.layer.reliable_2xx_len(), 0);
    assert_eq!(run.layer.live_timers(), 0);
    assert_eq!(run.layer.poll_timeout(), None);
    assert_eq!(run.layer.timer_entries(), 0);
    let s = *run.layer.stats();
    assert_eq!(s.client_created + s.server_created, s.terminated);
}

#[test]
fn malformed_and_stray_messages_are_counted_not_fatal() {
    let mut run = Run::new();
    let no_branch = Message::parse(Bytes::from_static(
        b"OPTIONS sip:x SIP/2.0\r\nVia: SIP/2.0/UDP h\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
    ))
    .unwrap();
    assert_eq!(
        run.receive(Time::ZERO, no_branch.clone(), udp(9)),
        Received::Malformed
    );
    assert_eq!(
        run.layer.send_request(Time::ZERO, no_branch, udp(2)),
        Err(Refused::Malformed)
    );
    let no_via = Message::parse(Bytes::from_static(
        b"SIP/2.0 200 OK\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
    ))
    .unwrap();
    assert_eq!(run.receive(Time::ZERO, no_via, udp(9)), Received::Malformed);
    let stray = response(&invite("z9hG4bK-nobody"), 180);
    assert_eq!(run.receive(Time::ZERO, stray, udp(9)), Received::Stray);
    let ack = Req {
        method: "ACK",
        ..Req::default()
    }
    .msg();
    assert_eq!(
        run.layer.send_request(Time::ZERO, ack, udp(2)),
        Err(Refused::Ack)
    );
    let s = run.layer.stats();
    assert_eq!((s.malformed, s.stray_responses), (2, 1));
    assert!(run.layer.is_empty());
}

#[test]
fn transport_error_is_reported_and_terminates() {
    let mut run = Run::new();
    let id = run
        .layer
        .send_request(Time::ZERO, invite("z9hG4bK-e"), udp(2))
        .unwrap();
    run.drain();
    let origin = run.sent[0].1.origin;
    assert_eq!(origin, Origin::Client(id));
    run.layer.handle_transport_error(origin);
    run.layer.handle_transport_error(origin);
    run.drain();
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(0, "transport error"), ev(0, "terminated")]
    );
    assert_eq!(run.layer.stats().transport_errors, 1);
    assert_eq!(run.layer.poll_timeout(), None);
}

#[test]
fn same_inputs_give_the_same_outputs() {
    fn scenario() -> Vec<(Time, Bytes, bool)> {
        let mut run = Run::new();
        for i in 0..50u64 {
            let req = if i % 2 == 0 {
                invite(&format!("z9hG4bK-d{i}"))
            } else {
                non_invite("OPTIONS", &format!("z9hG4bK-d{i}"))
            };
            run.advance(ms(i * 37));
            run.layer
                .send_request(run.now, req.clone(), udp(2))
                .unwrap();
            if i % 3 == 0 {
                run.receive(ms(i * 37 + 5), response(&req, 100), udp(2));
            }
        }
        run.advance(Time::from_secs(100));
        run.sent
            .into_iter()
            .map(|(at, t)| (at, t.payload, t.retransmission))
            .collect()
    }
    let a = scenario();
    assert!(a.len() > 200);
    assert_eq!(a, scenario());
}

#[test]
fn timers_follow_configured_t1_t2_t4() {
    let mut run = Run::with(Config {
        t1: Duration::from_millis(100),
        t2: Duration::from_millis(400),
        t4: Duration::from_secs(1),
        ..Config::default()
    });
    let opt = non_invite("OPTIONS", "z9hG4bK-cfg");
    run.layer
        .send_request(Time::ZERO, opt.clone(), udp(2))
        .unwrap();
    run.drain();
    run.advance(ms(1_000));
    assert_eq!(run.retransmission_times(), times(&[100, 300, 700]));
    run.receive(ms(1_000), response(&opt, 200), udp(2));
    run.advance(Time::from_secs(10));
    // F would be at 6.4 s; K is T4 = 1 s after the final response.
    assert_eq!(
        kinds(&run.take_events()),
        vec![ev(1_000, "response 200"), ev(2_000, "terminated")]
    );
}

#[test]
fn zero_timer_values_cannot_stall_the_driver() {
    let mut run = Run::with(Config {
        t1: Duration::ZERO,
        t2: Duration::ZERO,
        t4: Duration::ZERO,
        timer_d: Duration::ZERO,
        ..Config::default()
    });
    assert_eq!(run.layer.config().t1, Duration::from_millis(1));
    run.layer
        .send_request(Time::ZERO, non_invite("OPTIONS", "z9hG4bK-z"), udp(2))
        .unwrap();
    run.drain();
    run.advance(Time::from_secs(1));
    // E every 1 ms (T2 = T1) until F at 64 ms.
    assert_eq!(run.retransmission_times().len(), 63);
    assert!(run.layer.is_empty());
}
