//! What a sampled-topology experiment shows: for every control, the share of topologies on
//! which each claim holds and the worst cases, each judged against no control on the same
//! topology (the variant whose algorithm is `none`). An experiment without that variant
//! is judged only on the claims that need no reference (`overload`, `answers-admitted`),
//! so the controls can be rerun under overload without rerunning no control at collapse.
//!
//! The claims:
//! - `no-harm`: offered less than 0.95 of capacity (less than `C_T` for a control that
//!   holds the CPU at `C_T`, the PI and OCC), goodput at least 0.98 of no control's.
//! - `no-delay`: on the same topologies, setup delay p50 at most 5 ms above no control's
//!   (where no control set up a call; where it collapsed even there it has no delay to
//!   compare with).
//! - `overload`: offered 1x or more, goodput at least 0.9 of capacity over lossless links
//!   and 0.85 over lossy ones. A local control pays for every rejection on the RE's own
//!   processor, so no local control can reach that once the rejections alone fill it: for
//!   local controls the requirement is that share of De Cicco et al.'s optimal goodput
//!   `g_opt(r)` at the run's `β` and the control's `C_T` (1 when it has none).
//! - `answers-admitted`: on every topology, every INVITE a proxy admitted got a final
//!   response at the caller (the simulator's invariant; the value is the count that did
//!   not).

use std::path::Path;

use sluice_control::optimal::optimal_goodput;
use sluice_control::Algorithm;
use sluice_sim::experiment::{Experiment, RunPoint};
use sluice_sim::RunReport;

use crate::files::{write, CsvTable};
use crate::html::ClaimRow;
use crate::plot::{line_chart, Axes, Series};

/// Below this share of capacity a control must do no harm (unless it targets less CPU).
pub const NO_HARM_BELOW: f64 = 0.95;
/// Goodput a control keeps below capacity, as a share of no control's.
pub const NO_HARM_SHARE: f64 = 0.98;
/// Setup delay p50 a control may add below capacity, milliseconds.
pub const NO_DELAY_MS: f64 = 5.0;
/// Goodput from 1x on, lossless and lossy links.
pub const OVERLOAD_LOSSLESS: f64 = 0.9;
pub const OVERLOAD_LOSSY: f64 = 0.85;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claim {
    NoHarm,
    NoDelay,
    Overload,
    AnswersAdmitted,
}

impl Claim {
    pub const ALL: [Claim; 4] = [
        Claim::NoHarm,
        Claim::NoDelay,
        Claim::Overload,
        Claim::AnswersAdmitted,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Claim::NoHarm => "no-harm",
            Claim::NoDelay => "no-delay",
            Claim::Overload => "overload",
            Claim::AnswersAdmitted => "answers-admitted",
        }
    }

    /// What the claim says, in words.
    pub fn statement(self) -> String {
        match self {
            Claim::NoHarm => format!(
                "no-harm: below {NO_HARM_BELOW}x capacity (below C_T for a control that holds the CPU at C_T), goodput at least {NO_HARM_SHARE} of no control's"
            ),
            Claim::NoDelay => format!(
                "no-delay: there, setup delay p50 at most {NO_DELAY_MS} ms above no control's"
            ),
            Claim::Overload => format!(
                "overload: from 1x, goodput at least {OVERLOAD_LOSSLESS} of capacity ({OVERLOAD_LOSSY} over lossy links); for a local control that share of g_opt(r)"
            ),
            Claim::AnswersAdmitted => {
                "answers-admitted: every INVITE a proxy admitted got a final response".to_owned()
            }
        }
    }
}

/// One claim judged on one topology.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub topology: usize,
    pub value: f64,
    pub required: f64,
    /// `value - required` for goodput claims, `required - value` for delay: below 0 fails.
    pub margin: f64,
}

impl Verdict {
    pub fn holds(&self) -> bool {
        self.margin >= -1e-9
    }
}

/// Every verdict of one variant and claim.
#[derive(Clone, Debug)]
pub struct ClaimResult {
    pub variant: String,
    pub algorithm: Algorithm,
    pub claim: Claim,
    /// Worst first.
    pub verdicts: Vec<Verdict>,
}

impl ClaimResult {
    pub fn holding(&self) -> usize {
        self.verdicts.iter().filter(|v| v.holds()).count()
    }
    pub fn share(&self) -> f64 {
        if self.verdicts.is_empty() {
            f64::NAN
        } else {
            self.holding() as f64 / self.verdicts.len() as f64
        }
    }
}

/// The CPU share a control holds the RE at, when it targets one.
fn target_cpu(p: &RunPoint) -> Option<f64> {
    let c = &p.scenario.re.control;
    match c.algorithm {
        Algorithm::Pi => Some(c.pi.target_cpu),
        Algorithm::Occ => Some(c.occ.target_cpu),
        _ => None,
    }
}

fn no_harm_limit(p: &RunPoint) -> f64 {
    target_cpu(p).map_or(NO_HARM_BELOW, |t| t.min(NO_HARM_BELOW))
}

/// Every claim for every variant but the reference. Without a variant without control,
/// the claims judged against it (no-harm, no-delay) are judged nowhere and the others
/// still are: a run of one control under overload needs no reference run.
pub fn evaluate(e: &Experiment, reports: &[RunReport]) -> Vec<ClaimResult> {
    let runs: Vec<(&RunPoint, &RunReport)> = e.points.iter().zip(reports).collect();
    let reference = runs
        .iter()
        .find(|(p, _)| p.scenario.re.control.algorithm == Algorithm::None)
        .map(|(p, _)| p.variant.clone());
    // Topologies are numbered: x is a whole number.
    let baseline = |x: f64| {
        let reference = reference.as_ref()?;
        runs.iter()
            .find(|(p, _)| &p.variant == reference && (p.x - x).abs() < 0.5)
            .map(|(_, r)| *r)
    };
    let mut out = Vec::new();
    for variant in e.variants.iter().filter(|v| Some(*v) != reference.as_ref()) {
        let mine: Vec<&(&RunPoint, &RunReport)> =
            runs.iter().filter(|(p, _)| &p.variant == variant).collect();
        let Some(algorithm) = mine.first().map(|(p, _)| p.scenario.re.control.algorithm) else {
            continue;
        };
        for claim in Claim::ALL {
            let mut verdicts = Vec::new();
            for (p, r) in &mine {
                let none = baseline(p.x);
                let topology = p.x as usize;
                let below = p.offered_load < no_harm_limit(p);
                let verdict = match claim {
                    Claim::NoHarm if below => none.map(|none| {
                        let required = NO_HARM_SHARE * none.goodput;
                        (r.goodput, required, r.goodput - required)
                    }),
                    // No control's delay is undefined where it set up no call at all.
                    Claim::NoDelay if below => {
                        none.filter(|none| none.calls_good > 0).map(|none| {
                            let required = none.setup_delay_p50_ms + NO_DELAY_MS;
                            let value = r.setup_delay_p50_ms;
                            (value, required, required - value)
                        })
                    }
                    Claim::Overload if p.offered_load >= 1.0 => {
                        let share = if p.scenario.link.loss > 0.0 {
                            OVERLOAD_LOSSY
                        } else {
                            OVERLOAD_LOSSLESS
                        };
                        let required = if algorithm.is_local() {
                            let bound = optimal_goodput(
                                p.offered_load,
                                r.beta,
                                target_cpu(p).unwrap_or(1.0),
                            );
                            share * if bound.is_finite() { bound } else { 1.0 }
                        } else {
                            share
                        };
                        Some((r.goodput, required, r.goodput - required))
                    }
                    Claim::AnswersAdmitted => {
                        let unanswered = r.admitted_unanswered as f64;
                        Some((unanswered, 0.0, -unanswered))
                    }
                    _ => None,
                };
                if let Some((value, required, margin)) = verdict {
                    verdicts.push(Verdict {
                        topology,
                        value,
                        required,
                        margin,
                    });
                }
            }
            verdicts.sort_by(|a, b| {
                a.margin
                    .total_cmp(&b.margin)
                    .then(a.topology.cmp(&b.topology))
            });
            out.push(ClaimResult {
                variant: variant.clone(),
                algorithm,
                claim,
                verdicts,
            });
        }
    }
    out
}

/// The claims as the report shows them: one row per variant and claim, holding when it
/// holds on every topology it was judged on (claims judged on none are left out).
pub fn claim_rows(results: &[ClaimResult]) -> Vec<ClaimRow> {
    results
        .iter()
        .filter_map(|c| {
            let worst = c.verdicts.first()?;
            Some(ClaimRow {
                claim: c.claim.statement(),
                subject: c.variant.clone(),
                required: format!("on all {} topologies", c.verdicts.len()),
                measured: format!(
                    "holds on {} of {}; worst: {:.4} against {:.4} (topology {})",
                    c.holding(),
                    c.verdicts.len(),
                    worst.value,
                    worst.required,
                    worst.topology
                ),
                pass: c.holding() == c.verdicts.len(),
            })
        })
        .collect()
}

/// Worst cases kept per variant and claim in `worst.csv`.
pub const WORST_KEPT: usize = 3;

/// One row per topology: what was drawn for it.
fn topologies_csv(e: &Experiment) -> String {
    let mut csv = CsvTable::new([
        "topology",
        "offered_load",
        "sources",
        "shares",
        "holding_time_s",
        "re_service_mps",
        "queue_capacity",
        "link_delay_ms",
        "link_loss",
        "seed",
    ]);
    let first = e.variants.first();
    for p in e.points.iter().filter(|p| Some(&p.variant) == first) {
        let s = &p.scenario;
        let shares: Vec<String> = s
            .sources
            .iter()
            .map(|x| format!("{:.3}", x.share))
            .collect();
        csv.row([
            p.x.to_string(),
            format!("{:.4}", s.offered_load),
            s.sources.len().to_string(),
            shares.join(" "),
            format!("{:.1}", s.call.holding_time_s),
            format!("{:.1}", 1.0e6 / s.re.cost_forward_us),
            s.re.queue_capacity.to_string(),
            format!("{:.2}", s.link.delay_ms),
            format!("{:.5}", s.link.loss),
            p.seed.to_string(),
        ]);
    }
    csv.into_text()
}

/// What a plot shows of a verdict: goodput over the requirement (1 is the line a control
/// must stay on or above; capped at 2), or the delay added to no control's (5 ms is the
/// line to stay under). Verdicts that require nothing are left out.
fn plotted(claim: Claim, v: &Verdict) -> Option<f64> {
    match claim {
        Claim::AnswersAdmitted => None,
        Claim::NoDelay => Some((v.value - (v.required - NO_DELAY_MS)).max(0.0)),
        _ if v.required > 0.0 => Some((v.value / v.required).min(2.0)),
        _ => None,
    }
}

/// `claims.csv` (a row per variant and claim), `worst.csv` (the worst topologies of each,
/// with what they were) and one plot per claim: each variant's verdicts sorted worst
/// first ([`plotted`]); returns the plots' file names.
pub fn write_claims(
    out: &Path,
    e: &Experiment,
    results: &[ClaimResult],
) -> Result<Vec<String>, String> {
    let mut plots = Vec::new();
    let mut claims = CsvTable::new([
        "variant",
        "algorithm",
        "claim",
        "topologies",
        "holding",
        "share_holding",
        "worst_topology",
        "worst_value",
        "worst_required",
    ]);
    let mut worst = CsvTable::new([
        "variant",
        "claim",
        "topology",
        "offered_load",
        "sources",
        "holding_time_s",
        "re_service_mps",
        "queue_capacity",
        "link_delay_ms",
        "link_loss",
        "value",
        "required",
        "holds",
    ]);
    for c in results {
        let first = c.verdicts.first();
        claims.row([
            c.variant.clone(),
            c.algorithm.to_string(),
            c.claim.name().to_owned(),
            c.verdicts.len().to_string(),
            c.holding().to_string(),
            format!("{:.4}", c.share()),
            first.map_or(String::new(), |v| v.topology.to_string()),
            format!("{:.4}", first.map_or(f64::NAN, |v| v.value)),
            format!("{:.4}", first.map_or(f64::NAN, |v| v.required)),
        ]);
        for v in c.verdicts.iter().take(WORST_KEPT) {
            let s = &e.points[e
                .points
                .iter()
                .position(|p| p.variant == c.variant && p.x as usize == v.topology)
                .unwrap_or(0)]
            .scenario;
            worst.row([
                c.variant.clone(),
                c.claim.name().to_owned(),
                v.topology.to_string(),
                format!("{:.4}", s.offered_load),
                s.sources.len().to_string(),
                format!("{:.1}", s.call.holding_time_s),
                format!("{:.1}", 1.0e6 / s.re.cost_forward_us),
                s.re.queue_capacity.to_string(),
                format!("{:.2}", s.link.delay_ms),
                format!("{:.5}", s.link.loss),
                format!("{:.4}", v.value),
                format!("{:.4}", v.required),
                v.holds().to_string(),
            ]);
        }
    }
    write(&out.join("claims.csv"), &claims.into_text())?;
    write(&out.join("topologies.csv"), &topologies_csv(e))?;
    write(&out.join("worst.csv"), &worst.into_text())?;
    for claim in Claim::ALL
        .into_iter()
        .filter(|c| *c != Claim::AnswersAdmitted)
    {
        let series: Vec<Series> = results
            .iter()
            .filter(|c| c.claim == claim && !c.verdicts.is_empty())
            .map(|c| {
                let shown: Vec<f64> = c
                    .verdicts
                    .iter()
                    .filter_map(|v| plotted(claim, v))
                    .collect();
                let n = shown.len() as f64;
                Series {
                    label: c.variant.clone(),
                    points: shown
                        .iter()
                        .enumerate()
                        .map(|(i, y)| ((i as f64 + 0.5) / n, *y))
                        .collect(),
                }
            })
            .collect();
        let y_label = if claim == Claim::NoDelay {
            "Setup delay p50 added to no control's (ms), worst first"
        } else {
            "Goodput / required goodput, worst first"
        };
        let title = format!("{}: claim {}", e.title, claim.name());
        let axes = Axes {
            title: &title,
            x_label: "Share of topologies",
            y_label,
            y_max: 0.0,
        };
        let name = format!("{}-{}.svg", e.name, claim.name());
        line_chart(&out.join(&name), &axes, &series, None)?;
        plots.push(name);
    }
    Ok(plots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sim::experiment::Overrides;

    /// Two topologies, below capacity or all overloaded, with win-cont and, if asked,
    /// no control on each.
    fn two_topologies(below_capacity_share: f64, with_none: bool) -> Experiment {
        let none = if with_none {
            "[[variant]]\nlabel = \"none\"\nscenario = { re = { control = { algorithm = \"none\" } } }\n"
        } else {
            ""
        };
        let toml = format!(
            r#"
name = "two"
title = "two topologies"
kind = "sample"
[sample]
topologies = 2
seed = 3
below_capacity_share = {below_capacity_share:?}
{none}
[[variant]]
label = "win-cont"
scenario = {{ re = {{ control = {{ algorithm = "win-cont" }} }} }}
"#
        );
        Experiment::from_toml(&toml, &Overrides::default()).unwrap()
    }

    fn report(calls_good: u64, goodput: f64, p50_ms: f64) -> RunReport {
        RunReport {
            calls_good,
            goodput,
            setup_delay_p50_ms: p50_ms,
            ..RunReport::default()
        }
    }

    #[test]
    fn delay_is_judged_only_where_no_control_set_up_a_call() {
        let e = two_topologies(1.0, true);
        // Topology 0: no control collapsed (no call, no delay); topology 1: it served.
        let reports = [
            report(0, 0.0, 0.0),
            report(900, 0.7, 2.0),
            report(800, 0.6, 400.0),
            report(900, 0.7, 9.0),
        ];
        let results = evaluate(&e, &reports);
        let claim = |c: Claim| results.iter().find(|r| r.claim == c).unwrap();
        let delay = claim(Claim::NoDelay);
        assert_eq!(delay.verdicts.len(), 1, "{delay:?}");
        assert_eq!(delay.verdicts[0].topology, 1);
        assert!(!delay.verdicts[0].holds(), "9 ms against 2 + 5");
        // No harm is still judged on both.
        assert_eq!(claim(Claim::NoHarm).verdicts.len(), 2);
    }

    #[test]
    fn without_a_reference_only_the_claims_that_need_none_are_judged() {
        let e = two_topologies(0.0, false);
        let reports = [report(900, 0.95, 2.0), report(500, 0.5, 2.0)];
        let results = evaluate(&e, &reports);
        let claim = |c: Claim| results.iter().find(|r| r.claim == c).unwrap();
        let overload = claim(Claim::Overload);
        assert_eq!(overload.verdicts.len(), 2, "{overload:?}");
        assert_eq!(overload.holding(), 1);
        assert_eq!(overload.verdicts[0].topology, 1, "the worst first");
        assert_eq!(claim(Claim::AnswersAdmitted).verdicts.len(), 2);
        assert!(claim(Claim::NoHarm).verdicts.is_empty());
        assert!(claim(Claim::NoDelay).verdicts.is_empty());
    }
}
