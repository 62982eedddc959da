//! Durations in experiment files are written as milliseconds (`control_interval_ms = 200`),
//! which reads like the paper's tables; fractional values such as `0.5` are allowed.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

fn from_millis<E: serde::de::Error>(ms: f64) -> Result<Duration, E> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(Duration::from_secs_f64(ms / 1e3))
    } else {
        Err(E::custom(format!(
            "expected a non-negative number of milliseconds, got {ms}"
        )))
    }
}

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    from_millis(f64::deserialize(d)?)
}

/// The same for optional durations (absent or omitted means `None`).
pub mod option {
    use super::{from_millis, Deserialize, Deserializer, Duration, Serializer};

    #[allow(clippy::ref_option)] // serde's `with` hands us `&Option<T>`
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_secs_f64() * 1e3)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?.map(from_millis).transpose()
    }
}
