//! The collector: per-interval deltas of [`Snapshot`]s, Parquet flow logs, live alerts, the
//! terminal view, and the end-of-run summary. Driven by the live source and by replay alike.
//!
//! STUB: these signatures are the contract replay and the lab code against; the collector work
//! fills in the bodies (and may add to, not change, them).

pub mod cli;
pub mod policy;

use std::path::PathBuf;

use observer_common::maps::Event;

use crate::snapshot::Snapshot;
pub use policy::PolicyConfig;

/// Alert rule names (stable: alerts.jsonl, the alerts Parquet table, the lab's checks).
pub mod rule {
    pub const DSCP_MISMATCH: &str = "dscp_mismatch";
    pub const PCP_MISMATCH: &str = "pcp_mismatch";
    pub const NOT_ECT: &str = "not_ect";
    pub const PAUSE_802_3X: &str = "pause_802_3x";
    pub const PFC_WRONG_PRIORITY: &str = "pfc_wrong_priority";
    pub const PFC_STORM: &str = "pfc_storm";
    pub const PSN_GAP: &str = "psn_gap";
    pub const GO_BACK_N: &str = "go_back_n";
    pub const CE_WITHOUT_CNP: &str = "ce_without_cnp";
    pub const PFC_WITHOUT_ECN: &str = "pfc_without_ecn";
    pub const MTU_BELOW_EXPECTED: &str = "mtu_below_expected";
}

#[derive(Clone, Debug)]
pub struct CollectorConfig {
    /// Root of the Hive-style output tree (`flows/`, `interfaces/`, `alerts/`, `alerts.jsonl`,
    /// `summary.json`).
    pub out_dir: PathBuf,
    /// Host name written into file names.
    pub host: String,
    /// "live" or "replay".
    pub source: &'static str,
    pub policy: PolicyConfig,
    /// Close a Parquet file after this many seconds of data ...
    pub rotate_secs: u64,
    /// ... or this many bytes, whichever comes first.
    pub rotate_bytes: u64,
    /// Draw the refreshing terminal view (stdout is a terminal) instead of plain logs.
    pub terminal: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("{0}")]
    Other(String),
}

pub struct Collector {
    _cfg: CollectorConfig,
}

impl Collector {
    pub fn new(cfg: CollectorConfig) -> Result<Collector, CollectorError> {
        Ok(Collector { _cfg: cfg })
    }
    /// Kernel (or replay) events for `iface`: first occurrences, alerted at once.
    pub fn on_events(&mut self, _iface: &str, _events: &[Event]) {}
    /// One interval's cumulative state of one interface: deltas against the previous snapshot
    /// of that interface, Parquet rows, interval alert rules.
    pub fn on_snapshot(&mut self, _snap: &Snapshot) -> Result<(), CollectorError> {
        Ok(())
    }
    /// Flushes and closes every file, writes `summary.json` (`summary::summary_json` of the last
    /// snapshots plus `"alerts": {rule: count}`) and returns it.
    pub fn finish(self) -> Result<serde_json::Value, CollectorError> {
        Ok(serde_json::Value::Null)
    }
}
