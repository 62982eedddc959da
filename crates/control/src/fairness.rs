//! Fairness among upstream sources, Shen, Schulzrinne & Nahum 2008, §6.
//!
//! - Provider-centric (§6.1.1): every active SE gets the same share of the RE's
//!   capacity, using `N_SE` from §3.2.
//! - User-centric (§6.1.2, double feed): each SE feeds forward its offered load before
//!   throttling, and the RE splits capacity in proportion to it, so every user's call
//!   has the same chance wherever it comes from.
//!
//! Shares are computed in neighbour order, so the same inputs always give the same split.

use crate::types::NeighbourId;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// Equal split among active sources (what rate-abs, win-disc and win-cont do
    /// without feed-forward).
    #[default]
    ProviderCentric,
    /// Split proportional to fed-forward offered load (double feed).
    UserCentric,
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
    if fairness == Fairness::ProviderCentric {
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
