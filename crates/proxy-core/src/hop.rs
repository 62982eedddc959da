//! Hop-by-hop overload control (RFC 7339 wire format, RFC 7415 `rate`, the window
//! extension), sans-IO: the core calls in at its receive stage, queue, processor, timers
//! and output, and this module drives `sluice_control`'s overload client and server.
//!
//! * `role = "re"`: the proxy computes feedback for its configured upstream `neighbours`
//!   with one of Shen et al.'s generators (`[control]`, e.g. `algorithm = "rate-abs"`),
//!   fed from the receive stage (`on_arrival`), the queue (`on_queue`) and
//!   the processor (`on_processed`). Every response leaving for a configured neighbour
//!   whose top Via carries `oc` (the neighbour declared support) gets `oc`, `oc-algo`,
//!   `oc-validity` and `oc-seq` on that Via: relayed responses and the proxy's own 100 and
//!   503s where they are made (the request's neighbour and offer come with it from the
//!   receive stage), and retransmissions, restamped at the output. Requests and
//!   responses to anyone else carry nothing and give nothing (counted).
//! * `role = "se"`: one [`OcClient`] per configured next hop (`next_hops`, default the
//!   proxy's `next_hop`). Every out-of-dialog request bound for it is offered to the client
//!   at the receive stage (a reduced one is answered 503 at the rejection cost); the Via
//!   the proxy pushes declares support (`;oc;oc-algo="…"`); the parameters of the proxy's
//!   own Via in responses from that hop (only from that address) are applied.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sluice_control::overload::{
    is_sos_urn, OcAlgorithm, OcClient, OcClientConfig, OcClientStats, OcResponse, OcSequence,
    OcServer, OcServerConfig, OcServerStats, OcVerdict, RequestMethod, RequestTraits,
    FEED_FORWARD_PARAM, MEMORY_PARAM, WINDOW_ACK_PARAM, WINDOW_IN_FLIGHT_PARAM, WINDOW_SENT_PARAM,
};
use sluice_control::{
    Algorithm, AnyFeedbackGenerator, Completion, ControlConfig, FeedbackGenerator, MessageSummary,
    NeighbourId, QueueOccupancy, ReceiverMetrics, RequestId,
};
use sluice_sip::edit::{self, ResponseEdits};
use sluice_sip::{HeaderName, Message, Method, NameAddr, Oc};
use sluice_time::Time;
use smallvec::SmallVec;

use crate::transmit::Transmit;

/// Which side of hop-by-hop overload control this proxy plays.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum HopRole {
    /// No hop-by-hop control: Via parameters pass untouched.
    #[default]
    None,
    /// Receiving entity: computes feedback for upstream neighbours.
    Re,
    /// Sending entity: enforces feedback from next hops.
    Se,
}

/// `[overload]`: hop-by-hop overload control.
///
/// ```toml
/// [control]
/// algorithm = "rate-abs"       # win-disc | win-cont | win-auto | rate-abs | rate-occ
/// [overload]
/// role = "re"
/// neighbours = ["127.0.0.1:5061", "127.0.0.1:5062"]   # upstream SEs, by IP and port
/// [overload.server]
/// validity_ms = 500
/// ```
///
/// ```toml
/// [overload]
/// role = "se"
/// next_hops = ["127.0.0.1:5080"]   # default: next_hop
/// [overload.client]
/// algorithms = ["rate", "loss"]    # or "sluicerate", "sluicewin": Shen et al.'s enforcement;
///                                  # "sluiceload": the fuzzy window (algorithm = "fuzzy")
/// ```
///
/// Interop: Kamailio 5.6's Via parser splits a quoted `oc-algo="loss,rate"` at the comma and
/// drops the request ("bad header field"), though RFC 7339 §5.1 allows the list. In front of
/// such a next hop, offer one algorithm (`algorithms = ["loss"]`);
/// `crates/proxy/tests/oc_interop.rs` checks Kamailio and tshark read what sluice sends.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OverloadConfig {
    pub role: HopRole,
    /// RE: the upstream neighbours feedback is computed for; the position is the
    /// neighbour's id. Anyone else gets no feedback. The algorithm is the proxy's
    /// `[control]`. `host:port` each (host names are resolved at start).
    #[serde(deserialize_with = "crate::host_port::deserialize_vec")]
    pub neighbours: Vec<SocketAddr>,
    /// RE: the RFC 7339 server. An unchanged `supported` list is narrowed to what the
    /// algorithm can express (windows: `sluicewin`; rate-abs: `sluicerate`, `rate`,
    /// `loss`; rate-occ: `loss`, `rate`). `epoch_secs` 0: the shell fills in the wall clock
    /// at start.
    pub server: OcServerConfig,
    /// SE: the next hops whose feedback is enforced; empty: the proxy's `next_hop`.
    /// `host:port` each (host names are resolved at start).
    #[serde(deserialize_with = "crate::host_port::deserialize_vec")]
    pub next_hops: Vec<SocketAddr>,
    /// SE: the RFC 7339 client, one per next hop; its random draws (loss lottery, rate
    /// start, percentage throttle) come from `control.seed`, one stream per next hop.
    pub client: OcClientConfig,
}

impl OverloadConfig {
    /// Checks what serde cannot; `control` is the proxy's algorithm, `retry_after_s` its
    /// 503 Retry-After.
    pub fn validate(&self, control: &ControlConfig, retry_after_s: u32) -> Result<(), String> {
        self.client
            .validate()
            .map_err(|e| format!("overload.client: {e}"))?;
        self.client.fuzzy.validate("overload.client.fuzzy")?;
        if self.role != HopRole::Re && !control.algorithm.is_local() {
            return Err(format!(
                "control algorithm {} computes feedback for upstream neighbours: set \
                 overload.role = \"re\" and overload.neighbours",
                control.algorithm
            ));
        }
        match self.role {
            HopRole::None => Ok(()),
            HopRole::Re => {
                if control.algorithm.is_local() {
                    return Err(format!(
                        "overload role re needs a feedback algorithm (win-disc, win-cont, \
                         win-auto, rate-abs, rate-occ, fuzzy), not {}",
                        control.algorithm
                    ));
                }
                if self.neighbours.is_empty() {
                    return Err("overload role re needs at least one neighbour".into());
                }
                if retry_after_s > 0 {
                    // RFC 7339 §5.10.2: a Retry-After switches a whole client off.
                    return Err("overload role re: set admission.retry_after_s = 0 \
                                (rejections carry no Retry-After)"
                        .into());
                }
                Ok(())
            }
            HopRole::Se => {
                // RFC 7339 §5.10: a request the client reduces is answered with a 503
                // without Retry-After, which would stop the caller's whole traffic.
                if retry_after_s > 0 {
                    return Err("overload role se: set admission.retry_after_s = 0 \
                                (reduced requests are answered 503 without Retry-After)"
                        .into());
                }
                Ok(())
            }
        }
    }

    fn server_config(&self, algorithm: Algorithm) -> OcServerConfig {
        let mut server = self.server.clone();
        if server.supported == OcServerConfig::default().supported {
            server.supported = algorithm.wire_algorithms().to_vec();
        }
        server
    }
}

/// Counters of hop-by-hop control, for `/metrics` and the exit report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HopStats {
    /// RE: requests from configured neighbours.
    pub neighbour_requests: u64,
    /// RE: requests declaring `oc` from senders that are not configured neighbours
    /// (they get no feedback).
    pub unconfigured_requests: u64,
    /// RE: responses to a configured neighbour that got parameters.
    pub responses_stamped: u64,
    /// RE: responses to a configured neighbour without `oc` in their top Via (a
    /// non-participating client: nothing added).
    pub responses_not_participating: u64,
    /// RE: responses to a participating neighbour that got nothing (no common algorithm,
    /// no feedback yet, or feedback that could not be expressed).
    pub responses_without_feedback: u64,
    /// RE: the server's own counters.
    pub server: OcServerStats,
    /// SE: responses carrying `oc` values from an address that is not a configured next
    /// hop (ignored).
    pub feedback_unconfigured: u64,
    /// SE: responses carrying `oc` from a configured next hop's address that answer no
    /// request this proxy sent there (no live client transaction with their branch and
    /// CSeq method towards that address): forged or misrouted, ignored.
    pub feedback_without_transaction: u64,
    /// SE: responses carrying `oc` to a request of this proxy's whose transaction has
    /// ended (2xx retransmissions, say): ignored, feedback counts only on live ones.
    pub feedback_late: u64,
    /// SE: the clients' counters, summed over next hops.
    pub client: OcClientStats,
}

impl HopStats {
    /// SE: parameter sets ignored for any reason (stale, no sequence, unknown algorithm,
    /// out of range, malformed, an `oc-seq` too far ahead, from an unconfigured sender,
    /// answering no request sent, or late).
    pub fn feedback_ignored(&self) -> u64 {
        let c = &self.client;
        c.stale
            + c.missing_seq
            + c.unknown_algorithm
            + c.out_of_range
            + c.malformed
            + c.seq_jump
            + self.feedback_unconfigured
            + self.feedback_without_transaction
            + self.feedback_late
    }
}

/// Who sent the request a response answers, as the proxy's transactions know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SentBy {
    /// A live client transaction of this proxy's, towards this address.
    Live(SocketAddr),
    /// This proxy (its branch, tag checked), but the transaction has ended: a late or
    /// repeated response, such as a 2xx retransmission.
    Ended,
    /// Nothing this proxy sent.
    Nobody,
}

/// What a request from a configured neighbour said about overload control (RFC 7339
/// §5.1): its responses are stamped for that neighbour, with one of the algorithms it
/// offered, if it declared `oc`.
#[derive(Clone, Debug)]
pub(crate) struct Offer {
    neighbour: NeighbourId,
    participating: bool,
    /// The algorithms of its `oc-algo` that sluice knows, in its order of preference.
    algorithms: SmallVec<[OcAlgorithm; 4]>,
}

/// The overload parameters added to a response's top Via.
pub(crate) type StampParams = SmallVec<[(&'static str, String); 5]>;

/// An SE's count of sessions sent starts at wall-clock seconds times this, so that it
/// grows across restarts faster than any SE sends sessions (2^20 a second).
const SESSION_COUNT_PER_EPOCH_SECOND: u64 = 1 << 20;

/// A Via parameter's value as a decimal count; `None` when absent or not one.
fn count_param(via: &sluice_sip::Via<'_>, name: &str) -> Option<u64> {
    std::str::from_utf8(via.param(name)??).ok()?.parse().ok()
}

/// The hop-by-hop control state of one proxy.
pub(crate) struct Hop {
    role: HopRole,
    neighbours: HashMap<SocketAddr, NeighbourId>,
    /// RE: the highest `sluice-wsent` from each neighbour (echoed with its windows; see
    /// [`Hop::note_window_sent`]).
    window_sent: HashMap<NeighbourId, u64>,
    /// RE: echo `window_sent` (`overload.server.window_acks`, for win-disc and win-cont).
    window_acks: bool,
    /// RE: what the latest response to each neighbour carried (algorithm and `oc`
    /// value), by the neighbour's address, for metrics.
    last_sent: BTreeMap<SocketAddr, (OcAlgorithm, u64)>,
    /// RE: each neighbour id's address (the first address configured with that id).
    neighbour_addrs: Vec<SocketAddr>,
    generator: Option<AnyFeedbackGenerator>,
    server: Option<OcServer>,
    /// Ordered, so what several clients release goes out in the same order every run.
    clients: BTreeMap<SocketAddr, OcClient>,
    stats: HopStats,
    scratch: String,
}

/// What the overload policy needs to know about a request.
fn traits_of(msg: &Message) -> RequestTraits {
    let method = match msg.method() {
        Some(Method::Invite) => RequestMethod::Invite,
        Some(Method::Ack) => RequestMethod::Ack,
        Some(Method::Cancel) => RequestMethod::Cancel,
        Some(Method::Bye) => RequestMethod::Bye,
        _ => RequestMethod::Other,
    };
    let in_dialog = msg
        .header(HeaderName::To)
        .and_then(NameAddr::tag_of)
        .is_some();
    let priority = msg.header_by_name("Resource-Priority").is_some()
        || msg.request_uri_raw().is_some_and(is_sos_urn);
    RequestTraits {
        method,
        in_dialog,
        priority,
    }
}

fn sum_client_stats(total: &mut OcClientStats, s: &OcClientStats) {
    total.applied += s.applied;
    total.stopped += s.stopped;
    total.expired += s.expired;
    total.stale += s.stale;
    total.missing_seq += s.missing_seq;
    total.seq_jump += s.seq_jump;
    total.unknown_algorithm += s.unknown_algorithm;
    total.out_of_range += s.out_of_range;
    total.malformed += s.malformed;
    total.offered += s.offered;
    total.forwarded += s.forwarded;
    total.rejected_normal += s.rejected_normal;
    total.rejected_priority += s.rejected_priority;
    total.exempt += s.exempt;
    total.window_probes += s.window_probes;
    total.held += s.held;
    total.released += s.released;
    total.hold_overflow += s.hold_overflow;
}

impl Hop {
    pub(crate) fn new(
        config: &OverloadConfig,
        control: &ControlConfig,
        next_hop: Option<SocketAddr>,
        queue_capacity: usize,
        now: Time,
    ) -> Hop {
        let mut hop = Hop {
            role: config.role,
            neighbours: HashMap::new(),
            window_sent: HashMap::new(),
            // win-auto's window counts the sessions the RE is processing, not a budget
            // with room for the link: counted in flight, it starved SEs 36 ms away at 0.74x
            // (0.21 of capacity where no control carried 0.74). Its SEs keep the paper's.
            window_acks: config.server.window_acks
                && matches!(control.algorithm, Algorithm::WinDisc | Algorithm::WinCont),
            last_sent: BTreeMap::new(),
            neighbour_addrs: config.neighbours.clone(),
            generator: None,
            server: None,
            clients: BTreeMap::new(),
            stats: HopStats::default(),
            scratch: String::new(),
        };
        match config.role {
            HopRole::None => {}
            HopRole::Re => {
                for (i, n) in config.neighbours.iter().enumerate() {
                    let id = NeighbourId(u32::try_from(i).unwrap_or(u32::MAX));
                    hop.neighbours.entry(*n).or_insert(id);
                }
                hop.generator = Some(control.build_feedback_generator(now, Some(queue_capacity)));
                hop.server = Some(OcServer::new(config.server_config(control.algorithm)));
            }
            HopRole::Se => {
                let hops = if config.next_hops.is_empty() {
                    next_hop.into_iter().collect()
                } else {
                    config.next_hops.clone()
                };
                for (i, h) in hops.into_iter().enumerate() {
                    // Stream 0 is the feedback generator's.
                    let stream = i as u64 + 1;
                    let client = OcClient::new(config.client.clone(), control.seed, stream, now)
                        .with_session_count_base(
                            config
                                .server
                                .epoch_secs
                                .saturating_mul(SESSION_COUNT_PER_EPOCH_SECOND),
                        );
                    hop.clients.entry(h).or_insert(client);
                }
            }
        }
        hop
    }

    pub(crate) fn is_se(&self) -> bool {
        self.role == HopRole::Se
    }

    /// Receive stage, for every parsed message: RE bookkeeping (the message's source for
    /// the generator, arrivals and feed-forward per neighbour), SE feedback from a next
    /// hop's response to a request this proxy sent it (`sent_by` says which of this
    /// proxy's transactions, if any, a response answers). Returns the
    /// summary with its source filled in and, for a request from a configured neighbour,
    /// what its responses are stamped for.
    pub(crate) fn on_arrival(
        &mut self,
        now: Time,
        msg: &Message,
        from: SocketAddr,
        mut summary: MessageSummary,
        sent_by: impl Fn(&Message) -> SentBy,
    ) -> (MessageSummary, Option<Offer>) {
        let mut offer = None;
        match self.role {
            HopRole::None => {}
            HopRole::Re => {
                let mut in_flight = None;
                let source = self.neighbours.get(&from).copied();
                summary.source = source;
                if msg.is_request() {
                    let via = msg.top_via().ok();
                    match source {
                        Some(n) => {
                            self.stats.neighbour_requests += 1;
                            let participating =
                                via.as_ref().is_some_and(|v| matches!(v.oc(), Ok(Some(_))));
                            offer = Some(Offer {
                                neighbour: n,
                                participating,
                                algorithms: via
                                    .as_ref()
                                    .filter(|_| participating)
                                    .map(|v| {
                                        v.oc_algo_tokens()
                                            .filter_map(OcAlgorithm::from_token_bytes)
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                            });
                            let mut fresh = true;
                            if let Some(sent) =
                                via.as_ref().and_then(|v| count_param(v, WINDOW_SENT_PARAM))
                            {
                                fresh = self.note_window_sent(n, sent);
                            }
                            in_flight = via
                                .as_ref()
                                .filter(|_| fresh)
                                .and_then(|v| count_param(v, WINDOW_IN_FLIGHT_PARAM))
                                .map(|f| (n, f));
                            let ff = via
                                .as_ref()
                                .and_then(|v| v.param(FEED_FORWARD_PARAM))
                                .map(Option::unwrap_or_default);
                            let traits = traits_of(msg);
                            if let (Some(server), Some(generator)) =
                                (self.server.as_mut(), self.generator.as_mut())
                            {
                                if let Some(ff) = server.on_request(now, n, &traits, ff) {
                                    generator.on_feed_forward(now, n, ff);
                                }
                            }
                        }
                        None => {
                            if via.is_some_and(|v| v.param("oc").is_some()) {
                                self.stats.unconfigured_requests += 1;
                            }
                        }
                    }
                }
                if let Some(g) = self.generator.as_mut() {
                    g.on_arrival(now, &summary);
                    // After the arrival, which makes a new neighbour an active source.
                    if let Some((n, sessions)) = in_flight {
                        g.on_in_flight(now, n, sessions as f64);
                    }
                }
            }
            HopRole::Se => {
                if !msg.is_request() {
                    self.on_next_hop_response(now, msg, from, sent_by);
                }
            }
        }
        (summary, offer)
    }

    fn on_next_hop_response(
        &mut self,
        now: Time,
        msg: &Message,
        from: SocketAddr,
        sent_by: impl Fn(&Message) -> SentBy,
    ) {
        let Ok(via) = msg.top_via() else {
            return;
        };
        if via.param("oc").is_none() {
            return;
        }
        let Some(client) = self.clients.get_mut(&from) else {
            if matches!(via.oc(), Ok(Some(Oc::Value(_))) | Err(_)) {
                self.stats.feedback_unconfigured += 1;
            }
            return;
        };
        // The source address of a datagram is easily forged: feedback counts only on a
        // response to a request in flight to that very next hop, whose branch (keyed, see
        // `ProxyCore`) an off-path sender cannot guess.
        match sent_by(msg) {
            SentBy::Live(to) if to == from => {}
            // Feedback is read on live transactions only; a late copy is no forgery.
            SentBy::Ended => {
                self.stats.feedback_late += 1;
                return;
            }
            _ => {
                self.stats.feedback_without_transaction += 1;
                return;
            }
        }
        let algorithm = via
            .oc_algo_tokens()
            .next()
            .and_then(|t| std::str::from_utf8(t).ok());
        let (Ok(oc), Ok(validity), Ok(seq)) = (via.oc(), via.oc_validity(), via.oc_seq()) else {
            client.on_malformed();
            return;
        };
        let response = OcResponse {
            oc: match oc {
                Some(Oc::Value(v)) => Some(u64::from(v)),
                _ => None,
            },
            algorithm,
            validity_ms: validity.map(u64::from),
            seq: seq.map(|s| OcSequence {
                integer: s.integer,
                micros: s.micros,
            }),
            window_ack: count_param(&via, WINDOW_ACK_PARAM),
            memory: count_param(&via, MEMORY_PARAM),
        };
        client.on_response(now, &response);
    }

    /// SE, receive stage: what the client of `dest` says about a request bound for it.
    pub(crate) fn reduce(&mut self, now: Time, msg: &Message, dest: SocketAddr) -> OcVerdict {
        let Some(client) = self.clients.get_mut(&dest) else {
            return OcVerdict::Forward;
        };
        client.admit(now, &traits_of(msg))
    }

    /// SE in keep mode: a held session a client lets go, with its next hop.
    pub(crate) fn poll_release(&mut self) -> Option<(SocketAddr, RequestId)> {
        self.clients
            .iter_mut()
            .find_map(|(hop, c)| c.poll_release().map(|id| (*hop, id)))
    }

    /// SE: the parameters declaring support, appended to the Via pushed on a request
    /// forwarded to `dest`.
    pub(crate) fn append_via(&mut self, now: Time, dest: SocketAddr, via: &mut Vec<u8>) {
        let Some(client) = self.clients.get_mut(&dest) else {
            return;
        };
        self.scratch.clear();
        client.append_request_params(now, &mut self.scratch);
        via.extend_from_slice(self.scratch.as_bytes());
    }

    pub(crate) fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        if let Some(g) = self.generator.as_mut() {
            g.on_queue(now, queue);
        }
    }

    /// RE: whether a feedback generator runs, the one reader of [`Self::on_memory`].
    pub(crate) fn runs_generator(&self) -> bool {
        self.generator.is_some()
    }

    /// RE: the proxy's memory occupancy (see `ProxyCore::memory_occupancy`).
    pub(crate) fn on_memory(&mut self, now: Time, occupancy: f64) {
        if let Some(g) = self.generator.as_mut() {
            g.on_memory(now, occupancy);
        }
    }

    /// SE: each next hop's control in force, its algorithm and value.
    pub(crate) fn client_controls(
        &self,
    ) -> impl Iterator<Item = (SocketAddr, Option<(OcAlgorithm, i64)>)> + '_ {
        self.clients
            .iter()
            .map(|(addr, c)| (*addr, c.active().zip(c.value())))
    }

    /// SE: a session-starting INVITE went to `dest`; whether `dest` is a configured next
    /// hop, whose client then counts it in transit until
    /// [`session_answered`](Self::session_answered).
    pub(crate) fn session_sent(&mut self, dest: SocketAddr) -> bool {
        self.clients
            .get_mut(&dest)
            .map(OcClient::on_session_sent)
            .is_some()
    }

    /// SE: the first response to an INVITE counted by `session_sent`, or its end.
    pub(crate) fn session_answered(&mut self, dest: SocketAddr) {
        if let Some(c) = self.clients.get_mut(&dest) {
            c.on_session_answered();
        }
    }

    pub(crate) fn on_processed(&mut self, now: Time, completion: &Completion) {
        if let Some(g) = self.generator.as_mut() {
            g.on_processed(now, completion);
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Time) {
        if let Some(g) = self.generator.as_mut() {
            if g.poll_timeout().is_some_and(|t| t <= now) {
                g.handle_timeout(now);
            }
        }
        for c in self.clients.values_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        let g = self
            .generator
            .as_ref()
            .and_then(FeedbackGenerator::poll_timeout);
        self.clients
            .values()
            .filter_map(OcClient::poll_timeout)
            .chain(g)
            .min()
    }

    /// RE: the parameters for a response to a request that came with `offer` (RFC 7339
    /// §5.2): for a participating neighbour, what its algorithm says now, with a fresh
    /// `oc-seq`; nothing for anyone else. Called where the response is made, so it costs
    /// no second parse of the response.
    pub(crate) fn stamp(&mut self, now: Time, offer: &Offer) -> Option<StampParams> {
        if !offer.participating {
            self.stats.responses_not_participating += 1;
            return None;
        }
        let (Some(server), Some(generator)) = (self.server.as_mut(), self.generator.as_mut())
        else {
            return None;
        };
        let offered: SmallVec<[&str; 4]> = offer.algorithms.iter().map(|a| a.token()).collect();
        let feedback = generator.feedback_for(now, offer.neighbour);
        let Some(params) = server.response_params(now, offer.neighbour, &offered, feedback) else {
            self.stats.responses_without_feedback += 1;
            return None;
        };
        self.stats.responses_stamped += 1;
        if let Some(addr) = self.neighbour_addrs.get(offer.neighbour.0 as usize) {
            self.last_sent.insert(*addr, (params.algorithm, params.oc));
        }
        let mut pairs: StampParams = params
            .pairs()
            .into_iter()
            .chain(params.extra_pair())
            .collect();
        if params.algorithm == OcAlgorithm::SluiceWindow && self.window_acks {
            if let Some(sent) = self.window_sent.get(&offer.neighbour) {
                pairs.push((WINDOW_ACK_PARAM, sent.to_string()));
            }
        }
        Some(pairs)
    }

    /// RE: keeps the highest count of sessions `n` has sent (`sluice-wsent`), which the
    /// windows echo, and says whether this request's count is fresh (not below it). A
    /// transaction's retransmission repeats its first copy's bytes, so it carries the count
    /// (and the sessions in flight) of when it was first sent; echoed as the latest, that
    /// older count told the SE that every session sent since was still on the link, and
    /// its window shut: over links losing 2 % a hop, windows held one SE offering 0.8 of
    /// capacity to 0.68 (0.75 without control). The highest count is safe across an SE's
    /// restart, because its count starts from the wall clock
    /// ([`SESSION_COUNT_PER_EPOCH_SECOND`]); an echo above its count is one the SE ignores.
    fn note_window_sent(&mut self, n: NeighbourId, sent: u64) -> bool {
        let kept = self.window_sent.entry(n).or_insert(sent);
        let fresh = sent >= *kept;
        if fresh {
            *kept = sent;
        }
        fresh
    }

    /// RE, output: a copy of an earlier response (a transaction's retransmission, a relayed
    /// 2xx retransmission) bound for a configured neighbour gets fresh parameters, as the
    /// original got them where it was made: an old `oc-seq` would be ignored as stale.
    pub(crate) fn restamp(&mut self, now: Time, mut t: Transmit) -> Transmit {
        if self.role != HopRole::Re || !t.retransmission || !t.payload.starts_with(b"SIP/2.0 ") {
            return t;
        }
        let Some(&n) = self.neighbours.get(&t.to) else {
            return t;
        };
        if let Some(stamped) = self.restamped(now, n, &t.payload) {
            t.payload = stamped;
        }
        t
    }

    fn restamped(&mut self, now: Time, n: NeighbourId, payload: &Bytes) -> Option<Bytes> {
        let msg = Message::parse(payload.clone()).ok()?;
        let via = msg.top_via().ok()?;
        let offer = Offer {
            neighbour: n,
            participating: matches!(via.oc(), Ok(Some(_))),
            algorithms: via
                .oc_algo_tokens()
                .filter_map(OcAlgorithm::from_token_bytes)
                .collect(),
        };
        let pairs = self.stamp(now, &offer)?;
        let edits: SmallVec<[(&str, Option<&str>); 5]> =
            pairs.iter().map(|(k, v)| (*k, Some(v.as_str()))).collect();
        Some(edit::forward_response(
            &msg,
            &ResponseEdits {
                pop_via: false,
                top_via_params: &edits,
            },
        ))
    }

    /// RE: the feedback the latest response to each neighbour carried.
    pub(crate) fn feedback_sent(
        &self,
    ) -> impl Iterator<Item = (SocketAddr, OcAlgorithm, u64)> + '_ {
        self.last_sent.iter().map(|(a, (alg, v))| (*a, *alg, *v))
    }

    /// RE: the feedback generator's estimates.
    pub(crate) fn feedback_metrics(&self) -> Option<ReceiverMetrics> {
        self.generator.as_ref().map(FeedbackGenerator::metrics)
    }

    pub(crate) fn stats(&self) -> HopStats {
        let mut s = self.stats;
        if let Some(server) = &self.server {
            s.server = server.stats();
        }
        let mut total = OcClientStats::default();
        for c in self.clients.values() {
            sum_client_stats(&mut total, &c.stats());
        }
        s.client = total;
        s
    }
}
