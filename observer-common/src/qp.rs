//! The per-QP update, exactly as metrics.md defines it, written once for the kernel and for
//! userspace. Memory operations go through [`Ops`]: atomic instructions in the eBPF programs
//! (one key's packets may be processed on several CPUs at once), plain ones in replay.
//!
//! Concurrency (kernel): counters are atomic adds; the PSN state (`psn_max_p1` and the READ
//! window `psn_read`, one 8-aligned 64-bit word) moves only by a 64-bit compare-and-swap, so
//! every packet's d = psn - max is taken against the max and window at the instant its update
//! takes effect, as if the packets had been processed one at a time in that order. A CAS that
//! keeps losing gives up after [`CAS_TRIES`] attempts and the caller counts it
//! (`IfaceStats::psn_contended`), so nothing is lost silently.

use crate::maps::{ANY, OPCODE_BUCKETS, PCP_BUCKETS, Policy, QpValue, class, policy_flags};
use crate::parse::{Frame, OPCODE_RC_READ_REQUEST, PCP_NONE};
use crate::qp_table::{Cells4, KValue, hist};
use core::ptr::addr_of_mut;

/// Compare-and-swap attempts before a PSN update gives up.
pub const CAS_TRIES: usize = 8;

/// Event bits: [`QpValue::event_flags`] records which were already reported for a key.
pub mod ev {
    pub const NEW_QP: u32 = 0;
    /// + class: DSCP differs from the policy.
    pub const DSCP: u32 = 1;
    /// + class: PCP differs from the policy.
    pub const PCP: u32 = 4;
    /// + class: Not-ECT where the policy expects ECN-capable transport.
    pub const NOT_ECT: u32 = 7;
    pub const PSN_GAP: u32 = 10;
    /// d <= 0: a go-back-N resend or a duplicate.
    pub const RETRANS: u32 = 11;
    pub const NAK: u32 = 12;
    pub const RNR_NAK: u32 = 13;
    pub const CNP: u32 = 14;
    pub const CE: u32 = 15;
    pub const SUSPECT: u32 = 16;
    pub const COUNT: u32 = 17;
    /// Stable names for logs and alerts, indexed by bit.
    pub const NAMES: [&str; COUNT as usize] = [
        "new_qp",
        "dscp_data",
        "dscp_ack",
        "dscp_cnp",
        "pcp_data",
        "pcp_ack",
        "pcp_cnp",
        "not_ect_data",
        "not_ect_ack",
        "not_ect_cnp",
        "psn_gap",
        "retrans",
        "nak",
        "rnr_nak",
        "cnp",
        "ce",
        "suspect",
    ];
}

/// Memory operations on a [`QpValue`] in shared memory.
///
/// # Safety
/// Implementations get valid, aligned pointers into a live value.
pub trait Ops {
    /// `*p += v`.
    ///
    /// # Safety
    /// `p` is valid and aligned (as for every method here).
    unsafe fn add64(&self, p: *mut u64, v: u64);
    /// `*p += v` (wrapping).
    ///
    /// # Safety
    /// `p` is valid and aligned.
    unsafe fn add32(&self, p: *mut u32, v: u32);
    /// Compare-and-swap; returns the value found (== `old` when it swapped).
    ///
    /// # Safety
    /// `p` is valid and aligned.
    unsafe fn cas32(&self, p: *mut u32, old: u32, new: u32) -> u32;
    /// 64-bit compare-and-swap; returns the value found (== `old` when it swapped).
    ///
    /// # Safety
    /// `p` is valid and 8-aligned.
    unsafe fn cas64(&self, p: *mut u64, old: u64, new: u64) -> u64;
    /// `*p |= v`; returns the previous value.
    ///
    /// # Safety
    /// `p` is valid and aligned.
    unsafe fn or32(&self, p: *mut u32, v: u32) -> u32;
    /// `*p`, read once.
    ///
    /// # Safety
    /// `p` is valid and aligned.
    #[inline(always)]
    unsafe fn load32(&self, p: *const u32) -> u32 {
        unsafe { core::ptr::read_volatile(p) }
    }
    /// `*p`, read once (one 64-bit load: never torn).
    ///
    /// # Safety
    /// `p` is valid and 8-aligned.
    #[inline(always)]
    unsafe fn load64(&self, p: *const u64) -> u64 {
        unsafe { core::ptr::read_volatile(p) }
    }
    /// An array index `i < n`, in a form the eBPF verifier can bound: the kernel
    /// implementation hides `i` from the optimiser and clamps it, because LLVM turns
    /// [`opcode_bucket`] into arithmetic on the opcode (`op - 8`) whose range the verifier
    /// cannot prove non-negative. Identity for valid indices.
    #[inline(always)]
    fn index(&self, i: usize, _n: usize) -> usize {
        i
    }
    /// `v`, as a value the eBPF verifier knows nothing about (the kernel implementation), so
    /// that paths which computed different constants continue as one verifier state.
    /// Identity elsewhere.
    #[inline(always)]
    fn unknown32(&self, v: u32) -> u32 {
        v
    }
}

/// Single-threaded memory operations (replay, tests; the kernel on a value's owner CPU).
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl Ops for Plain {
    #[inline(always)]
    unsafe fn add64(&self, p: *mut u64, v: u64) {
        unsafe { *p = (*p).wrapping_add(v) }
    }
    #[inline(always)]
    unsafe fn add32(&self, p: *mut u32, v: u32) {
        unsafe { *p = (*p).wrapping_add(v) }
    }
    #[inline(always)]
    unsafe fn cas32(&self, p: *mut u32, old: u32, new: u32) -> u32 {
        unsafe {
            let cur = *p;
            if cur == old {
                *p = new;
            }
            cur
        }
    }
    #[inline(always)]
    unsafe fn cas64(&self, p: *mut u64, old: u64, new: u64) -> u64 {
        unsafe {
            let cur = *p;
            if cur == old {
                *p = new;
            }
            cur
        }
    }
    #[inline(always)]
    unsafe fn or32(&self, p: *mut u32, v: u32) -> u32 {
        unsafe {
            let old = *p;
            *p |= v;
            old
        }
    }
}

/// `A`'s operations when `use_atomic != 0`, plain ones otherwise: chosen per packet at run time
/// (the kernel: plain on the value's owner CPU, atomic on the spill value otherwise), one code
/// path for the verifier. Indices are always bounded by `A`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mixed<A> {
    pub atomic: A,
    pub use_atomic: u32,
}

impl<A: Ops> Ops for Mixed<A> {
    #[inline(always)]
    unsafe fn add64(&self, p: *mut u64, v: u64) {
        if self.use_atomic != 0 {
            unsafe { self.atomic.add64(p, v) }
        } else {
            unsafe { Plain.add64(p, v) }
        }
    }
    #[inline(always)]
    unsafe fn add32(&self, p: *mut u32, v: u32) {
        if self.use_atomic != 0 {
            unsafe { self.atomic.add32(p, v) }
        } else {
            unsafe { Plain.add32(p, v) }
        }
    }
    #[inline(always)]
    unsafe fn cas32(&self, p: *mut u32, old: u32, new: u32) -> u32 {
        if self.use_atomic != 0 {
            unsafe { self.atomic.cas32(p, old, new) }
        } else {
            unsafe { Plain.cas32(p, old, new) }
        }
    }
    #[inline(always)]
    unsafe fn cas64(&self, p: *mut u64, old: u64, new: u64) -> u64 {
        if self.use_atomic != 0 {
            unsafe { self.atomic.cas64(p, old, new) }
        } else {
            unsafe { Plain.cas64(p, old, new) }
        }
    }
    #[inline(always)]
    unsafe fn or32(&self, p: *mut u32, v: u32) -> u32 {
        if self.use_atomic != 0 {
            unsafe { self.atomic.or32(p, v) }
        } else {
            unsafe { Plain.or32(p, v) }
        }
    }
    #[inline(always)]
    fn index(&self, i: usize, n: usize) -> usize {
        self.atomic.index(i, n)
    }
    #[inline(always)]
    fn unknown32(&self, v: u32) -> u32 {
        self.atomic.unknown32(v)
    }
}

/// Declares [`Value`] with a pointer projection per field that both value layouts share, and
/// `value_field_fns!`, their implementation for a type with fields of those names.
macro_rules! shared_fields {
    ($($f:ident: $ty:ty),* $(,)?) => {
        /// A per-key value [`update_split`] can write: [`QpValue`] (replay; readers) and the
        /// kernel's compact [`KValue`]. The fields they share have the same names; they differ
        /// in how the opcode, DSCP and PCP histograms are kept ([`Value::hist_add`]).
        pub trait Value: Sized {
            $(
                /// A pointer to the field of this name.
                ///
                /// # Safety
                /// `v` points to a live, aligned value.
                unsafe fn $f(v: *mut Self) -> *mut $ty;
            )*
            /// Adds one packet to the opcode bucket `ob`, the DSCP `dscp` and the PCP bucket
            /// `pcp` of class `c`. Returns the [`hist`] bits of the histograms whose bucket
            /// could not be counted in the value (the kernel's cells were all taken): the
            /// caller counts those elsewhere.
            ///
            /// # Safety
            /// `v` points to a live, aligned value; `o`'s contract as in [`update_split`].
            unsafe fn hist_add<O: Ops>(
                o: &O,
                v: *mut Self,
                c: usize,
                ob: usize,
                dscp: usize,
                pcp: usize,
            ) -> u32;
        }
        macro_rules! value_field_fns {
            () => {
                $(
                    #[inline(always)]
                    unsafe fn $f(v: *mut Self) -> *mut $ty {
                        unsafe { addr_of_mut!((*v).$f) }
                    }
                )*
            };
        }
    };
}

shared_fields!(
    pkts: u64,
    bytes_l2: u64,
    bytes_ip: u64,
    bytes_udp: u64,
    first_ns: u64,
    last_ns: u64,
    naks: u64,
    nak_psn_seq_err: u64,
    rnr_naks: u64,
    suspect: u64,
    psn_gaps: u64,
    psn_missing: u64,
    psn_retrans: u64,
    psn_behind: u64,
    qp_incarnations: u64,
    psn_max_p1: u32,
    psn_read: u32,
    event_flags: u32,
    last_udp_sport: u16,
    max_udp_payload: u16,
    ecn_hist: [[u32; 4]; class::COUNT],
);

// The PSN state is one 8-aligned 64-bit word (`psn_max_p1`, then `psn_read`), the last source
// port and the largest payload one 32-bit word (`last_udp_sport`, then `max_udp_payload`), in
// both layouts: [`psn_update`] and [`raise_max_payload`] move them by compare-and-swap.
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(QpValue, psn_max_p1).is_multiple_of(8));
    assert!(offset_of!(QpValue, psn_read) == offset_of!(QpValue, psn_max_p1) + 4);
    assert!(offset_of!(QpValue, last_udp_sport).is_multiple_of(4));
    assert!(offset_of!(QpValue, max_udp_payload) == offset_of!(QpValue, last_udp_sport) + 2);
    assert!(offset_of!(KValue, psn_max_p1).is_multiple_of(8));
    assert!(offset_of!(KValue, psn_read) == offset_of!(KValue, psn_max_p1) + 4);
    assert!(offset_of!(KValue, last_udp_sport).is_multiple_of(4));
    assert!(offset_of!(KValue, max_udp_payload) == offset_of!(KValue, last_udp_sport) + 2);
};

impl Value for QpValue {
    value_field_fns!();
    #[inline(always)]
    unsafe fn hist_add<O: Ops>(
        o: &O,
        v: *mut Self,
        c: usize,
        ob: usize,
        dscp: usize,
        pcp: usize,
    ) -> u32 {
        unsafe {
            o.add32(addr_of_mut!((*v).opcode_hist[ob]), 1);
            o.add32(addr_of_mut!((*v).dscp_hist[c][dscp]), 1);
            o.add32(addr_of_mut!((*v).pcp_hist[c][pcp]), 1);
        }
        0
    }
}

impl Value for KValue {
    value_field_fns!();
    #[inline(always)]
    unsafe fn hist_add<O: Ops>(
        o: &O,
        v: *mut Self,
        c: usize,
        ob: usize,
        dscp: usize,
        pcp: usize,
    ) -> u32 {
        let mut over = 0;
        unsafe {
            let t = ob as u32 + 1;
            if !cells_add(o, addr_of_mut!((*v).opcodes[0]), t)
                && !cells_add(o, addr_of_mut!((*v).opcodes[1]), t)
            {
                over |= hist::OPCODE_BIT;
            }
            if !cells_add(o, addr_of_mut!((*v).dscp), dscp_tag(c, dscp) as u32) {
                over |= hist::DSCP_BIT;
            }
            if !cells_add(o, addr_of_mut!((*v).pcp), pcp_tag(c, pcp) as u32) {
                over |= hist::PCP_BIT;
            }
        }
        // one verifier state after the cells, whichever were full
        o.unknown32(over)
    }
}

/// The [`hist`] cell tags of packet `f`'s opcode, DSCP and PCP buckets, indexed by
/// [`hist::OPCODE`], [`hist::DSCP`], [`hist::PCP`]: the `QPHIST` keys of the buckets that
/// [`Outcome::overflow`] names.
#[inline(always)]
pub fn hist_tags(f: &Frame) -> [u8; 3] {
    let (ob, c) = opcode_info(f.bth.opcode);
    [
        ob as u8 + 1,
        dscp_tag(c, (f.dscp & 63) as usize),
        pcp_tag(c, pcp_bucket(f.pcp)),
    ]
}

/// The [`QpValue::pcp_hist`] bucket of a frame's PCP (untagged: the last).
#[inline(always)]
pub fn pcp_bucket(pcp: u8) -> usize {
    if pcp >= PCP_NONE {
        PCP_BUCKETS - 1
    } else {
        pcp as usize
    }
}

/// [`hist::DSCP`] cell tag of DSCP `dscp` (0..64) in class `c`.
#[inline(always)]
pub fn dscp_tag(c: usize, dscp: usize) -> u8 {
    (c * 64 + dscp + 1) as u8
}

/// [`hist::PCP`] cell tag of PCP bucket `pcp` (0..9) in class `c`.
#[inline(always)]
pub fn pcp_tag(c: usize, pcp: usize) -> u8 {
    (c * PCP_BUCKETS + pcp + 1) as u8
}

/// The lowest byte of `x` that is zero, as a mask with that byte's top bit set, or 0 when no
/// byte is (the lowest flagged byte is always right; higher ones may be false positives, which
/// nothing here reads).
#[inline(always)]
fn zero_byte(x: u32) -> u32 {
    let m = x.wrapping_sub(0x0101_0101) & !x & 0x8080_8080;
    m.isolate_lowest_one()
}

/// Index (0..4) of the byte whose top bit a [`zero_byte`] mask (not 0) has set, without a
/// branch: 2^(8i+7) >> 7 = 2^(8i), times 0x00010203 puts i in the top byte.
#[inline(always)]
fn byte_index(m: u32) -> usize {
    (((m >> 7).wrapping_mul(0x0001_0203) >> 24) & 3) as usize
}

/// Adds one to the cell of tag `t` (1..=255), claiming a free cell for it if it has none;
/// false when every cell is another tag's (or the claim lost twice to concurrent claims).
///
/// # Safety
/// `cells` points to live, aligned cells; `o` as in [`update_split`].
#[inline(always)]
unsafe fn cells_add<O: Ops>(o: &O, cells: *mut Cells4, t: u32) -> bool {
    unsafe {
        let tp = addr_of_mut!((*cells).tags);
        for _ in 0..2 {
            let w = o.load32(tp);
            let hit = zero_byte(w ^ t.wrapping_mul(0x0101_0101));
            if hit != 0 {
                // byte_index is `& 3`: a bound the verifier sees without `o.index`
                o.add32(addr_of_mut!((*cells).n[byte_index(hit)]), 1);
                return true;
            }
            let free = zero_byte(w);
            if free == 0 {
                return false;
            }
            let i = byte_index(free);
            if o.cas32(tp, w, w | t << (8 * i)) == w {
                o.add32(addr_of_mut!((*cells).n[i]), 1);
                return true;
            }
        }
        false
    }
}

/// Opcode -> [`QpValue::opcode_hist`] bucket: the defined opcodes get a bucket each
/// (RC 0x00-0x17 -> 0-23, UC 0x20-0x2b -> 24-35, RD 0x40-0x55 -> 36-57, UD 0x64-0x65 -> 58-59,
/// CNP 0x81 -> 60); every other opcode shares [`OPCODE_OTHER`].
#[inline(always)]
pub const fn opcode_bucket(op: u8) -> usize {
    let op = op as usize;
    match op {
        0x00..=0x17 => op,
        0x20..=0x2b => 24 + op - 0x20,
        0x40..=0x55 => 36 + op - 0x40,
        0x64..=0x65 => 58 + op - 0x64,
        0x81 => 60,
        _ => OPCODE_OTHER,
    }
}

/// Bucket of the opcodes outside the defined ranges (all suspect).
pub const OPCODE_OTHER: usize = OPCODE_BUCKETS - 1;

/// Per opcode: its [`opcode_bucket`] (bits 0-5) and [`class_of`] (bits 6-7), one load on the
/// packet path instead of two chains of range compares.
pub static OPCODE_INFO: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (opcode_bucket(i as u8) | class_of(i as u8) << 6) as u8;
        i += 1;
    }
    t
};

/// [`opcode_bucket`] and [`class_of`] of `op`, from [`OPCODE_INFO`] (the class clamped so
/// that its bound is evident to LLVM and the verifier alike).
#[inline(always)]
pub fn opcode_info(op: u8) -> (usize, usize) {
    let i = OPCODE_INFO[op as usize] as usize;
    let c = i >> 6;
    (i & 63, if c < class::COUNT { c } else { class::DATA })
}

/// Inverse of [`opcode_bucket`] for the defined opcodes.
pub fn bucket_opcode(bucket: usize) -> Option<u8> {
    let op = match bucket {
        0..=23 => bucket,
        24..=35 => bucket - 24 + 0x20,
        36..=57 => bucket - 36 + 0x40,
        58..=59 => bucket - 58 + 0x64,
        60 => 0x81,
        _ => return None,
    };
    Some(op as u8)
}

/// metrics.md classes: 0x81 -> cnp; 0x11, 0x12, 0x51, 0x52 -> ack; everything else -> data.
#[inline(always)]
pub const fn class_of(opcode: u8) -> usize {
    match opcode {
        0x81 => class::CNP,
        0x11 | 0x12 | 0x51 | 0x52 => class::ACK,
        _ => class::DATA,
    }
}

/// d = (psn - max) mod 2^24 mapped into [-2^23, 2^23).
#[inline(always)]
pub fn psn_diff(psn: u32, max: u32) -> i32 {
    ((psn.wrapping_sub(max) << 8) as i32) >> 8
}

/// What one PSN-analysed packet did to the PSN state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsnStep {
    /// Not PSN-analysed (ack or CNP class).
    None,
    /// First PSN of the key: sets max.
    First,
    /// d >= 1: new max; d > 1 + w (w the key's READ window, 0 after any packet but a READ
    /// request) is a gap of d - 1 - w.
    Ahead(i32),
    /// d <= 0: retransmission (d < 0: behind).
    NotAhead(i32),
    /// Gave up after [`CAS_TRIES`] contended attempts.
    Contended,
    /// A new incarnation of the key ([`new_incarnation`]): the PSN analysis restarts here, as
    /// at `First`.
    Reborn,
}

/// A PSN jump this large (either way) is no loss and no go-back-N: the IB PSN window of a live
/// RC QP is 2^23, its outstanding packets far fewer, so only a new QP with a random initial
/// PSN lands here.
pub const INCARNATION_JUMP: i32 = 1 << 22;

/// Whether a data packet with PSN distance `d` from the key's highest, after a READ window `w`
/// (0 after any other packet), starts a new incarnation of the key (a new QP reusing the QP
/// number): `d` is not the next PSN (not in 1 ..= 1 + w) after the key was idle for longer than
/// the policy's `incarnation_idle_ms` (`idle`), or `|d|` is at least [`INCARNATION_JUMP`]
/// whatever the idle time.
#[inline(always)]
pub fn new_incarnation(d: i32, w: u32, idle: bool) -> bool {
    // `|d| >= J`, not `!(-J < d && d < J)`: LLVM's BPF backend (cpu generic + alu32, no jmp32)
    // lowered the latter, on the idle path only, to a 64-bit unsigned compare of the
    // zero-extended 32-bit `d - J` against the sign-extended immediate -2J, which is never
    // true, so every idle key resuming with the next PSN became a new incarnation in the
    // kernel and not in replay (docs/datapath.md "Compiler pitfalls").
    (idle && !is_next(d, w)) || d.unsigned_abs() >= INCARNATION_JUMP as u32
}

/// d is the next new PSN after a window `w`: 1 <= d <= 1 + w.
#[inline(always)]
fn is_next(d: i32, w: u32) -> bool {
    d >= 1 && (d as u32 - 1) <= w
}

/// The window of a READ request whose RETH was not captured: an unknown length, anything up to
/// the longest RC message (2^31 bytes): n_min = 1, n_max = 2^31 / 256 = 2^23.
pub const READ_UNKNOWN_WINDOW: u32 = (1 << 23) - 1;

/// The PSNs a data packet certainly consumes (n_min) and its window (n_max - n_min), metrics.md
/// "RDMA READ requests": for an RC RDMA READ request of DMA length L, n = max(1, ceil(L / pmtu))
/// responses for an unknown pmtu of 256 ..= 4096, so n_min = max(1, ceil(L / 4096)) and
/// n_max = max(1, ceil(L / 256)); (1, 0) for every other packet. Shifts only (the eBPF
/// programs divide by no variable).
#[inline(always)]
pub fn read_window(f: &Frame) -> (u32, u32) {
    if f.bth.opcode != OPCODE_RC_READ_REQUEST {
        return (1, 0);
    }
    if f.has_reth == 0 {
        return (1, READ_UNKNOWN_WINDOW);
    }
    let l = f.dma_len;
    let n_max = ((l >> 8) + (l & 0xff != 0) as u32).max(1);
    let n_min = ((l >> 12) + (l & 0xfff != 0) as u32).max(1);
    (n_min, n_max - n_min)
}

/// The PSN state word of a value from its fields (`psn_max_p1` first in memory).
#[inline(always)]
pub fn psn_word(max_p1: u32, w: u32) -> u64 {
    if cfg!(target_endian = "little") {
        max_p1 as u64 | (w as u64) << 32
    } else {
        (max_p1 as u64) << 32 | w as u64
    }
}

/// `psn_max_p1` and `psn_read` of a PSN state word.
#[inline(always)]
pub fn psn_fields(x: u64) -> (u32, u32) {
    if cfg!(target_endian = "little") {
        (x as u32, (x >> 32) as u32)
    } else {
        ((x >> 32) as u32, x as u32)
    }
}

/// Shift of `max_udp_payload` in the 32-bit word it shares with `last_udp_sport` (second in
/// memory).
const MAX_PAYLOAD_SHIFT: u32 = if cfg!(target_endian = "little") {
    16
} else {
    0
};

/// What [`update`] reports back to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// [`ev`] bits that occurred for the first time for this key with this packet.
    pub new_events: u32,
    pub psn: PsnStep,
    /// PSNs missing when `psn` is a gap (`Ahead(d)` with d > 1 + w, w the key's READ window
    /// before this packet: d - 1 - w), else 0. A plain integer beside the enum: the eBPF
    /// programs read it instead of matching `psn`, whose payload is undefined on the other
    /// variants and once let LLVM hand the verifier a pointer to shift.
    pub gap: u32,
    /// [`hist`] bits of the histograms whose bucket this packet could not be counted in by the
    /// value ([`Value::hist_add`]): the kernel adds them to `QPHIST`. Always 0 for a
    /// [`QpValue`].
    pub overflow: u32,
    /// [`offense`] bits of this packet (the rules it broke, whether or not for the first
    /// time): what the live sampler and replay's evidence capture take a frame for.
    pub offenses: u32,
}

/// Marking and PSN facts of one packet that are event-worthy, as [`ev`] bits.
#[inline(always)]
fn event_bits(f: &Frame, c: usize, policy: &Policy, step: PsnStep, gap: u32) -> u32 {
    let mut bits = 1u32 << ev::NEW_QP;
    if policy.flags & policy_flags::ENABLED != 0 {
        let (d, p, e) = match c {
            class::DATA => (policy.dscp[0], policy.pcp[0], policy.ecn_capable[0]),
            class::ACK => (policy.dscp[1], policy.pcp[1], policy.ecn_capable[1]),
            _ => (policy.dscp[2], policy.pcp[2], policy.ecn_capable[2]),
        };
        if d != ANY && d != f.dscp {
            bits |= 1 << (ev::DSCP + c as u32);
        }
        if !crate::maps::pcp_meets(p, f.pcp) {
            bits |= 1 << (ev::PCP + c as u32);
        }
        if e != 0 && f.ecn == 0 {
            bits |= 1 << (ev::NOT_ECT + c as u32);
        }
    }
    if gap > 0 {
        bits |= 1 << ev::PSN_GAP;
    } else if matches!(step, PsnStep::NotAhead(_)) {
        bits |= 1 << ev::RETRANS;
    }
    if f.has_aeth != 0 {
        let s = f.aeth_syndrome() & 0x60;
        if s == 0x60 {
            bits |= 1 << ev::NAK;
        } else if s == 0x20 {
            bits |= 1 << ev::RNR_NAK;
        }
    }
    if c == class::CNP {
        bits |= 1 << ev::CNP;
    }
    if f.ecn == 3 {
        bits |= 1 << ev::CE;
    }
    if is_suspect(f) {
        bits |= 1 << ev::SUSPECT;
    }
    bits
}

/// Rules a single packet or MAC-control frame can break, as bits: the [`ev`] bits of the
/// marking and PSN rules ([`Outcome::offenses`]: the kernel's live sampler and replay alike),
/// and three more that only replay computes (the ICRC, MAC-control frames).
pub mod offense {
    use super::ev;
    /// The [`ev`] bits that are offenses (marking, PSN gaps, resends, NAKs, RNR NAKs).
    pub const EV_MASK: u32 = (0x1ff << ev::DSCP)
        | (1 << ev::PSN_GAP)
        | (1 << ev::RETRANS)
        | (1 << ev::NAK)
        | (1 << ev::RNR_NAK);
    pub const ICRC_BAD: u32 = 24;
    pub const PFC_WRONG_PRIORITY: u32 = 25;
    pub const PAUSE_802_3X: u32 = 26;
    /// The rule name of offense bit `b`.
    pub fn name(b: u32) -> &'static str {
        match b {
            ICRC_BAD => "icrc_bad",
            PFC_WRONG_PRIORITY => "pfc_wrong_priority",
            PAUSE_802_3X => "pause_802_3x",
            b => ev::NAMES.get(b as usize).copied().unwrap_or("other"),
        }
    }
}

/// The offenses of a MAC-control frame: XOFF on a priority other than the policy's RDMA
/// priority, an 802.3x PAUSE frame.
pub fn mac_control_offenses(m: &crate::parse::MacControl, policy: &Policy) -> u32 {
    match m.opcode {
        crate::parse::MAC_CONTROL_PFC => {
            let xoff = (0..8u16)
                .filter(|&p| m.class_enable & (1 << p) != 0 && m.times[p as usize] > 0)
                .fold(0u16, |a, p| a | (1 << p));
            if xoff & !(1u16 << (policy.rdma_priority & 7)) != 0 {
                1 << offense::PFC_WRONG_PRIORITY
            } else {
                0
            }
        }
        crate::parse::MAC_CONTROL_PAUSE => 1 << offense::PAUSE_802_3X,
        _ => 0,
    }
}

/// BTH TVer != 0, or an opcode outside the defined ranges.
#[inline(always)]
pub fn is_suspect(f: &Frame) -> bool {
    f.bth.tver() != 0 || opcode_info(f.bth.opcode).0 == OPCODE_OTHER
}

/// PSN analysis step for one packet of a key (metrics.md "PSN analysis"), its d (0 for
/// `First`, `Reborn` and `Contended`) and the PSNs it finds missing (d - 1 - w when d > 1 + w).
/// The integers beside the enum are what the accounting reads: an enum's payload is undefined
/// on its other variants, and LLVM computing with it speculatively once handed the eBPF
/// verifier a pointer to shift. `idle`: the key saw no packet for longer than the policy's
/// incarnation idle time. `(n_min, w)`: the packet's [`read_window`].
///
/// The state (max + 1 and the window w) is one 64-bit word moved by one compare-and-swap, so a
/// packet on another CPU never sees a max without its window.
#[inline(always)]
unsafe fn psn_update<O: Ops, V: Value>(
    o: &O,
    v: *mut V,
    psn: u32,
    idle: bool,
    (n_min, w_new): (u32, u32),
) -> (PsnStep, i32, u32) {
    // 8-aligned, `psn_read` next to it (the layout assertions above)
    let p = unsafe { V::psn_max_p1(v) } as *mut u64;
    let psn = psn & 0x00ff_ffff;
    // the state after a packet that moves max: the last PSN it certainly consumed, its window
    let next = psn_word(((psn + n_min - 1) & 0x00ff_ffff) + 1, w_new);
    for _ in 0..CAS_TRIES {
        let cur = unsafe { o.load64(p) };
        let (max_p1, w) = psn_fields(cur);
        if max_p1 == 0 {
            if unsafe { o.cas64(p, cur, next) } == cur {
                return (PsnStep::First, 0, 0);
            }
            continue;
        }
        let d = psn_diff(psn, max_p1 - 1);
        if new_incarnation(d, w, idle) {
            if unsafe { o.cas64(p, cur, next) } == cur {
                return (PsnStep::Reborn, 0, 0);
            }
            continue;
        }
        if d <= 0 {
            return (PsnStep::NotAhead(d), d, 0);
        }
        if unsafe { o.cas64(p, cur, next) } == cur {
            return (PsnStep::Ahead(d), d, (d as u32 - 1).saturating_sub(w));
        }
    }
    (PsnStep::Contended, 0, 0)
}

/// Raises the largest UDP payload of `v` to `pl`: a bounded CAS loop on the 32-bit word it
/// shares with the last source port (whose bits are written back as found, so a port stored
/// meanwhile fails the CAS instead of being undone), which only writes when larger.
///
/// # Safety
/// `v` points to a live, aligned value; `o` as in [`update_split`].
#[inline(always)]
unsafe fn raise_max_payload<O: Ops, V: Value>(o: &O, v: *mut V, pl: u32) {
    // 4-aligned, `max_udp_payload` next to it (the layout assertions above)
    let mp = unsafe { V::last_udp_sport(v) } as *mut u32;
    let mask = 0xffff << MAX_PAYLOAD_SHIFT;
    for _ in 0..CAS_TRIES {
        let cur = unsafe { o.load32(mp) };
        if pl <= (cur & mask) >> MAX_PAYLOAD_SHIFT
            || unsafe { o.cas32(mp, cur, (cur & !mask) | pl << MAX_PAYLOAD_SHIFT) } == cur
        {
            break;
        }
    }
}

/// Accounts one RoCE packet (`f.kind == ROCE`) to its key's value.
///
/// `wire_len` is the frame's length on the wire (the original length when the capture was cut),
/// `now_ns` its time.
///
/// # Safety
/// `v` points to a live, aligned value; with [`Plain`] nobody else writes it meanwhile.
#[inline(always)]
pub unsafe fn update<O: Ops + Default, V: Value>(
    v: *mut V,
    f: &Frame,
    wire_len: u32,
    now_ns: u64,
    policy: &Policy,
) -> Outcome {
    let o = O::default();
    unsafe { update_split(&o, v, &o, v, f, wire_len, now_ns, policy) }
}

/// [`update`] with the counts and the state of a key in two values: the counters and
/// histograms (everything [`add_counts`] adds) go to `counts` through `co`; the PSN state, the
/// largest payload, times, last source port and first-occurrence flags to `state` through `so`.
/// The kernel passes its key's value for both on the CPU that owns the value (plain
/// operations), and the key's spill value as `counts` (atomic operations) on any other CPU;
/// readers add the spill value's counts to the value's (see `table::QpSlot`).
///
/// Long by design: the packet path of the kernel programs, written as one inlined sequence
/// whose shape the verifier's budget and the measured ns per packet depend on (see
/// docs/datapath.md); splitting it moves code the datapath benchmark would have to re-measure.
///
/// # Safety
/// `counts` and `state` point to live, aligned values; every concurrent writer of a field uses
/// atomic operations for it, or none does.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn update_split<C: Ops, S: Ops, V: Value>(
    co: &C,
    counts: *mut V,
    so: &S,
    state: *mut V,
    f: &Frame,
    wire_len: u32,
    now_ns: u64,
    policy: &Policy,
) -> Outcome {
    let v = counts;
    let op = f.bth.opcode;
    let (bucket, c) = opcode_info(op);
    let l2 = wire_len.saturating_sub(f.l2_off as u32) as u64;
    let dscp = (f.dscp & 63) as usize;
    let ecn = (f.ecn & 3) as usize;
    let pcp = pcp_bucket(f.pcp);
    let ob = co.index(bucket, OPCODE_BUCKETS);
    unsafe {
        co.add64(V::pkts(v), 1);
        co.add64(V::bytes_l2(v), l2);
        co.add64(V::bytes_ip(v), f.ip_len as u64);
        co.add64(V::bytes_udp(v), f.udp_payload_len as u64);
        co.add32(addr_of_mut!((*V::ecn_hist(v))[c][ecn]), 1);
        let overflow = V::hist_add(co, v, c, ob, dscp, pcp);
        if f.has_aeth != 0 {
            let s = f.aeth_syndrome();
            match s & 0x60 {
                0x60 => {
                    co.add64(V::naks(v), 1);
                    if s == 0x60 {
                        co.add64(V::nak_psn_seq_err(v), 1);
                    }
                }
                0x20 => co.add64(V::rnr_naks(v), 1),
                _ => {}
            }
        }
        if is_suspect(f) {
            co.add64(V::suspect(v), 1);
        }
        let (step, d, gap) = if c == class::DATA {
            let last = core::ptr::read_volatile(V::last_ns(state));
            let idle_ns = policy.incarnation_idle_ms as u64 * 1_000_000;
            let idle = idle_ns != 0 && last != 0 && now_ns.saturating_sub(last) > idle_ns;
            psn_update(so, state, f.bth.psn, idle, read_window(f))
        } else {
            (PsnStep::None, 0, 0)
        };
        if gap > 0 {
            co.add64(V::psn_gaps(v), 1);
            co.add64(V::psn_missing(v), gap as u64);
        } else if matches!(step, PsnStep::NotAhead(_)) {
            co.add64(V::psn_retrans(v), 1);
            if d < 0 {
                co.add64(V::psn_behind(v), 1);
            }
        } else if matches!(step, PsnStep::Reborn) {
            co.add64(V::qp_incarnations(v), 1);
        }
        raise_max_payload(so, state, f.udp_payload_len as u32);
        // Times and the last source port: plain stores (not counts).
        let first = V::first_ns(state);
        if core::ptr::read_volatile(first) == 0 {
            core::ptr::write_volatile(first, now_ns);
        }
        core::ptr::write_volatile(V::last_ns(state), now_ns);
        core::ptr::write_volatile(V::last_udp_sport(state), f.udp_sport);

        let bits = event_bits(f, c, policy, step, gap);
        let fp = V::event_flags(state);
        let seen = so.load32(fp);
        let mut new = bits & !seen;
        if new != 0 {
            // Only the CPU whose fetch-or sets a bit reports it: exactly one event per bit,
            // even when two CPUs see the same first occurrence at once.
            new &= !so.or32(fp, new);
        }
        Outcome {
            new_events: new,
            psn: step,
            gap,
            overflow,
            offenses: bits & offense::EV_MASK,
        }
    }
}

/// Adds `b`'s counters and histograms (the fields [`update_split`] writes through its counts
/// ops) to `a`, wrapping: how two values of one key are summed (a split update's spill, the
/// collector's totals across a restart; the kernel's compact values have
/// `qp_table::KValue::add_counts_to`). The state fields (PSN state, largest payload, times, last
/// source port, event flags) are `a`'s.
pub fn add_counts(a: &mut QpValue, b: &QpValue) {
    macro_rules! add {
        ($($f:ident),*) => { $( a.$f = a.$f.wrapping_add(b.$f); )* };
    }
    crate::qp_scalar_counters!(add);
    for (x, y) in a.opcode_hist.iter_mut().zip(&b.opcode_hist) {
        *x = x.wrapping_add(*y);
    }
    for c in 0..class::COUNT {
        for (x, y) in a.dscp_hist[c].iter_mut().zip(&b.dscp_hist[c]) {
            *x = x.wrapping_add(*y);
        }
        for (x, y) in a.ecn_hist[c].iter_mut().zip(&b.ecn_hist[c]) {
            *x = x.wrapping_add(*y);
        }
        for (x, y) in a.pcp_hist[c].iter_mut().zip(&b.pcp_hist[c]) {
            *x = x.wrapping_add(*y);
        }
    }
}

/// Accounts a MAC control frame to PFC/PAUSE counters (metrics.md "PFC and PAUSE").
#[inline(always)]
pub fn account_mac_control(c: &mut crate::maps::PfcCounters, m: &crate::parse::MacControl) {
    match m.opcode {
        crate::parse::MAC_CONTROL_PFC => {
            c.pfc_frames += 1;
            let mut p = 0;
            while p < 8 {
                if m.class_enable & (1 << p) != 0 {
                    let q = m.times[p];
                    c.enabled[p] += 1;
                    c.quanta[p] += q as u64;
                    if q > 0 {
                        c.xoff[p] += 1;
                    } else {
                        c.xon[p] += 1;
                    }
                }
                p += 1;
            }
        }
        crate::parse::MAC_CONTROL_PAUSE => {
            c.pause += 1;
            c.pause_quanta += m.times[0] as u64;
            if m.times[0] == 0 {
                c.pause_xon += 1;
            }
        }
        _ => c.other_opcode += 1,
    }
}

/// Accounts one classified frame to the per-interface counters (everything but the per-QP
/// state and `roce_untracked`/`qp_insert_failed`, which depend on the QP map).
#[inline(always)]
pub fn account_iface(s: &mut crate::maps::IfaceStats, f: &Frame, wire_len: u32) {
    use crate::parse::{encap, kind, reason};
    s.frames += 1;
    s.bytes += wire_len as u64;
    if f.encap != encap::NONE
        && let Some(i) = crate::verifier::index(f.encap as usize, encap::COUNT)
    {
        s.encap[i] += 1;
    }
    match f.kind {
        kind::ROCE => s.roce += 1,
        kind::MAC_CONTROL => account_mac_control(&mut s.pfc, &f.mac_ctrl),
        kind::EXCLUDED => {
            if let Some(i) = crate::verifier::index(f.reason as usize, reason::COUNT) {
                s.excluded[i] += 1;
            }
        }
        _ => s.not_roce += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_table_agrees_with_the_rules_for_every_opcode() {
        for op in 0..=255u8 {
            assert_eq!(
                opcode_info(op),
                (opcode_bucket(op), class_of(op)),
                "opcode {op:#x}"
            );
        }
        assert_eq!(opcode_info(0x81), (60, class::CNP));
        assert_eq!(opcode_info(0x11), (0x11, class::ACK));
        assert_eq!(opcode_info(0x30), (OPCODE_OTHER, class::DATA));
    }

    #[test]
    fn byte_search_finds_the_lowest_matching_byte() {
        for w in [
            0u32,
            0x0000_0005,
            0x0000_0500,
            0x0700_0605,
            0x0807_0605,
            0x0100_0001,
        ] {
            for i in 0..4 {
                let b = (w >> (8 * i)) & 0xff;
                let want = (0..4).find(|&j| (w >> (8 * j)) & 0xff == b).unwrap();
                let m = zero_byte(w ^ b.wrapping_mul(0x0101_0101));
                assert_ne!(m, 0);
                assert_eq!(byte_index(m), want, "w {w:#x} byte {i}");
            }
        }
        assert_eq!(zero_byte(0x0102_0304), 0);
    }

    /// Packets over every opcode, DSCP, ECN and PCP, updated into a [`QpValue`] and into a
    /// [`KValue`] whose overflowing buckets go to a side table (as the kernel's `QPHIST`): the
    /// expanded value equals the full one, field by field.
    #[test]
    fn compact_value_with_its_overflow_equals_the_full_value() {
        use crate::qp_table::{HistKey, add_overflow};
        let mut full = QpValue::ZERO;
        let mut k = KValue::ZERO;
        let mut over: std::collections::BTreeMap<HistKey, u64> = Default::default();
        let mut f = Frame {
            kind: crate::parse::kind::ROCE,
            ..Frame::default()
        };
        let mut x = 12345u32;
        let ops = [
            0x0a, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x11, 0x81, 0x0d, 0x04, 0x30,
        ];
        for n in 0..5000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            // mostly one opcode, DSCP and PCP per class, sometimes any
            let rare = n % 7 == 0;
            f.bth.opcode = ops[if rare {
                (x >> 8) as usize % ops.len()
            } else {
                n % 3
            }];
            f.dscp = if rare { (x >> 16) as u8 & 63 } else { 26 };
            f.ecn = (x >> 24) as u8 & 3;
            f.pcp = if rare { (x >> 4) as u8 % 9 } else { 3 };
            f.bth.psn = n as u32;
            let po = &Policy::NONE;
            let a = unsafe { update::<Plain, _>(&mut full, &f, 100, n as u64 + 1, po) };
            let b = unsafe { update::<Plain, _>(&mut k, &f, 100, n as u64 + 1, po) };
            assert_eq!(a.overflow, 0);
            assert_eq!((a.new_events, a.psn, a.gap), (b.new_events, b.psn, b.gap));
            let (ob, c) = opcode_info(f.bth.opcode);
            let pcp = if f.pcp >= PCP_NONE {
                PCP_BUCKETS - 1
            } else {
                f.pcp as usize
            };
            let want = [ob as u8 + 1, dscp_tag(c, f.dscp as usize), pcp_tag(c, pcp)];
            assert_eq!(hist_tags(&f), want, "the kernel's QPHIST tags");
            for (bit, h, tag) in [
                (hist::OPCODE_BIT, hist::OPCODE, want[0]),
                (hist::DSCP_BIT, hist::DSCP, want[1]),
                (hist::PCP_BIT, hist::PCP, want[2]),
            ] {
                if b.overflow & bit != 0 {
                    let key = HistKey {
                        slot: 0,
                        hist: h,
                        tag,
                        _pad: 0,
                    };
                    *over.entry(key).or_default() += 1;
                }
            }
        }
        assert!(!over.is_empty(), "the test must reach the overflow path");
        let mut v = k.to_value();
        add_overflow(
            &mut v,
            over.iter()
                .map(|(k, n)| (*k, *n))
                .collect::<Vec<_>>()
                .iter(),
        );
        assert_eq!(v, full);
    }
}
