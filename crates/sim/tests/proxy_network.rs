//! The product's cores together on the simulator's testbed, sans IO with made-up time:
//! sluice's UAC and UAS (the `sluice-load` cores) calling through the proxy core, alone and
//! as SE -> RE with hop-by-hop overload control. The interop of the three cores, the
//! collapse of an uncontrolled proxy with emulated capacity, and the feedback that
//! prevents it, each crossing as real SIP bytes.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_control::overload::OcAlgorithm;
use sluice_load::{SecondRow, Uac, UacConfig, UacSummary, Uas, UasConfig};
use sluice_proxy_core::{CoreStats, HopRole, ProxyConfig, ProxyCore};
use sluice_sim::testbed::{Endpoint, Testbed};
use sluice_time::Time;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const UAC: u16 = 5001;
const SE: u16 = 5060;
const RE: u16 = 5080;
const UAS: u16 = 5070;
/// One-way delay of every link.
const LINK: Duration = Duration::from_micros(500);

/// The load generator's UAC on the testbed, keeping its per-second rows.
struct Caller {
    uac: Uac,
    rows: Vec<SecondRow>,
}

impl Endpoint for Caller {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.uac.handle_datagram(now, payload, from);
    }
    fn handle_timeout(&mut self, now: Time) {
        self.uac.handle_timeout(now);
        self.rows.extend(std::iter::from_fn(|| self.uac.poll_row()));
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.uac.poll_transmit().map(|o| (o.to, o.payload))
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        self.uac.poll_timeout()
    }
}

struct Callee(Uas);

impl Endpoint for Callee {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.0.handle_datagram(now, payload, from);
    }
    fn handle_timeout(&mut self, now: Time) {
        self.0.handle_timeout(now);
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.0.poll_transmit().map(|o| (o.to, o.payload))
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        self.0.poll_timeout()
    }
}

fn caller(rate: f64, to: u16, seconds: u64) -> Caller {
    let mut c = UacConfig::new(addr(UAC), addr(to), rate);
    c.duration = Some(Duration::from_secs(seconds));
    Caller {
        uac: Uac::new(c, Time::ZERO),
        rows: Vec::new(),
    }
}

fn proxy(listen: u16, next_hop: u16, cost_forward_us: f64, queue: usize) -> ProxyConfig {
    ProxyConfig {
        listen: addr(listen),
        next_hop: Some(addr(next_hop)),
        cost_forward_us,
        queue_capacity: queue,
        ..ProxyConfig::default()
    }
}

/// Calls set up per second (ACK within 10 s) over the seconds `from..=to`.
fn goodput(rows: &[SecondRow], from: u64, to: u64) -> f64 {
    let steady: Vec<_> = rows
        .iter()
        .filter(|r| (from..=to).contains(&r.second))
        .collect();
    assert_eq!(steady.len() as u64, to - from + 1);
    steady.iter().map(|r| r.counts.successful).sum::<u64>() as f64 / steady.len() as f64
}

/// UAC -> proxy -> UAS until the UAC is done: its summary and rows, the proxy's stats
/// and the UAS's INVITE count.
fn through_one_proxy(
    rate: f64,
    seconds: u64,
    config: &ProxyConfig,
) -> (UacSummary, Vec<SecondRow>, CoreStats, u64) {
    let mut uac = caller(rate, SE, seconds);
    let mut core = ProxyCore::new(config, addr(SE), Time::ZERO);
    let mut uas = Callee(Uas::new(UasConfig::new(addr(UAS))));
    let done = {
        let mut net = Testbed::new(LINK);
        net.attach(addr(UAC), &mut uac);
        net.attach(addr(SE), &mut core);
        net.attach(addr(UAS), &mut uas);
        net.run_until(Time::from_secs(120), |_| false);
        net.now()
    };
    let stats = core.stats(done);
    (uac.uac.summary(), uac.rows, stats, uas.0.counts().invites)
}

#[test]
fn sluice_uac_and_uas_complete_every_call_through_the_proxy() {
    let (s, _, p, invites) = through_one_proxy(400.0, 5, &proxy(SE, UAS, 0.0, 500));
    assert!(s.clean(), "{s:?}");
    assert_eq!((s.offered, s.successful, s.completed), (2000, 2000, 2000));
    assert_eq!(invites, 2000);
    // INVITE and BYE statefully, the ACK statelessly; nothing left hanging.
    assert_eq!((p.forwarded_requests, p.forwarded_acks), (4000, 2000));
    assert_eq!((p.pending_requests, p.dropped_queue_full), (0, 0));
}

/// 500 us per message is 2000 messages/s; a call is 7 messages through the proxy (INVITE,
/// 100, 180, 200, ACK, BYE, 200), so the capacity is about 285 calls/s. The FIFO holds 2000
/// messages, a second of work: as in the papers' testbeds (2 ms per message behind a
/// 500-message queue), a full queue delays messages beyond T1 (500 ms), which is what sets
/// off the retransmissions behind the collapse.
const CAPACITY: f64 = 285.0;

#[test]
fn emulated_capacity_collapses_without_control_as_in_the_papers() {
    let emulated = proxy(SE, UAS, 500.0, 2000);
    let (s, rows, p, _) = through_one_proxy(140.0, 20, &emulated);
    assert!(s.clean(), "half the capacity runs clean: {s:?}");
    assert!((goodput(&rows, 11, 20) - 140.0).abs() < 1.0);
    assert_eq!(p.dropped_queue_full, 0);
    // Two and four times the capacity, no overload control: the queue delays messages past
    // T1, the callers' retransmissions add to the load, and goodput falls well below the
    // capacity (Shen et al. 2008, fig. 4).
    let mut goodputs = Vec::new();
    for rate in [2.0 * CAPACITY, 4.0 * CAPACITY] {
        let (s, rows, p, _) = through_one_proxy(rate, 20, &emulated);
        let g = goodput(&rows, 11, 20);
        eprintln!(
            "offered {rate} calls/s (capacity {CAPACITY}): goodput {g:.0} calls/s, {} of {} \
             calls failed, {} retransmissions sent, {} queue drops",
            s.failed, s.offered, s.retransmissions_sent, p.dropped_queue_full
        );
        assert!(s.retransmissions_sent > s.offered, "{s:?}");
        assert!(p.dropped_queue_full > 0);
        goodputs.push(g);
    }
    assert!(goodputs[0] < 0.75 * CAPACITY, "2x: goodput {}", goodputs[0]);
    assert!(goodputs[1] < 0.5 * CAPACITY, "4x: goodput {}", goodputs[1]);
    assert!(
        goodputs[1] < goodputs[0],
        "more load, less goodput: {goodputs:?}"
    );
}

/// UAC -> SE -> RE (emulated capacity) -> UAS for 15 s: goodput over seconds 6 to 15 and
/// both proxies' stats. `control`: the RE's algorithm and what the SE offers, or none.
fn hop_by_hop(rate: f64, control: Option<(&str, OcAlgorithm)>) -> (f64, CoreStats, CoreStats) {
    let mut se = proxy(SE, RE, 0.0, 500);
    let mut re = proxy(RE, UAS, 500.0, 2000);
    if let Some((algorithm, offered)) = control {
        se.overload.role = HopRole::Se;
        se.overload.client.algorithms = vec![offered];
        re.overload.role = HopRole::Re;
        re.overload.neighbours = vec![addr(SE)];
        re.control.algorithm = algorithm.parse().unwrap();
        se.validate().unwrap();
        re.validate().unwrap();
    }
    let mut uac = caller(rate, SE, 15);
    let mut se_core = ProxyCore::new(&se, addr(SE), Time::ZERO);
    let mut re_core = ProxyCore::new(&re, addr(RE), Time::ZERO);
    let mut uas = Callee(Uas::new(UasConfig::new(addr(UAS))));
    let done = {
        let mut net = Testbed::new(LINK);
        net.attach(addr(UAC), &mut uac);
        net.attach(addr(SE), &mut se_core);
        net.attach(addr(RE), &mut re_core);
        net.attach(addr(UAS), &mut uas);
        net.run_until(Time::from_secs(60), |_| false);
        net.now()
    };
    (
        goodput(&uac.rows, 6, 15),
        se_core.stats(done),
        re_core.stats(done),
    )
}

#[test]
fn rate_abs_as_rfc7415_rate_or_rfc7339_loss_and_win_disc_as_sluicewin_hold_goodput_at_4x() {
    let offered = 4.0 * CAPACITY;
    let (none, _, _) = hop_by_hop(offered, None);
    eprintln!("4x, no control: goodput {none:.0} calls/s (capacity {CAPACITY})");
    // Behind a stateful SE (which absorbs the callers' retransmissions) the collapse is
    // milder than with the callers in front of the RE, but goodput is well below capacity.
    assert!(none < 0.85 * CAPACITY, "no control: {none}");
    for (algorithm, wire) in [
        ("rate-abs", OcAlgorithm::Rate),
        ("rate-abs", OcAlgorithm::Loss),
        ("rate-abs", OcAlgorithm::SluiceRate),
        ("win-disc", OcAlgorithm::SluiceWindow),
    ] {
        let (g, se, re) = hop_by_hop(offered, Some((algorithm, wire)));
        eprintln!(
            "4x, {algorithm} as {}: goodput {g:.0} calls/s; SE applied {} reduced {}; RE stamped \
             {}, queue drops {}",
            wire.token(),
            se.hop.client.applied,
            se.hop.client.rejected_normal,
            re.hop.responses_stamped,
            re.dropped_queue_full
        );
        assert!(
            g > 0.95 * CAPACITY,
            "{algorithm}/{}: goodput {g}",
            wire.token()
        );
        assert_eq!(re.dropped_queue_full, 0);
        assert!(se.hop.client.applied > 10);
        // Nothing forged or broken; only late copies (2xx retransmissions the RE stamped
        // after the INVITE's transaction ended) are passed over.
        assert_eq!(se.hop.feedback_without_transaction, 0, "{:?}", se.hop);
        assert_eq!(
            se.hop.feedback_ignored(),
            se.hop.feedback_late,
            "{:?}",
            se.hop
        );
    }
}
