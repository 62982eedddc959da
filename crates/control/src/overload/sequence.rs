//! `oc-seq` values (RFC 7339 §4 grammar `1*12DIGIT "." 1*5DIGIT`, §5.2 use): a client
//! applies only parameters newer than the last it applied, comparing the values as
//! decimal numbers, so `1.10` is older than `1.9`.

use std::fmt;

/// An `oc-seq` as a decimal number; the derived order compares the integer part, then
/// the fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OcSequence {
    pub integer: u64,
    /// The fraction in millionths (the grammar allows five digits; a sixth is kept too).
    pub micros: u32,
}

/// The largest integer part the grammar allows (12 digits).
const MAX_INTEGER: u64 = 999_999_999_999;

impl OcSequence {
    /// Parses `digits.digits`; anything else is `None`.
    pub fn parse(text: &str) -> Option<OcSequence> {
        let (int, frac) = text.trim().split_once('.')?;
        if int.is_empty()
            || frac.is_empty()
            || int.len() > 12
            || frac.len() > 6
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let scale = 10u32.pow(6 - u32::try_from(frac.len()).ok()?);
        Some(OcSequence {
            integer: int.parse().ok()?,
            micros: frac.parse::<u32>().ok()? * scale,
        })
    }

    /// The next value after `self` in steps of the fifth fraction digit, carrying into
    /// the integer part (saturating at the grammar's largest value).
    pub(crate) fn successor(self) -> OcSequence {
        let tick = self.micros / 10 + 1;
        if tick < 100_000 {
            OcSequence {
                integer: self.integer,
                micros: tick * 10,
            }
        } else {
            OcSequence {
                integer: (self.integer + 1).min(MAX_INTEGER),
                micros: 0,
            }
        }
    }

    pub(crate) fn whole(seconds: u64) -> OcSequence {
        OcSequence {
            integer: seconds.min(MAX_INTEGER),
            micros: 0,
        }
    }
}

/// Always five fraction digits (six if the sixth is set), so the text compares as the
/// number does.
impl fmt::Display for OcSequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.micros.is_multiple_of(10) {
            write!(f, "{}.{:05}", self.integer, self.micros / 10)
        } else {
            write!(f, "{}.{:06}", self.integer, self.micros)
        }
    }
}
