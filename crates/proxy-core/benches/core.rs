//! Proxy core speed without sockets: whole calls (INVITE, 100, 180, 200, ACK, BYE, 200)
//! through `ProxyCore` with fabricated time, single thread. Prints calls/s and the core's
//! time per message; the socket path adds the system calls on top.
//!
//! `cargo bench -p sluice-proxy-core --bench core`

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use sluice_proxy_core::{ProxyConfig, ProxyCore};
use sluice_sip::Message;
use sluice_time::Time;

fn invite(call: u64) -> Bytes {
    Bytes::from(format!(
        "INVITE sip:bob@127.0.0.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bK{call}i\r\n\
         From: sipp <sip:sipp@127.0.0.1:5062>;tag={call}SIPpTag00\r\n\
         To: <sip:bob@127.0.0.1:5060>\r\nCall-ID: {call}-bench@127.0.0.1\r\nCSeq: 1 INVITE\r\n\
         Contact: <sip:sipp@127.0.0.1:5062>\r\nMax-Forwards: 70\r\nSubject: bench\r\n\
         Content-Length: 0\r\n\r\n"
    ))
}

fn in_dialog(method: &str, call: u64, cseq: u32) -> Bytes {
    Bytes::from(format!(
        "{method} sip:127.0.0.1:5070;transport=UDP SIP/2.0\r\n\
         Via: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bK{call}{method}\r\n\
         Route: <sip:127.0.0.1:5060;lr>\r\n\
         From: sipp <sip:sipp@127.0.0.1:5062>;tag={call}SIPpTag00\r\n\
         To: <sip:bob@127.0.0.1:5060>;tag={call}SIPpTag01\r\nCall-ID: {call}-bench@127.0.0.1\r\n\
         CSeq: {cseq} {method}\r\nContact: <sip:sipp@127.0.0.1:5062>\r\nMax-Forwards: 70\r\n\
         Content-Length: 0\r\n\r\n"
    ))
}

/// The UAS's response to a forwarded request (Via, Record-Route, From, To, Call-ID, CSeq).
fn respond(forwarded: &Bytes, status: &str) -> Bytes {
    let m = Message::parse(forwarded.clone()).unwrap();
    let mut out = format!("SIP/2.0 {status}\r\n");
    for h in m.headers() {
        let name = std::str::from_utf8(h.raw_name).unwrap();
        let value = std::str::from_utf8(h.value).unwrap();
        match name {
            "Via" | "Record-Route" | "From" | "Call-ID" | "CSeq" => {
                out.push_str(name);
                out.push_str(": ");
                out.push_str(value);
                out.push_str("\r\n");
            }
            "To" if value.contains("tag=") || status.starts_with("100") => {
                out.push_str("To: ");
                out.push_str(value);
                out.push_str("\r\n");
            }
            "To" => {
                out.push_str("To: ");
                out.push_str(value);
                out.push_str(";tag=uas\r\n");
            }
            _ => {}
        }
    }
    out.push_str("Contact: <sip:127.0.0.1:5070;transport=UDP>\r\nContent-Length: 0\r\n\r\n");
    Bytes::from(out)
}

fn main() {
    let uac: SocketAddr = "127.0.0.1:5062".parse().unwrap();
    let uas: SocketAddr = "127.0.0.1:5070".parse().unwrap();
    let me: SocketAddr = "127.0.0.1:5060".parse().unwrap();
    let config = ProxyConfig {
        listen: me,
        next_hop: Some(uas),
        ..ProxyConfig::default()
    };
    let mut core = ProxyCore::new(&config, me, Time::ZERO);
    // Responses are prepared from the first call's forwarded requests and reused with the
    // branch rewritten, so the loop measures the proxy, not the test's message building.
    let calls: u64 = 100_000;
    let mut msgs = 0u64;
    let mut busy = std::time::Duration::ZERO;
    let mut sent = Vec::new();
    for call in 0..calls {
        let now = Time::from_micros(call * 1000);
        let mut feed = |core: &mut ProxyCore, bytes: Bytes, from: SocketAddr, sent: &mut Vec<_>| {
            let t = Instant::now();
            core.handle_datagram(now, bytes, from);
            core.handle_timeout(now);
            sent.clear();
            while let Some(tx) = core.poll_transmit() {
                sent.push(tx);
            }
            busy += t.elapsed();
            msgs += 1;
        };
        feed(&mut core, invite(call), uac, &mut sent);
        let Some(fwd) = sent.iter().find(|t| t.to == uas).map(|t| t.payload.clone()) else {
            panic!("{sent:?} {:?}", core.stats(now));
        };
        let (trying, ringing, ok) = (
            respond(&fwd, "100 Trying"),
            respond(&fwd, "180 Ringing"),
            respond(&fwd, "200 OK"),
        );
        feed(&mut core, trying, uas, &mut sent);
        feed(&mut core, ringing, uas, &mut sent);
        feed(&mut core, ok, uas, &mut sent);
        feed(&mut core, in_dialog("ACK", call, 1), uac, &mut sent);
        feed(&mut core, in_dialog("BYE", call, 2), uac, &mut sent);
        let Some(bye) = sent.iter().find(|t| t.to == uas).map(|t| t.payload.clone()) else {
            panic!("{sent:?} {:?}", core.stats(now));
        };
        feed(&mut core, respond(&bye, "200 OK"), uas, &mut sent);
    }
    let s = core.stats(Time::from_micros(calls * 1000));
    assert_eq!(s.forwarded_requests, 2 * calls);
    println!(
        "proxy core: {calls} calls, {msgs} messages in {:.3} s of core time: {:.0} calls/s, {:.2} us/message",
        busy.as_secs_f64(),
        calls as f64 / busy.as_secs_f64(),
        busy.as_secs_f64() * 1e6 / msgs as f64
    );
}
