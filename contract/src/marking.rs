//! Did the marking survive from one observation point to the next? The definitions of
//! docs/analysis.md#path, in one place: what one marking field of one packet class must be
//! ([`Want`], [`Marking`]), the path order of points ([`dir_rank`]), and the packets that
//! changed value between two points ([`value_changes`]). `roce-analyze path` compares output
//! trees with them; the collector's marking stage compares the interfaces of one process every
//! interval and raises `marking_changed` (docs/alerts.md#marking_changed).

use observer_common::maps::Policy;
use serde::Serialize;

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
    /// PCP: this value on tagged frames; untagged frames (-1) pass.
    IfTagged(i16),
    /// ECN: ECN-capable transport or CE; Not-ECT (0) is a violation.
    Ect,
}

impl Want {
    /// Whether a packet with value `v` is as expected.
    pub fn allows(self, v: i16) -> bool {
        match self {
            Want::Any => true,
            Want::Value(x) => v == x,
            Want::IfTagged(x) => v == x || v == -1,
            Want::Ect => v != 0,
        }
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Any => f.write_str("any"),
            Want::Value(v) => f.write_str(&show_value(*v)),
            Want::IfTagged(v) => write!(f, "{v} when tagged"),
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
        use observer_common::maps::{ANY, PCP_IF_TAGGED};
        use observer_common::parse::PCP_NONE;
        Marking {
            dscp: p.dscp.map(|d| match d {
                ANY => Want::Any,
                d => Want::Value(d.into()),
            }),
            pcp: p.pcp.map(|v| match v {
                ANY => Want::Any,
                PCP_NONE => Want::Value(-1),
                v if v & PCP_IF_TAGGED != 0 => Want::IfTagged((v & 7).into()),
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
