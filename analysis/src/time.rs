//! Times on the command line and in the output: UTC, µs since the epoch.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

/// A time given as RFC 3339 (`2026-11-21T05:30:00Z`, an offset, fractions), `YYYY-MM-DD
/// HH:MM[:SS]` or `YYYY-MM-DDTHH:MM[:SS]` (UTC), `YYYY-MM-DD` (midnight UTC) or `@SECONDS`
/// since the epoch. `None` when it is none of these.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Some(secs) = s.strip_prefix('@') {
        let v: f64 = secs.parse().ok()?;
        return (v.is_finite() && v.abs() < 1e13).then(|| (v * 1e6).round() as i64);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros())
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date.
pub fn days_from_date(s: &str) -> Option<i64> {
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    Some((d - NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days())
}

/// `2026-11-21T05:30:00.250Z` (fractions only when not whole seconds).
pub fn fmt_us(us: i64) -> String {
    match DateTime::<Utc>::from_timestamp_micros(us) {
        Some(t) if us % 1_000_000 == 0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("@{us}us"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_a_user_types() {
        let t = 1_763_703_000_000_000; // 2025-11-21T05:30:00Z
        assert_eq!(parse_time("2025-11-21T05:30:00Z"), Some(t));
        assert_eq!(parse_time("2025-11-21T06:30:00+01:00"), Some(t));
        assert_eq!(parse_time("2025-11-21 05:30:00"), Some(t));
        assert_eq!(parse_time("2025-11-21T05:30"), Some(t));
        assert_eq!(parse_time("@1763703000"), Some(t));
        assert_eq!(parse_time("2025-11-21"), Some(t - 19_800_000_000));
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2025-13-01"), None);
        assert_eq!(parse_time("@nan"), None);
        assert_eq!(fmt_us(t), "2025-11-21T05:30:00Z");
        assert_eq!(fmt_us(t + 250_000), "2025-11-21T05:30:00.250Z");
        assert_eq!(days_from_date("1970-01-02"), Some(1));
    }
}
