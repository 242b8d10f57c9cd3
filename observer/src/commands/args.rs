//! Value parsers shared by every command, so `--interval`, `--rotate`, `--duration`,
//! `--idle-evict` and `--link-speed` accept the same forms everywhere.

/// Fastest link speed accepted, bit/s (10 Tb/s): larger values are typos, and PFC quanta to
/// seconds must stay meaningful.
const MAX_LINK_BPS: f64 = 10e12;

pub use contract::cli::parse_duration;

/// `100G`, `400g`, `25000M`, `1.6T`, `25000000000` (bit/s), or a plain number under 100000,
/// read as Gb/s (`--link-speed 100`) -> bit/s, between 1 Mb/s and 10 Tb/s.
pub fn parse_link_speed(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'G' | 'g')) => (&s[..i], 1e9),
        Some((i, 'M' | 'm')) => (&s[..i], 1e6),
        Some((i, 'T' | 't')) => (&s[..i], 1e12),
        _ => match s.parse::<f64>() {
            Ok(v) if v < 1e5 => (s, 1e9),
            _ => (s, 1.0),
        },
    };
    let v: f64 = num.trim().parse().map_err(|_| {
        format!("invalid link speed {s:?} (examples: 100G, 400g, 100 = 100 Gb/s, 25000000000)")
    })?;
    let bps = v * mul;
    if !bps.is_finite() || bps < 1e6 {
        return Err(format!("link speed {s:?} too small (at least 1 Mb/s)"));
    }
    if bps > MAX_LINK_BPS {
        return Err(format!("link speed {s:?} too large (at most 10T)"));
    }
    Ok(bps as u64)
}

/// `--rotate-mb`: 1 MiB to 1 TiB.
pub fn parse_rotate_mb(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of MiB"))?;
    if !(1..=1 << 20).contains(&v) {
        return Err(format!("{s:?}: out of range (1 .. 1048576 MiB)"));
    }
    Ok(v)
}

/// A host name as it goes into file names and rows: `[A-Za-z0-9._-]`, at most 64 characters
/// (a slash would make every write fail).
pub fn parse_host(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && s != "."
        && s != "..";
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: a host name here is 1-64 characters of A-Z a-z 0-9 . _ -"
        ))
    }
}

/// `--point-label`: the observation point's label in every table and summary.json
/// (`tor1-mirror`): 1-64 characters, no `/` and no control characters (as for `--host`, it
/// names a point in `roce-analyze path`'s `host/iface/dir[label]`).
pub fn parse_point_label(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.chars().count() <= 64
        && !s.chars().any(|c| c == '/' || c.is_control())
        && s.trim() == s;
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: a point label is 1-64 characters, without `/`, control characters or surrounding spaces"
        ))
    }
}

/// The bounds of an evidence capture (`--evidence`), the same for the live command and replay.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct EvidenceLimits {
    /// Frames of `--evidence` per rule and QP key (replay: or interface, for PFC and PAUSE
    /// frames).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub evidence_per_key: u32,
    /// Frames of `--evidence` in all; offending frames beyond are counted, not written.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub evidence_max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speeds() {
        assert_eq!(parse_link_speed("100G"), Ok(100_000_000_000));
        assert_eq!(parse_link_speed("100"), Ok(100_000_000_000));
        assert_eq!(parse_link_speed("400G"), Ok(400_000_000_000));
        assert_eq!(parse_link_speed("400g"), Ok(400_000_000_000));
        assert_eq!(parse_link_speed("1.6T"), Ok(1_600_000_000_000));
        assert_eq!(parse_link_speed("25000000000"), Ok(25_000_000_000));
        for bad in ["0", "x", "NaN", "1e30", "99999999999999999999G", "-5G"] {
            assert!(parse_link_speed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rotate_and_host() {
        assert_eq!(parse_rotate_mb("128"), Ok(128));
        assert!(parse_rotate_mb("0").is_err());
        assert!(parse_rotate_mb("17592186044416").is_err()); // 2^44: would wrap << 20
        assert_eq!(parse_host("gpu-01.dc"), Ok("gpu-01.dc".into()));
        for bad in ["a/b", "", "..", "x y", &"h".repeat(65)] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn point_labels() {
        for good in ["tor1-mirror", "leaf 1 [mirror]", "spine.é", &"p".repeat(64)] {
            assert_eq!(parse_point_label(good), Ok(good.to_string()));
        }
        for bad in [
            "",
            "a/b",
            "x\ny",
            "tab\t",
            "\u{7f}",
            " pad",
            &"p".repeat(65),
        ] {
            assert!(parse_point_label(bad).is_err(), "{bad:?}");
        }
    }
}
