//! The RDMA subsystem's resource tracking: every QP and every rdma_cm id of a device, as
//! `rdma res show qp` and `rdma res show cm_id` list them.
//!
//! `RDMA_NLDEV_CMD_RES_QP_GET` (10) and `RDMA_NLDEV_CMD_RES_CM_ID_GET` (11), dumps
//! (`drivers/infiniband/core/nldev.c`, `res_get_common_dumpit`): `DEV_INDEX` is mandatory, so a
//! dump covers one device; the kernel resumes the dump by position in the device's restrack
//! table, without a consistency check, so a QP created or destroyed meanwhile may be missed or
//! seen twice (the caller de-duplicates on the QP number). No capability is needed. Each reply
//! message holds `DEV_INDEX`, `DEV_NAME` and a nest `RES_QP` (19) / `RES_CM_ID` (30) of entries
//! `RES_QP_ENTRY` (20) / `RES_CM_ID_ENTRY` (31).
//!
//! A QP entry (`fill_res_qp_entry`, same attributes on 5.10 to 7.2): `PORT_INDEX` (3, once the
//! QP has a port), `RES_LQPN` (21), `RES_PDN` (60, user QPs), `RES_PID` (28, user QPs, in the
//! reader's PID namespace; absent when the creator is gone or not visible) or `RES_KERN_NAME`
//! (29, kernel QPs: the ULP), then from `ib_query_qp`: `RES_RQPN` (22) and `RES_RQ_PSN` (23) for
//! RC/UC, `RES_SQ_PSN` (24), `RES_PATH_MIG_STATE` (25, u8), `RES_TYPE` (26, u8, `enum ib_qp_type`),
//! `RES_STATE` (27, u8, `enum ib_qp_state`), then the driver's own nest (52), ignored here. The
//! traffic class, remote GID and service level are not in it.
//!
//! A cm id entry (`fill_res_cm_id_entry`): `PORT_INDEX`, `RES_LQPN` + `RES_TYPE` when a QP was
//! created through rdma_cm, `RES_PS` (32, u32), `RES_STATE` (27, `enum rdma_cm_state`),
//! `RES_SRC_ADDR` (33) / `RES_DST_ADDR` (34) as `struct __kernel_sockaddr_storage` (family in host
//! order, then the `sockaddr_in` / `sockaddr_in6` fields; the port is rdma_cm's, not RoCE's UDP
//! port), `RES_CM_IDN` (63), `RES_PID` or `RES_KERN_NAME`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::super::netlink::{self, Attr, NetlinkError};
use super::{ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_PORT_INDEX, RdmaError, RdmaNetlink, missing};
use crate::{Reading, Unavailable, UnavailableReason};

const CMD_RES_QP_GET: u16 = 10;
const CMD_RES_CM_ID_GET: u16 = 11;
const CMD_RES_QP_GET_RAW: u16 = 19;
const ATTR_RES_RAW: u16 = 85;
pub(crate) const ATTR_RES_QP: u16 = 19;
pub(crate) const ATTR_RES_QP_ENTRY: u16 = 20;
pub(crate) const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_RQPN: u16 = 22;
const ATTR_RES_RQ_PSN: u16 = 23;
const ATTR_RES_SQ_PSN: u16 = 24;
const ATTR_RES_PATH_MIG_STATE: u16 = 25;
pub(crate) const ATTR_RES_TYPE: u16 = 26;
const ATTR_RES_STATE: u16 = 27;
pub(crate) const ATTR_RES_PID: u16 = 28;
pub(crate) const ATTR_RES_KERN_NAME: u16 = 29;
const ATTR_RES_CM_ID: u16 = 30;
const ATTR_RES_CM_ID_ENTRY: u16 = 31;
const ATTR_RES_PS: u16 = 32;
const ATTR_RES_SRC_ADDR: u16 = 33;
const ATTR_RES_DST_ADDR: u16 = 34;
const ATTR_RES_PDN: u16 = 60;
const ATTR_RES_CM_IDN: u16 = 63;

/// `AF_INET`, `AF_INET6` of `struct __kernel_sockaddr_storage`.
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// One QP of a device (`RDMA_NLDEV_CMD_RES_QP_GET`). The numeric codes are the kernel's
/// (`enum ib_qp_type`, `enum ib_qp_state`, `enum ib_mig_state`); see [`qp_type_name`],
/// [`qp_state_name`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaQp {
    pub dev_index: u32,
    pub dev_name: String,
    /// Absent until the QP has a port (it gets one moving from RESET to INIT).
    pub port: Option<u32>,
    pub lqpn: u32,
    /// Remote QP number: RC and UC QPs only.
    pub rqpn: Option<u32>,
    pub qp_type: Option<u8>,
    pub state: Option<u8>,
    /// Next PSN to send.
    pub sq_psn: Option<u32>,
    /// Next PSN expected: RC and UC QPs only.
    pub rq_psn: Option<u32>,
    pub path_mig_state: Option<u8>,
    /// The creating process (user QPs), in the reader's PID namespace.
    pub pid: Option<u32>,
    /// The kernel user of a kernel QP (e.g. `nvme-rdma`, `rdma_cm`'s ULP name).
    pub kern_name: Option<String>,
    pub pdn: Option<u32>,
}

/// One rdma_cm id of a device (`RDMA_NLDEV_CMD_RES_CM_ID_GET`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaCmId {
    pub dev_index: u32,
    pub port: Option<u32>,
    /// The QP created through this id, if any.
    pub lqpn: Option<u32>,
    pub qp_type: Option<u8>,
    /// Port space (`RDMA_PS_TCP` 0x106, `RDMA_PS_UDP` 0x111, `RDMA_PS_IB` 0x13f, `RDMA_PS_IPOIB` 2).
    pub ps: Option<u32>,
    /// `enum rdma_cm_state`.
    pub state: Option<u8>,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub cm_idn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

/// The name of an `enum ib_qp_type` value, as `rdma res show qp` prints it.
pub fn qp_type_name(t: u8) -> &'static str {
    match t {
        0 => "SMI",
        1 => "GSI",
        2 => "RC",
        3 => "UC",
        4 => "UD",
        5 => "RAW_IPV6",
        6 => "RAW_ETHERTYPE",
        8 => "RAW_PACKET",
        9 => "XRC_INI",
        10 => "XRC_TGT",
        255 => "DRIVER",
        _ => "UNKNOWN",
    }
}

/// `enum ib_qp_state`.
pub mod qp_state {
    pub const RESET: u8 = 0;
    pub const INIT: u8 = 1;
    pub const RTR: u8 = 2;
    pub const RTS: u8 = 3;
    pub const SQD: u8 = 4;
    pub const SQE: u8 = 5;
    pub const ERR: u8 = 6;
}

/// The name of an `enum ib_qp_state` value, as `rdma res show qp` prints it.
pub fn qp_state_name(s: u8) -> &'static str {
    match s {
        qp_state::RESET => "RESET",
        qp_state::INIT => "INIT",
        qp_state::RTR => "RTR",
        qp_state::RTS => "RTS",
        qp_state::SQD => "SQD",
        qp_state::SQE => "SQE",
        qp_state::ERR => "ERR",
        _ => "UNKNOWN",
    }
}

/// The name of an `enum rdma_cm_state` value (iproute2 `rdma/res-cmid.c`).
pub fn cm_state_name(s: u8) -> &'static str {
    match s {
        0 => "IDLE",
        1 => "ADDR_QUERY",
        2 => "ADDR_RESOLVED",
        3 => "ROUTE_QUERY",
        4 => "ROUTE_RESOLVED",
        5 => "CONNECT",
        6 => "DISCONNECT",
        7 => "ADDR_BOUND",
        8 => "LISTEN",
        9 => "DEVICE_REMOVAL",
        10 => "DESTROYING",
        _ => "UNKNOWN",
    }
}

/// The device fields every resource reply message starts with.
fn message_device(payload: &[u8]) -> Result<(Option<u32>, String), NetlinkError> {
    let (mut index, mut name) = (None, String::new());
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        match a.kind {
            ATTR_DEV_INDEX => index = Some(a.u32("RDMA_NLDEV_ATTR_DEV_INDEX")?),
            ATTR_DEV_NAME => name = a.string("RDMA_NLDEV_ATTR_DEV_NAME")?,
            _ => {}
        }
    }
    Ok((index, name))
}

/// The entries (`entry_kind`) of the table nest (`table_kind`) of one reply message.
fn entries<'a>(
    payload: &'a [u8],
    table_kind: u16,
    entry_kind: u16,
) -> Result<Vec<Attr<'a>>, NetlinkError> {
    let mut out = Vec::new();
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        if a.kind != table_kind {
            continue;
        }
        for e in a.nested() {
            let e = e?;
            if e.kind == entry_kind {
                out.push(e);
            }
        }
    }
    Ok(out)
}

/// Decodes one `RDMA_NLDEV_CMD_RES_QP_GET` reply message: the QPs it carries.
pub fn decode_qps(payload: &[u8]) -> Result<Vec<RdmaQp>, NetlinkError> {
    let (dev_index, dev_name) = message_device(payload)?;
    let table = entries(payload, ATTR_RES_QP, ATTR_RES_QP_ENTRY)?;
    let Some(dev_index) = dev_index else {
        if table.is_empty() {
            return Ok(Vec::new());
        }
        return Err(missing("RDMA_NLDEV_ATTR_DEV_INDEX in a QP message"));
    };
    let mut out = Vec::with_capacity(table.len());
    for e in table {
        let mut q = RdmaQp {
            dev_index,
            dev_name: dev_name.clone(),
            ..RdmaQp::default()
        };
        let mut have_lqpn = false;
        for f in e.nested() {
            let f = f?;
            match f.kind {
                ATTR_PORT_INDEX => q.port = Some(f.u32("RDMA_NLDEV_ATTR_PORT_INDEX")?),
                ATTR_RES_LQPN => {
                    q.lqpn = f.u32("RDMA_NLDEV_ATTR_RES_LQPN")?;
                    have_lqpn = true;
                }
                ATTR_RES_RQPN => q.rqpn = Some(f.u32("RDMA_NLDEV_ATTR_RES_RQPN")?),
                ATTR_RES_RQ_PSN => q.rq_psn = Some(f.u32("RDMA_NLDEV_ATTR_RES_RQ_PSN")?),
                ATTR_RES_SQ_PSN => q.sq_psn = Some(f.u32("RDMA_NLDEV_ATTR_RES_SQ_PSN")?),
                ATTR_RES_PATH_MIG_STATE => {
                    q.path_mig_state = Some(f.u8("RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE")?)
                }
                ATTR_RES_TYPE => q.qp_type = Some(f.u8("RDMA_NLDEV_ATTR_RES_TYPE")?),
                ATTR_RES_STATE => q.state = Some(f.u8("RDMA_NLDEV_ATTR_RES_STATE")?),
                ATTR_RES_PID => q.pid = Some(f.u32("RDMA_NLDEV_ATTR_RES_PID")?),
                ATTR_RES_KERN_NAME => {
                    q.kern_name = Some(f.string("RDMA_NLDEV_ATTR_RES_KERN_NAME")?)
                }
                ATTR_RES_PDN => q.pdn = Some(f.u32("RDMA_NLDEV_ATTR_RES_PDN")?),
                _ => {}
            }
        }
        if !have_lqpn {
            return Err(NetlinkError::Malformed {
                what: "attribute RDMA_NLDEV_ATTR_RES_QP_ENTRY".into(),
                offset: e.offset,
                detail: "QP entry without RDMA_NLDEV_ATTR_RES_LQPN".into(),
            });
        }
        out.push(q);
    }
    Ok(out)
}

/// Decodes a `struct __kernel_sockaddr_storage` of a cm id: IPv4 and IPv6 addresses; `None`
/// for another family (AF_IB) or an unset one.
pub fn decode_sockaddr(a: &Attr<'_>, name: &str) -> Result<Option<SocketAddr>, NetlinkError> {
    let b = a.structure(name, 2)?;
    let family = u16::from_ne_bytes([b[0], b[1]]);
    let need = match family {
        AF_INET => 8,
        AF_INET6 => 24,
        _ => return Ok(None),
    };
    let b = a.structure(name, need)?;
    let port = u16::from_be_bytes([b[2], b[3]]);
    let ip = if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7]))
    } else {
        let mut o = [0u8; 16];
        o.copy_from_slice(&b[8..24]);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

/// Decodes one `RDMA_NLDEV_CMD_RES_CM_ID_GET` reply message: the cm ids it carries.
pub fn decode_cm_ids(payload: &[u8]) -> Result<Vec<RdmaCmId>, NetlinkError> {
    let (dev_index, _) = message_device(payload)?;
    let table = entries(payload, ATTR_RES_CM_ID, ATTR_RES_CM_ID_ENTRY)?;
    let Some(dev_index) = dev_index else {
        if table.is_empty() {
            return Ok(Vec::new());
        }
        return Err(missing("RDMA_NLDEV_ATTR_DEV_INDEX in a cm id message"));
    };
    let mut out = Vec::with_capacity(table.len());
    for e in table {
        let mut c = RdmaCmId {
            dev_index,
            ..RdmaCmId::default()
        };
        for f in e.nested() {
            let f = f?;
            match f.kind {
                ATTR_PORT_INDEX => c.port = Some(f.u32("RDMA_NLDEV_ATTR_PORT_INDEX")?),
                ATTR_RES_LQPN => c.lqpn = Some(f.u32("RDMA_NLDEV_ATTR_RES_LQPN")?),
                ATTR_RES_TYPE => c.qp_type = Some(f.u8("RDMA_NLDEV_ATTR_RES_TYPE")?),
                ATTR_RES_PS => c.ps = Some(f.u32("RDMA_NLDEV_ATTR_RES_PS")?),
                ATTR_RES_STATE => c.state = Some(f.u8("RDMA_NLDEV_ATTR_RES_STATE")?),
                ATTR_RES_SRC_ADDR => c.src = decode_sockaddr(&f, "RDMA_NLDEV_ATTR_RES_SRC_ADDR")?,
                ATTR_RES_DST_ADDR => c.dst = decode_sockaddr(&f, "RDMA_NLDEV_ATTR_RES_DST_ADDR")?,
                ATTR_RES_CM_IDN => c.cm_idn = Some(f.u32("RDMA_NLDEV_ATTR_RES_CM_IDN")?),
                ATTR_RES_PID => c.pid = Some(f.u32("RDMA_NLDEV_ATTR_RES_PID")?),
                ATTR_RES_KERN_NAME => {
                    c.kern_name = Some(f.string("RDMA_NLDEV_ATTR_RES_KERN_NAME")?)
                }
                _ => {}
            }
        }
        out.push(c);
    }
    Ok(out)
}

impl RdmaNetlink {
    /// Every QP of device `dev_index` (one dump; see the module documentation for what a dump
    /// does not guarantee).
    pub fn qps(&mut self, dev_index: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        let v = self
            .request(
                "RES_QP_GET dump",
                CMD_RES_QP_GET,
                true,
                &[(ATTR_DEV_INDEX, dev_index)],
                |m| decode_qps(m.payload),
            )
            .map_err(|source| RdmaError::Netlink {
                what: format!("RDMA_NLDEV_CMD_RES_QP_GET dump of device {dev_index}"),
                source,
            })?;
        Ok(v.into_iter().flatten().collect())
    }

    /// Every rdma_cm id of device `dev_index` that is bound to it.
    pub fn cm_ids(&mut self, dev_index: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        let v = self
            .request(
                "RES_CM_ID_GET dump",
                CMD_RES_CM_ID_GET,
                true,
                &[(ATTR_DEV_INDEX, dev_index)],
                |m| decode_cm_ids(m.payload),
            )
            .map_err(|source| RdmaError::Netlink {
                what: format!("RDMA_NLDEV_CMD_RES_CM_ID_GET dump of device {dev_index}"),
                source,
            })?;
        Ok(v.into_iter().flatten().collect())
    }
}

/// Decodes a `RDMA_NLDEV_CMD_RES_QP_GET_RAW` reply to one QP (not a dump: the driver's
/// `fill_res_qp_entry_raw` puts `RES_RAW` at the message's top level): the raw bytes, `None`
/// when the message has none (a driver that dumped nothing).
pub fn decode_qp_raw(payload: &[u8]) -> Result<Option<Vec<u8>>, NetlinkError> {
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        if a.kind == ATTR_RES_RAW {
            return Ok(Some(a.data.to_vec()));
        }
    }
    Ok(None)
}

impl RdmaNetlink {
    /// The driver's raw context of one QP (`rdma res show qp link DEV lqpn N -r`): mlx5's
    /// firmware resource dump of the QP (`drivers/infiniband/hw/mlx5/restrack.c`). Needs
    /// `CAP_NET_ADMIN`; unavailable on drivers without it (`EOPNOTSUPP`/`EINVAL` from
    /// `fill_res_qp_raw_entry`: rxe, irdma), without permission, or for a QP gone
    /// meanwhile (`ENOENT`).
    pub fn qp_raw(&mut self, dev_index: u32, lqpn: u32) -> Result<Reading<Vec<u8>>, RdmaError> {
        let what = format!("RDMA_NLDEV_CMD_RES_QP_GET_RAW of QP {lqpn} of device {dev_index}");
        match self.request(
            "RES_QP_GET_RAW",
            CMD_RES_QP_GET_RAW,
            false,
            &[(ATTR_DEV_INDEX, dev_index), (ATTR_RES_LQPN, lqpn)],
            |m| decode_qp_raw(m.payload),
        ) {
            Ok(v) => match v.into_iter().flatten().next() {
                Some(raw) => Ok(Reading::Read(raw)),
                None => Ok(Reading::Unavailable(Unavailable::new(
                    UnavailableReason::NotSupported,
                    format!("{what}: no raw context in the reply"),
                ))),
            },
            Err(e) => {
                let unsupported = matches!(e.errno(), Some(libc::EINVAL));
                match e.errno().and_then(|n| Unavailable::from_errno(n, &what)) {
                    Some(u) => Ok(Reading::Unavailable(u)),
                    None if unsupported => Ok(Reading::Unavailable(Unavailable::new(
                        UnavailableReason::NotSupported,
                        format!("{what}: the driver has no raw QP context (EINVAL)"),
                    ))),
                    None => Err(RdmaError::Netlink { what, source: e }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testbytes::{nest, nla, nla_str};
    use super::*;

    #[test]
    fn decodes_a_raw_qp_reply() {
        let mut p = nla(1, &4u32.to_ne_bytes());
        p.extend(nla_str(2, "mlx5_0"));
        p.extend(nla(85, &[0, 4, 0xff, 0xfe, 1, 2, 3, 4]));
        assert_eq!(
            decode_qp_raw(&p).unwrap(),
            Some(vec![0, 4, 0xff, 0xfe, 1, 2, 3, 4])
        );
        assert_eq!(decode_qp_raw(&nla(1, &4u32.to_ne_bytes())).unwrap(), None);
        assert!(decode_qp_raw(&p[..p.len() - 3]).is_err());
    }

    /// A QP entry as `fill_res_qp_entry` lays it out for a user RC QP (6.1-7.2 order).
    fn rc_entry(lqpn: u32, rqpn: u32, sq: u32, rq: u32, state: u8, pid: u32) -> Vec<u8> {
        nest(
            20,
            &[
                nla(3, &1u32.to_ne_bytes()),
                nla(21, &lqpn.to_ne_bytes()),
                nla(60, &3u32.to_ne_bytes()),
                nla(28, &pid.to_ne_bytes()),
                nla(22, &rqpn.to_ne_bytes()),
                nla(23, &rq.to_ne_bytes()),
                nla(24, &sq.to_ne_bytes()),
                nla(25, &[0]),
                nla(26, &[2]),
                nla(27, &[state]),
            ],
        )
    }

    #[test]
    fn decodes_a_qp_dump_message() {
        let mut p = nla(1, &4u32.to_ne_bytes());
        p.extend(nla_str(2, "rxe0"));
        let kernel_ud = nest(
            20,
            &[
                nla(3, &1u32.to_ne_bytes()),
                nla(21, &1u32.to_ne_bytes()),
                nla_str(29, "ib_core"),
                nla(24, &0u32.to_ne_bytes()),
                nla(26, &[1]),
                nla(27, &[3]),
            ],
        );
        // A QP still in RESET: no port yet.
        let reset = nest(
            20,
            &[nla(21, &19u32.to_ne_bytes()), nla(26, &[2]), nla(27, &[0])],
        );
        p.extend(nest(
            19,
            &[
                kernel_ud,
                rc_entry(17, 18, 0x00ff_fffe, 0x0012_3456, 3, 4242),
                reset,
            ],
        ));
        let v = decode_qps(&p).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].kern_name.as_deref(), Some("ib_core"));
        assert_eq!(v[0].pid, None);
        assert_eq!(v[0].rqpn, None, "GSI has no remote QP");
        assert_eq!(qp_type_name(v[0].qp_type.unwrap()), "GSI");
        let rc = &v[1];
        assert_eq!(
            rc,
            &RdmaQp {
                dev_index: 4,
                dev_name: "rxe0".into(),
                port: Some(1),
                lqpn: 17,
                rqpn: Some(18),
                qp_type: Some(2),
                state: Some(qp_state::RTS),
                sq_psn: Some(0x00ff_fffe),
                rq_psn: Some(0x0012_3456),
                path_mig_state: Some(0),
                pid: Some(4242),
                kern_name: None,
                pdn: Some(3),
            }
        );
        assert_eq!(v[2].port, None);
        assert_eq!(qp_state_name(v[2].state.unwrap()), "RESET");
    }

    #[test]
    fn a_qp_message_that_lies_is_an_error_naming_the_attribute() {
        let mut p = nla(1, &4u32.to_ne_bytes());
        // A u32 LQPN of two bytes.
        p.extend(nest(19, &[nest(20, &[nla(21, &[1, 2])])]));
        let e = decode_qps(&p).unwrap_err();
        assert!(e.to_string().contains("RES_LQPN"), "{e}");
        // An entry without LQPN.
        let mut p = nla(1, &4u32.to_ne_bytes());
        p.extend(nest(19, &[nest(20, &[nla(27, &[3])])]));
        let e = decode_qps(&p).unwrap_err();
        assert!(
            e.to_string().contains("without RDMA_NLDEV_ATTR_RES_LQPN"),
            "{e}"
        );
        // Entries without the device.
        let p = nest(19, &[rc_entry(1, 2, 3, 4, 3, 5)]);
        let e = decode_qps(&p).unwrap_err();
        assert!(e.to_string().contains("DEV_INDEX"), "{e}");
        // Truncated inside an entry.
        let mut p = nla(1, &4u32.to_ne_bytes());
        p.extend(nest(19, &[rc_entry(1, 2, 3, 4, 3, 5)]));
        let e = decode_qps(&p[..p.len() - 3]).unwrap_err();
        assert!(matches!(e, NetlinkError::Truncated { .. }), "{e}");
        // A message without a table (a device with no QP) is no QP and no error.
        assert!(decode_qps(&nla(1, &4u32.to_ne_bytes())).unwrap().is_empty());
    }

    fn sockaddr_in(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut s = vec![0u8; 128];
        s[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
        s[2..4].copy_from_slice(&port.to_be_bytes());
        s[4..8].copy_from_slice(&ip);
        s
    }

    #[test]
    fn decodes_a_cm_id_dump_message() {
        let mut v6 = vec![0u8; 128];
        v6[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        v6[2..4].copy_from_slice(&4420u16.to_be_bytes());
        v6[8..24].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        let mut p = nla(1, &2u32.to_ne_bytes());
        p.extend(nla_str(2, "mlx5_0"));
        p.extend(nest(
            30,
            &[
                // A listener: no QP, no destination.
                nest(
                    31,
                    &[
                        nla(32, &0x106u32.to_ne_bytes()),
                        nla(27, &[8]),
                        nla(33, &sockaddr_in([0, 0, 0, 0], 18515)),
                        nla(63, &0u32.to_ne_bytes()),
                        nla(28, &77u32.to_ne_bytes()),
                    ],
                ),
                // A connected id with its QP.
                nest(
                    31,
                    &[
                        nla(3, &1u32.to_ne_bytes()),
                        nla(21, &0x11u32.to_ne_bytes()),
                        nla(26, &[2]),
                        nla(32, &0x106u32.to_ne_bytes()),
                        nla(27, &[5]),
                        nla(33, &sockaddr_in([10, 0, 0, 2], 40000)),
                        nla(34, &v6),
                        nla(63, &1u32.to_ne_bytes()),
                        nla_str(29, "nvme-rdma"),
                    ],
                ),
            ],
        ));
        let v = decode_cm_ids(&p).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].lqpn, None);
        assert_eq!(cm_state_name(v[0].state.unwrap()), "LISTEN");
        assert_eq!(v[0].src, Some("0.0.0.0:18515".parse().unwrap()));
        assert_eq!(v[0].dst, None);
        assert_eq!(v[0].pid, Some(77));
        assert_eq!(v[1].lqpn, Some(0x11));
        assert_eq!(v[1].src, Some("10.0.0.2:40000".parse().unwrap()));
        assert_eq!(v[1].dst, Some("[fd00::2]:4420".parse().unwrap()));
        assert_eq!(v[1].kern_name.as_deref(), Some("nvme-rdma"));
        assert_eq!(cm_state_name(v[1].state.unwrap()), "CONNECT");
        // An AF_IB address is no IP address.
        let mut ib = vec![0u8; 128];
        ib[0..2].copy_from_slice(&27u16.to_ne_bytes());
        let mut p = nla(1, &2u32.to_ne_bytes());
        p.extend(nest(30, &[nest(31, &[nla(33, &ib)])]));
        assert_eq!(decode_cm_ids(&p).unwrap()[0].src, None);
        // A sockaddr cut short is an error naming it.
        let mut p = nla(1, &2u32.to_ne_bytes());
        p.extend(nest(
            30,
            &[nest(31, &[nla(34, &sockaddr_in([1, 2, 3, 4], 1)[..6])])],
        ));
        let e = decode_cm_ids(&p).unwrap_err();
        assert!(e.to_string().contains("RES_DST_ADDR"), "{e}");
    }
}
