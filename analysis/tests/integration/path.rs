//! `roce-analyze path` over trees written by `roce-observe replay` (its `run`, in this process)
//! from generated captures: one capture as the sender's egress, a copy with chosen packets
//! re-marked (DSCP, PCP, ECN) and dropped as the receiver's ingress; the changes and losses
//! reported must be exactly those made.

use std::path::{Path, PathBuf};

use crate::support::corpus::{self, Rec, Roce};
use crate::support::tmp;
use clap::Parser;
use serde_json::Value;

/// Capture time zero: a whole second, so intervals of 1 s start on it.
const T0: u64 = 1_700_000_000_000_000_000;
/// Packets per key in a full capture: one every 20 ms for 6 s.
const N: u32 = 300;

/// Packet `i` of key `k` (keys 1-5 of every capture, 6-8 for keys seen at one point or at
/// different times): sent at T0 + i x 20 ms + k ms, PSN 1000 + i.
fn base(k: u64, i: u32) -> Roce {
    let psn = 1000 + i;
    match k {
        1 => Roce::v4([10, 77, 1, 1], [10, 77, 1, 2], 0x11, psn),
        2 => Roce::v4([10, 77, 1, 1], [10, 77, 1, 2], 0x12, psn),
        3 => Roce::v4([10, 77, 1, 2], [10, 77, 1, 1], 0x21, psn).ack(0),
        4 => Roce::v4([10, 77, 1, 2], [10, 77, 1, 1], 0x22, psn).cnp(),
        5 => Roce::v4([10, 77, 1, 3], [10, 77, 1, 4], 0x31, psn).tags(&[]),
        6 => Roce::v4([10, 77, 1, 5], [10, 77, 1, 6], 0x41, psn),
        7 => Roce::v4([10, 77, 1, 7], [10, 77, 1, 8], 0x51, psn),
        8 => Roce::v4([10, 77, 1, 9], [10, 77, 1, 10], 0x61, psn),
        // the fleet: A1, A2 from 10.77.2.1, B1 from 10.77.3.1
        11 => Roce::v4([10, 77, 2, 1], [10, 77, 2, 2], 0x101, psn),
        12 => Roce::v4([10, 77, 2, 1], [10, 77, 2, 2], 0x102, psn),
        13 => Roce::v4([10, 77, 3, 1], [10, 77, 3, 2], 0x201, psn),
        _ => unreachable!(),
    }
}

fn ts(k: u64, i: u32) -> u64 {
    T0 + i as u64 * 20_000_000 + (k % 10) * 1_000_000
}

/// The packets `f(key, i)` returns for every key of `keys` and i < N, in time order; with
/// `clock`, a non-RoCE frame at T0 and one at T0 + 6 s, so that every tree's intervals start
/// and end at the same times.
fn capture(keys: &[u64], clock: bool, f: impl Fn(u64, u32) -> Option<Roce>) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<(u64, Vec<u8>)> = keys
        .iter()
        .flat_map(|&k| (0..N).map(move |i| (k, i)))
        .filter_map(|(k, i)| f(k, i).map(|r| (ts(k, i), r.frame())))
        .collect();
    if clock {
        let tick = corpus::udp_frame([10, 77, 0, 1], [10, 77, 0, 2], 1234, 5678, b"clock");
        out.push((T0, tick.clone()));
        out.push((T0 + 6_000_000_000, tick));
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Writes a capture: pcapng with every packet outbound (the sender's tc egress), named
/// `<stem>.pcapng`, interface `eth0`; or pcap (ingress).
fn write(dir: &Path, stem: &str, pkts: &[(u64, Vec<u8>)], egress: bool) -> PathBuf {
    let recs: Vec<Rec> = pkts
        .iter()
        .map(|(t, d)| Rec {
            ts_ns: *t,
            data: d.clone(),
            iface: 0,
            epb_flags: if egress { 2 } else { 0 },
        })
        .collect();
    let path = dir.join(format!("{stem}.{}", if egress { "pcapng" } else { "pcap" }));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    if egress {
        corpus::write_pcapng(&mut w, &[(corpus::LINKTYPE_ETHERNET, "eth0", 9)], &recs).unwrap();
    } else {
        corpus::write_pcap(&mut w, corpus::LINKTYPE_ETHERNET, 65535, true, &recs).unwrap();
    }
    std::io::Write::flush(&mut w).unwrap();
    path
}

#[derive(Parser)]
struct ReplayCli {
    #[command(flatten)]
    args: observer::commands::replay::ReplayArgs,
}

/// `roce-observe replay --out OUT --host HOST FILE` (the command's own `run`).
fn replay(out: &Path, host: &str, file: &Path) {
    replay_every(out, host, file, "1s");
}

/// The same with `--interval INTERVAL`.
fn replay_every(out: &Path, host: &str, file: &Path, interval: &str) {
    replay_with(out, host, file, &["--interval", interval]);
}

/// The same with more options.
fn replay_with(out: &Path, host: &str, file: &Path, extra: &[&str]) {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "replay".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
        "--host".as_ref(),
        host.as_ref(),
    ];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    args.push(file.as_os_str());
    let cli = ReplayCli::try_parse_from(args).unwrap();
    observer::commands::replay::run(cli.args).unwrap();
}

/// A tree for `host` from a capture.
fn tree(root: &Path, host: &str, stem: &str, pkts: &[(u64, Vec<u8>)], egress: bool) -> PathBuf {
    let caps = root.join("captures");
    std::fs::create_dir_all(&caps).unwrap();
    let out = root.join(host);
    replay(&out, host, &write(&caps, stem, pkts, egress));
    out
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn analyze(args: &[&std::ffi::OsStr]) -> Run {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roce-analyze"))
        .args(args)
        .output()
        .unwrap();
    Run {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `roce-analyze path --json DIRS...`: exit status and the document.
fn path_json(dirs: &[&Path]) -> (Option<i32>, Value) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["path".as_ref(), "--json".as_ref()];
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    let r = analyze(&args);
    let j = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", r.stdout, r.stderr));
    (r.code, j)
}

fn path_text(dirs: &[&Path]) -> Run {
    let mut args: Vec<&std::ffi::OsStr> = vec!["path".as_ref()];
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    analyze(&args)
}

/// The compared key with BTH destination QP `qp`.
fn key(j: &Value, qp: i64) -> &Value {
    j["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["qp"] == qp)
        .unwrap_or_else(|| panic!("qp {qp:#x} not compared: {j:#}"))
}

fn names(k: &Value) -> Vec<&str> {
    k["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["point"].as_str().unwrap())
        .collect()
}

/// (line, violates) of every change of hop `h` of key `k`.
fn changes(k: &Value, h: usize) -> Vec<(String, bool)> {
    k["hops"][h]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["line"].as_str().unwrap().to_string(),
                c["violates"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The egress capture of keys 1-5 (key 4's CNPs sent at DSCP 0 when i % 10 == 5) plus key 6
/// (its first 50 packets), and the ingress copy: key 1 DSCP 26 -> 0 (i % 10 == 3) and CE
/// (i % 25 == 7), 6 dropped (i % 50 == 20); key 2 PCP 3 -> 5 (i % 20 == 0), tag removed
/// (i % 40 == 2), ECN 2 -> 0 (i % 30 == 1); key 3's ACKs DSCP 26 -> 24 (i % 15 == 0); key 4's
/// CNPs all at 48; key 5: 4 dropped (i % 75 == 40); key 6 absent, key 7 only here (i in
/// 100..150).
fn sender(k: u64, i: u32) -> Option<Roce> {
    let r = base(k, i);
    match k {
        4 if i % 10 == 5 => Some(r.mark(0, 2)),
        6 if i >= 50 => None,
        7 => None,
        _ => Some(r),
    }
}

fn receiver(k: u64, i: u32) -> Option<Roce> {
    let r = base(k, i);
    Some(match k {
        1 if i % 50 == 20 => return None,
        1 if i % 10 == 3 => r.mark(0, 2),
        1 if i % 25 == 7 => r.mark(26, 3),
        2 if i.is_multiple_of(20) => r.tags(&[(0x8100, 5)]),
        2 if i % 40 == 2 => r.tags(&[]),
        2 if i % 30 == 1 => r.mark(26, 0),
        3 if i.is_multiple_of(15) => r.mark(24, 2),
        5 if i % 75 == 40 => return None,
        6 => return None,
        7 if !(100..150).contains(&i) => return None,
        _ => r,
    })
}

/// (a) + (d): every change and loss made on the way is reported with its exact count; the
/// changes against the policy make the exit status 1; keys at one point are listed, not lost.
#[test]
fn remarked_and_lossy_copy_reports_exactly_what_was_done() {
    let (_root, root) = tmp("path-remarked");
    let keys = [1, 2, 3, 4, 5, 6, 7];
    let a = tree(&root, "a", "h1", &capture(&keys, true, sender), true);
    let b = tree(
        &root,
        "b",
        "h2-eth0",
        &capture(&keys, true, receiver),
        false,
    );
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(1), "changes against the policy: {j:#}");
    let (pa, pb) = ("a/h1:eth0/egress", "b/h2-eth0/ingress");

    let k1 = key(&j, 0x11);
    assert_eq!(names(k1), [pa, pb]);
    assert_eq!(k1["hops"][0]["lost"]["data"], 6);
    assert_eq!(k1["hops"][0]["ce_added"], 12);
    assert_eq!(
        changes(k1, 0),
        [
            (
                format!("data DSCP 26 → 0 between {pa} and {pb}: 30 of 300 packets"),
                true
            ),
            (
                format!("data ECN 2 → 3 between {pa} and {pb}: 12 of 300 packets"),
                false
            ),
        ]
    );
    assert_eq!(k1["first_gap"], pb);
    assert_eq!(k1["points"][1]["psn_gaps"], 6);
    assert_eq!(k1["points"][0]["hists"]["dscp_data"]["26"], 300);
    assert_eq!(k1["points"][1]["hists"]["dscp_data"]["0"], 30);

    let k2 = key(&j, 0x12);
    assert_eq!(k2["hops"][0]["lost"]["data"], 0);
    assert_eq!(
        changes(k2, 0),
        [
            (
                // the profile checks the PCP of tagged frames (3 for data); untagged passes
                format!("data PCP 3 → 5 between {pa} and {pb}: 15 of 300 packets"),
                true
            ),
            (
                format!("data PCP 3 → untagged between {pa} and {pb}: 8 of 300 packets"),
                false
            ),
            (
                format!("data ECN 2 → 0 between {pa} and {pb}: 10 of 300 packets"),
                true
            ),
        ]
    );
    assert_eq!(k2["first_gap"], Value::Null);
    assert_eq!(
        changes(key(&j, 0x21), 0),
        [(
            format!("ack DSCP 26 → 24 between {pa} and {pb}: 20 of 300 packets"),
            true
        )]
    );
    let k4 = key(&j, 0x22);
    assert_eq!(
        changes(k4, 0),
        [(
            format!("cnp DSCP 0 → 48 between {pa} and {pb}: 30 of 300 packets"),
            false
        )],
        "toward the expected value: shown, not a failure"
    );
    assert_eq!(k4["hops"][0]["lost"]["cnp"], 0);
    let k5 = key(&j, 0x31);
    assert_eq!(k5["hops"][0]["lost"]["data"], 4);
    assert!(changes(k5, 0).is_empty());
    assert_eq!(k5["first_gap"], pb);

    // (d) keys at one point: listed with their packets, never counted as lost
    let one: Vec<(i64, &str, i64)> = j["one_point"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["qp"].as_i64().unwrap(),
                k["points"][0]["point"].as_str().unwrap(),
                k["points"][0]["pkts"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(one, [(0x41, pa, 50), (0x51, pb, 50)]);

    let t = &j["totals"];
    assert_eq!(t["keys"], 5);
    assert_eq!(t["pkts"], 5 * N as i64, "each key once, at its first point");
    assert_eq!(t["data_pkts"], 3 * N as i64);
    assert_eq!(t["lost_data"], 10, "keys at one point are not losses");
    assert_eq!(t["changes"], 7);
    assert_eq!(
        t["violations"], 4,
        "DSCP, ECN, ACK DSCP and the tagged PCP 3 -> 5"
    );
    assert_eq!(j["expected"]["dscp"], serde_json::json!(["26", "26", "48"]));

    let text = path_text(&[&a, &b]);
    assert_eq!(text.code, Some(1));
    assert!(
        text.stdout.contains(&format!(
            "FAIL data DSCP 26 → 0 between {pa} and {pb}: 30 of 300 packets (expected 26)"
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!(
            "FAIL data PCP 3 → 5 between {pa} and {pb}: 15 of 300 packets (expected 3 when tagged)"
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("PSN gaps first at b/h2-eth0/ingress: 6 gaps, 6 PSNs missing")
    );
    assert!(
        text.stdout.contains("7 changes, 4 against the policy"),
        "{}",
        text.stdout
    );
}

/// (b) The same capture at both points: nothing changed, nothing lost, exit 0.
#[test]
fn the_same_capture_at_both_points_changes_nothing() {
    let (_root, root) = tmp("path-same");
    let pkts = capture(&[1, 2, 3, 4, 5], true, |k, i| Some(base(k, i)));
    let a = tree(&root, "a", "h1", &pkts, true);
    let b = tree(&root, "b", "h2-eth0", &pkts, false);
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 5);
    assert_eq!(j["totals"]["changes"], 0);
    assert_eq!(j["totals"]["lost_data"], 0);
    for k in j["keys"].as_array().unwrap() {
        let h = &k["hops"][0];
        assert_eq!(
            h["lost"],
            serde_json::json!({"data": 0, "ack": 0, "cnp": 0}),
            "{k:#}"
        );
        assert_eq!(h["ce_added"], 0);
        assert_eq!(k["points"][0]["pkts"], N as i64);
        assert_eq!(k["points"][0]["rows"], 6, "six 1 s intervals");
        assert_eq!(k["points"][0]["excluded_rows"], 0);
        assert_eq!(k["spans_differ"], false);
    }
    assert!(j["one_point"].as_array().unwrap().is_empty());
    let text = path_text(&[&a, &b]);
    assert_eq!(text.code, Some(0));
    assert!(
        text.stdout.contains("0 changes, 0 against the policy"),
        "{}",
        text.stdout
    );
}

/// Two ingress captures of the same packets, the second with key 1's data bleached from DSCP
/// 26 to 0: nothing in the data says which point is upstream (same direction, same packets).
/// Given either way round the bleach fails (it once read, the other way round, as `ok DSCP
/// 0 → 26 ... 0 against the policy`, exit 0), and the output says how the order was decided.
#[test]
fn a_bleach_fails_whichever_order_the_trees_are_given_in() {
    let (_root, root) = tmp("path-order");
    let up = capture(&[1, 2], true, |k, i| Some(base(k, i)));
    let down = capture(&[1, 2], true, |k, i| {
        Some(match k {
            1 => base(k, i).mark(0, 2),
            _ => base(k, i),
        })
    });
    let a = tree(&root, "up", "up", &up, false);
    let b = tree(&root, "down", "down", &down, false);
    for (order, dirs) in [("up first", [&*a, &*b]), ("down first", [&*b, &*a])] {
        let (code, j) = path_json(&dirs);
        assert_eq!(code, Some(1), "{order}: {j:#}");
        let k = key(&j, 0x11);
        assert_eq!(k["hops"][0]["order"], "command line", "{order}: {k:#}");
        let c = changes(k, 0);
        assert_eq!(c.len(), 1, "{order}: {c:?}");
        assert!(c[0].1, "{order}: the change must fail: {c:?}");
        assert!(
            c[0].0.contains(&format!("of {N} packets")),
            "{order}: {c:?}"
        );
        assert_eq!(j["totals"]["violations"], 1, "{order}: {:#}", j["totals"]);
        let text = path_text(&dirs);
        assert_eq!(text.code, Some(1));
        assert!(
            text.stdout
                .contains("(order: command-line order: the data does not tell)"),
            "{order}: {}",
            text.stdout
        );
    }
    // with the direction known (the sender's egress first), the order is the data's
    let e = tree(&root, "egress", "egress", &up, true);
    let (code, j) = path_json(&[&b, &e]);
    assert_eq!(code, Some(1), "{j:#}");
    let k = key(&j, 0x11);
    assert_eq!(k["hops"][0]["order"], "direction");
    assert!(changes(k, 0)[0].0.contains("26 → 0"), "{k:#}");
}

/// (c) Trees that overlap for part of the time: the second capture holds 1.5 s to 4.5 s of the
/// first. Only the whole intervals both cover (2 s to 4 s) are compared, so nothing is lost;
/// the first tree leaves out 4 rows per key, the second 2 (its short first and last rows).
#[test]
fn partial_overlap_compares_only_the_common_intervals() {
    let (_root, root) = tmp("path-overlap");
    let keys = [1, 2, 3, 4, 5];
    let a = tree(
        &root,
        "a",
        "h1",
        &capture(&keys, false, |k, i| Some(base(k, i))),
        true,
    );
    let part = |k, i| (75..225).contains(&i).then(|| base(k, i));
    let b = tree(&root, "b", "h2-eth0", &capture(&keys, false, part), false);
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 5);
    let us = (T0 / 1000) as i64;
    for k in j["keys"].as_array().unwrap() {
        assert_eq!(k["start_us"], us + 2_000_000, "{k:#}");
        assert_eq!(k["end_us"], us + 4_000_000);
        let (p0, p1) = (&k["points"][0], &k["points"][1]);
        assert_eq!((&p0["rows"], &p1["rows"]), (&2.into(), &2.into()));
        assert_eq!((&p0["pkts"], &p1["pkts"]), (&100.into(), &100.into()));
        assert_eq!(p0["excluded_rows"], 4);
        assert_eq!(p0["excluded_pkts"], 200);
        assert_eq!(p1["excluded_rows"], 2);
        assert_eq!(p1["excluded_pkts"], 50);
        assert_eq!(k["hops"][0]["lost"]["data"], 0);
        assert!(k["hops"][0]["changes"].as_array().unwrap().is_empty());
        assert_eq!(k["spans_differ"], false);
    }
    let excluded: Vec<(&str, i64)> = j["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["excluded_rows"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        excluded,
        [("a/h1:eth0/egress", 20), ("b/h2-eth0/ingress", 10)]
    );
}

/// (c2) Live trees: two observers whose intervals tick on the same seconds but each a few
/// milliseconds late, in turn one before the other (begin 0 and 5 ms, ends 6.2 s and 6.1 s).
/// No packet falls between two observers' ticks, so every row has its twin at the other point:
/// every row is compared at both, nothing is lost, and key 0x12's half re-marked DSCP is counted
/// exactly. (Matched by the exact ends of the rows, the second point kept only 2 of its rows
/// against the first's 4, and half of 0x12's packets looked lost.)
#[test]
fn intervals_a_few_milliseconds_apart_compare_the_same_rows() {
    use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
    use observer::sources::datapath::Datapath;
    use observer_common::maps::dir;
    let (_root, root) = tmp("path-jitter");
    let ms = |x: u64| T0 + x * 1_000_000;
    // keys 1 and 2 (QPs 0x11, 0x12) from 21 and 22 ms on, every 20 ms: nothing at 5-12 ms
    // past a second, where the ticks are
    let sent = capture(&[1, 2], false, |k, i| (i > 0).then(|| base(k, i)));
    let received = capture(&[1, 2], false, |k, i| match (k, i) {
        (_, 0) => None,
        (2, i) if i.is_multiple_of(2) => Some(base(k, i).mark(24, 2)),
        _ => Some(base(k, i)),
    });
    let observe = |host: &str, d: u8, frames: &[(u64, Vec<u8>)], ticks: &[u64]| {
        let out = root.join(host);
        let policy = PolicyConfig::profile("nvidia").unwrap();
        let mut col = Collector::new(CollectorConfig::new(
            out.clone(),
            host,
            "live",
            policy.clone(),
        ))
        .unwrap();
        let mut dp = Datapath::new(policy.expected, 1000);
        col.begin("eth0", ms(ticks[0]), None);
        let mut next = ticks[1..].iter().map(|&t| ms(t)).peekable();
        for (t, f) in frames {
            while let Some(tick) = next.next_if(|tick| tick <= t) {
                col.on_snapshot(&dp.snapshot("eth0", tick, None)).unwrap();
            }
            dp.process(f, f.len() as u32, *t, d);
            col.on_events("eth0", &dp.take_events());
        }
        for tick in next {
            col.on_snapshot(&dp.snapshot("eth0", tick, None)).unwrap();
        }
        col.finish().unwrap();
        out
    };
    let a = observe(
        "h1",
        dir::EGRESS,
        &sent,
        &[0, 1012, 2005, 3012, 4005, 5005, 6200],
    );
    let b = observe(
        "h2",
        dir::INGRESS,
        &received,
        &[5, 1005, 2012, 3005, 4012, 5012, 6100],
    );
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(1), "DSCP 24 is against the profile: {j:#}");
    assert_eq!(j["totals"]["keys"], 2, "{j:#}");
    let (pa, pb) = ("h1/eth0/egress", "h2/eth0/ingress");
    for qp in [0x11, 0x12] {
        let k = key(&j, qp);
        assert_eq!(names(k), [pa, pb]);
        for p in 0..2 {
            let pt = &k["points"][p];
            assert_eq!(
                (&pt["rows"], &pt["pkts"], &pt["excluded_rows"]),
                (&6.into(), &(N as i64 - 1).into(), &0.into()),
                "qp {qp:#x} point {p}: {pt:#}"
            );
        }
        assert_eq!(k["hops"][0]["lost"]["data"], 0, "{k:#}");
        assert_eq!(k["spans_differ"], true, "the ends differ by milliseconds");
    }
    assert!(changes(key(&j, 0x11), 0).is_empty());
    assert_eq!(
        changes(key(&j, 0x12), 0),
        [(
            format!("data DSCP 26 → 24 between {pa} and {pb}: 149 of 299 packets"),
            true
        )]
    );
    let text = path_text(&[&a, &b]);
    assert!(
        text.stdout
            .contains("(their compared rows start 5.0 ms and end 100.0 ms apart)"),
        "{}",
        text.stdout
    );
}

/// (d) Keys seen at one point only, and a key seen at both points at different times: listed
/// apart, not compared, not losses; the run passes.
#[test]
fn keys_at_one_point_or_at_different_times_are_listed_not_lost() {
    let (_root, root) = tmp("path-one-point");
    let a_keys = |k, i| match k {
        6 => (i < 50).then(|| base(k, i)),
        8 => (i < 50).then(|| base(k, i)),
        _ => Some(base(k, i)),
    };
    let b_keys = |k, i| match k {
        7 => (100..150).contains(&i).then(|| base(k, i)),
        8 => (200..250).contains(&i).then(|| base(k, i)),
        _ => Some(base(k, i)),
    };
    let a = tree(&root, "a", "h1", &capture(&[1, 6, 8], true, a_keys), true);
    let b = tree(
        &root,
        "b",
        "h2-eth0",
        &capture(&[1, 7, 8], true, b_keys),
        false,
    );
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 1);
    assert_eq!(j["totals"]["lost_data"], 0);
    assert_eq!(j["totals"]["pkts"], N as i64);
    let qps = |list: &str| -> Vec<i64> {
        j[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["qp"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(qps("one_point"), [0x41, 0x51]);
    assert_eq!(qps("no_common_time"), [0x61]);
    let spans = &j["no_common_time"][0]["points"];
    assert_eq!(spans[0]["pkts"], 50);
    assert_eq!(spans[1]["pkts"], 50);
    let text = path_text(&[&a, &b]);
    assert!(
        text.stdout.contains("keys at one point (not compared):")
            && text
                .stdout
                .contains("10.77.1.5 > 10.77.1.6 qp 0x000041 at a/h1:eth0/egress: 50 packets"),
        "{}",
        text.stdout
    );
}

/// (e) A fleet: five trees (two senders' egress, two receivers' ingress, a switch mirror that
/// sees both flows), given in an order that is not the path's. A1 loses 5 packets between the
/// mirror and h2; A2 leaves h1 at DSCP 0 and the switch re-marks it to 26 (toward the policy:
/// shown, exit 0).
#[test]
fn a_fleet_of_trees_orders_points_along_the_path() {
    let (_root, root) = tmp("path-fleet");
    let a_sent = |k, i| {
        Some(if k == 12 {
            base(k, i).mark(0, 2)
        } else {
            base(k, i)
        })
    };
    let h1 = tree(&root, "h1", "h1", &capture(&[11, 12], true, a_sent), true);
    let h3 = tree(
        &root,
        "h3",
        "h3",
        &capture(&[13], true, |k, i| Some(base(k, i))),
        true,
    );
    let all = |k, i| Some(base(k, i));
    let sw = tree(
        &root,
        "sw",
        "mirror",
        &capture(&[11, 12, 13], true, all),
        false,
    );
    let a_recv = |k, i| (k != 11 || i % 60 != 30).then(|| base(k, i));
    let h2 = tree(
        &root,
        "h2",
        "h2-eth0",
        &capture(&[11, 12], true, a_recv),
        false,
    );
    let h4 = tree(&root, "h4", "h4-eth0", &capture(&[13], true, all), false);
    let (code, j) = path_json(&[&h4, &h2, &sw, &h3, &h1]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["points"].as_array().unwrap().len(), 5);
    let (p1, p2, p3, p4, psw) = (
        "h1/h1:eth0/egress",
        "h2/h2-eth0/ingress",
        "h3/h3:eth0/egress",
        "h4/h4-eth0/ingress",
        "sw/mirror/ingress",
    );
    // more packets first (the mirror before h2, though h2 was given first)
    let a1 = key(&j, 0x101);
    assert_eq!(names(a1), [p1, psw, p2]);
    assert_eq!(a1["hops"][0]["lost"]["data"], 0);
    assert_eq!(a1["hops"][1]["lost"]["data"], 5);
    assert_eq!(a1["first_gap"], p2);
    // a tie: the tree given first (h2 before the mirror; h4 before the mirror)
    let a2 = key(&j, 0x102);
    assert_eq!(names(a2), [p1, p2, psw]);
    assert_eq!(
        changes(a2, 0),
        [(
            format!("data DSCP 0 → 26 between {p1} and {p2}: 300 of 300 packets"),
            false
        )]
    );
    assert!(changes(a2, 1).is_empty());
    assert_eq!(names(key(&j, 0x201)), [p3, p4, psw]);
    let t = &j["totals"];
    assert_eq!(t["keys"], 3);
    assert_eq!(t["pkts"], 3 * N as i64, "each key once, not once per point");
    assert_eq!(t["lost_data"], 5);
    assert_eq!((&t["changes"], &t["violations"]), (&1.into(), &0.into()));
}

/// Every flows file below `dir`.
fn flows_files(dir: &Path) -> Vec<PathBuf> {
    table_files(dir, "flows")
}

/// Every file of table `table` below `dir`.
fn table_files(dir: &Path, table: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join(table)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out
}

/// (f) A missing directory, a directory without flow logs and a corrupt Parquet file are
/// errors naming the path, exit status 2 (1 is kept for marking changes); usage errors exit 2.
#[test]
fn errors_name_the_path() {
    let (_root, root) = tmp("path-errors");
    let pkts = capture(&[1], true, |k, i| Some(base(k, i)));
    let a = tree(&root, "a", "h1", &pkts, true);
    let missing = root.join("missing");
    let r = path_text(&[&a, &missing]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(&*missing.to_string_lossy()) && r.stderr.contains("does not exist"),
        "{}",
        r.stderr
    );
    let r = path_text(&[&a, &root.join("captures")]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("no flow logs"), "{}", r.stderr);

    let b = tree(&root, "b", "h2-eth0", &pkts, false);
    let f = flows_files(&b)[0].clone();
    let mut bytes = std::fs::read(&f).unwrap();
    let n = bytes.len();
    bytes[n - 9] ^= 0xff; // the footer's last byte
    std::fs::write(&f, &bytes).unwrap();
    let r = path_text(&[&a, &b]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains(&*f.to_string_lossy()), "{}", r.stderr);

    assert_eq!(analyze(&["path".as_ref()]).code, Some(2), "no directory");
    let r = analyze(&[
        "path".as_ref(),
        "--profile".as_ref(),
        "cisco".as_ref(),
        a.as_os_str(),
    ]);
    assert_eq!(r.code, Some(2));
    // a usage error naming the value and the profiles there are
    assert!(
        r.stderr.contains("'cisco'") && r.stderr.contains("possible values: nvidia, broadcom"),
        "{}",
        r.stderr
    );
}

/// Rewrites every flows file of `dir` with a `point` column of `label` (null for `None`),
/// replacing the column if the writer already has one.
fn label_points(dir: &Path, label: Option<&str>) {
    use arrow::array::{ArrayRef, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;
    for p in flows_files(dir) {
        let batches: Vec<RecordBatch> =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&p).unwrap())
                .unwrap()
                .build()
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let relabel = |b: &RecordBatch| {
            let (mut fields, mut cols): (Vec<Field>, Vec<ArrayRef>) = b
                .schema()
                .fields()
                .iter()
                .zip(b.columns())
                .filter(|(f, _)| f.name() != "point")
                .map(|(f, c)| ((**f).clone(), c.clone()))
                .unzip();
            fields.push(Field::new("point", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from(vec![label; b.num_rows()])));
            RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
        };
        let out: Vec<RecordBatch> = batches.iter().map(relabel).collect();
        let mut w = ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), out[0].schema(), None)
            .unwrap();
        for b in &out {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }
}

/// The `point` column: two trees of one host, interface and direction are one point (their
/// rows add up) until labelled, then two points compared like any others; a null label is no
/// label.
#[test]
fn the_point_column_labels_points() {
    let (_root, root) = tmp("path-labels");
    let pkts = capture(&[1, 2], true, |k, i| Some(base(k, i)));
    let m1 = tree(&root, "m", "cap", &pkts, false);
    let m2 = root.join("m2");
    std::fs::create_dir_all(&m2).unwrap();
    let caps = root.join("captures");
    replay(&m2, "m", &caps.join("cap.pcap"));

    let (_, j) = path_json(&[&m1, &m2]);
    assert_eq!(j["points"].as_array().unwrap().len(), 1, "{j:#}");
    assert_eq!(j["totals"]["keys"], 0);
    assert_eq!(j["one_point"][0]["points"][0]["pkts"], 2 * N as i64);

    label_points(&m1, Some("leaf"));
    label_points(&m2, Some("spine"));
    let (code, j) = path_json(&[&m1, &m2]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 2);
    let k = key(&j, 0x11);
    assert_eq!(names(k), ["m/cap/ingress[leaf]", "m/cap/ingress[spine]"]);
    assert_eq!(k["hops"][0]["lost"]["data"], 0);
    assert_eq!(j["points"][0]["label"], "leaf");

    label_points(&m2, None);
    let (_, j) = path_json(&[&m1, &m2]);
    assert_eq!(
        names(key(&j, 0x11)),
        ["m/cap/ingress[leaf]", "m/cap/ingress"]
    );
}

/// Every value of column `col` in the files of table `table` below `dir` (null: `None`).
fn column_values(dir: &Path, table: &str, col: &str) -> Vec<Option<String>> {
    use arrow::array::AsArray;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let mut out = Vec::new();
    for p in table_files(dir, table) {
        let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&p).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in r {
            let b = b.unwrap();
            let c = b
                .column_by_name(col)
                .unwrap_or_else(|| panic!("{}: no column {col}", p.display()));
            out.extend(c.as_string::<i32>().iter().map(|v| v.map(String::from)));
        }
    }
    out
}

/// `--point-label`: written in the flows, interfaces and alerts tables and summary.json; two
/// replays of one capture (same host, interface, direction) labelled apart are two points of
/// `roce-analyze path`, compared like any others.
#[test]
fn the_point_label_option_names_points() {
    let (_root, root) = tmp("path-point-label");
    // one packet of key 1 at DSCP 0: a dscp_mismatch alert in each tree
    let pkts = capture(&[1, 2], true, |k, i| {
        Some(if k == 1 && i == 3 {
            base(k, i).mark(0, 2)
        } else {
            base(k, i)
        })
    });
    let caps = root.join("captures");
    std::fs::create_dir_all(&caps).unwrap();
    let file = write(&caps, "cap", &pkts, false);
    let (leaf, spine) = (root.join("leaf"), root.join("spine"));
    replay_with(&leaf, "m", &file, &["--point-label", "tor1-mirror"]);
    replay_with(&spine, "m", &file, &["--point-label", "spine 2"]);
    for (dir, label) in [(&leaf, "tor1-mirror"), (&spine, "spine 2")] {
        for table in ["flows", "interfaces", "alerts"] {
            let v = column_values(dir, table, "point");
            assert!(!v.is_empty(), "{table}: rows");
            assert!(
                v.iter().all(|x| x.as_deref() == Some(label)),
                "{table}: {v:?}"
            );
        }
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["point"], label);
        assert_eq!(s["alerts"]["dscp_mismatch"], 1);
        let names: Vec<&str> = s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let name = format!("m/cap/ingress[{label}]");
        assert_eq!(names, [name.as_str()]);
        assert_eq!(s["points"][0]["point"], label);
    }
    let (code, j) = path_json(&[&leaf, &spine]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 2);
    assert_eq!(
        names(key(&j, 0x11)),
        ["m/cap/ingress[tor1-mirror]", "m/cap/ingress[spine 2]"],
        "equal counts: the tree given first comes first"
    );
    // a label that is not one is a usage error
    let bad = ReplayCli::try_parse_from(["replay", "--point-label", "a/b", "x.pcap"]);
    assert!(bad.is_err());
    // without a label, the column is there and null
    let plain = root.join("plain");
    replay(&plain, "m", &file);
    assert!(
        column_values(&plain, "flows", "point")
            .iter()
            .all(Option::is_none)
    );
}

/// One pcapng with the sender's egress (`eth0`) and the re-marked, lossy copy as ingress
/// (`eth1`, each packet right after its original): replay compares its two interfaces every interval and raises
/// `marking_changed` (docs/alerts.md#marking_changed), and the changes it counts against the
/// policy are those `roce-analyze path` finds in the tree it wrote, packet for packet.
#[test]
fn marking_changed_in_replay_agrees_with_path() {
    let (_root, root) = tmp("path-two-ifaces");
    let keys = [1, 2, 3, 4, 5];
    let rec = |(t, d): &(u64, Vec<u8>), iface, flags| Rec {
        ts_ns: *t,
        data: d.clone(),
        iface,
        epb_flags: flags,
    };
    let mut recs: Vec<Rec> = capture(&keys, true, sender)
        .iter()
        .map(|p| rec(p, 0, 2))
        .chain(capture(&keys, true, receiver).iter().map(|p| rec(p, 1, 1)))
        .collect();
    recs.sort_by_key(|r| r.ts_ns); // stable: at one time, the egress record first
    let caps = root.join("captures");
    std::fs::create_dir_all(&caps).unwrap();
    let file = caps.join("sw.pcapng");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
    let e = corpus::LINKTYPE_ETHERNET;
    corpus::write_pcapng(&mut w, &[(e, "eth0", 9), (e, "eth1", 9)], &recs).unwrap();
    std::io::Write::flush(&mut w).unwrap();
    drop(w);
    let out = root.join("tree");
    replay(&out, "sw", &file);

    let mut live: std::collections::BTreeMap<(i64, String, String), i64> = Default::default();
    for a in alerts_of(&out)
        .iter()
        .filter(|a| a["rule"] == "marking_changed")
    {
        assert_eq!(
            (&a["iface"], &a["dir"], &a["to_iface"], &a["to_dir"]),
            (
                &"sw:eth0".into(),
                &"egress".into(),
                &"sw:eth1".into(),
                &"ingress".into()
            )
        );
        let k = (
            a["qp"].as_i64().unwrap(),
            a["class"].as_str().unwrap().to_string(),
            a["subject"].as_str().unwrap().to_uppercase(),
        );
        *live.entry(k).or_default() += a["count"].as_i64().unwrap();
    }
    let (code, j) = path_json(&[&out]);
    assert_eq!(code, Some(1), "{j:#}");
    let mut offline: std::collections::BTreeMap<(i64, String, String), i64> = Default::default();
    for k in j["keys"].as_array().unwrap() {
        for c in k["hops"][0]["changes"].as_array().unwrap() {
            if c["violates"] == true {
                let id = (
                    k["qp"].as_i64().unwrap(),
                    c["class"].as_str().unwrap().to_string(),
                    c["field"].as_str().unwrap().to_string(),
                );
                *offline.entry(id).or_default() += c["pkts"].as_i64().unwrap();
            }
        }
    }
    let want: std::collections::BTreeMap<_, _> = [
        ((0x11, "data".to_string(), "DSCP".to_string()), 30),
        ((0x12, "data".to_string(), "PCP".to_string()), 15),
        ((0x12, "data".to_string(), "ECN".to_string()), 10),
        ((0x21, "ack".to_string(), "DSCP".to_string()), 20),
    ]
    .into_iter()
    .collect();
    assert_eq!(offline, want, "{j:#}");
    assert_eq!(live, want);
}

/// alerts.jsonl of the tree `dir`.
fn alerts_of(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Appends to the first flows file of `dir` an eviction row of key `qp` from `src` to `dst`:
/// the first row's interval and point, every count 0 and every histogram empty.
fn append_eviction_row(dir: &Path, src: &str, dst: &str, qp: i32) {
    use arrow::array::{
        Array, ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
        new_empty_array,
    };
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::DataType;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;
    let p = flows_files(dir)[0].clone();
    let mut batches: Vec<RecordBatch> =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&p).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let first = batches[0].slice(0, 1);
    let schema = first.schema();
    let cols: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .zip(first.columns())
        .map(|(f, c)| -> ArrayRef {
            match (f.name().as_str(), f.data_type()) {
                ("src", _) => Arc::new(StringArray::from(vec![src])),
                ("dst", _) => Arc::new(StringArray::from(vec![dst])),
                ("qp", _) => Arc::new(Int32Array::from(vec![qp])),
                (_, DataType::Int64) => Arc::new(Int64Array::from(vec![0i64])),
                (_, DataType::List(item)) => Arc::new(ListArray::new(
                    item.clone(),
                    OffsetBuffer::new_zeroed(1),
                    new_empty_array(item.data_type()),
                    None,
                )),
                _ => c.clone(),
            }
        })
        .collect();
    batches.push(RecordBatch::try_new(schema.clone(), cols).unwrap());
    assert_eq!(batches.last().unwrap().column(0).len(), 1);
    let mut w = ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema, None).unwrap();
    for b in &batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// A row without packets (an idle key's eviction row) is no observation of the key: a key
/// seen at the sender whose only row at the receiver is such a row stays a key at one point,
/// not a key whose packets were all lost.
#[test]
fn a_row_without_packets_is_no_observation() {
    let (_root, root) = tmp("path-eviction-row");
    let a_keys = |k, i| (k != 6 || i < 50).then(|| base(k, i));
    let a = tree(&root, "a", "h1", &capture(&[1, 6], true, a_keys), true);
    let b = tree(
        &root,
        "b",
        "h2-eth0",
        &capture(&[1], true, |k, i| Some(base(k, i))),
        false,
    );
    append_eviction_row(&b, "10.77.1.5", "10.77.1.6", 0x41);
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(0), "{j:#}");
    assert_eq!(j["totals"]["keys"], 1);
    assert_eq!(j["totals"]["lost_data"], 0);
    assert_eq!(j["one_point"][0]["qp"], 0x41);
    assert_eq!(j["one_point"][0]["points"][0]["point"], "a/h1:eth0/egress");
    assert_eq!(
        j["points"][1]["keys"], 1,
        "the eviction row adds no key to b"
    );
}

/// Intervals that do not line up (1 s at the sender, 700 ms at a receiver whose capture
/// starts 1.5 s later, as live trees of different hosts): the key is compared and flagged, and
/// the edge shows as a loss of less than one 700 ms interval of packets.
#[test]
fn intervals_not_aligned_are_flagged() {
    let (_root, root) = tmp("path-unaligned");
    let a = tree(
        &root,
        "a",
        "h1",
        &capture(&[1], false, |k, i| Some(base(k, i))),
        true,
    );
    let late = capture(&[1], false, |k, i| (i >= 75).then(|| base(k, i)));
    let b = root.join("b");
    replay_every(&b, "b", &write(&root, "h2-eth0", &late, false), "700ms");
    let (code, j) = path_json(&[&a, &b]);
    assert_eq!(code, Some(0), "{j:#}");
    let k = key(&j, 0x11);
    assert_eq!(k["spans_differ"], true, "{k:#}");
    assert_ne!(k["points"][0]["start_us"], k["points"][1]["start_us"]);
    let lost = k["hops"][0]["lost"]["data"].as_i64().unwrap();
    assert!((1..35).contains(&lost), "{lost}");
    assert!(k["hops"][0]["changes"].as_array().unwrap().is_empty());
    let text = path_text(&[&a, &b]);
    assert!(
        text.stdout
            .contains("intervals are not aligned (their compared rows start ")
            && text
                .stdout
                .contains(" apart): losses and changes include the traffic"),
        "{}",
        text.stdout
    );
}

/// A host QP that [`write_qps`] writes: RC, in RTS, of `all_reduce_perf[4242]` in pod `pod-1`,
/// set up towards `dgid` and remote QP `rqpn` with SL 3 and, at read i, traffic class `tc[i]`.
struct HostQp {
    dev: &'static str,
    lqpn: u32,
    rqpn: u32,
    dgid: [u8; 4],
    tc: [u8; 2],
}

/// Two reads (1 s apart, in the captures' first seconds) of host `host`'s QPs into `out`'s
/// `qps` table, as the live command writes them.
fn write_qps(out: &Path, host: &str, qps: &[HostQp]) {
    use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
    let mut col = Collector::new(CollectorConfig::new(
        out.to_path_buf(),
        host,
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    ))
    .unwrap();
    col.quiet_stderr();
    let row = |q: &HostQp, read: usize| qps::QpRow {
        dev: q.dev.into(),
        dev_index: if q.dev == "mlx5_0" { 1 } else { 2 },
        port: Some(1),
        lqpn: q.lqpn,
        rqpn: Some(q.rqpn),
        qp_type: "RC".into(),
        state: "RTS".into(),
        sq_psn: Some(1000 + 500 * read as u32),
        rq_psn: Some(1000),
        pid: Some(4242),
        comm: Some("all_reduce_perf".into()),
        workload: Some(
            qps::cgroup::Workload {
                pod_uid: Some("pod-1".into()),
                ..Default::default()
            }
            .into(),
        ),
        setup: Some(qps::SetUp {
            traffic_class: q.tc[read],
            sl: 3,
            dgid: std::net::Ipv4Addr::from(q.dgid).to_ipv6_mapped().octets(),
            ..qps::SetUp::default()
        }),
        ..qps::QpRow::default()
    };
    let mut prev = qps::Inventory::default();
    for read in 0..2 {
        let inv = qps::Inventory {
            time_ns: T0 + (read as u64 + 1) * 1_000_000_000,
            qps: qps.iter().map(|q| row(q, read)).collect(),
            ..qps::Inventory::default()
        };
        let (p, f) = qps::compare(&prev, &inv);
        col.on_qps(T0 + read as u64 * 1_000_000_000, &inv, &p, &f)
            .unwrap();
        prev = inv;
    }
    col.finish().unwrap();
}

/// The request of `k` (a key of `keys` or `one_point`) with local QP number `lqpn`.
fn request(k: &Value, lqpn: i64) -> &Value {
    k["requested"]
        .as_array()
        .unwrap_or_else(|| panic!("no request: {k:#}"))
        .iter()
        .find(|q| q["lqpn"] == lqpn)
        .unwrap_or_else(|| panic!("no request of QP {lqpn:#x}: {k:#}"))
}

/// (line, violates) of every change of a request.
fn request_changes(q: &Value) -> Vec<(String, bool)> {
    q["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["line"].as_str().unwrap().to_string(),
                c["violates"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Trees without a `qps` table: no request anywhere, the totals as they were. With the sender
/// host's QPs: the QP that sends key 0x11 (remote QP 0x11, destination 10.77.1.2) asked for
/// traffic class 106 at its latest set-up (0 before), the first point carries DSCP 26 ECN 2 and
/// some CE (a mark, not a change): shown before the points, ok, exit 0. A second QP sending the
/// same key (another device) is listed too, never chosen between; a QP towards another peer
/// joins no key, and key 0x12, which no QP sends, is as it was.
#[test]
fn a_host_qps_request_is_compared_with_the_first_point() {
    let (_root, root) = tmp("path-host-qp-ok");
    let sent = |k, i| {
        Some(match k {
            1 if i % 25 == 7 => base(k, i).mark(26, 3),
            _ => base(k, i),
        })
    };
    let h1 = tree(&root, "h1", "h1", &capture(&[1, 2], true, sent), true);
    let h2 = tree(&root, "h2", "h2-eth0", &capture(&[1, 2], true, sent), false);
    let (pa, pb) = ("h1/h1:eth0/egress", "h2/h2-eth0/ingress");

    // without a qps table
    let (code, before) = path_json(&[&h1, &h2]);
    assert_eq!(code, Some(0), "{before:#}");
    let text_before = path_text(&[&h1, &h2]);
    assert!(
        !text_before.stdout.contains("requested"),
        "{}",
        text_before.stdout
    );
    let plain = serde_json::to_string(&before).unwrap();
    assert!(
        !plain.contains("requested") && !plain.contains("requests"),
        "{before:#}"
    );
    let totals: Vec<&String> = before["totals"].as_object().unwrap().keys().collect();
    assert_eq!(
        totals,
        [
            "changes",
            "data_pkts",
            "keys",
            "lost_data",
            "pkts",
            "violations"
        ]
    );

    write_qps(
        &h1,
        "h1",
        &[
            HostQp {
                dev: "mlx5_0",
                lqpn: 0x2a,
                rqpn: 0x11,
                dgid: [10, 77, 1, 2],
                tc: [0, 106],
            },
            HostQp {
                dev: "mlx5_1",
                lqpn: 0x2b,
                rqpn: 0x11,
                dgid: [10, 77, 1, 2],
                tc: [106, 106],
            },
            HostQp {
                dev: "mlx5_0",
                lqpn: 0x2c,
                rqpn: 0x12,
                dgid: [10, 0, 9, 9],
                tc: [106, 106],
            },
        ],
    );
    let (code, j) = path_json(&[&h1, &h2]);
    assert_eq!(code, Some(0), "{j:#}");
    let k = key(&j, 0x11);
    assert_eq!(names(k), [pa, pb]);
    let asked = k["requested"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "both QPs that send the key: {k:#}");
    let q = request(k, 0x2a);
    for (field, want) in [
        ("host", Value::from("h1")),
        ("device", "mlx5_0".into()),
        ("pid", 4242.into()),
        ("comm", "all_reduce_perf".into()),
        ("pod_uid", "pod-1".into()),
        ("traffic_class", 106.into()),
        ("dscp", 26.into()),
        ("ecn", 2.into()),
        ("sl", 3.into()),
        ("setup_source", "probe".into()),
        ("point", pa.into()),
        ("data_pkts", (N as i64).into()),
        ("off_policy", false.into()),
        ("violates", false.into()),
    ] {
        assert_eq!(q[field], want, "{field}: {q:#}");
    }
    assert!(request_changes(q).is_empty(), "CE is no change: {q:#}");
    assert_eq!(request(k, 0x2b)["device"], "mlx5_1");
    assert_eq!(
        before["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["qp"] == 0x12),
        Some(key(&j, 0x12)),
        "a key no QP sends is as it was"
    );
    let t = &j["totals"];
    assert_eq!(
        (
            &t["requests"],
            &t["keys_requested"],
            &t["request_violations"]
        ),
        (&2.into(), &1.into(), &0.into()),
        "{t:#}"
    );
    assert_eq!(t["violations"], 0);

    let text = path_text(&[&h1, &h2]);
    assert_eq!(text.code, Some(0), "{}", text.stdout);
    let line = "  requested at h1 mlx5_0 QP 0x00002a by pid 4242 (all_reduce_perf, pod pod-1): \
                traffic class 106 = DSCP 26 ECN 2, SL 3 (probe)\n";
    let at = text
        .stdout
        .find(line)
        .unwrap_or_else(|| panic!("{}", text.stdout));
    let ok = format!("    ok   data at {pa} as requested: {N} packets\n");
    assert_eq!(
        text.stdout[at + line.len()..].find(&ok),
        Some(0),
        "{}",
        text.stdout
    );
    let points = text.stdout.find(&format!("  1. {pa}:")).unwrap();
    assert!(at < points, "before the points: {}", text.stdout);
    assert!(
        text.stdout.contains(
            "requested at the hosts: 2 host QP set-ups joined to 1 key, 0 against the policy"
        ),
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("QP 0x00002c"), "{}", text.stdout);
}

/// The QP asked for traffic class 106 (DSCP 26, ECN 2) but its packets leave the host at DSCP
/// 0, a tenth of them Not-ECT (the NIC's traffic-class override): the request's comparison
/// with the first point fails, exit 1, though nothing changes between the points. A tree of
/// the sender alone (the key at one point) fails the same way.
#[test]
fn a_marking_the_host_did_not_ask_for_fails_at_the_first_point() {
    let (_root, root) = tmp("path-host-qp-override");
    let wire = |k, i: u32| {
        Some(if i.is_multiple_of(10) {
            base(k, i).mark(0, 0)
        } else {
            base(k, i).mark(0, 2)
        })
    };
    let h1 = tree(&root, "h1", "h1", &capture(&[1], true, wire), true);
    let h2 = tree(&root, "h2", "h2-eth0", &capture(&[1], true, wire), false);
    let qp = HostQp {
        dev: "mlx5_0",
        lqpn: 0x2a,
        rqpn: 0x11,
        dgid: [10, 77, 1, 2],
        tc: [106, 106],
    };
    write_qps(&h1, "h1", &[qp]);
    let pa = "h1/h1:eth0/egress";
    let want = [
        (
            format!("data DSCP 26 → 0 between the request and {pa}: 300 of 300 packets"),
            true,
        ),
        (
            format!("data ECN 2 → 0 between the request and {pa}: 30 of 300 packets"),
            true,
        ),
    ];

    let (code, j) = path_json(&[&h1, &h2]);
    assert_eq!(code, Some(1), "{j:#}");
    let k = key(&j, 0x11);
    assert!(
        changes(k, 0).is_empty(),
        "nothing changes on the way: {k:#}"
    );
    let q = &k["requested"][0];
    assert_eq!(q["violates"], true, "{q:#}");
    assert_eq!(q["off_policy"], false);
    assert_eq!(request_changes(q), want);
    assert_eq!(q["changes"][0]["from"], serde_json::json!([26]));
    assert_eq!(q["changes"][0]["to"], 0);
    assert_eq!(q["changes"][0]["expected"], "26");
    let t = &j["totals"];
    assert_eq!(
        (&t["violations"], &t["request_violations"]),
        (&0.into(), &1.into())
    );

    let text = path_text(&[&h1, &h2]);
    assert_eq!(text.code, Some(1));
    assert!(
        text.stdout.contains(&format!(
            "    FAIL data DSCP 26 → 0 between the request and {pa}: 300 of 300 packets (expected 26)\n"
        )) && text.stdout.contains(&format!(
            "    FAIL data ECN 2 → 0 between the request and {pa}: 30 of 300 packets (expected ECT)\n"
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("0 changes, 0 against the policy")
            && text
                .stdout
                .contains("joined to 1 key, 1 against the policy"),
        "{}",
        text.stdout
    );

    // the sender's tree alone: the key is at one point, compared with it all the same
    let (code, j) = path_json(&[&h1]);
    assert_eq!(code, Some(1), "{j:#}");
    assert_eq!(j["totals"]["keys"], 0);
    let one = &j["one_point"][0];
    assert_eq!(one["qp"], 0x11, "{j:#}");
    assert_eq!(one["requested"][0]["violates"], true, "{one:#}");
    assert_eq!(request_changes(&one["requested"][0]), want);
    let text = path_text(&[&h1]);
    assert!(
        text.stdout.contains(
            "\n    requested at h1 mlx5_0 QP 0x00002a by pid 4242 (all_reduce_perf, pod pod-1): traffic class 106"
        ) && text.stdout.contains(&format!(
            "\n      FAIL data DSCP 26 → 0 between the request and {pa}: 300 of 300 packets"
        )),
        "{}",
        text.stdout
    );
}

/// A QP set up with traffic class 0 (off the policy: `qp_marking`'s domain) whose packets carry
/// DSCP 0 ECN 0 as asked: shown as off the policy, no failure from the request; the points
/// decide the exit status (0 when nothing changes on the way, 1 when a hop re-marks against
/// the policy).
#[test]
fn a_request_off_the_policy_is_shown_not_failed() {
    let (_root, root) = tmp("path-host-qp-off");
    let zero = |k, i| Some(base(k, i).mark(0, 0));
    let h1 = tree(&root, "h1", "h1", &capture(&[1], true, zero), true);
    let h2 = tree(&root, "h2", "h2-eth0", &capture(&[1], true, zero), false);
    let bad = |k, i: u32| {
        Some(if i.is_multiple_of(10) {
            base(k, i).mark(24, 0)
        } else {
            base(k, i).mark(0, 0)
        })
    };
    let h3 = tree(&root, "h3", "h3-eth0", &capture(&[1], true, bad), false);
    let qp = HostQp {
        dev: "mlx5_0",
        lqpn: 0x2a,
        rqpn: 0x11,
        dgid: [10, 77, 1, 2],
        tc: [0, 0],
    };
    write_qps(&h1, "h1", &[qp]);
    let pa = "h1/h1:eth0/egress";

    let (code, j) = path_json(&[&h1, &h2]);
    assert_eq!(code, Some(0), "{j:#}");
    let q = &key(&j, 0x11)["requested"][0];
    assert_eq!(
        (&q["traffic_class"], &q["dscp"], &q["ecn"]),
        (&0.into(), &0.into(), &0.into())
    );
    assert_eq!(q["off_policy"], true, "{q:#}");
    assert_eq!(q["violates"], false);
    assert!(request_changes(q).is_empty(), "{q:#}");
    assert_eq!(j["totals"]["request_violations"], 0);
    let text = path_text(&[&h1, &h2]);
    assert_eq!(text.code, Some(0));
    assert!(
        text.stdout.contains(
            "traffic class 0 = DSCP 0 ECN 0, SL 3 (probe)\n    requested off the policy (expected DSCP 26, ECN ECT): the qp_marking alert's domain\n"
        ) && text
            .stdout
            .contains(&format!("    ok   data at {pa} as requested: {N} packets\n")),
        "{}",
        text.stdout
    );

    // a hop that re-marks against the policy fails the run, the request still does not
    let (code, j) = path_json(&[&h1, &h3]);
    assert_eq!(code, Some(1), "{j:#}");
    let k = key(&j, 0x11);
    assert_eq!(k["requested"][0]["violates"], false, "{k:#}");
    assert_eq!(
        changes(k, 0),
        [(
            format!("data DSCP 0 → 24 between {pa} and h3/h3-eth0/ingress: 30 of 300 packets"),
            true
        )]
    );
    let t = &j["totals"];
    assert_eq!(
        (&t["violations"], &t["request_violations"]),
        (&1.into(), &0.into())
    );
}
