//! The proxy's configuration: a TOML file where every field has a default, overridden by
//! command-line flags.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_control::admission::{
    LatencyBucketConfig, OccConfig, OhtaConfig, PiConfig, RedConfig, ThresholdConfig,
};
use sluice_control::{Algorithm, AnyLocalAdmission, ControlConfig};
use sluice_time::Time;

/// Everything the proxy runs with. `sluice proxy --print-config` prints the effective one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// UDP address to listen on. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// Host (and port) this proxy writes into Via and Record-Route. Unset: the listen
    /// address (127.0.0.1 if it is unspecified), with the bound port.
    pub advertise: Option<String>,
    /// Where requests go that no rule and no Route header sends elsewhere.
    pub next_hop: Option<SocketAddr>,
    /// Static routing rules on the Request-URI, tried in order before `next_hop`.
    pub routes: Vec<RouteRule>,
    /// The FIFO between the receive stage and the processor, in messages.
    pub queue_capacity: usize,
    /// De Cicco et al.'s processing structure: admitted INVITEs wait in their own
    /// drop-tail FIFO, served only when the main FIFO is empty (everything else, and
    /// INVITEs rejected at arrival, go ahead of them). `pi` needs it: it drains this queue.
    pub invite_queue: bool,
    /// Capacity of the INVITE queue (`q_M`), INVITEs.
    pub invite_queue_capacity: usize,
    /// Emulated processor time per fully processed INVITE (a forwarded call's INVITE; with
    /// `cost_other_us` unset, every fully processed message), microseconds.
    pub cost_forward_us: u64,
    /// Emulated processor time per rejected INVITE (its 503), microseconds.
    pub cost_reject_us: u64,
    /// Emulated processor time per fully processed message other than an INVITE,
    /// microseconds. Unset: `cost_forward_us` (every message costs the same, the model of
    /// Shen et al.); 0 is De Cicco et al.'s model, where only INVITEs cost.
    pub cost_other_us: Option<u64>,
    /// Most transactions (client and server) held at once; requests beyond get 503, and new
    /// calls get 503 above 90 % of it (the rest is kept for the calls already admitted).
    /// A call leaves about 37 transaction-seconds behind (its BYE's server transaction
    /// lingers 32 s, RFC 3261 Timer J; measured: 74,000 held at 2,000 calls/s, 260,000 at
    /// 7,000), so the default 400,000 sustains about 9,700 calls/s, above this proxy's clean
    /// rate on two cores. Full, it takes about 600 MB: the proxy's resident memory was 380 MB
    /// with 260,000 held (the transactions alone: `cargo bench -p sluice-txn --bench memory`).
    /// With 200,000 it answered 42 % of calls 503 at 12,000 calls/s for table headroom.
    pub max_transactions: usize,
    /// Timer C (RFC 3261 §16.6 step 11): an INVITE branch with no final response this long
    /// after it was forwarded is CANCELled. "Greater than 3 minutes" in the RFC.
    pub timer_c_s: f64,
    /// Datagrams larger than this are dropped (and counted) before parsing.
    pub max_datagram: usize,
    /// Receive-stage admission policy.
    pub admission: AdmissionConfig,
    /// Hop-by-hop overload control (RFC 7339/7415): `role = "re"` or `"se"`.
    pub overload: crate::hop::OverloadConfig,
    /// HTTP address for `/metrics` and `/status`; unset: no admin endpoint.
    pub admin: Option<SocketAddr>,
    /// Socket buffer sizes asked of the kernel (SO_RCVBUF / SO_SNDBUF), bytes.
    pub socket_buffer: usize,
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
            queue_capacity: 500,
            invite_queue: false,
            invite_queue_capacity: 800,
            cost_forward_us: 0,
            cost_reject_us: 0,
            cost_other_us: None,
            max_transactions: 400_000,
            timer_c_s: 181.0,
            max_datagram: 65_535,
            admission: AdmissionConfig::default(),
            overload: crate::hop::OverloadConfig::default(),
            admin: None,
            socket_buffer: 4 << 20,
            shutdown_grace_s: 5.0,
            duration_s: None,
        }
    }
}

/// A static route: requests whose Request-URI matches every given field go to `next_hop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRule {
    /// Request-URI host, compared case-insensitively; unset matches any host.
    #[serde(default)]
    pub host: Option<String>,
    /// Request-URI user part, compared exactly; unset matches any user.
    #[serde(default)]
    pub user: Option<String>,
    pub next_hop: SocketAddr,
}

/// The receive-stage admission policy: one of the `sluice_control` local policies that
/// decide per arrival (`none`, `threshold`, `ohta`, `occ`, `red`, `latency-bucket`), with
/// their parameters, or `pi`, which drains the INVITE queue (`invite_queue = true`) itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    pub policy: Algorithm,
    /// Retry-After seconds on the 503 of a rejection; 0: no Retry-After header.
    pub retry_after_s: u32,
    pub threshold: ThresholdConfig,
    pub ohta: OhtaConfig,
    pub occ: OccConfig,
    pub red: RedConfig,
    pub pi: PiConfig,
    pub latency_bucket: LatencyBucketConfig,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            policy: Algorithm::None,
            retry_after_s: 0,
            threshold: ThresholdConfig::default(),
            ohta: OhtaConfig::default(),
            occ: OccConfig::default(),
            red: RedConfig::default(),
            pi: PiConfig::default(),
            latency_bucket: LatencyBucketConfig::default(),
        }
    }
}

impl AdmissionConfig {
    /// Builds the policy with its timers starting at `now`.
    pub fn build(&self, now: Time) -> AnyLocalAdmission {
        ControlConfig {
            algorithm: self.policy,
            threshold: self.threshold.clone(),
            ohta: self.ohta.clone(),
            occ: self.occ.clone(),
            red: self.red.clone(),
            pi: self.pi.clone(),
            latency_bucket: self.latency_bucket.clone(),
            ..ControlConfig::default()
        }
        .build_local_admission_at(now)
    }
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
        self.overload
            .validate(self.admission.retry_after_s)
            .map_err(ConfigError::Invalid)?;
        if self.queue_capacity == 0 {
            return bad("queue_capacity must be at least 1".into());
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
        if !self.admission.policy.is_local() {
            return bad(format!(
                "admission policy {} is not available in the proxy yet (use none, threshold, \
                 ohta, occ, red, pi or latency-bucket)",
                self.admission.policy
            ));
        }
        if self.admission.policy.drains_invite_queue() && !self.invite_queue {
            return bad(format!(
                "admission policy {} drains the INVITE queue: set invite_queue = true",
                self.admission.policy
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
        Duration::from_micros(self.cost_forward_us)
    }

    pub fn cost_reject(&self) -> Duration {
        Duration::from_micros(self.cost_reject_us)
    }

    pub fn cost_other(&self) -> Duration {
        Duration::from_micros(self.cost_other_us.unwrap_or(self.cost_forward_us))
    }

    /// De Cicco et al.'s `β` as the emulated costs set it: the processor time of a
    /// forwarded call over that of a rejected one (`None` if either is zero). A forwarded
    /// call costs its INVITE and `others_forwarded` other messages (6 for a call through
    /// this proxy from `sluice load`: 100, 180, 200, ACK, BYE and its 200); a rejected call
    /// costs the 503 and `others_rejected` (0: the ACK for a stateless rejection is
    /// absorbed at the receive stage, for free).
    pub fn emulated_beta(&self, others_forwarded: f64, others_rejected: f64) -> Option<f64> {
        let other = self.cost_other().as_secs_f64();
        let forward = self.cost_forward().as_secs_f64() + others_forwarded * other;
        let reject = self.cost_reject().as_secs_f64() + others_rejected * other;
        (forward > 0.0 && reject > 0.0).then(|| forward / reject)
    }
}
