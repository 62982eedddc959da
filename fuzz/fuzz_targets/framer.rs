//! Any byte stream, cut into chunks at fuzzer-chosen points: the framer never panics, never
//! buffers past its limit, and every frame it yields is a whole message by Content-Length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sip::StreamFramer;

const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk.max(1));
    let mut framer = StreamFramer::new(LIMIT);
    for part in stream.chunks(chunk) {
        framer.push(part);
        loop {
            match framer.next_message() {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= LIMIT);
                    let _ = sluice_sip::Message::parse_with(frame, &sluice_sip::Limits::STREAM);
                }
                Ok(None) => break,
                Err(_) => return, // the connection would be closed
            }
        }
        assert!(framer.buffered() <= LIMIT + chunk);
    }
});
