//! Dynamic load in the live topology: Shen et al.'s §6.2 pattern (sources joining and
//! leaving on a schedule, `experiments/shen2008-fig24-26.toml`, `-fig27-31`, `-fig32-37`)
//! on real sockets, each UAC following its source's schedule through its own SE.
//!
//! ```text
//! sluice bench overload --experiment experiments/shen2008-fig27-31.toml --time-scale 0.25
//! ```
//!
//! `--time-scale` compresses the schedule's times (0.25: the 1600 s pattern in 400 s, as the
//! simulator's seeded claims do); SIP's timers are not scaled. Each phase between two
//! schedule changes is measured after its first fifth (the algorithms settle), as each
//! source's goodput normalised by the RE's capacity, against what the fairness policy
//! promises when the sources together overload the RE: a split in proportion to offered
//! load with double feed (user-centric), max-min fair shares otherwise (provider-centric:
//! an equal split, where a source offering less than its equal share keeps what it offers).
//!
//! Measured (`shen2008-fig27-31` at 0.25, 300 calls/s, two runs): in the
//! three-source phase every double-feed variant was within 0.04 of the proportional shares
//! 0.10/0.30/0.60 (rate-abs and win-cont within 0.005), and within 0.04 of the simulator on
//! the same schedule.

use std::path::Path;

use sluice_control::Fairness;
use sluice_load::Schedule;
use sluice_report::files::{file_stem, write, CsvTable};
use sluice_report::plot::{line_chart, Axes, Series};
use sluice_sim::experiment::Experiment;
use sluice_sim::{RunReport, Scenario};

use crate::console::{say, Console};
use crate::parallel::simulate_in_order;
use crate::point::PointResult;

/// Which share of the phase is left for the algorithms to settle before it is measured.
const SETTLE_FRACTION: f64 = 0.2;

/// How far a source's share may be from the fairness policy's (the live criterion).
pub const SHARE_TOLERANCE: f64 = 0.07;

/// Plots are smoothed over this many seconds (the CSVs keep the raw seconds).
const SMOOTHING_S: usize = 5;

/// A dynamic experiment's load pattern on the live clock.
#[derive(Clone, Debug)]
pub struct Dynamic {
    /// Seconds of arrivals per variant: the experiment's duration times the time scale.
    pub duration: f64,
    /// Per source: its name and `(seconds, load)` steps, load in multiples of the RE's
    /// capacity.
    pub sources: Vec<(String, Vec<(f64, f64)>)>,
}

/// A stretch of time over which every source's load is constant.
#[derive(Clone, Debug)]
pub struct Phase {
    pub from: f64,
    pub to: f64,
    pub loads: Vec<f64>,
}

impl Dynamic {
    /// The experiment's sources and schedules, times multiplied by `scale`.
    pub fn from_experiment(e: &Experiment, scale: f64) -> Result<Dynamic, String> {
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(format!("--time-scale must be > 0, not {scale}"));
        }
        let first = e
            .points
            .first()
            .ok_or_else(|| format!("{}: no variants", e.name))?;
        let sc = &first.scenario;
        let sources = sc
            .sources
            .iter()
            .map(|s| {
                if s.schedule.is_empty() {
                    return Err(format!(
                        "{}: source {} has no schedule (a dynamic experiment needs one per source)",
                        e.name, s.name
                    ));
                }
                let steps = s
                    .schedule
                    .iter()
                    .map(|st| (st.at_s * scale, st.load))
                    .collect();
                Ok((s.name.clone(), steps))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Dynamic {
            duration: sc.duration_s * scale,
            sources,
        })
    }

    /// Source `i`'s schedule in calls/s for an RE of `capacity` calls/s.
    pub fn schedule(&self, i: usize, capacity: f64) -> Result<Schedule, String> {
        let steps: Vec<(f64, f64)> = self.sources[i]
            .1
            .iter()
            .map(|&(at, load)| (at, load * capacity))
            .collect();
        Schedule::from_pairs(&steps)
    }

    /// The highest total load at any time (to 3 decimals), for the summary's x column.
    pub fn peak_load(&self) -> f64 {
        let peak = self
            .phases()
            .iter()
            .map(|p| p.loads.iter().sum::<f64>())
            .fold(0.0, f64::max);
        (peak * 1000.0).round() / 1000.0
    }

    /// The stretches between schedule changes, in order, up to `duration`.
    pub fn phases(&self) -> Vec<Phase> {
        let mut cuts: Vec<f64> = self
            .sources
            .iter()
            .flat_map(|(_, s)| s.iter().map(|st| st.0))
            .filter(|&t| t > 0.0 && t < self.duration)
            .collect();
        cuts.push(0.0);
        cuts.push(self.duration);
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        cuts.windows(2)
            .map(|w| Phase {
                from: w[0],
                to: w[1],
                loads: self
                    .sources
                    .iter()
                    .map(|(_, s)| {
                        s.iter()
                            .take_while(|st| st.0 <= w[0])
                            .last()
                            .map_or(0.0, |st| st.1)
                    })
                    .collect(),
            })
            .collect()
    }
}

/// The shares of capacity `fairness` promises to sources offering `loads` (multiples of
/// capacity): what they offer when it fits, otherwise a proportional split (user-centric)
/// or max-min fair shares (provider-centric).
pub fn promised_shares(loads: &[f64], fairness: Fairness) -> Vec<f64> {
    let total: f64 = loads.iter().sum();
    if total <= 1.0 {
        return loads.to_vec();
    }
    match fairness {
        Fairness::UserCentric => loads.iter().map(|l| l / total).collect(),
        Fairness::ProviderCentric | Fairness::MaxMin => {
            // Water-filling: sources below the equal share of what is left keep their load.
            let mut shares = vec![0.0; loads.len()];
            let mut open: Vec<usize> = (0..loads.len()).filter(|&i| loads[i] > 0.0).collect();
            let mut left = 1.0;
            while !open.is_empty() {
                let fair = left / open.len() as f64;
                let (small, big): (Vec<usize>, Vec<usize>) =
                    open.iter().partition(|&&i| loads[i] <= fair);
                if small.is_empty() {
                    for i in big {
                        shares[i] = fair;
                    }
                    break;
                }
                for i in small {
                    shares[i] = loads[i];
                    left -= loads[i];
                }
                open = big;
            }
            shares
        }
    }
}

/// `0.101/0.299/0.600`: one value per source.
fn per_source(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.3}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// Jain's fairness index of `x` (1: all equal).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q > 0.0 {
        s * s / (x.len() as f64 * q)
    } else {
        1.0
    }
}

/// One phase of one variant, measured.
#[derive(Clone, Debug)]
pub struct PhaseResult {
    pub phase: Phase,
    /// The seconds measured: after the settling fifth, to the phase's end.
    pub from: f64,
    pub to: f64,
    pub got: Vec<f64>,
    pub want: Vec<f64>,
}

impl PhaseResult {
    pub fn overloaded(&self) -> bool {
        self.phase.loads.iter().sum::<f64>() > 1.0
    }
    pub fn max_diff(&self) -> f64 {
        self.got
            .iter()
            .zip(&self.want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0, f64::max)
    }
    pub fn total(&self) -> f64 {
        self.got.iter().sum()
    }
    /// Jain's index over the sources offering load in this phase.
    pub fn jain_active(&self) -> f64 {
        let active: Vec<f64> = self
            .got
            .iter()
            .zip(&self.phase.loads)
            .filter(|(_, l)| **l > 0.0)
            .map(|(g, _)| *g)
            .collect();
        jain(&active)
    }
}

/// Each source's goodput per phase, from its per-second rows (second `s` covers
/// `(s - 1, s]`).
pub fn analyse(d: &Dynamic, p: &PointResult, fairness: Fairness) -> Vec<PhaseResult> {
    let capacity = p.capacity_cps.max(1e-9);
    d.phases()
        .into_iter()
        .map(|phase| {
            let from = phase.from + SETTLE_FRACTION * (phase.to - phase.from);
            let to = phase.to;
            // Whole seconds s with (s - 1, s] inside [from, to].
            let first = from.ceil() as u64 + 1;
            let last = to.floor() as u64;
            let secs = (last + 1).saturating_sub(first).max(1) as f64;
            let got = (0..d.sources.len())
                .map(|i| {
                    p.per_source.get(i).map_or(0.0, |(_, rows)| {
                        rows.iter()
                            .filter(|r| (first..=last).contains(&r.second))
                            .map(|r| r.counts.successful as f64)
                            .sum::<f64>()
                            / secs
                            / capacity
                    })
                    // f64's empty sum is -0.0; printed as "-0.000" it reads as a deficit.
                    + 0.0
                })
                .collect();
            let want = promised_shares(&phase.loads, fairness);
            PhaseResult {
                phase,
                from,
                to,
                got,
                want,
            }
        })
        .collect()
}

/// Prints each variant's phases, writes `phases.csv` and one goodput-over-time SVG per
/// variant into `out`; returns how many overloaded phases missed the share tolerance.
pub fn report(
    out: &Path,
    name: &str,
    d: &Dynamic,
    variants: &[(&PointResult, Fairness)],
    console: &dyn Console,
) -> Result<usize, String> {
    let names: Vec<&str> = d.sources.iter().map(|(n, _)| n.as_str()).collect();
    let mut csv = CsvTable::new([
        "variant", "fairness", "from_s", "to_s", "source", "load", "share", "promised", "diff",
    ]);
    let mut missed = 0;
    for (p, fairness) in variants {
        let fairness_name = match fairness {
            Fairness::UserCentric => "user-centric",
            Fairness::ProviderCentric => "provider-centric",
            Fairness::MaxMin => "max-min",
        };
        say!(console, "\n{} ({fairness_name}): goodput share of the RE's capacity per source, each phase after its first fifth", p.variant);
        say!(
            console,
            "{:>13} {:>22} {:>24} {:>24} {:>6} {:>6} {:>8} {:>5}",
            "seconds",
            "loads",
            "shares",
            "promised",
            "total",
            "Jain",
            "max diff",
            "ok"
        );
        for r in analyse(d, p, *fairness) {
            let ok = !r.overloaded() || r.max_diff() <= SHARE_TOLERANCE;
            missed += usize::from(!ok);
            say!(
                console,
                "{:>6.0}-{:<6.0} {:>22} {:>24} {:>24} {:>6.3} {:>6.3} {:>8.3} {:>5}",
                r.from,
                r.to,
                per_source(&r.phase.loads),
                per_source(&r.got),
                per_source(&r.want),
                r.total(),
                r.jain_active(),
                r.max_diff(),
                if !r.overloaded() {
                    "-"
                } else if ok {
                    "pass"
                } else {
                    "FAIL"
                }
            );
            for (i, source) in names.iter().enumerate() {
                csv.row([
                    p.variant.clone(),
                    fairness_name.to_owned(),
                    format!("{:.1}", r.from),
                    format!("{:.1}", r.to),
                    source.to_string(),
                    format!("{:.3}", r.phase.loads[i]),
                    format!("{:.4}", r.got[i]),
                    format!("{:.4}", r.want[i]),
                    format!("{:.4}", r.got[i] - r.want[i]),
                ]);
            }
        }
        plot_variant(out, name, p)?;
    }
    write(&out.join("phases.csv"), &csv.into_text())?;
    Ok(missed)
}

/// The file [`report`] draws a variant's goodput over time in.
pub fn plot_name(name: &str, variant: &str) -> String {
    format!("{}-{}.svg", file_stem(name), file_stem(variant))
}

/// Per-source and total goodput over time, smoothed, as the paper's figures 24-37.
fn plot_variant(out: &Path, name: &str, p: &PointResult) -> Result<(), String> {
    let capacity = p.capacity_cps.max(1e-9);
    let end = p
        .per_source
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| r.second))
        .max()
        .unwrap_or(0);
    let per_second: Vec<Vec<f64>> = p
        .per_source
        .iter()
        .map(|(_, rows)| {
            let mut v = vec![0.0; end as usize + 1];
            for r in rows {
                v[r.second as usize] += r.counts.successful as f64 / capacity;
            }
            v
        })
        .collect();
    let smooth = |v: &[f64]| -> Vec<(f64, f64)> {
        let half = SMOOTHING_S / 2;
        (1..v.len())
            .map(|i| {
                let lo = i.saturating_sub(half).max(1);
                let hi = (i + half + 1).min(v.len());
                (i as f64, v[lo..hi].iter().sum::<f64>() / (hi - lo) as f64)
            })
            .collect()
    };
    let mut series: Vec<Series> = p
        .per_source
        .iter()
        .zip(&per_second)
        .map(|((source, _), v)| Series {
            label: source.clone(),
            points: smooth(v),
        })
        .collect();
    let total: Vec<f64> = (0..=end as usize)
        .map(|s| per_second.iter().map(|v| v[s]).sum())
        .collect();
    series.push(Series {
        label: "total".into(),
        points: smooth(&total),
    });
    line_chart(
        &out.join(plot_name(name, &p.variant)),
        &Axes {
            title: &format!("{} (live, {SMOOTHING_S} s moving average)", p.variant),
            x_label: "Time (s)",
            y_label: "Goodput (normalised to capacity)",
            y_max: 1.2,
        },
        &series,
        None,
    )
}

/// Runs each variant's scenario through the simulator on the same compressed schedule and
/// prints its per-phase shares next to the live ones; writes `phases-sim.csv`.
/// `scenarios` are the live variants' scaled scenarios, in the order of `live`.
pub fn compare_phases_with_simulator(
    out: &Path,
    d: &Dynamic,
    scale: f64,
    hold: f64,
    scenarios: &[Scenario],
    live: &[(&PointResult, Fairness)],
    console: &dyn Console,
) -> Result<(), String> {
    let runs: Vec<Scenario> = scenarios
        .iter()
        .map(|sc| {
            let mut sc = sc.clone();
            sc.duration_s = d.duration;
            sc.warmup_s = 0.0;
            sc.timeseries = true;
            // The live calls hang up after `--hold`; the simulator's holding time is
            // exponential with that mean (it must be > 0).
            sc.call.holding_time_s = hold.max(1e-3);
            for src in &mut sc.sources {
                for step in &mut src.schedule {
                    step.at_s *= scale;
                }
            }
            sc
        })
        .collect();
    say!(
        console,
        "\nsimulator: the same {} variant(s) on the same schedule...",
        runs.len()
    );
    // Each variant's comparison as soon as its simulation (and every one before it) ends.
    simulate_in_order(&runs, console, |i, r| {
        let Some((p, fairness)) = live.get(i) else {
            return;
        };
        if r.timeseries.is_none() {
            return;
        }
        say!(
            console,
            "\n{}: live and simulated shares per phase",
            p.variant
        );
        for (lr, sim) in simulated_shares(d, p, *fairness, r) {
            let diff = lr
                .got
                .iter()
                .zip(&sim)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            say!(
                console,
                "  {:>6.0}-{:<6.0} live {}  sim {}  max |diff| {diff:.3}",
                lr.from,
                lr.to,
                per_source(&lr.got),
                per_source(&sim)
            );
        }
    })
    .map(|reports| {
        let mut csv = CsvTable::new([
            "variant",
            "from_s",
            "to_s",
            "source",
            "live_share",
            "sim_share",
            "diff",
        ]);
        for ((p, fairness), r) in live.iter().zip(&reports) {
            for (lr, sim) in simulated_shares(d, p, *fairness, r) {
                for (i, (name, _)) in d.sources.iter().enumerate() {
                    csv.row([
                        p.variant.clone(),
                        format!("{:.1}", lr.from),
                        format!("{:.1}", lr.to),
                        name.clone(),
                        format!("{:.4}", lr.got[i]),
                        format!("{:.4}", sim[i]),
                        format!("{:.4}", lr.got[i] - sim[i]),
                    ]);
                }
            }
        }
        csv.into_text()
    })
    .and_then(|csv| write(&out.join("phases-sim.csv"), &csv))
}

/// Each overloaded phase of a live run with the simulated run's goodput shares over the
/// same seconds (none without a time series).
fn simulated_shares(
    d: &Dynamic,
    p: &PointResult,
    fairness: Fairness,
    r: &RunReport,
) -> Vec<(PhaseResult, Vec<f64>)> {
    let Some(ts) = &r.timeseries else {
        return Vec::new();
    };
    analyse(d, p, fairness)
        .into_iter()
        .filter(PhaseResult::overloaded)
        .map(|lr| {
            let pts: Vec<_> = ts
                .points
                .iter()
                .filter(|pt| pt.t_s >= lr.from && pt.t_s < lr.to)
                .collect();
            let n = pts.len().max(1) as f64;
            let sim: Vec<f64> = (0..d.sources.len())
                .map(|i| {
                    pts.iter()
                        .map(|pt| pt.goodput_cps.get(i).copied().unwrap_or(0.0))
                        .sum::<f64>()
                        / n
                        / r.capacity_cps.max(1e-9)
                        + 0.0
                })
                .collect();
            (lr, sim)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn double_feed_promises_shares_in_proportion_to_offered_load() {
        let got = promised_shares(&[0.57, 1.68, 3.36], Fairness::UserCentric);
        let total = 0.57 + 1.68 + 3.36;
        assert!(close(&got, &[0.57 / total, 1.68 / total, 3.36 / total]));
        // Not overloaded: everyone gets what it offers.
        assert!(close(
            &promised_shares(&[0.2, 0.5], Fairness::UserCentric),
            &[0.2, 0.5]
        ));
    }

    #[test]
    fn provider_centric_is_max_min_fair() {
        // Equal thirds when everyone offers more than a third.
        assert!(close(
            &promised_shares(&[0.57, 1.68, 3.36], Fairness::ProviderCentric),
            &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]
        ));
        // A small source keeps its load; the rest is split equally.
        assert!(close(
            &promised_shares(&[0.1, 1.68, 3.36], Fairness::ProviderCentric),
            &[0.1, 0.45, 0.45]
        ));
        // A source that is off gets nothing.
        assert!(close(
            &promised_shares(&[0.0, 1.68, 3.36], Fairness::ProviderCentric),
            &[0.0, 0.5, 0.5]
        ));
    }

    #[test]
    fn phases_follow_the_scaled_schedule() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/shen2008-fig27-31.toml"),
        )
        .unwrap();
        let e =
            Experiment::from_toml(&text, &sluice_sim::experiment::Overrides::default()).unwrap();
        let d = Dynamic::from_experiment(&e, 0.25).unwrap();
        assert!((d.duration - 400.0).abs() < 1e-9);
        let phases = d.phases();
        let bounds: Vec<(f64, f64)> = phases.iter().map(|p| (p.from, p.to)).collect();
        assert_eq!(
            bounds,
            vec![
                (0.0, 25.0),
                (25.0, 100.0),
                (100.0, 175.0),
                (175.0, 250.0),
                (250.0, 325.0),
                (325.0, 400.0)
            ]
        );
        assert!(close(&phases[3].loads, &[0.57, 1.68, 3.36]));
        assert!(close(&phases[5].loads, &[0.0, 1.68, 0.0]));
        assert!((d.peak_load() - 5.61).abs() < 1e-9);
        // UA1's schedule in calls/s at 300 calls/s: off, then 171 from 25 s, off at 325 s.
        let s = d.schedule(0, 300.0).unwrap();
        assert_eq!(s.steps.len(), 3);
        assert!((s.steps[1].rate - 171.0).abs() < 1e-9);
        assert!(Dynamic::from_experiment(&e, 0.0).is_err());
    }
}
