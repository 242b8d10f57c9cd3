//! roce-observe userspace: sources (live eBPF maps, pcap replay), the collector (deltas,
//! Parquet flow logs, alerts) and the lab.
pub mod datapath;
pub mod snapshot;
pub mod summary;
pub mod testutil;
pub mod live;
