//! The few Linux queries sluice needs that no maintained crate wraps:
//! - socket queries that neither socket2, nix, rustix nor tokio expose without `unsafe`
//!   (checked: they have no safe wrapper for `SIOCOUTQ` or `SIOCOUTQNSD`), each one `ioctl`
//!   on a descriptor the caller keeps open for the call's duration;
//! - a thread's CPU time from `/proc` (the proxy's UDP threads and the generator's report
//!   their own);
//! - ports free for UDP and TCP alike outside the kernel's ephemeral range, for test beds
//!   that must name a SIP port before the server binds it;
//! - batched UDP I/O on a tokio socket ([`udp_batch`]), which the proxy and the load
//!   generator share.

#[cfg(target_os = "linux")]
pub mod udp_batch;

use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;

/// Bytes in a TCP socket's send queue: written by the application but not yet
/// acknowledged by the peer (Linux `SIOCOUTQ`, tcp(7)). Smart forwarding's input (Shen and
/// Schulzrinne 2010 §6.2: "the current send buffer occupancy can be retrieved by a simple
/// standard ioctl call").
pub fn unsent_bytes(socket: &impl AsFd) -> io::Result<usize> {
    let fd = socket.as_fd().as_raw_fd();
    let mut unsent: libc::c_int = 0;
    // SAFETY: `fd` is borrowed from a live descriptor for the duration of the call, and
    // SIOCOUTQ writes exactly one `int` through the pointer, which points at `unsent`.
    #[allow(unsafe_code)]
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut unsent) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(unsent).unwrap_or(0))
}

/// `SIOCOUTQNSD` from linux/sockios.h, which the libc crate does not define.
const SIOCOUTQNSD: libc::Ioctl = 0x894B;

/// Bytes in a TCP socket's send queue that have not been sent yet (Linux `SIOCOUTQNSD`):
/// what the peer's receive window does not admit, excluding bytes in flight. Unlike
/// [`unsent_bytes`] it reads 0 on a connection whose peer keeps up, however long the
/// round trip or the peer's delayed ACK.
pub fn unsent_not_sent_bytes(socket: &impl AsFd) -> io::Result<usize> {
    let fd = socket.as_fd().as_raw_fd();
    let mut unsent: libc::c_int = 0;
    // SAFETY: as in `unsent_bytes`: a borrowed live descriptor, one `int` written.
    #[allow(unsafe_code)]
    let r = unsafe { libc::ioctl(fd, SIOCOUTQNSD, &raw mut unsent) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(unsent).unwrap_or(0))
}

/// CPU seconds (user + system) the calling thread has used, from `/proc/thread-self/stat`.
pub fn thread_cpu_seconds() -> Option<f64> {
    cpu_seconds_in("/proc/thread-self/stat")
}

/// Where another thread can read the calling thread's CPU time with [`cpu_seconds_in`].
pub fn thread_stat_path() -> Option<String> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let tid = stat.split(' ').next()?;
    Some(format!("/proc/self/task/{tid}/stat"))
}

/// CPU seconds (user + system) from a `/proc/.../stat` file.
pub fn cpu_seconds_in(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    // The kernel reports in USER_HZ ticks, 100 on Linux.
    Some((utime + stime) as f64 / 100.0)
}

/// A port reserved by [`reserve_sip_ports`]: the sockets hold it until they are dropped.
#[derive(Debug)]
pub struct ReservedPort {
    pub port: u16,
    pub udp: std::net::UdpSocket,
    pub tcp: std::net::TcpListener,
}

/// `n` distinct ports on `ip`, each free for UDP and TCP alike (a SIP server listens on both,
/// RFC 3261 §18), held until the caller drops them just before its servers bind them.
///
/// They are drawn below the kernel's ephemeral range (`ip_local_port_range`), where the
/// kernel never assigns a port by itself: a port it picked for UDP is often some client's
/// ephemeral TCP port, and any `connect` on the host may take an ephemeral port in the
/// moment between the drop and the server's bind.
pub fn reserve_sip_ports(ip: std::net::IpAddr, n: usize) -> io::Result<Vec<ReservedPort>> {
    const LOWEST: u32 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral_low.saturating_sub(LOWEST).max(1);
    // A start that differs between processes and calls, so concurrent test beds rarely
    // try the same ports; a collision is seen by the bind and skipped.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let mut held = Vec::with_capacity(n);
    for attempt in 0..span.min(4096) {
        if held.len() == n {
            break;
        }
        // A prime stride: the walk visits distinct ports unless the prime divides the span.
        let port = (LOWEST + (seed.wrapping_add(attempt.wrapping_mul(7_919))) % span) as u16;
        let Ok(udp) = std::net::UdpSocket::bind((ip, port)) else {
            continue;
        };
        if let Ok(tcp) = std::net::TcpListener::bind((ip, port)) {
            held.push(ReservedPort { port, udp, tcp });
        }
    }
    if held.len() < n {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("fewer than {n} ports on {ip} are free for both UDP and TCP"),
        ));
    }
    Ok(held)
}

/// One port of [`reserve_sip_ports`] on `ip`, released: free for UDP and TCP when asked.
pub fn free_sip_port(ip: std::net::IpAddr) -> io::Result<u16> {
    Ok(reserve_sip_ports(ip, 1)?[0].port)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::{reserve_sip_ports, unsent_bytes, unsent_not_sent_bytes};

    #[test]
    fn reserved_ports_are_distinct_outside_the_ephemeral_range_and_free_once_dropped() {
        let ip = std::net::IpAddr::from([127, 0, 0, 1]);
        let reserved = reserve_sip_ports(ip, 8).unwrap();
        let ports: std::collections::BTreeSet<u16> = reserved.iter().map(|r| r.port).collect();
        assert_eq!(ports.len(), 8);
        let ephemeral_low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            ports.iter().all(|&p| (10_000..ephemeral_low).contains(&p)),
            "{ports:?}"
        );
        // Held: nobody else binds them.
        assert!(std::net::UdpSocket::bind((ip, reserved[0].port)).is_err());
        drop(reserved);
        for port in ports {
            let _udp = std::net::UdpSocket::bind((ip, port)).unwrap();
            let _tcp = TcpListener::bind((ip, port)).unwrap();
        }
    }

    #[test]
    fn counts_what_a_peer_has_not_read_and_nothing_once_it_has() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        assert_eq!(unsent_bytes(&sender).unwrap(), 0);
        // Until the kernel takes no more: the receiver's buffer is full, and the rest waits
        // in the sender's queue.
        sender.set_nonblocking(true).unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0;
        for _ in 0..1024 {
            match sender.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let waiting = unsent_bytes(&sender).unwrap();
        assert!(waiting > 0 && waiting <= written, "{waiting} of {written}");
        // The receiver's window is closed: what waits has not been sent at all.
        let not_sent = unsent_not_sent_bytes(&sender).unwrap();
        assert!(
            not_sent > 0 && not_sent <= waiting,
            "{not_sent} of {waiting}"
        );
        let mut sink = vec![0u8; 1 << 20];
        let mut read = 0;
        while read < written {
            read += receiver.read(&mut sink).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(unsent_bytes(&sender).unwrap(), 0);
        assert_eq!(unsent_not_sent_bytes(&sender).unwrap(), 0);
    }
}
