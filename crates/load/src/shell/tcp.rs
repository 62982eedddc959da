//! The cores over TCP (RFC 3261 §18): the UAC connects to its next hop, either once for the
//! whole run or once per call; the UAS listens and answers on the connection each request
//! came in on. The cores stay as they are on UDP, told only that messages come and go over
//! TCP; this shell owns the connections.
//!
//! One single-threaded runtime, as on UDP. Each connection is a pair of tasks: a reader that
//! frames the byte stream into messages ([`StreamFramer`], which skips RFC 5626 keep-alive
//! CRLFs; a double-CRLF ping is answered with a CRLF pong) and hands them to the loop that
//! owns the core, and a writer that drains the connection's write queue. The queue is
//! bounded in bytes: a message that does not fit is dropped, counted, and reported to its
//! transaction as a transport error, as is one for a connection that is gone. Reading and
//! writing in separate tasks means neither side blocks the other when both have a full
//! window. A connection that breaks fails the transactions still waiting on it.
//!
//! With a connection per call the UAC's Via and Contact name its address without a port
//! (every call's connection has another), and the UAC closes the connection shortly
//! ([`CLOSE_DELAY`]) after the call ends. The UAS does not open connections of its own
//! (§18.2.2 would, to the Via's sent-by, when the request's connection is gone): a response
//! for a closed connection is a transport error.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use sluice_sip::{Limits, StreamFramer};
use sluice_time::Time;
use sluice_txn::{Peer, Transport};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::{runtime, thread_cpu_seconds, Clock, Core, Run, Stop};
use crate::stats::SecondRow;
use crate::uac::{Uac, UacConfig, UacSummary};
use crate::uas::{Uas, UasConfig, UasCounts};

/// Which connections the UAC uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connections {
    /// One for every call of the run (SIPp's `-t t1`); opened again if it breaks.
    #[default]
    Shared,
    /// A new one for each call, closed shortly after the call ends (SIPp's `-t tn`).
    PerCall,
}

#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// The UAC's connections (the UAS takes whatever its callers open).
    pub connections: Connections,
    /// Bytes a connection may hold waiting to be written.
    pub write_queue_bytes: usize,
    /// The largest message read; a larger one ends its connection, whose framing can no
    /// longer be trusted.
    pub max_message_size: usize,
    /// Most connections at once; past it the UAS closes new ones at once and the UAC's
    /// message for a new one is dropped (both counted as failed).
    pub max_connections: usize,
    /// SO_SNDBUF and SO_RCVBUF of the UAC's connections, bytes (0: the kernel's default,
    /// which it tunes). The UAS's are its listener's: [`bind_tcp_with_buffers`].
    pub send_buffer: usize,
    pub receive_buffer: usize,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            connections: Connections::Shared,
            write_queue_bytes: 4 << 20,
            max_message_size: Limits::STREAM.max_message_size,
            max_connections: 10_000,
            send_buffer: 0,
            receive_buffer: 0,
        }
    }
}

/// What happened to a run's connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TcpCounts {
    /// Connections established (connected or accepted).
    pub opened: u64,
    /// Connects that failed, connections refused at `max_connections`, and connections
    /// that ended in an error (reset, a failed write, a stream that cannot be framed).
    pub failed: u64,
    /// Connections that ended without error: closed by either side, or open at the end.
    pub closed: u64,
    /// Bytes never written: over a full write queue, for a connection that was gone or
    /// failed, or left queued when one broke.
    pub bytes_dropped: u64,
}

/// Messages and connection events from the tasks to the loop that owns the core.
const REPORT_QUEUE: usize = 1024;
/// Reports handled per wake-up before the core's timers get a turn.
const REPORT_BATCH: usize = 256;
/// Bytes read at a time: a few dozen messages, and small enough for thousands of
/// connections (one per call) to hold one each.
const READ_BUFFER: usize = 16 * 1024;
/// A writer gathers up to this many queued bytes into one write.
const WRITE_BATCH: usize = 64 * 1024;
/// How long a connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// After this side closed a connection, how long the peer has to close its own.
const LINGER: Duration = Duration::from_secs(5);
/// At the end of a run, how long the connections have to close before they are dropped.
const CLOSE_GRACE: Duration = Duration::from_millis(500);
/// How long the UAC keeps a connection open after its last call ended. A peer may take
/// the close for the end of a call it has not finished with yet: SIPp's UAS counts a call
/// whose BYE it has answered, but not yet moved past, as failed.
const CLOSE_DELAY: Duration = Duration::from_millis(200);
/// Between failed accepts (e.g. out of file descriptors), so as not to spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

type ConnId = u64;

/// What a connection is routed by: the UAC's call (or the one shared connection), the
/// UAS's caller.
trait Key: Copy + Eq + Hash {
    /// The call a broken connection carried, for [`Core::handle_connection_lost`].
    fn call(self) -> Option<u64>;
    /// The key of `n`'s own connection, where calls have their own.
    fn of_call(n: u64) -> Option<Self>;
    /// The key of a connection accepted from `remote`, where connections are accepted.
    fn of_caller(remote: SocketAddr) -> Option<Self>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum UacKey {
    Shared,
    Call(u64),
}

impl Key for UacKey {
    fn call(self) -> Option<u64> {
        match self {
            UacKey::Shared => None,
            UacKey::Call(n) => Some(n),
        }
    }
    fn of_call(n: u64) -> Option<UacKey> {
        Some(UacKey::Call(n))
    }
    fn of_caller(_: SocketAddr) -> Option<UacKey> {
        None
    }
}

impl Key for SocketAddr {
    fn call(self) -> Option<u64> {
        None
    }
    fn of_call(_: u64) -> Option<SocketAddr> {
        None
    }
    fn of_caller(remote: SocketAddr) -> Option<SocketAddr> {
        Some(remote)
    }
}

enum Report {
    Accepted(TcpStream, SocketAddr),
    AcceptFailed,
    Connected,
    ConnectFailed(ConnId),
    Message(ConnId, Bytes),
    Ended { id: ConnId, error: bool },
}

/// The loop's end of a connection.
struct Handle {
    id: ConnId,
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
}

/// A connection task that has not ended yet.
struct Task<K> {
    key: K,
    remote: SocketAddr,
    queued: Arc<AtomicUsize>,
}

enum Start {
    Connect {
        local: SocketAddr,
        remote: SocketAddr,
        /// SO_SNDBUF and SO_RCVBUF (0: the kernel's).
        buffers: (usize, usize),
    },
    Ready(TcpStream),
}

struct Conns<K> {
    cfg: TcpConfig,
    /// Where the UAC connects; the UAS opens no connections.
    target: Option<SocketAddr>,
    /// The UAC's local address for new connections (port 0 unless the one connection
    /// is bound to a port).
    bind: SocketAddr,
    route: HashMap<K, Handle>,
    tasks: HashMap<ConnId, Task<K>>,
    /// Connections of ended calls, and when to close them (in that order).
    closing: VecDeque<(Time, K)>,
    next_id: ConnId,
    reports: mpsc::Sender<Report>,
    counts: TcpCounts,
    socket_errors: u64,
}

impl<K: Key> Conns<K> {
    fn new(
        cfg: TcpConfig,
        target: Option<SocketAddr>,
        bind: SocketAddr,
        reports: mpsc::Sender<Report>,
    ) -> Conns<K> {
        Conns {
            cfg,
            target,
            bind,
            route: HashMap::new(),
            tasks: HashMap::new(),
            closing: VecDeque::new(),
            next_id: 0,
            reports,
            counts: TcpCounts::default(),
            socket_errors: 0,
        }
    }

    /// Starts a connection task for `key`, or `None` at `max_connections`.
    fn open(&mut self, key: K, remote: SocketAddr, start: Start) -> Option<&Handle> {
        if self.tasks.len() >= self.cfg.max_connections {
            self.counts.failed += 1;
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let conn = Connection {
            id,
            queued: queued.clone(),
            pong: tx.downgrade(),
            reports: self.reports.clone(),
            max_message_size: self.cfg.max_message_size,
            write_queue_bytes: self.cfg.write_queue_bytes,
        };
        tokio::spawn(conn.run(start, rx));
        self.tasks.insert(
            id,
            Task {
                key,
                remote,
                queued: queued.clone(),
            },
        );
        self.route.insert(key, Handle { id, tx, queued });
        self.route.get(&key)
    }

    /// Queues `payload` on `key`'s connection, opening one if the UAC has none; false if
    /// it was dropped.
    fn send(&mut self, key: K, payload: Bytes) -> bool {
        let limit = self.cfg.write_queue_bytes;
        let handle = match (self.route.contains_key(&key), self.target) {
            (true, _) => self.route.get(&key),
            (false, Some(remote)) => {
                let local = self.bind;
                let buffers = (self.cfg.send_buffer, self.cfg.receive_buffer);
                self.open(
                    key,
                    remote,
                    Start::Connect {
                        local,
                        remote,
                        buffers,
                    },
                )
            }
            (false, None) => None,
        };
        let Some(h) = handle else {
            return false;
        };
        let len = payload.len();
        // Added before the send, so the writer's subtraction never comes first.
        if h.queued.fetch_add(len, Ordering::Relaxed) + len > limit {
            h.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        if h.tx.send(payload).is_err() {
            h.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Sends what the core queued, and closes the connections of calls that ended.
    fn flush<C: Core>(&mut self, core: &mut C, clock: Clock, key_of: impl Fn(&crate::Out) -> K) {
        while let Some(o) = core.poll_transmit() {
            debug_assert_eq!(o.transport, Transport::Tcp);
            let len = o.payload.len() as u64;
            if !self.send(key_of(&o), o.payload) {
                self.counts.bytes_dropped += len;
                core.handle_transport_error(clock.now(), o.origin);
            }
        }
        while let Some(n) = core.poll_ended_call() {
            if self.cfg.connections == Connections::PerCall {
                if let Some(key) = K::of_call(n) {
                    self.closing.push_back((clock.now() + CLOSE_DELAY, key));
                }
            }
        }
    }

    /// Closes the connections of calls that ended [`CLOSE_DELAY`] ago. Dropping the loop's
    /// sender lets the writer finish the queue and close.
    fn close_due(&mut self, now: Time) {
        while self.closing.front().is_some_and(|(t, _)| *t <= now) {
            let (_, key) = self.closing.pop_front().expect("checked");
            self.route.remove(&key);
        }
    }

    /// Takes one report from the tasks.
    fn handle<C: Core>(&mut self, core: &mut C, clock: Clock, report: Report) {
        match report {
            Report::Message(id, payload) => {
                if let Some(task) = self.tasks.get(&id) {
                    core.handle_message(clock.now(), payload, Peer::tcp(task.remote));
                }
            }
            Report::Accepted(stream, remote) => {
                // Dropped at the limit: the caller sees its connection closed.
                if let Some(key) = K::of_caller(remote) {
                    let _ = self.open(key, remote, Start::Ready(stream));
                }
            }
            Report::AcceptFailed => self.socket_errors += 1,
            Report::Connected => self.counts.opened += 1,
            Report::ConnectFailed(id) => self.ended(core, clock, id, true),
            Report::Ended { id, error } => self.ended(core, clock, id, error),
        }
    }

    /// A connection task ended: what it had not written is dropped, and the transactions
    /// waiting on it fail, unless its key has moved on to a newer connection already.
    fn ended<C: Core>(&mut self, core: &mut C, clock: Clock, id: ConnId, error: bool) {
        let Some(task) = self.count_end(id, error) else {
            return;
        };
        if self.route.get(&task.key).is_some_and(|h| h.id == id) {
            self.route.remove(&task.key);
            core.handle_connection_lost(clock.now(), task.key.call());
        }
    }

    fn count_end(&mut self, id: ConnId, error: bool) -> Option<Task<K>> {
        if error {
            self.counts.failed += 1;
        } else {
            self.counts.closed += 1;
        }
        let task = self.tasks.remove(&id)?;
        self.counts.bytes_dropped += task.queued.load(Ordering::Relaxed) as u64;
        Some(task)
    }

    /// Closes every connection, the UAC's after [`CLOSE_DELAY`], and gives them
    /// [`CLOSE_GRACE`] to end; those still open then count as closed. Messages that
    /// arrive meanwhile are left unread: the core is done.
    async fn close_all(&mut self, reports: &mut mpsc::Receiver<Report>) {
        if self.target.is_some() {
            let until = tokio::time::Instant::now() + CLOSE_DELAY;
            self.settle(reports, until, false).await;
        }
        self.route.clear();
        self.closing.clear();
        let until = tokio::time::Instant::now() + CLOSE_GRACE;
        self.settle(reports, until, true).await;
        self.counts.closed += self.tasks.len() as u64;
        self.tasks.clear();
    }

    /// Counts what the connection tasks report until `until` (or, with `until_ended`, until
    /// none is left).
    async fn settle(
        &mut self,
        reports: &mut mpsc::Receiver<Report>,
        until: tokio::time::Instant,
        until_ended: bool,
    ) {
        while !(until_ended && self.tasks.is_empty()) {
            let report = tokio::select! {
                r = reports.recv() => r,
                () = tokio::time::sleep_until(until) => None,
            };
            match report {
                Some(Report::Connected) => self.counts.opened += 1,
                Some(Report::ConnectFailed(id)) => {
                    self.count_end(id, true);
                }
                Some(Report::Ended { id, error }) => {
                    self.count_end(id, error);
                }
                Some(_) => {}
                None => break,
            }
        }
    }
}

/// One connection's tasks.
struct Connection {
    id: ConnId,
    queued: Arc<AtomicUsize>,
    /// For the reader's pongs; weak, so that the loop dropping its sender still closes.
    pong: mpsc::WeakUnboundedSender<Bytes>,
    reports: mpsc::Sender<Report>,
    max_message_size: usize,
    write_queue_bytes: usize,
}

impl Connection {
    async fn run(self, start: Start, rx: mpsc::UnboundedReceiver<Bytes>) {
        let stream = match start {
            Start::Ready(stream) => Ok(stream),
            Start::Connect {
                local,
                remote,
                buffers,
            } => connect(local, remote, buffers).await,
        };
        let Ok(stream) = stream else {
            let _ = self.reports.send(Report::ConnectFailed(self.id)).await;
            return;
        };
        // Small messages each go out at once rather than wait for the previous one's ACK.
        let _ = stream.set_nodelay(true);
        if self.reports.send(Report::Connected).await.is_err() {
            return;
        }
        let (read, write) = stream.into_split();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(write_queue(write, rx, self.queued.clone(), done_tx));
        let error = self.read(read, done_rx).await;
        let _ = self
            .reports
            .send(Report::Ended { id: self.id, error })
            .await;
    }

    /// Frames what arrives until the peer closes (false) or something fails (true). After
    /// the writer closed this side, the peer has [`LINGER`] to close its own.
    async fn read(&self, mut read: OwnedReadHalf, mut writer: oneshot::Receiver<bool>) -> bool {
        let mut framer = StreamFramer::new(self.max_message_size);
        let mut buf = vec![0u8; READ_BUFFER];
        let mut writer_open = true;
        let linger = tokio::time::sleep(Duration::MAX);
        tokio::pin!(linger);
        // Keep-alive CRLFs since the last message: two make a ping.
        let mut crlfs = 0;
        loop {
            tokio::select! {
                r = read.read(&mut buf) => {
                    let n = match r {
                        Ok(0) => return false,
                        Ok(n) => n,
                        Err(_) => return true,
                    };
                    framer.push(&buf[..n]);
                    loop {
                        let before = framer.keepalives;
                        let Ok(message) = framer.next_message() else {
                            return true;
                        };
                        crlfs += framer.keepalives - before;
                        while crlfs >= 2 {
                            crlfs -= 2;
                            self.pong();
                        }
                        let Some(message) = message else {
                            break;
                        };
                        crlfs = 0;
                        if self.reports.send(Report::Message(self.id, message)).await.is_err() {
                            return false;
                        }
                    }
                }
                done = &mut writer, if writer_open => {
                    writer_open = false;
                    if done != Ok(false) {
                        return true;
                    }
                    linger.as_mut().reset(tokio::time::Instant::now() + LINGER);
                }
                () = &mut linger => return false,
            }
        }
    }

    /// RFC 5626 §4.4.1: a CRLF answers a double-CRLF ping. Best effort: skipped when the
    /// queue is full or the connection closing.
    fn pong(&self) {
        const PONG: &[u8] = b"\r\n";
        let Some(tx) = self.pong.upgrade() else {
            return;
        };
        let len = PONG.len();
        if self.queued.fetch_add(len, Ordering::Relaxed) + len > self.write_queue_bytes
            || tx.send(Bytes::from_static(PONG)).is_err()
        {
            self.queued.fetch_sub(len, Ordering::Relaxed);
        }
    }
}

async fn connect(
    local: SocketAddr,
    remote: SocketAddr,
    (send_buffer, receive_buffer): (usize, usize),
) -> io::Result<TcpStream> {
    let socket = if remote.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // Before the handshake, so that the window scale fits the buffer.
    if send_buffer > 0 {
        socket.set_send_buffer_size(u32::try_from(send_buffer).unwrap_or(u32::MAX))?;
    }
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(u32::try_from(receive_buffer).unwrap_or(u32::MAX))?;
    }
    // A fixed local port can be taken again while its last connection is in TIME_WAIT.
    if local.port() != 0 {
        socket.set_reuseaddr(true)?;
    }
    socket.bind(local)?;
    tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(remote))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Writes the queue in batches until the loop drops its sender (then closes this side:
/// `done` gets false) or a write fails (`done` gets true; what was queued is left counted
/// in `queued` for the loop to count as dropped).
async fn write_queue(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    queued: Arc<AtomicUsize>,
    done: oneshot::Sender<bool>,
) {
    // Grows only on a connection that has several messages queued at once.
    let mut batch = BytesMut::new();
    let error = loop {
        let Some(first) = rx.recv().await else {
            break write.shutdown().await.is_err();
        };
        let result = if rx.is_empty() {
            write.write_all(&first).await.map(|()| first.len())
        } else {
            batch.clear();
            batch.extend_from_slice(&first);
            while batch.len() < WRITE_BATCH {
                let Ok(more) = rx.try_recv() else {
                    break;
                };
                batch.extend_from_slice(&more);
            }
            write.write_all(&batch).await.map(|()| batch.len())
        };
        match result {
            Ok(n) => {
                queued.fetch_sub(n, Ordering::Relaxed);
            }
            Err(_) => break true,
        }
    };
    let _ = done.send(error);
}

async fn accept(listener: TcpListener, reports: mpsc::Sender<Report>) {
    loop {
        let report = if let Ok((stream, remote)) = listener.accept().await {
            Report::Accepted(stream, remote)
        } else {
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            Report::AcceptFailed
        };
        if reports.send(report).await.is_err() {
            return;
        }
    }
}

/// Runs `core` until it finishes or `stop`, as the UDP loop does, with the connections
/// in `conns`; `key_of` routes what the core sends.
async fn drive<C: Core, K: Key>(
    core: &mut C,
    conns: &mut Conns<K>,
    reports: &mut mpsc::Receiver<Report>,
    clock: Clock,
    stop: &Stop,
    key_of: impl Fn(&crate::Out) -> K,
    mut after_step: impl FnMut(&mut C),
) {
    let stop_at = stop.after.map(|d| Time::ZERO + d);
    loop {
        let now = clock.now();
        core.handle_timeout(now);
        conns.flush(core, clock, &key_of);
        conns.close_due(now);
        after_step(core);
        let stopped = stop
            .flag
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed));
        if core.finished() || stopped || stop_at.is_some_and(|t| now >= t) {
            break;
        }
        let mut deadline = core
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(100));
        if stop.flag.is_some() {
            deadline = deadline.min(now + Duration::from_millis(50));
        }
        if let Some(t) = stop_at {
            deadline = deadline.min(t);
        }
        if let Some(&(t, _)) = conns.closing.front() {
            deadline = deadline.min(t);
        }
        let wait = deadline.saturating_since(clock.now());
        let first = if wait.is_zero() {
            reports.try_recv().ok()
        } else {
            tokio::select! {
                r = reports.recv() => r,
                () = tokio::time::sleep(wait) => None,
            }
        };
        if let Some(report) = first {
            conns.handle(core, clock, report);
            for _ in 1..REPORT_BATCH {
                let Ok(report) = reports.try_recv() else {
                    break;
                };
                conns.handle(core, clock, report);
            }
        }
        conns.flush(core, clock, &key_of);
    }
    conns.close_all(reports).await;
}

/// Binds a non-blocking TCP listener (address reuse on, so that a restarted UAS gets its
/// port back while old connections are in TIME_WAIT).
pub fn bind_tcp(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    bind_tcp_with_buffers(addr, 0, 0)
}

/// [`bind_tcp`] whose accepted connections have these SO_SNDBUF and SO_RCVBUF sizes,
/// bytes (0: the kernel's default).
pub fn bind_tcp_with_buffers(
    addr: SocketAddr,
    send_buffer: usize,
    receive_buffer: usize,
) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if send_buffer > 0 {
        socket.set_send_buffer_size(send_buffer)?;
    }
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(receive_buffer)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The address this host sends to `remote` from, without sending anything (a UDP socket's
/// connect only picks the route).
fn route_source(remote: SocketAddr) -> io::Result<IpAddr> {
    let any: SocketAddr = if remote.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(any)?;
    socket.connect(remote)?;
    Ok(socket.local_addr()?.ip())
}

/// Runs a UAC over TCP to `cfg.next_hop` from `bind` (port 0: any) until its calls are
/// done (or `stop`), as [`super::run_uac`] does over UDP. With a shared connection it is
/// opened first, and failing to is the error; the core's `local` is its address.
pub fn run_uac_tcp(
    bind: SocketAddr,
    mut cfg: UacConfig,
    tcp: TcpConfig,
    stop: &Stop,
    mut on_row: impl FnMut(&SecondRow),
) -> io::Result<Run<UacSummary>> {
    cfg.transport = Transport::Tcp;
    let target = cfg.next_hop;
    let connections = tcp.connections;
    let rt = runtime()?;
    let cpu0 = thread_cpu_seconds();
    let started = Instant::now();
    let (summary, counts, socket_errors, call_log) = rt.block_on(async {
        let (reports_tx, mut reports) = mpsc::channel(REPORT_QUEUE);
        let first = match connections {
            Connections::Shared => {
                let stream = connect(bind, target, (tcp.send_buffer, tcp.receive_buffer))
                    .await
                    .map_err(|e| io::Error::new(e.kind(), format!("connect to {target}: {e}")))?;
                cfg.local = stream.local_addr()?;
                Some(stream)
            }
            Connections::PerCall => {
                let ip = if bind.ip().is_unspecified() {
                    route_source(target)?
                } else {
                    bind.ip()
                };
                cfg.local = SocketAddr::new(ip, 0);
                None
            }
        };
        let mut conns = Conns::<UacKey>::new(tcp, Some(target), bind, reports_tx);
        if let Some(stream) = first {
            let _ = conns.open(UacKey::Shared, target, Start::Ready(stream));
            // Later connections (after a break) take any port.
            conns.bind.set_port(0);
        }
        let clock = Clock(Instant::now());
        let mut uac = Uac::new(cfg, Time::ZERO);
        let key_of = |o: &crate::Out| match (connections, o.call) {
            (Connections::PerCall, Some(n)) => UacKey::Call(n),
            _ => UacKey::Shared,
        };
        drive(
            &mut uac,
            &mut conns,
            &mut reports,
            clock,
            stop,
            key_of,
            |u| {
                while let Some(row) = u.poll_row() {
                    on_row(&row);
                }
            },
        )
        .await;
        let call_log = uac.take_call_log(clock);
        Ok::<_, io::Error>((uac.summary(), conns.counts, conns.socket_errors, call_log))
    })?;
    Ok(Run {
        call_log,
        summary,
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_seconds().zip(cpu0).map(|(b, a)| b - a),
        socket_errors,
        tcp: Some(counts),
    })
}

/// Runs a UAS on `listener` until `stop`, answering on the connection each request came in
/// on. The core's `local` is the listener's address.
pub fn run_uas_tcp(
    listener: std::net::TcpListener,
    mut cfg: UasConfig,
    tcp: TcpConfig,
    stop: &Stop,
) -> io::Result<Run<UasCounts>> {
    cfg.local = listener.local_addr()?;
    let rt = runtime()?;
    let cpu0 = thread_cpu_seconds();
    let started = Instant::now();
    let (summary, counts, socket_errors, call_log) = rt.block_on(async {
        let listener = TcpListener::from_std(listener)?;
        let (reports_tx, mut reports) = mpsc::channel(REPORT_QUEUE);
        let acceptor = tokio::spawn(accept(listener, reports_tx.clone()));
        let mut conns = Conns::<SocketAddr>::new(tcp, None, cfg.local, reports_tx);
        let clock = Clock(Instant::now());
        let mut uas = Uas::new(cfg);
        drive(
            &mut uas,
            &mut conns,
            &mut reports,
            clock,
            stop,
            |o| o.to,
            |_| {},
        )
        .await;
        acceptor.abort();
        let call_log = uas.take_call_log(clock);
        Ok::<_, io::Error>((uas.counts(), conns.counts, conns.socket_errors, call_log))
    })?;
    Ok(Run {
        call_log,
        summary,
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_seconds().zip(cpu0).map(|(b, a)| b - a),
        socket_errors,
        tcp: Some(counts),
    })
}

/// [`super::spawn_loopback_uac`] over TCP: a UAC connecting from loopback to
/// `cfg.next_hop`, in a thread of its own.
pub fn spawn_loopback_uac_tcp(
    cfg: UacConfig,
    tcp: TcpConfig,
    stop_after: Duration,
    mut on_row: impl FnMut(&SecondRow) + Send + 'static,
) -> std::thread::JoinHandle<io::Result<Run<UacSummary>>> {
    std::thread::spawn(move || {
        let stop = Stop {
            after: Some(stop_after),
            ..Stop::default()
        };
        run_uac_tcp(super::loopback_any(), cfg, tcp, &stop, |r| on_row(r))
    })
}

/// [`super::spawn_loopback_uas`] over TCP: a UAS listening on a fresh loopback port, in a
/// thread of its own, until `stop` is set: its address and its thread.
pub fn spawn_loopback_uas_tcp(
    tcp: TcpConfig,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> io::Result<(
    SocketAddr,
    std::thread::JoinHandle<io::Result<Run<UasCounts>>>,
)> {
    let listener = bind_tcp(super::loopback_any())?;
    let addr = listener.local_addr()?;
    let flag = Stop {
        flag: Some(stop),
        ..Stop::default()
    };
    Ok((
        addr,
        std::thread::spawn(move || run_uas_tcp(listener, UasConfig::new(addr), tcp, &flag)),
    ))
}
