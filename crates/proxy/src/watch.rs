//! What the operator's log says about the control loop, judged from the core's counters
//! once per interval: one line when the proxy starts turning calls away (overload
//! entered), one when a whole interval passes without (overload left), one when the
//! feedback it sends as an RE, or the control a next hop asks of it as an SE, starts,
//! stops or moves by half from what was last logged, and at most one warning per interval
//! about bad input, with the counts since the last. Per-message logging would itself be a
//! flood under attack or overload; the half is hysteresis, so a window that swings around
//! its mean every interval is not a line a second.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use sluice_control::overload::OcAlgorithm;
use sluice_proxy_core::CoreStats;

/// How far a value must move from the one last logged to be logged again: half of it,
/// and at least half of [`SMALL`].
const MOVED: f64 = 0.5;
/// Below this, windows (sessions), rates (sessions/s) and loss (percent) are all "small":
/// a window going from 1 to 3 and back under overload is not news.
const SMALL: f64 = 10.0;

/// Whether `to` is worth a line after `from` was logged.
fn moved(from: Option<f64>, to: Option<f64>) -> bool {
    match (from, to) {
        (None, None) => false,
        (Some(a), Some(b)) => (b - a).abs() > MOVED * a.abs().max(SMALL),
        _ => true,
    }
}

/// The counters the watch compares from one interval to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// New requests answered 503 or dropped here: local admission, full queues, the
    /// table's headroom, the memory budget, and an SE's overload-control client.
    turned_away: u64,
    admitted: u64,
    malformed: u64,
    oversized: u64,
    invalid: u64,
}

/// New requests answered 503 or dropped here so far: local admission, full queues, the
/// table's headroom, the memory budget, and an SE's overload-control client.
pub(crate) fn turned_away(s: &CoreStats) -> u64 {
    s.rejected_policy
        + s.rejected_table_headroom
        + s.dropped_queue_full
        + s.dropped_memory_budget
        + s.hop.client.rejected_normal
        + s.hop.client.rejected_priority
}

impl Counts {
    fn of(s: &CoreStats) -> Counts {
        Counts {
            turned_away: turned_away(s),
            admitted: s.admitted,
            malformed: s.malformed,
            oversized: s.oversized,
            invalid: s.invalid,
        }
    }
}

/// A change worth a log line.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// Requests were turned away in the last interval, after an interval with none.
    OverloadEntered {
        turned_away: u64,
        admitted: u64,
        occupancy: f64,
        queue_len: usize,
    },
    /// A whole interval passed without turning a request away.
    OverloadLeft { lasted: Duration, turned_away: u64 },
    /// RE: the feedback generator's control value (the total window or rate it
    /// advertises) started, stopped or moved by half.
    FeedbackChanged { from: Option<f64>, to: Option<f64> },
    /// SE: the overload control a next hop asks of this proxy started, stopped or moved
    /// by half.
    NextHopControl {
        next_hop: SocketAddr,
        from: Option<(OcAlgorithm, i64)>,
        to: Option<(OcAlgorithm, i64)>,
    },
    /// Messages that could not be used arrived in the last interval.
    BadInput {
        malformed: u64,
        oversized: u64,
        invalid: u64,
    },
}

/// Samples the core's counters once per interval (the shell calls [`Watch::sample`]).
#[derive(Clone, Debug, Default)]
pub struct Watch {
    last: Option<Counts>,
    /// Since when, and how many turned away, while overloaded.
    overload: Option<(Duration, u64)>,
    /// The feedback control value last logged.
    feedback: Option<f64>,
    /// Each next hop's control last logged.
    next_hops: BTreeMap<SocketAddr, Option<(OcAlgorithm, i64)>>,
}

impl Watch {
    /// The events since the previous sample; `uptime` is the proxy's time since start.
    pub fn sample(&mut self, uptime: Duration, stats: &CoreStats) -> Vec<WatchEvent> {
        let now = Counts::of(stats);
        // The core's counters start at zero with it: what happened before the first sample
        // (a burst the other UDP threads took before the main loop's first turn) is news.
        let last = self.last.replace(now).unwrap_or_default();
        let mut events = Vec::new();
        let turned_away = now.turned_away.saturating_sub(last.turned_away);
        match (&mut self.overload, turned_away) {
            (None, 0) => {}
            (None, n) => {
                self.overload = Some((uptime, n));
                events.push(WatchEvent::OverloadEntered {
                    turned_away: n,
                    admitted: now.admitted.saturating_sub(last.admitted),
                    occupancy: stats.occupancy,
                    queue_len: stats.queue_len + stats.invite_queue_len,
                });
            }
            (Some((_, total)), n) if n > 0 => *total += n,
            (Some((since, total)), _) => {
                events.push(WatchEvent::OverloadLeft {
                    lasted: uptime.saturating_sub(*since),
                    turned_away: *total,
                });
                self.overload = None;
            }
        }
        let (malformed, oversized, invalid) = (
            now.malformed.saturating_sub(last.malformed),
            now.oversized.saturating_sub(last.oversized),
            now.invalid.saturating_sub(last.invalid),
        );
        if malformed + oversized + invalid > 0 {
            events.push(WatchEvent::BadInput {
                malformed,
                oversized,
                invalid,
            });
        }
        events
    }

    /// RE: the feedback generator's control value now; an event if it is worth a line.
    pub fn feedback(&mut self, control_value: Option<f64>) -> Option<WatchEvent> {
        let to = control_value.filter(|v| v.is_finite());
        moved(self.feedback, to).then(|| {
            let from = std::mem::replace(&mut self.feedback, to);
            WatchEvent::FeedbackChanged { from, to }
        })
    }

    /// SE: each next hop's control now; an event for each one worth a line.
    pub fn next_hops(
        &mut self,
        controls: impl Iterator<Item = (SocketAddr, Option<(OcAlgorithm, i64)>)>,
    ) -> Vec<WatchEvent> {
        let value = |c: Option<(OcAlgorithm, i64)>| c.map(|(_, v)| v as f64);
        let mut events = Vec::new();
        for (next_hop, to) in controls {
            let from = self.next_hops.get(&next_hop).copied().flatten();
            let algorithm_changed = from.map(|f| f.0) != to.map(|t| t.0);
            if algorithm_changed || moved(value(from), value(to)) {
                self.next_hops.insert(next_hop, to);
                events.push(WatchEvent::NextHopControl { next_hop, from, to });
            }
        }
        events
    }
}

/// Writes one event to the log (`tracing`, target `sluice::control` or `sluice::input`).
pub fn log_event(event: &WatchEvent) {
    match event {
        WatchEvent::OverloadEntered {
            turned_away,
            admitted,
            occupancy,
            queue_len,
        } => tracing::warn!(
            target: "sluice::control",
            turned_away,
            admitted,
            occupancy,
            queue_len,
            "overload entered: turning new requests away"
        ),
        WatchEvent::OverloadLeft {
            lasted,
            turned_away,
        } => tracing::info!(
            target: "sluice::control",
            lasted_s = lasted.as_secs_f64(),
            turned_away,
            "overload left"
        ),
        WatchEvent::FeedbackChanged { from, to } => tracing::info!(
            target: "sluice::control",
            from = from.map_or(String::new(), |v| format!("{v:.1}")),
            to = to.map_or(String::new(), |v| format!("{v:.1}")),
            "feedback to the upstream neighbours changed"
        ),
        WatchEvent::NextHopControl { next_hop, from, to } => {
            let show = |c: &Option<(OcAlgorithm, i64)>| {
                c.map_or_else(|| "none".to_owned(), |(a, v)| format!("{} {v}", a.token()))
            };
            tracing::info!(
                target: "sluice::control",
                %next_hop,
                from = show(from),
                to = show(to),
                "overload control asked by a next hop changed"
            );
        }
        WatchEvent::BadInput {
            malformed,
            oversized,
            invalid,
        } => tracing::warn!(
            target: "sluice::input",
            malformed,
            oversized,
            invalid,
            "unusable messages dropped or answered 400 in the last interval"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn overload_is_entered_on_the_first_refusal_and_left_after_a_quiet_interval() {
        let mut w = Watch::default();
        let mut s = CoreStats::default();
        assert!(w.sample(secs(1), &s).is_empty(), "nothing since the start");
        s.admitted = 100;
        assert!(
            w.sample(secs(2), &s).is_empty(),
            "calls admitted, none refused"
        );
        s.admitted = 200;
        s.rejected_policy = 30;
        s.occupancy = 0.97;
        s.queue_len = 12;
        assert_eq!(
            w.sample(secs(3), &s),
            vec![WatchEvent::OverloadEntered {
                turned_away: 30,
                admitted: 100,
                occupancy: 0.97,
                queue_len: 12
            }]
        );
        // Still refusing: no new line.
        s.hop.client.rejected_normal = 50;
        assert!(w.sample(secs(4), &s).is_empty());
        // A quiet interval ends it, with what it cost.
        assert_eq!(
            w.sample(secs(5), &s),
            vec![WatchEvent::OverloadLeft {
                lasted: secs(2),
                turned_away: 80
            }]
        );
        assert!(w.sample(secs(6), &s).is_empty());
    }

    #[test]
    fn refusals_before_the_first_sample_are_reported_by_it() {
        let mut w = Watch::default();
        let s = CoreStats {
            dropped_queue_full: 180,
            admitted: 20,
            ..CoreStats::default()
        };
        assert!(matches!(
            w.sample(secs(1), &s)[..],
            [WatchEvent::OverloadEntered {
                turned_away: 180,
                admitted: 20,
                ..
            }]
        ));
    }

    #[test]
    fn feedback_and_next_hop_controls_are_logged_when_they_start_stop_or_move_by_half() {
        let mut w = Watch::default();
        assert_eq!(w.feedback(None), None);
        assert_eq!(
            w.feedback(Some(100.0)),
            Some(WatchEvent::FeedbackChanged {
                from: None,
                to: Some(100.0)
            })
        );
        // Swings within half of what was logged are not lines, however many.
        for v in [140.0, 60.0, 149.0, 51.0] {
            assert_eq!(w.feedback(Some(v)), None, "{v}");
        }
        assert!(w.feedback(Some(160.0)).is_some());
        assert!(w.feedback(Some(100.0)).is_none(), "within half of 160");
        assert!(w.feedback(None).is_some(), "stopped");

        let hop: SocketAddr = "127.0.0.1:5080".parse().unwrap();
        let win = |v| Some((OcAlgorithm::SluiceWindow, v));
        assert_eq!(w.next_hops([(hop, None)].into_iter()), vec![]);
        assert_eq!(
            w.next_hops([(hop, win(40))].into_iter()),
            vec![WatchEvent::NextHopControl {
                next_hop: hop,
                from: None,
                to: win(40)
            }]
        );
        assert!(w.next_hops([(hop, win(25))].into_iter()).is_empty());
        assert_eq!(w.next_hops([(hop, win(10))].into_iter()).len(), 1);
        assert_eq!(w.next_hops([(hop, win(1))].into_iter()).len(), 1);
        // A window near its floor moving by a few sessions is not news.
        for small in [0, 3, 5, 2] {
            assert!(
                w.next_hops([(hop, win(small))].into_iter()).is_empty(),
                "{small}"
            );
        }
        assert_eq!(
            w.next_hops([(hop, Some((OcAlgorithm::Loss, 10)))].into_iter())
                .len(),
            1,
            "another algorithm"
        );
    }

    #[test]
    fn bad_input_is_one_line_per_interval_with_its_counts() {
        let mut w = Watch::default();
        let mut s = CoreStats::default();
        w.sample(secs(1), &s);
        s.malformed = 1000;
        s.oversized = 3;
        assert_eq!(
            w.sample(secs(2), &s),
            vec![WatchEvent::BadInput {
                malformed: 1000,
                oversized: 3,
                invalid: 0
            }]
        );
        assert!(w.sample(secs(3), &s).is_empty());
    }
}
