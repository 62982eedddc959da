//! `sluice sip parse`: parse one message and print a JSON summary, for debugging traces and
//! for checking the codec from outside.

use std::io::Read;
use std::path::PathBuf;

use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_sip::{Limits, Message, Oc};

#[derive(Subcommand, Debug)]
pub enum SipCommand {
    /// Parse one SIP message and print a JSON summary; exit 1 with the error's position if it is malformed.
    Parse(ParseArgs),
}

#[derive(Args, Debug)]
pub struct ParseArgs {
    /// File holding one message, or `-` (the default) for standard input.
    #[arg(default_value = "-")]
    file: PathBuf,
    /// Only the admission scan (what a proxy does before deciding to admit), without full validation.
    #[arg(long)]
    admission_only: bool,
    /// Treat the input as received over a stream transport (64 KiB limit, Content-Length required).
    #[arg(long)]
    stream: bool,
}

pub fn run(command: SipCommand) -> Result<(), String> {
    match command {
        SipCommand::Parse(args) => parse(&args),
    }
}

#[derive(Serialize)]
struct Summary {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_uri: Option<String>,
    call_id: Option<String>,
    cseq: Option<CSeqSummary>,
    max_forwards: Option<u32>,
    content_length: Option<u32>,
    body_length: usize,
    header_count: usize,
    top_via: Option<ViaSummary>,
    validated: bool,
}

#[derive(Serialize)]
struct CSeqSummary {
    seq: u32,
    method: String,
}

#[derive(Serialize)]
struct ViaSummary {
    transport: String,
    host: String,
    port: Option<u16>,
    branch: Option<String>,
    received: Option<String>,
    /// `null` when absent, `"requested"` when present without a value, else the port.
    rport: Option<serde_json::Value>,
    /// `null` when absent, `"supported"` when present without a value, else the number.
    oc: Option<serde_json::Value>,
    oc_algo: Vec<String>,
    oc_validity: Option<u32>,
    oc_seq: Option<String>,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn parse(args: &ParseArgs) -> Result<(), String> {
    let mut input = Vec::new();
    if args.file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut input)
            .map_err(|e| format!("reading standard input: {e}"))?;
    } else {
        input = std::fs::read(&args.file)
            .map_err(|e| format!("reading {}: {e}", args.file.display()))?;
    }
    let input = Bytes::from(input);
    let limits = if args.stream {
        Limits::STREAM
    } else {
        Limits::DATAGRAM
    };
    let located = |e: sluice_sip::ParseError| {
        let (line, col) = e.line_col(&input);
        format!("{} (line {line}, column {col}, byte {})", e.kind, e.offset)
    };
    if args.stream {
        let mut framer = sluice_sip::StreamFramer::new(limits.max_message_size);
        framer.push(&input);
        if framer.next_message().map_err(located)?.is_none() {
            return Err("incomplete message on a stream: more bytes needed".into());
        }
    }
    let msg = Message::parse_with(input.clone(), &limits).map_err(located)?;
    if !args.admission_only {
        msg.validate().map_err(located)?;
    }
    let top_via = match msg.top_via() {
        Ok(via) => Some(ViaSummary {
            transport: text(via.transport),
            host: via.host.to_string(),
            port: via.port,
            branch: via.branch().map(text),
            received: via.received().map(text),
            rport: via.rport().map(|p| match p {
                None => serde_json::Value::from("requested"),
                Some(port) => serde_json::Value::from(port),
            }),
            oc: via.oc().ok().flatten().map(|oc| match oc {
                Oc::Supported => serde_json::Value::from("supported"),
                Oc::Value(n) => serde_json::Value::from(n),
            }),
            oc_algo: via.oc_algo(),
            oc_validity: via.oc_validity().ok().flatten(),
            oc_seq: via.oc_seq().ok().flatten().map(|s| s.to_string()),
        }),
        Err(_) => None,
    };
    let summary = Summary {
        kind: if msg.is_request() {
            "request"
        } else {
            "response"
        },
        method: msg.method().map(|m| m.as_str().to_owned()),
        status: msg.status(),
        reason: msg.reason().map(text),
        request_uri: msg.request_uri_raw().map(text),
        call_id: msg.call_id().map(text),
        cseq: msg.cseq().map(|c| CSeqSummary {
            seq: c.seq,
            method: c.method.as_str().to_owned(),
        }),
        max_forwards: msg.max_forwards(),
        content_length: msg.content_length(),
        body_length: msg.body().len(),
        header_count: msg.header_count(),
        top_via,
        validated: !args.admission_only,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
    );
    Ok(())
}
