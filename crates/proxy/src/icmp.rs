//! ICMP errors for the datagrams the proxy sends (RFC 3261 §18.4). Linux reports them on
//! an unconnected UDP socket only when `IP_RECVERR` (`IPV6_RECVERR`) is set, and then in
//! the socket's error queue: per error the destination of the failed datagram and its
//! first bytes, as much as the ICMP message carried back (about 500 on IPv4). The shell
//! reads them here and hands destination and bytes to the core, which knows what they
//! mean; nothing here reads SIP.
//!
//! With the option set, an ICMP error is also left pending on the socket: the next receive
//! or send fails with it once (a send so failed did not go out), so the shell drains the
//! queue whenever a socket call fails.

use std::io;
use std::net::SocketAddr;

/// Error-queue entries read per drain at most, so that a flood of ICMP cannot hold the
/// loop; what is left stays queued (the kernel bounds the queue by the receive buffer).
const DRAIN_LIMIT: usize = 256;

/// Turns on the error queue for `socket`.
#[cfg(target_os = "linux")]
pub(crate) fn enable(socket: &socket2::Socket, v6: bool) -> io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    if v6 {
        setsockopt(socket, sockopt::Ipv6RecvErr, &true)?;
        // A dual-stack socket's IPv4 destinations report through the IPv4 option.
        let _ = setsockopt(socket, sockopt::Ipv4RecvErr, &true);
    } else {
        setsockopt(socket, sockopt::Ipv4RecvErr, &true)?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn enable(_socket: &socket2::Socket, _v6: bool) -> io::Result<()> {
    Ok(())
}

/// Whether an ICMP error says the destination cannot be reached (RFC 3261 §18.4: host,
/// network, port or protocol unreachable, or a parameter problem). Source quench, time
/// exceeded and "fragmentation needed" / "packet too big" say nothing about the peer
/// being there, and are ignored.
#[cfg(target_os = "linux")]
fn is_unreachable(err: &nix::libc::sock_extended_err) -> bool {
    use nix::libc::{SO_EE_ORIGIN_ICMP, SO_EE_ORIGIN_ICMP6};
    match err.ee_origin {
        // Destination unreachable (3) but fragmentation needed (code 4); parameter problem.
        SO_EE_ORIGIN_ICMP => (err.ee_type == 3 && err.ee_code != 4) || err.ee_type == 12,
        // Destination unreachable (1); parameter problem (4).
        SO_EE_ORIGIN_ICMP6 => err.ee_type == 1 || err.ee_type == 4,
        _ => false,
    }
}

/// Reads the error queue of `fd` until it is empty (or [`DRAIN_LIMIT`]), calling
/// `unreachable(destination, first bytes)` for each error that says the destination
/// cannot be reached. Returns how many entries it read, of any kind.
#[cfg(target_os = "linux")]
pub(crate) fn drain(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    mut unreachable: impl FnMut(SocketAddr, &[u8]),
) -> usize {
    use nix::errno::Errno;
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    let mut cmsg = nix::cmsg_space!(nix::libc::sock_extended_err, nix::libc::sockaddr_in6);
    let mut read = 0;
    while read < DRAIN_LIMIT {
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = match recvmsg::<SockaddrStorage>(
            fd,
            &mut iov,
            Some(cmsg.as_mut_slice()),
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(msg) => msg,
            Err(Errno::EINTR) => continue,
            // EAGAIN: the queue is empty; anything else: nothing more to read either.
            Err(_) => break,
        };
        read += 1;
        let to = msg.address.and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::V4((*v4).into()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into())))
        });
        let bytes = msg.bytes;
        let failed = msg.cmsgs().is_ok_and(|mut c| {
            c.any(|c| match c {
                ControlMessageOwned::Ipv4RecvErr(err, _)
                | ControlMessageOwned::Ipv6RecvErr(err, _) => is_unreachable(&err),
                _ => false,
            })
        });
        if let (true, Some(to)) = (failed, to) {
            unreachable(to, &buf[..bytes.min(buf.len())]);
        }
    }
    read
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn drain(
    _fd: std::os::fd::RawFd,
    _buf: &mut [u8],
    _unreachable: impl FnMut(SocketAddr, &[u8]),
) -> usize {
    0
}
