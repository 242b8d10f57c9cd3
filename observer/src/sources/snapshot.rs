//! The seam between the sources (live eBPF maps, replay's [`crate::sources::datapath::Datapath`]) and the
//! collector (deltas, Parquet flow logs, alerts): cumulative state of one interface at one time.

use observer_common::maps::{IfaceStats, MacKey, PfcCounters, QpKey, QpValue, dir};

/// Cumulative counters of one interface at `time_ns`.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub iface: String,
    /// Wall-clock (live) or capture (replay) time, nanoseconds since the UNIX epoch.
    pub time_ns: u64,
    /// Link speed used to turn PFC quanta into seconds, when known.
    pub link_speed_bps: Option<u64>,
    /// Every key present in the per-QP map, with its cumulative value.
    pub qps: Vec<(QpKey, QpValue)>,
    /// Per direction ([`dir`]), summed over CPUs.
    pub iface_stats: [IfaceStats; dir::COUNT],
    /// PFC/PAUSE counters per source MAC.
    pub macs: Vec<(MacKey, PfcCounters)>,
}
