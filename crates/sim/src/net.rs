//! The network of §4.2 (Figure 2): node numbering and addresses, datagrams, and links
//! with a one-way delay and a loss probability per direction (the paper's links have
//! neither; its §7 names both as future work).
//!
//! Datagrams carry real SIP bytes and nothing else: feedback (RE → SE) and feed-forward
//! (SE → RE) travel as Via parameters inside them (RFC 7339 `oc`, `oc-algo`,
//! `oc-validity`, `oc-seq`, and sluice's `sluice-ff`), as between live proxies.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_proxy_core::Lane;
use sluice_time::Time;
use sluice_txn::{Origin, Peer};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::scenario::LinkConfig;

/// A node: callers `0..n`, SEs `n..2n`, the RE at `2n`, the callee population at `2n+1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct NodeId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Caller(usize),
    Se(usize),
    Re,
    Callee,
}

/// Node numbering and the address plan: caller `i` is `10.1.hi.lo`, SE `i` is
/// `10.2.hi.lo` (`i = 256·hi + lo`), the RE `10.3.0.1`, the callees `10.4.0.1`, all on
/// port 5060 over UDP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Topology {
    pub sources: usize,
}

impl Topology {
    #[allow(clippy::unused_self)] // kept for symmetry with se(), re(), callee()
    pub fn caller(self, i: usize) -> NodeId {
        NodeId(i as u32)
    }
    pub fn se(self, i: usize) -> NodeId {
        NodeId((self.sources + i) as u32)
    }
    pub fn re(self) -> NodeId {
        NodeId((2 * self.sources) as u32)
    }
    pub fn callee(self) -> NodeId {
        NodeId((2 * self.sources + 1) as u32)
    }
    pub fn nodes(self) -> usize {
        2 * self.sources + 2
    }

    pub fn role(self, n: NodeId) -> Role {
        let i = n.0 as usize;
        if i < self.sources {
            Role::Caller(i)
        } else if i < 2 * self.sources {
            Role::Se(i - self.sources)
        } else if i == 2 * self.sources {
            Role::Re
        } else {
            Role::Callee
        }
    }

    pub fn ip(self, n: NodeId) -> Ipv4Addr {
        let (kind, i) = match self.role(n) {
            Role::Caller(i) => (1, i),
            Role::Se(i) => (2, i),
            Role::Re => (3, 1),
            Role::Callee => (4, 1),
        };
        Ipv4Addr::new(10, kind, (i >> 8) as u8, (i & 0xff) as u8)
    }

    pub fn peer(self, n: NodeId) -> Peer {
        Peer::udp(SocketAddr::new(IpAddr::V4(self.ip(n)), 5060))
    }

    /// The node behind an address of the plan.
    pub fn node_of_ip(self, ip: Ipv4Addr) -> Option<NodeId> {
        let [a, kind, hi, lo] = ip.octets();
        if a != 10 {
            return None;
        }
        let i = usize::from(hi) << 8 | usize::from(lo);
        match kind {
            1 if i < self.sources => Some(self.caller(i)),
            2 if i < self.sources => Some(self.se(i)),
            3 if i == 1 => Some(self.re()),
            4 if i == 1 => Some(self.callee()),
            _ => None,
        }
    }

    /// The node at an address of the plan (every node listens on port 5060).
    pub fn node_of_addr(self, addr: SocketAddr) -> Option<NodeId> {
        match addr.ip() {
            IpAddr::V4(ip) if addr.port() == 5060 => self.node_of_ip(ip),
            _ => None,
        }
    }
}

/// A datagram in flight.
#[derive(Clone, Debug)]
pub(crate) struct Packet {
    pub from: NodeId,
    pub bytes: Bytes,
    /// Sent by a retransmission timer (or relayed from one): for the RE's retransmission
    /// ratio.
    pub retrans: bool,
}

/// A message a node hands to the network.
#[derive(Clone, Debug)]
pub(crate) struct Send {
    /// A datagram's destination (unused over TCP).
    pub to: NodeId,
    pub packet: Packet,
    /// Over TCP: the receiver as the sender names it (a listening address, or the remote
    /// end of a connection it accepted) and the lane (`crate::tcp`). `None`: a datagram.
    pub stream: Option<(SocketAddr, Lane)>,
    /// Over TCP: what the message belongs to, told back to the sender when its connection
    /// cannot take the message, as the live shells tell theirs.
    pub origin: Option<Origin>,
}

/// One direction of one hop.
#[derive(Clone, Debug)]
struct Link {
    delay: Duration,
    loss: f64,
    rng: ChaCha8Rng,
}

/// All links of the topology. Each direction of each hop has its own loss stream, keyed
/// by the hop's identity so adding a source does not perturb the others.
#[derive(Clone, Debug)]
pub(crate) struct Links {
    topo: Topology,
    /// `[4i..4i+4)`: caller→SE, SE→caller, SE→RE, RE→SE of source `i`; then RE→callee,
    /// callee→RE.
    hops: Vec<Link>,
    lossless: bool,
    uniform_delay: Option<Duration>,
}

fn ms(v: f64) -> Duration {
    Duration::from_nanos((v * 1.0e6).round() as u64)
}

impl Links {
    pub fn new(topo: Topology, cfg: &LinkConfig, seed: u64) -> Self {
        let fwd = (ms(cfg.delay_ms), cfg.loss);
        let bwd = (
            ms(cfg.backward_delay_ms.unwrap_or(cfg.delay_ms)),
            cfg.backward_loss.unwrap_or(cfg.loss),
        );
        let link = |(delay, loss): (Duration, f64), stream: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(stream);
            Link { delay, loss, rng }
        };
        let mut hops = Vec::with_capacity(4 * topo.sources + 2);
        for i in 0..topo.sources as u64 {
            let base = (1 << 40) + 4 * i;
            hops.push(link(fwd, base));
            hops.push(link(bwd, base + 1));
            hops.push(link(fwd, base + 2));
            hops.push(link(bwd, base + 3));
        }
        hops.push(link(fwd, 2 << 40));
        hops.push(link(bwd, (2 << 40) + 1));
        Self {
            topo,
            lossless: fwd.1 == 0.0 && bwd.1 == 0.0,
            uniform_delay: (fwd.0 == bwd.0).then_some(fwd.0),
            hops,
        }
    }

    fn index(&self, from: NodeId, to: NodeId) -> usize {
        match (self.topo.role(from), self.topo.role(to)) {
            (Role::Caller(i), _) => 4 * i,
            (Role::Se(i), Role::Caller(_)) => 4 * i + 1,
            (Role::Se(i), _) => 4 * i + 2,
            (Role::Re, Role::Se(i)) => 4 * i + 3,
            (Role::Re, _) => 4 * self.topo.sources,
            (Role::Callee, _) => 4 * self.topo.sources + 1,
        }
    }

    /// The one-way delay from `from` to `to` (a TCP connection's, which loses nothing).
    pub fn delay(&self, from: NodeId, to: NodeId) -> Duration {
        self.hops[self.index(from, to)].delay
    }

    /// When a datagram sent now arrives, or `None` if the link loses it.
    #[inline]
    pub fn transit(&mut self, now: Time, from: NodeId, to: NodeId) -> Option<Time> {
        if self.lossless {
            if let Some(d) = self.uniform_delay {
                return Some(now + d);
            }
        }
        let i = self.index(from, to);
        let link = &mut self.hops[i];
        if link.loss > 0.0 && link.rng.gen::<f64>() < link.loss {
            return None;
        }
        Some(now + link.delay)
    }
}
