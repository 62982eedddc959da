//! Batched UDP I/O: `recvmmsg(2)` and `sendmmsg(2)` through nix, so that one wake-up reads
//! and writes many datagrams per system call. tokio's `UdpSocket` moves one datagram per
//! call, and quinn-udp batches sends only as GSO segments of equal size to one destination,
//! which a proxy's sends (each to its own peer, each its own size) are not.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    recvmmsg, sendmmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams moved per system call. Linux caps a batch at `UIO_MAXIOV` (1,024); past a few
/// dozen the per-call saving is spent, and the receive buffers cost memory.
pub const BATCH: usize = 32;

/// The largest datagram the socket can deliver (IPv4's 65,535 less its headers), rounded up.
const MAX_UDP_PAYLOAD: usize = 65_536;

/// Receive buffers for one `recvmmsg`: [`BATCH`] of them, each as large as a UDP datagram
/// can be, so none is cut and the core judges every length against its own limit (which a
/// reload may change). Zeroed allocations stay unmapped until written: resident memory
/// grows by the pages datagrams touch, not by the buffers' size.
pub struct RecvBuffers {
    bufs: Vec<Vec<u8>>,
    /// Per buffer: the bytes received and the sender, for the last batch.
    got: Vec<(usize, Option<SocketAddr>)>,
}

impl std::fmt::Debug for RecvBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuffers")
            .field("buffers", &self.bufs.len())
            .field("last_batch", &self.got.len())
            .finish()
    }
}

impl Default for RecvBuffers {
    fn default() -> Self {
        Self::with_size(MAX_UDP_PAYLOAD)
    }
}

impl RecvBuffers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Buffers of `size` bytes each: a longer datagram arrives cut to it.
    pub fn with_size(size: usize) -> Self {
        Self {
            bufs: (0..BATCH).map(|_| vec![0u8; size]).collect(),
            got: Vec::with_capacity(BATCH),
        }
    }

    /// One `recvmmsg` without blocking: hands each datagram that came with a sender's
    /// address to `each`, and returns how many the kernel gave. `WouldBlock` when there was
    /// none (tokio's readiness is cleared then); any other error is the socket's pending
    /// error (an ICMP report with `IP_RECVERR`), as `recv_from` would return it.
    pub fn recv(
        &mut self,
        socket: &UdpSocket,
        mut each: impl FnMut(&[u8], SocketAddr),
    ) -> io::Result<usize> {
        let fd = socket.as_raw_fd();
        let Self { bufs, got } = self;
        got.clear();
        socket.try_io(Interest::READABLE, || {
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(bufs.len(), None);
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs
                .iter_mut()
                .map(|b| [IoSliceMut::new(b.as_mut_slice())])
                .collect();
            let received = recvmmsg(
                fd,
                &mut headers,
                slices.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            )?;
            got.extend(received.map(|m| (m.bytes, m.address.and_then(std_addr))));
            Ok(())
        })?;
        for (buf, &(len, from)) in self.bufs.iter().zip(&self.got) {
            if let Some(from) = from {
                each(&buf[..len.min(buf.len())], from);
            }
        }
        Ok(self.got.len())
    }
}

/// One `sendmmsg` of the first [`BATCH`] of `datagrams` (payload and destination) without
/// blocking; returns how many of them the kernel took, from the front (at least one). An
/// error is the first datagram's: `WouldBlock` while the send buffer is full, else what
/// `send_to` would have returned for it (the kernel reports an error only when it sent
/// nothing).
pub fn send<'a>(
    socket: &UdpSocket,
    datagrams: impl IntoIterator<Item = (&'a [u8], SocketAddr)>,
) -> io::Result<usize> {
    let fd = socket.as_raw_fd();
    let mut slices: Vec<[IoSlice<'_>; 1]> = Vec::with_capacity(BATCH);
    let mut addresses: Vec<Option<SockaddrStorage>> = Vec::with_capacity(BATCH);
    for (payload, to) in datagrams.into_iter().take(BATCH) {
        slices.push([IoSlice::new(payload)]);
        addresses.push(Some(SockaddrStorage::from(to)));
    }
    if slices.is_empty() {
        return Ok(0);
    }
    socket.try_io(Interest::WRITABLE, || {
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(slices.len(), None);
        let no_control: [ControlMessage<'_>; 0] = [];
        let sent = sendmmsg(
            fd,
            &mut headers,
            &slices,
            &addresses,
            no_control,
            MsgFlags::MSG_DONTWAIT,
        )?;
        Ok(sent.count())
    })
}

fn std_addr(a: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_goes_out_in_order_to_each_destination_and_comes_in_with_its_senders() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let (to_b, to_c) = (b.local_addr().unwrap(), c.local_addr().unwrap());
        let pending: [(&[u8], SocketAddr); 3] = [(b"one", to_b), (b"two", to_c), (b"three", to_b)];
        a.writable().await.unwrap();
        assert_eq!(send(&a, pending).unwrap(), 3);

        let mut buffers = RecvBuffers::new();
        let mut at_b = Vec::new();
        while at_b.len() < 2 {
            b.readable().await.unwrap();
            let _ = buffers.recv(&b, |d, from| at_b.push((d.to_vec(), from)));
        }
        let from_a = a.local_addr().unwrap();
        assert_eq!(
            at_b,
            vec![(b"one".to_vec(), from_a), (b"three".to_vec(), from_a)]
        );
        c.readable().await.unwrap();
        let mut at_c = Vec::new();
        buffers
            .recv(&c, |d, from| at_c.push((d.to_vec(), from)))
            .unwrap();
        assert_eq!(at_c, vec![(b"two".to_vec(), from_a)]);
        // Nothing left: the socket says so rather than blocking.
        let empty = buffers.recv(&c, |_, _| panic!("no datagram was sent"));
        assert_eq!(empty.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[tokio::test]
    async fn a_datagram_longer_than_its_buffer_arrives_cut_to_it() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        a.send_to(&[b'x'; 100], b.local_addr().unwrap())
            .await
            .unwrap();
        let mut buffers = RecvBuffers::with_size(65);
        let mut lengths = Vec::new();
        b.readable().await.unwrap();
        buffers.recv(&b, |d, _| lengths.push(d.len())).unwrap();
        assert_eq!(lengths, vec![65]);
    }
}
