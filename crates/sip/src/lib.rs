//! sluice's SIP codec (RFC 3261, with RFC 5118 IPv6 references and RFC 7339 overload
//! parameters), written for a proxy under overload:
//!
//! * [`Message::parse`] makes one pass over a buffer it does not copy: it locates every header
//!   and parses only the fields an admission decision needs (top Via branch, Call-ID, CSeq,
//!   Max-Forwards, Content-Length). Everything else is parsed on demand.
//! * [`StreamFramer`] cuts a TCP byte stream into messages by Content-Length.
//! * [`edit`] forwards requests and responses with proxy edits and builds responses,
//!   byte-exact and deterministic.
//! * Limits ([`Limits`]) bound every input; errors are typed ([`ParseError`]) and carry the
//!   offset where they were found. No input panics (checked by proptest and a fuzz target).

mod error;
mod header;
mod message;
mod scan;

pub use error::{ErrorKind, ParseError, Result};
pub use header::HeaderName;
pub use message::{CSeq, HeaderRef, HeaderValues, Limits, Message, Method};
pub use scan::{unquote, Param, Params};
mod uri;
mod via;

pub use uri::{Host, NameAddr, Uri};
pub use via::{BadParam, Oc, OcSeq, Via};
pub mod edit;
mod framing;
pub mod sdp;
pub use framing::StreamFramer;
mod owned;
mod validate;
pub use owned::{OwnedMessage, OwnedStartLine};
