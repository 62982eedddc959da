//! Experiments as data: one TOML file per reproduced figure.
//!
//! An experiment is a base [`Scenario`] (every field defaulted to the paper's value, so a file
//! names only what it changes), a list of variants (one curve each, with their own overrides)
//! and either a sweep over offered load and seeds or a single dynamic run per variant. Tables
//! are deep-merged: `base`, then the variant's `scenario`, then the sweep point, and the result
//! is deserialized into a `Scenario`, so any knob of the model can be swept without code.
//!
//! ```toml
//! name = "shen2008-fig07"
//! title = "win-disc goodput under different queuing delay budgets"
//! paper = "Shen, Schulzrinne, Nahum 2008"
//! figure = "Figure 7"
//! [base]
//! duration_s = 600
//! [sweep]
//! offered_load = [0.5, 1.0, 2.0, 4.0, 8.4]
//! seeds = [1]
//! [[variant]]
//! label = "D_B = 200 ms"
//! scenario = { re = { control = { algorithm = "win-disc", win_disc = { budget_delay_ms = 200 } } } }
//! ```

use serde::Deserialize;

use crate::sample::SampleSpec;
use crate::scenario::deep_merge;
use crate::Scenario;

/// What an experiment runs: a sweep of steady loads, or one time-varying run per variant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Sweep,
    Dynamic,
    /// One run per variant on each of many sampled topologies ([`crate::sample`]).
    Sample,
}

/// Axis labels and limits for the experiment's plot.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlotSpec {
    pub x_label: String,
    pub y_label: String,
    /// Upper end of the y axis (goodput plots use 1.1).
    pub y_max: f64,
    /// Draw min(offered load, 1), the theoretical maximum goodput, as a reference line.
    pub ideal_line: bool,
    /// Draw instead De Cicco et al.'s optimal-goodput bound `g_opt(r)` (eq. 2) for this
    /// target CPU load `C_T`, with the runs' own cost ratio `β` (local-control plots).
    pub optimal_goodput_target_cpu: Option<f64>,
    /// Dynamic runs: also draw the RE's dynamics (CPU load, accept ratio, queueing time,
    /// queue length), as De Cicco et al.'s Figure 9.
    pub dynamics: bool,
}

impl Default for PlotSpec {
    fn default() -> PlotSpec {
        PlotSpec {
            x_label: "Offered load (normalised to capacity)".into(),
            y_label: "Goodput (normalised to capacity)".into(),
            y_max: 1.1,
            ideal_line: true,
            optimal_goodput_target_cpu: None,
            dynamics: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepSpec {
    #[serde(default)]
    offered_load: Vec<f64>,
    /// A dotted path into the scenario to vary instead of the offered load.
    parameter: Option<String>,
    #[serde(default)]
    values: Vec<f64>,
    #[serde(default = "default_seeds")]
    seeds: Vec<u64>,
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantSpec {
    label: String,
    /// This variant's sweep parameter, when it differs from `sweep.parameter`.
    parameter: Option<String>,
    #[serde(default)]
    scenario: toml::Table,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: String,
    title: String,
    #[serde(default)]
    paper: String,
    #[serde(default)]
    figure: String,
    /// What the paper reports for this figure, in a sentence, for the report.
    #[serde(default)]
    expectation: String,
    #[serde(default)]
    kind: Kind,
    #[serde(default)]
    base: toml::Table,
    sweep: Option<SweepSpec>,
    #[serde(default)]
    seeds: Option<Vec<u64>>,
    sample: Option<SampleSpec>,
    variant: Vec<VariantSpec>,
    #[serde(default)]
    plot: PlotSpec,
}

impl ExperimentFile {
    fn into_experiment(self, x_name: String, points: Vec<RunPoint>) -> Experiment {
        Experiment {
            name: self.name,
            title: self.title,
            paper: self.paper,
            figure: self.figure,
            expectation: self.expectation,
            kind: self.kind,
            plot: self.plot,
            x_name,
            variants: self.variant.into_iter().map(|v| v.label).collect(),
            points,
        }
    }
}

/// A parsed, validated experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    pub paper: String,
    pub figure: String,
    pub expectation: String,
    pub kind: Kind,
    pub plot: PlotSpec,
    /// What the x axis is: `offered_load` or the swept parameter's path.
    pub x_name: String,
    /// Variant labels in file order (curve order in plots and rows in summaries).
    pub variants: Vec<String>,
    /// Every run, in a fixed order: variant, then offered load, then seed.
    pub points: Vec<RunPoint>,
}

/// One simulation run of an experiment.
#[derive(Clone, Debug)]
pub struct RunPoint {
    pub variant: String,
    /// The configured (nominal) offered load.
    pub offered_load: f64,
    /// The x coordinate: the offered load, or the swept parameter's value.
    pub x: f64,
    pub seed: u64,
    pub scenario: Scenario,
}

/// Changes applied to every point of an experiment after the file is read (CLI overrides).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// Replace the seed list (`--seed`).
    pub seeds: Option<Vec<u64>>,
    /// Replace `duration_s` (`--duration`, quick runs). The warm-up is kept, because it is set
    /// by the model (BYE traffic settles over a few holding times), and only capped at half
    /// the run so that something is measured.
    pub duration_s: Option<f64>,
    /// Keep only these offered loads, when given (`--load`). In a parameter sweep, whose x
    /// axis is not the load, the first of them sets the offered load of every point instead.
    pub loads: Option<Vec<f64>>,
    /// `PATH=VALUE` assignments to the file itself, before anything else (`--set`): a
    /// dotted path into its tables (an array element by its index, `variant.0.label`), the
    /// value as TOML, or else as a string.
    pub set: Vec<String>,
}

/// Applies `--set` assignments to an experiment file's document.
pub fn apply_set(doc: &mut toml::Table, assignments: &[String]) -> Result<(), String> {
    for a in assignments {
        let (path, value) = a.split_once('=').ok_or_else(|| {
            format!("--set {a}: expected PATH=VALUE, e.g. base.re.queue_capacity=500")
        })?;
        set_dotted(doc, path.trim(), toml_value(value.trim()))
            .map_err(|e| format!("--set {a}: {e}"))?;
    }
    Ok(())
}

/// A value as TOML (`500`, `[1, 2]`, `true`, `"x"`, `{ a = 1 }`), or else the text itself
/// as a string (`win-cont`).
fn toml_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// Sets `a.b.c` in a document: tables are created on the way, an array is entered by the
/// index of an element it has.
fn set_dotted(doc: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let keys: Vec<&str> = path.split('.').map(str::trim).collect();
    if keys.iter().any(|k| k.is_empty()) {
        return Err(format!("{path:?} is not a dotted path"));
    }
    set_in_table(doc, &keys, 0, value)
}

/// Sets `keys[at..]` in `table`, whose path is `keys[..at]`.
fn set_in_table(
    table: &mut toml::Table,
    keys: &[&str],
    at: usize,
    value: toml::Value,
) -> Result<(), String> {
    let key = keys[at];
    if at + 1 == keys.len() {
        table.insert(key.to_owned(), value);
        return Ok(());
    }
    let entry = table
        .entry(key.to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    set_in_value(entry, keys, at + 1, value)
}

/// Sets `keys[at..]` in `node`, whose path is `keys[..at]`.
fn set_in_value(
    node: &mut toml::Value,
    keys: &[&str],
    at: usize,
    value: toml::Value,
) -> Result<(), String> {
    let so_far = keys[..at].join(".");
    match node {
        toml::Value::Table(t) => set_in_table(t, keys, at, value),
        toml::Value::Array(items) => {
            let len = items.len();
            let i = keys[at]
                .parse::<usize>()
                .ok()
                .filter(|i| *i < len)
                .ok_or_else(|| {
                    format!("{so_far} is an array of {len}: index it from 0, e.g. {so_far}.0")
                })?;
            if at + 1 == keys.len() {
                items[i] = value;
                Ok(())
            } else {
                set_in_value(&mut items[i], keys, at + 1, value)
            }
        }
        _ => Err(format!("{so_far} is not a table")),
    }
}

impl Experiment {
    /// Parses an experiment file's text. Errors name the problem and, for scenario errors,
    /// the variant they come from.
    pub fn from_toml(text: &str, overrides: &Overrides) -> Result<Experiment, String> {
        if overrides.set.is_empty() {
            let file: ExperimentFile = toml::from_str(text).map_err(|e| e.to_string())?;
            return Experiment::from_file(file, overrides);
        }
        let read = |set: &[String]| -> Result<Experiment, String> {
            let doc = Experiment::document(text, set)?;
            let file: ExperimentFile = toml::Value::Table(doc)
                .try_into()
                .map_err(|e: toml::de::Error| e.message().to_owned())?;
            Experiment::from_file(file, overrides)
        };
        read(&overrides.set).map_err(|err| {
            // Name the assignment that breaks the file, if one does by itself.
            let culprit = overrides
                .set
                .iter()
                .find(|a| read(std::slice::from_ref(a)).is_err());
            match culprit {
                Some(a) if !err.starts_with("--set ") => format!("--set {a}: {err}"),
                _ => err,
            }
        })
    }

    /// An experiment file's document with `set` ([`Overrides::set`]) applied.
    pub fn document(text: &str, set: &[String]) -> Result<toml::Table, String> {
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        apply_set(&mut doc, set)?;
        Ok(doc)
    }

    /// The experiment file that [`Experiment::from_toml`] with `overrides` runs, as a
    /// document of its own: `--set`, `--seed` and, in a sweep of offered loads, `--load`
    /// written into it. `--duration`, and `--load` in a parameter sweep, act on every run
    /// point after the file is read and have no place in it: they are refused.
    pub fn resolved_document(text: &str, overrides: &Overrides) -> Result<toml::Table, String> {
        let mut doc = Experiment::document(text, &overrides.set)?;
        let e = Experiment::from_toml(text, overrides)?;
        if overrides.duration_s.is_some() {
            return Err(
                "--duration has no place in the file: give --set base.duration_s=SECONDS instead"
                    .into(),
            );
        }
        let integer = |n: u64| toml::Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        if let Some(seeds) = &overrides.seeds {
            match e.kind {
                Kind::Sweep | Kind::Dynamic => {
                    let path = if e.kind == Kind::Sweep {
                        "sweep.seeds"
                    } else {
                        "seeds"
                    };
                    let list = toml::Value::Array(seeds.iter().map(|s| integer(*s)).collect());
                    set_dotted(&mut doc, path, list)?;
                }
                Kind::Sample => {
                    let first = seeds.first().copied().unwrap_or(1);
                    set_dotted(&mut doc, "sample.seed", integer(first))?;
                }
            }
        }
        if overrides.loads.is_some() {
            if e.x_name != "offered_load" {
                return Err("--load in a parameter sweep has no place in the file: give --set base.offered_load=LOAD instead".into());
            }
            let mut kept: Vec<f64> = Vec::new();
            for p in &e.points {
                if !kept.contains(&p.x) {
                    kept.push(p.x);
                }
            }
            let list = toml::Value::Array(kept.into_iter().map(toml::Value::Float).collect());
            set_dotted(&mut doc, "sweep.offered_load", list)?;
        }
        Ok(doc)
    }

    fn from_file(file: ExperimentFile, overrides: &Overrides) -> Result<Experiment, String> {
        if file.variant.is_empty() {
            return Err(format!("experiment {}: no [[variant]]", file.name));
        }
        let mut seen = std::collections::BTreeSet::new();
        for v in &file.variant {
            if !seen.insert(v.label.as_str()) {
                return Err(format!(
                    "experiment {}: duplicate variant label {:?}",
                    file.name, v.label
                ));
            }
        }
        let (xs, default_parameter, seeds) = match (file.kind, &file.sweep) {
            (Kind::Sweep, Some(s)) => {
                let (xs, parameter) = match (&s.parameter, s.offered_load.is_empty()) {
                    (None, false) => (s.offered_load.clone(), None),
                    (Some(p), true) => (s.values.clone(), Some(p.clone())),
                    _ => {
                        return Err(format!(
                            "experiment {}: [sweep] takes either offered_load = [...] or parameter = \"path\" with values = [...]",
                            file.name
                        ))
                    }
                };
                if xs.is_empty() || xs.iter().any(|l| !l.is_finite() || *l < 0.0) {
                    return Err(format!("experiment {}: the sweep needs non-negative values", file.name));
                }
                (Some(xs), parameter, s.seeds.clone())
            }
            (Kind::Sweep, None) => return Err(format!("experiment {}: kind = \"sweep\" needs a [sweep] table", file.name)),
            (Kind::Dynamic, Some(_)) => {
                return Err(format!(
                    "experiment {}: a dynamic experiment takes its loads from source schedules, not [sweep]",
                    file.name
                ))
            }
            (Kind::Dynamic, None) => (None, None, file.seeds.clone().unwrap_or_else(default_seeds)),
            (Kind::Sample, _) => return sampled(file, overrides),
        };
        let seeds = overrides.seeds.clone().unwrap_or(seeds);
        if seeds.is_empty() {
            return Err(format!("experiment {}: no seeds", file.name));
        }
        let sweeps_load = xs.is_some() && default_parameter.is_none();
        let xs: Vec<Option<f64>> = match xs {
            Some(all) => {
                let kept: Vec<f64> = match (&overrides.loads, sweeps_load) {
                    (Some(want), true) => all
                        .into_iter()
                        .filter(|l| want.iter().any(|w| (w - l).abs() < 1e-9))
                        .collect(),
                    _ => all,
                };
                if kept.is_empty() {
                    return Err(format!(
                        "experiment {}: no offered load left after --load",
                        file.name
                    ));
                }
                kept.into_iter().map(Some).collect()
            }
            None => vec![None],
        };
        let mut points = Vec::new();
        for v in &file.variant {
            let parameter = v.parameter.clone().or_else(|| default_parameter.clone());
            for &x in &xs {
                for &seed in &seeds {
                    let mut table = file.base.clone();
                    deep_merge(&mut table, &v.scenario);
                    if let Some(x) = x {
                        match &parameter {
                            None => {
                                table.insert("offered_load".into(), toml::Value::Float(x));
                            }
                            Some(path) => set_path(&mut table, path, number(x)).map_err(|e| {
                                format!("experiment {}, variant {:?}: {e}", file.name, v.label)
                            })?,
                        }
                    }
                    if let (Some(load), Some(_)) =
                        (overrides.loads.as_ref().and_then(|l| l.first()), &parameter)
                    {
                        table.insert("offered_load".into(), toml::Value::Float(*load));
                    }
                    table.insert(
                        "seed".into(),
                        toml::Value::Integer(i64::try_from(seed).unwrap_or(i64::MAX)),
                    );
                    if file.kind == Kind::Dynamic {
                        table.insert("timeseries".into(), toml::Value::Boolean(true));
                    }
                    let mut scenario: Scenario =
                        toml::Value::Table(table)
                            .try_into()
                            .map_err(|e: toml::de::Error| {
                                format!(
                                    "experiment {}, variant {:?}: {}",
                                    file.name,
                                    v.label,
                                    e.message()
                                )
                            })?;
                    if let Some(d) = overrides.duration_s {
                        scenario.duration_s = d;
                        scenario.warmup_s = scenario.warmup_s.min(d / 2.0);
                    }
                    scenario.validate().map_err(|e| {
                        format!("experiment {}, variant {:?}: {e}", file.name, v.label)
                    })?;
                    points.push(RunPoint {
                        variant: v.label.clone(),
                        offered_load: scenario.offered_load,
                        x: x.unwrap_or(scenario.offered_load),
                        seed,
                        scenario,
                    });
                }
            }
        }
        let x_name = default_parameter.unwrap_or_else(|| "offered_load".into());
        Ok(file.into_experiment(x_name, points))
    }
}

/// A `kind = "sample"` experiment: every variant on every topology of `[sample]`, in
/// variant then topology order; `x` is the topology's index. `--seed` replaces the
/// sampling seed (a new set of topologies); `--load` does not apply.
fn sampled(file: ExperimentFile, overrides: &Overrides) -> Result<Experiment, String> {
    let name = &file.name;
    if file.sweep.is_some() {
        return Err(format!(
            "experiment {name}: a sample experiment draws its loads from [sample], not [sweep]"
        ));
    }
    if overrides.loads.is_some() {
        return Err(format!(
            "experiment {name}: --load does not apply to sampled topologies"
        ));
    }
    let mut spec = file
        .sample
        .clone()
        .ok_or_else(|| format!("experiment {name}: kind = \"sample\" needs a [sample] table"))?;
    if let Some(seed) = overrides.seeds.as_ref().and_then(|s| s.first()) {
        spec.seed = *seed;
    }
    spec.validate()
        .map_err(|e| format!("experiment {name}: {e}"))?;
    let base: Scenario = toml::Value::Table(file.base.clone())
        .try_into()
        .map_err(|e: toml::de::Error| format!("experiment {name}, base: {}", e.message()))?;
    let topologies: Vec<_> = spec
        .indices()
        .into_iter()
        .map(|k| spec.topology(k, &base))
        .collect();
    let mut points = Vec::with_capacity(file.variant.len() * topologies.len());
    for v in &file.variant {
        for t in &topologies {
            let mut table = file.base.clone();
            deep_merge(&mut table, &t.table);
            deep_merge(&mut table, &v.scenario);
            table.insert(
                "seed".into(),
                toml::Value::Integer(i64::try_from(t.seed).unwrap_or(i64::MAX)),
            );
            let mut scenario: Scenario =
                toml::Value::Table(table)
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        format!("experiment {name}, variant {:?}: {}", v.label, e.message())
                    })?;
            if let Some(d) = overrides.duration_s {
                // D seconds measured after a warm-up of at most D.
                scenario.warmup_s = scenario.warmup_s.min(d);
                scenario.duration_s = scenario.warmup_s + d;
            }
            scenario.validate().map_err(|e| {
                format!(
                    "experiment {name}, variant {:?}, topology {}: {e}",
                    v.label, t.index
                )
            })?;
            points.push(RunPoint {
                variant: v.label.clone(),
                offered_load: scenario.offered_load,
                x: f64::from(t.index),
                seed: t.seed,
                scenario,
            });
        }
    }
    Ok(file.into_experiment("topology".into(), points))
}

/// A whole number as a TOML integer (so it fits integer fields), anything else as a float.
fn number(x: f64) -> toml::Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        toml::Value::Integer(x as i64)
    } else {
        toml::Value::Float(x)
    }
}

/// Sets `a.b.c` in a table, creating intermediate tables.
fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys
        .pop()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| format!("empty parameter path {path:?}"))?;
    let mut cur = table;
    for key in keys {
        let entry = cur
            .entry(key.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| format!("parameter path {path:?}: {key} is not a table"))?;
    }
    cur.insert(last.to_owned(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
name = "t"
title = "test"
[base]
duration_s = 50
warmup_s = 10
[base.re.control]
algorithm = "win-disc"
[sweep]
offered_load = [0.5, 2.0]
seeds = [1, 2]
[[variant]]
label = "a"
[[variant]]
label = "b"
scenario = { re = { queue_capacity = 100, control = { algorithm = "rate-abs" } } }
"#;

    #[test]
    fn variants_deep_merge_over_the_base_and_expand_in_order() {
        let e = Experiment::from_toml(FILE, &Overrides::default()).unwrap();
        assert_eq!(e.points.len(), 8);
        let order: Vec<_> = e
            .points
            .iter()
            .map(|p| (p.variant.as_str(), p.offered_load, p.seed))
            .collect();
        assert_eq!(
            order[..4],
            [("a", 0.5, 1), ("a", 0.5, 2), ("a", 2.0, 1), ("a", 2.0, 2)]
        );
        let b = &e.points[4].scenario;
        assert_eq!(b.re.control.algorithm.to_string(), "rate-abs");
        assert_eq!(b.re.queue_capacity, 100);
        assert!(
            (b.duration_s - 50.0).abs() < 1e-12,
            "base kept where the variant is silent"
        );
        assert_eq!(
            e.points[0].scenario.re.control.algorithm.to_string(),
            "win-disc"
        );
        assert_eq!(e.points[0].scenario.re.queue_capacity, 500, "paper default");
        assert!(
            (b.re.cost_forward_us - 2000.0).abs() < 1e-9,
            "the paper's processor kept where the variant names another field"
        );
    }

    #[test]
    fn overrides_replace_seeds_duration_and_filter_loads() {
        let o = Overrides {
            seeds: Some(vec![7]),
            duration_s: Some(25.0),
            loads: Some(vec![2.0]),
            ..Overrides::default()
        };
        let e = Experiment::from_toml(FILE, &o).unwrap();
        assert_eq!(e.points.len(), 2);
        assert!(e
            .points
            .iter()
            .all(|p| p.seed == 7 && (p.offered_load - 2.0).abs() < 1e-12));
        let s = &e.points[0].scenario;
        assert!((s.duration_s - 25.0).abs() < 1e-12);
        assert!(
            (s.warmup_s - 10.0).abs() < 1e-12,
            "warm-up kept while it fits in half the run"
        );
        let o = Overrides {
            duration_s: Some(12.0),
            ..Overrides::default()
        };
        let e = Experiment::from_toml(FILE, &o).unwrap();
        assert!(
            (e.points[0].scenario.warmup_s - 6.0).abs() < 1e-12,
            "capped at half the run"
        );
    }

    #[test]
    fn a_parameter_sweep_sets_a_nested_field_per_variant() {
        let text = r#"
name = "p"
title = "param"
[base]
offered_load = 8.4
[sweep]
parameter = "re.control.win_disc.budget_delay_ms"
values = [0, 250.5]
[[variant]]
label = "win-disc"
scenario = { re = { control = { algorithm = "win-disc" } } }
[[variant]]
label = "rate-abs"
parameter = "re.control.rate_abs.budget_delay_ms"
scenario = { re = { control = { algorithm = "rate-abs" } } }
"#;
        let e = Experiment::from_toml(text, &Overrides::default()).unwrap();
        assert_eq!(e.x_name, "re.control.win_disc.budget_delay_ms");
        assert_eq!(e.points.len(), 4);
        assert!(e
            .points
            .iter()
            .all(|p| (p.offered_load - 8.4).abs() < 1e-12));
        assert!((e.points[1].x - 250.5).abs() < 1e-12);
        assert_eq!(
            e.points[1].scenario.re.control.win_disc.budget_delay,
            std::time::Duration::from_micros(250_500)
        );
        assert_eq!(
            e.points[3].scenario.re.control.rate_abs.budget_delay,
            std::time::Duration::from_micros(250_500)
        );
    }

    #[test]
    fn bad_files_give_clear_errors() {
        let err = Experiment::from_toml(
            "name='x'\ntitle='y'\n[[variant]]\nlabel='a'\n",
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.contains("needs a [sweep]"), "{err}");
        let err = Experiment::from_toml(
            &FILE.replace("queue_capacity = 100", "queue_capacity = \"big\""),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.contains("variant \"b\""), "{err}");
        let err = Experiment::from_toml(
            &FILE.replace("label = \"b\"", "label = \"a\""),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.contains("duplicate"), "{err}");
        let err = Experiment::from_toml(
            &FILE.replace("duration_s = 50", "duration_s = 50\nbogus = 1"),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.contains("bogus"), "{err}");
    }

    fn with_set(set: &[&str]) -> Overrides {
        Overrides {
            set: set.iter().map(|s| (*s).to_owned()).collect(),
            ..Overrides::default()
        }
    }

    /// Every point's variant, x, seed and full scenario, for comparing two experiments.
    fn runs(e: &Experiment) -> Vec<String> {
        e.points
            .iter()
            .map(|p| {
                let scenario = serde_json::to_string(&p.scenario).unwrap();
                format!("{} {} {} {scenario}", p.variant, p.x, p.seed)
            })
            .collect()
    }

    #[test]
    fn set_changes_any_value_by_its_dotted_path() {
        let o = with_set(&[
            "base.re.queue_capacity=250",
            "sweep.seeds=[4]",
            "variant.1.scenario.re.control.algorithm=win-cont",
            "variant.0.label=first",
            "title=\"a, b\"",
        ]);
        let e = Experiment::from_toml(FILE, &o).unwrap();
        assert_eq!(e.points.len(), 4, "two variants, two loads, one seed");
        assert!(e.points.iter().all(|p| p.seed == 4));
        assert_eq!(e.points[0].variant, "first");
        assert_eq!(e.points[0].scenario.re.queue_capacity, 250);
        assert_eq!(
            e.points[2].scenario.re.queue_capacity, 100,
            "the variant's own value wins"
        );
        assert_eq!(
            e.points[2].scenario.re.control.algorithm.to_string(),
            "win-cont"
        );
        assert_eq!(e.title, "a, b");
    }

    #[test]
    fn set_names_what_it_cannot_apply() {
        for (set, says) in [
            (
                "base.re.queue_capacityy=5",
                "unknown field `queue_capacityy`",
            ),
            (
                "base.re.queue_capacity=lots",
                "--set base.re.queue_capacity=lots",
            ),
            ("plot.x=1", "unknown field `x`"),
            ("variant.2.label=x", "variant is an array of 2"),
            ("name.first=x", "name is not a table"),
            ("base..re=1", "not a dotted path"),
            ("seeds", "expected PATH=VALUE"),
        ] {
            let e = Experiment::from_toml(FILE, &with_set(&[set])).unwrap_err();
            assert!(e.starts_with(&format!("--set {set}")), "{set}: {e}");
            assert!(e.contains(says), "{set}: {e}");
        }
    }

    #[test]
    fn the_resolved_document_reads_back_as_the_same_experiment() {
        let o = Overrides {
            seeds: Some(vec![9, 3]),
            loads: Some(vec![2.0]),
            set: vec!["base.re.queue_capacity=77".into()],
            ..Overrides::default()
        };
        let doc = Experiment::resolved_document(FILE, &o).unwrap();
        let text = toml::to_string(&doc).unwrap();
        let again = Experiment::from_toml(&text, &Overrides::default()).unwrap();
        let direct = Experiment::from_toml(FILE, &o).unwrap();
        assert_eq!(runs(&again), runs(&direct));
        assert_eq!(again.points.len(), 4);
        // --duration acts on the points, not on the file.
        let o = Overrides {
            duration_s: Some(5.0),
            ..Overrides::default()
        };
        let e = Experiment::resolved_document(FILE, &o).unwrap_err();
        assert!(e.contains("--set base.duration_s="), "{e}");
    }
}
