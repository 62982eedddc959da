//! What the generator counts: messages by type, failures by cause, post-dial delay
//! histograms, per-second rows and the final summaries.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use sluice_sip::{Message, Method};

/// Message types the retransmission counters distinguish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Invite,
    Ack,
    Bye,
    /// Any other request (CANCEL, OPTIONS, ...).
    OtherRequest,
    /// 1xx to an INVITE.
    Provisional,
    /// 2xx to an INVITE.
    OkInvite,
    /// 3xx–6xx to an INVITE.
    ErrorInvite,
    /// Final response to a BYE.
    ByeResponse,
    /// Any other response.
    OtherResponse,
}

impl Kind {
    /// Classifies a parsed message.
    pub fn of(msg: &Message) -> Kind {
        if let Some(m) = msg.method() {
            return Kind::of_method(m);
        }
        let status = msg.status().unwrap_or(0);
        match msg.cseq().map(|c| &c.method) {
            Some(Method::Invite) => match status {
                100..=199 => Kind::Provisional,
                200..=299 => Kind::OkInvite,
                _ => Kind::ErrorInvite,
            },
            Some(Method::Bye) => Kind::ByeResponse,
            _ => Kind::OtherResponse,
        }
    }

    pub fn of_method(m: &Method) -> Kind {
        match m {
            Method::Invite => Kind::Invite,
            Method::Ack => Kind::Ack,
            Method::Bye => Kind::Bye,
            _ => Kind::OtherRequest,
        }
    }

    /// Classifies wire bytes (only parsed when they are a response: the start line of a
    /// request names it, a response needs its CSeq).
    pub fn of_wire(payload: &bytes::Bytes) -> Kind {
        for (prefix, kind) in [
            (&b"INVITE "[..], Kind::Invite),
            (b"ACK ", Kind::Ack),
            (b"BYE ", Kind::Bye),
        ] {
            if payload.starts_with(prefix) {
                return kind;
            }
        }
        if !payload.starts_with(b"SIP/2.0 ") {
            return Kind::OtherRequest;
        }
        Message::parse(payload.clone()).map_or(Kind::OtherResponse, |m| Kind::of(&m))
    }
}

/// A counter per [`Kind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    pub invite: u64,
    pub ack: u64,
    pub bye: u64,
    pub other_request: u64,
    pub provisional: u64,
    pub ok_invite: u64,
    pub error_invite: u64,
    pub bye_response: u64,
    pub other_response: u64,
}

impl KindCounts {
    pub fn add(&mut self, kind: Kind) {
        *match kind {
            Kind::Invite => &mut self.invite,
            Kind::Ack => &mut self.ack,
            Kind::Bye => &mut self.bye,
            Kind::OtherRequest => &mut self.other_request,
            Kind::Provisional => &mut self.provisional,
            Kind::OkInvite => &mut self.ok_invite,
            Kind::ErrorInvite => &mut self.error_invite,
            Kind::ByeResponse => &mut self.bye_response,
            Kind::OtherResponse => &mut self.other_response,
        } += 1;
    }

    pub fn total(&self) -> u64 {
        self.invite
            + self.ack
            + self.bye
            + self.other_request
            + self.provisional
            + self.ok_invite
            + self.error_invite
            + self.bye_response
            + self.other_response
    }

    fn accumulate(&mut self, o: &KindCounts) {
        self.invite += o.invite;
        self.ack += o.ack;
        self.bye += o.bye;
        self.other_request += o.other_request;
        self.provisional += o.provisional;
        self.ok_invite += o.ok_invite;
        self.error_invite += o.error_invite;
        self.bye_response += o.bye_response;
        self.other_response += o.other_response;
    }
}

/// Why calls failed. A call counts once, under the first cause that ended it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Failures {
    /// 503 Service Unavailable to the INVITE.
    pub rejected_503: u64,
    /// 408 to the INVITE, or no final response before Timer B.
    pub timeout: u64,
    /// Any other 3xx–6xx to the INVITE.
    pub other_final: u64,
    /// Sending failed (the socket reported an error).
    pub transport: u64,
    /// Answered, but the ACK went out more than the setup limit (10 s) after the INVITE.
    pub slow_setup: u64,
    /// Set up in time, but the BYE failed (timeout or a non-2xx).
    pub bye: u64,
}

impl Failures {
    pub fn total(&self) -> u64 {
        self.rejected_503 + self.timeout + self.other_final + self.transport + self.slow_setup
    }

    fn accumulate(&mut self, o: &Failures) {
        self.rejected_503 += o.rejected_503;
        self.timeout += o.timeout;
        self.other_final += o.other_final;
        self.transport += o.transport;
        self.slow_setup += o.slow_setup;
        self.bye += o.bye;
    }
}

/// Post-dial delays in microseconds (1 µs to 10 min, 3 significant digits).
#[derive(Clone, Debug)]
pub struct Delays(Histogram<u64>);

impl Default for Delays {
    fn default() -> Self {
        Delays(Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds are valid"))
    }
}

impl Delays {
    pub fn record(&mut self, d: Duration) {
        // Saturate rather than fail on an out-of-range value.
        self.0
            .saturating_record(d.as_micros().clamp(1, 600_000_000) as u64);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q` quantile in milliseconds, or `None` with no samples.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.0.value_at_quantile(q) as f64 / 1000.0)
    }

    pub fn reset(&mut self) {
        self.0.reset();
    }

    pub fn merge(&mut self, other: &Delays) {
        let _ = self.0.add(&other.0);
    }

    pub fn summary(&self) -> DelaySummary {
        DelaySummary {
            count: self.0.len(),
            p50_ms: self.quantile_ms(0.5),
            p90_ms: self.quantile_ms(0.9),
            p99_ms: self.quantile_ms(0.99),
            max_ms: (!self.0.is_empty()).then(|| self.0.max() as f64 / 1000.0),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DelaySummary {
    pub count: u64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// The counters of one reporting interval (a second) or of a whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// INVITEs sent (new calls).
    pub offered: u64,
    /// Calls whose ACK went out within the setup limit (goodput).
    pub successful: u64,
    /// Of `successful`, calls whose 180 reached the caller before their 2xx. Shen et al.
    /// count a call only when all five setup messages (INVITE, 100, 180, 200, ACK) got
    /// through within the limit; from the caller's side that is this count (the 100 is
    /// hop-by-hop, and the ACK's arrival is the UAS's to see).
    pub successful_with_180: u64,
    pub failed: Failures,
    /// Calls not started because the in-progress limit or the transaction table was full.
    pub refused: u64,
    /// Calls that ended with a 2xx to their BYE.
    pub completed: u64,
    pub retransmissions_sent: KindCounts,
    pub retransmissions_received: KindCounts,
}

impl Counts {
    pub fn accumulate(&mut self, o: &Counts) {
        self.offered += o.offered;
        self.successful += o.successful;
        self.successful_with_180 += o.successful_with_180;
        self.failed.accumulate(&o.failed);
        self.refused += o.refused;
        self.completed += o.completed;
        self.retransmissions_sent
            .accumulate(&o.retransmissions_sent);
        self.retransmissions_received
            .accumulate(&o.retransmissions_received);
    }
}

/// One row of the per-second CSV.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SecondRow {
    /// Seconds since the start: the row covers `[second - 1, second)`.
    pub second: u64,
    pub counts: Counts,
    pub pdd_p50_ms: Option<f64>,
    pub pdd_p99_ms: Option<f64>,
    /// Gauge at the end of the second.
    pub in_progress: usize,
}

impl SecondRow {
    /// Adds another generator thread's row for the same second. Delay quantiles do not
    /// add, so the merged row has none (the run's summary has them over every call).
    pub fn absorb(&mut self, other: &SecondRow) {
        self.counts.accumulate(&other.counts);
        self.in_progress += other.in_progress;
        self.pdd_p50_ms = None;
        self.pdd_p99_ms = None;
    }

    pub const CSV_HEADER: &'static str =
        "time_s,offered,successful,failed,failed_503,failed_timeout,\
failed_other,failed_transport,failed_slow_setup,failed_bye,refused,completed,retrans_sent,\
retrans_invite,retrans_bye,retrans_2xx,retrans_ack,retrans_response,retrans_received,\
pdd_p50_ms,pdd_p99_ms,in_progress,successful_with_180";

    pub fn csv(&self) -> String {
        let c = &self.counts;
        let s = &c.retransmissions_sent;
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.second,
            c.offered,
            c.successful,
            c.failed.total(),
            c.failed.rejected_503,
            c.failed.timeout,
            c.failed.other_final,
            c.failed.transport,
            c.failed.slow_setup,
            c.failed.bye,
            c.refused,
            c.completed,
            s.total(),
            s.invite,
            s.bye,
            s.ok_invite,
            s.ack,
            s.provisional + s.error_invite + s.bye_response + s.other_response,
            c.retransmissions_received.total(),
            opt(self.pdd_p50_ms),
            opt(self.pdd_p99_ms),
            self.in_progress,
            c.successful_with_180
        )
    }
}
