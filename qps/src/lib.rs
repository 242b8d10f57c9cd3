//! The host's QPs from the kernel's RDMA subsystem: the per-QP view on hosts whose NIC runs
//! RoCE itself (ConnectX, BlueField, Thor, E810), where XDP sees none of the RDMA traffic.
//!
//! - [`inventory`]: every QP of every RDMA device (RDMA netlink `RES_QP_GET`, `RES_CM_ID_GET`),
//!   with its creator's command and container or pod ([`cgroup`]);
//! - [`progress`]: packets per QP and direction between two reads (PSN deltas), and each QP's
//!   fate (a move to ERR);
//! - [`verdict`]: a QP's marking against the policy and the port's QoS configuration;
//! - [`command`]: `roce-observe qps`, the one-shot listing.
//!
//! See docs/qps.md.

pub mod cgroup;
pub mod command;
pub mod inventory;
pub mod progress;
pub mod verdict;

pub use inventory::{Inventory, Procfs, QpRow, SetUp, read, read_host};
pub use progress::{Fate, Progress, compare, psn_delta};
