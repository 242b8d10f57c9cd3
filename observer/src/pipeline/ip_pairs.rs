//! Per-(source IP, destination IP) sums of one interval for the `ce_without_cnp` rule, without
//! hashing each row: every tracked key holds the id of its IP pair (interned once, when the key
//! is first seen), and an interval adds each active key's counts into a dense array at that id.

use std::collections::HashMap;

use crate::sources::datapath::FastHash;

/// (source IP, destination IP).
pub type IpPair = ([u8; 16], [u8; 16]);
/// CE-marked data packets, CNPs, all packets of one IP pair in one interval.
pub type PairCounts = (u64, u64, u64);

#[derive(Default)]
pub struct PairIndex {
    ids: HashMap<IpPair, u32, FastHash>,
    pairs: Vec<IpPair>,
    /// Keys holding each id; an id at 0 is free.
    refs: Vec<u32>,
    free: Vec<u32>,
    /// Ids to release when the interval ends (an id freed mid-interval and reused by a new
    /// key would mix two pairs' sums).
    releases: Vec<u32>,
    sums: Vec<PairCounts>,
    /// Interval in which `sums[id]` was last added to (older sums are zero).
    seen: Vec<u64>,
    interval: u64,
    /// Ids with counts in this interval, each once, in first-added order.
    touched: Vec<u32>,
}

impl PairIndex {
    /// The id of `p`, held by one more key until [`PairIndex::release`].
    pub fn acquire(&mut self, p: IpPair) -> u32 {
        if let Some(&id) = self.ids.get(&p) {
            self.refs[id as usize] += 1;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.pairs[id as usize] = p;
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.pairs.push(p);
                self.refs.push(1);
                self.sums.push((0, 0, 0));
                self.seen.push(0);
                (self.pairs.len() - 1) as u32
            }
        };
        self.ids.insert(p, id);
        id
    }

    /// One key less holds `id` (applied at [`PairIndex::end_interval`]).
    pub fn release(&mut self, id: u32) {
        self.releases.push(id);
    }

    pub fn begin_interval(&mut self) {
        self.interval += 1;
        self.touched.clear();
    }

    /// Adds one active key's counts to its pair.
    #[inline]
    pub fn add(&mut self, id: u32, (ce, cnp, pkts): PairCounts) {
        let i = id as usize;
        if self.seen[i] != self.interval {
            self.seen[i] = self.interval;
            self.sums[i] = (0, 0, 0);
            self.touched.push(id);
        }
        let s = &mut self.sums[i];
        s.0 += ce;
        s.1 += cnp;
        s.2 += pkts;
    }

    /// This interval's sums of `p` (zero when no key of the pair was active).
    pub fn sums_of(&self, p: &IpPair) -> PairCounts {
        match self.ids.get(p) {
            Some(&id) if self.seen[id as usize] == self.interval => self.sums[id as usize],
            _ => (0, 0, 0),
        }
    }

    /// Pairs with an active key in this interval, and their sums.
    pub fn touched(&self) -> impl Iterator<Item = (&IpPair, PairCounts)> {
        self.touched
            .iter()
            .map(|&id| (&self.pairs[id as usize], self.sums[id as usize]))
    }

    /// Applies the releases of the interval.
    pub fn end_interval(&mut self) {
        for id in std::mem::take(&mut self.releases) {
            let r = &mut self.refs[id as usize];
            *r -= 1;
            if *r == 0 {
                self.ids.remove(&self.pairs[id as usize]);
                self.free.push(id);
            }
        }
    }

    /// Interned pairs (held by at least one key).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: u8, b: u8) -> IpPair {
        let (mut x, mut y) = ([0u8; 16], [0u8; 16]);
        x[15] = a;
        y[15] = b;
        (x, y)
    }

    #[test]
    fn sums_per_interval_and_release_at_the_end() {
        let mut ix = PairIndex::default();
        ix.begin_interval();
        let a = ix.acquire(p(1, 2));
        let a2 = ix.acquire(p(1, 2));
        let b = ix.acquire(p(2, 1));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        ix.add(a, (3, 0, 10));
        ix.add(a, (4, 1, 5));
        assert_eq!(ix.sums_of(&p(1, 2)), (7, 1, 15));
        assert_eq!(ix.sums_of(&p(2, 1)), (0, 0, 0), "no active key of the pair");
        assert_eq!(ix.sums_of(&p(9, 9)), (0, 0, 0), "unknown pair");
        assert_eq!(ix.touched().count(), 1);
        // released mid-interval: still the same pair until the interval ends
        ix.release(b);
        let c = ix.acquire(p(3, 4));
        assert_ne!(c, b);
        ix.end_interval();
        assert_eq!(ix.len(), 2);
        ix.begin_interval();
        assert_eq!(
            ix.sums_of(&p(1, 2)),
            (0, 0, 0),
            "a new interval starts at zero"
        );
        assert_eq!(ix.acquire(p(5, 6)), b, "freed id reused");
        ix.release(a);
        ix.release(a2);
        ix.end_interval();
        assert_eq!(ix.len(), 2);
        assert!(!ix.is_empty());
    }
}
