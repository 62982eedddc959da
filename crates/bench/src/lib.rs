//! sluice-bench: runs sluice's experiments. Simulated sweeps on every core or one shard of
//! them at a time, the Extremum Seeking tuner (resumable), the simulator's speed check, and
//! the live benches on loopback: a proxy's highest clean call rate (`bench proxy`), local
//! overload control against `g_opt(r)` (`bench overload`, `demo`), the hop-by-hop topology
//! and its dynamic load beside the simulator's run of the same experiment, a proxy's own
//! `β` (`bench beta`), and a long run at fixed overload (`bench soak`); with sluice's proxy,
//! UAC and UAS, Kamailio or SIPp.
//!
//! What it writes goes through `sluice-report`; what it prints goes to a [`console::Console`]
//! the caller supplies (the `sluice` binary prints it and draws progress bars).
//!
//! Modules, each using only those listed before it:
//!
//! * [`console`], [`builtin`], [`config`], [`proxy_config`]: output sink, built-in
//!   experiments, settings of `bench overload`, a proxy's emulated costs;
//! * [`parallel`]: simulations on every core; [`point`]: one live point's results;
//!   [`process`]: proxies, commands and UASes started and stopped;
//! * [`sipp`], [`output`]: SIPp as a caller and its statistics; a live sweep's files;
//! * [`sweep`], [`tuning`], [`sim_bench`]: `sluice sim`, `sluice tune`, `bench sim`;
//! * [`proxy_bench`], [`beta`]: `bench proxy`, `bench beta`;
//! * [`local`], [`dynamic`], [`topology`], [`overload`]: `bench overload` and `demo`;
//! * [`soak`]: `bench soak`, one control at a fixed overload for a long time, its proxies
//!   as child processes.

pub mod builtin;
pub mod config;
pub mod console;
pub mod parallel;
pub mod point;
pub mod process;
pub mod proxy_config;

pub mod output;
pub mod sipp;

pub mod sim_bench;
pub mod sweep;
pub mod tuning;

pub mod beta;
pub mod netns;
pub mod proxy_bench;

pub mod dynamic;
pub mod local;
pub mod overload;
pub mod topology;

pub mod soak;
