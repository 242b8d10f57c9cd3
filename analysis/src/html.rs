//! `roce-analyze html`: the report as one self-contained HTML page (no script, no external
//! resource: it opens offline and can be attached to a ticket).
//!
//! What the page shows and where it comes from:
//! - per interface, timelines of XOFF per second per priority, seconds paused per priority, CE
//!   share, CNPs per second, PSN gaps and retransmitted PSNs: the queries of `sql/html`
//!   ([`HTML_SQL`]) run by the [`Engine`] over the `v_*` views, drawn server-side by the
//!   `plotters` crate as inline SVG;
//! - the checks with their parts, worst subjects (QP keys, interfaces) and worst intervals, the
//!   figures and the alerts per rule: [`crate::report::report`], the same numbers as
//!   `report --json`;
//! - the marking table along the path: [`crate::path::path_on`] over the same engine;
//! - the baseline comparison: [`crate::report::rates`] and [`crate::report::compare`].
//!
//! The work is bounded for big trees ([`Limits`]): at most `max_ifaces` interfaces (the most
//! troubled first), `max_points` points per chart (consecutive intervals summed into buckets
//! beyond that), `max_alerts` alert records listed.
//!
//! Every number a test compares carries a `data-*` attribute with its exact value.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

use contract::policy::PolicyConfig;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::engine::{Engine, EngineError, quote, render};
use crate::path::{Expect, PathReport};
use crate::report::{Figures, LatencyKey, Report, Row, Verdict, compare, fmt_ns, rates, rows};
use crate::time::fmt_us;

/// The page's queries: (name, text).
pub const HTML_SQL: [(&str, &str); 5] = [
    ("ifaces", include_str!("../sql/html/ifaces.sql")),
    (
        "iface_timeline",
        include_str!("../sql/html/iface_timeline.sql"),
    ),
    (
        "flow_timeline",
        include_str!("../sql/html/flow_timeline.sql"),
    ),
    ("alerts", include_str!("../sql/html/alerts.sql")),
    (
        "marking_timeline",
        include_str!("../sql/html/marking_timeline.sql"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("drawing the chart {chart}: {msg}")]
    Chart { chart: String, msg: String },
}

/// Bounds of the page for big trees.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Interfaces with timelines (the most XOFF, PAUSE, PSN gaps, retransmissions and CE first).
    pub max_ifaces: usize,
    /// Points per chart: intervals are summed into equal buckets beyond it.
    pub max_points: usize,
    /// Alert records listed (the counts per rule cover them all).
    pub max_alerts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ifaces: 16,
            max_points: 500,
            max_alerts: 200,
        }
    }
}

/// A baseline to compare the run with.
#[derive(Clone, Debug)]
pub struct Baseline {
    /// Where it was read from (shown).
    pub file: String,
    pub figures: Figures,
    pub tolerance: f64,
    pub slack: f64,
}

/// One interface's timelines: the rows of `iface_timeline.sql`, `flow_timeline.sql` and
/// `marking_timeline.sql`, on the interface's own time axis.
#[derive(Clone, Debug, Default)]
pub struct IfaceSeries {
    pub host: String,
    pub iface: String,
    /// Its first interval's start (its charts' time zero), µs.
    pub origin_us: i64,
    /// Its last interval's end, µs.
    pub end_us: i64,
    /// A bucket's length, µs (its intervals starting in the same bucket are summed).
    pub bucket_us: i64,
    pub ifrows: Vec<Row>,
    pub flowrows: Vec<Row>,
    /// Packets off the policy's marking per bucket (`b`): DSCP, PCP, Not-ECT.
    pub marking: BTreeMap<i64, [i64; 3]>,
}

/// The timelines of the interfaces drawn.
#[derive(Clone, Debug, Default)]
pub struct Timelines {
    /// Interfaces in the (filtered) trees.
    pub ifaces_total: i64,
    pub ifaces: Vec<IfaceSeries>,
}

fn query(eng: &Engine, name: &str, prm: &BTreeMap<&str, String>) -> Result<Vec<Row>, EngineError> {
    let (_, t) = HTML_SQL
        .iter()
        .find(|(n, _)| *n == name)
        .expect("an html query");
    Ok(rows(&eng.run(&render(name, t, prm)?)?))
}

fn int(r: &Row, k: &str) -> i64 {
    crate::report::col_int(r, k).unwrap_or(0)
}
fn float(r: &Row, k: &str) -> Option<f64> {
    crate::report::col_float(r, k)
}
fn string(r: &Row, k: &str) -> String {
    crate::report::col_str(r, k).unwrap_or_default().to_string()
}

/// The timelines of the most troubled interfaces (at most `lim.max_ifaces`), in buckets so
/// that no chart has more than `lim.max_points` points.
pub fn timelines(
    eng: &Engine,
    lim: &Limits,
    policy: &PolicyConfig,
) -> Result<Timelines, EngineError> {
    let mut prm: BTreeMap<&str, String> = BTreeMap::new();
    prm.insert("max_ifaces", lim.max_ifaces.max(1).to_string());
    prm.insert("marking_off", crate::report::marking_off(policy));
    let ifs = query(eng, "ifaces", &prm)?;
    let mut out = Timelines {
        ifaces_total: ifs.first().map_or(0, |r| int(r, "ifaces")),
        ifaces: Vec::new(),
    };
    // Each interface on its own time axis and buckets: captures days apart each fill their
    // charts instead of sharing one axis.
    let points = lim.max_points.max(2) as i64;
    for r in &ifs {
        let (host, iface) = (string(r, "host"), string(r, "iface"));
        let (first, last) = (int(r, "first_t0"), int(r, "last_t1"));
        let bucket = (((last - first).max(1) + points - 1) / points).max(1);
        prm.insert(
            "ifaces",
            format!("(host = {} AND iface = {})", quote(&host), quote(&iface)),
        );
        prm.insert("origin_us", first.to_string());
        prm.insert("bucket_us", bucket.to_string());
        let mut marking = BTreeMap::new();
        for m in query(eng, "marking_timeline", &prm)? {
            marking.insert(
                int(&m, "b"),
                [int(&m, "off_dscp"), int(&m, "off_pcp"), int(&m, "not_ect")],
            );
        }
        out.ifaces.push(IfaceSeries {
            ifrows: query(eng, "iface_timeline", &prm)?,
            flowrows: query(eng, "flow_timeline", &prm)?,
            marking,
            host,
            iface,
            origin_us: first,
            end_us: last,
            bucket_us: bucket,
        });
    }
    Ok(out)
}

/// The first `limit` alert records in time order.
pub fn alerts(eng: &Engine, limit: usize) -> Result<Vec<Row>, EngineError> {
    let mut prm: BTreeMap<&str, String> = BTreeMap::new();
    prm.insert("limit", limit.max(1).to_string());
    query(eng, "alerts", &prm)
}

/// Everything the page shows.
pub struct Page<'a> {
    pub report: &'a Report,
    pub timelines: &'a Timelines,
    pub alerts: &'a [Row],
    /// The path comparison, or why it could not be made.
    pub path: Result<&'a PathReport, String>,
    pub baseline: Option<&'a Baseline>,
    pub trees: &'a [PathBuf],
    pub limits: Limits,
}

/// The whole page over the engine's (filtered) tables: report (`top` subjects and intervals
/// per check), timelines, alerts, the path of `dirs` and the baseline.
#[allow(clippy::too_many_arguments)]
pub fn html(
    eng: &Engine,
    dirs: &[PathBuf],
    policy: &PolicyConfig,
    policy_source: &str,
    top: usize,
    baseline: Option<&Baseline>,
    limits: Limits,
) -> Result<String, HtmlError> {
    let report = crate::report::report(eng, policy, policy_source, top, None)?;
    let tl = timelines(eng, &limits, policy)?;
    let al = alerts(eng, limits.max_alerts)?;
    let path =
        crate::path::path_on(eng, &Expect::of(policy)).map_err(|e| contract::error::chain(&e));
    render_page(&Page {
        report: &report,
        timelines: &tl,
        alerts: &al,
        path: path.as_ref().map_err(|e| e.clone()),
        baseline,
        trees: dirs,
        limits,
    })
}

/// HTML-escaped text (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A number as shown: integers as they are, others with 3 significant decimals.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}\
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:1.6em}\
h3{font-size:1.05em;margin-bottom:.3em}table{border-collapse:collapse;margin:.4em 0 1em}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:.9em}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.Fail{background:#f8d0d0}.Warn{background:#fbeec0}.Info{background:#dde8f6}.Pass{background:#d6efd6}\
.bad{background:#f8d0d0}.charts{display:flex;flex-wrap:wrap;gap:8px}\
figure.chart{margin:0;border:1px solid #ddd;max-width:100%}figcaption{font-size:.85em;padding:2px 6px}\
figure.chart svg{display:block;max-width:100%;height:auto}.key{white-space:nowrap;font-weight:bold}\
.note{color:#555;font-size:.9em}.scroll{overflow-x:auto;max-width:100%}\
table{display:block;overflow-x:auto;max-width:100%}\
.verdict{font-size:1.15em;padding:.5em .8em;border:1px solid #bbb;margin:.5em 0}\
details{margin:1em 0}summary{cursor:pointer;font-weight:bold}\
@media (max-width:700px){body{margin:.5em}td,th{font-size:.8em}}";

/// The page.
pub fn render_page(p: &Page) -> Result<String, HtmlError> {
    let r = p.report;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\"><title>roce-analyze report</title><style>{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(s, "<h1>roce-analyze report</h1>");
    // the answer first: the verdict, the checks, the path; then the drill-down
    verdict(&mut s, r);
    run_line(&mut s, p);
    checks(&mut s, r);
    path_section(&mut s, &p.path);
    worst(&mut s, r);
    latency_section(&mut s, r)?;
    charts(&mut s, p)?;
    baseline_section(&mut s, r, p.baseline);
    alerts_section(&mut s, r, p.alerts, p.limits.max_alerts);
    figures(&mut s, p);
    s.push_str("</body></html>\n");
    Ok(s)
}

/// The banner: FAIL, WARN or PASS with the checks that failed or warned.
fn verdict(s: &mut String, r: &Report) {
    let names = |v: Verdict| -> Vec<&str> {
        r.checks
            .iter()
            .filter(|c| c.verdict == v)
            .map(|c| c.name)
            .collect()
    };
    let (fail, warn) = (names(Verdict::Fail), names(Verdict::Warn));
    let (class, word) = if !fail.is_empty() {
        ("Fail", "FAIL")
    } else if !warn.is_empty() {
        ("Warn", "WARN")
    } else {
        ("Pass", "PASS")
    };
    let mut text = Vec::new();
    if !fail.is_empty() {
        text.push(format!("{} failed: {}", fail.len(), fail.join(", ")));
    }
    if !warn.is_empty() {
        text.push(format!("{} warned: {}", warn.len(), warn.join(", ")));
    }
    if text.is_empty() {
        text.push(format!("all {} checks passed", r.checks.len()));
    }
    let _ = writeln!(
        s,
        "<div id=\"verdict\" class=\"verdict {class}\" data-verdict=\"{class}\"><b>{word}</b> {}</div>",
        esc(&text.join("; "))
    );
}

fn run_line(s: &mut String, p: &Page) {
    let r = p.report;
    let trees: Vec<String> = p
        .trees
        .iter()
        .map(|t| esc(&t.display().to_string()))
        .collect();
    let _ = writeln!(
        s,
        "<p id=\"run\">Trees: {}<br>{} .. {}, {} files, {} flow rows, {} intervals<br>Policy: {}</p>",
        trees.join(", "),
        esc(&r.first_us.map(fmt_us).unwrap_or("-".into())),
        esc(&r.last_us.map(fmt_us).unwrap_or("-".into())),
        r.files,
        r.flow_rows,
        r.intervals,
        esc(&r.policy_source)
    );
}

/// The report's figures, as `--json` names them, folded away at the end.
fn figures(s: &mut String, p: &Page) {
    let f = &p.report.figures;
    let _ = writeln!(
        s,
        "<details id=\"figures\"><summary>Figures (the names of report --json and baselines)</summary><div class=\"scroll\"><table class=\"figures\"><tr><th>figure</th><th>value</th></tr>"
    );
    let mut row = |name: &str, v: String| {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"n\" data-figure=\"{}\">{}</td></tr>",
            esc(name),
            esc(name),
            esc(&v)
        );
    };
    row("qps", f.qps.to_string());
    row("data_pkts", f.data_pkts.to_string());
    row("cnp_pkts", f.cnp_pkts.to_string());
    row("ce", f.ce.to_string());
    row("not_ect_data", f.not_ect_data.to_string());
    row("data_off_dscp", f.data_off_dscp.to_string());
    row("cnp_off_dscp", f.cnp_off_dscp.to_string());
    row("psn_gaps", f.psn_gaps.to_string());
    row("psn_missing", f.psn_missing.to_string());
    row("psn_retrans", f.psn_retrans.to_string());
    row("naks", f.naks.to_string());
    row("rnr_naks", f.rnr_naks.to_string());
    for (i, x) in f.pfc_xoff.iter().enumerate() {
        row(&format!("pfc_xoff_p{i}"), x.to_string());
    }
    row("rdma_priority", f.rdma_priority.to_string());
    row("pause_frames", f.pause_frames.to_string());
    row("max_xoff_per_s", f.max_xoff_per_s.to_string());
    s.push_str("</table></div></details>\n");
}

fn checks(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"checks\">Checks</h2><div class=\"scroll\"><table class=\"checks\"><tr><th>verdict</th><th>check</th><th>detail</th></tr>\n");
    for c in &r.checks {
        let v = format!("{:?}", c.verdict);
        let _ = writeln!(
            s,
            "<tr class=\"{v}\" data-check=\"{}\" data-verdict=\"{v}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(c.name),
            v.to_uppercase(),
            esc(c.name),
            esc(&c.detail)
        );
    }
    s.push_str("</table></div>\n");
}

/// The drill-down: per check that fired, its parts, worst subjects and worst intervals.
fn worst(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"worst\">Top QPs and interfaces by fault</h2>\n");
    let mut any = false;
    for c in &r.checks {
        if c.verdict == Verdict::Pass || (c.worst.is_empty() && c.intervals.is_empty()) {
            continue;
        }
        any = true;
        let _ = writeln!(s, "<h3>{}</h3>", esc(c.name));
        if !c.parts.is_empty() {
            s.push_str("<div class=\"scroll\"><table class=\"parts\"><tr><th>part</th><th>figure</th><th>peak</th><th>violations</th><th>intervals</th><th>subjects</th></tr>\n");
            for x in &c.parts {
                let _ = writeln!(
                    s,
                    "<tr data-check=\"{}\" data-part=\"{}\" data-figure=\"{}\" data-violations=\"{}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    esc(c.name),
                    esc(&x.part),
                    x.figure,
                    x.violations,
                    esc(&x.part),
                    x.figure,
                    x.peak,
                    x.violations,
                    x.intervals,
                    x.subjects
                );
            }
            s.push_str("</table></div>\n");
        }
        if !c.worst.is_empty() {
            s.push_str("<div class=\"scroll\"><table class=\"worst\"><tr><th>part</th><th>subject</th><th>figure</th><th>in intervals</th><th>peak</th><th>first</th><th>last</th><th>values off the policy</th></tr>\n");
            for w in &c.worst {
                let _ = writeln!(
                    s,
                    "<tr data-check=\"{}\" data-part=\"{}\" data-subject=\"{}\" data-figure=\"{}\" data-peak=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(c.name),
                    esc(&w.part),
                    esc(&w.name()),
                    w.figure,
                    w.peak,
                    esc(&w.part),
                    esc(&w.name()),
                    w.figure,
                    w.violations,
                    w.peak,
                    esc(&fmt_us(w.first_us)),
                    esc(&fmt_us(w.last_us)),
                    esc(w.values_text().trim_start_matches("; "))
                );
            }
            s.push_str("</table></div>\n");
        }
        if !c.intervals.is_empty() {
            s.push_str("<div class=\"scroll\"><table class=\"intervals\"><tr><th>part</th><th>interval</th><th>figure</th><th>subjects</th></tr>\n");
            for i in &c.intervals {
                let _ = writeln!(
                    s,
                    "<tr data-check=\"{}\" data-part=\"{}\" data-start-us=\"{}\" data-figure=\"{}\"><td>{}</td><td>{} .. {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    esc(c.name),
                    esc(&i.part),
                    i.start_us,
                    i.figure,
                    esc(&i.part),
                    esc(&fmt_us(i.start_us)),
                    esc(&fmt_us(i.end_us)),
                    i.figure,
                    i.subjects
                );
            }
            s.push_str("</table></div>\n");
        }
    }
    if !any {
        s.push_str("<p class=\"note\">No check fired.</p>\n");
    }
}

/// The latency section: per kind its distribution (a bar per bucket on a log time axis) and
/// quantiles, then the worst keys by p99 over the run and in one interval. A note alone when
/// the trees have no latency sample.
fn latency_section(s: &mut String, r: &Report) -> Result<(), HtmlError> {
    let l = &r.latency;
    s.push_str("<h2 id=\"latency\">Latency per QP</h2>\n");
    if l.kinds.is_empty() {
        s.push_str("<p class=\"note\">No latency samples in these trees: <code>roce-observe replay --latency</code> measures them (docs/latency.md).</p>\n");
        return Ok(());
    }
    let _ = writeln!(
        s,
        "<p class=\"note\">Passive latency of the requester keys (docs/latency.md), every key and interval summed. A quantile is the upper edge of the bucket holding it (the true value is at most that, within 19 %). <span data-ambiguous=\"{}\">{}</span> ACK / READ measurements excluded by Karn's rule, <span data-ring-full=\"{}\">{}</span> not started (ring of outstanding requests full).</p>",
        l.ambiguous, l.ambiguous, l.ring_full, l.ring_full
    );
    s.push_str("<div class=\"scroll\"><table class=\"latency\"><tr><th>kind</th><th>samples</th><th>p50</th><th>p99</th><th>p999</th><th>unmatched</th></tr>\n");
    let ns = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for k in &l.kinds {
        let _ = writeln!(
            s,
            "<tr data-kind=\"{}\" data-samples=\"{}\" data-p50-ns=\"{}\" data-p99-ns=\"{}\" data-p999-ns=\"{}\" data-unmatched=\"{}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&k.kind),
            k.samples,
            ns(k.p50_ns),
            ns(k.p99_ns),
            ns(k.p999_ns),
            k.unmatched,
            esc(&k.kind),
            k.samples,
            esc(&fmt_ns(k.p50_ns)),
            esc(&fmt_ns(k.p99_ns)),
            esc(&fmt_ns(k.p999_ns)),
            k.unmatched
        );
    }
    s.push_str("</table></div>\n<div class=\"charts\">\n");
    for k in l.kinds.iter().filter(|k| !k.buckets.is_empty()) {
        let svg = latency_chart(&k.kind, &k.buckets)?;
        let _ = writeln!(
            s,
            "<figure class=\"chart\" data-latency-chart=\"{}\" data-buckets=\"{}\">{svg}<figcaption>{}: samples per bucket ({} in all)</figcaption></figure>",
            esc(&k.kind),
            k.buckets.len(),
            esc(&k.kind),
            k.samples
        );
    }
    s.push_str("</div>\n");
    let table = |s: &mut String, id: &str, title: &str, rows: &[LatencyKey]| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "<h3>{}</h3><div class=\"scroll\"><table class=\"{id}\"><tr><th>kind</th><th>key</th><th>p99</th><th>p50</th><th>p999</th><th>samples</th><th>from</th><th>to</th></tr>",
            esc(title)
        );
        for w in rows {
            let _ = writeln!(
                s,
                "<tr data-kind=\"{}\" data-subject=\"{}\" data-t0-us=\"{}\" data-p99-ns=\"{}\" data-samples=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&w.kind),
                esc(&w.name()),
                w.t0_us,
                ns(w.p99_ns),
                w.samples,
                esc(&w.kind),
                esc(&w.name()),
                esc(&fmt_ns(w.p99_ns)),
                esc(&fmt_ns(w.p50_ns)),
                esc(&fmt_ns(w.p999_ns)),
                w.samples,
                esc(&fmt_us(w.t0_us)),
                esc(&fmt_us(w.t1_us))
            );
        }
        s.push_str("</table></div>\n");
    };
    table(
        s,
        "latency-qps",
        "Worst QPs by p99 over the run (those with the policy's minimum of samples first)",
        &l.worst_qps,
    );
    table(
        s,
        "latency-intervals",
        "Worst QPs by p99 in one interval (with the policy's minimum of samples)",
        &l.worst_intervals,
    );
    Ok(())
}

/// A latency distribution as an SVG bar chart: one bar per bucket from its lower to its upper
/// edge on a log2 time axis (x = log2 of seconds, labelled in time), its height the samples.
fn latency_chart(kind: &str, buckets: &[(i64, i64)]) -> Result<String, HtmlError> {
    // bucket index i covers (2^((i-1)/4), 2^(i/4)] s: on the axis ((i-1)/4, i/4]
    let lo = buckets.iter().map(|b| b.0).min().unwrap_or(0) - 1;
    let hi = buckets.iter().map(|b| b.0).max().unwrap_or(0);
    let y_max = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64 * 1.1;
    let axes = Axes {
        x: (lo - 2) as f64 / 4.0..(hi + 2) as f64 / 4.0,
        y: 0.0..y_max,
        x_desc: "latency (log scale)",
        y_desc: "samples",
        x_label: &|v| log2_seconds(*v),
    };
    svg_chart(&format!("latency {kind}"), &axes, |c| {
        let col = PALETTE[0];
        c.draw_series(buckets.iter().map(|&(i, n)| {
            Rectangle::new(
                [((i - 1) as f64 / 4.0, 0.0), (i as f64 / 4.0, n as f64)],
                col.filled(),
            )
        }))
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
}

/// An axis label for x = log2 of seconds: `1 µs`, `250 µs`, `4 ms`, `1 s`.
fn log2_seconds(x: f64) -> String {
    let v = 2f64.powf(x);
    let (v, unit) = if v < 1e-3 {
        (v * 1e6, "µs")
    } else if v < 1.0 {
        (v * 1e3, "ms")
    } else {
        (v, "s")
    };
    let t = if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    };
    format!("{} {unit}", t.trim_end_matches(".0"))
}

/// One line of a chart.
struct Line {
    label: String,
    color: RGBColor,
    pts: Vec<(f64, f64)>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

const CHART_W: u32 = 440;
/// Points of a line up to which each is also drawn as a dot.
const MAX_DOTS: usize = 60;
const CHART_H: u32 = 220;

/// A line chart as an SVG element (plotters' SVG backend): x seconds since the run's start.
fn chart(name: &str, y_desc: &str, x_max: f64, lines: &[Line]) -> Result<String, HtmlError> {
    let y_max = lines
        .iter()
        .flat_map(|l| l.pts.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let axes = Axes {
        x: 0.0..if x_max > 0.0 { x_max } else { 1.0 },
        y: 0.0..if y_max > 0.0 { y_max * 1.1 } else { 1.0 },
        x_desc: "s since the interface's first interval",
        y_desc,
        x_label: &|v| short(*v),
    };
    svg_chart(name, &axes, |c| {
        for l in lines {
            let col = l.color;
            c.draw_series(LineSeries::new(l.pts.iter().copied(), col.stroke_width(2)))
                .map_err(|e| e.to_string())?;
            // Dots on the points while they are few (a lone point has no line to show it).
            if l.pts.len() <= MAX_DOTS {
                c.draw_series(l.pts.iter().map(|&p| Circle::new(p, 2, col.filled())))
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })
}

/// A chart's axes: their ranges, descriptions and the x labels' form (y labels: [`short`]).
struct Axes<'a> {
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    x_desc: &'a str,
    y_desc: &'a str,
    x_label: &'a dyn Fn(&f64) -> String,
}

/// The chart area of every chart of the page (plotters' SVG backend, [`CHART_W`] x
/// [`CHART_H`], its mesh and labels), `draw` drawing the series; the SVG element.
fn svg_chart(
    name: &str,
    axes: &Axes,
    draw: impl FnOnce(
        &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    ) -> Result<(), String>,
) -> Result<String, HtmlError> {
    let err = |e: &dyn std::fmt::Display| HtmlError::Chart {
        chart: name.to_string(),
        msg: e.to_string(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (CHART_W, CHART_H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut c = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(axes.x.clone(), axes.y.clone())
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .x_labels(6)
            .y_labels(5)
            .label_style(("sans-serif", 11))
            .light_line_style(RGBColor(238, 238, 238))
            .y_label_formatter(&|v| short(*v))
            .x_label_formatter(axes.x_label)
            .draw()
            .map_err(|e| err(&e))?;
        draw(&mut c).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

fn charts(s: &mut String, p: &Page) -> Result<(), HtmlError> {
    let t = p.timelines;
    let _ = writeln!(
        s,
        "<h2 id=\"timelines\">Timelines per interface</h2><p class=\"note\" data-ifaces-total=\"{}\" data-ifaces-shown=\"{}\">{} of {} interfaces (the most XOFF, PAUSE, PSN gaps, retransmissions and CE marks first; at most {}), each on its own time axis from its first interval (in its heading); intervals starting within the same bucket are summed into one point (at most {} points per chart).</p>",
        t.ifaces_total,
        t.ifaces.len(),
        t.ifaces.len(),
        t.ifaces_total,
        p.limits.max_ifaces,
        p.limits.max_points
    );
    let rdma = p.report.figures.rdma_priority.min(7);
    for (n, i) in t.ifaces.iter().enumerate() {
        let who = format!("{}/{}", i.host, i.iface);
        let x_of = |r: &Row| (int(r, "t0") - i.origin_us) as f64 / 1e6;
        let x_max = (i.end_us - i.origin_us) as f64 / 1e6;
        let _ = writeln!(
            s,
            "<section class=\"iface\" id=\"iface-{n}\" data-host=\"{}\" data-iface=\"{}\" data-origin-us=\"{}\"><h3>{}</h3><p class=\"note\">time zero {}, to {}; a point per {}</p>",
            esc(&i.host),
            esc(&i.iface),
            i.origin_us,
            esc(&who),
            esc(&fmt_us(i.origin_us)),
            esc(&fmt_us(i.end_us)),
            esc(&human_us(i.bucket_us))
        );
        // Totals of the points drawn (they add up to the report's figures when every interface
        // is drawn).
        let sum_if = |k: &str| i.ifrows.iter().map(|r| int(r, k)).sum::<i64>();
        let sum_fl = |k: &str| i.flowrows.iter().map(|r| int(r, k)).sum::<i64>();
        let paused: Vec<Option<f64>> = (0..8)
            .map(|pr| {
                let k = format!("paused_s_p{pr}");
                i.ifrows
                    .iter()
                    .filter_map(|r| float(r, &k))
                    .fold(None, |a, v| Some(a.unwrap_or(0.0) + v))
            })
            .collect();
        // Per priority: XOFF frames and seconds paused; then the interface's other totals.
        let cell = |s: &mut String, k: &str, v: String| {
            let shown = v.parse::<f64>().map(num).unwrap_or_else(|_| v.clone());
            let _ = write!(
                s,
                "<td class=\"n\" data-k=\"{}\" data-v=\"{}\">{}</td>",
                esc(k),
                esc(&v),
                esc(&shown)
            );
        };
        s.push_str("<table class=\"totals\"><tr><th>priority</th>");
        for pr in 0..8 {
            let _ = write!(s, "<th>{pr}</th>");
        }
        s.push_str("</tr><tr><th>XOFF frames</th>");
        for pr in 0..8 {
            let k = format!("xoff_p{pr}");
            cell(s, &k, sum_if(&k).to_string());
        }
        s.push_str("</tr><tr><th>seconds paused</th>");
        for (pr, v) in paused.iter().enumerate() {
            match v {
                Some(v) => cell(s, &format!("paused_s_p{pr}"), v.to_string()),
                None => s.push_str("<td class=\"n\">unknown</td>"),
            }
        }
        s.push_str("</tr></table>\n<table class=\"totals\"><tr>");
        let others = [
            (
                "pause_frames",
                "802.3x PAUSE frames",
                sum_if("pause_frames"),
            ),
            ("data_pkts", "data packets", sum_fl("data_pkts")),
            ("ce", "CE", sum_fl("ce")),
            ("cnp", "CNPs", sum_fl("cnp")),
            ("psn_gaps", "PSN gaps", sum_fl("psn_gaps")),
            ("psn_retrans", "retransmitted PSNs", sum_fl("psn_retrans")),
        ];
        for (_, label, _) in &others {
            let _ = write!(s, "<th>{}</th>", esc(label));
        }
        s.push_str("</tr><tr>");
        for (k, _, v) in &others {
            cell(s, k, v.to_string());
        }
        s.push_str("</tr></table>\n<div class=\"charts\">\n");

        // XOFF per second per priority: the priorities with XOFF (the RDMA priority when none).
        let mut with_xoff: Vec<usize> = (0..8)
            .filter(|pr| sum_if(&format!("xoff_p{pr}")) > 0)
            .collect();
        if with_xoff.is_empty() {
            with_xoff.push(rdma);
        }
        let per_prio = |prs: &[usize], key: &str| -> Vec<Line> {
            prs.iter()
                .map(|&pr| Line {
                    label: format!("priority {pr}"),
                    color: PALETTE[pr],
                    pts: i
                        .ifrows
                        .iter()
                        .map(|r| (x_of(r), float(r, &format!("{key}{pr}")).unwrap_or(0.0)))
                        .collect(),
                })
                .collect()
        };
        let mut paused_prs: Vec<usize> = (0..8)
            .filter(|&pr| paused[pr].is_some_and(|v| v > 0.0))
            .collect();
        if paused_prs.is_empty() {
            paused_prs.push(rdma);
        }
        let no_speed = paused.iter().all(Option::is_none);
        let fl = |key: &str, label: &str, color: usize, scale: f64| Line {
            label: label.into(),
            color: PALETTE[color],
            pts: i
                .flowrows
                .iter()
                .map(|r| (x_of(r), float(r, key).unwrap_or(0.0) * scale))
                .collect(),
        };
        let specs: [(&str, String, &str, Vec<Line>); 6] = [
            (
                "xoff",
                "XOFF frames per second, per priority".into(),
                "XOFF/s",
                per_prio(&with_xoff, "xoff_per_s_p"),
            ),
            (
                "paused",
                if no_speed {
                    "Seconds paused per interval (unknown: no link speed recorded)".into()
                } else {
                    "Seconds paused per interval, per priority".into()
                },
                "s paused",
                if no_speed {
                    Vec::new()
                } else {
                    per_prio(&paused_prs, "paused_s_p")
                },
            ),
            (
                "ce_share",
                "CE share of the data packets".into(),
                "CE %",
                vec![fl("ce_share", "CE %", 3, 100.0)],
            ),
            (
                "cnp_rate",
                "CNPs per second".into(),
                "CNP/s",
                vec![fl("cnp_per_s", "CNP/s", 0, 1.0)],
            ),
            (
                "psn",
                "PSN gaps and retransmitted PSNs per interval".into(),
                "count",
                vec![
                    fl("psn_gaps", "PSN gaps", 3, 1.0),
                    fl("psn_retrans", "retransmitted", 1, 1.0),
                ],
            ),
            (
                "marking",
                "Packets off the policy's marking per interval".into(),
                "packets",
                ["DSCP off", "PCP off", "Not-ECT"]
                    .iter()
                    .enumerate()
                    .map(|(k, label)| Line {
                        label: (*label).into(),
                        color: PALETTE[[3, 4, 1][k]],
                        pts: i
                            .flowrows
                            .iter()
                            .map(|r| {
                                let v = i.marking.get(&int(r, "b")).map_or(0, |m| m[k]);
                                (x_of(r), v as f64)
                            })
                            .collect(),
                    })
                    .collect(),
            ),
        ];
        for (kind, caption, y, lines) in specs {
            let svg = chart(&format!("{who} {kind}"), y, x_max, &lines)?;
            // the legend in the caption, never over the lines
            let keys: String = lines
                .iter()
                .map(|l| {
                    let RGBColor(r, g, b) = l.color;
                    format!(
                        " <span class=\"key\" style=\"color:#{r:02x}{g:02x}{b:02x}\">&#9473; {}</span>",
                        esc(&l.label)
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "<figure class=\"chart\" id=\"chart-{n}-{kind}\" data-chart=\"{kind}\" data-points=\"{}\"><figcaption>{}{keys}</figcaption>{svg}</figure>",
                lines.first().map_or(0, |l| l.pts.len()),
                esc(&caption)
            );
        }
        s.push_str("</div></section>\n");
    }
    if t.ifaces.is_empty() {
        s.push_str("<p class=\"note\">No interface or flow rows.</p>\n");
    }
    Ok(())
}

/// An axis label: `0`, `0.25`, `1.5k`, `2.1M`.
fn short(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let t = format!("{x:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}{unit}")
}

/// `1 s`, `250 ms`, `2 min`.
fn human_us(us: i64) -> String {
    if us % 1_000_000 == 0 {
        let sec = us / 1_000_000;
        if sec >= 60 && sec % 60 == 0 {
            format!("{} min", sec / 60)
        } else {
            format!("{sec} s")
        }
    } else if us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        format!("{us} µs")
    }
}

fn path_section(s: &mut String, path: &Result<&PathReport, String>) {
    s.push_str("<h2 id=\"path\">Marking along the path</h2>\n");
    let r = match path {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(
                s,
                "<p class=\"note\" id=\"path-error\">No path comparison: {}</p>",
                esc(e)
            );
            return;
        }
    };
    let t = &r.totals;
    let _ = writeln!(
        s,
        "<p id=\"path-totals\" data-keys=\"{}\" data-changes=\"{}\" data-violations=\"{}\" data-lost-data=\"{}\">{} points, {} keys compared ({} at one point, {} without common time), {} data packets lost, {} marking changes, {} against the policy.</p>",
        t.keys,
        t.changes,
        t.violations,
        t.lost_data,
        r.points.len(),
        t.keys,
        r.one_point.len(),
        r.no_common_time.len(),
        t.lost_data,
        t.changes,
        t.violations
    );
    if !r.points.is_empty() {
        s.push_str("<table class=\"points\"><tr><th>point</th><th>tree</th><th>keys</th></tr>\n");
        for pt in &r.points {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
                esc(&pt.name),
                esc(&pt.tree.display().to_string()),
                pt.keys
            );
        }
        s.push_str("</table>\n");
    }
    let changes: Vec<_> = r
        .keys
        .iter()
        .flat_map(|k| k.hops.iter().map(move |h| (k, h)))
        .flat_map(|(k, h)| h.changes.iter().map(move |c| (k, h, c)))
        .collect();
    if changes.is_empty() {
        s.push_str("<p class=\"note\">No marking changed between points.</p>\n");
        return;
    }
    s.push_str("<table class=\"marking\"><tr><th>key</th><th>from point</th><th>to point</th><th>class</th><th>field</th><th>from</th><th>to</th><th>packets</th><th>of</th><th>expected</th><th>against the policy</th></tr>\n");
    for (k, h, c) in changes {
        let m = &c.change;
        let from: Vec<String> = m.from.iter().map(|v| v.to_string()).collect();
        let _ = writeln!(
            s,
            "<tr class=\"{}\" data-key=\"{}\" data-field=\"{}\" data-class=\"{}\" data-to=\"{}\" data-pkts=\"{}\" data-violates=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            if m.violates { "bad" } else { "" },
            esc(&k.key.name()),
            esc(m.field),
            esc(m.class),
            m.to,
            m.pkts,
            m.violates,
            esc(&k.key.name()),
            esc(&h.from),
            esc(&h.to),
            esc(m.class),
            esc(m.field),
            esc(&from.join(", ")),
            m.to,
            m.pkts,
            m.of,
            esc(&m.expected.to_string()),
            if m.violates { "yes" } else { "no" }
        );
    }
    s.push_str("</table>\n");
}

fn baseline_section(s: &mut String, r: &Report, b: Option<&Baseline>) {
    let Some(b) = b else {
        return;
    };
    let worse: Vec<&str> = compare(&b.figures, &r.figures, b.tolerance, b.slack)
        .iter()
        .map(|x| x.figure)
        .collect();
    let _ = writeln!(
        s,
        "<h2 id=\"baseline\">Against the baseline</h2><p class=\"note\">{} (tolerance {}, slack {}): {} figure(s) worse.</p>",
        esc(&b.file),
        b.tolerance,
        b.slack,
        worse.len()
    );
    s.push_str("<table class=\"baseline\"><tr><th>figure</th><th>baseline</th><th>now</th><th>worse</th></tr>\n");
    for ((name, base), (_, now)) in rates(&b.figures).into_iter().zip(rates(&r.figures)) {
        let bad = worse.contains(&name);
        let _ = writeln!(
            s,
            "<tr class=\"{}\" data-baseline-figure=\"{}\" data-baseline=\"{base}\" data-now=\"{now}\" data-worse=\"{bad}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            if bad { "bad" } else { "" },
            esc(name),
            esc(name),
            num(base),
            num(now),
            if bad { "WORSE" } else { "" }
        );
    }
    s.push_str("</table>\n");
}

fn alerts_section(s: &mut String, r: &Report, list: &[Row], max: usize) {
    s.push_str("<h2 id=\"alerts\">Alerts</h2>\n");
    if r.figures.alerts.is_empty() {
        s.push_str("<p class=\"note\">No alert recorded.</p>\n");
        return;
    }
    s.push_str("<table class=\"alert-rules\"><tr><th>rule</th><th>alerts</th></tr>\n");
    for (rule, n) in &r.figures.alerts {
        let _ = writeln!(
            s,
            "<tr data-alert-rule=\"{}\" data-count=\"{n}\"><td>{}</td><td class=\"n\">{n}</td></tr>",
            esc(rule),
            esc(rule)
        );
    }
    s.push_str("</table>\n");
    let total: i64 = r.figures.alerts.values().sum();
    let _ = writeln!(
        s,
        "<p class=\"note\">{} of {} alert records (at most {}), in time order:</p>",
        list.len(),
        total,
        max
    );
    s.push_str("<table class=\"alert-list\"><tr><th>time</th><th>host</th><th>interface</th><th>rule</th><th>severity</th></tr>\n");
    for a in list {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&fmt_us(int(a, "t"))),
            esc(&string(a, "host")),
            esc(&string(a, "iface")),
            esc(&string(a, "rule")),
            esc(&string(a, "severity"))
        );
    }
    s.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(8000.0), "8000");
        assert_eq!(short(15000.0), "15k");
        assert_eq!(short(2_100_000.0), "2.1M");
    }

    #[test]
    fn a_chart_is_an_svg_even_without_points() {
        let svg = chart("empty", "y", 0.0, &[]).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        let l = Line {
            label: "priority 3".into(),
            color: PALETTE[3],
            pts: vec![(0.0, 1.0), (1.0, 3.0)],
        };
        let svg = chart("one", "y", 2.0, &[l]).unwrap();
        assert!(svg.contains("<polyline") || svg.contains("<path"), "{svg}");
    }
}
