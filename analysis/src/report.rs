//! The bring-up checks as SQL over the [`Engine`]'s tables, and golden-baseline comparison.
//!
//! Every figure is a query of `analysis/sql` (compiled in). A check runs its violation query
//! (`sql/checks/*.sql`: one row per interval in which the alert rule of the same name fires,
//! with the policy's thresholds) inside the two wrappers of `sql/report`: the worst subjects
//! and the worst intervals, each with the totals of the rule. [`queries`] lists every query
//! with its parameters substituted, as `report --emit-sql` writes them for other engines.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use contract::policy::PolicyConfig;
use observer_common::latency;
use observer_common::maps::{ANY, PCP_IF_TAGGED, class};
use observer_common::parse::PCP_NONE;
use serde::{Deserialize, Serialize};

use crate::engine::{Engine, EngineError, render};

/// The query templates: (name, text).
pub const CHECK_SQL: [(&str, &str); 11] = [
    ("marking", include_str!("../sql/checks/marking.sql")),
    (
        "ce_without_cnp",
        include_str!("../sql/checks/ce_without_cnp.sql"),
    ),
    ("go_back_n", include_str!("../sql/checks/go_back_n.sql")),
    (
        "pfc_wrong_priority",
        include_str!("../sql/checks/pfc_wrong_priority.sql"),
    ),
    ("pfc_storm", include_str!("../sql/checks/pfc_storm.sql")),
    ("pause", include_str!("../sql/checks/pause.sql")),
    (
        "pfc_without_ecn",
        include_str!("../sql/checks/pfc_without_ecn.sql"),
    ),
    ("mtu", include_str!("../sql/checks/mtu.sql")),
    ("map_full", include_str!("../sql/checks/map_full.sql")),
    ("host_qps", include_str!("../sql/checks/host_qps.sql")),
    (
        "latency_high",
        include_str!("../sql/checks/latency_high.sql"),
    ),
];
pub const SUBJECTS_SQL: &str = include_str!("../sql/report/subjects.sql");
pub const INTERVALS_SQL: &str = include_str!("../sql/report/intervals.sql");
pub const REPORT_SQL: [(&str, &str); 11] = [
    ("totals", include_str!("../sql/report/totals.sql")),
    ("ifaces", include_str!("../sql/report/ifaces.sql")),
    ("payloads", include_str!("../sql/report/payloads.sql")),
    ("alerts", include_str!("../sql/report/alerts.sql")),
    ("timeline", include_str!("../sql/report/timeline.sql")),
    ("host_qps", include_str!("../sql/report/host_qps.sql")),
    ("off_values", include_str!("../sql/report/off_values.sql")),
    (
        "latency_kinds",
        include_str!("../sql/report/latency_kinds.sql"),
    ),
    (
        "latency_lost",
        include_str!("../sql/report/latency_lost.sql"),
    ),
    ("latency_qps", include_str!("../sql/report/latency_qps.sql")),
    (
        "latency_intervals",
        include_str!("../sql/report/latency_intervals.sql"),
    ),
];

/// The policy's predicate over `v_hist` (hist, value) for packets whose marking it does not
/// expect: DSCP and PCP per class where set, Not-ECT where ECN-capable is expected.
pub fn marking_off(p: &PolicyConfig) -> String {
    let e = &p.expected;
    let mut terms = Vec::new();
    for c in 0..class::COUNT {
        let name = class::NAMES[c];
        if e.dscp[c] != ANY {
            terms.push(format!("(hist = 'dscp_{name}' AND value <> {})", e.dscp[c]));
        }
        match e.pcp[c] {
            ANY => {}
            PCP_NONE => terms.push(format!("(hist = 'pcp_{name}' AND value <> -1)")),
            // untagged (-1) passes
            v if v & PCP_IF_TAGGED != 0 => terms.push(format!(
                "(hist = 'pcp_{name}' AND value <> {} AND value <> -1)",
                v & 7
            )),
            v => terms.push(format!("(hist = 'pcp_{name}' AND value <> {v})")),
        }
        if e.ecn_capable[c] != 0 {
            terms.push(format!("(hist = 'ecn_{name}' AND value = 0)"));
        }
    }
    if terms.is_empty() {
        "1 = 0".into()
    } else {
        format!("({})", terms.join(" OR "))
    }
}

/// The templates' parameters for a policy and `--top`.
pub fn params(p: &PolicyConfig, top: usize, limit: usize) -> BTreeMap<&'static str, String> {
    let t = &p.thresholds;
    let mut m = BTreeMap::new();
    m.insert("marking_off", marking_off(p));
    m.insert("rdma_priority", p.expected.rdma_priority.to_string());
    m.insert("pfc_storm_xoff_per_s", t.pfc_storm_xoff_per_s.to_string());
    m.insert("ce_min", t.ce_without_cnp_min_ce.to_string());
    m.insert("pfc_min_xoff", t.pfc_without_ecn_min_xoff.to_string());
    let mtu = if p.expected_mtu > 0 {
        p.expected_mtu + 16
    } else {
        0
    };
    m.insert("mtu_payload", mtu.to_string());
    // latency_high: the first bucket index certainly at or over the threshold (past the top
    // one when the rule is off: nothing fires)
    let first = match t.latency_p99_ns {
        0 => latency::BUCKETS,
        ns => latency::first_starting_at(ns),
    };
    m.insert(
        "latency_min_index",
        (latency::MIN_INDEX as i64 + first as i64).to_string(),
    );
    m.insert(
        "latency_min_samples",
        t.latency_min_samples.max(1).to_string(),
    );
    m.insert("top", top.max(1).to_string());
    m.insert("limit", limit.max(1).to_string());
    m
}

/// Every query of a report, rendered: (file name, SQL). The check wrappers are named
/// `<check>.subjects.sql` and `<check>.intervals.sql`.
pub fn queries(
    p: &PolicyConfig,
    top: usize,
    limit: usize,
) -> Result<Vec<(String, String)>, EngineError> {
    let mut prm = params(p, top, limit);
    let mut out = Vec::new();
    for (name, text) in REPORT_SQL {
        out.push((format!("{name}.sql"), render(name, text, &prm)?));
    }
    for (name, text) in CHECK_SQL {
        let v = render(name, text, &prm)?;
        prm.insert("violations", strip_comments(&v));
        for (w, wt) in [("subjects", SUBJECTS_SQL), ("intervals", INTERVALS_SQL)] {
            out.push((format!("{name}.{w}.sql"), render(w, wt, &prm)?));
        }
        prm.remove("violations");
    }
    Ok(out)
}

/// A query without its comment lines (to nest it inside another).
fn strip_comments(q: &str) -> String {
    q.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub use crate::path::Expect;

/// A result cell.
pub type Row = BTreeMap<String, serde_json::Value>;

/// Column `k` of a query's result row. Every query selects the columns its reader asks for,
/// whatever the files hold, so a column the row does not have is a query and its reader
/// disagreeing (a renamed alias): a panic naming it that every test of the query meets, never
/// a silent zero. SQL NULL is `Value::Null`.
pub fn col<'a>(r: &'a Row, k: &str) -> &'a serde_json::Value {
    r.get(k).unwrap_or_else(|| {
        panic!(
            "the query result has no column {k:?} (columns: {:?})",
            r.keys().collect::<Vec<_>>()
        )
    })
}

/// An integer column of a result row: NULL (an empty sum) is `None`; any other type is a query
/// and its reader disagreeing ([`col`]).
pub fn col_int(r: &Row, k: &str) -> Option<i64> {
    match col(r, k) {
        serde_json::Value::Null => None,
        v => Some(
            v.as_i64()
                .unwrap_or_else(|| panic!("column {k:?} is {v}, not an integer")),
        ),
    }
}

/// A floating-point column ([`col_int`]).
pub fn col_float(r: &Row, k: &str) -> Option<f64> {
    match col(r, k) {
        serde_json::Value::Null => None,
        v => Some(
            v.as_f64()
                .unwrap_or_else(|| panic!("column {k:?} is {v}, not a number")),
        ),
    }
}

/// A string column ([`col_int`]).
pub fn col_str<'a>(r: &'a Row, k: &str) -> Option<&'a str> {
    match col(r, k) {
        serde_json::Value::Null => None,
        v => Some(
            v.as_str()
                .unwrap_or_else(|| panic!("column {k:?} is {v}, not a string")),
        ),
    }
}

/// Query results as rows of JSON values: integers as integers, floats as floats, timestamps as
/// µs, strings; null as null. Other types are cast to strings.
pub fn rows(batches: &[RecordBatch]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let schema = b.schema();
        let cols: Vec<(String, Vec<serde_json::Value>)> = schema
            .fields()
            .iter()
            .zip(b.columns())
            .map(|(f, c)| (f.name().clone(), values(c.as_ref())))
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                cols.iter()
                    .map(|(n, v)| (n.clone(), v[r].clone()))
                    .collect(),
            );
        }
    }
    out
}

fn values(c: &dyn Array) -> Vec<serde_json::Value> {
    use arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use serde_json::Value;
    let t = c.data_type();
    let to = if t.is_integer() || matches!(t, DataType::Timestamp(..)) {
        DataType::Int64
    } else if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) {
        DataType::Float64
    } else if *t == DataType::Boolean {
        DataType::Boolean
    } else {
        DataType::Utf8
    };
    let Ok(a) = cast(c, &to) else {
        return vec![Value::String(format!("({t})")); c.len()];
    };
    let any = a.as_any();
    (0..a.len())
        .map(|i| {
            if a.is_null(i) {
                return Value::Null;
            }
            if let Some(x) = any.downcast_ref::<Int64Array>() {
                Value::from(x.value(i))
            } else if let Some(x) = any.downcast_ref::<Float64Array>() {
                serde_json::Number::from_f64(x.value(i)).map_or(Value::Null, Value::Number)
            } else if let Some(x) = any.downcast_ref::<BooleanArray>() {
                Value::Bool(x.value(i))
            } else if let Some(x) = any.downcast_ref::<StringArray>() {
                Value::String(x.value(i).to_string())
            } else {
                Value::String(format!("({t})"))
            }
        })
        .collect()
}

fn int(r: &Row, k: &str) -> i64 {
    col_int(r, k).unwrap_or(0)
}
fn opt_int(r: &Row, k: &str) -> Option<i64> {
    col_int(r, k)
}
fn string(r: &Row, k: &str) -> Option<String> {
    col_str(r, k).map(str::to_string)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    Pass,
    Info,
    Warn,
    Fail,
}

/// Who broke a rule: a QP key, an interface (direction) or an IP pair.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Subject {
    pub part: String,
    pub host: Option<String>,
    pub iface: Option<String>,
    pub dir: Option<String>,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub qp: Option<i64>,
    /// Intervals in which the rule fired for this subject.
    pub violations: i64,
    /// The rule's figure summed over those intervals, and its largest value in one.
    pub figure: i64,
    pub peak: i64,
    pub context: i64,
    pub first_us: i64,
    pub last_us: i64,
    /// Marking parts: the values off the policy its packets carried, most packets first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<OffValue>,
}

/// A marking value off the policy (a DSCP, a PCP with -1 untagged, an ECN codepoint): its
/// packets and the start of the first interval with one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OffValue {
    pub value: i64,
    pub pkts: i64,
    pub first_us: i64,
}

impl OffValue {
    /// `DSCP 0 (bleached) x375 from 2026-11-20T10:00:00Z`, the field's name taken from `part`.
    pub fn text(&self, part: &str) -> String {
        format!(
            "{}{} x{} from {}",
            value_words(part, self.value),
            if self.value_note(part).is_empty() {
                String::new()
            } else {
                format!(" ({})", self.value_note(part))
            },
            self.pkts,
            crate::time::fmt_us(self.first_us)
        )
    }

    /// What a value usually means: who sets DSCP 0 or 46, an untagged frame, Not-ECT.
    fn value_note(&self, part: &str) -> &'static str {
        match (part.split('_').next(), self.value) {
            (Some("dscp"), 0) => "bleached to best effort",
            (Some("dscp"), 46) => "EF, a voice class",
            (Some("dscp"), 8) => "CS1, scavenger",
            (Some("dscp"), 24) => "CS3",
            (Some("dscp"), 26) => "AF31",
            (Some("dscp"), 48) => "CS6",
            (Some("pcp"), -1) => "untagged",
            (Some("pcp"), 0) => "best-effort priority",
            (Some("ecn"), 0) => "Not-ECT",
            _ => "",
        }
    }
}

/// `DSCP 0`, `PCP 3`, `ECN 0` for a value of `part`'s field.
fn value_words(part: &str, v: i64) -> String {
    match part.split('_').next() {
        Some("pcp") if v < 0 => "PCP none".into(),
        Some(f) => format!("{} {v}", f.to_uppercase()),
        None => v.to_string(),
    }
}

impl Subject {
    /// `; DSCP 0 (bleached to best effort) x375 from ...`, the first three values; empty when
    /// the subject has none.
    pub fn values_text(&self) -> String {
        if self.values.is_empty() {
            return String::new();
        }
        let shown: Vec<String> = self
            .values
            .iter()
            .take(3)
            .map(|v| v.text(&self.part))
            .collect();
        let more = self.values.len().saturating_sub(3);
        format!(
            "; {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    }

    /// `h1/eth0/egress 10.0.0.1 -> 10.0.0.2 qp 0x000201`, or the parts it has.
    pub fn name(&self) -> String {
        key_name(
            [&self.host, &self.iface, &self.dir],
            [&self.src, &self.dst],
            self.qp,
        )
    }
}

/// A subject's or key's name from its parts: `h1/eth0/egress 10.0.0.1 -> 10.0.0.2 qp
/// 0x000201`, the parts it lacks left out.
fn key_name(place: [&Option<String>; 3], pair: [&Option<String>; 2], qp: Option<i64>) -> String {
    let mut s = place
        .iter()
        .filter_map(|x| x.as_deref())
        .collect::<Vec<_>>()
        .join("/");
    match pair {
        [Some(a), Some(b)] => s += &format!(" {a} -> {b}"),
        [Some(a), None] => s += &format!(" {a}"),
        _ => {}
    }
    if let Some(q) = qp {
        s += &format!(" qp 0x{q:06x}");
    }
    s
}

/// An interval (over every host) in which a rule fired.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub part: String,
    pub start_us: i64,
    pub end_us: i64,
    pub subjects: i64,
    pub figure: i64,
}

/// One rule's (part's) totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Part {
    pub part: String,
    pub subjects: i64,
    pub violations: i64,
    pub intervals: i64,
    pub figure: i64,
    pub peak: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    pub parts: Vec<Part>,
    pub worst: Vec<Subject>,
    pub intervals: Vec<Interval>,
}

/// Fabric-level figures: what a baseline records and a comparison checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub qps: u64,
    pub data_pkts: i64,
    pub cnp_pkts: i64,
    pub ce: i64,
    pub not_ect_data: i64,
    pub data_off_dscp: i64,
    pub cnp_off_dscp: i64,
    pub psn_gaps: i64,
    pub psn_missing: i64,
    pub psn_retrans: i64,
    pub naks: i64,
    pub rnr_naks: i64,
    /// XOFF frames per priority, all interfaces.
    pub pfc_xoff: [i64; 8],
    /// The policy's RDMA priority (3 in baselines written before it was recorded).
    #[serde(default = "rdma_priority_default")]
    pub rdma_priority: usize,
    pub pause_frames: i64,
    pub max_xoff_per_s: f64,
    pub excluded: BTreeMap<String, i64>,
    /// Largest UDP payload per QP -> number of QPs.
    pub max_payloads: BTreeMap<i32, u64>,
    pub alerts: BTreeMap<String, i64>,
    /// The host QPs the trees' inventory saw (host, device, QP number; 0 in trees without it
    /// and in baselines written before it was recorded).
    #[serde(default)]
    pub host_qps: u64,
    /// Latency samples of every kind (0 in trees replayed without `--latency` and in baselines
    /// written before it was recorded).
    #[serde(default)]
    pub latency_samples: i64,
    /// The p99 of every ACK round trip and READ latency of the trees (a bucket's upper edge,
    /// µs; 0 without samples, in trees replayed without `--latency` and in older baselines).
    #[serde(default)]
    pub latency_ack_p99_us: f64,
    #[serde(default)]
    pub latency_read_p99_us: f64,
}

fn rdma_priority_default() -> usize {
    3
}

/// A whole report: figures, checks, the policy it was judged by.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub figures: Figures,
    pub checks: Vec<Check>,
    /// `policy-<host>.toml` of the trees, `--policy FILE` or `--profile NAME`.
    pub policy_source: String,
    pub policy: String,
    pub files: usize,
    pub flow_rows: i64,
    pub intervals: i64,
    pub first_us: Option<i64>,
    pub last_us: Option<i64>,
    /// `report --qp`: the selected keys' rows, interval by interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<Row>>,
    /// The passive latency per kind and the worst QPs by p99 (empty without samples).
    pub latency: LatencyReport,
}

/// The latency of the trees' requester keys (docs/latency.md): per kind the distribution of
/// every key and interval summed, and the worst keys by p99 over the run and in one interval.
/// Quantiles are bucket upper edges (the true value is at most that, within 19 %).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencyReport {
    pub kinds: Vec<LatencyKind>,
    /// ACK and READ measurements excluded by Karn's rule, and not started for a full ring.
    pub ambiguous: i64,
    pub ring_full: i64,
    /// Per kind, the keys with the highest p99 over the run (those with at least the policy's
    /// `latency_min_samples` first).
    pub worst_qps: Vec<LatencyKey>,
    /// Per kind, the (key, interval) pairs with the highest p99 in the interval, among those
    /// with at least `latency_min_samples`.
    pub worst_intervals: Vec<LatencyKey>,
}

/// One kind's distribution.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyKind {
    pub kind: String,
    pub samples: i64,
    /// Measurements that ended unanswered (timed out, a new incarnation, passed over).
    pub unmatched: i64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    /// (bucket index, samples) in ascending index, the empty buckets left out.
    pub buckets: Vec<(i64, i64)>,
}

/// A requester key's latency of one kind over the run (`t0` / `t1`: its first and last
/// interval) or in one interval.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyKey {
    pub kind: String,
    pub host: Option<String>,
    pub iface: Option<String>,
    pub dir: Option<String>,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub qp: Option<i64>,
    pub t0_us: i64,
    pub t1_us: i64,
    pub samples: i64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    /// The keys ranked (over the run: every key with a sample of the kind; 0 per interval).
    #[serde(skip_serializing_if = "is_zero")]
    pub keys: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The upper edge in nanoseconds of bucket index `v` (a query's quantile column).
fn edge_ns(v: Option<i64>) -> Option<u64> {
    let i = i16::try_from(v?).ok()?;
    latency::position_of(i).map(|b| latency::UPPER_NS[b])
}

impl LatencyKey {
    fn of(r: &Row, over_run: bool) -> LatencyKey {
        let (t0, t1) = if over_run {
            ("first_t0", "last_t1")
        } else {
            ("t0", "t1")
        };
        LatencyKey {
            kind: string(r, "kind").unwrap_or_default(),
            host: string(r, "host"),
            iface: string(r, "iface"),
            dir: string(r, "dir"),
            src: string(r, "src"),
            dst: string(r, "dst"),
            qp: opt_int(r, "qp"),
            t0_us: int(r, t0),
            t1_us: int(r, t1),
            samples: int(r, "samples"),
            p50_ns: edge_ns(opt_int(r, "p50")),
            p99_ns: edge_ns(opt_int(r, "p99")),
            p999_ns: edge_ns(opt_int(r, "p999")),
            keys: if over_run { int(r, "keys") } else { 0 },
        }
    }

    /// `h1/eth0/egress 10.0.0.1 -> 10.0.0.2 qp 0x000201`, as a check's subject names it.
    pub fn name(&self) -> String {
        key_name(
            [&self.host, &self.iface, &self.dir],
            [&self.src, &self.dst],
            self.qp,
        )
    }
}

/// A latency in nanoseconds as read: `850 ns`, `12.3 µs`, `4.57 ms`, `1.19 s`; `-` for none.
pub fn fmt_ns(v: Option<u64>) -> String {
    let Some(v) = v else { return "-".into() };
    let x = v as f64;
    if v < 1_000 {
        format!("{v} ns")
    } else if v < 1_000_000 {
        format!("{:.1} µs", x / 1e3)
    } else if v < 1_000_000_000 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.2} s", x / 1e9)
    }
}

/// The latency section from its four queries.
fn latency_report(
    kinds: &[Row],
    lost: Option<&Row>,
    qps: &[Row],
    intervals: &[Row],
) -> LatencyReport {
    let mut by_kind: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for r in kinds {
        by_kind
            .entry(string(r, "kind").unwrap_or_default())
            .or_default()
            .push((int(r, "value"), int(r, "samples")));
    }
    let lost_of = |k: &str| lost.map_or(0, |r| int(r, &format!("{k}_unmatched")));
    let mut out = LatencyReport {
        ambiguous: lost.map_or(0, |r| int(r, "ambiguous")),
        ring_full: lost.map_or(0, |r| int(r, "ring_full")),
        ..LatencyReport::default()
    };
    // every kind in its documented order, those without a sample nor a lost measurement left out
    for k in latency::kind::NAMES {
        let buckets = by_kind.remove(k).unwrap_or_default();
        let unmatched = lost_of(k);
        if buckets.is_empty() && unmatched == 0 {
            continue;
        }
        let pos: Vec<(usize, u64)> = buckets
            .iter()
            .filter_map(|&(i, n)| {
                let b = latency::position_of(i16::try_from(i).ok()?)?;
                Some((b, n.max(0) as u64))
            })
            .collect();
        let q = |num, den| latency::quantile_upper_ns(pos.iter().copied(), num, den);
        out.kinds.push(LatencyKind {
            kind: k.to_string(),
            samples: buckets.iter().map(|b| b.1).sum(),
            unmatched,
            p50_ns: q(1, 2),
            p99_ns: q(99, 100),
            p999_ns: q(999, 1000),
            buckets,
        });
    }
    out.worst_qps = qps.iter().map(|r| LatencyKey::of(r, true)).collect();
    out.worst_intervals = intervals.iter().map(|r| LatencyKey::of(r, false)).collect();
    out
}

/// Which check a part belongs to, its verdict when it fires, and its words.
struct CheckDef {
    name: &'static str,
    query: &'static str,
    parts: &'static [&'static str],
    fires: Verdict,
}

const CHECKS: [CheckDef; 15] = [
    CheckDef {
        name: "data marking",
        query: "marking",
        parts: &["dscp_data", "pcp_data"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "ACK marking",
        query: "marking",
        parts: &["dscp_ack", "pcp_ack", "ecn_ack"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "CNP marking",
        query: "marking",
        parts: &["dscp_cnp", "pcp_cnp", "ecn_cnp"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "ECN-capable data",
        query: "marking",
        parts: &["ecn_data"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "CE answered by CNPs",
        query: "ce_without_cnp",
        parts: &["ce_without_cnp"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "no go-back-N",
        query: "go_back_n",
        parts: &["psn_gap", "go_back_n"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "ICRC intact",
        query: "go_back_n",
        parts: &["icrc_bad"],
        fires: Verdict::Warn,
    },
    CheckDef {
        name: "PFC only on the RDMA priority",
        query: "pfc_wrong_priority",
        parts: &[],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "no PFC storm",
        query: "pfc_storm",
        parts: &[],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "no 802.3x PAUSE",
        query: "pause",
        parts: &["pause_802_3x"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "PFC with ECN",
        query: "pfc_without_ecn",
        parts: &["pfc_without_ecn"],
        fires: Verdict::Warn,
    },
    CheckDef {
        name: "path MTU",
        query: "mtu",
        parts: &["mtu_below_expected"],
        fires: Verdict::Warn,
    },
    CheckDef {
        name: "host QP marking",
        query: "host_qps",
        parts: &["qp_off_policy", "qp_lossy", "owner_off_policy"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "host QPs not in error",
        query: "host_qps",
        parts: &["qp_error"],
        fires: Verdict::Fail,
    },
    CheckDef {
        name: "QP latency",
        query: "latency_high",
        parts: &["latency_ack", "latency_read"],
        fires: Verdict::Warn,
    },
];

/// Rule names in the alerts of a part (for the text).
fn part_words(part: &str) -> String {
    match part {
        "dscp_data" | "dscp_ack" | "dscp_cnp" => {
            format!("{} packets off the policy's DSCP", &part[5..])
        }
        "pcp_data" | "pcp_ack" | "pcp_cnp" => {
            format!("{} packets off the policy's PCP", &part[4..])
        }
        "ecn_data" | "ecn_ack" | "ecn_cnp" => format!("Not-ECT {} packets", &part[4..]),
        "psn_gap" => "PSN gaps".into(),
        "go_back_n" => "retransmitted PSNs".into(),
        "icrc_bad" => "packets with a bad ICRC".into(),
        "ce_without_cnp" => "CE-marked data packets without a CNP back".into(),
        "pause_802_3x" => "802.3x PAUSE frames".into(),
        "pfc_without_ecn" => "XOFF frames with no CE mark".into(),
        "mtu_below_expected" => "FIRST/MIDDLE packets below the expected MTU".into(),
        p if p.starts_with("priority ") => format!("XOFF+XON on {p}"),
        "qp_off_policy" => "packets sent by host QPs off the policy's marking".into(),
        "qp_lossy" => "packets sent by host QPs into a priority without PFC".into(),
        "owner_off_policy" => "host QPs off the policy or lossy, per owner and read".into(),
        "qp_error" => "reads of host QPs in ERR or SQE".into(),
        "latency_ack" => "ACK round-trip samples at or over the p99 threshold".into(),
        "latency_read" => "READ latency samples at or over the p99 threshold".into(),
        p => p.into(),
    }
}

/// A check query's results: its parts' totals, worst subjects and worst intervals.
type CheckRows = (Vec<Part>, Vec<Subject>, Vec<Interval>);

/// Runs a check's two wrapper queries.
fn run_check(
    eng: &Engine,
    query: &str,
    prm: &mut BTreeMap<&'static str, String>,
) -> Result<CheckRows, EngineError> {
    let (_, text) = CHECK_SQL
        .iter()
        .find(|(n, _)| *n == query)
        .expect("a check query");
    let v = render(query, text, prm)?;
    prm.insert("violations", strip_comments(&v));
    let subj = render("subjects", SUBJECTS_SQL, prm).and_then(|q| eng.run(&q));
    let ivs = render("intervals", INTERVALS_SQL, prm).and_then(|q| eng.run(&q));
    prm.remove("violations");
    let (subj, ivs) = (rows(&subj?), rows(&ivs?));
    let mut parts: BTreeMap<String, Part> = BTreeMap::new();
    let mut worst = Vec::new();
    for r in &subj {
        let part = string(r, "part").unwrap_or_default();
        let p = parts.entry(part.clone()).or_default();
        p.part = part.clone();
        p.subjects = int(r, "part_subjects");
        p.violations = int(r, "part_violations");
        p.figure = int(r, "part_figure");
        p.peak = int(r, "part_peak");
        worst.push(Subject {
            part,
            host: string(r, "host"),
            iface: string(r, "iface"),
            dir: string(r, "dir"),
            src: string(r, "src"),
            dst: string(r, "dst"),
            qp: opt_int(r, "qp"),
            violations: int(r, "violations"),
            figure: int(r, "figure"),
            peak: int(r, "peak"),
            context: int(r, "context"),
            first_us: int(r, "first_t0"),
            last_us: int(r, "last_t1"),
            values: Vec::new(),
        });
    }
    let mut intervals = Vec::new();
    for r in &ivs {
        let part = string(r, "part").unwrap_or_default();
        if let Some(p) = parts.get_mut(&part) {
            p.intervals = int(r, "part_intervals");
        }
        intervals.push(Interval {
            part,
            start_us: int(r, "t0"),
            end_us: int(r, "t1"),
            subjects: int(r, "subjects"),
            figure: int(r, "figure"),
        });
    }
    Ok((parts.into_values().collect(), worst, intervals))
}

/// The whole report over the engine's (filtered) tables.
pub fn report(
    eng: &Engine,
    policy: &PolicyConfig,
    policy_source: &str,
    top: usize,
    timeline_limit: Option<usize>,
) -> Result<Report, EngineError> {
    let mut prm = params(policy, top, timeline_limit.unwrap_or(1));
    let one = |name: &str, prm: &BTreeMap<&'static str, String>| -> Result<Vec<Row>, EngineError> {
        let (_, t) = REPORT_SQL
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a report query");
        Ok(rows(&eng.run(&render(name, t, prm)?)?))
    };
    let totals = one("totals", &prm)?.pop().unwrap_or_default();
    let ifaces = one("ifaces", &prm)?.pop().unwrap_or_default();
    let mut f = Figures {
        qps: int(&totals, "qps") as u64,
        data_pkts: int(&totals, "data_pkts"),
        cnp_pkts: int(&totals, "cnp_pkts"),
        ce: int(&totals, "ce"),
        not_ect_data: int(&totals, "not_ect_data"),
        psn_gaps: int(&totals, "psn_gaps"),
        psn_missing: int(&totals, "psn_missing"),
        psn_retrans: int(&totals, "psn_retrans"),
        naks: int(&totals, "naks"),
        rnr_naks: int(&totals, "rnr_naks"),
        rdma_priority: policy.expected.rdma_priority as usize,
        pause_frames: int(&ifaces, "pause_frames"),
        ..Figures::default()
    };
    for p in 0..8 {
        f.pfc_xoff[p] = int(&ifaces, &format!("xoff_p{p}"));
        f.max_xoff_per_s = f
            .max_xoff_per_s
            .max(int(&ifaces, &format!("peak_p{p}")) as f64);
    }
    for (k, v) in &ifaces {
        if let (Some(r), Some(n)) = (k.strip_prefix("excluded_"), v.as_i64()) {
            f.excluded.insert(r.to_string(), n);
        }
    }
    for r in one("payloads", &prm)? {
        f.max_payloads
            .insert(int(&r, "max_payload") as i32, int(&r, "qps") as u64);
    }
    for r in one("alerts", &prm)? {
        f.alerts
            .insert(string(&r, "rule").unwrap_or_default(), int(&r, "alerts"));
    }
    if let Some(r) = one("host_qps", &prm)?.pop() {
        f.host_qps = int(&r, "host_qps") as u64;
    }
    let lat = latency_report(
        &one("latency_kinds", &prm)?,
        one("latency_lost", &prm)?.first(),
        &one("latency_qps", &prm)?,
        &one("latency_intervals", &prm)?,
    );
    f.latency_samples = lat.kinds.iter().map(|k| k.samples).sum();
    let p99_us = |k: &str| {
        lat.kinds
            .iter()
            .find(|x| x.kind == k)
            .and_then(|x| x.p99_ns)
            .map_or(0.0, |ns| ns as f64 / 1e3)
    };
    f.latency_ack_p99_us = p99_us("ack");
    f.latency_read_p99_us = p99_us("read");
    let mut ran: BTreeMap<&str, CheckRows> = BTreeMap::new();
    let mut checks = Vec::new();
    for d in &CHECKS {
        if !ran.contains_key(d.query) {
            ran.insert(d.query, run_check(eng, d.query, &mut prm)?);
        }
        let (parts, worst, ivs) = &ran[d.query];
        let mine = |p: &str| d.parts.is_empty() || d.parts.contains(&p);
        let c = Check {
            name: d.name,
            verdict: Verdict::Pass,
            detail: String::new(),
            parts: parts.iter().filter(|p| mine(&p.part)).cloned().collect(),
            worst: worst.iter().filter(|s| mine(&s.part)).cloned().collect(),
            intervals: ivs.iter().filter(|i| mine(&i.part)).cloned().collect(),
        };
        checks.push(judge(c, d, &f, policy));
    }
    attach_off_values(&mut checks, &one("off_values", &prm)?);
    let (_, worst_mf, _) = run_check(eng, "map_full", &mut prm)?;
    checks.push(qp_table_check(worst_mf, &f));
    f.data_off_dscp = part_figure(&checks, "dscp_data");
    f.cnp_off_dscp = part_figure(&checks, "dscp_cnp");
    checks.push(exclusions(&f));
    let timeline = match timeline_limit {
        Some(_) => Some(
            one("timeline", &prm)?
                .into_iter()
                .map(|mut r| {
                    // the ACK p99's bucket as its upper edge, µs (null without samples)
                    let us = edge_ns(opt_int(&r, "ack_p99_index")).map(|ns| ns as f64 / 1e3);
                    r.insert("ack_p99_us".into(), serde_json::json!(us));
                    r
                })
                .collect(),
        ),
        None => None,
    };
    let ifc = int(&ifaces, "intervals");
    Ok(Report {
        figures: f,
        checks,
        policy_source: policy_source.to_string(),
        policy: policy.to_toml(),
        files: eng.file_count(),
        flow_rows: int(&totals, "flow_rows"),
        intervals: ifc,
        first_us: opt_int(&totals, "first_t0"),
        last_us: opt_int(&totals, "last_t1"),
        timeline,
        latency: lat,
    })
}

/// The off-policy values of the marking parts: onto each worst subject its own (most packets
/// first), and onto each part's text the values over all its subjects.
fn attach_off_values(checks: &mut [Check], rows: &[Row]) {
    type Key = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i64>,
    );
    let mut per: BTreeMap<Key, Vec<OffValue>> = BTreeMap::new();
    // part -> value -> (packets, first)
    let mut totals: BTreeMap<String, BTreeMap<i64, (i64, i64)>> = BTreeMap::new();
    for r in rows {
        let part = string(r, "part").unwrap_or_default();
        let v = OffValue {
            value: int(r, "value"),
            pkts: int(r, "pkts"),
            first_us: int(r, "first_t0"),
        };
        let t = totals
            .entry(part.clone())
            .or_default()
            .entry(v.value)
            .or_insert((0, i64::MAX));
        t.0 += v.pkts;
        t.1 = t.1.min(v.first_us);
        per.entry((
            part,
            string(r, "host"),
            string(r, "iface"),
            string(r, "dir"),
            string(r, "src"),
            string(r, "dst"),
            opt_int(r, "qp"),
        ))
        .or_default()
        .push(v);
    }
    for c in checks.iter_mut() {
        for w in &mut c.worst {
            let k = (
                w.part.clone(),
                w.host.clone(),
                w.iface.clone(),
                w.dir.clone(),
                w.src.clone(),
                w.dst.clone(),
                w.qp,
            );
            if let Some(v) = per.get(&k) {
                w.values = v.clone();
            }
        }
        if c.verdict == Verdict::Pass {
            continue;
        }
        let mut words = Vec::new();
        for p in &c.parts {
            let Some(t) = totals.get(&p.part) else {
                continue;
            };
            let mut vals: Vec<OffValue> = t
                .iter()
                .map(|(&value, &(pkts, first_us))| OffValue {
                    value,
                    pkts,
                    first_us,
                })
                .collect();
            vals.sort_by(|a, b| b.pkts.cmp(&a.pkts).then(a.value.cmp(&b.value)));
            let shown: Vec<String> = vals.iter().take(4).map(|v| v.text(&p.part)).collect();
            let more = vals.len().saturating_sub(4);
            words.push(format!(
                "{} carried {}{}",
                p.part,
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more values")
                } else {
                    String::new()
                }
            ));
        }
        if !words.is_empty() {
            c.detail = format!("{}; {}", c.detail, words.join("; "));
        }
    }
}

/// `dirs` opened without filters (default engine options) and reported with `policy`, top 5.
pub fn analyze(dirs: &[PathBuf], policy: &PolicyConfig) -> Result<Report, EngineError> {
    let eng = Engine::open(
        dirs,
        &crate::engine::Filters::default(),
        &crate::engine::Options::default(),
    )?;
    report(&eng, policy, "given", 5, None)
}

fn part_figure(checks: &[Check], part: &str) -> i64 {
    checks
        .iter()
        .flat_map(|c| &c.parts)
        .filter(|p| p.part == part)
        .map(|p| p.figure)
        .sum()
}

/// The verdict and the one-line detail of a check.
fn judge(mut c: Check, d: &CheckDef, f: &Figures, p: &PolicyConfig) -> Check {
    let fired = c.parts.iter().any(|x| x.violations > 0);
    c.verdict = if fired { d.fires } else { Verdict::Pass };
    let parts: Vec<String> = c
        .parts
        .iter()
        .map(|x| {
            format!(
                "{} {} in {} interval(s) of {} subject(s)",
                x.figure,
                part_words(&x.part),
                x.intervals,
                x.subjects
            )
        })
        .collect();
    let e = &p.expected;
    c.detail = match d.name {
        "CE answered by CNPs" if !fired && f.ce == 0 => {
            c.verdict = Verdict::Info;
            "no CE-marked packet: ECN never acted".into()
        }
        "host QP marking" | "host QPs not in error" if !fired && f.host_qps == 0 => {
            c.verdict = Verdict::Info;
            "no host QP inventory in these trees (read live on hosts with an RDMA subsystem; \
             docs/qps.md)"
                .into()
        }
        "QP latency" if !fired && f.latency_samples == 0 => {
            c.verdict = Verdict::Info;
            "no latency samples in these trees (replay --latency measures them; docs/latency.md)"
                .into()
        }
        _ if fired => parts.join("; "),
        "data marking" => format!(
            "{} data packets, DSCP {} as expected",
            f.data_pkts,
            want(e.dscp[class::DATA])
        ),
        "CNP marking" => format!(
            "{} CNPs, DSCP {} as expected",
            f.cnp_pkts,
            want(e.dscp[class::CNP])
        ),
        "ACK marking" => format!("ACKs at DSCP {} as expected", want(e.dscp[class::ACK])),
        "ECN-capable data" if e.ecn_capable[class::DATA] == 0 => {
            "not checked (policy: data ecn = \"any\")".into()
        }
        "ECN-capable data" => "every data packet ECN-capable".into(),
        "CE answered by CNPs" => format!(
            "{} CE-marked packets, {} CNPs; every pair with at least {} CE in an interval got CNPs back",
            f.ce, f.cnp_pkts, p.thresholds.ce_without_cnp_min_ce
        ),
        "no go-back-N" => format!(
            "{} NAKs, {} RNR NAKs, no PSN gap or retransmission",
            f.naks, f.rnr_naks
        ),
        "ICRC intact" => {
            "no packet with a bad ICRC (replay verifies ICRCs; the live kernel programs do not)"
                .into()
        }
        "PFC only on the RDMA priority" => format!(
            "XOFF per priority {:?} (RDMA priority {})",
            f.pfc_xoff, e.rdma_priority
        ),
        "no PFC storm" => format!(
            "largest XOFF count in one second {:.0} (threshold {}/s)",
            f.max_xoff_per_s, p.thresholds.pfc_storm_xoff_per_s
        ),
        "no 802.3x PAUSE" => "no PAUSE frame".into(),
        "host QP marking" => format!(
            "{} host QPs, none off the policy or lossy (QPs of unknown marking are not judged)",
            f.host_qps
        ),
        "host QPs not in error" => format!("{} host QPs, none in ERR or SQE", f.host_qps),
        "PFC with ECN" => "no interval with XOFF and RoCE but no CE mark".into(),
        "QP latency" if p.thresholds.latency_p99_ns == 0 => {
            "not checked (policy: latency_p99_us = 0)".into()
        }
        "QP latency" => format!(
            "{} latency samples; no key's ACK round trip or READ latency p99 in an interval at \
             or over {} (with at least {} samples)",
            f.latency_samples,
            fmt_ns(Some(p.thresholds.latency_p99_ns)),
            p.thresholds.latency_min_samples
        ),
        "path MTU" if p.expected_mtu == 0 => "not checked".into(),
        "path MTU" => format!(
            "no multi-packet message below RoCE MTU {} (largest UDP payload per QP -> QPs: {:?})",
            p.expected_mtu, f.max_payloads
        ),
        _ => String::new(),
    };
    c
}

fn want(v: u8) -> String {
    if v == ANY {
        "any".into()
    } else {
        v.to_string()
    }
}

/// "QP table": untracked keys (warn) and lost events (info).
fn qp_table_check(worst: Vec<Subject>, _f: &Figures) -> Check {
    let full: i64 = worst
        .iter()
        .filter(|s| s.part == "qp_map_full")
        .map(|s| s.figure)
        .sum();
    let lost: i64 = worst
        .iter()
        .filter(|s| s.part == "events_lost")
        .map(|s| s.figure)
        .sum();
    let verdict = if full > 0 {
        Verdict::Warn
    } else if lost > 0 {
        Verdict::Info
    } else {
        Verdict::Pass
    };
    Check {
        name: "QP table",
        verdict,
        detail: format!(
            "{full} RoCE packets of keys that could not be tracked (shown worst-first below), {lost} events lost"
        ),
        parts: Vec::new(),
        worst,
        intervals: Vec::new(),
    }
}

/// The "exclusions" check.
fn exclusions(f: &Figures) -> Check {
    let nz: BTreeMap<_, _> = f.excluded.iter().filter(|(_, n)| **n > 0).collect();
    Check {
        name: "exclusions",
        verdict: Verdict::Info,
        detail: if nz.is_empty() {
            "no frame excluded".into()
        } else {
            format!("frames excluded by reason: {nz:?}")
        },
        parts: Vec::new(),
        worst: Vec::new(),
        intervals: Vec::new(),
    }
}

/// The report as text: one line per check, then its worst subjects and intervals.
pub fn render_text(r: &Report, top: usize) -> String {
    use crate::time::fmt_us;
    use std::fmt::Write;
    let mut s = String::new();
    let f = &r.figures;
    let _ = writeln!(
        s,
        "{} QP keys, {} data packets, {} flow rows in {} files, {} .. {}",
        f.qps,
        f.data_pkts,
        r.flow_rows,
        r.files,
        r.first_us.map(fmt_us).unwrap_or("-".into()),
        r.last_us.map(fmt_us).unwrap_or("-".into()),
    );
    let _ = writeln!(s, "policy: {}", r.policy_source);
    for c in &r.checks {
        let _ = writeln!(
            s,
            "{:<5} {:<30} {}",
            format!("{:?}", c.verdict).to_uppercase(),
            c.name,
            c.detail
        );
        if c.verdict == Verdict::Pass {
            continue;
        }
        for w in c.worst.iter().take(top) {
            let _ = writeln!(
                s,
                "        {:<20} {}: {} in {} interval(s) (peak {}), {} .. {}{}",
                w.part,
                w.name(),
                w.figure,
                w.violations,
                w.peak,
                fmt_us(w.first_us),
                fmt_us(w.last_us),
                w.values_text()
            );
        }
        for i in c.intervals.iter().take(top) {
            let _ = writeln!(
                s,
                "        {:<20} interval {} .. {}: {} from {} subject(s)",
                i.part,
                fmt_us(i.start_us),
                fmt_us(i.end_us),
                i.figure,
                i.subjects
            );
        }
    }
    latency_text(&mut s, &r.latency, top);
    if !f.alerts.is_empty() {
        let _ = writeln!(s, "alerts: {:?}", f.alerts);
    }
    if let Some(t) = &r.timeline {
        let _ = writeln!(s, "\ntimeline ({} rows):", t.len());
        let _ = writeln!(
            s,
            "{:<24} {:<40} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>10}",
            "interval start",
            "key",
            "pkts",
            "data",
            "ce",
            "cnp",
            "gaps",
            "retr",
            "naks",
            "off-pol",
            "ack p99"
        );
        for row in t {
            let key = format!(
                "{}/{}/{} {}->{} 0x{:06x}",
                string(row, "host").unwrap_or_default(),
                string(row, "iface").unwrap_or_default(),
                string(row, "dir").unwrap_or_default(),
                string(row, "src").unwrap_or_default(),
                string(row, "dst").unwrap_or_default(),
                int(row, "qp")
            );
            let p99 = col_float(row, "ack_p99_us").map(|us| (us * 1e3).round() as u64);
            let _ = writeln!(
                s,
                "{:<24} {:<40} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>10}",
                fmt_us(int(row, "t0")),
                key,
                int(row, "pkts"),
                int(row, "data_pkts"),
                int(row, "ce"),
                int(row, "cnp"),
                int(row, "psn_gaps"),
                int(row, "psn_retrans"),
                int(row, "naks"),
                int(row, "off_policy"),
                fmt_ns(p99)
            );
        }
    }
    s
}

/// The latency section of the text report: per kind its distribution's quantiles, then the
/// `top` worst keys by p99 over the run and in one interval. Nothing without samples.
fn latency_text(s: &mut String, l: &LatencyReport, top: usize) {
    use crate::time::fmt_us;
    use std::fmt::Write;
    if l.kinds.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "latency (bucket upper edges; {} excluded by Karn's rule, {} not started: ring full):",
        l.ambiguous, l.ring_full
    );
    for k in &l.kinds {
        let _ = writeln!(
            s,
            "      {:<10} {} samples, p50 {}, p99 {}, p999 {}; {} unmatched",
            k.kind,
            k.samples,
            fmt_ns(k.p50_ns),
            fmt_ns(k.p99_ns),
            fmt_ns(k.p999_ns),
            k.unmatched
        );
        for w in l.worst_qps.iter().filter(|w| w.kind == k.kind).take(top) {
            let _ = writeln!(
                s,
                "        worst QP   {}: p99 {}, p50 {}, p999 {} over {} samples, {} .. {}",
                w.name(),
                fmt_ns(w.p99_ns),
                fmt_ns(w.p50_ns),
                fmt_ns(w.p999_ns),
                w.samples,
                fmt_us(w.t0_us),
                fmt_us(w.t1_us)
            );
        }
        for w in l
            .worst_intervals
            .iter()
            .filter(|w| w.kind == k.kind)
            .take(top)
        {
            let _ = writeln!(
                s,
                "        interval   {} .. {} {}: p99 {}, p50 {} over {} samples",
                fmt_us(w.t0_us),
                fmt_us(w.t1_us),
                w.name(),
                fmt_ns(w.p99_ns),
                fmt_ns(w.p50_ns),
                w.samples
            );
        }
    }
}

/// One difference between a baseline and a run.
#[derive(Clone, Debug, Serialize)]
pub struct Regression {
    pub figure: &'static str,
    pub baseline: f64,
    pub now: f64,
}

/// Figures that must not get worse, as rates per million data packets (or absolute for PFC).
pub fn rates(f: &Figures) -> Vec<(&'static str, f64)> {
    let per_m = |n: i64| {
        if f.data_pkts == 0 {
            0.0
        } else {
            n as f64 * 1e6 / f.data_pkts as f64
        }
    };
    vec![
        ("data off-DSCP per M", per_m(f.data_off_dscp)),
        ("CNP off-DSCP", f.cnp_off_dscp as f64),
        ("Not-ECT data per M", per_m(f.not_ect_data)),
        ("PSN gaps per M", per_m(f.psn_gaps)),
        ("retransmits per M", per_m(f.psn_retrans)),
        ("NAKs per M", per_m(f.naks)),
        ("RNR NAKs per M", per_m(f.rnr_naks)),
        ("PAUSE frames", f.pause_frames as f64),
        ("max XOFF/s", f.max_xoff_per_s),
        (
            "XOFF off the RDMA priority",
            f.pfc_xoff.iter().sum::<i64>() as f64
                - f.pfc_xoff.get(f.rdma_priority).copied().unwrap_or(0) as f64,
        ),
        (LATENCY_FIGURES[0], f.latency_ack_p99_us),
        (LATENCY_FIGURES[1], f.latency_read_p99_us),
    ]
}

/// The latency figures of [`rates`]: compared only when both runs measured them (0: no
/// samples).
const LATENCY_FIGURES: [&str; 2] = ["ACK round trip p99 µs", "READ latency p99 µs"];

/// The least relative tolerance of the latency figures: a p99 is a bucket's upper edge, the
/// next edge 2^(1/4) = 1.19 times higher, so a p99 one bucket up is within the histograms'
/// resolution.
const LATENCY_TOLERANCE: f64 = 0.2;

/// Figures of `now` worse than `base` by more than `tolerance` (relative) and `slack` (absolute).
/// Largest baseline file read: a baseline is a few kilobytes, and a path such as `/dev/zero`
/// must not be read until memory runs out.
pub const MAX_BASELINE_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("cannot read the baseline {path}")]
    Io {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{0}: larger than {max} MiB, not a baseline", max = MAX_BASELINE_BYTES >> 20)]
    TooLarge(PathBuf),
    #[error("{path} is not a baseline (a JSON file written by `roce-analyze baseline`)")]
    Json {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
}

/// Reads a baseline written by `roce-analyze baseline`, at most [`MAX_BASELINE_BYTES`].
pub fn read_baseline(path: &Path) -> Result<Figures, BaselineError> {
    let io = |err| BaselineError::Io {
        path: path.into(),
        err,
    };
    let mut text = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_BASELINE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_BASELINE_BYTES {
        return Err(BaselineError::TooLarge(path.into()));
    }
    serde_json::from_slice(&text).map_err(|err| BaselineError::Json {
        path: path.into(),
        err,
    })
}

/// A `--tolerance` or `--slack`: finite and not negative (NaN would make every comparison
/// false, so a worse run would pass; infinity would accept anything).
pub fn parse_margin(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s:?}: must be a finite number, 0 or more"));
    }
    Ok(v)
}

pub fn compare(base: &Figures, now: &Figures, tolerance: f64, slack: f64) -> Vec<Regression> {
    rates(base)
        .into_iter()
        .zip(rates(now))
        .filter(|((figure, b), (_, n))| {
            if !LATENCY_FIGURES.contains(figure) {
                return *n > b * (1.0 + tolerance) + slack;
            }
            // bucket edges, 19 % apart: one bucket up is within the quantization, two are not
            *b != 0.0 && *n != 0.0 && *n > b * (1.0 + tolerance.max(LATENCY_TOLERANCE)) + slack
        })
        .map(|((figure, b), (_, n))| Regression {
            figure,
            baseline: b,
            now: n,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A baseline that cannot be read or decoded: the path in the message, the cause once in
    /// the chain the command prints.
    #[test]
    fn baseline_errors_print_their_cause_once() {
        let dir = std::env::temp_dir().join(format!("ro-baseline-err-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_json = dir.join("b.json");
        std::fs::write(&not_json, "not json").unwrap();
        for path in [dir.join("missing.json"), not_json] {
            let e = read_baseline(&path).unwrap_err();
            let cause = std::error::Error::source(&e).unwrap().to_string();
            assert!(!e.to_string().contains(&cause), "{e}");
            assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
            let logged = contract::error::chain(&e);
            assert_eq!(logged.matches(&cause).count(), 1, "{logged}");
            let e = anyhow::Error::new(e);
            for text in [format!("{e:#}"), format!("{e:?}")] {
                assert_eq!(text.matches(&cause).count(), 1, "{text}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
