//! roce-observe userspace: sources (live eBPF maps, pcap replay), the collector (deltas,
//! Parquet flow logs, alerts), the lab. See docs/architecture.md.
pub mod collector;
pub mod datapath;
pub mod lab;
pub mod live;
pub mod replay;
pub mod snapshot;
pub mod summary;
pub mod testutil;
