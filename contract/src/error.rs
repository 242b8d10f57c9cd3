//! An error printed with its causes: each error's message says what failed, its cause is only
//! its `source()`, so that the chain printed once shows every cause once.

use std::error::Error;

/// `e` and each of its causes (`source()`, outermost first), joined with ": " on one line, as
/// `anyhow`'s `{:#}` prints them: for the places that print an error as text only (a log
/// field, a usage message, a report's or an alert's text), where `Display` alone would drop
/// the causes.
pub fn chain(e: &dyn Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// How a command line reports the error it ends on: `Error: {e}`, then its causes once each
/// (`Caused by:` and numbered lines), control characters made visible; never a backtrace,
/// whatever RUST_BACKTRACE says (a usage or environment error is not a crash).
pub fn cli_text(e: &dyn Error) -> String {
    let mut text = format!("Error: {e}");
    let mut cur = e.source();
    let mut i = 0;
    while let Some(c) = cur {
        if i == 0 {
            text.push_str("\n\nCaused by:");
        }
        text.push_str(&format!("\n    {i}: {c}"));
        i += 1;
        cur = c.source();
    }
    visible(&text).into_owned()
}

/// `s` safe for a terminal or a log file: every control character but newline and tab (C0,
/// DEL and the C1 range U+0080..U+009F, which a terminal may read as escape sequences) written
/// as `\u{..}`. Interface names, file names and other text from outside reach logs and error
/// messages through this, so that a name holding an escape sequence cannot move the cursor,
/// clear the screen or forge a log line.
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
    if !s.chars().any(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if bad(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{chain, visible};

    #[test]
    fn controls_are_made_visible() {
        assert_eq!(visible("eth0"), "eth0");
        assert_eq!(visible("a\nb\tc"), "a\nb\tc");
        assert_eq!(visible("e\u{1b}[2Jx"), "e\\u{1b}[2Jx");
        assert_eq!(visible("\r\u{7f}\u{9b}"), "\\u{d}\\u{7f}\\u{9b}");
    }
    use crate::policy::{PolicyConfig, PolicyError};

    #[derive(Debug, thiserror::Error)]
    #[error("outer {what}")]
    struct Outer {
        what: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn every_cause_once_outermost_first() {
        let e = Outer {
            what: "step",
            source: std::io::Error::other("the cause"),
        };
        assert_eq!(chain(&e), "outer step: the cause");
        assert_eq!(chain(&std::io::Error::other("alone")), "alone");
    }

    /// An unreadable policy file: the path in the message, the I/O error once, as the cause.
    #[test]
    fn policy_read_error_prints_its_cause_once() {
        let path = std::path::Path::new("/nonexistent/roce-observe-policy.toml");
        let e = PolicyConfig::from_file(path).unwrap_err();
        assert!(matches!(e, PolicyError::Read { .. }), "{e:?}");
        let cause = std::error::Error::source(&e).expect("the I/O error is the source");
        let cause = cause.to_string();
        assert!(!e.to_string().contains(&cause), "{e}");
        let text = chain(&e);
        assert_eq!(text.matches(&cause).count(), 1, "{text}");
        assert!(
            text.starts_with("cannot read policy file /nonexistent/roce-observe-policy.toml: ")
        );
        // The errors without a cause print as before.
        let e = PolicyConfig::from_toml("expected_mtu = 1500\n", "p.toml").unwrap_err();
        assert_eq!(chain(&e), e.to_string());
    }
}
