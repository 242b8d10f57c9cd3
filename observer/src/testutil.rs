//! Test support (feature `test-support`, never in the product binary): the rule for tests that
//! need root, BPF or network namespaces. Outside CI such a test skips with a clear message; with
//! `CI=true` a skip is a failure.

pub use test_support::is_root;

pub use test_support::{TempDir, in_ci, require, require_root, xorshift};
