//! Hop-by-hop overload control on real loopback sockets: sluice's UAC -> `sluice proxy`
//! as SE -> `sluice proxy` as RE with emulated capacity -> sluice's UAS, each on its own
//! thread. Offered three times the RE's capacity, RFC 7339/7415 feedback keeps the RE's
//! goodput near capacity; without it goodput falls. The capacity is low (about 100
//! calls/s) and the margins coarse, so a debug build on a busy two-core machine passes.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_control::overload::OcAlgorithm;
use sluice_load::shell::{bind_udp, run_uac, Stop};
use sluice_load::{SecondRow, UacConfig};
use sluice_proxy::{HopRole, ProxyConfig, ProxyReport};

mod common;
use common::{Running, Uas};

/// 7 messages a call at 1430 us each: about 100 calls/s.
const COST_US: f64 = 1430.0;
const CAPACITY: f64 = 100.0;
const SECONDS: u64 = 7;

fn localhost0() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Goodput (calls/s set up, seconds 4 to 7) at `rate` calls/s, with `control` = the RE's
/// algorithm and the SE's offered `oc-algo`, or no hop-by-hop control; and both reports.
fn live(rate: f64, control: Option<(&str, OcAlgorithm)>) -> (f64, ProxyReport, ProxyReport) {
    let uas = Uas::start_on(localhost0());
    let uas_addr = uas.addr;
    // The RE must know the SE's address before the SE exists: reserve a port free for UDP
    // and TCP, as the SE listens on both.
    let se_addr = std::net::SocketAddr::new(
        localhost0().ip(),
        sluice_sys::free_sip_port(localhost0().ip()).unwrap(),
    );
    let mut re = ProxyConfig {
        listen: localhost0(),
        next_hop: Some(uas_addr),
        cost_forward_us: COST_US,
        queue_capacity: 2000,
        shutdown_grace_s: 0.5,
        ..ProxyConfig::default()
    };
    let mut se = ProxyConfig {
        listen: se_addr,
        shutdown_grace_s: 0.5,
        ..ProxyConfig::default()
    };
    if let Some((algorithm, offered)) = control {
        re.overload.role = HopRole::Re;
        re.overload.neighbours = vec![se_addr];
        re.control.algorithm = algorithm.parse().unwrap();
        se.overload.role = HopRole::Se;
        se.overload.client.algorithms = vec![offered];
    }
    let re = Running::start(re);
    se.next_hop = Some(re.addr);
    let se = Running::start(se);
    let mut uac = UacConfig::new(localhost0(), se_addr, rate);
    uac.duration = Some(Duration::from_secs(SECONDS));
    // Calls still open after the offered period do not count: do not wait for them long.
    uac.drain_timeout = Duration::from_secs(2);
    let mut rows: Vec<SecondRow> = Vec::new();
    let stop = Stop {
        after: Some(Duration::from_secs(SECONDS + 5)),
        ..Stop::default()
    };
    run_uac(bind_udp(localhost0()).unwrap(), uac, &stop, |r| {
        rows.push(*r);
    })
    .unwrap();
    let se_report = se.finish();
    let re_report = re.finish();
    uas.finish();
    let steady: Vec<_> = rows
        .iter()
        .filter(|r| (4..=SECONDS).contains(&r.second))
        .collect();
    let goodput =
        steady.iter().map(|r| r.counts.successful).sum::<u64>() as f64 / steady.len().max(1) as f64;
    (goodput, se_report, re_report)
}

#[test]
fn rfc7415_rate_and_rfc7339_loss_hold_the_re_near_capacity_at_3x_live() {
    let offered = 3.0 * CAPACITY;
    let (none, _, re) = live(offered, None);
    eprintln!(
        "3x live, no control: goodput {none:.0} calls/s (capacity {CAPACITY}), RE queue drops {}",
        re.stats.dropped_queue_full
    );
    for wire in [OcAlgorithm::Rate, OcAlgorithm::Loss] {
        let (g, se, re) = live(offered, Some(("rate-abs", wire)));
        eprintln!(
            "3x live, rate-abs as {}: goodput {g:.0} calls/s; SE feedback applied {}, \
             ignored {}, reduced {}; RE stamped {}, queue drops {}",
            wire.token(),
            se.stats.hop.client.applied,
            se.stats.hop.feedback_ignored(),
            se.stats.hop.client.rejected_normal,
            re.stats.hop.responses_stamped,
            re.stats.dropped_queue_full
        );
        assert!(se.stats.hop.client.applied > 100, "{:?}", se.stats.hop);
        assert!(se.stats.hop.client.rejected_normal > 0);
        assert!(g > 0.8 * CAPACITY, "{}: goodput {g}", wire.token());
        assert!(
            g > none + 0.1 * CAPACITY,
            "{}: {g} vs none {none}",
            wire.token()
        );
    }
}
