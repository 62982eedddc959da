//! The log: `tracing` events on standard error, as text or one JSON object per line
//! (`--log-format`), filtered by `RUST_LOG` (default: `info` for the proxy and the relay;
//! `error` for the benches and the simulator, whose in-process proxies are overloaded on
//! purpose and whose results are their tables).

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// Installs the subscriber, filtering by `RUST_LOG` or else `default` (a directive such
/// as `info`). A bad `RUST_LOG` falls back to `default` with a warning, not an error: the
/// log must not stop a proxy from starting.
pub fn init(format: LogFormat, default: &str) {
    let (filter, bad) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, None),
        Err(e) => (
            EnvFilter::new(default),
            std::env::var("RUST_LOG").ok().map(|v| (v, e)),
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, not in files and journals.
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if installed.is_ok() {
        if let Some((value, e)) = bad.filter(|(v, _)| !v.is_empty()) {
            tracing::warn!("RUST_LOG={value:?} is not a filter ({e}); logging at {default}");
        }
    }
}
