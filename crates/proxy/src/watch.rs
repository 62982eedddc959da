//! What the operator's log says about the control loop, judged from the core's counters
//! once per interval: one line when the proxy starts turning calls away (overload
//! entered), one when a whole interval passes without (overload left), and at most one
//! warning per interval about bad input, with the counts since the last. Per-message
//! logging would itself be a flood under attack or overload.

use std::time::Duration;

use sluice_proxy_core::CoreStats;

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

impl Counts {
    fn of(s: &CoreStats) -> Counts {
        Counts {
            turned_away: s.rejected_policy
                + s.rejected_table_headroom
                + s.dropped_queue_full
                + s.dropped_invite_queue_full
                + s.dropped_memory_budget
                + s.hop.client.rejected_normal
                + s.hop.client.rejected_priority,
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
}

impl Watch {
    /// The events since the previous sample; `uptime` is the proxy's time since start.
    pub fn sample(&mut self, uptime: Duration, stats: &CoreStats) -> Vec<WatchEvent> {
        let now = Counts::of(stats);
        let Some(last) = self.last.replace(now) else {
            return Vec::new();
        };
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
        let bad = WatchEvent::BadInput {
            malformed: now.malformed.saturating_sub(last.malformed),
            oversized: now.oversized.saturating_sub(last.oversized),
            invalid: now.invalid.saturating_sub(last.invalid),
        };
        if bad
            != (WatchEvent::BadInput {
                malformed: 0,
                oversized: 0,
                invalid: 0,
            })
        {
            events.push(bad);
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
        assert!(
            w.sample(secs(1), &s).is_empty(),
            "the first sample is the baseline"
        );
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
