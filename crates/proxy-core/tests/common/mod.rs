//! Helpers shared by the proxy's integration tests (each test file uses some of them).
#![allow(dead_code)]

use std::fmt::Write as _;

use sluice_proxy_core::Transmit;
use sluice_sip::Message;

/// A final response from the next hop to a forwarded request, its top Via edited by `via`.
pub fn answer(forwarded: &Transmit, status: u16, via: impl Fn(&str) -> String) -> String {
    let m = Message::parse(forwarded.payload.clone()).unwrap();
    let mut out = format!("SIP/2.0 {status} Whatever\r\n");
    let mut first = true;
    for h in m.headers() {
        let name = std::str::from_utf8(h.raw_name).unwrap();
        let value = String::from_utf8_lossy(h.value);
        if name.eq_ignore_ascii_case("Via") && first {
            first = false;
            let _ = write!(out, "Via: {}\r\n", via(&value));
        } else if ["Via", "From", "Call-ID", "CSeq"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
        {
            let _ = write!(out, "{name}: {value}\r\n");
        } else if name.eq_ignore_ascii_case("To") {
            let _ = write!(out, "To: {value};tag=b1\r\n");
        }
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    out
}
