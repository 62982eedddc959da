//! The parser's and the framer's committed fuzz corpora (`fuzz/seeds/`, minimised with
//! `cargo fuzz cmin`), replayed through the fuzz targets' own checks in every test run.

mod fuzz_bodies;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        check(&std::fs::read(entry.unwrap().path()).unwrap());
        inputs += 1;
    }
    // A corpus that went missing would make this test pass without checking anything.
    assert!(inputs >= 100, "{} holds {inputs} inputs", dir.display());
}

#[test]
fn the_parser_corpus_replays_without_a_panic() {
    replay("parse", fuzz_bodies::parse);
}

#[test]
fn the_framer_corpus_replays_within_its_limit() {
    replay("framer", fuzz_bodies::framer);
}
