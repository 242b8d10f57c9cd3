//! The observer library's integration tests that need no process of their own, one module per
//! subject: the collector on the userspace datapath, the NIC stage in the pipeline, replay
//! against tshark and against the XDP program. The `ebpf_*` test binaries stay apart: the
//! kernel matrix (scripts/vm-tests.sh) runs each of them by name in a VM of every kernel.

mod collector_datapath;
mod host_qps_pipeline;
mod nic_pipeline;
mod replay_tshark;
mod replay_xdp;
