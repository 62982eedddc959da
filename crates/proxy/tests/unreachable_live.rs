//! An unreachable next hop on real loopback sockets: a proxy routes calls for user `dead`
//! to a closed port and everything else to sluice's UAS. The kernel answers each INVITE
//! sent to the closed port with an ICMP port unreachable; the shell reads it back from the
//! socket's error queue and the core ends that client transaction with a transport error
//! (RFC 3261 §18.4, §16.9), so each of those calls gets its 500 within a second instead
//! of a 408 after Timer B's 32 s, while the calls to the live route all complete.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_load::shell::{bind_udp, run_uac, Stop};
use sluice_load::{SecondRow, UacConfig, UacSummary};
use sluice_proxy::{ProxyConfig, RouteRule};

mod common;
use common::{Running, Uas};

const SECONDS: u64 = 3;

fn localhost0() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A UAC calling `user` through `proxy` at `rate` calls/s for [`SECONDS`]; calls still open
/// a second after the last one started are left unfinished.
fn calls(proxy: SocketAddr, user: &str, rate: f64) -> (UacSummary, Vec<SecondRow>) {
    let mut uac = UacConfig::new(localhost0(), proxy, rate);
    uac.request_uri = format!("sip:{user}@{proxy}");
    uac.duration = Some(Duration::from_secs(SECONDS));
    uac.drain_timeout = Duration::from_secs(1);
    let mut rows = Vec::new();
    let stop = Stop {
        after: Some(Duration::from_secs(SECONDS + 5)),
        ..Stop::default()
    };
    let run = run_uac(bind_udp(localhost0()).unwrap(), uac, &stop, |r| {
        rows.push(*r);
    })
    .unwrap();
    (run.summary, rows)
}

#[test]
fn calls_to_a_closed_port_fail_within_a_second_and_the_live_route_is_untouched() {
    let uas = Uas::start_on(localhost0());
    // A port nothing listens on: bound for its number, then closed.
    let dead = std::net::UdpSocket::bind(localhost0())
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Running::start(ProxyConfig {
        listen: localhost0(),
        next_hop: Some(uas.addr),
        routes: vec![RouteRule {
            host: None,
            user: Some("dead".into()),
            next_hop: dead,
        }],
        shutdown_grace_s: 0.5,
        ..ProxyConfig::default()
    });
    let addr = proxy.addr;
    let dead_calls = std::thread::spawn(move || calls(addr, "dead", 20.0));
    let (live, _) = calls(addr, "service", 50.0);
    let (dead_summary, dead_rows) = dead_calls.join().unwrap();
    let report = proxy.finish();
    uas.finish();
    let s = &report.stats;
    eprintln!(
        "dead route: {} calls, {} answered 500, {} unfinished; live route: {} of {} set up; \
         ICMP unreachable applied {}, ignored {}; 500 sent {}, 408 sent {}",
        dead_summary.offered,
        dead_summary.failures.other_final,
        dead_summary.unfinished,
        live.successful,
        live.offered,
        s.unreachable,
        s.unreachable_ignored,
        s.transport_500,
        s.timeouts_408
    );

    // Every call to the dead route ended with the proxy's 500, none waited for Timer B.
    let n = dead_summary.offered;
    assert!(n >= 50, "{dead_summary:?}");
    assert_eq!(dead_summary.failures.other_final, n, "{dead_summary:?}");
    assert_eq!(dead_summary.unfinished, 0, "{dead_summary:?}");
    assert_eq!(dead_summary.failures.timeout, 0, "{dead_summary:?}");
    // Each within a second of its INVITE: by the end of every second, every call started
    // before that second began has its final response.
    let (mut offered, mut failed) = (0, 0);
    for row in &dead_rows {
        failed += row.counts.failed.total();
        assert!(failed >= offered, "second {}: {dead_rows:?}", row.second);
        offered += row.counts.offered;
    }
    // One ICMP error per call (the 500 ends the transaction before Timer A resends), each
    // matched to its transaction; the 500s are the proxy's, answered at once.
    assert_eq!(s.unreachable, n);
    assert_eq!(s.transport_500, n);
    assert_eq!(s.timeouts_408, 0);
    assert_eq!(s.unreachable_ignored, 0);

    // The live route meanwhile: every call set up.
    assert!(live.offered >= 120, "{live:?}");
    assert_eq!(live.successful, live.offered, "{live:?}");
    assert_eq!(live.failed, 0, "{live:?}");
}
