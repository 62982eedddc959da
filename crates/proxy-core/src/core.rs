//! The sans-IO proxy core: receive stage, bounded FIFO, processor (see the crate docs).
//!
//! RFC 3261 §16 over UDP and TCP (§18; what TCP adds is in `tcp.rs`), transaction stateful: every request is received on a server
//! transaction and forwarded on a client transaction of `sluice_txn`; responses come back
//! through the client transaction and go upstream on the server transaction. The ACK for a
//! 2xx and 2xx retransmissions belong to no transaction and are forwarded statelessly
//! (§16.7 step 10 as amended by RFC 6026's intent, §16.11).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use sluice_control::admission::DrainController;
use sluice_control::overload::OcVerdict;
use sluice_control::{
    AdmissionVerdict, AnyLocalAdmission, Completion, LocalAdmission, MessageClass, MessageSummary,
    QueueOccupancy, ReceiverMetrics, RequestId,
};
use sluice_sip::edit::{self, RequestEdits, ResponseEdits};
use sluice_sip::{HeaderName, Host, Limits, Message, Method, NameAddr, Uri};
use sluice_time::Time;
use sluice_txn::{
    ClientTxId, Event, Origin, Peer, Received, ServerTxId, TransactionLayer, Transport, TxId,
};
use smallvec::SmallVec;

use crate::config::ProxyConfig;
use crate::histogram::DelayHistogram;
use crate::hop::{Offer, SentBy};
use crate::invites::{InviteMemory, Sighting};
use crate::limiter::SourceLimiter;
use crate::peers::DialogPeers;
use crate::record::{Processed, Record};
use crate::tcp::{Aliases, ConnectionSplit, Lane, SendQueues, TcpConfig};
use crate::transmit::Transmit;

/// Every branch this proxy writes starts with this, so that a response or stray 2xx can be
/// recognised as having passed through here (the magic cookie of §8.1.1.7 first).
const BRANCH_PREFIX: &str = "z9hG4bKsl";
/// Sources the per-source rate limit keeps a bucket for (about 50 bytes each); beyond,
/// new sources share one.
const MAX_RATE_SOURCES: usize = 65_536;
/// Separates the loop hash's key from the branch tag's.
const LOOP_KEY: u64 = 0x6c6f_6f70_6861_7368;

/// The To tag of the 503s the admission policy's rejections are answered with, statelessly
/// (no transaction), so that the ACK for one can be recognised and ended without a
/// transaction lookup, as Kamailio's `sl` module does with its own tag.
const REJECT_TAG: &str = "sl-rej";

/// Message kinds counted in and out, by request method or response class.
pub const KIND_LABELS: [&str; 12] = [
    "INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "other", "1xx", "2xx", "3xx", "4xx", "5xx", "6xx",
];

/// Counts by [`KIND_LABELS`] index. Unclassifiable bytes count as "other".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts(pub [u64; KIND_LABELS.len()]);

impl KindCounts {
    fn count(&mut self, bytes: &[u8]) {
        self.0[kind_of(bytes)] += 1;
    }
}

/// The kind of a datagram from its first bytes only (no parse), so outgoing messages and
/// unparsable input are classified for free.
fn kind_of(b: &[u8]) -> usize {
    if let Some(rest) = b.strip_prefix(b"SIP/2.0 ") {
        return match rest.first() {
            Some(d @ b'1'..=b'6') => 6 + usize::from(d - b'1'),
            _ => 5,
        };
    }
    let end = b.iter().take(16).position(|&c| c == b' ').unwrap_or(0);
    match &b[..end] {
        b"INVITE" => 0,
        b"ACK" => 1,
        b"BYE" => 2,
        b"CANCEL" => 3,
        b"OPTIONS" => 4,
        _ => 5,
    }
}

/// What the core did, for `/metrics`, `/status` and the exit report. All counters are
/// monotonic except the gauges noted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoreStats {
    pub datagrams_in: u64,
    pub bytes_in: u64,
    pub datagrams_out: u64,
    pub bytes_out: u64,
    pub in_by_kind: KindCounts,
    pub out_by_kind: KindCounts,
    /// Dropped before parsing: larger than `max_datagram`.
    pub oversized: u64,
    /// Dropped at the receive stage: `Message::parse` failed.
    pub malformed: u64,
    /// Requests that failed full validation in the processor (answered 400; ACKs dropped).
    pub invalid: u64,
    /// Entered the FIFO to be processed in full.
    pub admitted: u64,
    /// New sessions the admission policy rejected (503 at the rejection cost).
    pub rejected_policy: u64,
    /// New INVITEs rejected by smart forwarding: their TCP connection to the next hop
    /// still held unsent bytes (Shen and Schulzrinne 2010 §6.2).
    pub rejected_smart_forwarding: u64,
    /// TCP connections whose peers asked, by `alias` in their Via, for connection reuse
    /// (RFC 5923), and got it; open now.
    pub tcp_aliases: usize,
    /// `alias` requests refused: the Via's sent-by host was not the connection's source
    /// address, or the table (`tcp.max_connections` entries) was full.
    pub tcp_aliases_refused: u64,
    /// New sessions rejected because the proxy is shutting down.
    pub rejected_shutdown: u64,
    /// New sessions answered 503 (statelessly, at the receive stage) because the
    /// transaction table held more than 90 % of `max_transactions`: the rest is kept for
    /// in-dialog requests (the BYEs of admitted calls) and responses.
    pub rejected_table_headroom: u64,
    /// Arrivals dropped at a full FIFO (the INVITE queue's included).
    pub dropped_queue_full: u64,
    /// Of `dropped_queue_full`, INVITEs dropped at a full INVITE queue.
    pub dropped_invite_queue_full: u64,
    /// ACKs for the stateless rejection 503s, ended by the processor.
    pub absorbed_reject_acks: u64,
    /// Retransmitted INVITEs of rejected calls, rejected again the same way.
    pub rejected_repeats: u64,
    /// Retransmitted INVITEs dropped at the receive stage because their original still
    /// waits in the INVITE queue (`invite_queue = true`): the copy would only cost the
    /// processor, and the original's 100 Trying stops the retransmissions.
    pub dropped_repeats_waiting: u64,
    /// Initial INVITEs seen again (retransmissions): never taken for new sessions.
    pub repeated_invites: u64,
    /// Of `repeated_invites`, retransmissions of INVITEs already answered 2xx, absorbed at
    /// the receive stage as RFC 6026's Accepted state absorbs them: proxied again, they
    /// would start a second transaction downstream and draw its callee's 1xx back to a
    /// caller that already has its 2xx.
    pub absorbed_invites_after_2xx: u64,
    /// Of `rejected_policy`, INVITEs the draining policy (`pi`) rejected as it took them
    /// from the INVITE queue (they were counted `admitted` on arrival).
    pub rejected_at_drain: u64,
    /// Messages the processor finished.
    pub processed: u64,
    /// Requests forwarded on a client transaction.
    pub forwarded_requests: u64,
    /// Responses relayed upstream on a server transaction.
    pub forwarded_responses: u64,
    /// ACKs for 2xx forwarded statelessly.
    pub forwarded_acks: u64,
    /// 2xx responses that matched no transaction, relayed statelessly.
    pub forwarded_stray_responses: u64,
    /// Stray responses not relayed: not through this proxy, or nowhere to send them.
    pub dropped_stray_responses: u64,
    /// 100 Trying sent for INVITEs.
    pub trying_sent: u64,
    /// 483 Too Many Hops (Max-Forwards 0).
    pub too_many_hops: u64,
    /// 404: no route for the request.
    pub no_route: u64,
    /// Requests answered 503 or 408 when a graceful shutdown's grace period ended.
    pub abandoned_at_shutdown: u64,
    /// Requests dropped because the memory budget was used up (responses still pass).
    pub dropped_memory_budget: u64,
    /// New requests dropped because their source exceeded `new_requests_per_source`.
    pub dropped_rate_limit: u64,
    /// Bytes the transactions and queues hold (what `memory_budget_mb` bounds).
    pub bytes_in_use: usize,
    /// 400: a request whose body is shorter than its Content-Length (RFC 3261 §18.3); also
    /// counted in `malformed`.
    pub bad_content_length: u64,
    /// 403 (an ACK: dropped): the request pointed somewhere that is neither a configured
    /// destination nor a dialog peer (`route_by_request_uri` is off).
    pub forbidden_destinations: u64,
    /// Dialog peers remembered now, and those forgotten early for room.
    pub dialog_peers: usize,
    pub dialog_peers_evicted: u64,
    /// 482 (an ACK: dropped): the route leads back to this proxy, or the request came round
    /// again with a Via of this proxy's and the same routing (RFC 3261 §16.3 step 4).
    pub loops: u64,
    /// 503 because the transaction table was full.
    pub refused_table_full: u64,
    /// 408 sent upstream after a client transaction timed out (§16.9) or Timer C gave up.
    pub timeouts_408: u64,
    /// INVITE branches CANCELled because Timer C fired (§16.8).
    pub timer_c_cancels: u64,
    /// INVITE branches abandoned with 408 after their Timer C CANCEL: 64*T1 after it got
    /// no final response, or at once when the CANCEL could not be delivered (transport
    /// error, ICMP unreachable) or the next hop answered it 481 (it has no such INVITE,
    /// e.g. it restarted): no final response can come then.
    pub timer_c_abandoned: u64,
    /// Gauge: Timer C deadlines queued, those a provisional has since superseded included.
    /// Trimmed to at most twice the larger of the forwarded requests in progress and 1,024.
    pub timer_c_queued: usize,
    /// 500 sent upstream after a transport error towards the next hop: §16.9 makes the
    /// error a 503 from that branch, and §16.7 step 6 answers a lone 503 with 500, since
    /// forwarding it would say this proxy, not one next hop, cannot serve requests.
    pub transport_500: u64,
    /// ICMP errors (host, network, port or protocol unreachable, RFC 3261 §18.4) that the
    /// shell read back for a request of a live client transaction towards that very
    /// address: the transaction ends with a transport error at once, not at Timer B.
    pub unreachable: u64,
    /// ICMP errors ignored: the returned bytes name no live client transaction (branch
    /// and method) towards the address the datagram went to. Forged, late (the
    /// transaction already ended) or about something else this proxy sent.
    pub unreachable_ignored: u64,
    /// CANCELs answered 200 (§16.10).
    pub cancels: u64,
    /// Send failures the shell reported.
    pub send_errors: u64,
    /// Gauge: messages in the FIFO.
    pub queue_len: usize,
    /// Gauge: INVITEs in the INVITE queue (`invite_queue = true`).
    pub invite_queue_len: usize,
    /// Gauge: the most messages the FIFO held at once.
    pub queue_peak: usize,
    /// Gauge: transactions in the table.
    pub transactions: usize,
    /// Gauge: sessions held by the SE's clients in keep mode.
    pub held: usize,
    /// Initial INVITEs taken for new sessions without being remembered, because the
    /// memory of initial INVITEs was full (a retransmission of one may be taken for new).
    pub invite_memory_full: u64,
    /// Gauge: proxied requests still waiting for a final response.
    pub pending_requests: usize,
    /// Gauge: processor busy fraction over the last complete one-second window.
    pub occupancy: f64,
    /// Virtual (emulated) processor busy time so far.
    pub busy_virtual: Duration,
    /// Native processing time so far, as measured by the shell.
    pub busy_native: Duration,
    /// Transaction layer counters (retransmissions absorbed and sent, refusals, timers).
    pub txn: sluice_txn::Stats,
    /// Hop-by-hop overload control (`[overload]`).
    pub hop: crate::hop::HopStats,
    /// Time from a message's arrival to the start of its processing, every message.
    pub queueing_delay: DelayHistogram,
    /// Time from a new INVITE's arrival to the first 2xx relayed for it (post-dial delay
    /// as this proxy sees it: its own queue and everything downstream).
    pub setup_delay: DelayHistogram,
}

impl CoreStats {
    /// Retransmissions that reached the proxy: requests and responses absorbed by their
    /// transactions (stray 2xx retransmissions are in `forwarded_stray_responses`).
    pub fn retransmissions_seen(&self) -> u64 {
        self.txn.absorbed.requests + self.txn.absorbed.responses
    }
    /// Retransmissions the proxy sent (its own timers).
    pub fn retransmissions_sent(&self) -> u64 {
        let r = self.txn.retransmissions;
        r.invite + r.non_invite + r.response + r.ack + r.ok_2xx
    }
}

#[derive(Debug)]
struct Queued {
    msg: Message,
    from: Peer,
    arrived: Time,
    summary: MessageSummary,
    /// The admission stage decided to reject: answer 503 at the rejection cost.
    reject: bool,
    /// A request inside a dialog this proxy record-routed (a To tag, and a Route naming
    /// this proxy), found once at the receive stage. Everything else is a new request.
    in_dialog: bool,
    /// A new request's key in the memory of new requests, to remember a rejection.
    invite_key: Option<u64>,
    /// The driver marked it as a retransmission (see `handle_datagram_marked`).
    retransmission: bool,
    /// SE in keep mode: the next hop's client holds this session until it releases it.
    hold: Option<HoldKey>,
    /// The ACK for one of this proxy's stateless rejections: the processor only counts it.
    absorb: bool,
    /// RE: from a configured neighbour, whose responses carry its overload parameters.
    offer: Option<Offer>,
}

/// A held session: the next hop whose client holds it, and the client's id for it.
type HoldKey = (SocketAddr, RequestId);

/// Where a held session is (keep mode, Shen et al. §2.4.2).
// At most a hold limit of them per next hop: boxing the waiting request would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Held {
    /// Still in the FIFO: the processor has not taken it yet.
    Queued,
    /// Released before the processor took it: forward it when it does.
    Released,
    /// Taken by the processor (its 100 Trying sent), waiting for the release.
    Waiting {
        server: ServerTxId,
        request: Message,
        from: Peer,
        arrived: Time,
    },
}

/// What [`ProxyCore::reload`] did: the keys it applied, and those that need a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub applied: Vec<&'static str>,
    pub needs_restart: Vec<String>,
}

/// A proxied request: the server transaction it arrived on and the client transaction that
/// carries it on.
#[derive(Debug)]
struct Link {
    server: ServerTxId,
    request: Message,
    provisional_seen: bool,
    final_relayed: bool,
    cancel_pending: bool,
    /// Timer C fired (CANCEL sent, or pending until a provisional comes); the branch is
    /// given up 64*T1 later unless a final response ends it first.
    timer_c_fired: bool,
    /// When this branch's Timer C fires: set on forwarding, reset by each provisional
    /// other than 100 (§16.7 step 2). Earlier entries for it in the Timer C queue are
    /// stale.
    timer_c_at: Time,
    /// RE: the upstream neighbour's offer, for the responses relayed to it.
    offer: Option<Offer>,
    /// SE: the next hop whose fuzzy window counts this INVITE in transit, until the first
    /// response to it or the end of its transaction.
    in_transit_to: Option<SocketAddr>,
    /// When the request arrived at this proxy, for the setup delay.
    arrived: Time,
}

/// The admission policy: a configured one (which may drain the INVITE queue) or one
/// plugged in with [`ProxyCore::set_admission`].
enum Policy {
    Built(Box<AnyLocalAdmission>),
    Custom(Box<dyn LocalAdmission + Send>),
}

impl Policy {
    fn get(&mut self) -> &mut dyn LocalAdmission {
        match self {
            Policy::Built(p) => p.as_mut(),
            Policy::Custom(p) => p.as_mut(),
        }
    }
    fn get_ref(&self) -> &dyn LocalAdmission {
        match self {
            Policy::Built(p) => p.as_ref(),
            Policy::Custom(p) => p.as_ref(),
        }
    }
    fn drain_mut(&mut self) -> Option<&mut dyn DrainController> {
        match self {
            Policy::Built(p) => p.drain_mut(),
            Policy::Custom(_) => None,
        }
    }
}

/// An INVITE taken from the INVITE queue whose virtual service has not ended yet.
#[derive(Debug)]
struct InService {
    q: Queued,
    start: Time,
    done: Time,
    cost: Duration,
}

/// RE: the RFC 7339 parameters for one response, owned while the response is built.
struct OcStamp(Option<crate::hop::StampParams>);

impl OcStamp {
    /// As the codec's `top_via_params` (empty: nothing to add).
    fn params(&self) -> SmallVec<[(&str, Option<&str>); 5]> {
        self.0
            .iter()
            .flatten()
            .map(|(name, value)| (*name, Some(value.as_str())))
            .collect()
    }
}

/// Tables keyed by the proxy's own identifiers (transaction slots, hold ids): nothing a
/// peer chooses, so a fixed-seed hash is safe, and nothing iterates them into output.
type Map<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// Why a request could not be routed.
enum RouteError {
    NoRoute,
    Loop,
    /// Not a configured destination nor a dialog peer (see `route_by_request_uri`).
    Forbidden,
}

/// The proxy's logic, sans IO. See the crate docs for the stages and the cost model.
pub struct ProxyCore {
    /// The configuration running, for [`ProxyCore::reload`] to compare against.
    running: Box<ProxyConfig>,
    txn: TransactionLayer,
    admission: Policy,
    /// Initial INVITEs seen, so retransmissions are not taken for new sessions.
    invites: InviteMemory,
    /// Hop-by-hop overload control (RFC 7339), see `hop.rs`.
    hop: crate::hop::Hop,
    queue: VecDeque<Queued>,
    queue_capacity: usize,
    /// `invite_queue = true`: admitted INVITEs wait here, behind everything in `queue`.
    split: bool,
    /// Retransmissions of INVITEs waiting in the INVITE queue end at the receive stage.
    drop_waiting_repeats: bool,
    invite_queue: VecDeque<Queued>,
    invite_queue_capacity: usize,
    in_service: Option<InService>,
    /// The draining policy refused the INVITE queue's head at the last look; the processor
    /// looks again at `drain_wake` (or the policy's next tick).
    drain_blocked: bool,
    drain_wake: Option<Time>,
    occupancy_now: QueueOccupancy,
    cost_forward: Duration,
    cost_reject: Duration,
    cost_other: Duration,
    busy_until: Time,
    max_datagram: usize,
    retry_after: u32,
    next_hop: Option<SocketAddr>,
    routes: Vec<crate::config::RouteRule>,
    /// This proxy as written in Via and Record-Route.
    me: String,
    me_host: String,
    /// `me_host` as an address when it is one, parsed once: every Via and Route is
    /// compared with it.
    me_ip: Option<IpAddr>,
    me_port: u16,
    local: SocketAddr,
    record_route: Vec<u8>,
    links: Map<ClientTxId, Link>,
    /// Timer C (§16.6 step 11, §16.8) per proxied INVITE, in deadline order (one duration,
    /// so a FIFO suffices); entries of finished branches, and those a provisional has
    /// since reset, are skipped when they come up.
    timer_c: VecDeque<(Time, ClientTxId)>,
    /// When each branch CANCELled by Timer C is given up (64*T1 later). A queue of its own:
    /// in `timer_c` these deadlines would wait behind the Timer C of every INVITE forwarded
    /// in the Timer C duration before, and the caller's 408 could come that much late.
    timer_c_give_up: VecDeque<(Time, ClientTxId)>,
    timer_c_duration: Duration,
    t1_x64: Duration,
    by_server: Map<ServerTxId, ClientTxId>,
    /// The CANCELs Timer C sent, each to the INVITE branch it cancels: at most one per
    /// link, removed when the CANCEL's transaction ends.
    timer_c_cancel_of: Map<ClientTxId, ClientTxId>,
    branch_counter: u64,
    /// Keys the tag on each branch this proxy makes, so that nobody off the path can name
    /// one of its client transactions (which is what a response needs to be believed).
    branch_key: u64,
    /// How this proxy's own Via continues after `SIP/2.0/<transport> `, up to its branch
    /// prefix, as it writes it.
    own_via_prefix: Vec<u8>,
    /// The host's own addresses, for a proxy bound to a wildcard address: a request for
    /// any of them at this port is for this proxy (empty: only `local` and `me`).
    local_ips: Vec<IpAddr>,
    limiter: SourceLimiter,
    /// `memory_budget_mb` in bytes, and the bytes of the messages in the queues.
    memory_budget: usize,
    queued_bytes: usize,
    /// The bytes of those that came over TCP: the application buffer of Shen and
    /// Schulzrinne (2010), which [`has_room`](Self::has_room) holds to
    /// `tcp.application_buffer`.
    queued_stream_bytes: usize,
    /// `route_by_request_uri`: send anywhere a request points.
    open_relay: bool,
    /// Where requests may go without being a dialog peer: the next hop, the rules' next
    /// hops, the overload neighbours and next hops.
    destinations: Vec<SocketAddr>,
    dialog_peers: DialogPeers,
    via_buf: Vec<u8>,
    /// SIP over TCP: the settings the core reads (the driver owns the connections).
    tcp: TcpConfig,
    /// Smart forwarding's input: the outgoing connections' unsent bytes.
    send_queues: SendQueues,
    /// Connection reuse: the accepted connections that carry requests to their peers.
    aliases: Aliases,
    out: VecDeque<Transmit>,
    draining: bool,
    stats: CoreStats,
    /// Sessions held by the SE's clients in keep mode, bounded by their hold limits.
    held: Map<HoldKey, Held>,
    /// Other processes' load: a job of `background_cost` due at `background_at`, then
    /// every [`BACKGROUND_PERIOD`].
    background_cost: Duration,
    background_at: Option<Time>,
    /// The latest instant the driver gave: when what `poll_transmit` hands out is sent.
    last_now: Time,
    /// What the processor did, for a driver that asked (`enable_records`).
    records: Option<VecDeque<Record>>,
    // Per message in the processor.
    cur_retransmission: bool,
    cur_hold: Option<HoldKey>,
    /// RE: the offer of the request being processed, for the responses made for it.
    cur_offer: Option<Offer>,
    cur_reject: bool,
    cur_accepted: bool,
    cur_in_dialog: bool,
    /// When the message being processed arrived.
    cur_arrived: Time,
    // Occupancy window.
    window_start: Time,
    window_busy: Duration,
    /// No emulated cost: the admission policy's CPU load comes from the shell's
    /// measurements, sampled at the first timeout at least [`NATIVE_CPU_SAMPLE`] after the
    /// last (the policies' and feedback generators' own ticks are such timeouts).
    native_speed: bool,
    cpu_sample_start: Time,
    cpu_sample_busy: Duration,
    cpu_sample_processed: u32,
    /// Native busy time per processed message over the last sample (receive-stage work
    /// included): the service time completions carry at native speed.
    native_cost: Duration,
    /// The shell's threads that run this core: its native capacity, in cores.
    native_workers: u32,
}

/// How often the policy gets a native CPU sample: the PI's and OCC's 10 ms sampling.
const NATIVE_CPU_SAMPLE: Duration = Duration::from_millis(10);

/// The background job's period: the PI's sampling interval, fine enough that the CPU
/// measurements see a steady `d`.
const BACKGROUND_PERIOD: Duration = Duration::from_millis(10);

impl std::fmt::Debug for ProxyCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyCore")
            .field("me", &self.me)
            .field("queue", &self.queue.len())
            .field("transactions", &self.txn.len())
            .finish_non_exhaustive()
    }
}

fn host_matches(host: &Host<'_>, text: &str) -> bool {
    host_matches_parsed(host, text, text_ip(text))
}

/// [`host_matches`] with `text`'s address already parsed ([`text_ip`]).
fn host_matches_parsed(host: &Host<'_>, text: &str, text_ip: Option<IpAddr>) -> bool {
    match host {
        Host::Name(n) => n.eq_ignore_ascii_case(text),
        Host::V4(_) | Host::V6(_) => text_ip.is_some_and(|t| host_ip(host) == Some(t)),
    }
}

/// A host as written (an IPv6 address in brackets or not) as an address, if it is one.
fn text_ip(text: &str) -> Option<IpAddr> {
    text.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn host_ip(host: &Host<'_>) -> Option<IpAddr> {
    match host {
        Host::Name(_) => None,
        Host::V4(a) => Some(IpAddr::V4(*a)),
        Host::V6(a) => Some(IpAddr::V6(*a)),
    }
}

/// Splits `host[:port]` (IPv6 in brackets); the port defaults to 5060.
fn split_hostport(s: &str) -> (String, u16) {
    let (host, port) = match s.rfind(':') {
        Some(i) if !s[i..].contains(']') && (s.starts_with('[') || !s[..i].contains(':')) => {
            (&s[..i], s[i + 1..].parse().ok())
        }
        _ => (s, None),
    };
    (host.to_owned(), port.unwrap_or(5060))
}

/// Whether a request has a To tag, and whether it is this proxy's rejection tag.
fn branch_tag(key: u64, counter: u64) -> u64 {
    foldhash::fast::FixedState::with_seed(key).hash_one(counter) & 0xffff_ffff_ffff
}

/// `value` in lower-case hex, zero-padded to at least `width` digits (`{:0width$x}`).
fn push_hex(out: &mut String, value: u64, width: usize) {
    let digits = (64 - value.leading_zeros() as usize).div_ceil(4).max(width);
    for i in (0..digits).rev() {
        let nibble = value.checked_shr(4 * i as u32).unwrap_or(0) & 0xf;
        out.push(char::from(b"0123456789abcdef"[nibble as usize]));
    }
}

/// Whether the proxy with branch key `key` made `branch` (its counter carries the right
/// tag): what a response must show before the proxy acts on it without a transaction.
fn branch_is_ours(key: u64, branch: &[u8]) -> bool {
    let Some(rest) = branch.strip_prefix(BRANCH_PREFIX.as_bytes()) else {
        return false;
    };
    let Some(dot) = rest.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (counter, tag) = (&rest[..dot], &rest[dot + 1..]);
    let parsed = std::str::from_utf8(counter)
        .ok()
        .filter(|c| !c.is_empty() && c.len() <= 16)
        .and_then(|c| u64::from_str_radix(c, 16).ok());
    let expected = parsed.map(|c| {
        let mut e = String::with_capacity(12);
        push_hex(&mut e, branch_tag(key, c), 12);
        e
    });
    expected.is_some_and(|e| tag.len() == 20 && tag[..12] == *e.as_bytes())
}

/// The addresses a dialog's in-dialog requests may go to, from its INVITE and the 2xx
/// that set it up: the caller's Contact, the callee's Contact and the route set (IP
/// addresses only: this proxy does no DNS).
fn dialog_addresses(invite: &Message, ok: &Message) -> SmallVec<[SocketAddr; 4]> {
    let contacts = invite
        .header_values(HeaderName::Contact)
        .take(1)
        .chain(ok.header_values(HeaderName::Contact).take(1))
        .chain(ok.header_values(HeaderName::RecordRoute));
    contacts
        .filter_map(Result::ok)
        .filter_map(NameAddr::uri_of)
        .filter_map(|u| {
            Some(SocketAddr::new(
                host_ip(u.host.as_ref()?)?,
                u.port.unwrap_or(5060),
            ))
        })
        .collect()
}

/// Takes one complete line (without its CR LF) off the front of `rest`; `None` when no
/// line end is left (a line cut short is not taken).
fn take_line<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let end = rest.iter().position(|&b| b == b'\n')?;
    let line = &rest[..end];
    *rest = &rest[end + 1..];
    Some(line.strip_suffix(b"\r").unwrap_or(line))
}

/// The method and top Via branch of a request this proxy sent, read from the first bytes
/// of it that an ICMP error returns (a few hundred, so no full parse): the request line,
/// then header lines up to the first Via. This proxy pushes its Via right after the
/// request line, on a line of its own; only complete lines count, so a branch cut short
/// matches nothing.
fn sent_request_key(payload: &[u8]) -> Option<(Method, &[u8])> {
    let mut rest = payload;
    let request_line = take_line(&mut rest)?;
    if !request_line.ends_with(b" SIP/2.0") {
        return None;
    }
    let token = request_line.split(|&b| b == b' ').next()?;
    let method = Method::from_token(&Bytes::copy_from_slice(token))?;
    while let Some(line) = take_line(&mut rest) {
        let colon = line.iter().position(|&b| b == b':')?;
        let name = line[..colon].trim_ascii();
        if name.eq_ignore_ascii_case(b"via") || name.eq_ignore_ascii_case(b"v") {
            let branch = sluice_sip::Via::parse(&line[colon + 1..])?.branch()?;
            return Some((method, branch));
        }
    }
    None
}

/// The transport a URI's `transport` parameter names, if it names one this proxy speaks.
fn uri_transport(uri: &Uri<'_>) -> Option<Transport> {
    match uri.param("transport")?? {
        t if t.eq_ignore_ascii_case(b"tcp") => Some(Transport::Tcp),
        t if t.eq_ignore_ascii_case(b"udp") => Some(Transport::Udp),
        _ => None,
    }
}

/// The same socket address, an IPv4-mapped IPv6 one equal to its IPv4 form.
fn same_address(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// A request's key in the memory of new requests: its top Via's branch and sent-by (what
/// RFC 3261 §17.2.3 matches a server transaction on), and its Call-ID.
fn invite_key(invites: &InviteMemory, msg: &Message) -> u64 {
    let via = msg.header(HeaderName::Via).unwrap_or_default();
    let sent_by = via
        .iter()
        .position(|&b| b == b';' || b == b',')
        .map_or(via, |end| &via[..end]);
    invites.key(
        msg.top_via_branch().unwrap_or_default(),
        sent_by,
        msg.header(HeaderName::CallId).unwrap_or_default(),
    )
}

fn to_tag_kind(msg: &Message) -> (bool, bool) {
    match msg.header(HeaderName::To).and_then(NameAddr::tag_of) {
        Some(tag) => (true, tag == REJECT_TAG.as_bytes()),
        None => (false, false),
    }
}

impl ProxyCore {
    /// A core for a proxy bound at `local` (the shell's socket address), starting at `now`.
    pub fn new(config: &ProxyConfig, local: SocketAddr, now: Time) -> ProxyCore {
        let me = config.advertised(local);
        let (me_host, me_port) = split_hostport(&me);
        let own_via_prefix = format!("{me};branch={BRANCH_PREFIX}").into_bytes();
        let record_route = format!("<sip:{me};lr>").into_bytes();
        let txn_config = config.sip.txn_config(config.max_transactions);
        ProxyCore {
            running: Box::new(config.clone()),
            txn: TransactionLayer::new(txn_config),
            admission: Policy::Built(Box::new(
                config
                    .control
                    .build_local_admission(now, config.watched_queue_capacity()),
            )),
            invites: InviteMemory::new(txn_config.t1_x64(), 1 << 20),
            hop: crate::hop::Hop::new(
                &config.overload,
                &config.control,
                config.next_hop,
                config.queue_capacity,
                now,
            ),
            queue: VecDeque::with_capacity(config.queue_capacity.min(1 << 16)),
            queue_capacity: config.queue_capacity,
            split: config.invite_queue,
            drop_waiting_repeats: config.drop_waiting_retransmissions,
            invite_queue: VecDeque::new(),
            invite_queue_capacity: config.invite_queue_capacity,
            in_service: None,
            drain_blocked: false,
            drain_wake: None,
            occupancy_now: QueueOccupancy::default(),
            cost_forward: config.cost_forward(),
            cost_reject: config.cost_reject(),
            cost_other: config.cost_other(),
            busy_until: now,
            max_datagram: config.max_datagram,
            retry_after: config.retry_after_s,
            next_hop: config.next_hop,
            routes: config.routes.clone(),
            me_ip: text_ip(&me_host),
            me_host,
            me,
            me_port,
            local,
            record_route,
            links: Map::default(),
            timer_c: VecDeque::new(),
            timer_c_give_up: VecDeque::new(),
            timer_c_duration: config.timer_c(),
            t1_x64: txn_config.t1_x64(),
            by_server: Map::default(),
            timer_c_cancel_of: Map::default(),
            branch_counter: 0,
            // Deterministic by default, for the simulator; a live shell sets a secret one.
            branch_key: foldhash::fast::FixedState::with_seed(config.control.seed)
                .hash_one("branch key"),
            local_ips: Vec::new(),
            own_via_prefix,
            limiter: SourceLimiter::new(config.new_requests_per_source, MAX_RATE_SOURCES, now),
            memory_budget: config.memory_budget_mb.saturating_mul(1 << 20),
            queued_bytes: 0,
            queued_stream_bytes: 0,
            open_relay: config.route_by_request_uri,
            destinations: config.destinations(),
            dialog_peers: DialogPeers::new(
                Duration::from_secs_f64(config.dialog_peer_ttl_s),
                config.max_dialog_peers,
            ),
            via_buf: Vec::with_capacity(128),
            tcp: config.tcp.clone(),
            send_queues: SendQueues::default(),
            aliases: Aliases::new(config.tcp.max_connections),
            out: VecDeque::new(),
            draining: false,
            stats: CoreStats::default(),
            held: Map::default(),
            background_cost: Duration::from_secs_f64(
                config.background_load * BACKGROUND_PERIOD.as_secs_f64(),
            ),
            background_at: (config.background_load > 0.0).then_some(now),
            records: None,
            last_now: now,
            cur_retransmission: false,
            cur_hold: None,
            cur_offer: None,
            cur_reject: false,
            cur_accepted: false,
            cur_in_dialog: false,
            cur_arrived: now,
            window_start: now,
            window_busy: Duration::ZERO,
            native_speed: config.native_speed(),
            cpu_sample_start: now,
            cpu_sample_busy: Duration::ZERO,
            cpu_sample_processed: 0,
            native_cost: Duration::ZERO,
            native_workers: 1,
        }
    }

    /// This proxy's host\[:port\] as written in Via and Record-Route.
    pub fn advertised(&self) -> &str {
        &self.me
    }

    /// The host's addresses, which a shell bound to a wildcard address (`0.0.0.0`, `::`)
    /// reads from its interfaces: a Route or Request-URI naming any of them at this
    /// proxy's port names this proxy.
    pub fn set_local_addresses(&mut self, ips: Vec<IpAddr>) {
        self.local_ips = ips;
    }

    /// Whether `addr` reaches this proxy's own socket.
    fn is_local(&self, addr: SocketAddr) -> bool {
        addr.port() == self.local.port()
            && (addr.ip() == self.local.ip()
                || (self.local.ip().is_unspecified()
                    && (addr.ip().is_unspecified()
                        || addr.ip().is_loopback()
                        || self.local_ips.contains(&addr.ip()))))
    }

    /// Sets the key of the tags on this proxy's branches. A live proxy sets a secret one
    /// (the default derives from `control.seed`, which keeps simulated runs repeatable but
    /// is no secret).
    pub fn set_branch_key(&mut self, key: u64) {
        self.branch_key = key;
    }

    /// A fresh branch: the magic cookie, sluice's prefix, a counter (unique), 48 bits of a
    /// keyed hash of it (unguessable without the key; a hash for tables, not a MAC, which
    /// is enough against senders who never see a branch: those who do can forge anyway),
    /// and the request's loop hash (RFC 3261 §16.6 step 8, see [`Self::loop_hash`]).
    fn new_branch(&self, loop_hash: u32) -> String {
        // Written digit by digit: `format!` costs a forwarded request more than the hash.
        let mut branch = String::with_capacity(BRANCH_PREFIX.len() + 16 + 1 + 12 + 8);
        branch.push_str(BRANCH_PREFIX);
        push_hex(&mut branch, self.branch_counter, 1);
        branch.push('.');
        push_hex(&mut branch, self.branch_tag(self.branch_counter), 12);
        push_hex(&mut branch, u64::from(loop_hash), 8);
        branch
    }

    fn branch_tag(&self, counter: u64) -> u64 {
        branch_tag(self.branch_key, counter)
    }

    fn branch_is_ours(&self, branch: &[u8]) -> bool {
        branch_is_ours(self.branch_key, branch)
    }

    /// RFC 3261 §16.6 step 8: a hash of what decides where a request goes (Request-URI,
    /// Route set, Call-ID, From and To tags, CSeq number), carried in the branch of each
    /// request this proxy forwards. The RFC lists the topmost Via too; it is left out,
    /// because a request coming round again carries another element's Via on top, and
    /// then no loop could ever match.
    fn loop_hash(&self, request: &Message) -> u32 {
        let mut h =
            foldhash::fast::FixedState::with_seed(self.branch_key ^ LOOP_KEY).build_hasher();
        let field = |h: &mut foldhash::fast::FoldHasher, v: Option<&[u8]>| {
            h.write(v.unwrap_or_default());
            h.write_u8(0xff);
        };
        field(&mut h, request.request_uri_raw());
        for route in request.header_values(HeaderName::Route) {
            field(&mut h, route.ok());
        }
        field(&mut h, request.call_id());
        field(
            &mut h,
            request.header(HeaderName::From).and_then(NameAddr::tag_of),
        );
        field(
            &mut h,
            request.header(HeaderName::To).and_then(NameAddr::tag_of),
        );
        h.write_u32(request.cseq().map_or(0, |c| c.seq));
        h.finish() as u32
    }

    /// RFC 3261 §16.3 step 4: the request carries a Via this proxy wrote (its own sent-by
    /// and branch prefix, as it formats them) whose loop hash is this request's own, so
    /// forwarding it would send it where it went before: a loop, not a spiral.
    fn has_looped(&self, request: &Message, loop_hash: u32) -> bool {
        let ours = self.own_via_prefix.as_slice();
        let mut digits = [0u8; 8];
        let hex = b"0123456789abcdef";
        for (i, d) in digits.iter_mut().enumerate() {
            *d = hex[((loop_hash >> (28 - 4 * i)) & 0xf) as usize];
        }
        request
            .header_values(HeaderName::Via)
            .filter_map(Result::ok)
            .filter_map(|via| {
                via.strip_prefix(b"SIP/2.0/UDP ")
                    .or_else(|| via.strip_prefix(b"SIP/2.0/TCP "))?
                    .strip_prefix(ours)
            })
            .any(|rest| {
                let branch = &rest[..rest.iter().position(|&b| b == b';').unwrap_or(rest.len())];
                branch.ends_with(&digits)
            })
    }

    // ---- receive stage ----

    /// A datagram arrived from `from`: the cheap admission parse and the admission decision.
    pub fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.receive(now, payload, Peer::udp(from), false);
    }

    /// A whole message (framed by its Content-Length, `sluice_sip::StreamFramer`) arrived
    /// on a TCP connection whose remote address is `from`. What answers it goes back on
    /// that connection ([`Transmit::to`] is `from`, over TCP). A driver that applies
    /// back-pressure asks [`has_room`](Self::has_room) before reading the next one.
    pub fn handle_stream_message(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        self.receive(now, payload, Peer::tcp(from), false);
    }

    /// Whether the next message from a TCP connection may be read: the queue it would
    /// join has room, and the messages from TCP waiting in the queues take less than
    /// `tcp.application_buffer` bytes. A stream driver reads on only while this holds, so
    /// that a busy processor stops the reading and TCP's flow control pushes back on the
    /// sender (Shen and Schulzrinne 2010 §5, §6.1), where a datagram would be dropped.
    pub fn has_room(&mut self, now: Time) -> bool {
        self.run_processor(now);
        self.queue.len() < self.queue_capacity
            && (!self.split || self.invite_queue.len() < self.invite_queue_capacity)
            && self.queued_stream_bytes < self.tcp.application_buffer
    }

    /// The TCP connection whose remote address is `remote` closed: requests to the
    /// address its peer aliased to it (RFC 5923) go on a connection of their own again.
    pub fn handle_connection_closed(&mut self, remote: SocketAddr) {
        self.aliases.forget(remote);
    }

    /// The driver measured the bytes an outgoing TCP connection to `to` holds unsent
    /// (`SIOCOUTQ` and its own write queue; the link model's send buffer in the
    /// simulator): smart forwarding's input.
    pub fn handle_send_queue(&mut self, to: SocketAddr, lane: Lane, unsent_bytes: usize) {
        self.send_queues.set(to, lane, unsent_bytes);
    }

    /// As [`handle_datagram`](Self::handle_datagram), for a driver that knows the datagram
    /// repeats an earlier one (the simulator's senders mark their timers' copies): what
    /// the processor relays statelessly because of it carries the mark on in
    /// [`Transmit::retransmission`]. The proxy's decisions do not depend on it.
    pub fn handle_datagram_marked(
        &mut self,
        now: Time,
        payload: Bytes,
        from: SocketAddr,
        retransmission: bool,
    ) {
        self.receive(now, payload, Peer::udp(from), retransmission);
    }

    fn receive(&mut self, now: Time, payload: Bytes, from: Peer, retransmission: bool) {
        self.last_now = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += payload.len() as u64;
        self.stats.in_by_kind.count(&payload);
        let max_size = match from.transport {
            Transport::Udp => self.max_datagram,
            Transport::Tcp => self.tcp.max_message_size,
        };
        if payload.len() > max_size {
            self.stats.oversized += 1;
            return;
        }
        let limits = Limits {
            max_message_size: max_size,
            ..Limits::STREAM
        };
        let Ok((msg, whole)) = Message::parse_short_body(payload, &limits) else {
            // Nothing parsed means no Via to answer along: drop and count (§18.1.2 / §16.3
            // leave garbage to the element's discretion).
            self.stats.malformed += 1;
            return;
        };
        if !whole {
            // A body shorter than its Content-Length: 400 for a request (§18.3).
            self.stats.malformed += 1;
            self.answer_short_body(&msg, from);
            return;
        }
        if from.transport == Transport::Tcp && msg.is_request() && self.tcp.accept_aliases {
            self.learn_alias(&msg, from.addr);
        }
        // Over the memory budget only responses get in: they end transactions and free
        // memory; every request would hold more.
        if msg.is_request() && self.bytes_in_use() >= self.memory_budget {
            self.stats.dropped_memory_budget += 1;
            return;
        }
        let (to_tag, reject_tag) = if msg.is_request() {
            to_tag_kind(&msg)
        } else {
            (false, false)
        };
        // The ACK for a stateless rejection: nothing waits for it (§17.2.1's ACK matters
        // only to a transaction, and a rejection has none), so the processor ends it. It
        // still goes through the queue at an ordinary message's cost, as every message does
        // in the papers' cost model: a rejected call costs its 503 and this ACK. A
        // downstream proxy's rejection that this one relayed carries the same tag when that
        // proxy is a sluice too: its ACK belongs to our server transaction, which retransmits
        // the 503 until Timer H unless it sees it.
        let absorb =
            reject_tag && msg.method() == Some(&Method::Ack) && !self.txn.matches_server(&msg);
        // Inside a dialog only if this proxy record-routed it: a To tag alone is the
        // sender's word, and would let any request past admission.
        let in_dialog = to_tag && self.route_names_me(&msg);
        // Every other request is new work the proxy may refuse (an INVITE, but also an
        // OPTIONS, MESSAGE or SUBSCRIBE), except ACK and CANCEL, which belong to an INVITE.
        let new_request = msg.is_request()
            && !in_dialog
            && !matches!(msg.method(), Some(Method::Ack | Method::Cancel));
        // A retransmitted new request is not new: it must not be rejected while its
        // original waits in the queue (and one whose request was rejected gets the same 503).
        let invite_key = new_request.then(|| invite_key(&self.invites, &msg));
        let sighting = invite_key.map_or(Sighting::First, |k| self.invites.sight(now, k));
        if sighting != Sighting::First {
            self.stats.repeated_invites += 1;
        }
        if sighting == Sighting::RepeatAnswered {
            self.stats.absorbed_invites_after_2xx += 1;
            return;
        }
        if sighting == Sighting::RepeatWaiting && self.split && self.drop_waiting_repeats {
            self.stats.dropped_repeats_waiting += 1;
            return;
        }
        if new_request && sighting == Sighting::First && !self.limiter.allow(now, from.addr.ip()) {
            // Over its source's rate: dropped before it costs anything (a 503 would cost
            // the processor and could be reflected at a spoofed source).
            self.stats.dropped_rate_limit += 1;
            if let Some(k) = invite_key {
                self.invites.forget(k);
            }
            return;
        }
        let summary = match msg.method() {
            None => MessageSummary::response(None),
            // Admission and the feedback algorithms count sessions; a new request of any
            // method is one unit of new work to them.
            Some(_) if new_request && sighting == Sighting::First => {
                MessageSummary::new_session(None)
            }
            Some(Method::Invite) => MessageSummary::repeated_invite(None),
            Some(_) => MessageSummary::other_request(None),
        };
        let neighbour = Self::neighbour_address(&msg, from);
        let (txn, key) = (&self.txn, self.branch_key);
        let (summary, offer) = self
            .hop
            .on_arrival(now, &msg, neighbour, summary, |response| {
                match txn.client_peer(response) {
                    Some(peer) => SentBy::Live(peer.addr),
                    None if response
                        .top_via_branch()
                        .is_some_and(|b| branch_is_ours(key, b)) =>
                    {
                        SentBy::Ended
                    }
                    None => SentBy::Nobody,
                }
            });
        // SE: RFC 7339 reduction towards the next hop, here at the cheap path; in-dialog
        // requests are exempt, so only out-of-dialog ones are offered, and a retransmitted
        // INVITE was offered as its original.
        let mut hold = None;
        let smart_reject = new_request
            && sighting == Sighting::First
            && self.tcp.smart_forwarding
            && msg.method() == Some(&Method::Invite)
            && self.send_queue_not_empty(&msg);
        if smart_reject {
            self.stats.rejected_smart_forwarding += 1;
        }
        let hop_reject =
            new_request && sighting == Sighting::First && !smart_reject && self.hop.is_se() && {
                // Routing reads the processor's in-dialog flag.
                self.cur_in_dialog = false;
                match self.route(&msg) {
                    Ok((dest, _)) => match self.hop.reduce(now, &msg, dest.addr) {
                        OcVerdict::Forward => false,
                        OcVerdict::Reject => true,
                        OcVerdict::Hold(id) => {
                            hold = Some((dest.addr, id));
                            false
                        }
                    },
                    Err(_) => false,
                }
            };
        // In the split structure the policies watch the INVITE queue, as in the simulator.
        let watched = if self.split {
            self.invite_queue.len()
        } else {
            self.queue.len()
        };
        let verdict = self.admission.get().on_arrival(now, watched, &summary);
        // Only new sessions are ever rejected: everything else belongs to work already
        // accepted, and rejecting it would waste that work.
        let mut reject = hop_reject || smart_reject;
        if summary.is_session_start() && !reject {
            if self.table_headroom_reached() {
                // Stateless, so the refusal itself takes no slot of the headroom.
                self.stats.rejected_table_headroom += 1;
                let refusal = edit::response_to(&msg, 503).to_tag("sl").build();
                self.send_stateless(from, refusal);
                return;
            }
            if self.draining {
                reject = true;
                self.stats.rejected_shutdown += 1;
            } else if verdict == AdmissionVerdict::Reject {
                reject = true;
                self.stats.rejected_policy += 1;
            }
        }
        if sighting == Sighting::RepeatRejected {
            reject = true;
            self.stats.rejected_repeats += 1;
        }
        if let (true, Some(k)) = (reject, invite_key) {
            self.invites.rejected(k);
        }
        let to_invite_queue = self.split && summary.class == MessageClass::Invite && !reject;
        let full = |c: &Self| {
            if to_invite_queue {
                c.invite_queue.len() >= c.invite_queue_capacity
            } else {
                c.queue.len() >= c.queue_capacity
            }
        };
        if full(self) {
            // Let the processor catch up to `now` before declaring the queue full: with
            // virtual costs, messages may have completed since the last wake-up.
            self.run_processor(now);
            if full(self) {
                self.stats.dropped_queue_full += 1;
                self.record(|| Record::Dropped { at: now });
                if let (Some(k), Sighting::First) = (invite_key, sighting) {
                    self.invites.forget(k);
                }
                // The client's hold slot goes back when it releases the session; nothing
                // is left to send then.
                if to_invite_queue {
                    self.stats.dropped_invite_queue_full += 1;
                }
                return;
            }
        }
        if !reject {
            self.stats.admitted += 1;
        }
        if let Some(key) = hold {
            self.held.insert(key, Held::Queued);
        }
        let queued = Queued {
            msg,
            from,
            arrived: now,
            summary,
            reject,
            in_dialog,
            invite_key,
            retransmission,
            hold,
            absorb,
            offer,
        };
        if to_invite_queue {
            self.occupancy_now.invites += 1;
            self.enqueued_bytes(&queued, true);
            self.invite_queue.push_back(queued);
            self.drain_blocked = false;
        } else {
            // In the split structure the INVITE count is the INVITE queue's alone.
            if summary.class == MessageClass::Invite && !self.split {
                self.occupancy_now.invites += 1;
            } else {
                self.occupancy_now.non_invites += 1;
            }
            self.enqueued_bytes(&queued, true);
            self.queue.push_back(queued);
        }
        self.stats.queue_peak = self
            .stats
            .queue_peak
            .max(self.queue.len() + self.invite_queue.len());
        self.hop.on_queue(now, self.occupancy_now);
        if self.hop.runs_generator() {
            self.hop.on_memory(now, self.memory_occupancy(now));
        }
        self.admission.get().on_queue(now, self.occupancy_now);
        self.record_queue(now);
        self.release_held(now);
    }

    /// RFC 3261 §18.3: a request whose Content-Length promises more than the datagram holds
    /// gets 400 (an ACK is dropped: nothing answers it).
    fn answer_short_body(&mut self, head: &Message, from: Peer) {
        if !head.is_request()
            || head.method() == Some(&Method::Ack)
            || head.top_via().is_err()
            || head.call_id().is_none()
        {
            return;
        }
        self.stats.bad_content_length += 1;
        let bad = edit::response_to(head, 400).to_tag("sl").build();
        self.send_stateless(from, bad);
    }

    /// Asks for a [`Record`] of everything the processor does, from now on.
    pub fn enable_records(&mut self) {
        self.records.get_or_insert_with(VecDeque::new);
    }

    /// The next [`Record`], if records are enabled.
    pub fn poll_record(&mut self) -> Option<Record> {
        self.records.as_mut()?.pop_front()
    }

    fn record(&mut self, record: impl FnOnce() -> Record) {
        if let Some(r) = self.records.as_mut() {
            r.push_back(record());
        }
    }

    fn record_queue(&mut self, at: Time) {
        let waiting = self.queue.len() + self.invite_queue.len();
        self.record(|| Record::Queue { at, waiting });
    }

    /// SE in keep mode: forwards what the next hops' clients let go.
    fn release_held(&mut self, now: Time) {
        while let Some(key) = self.hop.poll_release() {
            match self.held.remove(&key) {
                Some(Held::Queued) => {
                    self.held.insert(key, Held::Released);
                }
                Some(Held::Waiting {
                    server,
                    request,
                    from,
                    arrived,
                }) => {
                    self.cur_in_dialog = false;
                    self.cur_arrived = arrived;
                    self.cur_retransmission = false;
                    self.forward(now, server, request, from, true);
                    self.drain_txn(now);
                }
                // Dropped at a full queue, or cancelled while held.
                Some(Held::Released) | None => {}
            }
        }
    }

    /// More than 90 % of the transaction table is in use: non-INVITE server transactions
    /// wait Timer J (32 s) after their final response, so at high call rates they fill the
    /// table and, without this reserve, the BYEs of admitted calls would be refused.
    /// New requests are refused once 90 % of the transaction table or of the memory
    /// budget is taken: the rest is kept for the work already admitted (its BYEs, CANCELs
    /// and responses), so that a flood of new requests cannot starve it.
    fn table_headroom_reached(&self) -> bool {
        self.txn.len().saturating_mul(10) > self.txn.config().max_transactions.saturating_mul(9)
            || self.bytes_in_use().saturating_mul(10) > self.memory_budget.saturating_mul(9)
    }

    /// Counts a message into (`added`) or out of the queues' bytes.
    fn enqueued_bytes(&mut self, q: &Queued, added: bool) {
        let len = q.msg.as_bytes().len();
        let stream = if q.from.transport == Transport::Tcp {
            len
        } else {
            0
        };
        if added {
            self.queued_bytes += len;
            self.queued_stream_bytes += stream;
        } else {
            self.queued_bytes = self.queued_bytes.saturating_sub(len);
            self.queued_stream_bytes = self.queued_stream_bytes.saturating_sub(stream);
        }
    }

    /// What the memory budget covers: the transactions' bytes and the queued messages.
    fn bytes_in_use(&self) -> usize {
        self.txn.bytes_held() + self.queued_bytes
    }

    /// The fullest of the bounded stores, in `[0, 1]`: the queues against their capacity,
    /// the transactions against the table limit, and the bytes held against the memory
    /// budget. The memory occupancy the fuzzy window's RE reports: overload fills the
    /// queue first, and the other two are what the table headroom guards.
    fn memory_occupancy(&self, now: Time) -> f64 {
        let fill = |used: usize, limit: usize| used as f64 / limit.max(1) as f64;
        // A queue holding T1 of waiting is as full as one at its capacity: past it every
        // caller retransmits, whatever share of the queue's room it takes.
        let oldest = [self.queue.front(), self.invite_queue.front()]
            .into_iter()
            .flatten()
            .map(|q| now.saturating_since(q.arrived))
            .max()
            .unwrap_or_default();
        let waited = oldest.as_secs_f64() / self.txn.config().t1.as_secs_f64().max(1e-3);
        let queue_limit = self.queue_capacity
            + if self.split {
                self.invite_queue_capacity
            } else {
                0
            };
        fill(self.queue.len() + self.invite_queue.len(), queue_limit)
            .max(fill(self.txn.len(), self.txn.config().max_transactions))
            .max(fill(self.bytes_in_use(), self.memory_budget))
            .max(waited)
            .min(1.0)
    }

    /// The shell could not send a transmit of this origin (§16.9: a 503 from the branch,
    /// answered 500 upstream).
    pub fn handle_send_error(&mut self, now: Time, origin: Option<Origin>) {
        self.stats.send_errors += 1;
        if let Some(origin) = origin {
            self.txn.handle_transport_error(origin);
            self.drain_txn(now);
        }
    }

    /// The shell read an ICMP error back from its socket (RFC 3261 §18.4: host, network,
    /// port or protocol unreachable): a datagram it sent to `to` was not delivered, and
    /// `payload` is the start of that datagram, as much as the ICMP message carried. If it
    /// is a request of one of this proxy's live client transactions towards `to` (its top
    /// Via branch and method, matched as §17.1.3 matches responses), that transaction
    /// fails with a transport error now (§16.9), instead of after Timer B's 32 s. Anything
    /// else is counted and ignored: ICMP is as easily forged as any datagram, so a report
    /// must name both the destination and a branch this proxy made (its tag is keyed, see
    /// [`set_branch_key`](Self::set_branch_key)). Returns whether a transaction ended.
    pub fn handle_unreachable(&mut self, now: Time, to: SocketAddr, payload: &[u8]) -> bool {
        self.last_now = now;
        let found = sent_request_key(payload)
            .and_then(|(method, branch)| self.txn.client_for(branch, &method))
            .filter(|(_, peer)| same_address(peer.addr, to));
        let Some((client, _)) = found else {
            self.stats.unreachable_ignored += 1;
            return false;
        };
        self.stats.unreachable += 1;
        self.txn.handle_transport_error(Origin::Client(client));
        self.drain_txn(now);
        true
    }

    /// Native processing time measured by the shell, added to the occupancy.
    pub fn record_native_busy(&mut self, busy: Duration) {
        self.stats.busy_native += busy;
        // With several threads the process is one processor that many times faster: its
        // load is the busy share of all of them, and a message's service time as a queue
        // sees it is the cost divided among them.
        let share = busy / self.native_workers;
        self.window_busy += share;
        self.cpu_sample_busy += share;
    }

    /// How many shell threads run this core (default 1), so that the CPU load the policies
    /// read is the share of all of them.
    pub fn set_native_workers(&mut self, workers: usize) {
        self.native_workers = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
    }

    /// At native speed (no emulated cost) the policy's CPU load is what the shell measured:
    /// without it OCC and the PI would read an idle CPU however loaded the proxy is. The
    /// same sample sets the service time native completions carry. With emulated costs the
    /// virtual service times are the load, as in the simulator, and no sample is given (a
    /// first sample would switch the policy's meter to samples for good).
    fn sample_native_cpu(&mut self, now: Time) {
        if !self.native_speed {
            return;
        }
        let elapsed = now.saturating_since(self.cpu_sample_start);
        if elapsed < NATIVE_CPU_SAMPLE {
            return;
        }
        let busy = self.cpu_sample_busy.as_secs_f64() / elapsed.as_secs_f64();
        self.admission.get().on_cpu_sample(now, busy.min(1.0));
        if self.cpu_sample_processed > 0 {
            self.native_cost = self.cpu_sample_busy / self.cpu_sample_processed;
        }
        self.cpu_sample_start = now;
        self.cpu_sample_busy = Duration::ZERO;
        self.cpu_sample_processed = 0;
    }

    // ---- processor and timers ----

    /// Runs the processor up to `now` and fires due timers.
    pub fn handle_timeout(&mut self, now: Time) {
        self.last_now = now;
        self.release_held(now);
        self.txn.handle_timeout(now);
        self.hop.handle_timeout(now);
        self.drain_txn(now);
        self.sample_native_cpu(now);
        let policy = self.admission.get();
        if policy.poll_timeout().is_some_and(|t| t <= now) {
            policy.handle_timeout(now);
            // The drain rate may have changed: look at the INVITE queue again.
            self.drain_blocked = false;
        }
        self.run_processor(now);
        self.fire_timer_c(now);
        self.release_held(now);
        self.roll_window(now);
    }

    /// §16.8: an INVITE branch without a final response when Timer C fires is CANCELled
    /// (if it had a provisional; else Timer B ends it first). If the next hop does not
    /// answer the CANCEL with a final response within 64*T1, the branch is abandoned and
    /// the caller gets 408, so a silent next hop cannot hold memory forever.
    fn fire_timer_c(&mut self, now: Time) {
        while let Some(&(deadline, client)) = self.timer_c.front() {
            if deadline > now {
                break;
            }
            self.timer_c.pop_front();
            let Some(link) = self.links.get_mut(&client) else {
                continue;
            };
            if link.final_relayed || link.timer_c_fired || link.timer_c_at != deadline {
                continue;
            }
            link.timer_c_fired = true;
            self.stats.timer_c_cancels += 1;
            if link.provisional_seen {
                if let Ok(cancel) = self.txn.cancel(now, client) {
                    self.timer_c_cancel_of.insert(cancel, client);
                }
            } else {
                link.cancel_pending = true;
            }
            self.timer_c_give_up.push_back((now + self.t1_x64, client));
            self.drain_txn(now);
        }
        while let Some(&(deadline, client)) = self.timer_c_give_up.front() {
            if deadline > now {
                break;
            }
            self.timer_c_give_up.pop_front();
            if self
                .links
                .get(&client)
                .is_some_and(|link| !link.final_relayed)
            {
                self.abandon_branch(now, client);
                self.drain_txn(now);
            }
        }
        self.bound_timer_c_queues();
    }

    /// Finished branches, and Timer C deadlines a provisional has since reset, leave their
    /// entries behind until they come up; drop them early once they outnumber what the
    /// link table can hold, so neither queue outgrows it (a next hop sending 180s as fast
    /// as it can adds one entry each). Amortised: a trim leaves at most one entry a link.
    fn bound_timer_c_queues(&mut self) {
        let most = self.links.len().max(1024) * 2;
        let links = &self.links;
        if self.timer_c.len() > most {
            self.timer_c
                .retain(|(at, c)| links.get(c).is_some_and(|l| l.timer_c_at == *at));
        }
        if self.timer_c_give_up.len() > most {
            self.timer_c_give_up.retain(|(_, c)| links.contains_key(c));
        }
    }

    /// §16.8: Timer C's CANCEL did not end the branch; it is given up with 408 upstream.
    /// The caller drains the transaction layer's events.
    fn abandon_branch(&mut self, now: Time, client: ClientTxId) {
        self.stats.timer_c_abandoned += 1;
        self.fail_upstream(now, client, 408);
        self.txn.terminate_tx(TxId::Client(client));
    }

    /// The earliest instant [`handle_timeout`](Self::handle_timeout) has work: the head of
    /// the queue completes, a transaction timer fires, or the admission policy ticks.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        let head = if let Some(s) = &self.in_service {
            Some(s.done)
        } else if let Some(start) = self.background_first() {
            Some(start + self.background_cost)
        } else if let Some(q) = self.queue.front() {
            Some(self.completion_of(q))
        } else if let Some(q) = self.invite_queue.front() {
            // Not refused yet: look as soon as the processor is free.
            if self.drain_blocked {
                self.drain_wake
            } else {
                Some(self.busy_until.max(q.arrived))
            }
        } else {
            None
        };
        let timer_c = self.timer_c.front().map(|&(t, _)| t);
        let timer_c_give_up = self.timer_c_give_up.front().map(|&(t, _)| t);
        [
            head,
            self.txn.poll_timeout(),
            self.admission.get_ref().poll_timeout(),
            timer_c,
            timer_c_give_up,
            self.hop.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.out.pop_front()?;
        let t = self.hop.restamp(self.last_now, t);
        self.stats.datagrams_out += 1;
        self.stats.bytes_out += t.payload.len() as u64;
        self.stats.out_by_kind.count(&t.payload);
        Some(t)
    }

    /// Stop admitting new sessions (503) and let running transactions finish.
    pub fn begin_shutdown(&mut self) {
        self.draining = true;
    }

    /// The end of a graceful shutdown: every admitted request still without a final
    /// response gets one now, so that no caller is left to its own timers: 503 for what
    /// waits in the queues or is held, 408 for what waits on the next hop. Their bytes are
    /// ready in [`poll_transmit`](Self::poll_transmit); returns how many were answered.
    pub fn abandon(&mut self, now: Time) -> usize {
        self.last_now = now;
        let mut answered = 0;
        let waiting: Vec<Queued> = self
            .queue
            .drain(..)
            .chain(self.invite_queue.drain(..))
            .chain(self.in_service.take().map(|s| s.q))
            .collect();
        self.queued_bytes = 0;
        self.queued_stream_bytes = 0;
        for q in waiting {
            if q.msg.is_request() && q.msg.method() != Some(&Method::Ack) && !q.absorb {
                let refusal = edit::response_to(&q.msg, 503).to_tag("sl").build();
                self.send_stateless(q.from, refusal);
                answered += 1;
            }
        }
        let held: Vec<(ServerTxId, Message)> = self
            .held
            .drain()
            .filter_map(|(_, h)| match h {
                Held::Waiting {
                    server, request, ..
                } => Some((server, request)),
                _ => None,
            })
            .collect();
        for (server, request) in held {
            self.respond(now, server, &request, 503);
            answered += 1;
        }
        let pending: Vec<ClientTxId> = self
            .links
            .iter()
            .filter(|(_, l)| !l.final_relayed)
            .map(|(c, _)| *c)
            .collect();
        for client in pending {
            self.fail_upstream(now, client, 408);
            answered += 1;
        }
        self.drain_txn(now);
        self.stats.abandoned_at_shutdown += answered as u64;
        answered
    }

    /// Nothing queued and every proxied request has its final response: a shutdown may end.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.invite_queue.is_empty()
            && self.in_service.is_none()
            && self.links.values().all(|l| l.final_relayed)
    }

    /// Counters and gauges as of `now`.
    pub fn stats(&mut self, now: Time) -> CoreStats {
        self.roll_window(now);
        let mut s = self.stats;
        s.queue_len = self.queue.len();
        s.invite_queue_len = self.invite_queue.len() + usize::from(self.in_service.is_some());
        s.transactions = self.txn.len();
        s.pending_requests = self.links.values().filter(|l| !l.final_relayed).count();
        s.txn = *self.txn.stats();
        s.hop = self.hop.stats();
        s.invite_memory_full = self.invites.full;
        s.dialog_peers = self.dialog_peers.len();
        s.bytes_in_use = self.bytes_in_use();
        s.dialog_peers_evicted = self.dialog_peers.evicted;
        s.held = self.held.len();
        s.timer_c_queued = self.timer_c.len() + self.timer_c_give_up.len();
        s.tcp_aliases = self.aliases.len();
        s
    }

    /// As a receiving entity: the feedback generator's estimates (service rate, sessions,
    /// its control value), for time series.
    pub fn feedback_metrics(&self) -> Option<ReceiverMetrics> {
        self.hop.feedback_metrics()
    }

    /// As a receiving entity: the overload control the latest response to each configured
    /// neighbour asked of it, the algorithm and its `oc` value.
    pub fn feedback_sent(
        &self,
    ) -> impl Iterator<Item = (SocketAddr, sluice_control::overload::OcAlgorithm, u64)> + '_ {
        self.hop.feedback_sent()
    }

    /// As a sending entity: each next hop's overload control in force, the algorithm and
    /// its `oc` value (loss percent, rate, window; see `OcClient::value`), `None` while
    /// that next hop asks for none.
    pub fn next_hop_controls(
        &self,
    ) -> impl Iterator<
        Item = (
            SocketAddr,
            Option<(sluice_control::overload::OcAlgorithm, i64)>,
        ),
    > + '_ {
        self.hop.client_controls()
    }

    /// Applies a new configuration to the running proxy (SIGHUP) without touching its
    /// transactions, queues or dialogs: routing (`next_hop`, `routes`,
    /// `route_by_request_uri`), `retry_after_s`, `new_requests_per_source`, the emulated
    /// costs, and the control: a changed `[control]` rebuilds the admission policy (its
    /// state starts again), a changed `[control]` or `[overload]` the hop-by-hop state
    /// (sessions an SE held for its old control go on at once, admitted by it). Other
    /// keys size sockets, tables and queues, or name this proxy: they need a restart, and
    /// are returned, left as they were.
    // A key either changed in the file or not: its values are compared exactly.
    #[allow(clippy::float_cmp)]
    pub fn reload(&mut self, config: &ProxyConfig, now: Time) -> Reloaded {
        let old = (*self.running).clone();
        let mut reloaded = Reloaded::default();
        // What the running config would be with only the live keys changed.
        let mut next = old.clone();
        macro_rules! live {
            ($($field:ident),*) => {$(
                if config.$field != old.$field {
                    next.$field = config.$field.clone();
                    reloaded.applied.push(stringify!($field));
                }
            )*};
        }
        live!(
            next_hop,
            routes,
            route_by_request_uri,
            retry_after_s,
            new_requests_per_source,
            cost_forward_us,
            cost_reject_us,
            cost_other_us,
            control,
            overload
        );
        let (Ok(wanted), Ok(kept)) = (toml::Table::try_from(config), toml::Table::try_from(&next))
        else {
            return reloaded;
        };
        reloaded.needs_restart = wanted
            .iter()
            .filter(|(k, v)| kept.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .collect();
        if reloaded.applied.is_empty() {
            return reloaded;
        }
        self.next_hop = next.next_hop;
        self.routes.clone_from(&next.routes);
        self.open_relay = next.route_by_request_uri;
        self.destinations = next.destinations();
        self.retry_after = next.retry_after_s;
        if next.new_requests_per_source != old.new_requests_per_source {
            self.limiter = SourceLimiter::new(next.new_requests_per_source, MAX_RATE_SOURCES, now);
        }
        self.cost_forward = next.cost_forward();
        self.cost_reject = next.cost_reject();
        self.cost_other = next.cost_other();
        self.native_speed = next.native_speed();
        if next.control != old.control && matches!(self.admission, Policy::Built(_)) {
            self.admission = Policy::Built(Box::new(
                next.control
                    .build_local_admission(now, next.watched_queue_capacity()),
            ));
        }
        if next.control != old.control || next.overload != old.overload {
            self.hop = crate::hop::Hop::new(
                &next.overload,
                &next.control,
                next.next_hop,
                next.queue_capacity,
                now,
            );
            self.release_all_held(now);
        }
        *self.running = next;
        reloaded
    }

    /// Forwards every session held for a next hop's control (keep mode) at once.
    fn release_all_held(&mut self, now: Time) {
        let held: Vec<Held> = self.held.drain().map(|(_, h)| h).collect();
        for h in held {
            if let Held::Waiting {
                server,
                request,
                from,
                arrived,
            } = h
            {
                self.cur_in_dialog = false;
                self.cur_retransmission = false;
                self.cur_arrived = arrived;
                self.forward(now, server, request, from, true);
            }
        }
        self.drain_txn(now);
    }

    /// Replaces the receive-stage admission policy (the configured one is built from
    /// `config.admission`): the hook where other overload controls plug in. The policy sees
    /// every arrival (`on_arrival`, `on_queue`) and every completion (`on_processed`, with the
    /// virtual service time). A policy set here does not drain the INVITE queue: with
    /// `invite_queue = true` the processor takes INVITEs whenever the main FIFO is empty.
    pub fn set_admission(&mut self, policy: Box<dyn LocalAdmission + Send>) {
        self.admission = Policy::Custom(policy);
    }

    /// The admission policy's view, for metrics.
    pub fn admission_metrics(&self) -> sluice_control::AdmissionMetrics {
        self.admission.get_ref().metrics()
    }

    fn roll_window(&mut self, now: Time) {
        let elapsed = now.saturating_since(self.window_start);
        if elapsed >= Duration::from_secs(1) {
            self.stats.occupancy =
                (self.window_busy.as_secs_f64() / elapsed.as_secs_f64()).min(1.0);
            self.window_start = now;
            self.window_busy = Duration::ZERO;
        }
    }

    /// The emulated cost of a message, by class as in De Cicco et al.'s model: a rejected
    /// INVITE, an INVITE processed in full, anything else.
    fn cost_of(&self, q: &Queued) -> Duration {
        if q.reject {
            self.cost_reject
        } else if q.summary.class == MessageClass::Invite {
            self.cost_forward
        } else {
            self.cost_other
        }
    }

    fn completion_of(&self, q: &Queued) -> Time {
        self.busy_until.max(q.arrived) + self.cost_of(q)
    }

    /// Serves, in virtual time up to `now`: an INVITE already in service, then the main
    /// FIFO, then (once the FIFO is empty) the INVITE queue, through the policy's drain
    /// controller if it has one. A message's service starts when the processor is free
    /// and it has arrived; it is processed once its completion instant has passed.
    fn run_processor(&mut self, now: Time) {
        let mut changed = false;
        loop {
            if let Some(s) = &self.in_service {
                if s.done > now {
                    break;
                }
                if let Some(InService { q, start, cost, .. }) = self.in_service.take() {
                    self.complete(now, q, start, cost);
                }
                continue;
            }
            if let Some(start) = self.background_first() {
                let done = start + self.background_cost;
                if done > now {
                    break;
                }
                self.run_background(now, start, done);
                continue;
            }
            // An unpaced drain takes INVITEs in arrival order among the other messages.
            let invite_first = match (self.queue.front(), self.invite_queue.front()) {
                (Some(head), Some(invite)) => {
                    invite.arrived < head.arrived
                        && self
                            .admission
                            .drain_mut()
                            .is_some_and(|d| d.in_arrival_order())
                }
                _ => false,
            };
            if let Some(head) = self.queue.front().filter(|_| !invite_first) {
                let start = self.busy_until.max(head.arrived);
                let cost = self.cost_of(head);
                let done = start + cost;
                if done > now {
                    break;
                }
                let Some(q) = self.queue.pop_front() else {
                    break;
                };
                self.enqueued_bytes(&q, false);
                changed = true;
                if q.summary.class == MessageClass::Invite && !self.split {
                    self.occupancy_now.invites = self.occupancy_now.invites.saturating_sub(1);
                } else {
                    self.occupancy_now.non_invites =
                        self.occupancy_now.non_invites.saturating_sub(1);
                }
                self.busy_until = done;
                self.complete(now, q, start, cost);
                continue;
            }
            let Some(head) = self.invite_queue.front() else {
                break;
            };
            let start = self.busy_until.max(head.arrived);
            if start > now {
                break;
            }
            let summary = head.summary;
            let mut reject = head.reject;
            if let Some(drain) = self.admission.drain_mut() {
                let Some(verdict) = drain.take(now, &summary) else {
                    self.drain_blocked = true;
                    self.drain_wake = drain.next_drain(now);
                    break;
                };
                reject = verdict == AdmissionVerdict::Reject;
            }
            let Some(mut q) = self.invite_queue.pop_front() else {
                break;
            };
            self.enqueued_bytes(&q, false);
            if let Some(k) = q.invite_key {
                self.invites.taken(k);
            }
            changed = true;
            self.occupancy_now.invites = self.occupancy_now.invites.saturating_sub(1);
            if reject && !q.reject {
                self.stats.rejected_policy += 1;
                self.stats.rejected_at_drain += 1;
                if let Some(k) = q.invite_key {
                    self.invites.rejected(k);
                }
            }
            q.reject = reject;
            let cost = self.cost_of(&q);
            let done = start + cost;
            self.busy_until = done;
            if done > now {
                self.in_service = Some(InService {
                    q,
                    start,
                    done,
                    cost,
                });
                break;
            }
            self.complete(now, q, start, cost);
        }
        if changed {
            self.hop.on_queue(now, self.occupancy_now);
            if self.hop.runs_generator() {
                self.hop.on_memory(now, self.memory_occupancy(now));
            }
            self.admission.get().on_queue(now, self.occupancy_now);
            self.record_queue(now);
        }
    }

    /// When the next background job starts, if it comes before the next message: a job
    /// due while the processor is busy runs as soon as it is free, ahead of the queues.
    fn background_first(&self) -> Option<Time> {
        let start = self.busy_until.max(self.background_at?);
        let head = self.queue.front().or_else(|| self.invite_queue.front());
        match head {
            Some(q) if self.busy_until.max(q.arrived) < start => None,
            _ => Some(start),
        }
    }

    /// One background job of other processes' load (De Cicco et al.'s `d`): the processor
    /// is busy, the CPU measurements see it, the SIP logic does not. Ticks that pass while
    /// it waits fold into it, so the next one is due at the first tick after it started.
    fn run_background(&mut self, now: Time, start: Time, done: Time) {
        let cost = self.background_cost;
        self.busy_until = done;
        let mut next = self.background_at.unwrap_or(start) + BACKGROUND_PERIOD;
        while next <= start {
            next += BACKGROUND_PERIOD;
        }
        self.background_at = Some(next);
        self.stats.busy_virtual += cost;
        self.window_busy += cost;
        self.record(|| Record::Busy { start, end: done });
        self.admission.get().on_processed(
            now,
            &Completion {
                message: MessageSummary::other_request(None),
                service_time: cost,
                queueing_delay: Duration::ZERO,
                session_accepted: false,
            },
        );
    }

    /// The end of one message's service: the full work, and the policy told.
    fn complete(&mut self, now: Time, q: Queued, start: Time, cost: Duration) {
        self.stats.busy_virtual += cost;
        self.window_busy += cost;
        let summary = q.summary;
        let queueing_delay = start.saturating_since(q.arrived);
        self.stats.queueing_delay.observe(queueing_delay);
        if self.records.is_some() {
            let processed = Processed {
                call_id: q
                    .msg
                    .call_id()
                    .map(|c| q.msg.as_bytes().slice_ref(c))
                    .unwrap_or_default(),
                status: q.msg.status(),
                invite: q.msg.method() == Some(&Method::Invite),
                session_start: summary.is_session_start(),
                rejected: q.reject,
                start,
                queueing_delay,
            };
            self.record(|| Record::Busy {
                start,
                end: start + cost,
            });
            self.record(|| Record::Processed(processed));
        }
        self.process(now, q);
        self.stats.processed += 1;
        // At native speed a message's service time is the shell's measured busy time per
        // processed message (the last sample's), so the feedback generators' service-rate
        // and occupancy estimates see the real processor, as they see the virtual one.
        let service_time = if self.native_speed {
            self.cpu_sample_processed += 1;
            self.native_cost
        } else {
            cost
        };
        let completion = Completion {
            message: summary,
            service_time,
            queueing_delay,
            session_accepted: self.cur_accepted,
        };
        self.hop.on_processed(now, &completion);
        self.admission.get().on_processed(now, &completion);
    }

    /// The full work for one message.
    fn process(&mut self, now: Time, q: Queued) {
        if q.absorb {
            self.stats.absorbed_reject_acks += 1;
            return;
        }
        if q.reject && !q.in_dialog && q.msg.method() != Some(&Method::Ack) {
            self.cur_retransmission = q.retransmission;
            self.reject_stateless(now, &q);
            self.cur_retransmission = false;
            return;
        }
        self.cur_reject = q.reject;
        self.cur_accepted = false;
        self.cur_in_dialog = q.in_dialog;
        self.cur_retransmission = q.retransmission;
        self.cur_offer = q.offer;
        self.cur_arrived = q.arrived;
        let msg = q.msg;
        // Requests are validated in full (§16.3) before anything is forwarded. Responses are
        // relayed with the fields the admission parse checked (Via branch, CSeq): validating
        // them too would cost the processor a third more per call, and their recipient
        // validates them anyway.
        if msg.is_request() && msg.validate().is_err() {
            self.stats.invalid += 1;
            // A request we can answer gets 400 (§8.2 / §16.3); an ACK is dropped.
            if msg.method() != Some(&Method::Ack) && msg.header(HeaderName::Via).is_some() {
                let bad = edit::response_to(&msg, 400).build();
                self.send_stateless(q.from, bad);
            }
            self.cur_retransmission = false;
            if let Some(key) = q.hold {
                self.held.remove(&key);
            }
            return;
        }
        self.cur_hold = q.hold;
        let received = self.txn.handle_message(now, msg, q.from);
        if received == Received::Malformed {
            self.stats.invalid += 1;
        }
        self.drain_txn(now);
        // A held session the transaction user never saw (refused, absorbed) holds nothing.
        if let Some(key) = self.cur_hold.take() {
            if !matches!(self.held.get(&key), Some(Held::Waiting { .. })) {
                self.held.remove(&key);
            }
        }
        self.cur_reject = false;
        self.cur_retransmission = false;
        self.cur_offer = None;
    }

    /// A rejection is answered without a transaction (RFC 3261 §8.2.7's stateless UAS
    /// behaviour, as Kamailio's `sl_send_reply`): a 503 with our rejection To tag, sent back
    /// to where the INVITE came from (its source address, as `rport` would have it). A
    /// retransmitted INVITE is rejected again the same way, and the processor ends the ACK
    /// without a transaction, so a rejected call costs the 503 and the ACK and leaves no
    /// state.
    fn reject_stateless(&mut self, now: Time, q: &Queued) {
        if q.msg.top_via().is_err() || q.msg.header(HeaderName::CallId).is_none() {
            self.stats.invalid += 1;
            return;
        }
        let stamp = match &q.offer {
            Some(offer) => OcStamp(self.hop.stamp(now, offer)),
            None => OcStamp(None),
        };
        let params = stamp.params();
        let mut b = edit::response_to(&q.msg, 503)
            .to_tag(REJECT_TAG)
            .top_via_params(&params);
        if self.retry_after > 0 {
            b = b.retry_after(self.retry_after);
        }
        let bytes = b.build();
        self.send_stateless(q.from, bytes);
    }

    fn drain_txn(&mut self, now: Time) {
        loop {
            while let Some(t) = self.txn.poll_transmit() {
                let lane = self.lane_of(t.to.transport, &t.payload);
                self.out.push_back(Transmit {
                    to: self.via_alias(t.to, &t.payload),
                    transport: t.to.transport,
                    lane,
                    payload: t.payload,
                    origin: Some(t.origin),
                    retransmission: t.retransmission,
                });
            }
            let Some(event) = self.txn.poll_event() else {
                break;
            };
            self.on_event(now, event);
        }
    }

    /// RFC 5923: a request with `alias` in its top Via, on a connection its sender opened,
    /// makes that connection the way to the Via's sent-by address, when the sent-by host
    /// is the connection's source address (see `TcpConfig::accept_aliases`).
    fn learn_alias(&mut self, msg: &Message, connection: SocketAddr) {
        let Ok(via) = msg.top_via() else { return };
        if via.param("alias").is_none() || !via.transport.eq_ignore_ascii_case(b"TCP") {
            return;
        }
        let learned = host_ip(&via.host)
            .filter(|&ip| ip == connection.ip())
            .is_some_and(|ip| {
                let sent_by = SocketAddr::new(ip, via.port.unwrap_or(5060));
                self.aliases.learn(connection, sent_by)
            });
        if !learned {
            self.stats.tcp_aliases_refused += 1;
        }
    }

    /// Where a message to `to` goes: a request over TCP to an address a connection's peer
    /// aliased goes on that connection (its remote address).
    fn via_alias(&self, to: Peer, payload: &[u8]) -> SocketAddr {
        if to.transport != Transport::Tcp || payload.starts_with(b"SIP/2.0 ") {
            return to.addr;
        }
        self.aliases.connection_to(to.addr).unwrap_or(to.addr)
    }

    fn send_stateless(&mut self, to: Peer, payload: Bytes) {
        self.out.push_back(Transmit {
            to: self.via_alias(to, &payload),
            transport: to.transport,
            lane: Lane::Shared,
            payload,
            origin: None,
            retransmission: self.cur_retransmission,
        });
    }

    fn respond(&mut self, now: Time, tx: ServerTxId, request: &Message, status: u16) {
        let stamp = self.stamp(now);
        let params = stamp.params();
        let mut b = edit::response_to(request, status).top_via_params(&params);
        if status > 100 {
            b = b.to_tag("sl");
        }
        if status == 503 && self.retry_after > 0 {
            b = b.retry_after(self.retry_after);
        }
        let _ = self.txn.respond_bytes(now, tx, status, b.build());
    }

    /// RE: the overload parameters for a response to the request being processed, as
    /// `top_via_params` (none for anyone but a participating configured neighbour).
    fn stamp(&mut self, now: Time) -> OcStamp {
        OcStamp(self.cur_offer.as_ref().and_then(|o| self.hop.stamp(now, o)))
    }

    fn on_event(&mut self, now: Time, event: Event) {
        match event {
            Event::Request {
                tx,
                request,
                from,
                cancels,
            } => self.on_request(now, tx, request, from, cancels),
            Event::Response { tx, response } => self.on_response(now, tx, &response),
            Event::StrayResponse { response, .. } => self.relay_stray(&response),
            Event::Ack2xx { request, from, .. } => self.forward_ack(&request, from),
            Event::Refused { request, from } => {
                self.stats.refused_table_full += 1;
                if request.method() != Some(&Method::Ack) {
                    let mut b = edit::response_to(&request, 503).to_tag("sl");
                    if self.retry_after > 0 {
                        b = b.retry_after(self.retry_after);
                    }
                    self.send_stateless(from, b.build());
                }
            }
            Event::Timeout {
                tx: TxId::Client(client),
                ..
            } => self.fail_upstream(now, client, 408),
            Event::TransportError {
                origin: Origin::Client(client),
            } => match self.timer_c_cancel_of.remove(&client) {
                // Timer C's CANCEL cannot reach the next hop, so neither can the final
                // response it asks for: give the branch up now, not 64*T1 later.
                Some(invite) => self.abandon_branch(now, invite),
                None => self.fail_upstream(now, client, 500),
            },
            Event::Terminated {
                tx: TxId::Client(client),
            } => {
                if let Some(link) = self.links.remove(&client) {
                    self.by_server.remove(&link.server);
                    if let Some(hop) = link.in_transit_to {
                        self.hop.session_answered(hop);
                    }
                }
                self.timer_c_cancel_of.remove(&client);
            }
            _ => {}
        }
    }

    /// §16.9 / §16.7 step 6: a client transaction that ends without a final response
    /// becomes a 408 (timeout) or, after a transport error (a 503 from the branch), 500
    /// upstream.
    fn fail_upstream(&mut self, now: Time, client: ClientTxId, status: u16) {
        let Some(link) = self.links.get_mut(&client) else {
            return;
        };
        if let Some(hop) = link.in_transit_to.take() {
            self.hop.session_answered(hop);
        }
        if link.final_relayed {
            return;
        }
        link.final_relayed = true;
        let (server, request) = (link.server, link.request.clone());
        let offer = link.offer.clone();
        let outer = std::mem::replace(&mut self.cur_offer, offer);
        if status == 408 {
            self.stats.timeouts_408 += 1;
        } else {
            self.stats.transport_500 += 1;
        }
        self.respond(now, server, &request, status);
        self.cur_offer = outer;
    }

    fn on_request(
        &mut self,
        now: Time,
        tx: ServerTxId,
        request: Message,
        from: Peer,
        cancels: Option<ServerTxId>,
    ) {
        let method = request.method().cloned();
        // Policy rejections are INVITEs; the SE's reductions may be other requests too.
        if self.cur_reject && method != Some(Method::Ack) {
            self.respond(now, tx, &request, 503);
            return;
        }
        if method == Some(Method::Cancel) {
            if let Some(invite_server) = cancels {
                // §16.10: answer the CANCEL here, cancel the pending branch downstream.
                self.stats.cancels += 1;
                self.respond(now, tx, &request, 200);
                if let Some(&client) = self.by_server.get(&invite_server) {
                    if let Some(link) = self.links.get_mut(&client) {
                        if link.provisional_seen {
                            let _ = self.txn.cancel(now, client);
                        } else {
                            // §9.1: no CANCEL before a provisional; send it when one comes.
                            link.cancel_pending = true;
                        }
                    }
                } else if let Some(invite) = self.take_held(invite_server) {
                    // Held, never forwarded: the INVITE ends here (§16.10's 487).
                    self.respond(now, invite_server, &invite, 487);
                }
                return;
            }
            // §16.10: no matching transaction; pass the CANCEL on like any request.
        }
        if request.max_forwards() == Some(0) {
            self.stats.too_many_hops += 1;
            self.respond(now, tx, &request, 483);
            return;
        }
        let invite = method == Some(Method::Invite);
        if invite {
            // §16.2: a stateful proxy sends 100 Trying once it decides to proxy an INVITE.
            self.stats.trying_sent += 1;
            self.respond(now, tx, &request, 100);
            // Keep mode: the caller has its 100 Trying; the INVITE waits for its release.
            if let Some(key) = self.cur_hold.take() {
                if let Some(held) = self.held.get_mut(&key) {
                    if matches!(held, Held::Queued) {
                        *held = Held::Waiting {
                            server: tx,
                            request,
                            from,
                            arrived: self.cur_arrived,
                        };
                        return;
                    }
                    self.held.remove(&key);
                }
            }
        }
        self.forward(now, tx, request, from, invite);
    }

    /// Routes a request and sends it on a new client transaction (§16.6).
    fn forward(&mut self, now: Time, tx: ServerTxId, request: Message, from: Peer, invite: bool) {
        let loop_hash = self.loop_hash(&request);
        if self.has_looped(&request, loop_hash) {
            self.stats.loops += 1;
            self.respond(now, tx, &request, 482);
            return;
        }
        let (dest, pop_route) = match self.route(&request) {
            Ok(r) => r,
            Err(RouteError::NoRoute) => {
                self.stats.no_route += 1;
                self.respond(now, tx, &request, 404);
                return;
            }
            Err(RouteError::Loop) => {
                self.stats.loops += 1;
                self.respond(now, tx, &request, 482);
                return;
            }
            Err(RouteError::Forbidden) => {
                self.stats.forbidden_destinations += 1;
                self.respond(now, tx, &request, 403);
                return;
            }
        };
        self.branch_counter += 1;
        let branch = self.new_branch(loop_hash);
        let dialog_creating = matches!(request.method(), Some(Method::Invite | Method::Subscribe))
            && !self.cur_in_dialog;
        let bytes = self.edit_request(
            &request,
            from,
            &branch,
            (dest, pop_route),
            dialog_creating,
            Some(now),
        );
        let Ok(forward) = Message::parse(bytes) else {
            self.stats.invalid += 1;
            self.respond(now, tx, &request, 500);
            return;
        };
        if let Ok(client) = self.txn.send_request(now, forward, dest) {
            {
                self.stats.forwarded_requests += 1;
                self.cur_accepted = invite;
                let in_transit_to = (invite && dialog_creating && self.hop.session_sent(dest.addr))
                    .then_some(dest.addr);
                self.links.insert(
                    client,
                    Link {
                        server: tx,
                        request,
                        provisional_seen: false,
                        final_relayed: false,
                        cancel_pending: false,
                        timer_c_fired: false,
                        timer_c_at: now + self.timer_c_duration,
                        offer: self.cur_offer.clone(),
                        in_transit_to,
                        arrived: self.cur_arrived,
                    },
                );
                self.by_server.insert(tx, client);
                if invite {
                    self.timer_c
                        .push_back((now + self.timer_c_duration, client));
                }
            }
        } else {
            self.stats.refused_table_full += 1;
            self.respond(now, tx, &request, 503);
        }
    }

    /// Removes a held INVITE waiting on `server` (at most `hold_limit` per next hop).
    fn take_held(&mut self, server: ServerTxId) -> Option<Message> {
        let key = *self
            .held
            .iter()
            .find(|(_, h)| matches!(h, Held::Waiting { server: s, .. } if *s == server))?
            .0;
        match self.held.remove(&key) {
            Some(Held::Waiting { request, .. }) => Some(request),
            _ => None,
        }
    }

    fn on_response(&mut self, now: Time, client: ClientTxId, response: &Message) {
        let Some(link) = self.links.get_mut(&client) else {
            // Responses to CANCELs this proxy sent end here. A 481 to Timer C's says the
            // next hop has no such INVITE (it restarted, say): no final response will come.
            if response.status() == Some(481) {
                if let Some(invite) = self.timer_c_cancel_of.remove(&client) {
                    self.abandon_branch(now, invite);
                }
            }
            return;
        };
        if let Some(hop) = link.in_transit_to.take() {
            self.hop.session_answered(hop);
        }
        let status = response.status().unwrap_or(0);
        if status < 200 {
            link.provisional_seen = true;
            if std::mem::take(&mut link.cancel_pending) {
                if let Ok(cancel) = self.txn.cancel(now, client) {
                    if link.timer_c_fired {
                        self.timer_c_cancel_of.insert(cancel, client);
                    }
                }
            }
            if status == 100 {
                // Hop by hop (§16.7 step 5): not relayed.
                return;
            }
            // §16.7 step 2: a provisional other than 100 resets Timer C, so a callee still
            // ringing is not CANCELled while it keeps saying so.
            if !link.timer_c_fired
                && !link.final_relayed
                && link.request.method() == Some(&Method::Invite)
            {
                link.timer_c_at = now + self.timer_c_duration;
                self.timer_c.push_back((link.timer_c_at, client));
            }
        } else {
            let first_final = !std::mem::replace(&mut link.final_relayed, true);
            if status < 300 && link.request.method() == Some(&Method::Invite) {
                if first_final {
                    self.stats
                        .setup_delay
                        .observe(now.saturating_since(link.arrived));
                    // A re-INVITE was never remembered: this finds nothing for it.
                    let key = invite_key(&self.invites, &link.request);
                    self.invites.answered(key);
                }
                for peer in dialog_addresses(&link.request, response) {
                    self.dialog_peers.add(now, peer);
                }
            }
        }
        let server = link.server;
        let stamp = match &link.offer {
            Some(offer) => OcStamp(self.hop.stamp(now, offer)),
            None => OcStamp(None),
        };
        let bytes = edit::forward_response(
            response,
            &ResponseEdits {
                pop_via: true,
                top_via_params: &stamp.params(),
            },
        );
        if self.txn.respond_bytes(now, server, status, bytes).is_ok() {
            self.stats.forwarded_responses += 1;
        }
        if status < 200 {
            self.bound_timer_c_queues();
        }
    }

    /// A response that matches no transaction: a 2xx retransmission (or a 2xx that raced
    /// its transaction's end). Relayed only if it is a 2xx to an INVITE (RFC 6026 stops
    /// proxies forwarding responses that match no transaction, and forwards the 2xx
    /// retransmissions from its Accepted state instead; this proxy's INVITE server
    /// transactions end on the 2xx, so the relay stands in for that state) and its top
    /// Via is this proxy's own: a branch it made
    /// (tag checked) and its sent-by (RFC 3261 §18.1.2). Anything else is dropped and
    /// counted, so that no one can bounce responses off this proxy to a third address.
    fn relay_stray(&mut self, response: &Message) {
        let invite_2xx = response.status().is_some_and(|s| (200..300).contains(&s))
            && response.cseq().is_some_and(|c| c.method == Method::Invite);
        let ours = invite_2xx
            && response
                .top_via_branch()
                .is_some_and(|b| self.branch_is_ours(b))
            && response.top_via().is_ok_and(|v| self.sent_by_me(&v));
        let to = ours.then(|| Self::via_destination(response)).flatten();
        let Some(to) = to else {
            self.stats.dropped_stray_responses += 1;
            return;
        };
        let bytes = edit::forward_response(
            response,
            &ResponseEdits {
                pop_via: true,
                ..ResponseEdits::default()
            },
        );
        self.stats.forwarded_stray_responses += 1;
        self.send_stateless(to, bytes);
    }

    /// A Via's sent-by names this proxy: its advertised host and port, or an address of
    /// its own socket.
    fn sent_by_me(&self, via: &sluice_sip::Via<'_>) -> bool {
        let port = via.port.unwrap_or(5060);
        (host_matches_parsed(&via.host, &self.me_host, self.me_ip) && port == self.me_port)
            || host_ip(&via.host).is_some_and(|ip| self.is_local(SocketAddr::new(ip, port)))
    }

    /// Where a response goes once this proxy's Via is popped (§18.2.2 with RFC 3581): the
    /// next Via's `received`/`rport` if present, else its sent-by.
    fn via_destination(response: &Message) -> Option<Peer> {
        let via = response.vias().nth(1)?.ok()?;
        let ip = via
            .received()
            .and_then(|r| std::str::from_utf8(r).ok())
            .and_then(|r| r.parse::<IpAddr>().ok())
            .or_else(|| host_ip(&via.host))?;
        let port = match via.rport() {
            Some(Some(p)) => p,
            _ => via.port.unwrap_or(5060),
        };
        let transport = if via.transport.eq_ignore_ascii_case(b"TCP") {
            Transport::Tcp
        } else {
            Transport::Udp
        };
        Some(Peer {
            addr: SocketAddr::new(ip, port),
            transport,
        })
    }

    /// §16.11: the ACK for a 2xx is forwarded statelessly, along the route set.
    fn forward_ack(&mut self, request: &Message, from: Peer) {
        if request.max_forwards() == Some(0) {
            self.stats.too_many_hops += 1;
            return;
        }
        let loop_hash = self.loop_hash(request);
        if self.has_looped(request, loop_hash) {
            self.stats.loops += 1;
            return;
        }
        let (dest, pop_route) = match self.route(request) {
            Ok(r) => r,
            Err(RouteError::Forbidden) => {
                self.stats.forbidden_destinations += 1;
                return;
            }
            Err(_) => {
                self.stats.no_route += 1;
                return;
            }
        };
        // Stateless: the branch is a function of the received one, so a retransmitted ACK
        // gets the same branch (§16.11).
        let h = foldhash::fast::FixedState::default()
            .hash_one(request.top_via_branch().unwrap_or_default());
        let branch = format!("{BRANCH_PREFIX}a{h:x}{loop_hash:08x}");
        let bytes = self.edit_request(request, from, &branch, (dest, pop_route), false, None);
        self.stats.forwarded_acks += 1;
        self.send_stateless(dest, bytes);
    }

    /// The §16.6 edits for a request going to `to`: new Via on top (its transport `to`'s, with
    /// received/rport on the received one), Max-Forwards
    /// decremented, Record-Route for dialog-creating requests, our Route popped.
    fn edit_request(
        &mut self,
        request: &Message,
        from: Peer,
        branch: &str,
        (to, pop_route): (Peer, bool),
        record_route: bool,
        oc_towards: Option<Time>,
    ) -> Bytes {
        let from_ip = from.addr.ip();
        self.via_buf.clear();
        self.via_buf.extend_from_slice(match to.transport {
            Transport::Udp => b"SIP/2.0/UDP ",
            Transport::Tcp => b"SIP/2.0/TCP ",
        });
        self.via_buf.extend_from_slice(self.me.as_bytes());
        self.via_buf.extend_from_slice(b";branch=");
        self.via_buf.extend_from_slice(branch.as_bytes());
        if to.transport == Transport::Tcp {
            // RFC 3581: the next hop fills in the connection's port, so that a response
            // relayed by this Via alone (a repeated 2xx after the transaction ended) comes
            // back on the connection this request left on, not to a port where none is.
            self.via_buf.extend_from_slice(b";rport");
            if self.tcp.alias {
                self.via_buf.extend_from_slice(b";alias");
            }
        }
        if let Some(now) = oc_towards {
            // SE: declare support for overload control to a configured next hop.
            self.hop.append_via(now, to.addr, &mut self.via_buf);
        }
        // RFC 3581 §4: rport asked for, so fill it in, and received with it; RFC 3261
        // §18.2.1: received when the sent-by host is not the packet's source.
        let (rport, received) = match request.top_via() {
            Ok(top) if top.rport().is_some() => (true, true),
            Ok(top) => (false, host_ip(&top.host) != Some(from_ip)),
            Err(_) => (false, false),
        };
        let ip = if received {
            from_ip.to_string()
        } else {
            String::new()
        };
        let mut port = itoa::Buffer::new();
        let port = port.format(from.addr.port());
        let both = [("received", Some(ip.as_str())), ("rport", Some(port))];
        let params: &[(&str, Option<&str>)] = match (received, rport) {
            (true, true) => &both,
            (true, false) => &both[..1],
            _ => &[],
        };
        edit::forward_request(
            request,
            &RequestEdits {
                request_uri: None,
                push_via: Some(&self.via_buf),
                top_via_params: params,
                decrement_max_forwards: true,
                record_route: record_route.then_some(self.record_route.as_slice()),
                pop_route,
            },
        )
    }

    /// The request's top Route names this proxy: it was record-routed here.
    fn route_names_me(&self, request: &Message) -> bool {
        request
            .header_values(HeaderName::Route)
            .next()
            .and_then(Result::ok)
            .and_then(NameAddr::uri_of)
            .is_some_and(|u| self.names_me(&u))
    }

    fn names_me(&self, uri: &Uri<'_>) -> bool {
        let Some(host) = &uri.host else {
            return false;
        };
        let port = uri.port.unwrap_or(5060);
        (host_matches_parsed(host, &self.me_host, self.me_ip) && port == self.me_port)
            || host_ip(host).is_some_and(|ip| self.is_local(SocketAddr::new(ip, port)))
    }

    /// §16.4 and §16.5/§16.6 step 7: pop a Route naming us; then the next Route, a static
    /// rule, the Request-URI's own address (in-dialog requests carry the peer's Contact),
    /// or the default next hop.
    fn route(&self, request: &Message) -> Result<(Peer, bool), RouteError> {
        let mut routes = request.header_values(HeaderName::Route);
        let first = routes
            .next()
            .and_then(Result::ok)
            .and_then(NameAddr::uri_of);
        let pop = first.as_ref().is_some_and(|u| self.names_me(u));
        let next_route = if pop {
            routes
                .next()
                .and_then(Result::ok)
                .and_then(NameAddr::uri_of)
        } else {
            first
        };
        // The transport a target URI asks for (RFC 3263 §4.1: its `transport` parameter).
        let mut asked: Option<Transport> = None;
        let dest = if let Some(route) = next_route {
            // A next hop named by a Route must be an address: this proxy does no DNS.
            let ip = route
                .host
                .as_ref()
                .and_then(host_ip)
                .ok_or(RouteError::NoRoute)?;
            asked = uri_transport(&route);
            SocketAddr::new(ip, route.port.unwrap_or(5060))
        } else if let (false, true, Some(next_hop)) =
            (self.cur_in_dialog, self.routes.is_empty(), self.next_hop)
        {
            // A new request with no rules to match goes to the next hop: the Request-URI
            // would only be the fallback.
            next_hop
        } else {
            let ruri = request.request_uri_raw().and_then(Uri::parse);
            let rule = ruri.as_ref().and_then(|u| {
                self.routes.iter().find(|r| {
                    r.host
                        .as_ref()
                        .is_none_or(|h| u.host.as_ref().is_some_and(|uh| host_matches(uh, h)))
                        && r.user
                            .as_ref()
                            .is_none_or(|user| u.user == Some(user.as_bytes()))
                })
            });
            let target = ruri.as_ref().filter(|u| !self.names_me(u)).and_then(|u| {
                Some(SocketAddr::new(
                    host_ip(u.host.as_ref()?)?,
                    u.port.unwrap_or(5060),
                ))
            });
            let target_transport = ruri.as_ref().and_then(uri_transport);
            // In a dialog the Request-URI is the peer's Contact: go there. A new request is
            // routed by the operator's rules and next hop, the Request-URI only as a fallback.
            let in_dialog = self.cur_in_dialog;
            let candidates = if in_dialog {
                [target, rule.map(|r| r.next_hop), self.next_hop]
            } else {
                [rule.map(|r| r.next_hop), self.next_hop, target]
            };
            // Nothing but a Request-URI naming this proxy: forwarding would loop.
            let for_me = ruri.as_ref().is_some_and(|u| self.names_me(u));
            let dest = candidates.into_iter().flatten().next().ok_or(if for_me {
                RouteError::Loop
            } else {
                RouteError::NoRoute
            })?;
            if Some(dest) == target {
                asked = target_transport;
            }
            dest
        };
        if self.is_local(dest) {
            return Err(RouteError::Loop);
        }
        if !self.open_relay
            && !self.destinations.contains(&dest)
            && !self.dialog_peers.contains(self.last_now, dest)
        {
            return Err(RouteError::Forbidden);
        }
        let transport = asked.unwrap_or(
            if self.tcp.to_next_hops && self.destinations.contains(&dest) {
                Transport::Tcp
            } else {
                Transport::Udp
            },
        );
        Ok((
            Peer {
                addr: dest,
                transport,
            },
            pop,
        ))
    }

    /// Smart forwarding's test for a new INVITE (Shen and Schulzrinne 2010, Figs. 10–11):
    /// it would go over TCP, and the connection it would take still holds unsent bytes.
    fn send_queue_not_empty(&mut self, invite: &Message) -> bool {
        self.cur_in_dialog = false;
        match self.route(invite) {
            Ok((dest, _)) if dest.transport == Transport::Tcp => {
                let lane = self.lane_of(Transport::Tcp, invite.as_bytes());
                self.send_queues.get(dest.addr, lane) > 0
            }
            _ => false,
        }
    }

    /// ECS sends the INVITEs that start sessions on a connection of their own.
    fn lane_of(&self, transport: Transport, payload: &[u8]) -> Lane {
        if transport == Transport::Tcp
            && self.tcp.connection_split == ConnectionSplit::Ecs
            && crate::tcp::is_invite(payload)
        {
            Lane::Invites
        } else {
            Lane::Shared
        }
    }

    /// Who sent a message, as the hop-by-hop control knows its neighbours: the source
    /// address over UDP; over TCP, the connection's IP address with the port its top Via
    /// names (the sender's listening port, RFC 5923's view of a connection's peer), since
    /// the connection's own port is ephemeral.
    fn neighbour_address(msg: &Message, from: Peer) -> SocketAddr {
        match from.transport {
            Transport::Udp => from.addr,
            Transport::Tcp => match msg.top_via() {
                Ok(via) if msg.is_request() => {
                    SocketAddr::new(from.addr.ip(), via.port.unwrap_or(5060))
                }
                _ => from.addr,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::push_hex;

    #[test]
    fn hex_digits_are_what_format_writes() {
        for value in [0, 1, 0xf, 0x10, 0xabc, 0xffff_ffff_ffff, u64::MAX, 1 << 63] {
            for width in [1, 8, 12, 20] {
                let mut out = String::new();
                push_hex(&mut out, value, width);
                assert_eq!(out, format!("{value:0width$x}"));
            }
        }
    }
}
