//! Tuning the PI gains by Extremum Seeking in the simulator (De Cicco, Cofano & Mascolo,
//! journal version, §VI): a tuning experiment file, and the [`ExperimentRunner`] that
//! measures `J(θ)` from simulated step experiments.
//!
//! ```toml
//! name = "decicco-es-tuning"
//! title = "..."
//! iterations = 80
//! reference_theta = [3.5, 10.3, 19.2, 130.5]   # also evaluated once, for comparison
//! [base]          # the scenario (the PI is configured here; ES replaces its gains)
//! [cost]          # sluice_control::tuning::CostConfig: eta, xi, loads, run_length_ms, ...
//! [es]            # sluice_control::tuning::EsConfig: gamma, h, alpha, omega, k_aw, theta0
//! ```
//!
//! One measurement of `J(θ)`: for every load `R_l` of `cost.loads` and every repetition, the
//! base scenario with the PI's gains set to `θ`, offered load `R_l` from `t = 0` for
//! `cost.run_length` (a step `R_l · 1(t)`, eq. 15) and its own seed. Each run's 10 ms
//! control trace is passed through the PI's own first-order filters (`τ` for the INVITE rate,
//! `τ_c` for the CPU load), giving the `r̃(t)` and `C̃(t)` of eqs. (16)–(17).

use serde::Deserialize;
use sluice_control::tuning::{CostConfig, CostSample, EsConfig, ExperimentRunner, StepMeasurement};
use sluice_control::Algorithm;

use crate::{RunReport, Scenario};

/// A parsed tuning experiment.
#[derive(Clone, Debug)]
pub struct TuningExperiment {
    pub name: String,
    pub title: String,
    pub paper: String,
    pub figure: String,
    pub expectation: String,
    pub iterations: u64,
    /// Gains evaluated once besides the ES run (the paper's tuned `θ̄`).
    pub reference_theta: Option<[f64; 4]>,
    pub base: Scenario,
    pub cost: CostConfig,
    pub es: EsConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TuningFile {
    name: String,
    title: String,
    #[serde(default)]
    paper: String,
    #[serde(default)]
    figure: String,
    #[serde(default)]
    expectation: String,
    #[serde(default = "default_iterations")]
    iterations: u64,
    reference_theta: Option<[f64; 4]>,
    #[serde(default)]
    base: toml::Table,
    #[serde(default)]
    cost: CostConfig,
    #[serde(default)]
    es: EsConfig,
}

fn default_iterations() -> u64 {
    80
}

/// Most ES iterations a file may ask for (each is several simulated runs).
pub const MAX_ITERATIONS: u64 = 10_000;

impl TuningExperiment {
    pub fn from_toml(text: &str) -> Result<TuningExperiment, String> {
        let file: TuningFile = toml::from_str(text).map_err(|e| e.to_string())?;
        TuningExperiment::from_file(file)
    }

    /// A tuning file already parsed, e.g. after `--set` changed it.
    pub fn from_document(doc: toml::Table) -> Result<TuningExperiment, String> {
        let file: TuningFile = toml::Value::Table(doc)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_owned())?;
        TuningExperiment::from_file(file)
    }

    fn from_file(file: TuningFile) -> Result<TuningExperiment, String> {
        let base: Scenario = toml::Value::Table(file.base)
            .try_into()
            .map_err(|e: toml::de::Error| format!("[base]: {}", e.message()))?;
        if base.re.control.algorithm != Algorithm::Pi {
            return Err("[base]: tuning needs re.control.algorithm = \"pi\"".to_owned());
        }
        base.validate().map_err(|e| format!("[base]: {e}"))?;
        if file.iterations == 0 || file.iterations > MAX_ITERATIONS {
            return Err(format!(
                "iterations must be between 1 and {MAX_ITERATIONS}, got {}",
                file.iterations
            ));
        }
        if file.cost.loads.is_empty() || file.cost.repetitions == 0 {
            return Err("[cost] needs at least one load and one repetition".to_owned());
        }
        if file.cost.loads.iter().any(|l| !(l.is_finite() && *l > 0.0)) {
            return Err("[cost] loads must be positive numbers".to_owned());
        }
        if (file.cost.target_cpu - base.re.control.pi.target_cpu).abs() > 1e-9 {
            return Err(format!(
                "[cost] target_cpu ({}) must equal the PI's re.control.pi.target_cpu ({})",
                file.cost.target_cpu, base.re.control.pi.target_cpu
            ));
        }
        let run_s = file.cost.run_length.as_secs_f64();
        if !(run_s > 0.0 && run_s <= crate::scenario::MAX_DURATION_S) {
            return Err(format!("[cost] run_length_ms out of range: {run_s} s"));
        }
        Ok(TuningExperiment {
            name: file.name,
            title: file.title,
            paper: file.paper,
            figure: file.figure,
            expectation: file.expectation,
            iterations: file.iterations,
            reference_theta: file.reference_theta,
            base: base.clone(),
            cost: file.cost,
            es: file.es,
        })
    }

    /// The step-experiment scenarios of one measurement of `J(θ)`; `measurement` numbers
    /// the measurement so each gets its own seeds (the whole tuning repeats exactly).
    pub fn step_scenarios(&self, theta: &[f64; 4], measurement: u64) -> Vec<Scenario> {
        let mut out = Vec::new();
        let reps = self.cost.repetitions as u64;
        for (l, &load) in self.cost.loads.iter().enumerate() {
            for rep in 0..reps {
                let mut sc = self.base.clone();
                sc.re.control.pi = sc.re.control.pi.with_gains(*theta);
                sc.offered_load = load;
                sc.duration_s = self.cost.run_length.as_secs_f64();
                sc.warmup_s = 0.0;
                sc.control_trace = true;
                sc.timeseries = false;
                sc.seed = self
                    .base
                    .seed
                    .wrapping_add(measurement.wrapping_mul(1_000_003))
                    .wrapping_add((l as u64) * reps + rep);
                out.push(sc);
            }
        }
        out
    }

    /// `J` from the reports of [`Self::step_scenarios`] (same order).
    pub fn cost_of(&self, scenarios: &[Scenario], reports: &[RunReport]) -> f64 {
        let runs: Vec<StepMeasurement> = scenarios
            .iter()
            .zip(reports)
            .map(|(sc, r)| step_measurement(sc, r))
            .collect();
        self.cost.cost(&runs)
    }
}

/// The filtered signals of one step run: `r̃` (INVITE arrival rate over `ρ_M`, through the
/// PI's rate filter) and `C̃` (CPU load through its CPU filter), one sample per trace bin.
/// A run without a trace (it failed) has no samples, and the cost ignores it.
pub fn step_measurement(sc: &Scenario, r: &RunReport) -> StepMeasurement {
    let mut m = StepMeasurement {
        offered_load: sc.offered_load,
        samples: Vec::new(),
    };
    let Some(trace) = &r.control_trace else {
        return m;
    };
    let capacity = sc.capacity_cps();
    let tau_r = sc.re.control.pi.rate_filter.as_secs_f64();
    let tau_c = sc.re.control.pi.cpu_filter.as_secs_f64();
    let (mut rate, mut cpu) = (0.0, 0.0);
    for (c, n) in trace.cpu.iter().zip(&trace.invite_rate_cps) {
        rate = low_pass(rate, n / capacity, trace.bin_s, tau_r);
        cpu = low_pass(cpu, *c, trace.bin_s, tau_c);
        m.samples.push(CostSample {
            duration: trace.bin_s,
            arrival_rate: rate,
            cpu,
        });
    }
    m
}

/// The exact zero-order-hold step of `1/(1 + τ s)` over `dt` (as the PI filters).
fn low_pass(state: f64, sample: f64, dt: f64, tau: f64) -> f64 {
    if tau <= 0.0 {
        return sample;
    }
    state + (1.0 - (-dt / tau).exp()) * (sample - state)
}

/// Measures `J(θ)` by simulation. `run_all` runs a batch of scenarios and returns their
/// reports in order (the CLI runs them on all cores; tests may run them one by one).
pub struct SimRunner<'a, F> {
    pub experiment: &'a TuningExperiment,
    pub run_all: F,
    measurements: u64,
}

impl<F> std::fmt::Debug for SimRunner<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRunner")
            .field("experiment", &self.experiment.name)
            .field("measurements", &self.measurements)
            .finish_non_exhaustive()
    }
}

impl<'a, F: FnMut(&[Scenario]) -> Vec<RunReport>> SimRunner<'a, F> {
    pub fn new(experiment: &'a TuningExperiment, run_all: F) -> Self {
        Self {
            experiment,
            run_all,
            measurements: 0,
        }
    }
}

impl<F: FnMut(&[Scenario]) -> Vec<RunReport>> ExperimentRunner for SimRunner<'_, F> {
    fn cost(&mut self, theta: &[f64; 4]) -> f64 {
        let scenarios = self.experiment.step_scenarios(theta, self.measurements);
        self.measurements += 1;
        let reports = (self.run_all)(&scenarios);
        self.experiment.cost_of(&scenarios, &reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
        name = "t"
        title = "t"
        iterations = 3
        [base]
        duration_s = 10
        warmup_s = 0
        sources = [{ name = "UAC" }]
        call = { holding_time_s = 0.5, callee_sends_trying = false, arrivals = "constant" }
        re = { invite_queue = true, cost_forward_us = 2000, cost_other_us = 0, cost_reject_us = 533.3333, control = { algorithm = "pi" } }
        [cost]
        loads = [2.0]
        run_length_ms = 8000
        repetitions = 1
        keep_best = 1
    "#;

    #[test]
    fn a_measurement_runs_each_load_with_the_gains_and_its_own_seed() {
        let e = TuningExperiment::from_toml(FILE).unwrap();
        let theta = [1.0, 2.0, 3.0, 4.0];
        let a = e.step_scenarios(&theta, 0);
        let b = e.step_scenarios(&theta, 1);
        assert_eq!(a.len(), 1);
        let gains = a[0].re.control.pi.gains();
        assert!(gains.iter().zip(theta).all(|(g, t)| (g - t).abs() < 1e-12));
        assert!((a[0].duration_s - 8.0).abs() < 1e-12);
        assert!(a[0].control_trace);
        assert_ne!(a[0].seed, b[0].seed);
    }

    #[test]
    fn the_cost_penalises_a_cpu_loop_that_cannot_reject() {
        // K_pc = K_ic = 0: α stays 0, the CPU saturates at 1 and the queue overflows into
        // retransmissions, so J must be far above the paper's gains' J.
        let e = TuningExperiment::from_toml(FILE).unwrap();
        let mut runner = SimRunner::new(&e, |s: &[Scenario]| s.iter().map(crate::run).collect());
        let good = runner.cost(&[3.5, 10.3, 19.2, 130.5]);
        let blind = runner.cost(&[0.0, 0.0, 19.2, 130.5]);
        assert!(good.is_finite() && blind.is_finite());
        assert!(blind > 2.0 * good, "J(blind) = {blind}, J(paper) = {good}");
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let no_pi = FILE.replace("algorithm = \"pi\"", "algorithm = \"ohta\"");
        assert!(TuningExperiment::from_toml(&no_pi)
            .unwrap_err()
            .contains("pi"));
        let zero = FILE.replace("iterations = 3", "iterations = 0");
        assert!(TuningExperiment::from_toml(&zero)
            .unwrap_err()
            .contains("iterations"));
    }
}
