//! Engine behaviour on short seeded runs (a few simulated minutes at most, sized for debug
//! builds). The paper-length sweeps are the `#[ignore]`d test at the end: run them with
//! `cargo test --release -p sluice-sim --test engine -- --ignored --nocapture`.

use sluice_control::{Algorithm, ControlConfig};
use sluice_sim::{run, LoadStep, RunReport, Scenario, SourceConfig};

fn scenario(algorithm: Algorithm, load: f64, duration_s: f64, warmup_s: f64) -> Scenario {
    let mut s = Scenario {
        duration_s,
        warmup_s,
        offered_load: load,
        ..Scenario::default()
    };
    s.re.control = ControlConfig::for_algorithm(algorithm);
    s
}

/// Shorter calls reach the steady mix of setup and teardown traffic sooner.
fn short_calls(mut s: Scenario) -> Scenario {
    s.call.holding_time_s = 5.0;
    s
}

fn total_retransmissions(r: &RunReport) -> u64 {
    r.retransmissions.values().sum()
}

#[test]
fn no_control_collapses_under_overload_with_retransmissions() {
    // Threshold rejection answers with stateless 503s (no 503 retransmission, the ACK
    // ended without a transaction), which holds off the collapse a little longer.
    for (algorithm, collapsed) in [(Algorithm::None, 0.2), (Algorithm::Threshold, 0.35)] {
        let mut s = short_calls(scenario(algorithm, 2.0, 30.0, 15.0));
        // The paper's threshold: its watermarks alone, without sluice's work mark.
        s.re.control.threshold.work_mark = Some(std::time::Duration::ZERO);
        let r = run(&s);
        assert!(r.error.is_none(), "{:?}", r.error);
        assert!(
            r.goodput < collapsed,
            "{algorithm}: goodput {:.3}",
            r.goodput
        );
        assert!(
            r.occupancy > 0.99,
            "{algorithm}: occupancy {:.3}",
            r.occupancy
        );
        assert!(
            total_retransmissions(&r) > 1000 && r.retrans_ratio > 0.3,
            "{algorithm}: retransmissions {:?}, ratio {:.3}",
            r.retransmissions,
            r.retrans_ratio
        );
        for kind in ["INVITE", "200-INVITE", "BYE"] {
            assert!(
                r.retransmissions.get(kind).copied().unwrap_or(0) > 0,
                "{algorithm}: no {kind} retransmissions in {:?}",
                r.retransmissions
            );
        }
        match algorithm {
            Algorithm::None => assert!(r.re_dropped > 0, "simple drop drops"),
            _ => assert!(r.re_rejected > 0, "threshold rejection rejects"),
        }
    }
}

#[test]
fn every_admitted_invite_gets_a_final_response_in_collapse_and_under_control() {
    // 300 s: the calls of the first 86 s are old enough for every proxy timer (Timer C,
    // 181 s, and 64·T1 after it) to have run out.
    for algorithm in [Algorithm::None, Algorithm::Threshold, Algorithm::RateAbs] {
        let r = run(&scenario(algorithm, 3.0, 300.0, 10.0));
        assert!(r.calls_offered > 10_000, "{algorithm}: {}", r.calls_offered);
        assert!(
            r.admitted_checked > 5_000,
            "{algorithm}: {}",
            r.admitted_checked
        );
        assert_eq!(r.admitted_unanswered, 0, "{algorithm}");
    }
}

#[test]
fn goodput_follows_load_below_capacity() {
    for algorithm in [Algorithm::None, Algorithm::RateAbs] {
        let r = run(&scenario(algorithm, 0.5, 60.0, 10.0));
        assert!(
            (r.goodput - 0.5).abs() < 0.06,
            "{algorithm}: goodput {:.3} at load 0.5",
            r.goodput
        );
        assert!((r.offered_load - 0.5).abs() < 0.06);
        assert!(r.calls_rejected as f64 <= 0.05 * r.calls_offered as f64);
        // Uncongested: setup is a handful of 2 ms services, no retransmission.
        assert!(r.setup_delay_p50_ms > 5.0 && r.setup_delay_p50_ms < 50.0);
        assert_eq!(total_retransmissions(&r), 0, "{:?}", r.retransmissions);
    }
}

#[test]
fn feedback_control_holds_capacity_at_load_4() {
    for algorithm in [Algorithm::WinCont, Algorithm::RateAbs, Algorithm::WinDisc] {
        let r = run(&short_calls(scenario(algorithm, 4.0, 30.0, 10.0)));
        assert!(r.goodput >= 0.95, "{algorithm}: goodput {:.3}", r.goodput);
        assert!(
            r.goodput <= 1.02,
            "{algorithm}: goodput {:.3} above capacity",
            r.goodput
        );
        assert!(
            r.reject_ratio > 0.6,
            "{algorithm}: reject ratio {:.3}",
            r.reject_ratio
        );
        assert_eq!(r.re_dropped, 0, "{algorithm}: queue overflowed");
        assert!(
            r.retrans_ratio < 0.01,
            "{algorithm}: retransmission ratio {:.4}",
            r.retrans_ratio
        );
        // Milliseconds, not seconds: a few queue passes within the 200 ms budget.
        assert!(
            r.setup_delay_p50_ms > 5.0 && r.setup_delay_p50_ms < 1000.0,
            "{algorithm}: setup delay p50 {:.1} ms",
            r.setup_delay_p50_ms
        );
        assert!(r.setup_delay_p99_ms >= r.setup_delay_p50_ms);
        assert!(r.per_source.iter().all(|s| s.feedback_applied > 0));
    }
}

#[test]
fn same_seed_same_report_different_seed_different_report() {
    let mut s = scenario(Algorithm::WinCont, 1.5, 20.0, 5.0);
    s.timeseries = true;
    let a = serde_json::to_string(&run(&s)).unwrap();
    let b = serde_json::to_string(&run(&s)).unwrap();
    assert_eq!(a, b);
    s.seed = 2;
    let c = serde_json::to_string(&run(&s)).unwrap();
    assert_ne!(a, c);
}

#[test]
fn adding_a_source_does_not_perturb_the_others_arrivals() {
    let mut s = scenario(Algorithm::None, 0.3, 20.0, 0.0);
    s.timeseries = true;
    let mut t = s.clone();
    // Same per-source rate with a fourth source added.
    t.offered_load = 0.4;
    t.sources.push(SourceConfig {
        name: "UA4".into(),
        ..SourceConfig::default()
    });
    let (a, b) = (run(&s), run(&t));
    let offered = |r: &RunReport, i: usize| -> Vec<f64> {
        r.timeseries
            .as_ref()
            .unwrap()
            .points
            .iter()
            .map(|p| p.offered_cps[i])
            .collect()
    };
    for i in 0..3 {
        assert_eq!(offered(&a, i), offered(&b, i), "source {i}");
    }
}

#[test]
fn capacity_is_derived_from_the_configuration() {
    let mut s = Scenario::default();
    assert!((s.capacity_cps() - 500.0 / 7.0).abs() < 1e-9);
    s.re.cost_forward_us = 1000.0;
    assert!((s.capacity_cps() - 1000.0 / 7.0).abs() < 1e-9);
    s.call.callee_sends_trying = false;
    assert!((s.capacity_cps() - 1000.0 / 6.0).abs() < 1e-9);
    // And the run measures against it: a faster server at the same absolute load is
    // half as loaded.
    let mut slow = scenario(Algorithm::None, 0.8, 30.0, 10.0);
    slow.call.holding_time_s = 5.0;
    let mut fast = slow.clone();
    fast.re.cost_forward_us = 1000.0;
    fast.offered_load = 0.4;
    let (a, b) = (run(&slow), run(&fast));
    assert!((a.capacity_cps * 2.0 - b.capacity_cps).abs() < 1e-9);
    assert!(
        (a.offered_cps - b.offered_cps).abs() < 0.1,
        "same absolute offered rate"
    );
    assert!(b.occupancy < a.occupancy * 0.6);
}

#[test]
fn invalid_scenarios_are_refused_with_a_reason() {
    type Edit = fn(&mut Scenario);
    let cases: Vec<(Edit, &str)> = vec![
        (|s| s.duration_s = -1.0, "duration_s"),
        (|s| s.duration_s = f64::NAN, "duration_s"),
        (|s| s.warmup_s = 700.0, "warmup_s"),
        (|s| s.offered_load = -0.1, "offered_load"),
        (|s| s.sources.clear(), "sources"),
        (|s| s.sources[0].share = f64::INFINITY, "share"),
        (|s| s.re.queue_capacity = 0, "queue_capacity"),
        (|s| s.re.cost_forward_us = 0.0, "cost_forward_us"),
        (|s| s.re.cost_reject_us = -3.0, "cost_reject_us"),
        (|s| s.se.cost_other_us = Some(f64::NAN), "se: cost_other_us"),
        (|s| s.call.holding_time_s = -1.0, "holding_time_s"),
        (|s| s.call.setup_deadline_s = 0.0, "setup_deadline_s"),
        (|s| s.link.loss = 1.0, "link.loss"),
        (|s| s.link.delay_ms = -5.0, "delay_ms"),
        (|s| s.sip.t1_ms = 0.0, "t1_ms"),
        (|s| s.sip.t2_ms = 100.0, "t2_ms"),
        (|s| s.offered_load = 1.0e9, "calls"),
        (
            |s| {
                s.sources[0].schedule = vec![
                    LoadStep {
                        at_s: 10.0,
                        load: 1.0,
                    },
                    LoadStep {
                        at_s: 5.0,
                        load: 1.0,
                    },
                ];
            },
            "increasing",
        ),
        (
            |s| {
                s.se.overload.client.rate_throttle = sluice_control::ThrottleKind::Window;
            },
            "se: overload.client",
        ),
    ];
    for (edit, needle) in cases {
        let mut s = Scenario::default();
        edit(&mut s);
        let err = s.validate().expect_err(needle);
        assert!(err.contains(needle), "{err:?} should mention {needle}");
        let r = run(&s);
        assert_eq!(r.error.as_deref(), Some(err.as_str()));
        assert_eq!(r.messages_simulated, 0);
    }
    assert!(Scenario::default().validate().is_ok());
}

#[test]
fn scenarios_read_from_toml_with_paper_defaults_and_reject_typos() {
    let s: Scenario = toml::from_str("").unwrap();
    assert_eq!(s.sources.len(), 3);
    assert_eq!(s.re.queue_capacity, 500);
    assert!((s.call.holding_time_s - 30.0).abs() < 1e-12);
    assert!(toml::from_str::<Scenario>("duraton_s = 5").is_err());
    let s: Scenario = toml::from_str(
        "offered_load = 2\n[re]\nqueue_capacity = 100\n[re.control]\nalgorithm = \"rate-abs\"\n\
         [[sources]]\nname = \"A\"\nschedule = [{ at_s = 10, load = 0.5 }]\n",
    )
    .unwrap();
    assert_eq!(s.sources.len(), 1);
    assert_eq!(s.re.control.algorithm, Algorithm::RateAbs);
    assert!(
        (s.re.cost_forward_us - 2000.0).abs() < 1e-9,
        "a partial [re] keeps the paper's processor"
    );
    assert!(s.validate().is_ok());
}

#[test]
fn time_series_bins_add_up_and_schedules_start_and_stop_sources() {
    let mut s = scenario(Algorithm::RateAbs, 0.0, 40.0, 0.0);
    s.timeseries = true;
    s.sources = vec![
        SourceConfig {
            name: "early".into(),
            share: 1.0,
            schedule: vec![
                LoadStep {
                    at_s: 0.0,
                    load: 0.3,
                },
                LoadStep {
                    at_s: 20.0,
                    load: 0.0,
                },
            ],
        },
        SourceConfig {
            name: "late".into(),
            share: 1.0,
            schedule: vec![LoadStep {
                at_s: 10.0,
                load: 0.3,
            }],
        },
    ];
    let r = run(&s);
    let ts = r.timeseries.as_ref().unwrap();
    assert_eq!(ts.points.len(), 40);
    let sum = |i: usize, from: usize, to: usize, good: bool| -> f64 {
        ts.points[from..to]
            .iter()
            .map(|p| {
                if good {
                    p.goodput_cps[i]
                } else {
                    p.offered_cps[i]
                }
            })
            .sum()
    };
    assert!(
        sum(1, 0, 10, false) < 0.5,
        "late source silent before its first step"
    );
    assert!(
        sum(0, 20, 40, false) < 0.5,
        "early source gone after load 0"
    );
    let offered: f64 = (0..2).map(|i| sum(i, 0, 40, false)).sum();
    assert!((offered - r.calls_offered as f64).abs() < 0.5);
    let good: f64 = (0..2).map(|i| sum(i, 0, 40, true)).sum();
    assert!((good - r.calls_good as f64).abs() < 0.5);
    assert!(ts.points.iter().all(|p| (0.0..=1.0).contains(&p.occupancy)));
    assert!(ts.points.iter().any(|p| p.re_service_rate.is_finite()));
    assert_eq!(r.per_source[0].name, "early");
}

#[test]
fn link_delay_and_loss_are_survived_by_retransmission() {
    let mut s = scenario(Algorithm::None, 0.5, 60.0, 10.0);
    s.link.delay_ms = 20.0;
    let delayed = run(&s);
    // INVITE, 200 and ACK each cross the three hops: nine one-way delays of 20 ms.
    assert!(
        delayed.setup_delay_p50_ms > 180.0,
        "{}",
        delayed.setup_delay_p50_ms
    );
    assert!((delayed.goodput - 0.5).abs() < 0.06);
    s.link.loss = 0.02;
    let lossy = run(&s);
    assert!(lossy.messages_lost > 0);
    assert!(total_retransmissions(&lossy) > 0);
    // Losing a 180 (never retransmitted) or the callee's 100 makes a call not good, but
    // most calls still set up.
    assert!(lossy.goodput > 0.35, "{}", lossy.goodput);
}

/// The paper's steady-load comparison (Figure 21) at full length. Slow in debug builds.
#[test]
#[ignore = "paper-length runs; use --release"]
fn paper_table() {
    let algorithms = [
        Algorithm::None,
        Algorithm::Threshold,
        Algorithm::WinDisc,
        Algorithm::WinCont,
        Algorithm::WinAuto,
        Algorithm::RateAbs,
        Algorithm::RateOcc,
    ];
    println!("algorithm   load  goodput  occ   retx   p50ms");
    for a in algorithms {
        for load in [0.5, 1.0, 2.0, 4.0, 8.0] {
            let r = run(&scenario(a, load, 600.0, 100.0));
            println!(
                "{:10} {load:4.1}  {:6.3}  {:4.2}  {:5.3}  {:7.1}",
                a.name(),
                r.goodput,
                r.occupancy,
                r.retrans_ratio,
                r.setup_delay_p50_ms
            );
        }
    }
}
