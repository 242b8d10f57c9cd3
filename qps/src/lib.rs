//! The host's QPs from the kernel's RDMA subsystem: the per-QP view on hosts whose NIC runs
//! RoCE itself (ConnectX, BlueField, Thor, E810), where XDP sees none of the RDMA traffic.
//!
//! - [`inventory`]: every QP of every RDMA device (RDMA netlink `RES_QP_GET`, `RES_CM_ID_GET`),
//!   with its creator's command and container or pod ([`cgroup`]);
//! - [`progress`]: packets per QP and direction between two reads (PSN deltas), and each QP's
//!   fate (a move to ERR);
//! - [`verdict`]: a QP's marking against the policy and the port's QoS configuration;
//! - [`counters`]: per-QP-group hardware counters by counter binding, opt-in;
//! - [`mlx5`]: mlx5's raw QP context (address path, acknowledged PSN);
//! - [`command`]: `roce-observe qps`, the one-shot listing.
//!
//! See docs/qps.md.

pub mod cgroup;
pub mod command;
pub mod counters;
pub mod inventory;
pub mod mlx5;
pub mod progress;
pub mod raw;
pub mod verdict;

pub use inventory::{Inventory, Procfs, QpRow, SetUp, SetUpSource, read, read_host};
pub use progress::{Fate, Progress, compare, psn_advance, psn_delta};
