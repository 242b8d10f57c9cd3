//! The previous value of every tracked key, laid out for the per-interval scan: a small index
//! (key -> slot) and the values in a slot vector, plus a position hint: a source reads its map
//! in a stable order (the kernel's hash buckets, the datapath's hash map), so the key at
//! position i of this snapshot is usually the one at position i of the last, and is found
//! without hashing.

use std::collections::HashMap;

use observer_common::maps::{QpKey, QpValue, dir};

use crate::pipeline::deltas::nonzero_blocks;

#[derive(Default)]
pub struct PrevStore {
    index: HashMap<QpKey, u32>,
    keys: Vec<QpKey>,
    vals: Vec<QpValue>,
    /// Each slot's `vals[slot].pkts`, dense: the per-interval scan compares a key's packet count
    /// here first, so an idle key costs 8 bytes of this array, not a line of its value.
    pkts: Vec<u64>,
    /// Each slot's non-zero histogram blocks ([`crate::pipeline::deltas::nonzero_blocks`]):
    /// the delta pass reads only those blocks of the previous value.
    blocks: Vec<u64>,
    /// Each slot's `vals[slot].last_ns`, dense: the idle-key search (once the source's table is
    /// nearly full, every interval) reads 8 bytes per key, not a line of 1.4 KiB values.
    last: Vec<u64>,
    /// The caller's tag of each key (the collector: its IP pair's id).
    tags: Vec<u32>,
    alive: Vec<bool>,
    /// Generation of the last snapshot that contained the slot's key.
    seen: Vec<u64>,
    free: Vec<u32>,
    /// Slot of each position of the last snapshot.
    hint: Vec<u32>,
    generation: u64,
    /// Keys per direction.
    dirs: [u64; dir::COUNT],
}

impl PrevStore {
    pub fn len(&self) -> usize {
        self.index.len()
    }
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
    /// Keys per direction ([`dir`]).
    pub fn per_dir(&self) -> [u64; dir::COUNT] {
        self.dirs
    }

    /// Starts a snapshot scan (for [`PrevStore::vanished`]).
    pub fn begin_scan(&mut self, n: usize) {
        self.generation += 1;
        self.hint.resize(n, u32::MAX);
    }

    /// Slot of `k`, seen at position `pos` of the current snapshot.
    pub fn find(&mut self, pos: usize, k: &QpKey) -> Option<usize> {
        let h = self.hint.get(pos).copied().unwrap_or(u32::MAX) as usize;
        let slot = if h < self.keys.len() && self.alive[h] && self.keys[h] == *k {
            h
        } else {
            let s = *self.index.get(k)? as usize;
            if let Some(x) = self.hint.get_mut(pos) {
                *x = s as u32;
            }
            s
        };
        self.seen[slot] = self.generation;
        Some(slot)
    }

    /// The previous value the key at position `pos` most likely has (the position hint) and
    /// its non-zero histogram blocks, for prefetching: it may belong to another key.
    #[inline]
    pub fn hinted(&self, pos: usize) -> Option<(&QpValue, u64)> {
        let h = *self.hint.get(pos)? as usize;
        Some((self.vals.get(h)?, *self.blocks.get(h)?))
    }

    pub fn value(&self, slot: usize) -> &QpValue {
        &self.vals[slot]
    }
    /// The value of `slot` and its non-zero histogram blocks, to update together
    /// ([`crate::pipeline::deltas::Scratch::update`]): [`PrevStore::sync_pkts`] after.
    pub fn value_blocks_mut(&mut self, slot: usize) -> (&mut QpValue, &mut u64) {
        (&mut self.vals[slot], &mut self.blocks[slot])
    }
    /// The value of `slot`, to change outside its histograms (tests).
    #[cfg(test)]
    pub fn value_mut(&mut self, slot: usize) -> &mut QpValue {
        &mut self.vals[slot]
    }
    /// The packet count of `slot`'s value (from the dense array).
    #[inline]
    pub fn pkts(&self, slot: usize) -> u64 {
        self.pkts[slot]
    }
    /// Packet count of the slot the key at position `pos` most likely has (the position hint).
    #[inline]
    pub fn hinted_pkts(&self, pos: usize) -> Option<u64> {
        self.pkts.get(*self.hint.get(pos)? as usize).copied()
    }
    /// Takes `slot`'s packet count and last packet time from its value after a
    /// [`PrevStore::value_mut`] update.
    #[inline]
    pub fn sync_pkts(&mut self, slot: usize) {
        self.pkts[slot] = self.vals[slot].pkts;
        self.last[slot] = self.vals[slot].last_ns;
    }
    pub fn tag(&self, slot: usize) -> u32 {
        self.tags[slot]
    }

    /// Adds `k` (not present) with its `tag`, seen at position `pos` of the current snapshot.
    pub fn insert(&mut self, pos: usize, k: QpKey, v: QpValue, tag: u32) {
        let s = match self.free.pop() {
            Some(s) => {
                let s = s as usize;
                self.keys[s] = k;
                self.vals[s] = v;
                self.blocks[s] = nonzero_blocks(&v);
                self.pkts[s] = v.pkts;
                self.last[s] = v.last_ns;
                self.tags[s] = tag;
                self.alive[s] = true;
                self.seen[s] = self.generation;
                s
            }
            None => {
                self.keys.push(k);
                self.vals.push(v);
                self.blocks.push(nonzero_blocks(&v));
                self.pkts.push(v.pkts);
                self.last.push(v.last_ns);
                self.tags.push(tag);
                self.alive.push(true);
                self.seen.push(self.generation);
                self.keys.len() - 1
            }
        };
        self.index.insert(k, s as u32);
        self.dirs[(k.dir as usize).min(dir::COUNT - 1)] += 1;
        if let Some(x) = self.hint.get_mut(pos) {
            *x = s as u32;
        }
    }

    /// Removes `k`: its last value and tag.
    pub fn remove(&mut self, k: &QpKey) -> Option<(QpValue, u32)> {
        let s = self.index.remove(k)? as usize;
        self.dirs[(k.dir as usize).min(dir::COUNT - 1)] -= 1;
        self.alive[s] = false;
        self.free.push(s as u32);
        Some((self.vals[s], self.tags[s]))
    }

    /// Keys not seen since [`PrevStore::begin_scan`].
    pub fn vanished(&self) -> Vec<QpKey> {
        (0..self.keys.len())
            .filter(|&s| self.alive[s] && self.seen[s] != self.generation)
            .map(|s| self.keys[s])
            .collect()
    }

    /// The last value of key `k`, when tracked.
    pub fn get(&self, k: &QpKey) -> Option<&QpValue> {
        let s = *self.index.get(k)? as usize;
        self.alive[s].then(|| &self.vals[s])
    }

    pub fn contains(&self, k: &QpKey) -> bool {
        self.index.contains_key(k)
    }

    /// Keys whose last packet is before `limit_ns` (their value's `last_ns`).
    pub fn idle(&self, limit_ns: i64) -> impl Iterator<Item = &QpKey> {
        (0..self.keys.len())
            .filter(move |&s| self.alive[s] && (self.last[s] as i64) < limit_ns)
            .map(|s| &self.keys[s])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&QpKey, &QpValue)> {
        (0..self.keys.len())
            .filter(|&s| self.alive[s])
            .map(|s| (&self.keys[s], &self.vals[s]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(q: u32) -> QpKey {
        QpKey {
            dest_qp: q,
            ..Default::default()
        }
    }

    #[test]
    fn hints_lookups_removal_and_vanished() {
        let mut p = PrevStore::default();
        p.begin_scan(3);
        for (i, q) in [1, 2, 3].into_iter().enumerate() {
            assert!(p.find(i, &k(q)).is_none());
            p.insert(
                i,
                k(q),
                QpValue {
                    pkts: q as u64,
                    ..QpValue::ZERO
                },
                q * 10,
            );
        }
        // same order: found by hint; shifted order: found by index
        p.begin_scan(2);
        let s = p.find(0, &k(2)).unwrap();
        assert_eq!(p.value(s).pkts, 2);
        assert_eq!((p.pkts(s), p.hinted_pkts(0)), (2, Some(2)));
        // an update through value_mut reaches the dense packet counts with sync_pkts
        p.value_mut(s).pkts = 9;
        assert_eq!(p.pkts(s), 2);
        p.sync_pkts(s);
        assert_eq!(p.pkts(s), 9);
        p.value_mut(s).pkts = 2;
        p.sync_pkts(s);
        assert_eq!(p.find(1, &k(1)).map(|s| p.value(s).pkts), Some(1));
        assert_eq!(p.vanished(), vec![k(3)]);
        assert_eq!(p.per_dir()[0], 3);
        assert_eq!(p.remove(&k(3)).map(|(v, t)| (v.pkts, t)), Some((3, 30)));
        assert_eq!(p.per_dir()[0], 2);
        assert!(!p.contains(&k(3)));
        // key 3 comes back with histogram buckets (into its freed slot), goes again; the slot
        // reused by key 4 then has key 4's blocks, none
        p.insert(
            2,
            k(3),
            {
                let mut v = QpValue::ZERO;
                v.ecn_hist[0][2] = 5;
                v
            },
            30,
        );
        let s3 = p.find(2, &k(3)).unwrap();
        let want = nonzero_blocks(p.value(s3));
        assert_ne!(want, 0);
        assert_eq!(*p.value_blocks_mut(s3).1, want);
        p.begin_scan(2);
        assert_eq!(p.remove(&k(3)).map(|(_, t)| t), Some(30));
        p.insert(1, k(4), QpValue::ZERO, 40); // reuses the freed slot
        assert_eq!(p.len(), 3);
        let s4 = p.find(1, &k(4)).unwrap();
        assert_eq!(p.pkts(s4), 0, "the reused slot's count");
        assert_eq!(
            *p.value_blocks_mut(s4).1,
            0,
            "the reused slot's histogram blocks"
        );
        assert_eq!(p.iter().count(), 3);
        // the idle search reads the dense last-packet times, kept with the values
        let s1 = p.find(2, &k(1)).unwrap();
        p.value_mut(s1).last_ns = 500;
        p.sync_pkts(s1);
        let mut idle: Vec<u32> = p.idle(100).map(|x| x.dest_qp).collect();
        idle.sort();
        assert_eq!(idle, vec![2, 4], "key 1's last packet is at 500");
        assert_eq!(p.idle(1000).count(), 3);
        p.begin_scan(1);
        assert_eq!(
            p.find(0, &k(4)).map(|s| (p.value(s).pkts, p.tag(s))),
            Some((0, 40))
        );
    }
}
