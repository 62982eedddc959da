//! Byte-level grammar helpers shared by the header parsers (RFC 3261 §25.1).

/// `token` characters of RFC 3261 §25.1, as a table: the header scan tests every name byte.
static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = matches!(b,
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
            | b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~');
        i += 1;
    }
    t
};

#[inline]
pub(crate) fn is_token(b: u8) -> bool {
    TOKEN[b as usize]
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `word` that equals the byte in `pattern`'s lanes; exact for
/// the lowest such byte (borrows can only mark bytes above it), which is all callers use.
#[inline]
fn zero_lanes(word: u64, pattern: u64) -> u64 {
    let x = word ^ pattern;
    x.wrapping_sub(LO) & !x & HI
}

#[inline]
fn load(chunk: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(chunk);
    u64::from_le_bytes(word)
}

/// Position of the first `needle` in `hay`, eight bytes at a time. SIP lines are short
/// (40-80 bytes), where a SIMD search's set-up costs more than it saves; this word-at-a-time
/// search (the "has zero byte" trick) wins there and needs no unsafe code.
#[inline]
pub(crate) fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    let pattern = LO * u64::from(needle);
    let mut offset = 0;
    // Two words per step: one well-predicted branch per 16 bytes.
    let mut pairs = hay.chunks_exact(16);
    for pair in &mut pairs {
        let (lo, hi) = (
            zero_lanes(load(&pair[..8]), pattern),
            zero_lanes(load(&pair[8..]), pattern),
        );
        if lo | hi != 0 {
            return Some(if lo != 0 {
                offset + (lo.trailing_zeros() / 8) as usize
            } else {
                offset + 8 + (hi.trailing_zeros() / 8) as usize
            });
        }
        offset += 16;
    }
    let rest = pairs.remainder();
    if rest.len() >= 8 {
        let found = zero_lanes(load(&rest[..8]), pattern);
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    hay[offset..]
        .iter()
        .position(|&c| c == needle)
        .map(|p| offset + p)
}

/// Position of the first `needle`. On x86_64 this is memchr's SSE2 searcher: SSE2 is part of the
/// baseline there, so the searcher always exists and inlines into the header loop without
/// the per-call CPU-feature dispatch that made plain `memchr` lose to [`find_byte`] on
/// short lines. Elsewhere, the word-at-a-time search.
#[inline]
pub(crate) fn find_short(hay: &[u8], needle: u8) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(searcher) = memchr::arch::x86_64::sse2::memchr::One::new(needle) {
        return searcher.find(hay);
    }
    find_byte(hay, needle)
}

/// A byte search for the header scan, chosen by type so that tests can run the scan with
/// either implementation and compare.
pub(crate) trait Search {
    fn find(hay: &[u8], needle: u8) -> Option<usize>;
}

/// [`find_short`]: SSE2 on x86_64, words elsewhere.
pub(crate) struct Native;

impl Search for Native {
    #[inline]
    fn find(hay: &[u8], needle: u8) -> Option<usize> {
        find_short(hay, needle)
    }
}

/// [`find_byte`], the portable search, on every target.
#[cfg(test)]
pub(crate) struct Words;

#[cfg(test)]
impl Search for Words {
    fn find(hay: &[u8], needle: u8) -> Option<usize> {
        find_byte(hay, needle)
    }
}

/// Position of the first byte of `hay` that is any of the three needles.
#[inline]
pub(crate) fn find_any3(hay: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    // As in `find_short`: the baseline SSE2 searcher, inlined, where there is one.
    #[cfg(target_arch = "x86_64")]
    if let Some(searcher) = memchr::arch::x86_64::sse2::memchr::Three::new(a, b, c) {
        return searcher.find(hay);
    }
    find_any3_words(hay, a, b, c)
}

/// The portable word-at-a-time version of [`find_any3`].
fn find_any3_words(hay: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    let (pa, pb, pc) = (LO * u64::from(a), LO * u64::from(b), LO * u64::from(c));
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let w = load(chunk);
        // Each lane mask is exact at its own lowest match, so the lowest bit of the union is
        // the first byte matching any needle.
        let found = zero_lanes(w, pa) | zero_lanes(w, pb) | zero_lanes(w, pc);
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&x| x == a || x == b || x == c)
        .map(|p| offset + p)
}

/// Linear white space, including the CR LF of a folded line.
pub(crate) const fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_lws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|&b| !is_lws(b)).map_or(start, |p| p + 1);
    &s[start..end]
}

pub(crate) fn trim_start(s: &[u8]) -> &[u8] {
    &s[s.iter().position(|&b| !is_lws(b)).unwrap_or(s.len())..]
}

/// Whether `s` is a non-empty token. Branch-free over the bytes (one table load and an
/// `or` each): the header scan runs this on every name it does not know.
pub(crate) fn is_token_str(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().fold(0u8, |bad, &b| bad | u8::from(!is_token(b))) == 0
}

/// Length of the token at the start of `s`: eight bytes at a time while they are all token
/// characters, then byte by byte. (A Via branch is 16 or more of them.)
pub(crate) fn token_len(s: &[u8]) -> usize {
    let mut len = 0;
    for word in s.as_chunks::<8>().0 {
        if word
            .iter()
            .fold(0u8, |bad, &b| bad | u8::from(!is_token(b)))
            != 0
        {
            break;
        }
        len += 8;
    }
    len + s[len..]
        .iter()
        .position(|&b| !is_token(b))
        .unwrap_or(s.len() - len)
}

/// Parses 1*DIGIT into a u32; `None` for empty, non-digits or overflow.
pub(crate) fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    u32::try_from(n).ok()
}

/// Length of the quoted string that starts at `s[0] == b'"'`, closing quote included,
/// honouring backslash escapes (`quoted-pair`). `None` if it is not terminated.
pub(crate) fn quoted_len(s: &[u8]) -> Option<usize> {
    debug_assert_eq!(s.first(), Some(&b'"'));
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Removes the quotes and escapes of a quoted string; returns other text unchanged.
pub fn unquote(s: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if s.len() >= 2 && s[0] == b'"' && s[s.len() - 1] == b'"' {
        let inner = &s[1..s.len() - 1];
        if !inner.contains(&b'\\') {
            return std::borrow::Cow::Borrowed(inner);
        }
        let mut out = Vec::with_capacity(inner.len());
        let mut it = inner.iter();
        while let Some(&b) = it.next() {
            if b == b'\\' {
                if let Some(&next) = it.next() {
                    out.push(next);
                }
            } else {
                out.push(b);
            }
        }
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Index of the first `needle` outside quoted strings and `<...>`, or `None`.
/// Errors (as `Err(())`) on an unterminated quoted string.
pub(crate) fn find_unquoted(s: &[u8], needle: u8) -> Result<Option<usize>, ()> {
    // Jumps between the bytes that matter (SSE2 searches), as the header scan does: list
    // and parameter splitting runs on every Via, Route and name-addr a proxy reads.
    let mut i = 0;
    loop {
        let Some(j) = memchr::memchr3(needle, b'"', b'<', &s[i..]) else {
            return Ok(None);
        };
        i += j;
        match s[i] {
            b'"' if needle != b'"' => i += quoted_len(&s[i..]).ok_or(())?,
            b'<' if needle != b'<' => {
                // Inside `<>` the needle does not count; quotes still do.
                i += 1;
                loop {
                    let Some(k) = memchr::memchr2(b'>', b'"', &s[i..]) else {
                        return Ok(None);
                    };
                    i += k;
                    if s[i] == b'>' {
                        i += 1;
                        break;
                    }
                    i += quoted_len(&s[i..]).ok_or(())?;
                }
            }
            _ => return Ok(Some(i)),
        }
    }
}

/// Splits a list header's value at top-level commas (not inside quotes or `<>`).
/// Empty elements (e.g. from `a,,b`) are skipped, as RFC 3261 §7.3.1 allows.
pub(crate) fn split_list(s: &[u8]) -> ListIter<'_> {
    ListIter { rest: Some(s) }
}

pub(crate) struct ListIter<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for ListIter<'a> {
    /// An element, or on an unterminated quote the text from where the bad element starts.
    type Item = Result<&'a [u8], &'a [u8]>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.rest?;
            let (item, next) = match find_unquoted(rest, b',') {
                Err(()) => {
                    self.rest = None;
                    return Some(Err(rest));
                }
                Ok(Some(i)) => (&rest[..i], Some(&rest[i + 1..])),
                Ok(None) => (rest, None),
            };
            self.rest = next;
            let item = trim(item);
            if !item.is_empty() {
                return Some(Ok(item));
            }
        }
    }
}

/// One `;name[=value]` parameter. The value is raw: quoted strings keep their quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param<'a> {
    pub name: &'a [u8],
    pub value: Option<&'a [u8]>,
}

impl Param<'_> {
    pub fn name_str(&self) -> &str {
        std::str::from_utf8(self.name).unwrap_or("")
    }
    /// The value with quotes and escapes removed.
    pub fn unquoted(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        self.value.map(unquote)
    }
}

/// Iterates `*( SEMI name [EQUAL value] )`; `s` starts at the first `;` (or is empty).
/// Whitespace around `;` and `=` is allowed (SEMI and EQUAL include SWS). Yields `Err(())`
/// once, then stops, on malformed input. Allocation-free, so the admission path can use it.
pub(crate) fn params(s: &[u8]) -> ParamIter<'_> {
    ParamIter { rest: s }
}

pub(crate) struct ParamIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ParamIter<'a> {
    type Item = Result<Param<'a>, ()>;
    fn next(&mut self) -> Option<Self::Item> {
        let s = trim_start(self.rest);
        if s.is_empty() {
            return None;
        }
        if let Ok((param, rest)) = next_param(s) {
            self.rest = rest;
            Some(Ok(param))
        } else {
            self.rest = &[];
            Some(Err(()))
        }
    }
}

fn next_param(s: &[u8]) -> Result<(Param<'_>, &[u8]), ()> {
    if s[0] != b';' {
        return Err(());
    }
    let s = trim_start(&s[1..]);
    let name_end = s.iter().position(|&b| !is_param_char(b)).unwrap_or(s.len());
    if name_end == 0 {
        return Err(());
    }
    let name = &s[..name_end];
    let after_name = trim_start(&s[name_end..]);
    if after_name.first() != Some(&b'=') {
        return Ok((Param { name, value: None }, &s[name_end..]));
    }
    let v = trim_start(&after_name[1..]);
    let len = match v.first() {
        Some(b'"') => quoted_len(v).ok_or(())?,
        // An IPv6 reference, e.g. `received=[2001:db8::9:1]` (RFC 5118 §4.5).
        Some(b'[') => v.iter().position(|&b| b == b']').ok_or(())? + 1,
        _ => v.iter().position(|&b| !is_param_char(b)).unwrap_or(v.len()),
    };
    if len == 0 {
        return Err(());
    }
    Ok((
        Param {
            name,
            value: Some(&v[..len]),
        },
        &v[len..],
    ))
}

/// A header's or URI's parameters: the checked text, read again on each lookup. Most
/// parses are validations that never look a parameter up, and a lookup walks a few dozen
/// bytes, so keeping the text is cheaper than collecting every parameter (and keeps the
/// `Via` and `Uri` that hold it small to move).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params<'a> {
    raw: &'a [u8],
}

impl<'a> Params<'a> {
    /// The parameters in order.
    pub fn iter(&self) -> impl Iterator<Item = Param<'a>> + 'a {
        // Checked when parsed, so no element is an error.
        params(self.raw).map_while(Result::ok)
    }

    /// The first parameter named `name` (case-insensitive): `None` if absent, `Some(None)`
    /// if present without a value.
    pub fn get(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|p| p.value)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        trim_start(self.raw).is_empty()
    }

    /// The parameters as written, from the first `;` on.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }
}

/// Checks `*( SEMI name [EQUAL value] )`, failing on the first malformed parameter.
pub(crate) fn parse_params(s: &[u8]) -> Result<Params<'_>, ()> {
    parse_params_where(s, |_| true)
}

/// As [`parse_params`], also failing on a parameter `ok` refuses (in the same pass).
pub(crate) fn parse_params_where<'a>(
    s: &'a [u8],
    ok: impl Fn(&Param<'a>) -> bool,
) -> Result<Params<'a>, ()> {
    for p in params(s) {
        if !ok(&p?) {
            return Err(());
        }
    }
    Ok(Params { raw: s })
}

/// Characters of a parameter name or unquoted value: token, plus what hosts, IPv6 addresses
/// and URI parameters (`paramchar` with escapes, `[]/:&+$`) bring.
fn is_param_char(b: u8) -> bool {
    is_token(b) || matches!(b, b':' | b'[' | b']' | b'/' | b'&' | b'$' | b'@' | b'?')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The byte-by-byte definition `find_unquoted` must agree with.
    fn find_unquoted_reference(s: &[u8], needle: u8) -> Result<Option<usize>, ()> {
        let mut i = 0;
        let mut in_angle = false;
        while i < s.len() {
            let b = s[i];
            if b == b'"' {
                i += quoted_len(&s[i..]).ok_or(())?;
                continue;
            }
            if b == b'<' {
                in_angle = true;
            } else if b == b'>' {
                in_angle = false;
            } else if b == needle && !in_angle {
                return Ok(Some(i));
            }
            i += 1;
        }
        Ok(None)
    }

    proptest! {
        #[test]
        fn find_unquoted_agrees_with_its_definition(
            s in proptest::collection::vec(prop::sample::select(b"ab,;<>\"\\ ".to_vec()), 0..40),
            needle in prop::sample::select(vec![b',', b';', 0u8]),
        ) {
            prop_assert_eq!(find_unquoted(&s, needle), find_unquoted_reference(&s, needle));
        }
    }

    #[test]
    fn list_split_respects_quotes_and_angles() {
        let items: Vec<_> = split_list(br#""a,b" <sip:x;p=1,2>, <sip:y> ,, z"#)
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            items,
            vec![&br#""a,b" <sip:x;p=1,2>"#[..], b"<sip:y>", b"z"]
        );
        assert!(split_list(br#""open, <x>"#).any(|r| r.is_err()));
    }

    #[test]
    fn params_allow_whitespace_and_quoted_values() {
        let p = parse_params(br#" ; branch = z9hG4bK1 ;rport; oc-algo="loss,A" ;received=[::1]"#)
            .unwrap();
        assert_eq!(p.len(), 4);
        let p: Vec<Param<'_>> = p.iter().collect();
        assert_eq!(p[0].name, b"branch");
        assert_eq!(p[0].value, Some(&b"z9hG4bK1"[..]));
        assert_eq!(p[1].value, None);
        assert_eq!(&*p[2].unquoted().unwrap(), b"loss,A");
        assert_eq!(p[3].value, Some(&b"[::1]"[..]));
    }

    #[test]
    fn find_byte_finds_the_first_match_at_every_position() {
        for len in 0..40 {
            for at in 0..=len {
                let mut hay = vec![b'a'; len];
                if at < len {
                    hay[at] = b'\n';
                    // A second match later must not hide the first.
                    if at + 3 < len {
                        hay[at + 3] = b'\n';
                    }
                }
                let want = hay.iter().position(|&c| c == b'\n');
                assert_eq!(find_byte(&hay, b'\n'), want, "len {len} at {at}");
                assert_eq!(find_short(&hay, b'\n'), want, "len {len} at {at}");
            }
        }
        assert_eq!(find_byte(&[0x0b, 0x0a], b'\n'), Some(1));
        assert_eq!(
            find_byte(&[0x8a, 0x0a, 0, 0, 0, 0, 0, 0, 0x0a], b'\n'),
            Some(1)
        );
    }

    #[test]
    fn find_any3_finds_the_first_of_several() {
        for len in 0..30 {
            for at in 0..len {
                for needle in [b';', b',', b'"'] {
                    let mut hay = vec![b'x'; len];
                    hay[at] = needle;
                    if at + 1 < len {
                        hay[at + 1] = b';';
                    }
                    assert_eq!(find_any3(&hay, b';', b',', b'"'), Some(at));
                    assert_eq!(find_any3_words(&hay, b';', b',', b'"'), Some(at));
                }
            }
            assert_eq!(find_any3(&vec![b'x'; len], b';', b',', b'"'), None);
            assert_eq!(find_any3_words(&vec![b'x'; len], b';', b',', b'"'), None);
        }
    }

    #[test]
    fn token_len_stops_at_the_first_non_token_byte() {
        for len in 0..30 {
            for stop in [b';', b' ', b'\r', b'"', 0x80] {
                let mut s = vec![b'a'; len];
                s.push(stop);
                s.extend_from_slice(b"bcd");
                assert_eq!(token_len(&s), len, "{len} then {stop}");
            }
            assert_eq!(token_len(&vec![b'z'; len]), len);
        }
    }

    #[test]
    fn unquote_handles_escapes() {
        assert_eq!(&*unquote(br#""a\"b\\c""#), br#"a"b\c"#);
        assert_eq!(&*unquote(b"plain"), b"plain");
    }

    #[test]
    fn numbers_reject_overflow_and_non_digits() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b"12a"), None);
        assert_eq!(parse_u32(b""), None);
    }
}
