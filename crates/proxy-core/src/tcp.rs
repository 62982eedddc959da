//! SIP over TCP (RFC 3261 §18) and the overload controls of Shen and Schulzrinne, "On
//! TCP-based SIP Server Overload Control" (IPTComm 2010): connection split (§6.1, ECS; §6.3,
//! ICS), buffer minimisation (§6.1, §6.4) and smart forwarding (§6.2–6.3).
//!
//! The core decides; the driver measures. What the core needs from the transport is one
//! number per outgoing connection, the bytes it has accepted but not yet delivered (Linux
//! `SIOCOUTQ` live, the link model's send buffer in the simulator), handed in with
//! [`ProxyCore::handle_send_queue`](crate::ProxyCore::handle_send_queue). The connections
//! themselves, their buffers and their limits belong to the driver.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Which outgoing connection to a next hop a message takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The one connection to the next hop (ICS), or, with ECS, the one for everything
    /// but new INVITEs.
    #[default]
    Shared,
    /// ECS: the connection that carries only the INVITEs that start sessions.
    Invites,
}

/// How requests to a next hop are spread over TCP connections (Shen and Schulzrinne
/// 2010, §6.1, §6.3).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectionSplit {
    /// Implicit connection split: one connection per next hop; smart forwarding looks at
    /// its send queue for INVITEs only (Fig. 11).
    #[default]
    Ics,
    /// Explicit connection split: INVITEs that start sessions on a connection of their
    /// own, everything else on another (Fig. 9); smart forwarding looks at the INVITE
    /// connection (Fig. 10).
    Ecs,
}

/// Most bytes one read turn takes out of a connection's socket: what its receive buffer
/// holds, up to this. The window reopens by a turn at once; the messages then wait in user
/// space for the processor. The shell reads so, and the simulator models it.
pub const MAX_TURN_BYTES: usize = 64 * 1024;

/// SIP over TCP: listening, connections to next hops, their limits, and Shen and
/// Schulzrinne's controls. Buffer sizes of 0 leave the kernel's default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TcpConfig {
    /// Listen for TCP on the same address and port as UDP (RFC 3261 §18: a proxy serves
    /// both). Responses go back on the connection their request came in on.
    pub listen: bool,
    /// Send requests to the configured next hops (`next_hop`, the rules' next hops, the
    /// overload next hops) over TCP. Requests to other destinations, and every request
    /// whose target URI says `transport=udp`, go over UDP; a target URI with
    /// `transport=tcp` goes over TCP.
    pub to_next_hops: bool,
    /// `ics`: one connection per next hop; `ecs`: a second one for new INVITEs.
    pub connection_split: ConnectionSplit,
    /// Smart forwarding (Shen and Schulzrinne 2010, §6.2): a new INVITE to a TCP next hop whose (INVITE) connection
    /// still holds unsent bytes is rejected with 503 here, instead of queueing behind
    /// them. Parameter-free: the test is "the send buffer is not empty".
    pub smart_forwarding: bool,
    /// Bytes of messages read from TCP connections that may wait in the processor's
    /// queues; past it the connections are not read until the processor catches up
    /// (the receiving server's application buffer of Shen and Schulzrinne 2010: 64 KB by
    /// default on their testbed, §5; buffer minimisation keeps it or the receive buffer
    /// small, §6.4). At least one message is always let in.
    pub application_buffer: usize,
    /// SO_RCVBUF of accepted connections, bytes (buffer minimisation at the receiving
    /// server: the paper recommends room for a couple of INVITEs, 2 KB). 0: kernel default.
    pub listen_receive_buffer: usize,
    /// SO_RCVBUF of an accepted connection whose first message is an INVITE, bytes; 0:
    /// `listen_receive_buffer`. With ECS the sending server opens a connection for its
    /// new INVITEs alone, and ECS+BM minimises the buffer of that connection only (Shen
    /// and Schulzrinne 2010, §6.1, Fig. 9), which the receiver knows by its first message
    /// (the other connection begins with an ACK or a response; under ICS the one
    /// connection begins with an INVITE too). Every accepted connection starts with this
    /// buffer, since Linux negotiates the window for the buffer a connection starts with
    /// (shrunk afterwards, windows stalled), and one whose first message is not an
    /// INVITE then gets `listen_receive_buffer`, or 64 KiB if that is 0.
    pub invite_connection_receive_buffer: usize,
    /// SO_SNDBUF of accepted connections, bytes. 0: kernel default.
    pub listen_send_buffer: usize,
    /// SO_RCVBUF of connections to next hops, bytes. 0: kernel default.
    pub next_hop_receive_buffer: usize,
    /// SO_SNDBUF of connections to next hops, bytes (the sending server's send buffer,
    /// which need not be minimised: Shen and Schulzrinne 2010, §6.4). 0: kernel default.
    pub next_hop_send_buffer: usize,
    /// Largest TCP segment of the proxy's connections, accepted and outgoing, bytes
    /// (`TCP_MAXSEG`, tcp(7); both ends use the smaller of what each announces). 0: the
    /// path's, which on loopback is about 64 KiB: a segment that large does not fit a
    /// minimised receive buffer's window, and Linux's sender then waits for its
    /// zero-window probe, backing off to seconds, rather than send part of it. 1,460 is
    /// what an Ethernet path gives.
    pub max_segment_size: usize,
    /// Most TCP connections open at once, accepted and outgoing; beyond, new ones are
    /// refused (counted).
    pub max_connections: usize,
    /// New connections accepted per second, with a burst of one second's worth; the
    /// excess is closed at once (counted). 0: no limit.
    pub accepts_per_second: f64,
    /// Bytes waiting in user space to be written on one connection; a message that does
    /// not fit is dropped (counted), so a peer that stops reading holds at most this.
    pub write_queue_bytes: usize,
    /// Bytes waiting in user space on all connections together. Past it, a connection may
    /// hold only its even share (this over the connections holding bytes, at least
    /// `max_message_size`), all together at most twice this, and one that holds nothing
    /// one message; a message beyond is dropped (counted). Peers that stop reading then
    /// hold at most twice this plus a message per connection, not `max_connections` times
    /// `write_queue_bytes`, and cannot take the room of those that read.
    pub write_queues_total_bytes: usize,
    /// A connection with no traffic either way for this long is closed, seconds.
    pub idle_timeout_s: f64,
    /// A message begun but not completed within this long closes its connection
    /// (counted), seconds: a peer cannot hold a buffer open by trickling bytes.
    pub message_timeout_s: f64,
    /// Largest SIP message accepted on a connection, bytes; a longer one closes it
    /// (counted).
    pub max_message_size: usize,
    /// Longest wait for an outgoing connection to be established, seconds; the requests
    /// that waited for it then fail (§16.9: 500 upstream).
    pub connect_timeout_s: f64,
    /// Connection reuse (RFC 5923): a peer whose request came on a connection it opened,
    /// with `alias` in its Via, gets the requests for its Via's sent-by address on that
    /// connection, instead of on one this proxy would open. RFC 5923 asks for TLS so that
    /// nobody can alias an address not its own; over plain TCP the alias is taken only
    /// when the sent-by host is the connection's own source address, so a peer can steer
    /// only the traffic meant for itself. Refusals are counted.
    pub accept_aliases: bool,
    /// Put `alias` in this proxy's Via on TCP (RFC 5923 §5): the next hop may send its
    /// requests back on the connection this proxy opened.
    pub alias: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            listen: true,
            to_next_hops: false,
            connection_split: ConnectionSplit::Ics,
            smart_forwarding: false,
            application_buffer: 65_536,
            listen_receive_buffer: 0,
            invite_connection_receive_buffer: 0,
            listen_send_buffer: 0,
            next_hop_receive_buffer: 0,
            next_hop_send_buffer: 0,
            max_segment_size: 0,
            max_connections: 16_384,
            accepts_per_second: 1_000.0,
            write_queue_bytes: 1 << 20,
            write_queues_total_bytes: 64 << 20,
            idle_timeout_s: 600.0,
            message_timeout_s: 10.0,
            max_message_size: 65_535,
            connect_timeout_s: 2.0,
            accept_aliases: true,
            alias: false,
        }
    }
}

/// Whether a message is an INVITE: what ECS gives a connection of its own, and how the
/// receiving side knows that connection by its first message.
pub fn is_invite(message: &[u8]) -> bool {
    message.starts_with(b"INVITE ")
}

impl TcpConfig {
    /// The segment sizes `max_segment_size` allows besides 0: from 536, the default send
    /// MSS of RFC 9293 §3.7.1, to 32,767, the largest Linux takes.
    pub const SEGMENT_SIZES: std::ops::RangeInclusive<usize> = 536..=32_767;

    /// `max_segment_size` as `TCP_MAXSEG` takes it, if one is set.
    pub fn segment_size(&self) -> Option<u32> {
        u32::try_from(self.max_segment_size)
            .ok()
            .filter(|&mss| mss > 0)
    }

    /// SO_RCVBUF an accepted connection starts with (0: the kernel's default).
    pub fn accepted_receive_buffer(&self) -> usize {
        if self.invite_connection_receive_buffer > 0 {
            self.invite_connection_receive_buffer
        } else {
            self.listen_receive_buffer
        }
    }

    /// SO_RCVBUF of an accepted connection that began with the INVITE connections'
    /// buffer, once its first message, `first`, has arrived.
    pub fn accepted_receive_buffer_after(&self, first: &[u8]) -> usize {
        match (is_invite(first), self.listen_receive_buffer) {
            (true, _) => self.accepted_receive_buffer(),
            (false, 0) => 64 * 1024,
            (false, size) => size,
        }
    }

    /// Ranges serde cannot check; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("tcp.idle_timeout_s", self.idle_timeout_s),
            ("tcp.message_timeout_s", self.message_timeout_s),
            ("tcp.connect_timeout_s", self.connect_timeout_s),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0 && v <= 1.0e7) {
                return Err(format!("{name} = {v}: allowed above 0, up to 1e7 seconds"));
            }
        }
        if !(self.accepts_per_second.is_finite() && self.accepts_per_second >= 0.0) {
            return Err(format!(
                "tcp.accepts_per_second = {}: allowed 0 or more",
                self.accepts_per_second
            ));
        }
        if self.application_buffer == 0 {
            return Err("tcp.application_buffer = 0: allowed 1 or more".into());
        }
        if self.max_connections == 0 {
            return Err("tcp.max_connections = 0: allowed 1 or more".into());
        }
        if !(256..=1 << 24).contains(&self.max_message_size) {
            return Err(format!(
                "tcp.max_message_size = {}: allowed 256 to 16777216",
                self.max_message_size
            ));
        }
        if self.max_segment_size != 0 && !Self::SEGMENT_SIZES.contains(&self.max_segment_size) {
            return Err(format!(
                "tcp.max_segment_size = {}: allowed 0 (the path's) or {} to {}",
                self.max_segment_size,
                Self::SEGMENT_SIZES.start(),
                Self::SEGMENT_SIZES.end()
            ));
        }
        if self.write_queue_bytes < self.max_message_size {
            return Err(format!(
                "tcp.write_queue_bytes = {}: allowed tcp.max_message_size ({}) or more",
                self.write_queue_bytes, self.max_message_size
            ));
        }
        if self.write_queues_total_bytes < self.write_queue_bytes {
            return Err(format!(
                "tcp.write_queues_total_bytes = {}: allowed tcp.write_queue_bytes ({}) or more",
                self.write_queues_total_bytes, self.write_queue_bytes
            ));
        }
        Ok(())
    }
}

/// The send queues of the outgoing connections, as the driver last measured them.
#[derive(Debug, Default)]
pub(crate) struct SendQueues {
    /// Few next hops: a vector beats a map, and nothing iterates it into output.
    unsent: Vec<((SocketAddr, Lane), usize)>,
}

impl SendQueues {
    pub(crate) fn set(&mut self, to: SocketAddr, lane: Lane, bytes: usize) {
        if let Some((_, b)) = self.unsent.iter_mut().find(|(k, _)| *k == (to, lane)) {
            *b = bytes;
        } else if self.unsent.len() < 4096 {
            // Bounded: the driver reports the connections to the destinations this proxy
            // sends requests to, and past this many the rest read as empty.
            self.unsent.push(((to, lane), bytes));
        }
    }

    /// Bytes waiting towards `to` on `lane`; 0 for a connection never measured.
    pub(crate) fn get(&self, to: SocketAddr, lane: Lane) -> usize {
        self.unsent
            .iter()
            .find(|(k, _)| *k == (to, lane))
            .map_or(0, |(_, b)| *b)
    }
}

/// Connection reuse (RFC 5923): the accepted connections whose peers asked, by `alias` in
/// their Via, to get the requests for their sent-by address on them. One alias per
/// connection (the latest), at most `limit` in all.
#[derive(Debug, Default)]
pub(crate) struct Aliases {
    connection_of: HashMap<SocketAddr, SocketAddr>,
    sent_by_of: HashMap<SocketAddr, SocketAddr>,
    limit: usize,
}

impl Aliases {
    pub(crate) fn new(limit: usize) -> Aliases {
        Aliases {
            limit,
            ..Aliases::default()
        }
    }

    /// The connection whose remote address is `connection` is also the way to
    /// `sent_by`. False when the table is full.
    pub(crate) fn learn(&mut self, connection: SocketAddr, sent_by: SocketAddr) -> bool {
        if self.connection_of.get(&sent_by) == Some(&connection) {
            return true;
        }
        let replaces = self.sent_by_of.contains_key(&connection);
        if !replaces && self.sent_by_of.len() >= self.limit {
            return false;
        }
        self.forget(connection);
        if let Some(previous) = self.connection_of.insert(sent_by, connection) {
            // The address moved to a newer connection: the older one no longer names it.
            self.sent_by_of.remove(&previous);
        }
        self.sent_by_of.insert(connection, sent_by);
        true
    }

    /// The connection closed: what it aliased goes back to opening its own.
    pub(crate) fn forget(&mut self, connection: SocketAddr) {
        if let Some(sent_by) = self.sent_by_of.remove(&connection) {
            self.connection_of.remove(&sent_by);
        }
    }

    /// The accepted connection that carries requests to `to`, if its peer asked for it.
    pub(crate) fn connection_to(&self, to: SocketAddr) -> Option<SocketAddr> {
        if self.connection_of.is_empty() {
            return None;
        }
        self.connection_of.get(&to).copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.sent_by_of.len()
    }
}
