//! What the parser and framer fuzz targets check for one input, shared by the fuzz targets
//! (`fuzz/fuzz_targets/parse.rs`, `framer.rs`) and the test suite's replay of their
//! committed corpora (`tests/fuzz_seeds.rs`).
#![allow(dead_code)]

use bytes::Bytes;
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::{ErrorKind, Limits, Message, StreamFramer};

/// Any bytes through the datagram parser, full validation and every proxy edit: no panic,
/// and what sluice writes, sluice reads back.
pub fn parse(data: &[u8]) {
    let Ok(msg) = Message::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = msg.validate();
    for via in msg.vias().flatten() {
        let _ = (
            via.oc(),
            via.oc_seq(),
            via.oc_validity(),
            via.oc_algo(),
            via.rport(),
        );
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
        // What a proxy adds (Via, Record-Route, the Max-Forwards and Content-Length a
        // request may lack: RFC 3261 16.6 step 3, 18.3; and a line where the top Via's
        // first value, given `received`, leaves a combined Via header) may take a request
        // at a limit past it: the proxy core re-parses what it forwards and answers 500
        // (counted) for those. Any other failure is sluice writing what it cannot read.
        match Message::parse(out) {
            Ok(_) => {}
            Err(e) => match e.kind {
                ErrorKind::TooManyHeaders { limit } if msg.headers().count() + 5 > limit => {}
                // The edits above add well under 512 bytes.
                ErrorKind::MessageTooLarge { limit, .. } if data.len() + 512 > limit => {}
                _ => panic!("forwarded request does not re-parse: {e:?}"),
            },
        }
        let _ = edit::response_to(&msg, 503)
            .to_tag("t")
            .retry_after(1)
            .build();
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
}

const FRAMER_LIMIT: usize = 4096;

/// Any byte stream (the first byte sets the chunk size): the framer never panics, never
/// buffers past its limit, and every frame it yields is a whole message by Content-Length.
pub fn framer(data: &[u8]) {
    let Some((&chunk, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk.max(1));
    let mut framer = StreamFramer::new(FRAMER_LIMIT);
    for part in stream.chunks(chunk) {
        framer.push(part);
        loop {
            match framer.next_message() {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= FRAMER_LIMIT);
                    let _ = Message::parse_with(frame, &Limits::STREAM);
                }
                Ok(None) => break,
                Err(_) => return, // the connection would be closed
            }
        }
        assert!(framer.buffered() <= FRAMER_LIMIT + chunk);
    }
}
