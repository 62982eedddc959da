//! The sans-IO core of the sluice SIP proxy (RFC 3261 §16, transaction stateful, UDP):
//! [`ProxyCore`] takes datagrams and an injected `now` and hands back datagrams to send and
//! its next deadline. It never reads a clock or touches a socket, so the tokio shell of
//! `sluice-proxy` and the simulator of `sluice-sim` drive the very same code.
//!
//! # Structure
//!
//! [`ProxyCore`] is sans-IO: the shell hands it datagrams and `now`, and takes back
//! datagrams to send and the next deadline. Inside, the processing structure the overload
//! papers assume:
//!
//! 1. **Receive stage** ([`ProxyCore::handle_datagram`]): the cheap admission parse
//!    (`Message::parse`), classification (new session, other request, response) and the
//!    admission hook (a `sluice_control` [`LocalAdmission`](sluice_control::LocalAdmission)):
//!    admit, or reject with 503 (optionally with Retry-After). In-dialog requests, ACKs,
//!    CANCELs and responses are never rejected. The configured policy comes from `[control]`; any
//!    other plugs in with [`ProxyCore::set_admission`].
//!    Admitted and rejected messages enter a bounded FIFO (default 500); arrivals at a full
//!    queue are dropped and counted.
//!    Rejected INVITEs are answered statelessly (a 503 with To tag `sl-rej` sent back to
//!    the source, no transaction, as Kamailio's `sl_send_reply`), so a rejection costs the
//!    processor one cheap step (`cost_reject_us`) and the ACK for its 503, which the
//!    processor recognises by that tag and ends, an ordinary one (`cost_other_us`). An ACK
//!    with that tag that matches a server transaction is not ours to end: it answers a
//!    rejection relayed from a downstream sluice, and goes to that transaction.
//! 2. **Processor** ([`ProxyCore::handle_timeout`]): takes messages from the FIFO in order
//!    and does the full work: validation, the transaction layer (`sluice_txn`), routing,
//!    forwarding with Via/Record-Route/Max-Forwards edits, and the 503 for rejected ones.
//!
//! With `invite_queue = true`, the structure of De Cicco et al. (and of the simulator's
//! `re.invite_queue`): admitted INVITEs wait in their own drop-tail FIFO of
//! `invite_queue_capacity` (default 800); everything else, and INVITEs rejected at arrival,
//! go to the main FIFO, which the processor serves first. Only when it is empty does the
//! processor take an INVITE, through the policy's drain controller if it has one (`pi`:
//! `take` forwards or answers 503 at the rate `u(t)`; refused, it looks again at
//! `next_drain` or the policy's next 10 ms tick). Policies then see the INVITE queue's
//! length, and `on_processed` gets every message's virtual service time, so OCC and PI
//! measure the processor's occupancy. `pi` requires the INVITE queue (`--control-algorithm pi`
//! on the command line turns it on), and its queue loop caps its set-point at half of
//! `invite_queue_capacity`, the one `q_M`.
//!
//! # Emulated capacity: virtual busy time
//!
//! `cost_forward_us` (an INVITE processed in full), `cost_reject_us` (an INVITE answered
//! 503 by the admission policy) and `cost_other_us` (every other message; unset, it equals
//! `cost_forward_us`, so every processed message costs the same, Shen et al.'s model; 0 is De Cicco et al.'s, where only INVITEs cost) give the
//! processor a known capacity on any machine, as the papers' testbeds did. Their `β`, a
//! forwarded call's cost over a rejected one's, is [`ProxyConfig::emulated_beta`]. They are *virtual*: the processor does not spin.
//! It keeps a busy-until instant; the message at the head of the queue completes at
//! `max(busy_until, its arrival) + cost`, and is processed only once that instant has
//! passed, which then becomes the new busy-until. [`ProxyCore::poll_timeout`] reports the
//! head's completion instant, so the shell wakes then and processes every message whose
//! completion has come, in one batch. The average service rate is exact despite tokio's
//! 1 ms timer granularity, the same core runs unchanged in a simulator, and a load generator
//! on the same cores is not starved by a spinning proxy. With zero costs (the default) a
//! message completes at its arrival: native speed.
//!
//! The papers' collapse needs the full queue to hold more than T1 (500 ms) of work: their
//! 500 messages at 2 ms each is a second. A capacity of about 300 calls/s (7 messages a call
//! through the proxy: `cost_forward_us = 476`) with the default 500-message queue is only
//! 240 ms of work, so the queue drops instead of delaying and goodput at 2x stays near
//! capacity; with `queue_capacity = 2000` it collapses (`sluice-sim`'s
//! `tests/proxy_network.rs` runs the load generator through this core on the simulator's
//! testbed: below 0.75 of capacity at 2x, below 0.5 at 4x).
//!
//! Occupancy (the busy fraction of the processor) is the virtual busy time of the messages
//! processed in a window plus the native processing time the shell measures and reports
//! with [`ProxyCore::record_native_busy`] (the wall time of each loop iteration that did work:
//! socket reads and writes included), divided by the window (one second), capped at 1.
//!
//! # Routing (§16.4–16.6)
//!
//! A top Route naming this proxy (its advertised host and port, its bound address, or on a
//! wildcard bind any address of the host the shell reports with
//! [`ProxyCore::set_local_addresses`], loopback included) is popped. Then the first that
//! applies: the next Route (an IP address; no DNS); for requests inside a dialog the
//! Request-URI's address (the peer's Contact), then the rules and `next_hop`; for new
//! requests the first matching rule (Request-URI user and/or host), `next_hop`, then the
//! Request-URI's address. Nothing applies: 404. A route back to this proxy, or a
//! Request-URI naming it with nothing else to go on: 482. INVITE and SUBSCRIBE outside a
//! dialog get `Record-Route: <sip:ADVERTISED;lr>`, so the ACK for a 2xx and the BYE come
//! back through the proxy.
//!
//! Where a request may go is limited (`route_by_request_uri = false`, the default): to a
//! configured destination (`next_hop`, a rule's next hop, an overload neighbour or next
//! hop) or to a dialog peer (the Contacts and route set of a call whose INVITE's 2xx this
//! proxy relayed, for `dialog_peer_ttl_s`). Anything else gets 403, so that nobody can use
//! the proxy, with its retransmissions, to send traffic to a third party.
//!
//! A request is inside a dialog only if it has a To tag and its top Route names this proxy
//! (it was record-routed here). Everything else, of any method but ACK and CANCEL, is a new
//! request: admission, the SE's reduction, the per-source rate limit
//! (`new_requests_per_source`) and the transaction table's and memory budget's headroom
//! apply to it, and a rejection is a stateless 503. So a flood of OPTIONS, or of INVITEs
//! with invented To tags, is refused like new calls, and the BYEs of admitted calls never
//! are.
//!
//! Loops (§16.3 step 4): every branch this proxy makes carries a hash of what routes the
//! request (Request-URI, Route set, Call-ID, tags, CSeq number); a request that arrives
//! with a Via of this proxy's whose hash is its own has looped and gets 482.
//!
//! # What the proxy does per message
//!
//! * Receive stage: oversized datagrams and those `Message::parse` rejects are dropped and
//!   counted (no Via to answer along). The admission policy sees every message; only new
//!   requests can be rejected (see Routing: outside a dialog this proxy record-routed, not
//!   ACK or CANCEL) whose branch and Call-ID were not seen in the last 64*T1 (a bounded
//!   memory). A retransmission is never taken for a new request; one of a rejected request
//!   gets the same stateless 503, and with the INVITE queue
//!   one whose original still waits there is dropped (the copy would only cost processor
//!   time, and the original's 100 Trying stops the retransmissions).
//! * Processor: full validation of requests (`Message::validate`); an invalid request other
//!   than ACK is answered 400 statelessly, an invalid ACK is dropped, both counted. Responses
//!   are relayed on what the admission parse checked (Via branch, CSeq). Then the
//!   transaction layer: retransmissions and ACKs for 3xx–6xx are absorbed there; new requests
//!   reach the proxy logic: 100 Trying for INVITE, Max-Forwards 0 → 483, CANCEL → 200 and a
//!   CANCEL down the branch once it has a provisional (§9.1, §16.10), otherwise forward on a
//!   client transaction (a full table → 503). Responses: 100 ends here, the rest go upstream
//!   with our Via popped; timeout → 408, transport error (a send failure, or an ICMP
//!   unreachable the shell read back, [`ProxyCore::handle_unreachable`]) → 500 (§16.9 makes it
//!   a 503 from the branch, §16.7 step 6 a 500 upstream). Timer C (default
//!   181 s) CANCELs an unanswered INVITE branch and abandons it with 408 64*T1 later.
//! * Stateless: the ACK for a 2xx (branch derived from the received one, so retransmitted
//!   ACKs are identical) and 2xx responses to INVITE that match no transaction
//!   (retransmissions; sent along the next Via's `received`/`rport`), relayed only when
//!   their top Via is this proxy's own: its sent-by and a branch it made (each branch
//!   carries a tag keyed with a per-process secret, [`ProxyCore::set_branch_key`]). Any
//!   other stray response is dropped and counted.
//! * A request whose body is shorter than its Content-Length gets 400 (§18.3).
//!
//! # Bounds
//!
//! Every table and queue has a limit and a counter: the FIFOs (`queue_capacity`,
//! `invite_queue_capacity`), the transaction table (`max_transactions`, new requests
//! refused above 90 % of it), the bytes the transactions and queues hold
//! (`memory_budget_mb`: new requests refused above 90 %, every request dropped above all
//! of it), datagram size (`max_datagram`), the memory of new requests (a million entries,
//! 64·T1 each, in both its structures), the dialog peers (`max_dialog_peers`), the
//! per-source buckets (65,536, then one shared), and the SE's held sessions.
//!
//! At the end of a graceful shutdown's grace period, [`ProxyCore::abandon`] answers every
//! admitted request still open: 503 for what waits in the queues, 408 for what waits on
//! the next hop.
//!
//! # Hop-by-hop overload control (`[overload]`, RFC 7339 / RFC 7415)
//!
//! ```toml
//! [control]                  # the receiving entity, in front of the capacity
//! algorithm = "rate-abs"              # win-disc | win-cont | win-auto | rate-abs | rate-occ
//! [overload]
//! role = "re"
//! neighbours = ["127.0.0.1:5061"]     # upstream SEs, IP:port; position = neighbour id
//! ```
//!
//! ```toml
//! [overload]                 # a sending entity
//! role = "se"
//! next_hops = []                      # default: next_hop
//! [overload.client]
//! algorithms = ["rate", "loss"]       # offered in oc-algo, preferred first; or the
//!                                     # extensions "sluicewin", "sluicerate"; "loss" is
//!                                     # added last when missing (RFC 7339 §4.2)
//! ```
//!
//! The RE drives Shen et al.'s feedback generator from the receive stage, the queue and
//! the processor, and stamps `oc`, `oc-algo`, `oc-validity`, `oc-seq` on the top Via of
//! every response leaving for a configured neighbour that declared `oc` (relayed ones, its
//! own 100 and 503s, retransmissions). Others get
//! nothing, and their `oc` is counted. Rejections carry no Retry-After on either side (the
//! config refuses `retry_after_s` with `role = "re"` or `"se"`, RFC 7339 §5.10). The SE offers every out-of-dialog request
//! bound for a configured next hop to that hop's `sluice_control::overload::OcClient`
//! at the receive stage (reduced: 503 at the rejection cost; in-dialog requests, ACK,
//! CANCEL are exempt, priority ones go last), declares `;oc;oc-algo="…"` in the Via it
//! pushes, and applies the parameters of its own Via in responses from that hop's
//! address only, on a response to a request in flight to that hop (a live client
//! transaction: a forged response from the hop's address with a made-up branch is
//! ignored and counted). An `oc-seq` further ahead of the last applied than time allows is
//! ignored, and no `oc-validity` holds longer than `max_validity_ms` (30 s). What remains
//! open to a sender on the path, who sees the branches, is what TLS closes (RFC 7339
//! §11). Counters: `CoreStats::hop`, `/metrics` `sluice_proxy_overload_*`. See
//! `hop.rs`; the closed loop runs in `sluice-sim`'s `tests/proxy_network.rs` (on the
//! simulator's testbed) and `sluice-proxy`'s `tests/hop_live.rs` (on loopback sockets).
//!
//! # Not yet
//!
//! UDP only (no TCP/TLS), no DNS, one branch per request (no forking), RFC 3261's INVITE
//! transactions end on the 2xx (of RFC 6026's Accepted state the proxy keeps what matters
//! to it: the receive stage absorbs an INVITE retransmitted after its 2xx, a late 1xx is
//! dropped, and 2xx retransmissions are relayed statelessly), and a policy plugged in with
//! [`ProxyCore::set_admission`] cannot drain the INVITE queue.
//!
//! `cargo bench -p sluice-proxy-core --bench core` measures the core without sockets.

mod commented;
mod config;
mod core;
mod histogram;
mod hop;
mod host_port;
mod invites;
mod limiter;
mod peers;
mod record;
mod tcp;
mod transmit;

pub use config::{ConfigError, ProxyConfig, RouteRule, SipTimers, MAX_WORKERS};
pub use core::{CoreStats, KindCounts, ProxyCore, Reloaded, KIND_LABELS};
pub use histogram::{DelayHistogram, DELAY_BUCKETS_S};
pub use hop::{HopRole, HopStats, OverloadConfig};
pub use host_port::resolve as resolve_host_port;
pub use record::{Processed, Record};
pub use sluice_txn::Transport;
pub use tcp::{is_invite, ConnectionSplit, Lane, TcpConfig, MAX_TURN_BYTES};
pub use transmit::Transmit;
