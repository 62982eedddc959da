//! Header names: the ones a proxy acts on get an id, compact forms included (RFC 3261 §7.3.3),
//! so lookups compare a byte rather than a case-insensitive string.

/// A header field name. `Other` is any name sluice does not act on; its text stays in the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HeaderName {
    Via,
    CallId,
    CSeq,
    MaxForwards,
    ContentLength,
    From,
    To,
    Contact,
    ContentType,
    Route,
    RecordRoute,
    RetryAfter,
    Supported,
    Subject,
    ContentEncoding,
    Timestamp,
    Require,
    ProxyRequire,
    Unsupported,
    ResourcePriority,
    Allow,
    Expires,
    Other,
}

impl HeaderName {
    /// The canonical spelling, used when sluice writes the header itself.
    pub const fn as_str(self) -> &'static str {
        match self {
            HeaderName::Via => "Via",
            HeaderName::CallId => "Call-ID",
            HeaderName::CSeq => "CSeq",
            HeaderName::MaxForwards => "Max-Forwards",
            HeaderName::ContentLength => "Content-Length",
            HeaderName::From => "From",
            HeaderName::To => "To",
            HeaderName::Contact => "Contact",
            HeaderName::ContentType => "Content-Type",
            HeaderName::Route => "Route",
            HeaderName::RecordRoute => "Record-Route",
            HeaderName::RetryAfter => "Retry-After",
            HeaderName::Supported => "Supported",
            HeaderName::Subject => "Subject",
            HeaderName::ContentEncoding => "Content-Encoding",
            HeaderName::Timestamp => "Timestamp",
            HeaderName::Require => "Require",
            HeaderName::ProxyRequire => "Proxy-Require",
            HeaderName::Unsupported => "Unsupported",
            HeaderName::ResourcePriority => "Resource-Priority",
            HeaderName::Allow => "Allow",
            HeaderName::Expires => "Expires",
            HeaderName::Other => "",
        }
    }

    /// Classifies a raw header name, case-insensitively, accepting compact forms.
    pub fn from_bytes(name: &[u8]) -> HeaderName {
        // Dispatch on length and first letter: each name is then settled by one comparison.
        let Some(&first) = name.first() else {
            return HeaderName::Other;
        };
        // Folds letters; other bytes may fold onto letters, but the exact comparison below
        // settles every candidate.
        let first = first | 0x20;
        let candidate = match (name.len(), first) {
            (1, _) => {
                return match first {
                    b'v' => HeaderName::Via,
                    b'i' => HeaderName::CallId,
                    b'l' => HeaderName::ContentLength,
                    b'f' => HeaderName::From,
                    b't' => HeaderName::To,
                    b'm' => HeaderName::Contact,
                    b'c' => HeaderName::ContentType,
                    b'k' => HeaderName::Supported,
                    b's' => HeaderName::Subject,
                    b'e' => HeaderName::ContentEncoding,
                    _ => HeaderName::Other,
                }
            }
            (2, b't') => HeaderName::To,
            (3, b'v') => HeaderName::Via,
            (4, b'c') => HeaderName::CSeq,
            (4, b'f') => HeaderName::From,
            (5, b'r') => HeaderName::Route,
            (5, b'a') => HeaderName::Allow,
            (7, b'c') if name[1].eq_ignore_ascii_case(&b'a') => HeaderName::CallId,
            (7, b'c') => HeaderName::Contact,
            (7, b's') => HeaderName::Subject,
            (7, b'r') => HeaderName::Require,
            (7, b'e') => HeaderName::Expires,
            (9, b's') => HeaderName::Supported,
            (9, b't') => HeaderName::Timestamp,
            (11, b'r') => HeaderName::RetryAfter,
            (11, b'u') => HeaderName::Unsupported,
            (12, b'm') => HeaderName::MaxForwards,
            (12, b'c') => HeaderName::ContentType,
            (12, b'r') => HeaderName::RecordRoute,
            (13, b'p') => HeaderName::ProxyRequire,
            (14, b'c') => HeaderName::ContentLength,
            (16, b'c') => HeaderName::ContentEncoding,
            (17, b'r') => HeaderName::ResourcePriority,
            _ => return HeaderName::Other,
        };
        if eq_fold(name, candidate.lowercase()) {
            candidate
        } else {
            HeaderName::Other
        }
    }

    /// The canonical name in lower case, for case-folding comparisons.
    const fn lowercase(self) -> &'static [u8] {
        match self {
            HeaderName::Via => b"via",
            HeaderName::CallId => b"call-id",
            HeaderName::CSeq => b"cseq",
            HeaderName::MaxForwards => b"max-forwards",
            HeaderName::ContentLength => b"content-length",
            HeaderName::From => b"from",
            HeaderName::To => b"to",
            HeaderName::Contact => b"contact",
            HeaderName::ContentType => b"content-type",
            HeaderName::Route => b"route",
            HeaderName::RecordRoute => b"record-route",
            HeaderName::RetryAfter => b"retry-after",
            HeaderName::Supported => b"supported",
            HeaderName::Subject => b"subject",
            HeaderName::ContentEncoding => b"content-encoding",
            HeaderName::Timestamp => b"timestamp",
            HeaderName::Require => b"require",
            HeaderName::ProxyRequire => b"proxy-require",
            HeaderName::Unsupported => b"unsupported",
            HeaderName::ResourcePriority => b"resource-priority",
            HeaderName::Allow => b"allow",
            HeaderName::Expires => b"expires",
            HeaderName::Other => b"",
        }
    }

    /// Headers whose value is a comma-separated list that may be split over several lines
    /// (RFC 3261 §7.3.1). Only for these may a value be split at commas.
    pub const fn is_list(self) -> bool {
        matches!(
            self,
            HeaderName::Via
                | HeaderName::Route
                | HeaderName::RecordRoute
                | HeaderName::Contact
                | HeaderName::Supported
                | HeaderName::Require
                | HeaderName::ProxyRequire
                | HeaderName::Unsupported
                | HeaderName::Allow
                | HeaderName::ContentEncoding
                | HeaderName::ResourcePriority
        )
    }
}

/// Exact case-insensitive equality against a lower-case name made of letters and `-`.
/// Setting bit 0x20 folds ASCII letters; the one other byte it maps into such a name is CR
/// (onto `-`), which is excluded explicitly. A match therefore also proves `name` a token.
/// Names of eight bytes or more are compared a word at a time, the last word overlapping.
fn eq_fold(name: &[u8], lower: &[u8]) -> bool {
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name
            .iter()
            .zip(lower)
            .all(|(&a, &b)| (a | 0x20) == b && a != b'\r');
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let last = name.len() - 8;
    let mut at = 0;
    loop {
        let w = word(name, at);
        let cr = w ^ 0x0d0d_0d0d_0d0d_0d0d;
        let has_cr = cr.wrapping_sub(0x0101_0101_0101_0101) & !cr & 0x8080_8080_8080_8080;
        if (w | 0x2020_2020_2020_2020) != word(lower, at) || has_cr != 0 {
            return false;
        }
        if at == last {
            return true;
        }
        at = (at + 8).min(last);
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderName;

    #[test]
    fn names_are_case_insensitive_and_compact_forms_map() {
        for (raw, id) in [
            ("v", HeaderName::Via),
            ("VIA", HeaderName::Via),
            ("i", HeaderName::CallId),
            ("call-id", HeaderName::CallId),
            ("m", HeaderName::Contact),
            ("f", HeaderName::From),
            ("T", HeaderName::To),
            ("l", HeaderName::ContentLength),
            ("c", HeaderName::ContentType),
            ("k", HeaderName::Supported),
            ("s", HeaderName::Subject),
            ("e", HeaderName::ContentEncoding),
            ("max-FORWARDS", HeaderName::MaxForwards),
            ("x-custom", HeaderName::Other),
            ("Call\rID", HeaderName::Other),
            ("Content-Lengtx", HeaderName::Other),
            ("CONTENT-LENGTH", HeaderName::ContentLength),
            ("Resource-Priority", HeaderName::ResourcePriority),
        ] {
            assert_eq!(HeaderName::from_bytes(raw.as_bytes()), id, "{raw}");
        }
    }
}
