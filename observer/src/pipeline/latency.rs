//! The collector's side of passive latency (docs/latency.md): the outcomes of each key
//! gathered per interval (the `flows` columns) and over the run (summary.json's percentiles),
//! as sparse log-bucketed histograms.

use std::collections::HashMap;

use observer_common::latency::{self, BUCKETS, Record, kind};
use observer_common::maps::QpKey;
use serde_json::{Value, json};

/// One key's latency outcomes (of an interval, or of the run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyLatency {
    /// Per [`kind`]: (bucket position, samples), ascending, non-zero only.
    pub hist: [Vec<(u8, u64)>; kind::COUNT],
    /// Per kind: measurements started and not answered (timed out, a new incarnation, passed
    /// over, still open at the end).
    pub unmatched: [u64; kind::COUNT],
    /// Entries Karn's rule excluded (ACK and READ).
    pub ambiguous: u64,
    /// Entries not started: the key's outstanding ring was full.
    pub ring_full: u64,
    /// Per kind: measurements still open when the observation ended (the run only).
    pub open: [u64; kind::COUNT],
}

impl KeyLatency {
    pub fn add(&mut self, r: &Record) {
        let k = (r.kind as usize).min(kind::COUNT - 1);
        match r.outcome {
            0 => {
                let b = latency::bucket(r.value_ns) as u8;
                let h = &mut self.hist[k];
                match h.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => h[i].1 += 1,
                    Err(i) => h.insert(i, (b, 1)),
                }
            }
            1 => self.unmatched[k] += 1,
            2 => self.ambiguous += 1,
            3 => self.ring_full += 1,
            _ => self.open[k] += 1,
        }
    }

    pub fn merge(&mut self, o: &KeyLatency) {
        for (h, oh) in self.hist.iter_mut().zip(&o.hist) {
            for &(b, n) in oh {
                match h.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => h[i].1 += n,
                    Err(i) => h.insert(i, (b, n)),
                }
            }
        }
        for (u, ou) in self.unmatched.iter_mut().zip(&o.unmatched) {
            *u += ou;
        }
        self.ambiguous += o.ambiguous;
        self.ring_full += o.ring_full;
        for (u, ou) in self.open.iter_mut().zip(&o.open) {
            *u += ou;
        }
    }

    /// Samples of kind `k`.
    pub fn samples(&self, k: usize) -> u64 {
        self.hist[k].iter().map(|e| e.1).sum()
    }

    /// The quantile `num / den` of kind `k` in nanoseconds (the upper edge of its bucket).
    pub fn quantile_ns(&self, k: usize, num: u64, den: u64) -> Option<u64> {
        latency::quantile_upper_ns(self.hist[k].iter().map(|&(b, n)| (b as usize, n)), num, den)
    }

    /// summary.json's `latency` object of a QP: per kind with anything, its samples,
    /// unmatched and p50 / p99 / p999 in microseconds (bucket upper edges).
    pub fn summary_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, name) in kind::NAMES.iter().enumerate() {
            let n = self.samples(k);
            if n == 0 && self.unmatched[k] == 0 && self.open[k] == 0 {
                continue;
            }
            let q = |num, den| {
                self.quantile_ns(k, num, den)
                    .map(|ns| Value::from(ns as f64 / 1e3))
                    .unwrap_or(Value::Null)
            };
            m.insert(
                name.to_string(),
                json!({
                    "samples": n,
                    "unmatched": self.unmatched[k],
                    "open": self.open[k],
                    "p50_us": q(1, 2),
                    "p99_us": q(99, 100),
                    "p999_us": q(999, 1000),
                }),
            );
        }
        if self.ambiguous > 0 {
            m.insert("ambiguous".into(), self.ambiguous.into());
        }
        if self.ring_full > 0 {
            m.insert("ring_full".into(), self.ring_full.into());
        }
        Value::Object(m)
    }
}

/// Per key, the outcomes not yet written.
pub type Pending = HashMap<QpKey, KeyLatency, foldhash::fast::RandomState>;

/// Adds `records` to `interval` and `run` (both per key); measurements open at the end
/// (`Outcome::Open`) to the run only: they belong to no interval's row.
pub fn gather(interval: &mut Pending, run: &mut Pending, records: &[Record]) {
    for r in records {
        if r.outcome != latency::Outcome::Open.code() {
            interval.entry(r.key).or_default().add(r);
        }
        run.entry(r.key).or_default().add(r);
    }
}

/// The histogram's bucket upper edge of position `b` in microseconds (for readers).
pub fn upper_us(b: usize) -> f64 {
    latency::UPPER_NS[b.min(BUCKETS - 1)] as f64 / 1e3
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
        assert_eq!(l.hist[0].len(), 3);
        assert!(l.hist[0].windows(2).all(|w| w[0].0 < w[1].0));
        let p50 = l.quantile_ns(0, 1, 2).unwrap();
        assert!((10_000..12_000).contains(&p50), "{p50}");
        let p99 = l.quantile_ns(0, 99, 100).unwrap();
        assert!((2_000_000..2_400_000).contains(&p99), "{p99}");
        let j = l.summary_json();
        assert_eq!(j["ack"]["samples"], 4);
        assert_eq!(j["ack"]["unmatched"], 1);
        assert_eq!(j["ambiguous"], 1);
        assert_eq!(j["ring_full"], 1);
        assert_eq!(j["read"]["open"], 1);
        assert_eq!(j["read"]["samples"], 0);
        assert!(j["read"]["p50_us"].is_null());
        assert!(j.get("nak_resend").is_none());
        let mut m = l.clone();
        m.merge(&l);
        assert_eq!(m.samples(0), 8);
        assert_eq!(m.unmatched[0], 2);
    }
}
