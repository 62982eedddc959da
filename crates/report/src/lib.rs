//! sluice-report: the files sluice's experiments leave behind, and nothing else. The
//! simulator's output folder (`summary.csv`, `runs.jsonl`, `timeseries/*.csv`, the SVG plots
//! named after the figure, `report.html`), the partial outputs of a sharded sweep and their
//! merge into that same folder, the tuner's trajectory, state and result, and the line
//! charts and report pages every bench writes.
//!
//! It is a crate of its own, apart from the benches that run things, because its one job
//! is a file format: the simulator's output must be the same bytes however it was produced
//! (one process, `--jobs N`, shards merged later on another machine), and keeping the
//! writers here, free of sockets, processes and threads, is what lets that be tested
//! directly.

pub mod claims;
pub mod experiment;
pub mod files;
pub mod html;
pub mod plot;
pub mod shard;
pub mod stats;
pub mod tuning;
