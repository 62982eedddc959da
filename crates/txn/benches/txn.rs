//! One INVITE transaction, client and server side, through two transaction tables (a UAC's
//! and a UAS's), per iteration: ns per transaction is the figure to watch.
//!
//! * `invite_2xx`: INVITE → 100 → 200, the INVITE server transaction ends on the 2xx, the
//!   client on receiving it; the end-to-end ACK comes back as a stray ACK.
//! * `invite_486_timers`: INVITE → 486 → ACK (built by the client transaction, absorbed by
//!   the server one), then the clock jumps 33 s so that Timers I and D fire and both end.
//! * `invite_2xx_100k_live`: as `invite_2xx` with 100 000 other transactions in each table
//!   (their timers armed), to show that hashing and the timer table do not degrade.
//!
//! Messages are parsed once up front and cloned per iteration (a clone copies the header index
//! and bumps the buffer's refcount), so codec cost is excluded. Run:
//! `cargo bench -p sluice-txn --bench txn`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_sip::{edit, Message};
use sluice_time::Time;
use sluice_txn::{Config, Event, Peer, TransactionLayer};

fn request(method: &str, branch: &str, call: &str) -> Message {
    let text = format!(
        "{method} sip:bob@biloxi.example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP pc33.atlanta.example.com:5060;branch={branch};rport\r\n\
         Max-Forwards: 70\r\n\
         To: Bob <sip:bob@biloxi.example.com>\r\n\
         From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
         Call-ID: {call}\r\n\
         CSeq: 314159 {method}\r\n\
         Contact: <sip:alice@pc33.atlanta.example.com:5060>\r\n\
         Content-Length: 0\r\n\r\n"
    );
    Message::parse(Bytes::from(text)).expect("bench request parses")
}

fn response(req: &Message, status: u16) -> Message {
    Message::parse(edit::response_to(req, status).to_tag("a6c85cf").build())
        .expect("bench response parses")
}

struct Msgs {
    invite: Message,
    trying: Message,
    ok: Message,
    busy: Message,
    ack_2xx: Message,
}

fn msgs() -> Msgs {
    let invite = request("INVITE", "z9hG4bK776asdhds", "a84b4c76e66710@pc33");
    Msgs {
        trying: response(&invite, 100),
        ok: response(&invite, 200),
        busy: response(&invite, 486),
        ack_2xx: request("ACK", "z9hG4bK776asdhds-ack", "a84b4c76e66710@pc33"),
        invite,
    }
}

const UAC: Peer = Peer::udp(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
    5060,
));
const UAS: Peer = Peer::udp(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2)),
    5060,
));

fn drain(layer: &mut TransactionLayer) -> Option<sluice_txn::ServerTxId> {
    let mut server = None;
    while let Some(t) = layer.poll_transmit() {
        black_box(t);
    }
    while let Some(e) = layer.poll_event() {
        if let Event::Request { tx, .. } = e {
            server = Some(tx);
        } else {
            black_box(e);
        }
    }
    server
}

/// INVITE → 100 → 200 → ACK (stray at the UAS).
fn invite_2xx(uac: &mut TransactionLayer, uas: &mut TransactionLayer, m: &Msgs, now: Time) {
    let _ = uac.send_request(now, m.invite.clone(), UAS);
    drain(uac);
    uas.handle_message(now, m.invite.clone(), UAC);
    let tx = drain(uas).expect("server transaction");
    let _ = uas.respond(now, tx, &m.trying);
    let _ = uas.respond(now, tx, &m.ok);
    drain(uas);
    uac.handle_message(now, m.trying.clone(), UAS);
    uac.handle_message(now, m.ok.clone(), UAS);
    drain(uac);
    uas.handle_message(now, m.ack_2xx.clone(), UAC);
    drain(uas);
}

/// INVITE → 486 → ACK, then Timers D and I run out.
fn invite_486(uac: &mut TransactionLayer, uas: &mut TransactionLayer, m: &Msgs, now: Time) -> Time {
    let _ = uac.send_request(now, m.invite.clone(), UAS);
    drain(uac);
    uas.handle_message(now, m.invite.clone(), UAC);
    let tx = drain(uas).expect("server transaction");
    let _ = uas.respond(now, tx, &m.busy);
    drain(uas);
    uac.handle_message(now, m.busy.clone(), UAS);
    let mut ack = None;
    while let Some(t) = uac.poll_transmit() {
        ack = Some(t.payload);
    }
    drain(uac);
    let ack = Message::parse(ack.expect("ACK")).expect("ACK parses");
    uas.handle_message(now, ack, UAC);
    drain(uas);
    let later = now + Duration::from_secs(33);
    uac.handle_timeout(later);
    uas.handle_timeout(later);
    drain(uac);
    drain(uas);
    later
}

fn prefill(uac: &mut TransactionLayer, uas: &mut TransactionLayer, n: usize) {
    for i in 0..n {
        let inv = request("INVITE", &format!("z9hG4bKfill{i}"), &format!("fill{i}"));
        let _ = uac.send_request(Time::ZERO, inv.clone(), UAS);
        uas.handle_message(Time::ZERO, inv.clone(), UAC);
        if let Some(tx) = drain(uas) {
            let _ = uas.respond(Time::ZERO, tx, &response(&inv, 486));
        }
        drain(uac);
        drain(uas);
    }
}

fn bench(c: &mut Criterion) {
    let m = msgs();
    let mut g = c.benchmark_group("txn");
    g.throughput(Throughput::Elements(1));

    g.bench_function("invite_2xx", |b| {
        let mut uac = TransactionLayer::new(Config::default());
        let mut uas = TransactionLayer::new(Config::default());
        let mut now = Time::ZERO;
        b.iter(|| {
            now += Duration::from_micros(10);
            invite_2xx(&mut uac, &mut uas, &m, now);
        });
        assert!(uac.is_empty() && uas.is_empty());
    });

    g.bench_function("invite_486_timers", |b| {
        let mut uac = TransactionLayer::new(Config::default());
        let mut uas = TransactionLayer::new(Config::default());
        let mut now = Time::ZERO;
        b.iter(|| {
            now = invite_486(&mut uac, &mut uas, &m, now);
        });
        assert!(uac.is_empty() && uas.is_empty());
    });

    g.bench_function("invite_2xx_100k_live", |b| {
        let mut uac = TransactionLayer::new(Config::default());
        let mut uas = TransactionLayer::new(Config::default());
        prefill(&mut uac, &mut uas, 100_000);
        let mut now = Time::ZERO;
        b.iter(|| {
            // The prefilled transactions' timers are due from 0.5 s: stay below that.
            now += Duration::from_nanos(1);
            invite_2xx(&mut uac, &mut uas, &m, now);
        });
        assert_eq!((uac.len(), uas.len()), (100_000, 100_000));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
