//! The sans-IO UAC and UAS cores with made-up time: wired to each other in memory, and
//! against hand-fed messages.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_load::{Hold, Out, Peer, Transport, Uac, UacConfig, Uas, UasConfig};
use sluice_sip::{edit, Message};
use sluice_time::Time;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const UAC: u16 = 5001;
const UAS: u16 = 5002;

/// Runs both cores against each other with a one-way delay, delivering datagrams in time
/// order; `drop_nth` drops every n-th datagram from the UAS (0: none).
fn run_pair(uac: &mut Uac, uas: &mut Uas, delay: Duration, drop_nth: u64, until: Time) {
    run_pair_over(Transport::Udp, uac, uas, delay, drop_nth, until);
}

/// [`run_pair`] with every message over `transport` (in order, as a connection keeps it).
fn run_pair_over(
    transport: Transport,
    uac: &mut Uac,
    uas: &mut Uas,
    delay: Duration,
    drop_nth: u64,
    until: Time,
) {
    let peer = |port| Peer {
        addr: addr(port),
        transport,
    };
    let mut wire: Vec<(Time, bool, Out)> = Vec::new(); // (arrival, to_uas, datagram)
    let mut now = Time::ZERO;
    let mut from_uas = 0u64;
    while now <= until && !uac.is_done() {
        uac.handle_timeout(now);
        uas.handle_timeout(now);
        while let Some(o) = uac.poll_transmit() {
            assert_eq!((o.to, o.transport), (addr(UAS), transport));
            wire.push((now + delay, true, o));
        }
        while let Some(o) = uas.poll_transmit() {
            assert_eq!((o.to, o.transport), (addr(UAC), transport));
            from_uas += 1;
            if drop_nth == 0 || !from_uas.is_multiple_of(drop_nth) {
                wire.push((now + delay, false, o));
            }
        }
        // Deliver what arrives by now, in order.
        // A stable sort: messages sent at the same instant keep their order.
        wire.sort_by_key(|(t, ..)| *t);
        let due = wire.partition_point(|(t, ..)| *t <= now);
        if due > 0 {
            for (_, to_uas, o) in wire.drain(..due).collect::<Vec<_>>() {
                if to_uas {
                    uas.handle_message(now, o.payload, peer(UAC));
                } else {
                    uac.handle_message(now, o.payload, peer(UAS));
                }
            }
            continue;
        }
        let next = [
            uac.poll_timeout(),
            uas.poll_timeout(),
            wire.first().map(|(t, ..)| *t),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => now = t.max(now),
            None => break,
        }
    }
}

fn uac_config(rate: f64, calls: u64) -> UacConfig {
    let mut c = UacConfig::new(addr(UAC), addr(UAS), rate);
    c.max_calls = Some(calls);
    c
}

#[test]
fn calls_complete_without_failures_or_retransmissions() {
    let mut cfg = uac_config(200.0, 1000);
    cfg.hold = Hold::Constant(Duration::from_millis(300));
    let mut uac = Uac::new(cfg, Time::ZERO);
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(2),
        0,
        Time::from_secs(60),
    );
    assert!(uac.is_done());
    let s = uac.summary();
    assert_eq!(
        (s.offered, s.successful, s.completed, s.failed, s.unfinished),
        (1000, 1000, 1000, 0, 0)
    );
    assert_eq!((s.retransmissions_sent, s.retransmissions_received), (0, 0));
    // INVITE, ACK, BYE per call; 100, 180, 200, 200 (BYE) back.
    assert_eq!((s.messages_sent, s.messages_received), (3000, 4000));
    // Post-dial delay is one round trip.
    let p50 = s.pdd_200.p50_ms.unwrap();
    assert!((4.0..4.01).contains(&p50), "{p50}");
    assert_eq!(s.pdd_180.count, 1000);
    assert_eq!(s.successful_with_180, 1000);
    // At most 300 ms / 5 ms = 60 calls plus a few in flight overlap.
    assert!(
        (60..70).contains(&s.peak_in_progress),
        "{}",
        s.peak_in_progress
    );
    let u = uas.counts();
    assert_eq!(
        (u.invites, u.answered, u.acks, u.byes),
        (1000, 1000, 1000, 1000)
    );
    assert_eq!(uas.dialogs(), 0);
    // Ended dialogs leave the expiry queue at the next timer run, not after the TTL.
    uas.handle_timeout(Time::from_secs(61));
    assert_eq!(uas.expiry_entries(), 0);
}

#[test]
fn lost_responses_are_retransmitted_and_counted_by_type() {
    let mut uac = Uac::new(uac_config(100.0, 200), Time::ZERO);
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    // Every 7th datagram from the UAS is lost: 100s, 180s, 200s and BYE 200s alike.
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(1),
        7,
        Time::from_secs(120),
    );
    let s = uac.summary();
    assert_eq!((s.offered, s.successful, s.failed), (200, 200, 0));
    assert_eq!(s.completed + s.failures.bye, 200);
    // A lost 180 is gone for good (nothing retransmits it once the 100 stopped the INVITE's
    // retransmissions): those calls are good by the caller's count, not by Shen et al.'s.
    assert_eq!(s.successful_with_180, s.pdd_180.count);
    assert!(
        (150..200).contains(&s.successful_with_180),
        "{}",
        s.successful_with_180
    );
    let u = uas.counts();
    // A lost 200 (INVITE) is retransmitted by the UAS; a lost 200 (BYE) makes the UAC
    // retransmit the BYE, which the UAS's transaction answers again.
    assert!(u.retransmissions_sent_by_type.ok_invite > 0);
    assert!(s.retransmissions_sent_by_type.bye > 0);
    assert_eq!(
        u.retransmissions_received_by_type.bye,
        s.retransmissions_sent_by_type.bye
    );
    // A retransmitted 2xx that replaces a lost first copy is the first the UAC sees; only
    // further copies count as received retransmissions, and each is ACKed again.
    let got = s.retransmissions_received_by_type.ok_invite;
    assert!(got <= u.retransmissions_sent_by_type.ok_invite);
    assert_eq!(s.retransmissions_sent_by_type.ack, got);
}

#[test]
fn a_503_counts_as_failure_cause_503() {
    let mut uac = Uac::new(uac_config(50.0, 40), Time::ZERO);
    let mut ucfg = UasConfig::new(addr(UAS));
    ucfg.reject_probability = 1.0;
    let mut uas = Uas::new(ucfg);
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(1),
        0,
        Time::from_secs(60),
    );
    let s = uac.summary();
    assert_eq!((s.offered, s.successful, s.failed), (40, 0, 40));
    assert_eq!(s.failures.rejected_503, 40);
    assert_eq!(s.retransmissions_sent, 0, "the layer ACKs the 503 once");
    assert_eq!(uas.counts().rejected_503, 40);
}

/// Feeds one INVITE to a UAS and records when its 200 goes out.
#[test]
fn uas_retransmits_its_2xx_on_the_t1_doubling_schedule_until_the_ack() {
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    let invite = Bytes::from_static(
        b"INVITE sip:service@127.0.0.1:5002 SIP/2.0\r\n\
          Via: SIP/2.0/UDP 127.0.0.1:5001;branch=z9hG4bK-1\r\n\
          Record-Route: <sip:10.0.0.1;lr>, <sip:10.0.0.2;lr>\r\n\
          Max-Forwards: 70\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:service@y>\r\n\
          Call-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
    );
    uas.handle_datagram(Time::ZERO, invite, addr(UAC));
    let mut sent: Vec<(Time, Bytes)> = Vec::new();
    while let Some(o) = uas.poll_transmit() {
        sent.push((Time::ZERO, o.payload));
    }
    let starts: Vec<&[u8]> = sent.iter().map(|(_, p)| &p[..11]).collect();
    assert_eq!(
        starts,
        [&b"SIP/2.0 100"[..], b"SIP/2.0 180", b"SIP/2.0 200"]
    );
    let ok = Message::parse(sent[2].1.clone()).unwrap();
    let rr: Vec<&[u8]> = ok
        .header_values(sluice_sip::HeaderName::RecordRoute)
        .map(Result::unwrap)
        .collect();
    assert_eq!(rr, [&b"<sip:10.0.0.1;lr>"[..], b"<sip:10.0.0.2;lr>"]);
    assert!(ok.header(sluice_sip::HeaderName::Contact).is_some());
    // Retransmissions at 0.5, 1.5, 3.5, 7.5, 11.5 s (intervals 0.5, 1, 2, 4, 4: capped at T2).
    let mut times = Vec::new();
    while let Some(t) = uas.poll_timeout() {
        if t > Time::from_secs(12) {
            break;
        }
        uas.handle_timeout(t);
        while let Some(o) = uas.poll_transmit() {
            assert_eq!(o.payload, sent[2].1, "the same 200, byte for byte");
            times.push(t);
        }
    }
    let ms: Vec<u64> = times.iter().map(|t| t.as_millis()).collect();
    assert_eq!(ms, [500, 1500, 3500, 7500, 11_500]);
    // The ACK stops it.
    let ack = Bytes::from_static(
        b"ACK sip:uas@127.0.0.1:5002 SIP/2.0\r\n\
          Via: SIP/2.0/UDP 127.0.0.1:5001;branch=z9hG4bK-2\r\n\
          Max-Forwards: 70\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:service@y>;tag=sluice-uas\r\n\
          Call-ID: c1\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
    );
    uas.handle_datagram(Time::from_secs(12), ack, addr(UAC));
    assert_eq!(uas.counts().acks, 1);
    assert_eq!(uas.counts().retransmissions_sent_by_type.ok_invite, 5);
    uas.handle_timeout(Time::from_secs(100));
    assert!(uas.poll_transmit().is_none());
    assert_eq!(uas.counts().unacked_2xx, 0);
}

/// Answers the UAC's INVITE with 180 at once and 200 at `answer_at`.
fn answer_at(answer_at: Time) -> sluice_load::UacSummary {
    let mut uac = Uac::new(uac_config(1.0, 1), Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = Message::parse(uac.poll_transmit().unwrap().payload).unwrap();
    let ringing = edit::response_to(&invite, 180).to_tag("t").build();
    uac.handle_datagram(Time::from_millis(5), ringing, addr(UAS));
    // The 180 moved the INVITE transaction to Proceeding: no retransmissions meanwhile.
    while let Some(t) = uac.poll_timeout() {
        if t >= answer_at {
            break;
        }
        uac.handle_timeout(t);
        assert!(uac.poll_transmit().is_none());
    }
    let ok = edit::response_to(&invite, 200)
        .to_tag("t")
        .header("Contact", b"<sip:uas@127.0.0.1:5002>")
        .build();
    uac.handle_datagram(answer_at, ok, addr(UAS));
    let sent: Vec<Out> = std::iter::from_fn(|| uac.poll_transmit()).collect();
    assert!(sent[0]
        .payload
        .starts_with(b"ACK sip:uas@127.0.0.1:5002 SIP/2.0\r\n"));
    assert!(sent[1]
        .payload
        .starts_with(b"BYE sip:uas@127.0.0.1:5002 SIP/2.0\r\n"));
    let bye = Message::parse(sent[1].payload.clone()).unwrap();
    let done = edit::response_to(&bye, 200).build();
    uac.handle_datagram(answer_at + Duration::from_millis(1), done, addr(UAS));
    uac.handle_timeout(answer_at + Duration::from_millis(1));
    assert!(uac.is_done());
    uac.summary()
}

#[test]
fn setup_counts_as_successful_only_within_ten_seconds() {
    let quick = answer_at(Time::from_millis(9_990));
    assert_eq!((quick.successful, quick.failures.slow_setup), (1, 0));
    let p50 = quick.pdd_180.p50_ms.unwrap();
    assert!((5.0..5.01).contains(&p50), "{p50}");
    let slow = answer_at(Time::from_millis(10_010));
    assert_eq!((slow.successful, slow.failures.slow_setup), (0, 1));
    assert_eq!(slow.failed, 1);
    // Both calls still ended with BYE / 200.
    assert_eq!((quick.completed, slow.completed), (1, 1));
}

#[test]
fn ack_and_bye_follow_the_reversed_record_route() {
    let mut uac = Uac::new(uac_config(1.0, 1), Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = Message::parse(uac.poll_transmit().unwrap().payload).unwrap();
    let ok = edit::response_to(&invite, 200)
        .to_tag("t")
        .header("Record-Route", b"<sip:p2.example;lr>")
        .header("Record-Route", b"<sip:p1.example;lr>")
        .header("Contact", b"<sip:uas@127.0.0.1:5002>")
        .build();
    uac.handle_datagram(Time::from_millis(3), ok, addr(UAS));
    let ack = uac.poll_transmit().unwrap();
    // Through the next hop (the proxy), with the route set in reverse.
    assert_eq!(ack.to, addr(UAS));
    let text = std::str::from_utf8(&ack.payload).unwrap();
    let p1 = text.find("Route: <sip:p1.example;lr>\r\n").unwrap();
    let p2 = text.find("Route: <sip:p2.example;lr>\r\n").unwrap();
    assert!(p1 < p2, "{text}");
    assert!(text.contains("To: <sip:service@127.0.0.1:5002>;tag=t\r\n"));
    assert!(text.contains("CSeq: 1 ACK\r\n"));
}

#[test]
fn in_progress_limit_refuses_and_counts() {
    let mut cfg = uac_config(1000.0, 100);
    cfg.max_in_progress = 10;
    let mut uac = Uac::new(cfg, Time::ZERO);
    // Nobody answers: 10 calls in progress, 90 refused.
    uac.handle_timeout(Time::from_millis(200));
    let s = uac.summary();
    assert_eq!((s.offered, s.refused), (10, 90));
    assert_eq!(uac.in_progress(), 10);
}

#[test]
fn unanswered_calls_time_out_and_the_run_ends_by_itself() {
    let mut uac = Uac::new(uac_config(10.0, 5), Time::ZERO);
    let mut now = Time::ZERO;
    while let Some(t) = uac.poll_timeout() {
        now = t;
        uac.handle_timeout(now);
        while uac.poll_transmit().is_some() {}
    }
    assert!(uac.is_done());
    let s = uac.summary();
    assert_eq!((s.offered, s.failures.timeout, s.unfinished), (5, 5, 0));
    // Timer A: retransmissions at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s before Timer B at 32 s.
    assert_eq!(s.retransmissions_sent_by_type.invite, 5 * 6);
    assert!(
        now >= Time::from_secs(32) && now < Time::from_secs(33),
        "{now}"
    );
}

#[test]
fn a_provisional_overtaken_by_the_2xx_is_late_not_a_retransmission() {
    let mut uac = Uac::new(uac_config(1.0, 1), Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = Message::parse(uac.poll_transmit().unwrap().payload).unwrap();
    let ok = edit::response_to(&invite, 200).to_tag("t").build();
    uac.handle_datagram(Time::from_millis(2), ok.clone(), addr(UAS));
    let ringing = edit::response_to(&invite, 180).to_tag("t").build();
    uac.handle_datagram(Time::from_millis(3), ringing, addr(UAS));
    let s = uac.summary();
    assert_eq!((s.late_provisionals, s.retransmissions_received), (1, 0));
    // A second copy of the 2xx is a retransmission, and is ACKed again.
    while uac.poll_transmit().is_some() {}
    uac.handle_datagram(Time::from_millis(4), ok, addr(UAS));
    let again = uac.poll_transmit().unwrap();
    assert!(again.payload.starts_with(b"ACK "));
    let s = uac.summary();
    assert_eq!(s.retransmissions_received_by_type.ok_invite, 1);
    assert_eq!(s.retransmissions_sent_by_type.ack, 1);
}

#[test]
fn delay_percentiles_leave_out_the_calls_of_the_warm_up() {
    let mut cfg = uac_config(100.0, 100);
    cfg.delays_from = Duration::from_millis(500);
    let mut uac = Uac::new(cfg, Time::ZERO);
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(1),
        0,
        Time::from_secs(30),
    );
    let s = uac.summary();
    // Every call counts as offered and successful; only those started from 0.5 s on
    // (calls 50 to 99, 10 ms apart) enter the delay percentiles.
    assert_eq!((s.offered, s.successful), (100, 100));
    assert_eq!(
        (s.pdd_180.count, s.pdd_200.count, s.setup.count),
        (50, 50, 50)
    );
}

#[test]
fn over_tcp_messages_say_so_and_nothing_is_retransmitted() {
    let mut cfg = uac_config(200.0, 300);
    cfg.transport = Transport::Tcp;
    cfg.hold = Hold::Constant(Duration::from_millis(100));
    let mut uac = Uac::new(cfg, Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = uac.poll_transmit().unwrap();
    assert_eq!((invite.transport, invite.call), (Transport::Tcp, Some(0)));
    let text = std::str::from_utf8(&invite.payload).unwrap();
    assert!(
        text.contains("\r\nVia: SIP/2.0/TCP 127.0.0.1:5001;branch="),
        "{text}"
    );
    assert!(
        text.contains("\r\nContact: <sip:sluice@127.0.0.1:5001;transport=tcp>\r\n"),
        "{text}"
    );
    // The UAS answers over the transport the INVITE came on, with a Contact saying so.
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    uas.handle_message(Time::ZERO, invite.payload, Peer::tcp(addr(UAC)));
    let sent: Vec<Out> = std::iter::from_fn(|| uas.poll_transmit()).collect();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|o| o.transport == Transport::Tcp));
    let ok = std::str::from_utf8(&sent[2].payload).unwrap();
    assert!(
        ok.contains("Contact: <sip:uas@127.0.0.1:5002;transport=tcp>\r\n"),
        "{ok}"
    );

    let mut cfg = uac_config(200.0, 300);
    cfg.transport = Transport::Tcp;
    cfg.hold = Hold::Constant(Duration::from_millis(100));
    let mut uac = Uac::new(cfg, Time::ZERO);
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    run_pair_over(
        Transport::Tcp,
        &mut uac,
        &mut uas,
        Duration::from_millis(2),
        0,
        Time::from_secs(60),
    );
    assert!(uac.is_done());
    let s = uac.summary();
    assert_eq!(
        (s.offered, s.successful, s.completed, s.unfinished),
        (300, 300, 300, 0)
    );
    assert_eq!((s.retransmissions_sent, s.retransmissions_received), (0, 0));
    assert_eq!(uas.counts().retransmissions_sent, 0);
    // Every call's end is reported once, for the driver to close its connection.
    let mut ended: Vec<u64> = std::iter::from_fn(|| uac.poll_ended_call()).collect();
    ended.sort_unstable();
    assert_eq!(ended, (0..300).collect::<Vec<_>>());
}

#[test]
fn over_udp_no_call_ends_are_kept() {
    let mut uac = Uac::new(uac_config(100.0, 20), Time::ZERO);
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(1),
        0,
        Time::from_secs(30),
    );
    assert_eq!(uac.summary().completed, 20);
    assert!(uac.poll_ended_call().is_none());
}

#[test]
fn the_uas_retransmits_its_2xx_over_tcp_too() {
    let mut uas = Uas::new(UasConfig::new(addr(UAS)));
    let invite = Bytes::from_static(
        b"INVITE sip:service@127.0.0.1:5002 SIP/2.0\r\n\
          Via: SIP/2.0/TCP 127.0.0.1:5001;branch=z9hG4bK-1\r\n\
          Max-Forwards: 70\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:service@y>\r\n\
          Call-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
    );
    uas.handle_message(Time::ZERO, invite, Peer::tcp(addr(UAC)));
    while uas.poll_transmit().is_some() {}
    let mut times = Vec::new();
    while let Some(t) = uas.poll_timeout() {
        if t > Time::from_secs(4) {
            break;
        }
        uas.handle_timeout(t);
        while let Some(o) = uas.poll_transmit() {
            assert_eq!(o.transport, Transport::Tcp);
            times.push(t.as_millis());
        }
    }
    assert_eq!(times, [500, 1500, 3500]);
    assert_eq!(uas.counts().retransmissions_sent_by_type.ok_invite, 3);
}

#[test]
fn a_lost_connection_fails_the_calls_waiting_on_it() {
    let mut cfg = uac_config(1000.0, 3);
    cfg.transport = Transport::Tcp;
    let mut uac = Uac::new(cfg, Time::ZERO);
    uac.handle_timeout(Time::from_millis(5));
    let invites: Vec<Out> = std::iter::from_fn(|| uac.poll_transmit()).collect();
    assert_eq!(invites.len(), 3);
    // No Timer A over TCP: the next deadline is the end of the first second.
    assert_eq!(uac.poll_timeout(), Some(Time::from_secs(1)));
    uac.handle_connection_lost(Time::from_millis(6), Some(1));
    assert_eq!(uac.summary().failures.transport, 1);
    assert_eq!(uac.poll_ended_call(), Some(1));
    // A shared connection: every call waiting on it.
    uac.handle_connection_lost(Time::from_millis(7), None);
    let s = uac.summary();
    assert_eq!((s.failures.transport, s.failed, s.unfinished), (3, 3, 0));
    let ended: Vec<u64> = std::iter::from_fn(|| uac.poll_ended_call()).collect();
    assert_eq!(ended, [0, 2]);
    uac.handle_timeout(Time::from_millis(8));
    assert!(uac.is_done());
}

#[test]
fn a_local_port_of_zero_is_left_out_of_via_from_and_contact() {
    let mut cfg = UacConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), addr(UAS), 1.0);
    cfg.max_calls = Some(1);
    cfg.transport = Transport::Tcp;
    let mut uac = Uac::new(cfg, Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = uac.poll_transmit().unwrap();
    let text = std::str::from_utf8(&invite.payload).unwrap();
    assert!(
        text.contains("Via: SIP/2.0/TCP 127.0.0.1;branch="),
        "{text}"
    );
    assert!(
        text.contains("From: <sip:sluice@127.0.0.1>;tag=0"),
        "{text}"
    );
    assert!(
        text.contains("Contact: <sip:sluice@127.0.0.1;transport=tcp>"),
        "{text}"
    );
}

#[test]
fn bodies_of_the_size_asked_and_no_100_when_the_uas_sends_none() {
    let mut cfg = uac_config(100.0, 1);
    cfg.invite_body = sluice_sip::sdp::session_description(600, addr(UAC).ip());
    let mut uac = Uac::new(cfg, Time::ZERO);
    let mut uas_cfg = UasConfig::new(addr(UAS));
    uas_cfg.sends_trying = false;
    uas_cfg.answer_body = sluice_sip::sdp::session_description(700, addr(UAC).ip());
    let mut uas = Uas::new(uas_cfg);
    uac.handle_timeout(Time::ZERO);
    let invite = uac.poll_transmit().expect("the INVITE");
    let parsed = Message::parse(invite.payload.clone()).unwrap();
    assert_eq!(parsed.body().len(), 600);
    let text = std::str::from_utf8(&invite.payload).unwrap();
    assert!(text.contains("Content-Type: application/sdp\r\nContent-Length: 600\r\n\r\nv=0\r\n"));
    uas.handle_message(
        Time::ZERO,
        invite.payload,
        Peer {
            addr: addr(UAC),
            transport: Transport::Udp,
        },
    );
    let statuses: Vec<(u16, usize)> = std::iter::from_fn(|| uas.poll_transmit())
        .map(|o| {
            let m = Message::parse(o.payload).unwrap();
            (m.status().unwrap(), m.body().len())
        })
        .collect();
    assert_eq!(statuses, [(180, 0), (200, 700)]);
    // The whole call with both: three messages back per call (180, 200, BYE's 200).
    let mut cfg = uac_config(100.0, 50);
    cfg.invite_body = sluice_sip::sdp::session_description(600, addr(UAC).ip());
    let mut uac = Uac::new(cfg, Time::ZERO);
    let mut uas_cfg = UasConfig::new(addr(UAS));
    uas_cfg.sends_trying = false;
    let mut uas = Uas::new(uas_cfg);
    run_pair(
        &mut uac,
        &mut uas,
        Duration::from_millis(2),
        0,
        Time::from_secs(30),
    );
    let s = uac.summary();
    assert_eq!((s.successful, s.messages_received), (50, 150));
}

#[test]
fn a_2xx_repeated_after_the_call_ended_is_still_acked() {
    let mut cfg = uac_config(1.0, 1);
    cfg.hold = Hold::Constant(Duration::ZERO);
    let mut uac = Uac::new(cfg, Time::ZERO);
    uac.handle_timeout(Time::ZERO);
    let invite = Message::parse(uac.poll_transmit().unwrap().payload).unwrap();
    let ok = edit::response_to(&invite, 200).to_tag("t").build();
    uac.handle_datagram(Time::from_millis(2), ok.clone(), addr(UAS));
    uac.handle_timeout(Time::from_millis(2));
    let sent: Vec<Out> = std::iter::from_fn(|| uac.poll_transmit()).collect();
    assert!(sent[0].payload.starts_with(b"ACK "), "{sent:?}");
    let bye = sent
        .iter()
        .find(|o| o.payload.starts_with(b"BYE "))
        .expect("BYE at once with no holding time");
    let bye = Message::parse(bye.payload.clone()).unwrap();
    uac.handle_datagram(
        Time::from_millis(4),
        edit::response_to(&bye, 200).build(),
        addr(UAS),
    );
    assert_eq!(uac.summary().completed, 1);
    // The UAS did not get the first ACK and repeats its 2xx after the call ended: it is
    // ACKed again (RFC 3261 §13.2.2.4), not taken for an unknown call's response.
    uac.handle_datagram(Time::from_millis(500), ok, addr(UAS));
    let again = uac.poll_transmit().expect("the ACK again");
    assert_eq!(again.payload, sent[0].payload);
    let s = uac.summary();
    assert_eq!(s.unknown_call_responses, 0);
    assert_eq!(s.retransmissions_sent_by_type.ack, 1);
}
