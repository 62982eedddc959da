//! Any bytes through the datagram parser, full validation and every proxy edit: no panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Message::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = msg.validate();
    for via in msg.vias().flatten() {
        let _ = (via.oc(), via.oc_seq(), via.oc_validity(), via.oc_algo(), via.rport());
    }
    if msg.is_request() {
        let out = edit::forward_request(
            &msg,
            &RequestEdits {
                push_via: Some(b"SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKf"),
                top_via_params: &[("received", Some("192.0.2.2"))],
                decrement_max_forwards: true,
                record_route: Some(b"<sip:192.0.2.1;lr>"),
                pop_route: true,
                ..RequestEdits::default()
            },
        );
        // What sluice writes, sluice must read back.
        Message::parse(out).expect("forwarded request re-parses");
        let _ = edit::response_to(&msg, 503).to_tag("t").retry_after(1).build();
        let _ = edit::cancel_for(&msg);
    } else {
        let _ = edit::forward_response(
            &msg,
            &ResponseEdits {
                pop_via: true,
                top_via_params: &[("oc", Some("10"))],
            },
        );
    }
});
