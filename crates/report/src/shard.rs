//! A sweep split into shards, run apart (processes, machines, a Kubernetes Indexed Job, a
//! Slurm job array) and merged into the output one run writes.
//!
//! Shard `I` of `N` (1-based) holds the run points whose index is `I − 1` modulo `N`: the
//! assignment needs nothing but the point count, and it spreads every variant and load over
//! the shards. A shard's folder holds
//!
//! * `shard.json`: the experiment's name, the SHA-256 of its text, the overrides, `I`, `N`,
//!   the sweep's point count and the points this shard ran;
//! * `experiment.toml`: the experiment's text, so the merge needs nothing else;
//! * `runs.cbor`: each of its runs' point index and full report. CBOR rather than JSON lines
//!   because JSON has no NaN or infinity (serde_json writes `null`), which reports use for
//!   "no data", and the merge must give back the very numbers the shard measured.
//!
//! [`merge`] checks that the folders are shards of one experiment with the same overrides,
//! that no shard is given twice and none is missing, and returns the experiment and its
//! reports in point order for [`crate::experiment::write_all`], which then writes the same
//! bytes as one unsharded run.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_sim::experiment::{Experiment, Overrides};
use sluice_sim::RunReport;

use crate::files::{create_dir, read, sha256_hex, write};

/// Shard `index` of `count`, 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: usize,
    count: usize,
}

/// Kubernetes Indexed Jobs number their pods from 0 in this variable.
pub const KUBERNETES_INDEX: &str = "JOB_COMPLETION_INDEX";
/// Slurm job arrays: the task's id, the array's lowest id and its number of tasks.
pub const SLURM_TASK_ID: &str = "SLURM_ARRAY_TASK_ID";
pub const SLURM_TASK_MIN: &str = "SLURM_ARRAY_TASK_MIN";
pub const SLURM_TASK_COUNT: &str = "SLURM_ARRAY_TASK_COUNT";

impl Shard {
    pub fn new(index: usize, count: usize) -> Result<Shard, String> {
        if count == 0 || index == 0 || index > count {
            return Err(format!(
                "shard {index}/{count}: need 1 <= I <= N (shards are numbered from 1)"
            ));
        }
        Ok(Shard { index, count })
    }

    /// `I/N`.
    pub fn parse(spec: &str) -> Result<Shard, String> {
        let (i, n) = spec
            .split_once('/')
            .ok_or_else(|| format!("shard {spec}: expected I/N, e.g. 2/3"))?;
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("shard {spec}: expected I/N, e.g. 2/3"))
        };
        Shard::new(number(i)?, number(n)?)
    }

    /// The shard of this process in a job array, from its environment (`var` reads a
    /// variable): a Kubernetes Indexed Job's 0-based `JOB_COMPLETION_INDEX`, with the shard
    /// count from `count`; or a Slurm array task, `SLURM_ARRAY_TASK_ID` counted from
    /// `SLURM_ARRAY_TASK_MIN` (0 if unset), with the count from `count` or else
    /// `SLURM_ARRAY_TASK_COUNT`.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
        count: Option<usize>,
    ) -> Result<Shard, String> {
        let number = |name: &str| -> Result<Option<usize>, String> {
            var(name)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("{name}={v}: not a number"))
                })
                .transpose()
        };
        if let Some(index) = number(KUBERNETES_INDEX)? {
            let count = count.ok_or(
                "JOB_COMPLETION_INDEX is set: give the number of shards with --shards N (the Job's completions)",
            )?;
            return Shard::new(index + 1, count);
        }
        if let Some(id) = number(SLURM_TASK_ID)? {
            let min = number(SLURM_TASK_MIN)?.unwrap_or(0);
            let offset = id.checked_sub(min).ok_or_else(|| {
                format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")
            })?;
            let count = match count {
                Some(n) => n,
                None => number(SLURM_TASK_COUNT)?.ok_or(
                    "SLURM_ARRAY_TASK_ID is set but not SLURM_ARRAY_TASK_COUNT: give --shards N",
                )?,
            };
            return Shard::new(offset + 1, count);
        }
        Err(format!(
            "no shard in the environment: neither {KUBERNETES_INDEX} (Kubernetes Indexed Job) nor {SLURM_TASK_ID} (Slurm job array) is set"
        ))
    }

    pub fn index(self) -> usize {
        self.index
    }

    pub fn count(self) -> usize {
        self.count
    }

    /// Whether point `point` (0-based) of the sweep is this shard's.
    pub fn holds(self, point: usize) -> bool {
        point % self.count + 1 == self.index
    }

    /// This shard's points of a sweep of `total` points, in order.
    pub fn points(self, total: usize) -> Vec<usize> {
        (self.index - 1..total).step_by(self.count).collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The command-line overrides, as a shard's manifest records them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OverridesRecord {
    seeds: Option<Vec<u64>>,
    duration_s: Option<f64>,
    loads: Option<Vec<f64>>,
    /// `--set PATH=VALUE`, in order.
    #[serde(default)]
    set: Vec<String>,
}

impl From<&Overrides> for OverridesRecord {
    fn from(o: &Overrides) -> Self {
        OverridesRecord {
            seeds: o.seeds.clone(),
            duration_s: o.duration_s,
            loads: o.loads.clone(),
            set: o.set.clone(),
        }
    }
}

impl From<&OverridesRecord> for Overrides {
    fn from(o: &OverridesRecord) -> Self {
        Overrides {
            seeds: o.seeds.clone(),
            duration_s: o.duration_s,
            loads: o.loads.clone(),
            set: o.set.clone(),
        }
    }
}

/// `shard.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    experiment: String,
    experiment_sha256: String,
    overrides: OverridesRecord,
    shard: usize,
    shards: usize,
    /// Run points of the whole sweep.
    points: usize,
    /// The points this shard ran.
    runs: Vec<usize>,
}

const MANIFEST: &str = "shard.json";
const TEXT: &str = "experiment.toml";
const RUNS: &str = "runs.cbor";

/// Writes shard `shard`'s partial output into `out`: `runs` are its points' indices and
/// reports, `text` and `overrides` what `e` was made of.
pub fn write_partial(
    out: &Path,
    text: &str,
    overrides: &Overrides,
    shard: Shard,
    e: &Experiment,
    runs: &[(usize, RunReport)],
) -> Result<(), String> {
    let expected = shard.points(e.points.len());
    if runs.iter().map(|(i, _)| *i).ne(expected.iter().copied()) {
        return Err(format!(
            "shard {shard}: the runs are not the shard's points {expected:?}"
        ));
    }
    create_dir(out)?;
    let manifest = Manifest {
        experiment: e.name.clone(),
        experiment_sha256: sha256_hex(text.as_bytes()),
        overrides: overrides.into(),
        shard: shard.index,
        shards: shard.count,
        points: e.points.len(),
        runs: expected,
    };
    let json = serde_json::to_string_pretty(&manifest).map_err(|err| err.to_string())?;
    write(&out.join(TEXT), text)?;
    let mut cbor = Vec::new();
    ciborium::into_writer(runs, &mut cbor).map_err(|err| format!("encoding runs: {err}"))?;
    let path = out.join(RUNS);
    std::fs::write(&path, cbor).map_err(|err| format!("writing {}: {err}", path.display()))?;
    // The manifest last: a folder with one holds everything the merge reads.
    write(&out.join(MANIFEST), &format!("{json}\n"))
}

/// Shards joined: the experiment as its shards ran it and every report in point order.
#[derive(Debug)]
pub struct Merged {
    pub text: String,
    pub overrides: Overrides,
    pub experiment: Experiment,
    pub reports: Vec<RunReport>,
}

/// One shard folder, read and checked against its own manifest.
struct Partial {
    dir: PathBuf,
    manifest: Manifest,
    text: String,
    runs: Vec<(usize, RunReport)>,
}

fn read_partial(dir: &Path) -> Result<Partial, String> {
    let manifest_path = dir.join(MANIFEST);
    if !manifest_path.is_file() {
        return Err(format!(
            "{}: not a shard's output (no {MANIFEST}; run `sluice sim ... --shard I/N` first)",
            dir.display()
        ));
    }
    let manifest: Manifest = serde_json::from_str(&read(&manifest_path)?)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let text = read(&dir.join(TEXT))?;
    if sha256_hex(text.as_bytes()) != manifest.experiment_sha256 {
        return Err(format!(
            "{}: {TEXT} does not match the SHA-256 in {MANIFEST}",
            dir.display()
        ));
    }
    let path = dir.join(RUNS);
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let runs: Vec<(usize, RunReport)> =
        ciborium::from_reader(&bytes[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    let shard = Shard::new(manifest.shard, manifest.shards)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    if manifest.runs != shard.points(manifest.points)
        || runs
            .iter()
            .map(|(i, _)| *i)
            .ne(manifest.runs.iter().copied())
    {
        return Err(format!(
            "{}: its runs are not the points of shard {shard}",
            dir.display()
        ));
    }
    Ok(Partial {
        dir: dir.to_owned(),
        manifest,
        text,
        runs,
    })
}

/// Joins shard folders into the whole sweep; refuses folders of different experiments or
/// overrides, a shard given twice, and missing shards.
pub fn merge(dirs: &[PathBuf]) -> Result<Merged, String> {
    let parts = dirs
        .iter()
        .map(|d| read_partial(d))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(first) = parts.first() else {
        return Err("merge needs at least one shard folder".into());
    };
    let m0 = &first.manifest;
    for p in &parts[1..] {
        let m = &p.manifest;
        if m.experiment_sha256 != m0.experiment_sha256 {
            return Err(format!(
                "{} and {} are shards of different experiments ({} {}…, {} {}…)",
                first.dir.display(),
                p.dir.display(),
                m0.experiment,
                &m0.experiment_sha256[..12],
                m.experiment,
                &m.experiment_sha256[..12]
            ));
        }
        if m.overrides != m0.overrides {
            return Err(format!(
                "{} and {} ran with different overrides ({:?} and {:?})",
                first.dir.display(),
                p.dir.display(),
                m0.overrides,
                m.overrides
            ));
        }
        if m.shards != m0.shards || m.points != m0.points {
            return Err(format!(
                "{} and {} split the sweep differently ({} of {} points and {} of {})",
                first.dir.display(),
                p.dir.display(),
                m0.shards,
                m0.points,
                m.shards,
                m.points
            ));
        }
    }
    let mut slots: Vec<Option<RunReport>> = vec![None; m0.points];
    let mut given: Vec<Option<&Path>> = vec![None; m0.shards];
    for p in &parts {
        let i = p.manifest.shard - 1;
        if let Some(other) = given[i] {
            return Err(format!(
                "shard {}/{} given twice ({} and {})",
                p.manifest.shard,
                m0.shards,
                other.display(),
                p.dir.display()
            ));
        }
        given[i] = Some(&p.dir);
    }
    let missing: Vec<String> = (1..=m0.shards)
        .filter(|i| given[i - 1].is_none())
        .map(|i| format!("{i}/{}", m0.shards))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: missing shard(s) {} of {} points",
            m0.experiment,
            missing.join(", "),
            m0.points
        ));
    }
    let text = first.text.clone();
    let overrides = Overrides::from(&m0.overrides);
    let total = m0.points;
    for p in parts {
        for (i, report) in p.runs {
            slots[i] = Some(report);
        }
    }
    let experiment = Experiment::from_toml(&text, &overrides)?;
    if experiment.points.len() != total {
        return Err(format!(
            "{}: the experiment now expands to {} points, its shards ran {total}",
            experiment.name,
            experiment.points.len(),
        ));
    }
    let reports = slots
        .into_iter()
        .map(|r| r.ok_or("a point without a report"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Merged {
        text,
        overrides,
        experiment,
        reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_points_by_index_modulo_the_count() {
        let s = Shard::parse("2/3").unwrap();
        assert_eq!(s.points(8), vec![1, 4, 7]);
        assert!(s.holds(4) && !s.holds(5));
        let all: usize = (1..=3)
            .map(|i| Shard::new(i, 3).unwrap().points(8).len())
            .sum();
        assert_eq!(all, 8);
        assert_eq!(s.to_string(), "2/3");
        for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn job_arrays_name_the_shard_in_their_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        // Kubernetes counts from 0 and does not say how many.
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        assert_eq!(
            Shard::from_env(k8s, Some(3)).unwrap(),
            Shard::new(3, 3).unwrap()
        );
        assert!(Shard::from_env(k8s, None).unwrap_err().contains("--shards"));
        // Slurm: `--array=1-4` gives ids 1..4 with min 1.
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            Shard::from_env(slurm, None).unwrap(),
            Shard::new(1, 4).unwrap()
        );
        assert!(Shard::from_env(env(&[]), Some(2)).is_err());
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "3")]), Some(3)).is_err());
    }
}
