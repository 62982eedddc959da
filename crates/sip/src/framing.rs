//! Stream framing for TCP (RFC 3261 §18.3): cut a byte stream into messages by
//! Content-Length, skipping the CRLF keep-alives that may sit between messages (RFC 5626 §3.5.1).

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{ErrorKind, ParseError, Result};
use crate::scan;
use crate::HeaderName;

/// Accumulates stream bytes and yields whole messages. It holds at most the message size
/// limit plus the last read: a message larger than the limit is an error as soon as that is
/// known, after which the connection must be closed (its framing can no longer be trusted).
#[derive(Debug)]
pub struct StreamFramer {
    buf: BytesMut,
    max_message_size: usize,
    /// Bytes already searched for the end of the header section, so a slow sender does not
    /// make every push rescan the whole buffer.
    scanned: usize,
    /// Keep-alive CRLFs skipped, for metrics.
    pub keepalives: u64,
}

impl StreamFramer {
    pub fn new(max_message_size: usize) -> StreamFramer {
        StreamFramer {
            buf: BytesMut::with_capacity(max_message_size.min(16 * 1024)),
            max_message_size,
            scanned: 0,
            keepalives: 0,
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned as a message.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message, `Ok(None)` if more bytes are needed, or an error if the
    /// stream cannot be framed (oversized message, missing or malformed Content-Length).
    pub fn next_message(&mut self) -> Result<Option<Bytes>> {
        let lead = self
            .buf
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        if lead > 0 {
            self.keepalives += (lead / 2).max(1) as u64;
            self.buf.advance(lead);
            self.scanned = self.scanned.saturating_sub(lead);
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        let from = self.scanned.saturating_sub(3);
        let Some(end) = memchr::memmem::find(&self.buf[from..], b"\r\n\r\n").map(|p| from + p + 4)
        else {
            self.scanned = self.buf.len();
            if self.buf.len() > self.max_message_size {
                return Err(self.too_large(self.buf.len()));
            }
            return Ok(None);
        };
        let body_len = content_length(&self.buf[..end])? as usize;
        let total = end + body_len;
        if total > self.max_message_size {
            return Err(self.too_large(total));
        }
        if self.buf.len() < total {
            self.scanned = end - 4;
            return Ok(None);
        }
        self.scanned = 0;
        Ok(Some(self.buf.split_to(total).freeze()))
    }

    fn too_large(&self, size: usize) -> ParseError {
        ParseError::new(
            ErrorKind::MessageTooLarge {
                size,
                limit: self.max_message_size,
            },
            0,
        )
    }
}

/// The Content-Length of a header section (start line included). Stream transports require it.
fn content_length(head: &[u8]) -> Result<u32> {
    let mut found: Option<u32> = None;
    let mut pos = 0;
    while let Some(nl) = memchr::memchr(b'\n', &head[pos..]) {
        let line = &head[pos..pos + nl];
        let line_start = pos;
        pos += nl + 1;
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = scan::trim(&line[..colon]);
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t')
            || HeaderName::from_bytes(name) != HeaderName::ContentLength
        {
            continue;
        }
        let n = scan::parse_u32(scan::trim(&line[colon + 1..])).ok_or_else(|| {
            ParseError::new(
                ErrorKind::BadNumber {
                    header: "Content-Length",
                },
                line_start,
            )
        })?;
        if found.is_some_and(|old| old != n) {
            return Err(ParseError::new(
                ErrorKind::ConflictingHeader {
                    header: "Content-Length",
                },
                line_start,
            ));
        }
        found = Some(n);
    }
    found.ok_or_else(|| ParseError::new(ErrorKind::MissingContentLength, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = "OPTIONS sip:x SIP/2.0\r\nl: 3\r\n\r\nabc";

    #[test]
    fn frames_by_content_length_across_arbitrary_splits() {
        let stream = format!("\r\n\r\n{MSG}\r\n\r\n{MSG}{MSG}");
        for split in 1..stream.len() {
            let mut f = StreamFramer::new(1024);
            let mut out = Vec::new();
            for chunk in stream.as_bytes().chunks(split) {
                f.push(chunk);
                while let Some(m) = f.next_message().unwrap() {
                    out.push(m);
                }
            }
            assert_eq!(out.len(), 3, "split {split}");
            assert!(out.iter().all(|m| &m[..] == MSG.as_bytes()));
            assert_eq!(f.buffered(), 0);
        }
    }

    #[test]
    fn missing_or_oversized_content_length_is_an_error() {
        let mut f = StreamFramer::new(1024);
        f.push(b"OPTIONS sip:x SIP/2.0\r\nTo: a\r\n\r\n");
        assert_eq!(
            f.next_message().unwrap_err().kind,
            ErrorKind::MissingContentLength
        );

        let mut f = StreamFramer::new(64);
        f.push(b"OPTIONS sip:x SIP/2.0\r\nContent-Length: 1000\r\n\r\n");
        assert!(matches!(
            f.next_message().unwrap_err().kind,
            ErrorKind::MessageTooLarge { .. }
        ));

        let mut f = StreamFramer::new(64);
        f.push(&[b'x'; 100]);
        assert!(matches!(
            f.next_message().unwrap_err().kind,
            ErrorKind::MessageTooLarge { .. }
        ));
    }
}
