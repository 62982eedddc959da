//! Hop-by-hop overload control in the standard wire format: RFC 7339 (SIP overload
//! control, default `loss` algorithm) and RFC 7415 (`rate`), with the paper's window
//! feedback carried as a documented extension algorithm.
//!
//! Wire-independent: the driver parses the Via parameters with the codec and hands the
//! values in; this module hands values (and the parameter text to append) back out. It
//! never sees a message.
//!
//! # Names on the wire
//! - `oc-algo` tokens: `loss` (RFC 7339 §7), `rate` (RFC 7415), and two extensions for
//!   Shen et al.'s feedback as the paper enforces it (§2.4.2):
//!   [`OcAlgorithm::SluiceWindow`], token `sluicewin`: `oc` carries the window, the number
//!   of new sessions the client may still send (§2.4.1);
//!   [`OcAlgorithm::SluiceRate`], token `sluicerate`: `oc` carries the absolute session
//!   rate the client may send, in thousandths of a session per second (RFC 7339's `oc`
//!   is an integer, and a per-client share of a few dozen sessions per second needs the
//!   fraction), enforced by the paper's percentage throttle against the client's own
//!   offered rate, or by a token bucket, leaky bucket or call gapping
//!   ([`OcClientConfig::rate_throttle`]). RFC 7339's grammar allows only letters and
//!   digits in an algorithm token, hence no hyphen.
//!   [`OcAlgorithm::SluiceLoad`], token `sluiceload`: the server's own occupancy for the
//!   fuzzy window (Montazerolghaem & Yaghmaee 2014, [`crate::fuzzy`]): `oc` carries its
//!   CPU occupancy and [`MEMORY_PARAM`] (`sluice-mem`) its memory occupancy, both in
//!   thousandths; the client sets its window of INVITEs in transit from them.
//! - [`FEED_FORWARD_PARAM`] (`sluice-ff`): an extension Via parameter on requests with the
//!   client's offered session rate before throttling, in sessions per second (the
//!   double-feed architecture, Shen et al. §6.1.2). Servers that do not know it ignore it
//!   like any unknown Via parameter.
//! - [`WINDOW_SENT_PARAM`] (`sluice-wsent`, requests) and [`WINDOW_ACK_PARAM`]
//!   (`sluice-wack`, responses): the window's in-flight accounting. A client offering
//!   `sluicewin` numbers the new sessions it has sent and writes the count on every
//!   request; the server echoes, beside each window, the highest count it has received
//!   from that client (a transaction's retransmission repeats an older count). The window
//!   counts only sessions the server has received, so the client takes off the ones sent
//!   since the echoed count: those are on the link.
//!   Without it every window is spent again by the sessions in flight, and over a link of
//!   15 ms a single client at 9x overran a server's 78 ms queue (goodput 0.42 of capacity
//!   in the simulator). Peers that do not know the parameters ignore them, and a client
//!   that gets no echo uses the window as it is. Once echoed, the client also writes how
//!   many it has in flight ([`WINDOW_IN_FLIGHT_PARAM`], `sluice-wflight`): a server that
//!   holds its delay budget to what its queue can hold adds them back to that client's
//!   window, since the link holds them, not the queue.
//!
//! # Driving the client (SE side, one [`OcClient`] per configured next hop)
//! 1. Classify every request bound for that hop into [`RequestTraits`], then
//!    `client.admit(now, &traits)`: [`OcVerdict::Forward`] → send it; `Reject` → answer
//!    the caller with a 503 instead of sending it (the request is "reduced", RFC 7339 §5);
//!    `Hold(id)` (a sluice extension in keep mode) → keep it under `id` and send it when
//!    `client.poll_release()` returns that id (drain it after every call into the client).
//! 2. In the Via this proxy pushes on a forwarded request, append
//!    `client.append_request_params(now, &mut via)` (`;oc;oc-algo="…"` and, with double
//!    feed, `;sluice-ff=…`; offering windows, `;sluice-wsent=…`).
//! 3. For every response from that hop, read the top Via (this proxy's own, before
//!    popping it) into an [`OcResponse`] and call `client.on_response(now, &response)`;
//!    if a parameter did not parse, call `client.on_malformed()` instead.
//! 4. Wake at `client.poll_timeout()` and call `client.handle_timeout(now)` (validity
//!    expiry, RFC 7339 §5.5, and held sessions coming due).
//!
//! # Driving the server (RE side, one [`OcServer`] for all configured upstream neighbours)
//! 0. Set [`OcServerConfig::epoch_secs`] to the wall-clock UNIX seconds at the driver's
//!    time origin, so `oc-seq` keeps increasing across restarts; list in
//!    [`OcServerConfig::supported`] what the configured algorithm can express (window
//!    algorithms: `sluicewin`; rate-abs: `rate`, `loss`; rate-occ: `loss`, and `rate`
//!    for clients that feed forward).
//! 1. For each request from configured neighbour `n`:
//!    `server.on_request(now, n, &traits, via.param("sluice-ff"))`; pass a returned
//!    [`FeedForward`](crate::FeedForward) on to the feedback generator.
//! 2. For each response sent to `n` (generated or relayed, including the first non-100
//!    after a 100 Trying), look at the top Via it will carry: if it has `oc`, call
//!    `server.response_params(now, n, &offered_algorithms, generator.feedback_for(now, n))`
//!    and put the returned [`OcParams`] on that Via: `OcParams::pairs()` for the codec's
//!    `ResponseEdits::top_via_params` (relayed responses) or
//!    `ResponseBuilder::top_via_params` (generated ones); both replace the client's
//!    valueless `oc` and its `oc-algo` list. Without `oc` in that Via nothing is added
//!    (RFC 7339 §5.2: only clients that declared support get the parameters).
//! 3. Requests the RE refuses are answered 503 without Retry-After, whether or not the
//!    client takes part: a Retry-After would switch all of that client's traffic off
//!    for the whole period instead of shedding the surplus.
//!
//! # Filling the inputs from the codec (`sluice_sip::Via`)
//! - [`OcResponse`]: `oc` from `via.oc()` (`Ok(Some(Oc::Value(v)))` → `Some(v.into())`;
//!   `Oc::Supported` or absent → `None`), `algorithm` from the first `via.oc_algo()`
//!   entry, `validity_ms` from `via.oc_validity()`, `seq` from `via.oc_seq()` as
//!   `OcSequence { integer, micros }` (both count the fraction in millionths). Any
//!   `Err(BadParam)` → `client.on_malformed()` instead of `on_response`.
//! - The server's `offered` list: `via.oc_algo()` of a Via whose `via.oc()` is
//!   `Ok(Some(_))`.
//! - [`RequestTraits`]: the method, whether To has a tag, and whether Resource-Priority
//!   is present or [`is_sos_urn`] holds for the Request-URI.
//!
//! All randomness comes from seeded ChaCha8 streams; equal inputs give equal outputs.

mod classify;
mod client;
mod loss;
mod offered;
mod rate;
mod sequence;
mod server;

pub use classify::{is_sos_urn, Reduction, RequestMethod, RequestTraits};
pub use client::{OcClient, OcClientConfig, OcClientStats, OcResponse, OcUpdate, OcVerdict};

/// `sluicerate` counts thousandths of a session per second.
pub const SLUICE_RATE_SCALE: f64 = 1000.0;
pub use loss::LossThrottle;
pub use rate::RateBucket;
pub use sequence::OcSequence;
pub use server::{OcParams, OcServer, OcServerConfig, OcServerStats};

/// The Via parameter (requests only) carrying the client's offered session rate.
pub const FEED_FORWARD_PARAM: &str = "sluice-ff";
/// The Via parameter (requests) carrying the new sessions the client has sent so far.
pub const WINDOW_SENT_PARAM: &str = "sluice-wsent";
/// The Via parameter (responses with a window) echoing the highest
/// [`WINDOW_SENT_PARAM`] received from the client (a retransmission carries an older one).
pub const WINDOW_ACK_PARAM: &str = "sluice-wack";
/// The Via parameter (requests) carrying the sessions the client has sent beyond the last
/// [`WINDOW_ACK_PARAM`] it received: those on the link, which a server holding its delay
/// budget to its queue gives back in the window.
pub const WINDOW_IN_FLIGHT_PARAM: &str = "sluice-wflight";
/// The Via parameter (responses with `oc-algo="sluiceload"`) carrying the server's memory
/// occupancy in thousandths, beside its CPU occupancy in `oc`.
pub const MEMORY_PARAM: &str = "sluice-mem";
/// `sluiceload` values count thousandths.
pub const SLUICE_LOAD_SCALE: f64 = 1000.0;

/// An overload control algorithm as named in `oc-algo`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub enum OcAlgorithm {
    /// RFC 7339 §7: `oc` is the percentage of requests to drop.
    #[serde(rename = "loss")]
    Loss,
    /// RFC 7415: `oc` is the maximum request rate, per second.
    #[serde(rename = "rate")]
    Rate,
    /// Extension: `oc` is the window of new sessions (Shen et al. §3.3–3.5).
    #[serde(rename = "sluicewin")]
    SluiceWindow,
    /// Extension: `oc` is the session rate in thousandths per second (Shen et al. §3.6),
    /// enforced as the paper does (§2.4.2).
    #[serde(rename = "sluicerate")]
    SluiceRate,
    /// Extension: `oc` is the server's CPU occupancy and `sluice-mem` its memory occupancy,
    /// in thousandths, for the fuzzy window (Montazerolghaem & Yaghmaee 2014).
    #[serde(rename = "sluiceload")]
    SluiceLoad,
}

impl OcAlgorithm {
    pub const ALL: [OcAlgorithm; 5] = [
        OcAlgorithm::Loss,
        OcAlgorithm::Rate,
        OcAlgorithm::SluiceWindow,
        OcAlgorithm::SluiceRate,
        OcAlgorithm::SluiceLoad,
    ];

    pub fn token(self) -> &'static str {
        match self {
            OcAlgorithm::Loss => "loss",
            OcAlgorithm::Rate => "rate",
            OcAlgorithm::SluiceWindow => "sluicewin",
            OcAlgorithm::SluiceRate => "sluicerate",
            OcAlgorithm::SluiceLoad => "sluiceload",
        }
    }

    /// True for the extensions that carry Shen et al.'s feedback to the paper's
    /// enforcement ([`crate::Throttle`]).
    pub fn is_sluice(self) -> bool {
        matches!(self, OcAlgorithm::SluiceWindow | OcAlgorithm::SluiceRate)
    }

    /// As [`OcAlgorithm::from_token`], for a token as it stands in a message.
    pub fn from_token_bytes(token: &[u8]) -> Option<OcAlgorithm> {
        let token = token.trim_ascii();
        OcAlgorithm::ALL
            .into_iter()
            .find(|a| a.token().as_bytes().eq_ignore_ascii_case(token))
    }

    /// Tokens compare case-insensitively; surrounding blanks are ignored.
    pub fn from_token(token: &str) -> Option<OcAlgorithm> {
        let token = token.trim();
        OcAlgorithm::ALL
            .into_iter()
            .find(|a| a.token().eq_ignore_ascii_case(token))
    }
}

/// Parses a `sluice-ff` value: a finite, non-negative decimal rate.
pub fn parse_feed_forward(raw: &[u8]) -> Option<f64> {
    let rate: f64 = std::str::from_utf8(raw).ok()?.trim().parse().ok()?;
    (rate.is_finite() && rate >= 0.0).then_some(rate)
}

#[cfg(test)]
mod tests;
