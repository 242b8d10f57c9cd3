//! Interval deltas of cumulative counters. `u64` counters subtract wrapping (a counter never
//! goes backwards while its key lives; wrapping keeps a reset visible as a huge value only if it
//! really wrapped), `u32` histograms subtract wrapping (exact while one key sees fewer than 2^32
//! packets between two reads, see `maps::QpValue`). Gauges (`max_udp_payload`, `psn_max_p1`,
//! `psn_read`, `last_udp_sport`, times) are carried as they are.

use observer_common::maps::{IfaceStats, PfcCounters, QpValue};

use crate::sources::snapshot::{
    CHUNK, CounterWords, HIST_OFFSET, HIST_WORDS, value_words as words,
};
// The blocks of a value are the sources' (the live source finds them as it reads a value).
pub use crate::sources::snapshot::nonzero_blocks;

/// Histogram buckets of a [`QpValue`] in one flat numbering: opcode 0..64, then DSCP per class
/// (64 each), ECN per class (4 each), PCP per class (9 each).
pub const HIST_BUCKETS: usize = 64 + 3 * 64 + 3 * 4 + 3 * 9;

/// Flat bucket -> (histogram column 0..10 in `tables::hist_names` order, index in it).
#[inline]
pub fn bucket_col(i: u16) -> (usize, usize) {
    let i = i as usize;
    match i {
        0..64 => (0, i),
        64..256 => (1 + (i - 64) / 64, (i - 64) % 64),
        256..268 => (4 + (i - 256) / 4, (i - 256) % 4),
        _ => (7 + (i - 268) / 9, (i - 268) % 9),
    }
}

/// Appends the flat numbers of `d`'s non-zero histogram buckets, ascending.
pub fn nonzero_buckets(d: &QpValue, nz: &mut Vec<u16>) {
    fn scan<const N: usize>(h: &[u32; N], base: usize, nz: &mut Vec<u16>) {
        for (ci, chunk) in h.chunks(8).enumerate() {
            if chunk.iter().any(|&x| x != 0) {
                for (j, &x) in chunk.iter().enumerate() {
                    if x != 0 {
                        nz.push((base + ci * 8 + j) as u16);
                    }
                }
            }
        }
    }
    scan(&d.opcode_hist, 0, nz);
    for c in 0..3 {
        scan(&d.dscp_hist[c], 64 + c * 64, nz);
    }
    for c in 0..3 {
        scan(&d.ecn_hist[c], 256 + c * 4, nz);
    }
    for c in 0..3 {
        scan(&d.pcp_hist[c], 268 + c * 9, nz);
    }
}

fn words_mut(v: &mut QpValue) -> &mut [u64] {
    // SAFETY: as in `words`; any u64 bit pattern written back is a valid QpValue.
    unsafe {
        std::slice::from_raw_parts_mut(v as *mut QpValue as *mut u64, size_of::<QpValue>() / 8)
    }
}

/// Asks the CPU to start loading `v` (all its cache lines) into the cache: the per-interval
/// scan reads two 1.4 KiB values per key from arrays far larger than the cache, and the hardware
/// prefetcher stops at every 4 KiB page; prefetching a few keys ahead hides that latency.
/// `lines` = how many of its 64-byte lines (1: only the one holding `pkts`, enough to tell an
/// idle key).
#[inline(always)]
pub fn prefetch(v: &QpValue, lines: usize) {
    for off in (0..size_of::<QpValue>()).step_by(64).take(lines) {
        prefetch_at(v, off);
    }
}

/// [`prefetch`] of the lines [`Scratch::update`] reads of a value whose non-zero histogram
/// blocks are known (the previous value's always, the current one's when the source says):
/// the counters before the histograms and the histogram blocks in `blocks` (a superset of its
/// [`nonzero_blocks`]), a few of 37.
#[inline(always)]
pub fn prefetch_blocks(v: &QpValue, blocks: u64) {
    for off in (0..HIST_OFFSET).step_by(64) {
        prefetch_at(v, off);
    }
    prefetch_at(v, HIST_OFFSET - 1);
    let mut m = blocks & ALL_BLOCKS;
    while m != 0 {
        let off = HIST_OFFSET + m.trailing_zeros() as usize * CHUNK * 4;
        m &= m - 1;
        // a block (32 bytes) may straddle two lines
        prefetch_at(v, off);
        prefetch_at(v, off + CHUNK * 4 - 1);
    }
}

/// Starts loading the line holding byte `off` of `v` (`off` inside `v`).
#[inline(always)]
fn prefetch_at(v: &QpValue, off: usize) {
    debug_assert!(off < size_of::<QpValue>());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = (v as *const QpValue as *const i8).wrapping_add(off);
        // SAFETY: a prefetch is only a hint, it never faults.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, off);
}

const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(QpValue, dscp_hist) == HIST_OFFSET + 64 * 4);
    assert!(offset_of!(QpValue, ecn_hist) == HIST_OFFSET + 256 * 4);
    assert!(offset_of!(QpValue, pcp_hist) == HIST_OFFSET + 268 * 4);
    assert!(offset_of!(QpValue, _pad2) == HIST_OFFSET + HIST_BUCKETS * 4);
    assert!(HIST_WORDS == HIST_BUCKETS + 1);
    assert!(HIST_WORDS.is_multiple_of(CHUNK) && HIST_OFFSET.is_multiple_of(8));
};

/// The histogram buckets of a value in flat numbering (plus `_pad2` at [`HIST_BUCKETS`]).
pub(crate) fn hist(v: &QpValue) -> &[u32; HIST_WORDS] {
    // SAFETY: the const assertions above: HIST_WORDS u32 from HIST_OFFSET are the four
    // histogram arrays and `_pad2`, all u32 fields of the #[repr(C)] value, in order, no padding.
    unsafe { &*((v as *const QpValue as *const u8).add(HIST_OFFSET) as *const [u32; HIST_WORDS]) }
}

fn hist_mut(v: &mut QpValue) -> &mut [u32; HIST_WORDS] {
    // SAFETY: as in `hist`; any u32 written there is a valid bucket (or padding) value.
    unsafe { &mut *((v as *mut QpValue as *mut u8).add(HIST_OFFSET) as *mut [u32; HIST_WORDS]) }
}

/// Bit `j` set: buckets `8j..8j+8` differ between `a` and `b`, for the blocks in `candidates`
/// only (those outside it are known to be zero in both): reads only those blocks.
fn changed_blocks_in(a: &QpValue, b: &QpValue, candidates: u64) -> u64 {
    let (wa, _) = words(a)[HIST_OFFSET / 8..].as_chunks::<{ CHUNK / 2 }>();
    let (wb, _) = words(b)[HIST_OFFSET / 8..].as_chunks::<{ CHUNK / 2 }>();
    let (mut m, mut c) = (0u64, candidates);
    while c != 0 {
        let j = c.trailing_zeros() as usize;
        c &= c - 1;
        let (Some(x), Some(y)) = (wa.get(j), wb.get(j)) else {
            break;
        };
        let diff = x.iter().zip(y).fold(0u64, |acc, (p, q)| acc | (p ^ q));
        m |= ((diff != 0) as u64) << j;
    }
    m
}

/// [`hist_mut`] for other modules' tests.
#[cfg(test)]
pub(crate) fn hist_mut_for_tests(v: &mut QpValue) -> &mut [u32; HIST_WORDS] {
    hist_mut(v)
}

/// All 8-bucket blocks of the histograms.
const ALL_BLOCKS: u64 = (1 << (HIST_WORDS / CHUNK)) - 1;

/// The delta of one key, reused from key to key (the collector's hot path, no 1.4 KiB
/// temporaries): the value, its non-zero histogram buckets, and which 8-bucket blocks of its
/// histograms may hold non-zero counts from an earlier key (cleared when the next delta is
/// written, instead of clearing all 37 blocks every time).
pub struct Scratch {
    pub d: QpValue,
    pub nz: Vec<u16>,
    dirty: u64,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            d: QpValue::ZERO,
            nz: Vec::with_capacity(HIST_BUCKETS),
            dirty: 0,
        }
    }
}

impl Scratch {
    /// `d` = `cur - prev` and its non-zero buckets ([`qp_delta_into`]).
    pub fn delta(&mut self, cur: &QpValue, prev: &QpValue) {
        qp_delta_into(cur, prev, &mut self.d, &mut self.nz);
        self.dirty = ALL_BLOCKS;
    }

    /// One pass over an active key: `d` = `cur - prev` (as [`qp_delta`]), `nz` = the non-zero
    /// histogram buckets of `d` (as [`nonzero_buckets`]), then `*prev = *cur`. Histogram
    /// buckets are compared 8 at a time: a block equal in both values (most of them: a QP's
    /// traffic uses a few DSCP, ECN, PCP and opcode buckets) is zero in `d`, and is neither
    /// subtracted, scanned again nor copied.
    ///
    /// `prev_blocks`: a superset of the non-zero 8-bucket blocks of `prev`'s histograms
    /// ([`nonzero_blocks`]; the caller keeps it with the value), set to those of the new
    /// `*prev` on return (`cur_blocks` when given, else exactly). A block zero in both is known
    /// equal without reading `prev`'s line: of a value's 1.2 KiB of histograms only the few
    /// blocks its traffic uses are read twice (the pass is bound by memory reads).
    /// `cur_blocks`: a superset of `cur`'s non-zero blocks when the source knows it (then
    /// `cur`'s other blocks are not read either), else `None` (found by reading `cur` whole).
    pub fn update(
        &mut self,
        cur: &QpValue,
        cur_blocks: Option<u64>,
        prev: &mut QpValue,
        prev_blocks: &mut u64,
    ) {
        let (d, nz) = (&mut self.d, &mut self.nz);
        if cur.pkts < prev.pkts {
            qp_delta_into(cur, prev, d, nz);
            self.dirty = ALL_BLOCKS;
            *prev = *cur;
            *prev_blocks = nonzero_blocks(cur);
            return;
        }
        nz.clear();
        carry_state(d, cur);
        sub_scalars(d, cur, prev);
        // pass 1 (reads only, vectorised): which 8-bucket blocks of `cur` are not zero (unless
        // known), then which of those and of `prev`'s non-zero ones differ
        let cur_blocks = cur_blocks.map_or_else(|| nonzero_blocks(cur), |b| b & ALL_BLOCKS);
        let changed = changed_blocks_in(cur, prev, cur_blocks | *prev_blocks);
        // after the copy below `prev`'s histograms equal `cur`'s
        *prev_blocks = cur_blocks;
        // pass 2: subtract, list and copy only those (few: a QP's traffic uses a few DSCP, ECN,
        // PCP and opcode buckets); blocks an earlier key left non-zero are cleared
        let (c, p, o) = (hist(cur), hist_mut(prev), hist_mut(d));
        let mut stale = self.dirty & !changed;
        while stale != 0 {
            let base = stale.trailing_zeros() as usize * CHUNK;
            stale &= stale - 1;
            o[base..base + CHUNK].fill(0);
        }
        self.dirty = changed;
        let mut m = changed;
        while m != 0 {
            let base = m.trailing_zeros() as usize * CHUNK;
            m &= m - 1;
            let blk = base..base + CHUNK;
            for (k, ((o, &x), &y)) in o[blk.clone()]
                .iter_mut()
                .zip(&c[blk.clone()])
                .zip(&p[blk.clone()])
                .enumerate()
            {
                *o = x.wrapping_sub(y);
                if x != y {
                    nz.push((base + k) as u16);
                }
            }
            p[blk.clone()].copy_from_slice(&c[blk]);
        }
        // `_pad2` is not a bucket; `d` carries the current one, as `qp_delta` does
        if nz.last() == Some(&(HIST_BUCKETS as u16)) {
            nz.pop();
        }
        d._pad2 = cur._pad2;
        // the scalar part of `prev`, copied whole (the packet count always differs)
        let n = HIST_OFFSET / 8;
        words_mut(prev)[..n].copy_from_slice(&words(cur)[..n]);
    }
}

/// The fields of a delta that are the current state, not differences (times, PSN state, the
/// largest payload, the last source port).
#[inline(always)]
fn carry_state(d: &mut QpValue, cur: &QpValue) {
    d.max_udp_payload = cur.max_udp_payload;
    d.psn_max_p1 = cur.psn_max_p1;
    d.psn_read = cur.psn_read;
    d.last_udp_sport = cur.last_udp_sport;
    d.first_ns = cur.first_ns;
    d.last_ns = cur.last_ns;
}

/// [`qp_delta`] into a caller-owned scratch value, plus the non-zero histogram buckets of the
/// delta (cleared first): the collector's hot path, with no 1.4 KiB temporaries.
pub fn qp_delta_into(cur: &QpValue, prev: &QpValue, d: &mut QpValue, nz: &mut Vec<u16>) {
    nz.clear();
    if cur.pkts < prev.pkts {
        *d = *cur;
        nonzero_buckets(d, nz);
        return;
    }
    carry_state(d, cur);
    d._pad2 = cur._pad2;
    sub_counts(d, cur, prev);
    nonzero_buckets(d, nz);
}

/// The counting fields of `d` = `cur - prev` (wrapping: the u32 histograms wrap between reads
/// of a busy key); gauges (times, PSN state, largest payload, source port) are left to callers.
fn sub_counts(d: &mut QpValue, cur: &QpValue, prev: &QpValue) {
    sub_scalars(d, cur, prev);
    sub32(&mut d.opcode_hist, &cur.opcode_hist, &prev.opcode_hist);
    for c in 0..d.dscp_hist.len() {
        sub32(&mut d.dscp_hist[c], &cur.dscp_hist[c], &prev.dscp_hist[c]);
        sub32(&mut d.ecn_hist[c], &cur.ecn_hist[c], &prev.ecn_hist[c]);
        sub32(&mut d.pcp_hist[c], &cur.pcp_hist[c], &prev.pcp_hist[c]);
    }
}

/// The counting fields before the histograms (`sub_counts` without the histograms).
fn sub_scalars(d: &mut QpValue, cur: &QpValue, prev: &QpValue) {
    macro_rules! sub {
        ($($f:ident),*) => { $( d.$f = cur.$f.wrapping_sub(prev.$f); )* };
    }
    observer_common::qp_scalar_counters!(sub);
    d.event_flags = cur.event_flags & !prev.event_flags;
}

/// `cur - prev` for one key. `prev` = [`QpValue::ZERO`] for a key new in this interval. A key
/// whose packet count went down was removed and re-created between two reads: its whole
/// current value is the delta.
pub fn qp_delta(cur: &QpValue, prev: &QpValue) -> QpValue {
    if cur.pkts < prev.pkts {
        return *cur;
    }
    let mut d = *cur;
    sub_counts(&mut d, cur, prev);
    d
}

fn sub32<const N: usize>(d: &mut [u32; N], a: &[u32; N], b: &[u32; N]) {
    for i in 0..N {
        d[i] = a[i].wrapping_sub(b[i]);
    }
}

pub fn pfc_delta(a: &PfcCounters, b: &PfcCounters) -> PfcCounters {
    a.minus(b)
}

/// `a - b` for per-interface counters (the kernel's per-CPU sums only grow; a reloaded program
/// starts at zero again, which [`iface_delta`] treats as a reset). Every counter, word by word
/// ([`CounterWords`]).
pub fn iface_delta(a: &IfaceStats, b: &IfaceStats) -> IfaceStats {
    if a.frames < b.frames {
        return *a;
    }
    a.minus(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::maps::class;

    #[test]
    fn histograms_subtract_wrapping_and_counters_exactly() {
        let mut prev = QpValue::ZERO;
        prev.pkts = 10;
        prev.bytes_l2 = 1000;
        prev.dscp_hist[class::DATA][26] = u32::MAX - 1;
        prev.psn_gaps = 1;
        prev.event_flags = 0b1;
        let mut cur = prev;
        cur.pkts = 15;
        cur.bytes_l2 = 1500;
        cur.dscp_hist[class::DATA][26] = 3; // wrapped: +5
        cur.psn_gaps = 3;
        cur.max_udp_payload = 4112;
        cur.event_flags = 0b101;
        let d = qp_delta(&cur, &prev);
        assert_eq!(d.pkts, 5);
        assert_eq!(d.bytes_l2, 500);
        assert_eq!(d.dscp_hist[class::DATA][26], 5);
        assert_eq!(d.psn_gaps, 2);
        assert_eq!(d.max_udp_payload, 4112, "gauges carried");
        assert_eq!(d.event_flags, 0b100, "only new event bits");
    }

    #[test]
    fn delta_into_matches_and_lists_nonzero_buckets() {
        let mut prev = QpValue::ZERO;
        prev.pkts = 4;
        prev.dscp_hist[class::CNP][48] = 4;
        let mut cur = prev;
        cur.pkts = 9;
        cur.opcode_hist[63] = 2;
        cur.dscp_hist[class::CNP][48] = 7;
        cur.ecn_hist[class::ACK][3] = 1;
        cur.pcp_hist[class::CNP][8] = 5;
        let mut d = QpValue::ZERO;
        d.dscp_hist[0][1] = 99; // scratch garbage is overwritten
        let mut nz = vec![1, 2];
        qp_delta_into(&cur, &prev, &mut d, &mut nz);
        assert_eq!(d, qp_delta(&cur, &prev));
        assert_eq!(nz, vec![63, 64 + 128 + 48, 256 + 4 + 3, 268 + 18 + 8]);
        assert_eq!(bucket_col(63), (0, 63));
        assert_eq!(bucket_col(64 + 128 + 48), (3, 48));
        assert_eq!(bucket_col(256 + 4 + 3), (5, 3));
        assert_eq!(bucket_col(268 + 18 + 8), (9, 8));
        assert_eq!(HIST_BUCKETS, 295);
    }

    /// Deterministic pseudo-random values (xorshift), sparse like real histograms.
    fn random_value(seed: &mut u64, like: Option<&QpValue>) -> QpValue {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let mut v = like.copied().unwrap_or(QpValue::ZERO);
        let w = words_mut(&mut v);
        for _ in 0..(next() % 24) {
            let i = (next() % w.len() as u64) as usize;
            let r = next();
            // small increments, sometimes a wrap of a u32 half or a whole new word
            w[i] = match r % 4 {
                0 => w[i].wrapping_add(r >> 60),
                1 => w[i].wrapping_add((r >> 40) << 32),
                2 => w[i] | (u32::MAX as u64),
                _ => r,
            };
        }
        v
    }

    #[test]
    fn scratch_update_matches_delta_scan_and_copy() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        // one scratch for all rounds: what a round leaves in it must not leak into the next
        let mut sc = Scratch::default();
        for round in 0..20_000 {
            let prev = random_value(&mut seed, None);
            let mut cur = random_value(&mut seed, Some(&prev));
            if round % 3 == 0 {
                // the usual case: more packets (other rounds may see fewer: a re-created key)
                cur.pkts = prev.pkts.wrapping_add(round);
            }
            if round % 5 == 1 {
                // a block non-zero before and zero now (its delta wraps): must not be skipped
                let b = (round as usize * 7) % (HIST_WORDS / CHUNK);
                hist_mut(&mut cur)[b * CHUNK..(b + 1) * CHUNK].fill(0);
            }
            let mut p = prev;
            if round % 7 == 0 {
                sc.delta(&cur, &prev);
                p = cur;
            } else {
                // the blocks the caller knows for `prev`: exact, or a superset
                let mut pb = if round % 2 == 0 {
                    nonzero_blocks(&prev)
                } else {
                    nonzero_blocks(&prev) | (round.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ALL_BLOCKS)
                };
                // those the source says for `cur`: none, exact, or a superset (with bits beyond
                // the last block, which must be ignored)
                let exact = nonzero_blocks(&cur);
                let cb = match round % 11 {
                    0..=3 => None,
                    4..=7 => Some(exact),
                    _ => Some(exact | round.wrapping_mul(0x2545_f491_4f6c_dd1d)),
                };
                sc.update(&cur, cb, &mut p, &mut pb);
                let want_pb = match cb {
                    Some(b) if cur.pkts >= prev.pkts => b & ALL_BLOCKS,
                    _ => exact,
                };
                assert_eq!(pb, want_pb, "round {round}");
            }
            let want = qp_delta(&cur, &prev);
            assert_eq!(sc.d, want, "round {round}");
            let mut want_nz = Vec::new();
            nonzero_buckets(&want, &mut want_nz);
            assert_eq!(sc.nz, want_nz, "round {round}");
            assert_eq!(p, cur, "round {round}");
        }
    }

    #[test]
    fn recreated_key_counts_from_zero() {
        let mut prev = QpValue::ZERO;
        prev.pkts = 100;
        let mut cur = QpValue::ZERO;
        cur.pkts = 7;
        cur.ecn_hist[0][2] = 7;
        let d = qp_delta(&cur, &prev);
        assert_eq!(d.pkts, 7);
        assert_eq!(d.ecn_hist[0][2], 7);
    }

    #[test]
    fn iface_delta_and_reset() {
        let mut a = IfaceStats {
            frames: 50,
            ..Default::default()
        };
        a.pfc.xoff[3] = 9;
        a.excluded[2] = 4;
        let mut b = IfaceStats {
            frames: 20,
            ..Default::default()
        };
        b.pfc.xoff[3] = 4;
        b.excluded[2] = 1;
        let d = iface_delta(&a, &b);
        assert_eq!((d.frames, d.pfc.xoff[3], d.excluded[2]), (30, 5, 3));
        let r = iface_delta(&b, &a);
        assert_eq!(
            r.frames, 20,
            "counter reset: the current value is the delta"
        );
    }
}
