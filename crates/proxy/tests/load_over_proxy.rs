//! sluice's own UAC and UAS (the `sluice-load` cores) calling each other through the proxy
//! core, all three sans IO on one in-memory network with made-up time: the interop of the
//! three cores, and the overload collapse the papers describe once the proxy's capacity is
//! emulated and no control is on.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_load::{SecondRow, Uac, UacConfig, UacSummary, Uas, UasConfig};
use sluice_proxy::{CoreStats, ProxyConfig, ProxyCore};
use sluice_time::Time;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const UAC: u16 = 5001;
const PROXY: u16 = 5060;
const UAS: u16 = 5070;
/// One-way delay of every link.
const LINK: Duration = Duration::from_micros(500);

/// Runs UAC -> proxy -> UAS until the UAC is done (or `until`), delivering datagrams in
/// time order (ties in send order).
/// A datagram on the wire: (arrival, send order, from port, to port, payload), earliest first.
type InFlight = Reverse<(Time, u64, u16, u16, Bytes)>;

/// Returns the UAC's summary, its per-second rows and the proxy's stats.
fn run(
    uac: &mut Uac,
    proxy: &mut ProxyCore,
    uas: &mut Uas,
    until: Time,
) -> (UacSummary, Vec<SecondRow>, CoreStats) {
    let mut rows = Vec::new();
    let mut wire: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut now = Time::ZERO;
    loop {
        uac.handle_timeout(now);
        proxy.handle_timeout(now);
        uas.handle_timeout(now);
        let mut send = |from: u16, to: SocketAddr, payload: Bytes| {
            seq += 1;
            wire.push(Reverse((now + LINK, seq, from, to.port(), payload)));
        };
        while let Some(o) = uac.poll_transmit() {
            send(UAC, o.to, o.payload);
        }
        while let Some(t) = proxy.poll_transmit() {
            send(PROXY, t.to, t.payload);
        }
        while let Some(o) = uas.poll_transmit() {
            send(UAS, o.to, o.payload);
        }
        rows.extend(std::iter::from_fn(|| uac.poll_row()));
        while let Some(Reverse((t, ..))) = wire.peek() {
            if *t > now {
                break;
            }
            let Reverse((_, _, from, to, payload)) = wire.pop().unwrap();
            match to {
                UAC => uac.handle_datagram(now, payload, addr(from)),
                PROXY => proxy.handle_datagram(now, payload, addr(from)),
                UAS => uas.handle_datagram(now, payload, addr(from)),
                other => panic!("datagram to unknown port {other}"),
            }
        }
        if uac.is_done() || now > until {
            break;
        }
        let next = [
            uac.poll_timeout(),
            proxy.poll_timeout(),
            uas.poll_timeout(),
            wire.peek().map(|Reverse((t, ..))| *t),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => now = t.max(now),
            None => break,
        }
    }
    rows.extend(std::iter::from_fn(|| uac.poll_row()));
    (uac.summary(), rows, proxy.stats(now))
}

fn setup(rate: f64, seconds: u64, cost_forward_us: u64, queue: usize) -> (Uac, ProxyCore, Uas) {
    let mut c = UacConfig::new(addr(UAC), addr(PROXY), rate);
    c.duration = Some(Duration::from_secs(seconds));
    let uac = Uac::new(c, Time::ZERO);
    let config = ProxyConfig {
        listen: addr(PROXY),
        next_hop: Some(addr(UAS)),
        cost_forward_us: cost_forward_us as f64,
        queue_capacity: queue,
        ..ProxyConfig::default()
    };
    let proxy = ProxyCore::new(&config, addr(PROXY), Time::ZERO);
    let uas = Uas::new(UasConfig::new(addr(UAS)));
    (uac, proxy, uas)
}

#[test]
fn sluice_uac_and_uas_complete_every_call_through_the_proxy() {
    let (mut uac, mut proxy, mut uas) = setup(400.0, 5, 0, 500);
    let (s, _, p) = run(&mut uac, &mut proxy, &mut uas, Time::from_secs(120));
    assert!(s.clean(), "{s:?}");
    assert_eq!((s.offered, s.successful, s.completed), (2000, 2000, 2000));
    assert_eq!(uas.counts().invites, 2000);
    // INVITE and BYE statefully, the ACK statelessly; nothing left hanging.
    assert_eq!((p.forwarded_requests, p.forwarded_acks), (4000, 2000));
    assert_eq!((p.pending_requests, p.dropped_queue_full), (0, 0));
}

/// Goodput in the steady state (calls set up within 10 s per second, seconds 10 to 20 of
/// a 20 s run), the UAC's summary and the proxy's stats.
///
/// 500 us per message is 2000 messages/s; a call is 7 messages through the proxy (INVITE,
/// 100, 180, 200, ACK, BYE, 200), so the capacity is about 285 calls/s. The FIFO holds 2000
/// messages, a second of work: as in the papers' testbeds (2 ms per message behind a
/// 500-message queue), a full queue delays messages beyond T1 (500 ms), which is what sets
/// off the retransmissions behind the collapse. With a queue shorter than T1's worth of work
/// a full queue drops instead, and goodput at 2x stays near capacity.
fn overload_run(rate: f64) -> (f64, UacSummary, CoreStats) {
    let (mut uac, mut proxy, mut uas) = setup(rate, 20, 500, 2000);
    let (s, rows, p) = run(&mut uac, &mut proxy, &mut uas, Time::from_secs(120));
    let steady: Vec<_> = rows
        .iter()
        .filter(|r| (11..=20).contains(&r.second))
        .collect();
    assert_eq!(steady.len(), 10);
    let goodput = steady.iter().map(|r| r.counts.successful).sum::<u64>() as f64 / 10.0;
    (goodput, s, p)
}

#[test]
fn emulated_capacity_collapses_without_control_as_in_the_papers() {
    let (light, s, p) = overload_run(140.0);
    assert!(s.clean(), "half the capacity runs clean: {s:?}");
    assert!((light - 140.0).abs() < 1.0, "{light}");
    assert_eq!(p.dropped_queue_full, 0);

    // Two and four times the capacity, no overload control: the queue delays messages past
    // T1, the callers' retransmissions add to the load, and goodput falls well below the
    // 285 calls/s the proxy serves at exactly its capacity (Shen et al. 2008, fig. 4).
    let mut goodputs = Vec::new();
    for rate in [570.0, 1140.0] {
        let (goodput, s, p) = overload_run(rate);
        eprintln!(
            "offered {rate} calls/s (capacity 285): goodput {goodput:.0} calls/s, {} of {} \
             calls failed, {} retransmissions sent, {} queue drops",
            s.failed, s.offered, s.retransmissions_sent, p.dropped_queue_full
        );
        assert!(s.retransmissions_sent > s.offered, "{s:?}");
        assert!(p.dropped_queue_full > 0);
        goodputs.push(goodput);
    }
    assert!(goodputs[0] < 0.75 * 285.0, "2x: goodput {}", goodputs[0]);
    assert!(goodputs[1] < 0.5 * 285.0, "4x: goodput {}", goodputs[1]);
    assert!(
        goodputs[1] < goodputs[0],
        "more load, less goodput: {goodputs:?}"
    );
}
