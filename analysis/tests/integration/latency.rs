//! The report's latency: the "QP latency" check (the `latency_high` rule over the flows
//! table's histograms, in SQL), the distribution per kind, the worst QPs by p99 over the run
//! and in one interval, in the text, JSON and HTML reports; over a tree the real datapath and
//! collector wrote from traffic of known latencies ([`LAT_CONNS`]), set against what those
//! latencies give by docs/latency.md and against the collector's own summary.json and alerts.

use std::collections::{BTreeMap, BTreeSet};

use observer_common::latency::{self, UPPER_NS};
use serde_json::Value;

use crate::support::{LAT_CONNS, LatConn, run, tmp, write_latency, write_latency_times};

fn ip(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

fn kind_of(c: &LatConn) -> &'static str {
    if c.read { "read" } else { "ack" }
}

/// A connection's samples (ns) in interval `iv`, or over both.
fn samples(c: &LatConn, iv: Option<usize>) -> Vec<u64> {
    let mut v: Vec<u64> = (0..2)
        .filter(|i| iv.is_none_or(|x| x == *i))
        .flat_map(|i| {
            c.intervals[i]
                .iter()
                .flat_map(|&(lat, n)| std::iter::repeat_n(lat, n as usize))
        })
        .collect();
    v.sort_unstable();
    v
}

/// The quantile num/den as docs/latency.md states it: the upper edge of the bucket holding the
/// sample of rank ceil(q n).
fn quantile(s: &[u64], num: usize, den: usize) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let rank = (num * s.len()).div_ceil(den).max(1);
    Some(UPPER_NS[latency::bucket(s[rank - 1])])
}

/// `roce-analyze html TREE -o DIR/report.html`, which must succeed; the page.
fn html_page(tree: &std::path::Path, dir: &std::path::Path) -> String {
    let page = dir.join("report.html");
    let out = run(&[
        "html".as_ref(),
        tree.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&page).unwrap()
}

fn check<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {r}"))
}

#[test]
fn the_report_judges_latency_and_ranks_the_worst_qps_by_p99() {
    let (_d, dir) = tmp("analyze-latency");
    let tree = dir.join("tree");
    let summary = write_latency(&tree, "h1");
    let out = run(&[
        "report".as_ref(),
        "--json".as_ref(),
        "--top".as_ref(),
        "10".as_ref(),
        tree.as_os_str(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a latency warning does not fail the run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The check: the default policy (p99 at most 1 ms with at least 100 samples) per key and
    // interval; by the traffic's design c1 in both intervals, c3 in the first only (its rank-99
    // sample of 100 is one of 3 slow ones; the second has 1 slow one, rank 100), c5's READs; not c4
    // (99 samples) nor c2 (fast).
    let c = check(&r, "QP latency");
    assert_eq!(c["verdict"], "Warn", "{c}");
    let fired: BTreeSet<(String, String, String)> = c["worst"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["part"].as_str().unwrap().to_string(),
                w["src"].as_str().unwrap().to_string(),
                format!("{}", w["qp"]),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        ("latency_ack", [10, 9, 0, 1], 0x301),
        ("latency_ack", [10, 9, 0, 5], 0x303),
        ("latency_read", [10, 9, 0, 9], 0x305),
    ]
    .into_iter()
    .map(|(p, a, q)| (p.to_string(), ip(a), q.to_string()))
    .collect();
    assert_eq!(fired, want, "{c}");
    let part = |p: &str| {
        c["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["part"] == p)
            .unwrap_or_else(|| panic!("{p}: {c}"))
            .clone()
    };
    let (ack, read) = (part("latency_ack"), part("latency_read"));
    assert_eq!(ack["subjects"], 2, "{ack}");
    assert_eq!(ack["violations"], 3, "{ack}");
    assert_eq!(ack["intervals"], 2, "{ack}");
    // figure: the samples at or over the threshold's bucket: c1's 150 + 150, c3's 3
    assert_eq!(ack["figure"], 303, "{ack}");
    assert_eq!(read["violations"], 1, "{read}");
    assert_eq!(read["figure"], 120, "{read}");
    // the collector's own rule fired for the same keys (held down after the first)
    let alerts: BTreeSet<(String, String, String)> = test_support::collector::alerts_jsonl(&tree)
        .into_iter()
        .filter(|a| a["rule"] == "latency_high" && a["summary"] == false)
        .map(|a| {
            (
                format!("latency_{}", a["subject"].as_str().unwrap()),
                a["src"].as_str().unwrap().to_string(),
                format!("{}", a["qp"]),
            )
        })
        .collect();
    assert_eq!(alerts, want, "alerts.jsonl");

    // Per kind: every sample, the quantiles of their buckets
    let l = &r["latency"];
    for k in ["ack", "read"] {
        let all: Vec<u64> = {
            let mut v: Vec<u64> = LAT_CONNS
                .iter()
                .filter(|c| kind_of(c) == k)
                .flat_map(|c| samples(c, None))
                .collect();
            v.sort_unstable();
            v
        };
        let got = l["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["kind"] == k)
            .unwrap_or_else(|| panic!("{k}: {l}"));
        assert_eq!(got["samples"], all.len(), "{got}");
        assert_eq!(got["unmatched"], 0, "{got}");
        for (f, n, d) in [
            ("p50_ns", 1, 2),
            ("p99_ns", 99, 100),
            ("p999_ns", 999, 1000),
        ] {
            assert_eq!(got[f].as_u64(), quantile(&all, n, d), "{k} {f}: {got}");
        }
        let mut buckets: BTreeMap<i64, i64> = BTreeMap::new();
        for s in &all {
            *buckets
                .entry(latency::index_of(latency::bucket(*s)) as i64)
                .or_default() += 1;
        }
        let got_b: BTreeMap<i64, i64> = got["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b[0].as_i64().unwrap(), b[1].as_i64().unwrap()))
            .collect();
        assert_eq!(got_b, buckets, "{k} buckets");
    }
    assert_eq!(l["ambiguous"], 0);
    assert_eq!(l["ring_full"], 0);
    assert_eq!(r["figures"]["latency_samples"], 899 + 120);

    // The worst QPs over the run: those with at least 100 samples by p99 then samples (c1 and
    // c3 share a p99 bucket: 4 slow of 200 hold rank 198; c1 has more samples; then c2), then
    // c4 (99 samples, the slowest)
    let order: Vec<(String, u64)> = l["worst_qps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "ack")
        .map(|w| {
            (
                w["src"].as_str().unwrap().to_string(),
                w["p99_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    let by_src = |a: [u8; 4]| LAT_CONNS.iter().find(|c| c.src == a).unwrap();
    let want_order: Vec<(String, u64)> =
        [[10, 9, 0, 1], [10, 9, 0, 5], [10, 9, 0, 3], [10, 9, 0, 7]]
            .into_iter()
            .map(|a| (ip(a), quantile(&samples(by_src(a), None), 99, 100).unwrap()))
            .collect();
    assert_eq!(order, want_order, "{l}");
    // ... and the same samples and p99 as the collector's summary.json per key
    let sum = summary["latency"].as_array().expect("summary latency");
    for w in l["worst_qps"].as_array().unwrap() {
        let k = w["kind"].as_str().unwrap();
        let s = sum
            .iter()
            .find(|q| q["src"] == w["src"] && q["qp"] == w["qp"])
            .unwrap_or_else(|| panic!("{w} not in summary.json"));
        assert_eq!(s[k]["samples"], w["samples"], "{w} / {s}");
        assert_eq!(
            s[k]["p99_us"].as_f64(),
            w["p99_ns"].as_u64().map(|v| v as f64 / 1e3),
            "{w} / {s}"
        );
        assert_eq!(w["keys"], if k == "ack" { 4 } else { 1 });
    }
    // The worst (key, interval) pairs: at least 100 samples, by p99 then samples: c1's two,
    // c3's first, then the fast ones
    let ivs: Vec<(String, i64, u64)> = l["worst_intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "ack")
        .map(|w| {
            (
                w["src"].as_str().unwrap().to_string(),
                w["t0_us"].as_i64().unwrap(),
                w["samples"].as_u64().unwrap(),
            )
        })
        .collect();
    let t = |i: i64| (crate::support::LAT_T0 / 1000) as i64 + i * 1_000_000;
    assert_eq!(
        ivs,
        vec![
            (ip([10, 9, 0, 1]), t(0), 150),
            (ip([10, 9, 0, 1]), t(1), 150),
            (ip([10, 9, 0, 5]), t(0), 100),
            (ip([10, 9, 0, 3]), t(0), 150),
            (ip([10, 9, 0, 3]), t(1), 150),
            (ip([10, 9, 0, 5]), t(1), 100),
        ],
        "{l}"
    );
    for w in l["worst_intervals"].as_array().unwrap() {
        let c = LAT_CONNS.iter().find(|c| ip(c.src) == w["src"]).unwrap();
        let iv = ((w["t0_us"].as_i64().unwrap() - t(0)) / 1_000_000) as usize;
        let s = samples(c, Some(iv));
        assert_eq!(w["p99_ns"].as_u64(), quantile(&s, 99, 100), "{w}");
        assert_eq!(w["p50_ns"].as_u64(), quantile(&s, 1, 2), "{w}");
    }

    // A stricter policy: p99 at most 10 ms fires for none; 0 turns the check off
    for (th, verdict, words) in [
        (
            "10000",
            "Pass",
            "no key's ACK round trip or READ latency p99",
        ),
        ("0", "Pass", "not checked"),
    ] {
        let pol = dir.join(format!("policy-{th}.toml"));
        std::fs::write(&pol, format!("[thresholds]\nlatency_p99_us = {th}\n")).unwrap();
        let out = run(&[
            "report".as_ref(),
            "--json".as_ref(),
            "--policy".as_ref(),
            pol.as_os_str(),
            tree.as_os_str(),
        ]);
        let r: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let c = check(&r, "QP latency");
        assert_eq!(c["verdict"], verdict, "{th}: {c}");
        assert!(c["detail"].as_str().unwrap().contains(words), "{th}: {c}");
    }

    // The text report names the check, the kinds and the worst QP
    let out = run(&["report".as_ref(), tree.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("WARN  QP latency"), "{text}");
    assert!(text.contains("latency (bucket upper edges"), "{text}");
    // 2 ms samples: their bucket (2^-9 s, 2^-8.75 s] ends at 2.32 ms
    let line = format!(
        "worst QP   h1/lat0/ingress 10.9.0.1 -> 10.9.0.2 qp 0x000301: p99 {}",
        analysis::report::fmt_ns(Some(UPPER_NS[latency::bucket(2_000_000)]))
    );
    assert!(line.ends_with("p99 2.32 ms"), "{line}");
    assert!(text.contains(&line), "{text}");

    // One key's timeline (report --qp): its intervals' ACK samples and p99
    let out = run(&[
        "report".as_ref(),
        "--json".as_ref(),
        "--qp".as_ref(),
        "0x303".as_ref(),
        tree.as_os_str(),
    ]);
    let tr: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = tr["timeline"].as_array().expect("a timeline");
    let c3 = LAT_CONNS.iter().find(|c| c.qp == 0x303).unwrap();
    let got: Vec<(u64, f64)> = rows
        .iter()
        .filter(|r| r["src"] == ip(c3.src))
        .map(|r| {
            (
                r["ack_samples"].as_u64().unwrap(),
                r["ack_p99_us"].as_f64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(u64, f64)> = (0..2)
        .map(|iv| {
            let s = samples(c3, Some(iv));
            (s.len() as u64, quantile(&s, 99, 100).unwrap() as f64 / 1e3)
        })
        .collect();
    assert_eq!(got, want, "{tr}");
    assert_eq!(rows.len(), 2, "{tr}");
    let out = run(&[
        "report".as_ref(),
        "--qp".as_ref(),
        "0x303".as_ref(),
        tree.as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ack p99"), "{text}");
    assert!(
        text.contains(&analysis::report::fmt_ns(Some(
            UPPER_NS[latency::bucket(2_000_000)]
        ))),
        "{text}"
    );

    // The HTML page: the kinds' table and a distribution chart per kind, the worst tables
    let html = html_page(&tree, &dir);
    for k in ["ack", "read"] {
        let got = &r["latency"]["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["kind"] == k)
            .unwrap()
            .clone();
        let row = format!(
            "data-kind=\"{k}\" data-samples=\"{}\" data-p50-ns=\"{}\" data-p99-ns=\"{}\"",
            got["samples"], got["p50_ns"], got["p99_ns"]
        );
        assert!(html.contains(&row), "{row}");
        let chart = format!(
            "data-latency-chart=\"{k}\" data-buckets=\"{}\"><svg",
            got["buckets"].as_array().unwrap().len()
        );
        assert!(html.contains(&chart), "{chart}");
    }
    assert!(html.contains("<table class=\"latency-qps\">"));
    assert!(html.contains("<table class=\"latency-intervals\">"));
    assert_eq!(
        html.matches("data-kind=\"ack\" data-subject=").count(),
        4 + 5,
        "4 keys over the run, 5 intervals (--top 5)"
    );
}

#[test]
fn a_tree_without_latency_says_so() {
    let (_d, dir) = tmp("analyze-no-latency");
    crate::support::write_logs(&dir, &["clean"]);
    let out = run(&["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = check(&r, "QP latency");
    assert_eq!(c["verdict"], "Info", "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("replay --latency"),
        "{c}"
    );
    assert_eq!(r["latency"]["kinds"], serde_json::json!([]));
    let html = html_page(&dir, &dir);
    assert!(html.contains("No latency samples in these trees"));
    assert!(!html.contains("data-latency-chart"));
}

#[test]
fn compare_flags_a_p99_that_got_worse_and_skips_runs_without_latency() {
    let (_d, dir) = tmp("analyze-latency-compare");
    let (fast, slow, none) = (dir.join("fast"), dir.join("slow"), dir.join("none"));
    write_latency(&fast, "h1");
    // every latency 3x: the ACK p99 from 2.32 ms to the bucket of 6 ms, the READ's from 5.5
    // to the bucket of 15 ms
    write_latency_times(&slow, "h1", 3);
    crate::support::write_logs(&none, &["clean"]);
    let golden = dir.join("golden.json");
    let out = run(&[
        "baseline".as_ref(),
        fast.as_os_str(),
        "-o".as_ref(),
        golden.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b: Value = serde_json::from_slice(&std::fs::read(&golden).unwrap()).unwrap();
    let edge_us = |ns: u64| UPPER_NS[latency::bucket(ns)] as f64 / 1e3;
    assert_eq!(
        b["latency_ack_p99_us"].as_f64(),
        Some(edge_us(2_000_000)),
        "{b}"
    );
    assert_eq!(
        b["latency_read_p99_us"].as_f64(),
        Some(edge_us(5_000_000)),
        "{b}"
    );
    let cmp = |tree: &std::path::Path| {
        let o = run(&["compare".as_ref(), golden.as_os_str(), tree.as_os_str()]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, text) = cmp(&slow);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("ACK round trip p99 µs"), "{text}");
    assert!(text.contains("READ latency p99 µs"), "{text}");
    let (code, text) = cmp(&fast);
    assert_eq!(code, Some(0), "the same run: {text}");
    // a tree without latency samples is not a latency regression
    let (code, text) = cmp(&none);
    assert!(!text.contains("WORSE"), "{text}");
    assert_eq!(code, Some(0), "{text}");
}
