//! Fuzzy window control, Montazerolghaem & Yaghmaee, "An Overload Window Control Method
//! Based on Fuzzy Logic to Improve SIP Performance" (IJICTR 6(4), 2014), §V.
//!
//! The SE keeps a window `W_max` of INVITEs in transit to its RE and sets it with a
//! Mamdani fuzzy controller whose inputs are the RE's average CPU and memory occupancy
//! (`I_cpu`, `I_mem`, both in `[0, 1]`) and whose output is the relative change `ΔW`:
//!
//! 1. `W_max = W_init`
//! 2. `ΔW` from the controller
//! 3. `W_max(t+1) = W_max(t) + ΔW · W_max(t)`
//!
//! The inference is the paper's (§V.A–C): each input has the terms Low, Medium and High,
//! the output six (FastDEC, DEC, SlowDEC, NoCHange, SlowINC, INC) on `[−0.6, 0.4]`, the
//! nine rules of Table I combine their premises with AND = min, each rule clips its
//! consequent at its strength, the clipped sets are joined with max, and the centroid of
//! the union is `ΔW`.
//!
//! The paper draws the membership functions (Figs. 18–20) without giving their numbers.
//! The ones here are piecewise linear, chosen from what the rules say about the server:
//! CPU is Medium over the whole working range (0.5–0.95) and High only as it saturates
//! (fully at 1.0), so that a server below capacity with little in its queue gets
//! SlowINC, and one at capacity SlowDEC; memory is Low while it holds little (to 0.1),
//! Medium around 0.3, and High from 0.65, the one breakpoint fitted to the paper's
//! worked example (inputs 0.5 and 0.5 give `ΔW = −0.218`, §V.C, Fig. 21; here −0.219).
//! The output terms are triangles centred every 0.2 from −0.6 to 0.4, each 0.2 wide at
//! half height, as a six-term partition of the paper's range.
//!
//! Inference of this size (two inputs, nine rules, one output, about 40 lines) is written
//! here. Of the Rust crates that offer Mamdani inference, `rust-fuzzylogic` (0.2) calls
//! itself work in progress with stub modules, `fuzzy-expert` (0.1) and `rsfuzzy` (0.1.3,
//! on `log` 0.3) are single early releases, and `fuzzy_logic_engine_rs` (0.9) is
//! undocumented; none is a dependency worth its weight here.
//!
//! Not in the paper, and why:
//! - The window has a floor (`min_window`, one INVITE) and a ceiling (`max_window`): a
//!   window of zero never sends the INVITE whose responses would reopen it, and an
//!   unbounded one grows without limit while the server is idle. The floor is also the
//!   algorithm's limit: every SE keeps at least one INVITE in transit, so an RE that
//!   cannot serve one call per SE within a retransmission interval (ten SEs in front of an
//!   RE of 23 calls/s, say) is overrun whatever it reports.
//! - The window grows only while it is in use: an increase never takes it beyond twice
//!   the most INVITEs it had in transit since the last step (as TCP's congestion window
//!   validation, RFC 7661). Otherwise a quiet hour leaves a window that takes many
//!   steps to come down when overload arrives.
//! - One step per `update_interval` at most, with the latest report: the RE measures over
//!   its interval and every response repeats the same report until the next.

use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

/// A membership function: 0 up to `a`, rising to 1 at `b`, 1 up to `c`, falling to 0 at
/// `d`. `a == b` (or `c == d`) makes a vertical edge, so a shoulder at the edge of the
/// universe is `[lo, lo, c, d]` or `[a, b, hi, hi]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trapezoid(pub [f64; 4]);

impl Trapezoid {
    /// A triangle peaking at `b`.
    pub const fn triangle(a: f64, b: f64, c: f64) -> Self {
        Trapezoid([a, b, b, c])
    }

    pub fn membership(&self, value: f64) -> f64 {
        let [a, b, c, d] = self.0;
        if value < a || value > d {
            0.0
        } else if value < b {
            (value - a) / (b - a)
        } else if value <= c {
            1.0
        } else {
            (d - value) / (d - c)
        }
    }
}

/// The input terms, Low, Medium, High.
pub type InputTerms = [Trapezoid; 3];

/// `I_cpu`: Low to 0.2, gone at 0.5; Medium from 0.5 to 0.95; High from 0.95, fully at 1.
pub const CPU_TERMS: InputTerms = [
    Trapezoid([0.0, 0.0, 0.2, 0.5]),
    Trapezoid([0.2, 0.5, 0.95, 1.0]),
    Trapezoid([0.95, 1.0, 1.0, 1.0]),
];

/// `I_mem`: Low to 0.1, Medium peaking at 0.3, High from 0.65.
pub const MEMORY_TERMS: InputTerms = [
    Trapezoid([0.0, 0.0, 0.1, 0.3]),
    Trapezoid::triangle(0.1, 0.3, 0.65),
    Trapezoid([0.3, 0.65, 1.0, 1.0]),
];

/// The output terms, in the order of [`Change`].
pub const CHANGE_TERMS: [Trapezoid; 6] = [
    Trapezoid::triangle(-0.8, -0.6, -0.4),
    Trapezoid::triangle(-0.6, -0.4, -0.2),
    Trapezoid::triangle(-0.4, -0.2, 0.0),
    Trapezoid::triangle(-0.2, 0.0, 0.2),
    Trapezoid::triangle(0.0, 0.2, 0.4),
    Trapezoid::triangle(0.2, 0.4, 0.6),
];

/// `ΔW`'s range (§V: "the best range of changes for ΔW was [−0.6, 0.4]").
pub const CHANGE_RANGE: (f64, f64) = (-0.6, 0.4);

/// The output terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    FastDec = 0,
    Dec = 1,
    SlowDec = 2,
    NoChange = 3,
    SlowInc = 4,
    Inc = 5,
}

/// Table I: the consequent for CPU term `[i]` and memory term `[j]` (Low, Medium, High).
pub const RULES: [[Change; 3]; 3] = [
    // CPU Low
    [Change::Inc, Change::SlowInc, Change::SlowDec],
    // CPU Medium
    [Change::SlowInc, Change::NoChange, Change::Dec],
    // CPU High
    [Change::SlowDec, Change::Dec, Change::FastDec],
];

/// Points of the output universe the centroid is taken over (a step of 0.001).
const CENTROID_POINTS: usize = 1001;

/// Each output term's strength for inputs `cpu` and `memory` (clamped to `[0, 1]`): the
/// max over the rules concluding it of min(premises).
pub fn rule_strengths(cpu: f64, memory: f64) -> [f64; 6] {
    let clamp = |x: f64| if x.is_nan() { 1.0 } else { x.clamp(0.0, 1.0) };
    let (cpu, memory) = (clamp(cpu), clamp(memory));
    let mut strength = [0.0f64; 6];
    for (i, cpu_term) in CPU_TERMS.iter().enumerate() {
        for (j, memory_term) in MEMORY_TERMS.iter().enumerate() {
            let w = cpu_term.membership(cpu).min(memory_term.membership(memory));
            let out = &mut strength[RULES[i][j] as usize];
            *out = out.max(w);
        }
    }
    strength
}

/// `ΔW` for the given strengths of the output terms: the centroid of the union of the
/// terms clipped at their strengths, over [`CHANGE_RANGE`]. No strength: 0.
pub fn centroid(strength: &[f64; 6]) -> f64 {
    let (lo, hi) = CHANGE_RANGE;
    let step = (hi - lo) / (CENTROID_POINTS - 1) as f64;
    let (mut moment, mut area) = (0.0, 0.0);
    for k in 0..CENTROID_POINTS {
        let y = lo + step * k as f64;
        let mu = CHANGE_TERMS
            .iter()
            .zip(strength)
            .map(|(term, w)| term.membership(y).min(*w))
            .fold(0.0, f64::max);
        moment += y * mu;
        area += mu;
    }
    if area > 0.0 {
        (moment / area).clamp(lo, hi)
    } else {
        0.0
    }
}

/// The controller: `ΔW` for the RE's CPU and memory occupancy. A NaN input is read as
/// fully occupied.
pub fn window_change(cpu: f64, memory: f64) -> f64 {
    centroid(&rule_strengths(cpu, memory))
}

/// The SE's window settings; durations in files are milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FuzzyWindowConfig {
    /// `W_init`, INVITEs in transit, when the first report arrives. The paper gives none;
    /// ours: 10.
    pub initial_window: f64,
    /// The floor: at least this many INVITEs may be in transit. Ours: 1.
    pub min_window: f64,
    /// The ceiling. Ours: 10,000.
    pub max_window: f64,
    /// One window step per this interval at most. Ours: 200 ms, the control interval of
    /// the win-disc the paper compares with.
    #[serde(rename = "update_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub update_interval: Duration,
}

impl Default for FuzzyWindowConfig {
    fn default() -> Self {
        Self {
            initial_window: 10.0,
            min_window: 1.0,
            max_window: 10_000.0,
            update_interval: Duration::from_millis(200),
        }
    }
}

/// One SE's window towards one RE. The driver counts the INVITEs in transit (sent, no
/// response yet) and asks [`FuzzyWindow::allows`] before sending another.
#[derive(Clone, Debug)]
pub struct FuzzyWindow {
    window: f64,
    min: f64,
    max: f64,
    interval: Duration,
    last_step: Option<Time>,
    /// The most INVITEs in transit since the last step.
    peak_in_transit: u64,
    steps: u64,
}

impl FuzzyWindow {
    /// Bad numbers fall back to the defaults; the ceiling is raised to the floor.
    pub fn new(config: &FuzzyWindowConfig) -> Self {
        let sane = |x: f64, default: f64| {
            if x.is_finite() && x >= 1.0 {
                x
            } else {
                default
            }
        };
        let defaults = FuzzyWindowConfig::default();
        let min = sane(config.min_window, defaults.min_window);
        let max = sane(config.max_window, defaults.max_window).max(min);
        Self {
            window: sane(config.initial_window, defaults.initial_window).clamp(min, max),
            min,
            max,
            interval: config.update_interval,
            last_step: None,
            peak_in_transit: 0,
            steps: 0,
        }
    }

    /// `W_max`.
    pub fn window(&self) -> f64 {
        self.window
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Whether one more INVITE may go with `in_transit` already on their way.
    pub fn allows(&mut self, in_transit: u64) -> bool {
        self.peak_in_transit = self.peak_in_transit.max(in_transit);
        (in_transit as f64) + 1.0 <= self.window.floor()
    }

    /// A report of the RE's occupancy; steps the window if an interval has passed since
    /// the last step (the first report steps at once). Returns whether it stepped.
    pub fn on_report(&mut self, now: Time, cpu: f64, memory: f64, in_transit: u64) -> bool {
        if self
            .last_step
            .is_some_and(|at| now.saturating_since(at) < self.interval)
        {
            return false;
        }
        self.last_step = Some(now);
        let peak = self.peak_in_transit.max(in_transit) as f64;
        self.peak_in_transit = in_transit;
        let change = window_change(cpu, memory);
        let mut next = self.window + change * self.window;
        if change > 0.0 {
            next = next.min(self.window.max(2.0 * peak));
        }
        self.window = next.clamp(self.min, self.max);
        self.steps += 1;
        true
    }
}

#[cfg(test)]
// Memberships of 0 and 1, clamped windows and clamped inputs are exact, not computed.
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn the_papers_worked_example() {
        // §V.C, Fig. 21: I_cpu = 0.5 and I_mem = 0.5 give ΔW = −0.218.
        let dw = window_change(0.5, 0.5);
        assert!(close(dw, -0.218, 0.005), "ΔW(0.5, 0.5) = {dw}");
    }

    /// Inputs where one premise pair is fully true and every other rule is silent.
    const ALONE: [[(f64, f64); 3]; 3] = [
        [(0.1, 0.05), (0.1, 0.3), (0.1, 0.9)],
        [(0.7, 0.05), (0.7, 0.3), (0.7, 0.9)],
        [(1.0, 0.05), (1.0, 0.3), (1.0, 0.9)],
    ];

    #[test]
    fn each_rule_fires_on_its_own() {
        for (i, row) in ALONE.iter().enumerate() {
            for (j, &(cpu, memory)) in row.iter().enumerate() {
                let s = rule_strengths(cpu, memory);
                let rule = RULES[i][j] as usize;
                for (k, w) in s.iter().enumerate() {
                    let expected = if k == rule { 1.0 } else { 0.0 };
                    assert_eq!(*w, expected, "rule ({i},{j}) at ({cpu},{memory}): {s:?}");
                }
                // The centroid of the lone consequent: its peak, or for the edge terms,
                // clipped by the range, a third of the way in.
                let dw = window_change(cpu, memory);
                let want = match RULES[i][j] {
                    Change::FastDec => -0.6 + 0.2 / 3.0,
                    Change::Dec => -0.4,
                    Change::SlowDec => -0.2,
                    Change::NoChange => 0.0,
                    Change::SlowInc => 0.2,
                    Change::Inc => 0.4 - 0.2 / 3.0,
                };
                assert!(
                    close(dw, want, 1e-3),
                    "rule ({i},{j}): ΔW {dw}, want {want}"
                );
            }
        }
    }

    #[test]
    fn output_stays_in_range_and_falls_with_load() {
        let mut previous_row: Option<Vec<f64>> = None;
        for a in 0..=20 {
            let cpu = f64::from(a) / 20.0;
            let row: Vec<f64> = (0..=20)
                .map(|b| window_change(cpu, f64::from(b) / 20.0))
                .collect();
            for dw in &row {
                assert!((-0.6..=0.4).contains(dw), "ΔW {dw} out of range");
            }
            // More memory in use never asks for a larger window (Fig. 22's surface).
            for w in row.windows(2) {
                assert!(w[1] <= w[0] + 1e-9, "cpu {cpu}: {row:?}");
            }
            if let Some(prev) = &previous_row {
                for (p, r) in prev.iter().zip(&row) {
                    assert!(*r <= p + 1e-9, "cpu {cpu}: {r} above {p}");
                }
            }
            previous_row = Some(row);
        }
        // Out-of-range and NaN inputs are clamped (NaN reads as full).
        assert_eq!(window_change(-3.0, 7.0), window_change(0.0, 1.0));
        assert_eq!(window_change(f64::NAN, f64::NAN), window_change(1.0, 1.0));
    }

    #[test]
    fn a_server_below_capacity_gets_a_larger_window_and_a_saturated_one_a_smaller() {
        for cpu in [0.3, 0.6, 0.8, 0.9, 0.95] {
            assert!(window_change(cpu, 0.0) > 0.0, "cpu {cpu}");
        }
        for memory in [0.0, 0.3, 0.6, 1.0] {
            assert!(window_change(1.0, memory) < -0.15, "memory {memory}");
        }
    }

    #[test]
    fn window_update_floor_ceiling_and_interval() {
        let config = FuzzyWindowConfig::default();
        let mut w = FuzzyWindow::new(&config);
        assert_eq!(w.window(), 10.0);
        // Saturated and full: FastDEC, −0.533 a step, down to the floor of 1.
        let mut now = Time::ZERO;
        assert!(w.on_report(now, 1.0, 1.0, 0));
        assert!(close(w.window(), 10.0 * (1.0 - 0.6 + 0.2 / 3.0), 1e-2));
        // A second report within the interval does not step.
        assert!(!w.on_report(now + Duration::from_millis(100), 1.0, 1.0, 0));
        for _ in 0..20 {
            now += config.update_interval;
            w.on_report(now, 1.0, 1.0, 0);
        }
        assert_eq!(w.window(), 1.0);
        assert!(w.allows(0));
        assert!(!w.allows(1));
        // Idle but in use: INC, +0.333 a step, up to twice what is in transit, and never
        // past the ceiling.
        for _ in 0..10 {
            now += config.update_interval;
            let in_transit = w.window().floor() as u64;
            w.on_report(now, 0.0, 0.0, in_transit);
        }
        assert!(w.window() > 10.0, "grew to {}", w.window());
        // Not in use for a whole interval: it does not grow.
        now += config.update_interval;
        w.on_report(now, 0.0, 0.0, 0);
        let before = w.window();
        now += config.update_interval;
        w.on_report(now, 0.0, 0.0, 0);
        assert_eq!(w.window(), before);
        let mut capped = FuzzyWindow::new(&FuzzyWindowConfig {
            max_window: 12.0,
            ..config.clone()
        });
        for _ in 0..10 {
            now += config.update_interval;
            capped.on_report(now, 0.0, 0.0, 1000);
        }
        assert_eq!(capped.window(), 12.0);
    }
}
