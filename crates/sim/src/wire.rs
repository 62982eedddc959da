//! The SIP messages of the paper's call flow (§2.1, Figure 1), written by the user agents,
//! and the labels the ledger counts retransmissions by.
//!
//! Messages are complete RFC 3261 messages laid out as the load generator writes them
//! (`sluice load uac|uas`), header for header, so that a simulated byte stream is as long
//! as a live one: TCP's buffers hold bytes, and what they hold decides the outcome (Shen
//! and Schulzrinne 2010, §5). The Call-ID begins with the call's number in decimal, which
//! lets the simulator's metrics find a call from any of its messages. The proxies
//! record-route, so the caller's ACK and BYE carry the route set the 2xx's Record-Route
//! gives (§12.1.2): its SE, then the RE, and go to the callee's Contact. The topology is
//! static (§4.2), so the caller writes that route set from the address plan instead of
//! reading it from each 2xx.

use bytes::{Bytes, BytesMut};
use sluice_sip::{edit, Message, Method};
use std::net::Ipv4Addr;

/// The call number in a Call-ID written by [`CallerTemplates`].
pub(crate) fn call_of(msg: &Message) -> Option<u32> {
    call_of_call_id(msg.call_id()?)
}

/// The call number a Call-ID written by [`CallerTemplates`] begins with.
pub(crate) fn call_of_call_id(id: &[u8]) -> Option<u32> {
    parse_call_number(&id[..id.iter().position(|&b| b == b'-').unwrap_or(id.len())])
}

/// A call number (decimal digits only).
fn parse_call_number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(d - b'0');
    }
    u32::try_from(n).ok()
}

/// The requests one caller population sends.
#[derive(Clone, Debug)]
pub(crate) struct CallerTemplates {
    /// `ip:5060`, the caller's sent-by.
    local: String,
    /// The request line's end and the Via's start, with the transport.
    via: &'static [u8],
    /// `;transport=tcp` over TCP, for the Contact and the callee's URI.
    transport_param: &'static [u8],
    /// The INVITE's session description (empty: none).
    body: Bytes,
    /// The Route header fields (the SE, then the RE) and their line ends, for in-dialog
    /// requests.
    route: Vec<u8>,
}

/// The INVITE's Request-URI and To: the service the callers dial.
const SERVICE_URI: &[u8] = b"sip:service@10.4.0.1:5060";
/// The callee's URI in its Contact ([`callee_contact`]), where in-dialog requests go.
const CALLEE_URI: &[u8] = b"sip:uas@10.4.0.1:5060";
/// The callee's To tag, as the load generator's UAS writes it.
const CALLEE_TAG: &str = "sluice-uas";
/// What the load generator writes into every Via branch and Call-ID to tell its runs
/// apart (a run token; 12 digits, as a live run's usually has).
const RUN_TOKEN: &[u8] = b"100000000001";

/// The callee's Contact in its 2xx, over TCP or UDP.
fn callee_contact(tcp: bool) -> &'static [u8] {
    if tcp {
        b"<sip:uas@10.4.0.1:5060;transport=tcp>"
    } else {
        b"<sip:uas@10.4.0.1:5060>"
    }
}

/// The callee's answer to an INVITE, as the load generator's UAS writes it: the dialog's
/// responses copy the Record-Route (RFC 3261 §12.1.1), and the 2xx gives a Contact and
/// carries the answer's session description.
pub(crate) fn callee_response(invite: &Message, status: u16, tcp: bool, body: &[u8]) -> Bytes {
    let b = edit::response_to(invite, status)
        .to_tag(CALLEE_TAG)
        .record_route();
    if status / 100 == 2 {
        b.header("Contact", callee_contact(tcp))
            .body(sluice_sip::sdp::CONTENT_TYPE, body)
            .build()
    } else {
        b.build()
    }
}

impl CallerTemplates {
    /// A caller at `ip` behind the SE at `se`, in front of the RE at `re`, sending over
    /// TCP or UDP, its INVITEs with `body` (see [`sluice_sip::sdp::session_description`]).
    pub fn new(ip: Ipv4Addr, se: Ipv4Addr, re: Ipv4Addr, tcp: bool, body: Bytes) -> Self {
        Self {
            local: format!("{ip}:5060"),
            body,
            via: if tcp {
                b" SIP/2.0\r\nVia: SIP/2.0/TCP "
            } else {
                b" SIP/2.0\r\nVia: SIP/2.0/UDP "
            },
            transport_param: if tcp { b";transport=tcp" } else { b"" },
            route: format!("Route: <sip:{se}:5060;lr>\r\nRoute: <sip:{re}:5060;lr>\r\n")
                .into_bytes(),
        }
    }

    fn request(
        &self,
        method: &[u8],
        call: u32,
        branch_suffix: u8,
        cseq: u8,
        to_tag: bool,
    ) -> Bytes {
        let mut digits = itoa::Buffer::new();
        let call = digits.format(call).as_bytes();
        let local = self.local.as_bytes();
        let invite = method == b"INVITE";
        let mut b = BytesMut::with_capacity(400);
        let (target, target_params): (&[u8], &[u8]) = if to_tag {
            (CALLEE_URI, self.transport_param)
        } else {
            (SERVICE_URI, b"")
        };
        for part in [
            method,
            b" ",
            target,
            target_params,
            self.via,
            local,
            b";branch=z9hG4bK-",
            RUN_TOKEN,
            b"-",
            call,
            &[b'-', branch_suffix],
            b";rport\r\n",
            if to_tag { &self.route } else { b"" },
            b"Max-Forwards: 70\r\nFrom: <sip:sluice@",
            local,
            b">;tag=",
            call,
            b"\r\nTo: <",
            SERVICE_URI,
            if to_tag { b">;tag=" } else { b">" },
            if to_tag { CALLEE_TAG.as_bytes() } else { b"" },
            b"\r\nCall-ID: ",
            call,
            b"-",
            RUN_TOKEN,
            b"@sluice\r\nCSeq: ",
            &[b'0' + cseq],
            b" ",
            method,
            b"\r\n",
        ] {
            b.extend_from_slice(part);
        }
        if invite {
            for part in [
                b"Contact: <sip:sluice@",
                local,
                self.transport_param,
                b">\r\n",
            ] {
                b.extend_from_slice(part);
            }
        }
        let body: &[u8] = if invite { &self.body } else { b"" };
        end_with_body(&mut b, body);
        b.freeze()
    }

    pub fn invite(&self, call: u32) -> Bytes {
        self.request(b"INVITE", call, b'i', 1, false)
    }

    /// The ACK for the 2xx (a new transaction, §13.2.2.4).
    pub fn ack(&self, call: u32) -> Bytes {
        self.request(b"ACK", call, b'a', 1, true)
    }

    pub fn bye(&self, call: u32) -> Bytes {
        self.request(b"BYE", call, b'b', 2, true)
    }
}

/// Ends a message whose header lines are in `b` with its Content-Length (and, with a body,
/// Content-Type) and `body`.
fn end_with_body(b: &mut BytesMut, body: &[u8]) {
    if body.is_empty() {
        b.extend_from_slice(b"Content-Length: 0\r\n\r\n");
        return;
    }
    b.extend_from_slice(b"Content-Type: ");
    b.extend_from_slice(sluice_sip::sdp::CONTENT_TYPE.as_bytes());
    b.extend_from_slice(b"\r\nContent-Length: ");
    b.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    b.extend_from_slice(b"\r\n\r\n");
    b.extend_from_slice(body);
}

/// Message kinds the report counts retransmissions of.
pub(crate) fn label(msg: &Message) -> String {
    match (msg.method(), msg.status()) {
        (Some(m), _) => m.as_str().to_owned(),
        (None, Some(status)) => {
            let method = msg.cseq().map_or("?", |c| c.method.as_str());
            format!("{status}-{method}")
        }
        (None, None) => "?".to_owned(),
    }
}

/// Built once: constructing a searcher per call cost more than the search.
static CSEQ_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\nCSeq: "));

/// [`label_key`] read straight from the bytes of a message the simulator wrote, without a
/// parse: every retransmission is counted, and a full parse per copy was a twentieth of a
/// run. Covers the methods of the paper's call flow; anything else (or a message laid out
/// differently) returns `None` and is parsed.
pub(crate) fn label_key_of_bytes(b: &[u8]) -> Option<(u16, u8)> {
    let method = |token: &[u8]| match token {
        b"INVITE" => Some(1),
        b"ACK" => Some(2),
        b"BYE" => Some(3),
        b"CANCEL" => Some(4),
        _ => None,
    };
    let token_at = |from: usize| {
        let rest = b.get(from..)?;
        let end = rest.iter().position(|&c| !c.is_ascii_alphabetic())?;
        method(&rest[..end])
    };
    if let Some(status) = b.strip_prefix(b"SIP/2.0 ") {
        let digits = status.get(..3)?;
        if !digits.iter().all(u8::is_ascii_digit) || status.get(3) != Some(&b' ') {
            return None;
        }
        let code = digits
            .iter()
            .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
        let at = CSEQ_FINDER.find(b)? + 8;
        let number = b[at..].iter().position(|&c| !c.is_ascii_digit())?;
        if b.get(at + number) != Some(&b' ') {
            return None;
        }
        Some((code, token_at(at + number + 1)?))
    } else {
        let end = b.iter().position(|&c| c == b' ')?;
        Some((0, method(&b[..end])?))
    }
}

/// A compact key for [`label`], to count without allocating.
pub(crate) fn label_key(msg: &Message) -> (u16, u8) {
    let method = |m: Option<&Method>| match m {
        Some(Method::Invite) => 1,
        Some(Method::Ack) => 2,
        Some(Method::Bye) => 3,
        Some(Method::Cancel) => 4,
        Some(_) => 5,
        None => 0,
    };
    match msg.status() {
        Some(s) => (s, method(msg.cseq().map(|c| &c.method))),
        None => (0, method(msg.method())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sip::HeaderName;

    #[test]
    fn templates_parse_and_carry_the_call_number() {
        let t = templates();
        for (bytes, method, branch_end) in [
            (t.invite(42), Method::Invite, &b"-42-i"[..]),
            (t.ack(42), Method::Ack, b"-42-a"),
            (t.bye(42), Method::Bye, b"-42-b"),
        ] {
            let m = Message::parse(bytes).unwrap();
            assert_eq!(m.method(), Some(&method));
            assert_eq!(call_of(&m), Some(42));
            assert_eq!(m.cseq().unwrap().method, method);
            assert!(m.top_via_branch().unwrap().ends_with(branch_end));
            // In-dialog requests follow the route set: the SE first, then the RE.
            let routes: Vec<_> = m
                .header_values(HeaderName::Route)
                .map(Result::unwrap)
                .collect();
            if method == Method::Invite {
                assert!(routes.is_empty());
            } else {
                assert_eq!(
                    routes,
                    [
                        &b"<sip:10.2.0.2:5060;lr>"[..],
                        &b"<sip:10.3.0.1:5060;lr>"[..]
                    ]
                );
            }
        }
    }

    fn templates() -> CallerTemplates {
        CallerTemplates::new(
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(10, 2, 0, 2),
            Ipv4Addr::new(10, 3, 0, 1),
            false,
            Bytes::new(),
        )
    }

    #[test]
    fn session_descriptions_ride_in_the_invite_and_its_200() {
        let sdp = sluice_sip::sdp::session_description(600, [10, 1, 0, 2].into());
        let t = CallerTemplates::new(
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(10, 2, 0, 2),
            Ipv4Addr::new(10, 3, 0, 1),
            true,
            sdp.clone(),
        );
        let invite = Message::parse(t.invite(3)).unwrap();
        assert_eq!(invite.body(), &sdp[..]);
        assert!(invite
            .as_bytes()
            .starts_with(b"INVITE sip:service@10.4.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/TCP "));
        assert_eq!(Message::parse(t.ack(3)).unwrap().body(), b"");
        let ok = Message::parse(callee_response(&invite, 200, true, &sdp)).unwrap();
        assert_eq!(ok.status(), Some(200));
        assert_eq!(ok.body(), &sdp[..]);
        // The stream framer cuts it by its Content-Length.
        let mut f = sluice_sip::StreamFramer::new(65_535);
        f.push(ok.as_bytes());
        f.push(invite.as_bytes());
        assert_eq!(f.next_message().unwrap().unwrap(), ok.as_bytes());
        assert_eq!(f.next_message().unwrap().unwrap(), invite.as_bytes());
    }

    #[test]
    fn labels_from_bytes_agree_with_the_parse() {
        let t = templates();
        let invite = Message::parse(t.invite(7)).unwrap();
        let bye = Message::parse(t.bye(7)).unwrap();
        let mut all = vec![t.invite(7), t.ack(7), t.bye(7)];
        for (req, status) in [
            (&invite, 100),
            (&invite, 180),
            (&invite, 200),
            (&invite, 503),
        ] {
            all.push(sluice_sip::edit::response_to(req, status).build());
        }
        all.push(sluice_sip::edit::response_to(&bye, 200).build());
        for bytes in all {
            let parsed = label_key(&Message::parse(bytes.clone()).unwrap());
            assert_eq!(label_key_of_bytes(&bytes), Some(parsed), "{bytes:?}");
        }
        // Not the call flow's: left to the parse.
        assert_eq!(label_key_of_bytes(b"OPTIONS sip:x SIP/2.0\r\n\r\n"), None);
        assert_eq!(label_key_of_bytes(b"SIP/2.0 20 OK\r\n"), None);
    }

    /// The simulated callers write, byte for byte, what `sluice load uac` writes for the
    /// same addresses, and the callee answers as `sluice load uas` does: the byte streams
    /// TCP's buffers hold are the live ones.
    #[test]
    fn callers_write_what_the_load_generator_writes() {
        use sluice_load::uac::{Hold, Uac, UacConfig};
        use sluice_time::Time;
        use sluice_txn::Peer;
        let (caller, se, re) = (
            Ipv4Addr::new(10, 1, 0, 2),
            Ipv4Addr::new(10, 2, 0, 2),
            Ipv4Addr::new(10, 3, 0, 1),
        );
        let sdp = sluice_sip::sdp::session_description(600, caller.into());
        let sim = CallerTemplates::new(caller, se, re, true, sdp.clone());
        let se_addr = std::net::SocketAddr::from((se, 5060));
        let mut cfg = UacConfig::new((caller, 5060).into(), se_addr, 1.0);
        cfg.transport = sluice_txn::Transport::Tcp;
        cfg.request_uri = std::str::from_utf8(SERVICE_URI).unwrap().to_owned();
        cfg.run_token = std::str::from_utf8(RUN_TOKEN).unwrap().parse().unwrap();
        cfg.invite_body = sdp.clone();
        cfg.hold = Hold::Constant(std::time::Duration::ZERO);
        cfg.max_calls = Some(1);
        let mut uac = Uac::new(cfg, Time::ZERO);
        uac.handle_timeout(Time::ZERO);
        let invite = uac.poll_transmit().expect("the INVITE").payload;
        assert_eq!(
            std::str::from_utf8(&invite).unwrap(),
            std::str::from_utf8(&sim.invite(0)).unwrap()
        );
        // The INVITE as it reaches the callee, record-routed by the SE and the RE.
        let at_callee = String::from_utf8(invite.to_vec()).unwrap().replacen(
            "Max-Forwards: 70\r\n",
            &format!(
                "Record-Route: <sip:{re}:5060;lr>\r\nRecord-Route: <sip:{se}:5060;lr>\r\nMax-Forwards: 68\r\n"
            ),
            1,
        );
        let at_callee = Message::parse(Bytes::from(at_callee)).unwrap();
        let ok = callee_response(&at_callee, 200, true, &sdp);
        uac.handle_message(Time::from_millis(1), ok, Peer::tcp(se_addr));
        uac.handle_timeout(Time::from_millis(1));
        let sent: Vec<Bytes> = std::iter::from_fn(|| uac.poll_transmit())
            .map(|o| o.payload)
            .collect();
        let text = |b: &Bytes| std::str::from_utf8(b).unwrap().to_owned();
        assert_eq!(sent.len(), 2, "the ACK and the BYE: {sent:?}");
        assert_eq!(text(&sent[0]), text(&sim.ack(0)));
        assert_eq!(text(&sent[1]), text(&sim.bye(0)));
    }
}
