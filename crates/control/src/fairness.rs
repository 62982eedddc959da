//! Fairness among upstream sources, Shen, Schulzrinne & Nahum 2008, §6.
//!
//! - Provider-centric (§6.1.1): every active SE gets the same share of the RE's
//!   capacity, using `N_SE` from §3.2.
//! - User-centric (§6.1.2, double feed): each SE feeds forward its offered load before
//!   throttling, and the RE splits capacity in proportion to it, so every user's call
//!   has the same chance wherever it comes from.
//!
//! - Max-min (`fairness = "max-min"`): provider-centric where the SEs compete, but an SE that
//!   sends less than an equal share is given what it sends (with headroom to grow) and
//!   the rest is split equally among the others. Below capacity every SE then gets what
//!   it offers, whatever the shares; an equal split throttles the larger SEs while the
//!   smaller ones leave theirs unused (seen in sluice's sampled topologies: rate-abs
//!   carried 0.66 of capacity offered 0.94 by four SEs with shares 0.94, 0.29, 0.11,
//!   0.13). Under overload every SE sends at least its equal share, and the split is
//!   the paper's equal one.
//!
//! Shares are computed in neighbour order, so the same inputs always give the same split.

use crate::types::NeighbourId;
use serde::{Deserialize, Serialize};

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// Equal split among active sources (what rate-abs, win-disc and win-cont do
    /// without feed-forward).
    #[default]
    ProviderCentric,
    /// Split proportional to fed-forward offered load (double feed).
    UserCentric,
    /// Max-min fair over each SE's session rate as the RE measures it.
    MaxMin,
}

/// A source that sends less than this part of what its share lets through is content:
/// it is given what it sends (times [`MAX_MIN_HEADROOM`]) and the rest goes to the others.
pub const CONTENT_BELOW: f64 = 0.9;
/// What a content source is given over what it sends, so that its allotment grows as fast
/// as its callers do (it competes again once it uses [`CONTENT_BELOW`] of it). Its
/// inverse is below [`CONTENT_BELOW`], so a source given this stays content while its
/// callers do not change, rather than flapping between content and competing.
pub const MAX_MIN_HEADROOM: f64 = 1.25;

/// One source as max-min fairness sees it: its session rate as the RE measured it and the
/// share it was last given (`None` before the first of either).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub id: NeighbourId,
    pub rate: Option<f64>,
    /// The standard deviation of `rate` as an estimate of the source's mean (0 if unknown).
    pub rate_sd: f64,
    pub share: Option<f64>,
}

/// Max-min fair shares. Whether a source is content is judged against what it was given,
/// not against the capacity: the RE knows what its sources send, not what their callers
/// offer, and a throttled source sends exactly its allotment. A source whose part of the
/// measured traffic is under [`CONTENT_BELOW`] of its last share is content and keeps
/// [`MAX_MIN_HEADROOM`] times that part, or its rate plus [`POISSON_MARGIN`] standard
/// deviations of that rate's estimate if that is more (never more than its last share);
/// every other source competes for an equal split of the rest. The margin is for sources
/// of a few sessions a second, whose rate measured over a second is often off by half.
/// No source measured yet, or nobody content: the equal split. Shares sum to 1.
///
/// `split_rate`, if known, is the rate the shares divide, in the units of the sources'
/// rates. A source's part is then of the larger of it and the measured total: below
/// capacity the sources send less than the RE would take, and as parts of what they send
/// the content sources held so much that a competing one was throttled below what it
/// offered (nine SEs at 0.76x: the largest got 0.11 of a 1.25x rate, 14 of its 22
/// calls/s).
pub fn max_min_shares(sources: &[Usage], split_rate: Option<f64>) -> Vec<(NeighbourId, f64)> {
    let n = sources.len();
    let equal = || {
        sources
            .iter()
            .map(|u| (u.id, 1.0 / n as f64))
            .collect::<Vec<_>>()
    };
    let valid = |r: Option<f64>| r.filter(|r| r.is_finite() && *r >= 0.0);
    let measured: f64 = sources.iter().filter_map(|u| valid(u.rate)).sum();
    if n == 0 || !(measured > 0.0 && measured.is_finite()) {
        return equal();
    }
    let total = measured.max(valid(split_rate).unwrap_or(0.0));
    let content = |u: &Usage| -> Option<f64> {
        let part = valid(u.rate)? / total;
        let share = valid(u.share).unwrap_or(1.0 / n as f64);
        let margin = if u.rate_sd.is_finite() && u.rate_sd > 0.0 {
            POISSON_MARGIN * u.rate_sd / total
        } else {
            0.0
        };
        (part < CONTENT_BELOW * share)
            .then(|| (part * MAX_MIN_HEADROOM).max(part + margin).min(share))
    };
    let kept: Vec<Option<f64>> = sources.iter().map(content).collect();
    let competing = kept.iter().filter(|k| k.is_none()).count();
    let taken: f64 = kept.iter().flatten().sum();
    let each = if competing > 0 {
        (1.0 - taken).max(0.0) / competing as f64
    } else {
        0.0
    };
    let raw: Vec<f64> = kept.iter().map(|k| k.unwrap_or(each)).collect();
    let sum: f64 = raw.iter().sum();
    if !(sum > 0.0 && sum.is_finite()) {
        return equal();
    }
    sources
        .iter()
        .zip(raw)
        .map(|(u, r)| (u.id, r / sum))
        .collect()
}

/// The most the fed-forward demands may add up to, as parts of the capacity, for
/// [`lend_unwanted`] to lend. Above 1: measured over a fraction of a second, demands that
/// fit the capacity add up to more in some intervals.
pub const LEND_UP_TO: f64 = 1.15;

/// Standard deviations of a source's count per window lent on top of its mean demand.
pub const POISSON_MARGIN: f64 = 2.0;

/// Each source's share with what the others do not want lent out, while the loads the
/// sources feed forward (`demands`, as parts of the capacity) add up to at most the
/// capacity: each source may then take its demand plus all that nobody wants, and never
/// less than its share. Its demand is a mean: a window of `horizon_sessions` (what the
/// capacity serves over the window's horizon) also lends it [`POISSON_MARGIN`] standard
/// deviations of a Poisson count of that mean ([`MarginIn`] says where), which the
/// capacity nobody wants does not cover near capacity. The windows then hold no caller
/// back where no control would, whatever the shares of the split. The demands are what
/// the callers offer before any throttling, so a throttled source does not look content
/// and lend its share away, as a measured rate would make it look.
///
/// A source whose demand is unknown (`None`, or a report that is not a load) is taken to
/// want its whole share: it lends none of it and is held to it, as without lending, while
/// the others still lend among themselves. Were an unknown demand to stop all lending, one
/// rare source that has not fed forward yet would switch it off, and below capacity the
/// windows of slow REs would turn away up to a tenth of the calls no control would.
///
/// Past capacity the shares are returned as given. The windows' budget already hands a
/// share left unused to the others there, since an unused window leaves the queue short
/// and the next budget larger; lending on top of that fed on the noise of the demands: a
/// source wanting half as much again as its share looked content in one interval of six
/// and lost a fifth of its share to the others (win-disc, closed-loop test, three SEs at
/// 5x).
pub fn lend_unwanted(
    shares: Vec<(NeighbourId, f64)>,
    demands: &[Option<f64>],
    horizon_sessions: f64,
    margin: MarginIn,
) -> Lent {
    // A report that is not a load is as good as none.
    let known: Vec<Option<f64>> = demands
        .iter()
        .map(|d| d.filter(|d| d.is_finite() && *d >= 0.0))
        .collect();
    let all_wanted: f64 = shares
        .iter()
        .zip(&known)
        .map(|((_, share), want)| want.unwrap_or(*share))
        .sum();
    if all_wanted > LEND_UP_TO {
        return Lent::as_given(shares);
    }
    let unwanted = (1.0 - all_wanted).max(0.0);
    let horizon = if horizon_sessions.is_finite() {
        horizon_sessions.max(0.0)
    } else {
        0.0
    };
    // Two standard deviations of a Poisson count of `want * horizon` sessions.
    let burst_sessions = |want: f64| POISSON_MARGIN * (want * horizon).sqrt();
    let (shares, burst_sessions) = shares
        .into_iter()
        .zip(&known)
        .map(|((id, share), want)| match (want, margin) {
            (Some(want), MarginIn::Share) => {
                // The same margin as a share of the window.
                let burst = if horizon > 0.0 {
                    POISSON_MARGIN * (want / horizon).sqrt()
                } else {
                    0.0
                };
                ((id, share.max(want + unwanted + burst).min(1.0)), 0.0)
            }
            (Some(want), MarginIn::Sessions) => (
                (id, share.max((want + unwanted).min(1.0))),
                burst_sessions(*want),
            ),
            (None, _) => ((id, share), 0.0),
        })
        .unzip();
    Lent {
        shares,
        burst_sessions,
    }
}

/// Where [`lend_unwanted`] lends a source's margin for the bursts of its arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarginIn {
    /// In its share, which with the rest is at most the whole window: win-disc, whose
    /// window spans a control interval and the queue's budget. On top, it let the windows
    /// pass the capacity when the SEs want 1 to 1.2 times it: overload held on 106 of 122
    /// sampled topologies against 109.
    Share,
    /// In sessions on top of its share: win-cont, whose window is a share of the room
    /// left now, `μ·D_B` less the queue. In front of an RE serving 15 calls/s that room
    /// is a few sessions, so a margin held within it is less than one; on top, no-harm
    /// held on 76 of 78 sampled topologies against 71, and overload on the same 119 of 122.
    Sessions,
}

/// What [`lend_unwanted`] lends: each source's share of the window, and sessions on top of
/// it (in the same order) for the bursts of its arrivals.
#[derive(Clone, Debug, PartialEq)]
pub struct Lent {
    pub shares: Vec<(NeighbourId, f64)>,
    pub burst_sessions: Vec<f64>,
}

impl Lent {
    /// The shares as given, nothing lent.
    pub fn as_given(shares: Vec<(NeighbourId, f64)>) -> Self {
        Self {
            burst_sessions: vec![0.0; shares.len()],
            shares,
        }
    }
}

/// Each source's share of the capacity; shares sum to 1 (empty input gives no shares).
///
/// In user-centric mode a source that has not reported its load yet is credited with
/// the mean of the reported loads, so it is neither starved nor favoured until its
/// first report; if no source reports a positive load the split falls back to equal.
pub fn shares(
    fairness: Fairness,
    sources: &[(NeighbourId, Option<f64>)],
) -> Vec<(NeighbourId, f64)> {
    if sources.is_empty() {
        return Vec::new();
    }
    let equal = || {
        let share = 1.0 / sources.len() as f64;
        sources.iter().map(|(id, _)| (*id, share)).collect()
    };
    if fairness != Fairness::UserCentric {
        return equal();
    }
    let valid = |load: &Option<f64>| load.filter(|l| l.is_finite() && *l >= 0.0);
    let reported: Vec<f64> = sources.iter().filter_map(|(_, l)| valid(l)).collect();
    if reported.is_empty() {
        return equal();
    }
    let mean = reported.iter().sum::<f64>() / reported.len() as f64;
    let loads: Vec<f64> = sources
        .iter()
        .map(|(_, l)| valid(l).unwrap_or(mean))
        .collect();
    let total: f64 = loads.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return equal();
    }
    sources
        .iter()
        .zip(loads)
        .map(|((id, _), load)| (*id, load / total))
        .collect()
}

/// Picks the source whose cumulative-share range covers `draw` (in `[0, 1)`), the
/// range scheme §6.2.1 describes for the improved win-cont allocation.
pub fn pick_by_share(shares: &[(NeighbourId, f64)], draw: f64) -> Option<NeighbourId> {
    let mut upper = 0.0;
    for (id, share) in shares {
        upper += share;
        if draw < upper {
            return Some(*id);
        }
    }
    // Rounding can leave the cumulative sum a hair under 1.
    shares.last().map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(loads: &[Option<f64>]) -> Vec<(NeighbourId, Option<f64>)> {
        loads
            .iter()
            .enumerate()
            .map(|(i, l)| (NeighbourId(i as u32), *l))
            .collect()
    }

    fn values(s: &[(NeighbourId, f64)]) -> Vec<f64> {
        s.iter().map(|(_, v)| *v).collect()
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn below_capacity_each_source_may_take_its_demand_and_what_nobody_wants() {
        let equal: Vec<_> = (0..4).map(|i| (NeighbourId(i), 0.25)).collect();
        // 0.93 of the capacity wanted, 0.6 of it by one source: 0.07 nobody wants.
        let demands = [Some(0.6), Some(0.2), Some(0.05), Some(0.08)];
        for margin in [MarginIn::Share, MarginIn::Sessions] {
            let lent = lend_unwanted(equal.clone(), &demands, 0.0, margin);
            assert!(
                close(&values(&lent.shares), &[0.67, 0.27, 0.25, 0.25]),
                "{lent:?}"
            );
            assert!(close(&lent.burst_sessions, &[0.0; 4]), "{lent:?}");
        }
        // A window of 100 sessions also lends two standard deviations of each count: in
        // the share, where the two smallest keep theirs (demand, spare and margin come to
        // less)...
        let in_share = lend_unwanted(equal.clone(), &demands, 100.0, MarginIn::Share);
        let with = |want: f64| want + 0.07 + 2.0 * (want / 100.0).sqrt();
        let expected = [with(0.6), with(0.2), 0.25, 0.25];
        assert!(close(&values(&in_share.shares), &expected), "{in_share:?}");
        assert!(close(&in_share.burst_sessions, &[0.0; 4]), "{in_share:?}");
        // ...or in sessions on top of the share.
        let on_top = lend_unwanted(equal.clone(), &demands, 100.0, MarginIn::Sessions);
        let sd = |want: f64| (want * 100.0_f64).sqrt();
        assert!(close(&values(&on_top.shares), &[0.67, 0.27, 0.25, 0.25]));
        let expected = [2.0 * sd(0.6), 2.0 * sd(0.2), 2.0 * sd(0.05), 2.0 * sd(0.08)];
        assert!(close(&on_top.burst_sessions, &expected), "{on_top:?}");
        // Wanting more than the capacity (beyond the margin for noisy demands): the split.
        let past = [Some(1.0), Some(0.2), Some(0.05), Some(0.08)];
        for margin in [MarginIn::Share, MarginIn::Sessions] {
            assert_eq!(
                lend_unwanted(equal.clone(), &past, 100.0, margin),
                Lent::as_given(equal.clone())
            );
        }
    }

    #[test]
    fn a_source_that_does_not_feed_forward_is_held_to_its_share_and_the_others_still_lend() {
        let equal: Vec<_> = (0..4).map(|i| (NeighbourId(i), 0.25)).collect();
        // The unknown source counts as wanting its 0.25: 0.6 + 0.25 + 0.05 wanted, 0.1 not.
        let unknown = lend_unwanted(
            equal.clone(),
            &[Some(0.6), None, Some(0.05), Some(0.0)],
            100.0,
            MarginIn::Sessions,
        );
        assert!(
            close(&values(&unknown.shares), &[0.7, 0.25, 0.25, 0.25]),
            "{unknown:?}"
        );
        assert!(unknown.burst_sessions[1].abs() < 1e-12, "{unknown:?}");
        // A report that is not a load is no report.
        let bad = lend_unwanted(
            equal.clone(),
            &[Some(0.6), Some(f64::NAN), Some(-1.0), Some(0.0)],
            100.0,
            MarginIn::Sessions,
        );
        assert!(
            close(&values(&bad.shares), &[0.6, 0.25, 0.25, 0.25]),
            "{bad:?}"
        );
        // An unknown source that would put the wanted total past capacity stops lending.
        let past = lend_unwanted(
            equal.clone(),
            &[Some(0.9), None, Some(0.05), Some(0.0)],
            100.0,
            MarginIn::Share,
        );
        assert_eq!(past, Lent::as_given(equal.clone()));
    }

    #[test]
    fn provider_centric_split_is_equal_whatever_the_loads() {
        let s = shares(
            Fairness::ProviderCentric,
            &ids(&[Some(10.0), Some(30.0), Some(60.0)]),
        );
        assert!(close(&values(&s), &[1.0 / 3.0; 3]));
    }

    #[test]
    fn double_feed_split_is_proportional_to_fed_forward_loads() {
        // The paper's §6.2.1 example: 10 %, 30 %, 60 % of the load.
        let s = shares(
            Fairness::UserCentric,
            &ids(&[Some(10.0), Some(30.0), Some(60.0)]),
        );
        assert!(close(&values(&s), &[0.1, 0.3, 0.6]));
        // A source without a report counts as the mean of the others.
        let s = shares(Fairness::UserCentric, &ids(&[Some(10.0), None, Some(30.0)]));
        assert!(close(&values(&s), &[10.0 / 60.0, 20.0 / 60.0, 30.0 / 60.0]));
        // Nothing usable: equal.
        let s = shares(Fairness::UserCentric, &ids(&[Some(f64::NAN), Some(0.0)]));
        assert!(close(&values(&s), &[0.5, 0.5]));
    }

    fn usage(rates: &[Option<f64>], shares: &[Option<f64>]) -> Vec<Usage> {
        rates
            .iter()
            .zip(shares)
            .enumerate()
            .map(|(i, (rate, share))| Usage {
                rate_sd: 0.0,
                id: NeighbourId(i as u32),
                rate: *rate,
                share: *share,
            })
            .collect()
    }

    #[test]
    fn max_min_gives_content_sources_what_they_send_and_splits_the_rest() {
        let third = Some(1.0 / 3.0);
        // One source sends 10 of 100 with a third given: it keeps 12.5 %, the others
        // split the rest.
        let s = max_min_shares(
            &usage(&[Some(10.0), Some(45.0), Some(45.0)], &[third; 3]),
            None,
        );
        assert!(close(&values(&s), &[0.125, 0.4375, 0.4375]), "{s:?}");
        // Throttled sources use what they are given: equal stays equal whatever their
        // callers offer (the paper's provider-centric split under overload).
        let s = max_min_shares(
            &usage(&[Some(33.0), Some(34.0), Some(33.0)], &[third; 3]),
            None,
        );
        assert!(close(&values(&s), &[1.0 / 3.0; 3]), "{s:?}");
        // Half each given, a quarter used by one: it keeps 1.25 times its quarter.
        let s = max_min_shares(
            &usage(&[Some(1.0), Some(3.0)], &[Some(0.5), Some(0.5)]),
            None,
        );
        assert!(close(&values(&s), &[0.3125, 0.6875]), "{s:?}");
        // A content source never gets more than it had, so a throttled source whose
        // traffic dips a little keeps its share.
        let s = max_min_shares(
            &usage(&[Some(1.0), Some(9.0)], &[Some(0.118), Some(0.882)]),
            None,
        );
        assert!(close(&values(&s), &[0.118, 0.882]), "{s:?}");
        // Nothing measured, or nonsense: equal.
        let s = max_min_shares(&usage(&[None, Some(f64::NAN)], &[None, None]), None);
        assert!(close(&values(&s), &[0.5, 0.5]));
    }

    #[test]
    fn below_capacity_max_min_parts_are_of_the_rate_split_not_of_what_the_sources_send() {
        // Three content sources send 10 calls/s each and one 45 (given a quarter each) of
        // a rate of 125 calls/s. As parts of the 75 sent, the three keep 1.25 * 10/75 each
        // and the fourth is left half of 125, 62.5 calls/s; as parts of the 125 split,
        // all four are content and each keeps room over what it sends.
        let quarter = Some(0.25);
        let sent = [Some(10.0), Some(10.0), Some(10.0), Some(45.0)];
        let of_sent = max_min_shares(&usage(&sent, &[quarter; 4]), None);
        assert!(close(&values(&of_sent)[3..], &[0.5]), "{of_sent:?}");
        let of_split = max_min_shares(&usage(&sent, &[quarter; 4]), Some(125.0));
        for ((_, share), rate) in of_split.iter().zip(sent) {
            assert!(share * 125.0 > 1.2 * rate.unwrap(), "{of_split:?}");
        }
        // A source of 2 calls/s whose estimate has a standard deviation of 1.5 keeps
        // 2 + 2 * 1.5 calls/s of the 125, not 1.25 * 2.
        let mut noisy = usage(&sent, &[quarter; 4]);
        noisy[0].rate = Some(2.0);
        noisy[0].rate_sd = 1.5;
        let s = max_min_shares(&noisy, Some(125.0));
        assert!((s[0].1 - 5.0 / 125.0).abs() < 1e-12, "{s:?}");
        // Past capacity the sources send what they are given, the measured total rules,
        // and the split is what it was.
        let throttled = [Some(40.0), Some(42.0), Some(43.0)];
        let third = Some(1.0 / 3.0);
        assert_eq!(
            max_min_shares(&usage(&throttled, &[third; 3]), Some(100.0)),
            max_min_shares(&usage(&throttled, &[third; 3]), None)
        );
    }

    #[test]
    fn range_pick_matches_the_papers_example() {
        let s = shares(
            Fairness::UserCentric,
            &ids(&[Some(10.0), Some(30.0), Some(60.0)]),
        );
        assert_eq!(pick_by_share(&s, 0.20), Some(NeighbourId(1)));
        assert_eq!(pick_by_share(&s, 0.50), Some(NeighbourId(2)));
        assert_eq!(pick_by_share(&s, 0.05), Some(NeighbourId(0)));
        assert_eq!(pick_by_share(&s, 0.999_999_999_999), Some(NeighbourId(2)));
        assert_eq!(pick_by_share(&[], 0.5), None);
    }
}
