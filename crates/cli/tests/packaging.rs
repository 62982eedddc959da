//! What operators install beside the binary: shell completions and man pages generated from
//! the command line's definition, the systemd unit in examples/systemd and the Prometheus
//! scrape config in examples/prometheus.yml.
//!
//! The expected subcommands and flags are read from `sluice --help`, so these tests follow the
//! command line as it changes instead of a copy of it.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../tests/external_tools.rs"]
mod external_tools;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sluice_ok(args: &[&str]) -> String {
    let out = Command::new(SLUICE).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The names in a `--help`'s "Commands:" section, without clap's own `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        // Entries are indented by two; wrapped descriptions by more.
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long flags in a `--help`'s "Options:" section, with their dashes.
fn long_flags(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Options:")
        .filter_map(|line| {
            // An entry is `--listen <LISTEN>` or `-h, --help`; a description line is not.
            let mut words = line.split_whitespace();
            let first = words.next()?;
            let long = if first.starts_with("--") {
                first
            } else if first.len() == 3 && first.starts_with('-') && first.ends_with(',') {
                words.next().filter(|w| w.starts_with("--"))?
            } else {
                return None;
            };
            Some(long.trim_end_matches(',').to_owned())
        })
        .collect()
}

/// Every command path below `sluice`, e.g. `["proxy"]` and `["load", "uac"]`.
fn command_paths() -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for top in subcommands(&sluice_ok(&["--help"])) {
        let nested = subcommands(&sluice_ok(&[&top, "--help"]));
        paths.push(vec![top.clone()]);
        paths.extend(nested.into_iter().map(|sub| vec![top.clone(), sub]));
    }
    paths
}

/// What bash completes after `words` (the last being the word under the cursor), through the
/// script `sluice completions bash` prints.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c"])
        .arg(
            r#"source "$1"; shift
               COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
               _sluice sluice "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(script)
        .arg("sluice")
        .args(words)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn help_parsing_finds_the_known_commands_and_flags() {
    // Guards the parsers the other tests rely on against reading nothing.
    let top = subcommands(&sluice_ok(&["--help"]));
    for name in ["proxy", "completions", "man"] {
        assert!(top.iter().any(|t| t == name), "{name} not in {top:?}");
    }
    assert!(
        command_paths().iter().any(|p| p.len() == 2),
        "no nested command found"
    );
    let flags = long_flags(&sluice_ok(&["proxy", "--help"]));
    for flag in ["--config", "--help"] {
        assert!(flags.iter().any(|f| f == flag), "{flag} not in {flags:?}");
    }
}

#[test]
fn bash_completes_every_subcommand_and_the_proxy_flags() {
    let dir = temp_dir("completions");
    let script = dir.join("sluice.bash");
    std::fs::write(&script, sluice_ok(&["completions", "bash"])).unwrap();

    let offered = bash_complete(&script, &[""]);
    for name in subcommands(&sluice_ok(&["--help"])) {
        assert!(
            offered.contains(&name),
            "`sluice ` does not offer {name}: {offered:?}"
        );
    }
    for path in command_paths().iter().filter(|p| p.len() == 2) {
        let offered = bash_complete(&script, &[&path[0], ""]);
        assert!(
            offered.contains(&path[1]),
            "`sluice {} ` does not offer {}: {offered:?}",
            path[0],
            path[1]
        );
    }
    let offered = bash_complete(&script, &["proxy", "--"]);
    for flag in long_flags(&sluice_ok(&["proxy", "--help"])) {
        assert!(
            offered.contains(&flag),
            "`sluice proxy --` does not offer {flag}: {offered:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_shell_gets_a_script_naming_every_subcommand() {
    let names = subcommands(&sluice_ok(&["--help"]));
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = sluice_ok(&["completions", shell]);
        for name in &names {
            assert!(script.contains(name.as_str()), "{shell}: no {name}");
        }
    }
    let out = Command::new(SLUICE)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'tcsh'") && err.contains("bash"),
        "{err}"
    );
}

/// Macros and requests a man(7) page may use (clap_mangen writes a subset).
const MAN_REQUESTS: [&str; 22] = [
    "TH", "SH", "SS", "TP", "IP", "LP", "PP", "P", "RS", "RE", "B", "I", "BR", "IR", "RB", "RI",
    "br", "sp", "ie", "el", "ds", "nf",
];

#[test]
fn man_writes_a_valid_page_per_command_with_its_flags() {
    let dir = temp_dir("man");
    let listed = sluice_ok(&["man", "--out", dir.to_str().unwrap()]);
    let mut expected = vec![dir.join("sluice.1")];
    expected.extend(
        command_paths()
            .iter()
            .map(|path| dir.join(format!("sluice-{}.1", path.join("-")))),
    );
    for page in &expected {
        assert!(
            page.is_file(),
            "{} missing; wrote:\n{listed}",
            page.display()
        );
        assert!(
            listed.lines().any(|l| Path::new(l) == page),
            "{} not listed",
            page.display()
        );
    }
    assert_eq!(listed.lines().count(), expected.len(), "{listed}");

    let page = std::fs::read_to_string(dir.join("sluice-proxy.1")).unwrap();
    assert!(page.contains("\n.TH sluice-proxy 1 "), "{page}");
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS"] {
        assert!(page.contains(&format!("\n.SH {section}\n")), "no {section}");
    }
    for line in page.lines().filter(|l| l.starts_with('.')) {
        let request = line[1..].split_whitespace().next().unwrap_or("");
        assert!(
            MAN_REQUESTS.contains(&request),
            "unexpected request: {line}"
        );
    }
    // roff writes a literal dash as `\-`.
    for flag in long_flags(&sluice_ok(&["proxy", "--help"])) {
        let roff = flag.replace('-', "\\-");
        assert!(
            page.contains(&format!("\\fB{roff}\\fR")),
            "no {flag} in the page"
        );
    }

    // Without --out, the top page goes to standard output.
    let top = sluice_ok(&["man"]);
    assert_eq!(top, std::fs::read_to_string(dir.join("sluice.1")).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn man_reports_an_unwritable_folder() {
    let dir = temp_dir("man-bad");
    let file = dir.join("not-a-folder");
    std::fs::write(&file, "").unwrap();
    let out = Command::new(SLUICE)
        .args(["man", "--out", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot create") && err.contains("not-a-folder"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[cfg_attr(missing_man, ignore = "needs man: apt-get install man-db")]
fn man_renders_every_page_without_warnings() {
    external_tools::require("man");
    let dir = temp_dir("man-render");
    sluice_ok(&["man", "--out", dir.to_str().unwrap()]);
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    pages.sort();
    assert!(pages.len() > 1);
    for page in &pages {
        // No hyphenation or justification, so that the flags come out whole.
        let out = Command::new("man")
            .args(["--warnings", "--nh", "--nj", "-l"])
            .arg(page)
            .env("LC_ALL", "C")
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.is_empty(),
            "{}: {err}",
            page.display()
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("NAME") && text.contains("SYNOPSIS"), "{text}");
        if page.ends_with("sluice-proxy.1") {
            for flag in long_flags(&sluice_ok(&["proxy", "--help"])) {
                assert!(text.contains(&flag), "{flag} not rendered:\n{text}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `TimeoutStopSec=` in seconds (`30`, `30s`, `1min`, `1min 30s`).
fn seconds(value: &str) -> f64 {
    value
        .split_whitespace()
        .map(|part| {
            let unit_at = part
                .find(|c: char| c.is_ascii_alphabetic())
                .unwrap_or(part.len());
            let (number, unit) = part.split_at(unit_at);
            let number: f64 = number
                .parse()
                .unwrap_or_else(|_| panic!("bad time: {value}"));
            match unit {
                "" | "s" | "sec" => number,
                "min" | "m" => number * 60.0,
                _ => panic!("unexpected unit in {value}"),
            }
        })
        .sum()
}

#[test]
#[cfg_attr(
    missing_systemd_analyze,
    ignore = "needs systemd-analyze: apt-get install systemd"
)]
fn systemd_unit_verifies_and_outlasts_the_drain() {
    external_tools::require("systemd-analyze");
    let unit =
        std::fs::read_to_string(workspace_root().join("examples/systemd/sluice.service")).unwrap();
    let installed = "ExecStart=/usr/local/bin/sluice proxy --config /etc/sluice/proxy.toml\n";
    assert!(
        unit.contains(installed),
        "the unit's ExecStart changed:\n{unit}"
    );

    // systemd-analyze checks that ExecStart's program exists: point it at the one built here.
    let dir = temp_dir("systemd");
    let path = dir.join("sluice.service");
    let here = format!("ExecStart=\"{SLUICE}\" proxy --config /etc/sluice/proxy.toml\n");
    std::fs::write(&path, unit.replace(installed, &here)).unwrap();
    // --man=no: the Documentation= page is not installed on a build machine.
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.is_empty(),
        "systemd-analyze verify:\n{said}"
    );

    // systemd's own rating of the sandbox (0 best, 10 worst; the threshold is in tenths).
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=20"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exposure above 2.0:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // SIGKILL must not cut the drain short: the stop timeout exceeds the default grace, with
    // room for the exit (the final report) after it.
    let stop = unit
        .lines()
        .find_map(|line| line.strip_prefix("TimeoutStopSec="))
        .expect("TimeoutStopSec");
    let config = sluice_ok(&["proxy", "--print-config"]);
    let config: toml::Table = config.parse().unwrap();
    let grace = config["shutdown_grace_s"].as_float().unwrap();
    assert!(
        seconds(stop) > grace + 5.0,
        "TimeoutStopSec={stop}, grace {grace} s"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[cfg_attr(
    missing_promtool,
    ignore = "needs promtool: apt-get install prometheus"
)]
fn prometheus_example_is_a_valid_config() {
    external_tools::require("promtool");
    let out = Command::new("promtool")
        .args(["check", "config"])
        .arg(workspace_root().join("examples/prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
