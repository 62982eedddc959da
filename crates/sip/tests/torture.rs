//! RFC 4475 and RFC 5118 torture tests, driven by `torture/manifest.toml`.
//!
//! * `valid`: parse and full validation succeed.
//! * `invalid`: parse or validation fails with an error.
//! * `proxy-may-forward`: the RFC leaves the choice to the element; `PROXY_CHOICES` below
//!   records sluice's choice and why, and the test checks that the code makes that choice.

use std::path::Path;

use bytes::Bytes;
use serde::Deserialize;
use sluice_sip::{ErrorKind, Message};

#[derive(Deserialize)]
struct Manifest {
    message: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    file: String,
    expect: String,
    note: String,
}

/// sluice's decision for each message the RFCs let an element accept or reject.
/// `true` = accepted (parses and validates), `false` = rejected.
const PROXY_CHOICES: &[(&str, bool, &str)] = &[
    ("rfc4475/ltgtruri.dat", false, "a Request-URI in <> is not a URI; 400 is the simple, safe answer"),
    ("rfc4475/lwsstart.dat", false, "the Request-Line grammar has single SPs; tolerating runs of spaces would also tolerate spaces inside the URI"),
    ("rfc4475/trws.dat", false, "trailing white space makes the version token invalid; rejected like other malformed start lines"),
    ("rfc4475/escruri.dat", true, "escaped headers in the Request-URI are legal URI syntax; a proxy strips them when it acts on the URI"),
    ("rfc4475/baddate.dat", true, "sluice never interprets Date, so a non-GMT Date does not stop forwarding"),
    ("rfc4475/regbadct.dat", true, "a URI with ?headers outside <> is read as a URI with headers; a registrar would refuse it, a proxy need not"),
    ("rfc4475/badaspec.dat", false, "white space inside <> is not addr-spec syntax; 400 is the answer RFC 4475 calls reasonable"),
    ("rfc4475/baddn.dat", false, "an unquoted display name with a comma cannot be told apart from a list, so it is rejected"),
    ("rfc4475/badbranch.dat", true, "a bare magic cookie is still a unique-enough token for matching; forwarding is harmless"),
    ("rfc4475/inv2543.dat", true, "RFC 2543 syntax is accepted for backward compatibility, as the RFC suggests"),
    ("rfc5118/via-received-param-with-delim.dat", true, "RFC 5118 §4.5: robust implementations accept received=[...]"),
    ("rfc5118/ipv6-bug-abnf-3-colons.dat", false, "':::' is not an IPv6 address (RFC 5118 §4.10 grammar bug); rejected rather than guessed at"),
];

/// The RFC 5118 archive's SDP messages declare more body than they carry (the archive's bytes
/// have LF line ends and the Content-Length values disagree with them). Such a datagram is
/// discarded (RFC 3261 §18.3); the test checks that, and that the rest of the message is
/// valid once Content-Length matches the body.
const SHORT_BODY_IN_ARCHIVE: &[&str] = &["rfc5118/ipv6-in-sdp.dat", "rfc5118/mult-ip-in-sdp.dat"];

/// RFC 5118 §4.10's two messages are printed without the empty line that ends the header
/// section; the archive copies them that way. Truncated as they stand; checked with it added.
const NO_HEADER_END_IN_ARCHIVE: &[&str] = &[
    "rfc5118/ipv6-bug-abnf-3-colons.dat",
    "rfc5118/ipv6-correct-abnf-2-colons.dat",
];

fn outcome(bytes: Vec<u8>) -> Result<(), sluice_sip::ParseError> {
    let msg = Message::parse(Bytes::from(bytes))?;
    msg.validate()
}

fn fix_content_length(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let sep = text.find("\n\n").expect("header end") + 2;
    let body_len = bytes.len() - sep;
    let start = text.find("Content-Length:").expect("has Content-Length");
    let end = start + text[start..].find('\n').unwrap();
    format!(
        "{}Content-Length: {body_len}{}",
        &text[..start],
        &text[end..]
    )
    .into_bytes()
}

#[test]
fn torture_messages_meet_the_rfcs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torture");
    let manifest: Manifest =
        toml::from_str(&std::fs::read_to_string(dir.join("manifest.toml")).unwrap()).unwrap();
    assert!(
        manifest.message.len() >= 60,
        "all RFC 4475 and RFC 5118 messages"
    );
    let mut failures = Vec::new();
    for entry in &manifest.message {
        let mut bytes = std::fs::read(dir.join(&entry.file)).unwrap();
        if SHORT_BODY_IN_ARCHIVE.contains(&entry.file.as_str()) {
            match outcome(bytes.clone()) {
                Err(e) if matches!(e.kind, ErrorKind::BodyTooShort { .. }) => {}
                other => failures.push(format!(
                    "{}: expected BodyTooShort, got {other:?}",
                    entry.file
                )),
            }
            bytes = fix_content_length(&bytes);
        }
        if NO_HEADER_END_IN_ARCHIVE.contains(&entry.file.as_str()) {
            match outcome(bytes.clone()) {
                Err(e) if e.kind == ErrorKind::Truncated => {}
                other => {
                    failures.push(format!("{}: expected Truncated, got {other:?}", entry.file));
                }
            }
            bytes.push(b'\n');
        }
        let result = outcome(bytes);
        let want_accept = match entry.expect.as_str() {
            "valid" => true,
            "invalid" => false,
            "proxy-may-forward" => {
                let Some(choice) = PROXY_CHOICES.iter().find(|c| c.0 == entry.file) else {
                    failures.push(format!("{}: no documented choice", entry.file));
                    continue;
                };
                choice.1
            }
            other => panic!("unknown expectation {other}"),
        };
        if result.is_ok() != want_accept {
            failures.push(format!(
                "{}: expected {}, got {:?} ({})",
                entry.file,
                if want_accept { "accept" } else { "reject" },
                result,
                entry.note
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_documented_choice_names_a_manifest_entry() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torture");
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    for (file, _, _) in PROXY_CHOICES {
        assert!(manifest.contains(&format!("file = \"{file}\"")), "{file}");
    }
}
