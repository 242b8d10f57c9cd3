//! The command line's conventions, the same in every command of `roce-observe` (live, replay,
//! lab, nic) and what automation relies on: exit statuses and the durations options accept.

use std::time::Duration;

/// Longest duration any option accepts (about 11.6 days): keeps nanosecond arithmetic on
/// interval boundaries far from overflow.
const MAX_DURATION_NS: f64 = 1e15;
/// A command's exit status other than 0, as an error: `message` (if any) is printed on stderr,
/// then the process exits with `code` (1: a check failed, already reported on stdout; 2: a
/// usage error such as a missing interface).
#[derive(Debug)]
pub struct ExitStatus {
    pub code: i32,
    pub message: Option<String>,
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => f.write_str(m),
            None => write!(f, "exit status {}", self.code),
        }
    }
}

impl std::error::Error for ExitStatus {}

impl ExitStatus {
    /// A usage error (exit status 2) with its message.
    pub fn usage(message: impl Into<String>) -> ExitStatus {
        ExitStatus {
            code: 2,
            message: Some(message.into()),
        }
    }
}

/// `1`, `1s`, `500ms`, `100us`, `2m`, `1h` (a bare number is seconds) -> Duration, between
/// 1 µs and about 11 days.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, ns_per_unit) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e9)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600e9)
    } else {
        (s, 1e9)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (examples: 1, 1s, 500ms, 5m, 2h)"))?;
    let ns = v * ns_per_unit;
    if !ns.is_finite() || ns <= 0.0 {
        return Err(format!("{s:?}: a duration must be positive"));
    }
    if !(1e3..=MAX_DURATION_NS).contains(&ns) {
        return Err(format!("{s:?}: out of range (1us .. 11 days)"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_duration("1s"), ms(1000));
        assert_eq!(parse_duration("250ms"), ms(250));
        assert_eq!(parse_duration("2"), ms(2000));
        assert_eq!(parse_duration("1h"), ms(3_600_000));
        assert_eq!(parse_duration("5m"), ms(300_000));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        for bad in ["0", "-1s", "NaN", "inf", "fast", "", "1e30s", "0.1us"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

/// An interface name as the outputs, logs and `--iface` spell it: Linux names are bytes, not
/// text, so a name that is not UTF-8 is written with each byte of it that is not as `\xNN`
/// (`eth\xff0`); a UTF-8 name as it is.
pub fn iface_name(os: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in os.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The value parser of every `--iface`: any bytes, spelled as [`iface_name`] does.
pub fn iface_arg() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new().map(|s| iface_name(&s))
}

/// The bytes of the interface an [`iface_name`] spelling names, for the kernel: every `\xNN`
/// turned back into its byte (`None` when the name has none, so the name is its own bytes).
pub fn iface_bytes(name: &str) -> Option<Vec<u8>> {
    if !name.contains("\\x") {
        return None;
    }
    let b = name.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let (Some(h), Some(l)) = (
                b.get(i + 2).copied().and_then(hex),
                b.get(i + 3).copied().and_then(hex),
            )
        {
            out.push(h << 4 | l);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The interface `name` ([`iface_name`]'s spelling) as the kernel knows it: the name itself
/// when an interface of that name exists (a name may hold a literal `\x`), else its escapes
/// decoded.
pub fn iface_os(name: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    match iface_bytes(name) {
        Some(bytes) if !std::path::Path::new("/sys/class/net").join(name).exists() => {
            std::ffi::OsString::from_vec(bytes)
        }
        _ => name.into(),
    }
}

#[cfg(test)]
mod iface_tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn names_that_are_not_utf8_round_trip_through_their_escapes() {
        let raw = std::ffi::OsStr::from_bytes(b"eth\xff0\xc3");
        let name = iface_name(raw);
        assert_eq!(name, "eth\\xff0\\xc3");
        assert_eq!(iface_bytes(&name).unwrap(), b"eth\xff0\xc3");
        assert_eq!(iface_name(std::ffi::OsStr::new("ens1f0")), "ens1f0");
        assert_eq!(iface_bytes("ens1f0"), None);
        // a backslash not followed by two hex digits stays
        assert_eq!(iface_bytes("a\\xg1\\x4").unwrap(), b"a\\xg1\\x4");
    }
}
