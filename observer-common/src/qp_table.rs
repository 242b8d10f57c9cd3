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

use crate::maps::{QpKey, QpValue};

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

/// One bucket of `QPIDX`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// State word per way ([`EMPTY`], [`BUSY`], [`DEAD`] or a live key's [`tag`]).
    pub st: [u32; WAYS],
    /// Insert lock of keys whose first bucket this is (0 free, 1 held).
    pub lock: u32,
}

/// One slot of `QPS`: the key, its value, the value's owner CPU and the spill value.
///
/// The CPU that inserted the key owns the value's counters and adds to them with plain
/// instructions (a CPU runs one program at a time: XDP and tc run with bottom halves
/// disabled). A packet of the key on any other CPU adds its counts to `spill` with atomic
/// instructions (nine locked adds per packet cost ~12 ns here). RoCE traffic of one QP usually
/// arrives on one RX queue, so on one CPU: the owner's. The PSN state, times and event flags are
/// always `value`'s, updated atomically. Readers add `spill`'s counts to `value`'s
/// (`qp::add_counts`); `spill` stays zero unless one key's packets are seen on two CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSlot {
    pub key: QpKey,
    /// The owner CPU's number + 1 (0 in a free slot), set by the insert.
    pub owner: u32,
    pub _pad: u32,
    pub value: QpValue,
    pub spill: QpValue,
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
        value: QpValue::ZERO,
        spill: QpValue::ZERO,
    };

    /// The key's value as readers see it: `value` with `spill`'s counts added.
    pub fn merged(&self) -> QpValue {
        let mut v = self.value;
        if self.spill.pkts != 0 {
            crate::qp::add_counts(&mut v, &self.spill);
        }
        v
    }
}

/// Buckets for a table that holds `max_qps` keys at a load of at most 3/4 (at least 2).
/// Kernel memory: (64 / 15 + 4 / 3 * `size_of::<QpSlot>()`) bytes per key, ~3.6 KiB.
pub fn buckets_for(max_qps: u32) -> u32 {
    let slots = (max_qps as u64 * 4).div_ceil(3);
    (slots.div_ceil(WAYS as u64)).clamp(2, (u32::MAX as u64) / WAYS as u64) as u32
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
            size_of::<QpKey>() + 8 + 2 * size_of::<QpValue>()
        );
        assert_eq!(core::mem::offset_of!(QpSlot, value) % 8, 0);
        assert_eq!(size_of::<QpSlot>() % 8, 0);
        assert_eq!(align_of::<QpKey>(), 8);
        assert_eq!(QpSlot::ZERO.value, QpValue::ZERO);
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
