//! The TCP link model of Shen and Schulzrinne, "On TCP-based SIP Server Overload Control"
//! (2010), §3 and Fig. 4: as simple as the mechanism they study allows. Each connection is a
//! reliable, in-order byte stream in each direction with the link's delay and no loss (so no
//! congestion control either). The sender's socket holds at most its send buffer of bytes
//! not yet in the receiver's socket, and puts bytes on the wire only into space the
//! receiver's buffer has (flow control by the advertised window): a message larger than
//! that space passes in segments. What the send buffer cannot take waits, in order, in a
//! bounded user-space write queue, as in the live shell; a message that does not fit there
//! is dropped and counted. The receiving node reads its receive buffer through the
//! product's `StreamFramer`, one message at a time, and only while its proxy core has room
//! (`ProxyCore::has_room`): a full queue stops the reading, the receive buffer fills, the
//! window closes and the sender's buffers fill, which is the push-back of §5.
//!
//! Two simplifications, both invisible at the paper's 0.2 ms round trip and exact at the
//! simulator's default zero delay: acknowledgements and window updates reach the sender at
//! once (the data pays the link's delay, the feedback does not), and a connection exists
//! from its first message on (no handshake).
//!
//! Addresses: a node listens on port 5060; the end of a connection it opened, as the other
//! side sees it, is its address with port `EPHEMERAL_PORT` plus the lane (0: the shared
//! connection, 1: ECS's INVITE connection). A message to a listening address takes the
//! connection the sender opened to that node on its lane, else opens one; one to an
//! ephemeral address goes back on that connection (a response, a 2xx relayed by a Via
//! with `rport`, or a request the proxy core sends on a connection its peer aliased,
//! RFC 5923).

use bytes::Bytes;
use sluice_proxy_core::{Lane, TcpConfig, MAX_TURN_BYTES};
use sluice_sip::StreamFramer;
use sluice_time::Time;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::net::{NodeId, Topology};

/// The port of the end a node opened, plus the lane.
const EPHEMERAL_PORT: u16 = 40_000;
const LISTEN_PORT: u16 = 5060;

/// One node's sockets: buffer sizes (bytes) on the connections it accepts and on those it
/// opens, its write queue per connection and the largest message its framer takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sockets {
    pub accepted_send: u64,
    pub accepted_receive: u64,
    pub opened_send: u64,
    pub opened_receive: u64,
    pub write_queue: u64,
    pub max_message: usize,
    /// The receive buffer of an accepted connection whose first message is an INVITE,
    /// when it has one of its own (0: `accepted_receive`).
    pub accepted_invites_receive: u64,
}

impl Sockets {
    /// A proxy's, from its `[tcp]` table; a size of 0 is the driver's default.
    pub fn of_proxy(tcp: &TcpConfig, send_default: usize, receive_default: usize) -> Sockets {
        let or = |v: usize, d: usize| if v == 0 { d } else { v };
        Sockets {
            accepted_send: send_capacity(or(tcp.listen_send_buffer, send_default)),
            accepted_receive: receive_capacity(or(tcp.listen_receive_buffer, receive_default)),
            opened_send: send_capacity(or(tcp.next_hop_send_buffer, send_default)),
            opened_receive: receive_capacity(or(tcp.next_hop_receive_buffer, receive_default)),
            write_queue: tcp.write_queue_bytes as u64,
            max_message: tcp.max_message_size,
            accepted_invites_receive: match tcp.invite_connection_receive_buffer {
                0 => 0,
                size => receive_capacity(size),
            },
        }
    }

    /// A user agent's: the scenario's socket sizes.
    pub fn of_user_agent(send: usize, receive: usize, write_queue: usize) -> Sockets {
        Sockets {
            accepted_send: send_capacity(send),
            accepted_receive: receive_capacity(receive),
            opened_send: send_capacity(send),
            opened_receive: receive_capacity(receive),
            write_queue: write_queue as u64,
            max_message: TcpConfig::default().max_message_size,
            accepted_invites_receive: 0,
        }
    }
}

/// Bytes of data a socket's send buffer holds for an SO_SNDBUF of `so_sndbuf`: Linux
/// doubles what setsockopt asks, for its bookkeeping (socket(7)), and on loopback about all
/// of it holds data (measured on Linux 6.18: 32.0 to 35.1 KB for 16 KB).
pub(crate) fn send_capacity(so_sndbuf: usize) -> u64 {
    2 * so_sndbuf as u64
}

/// Bytes of data a socket's receive buffer holds, which is the window it offers, for an
/// SO_RCVBUF of `so_rcvbuf`. Linux doubles the size and offers the share of it that its
/// measured per-segment overhead leaves: for ~1 KB messages on loopback about the size
/// itself up to 4 KB, and half as much again of what is beyond (a line through the means
/// measured on Linux 6.18 with 400 to 1,000-byte writes: 2,000 bytes for 2 KB, 9.3 KB for
/// 8 KB, 45 KB for 32 KB, 64 KB for 43,690, 97 KB for 64 KB).
pub(crate) fn receive_capacity(so_rcvbuf: usize) -> u64 {
    let s = so_rcvbuf as u64;
    s + s.saturating_sub(4096) / 2
}

/// One direction of one connection. Offsets count bytes from the stream's start:
/// `read <= arrived <= sent <= written <= appended`.
#[derive(Debug)]
struct Half {
    to: NodeId,
    /// The sender as the receiver names it (the connection's remote address there).
    from_addr: SocketAddr,
    /// The receiver as the sender names it.
    to_addr: SocketAddr,
    lane: Lane,
    delay: Duration,
    send_buffer: u64,
    receive_buffer: u64,
    write_queue: u64,
    /// The messages in the stream not yet wholly read, with the simulator's retransmission
    /// mark; the first starts at offset `head`.
    msgs: VecDeque<(Bytes, bool)>,
    head: u64,
    /// Accepted from the application (queued in user space or in the socket).
    appended: u64,
    /// Moved into the send buffer.
    written: u64,
    /// The last move left bytes in the write queue: the writer waits to be woken.
    blocked: bool,
    /// Put on the wire.
    sent: u64,
    /// In the receiver's receive buffer (acknowledged: gone from the send buffer).
    arrived: u64,
    /// Read out of the socket by the receiving application, a turn at a time: what frees
    /// the window.
    drained: u64,
    /// Of that, taken by the receiving node as messages.
    read: u64,
    /// Bytes on the wire: when they arrive, and the offset they reach.
    flight: VecDeque<(Time, u64)>,
    framer: StreamFramer,
    /// `appended - arrived` as last handed to the sender's core.
    reported: u64,
}

impl Half {
    /// What smart forwarding reads (§6.2): the bytes the sender has not put on the wire
    /// yet (its write queue, and what its send buffer holds back for the receiver's
    /// window), as the live shell reads them (its write queue and `SIOCOUTQNSD`). Bytes in
    /// flight are not a backlog: counting them would reject at every load on a link with
    /// any delay.
    fn unsent(&self) -> u64 {
        self.appended - self.sent
    }
}

/// Every connection of a run.
#[derive(Debug)]
pub(crate) struct Streams {
    topo: Topology,
    sockets: Vec<Sockets>,
    /// Connection `c` is halves `2c` (opener to acceptor) and `2c + 1`.
    halves: Vec<Half>,
    /// (opener, acceptor, lane) → connection. Only looked up, never iterated.
    index: HashMap<(NodeId, NodeId, Lane), u32, foldhash::fast::FixedState>,
    /// Per node: the halves it writes, and those it reads with a round-robin cursor.
    outputs: Vec<Vec<u32>>,
    inputs: Vec<Vec<u32>>,
    cursor: Vec<usize>,
    /// Per node: the connection it is reading; its turn lasts while what the turn drained
    /// out of the socket is not all taken.
    turn: Vec<Option<u32>>,
    /// Messages no write queue could take.
    pub drops: u64,
    /// Per node: the messages and bytes its write queues could not take.
    pub dropped_by: Vec<(u64, u64)>,
    /// Per node: the messages it read.
    pub read_by: Vec<u64>,
    /// Messages addressed to no connection (an ephemeral address nobody opened).
    pub unroutable: u64,
    /// Messages the framer could not cut out of the stream.
    pub malformed: u64,
}

fn lane_index(lane: Lane) -> u16 {
    match lane {
        Lane::Shared => 0,
        Lane::Invites => 1,
    }
}

impl Streams {
    pub fn new(topo: Topology, sockets: Vec<Sockets>) -> Self {
        let n = topo.nodes();
        Self {
            topo,
            sockets,
            halves: Vec::new(),
            index: HashMap::default(),
            outputs: vec![Vec::new(); n],
            inputs: vec![Vec::new(); n],
            cursor: vec![0; n],
            turn: vec![None; n],
            drops: 0,
            dropped_by: vec![(0, 0); n],
            read_by: vec![0; n],
            unroutable: 0,
            malformed: 0,
        }
    }

    /// The half `from` writes to reach `to_addr` on `lane` (an ephemeral port names its
    /// lane itself), opening the connection if needed.
    fn half_for(
        &mut self,
        from: NodeId,
        to_addr: SocketAddr,
        (lane, first): (Lane, &[u8]),
        delay: impl Fn(NodeId, NodeId) -> Duration,
    ) -> Option<u32> {
        let IpAddr::V4(ip) = to_addr.ip() else {
            return None;
        };
        let peer = self.topo.node_of_ip(ip)?;
        let port = to_addr.port();
        if port == LISTEN_PORT {
            if let Some(&c) = self.index.get(&(from, peer, lane)) {
                return Some(2 * c);
            }
            return Some(2 * self.open(from, peer, (lane, first), &delay));
        }
        let lane = match port.checked_sub(EPHEMERAL_PORT)? {
            0 => Lane::Shared,
            1 => Lane::Invites,
            _ => return None,
        };
        self.index.get(&(peer, from, lane)).map(|&c| 2 * c + 1)
    }

    /// Opens a connection from `opener` to `acceptor` on `lane` for the message `first`.
    fn open(
        &mut self,
        opener: NodeId,
        acceptor: NodeId,
        (lane, first): (Lane, &[u8]),
        delay: &impl Fn(NodeId, NodeId) -> Duration,
    ) -> u32 {
        let c = (self.halves.len() / 2) as u32;
        self.index.insert((opener, acceptor, lane), c);
        let (o, a) = (
            self.sockets[opener.0 as usize],
            self.sockets[acceptor.0 as usize],
        );
        let listening = |n: NodeId| SocketAddr::new(IpAddr::V4(self.topo.ip(n)), LISTEN_PORT);
        let ephemeral = SocketAddr::new(
            IpAddr::V4(self.topo.ip(opener)),
            EPHEMERAL_PORT + lane_index(lane),
        );
        // (sender, its send buffer), (receiver, its receive buffer).
        let half = |(from, from_addr, send_buffer, sender): (NodeId, SocketAddr, u64, &Sockets),
                    (to, to_addr, receive_buffer, receiver): (
            NodeId,
            SocketAddr,
            u64,
            &Sockets,
        )| Half {
            to,
            from_addr,
            to_addr,
            lane,
            delay: delay(from, to),
            send_buffer,
            receive_buffer,
            write_queue: sender.write_queue,
            msgs: VecDeque::new(),
            head: 0,
            appended: 0,
            written: 0,
            blocked: false,
            sent: 0,
            arrived: 0,
            drained: 0,
            read: 0,
            flight: VecDeque::new(),
            framer: StreamFramer::new(receiver.max_message),
            reported: 0,
        };
        // The acceptor learns what the connection is for from its first message, as the
        // live shell does (ECS's INVITE connection begins with one).
        let accepted_receive =
            if sluice_proxy_core::is_invite(first) && a.accepted_invites_receive > 0 {
                a.accepted_invites_receive
            } else {
                a.accepted_receive
            };
        let forward = half(
            (opener, ephemeral, o.opened_send, &o),
            (acceptor, listening(acceptor), accepted_receive, &a),
        );
        let backward = half(
            (acceptor, listening(acceptor), a.accepted_send, &a),
            (opener, ephemeral, o.opened_receive, &o),
        );
        self.halves.push(forward);
        self.halves.push(backward);
        self.outputs[opener.0 as usize].push(2 * c);
        self.inputs[acceptor.0 as usize].push(2 * c);
        self.outputs[acceptor.0 as usize].push(2 * c + 1);
        self.inputs[opener.0 as usize].push(2 * c + 1);
        c
    }

    /// `from` writes a message towards `to_addr`: returns the half it went to, or `None`
    /// if it was dropped (write queue full, or no such connection). Call [`Self::pump`]
    /// on the half next.
    pub fn write(
        &mut self,
        from: NodeId,
        to_addr: SocketAddr,
        lane: Lane,
        (bytes, retrans): (Bytes, bool),
        delay: impl Fn(NodeId, NodeId) -> Duration,
    ) -> Option<u32> {
        let Some(h) = self.half_for(from, to_addr, (lane, &bytes), delay) else {
            self.unroutable += 1;
            return None;
        };
        let half = &mut self.halves[h as usize];
        let len = bytes.len() as u64;
        // Whatever the socket cannot take must fit in the write queue.
        if half.appended + len > half.arrived + half.send_buffer + half.write_queue {
            self.drops += 1;
            let by = &mut self.dropped_by[from.0 as usize];
            by.0 += 1;
            by.1 += len;
            return None;
        }
        half.appended += len;
        half.msgs.push_back((bytes, retrans));
        Some(h)
    }

    /// Moves bytes from the write queue into the send buffer and from the send buffer onto
    /// the wire, as far as the buffers and the receiver's window allow. Returns when the
    /// bytes it put on the wire arrive, if that needs a new event.
    pub fn pump(&mut self, h: u32, now: Time) -> Option<Time> {
        let half = &mut self.halves[h as usize];
        // A writer the full send buffer turned away is woken when a third of it is free
        // again (Linux's `sk_stream_min_wspace`: free space at least half of what is
        // queued), so a write queue drains into the socket in chunks, as the shell's does.
        let in_socket = half.written - half.arrived;
        if !half.blocked || 3 * in_socket <= 2 * half.send_buffer {
            half.written = half.appended.min(half.arrived + half.send_buffer);
            half.blocked = half.written < half.appended;
        }
        let window_end = half.drained + half.receive_buffer;
        let sent = half.written.min(window_end);
        if sent <= half.sent {
            return None;
        }
        half.sent = sent;
        let at = now + half.delay;
        match half.flight.back_mut() {
            // Bytes sent at the same instant arrive together: one event.
            Some(last) if last.0 == at => {
                last.1 = sent;
                None
            }
            _ => {
                half.flight.push_back((at, sent));
                Some(at)
            }
        }
    }

    /// The bytes due by `now` reach the receiver's buffer.
    pub fn arrive(&mut self, h: u32, now: Time) {
        let half = &mut self.halves[h as usize];
        while let Some(&(at, upto)) = half.flight.front() {
            if at > now {
                break;
            }
            half.arrived = upto;
            half.flight.pop_front();
        }
    }

    /// The node that reads `h`.
    pub fn reader(&self, h: u32) -> NodeId {
        self.halves[h as usize].to
    }

    /// The connection `node` reads next, if any has bytes for it: the one it is reading, or
    /// the next in turn. A node's read of a connection takes what its receive buffer holds
    /// when the read begins, up to [`MAX_TURN_BYTES`], out of the socket at once (one
    /// `read()` per ready socket, as the proxy's shell does: the window reopens by all of
    /// it), then gives it to the node a message at a time while the node has room, before
    /// the next connection's turn; so a connection's share of the reading is what its
    /// receive buffer holds, which is why minimising it limits a sender (§6.1).
    pub fn next_to_read(&self, node: NodeId) -> Option<u32> {
        let i = node.0 as usize;
        if let Some(h) = self.turn[i].filter(|&h| self.in_turn(h)) {
            return Some(h);
        }
        let inputs = &self.inputs[i];
        let n = inputs.len();
        (0..n)
            .map(|step| inputs[(self.cursor[i] + step) % n])
            .find(|&h| self.readable(h))
    }

    /// `node` reads `h` now: begins a turn unless it is in one of `h`'s.
    pub fn begin_read(&mut self, node: NodeId, h: u32) {
        let i = node.0 as usize;
        if self.turn[i] == Some(h) && self.in_turn(h) {
            return;
        }
        // One read() of what the socket holds, up to a turn's worth, as the shell reads.
        let half = &mut self.halves[h as usize];
        half.drained = half.arrived.min(half.drained + MAX_TURN_BYTES as u64);
        self.turn[i] = Some(h);
        if let Some(k) = self.inputs[i].iter().position(|&x| x == h) {
            self.cursor[i] = (k + 1) % self.inputs[i].len();
        }
    }

    /// What a turn drained out of `h`'s socket is not all taken yet.
    fn in_turn(&self, h: u32) -> bool {
        let half = &self.halves[h as usize];
        half.read < half.drained
    }

    /// Bytes wait in `h`'s receive buffer.
    fn readable(&self, h: u32) -> bool {
        let half = &self.halves[h as usize];
        half.arrived > half.drained
    }

    /// Reads what has arrived of the next message into the framer; returns the message,
    /// its retransmission mark and its sender's address as the reader names it, once it is
    /// whole. Reading frees window: [`Self::pump`] the half after.
    pub fn read_one(&mut self, h: u32) -> Option<(Bytes, bool, SocketAddr)> {
        let half = &mut self.halves[h as usize];
        let (front, retrans) = half.msgs.front()?;
        let end = half.head + front.len() as u64;
        let upto = end.min(half.drained);
        if upto <= half.read {
            return None;
        }
        let from = (half.read - half.head) as usize;
        let to = (upto - half.head) as usize;
        half.framer.push(&front[from..to]);
        half.read = upto;
        if upto < end {
            return None;
        }
        let retrans = *retrans;
        half.head = end;
        half.msgs.pop_front();
        if let Ok(Some(msg)) = half.framer.next_message() {
            self.read_by[half.to.0 as usize] += 1;
            return Some((msg, retrans, half.from_addr));
        }
        // Every message here is written by the product's code with its Content-Length: a
        // framing failure is a bug, which the report's malformed count shows.
        self.malformed += 1;
        None
    }

    /// The sends `node` has made whose unsent bytes changed since it was last told, as
    /// (the receiver as `node` names it, lane, bytes), marked as told.
    pub fn changed_unsent(&mut self, node: NodeId, mut tell: impl FnMut(SocketAddr, Lane, usize)) {
        for &h in &self.outputs[node.0 as usize] {
            let half = &mut self.halves[h as usize];
            let unsent = half.unsent();
            if unsent != half.reported {
                half.reported = unsent;
                tell(half.to_addr, half.lane, unsent as usize);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPO: Topology = Topology { sources: 1 };

    fn sockets(send: u64, receive: u64, write_queue: u64) -> Vec<Sockets> {
        let s = Sockets {
            accepted_send: send,
            accepted_receive: receive,
            opened_send: send,
            opened_receive: receive,
            write_queue,
            max_message: 65_535,
            accepted_invites_receive: 0,
        };
        vec![s; TOPO.nodes()]
    }

    fn listening(n: NodeId) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(TOPO.ip(n)), LISTEN_PORT)
    }

    fn message(len: usize) -> Bytes {
        let head = format!(
            "OPTIONS sip:x SIP/2.0\r\nContent-Length: {}\r\n\r\n",
            len - 47
        );
        let mut m = head.into_bytes();
        m.resize(len, b'b');
        Bytes::from(m)
    }

    fn no_delay(_: NodeId, _: NodeId) -> Duration {
        Duration::ZERO
    }

    #[test]
    fn a_message_larger_than_the_receive_buffer_passes_in_segments() {
        let (se, re) = (TOPO.se(0), TOPO.re());
        let mut s = Streams::new(TOPO, sockets(16_384, 1_000, 1 << 20));
        let m = message(2_500);
        assert_eq!(m.len(), 2_500);
        let h = s
            .write(
                se,
                listening(re),
                Lane::Shared,
                (m.clone(), false),
                no_delay,
            )
            .unwrap();
        let t = Time::ZERO;
        let mut segments = 0;
        let got = loop {
            // Only what the receiver's buffer has room for goes on the wire.
            let Some(at) = s.pump(h, t) else {
                panic!("stalled after {segments} segments")
            };
            segments += 1;
            let half = &s.halves[h as usize];
            assert!(half.sent - half.read <= 1_000);
            s.arrive(h, at);
            assert_eq!(s.next_to_read(re), Some(h));
            s.begin_read(re, h);
            if let Some((bytes, retrans, from)) = s.read_one(h) {
                assert!(!retrans);
                assert_eq!(from.ip(), IpAddr::V4(TOPO.ip(se)));
                break bytes;
            }
        };
        assert_eq!(segments, 3);
        assert_eq!(got, m);
        assert_eq!(s.halves[h as usize].unsent(), 0);
    }

    #[test]
    fn unsent_bytes_count_the_write_queue_and_the_send_buffer_not_the_wire_and_a_full_queue_drops()
    {
        let (se, re) = (TOPO.se(0), TOPO.re());
        let mut s = Streams::new(TOPO, sockets(1_000, 1_000, 1_500));
        let m = message(600);
        let write = |s: &mut Streams| {
            s.write(
                se,
                listening(re),
                Lane::Invites,
                (m.clone(), false),
                no_delay,
            )
        };
        let h = write(&mut s).unwrap();
        assert_eq!(s.pump(h, Time::ZERO), Some(Time::ZERO));
        // The receiver's window admits it: on the wire at once, so nothing is unsent.
        let mut told = Vec::new();
        s.changed_unsent(se, |to, lane, n| told.push((to, lane, n)));
        assert!(told.is_empty(), "{told:?}");
        s.arrive(h, Time::ZERO);
        // Beyond the 600 bytes in the receiver's buffer the sender holds its send buffer
        // (1,000) and its write queue (1,500): four more messages, not five. The window
        // (1,000 bytes, 600 taken and not read) lets 400 of them go; 2,000 wait.
        for _ in 0..4 {
            assert_eq!(write(&mut s), Some(h));
            s.pump(h, Time::ZERO);
        }
        assert_eq!(s.halves[h as usize].unsent(), 2_000);
        let mut told = Vec::new();
        s.changed_unsent(se, |to, lane, n| told.push((to, lane, n)));
        assert_eq!(told, [(listening(re), Lane::Invites, 2_000)]);
        assert_eq!(write(&mut s), None, "the write queue is full");
        assert_eq!(s.drops, 1);
        // The RE's answer goes back on the same connection, named by its ephemeral end.
        let from = s.halves[h as usize].from_addr;
        assert_eq!(from.port(), EPHEMERAL_PORT + 1);
        let back = s
            .write(re, from, Lane::Shared, (message(100), false), no_delay)
            .unwrap();
        assert_eq!(back, h + 1);
        assert_eq!(s.reader(back), se);
        // An ephemeral end nobody opened names no connection.
        let nobody = SocketAddr::new(IpAddr::V4(TOPO.ip(TOPO.caller(0))), EPHEMERAL_PORT);
        assert_eq!(
            s.write(re, nobody, Lane::Shared, (message(100), false), no_delay),
            None
        );
        assert_eq!(s.unroutable, 1);
    }
}
