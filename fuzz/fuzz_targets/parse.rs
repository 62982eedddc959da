//! Any bytes through the datagram parser, full validation and every proxy edit: no panic
//! (the check is `crates/sip/tests/fuzz_bodies`, shared with the test suite's corpus replay).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sip/tests/fuzz_bodies/mod.rs"]
mod fuzz_bodies;

fuzz_target!(|data: &[u8]| fuzz_bodies::parse(data));
