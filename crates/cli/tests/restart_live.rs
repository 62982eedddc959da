//! Hop-by-hop overload control across a crash, on real loopback sockets: sluice's UAC ->
//! SE (`sluice proxy`, role se) -> RE (`sluice proxy`, role re, emulated capacity 100
//! calls/s) -> sluice's UAS, offered 1.5 times the RE's capacity so that feedback is in
//! force. The proxies are the bench's topology configurations (`Scenario::re_proxy`,
//! `se_proxy`), each a process of its own, killed with SIGKILL and started again on the
//! same port two seconds later.
//!
//! * RE killed: what the SE sends the dead RE comes back as ICMP port unreachable and is
//!   answered 500 at once; what the RE had answered 100 ends at the SE's Timer C, whose
//!   CANCEL is unreachable too (408). Every call gets a final response, and once the RE is
//!   back the SE admits its pre-crash rate again within the feedback's validity.
//! * SE killed: the RE serves the new SE on the same address at its share again.
//!
//! Timer C is 1 s at the SE (RFC 3261 asks for more than 3 minutes) so that the test ends
//! in seconds; it shortens only how long a branch the dead RE had taken waits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_load::shell::{bind_udp, run_uac, run_uas, Stop};
use sluice_load::{SecondRow, UacConfig, UasConfig};
use sluice_sim::{ProxyConfig, Scenario};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const CAPACITY: f64 = 100.0;
const OFFERED: f64 = 150.0;

/// A port free for UDP and TCP alike, as the proxy listens on both.
fn free_udp() -> SocketAddr {
    SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ))
}

fn free_tcp() -> SocketAddr {
    SocketAddr::from((
        [127, 0, 0, 1],
        sluice_bench::process::free_sip_port().unwrap(),
    ))
}

/// A `sluice proxy` process on its config file.
struct Process {
    child: Child,
}

impl Process {
    /// Starts it and waits until it is listening.
    fn start(config: &ProxyConfig, file: &std::path::Path) -> Process {
        let text = config.to_toml();
        assert!(!text.starts_with("# cannot"), "{text}");
        std::fs::write(file, text).unwrap();
        let mut child = Command::new(SLUICE)
            .args(["proxy", "--config"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut said = Vec::new();
        loop {
            let Some(Ok(line)) = lines.next() else {
                panic!("the proxy exited before listening: {said:?}");
            };
            if line.contains("listening on udp") {
                eprintln!("{line}");
                break;
            }
            said.push(line);
        }
        // Keep reading, so that a full pipe never blocks the proxy.
        std::thread::spawn(move || for _ in lines {});
        Process { child }
    }

    /// SIGKILL: no graceful anything.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/status` of a proxy's admin endpoint, if it answers.
fn status(admin: SocketAddr) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET /status HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text[text.find("\r\n\r\n")? + 4..]).ok()
}

/// Samples a proxy's `/status` counter every 100 ms: (seconds since `origin`, value).
fn sample(
    admin: SocketAddr,
    origin: Instant,
    path: &'static [&'static str],
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(f64, u64)>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(v) = status(admin) {
                let v = path.iter().fold(&v, |v, k| &v[*k]);
                out.push((origin.elapsed().as_secs_f64(), v.as_u64().unwrap_or(0)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        out
    })
}

/// The rate of a sampled counter over `[from, to)` seconds, across a restart of the
/// process (its counter starts again at 0): increments summed over the time covered.
fn rate(samples: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let inside: Vec<_> = samples
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .collect();
    let mut count = 0;
    let mut covered = 0.0;
    for w in inside.windows(2) {
        let (t0, v0) = *w[0];
        let (t1, v1) = *w[1];
        if v1 >= v0 && t1 - t0 < 0.5 {
            count += v1 - v0;
            covered += t1 - t0;
        }
    }
    if covered > 0.0 {
        count as f64 / covered
    } else {
        0.0
    }
}

/// Calls answered per second in the rows covering `[from, to)`.
fn answered(rows: &[SecondRow], from: u64, to: u64) -> f64 {
    let r: Vec<_> = rows
        .iter()
        .filter(|r| r.second > from && r.second <= to)
        .collect();
    r.iter().map(|r| r.counts.successful).sum::<u64>() as f64 / r.len().max(1) as f64
}

/// The topology with `algorithm` at the RE; `crash` is "re" or "se": that one is killed
/// at 6 s and started again at 8 s. Returns the UAC's rows and summary, the SE's
/// admitted-INVITE samples, and the RE's per-neighbour... (see the assertions).
struct Outcome {
    rows: Vec<SecondRow>,
    summary: sluice_load::UacSummary,
    se_admitted: Vec<(f64, u64)>,
    re_validity_ms: u64,
}

const KILL_AT: f64 = 6.0;
const RESTART_AT: f64 = 8.0;
const OFFER_S: u64 = 16;

fn run(algorithm: &str, crash: &str) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut sc = Scenario::default();
    // As the bench's variants: sluice's control defaults with the algorithm.
    sc.re.control = ProxyConfig::default().control;
    sc.re.control.algorithm = algorithm.parse().unwrap();
    sc.scale_to_capacity(CAPACITY);
    let (se_addr, re_addr, se_admin) = (free_udp(), free_udp(), free_tcp());

    let uas_socket = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let uas_addr = uas_socket.local_addr().unwrap();
    let uas_stop = Arc::<AtomicBool>::default();
    let uas_flag = Stop {
        flag: Some(uas_stop.clone()),
        ..Stop::default()
    };
    let uas = std::thread::spawn(move || run_uas(uas_socket, UasConfig::new(uas_addr), &uas_flag));

    let budget = OFFER_S as f64 + 10.0;
    let mut re = sc.re_proxy(re_addr, uas_addr, &[se_addr]);
    re.duration_s = Some(budget);
    re.shutdown_grace_s = 0.5;
    let mut se = sc.se_proxy(0, se_addr, re_addr);
    se.duration_s = Some(budget);
    se.shutdown_grace_s = 0.5;
    se.admin = Some(se_admin);
    se.timer_c_s = 1.0;
    let (re_file, se_file) = (dir.path().join("re.toml"), dir.path().join("se.toml"));
    let validity = if algorithm.starts_with("win") {
        re.overload.server.window_validity
    } else {
        re.overload.server.validity
    };

    let mut re_proc = Some(Process::start(&re, &re_file));
    let mut se_proc = Some(Process::start(&se, &se_file));
    let origin = Instant::now();
    let stop_sampling = Arc::<AtomicBool>::default();
    let sampler = sample(
        se_admin,
        origin,
        &["overload", "forwarded"],
        stop_sampling.clone(),
    );

    let rows = Arc::new(Mutex::new(Vec::new()));
    let uac = {
        let rows = rows.clone();
        std::thread::spawn(move || {
            let mut uac = UacConfig::new("127.0.0.1:0".parse().unwrap(), se_addr, OFFERED);
            uac.duration = Some(Duration::from_secs(OFFER_S));
            uac.drain_timeout = Duration::from_secs(4);
            let stop = Stop {
                after: Some(Duration::from_secs(OFFER_S + 8)),
                ..Stop::default()
            };
            run_uac(
                bind_udp("127.0.0.1:0".parse().unwrap()).unwrap(),
                uac,
                &stop,
                |r| {
                    rows.lock().unwrap().push(*r);
                },
            )
            .unwrap()
        })
    };
    let sleep_until = |t: f64| {
        let left = Duration::from_secs_f64(t).saturating_sub(origin.elapsed());
        std::thread::sleep(left);
    };
    sleep_until(KILL_AT);
    let (victim, config, file) = match crash {
        "re" => (&mut re_proc, &re, &re_file),
        _ => (&mut se_proc, &se, &se_file),
    };
    victim.take().unwrap().kill();
    sleep_until(RESTART_AT);
    *victim = Some(Process::start(config, file));
    let summary = uac.join().unwrap().summary;
    stop_sampling.store(true, Ordering::Relaxed);
    let se_admitted = sampler.join().unwrap();
    drop(se_proc);
    drop(re_proc);
    uas_stop.store(true, Ordering::Relaxed);
    let _ = uas.join();
    let rows = std::mem::take(&mut *rows.lock().unwrap());
    Outcome {
        rows,
        summary,
        se_admitted,
        re_validity_ms: validity.as_millis() as u64,
    }
}

/// The first second, from the restart on, whose admitted rate (a one-second window slid
/// by 100 ms) reaches `target`.
fn recovered_after(samples: &[(f64, u64)], target: f64) -> Option<f64> {
    let mut t = RESTART_AT;
    while t < OFFER_S as f64 {
        if rate(samples, t, t + 1.0) >= target {
            return Some(t + 1.0 - RESTART_AT);
        }
        t += 0.1;
    }
    None
}

fn re_crash(algorithm: &str) {
    let o = run(algorithm, "re");
    let before = rate(&o.se_admitted, 3.0, KILL_AT);
    let after = rate(&o.se_admitted, RESTART_AT + 3.0, OFFER_S as f64);
    let answered_before = answered(&o.rows, 3, KILL_AT as u64);
    let answered_after = answered(&o.rows, RESTART_AT as u64 + 3, OFFER_S);
    let validity = o.re_validity_ms as f64 / 1000.0;
    let back = recovered_after(&o.se_admitted, 0.9 * before);
    let s = &o.summary;
    eprintln!(
        "{algorithm}, RE killed at {KILL_AT} s and back at {RESTART_AT} s: SE admitted \
         {before:.1}/s before, {after:.1}/s from {} s; back to 90 % in {back:?} s (oc-validity \
         {validity} s); answered {answered_before:.1}/s before, {answered_after:.1}/s after; \
         calls {} offered, {} set up, 503 {}, 408 {}, other final {}, unfinished {}",
        RESTART_AT + 3.0,
        s.offered,
        s.successful,
        s.failures.rejected_503,
        s.failures.timeout,
        s.failures.other_final,
        s.unfinished
    );
    for r in &o.rows {
        eprintln!(
            "  second {:2}: offered {:3} answered {:3} 503 {:3} 408 {:3} other {:3}",
            r.second,
            r.counts.offered,
            r.counts.successful,
            r.counts.failed.rejected_503,
            r.counts.failed.timeout,
            r.counts.failed.other_final
        );
    }
    // Feedback was in force before the crash: the SE admitted about the RE's capacity,
    // well under what was offered.
    assert!(
        before > 0.5 * CAPACITY && before < 0.9 * OFFERED,
        "{before}"
    );
    // Every call got a final response: the dead RE's calls 500 (ICMP) or 408 (Timer C).
    assert_eq!(s.unfinished, 0, "{s:?}");
    assert_eq!(s.admitted_unanswered, 0, "{s:?}");
    assert!(
        s.failures.other_final + s.failures.timeout > 0,
        "the crash cost no call: {s:?}"
    );
    // Back at the pre-crash rate within the feedback's validity (plus a second of
    // measurement), and not throttled below it afterwards (no stuck window).
    let back = back.expect("the SE never got back to its admitted rate");
    assert!(back <= validity + 1.5, "{back} s");
    assert!(after >= 0.85 * before, "{after} vs {before}");
    assert!(
        answered_after >= 0.85 * answered_before,
        "{answered_after} vs {answered_before}"
    );
}

#[test]
fn after_an_re_crash_win_cont_feedback_resumes_and_every_call_is_answered() {
    re_crash("win-cont");
}

#[test]
fn after_an_re_crash_rate_abs_feedback_resumes_and_every_call_is_answered() {
    re_crash("rate-abs");
}

#[test]
fn after_an_se_crash_the_re_serves_the_new_se_at_its_share() {
    let o = run("win-cont", "se");
    let before = rate(&o.se_admitted, 3.0, KILL_AT);
    let after = rate(&o.se_admitted, RESTART_AT + 3.0, OFFER_S as f64);
    let answered_before = answered(&o.rows, 3, KILL_AT as u64);
    let answered_after = answered(&o.rows, RESTART_AT as u64 + 3, OFFER_S);
    let back = recovered_after(&o.se_admitted, 0.9 * before);
    let validity = o.re_validity_ms as f64 / 1000.0;
    let s = &o.summary;
    eprintln!(
        "win-cont, SE killed at {KILL_AT} s and back at {RESTART_AT} s: SE admitted \
         {before:.1}/s before, {after:.1}/s after; back to 90 % in {back:?} s; answered \
         {answered_before:.1}/s before, {answered_after:.1}/s after; calls {} offered, {} set \
         up, unfinished {} (of which the dead SE had answered 100: {})",
        s.offered, s.successful, s.unfinished, s.admitted_unanswered
    );
    assert!(
        before > 0.5 * CAPACITY && before < 0.9 * OFFERED,
        "{before}"
    );
    let back = back.expect("the new SE never got back to its admitted rate");
    assert!(back <= validity + 1.5, "{back} s");
    assert!(after >= 0.85 * before, "{after} vs {before}");
    assert!(
        answered_after >= 0.85 * answered_before,
        "{answered_after} vs {answered_before}"
    );
    // What the killed SE held is lost with it (its callers had their 100 Trying and
    // wait), at most the calls of the moments around the crash.
    assert!(s.admitted_unanswered <= (OFFERED * 2.0) as u64, "{s:?}");
}
