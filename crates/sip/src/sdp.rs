//! Session descriptions of a chosen size (RFC 4566), for the offer in an INVITE and the
//! answer in its 200 OK (RFC 3264). Test traffic needs their size, not their content: over
//! TCP buffers hold bytes, and Shen and Schulzrinne 2010 (§5) reckon an INVITE with its
//! session description at about 1 KB.

use std::net::IpAddr;

use bytes::Bytes;

/// The Content-Type of [`session_description`].
pub const CONTENT_TYPE: &str = "application/sdp";

/// A session description of exactly `len` bytes for the host `ip`: an audio offer or
/// answer padded with attribute lines of no meaning (`a=x-pad:`). Below the size of the
/// offer itself it is cut short; nothing parses it.
pub fn session_description(len: usize, ip: IpAddr) -> Bytes {
    let family = if ip.is_ipv4() { "IP4" } else { "IP6" };
    let mut b = format!(
        "v=0\r\no=- 1 1 IN {family} {ip}\r\ns=-\r\nc=IN {family} {ip}\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )
    .into_bytes();
    b.truncate(len);
    while b.len() < len {
        // `a=x-pad:` and the line end take 10 bytes; the rest of a line is padding.
        let room = len - b.len();
        if room < 10 {
            b.resize(len, b'x');
            break;
        }
        let pad = (room - 10).min(70);
        b.extend_from_slice(b"a=x-pad:");
        b.resize(b.len() + pad, b'x');
        b.extend_from_slice(b"\r\n");
    }
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_has_the_size_asked_and_its_lines_end() {
        let ip = IpAddr::from([10, 1, 0, 2]);
        for len in [0, 5, 60, 100, 109, 110, 111, 600, 1000] {
            assert_eq!(session_description(len, ip).len(), len);
        }
        let sdp = session_description(600, ip);
        assert!(sdp.starts_with(b"v=0\r\no=- 1 1 IN IP4 10.1.0.2\r\n") && sdp.ends_with(b"\r\n"));
        let v6 = session_description(300, IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]));
        assert!(v6.starts_with(b"v=0\r\no=- 1 1 IN IP6 ::1\r\n"));
    }
}
