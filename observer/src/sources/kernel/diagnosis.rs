//! Start-up diagnosis: privileges, BTF, the interface (speed, driver) and whether an RDMA device
//! with RoCE is bound to it, and what the observer can and cannot see there
//! (roce-domain.md "Where RoCE packets are visible"). Reads sysfs under a root given by the
//! caller (`/` live, a fake tree in tests).

use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiagError {
    #[error(
        "not permitted: loading XDP/tc programs needs root, or CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON (missing: {missing}; run with sudo, or `setcap cap_bpf,cap_net_admin,cap_perfmon+ep roce-observe`)"
    )]
    NotPermitted { missing: String },
    #[error("no such interface: {iface} (interfaces here: {known})")]
    NoSuchInterface { iface: String, known: String },
    #[error(
        "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): use a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distribution kernel since 2021 is)"
    )]
    NoBtf,
}

/// An RDMA device port bound to the interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaPort {
    pub dev: String,
    pub port: String,
    /// link_layer "Ethernet" (RoCE).
    pub roce: bool,
    /// Soft-RoCE (rdma_rxe) or siw: RDMA over the kernel stack, visible to XDP/tc.
    pub software: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    pub iface: String,
    /// Link speed in bit/s, when the driver reports one.
    pub speed_bps: Option<u64>,
    pub driver: Option<String>,
    pub rdma: Vec<RdmaPort>,
}

fn read(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// Effective capabilities of this process (from /proc/self/status).
fn cap_eff() -> u64 {
    read(Path::new("/proc/self/status"))
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|h| u64::from_str_radix(&h, 16).ok())
        .unwrap_or(0)
}

/// Capability numbers (linux/capability.h).
pub mod cap {
    pub const NET_ADMIN: u32 = 12;
    pub const SYS_ADMIN: u32 = 21;
    pub const PERFMON: u32 = 38;
    pub const BPF: u32 = 39;
}

/// The capabilities of effective set `caps` that loading and attaching the programs still
/// needs (empty: none). Attaching XDP and tc takes CAP_NET_ADMIN; loading takes CAP_BPF with
/// CAP_PERFMON, or CAP_SYS_ADMIN, which stands for both. Without CAP_PERFMON (CAP_BPF alone)
/// the verifier refuses the programs' pointer arithmetic, and the packet clock's perf event
/// cannot be opened: measured, the load then fails with the verifier's EACCES.
pub fn missing_capabilities(caps: u64) -> Vec<&'static str> {
    let has = |b: u32| caps & (1u64 << b) != 0;
    let mut m = Vec::new();
    if !has(cap::NET_ADMIN) {
        m.push("CAP_NET_ADMIN");
    }
    if !has(cap::SYS_ADMIN) {
        if !has(cap::BPF) {
            m.push("CAP_BPF");
        }
        if !has(cap::PERFMON) {
            m.push("CAP_PERFMON");
        }
    }
    m
}

/// Root, or the capabilities [`missing_capabilities`] asks for.
pub fn check_privileges() -> Result<(), DiagError> {
    let missing = missing_capabilities(cap_eff());
    if missing.is_empty() {
        Ok(())
    } else {
        Err(DiagError::NotPermitted {
            missing: missing.join(", "),
        })
    }
}

pub fn check_btf(sys: &Path) -> Result<(), DiagError> {
    if sys.join("sys/kernel/btf/vmlinux").exists() {
        Ok(())
    } else {
        Err(DiagError::NoBtf)
    }
}

/// Interface facts; `NoSuchInterface` when `sys/class/net/<iface>` does not exist.
pub fn diagnose(sys: &Path, iface: &str) -> Result<Diagnosis, DiagError> {
    let net = sys.join("sys/class/net");
    let dev = net.join(contract::cli::iface_os(iface));
    if iface.is_empty() || iface.contains('/') || !dev.exists() {
        let mut known: Vec<String> = fs::read_dir(&net)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| contract::cli::iface_name(&e.file_name()))
            .collect();
        known.sort();
        return Err(DiagError::NoSuchInterface {
            iface: iface.into(),
            known: known.join(", "),
        });
    }
    // speed is in Mb/s; -1 or an error when unknown
    let speed_bps = read(&dev.join("speed"))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&m| m > 0)
        .map(|m| m as u64 * 1_000_000);
    let driver = fs::read_link(dev.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let canon_dev: Option<PathBuf> = fs::canonicalize(dev.join("device")).ok();
    let mut rdma = Vec::new();
    let ib = sys.join("sys/class/infiniband");
    let mut devs: Vec<_> = fs::read_dir(&ib).into_iter().flatten().flatten().collect();
    devs.sort_by_key(|e| e.file_name());
    for d in devs {
        let name = d.file_name().to_string_lossy().into_owned();
        let dpath = ib.join(&name);
        let same_pci = match (&canon_dev, fs::canonicalize(dpath.join("device")).ok()) {
            (Some(a), Some(b)) => *a == b,
            _ => false,
        };
        let parent_is = read(&dpath.join("parent"))
            .map(|p| p == iface)
            .unwrap_or(false);
        let mut ports: Vec<_> = fs::read_dir(dpath.join("ports"))
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        ports.sort_by_key(|e| e.file_name());
        for p in ports {
            let port = p.file_name().to_string_lossy().into_owned();
            let pp = dpath.join("ports").join(&port);
            let bound_by_gid = fs::read_dir(pp.join("gid_attrs/ndevs"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|g| read(&g.path()).map(|n| n == iface).unwrap_or(false));
            if bound_by_gid || same_pci || parent_is {
                let roce = read(&pp.join("link_layer"))
                    .map(|l| l.eq_ignore_ascii_case("ethernet"))
                    .unwrap_or(bound_by_gid);
                let software = name.starts_with("rxe") || name.starts_with("siw") || parent_is;
                rdma.push(RdmaPort {
                    dev: name.clone(),
                    port,
                    roce,
                    software,
                });
            }
        }
    }
    Ok(Diagnosis {
        iface: iface.into(),
        speed_bps,
        driver,
        rdma,
    })
}

impl Diagnosis {
    /// Plain-language lines: what the tool sees on this interface, and what to do otherwise.
    /// What the terminal view must say from the start (the full report goes to the log, which
    /// the view holds until it closes): a hardware-RoCE device bound to the interface, whose
    /// RDMA traffic XDP never sees. `None` when nothing limits what is observed.
    pub fn view_note(&self) -> Option<String> {
        let hw: Vec<String> = self
            .rdma
            .iter()
            .filter(|r| r.roce && !r.software)
            .map(|r| format!("{} port {}", r.dev, r.port))
            .collect();
        (!hw.is_empty()).then(|| {
            format!(
                "{}: hardware RoCE ({}): its RDMA traffic never reaches XDP, so no QP packets show here; see the host's QPs and NIC alerts, mirror the port to a capture NIC, or replay the verbs sniffer (docs/live.md)",
                self.iface,
                hw.join(", ")
            )
        })
    }

    pub fn report(&self) -> Vec<String> {
        let mut l = Vec::new();
        let speed = self
            .speed_bps
            .map(|b| format!("{} Gb/s", b as f64 / 1e9))
            .unwrap_or_else(|| "speed unknown (PFC pause seconds need --link-speed)".into());
        let driver = self
            .driver
            .clone()
            .unwrap_or_else(|| "no device driver (virtual interface)".into());
        l.push(format!("{}: link {speed}, driver {driver}", self.iface));
        let hw: Vec<&RdmaPort> = self.rdma.iter().filter(|r| r.roce && !r.software).collect();
        let sw: Vec<&RdmaPort> = self.rdma.iter().filter(|r| r.software).collect();
        for r in &sw {
            l.push(format!(
                "{}: soft-RoCE device {} port {} runs RoCE over the kernel UDP stack: its data, ACKs and CNPs pass XDP/tc here and are observed",
                self.iface, r.dev, r.port
            ));
        }
        for r in &hw {
            l.push(format!(
                "{}: hardware RoCE device {} port {} is bound to this interface. The NIC processes RDMA data, ACKs and CNPs itself: they never reach the netdev, so XDP/tc here see NONE of that traffic (and the MAC usually consumes PFC frames).",
                self.iface, r.dev, r.port
            ));
            l.push(format!(
                "  to observe it: (1) mirror the switch port (SPAN, or ERSPAN to this host) to a capture NIC and run `roce-observe --iface <capture-nic> --capture-port`; (2) copy it with the verbs sniffer and replay the stream: `tcpdump -i {} -w - | roce-observe replay -`; (3) read the NIC's counters: `ethtool -S {} | grep -E 'prio|pause'`, `rdma statistic show`, /sys/class/infiniband/{}/ports/{}/hw_counters/",
                r.dev, self.iface, r.dev, r.port
            ));
        }
        if self.rdma.is_empty() {
            l.push(format!(
                "{}: no RDMA device is bound to this interface: RoCE seen here is what arrives on the netdev (a mirror/ERSPAN capture port, soft-RoCE peers, replayed traffic)",
                self.iface
            ));
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn fake(name: &str) -> PathBuf {
        let r = std::env::temp_dir().join(format!("ro-diag-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&r);
        r
    }

    fn w(p: PathBuf, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    /// CAP_BPF + CAP_NET_ADMIN without CAP_PERFMON was let through, and the load then failed
    /// with the verifier's "Permission denied"; now CAP_PERFMON is asked for by name.
    #[test]
    fn the_capabilities_are_named_exactly() {
        let set = |caps: &[u32]| caps.iter().fold(0u64, |a, c| a | (1 << c));
        assert!(missing_capabilities(set(&[cap::BPF, cap::NET_ADMIN, cap::PERFMON])).is_empty());
        assert!(missing_capabilities(set(&[cap::SYS_ADMIN, cap::NET_ADMIN])).is_empty());
        assert_eq!(
            missing_capabilities(set(&[cap::BPF, cap::NET_ADMIN])),
            ["CAP_PERFMON"]
        );
        assert_eq!(
            missing_capabilities(set(&[cap::SYS_ADMIN])),
            ["CAP_NET_ADMIN"]
        );
        assert_eq!(
            missing_capabilities(0),
            ["CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON"]
        );
        assert!(missing_capabilities(u64::MAX).is_empty());
    }

    #[test]
    fn hardware_roce_is_reported_with_what_to_do() {
        let r = fake("hw");
        let pci = r.join("sys/devices/pci0000:00/0000:3b:00.0");
        fs::create_dir_all(pci.join("drvlink")).unwrap();
        fs::create_dir_all(r.join("sys/bus/pci/drivers/mlx5_core")).unwrap();
        symlink(r.join("sys/bus/pci/drivers/mlx5_core"), pci.join("driver")).unwrap();
        w(r.join("sys/class/net/ens1f0/speed"), "100000\n");
        symlink(&pci, r.join("sys/class/net/ens1f0/device")).unwrap();
        w(
            r.join("sys/class/infiniband/mlx5_0/ports/1/link_layer"),
            "Ethernet\n",
        );
        w(
            r.join("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"),
            "ens1f0\n",
        );
        symlink(&pci, r.join("sys/class/infiniband/mlx5_0/device")).unwrap();
        let d = diagnose(&r, "ens1f0").unwrap();
        assert_eq!(d.speed_bps, Some(100_000_000_000));
        assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(
            d.rdma,
            vec![RdmaPort {
                dev: "mlx5_0".into(),
                port: "1".into(),
                roce: true,
                software: false
            }]
        );
        let rep = d.report().join("\n");
        assert!(rep.contains("see NONE"), "{rep}");
        assert!(
            rep.contains("tcpdump -i mlx5_0 -w - | roce-observe replay -"),
            "{rep}"
        );
        assert!(rep.contains("ethtool -S ens1f0"), "{rep}");
        // what the terminal view shows from the start
        let note = d.view_note().unwrap();
        assert!(
            note.starts_with(
                "ens1f0: hardware RoCE (mlx5_0 port 1): its RDMA traffic never reaches XDP"
            ),
            "{note}"
        );
        let _ = fs::remove_dir_all(&r);
    }

    #[test]
    fn missing_interface_and_plain_veth() {
        let r = fake("veth");
        w(r.join("sys/class/net/veth0/speed"), "10000\n");
        w(r.join("sys/class/net/lo/speed"), "-1\n");
        let e = diagnose(&r, "ens9").unwrap_err();
        assert_eq!(
            e,
            DiagError::NoSuchInterface {
                iface: "ens9".into(),
                known: "lo, veth0".into()
            }
        );
        assert!(e.to_string().contains("no such interface: ens9"));
        let d = diagnose(&r, "veth0").unwrap();
        assert_eq!(d.driver, None);
        assert!(d.rdma.is_empty());
        assert!(d.report()[1].contains("no RDMA device"));
        assert_eq!(d.view_note(), None);
        assert_eq!(diagnose(&r, "lo").unwrap().speed_bps, None);
        assert_eq!(check_btf(&r), Err(DiagError::NoBtf));
        let _ = fs::remove_dir_all(&r);
    }
}
