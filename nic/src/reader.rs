//! The live [`NicReader`] (kernel interfaces of the current network namespace) and a scripted one
//! for tests.

use std::collections::VecDeque;
use std::path::PathBuf;

use contract::error::chain;

use super::config::{self, NicConfig};
use super::ethtool::{EthtoolReader, NameRefresh};
use super::netlink::NlSocket;
use super::rdma::{RdmaDevice, RdmaLink, RdmaNetlink, RdmaSysfs};
use super::{
    NicError, NicReader, NicSample, RdmaPort, Reading, SourceKind, SourceReport, SourceStatus,
    Unavailable, UnavailableReason, dcb,
};

/// What the live reader reads, and where the file trees are.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Root of `sys/class/...`, `sys/kernel/debug`, `sys/kernel/config` ("/" on a live host).
    pub root: PathBuf,
    pub name_refresh: NameRefresh,
    pub pause: bool,
    pub dcb: bool,
    pub rdma: bool,
    pub config: bool,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            root: PathBuf::from("/"),
            name_refresh: NameRefresh::Always,
            pause: true,
            dcb: true,
            rdma: true,
            config: true,
        }
    }
}

/// Reads one interface in the network namespace the process is in.
pub struct LiveNicReader {
    ifname: String,
    opts: LiveOptions,
    eth: EthtoolReader,
    rtnl: Option<NlSocket>,
    rdma_nl: Option<Reading<RdmaNetlink>>,
    sysfs: RdmaSysfs,
}

/// Records a source's outcome and returns the value when read.
fn record<T, E: std::error::Error>(
    sources: &mut Vec<SourceReport>,
    source: SourceKind,
    via: &str,
    r: Result<Reading<T>, E>,
) -> Option<T> {
    let (status, v) = match r {
        Ok(Reading::Read(v)) => (SourceStatus::Answered { via: via.into() }, Some(v)),
        Ok(Reading::Unavailable(u)) => {
            tracing::debug!(?source, reason = %u, "NIC source unavailable");
            (SourceStatus::Unavailable(u), None)
        }
        Err(e) => {
            let error = chain(&e);
            tracing::warn!(?source, %error, "NIC source failed");
            (SourceStatus::Failed { error }, None)
        }
    };
    sources.push(SourceReport { source, status });
    v
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

fn if_index(name: &str) -> Result<u32, NicError> {
    let c = std::ffi::CString::new(crate::ethtool::kernel_name(name)).map_err(|_| {
        NicError::InvalidInterface {
            name: name.into(),
            why: "contains NUL",
        }
    })?;
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(NicError::NoSuchInterface {
            name: name.into(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(i)
}

impl LiveNicReader {
    pub fn new(ifname: &str, opts: LiveOptions) -> Result<Self, NicError> {
        let eth = EthtoolReader::new(ifname, opts.name_refresh).map_err(|e| match e {
            super::ethtool::EthtoolError::InvalidName { name, why } => {
                NicError::InvalidInterface { name, why }
            }
            e => NicError::Ethtool(e),
        })?;
        let sysfs = RdmaSysfs::new(opts.root.clone());
        Ok(LiveNicReader {
            ifname: ifname.into(),
            opts,
            eth,
            rtnl: None,
            rdma_nl: None,
            sysfs,
        })
    }

    fn read_dcb(&mut self, s: &mut NicSample) {
        if self.rtnl.is_none() {
            match dcb::open() {
                Ok(sock) => self.rtnl = Some(sock),
                Err(e) => {
                    record::<(), _>(&mut s.sources, SourceKind::Dcb, "rtnetlink", Err(e));
                    return;
                }
            }
        }
        let Some(sock) = self.rtnl.as_mut() else {
            return;
        };
        let r = dcb::read(sock, &self.ifname);
        if let Ok(state) = &r {
            s.dcb = state.clone();
        }
        record(
            &mut s.sources,
            SourceKind::Dcb,
            "rtnetlink",
            r.map(|d| d.map(|_| ())),
        );
    }

    /// The RDMA port bound to the interface: netlink (robust for LAG / SF / rxe), else sysfs.
    fn find_rdma(
        &mut self,
        ifindex: u32,
    ) -> Result<Option<(RdmaDevice, RdmaLink, &'static str)>, NicError> {
        if self.rdma_nl.is_none() {
            self.rdma_nl = Some(RdmaNetlink::open()?);
        }
        if let Some(Reading::Read(nl)) = self.rdma_nl.as_mut() {
            let mut links = nl.links_for_netdev(ifindex, &self.ifname)?;
            if links.len() > 1 {
                tracing::info!(ifname = %self.ifname, n = links.len(), "several RDMA ports on one netdev; using the first");
            }
            return Ok(links.drain(..).next().map(|(d, l)| (d, l, "netlink")));
        }
        let found = self.sysfs.links_for_netdev(&self.ifname)?;
        Ok(found.into_iter().next().map(|(dev, port)| {
            let d = RdmaDevice {
                name: dev.clone(),
                ..Default::default()
            };
            (
                d,
                RdmaLink {
                    dev_name: dev,
                    port,
                    ..Default::default()
                },
                "sysfs",
            )
        }))
    }

    fn read_rdma(&mut self, ifindex: u32, s: &mut NicSample) {
        let found = match self.find_rdma(ifindex) {
            Ok(f) => f,
            Err(e) => {
                record::<(), _>(&mut s.sources, SourceKind::RdmaCounters, "netlink", Err(e));
                return;
            }
        };
        let Some((dev, link, via)) = found else {
            let detail = format!(
                "no RDMA device bound to {} (see: rdma link show)",
                self.ifname
            );
            // the RDMA-side settings are not "not read" but absent with the same reason
            let u = Unavailable::new(UnavailableReason::NoSuchDevice, detail);
            let cfg = &mut s.config;
            cfg.rdma_fw_version = Reading::Unavailable(u.clone());
            cfg.rdma_parent_driver = Reading::Unavailable(u.clone());
            cfg.default_roce_tos = Reading::Unavailable(u.clone());
            cfg.default_roce_mode = Reading::Unavailable(u.clone());
            cfg.gid_types = Reading::Unavailable(u.clone());
            let r: Result<Reading<()>, NicError> = Ok(Reading::Unavailable(u));
            record(
                &mut s.sources,
                SourceKind::RdmaCounters,
                via_of(&self.rdma_nl),
                r,
            );
            return;
        };
        let mut r = Ok(Reading::unavailable(
            UnavailableReason::NotSupported,
            "RDMA netlink unavailable",
        ));
        let mut used = via;
        if let Some(Reading::Read(nl)) = self.rdma_nl.as_mut() {
            r = nl.hw_counters(dev.index, link.port);
        }
        if matches!(r, Ok(Reading::Unavailable(_))) {
            used = "sysfs";
            r = self.sysfs.hw_counters(&link.dev_name, link.port);
        }
        let counters = record(&mut s.sources, SourceKind::RdmaCounters, used, r);
        s.rdma = counters.map(|counters| RdmaPort {
            dev: link.dev_name.clone(),
            port: link.port,
            counters,
            via: used.into(),
        });
        if let Some(fw) = dev.fw_version {
            s.config.rdma_fw_version = Reading::Read(fw);
        }
        if self.opts.config {
            self.read_rdma_config(&link, &mut s.config);
        }
    }

    fn read_rdma_config(&self, link: &RdmaLink, cfg: &mut NicConfig) {
        let (dev, port) = (link.dev_name.as_str(), link.port);
        let warn = |what: &str, e: &dyn std::error::Error| tracing::warn!(what, error = %chain(e), "RDMA configuration read failed");
        match self.sysfs.parent_driver(dev) {
            Ok(r) => cfg.rdma_parent_driver = r,
            Err(e) => warn("parent driver", &e),
        }
        match self.sysfs.gid_types(dev, port) {
            Ok(r) => cfg.gid_types = r,
            Err(e) => warn("gid types", &e),
        }
        match self.sysfs.default_roce_tos(dev, port) {
            Ok(r) => cfg.default_roce_tos = r,
            Err(e) => warn("default_roce_tos", &e),
        }
        match self.sysfs.default_roce_mode(dev, port) {
            Ok(r) => cfg.default_roce_mode = r,
            Err(e) => warn("default_roce_mode", &e),
        }
    }

    fn read_netdev_config(&self, s: &mut NicSample) {
        let root = &self.opts.root;
        let mlx5_bdf = s
            .drvinfo
            .as_ref()
            .filter(|d| d.driver == "mlx5_core" && !d.bus_info.is_empty())
            .map(|d| d.bus_info.clone());
        let cc = match mlx5_bdf {
            Some(bdf) => config::read_mlx5_cc(root, &bdf),
            None => Ok(Reading::unavailable(
                UnavailableReason::NotSupported,
                format!("{} is not an mlx5 PCI function", self.ifname),
            )),
        };
        let ecn = config::read_ofed_ecn(root, &self.ifname);
        match (cc, ecn) {
            (Ok(cc), Ok(ecn)) => {
                s.config.mlx5_cc = cc;
                s.config.ofed_ecn = ecn;
                record::<(), NicError>(
                    &mut s.sources,
                    SourceKind::Config,
                    "files",
                    Ok(Reading::Read(())),
                );
            }
            (Err(e), _) | (_, Err(e)) => {
                record::<(), _>(
                    &mut s.sources,
                    SourceKind::Config,
                    "files",
                    Err(NicError::Config(e)),
                );
            }
        }
    }
}

fn via_of(nl: &Option<Reading<RdmaNetlink>>) -> &'static str {
    match nl {
        Some(Reading::Read(_)) => "netlink",
        _ => "sysfs",
    }
}

impl NicReader for LiveNicReader {
    fn read(&mut self) -> Result<NicSample, NicError> {
        let ifindex = if_index(&self.ifname)?;
        let mut s = NicSample::empty(&self.ifname, now_ns());
        s.drvinfo = record(
            &mut s.sources,
            SourceKind::EthtoolDrvinfo,
            "ioctl",
            self.eth.drvinfo(),
        );
        s.ethtool = record(
            &mut s.sources,
            SourceKind::EthtoolStats,
            "ioctl",
            self.eth.stats(),
        );
        if self.opts.pause {
            s.pause = record(
                &mut s.sources,
                SourceKind::EthtoolPause,
                "genetlink",
                self.eth.pause(),
            );
        }
        if self.opts.rdma {
            self.read_rdma(ifindex, &mut s);
        }
        if self.opts.dcb {
            self.read_dcb(&mut s);
        }
        if self.opts.config {
            self.read_netdev_config(&mut s);
        }
        Ok(s)
    }
}

/// Returns prepared samples in order, then [`NicError::Exhausted`].
#[derive(Debug, Default)]
pub struct ScriptedReader {
    samples: VecDeque<NicSample>,
}

impl ScriptedReader {
    pub fn new(samples: impl IntoIterator<Item = NicSample>) -> Self {
        ScriptedReader {
            samples: samples.into_iter().collect(),
        }
    }
}

impl NicReader for ScriptedReader {
    fn read(&mut self) -> Result<NicSample, NicError> {
        self.samples.pop_front().ok_or(NicError::Exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::super::counters::diff_counters;
    use super::super::normalize::{Quantity, Src, normalize};
    use super::super::{Driver, Policy, run_checks};
    use super::*;

    #[test]
    fn live_read_on_loopback() {
        let mut r = LiveNicReader::new("lo", LiveOptions::default()).unwrap();
        let s = r.read().unwrap();
        assert_eq!(s.ifname, "lo");
        assert!(s.time_ns > 0);
        // every enabled source reported exactly once, none failed
        for k in [
            SourceKind::EthtoolDrvinfo,
            SourceKind::EthtoolStats,
            SourceKind::EthtoolPause,
            SourceKind::RdmaCounters,
            SourceKind::Dcb,
            SourceKind::Config,
        ] {
            let st = s.status(k).unwrap_or_else(|| panic!("{k:?} not reported"));
            assert!(!matches!(st, SourceStatus::Failed { .. }), "{k:?}: {st:?}");
        }
        match s.status(SourceKind::EthtoolStats).unwrap() {
            SourceStatus::Unavailable(u) => assert_eq!(u.reason, UnavailableReason::NotSupported),
            SourceStatus::Answered { .. } => assert!(s.ethtool.is_some()),
            other => panic!("{other:?}"),
        }
        assert!(s.dcb.reason().is_some(), "lo has no DCB");
        assert!(s.rdma.is_none());
        let gid = s
            .config
            .gid_types
            .reason()
            .expect("no RDMA device: no GIDs");
        assert_eq!(gid.reason, UnavailableReason::NoSuchDevice, "{gid}");
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"ifname\":\"lo\""));
        let checks = run_checks(&Policy::nvidia(), &s);
        assert_eq!(checks.len(), 10);
    }

    /// A veth pair (root only): statistics answered, DCB and pause unavailable, no RDMA device,
    /// and two reads give deltas.
    #[test]
    fn live_veth_two_samples_when_root() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: skipped");
            return;
        }
        let name = format!("nicr{}", std::process::id() % 100_000);
        let peer = format!("{name}p");
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        if !ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]) {
            eprintln!("cannot create a veth: skipped");
            return;
        }
        let res = std::panic::catch_unwind(|| {
            let mut r = LiveNicReader::new(&name, LiveOptions::default()).unwrap();
            let a = r.read().unwrap();
            let b = r.read().unwrap();
            assert!(matches!(
                a.status(SourceKind::EthtoolStats),
                Some(SourceStatus::Answered { .. })
            ));
            assert!(a.dcb.reason().is_some(), "veth has no DCB");
            assert!(a.rdma.is_none());
            let d = diff_counters(
                b.driver(),
                Src::Ethtool,
                a.ethtool.as_deref(),
                b.ethtool.as_deref(),
            );
            assert!(d.counters.iter().all(|c| c.delta.is_some()), "{d:?}");
            assert!(d.gauges.iter().any(|g| g.name == "peer_ifindex"));
            for c in &b.sources {
                assert!(!matches!(c.status, SourceStatus::Failed { .. }), "{c:?}");
            }
        });
        ip(&["link", "del", &name]);
        if let Err(p) = res {
            std::panic::resume_unwind(p);
        }
    }

    #[test]
    fn missing_interface_and_bad_names() {
        let mut r = LiveNicReader::new("nosuchif0", LiveOptions::default()).unwrap();
        assert!(matches!(r.read(), Err(NicError::NoSuchInterface { .. })));
        assert!(matches!(
            LiveNicReader::new("a/b", LiveOptions::default()),
            Err(NicError::InvalidInterface { .. })
        ));
    }

    #[test]
    fn scripted_reader_drives_the_pipeline() {
        let mut a = NicSample::empty("ens1f0np0", 1);
        a.drvinfo = Some(super::super::DrvInfo {
            driver: "mlx5_core".into(),
            ..Default::default()
        });
        a.ethtool = Some(vec![("rx_prio3_pause".into(), 10)]);
        a.rdma = Some(RdmaPort {
            dev: "mlx5_0".into(),
            port: 1,
            counters: vec![("np_cnp_sent".into(), 5)],
            via: "netlink".into(),
        });
        let mut b = a.clone();
        b.time_ns = 2;
        b.ethtool = Some(vec![("rx_prio3_pause".into(), 15)]);
        b.rdma.as_mut().unwrap().counters = vec![("np_cnp_sent".into(), 9)];
        let mut r = ScriptedReader::new([a, b]);
        let (s1, s2) = (r.read().unwrap(), r.read().unwrap());
        assert!(matches!(r.read(), Err(NicError::Exhausted)));
        let d = s2.driver();
        assert_eq!(d, Driver::Mlx5);
        let e = diff_counters(
            d,
            Src::Ethtool,
            s1.ethtool.as_deref(),
            s2.ethtool.as_deref(),
        );
        let rd = diff_counters(
            d,
            Src::Rdma,
            s1.rdma.as_ref().map(|x| x.counters.as_slice()),
            s2.rdma.as_ref().map(|x| x.counters.as_slice()),
        );
        let n = normalize(d, &e, d, &rd);
        assert_eq!(n.get(Quantity::PfcRxFrames(3)).unwrap().delta, Some(5));
        assert_eq!(n.get(Quantity::CnpSent).unwrap().delta, Some(4));
    }
}
