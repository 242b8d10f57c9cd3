//! The collector driven by the userspace datapath (the source replay uses): traffic with known
//! marking faults, PSN gaps, go-back-N, CE without CNPs, a small MTU, PFC on the wrong priority,
//! a PFC storm and 802.3x PAUSE. Asserts the exact alerts (alerts.jsonl, the alerts table,
//! summary.json) and that the Parquet rows, read back by pyarrow, sum to what was sent.

use std::collections::BTreeMap;

use observer::pipeline::{Collector, CollectorConfig, PolicyConfig, rule};
use observer::sources::datapath::Datapath;
use observer::sources::synthetic::{Roce, pause_frame, pfc_frame};
use serde_json::Value;

use test_support::TempDir;
use test_support::collector::*;

const T0: u64 = 1_795_239_299_000_000_000; // 2026-11-21T05:34:59Z
const S: u64 = 1_000_000_000;
const A: [u8; 4] = [10, 77, 0, 1];
const B: [u8; 4] = [10, 77, 0, 2];
const C: [u8; 4] = [10, 77, 0, 3];
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x09];

struct Rig {
    dp: Datapath,
    col: Collector,
    sent_roce: u64,
    sent_frames: u64,
}

impl Rig {
    fn send(&mut self, r: Roce, t: u64) {
        let f = r.frame();
        self.dp.process(&f, f.len() as u32, t, 0);
        self.sent_roce += 1;
        self.sent_frames += 1;
    }
    fn send_raw(&mut self, f: Vec<u8>, t: u64) {
        self.dp.process(&f, f.len() as u32, t, 0);
        self.sent_frames += 1;
    }
    fn events(&mut self) {
        let ev = self.dp.take_events();
        self.col.on_events("veth0", &ev);
        let pauses = self.dp.take_pauses();
        self.col.on_pauses("veth0", &pauses);
    }
    fn snapshot(&mut self, t: u64) {
        self.events();
        let s = self.dp.snapshot("veth0", t, Some(100_000_000_000));
        self.col.on_snapshot(&s).unwrap();
    }
}

fn data(src: [u8; 4], dst: [u8; 4], qp: u32, psn: u32) -> Roce {
    Roce::data(src, dst, qp, psn)
}

fn ack(src: [u8; 4], dst: [u8; 4], qp: u32, psn: u32) -> Roce {
    let mut r = Roce::data(src, dst, qp, psn);
    r.opcode = 0x11;
    r.payload = 0;
    r.ecn = 0;
    r
}

fn key(a: &Value) -> (String, Option<u64>, Option<String>, Option<u64>, bool, u64) {
    (
        a["rule"].as_str().unwrap().to_string(),
        a["qp"].as_u64(),
        a["class"].as_str().map(String::from),
        a["priority"].as_u64(),
        a["summary"].as_bool().unwrap(),
        a["count"].as_u64().unwrap(),
    )
}

#[test]
fn faults_give_exact_alerts_and_parquet_sums_match() {
    let tmp = TempDir::new("dp");
    let out = tmp.path().to_path_buf();
    let policy = PolicyConfig::from_toml(
        "profile = \"nvidia\"\n[thresholds]\npfc_storm_xoff_per_s = 2.5e0\n",
        "inline",
    );
    // thresholds are integers: a float is a named error
    let e = policy.unwrap_err().to_string();
    assert!(e.contains("thresholds.pfc_storm_xoff_per_s"), "{e}");
    let policy = PolicyConfig::from_toml(
        "[thresholds]\npfc_storm_xoff_per_s = 2\nhold_down_s = 10\n",
        "inline",
    )
    .unwrap();
    let mut cfg = CollectorConfig::new(out.clone(), "testhost", "replay", policy.clone());
    cfg.rotate_secs = 3600;
    let mut rig = Rig {
        dp: Datapath::new(policy.expected, 1000),
        col: Collector::new(cfg).unwrap(),
        sent_roce: 0,
        sent_frames: 0,
    };
    rig.col.begin("veth0", T0, Some(100_000_000_000));

    // ---- interval 1: [T0, T0+1s)
    let mut t = T0 + 1000;
    for psn in 0..10 {
        rig.send(data(A, B, 0x11, psn), t);
        t += 1000;
    }
    rig.send(ack(B, A, 0x21, 9), t);
    rig.send(ack(B, A, 0x21, 10), t);
    for psn in 0..5 {
        let mut r = data(A, B, 0x12, psn);
        r.dscp = 0; // bleached
        rig.send(r, t);
    }
    // the mis-marked packet is alerted before the interval ends
    rig.events();
    let early = alerts_jsonl(&out);
    assert_eq!(early.len(), 1, "{early:?}");
    assert_eq!(early[0]["rule"], rule::DSCP_MISMATCH);
    assert_eq!(early[0]["qp"], 0x12);
    assert_eq!(early[0]["observed"], "dscp 0");
    assert_eq!(early[0]["expected"], "dscp 26");
    for psn in 0..4 {
        let mut r = data(A, B, 0x13, psn);
        r.ecn = 0; // Not-ECT
        rig.send(r, t);
    }
    for psn in [0, 1, 2, 5, 6, 3, 4, 5, 6] {
        rig.send(data(A, B, 0x14, psn), t);
        t += 1000;
    }
    let mut cnp = data(B, A, 0x24, 0);
    cnp.opcode = 0x81;
    cnp.dscp = 46;
    cnp.ecn = 0;
    cnp.payload = 16;
    rig.send(cnp, t);
    for psn in 0..12 {
        let mut r = data(A, C, 0x31, psn);
        r.ecn = 3; // CE
        rig.send(r, t);
    }
    for psn in 0..3 {
        rig.send(ack(C, A, 0x41, psn), t);
    }
    for (op, pl, psn) in [(0x06, 1040, 0), (0x07, 1024, 1), (0x08, 100, 2)] {
        let mut r = data(A, B, 0x15, psn);
        r.opcode = op;
        r.payload = pl;
        rig.send(r, t);
    }
    for _ in 0..3 {
        rig.send_raw(pfc_frame(MAC, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]), t);
    }
    for _ in 0..2 {
        rig.send_raw(pfc_frame(MAC, 1 << 5, [0, 0, 0, 0, 0, 50, 0, 0]), t);
    }
    rig.send_raw(pause_frame(MAC, 7), t);
    rig.snapshot(T0 + S);

    // ---- interval 2: [T0+1s, T0+2s)
    let t = T0 + S + 1000;
    for psn in 5..8 {
        let mut r = data(A, B, 0x12, psn);
        r.dscp = 0;
        rig.send(r, t);
    }
    for psn in 10..15 {
        rig.send(data(A, B, 0x11, psn), t);
    }
    for _ in 0..4 {
        rig.send_raw(pfc_frame(MAC, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]), t);
    }
    rig.snapshot(T0 + 2 * S);
    // an interval with no traffic writes no flow rows
    rig.snapshot(T0 + 3 * S);
    let summary = rig.col.finish().unwrap();

    // ---- alerts: exact
    let al = alerts_jsonl(&out);
    let mut got: Vec<_> = al.iter().map(key).collect();
    got.sort();
    let s = |x: &str| Some(x.to_string());
    let mut want = vec![
        (
            rule::DSCP_MISMATCH.to_string(),
            Some(0x12),
            s("data"),
            None,
            false,
            1,
        ),
        (
            rule::DSCP_MISMATCH.to_string(),
            Some(0x12),
            s("data"),
            None,
            true,
            7,
        ),
        (
            rule::DSCP_MISMATCH.to_string(),
            Some(0x24),
            s("cnp"),
            None,
            false,
            1,
        ),
        (
            rule::NOT_ECT.to_string(),
            Some(0x13),
            s("data"),
            None,
            false,
            1,
        ),
        (
            rule::NOT_ECT.to_string(),
            Some(0x13),
            s("data"),
            None,
            true,
            3,
        ),
        (rule::PSN_GAP.to_string(), Some(0x14), None, None, false, 1),
        (
            rule::GO_BACK_N.to_string(),
            Some(0x14),
            None,
            None,
            false,
            1,
        ),
        (rule::GO_BACK_N.to_string(), Some(0x14), None, None, true, 3),
        (
            rule::MTU_BELOW_EXPECTED.to_string(),
            Some(0x15),
            None,
            None,
            false,
            1,
        ),
        (
            rule::CE_WITHOUT_CNP.to_string(),
            None,
            None,
            None,
            false,
            12,
        ),
        (
            rule::PFC_WRONG_PRIORITY.to_string(),
            None,
            None,
            Some(5),
            false,
            2,
        ),
        // a storm's count is intervals in storm: the first, then the one held
        (rule::PFC_STORM.to_string(), None, None, Some(3), false, 1),
        (rule::PFC_STORM.to_string(), None, None, Some(3), true, 1),
        (rule::PAUSE_802_3X.to_string(), None, None, None, false, 1),
        (
            rule::PFC_WITHOUT_ECN.to_string(),
            None,
            None,
            None,
            false,
            4,
        ),
    ];
    want.sort();
    assert_eq!(
        got,
        want,
        "alerts.jsonl:\n{}",
        al.iter()
            .map(|a| a["message"].to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mtu = al
        .iter()
        .find(|a| a["rule"] == rule::MTU_BELOW_EXPECTED)
        .unwrap();
    assert_eq!(mtu["observed"], "largest UDP payload 1056 (RoCE MTU 1024)");
    let ce = al
        .iter()
        .find(|a| a["rule"] == rule::CE_WITHOUT_CNP)
        .unwrap();
    assert_eq!(
        (ce["src"].as_str(), ce["dst"].as_str()),
        (Some("10.77.0.1"), Some("10.77.0.3"))
    );
    let gap = al.iter().find(|a| a["rule"] == rule::PSN_GAP).unwrap();
    assert_eq!(gap["observed"], "2 PSNs missing before PSN 5");
    assert_eq!(gap["severity"], "warning");
    let pause = al.iter().find(|a| a["rule"] == rule::PAUSE_802_3X).unwrap();
    assert_eq!(pause["severity"], "critical");
    assert!(
        pause["observed"]
            .as_str()
            .unwrap()
            .contains("02:00:00:00:00:09"),
        "{pause}"
    );

    // summary.json: totals plus alert counts per rule
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(on_disk, summary);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for a in &al {
        *counts
            .entry(a["rule"].as_str().unwrap().into())
            .or_default() += 1;
    }
    let sc: BTreeMap<String, u64> = serde_json::from_value(summary["alerts"].clone()).unwrap();
    assert_eq!(sc, counts);
    let total_pkts: u64 = summary["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["pkts"].as_u64().unwrap())
        .sum();
    assert_eq!(total_pkts, rig.sent_roce);

    // ---- Parquet, read back by pyarrow
    let flows = pyarrow_read(
        &out,
        "flows",
        &[
            "pkts",
            "psn_gaps",
            "psn_missing",
            "psn_retrans",
            "psn_behind",
            "ce",
            "cnp",
            "not_ect_data",
            "acks",
        ],
        true,
    );
    assert_eq!(flows["sums"]["pkts"], rig.sent_roce);
    assert_eq!(rig.sent_roce, 57);
    assert_eq!(
        flows["rows"], 11,
        "9 active keys in interval 1, 2 in interval 2, none in 3"
    );
    assert_eq!(flows["sums"]["psn_gaps"], 1);
    assert_eq!(flows["sums"]["psn_missing"], 2);
    assert_eq!(flows["sums"]["psn_retrans"], 4);
    assert_eq!(flows["sums"]["psn_behind"], 3);
    assert_eq!(flows["sums"]["ce"], 12);
    assert_eq!(flows["sums"]["cnp"], 1);
    assert_eq!(flows["sums"]["not_ect_data"], 4);
    assert_eq!(flows["sums"]["acks"], 5);
    let cols: Vec<&str> = flows["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        cols.contains(&"date") && cols.contains(&"hour"),
        "hive partition columns: {cols:?}"
    );
    let q2: Vec<&Value> = flows["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["qp"] == 0x12)
        .collect();
    assert_eq!(q2.len(), 2);
    let q2a = q2
        .iter()
        .find(|r| r["pkts"] == 5)
        .expect("interval 1 row of qp 0x12");
    assert_eq!(
        q2a["dscp_data"],
        serde_json::json!([{"value": 0, "pkts": 5}])
    );
    assert_eq!(
        q2a["ecn_data"],
        serde_json::json!([{"value": 2, "pkts": 5}])
    );
    assert_eq!(
        q2a["pcp_data"],
        serde_json::json!([{"value": -1, "pkts": 5}])
    );
    assert_eq!(
        q2a["opcodes"],
        serde_json::json!([{"value": 10, "pkts": 5}])
    );
    assert_eq!(q2a["src"], "10.77.0.1");
    assert_eq!(q2a["new_qp"], true);
    assert_eq!(q2a["host"], "testhost");

    let ifs = pyarrow_read(
        &out,
        "interfaces",
        &[
            "frames",
            "roce",
            "pfc_frames",
            "pfc_xoff_p3",
            "pfc_xoff_p5",
            "pfc_quanta_p3",
            "pause_frames",
            "pfc_pause_s_p3",
        ],
        true,
    );
    assert_eq!(ifs["rows"], 3, "one ingress row per interval");
    assert_eq!(ifs["sums"]["frames"], rig.sent_frames);
    assert_eq!(ifs["sums"]["roce"], rig.sent_roce);
    assert_eq!(ifs["sums"]["pfc_frames"], 9);
    assert_eq!(ifs["sums"]["pfc_xoff_p3"], 7);
    assert_eq!(ifs["sums"]["pfc_xoff_p5"], 2);
    assert_eq!(ifs["sums"]["pfc_quanta_p3"], 700);
    assert_eq!(ifs["sums"]["pause_frames"], 1);
    let ps = ifs["sums"]["pfc_pause_s_p3"].as_f64().unwrap();
    assert!((ps - 700.0 * 512.0 / 1e11).abs() < 1e-12, "{ps}");
    let r1 = ifs["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pfc_xoff_p3"] == 3)
        .unwrap();
    assert_eq!(r1["pfc_xoff_per_s_p3"], 3.0);
    // three XOFF of 100 quanta (512 ns at 100G) at one instant: each replaces the running
    // pause, so 512 ns paused, not the 1536 ns requested; the densest second holds 3
    assert_eq!(r1["pfc_xoff_peak_1s_p3"], 3);
    let near = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-15;
    assert!(
        near(&r1["pfc_paused_s_p3"], 512e-9),
        "{}",
        r1["pfc_paused_s_p3"]
    );
    assert!(near(&r1["pfc_pause_s_p3"], 3.0 * 512e-9));
    assert!(
        near(&r1["pause_paused_s"], 35e-9),
        "{}",
        r1["pause_paused_s"]
    );
    assert_eq!(r1["active_qps"], 9);

    let alt = pyarrow_read(&out, "alerts", &["count"], false);
    assert_eq!(alt["rows"].as_u64().unwrap(), al.len() as u64);
    let jsum: u64 = al.iter().map(|a| a["count"].as_u64().unwrap()).sum();
    assert_eq!(alt["sums"]["count"], jsum);

    // every file final-named, none left as .tmp
    assert_no_tmp_files(&out);
}

#[test]
fn evicted_and_vanished_keys_keep_their_counts() {
    let tmp = TempDir::new("evict");
    let out = tmp.path().to_path_buf();
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut col = Collector::new(CollectorConfig::new(
        out.clone(),
        "h",
        "replay",
        policy.clone(),
    ))
    .unwrap();
    let mut dp = Datapath::new(policy.expected, 100);
    let send = |dp: &mut Datapath, qp: u32, n: u32, t: u64| {
        for psn in 0..n {
            let f = Roce::data(A, B, qp, psn).frame();
            dp.process(&f, f.len() as u32, t, 0);
        }
    };
    send(&mut dp, 1, 3, T0);
    send(&mut dp, 2, 4, T0);
    col.on_snapshot(&dp.snapshot("e", T0 + S, None)).unwrap();
    // qp 1: 2 more packets, then the source evicts it and reports its final value
    send(&mut dp, 1, 2, T0 + S);
    let k1 = *dp.qps().keys().find(|k| k.dest_qp == 1).unwrap();
    let v1 = dp.remove(&k1).unwrap();
    col.on_evicted("e", &[(k1, v1)]);
    // qp 2 vanishes without a report (its last read value stands)
    let k2 = *dp.qps().keys().find(|k| k.dest_qp == 2).unwrap();
    dp.remove(&k2);
    send(&mut dp, 3, 1, T0 + S);
    col.on_snapshot(&dp.snapshot("e", T0 + 2 * S, None))
        .unwrap();
    assert_eq!(col.last.evictions, 2);
    assert_eq!(
        col.last.active_qps, 2,
        "qp 1's final delta and the new qp 3"
    );
    let summary = col.finish().unwrap();
    let pk: BTreeMap<u64, u64> = summary["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["qp"].as_u64().unwrap(), q["pkts"].as_u64().unwrap()))
        .collect();
    assert_eq!(pk, BTreeMap::from([(1, 5), (2, 4), (3, 1)]));
    let flows = pyarrow_read(&out, "flows", &["pkts"], true);
    assert_eq!(flows["sums"]["pkts"], 10);
    let ev: Vec<&Value> = flows["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["evicted"] == true)
        .collect();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0]["qp"].as_u64(), ev[0]["pkts"].as_u64()),
        (Some(1), Some(2))
    );
    let ifs = pyarrow_read(&out, "interfaces", &["evictions"], false);
    assert_eq!(ifs["sums"]["evictions"], 2);
}

/// DSCP bleached on 100 QPs for three intervals: every packet counted once, in few alerts.
#[test]
fn bleached_fabric_alerts_every_key_once() {
    let tmp = TempDir::new("bleached");
    let out = tmp.path().to_path_buf();
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut col = Collector::new(CollectorConfig::new(
        out.clone(),
        "h",
        "replay",
        policy.clone(),
    ))
    .unwrap();
    let mut dp = Datapath::new(policy.expected, 1000);
    // DSCP bleached to 0 on 100 QPs, for 3 intervals
    for i in 0..3u64 {
        for q in 0..100u32 {
            for psn in 0..4 {
                let mut r = Roce::data(A, B, 0x1000 + q, i as u32 * 4 + psn);
                r.dscp = 0;
                let f = r.frame();
                dp.process(&f, f.len() as u32, T0 + i * S + 1, 0);
            }
        }
        let ev = dp.take_events();
        col.on_events("e", &ev);
        col.on_snapshot(&dp.snapshot("e", T0 + (i + 1) * S, None))
            .unwrap();
    }
    let summary = col.finish().unwrap();
    let al = alerts_jsonl(&out);
    let first: Vec<&Value> = al.iter().filter(|a| a["summary"] == false).collect();
    let held: Vec<&Value> = al.iter().filter(|a| a["summary"] == true).collect();
    // many keys, one alert: three QPs alerted on their own, one alert for the other 97
    assert_eq!(first.len(), 4, "{first:#?}");
    let many: Vec<&&Value> = first.iter().filter(|a| a["subjects"] == 97).collect();
    assert_eq!(many.len(), 1, "{first:#?}");
    assert_eq!(held.len(), 4, "one summary each at the end");
    let total: u64 = al.iter().map(|a| a["count"].as_u64().unwrap()).sum();
    assert_eq!(
        total,
        100 * 4 * 3,
        "every mis-marked packet is counted once"
    );
    assert!(al.iter().all(|a| a["rule"] == rule::DSCP_MISMATCH));
    assert_eq!(summary["alerts"][rule::DSCP_MISMATCH], 8);
    assert_eq!(summary["alert_occurrences"][rule::DSCP_MISMATCH], 1200);
}

/// An output that cannot be finished (the output directory replaced by a file before the
/// stop: the last Parquet files and summary.json cannot be written) still gives the run's
/// summary with its alerts beside the error: replay printed `--no-out` and no alert count.
#[test]
fn an_unfinished_output_keeps_the_summary_and_its_alerts() {
    let tmp = TempDir::new("unfinished");
    let out = tmp.path().join("out");
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut col = Collector::new(CollectorConfig::new(
        out.clone(),
        "h",
        "replay",
        policy.clone(),
    ))
    .unwrap();
    col.quiet_stderr();
    let mut dp = Datapath::new(policy.expected, 1000);
    for psn in 0..4 {
        let mut r = Roce::data(A, B, 0x77, psn);
        r.dscp = 0;
        let f = r.frame();
        dp.process(&f, f.len() as u32, T0 + 1, 0);
    }
    col.on_events("e", &dp.take_events());
    col.on_snapshot(&dp.snapshot("e", T0 + S, None)).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, b"not a directory").unwrap();
    let (summary, err) = col.finish_reporting();
    let err = err.expect("the output could not be finished");
    assert!(
        contract::error::chain(&err).contains("summary.json")
            || contract::error::chain(&err).contains(&out.display().to_string()),
        "{}",
        contract::error::chain(&err)
    );
    // the first occurrence and its summary at the stop
    assert_eq!(summary["alerts"][rule::DSCP_MISMATCH], 2, "{summary}");
    assert_eq!(summary["alert_occurrences"][rule::DSCP_MISMATCH], 4);
}

/// A 5,000/s PFC storm from 0.5 s to 1.5 s straddles the interval boundary at 1 s: the first
/// interval reads the 2,500 XOFF of its half, the second the whole storm's densest second (the
/// window spans the boundary), never two halves. A storm's alert counts intervals in storm,
/// one each, and a hold-down summary the intervals it held, not XOFF frames.
#[test]
fn a_storm_across_an_interval_boundary_reads_its_densest_second() {
    let run = |hold_down_s: u64, storm_ms: (u64, u64), intervals: u64| {
        let tmp = TempDir::new("dp-storm");
        let out = tmp.path().to_path_buf();
        let policy = PolicyConfig::from_toml(
            &format!("profile = \"nvidia\"\n[thresholds]\nhold_down_s = {hold_down_s}\n"),
            "inline",
        )
        .unwrap();
        let mut rig = Rig {
            dp: Datapath::new(policy.expected, 1000),
            col: Collector::new(CollectorConfig::new(out.clone(), "h", "replay", policy)).unwrap(),
            sent_roce: 0,
            sent_frames: 0,
        };
        rig.col.quiet_stderr();
        rig.col.begin("veth0", T0, Some(100_000_000_000));
        let xoff = pfc_frame(MAC, 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
        let (mut t, end) = (T0 + storm_ms.0 * 1_000_000, T0 + storm_ms.1 * 1_000_000);
        for i in 1..=intervals {
            while t < T0 + i * S && t < end {
                rig.send_raw(xoff.clone(), t);
                t += 200_000; // 5,000 per second
            }
            rig.snapshot(T0 + i * S);
        }
        rig.col.finish().unwrap();
        alerts_jsonl(&out)
            .into_iter()
            .filter(|a| a["rule"] == rule::PFC_STORM)
            .map(|a| {
                (
                    a["observed"].as_str().unwrap().to_string(),
                    a["count"].as_u64().unwrap(),
                    a["summary"].as_bool().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let storms = run(0, (500, 1500), 3);
    assert_eq!(storms.len(), 2, "{storms:?}");
    assert!(
        storms[0].0.starts_with("2500 XOFF/s on priority 3"),
        "{storms:?}"
    );
    assert!(
        storms[1].0.starts_with("5000 XOFF/s on priority 3"),
        "{storms:?}"
    );
    assert!(storms.iter().all(|s| s.1 == 1 && !s.2), "{storms:?}");
    // 4 s of storm under a 10 s hold-down: one alert, then one summary of the 3 held intervals
    let storms = run(10, (0, 4000), 5);
    assert_eq!(storms.len(), 2, "{storms:?}");
    assert_eq!((storms[0].1, storms[0].2), (1, false), "{storms:?}");
    assert_eq!((storms[1].1, storms[1].2), (3, true), "{storms:?}");
}
