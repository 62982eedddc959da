//! Header names: the ones a proxy acts on get an id, compact forms included (RFC 3261 §7.3.3),
//! so lookups compare a byte rather than a case-insensitive string.

/// A header field name. `Other` is any name sluice does not act on; its text stays in the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HeaderName {
    // The admission headers come first (see `is_admission`).
    Via,
    CallId,
    CSeq,
    MaxForwards,
    ContentLength,
    From,
    To,
    Contact,
    ContentType,
    Route,
    RecordRoute,
    RetryAfter,
    Supported,
    Subject,
    ContentEncoding,
    Timestamp,
    Require,
    ProxyRequire,
    Unsupported,
    ResourcePriority,
    Allow,
    Expires,
    Other,
}

impl HeaderName {
    /// The canonical spelling, used when sluice writes the header itself.
    pub const fn as_str(self) -> &'static str {
        match self {
            HeaderName::Via => "Via",
            HeaderName::CallId => "Call-ID",
            HeaderName::CSeq => "CSeq",
            HeaderName::MaxForwards => "Max-Forwards",
            HeaderName::ContentLength => "Content-Length",
            HeaderName::From => "From",
            HeaderName::To => "To",
            HeaderName::Contact => "Contact",
            HeaderName::ContentType => "Content-Type",
            HeaderName::Route => "Route",
            HeaderName::RecordRoute => "Record-Route",
            HeaderName::RetryAfter => "Retry-After",
            HeaderName::Supported => "Supported",
            HeaderName::Subject => "Subject",
            HeaderName::ContentEncoding => "Content-Encoding",
            HeaderName::Timestamp => "Timestamp",
            HeaderName::Require => "Require",
            HeaderName::ProxyRequire => "Proxy-Require",
            HeaderName::Unsupported => "Unsupported",
            HeaderName::ResourcePriority => "Resource-Priority",
            HeaderName::Allow => "Allow",
            HeaderName::Expires => "Expires",
            HeaderName::Other => "",
        }
    }

    /// Classifies a raw header name, case-insensitively, accepting compact forms.
    pub fn from_bytes(name: &[u8]) -> HeaderName {
        HeaderName::from_name_in(name, 0, name.len())
    }

    /// Classifies `buf[start..end]`. The buffer around the name lets short names be compared
    /// as one masked word loaded from the buffer (a header name is always followed by at
    /// least its colon and CRLF), which is what makes classifying every header of every
    /// message cheap. Falls back to the byte-wise comparison near the end of the buffer.
    #[allow(clippy::inline_always)] // measured: called once per header line, and not inlined otherwise.
    #[inline(always)]
    pub(crate) fn from_name_in(buf: &[u8], start: usize, end: usize) -> HeaderName {
        let name = &buf[start..end];
        let candidate = HeaderName::candidate(name);
        // A compact form is its own spelling: `candidate` already compared its one letter.
        if candidate == HeaderName::Other || name.len() == 1 {
            return candidate;
        }
        let index = candidate as usize;
        // Only the bits in the KEEP masks must match: all of them, except the case bit of
        // letters. That is exact (a letter with its case bit flipped is the same letter in
        // the other case; `-` must match exactly, so CR, which folding would map onto it,
        // does not), so a match also proves the name a token.
        let matched = if name.len() < 8 {
            match buf.get(start..start + 8) {
                // The bytes after the name fall in lanes the mask clears.
                Some(window) => (load_word(window) ^ FIRST_WORDS[index]) & FIRST_KEEP[index] == 0,
                None => eq_fold(name, candidate.lowercase()),
            }
        } else if name.len() <= 16 {
            // Two words, the second overlapping the first when the name is shorter than 16.
            let first = load_word(&name[..8]);
            let last = load_word(&name[name.len() - 8..]);
            ((first ^ FIRST_WORDS[index]) & FIRST_KEEP[index])
                | ((last ^ LAST_WORDS[index]) & LAST_KEEP[index])
                == 0
        } else {
            eq_fold(name, candidate.lowercase())
        };
        if matched {
            candidate
        } else {
            HeaderName::Other
        }
    }

    /// The only known name `name` can be, from its length and first letter; `Other` if none.
    /// Compact forms are settled here (a one-letter name is its own spelling, up to case).
    #[inline]
    fn candidate(name: &[u8]) -> HeaderName {
        let Some(&first) = name.first() else {
            return HeaderName::Other;
        };
        let first = first | 0x20;
        if name.len() > LONGEST || !first.is_ascii_lowercase() {
            return HeaderName::Other;
        }
        match CANDIDATES[name.len()][usize::from(first - b'a')] {
            // Call-ID and Contact share length and first letter; the second letter decides.
            HeaderName::Contact if name.len() == 7 && name[1] | 0x20 == b'a' => HeaderName::CallId,
            candidate => candidate,
        }
    }

    /// The canonical name in lower case, for case-folding comparisons.
    const fn lowercase(self) -> &'static [u8] {
        match self {
            HeaderName::Via => b"via",
            HeaderName::CallId => b"call-id",
            HeaderName::CSeq => b"cseq",
            HeaderName::MaxForwards => b"max-forwards",
            HeaderName::ContentLength => b"content-length",
            HeaderName::From => b"from",
            HeaderName::To => b"to",
            HeaderName::Contact => b"contact",
            HeaderName::ContentType => b"content-type",
            HeaderName::Route => b"route",
            HeaderName::RecordRoute => b"record-route",
            HeaderName::RetryAfter => b"retry-after",
            HeaderName::Supported => b"supported",
            HeaderName::Subject => b"subject",
            HeaderName::ContentEncoding => b"content-encoding",
            HeaderName::Timestamp => b"timestamp",
            HeaderName::Require => b"require",
            HeaderName::ProxyRequire => b"proxy-require",
            HeaderName::Unsupported => b"unsupported",
            HeaderName::ResourcePriority => b"resource-priority",
            HeaderName::Allow => b"allow",
            HeaderName::Expires => b"expires",
            HeaderName::Other => b"",
        }
    }

    /// The headers the admission scan parses as it locates them. They are the first variants,
    /// so this is one comparison.
    #[inline]
    pub(crate) const fn is_admission(self) -> bool {
        self as u8 <= HeaderName::ContentLength as u8
    }

    /// Headers whose value is a comma-separated list that may be split over several lines
    /// (RFC 3261 §7.3.1). Only for these may a value be split at commas.
    pub const fn is_list(self) -> bool {
        matches!(
            self,
            HeaderName::Via
                | HeaderName::Route
                | HeaderName::RecordRoute
                | HeaderName::Contact
                | HeaderName::Supported
                | HeaderName::Require
                | HeaderName::ProxyRequire
                | HeaderName::Unsupported
                | HeaderName::Allow
                | HeaderName::ContentEncoding
                | HeaderName::ResourcePriority
        )
    }
}

/// Number of [`HeaderName`] variants, `Other` included.
const NAMES: usize = HeaderName::Other as usize + 1;

/// Every variant, in declaration order (indexes the word tables below).
const ALL: [HeaderName; NAMES] = [
    HeaderName::Via,
    HeaderName::CallId,
    HeaderName::CSeq,
    HeaderName::MaxForwards,
    HeaderName::ContentLength,
    HeaderName::From,
    HeaderName::To,
    HeaderName::Contact,
    HeaderName::ContentType,
    HeaderName::Route,
    HeaderName::RecordRoute,
    HeaderName::RetryAfter,
    HeaderName::Supported,
    HeaderName::Subject,
    HeaderName::ContentEncoding,
    HeaderName::Timestamp,
    HeaderName::Require,
    HeaderName::ProxyRequire,
    HeaderName::Unsupported,
    HeaderName::ResourcePriority,
    HeaderName::Allow,
    HeaderName::Expires,
    HeaderName::Other,
];

/// The longest known name (Resource-Priority).
const LONGEST: usize = 17;

/// The candidate name by length and folded first letter: one load instead of a chain of
/// comparisons for every header of every message.
static CANDIDATES: [[HeaderName; 26]; LONGEST + 1] = {
    let mut t = [[HeaderName::Other; 26]; LONGEST + 1];
    let mut i = 0;
    while i < NAMES - 1 {
        let lower = ALL[i].lowercase();
        // Call-ID is found through Contact's slot (same length and first letter).
        if !matches!(ALL[i], HeaderName::CallId) {
            t[lower.len()][(lower[0] - b'a') as usize] = ALL[i];
        }
        i += 1;
    }
    // Compact forms (RFC 3261 §7.3.3 and extensions).
    let compact = [
        (b'v', HeaderName::Via),
        (b'i', HeaderName::CallId),
        (b'l', HeaderName::ContentLength),
        (b'f', HeaderName::From),
        (b't', HeaderName::To),
        (b'm', HeaderName::Contact),
        (b'c', HeaderName::ContentType),
        (b'k', HeaderName::Supported),
        (b's', HeaderName::Subject),
        (b'e', HeaderName::ContentEncoding),
    ];
    let mut j = 0;
    while j < compact.len() {
        t[1][(compact[j].0 - b'a') as usize] = compact[j].1;
        j += 1;
    }
    t
};

/// Little-endian word of up to eight bytes of `s` from `at`, zero-padded past its end.
const fn const_word(s: &[u8], at: usize) -> u64 {
    let mut w = 0u64;
    let mut i = 0;
    while i < 8 {
        if at + i < s.len() {
            w |= (s[at + i] as u64) << (8 * i);
        }
        i += 1;
    }
    w
}

/// The first eight bytes of each long name in lower case, zero-padded (names under eight
/// bytes compare masked to their length).
static FIRST_WORDS: [u64; NAMES] = {
    let mut t = [0u64; NAMES];
    let mut i = 0;
    while i < NAMES {
        t[i] = const_word(ALL[i].lowercase(), 0);
        i += 1;
    }
    t
};

/// The last eight bytes of each long name of eight bytes or more, in lower case.
static LAST_WORDS: [u64; NAMES] = {
    let mut t = [0u64; NAMES];
    let mut i = 0;
    while i < NAMES {
        let lower = ALL[i].lowercase();
        if lower.len() >= 8 {
            t[i] = const_word(lower, lower.len() - 8);
        }
        i += 1;
    }
    t
};

/// The bits of a name's word that must equal the lower-case spelling: all but the case bit
/// (0x20) of each letter; none in lanes past the name's end.
const fn keep_mask(s: &[u8], at: usize) -> u64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < 8 {
        if at + i < s.len() {
            let lane: u64 = if s[at + i].is_ascii_lowercase() {
                0xdf
            } else {
                0xff
            };
            m |= lane << (8 * i);
        }
        i += 1;
    }
    m
}

/// [`keep_mask`] of each name's first word.
static FIRST_KEEP: [u64; NAMES] = {
    let mut t = [0u64; NAMES];
    let mut i = 0;
    while i < NAMES {
        t[i] = keep_mask(ALL[i].lowercase(), 0);
        i += 1;
    }
    t
};

/// [`keep_mask`] of each long name's last word (names of eight bytes or more).
static LAST_KEEP: [u64; NAMES] = {
    let mut t = [0u64; NAMES];
    let mut i = 0;
    while i < NAMES {
        let lower = ALL[i].lowercase();
        if lower.len() >= 8 {
            t[i] = keep_mask(lower, lower.len() - 8);
        }
        i += 1;
    }
    t
};

#[inline]
fn load_word(s: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[..8]);
    u64::from_le_bytes(w)
}

/// Exact case-insensitive equality against a lower-case name made of letters and `-`.
/// Setting bit 0x20 folds ASCII letters; the one other byte it maps into such a name is CR
/// (onto `-`), which is excluded explicitly. A match therefore also proves `name` a token.
/// Names of eight bytes or more are compared a word at a time, the last word overlapping.
fn eq_fold(name: &[u8], lower: &[u8]) -> bool {
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name
            .iter()
            .zip(lower)
            .all(|(&a, &b)| (a | 0x20) == b && a != b'\r');
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let last = name.len() - 8;
    let mut at = 0;
    loop {
        let w = word(name, at);
        let cr = w ^ 0x0d0d_0d0d_0d0d_0d0d;
        let has_cr = cr.wrapping_sub(0x0101_0101_0101_0101) & !cr & 0x8080_8080_8080_8080;
        if (w | 0x2020_2020_2020_2020) != word(lower, at) || has_cr != 0 {
            return false;
        }
        if at == last {
            return true;
        }
        at = (at + 8).min(last);
    }
}

#[cfg(test)]
mod tests {
    use super::{HeaderName, ALL};

    #[test]
    fn every_known_name_classifies_in_any_case_and_position() {
        for &id in &ALL[..ALL.len() - 1] {
            let lower = id.as_str().to_ascii_lowercase();
            for spelling in [
                id.as_str().to_string(),
                lower.clone(),
                lower.to_ascii_uppercase(),
            ] {
                // Alone (no bytes after the name), and followed by a colon and a value as
                // in a message (the word-at-a-time path).
                assert_eq!(
                    HeaderName::from_bytes(spelling.as_bytes()),
                    id,
                    "{spelling}"
                );
                let line = format!("{spelling}: x\r\n");
                let got = HeaderName::from_name_in(line.as_bytes(), 0, spelling.len());
                assert_eq!(got, id, "{spelling} in a line");
                // One byte short, one byte different, or a CR in place of a hyphen: not it.
                // ("T" is To's compact form, so To is not shortened.)
                if spelling.len() > 2 {
                    let short = spelling.len() - 1;
                    assert_ne!(HeaderName::from_name_in(line.as_bytes(), 0, short), id);
                }
                let mut changed = line.clone().into_bytes();
                changed[spelling.len() - 1] ^= 0x01;
                assert_ne!(HeaderName::from_name_in(&changed, 0, spelling.len()), id);
                if let Some(h) = spelling.find('-') {
                    let mut cr = line.clone().into_bytes();
                    cr[h] = b'\r';
                    assert_eq!(
                        HeaderName::from_name_in(&cr, 0, spelling.len()),
                        HeaderName::Other
                    );
                }
            }
        }
    }

    #[test]
    fn a_name_matches_only_with_the_case_of_its_letters_changed() {
        // Every byte of every long name, replaced by every other byte: only the same letter
        // in the other case still matches (the keep masks ignore nothing else).
        for &id in &ALL[..ALL.len() - 1] {
            let spelling = id.as_str();
            for at in 0..spelling.len() {
                for byte in 0..=255u8 {
                    let mut line = format!("{spelling}: x\r\n").into_bytes();
                    let original = line[at];
                    line[at] = byte;
                    let same = byte.eq_ignore_ascii_case(&original);
                    let got = HeaderName::from_name_in(&line, 0, spelling.len());
                    assert_eq!(got == id, same, "{spelling} with {byte:#04x} at {at}");
                    // Alone in its buffer: the byte-wise comparison near the buffer's end.
                    let alone = HeaderName::from_bytes(&line[..spelling.len()]);
                    assert_eq!(alone == id, same, "{spelling} alone, {byte:#04x} at {at}");
                }
            }
        }
    }

    #[test]
    fn names_are_case_insensitive_and_compact_forms_map() {
        for (raw, id) in [
            ("v", HeaderName::Via),
            ("VIA", HeaderName::Via),
            ("i", HeaderName::CallId),
            ("call-id", HeaderName::CallId),
            ("m", HeaderName::Contact),
            ("f", HeaderName::From),
            ("T", HeaderName::To),
            ("l", HeaderName::ContentLength),
            ("c", HeaderName::ContentType),
            ("k", HeaderName::Supported),
            ("s", HeaderName::Subject),
            ("e", HeaderName::ContentEncoding),
            ("max-FORWARDS", HeaderName::MaxForwards),
            ("x-custom", HeaderName::Other),
            ("Call\rID", HeaderName::Other),
            ("Content-Lengtx", HeaderName::Other),
            ("CONTENT-LENGTH", HeaderName::ContentLength),
            ("Resource-Priority", HeaderName::ResourcePriority),
        ] {
            assert_eq!(HeaderName::from_bytes(raw.as_bytes()), id, "{raw}");
        }
    }
}
