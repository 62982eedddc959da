//! Proxy edits and response construction, written straight into one output buffer.
//!
//! Headers that are not edited are copied verbatim (name spelling, folding and order kept),
//! so output is byte-exact and deterministic: the same input and edits give the same bytes.

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::{HeaderSpan, Message};
use crate::scan;
use crate::HeaderName;

/// Edits a proxy makes when forwarding a request (RFC 3261 §16.6).
#[derive(Clone, Debug, Default)]
pub struct RequestEdits<'a> {
    /// Replacement Request-URI (step 6, after loose-route processing or retargeting).
    pub request_uri: Option<&'a [u8]>,
    /// The Via value this proxy inserts on top, e.g. `SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK…`.
    pub push_via: Option<&'a [u8]>,
    /// Parameters set on the received top Via before it is pushed down:
    /// `received`/`rport` (RFC 3261 §18.2.1, RFC 3581). An existing parameter is replaced.
    pub top_via_params: &'a [(&'a str, Option<&'a str>)],
    /// Decrement Max-Forwards, adding `Max-Forwards: 70` if absent (§16.6 step 3).
    pub decrement_max_forwards: bool,
    /// A Record-Route value to insert, e.g. `<sip:192.0.2.1;lr>` (§16.6 step 4).
    pub record_route: Option<&'a [u8]>,
    /// Remove the first Route value (loose routing, §16.4 / §16.12).
    pub pop_route: bool,
}

/// Edits a proxy makes when relaying a response (RFC 3261 §16.7 step 3, RFC 7339 §5.2).
#[derive(Clone, Debug, Default)]
pub struct ResponseEdits<'a> {
    /// Remove the topmost Via value (this proxy's own).
    pub pop_via: bool,
    /// Parameters set on the (new) top Via, e.g. RFC 7339 `oc`, `oc-validity`, `oc-seq`.
    pub top_via_params: &'a [(&'a str, Option<&'a str>)],
}

/// Forwards a request with the given edits. Content-Length is added if absent, so the output
/// is valid on stream transports too.
pub fn forward_request(msg: &Message, edits: &RequestEdits<'_>) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.wire().len() + 256);
    match edits.request_uri {
        Some(uri) => {
            let method = msg.method().map_or("", |m| m.as_str());
            put_all(&mut out, &[method.as_bytes(), b" ", uri, b" SIP/2.0\r\n"]);
        }
        None => out.put_slice(msg.start_line_bytes()),
    }
    if let Some(via) = edits.push_via {
        put_header(&mut out, "Via", via);
    }
    if let Some(rr) = edits.record_route {
        put_header(&mut out, "Record-Route", rr);
    }
    let mut max_forwards_seen = false;
    let mut route_popped = !edits.pop_route;
    for (i, h) in msg.headers.iter().enumerate() {
        match h.name {
            HeaderName::Via
                if Some(i) == msg.top_via_index() && !edits.top_via_params.is_empty() =>
            {
                rewrite_top_via(&mut out, msg, h, edits.top_via_params);
            }
            HeaderName::MaxForwards if edits.decrement_max_forwards => {
                if !max_forwards_seen {
                    let n = msg.max_forwards().unwrap_or(70).saturating_sub(1);
                    put_header(
                        &mut out,
                        "Max-Forwards",
                        itoa::Buffer::new().format(n).as_bytes(),
                    );
                }
                max_forwards_seen = true;
            }
            HeaderName::Route if !route_popped => {
                route_popped = true;
                let rest = after_first_value(msg, h);
                if !rest.is_empty() {
                    put_header(&mut out, header_name_as_written(msg, h), rest);
                }
            }
            _ => out.put_slice(&msg.as_bytes()[h.line.range()]),
        }
    }
    if edits.decrement_max_forwards && !max_forwards_seen {
        put_header(&mut out, "Max-Forwards", b"70");
    }
    finish_with_body(&mut out, msg);
    out.freeze()
}

/// Relays a response with the given edits.
pub fn forward_response(msg: &Message, edits: &ResponseEdits<'_>) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.wire().len() + 128);
    out.put_slice(msg.start_line_bytes());
    let top = msg.top_via_index();
    // With the top value popped, the parameters go on the next Via value, which is either the
    // rest of the first Via line or the first value of the next Via line.
    let mut params_pending = !edits.top_via_params.is_empty();
    for (i, h) in msg.headers.iter().enumerate() {
        if h.name == HeaderName::Via && Some(i) == top {
            if edits.pop_via {
                let rest = after_first_value(msg, h);
                if rest.is_empty() {
                    continue;
                }
                if params_pending {
                    params_pending = false;
                    write_via_with_params(&mut out, rest, edits.top_via_params);
                } else {
                    put_header(&mut out, header_name_as_written(msg, h), rest);
                }
            } else if params_pending {
                params_pending = false;
                rewrite_top_via(&mut out, msg, h, edits.top_via_params);
            } else {
                out.put_slice(&msg.as_bytes()[h.line.range()]);
            }
        } else if h.name == HeaderName::Via && params_pending {
            params_pending = false;
            rewrite_top_via(&mut out, msg, h, edits.top_via_params);
        } else {
            out.put_slice(&msg.as_bytes()[h.line.range()]);
        }
    }
    finish_with_body(&mut out, msg);
    out.freeze()
}

/// A response a server or proxy generates itself for `request` (RFC 3261 §8.2.6, §16.7):
/// Via (all values, in order), From, To, Call-ID and CSeq are copied; Timestamp too for 100.
#[derive(Clone, Debug)]
pub struct ResponseBuilder<'a> {
    request: &'a Message,
    status: u16,
    reason: &'a str,
    to_tag: Option<&'a str>,
    retry_after: Option<u32>,
    extra: Vec<(&'a str, &'a [u8])>,
    /// Copy the request's Record-Route values, in order.
    record_route: bool,
    top_via_params: &'a [(&'a str, Option<&'a str>)],
    /// Content-Type and body.
    body: Option<(&'a str, &'a [u8])>,
}

/// Starts a response to `request`. The reason phrase defaults to RFC 3261's for the code.
pub fn response_to(request: &Message, status: u16) -> ResponseBuilder<'_> {
    ResponseBuilder {
        request,
        status,
        reason: default_reason(status),
        to_tag: None,
        retry_after: None,
        extra: Vec::new(),
        record_route: false,
        top_via_params: &[],
        body: None,
    }
}

impl<'a> ResponseBuilder<'a> {
    #[must_use]
    pub fn reason(mut self, reason: &'a str) -> Self {
        self.reason = reason;
        self
    }
    /// Adds `;tag=` to To when the request's To has none (§8.2.6.2; not for 100 Trying).
    #[must_use]
    pub fn to_tag(mut self, tag: &'a str) -> Self {
        self.to_tag = Some(tag);
        self
    }
    /// `Retry-After` in seconds, as a 503 may carry (§21.5.4, RFC 3261 §20.33).
    #[must_use]
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }
    /// Parameters set on the copied top Via, e.g. RFC 7339 `oc`, `oc-algo`, `oc-validity`,
    /// `oc-seq` for a client that declared support; an existing parameter is replaced.
    #[must_use]
    pub fn top_via_params(mut self, params: &'a [(&'a str, Option<&'a str>)]) -> Self {
        self.top_via_params = params;
        self
    }
    /// Copies the request's Record-Route header fields, in order, as a UAS does in a
    /// response that establishes a dialog (RFC 3261 §12.1.1).
    #[must_use]
    pub fn record_route(mut self) -> Self {
        self.record_route = true;
        self
    }
    #[must_use]
    pub fn header(mut self, name: &'a str, value: &'a [u8]) -> Self {
        self.extra.push((name, value));
        self
    }
    /// A body of type `content_type` (a 2xx's session description, RFC 3264).
    #[must_use]
    pub fn body(mut self, content_type: &'a str, body: &'a [u8]) -> Self {
        self.body = Some((content_type, body));
        self
    }

    pub fn build(&self) -> Bytes {
        let req = self.request;
        let mut out = BytesMut::with_capacity(512);
        put_all(
            &mut out,
            &[
                b"SIP/2.0 ",
                itoa::Buffer::new()
                    .format(u32::from(self.status))
                    .as_bytes(),
                b" ",
                self.reason.as_bytes(),
                b"\r\n",
            ],
        );
        let mut params_pending = !self.top_via_params.is_empty();
        for h in req.headers.iter().filter(|h| h.name == HeaderName::Via) {
            if params_pending {
                params_pending = false;
                rewrite_top_via(&mut out, req, h, self.top_via_params);
            } else {
                out.put_slice(&req.as_bytes()[h.line.range()]);
            }
        }
        for name in [
            HeaderName::From,
            HeaderName::To,
            HeaderName::CallId,
            HeaderName::CSeq,
        ] {
            let Some(h) = req.headers.iter().find(|h| h.name == name) else {
                continue;
            };
            if name == HeaderName::To && self.status > 100 {
                if let Some(tag) = self.to_tag.filter(|_| !has_tag(req, h)) {
                    let value = &req.as_bytes()[h.value.range()];
                    put_all(
                        &mut out,
                        &[
                            header_name_as_written(req, h).as_bytes(),
                            b": ",
                            value,
                            b";tag=",
                            tag.as_bytes(),
                            b"\r\n",
                        ],
                    );
                    continue;
                }
            }
            out.put_slice(&req.as_bytes()[h.line.range()]);
        }
        if self.status == 100 {
            // §8.2.6.1: a 100 Trying copies the request's Timestamp.
            if let Some(h) = req.headers.iter().find(|h| h.name == HeaderName::Timestamp) {
                out.put_slice(&req.as_bytes()[h.line.range()]);
            }
        }
        if self.record_route {
            copy_headers(&mut out, req, HeaderName::RecordRoute);
        }
        if let Some(secs) = self.retry_after {
            put_header(
                &mut out,
                "Retry-After",
                itoa::Buffer::new().format(secs).as_bytes(),
            );
        }
        for (name, value) in &self.extra {
            put_header(&mut out, name, value);
        }
        match self.body {
            Some((content_type, body)) if !body.is_empty() => {
                put_header(&mut out, "Content-Type", content_type.as_bytes());
                put_header(
                    &mut out,
                    "Content-Length",
                    itoa::Buffer::new().format(body.len()).as_bytes(),
                );
                out.put_slice(b"\r\n");
                out.put_slice(body);
            }
            _ => out.put_slice(b"Content-Length: 0\r\n\r\n"),
        }
        out.freeze()
    }
}

/// The ACK an INVITE client transaction sends for a 3xx–6xx response (RFC 3261 §17.1.1.3):
/// Request-URI, Call-ID, From, CSeq number and the top Via of the request, To of the
/// response, and the request's Route headers.
pub fn ack_for_non2xx(request: &Message, response: &Message) -> Bytes {
    same_transaction_request("ACK", request, response)
}

/// A CANCEL for a pending request (RFC 3261 §9.1): same Request-URI, Call-ID, To, From,
/// CSeq number, the single top Via, and the request's Route headers.
pub fn cancel_for(request: &Message) -> Bytes {
    same_transaction_request("CANCEL", request, request)
}

/// ACK and CANCEL share the request's transaction identity (top Via, CSeq number) and
/// differ only in the method and in whose To they carry.
fn same_transaction_request(method: &str, request: &Message, to_from: &Message) -> Bytes {
    let mut out = BytesMut::with_capacity(512);
    put_all(
        &mut out,
        &[
            method.as_bytes(),
            b" ",
            request.request_uri_raw().unwrap_or(b"sip:invalid"),
            b" SIP/2.0\r\n",
        ],
    );
    if let Some(Ok(via)) = request.header_values(HeaderName::Via).next() {
        put_header(&mut out, "Via", via);
    }
    copy_headers(&mut out, request, HeaderName::Route);
    put_header(&mut out, "Max-Forwards", b"70");
    copy_first(&mut out, request, HeaderName::From);
    copy_first(&mut out, to_from, HeaderName::To);
    copy_first(&mut out, request, HeaderName::CallId);
    let seq = request.cseq().map_or(0, |c| c.seq);
    put_all(
        &mut out,
        &[
            b"CSeq: ",
            itoa::Buffer::new().format(seq).as_bytes(),
            b" ",
            method.as_bytes(),
            b"\r\n",
        ],
    );
    out.put_slice(b"Content-Length: 0\r\n\r\n");
    out.freeze()
}

/// RFC 3261 §21 reason phrases for the codes a proxy generates.
pub fn default_reason(status: u16) -> &'static str {
    match status {
        100 => "Trying",
        180 => "Ringing",
        183 => "Session Progress",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        416 => "Unsupported URI Scheme",
        420 => "Bad Extension",
        481 => "Call/Transaction Does Not Exist",
        482 => "Loop Detected",
        483 => "Too Many Hops",
        487 => "Request Terminated",
        500 => "Server Internal Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Server Time-out",
        505 => "Version Not Supported",
        513 => "Message Too Large",
        _ => match status / 100 {
            1 => "Progress",
            2 => "OK",
            3 => "Redirect",
            4 => "Client Error",
            5 => "Server Error",
            _ => "Global Failure",
        },
    }
}

// ---- helpers ----

fn put_all(out: &mut BytesMut, parts: &[&[u8]]) {
    for p in parts {
        out.put_slice(p);
    }
}

fn put_header(out: &mut BytesMut, name: &str, value: &[u8]) {
    put_all(out, &[name.as_bytes(), b": ", value, b"\r\n"]);
}

fn copy_first(out: &mut BytesMut, msg: &Message, name: HeaderName) {
    if let Some(h) = msg.headers.iter().find(|h| h.name == name) {
        out.put_slice(&msg.as_bytes()[h.line.range()]);
    }
}

fn copy_headers(out: &mut BytesMut, msg: &Message, name: HeaderName) {
    for h in msg.headers.iter().filter(|h| h.name == name) {
        out.put_slice(&msg.as_bytes()[h.line.range()]);
    }
}

fn header_name_as_written<'m>(msg: &'m Message, h: &HeaderSpan) -> &'m str {
    std::str::from_utf8(&msg.as_bytes()[h.name_span.range()]).unwrap_or(h.name.as_str())
}

fn has_tag(msg: &Message, h: &HeaderSpan) -> bool {
    crate::NameAddr::parse(&msg.as_bytes()[h.value.range()]).is_some_and(|n| n.tag().is_some())
}

/// The header's value after its first comma-separated element (empty if there is only one).
fn after_first_value<'m>(msg: &'m Message, h: &HeaderSpan) -> &'m [u8] {
    let value = &msg.as_bytes()[h.value.range()];
    match scan::find_unquoted(value, b',') {
        Ok(Some(comma)) => scan::trim(&value[comma + 1..]),
        _ => &[],
    }
}

/// Writes the header's first value with parameters set, then its remaining values, if any,
/// as a separate line of the same header (equivalent by RFC 3261 §7.3.1).
fn rewrite_top_via(
    out: &mut BytesMut,
    msg: &Message,
    h: &HeaderSpan,
    params: &[(&str, Option<&str>)],
) {
    write_via_with_params(out, &msg.as_bytes()[h.value.range()], params);
}

/// Writes `Via: <first value of via_value with params set>`, then any remaining values of
/// `via_value` as a separate Via line (equivalent by RFC 3261 §7.3.1).
fn write_via_with_params(out: &mut BytesMut, via_value: &[u8], params: &[(&str, Option<&str>)]) {
    let (first, rest) = match scan::find_unquoted(via_value, b',') {
        Ok(Some(comma)) => (
            scan::trim(&via_value[..comma]),
            scan::trim(&via_value[comma + 1..]),
        ),
        _ => (via_value, &via_value[via_value.len()..]),
    };
    out.put_slice(b"Via: ");
    // Keep every existing parameter except the ones being set, in order, then append the new ones.
    let semi = scan::find_unquoted(first, b';')
        .ok()
        .flatten()
        .unwrap_or(first.len());
    out.put_slice(scan::trim(&first[..semi]));
    for p in scan::params(&first[semi..]).flatten() {
        if params
            .iter()
            .any(|(n, _)| p.name.eq_ignore_ascii_case(n.as_bytes()))
        {
            continue;
        }
        out.put_slice(b";");
        out.put_slice(p.name);
        if let Some(v) = p.value {
            out.put_slice(b"=");
            out.put_slice(v);
        }
    }
    for (name, value) in params {
        out.put_slice(b";");
        out.put_slice(name.as_bytes());
        if let Some(v) = value {
            out.put_slice(b"=");
            out.put_slice(v.as_bytes());
        }
    }
    out.put_slice(b"\r\n");
    if !rest.is_empty() {
        put_header(out, "Via", rest);
    }
}

fn finish_with_body(out: &mut BytesMut, msg: &Message) {
    if msg.content_length().is_none() {
        put_all(
            out,
            &[
                b"Content-Length: ",
                itoa::Buffer::new().format(msg.body().len()).as_bytes(),
                b"\r\n",
            ],
        );
    }
    out.put_slice(b"\r\n");
    out.put_slice(msg.body());
}
