//! `sluice`: one binary, one subcommand per job.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod bench;
mod load;
mod logging;
mod meta;
mod packaging;
mod proxy;
mod relay;
mod sim;
mod sip;
mod terminal;
mod tune;
mod units;

#[cfg(test)]
mod cli_tests;

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "SIP overload control: proxy, load generator, simulator and tools"
)]
struct Cli {
    /// Log lines on standard error as text or as one JSON object per line; `RUST_LOG`
    /// filters them (default `info`; e.g. `RUST_LOG=sluice::control=info,warn`).
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Speed checks that report numbers against the project's targets.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// A live run in about a minute: sluice's proxy at 1x, 2x and 4x its capacity, without
    /// overload control and with PI; prints a table and writes an SVG (127.0.0.1 only).
    Demo(bench::DemoArgs),
    /// Run the SIP proxy (RFC 3261 transaction-stateful, UDP and TCP) with overload admission.
    Proxy(proxy::ProxyArgs),
    /// Load generator: `load uac` places calls, `load uas` answers them (UDP or TCP;
    /// loopback unless --bind names an address off it).
    Load {
        #[command(subcommand)]
        command: load::LoadCommand,
    },
    /// An impaired UDP link between two loopback nodes: delay, jitter, loss and reordering,
    /// seeded, each way; prints what it did at the end.
    Relay(relay::RelayArgs),
    /// Run an experiment in the deterministic simulator (a TOML file or a built-in name).
    Sim(sim::SimArgs),
    /// Work with SIP messages (parse and inspect).
    Sip {
        #[command(subcommand)]
        command: sip::SipCommand,
    },
    /// Tune the PI controller's gains by Extremum Seeking against the simulator.
    Tune(tune::TuneArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(packaging::CompletionsArgs),
    /// Write man pages: sluice.1 and one per subcommand.
    Man(packaging::ManArgs),
}

// A proxy under load allocates and frees a message's buffers and a transaction's state
// many times a call, while transactions linger for Timer J's 32 s: in that fragmented heap
// glibc's malloc spent about a tenth of the proxy's CPU coalescing and splitting chunks
// (perf at 24,000 calls/s), and a call cost 38-50 us of proxy CPU from 16,000 to 24,000
// calls/s against 35-37 with jemalloc. mimalloc, also tried, cost as little but stalled
// the proxy long enough to overflow its socket buffers at 16,000 calls/s.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Proxy(_) | Command::Relay(_) => "info",
        _ => "error",
    };
    logging::init(cli.log_format, default_level);
    let result = match cli.command {
        Command::Bench { command } => bench::run(&command),
        Command::Demo(args) => bench::demo(&args),
        Command::Proxy(args) => proxy::run(&args, cli.log_format),
        Command::Load { command } => load::run(&command),
        Command::Relay(args) => relay::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Sip { command } => sip::run(command),
        Command::Tune(args) => tune::run(&args),
        Command::Completions(args) => packaging::completions(&args, Cli::command()),
        Command::Man(args) => packaging::man(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
