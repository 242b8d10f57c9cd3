//! Shared by the tests of this binary: flow-log trees written by the real collector, a fresh
//! directory per test, the `roce-analyze` command, a network namespace of the test's own, and
//! the lock that keeps the heavy tests from running at the same time.

pub use test_support::corpus;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::datapath::Datapath;

pub use test_support::{TempDir, is_root, require, require_root};

/// Corpus cases with every fault the report checks (PSN gaps, go-back-N, CE and CNPs, bleached
/// DSCP, CNPs on the data class, PFC, 802.3x PAUSE, QinQ) beside a clean one.
pub const FAULTS: [&str; 9] = [
    "clean",
    "go_back_n",
    "psn_wrap_loss",
    "ecn_ce_cnp",
    "bleached",
    "cnp_on_data_class",
    "pfc",
    "pause_8023x",
    "qinq",
];

/// The tests of this binary run on parallel threads. Those that start big programs or keep
/// the machine busy for a while (Spark and DuckDB, Chromium, the lab's namespaces and
/// observers, the time-bounded flip loop) hold this lock, so that two of them never share the
/// cores: their time limits and the lab's timing hold as when each ran alone. A test that
/// failed holding it does not stop the others (the poison is ignored).
pub fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh directory for one test, removed when the guard drops (also when the test fails),
/// and its path.
pub fn tmp(name: &str) -> (TempDir, PathBuf) {
    let d = TempDir::new(name);
    let p = d.path().to_path_buf();
    (d, p)
}

/// `roce-analyze ARGS`, its output collected.
pub fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_roce-analyze"))
        .args(args)
        .output()
        .unwrap()
}

/// A network namespace with only loopback up, deleted on drop (also when the test fails).
pub struct Netns(pub String);

impl Netns {
    /// `name` (one left by a killed run of the same process id is deleted first).
    pub fn new(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let ok = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().unwrap();
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ok(&["netns", "add", name]);
        let ns = Netns(name.to_string());
        ok(&["-n", name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Runs the Ethernet cases named `names` through Datapath + Collector into `out`; returns the
/// collector's summary JSON.
pub fn write_logs(out: &Path, names: &[&str]) -> serde_json::Value {
    write_logs_with(out, names, PolicyConfig::profile("nvidia").unwrap(), "t")
}

/// Two reads of a host's QPs into `out`'s `qps` table, as host `host` under the nvidia policy:
/// QP 0x20 of `python3[77]` in pod `pod-a` set up with traffic class 106 (ok), 0x21 of the same
/// with 0 (off the policy), 0x22 of `ib_write_bw[88]` in container `c0ffee` with 0 (off the
/// policy), and 0x23 of `python3[77]`, which is in ERR at the second read; each sends 500
/// packets between the reads.
pub fn write_host_qps(out: &Path, host: &str) {
    let mut col = Collector::new(CollectorConfig::new(
        out.to_path_buf(),
        host,
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    ))
    .unwrap();
    col.quiet_stderr();
    let row = |lqpn: u32, state: &str, tc: u8, sq: u32| {
        let (pid, comm, workload) = if lqpn == 0x22 {
            (
                88,
                "ib_write_bw",
                qps::cgroup::Workload {
                    container_id: Some("c0ffee".into()),
                    ..Default::default()
                },
            )
        } else {
            (
                77,
                "python3",
                qps::cgroup::Workload {
                    pod_uid: Some("pod-a".into()),
                    ..Default::default()
                },
            )
        };
        qps::QpRow {
            dev: "mlx5_0".into(),
            dev_index: 1,
            port: Some(1),
            lqpn,
            qp_type: "RC".into(),
            state: state.into(),
            sq_psn: Some(sq),
            rq_psn: Some(sq),
            pid: Some(pid),
            comm: Some(comm.into()),
            workload: Some(workload.into()),
            setup: Some(qps::SetUp {
                traffic_class: tc,
                dgid: std::net::Ipv4Addr::new(10, 0, 4, 2)
                    .to_ipv6_mapped()
                    .octets(),
                ..qps::SetUp::default()
            }),
            ..qps::QpRow::default()
        }
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let mut prev = qps::Inventory::default();
    for (i, sq) in [(1u64, 1000u32), (2, 1500)] {
        let inv = qps::Inventory {
            time_ns: t0 + i * 1_000_000_000,
            qps: vec![
                row(0x20, "RTS", 106, sq),
                row(0x21, "RTS", 0, sq),
                row(0x22, "RTS", 0, sq),
                row(0x23, if i == 2 { "ERR" } else { "RTS" }, 106, sq),
            ],
            ..qps::Inventory::default()
        };
        let (p, f) = qps::compare(&prev, &inv);
        col.on_qps(t0 + (i - 1) * 1_000_000_000, &inv, &p, &f)
            .unwrap();
        prev = inv;
    }
    col.finish().unwrap();
}

/// A NIC as [`write_nic`] writes it: its driver, and its ethtool and RDMA counters at three
/// reads a second apart, with PFC enabled on the priorities of `pfc_en` (DCB).
pub struct NicSpec<'a> {
    pub driver: &'a str,
    pub eth: [&'a [(&'a str, u64)]; 3],
    pub rdma: [&'a [(&'a str, u64)]; 3],
    pub pfc_en: u8,
}

/// Three reads of a NIC into `out`'s `nic` table, as host `host` and interface `ens1f0np0`,
/// with the NIC configuration checked against the nvidia policy (`config_*` alerts into the
/// alerts table).
pub fn write_nic(out: &Path, host: &str, spec: &NicSpec) {
    use nic::dcb::{DcbApp, IeeeEts, IeeePfc};
    use nic::{DcbIeee, DrvInfo, NicSample, RdmaPort, Reading, ScriptedReader};
    let mut cfg = CollectorConfig::new(
        out.to_path_buf(),
        host,
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    );
    cfg.nic_policy = Some(nic::Policy::nvidia());
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let t0 = 1_700_000_000_000_000_000u64;
    let samples: Vec<NicSample> = (0..3)
        .map(|i| {
            let mut s = NicSample::empty("ens1f0np0", t0 + i as u64 * 1_000_000_000);
            s.drvinfo = Some(DrvInfo {
                driver: spec.driver.into(),
                version: "6.1.0".into(),
                fw_version: "28.39.1002".into(),
                bus_info: "0000:3b:00.0".into(),
                n_stats: spec.eth[i].len() as u32,
            });
            s.ethtool = Some(
                spec.eth[i]
                    .iter()
                    .map(|(n, v)| (n.to_string(), *v))
                    .collect(),
            );
            if spec.driver == "mlx5_core" {
                s.rdma = Some(RdmaPort {
                    dev: "mlx5_0".into(),
                    port: 1,
                    counters: spec.rdma[i]
                        .iter()
                        .map(|(n, v)| (n.to_string(), *v))
                        .collect(),
                    via: "netlink".into(),
                });
            }
            s.dcb = Reading::Read(DcbIeee {
                pfc: Some(IeeePfc {
                    pfc_en: spec.pfc_en,
                    ..Default::default()
                }),
                ets: Some(IeeeEts {
                    prio_tc: [0, 1, 2, 3, 4, 5, 6, 7],
                    ..Default::default()
                }),
                app: (0..64u16)
                    .map(|d| DcbApp {
                        selector: 5,
                        priority: if d == 26 { 3 } else { (d / 8) as u8 },
                        protocol: d,
                    })
                    .collect(),
                ..Default::default()
            });
            s
        })
        .collect();
    let mut feed =
        observer::sources::kernel::interfaces::NicFeed::new(Box::new(ScriptedReader::new(samples)));
    for _ in 0..3 {
        feed.read_into("ens1f0np0", &mut col).unwrap();
    }
    col.finish().unwrap();
}

/// [`write_logs`] under `policy`, as host `host`.
pub fn write_logs_with(
    out: &Path,
    names: &[&str],
    policy: PolicyConfig,
    host: &str,
) -> serde_json::Value {
    let mut col = Collector::new(CollectorConfig::new(
        out.to_path_buf(),
        host,
        "replay",
        policy.clone(),
    ))
    .unwrap();
    let t0 = 1_700_000_000_000_000_000u64;
    // One interface per case: cases reuse keys and PSNs.
    for c in corpus::corpus()
        .into_iter()
        .filter(|c| names.contains(&c.name))
    {
        assert_eq!(c.linktype, corpus::LINKTYPE_ETHERNET, "{}", c.name);
        let mut dp = Datapath::new(policy.expected, 10_000);
        for (i, r) in c.recs.iter().enumerate() {
            dp.process(&r.data, r.data.len() as u32, t0 + r.ts_ns, 0);
            col.on_events(c.name, &dp.take_events());
            if i % 7 == 6 {
                col.on_snapshot(&dp.snapshot(c.name, t0 + r.ts_ns, Some(100_000_000_000)))
                    .unwrap();
            }
        }
        let end = c.recs.last().map(|r| r.ts_ns).unwrap_or(0) + 1_000_000_000;
        col.on_snapshot(&dp.snapshot(c.name, t0 + end, Some(100_000_000_000)))
            .unwrap();
    }
    col.finish().unwrap()
}

/// One connection of [`write_latency`]'s traffic: the requester (`src` -> `dst`, its QP `qp`;
/// the answers come back to QP `qp + 0x100`) and, per interval, its requests as (latency in
/// ns, how many), sent one after the other, each answered before the next.
pub struct LatConn {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub qp: u32,
    pub read: bool,
    pub intervals: [&'static [(u64, u32)]; 2],
}

/// [`write_latency`]'s connections: what the latency report and check see in them.
/// - c1: 150 ACKed WRITEs at 2 ms in each of the two intervals (its p99 over 1 ms in both);
/// - c2: 150 at 50 µs in each (fast);
/// - c3: 97 at 50 µs and 3 at 2 ms in the first (100 samples: the rank-99 sample is slow), 99
///   and 1 in the second (it is fast);
/// - c4: 99 at 2 ms in the first (under the 100 samples the default policy asks for);
/// - c5: 120 READs of one response packet at 5 ms in the first.
pub const LAT_CONNS: [LatConn; 5] = [
    LatConn {
        src: [10, 9, 0, 1],
        dst: [10, 9, 0, 2],
        qp: 0x301,
        read: false,
        intervals: [&[(2_000_000, 150)], &[(2_000_000, 150)]],
    },
    LatConn {
        src: [10, 9, 0, 3],
        dst: [10, 9, 0, 4],
        qp: 0x302,
        read: false,
        intervals: [&[(50_000, 150)], &[(50_000, 150)]],
    },
    LatConn {
        src: [10, 9, 0, 5],
        dst: [10, 9, 0, 6],
        qp: 0x303,
        read: false,
        intervals: [
            &[(50_000, 97), (2_000_000, 3)],
            &[(50_000, 99), (2_000_000, 1)],
        ],
    },
    LatConn {
        src: [10, 9, 0, 7],
        dst: [10, 9, 0, 8],
        qp: 0x304,
        read: false,
        intervals: [&[(2_000_000, 99)], &[]],
    },
    LatConn {
        src: [10, 9, 0, 9],
        dst: [10, 9, 0, 10],
        qp: 0x305,
        read: true,
        intervals: [&[(5_000_000, 120)], &[]],
    },
];

/// The start of [`write_latency`]'s first interval (ns); its intervals are 1 s long.
pub const LAT_T0: u64 = 1_710_000_000_000_000_000;

/// [`LAT_CONNS`]' traffic through the real datapath with latency on (as `replay --latency`)
/// and the collector, into `out` as host `host`, interface `lat0`: two 1 s intervals from
/// [`LAT_T0`]. Its summary.json.
pub fn write_latency(out: &Path, host: &str) -> serde_json::Value {
    write_latency_times(out, host, 1)
}

/// [`write_latency`] with every latency `mul` times as long (the requests as often: with `mul`
/// over 1 a few are outstanding at once).
pub fn write_latency_times(out: &Path, host: &str, mul: u64) -> serde_json::Value {
    use corpus::Roce;
    use observer::sources::Consumer;
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut col = Collector::new(CollectorConfig::new(
        out.to_path_buf(),
        host,
        "replay",
        policy.clone(),
    ))
    .unwrap();
    col.quiet_stderr();
    let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
    for c in &LAT_CONNS {
        let mut psn = 100;
        for (iv, reqs) in c.intervals.iter().enumerate() {
            // 10 ms into the interval, one request every 6 ms: every answer inside it
            let mut t = LAT_T0 + iv as u64 * 1_000_000_000 + 10_000_000;
            for &(lat, n) in reqs.iter() {
                for _ in 0..n {
                    let (req, resp) = if c.read {
                        (
                            Roce::v4(c.src, c.dst, c.qp, psn).read(512),
                            Roce::v4(c.dst, c.src, c.qp + 0x100, psn).read_response(0x10, 512),
                        )
                    } else {
                        (
                            Roce::v4(c.src, c.dst, c.qp, psn),
                            Roce::v4(c.dst, c.src, c.qp + 0x100, psn).ack(0x1f),
                        )
                    };
                    frames.push((t, req.frame()));
                    frames.push((t + lat * mul, resp.frame()));
                    psn += 1;
                    t += 6_000_000;
                }
            }
            assert!(t < LAT_T0 + (iv as u64 + 1) * 1_000_000_000);
        }
    }
    frames.sort_by_key(|f| f.0);
    let mut dp = Datapath::new(policy.expected, 10_000)
        .with_latency(observer_common::latency::DEFAULT_TIMEOUT_NS);
    col.on_snapshot(&dp.snapshot("lat0", LAT_T0, None)).unwrap();
    let mut next = LAT_T0 + 1_000_000_000;
    let mut frames = frames.into_iter().peekable();
    while next <= LAT_T0 + 2_000_000_000 {
        while let Some((t, f)) = frames.next_if(|f| f.0 < next) {
            dp.process(&f, f.len() as u32, t, 0);
            col.on_events("lat0", &dp.take_events());
        }
        col.latency("lat0", &dp.take_latency()).unwrap();
        col.on_snapshot(&dp.snapshot("lat0", next, None)).unwrap();
        next += 1_000_000_000;
    }
    assert!(frames.next().is_none());
    col.finish().unwrap()
}
