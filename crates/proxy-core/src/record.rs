//! What the processor did, message by message, for a driver that measures the proxy from
//! outside: the simulator's ledger counts calls, queue levels and busy time from these.
//! Off unless asked for ([`ProxyCore::enable_records`](crate::ProxyCore::enable_records)),
//! so the live shell pays nothing for them.

use std::time::Duration;

use bytes::Bytes;
use sluice_time::Time;

/// One thing the receive stage or the processor did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// An arrival was dropped at a full queue.
    Dropped { at: Time },
    /// The queues changed at `at` and hold `waiting` messages (the one in service
    /// included, as the core counts them).
    Queue { at: Time, waiting: usize },
    /// The processor was busy over `[start, end)` with a message or with other processes'
    /// load (`background_load`).
    Busy { start: Time, end: Time },
    /// The processor finished a message.
    Processed(Processed),
}

/// A message the processor finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    /// Its Call-ID (empty if it had none).
    pub call_id: Bytes,
    /// A response's status; `None` for a request.
    pub status: Option<u16>,
    /// An INVITE request.
    pub invite: bool,
    /// An initial INVITE seen for the first time (a new session).
    pub session_start: bool,
    /// Answered 503 instead of processed in full (the admission policy, the SE's
    /// reduction, or a shutdown).
    pub rejected: bool,
    /// When its service began, and how long it had waited for it.
    pub start: Time,
    pub queueing_delay: Duration,
}
