//! `roce-analyze path DIR...`: did the marking (DSCP, PCP, ECN) of each QP key survive every
//! observation point between sender and receiver? The rules (point identity and order, the
//! common time range, what a change and a loss are) are in docs/analysis.md#path.
//!
//! Three passes over the same flows files, so that memory grows with keys and points, never
//! with rows: the time range of every key at every point, then the sums of the rows inside
//! the range all points cover, then (only when needed) those sums again over the range narrowed
//! to where every point's compared rows lie.
//!
//! When the trees hold the host's QPs (the `qps` table), each key is also joined to the host QPs
//! that send it, and what they asked for (their traffic class) is compared with the key's first
//! point (docs/analysis.md#requested-at-the-host): one more query over the keys and the QPs (the
//! join), and for keys at one point that a QP sends their sums over all their rows (two more).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use serde::Serialize;

use contract::marking::{self, FIELDS, dir_rank, show_value};

use crate::engine::{self, Engine, EngineError, Filters, Options};
use crate::report::{self, Row};
use contract::policy::PolicyConfig;

/// What `path` compares against: the expected marking of a policy (docs/analysis.md#path),
/// defined once in the observer, where the live `marking_changed` rule uses it too.
pub use contract::marking::{Marking, Want};

#[derive(Clone, Debug, serde::Serialize)]
pub struct Expect {
    pub marking: Marking,
}

impl Expect {
    pub fn of(p: &PolicyConfig) -> Expect {
        Expect {
            marking: Marking::of(&p.expected),
        }
    }
}

/// The packet classes, in the order of `observer_common::maps::class`.
pub const CLASSES: [&str; 3] = ["data", "ack", "cnp"];
/// The count columns summed per key and point (`pkts` first).
const COUNTS: [&str; 7] = [
    "pkts",
    "data_pkts",
    "ack_pkts",
    "cnp",
    "ce",
    "psn_gaps",
    "psn_missing",
];
/// Each class's packet count column.
const CLASS_PKTS: [&str; 3] = ["data_pkts", "ack_pkts", "cnp"];
/// The histogram columns read, field-major: index `field * 3 + class`.
const HISTS: [&str; 9] = [
    "dscp_data",
    "dscp_ack",
    "dscp_cnp",
    "pcp_data",
    "pcp_ack",
    "pcp_cnp",
    "ecn_data",
    "ecn_ack",
    "ecn_cnp",
];
/// ECN codepoint CE.
const CE: i16 = 3;

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// An observation point: where a tree's rows were counted, plus the `point` column's label
/// when the flows table has one and the row a value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PointId {
    pub host: String,
    pub iface: String,
    pub dir: String,
    pub label: Option<String>,
}

impl PointId {
    /// `host/iface/dir`, with `[label]` after it for a labelled point.
    pub fn name(&self) -> String {
        let base = format!("{}/{}/{}", self.host, self.iface, self.dir);
        match &self.label {
            Some(l) => format!("{base}[{l}]"),
            None => base,
        }
    }
}

/// The QP key across points: the direction belongs to the point, not to the key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Key {
    pub src: String,
    pub dst: String,
    pub qp: i32,
}

impl Key {
    /// `src > dst qp 0x000012`.
    pub fn name(&self) -> String {
        format!("{} > {} qp {}", self.src, self.dst, qp_hex(self.qp))
    }
}

fn qp_hex(qp: i32) -> String {
    format!("{:#08x}", qp as u32)
}

/// A point and the first tree (command-line position) it was found in.
#[derive(Debug)]
struct PointInfo {
    id: PointId,
    name: String,
    tree: usize,
}

/// Time range, rows and packets of one key at one point, over all its rows.
#[derive(Clone, Copy, Debug)]
struct Seen {
    start: i64,
    end: i64,
    rows: u64,
    pkts: i64,
}

/// The first pass: every point, and every key's range at each of its points.
#[derive(Debug, Default)]
struct Scan {
    points: Vec<PointInfo>,
    index: HashMap<PointId, usize>,
    keys: BTreeMap<Key, BTreeMap<usize, Seen>>,
}

impl Scan {
    fn point(&mut self, id: PointId, tree: usize) -> usize {
        if let Some(&i) = self.index.get(&id) {
            let p = &mut self.points[i];
            p.tree = p.tree.min(tree);
            return i;
        }
        self.points.push(PointInfo {
            name: id.name(),
            id: id.clone(),
            tree,
        });
        self.index.insert(id, self.points.len() - 1);
        self.points.len() - 1
    }
}

/// The query texts of `path` (DataFusion: they read the `tree` column).
const SCAN_SQL: &str = include_str!("../sql/path/scan.sql");
const RANGES_SQL: &str = include_str!("../sql/path/ranges.sql");
const COUNTS_SQL: &str = include_str!("../sql/path/counts.sql");
const HISTS_SQL: &str = include_str!("../sql/path/hists.sql");
const SENT_SQL: &str = include_str!("../sql/path/sent.sql");
const REQUESTED_SQL: &str = include_str!("../sql/path/requested.sql");
const REQUESTED_RANGES_SQL: &str = include_str!("../sql/path/requested_ranges.sql");

fn s(r: &Row, k: &str) -> String {
    crate::report::col_str(r, k).unwrap_or_default().to_string()
}
fn i(r: &Row, k: &str) -> i64 {
    crate::report::col_int(r, k).unwrap_or(0)
}

fn point_of(r: &Row) -> PointId {
    PointId {
        host: s(r, "host"),
        iface: s(r, "iface"),
        dir: s(r, "dir"),
        label: crate::report::col_str(r, "point").map(Into::into),
    }
}

fn key_of(r: &Row) -> Key {
    Key {
        src: s(r, "src"),
        dst: s(r, "dst"),
        qp: i(r, "qp") as i32,
    }
}

/// The first pass ([`SCAN_SQL`]): every point, and every key's range at each of its points.
fn scan(eng: &Engine) -> Result<Scan, EngineError> {
    let mut sc = Scan::default();
    let mut rs = report::rows(&eng.run(&engine::render("scan", SCAN_SQL, &BTreeMap::new())?)?);
    // points numbered in the order of the trees, then by name, whatever the engine's row order
    rs.sort_by_key(|r| (i(r, "tree"), point_of(r).name()));
    for r in &rs {
        let p = sc.point(point_of(r), i(r, "tree") as usize);
        sc.keys.entry(key_of(r)).or_default().insert(
            p,
            Seen {
                start: i(r, "start_us"),
                end: i(r, "end_us"),
                rows: i(r, "rows") as u64,
                pkts: i(r, "pkts"),
            },
        );
    }
    Ok(sc)
}

/// Time range (µs, start and end) compared for each key.
type Ranges = BTreeMap<Key, (i64, i64)>;

/// The sums over the compared rows of one key at one point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tally {
    /// Rows inside the compared range.
    pub rows: u64,
    /// `pkts`, `data_pkts`, `ack_pkts`, `cnp`, `ce`, `psn_gaps`, `psn_missing`.
    #[serde(flatten)]
    pub counts: BTreeMap<&'static str, i64>,
    /// `dscp_data`, `pcp_cnp`, `ecn_ack`, ...: value -> packets (PCP -1: untagged).
    pub hists: BTreeMap<&'static str, BTreeMap<i16, i64>>,
    /// Where the compared rows lie (µs): the first one's start, the last one's end.
    pub start_us: Option<i64>,
    pub end_us: Option<i64>,
    /// Rows with packets outside the compared range, or straddling one of its ends.
    pub excluded_rows: u64,
    pub excluded_pkts: i64,
}

impl Tally {
    pub fn count(&self, name: &str) -> i64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// The histogram of marking field `field` (0 DSCP, 1 PCP, 2 ECN) of class `class`.
    pub fn hist(&self, field: usize, class: usize) -> BTreeMap<i16, i64> {
        self.hists
            .get(HISTS[field * 3 + class])
            .cloned()
            .unwrap_or_default()
    }
}

/// Tallies per key, per point number.
type Tallies = BTreeMap<Key, BTreeMap<usize, Tally>>;

/// The second pass ([`COUNTS_SQL`], [`HISTS_SQL`]): each compared key's range ([`RANGES_SQL`])
/// and, per point, the sums over its rows inside it and the rows left out.
fn tally(eng: &Engine, scan: &Scan) -> Result<(Ranges, Tallies), EngineError> {
    tally_over(
        eng,
        scan,
        engine::render("ranges", RANGES_SQL, &BTreeMap::new())?,
    )
}

/// [`tally`] over the keys and ranges of `ranges`: a CTE `ranges (src, dst, qp, lo, hi, tol)`.
fn tally_over(eng: &Engine, scan: &Scan, ranges: String) -> Result<(Ranges, Tallies), EngineError> {
    let mut prm = BTreeMap::new();
    prm.insert("ranges", ranges);
    let point = |r: &Row| -> Result<usize, EngineError> {
        scan.index.get(&point_of(r)).copied().ok_or_else(|| {
            EngineError::Changed(format!(
                "point {} appeared between two queries",
                point_of(r).name()
            ))
        })
    };
    let mut ranges = Ranges::new();
    let mut out = Tallies::new();
    // row by row within one batch at a time: a JSON row costs far more than its Arrow form
    for b in eng.run(&engine::render("counts", COUNTS_SQL, &prm)?)? {
        for r in report::rows(std::slice::from_ref(&b)) {
            let key = key_of(&r);
            ranges.insert(key.clone(), (i(&r, "lo"), i(&r, "hi")));
            let t = out.entry(key).or_default().entry(point(&r)?).or_default();
            t.rows = i(&r, "rows") as u64;
            for c in COUNTS {
                t.counts.insert(c, i(&r, c));
            }
            if t.rows > 0 {
                t.start_us = crate::report::col_int(&r, "start_us");
                t.end_us = crate::report::col_int(&r, "end_us");
            }
            t.excluded_rows = i(&r, "excluded_rows") as u64;
            t.excluded_pkts = i(&r, "excluded_pkts");
        }
    }
    // row by row within one batch at a time: a JSON row costs far more than its Arrow form
    for b in eng.run(&engine::render("hists", HISTS_SQL, &prm)?)? {
        for r in report::rows(std::slice::from_ref(&b)) {
            let hist = s(&r, "hist");
            let Some(name) = HISTS.iter().find(|h| **h == hist) else {
                continue;
            };
            let Some(t) = out
                .get_mut(&key_of(&r))
                .and_then(|ps| ps.get_mut(&point(&r).ok()?))
            else {
                continue;
            };
            t.hists
                .entry(name)
                .or_default()
                .insert(i(&r, "value") as i16, i(&r, "pkts"));
        }
    }
    Ok((ranges, out))
}

/// A host QP that sends a key ([`REQUESTED_SQL`]): its set-up as its latest `qps` rows with
/// one give it, and who owns it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Asked {
    host: String,
    device: String,
    lqpn: i64,
    traffic_class: i64,
    sl: Option<i64>,
    setup_source: Option<String>,
    pid: Option<i64>,
    comm: Option<String>,
    pod_uid: Option<String>,
    container_id: Option<String>,
    seen_us: i64,
}

/// The host QPs that send each key ([`REQUESTED_SQL`]), in a stable order; none (and no query)
/// when the trees have no `qps` file.
fn asked(eng: &Engine) -> Result<BTreeMap<Key, Vec<Asked>>, EngineError> {
    let mut out: BTreeMap<Key, Vec<Asked>> = BTreeMap::new();
    if eng.files.get("qps").is_none_or(Vec::is_empty) {
        return Ok(out);
    }
    let mut prm = BTreeMap::new();
    prm.insert("sent", engine::render("sent", SENT_SQL, &BTreeMap::new())?);
    for b in eng.run(&engine::render("requested", REQUESTED_SQL, &prm)?)? {
        for r in report::rows(std::slice::from_ref(&b)) {
            let opt = |k: &str| crate::report::col_str(&r, k).map(String::from);
            out.entry(key_of(&r)).or_default().push(Asked {
                host: s(&r, "host"),
                device: s(&r, "device"),
                lqpn: i(&r, "lqpn"),
                traffic_class: i(&r, "traffic_class").clamp(0, 255),
                sl: crate::report::col_int(&r, "sl"),
                setup_source: opt("setup_source"),
                pid: crate::report::col_int(&r, "pid"),
                comm: opt("comm"),
                pod_uid: opt("pod_uid"),
                container_id: opt("container_id"),
                seen_us: i(&r, "seen_us"),
            });
        }
    }
    for v in out.values_mut() {
        v.sort();
        v.dedup();
    }
    Ok(out)
}

/// The sums of the keys at one point that a host QP sends, over all their rows
/// ([`REQUESTED_RANGES_SQL`]): what their requests are compared with. No query when no such key.
fn alone(
    eng: &Engine,
    scan: &Scan,
    asked: &BTreeMap<Key, Vec<Asked>>,
) -> Result<Tallies, EngineError> {
    let one_point = |k: &Key| scan.keys.get(k).is_some_and(|ps| ps.len() == 1);
    if !asked.keys().any(one_point) {
        return Ok(Tallies::new());
    }
    let mut prm = BTreeMap::new();
    prm.insert("sent", engine::render("sent", SENT_SQL, &BTreeMap::new())?);
    let ranges = engine::render("requested_ranges", REQUESTED_RANGES_SQL, &prm)?;
    Ok(tally_over(eng, scan, ranges)?.1)
}

/// The data class's index ([`CLASSES`]).
const DATA: usize = 0;

/// What a host QP asked its packets to carry (its set-up in the `qps` table), compared with the
/// data packets of the key's first point (docs/analysis.md#requested-at-the-host).
#[derive(Clone, Debug, Serialize)]
pub struct Requested {
    pub host: String,
    pub device: String,
    /// The QP's local number (the key's `qp` is its remote one).
    pub lqpn: i64,
    pub pid: Option<i64>,
    pub comm: Option<String>,
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// The GRH traffic class it was set up with: DSCP << 2 | ECN.
    pub traffic_class: i64,
    pub dscp: i16,
    pub ecn: i16,
    pub sl: Option<i64>,
    /// `probe` or `mlx5_qpc` (docs/qps.md).
    pub setup_source: Option<String>,
    /// The end of the last interval whose row has this set-up (µs since the epoch).
    pub seen_us: i64,
    /// The point compared with: the key's first in path order.
    pub point: String,
    /// The data packets there (its compared rows; every row of a key at one point).
    pub data_pkts: i64,
    /// The request itself is not what the policy expects of data (its DSCP or ECN).
    pub off_policy: bool,
    /// What the policy expects that the request is not (`DSCP 26`), for the text.
    #[serde(skip)]
    off_what: Vec<String>,
    /// The data packets at the point at other values than requested, as hop changes are: from
    /// the requested value to each other one (ECN: CE in place of a requested ECT is no change).
    pub changes: Vec<Change>,
    /// A change to a value the policy does not allow, from a requested value it allows.
    pub violates: bool,
    /// The line shown before the key's points.
    pub line: String,
}

/// `requested at h1 mlx5_0 QP 0x11 by pid 4242 (python3, pod p): traffic class 106 = DSCP 26
/// ECN 2, SL 3 (probe)`.
fn request_line(q: &Requested) -> String {
    let mut l = format!("requested at {} {} QP {:#08x}", q.host, q.device, q.lqpn);
    let mut about: Vec<String> = Vec::new();
    let by = match (q.pid, &q.comm) {
        (Some(p), c) => {
            about.extend(c.clone());
            Some(format!("pid {p}"))
        }
        (None, Some(c)) => Some(c.clone()),
        (None, None) => None,
    };
    if let Some(p) = &q.pod_uid {
        about.push(format!("pod {p}"));
    } else if let Some(c) = &q.container_id {
        about.push(format!("container {c}"));
    }
    match (by, about.is_empty()) {
        (Some(b), true) => l += &format!(" by {b}"),
        (Some(b), false) => l += &format!(" by {b} ({})", about.join(", ")),
        (None, false) => l += &format!(" by {}", about.join(", ")),
        (None, true) => {}
    }
    l += &format!(
        ": traffic class {} = DSCP {} ECN {}",
        q.traffic_class, q.dscp, q.ecn
    );
    if let Some(sl) = q.sl {
        l += &format!(", SL {sl}");
    }
    if let Some(src) = &q.setup_source {
        l += &format!(" ({src})");
    }
    l
}

/// The request of `a` compared with the data packets of `point` (the key's first), `t` its sums.
/// Per field (DSCP, ECN): the packets at other values than requested, as a hop from the request
/// to the point; CE in place of a requested ECT(0) or ECT(1) is a mark, not a change. A change
/// fails when the policy allows the requested value and not the point's (the NIC or driver
/// overrode the marking); a request the policy does not allow fails nothing here (`qp_marking`
/// judges it).
fn request(a: &Asked, point: &str, t: &Tally, expect: &Expect) -> Requested {
    let m = &expect.marking;
    let tc = a.traffic_class.clamp(0, 255);
    let (dscp, ecn) = ((tc >> 2) as i16, (tc & 3) as i16);
    let of = t.count(CLASS_PKTS[DATA]);
    let mut changes = Vec::new();
    let mut off_what = Vec::new();
    for (f, asked) in [(0, dscp), (2, ecn)] {
        let want = m.want(f, DATA);
        if !want.allows(asked) {
            off_what.push(format!("{} {want}", FIELDS[f].1));
        }
        if of <= 0 {
            continue;
        }
        let b: Vec<(i16, i64)> = t.hist(f, DATA).into_iter().collect();
        let a: Vec<(i16, i64)> = if f == 2 && (asked == 1 || asked == 2) {
            let ce = at(&t.hist(f, DATA), CE).clamp(0, of);
            [(asked, of - ce), (CE, ce)]
                .into_iter()
                .filter(|x| x.1 > 0)
                .collect()
        } else {
            vec![(asked, of)]
        };
        for mut change in marking::changes_of(m, f, DATA, &a, &b, of) {
            change.violates &= want.allows(asked);
            let shown: Vec<String> = change.from.iter().map(|v| show_value(*v)).collect();
            let line = format!(
                "{} {} {} → {} between the request and {point}: {} of {of} packets",
                CLASSES[DATA],
                change.field,
                shown.join(","),
                show_value(change.to),
                change.pkts
            );
            changes.push(Change { change, line });
        }
    }
    let mut q = Requested {
        host: a.host.clone(),
        device: a.device.clone(),
        lqpn: a.lqpn,
        pid: a.pid,
        comm: a.comm.clone(),
        pod_uid: a.pod_uid.clone(),
        container_id: a.container_id.clone(),
        traffic_class: tc,
        dscp,
        ecn,
        sl: a.sl,
        setup_source: a.setup_source.clone(),
        seen_us: a.seen_us,
        point: point.to_string(),
        data_pkts: of,
        off_policy: !off_what.is_empty(),
        off_what,
        violates: changes.iter().any(|c| c.change.violates),
        changes,
        line: String::new(),
    };
    q.line = request_line(&q);
    q
}

/// One point of a key's path, with its sums over the compared rows.
#[derive(Clone, Debug, Serialize)]
pub struct PointAt {
    pub point: String,
    /// The point's number in the scan.
    #[serde(skip)]
    index: usize,
    #[serde(flatten)]
    pub tally: Tally,
}

/// One marking change between consecutive points ([`marking::Change`]), with its line.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    #[serde(flatten)]
    pub change: marking::Change,
    pub line: String,
}

/// What happened between two consecutive points.
#[derive(Clone, Debug, Serialize)]
pub struct Hop {
    pub from: String,
    pub to: String,
    /// How `from` was put before `to`: `direction` (egress before ingress), `packets` (more
    /// packets upstream: loss only removes them), or `command line` (the data could not tell:
    /// then a change to or from the policy's value fails either way).
    pub order: &'static str,
    /// Packets per class at `from` minus those at `to` (negative: more at `to`).
    pub lost: BTreeMap<&'static str, i64>,
    /// ECN CE packets (all classes) at `to` minus those at `from`.
    pub ce_added: i64,
    pub changes: Vec<Change>,
}

/// One key's path.
#[derive(Clone, Debug, Serialize)]
pub struct KeyPath {
    #[serde(flatten)]
    pub key: Key,
    pub qp_hex: String,
    /// The compared range, µs.
    pub start_us: i64,
    pub end_us: i64,
    /// The host QPs that send the key, each compared with its first point (none without a
    /// `qps` table: then left out of the JSON).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested: Vec<Requested>,
    /// The points in path order (docs/analysis.md#path), each with its compared rows.
    pub points: Vec<PointAt>,
    /// Points with rows of the key, none of them inside the compared range.
    pub not_compared: Vec<PointAt>,
    pub hops: Vec<Hop>,
    /// The first point (in path order) whose compared rows have PSN gaps.
    pub first_gap: Option<String>,
    /// The points' compared rows do not start and end at the same times (their intervals are
    /// not aligned): losses and changes include the difference at each end (up to the key's
    /// tolerance when the intervals end on the same instants give or take a few ms, else up to
    /// one interval).
    pub spans_differ: bool,
}

/// Path order: egress before ingress (then any other direction), more packets first, then the
/// tree given first on the command line, then the name.
fn path_order(a: &(usize, Tally), b: &(usize, Tally), pts: &[PointInfo]) -> std::cmp::Ordering {
    let (pa, pb) = (&pts[a.0], &pts[b.0]);
    dir_rank(&pa.id.dir)
        .cmp(&dir_rank(&pb.id.dir))
        .then(b.1.count("pkts").cmp(&a.1.count("pkts")))
        .then(pa.tree.cmp(&pb.tree))
        .then(pa.name.cmp(&pb.name))
}

/// How the path order put point `a` before `b` ([`Hop::order`]).
fn order_basis(a: &PointAt, b: &PointAt, pts: &[PointInfo]) -> &'static str {
    if dir_rank(&pts[a.index].id.dir) != dir_rank(&pts[b.index].id.dir) {
        "direction"
    } else if a.tally.count("pkts") != b.tally.count("pkts") {
        "packets"
    } else {
        "command line"
    }
}

/// The hop from point `a` to point `b`; `order` as [`order_basis`] says. When the data did not
/// decide the order, a change from a value the policy does not allow is judged like one to
/// such a value: the same two trees given the other way round must not turn a bleach into a
/// repair.
fn hop(a: &PointAt, b: &PointAt, expect: &Expect, order: &'static str) -> Hop {
    let mut changes = Vec::new();
    let mut ce_added = 0i64;
    for (c, class) in CLASSES.iter().enumerate() {
        ce_added = ce_added.saturating_add(
            at(&b.tally.hist(2, c), CE).saturating_sub(at(&a.tally.hist(2, c), CE)),
        );
        let of = a.tally.count(CLASS_PKTS[c]);
        for f in 0..FIELDS.len() {
            let sorted = |h: BTreeMap<i16, i64>| h.into_iter().collect::<Vec<_>>();
            let (ha, hb) = (sorted(a.tally.hist(f, c)), sorted(b.tally.hist(f, c)));
            for mut change in marking::changes_of(&expect.marking, f, c, &ha, &hb, of) {
                let shown: Vec<String> = change.from.iter().map(|v| show_value(*v)).collect();
                let mut line = format!(
                    "{class} {} {} → {} between {} and {}: {} of {of} packets",
                    change.field,
                    shown.join(","),
                    show_value(change.to),
                    a.point,
                    b.point,
                    change.pkts
                );
                if order == "command line"
                    && !change.violates
                    && change.from.iter().any(|v| !change.expected.allows(*v))
                {
                    change.violates = true;
                    line += " (which point is upstream is not known from the data: a change \
                             from the policy's value would fail, so this one does too)";
                }
                changes.push(Change { change, line });
            }
        }
    }
    let lost = CLASSES
        .iter()
        .zip(CLASS_PKTS)
        .map(|(c, n)| (*c, a.tally.count(n).saturating_sub(b.tally.count(n))))
        .collect();
    Hop {
        from: a.point.clone(),
        to: b.point.clone(),
        order,
        lost,
        ce_added,
        changes,
    }
}

fn at(h: &BTreeMap<i16, i64>, v: i16) -> i64 {
    h.get(&v).copied().unwrap_or(0)
}

/// The path of a key whose compared rows are at two points or more.
fn key_path(
    key: &Key,
    range: (i64, i64),
    ps: BTreeMap<usize, Tally>,
    scan: &Scan,
    expect: &Expect,
) -> KeyPath {
    let (mut points, idle): (Vec<_>, Vec<_>) = ps.into_iter().partition(|(_, t)| t.rows > 0);
    points.sort_by(|a, b| path_order(a, b, &scan.points));
    let named = |v: Vec<(usize, Tally)>| -> Vec<PointAt> {
        v.into_iter()
            .map(|(p, tally)| PointAt {
                point: scan.points[p].name.clone(),
                index: p,
                tally,
            })
            .collect()
    };
    let points = named(points);
    let hops = points
        .windows(2)
        .map(|w| {
            hop(
                &w[0],
                &w[1],
                expect,
                order_basis(&w[0], &w[1], &scan.points),
            )
        })
        .collect();
    let spans: HashSet<_> = points
        .iter()
        .map(|p| (p.tally.start_us, p.tally.end_us))
        .collect();
    KeyPath {
        key: key.clone(),
        qp_hex: qp_hex(key.qp),
        start_us: range.0,
        end_us: range.1,
        first_gap: points
            .iter()
            .find(|p| p.tally.count("psn_gaps") > 0)
            .map(|p| p.point.clone()),
        spans_differ: spans.len() > 1,
        requested: Vec::new(),
        not_compared: named(idle),
        points,
        hops,
    }
}

/// A point of the run.
#[derive(Clone, Debug, Serialize)]
pub struct PointSummary {
    pub name: String,
    #[serde(flatten)]
    pub id: PointId,
    /// The first tree (command-line order) it was found in.
    pub tree: PathBuf,
    /// Keys with packets at this point.
    pub keys: usize,
    /// Rows of compared keys left out at this point: outside the compared range, or straddling
    /// one of its ends.
    pub excluded_rows: u64,
    pub excluded_pkts: i64,
}

/// A key's rows at one point: its range and size.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    pub point: String,
    pub start_us: i64,
    pub end_us: i64,
    pub rows: u64,
    pub pkts: i64,
}

/// A key that cannot be compared: seen at one point only, or at points whose rows have no
/// common time.
#[derive(Clone, Debug, Serialize)]
pub struct Uncompared {
    #[serde(flatten)]
    pub key: Key,
    pub qp_hex: String,
    /// Keys at one point: the host QPs that send the key, each compared with that point (as
    /// [`KeyPath::requested`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested: Vec<Requested>,
    pub points: Vec<Span>,
}

/// Totals over the compared keys, each key counted once: at its first point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub keys: usize,
    pub pkts: i64,
    pub data_pkts: i64,
    /// Data packets at the first point minus those at the last, summed over keys.
    pub lost_data: i64,
    pub changes: usize,
    /// Changes whose later value is not the expected one (or, when the data did not decide
    /// which point is upstream, whose earlier value is not).
    pub violations: usize,
    /// The host QPs' requests joined to keys (none without a `qps` table: then left out).
    #[serde(flatten)]
    pub requested: Option<RequestTotals>,
}

/// Totals of the requests ([`Requested`]) over the compared keys and the keys at one point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestTotals {
    /// Host QPs' set-ups joined to keys.
    pub requests: usize,
    /// Keys with one or more.
    pub keys_requested: usize,
    /// Requests whose first point's data packets are against the policy where the request is
    /// not.
    pub request_violations: usize,
}

/// The result of `roce-analyze path`.
#[derive(Clone, Debug, Serialize)]
pub struct PathReport {
    pub trees: Vec<PathBuf>,
    pub expected: Marking,
    pub points: Vec<PointSummary>,
    pub keys: Vec<KeyPath>,
    /// Keys seen at one point only: nothing to compare, not losses.
    pub one_point: Vec<Uncompared>,
    /// Keys at several points whose rows share no time range with whole rows at two points.
    pub no_common_time: Vec<Uncompared>,
    pub totals: Totals,
}

impl PathReport {
    /// The run fails (exit 1): a change along a path against the policy, or a first point's
    /// data against the policy where its host QP's request was not.
    pub fn fails(&self) -> bool {
        self.totals.violations > 0
            || self
                .totals
                .requested
                .as_ref()
                .is_some_and(|r| r.request_violations > 0)
    }
}

/// `roce-analyze path`: the trees of `dirs`, compared key by key along their points.
pub fn path(dirs: &[PathBuf], expect: &Expect) -> Result<PathReport, PathError> {
    let eng = Engine::open(dirs, &Filters::default(), &Options::default())?;
    path_on(&eng, expect)
}

/// [`path`] over an engine's (filtered) tables.
pub fn path_on(eng: &Engine, expect: &Expect) -> Result<PathReport, PathError> {
    let scan = scan(eng)?;
    let (ranges, tallies) = tally(eng, &scan)?;
    let asked = asked(eng)?;
    let alone = alone(eng, &scan, &asked)?;
    let mut r = assemble(&eng.dirs, &scan, &ranges, tallies, expect);
    add_requests(&mut r, &scan, &asked, &alone, expect);
    Ok(r)
}

/// Each compared key's and each key at one point's requests ([`request`]: compared with its
/// first point), and their totals (none without requests).
fn add_requests(
    r: &mut PathReport,
    scan: &Scan,
    asked: &BTreeMap<Key, Vec<Asked>>,
    alone: &Tallies,
    expect: &Expect,
) {
    if asked.is_empty() {
        return;
    }
    for k in &mut r.keys {
        let (Some(a), Some(first)) = (asked.get(&k.key), k.points.first()) else {
            continue;
        };
        k.requested = a
            .iter()
            .map(|a| request(a, &first.point, &first.tally, expect))
            .collect();
    }
    for u in &mut r.one_point {
        let (Some(a), Some(&p)) = (
            asked.get(&u.key),
            scan.keys.get(&u.key).and_then(|ps| ps.keys().next()),
        ) else {
            continue;
        };
        let t = alone
            .get(&u.key)
            .and_then(|ps| ps.get(&p))
            .cloned()
            .unwrap_or_default();
        u.requested = a
            .iter()
            .map(|a| request(a, &scan.points[p].name, &t, expect))
            .collect();
    }
    let all: Vec<&Vec<Requested>> = r
        .keys
        .iter()
        .map(|k| &k.requested)
        .chain(r.one_point.iter().map(|u| &u.requested))
        .filter(|q| !q.is_empty())
        .collect();
    if !all.is_empty() {
        r.totals.requested = Some(RequestTotals {
            requests: all.iter().map(|q| q.len()).sum(),
            keys_requested: all.len(),
            request_violations: all
                .iter()
                .flat_map(|q| q.iter())
                .filter(|q| q.violates)
                .count(),
        });
    }
}

fn uncompared(key: &Key, ps: &BTreeMap<usize, Seen>, scan: &Scan) -> Uncompared {
    Uncompared {
        key: key.clone(),
        qp_hex: qp_hex(key.qp),
        requested: Vec::new(),
        points: ps
            .iter()
            .map(|(p, s)| Span {
                point: scan.points[*p].name.clone(),
                start_us: s.start,
                end_us: s.end,
                rows: s.rows,
                pkts: s.pkts,
            })
            .collect(),
    }
}

/// Every key of the scan to its list: compared, at one point, or without common time.
fn assemble(
    trees: &[PathBuf],
    scan: &Scan,
    ranges: &Ranges,
    mut tallies: Tallies,
    expect: &Expect,
) -> PathReport {
    let mut r = PathReport {
        trees: trees.to_vec(),
        expected: expect.marking.clone(),
        points: Vec::new(),
        keys: Vec::new(),
        one_point: Vec::new(),
        no_common_time: Vec::new(),
        totals: Totals::default(),
    };
    for (key, ps) in &scan.keys {
        let compared = ranges.get(key).zip(tallies.remove(key));
        match compared {
            Some((range, t)) if t.values().filter(|x| x.rows > 0).count() >= 2 => {
                r.keys.push(key_path(key, *range, t, scan, expect));
            }
            _ if ps.len() == 1 => r.one_point.push(uncompared(key, ps, scan)),
            _ => r.no_common_time.push(uncompared(key, ps, scan)),
        }
    }
    r.points = point_summaries(trees, scan, &r.keys);
    r.totals = totals(&r.keys);
    r
}

fn point_summaries(trees: &[PathBuf], scan: &Scan, keys: &[KeyPath]) -> Vec<PointSummary> {
    let mut out: Vec<PointSummary> = scan
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| PointSummary {
            name: p.name.clone(),
            id: p.id.clone(),
            tree: trees[p.tree].clone(),
            keys: scan.keys.values().filter(|ps| ps.contains_key(&i)).count(),
            excluded_rows: 0,
            excluded_pkts: 0,
        })
        .collect();
    for p in keys
        .iter()
        .flat_map(|k| k.points.iter().chain(&k.not_compared))
    {
        let s = &mut out[p.index];
        s.excluded_rows += p.tally.excluded_rows;
        s.excluded_pkts = s.excluded_pkts.saturating_add(p.tally.excluded_pkts);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn totals(keys: &[KeyPath]) -> Totals {
    let mut t = Totals::default();
    for k in keys {
        let (first, last) = (&k.points[0].tally, &k.points[k.points.len() - 1].tally);
        t.keys += 1;
        t.pkts = t.pkts.saturating_add(first.count("pkts"));
        t.data_pkts = t.data_pkts.saturating_add(first.count("data_pkts"));
        t.lost_data = t.lost_data.saturating_add(
            first
                .count("data_pkts")
                .saturating_sub(last.count("data_pkts")),
        );
        for h in &k.hops {
            t.changes += h.changes.len();
            t.violations += h.changes.iter().filter(|c| c.change.violates).count();
        }
    }
    t
}

/// µs since the epoch as RFC 3339 (ms).
fn time(us: i64) -> String {
    contract::time::rfc3339(us.max(0) as u64 * 1000)
}

/// `DSCP 26=3240, PCP 3=3240, ECN 2=3228 3=12` for one class at one point.
fn marking_line(t: &Tally, class: usize) -> String {
    FIELDS
        .iter()
        .enumerate()
        .map(|(f, (_, name))| {
            let h = t.hist(f, class);
            let vals: Vec<String> = h
                .iter()
                .map(|(v, n)| format!("{}={n}", show_value(*v)))
                .collect();
            format!("{name} {}", vals.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn rows(n: u64) -> String {
    format!("{n} row{}", if n == 1 { "" } else { "s" })
}

fn render_point(out: &mut String, i: usize, p: &PointAt) {
    use std::fmt::Write;
    let t = &p.tally;
    let _ = writeln!(
        out,
        "  {}. {}: {} packets in {}, {} PSN gaps, {} excluded",
        i + 1,
        p.point,
        t.count("pkts"),
        rows(t.rows),
        t.count("psn_gaps"),
        rows(t.excluded_rows)
    );
    for (c, class) in CLASSES.iter().enumerate() {
        let n = t.count(CLASS_PKTS[c]);
        if n > 0 {
            let _ = writeln!(out, "       {class} {n}: {}", marking_line(t, c));
        }
    }
}

fn render_hop(out: &mut String, h: &Hop) {
    use std::fmt::Write;
    let lost: Vec<String> = h
        .lost
        .iter()
        .filter(|(_, n)| **n != 0)
        .map(|(c, n)| match n {
            n if *n > 0 => format!("{n} {c}"),
            n => format!("{} {c} more at the later point", n.unsigned_abs()),
        })
        .collect();
    let order = match h.order {
        "direction" => "egress before ingress",
        "packets" => "more packets upstream",
        _ => "command-line order: the data does not tell",
    };
    let _ = writeln!(
        out,
        "  {} → {} (order: {order}): lost {}, CE added {}",
        h.from,
        h.to,
        if lost.is_empty() {
            "0".into()
        } else {
            lost.join(", ")
        },
        h.ce_added
    );
    for c in &h.changes {
        let _ = writeln!(
            out,
            "    {} {} (expected {})",
            if c.change.violates { "FAIL" } else { "ok  " },
            c.line,
            c.change.expected
        );
    }
}

/// A request and its comparison with the key's first point, indented by `indent`.
fn render_request(out: &mut String, q: &Requested, indent: &str) {
    use std::fmt::Write;
    let _ = writeln!(out, "{indent}{}", q.line);
    if q.off_policy {
        let why = if q.off_what.iter().any(|w| w.starts_with(FIELDS[0].1)) {
            "the qp_marking alert's domain"
        } else {
            "as the host asked, not changed on the way"
        };
        let _ = writeln!(
            out,
            "{indent}  requested off the policy (expected {}): {why}",
            q.off_what.join(", ")
        );
    }
    if q.data_pkts <= 0 {
        let _ = writeln!(
            out,
            "{indent}  no data packets at {} to compare with",
            q.point
        );
    } else if q.changes.is_empty() {
        let _ = writeln!(
            out,
            "{indent}  ok   data at {} as requested: {} packets",
            q.point, q.data_pkts
        );
    }
    for c in &q.changes {
        let _ = writeln!(
            out,
            "{indent}  {} {} (expected {})",
            if c.change.violates { "FAIL" } else { "ok  " },
            c.line,
            c.change.expected
        );
    }
}

fn render_key(out: &mut String, k: &KeyPath) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "{}: {} to {}",
        k.key.name(),
        time(k.start_us),
        time(k.end_us)
    );
    for q in &k.requested {
        render_request(out, q, "  ");
    }
    for (i, p) in k.points.iter().enumerate() {
        render_point(out, i, p);
    }
    for p in &k.not_compared {
        let _ = writeln!(
            out,
            "  not compared: {}: {}, none inside the range",
            p.point,
            rows(p.tally.excluded_rows)
        );
    }
    for h in &k.hops {
        render_hop(out, h);
    }
    if let Some(g) = k
        .points
        .iter()
        .find(|p| Some(&p.point) == k.first_gap.as_ref())
    {
        let _ = writeln!(
            out,
            "  PSN gaps first at {}: {} gaps, {} PSNs missing",
            g.point,
            g.tally.count("psn_gaps"),
            g.tally.count("psn_missing")
        );
    }
    if k.spans_differ {
        let apart = |f: fn(&Tally) -> Option<i64>| {
            let v: Vec<i64> = k.points.iter().filter_map(|p| f(&p.tally)).collect();
            let (lo, hi) = (v.iter().min(), v.iter().max());
            lo.zip(hi).map_or(0, |(a, b)| b.saturating_sub(*a))
        };
        let _ = writeln!(
            out,
            "  the points' intervals are not aligned (their compared rows start {} and end {} apart): losses and changes include the traffic of those times",
            duration(apart(|t| t.start_us)),
            duration(apart(|t| t.end_us)),
        );
    }
}

/// A span of µs as shown: `3.2 ms`, `1.500 s`.
fn duration(us: i64) -> String {
    if us.unsigned_abs() >= 1_000_000 {
        format!("{:.3} s", us as f64 / 1e6)
    } else {
        format!("{:.1} ms", us as f64 / 1e3)
    }
}

fn render_uncompared(out: &mut String, title: &str, keys: &[Uncompared]) {
    use std::fmt::Write;
    if keys.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    for k in keys {
        for s in &k.points {
            let _ = writeln!(
                out,
                "  {} at {}: {} packets in {}, {} to {}",
                k.key.name(),
                s.point,
                s.pkts,
                rows(s.rows),
                time(s.start_us),
                time(s.end_us)
            );
        }
        for q in &k.requested {
            render_request(out, q, "    ");
        }
    }
}

/// The report for people.
pub fn render(r: &PathReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} trees, {} points, {} keys compared, {} at one point, {} without common time",
        r.trees.len(),
        r.points.len(),
        r.keys.len(),
        r.one_point.len(),
        r.no_common_time.len()
    );
    for p in &r.points {
        let _ = writeln!(
            out,
            "  {} ({}): {} keys, {} excluded",
            p.name,
            p.tree.display(),
            p.keys,
            rows(p.excluded_rows)
        );
    }
    for k in &r.keys {
        render_key(&mut out, k);
    }
    render_uncompared(&mut out, "keys at one point (not compared)", &r.one_point);
    render_uncompared(
        &mut out,
        "keys without common time (not compared)",
        &r.no_common_time,
    );
    let t = &r.totals;
    let _ = writeln!(
        out,
        "total: {} keys, {} packets ({} data; each key counted once, at its first point), {} data packets lost, {} changes, {} against the policy",
        t.keys, t.pkts, t.data_pkts, t.lost_data, t.changes, t.violations
    );
    if let Some(q) = &t.requested {
        let _ = writeln!(
            out,
            "requested at the hosts: {} host QP set-up{} joined to {} key{}, {} against the policy at the first point",
            q.requests,
            if q.requests == 1 { "" } else { "s" },
            q.keys_requested,
            if q.keys_requested == 1 { "" } else { "s" },
            q.request_violations
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_names() {
        let mut p = PointId {
            host: "h1".into(),
            iface: "eth0".into(),
            dir: "egress".into(),
            label: None,
        };
        assert_eq!(p.name(), "h1/eth0/egress");
        p.label = Some("leaf1".into());
        assert_eq!(p.name(), "h1/eth0/egress[leaf1]");
        let k = Key {
            src: "10.0.0.1".into(),
            dst: "10.0.0.2".into(),
            qp: 0x12,
        };
        assert_eq!(k.name(), "10.0.0.1 > 10.0.0.2 qp 0x000012");
    }

    /// A point's data packets: `n` of them, with these DSCP and ECN histograms.
    fn data(n: i64, dscp: &[(i16, i64)], ecn: &[(i16, i64)]) -> Tally {
        let mut t = Tally::default();
        t.counts.insert("data_pkts", n);
        t.hists.insert("dscp_data", dscp.iter().copied().collect());
        t.hists.insert("ecn_data", ecn.iter().copied().collect());
        t
    }

    fn asked(tc: i64) -> Asked {
        Asked {
            host: "h1".into(),
            device: "mlx5_0".into(),
            lqpn: 0x2a,
            traffic_class: tc,
            sl: None,
            setup_source: Some("mlx5_qpc".into()),
            pid: None,
            comm: Some("ib_core".into()),
            pod_uid: None,
            container_id: Some("c0ffee".into()),
            seen_us: 0,
        }
    }

    fn lines(q: &Requested) -> Vec<(String, bool)> {
        q.changes
            .iter()
            .map(|c| (c.line.clone(), c.change.violates))
            .collect()
    }

    /// The request against the first point's data: CE in place of the ECT asked for is a mark,
    /// ECT(1) for ECT(0) a change the policy allows, Not-ECT one it does not; a request off the
    /// policy fails nothing; without data there is nothing to compare.
    #[test]
    fn requests_are_compared_with_the_first_points_data() {
        let expect = Expect::of(&PolicyConfig::profile("nvidia").unwrap());
        let p = "h1/eth0/egress";
        let t = data(100, &[(26, 100)], &[(0, 5), (1, 10), (2, 80), (3, 5)]);
        let q = request(&asked(106), p, &t, &expect);
        assert_eq!(
            lines(&q),
            [
                (
                    format!("data ECN 2 → 1 between the request and {p}: 10 of 100 packets"),
                    false
                ),
                (
                    format!("data ECN 2 → 0 between the request and {p}: 5 of 100 packets"),
                    true
                ),
            ]
        );
        assert!(q.violates && !q.off_policy);
        assert_eq!(
            q.line,
            "requested at h1 mlx5_0 QP 0x00002a by ib_core (container c0ffee): traffic class 106 = \
             DSCP 26 ECN 2 (mlx5_qpc)"
        );
        // ECN 0 asked (104): off the policy, the wire's ECT a change it allows, nothing fails
        let q = request(
            &asked(104),
            p,
            &data(100, &[(26, 100)], &[(2, 100)]),
            &expect,
        );
        assert!(q.off_policy && !q.violates, "{q:?}");
        assert_eq!(q.off_what, ["ECN ECT"]);
        assert_eq!(lines(&q).len(), 1);
        let mut out = String::new();
        render_request(&mut out, &q, "");
        assert!(
            out.contains("requested off the policy (expected ECN ECT): as the host asked"),
            "{out}"
        );
        // DSCP 0 asked, 26 on the wire: toward the policy, ok
        let q = request(&asked(2), p, &data(100, &[(26, 100)], &[(2, 100)]), &expect);
        assert!(q.off_policy && !q.violates && q.changes.len() == 1, "{q:?}");
        assert_eq!(q.off_what, ["DSCP 26"]);
        // DSCP 0 asked and 24 on the wire: both off the policy, the change is not the NIC's fault
        let q = request(&asked(0), p, &data(100, &[(24, 100)], &[(0, 100)]), &expect);
        assert_eq!(
            lines(&q),
            [(
                format!("data DSCP 0 → 24 between the request and {p}: 100 of 100 packets"),
                false
            )]
        );
        assert!(q.off_policy && !q.violates);
        // no data packets: nothing compared, nothing fails
        let q = request(&asked(106), p, &Tally::default(), &expect);
        assert!(q.changes.is_empty() && !q.violates);
        let mut out = String::new();
        render_request(&mut out, &q, "  ");
        assert!(out.contains("  no data packets at h1/eth0/egress"), "{out}");
        // a traffic class out of range (a foreign file) is clamped, not a panic
        assert_eq!(request(&asked(4096), p, &t, &expect).traffic_class, 255);
    }
}
