//! What a run simulates: the model of Shen, Schulzrinne & Nahum 2008, §4.2, with every
//! number a field defaulted to the paper's value, plus the §6.2 dynamic load steps.
//!
//! Topology (Figure 2): `sources` caller populations, each behind its own edge proxy (SE),
//! all feeding one receiving proxy (RE) in front of one callee population. An empty TOML
//! table is the paper's steady-load setup at offered load 1.

use serde::{Deserialize, Serialize};
use sluice_control::{Algorithm, ControlConfig};

/// Most sources a scenario may have (each needs an address and two nodes).
pub const MAX_SOURCES: usize = 1000;
/// Largest RE queue accepted (messages).
pub const MAX_QUEUE: u32 = 10_000_000;
/// Longest simulated run accepted, in seconds (about 11.5 days).
pub const MAX_DURATION_S: f64 = 1.0e6;
/// Most calls a run may expect to generate (`offered rate × run length`); the call
/// ledger keeps a few dozen bytes per call.
pub const MAX_EXPECTED_CALLS: f64 = 5.0e7;

/// One simulated run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random stream in the run (arrivals, holding times, link loss, and
    /// mixed into `control.seed` for the controllers' own draws).
    pub seed: u64,
    /// Simulated seconds of arrivals that count. The run itself continues for
    /// `call.setup_deadline_s` more (arrivals continuing, nothing counted) so the last
    /// calls of the window can finish setting up.
    pub duration_s: f64,
    /// Summary metrics count calls started in `[warmup_s, duration_s)`.
    pub warmup_s: f64,
    /// Total offered load normalised to [`Scenario::capacity_cps`], split over the
    /// sources without a schedule in proportion to their `share`.
    pub offered_load: f64,
    pub sources: Vec<SourceConfig>,
    pub re: ReConfig,
    pub control: ControlConfig,
    pub call: CallConfig,
    pub link: LinkConfig,
    pub sip: SipTimers,
    /// Fill [`crate::RunReport::timeseries`] with 1 s bins.
    pub timeseries: bool,
    /// Fill [`crate::RunReport::control_trace`] with 10 ms bins (for `sluice tune`).
    pub control_trace: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            seed: 1,
            duration_s: 600.0,
            warmup_s: 100.0,
            offered_load: 1.0,
            sources: (1..=3)
                .map(|i| SourceConfig {
                    name: format!("UA{i}"),
                    share: 1.0,
                    schedule: Vec::new(),
                })
                .collect(),
            re: ReConfig::default(),
            control: ControlConfig::default(),
            call: CallConfig::default(),
            link: LinkConfig::default(),
            sip: SipTimers::default(),
            timeseries: false,
            control_trace: false,
        }
    }
}

/// A caller population (paper: a UA standing for infinitely many callers) and its SE.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    pub name: String,
    /// Weight of this source in `offered_load` (ignored when `schedule` is set).
    pub share: f64,
    /// Piecewise-constant load: from `at_s` on the source offers `load` (normalised to
    /// capacity) until the next step. Before the first step it offers nothing. Empty:
    /// a constant share of `offered_load`.
    pub schedule: Vec<LoadStep>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            name: "UA".to_owned(),
            share: 1.0,
            schedule: Vec::new(),
        }
    }
}

/// One step of a source's load schedule (§6.2, Figure 23).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadStep {
    pub at_s: f64,
    /// Normalised load from `at_s` on; 0 means the source leaves.
    pub load: f64,
}

/// The overloaded server (§4.2): a bounded FIFO in front of one processor.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReConfig {
    /// Messages the queue holds, not counting the one in service (paper: 500).
    pub queue_capacity: u32,
    /// Messages processed per second (paper: 500).
    pub service_rate_mps: f64,
    /// New INVITEs answered with a 503 per second (paper: 3000).
    pub reject_rate_mps: f64,
    /// De Cicco et al.'s cost model (§IV-A, eq. 1): processor time to forward an INVITE,
    /// milliseconds. Unset: `1 / service_rate_mps`, like every other message.
    pub invite_cost_ms: Option<f64>,
    /// Processor time for any other message (responses, ACK, BYE), milliseconds. Unset:
    /// `1 / service_rate_mps`. De Cicco et al. count only INVITEs (0 here).
    pub other_cost_ms: Option<f64>,
    /// `β > 1`, the cost of forwarding an INVITE over the cost of rejecting it: a 503
    /// costs `invite cost / β`. Unset: `1 / reject_rate_mps` (Shen et al.).
    pub beta: Option<f64>,
    /// The processing structure of De Cicco et al. §V: admitted INVITEs wait in their own
    /// drop-tail FIFO of `invite_queue_capacity`, and every other message, and INVITEs
    /// rejected on arrival, are served ahead of it (Kamailio handles them synchronously).
    /// `pi` drains that queue at its rate `u(t)`; other policies drain it whenever the
    /// processor is free. `false`: one FIFO for everything (Shen et al. §4.2).
    pub invite_queue: bool,
    /// `q_M`, INVITEs the INVITE queue holds (paper: 800; Ohta's setting: 1000).
    pub invite_queue_capacity: u32,
    /// `d`, the share of the processor other processes take (eq. 1), in `[0, 1)`: a job
    /// of `d × 10 ms` every 10 ms, served ahead of the INVITE queue.
    pub background_load: f64,
}

impl Default for ReConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 500,
            service_rate_mps: 500.0,
            reject_rate_mps: 3000.0,
            invite_cost_ms: None,
            other_cost_ms: None,
            beta: None,
            invite_queue: false,
            invite_queue_capacity: 800,
            background_load: 0.0,
        }
    }
}

impl ReConfig {
    /// Processor time to forward an INVITE, seconds.
    pub fn invite_cost_s(&self) -> f64 {
        self.invite_cost_ms
            .map_or(1.0 / self.service_rate_mps, |ms| ms / 1000.0)
    }

    /// Processor time for any message but an INVITE, seconds.
    pub fn other_cost_s(&self) -> f64 {
        self.other_cost_ms
            .map_or(1.0 / self.service_rate_mps, |ms| ms / 1000.0)
    }

    /// Processor time to answer an INVITE with a 503, seconds.
    pub fn reject_cost_s(&self) -> f64 {
        self.beta
            .map_or(1.0 / self.reject_rate_mps, |b| self.invite_cost_s() / b)
    }
}

/// Callers and callees (§4.2).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallConfig {
    /// Mean of the exponential call holding time (paper: 30 s).
    pub holding_time_s: f64,
    /// A call is good when its five setup messages got through within this (paper: 10 s).
    pub setup_deadline_s: f64,
    /// The callee answers an INVITE with 100 Trying before 180 and 200 (the paper's
    /// seven messages per call at the RE); `false` leaves six.
    pub callee_sends_trying: bool,
    /// How calls arrive: `poisson` (the paper's callers) or `constant`, evenly spaced
    /// at the offered rate like SIPp's `-r` (De Cicco et al.'s testbed).
    pub arrivals: ArrivalProcess,
}

/// The callers' arrival process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    #[default]
    Poisson,
    Constant,
}

impl Default for CallConfig {
    fn default() -> Self {
        Self {
            holding_time_s: 30.0,
            setup_deadline_s: 10.0,
            callee_sends_trying: true,
            arrivals: ArrivalProcess::Poisson,
        }
    }
}

impl CallConfig {
    /// Messages the RE processes for one successful call: INVITE, (100), 180, 200, ACK,
    /// BYE, 200 (§2.1).
    pub fn messages_per_call(&self) -> u32 {
        6 + u32::from(self.callee_sends_trying)
    }
}

/// Every hop (caller–SE, SE–RE, RE–callee) has this delay and loss. "Forward" is towards
/// the callee, "backward" towards the caller; the `backward_*` fields default to the
/// forward values. Paper: no delay, no loss (§4.2).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// One-way delay, milliseconds.
    pub delay_ms: f64,
    /// Probability that a datagram is lost, in `[0, 1)`.
    pub loss: f64,
    pub backward_delay_ms: Option<f64>,
    pub backward_loss: Option<f64>,
}

/// RFC 3261 timer values for every transaction layer in the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SipTimers {
    pub t1_ms: f64,
    pub t2_ms: f64,
    pub t4_ms: f64,
}

impl Default for SipTimers {
    fn default() -> Self {
        Self {
            t1_ms: 500.0,
            t2_ms: 4000.0,
            t4_ms: 5000.0,
        }
    }
}

fn finite_at_least(name: &str, v: f64, min: f64) -> Result<(), String> {
    if v.is_finite() && v >= min {
        Ok(())
    } else {
        Err(format!("{name} must be a finite number >= {min}, got {v}"))
    }
}

fn positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be a finite number > 0, got {v}"))
    }
}

fn probability(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (0.0..1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("{name} must be in [0, 1), got {v}"))
    }
}

impl Scenario {
    /// Nominal capacity in calls per second: the service rate over the messages the RE
    /// processes per call (500 / 7 ≈ 71.4; the paper rounds it to 72).
    /// With De Cicco et al.'s costs, the INVITE's cost plus the other messages' costs.
    pub fn capacity_cps(&self) -> f64 {
        1.0 / self.call_cost_s()
    }

    /// Processor seconds one successful call takes at the RE.
    fn call_cost_s(&self) -> f64 {
        self.re.invite_cost_s()
            + f64::from(self.call.messages_per_call() - 1) * self.re.other_cost_s()
    }

    /// The ratio of the RE's processing cost of a forwarded call to that of a call it
    /// rejects (the 503 and the ACK for it): De Cicco et al.'s `β` measured over whole
    /// calls, the `β` of the optimal-goodput bound `g_opt(r)` (their eq. 2).
    pub fn effective_beta(&self) -> f64 {
        self.call_cost_s() / (self.re.reject_cost_s() + self.re.other_cost_s())
    }

    /// The run's end: the measurement window plus the setup deadline as grace.
    pub fn end_s(&self) -> f64 {
        self.duration_s + self.call.setup_deadline_s
    }

    /// Calls per second source `i` offers at time `t_s`.
    pub fn source_rate_cps(&self, i: usize, t_s: f64) -> f64 {
        let Some(src) = self.sources.get(i) else {
            return 0.0;
        };
        let cap = self.capacity_cps();
        if src.schedule.is_empty() {
            let total: f64 = self
                .sources
                .iter()
                .filter(|s| s.schedule.is_empty())
                .map(|s| s.share)
                .sum();
            if total > 0.0 {
                self.offered_load * cap * src.share / total
            } else {
                0.0
            }
        } else {
            src.schedule
                .iter()
                .take_while(|s| s.at_s <= t_s)
                .last()
                .map_or(0.0, |s| s.load * cap)
        }
    }

    /// Checks every field; the message names the first offending one.
    pub fn validate(&self) -> Result<(), String> {
        positive("duration_s", self.duration_s)?;
        if self.duration_s > MAX_DURATION_S {
            return Err(format!(
                "duration_s must be at most {MAX_DURATION_S}, got {}",
                self.duration_s
            ));
        }
        finite_at_least("warmup_s", self.warmup_s, 0.0)?;
        if self.warmup_s >= self.duration_s {
            return Err(format!(
                "warmup_s ({}) must be less than duration_s ({})",
                self.warmup_s, self.duration_s
            ));
        }
        finite_at_least("offered_load", self.offered_load, 0.0)?;
        if self.sources.is_empty() {
            return Err("sources must name at least one source".to_owned());
        }
        if self.sources.len() > MAX_SOURCES {
            return Err(format!(
                "at most {MAX_SOURCES} sources are supported, got {}",
                self.sources.len()
            ));
        }
        for (i, s) in self.sources.iter().enumerate() {
            let name = format!("sources[{i}] ({:?})", s.name);
            finite_at_least(&format!("{name}.share"), s.share, 0.0)?;
            let mut last = f64::NEG_INFINITY;
            for (k, step) in s.schedule.iter().enumerate() {
                finite_at_least(&format!("{name}.schedule[{k}].at_s"), step.at_s, 0.0)?;
                finite_at_least(&format!("{name}.schedule[{k}].load"), step.load, 0.0)?;
                if step.at_s <= last {
                    return Err(format!(
                        "{name}.schedule must be in strictly increasing at_s order (step {k})"
                    ));
                }
                last = step.at_s;
            }
        }
        let constant: Vec<&SourceConfig> = self
            .sources
            .iter()
            .filter(|s| s.schedule.is_empty())
            .collect();
        if !constant.is_empty()
            && self.offered_load > 0.0
            && constant.iter().map(|s| s.share).sum::<f64>() <= 0.0
        {
            return Err(
                "the sources without a schedule have zero total share, so offered_load cannot be split"
                    .to_owned(),
            );
        }
        if self.re.queue_capacity == 0 || self.re.queue_capacity > MAX_QUEUE {
            return Err(format!(
                "re.queue_capacity must be between 1 and {MAX_QUEUE}, got {}",
                self.re.queue_capacity
            ));
        }
        positive("re.service_rate_mps", self.re.service_rate_mps)?;
        positive("re.reject_rate_mps", self.re.reject_rate_mps)?;
        if 1.0e9 / self.re.service_rate_mps < 1.0 || 1.0e9 / self.re.reject_rate_mps < 1.0 {
            return Err("re service and reject rates must be below 1e9 per second".to_owned());
        }
        if let Some(ms) = self.re.invite_cost_ms {
            positive("re.invite_cost_ms", ms)?;
        }
        if let Some(ms) = self.re.other_cost_ms {
            finite_at_least("re.other_cost_ms", ms, 0.0)?;
        }
        for (name, ms) in [
            ("re.invite_cost_ms", self.re.invite_cost_ms),
            ("re.other_cost_ms", self.re.other_cost_ms),
        ] {
            if ms.is_some_and(|ms| ms > 1.0e6) {
                return Err(format!("{name} must be at most 1e6 ms"));
            }
        }
        if let Some(b) = self.re.beta {
            if !(b.is_finite() && b > 1.0 && b <= 1.0e6) {
                return Err(format!("re.beta must be a number in (1, 1e6], got {b}"));
            }
        }
        if self.re.invite_queue
            && (self.re.invite_queue_capacity == 0 || self.re.invite_queue_capacity > MAX_QUEUE)
        {
            return Err(format!(
                "re.invite_queue_capacity must be between 1 and {MAX_QUEUE}, got {}",
                self.re.invite_queue_capacity
            ));
        }
        if !(self.re.background_load.is_finite() && (0.0..1.0).contains(&self.re.background_load)) {
            return Err(format!(
                "re.background_load must be in [0, 1), got {}",
                self.re.background_load
            ));
        }
        if self.control.algorithm == Algorithm::Pi && !self.re.invite_queue {
            return Err(
                "control.algorithm = \"pi\" drains an INVITE queue: set re.invite_queue = true"
                    .to_owned(),
            );
        }
        positive("call.holding_time_s", self.call.holding_time_s)?;
        positive("call.setup_deadline_s", self.call.setup_deadline_s)?;
        if self.call.setup_deadline_s > MAX_DURATION_S {
            return Err("call.setup_deadline_s is unreasonably large".to_owned());
        }
        finite_at_least("link.delay_ms", self.link.delay_ms, 0.0)?;
        probability("link.loss", self.link.loss)?;
        if let Some(d) = self.link.backward_delay_ms {
            finite_at_least("link.backward_delay_ms", d, 0.0)?;
        }
        if let Some(l) = self.link.backward_loss {
            probability("link.backward_loss", l)?;
        }
        let max_delay_ms = self
            .link
            .delay_ms
            .max(self.link.backward_delay_ms.unwrap_or(0.0));
        if max_delay_ms > 1.0e6 {
            return Err("link delays must be at most 1e6 ms".to_owned());
        }
        for (name, v) in [
            ("sip.t1_ms", self.sip.t1_ms),
            ("sip.t2_ms", self.sip.t2_ms),
            ("sip.t4_ms", self.sip.t4_ms),
        ] {
            positive(name, v)?;
            if v > 1.0e7 {
                return Err(format!("{name} must be at most 1e7 ms, got {v}"));
            }
        }
        if self.sip.t2_ms < self.sip.t1_ms {
            return Err(format!(
                "sip.t2_ms ({}) must not be below sip.t1_ms ({})",
                self.sip.t2_ms, self.sip.t1_ms
            ));
        }
        self.control
            .validate()
            .map_err(|e| format!("control: {e}"))?;
        if self.control.algorithm == Algorithm::Threshold
            && self.control.threshold.high_watermark > self.re.queue_capacity as usize
        {
            return Err(format!(
                "control.threshold.high_watermark ({}) exceeds re.queue_capacity ({}): it would never trigger",
                self.control.threshold.high_watermark, self.re.queue_capacity
            ));
        }
        let expected_calls = self.expected_calls();
        if expected_calls > MAX_EXPECTED_CALLS {
            return Err(format!(
                "the run would generate about {expected_calls:.0} calls, more than the {MAX_EXPECTED_CALLS:.0} supported; shorten it or lower the load"
            ));
        }
        Ok(())
    }

    /// Roughly how many calls the whole run generates.
    fn expected_calls(&self) -> f64 {
        let end = self.end_s();
        let cap = self.capacity_cps();
        let mut total = 0.0;
        for (i, s) in self.sources.iter().enumerate() {
            if s.schedule.is_empty() {
                total += self.source_rate_cps(i, 0.0) * end;
            } else {
                for (k, step) in s.schedule.iter().enumerate() {
                    let until = s.schedule.get(k + 1).map_or(end, |n| n.at_s.min(end));
                    if until > step.at_s {
                        total += step.load * cap * (until - step.at_s);
                    }
                }
            }
        }
        total
    }
}
