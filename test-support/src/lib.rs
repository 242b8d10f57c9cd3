//! Test support shared by every crate's tests (a dev-dependency only, never in a product):
//! - [`TempDir`]: a fresh directory per test, removed when the guard drops, even when the test
//!   fails (panics unwind through the guard); `ROCE_KEEP_TEST_DIRS=1` keeps them to look at;
//! - [`require`] / [`require_root`]: the rule for tests that need root, BPF, network namespaces
//!   or a tool only CI is sure to have: outside CI such a test skips with a clear message; with
//!   `CI=true` a skip is a failure;
//! - [`xorshift`]: deterministic pseudo-random numbers;
//! - [`corpus`]: the generated capture corpus (one capture per case of metrics.md) and the
//!   pcap / pcapng writers;
//! - [`collector`]: the collector's outputs read back (pyarrow, alerts.jsonl, files) and a
//!   process run inside a test's network namespace.

pub mod collector;
pub mod corpus;
pub mod errors;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory of its own for one test: `$TMPDIR/roce-test-NAME-PID-N`, empty when made, removed
/// with everything in it when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Makes a fresh directory; `name` says which test it belongs to.
    pub fn new(name: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("roce-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating test directory {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path().join(p)`.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("ROCE_KEEP_TEST_DIRS").is_some() {
            eprintln!("kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// True when running in CI (`CI=true`), where every test must run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Returns `available`. When it is false: outside CI prints that `test` skips because `missing`
/// is not there; with `CI=true` panics, because a test that skips in CI did not run.
pub fn require(available: bool, test: &str, missing: &str) -> bool {
    if available {
        return true;
    }
    let msg = format!("{test}: needs {missing}: SKIPPED");
    if in_ci() {
        panic!("{msg} — but CI=true, where a skip is a failure");
    }
    eprintln!("{msg}");
    false
}

/// The effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// [`require`] root (BPF, network namespaces).
pub fn require_root(test: &str) -> bool {
    require(is_root(), test, "root (BPF, network namespaces)")
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_fresh_and_removed_even_on_panic() {
        let a = TempDir::new("t");
        let b = TempDir::new("t");
        assert_ne!(a.path(), b.path());
        std::fs::write(a.join("f"), "x").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        let q = std::panic::catch_unwind(|| {
            let d = TempDir::new("panics");
            std::fs::create_dir(d.join("sub")).unwrap();
            let p = d.path().to_path_buf();
            std::panic::panic_any(p);
        })
        .unwrap_err();
        let p = q.downcast::<PathBuf>().unwrap();
        assert!(!p.exists(), "{} left behind", p.display());
    }

    #[test]
    fn skips_outside_ci_only() {
        assert!(require(true, "t", "nothing"));
        if in_ci() {
            assert!(std::panic::catch_unwind(|| require(false, "t", "x")).is_err());
        } else {
            assert!(!require(false, "t", "x"));
        }
    }
}
