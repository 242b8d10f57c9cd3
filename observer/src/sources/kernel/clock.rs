//! The packet clock ticker: CLOCK_MONOTONIC written into the object's `CLOCK` map (one `u64`)
//! every millisecond, by the `clock_tick` program on a software CPU-clock perf event (so the
//! clock goes on while roce-observe is stopped), or by a thread where perf events are not
//! available. The programs read it with an inlined array lookup instead of a
//! clock helper call for the per-QP first/last packet times; while it is 0 (no ticker, as under
//! BPF_PROG_TEST_RUN in tests) they fall back to `bpf_ktime_get_coarse_ns`. Both are
//! CLOCK_MONOTONIC, so the wall-clock conversion of snapshots is the same for either.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::Ebpf;
use aya::maps::{Array, MapData};
use aya::programs::PerfEvent;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};

use super::LiveError;

/// How often the ticker writes the clock: the resolution of first/last packet times (plus the
/// ticker thread's scheduling delay).
pub const TICK: Duration = Duration::from_millis(1);

/// CLOCK_MONOTONIC now, in ns.
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the valid timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The running ticker: in the kernel (a perf event program), or a thread where perf events
/// cannot be opened. Dropping it stops and joins the thread (within one tick); the kernel
/// ticker stops with the eBPF object.
pub(crate) enum ClockTicker {
    Kernel(Array<MapData, u64>),
    Thread(ThreadTicker),
}

/// How stale the clock may be while a ticker is considered running.
const STALE: Duration = Duration::from_millis(200);

impl ClockTicker {
    /// Writes the clock once (so the programs never stamp with the fallback clock once this
    /// returns), then attaches the `clock_tick` program to a 1 ms software CPU-clock perf event
    /// of the first online CPU; if that fails (no perf events in this kernel or container),
    /// starts the ticker thread instead.
    pub(crate) fn start(
        ebpf: &mut Ebpf,
        mut map: Array<MapData, u64>,
    ) -> Result<ClockTicker, LiveError> {
        map.set(0, &monotonic_ns(), 0)
            .map_err(|e| LiveError::op("writing CLOCK", e))?;
        match attach_kernel_ticker(ebpf) {
            Ok(cpu) => {
                tracing::debug!(cpu, "packet clock ticks in the kernel (perf event)");
                Ok(ClockTicker::Kernel(map))
            }
            Err(e) => {
                tracing::info!(error = %contract::error::chain(&e), "no perf event for the packet clock; a thread ticks it (packet times then pause while roce-observe is stopped)");
                Ok(ClockTicker::Thread(ThreadTicker::start(map)?))
            }
        }
    }

    /// Whether the clock is being ticked: the thread runs, or the kernel's last tick is recent.
    pub(crate) fn running(&self) -> bool {
        match self {
            ClockTicker::Thread(t) => t.running(),
            ClockTicker::Kernel(map) => map
                .get(&0, 0)
                .is_ok_and(|t| monotonic_ns().saturating_sub(t) < STALE.as_nanos() as u64),
        }
    }

    /// Whether the kernel ticks the clock (it goes on while this process is stopped).
    pub(crate) fn in_kernel(&self) -> bool {
        matches!(self, ClockTicker::Kernel(_))
    }
}

/// Loads `clock_tick` and attaches it; returns the CPU whose clock drives it.
fn attach_kernel_ticker(ebpf: &mut Ebpf) -> Result<u32, LiveError> {
    let prog: &mut PerfEvent = ebpf
        .program_mut("clock_tick")
        .ok_or_else(|| LiveError::Setup("program clock_tick missing from the eBPF object".into()))?
        .try_into()
        .map_err(|e| LiveError::op("program clock_tick", e))?;
    prog.load()
        .map_err(|e| LiveError::op("loading clock_tick", e))?;
    let cpu = aya::util::online_cpus()
        .ok()
        .and_then(|c| c.first().copied())
        .unwrap_or(0);
    prog.attach(
        PerfEventConfig::Software(SoftwareEvent::CpuClock),
        PerfEventScope::AllProcessesOneCpu { cpu },
        SamplePolicy::Period(TICK.as_nanos() as u64),
        false,
    )
    .map_err(|e| LiveError::op("attaching clock_tick to a CPU-clock perf event", e))?;
    Ok(cpu)
}

/// The fallback ticker thread.
pub(crate) struct ThreadTicker {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ThreadTicker {
    fn start(mut map: Array<MapData, u64>) -> Result<ThreadTicker, LiveError> {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("roce-clock".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(TICK) {
                        Err(RecvTimeoutError::Timeout) => {
                            if let Err(e) = map.set(0, &monotonic_ns(), 0) {
                                tracing::warn!(error = %e, "writing CLOCK failed, ticker stops");
                                return;
                            }
                        }
                        // Stopped (sender dropped) or told to stop.
                        _ => return,
                    }
                }
            })
            .map_err(|e| LiveError::op("starting the clock thread", e))?;
        Ok(ThreadTicker {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Whether the thread is still running.
    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for ThreadTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
