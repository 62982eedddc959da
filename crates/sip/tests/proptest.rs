//! Properties over generated input: round trips are exact, and no input panics.

use bytes::Bytes;
use proptest::prelude::*;
use sluice_sip::edit::{self, RequestEdits};
use sluice_sip::{HeaderName, Limits, Message, OwnedMessage, OwnedStartLine, StreamFramer};

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9.!%*_+`'~-]{0,12}"
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]([a-z0-9-]{0,7}[a-z0-9])?(\\.[a-z][a-z0-9]{0,6}){0,2}",
        (any::<u8>(), any::<u8>(), any::<u8>(), 1u8..255)
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
        any::<[u16; 8]>().prop_map(|s| format!("[{}]", std::net::Ipv6Addr::from(s))),
    ]
}

/// Printable header text without leading/trailing white space or line breaks.
fn value_text() -> impl Strategy<Value = String> {
    "[!-~]([ -~]{0,40}[!-~])?"
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("INVITE".to_string()),
        Just("ACK".to_string()),
        Just("BYE".to_string()),
        Just("OPTIONS".to_string()),
        "[A-Z]{3,10}",
    ]
}

prop_compose! {
    fn message()(
        is_request in any::<bool>(),
        method in method(),
        user in token(),
        rhost in host(),
        status in 100u16..700,
        reason in "[A-Za-z][A-Za-z ]{0,20}[A-Za-z]",
        via_host in host(),
        port in proptest::option::of(1u16..),
        branch in "[A-Za-z0-9]{1,16}",
        call_id in "[!-~]{1,30}",
        seq in 0u32..(1 << 31),
        max_forwards in proptest::option::of(0u32..=255),
        extra in proptest::collection::vec((token(), value_text()), 0..12),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        compact in any::<bool>(),
    ) -> OwnedMessage {
        let start = if is_request {
            OwnedStartLine::Request { method: method.clone(), uri: format!("sip:{user}@{rhost}") }
        } else {
            OwnedStartLine::Response { status, reason }
        };
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let mut headers = vec![
            ((if compact { "v" } else { "Via" }).to_string(), format!("SIP/2.0/UDP {via_host}{port};branch=z9hG4bK{branch}").into_bytes()),
            ((if compact { "i" } else { "Call-ID" }).to_string(), call_id.into_bytes()),
            ("CSeq".to_string(), format!("{seq} {method}").into_bytes()),
        ];
        if let Some(n) = max_forwards {
            headers.push(("Max-Forwards".to_string(), n.to_string().into_bytes()));
        }
        // Extra headers never collide with the ones the admission scan interprets.
        for (name, value) in extra {
            if HeaderName::from_bytes(name.as_bytes()) == HeaderName::Other {
                headers.push((name, value.into_bytes()));
            }
        }
        headers.push(((if compact { "l" } else { "Content-Length" }).to_string(), body.len().to_string().into_bytes()));
        OwnedMessage { start, headers, body }
    }
}

proptest! {
    #[test]
    fn parse_of_serialize_is_identity(m in message()) {
        let bytes = m.to_bytes();
        let parsed = Message::parse(bytes.clone()).unwrap();
        prop_assert_eq!(parsed.to_owned_message(), m.clone());
        // Serializing twice gives the same bytes.
        prop_assert_eq!(parsed.to_owned_message().to_bytes(), bytes);
    }

    #[test]
    fn admission_fields_match_the_generated_values(m in message()) {
        let parsed = Message::parse(m.to_bytes()).unwrap();
        let via = m.headers.iter().find(|h| h.0 == "Via" || h.0 == "v").unwrap();
        let branch = String::from_utf8_lossy(&via.1).split("branch=").nth(1).unwrap().to_string();
        prop_assert_eq!(parsed.top_via_branch(), Some(branch.as_bytes()));
        prop_assert_eq!(parsed.body(), &m.body[..]);
        prop_assert!(parsed.top_via().is_ok());
    }

    #[test]
    fn forwarding_keeps_a_request_parseable(m in message()) {
        let parsed = Message::parse(m.to_bytes()).unwrap();
        prop_assume!(parsed.is_request());
        let out = edit::forward_request(&parsed, &RequestEdits {
            push_via: Some(b"SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKfwd"),
            top_via_params: &[("received", Some("192.0.2.7"))],
            decrement_max_forwards: true,
            record_route: Some(b"<sip:192.0.2.1;lr>"),
            ..RequestEdits::default()
        });
        let fwd = Message::parse(out).unwrap();
        prop_assert_eq!(fwd.top_via_branch(), Some(&b"z9hG4bKfwd"[..]));
        prop_assert_eq!(fwd.max_forwards(), Some(parsed.max_forwards().unwrap_or(71).saturating_sub(1)));
        prop_assert_eq!(fwd.body(), parsed.body());
        prop_assert_eq!(fwd.vias().count(), parsed.vias().count() + 1);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(m) = Message::parse_with(Bytes::from(data.clone()), &Limits::DATAGRAM) {
            let _ = m.validate();
            let _ = m.top_via();
            let _ = m.vias().count();
        }
        let mut framer = StreamFramer::new(256);
        framer.push(&data);
        while let Ok(Some(_)) = framer.next_message() {}
    }

    #[test]
    fn mutated_messages_never_panic(m in message(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = m.to_bytes().to_vec();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(m) = Message::parse(Bytes::from(bytes)) {
            let _ = m.validate();
            for v in m.vias() { let _ = v; }
            let _ = edit::forward_request(&m, &RequestEdits { decrement_max_forwards: true, pop_route: true, ..RequestEdits::default() });
            let _ = edit::response_to(&m, 503).to_tag("t").build();
        }
    }
}
