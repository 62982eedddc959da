//! The settings of `sluice bench overload` (the CLI's flags, parsed), shared by the
//! single-proxy sweep and the hop-by-hop topology.

use std::path::PathBuf;

/// The sluice variants a single-proxy sweep runs by default: every local control of the
/// control crate.
pub const ALL_VARIANTS: &str = "none:fifo,none,threshold,ohta,occ,red,pi,latency-bucket";

/// The calling side of a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Caller {
    Sluice,
    Sipp,
    Both,
    /// sluice's UAC and SIPp at once, half the offered load each. A collapsing proxy
    /// oscillates over tens of seconds, so two runs of one generator differ by more than
    /// the generators do; in one run both callers meet the same queue at the same moments,
    /// and what is left between their numbers is the generators themselves: how they
    /// count, and how they send (a full drop-tail queue favours the smoother sender, see
    /// docs/ARCHITECTURE.md).
    Split,
}

/// `sluice bench overload`'s settings; the CLI's `--help` explains each.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OverloadConfig {
    /// Offered loads, multiples of the capacity (`None`: the default or the experiment's).
    pub loads: Option<Vec<f64>>,
    /// Seconds of arrivals per point.
    pub duration: f64,
    /// Seconds at the start of each point not counted (`None`: a quarter of `duration`).
    pub warmup: Option<f64>,
    /// sluice local controls (`POLICY[:fifo]`), or topology variants (`ALGORITHM[/WIRE]`).
    pub variants: Vec<String>,
    /// sluice's emulated capacity, calls/s.
    pub capacity: f64,
    pub cost_other_us: u64,
    pub beta: f64,
    /// Proxy commands to compare with, their labels and their common capacity.
    pub proxy_cmd: Vec<String>,
    pub proxy_label: Vec<String>,
    pub proxy_capacity: Option<f64>,
    /// A simulator experiment whose variants and sweep to run live.
    pub experiment: Option<PathBuf>,
    /// With `experiment`: only the variants with these labels (empty: all).
    pub only: Vec<String>,
    /// Seconds between ACK and BYE.
    pub hold: f64,
    pub out: PathBuf,
    pub generator: Caller,
    pub sipp_scenario: PathBuf,
    /// Topology: UACs and SEs in front of the RE.
    pub ses: Option<usize>,
    pub budget_delay_ms: Option<u64>,
    pub se_rate_tau_ms: Option<u64>,
    /// Topology with a dynamic experiment: its schedule's times are multiplied by this.
    pub time_scale: f64,
    /// Topology with an experiment: simulated seconds per point of the comparison.
    pub sim_duration: Option<f64>,
    /// Topology: one-way delay of every hop, milliseconds, both directions (`None`: the
    /// experiment's `[link]`, or none). The simulator's links get it too.
    pub link_delay_ms: Option<f64>,
    /// Topology: loss probability of every hop, both directions, as `link_delay_ms`.
    pub link_loss: Option<f64>,
    /// Topology: jitter of every live hop, milliseconds (the simulator has none).
    pub link_jitter_ms: f64,
    /// UDP threads of every sluice proxy the bench starts (`workers`).
    pub workers: usize,
    /// Every host (callers, the proxy or each SE and the RE, callees) in a network
    /// namespace of its own on one bridge, instead of all on loopback.
    pub netns: bool,
}

impl Default for OverloadConfig {
    fn default() -> Self {
        OverloadConfig {
            loads: None,
            duration: 20.0,
            warmup: None,
            variants: ALL_VARIANTS.split(',').map(str::to_owned).collect(),
            capacity: 300.0,
            cost_other_us: 0,
            beta: 6.0,
            proxy_cmd: Vec::new(),
            proxy_label: Vec::new(),
            proxy_capacity: None,
            experiment: None,
            only: Vec::new(),
            hold: 0.0,
            out: PathBuf::from("out/overload"),
            generator: Caller::Sluice,
            sipp_scenario: PathBuf::from("tests/sipp/uac-setup.xml"),
            ses: None,
            budget_delay_ms: None,
            se_rate_tau_ms: None,
            time_scale: 1.0,
            sim_duration: None,
            link_delay_ms: None,
            link_loss: None,
            link_jitter_ms: 0.0,
            workers: 1,
            netns: false,
        }
    }
}
