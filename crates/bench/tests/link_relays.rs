//! The hop-by-hop topology live with impaired links: a relay with 10 ms of one-way delay
//! and 0.5 % loss each way on every hop (UACs -> SEs, SEs -> RE, RE -> UAS), two SEs,
//! win-disc feedback, half the RE's capacity offered, 6 s. Setup crosses three hops each
//! way, so it takes at least 60 ms; the relays lose datagrams, calls still complete through
//! retransmissions, and the SEs apply the RE's feedback, which needs the RE to see them as
//! its configured neighbours through the shared relay. About 7 s of wall time.

use std::sync::Mutex;

use sluice_bench::config::OverloadConfig;
use sluice_bench::console::Console;
use sluice_bench::overload::bench_overload;

#[derive(Default)]
struct Lines(Mutex<Vec<String>>);

impl Console for Lines {
    fn line(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}

#[test]
fn calls_cross_three_impaired_hops_take_the_delay_and_survive_the_loss() {
    let out = tempfile::tempdir().unwrap();
    let (delay_ms, hops) = (10.0, 3.0);
    let args = OverloadConfig {
        ses: Some(2),
        variants: vec!["win-disc".into()],
        capacity: 100.0,
        loads: Some(vec![0.5]),
        duration: 6.0,
        warmup: Some(2.0),
        link_delay_ms: Some(delay_ms),
        link_loss: Some(0.005),
        out: out.path().to_owned(),
        ..OverloadConfig::default()
    };
    let console = Lines::default();
    bench_overload(&args, &console).unwrap();
    let lines = console.0.into_inner().unwrap();
    let printed = lines.join("\n");
    eprintln!("{printed}");
    assert!(
        printed.contains("a relay on every hop: 10 ms, 0.5 % loss each way"),
        "{printed}"
    );

    // "  links: N datagrams delivered, M lost (P %), ..."
    let links = lines
        .iter()
        .find_map(|l| l.strip_prefix("  links: "))
        .expect("a links line");
    let number = |after: &str| -> u64 {
        let i = links.find(after).unwrap();
        links[..i]
            .split_whitespace()
            .last()
            .unwrap()
            .trim_start_matches(',')
            .parse()
            .unwrap()
    };
    let delivered = number(" datagrams delivered");
    let lost = number(" lost");
    assert!(delivered > 4_000, "{links}");
    assert!(lost > 0, "loss applied: {links}");
    assert!(links.contains(" 0 over the in-flight budget"), "{links}");

    let summary = std::fs::read_to_string(out.path().join("summary.csv")).unwrap();
    let mut rows = summary.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let row: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| -> f64 {
        let i = header.iter().position(|h| *h == name).unwrap();
        row[i].parse().unwrap()
    };
    let p50 = col("setup_delay_p50_ms");
    assert!(
        p50 >= 2.0 * hops * delay_ms,
        "setup p50 {p50} ms: INVITE and 200 each cross three relays"
    );
    // Half the capacity offered, and the calls complete despite the loss.
    let goodput = col("goodput");
    assert!((0.4..0.6).contains(&goodput), "goodput {goodput}");
    assert!(
        col("calls_good") >= 0.95 * col("calls_offered"),
        "{summary}"
    );
    assert!(
        col("uac_retrans_sent") + col("uas_2xx_retrans") > 0.0,
        "lost datagrams were sent again: {summary}"
    );
    // The SEs applied the RE's feedback (column `fb appl`, third from the end).
    let point = lines
        .iter()
        .find(|l| l.starts_with("win-disc as sluicewin window "))
        .expect("the point's row");
    let fields: Vec<&str> = point.split_whitespace().collect();
    let applied: u64 = fields[fields.len() - 3].parse().unwrap();
    assert!(applied > 0, "{point}");
}
