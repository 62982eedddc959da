//! The few Linux queries sluice needs that no maintained crate wraps:
//! - socket queries that neither socket2, nix, rustix nor tokio expose without `unsafe`
//!   (checked: they have no safe wrapper for `SIOCOUTQ` or `SIOCOUTQNSD`), each one `ioctl`
//!   on a descriptor the caller keeps open for the call's duration;
//! - a thread's CPU time from `/proc` (the proxy's UDP threads and the generator's report
//!   their own).

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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::{unsent_bytes, unsent_not_sent_bytes};

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
