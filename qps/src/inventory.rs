//! Every QP of the host, read from the RDMA subsystem: one `RES_QP_GET` and one
//! `RES_CM_ID_GET` dump per device, joined with the creating process's command and cgroup.
//!
//! Bounded: at most `max_qps` QPs are kept per read (the rest are counted in
//! [`Excluded::over_limit`], never silently dropped); the netlink reply itself is capped by the
//! `nic` crate's limits. A dump is not atomic (the kernel resumes it by position), so a QP seen
//! twice is counted in [`Excluded::duplicates`] and kept once. A device whose dump fails is
//! reported with its error and the others are still read.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use nic::rdma::qp_counters::{CounterMode, QpCounter};
use nic::rdma::resources::{cm_state_name, qp_state_name, qp_type_name};
use nic::rdma::{RdmaCmId, RdmaDevice, RdmaError, RdmaNetlink, RdmaQp};
use nic::{Reading, sysfs};
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Workload};

/// The QP key of a host: device index and local QP number.
pub type QpKey = (u32, u32);

/// Where the RDMA resources come from: the kernel ([`RdmaNetlink`]) or a script in tests.
pub trait QpSource {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError>;
    fn qps(&mut self, dev_index: u32) -> Result<Vec<RdmaQp>, RdmaError>;
    fn cm_ids(&mut self, dev_index: u32) -> Result<Vec<RdmaCmId>, RdmaError>;
    /// The kernel driver of an RDMA device's parent (`mlx5_core`, `bnxt_en`, `rdma_rxe`, ...),
    /// when known: whose raw QP context layout applies.
    fn driver(&mut self, _dev: &str) -> Option<String> {
        None
    }
    /// A port's device traffic-class override (mlx5), when one is set.
    fn tc_override(&mut self, _dev: &str, _port: u32) -> Option<u8> {
        None
    }
    /// The driver's raw context of one QP (mlx5); unavailable by default.
    fn qp_raw(&mut self, _dev: u32, _lqpn: u32) -> Result<Reading<Vec<u8>>, RdmaError> {
        Ok(Reading::Unavailable(crate::counters::not_supported(
            "this source has no raw QP context",
        )))
    }
    /// A port's counter-binding mode (`--qp-counters`); unavailable by default.
    fn counter_mode(&mut self, _dev: u32, _port: u32) -> Result<Reading<CounterMode>, RdmaError> {
        Ok(Reading::Unavailable(crate::counters::not_supported(
            "this source has no counter binding",
        )))
    }
    /// Turns a port's counter auto mode on with `mask`, off with 0.
    fn set_counter_auto(
        &mut self,
        _dev: u32,
        _port: u32,
        _mask: u32,
    ) -> Result<Reading<()>, RdmaError> {
        Ok(Reading::Unavailable(crate::counters::not_supported(
            "this source has no counter binding",
        )))
    }
    /// A port's bound counters.
    fn counters(&mut self, _dev: u32, _port: u32) -> Result<Reading<Vec<QpCounter>>, RdmaError> {
        Ok(Reading::Unavailable(crate::counters::not_supported(
            "this source has no counter binding",
        )))
    }
}

impl QpSource for RdmaNetlink {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        RdmaNetlink::devices(self)
    }
    fn qps(&mut self, dev_index: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        RdmaNetlink::qps(self, dev_index)
    }
    fn cm_ids(&mut self, dev_index: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        RdmaNetlink::cm_ids(self, dev_index)
    }
    fn driver(&mut self, dev: &str) -> Option<String> {
        match nic::rdma::RdmaSysfs::new("/").parent_driver(dev) {
            Ok(Reading::Read(d)) => Some(d),
            _ => None,
        }
    }
    fn qp_raw(&mut self, dev: u32, lqpn: u32) -> Result<Reading<Vec<u8>>, RdmaError> {
        RdmaNetlink::qp_raw(self, dev, lqpn)
    }
    fn tc_override(&mut self, dev: &str, port: u32) -> Option<u8> {
        match nic::rdma::RdmaSysfs::new("/").traffic_class_override(dev, port) {
            Ok(Reading::Read(t)) => t,
            Ok(Reading::Unavailable(u)) => {
                tracing::trace!(device = dev, port, reason = %u, "no traffic-class override file");
                None
            }
            Err(e) => {
                tracing::debug!(device = dev, port, error = %contract::error::chain(&e), "traffic-class override unreadable");
                None
            }
        }
    }
    fn counter_mode(&mut self, dev: u32, port: u32) -> Result<Reading<CounterMode>, RdmaError> {
        self.qp_counter_mode(dev, port)
    }
    fn set_counter_auto(
        &mut self,
        dev: u32,
        port: u32,
        mask: u32,
    ) -> Result<Reading<()>, RdmaError> {
        self.set_qp_counter_auto(dev, port, mask)
    }
    fn counters(&mut self, dev: u32, port: u32) -> Result<Reading<Vec<QpCounter>>, RdmaError> {
        self.qp_counters(dev, port)
    }
}

/// `/proc` (under a root, for tests): a process's command and cgroup.
#[derive(Clone, Debug)]
pub struct Procfs {
    pub root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Procfs { root: "/".into() }
    }
}

/// What `/proc/PID` says of a QP's creator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub comm: Option<String>,
    /// Shared by every QP of the process (one allocation per process and read).
    pub workload: Option<std::sync::Arc<Workload>>,
}

impl Procfs {
    /// The command and workload of `pid`; empty when the process is gone or unreadable
    /// (`hidepid`), which is logged at debug level only: a QP outlives its creator routinely.
    pub fn process(&self, pid: u32) -> Process {
        let dir = sysfs::under(&self.root, "proc").join(pid.to_string());
        let comm = match sysfs::read_small(&dir.join("comm")) {
            Ok(t) => Some(t.trim_end_matches('\n').to_string()),
            Err(e) => {
                tracing::debug!(pid, error = %e, "process command unreadable");
                None
            }
        };
        let workload = sysfs::read_small(&dir.join("cgroup"))
            .ok()
            .and_then(|t| cgroup::parse(&t))
            .map(std::sync::Arc::new);
        Process { comm, workload }
    }
}

/// One QP of the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpRow {
    pub dev: String,
    pub dev_index: u32,
    pub port: Option<u32>,
    pub lqpn: u32,
    pub rqpn: Option<u32>,
    /// `RC`, `UD`, `GSI`, ... (`enum ib_qp_type` names).
    pub qp_type: String,
    /// `RTS`, `ERR`, ... (`enum ib_qp_state` names).
    pub state: String,
    #[serde(skip)]
    pub state_code: Option<u8>,
    pub sq_psn: Option<u32>,
    pub rq_psn: Option<u32>,
    pub pid: Option<u32>,
    /// The creator's command (`/proc/PID/comm`), or the kernel user of a kernel QP.
    pub comm: Option<String>,
    /// True for QPs of the kernel (ULPs, the GSI QP).
    pub kernel: bool,
    pub workload: Option<std::sync::Arc<Workload>>,
    /// rdma_cm endpoints, when the QP was created through rdma_cm.
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub cm_state: Option<String>,
    /// What the QP asked for at set-up (its address vector), where an observer's modify-QP
    /// probe saw it: `None` for QPs set up before it started, or without one.
    pub setup: Option<SetUp>,
}

/// A QP's address vector and transport settings at set-up (`ib_qp_attr` of its modify to RTR).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetUp {
    /// GRH traffic class: DSCP << 2 | ECN.
    pub traffic_class: u8,
    /// Service level (the Ethernet priority with PCP trust).
    pub sl: u8,
    /// Destination GID (for RoCE v2, the peer's IPv6 or IPv4-mapped address).
    pub dgid: [u8; 16],
    /// `enum ib_mtu` (1 = 256 ... 5 = 4096); 0 unknown.
    pub path_mtu: u8,
    /// Local ACK timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// Where it was seen.
    pub source: SetUpSource,
}

/// A port's device traffic-class override: the driver sends this traffic class for every QP
/// set up through the kernel's modify-QP, whatever the QP asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcOverride {
    pub dev: String,
    pub port: u32,
    pub traffic_class: u8,
}

impl Inventory {
    /// The override of a device's port, if set.
    pub fn tc_override_of(&self, dev: &str, port: Option<u32>) -> Option<u8> {
        let port = port?;
        self.tc_override
            .iter()
            .find(|o| o.dev == dev && o.port == port)
            .map(|o| o.traffic_class)
    }

    /// Reads the traffic-class override of every (device, port) its QPs are on.
    pub fn read_tc_overrides(&mut self, src: &mut dyn QpSource) {
        let mut ports: Vec<(&str, u32)> = self
            .qps
            .iter()
            .filter_map(|r| Some((r.dev.as_str(), r.port?)))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        let found: Vec<TcOverride> = ports
            .into_iter()
            .filter_map(|(dev, port)| {
                src.tc_override(dev, port).map(|t| TcOverride {
                    dev: dev.to_string(),
                    port,
                    traffic_class: t,
                })
            })
            .collect();
        self.tc_override = found;
    }
}

/// Where a QP's set-up was seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetUpSource {
    /// The modify-QP probe, at the QP's modify to RTR.
    #[default]
    Probe,
    /// mlx5's raw QP context (its primary address path), for a QP the probe did not see.
    Mlx5Qpc,
}

impl SetUpSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SetUpSource::Probe => "probe",
            SetUpSource::Mlx5Qpc => "mlx5_qpc",
        }
    }
}

impl SetUp {
    pub fn marking(&self) -> crate::verdict::QpMarking {
        crate::verdict::QpMarking {
            traffic_class: self.traffic_class,
            sl: self.sl,
        }
    }
    /// The destination GID as an address: IPv4 when v4-mapped.
    pub fn dgid_ip(&self) -> std::net::IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.dgid);
        match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        }
    }
}

impl QpRow {
    pub fn key(&self) -> QpKey {
        (self.dev_index, self.lqpn)
    }
}

/// A device and how its read went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRead {
    pub name: String,
    pub index: u32,
    pub qps: u64,
    /// The error of its dumps, when they failed (the other devices are still read).
    pub error: Option<String>,
}

/// What one read left out, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excluded {
    /// A QP reported twice by one dump (the dump is not atomic): kept once.
    pub duplicates: u64,
    /// QPs beyond the bound of one read.
    pub over_limit: u64,
    /// cm ids whose QP was not in the QP dump (created or destroyed between the two dumps).
    pub cm_ids_unmatched: u64,
}

/// Every QP of the host at one time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// `CLOCK_REALTIME` nanoseconds at the start of the read.
    pub time_ns: u64,
    pub devices: Vec<DeviceRead>,
    /// Sorted by device index and QP number.
    pub qps: Vec<QpRow>,
    pub excluded: Excluded,
    /// Per-QP-group counters of the interval, when counter binding is on (`--qp-counters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::counters::CounterRead>,
    /// The ports' device traffic-class overrides (mlx5 `tc/PORT/traffic_class`), where set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tc_override: Vec<TcOverride>,
    /// Raw QP contexts read this interval (set-ups, acknowledgement waits), when tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<crate::raw::RawRead>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The default bound on QPs kept per read.
pub const DEFAULT_MAX_QPS: usize = 262_144;

/// Reads every QP of every device of `src`.
pub fn read(
    src: &mut (impl QpSource + ?Sized),
    proc: &Procfs,
    max_qps: usize,
) -> Result<Inventory, RdmaError> {
    let mut inv = Inventory {
        time_ns: now_ns(),
        ..Inventory::default()
    };
    let mut seen: HashMap<QpKey, usize, foldhash::fast::RandomState> = HashMap::default();
    let mut procs: HashMap<u32, Process> = HashMap::new();
    for d in src.devices()? {
        let mut dr = DeviceRead {
            name: d.name.clone(),
            index: d.index,
            ..DeviceRead::default()
        };
        let (qps, cms) = match src.qps(d.index).and_then(|q| Ok((q, src.cm_ids(d.index)?))) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(device = %d.name, error = %contract::error::chain(&e), "RDMA resource dump failed");
                dr.error = Some(contract::error::chain(&e));
                inv.devices.push(dr);
                continue;
            }
        };
        let first = inv.qps.len();
        for q in qps {
            let key = (d.index, q.lqpn);
            if seen.contains_key(&key) {
                inv.excluded.duplicates += 1;
                continue;
            }
            if inv.qps.len() >= max_qps {
                inv.excluded.over_limit += 1;
                continue;
            }
            seen.insert(key, inv.qps.len());
            dr.qps += 1;
            let (comm, workload) = match q.pid {
                Some(pid) => {
                    let p = procs.entry(pid).or_insert_with(|| proc.process(pid));
                    (p.comm.clone(), p.workload.clone())
                }
                None => (q.kern_name.clone(), None),
            };
            inv.qps.push(QpRow {
                dev: d.name.clone(),
                dev_index: d.index,
                port: q.port,
                lqpn: q.lqpn,
                rqpn: q.rqpn,
                qp_type: q.qp_type.map(qp_type_name).unwrap_or("UNKNOWN").into(),
                state: q.state.map(qp_state_name).unwrap_or("UNKNOWN").into(),
                state_code: q.state,
                sq_psn: q.sq_psn,
                rq_psn: q.rq_psn,
                pid: q.pid,
                kernel: q.pid.is_none() && q.kern_name.is_some(),
                comm,
                workload,
                ..QpRow::default()
            });
        }
        for c in cms {
            let Some(lqpn) = c.lqpn else { continue };
            match seen.get(&(d.index, lqpn)) {
                Some(&i) if i >= first => {
                    let r = &mut inv.qps[i];
                    r.src = c.src;
                    r.dst = c.dst;
                    r.cm_state = c.state.map(|s| cm_state_name(s).to_string());
                }
                _ => inv.excluded.cm_ids_unmatched += 1,
            }
        }
        inv.devices.push(dr);
    }
    inv.qps.sort_by_key(QpRow::key);
    Ok(inv)
}

/// Opens RDMA netlink and reads the inventory; unavailable when the kernel has no RDMA
/// subsystem loaded.
pub fn read_host(proc: &Procfs, max_qps: usize) -> Result<Reading<Inventory>, RdmaError> {
    match RdmaNetlink::open()? {
        Reading::Read(mut nl) => Ok(Reading::Read(read(&mut nl, proc, max_qps)?)),
        Reading::Unavailable(u) => Ok(Reading::Unavailable(u)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nic::rdma::resources::qp_state;

    /// A scripted RDMA subsystem.
    #[derive(Default)]
    pub struct Script {
        pub devices: Vec<RdmaDevice>,
        pub qps: HashMap<u32, Vec<RdmaQp>>,
        pub cm: HashMap<u32, Vec<RdmaCmId>>,
        pub fail: Option<u32>,
        /// Counter binding: each port's mode (absent: unavailable), the mode changes asked
        /// for, each port's counters, a port whose counter read fails.
        pub modes: HashMap<(u32, u32), CounterMode>,
        pub set_calls: Vec<(u32, u32, u32)>,
        pub counters: HashMap<(u32, u32), Vec<QpCounter>>,
        pub counter_fail: Option<(u32, u32)>,
        /// Raw QP contexts by (device, QP); a device without any has none. The calls made.
        pub raw: HashMap<(u32, u32), Vec<u8>>,
        pub raw_calls: Vec<(u32, u32)>,
        /// Device name -> driver (absent: not known).
        pub drivers: HashMap<String, String>,
    }

    impl QpSource for Script {
        fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
            Ok(self.devices.clone())
        }
        fn qps(&mut self, d: u32) -> Result<Vec<RdmaQp>, RdmaError> {
            if self.fail == Some(d) {
                return Err(RdmaError::BadName(format!("scripted failure of {d}")));
            }
            Ok(self.qps.get(&d).cloned().unwrap_or_default())
        }
        fn cm_ids(&mut self, d: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
            Ok(self.cm.get(&d).cloned().unwrap_or_default())
        }
        fn driver(&mut self, dev: &str) -> Option<String> {
            self.drivers.get(dev).cloned()
        }
        fn qp_raw(&mut self, d: u32, q: u32) -> Result<Reading<Vec<u8>>, RdmaError> {
            self.raw_calls.push((d, q));
            if !self.raw.keys().any(|k| k.0 == d) {
                return Ok(Reading::Unavailable(crate::counters::not_supported(
                    "scripted: no raw QP context",
                )));
            }
            Ok(match self.raw.get(&(d, q)) {
                Some(r) => Reading::Read(r.clone()),
                None => Reading::Unavailable(nic::Unavailable::new(
                    nic::UnavailableReason::Absent,
                    "scripted: QP gone".to_string(),
                )),
            })
        }
        fn counter_mode(&mut self, d: u32, p: u32) -> Result<Reading<CounterMode>, RdmaError> {
            Ok(match self.modes.get(&(d, p)) {
                Some(m) => Reading::Read(*m),
                None => Reading::Unavailable(crate::counters::not_supported(
                    "scripted: no counter binding",
                )),
            })
        }
        fn set_counter_auto(&mut self, d: u32, p: u32, m: u32) -> Result<Reading<()>, RdmaError> {
            self.set_calls.push((d, p, m));
            Ok(Reading::Read(()))
        }
        fn counters(&mut self, d: u32, p: u32) -> Result<Reading<Vec<QpCounter>>, RdmaError> {
            if self.counter_fail == Some((d, p)) {
                return Err(RdmaError::BadName("scripted counter failure".into()));
            }
            Ok(Reading::Read(
                self.counters.get(&(d, p)).cloned().unwrap_or_default(),
            ))
        }
    }

    pub fn qp(dev: u32, lqpn: u32, pid: Option<u32>, sq: u32, rq: u32, state: u8) -> RdmaQp {
        RdmaQp {
            dev_index: dev,
            dev_name: format!("rxe{dev}"),
            port: Some(1),
            lqpn,
            rqpn: Some(lqpn + 1),
            qp_type: Some(2),
            state: Some(state),
            sq_psn: Some(sq),
            rq_psn: Some(rq),
            pid,
            ..RdmaQp::default()
        }
    }

    pub fn dev(index: u32) -> RdmaDevice {
        RdmaDevice {
            index,
            name: format!("rxe{index}"),
            ..RdmaDevice::default()
        }
    }

    #[test]
    fn joins_process_cgroup_and_rdma_cm_and_counts_what_it_leaves_out() {
        let root = test_support::TempDir::new("qps-proc");
        let p = root.path().join("proc/4242");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("comm"), "ib_write_bw\n").unwrap();
        std::fs::write(
            p.join("cgroup"),
            format!("0::/system.slice/docker-{}.scope\n", "ab".repeat(32)),
        )
        .unwrap();
        let mut s = Script {
            devices: vec![dev(1), dev(2), dev(3)],
            fail: Some(3),
            ..Script::default()
        };
        let mut gsi = qp(1, 1, None, 0, 0, qp_state::RTS);
        gsi.kern_name = Some("ib_core".into());
        gsi.qp_type = Some(1);
        s.qps.insert(
            1,
            vec![
                qp(1, 17, Some(4242), 5, 6, qp_state::RTS),
                gsi,
                // seen twice by a dump that resumed after a removal
                qp(1, 17, Some(4242), 5, 6, qp_state::RTS),
                qp(1, 18, Some(9999), 0, 0, qp_state::ERR),
            ],
        );
        s.qps
            .insert(2, vec![qp(2, 17, Some(4242), 1, 1, qp_state::INIT)]);
        s.cm.insert(
            1,
            vec![
                RdmaCmId {
                    dev_index: 1,
                    lqpn: Some(17),
                    src: Some("10.0.0.1:1".parse().unwrap()),
                    dst: Some("10.0.0.2:18515".parse().unwrap()),
                    state: Some(5),
                    ..RdmaCmId::default()
                },
                RdmaCmId {
                    dev_index: 1,
                    lqpn: Some(99),
                    ..RdmaCmId::default()
                },
                // a listener has no QP and is no exclusion
                RdmaCmId::default(),
            ],
        );
        let proc = Procfs {
            root: root.path().into(),
        };
        let inv = read(&mut s, &proc, 3).unwrap();
        let keys: Vec<QpKey> = inv.qps.iter().map(QpRow::key).collect();
        assert_eq!(keys, vec![(1, 1), (1, 17), (1, 18)]);
        assert_eq!(
            inv.excluded,
            Excluded {
                duplicates: 1,
                over_limit: 1,
                cm_ids_unmatched: 1
            }
        );
        let q = &inv.qps[1];
        assert_eq!(q.comm.as_deref(), Some("ib_write_bw"));
        assert_eq!(
            q.workload.as_ref().unwrap().runtime.as_deref(),
            Some("docker")
        );
        assert_eq!(q.dst, Some("10.0.0.2:18515".parse().unwrap()));
        assert_eq!(q.cm_state.as_deref(), Some("CONNECT"));
        assert_eq!((q.qp_type.as_str(), q.state.as_str()), ("RC", "RTS"));
        assert!(inv.qps[0].kernel);
        assert_eq!(inv.qps[0].comm.as_deref(), Some("ib_core"));
        // the creator is gone: no command, no error
        assert_eq!(inv.qps[2].comm, None);
        assert_eq!(
            inv.devices[2]
                .error
                .as_deref()
                .map(|e| e.contains("scripted failure of 3")),
            Some(true)
        );
        assert_eq!(inv.devices[1].qps, 0, "over the bound: counted, not kept");
    }
}
