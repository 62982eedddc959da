//! RFC 3261 §17 SIP transactions, sans IO, in the style of quinn-proto.
//!
//! A [`TransactionLayer`] holds every client and server transaction of one SIP element in a
//! bounded table keyed by the matching rules of §17.1.3 and §17.2.3, plus the 2xx
//! retransmission a UAS core performs (§13.3.1.4). It never reads a clock or touches a
//! socket: the driver (the simulator, or the tokio shell) hands it messages and `now`, and
//! takes back messages to send, events for the transaction user (TU) and the next deadline.
//! Same inputs, same outputs: nothing iterates a hash map, and equal deadlines fire in the
//! order they were set.
//!
//! # Driving it
//!
//! ```text
//! loop {
//!     match what woke the driver {
//!         datagram/frame from peer => layer.handle_message(now, Message::parse(bytes)?, peer),
//!         deadline reached          => layer.handle_timeout(now),
//!         send failed for origin    => layer.handle_transport_error(origin),
//!     }
//!     // Drain both queues; TU reactions to events (send_request, respond, cancel,
//!     // send_2xx_reliably, ...) may queue more of either, so drain until both are empty.
//!     while let Some(t) = layer.poll_transmit() { send t.payload to t.to }
//!     while let Some(e) = layer.poll_event()    { the TU handles e }
//!     sleep until layer.poll_timeout() (None: until the next input)
//! }
//! ```
//!
//! [`TransactionLayer::handle_message`] also returns a [`Received`] saying what became of the
//! message (new transaction, delivered, absorbed retransmission, stray, refused, malformed),
//! for the driver's accounting; the same facts are counted in [`Stats`].
//!
//! ```
//! use std::net::SocketAddr;
//! use bytes::Bytes;
//! use sluice_sip::{edit, Message};
//! use sluice_time::Time;
//! use sluice_txn::{Config, Event, Peer, TransactionLayer};
//!
//! let invite = Message::parse(Bytes::from_static(
//!     b"INVITE sip:bob@example.com SIP/2.0\r\n\
//!       Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\n\
//!       From: <sip:alice@example.com>;tag=1\r\nTo: <sip:bob@example.com>\r\n\
//!       Call-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
//! ))
//! .unwrap();
//! let bob = Peer::udp(SocketAddr::from(([192, 0, 2, 2], 5060)));
//! let mut layer = TransactionLayer::new(Config::default());
//! let tx = layer.send_request(Time::ZERO, invite.clone(), bob).unwrap();
//! assert_eq!(layer.poll_transmit().unwrap().to, bob);
//! assert_eq!(layer.poll_timeout(), Some(Time::from_millis(500))); // Timer A
//!
//! let ok = Message::parse(edit::response_to(&invite, 200).to_tag("2").build()).unwrap();
//! layer.handle_message(Time::from_millis(80), ok, bob);
//! assert!(matches!(layer.poll_event(), Some(Event::Response { tx: t, .. }) if t == tx));
//! assert!(matches!(layer.poll_event(), Some(Event::Terminated { .. })));
//! assert!(layer.is_empty() && layer.poll_timeout().is_none());
//! ```
//!
//! # What the TU sees
//!
//! * Client transaction ([`TransactionLayer::send_request`]): zero or more
//!   [`Event::Response`] with provisionals, then one of: [`Event::Response`] with the final
//!   response (a 3xx–6xx to an INVITE is ACKed by the layer), [`Event::Timeout`] (Timer B or
//!   F) or [`Event::TransportError`]; then, at once or after Timer D/K, [`Event::Terminated`].
//! * Server transaction: [`Event::Request`] (a CANCEL names the INVITE transaction it
//!   cancels), then the TU calls [`TransactionLayer::respond`] with provisionals and one final
//!   response; retransmitted requests and the ACK for a 3xx–6xx are absorbed. It ends with
//!   [`Event::Terminated`] (at once for a 2xx to an INVITE, after Timer I/J otherwise), preceded
//!   by [`Event::Timeout`] when Timer H finds no ACK.
//! * Messages outside any transaction: [`Event::StrayResponse`] (a proxy forwards them
//!   statelessly, §16.7/§18.1.2), [`Event::Ack2xx`] (the end-to-end ACK for a 2xx; it also stops
//!   a matching [`TransactionLayer::send_2xx_reliably`]), [`Event::Refused`] (table full).
//! * [`Event::GaveUp2xx`]: a reliably sent 2xx saw no ACK in 64*T1; the TU sends a BYE.
//!
//! Every transaction ends with exactly one `Terminated`, after which its id is dead (ids carry
//! a generation, so a dead id never reaches a newer transaction).
//!
//! # Bounded memory
//!
//! The table holds at most [`Config::max_transactions`] transactions and
//! [`Config::max_reliable_2xx`] retransmitted 2xx; what does not fit is refused and counted
//! ([`Stats::refused`]). Transactions leave the table when they terminate. The timer queue
//! cancels lazily and compacts when stale entries outnumber live ones (see `timer.rs`).
//!
//! # Left to the TU
//!
//! Timer C and the proxy's CANCEL logic (§16.6–16.8; [`TransactionLayer::terminate_tx`] ends
//! an INVITE client transaction the TU gives up on), the 100 Trying an INVITE server
//! transaction should send within 200 ms (§17.2.1; a proxy sends it as soon as it decides to
//! forward), and response routing by Via `received`/`rport` (§18.2.2): responses go back to
//! the transport peer the request came from.

mod index;
mod layer;
mod slab;
mod timer;
mod types;

pub use layer::TransactionLayer;
pub use types::{
    Absorbed, ClientTxId, Config, Event, Origin, Peer, Received, Refusals, Refused, Reliable2xxId,
    RespondError, Retransmissions, ServerTxId, Stats, Timer, TimersFired, Transmit, Transport,
    TxId,
};
