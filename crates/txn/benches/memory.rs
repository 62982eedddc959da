//! Memory per lingering transaction: what a proxy's transaction table costs per entry once
//! calls end. A proxy ending a call holds two: the BYE's server transaction, answered 200 and
//! kept in Completed for 64·T1 (Timer J, 32 s) over UDP, and the BYE's client transaction,
//! kept in Completed for T4 (Timer K, 5 s) after its 200. Each figure is the growth of the
//! process's resident memory over 200,000 of them divided by their number, so it includes the
//! table's slack. It sizes `max_transactions`: a proxy ending N calls/s holds about 37·N.
//! Run: `cargo bench -p sluice-txn --bench memory`.

use bytes::Bytes;
use sluice_sip::{edit, Message};
use sluice_time::Time;
use sluice_txn::{Config, Event, Peer, TransactionLayer};

const TRANSACTIONS: usize = 200_000;

/// Resident bytes, from /proc (Linux); `None` elsewhere.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split(' ').nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A BYE as a proxy receives it: two Vias, about 330 bytes.
fn bye(i: usize) -> Message {
    let text = format!(
        "BYE sip:bob@192.0.2.2:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 192.0.2.9:5060;branch=z9hG4bK{i:08}abcdef;rport\r\n\
         Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK{i:08}xyz;received=192.0.2.1\r\n\
         Max-Forwards: 69\r\n\
         To: <sip:bob@example.com>;tag=abc\r\n\
         From: <sip:alice@example.com>;tag=1928301774\r\n\
         Call-ID: {i}a84b4c76e66710@pc33\r\n\
         CSeq: 2 BYE\r\n\
         Content-Length: 0\r\n\r\n"
    );
    Message::parse(Bytes::from(text)).expect("the bench BYE parses")
}

/// BYE server transactions answered 200.
fn server_side(peer: Peer) -> TransactionLayer {
    let mut layer = TransactionLayer::new(Config {
        max_transactions: TRANSACTIONS,
        ..Config::default()
    });
    for i in 0..TRANSACTIONS {
        layer.handle_message(Time::ZERO, bye(i), peer);
        while layer.poll_transmit().is_some() {}
        while let Some(event) = layer.poll_event() {
            if let Event::Request { tx, request, .. } = event {
                let ok = Message::parse(edit::response_to(&request, 200).to_tag("x").build())
                    .expect("the 200 parses");
                layer
                    .respond(Time::ZERO, tx, &ok)
                    .expect("the BYE is answered");
            }
        }
        while layer.poll_transmit().is_some() {}
    }
    layer
}

/// BYE client transactions (the proxy's Via on top) that received their 200.
fn client_side(peer: Peer) -> TransactionLayer {
    let mut layer = TransactionLayer::new(Config {
        max_transactions: TRANSACTIONS,
        ..Config::default()
    });
    for i in 0..TRANSACTIONS {
        let request = bye(i);
        let ok = Message::parse(edit::response_to(&request, 200).to_tag("x").build())
            .expect("the 200 parses");
        layer
            .send_request(Time::ZERO, request, peer)
            .expect("the BYE is sent");
        while layer.poll_transmit().is_some() {}
        layer.handle_message(Time::ZERO, ok, peer);
        while layer.poll_event().is_some() {}
    }
    layer
}

/// Fills a transaction layer with lingering transactions of one kind.
type Fill = fn(Peer) -> TransactionLayer;

fn main() {
    let peer = Peer::udp("192.0.2.9:5060".parse().expect("address"));
    if resident_bytes().is_none() {
        eprintln!("no /proc/self/statm: this bench reads Linux's resident memory");
        return;
    }
    let cases: [(&str, Fill); 2] = [
        ("BYE server transactions (Timer J)", server_side),
        ("BYE client transactions (Timer K)", client_side),
    ];
    // Kept until both are measured, so the second does not reuse the first's freed pages.
    let mut kept = Vec::new();
    for (what, build) in cases {
        let before = resident_bytes().unwrap_or(0);
        let layer = build(peer);
        let after = resident_bytes().unwrap_or(before);
        println!(
            "{} lingering {what}: {} bytes each (resident memory growth / count)",
            layer.len(),
            after.saturating_sub(before) / TRANSACTIONS
        );
        kept.push(layer);
    }
}
