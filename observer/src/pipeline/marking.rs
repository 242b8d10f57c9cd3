//! Did the marking survive from one observation point to the next? The definitions of
//! docs/analysis.md#path, in one place: what one marking field of one packet class must be
//! ([`Want`], [`Marking`]), the path order of points ([`dir_rank`]), and the packets that
//! changed value between two points ([`value_changes`]). `roce-analyze path` compares output
//! trees with them; [`MarkingStage`] compares the interfaces of one process every interval
//! and raises `marking_changed` (docs/alerts.md#marking_changed).

use std::collections::HashMap;

use observer_common::maps::{Policy, QpKey, QpValue, dir};
use serde::Serialize;

use super::alerts::{Alert, AlertKey};
use super::deltas;
use super::rules::Rule;
use crate::sources::datapath::FastHash;

/// The marking fields in histogram order (`dscp_*`, `pcp_*`, `ecn_*` columns): column prefix
/// and display name.
pub const FIELDS: [(&str, &str); 3] = [("dscp", "DSCP"), ("pcp", "PCP"), ("ecn", "ECN")];

/// What one marking field (DSCP, PCP or ECN) of one packet class must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Not checked.
    Any,
    /// This value (PCP -1: untagged).
    Value(i16),
    /// ECN: ECN-capable transport or CE; Not-ECT (0) is a violation.
    Ect,
}

impl Want {
    /// Whether a packet with value `v` is as expected.
    pub fn allows(self, v: i16) -> bool {
        match self {
            Want::Any => true,
            Want::Value(x) => v == x,
            Want::Ect => v != 0,
        }
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Any => f.write_str("any"),
            Want::Value(v) => f.write_str(&show_value(*v)),
            Want::Ect => f.write_str("ECT"),
        }
    }
}

impl Serialize for Want {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The expected DSCP, PCP and ECN of each packet class, indexed by
/// `observer_common::maps::class` (data, ack, cnp).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Marking {
    pub dscp: [Want; 3],
    pub pcp: [Want; 3],
    pub ecn: [Want; 3],
}

impl Marking {
    /// The marking of a policy in the kernel's form (`ANY`, `PCP_NONE`, ECN-capable flags).
    pub fn of(p: &Policy) -> Marking {
        use observer_common::maps::ANY;
        use observer_common::parse::PCP_NONE;
        Marking {
            dscp: p.dscp.map(|d| match d {
                ANY => Want::Any,
                d => Want::Value(d.into()),
            }),
            pcp: p.pcp.map(|v| match v {
                ANY => Want::Any,
                PCP_NONE => Want::Value(-1),
                v => Want::Value(v.into()),
            }),
            ecn: p
                .ecn_capable
                .map(|e| if e != 0 { Want::Ect } else { Want::Any }),
        }
    }

    /// What field `field` (0 DSCP, 1 PCP, 2 ECN: [`FIELDS`] order) of class `class` must be.
    pub fn want(&self, field: usize, class: usize) -> Want {
        [&self.dscp, &self.pcp, &self.ecn][field][class]
    }
}

/// One change of one marking field of one packet class between two consecutive points.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub class: &'static str,
    /// `DSCP`, `PCP` or `ECN`.
    pub field: &'static str,
    /// The values that lost packets at the later point.
    pub from: Vec<i16>,
    /// The value packets changed to.
    pub to: i16,
    /// Packets that changed to `to` ([`value_changes`]).
    pub pkts: i64,
    /// The class's packets at the earlier point.
    pub of: i64,
    pub expected: Want,
    /// `to` is not what the policy expects of this class.
    pub violates: bool,
}

/// The changes of field `f` of class `c` between the earlier point's histogram `a` and the
/// later one's `b` (each sorted by value), `of` the class's packets at the earlier point,
/// judged against `m`: the one comparison `roce-analyze path` and the lab's path view make.
pub fn changes_of(
    m: &Marking,
    f: usize,
    c: usize,
    a: &[(i16, i64)],
    b: &[(i16, i64)],
    of: i64,
) -> Vec<Change> {
    let want = m.want(f, c);
    value_changes(a, b)
        .into_iter()
        .map(|(from, to, pkts)| Change {
            class: observer_common::maps::class::NAMES[c.min(2)],
            field: FIELDS[f.min(2)].1,
            from,
            to,
            pkts,
            of,
            expected: want,
            violates: !want.allows(to),
        })
        .collect()
}

/// A marking value as shown: PCP -1 is `untagged`.
pub fn show_value(v: i16) -> String {
    if v == -1 {
        "untagged".into()
    } else {
        v.to_string()
    }
}

/// Path order of directions: egress points (the sender's tc egress) first, then ingress points,
/// then any other direction.
pub fn dir_rank(dir: &str) -> u8 {
    match dir {
        "egress" => 0,
        "ingress" => 1,
        _ => 2,
    }
}

/// Packets of value `v` in histogram `h` (sorted by value, one entry per value).
fn at(h: &[(i16, i64)], v: i16) -> i64 {
    h.binary_search_by_key(&v, |x| x.0).map_or(0, |i| h[i].1)
}

/// Value changes from histogram `a` (earlier point) to `b` (later), both sorted by value with one
/// entry per value: `(from, to, packets)`. The packets that changed are min(appeared,
/// vanished), appeared = Σ max(0, b[v] - a[v]) and vanished = Σ max(0, a[v] - b[v]): with
/// losses only this is the appeared count (loss only removes packets), with extra packets at the
/// later point the vanished count, attributed to values the earlier point did not have first,
/// then to the largest gains. `from` lists every value that lost packets.
pub fn value_changes(a: &[(i16, i64)], b: &[(i16, i64)]) -> Vec<(Vec<i16>, i16, i64)> {
    if a == b {
        return Vec::new();
    }
    // saturating: a corrupt file's counts may be huge or negative, and must not overflow
    let diff = |x: &[(i16, i64)], y: &[(i16, i64)], v: i16| at(x, v).saturating_sub(at(y, v));
    let from: Vec<i16> = a
        .iter()
        .map(|x| x.0)
        .filter(|&v| diff(a, b, v) > 0)
        .collect();
    let mut budget = from
        .iter()
        .fold(0i64, |s, &v| s.saturating_add(diff(a, b, v)));
    let mut gains: Vec<(i16, i64)> = b
        .iter()
        .map(|&(v, _)| (v, diff(b, a, v)))
        .filter(|&(_, g)| g > 0)
        .collect();
    let in_a = |v: i16| a.binary_search_by_key(&v, |x| x.0).is_ok();
    gains.sort_by_key(|&(v, g)| (in_a(v), std::cmp::Reverse(g), v));
    let mut out = Vec::new();
    for (v, g) in gains {
        let n = g.min(budget);
        if n > 0 {
            out.push((from.clone(), v, n));
            budget -= n;
        }
    }
    out
}

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
        assert_eq!(m.want(1, 0), Want::Any);
        assert_eq!(m.want(2, 0), Want::Ect);
        assert!(Want::Ect.allows(3) && !Want::Ect.allows(0));
        assert_eq!(Want::Value(-1).to_string(), "untagged");
        assert!(dir_rank("egress") < dir_rank("ingress"));
    }
}
