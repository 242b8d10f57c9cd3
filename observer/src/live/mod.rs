//! Live source: loads the eBPF object for one interface, attaches XDP (ingress; tc ingress as
//! the fallback) and tc egress, writes the policy, reads the maps into [`Snapshot`]s and drains
//! the event ring buffer.
//!
//! STUB: the signatures are the contract the collector codes against; the eBPF work fills in
//! the bodies.

use observer_common::maps::{Event, Policy, QpKey, QpValue};

use crate::snapshot::Snapshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native (driver) XDP, falling back to generic (SKB) XDP, then to tc ingress.
    #[default]
    Auto,
    Native,
    Generic,
}

#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub iface: String,
    pub xdp_mode: XdpMode,
    /// Size of the per-QP map (keys).
    pub max_qps: u32,
    pub policy: Policy,
    /// Attach tc egress too (what this host sends).
    pub egress: bool,
}

/// What was attached where, for the start-up report.
#[derive(Clone, Debug)]
pub struct Attached {
    pub iface: String,
    pub ifindex: u32,
    /// "xdp-native", "xdp-generic" or "tc-ingress".
    pub ingress: String,
    /// "tc-egress" when attached.
    pub egress: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("not permitted to load BPF programs: run as root (or with CAP_BPF and CAP_NET_ADMIN)")]
    NotPermitted,
    #[error("no such interface: {0}")]
    NoSuchInterface(String),
    #[error("the kernel verifier rejected {prog}; last lines of its log:\n{log_tail}")]
    Verifier { prog: String, log_tail: String },
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux missing)")]
    NoBtf,
    #[error("an XDP program is already attached to {0}: detach it or use --xdp-mode generic")]
    XdpSlotTaken(String),
    #[error("{0}")]
    Other(String),
}

/// One interface being observed.
pub struct LiveIface {
    _private: (),
}

impl LiveIface {
    pub fn attach(_opts: &LiveOptions) -> Result<LiveIface, LiveError> {
        Err(LiveError::Other("live capture not implemented yet".into()))
    }
    pub fn attached(&self) -> &Attached {
        unimplemented!()
    }
    pub fn set_policy(&mut self, _p: &Policy) -> Result<(), LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// Cumulative state of every map (batched reads); `time_ns` is wall-clock UNIX ns.
    pub fn snapshot(&mut self, _time_ns: u64) -> Result<Snapshot, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// Removes keys (idle QPs) atomically with their last value, so nothing is lost.
    pub fn evict(&mut self, _keys: &[QpKey]) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// Non-blocking: appends the events waiting in the ring buffer (times already converted to
    /// wall-clock UNIX ns). Returns how many.
    pub fn drain_events(&mut self, _out: &mut Vec<Event>) -> usize {
        0
    }
    /// The ring buffer's fd, for `tokio::io::unix::AsyncFd` readiness.
    pub fn events_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// The eBPF programs loaded but not attached, run frame by frame through BPF_PROG_TEST_RUN:
/// for tests (kernel vs replay equality) and benchmarks.
pub struct ProgTester {
    _private: (),
}

impl ProgTester {
    /// Loads a fresh object (fresh maps) with a per-QP map of `max_qps` keys and `policy`.
    pub fn load(_max_qps: u32, _policy: &Policy) -> Result<ProgTester, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// Runs the XDP program on one frame; returns the XDP action.
    pub fn run_xdp(&mut self, _frame: &[u8]) -> Result<u32, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// Runs the tc program (egress when `egress`) on one frame; returns the tc action.
    pub fn run_tc(&mut self, _frame: &[u8], _egress: bool) -> Result<i32, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    /// The maps' cumulative state (`iface` is the name put into the snapshot).
    pub fn snapshot(&mut self, _iface: &str, _time_ns: u64) -> Result<Snapshot, LiveError> {
        Err(LiveError::Other("not implemented".into()))
    }
    pub fn drain_events(&mut self, _out: &mut Vec<Event>) -> usize {
        0
    }
}
