//! The vocabulary every controller shares: who a message came from, what kind of
//! message it is, what the processor reports after serving it, and what feedback and
//! feed-forward carry between an SE and its RE.
//!
//! Messages reach controllers only as a [`MessageSummary`]; this crate never sees a
//! parsed SIP message, so it does not depend on the codec.

use std::time::Duration;

/// An adjacent SIP server, as an opaque number the driver assigns (the live proxy maps
/// each configured neighbour address to one; feedback from anyone else is not accepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NeighbourId(pub u32);

/// The driver's handle for a request an SE enforcer holds in keep mode. The enforcer
/// only stores and returns it; the driver keeps the message itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// The coarse message classes overload control distinguishes (§3.1: an INVITE weighs a
/// whole session, everything else belongs to a session already admitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageClass {
    Invite,
    OtherRequest,
    Response,
}

/// What a controller needs to know about one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageSummary {
    pub class: MessageClass,
    /// An initial INVITE seen for the first time: not a retransmission, not a re-INVITE
    /// inside a dialog. Only these are admitted or throttled and only these move
    /// windows, because admitting one commits the server to the rest of its session.
    pub starts_session: bool,
    /// The neighbour the message came from; `None` for a source that is not a
    /// configured neighbour (such messages never create per-neighbour state).
    pub source: Option<NeighbourId>,
}

impl MessageSummary {
    /// A new initial INVITE.
    pub fn new_session(source: Option<NeighbourId>) -> Self {
        Self {
            class: MessageClass::Invite,
            starts_session: true,
            source,
        }
    }
    /// A retransmitted (or in-dialog) INVITE: costs processing, starts nothing.
    pub fn repeated_invite(source: Option<NeighbourId>) -> Self {
        Self {
            class: MessageClass::Invite,
            starts_session: false,
            source,
        }
    }
    /// Any non-INVITE request (ACK, BYE, ...).
    pub fn other_request(source: Option<NeighbourId>) -> Self {
        Self {
            class: MessageClass::OtherRequest,
            starts_session: false,
            source,
        }
    }
    pub fn response(source: Option<NeighbourId>) -> Self {
        Self {
            class: MessageClass::Response,
            starts_session: false,
            source,
        }
    }
    /// True only for an INVITE flagged as starting a session, so a mislabelled
    /// non-INVITE can never consume a window slot.
    pub fn is_session_start(&self) -> bool {
        self.class == MessageClass::Invite && self.starts_session
    }
}

/// What the RE's processor reports after finishing one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub message: MessageSummary,
    /// Processor time spent on it (including the cost of answering with a rejection):
    /// the busy time behind the occupancy that rate-occ binds on.
    pub service_time: Duration,
    /// How long it waited in the queue before service began (win-auto's delay binding).
    pub queueing_delay: Duration,
    /// A session-starting INVITE that the RE accepted (forwarded, not rejected): the
    /// count behind the start-session service-rate estimate of §3.1.
    pub session_accepted: bool,
}

/// The RE queue's contents, split as eq. 1 needs them. The driver decides whether the
/// message in service counts; the simulator counts only waiting messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueOccupancy {
    pub invites: u32,
    pub non_invites: u32,
}

impl QueueOccupancy {
    pub fn total(&self) -> u64 {
        u64::from(self.invites) + u64::from(self.non_invites)
    }
}

/// The value an RE feeds back to one SE (§2.4.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FeedbackValue {
    /// Window feedback: how many new sessions the SE may still send (win-*). It is the
    /// RE's current count, so the SE replaces its own count with it.
    Window(u32),
    /// Absolute rate feedback, sessions per second for this SE (rate-abs).
    Rate(f64),
    /// Relative rate feedback: fraction of its offered sessions the SE should send,
    /// in `[0, 1]` (rate-occ). RFC 7339's `oc` loss percentage is `100 * (1 - f)`.
    AcceptFraction(f64),
    /// The RE's own occupancy, for an SE that sets its window from it (the fuzzy window,
    /// Montazerolghaem & Yaghmaee 2014): processor busy fraction and memory occupancy,
    /// each in `[0, 1]`, averaged over the RE's measurement interval.
    Load { cpu: f64, memory: f64 },
}

/// Feedback as carried on a message from the RE to one SE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feedback {
    /// Increases with every feedback the RE hands out, so an SE can ignore feedback
    /// that arrives out of order (RFC 7339 `oc-seq` plays this role on the wire).
    pub sequence: u64,
    pub value: FeedbackValue,
}

/// Feed-forward carried on a message from an SE to its RE in the double-feed
/// architecture (§6.1.2): the SE's offered session rate before throttling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FeedForward {
    /// Sessions per second offered to the SE for this RE, measured before throttling.
    pub offered_rate: f64,
}

/// A local admission decision at the RE's receive stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionVerdict {
    /// Queue it (the driver still drops it if the queue is full).
    Admit,
    /// Answer it with a rejection (503) instead of forwarding; the driver charges the
    /// rejection's processing cost.
    Reject,
}

/// An SE enforcer's decision about one request bound for the RE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleVerdict {
    /// Send it now.
    Forward,
    /// Blocked: reject it upstream (discard mode, or keep mode with a full hold queue).
    Reject,
    /// Blocked and held (keep mode); the enforcer releases it later through
    /// `poll_release`.
    Hold,
}
