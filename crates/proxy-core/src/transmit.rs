//! What the core hands its driver to send.

use std::net::SocketAddr;

use bytes::Bytes;
use sluice_txn::Origin;

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: SocketAddr,
    pub payload: Bytes,
    /// The transaction that sent it, to report a send failure back with
    /// [`ProxyCore::handle_send_error`](crate::ProxyCore::handle_send_error); `None` for stateless sends.
    pub origin: Option<Origin>,
    /// A copy of something sent before: a transaction timer's retransmission, or a
    /// stateless relay of a datagram the driver marked as a retransmission
    /// ([`ProxyCore::handle_datagram_marked`](crate::ProxyCore::handle_datagram_marked)).
    pub retransmission: bool,
}
