//! Drives a `ProxyCore` with bytes an attacker chooses: datagrams from several sources
//! (an upstream caller, the next hop, a stranger), in any order, interleaved with
//! timeouts, and checks after every step what must hold whatever arrives: no panic, the
//! transaction table and the memory budget respected, and nothing sent to an address no
//! one legitimately named. Shared by the fuzz target (`fuzz/fuzz_targets/core.rs`) and a
//! proptest smoke run in the test suite.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use sluice_proxy_core::{CoreStats, HopRole, ProxyConfig, ProxyCore, Transmit};
use sluice_time::Time;

/// The proxy, and who may talk to it: `SOURCES[0]` an upstream caller, `SOURCES[1]` the
/// next hop, `SOURCES[2]` a stranger.
pub const PROXY: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)), 5060);
pub const SOURCES: [SocketAddr; 3] = [
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 5060),
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5060),
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), 5060),
];
const NEXT_HOP: usize = 1;
const MAX_TRANSACTIONS: usize = 64;

/// A small proxy, so that the limits are reached: the config's variant from one byte.
fn config(variant: u8) -> ProxyConfig {
    let mut c = ProxyConfig {
        listen: PROXY,
        next_hop: Some(SOURCES[NEXT_HOP]),
        queue_capacity: 16,
        invite_queue_capacity: 16,
        max_transactions: MAX_TRANSACTIONS,
        memory_budget_mb: 1,
        max_dialog_peers: 8,
        max_datagram: 4096,
        new_requests_per_source: if variant & 0x20 != 0 { 20.0 } else { 0.0 },
        ..ProxyConfig::default()
    };
    if variant & 1 != 0 {
        c.cost_forward_us = 2000.0;
        c.cost_reject_us = 300.0;
    }
    match (variant >> 1) & 3 {
        1 => {
            c.overload.role = HopRole::Se;
            c.overload.client.algorithms = vec![
                sluice_control::overload::OcAlgorithm::SluiceWindow,
                sluice_control::overload::OcAlgorithm::Rate,
            ];
        }
        2 if c.cost_forward_us > 0.0 => {
            c.overload.role = HopRole::Re;
            c.overload.neighbours = vec![SOURCES[0]];
            c.control.algorithm = "win-cont".parse().unwrap();
        }
        3 if c.cost_forward_us > 0.0 => {
            c.invite_queue = true;
            c.control.algorithm = "pi".parse().unwrap();
        }
        _ => {}
    }
    c
}

/// Reads the script.
struct Script<'a>(&'a [u8]);

impl<'a> Script<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        b
    }
}

/// A request as a caller writes it, its fields from the script.
fn request(s: &mut Script<'_>, from: SocketAddr) -> Option<String> {
    let kind = s.byte()?;
    let n = s.byte()?;
    let method = ["INVITE", "BYE", "OPTIONS", "ACK", "CANCEL", "MESSAGE"][usize::from(kind % 6)];
    let to_tag = if kind & 0x08 != 0 { ";tag=t" } else { "" };
    let route = match kind >> 4 & 3 {
        1 => format!("Route: <sip:{PROXY};lr>\r\n"),
        2 => format!("Route: <sip:{PROXY};lr>, <sip:192.0.2.9:5060;lr>\r\n"),
        3 => "Route: <sip:198.51.100.7;lr>\r\n".to_owned(),
        _ => String::new(),
    };
    let uri = if kind & 0x40 != 0 {
        "sip:u@203.0.113.5:5070"
    } else {
        "sip:u@example.com"
    };
    let contact = if kind & 0x80 != 0 {
        "Contact: <sip:c@203.0.113.6>\r\n"
    } else {
        ""
    };
    Some(format!(
        "{method} {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK{n};rport\r\n\
         Max-Forwards: {}\r\n{route}{contact}From: <sip:a@x>;tag=f{n}\r\nTo: <sip:u@example.com>{to_tag}\r\n\
         Call-ID: c{n}\r\nCSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n",
        n % 3 + u8::from(n % 7 != 0) * 60,
    ))
}

/// A response to `forwarded` as its next hop would send it: its Vias, From, To, Call-ID
/// and CSeq, a status and perhaps feedback, a To tag, a Contact and a Record-Route.
fn response(s: &mut Script<'_>, forwarded: &Transmit) -> Option<String> {
    let status = [100u16, 180, 200, 202, 408, 486, 503][usize::from(s.byte()? % 7)];
    let extra = s.byte()?;
    let text = String::from_utf8_lossy(&forwarded.payload).into_owned();
    let mut out = format!("SIP/2.0 {status} X\r\n");
    let mut first_via = true;
    for line in text.lines() {
        let keep = ["Via:", "From:", "To:", "Call-ID:", "CSeq:", "Record-Route:"]
            .iter()
            .any(|h| line.starts_with(h));
        if !keep {
            continue;
        }
        if line.starts_with("Via:") && first_via && extra & 1 != 0 {
            // The proxy's own Via declares `oc`: the server's value replaces it.
            out.push_str(line.split(";oc").next().unwrap_or(line));
        } else {
            out.push_str(line);
        }
        if line.starts_with("Via:") && first_via {
            first_via = false;
            if extra & 1 != 0 {
                out.push_str(";oc=50;oc-algo=\"sluicewin\";oc-validity=2000;oc-seq=");
                let _ = write!(out, "{}.{}", 100 + u32::from(extra >> 4), extra & 7);
            }
        }
        if line.starts_with("To:") && extra & 2 != 0 && !line.contains("tag=") {
            out.push_str(";tag=r");
        }
        out.push_str("\r\n");
    }
    if extra & 4 != 0 {
        out.push_str("Contact: <sip:callee@203.0.113.8>\r\n");
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    Some(out)
}

/// Runs a script; panics when an invariant breaks. Returns the proxy's counters at the end.
pub fn run(data: &[u8]) -> Option<CoreStats> {
    let mut s = Script(data);
    let variant = s.byte()?;
    let cfg = config(variant);
    let mut now = Time::ZERO;
    let mut core = ProxyCore::new(&cfg, PROXY, now);
    let mut sent: Vec<Bytes> = Vec::new();
    let mut to_next_hop: Vec<Transmit> = Vec::new();
    // What the trusted next hop wrote, and what the proxy forwarded to it: addresses named
    // there (a Contact, a Record-Route) may become dialog peers when the next hop answers.
    let mut next_hop_text = String::new();
    let mut steps = 0;
    while let Some(op) = s.byte() {
        steps += 1;
        if steps > 400 {
            break;
        }
        let source = usize::from(op >> 3) % SOURCES.len();
        match op & 7 {
            0 | 1 => {
                let n = usize::from(s.u16().unwrap_or(0) % 1500);
                let raw = Bytes::copy_from_slice(s.bytes(n));
                deliver(&mut core, now, raw, source, &mut sent, &mut next_hop_text);
            }
            2 | 3 => {
                let Some(text) = request(&mut s, SOURCES[source]) else {
                    break;
                };
                deliver(
                    &mut core,
                    now,
                    Bytes::from(text),
                    source,
                    &mut sent,
                    &mut next_hop_text,
                );
            }
            4 => {
                let pick = usize::from(s.byte().unwrap_or(0));
                let Some(t) = to_next_hop.get(pick % to_next_hop.len().max(1)).cloned() else {
                    continue;
                };
                let Some(text) = response(&mut s, &t) else {
                    break;
                };
                // From the next hop, or (forged) from the stranger.
                let from = if op & 0x40 != 0 { 2 } else { NEXT_HOP };
                deliver(
                    &mut core,
                    now,
                    Bytes::from(text),
                    from,
                    &mut sent,
                    &mut next_hop_text,
                );
            }
            5 => {
                let pick = usize::from(s.byte().unwrap_or(0));
                if let Some(b) = sent.get(pick % sent.len().max(1)).cloned() {
                    deliver(&mut core, now, b, source, &mut sent, &mut next_hop_text);
                }
            }
            _ => {
                let ms = u64::from(s.u16().unwrap_or(0));
                now += Duration::from_millis(ms);
                core.handle_timeout(now);
            }
        }
        if core.poll_timeout().is_some_and(|t| t <= now) {
            core.handle_timeout(now);
        }
        while let Some(t) = core.poll_transmit() {
            let ip = t.to.ip().to_string();
            assert!(
                SOURCES.iter().any(|s| s.ip() == t.to.ip()) || next_hop_text.contains(&ip),
                "sent to {} which nobody trusted named: {}",
                t.to,
                String::from_utf8_lossy(&t.payload)
            );
            if t.to == SOURCES[NEXT_HOP] && t.payload.first() != Some(&b'S') {
                next_hop_text.push_str(&String::from_utf8_lossy(&t.payload));
                to_next_hop.push(t);
                if to_next_hop.len() > 32 {
                    to_next_hop.remove(0);
                }
            }
        }
        let st = core.stats(now);
        assert!(st.transactions <= MAX_TRANSACTIONS, "{st:?}");
        assert!(st.bytes_in_use <= (1 << 20) + 4 * 4096, "{st:?}");
        assert!(st.queue_len <= 16 && st.invite_queue_len <= 17, "{st:?}");
        assert!(st.dialog_peers <= 8);
    }
    Some(core.stats(now))
}

fn deliver(
    core: &mut ProxyCore,
    now: Time,
    payload: Bytes,
    source: usize,
    sent: &mut Vec<Bytes>,
    next_hop_text: &mut String,
) {
    if source == NEXT_HOP {
        next_hop_text.push_str(&String::from_utf8_lossy(&payload));
    }
    if sent.len() < 64 {
        sent.push(payload.clone());
    }
    core.handle_datagram(now, payload, SOURCES[source]);
}
