//! The NIC view end to end without a RoCE NIC: a scripted NIC (samples with the kernel's mlx5
//! counter names, a 32-bit wrap, a reset, and a DCB configuration that is wrong, then fixed)
//! goes through the live source's NIC feed into the collector; every NIC rule reaches
//! alerts.jsonl with origin `nic`, and the `nic` table, read back by pyarrow, holds the
//! vendor-neutral deltas.

use nic::config::CcParam;
use nic::dcb::{DcbApp, IeeeEts, IeeePfc};
use nic::{DcbIeee, DrvInfo, NicSample, Policy, RdmaPort, Reading, ScriptedReader};
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::kernel::interfaces::NicFeed;
use serde_json::Value;

use test_support::TempDir;
use test_support::collector::*;

const T0: u64 = 1_795_239_299_000_000_000;
const S: u64 = 1_000_000_000;

/// An mlx5 NIC at time `t` with its ethtool and RDMA counters, PFC enabled on `pfc_en`.
fn sample(t: u64, eth: &[(&str, u64)], rdma: &[(&str, u64)], pfc_en: u8) -> NicSample {
    let mut s = NicSample::empty("ens1f0np0", t);
    s.drvinfo = Some(DrvInfo {
        driver: "mlx5_core".into(),
        version: "6.8.0".into(),
        fw_version: "28.39.1002".into(),
        bus_info: "0000:3b:00.0".into(),
        n_stats: eth.len() as u32,
    });
    s.ethtool = Some(eth.iter().map(|(n, v)| (n.to_string(), *v)).collect());
    s.rdma = Some(RdmaPort {
        dev: "mlx5_0".into(),
        port: 1,
        counters: rdma.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        via: "netlink".into(),
    });
    let app: Vec<DcbApp> = (0..64u16)
        .map(|d| DcbApp {
            selector: 5,
            priority: if d == 26 { 3 } else { (d / 8) as u8 },
            protocol: d,
        })
        .collect();
    s.dcb = Reading::Read(DcbIeee {
        pfc: Some(IeeePfc {
            pfc_en,
            ..Default::default()
        }),
        ets: Some(IeeeEts {
            prio_tc: [0, 1, 2, 3, 4, 5, 6, 7],
            ..Default::default()
        }),
        app,
        ..Default::default()
    });
    s.config.mlx5_cc = Reading::Read(vec![
        CcParam {
            name: "np_cnp_dscp".into(),
            value: Reading::Read(48),
        },
        CcParam {
            name: "np_cnp_prio".into(),
            value: Reading::Read(6),
        },
    ]);
    s
}

/// A live collector writing to `out` under the nvidia profile, every alert let through (hold-down
/// 1 ns), checking the NIC's configuration against `nic_policy`.
fn collector(out: &std::path::Path, nic_policy: Option<Policy>) -> Collector {
    let mut cfg = CollectorConfig::new(
        out.to_path_buf(),
        "h",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.policy.thresholds.hold_down_ns = 1;
    cfg.nic_policy = nic_policy;
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    col
}

fn alerts(out: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// PFC storm alerts of the collector fed NIC samples at `times` (ns after T0) whose priority-3
/// pause counter reads `counts`.
fn nic_storms(name: &str, times: &[u64], counts: &[u64]) -> Vec<Value> {
    let tmp = TempDir::new(name);
    let out = tmp.path().to_path_buf();
    let mut col = collector(&out, None);
    let samples: Vec<NicSample> = times
        .iter()
        .zip(counts)
        .map(|(&t, &n)| {
            sample(
                T0 + t,
                &[("rx_prio3_pause", n), ("rx_bytes", n * 64)],
                &[],
                0x08,
            )
        })
        .collect();
    let mut feed = NicFeed::new(Box::new(ScriptedReader::new(samples)));
    for _ in 0..times.len() {
        feed.read_into("ens1f0np0", &mut col).unwrap();
    }
    col.finish().unwrap();
    let found: Vec<Value> = alerts(&out)
        .into_iter()
        .filter(|a| a["rule"] == "pfc_storm")
        .collect();
    found
}

/// The last interval at a stop is partial: its PFC frames are counted over the trailing second
/// (it and the interval before), not extrapolated from a few milliseconds. 30 frames in 20 ms
/// (1500/s if extrapolated) after a whole second of 500 are no storm (530 in 1.02 s); 1200 in
/// 20 ms are one (1700 in 1.02 s).
#[test]
fn a_partial_last_interval_is_not_extrapolated_to_a_storm() {
    let storms = |last: u64| {
        nic_storms(
            &format!("nic-partial-{last}"),
            &[0, S, S + S / 50],
            &[0, 500, 500 + last],
        )
    };
    assert_eq!(storms(30), Vec::<Value>::new());
    let st = storms(1200);
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0]["count"], 1200);
    let obs = st[0]["observed"].as_str().unwrap();
    assert!(
        obs.starts_with("1667 PFC frames/s received on priority 3 (1700 in the trailing 1.020 s, 1200 of them in this interval of 0.020 s"),
        "{obs}"
    );
}

/// With a sub-second interval (100 ms) PFC rates are taken over the trailing second: a burst
/// of 150 frames in one 100 ms interval of an otherwise quiet second (150/s; 1500/s if
/// extrapolated) is no storm; a sustained 1200/s (120 per interval) is, once more than 1000
/// frames have been seen within a second (a window shorter than a second counts over one).
#[test]
fn sub_second_intervals_take_pfc_rates_over_the_trailing_second() {
    let times: Vec<u64> = (0..=20).map(|i| i * S / 10).collect();
    let burst: Vec<u64> = (0..=20u64).map(|i| if i >= 12 { 150 } else { 0 }).collect();
    assert_eq!(
        nic_storms("nic-subsecond-burst", &times, &burst),
        Vec::<Value>::new()
    );
    let sustained: Vec<u64> = (0..=20u64).map(|i| i * 120).collect();
    let st = nic_storms("nic-subsecond-sustained", &times, &sustained);
    assert!(!st.is_empty(), "a sustained 1200/s is a storm");
    // the first interval whose trailing second holds more than 1000 frames: the ninth
    let obs = st[0]["observed"].as_str().unwrap();
    assert!(
        obs.starts_with("1080 PFC frames/s received on priority 3 (1080 in the trailing 0.900 s, 120 of them in this interval of 0.100 s"),
        "{obs}"
    );
    assert_eq!(st[0]["count"], 120);
}

#[test]
fn a_scripted_nic_drives_every_nic_rule_and_the_nic_table() {
    let tmp = TempDir::new("nic-pipeline");
    let out = tmp.path().to_path_buf();
    let mut col = collector(&out, Some(Policy::nvidia()));
    let e0: Vec<(&str, u64)> = vec![
        ("rx_prio3_pause", 100),
        ("rx_prio0_pause", 0),
        ("rx_global_pause", 0),
        ("rx_prio3_discards", 0),
        ("tx_pause_storm_warning_events", 0),
        ("rx_bytes", 5000),
    ];
    let r0: Vec<(&str, u64)> = vec![
        ("np_ecn_marked_roce_packets", 0),
        ("np_cnp_sent", 0),
        ("rp_cnp_ignored", 0),
        ("packet_seq_err", u32::MAX as u64 - 2), // a 32-bit Q counter about to wrap
        ("local_ack_timeout_err", 0),
        ("out_of_sequence", 0),
    ];
    // Interval 1 (1 s): a 3000/s PFC storm on priority 3, PFC on priority 0, 802.3x PAUSE,
    // drops of priority 3, a pause-storm event, 50 CE-marked packets and no CNP sent, CNPs
    // ignored, a NAK sequence error counter that wraps (+5), ACK timeouts, out-of-sequence.
    let e1: Vec<(&str, u64)> = vec![
        ("rx_prio3_pause", 3100),
        ("rx_prio0_pause", 7),
        ("rx_global_pause", 2),
        ("rx_prio3_discards", 9),
        ("tx_pause_storm_warning_events", 1),
        ("rx_bytes", 9000),
    ];
    let r1: Vec<(&str, u64)> = vec![
        ("np_ecn_marked_roce_packets", 50),
        ("np_cnp_sent", 0),
        ("rp_cnp_ignored", 4),
        ("packet_seq_err", 2),
        ("local_ack_timeout_err", 3),
        ("out_of_sequence", 6),
    ];
    // Interval 2: quiet, but the driver reloaded (every counter back near zero: a reset), and
    // PFC was reconfigured to priority 3 only.
    let e2: Vec<(&str, u64)> = vec![("rx_prio3_pause", 1), ("rx_bytes", 10)];
    let r2: Vec<(&str, u64)> = vec![("np_cnp_sent", 0)];
    let samples = vec![
        sample(T0, &e0, &r0, 0x09), // PFC on priorities 0 and 3: config_pfc_priorities fails
        sample(T0 + S, &e1, &r1, 0x09),
        sample(T0 + 2 * S, &e2, &r2, 0x08),
    ];
    let mut feed = NicFeed::new(Box::new(ScriptedReader::new(samples)));
    for _ in 0..3 {
        feed.read_into("ens1f0np0", &mut col).unwrap();
    }
    let summary = col.finish().unwrap();

    let al = alerts(&out);
    let nic: Vec<&Value> = al.iter().filter(|a| a["origin"] == "nic").collect();
    let count = |rule: &str| -> u64 {
        nic.iter()
            .filter(|a| a["rule"] == rule)
            .map(|a| a["count"].as_u64().unwrap())
            .sum()
    };
    // configuration: PFC on priorities 0 and 3 instead of 3 only
    let cfg_alert = nic
        .iter()
        .find(|a| a["rule"] == "config_pfc_priorities")
        .expect("config_pfc_priorities");
    assert!(
        cfg_alert["expected"]
            .as_str()
            .unwrap()
            .contains("shown by `"),
        "{cfg_alert}"
    );
    assert_eq!(cfg_alert["subject"], "nic counters");
    // counters of interval 1
    assert_eq!(
        count("pfc_storm"),
        3000 + 1,
        "3000 PFC frames in 1 s, 1 storm event"
    );
    assert_eq!(count("pfc_wrong_priority"), 7);
    assert_eq!(count("pause_802_3x"), 2);
    assert_eq!(count("rdma_class_drops"), 9);
    assert_eq!(count("ce_without_cnp"), 50);
    assert_eq!(count("cnp_ignored"), 4);
    assert_eq!(
        count("go_back_n"),
        5 + 3 + 6,
        "the wrapped 32-bit counter is +5"
    );
    assert_eq!(summary["alerts"]["config_pfc_priorities"], 1);

    // the nic table, read by pyarrow
    let t = pyarrow_read(
        &out,
        "nic",
        &[
            "pfc_rx_frames_p3",
            "pfc_rx_frames_p0",
            "nak_seq_err_rx",
            "counter_resets",
        ],
        true,
    );
    assert_eq!(t["rows"], 2, "one row per interval: {t}");
    assert_eq!(t["sums"]["pfc_rx_frames_p3"], 3000 + 1);
    assert_eq!(t["sums"]["nak_seq_err_rx"], 5);
    let recs = t["records"].as_array().unwrap();
    let r1 = &recs[0];
    assert_eq!(r1["driver"], "mlx5");
    assert_eq!(r1["rdma_device"], "mlx5_0");
    assert!(r1["config"].as_str().unwrap().contains("pfc_en"), "{r1}");
    // a counter this NIC does not have is null, not 0
    assert_eq!(r1["pfc_tx_frames_p3"], Value::Null);
    // rx_bytes has no vendor-neutral name: it is kept raw
    assert!(
        r1["raw"].to_string().contains("ethtool:rx_bytes"),
        "{}",
        r1["raw"]
    );
    // interval 2: the reset is counted, the configuration change is recorded
    let r2 = &recs[1];
    assert!(r2["counter_resets"].as_i64().unwrap() >= 1, "{r2}");
    assert!(r2["config"].is_string(), "{r2}");
    assert_eq!(
        t["sums"]["pfc_rx_frames_p0"], 7,
        "absent in sample 3: null there"
    );
}

/// The terminal view's NIC pane is fed by the collector: a scripted mlx5 NIC whose DCB
/// configuration has PFC off on the RDMA priority gives the view its checks (the failure
/// first), PFC frames per priority from the NIC's own counters (last interval and since the
/// start), and what moved in the interval with the discards first.
#[test]
fn the_terminal_view_gets_the_nic_checks_and_counters() {
    use observer::sinks::tui::model::{Mailbox, ViewSink};
    use std::sync::Arc;
    let tmp = TempDir::new("nic-view");
    let out = tmp.path().to_path_buf();
    let mut col = collector(&out, Some(Policy::nvidia()));
    let mb = Arc::new(Mailbox::default());
    col.add_sink(Box::new(ViewSink::new([26, 255, 48], mb.clone())));
    let eth = |pause: u64, disc: u64| {
        vec![
            ("rx_prio3_pause", pause),
            ("rx_prio3_discards", disc),
            ("rx_bytes", 5000 + pause),
        ]
    };
    let rdma = |cnp: u64| vec![("np_cnp_sent", cnp)];
    // PFC enabled on priority 0 only (0x01): the RDMA priority 3 is not lossless
    let samples = vec![
        sample(T0, &eth(100, 0), &rdma(0), 0x01),
        sample(T0 + S, &eth(400, 7), &rdma(25), 0x01),
        sample(T0 + 2 * S, &eth(450, 9), &rdma(40), 0x01),
    ];
    let mut feed = NicFeed::new(Box::new(ScriptedReader::new(samples)));
    for _ in 0..3 {
        feed.read_into("ens1f0np0", &mut col).unwrap();
    }
    // an interval of the packet side (none seen) publishes the view
    col.begin("ens1f0np0", T0, None);
    col.on_snapshot(&observer::sources::Snapshot {
        iface: "ens1f0np0".into(),
        time_ns: T0 + 2 * S,
        link_speed_bps: None,
        qps: Vec::new(),
        iface_stats: Default::default(),
        macs: Vec::new(),
        changed: None,
    })
    .unwrap();
    let d = mb.take_data().expect("the view's data");
    assert_eq!(d.nics.len(), 1, "{:?}", d.nics);
    let v = &d.nics[0];
    assert_eq!(
        (
            v.iface.as_str(),
            v.driver.as_str(),
            v.rdma_device.as_deref()
        ),
        ("ens1f0np0", "mlx5", Some("mlx5_0"))
    );
    let (fail, _, pass) = v.check_counts();
    assert!(fail >= 1 && pass >= 1, "{:?}", v.checks);
    assert_eq!(
        v.checks[0].verdict, "fail",
        "failures first: {:?}",
        v.checks
    );
    assert!(
        v.checks
            .iter()
            .any(|c| c.verdict == "fail" && c.name.contains("pfc")),
        "{:?}",
        v.checks
    );
    // the last interval: 50 PFC frames on p3, 2 dropped, 15 CNPs sent; since the start 350
    assert_eq!(v.pfc_rx[3], Some(50));
    assert_eq!(v.pfc_rx_total[3], 350);
    let moved: Vec<(&str, i64, bool)> = v.moved.iter().map(|m| (m.0.as_str(), m.1, m.2)).collect();
    assert_eq!(
        &moved[..2],
        &[("rx_discards_p3", 2, true), ("cnp_sent", 15, false)],
        "{moved:?}"
    );
}
