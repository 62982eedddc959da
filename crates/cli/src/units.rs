//! Flag values with units: every flag that takes a time takes a duration with its unit
//! (`30s`, `500ms`, `2m`, `1h 30m`), so no flag's name has to carry one.

use std::time::Duration;

/// Parses a duration flag. A bare number is refused rather than guessed at: `20` could
/// mean seconds or milliseconds, and the flags used to differ.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.parse::<f64>().is_ok() {
        return Err(format!("`{t}`: add a unit, such as {t}s or {t}ms"));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("`{t}`: {e}; a duration is a number and a unit, such as 30s, 500ms or 2m")
    })
}

/// Seconds of a duration for a setting kept in whole seconds.
pub fn whole_seconds(flag: &str, d: Duration) -> Result<u64, String> {
    if d.subsec_nanos() == 0 {
        Ok(d.as_secs())
    } else {
        Err(format!(
            "{flag} takes whole seconds, not {}",
            humantime::format_duration(d)
        ))
    }
}

/// Milliseconds of a duration for a setting kept in whole milliseconds.
pub fn whole_millis(flag: &str, d: Duration) -> Result<u64, String> {
    let ms = u64::try_from(d.as_millis()).map_err(|_| format!("{flag}: too long"))?;
    if Duration::from_millis(ms) == d {
        Ok(ms)
    } else {
        Err(format!(
            "{flag} takes whole milliseconds, not {}",
            humantime::format_duration(d)
        ))
    }
}

/// Microseconds of a duration for a setting kept in whole microseconds.
pub fn whole_micros(flag: &str, d: Duration) -> Result<u64, String> {
    let us = u64::try_from(d.as_micros()).map_err(|_| format!("{flag}: too long"))?;
    if Duration::from_micros(us) == d {
        Ok(us)
    } else {
        Err(format!(
            "{flag} takes whole microseconds, not {}",
            humantime::format_duration(d)
        ))
    }
}

/// A duration in (fractional) milliseconds.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A duration in (fractional) microseconds.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m").map(|d| d.as_secs()), Ok(120));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
    }

    #[test]
    fn a_bare_number_asks_for_a_unit() {
        assert_eq!(
            parse_duration("20"),
            Err("`20`: add a unit, such as 20s or 20ms".into())
        );
        assert!(parse_duration("0.5").unwrap_err().contains("add a unit"));
        let e = parse_duration("5 parsecs").unwrap_err();
        assert!(e.contains("such as 30s"), "{e}");
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn whole_units_are_checked() {
        assert_eq!(whole_seconds("--interval", Duration::from_secs(7)), Ok(7));
        let e = whole_seconds("--interval", Duration::from_millis(1500)).unwrap_err();
        assert_eq!(e, "--interval takes whole seconds, not 1s 500ms");
        assert_eq!(
            whole_millis("--se-rate-tau", Duration::from_millis(20)),
            Ok(20)
        );
        assert!(whole_millis("--se-rate-tau", Duration::from_micros(1500)).is_err());
        assert_eq!(
            whole_micros("--cost-other", Duration::from_micros(80)),
            Ok(80)
        );
        assert!(whole_micros("--cost-other", Duration::from_nanos(80)).is_err());
    }
}
