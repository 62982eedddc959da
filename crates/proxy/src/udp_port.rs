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
//!
//! What the core sends leaves in the order the core made it, whichever thread made it: the
//! threads share one [`Outbox`], filled under the core's lock, and one thread at a time
//! sends from it (on its own socket: all are bound to the same address). Each thread
//! sending what it took would let a thread preempted between the lock and its send be
//! overtaken: a callee's 180 relayed after its 200, which a caller past its 2xx rejects
//! (SIPp aborts the call).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proxy_core::{ProxyCore, Transmit, Transport};
use sluice_time::Time;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch, Notify};

use crate::icmp;
use sluice_sys::udp_batch::{self, RecvBuffers};

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

/// The UDP transmits the core made that the kernel has not taken, in the core's order,
/// shared by the UDP threads; one of them at a time sends.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: Mutex<VecDeque<Transmit>>,
    /// A thread is sending: the others leave what they added to it.
    sending: AtomicBool,
    /// The last send stopped on a full socket buffer: the threads wait for their sockets
    /// to be writable, and the first that is sends.
    blocked: AtomicBool,
    /// Transmits dropped because the send buffers stayed full.
    drops: AtomicU64,
}

impl Outbox {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Transmit>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the newest [`MAX_PENDING_SENDS`], counting the others as dropped.
    fn bound(&self, queue: &mut VecDeque<Transmit>) {
        let excess = queue.len().saturating_sub(MAX_PENDING_SENDS);
        if excess > 0 {
            queue.drain(..excess);
            self.drops.fetch_add(excess as u64, Ordering::Relaxed);
        }
    }
}

/// One UDP socket of the proxy with what it read but the core has not seen.
pub(crate) struct UdpPort {
    pub(crate) socket: UdpSocket,
    buffers: RecvBuffers,
    inbox: Vec<(Bytes, SocketAddr)>,
    /// The socket reported an error (an ICMP message about an earlier send): its details
    /// wait in the error queue for the core.
    errors_waiting: bool,
    outbox: Arc<Outbox>,
    /// What this thread is sending, taken from the outbox (its allocation kept between
    /// turns).
    sending: VecDeque<Transmit>,
    /// The transmit at the front of `sending` already failed once on an error left by an
    /// ICMP message about an earlier datagram.
    retried: bool,
    error_buf: Vec<u8>,
    /// Datagrams this socket read, in its slot of the proxy's counters.
    read_counter: Arc<[AtomicU64]>,
    index: usize,
}

impl UdpPort {
    /// The socket of UDP thread `index`, counting what it reads in `read_counter[index]`
    /// and sending from the threads' shared `outbox`.
    pub(crate) fn new(
        socket: UdpSocket,
        index: usize,
        read_counter: Arc<[AtomicU64]>,
        outbox: Arc<Outbox>,
    ) -> Self {
        Self {
            read_counter,
            index,
            socket,
            buffers: RecvBuffers::new(),
            inbox: Vec::with_capacity(RECV_BATCH),
            errors_waiting: false,
            outbox,
            sending: VecDeque::new(),
            retried: false,
            error_buf: vec![0u8; 65_536],
        }
    }

    /// Transmits dropped so far because the send buffers stayed full, over all threads.
    pub(crate) fn send_drops(&self) -> u64 {
        self.outbox.drops.load(Ordering::Relaxed)
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

    /// Takes what the core has to send (under its lock, so in its order): UDP into the
    /// outbox, TCP to `tcp`. Returns whether there was anything.
    pub(crate) fn take_transmits(
        &mut self,
        core: &mut ProxyCore,
        mut tcp: impl FnMut(&mut ProxyCore, Transmit),
    ) -> bool {
        let mut any = false;
        let mut queue = None;
        while let Some(t) = core.poll_transmit() {
            any = true;
            match t.transport {
                Transport::Udp => queue
                    .get_or_insert_with(|| self.outbox.queue())
                    .push_back(t),
                Transport::Tcp => tcp(core, t),
            }
        }
        if let Some(mut queue) = queue {
            self.outbox.bound(&mut queue);
        }
        any
    }

    /// UDP transmits wait to be sent, by whichever thread.
    pub(crate) fn has_pending(&self) -> bool {
        !self.outbox.queue().is_empty()
    }

    /// The last send stopped on a full buffer and transmits still wait: worth waiting for
    /// this socket to be writable.
    pub(crate) fn send_blocked(&self) -> bool {
        self.outbox.blocked.load(Ordering::Relaxed) && self.has_pending()
    }

    /// Sends what the outbox holds until a socket would block, unless another thread is
    /// sending (it takes what was added meanwhile before it lets go). Without the core but
    /// for errors.
    pub(crate) fn send(&mut self, core: &Mutex<ProxyCore>, clock: Clock) {
        loop {
            if self.outbox.sending.swap(true, Ordering::Acquire) {
                return;
            }
            std::mem::swap(&mut self.sending, &mut *self.outbox.queue());
            let blocked = self.send_taken(core, clock);
            if !self.sending.is_empty() {
                // Sent before anything added meanwhile, which the core made later.
                let mut queue = self.outbox.queue();
                self.sending.append(&mut queue);
                std::mem::swap(&mut self.sending, &mut *queue);
                self.outbox.bound(&mut queue);
            }
            self.outbox.blocked.store(blocked, Ordering::Relaxed);
            self.outbox.sending.store(false, Ordering::Release);
            // What a thread added while this one sent, and left to it.
            if blocked || !self.has_pending() {
                return;
            }
        }
    }

    /// Sends `self.sending` until the socket would block (returns true) or it is empty.
    fn send_taken(&mut self, core: &Mutex<ProxyCore>, clock: Clock) -> bool {
        while !self.sending.is_empty() {
            match udp_batch::send(
                &self.socket,
                self.sending.iter().map(|t| (&t.payload[..], t.to)),
            ) {
                Ok(sent) => {
                    self.sending.drain(..sent.max(1));
                    self.retried = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
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
                    if let Some(t) = self.sending.pop_front() {
                        core.handle_send_error(now, t.origin);
                    }
                }
            }
        }
        false
    }

    /// Sends what the outbox holds, waiting for the socket (or for another thread's turn)
    /// as needed, for at most `limit`.
    pub(crate) async fn flush(&mut self, core: &Mutex<ProxyCore>, clock: Clock, limit: Duration) {
        let until = Instant::now() + limit;
        while self.has_pending() {
            self.send(core, clock);
            if !self.has_pending() {
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let wait = left.min(Duration::from_millis(1));
            if self.outbox.blocked.load(Ordering::Relaxed) {
                let _ = tokio::time::timeout(wait, self.socket.writable()).await;
            } else {
                tokio::time::sleep(wait).await;
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
    /// The UDP transmits of every thread, in the core's order.
    pub(crate) outbox: Arc<Outbox>,
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
            r = port.socket.writable(), if port.send_blocked() => r?,
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
    port.flush(&links.core, links.clock, Duration::from_millis(200))
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Clock, Outbox, TcpHandoff, UdpPort};
    use bytes::Bytes;
    use sluice_proxy_core::{Lane, ProxyConfig, ProxyCore, Transmit, Transport};
    use sluice_time::Time;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

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

    fn datagram(to: std::net::SocketAddr, n: u8) -> Transmit {
        Transmit {
            to,
            transport: Transport::Udp,
            payload: Bytes::from(vec![n]),
            ..transmit(0)
        }
    }

    /// Two threads' sockets on one outbox: whichever sends, what the core made leaves in
    /// the order it made it, and a thread never sends while another is sending.
    #[test]
    fn the_threads_send_what_the_core_made_in_its_order() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let callee = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            callee
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let to = callee.local_addr().unwrap();
            let outbox = Arc::new(Outbox::default());
            let counters: Arc<[AtomicU64]> = Arc::from(vec![AtomicU64::new(0)]);
            let port = |outbox: &Arc<Outbox>| {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                socket.set_nonblocking(true).unwrap();
                let socket = tokio::net::UdpSocket::from_std(socket).unwrap();
                UdpPort::new(socket, 0, counters.clone(), outbox.clone())
            };
            let (mut first, mut second) = (port(&outbox), port(&outbox));
            // Tokio sends only on a socket it has seen writable.
            first.socket.writable().await.unwrap();
            second.socket.writable().await.unwrap();
            let core = Mutex::new(ProxyCore::new(
                &ProxyConfig::default(),
                "127.0.0.1:5060".parse().unwrap(),
                Time::ZERO,
            ));
            let clock = Clock {
                origin: Instant::now(),
            };
            // The first thread took 1 and 2 under the core's lock, the second then 3; the
            // second sends first.
            outbox.queue().extend([1, 2, 3].map(|n| datagram(to, n)));
            // While the first is sending, the second leaves everything to it.
            outbox.sending.store(true, Ordering::SeqCst);
            second.send(&core, clock);
            assert_eq!(outbox.queue().len(), 3);
            outbox.sending.store(false, Ordering::SeqCst);
            second.send(&core, clock);
            outbox.queue().push_back(datagram(to, 4));
            first.send(&core, clock);
            assert!(!first.has_pending() && !second.send_blocked());
            let mut got = Vec::new();
            let mut buf = [0u8; 8];
            for _ in 0..4 {
                let (n, _) = callee.recv_from(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, [1, 2, 3, 4]);
            assert_eq!(first.send_drops(), 0);
        });
    }
}
