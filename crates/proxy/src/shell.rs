//! The tokio shell: UDP sockets (one per worker thread, see [`crate::udp_port`]), a
//! monotonic clock mapped to [`Time`], and a main loop that feeds datagrams, TCP messages
//! and deadlines to the [`ProxyCore`] and sends what it produces.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_time::Time;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::admin::{self, Snapshot};
use crate::icmp;
use crate::signals::Sampler;
use crate::tcp::{Tcp, TcpStats};
use crate::udp_port::{self, lock, Clock, UdpPort, WorkerLinks, RECV_BATCH};
use crate::watch::{log_event, Watch};
use sluice_proxy_core::{CoreStats, ProxyConfig, ProxyCore};

/// TCP transmits the UDP threads may hand the main loop before it takes them, in messages
/// and in bytes; beyond, they fail as a full connection's would.
const WORKER_TCP_QUEUE: usize = 4096;
const WORKER_TCP_QUEUE_BYTES: usize = 4 << 20;
/// How often the log is told what the control loop did.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A proxy bound to its socket(s), ready to [`run`](Proxy::run).
pub struct Proxy {
    config: ProxyConfig,
    socket: UdpSocket,
    /// The other worker threads' sockets on the same port.
    worker_sockets: Vec<std::net::UdpSocket>,
    /// TCP on the UDP socket's port (`tcp.listen`).
    tcp_listener: Option<tokio::net::TcpListener>,
    local: SocketAddr,
    admin: Option<tokio::net::TcpListener>,
    admin_addr: Option<SocketAddr>,
    shutdown_tx: watch::Sender<bool>,
    shutdown_rx: watch::Receiver<bool>,
    reload_tx: mpsc::Sender<ProxyConfig>,
    reload_rx: mpsc::Receiver<ProxyConfig>,
    admission: Option<Box<dyn sluice_control::LocalAdmission + Send>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("local", &self.local)
            .field("admin", &self.admin_addr)
            .finish_non_exhaustive()
    }
}

/// Starts a graceful shutdown of a running [`Proxy`] (clone it freely).
#[derive(Clone, Debug)]
pub struct ShutdownHandle(watch::Sender<bool>);

impl ShutdownHandle {
    /// Stop admitting new sessions and end once running transactions finish (or the
    /// configured grace period passes).
    pub fn shutdown(&self) {
        let _ = self.0.send(true);
    }
}

/// Hands a running [`Proxy`] a new configuration (SIGHUP): see [`ProxyCore::reload`] for
/// what it applies. Clone it freely.
#[derive(Clone, Debug)]
pub struct ReloadHandle(mpsc::Sender<ProxyConfig>);

impl ReloadHandle {
    /// Queues `config` for the proxy loop; false once the proxy has ended, or while
    /// four reloads already wait.
    pub fn reload(&self, config: ProxyConfig) -> bool {
        self.0.try_send(config).is_ok()
    }
}

/// What a run did, returned when it ends.
#[derive(Clone, Debug)]
pub struct ProxyReport {
    pub local_addr: SocketAddr,
    pub elapsed: Duration,
    pub stats: CoreStats,
    /// Transmits dropped because the socket's send buffer stayed full.
    pub send_drops: u64,
    pub tcp: TcpStats,
    /// Datagrams read by each UDP thread (`workers`), the main loop's first.
    pub udp_threads: Vec<u64>,
    /// CPU time (user and system) the UDP threads other than the main loop's used, seconds.
    pub worker_cpu_s: f64,
}

impl ProxyReport {
    /// The report as JSON (the same fields as `/status`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = admin::status_json(&self.stats, self.elapsed, self.local_addr, self.send_drops);
        v["tcp"] = admin::tcp_json(&self.tcp);
        v["udp_threads"] = serde_json::json!(self.udp_threads);
        v
    }
}

/// The UDP threads `config` asks for: `workers`, or one per core the process may use.
pub fn worker_count(config: &ProxyConfig) -> usize {
    match config.workers {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    }
}

/// A UDP socket bound to `addr`; `shared` lets the other workers' sockets bind the same
/// port (SO_REUSEPORT).
fn udp_socket(addr: SocketAddr, buffer: usize, shared: bool) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if shared {
        socket.set_reuse_port(true)?;
    }
    // The kernel may cap these (net.core.rmem_max); a smaller buffer is not an error.
    let _ = socket.set_recv_buffer_size(buffer);
    let _ = socket.set_send_buffer_size(buffer);
    // ICMP errors for what the proxy sends: without them an unreachable next hop costs
    // every request sent there Timer B (32 s) instead of a round trip.
    if let Err(e) = icmp::enable(&socket, addr.is_ipv6()) {
        tracing::warn!(
            "cannot read ICMP errors ({e}); requests to an unreachable next hop fail only \
             when their transactions time out"
        );
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

impl Proxy {
    /// Validates the config and binds the UDP socket (and the admin listener, if any).
    pub async fn bind(mut config: ProxyConfig) -> io::Result<Proxy> {
        if config.overload.server.epoch_secs == 0 {
            // RFC 7339 oc-seq must keep increasing across restarts: number from the wall
            // clock at the core's time origin (read here, in the shell, not in the core).
            config.overload.server.epoch_secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
        }
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let workers = worker_count(&config);
        let (udp, tcp) = bind_udp_and_tcp(&config, workers > 1)?;
        let at = udp.local_addr()?.as_socket().unwrap_or(config.listen);
        let worker_sockets = (1..workers)
            .map(|_| udp_socket(at, config.socket_buffer, true))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot bind worker socket on udp {at}: {e}"),
                )
            })?;
        if workers > 1 {
            udp_port::spread_by_cpu(&udp, workers)?;
        }
        let udp: std::net::UdpSocket = udp.into();
        let worker_sockets = worker_sockets.into_iter().map(Into::into).collect();
        if tcp.is_some() {
            let limit = crate::tcp::raise_open_files_limit();
            let wanted = config.tcp.max_connections as u64 + 64;
            if limit < wanted {
                tracing::warn!(
                    "open files are limited to {limit}, below tcp.max_connections ({}): \
                     connections past the limit will be refused by the kernel",
                    config.tcp.max_connections
                );
            }
        }
        let socket = UdpSocket::from_std(udp)?;
        let tcp_listener = tcp.map(tokio::net::TcpListener::from_std).transpose()?;
        let local = socket.local_addr()?;
        let (admin, admin_addr) = match config.admin {
            Some(addr) => {
                if !addr.ip().is_loopback() {
                    tracing::warn!(
                        "the admin endpoint on {addr} is reachable from the network; /metrics \
                         and /status have no authentication"
                    );
                }
                let l = tokio::net::TcpListener::bind(addr).await?;
                let a = l.local_addr()?;
                (Some(l), Some(a))
            }
            None => (None, None),
        };
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        // A few reloads may wait; more, signalled faster than the loop takes them, are
        // refused (the last one that got in still applies the file as it was then).
        let (reload_tx, reload_rx) = mpsc::channel(4);
        Ok(Proxy {
            config,
            socket,
            worker_sockets,
            tcp_listener,
            local,
            admin,
            admin_addr,
            shutdown_tx,
            shutdown_rx,
            reload_tx,
            reload_rx,
            admission: None,
        })
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The bound TCP address (the UDP port), if `tcp.listen`.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound admin HTTP address, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Runs with this admission policy instead of the configured one
    /// ([`ProxyCore::set_admission`]).
    pub fn set_admission(&mut self, policy: Box<dyn sluice_control::LocalAdmission + Send>) {
        self.admission = Some(policy);
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown_tx.clone())
    }

    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.reload_tx.clone())
    }

    /// Runs until shut down (handle, or `duration_s`), then lets transactions finish for at
    /// most `shutdown_grace_s`.
    pub async fn run(self) -> io::Result<ProxyReport> {
        let Proxy {
            config,
            socket,
            worker_sockets,
            tcp_listener,
            local,
            admin,
            shutdown_tx: _keep_open,
            mut shutdown_rx,
            mut reload_rx,
            admission,
            ..
        } = self;
        let mut config = config;
        let clock = Clock {
            origin: Instant::now(),
        };
        let origin = clock.origin;
        let now = || clock.now();
        let mut core = ProxyCore::new(&config, local, now());
        // A per-process secret from the standard library's randomly keyed hasher, so the
        // tags on this proxy's branches cannot be predicted from its configuration.
        core.set_branch_key(std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id(),
        ));
        if local.ip().is_unspecified() {
            // Bound to every interface: a request for any of the host's addresses is for
            // this proxy, and forwarding it there would loop.
            match if_addrs::get_if_addrs() {
                Ok(interfaces) => core.set_local_addresses(interfaces.iter().map(if_addrs::Interface::ip).collect()),
                Err(e) => tracing::warn!("cannot list the host's addresses ({e}); only loopback and the advertised address are known as this proxy"),
            }
        }
        if let Some(policy) = admission {
            core.set_admission(policy);
        }
        core.set_native_workers(worker_sockets.len() + 1);
        let shared: udp_port::SharedCore = Arc::new(Mutex::new(core));
        let (admin_tx, mut admin_rx) = mpsc::channel::<oneshot::Sender<Snapshot>>(16);
        // The dashboard's history, sampled with the watch.
        let mut signals = Sampler::default();
        let admin_thread = match admin {
            Some(listener) => Some(admin::AdminThread::spawn(
                listener,
                admin_tx,
                signals.history.clone(),
            )?),
            None => None,
        };

        // The other UDP threads, each on its own runtime.
        let (stop_workers, workers_stop) = watch::channel(false);
        let (worker_tcp_tx, mut worker_tcp) =
            udp_port::TcpHandoff::new(WORKER_TCP_QUEUE, WORKER_TCP_QUEUE_BYTES);
        let links = WorkerLinks {
            core: shared.clone(),
            clock,
            main_wake: Arc::new(AtomicU64::new(0)),
            wake_main: Arc::new(Notify::new()),
            tcp: worker_tcp_tx,
            stop: workers_stop,
            outbox: Arc::new(udp_port::Outbox::default()),
            read_by_thread: (0..=worker_sockets.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
        };
        let mut worker_threads: Vec<std::thread::JoinHandle<io::Result<f64>>> =
            Vec::with_capacity(worker_sockets.len());
        for (i, socket) in worker_sockets.into_iter().enumerate() {
            let links = links.clone();
            let thread = std::thread::Builder::new()
                .name(format!("sluice-udp-{}", i + 1))
                .spawn(move || -> io::Result<f64> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    runtime.block_on(async move {
                        let read_by_thread = links.read_by_thread.clone();
                        let port = UdpPort::new(
                            UdpSocket::from_std(socket)?,
                            i + 1,
                            read_by_thread,
                            links.outbox.clone(),
                        );
                        udp_port::run_worker(port, links).await
                    })?;
                    Ok(sluice_sys::thread_cpu_seconds().unwrap_or(0.0))
                })?;
            worker_threads.push(thread);
        }

        let stop_after = config
            .duration_s
            .map(|s| origin + Duration::from_secs_f64(s));
        let grace = Duration::from_secs_f64(config.shutdown_grace_s);
        let mut grace_end: Option<Instant> = None;
        let mut port = UdpPort::new(
            socket,
            0,
            links.read_by_thread.clone(),
            links.outbox.clone(),
        );
        let mut unrecorded_busy = Duration::ZERO;
        let (mut tcp, mut tcp_inputs) = Tcp::new(&config.tcp, tcp_listener);
        // The connection whose turn it is, with the messages of it not yet taken; and the
        // one granted its turn that is reading it.
        let mut turn: Option<crate::tcp::Inbound> = None;
        let mut granted: Option<tokio::sync::oneshot::Receiver<crate::tcp::Inbound>> = None;
        let measure_send_queues = config.tcp.smart_forwarding;
        let far = origin + Duration::from_hours(24 * 365);
        // Timers are created once and re-armed only when their deadline moves: registering
        // two fresh timers on every wake-up costs more than the wake-up's work at high rates.
        let wake_timer = tokio::time::sleep_until(far.into());
        // The control loop's state, for the log, once per interval.
        let mut watch = Watch::default();
        let mut next_watch = origin;
        tokio::pin!(wake_timer);
        let stop_timer = tokio::time::sleep_until(stop_after.unwrap_or(far).into());
        tokio::pin!(stop_timer);

        loop {
            let started = Instant::now();
            let mut worked = port.read();
            // The core is locked for this block only: never across an await.
            let (room, turn_left, out_of_time) = {
                let mut core = lock(&shared);
                core.record_native_busy(std::mem::take(&mut unrecorded_busy));
                if measure_send_queues {
                    tcp.measure(&mut core);
                }
                port.feed(&mut core, now());
                core.handle_timeout(now());
                worked |= port.take_transmits(&mut core, |core, t| {
                    if let Err(origin) = tcp.send(t) {
                        core.handle_send_error(now(), origin);
                    }
                });
                let mut out_of_time = false;
                if let Some(end) = grace_end {
                    if core.is_idle() && !port.has_pending() && tcp.flushed() {
                        break;
                    }
                    if Instant::now() >= end {
                        // Out of time: every request still open gets its final response now.
                        core.abandon(now());
                        port.take_transmits(&mut core, |_, t| {
                            let _ = tcp.send(t);
                        });
                        out_of_time = true;
                    }
                }
                if Instant::now() >= next_watch {
                    let stats = core.stats(now());
                    let feedback = core.feedback_metrics();
                    signals.sample(
                        origin.elapsed(),
                        &stats,
                        &core.admission_metrics(),
                        feedback.as_ref(),
                    );
                    let mut events = watch.sample(origin.elapsed(), &stats);
                    events.extend(watch.feedback(feedback.and_then(|m| m.control_value)));
                    events.extend(watch.next_hops(core.next_hop_controls()));
                    for event in &events {
                        log_event(event);
                    }
                    next_watch += WATCH_INTERVAL;
                }
                let deadline = core.poll_timeout();
                links
                    .main_wake
                    .store(deadline.map_or(u64::MAX, Time::as_nanos), Ordering::Relaxed);
                let wake = deadline.map_or(far, |t| clock.at(t)).min(next_watch);
                let wake = tokio::time::Instant::from_std(grace_end.map_or(wake, |g| wake.min(g)));
                if wake_timer.deadline() != wake {
                    wake_timer.as_mut().reset(wake);
                }
                let room = core.has_room(now());
                // A turn is taken to its end before the next connection's, a message at a
                // time while the queue has room; a long one in batches, the timers between.
                let mut turn_left = false;
                if room {
                    if let Some(t) = turn.as_mut() {
                        let started = Instant::now();
                        for _ in 0..RECV_BATCH {
                            let Some(m) = t.messages.pop_front() else {
                                break;
                            };
                            tcp.stats.messages_in += 1;
                            core.handle_stream_message(now(), m, t.from);
                            if !core.has_room(now()) {
                                break;
                            }
                        }
                        core.record_native_busy(started.elapsed());
                        if t.messages.is_empty() {
                            // Dropped: its connection reads again.
                            turn = None;
                        } else {
                            turn_left = core.has_room(now());
                        }
                    }
                }
                (core.has_room(now()), turn_left, out_of_time)
            };
            if out_of_time {
                port.flush(&shared, clock, Duration::from_millis(500)).await;
                // The connections' tasks write what was queued meanwhile.
                let until = Instant::now() + Duration::from_millis(500);
                while !tcp.flushed() && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                break;
            }
            port.send(&shared, clock);
            if worked {
                unrecorded_busy += started.elapsed();
            }
            tcp.set_reading_free(
                room && turn.is_none() && granted.is_none() && tcp_inputs.inbound.is_empty(),
            );
            tokio::select! {
                () = std::future::ready(()), if turn_left => {}
                r = accept(tcp_inputs.listener.as_ref()) => {
                    match r {
                        Ok((stream, remote)) => tcp.accepted(stream, remote),
                        // Out of descriptors, or the like: counted by the limit below,
                        // and retried on the next readiness.
                        Err(e) => tracing::debug!("accept failed: {e}"),
                    }
                }
                Some(request) = tcp_inputs.inbound.recv(), if room && turn.is_none() && granted.is_none() => {
                    // Busy with this one now: no other connection reads ahead of its turn.
                    tcp.set_reading_free(false);
                    match request {
                        crate::tcp::TurnRequest::Ask(grant) => {
                            let (to, read) = tokio::sync::oneshot::channel();
                            if grant.send(to).is_ok() {
                                granted = Some(read);
                            }
                        }
                        // A turn without a whole message is let go at once.
                        crate::tcp::TurnRequest::Read(t) => {
                            turn = Some(t).filter(|t| !t.messages.is_empty());
                        }
                    }
                }
                read = async { granted.as_mut().expect("guarded").await }, if granted.is_some() => {
                    granted = None;
                    // A turn without a whole message is let go at once.
                    turn = read.ok().filter(|t| !t.messages.is_empty());
                }
                Some(event) = tcp_inputs.events.recv() => {
                    let mut core = lock(&shared);
                    let at = now();
                    tcp.closed(event, &mut core, at);
                }
                Some(first) = worker_tcp.recv() => {
                    // What the UDP threads' work sent over TCP, in the order they made it.
                    let mut core = lock(&shared);
                    let mut next = Some(first);
                    while let Some(t) = next {
                        if let Err(origin) = tcp.send(t) {
                            core.handle_send_error(now(), origin);
                        }
                        next = worker_tcp.try_recv();
                    }
                }
                () = links.wake_main.notified() => {}
                r = port.socket.readable() => r?,
                r = port.socket.writable(), if port.send_blocked() => r?,
                r = port.socket.ready(Interest::ERROR) => {
                    r?;
                    // Cleared first: an error that comes while the queue is drained sets
                    // the readiness again.
                    let _ = port.socket.try_io(Interest::ERROR, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                    let mut core = lock(&shared);
                    let at = now();
                    port.drain_errors(&mut core, at);
                }
                () = &mut wake_timer => {}
                () = &mut stop_timer, if grace_end.is_none() => {
                    lock(&shared).begin_shutdown();
                    grace_end = Some(Instant::now() + grace);
                }
                Some(mut new) = reload_rx.recv() => {
                    // Filled in at bind, as for the configuration the proxy started with.
                    if new.overload.server.epoch_secs == 0 {
                        new.overload.server.epoch_secs = config.overload.server.epoch_secs;
                    }
                    let reloaded = {
                        let mut core = lock(&shared);
                        let at = now();
                        core.reload(&new, at)
                    };
                    if !reloaded.needs_restart.is_empty() {
                        tracing::warn!(
                            keys = %reloaded.needs_restart.join(", "),
                            "configuration reloaded without these keys: they take a restart"
                        );
                    }
                    tracing::info!(
                        applied = %reloaded.applied.join(", "),
                        "configuration reloaded"
                    );
                    for key in reloaded.applied {
                        match key {
                            "control" => config.control = new.control.clone(),
                            "overload" => config.overload = new.overload.clone(),
                            _ => {}
                        }
                    }
                }
                r = shutdown_rx.changed(), if grace_end.is_none() => {
                    if r.is_err() || *shutdown_rx.borrow() {
                        lock(&shared).begin_shutdown();
                        grace_end = Some(Instant::now() + grace);
                    }
                }
                Some(reply) = admin_rx.recv() => {
                    let mut core = lock(&shared);
                    let stats = core.stats(now());
                    let _ = reply.send(Snapshot {
                        tcp: tcp.stats(&stats),
                        stats,
                        admission: core.admission_metrics(),
                        uptime: origin.elapsed(),
                        local,
                        send_drops: port.send_drops(),
                        udp_threads: links.datagrams_by_thread(),
                        draining: grace_end.is_some(),
                        admin_refused: admin_thread
                            .as_ref()
                            .map_or(0, |a| a.refused.load(std::sync::atomic::Ordering::Relaxed)),
                        algorithm: config.control.algorithm.name(),
                        feedback: core.feedback_metrics(),
                        feedback_sent: core.feedback_sent().collect(),
                        next_hop_controls: core.next_hop_controls().collect(),
                    });
                }
            }
        }
        drop(admin_thread);
        let _ = stop_workers.send(true);
        let mut worker_cpu_s = 0.0;
        for thread in worker_threads {
            match thread.join() {
                Ok(Ok(cpu)) => worker_cpu_s += cpu,
                Ok(Err(e)) => tracing::warn!("a UDP thread ended with an error: {e}"),
                Err(_) => tracing::warn!("a UDP thread panicked"),
            }
        }
        let mut core = lock(&shared);
        let stats = core.stats(now());
        Ok(ProxyReport {
            local_addr: local,
            elapsed: origin.elapsed(),
            tcp: tcp.stats(&stats),
            stats,
            send_drops: port.send_drops(),
            udp_threads: links.datagrams_by_thread(),
            worker_cpu_s,
        })
    }
}

/// The next connection on the listener; pending for ever without one.
async fn accept(
    listener: Option<&tokio::net::TcpListener>,
) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The UDP socket and, with `tcp.listen`, a TCP listener on the same port (RFC 3261 §18).
/// With port 0 the kernel picks the UDP port, which may be taken for TCP: then both are
/// bound again.
fn bind_udp_and_tcp(
    config: &ProxyConfig,
    shared: bool,
) -> io::Result<(Socket, Option<std::net::TcpListener>)> {
    let mut attempts = 0;
    loop {
        let udp = udp_socket(config.listen, config.socket_buffer, shared)?;
        if !config.tcp.listen {
            return Ok((udp, None));
        }
        let at = udp.local_addr()?.as_socket().unwrap_or(config.listen);
        match crate::tcp::listener(at, &config.tcp) {
            Ok(l) => return Ok((udp, Some(l))),
            Err(e)
                if e.kind() == io::ErrorKind::AddrInUse
                    && config.listen.port() == 0
                    && attempts < 16 =>
            {
                attempts += 1;
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot listen on TCP {at}: {e} (set tcp.listen = false for UDP only)"),
                ))
            }
        }
    }
}
