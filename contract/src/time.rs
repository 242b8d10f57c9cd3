//! Times in the output: UTC civil dates of the partitions and file names, RFC 3339 in
//! alerts and summaries (no time-zone database: UTC only).

/// UTC civil date (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `(date=YYYY-MM-DD, hour=HH, compact YYYYMMDDTHHMMSSZ)` of a UNIX time in ns.
pub fn utc_parts(ns: u64) -> (String, String, String) {
    let s = (ns / 1_000_000_000) as i64;
    let (y, mo, d) = civil_from_days(s.div_euclid(86_400));
    let sod = s.rem_euclid(86_400);
    let (h, mi, se) = (sod / 3600, (sod / 60) % 60, sod % 60);
    (
        format!("{y:04}-{mo:02}-{d:02}"),
        format!("{h:02}"),
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{se:02}Z"),
    )
}

/// RFC 3339 UTC with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let (date, hour, _) = utc_parts(ns);
    let s = ns / 1_000_000_000;
    format!(
        "{date}T{hour}:{:02}:{:02}.{:03}Z",
        (s / 60) % 60,
        s % 60,
        (ns / 1_000_000) % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-11-21T05:34:59Z = 1795239299
        assert_eq!(
            utc_parts(1_795_239_299_000_000_000),
            ("2026-11-21".into(), "05".into(), "20261121T053459Z".into())
        );
        assert_eq!(
            rfc3339(1_795_239_299_123_000_000),
            "2026-11-21T05:34:59.123Z"
        );
    }
}
