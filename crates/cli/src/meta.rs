//! `meta.json`: what made an output folder, so a result can be traced to its build, its
//! command and its inputs. It is the one file of a folder that differs between two runs
//! of the same command (its start time, at least); the results beside it do not. It is
//! written once the command has done its work, so a folder with one holds a finished run
//! and bad input leaves none behind.

use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{json, Value};

/// The file's name in every output folder.
pub const FILE: &str = "meta.json";

/// What one command records.
#[derive(Debug)]
pub struct Meta {
    /// `experiment` (the simulator and the tuner) or `scenario` (live runs).
    key: &'static str,
    resolved: Value,
    seeds: Option<Vec<u64>>,
    started: SystemTime,
}

impl Meta {
    /// A simulated or tuning experiment, resolved (after every override), and its seeds.
    pub fn experiment(resolved: Value, seeds: Vec<u64>) -> Meta {
        Meta {
            key: "experiment",
            resolved,
            seeds: Some(seeds),
            started: SystemTime::now(),
        }
    }

    /// A live run's settings; its generators' seeds are fixed per UAC, not configured.
    pub fn live(settings: &impl Serialize) -> Result<Meta, String> {
        Ok(Meta {
            key: "scenario",
            resolved: serde_json::to_value(settings).map_err(|e| e.to_string())?,
            seeds: None,
            started: SystemTime::now(),
        })
    }

    fn to_json(&self) -> Value {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let mut v = json!({
            "sluice_version": env!("CARGO_PKG_VERSION"),
            "git_commit": option_env!("SLUICE_GIT_COMMIT"),
            "command_line": std::env::args().collect::<Vec<_>>(),
            "started": humantime::format_rfc3339_seconds(self.started).to_string(),
            "cores": cores,
            "seeds": self.seeds,
        });
        v[self.key] = self.resolved.clone();
        v
    }
}

/// Writes `dir/meta.json` (creating `dir`); its start time is when `meta` was made.
pub fn write(dir: &Path, meta: &Meta) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(FILE);
    let text = serde_json::to_string_pretty(&meta.to_json()).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_build_command_and_inputs() {
        let mut meta = Meta::experiment(json!({"name": "x"}), vec![3, 4]);
        meta.started = SystemTime::UNIX_EPOCH;
        let v = meta.to_json();
        assert_eq!(v["sluice_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["experiment"]["name"], "x");
        assert_eq!(v["seeds"], json!([3, 4]));
        assert_eq!(v["started"], "1970-01-01T00:00:00Z");
        assert!(v["cores"].as_u64().unwrap() >= 1);
        assert!(v["command_line"].as_array().is_some_and(|a| !a.is_empty()));
        // Known when built in a git checkout, null otherwise; never an empty string.
        assert!(
            v["git_commit"].is_null() || v["git_commit"].as_str().is_some_and(|c| !c.is_empty())
        );
        let live = Meta::live(&json!({"capacity": 300.0})).unwrap().to_json();
        assert_eq!(live["scenario"]["capacity"], 300.0);
        assert!(live["seeds"].is_null() && live.get("experiment").is_none());
    }
}
