//! The relay: a listen socket for the clients (side A), and per client an upstream socket
//! that talks to the fixed upstream (side B).
//!
//! ```text
//! client c --> listen --[forward impairment of c]--> socket of c --> upstream
//! client c <-- listen <--[backward impairment of c]-- socket of c <-- upstream
//! ```
//!
//! Each client has its own pair of [`Impairment`]s, seeded from the configured seeds
//! mixed with the client's index (in order of appearance, declared clients first) and the
//! direction, so two clients or two directions never share a loss pattern. Datagrams wait
//! in a timer queue ordered by delivery time (ties in arrival order); the impairment's
//! in-flight budget bounds it. The forward direction runs in the task that reads the
//! listen socket, each client's backward direction in a task of its own.
//!
//! Turned away and counted: clients beyond `max_clients`, datagrams from outside loopback,
//! and datagrams at a client's socket from anyone but the upstream (the relay forwards
//! nothing it was not asked to).

use std::cmp::Ordering;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_time::Time;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use crate::impairment::{stream_seed, DropReason, ImpairConfig, ImpairStats, Impairment, Verdict};

/// Clients a relay serves by default.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;
/// Kernel socket buffer size asked for (the kernel may cap it at `net.core.[rw]mem_max`).
const SOCKET_BUFFER: usize = 8 << 20;
/// Datagrams read per wake-up before the timer queue gets a turn.
const RECV_BATCH: usize = 256;
/// Room for any UDP datagram.
const MAX_DATAGRAM: usize = 65_536;

/// A relay between clients at `listen` and `upstream`.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    /// Client to upstream.
    pub forward: ImpairConfig,
    /// Upstream to client.
    pub backward: ImpairConfig,
    /// Clients whose upstream sockets are bound at start (see [`Relay::client_sockets`]);
    /// others get theirs when their first datagram comes.
    pub clients: Vec<SocketAddr>,
    pub max_clients: usize,
    /// Stop after this long (besides the [`StopHandle`]).
    pub duration: Option<Duration>,
}

impl RelayConfig {
    /// A relay impairing both directions alike (each with a stream of its own).
    pub fn new(listen: SocketAddr, upstream: SocketAddr, link: &ImpairConfig) -> RelayConfig {
        RelayConfig {
            listen,
            upstream,
            forward: *link,
            backward: *link,
            clients: Vec::new(),
            max_clients: DEFAULT_MAX_CLIENTS,
            duration: None,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let named = [("listen", self.listen), ("upstream", self.upstream)];
        let clients = self.clients.iter().map(|c| ("client", *c));
        for (name, addr) in named.into_iter().chain(clients) {
            if !addr.ip().is_loopback() {
                return Err(format!(
                    "{name} {addr}: the relay only works between loopback addresses (127.0.0.0/8, ::1)"
                ));
            }
        }
        if self.upstream.port() == 0 {
            return Err(format!("upstream {}: needs a port", self.upstream));
        }
        self.forward
            .validate()
            .map_err(|e| format!("forward.{e}"))?;
        self.backward
            .validate()
            .map_err(|e| format!("backward.{e}"))?;
        if self.max_clients == 0 || self.max_clients < self.clients.len() {
            return Err(format!(
                "max_clients ({}) must be at least 1 and hold the {} declared clients",
                self.max_clients,
                self.clients.len()
            ));
        }
        for (i, c) in self.clients.iter().enumerate() {
            if self.clients[..i].contains(c) {
                return Err(format!("client {c} is declared twice"));
            }
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err("duration must be above 0".into());
        }
        Ok(())
    }
}

/// What a relay did: each direction's impairment summed over its clients, and what the
/// relay itself turned away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RelayStats {
    pub forward: ImpairStats,
    pub backward: ImpairStats,
    /// Clients served (each with its own upstream socket).
    pub clients: u64,
    /// Datagrams from new clients when `max_clients` were already served.
    pub clients_refused: u64,
    /// Datagrams from outside loopback, or at a client's socket from anyone but the upstream.
    pub foreign: u64,
    /// Datagrams the kernel did not take when their time came.
    pub send_failed: u64,
    /// Failed receives and sockets that could not be bound.
    pub socket_errors: u64,
}

impl RelayStats {
    pub fn accumulate(&mut self, other: &RelayStats) {
        self.forward.accumulate(&other.forward);
        self.backward.accumulate(&other.backward);
        self.clients += other.clients;
        self.clients_refused += other.clients_refused;
        self.foreign += other.foreign;
        self.send_failed += other.send_failed;
        self.socket_errors += other.socket_errors;
    }

    /// Both directions together.
    pub fn both(&self) -> ImpairStats {
        let mut s = self.forward;
        s.accumulate(&self.backward);
        s
    }
}

#[derive(Debug, Default)]
struct DirectionCounters {
    forwarded: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_budget: AtomicU64,
    reordered: AtomicU64,
}

impl DirectionCounters {
    fn record(&self, v: Verdict) {
        let counter = match v {
            Verdict::Deliver { reordered, .. } => {
                if reordered {
                    self.reordered.fetch_add(1, Relaxed);
                }
                &self.forwarded
            }
            Verdict::Drop(DropReason::Loss) => &self.dropped_loss,
            Verdict::Drop(DropReason::Budget) => &self.dropped_budget,
        };
        counter.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> ImpairStats {
        ImpairStats {
            forwarded: self.forwarded.load(Relaxed),
            dropped_loss: self.dropped_loss.load(Relaxed),
            dropped_budget: self.dropped_budget.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
        }
    }
}

/// A running relay's counters, readable from any thread while it runs.
#[derive(Debug, Default)]
pub struct RelayCounters {
    forward: DirectionCounters,
    backward: DirectionCounters,
    clients: AtomicU64,
    clients_refused: AtomicU64,
    foreign: AtomicU64,
    send_failed: AtomicU64,
    socket_errors: AtomicU64,
}

impl RelayCounters {
    pub fn snapshot(&self) -> RelayStats {
        RelayStats {
            forward: self.forward.snapshot(),
            backward: self.backward.snapshot(),
            clients: self.clients.load(Relaxed),
            clients_refused: self.clients_refused.load(Relaxed),
            foreign: self.foreign.load(Relaxed),
            send_failed: self.send_failed.load(Relaxed),
            socket_errors: self.socket_errors.load(Relaxed),
        }
    }
}

/// Stops a relay from any thread; datagrams still waiting are discarded.
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// The relay's clock: `Time` since the relay was bound.
#[derive(Clone, Copy, Debug)]
struct Clock(Instant);

impl Clock {
    fn now(self) -> Time {
        Time::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn instant(self, t: Time) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.0 + Duration::from_nanos(t.as_nanos()))
    }
}

/// A datagram waiting for its delivery time.
#[derive(Debug)]
struct Pending {
    at: Time,
    seq: u64,
    socket: Arc<UdpSocket>,
    to: SocketAddr,
    payload: Box<[u8]>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed, so the max-heap pops the earliest (and, at one instant, the first queued).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The timer queue of one direction.
#[derive(Debug, Default)]
struct Queue {
    heap: BinaryHeap<Pending>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, at: Time, socket: &Arc<UdpSocket>, to: SocketAddr, payload: &[u8]) {
        self.seq += 1;
        self.heap.push(Pending {
            at,
            seq: self.seq,
            socket: socket.clone(),
            to,
            payload: payload.into(),
        });
    }

    fn send_due(&mut self, now: Time, counters: &RelayCounters) {
        while let Some(top) = self.heap.peek_mut() {
            if top.at > now {
                break;
            }
            let p = PeekMut::pop(top);
            // A link drops what it cannot send rather than stall the other datagrams.
            if p.socket.try_send_to(&p.payload, p.to).is_err() {
                counters.send_failed.fetch_add(1, Relaxed);
            }
        }
    }
}

fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer only means drops at lower rates.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket.into())
}

/// Reads and queues datagrams from `socket` (each through `on_datagram`), sends each when
/// its time comes, until stopped or `end`.
async fn pump(
    socket: &UdpSocket,
    clock: Clock,
    counters: &RelayCounters,
    stop: &mut watch::Receiver<bool>,
    end: Option<tokio::time::Instant>,
    mut on_datagram: impl FnMut(Time, SocketAddr, &[u8], &mut Queue),
) {
    let mut queue = Queue::default();
    let never = tokio::time::Instant::now() + Duration::from_hours(365 * 24);
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        let next = queue.heap.peek().map(|p| clock.instant(p.at));
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep_until(end.unwrap_or(never)), if end.is_some() => return,
            () = tokio::time::sleep_until(next.unwrap_or(never)), if next.is_some() => {}
            r = socket.readable() => {
                if r.is_err() {
                    counters.socket_errors.fetch_add(1, Relaxed);
                }
                // Allocated per wake-up, uninitialised: idle clients hold no buffer.
                let mut buf = Vec::with_capacity(MAX_DATAGRAM);
                for _ in 0..RECV_BATCH {
                    buf.clear();
                    match socket.try_recv_buf_from(&mut buf) {
                        Ok((_, from)) => on_datagram(clock.now(), from, &buf, &mut queue),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            counters.socket_errors.fetch_add(1, Relaxed);
                            break;
                        }
                    }
                }
            }
        }
        queue.send_due(clock.now(), counters);
    }
}

/// A client's side of the relay, as the listen task keeps it.
#[derive(Debug)]
struct Client {
    socket: Arc<UdpSocket>,
    forward: Impairment,
}

/// A bound relay (see the module docs); [`Relay::run`] runs it.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    listen: Arc<UdpSocket>,
    declared: Vec<(SocketAddr, Arc<UdpSocket>)>,
    counters: Arc<RelayCounters>,
    stop: StopHandle,
    clock: Clock,
}

impl Relay {
    /// Binds the listen socket and the declared clients' upstream sockets. Call it inside a
    /// tokio runtime with IO and time enabled.
    pub fn bind(config: RelayConfig) -> io::Result<Relay> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let listen = Arc::new(bind_udp(config.listen)?);
        let local = SocketAddr::new(listen.local_addr()?.ip(), 0);
        let declared = config
            .clients
            .iter()
            .map(|&c| Ok((c, Arc::new(bind_udp(local)?))))
            .collect::<io::Result<_>>()?;
        Ok(Relay {
            config,
            listen,
            declared,
            counters: Arc::default(),
            stop: StopHandle(Arc::new(watch::channel(false).0)),
            clock: Clock(Instant::now()),
        })
    }

    /// Where clients send.
    pub fn local_addr(&self) -> SocketAddr {
        self.listen
            .local_addr()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Each declared client with the address its datagrams reach the upstream from (and
    /// where the upstream's datagrams for it go).
    pub fn client_sockets(&self) -> Vec<(SocketAddr, SocketAddr)> {
        self.declared
            .iter()
            .filter_map(|(c, s)| Some((*c, s.local_addr().ok()?)))
            .collect()
    }

    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    pub fn counters(&self) -> Arc<RelayCounters> {
        self.counters.clone()
    }

    /// Relays until stopped or the configured duration is over; the final counters.
    pub async fn run(self) -> RelayStats {
        let Relay {
            config,
            listen,
            declared,
            counters,
            stop,
            clock,
        } = self;
        let mut stop_rx = stop.0.subscribe();
        let end = config.duration.map(|d| clock.instant(Time::ZERO + d));
        let mut clients: HashMap<SocketAddr, Client> = HashMap::new();
        let mut tasks = Vec::new();
        let mut add = |client: SocketAddr, socket: Arc<UdpSocket>| -> Option<Client> {
            let k = tasks.len() as u64;
            let seeded = |c: &ImpairConfig, stream: u64| ImpairConfig {
                seed: stream_seed(c.seed, 2 * k + stream),
                ..*c
            };
            // Validated with the config, so these cannot fail.
            let forward = Impairment::new(&seeded(&config.forward, 0)).ok()?;
            let backward = Impairment::new(&seeded(&config.backward, 1)).ok()?;
            counters.clients.fetch_add(1, Relaxed);
            tasks.push(tokio::spawn(backward_task(
                socket.clone(),
                listen.clone(),
                client,
                config.upstream,
                backward,
                counters.clone(),
                stop.0.subscribe(),
                clock,
            )));
            Some(Client { socket, forward })
        };
        for (c, socket) in declared {
            if let Some(client) = add(c, socket) {
                clients.insert(c, client);
            }
        }
        let local = SocketAddr::new(config.listen.ip(), 0);
        pump(
            &listen,
            clock,
            &counters,
            &mut stop_rx,
            end,
            |now, from, payload, queue| {
                if !from.ip().is_loopback() {
                    counters.foreign.fetch_add(1, Relaxed);
                    return;
                }
                if !clients.contains_key(&from) {
                    if clients.len() >= config.max_clients {
                        counters.clients_refused.fetch_add(1, Relaxed);
                        return;
                    }
                    let Ok(socket) = bind_udp(local) else {
                        counters.socket_errors.fetch_add(1, Relaxed);
                        return;
                    };
                    let Some(client) = add(from, Arc::new(socket)) else {
                        return;
                    };
                    clients.insert(from, client);
                }
                let Some(client) = clients.get_mut(&from) else {
                    return;
                };
                let v = client.forward.on_packet(now, payload.len());
                counters.forward.record(v);
                if let Verdict::Deliver { at, .. } = v {
                    queue.push(at, &client.socket, config.upstream, payload);
                }
            },
        )
        .await;
        stop.stop();
        for t in tasks {
            let _ = t.await;
        }
        counters.snapshot()
    }
}

/// One client's backward direction: what the upstream sends to the client's socket goes,
/// impaired, to the client from the listen socket.
#[allow(clippy::too_many_arguments)] // the task's whole state, moved in once
async fn backward_task(
    socket: Arc<UdpSocket>,
    listen: Arc<UdpSocket>,
    client: SocketAddr,
    upstream: SocketAddr,
    mut link: Impairment,
    counters: Arc<RelayCounters>,
    mut stop: watch::Receiver<bool>,
    clock: Clock,
) {
    pump(
        &socket,
        clock,
        &counters,
        &mut stop,
        None,
        |now, from, payload, queue| {
            if from != upstream {
                counters.foreign.fetch_add(1, Relaxed);
                return;
            }
            let v = link.on_packet(now, payload.len());
            counters.backward.record(v);
            if let Verdict::Deliver { at, .. } = v {
                queue.push(at, &listen, client, payload);
            }
        },
    )
    .await;
}

/// Addresses of a relay started by [`spawn`].
#[derive(Clone, Debug)]
pub struct RelayAddrs {
    /// Where its clients send.
    pub listen: SocketAddr,
    /// The declared clients and their upstream sockets' addresses, in the order declared.
    pub clients: Vec<(SocketAddr, SocketAddr)>,
}

/// Relays running together on a thread of their own.
#[derive(Debug)]
pub struct RelayThread {
    /// In the order of the configs given to [`spawn`].
    pub relays: Vec<RelayAddrs>,
    stops: Vec<StopHandle>,
    counters: Vec<Arc<RelayCounters>>,
    thread: std::thread::JoinHandle<Vec<RelayStats>>,
}

impl RelayThread {
    /// The counters so far, per relay.
    pub fn stats(&self) -> Vec<RelayStats> {
        self.counters.iter().map(|c| c.snapshot()).collect()
    }

    /// Stops every relay and waits for the thread; the final counters, per relay.
    pub fn stop(self) -> Vec<RelayStats> {
        for s in &self.stops {
            s.stop();
        }
        let counters = self.counters;
        self.thread
            .join()
            .unwrap_or_else(|_| counters.iter().map(|c| c.snapshot()).collect())
    }
}

type Started = (Vec<RelayAddrs>, Vec<StopHandle>, Vec<Arc<RelayCounters>>);

/// Binds the relays on a new thread with a single-threaded runtime and runs them there;
/// returns once they are bound.
pub fn spawn(configs: Vec<RelayConfig>) -> io::Result<RelayThread> {
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<Started>>();
    let thread = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(e));
                return Vec::new();
            }
        };
        rt.block_on(async move {
            let relays = match configs
                .into_iter()
                .map(Relay::bind)
                .collect::<io::Result<Vec<Relay>>>()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return Vec::new();
                }
            };
            let started = (
                relays
                    .iter()
                    .map(|r| RelayAddrs {
                        listen: r.local_addr(),
                        clients: r.client_sockets(),
                    })
                    .collect(),
                relays.iter().map(Relay::stop_handle).collect(),
                relays.iter().map(Relay::counters).collect(),
            );
            let _ = tx.send(Ok(started));
            let runs: Vec<_> = relays.into_iter().map(|r| tokio::spawn(r.run())).collect();
            let mut stats = Vec::new();
            for r in runs {
                stats.push(r.await.unwrap_or_default());
            }
            stats
        })
    });
    let (relays, stops, counters) = rx
        .recv()
        .map_err(|_| io::Error::other("the relay thread ended before binding"))??;
    Ok(RelayThread {
        relays,
        stops,
        counters,
        thread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    /// An upstream that echoes every datagram and reports who sent it.
    async fn echo() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<SocketAddr>) {
        let socket = UdpSocket::bind(loopback()).await.unwrap();
        let addr = socket.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let _ = tx.send(from);
                let _ = socket.send_to(&buf[..n], from).await;
            }
        });
        (addr, rx)
    }

    async fn round_trip(client: &UdpSocket, relay: SocketAddr, payload: &[u8]) -> Duration {
        let started = Instant::now();
        client.send_to(payload, relay).await.unwrap();
        let mut buf = [0u8; 2048];
        let (n, from) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
            .await
            .expect("an echo through the relay")
            .unwrap();
        assert_eq!((&buf[..n], from), (payload, relay));
        started.elapsed()
    }

    #[test]
    fn only_loopback_addresses_and_sound_settings_are_accepted() {
        let good = RelayConfig::new(
            loopback(),
            SocketAddr::from(([127, 0, 0, 1], 5060)),
            &ImpairConfig::default(),
        );
        assert!(good.validate().is_ok());
        let mut away = good.clone();
        away.upstream = SocketAddr::from(([192, 0, 2, 1], 5060));
        assert!(away.validate().unwrap_err().contains("loopback"));
        let mut everywhere = good.clone();
        everywhere.listen = SocketAddr::from(([0, 0, 0, 0], 5060));
        assert!(everywhere.validate().unwrap_err().starts_with("listen"));
        let mut lossy = good.clone();
        lossy.backward.loss = 2.0;
        assert!(lossy.validate().unwrap_err().starts_with("backward.loss"));
        let mut crowded = good;
        crowded.clients = vec![loopback(), loopback()];
        assert!(crowded.validate().unwrap_err().contains("twice"));
    }

    #[tokio::test]
    async fn each_client_gets_its_own_upstream_socket_and_both_directions_are_delayed() {
        let (upstream, mut seen) = echo().await;
        let declared = UdpSocket::bind(loopback()).await.unwrap();
        let other = UdpSocket::bind(loopback()).await.unwrap();
        let link = ImpairConfig {
            delay_ms: 20.0,
            ..ImpairConfig::default()
        };
        let mut config = RelayConfig::new(loopback(), upstream, &link);
        config.clients = vec![declared.local_addr().unwrap()];
        let relay = Relay::bind(config).unwrap();
        let listen = relay.local_addr();
        let sockets = relay.client_sockets();
        let (stop, counters) = (relay.stop_handle(), relay.counters());
        let run = tokio::spawn(relay.run());

        let rtt = round_trip(&declared, listen, b"one").await;
        assert!(rtt >= Duration::from_millis(40), "{rtt:?}");
        assert_eq!(seen.recv().await, Some(sockets[0].1), "the declared socket");
        round_trip(&other, listen, b"two").await;
        let second = seen.recv().await.unwrap();
        assert_ne!(second, sockets[0].1, "a socket of its own");

        // Only the upstream may talk to a client's socket.
        let stranger = UdpSocket::bind(loopback()).await.unwrap();
        stranger.send_to(b"hi", second).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.stop();
        let stats = run.await.unwrap();
        assert_eq!(stats, counters.snapshot());
        assert_eq!(stats.clients, 2);
        assert_eq!(stats.forward.forwarded, 2);
        assert_eq!(stats.backward.forwarded, 2);
        assert_eq!(stats.foreign, 1);
    }

    #[tokio::test]
    async fn loss_clients_beyond_the_limit_and_the_duration_are_counted() {
        let (upstream, mut seen) = echo().await;
        let mut config = RelayConfig::new(
            loopback(),
            upstream,
            &ImpairConfig {
                loss: 1.0,
                ..ImpairConfig::default()
            },
        );
        config.max_clients = 1;
        config.duration = Some(Duration::from_millis(300));
        let relay = Relay::bind(config).unwrap();
        let listen = relay.local_addr();
        let run = tokio::spawn(relay.run());
        let first = UdpSocket::bind(loopback()).await.unwrap();
        let second = UdpSocket::bind(loopback()).await.unwrap();
        for _ in 0..5 {
            first.send_to(b"lost", listen).await.unwrap();
        }
        second.send_to(b"refused", listen).await.unwrap();
        // Stops by itself.
        let stats = tokio::time::timeout(Duration::from_secs(2), run)
            .await
            .expect("the relay ends after its duration")
            .unwrap();
        assert!(seen.try_recv().is_err(), "nothing got through");
        assert_eq!(stats.forward.dropped_loss, 5);
        assert_eq!(stats.forward.forwarded, 0);
        assert_eq!((stats.clients, stats.clients_refused), (1, 1));
    }
}
