//! Sans-IO SIP overload control after Shen, Schulzrinne & Nahum, "Application Layer
//! Feedback-based SIP Server Overload Control" (CUCS-031-08, 2008).
//!
//! Every component is a plain struct: it takes events stamped with an injected
//! [`Time`](sluice_time::Time), returns decisions, and reports its next deadline through
//! `poll_timeout`; the driver calls `handle_timeout(now)` at or after that instant. No
//! clocks, sockets, threads or global randomness; random choices come from a ChaCha8
//! stream seeded from the config. The same code runs under the simulator and the live
//! proxy.
//!
//! # Roles
//! - **RE feedback** ([`receiver::FeedbackGenerator`]): win-disc, win-cont, win-auto,
//!   rate-abs, rate-occ (§3.3–3.7), with the §3.1 [`estimation`] and the §3.2
//!   [`active_sources`] table, and §6 [`fairness`].
//! - **SE enforcement** ([`enforcer::FeedbackEnforcer`], implemented by
//!   [`enforcer::Throttle`]): percentage, window, token bucket, leaky bucket, call gapping;
//!   discard or keep blocking (§2.4.2).
//! - **Local admission at the RE** ([`admission::LocalAdmission`]): the §4.3 baselines,
//!   and the local controls compared by De Cicco, Cofano & Mascolo: Ohta, OCC, their
//!   dual-loop PI (which also drains the INVITE queue, [`admission::DrainController`]),
//!   plus Montazerolghaem & Yaghmaee's RED-like rejection and a Clearwater-style
//!   latency bucket.
//! - **Standard wire format** ([`overload`]): RFC 7339 / RFC 7415 client and server
//!   state (negotiation, `oc-seq`, `oc-validity`, §7.2 loss, the RFC 7415 bucket) around
//!   the feedback above, with the window as an extension algorithm.
//! - **Bounds and tuning**: [`optimal`], the goodput bound of De Cicco et al.'s
//!   Proposition 1; [`tuning`], their Extremum Seeking optimizer and cost functional.
//!
//! [`ControlConfig`] (serde, paper defaults) builds the RE's generator and the local policy
//! for any [`Algorithm`]; an SE's enforcement is its [`overload::OcClientConfig`].
//!
//! # Driving an RE
//! For a message from neighbour `n` (feedback is only accepted from configured
//! neighbours; anything else has `source: None`):
//! 1. If it carries feed-forward: `feedback.on_feed_forward(now, n, ff)`.
//! 2. `feedback.on_arrival(now, &summary)` — on receipt, before any queueing decision.
//! 3. `admission.on_arrival(now, queue_len, &summary)`: `Admit` → enqueue (the driver's
//!    bounded queue drops it when full); `Reject` → the processor answers 503 at the
//!    rejection cost.
//! 4. Whenever the queue's contents change (enqueue, dequeue, drop):
//!    `feedback.on_queue(now, QueueOccupancy { invites, non_invites })`.
//! 5. When the processor finishes a message: `feedback.on_processed(now, &Completion {
//!    message, service_time, queueing_delay, session_accepted })`, rejections included.
//! 6. Whenever the RE sends any message to neighbour `m`: attach
//!    `feedback.feedback_for(now, m)` if it is `Some` (piggybacked feedback, §2.4.3).
//! 7. Sleep until the earlier of `feedback.poll_timeout()` and
//!    `admission.poll_timeout()`; then call `handle_timeout(now)` on both.
//!
//! # Driving an SE (one [`enforcer::Throttle`] per next-hop RE)
//! 1. For each request bound for the RE: `throttle.admit(now, id, &summary)`: `Forward` →
//!    send it; `Reject` → answer the caller with a rejection; `Hold` → keep the message
//!    under `id` until it is released. Attach `throttle.feed_forward(now)` to messages
//!    sent to the RE when it is `Some` (double feed).
//! 2. For each message from the RE carrying feedback: `throttle.on_feedback(now, &fb)`,
//!    then send every id from `throttle.poll_release()`.
//! 3. At `throttle.poll_timeout()`: `throttle.handle_timeout(now)`, then drain
//!    `poll_release()` likewise.
//!
//! Within one instant the order of independent events does not matter to the
//! controllers; the simulator should still fix one so runs repeat exactly.
//!
//! # Known limitation: window feedback starves when it cannot be delivered
//! An SE learns its window only from messages the RE sends it. An SE that has spent its
//! window and has no session in call setup hears nothing until its next BYE traffic
//! (or the 1 s window probe), while the RE keeps re-issuing windows it cannot deliver.
//! Because `μ` is an *acceptance* rate, unused windows lower `μ`, which shrinks the
//! windows further. In `tests/closed_loop.rs`'s toy loop this settles at a few percent
//! of capacity for win-disc with double-feed shares, and for win-cont with the §6.2.1
//! lottery; equal shares and rate-abs are unaffected. The simulator should check this
//! with the real call flow before trusting window results under unequal shares.

pub mod active_sources;
pub mod admission;
mod config;
pub mod enforcer;
pub mod estimation;
pub mod fairness;
pub mod fuzzy;
pub mod optimal;
pub mod overload;
pub mod receiver;
mod serde_millis;
mod serde_seed;
pub mod smoothing;
pub mod tuning;
mod types;
mod validate;

pub use admission::{AdmissionMetrics, AnyLocalAdmission, DrainController, LocalAdmission};
pub use config::{Algorithm, ControlConfig, UnknownAlgorithm};
pub use enforcer::{
    BlockingMode, ConfigError, EnforcerStats, FeedbackEnforcer, Throttle, ThrottleKind,
    ThrottleSpec,
};
pub use fairness::Fairness;
pub use receiver::{AnyFeedbackGenerator, FeedbackGenerator, ReceiverMetrics};
pub use types::{
    AdmissionVerdict, Completion, FeedForward, Feedback, FeedbackValue, MessageClass,
    MessageSummary, NeighbourId, QueueOccupancy, RequestId, ThrottleVerdict,
};
