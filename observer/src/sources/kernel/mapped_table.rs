//! Userspace side of the kernel's per-QP table (`observer_common::qp_table`): the four
//! `BPF_F_MMAPABLE` arrays mapped into this process, and the `QPHIST` hash map of histogram
//! buckets beyond a slot's cells. Reads expand the live slots' compact values straight out of
//! shared memory (no syscall, no kernel-side copy) and add their `QPHIST` entries (one syscall
//! when the map is empty); after the first, a read visits only the slots whose `QPDIRTY` bit
//! was set since the last one (and those evicted since). Eviction marks slots dead, waits for
//! an RCU grace period so no program run is still writing them, then takes the final values,
//! deletes their `QPHIST` entries and frees the slots.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use aya::maps::{HashMap, MapData, MapError};
use observer_common::maps::{QpKey, QpValue};
use observer_common::qp_table::{self as table, Bucket, HistKey, KValue, QpSlot, WAYS};

use crate::sources::Changed;
use crate::sources::snapshot::nonzero_blocks;

/// `membarrier(MEMBARRIER_CMD_GLOBAL)`: returns after `synchronize_rcu()`, i.e. after every
/// RCU read-side critical section that had begun, every XDP/tc program run among them, has
/// ended.
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// One shared mapping of a map's values.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to words the kernel writes
// concurrently is atomic or volatile.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(fd: RawFd, bytes: usize) -> io::Result<Mapping> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = bytes.div_ceil(page) * page;
        // SAFETY: maps `len` bytes of the map's value area (a BPF_F_MMAPABLE array of at least
        // `bytes`), shared, at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// The mapped per-QP table of one loaded object.
pub struct QpTable {
    idx: Mapping,
    slots: Mapping,
    count: Mapping,
    dirty: Mapping,
    buckets: u32,
    hist: HashMap<MapData, HistKey, u64>,
    cache: ReadCache,
}

/// No entry.
const NONE: u32 = u32::MAX;

/// A read's (key, value) entries.
pub type Entries = Vec<(QpKey, QpValue)>;

/// Slots ahead whose lines [`QpTable::read_into`] prefetches.
const PREFETCH: usize = 12;

/// What the last [`QpTable::read_into`] left, slot by slot: the next one expands only the slots
/// whose `QPDIRTY` bit was set since, and the ones in `recheck`.
#[derive(Default)]
struct ReadCache {
    /// Position of each slot's entry in the vector last returned, or [`NONE`].
    pos: Vec<u32>,
    /// Slots to visit at the next read whatever their bit: those [`QpTable::evict`] freed since
    /// (the entry goes, or the key that claimed the slot is expanded).
    recheck: Vec<u32>,
    /// Slot of each entry position.
    slot_of: Vec<u32>,
    /// The vector described (address and length): only that one is updated in place.
    lent: Option<(usize, usize)>,
    /// Slots expanded by the last read.
    expanded: usize,
    /// Id of the last read's snapshot ([`Changed::id`]).
    read_id: u64,
}

impl ReadCache {
    /// Forgets every entry (the next read expands every live slot into `out`).
    fn restart(&mut self, slots: usize) {
        self.pos.clear();
        self.pos.resize(slots, NONE);
        self.recheck.clear();
        self.slot_of.clear();
        self.lent = None;
    }

    /// Removes the entry at `p` (the last entry takes its place).
    fn remove(&mut self, out: &mut Vec<(QpKey, QpValue)>, p: usize) {
        self.pos[self.slot_of[p] as usize] = NONE;
        out.swap_remove(p);
        self.slot_of.swap_remove(p);
        if let Some(&moved) = self.slot_of.get(p) {
            self.pos[moved as usize] = p as u32;
        }
    }
}

fn hist_error(e: MapError) -> io::Error {
    io::Error::other(format!("reading QPHIST: {e}"))
}

impl QpTable {
    /// Maps the table's arrays (the fds of `QPIDX`, `QPS`, `QPCOUNT` and `QPDIRTY`) of
    /// `buckets` buckets; `hist` is its `QPHIST` map.
    pub fn map(
        [idx_fd, slots_fd, count_fd, dirty_fd]: [RawFd; 4],
        buckets: u32,
        hist: HashMap<MapData, HistKey, u64>,
    ) -> io::Result<Self> {
        let n = buckets as usize;
        Ok(QpTable {
            idx: Mapping::new(idx_fd, n * size_of::<Bucket>())?,
            slots: Mapping::new(slots_fd, n * WAYS * size_of::<QpSlot>())?,
            count: Mapping::new(count_fd, 8)?,
            dirty: Mapping::new(dirty_fd, table::dirty_words(buckets) as usize * 8)?,
            buckets,
            hist,
            cache: ReadCache::default(),
        })
    }

    /// Every `QPHIST` entry, by slot. Keys deleted meanwhile (by nobody but [`Self::evict`])
    /// are skipped.
    fn hist_entries(&self) -> io::Result<Vec<(HistKey, u64)>> {
        let mut v = Vec::new();
        for kv in self.hist.iter() {
            match kv {
                Ok(kv) => v.push(kv),
                Err(MapError::KeyNotFound) => continue,
                Err(e) => return Err(hist_error(e)),
            }
        }
        v.sort_unstable_by_key(|(k, _)| (k.slot, k.hist, k.tag));
        Ok(v)
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Writes into `key`'s live slot from userspace as a program run would (`f` gets the
    /// slot), setting its `QPDIRTY` bit if `mark` (as every run does when it finds the bit
    /// clear) or not: for the tests of which slots a read visits. False when the key has no
    /// live slot.
    pub fn poke_slot(&self, key: &QpKey, mark: bool, f: impl FnOnce(&mut QpSlot)) -> bool {
        match self.find(key) {
            Some((i, _)) => {
                // SAFETY: a live slot of our mapping; the test runs no program meanwhile.
                f(unsafe { &mut *self.slot(i) });
                if mark {
                    self.dirty_word(i / 64)
                        .fetch_or(1 << (i % 64), Ordering::AcqRel);
                }
                true
            }
            None => false,
        }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Slots the last [`Self::read_into`] expanded (the others kept their entries).
    pub fn last_read_expansions(&self) -> usize {
        self.cache.expanded
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Entries in `QPHIST` (histogram buckets beyond their slot's cells).
    pub fn hist_overflow_entries(&self) -> io::Result<usize> {
        Ok(self.hist_entries()?.len())
    }

    fn state(&self, slot: usize) -> &AtomicU32 {
        let (b, w) = (slot / WAYS, slot % WAYS);
        debug_assert!(b < self.buckets as usize);
        // SAFETY: inside the mapping (b < buckets); a u32 of the bucket, 4-aligned; the kernel
        // accesses it atomically or with single loads.
        unsafe { &*(self.idx.ptr.add(b * size_of::<Bucket>() + w * 4) as *const AtomicU32) }
    }

    /// Word `w` of `QPDIRTY` (bits of slots `64 w` to `64 w + 63`).
    fn dirty_word(&self, w: usize) -> &AtomicU64 {
        debug_assert!(w < table::dirty_words(self.buckets) as usize);
        // SAFETY: inside the mapping (w < dirty_words); 8-aligned (page-aligned mapping of u64
        // values); the kernel accesses it with single loads and atomic ORs.
        unsafe { &*(self.dirty.ptr.add(w * 8) as *const AtomicU64) }
    }

    /// Takes every set `QPDIRTY` bit (clearing it), as ascending slot numbers appended to `out`.
    fn take_dirty(&self, out: &mut Vec<u32>) {
        for w in 0..table::dirty_words(self.buckets) as usize {
            let a = self.dirty_word(w);
            // a load first: words without bits (most, when few keys are active) stay unwritten
            if a.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // AcqRel: the slots are read after the bits are taken
            let mut b = a.swap(0, Ordering::AcqRel);
            while b != 0 {
                out.push((w * 64) as u32 + b.trailing_zeros());
                b &= b - 1;
            }
        }
    }

    fn slot(&self, slot: usize) -> *mut QpSlot {
        debug_assert!(slot < self.buckets as usize * WAYS);
        // SAFETY: inside the mapping; slots are 8-aligned (the mapping is page-aligned and the
        // slot size a multiple of 8).
        unsafe { self.slots.ptr.add(slot * size_of::<QpSlot>()) as *mut QpSlot }
    }

    /// A copy of live slot `i`'s value and, when its packets are not zero, its spill value
    /// (zero unless the key's packets met on two CPUs), to expand ([`expand_copy`]).
    ///
    /// # Safety
    /// Slot `i` is live. The kernel keeps adding to the value meanwhile (counters only grow): as
    /// with the kernel's own copy for a map lookup syscall, each word is some recent value.
    /// Plain copies, not volatile ones: volatile copies a value in small pieces (3x slower at
    /// 100k keys) and nothing here re-reads it.
    unsafe fn copy_values(&self, i: usize) -> (KValue, Option<KValue>) {
        let src = self.slot(i);
        // SAFETY: the caller's live slot, inside the mapping.
        unsafe {
            let v = std::ptr::read(std::ptr::addr_of!((*src).value));
            let spill = (std::ptr::read_volatile(std::ptr::addr_of!((*src).spill.pkts)) != 0)
                .then(|| std::ptr::read(std::ptr::addr_of!((*src).spill)));
            (v, spill)
        }
    }

    /// Hints the lines of `slot` that an expansion reads: its state word, key and value, and
    /// the spill value's packets.
    #[inline]
    fn prefetch(&self, slot: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p = self.slot(slot) as *const i8;
            // SAFETY: a prefetch is only a hint and never faults; the addresses are inside the
            // slot (`slot` < slots) and the bucket array.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(self.state(slot) as *const AtomicU32 as *const i8);
                let value_end = std::mem::offset_of!(QpSlot, value) + size_of::<table::KValue>();
                for off in (0..value_end).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(p.add(off));
                }
                _mm_prefetch::<_MM_HINT_T0>(
                    std::ptr::addr_of!((*(p as *const QpSlot)).spill.pkts) as *const i8
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    fn keys_in_table(&self) -> &AtomicU64 {
        // SAFETY: the first (only) u64 of the QPCOUNT mapping.
        unsafe { &*(self.count.ptr as *const AtomicU64) }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Packets counted in spill values (their key's lock was held by another CPU), over the
    /// live slots: how often one key's packets met on two CPUs.
    pub fn spilled_pkts(&self) -> u64 {
        let mut n = 0u64;
        for i in 0..self.buckets as usize * WAYS {
            if table::is_live(self.state(i).load(Ordering::Acquire)) {
                // SAFETY: a live slot; one aligned u64 read.
                n += unsafe {
                    std::ptr::read_volatile(std::ptr::addr_of!((*self.slot(i)).spill.pkts))
                };
            }
        }
        n
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Takes (`held`) or lets go of every bucket's insert lock, as a kernel inserter whose CPU
    /// stalled holding it would: for the tests of the inserts' wait and give-up.
    pub fn hold_insert_locks(&self, held: bool) {
        for b in 0..self.buckets as usize {
            // SAFETY: inside the mapping; the bucket's lock word, 4-aligned, which the kernel
            // only accesses atomically.
            let lock = unsafe {
                &*(self
                    .idx
                    .ptr
                    .add(b * size_of::<Bucket>() + std::mem::offset_of!(Bucket, lock))
                    as *const AtomicU32)
            };
            lock.store(held as u32, Ordering::Release);
        }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Keys in the table (inserted and not yet evicted).
    pub fn keys(&self) -> u64 {
        self.keys_in_table().load(Ordering::Relaxed)
    }

    /// Every live (key, value), `each` applied to every value as it is expanded.
    #[cfg(any(test, feature = "test-support"))]
    pub fn read(&self, mut each: impl FnMut(&mut QpValue)) -> io::Result<Vec<(QpKey, QpValue)>> {
        // Read before the slots: an entry of a slot freed and claimed again meanwhile cannot
        // be, as entries are deleted by `evict` before the slot is freed.
        let hist = self.hist_entries()?;
        let mut out: Vec<(QpKey, QpValue)> =
            Vec::with_capacity(self.keys_in_table().load(Ordering::Relaxed) as usize + 16);
        for i in 0..self.buckets as usize * WAYS {
            if !table::is_live(self.state(i).load(Ordering::Acquire)) {
                continue;
            }
            // SAFETY: a live slot (its key was published before its tag, which the Acquire
            // load saw).
            let key = unsafe { std::ptr::read(std::ptr::addr_of!((*self.slot(i)).key)) };
            // SAFETY: a live slot.
            let mut v = expand_copy(&unsafe { self.copy_values(i) }, of_slot(&hist, i));
            each(&mut v);
            out.push((key, v));
        }
        Ok(out)
    }

    /// Every live (key, value), as [`Self::read`], updating `prev` in place when it is the
    /// vector the last call returned (given back after its snapshot was used): only the slots
    /// whose `QPDIRTY` bit was set since that read (a packet of their key came) and those
    /// evicted since are visited, after a grace period (below), so a read costs the active
    /// keys, not the tracked ones. Any other `prev` (or none) is cleared and every slot
    /// expanded. Entry order: slot order after a full expansion; then a freed entry's place is
    /// taken by the last entry and new keys are appended.
    ///
    /// Also says what changed ([`Changed`]): with the last vector given back, the positions of
    /// the entries expanded and the keys gone since it, so the collector can look at those
    /// only; otherwise only the read's id (the next read's base).
    pub fn read_into(
        &mut self,
        prev: Option<Vec<(QpKey, QpValue)>>,
        mut each: impl FnMut(&mut QpValue),
    ) -> io::Result<(Entries, Changed)> {
        let slots = self.buckets as usize * WAYS;
        let hist = self.hist_entries()?;
        let mut c = std::mem::take(&mut self.cache);
        c.expanded = 0;
        let (mut out, base) = match prev {
            Some(v) if c.lent == Some((v.as_ptr() as usize, v.len())) => (v, Some(c.read_id)),
            other => {
                c.restart(slots);
                let mut v = other.unwrap_or_default();
                v.clear();
                v.reserve(self.keys_in_table().load(Ordering::Relaxed) as usize + 16);
                (v, None)
            }
        };
        // The bits, taken before any slot is read: a packet that finds its bit clear after
        // this sets it again for the next read.
        let mut bits = Vec::new();
        self.take_dirty(&mut bits);
        // A packet that found its bit set before it was taken set none, and its program's
        // load of the bit is not ordered after its own stores: some of its writes may not be
        // visible yet. After a grace period every program run that began before it has ended
        // and its writes are visible (a few ms of waiting, no CPU).
        if !bits.is_empty()
            && let Err(e) = grace_period()
        {
            // the bits are not lost: their slots are visited at the next read
            c.recheck.extend_from_slice(&bits);
            self.cache = c;
            return Err(e);
        }
        // The slots to visit: every slot for a full read, else the bits' and the evicted ones.
        let visit: Option<Vec<u32>> = base.map(|_| {
            let mut v = std::mem::take(&mut c.recheck);
            v.extend_from_slice(&bits);
            v.sort_unstable();
            v.dedup();
            v
        });
        let n = visit.as_ref().map_or(slots, Vec::len);
        let slot_at = |k: usize| visit.as_ref().map_or(k, |v| v[k] as usize);
        // the slots expanded (their positions are taken at the end: a later removal can move
        // an entry) and the keys gone, when there is a base to tell them against
        let track = base.is_some();
        let (mut touched, mut gone): (Vec<u32>, Vec<QpKey>) = (Vec::new(), Vec::new());
        // beside `touched`: the expanded values' non-zero histogram blocks, found while the
        // value is still in the cache (the collector then reads only those of the entry)
        let mut blocks: Vec<u64> = Vec::new();
        for k in 0..n {
            // the lines of a slot some visits ahead, and the entry it will be expanded into
            // (23 lines, at random places of the vector when few keys are active)
            if k + PREFETCH < n {
                let j = slot_at(k + PREFETCH);
                self.prefetch(j);
                if let Some(e) = out.get(c.pos[j] as usize) {
                    prefetch_entry(e);
                }
            }
            let i = slot_at(k);
            let p = c.pos[i];
            if !table::is_live(self.state(i).load(Ordering::Acquire)) {
                if p != NONE {
                    if track {
                        gone.push(out[p as usize].0);
                    }
                    c.remove(&mut out, p as usize);
                }
                continue;
            }
            let src = self.slot(i);
            // SAFETY: a live slot's key (published before its tag).
            let key = unsafe { std::ptr::read(std::ptr::addr_of!((*src).key)) };
            let same_key = p != NONE && out[p as usize].0 == key;
            // SAFETY: a live slot.
            let mut v = expand_copy(&unsafe { self.copy_values(i) }, of_slot(&hist, i));
            each(&mut v);
            c.expanded += 1;
            if track {
                if p != NONE && !same_key {
                    gone.push(out[p as usize].0);
                }
                touched.push(i as u32);
                blocks.push(nonzero_blocks(&v));
            }
            if p == NONE {
                c.pos[i] = out.len() as u32;
                c.slot_of.push(i as u32);
                out.push((key, v));
            } else {
                out[p as usize] = (key, v);
            }
        }
        c.lent = Some((out.as_ptr() as usize, out.len()));
        c.read_id = crate::sources::snapshot::next_snapshot_id();
        let changed = Changed {
            base,
            id: c.read_id,
            positions: touched.iter().map(|&i| c.pos[i as usize]).collect(),
            gone,
            blocks,
            sparse: None,
        };
        self.cache = c;
        Ok((out, changed))
    }

    /// The slot holding `key`, if live.
    fn find(&self, key: &QpKey) -> Option<(usize, u32)> {
        let h = table::hash(key);
        let (b1, b2) = table::buckets(h, self.buckets);
        let tag = table::tag(h);
        for b in [b1, b2] {
            for w in 0..WAYS {
                let i = b as usize * WAYS + w;
                if self.state(i).load(Ordering::Acquire) == tag {
                    // SAFETY: a live slot's key (written before the tag was published).
                    let k = unsafe { std::ptr::read_volatile(&(*self.slot(i)).key) };
                    if table::key_eq(&k, key) {
                        return Some((i, tag));
                    }
                }
            }
        }
        None
    }

    /// Removes `keys` and returns their final values (absent keys are skipped): marks their
    /// slots dead, so packets from now on insert the key afresh; waits for an RCU grace period,
    /// after which no program run still writes the dead slots; copies them out; zeroes and
    /// frees them.
    pub fn evict(
        &mut self,
        keys: &[QpKey],
        mut each: impl FnMut(&mut QpValue),
    ) -> io::Result<Vec<(QpKey, QpValue)>> {
        let mut dead = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some((i, tag)) = self.find(k)
                && self
                    .state(i)
                    .compare_exchange(tag, table::DEAD, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                dead.push(i);
            }
        }
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        grace_period()?;
        // The dead slots' QPHIST entries: added to their final values, then deleted (before
        // the slots are freed, so a new key in a slot never sees an old key's entries).
        dead.sort_unstable();
        let hist: Vec<(HistKey, u64)> = self
            .hist_entries()?
            .into_iter()
            .filter(|(k, _)| dead.binary_search(&(k.slot as usize)).is_ok())
            .collect();
        for (k, _) in &hist {
            match self.hist.remove(k) {
                Ok(()) | Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(hist_error(e)),
            }
        }
        let mut out = Vec::with_capacity(dead.len());
        for i in dead {
            // SAFETY: a dead slot: no program run writes it any more (grace period above), and
            // the kernel claims only EMPTY slots.
            let s = unsafe {
                let s = std::ptr::read_volatile(self.slot(i));
                std::ptr::write_volatile(self.slot(i), QpSlot::ZERO);
                s
            };
            // Release: the zeroes are visible before the slot can be claimed.
            self.state(i).store(table::EMPTY, Ordering::Release);
            // the next incremental read removes its entry, or expands the key that claimed it
            self.cache.recheck.push(i as u32);
            self.keys_in_table().fetch_sub(1, Ordering::AcqRel);
            let mut v = s.merged();
            table::add_overflow(&mut v, of_slot(&hist, i));
            each(&mut v);
            out.push((s.key, v));
        }
        Ok(out)
    }
}

/// Hints every line of an entry of the read's output (about to be overwritten).
#[inline]
fn prefetch_entry(e: &(QpKey, QpValue)) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = e as *const (QpKey, QpValue) as *const i8;
        for off in (0..size_of::<(QpKey, QpValue)>()).step_by(64) {
            // SAFETY: a prefetch is only a hint and never faults; the address is inside `e`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = e;
}

/// A value expanded from [`QpTable::copy_values`] with its slot's `QPHIST` entries.
fn expand_copy((value, spill): &(KValue, Option<KValue>), hist: &[(HistKey, u64)]) -> QpValue {
    let mut v = value.to_value();
    if let Some(s) = spill {
        s.add_counts_to(&mut v);
    }
    table::add_overflow(&mut v, hist);
    v
}

/// The entries of slot `i` in `QPHIST` entries sorted by slot.
fn of_slot(hist: &[(HistKey, u64)], i: usize) -> &[(HistKey, u64)] {
    let from = hist.partition_point(|(k, _)| (k.slot as usize) < i);
    let to = hist.partition_point(|(k, _)| (k.slot as usize) <= i);
    &hist[from..to]
}

/// Waits until every eBPF program run that began before the call has ended.
fn grace_period() -> io::Result<()> {
    // SAFETY: membarrier takes plain integers.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        // nohz_full kernels refuse MEMBARRIER_CMD_GLOBAL. A program run takes microseconds and
        // runs with preemption (or migration) disabled: 50 ms covers it with a wide margin,
        // though it is not the guarantee a grace period is.
        tracing::debug!("membarrier(GLOBAL) unavailable (nohz_full): waiting 50 ms instead");
        std::thread::sleep(std::time::Duration::from_millis(50));
        return Ok(());
    }
    Err(e)
}
