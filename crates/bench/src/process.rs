//! What the live benches start on loopback and how they stop it: sluice's proxy in a
//! thread of this process, a proxy command (Kamailio, or any command line) as a child
//! process, sluice's own proxy as a child process (`bench soak`), sluice's UAS in a thread;
//! and what they read about them (CPU time and resident memory from /proc, the machine's
//! load average).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_load::shell::{self, Stop};
use sluice_load::UasConfig;
use sluice_proxy::{Proxy, ProxyConfig, ProxyReport, ShutdownHandle};
use sluice_sim::CallConfig;

/// A port on 127.0.0.1 free for UDP and TCP alike when asked (see
/// [`sluice_sys::reserve_sip_ports`] for why it is outside the ephemeral range).
pub fn free_sip_port() -> Result<u16, String> {
    sluice_sys::free_sip_port([127, 0, 0, 1].into()).map_err(|e| e.to_string())
}

/// A token for a UAC's Call-IDs and branches that differs from run to run, so a UAS or
/// proxy that outlives one run does not take the next run's calls for retransmissions.
pub fn fresh_run_token() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_000_000)
}

/// This executable's `sluice proxy` as a command template (see [`fill_template`]).
/// sluice's proxy with `workers` UDP threads as a command template.
pub fn sluice_proxy_command(workers: usize) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(format!(
        "'{}' proxy --listen {{listen}} --next-hop {{next_hop}} --duration {{duration}}s \
         --workers {workers}",
        exe.display()
    ))
}

/// Kamailio with `cfg` and `workers` UDP workers as a command template.
pub fn kamailio_command(cfg: &Path, workers: u32) -> Result<String, String> {
    if !cfg.is_file() {
        return Err(format!(
            "{}: no such file (run from the repository root or give --kamailio-cfg)",
            cfg.display()
        ));
    }
    Ok(format!(
        "kamailio -f '{}' -DD -E -m 1024 -n {workers} -l udp:{{listen}} -A 'NEXT_HOP=\"sip:{{next_hop}}\"'",
        cfg.display()
    ))
}

/// A command template with `{listen}`, `{next_hop}`, `{listen_port}`, `{next_hop_port}` and
/// `{duration}` (whole seconds) filled in.
pub fn fill_template(
    template: &str,
    listen: SocketAddr,
    next_hop: SocketAddr,
    duration: f64,
) -> String {
    template
        .replace("{listen}", &listen.to_string())
        .replace("{next_hop}", &next_hop.to_string())
        .replace("{listen_port}", &listen.port().to_string())
        .replace("{next_hop_port}", &next_hop.port().to_string())
        .replace("{duration}", &format!("{duration:.0}"))
}

/// Runs `command` with `sh -c 'exec COMMAND'`, its output discarded.
pub fn spawn_command(command: &str) -> Result<std::process::Child, String> {
    std::process::Command::new("sh")
        .args(["-c", &format!("exec {command}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("{command}: {e}"))
}

/// CPU seconds (user + system) of `pid` and its direct children (e.g. Kamailio's workers),
/// from /proc.
pub fn process_tree_cpu(pid: u32) -> Option<f64> {
    let fields = |stat: &str| -> Option<(u32, u64)> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ppid = f.get(1)?.parse().ok()?;
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some((ppid, ticks))
    };
    let (_, own) = fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let mut total = own;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(name) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) {
            if let Some((ppid, ticks)) = fields(&stat) {
                if ppid == pid {
                    total += ticks;
                }
            }
        }
    }
    Some(total as f64 / 100.0)
}

/// Datagrams the kernel dropped because a UDP socket's receive buffer was full
/// (`RcvbufErrors` of the `Udp:` table in /proc/PID/net/snmp), counted over the network
/// namespace `pid` lives in; `None` for this process's own namespace.
pub fn udp_receive_buffer_drops(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/net/snmp"),
        None => "/proc/self/net/snmp".to_owned(),
    };
    udp_rcvbuf_errors(&std::fs::read_to_string(path).ok()?)
}

/// `RcvbufErrors` from the text of /proc/net/snmp: a header line names the `Udp:` fields,
/// the next line holds their values.
fn udp_rcvbuf_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let column = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(column)?.parse().ok()
}

/// Asks a child this bench started to stop (SIGTERM lets Kamailio stop its workers), then
/// kills it if it is still there after 3 s.
pub fn stop_child(child: &mut std::process::Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The system's 1-minute load average (the machine is shared; printed with the numbers).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A proxy running for one point.
#[derive(Debug)]
pub enum Running {
    Sluice {
        stop: ShutdownHandle,
        /// The report, and the CPU seconds the proxy's thread used.
        thread: std::thread::JoinHandle<std::io::Result<(ProxyReport, Option<f64>)>>,
    },
    Command(std::process::Child),
}

impl Running {
    /// Asks the proxy to stop (a command: and waits until it has).
    pub fn stop(&mut self) {
        match self {
            Running::Sluice { stop, .. } => stop.shutdown(),
            Running::Command(child) => stop_child(child),
        }
    }

    /// Stops the proxy and waits for it; sluice's report and its thread's CPU seconds come
    /// back.
    pub fn finish(mut self) -> Option<(ProxyReport, Option<f64>)> {
        self.stop();
        match self {
            Running::Sluice { thread, .. } => thread.join().ok().and_then(Result::ok),
            Running::Command(_) => None,
        }
    }
}

/// sluice's proxy on a free port of 127.0.0.1, forwarding to `next_hop`; it stops by itself
/// after `budget_s` even if this process never asks it to.
pub fn start_sluice(
    config: ProxyConfig,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    start_sluice_on(
        config,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        next_hop,
        budget_s,
    )
}

/// [`start_sluice`] on a given address (the topology's SEs, whose addresses the RE must
/// know first).
pub fn start_sluice_on(
    config: ProxyConfig,
    listen: SocketAddr,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    let config = wired(config, listen, next_hop, budget_s);
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let cpu0 = shell::thread_cpu_seconds();
        let report = rt.block_on(async move {
            let proxy = Proxy::bind(config).await?;
            let _ = tx.send((proxy.local_addr(), proxy.shutdown_handle()));
            proxy.run().await
        })?;
        // The proxy's own thread, and its other UDP threads (`workers`).
        let cpu = shell::thread_cpu_seconds()
            .zip(cpu0)
            .map(|(b, a)| b - a + report.worker_cpu_s);
        Ok((report, cpu))
    });
    let (addr, stop) = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the sluice proxy did not start".to_owned())?;
    Ok((addr, Running::Sluice { stop, thread }))
}

/// `config` listening on `listen`, forwarding to `next_hop` and stopping by itself after
/// `budget_s`, however it is started.
fn wired(
    mut config: ProxyConfig,
    listen: SocketAddr,
    next_hop: SocketAddr,
    budget_s: f64,
) -> ProxyConfig {
    config.listen = listen;
    config.next_hop = Some(next_hop);
    config.duration_s = Some(budget_s);
    // A bench runs its proxies and the generator on one host: one UDP thread each unless
    // the experiment asks for more.
    if config.workers == 0 {
        config.workers = 1;
    }
    config.shutdown_grace_s = 1.0;
    config
}

/// sluice's proxy as a child process, `EXE proxy --config FILE`, so that what the OS says
/// about it (resident memory) is the proxy's alone: `config` (wired as in
/// [`start_sluice_on`]) is written to `file`, the proxy's output goes to `log`, and it is
/// returned once it answers on `listen`.
pub fn start_sluice_process(
    exe: &Path,
    config: ProxyConfig,
    listen: SocketAddr,
    next_hop: SocketAddr,
    budget_s: f64,
    file: &Path,
    log: &Path,
) -> Result<std::process::Child, String> {
    let config = wired(config, listen, next_hop, budget_s);
    let text = config.to_toml();
    match ProxyConfig::from_toml(&text) {
        Ok(read) if read == config => {}
        Ok(_) => return Err("the proxy's config does not survive TOML".into()),
        Err(e) => return Err(format!("the proxy's config as TOML: {e}")),
    }
    std::fs::write(file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut child = std::process::Command::new(exe)
        .arg("proxy")
        .arg("--config")
        .arg(file)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{} proxy: {e}", exe.display()))?;
    if !shell::probe(listen, Duration::from_secs(10)) {
        stop_child(&mut child);
        let said = std::fs::read_to_string(log).unwrap_or_default();
        return Err(format!(
            "{} proxy --config {}: no answer on {listen} within 10 s: {}",
            exe.display(),
            file.display(),
            said.trim()
        ));
    }
    Ok(child)
}

/// Resident memory of process `pid` in MiB (`VmRSS` of /proc/PID/status); `None` once it
/// has exited.
pub fn resident_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// A proxy command (a template, see [`fill_template`]) on a free port of 127.0.0.1,
/// forwarding to `next_hop`, once it answers there.
pub fn start_command(
    template: &str,
    next_hop: SocketAddr,
    budget_s: f64,
) -> Result<(SocketAddr, Running), String> {
    let listen = SocketAddr::from(([127, 0, 0, 1], free_sip_port()?));
    let command = fill_template(template, listen, next_hop, budget_s);
    let mut running = Running::Command(spawn_command(&command)?);
    if !shell::probe(listen, Duration::from_secs(10)) {
        running.stop();
        return Err(format!("{command}: no answer on {listen} within 10 s"));
    }
    Ok((listen, running))
}

/// The thread of a UAS started by [`start_uas`].
pub type UasThread = std::thread::JoinHandle<std::io::Result<shell::Run<sluice_load::UasCounts>>>;

/// The UAS of one point (its counters are the point's): its address, the flag that stops
/// it, and its thread. It stops by itself 120 s after `duration` in any case.
pub fn start_uas(duration: f64) -> Result<(SocketAddr, Arc<AtomicBool>, UasThread), String> {
    start_uas_at(std::net::Ipv4Addr::LOCALHOST.into(), duration)
}

/// [`start_uas`] on a fresh port of `ip`.
pub fn start_uas_at(
    ip: std::net::IpAddr,
    duration: f64,
) -> Result<(SocketAddr, Arc<AtomicBool>, UasThread), String> {
    let socket = UasSocket::bind_on(SocketAddr::new(ip, 0), None)?;
    let addr = socket.local_addr()?;
    let (flag, thread) = start_uas_on(
        socket,
        None,
        duration,
        &CallConfig::default(),
        shell::tcp::TcpConfig::default(),
        false,
    )?;
    Ok((addr, flag, thread))
}

/// Where a bench UAS answers: a UDP socket, or a TCP listener (answering on the
/// connection each request came in on).
#[derive(Debug)]
pub enum UasSocket {
    Udp(std::net::UdpSocket),
    Tcp(std::net::TcpListener),
}

impl UasSocket {
    /// A fresh loopback port, over UDP, or over TCP with connections as `tcp` says.
    pub fn bind(tcp: Option<&shell::tcp::TcpConfig>) -> Result<UasSocket, String> {
        UasSocket::bind_on(SocketAddr::from(([127, 0, 0, 1], 0)), tcp)
    }

    /// [`UasSocket::bind`] on a given address.
    pub fn bind_on(
        any: SocketAddr,
        tcp: Option<&shell::tcp::TcpConfig>,
    ) -> Result<UasSocket, String> {
        let socket = match tcp {
            Some(t) => shell::tcp::bind_tcp_with_buffers(any, t.send_buffer, t.receive_buffer)
                .map(UasSocket::Tcp),
            None => shell::bind_udp(any).map(UasSocket::Udp),
        };
        socket.map_err(|e| e.to_string())
    }

    pub fn local_addr(&self) -> Result<SocketAddr, String> {
        match self {
            UasSocket::Udp(s) => s.local_addr(),
            UasSocket::Tcp(l) => l.local_addr(),
        }
        .map_err(|e| e.to_string())
    }
}

/// [`start_uas`] on a bound socket, answering as `call` says (100 Trying or not, the 200
/// OK's session description), with `contact` in its Contact if given (the relay in front
/// of it, so that in-dialog requests cross the relay too).
pub fn start_uas_on(
    socket: UasSocket,
    contact: Option<SocketAddr>,
    duration: f64,
    call: &CallConfig,
    tcp: shell::tcp::TcpConfig,
    record_acks: bool,
) -> Result<(Arc<AtomicBool>, UasThread), String> {
    let local = socket.local_addr()?;
    let mut cfg = UasConfig::new(local);
    cfg.record_acks = record_acks;
    cfg.contact = contact;
    cfg.sends_trying = call.callee_sends_trying;
    cfg.answer_body = sluice_sip::sdp::session_description(call.body_bytes, local.ip());
    let flag = Arc::new(AtomicBool::new(false));
    let stop = Stop {
        after: Some(Duration::from_secs_f64(duration + 120.0)),
        flag: Some(flag.clone()),
    };
    let thread = std::thread::spawn(move || match socket {
        UasSocket::Udp(s) => shell::run_uas(s, cfg, &stop),
        UasSocket::Tcp(l) => shell::tcp::run_uas_tcp(l, cfg, tcp, &stop),
    });
    Ok((flag, thread))
}

/// A UAS started by [`start_uas_live`]: its address, the flag that stops it, its thread,
/// and its counters as of a moment ago.
#[derive(Debug)]
pub struct LiveUas {
    pub addr: SocketAddr,
    pub flag: Arc<AtomicBool>,
    pub thread: UasThread,
    pub counts: Arc<Mutex<sluice_load::UasCounts>>,
}

/// [`start_uas`] whose counters can be read while it runs (refreshed every 200 ms), for a
/// run measured interval by interval. It stops by itself 120 s after `duration`.
pub fn start_uas_live(duration: f64) -> Result<LiveUas, String> {
    let socket =
        shell::bind_udp(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    let addr = socket.local_addr().map_err(|e| e.to_string())?;
    let cfg = UasConfig::new(addr);
    let flag = Arc::new(AtomicBool::new(false));
    let stop = Stop {
        after: Some(Duration::from_secs_f64(duration + 120.0)),
        flag: Some(flag.clone()),
    };
    let counts = Arc::new(Mutex::new(sluice_load::UasCounts::default()));
    let shared = counts.clone();
    let thread = std::thread::spawn(move || {
        shell::run_uas_observed(socket, cfg, &stop, Duration::from_millis(200), |c| {
            if let Ok(mut s) = shared.lock() {
                *s = *c;
            }
        })
    });
    Ok(LiveUas {
        addr,
        flag,
        thread,
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_buffer_drops_are_read_from_the_udp_table_not_udplite() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
            Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
            Udp: 152266874 170883 379125 154311885 379119 7\n\
            UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
            UdpLite: 0 0 0 0 0 0\n";
        assert_eq!(udp_rcvbuf_errors(snmp), Some(379_119));
        assert_eq!(udp_rcvbuf_errors("Ip: Forwarding\nIp: 1\n"), None);
    }

    #[test]
    fn templates_get_addresses_ports_and_whole_seconds() {
        let listen: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        let next: SocketAddr = "127.0.0.1:5070".parse().unwrap();
        assert_eq!(
            fill_template(
                "p -l {listen} -n {next_hop} -p {listen_port}/{next_hop_port} -d {duration}",
                listen,
                next,
                41.6
            ),
            "p -l 127.0.0.1:5060 -n 127.0.0.1:5070 -p 5060/5070 -d 42"
        );
    }

    #[test]
    fn this_process_has_cpu_time_in_proc() {
        // Burn a little CPU so the count is above zero even on a fresh process.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let cpu = process_tree_cpu(std::process::id()).expect("/proc is readable");
        assert!(cpu > 0.0, "{cpu}");
    }

    #[test]
    fn this_process_has_resident_memory_and_a_gone_one_none() {
        let rss = resident_mib(std::process::id()).expect("/proc is readable");
        assert!(rss > 0.1 && rss < 100_000.0, "{rss}");
        assert_eq!(resident_mib(u32::MAX), None);
    }
}
