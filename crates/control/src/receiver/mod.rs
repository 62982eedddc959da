//! Feedback generation at the receiving entity (RE), Shen, Schulzrinne & Nahum 2008, §3.3–3.7 and §6.
//!
//! One file per algorithm, each implementing [`FeedbackGenerator`]:
//! [`WinDisc`], [`WinCont`], [`WinAuto`], [`RateAbs`], [`RateOcc`], plus [`NoFeedback`]
//! for the baselines and [`LoadReport`], the RE's occupancy for the fuzzy window
//! (Montazerolghaem & Yaghmaee 2014). [`AnyFeedbackGenerator`] wraps whichever one a config selects.

mod load_report;
mod none;
mod rate_abs;
mod rate_occ;
mod win_auto;
mod win_cont;
mod win_disc;

pub use load_report::LoadReport;
pub use none::NoFeedback;
pub use rate_abs::{RateAbs, RateAbsConfig};
pub(crate) use rate_occ::next_fraction as occupancy_fraction_step;
pub use rate_occ::{RateOcc, RateOccConfig};
pub use win_auto::{WinAuto, WinAutoConfig};
pub use win_cont::{WinCont, WinContAllocation, WinContConfig};
pub use win_disc::{WinDisc, WinDiscConfig};

use crate::active_sources::{ActiveSourceConfig, ActiveSources, Source};
use crate::estimation::{EstimatorConfig, SessionEstimator};
use crate::fairness::{self, Fairness};
use crate::types::{
    Completion, FeedForward, Feedback, FeedbackValue, MessageSummary, NeighbourId, QueueOccupancy,
};
use sluice_time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// The RE side of a feedback loop. See the crate docs for the order a driver calls these in.
pub trait FeedbackGenerator {
    /// A message from the network reached the RE, before any queueing decision.
    fn on_arrival(&mut self, now: Time, message: &MessageSummary);
    /// A message from `from` carried feed-forward (double feed, §6.1.2).
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward);
    /// A request from `from` reported `sessions` it had sent that this RE's last echoed
    /// count did not include (see [`crate::overload::WINDOW_IN_FLIGHT_PARAM`]). Windows
    /// add them back to its window, so that the budget is the queue's alone; the others
    /// ignore it.
    fn on_in_flight(&mut self, _now: Time, _from: NeighbourId, _sessions: f64) {}
    /// The RE's memory occupancy changed, in `[0, 1]` (see [`LoadReport`]); only the
    /// load report reads it.
    fn on_memory(&mut self, _now: Time, _occupancy: f64) {}
    /// The queue's contents changed (eq. 1 needs the instant value).
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy);
    /// The processor finished a message.
    fn on_processed(&mut self, now: Time, completion: &Completion);
    /// The RE is about to send a message to `neighbour`; the returned feedback rides on it.
    fn feedback_for(&mut self, now: Time, neighbour: NeighbourId) -> Option<Feedback>;
    /// Runs whatever is due at `now` (measurement and control intervals).
    fn handle_timeout(&mut self, now: Time);
    /// The next instant `handle_timeout` has work, if any.
    fn poll_timeout(&self) -> Option<Time>;
    /// Current estimates, for metrics and plots.
    fn metrics(&self) -> ReceiverMetrics;
}

/// A snapshot of an RE controller's estimates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReceiverMetrics {
    /// Smoothed `μ`, sessions/s (§3.1).
    pub service_rate: Option<f64>,
    /// Smoothed `L_sess`, messages per session.
    pub session_length: Option<f64>,
    /// `N_sess` by eq. 1.
    pub sessions_in_system: Option<f64>,
    /// Processor occupancy over the last measurement interval.
    pub occupancy: Option<f64>,
    /// `N_SE` as of the last table update (§3.2).
    pub active_sources: usize,
    /// New sources refused because the active-source table was full.
    pub sources_turned_away: u64,
    /// The algorithm's current control variable: total advertised window (win-*),
    /// total target rate (rate-abs) or acceptance fraction (rate-occ).
    pub control_value: Option<f64>,
}

/// Estimator, active-source table and feedback numbering, shared by the algorithms
/// that need them; `S` is the per-source state an algorithm keeps.
#[derive(Clone, Debug)]
pub(crate) struct ReceiverCore<S> {
    pub estimator: SessionEstimator,
    pub sources: ActiveSources<S>,
    pub fairness: Fairness,
    sequence: u64,
    /// What max-min fairness knows of each active source.
    demand: BTreeMap<NeighbourId, Demand>,
    demand_sampled: Time,
    /// Count each source's sessions: max-min fairness and the windows' in-flight
    /// allowance read the rates; nothing else pays for them.
    tracks_demand: bool,
    /// Lend each source what the others do not want of their shares
    /// ([`Self::lent_shares`]).
    lends_unused: bool,
    /// `mu` averaged over [`LENDING_MEMORY`], and when it was last updated.
    lending_mu: Option<(f64, Time)>,
}

/// One source as max-min fairness tracks it.
#[derive(Clone, Copy, Debug, Default)]
struct Demand {
    /// New sessions since the last sample.
    sessions: u64,
    /// Smoothed sessions per second.
    rate: Option<f64>,
    /// The share it was last given.
    share: Option<f64>,
}

/// How often the sources' session rates are sampled for max-min fairness.
const DEMAND_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);
/// Weight of a new rate sample (about a second of memory at 200 ms samples).
const DEMAND_WEIGHT: f64 = 0.3;

/// The standard deviation of [`Demand::rate`] for a Poisson source of that rate: a sample
/// of `DEMAND_INTERVAL` has variance `r / Δ`, and the exponential average keeps
/// `w / (2 − w)` of it.
fn demand_rate_sd(rate: f64) -> f64 {
    let per_sample = rate.max(0.0) / DEMAND_INTERVAL.as_secs_f64();
    (per_sample * DEMAND_WEIGHT / (2.0 - DEMAND_WEIGHT)).sqrt()
}

impl<S> ReceiverCore<S> {
    pub fn new(
        estimator: &EstimatorConfig,
        sources: &ActiveSourceConfig,
        fairness: Fairness,
        now: Time,
    ) -> Self {
        Self {
            estimator: SessionEstimator::new(estimator, now),
            sources: ActiveSources::new(sources),
            fairness,
            sequence: 0,
            demand: BTreeMap::new(),
            demand_sampled: now,
            tracks_demand: fairness == Fairness::MaxMin,
            lends_unused: false,
            lending_mu: None,
        }
    }

    /// Numbers a feedback value; sequence numbers start at 1 and never repeat.
    pub fn stamp(&mut self, value: FeedbackValue) -> Feedback {
        self.sequence += 1;
        Feedback {
            sequence: self.sequence,
            value,
        }
    }

    /// Refreshes the sender of `message` and returns its entry, if it has one.
    pub fn arrival(
        &mut self,
        now: Time,
        message: &MessageSummary,
        init: impl FnOnce() -> S,
    ) -> Option<&mut Source<S>> {
        let offers_load = message.is_session_start();
        let id = message.source?;
        let source = self.sources.observe(now, id, offers_load, init)?;
        if offers_load && self.tracks_demand {
            // Bounded by the active-source table: only sources it holds are counted.
            self.demand.entry(id).or_default().sessions += 1;
        }
        Some(source)
    }

    /// Folds the session counts since the last sample into each source's rate, and
    /// forgets sources that are no longer active.
    fn sample_demand(&mut self, now: Time) {
        let elapsed = now - self.demand_sampled;
        if elapsed < DEMAND_INTERVAL {
            return;
        }
        self.demand_sampled = now;
        let secs = elapsed.as_secs_f64();
        let sources = &self.sources;
        self.demand.retain(|id, _| sources.contains(*id));
        for d in self.demand.values_mut() {
            let sample = d.sessions as f64 / secs;
            d.rate = Some(d.rate.map_or(sample, |r| r + DEMAND_WEIGHT * (sample - r)));
            d.sessions = 0;
        }
    }

    /// Stores a fed-forward load; values that are not finite and non-negative are ignored.
    pub fn feed_forward(
        &mut self,
        now: Time,
        from: NeighbourId,
        ff: FeedForward,
        init: impl FnOnce() -> S,
    ) {
        if ff.offered_rate.is_finite() && ff.offered_rate >= 0.0 {
            let offers_load = self.sources.rate_offers_load(ff.offered_rate);
            if let Some(source) = self.sources.observe(now, from, offers_load, init) {
                source.offered_rate = Some(ff.offered_rate);
            }
        }
    }

    /// Stores an in-flight report from an active source; values that are not finite and
    /// non-negative are ignored.
    pub fn in_flight(&mut self, now: Time, from: NeighbourId, sessions: f64) {
        if sessions.is_finite() && sessions >= 0.0 {
            if let Some(source) = self.sources.get_mut(now, from) {
                source.in_flight = Some(sessions);
            }
        }
    }

    /// Counts each source's sessions from now on, for [`Self::in_flight_allowances`].
    pub fn track_demand(&mut self) {
        self.tracks_demand = true;
    }

    /// Makes [`Self::lent_shares`] lend (it returns the shares as given otherwise).
    pub fn lend_unused(&mut self) {
        self.lends_unused = true;
    }

    /// `shares` with what the sources do not want lent to those that want more
    /// ([`fairness::lend_unwanted`]), from the session rates they feed forward over the
    /// RE's `mu` averaged over [`LENDING_MEMORY`], for windows spent over `horizon`
    /// seconds. Measured over 100 ms, `mu` swings with the queue (from 30 to 130
    /// sessions/s about a true 71 under win-disc at 5x in the closed-loop test), and every
    /// high swing would make a source wanting more than its share look content.
    pub fn lent_shares(
        &mut self,
        now: Time,
        shares: Vec<(NeighbourId, f64)>,
        mu: f64,
        horizon: f64,
        margin: fairness::MarginIn,
    ) -> fairness::Lent {
        if !(self.lends_unused && mu > 0.0 && mu.is_finite()) {
            return fairness::Lent::as_given(shares);
        }
        let mu = match self.lending_mu {
            Some((average, at)) => {
                let elapsed = now.saturating_since(at).as_secs_f64();
                let weight = 1.0 - (-elapsed / LENDING_MEMORY.as_secs_f64()).exp();
                average + weight * (mu - average)
            }
            None => mu,
        };
        self.lending_mu = Some((mu, now));
        let demands: Vec<Option<f64>> = shares
            .iter()
            .map(|(id, _)| {
                let offered = self.sources.peek(*id).and_then(|s| s.offered_rate);
                offered.map(|rate| rate / mu)
            })
            .collect();
        fairness::lend_unwanted(shares, &demands, mu * horizon, margin)
    }

    /// The sessions in flight each of `shares`' sources gets back in its window: what it
    /// reports ([`capped_in_flight`]), scaled down to the rate it may send at. A source
    /// keeps as many in flight as its rate times the round trip, so its report alone would
    /// keep any rate going, the excess too; scaled to the larger of its share of `mu` and
    /// what the others leave of it, the report covers the link at that rate only.
    pub fn in_flight_allowances(
        &mut self,
        now: Time,
        shares: &[(NeighbourId, f64)],
        mu: f64,
    ) -> Vec<f64> {
        self.sample_demand(now);
        let rate = |id: &NeighbourId| self.demand.get(id).and_then(|d| d.rate);
        let total: f64 = shares.iter().filter_map(|(id, _)| rate(id)).sum();
        shares
            .iter()
            .map(|(id, share)| {
                let Some(reported) = self.sources.peek(*id).and_then(|s| s.in_flight) else {
                    return 0.0;
                };
                let in_flight = capped_in_flight(Some(reported), mu);
                match rate(id) {
                    Some(r) if r > 0.0 => {
                        let allowed = (mu * share).max(mu - (total - r));
                        in_flight * (allowed / r).min(1.0)
                    }
                    _ => in_flight,
                }
            })
            .collect()
    }

    /// Every active source's share under the configured fairness.
    pub fn shares(&mut self, now: Time) -> Vec<(NeighbourId, f64)> {
        self.shares_of(now, None)
    }

    /// As [`Self::shares`], for shares of `split_rate` sessions/s: max-min fairness then
    /// judges the sources' parts against it too (see [`fairness::max_min_shares`]).
    pub fn shares_of(&mut self, now: Time, split_rate: Option<f64>) -> Vec<(NeighbourId, f64)> {
        self.sources.expire(now);
        if self.fairness == Fairness::MaxMin {
            self.sample_demand(now);
            let demand = &self.demand;
            let usage: Vec<fairness::Usage> = self
                .sources
                .iter()
                .map(|(id, _)| {
                    let d = demand.get(&id);
                    let rate = d.and_then(|d| d.rate);
                    fairness::Usage {
                        id,
                        rate,
                        rate_sd: rate.map_or(0.0, demand_rate_sd),
                        share: d.and_then(|d| d.share),
                    }
                })
                .collect();
            let shares = fairness::max_min_shares(&usage, split_rate);
            for (id, share) in &shares {
                if let Some(d) = self.demand.get_mut(id) {
                    d.share = Some(*share);
                }
            }
            return shares;
        }
        let loads: Vec<(NeighbourId, Option<f64>)> = self
            .sources
            .iter()
            .map(|(id, s)| (id, s.offered_rate))
            .collect();
        fairness::shares(self.fairness, &loads)
    }

    pub fn metrics(&self, control_value: Option<f64>) -> ReceiverMetrics {
        ReceiverMetrics {
            service_rate: self.estimator.service_rate(),
            session_length: Some(self.estimator.session_length()),
            sessions_in_system: Some(self.estimator.sessions_in_system()),
            occupancy: self.estimator.occupancy(),
            active_sources: self.sources.len(),
            sources_turned_away: self.sources.turned_away(),
            control_value,
        }
    }
}

/// How long the service rate that lending compares the sources' demands with is averaged.
pub const LENDING_MEMORY: Duration = Duration::from_secs(2);

/// A window as carried in feedback: never negative, never beyond `u32`.
/// The longest round trip to an SE whose sessions in flight a window covers.
pub const MAX_PIPE: Duration = Duration::from_millis(500);

/// Share of the RE's queue a delay budget may fill when held to it: the rest absorbs the
/// Poisson bursts and the step of feedback lag before a lowered rate or window takes
/// effect.
pub const QUEUE_BUDGET_SHARE: f64 = 0.5;

/// `D_B` in seconds, held to [`QUEUE_BUDGET_SHARE`] of the work a queue of `queue`
/// messages holds at the estimated `μ` and `L_sess` (`None`: the budget as configured).
/// Shen et al.'s 200 ms assumes a queue of a second's work (500 messages at 2 ms); in
/// front of a queue that holds less, the budget overflows it and every drop at the full
/// queue is a retransmission later.
pub(crate) fn queue_bounded_budget(
    budget: Duration,
    estimator: &SessionEstimator,
    queue: Option<f64>,
) -> f64 {
    queue_share_budget(budget, estimator, queue, QUEUE_BUDGET_SHARE)
}

/// [`queue_bounded_budget`] with another share of the queue than [`QUEUE_BUDGET_SHARE`].
pub(crate) fn queue_share_budget(
    budget: Duration,
    estimator: &SessionEstimator,
    queue: Option<f64>,
    queue_share: f64,
) -> f64 {
    let b = budget.as_secs_f64();
    let mu = estimator.control_service_rate();
    let messages_per_session = estimator.session_length().max(1.0);
    match queue {
        Some(q) if mu > 0.0 => b.min(queue_share * q / (messages_per_session * mu)),
        _ => b,
    }
}

/// The sessions a source last reported in flight, held to what [`MAX_PIPE`] of service at
/// `mu` sessions/s could have sent: a report is as easily forged as the request carrying
/// it, and this bounds what one forged report can open.
pub(crate) fn capped_in_flight(reported: Option<f64>, mu: f64) -> f64 {
    reported.map_or(0.0, |f| f.min(mu * MAX_PIPE.as_secs_f64()))
}

pub(crate) fn advertised(window: i64) -> u32 {
    window.clamp(0, i64::from(u32::MAX)) as u32
}

/// Any RE feedback algorithm, chosen at run time from a config.
// One long-lived instance per RE: boxing the larger variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum AnyFeedbackGenerator {
    None(NoFeedback),
    WinDisc(WinDisc),
    WinCont(WinCont),
    WinAuto(WinAuto),
    RateAbs(RateAbs),
    RateOcc(RateOcc),
    LoadReport(LoadReport),
}

macro_rules! dispatch {
    ($self:ident, $g:ident => $e:expr) => {
        match $self {
            AnyFeedbackGenerator::None($g) => $e,
            AnyFeedbackGenerator::WinDisc($g) => $e,
            AnyFeedbackGenerator::WinCont($g) => $e,
            AnyFeedbackGenerator::WinAuto($g) => $e,
            AnyFeedbackGenerator::RateAbs($g) => $e,
            AnyFeedbackGenerator::RateOcc($g) => $e,
            AnyFeedbackGenerator::LoadReport($g) => $e,
        }
    };
}

impl FeedbackGenerator for AnyFeedbackGenerator {
    fn on_arrival(&mut self, now: Time, message: &MessageSummary) {
        dispatch!(self, g => g.on_arrival(now, message));
    }
    fn on_feed_forward(&mut self, now: Time, from: NeighbourId, feed_forward: FeedForward) {
        dispatch!(self, g => g.on_feed_forward(now, from, feed_forward));
    }
    fn on_in_flight(&mut self, now: Time, from: NeighbourId, sessions: f64) {
        dispatch!(self, g => g.on_in_flight(now, from, sessions));
    }
    fn on_memory(&mut self, now: Time, occupancy: f64) {
        dispatch!(self, g => g.on_memory(now, occupancy));
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        dispatch!(self, g => g.on_queue(now, queue));
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        dispatch!(self, g => g.on_processed(now, completion));
    }
    fn feedback_for(&mut self, now: Time, neighbour: NeighbourId) -> Option<Feedback> {
        dispatch!(self, g => g.feedback_for(now, neighbour))
    }
    fn handle_timeout(&mut self, now: Time) {
        dispatch!(self, g => g.handle_timeout(now));
    }
    fn poll_timeout(&self) -> Option<Time> {
        dispatch!(self, g => g.poll_timeout())
    }
    fn metrics(&self) -> ReceiverMetrics {
        dispatch!(self, g => g.metrics())
    }
}

/// The discrete control interval `T_c` that win-disc, rate-abs and rate-occ act on, beside
/// the estimator's measurement interval `T_m`: when the next control step is due.
#[derive(Clone, Debug)]
pub(crate) struct ControlClock {
    interval: std::time::Duration,
    next: Time,
}

impl ControlClock {
    /// The first step is one interval after `now`; zero intervals are raised to the minimum.
    pub(crate) fn new(interval: std::time::Duration, now: Time) -> Self {
        let interval = crate::estimation::sane_interval(interval);
        Self {
            interval,
            next: now + interval,
        }
    }

    /// Whether a control step is due at `now`; if so, the next one is scheduled.
    pub(crate) fn due(&mut self, now: Time) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + self.interval;
        true
    }

    pub(crate) fn deadline(&self) -> Time {
        self.next
    }

    /// Moves the next step to `next`, for a step that shortens its own interval.
    pub(crate) fn reschedule(&mut self, next: Time) {
        self.next = next;
    }

    pub(crate) fn interval(&self) -> std::time::Duration {
        self.interval
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::types::{Completion, MessageSummary, NeighbourId};
    use std::time::Duration;

    /// A message source as `MessageSummary` holds it.
    #[allow(clippy::unnecessary_wraps)]
    pub fn se(id: u32) -> Option<NeighbourId> {
        Some(NeighbourId(id))
    }

    pub fn processed(message: MessageSummary, accepted: bool) -> Completion {
        Completion {
            message,
            service_time: Duration::from_millis(2),
            queueing_delay: Duration::ZERO,
            session_accepted: accepted,
        }
    }

    pub fn window_of(fb: Option<crate::types::Feedback>) -> u32 {
        match fb.map(|f| f.value) {
            Some(crate::types::FeedbackValue::Window(w)) => w,
            other => panic!("expected window feedback, got {other:?}"),
        }
    }
}
