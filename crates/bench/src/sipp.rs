//! SIPp in the live benches: its statistics for `sluice bench proxy`'s steps, and SIPp as
//! the calling side of `sluice bench overload`, measured the way `sluice load uac` measures:
//! per-second rows of calls offered, calls set up within 10 s (goodput), failures and
//! retransmissions, and the setup delay (first INVITE to ACK) of every call.
//!
//! The scenario (`tests/sipp/uac-setup.xml`) starts response-time duration 1 at the first
//! INVITE, stops it when the ACK goes out and splits calls at 10 s with
//! `ResponseTimeRepartition`, so SIPp's own statistics give the papers' goodput. The rows
//! come from SIPp's `-trace_stat` (cumulative counters, one row a second), the split of
//! retransmissions by message from `-trace_counts`, the delays from `-trace_rtt`.
//!
//! SIPp's retransmission limits are set to RFC 3261's counts (see `run`).
//!
//! SIPp limits calls in progress by default to three times the rate, which throttles the
//! offered load exactly when a collapsing proxy delays calls; `-l` is set to every call of
//! the run so that SIPp, like `sluice load`, keeps offering its rate.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_load::{Counts, SecondRow};

use crate::point::CallerRun;

/// A SIPp UAC placing calls at `rate` for `duration` seconds through `target`, with `hold`
/// seconds between ACK and BYE, stopping by itself after `budget` seconds.
#[derive(Clone, Copy, Debug)]
pub struct SippUac<'a> {
    pub scenario: &'a Path,
    pub target: SocketAddr,
    pub rate: f64,
    pub duration: f64,
    pub hold: f64,
    pub budget: f64,
}

impl SippUac<'_> {
    pub fn run(&self) -> Result<CallerRun, String> {
        if !self.scenario.is_file() {
            return Err(format!(
                "{}: no such SIPp scenario (run from the repository root or give --sipp-scenario)",
                self.scenario.display()
            ));
        }
        let dir = std::env::temp_dir().join(format!(
            "sluice-overload-sipp-{}-{}",
            std::process::id(),
            (self.rate * 1000.0) as u64
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let scenario = fs::canonicalize(self.scenario).map_err(|e| e.to_string())?;
        let calls = (self.rate * self.duration).round().max(1.0) as u64;
        let stat = dir.join("stat.csv");
        // With -l above the open-file limit SIPp logs a warning (it reserves a file per call
        // for media sockets this scenario does not open) and runs.
        let mut cmd = Command::new("sipp");
        cmd.current_dir(&dir)
            .arg(self.target.to_string())
            .arg("-sf")
            .arg(&scenario)
            .args(["-i", "127.0.0.1", "-s", "service", "-nostdin"])
            .args(["-r", &format!("{:.0}", self.rate), "-rp", "1000"])
            .args(["-m", &calls.to_string(), "-l", &calls.to_string()])
            .args(["-d", &format!("{:.0}", self.hold * 1000.0)])
            .args(["-buff_size", "4194304"])
            // RFC 3261's schedules, as sluice's transaction layer runs them: an INVITE is
            // sent again 6 times (0.5 s to 31.5 s), a BYE 10 times (capped at T2 = 4 s),
            // and a request unanswered for 32 s fails (Timers B and F). SIPp's defaults are
            // 5 and 7 retransmissions, and a call then waits another doubled interval (an
            // INVITE's 6th copy is followed by 64 s of waiting): its calls outlived sluice's
            // and their late answers counted. A receive timeout of 32 s from the last
            // message is SIPp's nearest equivalent of Timer B (a 1xx restarts it).
            .args(["-max_invite_retrans", "6", "-max_non_invite_retrans", "10"])
            .args(["-recv_timeout", "32000"])
            .args(["-timeout", &format!("{:.0}s", self.budget)])
            .args(["-trace_stat", "-fd", "1", "-stf"])
            .arg(&stat)
            .args(["-trace_counts", "-trace_rtt", "-rtt_freq", "1"])
            .args(["-trace_err", "-error_file"])
            .arg(dir.join("errors.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("sipp: {e} (apt-get install sip-tester)"))?;
        // SIPp's -timeout should end it, but with thousands of calls still retransmitting it
        // can outlive it; its statistics are written every second, so stopping it here loses
        // nothing counted.
        let deadline = Instant::now() + Duration::from_secs_f64(self.budget + 5.0);
        while child.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut run = parse_stat(&fs::read_to_string(&stat).map_err(|e| {
            format!(
                "{}: {e} (SIPp's errors in {})",
                stat.display(),
                dir.display()
            )
        })?)?;
        let scenario_stem = scenario
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(counts) = find(&dir, &scenario_stem, "_counts.csv") {
            let text = fs::read_to_string(&counts).map_err(|e| e.to_string())?;
            apply_counts(&text, &mut run);
        }
        if let Some(rtt) = find(&dir, &scenario_stem, "_rtt.csv") {
            let text = fs::read_to_string(&rtt).map_err(|e| e.to_string())?;
            let mut delays = parse_rtt(&text);
            delays.sort_by(f64::total_cmp);
            run.setup_p50_ms = percentile(&delays, 0.50);
            run.setup_p99_ms = percentile(&delays, 0.99);
        }
        let _ = fs::remove_dir_all(&dir);
        Ok(run)
    }
}

/// The last row of a SIPp `-trace_stat` file as name → value.
pub fn last_stats(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    last_row(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn last_row(text: &str) -> Result<BTreeMap<String, String>, &'static str> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or("empty")?;
    let last = lines.next_back().ok_or("no rows")?;
    Ok(header
        .split(';')
        .zip(last.split(';'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// A counter of [`last_stats`], 0 if absent.
pub fn stat(stats: &BTreeMap<String, String>, key: &str) -> u64 {
    stats
        .get(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// SIPp names its trace files `<scenario>_<pid>_<kind>.csv` in its working directory.
fn find(dir: &Path, stem: &str, suffix: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem) && n.ends_with(suffix))
        })
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

/// A `;`-separated SIPp trace: the header's names and the rows.
fn table(text: &str) -> Result<(Vec<&str>, Vec<Vec<&str>>), String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or("SIPp trace: empty")?
        .split(';')
        .collect();
    Ok((header, lines.map(|l| l.split(';').collect()).collect()))
}

/// `HH:MM:SS` or `HH:MM:SS:micro` as seconds.
fn elapsed_s(v: &str) -> Option<f64> {
    let mut parts = v.trim().split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    let micros: f64 = parts.next().map_or(Some(0.0), |u| u.parse().ok())?;
    Some(h * 3600.0 + m * 60.0 + s + micros / 1e6)
}

/// Per-second rows from SIPp's cumulative `-trace_stat` counters.
fn parse_stat(text: &str) -> Result<CallerRun, String> {
    let (header, rows) = table(text)?;
    let col = |name: &str| header.iter().position(|h| *h == name);
    let need = |name: &str| col(name).ok_or_else(|| format!("SIPp statistics: no column {name}"));
    let elapsed = need("ElapsedTime(C)")?;
    let offered = need("OutgoingCall(C)")?;
    let completed = need("SuccessfulCall(C)")?;
    let failed = need("FailedCall(C)")?;
    let max_retrans = need("FailedMaxUDPRetrans(C)")?;
    let retrans = need("Retransmissions(C)")?;
    let good = header
        .iter()
        .position(|h| h.starts_with("ResponseTimeRepartition1_<"))
        .ok_or("SIPp statistics: no ResponseTimeRepartition1 (the scenario must split rtd 1 at the setup limit)")?;
    let slow = header
        .iter()
        .position(|h| h.starts_with("ResponseTimeRepartition1_>="))
        .ok_or("SIPp statistics: no ResponseTimeRepartition1_>= column")?;
    let num = |row: &[&str], i: usize| -> u64 {
        row.get(i).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    let mut run = CallerRun::default();
    let mut prev = [0u64; 7];
    // SIPp writes a last row when it exits, usually within the second of the periodic row
    // before it: rows falling on one second are summed, so a second is never counted twice.
    let mut per_second: Vec<(u64, [u64; 7])> = Vec::new();
    for row in &rows {
        let Some(t) = row.get(elapsed).and_then(|v| elapsed_s(v)) else {
            continue;
        };
        let now = [
            num(row, offered),
            num(row, completed),
            num(row, failed),
            num(row, max_retrans),
            num(row, retrans),
            num(row, good),
            num(row, slow),
        ];
        let mut d = [0u64; 7];
        for (k, slot) in d.iter_mut().enumerate() {
            *slot = now[k].saturating_sub(prev[k]);
        }
        prev = now;
        run.duration_s = t;
        run.retransmissions_sent = now[4];
        let second = t.round() as u64;
        if second == 0 {
            continue;
        }
        match per_second.last_mut() {
            Some((s, acc)) if *s == second => {
                for (a, x) in acc.iter_mut().zip(d) {
                    *a += x;
                }
            }
            _ => per_second.push((second, d)),
        }
    }
    for (second, d) in per_second {
        let mut counts = Counts {
            offered: d[0],
            completed: d[1],
            successful: d[5],
            ..Counts::default()
        };
        counts.failed.timeout = d[3];
        counts.failed.other_final = d[2].saturating_sub(d[3]);
        counts.failed.slow_setup = d[6];
        // By message when -trace_counts is read (apply_counts); INVITE until then.
        counts.retransmissions_sent.invite = d[4];
        run.rows.push(SecondRow {
            second,
            counts,
            pdd_p50_ms: None,
            pdd_p99_ms: None,
            in_progress: 0,
        });
    }
    Ok(run)
}

/// Splits each row's retransmissions by message and totals what SIPp sent, from the
/// `-trace_counts` file: a column `N_NAME_Sent` marks message N as one SIPp sends, so
/// `N_NAME_Retrans` counts its retransmissions; for a message it receives, `_Retrans`
/// counts the copies that came again.
fn apply_counts(text: &str, run: &mut CallerRun) {
    let Ok((header, rows)) = table(text) else {
        return;
    };
    let Some(elapsed) = header.iter().position(|h| *h == "ElapsedTime") else {
        return;
    };
    let sent: Vec<&str> = header
        .iter()
        .filter_map(|h| h.strip_suffix("_Sent"))
        .collect();
    // (column, is a send, message name)
    let mut retrans_cols: Vec<(usize, bool, String)> = Vec::new();
    let mut sent_cols: Vec<usize> = Vec::new();
    for (i, h) in header.iter().enumerate() {
        if let Some(msg) = h.strip_suffix("_Retrans") {
            let name = msg.split_once('_').map_or(msg, |(_, n)| n).to_owned();
            retrans_cols.push((i, sent.contains(&msg), name));
        } else if h.ends_with("_Sent") {
            sent_cols.push(i);
        }
    }
    let num = |row: &[&str], i: usize| -> u64 {
        row.get(i).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    let mut by_second: HashMap<u64, [u64; 3]> = HashMap::new();
    let mut prev = [0u64; 3];
    let mut last_row: Option<&Vec<&str>> = None;
    for row in &rows {
        let Some(t) = row.get(elapsed).and_then(|v| elapsed_s(v)) else {
            continue;
        };
        let mut now = [0u64; 3];
        for (i, is_send, name) in &retrans_cols {
            if !is_send {
                continue;
            }
            let slot = match name.as_str() {
                "INVITE" => 0,
                "ACK" => 1,
                _ => 2,
            };
            now[slot] += num(row, *i);
        }
        let d = [
            now[0].saturating_sub(prev[0]),
            now[1].saturating_sub(prev[1]),
            now[2].saturating_sub(prev[2]),
        ];
        prev = now;
        let e = by_second.entry(t.round() as u64).or_default();
        for k in 0..3 {
            e[k] += d[k];
        }
        last_row = Some(row);
    }
    for r in &mut run.rows {
        if let Some(d) = by_second.get(&r.second) {
            let s = &mut r.counts.retransmissions_sent;
            s.invite = d[0];
            s.ack = d[1];
            s.bye = d[2];
        }
    }
    if let Some(row) = last_row {
        let first_sends: u64 = sent_cols.iter().map(|&i| num(row, i)).sum();
        let (mut resent, mut received_again) = (0, 0);
        for (i, is_send, _) in &retrans_cols {
            if *is_send {
                resent += num(row, *i);
            } else {
                received_again += num(row, *i);
            }
        }
        run.messages_sent = first_sends + resent;
        run.retransmissions_sent = resent;
        run.retransmissions_received = received_again;
    }
}

/// The response times (ms) of rtd 1 in a `-trace_rtt` file (`Date_ms;response_time_ms;rtd_no`).
fn parse_rtt(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(';');
            let _date = f.next()?;
            let ms: f64 = f.next()?.trim().parse().ok()?;
            let rtd = f.next()?.trim();
            (rtd == "1" || rtd.is_empty() || rtd == "rtd1").then_some(ms)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes as SIPp 3.6 writes them (columns trimmed to those read, order kept).
    const STAT: &str = "StartTime;ElapsedTime(C);OutgoingCall(C);SuccessfulCall(C);FailedCall(C);FailedMaxUDPRetrans(C);Retransmissions(C);ResponseTimeRepartition1;ResponseTimeRepartition1_<10000;ResponseTimeRepartition1_>=10000;\n\
x;00:00:00;0;0;0;0;0;;0;0;\n\
x;00:00:01;600;35;0;0;51;;148;0;\n\
x;00:00:02;1202;134;0;0;801;;292;0;\n\
x;00:00:13;7828;791;2;1;20565;;1780;47;\n";

    #[test]
    fn the_exit_row_in_the_same_second_is_added_to_that_second() {
        // SIPp's periodic row at 20.0 s and its exit row at 20.3 s round to one second.
        let stat = format!(
            "{}x;00:00:20:000000;2400;2300;0;0;10;;2300;0;\nx;00:00:20:300000;2520;2410;0;0;12;;2410;0;\n",
            STAT.lines().next().unwrap().to_owned() + "\n"
        );
        let run = parse_stat(&stat).unwrap();
        assert_eq!(run.rows.len(), 1, "one row per second: {:?}", run.rows);
        let r = &run.rows[0];
        assert_eq!(r.second, 20);
        assert_eq!(r.counts.offered, 2520);
        assert_eq!(r.counts.successful, 2410);
        assert_eq!(r.counts.retransmissions_sent.invite, 12);
    }

    #[test]
    fn stat_rows_are_per_second_differences_of_the_cumulative_counters() {
        let run = parse_stat(STAT).unwrap();
        assert_eq!(run.rows.len(), 3);
        let r = &run.rows[1];
        assert_eq!(r.second, 2);
        assert_eq!(r.counts.offered, 602);
        assert_eq!(r.counts.completed, 99);
        assert_eq!(r.counts.successful, 144, "calls set up within 10 s");
        assert_eq!(r.counts.retransmissions_sent.invite, 750);
        let last = &run.rows[2];
        assert_eq!(last.counts.failed.slow_setup, 47);
        assert_eq!(last.counts.failed.timeout, 1);
        assert_eq!(last.counts.failed.other_final, 1);
        assert!((run.duration_s - 13.0).abs() < 1e-9);
    }

    #[test]
    fn a_scenario_without_the_10_s_split_is_an_error() {
        let text = "ElapsedTime(C);OutgoingCall(C);SuccessfulCall(C);FailedCall(C);FailedMaxUDPRetrans(C);Retransmissions(C)\n00:00:01;1;1;0;0;0\n";
        assert!(parse_stat(text)
            .unwrap_err()
            .contains("ResponseTimeRepartition1"));
    }

    #[test]
    fn counts_split_retransmissions_by_message_and_total_the_sends() {
        let mut run = parse_stat(STAT).unwrap();
        let counts = "CurrentTime;ElapsedTime;0_INVITE_Sent;0_INVITE_Retrans;0_INVITE_Timeout;1_100_Recv;1_100_Retrans;3_200_Recv;3_200_Retrans;4_ACK_Sent;4_ACK_Retrans;6_BYE_Sent;6_BYE_Retrans;\n\
x;00:00:01:000000;600;40;0;500;0;35;0;35;0;35;11;\n\
x;00:00:02:001000;1202;700;0;900;2;140;30;140;30;134;31;\n";
        apply_counts(counts, &mut run);
        let r = &run.rows[1].counts.retransmissions_sent;
        assert_eq!((r.invite, r.ack, r.bye), (660, 30, 20));
        assert_eq!(run.messages_sent, 1202 + 140 + 134 + 700 + 30 + 31);
        assert_eq!(run.retransmissions_sent, 761);
        assert_eq!(run.retransmissions_received, 32);
    }

    #[test]
    fn the_last_stat_row_gives_each_counter_by_name() {
        let stats = last_row(STAT).unwrap();
        assert_eq!(stat(&stats, "OutgoingCall(C)"), 7828);
        assert_eq!(stat(&stats, "FailedMaxUDPRetrans(C)"), 1);
        assert_eq!(stat(&stats, "NoSuchColumn"), 0);
        assert!(last_row("header;only\n").is_err());
    }

    #[test]
    fn rtt_lines_give_the_setup_delays() {
        let v = parse_rtt(
            "Date_ms;response_time_ms;rtd_no\n1795333106859.1;412.5;1\n1795333106860.0;9000;1\n",
        );
        assert_eq!(v, vec![412.5, 9000.0]);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
    }
}
