//! The RFC 7339 Via parameters sluice sends, read by two independent implementations:
//! Wireshark's SIP dissector (tshark, from a pcap of the bytes) and Kamailio
//! (`tests/kamailio/oc.cfg`, over UDP on loopback). The bytes are what the proxy core
//! produces as an SE (its Via declaring support in a forwarded request) and as an RE (the
//! feedback stamped on a response to a participating neighbour). Each part is skipped with
//! a notice when its tool is missing; CI installs both.

mod common;
#[path = "../../../tests/external_tools.rs"]
mod external_tools;

use std::io::Read as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::answer;
use sluice_control::overload::OcAlgorithm;
use sluice_proxy_core::{HopRole, ProxyConfig, ProxyCore, Transmit};
use sluice_sip::Message;
use sluice_time::Time;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn step(core: &mut ProxyCore, now: Time, bytes: &[u8], from: SocketAddr) -> Vec<Transmit> {
    core.handle_datagram(now, Bytes::copy_from_slice(bytes), from);
    core.handle_timeout(now);
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

fn invite(call: &str, from: SocketAddr, via_params: &str) -> String {
    format!(
        "INVITE sip:bob@example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bK{call};rport{via_params}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@example.com>;tag=a{call}\r\n\
         To: <sip:bob@example.com>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 INVITE\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// An INVITE as a sluice SE forwards it to `next`: its own Via declares `oc` and offers
/// `loss` (one algorithm: Kamailio 5.6's Via parser splits a quoted `oc-algo="loss,rate"`
/// at its comma and drops the request, see docs/ARCHITECTURE.md).
fn se_request(local: SocketAddr, next: SocketAddr) -> Bytes {
    let mut c = ProxyConfig {
        listen: local,
        next_hop: Some(next),
        ..ProxyConfig::default()
    };
    c.overload.role = HopRole::Se;
    c.overload.client.algorithms = vec![OcAlgorithm::Loss];
    c.validate().unwrap();
    let mut core = ProxyCore::new(&c, local, Time::ZERO);
    let uac = addr("127.0.0.1:9");
    let out = step(
        &mut core,
        Time::ZERO,
        invite("se1", uac, "").as_bytes(),
        uac,
    );
    out.into_iter()
        .find(|t| t.to == next)
        .expect("the SE forwards the INVITE")
        .payload
}

/// A 200 as a sluice RE relays it to `neighbour`, a configured upstream SE that declared
/// support: the neighbour's Via carries the RE's `oc`, `oc-algo`, `oc-validity`, `oc-seq`.
fn re_response(local: SocketAddr, neighbour: SocketAddr) -> Bytes {
    let next = addr("127.0.0.1:19");
    let mut c = ProxyConfig {
        listen: local,
        next_hop: Some(next),
        ..ProxyConfig::default()
    };
    c.overload.role = HopRole::Re;
    c.overload.neighbours = vec![neighbour];
    c.control.algorithm = "rate-abs".parse().unwrap();
    c.validate().unwrap();
    let mut core = ProxyCore::new(&c, local, Time::ZERO);
    let mut last = None;
    // A few seconds of calls, so the feedback is a computed value, not a start-up one.
    for i in 0..300u64 {
        let now = Time::from_millis(i * 10);
        let call = format!("re{i}");
        let out = step(
            &mut core,
            now,
            invite(&call, neighbour, ";oc;oc-algo=\"loss\"").as_bytes(),
            neighbour,
        );
        let Some(fwd) = out.iter().find(|t| t.to == next) else {
            continue;
        };
        let back = step(
            &mut core,
            now,
            answer(fwd, 200, str::to_owned).as_bytes(),
            next,
        );
        if let Some(t) = back.into_iter().find(|t| t.to == neighbour) {
            last = Some(t.payload);
        }
    }
    let last = last.expect("the RE relays 200s to its neighbour");
    let m = Message::parse(last.clone()).unwrap();
    assert!(m.top_via().unwrap().param("oc-seq").is_some(), "stamped");
    last
}

/// What sluice's own parser reads from the top Via: oc, oc-algo, oc-validity, oc-seq, each
/// as written ("" for a parameter without a value, "-" for an absent one).
fn sluice_reads(message: &Bytes) -> [String; 4] {
    let m = Message::parse(message.clone()).unwrap();
    let via = m.top_via().unwrap();
    ["oc", "oc-algo", "oc-validity", "oc-seq"].map(|name| match via.param(name) {
        None => "-".to_owned(),
        Some(None) => String::new(),
        Some(Some(v)) => String::from_utf8_lossy(v).trim_matches('"').to_owned(),
    })
}

/// A pcap (LINKTYPE_IPV4) holding each message as one UDP datagram to or from port 5060.
fn pcap(messages: &[(SocketAddr, SocketAddr, &Bytes)]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4_u32, 0x0004_0002, 0, 0, 65_535, 228] {
        // magic; version 2.4 (minor first in this little-endian word); zone; sigfigs;
        // snaplen; link type IPv4
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (i, (from, to, payload)) in messages.iter().enumerate() {
        let (SocketAddr::V4(from), SocketAddr::V4(to)) = (from, to) else {
            panic!("IPv4 only");
        };
        let udp_len = 8 + payload.len();
        let ip_len = 20 + udp_len;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0];
        ip[2..4].copy_from_slice(&u16::try_from(ip_len).unwrap().to_be_bytes());
        ip.extend_from_slice(&from.ip().octets());
        ip.extend_from_slice(&to.ip().octets());
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let folded = (sum & 0xffff) + (sum >> 16);
        let checksum = !u16::try_from((folded & 0xffff) + (folded >> 16)).unwrap();
        ip[10..12].copy_from_slice(&checksum.to_be_bytes());
        ip.extend_from_slice(&from.port().to_be_bytes());
        ip.extend_from_slice(&to.port().to_be_bytes());
        ip.extend_from_slice(&u16::try_from(udp_len).unwrap().to_be_bytes());
        ip.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
        ip.extend_from_slice(payload);
        let len = u32::try_from(ip.len()).unwrap();
        for v in [1_795_000_000 + i as u32, 0, len, len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&ip);
    }
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-oc-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
#[cfg_attr(missing_tshark, ignore = "needs tshark: apt-get install tshark")]
fn tshark_decodes_the_parameters_sluice_sends() {
    external_tools::require("tshark");
    let (se, re, upstream) = (
        addr("127.0.0.1:5070"),
        addr("127.0.0.1:5060"),
        addr("127.0.0.1:5062"),
    );
    let request = se_request(se, re);
    let response = re_response(re, upstream);
    let file = scratch("oc.pcap");
    std::fs::write(
        &file,
        pcap(&[(se, re, &request), (re, upstream, &response)]),
    )
    .unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args([
            "-o",
            "sip.display_raw_text:FALSE",
            "-T",
            "fields",
            "-E",
            "separator=|",
        ])
        .args([
            "-e",
            "sip.Via.oc",
            "-e",
            "sip.Via.oc_val",
            "-e",
            "sip.Via.oc_algo",
        ])
        .args(["-e", "sip.Via.oc_validity", "-e", "sip.Via.oc_seq"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(lines.len(), 2, "one line per packet: {text}");
    // The SE's declaration: oc without a value, the offered algorithm.
    let [oc, algo, validity, seq] = sluice_reads(&request);
    assert_eq!(
        (oc.as_str(), validity.as_str(), seq.as_str()),
        ("", "-", "-")
    );
    assert!(!lines[0][0].is_empty(), "tshark sees oc: {text}");
    assert_eq!(lines[0][2].trim_matches('"'), algo, "{text}");
    // The RE's feedback: every value as sluice wrote it.
    let [oc, algo, validity, seq] = sluice_reads(&response);
    assert_eq!(lines[1][1], oc, "oc value: {text}");
    assert_eq!(lines[1][2].trim_matches('"'), algo, "{text}");
    assert_eq!(lines[1][3], validity, "{text}");
    assert_eq!(lines[1][4], seq, "{text}");
}

/// Kamailio on a free loopback port with tests/kamailio/oc.cfg, its log in a file.
struct Kamailio {
    child: std::process::Child,
    log: PathBuf,
    addr: SocketAddr,
}

impl Kamailio {
    fn start(cfg: &Path) -> Kamailio {
        let port = sluice_sys::free_sip_port([127, 0, 0, 1].into()).unwrap();
        let addr = addr(&format!("127.0.0.1:{port}"));
        // $via0(oc...) where Kamailio has it; where it does not (5.6), the config fails its
        // fixups and Kamailio exits at once, and the parameter transformation is used.
        let log = scratch(&format!("kamailio-{port}.log"));
        let runtime = scratch(&format!("kamailio-{port}"));
        std::fs::create_dir_all(&runtime).unwrap();
        let spawn = |via0: bool| {
            let mut cmd = Command::new("kamailio");
            cmd.arg("-f")
                .arg(cfg)
                .args(["-DD", "-E", "-m", "32", "-M", "8", "-l"])
                .arg(format!("udp:{addr}"))
                .arg("-Y")
                .arg(&runtime)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap());
            if via0 {
                cmd.args(["-A", "VIA0_OC"]);
            }
            cmd.spawn().expect("kamailio starts")
        };
        let mut child = spawn(true);
        let mut via0 = true;
        let deadline = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                via0 = false;
                child = spawn(false);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("kamailio reads with $via0(oc...): {via0}");
        Kamailio { child, log, addr }
    }

    fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Kamailio {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[cfg_attr(missing_kamailio, ignore = "needs kamailio: apt-get install kamailio")]
fn kamailio_reads_the_parameters_sluice_sends() {
    external_tools::require("kamailio");
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/kamailio/oc.cfg");
    let kamailio = Kamailio::start(&cfg);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = socket.local_addr().unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    // The SE's request: Kamailio answers with what it read from the top Via. The SE core's
    // address is this socket's, so the answer comes here.
    let request = se_request(local, kamailio.addr);
    let [_, algo, _, _] = sluice_reads(&request);
    let mut answer = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 65_535];
    while answer.is_none() && Instant::now() < deadline {
        socket.send_to(&request, kamailio.addr).unwrap();
        if let Ok((n, _)) = socket.recv_from(&mut buf) {
            answer = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let answer =
        answer.unwrap_or_else(|| panic!("no answer from Kamailio; its log:\n{}", kamailio.log()));
    let header = answer
        .lines()
        .find(|l| l.starts_with("X-Via0-OC:"))
        .unwrap_or_else(|| panic!("{answer}"));
    // `oc` without a value: $via0(oc) and {param.in} both say it is there.
    assert!(
        header.contains("oc=1;") || header.contains("oc=;"),
        "{header}"
    );
    assert!(header.ends_with(&format!("oc-algo={algo}")), "{header}");

    // The RE's response: Kamailio logs what it read from the top Via in its reply route.
    let response = re_response(local, addr("127.0.0.1:5062"));
    let [oc, algo, validity, seq] = sluice_reads(&response);
    let expected = format!("sluice-oc: oc={oc};oc-algo={algo};oc-validity={validity};oc-seq={seq}");
    socket.send_to(&response, kamailio.addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kamailio.log().contains(&expected) {
        assert!(
            Instant::now() < deadline,
            "expected `{expected}` in Kamailio's log:\n{}",
            kamailio.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
