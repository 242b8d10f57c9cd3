//! The contract between roce-observe and everything that reads what it writes or configures
//! how it judges: one crate with no part of the live observer in it, used by the observer, by
//! `roce-analyze` and by the documentation generator.
//! - [`schema`]: every output table's columns, types, units and meanings (docs/schema.md);
//! - [`policy`]: the expected marking and the alert thresholds (`--policy`, docs/policy.md),
//!   starting from a [`vendor`] profile;
//! - [`marking`]: what one marking field of one packet class must be, and how the marking
//!   changed between two observation points (docs/analysis.md#path);
//! - [`nic`]: the NIC's vendor-neutral quantities (the `nic` table's columns);
//! - [`alert`]: the alert rules, severities and keys, an alert's `alerts.jsonl` and table forms;
//! - [`rows`]: rows of the row-oriented tables as typed cells, and their Arrow batch;
//! - [`cli`]: exit statuses and durations, as every command takes and gives them;
//! - [`error`]: an error and its causes on one line, each once ([`error::chain`]);
//! - [`time`], [`addr`]: UTC dates, RFC 3339 times and addresses as the outputs spell them.
pub mod addr;
pub mod alert;
pub mod cli;
pub mod error;
pub mod marking;
pub mod nic;
pub mod policy;
pub mod rows;
pub mod schema;
pub mod time;
pub mod vendor;
