//! The userspace datapath: the eBPF programs' per-frame logic (classify, per-interface
//! accounting, per-QP update, per-source-MAC PFC, first-occurrence events) run on frames from a
//! capture, with the same shared code from `observer-common`, plus the ICRC check the kernel does
//! not do. Replay and the tests use it; its state has the same layout as the kernel maps, so it
//! produces the same [`Snapshot`]s.

use std::collections::HashMap;

use observer_common::icrc;
use observer_common::latency;
use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, Policy, QpKey, QpValue, dir,
};
use observer_common::parse::{self, kind};
use observer_common::qp::{self, Plain};

use crate::sources::Snapshot;
use crate::sources::kernel::MAX_MACS;
use crate::sources::latency::LatencyTracker;
use crate::sources::snapshot::{Changed, next_snapshot_id};

/// Hasher of the per-QP and per-MAC maps: foldhash (randomly seeded), several times faster than
/// SipHash on the 40-byte key, which dominated replay's per-packet cost.
pub type FastHash = foldhash::fast::RandomState;

/// The per-QP values of one interface: a compact open-addressing index (8 bytes per slot, at
/// most half full: at 20,000 keys 256 KiB, so the lookup stays in the caches) into a dense
/// vector of (key, value) in insertion order, the key beside the value's first counters (the
/// key compare loads the line the packet's counters are added to). The vector is what a
/// snapshot carries: it is lent to the consumer without a copy ([`Datapath::lend_snapshot`])
/// and its order is stable between intervals (the collector's position hints then find every
/// key without hashing).
#[derive(Default)]
pub struct QpSlab {
    hasher: FastHash,
    /// `tag << 32 | (position + 1)`, 0 when empty; the tag is the hash's high 32 bits. A power
    /// of two in length (or empty); linear probing.
    slots: Vec<u64>,
    entries: Vec<(QpKey, QpValue)>,
}

impl QpSlab {
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    #[inline]
    fn hash(&self, k: &QpKey) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(k)
    }
    /// Slot index of `k` (`Ok`), or of the empty slot where it would go (`Err`).
    #[inline]
    fn find_slot(&self, k: &QpKey, h: u64) -> Result<usize, usize> {
        let mask = self.slots.len().wrapping_sub(1);
        if self.slots.is_empty() {
            return Err(usize::MAX);
        }
        let tag = h >> 32;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return Err(i);
            }
            if s >> 32 == tag && self.entries[(s as u32 - 1) as usize].0 == *k {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }
    /// Position of `k` in [`QpSlab::entries`].
    #[inline]
    pub fn position(&self, k: &QpKey) -> Option<usize> {
        let s = self.find_slot(k, self.hash(k)).ok()?;
        Some((self.slots[s] as u32 - 1) as usize)
    }
    pub fn get(&self, k: &QpKey) -> Option<&QpValue> {
        self.position(k).map(|i| &self.entries[i].1)
    }
    pub fn get_mut(&mut self, k: &QpKey) -> Option<&mut QpValue> {
        let i = self.position(k)?;
        Some(&mut self.entries[i].1)
    }
    /// Rebuilds the index at `cap` slots (a power of two) from the entries.
    #[cold]
    fn rebuild(&mut self, cap: usize) {
        self.slots = vec![0; cap];
        for p in 0..self.entries.len() {
            let h = self.hash(&self.entries[p].0);
            let i = match self.find_slot(&self.entries[p].0, h) {
                Ok(i) | Err(i) => i,
            };
            self.slots[i] = (h >> 32) << 32 | (p as u64 + 1);
        }
    }
    /// Adds `k` (not present) with `v`; returns its position.
    pub fn insert(&mut self, k: QpKey, v: QpValue) -> usize {
        if (self.entries.len() + 1) * 2 > self.slots.len() {
            self.rebuild((self.slots.len() * 2).max(64));
        }
        let h = self.hash(&k);
        let i = match self.find_slot(&k, h) {
            Ok(i) => return (self.slots[i] as u32 - 1) as usize,
            Err(i) => i,
        };
        let p = self.entries.len();
        self.entries.push((k, v));
        self.slots[i] = (h >> 32) << 32 | (p as u64 + 1);
        p
    }
    /// Removes `k` (the last entry takes its position). Rare (tests, never on the packet
    /// path): the index is rebuilt.
    pub fn remove(&mut self, k: &QpKey) -> Option<QpValue> {
        let p = self.position(k)?;
        let (_, v) = self.entries.swap_remove(p);
        self.rebuild(self.slots.len());
        Some(v)
    }
    pub fn keys(&self) -> impl Iterator<Item = &QpKey> {
        self.entries.iter().map(|(k, _)| k)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&QpKey, &QpValue)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
    /// Every (key, value), in insertion order (changed by removals).
    pub fn entries(&self) -> &[(QpKey, QpValue)] {
        &self.entries
    }

    /// Prefetches the cache lines a RoCE packet of key `k` (opcode `op`, DSCP, ECN, PCP bucket)
    /// will update: the key and the counters, the PSN state and the histogram cells. A hint
    /// only: nothing is changed, an absent key does nothing.
    #[inline]
    fn prefetch(&self, k: &QpKey, f: &observer_common::parse::Frame) {
        // The first slot with the key's tag: the key itself is not compared (that would wait
        // for the very line being prefetched); a wrong guess costs a useless prefetch.
        if self.slots.is_empty() {
            return;
        }
        let h = self.hash(k);
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        let p = loop {
            let s = self.slots[i];
            if s == 0 {
                return;
            }
            if s >> 32 == h >> 32 {
                break (s as u32 - 1) as usize;
            }
            i = (i + 1) & mask;
        };
        let Some(e) = self.entries.get(p) else {
            return;
        };
        let v = &e.1;
        let (bucket, c) = qp::opcode_info(f.bth.opcode);
        let pcp = (f.pcp as usize).min(observer_common::maps::PCP_BUCKETS - 1);
        let lines: [*const u8; 7] = [
            (e as *const (QpKey, QpValue)).cast(),
            (&v.psn_max_p1 as *const u32).cast(),
            (&v.icrc_ok as *const u64).cast(),
            (&v.opcode_hist[bucket] as *const u32).cast(),
            (&v.dscp_hist[c][(f.dscp & 63) as usize] as *const u32).cast(),
            (&v.ecn_hist[c][(f.ecn & 3) as usize] as *const u32).cast(),
            (&v.pcp_hist[c][pcp] as *const u32).cast(),
        ];
        #[cfg(target_arch = "x86_64")]
        for l in lines {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch is only a hint and never faults; the addresses are in `e`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(l.cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = lines;
    }
}

/// Per-interface state, as the kernel keeps it for one interface.
pub struct Datapath {
    pub policy: Policy,
    /// Largest number of keys (the kernel map's size); further new keys are not inserted and
    /// their packets are counted `roce_untracked`.
    pub max_qps: usize,
    /// Changed only by [`Datapath::process`], which notes each entry it touches in `touched`.
    qps: QpSlab,
    /// Positions of the entries touched since the last lent snapshot, each once (`dirty`).
    touched: Vec<u32>,
    dirty: Vec<bool>,
    /// The id of the last lent snapshot ([`Changed::base`] of the next).
    last_lent: Option<u64>,
    pub iface: [IfaceStats; dir::COUNT],
    pub macs: HashMap<MacKey, PfcCounters, FastHash>,
    /// Largest number of source MACs with PFC / PAUSE counters: the kernel's `MACS` map size
    /// ([`MAX_MACS`]); frames of further MACs count `mac_insert_failed`, as in the kernel.
    pub max_macs: usize,
    /// Events produced since the last [`Datapath::take_events`].
    pub events: Vec<Event>,
    /// PFC / PAUSE frames since the last [`Datapath::take_pauses`] (the kernel's `PAUSES`
    /// ring).
    pub pauses: Vec<PauseEvent>,
    /// Whether to check the ICRC (replay does, the kernel cannot).
    pub check_icrc: bool,
    /// Whether [`Datapath::process`] says which rules each frame broke (`last_offense`): a
    /// replay writing evidence asks for it.
    pub offenses: bool,
    /// With `offenses`: the [`qp::offense`] bits of the last frame processed (0: none), and its
    /// key when it was a RoCE packet.
    pub last_offense: u32,
    pub last_key: Option<QpKey>,
    /// Passive latency (docs/latency.md), `None` when off (the default).
    pub latency: Option<LatencyTracker>,
}

impl Datapath {
    pub fn new(policy: Policy, max_qps: usize) -> Self {
        Datapath {
            policy,
            max_qps,
            qps: QpSlab::default(),
            touched: Vec::new(),
            dirty: Vec::new(),
            last_lent: None,
            iface: [IfaceStats::default(); dir::COUNT],
            macs: HashMap::default(),
            max_macs: MAX_MACS as usize,
            events: Vec::new(),
            pauses: Vec::new(),
            check_icrc: true,
            offenses: false,
            last_offense: 0,
            last_key: None,
            latency: None,
        }
    }

    /// Measures passive latency (docs/latency.md); its outcomes wait for
    /// [`Datapath::take_latency`] (a source that never takes them must not turn it on).
    pub fn with_latency(mut self, timeout_ns: u64) -> Datapath {
        self.latency = Some(LatencyTracker::new(timeout_ns));
        self
    }

    /// Latency outcomes since the last call.
    pub fn take_latency(&mut self) -> Vec<latency::Record> {
        self.latency
            .as_mut()
            .map(|l| l.take_records())
            .unwrap_or_default()
    }

    /// The latency outcomes waiting, to be handed over and cleared (the buffer keeps its
    /// capacity); `None` when latency is off.
    pub fn latency_records(&mut self) -> Option<&mut Vec<latency::Record>> {
        self.latency.as_mut().map(|l| &mut l.records)
    }

    /// Latency outcomes waiting.
    pub fn latency_pending(&self) -> usize {
        self.latency.as_ref().map_or(0, |l| l.records.len())
    }

    /// The end of the observation at `t_ns`: every open latency measurement is `Open`.
    pub fn close_latency(&mut self, t_ns: u64) {
        if let Some(l) = self.latency.as_mut() {
            l.close_all(&self.qps.entries, t_ns, latency::Outcome::Open);
        }
    }

    /// Processes one frame: `bytes` as captured, `wire_len` its original length, `ts_ns` its time.
    pub fn process(&mut self, bytes: &[u8], wire_len: u32, ts_ns: u64, direction: u8) {
        let d = (direction as usize).min(dir::COUNT - 1);
        let f = parse::classify(bytes);
        qp::account_iface(&mut self.iface[d], &f, wire_len);
        if self.offenses {
            self.last_offense = 0;
            self.last_key = None;
        }
        match f.kind {
            kind::MAC_CONTROL => {
                if self.offenses {
                    self.last_offense = qp::mac_control_offenses(&f.mac_ctrl, &self.policy);
                }
                self.pauses
                    .extend(PauseEvent::of(&f.mac_ctrl, ts_ns, d as u8));
                let key = MacKey {
                    mac: f.mac_ctrl.src_mac,
                    dir: d as u8,
                    _pad: 0,
                };
                let full = self.macs.len() >= self.max_macs;
                match self.macs.get_mut(&key) {
                    Some(c) => qp::account_mac_control(c, &f.mac_ctrl),
                    None if full => self.iface[d].mac_insert_failed += 1,
                    None => {
                        let mut c = PfcCounters::default();
                        qp::account_mac_control(&mut c, &f.mac_ctrl);
                        self.macs.insert(key, c);
                    }
                }
            }
            kind::ROCE => {
                let key = QpKey {
                    src_ip: f.src_ip,
                    dst_ip: f.dst_ip,
                    dest_qp: f.bth.dest_qp,
                    dir: d as u8,
                    _pad: [0; 3],
                };
                let i = match self.qps.position(&key) {
                    Some(i) => i,
                    None if self.qps.len() >= self.max_qps => {
                        self.iface[d].qp_insert_failed += 1;
                        self.iface[d].roce_untracked += 1;
                        return;
                    }
                    None => self.qps.insert(key, QpValue::ZERO),
                };
                if i >= self.dirty.len() {
                    self.dirty.resize(i + 1, false);
                }
                if !self.dirty[i] {
                    self.dirty[i] = true;
                    self.touched.push(i as u32);
                }
                let v = &mut self.qps.entries[i].1;
                // SAFETY: `v` is a live &mut into the map; Plain ops, single thread.
                let out = unsafe { qp::update::<Plain, _>(v, &f, wire_len, ts_ns, &self.policy) };
                if out.psn == qp::PsnStep::Contended {
                    self.iface[d].psn_contended += 1;
                }
                if let Some(l) = self.latency.as_mut() {
                    l.on_packet(&self.qps.entries, i, &f, out.psn, ts_ns);
                }
                let v = &mut self.qps.entries[i].1;
                let mut icrc_bad = false;
                if self.check_icrc {
                    match icrc::verify(bytes, &f) {
                        icrc::Verdict::Ok => v.icrc_ok += 1,
                        icrc::Verdict::Bad => {
                            v.icrc_bad += 1;
                            icrc_bad = true;
                        }
                        icrc::Verdict::Unverifiable => v.icrc_unverifiable += 1,
                    }
                }
                if self.offenses {
                    self.last_offense =
                        out.offenses | (u32::from(icrc_bad) << qp::offense::ICRC_BAD);
                    self.last_key = Some(key);
                }
                let mut bits = out.new_events;
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    self.events.push(Event {
                        ts_ns,
                        key,
                        kind: b,
                        psn: f.bth.psn,
                        detail: match out.psn {
                            qp::PsnStep::Ahead(d) if b == qp::ev::PSN_GAP => (d - 1) as u32,
                            _ if b == qp::ev::NAK || b == qp::ev::RNR_NAK => f.aeth,
                            _ => 0,
                        },
                        opcode: f.bth.opcode,
                        dscp: f.dscp,
                        ecn: f.ecn,
                        pcp: f.pcp,
                    });
                }
            }
            _ => {}
        }
    }

    /// Prefetches the state the RoCE frame `bytes` (the start of an Ethernet frame seen in
    /// `direction`) will update, for a frame a few ahead of the current one: its key's index
    /// slot is read now, its value's lines arrive while the frames before it are processed.
    #[inline]
    pub fn prefetch(&self, bytes: &[u8], direction: u8) {
        let f = parse::classify(bytes);
        if f.kind != kind::ROCE {
            return;
        }
        let key = QpKey {
            src_ip: f.src_ip,
            dst_ip: f.dst_ip,
            dest_qp: f.bth.dest_qp,
            dir: (direction as usize).min(dir::COUNT - 1) as u8,
            _pad: [0; 3],
        };
        self.qps.prefetch(&key, &f);
    }

    /// Events produced since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// PFC / PAUSE frames since the last call.
    pub fn take_pauses(&mut self) -> Vec<PauseEvent> {
        std::mem::take(&mut self.pauses)
    }

    /// Cumulative state now, in the same form the live collector reads from the kernel.
    pub fn snapshot(&self, iface: &str, time_ns: u64, link_speed_bps: Option<u64>) -> Snapshot {
        Snapshot {
            iface: iface.to_string(),
            time_ns,
            link_speed_bps,
            qps: self.qps.entries.clone(),
            iface_stats: self.iface,
            macs: self.macs.iter().map(|(k, v)| (*k, *v)).collect(),
            changed: None,
        }
    }

    /// The per-QP state, in insertion order.
    pub fn qps(&self) -> &QpSlab {
        &self.qps
    }

    /// Removes key `k` (as a kernel eviction does; tests). Positions move, so the next lent
    /// snapshot has no base: its consumer compares every key.
    pub fn remove(&mut self, k: &QpKey) -> Option<QpValue> {
        if let Some(l) = self.latency.as_mut() {
            let t = self
                .qps
                .entries
                .iter()
                .map(|e| e.1.last_ns)
                .max()
                .unwrap_or(0);
            l.close_all(&self.qps.entries, t, latency::Outcome::Unmatched);
            l.reset();
        }
        let v = self.qps.remove(k)?;
        self.touched.clear();
        self.dirty.clear();
        self.last_lent = None;
        Some(v)
    }

    /// [`Datapath::snapshot`] without copying the per-QP values: the snapshot takes them, and
    /// [`Datapath::restore`] must give them back before the next frame (until then the
    /// datapath has no keys). It says which entries changed since the last lent snapshot
    /// ([`Snapshot::changed`]): those the frames since touched (keys are never removed, and
    /// an entry keeps its position).
    pub fn lend_snapshot(
        &mut self,
        iface: &str,
        time_ns: u64,
        link_speed_bps: Option<u64>,
    ) -> Snapshot {
        let mut positions = std::mem::take(&mut self.touched);
        // ascending: the collector's rows come in the order of a full comparison
        positions.sort_unstable();
        for &p in &positions {
            self.dirty[p as usize] = false;
        }
        let id = next_snapshot_id();
        let changed = Changed {
            base: self.last_lent.replace(id),
            id,
            positions,
            gone: Vec::new(),
            // not known: the values are updated in place, packet by packet
            blocks: Vec::new(),
            sparse: None,
        };
        Snapshot {
            iface: iface.to_string(),
            time_ns,
            link_speed_bps,
            qps: std::mem::take(&mut self.qps.entries),
            iface_stats: self.iface,
            macs: self.macs.iter().map(|(k, v)| (*k, *v)).collect(),
            changed: Some(changed),
        }
    }

    /// Takes back the values lent by [`Datapath::lend_snapshot`].
    pub fn restore(&mut self, s: Snapshot) {
        self.qps.entries = s.qps;
    }

    /// The final snapshot, taking the values (the datapath is left without keys).
    pub fn into_snapshot(
        mut self,
        iface: &str,
        time_ns: u64,
        link_speed_bps: Option<u64>,
    ) -> Snapshot {
        self.lend_snapshot(iface, time_ns, link_speed_bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> QpKey {
        let mut src = [0u8; 16];
        src[12..].copy_from_slice(&i.to_be_bytes());
        QpKey {
            src_ip: src,
            dst_ip: [7; 16],
            dest_qp: i.wrapping_mul(2_654_435_761) & 0xff_ffff,
            dir: (i % 2) as u8,
            _pad: [0; 3],
        }
    }

    /// The slab against a `HashMap` model: inserts through several index growths, lookups of
    /// present and absent keys, removals (the last entry moving into the hole), values kept.
    #[test]
    fn slab_matches_a_map() {
        let mut s = QpSlab::default();
        let mut model: HashMap<QpKey, u64> = HashMap::new();
        for i in 0..5000u32 {
            let k = key(i);
            let p = s.insert(
                k,
                QpValue {
                    pkts: i as u64,
                    ..QpValue::ZERO
                },
            );
            assert_eq!(p, i as usize, "positions in insertion order");
            model.insert(k, i as u64);
        }
        // a second insert of a present key returns its position and changes nothing
        assert_eq!(s.insert(key(17), QpValue::ZERO), 17);
        assert_eq!(s.len(), 5000);
        assert!(s.slots.len() >= 2 * s.len() && s.slots.len().is_power_of_two());
        for i in (0..5000u32).step_by(3) {
            assert_eq!(s.remove(&key(i)).map(|v| v.pkts), model.remove(&key(i)));
        }
        assert_eq!(s.remove(&key(0)).map(|v| v.pkts), None, "already removed");
        assert_eq!(s.len(), model.len());
        for i in 0..6000u32 {
            let k = key(i);
            assert_eq!(s.get(&k).map(|v| v.pkts), model.get(&k).copied(), "key {i}");
            if let Some(p) = s.position(&k) {
                assert_eq!(s.entries()[p].0, k);
            }
        }
        *s.get_mut(&key(1)).unwrap() = QpValue {
            pkts: 99,
            ..QpValue::ZERO
        };
        assert_eq!(s.get(&key(1)).unwrap().pkts, 99);
        assert_eq!(s.iter().count(), model.len());
    }

    /// A lent snapshot says which entries changed since the last one: exactly the entries
    /// whose values differ from that snapshot's (new keys included), in ascending order, with
    /// the last lent snapshot as base; a removal leaves the next without a base. Random traffic
    /// over 12 rounds, 300 keys of which a few dozen get packets per round.
    #[test]
    fn lent_snapshots_say_what_changed() {
        use crate::sources::synthetic::Roce;
        let mut dp = Datapath::new(Policy::NONE, 1000);
        let mut next = crate::testutil::xorshift(0x2545_f491_4f6c_dd1d);
        let mut prev: Vec<(QpKey, QpValue)> = Vec::new();
        let mut last_id = None;
        let mut psn = [0u32; 300];
        for round in 0..12u64 {
            if round == 7 {
                let k = dp.qps().entries()[3].0;
                dp.remove(&k).unwrap();
                prev = dp.qps().entries().to_vec();
            }
            let n = next() % 60;
            for _ in 0..n {
                let q = (next() % 300) as usize;
                let f = Roce::data([10, 0, 0, 1], [10, 0, 0, 2], q as u32, psn[q]).frame();
                psn[q] += 1;
                dp.process(&f, f.len() as u32, round * 1_000_000_000, 0);
            }
            let s = dp.lend_snapshot("x", round, None);
            let ch = s
                .changed
                .clone()
                .expect("a lent snapshot says what changed");
            let expect: Vec<u32> = (0..s.qps.len())
                .filter(|&p| prev.get(p) != Some(&s.qps[p]))
                .map(|p| p as u32)
                .collect();
            assert_eq!(ch.positions, expect, "round {round}");
            assert!(ch.gone.is_empty());
            assert_eq!(
                ch.base,
                if round == 7 { None } else { last_id },
                "round {round}"
            );
            assert_ne!(Some(ch.id), last_id);
            last_id = Some(ch.id);
            prev = s.qps.clone();
            dp.restore(s);
        }
    }

    /// A lent snapshot carries every key's value without a copy and gives it back.
    #[test]
    fn lend_and_restore() {
        let mut dp = Datapath::new(Policy::NONE, 16);
        dp.qps.insert(key(1), QpValue::ZERO);
        dp.qps.insert(key(2), QpValue::ZERO);
        let ptr = dp.qps.entries().as_ptr();
        let s = dp.lend_snapshot("x", 5, None);
        assert_eq!(s.qps.len(), 2);
        assert_eq!(s.qps.as_ptr(), ptr, "moved, not copied");
        dp.restore(s);
        assert_eq!(dp.qps.position(&key(2)), Some(1));
        assert_eq!(dp.snapshot("x", 5, None).qps.len(), 2);
    }
}
