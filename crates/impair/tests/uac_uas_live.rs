//! sluice's UAC calls sluice's UAS through a relay with 10 ms of one-way delay and 0.5 %
//! loss each way, on loopback: setup takes at least the two crossings, the relay loses
//! datagrams, and every call still completes through SIP's retransmissions. About 6 s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_impair::{spawn, ImpairConfig, RelayConfig};
use sluice_load::shell::{self, Stop};
use sluice_load::{Hold, UacConfig, UasConfig};

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[test]
fn calls_through_a_delaying_lossy_relay_take_the_delay_and_survive_the_loss() {
    let (delay_ms, loss, rate, secs) = (10.0, 0.005, 200.0, 4.0);

    let uas_socket = shell::bind_udp(loopback()).unwrap();
    let uas_addr = uas_socket.local_addr().unwrap();
    let uas_stop = Arc::new(AtomicBool::new(false));
    let stop = Stop {
        after: Some(Duration::from_mins(1)),
        flag: Some(uas_stop.clone()),
    };
    let uas =
        std::thread::spawn(move || shell::run_uas(uas_socket, UasConfig::new(uas_addr), &stop));

    let link = ImpairConfig {
        delay_ms,
        loss,
        seed: 11,
        ..ImpairConfig::default()
    };
    let mut relay = RelayConfig::new(loopback(), uas_addr, &link);
    relay.duration = Some(Duration::from_mins(1));
    let relays = spawn(vec![relay]).unwrap();
    let target = relays.relays[0].listen;

    let uac_socket = shell::bind_udp(loopback()).unwrap();
    let mut cfg = UacConfig::new(uac_socket.local_addr().unwrap(), target, rate);
    cfg.duration = Some(Duration::from_secs_f64(secs));
    cfg.hold = Hold::Constant(Duration::ZERO);
    // Room for a BYE lost twice (T1 doubling: 0.5 + 1 + 2 s).
    cfg.drain_timeout = Duration::from_secs(5);
    cfg.seed = 3;
    let run = shell::run_uac(uac_socket, cfg, &Stop::default(), |_| {}).unwrap();

    let stats = relays.stop();
    uas_stop.store(true, Ordering::Relaxed);
    let uas = uas.join().unwrap().unwrap();
    let s = &run.summary;
    let link = stats[0];
    let p50 = s.setup.p50_ms.unwrap();
    eprintln!(
        "{} calls offered, {} successful, {} failed, {} unfinished; setup p50 {p50:.1} ms p99 {:?} ms; \
         UAC retransmissions {} sent; UAS retransmissions {}; relay {link:?}",
        s.offered,
        s.successful,
        s.failed,
        s.unfinished,
        s.setup.p99_ms,
        s.retransmissions_sent,
        uas.summary.retransmissions_sent
    );
    let hops = 1.0;
    assert!(
        p50 >= 2.0 * hops * delay_ms,
        "setup p50 {p50} ms: INVITE and 200 each cross the relay"
    );
    let both = link.both();
    assert!(both.offered() > 5_000, "{both:?}");
    assert!(both.dropped_loss > 0, "loss applied: {link:?}");
    // Within five standard deviations of 0.5 % of what crossed.
    let n = both.offered() as f64;
    let sd = (n * loss * (1.0 - loss)).sqrt();
    assert!(
        (both.dropped_loss as f64 - n * loss).abs() < 5.0 * sd,
        "{both:?}"
    );
    assert_eq!(both.dropped_budget, 0);
    assert_eq!(
        (link.clients, link.clients_refused, link.foreign),
        (1, 0, 0)
    );
    // Every call completed: losses were repaired by retransmission.
    assert!(s.offered >= 700, "{s:?}");
    assert_eq!(s.successful, s.offered, "{s:?}");
    assert_eq!((s.failed, s.unfinished), (0, 0), "{s:?}");
    assert!(
        s.retransmissions_sent + uas.summary.retransmissions_sent > 0,
        "lost datagrams were sent again"
    );
}
