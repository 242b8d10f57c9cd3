//! roce-observe userspace, laid out by role (docs/architecture.md):
//! - [`sources`]: where cumulative per-interface state comes from (the kernel's maps, pcap
//!   replay through the userspace datapath, a synthetic generator), as [`sources::Snapshot`]s
//!   and first-occurrence events;
//! - [`pipeline`]: the collector's stages (interval deltas, alert rules, hold-down);
//! - [`sinks`]: where results go (Parquet tables, `alerts.jsonl`, stderr, the terminal view,
//!   `summary.json`);
//! - the output schema, the policy and its vendor profiles live in the `contract` crate, which
//!   `roce-analyze` uses without this one;
//! - [`commands`]: the live and replay commands (the only place `anyhow` is used).
//!
//! The lab (crate `lab`) and the `roce-observe` binary (crate `roce-observe`) sit above this
//! library.
pub mod commands;
pub mod pipeline;
pub mod sinks;
pub mod sources;
#[cfg(any(test, feature = "test-support"))]
pub mod testutil;

#[cfg(test)]
mod error_chain_tests;
