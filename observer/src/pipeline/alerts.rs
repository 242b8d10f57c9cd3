//! Alerts and their hold-down: an [`Alert`] is a candidate from a kernel event (first
//! occurrence per key, sub-interval latency) or from interval deltas (rates, sums), made by the
//! rules of [`super::rules`]; [`Dedup`] keeps one per (rule, key) and hold-down: the first
//! occurrence is alerted at once, later ones within the hold-down are counted and reported as
//! one summary alert when it ends.

use std::collections::HashMap;

#[cfg(test)]
use observer_common::maps::{class, dir};

use contract::alert::Rule;
pub use contract::alert::{Alert, AlertJson, AlertKey, Severity};

struct Hold {
    last_emit_ns: u64,
    suppressed: u64,
    first_suppressed_ns: u64,
    latest: Option<Alert>,
}

/// Reconciles one (rule, key)'s kernel events with its interval deltas. The packet behind a
/// first-occurrence event is also in the interval delta that contains it, which the collector
/// may read before or after the event: either way it is counted once.
#[derive(Default)]
struct Tally {
    /// Occurrences alerted from events, not yet met in an interval delta: subtracted from the
    /// next deltas.
    credit: u64,
    /// A delta counted occurrences before any event of this key came: the first-occurrence
    /// event that may still arrive for one of them is counted already (the kernel raises at
    /// most one per rule and key).
    debit: bool,
    /// An event of this key has come.
    evented: bool,
}

/// Deduplication with hold-down per (rule, key).
pub struct Dedup {
    pub hold_down_ns: u64,
    /// foldhash, not SipHash: a replay of many keys offers an alert per key and event.
    holds: HashMap<(Rule, AlertKey), Hold, crate::sources::datapath::FastHash>,
    tallies: HashMap<(Rule, AlertKey), Tally, crate::sources::datapath::FastHash>,
}

impl Dedup {
    pub fn new(hold_down_ns: u64) -> Dedup {
        Dedup {
            hold_down_ns,
            holds: HashMap::default(),
            tallies: HashMap::default(),
        }
    }

    /// Offers a candidate; returns the alert to emit, if any.
    pub fn offer(&mut self, mut a: Alert) -> Option<Alert> {
        let id = (a.rule, a.key.clone());
        if a.origin == "event" {
            let t = self.tallies.entry(id.clone()).or_default();
            t.evented = true;
            if t.debit && a.count > 0 {
                // Its packet was counted by an interval alert already.
                t.debit = false;
                a.count -= 1;
            }
            t.credit += a.count;
            if a.count == 0 {
                return None;
            }
        } else if let Some(t) = self.tallies.get_mut(&id) {
            let used = t.credit.min(a.count);
            t.credit -= used;
            a.count -= used;
            t.debit |= a.count > 0 && !t.evented;
            if a.count == 0 {
                return None;
            }
        } else if a.count > 0 && a.rule.raised_by_events() {
            self.tallies.insert(
                id.clone(),
                Tally {
                    debit: true,
                    ..Tally::default()
                },
            );
        }
        match self.holds.get_mut(&id) {
            Some(h) if a.time_ns < h.last_emit_ns.saturating_add(self.hold_down_ns) => {
                if h.suppressed == 0 {
                    h.first_suppressed_ns = a.first_ns;
                }
                h.suppressed += a.count;
                h.latest = Some(a);
                None
            }
            Some(h) => {
                // Hold-down over: alert again, folding in what was held.
                if h.suppressed > 0 {
                    a.count += h.suppressed;
                    a.first_ns = h.first_suppressed_ns.min(a.first_ns);
                }
                h.last_emit_ns = a.time_ns;
                h.suppressed = 0;
                h.latest = None;
                Some(a)
            }
            None => {
                self.holds.insert(
                    id,
                    Hold {
                        last_emit_ns: a.time_ns,
                        suppressed: 0,
                        first_suppressed_ns: 0,
                        latest: None,
                    },
                );
                Some(a)
            }
        }
    }

    /// Emits summaries of held occurrences whose hold-down ended by `now_ns` (all of them when
    /// `flush`), and forgets quiet keys.
    pub fn tick(&mut self, now_ns: u64, flush: bool) -> Vec<Alert> {
        let hold = self.hold_down_ns;
        let mut out = Vec::new();
        self.holds.retain(|_, h| {
            let due = now_ns >= h.last_emit_ns.saturating_add(hold);
            if h.suppressed > 0 && (due || flush) {
                if let Some(mut a) = h.latest.take() {
                    a.count = h.suppressed;
                    a.first_ns = h.first_suppressed_ns;
                    a.time_ns = now_ns.max(a.time_ns);
                    a.summary = true;
                    out.push(a);
                }
                h.suppressed = 0;
                h.last_emit_ns = now_ns;
                return true;
            }
            !(due && h.suppressed == 0)
        });
        // A quiet key's tally goes with its hold (unless events still await their deltas).
        let holds = &self.holds;
        self.tallies
            .retain(|id, t| t.credit > 0 || holds.contains_key(id));
        // in a fixed order (the holds are a hash map): the same input gives the same lines
        out.sort_by(|a, b| {
            (a.time_ns, a.rule.name(), &a.key).cmp(&(b.time_ns, b.rule.name(), &b.key))
        });
        out
    }

    pub fn held_keys(&self) -> usize {
        self.holds.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(t: u64, n: u64) -> Alert {
        Alert::candidate(
            Rule::PfcStorm,
            AlertKey {
                iface: "e".into(),
                priority: Some(3),
                ..Default::default()
            },
            t,
            "x".into(),
            "y".into(),
            n,
            "interval",
        )
    }

    #[test]
    fn hold_down_gives_one_alert_then_a_summary() {
        let s = 1_000_000_000;
        let mut d = Dedup::new(10 * s);
        assert!(d.offer(a(0, 5)).is_some());
        for i in 1..10 {
            assert!(d.offer(a(i * s, 7)).is_none(), "held at {i}");
        }
        assert!(d.tick(9 * s, false).is_empty());
        let sum = d.tick(10 * s, false);
        assert_eq!(sum.len(), 1);
        assert!(sum[0].summary);
        assert_eq!(sum[0].count, 63);
        assert_eq!(sum[0].first_ns, s);
        // quiet afterwards: nothing more, and the key is forgotten after another hold-down
        assert!(d.tick(15 * s, false).is_empty());
        assert!(d.tick(20 * s, false).is_empty());
        assert_eq!(d.held_keys(), 0);
        assert!(
            d.offer(a(21 * s, 1)).is_some(),
            "a new episode alerts at once"
        );
    }

    #[test]
    fn different_keys_are_independent_and_flush_reports_held() {
        let mut d = Dedup::new(u64::MAX / 2);
        let mut b = a(0, 1);
        b.key.priority = Some(4);
        assert!(d.offer(a(0, 1)).is_some());
        assert!(d.offer(b).is_some());
        assert!(d.offer(a(5, 2)).is_none());
        let f = d.tick(6, true);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].count, 2);
    }

    #[test]
    fn json_view_is_the_json_object_byte_for_byte() {
        // every optional field set, then none: the typed view (the alerts.jsonl line) prints
        // the same keys in the same order as the object (whose keys are sorted)
        let mut full = a(1_795_238_400_123_000_000, 3);
        full.first_ns = 1_795_238_399_000_000_000;
        full.key = AlertKey {
            iface: "ens1f0".into(),
            dir: Some(dir::EGRESS),
            class: Some(class::CNP as u8),
            src: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]),
            dst: Some([0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]),
            qp: Some(0x12345),
            priority: Some(3),
            other: Some("dscp \"quoted\"".into()),
            to_iface: Some("ens1f1".into()),
            to_dir: Some(dir::INGRESS),
        };
        full.point = Some("tor1-mirror".into());
        full.summary = true;
        full.subjects = 2;
        full.keys = vec![
            "10.0.0.1 -> 10.0.0.2 qp 0x000011 (17)".into(),
            "b \"q\"".into(),
        ];
        let bare = a(5, 1);
        for x in [&full, &bare] {
            let line = serde_json::to_string(&x.json_view("h1", "live")).unwrap();
            assert_eq!(line, x.json("h1", "live").to_string());
            let keys: Vec<String> = x
                .json("h1", "live")
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            // `keys` only on an alert over several keys
            let want = if x.keys.is_empty() { 26 } else { 27 };
            assert_eq!(keys.len(), want, "{keys:?}");
        }
        assert!(
            serde_json::to_string(&full.json_view("h", "s"))
                .unwrap()
                .contains(r#""subject":"dscp \"quoted\"","subjects":2,"summary":true"#)
        );
    }

    #[test]
    fn summaries_come_in_a_fixed_order() {
        // many keys held at once: the summaries of one tick are ordered by time, rule and key,
        // whatever the hash map's order
        let mut d = Dedup::new(10);
        for p in (0..40u8).rev() {
            let mut x = a(0, 1);
            x.key.priority = Some(p);
            assert!(d.offer(x.clone()).is_some());
            x.time_ns = 1;
            assert!(d.offer(x).is_none());
        }
        let f = d.tick(100, false);
        let prios: Vec<u8> = f.iter().map(|x| x.key.priority.unwrap()).collect();
        assert_eq!(prios, (0..40).collect::<Vec<u8>>());
    }

    #[test]
    fn event_credit_avoids_double_count() {
        let mut d = Dedup::new(1000);
        let mut e = a(0, 1);
        e.origin = "event";
        assert!(d.offer(e).is_some());
        // the interval that contains the event's packet and 4 more
        assert!(d.offer(a(10, 5)).is_none());
        let s = d.tick(2000, false);
        assert_eq!(s[0].count, 4);
        // an interval with only the evented packet gives nothing
        let mut d = Dedup::new(1000);
        let mut e = a(0, 1);
        e.origin = "event";
        d.offer(e);
        assert!(d.offer(a(10, 1)).is_none());
        assert!(d.tick(5000, true).is_empty());
    }

    #[test]
    fn event_after_its_interval_is_not_counted_twice() {
        let ev = |t, n| {
            let mut e = a(t, n);
            e.rule = Rule::DscpMismatch;
            e.origin = "event";
            e
        };
        let iv = |t, n| {
            let mut e = a(t, n);
            e.rule = Rule::DscpMismatch;
            e
        };
        // The delta holding the first packet and 4 more is read before the packet's event.
        let mut d = Dedup::new(1000);
        let first = d.offer(iv(10, 5)).expect("the interval alerts");
        assert_eq!((first.count, first.origin), (5, "interval"));
        assert!(d.offer(ev(5, 1)).is_none(), "its packet is counted already");
        assert!(d.offer(iv(20, 3)).is_none(), "held");
        assert_eq!(d.tick(2000, true)[0].count, 3, "5 + 3 in all, not 9");
        // Event first, then its delta: counted once as well, and the event alerts.
        let mut d = Dedup::new(1000);
        assert_eq!(d.offer(ev(5, 1)).unwrap().count, 1);
        assert!(d.offer(iv(10, 5)).is_none());
        assert_eq!(d.tick(2000, true)[0].count, 4, "1 + 4");
        // Once an event came, a later delta leaves no debit: the QP's next first occurrence
        // (after it was evicted and came back) alerts at once.
        let mut d = Dedup::new(1000);
        d.offer(ev(5, 1));
        d.offer(iv(10, 1));
        d.offer(iv(20, 2));
        assert!(d.offer(ev(30, 1)).is_none(), "held, but counted");
        assert_eq!(d.tick(2000, true)[0].count, 3);
        // Rules no event raises keep no tally; tallies go with their quiet keys.
        let mut d = Dedup::new(1000);
        d.offer(a(0, 5));
        d.offer(iv(0, 5));
        assert_eq!(d.tallies.len(), 1);
        d.tick(5000, false);
        d.tick(10_000, false);
        assert_eq!((d.held_keys(), d.tallies.len()), (0, 0));
    }
}
