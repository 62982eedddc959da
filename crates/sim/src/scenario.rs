//! What a run simulates: the model of Shen, Schulzrinne & Nahum 2008, §4.2, with every
//! number a field defaulted to the paper's value, plus the §6.2 dynamic load steps.
//!
//! Topology (Figure 2): `sources` caller populations, each behind its own edge proxy (SE),
//! all feeding one receiving proxy (RE) in front of one callee population. An empty TOML
//! table is the paper's steady-load setup at offered load 1.
//!
//! The RE and the SEs are sluice proxies: `[re]` and `[se]` are the tables an operator
//! writes for `sluice proxy` ([`ProxyConfig`]), read over the paper's defaults (a table
//! that names one field keeps the others). The simulator fills in only the wiring:
//! addresses, next hops, the RE's neighbours and the hop-by-hop roles (the RE feeds back
//! when its `control.algorithm` is a feedback algorithm; every SE enforces what it gets).
//! Everything else here (callers, links, timers of the user agents, the run) is the
//! simulator's own.

use serde::{Deserialize, Deserializer, Serialize};
use sluice_control::overload::OcAlgorithm;
use sluice_proxy_core::{HopRole, ProxyConfig, SipTimers};

use std::net::SocketAddr;

/// Most sources a scenario may have (each needs an address and two nodes).
pub const MAX_SOURCES: usize = 1000;
/// Largest RE queue accepted (messages).
pub const MAX_QUEUE: u32 = 10_000_000;
/// Largest session description accepted (bytes): with the headers, an INVITE stays
/// within the proxies' default message limits (`max_datagram`, 8 KiB).
pub const MAX_BODY: usize = 6000;
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
    /// The receiving entity, a `sluice proxy` configuration over [`Scenario::paper_re`].
    #[serde(deserialize_with = "paper_re")]
    pub re: ProxyConfig,
    /// Every SE, a `sluice proxy` configuration over [`Scenario::paper_se`].
    #[serde(deserialize_with = "paper_se")]
    pub se: ProxyConfig,
    pub call: CallConfig,
    pub link: LinkConfig,
    /// RFC 3261 timers of the callers and callees (each proxy has its own, `re.sip` and
    /// `se.sip`).
    pub sip: SipTimers,
    /// SIP over TCP: the callers' transport and the sockets' defaults. Which proxy hops run
    /// over TCP is the proxies' own `tcp.to_next_hops` (`se` for SE → RE, `re` for RE →
    /// callees); the callees answer on the connection a request came in on.
    pub tcp: TcpModel,
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
            re: Scenario::paper_re(),
            se: Scenario::paper_se(),
            call: CallConfig::default(),
            link: LinkConfig::default(),
            sip: SipTimers::default(),
            tcp: TcpModel::default(),
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

fn paper_re<'de, D: Deserializer<'de>>(d: D) -> Result<ProxyConfig, D::Error> {
    over_defaults(d, &Scenario::paper_re())
}

fn paper_se<'de, D: Deserializer<'de>>(d: D) -> Result<ProxyConfig, D::Error> {
    over_defaults(d, &Scenario::paper_se())
}

/// A proxy table read over `defaults`, so that `re = { queue_capacity = 100 }` keeps the
/// paper's processor. Unknown fields are still errors.
fn over_defaults<'de, D: Deserializer<'de>>(
    d: D,
    defaults: &ProxyConfig,
) -> Result<ProxyConfig, D::Error> {
    use serde::de::Error;
    let over = toml::Table::deserialize(d)?;
    let mut table = toml::Table::try_from(defaults).map_err(D::Error::custom)?;
    deep_merge(&mut table, &over);
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| D::Error::custom(e.message()))
}

/// Merges `over` into `base`: tables merge key by key, anything else replaces.
pub(crate) fn deep_merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => deep_merge(b, o),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
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
    /// Bytes of session description in each INVITE and its 200 OK (0: none). Only its
    /// size matters, for how many messages a TCP buffer holds: Shen and Schulzrinne 2010
    /// (§5) reckon an INVITE at about 1 KB.
    pub body_bytes: usize,
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
            body_bytes: 0,
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

/// The simulator's side of SIP over TCP (`crate::tcp`; Shen and Schulzrinne 2010).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpModel {
    /// The callers reach their SE over TCP, one connection each.
    pub callers: bool,
    /// SO_SNDBUF, bytes, of the user agents and of every proxy socket its `tcp` table
    /// leaves at 0. Every size here is what setsockopt asks, as the live shell sets it;
    /// Linux doubles it (socket(7)), so half the kernel's default of §4.2, 16 KB, is 8 KB.
    pub send_buffer: usize,
    /// SO_RCVBUF, bytes, likewise: half the 85 KB (87,380 bytes) of §4.2, whose window
    /// Linux then put at 64 KB.
    pub receive_buffer: usize,
    /// Bytes a user agent queues in user space per connection when its send buffer is
    /// full; a message that does not fit is dropped (the proxies have `tcp.write_queue_bytes`).
    pub ua_write_queue: usize,
    /// Largest TCP segment, bytes: the Ethernet of the paper's testbed (§4) gives 1,460.
    /// The simulator's streams have no segments; the live bench gives it to every proxy
    /// whose `tcp.max_segment_size` is 0, since loopback's 64 KiB segments do not fit the
    /// windows of minimised buffers (see `TcpConfig::max_segment_size`).
    pub segment_size: usize,
}

impl Default for TcpModel {
    fn default() -> Self {
        Self {
            callers: false,
            send_buffer: 8 * 1024,
            receive_buffer: 43_690,
            ua_write_queue: 1 << 20,
            segment_size: 1460,
        }
    }
}

impl TcpModel {
    /// Smallest socket buffer accepted, bytes.
    pub const MIN_BUFFER: usize = 256;
    /// Largest socket buffer accepted, bytes.
    pub const MAX_BUFFER: usize = 1 << 30;
}

/// The topology's, whatever the table said: a proxy listens where the topology puts it
/// and sends new requests to the next node.
fn wire_addresses(c: &mut ProxyConfig, listen: SocketAddr, next: SocketAddr) {
    c.listen = listen;
    c.advertise = None;
    c.next_hop = Some(next);
    c.admin = None;
    c.duration_s = None;
    if c.overload.server.epoch_secs == 0 {
        // The live shell numbers from the wall clock; a fixed instant of the same size
        // keeps the output deterministic and the Via parameters it numbers as long as live.
        c.overload.server.epoch_secs = SIMULATED_EPOCH_SECS;
    }
}

/// The UNIX time the simulated proxies number their overload sequences from (2026-09).
const SIMULATED_EPOCH_SECS: u64 = 1_790_000_000;

/// SplitMix64's finaliser: mixes seeds so that related inputs give unrelated streams.
pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
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
    /// The paper's RE (§4.2): a FIFO of 500 messages in front of one processor that serves
    /// 500 messages a second (2 ms each) and answers a new INVITE with 503 in 1/3000 s; no
    /// control. As in the papers' servers, every retransmission reaches the processor.
    pub fn paper_re() -> ProxyConfig {
        let mut re = ProxyConfig {
            queue_capacity: 500,
            cost_forward_us: 2000.0,
            cost_reject_us: 1.0e6 / 3000.0,
            cost_other_us: None,
            drop_waiting_retransmissions: false,
            ..ProxyConfig::default()
        };
        // The papers' controllers as published, without sluice's additions: no threshold
        // backstop behind the feedback, the local controls' marks in messages without a
        // work mark, rate-occ lowering `f` however short the queue, the equal split of
        // §6.1.1 for rate-abs too and with nothing lent between the windows' SEs,
        // rate-abs's budget as configured, the PI's queue loop pacing from the first
        // INVITE and its INVITE queue bounded by its capacity alone, windows fed back
        // without the echo that takes the sessions in flight off them.
        re.control.backstop = false;
        re.control.threshold.work_mark = Some(std::time::Duration::ZERO);
        re.control.ohta.work_mark = Some(std::time::Duration::ZERO);
        re.control.red.work_mark = Some(std::time::Duration::ZERO);
        re.control.occ.work_mark = Some(std::time::Duration::ZERO);
        re.control.rate_occ.queue_gate = Some(std::time::Duration::ZERO);
        re.control.fairness = Some(sluice_control::Fairness::ProviderCentric);
        re.control.queue_bounded_budget = false;
        re.control.lend_unused_share = false;
        re.control.pi.work_conserving = false;
        re.control.pi.work_mark = Some(std::time::Duration::ZERO);
        re.overload.server.window_acks = false;
        re
    }

    /// The paper's SEs (§4.2): infinite capacity (no emulated cost), enforcing feedback as
    /// the paper pairs it with the algorithm (§2.4.2) by offering, in this order, the
    /// window extension (win-*), the rate extension with its percentage throttle
    /// (rate-abs), the load report for the fuzzy window (Montazerolghaem & Yaghmaee) and
    /// RFC 7339's loss (rate-occ's acceptance fraction as a percentage); a blocked session
    /// rejected at once; feed-forward only where an experiment turns double feed on.
    pub fn paper_se() -> ProxyConfig {
        let mut se = ProxyConfig::default();
        se.overload.client.feed_forward = false;
        se.overload.client.blocking = Some(sluice_control::BlockingMode::Discard);
        se.overload.client.algorithms = vec![
            OcAlgorithm::SluiceWindow,
            OcAlgorithm::SluiceRate,
            OcAlgorithm::SluiceLoad,
            OcAlgorithm::Loss,
        ];
        se
    }

    /// The RE wired into a topology: listening at `listen`, sending new requests to the
    /// callees at `next_hop`, its seed mixed with the run's, and, with a feedback
    /// algorithm, the receiving entity for the SEs at `ses`. The simulator wires it to its
    /// address plan; the live bench to loopback sockets.
    pub fn re_proxy(
        &self,
        listen: SocketAddr,
        next_hop: SocketAddr,
        ses: &[SocketAddr],
    ) -> ProxyConfig {
        let mut re = self.re.clone();
        wire_addresses(&mut re, listen, next_hop);
        re.control.seed = splitmix(self.seed ^ splitmix(re.control.seed));
        if !re.control.algorithm.is_local() {
            re.overload.role = HopRole::Re;
            re.overload.neighbours = ses.to_vec();
        }
        re
    }

    /// SE `i` wired into a topology: listening at `listen`, the RE at `next_hop`, the
    /// sending entity's role, and a seed of its own.
    pub fn se_proxy(&self, i: usize, listen: SocketAddr, next_hop: SocketAddr) -> ProxyConfig {
        let mut se = self.se.clone();
        wire_addresses(&mut se, listen, next_hop);
        se.control.seed = splitmix(self.seed ^ splitmix(se.control.seed) ^ splitmix(i as u64 + 1));
        se.overload.role = HopRole::Se;
        se.overload.next_hops.clear();
        se
    }

    /// The same model at `capacity` calls/s: the RE's costs divided and its queues
    /// multiplied by `capacity / capacity_cps()`, so every queue holds the same seconds of
    /// work, β is unchanged and the control's time parameters keep their meaning (how the
    /// live bench runs an experiment at its testbed's capacity).
    pub fn scale_to_capacity(&mut self, capacity: f64) {
        let k = capacity / self.capacity_cps();
        if !(k.is_finite() && k > 0.0) {
            return;
        }
        let re = &mut self.re;
        re.cost_forward_us /= k;
        re.cost_reject_us /= k;
        re.cost_other_us = re.cost_other_us.map(|c| c / k);
        let scaled = |n: usize| ((n as f64) * k).round().max(1.0) as usize;
        re.queue_capacity = scaled(re.queue_capacity);
        re.invite_queue_capacity = scaled(re.invite_queue_capacity);
        // The application buffer holds the queue's TCP messages, so it scales with it;
        // the sockets' buffers do not (the kernel's, and what buffer minimisation sets).
        re.tcp.application_buffer = scaled(re.tcp.application_buffer);
    }

    /// The algorithm the SEs and the RE agree on for the RE's feedback (RFC 7339 §5.2:
    /// the first the SEs offer that the RE's algorithm can be carried in), or `None` if the
    /// RE feeds nothing back or they have none in common.
    pub fn wire(&self) -> Option<OcAlgorithm> {
        let carried = self.re.control.algorithm.wire_algorithms();
        let offered = &self.se.overload.client.algorithms;
        // RFC 7339 §4.2: `loss` is always offered, last if not listed (as the client does).
        offered
            .iter()
            .chain(std::iter::once(&OcAlgorithm::Loss))
            .find(|a| carried.contains(a))
            .copied()
    }

    /// Nominal capacity in calls per second: the RE's processor time for one call, the
    /// INVITE and the other messages it processes per call (Shen et al.: 7 messages at
    /// 2 ms, 500 / 7 ≈ 71.4; the paper rounds it to 72; De Cicco et al.: the INVITE's
    /// cost alone).
    pub fn capacity_cps(&self) -> f64 {
        self.re
            .emulated_capacity_cps(f64::from(self.call.messages_per_call() - 1))
            .unwrap_or(f64::INFINITY)
    }

    /// The ratio of the RE's processing cost of a forwarded call to that of a call it
    /// rejects (its 503 and the ACK for it): De Cicco et al.'s `β` measured over whole
    /// calls, the `β` of the optimal-goodput bound `g_opt(r)` (their eq. 2).
    pub fn effective_beta(&self) -> f64 {
        self.re
            .emulated_beta(f64::from(self.call.messages_per_call() - 1), 1.0)
            .unwrap_or(f64::INFINITY)
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
        if self.re.queue_capacity > MAX_QUEUE as usize
            || self.re.invite_queue_capacity > MAX_QUEUE as usize
        {
            return Err(format!("re queues must hold at most {MAX_QUEUE} messages"));
        }
        if self.re.native_speed() || self.re.cost_forward_us <= 0.0 {
            return Err(
                "re.cost_forward_us must be > 0: the RE's emulated processor is the capacity"
                    .to_owned(),
            );
        }
        // Wired to placeholder addresses: what is checked is the tables, not the plan.
        let somewhere = SocketAddr::from(([192, 0, 2, 1], 5060));
        self.re_proxy(somewhere, somewhere, &vec![somewhere; self.sources.len()])
            .validate()
            .map_err(|e| format!("re: {e}"))?;
        self.se_proxy(0, somewhere, somewhere)
            .validate()
            .map_err(|e| format!("se: {e}"))?;
        if !self.se.control.algorithm.is_local() {
            return Err(format!(
                "se.control.algorithm {} computes feedback: only the RE feeds back",
                self.se.control.algorithm
            ));
        }
        // Zero is Shen and Schulzrinne 2010's load (§4.3): the BYE right after the ACK.
        finite_at_least("call.holding_time_s", self.call.holding_time_s, 0.0)?;
        positive("call.setup_deadline_s", self.call.setup_deadline_s)?;
        if self.call.setup_deadline_s > MAX_DURATION_S {
            return Err("call.setup_deadline_s is unreasonably large".to_owned());
        }
        if self.call.body_bytes > MAX_BODY {
            return Err(format!(
                "call.body_bytes = {}: allowed up to {MAX_BODY}",
                self.call.body_bytes
            ));
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
        self.sip.validate().map_err(|e| format!("sip.{e}"))?;
        self.validate_tcp()?;
        let expected_calls = self.expected_calls();
        if expected_calls > MAX_EXPECTED_CALLS {
            return Err(format!(
                "the run would generate about {expected_calls:.0} calls, more than the {MAX_EXPECTED_CALLS:.0} supported; shorten it or lower the load"
            ));
        }
        Ok(())
    }

    fn validate_tcp(&self) -> Result<(), String> {
        let range = TcpModel::MIN_BUFFER..=TcpModel::MAX_BUFFER;
        let sized = |name: &str, v: usize, zero_ok: bool| {
            if (zero_ok && v == 0) || range.contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{name} = {v}: allowed {}{} to {} bytes",
                    if zero_ok { "0 (the default) or " } else { "" },
                    TcpModel::MIN_BUFFER,
                    TcpModel::MAX_BUFFER,
                ))
            }
        };
        sized("tcp.send_buffer", self.tcp.send_buffer, false)?;
        sized("tcp.receive_buffer", self.tcp.receive_buffer, false)?;
        if self.tcp.ua_write_queue > TcpModel::MAX_BUFFER {
            return Err(format!(
                "tcp.ua_write_queue = {}: allowed up to {} bytes",
                self.tcp.ua_write_queue,
                TcpModel::MAX_BUFFER
            ));
        }
        let segment_sizes = sluice_proxy_core::TcpConfig::SEGMENT_SIZES;
        if !segment_sizes.contains(&self.tcp.segment_size) {
            return Err(format!(
                "tcp.segment_size = {}: allowed {} to {} bytes",
                self.tcp.segment_size,
                segment_sizes.start(),
                segment_sizes.end()
            ));
        }
        for (who, t) in [("re", &self.re.tcp), ("se", &self.se.tcp)] {
            for (key, v) in [
                ("listen_send_buffer", t.listen_send_buffer),
                ("listen_receive_buffer", t.listen_receive_buffer),
                (
                    "invite_connection_receive_buffer",
                    t.invite_connection_receive_buffer,
                ),
                ("next_hop_send_buffer", t.next_hop_send_buffer),
                ("next_hop_receive_buffer", t.next_hop_receive_buffer),
            ] {
                sized(&format!("{who}.tcp.{key}"), v, true)?;
            }
        }
        if (self.tcp.callers && !self.se.tcp.listen)
            || (self.se.tcp.to_next_hops && !self.re.tcp.listen)
        {
            return Err("a proxy that a hop reaches over TCP needs tcp.listen = true".to_owned());
        }
        Ok(())
    }

    /// Whether any hop runs over TCP.
    pub fn uses_tcp(&self) -> bool {
        self.tcp.callers || self.se.tcp.to_next_hops || self.re.tcp.to_next_hops
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
