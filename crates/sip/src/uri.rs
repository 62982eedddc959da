//! URIs (RFC 3261 §19.1, RFC 5118 for IPv6 references) and name-addr values
//! (From, To, Contact, Route, Record-Route), parsed on demand from message slices.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::scan::{self, Params};

/// A host as written: a domain name, an IPv4 address or a bracketed IPv6 reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host<'a> {
    Name(&'a str),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl Host<'_> {
    /// Parses `hostname / IPv4address / IPv6reference`. A bare IPv6 address without brackets
    /// is rejected here (RFC 5118 §4.2: it makes the port ambiguous).
    pub fn parse(s: &[u8]) -> Option<Host<'_>> {
        match *s.first()? {
            b'[' => {
                let inner = std::str::from_utf8(s[1..].strip_suffix(b"]")?).ok()?;
                inner.parse().ok().map(Host::V6)
            }
            // Digits and dots only is an address or nothing (a hostname has a letter).
            b'0'..=b'9' | b'.' if s.iter().all(|&b| b.is_ascii_digit() || b == b'.') => {
                parse_ipv4(s).map(Host::V4)
            }
            _ if is_hostname(s) => std::str::from_utf8(s).ok().map(Host::Name),
            _ => None,
        }
    }
}

/// A dotted-quad IPv4 address, as `Ipv4Addr`'s `FromStr` accepts it (four decimal octets of
/// at most 255, no leading zeros), in one pass without its UTF-8 and generic-parser
/// overhead: every routed request and every Via carries one.
fn parse_ipv4(s: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (k, octet) in octets.iter_mut().enumerate() {
        if k > 0 {
            if s.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut n: u16 = 0;
        while let Some(d) = s.get(i).filter(|d| d.is_ascii_digit()) {
            if i - start == 3 {
                return None;
            }
            n = n * 10 + u16::from(d - b'0');
            i += 1;
        }
        let len = i - start;
        if len == 0 || (len > 1 && s[start] == b'0') {
            return None;
        }
        *octet = u8::try_from(n).ok()?;
    }
    (i == s.len()).then(|| Ipv4Addr::from(octets))
}

impl std::fmt::Display for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::V4(a) => write!(f, "{a}"),
            Host::V6(a) => write!(f, "[{a}]"),
        }
    }
}

/// `hostname = *( domainlabel "." ) toplabel [ "." ]`, labels of alphanumerics and inner
/// hyphens (and underscores, seen in the wild), checked in one pass.
fn is_hostname(s: &[u8]) -> bool {
    let s = s.strip_suffix(b".").unwrap_or(s);
    let mut prev = b'.';
    for &c in s {
        let ok = if c == b'.' {
            // A label ends: it must not be empty or end in a hyphen.
            prev.is_ascii_alphanumeric()
        } else if c.is_ascii_alphanumeric() {
            true
        } else {
            // `-` or `_` inside a label, never first.
            (c == b'-' || c == b'_') && prev != b'.'
        };
        if !ok {
            return false;
        }
        prev = c;
    }
    prev.is_ascii_alphanumeric()
}

/// Parses `host [":" port]` where whitespace may surround the colon (Via's COLON is SWS ":" SWS).
pub(crate) fn parse_hostport(s: &[u8]) -> Option<(Host<'_>, Option<u16>)> {
    let s = scan::trim(s);
    let (host, rest) = if s.first() == Some(&b'[') {
        let close = s.iter().position(|&b| b == b']')?;
        (&s[..=close], &s[close + 1..])
    } else {
        let colon = s.iter().position(|&b| b == b':').unwrap_or(s.len());
        (scan::trim(&s[..colon]), &s[colon..])
    };
    let host = Host::parse(host)?;
    let rest = scan::trim(rest);
    if rest.is_empty() {
        return Some((host, None));
    }
    let port = scan::trim(rest.strip_prefix(b":")?);
    let port = u16::try_from(scan::parse_u32(port)?).ok()?;
    Some((host, Some(port)))
}

/// A parsed URI. For `sip`/`sips` every part is split out; other schemes (tel, urn, http...)
/// are kept opaque after a check of the scheme, which is all a proxy needs of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uri<'a> {
    pub raw: &'a [u8],
    pub scheme: &'a str,
    pub user: Option<&'a [u8]>,
    pub password: Option<&'a [u8]>,
    pub host: Option<Host<'a>>,
    pub port: Option<u16>,
    pub params: Params<'a>,
    pub headers: Option<&'a [u8]>,
}

impl<'a> Uri<'a> {
    pub fn parse(raw: &'a [u8]) -> Option<Uri<'a>> {
        let colon = raw.iter().position(|&b| b == b':')?;
        let sb = &raw[..colon];
        if sb.is_empty()
            || !sb[0].is_ascii_alphabetic()
            || !sb
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        {
            return None;
        }
        let scheme = std::str::from_utf8(sb).ok()?;
        let rest = &raw[colon + 1..];
        // One pass: no white space, control character or angle bracket anywhere, and where
        // the user part ends (the first `@`).
        let mut at = None;
        for (i, &b) in rest.iter().enumerate() {
            if b <= b' ' || b == 0x7f || b == b'<' || b == b'>' {
                return None;
            }
            if b == b'@' && at.is_none() {
                at = Some(i);
            }
        }
        if rest.is_empty() {
            return None;
        }
        let mut uri = Uri {
            raw,
            scheme,
            user: None,
            password: None,
            host: None,
            port: None,
            params: Params::default(),
            headers: None,
        };
        if !(scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips")) {
            return Some(uri);
        }
        let hostpart = match at {
            Some(at) => {
                let ui = &rest[..at];
                if ui.is_empty() || !valid_escapes(ui) {
                    return None;
                }
                match ui.iter().position(|&b| b == b':') {
                    Some(c) => {
                        uri.user = Some(&ui[..c]);
                        uri.password = Some(&ui[c + 1..]);
                    }
                    None => uri.user = Some(ui),
                }
                &rest[at + 1..]
            }
            None => rest,
        };
        // The host ends at the first ';' that is not inside an IPv6 reference, the
        // parameters at the first '?'.
        let q = hostpart
            .iter()
            .position(|&b| b == b'?')
            .unwrap_or(hostpart.len());
        if q < hostpart.len() {
            uri.headers = Some(&hostpart[q + 1..]);
        }
        let before_headers = &hostpart[..q];
        let search_from = if before_headers.first() == Some(&b'[') {
            before_headers.iter().position(|&b| b == b']')?
        } else {
            0
        };
        let host_end = before_headers[search_from..]
            .iter()
            .position(|&b| b == b';')
            .map_or(before_headers.len(), |i| search_from + i);
        // No white space can be left here: the pass above refused it.
        let (host, port) = parse_hostport(&before_headers[..host_end])?;
        uri.host = Some(host);
        uri.port = port;
        uri.params = scan::parse_params_where(&before_headers[host_end..], |p| {
            valid_escapes(p.name) && p.value.is_none_or(valid_escapes)
        })
        .ok()?;
        Some(uri)
    }

    /// A URI parameter by name (case-insensitive).
    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params.get(name)
    }

    /// `lr` marks a loose router (RFC 3261 §16.12.1.1).
    pub fn is_loose_router(&self) -> bool {
        self.param("lr").is_some()
    }
}

/// Every `%` must be followed by two hex digits.
fn valid_escapes(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if !(s.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// `name-addr / addr-spec` followed by header parameters (RFC 3261 §20.10, §25.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameAddr<'a> {
    /// The display name as written (quoted strings keep their quotes).
    pub display: Option<&'a [u8]>,
    pub uri: &'a [u8],
    pub params: Params<'a>,
}

impl<'a> NameAddr<'a> {
    pub fn parse(value: &'a [u8]) -> Option<NameAddr<'a>> {
        let v = scan::trim(value);
        let (display, uri, rest) = if v.first() == Some(&b'"') {
            let q = scan::quoted_len(v)?;
            let after = scan::trim_start(&v[q..]);
            let inner = after.strip_prefix(b"<")?;
            let close = inner.iter().position(|&b| b == b'>')?;
            (Some(&v[..q]), &inner[..close], &inner[close + 1..])
        } else if let Some(lt) = v.iter().position(|&b| b == b'<') {
            let display = scan::trim(&v[..lt]);
            // An unquoted display name is a sequence of tokens separated by white space.
            if !display
                .split(|&b| scan::is_lws(b))
                .all(|t| t.is_empty() || scan::is_token_str(t))
            {
                return None;
            }
            let close = lt + v[lt..].iter().position(|&b| b == b'>')?;
            let display = (!display.is_empty()).then_some(display);
            (display, &v[lt + 1..close], &v[close + 1..])
        } else {
            // addr-spec: parameters after the URI belong to the header, not the URI.
            let semi = v.iter().position(|&b| b == b';').unwrap_or(v.len());
            (None, scan::trim(&v[..semi]), &v[semi..])
        };
        Uri::parse(uri)?;
        let params = scan::parse_params(rest).ok()?;
        Some(NameAddr {
            display,
            uri,
            params,
        })
    }

    pub fn uri(&self) -> Option<Uri<'a>> {
        Uri::parse(self.uri)
    }

    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params.get(name)
    }

    pub fn tag(&self) -> Option<&'a [u8]> {
        self.param("tag").flatten()
    }

    /// The URI of a name-addr or addr-spec value, parsed once: what routing needs of a
    /// Route or Contact. Agrees with `parse(value)?.uri()` on every value `parse` accepts.
    pub fn uri_of(value: &'a [u8]) -> Option<Uri<'a>> {
        let v = scan::trim(value);
        let uri = if v.first() == Some(&b'"') {
            let after = scan::trim_start(&v[scan::quoted_len(v)?..]);
            let inner = after.strip_prefix(b"<")?;
            &inner[..inner.iter().position(|&b| b == b'>')?]
        } else if let Some(lt) = v.iter().position(|&b| b == b'<') {
            &v[lt + 1..lt + v[lt..].iter().position(|&b| b == b'>')?]
        } else {
            scan::trim(&v[..v.iter().position(|&b| b == b';').unwrap_or(v.len())])
        };
        Uri::parse(uri)
    }

    /// The `tag` parameter of a name-addr or addr-spec value (From, To), found without
    /// parsing the display name or the URI: what a proxy's receive stage needs of To, at a
    /// fraction of [`NameAddr::parse`]'s cost. Agrees with `parse(value)?.tag()` on every
    /// value `parse` accepts; `None` when there is no tag or the brackets do not close.
    pub fn tag_of(value: &'a [u8]) -> Option<&'a [u8]> {
        let v = scan::trim(value);
        let params = if v.first() == Some(&b'"') {
            let after = &v[scan::quoted_len(v)?..];
            &after[after.iter().position(|&b| b == b'>')? + 1..]
        } else if let Some(lt) = v.iter().position(|&b| b == b'<') {
            &v[lt + v[lt..].iter().position(|&b| b == b'>')? + 1..]
        } else {
            &v[v.iter().position(|&b| b == b';').unwrap_or(v.len())..]
        };
        scan::params(params)
            .map_while(Result::ok)
            .find(|p| p.name.eq_ignore_ascii_case(b"tag"))?
            .value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-by-byte definition the one-pass [`Uri::parse`] must agree with.
    fn uri_reference(raw: &[u8]) -> Option<Uri<'_>> {
        let colon = raw.iter().position(|&b| b == b':')?;
        let scheme = std::str::from_utf8(&raw[..colon]).ok()?;
        let sb = scheme.as_bytes();
        if sb.is_empty()
            || !sb[0].is_ascii_alphabetic()
            || !sb
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        {
            return None;
        }
        let rest = &raw[colon + 1..];
        if rest.is_empty()
            || rest
                .iter()
                .any(|&b| b <= b' ' || b == 0x7f || b == b'<' || b == b'>')
        {
            return None;
        }
        let mut uri = Uri {
            raw,
            scheme,
            user: None,
            password: None,
            host: None,
            port: None,
            params: Params::default(),
            headers: None,
        };
        if !(scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips")) {
            return Some(uri);
        }
        let (hostpart, userinfo) = match rest.iter().position(|&b| b == b'@') {
            Some(at) => (&rest[at + 1..], Some(&rest[..at])),
            None => (rest, None),
        };
        if let Some(ui) = userinfo {
            if ui.is_empty() || !valid_escapes(ui) {
                return None;
            }
            match ui.iter().position(|&b| b == b':') {
                Some(c) => {
                    uri.user = Some(&ui[..c]);
                    uri.password = Some(&ui[c + 1..]);
                }
                None => uri.user = Some(ui),
            }
        }
        let q = hostpart
            .iter()
            .position(|&b| b == b'?')
            .unwrap_or(hostpart.len());
        if q < hostpart.len() {
            uri.headers = Some(&hostpart[q + 1..]);
        }
        let before_headers = &hostpart[..q];
        // The host ends at the first ';' that is not inside an IPv6 reference.
        let host_end = if before_headers.first() == Some(&b'[') {
            let close = before_headers.iter().position(|&b| b == b']')?;
            close
                + before_headers[close..]
                    .iter()
                    .position(|&b| b == b';')
                    .unwrap_or(before_headers.len() - close)
        } else {
            before_headers
                .iter()
                .position(|&b| b == b';')
                .unwrap_or(before_headers.len())
        };
        let hostport = &before_headers[..host_end];
        if hostport.iter().any(|&b| scan::is_lws(b)) {
            return None;
        }
        let (host, port) = parse_hostport(hostport)?;
        uri.host = Some(host);
        uri.port = port;
        uri.params = scan::parse_params_where(&before_headers[host_end..], |p| {
            valid_escapes(p.name) && p.value.is_none_or(valid_escapes)
        })
        .ok()?;
        Some(uri)
    }

    proptest::proptest! {
        #[test]
        fn the_uri_parse_agrees_with_its_reference(
            s in "(sips?|tel|x-1|1x)?:?([a-z%0-9;:]{0,6}@)?(\\[[0-9a-f:]{0,8}\\]|[a-z0-9._-]{0,12})(:[0-9 ]{0,6})?(;[a-z]{0,3}(=[a-z0-9%\\[\\]:]{0,5})?){0,3}(\\?[a-z=&]{0,5})?[ <>]?"
        ) {
            proptest::prop_assert_eq!(Uri::parse(s.as_bytes()), uri_reference(s.as_bytes()));
        }

        #[test]
        fn the_host_parse_agrees_with_its_definition(s in "[a-z0-9._-]{0,12}") {
            let reference = if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                s.parse().ok().map(Host::V4)
            } else {
                let t = s.strip_suffix('.').unwrap_or(&s);
                (!t.is_empty()
                    && t.split('.').all(|l| {
                        let b = l.as_bytes();
                        !b.is_empty()
                            && b[0].is_ascii_alphanumeric()
                            && b[b.len() - 1].is_ascii_alphanumeric()
                            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
                    }))
                .then_some(Host::Name(&s))
            };
            proptest::prop_assert_eq!(Host::parse(s.as_bytes()), reference);
        }
    }

    #[test]
    fn the_fast_tag_agrees_with_the_full_parse() {
        for v in [
            &b"<sip:bob@example.com>;tag=a6c85cf"[..],
            b"Bob <sip:bob@example.com;tag=not-this>;x=1; TAG = b2",
            b"\"Bob; <tag=q>\" <sip:bob@example.com>;tag=c3",
            b"sip:bob@example.com;tag=d4",
            b"sip:bob@example.com",
            b"<sip:bob@example.com;tag=uri-param-only>",
            b"  <sip:[2001:db8::1]:5060>  ;  tag=e5 ; lr",
        ] {
            let full = NameAddr::parse(v).and_then(|n| n.tag());
            assert_eq!(NameAddr::tag_of(v), full, "{}", String::from_utf8_lossy(v));
        }
        assert_eq!(NameAddr::tag_of(b"<sip:open;tag=x"), None);
    }

    #[test]
    fn the_single_uri_parse_agrees_with_the_full_one() {
        for v in [
            &b"<sip:192.0.2.1:5060;lr>"[..],
            b"\"Proxy <two>\" <sip:p2.example.com;lr>;x=y",
            b"Bob <sip:bob@[2001:db8::1]:5070;transport=udp>",
            b"sip:carol@example.com;tag=t",
        ] {
            let full = NameAddr::parse(v).and_then(|n| n.uri());
            assert_eq!(NameAddr::uri_of(v), full, "{}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn the_ipv4_parse_agrees_with_std() {
        for s in [
            "192.0.2.1",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            "1.2.3.4.",
            ".1.2.3",
            "1234.1.1.1",
            "10.0.0.010",
            "",
            "0.0.0.00",
            "9.99.199.249",
        ] {
            assert_eq!(
                parse_ipv4(s.as_bytes()),
                s.parse::<Ipv4Addr>().ok(),
                "{s:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn the_ipv4_parse_agrees_with_std_on_digits_and_dots(s in "[0-9.]{0,17}") {
            proptest::prop_assert_eq!(parse_ipv4(s.as_bytes()), s.parse::<Ipv4Addr>().ok());
        }
    }

    #[test]
    fn sip_uri_parts() {
        let u =
            Uri::parse(b"sip:alice:secret@[2001:db8::10]:5070;transport=tcp;lr?subject=x").unwrap();
        assert_eq!(u.scheme, "sip");
        assert_eq!(u.user, Some(&b"alice"[..]));
        assert_eq!(u.password, Some(&b"secret"[..]));
        assert_eq!(u.host, Some(Host::V6("2001:db8::10".parse().unwrap())));
        assert_eq!(u.port, Some(5070));
        assert!(u.is_loose_router());
        assert_eq!(u.headers, Some(&b"subject=x"[..]));
    }

    #[test]
    fn bad_uris_are_rejected() {
        assert!(
            Uri::parse(b"sip:user@2001:db8::10").is_none(),
            "unbracketed IPv6"
        );
        assert!(
            Uri::parse(b"sip:user@host:99999").is_none(),
            "port out of range"
        );
        assert!(Uri::parse(b"sip:us%zzer@host").is_none(), "bad escape");
        assert!(Uri::parse(b"nocolon").is_none());
        assert!(Uri::parse(b"tel:+1-212-555-0101").is_some());
    }

    #[test]
    fn name_addr_forms() {
        let n = NameAddr::parse(br#""Bob \"B\"" <sip:bob@example.com>;tag=abc"#).unwrap();
        assert_eq!(n.display, Some(&br#""Bob \"B\"""#[..]));
        assert_eq!(n.tag(), Some(&b"abc"[..]));
        let n = NameAddr::parse(b"sip:bob@example.com;tag=xyz").unwrap();
        assert_eq!(n.uri, b"sip:bob@example.com");
        assert_eq!(n.tag(), Some(&b"xyz"[..]));
        let n = NameAddr::parse(b"Bob Smith <sip:bob@example.com>").unwrap();
        assert_eq!(n.display, Some(&b"Bob Smith"[..]));
        assert!(NameAddr::parse(br#""unterminated <sip:bob@example.com>"#).is_none());
    }
}
