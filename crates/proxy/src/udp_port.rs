//! The UDP threads of a proxy. Each has its own socket on the listening port
//! (SO_REUSEPORT) and moves datagrams between it and the one [`ProxyCore`], which they
//! share behind a mutex.
//!
//! Why one shared core and not a core per thread: about four fifths of a proxied call's CPU
//! is the kernel's and the runtime's (system calls, loopback delivery, wake-ups), which the
//! threads do in parallel outside the lock; the core's own share (`cargo bench -p
//! sluice-proxy-core --bench core`) is what serialises. In exchange every transaction,
//! dialog, INVITE memory and overload controller stays in one place: responses, CANCELs,
//! ACKs and retransmissions may arrive on any socket, and the PI, OCC and the feedback
//! generators see the whole process's queue and load, so they give the same figures with
//! one thread or several. The lock is taken once per batch of datagrams, with the clock
//! read under it so that the core sees time move forward only.
//!
//! Each datagram goes to the socket of the thread numbered after the CPU on which the
//! kernel received it (modulo the threads), by a classic BPF program
//! (`SO_ATTACH_REUSEPORT_CBPF`): the thread it wakes is then usually on that CPU, where the
//! datagram is in cache and no inter-processor interrupt is needed to wake it. On loopback
//! at 12,000 calls/s this cost 0.69–0.76 CPUs against 0.65–0.66 for one thread; a random
//! choice per datagram cost 0.85–0.88, and the kernel's default (a hash of the sender's
//! address) puts all of one peer's traffic on one thread, where a proxy often has few
//! peers. UDP promises no order, and the core already copes with a CANCEL before its INVITE
//! or an ACK before its 2xx. More threads than CPUs leave the extra ones without datagrams.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proxy_core::{ProxyCore, Transmit, Transport};
use sluice_time::Time;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch, Notify};

use crate::icmp;
use crate::udp_batch::{self, RecvBuffers};

/// Datagrams read per wake-up before the processor runs: enough to amortise the wake-up,
/// few enough that the queue-full check sees the processor's progress.
pub(crate) const RECV_BATCH: usize = 256;
/// Transmits held while a socket's send buffer is full; beyond this they are dropped and
/// counted.
const MAX_PENDING_SENDS: usize = 65_536;

/// The core, shared by the UDP threads and the main loop.
pub(crate) type SharedCore = Arc<Mutex<ProxyCore>>;

/// Locks the core. A thread that panicked while holding it left nothing half-done that a
/// panic could not also leave in a single-threaded proxy, so the poison is ignored.
pub(crate) fn lock(core: &Mutex<ProxyCore>) -> MutexGuard<'_, ProxyCore> {
    core.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The clock every thread reads: nanoseconds since the proxy's origin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    pub(crate) origin: Instant,
}

impl Clock {
    pub(crate) fn now(self) -> Time {
        Time::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    pub(crate) fn at(self, t: Time) -> Instant {
        self.origin + Duration::from_nanos(t.as_nanos())
    }
}

/// One UDP socket of the proxy with what it read but the core has not seen, and what the
/// core gave it to send that the kernel has not taken.
pub(crate) struct UdpPort {
    pub(crate) socket: UdpSocket,
    buffers: RecvBuffers,
    inbox: Vec<(Bytes, SocketAddr)>,
    /// The socket reported an error (an ICMP message about an earlier send): its details
    /// wait in the error queue for the core.
    errors_waiting: bool,
    pending: VecDeque<Transmit>,
    /// The transmit at the front of `pending` already failed once on an error left by an
    /// ICMP message about an earlier datagram.
    retried: bool,
    error_buf: Vec<u8>,
    /// Transmits dropped because the send buffer stayed full.
    pub(crate) send_drops: u64,
    /// Datagrams this socket read, in its slot of the proxy's counters.
    read_counter: Arc<[AtomicU64]>,
    index: usize,
}

impl UdpPort {
    /// The socket of UDP thread `index`, counting what it reads in `read_counter[index]`.
    pub(crate) fn new(socket: UdpSocket, index: usize, read_counter: Arc<[AtomicU64]>) -> Self {
        Self {
            read_counter,
            index,
            socket,
            buffers: RecvBuffers::new(),
            inbox: Vec::with_capacity(RECV_BATCH),
            errors_waiting: false,
            pending: VecDeque::new(),
            retried: false,
            error_buf: vec![0u8; 65_536],
            send_drops: 0,
        }
    }

    /// Reads up to [`RECV_BATCH`] datagrams without the core, until the socket says it is
    /// empty (which is what clears tokio's readiness). Returns whether anything came.
    pub(crate) fn read(&mut self) -> bool {
        let Self {
            socket,
            buffers,
            inbox,
            errors_waiting,
            ..
        } = self;
        let mut received = 0;
        let mut any = false;
        while received < RECV_BATCH {
            match buffers.recv(socket, |datagram, from| {
                inbox.push((Bytes::copy_from_slice(datagram), from));
            }) {
                Ok(n) => {
                    any = true;
                    received += n.max(1);
                    if let Some(c) = self.read_counter.get(self.index) {
                        c.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP error about an earlier send, reported once; its details wait in
                // the error queue.
                Err(_) => {
                    any = true;
                    received += 1;
                    *errors_waiting = true;
                }
            }
        }
        any
    }

    /// Hands what was read to the core, then the errors that wait.
    pub(crate) fn feed(&mut self, core: &mut ProxyCore, now: Time) {
        for (datagram, from) in self.inbox.drain(..) {
            core.handle_datagram(now, datagram, from);
        }
        if std::mem::take(&mut self.errors_waiting) {
            self.drain_errors(core, now);
        }
    }

    /// Hands each ICMP unreachable error in the socket's error queue to the core; returns
    /// how many entries were read.
    pub(crate) fn drain_errors(&mut self, core: &mut ProxyCore, now: Time) -> usize {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.socket);
        icmp::drain(fd, &mut self.error_buf, |to, payload| {
            core.handle_unreachable(now, to, payload);
        })
    }

    /// Takes what the core has to send: UDP into this port's queue, TCP to `tcp`. Returns
    /// whether there was anything.
    pub(crate) fn take_transmits(
        &mut self,
        core: &mut ProxyCore,
        mut tcp: impl FnMut(&mut ProxyCore, Transmit),
    ) -> bool {
        let mut any = false;
        while let Some(t) = core.poll_transmit() {
            any = true;
            match t.transport {
                Transport::Udp => self.pending.push_back(t),
                Transport::Tcp => tcp(core, t),
            }
        }
        any
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Sends what is pending until the socket would block, without the core but for
    /// errors; beyond [`MAX_PENDING_SENDS`] the oldest are dropped and counted.
    pub(crate) fn send(&mut self, core: &Mutex<ProxyCore>, clock: Clock) {
        while !self.pending.is_empty() {
            match udp_batch::send(&self.socket, &self.pending) {
                Ok(sent) => {
                    self.pending.drain(..sent.max(1));
                    self.retried = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    let mut core = lock(core);
                    let now = clock.now();
                    // A pending ICMP error fails the next send without sending it: if the
                    // error queue held one, the error was not this datagram's, and it goes
                    // again.
                    if self.drain_errors(&mut core, now) > 0 && !self.retried {
                        self.retried = true;
                        continue;
                    }
                    self.retried = false;
                    if let Some(t) = self.pending.pop_front() {
                        core.handle_send_error(now, t.origin);
                    }
                }
            }
        }
        while self.pending.len() > MAX_PENDING_SENDS {
            self.pending.pop_front();
            self.send_drops += 1;
        }
    }

    /// Sends what is pending, waiting for the socket as needed, for at most `limit`.
    pub(crate) async fn flush(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.pending.is_empty() {
            match udp_batch::send(&self.socket, &self.pending) {
                Ok(sent) => {
                    self.pending.drain(..sent.max(1));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero()
                        || tokio::time::timeout(left, self.socket.writable())
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                // Failed for good: the first one is done.
                Err(_) => {
                    self.pending.pop_front();
                }
            }
        }
    }
}

/// Makes the kernel hand each datagram for the port to socket `cpu mod workers` of the
/// group, where `cpu` is the CPU that received it, instead of choosing by the sender's
/// address. The program is classic BPF: load the CPU number (`SKF_AD_CPU`), take it modulo
/// the number of sockets, return it as the socket's index in the group.
#[cfg(target_os = "linux")]
pub(crate) fn spread_by_cpu(socket: &socket2::Socket, workers: usize) -> io::Result<()> {
    use nix::libc::{self, sock_filter, sock_fprog};
    use nix::sys::socket::{setsockopt, sockopt::AttachReusePortCbpf};
    let workers = u32::try_from(workers).unwrap_or(u32::MAX).max(1);
    let op = |code: u32, k: u32| sock_filter {
        code: u16::try_from(code).unwrap_or(0),
        jt: 0,
        jf: 0,
        k,
    };
    let mut program = [
        op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            (libc::SKF_AD_OFF + libc::SKF_AD_CPU) as u32,
        ),
        op(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, workers),
        op(libc::BPF_RET | libc::BPF_A, 0),
    ];
    let prog = sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    setsockopt(socket, AttachReusePortCbpf, &prog).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn spread_by_cpu(_socket: &socket2::Socket, _workers: usize) -> io::Result<()> {
    Ok(())
}

/// What a UDP thread shares with the main loop.
#[derive(Clone)]
pub(crate) struct WorkerLinks {
    pub(crate) core: SharedCore,
    pub(crate) clock: Clock,
    /// When the main loop will next look at the core's timers (nanoseconds of [`Time`]);
    /// a thread whose work moved the core's deadline earlier wakes it.
    pub(crate) main_wake: Arc<AtomicU64>,
    pub(crate) wake_main: Arc<Notify>,
    /// TCP transmits the core gave a UDP thread, for the main loop, which owns the
    /// connections.
    pub(crate) tcp: TcpHandoff,
    pub(crate) stop: watch::Receiver<bool>,
    /// Sum of the threads' dropped sends, read at the end.
    pub(crate) send_drops: Arc<AtomicU64>,
    /// Datagrams read, per UDP thread (the main loop's first).
    pub(crate) read_by_thread: Arc<[AtomicU64]>,
}

/// The UDP threads' TCP transmits on their way to the main loop, bounded in messages and
/// in bytes; beyond either, a transmit fails as a full connection's would.
#[derive(Clone, Debug)]
pub(crate) struct TcpHandoff {
    tx: mpsc::Sender<Transmit>,
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

impl TcpHandoff {
    pub(crate) fn new(messages: usize, max_bytes: usize) -> (TcpHandoff, TcpTaken) {
        let (tx, rx) = mpsc::channel(messages);
        let bytes = Arc::new(AtomicUsize::new(0));
        (
            TcpHandoff {
                tx,
                bytes: bytes.clone(),
                max_bytes,
            },
            TcpTaken { rx, bytes },
        )
    }

    pub(crate) fn try_send(&self, t: Transmit) -> Result<(), Transmit> {
        let len = t.payload.len();
        if self.bytes.fetch_add(len, Ordering::Relaxed) + len > self.max_bytes {
            self.bytes.fetch_sub(len, Ordering::Relaxed);
            return Err(t);
        }
        self.tx.try_send(t).map_err(|e| {
            self.bytes.fetch_sub(len, Ordering::Relaxed);
            e.into_inner()
        })
    }
}

/// The main loop's end of a [`TcpHandoff`].
#[derive(Debug)]
pub(crate) struct TcpTaken {
    rx: mpsc::Receiver<Transmit>,
    bytes: Arc<AtomicUsize>,
}

impl TcpTaken {
    pub(crate) async fn recv(&mut self) -> Option<Transmit> {
        let t = self.rx.recv().await?;
        self.bytes.fetch_sub(t.payload.len(), Ordering::Relaxed);
        Some(t)
    }

    pub(crate) fn try_recv(&mut self) -> Option<Transmit> {
        let t = self.rx.try_recv().ok()?;
        self.bytes.fetch_sub(t.payload.len(), Ordering::Relaxed);
        Some(t)
    }
}

impl WorkerLinks {
    /// Datagrams read so far, per UDP thread.
    pub(crate) fn datagrams_by_thread(&self) -> Vec<u64> {
        self.read_by_thread
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// Tells the main loop to look at the core's timers if they are due before it would.
pub(crate) fn wake_main_if_earlier(links: &WorkerLinks, deadline: Option<Time>) {
    if let Some(t) = deadline {
        if t.as_nanos() < links.main_wake.load(Ordering::Relaxed) {
            links.wake_main.notify_one();
        }
    }
}

/// A UDP thread other than the main loop's: reads, hands datagrams to the core, sends
/// what the core produced, until told to stop.
pub(crate) async fn run_worker(mut port: UdpPort, mut links: WorkerLinks) -> io::Result<()> {
    let mut unrecorded_busy = Duration::ZERO;
    loop {
        let started = Instant::now();
        let read = port.read();
        if read {
            let deadline = {
                let mut core = lock(&links.core);
                core.record_native_busy(std::mem::take(&mut unrecorded_busy));
                let now = links.clock.now();
                port.feed(&mut core, now);
                core.handle_timeout(now);
                let tcp = &links.tcp;
                port.take_transmits(&mut core, |core, t| {
                    let origin = t.origin;
                    if tcp.try_send(t).is_err() {
                        core.handle_send_error(now, origin);
                    }
                });
                core.poll_timeout()
            };
            wake_main_if_earlier(&links, deadline);
        }
        port.send(&links.core, links.clock);
        if read {
            unrecorded_busy += started.elapsed();
        }
        tokio::select! {
            r = port.socket.readable() => r?,
            r = port.socket.writable(), if port.has_pending() => r?,
            r = port.socket.ready(Interest::ERROR) => {
                r?;
                let _ = port.socket.try_io(Interest::ERROR, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
                let mut core = lock(&links.core);
                let now = links.clock.now();
                port.drain_errors(&mut core, now);
            }
            r = links.stop.changed() => {
                if r.is_err() || *links.stop.borrow() {
                    break;
                }
            }
        }
    }
    port.flush(Duration::from_millis(200)).await;
    links
        .send_drops
        .fetch_add(port.send_drops, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::TcpHandoff;
    use bytes::Bytes;
    use sluice_proxy_core::{Lane, Transmit, Transport};

    fn transmit(len: usize) -> Transmit {
        Transmit {
            to: "127.0.0.1:5060".parse().unwrap(),
            transport: Transport::Tcp,
            lane: Lane::Shared,
            payload: Bytes::from(vec![b'x'; len]),
            origin: None,
            retransmission: false,
        }
    }

    #[test]
    fn the_handoff_to_the_main_loop_is_bounded_in_bytes_and_in_messages() {
        let (tx, mut rx) = TcpHandoff::new(3, 1000);
        assert!(tx.try_send(transmit(600)).is_ok());
        // 600 + 500 bytes: over the bound, whatever room the channel has.
        assert_eq!(tx.try_send(transmit(500)).unwrap_err().payload.len(), 500);
        assert!(tx.try_send(transmit(200)).is_ok());
        assert!(tx.try_send(transmit(100)).is_ok());
        // Three messages: the channel is full, though 100 bytes would fit.
        assert!(tx.try_send(transmit(100)).is_err());
        // What the main loop takes frees its bytes.
        assert_eq!(rx.try_recv().unwrap().payload.len(), 600);
        assert!(tx.try_send(transmit(500)).is_ok());
        assert!(tx.try_send(transmit(300)).is_err());
    }
}
