//! Did the marking survive from one observation point to the next? The definitions of
//! docs/analysis.md#path, in one place: what one marking field of one packet class must be
//! ([`Want`], [`Marking`]), the path order of points ([`dir_rank`]), and the packets that
//! changed value between two points ([`value_changes`]). `roce-analyze path` compares output
//! trees with them.

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

#[cfg(test)]
mod tests {
    use super::*;

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
