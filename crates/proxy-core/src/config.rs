//! The proxy's configuration: a TOML file where every field has a default, overridden by
//! command-line flags.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_control::ControlConfig;

use crate::hop::OverloadConfig;
use crate::tcp::TcpConfig;

/// Everything the proxy runs with. `sluice proxy --print-config` prints the effective one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// UDP address to listen on, `host:port` (a host name is resolved at start). Port 0
    /// picks a free port.
    #[serde(deserialize_with = "crate::host_port::deserialize")]
    pub listen: SocketAddr,
    /// Host (and port) this proxy writes into Via and Record-Route. Unset: the listen
    /// address (127.0.0.1 if it is unspecified), with the bound port.
    pub advertise: Option<String>,
    /// Where requests go that no rule and no Route header sends elsewhere, `host:port`
    /// (a host name is resolved at start).
    #[serde(deserialize_with = "crate::host_port::deserialize_option")]
    pub next_hop: Option<SocketAddr>,
    /// Static routing rules on the Request-URI, tried in order before `next_hop`.
    pub routes: Vec<RouteRule>,
    /// Send requests wherever their Route or Request-URI points. Off (the default), a
    /// request goes only to a configured destination (`next_hop`, a rule's next hop, an
    /// overload neighbour or next hop) or to a dialog peer (the Contact of a caller or
    /// callee whose INVITE's 2xx this proxy relayed, for `dialog_peer_ttl_s`); anything
    /// else gets 403 (counted), so that nobody can use the proxy to send traffic, with its
    /// retransmissions, to a third party. On, the proxy is an open relay: only for a
    /// trusted network.
    pub route_by_request_uri: bool,
    /// New requests (out of any dialog this proxy record-routed) accepted per second from
    /// one source IP address, with a burst of one second's worth; the excess is dropped at
    /// the receive stage and counted. 0: no limit. Set it on a proxy that callers reach
    /// directly, well above one caller's legitimate rate; an RE whose sources are a few
    /// SEs carrying everyone's calls wants none.
    pub new_requests_per_source: f64,
    /// How long a dialog peer stays a permitted destination after its call's 2xx.
    pub dialog_peer_ttl_s: f64,
    /// Most dialog peers remembered; beyond, the oldest go first (counted).
    pub max_dialog_peers: usize,
    /// The FIFO between the receive stage and the processor, in messages.
    pub queue_capacity: usize,
    /// De Cicco et al.'s processing structure: admitted INVITEs wait in their own
    /// drop-tail FIFO, served only when the main FIFO is empty (everything else, and
    /// INVITEs rejected at arrival, go ahead of them). `pi` needs it: it drains this queue.
    pub invite_queue: bool,
    /// Capacity of the INVITE queue (`q_M`), INVITEs.
    pub invite_queue_capacity: usize,
    /// With `invite_queue`: a retransmission of an INVITE that still waits in the INVITE
    /// queue is dropped at the receive stage (counted), since the original's 100 Trying
    /// will stop the retransmissions. `false` processes it like any INVITE, as Kamailio
    /// and the papers' servers do (it costs `cost_forward_us` and the transaction layer
    /// absorbs it).
    pub drop_waiting_retransmissions: bool,
    /// Emulated processor time per fully processed INVITE (a forwarded call's INVITE; with
    /// `cost_other_us` unset, every fully processed message), microseconds. 0 (with the
    /// other costs 0): native speed, the processor is the machine's.
    pub cost_forward_us: f64,
    /// Emulated processor time per rejected INVITE (its 503), microseconds.
    pub cost_reject_us: f64,
    /// Emulated processor time per fully processed message other than an INVITE,
    /// microseconds. Unset: `cost_forward_us` (every message costs the same, the model of
    /// Shen et al.); 0 is De Cicco et al.'s model, where only INVITEs cost.
    pub cost_other_us: Option<f64>,
    /// `d`, the share of the processor other processes take (De Cicco et al. eq. 1), in
    /// `[0, 1)`: a job of `d × 10 ms` every 10 ms, served ahead of the queues. Emulated
    /// processor only.
    pub background_load: f64,
    /// Most transactions (client and server) held at once; requests beyond get 503, and new
    /// calls get 503 above 90 % of it (the rest is kept for the calls already admitted).
    /// A call leaves about 37 transaction-seconds behind (its BYE's server transaction
    /// lingers 32 s, RFC 3261 Timer J; measured: 74,000 held at 2,000 calls/s, 260,000 at
    /// 7,000), so the default 400,000 sustains about 9,700 calls/s, above this proxy's clean
    /// rate on two cores. Full, it takes about 600 MB: the proxy's resident memory was 380 MB
    /// with 260,000 held (the transactions alone: `cargo bench -p sluice-txn --bench memory`).
    /// With 200,000 it answered 42 % of calls 503 at 12,000 calls/s for table headroom.
    pub max_transactions: usize,
    /// What the transactions (their kept messages and bookkeeping) and the queued
    /// messages may hold, MiB. New requests get 503 above 90 % of it, like the table's
    /// headroom; above all of it requests are dropped (counted) and only responses, which
    /// free memory, get in. The count limits alone allowed tens of GB: 400,000
    /// transactions each keeping a message of up to `max_datagram` bytes.
    pub memory_budget_mb: usize,
    /// RFC 3261's timer values for this proxy's transactions.
    pub sip: SipTimers,
    /// Timer C (RFC 3261 §16.6 step 11): an INVITE branch with no final response this long
    /// after it was forwarded, or after its latest provisional other than 100 (§16.7
    /// step 2), is CANCELled. "Greater than 3 minutes" in the RFC.
    pub timer_c_s: f64,
    /// Datagrams larger than this are dropped (and counted) before parsing. 8 KiB: RFC 3261
    /// §18.1.1 sends a request within 200 bytes of the path MTU (1,300 bytes on Ethernet)
    /// over a congestion-controlled transport instead, so a larger datagram is rare and
    /// arrives as IP fragments; what a proxy keeps per transaction is bounded by it.
    pub max_datagram: usize,
    /// Retry-After seconds on the 503 of a rejection; 0: no Retry-After header.
    pub retry_after_s: u32,
    /// The overload control algorithm and its tables: a local policy at the receive stage
    /// (`none`, `threshold`, `ohta`, `occ`, `red`, `pi`, `latency-bucket`), or, with
    /// `overload.role = "re"`, the feedback generator for upstream neighbours (`win-disc`,
    /// `win-cont`, `win-auto`, `rate-abs`, `rate-occ`). `seed` seeds every random draw of
    /// this proxy's controllers.
    pub control: ControlConfig,
    /// Hop-by-hop overload control (RFC 7339/7415): `role = "re"` or `"se"`.
    pub overload: OverloadConfig,
    /// SIP over TCP: listening, connections to next hops and their limits, and the TCP
    /// overload controls (connection split, buffer sizes, smart forwarding).
    pub tcp: TcpConfig,
    /// HTTP address (`host:port`) for `/metrics`, `/status`, `/signals` and `/dashboard`;
    /// unset: no admin endpoint.
    #[serde(deserialize_with = "crate::host_port::deserialize_option")]
    pub admin: Option<SocketAddr>,
    /// Socket buffer sizes asked of the kernel (SO_RCVBUF / SO_SNDBUF), bytes.
    pub socket_buffer: usize,
    /// Threads moving UDP datagrams, each on its own socket of the listening port
    /// (SO_REUSEPORT; the kernel hands a datagram to the thread numbered after the CPU that
    /// received it); 0: one per core the process may use. They share the one proxy core, so every transaction, dialog and
    /// the control loop see the whole process. TCP connections are served by the first.
    /// The simulator runs the core on its one emulated processor whatever this says.
    pub workers: usize,
    /// How long a graceful shutdown lets running transactions finish, seconds.
    pub shutdown_grace_s: f64,
    /// Stop by itself after this many seconds (graceful shutdown as for SIGTERM).
    pub duration_s: Option<f64>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 5060)),
            advertise: None,
            next_hop: None,
            routes: Vec::new(),
            route_by_request_uri: false,
            new_requests_per_source: 0.0,
            dialog_peer_ttl_s: 7200.0,
            max_dialog_peers: 100_000,
            queue_capacity: 500,
            invite_queue: false,
            invite_queue_capacity: 800,
            drop_waiting_retransmissions: true,
            cost_forward_us: 0.0,
            cost_reject_us: 0.0,
            cost_other_us: None,
            background_load: 0.0,
            max_transactions: 400_000,
            memory_budget_mb: 1024,
            sip: SipTimers::default(),
            timer_c_s: 181.0,
            max_datagram: 8192,
            retry_after_s: 0,
            control: ControlConfig::default(),
            overload: OverloadConfig::default(),
            tcp: TcpConfig::default(),
            admin: None,
            socket_buffer: 4 << 20,
            workers: 0,
            shutdown_grace_s: 5.0,
            duration_s: None,
        }
    }
}

/// The most UDP threads a proxy runs.
pub const MAX_WORKERS: usize = 1024;

/// RFC 3261 timer values (§17.1.1.1, Table 4), milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SipTimers {
    /// T1, the round-trip estimate: 500 ms.
    pub t1_ms: f64,
    /// T2, the longest interval between non-INVITE retransmissions: 4 s.
    pub t2_ms: f64,
    /// T4, how long a message stays in the network: 5 s.
    pub t4_ms: f64,
}

impl Default for SipTimers {
    fn default() -> Self {
        Self {
            t1_ms: 500.0,
            t2_ms: 4000.0,
            t4_ms: 5000.0,
        }
    }
}

impl SipTimers {
    /// Each value positive and at most 10^7 ms, and T2 not below T1; the message names
    /// the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("t1_ms", self.t1_ms),
            ("t2_ms", self.t2_ms),
            ("t4_ms", self.t4_ms),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0e7) {
                return Err(format!("{name} must be a number in (0, 1e7], got {v}"));
            }
        }
        if self.t2_ms < self.t1_ms {
            return Err(format!(
                "t2_ms ({}) must not be below t1_ms ({})",
                self.t2_ms, self.t1_ms
            ));
        }
        Ok(())
    }

    /// A transaction layer configuration with these timers.
    pub fn txn_config(&self, max_transactions: usize) -> sluice_txn::Config {
        let ms = |v: f64| Duration::from_nanos((v * 1.0e6).round() as u64);
        sluice_txn::Config {
            t1: ms(self.t1_ms),
            t2: ms(self.t2_ms),
            t4: ms(self.t4_ms),
            max_transactions,
            ..sluice_txn::Config::default()
        }
    }
}

/// A static route: requests whose Request-URI matches every given field go to `next_hop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRule {
    /// Request-URI host, compared case-insensitively; unset matches any host.
    #[serde(default)]
    pub host: Option<String>,
    /// Request-URI user part, compared exactly; unset matches any user.
    #[serde(default)]
    pub user: Option<String>,
    /// Where the matching requests go, `host:port` (a host name is resolved at start).
    #[serde(deserialize_with = "crate::host_port::deserialize")]
    pub next_hop: SocketAddr,
}

/// Microseconds (non-negative, finite: checked by `validate`) as a duration, to the
/// nanosecond.
fn micros(us: f64) -> Duration {
    Duration::from_nanos((us * 1000.0).round().max(0.0) as u64)
}

/// A configuration the proxy cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("bad config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl ProxyConfig {
    /// Where requests may go without being dialog peers: `next_hop`, the rules' next
    /// hops, and the overload neighbours and next hops.
    pub fn destinations(&self) -> Vec<SocketAddr> {
        let mut d: Vec<SocketAddr> = self
            .next_hop
            .iter()
            .copied()
            .chain(self.routes.iter().map(|r| r.next_hop))
            .chain(self.overload.neighbours.iter().copied())
            .chain(self.overload.next_hops.iter().copied())
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Reads a TOML file (every field optional).
    pub fn from_file(path: &str) -> Result<ProxyConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    pub fn from_toml(text: &str) -> Result<ProxyConfig, ConfigError> {
        let config: ProxyConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<toml>".to_owned(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The effective configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print config: {e}\n"))
    }

    /// Checks what serde cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        self.control.validate().map_err(ConfigError::Invalid)?;
        self.overload
            .validate(&self.control, self.retry_after_s)
            .map_err(ConfigError::Invalid)?;
        self.sip
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("sip.{e}")))?;
        self.tcp.validate().map_err(ConfigError::Invalid)?;
        if self.workers > MAX_WORKERS {
            return bad(format!(
                "workers must be at most {MAX_WORKERS} (0: one per core), not {}",
                self.workers
            ));
        }
        if self.queue_capacity == 0 {
            return bad("queue_capacity must be at least 1".into());
        }
        if self.memory_budget_mb == 0 || self.memory_budget_mb > 1 << 30 {
            return bad(format!(
                "memory_budget_mb must be in 1..=1073741824, not {}",
                self.memory_budget_mb
            ));
        }
        if self.max_transactions < 2 {
            return bad("max_transactions must be at least 2 (a proxied request takes two)".into());
        }
        if self.max_datagram < 64 || self.max_datagram > 65_535 {
            return bad(format!(
                "max_datagram {} is outside 64..=65535",
                self.max_datagram
            ));
        }
        if !self.shutdown_grace_s.is_finite() || self.shutdown_grace_s < 0.0 {
            return bad(format!(
                "shutdown_grace_s must be a non-negative number, not {}",
                self.shutdown_grace_s
            ));
        }
        if !(self.new_requests_per_source.is_finite() && self.new_requests_per_source >= 0.0) {
            return bad(format!(
                "new_requests_per_source must be a non-negative number, not {}",
                self.new_requests_per_source
            ));
        }
        if !(self.dialog_peer_ttl_s.is_finite() && self.dialog_peer_ttl_s >= 0.0) {
            return bad(format!(
                "dialog_peer_ttl_s must be a non-negative number of seconds, not {}",
                self.dialog_peer_ttl_s
            ));
        }
        if !self.timer_c_s.is_finite() || self.timer_c_s < 1.0 {
            return bad(format!(
                "timer_c_s must be at least 1 second, not {}",
                self.timer_c_s
            ));
        }
        if let Some(d) = self.duration_s {
            if !d.is_finite() || d <= 0.0 {
                return bad(format!("duration_s must be a positive number, not {d}"));
            }
        }
        let costs = [
            ("cost_forward_us", Some(self.cost_forward_us)),
            ("cost_reject_us", Some(self.cost_reject_us)),
            ("cost_other_us", self.cost_other_us),
        ];
        for (name, cost) in costs {
            if let Some(c) = cost {
                if !(c.is_finite() && (0.0..=1.0e9).contains(&c)) {
                    return bad(format!(
                        "{name} must be between 0 and 1e9 microseconds, not {c}"
                    ));
                }
            }
        }
        if !(self.background_load.is_finite() && (0.0..1.0).contains(&self.background_load)) {
            return bad(format!(
                "background_load must be in [0, 1), not {}",
                self.background_load
            ));
        }
        if self.background_load > 0.0 && self.native_speed() {
            return bad("background_load needs an emulated processor (set the costs)".into());
        }
        if self.control.algorithm.drains_invite_queue() && !self.invite_queue {
            return bad(format!(
                "control algorithm {} drains the INVITE queue: set invite_queue = true",
                self.control.algorithm
            ));
        }
        let watched = self.watched_queue_capacity();
        let high_mark = match self.control.algorithm {
            sluice_control::Algorithm::Threshold => self
                .control
                .threshold
                .high_watermark
                .map(|m| ("control.threshold.high_watermark", m)),
            sluice_control::Algorithm::Ohta => {
                self.control.ohta.hi_wm.map(|m| ("control.ohta.hi_wm", m))
            }
            _ => None,
        };
        if let Some((name, mark)) = high_mark.filter(|(_, m)| *m > watched) {
            return bad(format!(
                "{name} ({mark}) exceeds the capacity of the queue it watches ({watched}): it \
                 would never trigger"
            ));
        }
        if self.invite_queue && self.invite_queue_capacity == 0 {
            return bad("invite_queue_capacity must be at least 1".into());
        }
        if let Some(a) = &self.advertise {
            if a.is_empty() || a.bytes().any(|b| b.is_ascii_whitespace() || b == b';') {
                return bad(format!("advertise {a:?} is not a host[:port]"));
            }
        }
        for r in &self.routes {
            if r.host.is_none() && r.user.is_none() {
                return bad(format!(
                    "route to {} matches everything: set host or user (or use next_hop)",
                    r.next_hop
                ));
            }
        }
        Ok(())
    }

    /// What goes into Via and Record-Route: `advertise`, or the bound address.
    pub fn advertised(&self, bound: SocketAddr) -> String {
        if let Some(a) = &self.advertise {
            return a.clone();
        }
        let ip = if bound.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bound.ip()
        };
        SocketAddr::new(ip, bound.port()).to_string()
    }

    pub fn timer_c(&self) -> Duration {
        Duration::from_secs_f64(self.timer_c_s)
    }

    pub fn cost_forward(&self) -> Duration {
        micros(self.cost_forward_us)
    }

    pub fn cost_reject(&self) -> Duration {
        micros(self.cost_reject_us)
    }

    pub fn cost_other(&self) -> Duration {
        micros(self.cost_other_us.unwrap_or(self.cost_forward_us))
    }

    /// Capacity of the queue the local admission policy watches: the INVITE queue when
    /// the queues are split, the one queue otherwise.
    pub fn watched_queue_capacity(&self) -> usize {
        if self.invite_queue {
            self.invite_queue_capacity
        } else {
            self.queue_capacity
        }
    }

    /// No emulated cost: the processor is the machine's own.
    pub fn native_speed(&self) -> bool {
        self.cost_forward().is_zero() && self.cost_reject().is_zero() && self.cost_other().is_zero()
    }

    /// The emulated processor's capacity in calls per second for calls of one INVITE and
    /// `others` other messages through this proxy (`None` at native speed).
    pub fn emulated_capacity_cps(&self, others: f64) -> Option<f64> {
        let call = self.cost_forward().as_secs_f64() + others * self.cost_other().as_secs_f64();
        (call > 0.0).then(|| 1.0 / call)
    }

    /// De Cicco et al.'s `β` as the emulated costs set it: the processor time of a
    /// forwarded call over that of a rejected one (`None` if either is zero). A forwarded
    /// call costs its INVITE and `others_forwarded` other messages (6 for a call through
    /// this proxy from `sluice load`: 100, 180, 200, ACK, BYE and its 200); a rejected call
    /// costs the 503 and `others_rejected` (1: the ACK for the stateless rejection, which
    /// the processor ends at an ordinary message's cost).
    pub fn emulated_beta(&self, others_forwarded: f64, others_rejected: f64) -> Option<f64> {
        let other = self.cost_other().as_secs_f64();
        let forward = self.cost_forward().as_secs_f64() + others_forwarded * other;
        let reject = self.cost_reject().as_secs_f64() + others_rejected * other;
        (forward > 0.0 && reject > 0.0).then(|| forward / reject)
    }
}
