//! What one point of a live sweep measured, and the numbers computed over points.

use serde::Serialize;
use sluice_load::SecondRow;

/// What one point measured. The first fields are `sluice sim`'s summary columns.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub experiment: String,
    pub variant: String,
    /// Who placed the calls: `sluice` or `sipp`.
    pub caller: &'static str,
    /// The seconds (rows) counted.
    #[serde(skip)]
    pub window: std::ops::RangeInclusive<u64>,
    pub algorithm: String,
    pub x: f64,
    /// Offered calls/s over the window / capacity.
    pub offered_load_measured: f64,
    pub capacity_cps: f64,
    pub goodput: f64,
    pub goodput_cps: f64,
    /// Normalised goodput by Shen et al.'s rule, as far as the caller sees it: of the
    /// calls set up within 10 s, those whose 180 reached the caller (the simulator's
    /// goodput needs all five setup messages, and nobody retransmits a 180). `None` where
    /// the caller does not report it (SIPp).
    pub goodput_with_180: Option<f64>,
    /// Normalised goodput by Shen et al.'s rule whole: of the calls started in the
    /// window, those whose 180 and 200 reached the caller and whose ACK reached the UAS
    /// within 10 s of the INVITE, the callers' records joined with the UAS's by Call-ID.
    /// Where ACKs wait in queues or are dropped on the way (SIP over TCP without control),
    /// this is lower than the caller's count, which cannot see the ACK arrive. `None`
    /// where the UAS's ACKs are not recorded.
    pub goodput_at_uas: Option<f64>,
    /// Retransmissions the UAC and UAS sent / all messages they sent (what reached the
    /// proxy), over the window.
    pub retrans_ratio: f64,
    pub setup_delay_p50_ms: Option<f64>,
    pub setup_delay_p99_ms: Option<f64>,
    /// sluice: the emulated processor's busy fraction; a command: its processes' CPU
    /// time over the wall time.
    pub occupancy: Option<f64>,
    /// INVITEs answered 503 / calls offered, over the window.
    pub reject_ratio: f64,
    pub calls_offered: u64,
    pub calls_good: u64,
    /// Arrivals the proxy dropped at a full queue (sluice only).
    pub proxy_dropped: Option<u64>,
    pub uac_retransmissions_sent: u64,
    pub uac_retransmissions_received: u64,
    /// 2xx retransmissions the UAS sent (a 2xx not ACKed in time).
    pub uas_2xx_retransmissions: u64,
    /// sluice: calls forwarded and rejected, and the CPU time of the proxy's thread.
    pub forwarded_calls: Option<u64>,
    pub rejected_calls: Option<u64>,
    pub proxy_cpu_s: Option<f64>,
    /// sluice's UAC: calls whose INVITE was admitted (a provisional came back) that had no
    /// final response when the caller stopped waiting. A proxy must answer every INVITE it
    /// admits, at the latest when its Timer C runs out, so anything but 0 is reported.
    pub admitted_unanswered: Option<u64>,
    #[serde(skip)]
    pub rows: Vec<SecondRow>,
    /// Topology runs: each source's own rows (`rows` is their sum per second).
    #[serde(skip)]
    pub per_source: Vec<(String, Vec<SecondRow>)>,
}

/// Seconds of a point: arrivals, the uncounted start, and the hold between ACK and BYE.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub duration: f64,
    pub warmup: f64,
    pub hold: f64,
}

/// What the calling side measured in one run (SIPp here, or `sluice load uac` converted),
/// in the units of `sluice load uac`'s summary.
#[derive(Debug, Default)]
pub struct CallerRun {
    pub rows: Vec<SecondRow>,
    /// Seconds from SIPp's start to its last statistics row.
    pub duration_s: f64,
    /// Messages SIPp sent (first sends and retransmissions).
    pub messages_sent: u64,
    pub retransmissions_sent: u64,
    /// Retransmissions SIPp received (of messages it waits for).
    pub retransmissions_received: u64,
    pub setup_p50_ms: Option<f64>,
    pub setup_p99_ms: Option<f64>,
    /// See [`PointResult::admitted_unanswered`]; `None` where the caller cannot tell (SIPp).
    pub admitted_unanswered: Option<u64>,
}

/// Setup delay in milliseconds for the printed tables (`-`: none measured).
pub fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The larger of two optional values; either alone if only one is there.
pub fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// sluice's native `β`: the proxy thread's CPU time per forwarded and per rejected call by
/// least squares over the points (`cpu = a·forwarded + b·rejected`), `β = a/b`. `None` without
/// enough rejected calls to tell the two apart.
pub fn native_beta(points: &[PointResult]) -> Option<(f64, f64, f64)> {
    let (mut ff, mut fj, mut jj, mut fy, mut jy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let (Some(f), Some(j), Some(y)) = (p.forwarded_calls, p.rejected_calls, p.proxy_cpu_s)
        else {
            continue;
        };
        let (f, j) = (f as f64, j as f64);
        ff += f * f;
        fj += f * j;
        jj += j * j;
        fy += f * y;
        jy += j * y;
    }
    let det = ff * jj - fj * fj;
    if det <= 1e-9 * ff * jj || jj == 0.0 {
        return None;
    }
    let a = (fy * jj - jy * fj) / det;
    let b = (jy * ff - fy * fj) / det;
    (a > 0.0 && b > 0.0).then(|| (a * 1e6, b * 1e6, a / b))
}

/// Says so when a point broke the rule that every INVITE a proxy admits gets a final
/// response (see [`PointResult::admitted_unanswered`]).
pub fn note_unanswered(p: &PointResult, console: &dyn crate::console::Console) {
    if let Some(n) = p.admitted_unanswered.filter(|&n| n > 0) {
        crate::console::note!(
            console,
            "{} at {}: {n} admitted INVITEs had no final response when the caller stopped waiting",
            p.variant,
            p.x
        );
    }
}
