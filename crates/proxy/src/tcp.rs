//! The shell's TCP transport (RFC 3261 §18): a listener on the UDP port, one task per
//! connection, connections to next hops opened on demand (one per next hop, two with
//! ECS), and the limits that keep hostile or broken peers from holding memory or
//! slowing other connections. The core decides everything SIP; this module only moves
//! framed messages and measures send queues for smart forwarding.
//!
//! Back-pressure: a connection's task reads its socket when its turn comes: at once if the
//! proxy loop is free to take it (no turn in progress or queued, room in the core's queue),
//! else when the loop grants it the turn it queued for on a small bounded channel. The loop
//! grants turns and takes their messages only while the core's queue has room
//! ([`ProxyCore::has_room`]). A full queue therefore stops the reading, the kernel's receive
//! buffer fills and TCP's flow control closes the sender's window (Shen and Schulzrinne 2010
//! §5), instead of messages being dropped; and under load no connection's bytes wait in user
//! space ahead of their turn, so the receive buffer alone is what a sender may have
//! outstanding, while an idle proxy reads what arrives at once, as the simulator's does.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proxy_core::{Lane, ProxyCore, TcpConfig, Transmit, MAX_TURN_BYTES};
use sluice_sip::StreamFramer;
use sluice_time::Time;
use sluice_txn::Origin;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

/// Connections queued for a turn: more wait on the channel, reading nothing meanwhile.
const INBOUND_CAPACITY: usize = 32;
/// Bytes read from a socket by one `read()`.
const READ_CHUNK: usize = 4096;
/// Backlog of the listening socket.
const LISTEN_BACKLOG: i32 = 1024;

/// A connection's turn: the whole messages of what its socket held when the loop granted
/// the turn. The loop takes them one at a time while its queue has room, before the next
/// connection's turn, as an event loop that reads each ready socket once does; so a
/// connection's share of the reading is what its receive buffer holds, and minimising that
/// buffer limits its sender (Shen and Schulzrinne 2010, §6.1). The simulator reads its
/// connections the same way. Dropping the turn tells the connection to wait for its socket
/// again.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub from: SocketAddr,
    pub messages: std::collections::VecDeque<Bytes>,
    pub _read_again: tokio::sync::oneshot::Sender<()>,
}

/// What a connection's task sends the proxy loop.
#[derive(Debug)]
pub(crate) enum TurnRequest {
    /// A readable connection asks for a turn: the loop answers with where to send it.
    Ask(tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<Inbound>>),
    /// A turn read at once, the loop being free to take it.
    Read(Inbound),
}

/// Where a connection's task hands the turn it has read: to the loop that granted it, or
/// on the channel, read without a grant while the loop was free.
#[derive(Debug)]
enum ReadFor {
    Grant(tokio::sync::oneshot::Sender<Inbound>),
    Unasked,
}

/// A connection task's way to the proxy loop: the channel, and the flag the loop raises
/// while it is free to take a turn at once (the first task to lower it reads).
#[derive(Clone, Debug)]
pub(crate) struct LoopLink {
    pub requests: mpsc::Sender<TurnRequest>,
    pub free: Arc<std::sync::atomic::AtomicBool>,
}

/// What a connection's task tells the proxy loop.
#[derive(Debug)]
pub(crate) enum ConnEvent {
    /// The connection ended (or never opened); `unsent` are the transactions whose
    /// messages it did not write.
    Closed {
        id: u64,
        reason: CloseReason,
        unsent: Vec<Origin>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// The peer closed it, or it failed.
    Peer,
    /// Nothing either way for `idle_timeout_s`.
    Idle,
    /// A message begun and not finished within `message_timeout_s`.
    PartialMessage,
    /// Bytes that cannot be framed: a message over `max_message_size`, or a header
    /// section without a usable Content-Length.
    BadFraming,
    /// An outgoing connection could not be established in `connect_timeout_s`.
    ConnectFailed,
    /// The proxy is ending.
    Shutdown,
}

/// The counters `/metrics` shows as `sluice_proxy_tcp_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    pub open: u64,
    pub accepted: u64,
    pub opened: u64,
    pub refused_limit: u64,
    pub refused_rate: u64,
    pub connect_failed: u64,
    pub closed_peer: u64,
    pub closed_idle: u64,
    pub closed_partial_message: u64,
    pub closed_bad_framing: u64,
    /// Messages not written: the connection's write queue was full.
    pub write_queue_full: u64,
    /// Messages dropped because all connections' write queues together were full.
    pub write_queues_total_full: u64,
    /// Responses whose connection was gone.
    pub no_connection: u64,
    pub messages_in: u64,
    pub messages_out: u64,
    pub keepalives: u64,
    /// Accepted connections that carry requests to their peers (RFC 5923 `alias`).
    pub aliases: u64,
    /// `alias` requests refused (see `CoreStats::tcp_aliases_refused`).
    pub aliases_refused: u64,
}

/// One write waiting for its connection.
#[derive(Debug)]
struct Write {
    payload: Bytes,
    origin: Option<Origin>,
    /// Counted in [`Shared::queued`] (the loop's messages; not the task's own pongs).
    counted: bool,
}

/// What the proxy loop and a connection's task share.
#[derive(Debug, Default)]
struct Shared {
    /// Bytes queued in user space, not yet handed to the kernel.
    queued: AtomicUsize,
    /// The same over all connections (this one's share counted in it).
    queued_total: Arc<AtomicUsize>,
    /// Connections whose `queued` is not zero, over all connections.
    backlogged: Arc<AtomicUsize>,
    /// The stream, once connected: the loop reads its kernel send queue from it.
    stream: OnceLock<Arc<TcpStream>>,
    keepalives: AtomicUsize,
}

impl Shared {
    /// Counts `len` bytes queued.
    fn enqueue(&self, len: usize) {
        let before = self.queued.fetch_add(len, Ordering::Relaxed);
        self.queued_total.fetch_add(len, Ordering::Relaxed);
        if before == 0 && len > 0 {
            self.backlogged.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `len` bytes written (or given up).
    fn dequeue(&self, len: usize) {
        let before = self.queued.fetch_sub(len, Ordering::Relaxed);
        self.queued_total.fetch_sub(len, Ordering::Relaxed);
        if before == len && len > 0 {
            self.backlogged.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
struct Conn {
    remote: SocketAddr,
    /// An outgoing connection's lane; `None` for an accepted one.
    lane: Option<Lane>,
    writes: mpsc::UnboundedSender<Write>,
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

/// The receiving ends the proxy loop selects on, kept apart from [`Tcp`] so that the
/// loop can borrow them beside it.
#[derive(Debug)]
pub(crate) struct TcpInputs {
    pub listener: Option<TcpListener>,
    pub inbound: mpsc::Receiver<TurnRequest>,
    pub events: mpsc::UnboundedReceiver<ConnEvent>,
}

/// The connections, and what the proxy loop calls to use them.
#[derive(Debug)]
pub(crate) struct Tcp {
    config: TcpConfig,
    conns: HashMap<u64, Conn>,
    accepted: HashMap<SocketAddr, u64>,
    outgoing: HashMap<(SocketAddr, Lane), u64>,
    next_id: u64,
    link: LoopLink,
    /// Unbounded, yet bounded by the connections: each task sends one event, at its end.
    events_tx: mpsc::UnboundedSender<ConnEvent>,
    accept_tokens: f64,
    accept_refill: Instant,
    /// Bytes in all connections' write queues.
    queued_total: Arc<AtomicUsize>,
    /// Connections with bytes in their write queue.
    backlogged: Arc<AtomicUsize>,
    pub stats: TcpStats,
}

/// Raises the soft limit on open files to the hard one: every TCP connection takes a
/// descriptor, and the usual soft limit (1,024) is far below `tcp.max_connections`.
/// Returns the limit in force.
pub fn raise_open_files_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// Binds the TCP listener on `addr` with the listener's buffer sizes (set before
/// `listen`, so accepted connections inherit them, window scaling included).
pub(crate) fn listener(addr: SocketAddr, config: &TcpConfig) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    // Accepted connections inherit it, and announce it in their SYN-ACK.
    if let Some(mss) = config.segment_size() {
        socket.set_mss(mss)?;
    }
    if config.accepted_receive_buffer() > 0 {
        socket.set_recv_buffer_size(config.accepted_receive_buffer())?;
    }
    if config.listen_send_buffer > 0 {
        socket.set_send_buffer_size(config.listen_send_buffer)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

impl Tcp {
    /// Whether a readable connection may read its turn at once: the loop would take it now.
    pub(crate) fn set_reading_free(&self, free: bool) {
        self.link.free.store(free, Ordering::Release);
    }

    pub(crate) fn new(config: &TcpConfig, listener: Option<TcpListener>) -> (Tcp, TcpInputs) {
        let (inbound_tx, inbound) = mpsc::channel(INBOUND_CAPACITY);
        let (events_tx, events) = mpsc::unbounded_channel();
        let tcp = Tcp {
            config: config.clone(),
            conns: HashMap::new(),
            accepted: HashMap::new(),
            outgoing: HashMap::new(),
            next_id: 0,
            link: LoopLink {
                requests: inbound_tx,
                free: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            },
            events_tx,
            accept_tokens: config.accepts_per_second.max(1.0),
            accept_refill: Instant::now(),
            queued_total: Arc::default(),
            backlogged: Arc::default(),
            stats: TcpStats::default(),
        };
        (
            tcp,
            TcpInputs {
                listener,
                inbound,
                events,
            },
        )
    }

    /// Counters, with the keep-alives the tasks saw and the core's connection aliases.
    pub(crate) fn stats(&self, core: &sluice_proxy_core::CoreStats) -> TcpStats {
        let mut s = self.stats;
        s.aliases = core.tcp_aliases as u64;
        s.aliases_refused = core.tcp_aliases_refused;
        s.open = self.conns.len() as u64;
        s.keepalives += self
            .conns
            .values()
            .map(|c| c.shared.keepalives.load(Ordering::Relaxed) as u64)
            .sum::<u64>();
        s
    }

    /// Whether one more connection fits under `max_connections` and, for an accepted
    /// one, the accept rate.
    fn admit_accept(&mut self) -> bool {
        if self.conns.len() >= self.config.max_connections {
            self.stats.refused_limit += 1;
            return false;
        }
        let rate = self.config.accepts_per_second;
        if rate > 0.0 {
            let now = Instant::now();
            let refill = now.duration_since(self.accept_refill).as_secs_f64() * rate;
            self.accept_tokens = (self.accept_tokens + refill).min(rate.max(1.0));
            self.accept_refill = now;
            if self.accept_tokens < 1.0 {
                self.stats.refused_rate += 1;
                return false;
            }
            self.accept_tokens -= 1.0;
        }
        true
    }

    /// A connection the listener accepted: kept and served, or closed at once (counted)
    /// when over the limits.
    pub(crate) fn accepted(&mut self, stream: TcpStream, remote: SocketAddr) {
        if !self.admit_accept() {
            drop(stream);
            return;
        }
        let _ = stream.set_nodelay(true);
        self.stats.accepted += 1;
        let shared = self.new_shared();
        let stream = Arc::new(stream);
        let _ = shared.stream.set(stream.clone());
        let id = self.spawn(remote, None, shared, Connect::Ready(stream));
        self.accepted.insert(remote, id);
    }

    fn new_shared(&self) -> Arc<Shared> {
        Arc::new(Shared {
            queued_total: self.queued_total.clone(),
            backlogged: self.backlogged.clone(),
            ..Shared::default()
        })
    }

    fn spawn(
        &mut self,
        remote: SocketAddr,
        lane: Option<Lane>,
        shared: Arc<Shared>,
        connect: Connect,
    ) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let (writes_tx, writes_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_connection(
            id,
            remote,
            connect,
            shared.clone(),
            writes_rx,
            self.link.clone(),
            self.events_tx.clone(),
            self.config.clone(),
        ));
        self.conns.insert(
            id,
            Conn {
                remote,
                lane,
                writes: writes_tx,
                shared,
                task: task.abort_handle(),
            },
        );
        id
    }

    /// Sends a transmit over TCP: on the connection it names (a response on its
    /// request's connection), else on the next hop's connection for its lane, opened if
    /// there is none. Returns the origin of a transmit that could not be queued, for
    /// [`ProxyCore::handle_send_error`].
    pub(crate) fn send(&mut self, t: Transmit) -> Result<(), Option<Origin>> {
        let id = match self.outgoing.get(&(t.to, t.lane)) {
            Some(&id) => Some(id),
            None => self.accepted.get(&t.to).copied(),
        };
        let id = match id {
            Some(id) => id,
            // A response whose connection is gone has nowhere to go: its connection's
            // address is the peer's ephemeral port.
            None if t.payload.starts_with(b"SIP/2.0 ") => {
                self.stats.no_connection += 1;
                return Err(t.origin);
            }
            None => {
                if self.conns.len() >= self.config.max_connections {
                    self.stats.refused_limit += 1;
                    return Err(t.origin);
                }
                self.stats.opened += 1;
                let id = self.spawn(t.to, Some(t.lane), self.new_shared(), Connect::To(t.to));
                self.outgoing.insert((t.to, t.lane), id);
                id
            }
        };
        let conn = &self.conns[&id];
        let len = t.payload.len();
        let queued = conn.shared.queued.load(Ordering::Relaxed);
        if queued + len > self.config.write_queue_bytes {
            self.stats.write_queue_full += 1;
            return Err(t.origin);
        }
        // Past the total, a connection queues only up to its even share of it among the
        // connections that hold bytes (idle ones need none of it), and all together at most
        // twice the total; a connection holding nothing may always queue one message. So
        // peers that stop reading cannot take the room of those that read (whose queues
        // stay short), however many connections they open.
        let total_limit = self.config.write_queues_total_bytes;
        let total = self.queued_total.load(Ordering::Relaxed);
        if total + len > total_limit && queued > 0 {
            let sharing = self.backlogged.load(Ordering::Relaxed).max(1);
            let share = (total_limit / sharing).max(self.config.max_message_size);
            if queued + len > share || total + len > 2 * total_limit {
                self.stats.write_queues_total_full += 1;
                return Err(t.origin);
            }
        }
        conn.shared.enqueue(len);
        if conn
            .writes
            .send(Write {
                payload: t.payload,
                origin: t.origin,
                counted: true,
            })
            .is_err()
        {
            conn.shared.dequeue(len);
            return Err(t.origin);
        }
        self.stats.messages_out += 1;
        Ok(())
    }

    /// Smart forwarding's input: each outgoing connection's bytes not yet sent (the write
    /// queue here, and what the kernel's send queue has not sent).
    pub(crate) fn measure(&self, core: &mut ProxyCore) {
        for conn in self.conns.values() {
            let Some(lane) = conn.lane else { continue };
            let kernel = conn
                .shared
                .stream
                .get()
                // Bytes the next hop's window does not admit yet, not those in flight: on
                // a path with any round trip, or a peer that delays its ACKs, SIOCOUTQ's
                // unacknowledged bytes are rarely zero even when the next hop keeps up.
                .and_then(|s| sluice_sys::unsent_not_sent_bytes(s.as_ref()).ok())
                .unwrap_or(0);
            let unsent = conn.shared.queued.load(Ordering::Relaxed) + kernel;
            core.handle_send_queue(conn.remote, lane, unsent);
        }
    }

    /// A connection's task ended: forget it, count why, and fail the transactions whose
    /// messages it did not write.
    pub(crate) fn closed(&mut self, event: ConnEvent, core: &mut ProxyCore, now: Time) {
        let ConnEvent::Closed { id, reason, unsent } = event;
        if let Some(conn) = self.conns.remove(&id) {
            if let Some(lane) = conn.lane {
                self.outgoing.remove(&(conn.remote, lane));
                // Nothing waits on a connection that is gone.
                core.handle_send_queue(conn.remote, lane, 0);
            } else {
                self.accepted.remove(&conn.remote);
                core.handle_connection_closed(conn.remote);
            }
            self.stats.keepalives += conn.shared.keepalives.load(Ordering::Relaxed) as u64;
            // The task has ended: what it did not write leaves the total with it.
            let unwritten = conn.shared.queued.load(Ordering::Relaxed);
            conn.shared.dequeue(unwritten);
        }
        match reason {
            CloseReason::Peer | CloseReason::Shutdown => self.stats.closed_peer += 1,
            CloseReason::Idle => self.stats.closed_idle += 1,
            CloseReason::PartialMessage => self.stats.closed_partial_message += 1,
            CloseReason::BadFraming => self.stats.closed_bad_framing += 1,
            CloseReason::ConnectFailed => self.stats.connect_failed += 1,
        }
        for origin in unsent {
            core.handle_send_error(now, Some(origin));
        }
    }

    /// Whether every message queued for writing has been handed to the kernel.
    pub(crate) fn flushed(&self) -> bool {
        self.conns
            .values()
            .all(|c| c.shared.queued.load(Ordering::Relaxed) == 0)
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        for conn in self.conns.values() {
            conn.task.abort();
        }
    }
}

/// How a connection's task gets its stream.
#[derive(Debug)]
enum Connect {
    Ready(Arc<TcpStream>),
    To(SocketAddr),
}

async fn connect(to: SocketAddr, config: &TcpConfig) -> io::Result<TcpStream> {
    let socket = if to.is_ipv6() {
        TcpSocket::new_v6()?
    } else {
        TcpSocket::new_v4()?
    };
    // Before connecting, so that the SYN announces it.
    if let Some(mss) = config.segment_size() {
        socket2::SockRef::from(&socket).set_mss(mss)?;
    }
    // Before connecting, so that the window scale the handshake agrees fits them.
    if config.next_hop_receive_buffer > 0 {
        socket.set_recv_buffer_size(
            u32::try_from(config.next_hop_receive_buffer).unwrap_or(u32::MAX),
        )?;
    }
    if config.next_hop_send_buffer > 0 {
        socket
            .set_send_buffer_size(u32::try_from(config.next_hop_send_buffer).unwrap_or(u32::MAX))?;
    }
    let limit = Duration::from_secs_f64(config.connect_timeout_s);
    let stream = tokio::time::timeout(limit, socket.connect(to))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One connection: reads and frames what arrives, hands each message to the proxy loop
/// (waiting, and reading nothing more, while the loop has no room), writes what the loop
/// queues, answers keep-alive pings, and ends on the limits.
#[allow(clippy::too_many_arguments)]
async fn run_connection(
    id: u64,
    remote: SocketAddr,
    connect_how: Connect,
    shared: Arc<Shared>,
    mut writes: mpsc::UnboundedReceiver<Write>,
    link: LoopLink,
    events: mpsc::UnboundedSender<ConnEvent>,
    config: TcpConfig,
) {
    // A receive buffer minimised to a couple of messages must open its window as soon as
    // it is read: a delayed ACK (up to 40 ms on Linux) would hold the sender's bytes
    // unsent that long, and smart forwarding there would reject calls the receiver could
    // take.
    let quick_ack = match connect_how {
        Connect::Ready(_) => {
            config.listen_receive_buffer > 0 || config.invite_connection_receive_buffer > 0
        }
        Connect::To(_) => config.next_hop_receive_buffer > 0,
    };
    // An accepted connection begins with the INVITE connections' receive buffer when there
    // is one, and gets the others' if its first message is not an INVITE.
    let mut invite_buffer_pending =
        matches!(connect_how, Connect::Ready(_)) && config.invite_connection_receive_buffer > 0;
    let stream = match connect_how {
        Connect::Ready(s) => s,
        Connect::To(to) => match connect(to, &config).await {
            Ok(s) => {
                let s = Arc::new(s);
                let _ = shared.stream.set(s.clone());
                s
            }
            Err(e) => {
                tracing::debug!(%to, "cannot connect: {e}");
                let unsent = drain_unsent(&mut writes, None);
                let _ = events.send(ConnEvent::Closed {
                    id,
                    reason: CloseReason::ConnectFailed,
                    unsent,
                });
                return;
            }
        },
    };
    let idle = Duration::from_secs_f64(config.idle_timeout_s);
    let message_limit = Duration::from_secs_f64(config.message_timeout_s);
    // Made at the first byte: an idle connection holds no buffer.
    let mut framer: Option<StreamFramer> = None;
    let mut last_activity = tokio::time::Instant::now();
    // When the message now in the framer began to arrive.
    let mut message_started: Option<tokio::time::Instant> = None;
    // Framed messages not yet handed over, and the turn the loop has not finished.
    let mut waiting: std::collections::VecDeque<Bytes> = std::collections::VecDeque::new();
    let mut turn: Option<tokio::sync::oneshot::Receiver<()>> = None;
    // The socket is readable and a turn is to be asked for; asked for and not yet granted;
    // read, to be handed over as granted or, read without a grant, on the channel.
    let mut readable = false;
    let mut asked: Option<tokio::sync::oneshot::Receiver<tokio::sync::oneshot::Sender<Inbound>>> =
        None;
    let mut read_for: Option<ReadFor> = None;
    let mut unasked: Option<Inbound> = None;
    let mut writing: Option<(Write, usize)> = None;
    let mut pong = false;
    let reason = loop {
        // Frame what is buffered before reading more.
        if let (true, Some(framer)) = (turn.is_none(), framer.as_mut()) {
            let seen = framer.keepalives;
            let before = waiting.len();
            let framed = loop {
                match framer.next_message() {
                    Ok(Some(m)) => waiting.push_back(m),
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            if waiting.len() > before {
                // A message was completed: what is left began with this read, and the
                // timeout is for one message, not for a connection that always has
                // one in flight (a busy one, read in turns that end mid-message).
                message_started = None;
            }
            if framed.is_err() {
                break CloseReason::BadFraming;
            }
            if let (true, Some(first)) = (invite_buffer_pending, waiting.front()) {
                invite_buffer_pending = false;
                let size = config.accepted_receive_buffer_after(first);
                if size != config.accepted_receive_buffer() {
                    let _ = socket2::SockRef::from(&*stream).set_recv_buffer_size(size);
                }
            }
            if framer.keepalives > seen {
                // RFC 5626 §4.4.1: a double-CRLF ping gets a single CRLF pong.
                shared
                    .keepalives
                    .fetch_add((framer.keepalives - seen) as usize, Ordering::Relaxed);
                pong = true;
            }
            message_started = match (framer.buffered(), message_started) {
                (0, _) => None,
                (_, None) => Some(tokio::time::Instant::now()),
                (_, started) => started,
            };
        }
        if pong && writing.is_none() {
            pong = false;
            writing = Some((
                Write {
                    payload: Bytes::from_static(b"\r\n"),
                    origin: None,
                    counted: false,
                },
                0,
            ));
        }
        let deadline = match message_started {
            Some(started) => (started + message_limit).min(last_activity + idle),
            None => last_activity + idle,
        };
        // What the socket held when the turn was granted is read and framed: its whole
        // messages are the turn (none, if only part of one came; the loop lets it go).
        if let Some(read_for) = read_for.take() {
            let (read_again, finished) = tokio::sync::oneshot::channel();
            let this_turn = Inbound {
                from: remote,
                messages: std::mem::take(&mut waiting),
                _read_again: read_again,
            };
            match read_for {
                ReadFor::Grant(reply) => {
                    let _ = reply.send(this_turn);
                }
                ReadFor::Unasked => unasked = Some(this_turn),
            }
            turn = Some(finished);
        }
        let idle = turn.is_none() && asked.is_none();
        // The loop is free: read now, without asking.
        let read_now = idle
            && readable
            && link
                .free
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        tokio::select! {
            r = stream.readable(), if idle && !readable => {
                if r.is_err() {
                    break CloseReason::Peer;
                }
                readable = true;
            }
            permit = link.requests.reserve(), if unasked.is_some() => {
                let Ok(permit) = permit else { break CloseReason::Shutdown };
                permit.send(TurnRequest::Read(unasked.take().expect("guarded")));
            }
            permit = link.requests.reserve(), if idle && readable && !read_now => {
                let Ok(permit) = permit else { break CloseReason::Shutdown };
                let (grant, granted) = tokio::sync::oneshot::channel();
                permit.send(TurnRequest::Ask(grant));
                asked = Some(granted);
                readable = false;
            }
            granted = async {
                if read_now {
                    Ok(None)
                } else {
                    asked.as_mut().expect("guarded").await.map(Some)
                }
            }, if asked.is_some() || read_now => {
                asked = None;
                readable = false;
                match granted {
                    Ok(Some(to)) => read_for = Some(ReadFor::Grant(to)),
                    Ok(None) => read_for = Some(ReadFor::Unasked),
                    Err(_) => break CloseReason::Shutdown,
                }
                // What the socket holds now, up to a turn's worth, one read() at a time; not
                // what arrives meanwhile: the reads reopen the window, and a sender with
                // bytes queued fills it again at once, so a connection read to the end
                // would take more than its receive buffer's share. With nothing counted
                // (readiness without bytes, or the peer's FIN), read to learn which.
                let held = rustix::io::ioctl_fionread(&*stream)
                    .ok()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .unwrap_or(MAX_TURN_BYTES);
                let limit = held.min(MAX_TURN_BYTES);
                let mut chunk = [0u8; READ_CHUNK];
                let mut closed = None;
                let mut read_this_turn = 0usize;
                while read_this_turn < limit {
                    let want = (limit - read_this_turn).min(READ_CHUNK);
                    match stream.try_read(&mut chunk[..want]) {
                        Ok(0) => {
                            closed = Some(CloseReason::Peer);
                            break;
                        }
                        Ok(n) => {
                            // Made at the first byte, not at the first readiness: a new
                            // connection is reported readable once without any.
                            framer
                                .get_or_insert_with(|| StreamFramer::new(config.max_message_size))
                                .push(&chunk[..n]);
                            read_this_turn += n;
                            last_activity = tokio::time::Instant::now();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            closed = Some(CloseReason::Peer);
                            break;
                        }
                    }
                }
                if let Some(reason) = closed {
                    break reason;
                }
                if quick_ack && read_this_turn > 0 {
                    // The kernel clears it again after a while: set it on every read.
                    let _ = socket2::SockRef::from(&*stream).set_quickack(true);
                }
            }
            // Resolves when the loop drops the turn, done or not (at shutdown).
            _ = async { turn.as_mut().expect("guarded").await }, if turn.is_some() => {
                turn = None;
            }
            w = writes.recv(), if writing.is_none() => {
                // The loop dropped its sender: the connection was closed on its side.
                let Some(w) = w else { break CloseReason::Shutdown };
                writing = Some((w, 0));
            }
            r = stream.writable(), if writing.is_some() => {
                if r.is_err() {
                    break CloseReason::Peer;
                }
                if let Some((w, offset)) = writing.as_mut() {
                    match stream.try_write(&w.payload[*offset..]) {
                        Ok(n) => {
                            *offset += n;
                            last_activity = tokio::time::Instant::now();
                            if *offset == w.payload.len() {
                                if w.counted {
                                    shared.dequeue(w.payload.len());
                                }
                                writing = None;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => break CloseReason::Peer,
                    }
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                if message_started.is_some_and(|s| s + message_limit <= tokio::time::Instant::now()) {
                    break CloseReason::PartialMessage;
                }
                // Idle only if nothing waits to be written either (a peer that reads
                // nothing is caught by its write queue's limit, not here), and nothing
                // waits to be read: a connection waiting for its turn is not idle.
                let waiting_for_turn = readable || asked.is_some() || turn.is_some() || unasked.is_some();
                if writing.is_none() && !waiting_for_turn {
                    break CloseReason::Idle;
                }
                last_activity = tokio::time::Instant::now();
            }
        }
    };
    let in_progress = writing.and_then(|(w, _)| w.origin);
    let unsent = drain_unsent(&mut writes, in_progress);
    let _ = events.send(ConnEvent::Closed { id, reason, unsent });
}

/// The origins of the writes a closing connection leaves behind.
fn drain_unsent(writes: &mut mpsc::UnboundedReceiver<Write>, first: Option<Origin>) -> Vec<Origin> {
    writes.close();
    let mut unsent: Vec<Origin> = first.into_iter().collect();
    while let Ok(w) = writes.try_recv() {
        unsent.extend(w.origin);
    }
    unsent
}
