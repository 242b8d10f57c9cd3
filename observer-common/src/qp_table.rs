//! The kernel's per-QP table: a fixed-size, memory-mapped open-addressing hash table in two BPF
//! array maps, shared by the eBPF programs (lookup, insert) and userspace (read, evict).
//!
//! Why not a BPF hash map: its lookup of the 40-byte [`QpKey`] cost ~33 ns per packet under
//! BPF_PROG_TEST_RUN (a helper-side jhash, bucket walk and memcmp), a third of the whole
//! datapath; an array lookup is inlined by the kernel into a few instructions. And userspace
//! reads an array with `BPF_F_MMAPABLE` straight from shared memory instead of copying 1.4 KB
//! per key through `BPF_MAP_LOOKUP_BATCH`.
//!
//! Layout:
//! - `QPIDX`: `n` [`Bucket`]s of one cache line each: [`WAYS`] state words and an insert lock.
//! - `QPS`: `n * WAYS` [`QpSlot`]s (key, value, the value's owner CPU and spill value); way `w`
//!   of bucket `b` is slot `b * WAYS + w`.
//! - `QPCOUNT`: one `u64`, the number of keys in the table; inserts stop at the `--max-qps`
//!   limit, so the limit is exact whatever the table's capacity.
//! - `QPDIRTY`: one bit per slot ([`dirty_words`] `u64`s), set by a packet of the slot's key
//!   when clear; a read takes the words with an atomic exchange, waits for an RCU grace period
//!   (a packet that found its bit set may still have been writing) and expands only the slots
//!   whose bit was set, so it costs the active keys, not the tracked ones.
//! - `QPHIST`: a hash map of the histogram buckets that found no free cell in their slot's
//!   compact value ([`KValue`], [`HistKey`]): rare, so a key costs 774 bytes of kernel memory
//!   instead of the 3.6 KiB two full [`QpValue`]s took.
//!
//! A key lives in one of two buckets ([`buckets`]); inserts take the emptier one, so with the
//! capacity [`buckets_for`] gives (load 3/4 at the limit) a bucket pair is practically never
//! full (a simulation of random keys first overflowed at a load of about 0.84); if one is, the
//! insert fails and is counted like a full table (`IfaceStats::qp_insert_failed`).
//!
//! State word of a way ([`Bucket::st`]):
//! - [`EMPTY`]: free. Only the kernel leaves it, by compare-and-swap to [`BUSY`], under the
//!   insert lock of the key's first bucket.
//! - [`BUSY`]: claimed; the key is being written. Then the kernel publishes the key's [`tag`]
//!   with an atomic exchange (a full barrier: the key is written before the tag is visible).
//! - a tag (always >= 4): a live key. Lookups compare the tag, then the whole key.
//! - [`DEAD`]: evicted by userspace (compare-and-swap from the tag). The kernel ignores it: a
//!   new packet of that key inserts it afresh. Userspace waits for an RCU grace period (every
//!   program run that may still have been writing the value has ended), reads the final value,
//!   zeroes the slot and stores [`EMPTY`].
//!
//! Inserts of one key are serialised by the lock of its first bucket, and re-scan both buckets
//! under it, so a key is never in two slots. Lookups take no lock. Values are zero when a slot
//! is claimed (zero at map creation, zeroed by userspace before a slot is freed).

use crate::maps::{OPCODE_BUCKETS, PCP_BUCKETS, QpKey, QpValue, class};

/// Ways (slots) per bucket: 15 state words and the lock fill one 64-byte cache line.
pub const WAYS: usize = 15;

/// Free slot.
pub const EMPTY: u32 = 0;
/// Claimed by an insert, key not yet published.
pub const BUSY: u32 = 1;
/// Evicted by userspace, awaiting its final read.
pub const DEAD: u32 = 2;

/// Attempts at a contended insert lock before the insert gives up (counted as an insert
/// failure): 2^20, several milliseconds of waiting, which only a holder whose CPU stopped (a
/// vCPU descheduled by the hypervisor) outlasts. The eBPF program makes them in a `bpf_loop`.
pub const LOCK_WAIT_LOOPS: u32 = 1 << 20;

/// The insert lock's attempts in the compat object (kernels without `bpf_loop`, before 5.17),
/// made in a bounded loop the verifier checks once per attempt: a few microseconds.
pub const LOCK_WAIT_LOOPS_COMPAT: u32 = 64;

/// One bucket of `QPIDX`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// State word per way ([`EMPTY`], [`BUSY`], [`DEAD`] or a live key's [`tag`]).
    pub st: [u32; WAYS],
    /// Insert lock of keys whose first bucket this is (0 free, 1 held).
    pub lock: u32,
}

/// Cells of one histogram in the kernel's compact value: up to four (tag, count) pairs. A tag
/// is the histogram bucket plus one (see [`KValue`]), one byte each in `tags` (byte `i` names
/// `n[i]`, 0 = free); cells are claimed in order, so the first free byte ends the used ones.
/// A tag never changes once claimed, until the slot is freed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cells4 {
    pub tags: u32,
    pub n: [u32; 4],
}

impl Cells4 {
    pub const ZERO: Cells4 = Cells4 { tags: 0, n: [0; 4] };

    /// The used cells as (tag, count).
    pub fn cells(&self) -> impl Iterator<Item = (u8, u32)> + '_ {
        (0..4)
            .map(|i| ((self.tags >> (8 * i)) as u8, self.n[i]))
            .take_while(|&(t, _)| t != 0)
    }
}

/// Which histogram a [`Cells4`] tag or a [`HistKey`] belongs to.
pub mod hist {
    /// Tag = opcode bucket (`qp::opcode_bucket`) + 1: 1..=64.
    pub const OPCODE: u8 = 0;
    /// Tag = class * 64 + DSCP + 1: 1..=192.
    pub const DSCP: u8 = 1;
    /// Tag = class * 9 + PCP bucket + 1: 1..=27.
    pub const PCP: u8 = 2;
    pub const COUNT: u8 = 3;
    /// [`crate::qp::Outcome::overflow`] bits.
    pub const OPCODE_BIT: u32 = 1 << OPCODE;
    pub const DSCP_BIT: u32 = 1 << DSCP;
    pub const PCP_BIT: u32 = 1 << PCP;
}

/// The kernel's per-key value: [`QpValue`]'s fields under the same names, but for the ICRC
/// verdicts (replay only), and its opcode, DSCP and PCP histograms (1,132 bytes) kept as a few
/// (bucket, count) cells (80 bytes): a QP uses one or two DSCPs and PCPs per class and a
/// handful of opcodes. A packet whose bucket finds no cell claims a free one; when all are
/// taken the eBPF program adds it to the `QPHIST` hash map under a [`HistKey`] instead, so the
/// counts stay exact. Readers expand a slot into a [`QpValue`] ([`QpSlot::merged`], then
/// [`add_overflow`]). 264 bytes, against 1,424 for a [`QpValue`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KValue {
    // What every packet writes first, so that in a slot (after the 48 bytes of key and owner)
    // it spans the slot's first four cache lines; the rare counters follow.
    pub pkts: u64,
    pub bytes_l2: u64,
    pub bytes_ip: u64,
    pub bytes_udp: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// With `psn_read`, the PSN state: one 8-aligned word, moved by 64-bit compare-and-swap.
    pub psn_max_p1: u32,
    pub psn_read: u32,
    pub event_flags: u32,
    /// With `max_udp_payload`, one 32-bit word (the payload is raised by compare-and-swap on it).
    pub last_udp_sport: u16,
    pub max_udp_payload: u16,
    pub ecn_hist: [[u32; 4]; class::COUNT],
    /// Opcode cells: the second group is used once the first is full (8 opcodes: a requester
    /// key's RDMA WRITE first/middle/last/only with and without immediate, or a responder
    /// key's ACK, CNP and READ responses).
    pub opcodes: [Cells4; 2],
    pub dscp: Cells4,
    pub pcp: Cells4,
    pub naks: u64,
    pub nak_psn_seq_err: u64,
    pub rnr_naks: u64,
    pub suspect: u64,
    pub psn_gaps: u64,
    pub psn_missing: u64,
    pub psn_retrans: u64,
    pub psn_behind: u64,
    pub qp_incarnations: u64,
}

impl KValue {
    pub const ZERO: KValue = KValue {
        pkts: 0,
        bytes_l2: 0,
        bytes_ip: 0,
        bytes_udp: 0,
        first_ns: 0,
        last_ns: 0,
        psn_max_p1: 0,
        psn_read: 0,
        event_flags: 0,
        last_udp_sport: 0,
        max_udp_payload: 0,
        ecn_hist: [[0; 4]; class::COUNT],
        opcodes: [Cells4::ZERO; 2],
        dscp: Cells4::ZERO,
        pcp: Cells4::ZERO,
        naks: 0,
        nak_psn_seq_err: 0,
        rnr_naks: 0,
        suspect: 0,
        psn_gaps: 0,
        psn_missing: 0,
        psn_retrans: 0,
        psn_behind: 0,
        qp_incarnations: 0,
    };

    /// Adds this value's counters and cells to `v` (wrapping), as [`crate::qp::add_counts`]
    /// does for two [`QpValue`]s. The state fields are not touched.
    pub fn add_counts_to(&self, v: &mut QpValue) {
        macro_rules! add {
            ($($f:ident),*) => { $( v.$f = v.$f.wrapping_add(self.$f); )* };
        }
        crate::qp_kernel_counters!(add);
        for (a, b) in v.ecn_hist.iter_mut().zip(&self.ecn_hist) {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.wrapping_add(*y);
            }
        }
        for (h, cells) in [
            (hist::OPCODE, &self.opcodes[0]),
            (hist::OPCODE, &self.opcodes[1]),
            (hist::DSCP, &self.dscp),
            (hist::PCP, &self.pcp),
        ] {
            for (tag, n) in cells.cells() {
                add_bucket(v, h, tag, n as u64);
            }
        }
    }

    /// The value as a [`QpValue`]: state fields copied, counts added to zero.
    pub fn to_value(&self) -> QpValue {
        let mut v = QpValue::ZERO;
        v.first_ns = self.first_ns;
        v.last_ns = self.last_ns;
        v.psn_max_p1 = self.psn_max_p1;
        v.psn_read = self.psn_read;
        v.max_udp_payload = self.max_udp_payload;
        v.event_flags = self.event_flags;
        v.last_udp_sport = self.last_udp_sport;
        self.add_counts_to(&mut v);
        v
    }
}

/// Adds `n` to the bucket a cell tag of histogram `h` names (tags as [`hist`] defines them;
/// out-of-range tags, which the kernel never writes, are ignored).
pub fn add_bucket(v: &mut QpValue, h: u8, tag: u8, n: u64) {
    let Some(b) = (tag as usize).checked_sub(1) else {
        return;
    };
    let n = n as u32;
    match h {
        hist::OPCODE if b < OPCODE_BUCKETS => v.opcode_hist[b] = v.opcode_hist[b].wrapping_add(n),
        hist::DSCP if b < 64 * class::COUNT => {
            let x = &mut v.dscp_hist[b / 64][b % 64];
            *x = x.wrapping_add(n);
        }
        hist::PCP if b < PCP_BUCKETS * class::COUNT => {
            let x = &mut v.pcp_hist[b / PCP_BUCKETS][b % PCP_BUCKETS];
            *x = x.wrapping_add(n);
        }
        _ => {}
    }
}

/// Key of the `QPHIST` hash map: the counts of one histogram bucket of one slot that found no
/// free [`Cells4`] cell (in the value or the spill value). Entries of a slot are deleted when
/// the slot is freed, before it can be claimed again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HistKey {
    /// The slot's index in `QPS`.
    pub slot: u32,
    /// [`hist`] kind.
    pub hist: u8,
    /// The bucket's cell tag.
    pub tag: u8,
    pub _pad: u16,
}

/// Adds the `QPHIST` entries of one slot (`(key, count)`, `key.slot` that slot) to its value.
pub fn add_overflow<'a>(v: &mut QpValue, entries: impl IntoIterator<Item = &'a (HistKey, u64)>) {
    for (k, n) in entries {
        add_bucket(v, k.hist, k.tag, *n);
    }
}

/// `QPHIST` entries per `--max-qps` key (at least [`HIST_OVERFLOW_MIN`]): one key in eight may
/// have one bucket beyond its cells. A packet that finds the map full is counted
/// (`IfaceStats::hist_overflow_lost`), not added to its histogram bucket.
pub const HIST_OVERFLOW_PER_KEYS: u32 = 8;
/// Smallest `QPHIST`.
pub const HIST_OVERFLOW_MIN: u32 = 1024;

/// `QPHIST`'s entries for a table of `max_qps` keys.
pub fn hist_overflow_entries(max_qps: u32) -> u32 {
    (max_qps / HIST_OVERFLOW_PER_KEYS).max(HIST_OVERFLOW_MIN)
}

/// One slot of `QPS`: the key, its value, the value's owner CPU and the spill value.
///
/// The CPU that inserted the key owns the value's counters and adds to them with plain
/// instructions (a CPU runs one program at a time: XDP and tc run with bottom halves
/// disabled). A packet of the key on any other CPU adds its counts to `spill` with atomic
/// instructions (nine locked adds per packet cost ~12 ns here). RoCE traffic of one QP usually
/// arrives on one RX queue, so on one CPU: the owner's. The PSN state, times and event flags are
/// always `value`'s, updated atomically. Readers add `spill`'s counts to `value`'s
/// ([`QpSlot::merged`]); `spill` stays zero unless one key's packets are seen on two CPUs.
/// 576 bytes: nine cache lines.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSlot {
    pub key: QpKey,
    /// The owner CPU's number + 1 (0 in a free slot), set by the insert.
    pub owner: u32,
    pub _pad: u32,
    pub value: KValue,
    pub spill: KValue,
}

impl QpSlot {
    pub const ZERO: QpSlot = QpSlot {
        key: QpKey {
            src_ip: [0; 16],
            dst_ip: [0; 16],
            dest_qp: 0,
            dir: 0,
            _pad: [0; 3],
        },
        owner: 0,
        _pad: 0,
        value: KValue::ZERO,
        spill: KValue::ZERO,
    };

    /// The key's value as readers see it, less its `QPHIST` entries ([`add_overflow`]):
    /// `value` expanded, with `spill`'s counts added.
    pub fn merged(&self) -> QpValue {
        let mut v = self.value.to_value();
        if self.spill.pkts != 0 {
            self.spill.add_counts_to(&mut v);
        }
        v
    }
}

/// Buckets for a table that holds `max_qps` keys at a load of at most 3/4 (at least 2).
/// Kernel memory: (64 / 15 + 4 / 3 * `size_of::<QpSlot>()`) bytes per key, 774 bytes, plus
/// `QPHIST`'s share ([`hist_overflow_entries`]).
pub fn buckets_for(max_qps: u32) -> u32 {
    let slots = (max_qps as u64 * 4).div_ceil(3);
    (slots.div_ceil(WAYS as u64)).clamp(2, (u32::MAX as u64) / WAYS as u64) as u32
}

/// `QPDIRTY`'s words for a table of `buckets` buckets: one bit per slot.
pub fn dirty_words(buckets: u32) -> u32 {
    ((buckets as u64 * WAYS as u64).div_ceil(64)).max(1) as u32
}

/// The key as five 64-bit words.
#[inline(always)]
fn words(k: &QpKey) -> &[u64; 5] {
    // SAFETY: QpKey is #[repr(C, align(8))], 40 bytes, with no implicit padding (see
    // maps::tests), so it is five initialised, aligned u64s.
    unsafe { &*(k as *const QpKey as *const [u64; 5]) }
}

/// Whether two keys are equal, word by word (no `memcmp`: there is none in eBPF).
#[inline(always)]
pub fn key_eq(a: &QpKey, b: &QpKey) -> bool {
    let (a, b) = (words(a), words(b));
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
}

/// The key of a RoCE packet's frame, seen in direction `dir`, as its five 64-bit words.
#[inline(always)]
pub fn key_words(f: &crate::parse::Frame, dir: u8) -> [u64; 5] {
    let a = f.addr_words();
    let q = f.bth.dest_qp.to_ne_bytes();
    // dest_qp then dir then padding, in memory order (the key's layout)
    let last = u64::from_ne_bytes([q[0], q[1], q[2], q[3], dir, 0, 0, 0]);
    [a[0], a[1], a[2], a[3], last]
}

/// The key made of [`key_words`].
#[inline(always)]
pub fn key_of(w: &[u64; 5]) -> QpKey {
    // SAFETY: QpKey is 40 bytes, align 8, every bit pattern valid (its padding is explicit
    // and zero here: the fifth word holds dest_qp and dir only).
    unsafe { core::mem::transmute::<[u64; 5], QpKey>(*w) }
}

/// 64-bit hash of a key: its five words, the destination's rotated so the two directions of a
/// connection differ, folded with one multiply and finished with a second (the same on both
/// sides, which run on the same machine). Cheap: it runs for every packet.
#[inline(always)]
pub fn hash(k: &QpKey) -> u64 {
    hash_words(words(k))
}

/// [`hash`] of a key's [`key_words`] (in registers, not re-read from a just-written key).
#[inline(always)]
pub fn hash_words(w: &[u64; 5]) -> u64 {
    let x = w[0] ^ w[1].rotate_left(13) ^ w[2].rotate_left(29) ^ w[3].rotate_left(43) ^ w[4];
    let mut h = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 32)
}

/// The key's two buckets among `n` (equal when `n` is 1 or by chance: then one is scanned).
#[inline(always)]
pub fn buckets(h: u64, n: u32) -> (u32, u32) {
    let b1 = ((h & 0xffff_ffff) * n as u64) >> 32;
    let b2 = ((h >> 32) * n as u64) >> 32;
    (b1 as u32, b2 as u32)
}

/// The state word of a live key: 32 hash bits with bit 2 set, so never [`EMPTY`], [`BUSY`] or
/// [`DEAD`]. Different keys may share a tag: lookups then compare the keys.
#[inline(always)]
pub fn tag(h: u64) -> u32 {
    ((h.wrapping_mul(0xd6e8_feb8_6659_fd93) >> 32) as u32) | 4
}

/// Whether a state word holds a live key.
#[inline(always)]
pub fn is_live(st: u32) -> bool {
    st >= 4
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)], u32 fields only (16 of them, 64 bytes, no padding); any bit pattern
    // is a valid value.
    unsafe impl aya::Pod for Bucket {}
    // SAFETY: #[repr(C)], two Pod structs whose sizes are multiples of 8 (no padding between
    // or after them, checked by a test); any bit pattern is a valid value.
    unsafe impl aya::Pod for QpSlot {}
    // SAFETY: #[repr(C)], integer fields with explicit padding (8 bytes, a test); any bit
    // pattern is a valid value.
    unsafe impl aya::Pod for HistKey {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    fn key(i: u32) -> QpKey {
        let mut k = QpKey::default();
        k.src_ip[10] = 0xff;
        k.src_ip[11] = 0xff;
        k.src_ip[12..].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
        k.dst_ip = k.src_ip;
        k.dst_ip[15] ^= 1;
        k.dest_qp = 0x100 + (i % 7);
        k
    }

    #[test]
    fn layouts() {
        assert_eq!(size_of::<Bucket>(), 64);
        assert_eq!(
            size_of::<QpSlot>(),
            size_of::<QpKey>() + 8 + 2 * size_of::<KValue>()
        );
        assert_eq!(core::mem::offset_of!(QpSlot, value) % 8, 0);
        assert_eq!(size_of::<QpSlot>() % 8, 0);
        assert_eq!(align_of::<QpKey>(), 8);
        assert_eq!(QpSlot::ZERO.value, KValue::ZERO);
        assert_eq!(size_of::<KValue>(), 264);
        assert_eq!(size_of::<QpSlot>(), 576);
        assert_eq!(size_of::<Cells4>(), 20);
        assert_eq!(size_of::<HistKey>(), 8);
        // a packet's common writes within the slot's first four cache lines
        assert!(core::mem::offset_of!(QpSlot, value) + core::mem::offset_of!(KValue, naks) <= 256);
        assert_eq!(QpSlot::ZERO.merged(), QpValue::ZERO);
    }

    #[test]
    fn key_eq_is_field_equality() {
        let a = key(1);
        let mut b = a;
        assert!(key_eq(&a, &b));
        for byte in 0..40 {
            b = a;
            // SAFETY: a QpKey is 40 plain bytes.
            unsafe { (*(&mut b as *mut QpKey as *mut [u8; 40]))[byte] ^= 0x10 };
            assert!(!key_eq(&a, &b), "byte {byte}");
            assert_ne!(hash(&a), hash(&b), "byte {byte}");
        }
    }

    #[test]
    fn key_words_make_the_key() {
        let mut f = crate::parse::Frame::default();
        f.set_mapped_ipv4([10, 0, 0, 1], [10, 0, 0, 2]);
        f.bth.dest_qp = 0x12_3456;
        let w = key_words(&f, 1);
        let k = key_of(&w);
        let mut want = QpKey {
            dest_qp: 0x12_3456,
            dir: 1,
            ..QpKey::default()
        };
        want.src_ip[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        want.dst_ip[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!(k, want);
        assert_eq!(hash_words(&w), hash(&want));
        assert_eq!((f.src_ip, f.dst_ip), (want.src_ip, want.dst_ip));
    }

    #[test]
    fn tags_are_never_a_state() {
        for i in 0..10_000 {
            let t = tag(hash(&key(i)));
            assert!(is_live(t) && t != EMPTY && t != BUSY && t != DEAD);
        }
    }

    #[test]
    fn buckets_are_in_range_and_spread() {
        let n = buckets_for(65536);
        assert!(n as usize * WAYS >= 65536 * 4 / 3);
        let mut load = vec![0u32; n as usize];
        for i in 0..65536u32 {
            let (b1, b2) = buckets(hash(&key(i)), n);
            assert!(b1 < n && b2 < n);
            load[b1 as usize] += 1;
        }
        // 65536 keys over n first buckets: mean ~11.25; a bad hash piles them up.
        let max = *load.iter().max().unwrap();
        assert!(max < 40, "max first-bucket load {max}");
        assert_eq!(buckets_for(1), 2);
        assert_eq!(buckets_for(2), 2);
    }

    /// Structured key sets as fabrics make them: one host pair with consecutive QP numbers,
    /// many host pairs with one QP number each, both directions of each connection.
    fn families(n: u32) -> [Vec<QpKey>; 3] {
        let v4 = |a: u32| {
            let mut ip = [0u8; 16];
            ip[10] = 0xff;
            ip[11] = 0xff;
            ip[12..].copy_from_slice(&a.to_be_bytes());
            ip
        };
        let one_pair = (0..n)
            .map(|q| QpKey {
                src_ip: v4(0x0a00_0001),
                dst_ip: v4(0x0a00_0002),
                dest_qp: q,
                ..QpKey::default()
            })
            .collect();
        let many_pairs = (0..n)
            .map(|i| QpKey {
                src_ip: v4(0x0a00_0000 | (i >> 8)),
                dst_ip: v4(0x0a01_0000 | (i & 0xff)),
                dest_qp: 0x11,
                ..QpKey::default()
            })
            .collect();
        let both_dirs = (0..n)
            .map(|i| {
                let (a, b) = (v4(0x0a00_0000 | (i >> 1)), v4(0x0a02_0000 | (i >> 1)));
                let (src_ip, dst_ip) = if i & 1 == 0 { (a, b) } else { (b, a) };
                QpKey {
                    src_ip,
                    dst_ip,
                    dest_qp: 0x40 + (i >> 1) % 16,
                    dir: (i & 1) as u8,
                    ..QpKey::default()
                }
            })
            .collect();
        [one_pair, many_pairs, both_dirs]
    }

    /// The insert policy (emptier of two buckets) on the real hash: the limit's worth of keys
    /// always fits, for random-looking and for structured key sets.
    #[test]
    fn max_qps_keys_fit() {
        for &max in &[2u32, 20, 100, 1024, 65536] {
            let n = buckets_for(max);
            let mut sets: Vec<Vec<QpKey>> = families(max).into();
            sets.push((0..max).map(|i| key(i * 7919)).collect());
            for (f, keys) in sets.iter().enumerate() {
                let mut occ = vec![0usize; n as usize];
                for (i, k) in keys.iter().enumerate() {
                    let (b1, b2) = buckets(hash(k), n);
                    let b = if occ[b2 as usize] < occ[b1 as usize] {
                        b2
                    } else {
                        b1
                    };
                    assert!(
                        occ[b as usize] < WAYS,
                        "max {max}, family {f}: bucket pair full at key {i}"
                    );
                    occ[b as usize] += 1;
                }
            }
        }
    }
}
