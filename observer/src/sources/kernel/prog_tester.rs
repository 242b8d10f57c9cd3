//! The programs loaded but not attached, run frame by frame through BPF_PROG_TEST_RUN: the
//! harness of the kernel tests (kernel == userspace datapath) and of the benchmarks. Not part of
//! the product: built for this crate's tests and with the `test-support` feature (the other
//! crates' tests, xtask's benchmarks).

use std::time::Duration;

use super::*;

/// The eBPF programs loaded but not attached, run frame by frame through BPF_PROG_TEST_RUN:
/// for tests (kernel vs replay equality) and benchmarks.
pub struct ProgTester {
    loaded: Loaded,
}

impl ProgTester {
    /// Loads a fresh object (fresh maps) with a per-QP map of `max_qps` keys and `policy`.
    pub fn load(max_qps: u32, policy: &Policy) -> Result<ProgTester, LiveError> {
        Ok(ProgTester {
            loaded: Loaded::new(max_qps, policy, &prog::ALL, true)?,
        })
    }
    /// As [`ProgTester::load`], with the XDP program calling `bpf_xdp_get_buff_len` for
    /// multi-buffer frames instead of the kfunc path (to test that both count alike).
    pub fn load_helper_len(max_qps: u32, policy: &Policy) -> Result<ProgTester, LiveError> {
        Ok(ProgTester {
            loaded: Loaded::new(max_qps, policy, &prog::ALL, false)?,
        })
    }
    /// How the loaded XDP program takes a multi-buffer frame's length.
    pub fn xdp_len_path(&self) -> &XdpLenPath {
        &self.loaded.xdp_len
    }
    /// Runs the XDP program on one frame; returns the XDP action.
    pub fn run_xdp(&mut self, frame: &[u8]) -> Result<u32, LiveError> {
        Ok(self.run(prog::XDP, frame, 1)?.0)
    }
    /// Runs the tc program (egress when `egress`) on one frame; returns the tc action.
    pub fn run_tc(&mut self, frame: &[u8], egress: bool) -> Result<i32, LiveError> {
        let p = if egress {
            prog::TC_EGRESS
        } else {
            prog::TC_INGRESS
        };
        Ok(self.run(p, frame, 1)?.0 as i32)
    }
    /// Runs program `name` (one of [`prog`]) `repeat` times on `frame` in one BPF_PROG_TEST_RUN;
    /// returns its return value and the kernel's average time per run.
    pub fn run(
        &mut self,
        name: &str,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(u32, Duration), LiveError> {
        let opts = TestRunOptions {
            data_in: Some(frame),
            repeat,
            ..TestRunOptions::default()
        };
        let p = self
            .loaded
            .ebpf
            .program_mut(name)
            .ok_or_else(|| LiveError::Setup(format!("program {name} missing")))?;
        let r = match p {
            aya::programs::Program::Xdp(x) => x.test_run(opts),
            aya::programs::Program::SchedClassifier(c) => c.test_run(opts),
            _ => return Err(LiveError::Setup(format!("{name}: unexpected program type"))),
        };
        let r = r.map_err(|e| LiveError::op(format!("BPF_PROG_TEST_RUN {name}"), e))?;
        Ok((r.return_value, r.duration))
    }
    pub fn set_policy(&mut self, p: &Policy) -> Result<(), LiveError> {
        self.loaded.set_policy(p)
    }
    /// The maps' cumulative state (`iface` is the name put into the snapshot).
    pub fn snapshot(&mut self, iface: &str, time_ns: u64) -> Result<Snapshot, LiveError> {
        self.loaded.snapshot(iface, time_ns)
    }
    /// Every (key, value) in the per-QP table, each expanded afresh (times in monotonic ns),
    /// without touching the incremental read's state.
    pub fn read_all_qps(&mut self) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        self.loaded.read_qps(|_| {})
    }
    /// Writes into `key`'s slot as a program run would, setting its dirty bit if `mark` (see
    /// `QpTable::poke_slot`).
    pub fn poke_slot(
        &self,
        key: &QpKey,
        mark: bool,
        f: impl FnOnce(&mut observer_common::qp_table::QpSlot),
    ) -> bool {
        self.loaded.table.poke_slot(key, mark, f)
    }
    /// Slots the last snapshot expanded (the others' entries were kept from the recycled one).
    pub fn last_read_expansions(&self) -> usize {
        self.loaded.table.last_read_expansions()
    }
    /// Gives a snapshot back (the next snapshot updates it in place, as the live loop does).
    pub fn recycle(&mut self, snap: Snapshot) {
        self.loaded.recycle(snap)
    }
    pub fn evict(&mut self, keys: &[QpKey]) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        self.loaded.evict(keys)
    }
    pub fn drain_events(&mut self, out: &mut Vec<Event>) -> usize {
        self.loaded.drain_events(out)
    }
    /// Offending frames to sample per second on each CPU (0: none).
    pub fn set_sample_rate(&mut self, per_sec: u32) -> Result<(), LiveError> {
        self.loaded.set_sample_rate(per_sec)
    }
    /// The sampled offending frames since the last call (wall-clock times).
    pub fn drain_samples(&mut self, out: &mut Vec<Sample>) -> usize {
        self.loaded.drain_samples(out)
    }
    /// The live sampler's counts, summed over CPUs.
    pub fn sampler_counts(&self) -> Result<SamplerCounts, LiveError> {
        self.loaded.sampler_counts()
    }
    /// The PFC / PAUSE frame records since the last call (wall-clock times).
    pub fn drain_pauses(&mut self, out: &mut Vec<observer_common::maps::PauseEvent>) -> usize {
        self.loaded.drain_pauses(out)
    }
    /// A handle that runs program `name` from any thread (BPF_PROG_TEST_RUN runs on the calling
    /// thread's CPU): for the multi-CPU tests.
    pub fn shared_runner(&self, name: &str) -> Result<SharedRunner, LiveError> {
        let p = self
            .loaded
            .ebpf
            .program(name)
            .ok_or_else(|| LiveError::Setup(format!("program {name} missing")))?;
        let fd = match p {
            aya::programs::Program::Xdp(x) => x.fd(),
            aya::programs::Program::SchedClassifier(c) => c.fd(),
            _ => return Err(LiveError::Setup(format!("{name}: unexpected program type"))),
        }
        .map_err(|e| LiveError::op(name.to_string(), e))?;
        let fd = fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| LiveError::op(format!("{name}: dup"), e))?;
        Ok(SharedRunner { fd })
    }
    /// Starts the packet clock ticker as [`LiveIface`] runs it (until this tester is dropped):
    /// the programs then stamp first/last times from the `CLOCK` map instead of the coarse
    /// clock helper.
    pub fn start_clock(&mut self) -> Result<(), LiveError> {
        self.loaded.start_clock()
    }
    /// Whether the packet clock ticker thread runs.
    pub fn clock_running(&self) -> bool {
        self.loaded.clock_running()
    }
    /// Whether the packet clock ticks in the kernel.
    pub fn clock_in_kernel(&self) -> bool {
        self.loaded.clock_in_kernel()
    }
    /// Keys in the per-QP table (the kernel's count, decremented by evictions).
    pub fn table_len(&self) -> u64 {
        self.loaded.table.keys()
    }
    /// Takes (`held`) or lets go of every insert lock of the per-QP table, as a kernel inserter
    /// whose CPU stalled holding it would: for the tests of the inserts' wait and give-up.
    pub fn hold_insert_locks(&self, held: bool) {
        self.loaded.table.hold_insert_locks(held)
    }
    /// Packets in the table's spill values (see `observer_common::qp_table::QpSlot`).
    pub fn spilled_pkts(&self) -> u64 {
        self.loaded.table.spilled_pkts()
    }
    /// Entries in the per-QP table's `QPHIST` map: histogram buckets beyond their slot's cells
    /// (see `observer_common::qp_table::KValue`).
    pub fn hist_overflow_entries(&self) -> Result<usize, LiveError> {
        self.loaded
            .table
            .hist_overflow_entries()
            .map_err(|e| LiveError::op("reading QPHIST", e))
    }
    /// Instructions the verifier processed to accept program `name` (its limit is 1,000,000).
    pub fn verified_insns(&self, name: &str) -> Result<Option<u32>, LiveError> {
        let p = self
            .loaded
            .ebpf
            .program(name)
            .ok_or_else(|| LiveError::Setup(format!("program {name} missing")))?;
        let info = p
            .info()
            .map_err(|e| LiveError::op(format!("{name}: program info"), e))?;
        Ok(info.verified_instruction_count())
    }
    /// Empties every map and the event ring, so one loaded object serves several test cases.
    pub fn reset(&mut self) -> Result<(), LiveError> {
        self.loaded.reset()
    }
}

/// A loaded program's fd, usable from several threads at once (see
/// [`ProgTester::shared_runner`]).
pub struct SharedRunner {
    fd: std::os::fd::OwnedFd,
}

impl SharedRunner {
    /// Runs the program `repeat` times on `frame` on this thread's CPU; returns its return value.
    pub fn run(&self, frame: &[u8], repeat: u32) -> Result<u32, LiveError> {
        self.run_timed(frame, repeat).map(|(r, _)| r)
    }
    /// As [`SharedRunner::run`], with the kernel's average time per run.
    pub fn run_timed(&self, frame: &[u8], repeat: u32) -> Result<(u32, Duration), LiveError> {
        sys::prog_test_run(self.fd.as_raw_fd(), frame, repeat)
            .map(|(r, ns)| (r, Duration::from_nanos(ns as u64)))
            .map_err(|e| LiveError::op("BPF_PROG_TEST_RUN", e))
    }
}
