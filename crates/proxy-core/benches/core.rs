//! Proxy core speed without sockets: one whole call (INVITE, 100, 180, 200, ACK, BYE, 200)
//! through `ProxyCore` per iteration, with fabricated time (1 ms between calls, so the
//! transaction tables hold what a run at 1,000 calls/s holds), single thread. Criterion
//! reports the core's time per call: the user-space share of what `sluice bench proxy`
//! measures as CPU per call, which adds the kernel's socket work.
//!
//! `cargo bench -p sluice-proxy-core --bench core`

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
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

/// A proxy between one UAC and one UAS, and the number of the next call through it.
struct Bench {
    core: ProxyCore,
    uac: SocketAddr,
    uas: SocketAddr,
    call: u64,
    sent: Vec<sluice_proxy_core::Transmit>,
}

impl Bench {
    fn new() -> Bench {
        let uac: SocketAddr = "127.0.0.1:5062".parse().unwrap();
        let uas: SocketAddr = "127.0.0.1:5070".parse().unwrap();
        let me: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        let config = ProxyConfig {
            listen: me,
            next_hop: Some(uas),
            ..ProxyConfig::default()
        };
        Bench {
            core: ProxyCore::new(&config, me, Time::ZERO),
            uac,
            uas,
            call: 0,
            sent: Vec::new(),
        }
    }

    /// One message into the core and everything it sends out; returns the core's time.
    fn feed(&mut self, now: Time, bytes: Bytes, from: SocketAddr) -> Duration {
        let t = Instant::now();
        self.core.handle_datagram(now, bytes, from);
        self.core.handle_timeout(now);
        self.sent.clear();
        while let Some(tx) = self.core.poll_transmit() {
            self.sent.push(tx);
        }
        t.elapsed()
    }

    fn forwarded_to_uas(&mut self, now: Time) -> Bytes {
        let Some(payload) = self
            .sent
            .iter()
            .find(|t| t.to == self.uas)
            .map(|t| t.payload.clone())
        else {
            panic!("{:?} {:?}", self.sent, self.core.stats(now));
        };
        payload
    }

    /// One whole call; returns the core's time for it, not the time spent building the
    /// UAS's responses from what the proxy forwarded.
    fn call(&mut self) -> Duration {
        let call = self.call;
        self.call += 1;
        let now = Time::from_micros(call * 1000);
        let (uac, uas) = (self.uac, self.uas);
        let mut busy = self.feed(now, invite(call), uac);
        let forwarded = self.forwarded_to_uas(now);
        for status in ["100 Trying", "180 Ringing", "200 OK"] {
            busy += self.feed(now, respond(&forwarded, status), uas);
        }
        busy += self.feed(now, in_dialog("ACK", call, 1), uac);
        busy += self.feed(now, in_dialog("BYE", call, 2), uac);
        let bye = self.forwarded_to_uas(now);
        busy + self.feed(now, respond(&bye, "200 OK"), uas)
    }
}

fn whole_calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("proxy_core");
    group.throughput(Throughput::Elements(1));
    let mut bench = Bench::new();
    // Past the first timers' expiry, so the tables are at their steady size.
    for _ in 0..40_000 {
        bench.call();
    }
    group.bench_function("call", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| bench.call()).sum());
    });
    group.finish();
    let s = bench.core.stats(Time::from_micros(bench.call * 1000));
    assert_eq!(
        s.forwarded_requests,
        2 * bench.call,
        "every INVITE and BYE forwarded"
    );
}

criterion_group!(benches, whole_calls);
criterion_main!(benches);
