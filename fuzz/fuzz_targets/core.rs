//! The proxy core under datagrams from several sources and timeouts in any order: no
//! panic, bounded tables and memory, and nothing sent to an address no one trusted named
//! (see `crates/proxy-core/tests/drive`, shared with the test suite's smoke run).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/proxy-core/tests/drive/mod.rs"]
mod drive;

fuzz_target!(|data: &[u8]| {
    drive::run(data);
});
