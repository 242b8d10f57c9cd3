//! The collector's marking stage: compares the interfaces of one process every interval with
//! the definitions of [`contract::marking`] and raises `marking_changed`
//! (docs/alerts.md#marking_changed).

use std::collections::HashMap;

use contract::marking::*;
use observer_common::maps::{Policy, QpKey, QpValue, dir};

use super::alerts::{Alert, AlertKey};
use super::deltas;
use super::rules::Rule;
use crate::sources::datapath::FastHash;

/// A key quiet at every point for this long is forgotten: its next packets start a new
/// comparison (as a reused QP number would).
pub const FORGET_NS: u64 = 60_000_000_000;

/// The QP key across points: the direction belongs to the point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PathKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub qp: u32,
}

/// One histogram bucket: slot (`field * 3 + class`, [`FIELDS`] and `class` order), value
/// (PCP -1: untagged), packets.
type Bucket = (u8, i16, i64);

/// The marking histograms of one interface's rows of one interval, as the collector hands
/// them to the stage (allocations reused from interval to interval).
#[derive(Default)]
pub struct Feed {
    /// Each row's key and the end of its buckets in `buckets`.
    rows: Vec<(QpKey, u32)>,
    buckets: Vec<Bucket>,
}

impl Feed {
    /// One row: the key and its interval delta `d`, whose non-zero buckets are `nz`
    /// ([`deltas::nonzero_buckets`]).
    #[inline]
    pub fn push(&mut self, k: &QpKey, d: &QpValue, nz: &[u16]) {
        let h = deltas::hist(d);
        for &b in nz {
            let (col, i) = deltas::bucket_col(b);
            // flat columns: 1-3 DSCP, 4-6 ECN, 7-9 PCP (8 = untagged), per class
            let (slot, value) = match col {
                1..=3 => (col - 1, i as i16),
                4..=6 => (6 + col - 4, i as i16),
                7..=9 => (3 + col - 7, if i >= 8 { -1 } else { i as i16 }),
                _ => continue,
            };
            self.buckets.push((slot as u8, value, h[b as usize] as i64));
        }
        self.rows.push((*k, self.buckets.len() as u32));
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.buckets.clear();
    }
}

/// Packets alerted so far per (earlier point, later point, slot, new value).
type Reported = Vec<((u16, u16, u8, i16), i64)>;

/// One key's sums at its points, and what was alerted of it.
#[derive(Default)]
struct KeyState {
    /// Per point: its buckets summed since the key was first seen, sorted by (slot, value).
    at: Vec<(u16, Vec<Bucket>)>,
    reported: Reported,
    /// The evaluation that last saw it active, and its time.
    seq: u64,
    last_ns: u64,
}

/// Adds bucket `b` to the sorted sums `v`.
fn add_bucket(v: &mut Vec<Bucket>, b: Bucket) {
    match v.binary_search_by_key(&(b.0, b.1), |x| (x.0, x.1)) {
        Ok(i) => v[i].2 = v[i].2.saturating_add(b.2),
        Err(i) => v.insert(i, b),
    }
}

/// The buckets of slot `slot` as (value, packets), sorted by value.
fn slot_of(v: &[Bucket], slot: u8) -> &[Bucket] {
    let s = v.partition_point(|x| x.0 < slot);
    let e = v.partition_point(|x| x.0 <= slot);
    &v[s..e]
}

/// Packets of the key at a point (every packet has a DSCP: the sum of the DSCP slots).
fn pkts(v: &[Bucket]) -> i64 {
    v.iter().filter(|x| x.0 < 3).map(|x| x.2).sum()
}

/// The live comparison of one process's observation points (each interface's ingress and
/// egress): every interval, each interface's per-key deltas ([`Feed`]) are summed per
/// (src, dst, qp) and point; when every interface's snapshot is in
/// ([`MarkingStage::evaluate`]), each key active in the interval and seen at two points or more
/// is compared along its points as `roce-analyze path` compares trees, over its sums since it
/// was first seen, and each change to a value the policy does not expect raises
/// `marking_changed` with the packets that changed since the last alert. Work per interval is
/// proportional to the active keys; a sweep once per [`FORGET_NS`] forgets quiet keys.
pub struct MarkingStage {
    marking: Marking,
    /// Points in the order first seen: (interface, direction).
    points: Vec<(String, u8)>,
    index: HashMap<(String, u8), u16>,
    keys: HashMap<PathKey, KeyState, FastHash>,
    /// Keys active since the last evaluation.
    touched: Vec<PathKey>,
    /// The evaluation under way (starts at 1: a new key's `seq` 0 is never current).
    seq: u64,
    next_sweep_ns: u64,
    spare: Feed,
}

impl MarkingStage {
    pub fn new(policy: &Policy) -> MarkingStage {
        MarkingStage {
            marking: Marking::of(policy),
            points: Vec::new(),
            index: HashMap::new(),
            keys: HashMap::default(),
            touched: Vec::new(),
            seq: 1,
            next_sweep_ns: 0,
            spare: Feed::default(),
        }
    }

    /// An empty feed for the next interface's interval.
    pub fn take_feed(&mut self) -> Feed {
        std::mem::take(&mut self.spare)
    }

    /// Keys tracked (seen in the last [`FORGET_NS`] or so).
    pub fn tracked_keys(&self) -> usize {
        self.keys.len()
    }

    fn point(&mut self, iface: &str, d: u8) -> u16 {
        let id = (iface.to_string(), d);
        if let Some(&p) = self.index.get(&id) {
            return p;
        }
        let p = self.points.len() as u16;
        self.points.push(id.clone());
        self.index.insert(id, p);
        p
    }

    /// The rows of one interface's interval, summed into their keys' points.
    pub fn add(&mut self, iface: &str, mut feed: Feed) {
        let mut pts: [Option<u16>; dir::COUNT] = [None; dir::COUNT];
        let mut start = 0usize;
        for &(k, end) in &feed.rows {
            let d = (k.dir as usize).min(dir::COUNT - 1);
            let p = match pts[d] {
                Some(p) => p,
                None => *pts[d].insert(self.point(iface, d as u8)),
            };
            let pk = PathKey {
                src: k.src_ip,
                dst: k.dst_ip,
                qp: k.dest_qp,
            };
            let e = self.keys.entry(pk).or_default();
            if e.seq != self.seq {
                e.seq = self.seq;
                self.touched.push(pk);
            }
            let i = match e.at.iter().position(|x| x.0 == p) {
                Some(i) => i,
                None => {
                    e.at.push((p, Vec::new()));
                    e.at.len() - 1
                }
            };
            for &b in &feed.buckets[start..end as usize] {
                add_bucket(&mut e.at[i].1, b);
            }
            start = end as usize;
        }
        feed.clear();
        self.spare = feed;
    }

    /// Every interface's snapshot of the interval ending at `t_ns` is in: the keys active in
    /// it compared along their points; returns the `marking_changed` candidates.
    pub fn evaluate(&mut self, t_ns: u64) -> Vec<Alert> {
        let mut out = Vec::new();
        let mut touched = std::mem::take(&mut self.touched);
        for pk in &touched {
            let Some(e) = self.keys.get_mut(pk) else {
                continue;
            };
            e.last_ns = t_ns;
            // the same marking at both points (the common case): nothing changed
            let same = e.at.len() == 2 && e.at[0].1 == e.at[1].1;
            if e.at.len() >= 2 && !same {
                compare(&self.marking, &self.points, pk, e, t_ns, &mut out);
            }
        }
        touched.clear();
        self.touched = touched;
        self.seq += 1;
        if t_ns >= self.next_sweep_ns {
            self.keys
                .retain(|_, e| e.last_ns.saturating_add(FORGET_NS) > t_ns);
            self.next_sweep_ns = t_ns.saturating_add(FORGET_NS);
        }
        out
    }
}

/// The key's points in path order: egress first, then ingress, more packets first, then the
/// point seen first, then the name.
fn path_order(e: &KeyState, points: &[(String, u8)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..e.at.len()).collect();
    idx.sort_by(|&a, &b| {
        let (pa, pb) = (e.at[a].0, e.at[b].0);
        let name = |p: u16| dir::NAMES[(points[p as usize].1 as usize).min(dir::COUNT - 1)];
        dir_rank(name(pa))
            .cmp(&dir_rank(name(pb)))
            .then(pkts(&e.at[b].1).cmp(&pkts(&e.at[a].1)))
            .then(pa.cmp(&pb))
    });
    idx
}

/// One key along its points: for each pair of consecutive points and each slot, the changes
/// to values the policy does not expect, as one candidate per (pair, slot) counting the packets
/// changed since the last one.
fn compare(
    m: &Marking,
    points: &[(String, u8)],
    pk: &PathKey,
    e: &mut KeyState,
    t_ns: u64,
    out: &mut Vec<Alert>,
) {
    let order = path_order(e, points);
    for w in order.windows(2) {
        let ((pa, a), (pb, b)) = (&e.at[w[0]], &e.at[w[1]]);
        for slot in 0..9u8 {
            let (sa, sb) = (slot_of(a, slot), slot_of(b, slot));
            if sa == sb {
                continue;
            }
            let want = m.want(slot as usize / 3, slot as usize % 3);
            let (count, observed) = new_changes(sa, sb, want, (*pa, *pb, slot), &mut e.reported);
            if count == 0 {
                continue;
            }
            let (field, c) = (FIELDS[slot as usize / 3].0, slot % 3);
            let (from, to) = (&points[*pa as usize], &points[*pb as usize]);
            let key = AlertKey {
                iface: from.0.clone(),
                dir: Some(from.1),
                to_iface: Some(to.0.clone()),
                to_dir: Some(to.1),
                src: Some(pk.src),
                dst: Some(pk.dst),
                qp: Some(pk.qp),
                class: Some(c),
                other: Some(field.into()),
                ..Default::default()
            };
            let expected = match want {
                Want::Ect => "ECT(0), ECT(1) or CE".into(),
                w => format!("{field} {w}"),
            };
            let rule = Rule::MarkingChanged;
            out.push(Alert::candidate(
                rule, key, t_ns, observed, expected, count, "interval",
            ));
        }
    }
}

/// The changes of one slot from the earlier point's buckets `sa` to the later's `sb` that go
/// against `want`, beyond what was alerted already for (earlier point, later point, slot):
/// their packets and `dscp 26 → 0 x30, ...`; `reported` is brought up to date.
fn new_changes(
    sa: &[Bucket],
    sb: &[Bucket],
    want: Want,
    hop: (u16, u16, u8),
    reported: &mut Reported,
) -> (u64, String) {
    let vals = |s: &[Bucket]| s.iter().map(|x| (x.1, x.2)).collect::<Vec<_>>();
    let f = FIELDS[hop.2 as usize / 3].0;
    let mut count = 0u64;
    let mut parts = Vec::new();
    for (from, to, n) in value_changes(&vals(sa), &vals(sb)) {
        if want.allows(to) {
            continue;
        }
        let id = (hop.0, hop.1, hop.2, to);
        let prev = match reported.iter().position(|r| r.0 == id) {
            Some(i) => &mut reported[i].1,
            None => {
                reported.push((id, 0));
                &mut reported.last_mut().expect("pushed").1
            }
        };
        if n > *prev {
            let inc = n - *prev;
            *prev = n;
            count += inc as u64;
            let from: Vec<String> = from.iter().map(|v| show_value(*v)).collect();
            parts.push(format!(
                "{f} {} → {} x{inc}",
                from.join(","),
                show_value(to)
            ));
        }
    }
    (count, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::maps::class;

    #[test]
    fn a_change_counts_the_packets_that_moved() {
        // the same packets, 30 re-marked
        let a = [(26, 100)];
        assert_eq!(value_changes(&a, &[(0, 30), (26, 70)]), [(vec![26], 0, 30)]);
        // and 10 lost as well: loss only removes packets, so 30 changed, not 40
        assert_eq!(value_changes(&a, &[(0, 30), (26, 60)]), [(vec![26], 0, 30)]);
        // only losses: no change
        assert!(value_changes(&a, &[(26, 90)]).is_empty());
        // nothing at all at the later point: all lost, no change
        assert!(value_changes(&a, &[]).is_empty());
    }

    #[test]
    fn extra_packets_at_the_later_point_are_not_changes() {
        // 3 more packets at the same value (interval edges, duplicates): no change
        let a = [(26, 100)];
        assert!(value_changes(&a, &[(26, 103)]).is_empty());
        // 5 at a new value but only 2 left the old one: 2 changed, to the new value
        assert_eq!(value_changes(&a, &[(0, 5), (26, 98)]), [(vec![26], 0, 2)]);
        // a class absent at the earlier point: nothing moved
        assert!(value_changes(&[], &[(48, 4)]).is_empty());
    }

    #[test]
    fn changes_from_several_values_to_several() {
        let a = [(3, 50), (4, 50)];
        let b = [(-1, 10), (3, 40), (4, 45), (5, 5)];
        assert_eq!(
            value_changes(&a, &b),
            [(vec![3, 4], -1, 10), (vec![3, 4], 5, 5)],
            "new values first, largest first"
        );
    }

    const EG: u8 = dir::EGRESS;
    const IN: u8 = dir::INGRESS;

    fn ip(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[10, 0, 0, last]);
        a
    }

    fn key(qp: u32, d: u8) -> QpKey {
        QpKey {
            src_ip: ip(1),
            dst_ip: ip(2),
            dest_qp: qp,
            dir: d,
            ..Default::default()
        }
    }

    /// A delta of data packets: (dscp, ecn, pcp bucket, packets) each.
    fn data(pkts: &[(usize, usize, usize, u32)]) -> QpValue {
        let mut v = QpValue::ZERO;
        for &(dscp, ecn, pcp, n) in pkts {
            v.pkts += n as u64;
            v.dscp_hist[class::DATA][dscp] += n;
            v.ecn_hist[class::DATA][ecn] += n;
            v.pcp_hist[class::DATA][pcp] += n;
        }
        v
    }

    fn feed(st: &mut MarkingStage, iface: &str, rows: &[(QpKey, QpValue)]) {
        let mut f = st.take_feed();
        for (k, v) in rows {
            let mut nz = Vec::new();
            deltas::nonzero_buckets(v, &mut nz);
            f.push(k, v, &nz);
        }
        st.add(iface, f);
    }

    fn stage() -> MarkingStage {
        MarkingStage::new(
            &crate::pipeline::PolicyConfig::profile("nvidia")
                .unwrap()
                .expected,
        )
    }

    fn counts(a: &[Alert]) -> Vec<(String, u64)> {
        a.iter().map(|a| (a.observed.clone(), a.count)).collect()
    }

    /// Re-marked between a sender's egress and a receiver's ingress: the packets that moved,
    /// once each, with the two points, the class and the field in the key.
    #[test]
    fn a_change_between_two_interfaces_alerts_with_its_count() {
        let mut st = stage();
        feed(&mut st, "e0", &[(key(7, EG), data(&[(26, 2, 3, 100)]))]);
        feed(
            &mut st,
            "e1",
            &[(key(7, IN), data(&[(26, 2, 3, 70), (0, 2, 3, 30)]))],
        );
        let a = st.evaluate(1_000);
        assert_eq!(counts(&a), [("dscp 26 → 0 x30".to_string(), 30)]);
        let k = &a[0].key;
        assert_eq!((k.iface.as_str(), k.dir), ("e0", Some(EG)));
        assert_eq!((k.to_iface.as_deref(), k.to_dir), (Some("e1"), Some(IN)));
        assert_eq!(
            (k.qp, k.class, k.other.as_deref()),
            (Some(7), Some(0), Some("dscp"))
        );
        assert_eq!(
            (a[0].rule, a[0].expected.as_str()),
            (Rule::MarkingChanged, "dscp 26")
        );
        assert!(
            a[0].message().contains("e0 egress → e1 ingress"),
            "{}",
            a[0].message()
        );
        // the next interval: only the packets changed since
        feed(&mut st, "e0", &[(key(7, EG), data(&[(26, 2, 3, 100)]))]);
        feed(
            &mut st,
            "e1",
            &[(key(7, IN), data(&[(26, 2, 3, 90), (0, 2, 3, 5)]))],
        );
        assert_eq!(
            counts(&st.evaluate(2_000)),
            [("dscp 26 → 0 x5".to_string(), 5)]
        );
        // a quiet interval: nothing
        assert!(st.evaluate(3_000).is_empty());
    }

    /// Packets in flight at the interval's end (seen at the sender, not yet at the receiver)
    /// are counted when they arrive: the total is exact, nothing twice.
    #[test]
    fn packets_across_the_interval_edge_count_once() {
        let mut st = stage();
        feed(&mut st, "e0", &[(key(7, EG), data(&[(26, 2, 3, 100)]))]);
        feed(&mut st, "e1", &[(key(7, IN), data(&[(0, 2, 3, 95)]))]);
        let first = st.evaluate(1_000);
        feed(&mut st, "e1", &[(key(7, IN), data(&[(0, 2, 3, 5)]))]);
        let second = st.evaluate(2_000);
        assert_eq!(
            (counts(&first), counts(&second)),
            (
                vec![("dscp 26 → 0 x95".to_string(), 95)],
                vec![("dscp 26 → 0 x5".to_string(), 5)]
            )
        );
        // the receiver read first, a little ahead of the sender: the same
        let mut st = stage();
        feed(&mut st, "e1", &[(key(7, IN), data(&[(0, 2, 3, 105)]))]);
        feed(&mut st, "e0", &[(key(7, EG), data(&[(26, 2, 3, 100)]))]);
        let first = st.evaluate(1_000);
        feed(&mut st, "e1", &[(key(7, IN), data(&[(0, 2, 3, 95)]))]);
        feed(&mut st, "e0", &[(key(7, EG), data(&[(26, 2, 3, 100)]))]);
        let total: u64 = first
            .iter()
            .chain(&st.evaluate(2_000))
            .map(|a| a.count)
            .sum();
        assert_eq!(total, 200);
    }

    /// Only changes against the policy alert: PCP (any), ECN to CE, a change toward the
    /// expected value; Not-ECT does; a key at one point never does.
    #[test]
    fn only_changes_against_the_policy_alert() {
        let mut st = stage();
        let untagged = 8;
        feed(
            &mut st,
            "e0",
            &[
                (key(1, EG), data(&[(26, 2, 3, 50)])),
                (key(2, EG), data(&[(0, 2, 3, 50)])),
                (key(3, EG), data(&[(0, 2, 3, 50)])),
            ],
        );
        feed(
            &mut st,
            "e1",
            &[
                // PCP 3 -> untagged on 10, CE on 5, ECN 2 -> 0 on 4
                (
                    key(1, IN),
                    data(&[
                        (26, 2, 3, 31),
                        (26, 2, untagged, 10),
                        (26, 3, 3, 5),
                        (26, 0, 3, 4),
                    ]),
                ),
                // DSCP 0 -> 26: toward the expected value
                (key(2, IN), data(&[(26, 2, 3, 50)])),
                // a key seen here only
                (key(4, IN), data(&[(0, 0, 0, 50)])),
            ],
        );
        let a = st.evaluate(1_000);
        assert_eq!(counts(&a), [("ecn 2 → 0 x4".to_string(), 4)]);
        assert_eq!(a[0].expected, "ECT(0), ECT(1) or CE");
        assert_eq!(a[0].key.other.as_deref(), Some("ecn"));
    }

    /// Points in path order: egress first, then, in one direction, more packets first.
    #[test]
    fn points_follow_the_path_order() {
        let mut st = stage();
        // two mirror ports (ingress): m2 saw fewer (2 lost) and re-marked
        feed(
            &mut st,
            "m2",
            &[(key(1, IN), data(&[(26, 2, 3, 88), (10, 2, 3, 10)]))],
        );
        feed(&mut st, "m1", &[(key(1, IN), data(&[(26, 2, 3, 100)]))]);
        let a = st.evaluate(1_000);
        assert_eq!(counts(&a), [("dscp 26 → 10 x10".to_string(), 10)]);
        assert_eq!(
            (a[0].key.iface.as_str(), a[0].key.to_iface.as_deref()),
            ("m1", Some("m2"))
        );
        // three points: egress, then the two ingress points
        let mut st = stage();
        feed(
            &mut st,
            "m2",
            &[(key(1, IN), data(&[(26, 2, 3, 97), (10, 2, 3, 1)]))],
        );
        feed(&mut st, "m1", &[(key(1, IN), data(&[(26, 2, 3, 99)]))]);
        feed(&mut st, "h1", &[(key(1, EG), data(&[(26, 2, 3, 100)]))]);
        let a = st.evaluate(1_000);
        assert_eq!(counts(&a), [("dscp 26 → 10 x1".to_string(), 1)]);
        assert_eq!(
            (a[0].key.iface.as_str(), a[0].key.to_iface.as_deref()),
            ("m1", Some("m2"))
        );
    }

    /// A key quiet everywhere for FORGET_NS is forgotten; active keys stay.
    #[test]
    fn quiet_keys_are_forgotten() {
        let mut st = stage();
        feed(&mut st, "e0", &[(key(1, EG), data(&[(26, 2, 3, 1)]))]);
        feed(&mut st, "e1", &[(key(2, IN), data(&[(26, 2, 3, 1)]))]);
        st.evaluate(1);
        assert_eq!(st.tracked_keys(), 2);
        for t in 1..=70u64 {
            feed(&mut st, "e0", &[(key(1, EG), data(&[(26, 2, 3, 1)]))]);
            st.evaluate(t * 1_000_000_000);
        }
        assert_eq!(st.tracked_keys(), 1);
    }

    #[test]
    fn wants_and_the_policy_marking() {
        let m = Marking::of(
            &crate::pipeline::PolicyConfig::profile("nvidia")
                .unwrap()
                .expected,
        );
        assert_eq!(m.want(0, 0), Want::Value(26));
        assert_eq!(m.want(0, 2), Want::Value(48));
        assert_eq!(m.want(1, 0), Want::IfTagged(3));
        assert_eq!(m.want(1, 2), Want::IfTagged(6));
        let t = Want::IfTagged(3);
        assert!(t.allows(3) && t.allows(-1) && !t.allows(0));
        assert_eq!(t.to_string(), "3 when tagged");
        assert_eq!(m.want(2, 0), Want::Ect);
        assert!(Want::Ect.allows(3) && !Want::Ect.allows(0));
        assert_eq!(Want::Value(-1).to_string(), "untagged");
        assert!(dir_rank("egress") < dir_rank("ingress"));
    }
}
