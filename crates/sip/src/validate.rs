//! Full validation: everything the admission scan leaves for later, checked at once.
//! A proxy calls it before forwarding (a message it relays must be well-formed), the CLI
//! calls it to report every problem, and the RFC 4475 torture tests drive it.

use crate::error::{ErrorKind, ParseError, Result};
use crate::message::Message;
use crate::uri::{NameAddr, Uri};
use crate::{scan, HeaderName};

/// Headers that may appear at most once (RFC 3261 §7.3.1: all but list headers). Repeated
/// with the same value is tolerated; repeated with different values is an error.
const SINGLE_VALUED: [(HeaderName, &str); 7] = [
    (HeaderName::From, "From"),
    (HeaderName::To, "To"),
    (HeaderName::CallId, "Call-ID"),
    (HeaderName::CSeq, "CSeq"),
    (HeaderName::MaxForwards, "Max-Forwards"),
    (HeaderName::ContentType, "Content-Type"),
    (HeaderName::Expires, "Expires"),
];

/// Headers no message may lack (RFC 3261 §8.1.1 lists them with Max-Forwards, which a proxy
/// tolerates missing: it forwards with its own).
const MANDATORY: [(HeaderName, &str); 5] = [
    (HeaderName::Via, "Via"),
    (HeaderName::From, "From"),
    (HeaderName::To, "To"),
    (HeaderName::CallId, "Call-ID"),
    (HeaderName::CSeq, "CSeq"),
];

impl Message {
    /// Parses every header sluice knows and checks the rules of RFC 3261 that the admission
    /// scan does not: mandatory headers, CSeq method, URI syntax, name-addr syntax, number
    /// ranges and single-valued headers. Returns the first problem found.
    pub fn validate(&self) -> Result<()> {
        let bad_value = |header: &'static str, v: &[u8]| {
            ParseError::new(ErrorKind::BadHeaderValue { header }, self.offset_of(v))
        };
        // One pass over the headers gathers what the checks below need, which then report
        // in the order they always have: missing headers, Call-ID, conflicting values.
        let mut present = [false; MANDATORY.len()];
        let mut first: [Option<&[u8]>; SINGLE_VALUED.len()] = [None; SINGLE_VALUED.len()];
        let mut conflict: [Option<&[u8]>; SINGLE_VALUED.len()] = [None; SINGLE_VALUED.len()];
        for h in self.headers() {
            if let Some(i) = MANDATORY.iter().position(|(n, _)| *n == h.name) {
                present[i] = true;
            }
            if let Some(i) = SINGLE_VALUED.iter().position(|(n, _)| *n == h.name) {
                match first[i] {
                    None => first[i] = Some(h.value),
                    Some(v) if v != h.value && conflict[i].is_none() => conflict[i] = Some(h.value),
                    Some(_) => {}
                }
            }
        }
        if let Some(i) = present.iter().position(|p| !p) {
            return Err(ParseError::new(
                ErrorKind::MissingHeader {
                    header: MANDATORY[i].1,
                },
                self.headers_start(),
            ));
        }
        if let Some(id) = self.call_id() {
            if id
                .iter()
                .any(|&c| c.is_ascii_whitespace() || c.is_ascii_control())
            {
                return Err(bad_value("Call-ID", id));
            }
        }
        for (i, (_, label)) in SINGLE_VALUED.iter().enumerate() {
            if let Some(other) = conflict[i] {
                return Err(ParseError::new(
                    ErrorKind::ConflictingHeader { header: label },
                    self.offset_of(other),
                ));
            }
        }
        if let Some(method) = self.method() {
            let uri = self.request_uri_raw().unwrap_or_default();
            if Uri::parse(uri).is_none() {
                return Err(ParseError::new(ErrorKind::BadUri, self.offset_of(uri)));
            }
            if self.cseq().is_some_and(|c| &c.method != method) {
                return Err(ParseError::new(
                    ErrorKind::CSeqMethodMismatch,
                    self.offset_of(self.header(HeaderName::CSeq).unwrap_or_default()),
                ));
            }
        }
        // RFC 3261 §8.1.1.5: the sequence number MUST be less than 2^31.
        if self.cseq().is_some_and(|c| c.seq >= 1 << 31) {
            let v = self.header(HeaderName::CSeq).unwrap_or_default();
            return Err(ParseError::new(
                ErrorKind::BadNumber { header: "CSeq" },
                self.offset_of(v),
            ));
        }
        // Max-Forwards is 0..=255 in practice (RFC 4475 §3.1.2.4 treats 300 as out of range).
        if self.max_forwards().is_some_and(|n| n > 255) {
            let v = self.header(HeaderName::MaxForwards).unwrap_or_default();
            return Err(ParseError::new(
                ErrorKind::BadNumber {
                    header: "Max-Forwards",
                },
                self.offset_of(v),
            ));
        }
        for via in self.vias() {
            via?;
        }
        for (name, label) in [(HeaderName::From, "From"), (HeaderName::To, "To")] {
            let v = self.header(name).unwrap_or_default();
            if NameAddr::parse(v).is_none() {
                return Err(if has_unterminated_quote(v) {
                    ParseError::new(ErrorKind::UnterminatedQuote, self.offset_of(v))
                } else {
                    bad_value(label, v)
                });
            }
        }
        for (name, label) in [
            (HeaderName::Route, "Route"),
            (HeaderName::RecordRoute, "Record-Route"),
            (HeaderName::Contact, "Contact"),
        ] {
            for v in self.header_values(name) {
                let v = v?;
                if name == HeaderName::Contact && v == b"*" {
                    continue;
                }
                if NameAddr::parse(v).is_none() {
                    return Err(bad_value(label, v));
                }
            }
        }
        for (name, label) in [
            (HeaderName::Expires, "Expires"),
            (HeaderName::ContentLength, "Content-Length"),
        ] {
            if let Some(v) = self.header(name) {
                if scan::parse_u32(v).is_none() {
                    return Err(ParseError::new(
                        ErrorKind::BadNumber { header: label },
                        self.offset_of(v),
                    ));
                }
            }
        }
        if let Some(v) = self.header(HeaderName::RetryAfter) {
            let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
            if scan::parse_u32(&v[..digits]).is_none() {
                return Err(ParseError::new(
                    ErrorKind::BadNumber {
                        header: "Retry-After",
                    },
                    self.offset_of(v),
                ));
            }
        }
        if let Some(v) = self.header(HeaderName::ContentType) {
            if !is_media_type(v) {
                return Err(bad_value("Content-Type", v));
            }
        }
        Ok(())
    }
}

fn has_unterminated_quote(v: &[u8]) -> bool {
    scan::find_unquoted(v, 0).is_err()
}

/// `type "/" subtype *(SEMI m-parameter)` (RFC 3261 §20.15).
fn is_media_type(v: &[u8]) -> bool {
    let semi = scan::find_unquoted(v, b';')
        .ok()
        .flatten()
        .unwrap_or(v.len());
    let Some(slash) = v[..semi].iter().position(|&b| b == b'/') else {
        return false;
    };
    scan::is_token_str(scan::trim(&v[..slash]))
        && scan::is_token_str(scan::trim(&v[slash + 1..semi]))
        && scan::parse_params(&v[semi..]).is_ok()
}
