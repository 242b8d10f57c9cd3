//! Test support (feature `test-support`, never in the product binary): the rule for tests that
//! need root, BPF or network namespaces. Outside CI such a test skips with a clear message; with
//! `CI=true` a skip is a failure.

pub use crate::lab::netns::{Netns, VethPair, is_root, run, send_raw};

/// A deterministic pseudo-random sequence (xorshift64) for tests: the same `seed` (not 0), the
/// same values.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Returns true when the test may run. Outside CI, prints why it skips and returns false; with
/// `CI=true`, panics instead, because a privileged test that skips in CI did not run.
pub fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    let msg = format!("{test}: needs root (BPF, network namespaces): SKIPPED");
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{msg} — but CI=true, where a skip is a failure");
    }
    eprintln!("{msg}");
    false
}
