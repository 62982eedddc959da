//! The header scan against the line-by-line parse it replaced (kept here as the reference),
//! and the SIMD byte search against the portable one: on any input, all three give the same
//! message or the same error.

use bytes::Bytes;
use proptest::prelude::*;

use super::{header_line_error, line_at, Admission, HeaderSpan, Limits, Message, Parts, Span};
use crate::error::{ErrorKind, ParseError, Result};
use crate::header::HeaderName;
use crate::scan::{self, Native, Words};

/// The parse before the header scan was split from the admission parse: one line at a time,
/// colon then line end, each header's admission fields parsed as it is found.
#[allow(clippy::too_many_lines)]
fn parse_line_by_line(buf: Bytes, limits: &Limits) -> Result<Message> {
    let b = &buf[..];
    let (start, headers_start) = Message::begin(&buf, limits)?;
    let mut pos = headers_start;
    let mut headers = Vec::new();
    let mut admission = Admission::default();

    loop {
        let Some(&first) = b.get(pos) else {
            return Err(ParseError::new(ErrorKind::Truncated, b.len()));
        };
        // The empty line ending the header section.
        if first == b'\n' {
            pos += 1;
            break;
        }
        if first == b'\r' && b.get(pos + 1) == Some(&b'\n') {
            pos += 2;
            break;
        }
        // The colon is searched for first and the line end from the value on, so no byte
        // is scanned twice. A line without a colon makes the "name" run into the next
        // line; no known name matches that and the token check rejects it. Every failure
        // here is reported by `header_line_error`, which re-reads the line the slow way so
        // that the error is the same as a line-by-line parse would give.
        let window_end = b.len().min(pos + limits.max_line_length + 2);
        let Some(colon) = scan::find_short(&b[pos..window_end], b':').map(|c| c + pos) else {
            return Err(header_line_error(b, pos, limits));
        };
        let mut name_end = colon;
        // Space before the colon is rare: test once before looping.
        if name_end > pos && matches!(b[name_end - 1], b' ' | b'\t') {
            while name_end > pos && matches!(b[name_end - 1], b' ' | b'\t') {
                name_end -= 1;
            }
        }
        // A known name is proved a token by matching its spelling; only other names are
        // scanned for token characters (which also catches a continuation line with no
        // header to continue).
        let name = HeaderName::from_name_in(b, pos, name_end);
        if name == HeaderName::Other && !scan::is_token_str(&b[pos..name_end]) {
            return Err(header_line_error(b, pos, limits));
        }
        // Usually exactly one space follows the colon.
        let mut value_start = colon + 1;
        if value_start < window_end && b[value_start] == b' ' {
            value_start += 1;
        }
        while value_start < window_end && matches!(b[value_start], b' ' | b'\t') {
            value_start += 1;
        }
        let Some(lf) = scan::find_short(&b[value_start..window_end], b'\n') else {
            return Err(header_line_error(b, pos, limits));
        };
        let lf = value_start + lf;
        // lf > colon >= pos, so lf - 1 is inside the line.
        let mut value_end = if b[lf - 1] == b'\r' { lf - 1 } else { lf };
        if value_end - pos > limits.max_line_length {
            return Err(header_line_error(b, pos, limits));
        }
        let mut next = lf + 1;
        // Line folding (RFC 3261 §7.3.1): lines starting with SP/HT continue this field.
        while next < b.len() && matches!(b[next], b' ' | b'\t') {
            let (ce, nn) = line_at(b, next, limits)?;
            value_end = ce;
            next = nn;
        }
        // Trim the value (LWS includes the CRLF of a folded line); index loops, as this
        // runs for every header of every message.
        while value_start < value_end && scan::is_lws(b[value_start]) {
            value_start += 1;
        }
        let mut trimmed_end = value_end;
        while trimmed_end > value_start && scan::is_lws(b[trimmed_end - 1]) {
            trimmed_end -= 1;
        }
        let value = Span::new(value_start, trimmed_end);
        if headers.len() == limits.max_headers {
            return Err(ParseError::new(
                ErrorKind::TooManyHeaders {
                    limit: limits.max_headers,
                },
                pos,
            ));
        }
        let index = headers.len();
        headers.push(HeaderSpan {
            name,
            name_span: Span::new(pos, name_end),
            value,
            line: Span::new(pos, next),
        });
        if name.is_admission() {
            admission.admit_header(&buf, name, index, value)?;
        }
        pos = next;
    }

    let parts = Parts {
        start,
        headers_start,
        headers,
        admission,
    };
    parts.into_message(buf, pos)
}

/// Header lines built to hit the scan's edge cases: known names in any case and compact,
/// unknown and malformed names, white space before the colon, a missing colon, bare LF and
/// lone CR line ends, folding, admission values good and bad.
fn header_line() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        prop::sample::select(vec![
            "Via",
            "v",
            "VIA",
            "Call-ID",
            "i",
            "call-id",
            "CSeq",
            "cseq",
            "Max-Forwards",
            "Content-Length",
            "l",
            "CONTENT-LENGTH",
            "To",
            "t",
            "From",
            "Contact",
            "Contact",
            "Resource-Priority",
            "Record-Route",
            "Route",
            "Subject",
            "X-Custom",
            "Via ",
            "To\t",
            "Call\rID",
            "Con\ntent",
            "",
            " ",
            "a b",
            "Content-Lengtx",
            "Max-Forward",
        ])
        .prop_map(str::to_string),
        "[!-~]{1,20}",
    ];
    let value = prop_oneof![
        prop::sample::select(vec![
            "SIP/2.0/UDP h;branch=z9hG4bK1",
            "SIP/2.0/UDP h ;branch=\"q\";rport, SIP/2.0/TCP x",
            "1 INVITE",
            "2 BYE",
            "x INVITE",
            "70",
            "0",
            "4294967296",
            "",
            "  ",
            "a,b",
            "\"open",
            "<sip:a@b>;tag=1",
            "3",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,30}",
    ];
    let colon = prop::sample::select(vec![": ", ":", " : ", "\t:", ":\t ", ""]);
    let end = prop::sample::select(vec!["\r\n", "\r\n", "\r\n", "\n", "\r", ""]);
    let fold = prop::sample::select(vec!["", "", "", " more\r\n", "\tmore\n", " \r\n"]);
    (name, colon, value, end, fold).prop_map(|(n, c, v, e, f)| format!("{n}{c}{v}{e}{f}"))
}

fn message() -> impl Strategy<Value = Vec<u8>> {
    let start = prop::sample::select(vec![
        "INVITE sip:a@b SIP/2.0\r\n",
        "SIP/2.0 200 OK\r\n",
        "\r\nOPTIONS sip:x SIP/2.0\n",
        "BYE sip:x SIP/2.0\r\n",
    ]);
    let end = prop::sample::select(vec!["\r\n", "\n", "", "\r"]);
    (
        start,
        proptest::collection::vec(header_line(), 0..12),
        end,
        "[ -~]{0,12}",
    )
        .prop_map(|(s, h, e, body)| format!("{s}{}{e}{body}", h.concat()).into_bytes())
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        Just(Limits::DATAGRAM),
        (4usize..60, 1usize..10).prop_map(|(line, headers)| Limits {
            max_message_size: 65_535,
            max_headers: headers,
            max_line_length: line,
        }),
    ]
}

fn check(bytes: Vec<u8>, limits: &Limits) -> std::result::Result<(), TestCaseError> {
    let buf = Bytes::from(bytes);
    let reference = format!("{:?}", parse_line_by_line(buf.clone(), limits));
    let simd = format!("{:?}", Message::parse_using::<Native>(buf.clone(), limits));
    let words = format!("{:?}", Message::parse_using::<Words>(buf, limits));
    prop_assert_eq!(&simd, &reference);
    prop_assert_eq!(&words, &reference);
    Ok(())
}

/// 2,000 cases each by default; `PROPTEST_CASES` asks for more (a longer run before a release
/// or after a change to the scan).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn scan_agrees_with_the_line_by_line_parse(bytes in message(), limits in limits()) {
        check(bytes, &limits)?;
    }

    #[test]
    fn scan_agrees_on_mutated_messages(
        bytes in message(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), prop::sample::select(vec![b'\r', b'\n', b':', b' ', b'\t', b';', 0, 0x80, b'a'])), 1..6),
        limits in limits(),
    ) {
        let mut bytes = bytes;
        if !bytes.is_empty() {
            for (at, byte) in flips {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
        }
        check(bytes, &limits)?;
    }

    #[test]
    fn scan_agrees_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300), limits in limits()) {
        check(bytes, &limits)?;
    }
}

#[test]
fn the_reference_is_the_parse_the_torture_tests_accept() {
    // A sanity check of the reference itself: it parses a plain INVITE like the scan does.
    let raw = b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nl: 0\r\n\r\n";
    let m = parse_line_by_line(Bytes::from_static(raw), &Limits::DATAGRAM).unwrap();
    assert_eq!(m.top_via_branch(), Some(&b"z9hG4bK1"[..]));
    assert_eq!(m.content_length(), Some(0));
}
