//! `sluice bench proxy` end to end at low rates: the step table, the highest clean rate and
//! the JSON/CSV it writes (the measurement itself is what `bench proxy` prints, not a test).

use std::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn bench(proxy: &str, tag: &str) -> serde_json::Value {
    bench_with(proxy, tag, &[]).1
}

/// The bench's standard output and JSON through `proxy`, with `extra` arguments.
fn bench_with(proxy: &str, tag: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("sluice-bench-test-{}-{tag}", std::process::id()));
    let out = Command::new(SLUICE)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .args(["bench", "proxy", "--proxy", proxy])
        .args(extra)
        .args([
            "--rate-start",
            "200",
            "--rate-step",
            "200",
            "--rate-max",
            "400",
        ])
        .args(["--step", "1s", "--drain", "2s", "--out"])
        .arg(&dir)
        .output()
        .expect("run bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{proxy:<14} sustains 400 calls/s")),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("bench_proxy.json")).unwrap()).unwrap();
    let csv = std::fs::read_to_string(dir.join("bench_proxy.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        3,
        "header and one row per step:\n{csv}"
    );
    let report = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(report.contains("bench_proxy.csv</a>, 2 rows"), "{report}");
    assert!(
        report.contains(&format!("<p>{proxy} sustains 400 calls/s")),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    (stdout.into_owned(), json)
}

#[test]
fn bench_without_a_proxy_measures_the_generator() {
    let json = bench("none", "direct");
    let run = &json[0];
    assert_eq!(run["max_clean_rate"], 400.0);
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    for (step, rate) in steps.iter().zip([200, 400]) {
        assert_eq!(step["offered"], rate);
        assert_eq!(step["successful"], rate);
        assert_eq!(step["clean"], true);
        assert!(step["proxy_cpu"].is_null(), "no proxy process to measure");
    }
}

#[test]
fn bench_through_the_sluice_proxy() {
    let json = bench("sluice", "sluice");
    let steps = json[0]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|s| s["clean"] == true && s["failed"] == 0));
    // The proxy is a child process whose CPU time the bench reads from /proc.
    assert!(steps[1]["proxy_us_per_call"].as_f64().is_some());
}

/// The names of the network namespaces on this host.
fn namespaces() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("iproute2's ip (apt-get install iproute2)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--netns`: the proxy (two UDP threads) in a namespace of its own, reached over a veth
/// pair from the generator's address; the namespace is gone when the bench ends, and so is
/// one a bench killed earlier left behind. Needs root, as CI runs.
#[test]
fn bench_with_the_proxy_in_its_own_network_namespace() {
    // A pid above Linux's largest: no process has it.
    let orphan = "sluice-dut-4194305";
    let made = Command::new("ip")
        .args(["netns", "add", orphan])
        .status()
        .expect("iproute2's ip (apt-get install iproute2)");
    assert!(made.success() && namespaces().contains(orphan));
    let (_, json) = bench_with("sluice:2", "netns", &["--netns"]);
    assert!(!namespaces().contains(orphan), "the orphan is left");
    let steps = json[0]["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["clean"] == true && s["failed"] == 0));
    let command = json[0]["command"].as_str().unwrap();
    let ns = command
        .split_whitespace()
        .find(|w| w.starts_with("sluice-dut-"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        command.contains("ip netns exec sluice-dut-") && command.contains("--listen 10.77."),
        "{command}"
    );
    assert!(ns.starts_with("sluice-dut-"), "{command}");
    assert!(!namespaces().contains(&ns), "{ns} left behind");
}
