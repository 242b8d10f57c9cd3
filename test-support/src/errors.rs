//! The rule every error type follows: its message says what failed, its cause is only its
//! `source()`, so the cause's text appears once however the error is printed: as the logs,
//! reports and alerts print it (`contract::error::chain`) and as the commands do (anyhow's
//! `{:#}` and `{:?}`).

use std::error::Error;

use contract::error::chain;

/// Asserts the rule for `e`, whose innermost cause's text is `cause`; `name` names the error in
/// the failure message. Returns the chain as logged, for further checks.
pub fn assert_cause_printed_once(
    name: &str,
    e: Box<dyn Error + Send + Sync + 'static>,
    cause: &str,
) -> String {
    assert!(!e.to_string().contains(cause), "{name}: {e}");
    let logged = chain(&*e);
    assert_eq!(logged.matches(cause).count(), 1, "{name}: {logged}");
    let e = anyhow::Error::from_boxed(e);
    for text in [format!("{e:#}"), format!("{e:?}")] {
        assert_eq!(text.matches(cause).count(), 1, "{name}: {text}");
    }
    // What the logs show is what the command's `Error:` line shows, on one line.
    assert_eq!(logged, format!("{e:#}"), "{name}");
    logged
}
