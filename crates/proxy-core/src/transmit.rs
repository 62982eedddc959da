//! What the core hands its driver to send.

use std::net::SocketAddr;

use bytes::Bytes;
use sluice_txn::{Origin, Transport};

use crate::tcp::Lane;

/// A message to send: a datagram, or a message to write on a TCP connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// UDP: the destination. TCP: the remote address of the connection, which the driver
    /// opens if it has none (a next hop's listening address) or finds among the
    /// connections it accepted (a response goes back on its request's connection).
    pub to: SocketAddr,
    pub transport: Transport,
    /// TCP with ECS: which of the connections to `to` carries it.
    pub lane: Lane,
    pub payload: Bytes,
    /// The transaction that sent it, to report a send failure back with
    /// [`ProxyCore::handle_send_error`](crate::ProxyCore::handle_send_error); `None` for stateless sends.
    pub origin: Option<Origin>,
    /// A copy of something sent before: a transaction timer's retransmission, or a
    /// stateless relay of a datagram the driver marked as a retransmission
    /// ([`ProxyCore::handle_datagram_marked`](crate::ProxyCore::handle_datagram_marked)).
    pub retransmission: bool,
}
