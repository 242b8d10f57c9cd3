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
pub mod host_qps;
pub mod kernel;
pub mod latency;
pub mod offload;
pub mod paced;
pub mod snapshot;
pub mod synthetic;

pub use snapshot::{Changed, Snapshot};

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use observer_common::maps::{Event, PauseEvent, QpKey, QpValue};

/// An error of the consumer (the pipeline's), carried through a source with its causes.
pub type ConsumerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where a source's output goes: the pipeline's [`crate::pipeline::Collector`], [`Discard`],
/// or a recorder in tests.
pub trait Consumer {
    /// Observation of `iface` started at `start_ns` (the first interval's start).
    fn begin(&mut self, _iface: &str, _start_ns: u64, _link_speed_bps: Option<u64>) {}
    /// First-occurrence events of `iface`, as they arrive.
    fn events(&mut self, iface: &str, events: &[Event]) -> Result<(), ConsumerError>;
    /// PFC / PAUSE frames of `iface` with their times, in arrival order (for the pause time and
    /// the XOFF peak, which counters cannot give).
    fn pauses(&mut self, _iface: &str, _pauses: &[PauseEvent]) -> Result<(), ConsumerError> {
        Ok(())
    }
    /// Passive latency outcomes of `iface` (docs/latency.md), in the order decided, before the
    /// snapshot of the interval they were decided in.
    fn latency(
        &mut self,
        _iface: &str,
        _records: &[observer_common::latency::Record],
    ) -> Result<(), ConsumerError> {
        Ok(())
    }
    /// One interval's cumulative state of one interface.
    fn snapshot(&mut self, snap: &Snapshot) -> Result<(), ConsumerError>;
    /// Keys the source removed (idle eviction) with their final values.
    fn evicted(&mut self, _iface: &str, _finals: &[(QpKey, QpValue)]) {}
    /// Keys of `iface` idle since `idle_ns` before `now_ns`, at most `max` (eviction
    /// candidates when a source's table fills up).
    fn idle_keys(&self, _iface: &str, _now_ns: u64, _idle_ns: u64, _max: usize) -> Vec<QpKey> {
        Vec::new()
    }
    /// `iface` had nothing new in the interval ending at `t_ns` (replay: no frame since its
    /// last snapshot): no snapshot, no row; its next interval starts at `t_ns`.
    fn quiet(&mut self, _iface: &str, _t_ns: u64) {}
    /// Every interface's snapshot of the interval at `t_ns` was handed over.
    fn interval_done(&mut self, _t_ns: u64) {}
    /// The observed interface disappeared at about `t_ns` (deleted): no snapshot of it until
    /// it comes back.
    fn iface_gone(&mut self, _iface: &str, _t_ns: u64) {}
    /// An interface of the same name is back and observed afresh (new programs, counters from
    /// zero): what was counted before stays counted.
    fn iface_restarted(&mut self, _iface: &str, _t_ns: u64) {}
    /// A sample of `iface`'s NIC (counters and QoS configuration), with the vendor-neutral
    /// counters of the interval since the previous sample (`None` for the first).
    fn nic(
        &mut self,
        _iface: &str,
        _sample: &nic::NicSample,
        _counters: Option<&nic::Normalized>,
    ) -> Result<(), ConsumerError> {
        Ok(())
    }
    /// The host's QPs (the RDMA subsystem's inventory) read at `inv.time_ns`, the interval
    /// starting at `start_ns`, with each QP's progress since the previous read and the fates.
    fn qps(
        &mut self,
        _start_ns: u64,
        _inv: &qps::Inventory,
        _progress: &[qps::Progress],
        _fates: &[qps::Fate],
    ) -> Result<(), ConsumerError> {
        Ok(())
    }
}

/// Discards everything (replay's `--no-out`, tests that only want the source's totals).
pub struct Discard;

impl Consumer for Discard {
    fn events(&mut self, _: &str, _: &[Event]) -> Result<(), ConsumerError> {
        Ok(())
    }
    fn snapshot(&mut self, _: &Snapshot) -> Result<(), ConsumerError> {
        Ok(())
    }
}

/// Why a source stopped before its input ended: a signal, or the set duration.
#[derive(Clone, Debug)]
pub struct Stop(Arc<AtomicI32>);

/// [`Stop::reason`] when stopped by [`Stop::request`] (not a signal).
pub const STOP_REQUESTED: i32 = -1;

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

impl Default for Stop {
    fn default() -> Self {
        Stop(Arc::new(AtomicI32::new(0)))
    }
}

impl Stop {
    /// A stop that SIGINT, SIGTERM and SIGHUP (a closed SSH session) also set.
    pub fn on_signals() -> Stop {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a plain sigaction with a handler that only stores to an atomic
            // (async-signal-safe); the struct is zeroed then filled.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
        Stop::default()
    }

    pub fn request(&self) {
        self.0.store(STOP_REQUESTED, Ordering::SeqCst);
    }

    /// The terminal hung up (seen before its SIGHUP arrived): the stop SIGHUP would set.
    pub fn hang_up(&self) {
        self.0.store(libc::SIGHUP, Ordering::SeqCst);
    }

    /// The signal number, [`STOP_REQUESTED`], or `None` while running on.
    pub fn reason(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => match SIGNALLED.load(Ordering::SeqCst) {
                0 => None,
                s => Some(s),
            },
            r => Some(r),
        }
    }

    pub fn is_set(&self) -> bool {
        self.reason().is_some()
    }

    /// `SIGINT`, `SIGTERM`, `SIGHUP` or `requested`.
    pub fn reason_name(&self) -> &'static str {
        match self.reason() {
            Some(libc::SIGINT) => "SIGINT",
            Some(libc::SIGTERM) => "SIGTERM",
            Some(libc::SIGHUP) => "SIGHUP",
            Some(_) => "requested",
            None => "running",
        }
    }
}

/// A source: runs until its input ends or `stop` is set, handing every snapshot and event to
/// `out`. The live eBPF source, replay and the synthetic source all implement it, so a command
/// wires any of them to the pipeline the same way.
pub trait Source {
    type Error: std::error::Error + Send + Sync + 'static;
    fn run(&mut self, out: &mut dyn Consumer, stop: &Stop) -> Result<(), Self::Error>;
}
