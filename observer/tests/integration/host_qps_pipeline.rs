//! The host's QPs end to end without an RDMA device: a scripted RDMA subsystem (three reads of a
//! device's QPs: a requester sending, a QP that then fails, a QP that is destroyed) goes through
//! the live source's QP feed into the collector; the `qps` table, read back by pyarrow, holds
//! each QP's rows with its packets from its PSNs and its owner; one `qp_error` alert names the
//! failed QP and its owner; summary.json's `host_qps` has the run's figures, as documented.

use std::collections::VecDeque;

use nic::Reading;
use nic::rdma::qp_counters::{CounterMode, QpCounter};
use nic::rdma::{RdmaCmId, RdmaDevice, RdmaError, RdmaQp};
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sinks::summary_json;
use observer::sources::host_qps::QpFeed;
use qps::inventory::{Procfs, QpSource};
use serde_json::Value;

use test_support::TempDir;
use test_support::collector::*;

/// Each read returns the next list of QPs (device 3, `mlx5_0`).
struct Script(VecDeque<Vec<RdmaQp>>);

impl QpSource for Script {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        Ok(vec![RdmaDevice {
            index: 3,
            name: "mlx5_0".into(),
            ..RdmaDevice::default()
        }])
    }
    fn qps(&mut self, _dev: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        Ok(self.0.pop_front().unwrap_or_default())
    }
    fn cm_ids(&mut self, _dev: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        Ok(vec![RdmaCmId {
            dev_index: 3,
            lqpn: Some(0x11),
            dst: Some("10.0.0.2:18515".parse().unwrap()),
            state: Some(5),
            ..RdmaCmId::default()
        }])
    }
}

fn qp(lqpn: u32, state: u8, sq: u32, rq: u32) -> RdmaQp {
    RdmaQp {
        dev_index: 3,
        dev_name: "mlx5_0".into(),
        port: Some(1),
        lqpn,
        rqpn: Some(lqpn + 0x100),
        qp_type: Some(2),
        state: Some(state),
        sq_psn: Some(sq),
        rq_psn: Some(rq),
        pid: Some(4242),
        ..RdmaQp::default()
    }
}

#[test]
fn host_qps_become_rows_an_error_alert_and_summary_figures() {
    let tmp = TempDir::new("host-qps");
    let out = tmp.path().join("out");
    let proc = tmp.path().join("root/proc/4242");
    std::fs::create_dir_all(&proc).unwrap();
    std::fs::write(proc.join("comm"), "all_reduce_perf\n").unwrap();
    std::fs::write(
        proc.join("cgroup"),
        "0::/kubepods.slice/kubepods-pod1b2c3d4e_0f1a_4b2c_9d3e_4f5a6b7c8d9e.slice/cri-containerd-3f2a9c1b7e4d5a6b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d.scope\n",
    )
    .unwrap();
    let (rts, err) = (3u8, 6u8);
    let reads = VecDeque::from(vec![
        vec![
            qp(0x11, rts, 0x00ff_fff0, 5),
            qp(0x12, rts, 7, 7),
            qp(0x13, rts, 1, 1),
        ],
        // 0x11 sent 0x20 packets across the PSN wrap; 0x12 failed; 0x13 still there
        vec![
            qp(0x11, rts, 0x10, 9),
            qp(0x12, err, 7, 7),
            qp(0x13, rts, 1, 1),
        ],
        // 0x13 destroyed
        vec![qp(0x11, rts, 0x30, 9), qp(0x12, err, 7, 7)],
    ]);
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let mut feed = QpFeed::new(
        Box::new(Script(reads)),
        Procfs {
            root: tmp.path().join("root"),
        },
        100,
    );
    feed.begin(1);
    for _ in 0..3 {
        feed.read_into(&mut col).unwrap();
    }
    let summary = col.finish().unwrap();

    let errors: Vec<Value> = alerts_jsonl(&out)
        .into_iter()
        .filter(|a| a["rule"] == "qp_error")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let obs = errors[0]["observed"].as_str().unwrap();
    for want in [
        "QP 18 of mlx5_0",
        "peer QP 274",
        "pid 4242 (all_reduce_perf, pod 1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e/3f2a9c1b7e4d)",
        "moved from RTS to ERR",
    ] {
        assert!(obs.contains(want), "{want:?} not in {obs}");
    }
    assert_eq!(errors[0]["severity"], "critical");

    let t = pyarrow_read(&out, "qps", &["tx_pkts", "rx_pkts"], true);
    assert_eq!(t["rows"], 8, "{t}");
    let recs = t["records"].as_array().unwrap();
    let of = |lqpn: u64| -> Vec<&Value> { recs.iter().filter(|r| r["lqpn"] == lqpn).collect() };
    let a = of(0x11);
    assert_eq!(a.len(), 3);
    let tx: Vec<&Value> = a.iter().map(|r| &r["tx_pkts"]).collect();
    assert_eq!(
        tx,
        [
            &Value::Null,
            &serde_json::json!(0x20),
            &serde_json::json!(0x20)
        ]
    );
    assert_eq!(a[0]["comm"], "all_reduce_perf");
    assert_eq!(a[0]["pod_uid"], "1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e");
    assert_eq!(a[0]["dst"], "10.0.0.2:18515");
    assert_eq!(a[0]["marking"], "unknown");
    assert_eq!(
        of(0x12)
            .iter()
            .map(|r| r["error"].clone())
            .collect::<Vec<_>>(),
        [false, true, true]
    );
    assert_eq!(of(0x13).len(), 2);

    let h = &summary["host_qps"];
    assert_eq!(h["reads"], 3, "{h}");
    assert_eq!(h["qps"], 2);
    assert_eq!(h["errors"], 1);
    assert_eq!(h["gone"], 1);
    assert_eq!(h["appeared"], 3);
    assert_eq!(h["by_state"]["mlx5_0"]["ERR"], 1);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let c = summary_json::check(&written);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert!(
        c.seen.contains("host_qps.by_state.{device}.{state}"),
        "{:?}",
        c.seen
    );
}

/// Each QP's set-up (what the modify-QP probe saw) checked against the policy: the QP set up
/// with traffic class 0 (NCCL_IB_TC unset) is one `qp_marking` alert naming it and its owner,
/// raised once however many intervals it stays; the one with 106 (DSCP 26) is `ok`; a QP set
/// up before the probe is `unknown`, never guessed.
#[test]
fn host_qps_marking_is_checked_against_the_policy() {
    let tmp = TempDir::new("host-qps-marking");
    let out = tmp.path().join("out");
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let row = |lqpn: u32, tc: Option<u8>| qps::QpRow {
        dev: "mlx5_0".into(),
        dev_index: 3,
        lqpn,
        qp_type: "RC".into(),
        state: "RTS".into(),
        pid: Some(77),
        comm: Some("train.py".into()),
        setup: tc.map(|traffic_class| qps::SetUp {
            traffic_class,
            dgid: std::net::Ipv4Addr::new(10, 0, 4, 2)
                .to_ipv6_mapped()
                .octets(),
            ..qps::SetUp::default()
        }),
        ..qps::QpRow::default()
    };
    let mut prev = qps::Inventory::default();
    for i in 0..3u64 {
        let inv = qps::Inventory {
            time_ns: 1_795_000_000_000_000_000 + i * 1_000_000_000,
            qps: vec![row(0x20, Some(106)), row(0x21, Some(0)), row(0x22, None)],
            ..qps::Inventory::default()
        };
        let (p, f) = qps::compare(&prev, &inv);
        col.on_qps(inv.time_ns - 1_000_000_000, &inv, &p, &f)
            .unwrap();
        prev = inv;
    }
    let summary = col.finish().unwrap();
    let marking: Vec<Value> = alerts_jsonl(&out)
        .into_iter()
        .filter(|a| a["rule"] == "qp_marking")
        .collect();
    assert_eq!(marking.len(), 1, "{marking:?}");
    let obs = marking[0]["observed"].as_str().unwrap();
    for want in [
        "QP 33 of mlx5_0",
        "to 10.0.4.2",
        "pid 77 (train.py)",
        "DSCP 0, ECN 0",
    ] {
        assert!(obs.contains(want), "{want:?} not in {obs}");
    }
    assert!(
        marking[0]["expected"].as_str().unwrap().contains("DSCP 26"),
        "{}",
        marking[0]
    );
    let t = pyarrow_read(&out, "qps", &[], true);
    let last: Vec<(u64, Value, Value)> = t["records"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .take(3)
        .map(|r| {
            (
                r["lqpn"].as_u64().unwrap(),
                r["dscp"].clone(),
                r["marking"].clone(),
            )
        })
        .collect();
    assert!(last.contains(&(0x20, 26.into(), "ok".into())), "{last:?}");
    assert!(
        last.contains(&(0x21, 0.into(), "off_policy".into())),
        "{last:?}"
    );
    assert!(
        last.contains(&(0x22, Value::Null, "unknown".into())),
        "{last:?}"
    );
    assert_eq!(summary["host_qps"]["marking"]["off_policy"], 1);
    assert_eq!(summary["host_qps"]["marking"]["unknown"], 1);
}

/// A QP's priority comes from the QoS configuration of its own port, as the NIC source read it:
/// DSCP 26 lands in priority 3 (PFC on) on port 1 (ok), in priority 0 on port 2, whose DSCP
/// table sends it there (lossy: one `qp_marking` alert saying so); a QP of a device whose port
/// the NIC source does not read has no priority and is never called lossy.
#[test]
fn host_qps_land_in_the_priority_their_port_says() {
    use nic::dcb::{APP_SEL_DSCP, DcbApp, DcbIeee, IeeePfc};
    let tmp = TempDir::new("host-qps-port-qos");
    let out = tmp.path().join("out");
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let t0 = 1_795_000_000_000_000_000u64;
    let sample = |iface: &str, port: u32, dscp26_to: u8| {
        let mut s = nic::NicSample::empty(iface, t0);
        s.rdma = Some(nic::RdmaPort {
            dev: "mlx5_0".into(),
            port,
            counters: Vec::new(),
            via: "netlink".into(),
        });
        s.dcb = nic::Reading::Read(DcbIeee {
            pfc: Some(IeeePfc {
                pfc_en: 1 << 3,
                ..IeeePfc::default()
            }),
            app: [(26u16, dscp26_to), (48, 6)]
                .iter()
                .map(|&(protocol, priority)| DcbApp {
                    selector: APP_SEL_DSCP,
                    protocol,
                    priority,
                })
                .collect(),
            ..DcbIeee::default()
        });
        s
    };
    col.on_nic("ens1f0", &sample("ens1f0", 1, 3), None).unwrap();
    col.on_nic("ens1f1", &sample("ens1f1", 2, 0), None).unwrap();
    let row = |dev: &str, port: u32, lqpn: u32| qps::QpRow {
        dev: dev.into(),
        dev_index: 3,
        port: Some(port),
        lqpn,
        qp_type: "RC".into(),
        state: "RTS".into(),
        pid: Some(77),
        comm: Some("train.py".into()),
        setup: Some(qps::SetUp {
            traffic_class: 106,
            ..qps::SetUp::default()
        }),
        ..qps::QpRow::default()
    };
    let inv = qps::Inventory {
        time_ns: t0 + 1_000_000_000,
        qps: vec![
            row("mlx5_0", 1, 0x30),
            row("mlx5_0", 2, 0x31),
            row("mlx5_1", 1, 0x32),
        ],
        ..qps::Inventory::default()
    };
    let (p, f) = qps::compare(&qps::Inventory::default(), &inv);
    col.on_qps(t0, &inv, &p, &f).unwrap();
    let summary = col.finish().unwrap();
    let marking: Vec<Value> = alerts_jsonl(&out)
        .into_iter()
        .filter(|a| a["rule"] == "qp_marking")
        .collect();
    assert_eq!(marking.len(), 1, "{marking:?}");
    let obs = marking[0]["observed"].as_str().unwrap();
    assert!(obs.contains("QP 49 of mlx5_0"), "{obs}");
    assert!(obs.contains("priority 0 (PFC off: lossy)"), "{obs}");
    let t = pyarrow_read(&out, "qps", &[], true);
    let mut rows: Vec<(u64, Value, Value)> = t["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["lqpn"].as_u64().unwrap(),
                r["priority"].clone(),
                r["marking"].clone(),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    assert_eq!(
        rows,
        vec![
            (0x30, 3.into(), "ok".into()),
            (0x31, 0.into(), "lossy".into()),
            (0x32, Value::Null, "ok".into()),
        ]
    );
    assert_eq!(summary["host_qps"]["marking"]["lossy"], 1);
    assert_eq!(summary["host_qps"]["marking"]["ok"], 2);
}

/// A device whose port has counter binding (its auto mode off at the start): the mode
/// changes asked for are recorded, and each read gives the next counter values.
struct CounterScript {
    reads: VecDeque<(Vec<RdmaQp>, Vec<QpCounter>)>,
    counters: Vec<QpCounter>,
    set_calls: std::sync::Arc<std::sync::Mutex<Vec<(u32, u32, u32)>>>,
}

impl QpSource for CounterScript {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        Ok(vec![RdmaDevice {
            index: 3,
            name: "mlx5_0".into(),
            ports: Some(1),
            ..RdmaDevice::default()
        }])
    }
    fn qps(&mut self, _dev: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        let (q, c) = self.reads.pop_front().unwrap_or_default();
        self.counters = c;
        Ok(q)
    }
    fn cm_ids(&mut self, _dev: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        Ok(Vec::new())
    }
    fn counter_mode(&mut self, _d: u32, _p: u32) -> Result<Reading<CounterMode>, RdmaError> {
        Ok(Reading::Read(CounterMode::None))
    }
    fn set_counter_auto(&mut self, d: u32, p: u32, m: u32) -> Result<Reading<()>, RdmaError> {
        self.set_calls.lock().unwrap().push((d, p, m));
        Ok(Reading::Read(()))
    }
    fn counters(&mut self, _d: u32, _p: u32) -> Result<Reading<Vec<QpCounter>>, RdmaError> {
        Ok(Reading::Read(self.counters.clone()))
    }
}

/// `--qp-counters pid`: the port's auto mode is turned on at the start and off again when the
/// feed ends; the QP that fails names its group's counters of the interval in its `qp_error`
/// alert; summary.json has each group's increments over the run (the first read the
/// baseline) and the port's state, as documented.
#[test]
fn qp_counter_groups_reach_the_error_alert_and_the_summary() {
    let tmp = TempDir::new("host-qps-counters");
    let out = tmp.path().join("out");
    let (rts, err) = (3u8, 6u8);
    let group = |id: u32, pid: u32, qps: &[u32], ooo: u64, timeouts: u64| QpCounter {
        dev_index: 3,
        port: 1,
        id,
        qp_type: None,
        pid: Some(pid),
        kern_name: None,
        lqpns: qps.to_vec(),
        hw: vec![
            ("out_of_sequence".into(), ooo),
            ("local_ack_timeout_err".into(), timeouts),
        ],
    };
    let reads = VecDeque::from(vec![
        (
            vec![qp(0x11, rts, 1, 1), qp(0x12, rts, 1, 1)],
            vec![group(1, 4242, &[0x11, 0x12], 10, 0)],
        ),
        (
            vec![qp(0x11, rts, 9, 9), qp(0x12, err, 1, 1)],
            vec![group(1, 4242, &[0x11, 0x12], 13, 7)],
        ),
        (
            vec![qp(0x11, rts, 9, 9), qp(0x12, err, 1, 1)],
            vec![group(1, 4242, &[0x11, 0x12], 14, 7)],
        ),
    ]);
    let set_calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let mut feed = QpFeed::new(
        Box::new(CounterScript {
            reads,
            counters: Vec::new(),
            set_calls: set_calls.clone(),
        }),
        Procfs {
            root: tmp.path().join("root"),
        },
        100,
    );
    let lines = feed.enable_counters(qps::counters::parse_mask("pid").unwrap());
    assert_eq!(
        lines,
        [
            "mlx5_0/1: auto mode by pid turned on (off again at exit); QPs set up from now on are counted per group"
        ]
    );
    assert_eq!(*set_calls.lock().unwrap(), [(3, 1, 2)]);
    feed.begin(1);
    for _ in 0..3 {
        feed.read_into(&mut col).unwrap();
    }
    drop(feed);
    assert_eq!(
        *set_calls.lock().unwrap(),
        [(3, 1, 2), (3, 1, 0)],
        "auto mode turned off again at the end"
    );
    let summary = col.finish().unwrap();
    let errors: Vec<Value> = alerts_jsonl(&out)
        .into_iter()
        .filter(|a| a["rule"] == "qp_error")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let obs = errors[0]["observed"].as_str().unwrap();
    assert!(
        obs.contains(
            "its counter group 1 (2 QPs) in the interval: local_ack_timeout_err +7, out_of_sequence +3"
        ),
        "{obs}"
    );
    let c = &summary["host_qps"]["counters"];
    assert_eq!(c["grouping"], "pid", "{c}");
    assert_eq!(c["ports"][0]["state"], "turned_on", "{c}");
    let g = &c["groups"][0];
    assert_eq!(g["pid"], 4242, "{g}");
    assert_eq!(g["qps"], 2);
    assert_eq!(g["increments"]["out_of_sequence"], 4, "{g}");
    assert_eq!(g["increments"]["local_ack_timeout_err"], 7, "{g}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let check = summary_json::check(&written);
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    assert!(
        check
            .seen
            .contains("host_qps.counters.groups[].increments.{counter}"),
        "{:?}",
        check.seen
    );
}

/// An mlx5 device: each read the next QP listing and raw contexts (`RES_QP_GET_RAW`).
struct RawScript {
    reads: VecDeque<(Vec<RdmaQp>, Vec<qps::mlx5::Mlx5Qp>)>,
    raw: Vec<qps::mlx5::Mlx5Qp>,
}

impl QpSource for RawScript {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        Ok(vec![RdmaDevice {
            index: 3,
            name: "mlx5_0".into(),
            ..RdmaDevice::default()
        }])
    }
    fn qps(&mut self, _dev: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        let (q, r) = self.reads.pop_front().unwrap_or_default();
        self.raw = r;
        Ok(q)
    }
    fn cm_ids(&mut self, _dev: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        Ok(Vec::new())
    }
    fn qp_raw(&mut self, _dev: u32, lqpn: u32) -> Result<Reading<Vec<u8>>, RdmaError> {
        let m = self
            .raw
            .iter()
            .find(|m| m.qpn == lqpn)
            .expect("raw of a listed QP");
        Ok(Reading::Read(qps::mlx5::lay_out(m, true)))
    }
}

/// A QP set up before the observer (no probe record) on mlx5: its traffic class comes from
/// the raw QP context (0: NCCL_IB_TC unset, one `qp_marking` alert, `setup_source`
/// `mlx5_qpc`); a requester whose send PSN stands still with 40 packets unacknowledged raises
/// one `qp_stalled` once `qp_stall_s` passes, and again only after it made progress and stalled
/// anew; summary.json counts the raw reads and the stalls.
#[test]
fn raw_qp_context_gives_set_ups_and_stalls() {
    let tmp = TempDir::new("host-qps-raw");
    let out = tmp.path().join("out");
    let rts = 3u8;
    let ctx = |qpn: u32, tclass: u8, next: u32, acked: u32| qps::mlx5::Mlx5Qp {
        qpn,
        state: 3,
        st: 0,
        mtu: 5,
        remote_qpn: qpn + 0x100,
        tclass,
        eth_prio: 0,
        rgid: std::net::Ipv4Addr::new(10, 0, 4, 2)
            .to_ipv6_mapped()
            .octets(),
        next_send_psn: next,
        last_acked_psn: acked,
        next_rcv_psn: 1,
        qpc_offset: 24,
    };
    // QP 0x11: traffic class 0, sending; QP 0x12: stalls at read 2 (PSN 0x40 sent, 0x17
    // acknowledged; its send PSN moved since read 1), stands still at reads 3 and 4, moves at
    // read 5, stands still at 6 and 7.
    let reads = VecDeque::from(vec![
        (
            vec![qp(0x11, rts, 1, 1), qp(0x12, rts, 0x10, 1)],
            vec![ctx(0x11, 0, 1, 0), ctx(0x12, 106, 0x10, 0x0f)],
        ),
        (
            vec![qp(0x11, rts, 9, 1), qp(0x12, rts, 0x40, 1)],
            vec![ctx(0x11, 0, 9, 8), ctx(0x12, 106, 0x40, 0x17)],
        ),
        (
            vec![qp(0x11, rts, 19, 1), qp(0x12, rts, 0x40, 1)],
            vec![ctx(0x11, 0, 19, 18), ctx(0x12, 106, 0x40, 0x17)],
        ),
        (
            vec![qp(0x11, rts, 29, 1), qp(0x12, rts, 0x40, 1)],
            vec![ctx(0x11, 0, 29, 28), ctx(0x12, 106, 0x40, 0x17)],
        ),
        (
            vec![qp(0x11, rts, 39, 1), qp(0x12, rts, 0x80, 1)],
            vec![ctx(0x11, 0, 39, 38), ctx(0x12, 106, 0x80, 0x3f)],
        ),
        (
            vec![qp(0x11, rts, 49, 1), qp(0x12, rts, 0x80, 1)],
            vec![ctx(0x11, 0, 49, 48), ctx(0x12, 106, 0x80, 0x3f)],
        ),
        (
            vec![qp(0x11, rts, 59, 1), qp(0x12, rts, 0x80, 1)],
            vec![ctx(0x11, 0, 59, 58), ctx(0x12, 106, 0x80, 0x3f)],
        ),
    ]);
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    cfg.policy.thresholds.qp_stall_ns = 5_000_000;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let mut feed = QpFeed::new(
        Box::new(RawScript {
            reads,
            raw: Vec::new(),
        }),
        Procfs {
            root: tmp.path().join("root"),
        },
        100,
    );
    feed.begin(1);
    for _ in 0..7 {
        feed.read_into(&mut col).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(feed);
    let summary = col.finish().unwrap();
    let alerts = alerts_jsonl(&out);
    let of = |rule: &str| -> Vec<&Value> { alerts.iter().filter(|a| a["rule"] == rule).collect() };
    let marking = of("qp_marking");
    assert_eq!(marking.len(), 1, "{marking:?}");
    assert_eq!(marking[0]["qp"], 0x11, "{}", marking[0]);
    assert!(
        marking[0]["observed"]
            .as_str()
            .unwrap()
            .contains("DSCP 0, ECN 0"),
        "{}",
        marking[0]
    );
    let stalls = of("qp_stalled");
    assert_eq!(stalls.len(), 2, "one per stall: {stalls:?}");
    let obs = stalls[0]["observed"].as_str().unwrap();
    for want in [
        "QP 18 of mlx5_0",
        "peer QP 274",
        "40 packets sent and not acknowledged",
        "next send PSN 64, last acknowledged PSN 23",
    ] {
        assert!(obs.contains(want), "{want:?} not in {obs}");
    }
    assert_eq!(stalls[0]["severity"], "critical");
    let t = pyarrow_read(&out, "qps", &[], true);
    let sources: std::collections::BTreeSet<String> = t["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["setup_source"].as_str().unwrap_or("null").to_string())
        .collect();
    assert_eq!(sources.into_iter().collect::<Vec<_>>(), ["mlx5_qpc"], "{t}");
    let h = &summary["host_qps"];
    assert_eq!(h["stalls"], 2, "{h}");
    assert_eq!(h["raw_context"]["setups"], 2, "{h}");
    assert_eq!(h["raw_context"]["errors"], 0, "{h}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let check = summary_json::check(&written);
    assert!(check.problems.is_empty(), "{:?}", check.problems);
}

/// The device's traffic-class override (mlx5 `tc/1/traffic_class = 0`) replaces what a QP set
/// up through the kernel asked for: the probe saw 106, the device sends 0, `off_policy` with the
/// override named; a QP whose set-up comes from the raw context (what the device applied) is
/// judged on it as it is; summary.json lists the override.
#[test]
fn the_device_traffic_class_override_decides_the_marking() {
    let tmp = TempDir::new("host-qps-tc-override");
    let out = tmp.path().join("out");
    let mut cfg = CollectorConfig::new(
        out.clone(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let row = |lqpn: u32, source: qps::SetUpSource| qps::QpRow {
        dev: "mlx5_0".into(),
        dev_index: 3,
        port: Some(1),
        lqpn,
        qp_type: "RC".into(),
        state: "RTS".into(),
        pid: Some(77),
        comm: Some("train.py".into()),
        setup: Some(qps::SetUp {
            traffic_class: 106,
            source,
            ..qps::SetUp::default()
        }),
        ..qps::QpRow::default()
    };
    let inv = qps::Inventory {
        time_ns: 1_795_000_000_000_000_000,
        qps: vec![
            row(0x40, qps::SetUpSource::Probe),
            row(0x41, qps::SetUpSource::Mlx5Qpc),
        ],
        tc_override: vec![qps::inventory::TcOverride {
            dev: "mlx5_0".into(),
            port: 1,
            traffic_class: 0,
        }],
        ..qps::Inventory::default()
    };
    let (p, f) = qps::compare(&qps::Inventory::default(), &inv);
    col.on_qps(inv.time_ns - 1_000_000_000, &inv, &p, &f)
        .unwrap();
    let summary = col.finish().unwrap();
    let marking: Vec<Value> = alerts_jsonl(&out)
        .into_iter()
        .filter(|a| a["rule"] == "qp_marking")
        .collect();
    assert_eq!(marking.len(), 1, "{marking:?}");
    assert_eq!(marking[0]["qp"], 0x40);
    let obs = marking[0]["observed"].as_str().unwrap();
    assert!(
        obs.contains("override tc/1/traffic_class = 0 replaces the traffic class 106"),
        "{obs}"
    );
    assert_eq!(summary["host_qps"]["tc_override"]["mlx5_0/1"], 0);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let check = summary_json::check(&written);
    assert!(check.problems.is_empty(), "{:?}", check.problems);
}
