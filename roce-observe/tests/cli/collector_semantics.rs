//! Numbers a person reads at a glance must not contradict each other: the 802.3x alert names
//! only PAUSE senders, a hold-down summary line carries one count, QP numbers come in hex and
//! decimal, the interval log counts the alerts of its interval (events included), `--profile
//! none` checks nothing (not even the MTU), `--fail-on` gates a CI job, and times after 2262 do
//! not wrap. Each test failed before its fix.

use std::process::Command;

use observer::pipeline::alerts::{Alert, AlertKey, Dedup};
use observer::pipeline::rows::{FlowsBuilder, flows_schema};
use observer::pipeline::rules::Rule;
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::datapath::Datapath;
use observer::sources::synthetic::{Roce, pause_frame, pfc_frame};
use observer_common::maps::{Policy, QpKey, QpValue, policy_flags};
use serde_json::Value;

use test_support::TempDir;

const T0: u64 = 1_795_239_299_000_000_000;
const S: u64 = 1_000_000_000;

fn alerts(out: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn collector(name: &str) -> (Collector, TempDir) {
    let out = TempDir::new(name);
    let cfg = CollectorConfig::new(
        out.path().to_path_buf(),
        "h",
        "replay",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    col.begin("e0", T0, Some(100_000_000_000));
    (col, out)
}

/// The 802.3x alert names the senders of PAUSE only; a PFC alert the senders of its priority's
/// frames only.
#[test]
fn pause_and_pfc_alerts_name_their_own_senders() {
    let (mut col, tmp) = collector("sem-pause");
    let out = tmp.path();
    let mut dp = Datapath::new(Policy::NONE, 1024);
    let pfc_sender = [2, 0, 0, 0, 0, 0x0a];
    let pause_sender = [2, 0, 0, 0, 0, 0x0b];
    for _ in 0..5 {
        let f = pfc_frame(pfc_sender, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]);
        dp.process(&f, f.len() as u32, T0 + 1, 0);
    }
    for _ in 0..2 {
        let f = pause_frame(pause_sender, 50);
        dp.process(&f, f.len() as u32, T0 + 2, 0);
    }
    // priority 5, not the RDMA priority (3): pfc_wrong_priority
    let wrong_sender = [2, 0, 0, 0, 0, 0x0c];
    for _ in 0..4 {
        let f = pfc_frame(wrong_sender, 1 << 5, [0, 0, 0, 0, 0, 100, 0, 0]);
        dp.process(&f, f.len() as u32, T0 + 3, 0);
    }
    col.on_snapshot(&dp.snapshot("e0", T0 + S, None)).unwrap();
    col.finish().unwrap();
    let a = alerts(out);
    let pause = a
        .iter()
        .find(|a| a["rule"] == "pause_802_3x")
        .expect("a pause alert");
    let obs = pause["observed"].as_str().unwrap();
    assert!(obs.contains("02:00:00:00:00:0b=2"), "{obs}");
    assert!(
        !obs.contains("02:00:00:00:00:0a"),
        "a PFC sender in the PAUSE list: {obs}"
    );
    let wrong = a
        .iter()
        .find(|a| a["rule"] == "pfc_wrong_priority")
        .expect("a pfc_wrong_priority alert");
    assert_eq!(
        wrong["observed"], "PFC on priority 5: 4 XOFF, 0 XON from 02:00:00:00:00:0c=4",
        "{wrong}"
    );
}

#[test]
fn a_summary_line_has_one_count_and_qps_come_in_hex_and_decimal() {
    let key = AlertKey {
        iface: "e0".into(),
        qp: Some(0x12),
        ..Default::default()
    };
    let cand = |t, n| {
        Alert::candidate(
            Rule::DscpMismatch,
            key.clone(),
            t,
            format!("dscp 0 x{n}"),
            "dscp 26".into(),
            n,
            "interval",
        )
    };
    let mut d = Dedup::new(10 * S);
    let first = d.offer(cand(T0, 5)).expect("the first alert");
    assert!(
        first.message().contains("qp 0x000012 (18)"),
        "{}",
        first.message()
    );
    assert!(d.offer(cand(T0 + S, 28)).is_none());
    assert!(d.offer(cand(T0 + 2 * S, 6)).is_none());
    let sum = d.tick(T0 + 10 * S, false).remove(0);
    let m = sum.message();
    assert!(m.contains("34 more occurrences"), "{m}");
    assert!(
        !m.contains("x28") && !m.contains("x6"),
        "two counts on one line: {m}"
    );
    let j = sum.json("h", "replay");
    assert_eq!(j["qp"], 18);
    assert_eq!(j["qp_hex"], "0x000012");
}

#[test]
fn the_interval_log_counts_alerts_raised_by_events_of_its_interval() {
    let (mut col, _tmp) = collector("sem-log");
    let mut p = PolicyConfig::profile("nvidia").unwrap().expected;
    p.flags |= policy_flags::ENABLED;
    let mut dp = Datapath::new(p, 1024);
    for (i, qp) in [0x11u32, 0x12, 0x13, 0x14].into_iter().enumerate() {
        let mut r = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], qp, 0);
        r.dscp = 0; // off the policy: a first-occurrence event per QP
        let f = r.frame();
        dp.process(&f, f.len() as u32, T0 + i as u64, 0);
    }
    let ev = dp.take_events();
    assert!(ev.len() >= 4, "{ev:?}");
    col.on_events("e0", &ev);
    col.on_snapshot(&dp.snapshot("e0", T0 + S, None)).unwrap();
    assert_eq!(col.last.alerts, 4, "the four dscp alerts of this interval");
    col.finish().unwrap();
}

#[test]
fn times_after_2262_do_not_wrap() {
    let t = 9_300_000_000_000_000_000u64; // year 2264, past 2^63 ns
    let mut b = FlowsBuilder::new("h", "replay", "e0", t, t + S);
    let mut v = QpValue::ZERO;
    v.pkts = 1;
    v.first_ns = t;
    v.last_ns = t + 1000;
    b.push(&QpKey::default(), &v, true, false, 0);
    let batch = b.finish(&flows_schema()).unwrap();
    let col = batch
        .column_by_name("first_pkt")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(col.value(0), (t / 1000) as i64);
}

/// A classic pcap (microseconds) of `frames`, one per microsecond from a fixed second.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        for w in [1_795_000_000u32, i as u32, f.len() as u32, f.len() as u32] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        h.extend_from_slice(f);
    }
    std::fs::write(path, h).unwrap();
}

/// A pcap of RDMA WRITE FIRST packets of 1024 bytes: a path MTU of 1024 where nvidia expects
/// 4096 (`mtu_below_expected`, a warning), marking otherwise as expected.
fn mtu_1024_capture(path: &std::path::Path) {
    let frames: Vec<_> = (0..20u32)
        .map(|psn| {
            let mut r = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], 0x21, psn);
            r.opcode = 0x06; // RDMA WRITE FIRST: its payload is the path MTU
            r.frame()
        })
        .collect();
    write_pcap(path, &frames);
}

fn replay(args: &[&str], file: &std::path::Path, out: &std::path::Path) -> (i32, Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .arg("replay")
        .args(args)
        .args(["--json", "--out"])
        .arg(out)
        .arg(file)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (
        o.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// 20 packets of a QP whose ICRC fails are one `icrc_bad` alert counting them (a warning, so
/// `--fail-on warning` fails); WRITE FIRST packets of 64 bytes, below the smallest RoCE MTU,
/// are no path MTU and raise no `mtu_below_expected` ("RoCE MTU 0" before).
#[test]
fn bad_icrc_is_an_alert_and_no_path_mtu_reads_zero() {
    let tmp = TempDir::new("sem-icrc");
    let dir = tmp.path();
    let mut frames = Vec::new();
    for psn in 0..30u32 {
        let mut f = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], 0x22, psn).frame();
        if (5..25).contains(&psn) {
            *f.last_mut().unwrap() ^= 0x5a; // the ICRC's last byte
        }
        frames.push(f);
    }
    for psn in 0..10u32 {
        let mut r = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], 0x23, psn);
        r.opcode = 0x06;
        r.payload = 64;
        frames.push(r.frame());
    }
    let pcap = dir.join("icrc.pcap");
    write_pcap(&pcap, &frames);
    let out = dir.join("out");
    let (code, v, err) = replay(&["--fail-on", "warning"], &pcap, &out);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["alerts"]["icrc_bad"], 1, "{v}");
    assert!(v["alerts"].get("mtu_below_expected").is_none(), "{v}");
    let lines = alerts(&out);
    let icrc: Vec<_> = lines.iter().filter(|a| a["rule"] == "icrc_bad").collect();
    assert_eq!(icrc.len(), 1, "{lines:?}");
    assert_eq!(icrc[0]["count"], 20);
    assert_eq!(icrc[0]["qp"], 0x22);
    assert_eq!(icrc[0]["severity"], "warning");
    assert!(err.contains("icrc_bad"), "{err}");
    // --no-icrc: nothing verified, nothing raised
    let (code, v, err) = replay(
        &["--fail-on", "warning", "--no-icrc"],
        &pcap,
        &dir.join("n"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(v["alerts"].get("icrc_bad").is_none(), "{v}");
}

/// The default profile checks the PCP of tagged frames: a QP whose data is re-marked from
/// priority 3 to 0 is a `pcp_mismatch`, a QP on 3 and an untagged QP are not; with
/// `tags = "required"` the untagged QP is one too.
#[test]
fn tagged_frames_carry_the_rdma_priority_untagged_pass_unless_required() {
    let tmp = TempDir::new("sem-pcp");
    let dir = tmp.path();
    let mut frames = Vec::new();
    for psn in 0..10u32 {
        for (qp, pcp) in [
            (0x31, Some(3)),
            (0x32, Some(if psn < 6 { 3 } else { 0 })),
            (0x33, None),
        ] {
            let mut r = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], qp, psn);
            r.pcp = pcp;
            frames.push(r.frame());
        }
    }
    let pcap = dir.join("pcp.pcap");
    write_pcap(&pcap, &frames);
    let out = dir.join("out");
    let (code, v, err) = replay(&[], &pcap, &out);
    assert_eq!(code, 0, "{err}");
    // the 4 re-marked packets of QP 0x32 (its first as an event, the rest by the interval)
    assert_eq!(v["alert_occurrences"]["pcp_mismatch"], 4, "{v}");
    let a: Vec<Value> = alerts(&out)
        .into_iter()
        .filter(|a| a["rule"] == "pcp_mismatch")
        .collect();
    assert!(!a.is_empty() && a.iter().all(|a| a["qp"] == 0x32), "{a:?}");
    assert_eq!(a[0]["observed"], "pcp 0", "{a:?}");
    assert_eq!(a[0]["expected"], "pcp 3 when tagged (untagged not checked)");
    let policy = dir.join("req.toml");
    std::fs::write(&policy, "[data]\ntags = \"required\"\n").unwrap();
    let (_, v, err) = replay(
        &["--policy", policy.to_str().unwrap()],
        &pcap,
        &dir.join("req"),
    );
    // and the untagged QP 0x33's 10 packets
    assert_eq!(v["alert_occurrences"]["pcp_mismatch"], 14, "{v} {err}");
}

#[test]
fn profile_none_checks_nothing_and_fail_on_gates_on_severity() {
    let tmp = TempDir::new("sem-replay");
    let dir = tmp.path();
    let pcap = dir.join("mtu.pcap");
    mtu_1024_capture(&pcap);
    let (code, v, err) = replay(&["--profile", "none"], &pcap, &dir.join("none"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["qps"][0]["pkts"], 20);
    assert_eq!(
        v["alerts"],
        serde_json::json!({}),
        "--profile none raised alerts: {v}"
    );
    let (code, v, err) = replay(&["--fail-on", "critical"], &pcap, &dir.join("crit"));
    assert_eq!(code, 0, "only a warning was raised: {err}");
    assert_eq!(v["alerts"]["mtu_below_expected"], 1);
    let (code, v, err) = replay(&["--fail-on", "warning"], &pcap, &dir.join("warn"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        v["qps"][0]["pkts"], 20,
        "the summary is printed before the exit status"
    );
    assert!(err.contains("mtu_below_expected"), "{err}");
    // --no-out runs no alert rule: gating on alerts with it is a usage error, never a pass
    // (it once exited 0 whatever the capture held)
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["replay", "--no-out", "--fail-on", "warning"])
        .arg(&pcap)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--no-out") && err.contains("--fail-on"),
        "{err}"
    );
    // an input that cannot be opened: one error naming it, before anything is read or written
    // (it once printed an empty summary, then the error three times)
    let missing = dir.join("missing.pcap");
    let out = dir.join("never");
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["replay", "--out"])
        .arg(&out)
        .arg(&pcap)
        .arg(&missing)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(err.matches("missing.pcap").count(), 1, "{err}");
    assert!(err.contains("cannot open"), "{err}");
    assert!(!out.exists(), "the output directory was created");
}

/// A fault on many keys is one alert naming them: eight QPs bleached to DSCP 0 give three
/// alerts of their own and one for the other five (`subjects` 5, the keys listed, their
/// packets counted once), in alerts.jsonl and the alerts table alike; with `aggregate_keys = 0`
/// each key has its own.
#[test]
fn a_fault_on_many_keys_is_one_alert() {
    let tmp = TempDir::new("sem-many");
    let dir = tmp.path();
    let mut frames = Vec::new();
    for q in 1..=8u8 {
        for psn in 0..10u32 {
            let mut r = Roce::data([10, 77, 4, q], [10, 77, 5, q], 0x40 + q as u32, psn);
            r.dscp = 0;
            frames.push(r.frame());
        }
    }
    let pcap = dir.join("bleach.pcap");
    write_pcap(&pcap, &frames);
    let out = dir.join("out");
    let (_, v, err) = replay(&[], &pcap, &out);
    let lines = alerts(&out);
    let dscp: Vec<&Value> = lines
        .iter()
        .filter(|a| a["rule"] == "dscp_mismatch" && a["summary"] == false)
        .collect();
    let alone: Vec<&&Value> = dscp.iter().filter(|a| a["subjects"] == 1).collect();
    let many: Vec<&&Value> = dscp.iter().filter(|a| a["subjects"] != 1).collect();
    assert_eq!(alone.len(), 3, "{lines:#?}\n{err}");
    assert_eq!(many.len(), 1, "{lines:#?}");
    let m = many[0];
    assert_eq!(m["subjects"], 5);
    assert_eq!(m["count"], 50, "each key's 10 packets once: {m}");
    assert_eq!(m["keys"].as_array().unwrap().len(), 5);
    assert!(m["qp"].is_null() && m["src"].is_null(), "{m}");
    let obs = m["observed"].as_str().unwrap();
    assert!(
        obs.starts_with("dscp 0 on 5 QP keys") && obs.contains("from 10.77.4.0/24 to 10.77.5.0/24"),
        "{obs}"
    );
    // every packet off the policy is in one of them
    let total: u64 = dscp
        .iter()
        .map(|a| a["count"].as_u64().unwrap())
        .sum::<u64>()
        + lines
            .iter()
            .filter(|a| a["rule"] == "dscp_mismatch" && a["summary"] == true)
            .map(|a| a["count"].as_u64().unwrap())
            .sum::<u64>();
    assert_eq!(total, 80, "{lines:#?}");
    assert!(v["alerts"]["dscp_mismatch"].as_u64().unwrap() < 8, "{v}");
    // the alerts table: the same subjects and keys
    let mut rows = Vec::new();
    let mut stack = vec![out.join("alerts")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                    std::fs::File::open(&p).unwrap(),
                )
                .unwrap()
                .build()
                .unwrap();
                for b in r {
                    let b = b.unwrap();
                    use arrow::array::{Array, AsArray};
                    let subj = b
                        .column_by_name("subjects")
                        .unwrap()
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .clone();
                    let keys = b.column_by_name("keys").unwrap().as_string::<i32>().clone();
                    for i in 0..b.num_rows() {
                        rows.push((
                            subj.value(i),
                            (!keys.is_null(i)).then(|| keys.value(i).to_string()),
                        ));
                    }
                }
            }
        }
    }
    let agg: Vec<_> = rows.iter().filter(|(n, _)| *n == 5).collect();
    assert_eq!(agg.len(), 1, "{rows:?}");
    let k = agg[0].1.as_deref().unwrap();
    assert_eq!(k.split("; ").count(), 5, "{k}");
    assert!(
        k.starts_with("10.77.4.4 -> 10.77.5.4 qp 0x000044 (68)"),
        "{k}"
    );
    assert!(
        rows.iter()
            .filter(|(n, _)| *n == 1)
            .all(|(_, k)| k.is_none())
    );
    // off: one alert per key
    let policy = dir.join("p.toml");
    std::fs::write(&policy, "[thresholds]\naggregate_keys = 0\n").unwrap();
    let out0 = dir.join("out0");
    let (_, _, err) = replay(&["--policy", policy.to_str().unwrap()], &pcap, &out0);
    let per_key = alerts(&out0)
        .into_iter()
        .filter(|a| a["rule"] == "dscp_mismatch" && a["summary"] == false)
        .count();
    assert_eq!(per_key, 8, "{err}");
}
