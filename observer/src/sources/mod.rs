//! Where cumulative per-interface state comes from. Every source hands the pipeline the same
//! two things: [`Snapshot`]s (cumulative counters of one interface at one time) and
//! first-occurrence [`observer_common::maps::Event`]s, through [`Consumer`].
//!
//! - [`kernel`]: the eBPF programs' maps on a live interface (loader, attach, mapped per-QP
//!   table, start-up diagnosis);
//! - [`capture`]: pcap / pcapng files and streams through [`datapath::Datapath`], the
//!   programs' per-frame logic in userspace;
//! - [`synthetic`]: generated RoCE traffic through the same datapath (tests, benchmarks,
//!   `--synthetic-qps`).

pub mod capture;
pub mod datapath;
pub mod kernel;
pub mod nic;
pub mod snapshot;
pub mod synthetic;

pub use snapshot::Snapshot;
