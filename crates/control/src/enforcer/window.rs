//! Window throttle, Shen, Schulzrinne & Nahum 2008, §2.4.2 and §3.3–3.5: the paper's
//! enforcement for window feedback.
//!
//! The SE keeps the window the RE last advertised and spends one slot per new session
//! it sends; with no slot left, new sessions are blocked. Slots come back only through
//! feedback: the RE's advertised value already counts every INVITE it has received, so
//! each feedback replaces the SE's count (§3.3–3.5 free slots by RE-side events: a
//! new interval for win-disc, room after processing for win-cont, a processed INVITE
//! for win-auto). Nothing at the SE itself, neither a response nor a 200 OK, frees one.
//!
//! Not in the paper: an optional probe. Feedback only rides on messages the RE sends to
//! this SE, so an SE at zero with no session in progress would never hear that its
//! window reopened. If the window has been empty and no feedback has arrived for
//! `probe_after`, one session is let through to restart the exchange. Under load,
//! feedback arrives far more often than that and the probe never fires.

use crate::types::FeedbackValue;
use sluice_time::Time;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct WindowThrottle {
    /// `None` until the first feedback when no initial window is configured.
    slots: Option<i64>,
    probe_after: Option<Duration>,
    quiet_since: Time,
    probes: u64,
}

impl WindowThrottle {
    pub fn new(initial_window: Option<u32>, probe_after: Option<Duration>, now: Time) -> Self {
        Self {
            slots: initial_window.map(i64::from),
            probe_after,
            quiet_since: now,
            probes: 0,
        }
    }

    /// Slots left; `None` means unlimited (no feedback yet, no initial window).
    pub fn slots(&self) -> Option<i64> {
        self.slots
    }

    pub fn probes(&self) -> u64 {
        self.probes
    }

    fn probe_due(&self) -> Option<Time> {
        self.probe_after.map(|p| self.quiet_since + p)
    }

    pub fn try_pass(&mut self, now: Time) -> bool {
        match self.slots {
            None => true,
            Some(s) if s >= 1 => {
                self.slots = Some(s - 1);
                true
            }
            Some(_) => {
                if self.probe_due().is_some_and(|due| now >= due) {
                    self.quiet_since = now;
                    self.probes += 1;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// When a held request could next go out without new feedback.
    pub fn next_opening(&self) -> Option<Time> {
        match self.slots {
            Some(s) if s < 1 => self.probe_due(),
            _ => None,
        }
    }

    pub fn on_feedback(&mut self, now: Time, value: FeedbackValue) -> bool {
        let FeedbackValue::Window(w) = value else {
            return false;
        };
        self.slots = Some(i64::from(w));
        self.quiet_since = now;
        true
    }
}
