// The programs, maps and packet-path helpers, included at the crate root by `main.rs` for the
// BPF target only. (Included, not a module: the object's code stays exactly as it was built
// from the crate root, which the verifier-sensitive packet path relies on.)

use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_or, atomic_xadd, atomic_xchg};

use aya_ebpf::EbpfContext;
use aya_ebpf::bindings::{__sk_buff, xdp_action, xdp_md};
#[cfg(not(feature = "compat"))]
use aya_ebpf::helpers::generated::{bpf_loop, bpf_xdp_get_buff_len};
use aya_ebpf::helpers::generated::{
    bpf_get_smp_processor_id, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns, bpf_skb_pull_data,
};
use aya_ebpf::macros::{classifier, map, perf_event, xdp};
use aya_ebpf::maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf};
use aya_ebpf::programs::{PerfEventContext, TcContext, XdpContext};
use observer_common::cursor::Bytes;
#[cfg(not(feature = "compat"))]
use observer_common::maps::{XdpLenLayout, kfunc_call};
use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, Policy, QpKey, SAMPLE_SNAP, Sample,
    SamplerState, dir, policy_flags,
};
use observer_common::parse::{self, Frame, kind};
use observer_common::qp::{self, Ops, PsnStep};
use observer_common::qp_table::{self as table, Bucket, HistKey, KValue, QpSlot, WAYS};

/// Rare-path events reported through aya-log at debug level, in the object built with the
/// `kernel-log` feature, which userspace loads for `--log-level debug`. Each is also counted in
/// `IfaceStats`.
mod rare {
    pub const QP_MAP_FULL: u32 = 0;
    pub const MAC_MAP_FULL: u32 = 1;
    pub const PSN_CONTENDED: u32 = 2;
    pub const EVENTS_LOST: u32 = 3;
    pub const PAUSES_LOST: u32 = 4;
    pub const EXCLUDED: u32 = 5;
    pub const HIST_LOST: u32 = 6;
}

/// One rare-path event to the aya-log ring (a BPF-to-BPF call on cold paths only). `a` and `b`:
/// the direction and, for exclusions, the reason number.
#[cfg(feature = "kernel-log")]
#[inline(never)]
fn log_rare(kind: u32, a: u32, b: u32) {
    match kind {
        rare::QP_MAP_FULL => aya_log_ebpf::debug!(&(), "per-QP table full: a new QP key was not inserted (dir {})", a),
        rare::MAC_MAP_FULL => aya_log_ebpf::debug!(&(), "source MAC table full: a PFC/PAUSE sender was not inserted (dir {})", a),
        rare::PSN_CONTENDED => aya_log_ebpf::debug!(&(), "PSN update gave up under contention (dir {})", a),
        rare::EVENTS_LOST => aya_log_ebpf::debug!(&(), "event ring buffer full: an event was lost (dir {})", a),
        rare::PAUSES_LOST => aya_log_ebpf::debug!(&(), "PAUSES ring buffer full: a PFC/PAUSE record was lost (dir {})", a),
        rare::HIST_LOST => aya_log_ebpf::debug!(&(), "QPHIST full: a histogram bucket was not counted (dir {})", a),
        _ => aya_log_ebpf::debug!(&(), "frame excluded (dir {}): reason {}", a, b),
    }
}

/// Without the kernel-log feature (the default object): nothing.
#[cfg(not(feature = "kernel-log"))]
#[inline(always)]
fn log_rare(_kind: u32, _a: u32, _b: u32) {}

const TC_ACT_OK: i32 = 0;
const TC_ACT_SHOT: i32 = 2;
const BPF_NOEXIST: u64 = 1;
const EEXIST: i32 = 17;

/// Largest header offset the programs read at (the verifier needs a constant bound on the
/// variable packet offset). Headers beyond it read as truncated.
const MAX_OFF: usize = 1024;
/// Bytes tc makes linear before parsing (every header the parser reads, mirrored ones too).
const PULL_LEN: u32 = 256;

/// `BPF_F_MMAPABLE`: userspace maps the array's values into its address space.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Per-QP table (`observer_common::qp_table`): slots of keys and values, `QP_BUCKETS * WAYS`
/// entries (set at load by userspace), memory-mapped by userspace.
#[map]
static QPS: Array<QpSlot> = Array::with_max_entries(1024, BPF_F_MMAPABLE);

/// Per-QP table: the buckets' state words and insert locks (`QP_BUCKETS` entries).
#[map]
static QPIDX: Array<Bucket> = Array::with_max_entries(64, BPF_F_MMAPABLE);

/// Per-QP table: histogram buckets that found no free cell in their slot's compact value
/// (`table::KValue`), one count per (slot, histogram, bucket); `max_entries` set at load
/// (`table::hist_overflow_entries`). Rare: a QP uses few opcodes, DSCPs and PCPs.
#[map]
static QPHIST: HashMap<HistKey, u64> = HashMap::with_max_entries(1024, 0);

/// Per-QP table: keys in it (index 0); inserts stop at `QP_LIMIT`, evictions decrement it.
#[map]
static QPCOUNT: Array<u64> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-QP table: one bit per slot of `QPS` (`table::dirty_words` words, set at load), set by a
/// packet of the slot's key when it finds it clear; userspace takes each word with an atomic
/// exchange and reads only the slots whose bit was set, so a read costs the active keys, not
/// the tracked ones. Memory-mapped.
#[map]
static QPDIRTY: Array<u64> = Array::with_max_entries(16, BPF_F_MMAPABLE);

/// Per-CPU scratch words: values the verifier must not track go through them (see
/// [`launder`]).
#[map]
static SCRATCH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// `v`, written to and read back from map memory, whose contents the verifier does not track:
/// afterwards it is an unknown scalar. For values that differ between many paths that should
/// continue as one state (otherwise the code after them is verified once per path). -1 only
/// if the scratch map were missing (a plain integer, not an `Option`: LLVM spilled the
/// undefined payload of a `None` from a clobbered register, which the verifier rejects).
#[inline(always)]
fn launder(v: u32) -> i64 {
    match SCRATCH.get_ptr_mut(0) {
        // SAFETY: this CPU's scratch word.
        Some(p) => unsafe {
            core::ptr::write_volatile(p, v);
            core::ptr::read_volatile(p) as i64
        },
        None => -1,
    }
}

/// `v`, as an unknown scalar to the verifier, in two ALU instructions: `noise` is any value read
/// from map memory (whose contents the verifier does not track), added and taken off again
/// around an [`opaque`] step, so LLVM cannot cancel them and the verifier, which tracks ranges,
/// not sums, loses `v`'s range. [`launder`]'s purpose without its store and dependent reload on
/// the packet path.
#[inline(always)]
fn forget(v: u64, noise: u64) -> u64 {
    opaque(v.wrapping_add(noise)).wrapping_sub(noise)
}

/// Buckets of the per-QP table, set at load (read-only data: a constant to the verifier).
#[unsafe(no_mangle)]
static QP_BUCKETS: u32 = 64;

/// Most keys in the per-QP table (`--max-qps`), set at load.
#[unsafe(no_mangle)]
static QP_LIMIT: u32 = 1024;

/// Where the kernel keeps a multi-buffer frame's fragment length, set at load from the kernel's
/// BTF (read-only data: constants to the verifier, so the path not taken is never verified).
#[cfg(not(feature = "compat"))]
#[unsafe(no_mangle)]
static XDP_LEN: XdpLenLayout = XdpLenLayout {
    enabled: 0,
    flags_off: 0,
    hard_start_off: 0,
    frame_sz_off: 0,
    has_frags: 0,
    shinfo_size: 0,
    frags_size_off: 0,
    shinfo_btf_id: 0,
};

/// `bpf_cast_to_kern_ctx`: the loader rewrites this call into the kfunc call, which the
/// verifier replaces by `r0 = r1`.
#[cfg(not(feature = "compat"))]
#[inline(always)]
unsafe fn kern_ctx(ctx: *mut xdp_md) -> *const u8 {
    // SAFETY: a call number the loader turns into the kfunc (see `kfunc_call`).
    unsafe {
        let f: unsafe extern "C" fn(*mut xdp_md) -> *const u8 =
            core::mem::transmute(kfunc_call::CAST_TO_KERN_CTX as usize);
        f(ctx)
    }
}

/// `bpf_rdonly_cast`: as [`kern_ctx`]; loads through the result are fault-checked.
#[cfg(not(feature = "compat"))]
#[inline(always)]
unsafe fn rdonly_cast(addr: u64, btf_id: u32) -> *const u8 {
    // SAFETY: as in `kern_ctx`.
    unsafe {
        let f: unsafe extern "C" fn(u64, u32) -> *const u8 =
            core::mem::transmute(kfunc_call::RDONLY_CAST as usize);
        f(addr, btf_id)
    }
}

/// The frame's length with its fragments, as `bpf_xdp_get_buff_len` computes it, without the
/// helper call: `linear` (`data_end - data`) plus `skb_shared_info.xdp_frags_size` when the
/// buffer has fragments. Only for programs loaded with the kfunc path (`XDP_LEN.enabled`).
#[cfg(not(feature = "compat"))]
#[inline(always)]
fn xdp_len_kfunc(ctx: *mut xdp_md, linear: u32) -> u32 {
    // SAFETY: `XDP_LEN` is read-only data set at load from the kernel's BTF; the kfuncs give
    // typed pointers into the kernel's `xdp_buff` and the frame's shared info, whose loads the
    // verifier checks against those types.
    unsafe {
        let l = &XDP_LEN;
        let kern = kern_ctx(ctx);
        let flags = core::ptr::read_volatile(
            kern.add(core::ptr::read_volatile(&l.flags_off) as usize) as *const u32,
        );
        if flags & core::ptr::read_volatile(&l.has_frags) == 0 {
            return linear;
        }
        let hard = core::ptr::read_volatile(
            kern.add(core::ptr::read_volatile(&l.hard_start_off) as usize) as *const u64,
        );
        let frame_sz = core::ptr::read_volatile(
            kern.add(core::ptr::read_volatile(&l.frame_sz_off) as usize) as *const u32,
        );
        let shinfo = rdonly_cast(
            hard + frame_sz as u64 - core::ptr::read_volatile(&l.shinfo_size) as u64,
            core::ptr::read_volatile(&l.shinfo_btf_id),
        );
        let frags = core::ptr::read_volatile(
            shinfo.add(core::ptr::read_volatile(&l.frags_size_off) as usize) as *const u32,
        );
        linear + frags
    }
}

/// The frame's length with its fragments: through [`xdp_len_kfunc`] where the loader enabled
/// it, else the helper.
#[cfg(not(feature = "compat"))]
#[inline(always)]
fn xdp_len(ctx: *mut xdp_md, linear: u32) -> u32 {
    // SAFETY: read-only data set at load.
    if unsafe { core::ptr::read_volatile(&XDP_LEN.enabled) } != 0 {
        xdp_len_kfunc(ctx, linear)
    } else {
        // SAFETY: the program's context.
        unsafe { bpf_xdp_get_buff_len(ctx) as u32 }
    }
}

/// The compat object (kernels before 5.18) loads `roce_xdp` without `xdp.frags`: the driver
/// then hands it single-buffer frames only (it refuses such a program on MTUs above a page), so
/// the linear length is the frame's length, and neither the helper nor the kfuncs are needed.
#[cfg(feature = "compat")]
#[inline(always)]
fn xdp_len(_ctx: *mut xdp_md, linear: u32) -> u32 {
    linear
}

/// Per-direction counters of this interface (one loaded object per interface).
#[map]
static IFACE: PerCpuArray<IfaceStats> = PerCpuArray::with_max_entries(dir::COUNT as u32, 0);

/// PFC / PAUSE counters per source MAC and direction (`max_entries` set at load).
#[map]
static MACS: PerCpuHashMap<MacKey, PfcCounters> = PerCpuHashMap::with_max_entries(1024, 0);

/// Expected marking, written by userspace (index 0).
#[map]
static POLICY: Array<Policy> = Array::with_max_entries(1, 0);

/// First occurrences per key for the live alerts (`byte_size` set at load).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// One record per PFC / PAUSE frame, for the pause time and XOFF peak that counters cannot give
/// (`byte_size` set at load).
#[map]
static PAUSES: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Live evidence (`roce-observe --evidence`): offending frames sampled by [`take_sample`] and
/// copied by the hook ([`sample_xdp`], [`sample_skb`]) (`byte_size` set at load).
#[map]
static SAMPLES: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// The live sampler's state on this CPU (index 0): the second's budget, the frame chosen for
/// the hook to copy, and the counts of what was sampled and left out.
#[map]
static SAMPLER: PerCpuArray<SamplerState> = PerCpuArray::with_max_entries(1, 0);

/// Offending frames sampled per second on each CPU (index 0), written by userspace; 0 (the
/// default): no sampling, and an offending packet costs one array load more.
#[map]
static SAMPLE_RATE: Array<u32> = Array::with_max_entries(1, 0);

/// What [`account`] asks of its hook.
mod acct {
    /// Drop the frame (drop-after-observe).
    pub const DROP: u32 = 1;
    /// Copy the frame into the `SAMPLES` ring ([`super::take_sample`] chose it).
    pub const SAMPLE: u32 = 2;
}

/// The classified frame of the current program run (a `Frame` is too large to copy around on
/// the 512-byte stack).
#[map]
static FRAME: PerCpuArray<Frame> = PerCpuArray::with_max_entries(1, 0);

/// The packet clock (index 0): CLOCK_MONOTONIC ns, written every millisecond by [`clock_tick`]
/// (or a userspace thread where perf events are unavailable), so the per-packet time is an inlined array load instead of
/// a helper call. 0 (no ticker: BPF_PROG_TEST_RUN in tests) falls back to the coarse clock.
#[map]
static CLOCK: Array<u64> = Array::with_max_entries(1, 0);

/// The packet clock's ticker in the kernel: attached to a software CPU-clock perf event of one
/// CPU firing every millisecond, it writes CLOCK_MONOTONIC into [`CLOCK`], so the clock goes on
/// while roce-observe itself is stopped (SIGSTOP, a debugger, a starved thread). Userspace
/// falls back to a ticker thread where perf events cannot be opened.
#[perf_event]
pub fn clock_tick(_ctx: PerfEventContext) -> u32 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = CLOCK.get_ptr_mut(0) {
        // SAFETY: the map's one value; an aligned 8-byte store, read whole by the programs.
        unsafe { core::ptr::write_volatile(p, now) };
    }
    0
}

/// One all-zero value, never written: the source of new MAC keys' initial values (too large
/// for the 512-byte stack).
#[map]
static ZERO: Array<PfcCounters> = Array::with_max_entries(1, 0);

/// `qp::Ops` with BPF atomic instructions (BPF_ATOMIC ADD, OR | FETCH and CMPXCHG, which need
/// the ALU32 feature of cpu v3 for their 32-bit forms, see build.rs; the PSN state's CMPXCHG is
/// the 64-bit one).
#[derive(Clone, Copy, Default)]
struct Atomic;

impl Ops for Atomic {
    #[inline(always)]
    unsafe fn add64(&self, p: *mut u64, v: u64) {
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
    }
    #[inline(always)]
    unsafe fn add32(&self, p: *mut u32, v: u32) {
        unsafe { atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(p, v) };
    }
    #[inline(always)]
    unsafe fn cas32(&self, p: *mut u32, old: u32, new: u32) -> u32 {
        unsafe {
            atomic_cxchg::<u32, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(p, old, new)
                .0
        }
    }
    #[inline(always)]
    unsafe fn cas64(&self, p: *mut u64, old: u64, new: u64) -> u64 {
        unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(p, old, new)
                .0
        }
    }
    #[inline(always)]
    unsafe fn or32(&self, p: *mut u32, v: u32) -> u32 {
        unsafe { atomic_or::<u32, u32, { AtomicOrdering::SeqCst }>(p, v) }
    }
    #[inline(always)]
    fn index(&self, i: usize, n: usize) -> usize {
        let i = opaque(i as u64) as usize;
        if i < n { i } else { n - 1 }
    }
    #[inline(always)]
    fn unknown32(&self, v: u32) -> u32 {
        launder(v) as u32
    }
}

/// [`Atomic`], hiding values from the verifier with [`forget`] (`noise`: any value read from map
/// memory) instead of a round trip through `SCRATCH`: the ops of the per-QP update's counts.
#[derive(Clone, Copy)]
struct AtomicForget {
    noise: u64,
}

impl Ops for AtomicForget {
    #[inline(always)]
    unsafe fn add64(&self, p: *mut u64, v: u64) {
        unsafe { Atomic.add64(p, v) }
    }
    #[inline(always)]
    unsafe fn add32(&self, p: *mut u32, v: u32) {
        unsafe { Atomic.add32(p, v) }
    }
    #[inline(always)]
    unsafe fn cas32(&self, p: *mut u32, old: u32, new: u32) -> u32 {
        unsafe { Atomic.cas32(p, old, new) }
    }
    #[inline(always)]
    unsafe fn cas64(&self, p: *mut u64, old: u64, new: u64) -> u64 {
        unsafe { Atomic.cas64(p, old, new) }
    }
    #[inline(always)]
    unsafe fn or32(&self, p: *mut u32, v: u32) -> u32 {
        unsafe { Atomic.or32(p, v) }
    }
    #[inline(always)]
    fn index(&self, i: usize, n: usize) -> usize {
        Atomic.index(i, n)
    }
    #[inline(always)]
    fn unknown32(&self, v: u32) -> u32 {
        forget(v as u64, self.noise) as u32
    }
}

/// `v`, opaque to LLVM (it cannot relate it to anything it knows) at no cost: an empty inline
/// assembly statement, not `core::hint::black_box`, which goes through the stack (a store and
/// a dependent reload, ~1 ns on every header load). The shared one, also behind
/// `observer_common::verifier::index`.
use observer_common::verifier::opaque;

/// XDP frame bytes: direct packet access, offset clamped to [`MAX_OFF`].
struct XdpBytes {
    data: usize,
    end: usize,
}

impl Bytes for XdpBytes {
    #[inline(always)]
    fn len(&self) -> usize {
        self.end - self.data
    }

    #[inline(always)]
    fn load<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        packet_load(self.data, self.end, off)
    }
}

/// `N` bytes at `off` of the packet data `[data, end)` (direct packet access), or `None` past
/// `end` or [`MAX_OFF`]: both contexts' [`Bytes::load`].
#[inline(always)]
fn packet_load<const N: usize>(data: usize, end: usize, off: usize) -> Option<[u8; N]> {
    // Opaque to LLVM, so it cannot merge this bounds check into another load's (the verifier
    // checks each access against data_end on its own).
    let off = opaque(off as u64) as usize;
    if off > MAX_OFF {
        return None;
    }
    let p = data + off;
    if p + N > end {
        return None;
    }
    // SAFETY: [p, p + N) is inside the packet (checked against data_end just above).
    Some(unsafe { wide_read::<N>(p) })
}

/// `N` packet bytes at `p` in as few loads as fit (8, 4, 2, then 1 byte wide), through inline
/// assembly: LLVM's BPF backend, without misaligned access (whose stack stores the verifier
/// rejects), reads `[u8; N]` byte by byte, and builds every 16- and 32-bit field back from the
/// bytes. The kernel allows misaligned packet loads where the CPU does them efficiently (x86-64,
/// arm64). Loads whose bytes go unused are dropped (`pure`).
///
/// # Safety
/// `[p, p + N)` is inside the packet, checked against `data_end` in this program run.
#[inline(always)]
unsafe fn wide_read<const N: usize>(p: usize) -> [u8; N] {
    let mut out = [0u8; N];
    let mut i = 0;
    // One `W`-byte load at `p + i` into `out[i..i + W]` (the asm type names the width).
    macro_rules! chunk {
        ($ty:literal, $w:literal) => {{
            let v: u64;
            // SAFETY: inside the checked range (caller).
            unsafe {
                core::arch::asm!(concat!("{0} = *(", $ty, " *)({1} + 0)"), lateout(reg) v,
                    in(reg) p + i, options(pure, readonly, nostack, preserves_flags));
            }
            out[i..i + $w].copy_from_slice(&v.to_le_bytes()[..$w]);
            i += $w;
        }};
    }
    while i + 8 <= N {
        chunk!("u64", 8);
    }
    if i + 4 <= N {
        chunk!("u32", 4);
    }
    if i + 2 <= N {
        chunk!("u16", 2);
    }
    if i < N {
        // SAFETY: as above.
        out[i] = unsafe { *((p + i) as *const u8) };
    }
    out
}

/// tc frame bytes: direct access to the linear part (see [`parse_skb`], which pulls the headers
/// into it first); bytes past the linear part read as truncated. Kept apart from [`XdpBytes`]
/// on purpose (the loads are shared: [`packet_load`]): one shared struct for both changed
/// LLVM's code enough for the verifier to reject `roce_xdp` ("pointer arithmetic with <<=
/// operator prohibited"; tried).
struct SkbBytes {
    data: usize,
    end: usize,
    len: usize,
}

impl Bytes for SkbBytes {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn load<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        packet_load(self.data, self.end, off)
    }
}

#[inline(always)]
fn count(s: *mut IfaceStats, f: impl FnOnce(&mut IfaceStats)) {
    // SAFETY: per-CPU slot of this program run (no other writer on this CPU meanwhile).
    f(unsafe { &mut *s })
}

/// Sends one event per bit of `out.new_events` (first occurrences of this key).
#[inline(always)]
fn emit(s: *mut IfaceStats, key: &QpKey, f: &Frame, out: &qp::Outcome) {
    let bits = out.new_events;
    let gap = out.gap;
    for b in 0..qp::ev::COUNT {
        if bits & (1 << b) != 0 {
            let detail = if b == qp::ev::PSN_GAP {
                gap
            } else if b == qp::ev::NAK || b == qp::ev::RNR_NAK {
                f.aeth
            } else {
                0
            };
            send_event(s, key, f, b, detail);
        }
    }
}

/// One ring buffer record (a BPF-to-BPF call: the body is not copied per event bit).
/// BPF calls take at most 5 arguments, so the time is read again here (events are rare).
#[inline(never)]
fn send_event(s: *mut IfaceStats, key: &QpKey, f: &Frame, kind: u32, detail: u32) {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    match EVENTS.reserve::<Event>(0) {
        Some(mut e) => {
            e.write(Event {
                ts_ns: now,
                key: *key,
                kind,
                psn: f.bth.psn,
                detail,
                opcode: f.bth.opcode,
                dscp: f.dscp,
                ecn: f.ecn,
                pcp: f.pcp,
            });
            e.submit(0);
        }
        None => {
            count(s, |s| s.events_lost += 1);
            log_rare(rare::EVENTS_LOST, key.dir as u32, 0);
        }
    }
}

/// First/last packet times: the ticked [`CLOCK`] (1 ms resolution plus the ticker's
/// scheduling delay), else the coarse monotonic clock (a tick's resolution, 1-4 ms). A helper
/// call costs ~8 ns and the coarse clock ~18 ns per packet on the benchmark machine; the precise
/// `bpf_ktime_get_ns` ~25 ns. Flow logs and idle eviction need no better; events carry the
/// precise time. Read at the top of [`roce`]: read after the QPS lookup, LLVM emitted code the
/// verifier rejected (pointer arithmetic with a shift).
#[inline(always)]
fn packet_time() -> u64 {
    match CLOCK.get(0) {
        Some(&t) if t != 0 => t,
        // SAFETY: no preconditions.
        _ => unsafe { bpf_ktime_get_coarse_ns() },
    }
}

/// Slot index of `key` in bucket `b` (its state word equal to the key's tag and the key equal).
#[inline(always)]
fn find_in(b: u32, tag: u32, key: &QpKey) -> Option<u32> {
    let bk = QPIDX.get_ptr(b)?;
    let mut w = 0;
    while w < WAYS {
        // SAFETY: `bk` points into the QPIDX array; the state word is read once.
        let st = unsafe { core::ptr::read_volatile(&(*bk).st[w]) };
        if st == tag {
            let i = b * WAYS as u32 + w as u32;
            let sl = QPS.get_ptr(i)?;
            // SAFETY: a QPS slot; its key was written before its tag was published.
            if table::key_eq(unsafe { &(*sl).key }, key) {
                return Some(i);
            }
        }
        w += 1;
    }
    None
}

/// `key`'s slot (`h` its hash), inserting the key when new; `None` (counted) when it cannot be
/// inserted.
#[inline(always)]
fn qp_slot(s: *mut IfaceStats, key: &QpKey, h: u64, noise: u64) -> Option<(*mut QpSlot, u32)> {
    // SAFETY: read-only data set at load.
    let n = unsafe { core::ptr::read_volatile(&QP_BUCKETS) };
    let (b1, b2) = table::buckets(h, n);
    let tag = table::tag(h);
    let mut r = match find_in(b1, tag, key) {
        Some(i) => i as i64,
        None => -1,
    };
    if r < 0
        && b2 != b1
        && let Some(i) = find_in(b2, tag, key)
    {
        r = i as i64;
    }
    if r < 0 {
        r = insert(key, h);
        if r < 0 {
            count(s, |s| {
                s.qp_insert_failed += 1;
                s.roce_untracked += 1;
            });
            log_rare(rare::QP_MAP_FULL, key.dir as u32, 0);
            return None;
        }
    }
    // The slot index arrives on ~30 paths (one per bucket and way, each with its own known
    // range): forgotten, they continue as one state and the per-QP update is verified once,
    // not once per path.
    let i = forget(r as u64, noise) as u32;
    QPS.get_ptr_mut(i).map(|p| (p, i))
}

/// Inserts `key` (hash `h`) under the insert lock of its first bucket; returns its slot, or -1
/// when the table holds `QP_LIMIT` keys, both buckets are full or the lock stayed taken.
/// A BPF-to-BPF call: rare, and kept out of the packet path's code.
#[inline(never)]
fn insert(key: &QpKey, h: u64) -> i64 {
    // SAFETY: read-only data set at load.
    let (n, limit) = unsafe {
        (
            core::ptr::read_volatile(&QP_BUCKETS),
            core::ptr::read_volatile(&QP_LIMIT),
        )
    };
    let (b1, b2) = table::buckets(h, n);
    let tag = table::tag(h);
    let (Some(bk1), Some(bk2), Some(cnt)) = (
        QPIDX.get_ptr_mut(b1),
        QPIDX.get_ptr_mut(b2),
        QPCOUNT.get_ptr_mut(0),
    ) else {
        return -1;
    };
    // SAFETY: pointers into QPIDX / QPCOUNT; every shared word is accessed atomically.
    unsafe {
        let lock = core::ptr::addr_of_mut!((*bk1).lock);
        if Atomic.cas32(lock, 0, 1) != 0 && !wait_for_lock(b1) {
            return -1;
        }
        // Inserted by another CPU since our lookup?
        let mut found = find_in(b1, tag, key);
        if found.is_none() && b2 != b1 {
            found = find_in(b2, tag, key);
        }
        let r = match found {
            Some(i) => i as i64,
            None => {
                if atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(cnt, 1) >= limit as u64 {
                    atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(cnt, u64::MAX);
                    -1
                } else {
                    let r = claim(bk1, bk2, b1, b2, key, tag);
                    if r < 0 {
                        atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(cnt, u64::MAX);
                    }
                    r
                }
            }
        };
        atomic_xchg::<u32, { AtomicOrdering::SeqCst }>(lock, 0);
        r
    }
}

/// [`wait_for_lock`]'s state, on the waiting program's stack.
#[cfg(not(feature = "compat"))]
#[repr(C)]
struct LockWait {
    /// The bucket whose lock is wanted.
    bucket: u32,
    /// 1 once it is held.
    got: u32,
}

/// Waits for the insert lock of bucket `b` and takes it; false if it stayed held for
/// [`table::LOCK_WAIT_LOOPS`] attempts (its holder's CPU stalled for milliseconds).
///
/// The attempts run in a `bpf_loop`: the verifier checks its callback once, where a bounded
/// loop in the program would be checked once per iteration, so the wait can be long enough
/// to ride out a descheduled vCPU (the holder keeps the lock for well under a microsecond when
/// it runs). The kernel inlines the loop; an uncontended insert never gets here.
#[cfg(not(feature = "compat"))]
#[inline(never)]
fn wait_for_lock(b: u32) -> bool {
    let mut w = LockWait { bucket: b, got: 0 };
    // SAFETY: the callback is a BPF function of the signature bpf_loop expects; `w` outlives
    // the call.
    unsafe {
        bpf_loop(
            table::LOCK_WAIT_LOOPS,
            lock_wait_step as *mut core::ffi::c_void,
            core::ptr::addr_of_mut!(w) as *mut core::ffi::c_void,
            0,
        );
        core::ptr::read_volatile(&w.got) != 0
    }
}

/// [`wait_for_lock`] in the compat object (kernels before 5.17 have no `bpf_loop`): a bounded
/// loop of [`table::LOCK_WAIT_LOOPS_COMPAT`] attempts, which the verifier checks once per
/// iteration, so the wait is short (a holder descheduled for longer makes the insert fail,
/// counted `qp_insert_failed`).
#[cfg(feature = "compat")]
#[inline(never)]
fn wait_for_lock(b: u32) -> bool {
    let Some(bk) = QPIDX.get_ptr_mut(b) else {
        return false;
    };
    // SAFETY: a bucket of QPIDX; the lock word is only accessed atomically.
    let lock = unsafe { core::ptr::addr_of_mut!((*bk).lock) };
    let mut i = 0;
    while i < table::LOCK_WAIT_LOOPS_COMPAT {
        // SAFETY: as above.
        if unsafe { core::ptr::read_volatile(lock) == 0 && Atomic.cas32(lock, 0, 1) == 0 } {
            return true;
        }
        i += 1;
    }
    false
}

/// One attempt of [`wait_for_lock`]: 1 (stop) once the lock is taken, else 0.
#[cfg(not(feature = "compat"))]
extern "C" fn lock_wait_step(_i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    let w = ctx as *mut LockWait;
    // SAFETY: `ctx` is the caller's LockWait (bpf_loop passes it through).
    let b = unsafe { core::ptr::read_volatile(&(*w).bucket) };
    let Some(bk) = QPIDX.get_ptr_mut(b) else {
        return 1;
    };
    // SAFETY: a bucket of QPIDX; the lock word is only accessed atomically (test, then
    // test-and-set, so waiters read a shared cache line until the holder lets go).
    unsafe {
        let lock = core::ptr::addr_of_mut!((*bk).lock);
        if core::ptr::read_volatile(lock) == 0 && Atomic.cas32(lock, 0, 1) == 0 {
            core::ptr::write_volatile(&mut (*w).got, 1);
            return 1;
        }
    }
    0
}

/// Claims a free way of the emptier of the two buckets (the first on a tie), writes the key and
/// publishes its tag. -1 when both are full.
///
/// # Safety
/// `bk1`, `bk2` point to buckets `b1`, `b2` of QPIDX.
#[inline(always)]
unsafe fn claim(
    bk1: *mut Bucket,
    bk2: *mut Bucket,
    b1: u32,
    b2: u32,
    key: &QpKey,
    tag: u32,
) -> i64 {
    let used = |bk: *mut Bucket| {
        let mut u = 0;
        let mut w = 0;
        while w < WAYS {
            // SAFETY: inside the bucket.
            if unsafe { core::ptr::read_volatile(&(*bk).st[w]) } != table::EMPTY {
                u += 1;
            }
            w += 1;
        }
        u
    };
    // Laundered: counted along each path the counts are constants, and comparing constants
    // would make the verifier keep apart all 2^15 ways of reaching each count.
    let (u1, u2) = (launder(used(bk1)), launder(used(bk2)));
    let (first, fb, second, sb) = if b2 != b1 && u2 < u1 {
        (bk2, b2, bk1, b1)
    } else {
        (bk1, b1, bk2, b2)
    };
    for (bk, b) in [(first, fb), (second, sb)] {
        let mut w = 0;
        while w < WAYS {
            // SAFETY: inside the bucket; the claim is a compare-and-swap (another key's insert,
            // under another bucket's lock, may claim the same way).
            let st = unsafe { core::ptr::addr_of_mut!((*bk).st[w]) };
            if unsafe { core::ptr::read_volatile(st) } == table::EMPTY
                && unsafe { Atomic.cas32(st, table::EMPTY, table::BUSY) } == table::EMPTY
            {
                let i = b * WAYS as u32 + w as u32;
                let Some(sl) = QPS.get_ptr_mut(i) else {
                    // Unreachable (i < QP_BUCKETS * WAYS): give the way back.
                    unsafe { atomic_xchg::<u32, { AtomicOrdering::SeqCst }>(st, table::EMPTY) };
                    return -1;
                };
                // SAFETY: the slot is ours (BUSY); its value is zero (a freed slot is zeroed
                // by userspace before it is marked EMPTY). The inserting CPU owns the value's
                // counters (see `QpSlot`). The exchange is a full barrier: key and owner are
                // visible before the tag.
                unsafe {
                    (*sl).key = *key;
                    (*sl).owner = bpf_get_smp_processor_id() + 1;
                    atomic_xchg::<u32, { AtomicOrdering::SeqCst }>(st, tag);
                }
                return i as i64;
            }
            w += 1;
        }
        if b2 == b1 {
            break;
        }
    }
    -1
}

/// Accounts RoCE packet `f` to its key; [`acct::SAMPLE`] when the live sampler chose it.
#[inline(always)]
fn roce(s: *mut IfaceStats, f: &Frame, wire_len: u32, d: u8, policy: &Policy) -> u32 {
    let now = packet_time();
    let w = table::key_words(f, d);
    let key = table::key_of(&w);
    // Map memory the verifier does not track, for `forget`.
    // SAFETY: this CPU's counters of this program run.
    let noise = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*s).frames)) };
    let Some((sl, slot)) = qp_slot(s, &key, table::hash_words(&w), noise) else {
        return 0;
    };
    // The slot's dirty word, loaded before the update so that a cache miss on it overlaps the
    // update's own; its bit set after it, if it was clear. Forgotten: one state for the
    // verifier through the update whatever the word (else the update would be verified once
    // per outcome of the lookup and the test, and the object with logging on would pass the
    // verifier's budget of 1,000,000 instructions).
    let seen = forget(dirty_word(slot), noise);
    // SAFETY: `sl` points to a live slot of QPS. Its value's counters are written with plain
    // instructions only on its owner CPU (one program run at a time per CPU); other CPUs write
    // the spill value's counters with atomic ones; the state fields are always written
    // atomically (see `QpSlot`).
    let out = unsafe {
        // Inlined by the kernel (a per-CPU variable load).
        let me = bpf_get_smp_processor_id() + 1;
        let other = (core::ptr::read_volatile(core::ptr::addr_of!((*sl).owner)) != me) as u32;
        // Forgotten: one state for the verifier whichever CPU runs (else the update would be
        // verified twice); 0 = the owner, 1 = spill.
        let m = (forget(other as u64, noise) as u32) & 1;
        let value = core::ptr::addr_of_mut!((*sl).value);
        let counts =
            (value as *mut u8).add(m as usize * core::mem::size_of::<KValue>()) as *mut KValue;
        let ops = qp::Mixed {
            atomic: AtomicForget { noise },
            use_atomic: m,
        };
        qp::update_split(&ops, counts, &Atomic, value, f, wire_len, now, policy)
    };
    if out.psn == PsnStep::Contended {
        count(s, |s| s.psn_contended += 1);
        log_rare(rare::PSN_CONTENDED, d as u32, 0);
    }
    if out.overflow != 0 {
        hist_overflow(s, f, slot, out.overflow, d as u32);
    }
    // Forgotten: the bits are known along each path of the update (a gap's, a NAK's), and
    // carried through the event emission they would keep those paths apart (the object with
    // logging on then passed the verifier's budget).
    let offenses = forget(out.offenses as u64, noise) as u32;
    if out.new_events != 0 {
        emit(s, &key, f, &out);
    }
    let mut sample = 0;
    if offenses != 0
        && let Some(&rate) = SAMPLE_RATE.get(0)
        && rate != 0
    {
        sample = forget(take_sample(&key, offenses, wire_len, rate) as u64, noise) as u32;
    }
    let bit = 1u64 << (slot % 64);
    if seen & bit == 0
        && let Some(w) = QPDIRTY.get_ptr_mut(slot / 64)
    {
        // SAFETY: a word of QPDIRTY; userspace clears words with an atomic exchange, the
        // programs set bits with an atomic OR.
        unsafe { atomic_or::<u64, u64, { AtomicOrdering::SeqCst }>(w, bit) };
    }
    sample
}

/// Whether this CPU's budget of `rate` samples in the current second allows one more: if so,
/// the frame (`key`, its `offenses` and `wire_len`) is noted in `SAMPLER` for the hook to copy
/// and [`acct::SAMPLE`] is returned, else it is counted `over_rate`. A BPF-to-BPF call: taken
/// for offending packets only, with sampling on.
#[inline(never)]
fn take_sample(key: &QpKey, offenses: u32, wire_len: u32, rate: u32) -> u32 {
    let Some(st) = SAMPLER.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: this CPU's sampler state (one program run at a time per CPU).
    unsafe {
        if now.wrapping_sub((*st).window_ns) >= 1_000_000_000 {
            (*st).window_ns = now;
            (*st).taken = 0;
        }
        if (*st).taken >= rate {
            (*st).over_rate += 1;
            return 0;
        }
        (*st).taken += 1;
        (*st).pending = offenses;
        (*st).key = *key;
        (*st).wire_len = wire_len;
        (*st).ts_ns = now;
    }
    acct::SAMPLE
}

/// Copies the frame [`take_sample`] chose (`[data, end)`: the bytes the hook sees; `vlan`: a tag
/// the driver took out of them, as `(present, proto, tci)`) into the `SAMPLES` ring: its first
/// [`SAMPLE_SNAP`] bytes, in 8-byte loads then 4, 2, 1. A full ring is counted `lost`.
#[inline(always)]
fn send_sample(data: usize, end: usize, vlan: (u32, u32, u32)) {
    let Some(st) = SAMPLER.get_ptr_mut(0) else {
        return;
    };
    let Some(mut e) = SAMPLES.reserve::<Sample>(0) else {
        // SAFETY: this CPU's sampler state.
        unsafe {
            (*st).lost += 1;
            (*st).pending = 0;
        }
        return;
    };
    let p = e.as_mut_ptr();
    // SAFETY: `p` is the reserved record (size_of::<Sample>() bytes, 8-aligned, `bytes` at an
    // 8-aligned offset: a test in observer-common); every store is inside it; `st` is this
    // CPU's sampler state.
    unsafe {
        let b = core::ptr::addr_of_mut!((*p).bytes) as *mut u8;
        let mut n = 0usize;
        let mut k = 0usize;
        while k < SAMPLE_SNAP / 8 {
            match packet_load::<8>(data, end, n) {
                Some(v) => {
                    (b.add(n) as *mut u64).write(u64::from_ne_bytes(v));
                    n += 8;
                }
                None => break,
            }
            k += 1;
        }
        if n + 4 <= SAMPLE_SNAP
            && let Some(v) = packet_load::<4>(data, end, n)
        {
            (b.add(n) as *mut u32).write(u32::from_ne_bytes(v));
            n += 4;
        }
        if n + 2 <= SAMPLE_SNAP
            && let Some(v) = packet_load::<2>(data, end, n)
        {
            (b.add(n) as *mut u16).write(u16::from_ne_bytes(v));
            n += 2;
        }
        // The last byte as the second of a 2-byte load (n >= 8: every sampled frame is a
        // RoCE packet): a 1-byte load's bounds check (`p + 1 > end`) reaches the verifier as
        // `p >= end`, which does not give it the byte.
        if n < SAMPLE_SNAP
            && n >= 1
            && let Some(v) = packet_load::<2>(data, end, n - 1)
        {
            b.add(n).write(v[1]);
            n += 1;
        }
        core::ptr::addr_of_mut!((*p).ts_ns).write((*st).ts_ns);
        core::ptr::addr_of_mut!((*p).key).write((*st).key);
        core::ptr::addr_of_mut!((*p).offenses).write((*st).pending);
        core::ptr::addr_of_mut!((*p).wire_len).write((*st).wire_len);
        core::ptr::addr_of_mut!((*p).cap_len).write(n as u16);
        core::ptr::addr_of_mut!((*p).vlan_present).write(vlan.0 as u8);
        core::ptr::addr_of_mut!((*p).vlan_proto).write(vlan.1 as u16);
        core::ptr::addr_of_mut!((*p).vlan_tci).write(vlan.2 as u16);
        core::ptr::addr_of_mut!((*p)._pad).write([0]);
        (*st).sampled += 1;
        (*st).pending = 0;
    }
    e.submit(0);
}

/// [`send_sample`] from the XDP hook (a BPF-to-BPF call: rare).
#[inline(never)]
fn sample_xdp(ctx: *mut xdp_md) {
    // Opaque, as in `parse_xdp`: the context loads stay here.
    let ctx = core::hint::black_box(ctx);
    // SAFETY: the program's context.
    let (data, end) = unsafe { ((*ctx).data as usize, (*ctx).data_end as usize) };
    send_sample(data, end, (0, 0, 0));
}

/// [`send_sample`] from a tc hook, with the tag the driver took out of the frame (VLAN
/// offload), if any (a BPF-to-BPF call: rare).
#[inline(never)]
fn sample_skb(skb: *mut __sk_buff) {
    let skb = core::hint::black_box(skb);
    // SAFETY: the program's context: fields tc programs may read.
    let (data, end, vlan) = unsafe {
        (
            (*skb).data as usize,
            (*skb).data_end as usize,
            ((*skb).vlan_present, (*skb).vlan_proto, (*skb).vlan_tci),
        )
    };
    send_sample(data, end, vlan);
}

/// Slot `slot`'s word of `QPDIRTY` (all ones if the lookup fails: nothing is set): one load of
/// a dense array; [`roce`] sets the slot's bit after the packet's writes when it was clear (an
/// atomic OR about once per key and read). A run that finds the bit set sets nothing, and its
/// load is not ordered with its writes: userspace, after taking the bits, waits for an RCU
/// grace period (every run that began before has ended, its writes visible) before it reads
/// the slots.
#[inline(always)]
fn dirty_word(slot: u32) -> u64 {
    match QPDIRTY.get(slot / 64) {
        // SAFETY: a word of QPDIRTY the map lookup gave; read once (other CPUs set its bits
        // atomically).
        Some(w) => unsafe { core::ptr::read_volatile(w) },
        None => u64::MAX,
    }
}

/// Counts the histogram buckets of packet `f` that found no free cell in slot `slot`'s compact
/// value (`bits`: `table::hist` bits) in `QPHIST`, with atomic adds; a bucket that finds the
/// map full is counted `hist_overflow_lost`. A BPF-to-BPF call: rare.
#[inline(never)]
fn hist_overflow(s: *mut IfaceStats, f: &Frame, slot: u32, bits: u32, d: u32) {
    let tags = qp::hist_tags(f);
    for h in 0..table::hist::COUNT {
        if bits & (1 << h) == 0 {
            continue;
        }
        let key = HistKey {
            slot,
            hist: h,
            tag: tags[h as usize],
            _pad: 0,
        };
        let mut p = QPHIST.get_ptr_mut(&key);
        if p.is_none() {
            // Whatever the insert's result (EEXIST: another CPU inserted the key meanwhile; the
            // map full), the second lookup tells whether there is a count to add to.
            let _ = QPHIST.insert(&key, &0, BPF_NOEXIST);
            p = QPHIST.get_ptr_mut(&key);
        }
        match p {
            // SAFETY: a value of QPHIST; other CPUs add to it atomically too.
            Some(p) => unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(p, 1);
            },
            None => {
                count(s, |s| s.hist_overflow_lost += 1);
                log_rare(rare::HIST_LOST, d, 0);
            }
        }
    }
}

/// A PFC / PAUSE frame to the `PAUSES` ring (a BPF-to-BPF call, off the RoCE path).
#[inline(never)]
fn send_pause(s: *mut IfaceStats, f: &Frame, d: u8) {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(ev) = PauseEvent::of(&f.mac_ctrl, now, d) else {
        return;
    };
    match PAUSES.reserve::<PauseEvent>(0) {
        Some(mut e) => {
            e.write(ev);
            e.submit(0);
        }
        None => {
            count(s, |s| s.pause_events_lost += 1);
            log_rare(rare::PAUSES_LOST, d as u32, 0);
        }
    }
}

#[inline(always)]
fn mac_control(s: *mut IfaceStats, f: &Frame, d: u8) {
    send_pause(s, f, d);
    let key = MacKey {
        mac: f.mac_ctrl.src_mac,
        dir: d,
        _pad: 0,
    };
    let mut c = MACS.get_ptr_mut(&key);
    if c.is_none() {
        let Some(zero) = ZERO.get(0) else {
            return;
        };
        match MACS.insert(&key, zero, BPF_NOEXIST) {
            Ok(()) => {}
            Err(e) if e == -EEXIST => {}
            Err(_) => {
                count(s, |s| s.mac_insert_failed += 1);
                log_rare(rare::MAC_MAP_FULL, d as u32, 0);
                return;
            }
        }
        c = MACS.get_ptr_mut(&key);
    }
    if let Some(c) = c {
        // SAFETY: this CPU's slot of a per-CPU value.
        qp::account_mac_control(unsafe { &mut *c }, &f.mac_ctrl);
    }
}

/// Classification into this CPU's FRAME slot. Inlined (a BPF-to-BPF call costs ~8 ns here);
/// the verifier's path count stays well inside its budget because the frame lives in map memory
/// (the accounting below sees the same state after every parse path) and the event emission is
/// a separate BPF function ([`send_event`]). If the parser grows past the budget, make this
/// `#[inline(never)]`: the verifier then explores the accounting once per return.
#[inline(always)]
fn parse_xdp(ctx: *mut xdp_md, f: *mut Frame) {
    // Opaque: keeps LLVM from promoting the context loads into the caller, where the verifier
    // would see 32-bit copies of packet pointers instead of pointers.
    let ctx = core::hint::black_box(ctx);
    // SAFETY: the program's context and this CPU's FRAME slot.
    let (b, f) = unsafe {
        (
            XdpBytes {
                data: (*ctx).data as usize,
                end: (*ctx).data_end as usize,
            },
            &mut *f,
        )
    };
    parse::classify_into(&b, f);
}

/// tc counterpart of [`parse_xdp`].
#[inline(always)]
fn parse_skb(skb: *mut __sk_buff, f: *mut Frame) {
    let skb = core::hint::black_box(skb);
    // SAFETY: the program's context and this CPU's FRAME slot.
    unsafe {
        let len = (*skb).len;
        let want = if len < PULL_LEN { len } else { PULL_LEN };
        if ((*skb).data_end - (*skb).data) < want {
            // Make the headers linear (no change to the packet's content).
            bpf_skb_pull_data(skb as *mut _, want);
        }
        let b = SkbBytes {
            data: (*skb).data as usize,
            end: (*skb).data_end as usize,
            len: len as usize,
        };
        parse::classify_into(&b, &mut *f);
    }
}

/// The accounting shared by every program, on the classified frame. Returns [`acct`] bits:
/// drop the frame (drop-after-observe), copy it to the live sample ring.
#[inline(always)]
fn account(f: &Frame, wire_len: u32, d: u8) -> u32 {
    let Some(s) = IFACE.get_ptr_mut(d as u32) else {
        return 0;
    };
    count(s, |s| qp::account_iface(s, f, wire_len));
    let Some(policy) = POLICY.get(0) else {
        return 0;
    };
    let mut r = 0;
    match f.kind {
        kind::ROCE => r = roce(s, f, wire_len, d, policy),
        kind::MAC_CONTROL => mac_control(s, f, d),
        kind::EXCLUDED => log_rare(rare::EXCLUDED, d as u32, f.reason as u32),
        _ => {}
    }
    if policy.flags & policy_flags::DROP_AFTER_OBSERVE != 0 {
        count(s, |s| s.dropped += 1);
        r |= acct::DROP;
    }
    r
}

/// Multi-buffer capable (`xdp.frags`): drivers only take XDP programs on MTUs above a page
/// (4096-byte RoCE MTU, ~4.2 KB frames) when the program accepts fragmented frames. The headers
/// are in the first buffer; the wire length counts every fragment. Without `xdp.frags` in the
/// compat object (kernels before 5.18 have no multi-buffer XDP).
#[cfg_attr(not(feature = "compat"), xdp(frags))]
#[cfg_attr(feature = "compat", xdp)]
pub fn roce_xdp(ctx: XdpContext) -> u32 {
    let Some(fp) = FRAME.get_ptr_mut(0) else {
        return xdp_action::XDP_PASS;
    };
    parse_xdp(ctx.ctx, fp);
    // SAFETY: this CPU's scratch slot, written by parse_xdp for this run.
    let f = unsafe { &*fp };
    let linear = (ctx.data_end() - ctx.data()) as u32;
    // Fragments can only hold bytes past the linear part: when the (inner) IP packet as its
    // header declares it ends inside the linear part, the frame has none, and the helper call
    // (~8 ns) is skipped. IP frames that extend past it, and large non-IP frames, ask.
    let ip_end = f.ip_off as u32 + f.ip_len;
    let wire = if (f.ip_version != 0 && ip_end > linear) || (f.ip_version == 0 && linear >= 1024) {
        xdp_len(ctx.ctx, linear)
    } else {
        linear
    };
    let a = account(f, wire, dir::INGRESS);
    if a & acct::SAMPLE != 0 {
        sample_xdp(ctx.ctx);
    }
    if a & acct::DROP != 0 {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}

#[inline(always)]
fn tc(ctx: &TcContext, d: u8) -> i32 {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    let Some(fp) = FRAME.get_ptr_mut(0) else {
        return TC_ACT_OK;
    };
    parse_skb(skb, fp);
    let mut wire = ctx.len();
    // SAFETY: context fields tc programs may read; this CPU's scratch slot.
    let (present, tci, f) = unsafe { ((*skb).vlan_present, (*skb).vlan_tci, &mut *fp) };
    if present != 0 {
        // The outermost tag was taken out of the packet into skb metadata (VLAN offload):
        // it is the outermost PCP, and 4 bytes of the frame on the wire.
        wire += 4;
        f.pcp = (tci >> 13) as u8;
    }
    let a = account(f, wire, d);
    if a & acct::SAMPLE != 0 {
        sample_skb(skb);
    }
    if a & acct::DROP != 0 {
        TC_ACT_SHOT
    } else {
        TC_ACT_OK
    }
}

#[classifier]
pub fn roce_tc_in(ctx: TcContext) -> i32 {
    tc(&ctx, dir::INGRESS)
}

#[classifier]
pub fn roce_tc_eg(ctx: TcContext) -> i32 {
    tc(&ctx, dir::EGRESS)
}

/// The loader's check of the kfunc path on this kernel: XDP_PASS when [`xdp_len_kfunc`] gives
/// the helper's length for the frame, XDP_DROP when not. Loaded only with that path enabled.
#[cfg(not(feature = "compat"))]
#[xdp(frags)]
pub fn xdp_len_probe(ctx: XdpContext) -> u32 {
    let linear = (ctx.data_end() - ctx.data()) as u32;
    // SAFETY: the program's context.
    let want = unsafe { bpf_xdp_get_buff_len(ctx.ctx) } as u32;
    if xdp_len_kfunc(ctx.ctx, linear) == want {
        xdp_action::XDP_PASS
    } else {
        xdp_action::XDP_DROP
    }
}

/// The benchmark baseline: an XDP program that does nothing.
#[cfg_attr(not(feature = "compat"), xdp(frags))]
#[cfg_attr(feature = "compat", xdp)]
pub fn xdp_empty(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// The benchmark baseline of the tc rows: a tc program that does nothing.
#[classifier]
pub fn tc_empty(_ctx: TcContext) -> i32 {
    TC_ACT_OK
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
