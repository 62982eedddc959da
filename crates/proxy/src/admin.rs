//! The admin HTTP endpoint: `/metrics` (Prometheus text via prometheus-client) and
//! `/status` (JSON). Handlers ask the proxy loop for a snapshot over a channel, so the core
//! stays single-threaded and unshared.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use serde_json::json;
use sluice_control::overload::OcAlgorithm;
use sluice_control::{AdmissionMetrics, ReceiverMetrics};
use tokio::sync::{mpsc, oneshot};

use crate::signals::SignalHistory;

use sluice_proxy_core::{CoreStats, DelayHistogram, KindCounts, DELAY_BUCKETS_S, KIND_LABELS};

/// What the loop hands an admin request.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub stats: CoreStats,
    pub admission: AdmissionMetrics,
    pub uptime: Duration,
    pub local: SocketAddr,
    pub send_drops: u64,
    /// Datagrams read by each UDP thread, the main loop's first.
    pub udp_threads: Vec<u64>,
    pub tcp: crate::tcp::TcpStats,
    pub draining: bool,
    /// Admin connections refused for the connection limit.
    pub admin_refused: u64,
    /// The control algorithm configured (`[control] algorithm`).
    pub algorithm: &'static str,
    /// RE: the feedback generator's estimates.
    pub feedback: Option<ReceiverMetrics>,
    /// RE: what the latest response to each neighbour asked of it.
    pub feedback_sent: Vec<(SocketAddr, OcAlgorithm, u64)>,
    /// SE: each next hop's control in force (`None`: it asks for none).
    pub next_hop_controls: Vec<(SocketAddr, Option<(OcAlgorithm, i64)>)>,
}

impl Snapshot {
    /// An idle proxy's snapshot, for tests.
    #[cfg(test)]
    pub(crate) fn idle(stats: &CoreStats) -> Snapshot {
        Snapshot {
            stats: *stats,
            admission: AdmissionMetrics::default(),
            uptime: Duration::from_secs(1),
            local: SocketAddr::from(([127, 0, 0, 1], 5060)),
            send_drops: 0,
            udp_threads: vec![0],
            tcp: crate::tcp::TcpStats::default(),
            draining: false,
            admin_refused: 0,
            algorithm: "none",
            feedback: None,
            feedback_sent: Vec::new(),
            next_hop_controls: Vec::new(),
        }
    }
}

/// A [`DelayHistogram`] the core filled, rendered as a Prometheus histogram.
/// prometheus-client's own histogram is filled by `observe`; the core's counts are
/// already bucketed, so this encodes them as they are.
#[derive(Debug)]
struct Bucketed(DelayHistogram);

impl TypedMetric for Bucketed {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Bucketed {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // f64::MAX is how prometheus-client marks the `+Inf` bucket.
        let buckets: Vec<(f64, u64)> = DELAY_BUCKETS_S
            .iter()
            .copied()
            .chain([f64::MAX])
            .zip(self.0.buckets)
            .collect();
        encoder.encode_histogram::<()>(self.0.sum_seconds, self.0.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

type Requests = mpsc::Sender<oneshot::Sender<Snapshot>>;

/// What the handlers share: the way to the loop, and the dashboard's history.
#[derive(Clone)]
struct AdminState {
    requests: Requests,
    history: SignalHistory,
}

/// The live dashboard: one static page, its script polling `/signals`.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Most admin connections open at once; more are closed at once (and counted).
const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request's header section.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest an admin connection stays open, keep-alive included.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// The admin endpoint on a thread of its own, so that no client, however slow or many,
/// takes time from the SIP loop: handlers only ask the loop for a snapshot over a channel.
#[derive(Debug)]
pub(crate) struct AdminThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Connections closed at once because `MAX_CONNECTIONS` were open.
    pub refused: Arc<AtomicU64>,
}

impl AdminThread {
    pub(crate) fn spawn(
        listener: tokio::net::TcpListener,
        requests: Requests,
        history: SignalHistory,
    ) -> std::io::Result<Self> {
        let listener = listener.into_std()?;
        let (stop, stopped) = oneshot::channel();
        let refused = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&refused);
        let thread = std::thread::Builder::new()
            .name("sluice-admin".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    tracing::error!("the admin endpoint could not start its runtime");
                    return;
                };
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept(listener, AdminState { requests, history }, counter) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
            refused,
        })
    }
}

impl Drop for AdminThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: tokio::net::TcpListener, state: AdminState, refused: Arc<AtomicU64>) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/signals", get(signals))
        .route("/dashboard", get(dashboard))
        .with_state(state);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: let the moment pass rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
            drop(permit);
        });
    }
}

async fn snapshot(requests: &Requests) -> Option<Snapshot> {
    let (tx, rx) = oneshot::channel();
    requests.send(tx).await.ok()?;
    rx.await.ok()
}

/// OpenMetrics for scrapers that ask for it (Prometheus does), the classic Prometheus
/// text format otherwise (curl, promtool).
async fn metrics(
    State(AdminState { requests, .. }): State<AdminState>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    match snapshot(&requests).await {
        Some(s) if openmetrics => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            render_metrics(&s),
        ),
        Some(s) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            to_prometheus_text(&render_metrics(&s)),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "proxy stopped\n".to_owned(),
        ),
    }
}

async fn dashboard() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        DASHBOARD,
    )
}

/// `/signals[?since=T]`: the samples after T seconds of uptime (all kept, without T), and
/// what each neighbour is sent and each next hop asks now.
async fn signals(
    State(AdminState { requests, history }): State<AdminState>,
    RawQuery(query): RawQuery,
) -> impl IntoResponse {
    let since = query.as_deref().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("since="))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite())
    });
    let Some(s) = snapshot(&requests).await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "proxy stopped\n".to_owned(),
        );
    };
    let body = json!({
        "listen": s.local.to_string(),
        "algorithm": s.algorithm,
        "uptime_s": s.uptime.as_secs_f64(),
        "draining": s.draining,
        "samples": history.since(since),
        "feedback_sent": s.feedback_sent.iter().map(|(n, a, v)| json!({
            "neighbour": n.to_string(), "algorithm": a.token(), "value": v,
        })).collect::<Vec<_>>(),
        "next_hop_controls": s.next_hop_controls.iter().map(|(h, c)| json!({
            "next_hop": h.to_string(),
            "algorithm": c.map(|(a, _)| a.token()),
            "value": c.map(|(_, v)| v),
        })).collect::<Vec<_>>(),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

async fn status(State(AdminState { requests, .. }): State<AdminState>) -> impl IntoResponse {
    match snapshot(&requests).await {
        Some(s) => {
            let mut v = status_json(&s.stats, s.uptime, s.local, s.send_drops);
            v["draining"] = json!(s.draining);
            v["udp_threads"] = json!(s.udp_threads);
            v["tcp"] = tcp_json(&s.tcp);
            v["admission"] = json!({
                "rejected": s.admission.rejected,
                "control_value": s.admission.control_value,
                "cpu_load": s.admission.cpu_load,
            });
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                v.to_string(),
            )
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "proxy stopped\n".to_owned(),
        ),
    }
}

fn kinds(counts: &KindCounts) -> serde_json::Value {
    KIND_LABELS
        .iter()
        .zip(counts.0)
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The `/status` document and the exit report.
pub(crate) fn tcp_json(t: &crate::tcp::TcpStats) -> serde_json::Value {
    json!({
        "open": t.open,
        "accepted": t.accepted,
        "opened": t.opened,
        "refused": {"max_connections": t.refused_limit, "accept_rate": t.refused_rate,
                    "connect_failed": t.connect_failed},
        "closed": {"peer": t.closed_peer, "idle": t.closed_idle,
                   "partial_message": t.closed_partial_message,
                   "bad_framing": t.closed_bad_framing},
        "dropped": {"write_queue_full": t.write_queue_full,
            "write_queues_total_full": t.write_queues_total_full, "no_connection": t.no_connection},
        "messages_in": t.messages_in,
        "messages_out": t.messages_out,
        "keepalives": t.keepalives,
        "aliases": t.aliases,
        "aliases_refused": t.aliases_refused,
    })
}

pub(crate) fn status_json(
    s: &CoreStats,
    uptime: Duration,
    local: SocketAddr,
    send_drops: u64,
) -> serde_json::Value {
    json!({
        "listen": local.to_string(),
        "uptime_s": uptime.as_secs_f64(),
        "datagrams_in": s.datagrams_in,
        "datagrams_out": s.datagrams_out,
        "in_by_kind": kinds(&s.in_by_kind),
        "out_by_kind": kinds(&s.out_by_kind),
        "admitted": s.admitted,
        "rejected": {"policy": s.rejected_policy, "shutdown": s.rejected_shutdown,
                     "table_headroom": s.rejected_table_headroom,
                     "smart_forwarding": s.rejected_smart_forwarding},
        "dropped": {
            "queue_full": s.dropped_queue_full,
            "oversized": s.oversized,
            "malformed": s.malformed,
            "invalid": s.invalid,
            "stray_responses": s.dropped_stray_responses,
            "memory_budget": s.dropped_memory_budget,
            "rate_limit": s.dropped_rate_limit,
            "invite_after_2xx": s.absorbed_invites_after_2xx,
            "send_buffer_full": send_drops,
        },
        "processed": s.processed,
        "forwarded": {
            "requests": s.forwarded_requests,
            "responses": s.forwarded_responses,
            "acks_stateless": s.forwarded_acks,
            "responses_stateless": s.forwarded_stray_responses,
        },
        "generated": {
            "trying": s.trying_sent,
            "483": s.too_many_hops,
            "400_bad_content_length": s.bad_content_length,
            "403_forbidden_destination": s.forbidden_destinations,
            "404_no_route": s.no_route,
            "482_loop": s.loops,
            "abandoned_at_shutdown": s.abandoned_at_shutdown,
            "503_table_full": s.refused_table_full,
            "408_timeout": s.timeouts_408,
            "500_transport": s.transport_500,
            "cancel_200": s.cancels,
        },
        "timer_c": {
            "cancels": s.timer_c_cancels,
            "abandoned": s.timer_c_abandoned,
            "queued": s.timer_c_queued,
        },
        "retransmissions_seen": s.retransmissions_seen(),
        "retransmissions_sent": s.retransmissions_sent(),
        "send_errors": s.send_errors,
        "icmp_unreachable": {"applied": s.unreachable, "ignored": s.unreachable_ignored},
        "queue_len": s.queue_len,
        "queue_peak": s.queue_peak,
        "transactions": s.transactions,
        "memory_in_use_bytes": s.bytes_in_use,
        "transactions_peak": s.txn.peak_transactions,
        "transactions_refused": s.txn.refused.table_full,
        "pending_requests": s.pending_requests,
        "occupancy": s.occupancy,
        "occupancy_whole_run": ((s.busy_virtual + s.busy_native).as_secs_f64()
            / uptime.as_secs_f64().max(1e-9))
        .min(1.0),
        "busy_virtual_s": s.busy_virtual.as_secs_f64(),
        "busy_native_s": s.busy_native.as_secs_f64(),
        "overload": {
            "responses_stamped": s.hop.responses_stamped,
            "responses_not_participating": s.hop.responses_not_participating,
            "unconfigured_requests": s.hop.unconfigured_requests,
            "feedback_applied": s.hop.client.applied,
            "feedback_ignored": s.hop.feedback_ignored(),
            "feedback_out_of_range": s.hop.client.out_of_range,
            "offered": s.hop.client.offered,
            "forwarded": s.hop.client.forwarded,
            "reduced": s.hop.client.rejected_normal + s.hop.client.rejected_priority,
        },
    })
}

type Labels = Vec<(String, String)>;

/// The TCP transport's connections and what its limits turned away.
fn render_tcp(reg: &mut Registry, t: &crate::tcp::TcpStats) {
    let open = Gauge::<i64>::default();
    open.set(i64::try_from(t.open).unwrap_or(i64::MAX));
    reg.register("tcp_connections", "TCP connections open", open);
    let opened = Family::<Labels, Counter>::default();
    opened
        .get_or_create(&label("direction", "accepted"))
        .inc_by(t.accepted);
    opened
        .get_or_create(&label("direction", "outgoing"))
        .inc_by(t.opened);
    reg.register(
        "tcp_connections_opened",
        "TCP connections accepted or opened",
        opened,
    );
    let refused = Family::<Labels, Counter>::default();
    for (reason, v) in [
        ("max_connections", t.refused_limit),
        ("accept_rate", t.refused_rate),
        ("connect_failed", t.connect_failed),
    ] {
        refused.get_or_create(&label("reason", reason)).inc_by(v);
    }
    reg.register(
        "tcp_connections_refused",
        "TCP connections refused or not established, by reason",
        refused,
    );
    let closed = Family::<Labels, Counter>::default();
    for (reason, v) in [
        ("peer", t.closed_peer),
        ("idle", t.closed_idle),
        ("partial_message", t.closed_partial_message),
        ("bad_framing", t.closed_bad_framing),
    ] {
        closed.get_or_create(&label("reason", reason)).inc_by(v);
    }
    reg.register(
        "tcp_connections_closed",
        "TCP connections closed, by reason",
        closed,
    );
    let dropped = Family::<Labels, Counter>::default();
    dropped
        .get_or_create(&label("reason", "write_queue_full"))
        .inc_by(t.write_queue_full);
    dropped
        .get_or_create(&label("reason", "write_queues_total_full"))
        .inc_by(t.write_queues_total_full);
    dropped
        .get_or_create(&label("reason", "no_connection"))
        .inc_by(t.no_connection);
    reg.register(
        "tcp_messages_dropped",
        "Messages not written on TCP, by reason",
        dropped,
    );
    let messages = Family::<Labels, Counter>::default();
    messages
        .get_or_create(&label("direction", "in"))
        .inc_by(t.messages_in);
    messages
        .get_or_create(&label("direction", "out"))
        .inc_by(t.messages_out);
    reg.register(
        "tcp_messages",
        "SIP messages read from or queued on TCP connections",
        messages,
    );
    let keepalives = Counter::<u64>::default();
    keepalives.inc_by(t.keepalives);
    reg.register(
        "tcp_keepalives",
        "CRLF keep-alives received (RFC 5626)",
        keepalives,
    );
    let aliases = Gauge::<i64>::default();
    aliases.set(i64::try_from(t.aliases).unwrap_or(i64::MAX));
    reg.register(
        "tcp_aliases",
        "Accepted TCP connections that carry requests to their peers (RFC 5923 alias)",
        aliases,
    );
    let refused = Counter::<u64>::default();
    refused.inc_by(t.aliases_refused);
    reg.register(
        "tcp_aliases_refused",
        "RFC 5923 alias requests refused: the Via's host was not the connection's source, or the table was full",
        refused,
    );
}

/// The control loop's state: what each control acts on and what it decided. A value the
/// control has not computed yet (before its first measurement, or a control that has no
/// such value) is left out rather than shown as 0, which would read as a decision.
fn render_control_loop(reg: &mut Registry, s: &Snapshot) {
    let optional = |reg: &mut Registry, name: &str, help: &str, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let g = Gauge::<f64, AtomicU64>::default();
            g.set(v);
            reg.register(name, help, g);
        }
    };
    // A busy fraction exists once a whole second has passed.
    optional(
        reg,
        "occupancy_ratio",
        "Processor busy fraction over the last complete second",
        (s.uptime >= Duration::from_secs(1)).then_some(s.stats.occupancy),
    );
    let info = Family::<Labels, Gauge>::default();
    info.get_or_create(&label("algorithm", s.algorithm)).set(1);
    reg.register(
        "control_info",
        "The control algorithm configured ([control] algorithm), as a label",
        info,
    );
    let a = &s.admission;
    optional(
        reg,
        "admission_control_value",
        "Local admission's control variable: 1 while rejecting (threshold, ohta), the \
         acceptance probability (occ), the rejection probability (red), the reject ratio \
         (pi), the token rate (latency-bucket)",
        a.control_value,
    );
    optional(
        reg,
        "admission_cpu_load_ratio",
        "The CPU load local admission acts on: the last measurement (occ) or the filtered \
         load (pi)",
        a.cpu_load,
    );
    optional(
        reg,
        "admission_drain_rate_per_second",
        "pi: the INVITE drain rate the queue loop commands, INVITEs per second",
        a.drain_rate,
    );
    optional(
        reg,
        "admission_queue_target",
        "pi: the queue set-point, INVITEs",
        a.queue_target,
    );
    optional(
        reg,
        "admission_latency_seconds",
        "latency-bucket: the smoothed latency",
        a.latency,
    );
    if let Some(f) = &s.feedback {
        optional(
            reg,
            "feedback_service_rate_per_second",
            "RE: the estimated service rate, sessions per second",
            f.service_rate,
        );
        optional(
            reg,
            "feedback_session_length_messages",
            "RE: the estimated messages per session",
            f.session_length,
        );
        optional(
            reg,
            "feedback_sessions_in_system",
            "RE: the estimated sessions in the system",
            f.sessions_in_system,
        );
        optional(
            reg,
            "feedback_occupancy_ratio",
            "RE: processor occupancy over the last measurement interval",
            f.occupancy,
        );
        optional(
            reg,
            "feedback_active_sources",
            "RE: upstream neighbours counted active",
            Some(f.active_sources as f64),
        );
        optional(
            reg,
            "feedback_control_value",
            "RE: the feedback algorithm's control variable: the total window (win-*), the \
             total rate (rate-abs) or the acceptance fraction (rate-occ)",
            f.control_value,
        );
    }
    let sent = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (neighbour, algorithm, value) in &s.feedback_sent {
        sent.get_or_create(&vec![
            ("neighbour".to_owned(), neighbour.to_string()),
            ("algorithm".to_owned(), algorithm.token().to_owned()),
        ])
        .set(*value as f64);
    }
    reg.register(
        "feedback_sent",
        "RE: the oc value the latest response to each neighbour carried (loss: percent; \
         rate: requests per second; windows: sessions)",
        sent,
    );
    let asked = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (next_hop, control) in &s.next_hop_controls {
        if let Some((algorithm, value)) = control {
            asked
                .get_or_create(&vec![
                    ("next_hop".to_owned(), next_hop.to_string()),
                    ("algorithm".to_owned(), algorithm.token().to_owned()),
                ])
                .set(*value as f64);
        }
    }
    reg.register(
        "next_hop_control",
        "SE: the control each next hop asks for now (loss: percent; rate: requests per \
         second; windows: sessions); no sample while it asks for none",
        asked,
    );
    reg.register(
        "queueing_delay_seconds",
        "Time from a message's arrival to the start of its processing",
        Bucketed(s.stats.queueing_delay),
    );
    reg.register(
        "setup_delay_seconds",
        "Time from a new INVITE's arrival to the first 2xx relayed for it",
        Bucketed(s.stats.setup_delay),
    );
}

fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_owned(), v.to_owned())]
}

/// Renders a snapshot in the OpenMetrics text format (which Prometheus and promtool read).
pub(crate) fn render_metrics(s: &Snapshot) -> String {
    let st = &s.stats;
    let mut reg = Registry::with_prefix("sluice_proxy");
    let counter = |reg: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    };
    let gauge = |reg: &mut Registry, name: &str, help: &str, v: f64| {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(v);
        reg.register(name, help, g);
    };
    for (name, help, counts) in [
        (
            "messages_in",
            "Datagrams received, by method or response class",
            &st.in_by_kind,
        ),
        (
            "messages_out",
            "Datagrams sent, by method or response class",
            &st.out_by_kind,
        ),
    ] {
        let f = Family::<Labels, Counter>::default();
        for (k, v) in KIND_LABELS.iter().zip(counts.0) {
            f.get_or_create(&label("kind", k)).inc_by(v);
        }
        reg.register(name, help, f);
    }
    counter(
        &mut reg,
        "admitted",
        "Messages admitted to the processor queue",
        st.admitted,
    );
    let rejected = Family::<Labels, Counter>::default();
    rejected
        .get_or_create(&label("reason", "policy"))
        .inc_by(st.rejected_policy);
    rejected
        .get_or_create(&label("reason", "shutdown"))
        .inc_by(st.rejected_shutdown);
    rejected
        .get_or_create(&label("reason", "table_headroom"))
        .inc_by(st.rejected_table_headroom);
    rejected
        .get_or_create(&label("reason", "smart_forwarding"))
        .inc_by(st.rejected_smart_forwarding);
    reg.register("rejected", "New sessions rejected with 503", rejected);
    let dropped = Family::<Labels, Counter>::default();
    for (reason, v) in [
        ("queue_full", st.dropped_queue_full),
        ("oversized", st.oversized),
        ("malformed", st.malformed),
        ("invalid", st.invalid),
        ("stray_response", st.dropped_stray_responses),
        ("send_buffer_full", s.send_drops),
        ("memory_budget", st.dropped_memory_budget),
        ("rate_limit", st.dropped_rate_limit),
        ("invite_after_2xx", st.absorbed_invites_after_2xx),
    ] {
        dropped.get_or_create(&label("reason", reason)).inc_by(v);
    }
    reg.register("dropped", "Messages dropped, by reason", dropped);
    let threads = Family::<Labels, Counter>::default();
    for (i, v) in s.udp_threads.iter().enumerate() {
        threads
            .get_or_create(&label("thread", &i.to_string()))
            .inc_by(*v);
    }
    reg.register(
        "udp_thread_datagrams",
        "Datagrams read, by UDP thread (workers)",
        threads,
    );
    let generated = Family::<Labels, Counter>::default();
    for (status, v) in [
        ("100", st.trying_sent),
        ("400", st.bad_content_length),
        ("403", st.forbidden_destinations),
        ("404", st.no_route),
        ("408", st.timeouts_408),
        ("482", st.loops),
        ("483", st.too_many_hops),
        ("500", st.transport_500),
        ("503", st.refused_table_full),
    ] {
        generated.get_or_create(&label("status", status)).inc_by(v);
    }
    reg.register(
        "generated_responses",
        "Responses the proxy generated itself (rejections excluded), by status",
        generated,
    );
    counter(
        &mut reg,
        "processed",
        "Messages the processor finished",
        st.processed,
    );
    counter(
        &mut reg,
        "retransmissions_seen",
        "Retransmitted requests and responses absorbed by transactions",
        st.retransmissions_seen(),
    );
    counter(
        &mut reg,
        "retransmissions_sent",
        "Retransmissions sent by the proxy's transaction timers",
        st.retransmissions_sent(),
    );
    let unreachable = Family::<Labels, Counter>::default();
    for (result, v) in [
        ("applied", st.unreachable),
        ("ignored", st.unreachable_ignored),
    ] {
        unreachable
            .get_or_create(&label("result", result))
            .inc_by(v);
    }
    reg.register(
        "icmp_unreachable",
        "ICMP unreachable errors read back for sent datagrams: applied ended a client \
         transaction towards that address at once, ignored named none",
        unreachable,
    );
    counter(
        &mut reg,
        "timer_c_cancels",
        "INVITE branches cancelled by Timer C",
        st.timer_c_cancels,
    );
    gauge(
        &mut reg,
        "timer_c_queued",
        "Timer C deadlines queued, including those a provisional response has since reset",
        st.timer_c_queued as f64,
    );
    counter(
        &mut reg,
        "transactions_refused",
        "Transactions refused because the table was full",
        st.txn.refused.table_full,
    );
    counter(
        &mut reg,
        "invite_memory_full",
        "New requests not remembered because the memory of new requests was full",
        st.invite_memory_full,
    );
    counter(
        &mut reg,
        "abandoned_at_shutdown",
        "Requests answered 503 or 408 when a graceful shutdown ran out of time",
        st.abandoned_at_shutdown,
    );
    gauge(
        &mut reg,
        "memory_in_use_bytes",
        "Bytes the transactions and queues hold, against memory_budget_mb",
        st.bytes_in_use as f64,
    );
    gauge(
        &mut reg,
        "dialog_peers",
        "Addresses in-dialog requests may go to, learnt from relayed 2xx responses",
        st.dialog_peers as f64,
    );
    counter(
        &mut reg,
        "dialog_peers_evicted",
        "Dialog peers forgotten before their time to stay within max_dialog_peers",
        st.dialog_peers_evicted,
    );
    counter(
        &mut reg,
        "admin_connections_refused",
        "Admin HTTP connections closed at once because too many were open",
        s.admin_refused,
    );
    let h = &st.hop;
    let feedback = Family::<Labels, Counter>::default();
    for (result, v) in [
        ("applied", h.client.applied),
        ("stopped", h.client.stopped),
        ("expired", h.client.expired),
        ("stale", h.client.stale),
        ("missing_seq", h.client.missing_seq),
        ("seq_jump", h.client.seq_jump),
        ("unknown_algorithm", h.client.unknown_algorithm),
        ("out_of_range", h.client.out_of_range),
        ("malformed", h.client.malformed),
        ("unconfigured_sender", h.feedback_unconfigured),
        ("no_transaction", h.feedback_without_transaction),
        ("late", h.feedback_late),
    ] {
        feedback.get_or_create(&label("result", result)).inc_by(v);
    }
    reg.register(
        "overload_feedback",
        "SE: RFC 7339 parameter sets received from next hops, by what became of them",
        feedback,
    );
    let reduced = Family::<Labels, Counter>::default();
    for (category, v) in [
        ("normal", h.client.rejected_normal),
        ("priority", h.client.rejected_priority),
    ] {
        reduced
            .get_or_create(&label("category", category))
            .inc_by(v);
    }
    reg.register(
        "overload_reduced",
        "SE: requests reduced (answered 503) by hop-by-hop control, by RFC 7339 category",
        reduced,
    );
    let stamped = Family::<Labels, Counter>::default();
    for (result, v) in [
        ("stamped", h.responses_stamped),
        ("not_participating", h.responses_not_participating),
        ("no_feedback", h.responses_without_feedback),
    ] {
        stamped.get_or_create(&label("result", result)).inc_by(v);
    }
    reg.register(
        "overload_responses",
        "RE: responses to configured neighbours, by whether they carried feedback",
        stamped,
    );
    counter(
        &mut reg,
        "overload_unconfigured_requests",
        "RE: requests declaring oc from senders that are not configured neighbours",
        h.unconfigured_requests,
    );
    gauge(
        &mut reg,
        "queue_length",
        "Messages waiting for the processor",
        st.queue_len as f64,
    );
    gauge(
        &mut reg,
        "transactions",
        "Transactions in the table",
        st.transactions as f64,
    );
    gauge(
        &mut reg,
        "invite_queue_length",
        "INVITEs waiting in the INVITE queue (invite_queue = true)",
        st.invite_queue_len as f64,
    );
    render_control_loop(&mut reg, s);
    render_tcp(&mut reg, &s.tcp);
    gauge(
        &mut reg,
        "uptime_seconds",
        "Seconds since the proxy started",
        s.uptime.as_secs_f64(),
    );
    let mut out = String::new();
    let _ = encode(&mut out, &reg);
    out
}

/// Converts prometheus-client's OpenMetrics text to the Prometheus 0.0.4 text format: a
/// counter family `x` is named `x_total` in its HELP and TYPE lines there (its samples
/// already are), and there is no `# EOF` or `# UNIT`.
pub(crate) fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 256);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "../../../tests/external_tools.rs"]
mod external_tools;

#[cfg(test)]
mod tests {
    use super::external_tools;
    use super::*;

    /// Every series the Grafana dashboard under `examples/` queries is one the proxy
    /// exports, so the dashboard cannot silently go blank after a rename.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_metrics() {
        let dashboard = include_str!("../../../examples/grafana/sluice-proxy.json");
        let parsed: serde_json::Value = serde_json::from_str(dashboard).unwrap();
        assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
        let mut snapshot = Snapshot::idle(&CoreStats::default());
        snapshot.admission = AdmissionMetrics {
            rejected: 1,
            control_value: Some(0.1),
            cpu_load: Some(0.9),
            drain_rate: Some(50.0),
            queue_target: Some(20.0),
            latency: Some(0.01),
        };
        snapshot.feedback = Some(ReceiverMetrics {
            service_rate: Some(100.0),
            session_length: Some(7.0),
            sessions_in_system: Some(3.0),
            occupancy: Some(0.5),
            active_sources: 2,
            sources_turned_away: 0,
            control_value: Some(80.0),
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], 5061));
        snapshot.feedback_sent = vec![(addr, OcAlgorithm::Loss, 10)];
        snapshot.next_hop_controls = vec![(addr, Some((OcAlgorithm::Rate, 5)))];
        let text = to_prometheus_text(&render_metrics(&snapshot));
        let exported: std::collections::HashSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let mut queried = 0;
        for (at, _) in dashboard.match_indices("sluice_proxy_") {
            let name: String = dashboard[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            queried += 1;
            assert!(
                exported.contains(name.as_str()),
                "the dashboard queries {name}, which is not exported"
            );
        }
        assert!(queried >= 20, "{queried} queries");
    }

    /// `promtool check metrics` (the Prometheus project's linter) accepts the output.
    #[test]
    #[cfg_attr(
        missing_promtool,
        ignore = "needs promtool: apt-get install prometheus"
    )]
    fn promtool_accepts_metrics() {
        let mut stats = CoreStats::default();
        stats.in_by_kind.0[0] = 7;
        stats.admitted = 5;
        stats.occupancy = 0.25;
        stats.queueing_delay.observe(Duration::from_micros(300));
        stats.setup_delay.observe(Duration::from_millis(40));
        let mut snapshot = Snapshot::idle(&stats);
        snapshot.algorithm = "pi";
        snapshot.admission.control_value = Some(0.4);
        snapshot.admission.cpu_load = Some(0.93);
        snapshot.next_hop_controls = vec![
            (
                SocketAddr::from(([127, 0, 0, 1], 5080)),
                Some((OcAlgorithm::Rate, 120)),
            ),
            (SocketAddr::from(([127, 0, 0, 1], 5081)), None),
        ];
        let text = to_prometheus_text(&render_metrics(&snapshot));
        assert!(text.contains("sluice_proxy_messages_in_total{kind=\"INVITE\"} 7"));
        assert!(text.contains("sluice_proxy_occupancy_ratio 0.25"));
        assert!(text.contains("sluice_proxy_admission_control_value 0.4"));
        assert!(text.contains("sluice_proxy_admission_cpu_load_ratio 0.93"));
        assert!(text.contains("sluice_proxy_control_info{algorithm=\"pi\"} 1"));
        assert!(text.contains(
            "sluice_proxy_next_hop_control{next_hop=\"127.0.0.1:5080\",algorithm=\"rate\"} 120"
        ));
        assert!(
            !text.contains("127.0.0.1:5081"),
            "a next hop asking for nothing has no sample"
        );
        assert!(
            !text.contains("sluice_proxy_admission_drain_rate"),
            "a value not computed is absent, not 0"
        );
        assert!(text.contains("sluice_proxy_queueing_delay_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("sluice_proxy_queueing_delay_seconds_bucket{le=\"0.00025\"} 0"));
        assert!(text.contains("sluice_proxy_setup_delay_seconds_count 1"));
        assert!(text.contains("sluice_proxy_setup_delay_seconds_bucket{le=\"+Inf\"} 1"));
        assert_eq!(
            text.matches("sluice_proxy_malformed").count(),
            0,
            "malformed datagrams are counted once, as a drop reason"
        );
        external_tools::require_promtool_accepts(&text);
    }
}
