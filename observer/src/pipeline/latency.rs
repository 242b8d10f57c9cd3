//! The collector's side of passive latency (docs/latency.md): the outcomes of each key
//! gathered per interval (the `flows` columns) and over the run (summary.json's percentiles),
//! as sparse log-bucketed histograms.

use std::collections::HashMap;

use observer_common::latency::{self, Record, kind};
use observer_common::maps::{QpKey, dir};
use serde::ser::{SerializeMap, Serializer};

/// One key's latency outcomes (of an interval, or of the run). Compact: one sorted list of
/// (kind, bucket position, samples) for every kind, so a key of the run costs tens of bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyLatency {
    /// (kind, bucket position, samples), ascending, non-zero only.
    hist: Vec<(u8, u8, u32)>,
    /// Per kind: measurements started and not answered (timed out, a new incarnation, passed
    /// over).
    pub unmatched: [u32; kind::COUNT],
    /// Per kind: measurements still open when the observation ended (the run only).
    pub open: [u32; kind::COUNT],
    /// Entries Karn's rule excluded (ACK and READ).
    pub ambiguous: u32,
    /// Entries not started: the key's outstanding ring was full.
    pub ring_full: u32,
}

impl KeyLatency {
    fn bump(&mut self, k: u8, b: u8, n: u32) {
        match self.hist.binary_search_by_key(&(k, b), |e| (e.0, e.1)) {
            Ok(i) => self.hist[i].2 = self.hist[i].2.saturating_add(n),
            Err(i) => self.hist.insert(i, (k, b, n)),
        }
    }

    pub fn add(&mut self, r: &Record) {
        self.add_outcome(r.kind, r.outcome());
    }

    /// One outcome of kind `k` ([`kind`]).
    #[inline]
    pub fn add_outcome(&mut self, k: u8, o: latency::Outcome) {
        let k = (k as usize).min(kind::COUNT - 1);
        let one = |x: &mut u32| *x = x.saturating_add(1);
        match o {
            latency::Outcome::Sample(v) => self.bump(k as u8, latency::bucket(v) as u8, 1),
            latency::Outcome::Unmatched => one(&mut self.unmatched[k]),
            latency::Outcome::Ambiguous => one(&mut self.ambiguous),
            latency::Outcome::RingFull => one(&mut self.ring_full),
            latency::Outcome::Open => one(&mut self.open[k]),
        }
    }

    pub fn merge(&mut self, o: &KeyLatency) {
        for &(k, b, n) in &o.hist {
            self.bump(k, b, n);
        }
        let add = |a: &mut [u32], b: &[u32]| {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        };
        add(&mut self.unmatched, &o.unmatched);
        add(&mut self.open, &o.open);
        self.ambiguous = self.ambiguous.saturating_add(o.ambiguous);
        self.ring_full = self.ring_full.saturating_add(o.ring_full);
    }

    /// Kind `k`'s histogram: (bucket position, samples), ascending.
    pub fn buckets(&self, k: usize) -> impl Iterator<Item = (usize, u64)> + Clone + '_ {
        self.hist
            .iter()
            .filter(move |e| e.0 as usize == k)
            .map(|e| (e.1 as usize, e.2 as u64))
    }

    /// Samples of kind `k`.
    pub fn samples(&self, k: usize) -> u64 {
        self.buckets(k).map(|e| e.1).sum()
    }

    /// The quantile `num / den` of kind `k` in nanoseconds (the upper edge of its bucket).
    pub fn quantile_ns(&self, k: usize, num: u64, den: u64) -> Option<u64> {
        latency::quantile_upper_ns(self.buckets(k), num, den)
    }
}

/// Per key, the outcomes not yet written.
pub type Pending = HashMap<QpKey, KeyLatency, foldhash::fast::RandomState>;

/// Adds `records` to `interval` (per key: the interval's rows take them and add them to the
/// run's); measurements open at the end (`Outcome::Open`) to `run` directly, as they belong to
/// no interval's row.
pub fn gather(interval: &mut Pending, run: &mut Pending, records: &[Record]) {
    let open = latency::Outcome::Open.code();
    // consecutive records of one key (an ACK ending several entries) share one lookup
    for group in
        records.chunk_by(|a, b| a.key == b.key && (a.outcome == open) == (b.outcome == open))
    {
        let to = if group[0].outcome == open {
            &mut *run
        } else {
            &mut *interval
        };
        let l = to.entry(group[0].key).or_default();
        for r in group {
            l.add(r);
        }
    }
}

/// One QP of summary.json's `latency` (docs/latency.md): the key, then per kind its samples,
/// unmatched, open and percentiles; keys in sorted order, as the rest of summary.json.
pub struct LatencyQp<'a> {
    pub iface: &'a str,
    pub key: &'a QpKey,
    pub lat: &'a KeyLatency,
}

struct KindJson<'a>(&'a KeyLatency, usize);

impl serde::Serialize for KindJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (l, k) = (self.0, self.1);
        let q = |num, den| l.quantile_ns(k, num, den).map(|ns| ns as f64 / 1e3);
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("open", &l.open[k])?;
        m.serialize_entry("p50_us", &q(1, 2))?;
        m.serialize_entry("p999_us", &q(999, 1000))?;
        m.serialize_entry("p99_us", &q(99, 100))?;
        m.serialize_entry("samples", &l.samples(k))?;
        m.serialize_entry("unmatched", &l.unmatched[k])?;
        m.end()
    }
}

impl serde::Serialize for LatencyQp<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let l = self.lat;
        let has = |k: usize| l.samples(k) > 0 || l.unmatched[k] > 0 || l.open[k] > 0;
        let kind_entry = |m: &mut S::SerializeMap, k: u8| -> Result<(), S::Error> {
            let k = k as usize;
            if has(k) {
                m.serialize_entry(kind::NAMES[k], &KindJson(l, k))?;
            }
            Ok(())
        };
        let mut m = s.serialize_map(None)?;
        // sorted: ack, ambiguous, ce_cnp, dir, dst, iface, nak_resend, qp, read, ring_full, src
        kind_entry(&mut m, kind::ACK)?;
        if l.ambiguous > 0 {
            m.serialize_entry("ambiguous", &l.ambiguous)?;
        }
        kind_entry(&mut m, kind::CNP)?;
        m.serialize_entry(
            "dir",
            dir::NAMES[(self.key.dir as usize).min(dir::COUNT - 1)],
        )?;
        m.serialize_entry("dst", &contract::addr::ip_of(&self.key.dst_ip).to_string())?;
        m.serialize_entry("iface", self.iface)?;
        kind_entry(&mut m, kind::NAK)?;
        m.serialize_entry("qp", &self.key.dest_qp)?;
        kind_entry(&mut m, kind::READ)?;
        if l.ring_full > 0 {
            m.serialize_entry("ring_full", &l.ring_full)?;
        }
        m.serialize_entry("src", &contract::addr::ip_of(&self.key.src_ip).to_string())?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::latency::{Outcome, Record};

    #[test]
    fn outcomes_gather_into_sparse_histograms_and_percentiles() {
        let key = QpKey::default();
        let mut l = KeyLatency::default();
        for v in [10_000u64, 10_000, 12_000, 2_000_000] {
            l.add(&Record::new(key, 0, kind::ACK, Outcome::Sample(v)));
        }
        l.add(&Record::new(key, 0, kind::ACK, Outcome::Unmatched));
        l.add(&Record::new(key, 0, kind::READ, Outcome::Ambiguous));
        l.add(&Record::new(key, 0, kind::ACK, Outcome::RingFull));
        l.add(&Record::new(key, 0, kind::READ, Outcome::Open));
        assert_eq!(l.samples(kind::ACK as usize), 4);
        let b: Vec<(usize, u64)> = l.buckets(0).collect();
        assert_eq!(b.len(), 3);
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0));
        let p50 = l.quantile_ns(0, 1, 2).unwrap();
        assert!((10_000..12_000).contains(&p50), "{p50}");
        let p99 = l.quantile_ns(0, 99, 100).unwrap();
        assert!((2_000_000..2_400_000).contains(&p99), "{p99}");
        let j = serde_json::to_value(LatencyQp {
            iface: "e0",
            key: &key,
            lat: &l,
        })
        .unwrap();
        assert_eq!(j["ack"]["samples"], 4);
        assert_eq!(j["ack"]["unmatched"], 1);
        assert_eq!(j["ambiguous"], 1);
        assert_eq!(j["ring_full"], 1);
        assert_eq!(j["read"]["open"], 1);
        assert_eq!(j["read"]["samples"], 0);
        assert!(j["read"]["p50_us"].is_null());
        assert!(j.get("nak_resend").is_none());
        // the keys come out sorted, as serde_json's own maps
        let text = serde_json::to_string(&LatencyQp {
            iface: "e0",
            key: &key,
            lat: &l,
        })
        .unwrap();
        assert_eq!(text, serde_json::to_string(&j).unwrap());
        let mut m = l.clone();
        m.merge(&l);
        assert_eq!(m.samples(0), 8);
        assert_eq!(m.unmatched[0], 2);
        assert_eq!(m.open[1], 2);
        // gathering: the interval gets every outcome but the open ones, which go to the run
        let (mut iv, mut run) = (Pending::default(), Pending::default());
        let recs = [
            Record::new(key, 0, kind::ACK, Outcome::Sample(5_000)),
            Record::new(key, 0, kind::ACK, Outcome::Sample(6_000)),
            Record::new(key, 0, kind::ACK, Outcome::Open),
        ];
        gather(&mut iv, &mut run, &recs);
        assert_eq!(iv[&key].samples(0), 2);
        assert_eq!(iv[&key].open[0], 0);
        assert_eq!(run[&key].open[0], 1);
        assert_eq!(run[&key].samples(0), 0);
    }
}
