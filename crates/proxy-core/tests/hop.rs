//! Hop-by-hop overload control in the proxy core, with fabricated time: the RFC 7339
//! parameters an SE declares and applies, and those an RE stamps, byte by byte.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::answer;
use sluice_proxy_core::{HopRole, ProxyConfig, ProxyCore, Transmit};
use sluice_sip::Message;
use sluice_time::Time;

const PROXY: &str = "192.0.2.1:5060";
const UAC: &str = "192.0.2.10:5062";
const STRANGER: &str = "192.0.2.11:5062";
const NEXT: &str = "192.0.2.20:5070";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn step(core: &mut ProxyCore, now: Time, bytes: &[u8], from: &str) -> Vec<Transmit> {
    core.handle_datagram(now, Bytes::copy_from_slice(bytes), addr(from));
    core.handle_timeout(now);
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

fn text(t: &Transmit) -> &str {
    std::str::from_utf8(&t.payload).unwrap()
}

fn invite(call: &str, from: &str, via_params: &str) -> String {
    format!(
        "INVITE sip:bob@192.0.2.1:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bK{call};rport{via_params}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=a{call}\r\n\
         To: <sip:bob@192.0.2.1>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 INVITE\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

fn se_config() -> ProxyConfig {
    let mut c = ProxyConfig {
        listen: addr(PROXY),
        next_hop: Some(addr(NEXT)),
        ..ProxyConfig::default()
    };
    c.overload.role = HopRole::Se;
    c
}

#[test]
fn se_declares_support_applies_loss_from_its_next_hop_only_and_rejects_new_sessions() {
    let mut core = ProxyCore::new(&se_config(), addr(PROXY), Time::ZERO);
    let out = step(&mut core, Time::ZERO, invite("c1", UAC, "").as_bytes(), UAC);
    let fwd = out.iter().find(|t| t.to == addr(NEXT)).unwrap();
    // The branch: prefix, counter, then a keyed tag and a loop hash (20 hex digits).
    let via = text(fwd).lines().nth(1).unwrap();
    let rest = via
        .strip_prefix("Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKsl1.")
        .unwrap_or_else(|| panic!("{}", text(fwd)));
    assert!(text(fwd).starts_with("INVITE sip:bob@192.0.2.1:5060 SIP/2.0\r\n"));
    assert_eq!(&rest[20..], ";oc;oc-algo=\"loss,rate\"", "{via}");
    let stamp = |v: &str| {
        v.replace(
            ";oc;oc-algo=\"loss,rate\"",
            ";oc=100;oc-algo=\"loss\";oc-validity=5000;oc-seq=7.0",
        )
    };
    // The same parameters from an address that is not the next hop are ignored.
    let forged = answer(fwd, 180, stamp);
    step(&mut core, Time::from_millis(1), forged.as_bytes(), STRANGER);
    let s = core.stats(Time::from_millis(1));
    assert_eq!((s.hop.client.applied, s.hop.feedback_unconfigured), (0, 1));
    // From the next hop: applied; the relayed response carries none of it upstream.
    let out = step(
        &mut core,
        Time::from_millis(2),
        answer(fwd, 180, stamp).as_bytes(),
        NEXT,
    );
    let relayed = out.iter().find(|t| t.to == addr(UAC)).unwrap();
    assert!(!text(relayed).contains("oc"), "{}", text(relayed));
    assert_eq!(core.stats(Time::from_millis(2)).hop.client.applied, 1);
    // An older oc-seq is stale.
    let old = |v: &str| {
        v.replace(
            ";oc;oc-algo=\"loss,rate\"",
            ";oc=0;oc-algo=\"loss\";oc-validity=5000;oc-seq=6.0",
        )
    };
    step(
        &mut core,
        Time::from_millis(3),
        answer(fwd, 180, old).as_bytes(),
        NEXT,
    );
    assert_eq!(core.stats(Time::from_millis(3)).hop.client.stale, 1);
    // Loss 100 %: new sessions get 503 (no Retry-After) and nothing reaches the next hop.
    let out = step(
        &mut core,
        Time::from_millis(4),
        invite("c2", UAC, "").as_bytes(),
        UAC,
    );
    assert!(out.iter().all(|t| t.to == addr(UAC)));
    assert!(out.iter().any(|t| text(t).starts_with("SIP/2.0 503 ")));
    assert!(out.iter().all(|t| !text(t).contains("Retry-After")));
    assert_eq!(
        core.stats(Time::from_millis(4)).hop.client.rejected_normal,
        1
    );
    // Out-of-range values are ignored and counted.
    let huge = |v: &str| {
        v.replace(
            ";oc;oc-algo=\"loss,rate\"",
            ";oc=101;oc-algo=\"loss\";oc-validity=5000;oc-seq=8.0",
        )
    };
    step(
        &mut core,
        Time::from_millis(5),
        answer(fwd, 180, huge).as_bytes(),
        NEXT,
    );
    assert_eq!(core.stats(Time::from_millis(5)).hop.client.out_of_range, 1);
}

/// An RE running rate-abs for one configured neighbour, `UAC`.
fn rate_abs_re() -> ProxyCore {
    let mut cfg = se_config();
    cfg.overload.role = HopRole::Re;
    cfg.overload.neighbours = vec![addr(UAC)];
    cfg.control.algorithm = "rate-abs".parse().unwrap();
    cfg.validate().unwrap();
    ProxyCore::new(&cfg, addr(PROXY), Time::ZERO)
}

#[test]
fn re_stamps_responses_to_participating_neighbours_only() {
    let mut core = rate_abs_re();
    let oc = ";oc;oc-algo=\"rate,loss\"";
    let (mut stamped, mut stranger_stamped, mut plain_stamped) = (0, 0, 0);
    for i in 0..300u64 {
        let now = Time::from_millis(i * 10);
        for (from, params, call) in [(UAC, oc, format!("n{i}")), (STRANGER, oc, format!("s{i}"))] {
            let out = step(&mut core, now, invite(&call, from, params).as_bytes(), from);
            let Some(fwd) = out.iter().find(|t| t.to == addr(NEXT)) else {
                continue;
            };
            // The RE passes the SE's parameters on untouched in the request.
            assert!(text(fwd).contains(oc));
            let back = step(
                &mut core,
                now,
                answer(fwd, 200, str::to_owned).as_bytes(),
                NEXT,
            );
            for t in back {
                let m = Message::parse(t.payload.clone()).unwrap();
                let via = m.top_via().unwrap();
                if via.param("oc-seq").is_some() {
                    if t.to == addr(UAC) {
                        assert_eq!(via.oc_algo(), vec!["rate".to_owned()]);
                        // Before rate-abs's first control step the RE takes part but asks
                        // for nothing (`oc=0;oc-validity=0`, RFC 7339 §6); then a rate.
                        if via.oc_validity() == Ok(Some(0)) {
                            assert!(matches!(via.oc(), Ok(Some(sluice_sip::Oc::Value(0)))));
                        } else {
                            assert_eq!(via.oc_validity(), Ok(Some(500)));
                            assert!(matches!(via.oc(), Ok(Some(sluice_sip::Oc::Value(_)))));
                        }
                        stamped += 1;
                    } else {
                        stranger_stamped += 1;
                    }
                }
            }
        }
        // A neighbour that does not declare support gets nothing.
        let call = format!("p{i}");
        let out = step(&mut core, now, invite(&call, UAC, "").as_bytes(), UAC);
        if let Some(fwd) = out.iter().find(|t| t.to == addr(NEXT)) {
            let back = step(
                &mut core,
                now,
                answer(fwd, 200, str::to_owned).as_bytes(),
                NEXT,
            );
            plain_stamped += back.iter().filter(|t| text(t).contains("oc-seq")).count();
        }
    }
    let s = core.stats(Time::from_secs(3));
    assert!(stamped > 100, "stamped {stamped}, {:?}", s.hop);
    assert_eq!(stranger_stamped, 0);
    assert_eq!(plain_stamped, 0);
    assert!(s.hop.unconfigured_requests >= 300);
    assert!(s.hop.responses_not_participating >= 300);
}

/// The `sluice-wack` values on the window responses an RE running win-cont sends back
/// for INVITEs from `UAC` carrying `sluice-wsent` = each of `sent`, in turn.
fn window_acks_echoed(algorithm: &str, window_acks: bool, sent: &[u64]) -> Vec<Option<String>> {
    let mut cfg = se_config();
    cfg.overload.role = HopRole::Re;
    cfg.overload.neighbours = vec![addr(UAC)];
    cfg.overload.server.window_acks = window_acks;
    cfg.control.algorithm = algorithm.parse().unwrap();
    cfg.validate().unwrap();
    let mut core = ProxyCore::new(&cfg, addr(PROXY), Time::ZERO);
    let mut echoed = Vec::new();
    for (i, n) in sent.iter().enumerate() {
        let now = Time::from_millis(i as u64 * 10);
        let params = format!(";oc;oc-algo=\"sluicewin,loss\";sluice-wsent={n}");
        let out = step(
            &mut core,
            now,
            invite(&format!("w{i}"), UAC, &params).as_bytes(),
            UAC,
        );
        let fwd = out.iter().find(|t| t.to == addr(NEXT)).unwrap();
        let back = step(
            &mut core,
            now,
            answer(fwd, 200, str::to_owned).as_bytes(),
            NEXT,
        );
        let ok = back
            .iter()
            .find(|t| text(t).starts_with("SIP/2.0 200"))
            .unwrap();
        let m = Message::parse(ok.payload.clone()).unwrap();
        let via = m.top_via().unwrap();
        assert_eq!(via.oc_algo(), vec!["sluicewin".to_owned()]);
        echoed.push(
            via.param("sluice-wack")
                .flatten()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        );
    }
    echoed
}

#[test]
fn re_echoes_the_highest_count_of_sessions_sent_beside_its_windows() {
    // A retransmission carries the count of when it was first sent (7 here, after 42):
    // echoed, it would tell the SE that 35 sessions were still in flight. A restarted SE
    // counts from the wall clock, so its count only grows.
    let echoed = window_acks_echoed("win-cont", true, &[41, 42, 7, 43]);
    assert_eq!(
        echoed,
        ["41", "42", "42", "43"]
            .map(|s| Some(s.to_owned()))
            .to_vec()
    );
    // The papers' RE sends the window alone.
    assert_eq!(
        window_acks_echoed("win-cont", false, &[41, 42]),
        vec![None, None]
    );
    // win-auto's window counts sessions in process, not a budget with room for the link.
    assert_eq!(
        window_acks_echoed("win-auto", true, &[41, 42]),
        vec![None, None]
    );
}

/// An INVITE with a Resource-Priority header (RFC 4412), or to an SOS URN (RFC 5031).
fn priority_invite(call: &str, from: &str, sos: bool) -> String {
    let plain = invite(call, from, "");
    if sos {
        plain
            .replacen("sip:bob@192.0.2.1:5060", "urn:service:sos", 1)
            .replacen("To: <sip:bob@192.0.2.1>", "To: <urn:service:sos>", 1)
    } else {
        plain.replacen(
            "Max-Forwards: 70\r\n",
            "Max-Forwards: 70\r\nResource-Priority: ets.0\r\n",
            1,
        )
    }
}

#[test]
fn loss_reduces_normal_requests_first_and_never_in_dialog_ones() {
    let mut core = ProxyCore::new(&se_config(), addr(PROXY), Time::ZERO);
    let out = step(&mut core, Time::ZERO, invite("c0", UAC, "").as_bytes(), UAC);
    let fwd = out.iter().find(|t| t.to == addr(NEXT)).unwrap();
    // The next hop asks for 50 % less: with a fifth of the traffic priority, the normal
    // requests alone can give it (RFC 7339 §7.2: category 2 only when category 1 cannot).
    let half = |v: &str| {
        v.replace(
            ";oc;oc-algo=\"loss,rate\"",
            ";oc=50;oc-algo=\"loss\";oc-validity=60000;oc-seq=1.0",
        )
    };
    step(
        &mut core,
        Time::from_millis(1),
        answer(fwd, 180, half).as_bytes(),
        NEXT,
    );
    let (mut normal, mut normal_rejected, mut priority, mut priority_rejected) = (0, 0, 0, 0);
    for i in 0..2000u64 {
        let now = Time::from_millis(2 + i);
        let call = format!("p{i}");
        let is_priority = i % 5 == 0;
        let msg = if is_priority {
            priority_invite(&call, UAC, i % 10 == 0)
        } else {
            invite(&call, UAC, "")
        };
        // Earlier calls' INVITEs are retransmitted meanwhile (nobody answers them).
        let id = format!("Call-ID: {call}\r\n");
        let out: Vec<Transmit> = step(&mut core, now, msg.as_bytes(), UAC)
            .into_iter()
            .filter(|t| text(t).contains(&id))
            .collect();
        let rejected = out.iter().any(|t| text(t).starts_with("SIP/2.0 503 "));
        let forwarded = out.iter().any(|t| t.to == addr(NEXT));
        assert!(rejected != forwarded, "call {i}: one of forwarded or 503");
        if is_priority {
            priority += 1;
            priority_rejected += u32::from(rejected);
        } else {
            normal += 1;
            normal_rejected += u32::from(rejected);
        }
    }
    assert_eq!(priority_rejected, 0, "of {priority} priority requests");
    // 50 % of all = 62.5 % of the normal four fifths.
    let share = f64::from(normal_rejected) / f64::from(normal);
    assert!((0.55..0.70).contains(&share), "normal rejected {share:.3}");
    let s = core.stats(Time::from_millis(2100));
    assert_eq!(s.hop.client.rejected_priority, 0);
    assert_eq!(s.hop.client.rejected_normal, u64::from(normal_rejected));
    // In-dialog requests pass whatever the feedback says.
    let bye = format!(
        "BYE sip:bob@192.0.2.20:5070 SIP/2.0\r\n\
         Via: SIP/2.0/UDP {UAC};branch=z9hG4bKbye1;rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@192.0.2.10>;tag=ac0\r\n\
         To: <sip:bob@192.0.2.1>;tag=b1\r\n\
         Call-ID: c0\r\n\
         CSeq: 2 BYE\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let mut bye_rejected = 0;
    for i in 0..50 {
        let b = bye.replace("bye1", &format!("bye{i}"));
        let out = step(&mut core, Time::from_millis(2200 + i), b.as_bytes(), UAC);
        bye_rejected += usize::from(out.iter().any(|t| text(t).starts_with("SIP/2.0 503 ")));
    }
    assert_eq!(bye_rejected, 0);
}

/// A native-speed RE (no emulated cost) running rate-abs: 1,000 INVITEs a second from one
/// participating neighbour for 5 s, each answered 200, the shell reporting `busy_per_10ms`
/// of work every 10 ms. Returns the last rate the RE fed back.
fn native_re_rate(busy_per_10ms: std::time::Duration) -> u32 {
    let mut core = rate_abs_re();
    let mut last = None;
    for tick in 0..500u64 {
        for k in 0..10u64 {
            let now = Time::from_micros(tick * 10_000 + k * 1000);
            let call = format!("r{tick}-{k}");
            let out = step(
                &mut core,
                now,
                invite(&call, UAC, ";oc;oc-algo=\"rate\"").as_bytes(),
                UAC,
            );
            let Some(fwd) = out.iter().find(|t| t.to == addr(NEXT)) else {
                continue;
            };
            let back = step(
                &mut core,
                now,
                answer(fwd, 200, str::to_owned).as_bytes(),
                NEXT,
            );
            for t in back.iter().filter(|t| t.to == addr(UAC)) {
                let m = Message::parse(t.payload.clone()).unwrap();
                let via = m.top_via().unwrap();
                if let (Ok(Some(sluice_sip::Oc::Value(v))), Ok(Some(validity))) =
                    (via.oc(), via.oc_validity())
                {
                    if validity > 0 {
                        last = Some(v);
                    }
                }
            }
        }
        core.record_native_busy(busy_per_10ms);
    }
    last.expect("the RE fed a rate back")
}

#[test]
fn a_native_speed_re_feeds_back_what_its_measured_processor_can_serve() {
    // A processor busy all the time serving 1,000 sessions a second can serve about that
    // many; one busy a tenth of the time, about ten times more. Without the shell's
    // measurement both read an idle processor and fed back the same rate.
    let saturated = native_re_rate(std::time::Duration::from_millis(10));
    let light = native_re_rate(std::time::Duration::from_millis(1));
    assert!((600..=1_400).contains(&saturated), "saturated: {saturated}");
    assert!(
        light > 3 * saturated,
        "light {light}, saturated {saturated}"
    );
}

#[test]
fn se_in_keep_mode_holds_new_sessions_after_their_100_and_forwards_them_when_released() {
    // Shen et al.'s leaky bucket (keep mode) for `sluicerate`: 10 sessions/s, one per 100 ms.
    let mut cfg = se_config();
    cfg.overload.client.algorithms = vec![sluice_control::overload::OcAlgorithm::SluiceRate];
    cfg.overload.client.rate_throttle = sluice_control::ThrottleKind::LeakyBucket;
    cfg.validate().unwrap();
    let mut core = ProxyCore::new(&cfg, addr(PROXY), Time::ZERO);
    let out = step(&mut core, Time::ZERO, invite("k1", UAC, "").as_bytes(), UAC);
    let fwd = out.iter().find(|t| t.to == addr(NEXT)).unwrap().clone();
    let rate = |v: &str| {
        v.replace(
            ";oc;oc-algo=\"sluicerate,loss\"",
            ";oc=10000;oc-algo=\"sluicerate\";oc-validity=5000;oc-seq=7.0",
        )
    };
    step(
        &mut core,
        Time::from_millis(1),
        answer(&fwd, 180, rate).as_bytes(),
        NEXT,
    );
    assert_eq!(core.stats(Time::from_millis(1)).hop.client.applied, 1);
    // The bucket lets one through, and holds the next: its caller gets 100 Trying at once.
    let first = step(
        &mut core,
        Time::from_millis(2),
        invite("k2", UAC, "").as_bytes(),
        UAC,
    );
    assert!(first.iter().any(|t| t.to == addr(NEXT)));
    let held = step(
        &mut core,
        Time::from_millis(3),
        invite("k3", UAC, "").as_bytes(),
        UAC,
    );
    assert_eq!(held.len(), 1, "only the 100 Trying: {held:?}");
    assert!(text(&held[0]).starts_with("SIP/2.0 100 Trying"));
    assert_eq!(core.stats(Time::from_millis(3)).held, 1);
    // Released when the bucket allows, with no other input.
    let due = core.poll_timeout().unwrap();
    assert!(due <= Time::from_millis(103), "{due:?}");
    core.handle_timeout(due);
    let released: Vec<Transmit> = std::iter::from_fn(|| core.poll_transmit()).collect();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].to, addr(NEXT));
    assert!(text(&released[0]).contains("Call-ID: k3\r\n"));
    let s = core.stats(due);
    assert_eq!(
        (s.held, s.hop.client.held, s.hop.client.released),
        (0, 1, 1)
    );
}
