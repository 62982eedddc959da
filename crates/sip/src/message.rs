//! The message view: one scan over the bytes locates every header and parses the few an
//! admission decision needs (top Via branch, Call-ID, CSeq, Max-Forwards, Content-Length).
//! Everything else is parsed on demand from the located spans, as Kamailio does, so a proxy
//! that rejects or drops a message under overload has paid for one pass and one allocation.

use bytes::Bytes;

use crate::error::{ErrorKind, ParseError, Result};
use crate::header::HeaderName;
use crate::scan::{self, Search};

#[cfg(test)]
mod agreement;

/// Size limits applied while parsing. Exceeding one is a typed error, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_message_size: usize,
    pub max_headers: usize,
    pub max_line_length: usize,
}

impl Limits {
    /// The largest UDP payload (RFC 768 length field).
    pub const DATAGRAM: Limits = Limits {
        max_message_size: 65_535,
        max_headers: 256,
        max_line_length: 8_192,
    };
    /// Default for stream transports: 64 KiB per message.
    pub const STREAM: Limits = Limits {
        max_message_size: 65_536,
        max_headers: 256,
        max_line_length: 8_192,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DATAGRAM
    }
}

/// A byte range in the message buffer. u32 is enough: messages are capped far below 4 GiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

impl Span {
    fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }
    pub(crate) fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// A SIP method. Methods are case-sensitive (RFC 3261 §7.1); unknown ones keep their text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Invite,
    Ack,
    Bye,
    Cancel,
    Options,
    Register,
    Prack,
    Subscribe,
    Notify,
    Publish,
    Info,
    Refer,
    Message,
    Update,
    Extension(Bytes),
}

impl Method {
    /// Classifies a method token; `None` if it is not a token.
    pub fn from_token(token: &Bytes) -> Option<Method> {
        match Method::known(token) {
            Some(m) => Some(m),
            None if scan::is_token_str(token) => Some(Method::Extension(token.clone())),
            None => None,
        }
    }

    /// Classifies `buf[range]`, slicing the buffer only for an extension method: the admission
    /// scan reads two methods per request and should not touch a reference count for them.
    #[inline]
    fn from_buf(buf: &Bytes, range: std::ops::Range<usize>) -> Option<Method> {
        match Method::known(&buf[range.clone()]) {
            Some(m) => Some(m),
            None => Method::extension(buf, range),
        }
    }

    /// An extension method (or not a token): rare, kept out of the callers.
    #[cold]
    #[inline(never)]
    fn extension(buf: &Bytes, range: std::ops::Range<usize>) -> Option<Method> {
        Method::from_token(&buf.slice(range))
    }

    /// The methods of RFC 3261 and its extensions, by their exact (case-sensitive) spelling.
    /// Every request has two methods to classify (start line and CSeq): the length and the
    /// first and last four bytes, compared as one key, settle it without comparing the token
    /// against each spelling in turn.
    #[inline]
    fn known(token: &[u8]) -> Option<Method> {
        let (Some(head), Some(tail)) = (token.first_chunk::<4>(), token.last_chunk::<4>()) else {
            return match token {
                b"ACK" => Some(Method::Ack),
                b"BYE" => Some(Method::Bye),
                _ => None,
            };
        };
        let key = (
            token.len(),
            u32::from_le_bytes(*head),
            u32::from_le_bytes(*tail),
        );
        Some(match key {
            method_key::INVITE => Method::Invite,
            method_key::CANCEL => Method::Cancel,
            method_key::OPTIONS => Method::Options,
            method_key::REGISTER => Method::Register,
            method_key::PRACK => Method::Prack,
            // Nine bytes: the first and last four leave the middle one to compare.
            method_key::SUBSCRIBE if token[4] == b'C' => Method::Subscribe,
            method_key::NOTIFY => Method::Notify,
            method_key::PUBLISH => Method::Publish,
            method_key::INFO => Method::Info,
            method_key::REFER => Method::Refer,
            method_key::MESSAGE => Method::Message,
            method_key::UPDATE => Method::Update,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &str {
        match self {
            Method::Invite => "INVITE",
            Method::Ack => "ACK",
            Method::Bye => "BYE",
            Method::Cancel => "CANCEL",
            Method::Options => "OPTIONS",
            Method::Register => "REGISTER",
            Method::Prack => "PRACK",
            Method::Subscribe => "SUBSCRIBE",
            Method::Notify => "NOTIFY",
            Method::Publish => "PUBLISH",
            Method::Info => "INFO",
            Method::Refer => "REFER",
            Method::Message => "MESSAGE",
            Method::Update => "UPDATE",
            // Token characters are ASCII, so this never fails for a parsed method.
            Method::Extension(t) => std::str::from_utf8(t).unwrap_or("?"),
        }
    }
}

/// Keys of [`Method::known`]: length, first four and last four bytes of each spelling.
mod method_key {
    type Key = (usize, u32, u32);

    const fn key(s: &[u8]) -> Key {
        let n = s.len();
        (
            n,
            u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            u32::from_le_bytes([s[n - 4], s[n - 3], s[n - 2], s[n - 1]]),
        )
    }

    pub(super) const INVITE: Key = key(b"INVITE");
    pub(super) const CANCEL: Key = key(b"CANCEL");
    pub(super) const OPTIONS: Key = key(b"OPTIONS");
    pub(super) const REGISTER: Key = key(b"REGISTER");
    pub(super) const PRACK: Key = key(b"PRACK");
    pub(super) const SUBSCRIBE: Key = key(b"SUBSCRIBE");
    pub(super) const NOTIFY: Key = key(b"NOTIFY");
    pub(super) const PUBLISH: Key = key(b"PUBLISH");
    pub(super) const INFO: Key = key(b"INFO");
    pub(super) const REFER: Key = key(b"REFER");
    pub(super) const MESSAGE: Key = key(b"MESSAGE");
    pub(super) const UPDATE: Key = key(b"UPDATE");
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The CSeq header: sequence number and method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CSeq {
    pub seq: u32,
    pub method: Method,
}

#[derive(Clone, Debug)]
pub(crate) enum StartLine {
    Request { method: Method, uri: Span },
    Response { status: u16, reason: Span },
}

/// One located header field. `value` excludes surrounding white space; `line` covers the
/// whole field, folded continuation lines and the final CRLF included, for verbatim copies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeaderSpan {
    pub(crate) name: HeaderName,
    pub(crate) name_span: Span,
    pub(crate) value: Span,
    pub(crate) line: Span,
}

/// A parsed SIP message: a view into one immutable buffer.
#[derive(Clone, Debug)]
pub struct Message {
    buf: Bytes,
    start: StartLine,
    /// Where the header section begins (after the start line), for serializers.
    headers_start: u32,
    pub(crate) headers: Vec<HeaderSpan>,
    body: Span,
    admission: Admission,
}

/// The admission fields, gathered while the parse runs and moved into the [`Message`] once,
/// when it is built: building the message early and filling it in cost two copies of it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Admission {
    top_via: Option<u32>,
    top_via_branch: Option<Span>,
    call_id: Option<Span>,
    cseq: Option<CSeq>,
    max_forwards: Option<u32>,
    content_length: Option<u32>,
}

/// A header as the application sees it.
#[derive(Clone, Copy, Debug)]
pub struct HeaderRef<'a> {
    pub name: HeaderName,
    /// The name as written (compact or long, any case).
    pub raw_name: &'a [u8],
    /// The value as written, without leading/trailing white space; may contain folded CRLFs.
    pub value: &'a [u8],
}

impl Message {
    /// Parses a datagram with the default limits.
    pub fn parse(buf: Bytes) -> Result<Message> {
        Message::parse_with(buf, &Limits::DATAGRAM)
    }

    /// Parses one complete message (a datagram, or one frame cut by [`crate::StreamFramer`]).
    pub fn parse_with(buf: Bytes, limits: &Limits) -> Result<Message> {
        Message::parse_using::<scan::Native>(buf, limits)
    }

    /// As [`Message::parse_with`], except that a body shorter than Content-Length declares
    /// is no error: the message comes back with the body there is and `false`. For a
    /// datagram receiver, which answers such a request with 400 (RFC 3261 §18.3) and so
    /// needs its header fields; everything else about it is as `parse_with` checks it.
    pub fn parse_short_body(buf: Bytes, limits: &Limits) -> Result<(Message, bool)> {
        let (parts, scanned) = Message::parts_using::<scan::Native>(&buf, limits)?;
        let pos = scanned?;
        match body_span(&parts.admission, buf.len(), pos) {
            Ok(body) => Ok((parts.into_message_with_body(buf, body), true)),
            Err(e) if matches!(e.kind, ErrorKind::BodyTooShort { .. }) => {
                let body = Span::new(pos, buf.len());
                Ok((parts.into_message_with_body(buf, body), false))
            }
            Err(e) => Err(e),
        }
    }

    /// [`Message::parse_with`] with a chosen byte search, so that tests can check that the
    /// portable one and the SIMD one parse alike.
    pub(crate) fn parse_using<S: Search>(buf: Bytes, limits: &Limits) -> Result<Message> {
        let (parts, scanned) = Message::parts_using::<S>(&buf, limits)?;
        parts.into_message(buf, scanned?)
    }

    /// The start line and header fields, and where the header section ends (or the scan's
    /// error, which comes after any error of the admission headers before it).
    #[inline]
    fn parts_using<S: Search>(buf: &Bytes, limits: &Limits) -> Result<(Parts, Result<usize>)> {
        let b = &buf[..];
        let (start, headers_start) = Message::begin(buf, limits)?;
        let mut headers = Vec::with_capacity(24);
        let scanned = scan_headers::<S>(b, headers_start, limits, &mut headers);
        // The admission headers are parsed in order, before a scan error is reported: the
        // same error a line-by-line parse meets first. (A separate pass keeps the scan loop
        // small enough for its state to stay in registers.)
        let mut admission = Admission::default();
        for (index, header) in headers.iter().enumerate() {
            if header.name.is_admission() {
                admission.admit_header(buf, header.name, index, header.value)?;
            }
        }
        let parts = Parts {
            start,
            headers_start,
            headers,
            admission,
        };
        Ok((parts, scanned))
    }

    /// The start of a parse: the size limit, keep-alive CRLFs and the start line; returns the
    /// start line and where the header fields begin.
    #[inline]
    pub(crate) fn begin(buf: &Bytes, limits: &Limits) -> Result<(StartLine, usize)> {
        if buf.len() > limits.max_message_size {
            return Err(ParseError::new(
                ErrorKind::MessageTooLarge {
                    size: buf.len(),
                    limit: limits.max_message_size,
                },
                limits.max_message_size,
            ));
        }
        let b = &buf[..];
        // RFC 3261 §7.5: CRLFs before the start line are ignored (keep-alives).
        let pos = b
            .iter()
            .position(|&c| c != b'\r' && c != b'\n')
            .ok_or_else(|| ParseError::new(ErrorKind::Empty, 0))?;
        let (line_end, next) = line_at(b, pos, limits)?;
        Ok((parse_start_line(buf, pos, line_end)?, next))
    }
}

/// What a parse gathers before the body: the message is built from it once, at the end.
pub(crate) struct Parts {
    pub(crate) start: StartLine,
    pub(crate) headers_start: usize,
    pub(crate) headers: Vec<HeaderSpan>,
    pub(crate) admission: Admission,
}

impl Parts {
    /// The message, with its body from `pos` (where the header fields end).
    #[inline]
    pub(crate) fn into_message(self, buf: Bytes, pos: usize) -> Result<Message> {
        let body = body_span(&self.admission, buf.len(), pos)?;
        Ok(self.into_message_with_body(buf, body))
    }

    #[inline]
    fn into_message_with_body(self, buf: Bytes, body: Span) -> Message {
        Message {
            buf,
            start: self.start,
            headers_start: self.headers_start as u32,
            headers: self.headers,
            body,
            admission: self.admission,
        }
    }
}

/// The body from `pos` (the header fields' end) as Content-Length declares it.
#[inline]
fn body_span(admission: &Admission, len: usize, pos: usize) -> Result<Span> {
    let available = len - pos;
    let body_len = match admission.content_length {
        Some(declared) => {
            let declared = declared as usize;
            if declared > available {
                return Err(ParseError::new(
                    ErrorKind::BodyTooShort {
                        declared,
                        available,
                    },
                    pos,
                ));
            }
            // Extra bytes after the declared body are ignored (RFC 3261 §18.3).
            declared
        }
        None => available,
    };
    Ok(Span::new(pos, pos + body_len))
}

impl Admission {
    /// Parses an admission header as it is located. Only the first Via, Call-ID and CSeq are
    /// taken here; a repeated Content-Length or Max-Forwards with another value is an error,
    /// because disagreeing framing headers are how messages get smuggled.
    fn admit_header(
        &mut self,
        buf: &Bytes,
        name: HeaderName,
        index: usize,
        value: Span,
    ) -> Result<()> {
        let v = &buf[value.range()];
        let at = value.start as usize;
        match name {
            HeaderName::Via if self.top_via.is_none() => {
                self.top_via = Some(index as u32);
                self.top_via_branch = top_via_branch(v).map_err(|()| {
                    ParseError::new(ErrorKind::BadHeaderValue { header: "Via" }, at)
                })?;
                if let Some(span) = &mut self.top_via_branch {
                    span.start += value.start;
                    span.end += value.start;
                }
            }
            HeaderName::CallId if self.call_id.is_none() => {
                // Only emptiness is checked here; inner white space is left to `validate`.
                if v.is_empty() {
                    return Err(ParseError::new(
                        ErrorKind::BadHeaderValue { header: "Call-ID" },
                        at,
                    ));
                }
                self.call_id = Some(value);
            }
            HeaderName::CSeq if self.cseq.is_none() => {
                self.cseq = Some(parse_cseq(buf, value)?);
            }
            HeaderName::MaxForwards => {
                let n = scan::parse_u32(v).ok_or_else(|| {
                    ParseError::new(
                        ErrorKind::BadNumber {
                            header: "Max-Forwards",
                        },
                        at,
                    )
                })?;
                if self.max_forwards.is_some_and(|old| old != n) {
                    return Err(ParseError::new(
                        ErrorKind::ConflictingHeader {
                            header: "Max-Forwards",
                        },
                        at,
                    ));
                }
                self.max_forwards = Some(n);
            }
            HeaderName::ContentLength => {
                let n = scan::parse_u32(v).ok_or_else(|| {
                    ParseError::new(
                        ErrorKind::BadNumber {
                            header: "Content-Length",
                        },
                        at,
                    )
                })?;
                if self.content_length.is_some_and(|old| old != n) {
                    return Err(ParseError::new(
                        ErrorKind::ConflictingHeader {
                            header: "Content-Length",
                        },
                        at,
                    ));
                }
                self.content_length = Some(n);
            }
            _ => {}
        }
        Ok(())
    }
}

impl Message {
    // ---- admission fields: free after parse ----

    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }

    pub fn is_response(&self) -> bool {
        !self.is_request()
    }

    /// The request method, or `None` for a response.
    pub fn method(&self) -> Option<&Method> {
        match &self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }

    /// The status code, or `None` for a request.
    pub fn status(&self) -> Option<u16> {
        match self.start {
            StartLine::Response { status, .. } => Some(status),
            StartLine::Request { .. } => None,
        }
    }

    /// The reason phrase of a response.
    pub fn reason(&self) -> Option<&[u8]> {
        match self.start {
            StartLine::Response { reason, .. } => Some(&self.buf[reason.range()]),
            StartLine::Request { .. } => None,
        }
    }

    /// The Request-URI as written.
    pub fn request_uri_raw(&self) -> Option<&[u8]> {
        match self.start {
            StartLine::Request { uri, .. } => Some(&self.buf[uri.range()]),
            StartLine::Response { .. } => None,
        }
    }

    /// The `branch` parameter of the topmost Via, as written.
    pub fn top_via_branch(&self) -> Option<&[u8]> {
        self.admission.top_via_branch.map(|s| &self.buf[s.range()])
    }

    /// The branch as a `Bytes` slice sharing the message buffer (no copy).
    pub fn top_via_branch_bytes(&self) -> Option<Bytes> {
        self.admission
            .top_via_branch
            .map(|s| self.buf.slice(s.range()))
    }

    pub fn call_id(&self) -> Option<&[u8]> {
        self.admission.call_id.map(|s| &self.buf[s.range()])
    }

    pub fn cseq(&self) -> Option<&CSeq> {
        self.admission.cseq.as_ref()
    }

    pub fn max_forwards(&self) -> Option<u32> {
        self.admission.max_forwards
    }

    pub fn content_length(&self) -> Option<u32> {
        self.admission.content_length
    }

    // ---- the rest: located, parsed on demand ----

    /// The whole buffer the message was parsed from.
    pub fn as_bytes(&self) -> &Bytes {
        &self.buf
    }

    /// The message body (exactly Content-Length bytes when that header is present).
    pub fn body(&self) -> &[u8] {
        &self.buf[self.body.range()]
    }

    /// The bytes of the message proper: start line to end of body, without trailing bytes.
    pub fn wire(&self) -> Bytes {
        self.buf.slice(..self.body.end as usize)
    }

    pub fn header_count(&self) -> usize {
        self.headers.len()
    }

    /// All header fields in order.
    pub fn headers(&self) -> impl Iterator<Item = HeaderRef<'_>> + '_ {
        self.headers.iter().map(|h| self.header_ref(h))
    }

    /// The first header with this name.
    pub fn header(&self, name: HeaderName) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name == name)
            .map(|h| &self.buf[h.value.range()])
    }

    /// The first header whose name matches `raw` case-insensitively (for headers without an id).
    pub fn header_by_name(&self, raw: &str) -> Option<&[u8]> {
        let id = HeaderName::from_bytes(raw.as_bytes());
        if id != HeaderName::Other {
            return self.header(id);
        }
        self.headers
            .iter()
            .find(|h| {
                h.name == HeaderName::Other
                    && self.buf[h.name_span.range()].eq_ignore_ascii_case(raw.as_bytes())
            })
            .map(|h| &self.buf[h.value.range()])
    }

    /// Every value of a header, split at commas for list headers (RFC 3261 §7.3.1), in order.
    pub fn header_values(&self, name: HeaderName) -> HeaderValues<'_> {
        HeaderValues {
            msg: self,
            name,
            next_header: 0,
            current: None,
        }
    }

    fn header_ref<'a>(&'a self, h: &HeaderSpan) -> HeaderRef<'a> {
        HeaderRef {
            name: h.name,
            raw_name: &self.buf[h.name_span.range()],
            value: &self.buf[h.value.range()],
        }
    }

    /// Offset of a sub-slice of this message's buffer, for error positions in lazy parsers.
    pub(crate) fn offset_of(&self, part: &[u8]) -> usize {
        (part.as_ptr() as usize).saturating_sub(self.buf.as_ptr() as usize)
    }

    pub(crate) fn headers_start(&self) -> usize {
        self.headers_start as usize
    }

    pub(crate) fn top_via_index(&self) -> Option<usize> {
        self.admission.top_via.map(|i| i as usize)
    }

    pub(crate) fn start_line_bytes(&self) -> &[u8] {
        let first_non_crlf = self
            .buf
            .iter()
            .position(|&c| c != b'\r' && c != b'\n')
            .unwrap_or(0);
        &self.buf[first_non_crlf..self.headers_start as usize]
    }
}

/// Iterator over the comma-separated values of one header name across all its lines.
pub struct HeaderValues<'a> {
    msg: &'a Message,
    name: HeaderName,
    next_header: usize,
    current: Option<scan::ListIter<'a>>,
}

impl std::fmt::Debug for HeaderValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderValues")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'a> Iterator for HeaderValues<'a> {
    /// A value, or an error with its offset if a quoted string is unterminated.
    type Item = Result<&'a [u8]>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(list) = &mut self.current {
                match list.next() {
                    Some(Ok(v)) => return Some(Ok(v)),
                    Some(Err(at)) => {
                        self.current = None;
                        return Some(Err(ParseError::new(
                            ErrorKind::UnterminatedQuote,
                            self.msg.offset_of(at),
                        )));
                    }
                    None => self.current = None,
                }
            }
            let index = self.next_header
                + self.msg.headers[self.next_header..]
                    .iter()
                    .position(|h| h.name == self.name)?;
            self.next_header = index + 1;
            let value = &self.msg.buf[self.msg.headers[index].value.range()];
            if self.name.is_list() {
                self.current = Some(scan::split_list(value));
            } else {
                return Some(Ok(value));
            }
        }
    }
}

/// Locates the header fields from `pos` (just after the start line) to the empty line that
/// ends them, recording each in `headers`; returns where the body starts. Not inlined: on
/// its own, the loop's state fits in registers.
#[inline(never)]
fn scan_headers<S: Search>(
    b: &[u8],
    mut pos: usize,
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
) -> Result<usize> {
    let reach = line_reach(b, limits);
    loop {
        let Some(&first) = b.get(pos) else {
            return Err(ParseError::new(ErrorKind::Truncated, b.len()));
        };
        // The empty line ending the header section.
        if first == b'\n' {
            pos += 1;
            break;
        }
        if first == b'\r' && b.get(pos + 1) == Some(&b'\n') {
            pos += 2;
            break;
        }
        // The colon first, then the line end from just after it, so no byte is searched
        // twice. A line without a colon makes the "name" run into the next line, which no known
        // name matches and the token check rejects. Every failure here is reported by
        // `header_line_error`, which re-reads the line the slow way so that the error is
        // the same as a line-by-line parse would give.
        let window_end = b.len().min(pos + reach);
        let Some(colon) = S::find(&b[pos..window_end], b':').map(|i| pos + i) else {
            return Err(header_line_error(b, pos, limits));
        };
        let Some(lf) = S::find(&b[colon + 1..window_end], b'\n').map(|i| colon + 1 + i) else {
            return Err(header_line_error(b, pos, limits));
        };
        // lf > colon >= pos, so lf - 1 is inside the line.
        let mut value_end = if b[lf - 1] == b'\r' { lf - 1 } else { lf };
        if value_end - pos > limits.max_line_length {
            return Err(header_line_error(b, pos, limits));
        }
        // The name as written, up to the colon: a known name is proved a token by matching
        // its spelling. Only when that fails is white space before the colon (rare; it never
        // matches a spelling) stripped, and the name checked for token characters (which
        // also rejects a "name" that runs into the next line).
        let mut name_end = colon;
        let mut name = HeaderName::from_name_in(b, pos, colon);
        if name == HeaderName::Other {
            while name_end > pos && matches!(b[name_end - 1], b' ' | b'\t') {
                name_end -= 1;
            }
            if name_end != colon {
                name = HeaderName::from_name_in(b, pos, name_end);
            }
            if name == HeaderName::Other && !scan::is_token_str(&b[pos..name_end]) {
                return Err(header_line_error(b, pos, limits));
            }
        }
        let mut next = lf + 1;
        // Line folding (RFC 3261 §7.3.1): lines starting with SP/HT continue this field.
        while next < b.len() && matches!(b[next], b' ' | b'\t') {
            let window_end = b.len().min(next + reach);
            // The continuation starts with white space, so its LF is after `next`.
            let (content_end, lf) = match S::find(&b[next..window_end], b'\n').map(|i| next + i) {
                Some(lf) if b[lf - 1] == b'\r' => (lf - 1, lf),
                Some(lf) => (lf, lf),
                None => return Err(line_error(b, next, window_end, limits)),
            };
            if content_end - next > limits.max_line_length {
                return Err(line_error(b, next, window_end, limits));
            }
            value_end = content_end;
            next = lf + 1;
        }
        // Trim the value (LWS includes the CRLF of a folded line). Usually one space follows
        // the colon and the value ends at the CRLF: three tests in all.
        let mut value_start = colon + 1;
        while value_start < value_end && scan::is_lws(b[value_start]) {
            value_start += 1;
        }
        while value_end > value_start && scan::is_lws(b[value_end - 1]) {
            value_end -= 1;
        }
        let value = Span::new(value_start, value_end);
        if headers.len() == limits.max_headers {
            return Err(ParseError::new(
                ErrorKind::TooManyHeaders {
                    limit: limits.max_headers,
                },
                pos,
            ));
        }
        headers.push(HeaderSpan {
            name,
            name_span: Span::new(pos, name_end),
            value,
            line: Span::new(pos, next),
        });
        pos = next;
    }
    Ok(pos)
}

/// Where the search for the end of a line starting at `pos` stops: its longest content and
/// CRLF, or the buffer's end. A limit near `usize::MAX` means no limit, not an overflow:
/// the reach is capped at the buffer's length, and a slice's length and an offset into it
/// add up to no more than `isize::MAX` twice.
#[inline]
fn line_window(b: &[u8], pos: usize, limits: &Limits) -> usize {
    b.len().min(pos + line_reach(b, limits))
}

/// How far past a line's start [`line_window`] reaches, for loops that compute it once.
#[inline]
fn line_reach(b: &[u8], limits: &Limits) -> usize {
    limits.max_line_length.saturating_add(2).min(b.len())
}

/// Finds the end of the line starting at `pos`: returns (end of content, start of next line).
/// Accepts a bare LF as well as CRLF, as robust SIP stacks do. Inlined, with the error built
/// out of line, because it runs once per header line.
#[allow(clippy::inline_always)] // measured: without it the compiler keeps the call.
#[inline(always)]
fn line_at(b: &[u8], pos: usize, limits: &Limits) -> Result<(usize, usize)> {
    let window_end = line_window(b, pos, limits);
    if let Some(i) = scan::find_short(&b[pos..window_end], b'\n') {
        let lf = pos + i;
        let content_end = if lf > pos && b[lf - 1] == b'\r' {
            lf - 1
        } else {
            lf
        };
        if content_end - pos <= limits.max_line_length {
            return Ok((content_end, lf + 1));
        }
    }
    Err(line_error(b, pos, window_end, limits))
}

/// The error for a header line the fast scan could not take: what reading it line first,
/// then colon, then name gives (line too long, truncated, or a bad name).
#[cold]
#[inline(never)]
fn header_line_error(b: &[u8], pos: usize, limits: &Limits) -> ParseError {
    match line_at(b, pos, limits) {
        Err(e) => e,
        Ok(_) => ParseError::new(ErrorKind::BadHeaderName, pos),
    }
}

#[cold]
#[inline(never)]
fn line_error(b: &[u8], pos: usize, window_end: usize, limits: &Limits) -> ParseError {
    if window_end == b.len() && scan::find_byte(&b[pos..], b'\n').is_none() {
        ParseError::new(ErrorKind::Truncated, b.len())
    } else {
        ParseError::new(
            ErrorKind::LineTooLong {
                limit: limits.max_line_length,
            },
            pos,
        )
    }
}

/// Whether `s` starts with `SIP/` in any case: one word compared under a mask that ignores
/// only the case bit of the letters, so exactly `eq_ignore_ascii_case`.
fn starts_with_sip(s: &[u8]) -> bool {
    s.first_chunk::<4>().is_some_and(|word| {
        (u32::from_le_bytes(*word) ^ u32::from_le_bytes(*b"sip/")) & 0xffdf_dfdf == 0
    })
}

/// Whether `s` is `SIP/2.0` in any case.
fn is_sip_2_0(s: &[u8]) -> bool {
    s.len() == 7 && starts_with_sip(s) && s[4..] == *b"2.0"
}

fn parse_start_line(buf: &Bytes, start: usize, end: usize) -> Result<StartLine> {
    let line = &buf[start..end];
    let bad = |kind, off: usize| ParseError::new(kind, start + off);
    if starts_with_sip(line) {
        // Status-Line = SIP-Version SP Status-Code SP Reason-Phrase
        let sp = memchr::memchr(b' ', line).ok_or_else(|| bad(ErrorKind::BadStartLine, 0))?;
        if !is_sip_2_0(&line[..sp]) {
            return Err(bad(ErrorKind::UnsupportedVersion, 0));
        }
        let code = line
            .get(sp + 1..sp + 4)
            .ok_or_else(|| bad(ErrorKind::BadStatusCode, sp + 1))?;
        let status = scan::parse_u32(code)
            .filter(|c| (100..=699).contains(c))
            .ok_or_else(|| bad(ErrorKind::BadStatusCode, sp + 1))? as u16;
        let reason_start = match line.get(sp + 4) {
            None => sp + 4,
            Some(b' ') => sp + 5,
            Some(_) => return Err(bad(ErrorKind::BadStatusCode, sp + 1)),
        };
        return Ok(StartLine::Response {
            status,
            reason: Span::new(start + reason_start, end),
        });
    }
    // Request-Line = Method SP Request-URI SP SIP-Version; exactly two single spaces.
    let sp1 = scan::find_short(line, b' ').ok_or_else(|| bad(ErrorKind::BadStartLine, 0))?;
    // The version follows the last space. Searching forward from the first finds it in the
    // common case and tells at once whether the Request-URI holds a space (a third one).
    let after = sp1 + 1;
    let (sp2, uri_has_space) = match scan::find_short(&line[after..], b' ') {
        // Usually what follows is the version itself, which holds no space.
        Some(i)
            if is_sip_2_0(&line[after + i + 1..])
                || scan::find_short(&line[after + i + 1..], b' ').is_none() =>
        {
            (after + i, false)
        }
        Some(_) => (memchr::memrchr(b' ', line).unwrap_or(sp1), true),
        None => (sp1, false),
    };
    if sp2 == sp1 {
        return Err(bad(ErrorKind::BadStartLine, sp1));
    }
    let method =
        Method::from_buf(buf, start..start + sp1).ok_or_else(|| bad(ErrorKind::BadMethod, 0))?;
    let version = &line[sp2 + 1..];
    if !(version.len() > 4 && starts_with_sip(version)) {
        return Err(bad(ErrorKind::BadStartLine, sp2 + 1));
    }
    if !is_sip_2_0(version) {
        return Err(bad(ErrorKind::UnsupportedVersion, sp2 + 1));
    }
    let uri = &line[sp1 + 1..sp2];
    // White space inside the Request-URI must be escaped (RFC 3261 §25.1); with the first and
    // last space delimiting it, one more space is the only way to have some. Control
    // characters are left to `validate`, which parses the URI.
    if uri.is_empty() || uri_has_space {
        return Err(bad(ErrorKind::BadUri, sp1 + 1));
    }
    Ok(StartLine::Request {
        method,
        uri: Span::new(start + sp1 + 1, start + sp2),
    })
}

fn parse_cseq(buf: &Bytes, value: Span) -> Result<CSeq> {
    let v = &buf[value.range()];
    let bad = || {
        ParseError::new(
            ErrorKind::BadHeaderValue { header: "CSeq" },
            value.start as usize,
        )
    };
    let digits = v.iter().take_while(|c| c.is_ascii_digit()).count();
    let seq = scan::parse_u32(&v[..digits]).ok_or_else(|| {
        ParseError::new(
            ErrorKind::BadNumber { header: "CSeq" },
            value.start as usize,
        )
    })?;
    let ws = v[digits..].iter().take_while(|&&c| scan::is_lws(c)).count();
    if ws == 0 {
        return Err(bad());
    }
    let m_start = value.start as usize + digits + ws;
    let method = Method::from_buf(buf, m_start..value.end as usize).ok_or_else(bad)?;
    Ok(CSeq { seq, method })
}

/// The branch of the first value of a Via header, without allocating: the one Via fact the
/// admission path needs. Returns the span relative to `v`.
fn top_via_branch(v: &[u8]) -> std::result::Result<Option<Span>, ()> {
    // Fast path for the common spelling: `;branch=` in the first value, no quote or comma
    // before it. Anything unusual falls through to the general parameter parser.
    let mut from = 0;
    while let Some(i) = scan::find_any3(&v[from..], b';', b',', b'"').map(|i| i + from) {
        if v[i] != b';' {
            break;
        }
        if v[i + 1..].starts_with(b"branch=") {
            let start = i + 1 + b"branch=".len();
            let len = scan::token_len(&v[start..]);
            let after = v.get(start + len).copied();
            if len > 0 && matches!(after, None | Some(b';' | b',' | b' ' | b'\t' | b'\r')) {
                return Ok(Some(Span::new(start, start + len)));
            }
            break;
        }
        from = i + 1;
    }
    let first_end = scan::find_unquoted(v, b',')?.unwrap_or(v.len());
    let first = &v[..first_end];
    let Some(semi) = memchr::memchr(b';', first) else {
        return Ok(None);
    };
    for p in scan::params(&first[semi..]) {
        let p = p?;
        if p.name.eq_ignore_ascii_case(b"branch") {
            let Some(value) = p.value else {
                return Err(());
            };
            let start = value.as_ptr() as usize - v.as_ptr() as usize;
            return Ok(Some(Span::new(start, start + value.len())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &str = "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds, SIP/2.0/UDP other;branch=z9hG4bKx\r\n\
Max-Forwards: 70\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
CSeq: 314159 INVITE\r\n\
Contact: <sip:alice@pc33.atlanta.example.com>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";

    #[test]
    fn admission_fields_come_from_one_scan() {
        let m = Message::parse(Bytes::from_static(INVITE.as_bytes())).unwrap();
        assert_eq!(m.method(), Some(&Method::Invite));
        assert_eq!(
            m.request_uri_raw(),
            Some(&b"sip:bob@biloxi.example.com"[..])
        );
        assert_eq!(m.top_via_branch(), Some(&b"z9hG4bK776asdhds"[..]));
        assert_eq!(
            m.call_id(),
            Some(&b"a84b4c76e66710@pc33.atlanta.example.com"[..])
        );
        assert_eq!(
            m.cseq(),
            Some(&CSeq {
                seq: 314_159,
                method: Method::Invite
            })
        );
        assert_eq!(m.max_forwards(), Some(70));
        assert_eq!(m.content_length(), Some(4));
        assert_eq!(m.body(), b"v=0\n");
        assert_eq!(m.header_count(), 9);
    }

    #[test]
    fn sip_version_tests_match_eq_ignore_ascii_case() {
        for at in 0..7 {
            for byte in 0..=255u8 {
                let mut v = *b"SIP/2.0";
                v[at] = byte;
                assert_eq!(is_sip_2_0(&v), v.eq_ignore_ascii_case(b"SIP/2.0"), "{v:?}");
                assert_eq!(starts_with_sip(&v), v[..4].eq_ignore_ascii_case(b"SIP/"));
            }
        }
        assert!(!starts_with_sip(b"SIP"));
        assert!(!is_sip_2_0(b"sip/2.00"));
        assert!(is_sip_2_0(b"sIp/2.0"));
    }

    #[test]
    fn list_values_span_lines_and_commas() {
        let m = Message::parse(Bytes::from_static(INVITE.as_bytes())).unwrap();
        let vias: Vec<_> = m
            .header_values(HeaderName::Via)
            .map(Result::unwrap)
            .collect();
        assert_eq!(vias.len(), 2);
        assert_eq!(vias[1], b"SIP/2.0/UDP other;branch=z9hG4bKx");
    }

    #[test]
    fn folded_lines_join_one_value() {
        let raw = "OPTIONS sip:x SIP/2.0\r\nSubject: a\r\n  b\r\nv: SIP/2.0/UDP h\r\n\t;branch=z9hG4bKf\r\n\r\n";
        let m = Message::parse(Bytes::from(raw)).unwrap();
        assert_eq!(m.header(HeaderName::Subject), Some(&b"a\r\n  b"[..]));
        assert_eq!(m.top_via_branch(), Some(&b"z9hG4bKf"[..]));
    }

    #[test]
    fn responses_parse_status_and_reason() {
        let raw = "SIP/2.0 503 Service Unavailable\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        let m = Message::parse(Bytes::from(raw)).unwrap();
        assert_eq!(m.status(), Some(503));
        assert_eq!(m.reason(), Some(&b"Service Unavailable"[..]));
    }

    #[test]
    fn errors_name_what_and_where() {
        let raw = "INVITE sip:x SIP/2.0\r\nCSeq: x INVITE\r\n\r\n";
        let e = Message::parse(Bytes::from(raw)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadNumber { header: "CSeq" });
        assert_eq!(e.offset, 28);
        assert_eq!(e.line_col(raw.as_bytes()), (2, 7));

        let e = Message::parse(Bytes::from("INVITE sip:x SIP/2.0\r\nTo: a\r\n")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Truncated);

        let e = Message::parse(Bytes::from("INVITE sip:x SIP/3.0\r\n\r\n")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnsupportedVersion);
    }

    #[test]
    fn a_colon_at_the_edge_of_the_line_limit_is_a_long_line_not_a_panic() {
        let limits = Limits {
            max_line_length: 30,
            ..Limits::DATAGRAM
        };
        // The colon is the last byte the scan may look at; a space follows it.
        for name_len in 26..=33 {
            let raw = format!(
                "OPTIONS sip:x SIP/2.0\r\n{}: v\r\n\r\n",
                "a".repeat(name_len)
            );
            let result = Message::parse_with(Bytes::from(raw), &limits);
            if name_len + 3 <= 30 {
                assert!(result.is_ok());
            } else {
                assert_eq!(
                    result.unwrap_err().kind,
                    ErrorKind::LineTooLong { limit: 30 },
                    "name of {name_len}"
                );
            }
        }
    }

    #[test]
    fn a_line_limit_of_usize_max_means_no_limit() {
        let limits = Limits {
            max_line_length: usize::MAX,
            ..Limits::DATAGRAM
        };
        let m = Message::parse_with(Bytes::from_static(INVITE.as_bytes()), &limits).unwrap();
        assert_eq!(m.header_count(), 9);
    }

    #[test]
    fn limits_are_enforced() {
        let limits = Limits {
            max_message_size: 100,
            max_headers: 2,
            max_line_length: 30,
        };
        let many = "OPTIONS sip:x SIP/2.0\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n";
        let e = Message::parse_with(Bytes::from(many), &limits).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooManyHeaders { limit: 2 });
        let long = format!(
            "OPTIONS sip:x SIP/2.0\r\nSubject: {}\r\n\r\n",
            "x".repeat(40)
        );
        let e = Message::parse_with(Bytes::from(long), &limits).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LineTooLong { limit: 30 });
        let e = Message::parse_with(Bytes::from(vec![b'a'; 101]), &limits).unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::MessageTooLarge { size: 101, .. }
        ));
    }

    #[test]
    fn body_shorter_than_content_length_is_rejected_and_extra_bytes_ignored() {
        let short = "OPTIONS sip:x SIP/2.0\r\nContent-Length: 10\r\n\r\nabc";
        let e = Message::parse(Bytes::from(short)).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::BodyTooShort {
                declared: 10,
                available: 3
            }
        );
        let long = "OPTIONS sip:x SIP/2.0\r\nl: 2\r\n\r\nabcdef";
        let m = Message::parse(Bytes::from(long)).unwrap();
        assert_eq!(m.body(), b"ab");
    }

    #[test]
    fn conflicting_content_length_is_rejected() {
        let raw = "OPTIONS sip:x SIP/2.0\r\nContent-Length: 0\r\nl: 3\r\n\r\nabc";
        let e = Message::parse(Bytes::from(raw)).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::ConflictingHeader {
                header: "Content-Length"
            }
        );
    }
}
