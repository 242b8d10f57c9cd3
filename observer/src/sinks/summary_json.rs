//! Totals of a run in a stable JSON form (`summary.json` in the output directory, and the end of
//! run summary): per interface and direction, and per QP key, with every metrics.md count. The
//! lab and the tshark comparison read this; field names are part of the documented interface.

use std::net::IpAddr;

use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};
use observer_common::parse::{encap, reason};
use observer_common::qp::bucket_opcode;
use serde_json::{Map, Value, json};

use crate::schema::{IFACE_HEALTH, IFACE_TRAFFIC, QP_COUNTS};
use crate::sources::Snapshot;

/// A key's address as printed everywhere: IPv4-mapped addresses as dotted quads.
pub fn ip_of(a: &[u8; 16]) -> IpAddr {
    IpAddr::from(*a).to_canonical()
}

fn hist<const N: usize>(h: &[u32; N], name: impl Fn(usize) -> String) -> Value {
    let mut m = Map::new();
    for (i, &n) in h.iter().enumerate() {
        if n != 0 {
            m.insert(name(i), json!(n));
        }
    }
    Value::Object(m)
}

fn per_class<const N: usize>(
    h: &[[u32; N]; class::COUNT],
    name: impl Fn(usize) -> String + Copy,
) -> Value {
    let mut m = Map::new();
    for (c, row) in h.iter().enumerate() {
        m.insert(class::NAMES[c].to_string(), hist(row, name));
    }
    Value::Object(m)
}

fn pcp_name(i: usize) -> String {
    if i >= 8 { "none".into() } else { i.to_string() }
}

/// One QP's totals.
pub fn qp_json(iface: &str, k: &QpKey, v: &QpValue) -> Value {
    let mut ops = Map::new();
    for (b, &n) in v.opcode_hist.iter().enumerate() {
        if n != 0 {
            let name = match bucket_opcode(b) {
                Some(op) => format!("0x{op:02x}"),
                None => "other".into(),
            };
            ops.insert(name, json!(n));
        }
    }
    let mut v_json = json!({
        "iface": iface,
        "dir": dir::NAMES[(k.dir as usize).min(dir::COUNT - 1)],
        "src": ip_of(&k.src_ip).to_string(),
        "dst": ip_of(&k.dst_ip).to_string(),
        "qp": k.dest_qp,
        "qp_hex": format!("0x{:06x}", k.dest_qp),
        "first_ns": v.first_ns,
        "last_ns": v.last_ns,
        "max_udp_payload": v.max_udp_payload,
        "last_udp_sport": v.last_udp_sport,
        "opcodes": Value::Object(ops),
        "dscp": per_class(&v.dscp_hist, |i| i.to_string()),
        "ecn": per_class(&v.ecn_hist, |i| i.to_string()),
        "pcp": per_class(&v.pcp_hist, pcp_name),
    });
    // The per-QP counts: the same names and definitions as the flows table's columns.
    if let Value::Object(m) = &mut v_json {
        for q in &QP_COUNTS {
            m.insert(q.name.to_string(), json!((q.get)(v)));
        }
    }
    v_json
}

/// One interface direction's totals.
pub fn iface_json(iface: &str, d: usize, s: &IfaceStats) -> Value {
    let mut excl = Map::new();
    for (i, n) in s.excluded.iter().enumerate() {
        excl.insert(reason::NAMES[i].to_string(), json!(n));
    }
    let mut enc = Map::new();
    for (i, n) in s.encap.iter().enumerate().skip(1) {
        enc.insert(encap::NAMES[i].to_string(), json!(n));
    }
    let mut v = json!({
        "iface": iface,
        "dir": dir::NAMES[d],
        "excluded": Value::Object(excl),
        "encap": Value::Object(enc),
        "pfc": {
            "frames": s.pfc.pfc_frames,
            "enabled": s.pfc.enabled,
            "xoff": s.pfc.xoff,
            "xon": s.pfc.xon,
            "quanta": s.pfc.quanta,
        },
        "pause": {
            "frames": s.pfc.pause,
            "xon": s.pfc.pause_xon,
            "quanta": s.pfc.pause_quanta,
        },
    });
    // The scalar counts: the same names and definitions as the interfaces table's columns.
    if let Value::Object(m) = &mut v {
        for c in IFACE_TRAFFIC.iter().chain(&IFACE_HEALTH) {
            m.insert(c.name.to_string(), json!((c.get)(s)));
        }
    }
    v
}

/// `{"interfaces": [...], "qps": [...]}` for a set of snapshots (one per interface). QPs are
/// sorted by (iface, dir, src, dst, qp) so two summaries of the same traffic compare equal.
pub fn summary_json(snaps: &[Snapshot]) -> Value {
    let mut ifaces = Vec::new();
    let mut qps = Vec::new();
    for s in snaps {
        for d in 0..dir::COUNT {
            if s.iface_stats[d].frames != 0 || d == dir::INGRESS as usize {
                ifaces.push(iface_json(&s.iface, d, &s.iface_stats[d]));
            }
        }
        let mut keys: Vec<&(QpKey, QpValue)> = s.qps.iter().collect();
        keys.sort_by_key(|e| e.0);
        for (k, v) in keys {
            qps.push(qp_json(&s.iface, k, v));
        }
    }
    json!({ "interfaces": ifaces, "qps": qps })
}
