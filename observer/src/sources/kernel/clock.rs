//! The packet clock ticker: a thread that writes CLOCK_MONOTONIC into the object's `CLOCK` map
//! (one `u64`) every millisecond. The programs read it with an inlined array lookup instead of a
//! clock helper call for the per-QP first/last packet times; while it is 0 (no ticker, as under
//! BPF_PROG_TEST_RUN in tests) they fall back to `bpf_ktime_get_coarse_ns`. Both are
//! CLOCK_MONOTONIC, so the wall-clock conversion of snapshots is the same for either.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{Array, MapData};

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

/// The running ticker; dropping it stops and joins the thread (within one tick).
pub(crate) struct ClockTicker {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ClockTicker {
    /// Writes the clock once (so the programs never stamp with the fallback clock once this
    /// returns), then starts the thread.
    pub(crate) fn start(mut map: Array<MapData, u64>) -> Result<ClockTicker, LiveError> {
        map.set(0, &monotonic_ns(), 0)
            .map_err(|e| LiveError::op("writing CLOCK", e))?;
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
        Ok(ClockTicker {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Whether the thread is still running.
    pub(crate) fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for ClockTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
