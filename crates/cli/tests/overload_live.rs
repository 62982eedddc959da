//! `sluice bench overload` and `sluice demo` on real loopback sockets, shortened to a few
//! seconds per point. Assertions are coarse (the machine may be loaded): properties with
//! wide margins, not exact numbers.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../tests/external_tools.rs"]
mod external_tools;
mod live_lock;
use live_lock::one_live_run_at_a_time;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// summary.csv as (variant, x) → the named column.
fn column(dir: &Path, name: &str) -> Vec<(String, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (v, x, c) = (at("variant"), at("x"), at(name));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[v].to_owned(),
                f[x].parse().unwrap(),
                f[c].parse().unwrap(),
            )
        })
        .collect()
}

/// `sluice bench overload` of `variants` at 4x (6 s, β 8) with `extra` arguments, into a
/// fresh folder named after `tag`: its stdout and the folder, once it has succeeded.
fn at_four_times_capacity(tag: &str, variants: &str, extra: &[&str]) -> (String, PathBuf) {
    let out = temp_dir(tag);
    let run = Command::new(SLUICE)
        .args(["bench", "overload", "--variants", variants, "--loads", "4"])
        .args(["--duration", "6s", "--warmup", "2s", "--beta", "8"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (stdout, out)
}

#[test]
fn at_four_times_capacity_pi_holds_goodput_where_no_control_collapses() {
    let _alone = one_live_run_at_a_time();
    let (stdout, out) = at_four_times_capacity("overload", "none:fifo,pi", &[]);
    // The same columns as `sluice sim`, in its order, then live-only ones.
    let text = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert!(text.starts_with(
        "experiment,variant,algorithm,seed,x,offered_load,goodput,goodput_cps,retrans_ratio,\
         setup_delay_p50_ms,setup_delay_p99_ms,occupancy,reject_ratio,offered_load_measured,\
         calls_offered,calls_good,re_queue_mean,re_dropped,"
    ));
    assert!(out.join("live-local.svg").is_file());
    // The report shows the plots written and a summary row per point.
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    for img in ["live-local.svg", "live-local-retrans.svg"] {
        assert!(report.contains(&format!("<img src=\"{img}\"")), "{report}");
    }
    assert!(report.contains("summary.csv</a>, 2 rows"), "{report}");
    assert!(stdout.contains("beta: emulated 8.00"), "{stdout}");
    let goodput = column(&out, "goodput");
    let of = |v: &str| goodput.iter().find(|g| g.0 == v).unwrap().2;
    let (none, pi) = (of("none:fifo"), of("pi"));
    // g_opt(4) with beta 8 is 0.46; no control falls to a fraction of capacity as the
    // queue fills with work its callers retransmit.
    assert!(pi > 0.3, "pi {pi}, none {none}\n{stdout}");
    assert!(none < 0.6 * pi, "pi {pi}, none {none}\n{stdout}");
    // PI answers the excess with 503 at once, so callers do not retransmit.
    let retrans = column(&out, "retrans_ratio");
    let pi_retrans = retrans.iter().find(|r| r.0 == "pi").unwrap().2;
    assert!(pi_retrans < 0.05, "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

/// `--netns`: the callers, the proxy and the callees on their own addresses, a network
/// namespace each; the PI holds g_opt as on loopback. Needs root, as CI runs.
#[test]
fn pi_holds_goodput_with_callers_proxy_and_callees_in_their_own_network_namespaces() {
    let _alone = one_live_run_at_a_time();
    let (stdout, out) = at_four_times_capacity("overload-netns", "pi", &["--netns"]);
    assert!(
        stdout.contains("callees 10.78.0.1, proxy 10.78.0.2, callers 10.78.0.3"),
        "{stdout}"
    );
    let pi = column(&out, "goodput")[0].2;
    // g_opt(4) with beta 8 is 0.46.
    assert!(pi > 0.3 && pi < 0.6, "pi {pi}\n{stdout}");
    let listing = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("iproute2's ip (apt-get install iproute2)");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(!listing.contains("sluice-proxy-"), "left behind: {listing}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn demo_prints_its_table_and_writes_the_plot() {
    let _alone = one_live_run_at_a_time();
    let out = temp_dir("demo");
    let run = Command::new(SLUICE)
        .args(["demo", "--duration", "2s", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for row in ["1x", "2x", "4x"] {
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with(row) && (l.contains(" no control ") || l.contains(" PI ")))
                .count(),
            2,
            "{stdout}"
        );
    }
    assert!(out.join("demo.svg").is_file());
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<img src=\"demo.svg\""), "{report}");
    assert_eq!(column(&out, "goodput").len(), 6);
    // meta.json: how the folder was made.
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["scenario"]["duration"], 2.0);
    assert_eq!(meta["scenario"]["capacity"], 300.0);
    assert_eq!(meta["command_line"][1], "demo");
    assert!(
        meta["seeds"].is_null(),
        "live generators are seeded per UAC"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_arguments_are_clear_errors_and_nothing_runs() {
    for (args, expect) in [
        (&["--variants", "nonsense"][..], "variant nonsense"),
        (&["--loads=0,-1"][..], "--loads"),
        (
            &["--proxy-cmd", "true", "--variants", ""][..],
            "--proxy-capacity",
        ),
        (&["--beta", "1"][..], "beta > 1"),
    ] {
        let out = temp_dir("overload-bad");
        let run = Command::new(SLUICE)
            .args(["bench", "overload", "--duration", "1s", "--out"])
            .arg(&out)
            .args(args)
            .output()
            .unwrap();
        assert!(!run.status.success(), "{args:?}");
        assert!(!out.join("meta.json").exists(), "no run, no meta.json");
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

/// Kamailio with its ratelimit module as the proxy under test: below its capacity every
/// call goes through.
#[test]
#[cfg_attr(missing_kamailio, ignore = "needs kamailio: apt-get install kamailio")]
fn kamailio_with_ratelimit_is_a_proxy_under_test() {
    external_tools::require("kamailio");
    let _alone = one_live_run_at_a_time();
    let cfg = workspace_root().join("tests/kamailio/ratelimit.cfg");
    let out = temp_dir("overload-kamailio");
    let run = Command::new(SLUICE)
        .args(["bench", "overload", "--variants", "", "--loads", "1"])
        .args(["--duration", "3s", "--warmup", "1s", "--proxy-capacity", "200"])
        .args(["--proxy-label", "kamailio-red", "--proxy-cmd"])
        .arg(format!(
            "kamailio -f {} -DD -E -m 256 -n 1 -l udp:{{listen}} -A 'NEXT_HOP=\"sip:{{next_hop}}\"' -A 'RL_PIPE=\"0:RED:1000\"'",
            cfg.display()
        ))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let goodput = column(&out, "goodput");
    assert_eq!(goodput.len(), 1);
    assert_eq!(goodput[0].0, "kamailio-red");
    assert!(goodput[0].2 > 0.9, "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}
