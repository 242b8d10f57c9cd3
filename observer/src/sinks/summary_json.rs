//! Totals of a run in a stable JSON form (`summary.json` in the output directory, and the end of
//! run summary): per interface and direction, and per QP key, with every metrics.md count. The
//! lab and the tshark comparison read this; field names are part of the documented interface:
//! every field is documented here ([`fields`]), docs/summary-json.md is generated from that
//! (`cargo xtask summary-doc`), and [`check`] tells a document's undocumented fields.

use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};
use observer_common::parse::{encap, reason};
use observer_common::qp::bucket_opcode;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value, json};

use crate::sources::Snapshot;
use contract::schema::{IFACE_HEALTH, IFACE_TRAFFIC, QP_COUNTS};

pub use contract::addr::ip_of;

#[cfg(test)]
fn hist<const N: usize>(h: &[u32; N], name: impl Fn(usize) -> String) -> Value {
    let mut m = Map::new();
    for (i, &n) in h.iter().enumerate() {
        if n != 0 {
            m.insert(name(i), json!(n));
        }
    }
    Value::Object(m)
}

#[cfg(test)]
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

/// One QP's totals as a `Value` (the top QPs of the text summary): [`QpJson`], the one
/// serializer of a QP object.
pub fn qp_json(iface: &str, k: &QpKey, v: &QpValue) -> Value {
    serde_json::to_value(QpJson {
        iface,
        key: k,
        value: v,
    })
    .unwrap_or_default()
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
    let mut m = interfaces_json(snaps);
    let qps = QpList::new(snaps);
    m.insert(
        "qps".into(),
        Value::Array(
            qps.items
                .iter()
                .map(|&(f, k, v)| qp_json(f, k, v))
                .collect(),
        ),
    );
    Value::Object(m)
}

/// One QP's totals serialized straight from its key and value (keys in sorted order, as a
/// `Value` map has them), without building a `Value` tree: the one definition of a QP object of
/// `summary.json`.
pub struct QpJson<'a> {
    pub iface: &'a str,
    pub key: &'a QpKey,
    pub value: &'a QpValue,
}

/// A field of a QP object.
#[derive(Clone, Copy)]
enum QpField {
    Iface,
    Dir,
    Src,
    Dst,
    Qp,
    QpHex,
    FirstNs,
    LastNs,
    MaxUdpPayload,
    LastUdpSport,
    Opcodes,
    Dscp,
    Ecn,
    Pcp,
    Count(usize),
}

/// A fixed field of a QP object: its name, what the serializer writes for it, and its
/// documentation (docs/summary-json.md), with the keys inside it when it is an object.
struct QpFieldDef {
    name: &'static str,
    field: QpField,
    ty: Ty,
    doc: &'static str,
    keys: &'static [(&'static str, Ty, &'static str)],
}

/// Keys of a per-class histogram (`dscp`, `ecn`, `pcp`): every class, and in each the nonzero
/// buckets.
const fn per_class_keys(bucket: &'static str) -> [(&'static str, Ty, &'static str); 2] {
    [
        (
            "{class}",
            Ty::Obj,
            "one object per traffic class (`data`, `ack`, `cnp`), also when empty",
        ),
        ("{class}.{value}", Ty::Int, bucket),
    ]
}

/// The fixed fields of a QP object, before the per-QP counts of [`QP_COUNTS`]: the one list
/// that [`QpJson`] writes and docs/summary-json.md documents.
const QP_FIELDS: [QpFieldDef; 14] = [
    QpFieldDef {
        name: "iface",
        field: QpField::Iface,
        ty: Ty::Str,
        doc: "the interface (for replay: the capture's interface name)",
        keys: &[],
    },
    QpFieldDef {
        name: "dir",
        field: QpField::Dir,
        ty: Ty::Str,
        doc: "`ingress` or `egress`",
        keys: &[],
    },
    QpFieldDef {
        name: "src",
        field: QpField::Src,
        ty: Ty::Str,
        doc: "source IP address: dotted IPv4 (also for an IPv4-mapped key), IPv6 otherwise",
        keys: &[],
    },
    QpFieldDef {
        name: "dst",
        field: QpField::Dst,
        ty: Ty::Str,
        doc: "destination IP address",
        keys: &[],
    },
    QpFieldDef {
        name: "qp",
        field: QpField::Qp,
        ty: Ty::Int,
        doc: "destination QP number (BTH)",
        keys: &[],
    },
    QpFieldDef {
        name: "qp_hex",
        field: QpField::QpHex,
        ty: Ty::Str,
        doc: "the same as `0x` and six hex digits (`grep 0x000011 summary.json`)",
        keys: &[],
    },
    QpFieldDef {
        name: "first_ns",
        field: QpField::FirstNs,
        ty: Ty::Int,
        doc: "time of the key's first packet, ns since the Unix epoch (capture time for replay)",
        keys: &[],
    },
    QpFieldDef {
        name: "last_ns",
        field: QpField::LastNs,
        ty: Ty::Int,
        doc: "time of the key's last packet, likewise",
        keys: &[],
    },
    QpFieldDef {
        name: "max_udp_payload",
        field: QpField::MaxUdpPayload,
        ty: Ty::Int,
        doc: "largest UDP payload of the key's packets (bytes)",
        keys: &[],
    },
    QpFieldDef {
        name: "last_udp_sport",
        field: QpField::LastUdpSport,
        ty: Ty::Int,
        doc: "UDP source port of the key's last packet",
        keys: &[],
    },
    QpFieldDef {
        name: "opcodes",
        field: QpField::Opcodes,
        ty: Ty::Obj,
        doc: "packets per BTH opcode, nonzero only",
        keys: &[(
            "{opcode}",
            Ty::Int,
            "packets with that opcode (`0x` and two hex digits), or `other`: the opcodes without a bucket of their own",
        )],
    },
    QpFieldDef {
        name: "dscp",
        field: QpField::Dscp,
        ty: Ty::Obj,
        doc: "DSCP histogram per class",
        keys: &per_class_keys("packets of the class with that DSCP (0-63), nonzero only"),
    },
    QpFieldDef {
        name: "ecn",
        field: QpField::Ecn,
        ty: Ty::Obj,
        doc: "ECN histogram per class",
        keys: &per_class_keys(
            "packets of the class with that ECN codepoint (0-3; 3 is CE), nonzero only",
        ),
    },
    QpFieldDef {
        name: "pcp",
        field: QpField::Pcp,
        ty: Ty::Obj,
        doc: "VLAN PCP histogram per class",
        keys: &per_class_keys(
            "packets of the class with that PCP (0-7), or `none`: untagged; nonzero only",
        ),
    },
];

/// The orders of the object's keys and of the histograms' keys, as a `Value` map (sorted by
/// the key string) has them.
struct Orders {
    fields: Vec<(&'static str, QpField)>,
    /// Opcode buckets with their names, by name; "other" once (see [`QpJson::opcodes`]).
    opcodes: Vec<(String, Option<usize>)>,
    dscp: Vec<(String, usize)>,
    ecn: Vec<(String, usize)>,
    pcp: Vec<(String, usize)>,
    classes: Vec<usize>,
}

fn by_name<T>(mut v: Vec<(String, T)>) -> Vec<(String, T)> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

static ORDERS: std::sync::LazyLock<Orders> = std::sync::LazyLock::new(|| {
    let mut fields: Vec<(&'static str, QpField)> =
        QP_FIELDS.iter().map(|f| (f.name, f.field)).collect();
    // a QP object has the counts inserted after the fixed fields: a count of the same name replaces it.
    for (i, q) in QP_COUNTS.iter().enumerate() {
        fields.retain(|f| f.0 != q.name);
        fields.push((q.name, QpField::Count(i)));
    }
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut opcodes: Vec<(String, Option<usize>)> = (0..observer_common::maps::OPCODE_BUCKETS)
        .filter_map(|b| bucket_opcode(b).map(|op| (format!("0x{op:02x}"), Some(b))))
        .collect();
    opcodes.push(("other".into(), None));
    let mut classes: Vec<usize> = (0..class::COUNT).collect();
    classes.sort_by_key(|&c| class::NAMES[c]);
    Orders {
        fields,
        opcodes: by_name(opcodes),
        dscp: by_name((0..64).map(|i| (i.to_string(), i)).collect()),
        ecn: by_name((0..4).map(|i| (i.to_string(), i)).collect()),
        pcp: by_name(
            (0..observer_common::maps::PCP_BUCKETS)
                .map(|i| (pcp_name(i), i))
                .collect(),
        ),
        classes,
    }
});

/// The nonzero cells of `h` as a map, in `order`.
struct Hist<'a, const N: usize> {
    h: &'a [u32; N],
    order: &'a [(String, usize)],
}

/// A histogram's nonzero buckets in name order, as (name, count). Most histograms of a QP are
/// empty or have one bucket (one DSCP, one ECN codepoint): a sequential scan first, and only
/// several buckets need the name order.
fn hist_entries<'a>(
    h: &'a [u32],
    order: &'a [(String, usize)],
) -> impl Iterator<Item = (&'a str, u32)> + 'a {
    let mut nonzero = h.iter().enumerate().filter(|(_, n)| **n != 0);
    let single = match (nonzero.next(), nonzero.next()) {
        (None, _) => Some(None),
        (Some((i, _)), None) => Some(order.iter().find(|(_, j)| *j == i)),
        _ => None,
    };
    let (one, all) = match single {
        Some(e) => (e, &order[..0]),
        None => (None, order),
    };
    one.into_iter()
        .chain(all.iter().filter(|(_, i)| h[*i] != 0))
        .map(|(name, i)| (name.as_str(), h[*i]))
}

/// The opcode histogram's nonzero buckets by name, as (name, count); "other" is the last
/// nonzero bucket without an opcode (as a tree built in bucket order has it).
fn opcode_entries(h: &[u32]) -> impl Iterator<Item = (&'static str, u32)> + '_ {
    ORDERS.opcodes.iter().filter_map(|(name, b)| {
        let n = match b {
            Some(b) => h[*b],
            None => (0..h.len())
                .rev()
                .find(|&b| bucket_opcode(b).is_none() && h[b] != 0)
                .map_or(0, |b| h[b]),
        };
        (n != 0).then_some((name.as_str(), n))
    })
}

impl<const N: usize> Serialize for Hist<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (name, n) in hist_entries(self.h, self.order) {
            m.serialize_entry(name, &n)?;
        }
        m.end()
    }
}

/// A per-class histogram: every class (empty ones too), in name order.
struct PerClass<'a, const N: usize> {
    h: &'a [[u32; N]; class::COUNT],
    order: &'a [(String, usize)],
}

impl<const N: usize> Serialize for PerClass<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(class::COUNT))?;
        for &c in &ORDERS.classes {
            m.serialize_entry(
                class::NAMES[c],
                &Hist {
                    h: &self.h[c],
                    order: self.order,
                },
            )?;
        }
        m.end()
    }
}

/// The opcode histogram: nonzero buckets by name; "other" is the last nonzero bucket without
/// an opcode (as a tree built in bucket order has them).
struct Opcodes<'a>(&'a QpValue);

impl Serialize for Opcodes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (name, n) in opcode_entries(&self.0.opcode_hist) {
            m.serialize_entry(name, &n)?;
        }
        m.end()
    }
}

/// A QP written directly as the compact object [`QpJson`] serializes to: the same bytes
/// (tested against it), without serde's per-field dispatch and key escaping (summary.json of
/// 200,000 keys is 135 MB, written after the last packet).
fn write_qp(out: &mut Vec<u8>, iface: &str, k: &QpKey, v: &QpValue) {
    use std::io::Write as _;
    fn key(out: &mut Vec<u8>, first: &mut bool, name: &str) {
        if !std::mem::take(first) {
            out.push(b',');
        }
        // names of the code's own (fields, buckets, classes): escaped as serde would
        let _ = serde_json::to_writer(&mut *out, name);
        out.push(b':');
    }
    fn hist(out: &mut Vec<u8>, num: &mut itoa::Buffer, h: &[u32], order: &[(String, usize)]) {
        out.push(b'{');
        let mut first = true;
        for (name, n) in hist_entries(h, order) {
            key(out, &mut first, name);
            out.extend_from_slice(num.format(n).as_bytes());
        }
        out.push(b'}');
    }
    fn per_class<const N: usize>(
        out: &mut Vec<u8>,
        num: &mut itoa::Buffer,
        h: &[[u32; N]; class::COUNT],
        order: &[(String, usize)],
    ) {
        out.push(b'{');
        let mut first = true;
        for &c in &ORDERS.classes {
            key(out, &mut first, class::NAMES[c]);
            hist(out, num, &h[c], order);
        }
        out.push(b'}');
    }
    let o = &*ORDERS;
    let mut num = itoa::Buffer::new();
    let mut first = true;
    out.push(b'{');
    for &(name, f) in &o.fields {
        key(out, &mut first, name);
        match f {
            QpField::Iface => {
                let _ = serde_json::to_writer(&mut *out, iface);
            }
            QpField::Dir => {
                let d = dir::NAMES[(k.dir as usize).min(dir::COUNT - 1)];
                let _ = serde_json::to_writer(&mut *out, d);
            }
            QpField::Src => {
                let _ = write!(out, "\"{}\"", ip_of(&k.src_ip));
            }
            QpField::Dst => {
                let _ = write!(out, "\"{}\"", ip_of(&k.dst_ip));
            }
            QpField::Qp => out.extend_from_slice(num.format(k.dest_qp).as_bytes()),
            QpField::QpHex => {
                let _ = write!(out, "\"0x{:06x}\"", k.dest_qp);
            }
            QpField::FirstNs => out.extend_from_slice(num.format(v.first_ns).as_bytes()),
            QpField::LastNs => out.extend_from_slice(num.format(v.last_ns).as_bytes()),
            QpField::MaxUdpPayload => {
                out.extend_from_slice(num.format(v.max_udp_payload).as_bytes())
            }
            QpField::LastUdpSport => out.extend_from_slice(num.format(v.last_udp_sport).as_bytes()),
            QpField::Opcodes => {
                out.push(b'{');
                let mut first = true;
                for (name, n) in opcode_entries(&v.opcode_hist) {
                    key(out, &mut first, name);
                    out.extend_from_slice(num.format(n).as_bytes());
                }
                out.push(b'}');
            }
            QpField::Dscp => per_class(out, &mut num, &v.dscp_hist, &o.dscp),
            QpField::Ecn => per_class(out, &mut num, &v.ecn_hist, &o.ecn),
            QpField::Pcp => per_class(out, &mut num, &v.pcp_hist, &o.pcp),
            QpField::Count(i) => {
                out.extend_from_slice(num.format((QP_COUNTS[i].get)(v)).as_bytes())
            }
        }
    }
    out.push(b'}');
}

impl Serialize for QpJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let o = &*ORDERS;
        let (k, v) = (self.key, self.value);
        let mut m = s.serialize_map(Some(o.fields.len()))?;
        for &(name, f) in &o.fields {
            match f {
                QpField::Iface => m.serialize_entry(name, self.iface)?,
                QpField::Dir => {
                    m.serialize_entry(name, dir::NAMES[(k.dir as usize).min(dir::COUNT - 1)])?
                }
                QpField::Src => m.serialize_entry(name, &ip_of(&k.src_ip))?,
                QpField::Dst => m.serialize_entry(name, &ip_of(&k.dst_ip))?,
                QpField::Qp => m.serialize_entry(name, &k.dest_qp)?,
                QpField::QpHex => m.serialize_entry(name, &format_args!("0x{:06x}", k.dest_qp))?,
                QpField::FirstNs => m.serialize_entry(name, &v.first_ns)?,
                QpField::LastNs => m.serialize_entry(name, &v.last_ns)?,
                QpField::MaxUdpPayload => m.serialize_entry(name, &v.max_udp_payload)?,
                QpField::LastUdpSport => m.serialize_entry(name, &v.last_udp_sport)?,
                QpField::Opcodes => m.serialize_entry(name, &Opcodes(v))?,
                QpField::Dscp => m.serialize_entry(
                    name,
                    &PerClass {
                        h: &v.dscp_hist,
                        order: &o.dscp,
                    },
                )?,
                QpField::Ecn => m.serialize_entry(
                    name,
                    &PerClass {
                        h: &v.ecn_hist,
                        order: &o.ecn,
                    },
                )?,
                QpField::Pcp => m.serialize_entry(
                    name,
                    &PerClass {
                        h: &v.pcp_hist,
                        order: &o.pcp,
                    },
                )?,
                QpField::Count(i) => m.serialize_entry(name, &(QP_COUNTS[i].get)(v))?,
            }
        }
        m.end()
    }
}

/// The QPs of a summary, serialized one by one ([`QpJson`]): every key of `snaps`, sorted by
/// (iface, dir, src, dst, qp) within each snapshot as [`summary_json`] sorts them.
pub struct QpList<'a> {
    items: Vec<(&'a str, &'a QpKey, &'a QpValue)>,
}

impl<'a> QpList<'a> {
    pub fn new(snaps: &'a [Snapshot]) -> QpList<'a> {
        QpList::from_groups(
            snaps
                .iter()
                .map(|s| {
                    s.qps
                        .iter()
                        .map(|(k, v)| (s.iface.as_str(), k, v))
                        .collect()
                })
                .collect(),
        )
    }
    /// One group per interface, in order; each sorted by key here.
    pub fn from_groups(groups: Vec<Vec<(&'a str, &'a QpKey, &'a QpValue)>>) -> QpList<'a> {
        let mut items = Vec::with_capacity(groups.iter().map(Vec::len).sum());
        for mut g in groups {
            // the keys' order as integers (the same as QpKey's byte-wise Ord; no memcmp calls)
            g.sort_unstable_by_key(|e| {
                let k = e.1;
                (
                    u128::from_be_bytes(k.src_ip),
                    u128::from_be_bytes(k.dst_ip),
                    k.dest_qp,
                    k.dir,
                    k._pad,
                )
            });
            items.append(&mut g);
        }
        QpList { items }
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The `n` QPs with the most packets (ties in list order), as [`qp_json`] values.
    pub fn top_by_pkts(&self, n: usize) -> Vec<Value> {
        let mut idx: Vec<usize> = (0..self.items.len()).collect();
        let key = |i: &usize| (std::cmp::Reverse(self.items[*i].2.pkts), *i);
        if idx.len() > n {
            idx.select_nth_unstable_by_key(n, key);
            idx.truncate(n);
        }
        idx.sort_by_key(key);
        idx.iter()
            .map(|&i| {
                let (f, k, v) = self.items[i];
                qp_json(f, k, v)
            })
            .collect()
    }
}

impl Serialize for QpList<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut q = s.serialize_seq(Some(self.items.len()))?;
        for &(iface, key, value) in &self.items {
            q.serialize_element(&QpJson { iface, key, value })?;
        }
        q.end()
    }
}

/// A summary object (`head`, a `Value` map without "qps") with its QPs streamed in at their
/// sorted place: the same JSON as `head` with "qps" inserted, without building the QPs' tree.
pub struct SummaryDoc<'a> {
    pub head: &'a Map<String, Value>,
    pub qps: &'a QpList<'a>,
    /// The `latency` section's QPs (absent when empty; docs/latency.md).
    pub latency: &'a [crate::pipeline::latency::LatencyQp<'a>],
}

impl Serialize for SummaryDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lat = (!self.latency.is_empty()).then_some(self.latency);
        serialize_doc(self.head, self.qps, lat, s)
    }
}

/// `head` with `qps` and, when given, `latency` at their sorted places.
fn serialize_doc<S: Serializer, Q: Serialize + ?Sized, L: Serialize + ?Sized>(
    head: &Map<String, Value>,
    qps: &Q,
    latency: Option<&L>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(head.len() + 2))?;
    let mut qps_done = false;
    let mut lat_done = latency.is_none();
    for (k, v) in head {
        if k == "qps" || (k == "latency" && latency.is_some()) {
            continue;
        }
        if !lat_done && k.as_str() > "latency" {
            m.serialize_entry("latency", &latency)?;
            lat_done = true;
        }
        if !qps_done && k.as_str() > "qps" {
            m.serialize_entry("qps", qps)?;
            qps_done = true;
        }
        m.serialize_entry(k, v)?;
    }
    if !lat_done {
        m.serialize_entry("latency", &latency)?;
    }
    if !qps_done {
        m.serialize_entry("qps", qps)?;
    }
    m.end()
}

/// Stands in for the QPs while the rest of a document is written ([`SummaryDoc::write`]).
const QPS_MARKER: &str = "\u{1}qps\u{1}";
/// Likewise for the latency section's QPs.
const LATENCY_MARKER: &str = "\u{1}latency\u{1}";

/// A top-level array as the summary's formatter writes it: `[]`, or each element (rendered
/// compactly by `one`) on its own line indented by four spaces and the closing bracket by two.
fn write_records<W: std::io::Write, T>(
    w: &mut W,
    items: &[T],
    mut one: impl FnMut(&mut Vec<u8>, &T) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if items.is_empty() {
        return w.write_all(b"[]");
    }
    let mut buf = Vec::with_capacity(1 << 16);
    buf.push(b'[');
    for (i, x) in items.iter().enumerate() {
        buf.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
        one(&mut buf, x)?;
        if buf.len() >= 1 << 16 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    buf.extend_from_slice(b"\n  ]");
    w.write_all(&buf)
}

/// QPs rendered at a time, half on each of two threads ([`SummaryDoc::write`]).
const QP_WINDOW: usize = 4096;

impl SummaryDoc<'_> {
    /// Writes the document as [`write_summary`] does, byte for byte, faster: the rest of the
    /// document first (small), then each QP as a compact object on a line of its own, rendered
    /// a window at a time on two threads (summary.json is written after the last packet, with
    /// nothing else to do, and at 200,000 keys it is 135 MB).
    pub fn write<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(1 << 16);
        let mut ser = serde_json::Serializer::with_formatter(&mut head, RecordLines::default());
        let lat = (!self.latency.is_empty()).then_some(LATENCY_MARKER);
        serialize_doc(self.head, QPS_MARKER, lat, &mut ser)?;
        // each marker as the value of its top-level key (a key of the top level is unique;
        // deeper levels are written without the space after the colon): (key, marker)'s
        // byte range in `head`, in document order ("latency" sorts before "qps")
        let place = |key: &str, marker: &str| -> std::io::Result<(usize, usize)> {
            let marked = format!("\n  \"{key}\": {}", serde_json::to_string(marker)?);
            let at = head
                .windows(marked.len())
                .position(|x| x == marked.as_bytes())
                .ok_or_else(|| {
                    std::io::Error::other(format!("summary: the place of {key} not found"))
                })?;
            Ok((
                at + marked.len() - serde_json::to_string(marker)?.len(),
                at + marked.len(),
            ))
        };
        let mut from = 0;
        if lat.is_some() {
            let (value_at, end) = place("latency", LATENCY_MARKER)?;
            w.write_all(&head[from..value_at])?;
            write_records(&mut w, self.latency, |out, q| {
                serde_json::to_writer(&mut *out, q).map_err(std::io::Error::other)
            })?;
            from = end;
        }
        let (value_at, end) = place("qps", QPS_MARKER)?;
        w.write_all(&head[from..value_at])?;
        self.write_qps(&mut w)?;
        w.write_all(&head[end..])
    }

    /// The QP array as the summary's formatter writes it at the second level: `[]`, or each
    /// element on its own line indented by four spaces and the closing bracket by two.
    fn write_qps<W: std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        let items = &self.qps.items;
        if items.is_empty() {
            return w.write_all(b"[]");
        }
        w.write_all(b"[")?;
        let render = |part: &[(&str, &QpKey, &QpValue)], first: bool, out: &mut Vec<u8>| {
            out.clear();
            for (i, &(iface, key, value)) in part.iter().enumerate() {
                out.extend_from_slice(if first && i == 0 {
                    b"\n    "
                } else {
                    b",\n    "
                });
                write_qp(out, iface, key, value);
            }
        };
        let two = items.len() > QP_WINDOW / 4
            && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (n, window) in items.chunks(QP_WINDOW).enumerate() {
            let first = n == 0;
            if two {
                let (x, y) = window.split_at(window.len() / 2);
                std::thread::scope(|sc| {
                    let h = sc.spawn(|| render(y, first && x.is_empty(), &mut b));
                    render(x, first, &mut a);
                    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
                });
                w.write_all(&a)?;
                w.write_all(&b)?;
            } else {
                render(window, first, &mut a);
                w.write_all(&a)?;
            }
        }
        w.write_all(b"\n  ]")
    }
}

/// Writes a summary document as summary.json is written: indented down to the second level, and
/// every record below it (an interface, a QP, an output's statistics) on a line of its own,
/// so that `grep 0x000011 summary.json` shows a QP whole and a file of 20,000 QPs is about half
/// the size of one indented throughout (14.1 against 24.6 MB). The same JSON either way.
pub fn write_summary<W: std::io::Write, T: Serialize + ?Sized>(
    w: W,
    doc: &T,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(w, RecordLines::default());
    doc.serialize(&mut ser)
}

/// The formatter of [`write_summary`]: `serde_json`'s indenting formatter for the containers at
/// depth 1 and 2, the compact one inside deeper containers.
#[derive(Default)]
struct RecordLines {
    pretty: serde_json::ser::PrettyFormatter<'static>,
    /// Containers open.
    depth: usize,
}

/// Deepest container that is indented.
const INDENTED: usize = 2;

impl RecordLines {
    fn indented(&self) -> bool {
        self.depth <= INDENTED
    }
}

impl serde_json::ser::Formatter for RecordLines {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        if self.indented() {
            self.pretty.begin_array(w)
        } else {
            w.write_all(b"[")
        }
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        let r = if self.indented() {
            self.pretty.end_array(w)
        } else {
            w.write_all(b"]")
        };
        self.depth -= 1;
        r
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if self.indented() {
            self.pretty.begin_array_value(w, first)
        } else if first {
            Ok(())
        } else {
            w.write_all(b",")
        }
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.indented() {
            self.pretty.end_array_value(w)
        } else {
            Ok(())
        }
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        if self.indented() {
            self.pretty.begin_object(w)
        } else {
            w.write_all(b"{")
        }
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        let r = if self.indented() {
            self.pretty.end_object(w)
        } else {
            w.write_all(b"}")
        };
        self.depth -= 1;
        r
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if self.indented() {
            self.pretty.begin_object_key(w, first)
        } else if first {
            Ok(())
        } else {
            w.write_all(b",")
        }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.indented() {
            self.pretty.begin_object_value(w)
        } else {
            w.write_all(b":")
        }
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.indented() {
            self.pretty.end_object_value(w)
        } else {
            Ok(())
        }
    }
}

/// `{"interfaces": [...]}` of `snaps`: [`summary_json`] without its QPs (see [`QpList`]).
pub fn interfaces_json(snaps: &[Snapshot]) -> Map<String, Value> {
    let mut ifaces = Vec::new();
    for s in snaps {
        for d in 0..dir::COUNT {
            if s.iface_stats[d].frames != 0 || d == dir::INGRESS as usize {
                ifaces.push(iface_json(&s.iface, d, &s.iface_stats[d]));
            }
        }
    }
    let mut m = Map::new();
    m.insert("interfaces".into(), Value::Array(ifaces));
    m
}

/// The JSON type of a summary.json field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Int,
    Num,
    Str,
    /// A string or null.
    OptStr,
    /// An integer or null.
    OptInt,
    /// A number or null.
    OptNum,
    Bool,
    Obj,
    /// An object or null.
    OptObj,
    /// An array of objects (each documented field by field).
    Objs,
    /// An array of 8 integers, one per priority 0-7.
    Ints8,
    /// An array of 8 numbers, one per priority 0-7.
    Nums8,
    Strs,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Int => "integer",
            Ty::Num => "number",
            Ty::Str => "string",
            Ty::OptStr => "string or null",
            Ty::OptInt => "integer or null",
            Ty::OptNum => "number or null",
            Ty::Bool => "boolean",
            Ty::Obj => "object",
            Ty::OptObj => "object or null",
            Ty::Objs => "array of objects",
            Ty::Ints8 => "8 integers (priority 0-7)",
            Ty::Nums8 => "8 numbers (priority 0-7)",
            Ty::Strs => "array of strings",
        }
    }

    /// `v` has this type.
    pub fn accepts(self, v: &Value) -> bool {
        let eight = |f: fn(&Value) -> bool| {
            v.as_array()
                .is_some_and(|a| a.len() == 8 && a.iter().all(f))
        };
        match self {
            Ty::Int => v.is_u64() || v.is_i64(),
            Ty::Num => v.is_number(),
            Ty::Str => v.is_string(),
            Ty::OptStr => v.is_string() || v.is_null(),
            Ty::OptInt => v.is_u64() || v.is_i64() || v.is_null(),
            Ty::OptNum => v.is_number() || v.is_null(),
            Ty::Bool => v.is_boolean(),
            Ty::Obj => v.is_object(),
            Ty::OptObj => v.is_object() || v.is_null(),
            Ty::Objs => v.as_array().is_some_and(|a| a.iter().all(Value::is_object)),
            Ty::Ints8 => eight(|x| x.is_u64() || x.is_i64()),
            Ty::Nums8 => eight(Value::is_number),
            Ty::Strs => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        }
    }
}

/// One documented field of summary.json. `path` from the document's root: `a.b` is key `b` of
/// the object `a`, `a[]` an element of the array `a`, and a segment in braces (`{rule}`) any key
/// of its object, named in `doc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub path: String,
    pub ty: Ty,
    pub doc: String,
}

type Doc = (&'static str, Ty, &'static str);

/// The top level of the document (the collector's `summary_head` and the QPs).
const HEAD_FIELDS: &[Doc] = &[
    (
        "interfaces",
        Ty::Objs,
        "one object per interface and direction (every interface's ingress, its egress when it saw frames): totals of the run, counts from before a restart of the interface included; [fields below](#interfaces)",
    ),
    (
        "qps",
        Ty::Objs,
        "one object per QP key (interface, direction, source, destination, destination QP) of the run, by interface, then key; [fields below](#qps)",
    ),
    ("host", Ty::Str, "`--host` (default: the host name)"),
    (
        "source",
        Ty::Str,
        "`live`, `replay`, or `lab-fallback` (the lab's fallback observer)",
    ),
    ("point", Ty::OptStr, "`--point-label`, or null"),
    (
        "points",
        Ty::Objs,
        "the run's observation points: one per interface and direction, as `interfaces` has them",
    ),
    ("points[].host", Ty::Str, "the host"),
    ("points[].iface", Ty::Str, "the interface"),
    ("points[].dir", Ty::Str, "`ingress` or `egress`"),
    ("points[].point", Ty::OptStr, "the point label, or null"),
    (
        "points[].name",
        Ty::Str,
        "the point's name in `roce-analyze path`: `host/iface/dir`, `[label]` appended when labelled",
    ),
    (
        "alerts",
        Ty::Obj,
        "alerts emitted per rule (after deduplication and hold-down); a rule that never fired is absent",
    ),
    (
        "alerts.{rule}",
        Ty::Int,
        "alerts of the rule ([alerts.md](alerts.md))",
    ),
    (
        "alert_occurrences",
        Ty::Obj,
        "occurrences behind the alerts per rule (an alert can stand for several)",
    ),
    (
        "alert_occurrences.{rule}",
        Ty::Int,
        "the rule's occurrences",
    ),
    (
        "pfc_storm_figures",
        Ty::Obj,
        "the figures of the PFC storm rule, per interface",
    ),
    ("pfc_storm_figures.{iface}", Ty::Obj, "one interface"),
    (
        "pfc_storm_figures.{iface}.max_xoff_per_s",
        Ty::Obj,
        "per direction (`ingress`, `egress`)",
    ),
    (
        "pfc_storm_figures.{iface}.max_xoff_per_s.{dir}",
        Ty::Nums8,
        "the most PFC XOFF frames in one second (the densest one-second window), per priority",
    ),
    (
        "pfc_storm_figures.{iface}.evictions",
        Ty::Int,
        "QP keys evicted from the interface's table over the run",
    ),
    (
        "host_qps",
        Ty::OptObj,
        "the host's QPs from the RDMA subsystem (live, [qps.md](qps.md)); null when they were not read (`--no-host-qps`, no RDMA subsystem, replay)",
    ),
    (
        "host_qps.reads",
        Ty::Int,
        "inventory reads (one per interval)",
    ),
    ("host_qps.qps", Ty::Int, "QPs in the last read"),
    (
        "host_qps.by_state",
        Ty::Obj,
        "the last read's QPs per RDMA device",
    ),
    (
        "host_qps.by_state.{device}",
        Ty::Obj,
        "one RDMA device: QPs per state",
    ),
    (
        "host_qps.by_state.{device}.{state}",
        Ty::Int,
        "QPs in the state (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`)",
    ),
    (
        "host_qps.errors",
        Ty::Int,
        "QPs seen moving to ERR or SQE over the run, or in it at the first read (each a `qp_error` alert before hold-down)",
    ),
    (
        "host_qps.appeared",
        Ty::Int,
        "QPs that appeared (the first read's included)",
    ),
    ("host_qps.gone", Ty::Int, "QPs destroyed between two reads"),
    (
        "host_qps.excluded",
        Ty::Obj,
        "what the reads left out, counted",
    ),
    (
        "host_qps.excluded.duplicates",
        Ty::Int,
        "QPs a non-atomic dump reported twice (kept once)",
    ),
    (
        "host_qps.excluded.over_limit",
        Ty::Int,
        "QPs beyond the inventory's bound, summed over the reads",
    ),
    (
        "host_qps.excluded.cm_ids_unmatched",
        Ty::Int,
        "rdma_cm ids whose QP was not in the QP dump, summed over the reads",
    ),
    (
        "host_qps.marking",
        Ty::Obj,
        "the last read's QPs by marking verdict",
    ),
    (
        "host_qps.marking.{verdict}",
        Ty::Int,
        "QPs with the verdict (`ok`, `off_policy`, `lossy`, `unknown`; [qps.md](qps.md#marking))",
    ),
    (
        "host_qps.device_errors",
        Ty::Int,
        "RDMA device dumps that failed (each logged; the other devices were read)",
    ),
    (
        "host_qps.stalls",
        Ty::Int,
        "`qp_stalled` stalls over the run (an RC QP with unacknowledged packets and no progress for `qp_stall_s`; [qps.md](qps.md#stalls))",
    ),
    (
        "host_qps.tc_override",
        Ty::Obj,
        "the last read's device traffic-class overrides (mlx5 `tc/PORT/traffic_class`, set on the device): `DEV/PORT` -> the traffic class the device sends for every QP set up through the kernel ([qps.md](qps.md#marking))",
    ),
    (
        "host_qps.tc_override.{port}",
        Ty::Int,
        "one port's override",
    ),
    (
        "host_qps.raw_context",
        Ty::OptObj,
        "the drivers' raw QP contexts (mlx5), read for set-ups the probe did not see and for stalls; [qps.md](qps.md#raw-qp-context)",
    ),
    (
        "host_qps.raw_context.reads",
        Ty::Int,
        "raw contexts read over the run",
    ),
    (
        "host_qps.raw_context.setups",
        Ty::Int,
        "QP set-ups taken from them",
    ),
    (
        "host_qps.raw_context.errors",
        Ty::Int,
        "raw contexts not used: unreadable, malformed, a firmware error, or disagreeing with the QP listing",
    ),
    (
        "host_qps.raw_context.deferred",
        Ty::Int,
        "QPs left for a later read by the bound of 256 raw reads per interval",
    ),
    (
        "host_qps.raw_context.unsupported",
        Ty::Obj,
        "devices without a raw QP context decoded here: device -> reason (rxe, irdma: none; bnxt_re, hns: another layout; or no CAP_NET_ADMIN)",
    ),
    ("host_qps.raw_context.unsupported.{device}", Ty::Str, "why"),
    (
        "host_qps.counters",
        Ty::OptObj,
        "per-QP-group hardware counters by counter binding (`--qp-counters`, [qps.md](qps.md#counters)); null without it",
    ),
    (
        "host_qps.counters.grouping",
        Ty::Str,
        "what auto mode groups QPs by: `type`, `pid` or `type,pid`",
    ),
    (
        "host_qps.counters.ports",
        Ty::Objs,
        "one object per RDMA port: what the binding did there",
    ),
    ("host_qps.counters.ports[].device", Ty::Str, "RDMA device"),
    ("host_qps.counters.ports[].port", Ty::Int, "port number"),
    (
        "host_qps.counters.ports[].state",
        Ty::Str,
        "`turned_on` (by this run; off again at exit), `already_auto`, `manual` (both read as they are), `unavailable` or `failed` (no per-QP counters there)",
    ),
    (
        "host_qps.counters.ports[].detail",
        Ty::OptStr,
        "the existing grouping (`already_auto`) or the reason (`unavailable`, `failed`)",
    ),
    (
        "host_qps.counters.groups",
        Ty::Objs,
        "one object per counter group seen over the run",
    ),
    ("host_qps.counters.groups[].device", Ty::Str, "RDMA device"),
    ("host_qps.counters.groups[].port", Ty::Int, "port number"),
    (
        "host_qps.counters.groups[].counter_id",
        Ty::Int,
        "the kernel's counter id (`rdma statistic qp show`'s cntn)",
    ),
    (
        "host_qps.counters.groups[].qp_type",
        Ty::OptStr,
        "the group's QP type when grouped by type",
    ),
    (
        "host_qps.counters.groups[].pid",
        Ty::OptInt,
        "the group's process when grouped by process",
    ),
    (
        "host_qps.counters.groups[].command",
        Ty::OptStr,
        "the process's command, or the kernel user's name",
    ),
    (
        "host_qps.counters.groups[].qps",
        Ty::Int,
        "QPs bound to it at the last read",
    ),
    (
        "host_qps.counters.groups[].increments",
        Ty::Obj,
        "each hardware counter's increments over the run (after the first read, the baseline)",
    ),
    (
        "host_qps.counters.groups[].increments.{counter}",
        Ty::Int,
        "one counter, by the driver's name (`out_of_sequence`, `local_ack_timeout_err`, ...)",
    ),
    (
        "host_qps.counters.excluded",
        Ty::Obj,
        "counter groups left out, counted",
    ),
    (
        "host_qps.counters.excluded.over_limit",
        Ty::Int,
        "groups beyond the bound (16,384) of a read or of the run",
    ),
    (
        "host_qps.counters.read_errors",
        Ty::Int,
        "port counter reads that failed (each logged)",
    ),
    (
        "evidence",
        Ty::Obj,
        "live with `--evidence`: the sample of offending frames ([live.md](live.md#evidence))",
    ),
    ("evidence.file", Ty::Str, "the pcapng file"),
    ("evidence.frames", Ty::Int, "frames written"),
    (
        "evidence.over_per_key",
        Ty::Int,
        "sampled frames not written: each of their rule-key pairs had `--evidence-per-key` frames",
    ),
    (
        "evidence.over_total",
        Ty::Int,
        "sampled frames not written: `--evidence-max` frames were written",
    ),
    (
        "evidence.over_subjects",
        Ty::Int,
        "sampled frames not written: 200,000 rule-key pairs were remembered",
    ),
    (
        "evidence.over_rate",
        Ty::Int,
        "offending frames the kernel programs did not copy: a CPU's `--evidence-rate` for the second was spent",
    ),
    (
        "evidence.lost",
        Ty::Int,
        "offending frames not copied: the sample ring was full",
    ),
    (
        "output",
        Ty::Obj,
        "statistics of the outputs that keep them",
    ),
    (
        "output.{table}",
        Ty::Obj,
        "a Parquet table's writer: `flows`, `interfaces`, `alerts`, `nic`, `qps`",
    ),
    (
        "output.{table}.files",
        Ty::Int,
        "files renamed to their final name",
    ),
    ("output.{table}.rows", Ty::Int, "rows in those files"),
    ("output.{table}.bytes", Ty::Int, "bytes of those files"),
    (
        "output.{table}.write_errors",
        Ty::Int,
        "failed attempts to write a completed file",
    ),
    (
        "output.{table}.rows_lost",
        Ty::Int,
        "rows dropped because too much was pending on an unwritable disk",
    ),
    (
        "output.{table}.pending_files",
        Ty::Int,
        "completed files still pending at the end (their writes kept failing)",
    ),
    (
        "output.{table}.journal",
        Ty::Bool,
        "whether the open file's rows were made durable as written (journal and checkpoints; [replay.md](replay.md))",
    ),
    (
        "output.alerts_jsonl_lines_lost",
        Ty::Int,
        "alerts.jsonl lines dropped: only while the file cannot be written and more than 100,000 lines wait (the oldest go first); each episode is logged at error level and raises `output_write_failed` naming the number of lines",
    ),
    (
        "output.alertmanager",
        Ty::Obj,
        "with `--alertmanager`: [monitoring.md](monitoring.md)",
    ),
    (
        "output.alertmanager.urls",
        Ty::Strs,
        "the Alertmanager URLs (a password in them shown as `***`)",
    ),
    (
        "output.metrics",
        Ty::Obj,
        "with `--metrics`: the endpoint ([monitoring.md](monitoring.md#the-endpoint))",
    ),
    ("output.metrics.listen", Ty::Str, "the address served"),
    (
        "output.metrics.serving",
        Ty::Bool,
        "whether the server was still serving at the end (false: it stopped, logged at error level)",
    ),
    (
        "output.metrics.connections_refused",
        Ty::Obj,
        "connections refused or closed by the endpoint, by reason (`limit`, `descriptors`, `timeout`, `dropped`)",
    ),
    (
        "output.metrics.connections_refused.{reason}",
        Ty::Int,
        "connections refused or closed for the reason",
    ),
];

/// Alertmanager's counts (`output.alertmanager.*`).
const ALERTMANAGER_FIELDS: &[Doc] = &[
    (
        "sent",
        Ty::Int,
        "alerts (firing or resolved) accepted by every Alertmanager",
    ),
    (
        "dropped",
        Ty::Int,
        "alerts dropped because the queue was full (the oldest first)",
    ),
    (
        "untracked",
        Ty::Int,
        "alerts posted without following their key for the resolution (too many keys)",
    ),
    (
        "failed",
        Ty::Int,
        "alerts given up after the retries (per Alertmanager)",
    ),
    ("retries", Ty::Int, "failed posts that were retried"),
];

/// The fields of an interface object ([`iface_json`]) before the counts of [`IFACE_TRAFFIC`]
/// and [`IFACE_HEALTH`].
const IFACE_FIELDS: &[Doc] = &[
    ("iface", Ty::Str, "the interface"),
    ("dir", Ty::Str, "`ingress` or `egress`"),
    (
        "excluded",
        Ty::Obj,
        "frames not counted as RoCE, by reason: every reason, also when 0",
    ),
    (
        "excluded.{reason}",
        Ty::Int,
        "frames excluded for the reason",
    ),
    (
        "encap",
        Ty::Obj,
        "frames that arrived in a mirror encapsulation, by encapsulation: every one, also when 0",
    ),
    ("encap.{encap}", Ty::Int, "frames in the encapsulation"),
    ("pfc", Ty::Obj, "PFC frames (MAC control opcode 0x0101)"),
    ("pfc.frames", Ty::Int, "PFC frames"),
    (
        "pfc.enabled",
        Ty::Ints8,
        "PFC frames with the priority's class-enable bit set",
    ),
    (
        "pfc.xoff",
        Ty::Ints8,
        "of those, with a pause time above 0 (XOFF)",
    ),
    ("pfc.xon", Ty::Ints8, "of those, with pause time 0 (XON)"),
    ("pfc.quanta", Ty::Ints8, "pause quanta summed"),
    ("pause", Ty::Obj, "802.3x PAUSE frames (opcode 0x0001)"),
    ("pause.frames", Ty::Int, "PAUSE frames"),
    ("pause.xon", Ty::Int, "of those, with time 0 (XON)"),
    ("pause.quanta", Ty::Int, "pause quanta summed"),
];

/// Every documented field of summary.json, from the same definitions its writers use: the
/// QP object's fields ([`QP_FIELDS`], [`QP_COUNTS`]), the interface counts ([`IFACE_TRAFFIC`],
/// [`IFACE_HEALTH`]), and the lists above for the rest.
pub fn fields() -> Vec<Field> {
    let field = |path: String, ty: Ty, doc: String| Field { path, ty, doc };
    let mut out: Vec<Field> = HEAD_FIELDS
        .iter()
        .map(|&(p, ty, doc)| field(p.into(), ty, doc.into()))
        .collect();
    out.extend(latency_fields());
    out.extend(
        ALERTMANAGER_FIELDS
            .iter()
            .map(|&(p, ty, doc)| field(format!("output.alertmanager.{p}"), ty, doc.into())),
    );
    let names = |n: &[&str]| {
        n.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for &(p, ty, doc) in IFACE_FIELDS {
        let doc = match p {
            "excluded.{reason}" => format!("{doc}: {}", names(&reason::NAMES)),
            "encap.{encap}" => format!("{doc}: {}", names(&encap::NAMES[1..])),
            _ => doc.into(),
        };
        out.push(field(format!("interfaces[].{p}"), ty, doc));
    }
    for c in IFACE_TRAFFIC.iter().chain(&IFACE_HEALTH) {
        out.push(field(
            format!("interfaces[].{}", c.name),
            Ty::Int,
            format!(
                "{} ({}); the run's total of the `interfaces` table's column",
                c.doc, c.unit
            ),
        ));
    }
    for f in QP_FIELDS
        .iter()
        .filter(|f| !QP_COUNTS.iter().any(|q| q.name == f.name))
    {
        out.push(field(format!("qps[].{}", f.name), f.ty, f.doc.into()));
        for &(k, ty, doc) in f.keys {
            out.push(field(format!("qps[].{}.{k}", f.name), ty, doc.into()));
        }
    }
    for q in &QP_COUNTS {
        out.push(field(
            format!("qps[].{}", q.name),
            Ty::Int,
            format!(
                "{} ({}); the run's total of the `flows` table's column",
                q.doc, q.unit
            ),
        ));
    }
    out
}

/// The `latency` section (docs/latency.md), one block of fields per kind.
fn latency_fields() -> Vec<Field> {
    use observer_common::latency::kind;
    let f = |p: &str, ty: Ty, doc: &str| Field {
        path: p.into(),
        ty,
        doc: doc.into(),
    };
    let mut v = vec![
        f(
            "latency",
            Ty::Objs,
            "passive per-QP latency over the run ([latency.md](latency.md)): one object per requester key (the direction of the requests) with outcomes, by interface, then key; absent when no key had one",
        ),
        f("latency[].iface", Ty::Str, "the interface"),
        f("latency[].dir", Ty::Str, "`ingress` or `egress`"),
        f(
            "latency[].src",
            Ty::Str,
            "key source address (the requester)",
        ),
        f(
            "latency[].dst",
            Ty::Str,
            "key destination address (the responder)",
        ),
        f(
            "latency[].qp",
            Ty::Int,
            "BTH destination QP (the responder's)",
        ),
    ];
    for (k, name) in kind::NAMES.iter().enumerate() {
        let p = format!("latency[].{name}");
        v.push(f(
            &p,
            Ty::Obj,
            &format!(
                "{}; absent without samples, unmatched or open measurements",
                kind::DOCS[k]
            ),
        ));
        v.push(f(&format!("{p}.samples"), Ty::Int, "samples"));
        v.push(f(
            &format!("{p}.unmatched"),
            Ty::Int,
            "measurements started and never answered (timed out, a new incarnation, passed over)",
        ));
        v.push(f(
            &format!("{p}.open"),
            Ty::Int,
            "measurements still open when the observation ended (their answer may have come after it): neither samples nor unmatched",
        ));
        for (q, text) in [
            ("p50", "median"),
            ("p99", "99th percentile"),
            ("p999", "99.9th percentile"),
        ] {
            v.push(f(
                &format!("{p}.{q}_us"),
                Ty::OptNum,
                &format!("{text}, µs: the upper edge of the histogram bucket holding it (within 19 % above the true value); null without samples"),
            ));
        }
    }
    v.push(f(
        "latency[].ambiguous",
        Ty::Int,
        "ACK and READ measurements excluded by Karn's rule; absent when 0",
    ));
    v.push(f(
        "latency[].ring_full",
        Ty::Int,
        "ACK and READ measurements not started: the key's ring of 16 was full; absent when 0",
    ));
    v
}

/// docs/summary-json.md, generated from [`fields`].
pub fn markdown() -> String {
    let mut s = String::from(
        "<!-- Generated from observer/src/sinks/summary_json.rs by `cargo xtask summary-doc`; a test fails when this file and the code differ. -->\n\
         # summary.json\n\n\
         The totals of a run, written by `roce-observe` (live and replay) into the output directory when it stops cleanly; \
         `roce-observe replay --json` prints the same fields (with `--no-out` only `interfaces` and `qps`) beside two of its own, `first_events` and `replay` ([replay.md](replay.md)). summary.json is one JSON object, keys in sorted order, indented down to its second \
         level, every record below that (an interface and direction, a QP key, an output's statistics) on a line of its own \
         ([live.md](live.md#output-tree)). Counts are totals over the run; the same counts per interval are the Parquet tables' \
         columns of the same names ([schema.md](schema.md)).\n\n\
         A path `a.b` is the key `b` of the object `a`, `a[]` an element of the array `a`, and a key in braces (`{rule}`) \
         stands for any key of its object, named in the text. A field not listed here is not part of summary.json: a test \
         checks a summary.json written by the observer against this list.\n",
    );
    let sections = [
        ("Top level", "", ""),
        (
            "interfaces",
            "interfaces[].",
            "One interface and direction (`interfaces[]`).",
        ),
        (
            "qps",
            "qps[].",
            "One QP key (`qps[]`); histograms list nonzero buckets only.",
        ),
    ];
    let all = fields();
    for (i, (title, prefix, intro)) in sections.iter().enumerate() {
        s += &format!("\n## {title}\n\n");
        if !intro.is_empty() {
            s += &format!("{intro}\n\n");
        }
        s += "| field | type | meaning |\n|---|---|---|\n";
        for f in &all {
            let rel = if i == 0 {
                if sections[1..].iter().any(|x| f.path.starts_with(x.1)) {
                    continue;
                }
                f.path.as_str()
            } else if let Some(r) = f.path.strip_prefix(prefix) {
                r
            } else {
                continue;
            };
            s += &format!("| `{rel}` | {} | {} |\n", f.ty.name(), f.doc);
        }
    }
    s
}

/// What [`check`] found in a summary.json document.
#[derive(Debug, Default)]
pub struct Checked {
    /// Each place with a field no entry of [`fields`] describes, or a value of another type
    /// than documented.
    pub problems: Vec<String>,
    /// The documented paths the document has.
    pub seen: std::collections::BTreeSet<String>,
}

/// Checks a summary.json document against the documented fields ([`fields`]).
pub fn check(doc: &Value) -> Checked {
    let all = fields();
    let by_path: std::collections::HashMap<&str, &Field> =
        all.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut out = Checked::default();
    check_object(doc, "", "", &by_path, &mut out);
    out
}

fn check_object(
    v: &Value,
    pattern: &str,
    at: &str,
    fields: &std::collections::HashMap<&str, &Field>,
    out: &mut Checked,
) {
    let Value::Object(m) = v else {
        out.problems.push(format!("{at}: not an object"));
        return;
    };
    let join = |p: &str, k: &str| {
        if p.is_empty() {
            k.to_string()
        } else {
            format!("{p}.{k}")
        }
    };
    // The key in braces of this object, if it has any key.
    let any_key = fields.keys().find(|p| {
        let (parent, last) = p.rsplit_once('.').unwrap_or(("", p));
        parent == pattern && last.starts_with('{')
    });
    for (k, child) in m {
        let here = join(at, k);
        let Some(f) = fields
            .get(join(pattern, k).as_str())
            .or_else(|| any_key.and_then(|p| fields.get(p)))
        else {
            out.problems.push(format!("{here}: not documented"));
            continue;
        };
        if !f.ty.accepts(child) {
            out.problems
                .push(format!("{here}: {} documented, found {child}", f.ty.name()));
            continue;
        }
        out.seen.insert(f.path.clone());
        match (f.ty, child) {
            (Ty::Obj, _) | (Ty::OptObj, Value::Object(_)) => {
                check_object(child, &f.path, &here, fields, out)
            }
            (Ty::Objs, Value::Array(a)) => {
                for (i, e) in a.iter().enumerate() {
                    check_object(
                        e,
                        &format!("{}[]", f.path),
                        &format!("{here}[{i}]"),
                        fields,
                        out,
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value with every histogram and count varied by `seed` (a few cells zero).
    fn value(seed: u64) -> QpValue {
        let mut next = crate::testutil::xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut v = QpValue::ZERO;
        let cell = |r: u64| {
            if r.is_multiple_of(3) {
                0
            } else {
                (r >> 8) as u32 % 1000
            }
        };
        for c in v.opcode_hist.iter_mut() {
            *c = cell(next());
        }
        for row in v.dscp_hist.iter_mut() {
            for c in row.iter_mut() {
                *c = cell(next());
            }
        }
        for row in v.ecn_hist.iter_mut() {
            for c in row.iter_mut() {
                *c = cell(next());
            }
        }
        for row in v.pcp_hist.iter_mut() {
            for c in row.iter_mut() {
                *c = cell(next());
            }
        }
        v.pkts = next() % 100_000;
        v.bytes_l2 = next();
        v.naks = next() % 7;
        v.psn_gaps = next() % 5;
        v.icrc_ok = next() % 9;
        v.first_ns = next();
        v.last_ns = next();
        v.max_udp_payload = next() as u16;
        v.last_udp_sport = next() as u16;
        v
    }

    fn key(i: u32, d: u8) -> QpKey {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        src[12..].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
        let mut dst = [0u8; 16];
        dst[0] = 0xfd;
        dst[15] = (i * 7) as u8;
        QpKey {
            src_ip: if i.is_multiple_of(2) { src } else { dst },
            dst_ip: if i.is_multiple_of(2) { dst } else { src },
            dest_qp: i * 977 % 0xff_ffff,
            dir: d,
            _pad: [0; 3],
        }
    }

    /// An independent encoding of a QP object as a `Value` tree, field by field, that the one
    /// serializer ([`QpJson`]) is checked against.
    fn qp_json_reference(iface: &str, k: &QpKey, v: &QpValue) -> Value {
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

    /// The one QP serializer writes exactly the reference tree (same keys, values and order).
    #[test]
    fn streamed_qp_equals_value_tree() {
        for i in 0..200u32 {
            let (k, v) = (key(i, (i % 2) as u8), value(i as u64));
            let tree = serde_json::to_string(&qp_json_reference("eth0", &k, &v)).unwrap();
            assert_eq!(
                qp_json("eth0", &k, &v),
                serde_json::from_str::<Value>(&tree).unwrap()
            );
            let streamed = serde_json::to_string(&QpJson {
                iface: "eth0",
                key: &k,
                value: &v,
            })
            .unwrap();
            assert_eq!(streamed, tree, "key {i}");
        }
    }

    /// docs/summary-json.md is the generated text, so the documentation and the code cannot
    /// differ.
    #[test]
    fn docs_summary_json_matches_the_code() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/summary-json.md");
        let doc = std::fs::read_to_string(path).expect("docs/summary-json.md");
        assert!(
            doc == markdown(),
            "docs/summary-json.md differs from observer/src/sinks/summary_json.rs: run `cargo xtask summary-doc`"
        );
    }

    /// Every field is documented once; a summary's QPs and interfaces have every documented
    /// field of theirs and no other; an undocumented or mistyped field is found and named.
    #[test]
    fn the_documented_fields_are_the_written_ones() {
        let all = fields();
        let mut paths: Vec<&str> = all.iter().map(|f| f.path.as_str()).collect();
        paths.sort_unstable();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n, "a path documented twice");
        for f in &all {
            assert!(!f.doc.trim().is_empty(), "{}: no text", f.path);
        }
        let stats = IfaceStats {
            frames: 10,
            ..IfaceStats::default()
        };
        let snaps = vec![Snapshot {
            iface: "eth0".into(),
            time_ns: 1,
            link_speed_bps: None,
            qps: (0..20).map(|i| (key(i, 0), value(i as u64 + 3))).collect(),
            iface_stats: [stats; dir::COUNT],
            macs: Vec::new(),
            changed: None,
        }];
        let mut doc = summary_json(&snaps);
        let c = check(&doc);
        assert_eq!(c.problems, Vec::<String>::new());
        for f in all
            .iter()
            .filter(|f| f.path.starts_with("qps[].") || f.path.starts_with("interfaces[]."))
        {
            assert!(
                c.seen.contains(&f.path),
                "{} documented, not written",
                f.path
            );
        }
        doc["alerts"] = json!({"go_back_n": 2, "pfc_storm": 1});
        doc["qps"][3]["new_count"] = json!(1);
        doc["interfaces"][1]["pfc"]["xoff"] = json!(3);
        assert_eq!(
            check(&doc).problems,
            [
                "interfaces[1].pfc.xoff: 8 integers (priority 0-7) documented, found 3",
                "qps[3].new_count: not documented"
            ]
        );
    }

    /// A streamed summary (head + QPs at their place) prints exactly as the `Value` summary
    /// with a key before and after "qps"; the top QPs by packets are the table's rows.
    #[test]
    fn a_qp_written_directly_is_serde_s_compact_object() {
        for seed in 0..300u64 {
            let mut k = key(seed as u32, (seed % 3) as u8 * 3);
            k.dest_qp = (seed * 2_654_435_761 % 0x100_0000) as u32;
            let v = if seed % 7 == 0 {
                QpValue::ZERO
            } else {
                value(seed)
            };
            for iface in ["e0", "cap:if\"1\u{7}\\", "ünï"] {
                let mut direct = Vec::new();
                write_qp(&mut direct, iface, &k, &v);
                let reference = serde_json::to_vec(&QpJson {
                    iface,
                    key: &k,
                    value: &v,
                })
                .unwrap();
                assert!(
                    direct == reference,
                    "seed {seed} iface {iface:?}:\n{}\n{}",
                    String::from_utf8_lossy(&direct),
                    String::from_utf8_lossy(&reference)
                );
            }
        }
    }

    #[test]
    fn the_fast_writer_writes_the_same_bytes() {
        let snap = |name: &str, n: u32, seed: u64| Snapshot {
            iface: name.into(),
            time_ns: 1,
            link_speed_bps: None,
            qps: (0..n)
                .map(|i| (key(i, (i % 2) as u8), value(i as u64 + seed)))
                .collect(),
            iface_stats: [IfaceStats::default(); dir::COUNT],
            macs: Vec::new(),
            changed: None,
        };
        // no QP, one, a window and a bit, several windows (odd sizes: halves of unequal length)
        for (n, heads) in [
            (0u32, 0),
            (1, 1),
            (QP_WINDOW as u32 + 3, 2),
            (3 * QP_WINDOW as u32 + 1001, 3),
        ] {
            let snaps = vec![snap("e\u{1}0", n / 3, 5), snap("qps", n - n / 3, 11)];
            let mut head = Map::new();
            // keys before and after "qps", one of them a "qps" deeper down with the marker's
            // text as a value, and an interface named like the marker
            for h in 0..heads {
                head.insert(format!("a{h}"), json!({"qps": QPS_MARKER, "n": h}));
                head.insert(format!("z{h}"), json!([1, {"qps": [QPS_MARKER]}]));
            }
            head.insert(QPS_MARKER.into(), json!(QPS_MARKER));
            head.insert("latency_x".into(), json!({"latency": LATENCY_MARKER}));
            let list = QpList::new(&snaps);
            // a latency section of n / 7 keys (none for the smallest)
            use crate::pipeline::latency::{KeyLatency, LatencyQp};
            use observer_common::latency::{Outcome, Record};
            let keys: Vec<QpKey> = (0..n / 7).map(|i| key(i, 0)).collect();
            let lats: Vec<KeyLatency> = (0..n / 7)
                .map(|i| {
                    let mut l = KeyLatency::default();
                    for j in 0..(i % 5) as u64 {
                        let r =
                            Record::new(key(i, 0), 0, (j % 4) as u8, Outcome::Sample(j * 99_991));
                        l.add(&r);
                    }
                    l.add(&Record::new(key(i, 0), 0, 0, Outcome::Open));
                    l
                })
                .collect();
            let lat: Vec<LatencyQp<'_>> = keys
                .iter()
                .zip(&lats)
                .map(|(key, lat)| LatencyQp {
                    iface: "e\u{1}0",
                    key,
                    lat,
                })
                .collect();
            let doc = SummaryDoc {
                head: &head,
                qps: &list,
                latency: &lat,
            };
            let mut reference = Vec::new();
            write_summary(&mut reference, &doc).unwrap();
            let mut fast = Vec::new();
            doc.write(&mut fast).unwrap();
            assert!(
                fast == reference,
                "{n} QPs: {} against {} bytes",
                fast.len(),
                reference.len()
            );
        }
    }

    #[test]
    fn streamed_summary_and_top_qps() {
        let snap = |name: &str, n: u32| Snapshot {
            iface: name.into(),
            time_ns: 1,
            link_speed_bps: None,
            qps: (0..n)
                .rev()
                .map(|i| (key(i, 0), value(i as u64 + 7)))
                .collect(),
            iface_stats: [IfaceStats::default(); dir::COUNT],
            macs: Vec::new(),
            changed: None,
        };
        let snaps = vec![snap("b", 30), snap("a", 12)];
        let mut full = summary_json(&snaps);
        full["alerts"] = json!({"x": 1});
        full["source"] = json!("replay");
        let Value::Object(mut head) = full.clone() else {
            panic!()
        };
        head.remove("qps");
        let list = QpList::new(&snaps);
        assert_eq!(list.len(), 42);
        let doc = SummaryDoc {
            head: &head,
            qps: &list,
            latency: &[],
        };
        assert_eq!(
            serde_json::to_string_pretty(&doc).unwrap(),
            serde_json::to_string_pretty(&full).unwrap()
        );
        let mut all: Vec<&Value> = full["qps"].as_array().unwrap().iter().collect();
        all.sort_by_key(|q| std::cmp::Reverse(q["pkts"].as_u64().unwrap()));
        let top = list.top_by_pkts(5);
        assert_eq!(top.len(), 5);
        for (t, a) in top.iter().zip(&all) {
            assert_eq!(t, *a);
        }
        assert_eq!(list.top_by_pkts(100).len(), 42);

        // summary.json's form: the same JSON, one line per QP and per interface
        let mut text = Vec::new();
        write_summary(&mut text, &doc).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), full);
        let lines: Vec<&str> = text.lines().collect();
        let records = |what: &str| {
            let v = full[what].as_array().unwrap();
            assert!(!v.is_empty());
            for r in v {
                let line = format!("    {},", serde_json::to_string(r).unwrap());
                let last = line.trim_end_matches(',').to_string();
                assert!(
                    lines.contains(&line.as_str()) || lines.contains(&last.as_str()),
                    "{what}: {line}"
                );
            }
        };
        records("qps");
        records("interfaces");
        assert_eq!(lines[0], "{");
        assert_eq!(*lines.last().unwrap(), "}");
        assert!(lines.contains(&"  \"qps\": ["), "{text}");
    }
}
