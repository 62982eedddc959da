//! What every simulated node shares: the context a handler runs in (the clock, the
//! network's outbox, the measurement ledger), and the transaction-layer drain loop of
//! `sluice_txn`'s crate docs, which the user agents run after each input.

use bytes::Bytes;
use sluice_proxy_core::Lane;
use sluice_time::Time;
use sluice_txn::{Event, Origin, TransactionLayer, Transmit};
use std::net::SocketAddr;

use crate::ledger::Ledger;
use crate::net::{NodeId, Packet, Send};

/// A handler's view of the world for one event.
#[derive(Debug)]
pub(crate) struct Cx<'a> {
    pub now: Time,
    pub sends: &'a mut Vec<Send>,
    pub ledger: &'a mut Ledger,
    /// Hang-ups to schedule: (when, call).
    pub hangups: &'a mut Vec<(Time, u32)>,
}

impl Cx<'_> {
    /// Hands a datagram to the network.
    pub fn send(&mut self, from: NodeId, to: NodeId, bytes: Bytes, retrans: bool) {
        self.sends.push(Send {
            to,
            packet: Packet {
                from,
                bytes,
                retrans,
            },
            stream: None,
            origin: None,
        });
    }

    /// Writes a message on the TCP connection to `to` (as the sender names it) on `lane`;
    /// if the connection cannot take it, the sender is told of `origin`'s failure.
    pub fn send_stream(
        &mut self,
        from: NodeId,
        (to, lane): (SocketAddr, Lane),
        (bytes, retrans): (Bytes, bool),
        origin: Option<Origin>,
    ) {
        self.sends.push(Send {
            to: from,
            packet: Packet {
                from,
                bytes,
                retrans,
            },
            stream: Some((to, lane)),
            origin,
        });
    }
}

/// A node that runs a transaction user on top of a [`TransactionLayer`].
pub(crate) trait Tu {
    fn txn(&mut self) -> &mut TransactionLayer;
    /// A message the layer wants sent.
    fn on_transmit(&mut self, cx: &mut Cx<'_>, t: Transmit);
    /// An event for the transaction user.
    fn on_event(&mut self, cx: &mut Cx<'_>, e: Event);

    /// A connection could not take a message of `origin` (its write queue was full): a
    /// transport error, as the live load generator reports it to its transaction layer
    /// (a user agent's ACK has no transaction, and nothing to tell).
    fn on_send_error(&mut self, cx: &mut Cx<'_>, origin: Option<Origin>) {
        if let Some(origin) = origin {
            self.txn().handle_transport_error(origin);
            self.drain(cx);
        }
    }

    /// Drains transmits and events until both queues are empty (TU reactions may queue
    /// more of either).
    fn drain(&mut self, cx: &mut Cx<'_>) {
        loop {
            let mut any = false;
            while let Some(t) = self.txn().poll_transmit() {
                any = true;
                if t.retransmission {
                    cx.ledger.retransmission(&t.payload);
                }
                self.on_transmit(cx, t);
            }
            while let Some(e) = self.txn().poll_event() {
                any = true;
                self.on_event(cx, e);
            }
            if !any {
                break;
            }
        }
    }
}
