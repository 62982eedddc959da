//! Measurement: the per-call ledger behind the paper's goodput (§4.2), the RE's
//! time-averaged queue length and processor occupancy (§4.3, §5.7), retransmission
//! counts (§2.1, §4.3), and the 1 s time series of §6.2.
//!
//! Nodes report facts ("the caller received the 180 of call 17") through the hooks here;
//! nothing in the ledger feeds back into the model.

use bytes::Bytes;
use sluice_sip::Message;
use sluice_time::Time;
use std::collections::{BTreeMap, HashMap};

use crate::report::{ControlTrace, RunReport, SeriesPoint, SourceReport, TimeSeries};
use crate::wire;

pub(crate) mod flag {
    pub const INVITE_AT_CALLEE: u16 = 1;
    pub const TRYING_AT_RE: u16 = 1 << 1;
    pub const RINGING_AT_CALLER: u16 = 1 << 2;
    pub const OK_AT_CALLER: u16 = 1 << 3;
    pub const ACK_AT_CALLEE: u16 = 1 << 4;
    pub const GOOD: u16 = 1 << 5;
    pub const REJECTED_SEEN: u16 = 1 << 6;
    pub const REJECTED_BY_SE: u16 = 1 << 7;
    pub const REJECTED_BY_RE: u16 = 1 << 8;
    pub const HUNG_UP: u16 = 1 << 9;
    /// A provisional response to the INVITE reached the caller: a proxy admitted it.
    pub const ADMITTED_AT_CALLER: u16 = 1 << 10;
    /// A final response to the INVITE reached the caller.
    pub const FINAL_AT_CALLER: u16 = 1 << 11;
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CallRec {
    pub start: Time,
    pub hold_ns: u64,
    pub setup_ns: u64,
    pub source: u16,
    pub flags: u16,
    /// Post-dial delay: first INVITE sent → first 2xx at the caller, microseconds (fits
    /// in the record's padding).
    pub pdd_us: u32,
    /// Latest provisional at the caller, milliseconds after the start: every proxy on the
    /// path held the INVITE by then, and last started (or reset) its Timer C no later.
    pub provisional_ms: u32,
}

/// Integrates a piecewise-constant level over the window and over 1 s bins.
#[derive(Clone, Debug)]
struct Integral {
    window_sum: f64,
    bins: Vec<f64>,
    bin_ns: u64,
}

const NS: u64 = 1_000_000_000;
/// Bin of the control trace: the PI's sampling interval (De Cicco et al. §V).
const TRACE_BIN_NS: u64 = 10_000_000;

impl Integral {
    fn new(bins: usize) -> Self {
        Self::with_bin(bins, NS)
    }

    fn with_bin(bins: usize, bin_ns: u64) -> Self {
        Self {
            window_sum: 0.0,
            bins: vec![0.0; bins],
            bin_ns,
        }
    }

    /// Adds `level` over `[t0, t1)` (nanoseconds).
    fn add(&mut self, window: (u64, u64), t0: u64, t1: u64, level: f64) {
        if t1 <= t0 || level == 0.0 {
            return;
        }
        let (w0, w1) = window;
        let (a, b) = (t0.max(w0), t1.min(w1));
        if b > a {
            self.window_sum += level * (b - a) as f64;
        }
        if self.bins.is_empty() {
            return;
        }
        let mut t = t0;
        while t < t1 {
            let bin = (t / self.bin_ns) as usize;
            if bin >= self.bins.len() {
                break;
            }
            let end = ((bin as u64 + 1) * self.bin_ns).min(t1);
            self.bins[bin] += level * (end - t) as f64;
            t = end;
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Ledger {
    pub calls: Vec<CallRec>,
    window: (u64, u64),
    deadline_ns: u64,
    /// How long after its latest provisional at the caller an admitted call must have had
    /// its final response: a proxy's Timer C, 64·T1 for its CANCEL, and the way back.
    answer_within_ns: u64,
    needs_trying: bool,
    sources: usize,
    // Time series: per bin, per source.
    series: bool,
    bins: usize,
    offered_bins: Vec<u32>,
    good_bins: Vec<u32>,
    samples: Vec<[f64; 3]>,
    /// Per bin: session INVITEs the processor took up, how many it rejected, and the sum
    /// of their queueing delays (ns).
    invite_bins: Vec<(u32, u32, u64)>,
    // RE.
    queue_len: u64,
    queue_since: u64,
    queue: Integral,
    busy: Integral,
    /// The control trace: 10 ms bins of processor busy time and INVITE arrivals.
    trace_busy: Integral,
    trace_invites: Vec<u32>,
    pub re_queue_max: u64,
    pub re_dropped: u64,
    pub re_arrivals: u64,
    pub re_retrans_arrivals: u64,
    // Whole run.
    /// Looked up, never iterated into output unsorted, so a fixed-seed hash is enough.
    retrans: HashMap<(u16, u8), (u64, String), foldhash::fast::FixedState>,
    pub messages: u64,
    pub lost: u64,
    pub malformed: u64,
}

impl Ledger {
    pub fn new(
        sources: usize,
        (warmup, duration): (Time, Time),
        deadline_ns: u64,
        answer_within_ns: u64,
        needs_trying: bool,
        series: bool,
        trace: bool,
    ) -> Self {
        let trace_bins = if trace {
            duration.as_nanos().div_ceil(TRACE_BIN_NS) as usize
        } else {
            0
        };
        let bins = if series {
            duration.as_nanos().div_ceil(NS) as usize
        } else {
            0
        };
        Self {
            calls: Vec::new(),
            window: (warmup.as_nanos(), duration.as_nanos()),
            deadline_ns,
            answer_within_ns,
            needs_trying,
            sources,
            series,
            bins,
            offered_bins: vec![0; bins * sources],
            good_bins: vec![0; bins * sources],
            samples: vec![[f64::NAN; 3]; bins],
            invite_bins: vec![(0, 0, 0); bins],
            queue_len: 0,
            queue_since: 0,
            queue: Integral::new(bins),
            busy: Integral::new(bins),
            trace_busy: Integral::with_bin(trace_bins, TRACE_BIN_NS),
            trace_invites: vec![0; trace_bins],
            re_queue_max: 0,
            re_dropped: 0,
            re_arrivals: 0,
            re_retrans_arrivals: 0,
            retrans: HashMap::default(),
            messages: 0,
            lost: 0,
            malformed: 0,
        }
    }

    fn in_window(&self, t: Time) -> bool {
        let t = t.as_nanos();
        t >= self.window.0 && t < self.window.1
    }

    fn bin_of(&self, t: Time) -> Option<usize> {
        let b = (t.as_nanos() / NS) as usize;
        (b < self.bins).then_some(b)
    }

    // ---- calls ----

    /// A caller starts a call: returns its number.
    pub fn new_call(&mut self, now: Time, source: usize, hold_ns: u64) -> u32 {
        let id = self.calls.len() as u32;
        self.calls.push(CallRec {
            start: now,
            hold_ns,
            setup_ns: 0,
            source: source as u16,
            flags: 0,
            pdd_us: 0,
            provisional_ms: 0,
        });
        if self.series {
            if let Some(b) = self.bin_of(now) {
                self.offered_bins[b * self.sources + source] += 1;
            }
        }
        id
    }

    pub fn call(&self, call: u32) -> Option<&CallRec> {
        self.calls.get(call as usize)
    }

    pub fn has(&self, call: u32, f: u16) -> bool {
        self.calls
            .get(call as usize)
            .is_some_and(|c| c.flags & f != 0)
    }

    /// Sets `f`; returns whether it was newly set.
    pub fn mark(&mut self, call: u32, f: u16) -> bool {
        match self.calls.get_mut(call as usize) {
            Some(c) if c.flags & f == 0 => {
                c.flags |= f;
                true
            }
            _ => false,
        }
    }

    /// The caller received a provisional response of `call`: it is admitted.
    pub fn provisional(&mut self, now: Time, call: u32) {
        if let Some(c) = self.calls.get_mut(call as usize) {
            c.flags |= flag::ADMITTED_AT_CALLER;
            let ms = now.as_nanos().saturating_sub(c.start.as_nanos()) / 1_000_000;
            c.provisional_ms = u32::try_from(ms).unwrap_or(u32::MAX);
        }
    }

    /// The caller received the first 2xx of `call`.
    pub fn answered(&mut self, now: Time, call: u32) {
        if let Some(c) = self.calls.get_mut(call as usize) {
            let us = now.as_nanos().saturating_sub(c.start.as_nanos()) / 1_000;
            c.pdd_us = u32::try_from(us).unwrap_or(u32::MAX);
        }
    }

    /// The 50th and 99th percentiles of the post-dial delay of the good calls of the
    /// window, milliseconds (Shen and Schulzrinne 2010, §4.3: INVITE sent → 200 OK).
    pub fn pdd_percentiles_ms(&self) -> (f64, f64) {
        let (w0, w1) = self.window;
        let mut d: Vec<u32> = self
            .calls
            .iter()
            .filter(|c| c.flags & flag::GOOD != 0 && (w0..w1).contains(&c.start.as_nanos()))
            .map(|c| c.pdd_us)
            .collect();
        d.sort_unstable();
        let pct = |p: f64| -> f64 {
            if d.is_empty() {
                return 0.0;
            }
            let rank = ((p * d.len() as f64).ceil() as usize).clamp(1, d.len());
            f64::from(d[rank - 1]) / 1.0e3
        };
        (pct(0.5), pct(0.99))
    }

    /// The callee received the ACK: the call is good if the other setup messages got
    /// through and the ACK came within the deadline.
    pub fn ack_at_callee(&mut self, now: Time, call: u32) {
        let needs_trying = self.needs_trying;
        let deadline = self.deadline_ns;
        let Some(c) = self.calls.get_mut(call as usize) else {
            return;
        };
        if c.flags & flag::ACK_AT_CALLEE != 0 {
            return;
        }
        c.flags |= flag::ACK_AT_CALLEE;
        let mut required = flag::INVITE_AT_CALLEE | flag::RINGING_AT_CALLER | flag::OK_AT_CALLER;
        if needs_trying {
            required |= flag::TRYING_AT_RE;
        }
        let delay = now.as_nanos().saturating_sub(c.start.as_nanos());
        if c.flags & required == required && delay <= deadline {
            c.flags |= flag::GOOD;
            c.setup_ns = delay;
            let (start, source) = (c.start, usize::from(c.source));
            if self.series {
                if let Some(b) = self.bin_of(start) {
                    self.good_bins[b * self.sources + source] += 1;
                }
            }
        }
    }

    /// Number of 1 s bins in the time series (0 without one).
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// The RE controller's estimates at the end of bin `b`.
    pub fn sample(&mut self, b: usize, m: &sluice_control::ReceiverMetrics) {
        if let Some(s) = self.samples.get_mut(b) {
            *s = [
                m.service_rate.unwrap_or(f64::NAN),
                m.sessions_in_system.unwrap_or(f64::NAN),
                m.control_value.unwrap_or(f64::NAN),
            ];
        }
    }

    // ---- RE ----

    /// The RE queue now holds `len` messages.
    pub fn queue_level(&mut self, now: Time, len: usize) {
        let t = now.as_nanos();
        self.queue
            .add(self.window, self.queue_since, t, self.queue_len as f64);
        self.queue_since = t;
        self.queue_len = len as u64;
        if self.in_window(now) && self.queue_len > self.re_queue_max {
            self.re_queue_max = self.queue_len;
        }
    }

    /// The processor was busy over `[from, to)`.
    pub fn busy(&mut self, from: Time, to: Time) {
        self.busy
            .add(self.window, from.as_nanos(), to.as_nanos(), 1.0);
        if !self.trace_invites.is_empty() {
            self.trace_busy
                .add(self.window, from.as_nanos(), to.as_nanos(), 1.0);
        }
    }

    /// An INVITE (new or retransmitted) reached the RE.
    pub fn re_invite_arrival(&mut self, now: Time) {
        let b = (now.as_nanos() / TRACE_BIN_NS) as usize;
        if let Some(n) = self.trace_invites.get_mut(b) {
            *n += 1;
        }
    }

    /// The RE's processor took up a session-starting INVITE at `started` after it waited
    /// `waited`, to forward it or (`rejected`) answer it 503.
    pub fn invite_served(&mut self, started: Time, waited: std::time::Duration, rejected: bool) {
        if let Some(b) = self.bin_of(started) {
            let bin = &mut self.invite_bins[b];
            bin.0 += 1;
            bin.1 += u32::from(rejected);
            bin.2 = bin.2.saturating_add(waited.as_nanos() as u64);
        }
    }

    pub fn re_arrival(&mut self, now: Time, retrans: bool) {
        if self.in_window(now) {
            self.re_arrivals += 1;
            if retrans {
                self.re_retrans_arrivals += 1;
            }
        }
    }

    pub fn re_drop(&mut self, now: Time) {
        if self.in_window(now) {
            self.re_dropped += 1;
        }
    }

    // ---- network ----

    /// A transaction layer (or UA core) retransmitted `payload`.
    pub fn retransmission(&mut self, payload: &Bytes) {
        if let Some(entry) =
            wire::label_key_of_bytes(payload).and_then(|key| self.retrans.get_mut(&key))
        {
            entry.0 += 1;
            return;
        }
        let Ok(msg) = Message::parse(payload.clone()) else {
            self.malformed += 1;
            return;
        };
        let key = wire::label_key(&msg);
        self.retrans
            .entry(key)
            .or_insert_with(|| (0, wire::label(&msg)))
            .0 += 1;
    }

    // ---- the report ----

    /// Fills the call, queue and series fields of `r`.
    pub fn finish(&mut self, end: Time, capacity_cps: f64, names: &[String], r: &mut RunReport) {
        self.queue_level(end, self.queue_len as usize);
        let (w0, w1) = self.window;
        let span_s = (w1 - w0) as f64 / NS as f64;
        let mut per: Vec<SourceReport> = names
            .iter()
            .map(|n| SourceReport {
                name: n.clone(),
                ..SourceReport::default()
            })
            .collect();
        let mut delays: Vec<u64> = Vec::new();
        let (mut rejected_seen, mut se_rej, mut re_rej) = (0u64, 0u64, 0u64);
        for c in &self.calls {
            let t = c.start.as_nanos();
            if t < w0 || t >= w1 {
                continue;
            }
            let s = &mut per[usize::from(c.source)];
            s.calls_offered += 1;
            if c.flags & flag::GOOD != 0 {
                s.calls_good += 1;
                delays.push(c.setup_ns);
            }
            if c.flags & flag::REJECTED_SEEN != 0 {
                s.calls_rejected += 1;
                rejected_seen += 1;
            }
            if c.flags & flag::REJECTED_BY_SE != 0 {
                se_rej += 1;
            }
            if c.flags & flag::REJECTED_BY_RE != 0 {
                re_rej += 1;
            }
        }
        let offered: u64 = per.iter().map(|s| s.calls_offered).sum();
        let good: u64 = per.iter().map(|s| s.calls_good).sum();
        for s in &mut per {
            s.offered_cps = s.calls_offered as f64 / span_s;
            s.goodput_cps = s.calls_good as f64 / span_s;
            s.goodput = s.goodput_cps / capacity_cps;
        }
        delays.sort_unstable();
        let pct = |p: f64| -> f64 {
            if delays.is_empty() {
                return 0.0;
            }
            let rank = ((p * delays.len() as f64).ceil() as usize).clamp(1, delays.len());
            delays[rank - 1] as f64 / 1.0e6
        };
        r.capacity_cps = capacity_cps;
        r.calls_offered = offered;
        r.calls_good = good;
        r.calls_rejected = rejected_seen;
        r.calls_failed_other = offered - good - rejected_seen.min(offered - good);
        r.offered_cps = offered as f64 / span_s;
        r.offered_load = r.offered_cps / capacity_cps;
        r.goodput_cps = good as f64 / span_s;
        r.goodput = r.goodput_cps / capacity_cps;
        r.setup_delay_p50_ms = pct(0.5);
        r.setup_delay_p99_ms = pct(0.99);
        r.setup_delay_mean_ms = if delays.is_empty() {
            0.0
        } else {
            delays.iter().map(|&d| d as f64).sum::<f64>() / delays.len() as f64 / 1.0e6
        };
        r.se_rejected = se_rej;
        r.re_rejected = re_rej;
        r.reject_ratio = if offered == 0 {
            0.0
        } else {
            (se_rej + re_rej) as f64 / offered as f64
        };
        let window_ns = (w1 - w0) as f64;
        r.occupancy = self.busy.window_sum / window_ns;
        r.re_queue_mean = self.queue.window_sum / window_ns;
        r.re_queue_max = self.re_queue_max;
        r.re_dropped = self.re_dropped;
        r.re_arrivals = self.re_arrivals;
        r.retrans_ratio = if self.re_arrivals == 0 {
            0.0
        } else {
            self.re_retrans_arrivals as f64 / self.re_arrivals as f64
        };
        let mut retrans = BTreeMap::new();
        for (count, label) in self.retrans.values() {
            *retrans.entry(label.clone()).or_insert(0) += *count;
        }
        r.retransmissions = retrans;
        r.messages_simulated = self.messages;
        r.messages_lost = self.lost;
        r.refusals.malformed = self.malformed;
        let answered = flag::ADMITTED_AT_CALLER | flag::FINAL_AT_CALLER;
        for c in &self.calls {
            let provisional_ns = c.start.as_nanos() + u64::from(c.provisional_ms) * 1_000_000;
            if c.flags & flag::ADMITTED_AT_CALLER == 0
                || provisional_ns + self.answer_within_ns > end.as_nanos()
            {
                continue;
            }
            r.admitted_checked += 1;
            if c.flags & answered == flag::ADMITTED_AT_CALLER {
                r.admitted_unanswered += 1;
            }
        }
        r.per_source = per;
        if self.series {
            let n = self.sources;
            let points = (0..self.bins)
                .map(|b| SeriesPoint {
                    t_s: b as f64,
                    goodput_cps: self.good_bins[b * n..(b + 1) * n]
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect(),
                    offered_cps: self.offered_bins[b * n..(b + 1) * n]
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect(),
                    queue_len: self.queue.bins[b] / NS as f64,
                    occupancy: self.busy.bins[b] / NS as f64,
                    re_service_rate: self.samples[b][0],
                    re_sessions: self.samples[b][1],
                    re_control_value: self.samples[b][2],
                    accept_ratio: {
                        let (n, rejected, _) = self.invite_bins[b];
                        if n == 0 {
                            f64::NAN
                        } else {
                            f64::from(n - rejected) / f64::from(n)
                        }
                    },
                    invite_queueing_ms: {
                        let (n, _, waited) = self.invite_bins[b];
                        if n == 0 {
                            f64::NAN
                        } else {
                            waited as f64 / f64::from(n) / 1.0e6
                        }
                    },
                })
                .collect();
            r.timeseries = Some(TimeSeries { points });
        }
        if !self.trace_invites.is_empty() {
            let bin_s = TRACE_BIN_NS as f64 / NS as f64;
            r.control_trace = Some(ControlTrace {
                bin_s,
                cpu: self
                    .trace_busy
                    .bins
                    .iter()
                    .map(|&b| b / TRACE_BIN_NS as f64)
                    .collect(),
                invite_rate_cps: self
                    .trace_invites
                    .iter()
                    .map(|&n| f64::from(n) / bin_s)
                    .collect(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unanswered admitted calls, and those checked, in a run ending at `end_ms`.
    fn unanswered_at(ledger: &Ledger, end_ms: u64) -> (u64, u64) {
        let mut l = ledger.clone();
        let mut r = RunReport::default();
        l.finish(Time::from_millis(end_ms), 1.0, &["UA1".to_string()], &mut r);
        (r.admitted_unanswered, r.admitted_checked)
    }

    #[test]
    fn an_admitted_call_is_held_to_its_answer_from_its_latest_provisional_at_the_caller() {
        let within_ms = 213_000;
        let mut l = Ledger::new(
            1,
            (Time::ZERO, Time::from_secs(600)),
            10_000_000_000,
            within_ms * 1_000_000,
            false,
            false,
            false,
        );
        // Admitted at 1 s, ringing again at 40 s (which resets Timer C), never answered.
        let ringing = l.new_call(Time::ZERO, 0, 0);
        l.provisional(Time::from_secs(1), ringing);
        l.provisional(Time::from_secs(40), ringing);
        // Admitted at 2 s and answered.
        let answered = l.new_call(Time::ZERO, 0, 0);
        l.provisional(Time::from_secs(2), answered);
        l.mark(answered, flag::FINAL_AT_CALLER);
        // Never admitted: not the proxies' to answer.
        l.new_call(Time::ZERO, 0, 0);
        assert_eq!(unanswered_at(&l, 2_000 + within_ms - 1), (0, 0));
        assert_eq!(unanswered_at(&l, 2_000 + within_ms), (0, 1));
        assert_eq!(unanswered_at(&l, 40_000 + within_ms - 1), (0, 1));
        assert_eq!(unanswered_at(&l, 40_000 + within_ms), (1, 2));
    }
}
