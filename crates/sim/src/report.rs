//! What a run measured: the paper's goodput (§4.2: calls whose five setup messages got
//! through within 10 s), normalised to capacity as in Figures 4–21, with the RE's
//! occupancy, queue and retransmission figures behind §4.3 and §5.7, per-source goodput
//! for §6.2, and an optional 1 s time series.
//!
//! Everything here is plain data in a fixed order (vectors, `BTreeMap`), so
//! `serde_json::to_string` of a report is byte-identical for identical runs. Reports read
//! back (a sharded sweep's partial output) must come from a format that keeps NaN: JSON
//! writes it as `null`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunReport {
    /// Calls per second the RE can serve: 1 / the processor time of one call
    /// (`service_rate_mps / messages per call` with uniform costs).
    pub capacity_cps: f64,
    /// The RE's cost of a forwarded call over that of a rejected one
    /// ([`crate::Scenario::effective_beta`]), the `β` of the optimal-goodput bound.
    pub beta: f64,
    /// `offered_cps / capacity_cps`.
    pub offered_load: f64,
    /// New calls (first INVITE sent by a caller) per second of the measurement window.
    pub offered_cps: f64,
    /// Good calls started in the window, per second of it.
    pub goodput_cps: f64,
    /// `goodput_cps / capacity_cps`.
    pub goodput: f64,
    /// Calls started in the measurement window.
    pub calls_offered: u64,
    /// Of those: INVITE, the callee's 100 (at the RE), 180, 200 (at the caller) and ACK
    /// (at the callee) all got through, the ACK within `setup_deadline_s` of the INVITE.
    pub calls_good: u64,
    /// Of those: the caller received a 503 (from its SE's throttle or the RE).
    pub calls_rejected: u64,
    /// The rest: timed out, lost a setup message, or too slow.
    pub calls_failed_other: u64,
    /// Calls of the whole run whose INVITE a proxy admitted, a provisional response
    /// reaching the caller, but which never got a final response, counted once every proxy
    /// timer has run out since the caller's latest provisional (Timer C, which each
    /// provisional but 100 resets, and 64·T1 after it). Every proxy must answer what it
    /// admits: this is 0.
    pub admitted_unanswered: u64,
    /// The admitted calls old enough to be checked for that.
    pub admitted_checked: u64,
    /// First INVITE sent by the caller → first ACK received by the callee, over good calls.
    pub setup_delay_p50_ms: f64,
    pub setup_delay_p99_ms: f64,
    pub setup_delay_mean_ms: f64,
    /// Retransmissions over the whole run, by message ("INVITE", "BYE", "ACK",
    /// "100-INVITE", "200-INVITE", "503-INVITE", "200-BYE", ...), counted where a
    /// transaction layer (or, for "ACK", a caller's UA core answering a repeated 200)
    /// emitted them; stateless relays by proxies are not counted again.
    pub retransmissions: BTreeMap<String, u64>,
    /// Messages reaching the RE in the window that were retransmissions / all of them.
    pub retrans_ratio: f64,
    /// Mean processor busy fraction over the window.
    pub occupancy: f64,
    /// INVITEs rejected (503 by an SE throttle or by the RE) / INVITEs offered, over
    /// the calls of the window.
    pub reject_ratio: f64,
    /// Time-averaged RE queue length over the window (messages waiting, not in service).
    pub re_queue_mean: f64,
    pub re_queue_max: u64,
    /// Messages the full RE queue turned away during the window.
    pub re_dropped: u64,
    /// Messages arriving at the RE during the window (all kinds, before any drop).
    pub re_arrivals: u64,
    /// Calls of the window rejected at an SE, and at the RE.
    pub se_rejected: u64,
    pub re_rejected: u64,
    pub per_source: Vec<SourceReport>,
    /// Datagrams delivered to any node over the whole run (after link loss).
    pub messages_simulated: u64,
    /// Datagrams lost on links over the whole run.
    pub messages_lost: u64,
    /// Events the loop handled over the whole run.
    pub events_processed: u64,
    /// Simulated seconds (window plus grace).
    pub simulated_s: f64,
    /// Counters the bounded structures kept (all should be 0 in a sane run).
    pub refusals: Refusals,
    pub timeseries: Option<TimeSeries>,
    /// When any hop runs over TCP: what the connections did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpReport>,
    /// With `control_trace`: the signals of De Cicco et al.'s cost `J` (eqs. 15–17).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_trace: Option<ControlTrace>,
    /// Set only when the scenario was invalid and nothing ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SourceReport {
    pub name: String,
    pub offered_cps: f64,
    pub goodput_cps: f64,
    /// `goodput_cps / capacity_cps`.
    pub goodput: f64,
    pub calls_offered: u64,
    pub calls_good: u64,
    pub calls_rejected: u64,
    /// Sessions the SE's window throttle let through as a probe (window starvation).
    pub window_probes: u64,
    /// Feedback values the SE applied.
    pub feedback_applied: u64,
}

/// SIP over TCP over the whole run (the post-dial delays over the window's good calls).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TcpReport {
    /// Post-dial delay (Shen and Schulzrinne 2010, §4.3): the caller's first INVITE to
    /// its first 200 OK, over the good calls of the window, milliseconds.
    pub pdd_p50_ms: f64,
    pub pdd_p99_ms: f64,
    /// New INVITEs the SEs' and the RE's smart forwarding answered 503 (§6.2).
    pub rejected_smart_forwarding: u64,
    /// Messages dropped because a connection's write queue was full.
    pub write_queue_drops: u64,
    /// The same drops by the node that wrote them, in the units `bench overload` reports
    /// for its live run (bytes for the user agents, messages for the proxies), so the two
    /// can be compared queue by queue.
    pub dropped_by: WriteQueueDrops,
    /// Messages the RE read from its connections.
    pub re_messages_read: u64,
    /// The messages the RE took in, by kind (INVITE, ACK, BYE, 1xx, 2xx, ...), for a
    /// comparison with the live RE's.
    pub re_messages_in: Vec<(String, u64)>,
}

/// What full write queues turned away, by the node that wrote it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WriteQueueDrops {
    pub callers_bytes: u64,
    pub ses_messages: u64,
    pub re_messages: u64,
    pub callee_bytes: u64,
}

/// What bounded tables turned away over the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Refusals {
    /// Transactions refused by a full transaction table (all nodes).
    pub txn_table_full: u64,
    /// Messages that failed to parse (never expected: every message is built here).
    pub malformed: u64,
    /// Entries the RE's receive-stage INVITE memory could not take.
    pub re_invite_memory_full: u64,
    /// Requests an SE held (keep mode) and lost when its hold table was full.
    pub se_hold_full: u64,
}

/// 1 s bins over `[0, duration_s)`; `t_s` is the start of the bin.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TimeSeries {
    pub points: Vec<SeriesPoint>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub t_s: f64,
    /// Per source: good calls whose first INVITE was sent in this second (attributed to
    /// the second the call started, not the second it completed).
    pub goodput_cps: Vec<f64>,
    /// Per source: calls started in this second.
    pub offered_cps: Vec<f64>,
    /// Time-averaged RE queue length in this second.
    pub queue_len: f64,
    /// RE processor busy fraction in this second.
    pub occupancy: f64,
    /// The RE controller's estimates at the end of this second (NaN when it has none):
    /// smoothed session service rate `μ` (§3.1), sessions in the system (eq. 1), and its
    /// control value (total advertised window, total target rate, or acceptance
    /// fraction).
    pub re_service_rate: f64,
    pub re_sessions: f64,
    pub re_control_value: f64,
    /// Of the session-starting INVITEs the RE's processor took up in this second, the
    /// share it forwarded rather than answered 503 (NaN if none): De Cicco et al.'s
    /// accept ratio `1 − α` for rejections at the processor.
    pub accept_ratio: f64,
    /// Mean time those INVITEs waited in the RE's queue, milliseconds (NaN if none).
    pub invite_queueing_ms: f64,
}

/// 10 ms bins over `[0, duration_s)` of the RE's processor busy fraction and of the rate of
/// INVITEs (new and retransmitted) reaching it: the raw `C(t)` and `ρ_M r(t)` behind
/// De Cicco et al.'s filtered `C̃` and `r̃`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ControlTrace {
    pub bin_s: f64,
    pub cpu: Vec<f64>,
    pub invite_rate_cps: Vec<f64>,
}
