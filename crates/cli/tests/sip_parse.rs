//! `sluice sip parse` checked from outside, as a user runs it.

use std::io::Write;
use std::process::{Command, Stdio};

fn sluice(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn bundled_example_prints_a_json_summary() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/invite.sip");
    let (code, stdout, _) = sluice(&["sip", "parse", example], b"");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["kind"], "request");
    assert_eq!(v["method"], "INVITE");
    assert_eq!(v["cseq"]["seq"], 314_159);
    assert_eq!(v["top_via"]["branch"], "z9hG4bK776asdhds");
    assert_eq!(v["top_via"]["oc"], "supported");
    assert_eq!(v["top_via"]["oc_algo"], serde_json::json!(["loss", "rate"]));
    assert_eq!(v["header_count"], 9);
}

#[test]
fn responses_report_status_and_oc_feedback() {
    let resp = b"SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1;oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1282321615.782\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    let (code, stdout, _) = sluice(&["sip", "parse", "-"], resp);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], 180);
    assert_eq!(v["top_via"]["oc"], 20);
    assert_eq!(v["top_via"]["oc_validity"], 500);
    assert_eq!(v["top_via"]["oc_seq"], "1282321615.782");
}

#[test]
fn malformed_input_gives_one_line_with_position_and_exit_1() {
    let (code, stdout, stderr) = sluice(
        &["sip", "parse"],
        b"INVITE sip:x SIP/2.0\r\nCSeq: x INVITE\r\n\r\n",
    );
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert_eq!(
        stderr,
        "error: malformed number in CSeq (line 2, column 7, byte 28)\n"
    );
}

#[test]
fn validation_catches_what_the_admission_scan_leaves() {
    let mismatch = b"INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>\r\nCall-ID: c\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";
    let (code, _, stderr) = sluice(&["sip", "parse"], mismatch);
    assert_eq!(code, 1);
    assert!(stderr.contains("CSeq method differs"), "{stderr}");
    let (code, _, _) = sluice(&["sip", "parse", "--admission-only"], mismatch);
    assert_eq!(code, 0);
}

#[test]
fn version_and_help() {
    let (code, stdout, _) = sluice(&["--version"], b"");
    assert_eq!(code, 0);
    assert!(stdout.starts_with("sluice "));
    let (code, stdout, _) = sluice(&["--help"], b"");
    assert_eq!(code, 0);
    assert!(stdout.contains("sip"));
}
