//! The path view of a lab run: the comparison of `roce-analyze path`
//! ([`observer::pipeline::marking`]: path order, value changes, the policy's expected values) over
//! the observers' own output, each `summary.json`'s per-QP totals per interface and direction.
//! Both observers run before the first packet and stop after the last, so the totals are the
//! range every point covers. Every QP key is followed from point to point (h1's egress to h2's
//! ingress for data, h2's egress to h1's ingress for ACKs and CNPs), with each change of DSCP,
//! PCP or ECN and whether the policy allows it.

use serde_json::Value;

use contract::marking::{Change, FIELDS, Marking, changes_of, dir_rank, show_value};

/// The packet classes in `observer_common::maps::class` order.
const CLASSES: [&str; 3] = ["data", "ack", "cnp"];

/// Consecutive points of a key and the changes between them.
#[derive(Clone, Debug)]
pub struct Hop {
    pub from: String,
    pub to: String,
    pub changes: Vec<Change>,
}

/// One QP key along its points.
#[derive(Clone, Debug)]
pub struct KeyView {
    pub src: String,
    pub dst: String,
    pub qp: u64,
    /// Points in path order, with the key's packets there.
    pub points: Vec<(String, i64)>,
    pub hops: Vec<Hop>,
}

/// Every key of the run seen at two points or more, and how many were seen at one.
#[derive(Clone, Debug, Default)]
pub struct PathView {
    pub keys: Vec<KeyView>,
    pub one_point: usize,
}

/// A key at one point: the point's name, its order among the summaries, its packets, and its
/// histograms by slot (`field * 3 + class`), each (value, packets) sorted by value.
struct At {
    name: String,
    dir: String,
    doc: usize,
    pkts: i64,
    hists: Vec<Vec<(i16, i64)>>,
}

/// The name `roce-analyze path` gives a point: `host/iface/dir[label]`.
fn point_name(doc: &Value, q: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let base = format!("{}/{}/{}", s(&doc["host"]), s(&q["iface"]), s(&q["dir"]));
    match doc["point"].as_str() {
        Some(l) => format!("{base}[{l}]"),
        None => base,
    }
}

fn at(doc: &Value, di: usize, q: &Value) -> At {
    let mut hists = Vec::with_capacity(9);
    for (prefix, _) in FIELDS {
        for c in CLASSES {
            let mut h: Vec<(i16, i64)> = q[prefix][c]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(v, n)| {
                    let v = if v == "none" { -1 } else { v.parse().ok()? };
                    Some((v, n.as_i64()?))
                })
                .collect();
            h.sort_unstable();
            hists.push(h);
        }
    }
    At {
        name: point_name(doc, q),
        dir: q["dir"].as_str().unwrap_or("").to_string(),
        doc: di,
        pkts: q["pkts"].as_i64().unwrap_or(0),
        hists,
    }
}

fn hop(a: &At, b: &At, m: &Marking) -> Hop {
    let mut changes = Vec::new();
    for f in 0..FIELDS.len() {
        for c in 0..CLASSES.len() {
            let (ha, hb) = (&a.hists[f * 3 + c], &b.hists[f * 3 + c]);
            let of = ha.iter().map(|x| x.1).sum();
            changes.extend(changes_of(m, f, c, ha, hb, of));
        }
    }
    Hop {
        from: a.name.clone(),
        to: b.name.clone(),
        changes,
    }
}

/// The path view of the observers' summaries `docs` (in the order their trees are given),
/// judged against the expected marking `m`.
pub fn path_view(docs: &[Value], m: &Marking) -> PathView {
    use std::collections::BTreeMap;
    let mut keys: BTreeMap<(String, String, u64), Vec<At>> = BTreeMap::new();
    for (di, doc) in docs.iter().enumerate() {
        for q in doc["qps"].as_array().into_iter().flatten() {
            if q["pkts"].as_i64().unwrap_or(0) == 0 {
                continue;
            }
            let k = (
                q["src"].as_str().unwrap_or("").to_string(),
                q["dst"].as_str().unwrap_or("").to_string(),
                q["qp"].as_u64().unwrap_or(0),
            );
            keys.entry(k).or_default().push(at(doc, di, q));
        }
    }
    let mut view = PathView::default();
    for ((src, dst, qp), mut pts) in keys {
        if pts.len() < 2 {
            view.one_point += 1;
            continue;
        }
        pts.sort_by(|a, b| {
            dir_rank(&a.dir)
                .cmp(&dir_rank(&b.dir))
                .then(b.pkts.cmp(&a.pkts))
                .then(a.doc.cmp(&b.doc))
                .then(a.name.cmp(&b.name))
        });
        view.keys.push(KeyView {
            src,
            dst,
            qp,
            points: pts.iter().map(|p| (p.name.clone(), p.pkts)).collect(),
            hops: pts.windows(2).map(|w| hop(&w[0], &w[1], m)).collect(),
        });
    }
    view
}

impl PathView {
    /// Every change of the keys from `src` to `dst`.
    fn changes<'a>(&'a self, src: &'a str, dst: &'a str) -> impl Iterator<Item = &'a Change> {
        self.keys
            .iter()
            .filter(move |k| k.src == src && k.dst == dst)
            .flat_map(|k| k.hops.iter().flat_map(|h| &h.changes))
    }

    /// Packets changed, every field and class, of the keys from `src` to `dst`.
    pub fn changed(&self, src: &str, dst: &str) -> i64 {
        self.changes(src, dst).map(|c| c.pkts).sum()
    }

    /// Packets of key (`src`, `dst`, `qp`) whose `field` of `class` changed to `to`.
    pub fn changed_to(&self, key: (&str, &str, u64), class: &str, field: &str, to: i16) -> i64 {
        self.keys
            .iter()
            .filter(|k| k.src == key.0 && k.dst == key.1 && k.qp == key.2)
            .flat_map(|k| k.hops.iter().flat_map(|h| &h.changes))
            .filter(|c| c.class == class && c.field == field && c.to == to)
            .map(|c| c.pkts)
            .sum()
    }

    /// The view for people, as `roce-analyze path` prints a key's changes.
    pub fn render(&self) -> Vec<String> {
        let mut out = Vec::new();
        let (mut n, mut bad) = (0, 0);
        for k in &self.keys {
            let pts: Vec<String> = k
                .points
                .iter()
                .map(|(p, pkts)| format!("{p} ({pkts})"))
                .collect();
            let changes: Vec<(&Hop, &Change)> = k
                .hops
                .iter()
                .flat_map(|h| h.changes.iter().map(move |c| (h, c)))
                .collect();
            let head = format!(
                "{} > {} qp {:#08x}: {}",
                k.src,
                k.dst,
                k.qp,
                pts.join(" → ")
            );
            if changes.is_empty() {
                out.push(format!("{head}: no change"));
                continue;
            }
            out.push(head);
            for (h, c) in changes {
                n += 1;
                bad += usize::from(c.violates);
                let from: Vec<String> = c.from.iter().map(|v| show_value(*v)).collect();
                out.push(format!(
                    "  {} {} {} {} → {} between {} and {}: {} of {} packets (expected {})",
                    if c.violates { "FAIL" } else { "ok  " },
                    c.class,
                    c.field,
                    from.join(","),
                    show_value(c.to),
                    h.from,
                    h.to,
                    c.pkts,
                    c.of,
                    c.expected
                ));
            }
        }
        out.push(format!(
            "{} keys compared, {} at one point; {n} changes, {bad} against the policy",
            self.keys.len(),
            self.one_point
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A key re-marked between h1's egress and h2's ingress, and an ACK key unchanged on the way
    /// back: the changes with their counts, in path order, against the policy.
    #[test]
    fn changes_along_the_path_of_two_summaries() {
        let q = |iface: &str, dir: &str, src: &str, dst: &str, pkts: i64, dscp, pcp, ecn| {
            json!({"iface": iface, "dir": dir, "src": src, "dst": dst, "qp": 0x201, "pkts": pkts,
                "dscp": {"data": dscp, "ack": {}, "cnp": {}},
                "pcp": {"data": pcp, "ack": {}, "cnp": {}},
                "ecn": {"data": ecn, "ack": {}, "cnp": {}}})
        };
        let (a, b) = ("10.77.0.1", "10.77.0.2");
        let h2 = json!({"host": "lab-h2", "point": null, "qps": [
            q("h2-eth0", "ingress", a, b, 98, json!({"26": 70, "24": 28}),
              json!({"3": 90, "none": 8}), json!({"2": 98})),
        ]});
        let h1 = json!({"host": "lab-h1", "qps": [
            q("h1-eth0", "egress", a, b, 100, json!({"26": 100}), json!({"3": 100}),
              json!({"2": 100})),
            q("h1-eth0", "egress", b, a, 0, json!({}), json!({}), json!({})),
        ]});
        let m = Marking::of(
            &observer::pipeline::PolicyConfig::profile("nvidia")
                .unwrap()
                .expected,
        );
        let v = path_view(&[h2, h1], &m);
        assert_eq!((v.keys.len(), v.one_point), (1, 0));
        let k = &v.keys[0];
        assert_eq!(
            k.points,
            [
                ("lab-h1/h1-eth0/egress".to_string(), 100),
                ("lab-h2/h2-eth0/ingress".to_string(), 98)
            ]
        );
        let c: Vec<(&str, i16, i64, bool)> = k.hops[0]
            .changes
            .iter()
            .map(|c| (c.field, c.to, c.pkts, c.violates))
            .collect();
        assert_eq!(c, [("DSCP", 24, 28, true), ("PCP", -1, 8, false)]);
        assert_eq!(v.changed(a, b), 36);
        assert_eq!(v.changed_to((a, b, 0x201), "data", "PCP", -1), 8);
        assert_eq!(v.changed(b, a), 0);
        let text = v.render().join("\n");
        assert!(
            text.contains("FAIL data DSCP 26 → 24 between lab-h1/h1-eth0/egress and lab-h2/h2-eth0/ingress: 28 of 100 packets (expected 26)"),
            "{text}"
        );
        assert!(text.contains("1 keys compared, 0 at one point; 2 changes, 1 against the policy"));
    }
}
