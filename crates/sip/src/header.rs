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
        // Dispatch on length first: almost every name is then settled by one comparison.
        let eq = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        match name.len() {
            1 => match name[0].to_ascii_lowercase() {
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
            },
            2 if eq("To") => HeaderName::To,
            3 if eq("Via") => HeaderName::Via,
            4 if eq("CSeq") => HeaderName::CSeq,
            4 if eq("From") => HeaderName::From,
            5 if eq("Route") => HeaderName::Route,
            5 if eq("Allow") => HeaderName::Allow,
            7 if eq("Call-ID") => HeaderName::CallId,
            7 if eq("Contact") => HeaderName::Contact,
            7 if eq("Subject") => HeaderName::Subject,
            7 if eq("Require") => HeaderName::Require,
            7 if eq("Expires") => HeaderName::Expires,
            9 if eq("Supported") => HeaderName::Supported,
            9 if eq("Timestamp") => HeaderName::Timestamp,
            11 if eq("Retry-After") => HeaderName::RetryAfter,
            11 if eq("Unsupported") => HeaderName::Unsupported,
            12 if eq("Max-Forwards") => HeaderName::MaxForwards,
            12 if eq("Content-Type") => HeaderName::ContentType,
            12 if eq("Record-Route") => HeaderName::RecordRoute,
            13 if eq("Proxy-Require") => HeaderName::ProxyRequire,
            14 if eq("Content-Length") => HeaderName::ContentLength,
            16 if eq("Content-Encoding") => HeaderName::ContentEncoding,
            17 if eq("Resource-Priority") => HeaderName::ResourcePriority,
            _ => HeaderName::Other,
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
        ] {
            assert_eq!(HeaderName::from_bytes(raw.as_bytes()), id, "{raw}");
        }
    }
}
