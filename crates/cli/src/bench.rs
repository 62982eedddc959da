//! `sluice bench` and `sluice demo`: speed checks and live experiments (run by
//! `sluice-bench`), their flags and what they print.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use sluice_bench::beta::{bench_beta, Beta};
use sluice_bench::config::{Caller, OverloadConfig, ALL_VARIANTS};
use sluice_bench::local::{demo as run_demo, Demo};
use sluice_bench::overload::bench_overload;
use sluice_bench::parallel::cores;
use sluice_bench::proxy_bench::{bench_proxy, Generator, ProxyBench};
use sluice_bench::sim_bench::{bench_sim, SimBench};
use sluice_bench::soak::{bench_soak, default_out as soak_out, SoakConfig};

use crate::meta::{self, Meta};
use crate::terminal::Terminal;
use crate::units::{millis, parse_duration, whole_micros, whole_millis, whole_seconds};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Simulator speed: simulated SIP messages per wall-clock second on one core, and the
    /// wall time of the whole Shen 2008 fig. 21 sweep on all cores.
    Sim(SimBenchArgs),
    /// Proxy throughput on loopback: a UAS, the proxy under test (sluice, Kamailio or any
    /// command) and a UAC; ramps the call rate and reports the highest rate with no failed
    /// call and no retransmission.
    Proxy(ProxyBenchArgs),
    /// Local overload control live: a UAS, the proxy under test with emulated capacity (or
    /// any command) and a UAC on loopback; sweeps offered load as multiples of capacity for
    /// each control and writes summary.csv (the columns of `sluice sim`) and SVGs.
    Overload(Box<OverloadArgs>),
    /// A proxy's own β for g_opt(r): its CPU time per forwarded call over per rejected call,
    /// each from a run at the same rate on loopback (sluice, and Kamailio with --kamailio).
    Beta(BetaArgs),
    /// One control at a fixed overload for a long time (default 5x capacity for 30
    /// minutes): goodput and each proxy's resident memory per interval, its proxies run as
    /// child processes; writes soak.csv, soak.svg and verdict.txt (goodput within ±5 % and
    /// memory within ±10 % of their means after the warm-up). A failing verdict still exits 0.
    Soak(SoakArgs),
}

#[derive(Args, Debug)]
pub struct SimBenchArgs {
    /// Simulated time of the single-core runs.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: Duration,
    /// Parallel runs for the sweep (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only the single-core measurement.
    #[arg(long)]
    skip_sweep: bool,
}

/// The load generator of `bench proxy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GeneratorArg {
    /// sluice's own UAC and UAS.
    Sluice,
    /// SIPp at both ends.
    Sipp,
}

#[derive(Args, Debug, Clone)]
pub struct ProxyBenchArgs {
    /// Proxy under test, repeatable to compare in one run: `sluice` or `sluice:N` (this
    /// binary's `sluice proxy` with one or N UDP threads), `kamailio` or `kamailio:N`
    /// (tests/kamailio/proxy.cfg with N worker processes), or a command line with the placeholders {listen}, {next_hop},
    /// {listen_port}, {next_hop_port} and {duration} (whole seconds, a bare number: sluice
    /// takes `--duration {duration}s`; run with `sh -c`); `none` calls the UAS directly (the
    /// generator's own maximum). `sluice/tcp`, `kamailio/tcp` and `kamailio:N/tcp` (any
    /// of these names with `/tcp`) run the proxy over TCP on both sides.
    #[arg(long = "proxy", default_value = "sluice")]
    pub proxies: Vec<String>,
    /// First call rate, calls/s.
    #[arg(long, default_value_t = 500.0)]
    pub rate_start: f64,
    /// Rate increase per step, calls/s.
    #[arg(long, default_value_t = 500.0)]
    pub rate_step: f64,
    /// Highest rate tried, calls/s.
    #[arg(long, default_value_t = 30_000.0)]
    pub rate_max: f64,
    /// How long each step places calls.
    #[arg(long, default_value = "4s", value_parser = parse_duration)]
    pub step: Duration,
    /// How long a step waits for its calls to finish; calls still running then count
    /// against the step.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub drain: Duration,
    /// Load generator at both ends: sluice (`load uac`/`load uas` in this process) or SIPp
    /// (the scenarios in --sipp-scenarios, a SIPp UAS and UAC per step).
    #[arg(long, value_enum, default_value_t = GeneratorArg::Sluice)]
    pub generator: GeneratorArg,
    /// Directory holding SIPp's uac.xml and uas.xml (calls through a record-routing proxy).
    #[arg(long, default_value = "tests/sipp")]
    pub sipp_scenarios: PathBuf,
    /// Kamailio config for the `kamailio` proxy.
    #[arg(long, default_value = "tests/kamailio/proxy.cfg")]
    pub kamailio_cfg: PathBuf,
    /// Output folder for bench_proxy.csv and bench_proxy.json.
    #[arg(long, default_value = "out/bench-proxy")]
    pub out: PathBuf,
    /// Run the proxy in a network namespace of its own (created for the run and deleted at
    /// its end, root needed), reached from the generator over a veth pair instead of
    /// loopback. sluice's generator over UDP only.
    #[arg(long)]
    pub netns: bool,
}

#[derive(Args, Debug, Clone)]
pub struct OverloadArgs {
    /// Offered loads, as multiples of the proxy's capacity (default 0.5,1,2,4, or the
    /// experiment's sweep with --experiment).
    #[arg(long, value_delimiter = ',')]
    pub loads: Option<Vec<f64>>,
    /// How long each point's calls arrive. With --ses or --experiment they go on arriving,
    /// uncounted, for the setup deadline (10 s) after it, as in the simulator, so the last
    /// counted calls meet the same load as the first.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The start of each point that is not counted (default: a quarter of --duration).
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// sluice local controls to run, comma-separated (none, threshold, ohta, occ, red, pi,
    /// latency-bucket); an empty list runs only --proxy-cmd.
    /// `POLICY:fifo` runs it in the proxy's plain structure (one FIFO for every message)
    /// instead of De Cicco et al.'s INVITE queue.
    #[arg(long, value_delimiter = ',', default_value = ALL_VARIANTS)]
    pub variants: Vec<String>,
    /// sluice's emulated capacity, calls/s: an INVITE processed in full costs
    /// 1/capacity minus what the other messages of a call cost.
    #[arg(long, default_value_t = 300.0)]
    pub capacity: f64,
    /// Emulated cost of every message other than an INVITE, whole microseconds (0s: De
    /// Cicco et al.'s model, where only INVITEs cost).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub cost_other: Duration,
    /// `β`: a forwarded call's emulated cost over a rejected call's (sets cost_reject_us).
    /// The default is near sluice's own: `sluice bench beta` measures it (its process's
    /// CPU per forwarded call over per rejected call at native speed: 4.7 to 7.7 here at
    /// 2,000 to 6,000 calls/s; Kamailio 8.9), and every run prints a rougher estimate from
    /// its own points.
    #[arg(long, default_value_t = 6.0)]
    pub beta: f64,
    /// A proxy command to compare with (e.g. Kamailio with tests/kamailio/ratelimit.cfg),
    /// run per point with `{listen}`, `{next_hop}`, `{listen_port}`, `{next_hop_port}` and
    /// `{duration}` replaced as in `sluice bench proxy`. Repeatable.
    #[arg(long)]
    pub proxy_cmd: Vec<String>,
    /// Labels for the --proxy-cmd curves, in order (default: proxy-cmd-N).
    #[arg(long)]
    pub proxy_label: Vec<String>,
    /// Capacity of the --proxy-cmd proxies, calls/s (it has no emulated capacity: measure
    /// it first, e.g. with `sluice bench proxy`); their loads are multiples of it.
    #[arg(long)]
    pub proxy_capacity: Option<f64>,
    /// Take variants and the offered-load sweep from a simulator experiment TOML (its
    /// `control` tables and `re` settings map onto the proxy's config).
    #[arg(long)]
    pub experiment: Option<PathBuf>,
    /// With --experiment in the topology: run only the variant with this label (e.g.
    /// "3 SEs, ICS+BM+SF"); repeat for more.
    #[arg(long, requires = "experiment")]
    pub only: Vec<String>,
    /// Call holding time (BYE this long after the ACK).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub hold: Duration,
    /// Output folder for summary.csv, points.jsonl, series.csv and the SVGs.
    #[arg(long, default_value = "out/overload")]
    pub out: PathBuf,
    /// Who places the calls: sluice's UAC, SIPp (--sipp-scenario, measured the same way),
    /// both one after the other at every point, or `split`: both in the same run, each
    /// offering half the load to the one proxy, so both see the same overload; `both` and
    /// `split` end with a table of how far they agree.
    #[arg(long, value_enum, default_value_t = CallerArg::Sluice)]
    pub generator: CallerArg,
    /// SIPp's UAC scenario for --generator sipp|both|split: it must time setup as rtd 1 and split
    /// it at 10 s (see the file).
    #[arg(long, default_value = "tests/sipp/uac-setup.xml")]
    pub sipp_scenario: PathBuf,
    /// Hop-by-hop topology (see docs/ARCHITECTURE.md): this many UACs, each calling through its own
    /// SE, into one RE with the emulated capacity. Default 3 when --variants or
    /// --experiment are hop-by-hop (e.g. `rate-abs/rate`, `win-disc`).
    #[arg(long)]
    pub ses: Option<usize>,
    /// Topology: the RE's queueing-delay budget D_B for win-disc, win-cont and rate-abs,
    /// and win-auto's delay binding, whole milliseconds (default: the variant's, Table 2's
    /// 200ms D_B and no binding). The RE lets its queue hold about this much work, so it
    /// bounds the setup delay the feedback aims for.
    #[arg(long, value_parser = parse_duration)]
    pub budget_delay: Option<Duration>,
    /// Topology: the SEs' RFC 7415 tolerance τ, whole milliseconds: how much of a burst
    /// above the fed-back rate an SE lets through. Default: the SE configuration's
    /// `overload.client.rate_tau_ms` (20); the simulator's SEs run with the same value.
    #[arg(long, value_parser = parse_duration)]
    pub se_rate_tau: Option<Duration>,
    /// A dynamic experiment (load schedules, e.g. shen2008-fig27-31) in the topology: its
    /// schedule's times are multiplied by this (0.25 runs the 1600 s pattern in 400 s);
    /// SIP's timers are not scaled.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Topology with --experiment: simulated time per point of the simulator's run of
    /// the same experiment, the first fifth warm-up (default: the live point's --duration
    /// and --warmup, so both measure the same window of the same start-up).
    #[arg(long, value_parser = parse_duration)]
    pub sim_duration: Option<Duration>,
    /// Topology: a relay on every hop (UAC -> SE, SE -> RE, RE -> UAS) delays each
    /// datagram this long, each way (default: the experiment's `[link]` table, or no
    /// relays). The simulator's links get the same.
    #[arg(long, value_parser = parse_duration)]
    pub link_delay: Option<Duration>,
    /// Topology: the relays lose each datagram with this probability, each way (default:
    /// the experiment's `[link]`). The simulator's links get the same.
    #[arg(long)]
    pub link_loss: Option<f64>,
    /// Topology: uniform jitter of ± this much on the relays' delay, order kept (live
    /// only: the simulator's links have none).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub link_jitter: Duration,
    /// UDP threads of every sluice proxy (`workers`; the simulator's have one emulated
    /// processor whatever this says).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// The callers, the proxy (hop-by-hop: each SE and the RE) and the callees each in a
    /// network namespace of its own with its own address, on one bridge (created for the
    /// run and deleted at its end, root needed), instead of all on loopback. sluice's UAC
    /// and proxies only; links without impairments.
    #[arg(long)]
    pub netns: bool,
}

/// The calling side of a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CallerArg {
    /// sluice's UAC.
    Sluice,
    /// SIPp with --sipp-scenario.
    Sipp,
    /// Each of them in turn at every point.
    Both,
    /// sluice's UAC and SIPp at once, half the offered load each. A collapsing proxy
    /// oscillates over tens of seconds, so two runs of one generator differ by more than
    /// the generators do; in one run both callers meet the same queue at the same moments,
    /// and what is left between their numbers is the generators themselves: how they
    /// count, and how they send (a full drop-tail queue favours the smoother sender, see
    /// docs/ARCHITECTURE.md).
    Split,
}

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// The control: a local one in a single proxy (pi, occ, ..., `POLICY:fifo`) or a
    /// hop-by-hop variant in the topology UACs -> SEs -> RE -> UAS (win-cont, win-disc,
    /// rate-abs/rate, ...), as in `bench overload --variants`.
    #[arg(long)]
    pub control: String,
    /// Offered load, a multiple of the (RE's) emulated capacity.
    #[arg(long = "load", visible_alias = "x", default_value_t = 5.0)]
    pub load: f64,
    /// How long calls arrive (a whole number of intervals).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub duration: Duration,
    /// The time per row of soak.csv, whole seconds.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub interval: Duration,
    /// The start that the verdict leaves out (whole seconds): intervals starting earlier
    /// are warm-up.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Emulated capacity, calls/s (the single proxy's, or the RE's).
    #[arg(long, default_value_t = 300.0)]
    pub capacity: f64,
    /// Local controls: a forwarded call's emulated cost over a rejected one's. 8 leaves
    /// g_opt(5) = 0.31 of capacity (with `bench overload`'s 6 it is 0.08, too little
    /// goodput to judge its steadiness).
    #[arg(long, default_value_t = 8.0)]
    pub beta: f64,
    /// Local controls: emulated cost of every message other than an INVITE, whole
    /// microseconds.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub cost_other: Duration,
    /// Hop-by-hop: SEs in front of the RE, one UAC each.
    #[arg(long, default_value_t = 3)]
    pub ses: usize,
    /// Call holding time (BYE this long after the ACK).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub hold: Duration,
    /// Output folder (default out/soak/CONTROL).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BetaArgs {
    /// Call rate of every run, calls/s (below the proxy's capacity: a forwarding run that
    /// fails or retransmits measures a collapse, not a cost).
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// How long each run places calls.
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Also measure Kamailio with `--kamailio-cfg` (tests/kamailio/ratelimit.cfg, one worker).
    #[arg(long)]
    pub kamailio: bool,
    /// Kamailio config with the ratelimit module and an `RL_PIPE` define.
    #[arg(long, default_value = "tests/kamailio/ratelimit.cfg")]
    pub kamailio_cfg: PathBuf,
    /// Output folder for beta.json.
    #[arg(long, default_value = "out/beta")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How long each point's calls arrive (6 points: no control and PI at 1x, 2x, 4x).
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Emulated capacity, calls/s.
    #[arg(long, default_value_t = 300.0)]
    pub capacity: f64,
    /// A forwarded call's emulated cost over a rejected one's: 8, a cheap rejection path
    /// (sluice's native ratio measured 3.4 to 6.5 here, see `bench overload --beta`). No
    /// local control can do better than `g_opt(r)`, 0 beyond `r_max = 0.9 β`: with β below
    /// 4.4 nothing local holds 4x.
    #[arg(long, default_value_t = 8.0)]
    pub beta: f64,
    /// Output folder for the table's CSV and the SVG.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
}

pub fn run(command: &BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Sim(a) => bench_sim(
            &SimBench {
                duration: a.duration.as_secs_f64(),
                jobs: a.jobs.unwrap_or_else(cores),
                skip_sweep: a.skip_sweep,
            },
            &Terminal::new("runs"),
        ),
        BenchCommand::Proxy(a) => {
            let bench = ProxyBench {
                proxies: a.proxies.clone(),
                start: a.rate_start,
                step: a.rate_step,
                max: a.rate_max,
                step_secs: a.step.as_secs_f64(),
                drain: a.drain.as_secs_f64(),
                generator: match a.generator {
                    GeneratorArg::Sluice => Generator::Sluice,
                    GeneratorArg::Sipp => Generator::Sipp,
                },
                sipp_scenarios: a.sipp_scenarios.clone(),
                kamailio_cfg: a.kamailio_cfg.clone(),
                out: Some(a.out.clone()),
                netns: a.netns,
            };
            let meta = Meta::live(&bench)?;
            bench_proxy(&bench, &Terminal::new("rate steps"))?;
            meta::write(&a.out, &meta)
        }
        BenchCommand::Overload(a) => {
            let config = overload_config(a)?;
            let meta = Meta::live(&config)?;
            bench_overload(&config, &Terminal::new("points"))?;
            meta::write(&a.out, &meta)
        }
        BenchCommand::Beta(a) => {
            let beta = Beta {
                rate: a.rate,
                secs: a.duration.as_secs_f64(),
                kamailio: a.kamailio,
                kamailio_cfg: a.kamailio_cfg.clone(),
                out: Some(a.out.clone()),
            };
            let meta = Meta::live(&beta)?;
            bench_beta(&beta, &Terminal::new("runs"))?;
            meta::write(&a.out, &meta)
        }
        BenchCommand::Soak(a) => {
            let out = a.out.clone().unwrap_or_else(|| soak_out(&a.control));
            let soak = SoakConfig {
                control: a.control.clone(),
                load: a.load,
                minutes: a.duration.as_secs_f64() / 60.0,
                interval_s: whole_seconds("--interval", a.interval)?,
                warmup_s: whole_seconds("--warmup", a.warmup)?,
                capacity: a.capacity,
                beta: a.beta,
                cost_other_us: whole_micros("--cost-other", a.cost_other)?,
                ses: a.ses,
                hold: a.hold.as_secs_f64(),
                out: Some(out.clone()),
                proxy_exe: None,
            };
            let meta = Meta::live(&soak)?;
            bench_soak(&soak, &Terminal::new("intervals"))?;
            meta::write(&out, &meta)
        }
    }
}

fn overload_config(a: &OverloadArgs) -> Result<OverloadConfig, String> {
    Ok(OverloadConfig {
        loads: a.loads.clone(),
        duration: a.duration.as_secs_f64(),
        warmup: a.warmup.map(|d| d.as_secs_f64()),
        variants: a.variants.clone(),
        capacity: a.capacity,
        cost_other_us: whole_micros("--cost-other", a.cost_other)?,
        beta: a.beta,
        proxy_cmd: a.proxy_cmd.clone(),
        proxy_label: a.proxy_label.clone(),
        proxy_capacity: a.proxy_capacity,
        experiment: a.experiment.clone(),
        only: a.only.clone(),
        hold: a.hold.as_secs_f64(),
        out: a.out.clone(),
        generator: match a.generator {
            CallerArg::Sluice => Caller::Sluice,
            CallerArg::Sipp => Caller::Sipp,
            CallerArg::Both => Caller::Both,
            CallerArg::Split => Caller::Split,
        },
        sipp_scenario: a.sipp_scenario.clone(),
        ses: a.ses,
        budget_delay_ms: a
            .budget_delay
            .map(|d| whole_millis("--budget-delay", d))
            .transpose()?,
        se_rate_tau_ms: a
            .se_rate_tau
            .map(|d| whole_millis("--se-rate-tau", d))
            .transpose()?,
        time_scale: a.time_scale,
        sim_duration: a.sim_duration.map(|d| d.as_secs_f64()),
        link_delay_ms: a.link_delay.map(millis),
        link_loss: a.link_loss,
        link_jitter_ms: millis(a.link_jitter),
        workers: usize::try_from(a.workers).unwrap_or(1),
        netns: a.netns,
    })
}

/// `sluice demo`.
pub fn demo(a: &DemoArgs) -> Result<(), String> {
    let demo = Demo {
        duration: a.duration.as_secs_f64(),
        capacity: a.capacity,
        beta: a.beta,
        out: a.out.clone(),
    };
    let meta = Meta::live(&demo)?;
    run_demo(&demo, &Terminal::new("points"))?;
    meta::write(&a.out, &meta)
}
