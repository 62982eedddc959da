//! Parsing and forwarding a typical INVITE (about 900 bytes with its SDP), against `rsip`.
//!
//! Run: `cargo bench -p sluice-sip --bench parse`. Besides criterion's report it prints the
//! admission-parse speed-up over rsip measured in the same run.
//!
//! Measured on 2-core "AMD EPYC" VMs with AVX-512, idle: admission parse 186-214 ns (the
//! target is at most 250 ns), full parse + validate 1.12-1.20 µs, parse + edit + serialize
//! 451-527 ns, edit + serialize 292-320 ns, rsip 2.30-2.57 µs: the admission parse is 12 to 13
//! times faster than rsip (the target is at least 8). On an older VM kind without AVX-512 the
//! admission parse took 304 ns (rsip 11.6 times slower) and the 250 ns target was not met.
//!
//! Under callgrind the admission parse is about 4,260 instructions. The header scan costs
//! about 190 instructions a line, of which the colon and line-end searches are about 60 and the
//! rest is a dozen small steps (name classification, folding test, trims, limits, record). A
//! scan of 64-byte blocks into LF and colon bitmasks was tried and costs as many instructions
//! as the two searches at these line lengths (with SWAR instead of SSE2, twice as many), so it
//! was not kept.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, Criterion, Throughput};
use sluice_sip::edit::{self, RequestEdits};
use sluice_sip::Message;

const INVITE: &str = "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com:5060;branch=z9hG4bK776asdhds;rport\r\n\
Max-Forwards: 70\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
CSeq: 314159 INVITE\r\n\
Contact: <sip:alice@pc33.atlanta.example.com:5060;transport=udp>\r\n\
Allow: INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, NOTIFY, MESSAGE, SUBSCRIBE, INFO, UPDATE\r\n\
Supported: replaces, timer, 100rel\r\n\
User-Agent: sluice-bench/0.1\r\n\
Session-Expires: 1800\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 305\r\n\
\r\n\
v=0\r\n\
o=alice 2890844526 2890844526 IN IP4 pc33.atlanta.example.com\r\n\
s=Session SDP\r\n\
c=IN IP4 pc33.atlanta.example.com\r\n\
t=0 0\r\n\
m=audio 49172 RTP/AVP 0 8 97 101\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:97 iLBC/8000\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-15\r\n\
a=ptime:20\r\n\
a=sendrecv\r\n\
a=rtcp:49173\r\n";

fn edits() -> RequestEdits<'static> {
    RequestEdits {
        push_via: Some(b"SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKproxy1"),
        top_via_params: &[("received", Some("192.0.2.99")), ("rport", Some("5060"))],
        decrement_max_forwards: true,
        record_route: Some(b"<sip:192.0.2.1;lr>"),
        pop_route: true,
        ..RequestEdits::default()
    }
}

fn benches(c: &mut Criterion) {
    let bytes = Bytes::from_static(INVITE.as_bytes());
    assert!(
        (850..=950).contains(&bytes.len()),
        "a typical ~900-byte INVITE"
    );
    let mut g = c.benchmark_group("invite");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sluice_admission_parse", |b| {
        b.iter(|| Message::parse(black_box(bytes.clone())).unwrap());
    });
    g.bench_function("sluice_full_parse", |b| {
        b.iter(|| {
            let m = Message::parse(black_box(bytes.clone())).unwrap();
            m.validate().unwrap();
            m
        });
    });
    g.bench_function("sluice_parse_edit_serialize", |b| {
        let e = edits();
        b.iter(|| {
            let m = Message::parse(black_box(bytes.clone())).unwrap();
            edit::forward_request(&m, &e)
        });
    });
    g.bench_function("sluice_edit_serialize_only", |b| {
        let m = Message::parse(bytes.clone()).unwrap();
        let e = edits();
        b.iter(|| edit::forward_request(black_box(&m), &e));
    });
    g.bench_function("rsip_parse", |b| {
        b.iter(|| rsip::SipMessage::try_from(black_box(bytes.clone())).unwrap());
    });
    g.finish();
}

/// Times both parsers back to back in this process, so the ratio compares like with like.
fn print_ratio() {
    let bytes = Bytes::from_static(INVITE.as_bytes());
    let per_message = |f: &dyn Fn()| {
        for _ in 0..2_000 {
            f();
        }
        let n = 100_000u32;
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        start.elapsed().as_nanos() as f64 / f64::from(n)
    };
    let ours = per_message(&|| {
        black_box(Message::parse(black_box(bytes.clone())).unwrap());
    });
    let theirs = per_message(&|| {
        black_box(rsip::SipMessage::try_from(black_box(bytes.clone())).unwrap());
    });
    println!(
        "admission parse: sluice {ours:.0} ns, rsip {theirs:.0} ns per {}-byte INVITE; sluice is {:.1}x faster",
        bytes.len(),
        theirs / ours
    );
}

criterion_group!(parse, benches);

fn main() {
    parse();
    Criterion::default().configure_from_args().final_summary();
    print_ratio();
}
