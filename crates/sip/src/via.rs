//! The Via header (RFC 3261 §20.42, §18.2.1 `received`, RFC 3581 `rport`) and the overload
//! control parameters of RFC 7339 §5 (`oc`, `oc-algo`, `oc-validity`, `oc-seq`).

use std::cmp::Ordering;
use std::fmt;

use crate::error::{ErrorKind, ParseError, Result};
use crate::message::Message;
use crate::scan::{self, Param};
use crate::uri::{parse_hostport, Host};
use crate::HeaderName;

/// A Via parameter present with a value that does not follow its grammar. RFC 7339 §5.2
/// says such values are ignored; the caller decides whether to count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {0} parameter")]
pub struct BadParam(pub &'static str);

/// One Via value: `SIP/2.0/UDP host:port;params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Via<'a> {
    pub raw: &'a [u8],
    pub protocol: &'a [u8],
    pub version: &'a [u8],
    pub transport: &'a [u8],
    pub host: Host<'a>,
    pub port: Option<u16>,
    /// Collected at the parse, unlike a URI's: a Via's parameters are looked up several
    /// times each (branch, rport, received, the overload parameters). Inline up to four.
    pub params: smallvec::SmallVec<[Param<'a>; 4]>,
}

/// The `oc` parameter: present without a value in requests (the client supports overload
/// control), with a value in responses (RFC 7339 §5.1, §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Oc {
    Supported,
    Value(u32),
}

/// An `oc-seq` value: `1*12DIGIT "." 1*5DIGIT` (RFC 7339 §4). It orders as a decimal number,
/// so `1.5 > 1.45`; the fraction is kept scaled to six digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OcSeq {
    pub integer: u64,
    /// The fraction in millionths.
    pub micros: u32,
}

impl OcSeq {
    pub fn parse(s: &[u8]) -> Option<OcSeq> {
        let s = std::str::from_utf8(s).ok()?;
        let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
        if int.is_empty()
            || frac.is_empty()
            || int.len() > 12
            || frac.len() > 6
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let micros = frac.parse::<u32>().ok()? * 10u32.pow(6 - frac.len() as u32);
        Some(OcSeq {
            integer: int.parse().ok()?,
            micros,
        })
    }
}

impl Ord for OcSeq {
    fn cmp(&self, other: &OcSeq) -> Ordering {
        (self.integer, self.micros).cmp(&(other.integer, other.micros))
    }
}

impl PartialOrd for OcSeq {
    fn partial_cmp(&self, other: &OcSeq) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for OcSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frac = format!("{:06}", self.micros);
        let frac = frac.trim_end_matches('0');
        write!(
            f,
            "{}.{}",
            self.integer,
            if frac.is_empty() { "0" } else { frac }
        )
    }
}

impl<'a> Via<'a> {
    /// Parses one Via value (already split from its list).
    pub fn parse(raw: &'a [u8]) -> Option<Via<'a>> {
        let v = scan::trim(raw);
        // sent-protocol: name SLASH version SLASH transport, SLASH = SWS "/" SWS.
        let mut parts = [&v[..0]; 3];
        let mut rest = v;
        for (i, part) in parts.iter_mut().enumerate() {
            rest = scan::trim_start(rest);
            let len = rest
                .iter()
                .position(|&b| !scan::is_token(b))
                .unwrap_or(rest.len());
            if len == 0 {
                return None;
            }
            *part = &rest[..len];
            rest = scan::trim_start(&rest[len..]);
            if i < 2 {
                rest = rest.strip_prefix(b"/")?;
            }
        }
        let semi = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
        let (host, port) = parse_hostport(&rest[..semi])?;
        // A plain loop: collecting through `Result` cost more than the parse itself.
        let mut params = smallvec::SmallVec::new();
        for p in scan::params(&rest[semi..]) {
            params.push(p.ok()?);
        }
        Some(Via {
            raw: v,
            protocol: parts[0],
            version: parts[1],
            transport: parts[2],
            host,
            port,
            params,
        })
    }

    /// A parameter's raw value: `None` if absent, `Some(None)` if present without a value.
    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|p| p.value)
    }

    pub fn branch(&self) -> Option<&'a [u8]> {
        self.param("branch").flatten()
    }

    pub fn received(&self) -> Option<&'a [u8]> {
        self.param("received").flatten()
    }

    /// `rport` (RFC 3581): `Some(None)` when requested, `Some(Some(port))` when filled in.
    pub fn rport(&self) -> Option<Option<u16>> {
        self.param("rport").map(|v| {
            v.and_then(scan::parse_u32)
                .and_then(|p| u16::try_from(p).ok())
        })
    }

    pub fn ttl(&self) -> Option<u8> {
        self.param("ttl")
            .flatten()
            .and_then(scan::parse_u32)
            .and_then(|t| u8::try_from(t).ok())
    }

    pub fn maddr(&self) -> Option<&'a [u8]> {
        self.param("maddr").flatten()
    }

    /// The `oc` parameter; an error if its value is not a number.
    pub fn oc(&self) -> std::result::Result<Option<Oc>, BadParam> {
        match self.param("oc") {
            None => Ok(None),
            Some(None) => Ok(Some(Oc::Supported)),
            Some(Some(v)) => scan::parse_u32(v)
                .map(|n| Some(Oc::Value(n)))
                .ok_or(BadParam("oc")),
        }
    }

    /// The algorithms listed in `oc-algo`, quotes removed (e.g. `["loss", "rate"]`).
    pub fn oc_algo(&self) -> Vec<String> {
        self.param("oc-algo")
            .flatten()
            .map(|v| {
                String::from_utf8_lossy(&scan::unquote(v))
                    .split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The tokens of `oc-algo` as written, quotes and blanks removed, without allocating
    /// (the receive stage reads them on every request from a neighbour).
    pub fn oc_algo_tokens(&self) -> impl Iterator<Item = &'a [u8]> {
        let list = self.param("oc-algo").flatten().unwrap_or_default();
        let list = list
            .strip_prefix(b"\"")
            .and_then(|l| l.strip_suffix(b"\""))
            .unwrap_or(list);
        list.split(|&b| b == b',')
            .map(scan::trim)
            .filter(|t| !t.is_empty())
    }

    /// `oc-validity` in milliseconds; an error if it is not a number.
    pub fn oc_validity(&self) -> std::result::Result<Option<u32>, BadParam> {
        match self.param("oc-validity") {
            None => Ok(None),
            Some(v) => v
                .and_then(scan::parse_u32)
                .map(Some)
                .ok_or(BadParam("oc-validity")),
        }
    }

    /// `oc-seq`; an error if it is not `digits.digits`.
    pub fn oc_seq(&self) -> std::result::Result<Option<OcSeq>, BadParam> {
        match self.param("oc-seq") {
            None => Ok(None),
            Some(v) => v.and_then(OcSeq::parse).map(Some).ok_or(BadParam("oc-seq")),
        }
    }

    /// The `sent-by` address (host and port as written).
    pub fn sent_by(&self) -> (Host<'a>, Option<u16>) {
        (self.host, self.port)
    }

    /// Over a reliable transport? (TCP, TLS, SCTP, WS, WSS)
    pub fn is_reliable(&self) -> bool {
        !self.transport.eq_ignore_ascii_case(b"UDP")
    }
}

impl Message {
    /// The topmost Via, fully parsed.
    pub fn top_via(&self) -> Result<Via<'_>> {
        self.vias().next().unwrap_or(Err(ParseError::new(
            ErrorKind::MissingHeader { header: "Via" },
            0,
        )))
    }

    /// All Via values in order, fully parsed.
    pub fn vias(&self) -> impl Iterator<Item = Result<Via<'_>>> + '_ {
        self.header_values(HeaderName::Via).map(move |v| {
            let v = v?;
            Via::parse(v).ok_or_else(|| {
                ParseError::new(
                    ErrorKind::BadHeaderValue { header: "Via" },
                    self.offset_of(v),
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oc_algo_tokens_agree_with_the_allocated_list() {
        for raw in [
            &b"SIP/2.0/UDP h;branch=z9hG4bK1;oc;oc-algo=\"Loss, rate ,sluicewin\""[..],
            b"SIP/2.0/UDP h;branch=z9hG4bK1;oc-algo=loss",
            b"SIP/2.0/UDP h;branch=z9hG4bK1;oc",
            b"SIP/2.0/UDP h;branch=z9hG4bK1;oc-algo=\",,\"",
        ] {
            let v = Via::parse(raw).unwrap();
            let tokens: Vec<String> = v
                .oc_algo_tokens()
                .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
                .collect();
            assert_eq!(tokens, v.oc_algo(), "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn via_with_whitespace_ipv6_and_rfc7339_params() {
        let v = Via::parse(
            b"SIP / 2.0 / UDP [2001:db8::9:1] : 5070 ;branch=z9hG4bKx;rport=5070;received=[2001:db8::9:255]\
;ttl=16;maddr=224.2.0.1;oc=20;oc-algo=\"loss, rate\";oc-validity=500;oc-seq=1282321615.782",
        )
        .unwrap();
        assert_eq!(v.transport, b"UDP");
        assert_eq!(v.host, Host::V6("2001:db8::9:1".parse().unwrap()));
        assert_eq!(v.port, Some(5070));
        assert_eq!(v.branch(), Some(&b"z9hG4bKx"[..]));
        assert_eq!(v.rport(), Some(Some(5070)));
        assert_eq!(v.received(), Some(&b"[2001:db8::9:255]"[..]));
        assert_eq!(v.ttl(), Some(16));
        assert_eq!(v.maddr(), Some(&b"224.2.0.1"[..]));
        assert_eq!(v.oc(), Ok(Some(Oc::Value(20))));
        assert_eq!(v.oc_algo(), vec!["loss".to_string(), "rate".to_string()]);
        assert_eq!(v.oc_validity(), Ok(Some(500)));
        assert_eq!(
            v.oc_seq(),
            Ok(Some(OcSeq {
                integer: 1_282_321_615,
                micros: 782_000
            }))
        );
        assert!(!v.is_reliable());
    }

    #[test]
    fn oc_without_value_means_supported() {
        let v = Via::parse(b"SIP/2.0/TCP h;branch=z9hG4bK1;oc;oc-algo=\"loss\"").unwrap();
        assert_eq!(v.oc(), Ok(Some(Oc::Supported)));
        assert!(v.is_reliable());
        let v = Via::parse(b"SIP/2.0/UDP h;oc=abc").unwrap();
        assert_eq!(v.oc(), Err(BadParam("oc")));
    }

    #[test]
    fn oc_seq_orders_as_a_decimal_number() {
        let a = OcSeq::parse(b"1.5").unwrap();
        let b = OcSeq::parse(b"1.45").unwrap();
        let c = OcSeq::parse(b"1.450").unwrap();
        assert!(a > b, "1.5 > 1.45 although 5 < 45");
        assert_eq!(b, c);
        assert!(OcSeq::parse(b"2.0").unwrap() > a);
        assert_eq!(b.to_string(), "1.45");
        assert!(OcSeq::parse(b"1.").is_none());
        assert!(OcSeq::parse(b"1.1234567").is_none());
        assert!(OcSeq::parse(b"x.1").is_none());
    }

    #[test]
    fn malformed_vias_are_rejected() {
        assert!(Via::parse(b"SIP/2.0 host").is_none());
        assert!(Via::parse(b"SIP/2.0/UDP").is_none());
        assert!(Via::parse(b"SIP/2.0/UDP host:port").is_none());
        assert!(Via::parse(b"SIP/2.0/UDP host;branch=\"open").is_none());
    }
}
