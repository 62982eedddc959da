//! The transaction layer: one table of client and server transactions, the UAS 2xx
//! retransmissions, and the timer queue that drives both.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use bytes::Bytes;
use sluice_sip::{edit, HeaderName, Message, Method};
use sluice_time::Time;
use smallvec::SmallVec;

use crate::index::{IndexHasher, KeyIndex};
use crate::slab::Slab;
use crate::timer::{TimerQueue, TimerSeq};
use crate::types::{
    ClientTxId, Config, Event, Origin, Peer, Received, Refused, Reliable2xxId, RespondError,
    ServerTxId, Stats, Timer, Transmit, TxId,
};

/// Client transaction matching (RFC 3261 §17.1.3): the branch of the top Via of the request
/// and the CSeq method (so a CANCEL, which shares the INVITE's branch, is its own transaction).
/// The branch is an inline copy, as in [`ServerKey`], so a transaction that no longer resends
/// its request can let the request's buffer go.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClientKey {
    branch: SmallVec<[u8; 48]>,
    method: Method,
}

/// Server transaction matching (RFC 3261 §17.2.3): branch, sent-by of the top Via, and method,
/// with ACK folded into INVITE so that the ACK for a 3xx–6xx reaches its INVITE transaction.
/// Branches compare byte for byte (retransmissions copy them); RFC 2543 requests without the
/// magic cookie are matched by branch too rather than by the §17.2.3 fallback rules.
///
/// The key owns copies of its branch and host, inline up to their usual lengths: slicing them
/// from the request kept its whole buffer alive for as long as the transaction lingered (32 s
/// for Timer J), and a copy of 20–40 bytes costs less than the shared buffer's reference counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ServerKey {
    branch: SmallVec<[u8; 48]>,
    method: Method,
    host: SentByHost,
    port: u16,
}

/// The host of a sent-by as written. Host names compare case-insensitively (RFC 3261
/// §19.1.4); addresses compare as text, which is how every sender copies its own Via.
#[derive(Clone, Debug)]
struct SentByHost(SmallVec<[u8; 24]>);

impl PartialEq for SentByHost {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for SentByHost {}

impl Hash for SentByHost {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Names equal ignoring case have the same length; the branch in the key already
        // spreads the hash, so hashing the bytes again would only cost time.
        self.0.len().hash(state);
    }
}

/// The sent-by (host, port) of the top Via, read without a full Via parse: the server
/// transaction lookup runs for every request, and `Message::top_via` allocates its parameter
/// list and parses addresses, which is most of the lookup's cost. Grammar (RFC 3261 §20.42):
/// `SIP / 2.0 / transport LWS host [ COLON port ]` up to the first `;` or `,`. A missing port
/// is the transport's default (5060, or 5061 for TLS), so `h` and `h:5060` match.
/// The server transaction a request belongs to (§17.2.3: top Via branch and sent-by, and
/// method, an ACK folded into its INVITE); `None` without what matching needs.
fn server_key(msg: &Message) -> Option<ServerKey> {
    let method = msg.method()?;
    let branch = msg.top_via_branch()?;
    let (host, port) = top_via_sent_by(msg)?;
    Some(ServerKey {
        branch: SmallVec::from_slice(branch),
        method: if *method == Method::Ack {
            Method::Invite
        } else {
            method.clone()
        },
        host: SentByHost(SmallVec::from_slice(host)),
        port,
    })
}

fn top_via_sent_by(msg: &Message) -> Option<(&[u8], u16)> {
    let v = msg.header(HeaderName::Via)?;
    let end = v
        .iter()
        .position(|&b| b == b';' || b == b',')
        .unwrap_or(v.len());
    let head = &v[..end];
    let mut slashes = head.iter().enumerate().filter(|(_, &b)| b == b'/');
    let (second, _) = slashes.nth(1)?;
    let rest = trim(&head[second + 1..]);
    let transport_len = rest.iter().position(|b| is_lws(*b))?;
    let (transport, hostport) = (&rest[..transport_len], trim(&rest[transport_len..]));
    let (host, port) = if hostport.first() == Some(&b'[') {
        let close = hostport.iter().position(|&b| b == b']')?;
        (&hostport[..=close], trim(&hostport[close + 1..]))
    } else {
        let colon = hostport
            .iter()
            .position(|&b| b == b':')
            .unwrap_or(hostport.len());
        (trim(&hostport[..colon]), &hostport[colon..])
    };
    if host.is_empty() || host.iter().any(|&b| is_lws(b)) {
        return None;
    }
    let port = if port.is_empty() {
        if transport.eq_ignore_ascii_case(b"TLS") {
            5061
        } else {
            5060
        }
    } else {
        let digits = trim(port.strip_prefix(b":")?);
        if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        digits
            .iter()
            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
            .try_into()
            .ok()?
    };
    Some((host, port))
}

fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_lws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|&b| !is_lws(b)).map_or(start, |p| p + 1);
    &s[start..end]
}

/// A UAS 2xx is matched to its ACK by Call-ID and CSeq number (RFC 3261 §13.3.1.4: "the ACK
/// ... for the response"); one INVITE has one 2xx at a UAS, so the number is enough.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct OkKey {
    call_id: Bytes,
    seq: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    InviteClient,
    NonInviteClient,
    InviteServer,
    NonInviteServer,
}

/// States of RFC 3261 Figures 5–8. Terminated is not a state here: a terminated transaction
/// leaves the table at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Calling,
    Trying,
    Proceeding,
    Completed,
    Confirmed,
}

#[derive(Debug)]
enum TxKey {
    Client(ClientKey),
    Server(ServerKey),
}

#[derive(Debug)]
struct Tx {
    kind: Kind,
    state: State,
    peer: Peer,
    key: TxKey,
    /// A client INVITE keeps its request until Completed: the ACK for a 3xx–6xx and a CANCEL
    /// are built from it.
    /// Boxed: only client INVITEs hold one, and inline it made every transaction 200 bytes
    /// larger.
    request: Option<Box<Message>>,
    /// What a retransmission sends: the request (client, Calling/Trying/Proceeding), the ACK
    /// (client INVITE, Completed), or the last response (server; empty before the first).
    out: Bytes,
    /// The current retransmission interval of Timer A, E or G.
    interval: Duration,
    /// Sequence of the armed retransmission timer (A, E, G), 0 if none.
    retx: TimerSeq,
    /// Sequence of the armed lifetime timer (B, D, F, H, I, J, K), 0 if none.
    life: TimerSeq,
}

#[derive(Debug)]
struct Reliable2xx {
    key: OkKey,
    response: Message,
    wire: Bytes,
    to: Peer,
    interval: Duration,
    retx: TimerSeq,
    life: TimerSeq,
}

/// Timer payload: which slab entry and which timer. The slab is the 2xx one for the 2xx timers.
#[derive(Clone, Copy, Debug)]
struct TimerRef {
    index: u32,
    timer: Timer,
}

const fn is_retransmit_timer(t: Timer) -> bool {
    matches!(t, Timer::A | Timer::E | Timer::G | Timer::Retransmit2xx)
}

/// `part` as a `Bytes` sharing `buf` when it lies inside it (no copy), else copied.
fn sub_bytes(buf: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    if start <= buf.len() && part.len() <= buf.len() - start {
        buf.slice(start..start + part.len())
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// RFC 3261 §17 transactions and the §13.3.1.4 UAS 2xx retransmission, sans IO.
///
/// Feed it with [`handle_message`](Self::handle_message), the TU calls and
/// [`handle_timeout`](Self::handle_timeout); drain [`poll_transmit`](Self::poll_transmit) and
/// [`poll_event`](Self::poll_event); sleep until [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct TransactionLayer {
    config: Config,
    txs: Slab<Tx>,
    client_index: KeyIndex,
    server_index: KeyIndex,
    oks: Slab<Reliable2xx>,
    ok_index: HashMap<OkKey, u32, IndexHasher>,
    timers: TimerQueue<TimerRef>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
    /// What the live transactions hold, by [`footprint`].
    bytes_held: usize,
}

/// A transaction's own bookkeeping (slot, index entry, key, timers), measured by
/// `cargo bench -p sluice-txn --bench memory` less the messages it keeps, rounded up.
const TX_OVERHEAD: usize = 576;

/// The bytes a transaction holds: its bookkeeping and the messages it keeps.
fn footprint(tx: &Tx) -> usize {
    TX_OVERHEAD + tx.out.len() + tx.request.as_ref().map_or(0, |r| r.as_bytes().len())
}

/// Replaces what a transaction resends, keeping the layer's byte count.
fn set_out(bytes_held: &mut usize, tx: &mut Tx, out: Bytes) {
    *bytes_held = (*bytes_held + out.len()).saturating_sub(tx.out.len());
    tx.out = out;
}

impl TransactionLayer {
    /// A layer with `config` (after [`Config::sanitized`]).
    pub fn new(config: Config) -> TransactionLayer {
        let config = config.sanitized();
        TransactionLayer {
            txs: Slab::new(config.max_transactions),
            client_index: KeyIndex::default(),
            server_index: KeyIndex::default(),
            oks: Slab::new(config.max_reliable_2xx),
            ok_index: HashMap::default(),
            timers: TimerQueue::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            bytes_held: 0,
            config,
        }
    }

    /// Bytes the live transactions hold: each one's bookkeeping (an estimate) and the
    /// messages it keeps to resend or to build an ACK or CANCEL from. What a proxy
    /// weighs against its memory budget.
    pub fn bytes_held(&self) -> usize {
        self.bytes_held
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Transactions in the table (client and server).
    pub fn len(&self) -> usize {
        self.txs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txs.len() == 0
    }

    /// 2xx responses being retransmitted for the UAS core.
    pub fn reliable_2xx_len(&self) -> usize {
        self.oks.len()
    }

    /// Armed timers.
    pub fn live_timers(&self) -> usize {
        self.timers.live()
    }

    /// Entries in the timer queue, live or awaiting lazy removal (a memory gauge).
    pub fn timer_entries(&self) -> usize {
        self.timers.entries()
    }

    // ---- outputs ----

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the transaction user.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        self.timers.next_deadline()
    }

    // ---- inputs ----

    /// Fires every timer due at or before `now`, in deadline order (insertion order on ties).
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some((_, r, _)) = self.timers.pop_due(now) {
            self.stats.fired.count(r.timer);
            match r.timer {
                Timer::Retransmit2xx | Timer::GiveUp2xx => self.fire_2xx(now, r),
                _ => self.fire_tx(now, r),
            }
        }
    }

    /// A parsed message arrived from `from`. Requests go to their server transaction or create
    /// one; responses go to their client transaction; the rest is reported (see [`Received`]).
    pub fn handle_message(&mut self, now: Time, msg: Message, from: Peer) -> Received {
        if msg.is_request() {
            self.handle_request(now, msg, from)
        } else {
            self.handle_response(now, msg, from)
        }
    }

    /// The driver could not send something this layer produced (RFC 3261 §17.1.4, §17.2.4):
    /// the TU is told and the transaction terminated. Unknown origins are ignored.
    pub fn handle_transport_error(&mut self, origin: Origin) {
        let alive = match origin {
            Origin::Client(id) => self.txs.get(id.0).is_some(),
            Origin::Server(id) => self.txs.get(id.0).is_some(),
            Origin::Reliable2xx(id) => self.oks.get(id.0).is_some(),
        };
        if !alive {
            return;
        }
        self.stats.transport_errors += 1;
        self.events.push_back(Event::TransportError { origin });
        match origin {
            Origin::Client(ClientTxId(key)) | Origin::Server(ServerTxId(key)) => {
                self.terminate(key.index);
            }
            Origin::Reliable2xx(Reliable2xxId(key)) => {
                self.remove_2xx(key.index);
            }
        }
    }

    // ---- transaction user calls ----

    /// Starts a client transaction for `request` and sends it to `to` (RFC 3261 §17.1.1.2
    /// for INVITE, §17.1.2.2 otherwise). The key is the top Via branch and the method.
    pub fn send_request(
        &mut self,
        now: Time,
        request: Message,
        to: Peer,
    ) -> Result<ClientTxId, Refused> {
        let Some(method) = request.method().cloned() else {
            return Err(Refused::Malformed);
        };
        if method == Method::Ack {
            return Err(Refused::Ack);
        }
        // Responses are matched by CSeq method (§17.1.3): a request whose CSeq names another
        // method could never see its responses.
        let (Some(branch), Some(true)) = (
            request.top_via_branch().map(SmallVec::from_slice),
            request.cseq().map(|c| c.method == method),
        ) else {
            return Err(Refused::Malformed);
        };
        let key = ClientKey { branch, method };
        if self.find_client(&key).is_some() {
            self.stats.refused.duplicate += 1;
            return Err(Refused::Duplicate);
        }
        let invite = key.method == Method::Invite;
        let out = request.wire();
        let tx = Tx {
            kind: if invite {
                Kind::InviteClient
            } else {
                Kind::NonInviteClient
            },
            state: if invite {
                State::Calling
            } else {
                State::Trying
            },
            peer: to,
            key: TxKey::Client(key),
            request: invite.then(|| Box::new(request)),
            out: out.clone(),
            interval: self.config.t1,
            retx: 0,
            life: 0,
        };
        let size = footprint(&tx);
        let Ok(slot) = self.txs.insert(tx) else {
            self.stats.refused.table_full += 1;
            return Err(Refused::TableFull);
        };
        self.bytes_held += size;
        self.index(slot.index);
        self.stats.client_created += 1;
        self.note_peak();
        let id = ClientTxId(slot);
        self.transmit(to, out, Origin::Client(id), false);
        let (retransmit, timeout) = if invite {
            (Timer::A, Timer::B)
        } else {
            (Timer::E, Timer::F)
        };
        if !to.transport.is_reliable() {
            self.arm_tx(slot.index, retransmit, now + self.config.t1);
        }
        self.arm_tx(slot.index, timeout, now + self.config.t1_x64());
        Ok(id)
    }

    /// Sends a CANCEL for a client INVITE (RFC 3261 §9.1) as a new non-INVITE client
    /// transaction to the same peer. Allowed only once a provisional response arrived
    /// (Proceeding); before that, §9.1 says to wait for one.
    pub fn cancel(&mut self, now: Time, invite: ClientTxId) -> Result<ClientTxId, Refused> {
        let Some(tx) = self.txs.get(invite.0) else {
            return Err(Refused::WrongState);
        };
        let (State::Proceeding, Some(request)) = (tx.state, tx.request.as_ref()) else {
            return Err(Refused::WrongState);
        };
        let peer = tx.peer;
        let cancel = Message::parse(edit::cancel_for(request)).map_err(|_| Refused::Malformed)?;
        self.send_request(now, cancel, peer)
    }

    /// Sends `response` on a server transaction (RFC 3261 §17.2.1 for INVITE, §17.2.2
    /// otherwise), to the peer the request came from.
    pub fn respond(
        &mut self,
        now: Time,
        tx: ServerTxId,
        response: &Message,
    ) -> Result<(), RespondError> {
        let Some(status) = response.status() else {
            return Err(RespondError::NotAResponse);
        };
        self.respond_bytes(now, tx, status, response.wire())
    }

    /// Like [`respond`](Self::respond) for a response the TU built as bytes (e.g. with
    /// `sluice_sip::edit::response_to`) and does not want to parse again.
    pub fn respond_bytes(
        &mut self,
        now: Time,
        id: ServerTxId,
        status: u16,
        payload: Bytes,
    ) -> Result<(), RespondError> {
        let index = id.0.index;
        let Some(tx) = self.txs.get_mut(id.0) else {
            return Err(RespondError::UnknownTransaction);
        };
        let peer = tx.peer;
        let origin = Origin::Server(id);
        match (tx.kind, tx.state) {
            // Figure 7: Proceeding is the only state in which the TU may respond.
            (Kind::InviteServer, State::Proceeding) => {
                if status < 200 {
                    set_out(&mut self.bytes_held, tx, payload.clone());
                    self.transmit(peer, payload, origin, false);
                } else if status < 300 {
                    // RFC 3261 (before RFC 6026): a 2xx ends the server transaction; the TU
                    // (the UAS core, or the upstream UAC through a proxy) owns its delivery.
                    self.transmit(peer, payload, origin, false);
                    self.terminate(index);
                } else {
                    set_out(&mut self.bytes_held, tx, payload.clone());
                    tx.state = State::Completed;
                    tx.interval = self.config.t1;
                    self.transmit(peer, payload, origin, false);
                    if !peer.transport.is_reliable() {
                        self.arm_tx(index, Timer::G, now + self.config.t1);
                    }
                    self.arm_tx(index, Timer::H, now + self.config.t1_x64());
                }
                Ok(())
            }
            // Figure 8.
            (Kind::NonInviteServer, State::Trying | State::Proceeding) => {
                set_out(&mut self.bytes_held, tx, payload.clone());
                self.transmit(peer, payload, origin, false);
                if status < 200 {
                    tx_state(&mut self.txs, index, State::Proceeding);
                } else {
                    tx_state(&mut self.txs, index, State::Completed);
                    self.linger(index, Timer::J, now, self.config.t1_x64());
                }
                Ok(())
            }
            (Kind::InviteServer | Kind::NonInviteServer, _) => {
                self.stats.ignored += 1;
                Err(RespondError::WrongState)
            }
            (Kind::InviteClient | Kind::NonInviteClient, _) => {
                Err(RespondError::UnknownTransaction)
            }
        }
    }

    /// Sends a 2xx to an INVITE and retransmits it, as the UAS core must (RFC 3261 §13.3.1.4):
    /// at T1, then doubling up to T2, until the ACK arrives or 64*T1 passes, when
    /// [`Event::GaveUp2xx`] tells the TU to send a BYE. The ACK is matched by Call-ID and
    /// CSeq number: [`handle_message`](Self::handle_message) does it for ACKs that match no
    /// server transaction, or the TU calls [`ack_received`](Self::ack_received).
    pub fn send_2xx_reliably(
        &mut self,
        now: Time,
        response: Message,
        to: Peer,
    ) -> Result<Reliable2xxId, Refused> {
        let (Some(200..=299), Some(cseq), Some(call_id)) =
            (response.status(), response.cseq(), response.call_id())
        else {
            return Err(Refused::Malformed);
        };
        if cseq.method != Method::Invite {
            return Err(Refused::Malformed);
        }
        let key = OkKey {
            call_id: sub_bytes(response.as_bytes(), call_id),
            seq: cseq.seq,
        };
        if self.ok_index.contains_key(&key) {
            self.stats.refused.duplicate += 1;
            return Err(Refused::Duplicate);
        }
        let wire = response.wire();
        let entry = Reliable2xx {
            key: key.clone(),
            response,
            wire: wire.clone(),
            to,
            interval: self.config.t1,
            retx: 0,
            life: 0,
        };
        let Ok(slot) = self.oks.insert(entry) else {
            self.stats.refused.reliable_2xx_full += 1;
            return Err(Refused::TableFull);
        };
        self.ok_index.insert(key, slot.index);
        self.stats.reliable_2xx_started += 1;
        let id = Reliable2xxId(slot);
        self.transmit(to, wire, Origin::Reliable2xx(id), false);
        if !to.transport.is_reliable() || self.config.retransmit_2xx_over_reliable {
            self.arm_2xx(slot.index, Timer::Retransmit2xx, now + self.config.t1);
        }
        self.arm_2xx(slot.index, Timer::GiveUp2xx, now + self.config.t1_x64());
        Ok(id)
    }

    /// An ACK for a reliably sent 2xx arrived: stops its retransmission. Returns which one,
    /// or `None` if the ACK matches none (not an ACK, or already stopped).
    pub fn ack_received(&mut self, ack: &Message) -> Option<Reliable2xxId> {
        if self.ok_index.is_empty() || ack.method() != Some(&Method::Ack) {
            return None;
        }
        let key = OkKey {
            call_id: sub_bytes(ack.as_bytes(), ack.call_id()?),
            seq: ack.cseq()?.seq,
        };
        let index = *self.ok_index.get(&key)?;
        let id = Reliable2xxId(self.oks.key_at(index));
        self.remove_2xx(index);
        self.stats.reliable_2xx_acked += 1;
        Some(id)
    }

    /// Ends a transaction on the TU's behalf, e.g. an INVITE client transaction that stays in
    /// Proceeding after the TU's Timer C and CANCEL gave up (RFC 3261 §16.8, §9.1), or a server
    /// transaction the TU will never answer. Emits `Terminated`; false if the id is dead.
    pub fn terminate_tx(&mut self, tx: TxId) -> bool {
        let key = match tx {
            TxId::Client(ClientTxId(k)) | TxId::Server(ServerTxId(k)) => k,
        };
        if self.txs.get(key).is_none() {
            return false;
        }
        self.terminate(key.index);
        true
    }

    /// The peer of the client transaction a response belongs to (matched as §17.1.3 does:
    /// top Via branch and CSeq method), or `None` if it matches none. Looks only: a caller
    /// that must trust a response's contents before the layer sees it (overload feedback)
    /// checks here that it answers a request actually sent, and to whom.
    pub fn client_peer(&self, response: &Message) -> Option<Peer> {
        let key = ClientKey {
            branch: SmallVec::from_slice(response.top_via_branch()?),
            method: response.cseq()?.method.clone(),
        };
        let index = self.find_client(&key)?;
        self.txs.at(index).map(|tx| tx.peer)
    }

    /// Whether a request matches a server transaction (§17.2.3: top Via branch and sent-by,
    /// and method, an ACK matching its INVITE). Looks only: a proxy that ends the ACKs for
    /// its own stateless rejections checks here that an ACK is not the one a transaction of
    /// its own waits for, the ACK of a rejection it relayed from downstream.
    pub fn matches_server(&self, request: &Message) -> bool {
        server_key(request).is_some_and(|key| self.find_server(&key).is_some())
    }

    /// The client transaction keyed by this branch and method (§17.1.3), and its peer:
    /// what a driver needs to tie an error report about a datagram it sent (an ICMP error
    /// returns the start of that datagram) to the transaction that sent it.
    pub fn client_for(&self, branch: &[u8], method: &Method) -> Option<(ClientTxId, Peer)> {
        let key = ClientKey {
            branch: SmallVec::from_slice(branch),
            method: method.clone(),
        };
        let index = self.find_client(&key)?;
        let tx = self.txs.at(index)?;
        Some((ClientTxId(self.txs.key_at(index)), tx.peer))
    }

    // ---- message handling ----

    /// Indexes the transaction in `slot` under the key it holds.
    fn index(&mut self, slot: u32) {
        match self.txs.at(slot).map(|tx| &tx.key) {
            Some(TxKey::Client(key)) => self.client_index.insert(key, slot),
            Some(TxKey::Server(key)) => self.server_index.insert(key, slot),
            None => {}
        }
    }

    /// The slot of the client transaction matched by `key`.
    fn find_client(&self, key: &ClientKey) -> Option<u32> {
        self.client_index.find(
            key,
            |slot| matches!(self.txs.at(slot), Some(Tx { key: TxKey::Client(k), .. }) if k == key),
        )
    }

    /// The slot of the server transaction matched by `key`.
    fn find_server(&self, key: &ServerKey) -> Option<u32> {
        self.server_index.find(
            key,
            |slot| matches!(self.txs.at(slot), Some(Tx { key: TxKey::Server(k), .. }) if k == key),
        )
    }

    fn handle_response(&mut self, now: Time, msg: Message, from: Peer) -> Received {
        let (Some(branch), Some(cseq), Some(status)) = (
            msg.top_via_branch().map(SmallVec::from_slice),
            msg.cseq(),
            msg.status(),
        ) else {
            self.stats.malformed += 1;
            return Received::Malformed;
        };
        let key = ClientKey {
            branch,
            method: cseq.method.clone(),
        };
        let Some(index) = self.find_client(&key) else {
            self.stats.stray_responses += 1;
            self.events.push_back(Event::StrayResponse {
                response: msg,
                from,
            });
            return Received::Stray;
        };
        let id = ClientTxId(self.txs.key_at(index));
        let Some(tx) = self.txs.at_mut(index) else {
            return Received::Ignored;
        };
        let peer = tx.peer;
        match (tx.kind, tx.state) {
            // Figure 5 (§17.1.1.2), INVITE client transaction.
            (Kind::InviteClient, State::Calling | State::Proceeding) => {
                if status < 200 {
                    if tx.state == State::Calling {
                        // No more retransmissions, and Timer B only guards Calling.
                        tx.state = State::Proceeding;
                        self.disarm_tx(index, Timer::A);
                        self.disarm_tx(index, Timer::B);
                    }
                    self.events.push_back(Event::Response {
                        tx: id,
                        response: msg,
                    });
                } else if status < 300 {
                    self.events.push_back(Event::Response {
                        tx: id,
                        response: msg,
                    });
                    self.terminate(index);
                } else {
                    // §17.1.1.3: the transaction itself ACKs a 3xx–6xx, to the same peer.
                    let ack = tx.request.take().map(|req| {
                        self.bytes_held = self.bytes_held.saturating_sub(req.as_bytes().len());
                        edit::ack_for_non2xx(&req, &msg)
                    });
                    tx.state = State::Completed;
                    if let Some(ack) = ack {
                        set_out(&mut self.bytes_held, tx, ack.clone());
                        self.transmit(peer, ack, Origin::Client(id), false);
                    }
                    self.disarm_tx(index, Timer::A);
                    self.disarm_tx(index, Timer::B);
                    self.events.push_back(Event::Response {
                        tx: id,
                        response: msg,
                    });
                    self.linger(index, Timer::D, now, self.config.timer_d);
                }
                Received::Delivered
            }
            (Kind::InviteClient, _) => {
                if status >= 300 {
                    // A retransmitted final response: re-send the ACK, keep it from the TU.
                    let ack = tx.out.clone();
                    self.stats.absorbed.responses += 1;
                    if !ack.is_empty() {
                        self.stats.retransmissions.ack += 1;
                        self.transmit(peer, ack, Origin::Client(id), true);
                    }
                    Received::Absorbed
                } else {
                    self.stats.ignored += 1;
                    Received::Ignored
                }
            }
            // Figure 6 (§17.1.2.2), non-INVITE client transaction.
            (Kind::NonInviteClient, State::Trying | State::Proceeding) => {
                if status < 200 {
                    // Timer E keeps running; from now on it resets to T2 (see fire_tx).
                    tx.state = State::Proceeding;
                    self.events.push_back(Event::Response {
                        tx: id,
                        response: msg,
                    });
                } else {
                    tx.state = State::Completed;
                    // Completed only absorbs retransmitted responses: the request is never
                    // sent again, and its buffer need not wait out Timer K.
                    set_out(&mut self.bytes_held, tx, Bytes::new());
                    self.disarm_tx(index, Timer::E);
                    self.disarm_tx(index, Timer::F);
                    self.events.push_back(Event::Response {
                        tx: id,
                        response: msg,
                    });
                    self.linger(index, Timer::K, now, self.config.t4);
                }
                Received::Delivered
            }
            (Kind::NonInviteClient, _) => {
                self.stats.absorbed.responses += 1;
                Received::Absorbed
            }
            (Kind::InviteServer | Kind::NonInviteServer, _) => Received::Ignored,
        }
    }

    fn handle_request(&mut self, now: Time, msg: Message, from: Peer) -> Received {
        let (Some(method), Some(key)) = (msg.method().cloned(), server_key(&msg)) else {
            self.stats.malformed += 1;
            return Received::Malformed;
        };
        let is_ack = method == Method::Ack;
        if let Some(index) = self.find_server(&key) {
            return self.server_retransmission(now, index, is_ack);
        }
        if is_ack {
            self.stats.stray_acks += 1;
            let stopped = self.ack_received(&msg);
            self.events.push_back(Event::Ack2xx {
                request: msg,
                from,
                stopped,
            });
            return Received::Stray;
        }
        if self.txs.is_full() {
            self.stats.refused.table_full += 1;
            self.events.push_back(Event::Refused { request: msg, from });
            return Received::Refused;
        }
        // §9.2: a CANCEL matches the INVITE it cancels by the same rules, method aside.
        let cancels = if method == Method::Cancel {
            let invite_key = ServerKey {
                method: Method::Invite,
                ..key.clone()
            };
            self.find_server(&invite_key)
                .map(|i| ServerTxId(self.txs.key_at(i)))
        } else {
            None
        };
        let invite = method == Method::Invite;
        let tx = Tx {
            kind: if invite {
                Kind::InviteServer
            } else {
                Kind::NonInviteServer
            },
            state: if invite {
                State::Proceeding
            } else {
                State::Trying
            },
            peer: from,
            key: TxKey::Server(key),
            request: None,
            out: Bytes::new(),
            interval: self.config.t1,
            retx: 0,
            life: 0,
        };
        let size = footprint(&tx);
        let Ok(slot) = self.txs.insert(tx) else {
            self.stats.refused.table_full += 1;
            return Received::Refused;
        };
        self.bytes_held += size;
        self.index(slot.index);
        self.stats.server_created += 1;
        self.note_peak();
        self.events.push_back(Event::Request {
            tx: ServerTxId(slot),
            request: msg,
            from,
            cancels,
        });
        Received::NewTransaction
    }

    /// A request that matched a server transaction: a retransmission, or the ACK of a 3xx–6xx.
    fn server_retransmission(&mut self, now: Time, index: u32, is_ack: bool) -> Received {
        let origin = Origin::Server(ServerTxId(self.txs.key_at(index)));
        let Some(tx) = self.txs.at_mut(index) else {
            return Received::Ignored;
        };
        let peer = tx.peer;
        if is_ack {
            // Figure 7: only an INVITE transaction can match an ACK (the key folds ACK into INVITE).
            return match tx.state {
                State::Completed => {
                    tx.state = State::Confirmed;
                    self.stats.absorbed.acks += 1;
                    self.disarm_tx(index, Timer::G);
                    self.disarm_tx(index, Timer::H);
                    self.linger(index, Timer::I, now, self.config.t4);
                    Received::Absorbed
                }
                State::Confirmed => {
                    self.stats.absorbed.acks += 1;
                    Received::Absorbed
                }
                _ => {
                    // An ACK before any final response answers nothing.
                    self.stats.ignored += 1;
                    Received::Ignored
                }
            };
        }
        self.stats.absorbed.requests += 1;
        // §17.2.1 / §17.2.2: re-send the last provisional (Proceeding) or the final response
        // (Completed); nothing yet in Trying, and nothing once Confirmed.
        if matches!(tx.state, State::Proceeding | State::Completed) && !tx.out.is_empty() {
            let out = tx.out.clone();
            self.stats.retransmissions.response += 1;
            self.transmit(peer, out, origin, true);
        }
        Received::Absorbed
    }

    // ---- timers ----

    fn fire_tx(&mut self, now: Time, r: TimerRef) {
        let index = r.index;
        let key = self.txs.key_at(index);
        let t2 = self.config.t2;
        let Some(tx) = self.txs.at_mut(index) else {
            return;
        };
        // pop_due already stopped counting this timer as live.
        if is_retransmit_timer(r.timer) {
            tx.retx = 0;
        } else {
            tx.life = 0;
        }
        let (peer, kind) = (tx.peer, tx.kind);
        let client = |k| TxId::Client(ClientTxId(k));
        match (r.timer, kind, tx.state) {
            // §17.1.1.2: A doubles without cap.
            (Timer::A, Kind::InviteClient, State::Calling) => {
                tx.interval = tx.interval.saturating_mul(2);
                let (out, next) = (tx.out.clone(), now + tx.interval);
                self.stats.retransmissions.invite += 1;
                self.transmit(peer, out, Origin::Client(ClientTxId(key)), true);
                self.arm_tx(index, Timer::A, next);
            }
            // §17.1.2.2: E doubles up to T2 in Trying, and is T2 in Proceeding.
            (Timer::E, Kind::NonInviteClient, State::Trying | State::Proceeding) => {
                tx.interval = if tx.state == State::Trying {
                    tx.interval.saturating_mul(2).min(t2)
                } else {
                    t2
                };
                let (out, next) = (tx.out.clone(), now + tx.interval);
                self.stats.retransmissions.non_invite += 1;
                self.transmit(peer, out, Origin::Client(ClientTxId(key)), true);
                self.arm_tx(index, Timer::E, next);
            }
            // §17.2.1: G doubles up to T2.
            (Timer::G, Kind::InviteServer, State::Completed) => {
                tx.interval = tx.interval.saturating_mul(2).min(t2);
                let (out, next) = (tx.out.clone(), now + tx.interval);
                self.stats.retransmissions.response += 1;
                self.transmit(peer, out, Origin::Server(ServerTxId(key)), true);
                self.arm_tx(index, Timer::G, next);
            }
            (Timer::B, Kind::InviteClient, State::Calling)
            | (Timer::F, Kind::NonInviteClient, State::Trying | State::Proceeding) => {
                self.events.push_back(Event::Timeout {
                    tx: client(key),
                    timer: r.timer,
                });
                self.terminate(index);
            }
            (Timer::H, Kind::InviteServer, State::Completed) => {
                self.events.push_back(Event::Timeout {
                    tx: TxId::Server(ServerTxId(key)),
                    timer: Timer::H,
                });
                self.terminate(index);
            }
            (Timer::D, Kind::InviteClient, State::Completed)
            | (Timer::K, Kind::NonInviteClient, State::Completed)
            | (Timer::I, Kind::InviteServer, State::Confirmed)
            | (Timer::J, Kind::NonInviteServer, State::Completed) => self.terminate(index),
            // Transitions disarm the timers of the state they leave; nothing else can fire.
            _ => {}
        }
    }

    fn fire_2xx(&mut self, now: Time, r: TimerRef) {
        let key = self.oks.key_at(r.index);
        let t2 = self.config.t2;
        let Some(ok) = self.oks.at_mut(r.index) else {
            return;
        };
        if r.timer == Timer::Retransmit2xx {
            ok.retx = 0;
            ok.interval = ok.interval.saturating_mul(2).min(t2);
            let (to, wire, next) = (ok.to, ok.wire.clone(), now + ok.interval);
            self.stats.retransmissions.ok_2xx += 1;
            self.transmit(to, wire, Origin::Reliable2xx(Reliable2xxId(key)), true);
            self.arm_2xx(r.index, Timer::Retransmit2xx, next);
        } else {
            ok.life = 0;
            if let Some(ok) = self.remove_2xx(r.index) {
                self.events.push_back(Event::GaveUp2xx {
                    id: Reliable2xxId(key),
                    response: ok.response,
                    to: ok.to,
                });
            }
        }
    }

    /// Enters a waiting state with timer `timer` (D, I, J, K): `wait` over unreliable
    /// transports, zero (terminate now) over reliable ones, as Table 4 says.
    fn linger(&mut self, index: u32, timer: Timer, now: Time, wait: Duration) {
        let unreliable = matches!(self.txs.at(index), Some(t) if !t.peer.transport.is_reliable());
        if !unreliable || wait.is_zero() {
            self.terminate(index);
        } else {
            self.arm_tx(index, timer, now + wait);
        }
    }

    fn arm_tx(&mut self, index: u32, timer: Timer, at: Time) {
        let seq = self.timers.schedule(at, TimerRef { index, timer });
        if let Some(tx) = self.txs.at_mut(index) {
            let slot = if is_retransmit_timer(timer) {
                &mut tx.retx
            } else {
                &mut tx.life
            };
            let old = std::mem::replace(slot, seq);
            self.timers.cancel(old);
        } else {
            self.timers.cancel(seq);
        }
        self.compact();
    }

    fn disarm_tx(&mut self, index: u32, timer: Timer) {
        if let Some(tx) = self.txs.at_mut(index) {
            let slot = if is_retransmit_timer(timer) {
                &mut tx.retx
            } else {
                &mut tx.life
            };
            let old = std::mem::take(slot);
            self.timers.cancel(old);
        }
    }

    fn arm_2xx(&mut self, index: u32, timer: Timer, at: Time) {
        let seq = self.timers.schedule(at, TimerRef { index, timer });
        if let Some(ok) = self.oks.at_mut(index) {
            let slot = if is_retransmit_timer(timer) {
                &mut ok.retx
            } else {
                &mut ok.life
            };
            let old = std::mem::replace(slot, seq);
            self.timers.cancel(old);
        } else {
            self.timers.cancel(seq);
        }
        self.compact();
    }

    fn compact(&mut self) {
        self.timers.maybe_compact();
    }

    // ---- bookkeeping ----

    fn transmit(&mut self, to: Peer, payload: Bytes, origin: Origin, retransmission: bool) {
        self.transmits.push_back(Transmit {
            to,
            payload,
            origin,
            retransmission,
        });
    }

    fn note_peak(&mut self) {
        self.stats.peak_transactions = self.stats.peak_transactions.max(self.txs.len());
    }

    /// Removes a transaction from the table (its timers become stale) and tells the TU.
    fn terminate(&mut self, index: u32) {
        let key = self.txs.key_at(index);
        let Some(tx) = self.txs.remove_at(index) else {
            return;
        };
        self.bytes_held = self.bytes_held.saturating_sub(footprint(&tx));
        self.timers.cancel(tx.retx);
        self.timers.cancel(tx.life);
        let id = match tx.key {
            TxKey::Client(k) => {
                self.client_index.remove(&k, index);
                TxId::Client(ClientTxId(key))
            }
            TxKey::Server(k) => {
                self.server_index.remove(&k, index);
                TxId::Server(ServerTxId(key))
            }
        };
        self.stats.terminated += 1;
        self.events.push_back(Event::Terminated { tx: id });
    }

    fn remove_2xx(&mut self, index: u32) -> Option<Reliable2xx> {
        let ok = self.oks.remove_at(index)?;
        self.timers.cancel(ok.retx);
        self.timers.cancel(ok.life);
        self.ok_index.remove(&ok.key);
        Some(ok)
    }
}

fn tx_state(txs: &mut Slab<Tx>, index: u32, state: State) {
    if let Some(tx) = txs.at_mut(index) {
        tx.state = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent_by(via: &str) -> Option<(String, u16)> {
        let text = format!("OPTIONS sip:x SIP/2.0\r\n{via}\r\nCSeq: 1 OPTIONS\r\n\r\n");
        let msg = Message::parse(Bytes::from(text)).ok()?;
        top_via_sent_by(&msg).map(|(h, p)| (String::from_utf8_lossy(h).into_owned(), p))
    }

    #[test]
    fn sent_by_reads_host_and_port_of_the_top_via_only() {
        let s = |h: &str, p| Some((h.to_string(), p));
        assert_eq!(
            sent_by("Via: SIP/2.0/UDP h.example.com;branch=z9hG4bK1"),
            s("h.example.com", 5060)
        );
        assert_eq!(
            sent_by("v: SIP/2.0/TLS h:5071, SIP/2.0/UDP other"),
            s("h", 5071)
        );
        assert_eq!(sent_by("Via: SIP/2.0/TLS h"), s("h", 5061));
        assert_eq!(
            sent_by("Via: SIP / 2.0 / UDP [2001:db8::1] : 5070 ;branch=z9hG4bK1"),
            s("[2001:db8::1]", 5070)
        );
        assert_eq!(
            sent_by("Via: SIP/2.0/UDP [2001:db8::1];rport"),
            s("[2001:db8::1]", 5060)
        );
        assert_eq!(sent_by("Via: SIP/2.0/UDP h:99999"), None);
        assert_eq!(sent_by("Via: SIP/2.0/UDP h:"), None);
        assert_eq!(sent_by("Via: SIP/2.0/UDP"), None);
        assert_eq!(sent_by("Via: garbage"), None);
        assert_eq!(sent_by("Subject: no via"), None);
    }
}
