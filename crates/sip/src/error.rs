//! Typed parse errors. Every error names what was wrong and the byte offset where it was found,
//! so a proxy can count it, answer 400 with a useful reason, and an operator can find it in a trace.

use std::fmt;

/// What was wrong with the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Nothing but whitespace.
    Empty,
    /// The message is larger than the configured limit.
    MessageTooLarge { size: usize, limit: usize },
    /// More header fields than the configured limit.
    TooManyHeaders { limit: usize },
    /// A line (start line or one physical header line) longer than the configured limit.
    LineTooLong { limit: usize },
    /// The input ends before the empty line that closes the header section.
    Truncated,
    /// The start line is neither `Method SP Request-URI SP SIP-Version` nor a status line.
    BadStartLine,
    /// A SIP version other than 2.0 (a server answers 505).
    UnsupportedVersion,
    /// A method that is not a token.
    BadMethod,
    /// A status code that is not three digits in 100..=699.
    BadStatusCode,
    /// A header name that is not a token, or a line without a colon.
    BadHeaderName,
    /// A header value that does not follow its grammar.
    BadHeaderValue { header: &'static str },
    /// A number that is not digits or does not fit its type.
    BadNumber { header: &'static str },
    /// A header that may appear once appears with different values.
    ConflictingHeader { header: &'static str },
    /// A mandatory header is absent.
    MissingHeader { header: &'static str },
    /// Content-Length declares more bytes than the message carries.
    BodyTooShort { declared: usize, available: usize },
    /// The request method differs from the CSeq method.
    CSeqMethodMismatch,
    /// A URI that does not follow RFC 3261 §19.1 / RFC 5118.
    BadUri,
    /// A quoted string without its closing quote.
    UnterminatedQuote,
    /// Over a stream transport every message needs Content-Length (RFC 3261 §18.3).
    MissingContentLength,
    /// Text that must be UTF-8 is not.
    BadUtf8,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Empty => write!(f, "empty message"),
            ErrorKind::MessageTooLarge { size, limit } => {
                write!(f, "message of {size} bytes exceeds the limit of {limit}")
            }
            ErrorKind::TooManyHeaders { limit } => write!(f, "more than {limit} header fields"),
            ErrorKind::LineTooLong { limit } => write!(f, "line longer than {limit} bytes"),
            ErrorKind::Truncated => write!(f, "header section not terminated by an empty line"),
            ErrorKind::BadStartLine => write!(f, "malformed start line"),
            ErrorKind::UnsupportedVersion => write!(f, "unsupported SIP version"),
            ErrorKind::BadMethod => write!(f, "malformed method"),
            ErrorKind::BadStatusCode => write!(f, "malformed status code"),
            ErrorKind::BadHeaderName => write!(f, "malformed header name"),
            ErrorKind::BadHeaderValue { header } => write!(f, "malformed {header} value"),
            ErrorKind::BadNumber { header } => write!(f, "malformed number in {header}"),
            ErrorKind::ConflictingHeader { header } => {
                write!(f, "{header} appears more than once with different values")
            }
            ErrorKind::MissingHeader { header } => write!(f, "missing mandatory header {header}"),
            ErrorKind::BodyTooShort {
                declared,
                available,
            } => write!(
                f,
                "Content-Length {declared} exceeds the {available} body bytes present"
            ),
            ErrorKind::CSeqMethodMismatch => write!(f, "CSeq method differs from request method"),
            ErrorKind::BadUri => write!(f, "malformed URI"),
            ErrorKind::UnterminatedQuote => write!(f, "unterminated quoted string"),
            ErrorKind::MissingContentLength => {
                write!(f, "Content-Length is required on stream transports")
            }
            ErrorKind::BadUtf8 => write!(f, "invalid UTF-8"),
        }
    }
}

/// A parse failure: what was wrong, and the byte offset in the input where it was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct ParseError {
    pub kind: ErrorKind,
    pub offset: usize,
}

impl ParseError {
    pub(crate) fn new(kind: ErrorKind, offset: usize) -> ParseError {
        ParseError { kind, offset }
    }

    /// One-based line and column of the error in `input`, for messages aimed at people.
    pub fn line_col(&self, input: &[u8]) -> (usize, usize) {
        let upto = &input[..self.offset.min(input.len())];
        let line = memchr::memchr_iter(b'\n', upto).count() + 1;
        let col = upto.len() - memchr::memrchr(b'\n', upto).map_or(0, |p| p + 1) + 1;
        (line, col)
    }
}

pub type Result<T> = std::result::Result<T, ParseError>;
