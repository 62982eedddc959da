//! The proxy core under arbitrary input from several sources, as the fuzz target drives it
//! (`fuzz/fuzz_targets/core.rs`), for a few hundred random scripts in every test run: no
//! panic, bounded tables and memory, nothing sent to an address no one trusted named.

mod drive;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(300)
    ))]
    #[test]
    fn arbitrary_datagrams_and_timeouts_break_no_invariant(
        script in proptest::collection::vec(any::<u8>(), 0..2048)
    ) {
        drive::run(&script);
    }
}

/// The committed corpus: scripts written to reach the interesting states (calls that
/// complete, forged feedback, floods, silence; named after them) and the fuzzer's
/// minimised corpus, so that the smoke run is not left to chance.
#[test]
fn the_corpus_scripts_break_no_invariant() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/core");
    let mut total = sluice_proxy_core::CoreStats::default();
    let mut retransmissions = 0;
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        scripts += 1;
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let s = drive::run(&bytes).unwrap();
        total.forwarded_requests += s.forwarded_requests;
        total.forwarded_responses += s.forwarded_responses;
        total.hop.feedback_without_transaction += s.hop.feedback_without_transaction;
        total.hop.client.applied += s.hop.client.applied;
        total.dropped_rate_limit += s.dropped_rate_limit;
        total.forbidden_destinations += s.forbidden_destinations;
        total.dropped_stray_responses += s.dropped_stray_responses;
        total.bad_content_length += s.bad_content_length;
        total.loops += s.loops;
        retransmissions += s.retransmissions_seen();
    }
    assert!(scripts >= 100, "{} holds {scripts} scripts", dir.display());
    // The scripts reach what they are named after: calls, feedback, floods, forgeries.
    let t = &total;
    for (what, n) in [
        ("forwarded requests", t.forwarded_requests),
        ("forwarded responses", t.forwarded_responses),
        (
            "forged feedback ignored",
            t.hop.feedback_without_transaction,
        ),
        ("feedback applied", t.hop.client.applied),
        ("rate-limited", t.dropped_rate_limit),
        ("forbidden destinations", t.forbidden_destinations),
        ("stray responses dropped", t.dropped_stray_responses),
        ("short bodies answered", t.bad_content_length),
        ("loops stopped", t.loops),
        ("retransmissions absorbed", retransmissions),
    ] {
        assert!(n > 0, "no script reached: {what} ({t:?})");
    }
}
