//! A proxy with two UDP threads (`workers = 2`) on real loopback sockets. The kernel hands
//! each datagram to the thread numbered after the CPU that received it, so a call's
//! messages, retransmissions and responses arrive on either; both threads drive the one core, so
//! every call completes and the local control sees the whole process's queue and load.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_control::Algorithm;
use sluice_load::shell::{bind_udp, run_uac, Stop};
use sluice_load::{UacConfig, UacSummary};
use sluice_proxy::{ProxyConfig, ProxyReport};

mod common;
use common::{Running, Uas};

fn localhost0() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A UAC calling through `proxy` at `rate` calls/s for `seconds`, holding each call
/// 200 ms.
fn calls(proxy: SocketAddr, rate: f64, seconds: u64, caller: u64) -> UacSummary {
    let mut uac = UacConfig::new(localhost0(), proxy, rate);
    // Call-IDs and branches of their own: callers that shared them would look to the
    // proxy like one caller's retransmissions, which no control rejects.
    uac.run_token = caller;
    uac.duration = Some(Duration::from_secs(seconds));
    uac.hold = sluice_load::uac::Hold::Constant(Duration::from_millis(200));
    uac.drain_timeout = Duration::from_secs(3);
    let stop = Stop {
        after: Some(Duration::from_secs(seconds + 10)),
        ..Stop::default()
    };
    run_uac(bind_udp(localhost0()).unwrap(), uac, &stop, |_| {})
        .unwrap()
        .summary
}

/// `callers` UACs at `rate` calls/s each for `seconds` through a proxy built from `config`.
fn run(
    config: ProxyConfig,
    callers: usize,
    rate: f64,
    seconds: u64,
) -> (Vec<UacSummary>, ProxyReport) {
    let uas = Uas::start_on(localhost0());
    let proxy = Running::start(ProxyConfig {
        listen: localhost0(),
        next_hop: Some(uas.addr),
        shutdown_grace_s: 0.5,
        ..config
    });
    let addr = proxy.addr;
    let uacs: Vec<_> = (0..callers)
        .map(|i| std::thread::spawn(move || calls(addr, rate, seconds, i as u64)))
        .collect();
    let summaries = uacs.into_iter().map(|t| t.join().unwrap()).collect();
    let report = proxy.finish();
    uas.finish();
    (summaries, report)
}

#[test]
fn two_udp_threads_share_the_datagrams_and_every_call_completes() {
    let (summaries, report) = run(
        ProxyConfig {
            workers: 2,
            ..ProxyConfig::default()
        },
        3,
        200.0,
        3,
    );
    let offered: u64 = summaries.iter().map(|s| s.offered).sum();
    let successful: u64 = summaries.iter().map(|s| s.successful).sum();
    let completed: u64 = summaries.iter().map(|s| s.completed).sum();
    let read = &report.udp_threads;
    eprintln!(
        "{successful} of {offered} calls set up, {completed} completed; datagrams read per \
         thread {read:?}, the core saw {}",
        report.stats.datagrams_in
    );
    assert!(offered >= 1500, "offered {offered}");
    assert_eq!(successful, offered, "{summaries:?}");
    assert_eq!(completed, offered);
    assert!(summaries.iter().all(|s| s.admitted_unanswered == 0));
    assert_eq!(read.len(), 2);
    // Every datagram either thread read reached the core.
    assert_eq!(read.iter().sum::<u64>(), report.stats.datagrams_in);
    // Callers, callee and proxy threads run on both CPUs, so both threads get a share.
    for &n in read {
        assert!(
            n * 10 >= report.stats.datagrams_in,
            "a thread read {n} of {}",
            report.stats.datagrams_in
        );
    }
}

/// The emulated processor is the core's, whatever the threads: one PI over the whole
/// process's INVITE queue holds the same goodput at 3x with one thread or two.
#[test]
fn the_pi_holds_the_same_goodput_at_three_times_capacity_with_one_thread_or_two() {
    let goodput = |workers: usize| {
        let config = ProxyConfig {
            workers,
            invite_queue: true,
            // A quarter of a second of INVITEs: what is queued at the end, served after
            // the callers stop, is then a small part of the count.
            invite_queue_capacity: 100,
            // 400 INVITEs/s of capacity; other messages cost nothing (De Cicco et al.).
            cost_forward_us: 2_500.0,
            cost_reject_us: 100.0,
            cost_other_us: Some(0.0),
            control: sluice_control::ControlConfig {
                algorithm: Algorithm::Pi,
                ..sluice_control::ControlConfig::default()
            },
            ..ProxyConfig::default()
        };
        let seconds = 6;
        let (summaries, report) = run(config, 3, 400.0, seconds);
        let successful: u64 = summaries.iter().map(|s| s.successful).sum();
        let g = successful as f64 / seconds as f64 / 400.0;
        eprintln!(
            "workers {workers}: goodput {g:.3} of capacity; datagrams per thread {:?}",
            report.udp_threads
        );
        (g, report)
    };
    let (one, _) = goodput(1);
    let (two, report) = goodput(2);
    assert_eq!(report.udp_threads.len(), 2);
    // The most any local control keeps at 3x with rejections at 1/25 of a call's cost and
    // the PI's 0.9 CPU target: g_opt = 0.81 (De Cicco et al., eq. 2). Measured 0.835-0.836
    // with one thread and with two (what waits in the queue at the end is served later).
    let bound = sluice_control::optimal::optimal_goodput(3.0, 25.0, 0.9);
    assert!(one > 0.95 * bound, "one thread: {one:.3}, g_opt {bound:.3}");
    assert!(
        two > 0.95 * bound,
        "two threads: {two:.3}, g_opt {bound:.3}"
    );
    assert!(
        (one - two).abs() < 0.05,
        "one thread {one:.3}, two threads {two:.3}"
    );
}
