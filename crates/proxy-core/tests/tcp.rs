//! SIP over TCP in the sans-IO core (RFC 3261 §18): transports chosen per destination,
//! responses on the request's connection, no retransmission timers over TCP, and Shen and
//! Schulzrinne's (2010) connection split and smart forwarding, driven with fabricated time.

use std::fmt::Write as _;
use std::net::SocketAddr;

use bytes::Bytes;
use sluice_proxy_core::{
    ConnectionSplit, Lane, ProxyConfig, ProxyCore, TcpConfig, Transmit, Transport,
};
use sluice_sip::Message;
use sluice_time::Time;

const PROXY: &str = "192.0.2.1:5060";
/// The UAC's listening address (its Via sent-by) and the ephemeral end of its connection.
const UAC: &str = "192.0.2.10:5062";
const UAC_CONNECTION: &str = "192.0.2.10:40001";
const UAS: &str = "192.0.2.20:5070";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn config(tcp: TcpConfig) -> ProxyConfig {
    ProxyConfig {
        listen: addr(PROXY),
        next_hop: Some(addr(UAS)),
        tcp,
        ..ProxyConfig::default()
    }
}

fn towards_next_hop() -> TcpConfig {
    TcpConfig {
        to_next_hops: true,
        ..TcpConfig::default()
    }
}

fn drain(core: &mut ProxyCore) -> Vec<Transmit> {
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

fn over_tcp(core: &mut ProxyCore, now: Time, bytes: &str, from: &str) -> Vec<Transmit> {
    core.handle_stream_message(now, Bytes::copy_from_slice(bytes.as_bytes()), addr(from));
    core.handle_timeout(now);
    drain(core)
}

fn over_udp(core: &mut ProxyCore, now: Time, bytes: &str, from: &str) -> Vec<Transmit> {
    core.handle_datagram(now, Bytes::copy_from_slice(bytes.as_bytes()), addr(from));
    core.handle_timeout(now);
    drain(core)
}

fn text(t: &Transmit) -> &str {
    std::str::from_utf8(&t.payload).unwrap()
}

fn status_of(t: &Transmit) -> Option<u16> {
    Message::parse(t.payload.clone()).unwrap().status()
}

fn invite(call: &str, transport: &str) -> String {
    format!(
        "INVITE sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/{transport} 192.0.2.10:5062;branch=z9hG4bK{call}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 INVITE\r\n\
         Contact: <sip:alice@192.0.2.10:5062;transport=tcp>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// The UAS's answer to a request the proxy forwarded.
fn answer(forwarded: &Transmit, status: u16) -> String {
    let m = Message::parse(forwarded.payload.clone()).unwrap();
    let mut out = format!("SIP/2.0 {status} Whatever\r\n");
    for h in m.headers() {
        let name = std::str::from_utf8(h.raw_name).unwrap();
        let value = String::from_utf8_lossy(h.value);
        if ["Via", "Record-Route", "From", "Call-ID", "CSeq"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
        {
            let _ = write!(out, "{name}: {value}\r\n");
        } else if name.eq_ignore_ascii_case("To") {
            let tag = if status > 100 { ";tag=b1" } else { "" };
            let _ = write!(out, "To: {value}{tag}\r\n");
        }
    }
    if status / 100 == 2 {
        out.push_str("Contact: <sip:bob@192.0.2.20:5070;transport=tcp>\r\n");
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    out
}

fn bye(call: &str) -> String {
    format!(
        "BYE sip:bob@192.0.2.20:5070;transport=tcp SIP/2.0\r\n\
         Via: SIP/2.0/TCP 192.0.2.10:5062;branch=z9hG4bKbye{call}\r\n\
         Route: <sip:192.0.2.1:5060;lr>\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>;tag=b1\r\n\
         Call-ID: {call}\r\n\
         CSeq: 2 BYE\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

#[test]
fn a_call_over_tcp_both_ways_uses_the_connections_and_never_retransmits() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    let out = over_tcp(&mut core, Time::ZERO, &invite("t1", "TCP"), UAC_CONNECTION);
    assert_eq!(out.len(), 2, "{out:?}");
    // 100 Trying goes back on the connection the INVITE came in on.
    let trying = &out[0];
    assert_eq!(
        (trying.to, trying.transport, status_of(trying)),
        (addr(UAC_CONNECTION), Transport::Tcp, Some(100))
    );
    // The INVITE goes to the next hop over TCP, with a TCP Via.
    let fwd = &out[1];
    assert_eq!(
        (fwd.to, fwd.transport, fwd.lane),
        (addr(UAS), Transport::Tcp, Lane::Shared)
    );
    assert!(
        text(fwd).contains("\r\nVia: SIP/2.0/TCP 192.0.2.1:5060;branch=z9hG4bKsl1."),
        "{}",
        text(fwd)
    );
    // RFC 3261 §18.2.1: the sent-by host is the connection's, so no `received`; responses
    // go back on the connection, whatever port the Via names.
    assert!(text(fwd).contains("Via: SIP/2.0/TCP 192.0.2.10:5062;branch=z9hG4bKt1\r\n"));

    // Over TCP Timer A never fires: nothing is resent however long the UAS takes.
    core.handle_timeout(Time::from_secs(10));
    assert!(drain(&mut core).is_empty());

    let ok = over_tcp(&mut core, Time::from_secs(10), &answer(fwd, 200), UAS);
    assert_eq!(ok.len(), 1);
    assert_eq!(
        (ok[0].to, ok[0].transport, status_of(&ok[0])),
        (addr(UAC_CONNECTION), Transport::Tcp, Some(200))
    );

    // The BYE follows the route to the callee's Contact, which asks for TCP.
    let out = over_tcp(&mut core, Time::from_secs(11), &bye("t1"), UAC_CONNECTION);
    let fwd_bye = out
        .iter()
        .find(|t| text(t).starts_with("BYE "))
        .expect("BYE forwarded");
    assert_eq!((fwd_bye.to, fwd_bye.transport), (addr(UAS), Transport::Tcp));
    // Over TCP the BYE's server transaction ends at its final response (Timer J = 0).
    let done = over_tcp(&mut core, Time::from_secs(11), &answer(fwd_bye, 200), UAS);
    assert_eq!(status_of(&done[0]), Some(200));
    core.handle_timeout(Time::from_secs(12));
    assert!(drain(&mut core).is_empty());
    let stats = core.stats(Time::from_secs(12));
    assert_eq!(stats.retransmissions_sent(), 0);
}

#[test]
fn udp_in_tcp_out_keeps_each_side_on_its_own_transport() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    let out = over_udp(&mut core, Time::ZERO, &invite("u1", "UDP"), UAC);
    let trying = out.iter().find(|t| status_of(t) == Some(100)).unwrap();
    assert_eq!((trying.to, trying.transport), (addr(UAC), Transport::Udp));
    let fwd = out.iter().find(|t| t.to == addr(UAS)).unwrap();
    assert_eq!(fwd.transport, Transport::Tcp);
    assert!(text(fwd).contains("Via: SIP/2.0/TCP 192.0.2.1:5060;"));
    // No Timer A towards the TCP next hop, though the caller is on UDP.
    core.handle_timeout(Time::from_millis(1600));
    assert!(drain(&mut core).is_empty());
    let ringing = over_tcp(&mut core, Time::from_secs(2), &answer(fwd, 180), UAS);
    assert_eq!(
        (ringing[0].to, ringing[0].transport),
        (addr(UAC), Transport::Udp)
    );
}

#[test]
fn without_tcp_to_next_hops_requests_still_go_over_udp_and_retransmit() {
    let mut core = ProxyCore::new(&config(TcpConfig::default()), addr(PROXY), Time::ZERO);
    let out = over_tcp(&mut core, Time::ZERO, &invite("u2", "TCP"), UAC_CONNECTION);
    let fwd = out.iter().find(|t| t.to == addr(UAS)).unwrap().clone();
    assert_eq!(fwd.transport, Transport::Udp);
    assert!(text(&fwd).contains("Via: SIP/2.0/UDP 192.0.2.1:5060;"));
    core.handle_timeout(Time::from_millis(500));
    let again = drain(&mut core);
    assert_eq!(again.len(), 1, "Timer A over UDP");
    assert!(again[0].retransmission);
}

/// Smart forwarding (Shen and Schulzrinne 2010, Fig. 11): a new INVITE is rejected while
/// the connection to the next hop has unsent bytes; everything else goes on.
#[test]
fn smart_forwarding_rejects_new_invites_only_while_the_send_queue_is_not_empty() {
    let tcp = TcpConfig {
        smart_forwarding: true,
        ..towards_next_hop()
    };
    let mut core = ProxyCore::new(&config(tcp), addr(PROXY), Time::ZERO);
    let out = over_tcp(&mut core, Time::ZERO, &invite("s1", "TCP"), UAC_CONNECTION);
    let first = out.iter().find(|t| t.to == addr(UAS)).unwrap().clone();
    let ok = over_tcp(&mut core, Time::ZERO, &answer(&first, 200), UAS);
    assert_eq!(status_of(&ok[0]), Some(200));

    core.handle_send_queue(addr(UAS), Lane::Shared, 1);
    let out = over_tcp(
        &mut core,
        Time::from_millis(1),
        &invite("s2", "TCP"),
        UAC_CONNECTION,
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].to, out[0].transport, status_of(&out[0])),
        (addr(UAC_CONNECTION), Transport::Tcp, Some(503))
    );
    assert_eq!(
        core.stats(Time::from_millis(1)).rejected_smart_forwarding,
        1
    );
    // An admitted call's BYE is forwarded whatever the queue holds.
    let out = over_tcp(&mut core, Time::from_millis(2), &bye("s1"), UAC_CONNECTION);
    assert!(out
        .iter()
        .any(|t| t.to == addr(UAS) && text(t).starts_with("BYE ")));

    core.handle_send_queue(addr(UAS), Lane::Shared, 0);
    let out = over_tcp(
        &mut core,
        Time::from_millis(3),
        &invite("s3", "TCP"),
        UAC_CONNECTION,
    );
    assert!(out.iter().any(|t| t.to == addr(UAS)), "{out:?}");
    assert_eq!(
        core.stats(Time::from_millis(3)).rejected_smart_forwarding,
        1
    );
}

#[test]
fn smart_forwarding_is_off_unless_configured() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    core.handle_send_queue(addr(UAS), Lane::Shared, 10_000);
    let out = over_tcp(&mut core, Time::ZERO, &invite("n1", "TCP"), UAC_CONNECTION);
    assert!(out.iter().any(|t| t.to == addr(UAS)));
    assert_eq!(core.stats(Time::ZERO).rejected_smart_forwarding, 0);
}

/// ECS (Fig. 9–10): new INVITEs take a connection of their own, and smart forwarding
/// watches that one.
#[test]
fn explicit_connection_split_puts_invites_on_their_own_lane() {
    let tcp = TcpConfig {
        smart_forwarding: true,
        connection_split: ConnectionSplit::Ecs,
        ..towards_next_hop()
    };
    let mut core = ProxyCore::new(&config(tcp), addr(PROXY), Time::ZERO);
    // The shared connection being backed up does not stop INVITEs under ECS.
    core.handle_send_queue(addr(UAS), Lane::Shared, 5_000);
    let out = over_tcp(&mut core, Time::ZERO, &invite("e1", "TCP"), UAC_CONNECTION);
    let fwd = out.iter().find(|t| t.to == addr(UAS)).unwrap().clone();
    assert_eq!(fwd.lane, Lane::Invites);
    let _ = over_tcp(&mut core, Time::ZERO, &answer(&fwd, 200), UAS);
    let out = over_tcp(&mut core, Time::from_millis(1), &bye("e1"), UAC_CONNECTION);
    let fwd_bye = out.iter().find(|t| text(t).starts_with("BYE ")).unwrap();
    assert_eq!(fwd_bye.lane, Lane::Shared);

    core.handle_send_queue(addr(UAS), Lane::Invites, 1);
    let out = over_tcp(
        &mut core,
        Time::from_millis(2),
        &invite("e2", "TCP"),
        UAC_CONNECTION,
    );
    assert_eq!(status_of(&out[0]), Some(503));
}

/// A stream driver reads only while the queue has room, so TCP's flow control pushes back
/// where a datagram would be dropped.
#[test]
fn has_room_follows_the_queue_and_the_emulated_processor() {
    let cfg = ProxyConfig {
        queue_capacity: 2,
        cost_forward_us: 10_000.0,
        ..config(towards_next_hop())
    };
    let mut core = ProxyCore::new(&cfg, addr(PROXY), Time::ZERO);
    // The driver reads while there is room: two INVITEs fill the queue at once.
    let mut read = 0;
    while core.has_room(Time::ZERO) {
        read += 1;
        core.handle_stream_message(
            Time::ZERO,
            Bytes::from(invite(&format!("r{read}"), "TCP")),
            addr(UAC_CONNECTION),
        );
        assert!(read < 10, "has_room never turned false");
    }
    assert_eq!(read, 2);
    // After one service of 10 ms one place is free again, and nothing was dropped.
    assert!(!core.has_room(Time::from_millis(9)));
    assert!(core.has_room(Time::from_millis(10)));
    assert_eq!(core.stats(Time::from_millis(10)).dropped_queue_full, 0);
}

/// The hop-by-hop control knows a TCP neighbour by its connection's IP address and the
/// listening port in its Via, not by the connection's ephemeral port.
#[test]
fn feedback_reaches_a_neighbour_that_connects_over_tcp() {
    let mut cfg = config(towards_next_hop());
    cfg.overload = sluice_proxy_core::OverloadConfig {
        role: sluice_proxy_core::HopRole::Re,
        neighbours: vec![addr(UAC)],
        ..sluice_proxy_core::OverloadConfig::default()
    };
    cfg.control.algorithm = sluice_control::Algorithm::RateAbs;
    let mut core = ProxyCore::new(&cfg, addr(PROXY), Time::ZERO);
    let offer = invite("f1", "TCP").replace(
        ";branch=z9hG4bKf1",
        ";branch=z9hG4bKf1;oc;oc-algo=\"rate,loss\"",
    );
    let out = over_tcp(&mut core, Time::ZERO, &offer, UAC_CONNECTION);
    let trying = out.iter().find(|t| status_of(t) == Some(100)).unwrap();
    assert!(
        text(trying).contains(";oc-seq="),
        "the 100 Trying to a configured neighbour carries feedback: {}",
        text(trying)
    );
    // The same request from an unconfigured listening port gets none.
    let stranger = offer
        .replace(
            "192.0.2.10:5062;branch=z9hG4bKf1",
            "192.0.2.10:5099;branch=z9hG4bKf2",
        )
        .replace("Call-ID: f1", "Call-ID: f2");
    let out = over_tcp(&mut core, Time::ZERO, &stranger, "192.0.2.10:40002");
    let trying = out.iter().find(|t| status_of(t) == Some(100)).unwrap();
    assert!(!text(trying).contains("oc-seq"), "{}", text(trying));
}

#[test]
fn ecs_bm_minimises_the_buffers_of_connections_that_begin_with_an_invite_only() {
    let ecs_bm = TcpConfig {
        invite_connection_receive_buffer: 2048,
        listen_receive_buffer: 32_768,
        ..TcpConfig::default()
    };
    // Every accepted connection starts small: the kernel sizes the window for it then.
    assert_eq!(ecs_bm.accepted_receive_buffer(), 2048);
    let invite = invite("ecs-1", "TCP");
    assert_eq!(
        ecs_bm.accepted_receive_buffer_after(invite.as_bytes()),
        2048
    );
    assert_eq!(
        ecs_bm.accepted_receive_buffer_after(bye("ecs-1").as_bytes()),
        32_768
    );
    let kernel_default = TcpConfig {
        invite_connection_receive_buffer: 2048,
        ..TcpConfig::default()
    };
    assert_eq!(
        kernel_default.accepted_receive_buffer_after(b"SIP/2.0 200 OK\r\n"),
        64 * 1024
    );
    // Without it, the listener's buffer as configured (0: the kernel's).
    assert_eq!(TcpConfig::default().accepted_receive_buffer(), 0);
}

#[test]
fn a_repeated_2xx_after_the_transaction_ended_goes_back_on_the_senders_connection() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    // The upstream proxy asked for rport (RFC 3581), as this one does over TCP.
    let request = invite("r1", "TCP").replace("branch=z9hG4bKr1", "branch=z9hG4bKr1;rport");
    let out = over_tcp(&mut core, Time::ZERO, &request, UAC_CONNECTION);
    let fwd = out
        .iter()
        .find(|t| text(t).starts_with("INVITE "))
        .expect("INVITE forwarded");
    // Its own Via asks the next hop for the same.
    assert!(
        text(fwd).contains(";rport\r\n"),
        "the proxy's Via asks for rport: {}",
        text(fwd)
    );
    assert!(
        text(fwd).contains(
            "Via: SIP/2.0/TCP 192.0.2.10:5062;branch=z9hG4bKr1;received=192.0.2.10;rport=40001\r\n"
        ),
        "rport filled with the connection's port (and received with it, RFC 3581 §4): {}",
        text(fwd)
    );
    let ok = answer(fwd, 200);
    let first = over_tcp(&mut core, Time::from_millis(10), &ok, UAS);
    assert_eq!(first[0].to, addr(UAC_CONNECTION));
    // The 2xx ended the client transaction; the UAS repeats it (no ACK yet). Relayed by
    // the Via alone, it goes to the connection's port, not to the listening port 5062.
    let repeated = over_tcp(&mut core, Time::from_millis(510), &ok, UAS);
    assert_eq!(repeated.len(), 1, "{repeated:?}");
    assert_eq!(
        (
            repeated[0].to,
            repeated[0].transport,
            status_of(&repeated[0])
        ),
        (addr(UAC_CONNECTION), Transport::Tcp, Some(200))
    );
}

/// The callee hangs up: a BYE from the UAS towards the caller's Contact.
fn bye_from_callee(call: &str) -> String {
    format!(
        "BYE sip:alice@192.0.2.10:5062;transport=tcp SIP/2.0\r\n\
         Via: SIP/2.0/TCP 192.0.2.20:5070;branch=z9hG4bKub{call}\r\n\
         Route: <sip:192.0.2.1:5060;lr>\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:bob@192.0.2.1>;tag=b1\r\n\
         To: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 BYE\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// Sets up a call whose INVITE came over the caller's connection with `via_params` on
/// its Via, and returns where the callee's BYE is sent.
fn callee_bye_goes_to(
    core: &mut ProxyCore,
    call: &str,
    via_host: &str,
    via_params: &str,
) -> SocketAddr {
    // Each call a second after the last.
    let start = core.stats(Time::ZERO).forwarded_requests;
    let at = |ms: u64| Time::from_millis(1_000 * start + ms);
    let request = invite(call, "TCP").replace(
        &format!("192.0.2.10:5062;branch=z9hG4bK{call}"),
        &format!("{via_host}:5062;branch=z9hG4bK{call}{via_params}"),
    );
    let out = over_tcp(core, at(0), &request, UAC_CONNECTION);
    let fwd = out
        .iter()
        .find(|t| text(t).starts_with("INVITE "))
        .expect("INVITE forwarded");
    over_tcp(core, at(10), &answer(fwd, 200), UAS);
    let out = over_tcp(core, at(20), &bye_from_callee(call), UAS);
    let bye = out
        .iter()
        .find(|t| text(t).starts_with("BYE "))
        .expect("BYE forwarded");
    assert_eq!(bye.transport, Transport::Tcp);
    bye.to
}

#[test]
fn a_peer_that_asks_for_connection_reuse_gets_its_requests_on_its_connection() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    // Without `alias`, a request to the caller opens a connection to its sent-by.
    assert_eq!(
        callee_bye_goes_to(&mut core, "c0", "192.0.2.10", ""),
        addr(UAC)
    );
    // RFC 5923: with `alias`, it goes back on the connection the caller opened.
    let to = callee_bye_goes_to(&mut core, "c1", "192.0.2.10", ";alias");
    assert_eq!(to, addr(UAC_CONNECTION));
    assert_eq!(core.stats(Time::ZERO).tcp_aliases, 1);
    // Once that connection is gone, requests open one of their own again.
    core.handle_connection_closed(addr(UAC_CONNECTION));
    assert_eq!(core.stats(Time::ZERO).tcp_aliases, 0);
    assert_eq!(
        callee_bye_goes_to(&mut core, "c2", "192.0.2.10", ""),
        addr(UAC)
    );
}

#[test]
fn an_alias_for_an_address_other_than_the_connections_own_is_refused() {
    let mut core = ProxyCore::new(&config(towards_next_hop()), addr(PROXY), Time::ZERO);
    // A peer at 192.0.2.10 claims 192.0.2.99:5062, someone else's address: traffic for it
    // must not be drawn onto this connection. The Contact still names 192.0.2.10:5062.
    let to = callee_bye_goes_to(&mut core, "h1", "192.0.2.99", ";alias");
    assert_eq!(to, addr(UAC));
    let stats = core.stats(Time::ZERO);
    assert_eq!((stats.tcp_aliases, stats.tcp_aliases_refused), (0, 1));
    // And an operator may turn aliases off altogether.
    let mut core = ProxyCore::new(
        &config(TcpConfig {
            accept_aliases: false,
            ..towards_next_hop()
        }),
        addr(PROXY),
        Time::ZERO,
    );
    assert_eq!(
        callee_bye_goes_to(&mut core, "h2", "192.0.2.10", ";alias"),
        addr(UAC)
    );
}

#[test]
fn the_proxy_asks_for_connection_reuse_when_configured() {
    for (alias, asked) in [(false, false), (true, true)] {
        let tcp = TcpConfig {
            alias,
            ..towards_next_hop()
        };
        let mut core = ProxyCore::new(&config(tcp), addr(PROXY), Time::ZERO);
        let out = over_tcp(&mut core, Time::ZERO, &invite("a1", "TCP"), UAC_CONNECTION);
        let fwd = text(&out[out.len() - 1]).to_owned();
        let top_via = fwd.lines().find(|l| l.starts_with("Via: ")).unwrap();
        assert_eq!(top_via.ends_with(";rport;alias"), asked, "{top_via}");
    }
}
