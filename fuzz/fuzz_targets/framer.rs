//! Any byte stream, cut into chunks at fuzzer-chosen points: the framer never panics and
//! never buffers past its limit (the check is `crates/sip/tests/fuzz_bodies`, shared with the
//! test suite's corpus replay).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sip/tests/fuzz_bodies/mod.rs"]
mod fuzz_bodies;

fuzz_target!(|data: &[u8]| fuzz_bodies::framer(data));
