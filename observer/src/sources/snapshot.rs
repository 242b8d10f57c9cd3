//! The seam between the sources (live eBPF maps, replay's [`crate::sources::datapath::Datapath`]) and the
//! collector (deltas, Parquet flow logs, alerts): cumulative state of one interface at one time.

use observer_common::maps::{IfaceStats, MacKey, PfcCounters, QpKey, QpValue, dir};

/// Cumulative counters of one interface at `time_ns`.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub iface: String,
    /// Wall-clock (live) or capture (replay) time, nanoseconds since the UNIX epoch.
    pub time_ns: u64,
    /// Link speed used to turn PFC quanta into seconds, when known.
    pub link_speed_bps: Option<u64>,
    /// Every key present in the per-QP map, with its cumulative value.
    pub qps: Vec<(QpKey, QpValue)>,
    /// Per direction ([`dir`]), summed over CPUs.
    pub iface_stats: [IfaceStats; dir::COUNT],
    /// PFC/PAUSE counters per source MAC.
    pub macs: Vec<(MacKey, PfcCounters)>,
    /// Which entries of `qps` changed since an earlier snapshot of the same source, when the
    /// source knows (the live kernel source's incremental read); `None`: any may have.
    pub changed: Option<Changed>,
}

impl Snapshot {
    /// Keys in the snapshot: `qps`'s, or a sparse snapshot's ([`Changed::sparse`]).
    pub fn len(&self) -> usize {
        match self.changed.as_ref().and_then(|c| c.sparse.as_ref()) {
            Some(s) => s.keys,
            None => self.qps.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What changed between two snapshots of one source: snapshot `base` and this one, `id` (ids
/// are unique in the process). Every entry of `qps` not at one of `positions` holds a key of
/// snapshot `base` with the same value it had there; every key of `base` not in `qps` is in
/// `gone`. A consumer whose last snapshot of the interface was `base` need look at these only;
/// any other, or any snapshot without a `base` (a full read), compares every key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub base: Option<u64>,
    pub id: u64,
    /// Positions in `qps` of the entries read again (their packets moved, or new keys).
    pub positions: Vec<u32>,
    /// Keys of snapshot `base` no longer present.
    pub gone: Vec<QpKey>,
    /// Empty, or one per entry of `positions`: a superset of the 8-bucket histogram blocks not
    /// zero in that entry's value ([`nonzero_blocks`]), when the source
    /// knows them (the live kernel source finds them in the value it has just built); the
    /// collector then reads of the value only its counters and those blocks.
    pub blocks: Vec<u64>,
    /// A sparse snapshot: `qps` is empty and the entries at `positions` (in their order) are
    /// here, compactly; the snapshot has `keys` keys, the others unchanged since `base`. Given
    /// only to a consumer whose last snapshot of the interface was `base` (the offloaded
    /// outputs' hand-off, [`super::offload`]): the rest of the values are the consumer's own.
    /// Without a `base` (the interface's first), `positions` are every entry and the consumer
    /// has no key of the interface yet.
    pub sparse: Option<Box<Sparse>>,
}

/// The changed entries of a sparse snapshot ([`Changed::sparse`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sparse {
    /// Keys in the snapshot (the changed ones and the others).
    pub keys: usize,
    pub values: CompactQps,
}

/// Words of a value before its histograms (its counters), kept whole by [`CompactQps`].
const HEAD_WORDS: usize = HIST_OFFSET / 8;
/// Histogram blocks of a value ([`nonzero_blocks`]), 4 words each.
const BLOCKS: usize = HIST_WORDS / CHUNK;
const BLOCK_WORDS: usize = CHUNK / 2;
const _: () = assert!(
    HEAD_WORDS * 8 == HIST_OFFSET && HEAD_WORDS + BLOCKS * BLOCK_WORDS == size_of::<QpValue>() / 8
);

/// Entries kept compactly: each key with its counters and the histogram blocks that are not
/// zero. A value is 1,344 bytes, mostly empty histograms (a key has packets in a few of its 64
/// DSCP buckets): an entry of a few hundred bytes instead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactQps {
    /// Key, counters, non-zero blocks ([`nonzero_blocks`]), index of its first block.
    heads: Vec<(QpKey, [u64; HEAD_WORDS], u64, u32)>,
    blocks: Vec<[u64; BLOCK_WORDS]>,
}

impl CompactQps {
    pub fn len(&self) -> usize {
        self.heads.len()
    }
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }
    pub fn clear(&mut self) {
        self.heads.clear();
        self.blocks.clear();
    }

    /// Appends `v`; returns its non-zero blocks.
    pub fn push(&mut self, k: &QpKey, v: &QpValue) -> u64 {
        let w = value_words(v);
        let mask = nonzero_blocks(v);
        let mut head = [0u64; HEAD_WORDS];
        head.copy_from_slice(&w[..HEAD_WORDS]);
        self.heads.push((*k, head, mask, self.blocks.len() as u32));
        let mut m = mask;
        while m != 0 {
            let j = m.trailing_zeros() as usize;
            m &= m - 1;
            let at = HEAD_WORDS + j * BLOCK_WORDS;
            let mut b = [0u64; BLOCK_WORDS];
            b.copy_from_slice(&w[at..at + BLOCK_WORDS]);
            self.blocks.push(b);
        }
        mask
    }

    /// Entry `n` written whole into `out`; its key.
    pub fn expand(&self, n: usize, out: &mut QpValue) -> QpKey {
        let (k, head, mask, first) = &self.heads[n];
        let w = value_words_mut(out);
        w[..HEAD_WORDS].copy_from_slice(head);
        let mut next = *first as usize;
        for j in 0..BLOCKS {
            let at = HEAD_WORDS + j * BLOCK_WORDS;
            let dst = &mut w[at..at + BLOCK_WORDS];
            if mask & (1 << j) != 0 {
                dst.copy_from_slice(&self.blocks[next]);
                next += 1;
            } else {
                dst.fill(0);
            }
        }
        *k
    }

    /// The `first_ns` of entry `n`.
    pub fn first_ns(&self, n: usize) -> u64 {
        self.heads[n].1[std::mem::offset_of!(QpValue, first_ns) / 8]
    }
}

/// A new snapshot id ([`Changed::id`]), unique in the process.
pub fn next_snapshot_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Per-interface counter structs that are nothing but `u64` counters: they are summed over CPUs
/// and subtracted between intervals word by word, so no field can be left out of either.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs whose fields are all `u64` or arrays of `u64` (no
/// padding, every bit pattern valid): `observer_common::maps::{IfaceStats, PfcCounters}`.
pub unsafe trait CounterWords: Copy + Sized {
    fn words(&self) -> &[u64] {
        // SAFETY: the trait's contract: `Self` is u64 words only, 8-aligned, no padding.
        unsafe {
            std::slice::from_raw_parts(self as *const Self as *const u64, size_of::<Self>() / 8)
        }
    }
    fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `words`; any u64 written is a valid counter value.
        unsafe {
            std::slice::from_raw_parts_mut(self as *mut Self as *mut u64, size_of::<Self>() / 8)
        }
    }
    /// `self += other`, every counter.
    fn add(&mut self, other: &Self) {
        for (a, b) in self.words_mut().iter_mut().zip(other.words()) {
            *a = a.wrapping_add(*b);
        }
    }
    /// `self - earlier`, every counter (wrapping).
    fn minus(&self, earlier: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.words_mut().iter_mut().zip(earlier.words()) {
            *a = a.wrapping_sub(*b);
        }
        d
    }
}

const _: () = {
    assert!(size_of::<IfaceStats>().is_multiple_of(8) && align_of::<IfaceStats>() == 8);
    assert!(size_of::<PfcCounters>().is_multiple_of(8) && align_of::<PfcCounters>() == 8);
};

// SAFETY: #[repr(C)], u64 fields and u64 arrays only (observer_common::maps, where the same
// is promised for aya::Pod).
unsafe impl CounterWords for IfaceStats {}
// SAFETY: as above.
unsafe impl CounterWords for PfcCounters {}

/// Byte offset of the histograms in a [`QpValue`]: `opcode_hist`, `dscp_hist`, `ecn_hist` and
/// `pcp_hist` follow each other as one run of `u32` buckets in the flat numbering of
/// `pipeline::deltas::HIST_BUCKETS` (its layout assertions), then `_pad2` ends the value.
pub(crate) const HIST_OFFSET: usize = std::mem::offset_of!(QpValue, opcode_hist);
/// `u32` words from [`HIST_OFFSET`] to the end of the value (the buckets and `_pad2`).
pub(crate) const HIST_WORDS: usize = (size_of::<QpValue>() - HIST_OFFSET) / 4;
/// Buckets in one histogram block of [`nonzero_blocks`] (32 bytes), also the buckets the
/// pipeline's delta pass compares at once.
pub(crate) const CHUNK: usize = 8;

/// The value as 64-bit words (for cheap comparisons and partial copies).
pub(crate) fn value_words(v: &QpValue) -> &[u64] {
    // SAFETY: QpValue is #[repr(C)], 8-aligned (u64 fields), its size a multiple of 8 with no
    // implicit padding (maps.rs layout test), and only integer fields: every byte is
    // initialised, so viewing it as u64 words is sound.
    unsafe {
        std::slice::from_raw_parts(v as *const QpValue as *const u64, size_of::<QpValue>() / 8)
    }
}

/// The value as 64-bit words, to be written ([`value_words`]).
pub(crate) fn value_words_mut(v: &mut QpValue) -> &mut [u64] {
    // SAFETY: as in `value_words`; any u64 bit pattern written is a valid QpValue (integer
    // fields only).
    unsafe {
        std::slice::from_raw_parts_mut(v as *mut QpValue as *mut u64, size_of::<QpValue>() / 8)
    }
}

/// Bit `j` set: buckets `8j..8j+8` (flat numbering) of `v` are not all zero. Reads `v` only.
pub fn nonzero_blocks(v: &QpValue) -> u64 {
    const _: () = assert!(HIST_WORDS / CHUNK <= 64);
    // as u64 words: the OR of a block is 4 words, vectorised and branch-free
    let (w, _) = value_words(v)[HIST_OFFSET / 8..].as_chunks::<{ CHUNK / 2 }>();
    let mut m = 0u64;
    for (j, x) in w.iter().enumerate() {
        let any = x.iter().fold(0u64, |acc, p| acc | p);
        m |= ((any != 0) as u64) << j;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word of the per-interface counters is summed and subtracted: a counter added to
    /// `IfaceStats` cannot be left out of the per-CPU sum or the interval delta.
    #[test]
    fn every_counter_word_is_summed_and_subtracted() {
        let n = IfaceStats::default().words().len();
        assert_eq!(n * 8, size_of::<IfaceStats>());
        for i in 0..n {
            let mut a = IfaceStats::default();
            a.words_mut()[i] = 5;
            let mut sum = IfaceStats::default();
            sum.add(&a);
            sum.add(&a);
            assert_eq!(sum.words()[i], 10, "word {i}");
            assert_eq!(sum.minus(&a).words()[i], 5, "word {i}");
            assert_eq!(sum.words().iter().sum::<u64>(), 10);
        }
        let mut s = IfaceStats::default();
        s.pfc.xoff[3] = 7;
        s.dropped = 2;
        let d = s.minus(&IfaceStats::default());
        assert_eq!((d.pfc.xoff[3], d.dropped), (7, 2));
    }
}
