//! An owned, editable message: what tests, the load generator and tools build messages with.
//! Serialization is canonical (`Name: value` CRLF, one space after the colon), so
//! `OwnedMessage -> bytes -> Message -> OwnedMessage` is the identity.

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::Message;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedStartLine {
    Request { method: String, uri: String },
    Response { status: u16, reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedMessage {
    pub start: OwnedStartLine,
    /// Header names as written and values without surrounding white space.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl OwnedMessage {
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(256 + self.body.len());
        match &self.start {
            OwnedStartLine::Request { method, uri } => {
                out.put_slice(method.as_bytes());
                out.put_u8(b' ');
                out.put_slice(uri.as_bytes());
                out.put_slice(b" SIP/2.0\r\n");
            }
            OwnedStartLine::Response { status, reason } => {
                out.put_slice(format!("SIP/2.0 {status} {reason}\r\n").as_bytes());
            }
        }
        for (name, value) in &self.headers {
            out.put_slice(name.as_bytes());
            out.put_slice(b": ");
            out.put_slice(value);
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"\r\n");
        out.put_slice(&self.body);
        out.freeze()
    }
}

impl Message {
    /// Copies the message into an [`OwnedMessage`].
    pub fn to_owned_message(&self) -> OwnedMessage {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let start = match (self.method(), self.status()) {
            (Some(m), _) => OwnedStartLine::Request {
                method: m.as_str().to_owned(),
                uri: text(self.request_uri_raw().unwrap_or_default()),
            },
            (None, status) => OwnedStartLine::Response {
                status: status.unwrap_or_default(),
                reason: text(self.reason().unwrap_or_default()),
            },
        };
        OwnedMessage {
            start,
            headers: self
                .headers()
                .map(|h| (text(h.raw_name), h.value.to_vec()))
                .collect(),
            body: self.body().to_vec(),
        }
    }
}
