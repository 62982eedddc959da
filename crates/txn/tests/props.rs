//! Random operation sequences against a small table: no panic, the counters agree with the
//! events, and every transaction and timer is gone once the clock has run far enough.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use sluice_sip::{edit, Message};
use sluice_time::Time;
use sluice_txn::{Config, Event, Origin, Peer, TransactionLayer, TxId};

const METHODS: [&str; 5] = ["INVITE", "ACK", "CANCEL", "BYE", "OPTIONS"];
const STATUSES: [u16; 7] = [100, 180, 200, 202, 404, 486, 503];

#[derive(Clone, Debug)]
enum Op {
    Send {
        method: usize,
        branch: u8,
        tcp: bool,
    },
    Receive {
        method: usize,
        branch: u8,
        sent_by: u8,
        tcp: bool,
    },
    ReceiveResponse {
        method: usize,
        branch: u8,
        status: usize,
    },
    Respond {
        pick: usize,
        status: usize,
    },
    Send2xx {
        call: u8,
        tcp: bool,
    },
    Cancel {
        pick: usize,
    },
    TransportError {
        pick: usize,
    },
    Garbage(Vec<u8>),
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..5usize, 0..6u8, any::<bool>()).prop_map(|(method, branch, tcp)| Op::Send {
            method,
            branch,
            tcp
        }),
        (0..5usize, 0..6u8, 0..2u8, any::<bool>()).prop_map(|(method, branch, sent_by, tcp)| {
            Op::Receive {
                method,
                branch,
                sent_by,
                tcp,
            }
        }),
        (0..5usize, 0..6u8, 0..7usize).prop_map(|(method, branch, status)| Op::ReceiveResponse {
            method,
            branch,
            status
        }),
        (any::<usize>(), 0..7usize).prop_map(|(pick, status)| Op::Respond { pick, status }),
        (0..4u8, any::<bool>()).prop_map(|(call, tcp)| Op::Send2xx { call, tcp }),
        any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        any::<usize>().prop_map(|pick| Op::TransportError { pick }),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Garbage),
        (0..40_000u32).prop_map(Op::Advance),
    ]
}

fn request(method: &str, branch: u8, sent_by: u8, tcp: bool) -> Message {
    let transport = if tcp { "TCP" } else { "UDP" };
    let text = format!(
        "{method} sip:bob@example.com SIP/2.0\r\n\
         Via: SIP/2.0/{transport} host{sent_by}.example.com;branch=z9hG4bK{branch}\r\n\
         From: <sip:a@example.com>;tag=f\r\nTo: <sip:b@example.com>\r\n\
         Call-ID: call{branch}\r\nCSeq: 7 {method}\r\nContent-Length: 0\r\n\r\n"
    );
    Message::parse(Bytes::from(text)).unwrap()
}

fn peer(tcp: bool) -> Peer {
    let addr = SocketAddr::from(([198, 51, 100, 1], 5060));
    if tcp {
        Peer::tcp(addr)
    } else {
        Peer::udp(addr)
    }
}

fn nth<T: Copy>(set: &BTreeSet<T>, pick: usize) -> Option<T> {
    if set.is_empty() {
        None
    } else {
        set.iter().nth(pick % set.len()).copied()
    }
}

struct World {
    layer: TransactionLayer,
    now: Time,
    live: BTreeSet<TxId>,
    servers: BTreeSet<sluice_txn::ServerTxId>,
    clients: BTreeSet<sluice_txn::ClientTxId>,
    origins: Vec<Origin>,
    terminated_events: u64,
}

impl World {
    fn drain(&mut self) {
        while let Some(t) = self.layer.poll_transmit() {
            if self.origins.len() < 64 {
                self.origins.push(t.origin);
            }
        }
        while let Some(e) = self.layer.poll_event() {
            match e {
                Event::Request { tx, .. } => {
                    assert!(self.live.insert(TxId::Server(tx)), "fresh server id");
                    self.servers.insert(tx);
                }
                Event::Terminated { tx } => {
                    assert!(self.live.remove(&tx), "terminated once, and only live ones");
                    if let TxId::Server(s) = tx {
                        self.servers.remove(&s);
                    }
                    if let TxId::Client(c) = tx {
                        self.clients.remove(&c);
                    }
                    self.terminated_events += 1;
                }
                _ => {}
            }
        }
        let s = self.layer.stats();
        assert_eq!(
            self.layer.len() as u64,
            s.client_created + s.server_created - s.terminated
        );
        assert_eq!(s.terminated, self.terminated_events);
        assert_eq!(self.layer.len(), self.live.len());
        assert!(self.layer.len() <= self.layer.config().max_transactions);
    }

    fn advance(&mut self, by: Duration) {
        let until = self.now + by;
        while let Some(t) = self.layer.poll_timeout() {
            if t > until {
                break;
            }
            assert!(t >= self.now);
            self.now = t;
            self.layer.handle_timeout(t);
            self.drain();
        }
        self.now = until;
    }

    fn apply(&mut self, op: Op) {
        let now = self.now;
        match op {
            Op::Send {
                method,
                branch,
                tcp,
            } => {
                let req = request(METHODS[method], branch, 0, tcp);
                if let Ok(id) = self.layer.send_request(now, req, peer(tcp)) {
                    self.live.insert(TxId::Client(id));
                    self.clients.insert(id);
                }
            }
            Op::Receive {
                method,
                branch,
                sent_by,
                tcp,
            } => {
                let req = request(METHODS[method], branch, sent_by, tcp);
                self.layer.handle_message(now, req, peer(tcp));
            }
            Op::ReceiveResponse {
                method,
                branch,
                status,
            } => {
                let req = request(METHODS[method], branch, 0, false);
                let resp = Message::parse(edit::response_to(&req, STATUSES[status]).build());
                if let Ok(resp) = resp {
                    self.layer.handle_message(now, resp, peer(false));
                }
            }
            Op::Respond { pick, status } => {
                if let Some(id) = nth(&self.servers, pick) {
                    let req = request("INVITE", 0, 0, false);
                    let resp = edit::response_to(&req, STATUSES[status]).build();
                    let _ = self.layer.respond_bytes(now, id, STATUSES[status], resp);
                }
            }
            Op::Send2xx { call, tcp } => {
                let req = request("INVITE", call, 0, tcp);
                let ok = Message::parse(edit::response_to(&req, 200).build()).unwrap();
                let _ = self.layer.send_2xx_reliably(now, ok, peer(tcp));
            }
            Op::Cancel { pick } => {
                if let Some(id) = nth(&self.clients, pick) {
                    if let Ok(c) = self.layer.cancel(now, id) {
                        self.live.insert(TxId::Client(c));
                        self.clients.insert(c);
                    }
                }
            }
            Op::TransportError { pick } => {
                if !self.origins.is_empty() {
                    let o = self.origins[pick % self.origins.len()];
                    self.layer.handle_transport_error(o);
                }
            }
            Op::Garbage(bytes) => {
                if let Ok(m) = Message::parse(Bytes::from(bytes)) {
                    self.layer.handle_message(now, m, peer(false));
                }
            }
            Op::Advance(ms) => self.advance(Duration::from_millis(u64::from(ms))),
        }
        self.drain();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_operations_keep_the_books_and_drain_to_empty(ops in proptest::collection::vec(op(), 1..80)) {
        let mut w = World {
            layer: TransactionLayer::new(Config {
                max_transactions: 8,
                max_reliable_2xx: 2,
                ..Config::default()
            }),
            now: Time::ZERO,
            live: BTreeSet::new(),
            servers: BTreeSet::new(),
            clients: BTreeSet::new(),
            origins: Vec::new(),
            terminated_events: 0,
        };
        for op in ops {
            w.apply(op);
        }
        w.advance(Duration::from_secs(400));
        // Left: INVITE clients in Proceeding and server transactions awaiting the TU.
        for tx in w.live.clone() {
            prop_assert!(w.layer.terminate_tx(tx));
        }
        w.drain();
        w.advance(Duration::from_secs(400));
        prop_assert!(w.layer.is_empty());
        prop_assert_eq!(w.layer.reliable_2xx_len(), 0);
        prop_assert_eq!(w.layer.live_timers(), 0);
        prop_assert_eq!(w.layer.poll_timeout(), None);
        prop_assert_eq!(w.layer.timer_entries(), 0);
    }
}
