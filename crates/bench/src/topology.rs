//! `sluice bench overload` in topology mode: Shen et al.'s hop-by-hop setting on loopback
//! sockets. N sluice UACs each call through their own sluice proxy as SE (role `se`,
//! native speed, next hop the RE) into one sluice proxy as RE (role `re`, emulated
//! capacity, neighbours = the SEs' addresses) in front of one sluice UAS:
//!
//! ```text
//! UAC 1 -> SE 1 \
//! UAC 2 -> SE 2 -> RE (emulated capacity, feedback) -> UAS
//! UAC 3 -> SE 3 /
//! ```
//!
//! ```text
//! sluice bench overload --ses 3 [--variants none,rate-abs/rate,rate-abs/loss,win-disc,win-cont,win-auto]
//!     [--capacity 300] [--loads 1,2,4,8,10] [--duration 20s --warmup 5s]
//! sluice bench overload --experiment experiments/shen2008-fig21.toml [--loads 1,2,4,8,10] [--duration 100s --warmup 20s]
//! ```
//!
//! A variant is `ALGORITHM[/WIRE]`: the RE's feedback algorithm (win-disc, win-cont,
//! win-auto, rate-abs, rate-occ) and what carries it to the SEs (`rate`: RFC 7415,
//! `loss`: RFC 7339, `sluicewin`: the window extension; default `rate` for rate-abs,
//! `loss` for rate-occ, `sluicewin` for windows), or `none` (no feedback: the RE drops at
//! its full queue), or a local control run at the RE (threshold, occ, ...). Topology mode
//! is on with `--ses`, with such variants, or with an experiment that has a feedback
//! variant.
//!
//! Cost model: Shen et al.'s, scaled. Every variant is a simulator scenario (the defaults
//! of `sluice_sim::Scenario`, or the experiment's), scaled to `--capacity` calls/s: the
//! RE's per-message costs are divided by `capacity / scenario capacity` and its queue
//! multiplied by it, so the queue holds the same *time* of work (500 messages at 2 ms = 1 s
//! in the paper; 2100 at 476 us here). That is what makes the RE collapse without control:
//! retransmission timers (T1 = 500 ms) fire against a queue that delays rather than drops.
//! Every message costs the same (7 per call: INVITE, 100, 180, 200, ACK, BYE, 200), a 503
//! one sixth of a message. Feedback parameters are in milliseconds and stay as they are.
//!
//! Offered load is split over the UACs by the sources' shares (equal by default). Arrivals
//! follow the scenario's process (Poisson, as the paper's callers). Goodput counts calls
//! whose ACK went out within 10 s of the INVITE, over all UACs, in the seconds after the
//! warm-up, normalised by the RE's emulated capacity. Setup delays are each UAC's
//! percentile over the calls it started after the warm-up, the largest over the UACs. The retransmission ratio
//! and occupancy are the RE's: retransmissions it saw / datagrams it received, and its
//! emulated processor's busy fraction, over the whole point. UAS 2xx retransmissions are
//! 200 OKs to INVITE the UAS had to resend (an ACK late or lost). series.csv has one row
//! per UAC (source `UA1`, ...) and second.
//!
//! The printed table adds `2xx win`, the retransmitted 2xx the UACs received in the
//! window (`uas2xx` is the UAS's count over the whole point, start-up included), and what
//! the caller-side goodput does not see: `unacked`, 2xx the
//! UAS gave up on (its ACK never came), and `no 180`, the share of answered calls whose
//! 180 never reached the caller. The simulator counts a call good only when all five
//! setup messages got through (the paper's definition, 180 included, which nobody
//! retransmits); `sluice load` counts it when its ACK went out within 10 s. `at UAS`
//! joins the two ends by Call-ID: the calls whose 180 and 200 reached the caller and whose
//! ACK reached the UAS within 10 s of the INVITE, the simulator's rule whole, which the
//! comparison with the simulator uses. Without
//! control the two part: the RE's full queue drops most arrivals, calls still complete
//! through retransmissions of the INVITE, 200 and ACK, but their 180s are lost, so the
//! simulator's none collapses where the live one, by the caller's count, may not.
//!
//! With `--experiment`, after the live sweep the same experiment runs in the simulator,
//! scaled to the same capacity (the live mapping above, so both run one configuration),
//! with the live call holding time and the live points' duration and warm-up (or
//! `--sim-duration` seconds a point, its first fifth warm-up); `live-vs-sim.svg`
//! draws both curves, and `comparison.csv` and the printed table give |live - sim| per
//! point against a tolerance of 0.05.
//!
//! Measured (3 SEs, 300 calls/s, loads 1-10, 20 s points with 5 s warm-up, release build,
//! two shared cores at load average 1.1-4.4): every feedback variant held
//! goodput at 0.93 to 1.00 except win-disc at 10x once (0.75 at load average 4.4; 1.00 in a
//! rerun). No control fell to 0.47 at 10x by the callers' count and to 0.15/0.08/0.02/0.01
//! at 2/4/8/10x by the paper's rule (`w/180`). In the measurement window no feedback
//! variant sent a 2xx retransmission at 10x; over the whole point rate-abs sent ~900-1000
//! in its first seconds (the SEs' clients start unlimited). Setup p99 at 10x (window) is
//! 200-460 ms with D_B = 200 ms; with `--budget-delay 50ms` win-cont gives 50 ms and
//! rate-abs as `rate` 58 ms, at a cost at 1x (rate-abs 0.86, win-disc 0.74).
//!
//! fig21 live vs simulated (loads 1-10, load average 0.0-0.7): with the same
//! 20 s points (5 s warm-up) in both worlds, 28 of 30 points within 0.1. The two others
//! are rate-occ1 at 8x and 10x, whose start-up outlasts a 20 s point: both worlds begin in
//! a collapse (the RE queue full of retransmissions while the loss feedback sits at its
//! 2 % floor) that the 200 ms control interval leaves only after 10-25 s, at a moment that
//! varies from run to run. With 100 s points (20 s warm-up) rate-occ1 is within 0.04 at
//! every load (0.848/0.861/0.857/0.842/0.809 live, 0.846/0.870/0.875/0.858/0.846
//! simulated). All of fig. 21 with 100 s points (20 s warm-up; load average 0.3-7, the
//! highest during win-disc's 8x and 10x): 30 of 30 within 0.1, the largest gaps rate-abs at
//! 1x (0.922 live with the SEs' then 20 ms RFC 7415 tolerance, 0.990 simulated) and
//! win-disc at 10x (0.896 against 0.956).
//!
//! The comparison counts live calls by the paper's rule (`w/180`), as the simulator does.
//!
//! Links: with `--link-delay`, `--link-loss` or `--link-jitter`, or an experiment
//! whose `[link]` impairs, a `sluice-impair` relay sits on every hop (see `Wiring` for
//! which address each node names so that every message crosses it both ways); the flags
//! set the simulator's links too (jitter is live only). Each point prints what the relays
//! delivered, lost and reordered.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_control::overload::OcAlgorithm;
use sluice_control::{Algorithm, ControlConfig, Fairness};
use sluice_impair::{
    stream_seed, ImpairConfig, RelayConfig, RelayStats, RelayThread, DEFAULT_MAX_CLIENTS,
};
use sluice_load::shell;
use sluice_load::{Counts, Hold, SecondRow, Spacing, UacConfig, UacSummary};
use sluice_proxy::{ProxyConfig, ProxyReport};
use sluice_report::files::{write, CsvTable};
use sluice_report::html::{ClaimRow, Page};
use sluice_report::plot::{line_chart, Axes, Series};
use sluice_sim::experiment::{Experiment, Kind, Overrides};
use sluice_sim::{ArrivalProcess, RunReport, Scenario, SourceConfig};

use crate::config::{Caller, OverloadConfig, ALL_VARIANTS};
use crate::console::{say, Console};
use crate::dynamic::{self, Dynamic};
use crate::netns::{self, Lan};
use crate::output::{write_outputs, write_sweep_page, written_line};
use crate::parallel::simulate_in_order;
use crate::point::{max_opt, ms, PointResult, Timing};
use crate::process::{load_average, start_sluice_on, start_uas_on, Running, UasSocket};

/// The variants a topology sweep runs by default: no feedback, and Shen et al.'s
/// algorithms over each wire format that can carry them.
pub const HOP_VARIANTS: &str = "none,rate-abs/rate,rate-abs/loss,win-disc,win-cont,win-auto";

/// Loads of a topology sweep without an experiment, multiples of the RE's capacity.
const DEFAULT_LOADS: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 10.0];

/// |live - simulated| normalised goodput a point may differ by.
const TOLERANCE: f64 = 0.05;

/// One curve of a topology sweep.
#[derive(Clone, Debug)]
pub struct HopVariant {
    pub label: String,
    /// `ALGORITHM/WIRE` or the local algorithm, for summary.csv's algorithm column.
    pub algorithm: String,
    /// The scenario scaled to the live capacity: the simulator runs it as it is, and its
    /// `re` and `se` tables are the live proxies' configurations.
    pub scenario: Scenario,
}

fn wire_name(w: OcAlgorithm) -> &'static str {
    match w {
        OcAlgorithm::Rate => "RFC 7415 rate",
        OcAlgorithm::Loss => "RFC 7339 loss",
        OcAlgorithm::SluiceWindow => "sluicewin window",
        OcAlgorithm::SluiceRate => "sluicerate rate",
        OcAlgorithm::SluiceLoad => "sluiceload fuzzy window",
    }
}

/// Whether `bench overload` runs the topology: `--ses`, a feedback variant in
/// `--variants`, or an experiment with one or with hops over TCP (SEs -> RE).
pub fn is_topology(args: &OverloadConfig) -> Result<bool, String> {
    if args.ses.is_some() {
        return Ok(true);
    }
    if let Some(path) = &args.experiment {
        let e = read_experiment(path)?;
        return Ok(e
            .points
            .iter()
            .any(|p| !p.scenario.re.control.algorithm.is_local() || p.scenario.uses_tcp()));
    }
    Ok(args.variants.iter().any(|v| is_hop_spec(v)))
}

/// Whether a variant names hop-by-hop feedback (`ALGORITHM/WIRE`, or a feedback algorithm).
pub(crate) fn is_hop_spec(spec: &str) -> bool {
    spec.contains('/')
        || spec
            .parse::<Algorithm>()
            .is_ok_and(|a| !a.is_local() && a != Algorithm::None)
}

fn read_experiment(path: &Path) -> Result<Experiment, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Experiment::from_toml(&text, &Overrides::default())
}

/// A variant from a (scaled) scenario; `wire` makes the SEs offer only that algorithm
/// (default: the scenario's SEs', which offer the paper's pairing first).
pub fn variant(
    label: &str,
    mut sc: Scenario,
    wire: Option<OcAlgorithm>,
) -> Result<HopVariant, String> {
    let algorithm = sc.re.control.algorithm;
    if let Some(w) = wire {
        let possible = algorithm.wire_algorithms();
        if possible.is_empty() {
            return Err(format!(
                "{label}: {algorithm} is not a feedback algorithm; /{} needs one",
                w.token()
            ));
        }
        if !possible.contains(&w) {
            return Err(format!(
                "{label}: {algorithm} cannot be carried as {} (use {})",
                w.token(),
                possible
                    .iter()
                    .map(|p| p.token())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
        sc.se.overload.client.algorithms = vec![w];
    }
    let (label, algorithm_name) = match sc.wire() {
        None if !algorithm.is_local() => {
            return Err(format!(
                "{label}: the SEs offer no algorithm that can carry {algorithm}"
            ))
        }
        None => (label.to_owned(), algorithm.to_string()),
        Some(w) => {
            let name = algorithm.to_string();
            let label = if label == name || label == format!("{name}/{}", w.token()) {
                format!("{name} as {}", wire_name(w))
            } else {
                format!("{label}: {name} as {}", wire_name(w))
            };
            (label, format!("{name}/{}", w.token()))
        }
    };
    // Validated with placeholder addresses; the real ones come per point.
    let placeholder = SocketAddr::from(([127, 0, 0, 1], 1));
    sc.re_proxy(placeholder, placeholder, &[placeholder])
        .validate()
        .map_err(|e| format!("{label}: RE: {e}"))?;
    sc.se_proxy(0, placeholder, placeholder)
        .validate()
        .map_err(|e| format!("{label}: SE: {e}"))?;
    Ok(HopVariant {
        label,
        algorithm: algorithm_name,
        scenario: sc,
    })
}

/// Sets D_B of the algorithms that have one, and win-auto's optional delay binding
/// (`None`: leave the scenario's).
fn set_budget_delay(sc: &mut Scenario, ms: Option<u64>) {
    if let Some(ms) = ms {
        let d = Duration::from_millis(ms);
        let control = &mut sc.re.control;
        control.win_disc.budget_delay = d;
        control.win_cont.budget_delay = d;
        control.rate_abs.budget_delay = d;
        control.win_auto.delay_binding = Some(d);
    }
}

/// `ALGORITHM[/WIRE]` on the default (Shen et al.) scenario.
pub(crate) fn variant_from_spec(
    spec: &str,
    capacity: f64,
    budget_delay_ms: Option<u64>,
) -> Result<HopVariant, String> {
    let (name, wire) = match spec.split_once('/') {
        Some((n, w)) => (
            n,
            Some(OcAlgorithm::from_token(w).ok_or_else(|| {
                format!("variant {spec}: unknown wire algorithm {w} (rate, loss or sluicewin)")
            })?),
        ),
        None => (spec, None),
    };
    let algorithm = name
        .parse::<Algorithm>()
        .map_err(|e| format!("variant {spec}: {e}"))?;
    let mut sc = Scenario::default();
    // The proxy's own defaults, as `sluice proxy` runs them (the scenario's are the
    // papers'): the control config, the window's in-flight echo and the SEs' feed-forward.
    sc.re.control = ControlConfig::for_algorithm(algorithm);
    sc.re.overload.server.window_acks =
        sluice_control::overload::OcServerConfig::default().window_acks;
    sc.se.overload.client.feed_forward =
        sluice_control::overload::OcClientConfig::default().feed_forward;
    sc.scale_to_capacity(capacity);
    set_budget_delay(&mut sc, budget_delay_ms);
    variant(spec, sc, wire)
}

/// What a topology sweep runs.
#[derive(Debug)]
struct Plan {
    name: String,
    title: String,
    variants: Vec<HopVariant>,
    loads: Vec<f64>,
    experiment: Option<Experiment>,
    /// A dynamic experiment's schedules: one run per variant, each UAC on its schedule.
    dynamic: Option<Dynamic>,
}

fn plan(args: &OverloadConfig) -> Result<Plan, String> {
    let mut plan = plan_variants(args)?;
    for v in &mut plan.variants {
        v.scenario.re.workers = args.workers;
        v.scenario.se.workers = args.workers;
    }
    if let Some(ms) = args.se_rate_tau_ms {
        // A setting of the SEs, so the simulator's SEs run with it too.
        let tau = Duration::from_millis(ms);
        for v in &mut plan.variants {
            let client = &mut v.scenario.se.overload.client;
            client.rate_tau = tau;
            client.rate_tau_priority = client.rate_tau_priority.max(tau);
        }
    }
    // The links of every hop, live and simulated alike (the simulator has no jitter).
    for v in &mut plan.variants {
        let link = &mut v.scenario.link;
        if let Some(d) = args.link_delay_ms {
            link.delay_ms = d;
            link.backward_delay_ms = None;
        }
        if let Some(l) = args.link_loss {
            link.loss = l;
            link.backward_loss = None;
        }
        let links = link_impairments(&v.scenario, args.link_jitter_ms)
            .map_err(|e| format!("{}: {e}", v.label))?;
        if links.is_some() && v.scenario.uses_tcp() {
            return Err(format!(
                "{}: the link relays carry UDP only; a TCP topology runs on plain loopback",
                v.label
            ));
        }
    }
    Ok(plan)
}

fn plan_variants(args: &OverloadConfig) -> Result<Plan, String> {
    let ses = args.ses.unwrap_or(3);
    if !(1..=32).contains(&ses) {
        return Err(format!("--ses must be 1 to 32, not {ses}"));
    }
    if !(args.capacity > 0.0 && args.capacity.is_finite()) {
        return Err(format!("need capacity > 0 (got {})", args.capacity));
    }
    let Some(path) = &args.experiment else {
        // The local-control default list means "not given": run the feedback variants.
        let default_local: Vec<&str> = ALL_VARIANTS.split(',').collect();
        let specs: Vec<String> = if args.variants.iter().map(String::as_str).eq(default_local) {
            HOP_VARIANTS.split(',').map(str::to_owned).collect()
        } else {
            args.variants.clone()
        };
        let mut variants = Vec::new();
        for s in specs.iter().filter(|s| !s.is_empty()) {
            let mut v = variant_from_spec(s, args.capacity, args.budget_delay_ms)?;
            v.scenario.sources = equal_sources(ses);
            variants.push(v);
        }
        return Ok(Plan {
            name: "live-hop".into(),
            title: format!("Live hop-by-hop overload control, {ses} SEs -> RE"),
            variants,
            loads: DEFAULT_LOADS.to_vec(),
            experiment: None,
            dynamic: None,
        });
    };
    let e = read_experiment(path)?;
    let dynamic = if e.kind == Kind::Dynamic {
        if args.ses.is_some() {
            return Err(format!(
                "{}: a dynamic experiment has one SE per source of its schedule; no --ses",
                e.name
            ));
        }
        Some(Dynamic::from_experiment(&e, args.time_scale)?)
    } else {
        None
    };
    // A sweep of a parameter (an RE buffer, say) runs each of its values as a variant of
    // its own at the experiment's offered load.
    let parameter_sweep = dynamic.is_none() && e.x_name != "offered_load";
    let mut variants: Vec<HopVariant> = Vec::new();
    let mut loads: Vec<f64> = Vec::new();
    if let Some(unknown) = args
        .only
        .iter()
        .find(|label| !e.points.iter().any(|p| &p.variant == *label))
    {
        return Err(format!(
            "--only {unknown:?}: {} has no such variant",
            e.name
        ));
    }
    for p in &e.points {
        if !args.only.is_empty() && !args.only.contains(&p.variant) {
            continue;
        }
        if !loads.iter().any(|l| (l - p.offered_load).abs() < 1e-9) {
            loads.push(p.offered_load);
        }
        let label = if parameter_sweep {
            format!("{}, {} = {}", p.variant, e.x_name, p.x)
        } else {
            p.variant.clone()
        };
        if variants.iter().any(|v| v.label == label) {
            continue;
        }
        let mut sc = p.scenario.clone();
        sc.scale_to_capacity(args.capacity);
        if args.ses.is_some() {
            sc.sources = equal_sources(ses);
        }
        if sc.sources.is_empty()
            || sc
                .sources
                .iter()
                .any(|s| !(s.share >= 0.0 && s.share.is_finite()))
        {
            return Err(format!("{}: the sources need shares >= 0", e.name));
        }
        set_budget_delay(&mut sc, args.budget_delay_ms);
        // A label ending in `/rate`, `/loss` or `/sluicewin` picks the wire format, as in
        // --variants; otherwise the algorithm's first.
        let wire = p
            .variant
            .rsplit_once('/')
            .and_then(|(_, w)| OcAlgorithm::from_token(w));
        variants.push(variant(&label, sc, wire)?);
    }
    if let Some(d) = &dynamic {
        loads = vec![d.peak_load()];
    }
    Ok(Plan {
        name: e.name.clone(),
        title: format!("{} (live)", e.title),
        variants,
        loads,
        experiment: Some(e),
        dynamic,
    })
}

/// Each source's share of the offered load (one UAC and SE per source).
fn shares_of(v: &HopVariant) -> Vec<f64> {
    v.scenario.sources.iter().map(|s| s.share).collect()
}

fn equal_sources(n: usize) -> Vec<SourceConfig> {
    (1..=n)
        .map(|i| SourceConfig {
            name: format!("UA{i}"),
            share: 1.0,
            schedule: Vec::new(),
        })
        .collect()
}

/// The proxies of one point: the RE and the SEs, in the order the UACs use them.
struct Proxies {
    re: Running,
    ses: Vec<(SocketAddr, Running)>,
}

impl Proxies {
    /// Stops every proxy and collects their reports (RE first).
    fn stop(mut self) -> (Option<ProxyReport>, Vec<ProxyReport>) {
        // All asked first, so they shut down together.
        self.re.stop();
        for (_, se) in &mut self.ses {
            se.stop();
        }
        let re = self.re.finish().map(|r| r.0);
        let ses = self
            .ses
            .into_iter()
            .filter_map(|(_, r)| r.finish().map(|r| r.0))
            .collect();
        (re, ses)
    }
}

/// The links of a variant's live points: the scenario's `[link]` on every hop, each
/// direction with its own delay and loss, plus `jitter_ms`, seeded by the scenario (each
/// relay mixes in its hop); `None` when they impair nothing.
fn link_impairments(
    sc: &Scenario,
    jitter_ms: f64,
) -> Result<Option<(ImpairConfig, ImpairConfig)>, String> {
    let l = &sc.link;
    let forward = ImpairConfig {
        delay_ms: l.delay_ms,
        jitter_ms,
        loss: l.loss,
        seed: sc.seed,
        ..ImpairConfig::default()
    };
    let backward = ImpairConfig {
        delay_ms: l.backward_delay_ms.unwrap_or(l.delay_ms),
        loss: l.backward_loss.unwrap_or(l.loss),
        ..forward
    };
    forward.validate().map_err(|e| format!("link: {e}"))?;
    backward
        .validate()
        .map_err(|e| format!("link backward: {e}"))?;
    Ok((!(forward.is_transparent() && backward.is_transparent())).then_some((forward, backward)))
}

/// "10 ms ± 2 ms, 0.5 % loss" for each direction that differs.
fn describe_links(forward: &ImpairConfig, backward: &ImpairConfig) -> String {
    let one = |c: &ImpairConfig| {
        let jitter = if c.jitter_ms > 0.0 {
            format!(" ± {} ms", c.jitter_ms)
        } else {
            String::new()
        };
        format!("{} ms{jitter}, {} % loss", c.delay_ms, c.loss * 100.0)
    };
    if (forward.delay_ms, forward.loss) == (backward.delay_ms, backward.loss) {
        format!("{} each way", one(forward))
    } else {
        format!("{} forward, {} backward", one(forward), one(backward))
    }
}

/// Where a point's nodes are and what each sends to. With perfect links every node sends
/// straight to the next. With impaired ones a relay sits on every hop:
///
/// ```text
/// UAC i -> relay i -> SE i -> relay (shared) -> RE -> relay -> UAS
/// ```
///
/// The proxies answer a request at its source and the shared relay gives each SE a socket
/// of its own (as a NAT would), so both directions of every hop cross its relay when
///
/// * the SEs' next hop is the shared relay, and the RE's overload neighbours are the SEs'
///   sockets on it (their addresses as the RE sees them);
/// * the RE advertises (Via, Record-Route) the shared relay, so the SEs' ACKs and BYEs,
///   routed by Record-Route, cross it; each SE advertises its own socket on that relay, so
///   what the RE sends along the Via (2xx retransmissions after its transaction ended)
///   crosses it too;
/// * the RE's next hop and the UAS's Contact are the UAS's relay;
/// * each UAC sends everything to its SE's relay.
pub(crate) struct Wiring {
    pub(crate) re: SocketAddr,
    pub(crate) ses: Vec<SocketAddr>,
    /// Where the RE sends: the UAS, or its relay.
    pub(crate) uas_front: SocketAddr,
    /// Where the SEs send, and what the RE advertises if that is not its own address.
    pub(crate) re_front: SocketAddr,
    re_advertise: Option<String>,
    /// Each SE as the RE sees it, and what it advertises.
    ses_seen: Vec<SocketAddr>,
    ses_advertise: Vec<Option<String>>,
    /// Where each UAC sends.
    pub(crate) ses_front: Vec<SocketAddr>,
    pub(crate) relays: Option<RelayThread>,
}

/// The hosts of a hop-by-hop bench on a [`Lan`] (`--netns`): the callees, the RE, each
/// SE and the callers, each with its own address; every proxy on the SIP port.
#[derive(Debug)]
pub(crate) struct HopHosts {
    lan: Lan,
    ses: usize,
}

impl HopHosts {
    pub(crate) fn create(ses: usize) -> Result<HopHosts, String> {
        let mut names = vec!["callees".to_owned(), "re".to_owned()];
        names.extend((1..=ses).map(|i| format!("se{i}")));
        names.push("callers".to_owned());
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Ok(HopHosts {
            lan: Lan::create(&names)?,
            ses,
        })
    }

    fn host(&self, i: usize) -> (&str, std::net::IpAddr) {
        self.lan.host(i).expect("made with the LAN")
    }

    pub(crate) fn callees(&self) -> (&str, std::net::IpAddr) {
        self.host(0)
    }

    fn re(&self) -> (&str, std::net::IpAddr) {
        self.host(1)
    }

    fn se(&self, i: usize) -> (&str, std::net::IpAddr) {
        assert!(i < self.ses, "SE {i} of {}", self.ses);
        self.host(2 + i)
    }

    pub(crate) fn callers(&self) -> (&str, std::net::IpAddr) {
        self.host(2 + self.ses)
    }
}

impl Wiring {
    pub(crate) fn new(
        v: &HopVariant,
        sources: usize,
        uas: SocketAddr,
        jitter_ms: f64,
        budget: f64,
        hosts: Option<&HopHosts>,
    ) -> Result<Wiring, String> {
        let links = link_impairments(&v.scenario, jitter_ms)?;
        if let Some(hosts) = hosts {
            if links.is_some() {
                return Err(
                    "--netns takes links without impairments: the relays that impair them \
                     run on loopback"
                        .into(),
                );
            }
            let sip = |ip| SocketAddr::new(ip, 5060);
            let ses = (0..sources).map(|i| sip(hosts.se(i).1)).collect();
            return Ok(Wiring::direct(sip(hosts.re().1), ses, uas));
        }
        // The RE must know the SEs' addresses, and with links the relays the RE's, before
        // they exist: reserve free ports (held together so they differ), release them, and
        // let the proxies bind them.
        let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
        let reserved =
            sluice_sys::reserve_sip_ports(loopback, sources + 1).map_err(|e| e.to_string())?;
        let mut addrs: Vec<SocketAddr> = reserved
            .iter()
            .map(|r| SocketAddr::new(loopback, r.port))
            .collect();
        drop(reserved);
        let re = addrs.remove(0);
        let ses = addrs;
        let Some((forward, backward)) = links else {
            return Ok(Wiring::direct(re, ses, uas));
        };
        let relay = |hop: u64, upstream: SocketAddr, clients: Vec<SocketAddr>| {
            let seed = |c: &ImpairConfig| ImpairConfig {
                seed: stream_seed(c.seed, hop),
                ..*c
            };
            RelayConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                upstream,
                forward: seed(&forward),
                backward: seed(&backward),
                clients,
                max_clients: DEFAULT_MAX_CLIENTS,
                duration: Some(Duration::from_secs_f64(budget + 5.0)),
            }
        };
        let mut configs = vec![relay(1, uas, Vec::new()), relay(2, re, ses.clone())];
        configs.extend(
            ses.iter()
                .enumerate()
                .map(|(i, &se)| relay(3 + i as u64, se, Vec::new())),
        );
        let relays = sluice_impair::spawn(configs).map_err(|e| format!("link relays: {e}"))?;
        let r = &relays.relays;
        let ses_seen: Vec<SocketAddr> = r[1].clients.iter().map(|c| c.1).collect();
        Ok(Wiring {
            re,
            uas_front: r[0].listen,
            re_front: r[1].listen,
            re_advertise: Some(r[1].listen.to_string()),
            ses_advertise: ses_seen.iter().map(|a| Some(a.to_string())).collect(),
            ses_seen,
            ses_front: r[2..].iter().map(|a| a.listen).collect(),
            ses,
            relays: Some(relays),
        })
    }

    /// Every hop straight to the next, no relay between.
    fn direct(re: SocketAddr, ses: Vec<SocketAddr>, uas: SocketAddr) -> Wiring {
        Wiring {
            re,
            uas_front: uas,
            re_front: re,
            re_advertise: None,
            ses_seen: ses.clone(),
            ses_advertise: vec![None; ses.len()],
            ses_front: ses.clone(),
            ses,
            relays: None,
        }
    }

    /// Stops the relays; their counters summed.
    pub(crate) fn stop(self) -> Option<RelayStats> {
        self.relays.map(|r| {
            r.stop().iter().fold(RelayStats::default(), |mut sum, s| {
                sum.accumulate(s);
                sum
            })
        })
    }
}

/// The scenario's proxies, wired to loopback as `w` says: the same tables the simulator
/// runs. The RE's (listening on `w.re`, next hop `w.uas_front`), then each SE's (listening
/// on `w.ses[i]`, next hop `w.re_front`).
pub(crate) fn proxy_configs(v: &HopVariant, w: &Wiring) -> (ProxyConfig, Vec<ProxyConfig>) {
    let mut re = v.scenario.re_proxy(w.re, w.uas_front, &w.ses_seen);
    re.advertise.clone_from(&w.re_advertise);
    socket_defaults(&v.scenario, &mut re);
    let ses = w
        .ses
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            let mut se = v.scenario.se_proxy(i, addr, w.re_front);
            se.advertise.clone_from(&w.ses_advertise[i]);
            socket_defaults(&v.scenario, &mut se);
            se
        })
        .collect();
    (re, ses)
}

/// With TCP hops, the socket buffers a proxy's `tcp` table leaves at 0 get the scenario's
/// sizes, as the simulator's sockets do: the kernel's defaults would grow by autotuning
/// into megabytes of backlog the model does not have. The segment size too: every
/// connection has a proxy at one end, and both ends use the smaller one announced.
fn socket_defaults(sc: &Scenario, proxy: &mut ProxyConfig) {
    if !sc.uses_tcp() {
        return;
    }
    let t = &mut proxy.tcp;
    for (size, default) in [
        (&mut t.listen_send_buffer, sc.tcp.send_buffer),
        (&mut t.listen_receive_buffer, sc.tcp.receive_buffer),
        (&mut t.next_hop_send_buffer, sc.tcp.send_buffer),
        (&mut t.next_hop_receive_buffer, sc.tcp.receive_buffer),
    ] {
        if *size == 0 {
            *size = default;
        }
    }
    if t.max_segment_size == 0 {
        t.max_segment_size = sc.tcp.segment_size;
    }
}

/// The user agents' TCP: the scenario's socket buffers and write queue.
fn ua_tcp_config(sc: &Scenario) -> shell::tcp::TcpConfig {
    shell::tcp::TcpConfig {
        send_buffer: sc.tcp.send_buffer,
        receive_buffer: sc.tcp.receive_buffer,
        write_queue_bytes: sc.tcp.ua_write_queue,
        ..shell::tcp::TcpConfig::default()
    }
}

/// Starts the RE (next hop the UAS) and one SE per source (next hop the RE), as `w` wires
/// them.
fn start_proxies(
    v: &HopVariant,
    w: &Wiring,
    budget: f64,
    hosts: Option<&HopHosts>,
) -> Result<Proxies, String> {
    let (re_config, se_configs) = proxy_configs(v, w);
    // Each proxy's thread starts in its host's namespace, and makes its sockets there.
    let (_, re) = netns::within(hosts.map(|h| h.re().0), || {
        start_sluice_on(re_config, w.re, w.uas_front, budget)
    })?;
    let mut proxies = Proxies {
        re,
        ses: Vec::new(),
    };
    for (i, (se, &addr)) in se_configs.into_iter().zip(&w.ses).enumerate() {
        match netns::within(hosts.map(|h| h.se(i).0), || {
            start_sluice_on(se, addr, w.re_front, budget)
        }) {
            Ok(running) => proxies.ses.push(running),
            Err(e) => {
                proxies.stop();
                return Err(format!("SE {}: {e}", i + 1));
            }
        }
    }
    Ok(proxies)
}

/// One UAC's run of a point: its rows, its summary, over TCP its connections' counts, and
/// the calls it got answered.
type UacRun = (
    Vec<SecondRow>,
    UacSummary,
    Option<shell::tcp::TcpCounts>,
    Vec<(Bytes, Instant, bool)>,
);

/// Calls good by Shen et al.'s whole rule: the 180 and the 200 reached the caller, and
/// the ACK reached the UAS within the setup limit of the first INVITE.
fn good_at_uas<'a>(
    answered: impl Iterator<Item = &'a (Bytes, Instant, bool)>,
    acks: &[(Bytes, Instant)],
    limit: Duration,
) -> u64 {
    let mut acked: HashMap<&[u8], Instant> = HashMap::with_capacity(acks.len());
    for (id, at) in acks {
        acked
            .entry(&id[..])
            .and_modify(|first| *first = (*first).min(*at))
            .or_insert(*at);
    }
    answered
        .filter(|(id, started, seen_180)| {
            *seen_180
                && acked
                    .get(&id[..])
                    .is_some_and(|at| at.saturating_duration_since(*started) <= limit)
        })
        .count() as u64
}

/// What a point measured besides the summary columns, for the printed table.
struct PointExtras {
    se_applied: u64,
    se_reduced: u64,
    se_ignored: u64,
    /// Calls the callers saw answered (2xx), and of those the ones whose 180 reached them
    /// first (the 180 is never retransmitted: a full RE queue loses it for good).
    answered: u64,
    answered_after_180: u64,
    /// 2xx the UAS gave up on (no ACK in 64*T1).
    uas_unacked_2xx: u64,
    /// Retransmitted 2xx the callers received in the window (the UAS counts its own over
    /// the whole point, start-up included).
    window_2xx_retransmissions: u64,
    load_average: Option<f64>,
    /// The link relays' counters, summed, when the links were impaired.
    links: Option<RelayStats>,
    /// Where TCP messages were turned away, when any hop ran over TCP.
    tcp: Option<String>,
}

#[allow(clippy::too_many_lines)] // one point, start to finish, reads best in one piece
/// Where a point's hosts are and how their links behave.
#[derive(Clone, Copy, Debug)]
struct Network<'a> {
    link_jitter_ms: f64,
    /// `None`: every host on loopback.
    hosts: Option<&'a HopHosts>,
}

fn run_point(
    name: &str,
    v: &HopVariant,
    shares: &[f64],
    x: f64,
    timing: Timing,
    dynamic: Option<&Dynamic>,
    network: Network,
) -> Result<(PointResult, PointExtras), String> {
    let Network {
        link_jitter_ms,
        hosts,
    } = network;
    let Timing {
        duration,
        warmup,
        hold,
    } = timing;
    let capacity = v.scenario.capacity_cps();
    if !capacity.is_finite() {
        return Err(format!("{}: no emulated capacity", v.label));
    }
    let sc = &v.scenario;
    // Arrivals go on past the window for the setup deadline, as in the simulator, so the
    // window's last calls meet the same load as its first; nothing after it is counted.
    let setup_deadline = sc.call.setup_deadline_s;
    let drain = 2.0;
    let budget = duration + setup_deadline + drain + 30.0;
    let ua_tcp = ua_tcp_config(sc);
    // The RE reaches the callee over TCP when it sends to its next hops over TCP.
    let uas_tcp = sc.re.tcp.to_next_hops.then_some(&ua_tcp);
    let uas_socket = match hosts {
        Some(h) => netns::within(Some(h.callees().0), || {
            UasSocket::bind_on(SocketAddr::new(h.callees().1, 0), uas_tcp)
        })?,
        None => UasSocket::bind(uas_tcp)?,
    };
    let uas_addr = uas_socket.local_addr()?;
    let wiring = Wiring::new(v, shares.len(), uas_addr, link_jitter_ms, budget, hosts)?;
    let contact = wiring.relays.is_some().then_some(wiring.uas_front);
    let (uas_flag, uas) = match start_uas_on(
        uas_socket,
        contact,
        duration + setup_deadline,
        &sc.call,
        ua_tcp.clone(),
        true,
    ) {
        Ok(u) => u,
        Err(e) => {
            wiring.stop();
            return Err(e);
        }
    };
    let proxies = match start_proxies(v, &wiring, budget, hosts) {
        Ok(p) => p,
        Err(e) => {
            wiring.stop();
            uas_flag.store(true, Ordering::Relaxed);
            let _ = uas.join();
            return Err(e);
        }
    };
    let total_share: f64 = shares.iter().sum();
    let spacing = match v.scenario.call.arrivals {
        ArrivalProcess::Poisson => Spacing::Poisson,
        ArrivalProcess::Constant => Spacing::Constant,
    };
    let targets = wiring.ses_front.clone();
    let (callers_tcp, body_bytes) = (sc.tcp.callers, sc.call.body_bytes);
    let ua_tcp = &ua_tcp;
    let runs: Vec<Result<UacRun, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .zip(shares)
            .enumerate()
            .map(|(i, (&target, &share))| {
                scope.spawn(move || {
                    let any = match hosts.map(HopHosts::callers) {
                        Some((ns, ip)) => {
                            netns::enter(ns)?;
                            SocketAddr::new(ip, 0)
                        }
                        None => SocketAddr::from(([127, 0, 0, 1], 0)),
                    };
                    // Over UDP the socket's address; over TCP the connection's, which
                    // `run_uac_tcp` sets.
                    let socket = if callers_tcp {
                        None
                    } else {
                        Some(shell::bind_udp(any).map_err(|e| e.to_string())?)
                    };
                    let local = match &socket {
                        Some(s) => s.local_addr().map_err(|e| e.to_string())?,
                        None => any,
                    };
                    let rate = x * capacity * share / total_share.max(1e-12);
                    let mut cfg = UacConfig::new(local, target, rate);
                    cfg.invite_body = sluice_sip::sdp::session_description(body_bytes, local.ip());
                    if let Some(d) = dynamic {
                        cfg.schedule = d.schedule(i, capacity)?;
                    }
                    cfg.duration = Some(Duration::from_secs_f64(duration + setup_deadline));
                    cfg.delays_until = Some(Duration::from_secs_f64(duration));
                    cfg.setup_limit = Duration::from_secs_f64(setup_deadline);
                    cfg.hold = Hold::Constant(Duration::from_secs_f64(hold.max(0.0)));
                    cfg.drain_timeout = Duration::from_secs_f64(drain);
                    cfg.delays_from = Duration::from_secs_f64(warmup);
                    cfg.record_answered = true;
                    cfg.max_in_progress = 1_000_000;
                    cfg.spacing = spacing;
                    cfg.seed = i as u64 + 1;
                    // Call-IDs differ across UACs, points and runs: the RE sees them all.
                    cfg.run_token = (u64::from(std::process::id()) << 24)
                        ^ ((x * 1000.0) as u64) << 8
                        ^ i as u64;
                    // Not `CallerRun`: the 180s the callers saw tell the paper's goodput
                    // (all five setup messages through) from the caller's (ACK sent).
                    let mut rows = Vec::new();
                    let stop = shell::Stop::default();
                    let on_row = |r: &SecondRow| rows.push(*r);
                    let run = match socket {
                        Some(socket) => shell::run_uac(socket, cfg, &stop, on_row),
                        // One connection per caller, as the simulator's callers have.
                        None => shell::tcp::run_uac_tcp(any, cfg, ua_tcp.clone(), &stop, on_row),
                    }
                    .map_err(|e| format!("uac: {e}"))?;
                    Ok((rows, run.summary, run.tcp, run.call_log.answered))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("uac thread panicked".into()))
            })
            .collect()
    });
    let (re_report, se_reports) = proxies.stop();
    let links = wiring.stop();
    uas_flag.store(true, Ordering::Relaxed);
    let uas = uas
        .join()
        .map_err(|_| "uas thread panicked".to_owned())?
        .map_err(|e| format!("uas: {e}"))?;
    let runs: Vec<UacRun> = runs.into_iter().collect::<Result<_, _>>()?;
    let re = re_report.ok_or("the RE did not report")?;
    let tcp = tcp_line(&runs, uas.tcp.as_ref(), &re, &se_reports);
    let good_at_uas = good_at_uas(
        runs.iter().flat_map(|r| r.3.iter()),
        &uas.call_log.acks,
        Duration::from_secs_f64(setup_deadline),
    );
    let runs: Vec<(Vec<SecondRow>, UacSummary)> = runs.into_iter().map(|r| (r.0, r.1)).collect();

    // Rows per second summed over the UACs; the window as in the single-proxy bench.
    let mut rows: Vec<SecondRow> = Vec::new();
    for (run_rows, _) in &runs {
        for r in run_rows {
            match rows.iter_mut().find(|s| s.second == r.second) {
                Some(s) => {
                    s.counts.accumulate(&r.counts);
                    s.in_progress += r.in_progress;
                    s.pdd_p50_ms = max_opt(s.pdd_p50_ms, r.pdd_p50_ms);
                    s.pdd_p99_ms = max_opt(s.pdd_p99_ms, r.pdd_p99_ms);
                }
                None => rows.push(*r),
            }
        }
    }
    rows.sort_by_key(|r| r.second);
    let first = warmup.ceil() as u64 + 1;
    let last = duration.floor() as u64;
    let mut window = Counts::default();
    let mut secs = 0u64;
    for r in rows.iter().filter(|r| (first..=last).contains(&r.second)) {
        window.accumulate(&r.counts);
        secs += 1;
    }
    let secs = secs.max(1) as f64;
    let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    let se_hop = se_reports.iter().map(|r| &r.stats.hop);
    let extras = PointExtras {
        se_applied: se_hop.clone().map(|h| h.client.applied).sum(),
        se_reduced: se_hop.clone().map(|h| h.client.rejected_normal).sum(),
        se_ignored: se_hop.map(sluice_proxy::HopStats::feedback_ignored).sum(),
        answered: runs.iter().map(|r| r.1.pdd_200.count).sum(),
        answered_after_180: runs.iter().map(|r| r.1.pdd_180.count).sum(),
        uas_unacked_2xx: uas.summary.unacked_2xx,
        window_2xx_retransmissions: window.retransmissions_received.ok_invite,
        load_average: load_average(),
        links,
        tcp,
    };
    let point = PointResult {
        experiment: name.to_owned(),
        variant: v.label.clone(),
        caller: "sluice",
        window: first..=last,
        algorithm: v.algorithm.clone(),
        x,
        offered_load_measured: window.offered as f64 / secs / capacity,
        capacity_cps: capacity,
        goodput: window.successful as f64 / secs / capacity,
        goodput_cps: window.successful as f64 / secs,
        goodput_with_180: Some(window.successful_with_180 as f64 / secs / capacity),
        goodput_at_uas: Some(good_at_uas as f64 / (duration - warmup).max(1e-9) / capacity),
        retrans_ratio: ratio(re.stats.retransmissions_seen(), re.stats.datagrams_in),
        setup_delay_p50_ms: runs.iter().map(|r| r.1.setup.p50_ms).fold(None, max_opt),
        setup_delay_p99_ms: runs.iter().map(|r| r.1.setup.p99_ms).fold(None, max_opt),
        occupancy: Some(re.stats.busy_virtual.as_secs_f64() / re.elapsed.as_secs_f64().max(1e-9)),
        reject_ratio: ratio(window.failed.rejected_503, window.offered),
        calls_offered: window.offered,
        calls_good: window.successful,
        proxy_dropped: Some(re.stats.dropped_queue_full),
        uac_retransmissions_sent: runs.iter().map(|r| r.1.retransmissions_sent).sum(),
        uac_retransmissions_received: runs.iter().map(|r| r.1.retransmissions_received).sum(),
        uas_2xx_retransmissions: uas.summary.retransmissions_sent_by_type.ok_invite,
        forwarded_calls: Some(uas.summary.invites),
        rejected_calls: Some(extras.se_reduced + re.stats.rejected_policy),
        proxy_cpu_s: None,
        admitted_unanswered: Some(runs.iter().map(|r| r.1.admitted_unanswered).sum()),
        rows,
        per_source: v
            .scenario
            .sources
            .iter()
            .map(|s| s.name.clone())
            .chain((v.scenario.sources.len()..).map(|i| format!("UA{}", i + 1)))
            .zip(runs.into_iter().map(|r| r.0))
            .collect(),
    };
    Ok((point, extras))
}

/// Where a TCP point's messages were turned away: the write queues of the callers, the
/// SEs, the RE and the callee (bytes for the UAs, messages for the proxies), and what smart
/// forwarding rejected. `None` when no hop ran over TCP.
fn tcp_line(
    uacs: &[UacRun],
    uas: Option<&shell::tcp::TcpCounts>,
    re: &ProxyReport,
    ses: &[ProxyReport],
) -> Option<String> {
    let uac_bytes: u64 = uacs
        .iter()
        .filter_map(|r| r.2)
        .map(|t| t.bytes_dropped)
        .sum();
    let any_tcp = uas.is_some()
        || uacs.iter().any(|r| r.2.is_some())
        || re.tcp.messages_in > 0
        || ses.iter().any(|s| s.tcp.messages_out > 0);
    if !any_tcp {
        return None;
    }
    let se_full: u64 = ses.iter().map(|s| s.tcp.write_queue_full).sum();
    let se_smart: u64 = ses.iter().map(|s| s.stats.rejected_smart_forwarding).sum();
    let re_in = sluice_proxy_core::KIND_LABELS
        .iter()
        .zip(re.stats.in_by_kind.0)
        .filter(|&(_, n)| n > 0);
    Some(format!(
        "  tcp: dropped at full write queues: callers {uac_bytes} B, SEs {se_full} messages, RE {} messages, callee {} B; smart forwarding rejected {se_smart}; RE read {} messages ({})",
        re.tcp.write_queue_full,
        uas.map_or(0, |t| t.bytes_dropped),
        re.tcp.messages_in,
        kinds_text(re_in),
    ))
}

/// "INVITE 12, ACK 3": message counts by kind.
fn kinds_text<'a>(kinds: impl Iterator<Item = (&'a &'a str, u64)>) -> String {
    kinds
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the link relays of a point did, for the printed table.
fn links_line(l: &RelayStats) -> String {
    let both = l.both();
    let mut line = format!(
        "  links: {} datagrams delivered, {} lost ({:.2} %), {} over the in-flight budget, {} reordered",
        both.forwarded,
        both.dropped_loss,
        100.0 * both.dropped_loss as f64 / both.offered().max(1) as f64,
        both.dropped_budget,
        both.reordered
    );
    for (n, what) in [
        (l.clients_refused, "from clients over the limit"),
        (l.foreign, "foreign"),
        (l.send_failed, "not sent"),
        (l.socket_errors, "socket errors"),
    ] {
        if n > 0 {
            let _ = write!(line, ", {n} {what}");
        }
    }
    line
}

/// The printed tables' variant column: as wide as the longest label.
fn label_width(plan: &Plan) -> usize {
    plan.variants
        .iter()
        .map(|v| v.label.len())
        .max()
        .unwrap_or(0)
        .max("variant".len())
}

/// `sluice bench overload` in topology mode.
pub fn bench(args: &OverloadConfig, console: &dyn Console) -> Result<(), String> {
    if args.generator != Caller::Sluice || !args.proxy_cmd.is_empty() {
        return Err(
            "the hop-by-hop topology runs sluice's UAC and proxies only (no --generator sipp, no --proxy-cmd)"
                .into(),
        );
    }
    let plan = plan(args)?;
    if plan.variants.is_empty() {
        return Err("nothing to run: no --variants".into());
    }
    if plan.dynamic.is_some() && args.loads.is_some() {
        return Err("a dynamic experiment's loads come from its schedules; no --loads".into());
    }
    let loads = args.loads.clone().unwrap_or_else(|| plan.loads.clone());
    if loads.is_empty() || loads.iter().any(|l| !(*l > 0.0 && l.is_finite())) {
        return Err("--loads must be positive numbers".into());
    }
    let warmup = args.warmup.unwrap_or(args.duration / 4.0);
    if !(args.duration > 0.0 && args.duration.is_finite() && (0.0..args.duration).contains(&warmup))
    {
        return Err("need --duration > 0 and 0 <= --warmup < --duration".into());
    }
    let timing = match &plan.dynamic {
        // One run through the whole schedule; the summary row covers all of it.
        Some(d) => Timing {
            duration: d.duration,
            warmup: 0.0,
            hold: args.hold,
        },
        None => Timing {
            duration: args.duration,
            warmup,
            hold: args.hold,
        },
    };
    for v in &plan.variants {
        let sources = v.scenario.sources.len();
        let links = link_impairments(&v.scenario, args.link_jitter_ms)?;
        say!(
            console,
            "{}: {sources} UACs -> {sources} SEs -> RE at {:.1} calls/s emulated (message {:.0} us, 503 {:.0} us, queue {}){}{}",
            v.label,
            v.scenario.capacity_cps(),
            v.scenario.re.cost_forward_us,
            v.scenario.re.cost_reject_us,
            v.scenario.re.queue_capacity,
            v.scenario
                .wire()
                .map_or(String::new(), |w| format!(", feedback as oc-algo {}", w.token())),
            links.map_or(String::new(), |(f, b)| format!(
                "; a relay on every hop: {}",
                describe_links(&f, &b)
            )),
        );
    }
    let hosts = if args.netns {
        let ses = plan
            .variants
            .iter()
            .map(|v| v.scenario.sources.len())
            .max()
            .unwrap_or(0);
        let hosts = HopHosts::create(ses)?;
        say!(
            console,
            "hosts, each in its network namespace on one bridge: callees {}, RE {}, SEs {}, callers {}",
            hosts.callees().1,
            hosts.re().1,
            (0..ses)
                .map(|i| hosts.se(i).1.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            hosts.callers().1
        );
        Some(hosts)
    } else {
        None
    };
    let w = label_width(&plan);
    let started = Instant::now();
    say!(
        console,
        "{:<w$} {:>5} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>8} {:>8} {:>5} {:>7} {:>7} {:>7} {:>7} {:>6} {:>7} {:>7} {:>5}",
        "variant", "x", "offered", "goodput", "norm", "w/180", "at UAS", "reject", "retrans", "setup50", "setup99",
        "busy", "RE drop", "uas2xx", "2xx win", "unacked", "no 180", "fb appl", "fb ign", "load"
    );
    let mut points = Vec::new();
    console.begin((plan.variants.len() * loads.len()) as u64);
    for v in &plan.variants {
        for &x in &loads {
            let (p, e) = run_point(
                &plan.name,
                v,
                &shares_of(v),
                x,
                timing,
                plan.dynamic.as_ref(),
                Network {
                    link_jitter_ms: args.link_jitter_ms,
                    hosts: hosts.as_ref(),
                },
            )?;
            crate::point::note_unanswered(&p, console);
            say!(
                console,
                "{:<w$} {:>5} {:>7.0} {:>7.1} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.4} {:>8} {:>8} {:>4.0}% {:>7} {:>7} {:>7} {:>7} {:>5.1}% {:>7} {:>7} {:>5}",
                p.variant,
                p.x,
                p.offered_load_measured * p.capacity_cps,
                p.goodput_cps,
                p.goodput,
                p.goodput_with_180.unwrap_or(0.0),
                p.goodput_at_uas.unwrap_or(0.0),
                p.reject_ratio,
                p.retrans_ratio,
                ms(p.setup_delay_p50_ms),
                ms(p.setup_delay_p99_ms),
                p.occupancy.unwrap_or(0.0) * 100.0,
                p.proxy_dropped.unwrap_or(0),
                p.uas_2xx_retransmissions,
                e.window_2xx_retransmissions,
                e.uas_unacked_2xx,
                100.0 * (1.0 - e.answered_after_180 as f64 / e.answered.max(1) as f64),
                e.se_applied,
                e.se_ignored,
                e.load_average.map_or("-".into(), |l| format!("{l:.2}")),
            );
            if let Some(t) = &e.tcp {
                say!(console, "{t}");
            }
            if let Some(l) = &e.links {
                say!(console, "{}", links_line(l));
            }
            points.push(p);
            console.advance();
        }
    }
    console.finish();
    let mut plots = write_outputs(&args.out, &plan.name, &plan.title, &points, None)?;
    say!(
        console,
        "{}",
        written_line(points.len(), started.elapsed(), &args.out, &plan.name)
    );
    let mut claims = Vec::new();
    let mut tables = Vec::new();
    if let Some(d) = &plan.dynamic {
        let runs: Vec<(&PointResult, Fairness)> = points
            .iter()
            .zip(&plan.variants)
            .map(|(p, v)| (p, v.scenario.re.control.fairness()))
            .collect();
        let missed = dynamic::report(&args.out, &plan.name, d, &runs, console)?;
        plots.extend(
            points
                .iter()
                .map(|p| dynamic::plot_name(&plan.name, &p.variant)),
        );
        say!(
            console,
            "\n{missed} overloaded phase(s) with a source more than {} from its promised share; phases.csv and one SVG per variant in {}",
            dynamic::SHARE_TOLERANCE,
            args.out.display()
        );
        let scenarios: Vec<Scenario> = plan.variants.iter().map(|v| v.scenario.clone()).collect();
        dynamic::compare_phases_with_simulator(
            &args.out,
            d,
            args.time_scale,
            args.hold,
            &scenarios,
            &runs,
            console,
        )?;
        tables.push((
            "Goodput share per source and phase, live".to_owned(),
            "phases.csv".to_owned(),
        ));
        tables.push((
            "Shares per overloaded phase, live and simulated".to_owned(),
            "phases-sim.csv".to_owned(),
        ));
    } else if let Some(e) = &plan.experiment {
        let rows = compare_sweep_with_simulator(args, e, &plan, &loads, timing, &points, console)?;
        plots.push("live-vs-sim.svg".into());
        claims = rows
            .iter()
            .map(|c| ClaimRow {
                claim: "live goodput (the 180 counted, as the simulator does) as simulated".into(),
                subject: format!("{} at {}x", c.variant, c.x),
                required: format!("|live - sim| <= {TOLERANCE}"),
                measured: format!(
                    "live {:.3}, sim {:.3}, |diff| {:.3}",
                    c.live,
                    c.sim.goodput,
                    c.diff()
                ),
                pass: c.pass(),
            })
            .collect();
        tables.push((
            "Live against simulated, point by point".to_owned(),
            "comparison.csv".to_owned(),
        ));
    }
    let experiment = plan.experiment.as_ref();
    let report = write_sweep_page(
        &args.out,
        Page {
            title: plan.title.clone(),
            name: plan.name.clone(),
            source: experiment.map_or_else(
                || "live hop-by-hop topology on loopback".to_owned(),
                |e| {
                    let mut s = "live hop-by-hop topology on loopback, beside the simulator".to_owned();
                    for part in [&e.paper, &e.figure] {
                        if !part.is_empty() {
                            s.push_str(", ");
                            s.push_str(part);
                        }
                    }
                    s
                },
            ),
            expectation: experiment.map(|e| e.expectation.clone()).unwrap_or_default(),
            notes: vec![format!(
                "One UAC per SE -> SEs -> RE ({} SEs); {} variant(s) at {} load(s), {} s of arrivals a point.",
                plan.variants
                    .iter()
                    .map(|v| v.scenario.sources.len().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                plan.variants.len(),
                loads.len(),
                timing.duration
            )],
            plots,
            claims,
            tables,
            files: Vec::new(),
        },
    )?;
    console.line(&report);
    Ok(())
}

/// One point of the live-vs-simulated comparison.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub variant: String,
    pub x: f64,
    /// Live goodput by the paper's rule (the 180 reached the caller too), as the simulator
    /// counts it; the caller's own count where the live point has no such figure.
    pub live: f64,
    /// The simulated run of the same variant at the same load.
    pub sim: RunReport,
}

impl Comparison {
    /// |live − simulated| normalised goodput.
    pub fn diff(&self) -> f64 {
        (self.live - self.sim.goodput).abs()
    }

    pub fn pass(&self) -> bool {
        self.diff() <= TOLERANCE
    }
}

/// Pairs each simulated run (variant label, load, report) with the live point of that
/// variant and load; runs without a live point are left out.
pub fn compare(sim: &[(&str, f64, RunReport)], live: &[PointResult]) -> Vec<Comparison> {
    sim.iter()
        .filter_map(|(label, x, report)| {
            let p = live
                .iter()
                .find(|p| p.variant == *label && (p.x - x).abs() < 1e-9)?;
            // The simulator counts a call as Shen et al. do, with all five setup messages
            // (the unretransmitted 180 included): compare the live count by that rule.
            // With feedback the two live counts agree; without, only this one collapses.
            Some(Comparison {
                variant: (*label).to_owned(),
                x: *x,
                live: p.goodput_at_uas.or(p.goodput_with_180).unwrap_or(p.goodput),
                sim: report.clone(),
            })
        })
        .collect()
}

/// `comparison.csv`: a row per compared point.
pub fn comparison_csv(rows: &[Comparison]) -> String {
    let mut csv = CsvTable::new([
        "variant",
        "x",
        "live_goodput",
        "sim_goodput",
        "abs_diff",
        "pass",
        "sim_setup_p99_ms",
        "sim_retrans_ratio",
        "sim_occupancy",
        "sim_reject_ratio",
    ]);
    for c in rows {
        let r = &c.sim;
        csv.row([
            c.variant.clone(),
            c.x.to_string(),
            format!("{:.4}", c.live),
            format!("{:.4}", r.goodput),
            format!("{:.4}", c.diff()),
            c.pass().to_string(),
            format!("{:.2}", r.setup_delay_p99_ms),
            format!("{:.4}", r.retrans_ratio),
            format!("{:.4}", r.occupancy),
            format!("{:.4}", r.reject_ratio),
        ]);
    }
    csv.into_text()
}

/// Runs the experiment's variants in the simulator at the live loads and capacity, and
/// reports |live - sim| per point as each simulation ends; draws both curves on
/// `live-vs-sim.svg` and returns the compared points.
///
/// By default the simulator measures the live point's window (same duration and warm-up):
/// a control whose start-up transient outlasts the warm-up (rate-occ with its 200 ms
/// interval takes about 20 s to leave the collapse it starts in, live and simulated alike)
/// would otherwise be compared over its transient live and its steady state simulated.
fn compare_sweep_with_simulator(
    args: &OverloadConfig,
    e: &Experiment,
    plan: &Plan,
    loads: &[f64],
    timing: Timing,
    live: &[PointResult],
    console: &dyn Console,
) -> Result<Vec<Comparison>, String> {
    let (sim_duration, sim_warmup) = match args.sim_duration {
        Some(d) => (d, d / 5.0),
        None => (timing.duration, timing.warmup),
    };
    if !(sim_duration >= 5.0 && sim_duration.is_finite()) {
        return Err("--sim-duration must be at least 5 s".into());
    }
    // The same scaled scenario as the live RE, at each live load.
    let mut runs: Vec<(&str, f64)> = Vec::new();
    let mut scenarios: Vec<Scenario> = Vec::new();
    for v in &plan.variants {
        for &x in loads {
            let mut sc = v.scenario.clone();
            sc.offered_load = x;
            sc.duration_s = sim_duration;
            sc.warmup_s = sim_warmup;
            // The live calls hang up after `--hold` (BYE at once by default); the
            // simulator's holding time is exponential with that mean (it must be > 0).
            sc.call.holding_time_s = args.hold.max(1e-3);
            runs.push((&v.label, x));
            scenarios.push(sc);
        }
    }
    say!(
        console,
        "\nsimulator: {} runs of {sim_duration} s, {sim_warmup} s warm-up ({}, scaled to {:.0} calls/s like the live RE)...",
        runs.len(),
        e.name,
        args.capacity
    );
    let w = label_width(plan);
    say!(
        console,
        "\n{:<w$} {:>5} {:>8} {:>8} {:>8} {:>5}",
        "variant",
        "x",
        "live",
        "sim",
        "|diff|",
        "ok"
    );
    let started = Instant::now();
    // Each row as soon as its simulation (and every one before it) is done.
    let reports = simulate_in_order(&scenarios, console, |i, r| {
        let (label, x) = runs[i];
        for c in compare(&[(label, x, r.clone())], live) {
            say!(
                console,
                "{:<w$} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>5}",
                c.variant,
                c.x,
                c.live,
                c.sim.goodput,
                c.diff(),
                if c.pass() { "pass" } else { "FAIL" }
            );
        }
        if let Some(t) = &r.tcp {
            let d = &t.dropped_by;
            say!(
                console,
                "  tcp (sim): dropped at full write queues: callers {} B, SEs {} messages, RE {} messages, callee {} B; smart forwarding rejected {}; RE read {} messages ({})",
                d.callers_bytes,
                d.ses_messages,
                d.re_messages,
                d.callee_bytes,
                t.rejected_smart_forwarding,
                t.re_messages_read,
                t.re_messages_in
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    })?;
    say!(
        console,
        "simulated in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let sim: Vec<(&str, f64, RunReport)> = runs
        .iter()
        .zip(reports)
        .map(|(&(label, x), r)| (label, x, r))
        .collect();
    let rows = compare(&sim, live);
    // Runs without a live point count as within the tolerance.
    let failed = rows.iter().filter(|c| !c.pass()).count();
    say!(
        console,
        "live vs simulated: {} of {} points within {TOLERANCE}",
        runs.len() - failed,
        runs.len()
    );
    write(&args.out.join("comparison.csv"), &comparison_csv(&rows))?;
    let mut curves: Vec<Series> = Vec::new();
    for v in &plan.variants {
        let mine = rows.iter().filter(|c| c.variant == v.label);
        curves.push(Series {
            label: format!("{} (live)", v.label),
            points: mine.clone().map(|c| (c.x, c.live)).collect(),
        });
        curves.push(Series {
            label: format!("{} (sim)", v.label),
            points: mine.map(|c| (c.x, c.sim.goodput)).collect(),
        });
    }
    let x_max = loads.iter().copied().fold(1.0_f64, f64::max);
    let ideal = Series {
        label: "min(offered, 1)".into(),
        points: vec![(0.0, 0.0), (1.0, 1.0), (x_max, 1.0)],
    };
    line_chart(
        &args.out.join("live-vs-sim.svg"),
        &Axes {
            title: &format!("{}: live and simulated", e.title),
            x_label: "offered load (multiples of the RE's capacity)",
            y_label: "goodput (normalised)",
            y_max: 1.1,
        },
        &curves,
        Some(&ideal),
    )?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_load::Counts;

    #[test]
    fn scaling_keeps_the_seconds_of_work_each_queue_holds() {
        let mut sc = Scenario::default();
        let (capacity, queue) = (sc.capacity_cps(), sc.re.queue_capacity);
        sc.scale_to_capacity(3.0 * capacity);
        assert!((sc.capacity_cps() - 3.0 * capacity).abs() < 1e-3);
        assert_eq!(sc.re.queue_capacity, 3 * queue);
        let mut slow = Scenario::default();
        slow.scale_to_capacity(1e-9);
        assert_eq!(slow.re.queue_capacity, 1, "a queue keeps one place");
    }

    #[test]
    fn a_tcp_experiment_runs_in_the_topology_each_variant_with_its_own_ses() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/shen2010-fig16.toml");
        let args = OverloadConfig {
            experiment: Some(path.clone()),
            ..OverloadConfig::default()
        };
        assert!(is_topology(&args).unwrap(), "TCP hops make it a topology");
        let plan = plan(&args).unwrap();
        let ses: Vec<(usize, bool)> = plan
            .variants
            .iter()
            .map(|v| (v.scenario.sources.len(), v.scenario.se.tcp.smart_forwarding))
            .collect();
        assert_eq!(
            ses,
            [
                (1, false),
                (1, true),
                (1, true),
                (3, false),
                (3, true),
                (3, true),
                (10, false),
                (10, true),
                (10, true)
            ]
        );
        // ECS+BM minimises the RE's buffer of the INVITE connections only.
        let ecs = &plan.variants[2].scenario.re.tcp;
        assert_eq!(
            (
                ecs.listen_receive_buffer,
                ecs.invite_connection_receive_buffer
            ),
            (0, 2048)
        );
        let only = OverloadConfig {
            experiment: Some(path.clone()),
            only: vec!["3 SEs, ICS+BM+SF".into()],
            ..OverloadConfig::default()
        };
        let plan = super::plan(&only).unwrap();
        assert_eq!(plan.variants.len(), 1);
        assert_eq!(shares_of(&plan.variants[0]), [1.0; 3]);
        let unknown = OverloadConfig {
            experiment: Some(path),
            only: vec!["3 SEs".into()],
            ..OverloadConfig::default()
        };
        assert!(super::plan(&unknown)
            .unwrap_err()
            .contains("no such variant"));
    }

    #[test]
    fn a_parameter_sweep_runs_each_value_as_a_variant_at_the_experiments_load() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/shen2010-fig19-20.toml");
        let args = OverloadConfig {
            experiment: Some(path),
            ..OverloadConfig::default()
        };
        let plan = plan(&args).unwrap();
        assert_eq!(plan.loads, [11.5]);
        let buffers: Vec<usize> = plan
            .variants
            .iter()
            .map(|v| v.scenario.re.tcp.listen_receive_buffer)
            .collect();
        assert_eq!(buffers[..4], [1024, 1536, 2048, 3072]);
        assert_eq!(buffers.len(), 12);
        assert_eq!(
            plan.variants[2].label,
            "10 SEs, ICS+BM+SF, re.tcp.listen_receive_buffer = 2048"
        );
    }

    #[test]
    fn the_default_plan_runs_every_feedback_variant_at_the_default_loads() {
        let args = OverloadConfig {
            ses: Some(2),
            ..OverloadConfig::default()
        };
        assert!(is_topology(&args).unwrap());
        let plan = plan(&args).unwrap();
        assert_eq!(plan.variants.len(), HOP_VARIANTS.split(',').count());
        assert_eq!(plan.loads, DEFAULT_LOADS);
        for v in &plan.variants {
            assert_eq!(shares_of(v), [1.0, 1.0]);
        }
        for v in &plan.variants {
            assert!(
                (v.scenario.capacity_cps() - 300.0).abs() < 1.0,
                "{}",
                v.label
            );
            // The SEs run the scenario's client settings, the simulator's too.
            assert_eq!(
                v.scenario.se.overload.client.rate_tau,
                Duration::from_millis(20)
            );
        }
        let wires: Vec<Option<OcAlgorithm>> =
            plan.variants.iter().map(|v| v.scenario.wire()).collect();
        assert_eq!(wires[0], None, "none: no feedback");
        assert_eq!(wires[1], Some(OcAlgorithm::Rate));
        assert_eq!(wires[2], Some(OcAlgorithm::Loss));
        let local = OverloadConfig::default();
        assert!(!is_topology(&local).unwrap(), "local controls: one proxy");
        let bad = OverloadConfig {
            variants: vec!["win-disc/rate".into()],
            ..OverloadConfig::default()
        };
        assert!(plan_variants(&bad)
            .unwrap_err()
            .contains("cannot be carried as rate"));
    }

    fn live(variant: &str, x: f64, goodput: f64, with_180: Option<f64>) -> PointResult {
        PointResult {
            experiment: "e".into(),
            variant: variant.into(),
            caller: "sluice",
            window: 1..=2,
            algorithm: "win-disc/sluicewin".into(),
            x,
            offered_load_measured: x,
            capacity_cps: 300.0,
            goodput,
            goodput_cps: goodput * 300.0,
            goodput_with_180: with_180,
            goodput_at_uas: None,
            retrans_ratio: 0.0,
            setup_delay_p50_ms: None,
            setup_delay_p99_ms: None,
            occupancy: None,
            reject_ratio: 0.0,
            calls_offered: 0,
            calls_good: 0,
            proxy_dropped: None,
            uac_retransmissions_sent: 0,
            uac_retransmissions_received: 0,
            uas_2xx_retransmissions: 0,
            forwarded_calls: None,
            rejected_calls: None,
            proxy_cpu_s: None,
            admitted_unanswered: None,
            rows: vec![SecondRow {
                second: 1,
                counts: Counts::default(),
                pdd_p50_ms: None,
                pdd_p99_ms: None,
                in_progress: 0,
            }],
            per_source: Vec::new(),
        }
    }

    fn simulated(goodput: f64) -> RunReport {
        RunReport {
            goodput,
            setup_delay_p99_ms: 42.5,
            ..RunReport::default()
        }
    }

    #[test]
    fn the_comparison_pairs_points_by_variant_and_load_by_the_papers_rule() {
        let live_points = [
            live("a", 1.0, 0.98, Some(0.95)),
            live("a", 4.0, 0.90, Some(0.70)),
            live("b", 4.0, 0.50, None),
        ];
        let sim = [
            ("a", 1.0, simulated(0.97)),
            ("a", 4.0, simulated(0.92)),
            ("b", 4.0, simulated(0.45)),
            ("b", 8.0, simulated(0.40)),
        ];
        let rows = compare(&sim, &live_points);
        // b at 8x has no live point.
        assert_eq!(rows.len(), 3);
        // The 180 rule where the live point has it, the caller's count otherwise.
        assert!((rows[0].live - 0.95).abs() < 1e-12 && rows[0].pass());
        assert!((rows[1].diff() - 0.22).abs() < 1e-9 && !rows[1].pass());
        assert!((rows[2].live - 0.50).abs() < 1e-12 && rows[2].pass());
        let csv = comparison_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[2],
            "a,4,0.7000,0.9200,0.2200,false,42.50,0.0000,0.0000,0.0000"
        );
    }

    #[test]
    fn the_experiments_links_reach_the_live_relays_and_the_flags_replace_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("links.toml");
        std::fs::write(
            &path,
            r#"name = "links"
title = "links"
[base]
duration_s = 10
warmup_s = 2
[base.link]
delay_ms = 7
loss = 0.01
backward_delay_ms = 3
[sweep]
offered_load = [1.0]
[[variant]]
label = "win-disc"
scenario = { re = { control = { algorithm = "win-disc" } } }
"#,
        )
        .unwrap();
        let args = OverloadConfig {
            experiment: Some(path),
            link_jitter_ms: 2.0,
            ..OverloadConfig::default()
        };
        let v = &plan(&args).unwrap().variants[0];
        let (f, b) = link_impairments(&v.scenario, 2.0).unwrap().unwrap();
        assert_eq!((f.delay_ms, f.loss, f.jitter_ms), (7.0, 0.01, 2.0));
        assert_eq!((b.delay_ms, b.loss, b.jitter_ms), (3.0, 0.01, 2.0));
        assert_eq!(
            describe_links(&f, &b),
            "7 ms ± 2 ms, 1 % loss forward, 3 ms ± 2 ms, 1 % loss backward"
        );
        // The flags set every hop both ways, in the simulator's scenario too.
        let flags = OverloadConfig {
            link_delay_ms: Some(10.0),
            link_loss: Some(0.005),
            ..args.clone()
        };
        let v = &plan(&flags).unwrap().variants[0];
        assert!((v.scenario.link.delay_ms - 10.0).abs() < 1e-12);
        assert_eq!(v.scenario.link.backward_delay_ms, None);
        let (f, b) = link_impairments(&v.scenario, 0.0).unwrap().unwrap();
        assert_eq!((f.delay_ms, f.loss), (b.delay_ms, b.loss));
        assert_eq!(describe_links(&f, &b), "10 ms, 0.5 % loss each way");
        // Perfect links: no relays.
        assert!(link_impairments(&Scenario::default(), 0.0)
            .unwrap()
            .is_none());
        let bad = OverloadConfig {
            link_loss: Some(1.5),
            ..args
        };
        assert!(plan(&bad).unwrap_err().contains("loss"));
    }

    #[test]
    fn with_links_every_node_names_the_relay_in_front_of_the_next() {
        let mut v = variant_from_spec("win-disc", 300.0, None).unwrap();
        let uas = SocketAddr::from(([127, 0, 0, 1], 5999));
        let plain = Wiring::new(&v, 2, uas, 0.0, 5.0, None).unwrap();
        assert!(plain.relays.is_none());
        assert_eq!((plain.uas_front, plain.re_front), (uas, plain.re));
        assert_eq!(plain.ses_seen, plain.ses);
        assert_eq!(plain.ses_front, plain.ses);

        v.scenario.link.delay_ms = 5.0;
        let w = Wiring::new(&v, 2, uas, 0.0, 5.0, None).unwrap();
        let relays = w.relays.as_ref().unwrap();
        assert_eq!(relays.relays.len(), 4, "UAS, shared SE-RE, one per SE");
        assert_ne!(w.uas_front, uas);
        assert_ne!(w.re_front, w.re);
        assert_eq!(w.re_advertise, Some(w.re_front.to_string()));
        // The RE's neighbours are the SEs' own sockets on the shared relay, which the SEs
        // advertise.
        assert_eq!(relays.relays[1].clients.len(), 2);
        for (i, (se, seen)) in relays.relays[1].clients.iter().enumerate() {
            assert_eq!(*se, w.ses[i]);
            assert_eq!(w.ses_seen[i], *seen);
            assert_eq!(w.ses_advertise[i], Some(seen.to_string()));
            assert_ne!(w.ses_front[i], w.ses[i]);
        }
        let stats = w.stop().unwrap();
        assert_eq!(stats.clients, 2, "the declared SEs");
    }

    #[test]
    fn a_variant_runs_the_scenarios_proxies_with_the_wire_it_names() {
        let v = variant_from_spec("rate-abs", 300.0, None).unwrap();
        assert_eq!(
            v.scenario.wire(),
            Some(OcAlgorithm::SluiceRate),
            "the paper's pairing"
        );
        assert!(
            (v.scenario.capacity_cps() - 300.0).abs() < 1e-3,
            "costs are kept to the ns"
        );
        assert_eq!(
            v.scenario.re.queue_capacity, 2100,
            "one second of work, as the paper's 500"
        );
        let v = variant_from_spec("rate-abs/loss", 300.0, Some(50)).unwrap();
        assert_eq!(v.algorithm, "rate-abs/loss");
        assert_eq!(
            v.scenario.se.overload.client.algorithms,
            [OcAlgorithm::Loss]
        );
        assert_eq!(
            v.scenario.re.control.rate_abs.budget_delay,
            Duration::from_millis(50)
        );
        assert_eq!(
            variant_from_spec("win-cont", 300.0, None)
                .unwrap()
                .algorithm,
            "win-cont/sluicewin"
        );
        assert!(variant_from_spec("win-disc/rate", 300.0, None).is_err());
        assert!(variant_from_spec("threshold/loss", 300.0, None).is_err());
        assert_eq!(
            variant_from_spec("none", 300.0, None)
                .unwrap()
                .scenario
                .wire(),
            None
        );
    }
}
