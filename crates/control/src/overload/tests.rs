use super::*;
use crate::enforcer::{BlockingMode, ThrottleKind};
use crate::types::{Feedback, FeedbackValue, NeighbourId};
use sluice_time::Time;
use std::time::Duration;

fn seq(text: &str) -> OcSequence {
    OcSequence::parse(text).unwrap()
}

fn client(algorithms: &[OcAlgorithm]) -> OcClient {
    OcClient::new(
        OcClientConfig {
            algorithms: algorithms.to_vec(),
            ..OcClientConfig::default()
        },
        7,
        1,
        Time::ZERO,
    )
}

fn response<'a>(oc: u64, algorithm: &'a str, validity_ms: u64, s: &str) -> OcResponse<'a> {
    OcResponse {
        oc: Some(oc),
        algorithm: Some(algorithm),
        validity_ms: Some(validity_ms),
        seq: Some(seq(s)),
        window_ack: None,
        memory: None,
    }
}

const INVITE: RequestTraits = RequestTraits {
    method: RequestMethod::Invite,
    in_dialog: false,
    priority: false,
};
const PRIORITY_INVITE: RequestTraits = RequestTraits {
    method: RequestMethod::Invite,
    in_dialog: false,
    priority: true,
};

fn exempt_requests() -> [RequestTraits; 4] {
    let r = |method, in_dialog| RequestTraits {
        method,
        in_dialog,
        priority: false,
    };
    [
        r(RequestMethod::Ack, true),
        r(RequestMethod::Bye, true),
        r(RequestMethod::Cancel, false),
        // A re-INVITE: To carries a tag.
        r(RequestMethod::Invite, true),
    ]
}

#[test]
fn classification_exempts_dialog_requests_and_cancel_and_ranks_priority() {
    for r in exempt_requests() {
        assert_eq!(r.reduction(), Reduction::Exempt, "{r:?}");
    }
    assert_eq!(INVITE.reduction(), Reduction::Normal);
    assert_eq!(PRIORITY_INVITE.reduction(), Reduction::Priority);
    let options = RequestTraits {
        method: RequestMethod::Other,
        in_dialog: false,
        priority: false,
    };
    assert_eq!(options.reduction(), Reduction::Normal);
    assert!(!options.starts_session());
    assert!(is_sos_urn(b"urn:service:sos"));
    assert!(is_sos_urn(b"URN:Service:SOS.police"));
    assert!(!is_sos_urn(b"urn:service:sossy"));
    assert!(!is_sos_urn(b"sip:sos@example.com"));
}

#[test]
fn oc_seq_compares_as_a_decimal_number_and_renders_five_digits() {
    assert!(seq("1.10") < seq("1.9"));
    assert_eq!(seq("1.5"), seq("1.50000"));
    assert!(seq("2.0") > seq("1.99999"));
    assert!(OcSequence::parse("12").is_none());
    assert!(OcSequence::parse("1.").is_none());
    assert!(OcSequence::parse("1234567890123.1").is_none());
    assert!(OcSequence::parse("1.-2").is_none());
    assert_eq!(seq("1282321615.782").to_string(), "1282321615.78200");
    assert_eq!(seq("7.00009").successor().to_string(), "7.00010");
    assert_eq!(seq("7.99999").successor().to_string(), "8.00000");
}

#[test]
fn client_ignores_equal_and_older_oc_seq() {
    let mut c = client(&[OcAlgorithm::Loss]);
    let t = Time::from_millis(1);
    assert_eq!(
        c.on_response(t, &response(10, "loss", 500, "1.9")),
        OcUpdate::Applied
    );
    // 1.10 is 1.1 as a number: older than 1.9.
    assert_eq!(
        c.on_response(t, &response(90, "loss", 500, "1.10")),
        OcUpdate::Stale
    );
    assert_eq!(
        c.on_response(t, &response(90, "loss", 500, "1.9")),
        OcUpdate::Stale
    );
    assert_eq!(c.value(), Some(10));
    assert_eq!(
        c.on_response(t, &response(30, "loss", 500, "1.90001")),
        OcUpdate::Applied
    );
    assert_eq!(c.value(), Some(30));
    assert_eq!(c.stats().stale, 2);
    assert_eq!(c.stats().applied, 2);
}

#[test]
fn an_oc_seq_far_ahead_of_time_is_ignored_and_genuine_ones_still_count() {
    let mut c = client(&[OcAlgorithm::Loss]);
    let t = Time::from_secs(1);
    assert_eq!(
        c.on_response(t, &response(10, "loss", 30_000, "1000.5")),
        OcUpdate::Applied
    );
    // A forged value at the grammar's largest would make every later genuine one stale.
    assert_eq!(
        c.on_response(t, &response(100, "loss", 30_000, "999999999999.99999")),
        OcUpdate::SeqJump
    );
    // Ten seconds of lead are allowed at once; more only as time passes.
    assert_eq!(
        c.on_response(t, &response(20, "loss", 30_000, "1011.0")),
        OcUpdate::SeqJump
    );
    assert_eq!(
        c.on_response(t, &response(20, "loss", 30_000, "1010.0")),
        OcUpdate::Applied
    );
    assert_eq!(
        c.on_response(Time::from_secs(21), &response(40, "loss", 30_000, "1035.0")),
        OcUpdate::Applied
    );
    assert_eq!(c.value(), Some(40));
    assert_eq!(c.stats().seq_jump, 2);
}

#[test]
fn validity_expiry_ends_control_at_that_instant() {
    let mut c = client(&[OcAlgorithm::Loss]);
    let start = Time::from_secs(3);
    c.on_response(start, &response(100, "loss", 500, "5.0"));
    assert_eq!(c.poll_timeout(), Some(start + Duration::from_millis(500)));
    let just_before = start + Duration::from_millis(500) - Duration::from_nanos(1);
    assert_eq!(c.admit(just_before, &INVITE), OcVerdict::Reject);
    c.handle_timeout(just_before);
    assert_eq!(c.active(), Some(OcAlgorithm::Loss));
    c.handle_timeout(start + Duration::from_millis(500));
    assert_eq!(c.active(), None);
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(
        c.admit(start + Duration::from_millis(500), &INVITE),
        OcVerdict::Forward
    );
    assert_eq!(c.stats().expired, 1);
}

#[test]
fn absent_validity_uses_the_configured_default() {
    let mut c = client(&[OcAlgorithm::Loss]);
    let r = OcResponse {
        validity_ms: None,
        ..response(40, "loss", 0, "1.0")
    };
    assert_eq!(c.on_response(Time::ZERO, &r), OcUpdate::Applied);
    assert_eq!(c.poll_timeout(), Some(Time::from_millis(500)));
}

#[test]
fn zero_validity_stops_control_at_once() {
    let mut c = client(&[OcAlgorithm::Loss]);
    c.on_response(Time::ZERO, &response(100, "loss", 10_000, "1.0"));
    assert_eq!(c.admit(Time::from_millis(1), &INVITE), OcVerdict::Reject);
    assert_eq!(
        c.on_response(Time::from_millis(2), &response(100, "loss", 0, "1.1")),
        OcUpdate::Stopped
    );
    assert_eq!(c.active(), None);
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.admit(Time::from_millis(2), &INVITE), OcVerdict::Forward);
}

#[test]
fn zero_validity_stops_control_whatever_the_value() {
    // RFC 7339 §5.7: the client SHOULD ignore `oc` when `oc-validity=0`; an out-of-range
    // value must not keep control running.
    let mut c = client(&[OcAlgorithm::Loss]);
    c.on_response(Time::ZERO, &response(100, "loss", 10_000, "1.0"));
    assert_eq!(
        c.on_response(Time::from_millis(1), &response(150, "loss", 0, "1.1")),
        OcUpdate::Stopped
    );
    assert_eq!(c.active(), None);
}

#[test]
fn a_longer_validity_than_kept_is_shortened_not_ignored() {
    let mut c = client(&[OcAlgorithm::Loss]);
    assert_eq!(
        c.on_response(Time::ZERO, &response(10, "loss", 3_600_001, "1.0")),
        OcUpdate::Applied
    );
    // The default cap: 30 s, whatever the server (or a forger) asked for.
    assert_eq!(c.poll_timeout(), Some(Time::from_secs(30)));
    c.handle_timeout(Time::from_secs(30));
    assert_eq!(c.value(), None);
}

#[test]
fn a_restarted_server_is_heard_again_once_its_old_value_expires() {
    let mut c = client(&[OcAlgorithm::Loss]);
    c.on_response(Time::ZERO, &response(50, "loss", 500, "1700000000.00007"));
    // The server restarts with a counter from 1: stale while the old value holds.
    assert_eq!(
        c.on_response(Time::from_millis(100), &response(20, "loss", 500, "1.0")),
        OcUpdate::Stale
    );
    // At expiry the stored oc-seq goes back to its default (RFC 7339 §5.4).
    assert_eq!(
        c.on_response(Time::from_millis(600), &response(20, "loss", 500, "2.0")),
        OcUpdate::Applied
    );
    assert_eq!(c.value(), Some(20));
}

#[test]
fn out_of_range_unknown_and_unnumbered_values_are_ignored_and_counted() {
    let mut c = client(&[OcAlgorithm::Loss]);
    let t = Time::ZERO;
    assert_eq!(
        c.on_response(t, &response(101, "loss", 500, "1.0")),
        OcUpdate::OutOfRange
    );
    // Not offered by this client, though known.
    assert_eq!(
        c.on_response(t, &response(10, "rate", 500, "1.2")),
        OcUpdate::UnknownAlgorithm
    );
    assert_eq!(
        c.on_response(t, &response(10, "fancy", 500, "1.3")),
        OcUpdate::UnknownAlgorithm
    );
    let unnumbered = OcResponse {
        seq: None,
        ..response(10, "loss", 500, "1.4")
    };
    assert_eq!(c.on_response(t, &unnumbered), OcUpdate::MissingSeq);
    c.on_malformed();
    assert_eq!(c.active(), None);
    let s = c.stats();
    assert_eq!(
        (
            s.out_of_range,
            s.unknown_algorithm,
            s.missing_seq,
            s.malformed
        ),
        (1, 2, 1, 1)
    );
    // A rejected value does not advance the sequence: 1.0 is still acceptable.
    assert_eq!(
        c.on_response(t, &response(10, "loss", 500, "1.0")),
        OcUpdate::Applied
    );
}

#[test]
fn loss_at_50_reduces_half_of_category_1_and_no_exempt_request() {
    let mut c = client(&[OcAlgorithm::Loss]);
    c.on_response(Time::ZERO, &response(50, "loss", 60_000, "1.0"));
    let n = 20_000;
    let mut rejected = 0u32;
    for k in 0..n {
        let now = Time::from_micros(k);
        if c.admit(now, &INVITE) == OcVerdict::Reject {
            rejected += 1;
        }
        for r in exempt_requests() {
            assert_eq!(c.admit(now, &r), OcVerdict::Forward);
        }
    }
    let share = f64::from(rejected) / f64::from(u32::try_from(n).unwrap());
    assert!((share - 0.5).abs() < 0.02, "dropped {share}");
    assert_eq!(c.stats().exempt, 4 * n);
    assert_eq!(c.stats().rejected_normal, u64::from(rejected));
}

/// Offers `n` reducible requests, every fifth a priority one (category 1 share 0.8),
/// and returns the drop shares (category 1, category 2) after a warm-up.
fn loss_by_category(percent: u64) -> (f64, f64) {
    let mut c = client(&[OcAlgorithm::Loss]);
    c.on_response(Time::ZERO, &response(percent, "loss", 60_000, "1.0"));
    let (mut offered, mut dropped) = ([0u32; 2], [0u32; 2]);
    for k in 0..50_000u32 {
        let priority = k % 5 == 4;
        let r = if priority { PRIORITY_INVITE } else { INVITE };
        let verdict = c.admit(Time::from_micros(u64::from(k)), &r);
        if k >= 5_000 {
            let i = usize::from(priority);
            offered[i] += 1;
            dropped[i] += u32::from(verdict == OcVerdict::Reject);
        }
    }
    let share = |i: usize| f64::from(dropped[i]) / f64::from(offered[i]);
    (share(0), share(1))
}

#[test]
fn category_2_is_reduced_only_once_category_1_is_exhausted() {
    // 50% of all with 80% category 1: category 1 loses 0.5 / 0.8, category 2 nothing.
    let (normal, priority) = loss_by_category(50);
    assert!((normal - 0.625).abs() < 0.03, "category 1 {normal}");
    assert!(priority.abs() < f64::EPSILON, "category 2 {priority}");
    // 90%: category 1 is all dropped, category 2 loses (0.9 - 0.8) / 0.2.
    let (normal, priority) = loss_by_category(90);
    assert!(normal > 0.97, "category 1 {normal}");
    assert!((priority - 0.5).abs() < 0.06, "category 2 {priority}");
}

#[test]
fn rate_bucket_admits_the_target_rate_with_bounded_bursts() {
    let mut c = client(&[OcAlgorithm::Rate]);
    c.on_response(Time::ZERO, &response(100, "rate", 60_000, "1.0"));
    // A burst of 50 at one instant: at most tau / T + 1 = 20 ms / 10 ms + 1 = 3 pass.
    let burst = (0..50)
        .filter(|_| c.admit(Time::ZERO, &INVITE) == OcVerdict::Forward)
        .count();
    assert!((1..=3).contains(&burst), "burst {burst}");
    // 1000 per second offered for 10 s: 100 per second pass, within the burst bound.
    let mut passed = 0u64;
    for k in 1..=10_000u64 {
        if c.admit(Time::from_millis(k), &INVITE) == OcVerdict::Forward {
            passed += 1;
        }
    }
    assert!((997..=1003).contains(&passed), "passed {passed}");
    // Under that overload, priority requests still find room: their tolerance is larger.
    let mut c = client(&[OcAlgorithm::Rate]);
    c.on_response(Time::ZERO, &response(100, "rate", 60_000, "1.0"));
    let (mut normal, mut priority) = (0, 0);
    for k in 1..=10_000u64 {
        let now = Time::from_millis(k);
        if k % 50 == 0 {
            priority += u32::from(c.admit(now, &PRIORITY_INVITE) == OcVerdict::Forward);
        } else {
            normal += u32::from(c.admit(now, &INVITE) == OcVerdict::Forward);
        }
    }
    assert_eq!(priority, 200, "every priority request passes");
    assert!((795..=805).contains(&normal), "normal {normal}");
    for r in exempt_requests() {
        assert_eq!(c.admit(Time::from_secs(11), &r), OcVerdict::Forward);
    }
}

#[test]
fn rate_zero_refuses_every_reducible_request() {
    let mut c = client(&[OcAlgorithm::Rate]);
    c.on_response(Time::ZERO, &response(0, "rate", 60_000, "1.0"));
    assert_eq!(c.admit(Time::from_secs(1), &INVITE), OcVerdict::Reject);
    assert_eq!(
        c.admit(Time::from_secs(1), &PRIORITY_INVITE),
        OcVerdict::Reject
    );
    assert_eq!(
        c.admit(Time::from_secs(1), &exempt_requests()[0]),
        OcVerdict::Forward
    );
}

#[test]
fn window_extension_counts_session_starts_only() {
    let mut c = client(&[OcAlgorithm::SluiceWindow]);
    c.on_response(Time::ZERO, &response(2, "sluicewin", 5_000, "1.0"));
    let t = Time::from_millis(1);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
    // By default a window holds one blocked session of a burst and rejects the next.
    let OcVerdict::Hold(held) = c.admit(t, &INVITE) else {
        panic!("held")
    };
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Reject);
    let options = RequestTraits {
        method: RequestMethod::Other,
        ..INVITE
    };
    assert_eq!(c.admit(t, &options), OcVerdict::Forward);
    assert_eq!(c.admit(t, &PRIORITY_INVITE), OcVerdict::Forward);
    assert_eq!(c.value(), Some(0));
    // The next slot goes to the held session.
    c.on_response(t, &response(1, "sluicewin", 5_000, "1.1"));
    assert_eq!(c.poll_release(), Some(held));
    assert!(matches!(c.admit(t, &INVITE), OcVerdict::Hold(_)));
}

#[test]
fn a_window_echo_takes_the_sessions_in_flight_off_the_window() {
    // Rejecting, so that a blocked session takes no slot later.
    let mut c = OcClient::new(
        OcClientConfig {
            algorithms: vec![OcAlgorithm::SluiceWindow],
            blocking: Some(BlockingMode::Discard),
            ..OcClientConfig::default()
        },
        7,
        1,
        Time::ZERO,
    )
    .with_session_count_base(1_000);
    for _ in 0..5 {
        assert_eq!(c.admit(Time::ZERO, &INVITE), OcVerdict::Forward);
    }
    assert_eq!(c.sessions_sent(), 1_005);
    let mut via = String::new();
    c.append_request_params(Time::ZERO, &mut via);
    assert!(via.contains(";sluice-wsent=1005"), "{via}");
    let forwarded = |c: &mut OcClient, t| {
        (0..10)
            .take_while(|_| c.admit(t, &INVITE) == OcVerdict::Forward)
            .count()
    };
    // The server had received three of the five when it granted 4: the other two are on
    // the link and take two of the slots.
    let t = Time::from_millis(1);
    let acked = OcResponse {
        window_ack: Some(1_003),
        ..response(4, "sluicewin", 5_000, "1.0")
    };
    assert_eq!(c.on_response(t, &acked), OcUpdate::Applied);
    assert_eq!(forwarded(&mut c, t), 2);
    // From now on its requests also say how many are in flight.
    let mut via = String::new();
    c.append_request_params(t, &mut via);
    assert!(via.contains(";sluice-wsent=1007;sluice-wflight=4"), "{via}");
    // An echo of more than this client sent (forged, or counted in a run before a
    // restart) says nothing about the link: the window stands as granted.
    let beyond = OcResponse {
        window_ack: Some(5_000),
        ..response(3, "sluicewin", 5_000, "1.1")
    };
    assert_eq!(c.on_response(t, &beyond), OcUpdate::Applied);
    assert_eq!(forwarded(&mut c, t), 3);
    // More in flight than granted: nothing passes.
    let covered = OcResponse {
        window_ack: Some(1_000),
        ..response(4, "sluicewin", 5_000, "1.2")
    };
    c.on_response(t, &covered);
    assert_eq!(forwarded(&mut c, t), 0);
    // No echo (a server without the extension): the paper's window.
    c.on_response(t, &response(2, "sluicewin", 5_000, "1.3"));
    assert_eq!(forwarded(&mut c, t), 2);
}

#[test]
fn sluicerate_is_enforced_as_the_papers_percentage_of_the_offered_rate() {
    // The client offers 100 sessions/s (one every 10 ms); the server allows 25.5 a
    // second, `oc` in thousandths: a quarter of the sessions should pass (§2.4.2).
    let mut c = client(&[OcAlgorithm::SluiceRate]);
    for k in 0..50 {
        assert_eq!(
            c.admit(Time::from_millis(k * 10), &INVITE),
            OcVerdict::Forward
        );
    }
    let t = Time::from_millis(500);
    assert_eq!(
        c.on_response(t, &response(25_500, "sluicerate", 500, "1.0")),
        OcUpdate::Applied
    );
    assert_eq!(
        (c.active(), c.value()),
        (Some(OcAlgorithm::SluiceRate), Some(25_500))
    );
    let (mut passed, mut held) = (0, 0);
    for k in 0..400u64 {
        let now = t + std::time::Duration::from_millis(k);
        if k % 100 == 0 {
            // Fresh values before the old one expires.
            let seq = format!("{}.0", 2 + k);
            c.on_response(now, &response(25_500, "sluicerate", 500, &seq));
        }
        match c.admit(now, &INVITE) {
            OcVerdict::Forward => passed += 1,
            OcVerdict::Hold(_) => held += 1,
            OcVerdict::Reject => {}
        }
    }
    // 400 sessions in 400 ms is 1,000/s offered once the meter catches up: about 2.5 %
    // pass then, more before it has (the meter smooths over 100 ms intervals).
    assert_eq!(held, 0, "discard mode never holds");
    assert!((10..=120).contains(&passed), "{passed}");
    // A priority INVITE always goes; in-dialog requests are exempt.
    assert_eq!(c.admit(t, &PRIORITY_INVITE), OcVerdict::Forward);
    assert_eq!(c.admit(t, &exempt_requests()[1]), OcVerdict::Forward);
}

#[test]
fn keep_mode_holds_sessions_and_releases_them_in_order_or_when_control_ends() {
    // Call gapping in keep mode: one session per 1/rate, the others wait.
    let mut c = OcClient::new(
        OcClientConfig {
            algorithms: vec![OcAlgorithm::SluiceRate],
            rate_throttle: ThrottleKind::CallGapping,
            blocking: Some(BlockingMode::Keep),
            hold_limit: 2,
            ..OcClientConfig::default()
        },
        3,
        1,
        Time::ZERO,
    );
    // 10 sessions/s: one every 100 ms.
    c.on_response(Time::ZERO, &response(10_000, "sluicerate", 5_000, "1.0"));
    let t = Time::from_millis(1);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
    let OcVerdict::Hold(first) = c.admit(t, &INVITE) else {
        panic!("held")
    };
    let OcVerdict::Hold(second) = c.admit(t, &INVITE) else {
        panic!("held")
    };
    assert_ne!(first, second);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Reject, "hold queue full");
    assert_eq!(c.poll_release(), None);
    let due = c.poll_timeout().unwrap();
    assert!(due > t && due <= Time::from_millis(101), "{due:?}");
    c.handle_timeout(due);
    assert_eq!(c.poll_release(), Some(first));
    assert_eq!(c.poll_release(), None);
    // oc-validity=0 ends control: what is still held goes at once.
    c.on_response(due, &response(0, "sluicerate", 0, "2.0"));
    assert_eq!(c.poll_release(), Some(second));
    assert_eq!(c.admit(due, &INVITE), OcVerdict::Forward);
    let s = c.stats();
    assert_eq!((s.held, s.released, s.rejected_normal), (2, 2, 1));
}

#[test]
fn a_leaky_bucket_is_keep_mode_and_a_window_cannot_enforce_a_rate() {
    let config = OcClientConfig {
        rate_throttle: ThrottleKind::LeakyBucket,
        ..OcClientConfig::default()
    };
    assert!(config.validate().is_ok());
    let config = OcClientConfig {
        rate_throttle: ThrottleKind::Window,
        ..OcClientConfig::default()
    };
    assert!(config.validate().is_err());
    let config = OcClientConfig {
        rate_throttle: ThrottleKind::Percentage,
        blocking: Some(BlockingMode::Keep),
        ..OcClientConfig::default()
    };
    assert!(
        config.validate().is_err(),
        "a coin toss has no release time"
    );
}

#[test]
fn client_request_params_render_exactly() {
    let mut c = client(&[OcAlgorithm::Loss, OcAlgorithm::Rate]);
    let mut via = String::from("SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx");
    c.append_request_params(Time::ZERO, &mut via);
    assert_eq!(
        via,
        "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx;oc;oc-algo=\"loss,rate\""
    );
    // Double feed: the offered session rate once the meter has an interval.
    let mut c = OcClient::new(
        OcClientConfig {
            algorithms: vec![OcAlgorithm::SluiceWindow],
            feed_forward: true,
            meter_smoothing_weight: 1.0,
            ..OcClientConfig::default()
        },
        1,
        1,
        Time::ZERO,
    );
    for k in 0..25 {
        c.admit(Time::from_millis(k * 4), &INVITE);
    }
    let mut via = String::new();
    c.append_request_params(Time::from_millis(100), &mut via);
    assert_eq!(
        via,
        ";oc;oc-algo=\"sluicewin,loss\";sluice-wsent=25;sluice-ff=250.000"
    );
    // `loss` MUST be offered (RFC 7339 §4.2): added last when missing. An empty list would
    // break the grammar; a repeated token says nothing new.
    let mut via = String::new();
    client(&[OcAlgorithm::Rate]).append_request_params(Time::ZERO, &mut via);
    assert_eq!(via, ";oc;oc-algo=\"rate,loss\"");
    let mut via = String::new();
    client(&[]).append_request_params(Time::ZERO, &mut via);
    assert_eq!(via, ";oc;oc-algo=\"loss\"");
    let mut via = String::new();
    client(&[OcAlgorithm::Rate, OcAlgorithm::Rate, OcAlgorithm::Loss])
        .append_request_params(Time::ZERO, &mut via);
    assert_eq!(via, ";oc;oc-algo=\"rate,loss\"");
}

fn server(supported: &[OcAlgorithm]) -> OcServer {
    OcServer::new(OcServerConfig {
        supported: supported.to_vec(),
        epoch_secs: 1_700_000_000,
        ..OcServerConfig::default()
    })
}

#[allow(clippy::unnecessary_wraps)] // Reads as the generator's return value.
fn fb(sequence: u64, value: FeedbackValue) -> Option<Feedback> {
    Some(Feedback { sequence, value })
}

const SE: NeighbourId = NeighbourId(3);

#[test]
fn negotiation_picks_the_first_offered_algorithm_the_server_supports() {
    let s = server(&[OcAlgorithm::Rate, OcAlgorithm::Loss]);
    assert_eq!(
        s.negotiate(&["fancy", "LOSS", "rate"]),
        Some(OcAlgorithm::Loss)
    );
    assert_eq!(s.negotiate(&["rate", "loss"]), Some(OcAlgorithm::Rate));
    assert_eq!(s.negotiate(&["sluicewin"]), None);
    let mut s = server(&[OcAlgorithm::Rate]);
    let params = s.response_params(
        Time::ZERO,
        SE,
        &["loss"],
        fb(1, FeedbackValue::AcceptFraction(0.5)),
    );
    assert_eq!(params, None);
    assert_eq!(s.stats().no_common_algorithm, 1);
}

#[test]
#[allow(clippy::many_single_char_names)]
fn server_translates_feedback_and_renders_exact_parameters() {
    let mut s = server(&OcAlgorithm::ALL);
    let t = Time::from_millis(2_500);
    let p = s
        .response_params(t, SE, &["loss"], fb(1, FeedbackValue::AcceptFraction(0.7)))
        .unwrap();
    let mut via = String::from("SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKa");
    p.append_to(&mut via);
    assert_eq!(
        via,
        "SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKa;oc=30;oc-algo=\"loss\";\
oc-validity=500;oc-seq=1700000002.00000"
    );
    // Within the same second the fraction steps; the text orders as the number does.
    let q = s
        .response_params(t, SE, &["rate"], fb(2, FeedbackValue::Rate(123.4)))
        .unwrap();
    assert_eq!((q.oc, q.algorithm), (123, OcAlgorithm::Rate));
    assert_eq!(q.seq.to_string(), "1700000002.00001");
    assert!(q.seq > p.seq);
    let r = s
        .response_params(t, SE, &["sluicerate"], fb(3, FeedbackValue::Rate(23.4567)))
        .unwrap();
    assert_eq!((r.oc, r.algorithm), (23_457, OcAlgorithm::SluiceRate));
    assert_eq!(r.seq.to_string(), "1700000002.00002");
    let w = s
        .response_params(t, SE, &["sluicewin"], fb(3, FeedbackValue::Window(17)))
        .unwrap();
    assert_eq!((w.oc, w.validity_ms), (17, 5_000));
    assert_eq!(
        w.pairs().map(|(_, v)| v),
        [
            "17".to_string(),
            "\"sluicewin\"".to_string(),
            "5000".to_string(),
            "1700000002.00003".to_string()
        ]
    );
    // A later second starts from the clock again.
    let later = s
        .response_params(
            Time::from_secs(9),
            SE,
            &["rate"],
            fb(4, FeedbackValue::Rate(5.0)),
        )
        .unwrap();
    assert_eq!(later.seq.to_string(), "1700000009.00000");
}

#[test]
fn server_repeats_rate_values_with_fresh_seq_but_never_windows() {
    let mut s = server(&OcAlgorithm::ALL);
    let t = Time::from_secs(1);
    // Before any feedback: "taking part, asking nothing" (RFC 7339 §6), never silence.
    let idle = s.response_params::<&str>(t, SE, &["loss"], None).unwrap();
    assert_eq!((idle.oc, idle.validity_ms), (0, 0));
    let first = s
        .response_params(t, SE, &["loss"], fb(1, FeedbackValue::AcceptFraction(0.25)))
        .unwrap();
    let again = s.response_params::<&str>(t, SE, &["loss"], None).unwrap();
    assert_eq!(again.oc, 75);
    assert!(again.seq > first.seq);
    s.response_params(t, SE, &["sluicewin"], fb(2, FeedbackValue::Window(4)))
        .unwrap();
    // The repeated value is the last loss/rate one, not the window.
    let repeated = s.response_params::<&str>(t, SE, &["sluicewin"], None);
    assert_eq!(repeated, None);
    assert_eq!(s.stats().unconvertible, 1);
    // A window client: asked for nothing until its first window, then the window it was
    // given stands (silence), never an `oc=0` that would end its control.
    let mut s = server(&OcAlgorithm::ALL);
    let idle = s
        .response_params::<&str>(t, SE, &["sluicewin"], None)
        .unwrap();
    assert_eq!((idle.oc, idle.validity_ms), (0, 0));
    s.response_params(t, SE, &["sluicewin"], fb(1, FeedbackValue::Window(4)))
        .unwrap();
    assert_eq!(s.response_params::<&str>(t, SE, &["sluicewin"], None), None);
}

#[test]
fn server_expresses_a_target_rate_as_loss_against_the_offered_rate() {
    let mut s = server(&OcAlgorithm::ALL);
    let t = Time::from_millis(10);
    // Fed forward: 200 offered, 50 wanted: drop 75%.
    let ff = s.on_request(t, SE, &INVITE, Some(b"200.0"));
    assert_eq!(ff.map(|f| f.offered_rate), Some(200.0));
    let p = s
        .response_params(t, SE, &["loss"], fb(1, FeedbackValue::Rate(50.0)))
        .unwrap();
    assert_eq!(p.oc, 75);
    // Without feed-forward: measured arrivals, scaled back by the loss asked for.
    let other = NeighbourId(4);
    let p = s.response_params(t, other, &["loss"], fb(2, FeedbackValue::Rate(50.0)));
    assert_eq!(p, None, "no offered-rate estimate yet");
    for k in 10..110 {
        s.on_request(Time::from_millis(k), other, &INVITE, None);
    }
    // 100 in the first 100 ms: 1000 per second, so 50 wanted is a 95% loss.
    let p = s
        .response_params(
            Time::from_millis(110),
            other,
            &["loss"],
            fb(3, FeedbackValue::Rate(50.0)),
        )
        .unwrap();
    assert_eq!(p.oc, 95);
    assert_eq!(s.on_request(t, SE, &INVITE, Some(b"-3")), None);
    assert_eq!(s.on_request(t, SE, &INVITE, Some(b"NaN")), None);
    assert_eq!(s.stats().feed_forward_malformed, 2);
}

#[test]
fn server_state_is_bounded_and_counts_turned_away_neighbours() {
    let mut s = OcServer::new(OcServerConfig {
        max_neighbours: 2,
        ..OcServerConfig::default()
    });
    for n in 0..3 {
        let p = s.response_params(
            Time::ZERO,
            NeighbourId(n),
            &["loss"],
            fb(1, FeedbackValue::AcceptFraction(0.5)),
        );
        assert_eq!(p.is_some(), n < 2);
    }
    assert_eq!(s.stats().neighbours_turned_away, 1);
}

#[test]
fn server_parameters_drive_the_client_end_to_end() {
    let mut s = server(&OcAlgorithm::ALL);
    let mut c = client(&[OcAlgorithm::Rate, OcAlgorithm::Loss]);
    let t = Time::from_millis(5);
    let offered = ["rate", "loss"];
    let p = s
        .response_params(t, SE, &offered, fb(1, FeedbackValue::Rate(40.0)))
        .unwrap();
    let text = p.seq.to_string();
    let wire = OcResponse {
        oc: Some(p.oc),
        algorithm: Some(p.algorithm.token()),
        validity_ms: Some(p.validity_ms),
        seq: OcSequence::parse(&text),
        window_ack: None,
        memory: None,
    };
    assert_eq!(c.on_response(t, &wire), OcUpdate::Applied);
    assert_eq!(c.active(), Some(OcAlgorithm::Rate));
    assert_eq!(c.value(), Some(40));
    assert_eq!(c.poll_timeout(), Some(t + Duration::from_millis(500)));
    // The same response seen twice (a retransmission) is stale the second time.
    assert_eq!(c.on_response(t, &wire), OcUpdate::Stale);
}

#[test]
fn loss_draws_repeat_exactly_for_the_same_seed() {
    let run = || {
        let mut c = client(&[OcAlgorithm::Loss]);
        c.on_response(Time::ZERO, &response(30, "loss", 60_000, "1.0"));
        (0..200)
            .map(|k| c.admit(Time::from_micros(k), &INVITE) == OcVerdict::Forward)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn loss_from_measured_arrivals_holds_steady_once_the_client_reduces() {
    let mut s = server(&OcAlgorithm::ALL);
    // 1000 per second offered, 50 wanted: 95% asked.
    for k in 0..100 {
        s.on_request(Time::from_millis(k), SE, &INVITE, None);
    }
    let first = s
        .response_params(
            Time::from_millis(100),
            SE,
            &["loss"],
            fb(1, FeedbackValue::Rate(50.0)),
        )
        .unwrap();
    assert_eq!(first.oc, 95);
    // The client complies: 50 per second arrive for four seconds. Scaled back by the
    // loss asked for, the offered rate is still 1000 once the meter's average has
    // settled, so the loss does not swing back.
    for k in 0..200 {
        s.on_request(Time::from_millis(100 + k * 20), SE, &INVITE, None);
    }
    let later = s
        .response_params(
            Time::from_millis(4_100),
            SE,
            &["loss"],
            fb(2, FeedbackValue::Rate(50.0)),
        )
        .unwrap();
    assert_eq!(later.oc, 95);
}

#[test]
#[allow(clippy::many_single_char_names)]
fn release_parameters_stop_the_client_at_once() {
    let mut s = server(&OcAlgorithm::ALL);
    let mut c = client(&[OcAlgorithm::Loss]);
    let t = Time::from_millis(3);
    let wire = |p: OcParams| OcResponse {
        oc: Some(p.oc),
        algorithm: Some(p.algorithm.token()),
        validity_ms: Some(p.validity_ms),
        seq: Some(p.seq),
        window_ack: None,
        memory: None,
    };
    let p = s
        .response_params(t, SE, &["loss"], fb(1, FeedbackValue::AcceptFraction(0.0)))
        .unwrap();
    assert_eq!(c.on_response(t, &wire(p)), OcUpdate::Applied);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Reject);
    let r = s.release_params(t, SE, &["loss"]).unwrap();
    assert_eq!((r.oc, r.validity_ms), (0, 0));
    assert_eq!(c.on_response(t, &wire(r)), OcUpdate::Stopped);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
    // Nothing is repeated after a release: later responses ask for nothing.
    let after = s.response_params::<&str>(t, SE, &["loss"], None).unwrap();
    assert_eq!((after.oc, after.validity_ms), (0, 0));
    assert!(after.seq > r.seq);
}

#[test]
fn configs_read_from_toml_with_millisecond_durations() {
    let client: OcClientConfig = toml::from_str(
        "algorithms = [\"rate\", \"sluicewin\"]\nrate_tau_ms = 5\nwindow_probe_after_ms = 250\nfeed_forward = true",
    )
    .unwrap();
    assert_eq!(
        client.algorithms,
        vec![OcAlgorithm::Rate, OcAlgorithm::SluiceWindow]
    );
    assert_eq!(client.rate_tau, Duration::from_millis(5));
    assert_eq!(client.window_probe_after, Some(Duration::from_millis(250)));
    assert!(client.feed_forward);
    assert_eq!(client.default_validity, Duration::from_millis(500));
    let server: OcServerConfig =
        toml::from_str("supported = [\"loss\"]\nvalidity_ms = 200").unwrap();
    assert_eq!(server.supported, vec![OcAlgorithm::Loss]);
    assert_eq!(server.validity, Duration::from_millis(200));
    assert!(toml::from_str::<OcServerConfig>("validty_ms = 1").is_err());
    assert!(toml::from_str::<OcClientConfig>("algorithms = [\"fancy\"]").is_err());
}

#[test]
fn rate_control_starts_from_a_random_bucket_content_per_client() {
    // §3.5.3 randomisation: clients told to start at the same instant do not all get
    // the same initial burst; each still stays within tau / T + 1 = 3.
    let bursts: Vec<usize> = (0..40)
        .map(|stream| {
            let mut c = OcClient::new(
                OcClientConfig {
                    algorithms: vec![OcAlgorithm::Rate],
                    ..OcClientConfig::default()
                },
                7,
                stream,
                Time::ZERO,
            );
            c.on_response(Time::ZERO, &response(100, "rate", 60_000, "1.0"));
            (0..10)
                .filter(|_| c.admit(Time::ZERO, &INVITE) == OcVerdict::Forward)
                .count()
        })
        .collect();
    assert!(bursts.iter().all(|b| (1..=3).contains(b)), "{bursts:?}");
    let distinct: std::collections::BTreeSet<_> = bursts.iter().collect();
    assert!(distinct.len() >= 2, "{bursts:?}");
}

#[test]
fn load_reports_set_the_fuzzy_window_of_invites_in_transit() {
    let mut s = server(&OcAlgorithm::ALL);
    let mut c = client(&[OcAlgorithm::SluiceLoad]);
    let load = |cpu, memory| fb(1, FeedbackValue::Load { cpu, memory });
    // The server writes CPU in `oc` and memory in `sluice-mem`, in thousandths.
    let t = Time::from_millis(10);
    let p = s
        .response_params(t, SE, &["sluiceload", "loss"], load(1.0, 0.9))
        .unwrap();
    assert_eq!(p.algorithm, OcAlgorithm::SluiceLoad);
    assert_eq!((p.oc, p.memory), (1000, Some(900)));
    let mut via = String::new();
    p.append_to(&mut via);
    assert!(via.ends_with(";sluice-mem=900"), "{via}");
    let wire = |p: &OcParams| OcResponse {
        oc: Some(p.oc),
        algorithm: Some(p.algorithm.token()),
        validity_ms: Some(p.validity_ms),
        seq: Some(p.seq),
        window_ack: None,
        memory: p.memory,
    };
    // Saturated and full: FastDEC takes the initial window of 10 down to 4.
    assert_eq!(c.on_response(t, &wire(&p)), OcUpdate::Applied);
    assert_eq!(c.active(), Some(OcAlgorithm::SluiceLoad));
    assert_eq!(c.value(), Some(4));
    for _ in 0..4 {
        assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
        c.on_session_sent();
    }
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Reject);
    // A priority INVITE and the requests of admitted sessions are never held back.
    assert_eq!(c.admit(t, &PRIORITY_INVITE), OcVerdict::Forward);
    for r in exempt_requests() {
        assert_eq!(c.admit(t, &r), OcVerdict::Forward);
    }
    // An answer frees a place.
    c.on_session_answered();
    assert_eq!(c.in_transit(), 3);
    assert_eq!(c.admit(t, &INVITE), OcVerdict::Forward);
    // A report without its memory, or with values past full, is ignored and counted.
    let mut bad = wire(&p);
    bad.seq = Some(p.seq.successor());
    bad.memory = None;
    assert_eq!(c.on_response(t, &bad), OcUpdate::OutOfRange);
    bad.memory = Some(1001);
    assert_eq!(c.on_response(t, &bad), OcUpdate::OutOfRange);
    bad.memory = Some(0);
    bad.oc = Some(1001);
    assert_eq!(c.on_response(t, &bad), OcUpdate::OutOfRange);
    assert_eq!(c.stats().out_of_range, 3);
}
