//! The command line as a whole: every flag documented, units and value lists enforced.

use clap::{CommandFactory, Parser};

use crate::Cli;

fn parse_error(args: &[&str]) -> String {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).unwrap_err().to_string()
}

#[test]
fn every_flag_and_argument_has_help() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "sluice", &mut missing);
    assert!(missing.is_empty(), "without help text: {missing:?}");
}

#[test]
fn command_line_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn time_flags_refuse_bare_numbers() {
    for args in [
        &["proxy", "--duration", "20"][..],
        &["sim", "x", "--duration", "20"],
        &["bench", "proxy", "--step", "20"],
        &["bench", "soak", "--control", "pi", "--interval", "20"],
        &["load", "uas", "--duration", "20"],
        &[
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--delay",
            "20",
        ],
        &["demo", "--duration", "20"],
        &["tune", "x", "--run-length", "20"],
    ] {
        let e = parse_error(args);
        assert!(
            e.contains("`20`: add a unit, such as 20s or 20ms"),
            "{args:?}: {e}"
        );
    }
    let e = parse_error(&["bench", "overload", "--warmup", "ten"]);
    assert!(e.contains("`ten`") && e.contains("such as 30s"), "{e}");
}

#[test]
fn time_flags_take_units() {
    let cli = Cli::try_parse_from([
        "sluice",
        "bench",
        "soak",
        "--control",
        "pi",
        "--duration",
        "2m",
    ])
    .unwrap();
    let crate::Command::Bench {
        command: crate::bench::BenchCommand::Soak(a),
    } = cli.command
    else {
        panic!("not bench soak");
    };
    assert_eq!(a.duration.as_secs(), 120);
    assert_eq!(a.interval.as_secs(), 60);
    assert_eq!(a.warmup.as_secs(), 120);
}

#[test]
fn fixed_value_sets_list_their_values() {
    let e = parse_error(&["proxy", "--control-algorithm", "foo"]);
    assert!(
        e.contains("invalid value 'foo'") && e.contains("latency-bucket") && e.contains("win-disc"),
        "{e}"
    );
    let e = parse_error(&["bench", "overload", "--generator", "foo"]);
    assert!(
        e.contains("[possible values: sluice, sipp, both, split]"),
        "{e}"
    );
    let e = parse_error(&[
        "load",
        "uac",
        "--target",
        "127.0.0.1:5060",
        "--arrivals",
        "foo",
    ]);
    assert!(e.contains("[possible values: constant, poisson]"), "{e}");
    let e = parse_error(&["load", "uas", "--duration", "1s", "--transport", "sctp"]);
    assert!(e.contains("[possible values: udp, tcp]"), "{e}");
    let e = parse_error(&[
        "load",
        "uac",
        "--target",
        "127.0.0.1:5060",
        "--tcp-connections",
        "each",
    ]);
    assert!(e.contains("[possible values: shared, per-call]"), "{e}");
    let e = parse_error(&["--log-format", "xml", "sim", "--list"]);
    assert!(e.contains("[possible values: text, json]"), "{e}");
}

#[test]
fn output_folders_default_under_out() {
    let out = |args: &[&str]| -> std::path::PathBuf {
        let mut argv = vec!["sluice"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            crate::Command::Demo(a) => a.out,
            crate::Command::Bench { command } => match command {
                crate::bench::BenchCommand::Overload(a) => a.out,
                crate::bench::BenchCommand::Proxy(a) => a.out,
                crate::bench::BenchCommand::Beta(a) => a.out,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(out(&["demo"]), std::path::Path::new("out/demo"));
    assert_eq!(
        out(&["bench", "overload"]),
        std::path::Path::new("out/overload")
    );
    assert_eq!(
        out(&["bench", "proxy"]),
        std::path::Path::new("out/bench-proxy")
    );
    assert_eq!(out(&["bench", "beta"]), std::path::Path::new("out/beta"));
}
