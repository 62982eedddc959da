//! Proxy edits and generated responses, checked byte for byte.

use bytes::Bytes;
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::{HeaderName, Message, Oc, OcSeq};

const INVITE: &str = "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
Max-Forwards: 70\r\n\
Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Timestamp: 54\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";

fn parse(s: &str) -> Message {
    Message::parse(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

#[test]
fn forwarded_request_is_byte_exact() {
    let req = parse(INVITE);
    let out = edit::forward_request(
        &req,
        &RequestEdits {
            push_via: Some(b"SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1;oc;oc-algo=\"loss\""),
            top_via_params: &[("received", Some("192.0.2.99")), ("rport", Some("5062"))],
            decrement_max_forwards: true,
            record_route: Some(b"<sip:192.0.2.1;lr>"),
            pop_route: true,
            ..RequestEdits::default()
        },
    );
    let want = "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1;oc;oc-algo=\"loss\"\r\n\
Record-Route: <sip:192.0.2.1;lr>\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;received=192.0.2.99;rport=5062\r\n\
Max-Forwards: 69\r\n\
Route: <sip:p2.example.com;lr>\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Timestamp: 54\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";
    assert_eq!(std::str::from_utf8(&out).unwrap(), want);
    // The output is itself a valid message that a next hop can parse.
    let fwd = Message::parse(out).unwrap();
    fwd.validate().unwrap();
    assert_eq!(fwd.top_via_branch(), Some(&b"z9hG4bKp1"[..]));
}

#[test]
fn max_forwards_is_added_and_single_route_line_removed() {
    let raw = INVITE.replace("Max-Forwards: 70\r\n", "").replace(
        "Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n",
        "Route: <sip:p1.example.com;lr>\r\n",
    );
    let out = edit::forward_request(
        &parse(&raw),
        &RequestEdits {
            decrement_max_forwards: true,
            pop_route: true,
            ..RequestEdits::default()
        },
    );
    let fwd = Message::parse(out).unwrap();
    assert_eq!(fwd.max_forwards(), Some(70));
    assert!(fwd.header(HeaderName::Route).is_none());
}

#[test]
fn relayed_response_pops_via_and_carries_overload_feedback() {
    let resp = parse(
        "SIP/2.0 180 Ringing\r\n\
v: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1, SIP/2.0/UDP pc33.example.com;branch=z9hG4bKa;oc\r\n\
To: <sip:bob@example.com>;tag=9\r\n\
From: <sip:alice@example.com>;tag=1\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n",
    );
    let out = edit::forward_response(
        &resp,
        &ResponseEdits {
            pop_via: true,
            top_via_params: &[
                ("oc", Some("20")),
                ("oc-algo", Some("\"loss\"")),
                ("oc-validity", Some("500")),
                ("oc-seq", Some("1282321615.782")),
            ],
        },
    );
    let want = "SIP/2.0 180 Ringing\r\n\
Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bKa;oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1282321615.782\r\n\
To: <sip:bob@example.com>;tag=9\r\n\
From: <sip:alice@example.com>;tag=1\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n";
    assert_eq!(std::str::from_utf8(&out).unwrap(), want);
    let relayed = Message::parse(out).unwrap();
    let via = relayed.top_via().unwrap();
    assert_eq!(via.oc(), Ok(Some(Oc::Value(20))));
    assert_eq!(via.oc_seq(), Ok(OcSeq::parse(b"1282321615.782")));
}

#[test]
fn response_pop_moves_to_next_via_line() {
    let resp = parse(
        "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\nVia: SIP/2.0/UDP b;branch=z9hG4bK2\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n",
    );
    let out = edit::forward_response(
        &resp,
        &ResponseEdits {
            pop_via: true,
            top_via_params: &[("oc", Some("0"))],
        },
    );
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP b;branch=z9hG4bK2;oc=0\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn trying_and_503_are_built_from_the_request() {
    let req = parse(INVITE);
    let trying = edit::response_to(&req, 100).build();
    assert_eq!(
        std::str::from_utf8(&trying).unwrap(),
        "SIP/2.0 100 Trying\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Timestamp: 54\r\n\
Content-Length: 0\r\n\r\n"
    );
    let busy = edit::response_to(&req, 503)
        .to_tag("sl1")
        .retry_after(5)
        .build();
    assert_eq!(
        std::str::from_utf8(&busy).unwrap(),
        "SIP/2.0 503 Service Unavailable\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
To: Bob <sip:bob@biloxi.example.com>;tag=sl1\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Retry-After: 5\r\n\
Content-Length: 0\r\n\r\n"
    );
    let plain = edit::response_to(&req, 503).to_tag("sl1").build();
    assert!(!std::str::from_utf8(&plain).unwrap().contains("Retry-After"));
    assert_eq!(
        edit::response_to(&req, 483).to_tag("x").build(),
        edit::response_to(&req, 483).to_tag("x").build(),
        "deterministic"
    );
}

#[test]
fn a_2xx_with_a_session_description_carries_its_type_and_length() {
    let req = parse(INVITE);
    let ok = edit::response_to(&req, 200)
        .to_tag("u1")
        .header("Contact", b"<sip:uas@192.0.2.9>")
        .body("application/sdp", b"v=0\r\n")
        .build();
    assert_eq!(
        std::str::from_utf8(&ok).unwrap(),
        "SIP/2.0 200 OK\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
To: Bob <sip:bob@biloxi.example.com>;tag=u1\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Contact: <sip:uas@192.0.2.9>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 5\r\n\r\n\
v=0\r\n"
    );
    assert_eq!(parse(std::str::from_utf8(&ok).unwrap()).body().len(), 5);
}

#[test]
fn generated_503_carries_oc_parameters_on_the_top_via_only() {
    // The client declared support (`oc`, `oc-algo`) in its Via, sent as one compact
    // header with two values; the server's parameters replace the valueless `oc` and the
    // offered list, and only the top value changes.
    let req = parse(
        "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
v: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1;oc;oc-algo=\"loss,rate\", SIP/2.0/UDP pc33.example.com;branch=z9hG4bKa\r\n\
Via: SIP/2.0/UDP ua.example.com;branch=z9hG4bKu\r\n\
To: <sip:bob@biloxi.example.com>\r\n\
From: <sip:alice@atlanta.example.com>;tag=1\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n",
    );
    let params = [
        ("oc", Some("20")),
        ("oc-algo", Some("\"loss\"")),
        ("oc-validity", Some("500")),
        ("oc-seq", Some("1700000002.00001")),
    ];
    let busy = edit::response_to(&req, 503)
        .to_tag("t1")
        .top_via_params(&params)
        .build();
    assert_eq!(
        std::str::from_utf8(&busy).unwrap(),
        "SIP/2.0 503 Service Unavailable\r\n\
Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKp1;oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1700000002.00001\r\n\
Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bKa\r\n\
Via: SIP/2.0/UDP ua.example.com;branch=z9hG4bKu\r\n\
From: <sip:alice@atlanta.example.com>;tag=1\r\n\
To: <sip:bob@biloxi.example.com>;tag=t1\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n"
    );
    let parsed = parse(std::str::from_utf8(&busy).unwrap());
    let via = parsed.top_via().unwrap();
    assert_eq!(via.oc(), Ok(Some(Oc::Value(20))));
    assert_eq!(via.oc_algo(), vec!["loss".to_string()]);
    assert_eq!(via.oc_validity(), Ok(Some(500)));
    assert_eq!(via.oc_seq(), Ok(OcSeq::parse(b"1700000002.00001")));
}

#[test]
fn ack_for_non_2xx_follows_rfc3261_17_1_1_3() {
    let req = parse(INVITE);
    let resp = parse(
        "SIP/2.0 486 Busy Here\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds\r\n\
To: Bob <sip:bob@biloxi.example.com>;tag=a6c85cf\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
Content-Length: 0\r\n\r\n",
    );
    let ack = edit::ack_for_non2xx(&req, &resp);
    assert_eq!(
        std::str::from_utf8(&ack).unwrap(),
        "ACK sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n\
Max-Forwards: 70\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
To: Bob <sip:bob@biloxi.example.com>;tag=a6c85cf\r\n\
Call-ID: a84b4c76e66710\r\n\
CSeq: 314159 ACK\r\n\
Content-Length: 0\r\n\r\n"
    );
    let cancel = Message::parse(edit::cancel_for(&req)).unwrap();
    assert_eq!(cancel.cseq().unwrap().seq, 314_159);
    assert_eq!(cancel.top_via_branch(), req.top_via_branch());
    cancel.validate().unwrap();
}

#[test]
fn a_dialog_creating_response_copies_the_record_route_in_order() {
    let req = parse(
        "INVITE sip:bob@b.example SIP/2.0\r\n\
Via: SIP/2.0/TCP p2.example:5060;branch=z9hG4bK2\r\n\
Record-Route: <sip:p2.example;lr>\r\n\
Via: SIP/2.0/TCP p1.example:5060;branch=z9hG4bK1\r\n\
Record-Route: <sip:p1.example;lr>\r\n\
From: <sip:alice@a.example>;tag=1\r\n\
To: <sip:bob@b.example>\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n",
    );
    let ringing = edit::response_to(&req, 180)
        .to_tag("u")
        .record_route()
        .header("Contact", b"<sip:bob@192.0.2.4;transport=tcp>")
        .build();
    assert_eq!(
        std::str::from_utf8(&ringing).unwrap(),
        "SIP/2.0 180 Ringing\r\n\
Via: SIP/2.0/TCP p2.example:5060;branch=z9hG4bK2\r\n\
Via: SIP/2.0/TCP p1.example:5060;branch=z9hG4bK1\r\n\
From: <sip:alice@a.example>;tag=1\r\n\
To: <sip:bob@b.example>;tag=u\r\n\
Call-ID: c1\r\n\
CSeq: 1 INVITE\r\n\
Record-Route: <sip:p2.example;lr>\r\n\
Record-Route: <sip:p1.example;lr>\r\n\
Contact: <sip:bob@192.0.2.4;transport=tcp>\r\n\
Content-Length: 0\r\n\r\n"
    );
    // Without asking, none: a 100 Trying or a stateless rejection creates no dialog.
    let trying = edit::response_to(&req, 100).build();
    assert!(!std::str::from_utf8(&trying)
        .unwrap()
        .contains("Record-Route"));
}
