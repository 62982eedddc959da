//! The tokio shell: one UDP socket with large kernel buffers, a single-threaded runtime, a
//! monotonic clock mapped to `Time`. It drains the socket in batches with `recvmmsg`,
//! lets the core start every call due by `now` (tokio timers have 1 ms granularity, so calls
//! are generated in batches) and sends what the core queued with `sendmmsg`; under load it
//! reads every `COALESCE` rather than on every datagram. [`tcp`] drives the same cores over
//! TCP connections.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use sluice_sys::udp_batch::{self, RecvBuffers};
use sluice_time::Time;
use sluice_txn::{Origin, Peer};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;

use crate::stats::SecondRow;
use crate::uac::{Uac, UacConfig, UacSummary};
use crate::uas::{Uas, UasConfig, UasCounts};
use crate::Out;

pub mod tcp;

/// Kernel socket buffer size asked for (the kernel may cap it at `net.core.[rw]mem_max`).
pub const SOCKET_BUFFER: usize = 8 << 20;
/// Datagrams read per wake-up before the core's timers get a turn.
const RECV_BATCH: usize = 256;
/// How long a driver whose last read found several datagrams waits before it reads again,
/// sleeping off epoll instead of waiting on the socket (interrupt moderation, as a NIC does
/// it). Under load a wake-up then takes a batch rather than a datagram or two, and the
/// sender's datagrams meet no sleeping reader: on a veth pair or loopback the sender's CPU
/// runs the receiver's softirq, so each datagram that woke a sleeping generator cost the
/// proxy under test an inter-processor interrupt. Measured at 16,000 calls/s through one
/// proxy thread (`sluice bench proxy --netns`): the proxy's CPU per call fell from 47 to
/// 38 µs and the generator's own by a sixth. Its cost is up to this long (plus the
/// kernel's timer slack) added to each delay the generator measures, under load only:
/// below the 1 ms at which the UAC schedules its calls.
const COALESCE: Duration = Duration::from_micros(100);

/// Binds a non-blocking UDP socket with large send and receive buffers.
pub fn bind_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer only means drops at lower rates, which are counted.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// What a driver needs from a core.
trait Core {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr);
    fn handle_message(&mut self, now: Time, payload: Bytes, from: Peer);
    fn handle_timeout(&mut self, now: Time);
    fn handle_transport_error(&mut self, now: Time, origin: Option<Origin>);
    /// A connection broke: `call`'s, or with `None` the one every call shares.
    fn handle_connection_lost(&mut self, _now: Time, _call: Option<u64>) {}
    fn poll_transmit(&mut self) -> Option<Out>;
    fn poll_timeout(&mut self) -> Option<Time>;
    fn poll_ended_call(&mut self) -> Option<u64> {
        None
    }
    fn finished(&self) -> bool;
    /// What the core recorded of its calls, its times made instants by its clock.
    fn take_call_log(&mut self, clock: Clock) -> CallLog;
}

impl Core for Uac {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        Uac::handle_datagram(self, now, payload, from);
    }
    fn handle_message(&mut self, now: Time, payload: Bytes, from: Peer) {
        Uac::handle_message(self, now, payload, from);
    }
    fn handle_connection_lost(&mut self, now: Time, call: Option<u64>) {
        Uac::handle_connection_lost(self, now, call);
    }
    fn poll_ended_call(&mut self) -> Option<u64> {
        Uac::poll_ended_call(self)
    }
    fn handle_timeout(&mut self, now: Time) {
        Uac::handle_timeout(self, now);
    }
    fn handle_transport_error(&mut self, now: Time, origin: Option<Origin>) {
        Uac::handle_transport_error(self, now, origin);
    }
    fn poll_transmit(&mut self) -> Option<Out> {
        Uac::poll_transmit(self)
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        Uac::poll_timeout(self)
    }
    fn finished(&self) -> bool {
        self.is_done()
    }
    fn take_call_log(&mut self, clock: Clock) -> CallLog {
        CallLog {
            answered: self
                .take_answered()
                .into_iter()
                .map(|c| (c.call_id, clock.instant(c.started), c.seen_180))
                .collect(),
            acks: Vec::new(),
        }
    }
}

impl Core for Uas {
    fn handle_datagram(&mut self, now: Time, payload: Bytes, from: SocketAddr) {
        Uas::handle_datagram(self, now, payload, from);
    }
    // A UAS connection that breaks needs no report: what the UAS still sends on it (a
    // delayed answer, a 2xx retransmission) finds no connection and fails then.
    fn handle_message(&mut self, now: Time, payload: Bytes, from: Peer) {
        Uas::handle_message(self, now, payload, from);
    }
    fn handle_timeout(&mut self, now: Time) {
        Uas::handle_timeout(self, now);
    }
    fn handle_transport_error(&mut self, now: Time, origin: Option<Origin>) {
        Uas::handle_transport_error(self, now, origin);
    }
    fn poll_transmit(&mut self) -> Option<Out> {
        Uas::poll_transmit(self)
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        Uas::poll_timeout(self)
    }
    fn finished(&self) -> bool {
        false
    }
    fn take_call_log(&mut self, clock: Clock) -> CallLog {
        CallLog {
            answered: Vec::new(),
            acks: self
                .take_acks()
                .into_iter()
                .map(|(id, at)| (id, clock.instant(at)))
                .collect(),
        }
    }
}

/// Monotonic clock → `Time` since the driver started.
#[derive(Clone, Copy, Debug)]
struct Clock(Instant);

impl Clock {
    fn now(self) -> Time {
        Time::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn instant(self, t: Time) -> Instant {
        self.0 + Duration::from_nanos(t.as_nanos())
    }
}

/// What the UAC and UAS of one process recorded of their calls, on one clock, so that a
/// driver running both can join them by Call-ID (`UacConfig::record_answered`,
/// `UasConfig::record_acks`); empty unless asked for.
#[derive(Clone, Debug, Default)]
pub struct CallLog {
    /// Calls started after the warm-up that got their 2xx: Call-ID, when the first
    /// INVITE went out, whether a 180 came before the 2xx.
    pub answered: Vec<(Bytes, Instant, bool)>,
    /// The ACKs to 2xx responses: Call-ID, when it arrived (a call's first counts).
    pub acks: Vec<(Bytes, Instant)>,
}

/// When a driver stops besides its core finishing.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// After this long.
    pub after: Option<Duration>,
    /// When this flag is set (checked at least every 50 ms).
    pub flag: Option<Arc<AtomicBool>>,
}

/// A run's result with the resources it took.
#[derive(Clone, Debug, Serialize)]
pub struct Run<S> {
    pub summary: S,
    pub wall_s: f64,
    /// CPU time of the driving thread (user + system), where `/proc` tells it.
    pub cpu_s: Option<f64>,
    /// Send or receive calls the socket failed (other than "would block"); over TCP, failed
    /// accepts.
    pub socket_errors: u64,
    /// The connections of a run over TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<tcp::TcpCounts>,
    #[serde(skip)]
    pub call_log: CallLog,
}

#[derive(Default)]
struct Io {
    socket_errors: u64,
}

/// Sends what the core queued, a batch per system call, waiting while the send buffer is
/// full.
async fn flush<C: Core>(
    socket: &UdpSocket,
    core: &mut C,
    clock: Clock,
    io: &mut Io,
    pending: &mut VecDeque<Out>,
) {
    while let Some(o) = core.poll_transmit() {
        pending.push_back(o);
    }
    while !pending.is_empty() {
        match udp_batch::send(socket, pending.iter().map(|o| (&o.payload[..], o.to))) {
            Ok(sent) => {
                pending.drain(..sent.max(1).min(pending.len()));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if socket.writable().await.is_err() {
                    io.socket_errors += 1;
                    pending.pop_front();
                }
            }
            Err(_) => {
                io.socket_errors += 1;
                if let Some(o) = pending.pop_front() {
                    core.handle_transport_error(clock.now(), o.origin);
                }
            }
        }
    }
}

async fn drive<C: Core>(
    socket: &UdpSocket,
    core: &mut C,
    clock: Clock,
    stop: &Stop,
    mut after_step: impl FnMut(&mut C),
) -> Io {
    let mut io = Io::default();
    let mut buffers = RecvBuffers::new();
    let mut pending = VecDeque::new();
    let stop_at = stop.after.map(|d| Time::ZERO + d);
    // The last read found several datagrams but not a full batch: more are on their way.
    let mut busy = false;
    loop {
        let now = clock.now();
        core.handle_timeout(now);
        flush(socket, core, clock, &mut io, &mut pending).await;
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
        let wait = deadline.saturating_since(clock.now());
        if busy && !wait.is_zero() {
            // Off epoll, what arrives meanwhile wakes no one; the yield lets the runtime
            // see the socket's new readiness before the read.
            std::thread::sleep(wait.min(COALESCE));
            tokio::task::yield_now().await;
        } else if !wait.is_zero() {
            tokio::select! {
                r = socket.readable() => if r.is_err() { io.socket_errors += 1; },
                () = tokio::time::sleep(wait) => {}
            }
        }
        let mut got = 0;
        while got < RECV_BATCH {
            let now = clock.now();
            match buffers.recv(socket, |datagram, from| {
                core.handle_datagram(now, Bytes::copy_from_slice(datagram), from);
            }) {
                Ok(n) => got += n.max(1),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // e.g. an ICMP error reported on the socket; nothing to read this time.
                    io.socket_errors += 1;
                    break;
                }
            }
        }
        busy = (2..RECV_BATCH).contains(&got);
        flush(socket, core, clock, &mut io, &mut pending).await;
    }
    io
}

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

pub use sluice_sys::{cpu_seconds_in, thread_cpu_seconds, thread_stat_path};

/// Runs a UAC on `socket` in a new single-threaded runtime on the calling thread until its
/// calls are done (or `stop`), handing each per-second row to `on_row`. The core's `local`
/// address is taken from the socket.
pub fn run_uac(
    socket: std::net::UdpSocket,
    cfg: UacConfig,
    stop: &Stop,
    on_row: impl FnMut(&SecondRow),
) -> io::Result<Run<UacSummary>> {
    let (uac, run) = drive_uac(socket, cfg, stop, on_row)?;
    Ok(Run {
        summary: uac.summary(),
        wall_s: run.wall_s,
        cpu_s: run.cpu_s,
        socket_errors: run.socket_errors,
        tcp: run.tcp,
        call_log: run.call_log,
    })
}

/// [`run_uac`]'s run, with the UAC itself in place of its summary.
fn drive_uac(
    socket: std::net::UdpSocket,
    mut cfg: UacConfig,
    stop: &Stop,
    mut on_row: impl FnMut(&SecondRow),
) -> io::Result<(Uac, Run<()>)> {
    cfg.local = socket.local_addr()?;
    let rt = runtime()?;
    let cpu0 = thread_cpu_seconds();
    let started = Instant::now();
    let (uac, io, call_log) = rt.block_on(async {
        let socket = UdpSocket::from_std(socket)?;
        let clock = Clock(Instant::now());
        let mut uac = Uac::new(cfg, Time::ZERO);
        let io = drive(&socket, &mut uac, clock, stop, |u| {
            while let Some(row) = u.poll_row() {
                on_row(&row);
            }
        })
        .await;
        let call_log = uac.take_call_log(clock);
        Ok::<_, io::Error>((uac, io, call_log))
    })?;
    let run = Run {
        call_log,
        summary: (),
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_seconds().zip(cpu0).map(|(b, a)| b - a),
        socket_errors: io.socket_errors,
        tcp: None,
    };
    Ok((uac, run))
}

/// `cfg` on `threads` threads, each with its own socket on `bind`'s address (an OS-chosen
/// port each) and its own UAC placing `1/threads` of the calls at `1/threads` of the rate,
/// so that one generator can use several cores. Each thread's per-second rows go to
/// `on_row` with the thread's number as they come. The summary is over all of them
/// ([`Uac::summary_of`]); CPU time is the threads' sum, wall time the longest.
pub fn run_uac_threads(
    bind: SocketAddr,
    cfg: &UacConfig,
    threads: usize,
    stop: &Stop,
    mut on_row: impl FnMut(usize, &SecondRow),
) -> io::Result<Run<UacSummary>> {
    let threads = threads.max(1);
    let parts: Vec<UacConfig> = (0..threads)
        .map(|i| {
            let mut c = cfg.clone();
            for step in &mut c.schedule.steps {
                step.rate /= threads as f64;
            }
            c.max_calls = cfg
                .max_calls
                .map(|n| n / threads as u64 + u64::from((i as u64) < n % threads as u64));
            c.max_in_progress = (cfg.max_in_progress / threads).max(1);
            c.seed = cfg.seed.wrapping_add(i as u64);
            // Call-IDs are `<n>-<token>@sluice`: a token per thread keeps them apart.
            c.run_token = cfg.run_token.wrapping_add(i as u64);
            c
        })
        .collect();
    let sockets = (0..threads)
        .map(|_| bind_udp(SocketAddr::new(bind.ip(), 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let (rows_tx, rows_rx) = std::sync::mpsc::channel::<(usize, SecondRow)>();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .zip(sockets)
            .enumerate()
            .map(|(i, (c, socket))| {
                let rows = rows_tx.clone();
                scope.spawn(move || {
                    drive_uac(socket, c, stop, |row| {
                        let _ = rows.send((i, *row));
                    })
                })
            })
            .collect();
        drop(rows_tx);
        for (i, row) in rows_rx {
            on_row(i, &row);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a UAC thread panicked")))
            })
            .collect::<io::Result<Vec<_>>>()
    })?;
    let (uacs, runs): (Vec<Uac>, Vec<Run<()>>) = results.into_iter().unzip();
    let mut call_log = CallLog::default();
    for r in &runs {
        call_log
            .answered
            .extend(r.call_log.answered.iter().cloned());
        call_log.acks.extend(r.call_log.acks.iter().cloned());
    }
    Ok(Run {
        summary: Uac::summary_of(&uacs),
        wall_s: runs.iter().map(|r| r.wall_s).fold(0.0, f64::max),
        cpu_s: runs.iter().map(|r| r.cpu_s).sum(),
        socket_errors: runs.iter().map(|r| r.socket_errors).sum(),
        tcp: None,
        call_log,
    })
}

/// Runs a UAS on `socket` until `stop`.
pub fn run_uas(
    socket: std::net::UdpSocket,
    cfg: UasConfig,
    stop: &Stop,
) -> io::Result<Run<UasCounts>> {
    run_uas_observed(socket, cfg, stop, Duration::MAX, |_| {})
}

/// [`run_uas`], handing `on_counts` the UAS's counters about every `every` while it runs,
/// so that a long run can be measured interval by interval (the counters are a copy of a
/// few integers; the UAS's core keeps no history).
pub fn run_uas_observed(
    socket: std::net::UdpSocket,
    mut cfg: UasConfig,
    stop: &Stop,
    every: Duration,
    mut on_counts: impl FnMut(&UasCounts),
) -> io::Result<Run<UasCounts>> {
    cfg.local = socket.local_addr()?;
    let rt = runtime()?;
    let cpu0 = thread_cpu_seconds();
    let started = Instant::now();
    let (summary, io, call_log) = rt.block_on(async {
        let socket = UdpSocket::from_std(socket)?;
        let clock = Clock(Instant::now());
        let mut uas = Uas::new(cfg);
        let mut next = Time::ZERO + every;
        let io = drive(&socket, &mut uas, clock, stop, |u| {
            let now = clock.now();
            if now >= next {
                on_counts(&u.counts());
                next = now + every;
            }
        })
        .await;
        Ok::<_, io::Error>((uas.counts(), io, uas.take_call_log(clock)))
    })?;
    Ok(Run {
        call_log,
        summary,
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_seconds().zip(cpu0).map(|(b, a)| b - a),
        socket_errors: io.socket_errors,
        tcp: None,
    })
}

/// Waits until something answers SIP at `target`: sends OPTIONS every 100 ms from a
/// throwaway socket until any datagram comes back or `timeout` passes. For waiting on a
/// proxy or UAS that another process is starting.
pub fn probe(target: SocketAddr, timeout: Duration) -> bool {
    let local: std::net::IpAddr = if target.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    probe_from(local, target, timeout)
}

/// [`probe`] from an address of this host other than loopback.
pub fn probe_from(local: std::net::IpAddr, target: SocketAddr, timeout: Duration) -> bool {
    let Ok(socket) = std::net::UdpSocket::bind(SocketAddr::new(local, 0)) else {
        return false;
    };
    let Ok(local) = socket.local_addr() else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_millis(100)));
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    for i in 0u32.. {
        if Instant::now() >= deadline {
            return false;
        }
        let options = format!(
            "OPTIONS sip:probe@{target} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-probe-{i}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:probe@{local}>;tag=p{i}\r\nTo: <sip:probe@{target}>\r\n\
             Call-ID: probe-{i}-{}@sluice\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
            local.port()
        );
        let _ = socket.send_to(options.as_bytes(), target);
        if socket.recv_from(&mut buf).is_ok() {
            return true;
        }
    }
    false
}

/// A UAC on a fresh loopback socket, in a thread of its own, stopping by itself `stop_after`
/// from its start; `on_row` gets each per-second row. For live tests and benches that drive
/// a proxy from the same process.
pub fn spawn_loopback_uac(
    cfg: UacConfig,
    stop_after: Duration,
    mut on_row: impl FnMut(&SecondRow) + Send + 'static,
) -> std::thread::JoinHandle<io::Result<Run<UacSummary>>> {
    std::thread::spawn(move || {
        let stop = Stop {
            after: Some(stop_after),
            ..Stop::default()
        };
        run_uac(bind_udp(loopback_any())?, cfg, &stop, |r| on_row(r))
    })
}

/// A UAS on a fresh loopback socket, in a thread of its own, until `stop` is set: its
/// address and its thread.
pub fn spawn_loopback_uas(
    stop: Arc<AtomicBool>,
) -> io::Result<(
    SocketAddr,
    std::thread::JoinHandle<io::Result<Run<UasCounts>>>,
)> {
    let socket = bind_udp(loopback_any())?;
    let addr = socket.local_addr()?;
    let flag = Stop {
        flag: Some(stop),
        ..Stop::default()
    };
    Ok((
        addr,
        std::thread::spawn(move || run_uas(socket, UasConfig::new(addr), &flag)),
    ))
}

fn loopback_any() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
