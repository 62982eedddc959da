use super::*;
use crate::types::{FeedbackValue, NeighbourId};
use rand::Rng;
use ThrottleVerdict::{Forward as F, Hold as H, Reject as R};

fn spec(kind: ThrottleKind, blocking: BlockingMode) -> ThrottleSpec {
    ThrottleSpec {
        kind,
        blocking,
        hold_limit: 3,
        bucket_depth: 5,
        initial_window: None,
        probe_after: None,
        meter_interval: Duration::from_millis(100),
        meter_smoothing_weight: 0.25,
        feed_forward: false,
    }
}

fn throttle(kind: ThrottleKind, blocking: BlockingMode) -> Throttle {
    Throttle::new(&spec(kind, blocking), 1, 0, Time::ZERO).unwrap()
}

fn invite() -> MessageSummary {
    MessageSummary::new_session(Some(NeighbourId(1)))
}

fn feedback(sequence: u64, value: FeedbackValue) -> Feedback {
    Feedback { sequence, value }
}

fn drain(t: &mut Throttle) -> Vec<u64> {
    std::iter::from_fn(|| t.poll_release().map(|r| r.0)).collect()
}

/// Offers one session every millisecond over `[0, until_ms]` and counts those sent.
fn saturate(t: &mut Throttle, until_ms: u64) -> u64 {
    (0..=until_ms)
        .filter(|&ms| {
            t.admit(Time::from_millis(ms), RequestId(ms), &invite()) == ThrottleVerdict::Forward
        })
        .count() as u64
}

#[test]
fn token_bucket_admits_exactly_rate_times_t_plus_burst() {
    for (rate, until_ms, expected) in [
        (10.0, 1000, 10 + 5),
        (10.0, 2500, 25 + 5),
        (40.0, 1000, 40 + 5),
    ] {
        let mut t = throttle(ThrottleKind::TokenBucket, BlockingMode::Discard);
        t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(rate)));
        assert_eq!(
            saturate(&mut t, until_ms),
            expected,
            "rate {rate} over {until_ms} ms"
        );
    }
}

#[test]
fn call_gapping_blocks_everything_inside_the_gap() {
    let mut t = throttle(ThrottleKind::CallGapping, BlockingMode::Discard);
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(5.0)));
    let verdicts: Vec<ThrottleVerdict> = [0, 100, 199, 200, 250, 399, 400]
        .iter()
        .map(|&ms| t.admit(Time::from_millis(ms), RequestId(ms), &invite()))
        .collect();
    assert_eq!(verdicts, vec![F, R, R, F, R, R, F]);
}

#[test]
fn leaky_bucket_holds_a_burst_and_releases_it_evenly() {
    let mut t = throttle(ThrottleKind::LeakyBucket, BlockingMode::Keep);
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(10.0)));
    let verdicts: Vec<ThrottleVerdict> = (0..5)
        .map(|id| t.admit(Time::ZERO, RequestId(id), &invite()))
        .collect();
    // One goes, the bucket (hold queue of 3) takes three, the fifth overflows.
    assert_eq!(verdicts, vec![F, H, H, H, R]);
    assert_eq!(t.stats().hold_overflow, 1);
    let mut releases = Vec::new();
    while let Some(at) = t.poll_timeout() {
        t.handle_timeout(at);
        for id in drain(&mut t) {
            releases.push((at.as_millis(), id));
        }
    }
    assert_eq!(releases, vec![(100, 1), (200, 2), (300, 3)]);
    let s = t.stats();
    assert_eq!(
        (s.offered, s.forwarded, s.rejected, s.released, s.holding),
        (5, 4, 1, 3, 0)
    );
}

#[test]
fn keep_mode_is_first_in_first_out() {
    let mut t = throttle(ThrottleKind::CallGapping, BlockingMode::Keep);
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(10.0)));
    assert_eq!(
        t.admit(Time::ZERO, RequestId(0), &invite()),
        ThrottleVerdict::Forward
    );
    assert_eq!(
        t.admit(Time::from_millis(10), RequestId(1), &invite()),
        ThrottleVerdict::Hold
    );
    // At 100 ms an opportunity exists, but request 1 was first; request 2 queues behind.
    assert_eq!(
        t.admit(Time::from_millis(100), RequestId(2), &invite()),
        ThrottleVerdict::Hold
    );
    t.handle_timeout(Time::from_millis(100));
    assert_eq!(drain(&mut t), vec![1]);
}

#[test]
fn window_throttle_never_exceeds_the_advertised_window() {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut t = throttle(ThrottleKind::Window, BlockingMode::Discard);
    let mut window = None;
    let mut sent_since_feedback = 0u32;
    let mut total_sent = 0;
    for step in 0..20_000u64 {
        let now = Time::from_millis(step);
        if rng.gen_bool(0.05) {
            let w = rng.gen_range(0..6);
            t.on_feedback(now, &feedback(step + 1, FeedbackValue::Window(w)));
            window = Some(w);
            sent_since_feedback = 0;
        }
        if t.admit(now, RequestId(step), &invite()) == ThrottleVerdict::Forward {
            sent_since_feedback += 1;
            total_sent += 1;
        }
        if let Some(w) = window {
            assert!(
                sent_since_feedback <= w,
                "sent {sent_since_feedback} on window {w}"
            );
        }
    }
    // The check above only means something if windows were actually used up.
    assert!(total_sent > 1000);
}

#[test]
fn window_keep_mode_releases_when_feedback_reopens_the_window() {
    let s = ThrottleSpec {
        initial_window: Some(1),
        ..spec(ThrottleKind::Window, BlockingMode::Keep)
    };
    let mut t = Throttle::new(&s, 1, 0, Time::ZERO).unwrap();
    let verdicts: Vec<ThrottleVerdict> = (0..3)
        .map(|id| t.admit(Time::ZERO, RequestId(id), &invite()))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ThrottleVerdict::Forward,
            ThrottleVerdict::Hold,
            ThrottleVerdict::Hold
        ]
    );
    // Windows are freed only by feedback; there is no timer to wait for.
    assert_eq!(t.poll_timeout(), None);
    t.on_feedback(Time::from_millis(5), &feedback(1, FeedbackValue::Window(1)));
    assert_eq!(drain(&mut t), vec![1]);
    t.on_feedback(Time::from_millis(6), &feedback(2, FeedbackValue::Window(4)));
    assert_eq!(drain(&mut t), vec![2]);
    assert_eq!(t.window_slots(), Some(3));
}

#[test]
fn keep_bursts_holds_one_blocked_session_while_blocking_is_rare_and_discards_under_overload() {
    let s = ThrottleSpec {
        initial_window: Some(1),
        ..spec(ThrottleKind::Window, BlockingMode::KeepBursts)
    };
    let mut t = Throttle::new(&s, 1, 0, Time::ZERO).unwrap();
    let mut sequence = 0;
    let mut reopen = |t: &mut Throttle, ms: u64| {
        sequence += 1;
        t.on_feedback(
            Time::from_millis(ms),
            &feedback(sequence, FeedbackValue::Window(1)),
        );
    };
    // Below capacity: 40 sessions that each find the window open, then a burst of three.
    for id in 0..40 {
        assert_eq!(
            t.admit(Time::from_millis(id * 10), RequestId(id), &invite()),
            F
        );
        reopen(&mut t, id * 10 + 5);
    }
    assert_eq!(t.admit(Time::from_millis(400), RequestId(40), &invite()), F);
    let burst: Vec<ThrottleVerdict> = (41..43)
        .map(|id| t.admit(Time::from_millis(400), RequestId(id), &invite()))
        .collect();
    // One waits for the next slot; a second would queue behind it and is rejected.
    assert_eq!(burst, vec![H, R]);
    reopen(&mut t, 405);
    assert_eq!(drain(&mut t), vec![41]);
    // Overload: five offered for every slot. Once most are blocked nothing is held.
    let mut verdicts = Vec::new();
    for id in 100..300u64 {
        if id % 5 == 0 {
            reopen(&mut t, id * 10);
        }
        verdicts.push(t.admit(Time::from_millis(id * 10 + 1), RequestId(id), &invite()));
        drain(&mut t);
    }
    assert!(verdicts[100..].iter().all(|v| *v != H), "{verdicts:?}");
    assert!(verdicts[100..].contains(&F));
}

#[test]
fn window_probe_restarts_a_silent_exchange_only_after_the_quiet_period() {
    let s = ThrottleSpec {
        initial_window: Some(0),
        probe_after: Some(Duration::from_secs(1)),
        ..spec(ThrottleKind::Window, BlockingMode::Discard)
    };
    let mut t = Throttle::new(&s, 1, 0, Time::ZERO).unwrap();
    assert_eq!(
        t.admit(Time::from_millis(999), RequestId(0), &invite()),
        ThrottleVerdict::Reject
    );
    assert_eq!(
        t.admit(Time::from_millis(1000), RequestId(1), &invite()),
        ThrottleVerdict::Forward
    );
    assert_eq!(
        t.admit(Time::from_millis(1500), RequestId(2), &invite()),
        ThrottleVerdict::Reject
    );
    // Feedback, even a closed window, restarts the quiet period.
    t.on_feedback(
        Time::from_millis(1800),
        &feedback(1, FeedbackValue::Window(0)),
    );
    assert_eq!(
        t.admit(Time::from_millis(2500), RequestId(3), &invite()),
        ThrottleVerdict::Reject
    );
    assert_eq!(
        t.admit(Time::from_millis(2800), RequestId(4), &invite()),
        ThrottleVerdict::Forward
    );
    assert_eq!(t.stats().window_probes, 2);
}

#[test]
fn percentage_throttle_converges_to_the_target_fraction() {
    let mut fractions = Vec::new();
    for seed in 0..20 {
        let mut t = Throttle::new(
            &spec(ThrottleKind::Percentage, BlockingMode::Discard),
            seed,
            3,
            Time::ZERO,
        )
        .unwrap();
        t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::AcceptFraction(0.3)));
        let sent = saturate(&mut t, 4999);
        fractions.push(sent as f64 / 5000.0);
    }
    // Each trial within 5 standard deviations (sd ≈ 0.0065), the mean much tighter.
    for f in &fractions {
        assert!((f - 0.3).abs() < 0.033, "trial fraction {f}");
    }
    let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
    assert!((mean - 0.3).abs() < 0.005, "mean fraction {mean}");
}

#[test]
fn percentage_throttle_turns_an_absolute_rate_into_a_blocking_fraction() {
    // 1000 sessions/s offered, 250/s allowed: about a quarter pass once metered.
    let mut t = throttle(ThrottleKind::Percentage, BlockingMode::Discard);
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(250.0)));
    saturate(&mut t, 999);
    let sent = (1000..20_000u64)
        .filter(|&ms| {
            t.admit(Time::from_millis(ms), RequestId(ms), &invite()) == ThrottleVerdict::Forward
        })
        .count() as f64;
    assert!(
        (sent / 19_000.0 - 0.25).abs() < 0.02,
        "fraction {}",
        sent / 19_000.0
    );
}

#[test]
fn same_seed_same_decisions() {
    let run = |seed, stream| {
        let mut t = Throttle::new(
            &spec(ThrottleKind::Percentage, BlockingMode::Discard),
            seed,
            stream,
            Time::ZERO,
        )
        .unwrap();
        t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::AcceptFraction(0.5)));
        (0..500)
            .map(|ms| t.admit(Time::from_millis(ms), RequestId(ms), &invite()))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7, 0), run(7, 0));
    assert_ne!(run(7, 0), run(7, 1));
    assert_ne!(run(7, 0), run(8, 0));
}

#[test]
fn only_session_starts_are_regulated() {
    let mut t = throttle(ThrottleKind::TokenBucket, BlockingMode::Discard);
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Rate(0.0)));
    let src = Some(NeighbourId(1));
    for m in [
        MessageSummary::other_request(src),
        MessageSummary::response(src),
        MessageSummary::repeated_invite(src),
    ] {
        assert_eq!(
            t.admit(Time::ZERO, RequestId(0), &m),
            ThrottleVerdict::Forward
        );
    }
    assert_eq!(
        t.admit(Time::ZERO, RequestId(0), &invite()),
        ThrottleVerdict::Reject
    );
    assert_eq!(t.stats().offered, 1);
}

#[test]
fn stale_and_unusable_feedback_is_ignored_but_a_restart_is_accepted() {
    let mut t = throttle(ThrottleKind::Window, BlockingMode::Discard);
    t.on_feedback(Time::ZERO, &feedback(10, FeedbackValue::Window(3)));
    t.on_feedback(Time::ZERO, &feedback(9, FeedbackValue::Window(50)));
    t.on_feedback(Time::ZERO, &feedback(11, FeedbackValue::Rate(5.0)));
    assert_eq!(t.window_slots(), Some(3));
    let s = t.stats();
    assert_eq!(
        (s.feedback_applied, s.feedback_stale, s.feedback_ignored),
        (1, 1, 1)
    );
    // An RE that restarted numbers from 1 again.
    let mut t = throttle(ThrottleKind::Window, BlockingMode::Discard);
    t.on_feedback(Time::ZERO, &feedback(1_000_000, FeedbackValue::Window(3)));
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Window(7)));
    assert_eq!(t.window_slots(), Some(7));
}

#[test]
fn feed_forward_reports_the_offered_rate_only_when_enabled() {
    let on = ThrottleSpec {
        feed_forward: true,
        ..spec(ThrottleKind::Window, BlockingMode::Discard)
    };
    let mut t = Throttle::new(&on, 1, 0, Time::ZERO).unwrap();
    t.on_feedback(Time::ZERO, &feedback(1, FeedbackValue::Window(0)));
    // 100/s offered, all of it blocked: feed-forward reports what was offered, not sent.
    for ms in (0..1000).step_by(10) {
        t.admit(Time::from_millis(ms), RequestId(ms), &invite());
    }
    let ff = t.feed_forward(Time::from_millis(1000)).unwrap();
    assert!((ff.offered_rate - 100.0).abs() < 1e-6);
    let mut off = throttle(ThrottleKind::Window, BlockingMode::Discard);
    off.admit(Time::ZERO, RequestId(0), &invite());
    assert_eq!(off.feed_forward(Time::from_secs(1)), None);
}

#[test]
fn impossible_combinations_are_config_errors() {
    assert_eq!(
        Throttle::new(
            &spec(ThrottleKind::Percentage, BlockingMode::Keep),
            0,
            0,
            Time::ZERO
        )
        .err(),
        Some(ConfigError::KeepNotSupported(ThrottleKind::Percentage))
    );
    assert_eq!(
        Throttle::new(
            &spec(ThrottleKind::LeakyBucket, BlockingMode::Discard),
            0,
            0,
            Time::ZERO
        )
        .err(),
        Some(ConfigError::LeakyBucketNeedsKeep)
    );
}
