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
