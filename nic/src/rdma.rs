//! RDMA devices and port hardware counters: RDMA netlink first, sysfs as fallback.
//!
//! Netlink (`include/uapi/rdma/rdma_netlink.h`, `drivers/infiniband/core/nldev.c`):
//! socket `NETLINK_RDMA` (20), message type `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV = 5, op)` =
//! `(5 << 10) + op`, no family header. `RDMA_NLDEV_CMD_GET` (1, dump) lists devices
//! (`DEV_INDEX` 1 u32, `DEV_NAME` 2, `FW_VERSION` 5, `PORT_INDEX` 3 = number of ports);
//! `RDMA_NLDEV_CMD_PORT_GET` (5, dump; `nldev_port_get_dumpit` needs `DEV_INDEX`) gives per port
//! `NDEV_INDEX` (50) / `NDEV_NAME` (51) from `ib_device_get_netdev`, sent only when the netdev is
//! in the caller's namespace (`fill_port_info`); this is what `rdma link show` prints as
//! `netdev <if>` and it works for RoCE LAG (`mlx5_bond_0` <-> bond), sub-functions and rxe.
//! `RDMA_NLDEV_CMD_STAT_GET` (17) with `DEV_INDEX` + `PORT_INDEX` returns the nest
//! `STAT_HWCOUNTERS` (80) of `STAT_HWCOUNTER_ENTRY` (81) = `ENTRY_NAME` (82, string) +
//! `ENTRY_VALUE` (83, u64). The default counter read calls the driver's `get_hw_stats` directly
//! (`stat_get_doit_default_counter`): not the sysfs lifespan cache, no admin permission needed.
//! Optional counters (mlx5 `cc_rx_ce_pkts`, ...) appear here only once enabled.
//!
//! sysfs (`drivers/infiniband/core/sysfs.c`): `/sys/class/infiniband/<dev>/ports/<p>/hw_counters/`
//! one decimal u64 per file plus `lifespan` (ms, not a counter; values are cached for it);
//! `ports/<p>/counters/` (IB PMA, mlx5 only; `port_xmit_data`/`port_rcv_data` in 4-octet units);
//! `ports/<p>/gid_attrs/types/<idx>` = "IB/RoCE v1" or "RoCE v2"
//! (`drivers/infiniband/core/cache.c` `gid_type_str`), empty slots fail with EINVAL and are
//! skipped; `gid_attrs/ndevs/<idx>` = netdev of the GID.
//! configfs (`drivers/infiniband/core/cma_configfs.c`):
//! `/sys/kernel/config/rdma_cm/<dev>/ports/<p>/default_roce_tos` ("%u") and `default_roce_mode`;
//! the `<dev>` group exists only after someone created it with mkdir.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::netlink::{self, Msg, MsgBuilder, NetlinkError, NlSocket};
use super::sysfs::{self, component, under};
use super::{Reading, Unavailable, UnavailableReason};

pub mod qp_counters;
pub mod resources;
pub use resources::{RdmaCmId, RdmaQp};

pub const NETLINK_RDMA: libc::c_int = 20;
const RDMA_NL_NLDEV: u16 = 5;
const CMD_GET: u16 = 1;
const CMD_PORT_GET: u16 = 5;
pub(crate) const CMD_STAT_GET: u16 = 17;
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_FW_VERSION: u16 = 5;
const ATTR_NDEV_INDEX: u16 = 50;
const ATTR_NDEV_NAME: u16 = 51;
const ATTR_DEV_PROTOCOL: u16 = 67;
pub(crate) const ATTR_STAT_HWCOUNTERS: u16 = 80;
const ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
const ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
const ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;

const fn nl_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

#[derive(Debug, Error)]
pub enum RdmaError {
    #[error("RDMA netlink {what} failed")]
    Netlink {
        what: String,
        #[source]
        source: NetlinkError,
    },
    #[error("reading {path} failed")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("invalid RDMA device or interface name {0:?}")]
    BadName(String),
}

/// An RDMA device (`RDMA_NLDEV_CMD_GET`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaDevice {
    pub index: u32,
    pub name: String,
    pub fw_version: Option<String>,
    /// Number of ports (`RDMA_NLDEV_ATTR_PORT_INDEX` in a device reply).
    pub ports: Option<u32>,
    /// "roce", "ib", "iw" (`RDMA_NLDEV_ATTR_DEV_PROTOCOL`, newer kernels).
    pub protocol: Option<String>,
}

/// A port and the netdev bound to it (`RDMA_NLDEV_CMD_PORT_GET`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaLink {
    pub dev_index: u32,
    pub dev_name: String,
    pub port: u32,
    pub ndev_index: Option<u32>,
    pub ndev_name: Option<String>,
}

/// Decodes a device message (`RDMA_NLDEV_CMD_GET` reply).
pub fn decode_device(payload: &[u8]) -> Result<RdmaDevice, NetlinkError> {
    let mut d = RdmaDevice::default();
    let mut have_index = false;
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        match a.kind {
            ATTR_DEV_INDEX => {
                d.index = a.u32("RDMA_NLDEV_ATTR_DEV_INDEX")?;
                have_index = true;
            }
            ATTR_DEV_NAME => d.name = a.string("RDMA_NLDEV_ATTR_DEV_NAME")?,
            ATTR_FW_VERSION => d.fw_version = Some(a.string("RDMA_NLDEV_ATTR_FW_VERSION")?),
            ATTR_PORT_INDEX => d.ports = Some(a.u32("RDMA_NLDEV_ATTR_PORT_INDEX")?),
            ATTR_DEV_PROTOCOL => d.protocol = Some(a.string("RDMA_NLDEV_ATTR_DEV_PROTOCOL")?),
            _ => {}
        }
    }
    if !have_index || d.name.is_empty() {
        return Err(missing(
            "RDMA_NLDEV_ATTR_DEV_INDEX / DEV_NAME in a device message",
        ));
    }
    Ok(d)
}

pub(crate) fn missing(what: &str) -> NetlinkError {
    NetlinkError::Malformed {
        what: what.into(),
        offset: 0,
        detail: "required attribute missing".into(),
    }
}

/// Decodes a port message (`RDMA_NLDEV_CMD_PORT_GET` reply).
pub fn decode_port(payload: &[u8]) -> Result<RdmaLink, NetlinkError> {
    let mut l = RdmaLink::default();
    let mut have_port = false;
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        match a.kind {
            ATTR_DEV_INDEX => l.dev_index = a.u32("RDMA_NLDEV_ATTR_DEV_INDEX")?,
            ATTR_DEV_NAME => l.dev_name = a.string("RDMA_NLDEV_ATTR_DEV_NAME")?,
            ATTR_PORT_INDEX => {
                l.port = a.u32("RDMA_NLDEV_ATTR_PORT_INDEX")?;
                have_port = true;
            }
            ATTR_NDEV_INDEX => l.ndev_index = Some(a.u32("RDMA_NLDEV_ATTR_NDEV_INDEX")?),
            ATTR_NDEV_NAME => l.ndev_name = Some(a.string("RDMA_NLDEV_ATTR_NDEV_NAME")?),
            _ => {}
        }
    }
    if !have_port {
        return Err(missing("RDMA_NLDEV_ATTR_PORT_INDEX in a port message"));
    }
    Ok(l)
}

/// Decodes the hw counters of a `RDMA_NLDEV_CMD_STAT_GET` reply, in kernel order.
pub fn decode_hwcounters(payload: &[u8]) -> Result<Vec<(String, u64)>, NetlinkError> {
    let mut out = Vec::new();
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        if a.kind == ATTR_STAT_HWCOUNTERS {
            out.extend(decode_hwcounters_nest(&a)?);
        }
    }
    Ok(out)
}

/// The entries of one `STAT_HWCOUNTERS` nest, in kernel order.
pub(crate) fn decode_hwcounters_nest(
    a: &netlink::Attr<'_>,
) -> Result<Vec<(String, u64)>, NetlinkError> {
    let mut out = Vec::new();
    for e in a.nested() {
        let e = e?;
        if e.kind != ATTR_STAT_HWCOUNTER_ENTRY {
            continue;
        }
        let (mut name, mut value) = (None, None);
        for f in e.nested() {
            let f = f?;
            match f.kind {
                ATTR_STAT_HWCOUNTER_ENTRY_NAME => {
                    name = Some(f.string("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME")?)
                }
                ATTR_STAT_HWCOUNTER_ENTRY_VALUE => {
                    value = Some(f.u64("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE")?)
                }
                _ => {}
            }
        }
        match (name, value) {
            (Some(n), Some(v)) => out.push((n, v)),
            _ => {
                return Err(NetlinkError::Malformed {
                    what: "attribute RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY".into(),
                    offset: e.offset,
                    detail: "entry without both NAME and VALUE".into(),
                });
            }
        }
    }
    Ok(out)
}

/// An RDMA netlink socket.
pub struct RdmaNetlink {
    sock: NlSocket,
}

impl RdmaNetlink {
    /// Opens the socket; `Unavailable` when the kernel has no RDMA netlink (ib_core not loaded:
    /// `EPROTONOSUPPORT`).
    pub fn open() -> Result<Reading<Self>, RdmaError> {
        match NlSocket::open(NETLINK_RDMA) {
            Ok(sock) => Ok(Reading::Read(RdmaNetlink { sock })),
            Err(e) => match e.errno().and_then(|n| {
                Unavailable::from_errno(n, "RDMA netlink socket (ib_core not loaded?)")
            }) {
                Some(u) => Ok(Reading::Unavailable(u)),
                None => Err(RdmaError::Netlink {
                    what: "socket".into(),
                    source: e,
                }),
            },
        }
    }

    fn request<T>(
        &mut self,
        what: &str,
        op: u16,
        dump: bool,
        attrs: &[(u16, u32)],
        mut decode: impl FnMut(&Msg<'_>) -> Result<T, NetlinkError>,
    ) -> Result<Vec<T>, NetlinkError> {
        let seq = self.sock.next_seq();
        let flags = netlink::NLM_F_REQUEST
            | if dump {
                netlink::NLM_F_DUMP
            } else {
                netlink::NLM_F_ACK
            };
        let mut b = MsgBuilder::new(nl_type(op), flags, seq);
        for &(k, v) in attrs {
            b.attr_u32(k, v);
        }
        let mut out = Vec::new();
        self.sock
            .transact(&b.finish(), seq, |m| -> Result<(), NetlinkError> {
                out.push(decode(m)?);
                Ok(())
            })?;
        tracing::trace!(what, n = out.len(), "RDMA netlink reply");
        Ok(out)
    }

    /// All RDMA devices of this namespace.
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        self.request("CMD_GET dump", CMD_GET, true, &[], |m| {
            decode_device(m.payload)
        })
        .map_err(|source| RdmaError::Netlink {
            what: "RDMA_NLDEV_CMD_GET dump".into(),
            source,
        })
    }

    /// The ports of one device with their netdevs.
    pub fn ports(&mut self, dev_index: u32) -> Result<Vec<RdmaLink>, RdmaError> {
        self.request(
            "PORT_GET dump",
            CMD_PORT_GET,
            true,
            &[(ATTR_DEV_INDEX, dev_index)],
            |m| decode_port(m.payload),
        )
        .map_err(|source| RdmaError::Netlink {
            what: format!("RDMA_NLDEV_CMD_PORT_GET dump of device {dev_index}"),
            source,
        })
    }

    /// The RDMA ports bound to a netdev (matched on ifindex, or on name when the index is
    /// absent), with their device info. Empty when none is bound.
    pub fn links_for_netdev(
        &mut self,
        ifindex: u32,
        ifname: &str,
    ) -> Result<Vec<(RdmaDevice, RdmaLink)>, RdmaError> {
        let mut out = Vec::new();
        for d in self.devices()? {
            for l in self.ports(d.index)? {
                let hit = match l.ndev_index {
                    Some(i) => i == ifindex,
                    None => l.ndev_name.as_deref() == Some(ifname),
                };
                if hit {
                    out.push((d.clone(), l));
                }
            }
        }
        Ok(out)
    }

    /// Port hw counters (`RDMA_NLDEV_CMD_STAT_GET`), read from the driver on every call.
    pub fn hw_counters(
        &mut self,
        dev_index: u32,
        port: u32,
    ) -> Result<Reading<Vec<(String, u64)>>, RdmaError> {
        let attrs = [(ATTR_DEV_INDEX, dev_index), (ATTR_PORT_INDEX, port)];
        match self.request("STAT_GET", CMD_STAT_GET, false, &attrs, |m| {
            decode_hwcounters(m.payload)
        }) {
            Ok(v) => Ok(Reading::Read(v.into_iter().flatten().collect())),
            Err(e) => {
                let what = format!("RDMA_NLDEV_CMD_STAT_GET {dev_index}/{port}");
                match e.errno().and_then(|n| Unavailable::from_errno(n, &what)) {
                    Some(u) => Ok(Reading::Unavailable(u)),
                    None => Err(RdmaError::Netlink { what, source: e }),
                }
            }
        }
    }
}

/// A GID table entry's type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    pub index: u32,
    /// "RoCE v2" or "IB/RoCE v1".
    pub gid_type: String,
    /// Netdev of the GID (may be a VLAN or upper device), when readable.
    pub ndev: Option<String>,
}

/// sysfs / configfs reader under a root directory ("/" on a live host).
#[derive(Clone, Debug)]
pub struct RdmaSysfs {
    pub root: PathBuf,
}

impl RdmaSysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RdmaSysfs { root: root.into() }
    }

    fn port_dir(&self, dev: &str, port: u32) -> Result<PathBuf, RdmaError> {
        let dev = component(dev).ok_or_else(|| RdmaError::BadName(dev.into()))?;
        Ok(under(&self.root, "sys/class/infiniband")
            .join(dev)
            .join("ports")
            .join(port.to_string()))
    }

    /// RDMA devices and ports whose GIDs belong to `ifname` (`gid_attrs/ndevs/*`), or whose PCI
    /// parent is the interface's (`device` links). Used when RDMA netlink is unavailable.
    pub fn links_for_netdev(&self, ifname: &str) -> Result<Vec<(String, u32)>, RdmaError> {
        let ifname = component(ifname).ok_or_else(|| RdmaError::BadName(ifname.into()))?;
        let ib = under(&self.root, "sys/class/infiniband");
        let devs = match sysfs::list_dir(&ib) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(RdmaError::Io { path: ib, source }),
        };
        let net_parent = std::fs::canonicalize(
            under(&self.root, "sys/class/net")
                .join(ifname)
                .join("device"),
        )
        .ok();
        let mut out = Vec::new();
        for dev in devs {
            let same_parent = net_parent.is_some()
                && std::fs::canonicalize(ib.join(&dev).join("device")).ok() == net_parent;
            let ports = sysfs::list_dir(&ib.join(&dev).join("ports")).unwrap_or_default();
            for p in ports.iter().filter_map(|p| p.parse::<u32>().ok()) {
                let ndevs = ib
                    .join(&dev)
                    .join("ports")
                    .join(p.to_string())
                    .join("gid_attrs/ndevs");
                let by_gid = sysfs::list_dir(&ndevs).unwrap_or_default().iter().any(|i| {
                    sysfs::read_small(&ndevs.join(i))
                        .map(|s| s.trim() == ifname)
                        .unwrap_or(false)
                });
                if by_gid || same_parent {
                    out.push((dev.clone(), p));
                }
            }
        }
        Ok(out)
    }

    /// `ports/<p>/hw_counters/*` (without `lifespan`).
    pub fn hw_counters(
        &self,
        dev: &str,
        port: u32,
    ) -> Result<Reading<Vec<(String, u64)>>, RdmaError> {
        self.counter_dir(&self.port_dir(dev, port)?.join("hw_counters"))
    }

    /// `ports/<p>/counters/*` (IB PMA; `port_xmit_data` / `port_rcv_data` count 4-octet units).
    pub fn pma_counters(
        &self,
        dev: &str,
        port: u32,
    ) -> Result<Reading<Vec<(String, u64)>>, RdmaError> {
        self.counter_dir(&self.port_dir(dev, port)?.join("counters"))
    }

    fn counter_dir(&self, dir: &Path) -> Result<Reading<Vec<(String, u64)>>, RdmaError> {
        let names = match sysfs::list_dir(dir) {
            Ok(n) => n,
            Err(e) => {
                return match Unavailable::from_io(&e, &dir.display().to_string()) {
                    Some(u) => Ok(Reading::Unavailable(u)),
                    None => Err(RdmaError::Io {
                        path: dir.to_path_buf(),
                        source: e,
                    }),
                };
            }
        };
        let mut out = Vec::with_capacity(names.len());
        for n in names.into_iter().filter(|n| n != "lifespan") {
            let p = dir.join(&n);
            match sysfs::read_small(&p)
                .ok()
                .and_then(|t| sysfs::parse_u64(&t))
            {
                Some(v) => out.push((n, v)),
                // A counter the driver fails to read is absent from this sample, never 0.
                None => {
                    tracing::debug!(path = %p.display(), "RDMA counter file unreadable; left out")
                }
            }
        }
        Ok(Reading::Read(out))
    }

    /// GID types of a port, skipping empty slots (which fail with EINVAL).
    pub fn gid_types(&self, dev: &str, port: u32) -> Result<Reading<Vec<GidEntry>>, RdmaError> {
        let base = self.port_dir(dev, port)?.join("gid_attrs");
        let types = base.join("types");
        let idx = match sysfs::list_dir(&types) {
            Ok(v) => v,
            Err(e) => return Ok(Reading::Unavailable(sysfs::io_unavailable(&e, &types))),
        };
        let mut out = Vec::new();
        for i in idx.iter().filter_map(|i| i.parse::<u32>().ok()) {
            let Ok(t) = sysfs::read_small(&types.join(i.to_string())) else {
                continue;
            };
            let t = t.trim();
            if t.is_empty() {
                continue;
            }
            let ndev = sysfs::read_small(&base.join("ndevs").join(i.to_string()))
                .ok()
                .map(|s| s.trim().to_string());
            out.push(GidEntry {
                index: i,
                gid_type: t.to_string(),
                ndev,
            });
        }
        out.sort_by_key(|g| g.index);
        Ok(Reading::Read(out))
    }

    fn cma_file(&self, dev: &str, port: u32, file: &str) -> Result<PathBuf, RdmaError> {
        let dev = component(dev).ok_or_else(|| RdmaError::BadName(dev.into()))?;
        Ok(under(&self.root, "sys/kernel/config/rdma_cm")
            .join(dev)
            .join("ports")
            .join(port.to_string())
            .join(file))
    }

    /// rdma_cm default RoCE ToS (configfs). Absent unless the `<dev>` group was created.
    /// mlx5's device traffic-class override (`/sys/class/infiniband/DEV/tc/PORT/traffic_class`,
    /// MLNX_OFED's mlx5_ib): `Some(tclass)` when a global one is set (`Global tclass=N`, its
    /// first line; per-destination rules on further lines are not read), `None` when the file is
    /// empty (no override); unavailable where the driver has no such file (upstream kernels,
    /// other drivers). The driver applies it at every kernel modify-QP, over what the QP asked.
    pub fn traffic_class_override(
        &self,
        dev: &str,
        port: u32,
    ) -> Result<Reading<Option<u8>>, RdmaError> {
        let d = component(dev).ok_or_else(|| RdmaError::BadName(dev.into()))?;
        let p = under(&self.root, "sys/class/infiniband")
            .join(d)
            .join("tc")
            .join(port.to_string())
            .join("traffic_class");
        let text = match sysfs::read_small(&p) {
            Ok(t) => t,
            Err(e) => return Ok(Reading::Unavailable(sysfs::io_unavailable(&e, &p))),
        };
        let Some(first) = text.lines().next().map(str::trim) else {
            return Ok(Reading::Read(None));
        };
        let Some(v) = first.strip_prefix("Global tclass=") else {
            // Only per-destination rules, or nothing: no global override.
            return Ok(Reading::Read(None));
        };
        match v.trim().parse::<u8>() {
            Ok(t) => Ok(Reading::Read(Some(t))),
            Err(_) => Ok(Reading::unavailable(
                UnavailableReason::NotSupported,
                format!("{}: {first:?} is not a traffic class", p.display()),
            )),
        }
    }

    pub fn default_roce_tos(&self, dev: &str, port: u32) -> Result<Reading<u8>, RdmaError> {
        let p = self.cma_file(dev, port, "default_roce_tos")?;
        Ok(match sysfs::read_u64_setting(&p) {
            Reading::Read(v) if v <= 255 => Reading::Read(v as u8),
            Reading::Read(v) => Reading::unavailable(
                UnavailableReason::NotSupported,
                format!("{}: {v} is not a ToS byte", p.display()),
            ),
            Reading::Unavailable(u) => Reading::Unavailable(u),
        })
    }

    /// rdma_cm default RoCE mode ("RoCE v2" / "IB/RoCE v1").
    pub fn default_roce_mode(&self, dev: &str, port: u32) -> Result<Reading<String>, RdmaError> {
        Ok(sysfs::read_text_setting(&self.cma_file(
            dev,
            port,
            "default_roce_mode",
        )?))
    }

    /// The driver of the RDMA device's parent (`device/driver` link): `mlx5_core`, `bnxt_en`,
    /// `ice`. Soft-RoCE has no parent device but an attribute `parent` of its own (the netdev it
    /// runs over, `rxe_verbs.c`): `rdma_rxe` then, whatever the device is named (`rdma link add
    /// NAME type rxe` takes any name).
    pub fn parent_driver(&self, dev: &str) -> Result<Reading<String>, RdmaError> {
        let dev = component(dev).ok_or_else(|| RdmaError::BadName(dev.into()))?;
        let class = under(&self.root, "sys/class/infiniband").join(dev);
        let link = class.join("device/driver");
        if std::fs::symlink_metadata(class.join("device")).is_err()
            && class.join("parent").is_file()
        {
            return Ok(Reading::Read(RXE_DRIVER.to_string()));
        }
        Ok(match std::fs::read_link(&link) {
            Ok(t) => match t.file_name() {
                Some(n) => Reading::Read(n.to_string_lossy().into_owned()),
                None => Reading::unavailable(
                    UnavailableReason::NotSupported,
                    "driver link without a name",
                ),
            },
            Err(e) => Reading::Unavailable(sysfs::io_unavailable(&e, &link)),
        })
    }
}

/// What [`RdmaSysfs::parent_driver`] says of a soft-RoCE device.
pub const RXE_DRIVER: &str = "rdma_rxe";

#[cfg(test)]
mod tests {
    use super::super::testbytes::{nest, nla, nla_str};
    use super::*;
    use std::fs;

    fn entry(name: &str, v: u64) -> Vec<u8> {
        nest(81, &[nla_str(82, name), nla(83, &v.to_ne_bytes())])
    }

    #[test]
    fn decodes_stat_get_reply() {
        let mut p = nla(1, &3u32.to_ne_bytes());
        p.extend(nla_str(2, "mlx5_0"));
        p.extend(nla(3, &1u32.to_ne_bytes()));
        p.extend(nest(
            80,
            &[
                entry("rx_write_requests", 5),
                entry("np_cnp_sent", 1 << 40),
                entry("out_of_sequence", 0),
            ],
        ));
        let v = decode_hwcounters(&p).unwrap();
        assert_eq!(
            v,
            vec![
                ("rx_write_requests".into(), 5),
                ("np_cnp_sent".into(), 1 << 40),
                ("out_of_sequence".into(), 0)
            ]
        );
        // entry without VALUE
        let bad = nest(80, &[nest(81, &[nla_str(82, "x")])]);
        let e = decode_hwcounters(&bad).unwrap_err();
        assert!(e.to_string().contains("HWCOUNTER_ENTRY"), "{e}");
        // VALUE of 4 bytes
        let mut bad = Vec::new();
        bad.extend(nest(
            80,
            &[nest(81, &[nla_str(82, "x"), nla(83, &1u32.to_ne_bytes())])],
        ));
        let e = decode_hwcounters(&bad).unwrap_err();
        assert!(e.to_string().contains("ENTRY_VALUE"), "{e}");
        // truncated inside the nest
        let e = decode_hwcounters(&p[..p.len() - 6]).unwrap_err();
        assert!(matches!(e, NetlinkError::Truncated { .. }), "{e}");
    }

    #[test]
    fn decodes_device_and_port() {
        let mut d = nla(1, &7u32.to_ne_bytes());
        d.extend(nla_str(2, "mlx5_bond_0"));
        d.extend(nla(3, &1u32.to_ne_bytes()));
        d.extend(nla_str(5, "22.39.1002"));
        d.extend(nla_str(67, "roce"));
        let dev = decode_device(&d).unwrap();
        assert_eq!(
            (dev.index, dev.name.as_str(), dev.ports),
            (7, "mlx5_bond_0", Some(1))
        );
        assert_eq!(dev.fw_version.as_deref(), Some("22.39.1002"));
        assert!(decode_device(&nla_str(2, "x")).is_err(), "index missing");

        let mut p = nla(1, &7u32.to_ne_bytes());
        p.extend(nla_str(2, "mlx5_bond_0"));
        p.extend(nla(3, &1u32.to_ne_bytes()));
        p.extend(nla(50, &12u32.to_ne_bytes()));
        p.extend(nla_str(51, "bond0"));
        let l = decode_port(&p).unwrap();
        assert_eq!(
            (l.port, l.ndev_index, l.ndev_name.as_deref()),
            (1, Some(12), Some("bond0"))
        );
        // NDEV_INDEX with 2 bytes
        let mut bad = nla(3, &1u32.to_ne_bytes());
        bad.extend(nla(50, &[1, 0]));
        assert!(
            decode_port(&bad)
                .unwrap_err()
                .to_string()
                .contains("NDEV_INDEX")
        );
    }

    fn fake_tree() -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "nic-rdma-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&root);
        let port = root.join("sys/class/infiniband/rxe0/ports/1");
        fs::create_dir_all(port.join("hw_counters")).unwrap();
        fs::write(port.join("hw_counters/rcvd_seq_err"), "4\n").unwrap();
        fs::write(port.join("hw_counters/duplicate_request"), "2\n").unwrap();
        fs::write(port.join("hw_counters/lifespan"), "10\n").unwrap();
        fs::write(port.join("hw_counters/garbage"), "n/a\n").unwrap();
        for (i, t, n) in [
            (0, "IB/RoCE v1", "veth0"),
            (1, "RoCE v2", "veth0"),
            (2, "", ""),
        ] {
            fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
            fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
            fs::write(port.join(format!("gid_attrs/types/{i}")), format!("{t}\n")).unwrap();
            fs::write(port.join(format!("gid_attrs/ndevs/{i}")), format!("{n}\n")).unwrap();
        }
        let cma = root.join("sys/kernel/config/rdma_cm/rxe0/ports/1");
        fs::create_dir_all(&cma).unwrap();
        fs::write(cma.join("default_roce_tos"), "106\n").unwrap();
        fs::write(cma.join("default_roce_mode"), "RoCE v2\n").unwrap();
        root
    }

    #[test]
    fn traffic_class_override_of_mlx5() {
        let root = std::env::temp_dir().join(format!("ro-tc-{}", std::process::id()));
        let tc = |dev: &str, text: Option<&str>| {
            let d = root.join(format!("sys/class/infiniband/{dev}/tc/1"));
            fs::create_dir_all(&d).unwrap();
            if let Some(t) = text {
                fs::write(d.join("traffic_class"), t).unwrap();
            }
        };
        tc("mlx5_0", Some("Global tclass=106\n"));
        tc("mlx5_1", Some(""));
        tc("mlx5_2", Some("tclass=96,dst_ip=10.0.0.0/8\n"));
        tc("mlx5_3", Some("Global tclass=x\n"));
        let s = RdmaSysfs::new(&root);
        let v = |d: &str| s.traffic_class_override(d, 1).unwrap();
        assert_eq!(v("mlx5_0"), Reading::Read(Some(106)));
        assert_eq!(v("mlx5_1"), Reading::Read(None));
        assert_eq!(v("mlx5_2"), Reading::Read(None));
        assert!(
            matches!(v("mlx5_3"), Reading::Unavailable(u) if u.detail.contains("not a traffic class"))
        );
        assert!(matches!(v("rxe0"), Reading::Unavailable(_)));
        assert!(s.traffic_class_override("../x", 1).is_err());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn sysfs_fallback_on_fake_tree() {
        let root = fake_tree();
        let s = RdmaSysfs::new(&root);
        let c = s.hw_counters("rxe0", 1).unwrap().into_value().unwrap();
        assert_eq!(
            c,
            vec![("duplicate_request".into(), 2), ("rcvd_seq_err".into(), 4)]
        );
        let u = s.pma_counters("rxe0", 1).unwrap();
        assert_eq!(u.reason().unwrap().reason, UnavailableReason::Absent);
        let g = s.gid_types("rxe0", 1).unwrap().into_value().unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].gid_type, "RoCE v2");
        assert_eq!(s.default_roce_tos("rxe0", 1).unwrap(), Reading::Read(106));
        assert_eq!(
            s.default_roce_mode("rxe0", 1).unwrap(),
            Reading::Read("RoCE v2".into())
        );
        assert_eq!(
            s.default_roce_tos("mlx5_0", 1)
                .unwrap()
                .reason()
                .unwrap()
                .reason,
            UnavailableReason::Absent
        );
        assert_eq!(
            s.links_for_netdev("veth0").unwrap(),
            vec![("rxe0".to_string(), 1)]
        );
        assert!(s.links_for_netdev("eth9").unwrap().is_empty());
        assert!(matches!(
            s.hw_counters("../x", 1),
            Err(RdmaError::BadName(_))
        ));
        // no parent device and no `parent` attribute: unknown
        assert!(s.parent_driver("rxe0").unwrap().reason().is_some());
        // soft-RoCE under any name: its own `parent` attribute, no `device` link
        let rxa = root.join("sys/class/infiniband/rxa");
        fs::create_dir_all(&rxa).unwrap();
        fs::write(rxa.join("parent"), "va1\n").unwrap();
        assert_eq!(
            s.parent_driver("rxa").unwrap(),
            Reading::Read(RXE_DRIVER.into())
        );
        // a hardware device: the parent's driver link, even beside a `parent` file
        let mlx = root.join("sys/class/infiniband/mlx5_0");
        fs::create_dir_all(root.join("sys/bus/pci/drivers/mlx5_core")).unwrap();
        fs::create_dir_all(root.join("sys/devices/pci0/0000:01:00.0")).unwrap();
        fs::create_dir_all(&mlx).unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/pci0/0000:01:00.0"),
            mlx.join("device"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/bus/pci/drivers/mlx5_core"),
            root.join("sys/devices/pci0/0000:01:00.0/driver"),
        )
        .unwrap();
        fs::write(mlx.join("parent"), "x\n").unwrap();
        assert_eq!(
            s.parent_driver("mlx5_0").unwrap(),
            Reading::Read("mlx5_core".into())
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn live_rdma_netlink_does_not_fail() {
        match RdmaNetlink::open().unwrap() {
            Reading::Unavailable(u) => eprintln!("RDMA netlink: {u}"),
            Reading::Read(mut nl) => {
                let devs = nl.devices().unwrap();
                eprintln!("RDMA devices: {devs:?}");
                assert!(nl.links_for_netdev(1, "lo").unwrap().is_empty());
            }
        }
    }
}
