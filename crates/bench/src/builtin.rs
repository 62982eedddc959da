//! The experiments shipped with sluice, embedded so `sluice sim NAME` and `sluice tune NAME`
//! need no files.

/// `sluice sim`'s experiments, one per reproduced figure.
pub const SIMULATOR: &[(&str, &str)] = &[
    (
        "decicco-fig09",
        include_str!("../../../experiments/decicco-fig09.toml"),
    ),
    (
        "decicco-fig11-12",
        include_str!("../../../experiments/decicco-fig11-12.toml"),
    ),
    (
        "montazerolghaem2014-fig26",
        include_str!("../../../experiments/montazerolghaem2014-fig26.toml"),
    ),
    (
        "montazerolghaem2014-fig30",
        include_str!("../../../experiments/montazerolghaem2014-fig30.toml"),
    ),
    (
        "sampled-topologies",
        include_str!("../../../experiments/sampled-topologies.toml"),
    ),
    (
        "shen2008-eq2-rate-abs-c",
        include_str!("../../../experiments/shen2008-eq2-rate-abs-c.toml"),
    ),
    (
        "shen2008-fig04",
        include_str!("../../../experiments/shen2008-fig04.toml"),
    ),
    (
        "shen2008-fig07",
        include_str!("../../../experiments/shen2008-fig07.toml"),
    ),
    (
        "shen2008-fig08",
        include_str!("../../../experiments/shen2008-fig08.toml"),
    ),
    (
        "shen2008-fig09",
        include_str!("../../../experiments/shen2008-fig09.toml"),
    ),
    (
        "shen2008-fig10",
        include_str!("../../../experiments/shen2008-fig10.toml"),
    ),
    (
        "shen2008-fig11",
        include_str!("../../../experiments/shen2008-fig11.toml"),
    ),
    (
        "shen2008-fig12",
        include_str!("../../../experiments/shen2008-fig12.toml"),
    ),
    (
        "shen2008-fig13",
        include_str!("../../../experiments/shen2008-fig13.toml"),
    ),
    (
        "shen2008-fig14",
        include_str!("../../../experiments/shen2008-fig14.toml"),
    ),
    (
        "shen2008-fig15",
        include_str!("../../../experiments/shen2008-fig15.toml"),
    ),
    (
        "shen2008-fig16",
        include_str!("../../../experiments/shen2008-fig16.toml"),
    ),
    (
        "shen2008-fig17",
        include_str!("../../../experiments/shen2008-fig17.toml"),
    ),
    (
        "shen2008-fig18",
        include_str!("../../../experiments/shen2008-fig18.toml"),
    ),
    (
        "shen2008-fig19",
        include_str!("../../../experiments/shen2008-fig19.toml"),
    ),
    (
        "shen2008-fig20",
        include_str!("../../../experiments/shen2008-fig20.toml"),
    ),
    (
        "shen2008-fig21",
        include_str!("../../../experiments/shen2008-fig21.toml"),
    ),
    (
        "shen2008-fig21-low-delay",
        include_str!("../../../experiments/shen2008-fig21-low-delay.toml"),
    ),
    (
        "shen2008-fig24-26",
        include_str!("../../../experiments/shen2008-fig24-26.toml"),
    ),
    (
        "shen2008-fig27-31",
        include_str!("../../../experiments/shen2008-fig27-31.toml"),
    ),
    (
        "shen2008-fig32-37",
        include_str!("../../../experiments/shen2008-fig32-37.toml"),
    ),
    (
        "shen2010-fig05",
        include_str!("../../../experiments/shen2010-fig05.toml"),
    ),
    (
        "shen2010-fig16",
        include_str!("../../../experiments/shen2010-fig16.toml"),
    ),
    (
        "shen2010-fig19-20",
        include_str!("../../../experiments/shen2010-fig19-20.toml"),
    ),
];

/// `sluice tune`'s experiments.
pub const TUNING: &[(&str, &str)] = &[(
    "decicco-es-tuning",
    include_str!("../../../experiments/decicco-es-tuning.toml"),
)];

/// Each experiment's name and title (the file's `title`), in the table's order.
pub fn titles(builtins: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    builtins
        .iter()
        .map(|(name, text)| {
            let title = toml::from_str::<toml::Table>(text)
                .ok()
                .and_then(|t| t.get("title").and_then(|v| v.as_str().map(str::to_owned)))
                .unwrap_or_default();
            (*name, title)
        })
        .collect()
}

/// The text of a built-in experiment by name, else of the file at that path; `command`
/// names the subcommand whose `--list` shows the built-in ones.
pub fn text(builtins: &[(&str, &str)], which: &str, command: &str) -> Result<String, String> {
    match builtins.iter().find(|(name, _)| *name == which) {
        Some((_, text)) => Ok((*text).to_owned()),
        None => std::fs::read_to_string(which).map_err(|e| {
            format!("{which}: not a built-in experiment (see `sluice {command} --list`) and not a readable file: {e}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_experiment_parses_and_has_its_name() {
        use sluice_sim::experiment::{Experiment, Overrides};
        for (name, text) in SIMULATOR {
            let e = Experiment::from_toml(text, &Overrides::default())
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(e.name, *name);
        }
        for (name, text) in TUNING {
            let e = sluice_sim::tuning::TuningExperiment::from_toml(text)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(e.name, *name);
        }
        let titles = titles(SIMULATOR);
        assert!(titles
            .iter()
            .any(|(n, t)| *n == "shen2008-fig21" && !t.is_empty()));
        assert!(text(SIMULATOR, "no-such", "sim")
            .unwrap_err()
            .contains("sluice sim --list"));
    }
}
