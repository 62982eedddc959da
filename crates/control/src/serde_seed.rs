//! Seeds are any `u64`, but TOML integers are signed 64-bit, so a seed of 2^63 or more
//! cannot be written as a TOML integer. Such seeds are written as a string of decimal
//! digits (`seed = "18446744073709551615"`); smaller ones stay integers, so files and
//! outputs with ordinary seeds are unchanged. Either form is read back.

use serde::de::{self, Unexpected, Visitor};
use serde::{Deserializer, Serializer};
use std::fmt;

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `with` hands us `&u64`
pub fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
    match i64::try_from(*seed) {
        Ok(small) => s.serialize_i64(small),
        Err(_) => s.serialize_str(&seed.to_string()),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(SeedVisitor)
}

struct SeedVisitor;

impl Visitor<'_> for SeedVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a seed, an integer from 0 to {}", u64::MAX)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        v.trim()
            .parse()
            .map_err(|_| E::invalid_value(Unexpected::Str(v), &self))
    }
}
