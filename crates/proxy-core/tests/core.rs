//! The proxy core driven in process with fabricated time: byte-level checks of what it
//! forwards and generates (RFC 3261 §16), the queue and cost model, admission, bounded
//! memory and hostile input.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_proxy_core::{ProxyConfig, ProxyCore, Record, Transmit};
use sluice_sip::Message;
use sluice_time::Time;

const PROXY: &str = "192.0.2.1:5060";
const UAC: &str = "192.0.2.10:5062";
const UAS: &str = "192.0.2.20:5070";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn config() -> ProxyConfig {
    ProxyConfig {
        listen: addr(PROXY),
        next_hop: Some(addr(UAS)),
        ..ProxyConfig::default()
    }
}

fn core_with(config: &ProxyConfig) -> ProxyCore {
    ProxyCore::new(config, addr(PROXY), Time::ZERO)
}

/// Feeds one datagram, runs the processor at the same instant, returns what was sent.
fn step(core: &mut ProxyCore, now: Time, bytes: &[u8], from: &str) -> Vec<Transmit> {
    core.handle_datagram(now, Bytes::copy_from_slice(bytes), addr(from));
    core.handle_timeout(now);
    drain(core)
}

fn drain(core: &mut ProxyCore) -> Vec<Transmit> {
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

fn text(t: &Transmit) -> &str {
    std::str::from_utf8(&t.payload).unwrap()
}

fn invite(call: &str, max_forwards: u32) -> String {
    format!(
        "INVITE sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK{call};rport\r\n\
         Max-Forwards: {max_forwards}\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 INVITE\r\n\
         Contact: <sip:alice@192.0.2.10:5062>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// A response from the UAS to a forwarded request, built from what the proxy sent it.
fn answer(forwarded: &Transmit, status: u16, reason: &str) -> String {
    let m = Message::parse(forwarded.payload.clone()).unwrap();
    let mut out = format!("SIP/2.0 {status} {reason}\r\n");
    for h in m.headers() {
        let name = std::str::from_utf8(h.raw_name).unwrap();
        if ["Via", "Record-Route", "From", "Call-ID", "CSeq"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
        {
            let _ = write!(out, "{name}: {}\r\n", String::from_utf8_lossy(h.value));
        }
        if name.eq_ignore_ascii_case("To") {
            let to = String::from_utf8_lossy(h.value);
            if status > 100 && !to.contains("tag=") {
                let _ = write!(out, "To: {to};tag=b1\r\n");
            } else {
                let _ = write!(out, "To: {to}\r\n");
            }
        }
    }
    if status / 100 == 2 {
        out.push_str("Contact: <sip:bob@192.0.2.20:5070>\r\n");
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    out
}

fn in_dialog(method: &str, call: &str, cseq: u32, branch: &str) -> String {
    format!(
        "{method} sip:bob@192.0.2.20:5070 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK{branch}\r\n\
         Route: <sip:192.0.2.1:5060;lr>\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>;tag=b1\r\n\
         Call-ID: {call}\r\n\
         CSeq: {cseq} {method}\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

fn only_to<'a>(out: &'a [Transmit], to: &str) -> Vec<&'a Transmit> {
    out.iter().filter(|t| t.to == addr(to)).collect()
}

/// The branch of this proxy's Via on a forwarded request: its prefix and counter, then a
/// 48-bit keyed tag and a 32-bit loop hash in lowercase hex.
fn our_branch(t: &Transmit, counter: u64) -> String {
    let m = Message::parse(t.payload.clone()).unwrap();
    let branch = std::str::from_utf8(m.top_via_branch().unwrap())
        .unwrap()
        .to_owned();
    let tail = branch
        .strip_prefix(&format!("z9hG4bKsl{counter:x}."))
        .unwrap_or_else(|| panic!("{branch}"));
    assert_eq!(tail.len(), 20, "{branch}");
    assert!(tail
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    branch
}

fn status_of(t: &Transmit) -> u16 {
    Message::parse(t.payload.clone()).unwrap().status().unwrap()
}

#[test]
fn invite_is_forwarded_with_via_max_forwards_and_record_route_and_trying_goes_back() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("c1", 70).as_bytes(), UAC);
    assert_eq!(
        out.len(),
        2,
        "100 Trying upstream and the INVITE downstream"
    );
    let trying = only_to(&out, UAC);
    assert_eq!(
        text(trying[0]),
        "SIP/2.0 100 Trying\r\n\
         Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bKc1;rport\r\n\
         From: <sip:alice@192.0.2.10>;tag=ac1\r\n\
         To: <sip:bob@192.0.2.1>\r\n\
         Call-ID: c1\r\n\
         CSeq: 1 INVITE\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let fwd = only_to(&out, UAS);
    // §16.6: new Via on top with a unique branch, Record-Route with lr, received/rport
    // filled in on the UAC's Via (RFC 3581), Max-Forwards decremented, the rest verbatim.
    let branch = our_branch(fwd[0], 1);
    assert_eq!(
        text(fwd[0]),
        format!(
            "INVITE sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 192.0.2.1:5060;branch={branch}\r\n\
         Record-Route: <sip:192.0.2.1:5060;lr>\r\n\
         Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bKc1;received=192.0.2.10;rport=5062\r\n\
         Max-Forwards: 69\r\n\
         From: <sip:alice@192.0.2.10>;tag=ac1\r\n\
         To: <sip:bob@192.0.2.1>\r\n\
         Call-ID: c1\r\n\
         CSeq: 1 INVITE\r\n\
         Contact: <sip:alice@192.0.2.10:5062>\r\n\
         Content-Length: 0\r\n\r\n"
        )
    );
    // A retransmission is absorbed by the server transaction (100 resent, nothing forwarded).
    let again = step(
        &mut core,
        Time::from_millis(400),
        invite("c1", 70).as_bytes(),
        UAC,
    );
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].to, addr(UAC));
    assert_eq!(status_of(&again[0]), 100);
    assert_eq!(core.stats(Time::from_millis(400)).retransmissions_seen(), 1);
}

#[test]
fn max_forwards_zero_gets_483_and_nothing_is_forwarded() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("c2", 0).as_bytes(), UAC);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to, addr(UAC));
    assert!(text(&out[0]).starts_with("SIP/2.0 483 Too Many Hops\r\n"));
    assert_eq!(core.stats(Time::ZERO).too_many_hops, 1);
}

#[test]
fn a_whole_call_goes_through_and_ack_and_bye_follow_the_route() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("c3", 70).as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();

    // The UAS's own 100 is hop by hop: not relayed.
    let t = Time::from_millis(1);
    assert!(step(&mut core, t, answer(&fwd, 100, "Trying").as_bytes(), UAS).is_empty());

    let ringing = step(&mut core, t, answer(&fwd, 180, "Ringing").as_bytes(), UAS);
    assert_eq!(ringing.len(), 1);
    assert_eq!(ringing[0].to, addr(UAC));
    // §16.7 step 3: our Via is gone, the UAC's (with received/rport) is on top.
    let ringing_text = text(&ringing[0]);
    assert!(ringing_text.starts_with("SIP/2.0 180 Ringing\r\n"));
    assert!(!ringing_text.contains("z9hG4bKsl"), "{ringing_text}");
    assert!(ringing_text.contains(
        "\r\nVia: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bKc3;received=192.0.2.10;rport=5062\r\n"
    ));

    let ok = answer(&fwd, 200, "OK");
    let relayed = step(&mut core, t, ok.as_bytes(), UAS);
    assert_eq!(relayed.len(), 1);
    assert_eq!(status_of(&relayed[0]), 200);
    // A retransmitted 2xx matches no transaction any more: relayed statelessly.
    let again = step(&mut core, Time::from_millis(500), ok.as_bytes(), UAS);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].to, addr(UAC));
    assert_eq!(again[0].payload, relayed[0].payload);

    // ACK for the 2xx: stateless (§16.11), our Route popped, sent to the Request-URI.
    let ack = step(
        &mut core,
        Time::from_millis(501),
        in_dialog("ACK", "c3", 1, "c3ack").as_bytes(),
        UAC,
    );
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].to, addr(UAS));
    let ack_text = text(&ack[0]);
    assert!(ack_text.starts_with(
        "ACK sip:bob@192.0.2.20:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKsla"
    ));
    assert!(!ack_text.contains("Route:"), "{ack_text}");
    assert!(ack_text.contains("Max-Forwards: 69\r\n"));
    // The same ACK again gets the same branch (stateless forwarding is a function).
    let ack2 = step(
        &mut core,
        Time::from_millis(502),
        in_dialog("ACK", "c3", 1, "c3ack").as_bytes(),
        UAC,
    );
    assert_eq!(ack2[0].payload, ack[0].payload);

    // BYE: stateful, routed to the Request-URI (the UAS's Contact), no Record-Route added.
    let bye = step(
        &mut core,
        Time::from_millis(600),
        in_dialog("BYE", "c3", 2, "c3bye").as_bytes(),
        UAC,
    );
    assert_eq!(bye.len(), 1);
    assert_eq!(bye[0].to, addr(UAS));
    assert!(!text(&bye[0]).contains("Route"));
    let bye_ok = step(
        &mut core,
        Time::from_millis(601),
        answer(&bye[0], 200, "OK").as_bytes(),
        UAS,
    );
    assert_eq!(bye_ok.len(), 1);
    assert_eq!(bye_ok[0].to, addr(UAC));
    assert!(text(&bye_ok[0]).contains("CSeq: 2 BYE\r\n"));
    let s = core.stats(Time::from_millis(601));
    assert_eq!(
        (s.forwarded_requests, s.forwarded_acks, s.pending_requests),
        (2, 2, 0)
    );
    assert!(core.is_idle());
}

/// The race a stalled proxy (or a slow first hop) opens: the caller's retransmitted
/// INVITE reaches the proxy after its 2xx was relayed. Proxied again, it would start a
/// second INVITE transaction at the callee, whose answer to a retransmission (its 180
/// again, as SIPp's) would reach a caller already past its 2xx.
#[test]
fn an_invite_retransmitted_after_its_2xx_is_absorbed_and_a_late_1xx_is_not_relayed() {
    let mut core = core_with(&config());
    let call = invite("c3r", 70);
    let out = step(&mut core, Time::ZERO, call.as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();
    let t = Time::from_millis(1);
    let ringing = answer(&fwd, 180, "Ringing");
    assert_eq!(step(&mut core, t, ringing.as_bytes(), UAS).len(), 1);
    assert_eq!(
        step(&mut core, t, answer(&fwd, 200, "OK").as_bytes(), UAS).len(),
        1
    );

    // The caller's Timer A copy, late: nothing goes anywhere.
    let late = step(&mut core, Time::from_millis(500), call.as_bytes(), UAC);
    assert!(
        late.is_empty(),
        "{:?}",
        late.iter().map(text).collect::<Vec<_>>()
    );
    // The callee's 180 again (it answers a retransmission with it): dropped, counted.
    let late_1xx = step(&mut core, Time::from_millis(501), ringing.as_bytes(), UAS);
    assert!(late_1xx.is_empty());
    let s = core.stats(Time::from_millis(501));
    assert_eq!((s.absorbed_invites_after_2xx, s.forwarded_requests), (1, 1));
    assert_eq!(s.dropped_stray_responses, 1);

    // Another caller's INVITE with the same branch and Call-ID is not a retransmission of
    // it: its Via names another sender (§17.2.3).
    let other = call.replacen(
        "Via: SIP/2.0/UDP 192.0.2.10:5062",
        "Via: SIP/2.0/UDP 192.0.2.11:5062",
        1,
    );
    let other_out = step(
        &mut core,
        Time::from_millis(502),
        other.as_bytes(),
        "192.0.2.11:5062",
    );
    assert_eq!(only_to(&other_out, UAS).len(), 1);

    // Until 64·T1 after the INVITE was first seen: then its branch is a new request's.
    let much_later = step(&mut core, Time::from_secs(40), call.as_bytes(), UAC);
    // (The other caller's INVITE, unanswered, has been retransmitted meanwhile.)
    let forwarded = only_to(&much_later, UAS)
        .into_iter()
        .filter(|t| !t.retransmission)
        .count();
    assert_eq!(forwarded, 1);
}

#[test]
fn cancel_is_answered_and_passed_on_and_the_487_comes_back() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("c4", 70).as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();
    let t = Time::from_millis(5);
    step(&mut core, t, answer(&fwd, 180, "Ringing").as_bytes(), UAS);
    let cancel = "CANCEL sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
                  Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bKc4;rport\r\n\
                  Max-Forwards: 70\r\n\
                  From: <sip:alice@192.0.2.10>;tag=ac4\r\n\
                  To: <sip:bob@192.0.2.1>\r\n\
                  Call-ID: c4\r\n\
                  CSeq: 1 CANCEL\r\n\
                  Content-Length: 0\r\n\r\n";
    let out = step(&mut core, t, cancel.as_bytes(), UAC);
    assert_eq!(out.len(), 2);
    let up = only_to(&out, UAC);
    assert!(text(up[0]).starts_with("SIP/2.0 200 OK\r\n"));
    assert!(text(up[0]).contains("CSeq: 1 CANCEL\r\n"));
    let down = only_to(&out, UAS);
    // §9.1: the CANCEL carries the branch of the INVITE it cancels (ours, not the UAC's).
    let branch = our_branch(&fwd, 1);
    assert!(text(down[0]).starts_with(&format!(
        "CANCEL sip:bob@192.0.2.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch={branch}\r\n"
    )));
    let terminated = step(
        &mut core,
        t,
        answer(&fwd, 487, "Request Terminated").as_bytes(),
        UAS,
    );
    // The 487 goes upstream; the client transaction ACKs it downstream.
    assert_eq!(terminated.len(), 2);
    assert_eq!(status_of(only_to(&terminated, UAC)[0]), 487);
    assert!(text(only_to(&terminated, UAS)[0]).starts_with("ACK "));
    assert_eq!(core.stats(t).cancels, 1);
}

#[test]
fn silent_next_hop_becomes_408_upstream_after_timer_b() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("c5", 70).as_bytes(), UAC);
    assert_eq!(out.len(), 2);
    let mut to_uas = 0;
    let mut upstream = Vec::new();
    let mut first_upstream = None;
    let mut now = Time::ZERO;
    while let Some(next) = core.poll_timeout() {
        if next > Time::from_secs(40) {
            break;
        }
        now = next;
        core.handle_timeout(now);
        for t in drain(&mut core) {
            if t.to == addr(UAS) {
                to_uas += 1;
            } else {
                first_upstream.get_or_insert(now);
                upstream.push(t);
            }
        }
    }
    // Timer A retransmits at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s; Timer B fires at 32 s.
    assert_eq!(to_uas, 6);
    assert_eq!(first_upstream, Some(Time::from_secs(32)));
    // The 408 and its Timer G retransmissions (the UAC here never ACKs).
    assert!(upstream
        .iter()
        .all(|t| text(t).starts_with("SIP/2.0 408 Request Timeout\r\n")));
    assert_eq!(core.stats(now).timeouts_408, 1);
}

/// What an ICMP error returns of a datagram: its first bytes (about 500 on IPv4).
fn icmp_quote(t: &Transmit) -> &[u8] {
    &t.payload[..t.payload.len().min(500)]
}

#[test]
fn an_icmp_unreachable_for_a_forwarded_invite_answers_500_at_once_and_forgeries_change_nothing() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("u1", 70).as_bytes(), UAC);
    let dead = only_to(&out, UAS)[0].clone();
    let out = step(&mut core, Time::ZERO, invite("u2", 70).as_bytes(), UAC);
    let live = only_to(&out, UAS)[0].clone();
    let now = Time::from_millis(20);

    // Forgeries and strays: each counted, none ends a transaction or sends anything.
    let branch = our_branch(&live, 2);
    let mut other_branch = branch.clone().into_bytes();
    let last = other_branch.len() - 1;
    other_branch[last] = if other_branch[last] == b'0' {
        b'1'
    } else {
        b'0'
    };
    let other_branch = String::from_utf8(other_branch).unwrap();
    let wrong_branch = text(&live).replace(&branch, &other_branch);
    let via_end = text(&live).find(&branch).unwrap() + branch.len() / 2;
    let cut_in_branch = &live.payload[..via_end];
    let response = answer(&live, 180, "Ringing");
    let forged: [(&str, &[u8]); 6] = [
        // The right bytes, but the datagram did not go there.
        ("192.0.2.99:5070", icmp_quote(&live)),
        // The right destination, a branch this proxy never made.
        (UAS, wrong_branch.as_bytes()),
        // Cut inside the branch: no complete Via line.
        (UAS, cut_in_branch),
        (UAS, response.as_bytes()),
        (UAS, b"\x00\xff garbage"),
        (UAS, b""),
    ];
    for (to, payload) in forged {
        assert!(!core.handle_unreachable(now, addr(to), payload), "{to}");
    }
    assert!(drain(&mut core).is_empty());
    let stats = core.stats(now);
    assert_eq!(
        (
            stats.unreachable,
            stats.unreachable_ignored,
            stats.transport_500
        ),
        (0, 6, 0)
    );

    // The genuine report: the caller gets 500 now (RFC 3261 §16.9, §16.7 step 6), not
    // 408 after Timer B's 32 s, and the INVITE is not sent again.
    assert!(core.handle_unreachable(now, addr(UAS), icmp_quote(&dead)));
    let out = drain(&mut core);
    let upstream = only_to(&out, UAC);
    assert_eq!(upstream.len(), 1, "{out:?}");
    assert!(
        text(upstream[0]).starts_with("SIP/2.0 500 "),
        "{}",
        text(upstream[0])
    );
    assert!(text(upstream[0]).contains("Call-ID: u1\r\n"));
    assert!(only_to(&out, UAS).is_empty());
    // Reported again (a retransmission's ICMP): the transaction is gone, so ignored.
    assert!(!core.handle_unreachable(now, addr(UAS), icmp_quote(&dead)));
    let stats = core.stats(now);
    assert_eq!(
        (
            stats.unreachable,
            stats.unreachable_ignored,
            stats.transport_500
        ),
        (1, 7, 1)
    );

    // Until its own answer, only the live call's INVITE is retransmitted (the 500 is
    // too, upstream: this caller never ACKs it).
    let mut t = now;
    while let Some(next) = core
        .poll_timeout()
        .filter(|n| *n <= Time::from_millis(1600))
    {
        t = next;
        core.handle_timeout(t);
        for sent in drain(&mut core).iter().filter(|s| s.to == addr(UAS)) {
            assert!(text(sent).contains("Call-ID: u2\r\n"), "{}", text(sent));
        }
    }
    let out = step(&mut core, t, answer(&live, 200, "OK").as_bytes(), UAS);
    let upstream = only_to(&out, UAC);
    assert_eq!(upstream.len(), 1);
    assert!(text(upstream[0]).starts_with("SIP/2.0 200 OK\r\n"));
    assert_eq!(core.stats(t).timeouts_408, 0);
}

#[test]
fn a_full_transaction_table_refuses_with_503_and_memory_stays_bounded() {
    let mut cfg = config();
    cfg.max_transactions = 20;
    let mut core = core_with(&cfg);
    let mut answered_503 = 0;
    let mut forwarded = 0;
    for i in 0..100 {
        let now = Time::from_millis(i);
        for t in step(&mut core, now, invite(&format!("m{i}"), 70).as_bytes(), UAC) {
            if t.to == addr(UAS) {
                forwarded += 1;
            } else if status_of(&t) == 503 {
                answered_503 += 1;
            }
        }
        assert!(core.stats(now).transactions <= 20);
    }
    // Each proxied INVITE takes two slots (server + client).
    assert_eq!(forwarded, 10);
    assert_eq!(answered_503, 90);
    let s = core.stats(Time::from_millis(100));
    // Above 90 % of the table new sessions are refused before the table itself is full.
    assert_eq!(s.rejected_table_headroom, 90);
    // Once the silent next hop times out, the table empties and calls go through again.
    let mut now = Time::ZERO;
    while let Some(next) = core.poll_timeout() {
        now = next;
        core.handle_timeout(now);
        drain(&mut core);
    }
    assert_eq!(core.stats(now).transactions, 0);
    let out = step(&mut core, now, invite("late", 70).as_bytes(), UAC);
    assert_eq!(only_to(&out, UAS).len(), 1);
}

#[test]
fn virtual_cost_paces_the_processor_and_a_full_queue_drops() {
    let mut cfg = config();
    cfg.cost_forward_us = 1_000.0;
    cfg.queue_capacity = 5;
    let mut core = core_with(&cfg);
    for i in 0..8 {
        core.handle_datagram(
            Time::ZERO,
            Bytes::from(invite(&format!("q{i}"), 70)),
            addr(UAC),
        );
    }
    let s = core.stats(Time::ZERO);
    assert_eq!((s.queue_len, s.dropped_queue_full), (5, 3));
    // One message per virtual millisecond: nothing before 1 ms, then one at each ms.
    assert_eq!(core.poll_timeout(), Some(Time::from_millis(1)));
    core.handle_timeout(Time::from_micros(999));
    assert!(drain(&mut core).is_empty());
    core.handle_timeout(Time::from_micros(2_500));
    assert_eq!(only_to(&drain(&mut core), UAS).len(), 2);
    assert_eq!(core.poll_timeout(), Some(Time::from_millis(3)));
    // A late wake-up processes the whole backlog whose time has come, in one batch.
    core.handle_timeout(Time::from_millis(10));
    assert_eq!(only_to(&drain(&mut core), UAS).len(), 3);
    let s = core.stats(Time::from_millis(10));
    assert_eq!(s.busy_virtual, Duration::from_millis(5));
    assert_eq!(s.queue_len, 0);
}

#[test]
fn threshold_admission_rejects_new_sessions_only_with_retry_after() {
    let mut cfg = config();
    cfg.cost_forward_us = 10_000.0;
    cfg.control.algorithm = "threshold".parse().unwrap();
    cfg.control.threshold.high_watermark = Some(3);
    cfg.control.threshold.low_watermark = Some(1);
    cfg.retry_after_s = 2;
    let mut core = core_with(&cfg);
    for i in 0..6 {
        core.handle_datagram(
            Time::ZERO,
            Bytes::from(invite(&format!("t{i}"), 70)),
            addr(UAC),
        );
    }
    // An in-dialog request at the same moment is admitted although the policy is rejecting.
    core.handle_datagram(
        Time::ZERO,
        Bytes::from(in_dialog("BYE", "old", 2, "oldbye")),
        addr(UAC),
    );
    let s = core.stats(Time::ZERO);
    assert_eq!((s.admitted, s.rejected_policy), (4, 3));
    core.handle_timeout(Time::from_secs(1));
    let out = drain(&mut core);
    let rejections: Vec<_> = out
        .iter()
        .filter(|t| text(t).starts_with("SIP/2.0 503"))
        .collect();
    assert_eq!(rejections.len(), 3);
    assert!(text(rejections[0]).contains("\r\nRetry-After: 2\r\n"));
    assert_eq!(only_to(&out, UAS).len(), 4, "3 INVITEs and the BYE");
}

#[test]
fn shutdown_rejects_new_invites_but_finishes_running_calls() {
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("s1", 70).as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();
    core.begin_shutdown();
    assert!(!core.is_idle());
    let out = step(&mut core, Time::ZERO, invite("s2", 70).as_bytes(), UAC);
    assert_eq!(out.len(), 1);
    assert!(text(&out[0]).starts_with("SIP/2.0 503 Service Unavailable\r\n"));
    let ok = step(
        &mut core,
        Time::from_millis(1),
        answer(&fwd, 200, "OK").as_bytes(),
        UAS,
    );
    assert_eq!(status_of(&ok[0]), 200);
    assert!(core.is_idle());
}

#[test]
fn garbage_is_counted_answered_or_dropped_and_the_call_survives() {
    let mut cfg = config();
    cfg.max_datagram = 4_096;
    let mut core = core_with(&cfg);
    let mut garbage: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\r\n\r\n".to_vec(),
        b"hello world".to_vec(),
        vec![0xff; 300],
        vec![b'A'; 8_000], // oversized
        invite("g", 70).as_bytes()[..90].to_vec(),
        b"SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec(),
    ];
    // Parses, but fails validation (no From): answered 400.
    garbage.push(
        b"OPTIONS sip:x@192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.30:5060;branch=z9hG4bKbad\r\n\
          To: <sip:x@192.0.2.1>\r\nCall-ID: bad\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
            .to_vec(),
    );
    // A pseudo-random mutation of a real INVITE, many times over.
    let base = invite("mut", 70).into_bytes();
    let mut seed = 0x9e37_79b9_u32;
    for _ in 0..500 {
        let mut m = base.clone();
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let i = seed as usize % m.len();
            m[i] = (seed >> 8) as u8;
        }
        garbage.push(m);
    }
    let mut now = Time::ZERO;
    let mut bad_request_answers = 0;
    let mut call_out = Vec::new();
    for (i, g) in garbage.iter().enumerate() {
        now = Time::from_micros(i as u64 * 10);
        for t in step(&mut core, now, g, "192.0.2.30:5060") {
            if t.to == addr("192.0.2.30:5060") && t.payload.starts_with(b"SIP/2.0 400 ") {
                bad_request_answers += 1;
            }
        }
        if i == 3 {
            call_out = step(&mut core, now, invite("good", 70).as_bytes(), UAC);
        }
    }
    let s = core.stats(now);
    assert_eq!(s.oversized, 1);
    assert!(s.malformed >= 4, "{s:?}");
    assert!(bad_request_answers >= 1);
    // The admitted call between the garbage completes.
    let fwd = only_to(&call_out, UAS)[0].clone();
    let ok = step(&mut core, now, answer(&fwd, 200, "OK").as_bytes(), UAS);
    assert_eq!(only_to(&ok, UAC).len(), 1);
    assert_eq!(status_of(only_to(&ok, UAC)[0]), 200);
}

#[test]
fn static_rules_route_by_request_uri_user_and_host() {
    let mut cfg = config();
    cfg.routes = vec![
        sluice_proxy_core::RouteRule {
            host: None,
            user: Some("carol".into()),
            next_hop: addr("192.0.2.40:5060"),
        },
        sluice_proxy_core::RouteRule {
            host: Some("example.com".into()),
            user: None,
            next_hop: addr("192.0.2.50:5060"),
        },
    ];
    let mut core = core_with(&cfg);
    let carol = invite("r1", 70).replace("INVITE sip:bob@", "INVITE sip:carol@");
    let out = step(&mut core, Time::ZERO, carol.as_bytes(), UAC);
    assert_eq!(only_to(&out, "192.0.2.40:5060").len(), 1);
    let example = invite("r2", 70).replace("sip:bob@192.0.2.1:5060 SIP", "sip:bob@EXAMPLE.com SIP");
    let out = step(&mut core, Time::ZERO, example.as_bytes(), UAC);
    assert_eq!(only_to(&out, "192.0.2.50:5060").len(), 1);
    let out = step(&mut core, Time::ZERO, invite("r3", 70).as_bytes(), UAC);
    assert_eq!(only_to(&out, UAS).len(), 1);
}

#[test]
fn timer_c_cancels_a_ringing_branch_and_then_gives_up_on_a_silent_next_hop() {
    let mut cfg = config();
    cfg.timer_c_s = 10.0;
    let mut core = core_with(&cfg);
    let out = step(&mut core, Time::ZERO, invite("tc", 70).as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();
    step(
        &mut core,
        Time::from_millis(1),
        answer(&fwd, 180, "Ringing").as_bytes(),
        UAS,
    );
    let mut cancel_at = None;
    let mut first_408_at = None;
    let mut now = Time::ZERO;
    while let Some(next) = core.poll_timeout() {
        if next > Time::from_secs(60) {
            break;
        }
        now = next;
        core.handle_timeout(now);
        for t in drain(&mut core) {
            if t.to == addr(UAS) && text(&t).starts_with("CANCEL ") {
                cancel_at.get_or_insert(now);
            }
            if t.to == addr(UAC) && text(&t).starts_with("SIP/2.0 408 ") {
                first_408_at.get_or_insert(now);
            }
        }
    }
    // Timer C, reset by the 180 at 1 ms, sends the CANCEL 10 s later; 64*T1 after that
    // the branch is abandoned with a 408.
    assert_eq!(cancel_at, Some(Time::from_millis(10_001)));
    assert_eq!(first_408_at, Some(Time::from_millis(42_001)));
    let s = core.stats(now);
    assert_eq!((s.timer_c_cancels, s.timer_c_abandoned), (1, 1));
    assert_eq!(s.pending_requests, 0);
}

#[test]
fn timer_c_gives_up_64_t1_after_its_cancel_though_later_invites_wait_on_their_timer_c() {
    let mut cfg = config();
    cfg.timer_c_s = 100.0;
    let mut core = core_with(&cfg);
    // Two ringing branches whose next hop then goes silent, forwarded 50 s apart and
    // ringing 1 ms later: the first is given up at 100.001 s + 64*T1, before the second's
    // Timer C at 150.001 s.
    for (call, at) in [("g1", Time::ZERO), ("g2", Time::from_secs(50))] {
        let out = step(&mut core, at, invite(call, 70).as_bytes(), UAC);
        let fwd = only_to(&out, UAS)[0].clone();
        step(
            &mut core,
            at + Duration::from_millis(1),
            answer(&fwd, 180, "Ringing").as_bytes(),
            UAS,
        );
    }
    let mut given_up = Vec::new();
    while let Some(now) = core.poll_timeout() {
        if now > Time::from_secs(300) {
            break;
        }
        core.handle_timeout(now);
        for t in drain(&mut core) {
            if t.to == addr(UAC) && text(&t).starts_with("SIP/2.0 408 ") && !t.retransmission {
                given_up.push(now);
            }
        }
    }
    assert_eq!(
        given_up,
        [Time::from_millis(132_001), Time::from_millis(182_001)]
    );
}

#[test]
fn each_provisional_but_100_resets_timer_c_so_a_callee_still_ringing_is_not_cancelled() {
    let mut cfg = config();
    cfg.timer_c_s = 100.0;
    let mut core = core_with(&cfg);
    let out = step(&mut core, Time::ZERO, invite("r1", 70).as_bytes(), UAC);
    let fwd = only_to(&out, UAS)[0].clone();
    // §16.7 step 2: 180 at 1 s and 183 at 90 s reset Timer C; a 100 at 150 s does not.
    for (at_ms, status, reason) in [
        (1_000, 180, "Ringing"),
        (90_000, 183, "Session Progress"),
        (150_000, 100, "Trying"),
    ] {
        step(
            &mut core,
            Time::from_millis(at_ms),
            answer(&fwd, status, reason).as_bytes(),
            UAS,
        );
    }
    let mut cancelled = Vec::new();
    let mut given_up = Vec::new();
    while let Some(now) = core.poll_timeout() {
        if now > Time::from_secs(400) {
            break;
        }
        core.handle_timeout(now);
        for t in drain(&mut core) {
            if t.retransmission {
                continue;
            }
            if t.to == addr(UAS) && text(&t).starts_with("CANCEL ") {
                cancelled.push(now);
            }
            if t.to == addr(UAC) && text(&t).starts_with("SIP/2.0 408 ") {
                given_up.push(now);
            }
        }
    }
    assert_eq!(cancelled, [Time::from_secs(190)]);
    assert_eq!(given_up, [Time::from_secs(222)]);
}

#[test]
fn timer_c_gives_up_at_once_when_its_cancel_is_unreachable_or_unknown_downstream() {
    let mut cfg = config();
    cfg.timer_c_s = 10.0;
    // Two ringing branches whose next hop then goes silent; Timer C CANCELs both at 10 s.
    let mut core = core_with(&cfg);
    let mut forwarded = Vec::new();
    for (i, call) in ["k1", "k2"].into_iter().enumerate() {
        let t = Time::from_millis(2 * i as u64);
        let out = step(&mut core, t, invite(call, 70).as_bytes(), UAC);
        let fwd = only_to(&out, UAS)[0].clone();
        let ringing = answer(&fwd, 180, "Ringing");
        step(
            &mut core,
            t + Duration::from_millis(1),
            ringing.as_bytes(),
            UAS,
        );
        forwarded.push(fwd);
    }
    let at = Time::from_secs(10) + Duration::from_millis(5);
    core.handle_timeout(at);
    let cancels: Vec<Transmit> = drain(&mut core)
        .into_iter()
        .filter(|t| t.to == addr(UAS) && text(t).starts_with("CANCEL "))
        .collect();
    assert_eq!(cancels.len(), 2);
    let is_408 = |t: &Transmit| t.to == addr(UAC) && text(t).starts_with("SIP/2.0 408 ");
    // k1: the CANCEL comes back as an ICMP unreachable: the INVITE's final response cannot
    // come either, so the caller gets its 408 now rather than 64*T1 later.
    let k1 = cancels
        .iter()
        .find(|t| text(t).contains("Call-ID: k1\r\n"))
        .unwrap();
    assert!(core.handle_unreachable(at, addr(UAS), icmp_quote(k1)));
    let out = drain(&mut core);
    assert_eq!(out.iter().filter(|t| is_408(t)).count(), 1, "{out:?}");
    assert!(out.iter().any(|t| text(t).contains("Call-ID: k1\r\n")));
    // k2: a restarted next hop answers the CANCEL 481, it has no such INVITE.
    let k2 = cancels
        .iter()
        .find(|t| text(t).contains("Call-ID: k2\r\n"))
        .unwrap();
    let later = at + Duration::from_millis(1);
    let out = step(
        &mut core,
        later,
        answer(k2, 481, "Call/Transaction Does Not Exist").as_bytes(),
        UAS,
    );
    assert_eq!(out.iter().filter(|t| is_408(t)).count(), 1, "{out:?}");
    assert!(out.iter().any(|t| text(t).contains("Call-ID: k2\r\n")));
    let s = core.stats(later);
    assert_eq!(
        (s.timer_c_cancels, s.timer_c_abandoned, s.timeouts_408),
        (2, 2, 2)
    );
    assert_eq!(s.pending_requests, 0);
}

/// A policy of the test's own: rejects every arrival it is asked about, and records what it
/// saw, to show what the hook is given.
#[derive(Debug, Default)]
struct RejectAll {
    arrivals: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl sluice_control::LocalAdmission for RejectAll {
    fn on_arrival(
        &mut self,
        _now: Time,
        _queue_len: usize,
        _message: &sluice_control::MessageSummary,
    ) -> sluice_control::AdmissionVerdict {
        self.arrivals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        sluice_control::AdmissionVerdict::Reject
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
}

#[test]
fn a_plugged_in_policy_rejects_new_sessions_but_never_dialog_traffic() {
    let mut core = core_with(&config());
    let policy = RejectAll::default();
    let arrivals = policy.arrivals.clone();
    core.set_admission(Box::new(policy));
    let out = step(&mut core, Time::ZERO, invite("p1", 70).as_bytes(), UAC);
    assert_eq!(out.len(), 1);
    assert!(text(&out[0]).starts_with("SIP/2.0 503 Service Unavailable\r\n"));
    // The policy said reject to the BYE too; the receive stage admits it anyway.
    let out = step(
        &mut core,
        Time::ZERO,
        in_dialog("BYE", "p0", 2, "p0bye").as_bytes(),
        UAC,
    );
    assert_eq!(only_to(&out, UAS).len(), 1);
    assert_eq!(arrivals.load(std::sync::atomic::Ordering::Relaxed), 2);
    let s = core.stats(Time::ZERO);
    assert_eq!((s.rejected_policy, s.admitted), (1, 1));
}

/// De Cicco et al.'s single-proxy setting with fabricated time: INVITEs only (the next hop
/// never answers, so the processor's whole load is the INVITEs), `cost_forward_us` 3333
/// (300 calls/s), other messages free, a 503 costing `reject_us`.
fn decicco_config(policy: &str, reject_us: u64) -> ProxyConfig {
    let mut cfg = config();
    cfg.invite_queue = true;
    cfg.invite_queue_capacity = 1000;
    cfg.cost_forward_us = 3_333.0;
    cfg.cost_other_us = Some(0.0);
    cfg.cost_reject_us = reject_us as f64;
    cfg.control.algorithm = policy.parse().unwrap();
    cfg.validate().unwrap();
    cfg
}

/// Offers new INVITEs at `rate` per second for `secs`, waking the core at every arrival and
/// at every deadline it asks for, as the shell does. Returns the 503s sent upstream
/// (retransmissions included: nobody ACKs them).
fn offer(core: &mut ProxyCore, rate: f64, secs: f64) -> u64 {
    let gap = Duration::from_secs_f64(1.0 / rate);
    let end = Time::ZERO + Duration::from_secs_f64(secs);
    let mut next_arrival = Time::ZERO;
    let mut n = 0u64;
    let mut rejections = 0u64;
    loop {
        let wake = core.poll_timeout().unwrap_or(end).min(end);
        let now = if next_arrival <= wake {
            if next_arrival >= end {
                break;
            }
            core.handle_datagram(
                next_arrival,
                Bytes::from(invite(&format!("o{n}"), 70)),
                addr(UAC),
            );
            n += 1;
            let t = next_arrival;
            next_arrival += gap;
            t
        } else {
            wake
        };
        core.handle_timeout(now);
        rejections += drain(core)
            .iter()
            .filter(|t| t.to == addr(UAC) && text(t).starts_with("SIP/2.0 503"))
            .count() as u64;
        if now >= end {
            break;
        }
    }
    rejections
}

#[test]
fn pi_drains_the_invite_queue_at_its_rate_and_holds_the_processor_at_its_target() {
    // The paper's PI (no work mark: every rejection is made at the drain) and sluice's.
    for work_mark in [Some(Duration::ZERO), None] {
        let mut cfg = decicco_config("pi", 833);
        cfg.control.pi.work_mark = work_mark;
        let mut core = core_with(&cfg);
        // 2x capacity for 10 s. A 503 costs a quarter of a forward: beta 4. g_opt(2) with
        // beta 4 and C_T 0.9 is (3.6 - 2) / 3 = 0.53 of capacity: about 160 forwarded
        // INVITEs a second, the rest answered 503.
        let secs = 10.0;
        let responses_503 = offer(&mut core, 600.0, secs);
        let s = core.stats(Time::from_secs(10));
        let forwarded = s.forwarded_requests as f64 / secs;
        assert!(
            (120.0..=185.0).contains(&forwarded),
            "{work_mark:?}: forwarded {forwarded}/s"
        );
        if work_mark == Some(Duration::ZERO) {
            assert_eq!(
                s.rejected_at_drain, s.rejected_policy,
                "the paper's pi rejects only as it drains"
            );
        }
        assert!(responses_503 >= s.rejected_policy);
        let rejected = s.rejected_policy as f64 / secs;
        assert!(rejected > 350.0, "{work_mark:?}: rejected {rejected}/s");
        // The processor runs near the PI's 0.9 target, neither idle nor saturated...
        let busy = s.busy_virtual.as_secs_f64() / secs;
        assert!((0.8..=0.97).contains(&busy), "{work_mark:?}: busy {busy}");
        // ... and the INVITE queue stays short (target delay 50 ms) instead of filling up.
        assert_eq!(s.dropped_invite_queue_full, 0);
        assert!(s.invite_queue_len < 200, "queue {}", s.invite_queue_len);
        let m = core.admission_metrics();
        assert!(m.drain_rate.is_some_and(|u| u > 300.0), "{m:?}");
    }
}

#[test]
fn pi_waits_for_its_drain_budget_and_other_messages_go_first() {
    let mut cfg = decicco_config("pi", 833);
    // The paper's pacing, from the first INVITE (sluice's default drains unpaced while the
    // CPU is under its target).
    cfg.control.pi.work_conserving = false;
    let mut core = core_with(&cfg);
    for i in 0..5 {
        core.handle_datagram(
            Time::ZERO,
            Bytes::from(invite(&format!("w{i}"), 70)),
            addr(UAC),
        );
    }
    // The drain rate starts at zero: nothing is taken before the first control tick.
    core.handle_timeout(Time::from_millis(1));
    assert!(only_to(&drain(&mut core), UAS).is_empty());
    assert_eq!(core.stats(Time::from_millis(1)).invite_queue_len, 5);
    // A BYE arriving now is served at once, ahead of the waiting INVITEs (free: other
    // messages cost nothing here).
    core.handle_datagram(
        Time::from_millis(2),
        Bytes::from(in_dialog("BYE", "old", 2, "oldbye")),
        addr(UAC),
    );
    core.handle_timeout(Time::from_millis(2));
    let out = drain(&mut core);
    assert_eq!(only_to(&out, UAS).len(), 1);
    assert!(text(only_to(&out, UAS)[0]).starts_with("BYE "));
    // After a few ticks the queue loop opens the drain and the INVITEs go out, paced by
    // the processor's cost.
    let mut now = Time::from_millis(2);
    while now < Time::from_millis(400) {
        now = core.poll_timeout().unwrap().max(now);
        core.handle_timeout(now);
        drain(&mut core);
    }
    let s = core.stats(now);
    assert_eq!((s.forwarded_requests, s.invite_queue_len), (1 + 5, 0));
    assert!(s.busy_virtual >= Duration::from_micros(5 * 3_333));
}

#[test]
fn every_local_policy_rejects_new_sessions_under_overload_and_none_does_not() {
    for policy in [
        "none",
        "threshold",
        "ohta",
        "occ",
        "red",
        "latency-bucket",
        "pi",
    ] {
        // A 503 costs a tenth of a forward (beta 10: at 4x, rejecting everything would
        // take 40 % of the processor, so there is room for goodput; g_opt(4) = 0.55).
        let mut core = core_with(&decicco_config(policy, 333));
        // 4x capacity for 12 s (OCC adapts once a second).
        let secs = 12.0;
        offer(&mut core, 1200.0, secs);
        let s = core.stats(Time::from_secs(12));
        let forwarded = s.forwarded_requests as f64 / secs;
        // Never above the emulated capacity (300/s), whatever the policy.
        assert!(forwarded <= 305.0, "{policy}: forwarded {forwarded}/s");
        let rejected = s.rejected_policy as f64 / secs;
        if policy == "none" {
            assert_eq!(s.rejected_policy, 0);
            assert!(s.dropped_invite_queue_full > 5_000, "{policy}: {s:?}");
            continue;
        }
        // Most of the excess is answered 503, and some calls still get through.
        assert!(rejected > 400.0, "{policy}: rejected {rejected}/s");
        assert!(forwarded > 60.0, "{policy}: forwarded {forwarded}/s");
        eprintln!("{policy}: forwarded {forwarded:.0}/s, rejected {rejected:.0}/s");
    }
}

#[test]
fn new_sessions_are_refused_before_the_table_fills_so_in_dialog_requests_still_pass() {
    let mut cfg = config();
    cfg.max_transactions = 40;
    let mut core = core_with(&cfg);
    // A silent next hop: each forwarded INVITE holds two slots. 19 INVITEs fill 38 of the
    // 40 slots (the 19th arrives at 36, which is not more than 90 %).
    for i in 0..19 {
        let out = step(
            &mut core,
            Time::from_millis(i),
            invite(&format!("h{i}"), 70).as_bytes(),
            UAC,
        );
        assert_eq!(only_to(&out, UAS).len(), 1, "INVITE {i} forwarded");
    }
    let now = Time::from_millis(20);
    assert_eq!(core.stats(now).transactions, 38);
    // Above 90 %: the next new session gets a stateless 503 and takes no slot.
    let out = step(&mut core, now, invite("h19", 70).as_bytes(), UAC);
    assert!(only_to(&out, UAS).is_empty());
    let refusals = only_to(&out, UAC);
    assert_eq!(refusals.len(), 1);
    assert!(text(refusals[0]).starts_with("SIP/2.0 503 Service Unavailable\r\n"));
    assert!(!text(refusals[0]).contains("Retry-After"));
    assert_eq!(core.stats(now).transactions, 38);
    // A BYE of an established call still finds room.
    let out = step(
        &mut core,
        now,
        in_dialog("BYE", "h0", 2, "bye0").as_bytes(),
        UAC,
    );
    assert_eq!(only_to(&out, UAS).len(), 1, "BYE forwarded");
    let s = core.stats(now);
    assert_eq!(s.rejected_table_headroom, 1);
    assert_eq!(s.refused_table_full, 0);
    assert_eq!(s.transactions, 40);
}

#[test]
fn rejections_are_stateless_and_their_ack_is_ended_without_a_transaction() {
    let mut cfg = config();
    cfg.control.algorithm = "threshold".parse().unwrap();
    cfg.control.threshold.high_watermark = Some(0);
    cfg.control.threshold.low_watermark = Some(0);
    let mut core = core_with(&cfg);
    let out = step(&mut core, Time::ZERO, invite("r1", 70).as_bytes(), UAC);
    assert_eq!(
        out.len(),
        1,
        "only the 503, no 100 Trying, nothing downstream"
    );
    assert_eq!(out[0].to, addr(UAC));
    let reply = text(&out[0]);
    assert!(reply.starts_with("SIP/2.0 503 "), "{reply}");
    assert!(
        reply.contains("\r\nTo: <sip:bob@192.0.2.1>;tag=sl-rej\r\n"),
        "{reply}"
    );
    assert!(reply.contains("branch=z9hG4bKr1;rport"), "{reply}");
    // No transaction holds the rejection, so nothing retransmits it.
    let s = core.stats(Time::ZERO);
    assert_eq!((s.transactions, s.rejected_policy), (0, 1));
    assert_eq!(core.poll_timeout(), None);
    // The caller's ACK for the 503 ends here.
    let ack = "ACK sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
               Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bKr1;rport\r\n\
               Max-Forwards: 70\r\n\
               From: <sip:alice@192.0.2.10>;tag=ar1\r\n\
               To: <sip:bob@192.0.2.1>;tag=sl-rej\r\n\
               Call-ID: r1\r\n\
               CSeq: 1 ACK\r\n\
               Content-Length: 0\r\n\r\n";
    assert!(step(&mut core, Time::from_millis(1), ack.as_bytes(), UAC).is_empty());
    let s = core.stats(Time::from_millis(1));
    assert_eq!((s.absorbed_reject_acks, s.forwarded_acks), (1, 0));
}

#[test]
fn a_retransmitted_invite_is_not_a_new_session_and_a_rejected_one_is_rejected_again() {
    let mut cfg = config();
    cfg.cost_forward_us = 10_000.0;
    cfg.control.algorithm = "threshold".parse().unwrap();
    cfg.control.threshold.high_watermark = Some(1);
    cfg.control.threshold.low_watermark = Some(0);
    let mut core = core_with(&cfg);
    // The first INVITE is admitted; with it queued the policy rejects new sessions.
    core.handle_datagram(Time::ZERO, Bytes::from(invite("k1", 70)), addr(UAC));
    core.handle_datagram(Time::ZERO, Bytes::from(invite("k2", 70)), addr(UAC));
    // Their retransmissions: k1's is not rejected although the policy rejects; k2's gets
    // k2's 503 again.
    core.handle_datagram(
        Time::from_millis(5),
        Bytes::from(invite("k1", 70)),
        addr(UAC),
    );
    core.handle_datagram(
        Time::from_millis(5),
        Bytes::from(invite("k2", 70)),
        addr(UAC),
    );
    let s = core.stats(Time::from_millis(5));
    assert_eq!(
        (s.rejected_policy, s.rejected_repeats, s.repeated_invites),
        (1, 1, 2)
    );
    core.handle_timeout(Time::from_secs(1));
    let out = drain(&mut core);
    let to_uac: Vec<u16> = only_to(&out, UAC).iter().map(|t| status_of(t)).collect();
    assert_eq!(
        to_uac.iter().filter(|&&c| c == 503).count(),
        2,
        "{to_uac:?}"
    );
    // k1 is forwarded once; its retransmission is absorbed by its transaction.
    let invites = only_to(&out, UAS)
        .iter()
        .filter(|t| text(t).starts_with("INVITE "))
        .count();
    assert_eq!(invites, 1);
}

/// 1,000 new INVITEs a second for 3 s, the shell reporting 0.95 ms of native work every
/// millisecond; returns the policy's CPU load at the end and the 503s sent.
fn native_busy_run(cfg: &ProxyConfig) -> (Option<f64>, usize) {
    let mut core = core_with(cfg);
    let mut rejected = 0;
    for ms in 0..3000u64 {
        let now = Time::from_millis(ms);
        core.handle_datagram(now, Bytes::from(invite(&format!("n{ms}"), 70)), addr(UAC));
        core.handle_timeout(now);
        rejected += drain(&mut core)
            .iter()
            .filter(|t| text(t).starts_with("SIP/2.0 503"))
            .count();
        core.record_native_busy(Duration::from_micros(950));
    }
    (core.admission_metrics().cpu_load, rejected)
}

#[test]
fn at_native_speed_the_cpu_policies_read_the_load_the_shell_measured() {
    // No emulated cost: the PI must see the 95 % the shell measured (it read 0 before, and
    // never rejected however loaded the proxy was).
    let mut cfg = config();
    cfg.invite_queue = true;
    cfg.control.algorithm = "pi".parse().unwrap();
    cfg.validate().unwrap();
    let (cpu, rejected) = native_busy_run(&cfg);
    assert!(cpu.is_some_and(|c| c > 0.9), "cpu {cpu:?}");
    assert!(rejected > 0, "no 503 at 95 % CPU against a 90 % target");
    // With emulated costs the virtual processor is the load (0.1 ms per INVITE: 10 %), and
    // the shell's native time is not mixed in.
    cfg.cost_forward_us = 100.0;
    cfg.cost_other_us = Some(0.0);
    cfg.cost_reject_us = 25.0;
    let (cpu, rejected) = native_busy_run(&cfg);
    assert!(cpu.is_some_and(|c| (0.05..0.2).contains(&c)), "cpu {cpu:?}");
    assert_eq!(rejected, 0);
}

/// The ACK a caller sends for one of the proxy's stateless 503s (its To tag `sl-rej`).
fn ack_for_rejection(call: &str) -> String {
    format!(
        "ACK sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK{call};rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>;tag=sl-rej\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 ACK\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

#[test]
fn a_rejected_call_costs_its_503_and_the_ack_that_ends_it_without_a_transaction() {
    let mut cfg = config();
    cfg.cost_forward_us = 1_000.0;
    cfg.cost_reject_us = 250.0;
    cfg.control.algorithm = "threshold".parse().unwrap();
    cfg.control.threshold.high_watermark = Some(0);
    cfg.control.threshold.low_watermark = Some(0);
    let mut core = core_with(&cfg);
    core.handle_datagram(Time::ZERO, Bytes::from(invite("r1", 70)), addr(UAC));
    core.handle_timeout(Time::from_micros(250));
    let rejected = drain(&mut core);
    assert!(text(&rejected[0]).contains("tag=sl-rej"));
    let transactions = core.stats(Time::ZERO).transactions;
    // The ACK waits its turn and costs an ordinary message: done at 250 + 1,000 us.
    core.handle_datagram(
        Time::from_micros(250),
        Bytes::from(ack_for_rejection("r1")),
        addr(UAC),
    );
    assert_eq!(core.poll_timeout(), Some(Time::from_micros(1_250)));
    core.handle_timeout(Time::from_micros(1_250));
    assert!(drain(&mut core).is_empty(), "nothing is sent for it");
    let s = core.stats(Time::from_micros(1_250));
    assert_eq!(s.absorbed_reject_acks, 1);
    assert_eq!(s.busy_virtual, Duration::from_micros(1_250));
    assert_eq!(s.transactions, transactions, "no transaction for either");
}

#[test]
fn the_ack_of_a_rejection_relayed_from_a_downstream_sluice_ends_our_transaction() {
    // The next hop is a sluice too and rejects statelessly, with the same To tag as ours:
    // the caller's ACK for the relayed 503 is the one our server transaction waits for.
    // Taken for our own rejection's ACK, it was ended unseen, and the transaction
    // retransmitted the 503 until Timer H, each copy drawing another ACK.
    let mut core = core_with(&config());
    let out = step(&mut core, Time::ZERO, invite("d1", 70).as_bytes(), UAC);
    let forwarded = only_to(&out, UAS)[0].clone();
    let rejection = answer(&forwarded, 503, "Service Unavailable").replace("tag=b1", "tag=sl-rej");
    let out = step(&mut core, Time::from_millis(2), rejection.as_bytes(), UAS);
    let relayed = only_to(&out, UAC);
    assert_eq!(relayed.len(), 1, "the 503 goes upstream");
    assert!(
        text(relayed[0]).contains("tag=sl-rej"),
        "{}",
        text(relayed[0])
    );
    assert!(
        only_to(&out, UAS)
            .iter()
            .any(|t| text(t).starts_with("ACK ")),
        "the proxy's client transaction ACKs the 503 downstream"
    );
    assert!(step(
        &mut core,
        Time::from_millis(4),
        ack_for_rejection("d1").as_bytes(),
        UAC
    )
    .is_empty());
    // Past Timer G's first (T1) and second (2·T1) firings: nothing more reaches the caller.
    core.handle_timeout(Time::from_millis(600));
    core.handle_timeout(Time::from_millis(1_600));
    let later = drain(&mut core);
    assert!(
        only_to(&later, UAC).is_empty(),
        "503 retransmitted: {later:?}"
    );
    assert_eq!(core.stats(Time::from_millis(1_600)).absorbed_reject_acks, 0);
    // Our own rejections' ACKs are still ended by the processor.
    let mut cfg = config();
    cfg.control.algorithm = "threshold".parse().unwrap();
    cfg.control.threshold.high_watermark = Some(0);
    cfg.control.threshold.low_watermark = Some(0);
    let mut core = core_with(&cfg);
    step(&mut core, Time::ZERO, invite("d2", 70).as_bytes(), UAC);
    step(
        &mut core,
        Time::from_millis(1),
        ack_for_rejection("d2").as_bytes(),
        UAC,
    );
    assert_eq!(core.stats(Time::from_millis(1)).absorbed_reject_acks, 1);
}

#[test]
fn background_load_takes_its_share_of_the_processor_ahead_of_the_queue() {
    let mut cfg = config();
    cfg.cost_forward_us = 1_000.0;
    cfg.background_load = 0.3;
    let mut core = core_with(&cfg);
    // Alone, a 3 ms job every 10 ms: 30 % busy.
    core.handle_timeout(Time::from_secs(2));
    let s = core.stats(Time::from_secs(2));
    assert_eq!(s.busy_virtual, Duration::from_millis(600));
    // An INVITE arriving at the start of a job waits for it: forwarded at 3 + 1 ms.
    core.handle_datagram(Time::from_secs(2), Bytes::from(invite("b1", 70)), addr(UAC));
    core.handle_timeout(Time::from_millis(2_003));
    assert!(only_to(&drain(&mut core), UAS).is_empty());
    core.handle_timeout(Time::from_millis(2_004));
    assert_eq!(only_to(&drain(&mut core), UAS).len(), 1);
    // A configuration can only give other processes a share of an emulated processor.
    let mut native = config();
    native.background_load = 0.3;
    assert!(native.validate().is_err());
}

#[test]
fn records_report_queue_processor_and_each_message_and_marks_carry_to_relays() {
    let mut cfg = config();
    cfg.cost_forward_us = 1_000.0;
    let mut core = core_with(&cfg);
    core.enable_records();
    core.handle_datagram(Time::ZERO, Bytes::from(invite("m1", 70)), addr(UAC));
    core.handle_timeout(Time::from_millis(1));
    let records: Vec<_> = std::iter::from_fn(|| core.poll_record()).collect();
    assert!(records.contains(&Record::Queue {
        at: Time::ZERO,
        waiting: 1
    }));
    assert!(records.contains(&Record::Busy {
        start: Time::ZERO,
        end: Time::from_millis(1)
    }));
    let Some(Record::Processed(p)) = records.iter().find(|r| matches!(r, Record::Processed(_)))
    else {
        panic!("no processed record in {records:?}")
    };
    assert_eq!(&p.call_id[..], b"m1");
    assert!(p.invite && p.session_start && !p.rejected);
    let out = drain(&mut core);
    assert!(out.iter().all(|t| !t.retransmission));
    // A 2xx retransmission marked by the driver is relayed statelessly with its mark.
    let fwd = only_to(&out, UAS)[0].clone();
    let ok = answer(&fwd, 200, "OK");
    core.handle_datagram(Time::from_millis(2), Bytes::from(ok.clone()), addr(UAS));
    core.handle_timeout(Time::from_millis(3));
    assert_eq!(only_to(&drain(&mut core), UAC).len(), 1);
    core.handle_datagram_marked(Time::from_millis(600), Bytes::from(ok), addr(UAS), true);
    core.handle_timeout(Time::from_millis(601));
    let relayed = drain(&mut core);
    assert_eq!(relayed.len(), 1);
    assert!(relayed[0].retransmission && relayed[0].origin.is_none());
}

/// A request at the header limit (256) would leave with a Via and a Record-Route more than
/// any SIP parser of sluice's reads: the proxy answers 500 and counts it instead of sending
/// what the next hop must drop.
#[test]
fn a_request_the_proxy_would_forward_past_the_header_limit_gets_500() {
    let mut core = core_with(&config());
    let base = invite("full", 70);
    let (head, tail) = base.split_at(base.find("Content-Length").unwrap());
    let fillers = 256
        - Message::parse(Bytes::from(base.clone()))
            .unwrap()
            .headers()
            .count();
    let padded = format!("{head}{}{tail}", "X-Pad: 1\r\n".repeat(fillers));
    assert_eq!(
        Message::parse(Bytes::from(padded.clone()))
            .unwrap()
            .headers()
            .count(),
        256
    );
    let out = step(&mut core, Time::ZERO, padded.as_bytes(), UAC);
    assert!(only_to(&out, UAS).is_empty(), "nothing forwarded");
    let answers = only_to(&out, UAC);
    assert!(
        answers.iter().any(|t| text(t).starts_with("SIP/2.0 500")),
        "{:?}",
        answers.iter().map(|t| text(t)).collect::<Vec<_>>()
    );
    assert_eq!(core.stats(Time::ZERO).invalid, 1);
}

/// SIGHUP's reload: a new next hop takes the next call, while the call forwarded before
/// it keeps its transaction and its answer still reaches the caller; keys that size the
/// proxy are reported, not applied.
#[test]
fn a_reload_reroutes_new_calls_and_keeps_the_transactions_running() {
    const NEW_UAS: &str = "192.0.2.30:5060";
    let mut core = core_with(&config());
    let before = step(&mut core, Time::ZERO, invite("r1", 70).as_bytes(), UAC);
    let first = only_to(&before, UAS)[0].clone();

    let mut changed = config();
    changed.next_hop = Some(addr(NEW_UAS));
    changed.control.algorithm = "threshold".parse().unwrap();
    changed.max_transactions = 10;
    let t = Time::from_millis(10);
    let reloaded = core.reload(&changed, t);
    assert_eq!(reloaded.applied, vec!["next_hop", "control"]);
    assert_eq!(reloaded.needs_restart, vec!["max_transactions".to_owned()]);

    let after = step(&mut core, t, invite("r2", 70).as_bytes(), UAC);
    assert_eq!(
        only_to(&after, NEW_UAS).len(),
        1,
        "the new call goes to the new next hop"
    );
    assert!(only_to(&after, UAS).is_empty());
    let ok = step(&mut core, t, answer(&first, 200, "OK").as_bytes(), UAS);
    assert_eq!(ok.len(), 1, "the earlier call's 200 is relayed");
    assert_eq!((ok[0].to, status_of(&ok[0])), (addr(UAC), 200));
    assert!(
        core.admission_metrics().control_value.is_some(),
        "threshold runs"
    );

    // The same configuration again changes nothing.
    let again = core.reload(&changed, t);
    assert!(again.applied.is_empty() && again.needs_restart == vec!["max_transactions".to_owned()]);
}
