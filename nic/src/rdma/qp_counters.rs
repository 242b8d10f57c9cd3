//! Per-QP counters by counter binding (`rdma statistic qp`): a device that can bind QPs to
//! their own hardware counter set counts each group's out-of-sequence packets, sequence
//! errors, local ACK timeouts and RNR retries apart from the port's.
//!
//! Kernel side (`drivers/infiniband/core/counters.c`, `nldev.c`; uapi
//! `include/uapi/rdma/rdma_netlink.h`, same numbering 5.10 to 7.2):
//! - `RDMA_NLDEV_CMD_STAT_SET` (16; needs `CAP_NET_ADMIN`) with `DEV_INDEX`, `PORT_INDEX`,
//!   `STAT_RES` (75) = `RDMA_NLDEV_ATTR_RES_QP` (19), `STAT_MODE` (74) =
//!   `RDMA_COUNTER_MODE_AUTO` (1) and `STAT_AUTO_MODE_MASK` (76): a mask of
//!   `RDMA_COUNTER_MASK_QP_TYPE` (1) and `RDMA_COUNTER_MASK_PID` (2) turns the port's auto
//!   mode on; mask 0 turns it off again (`rdma_counter_set_auto_mode`). Auto mode is refused
//!   (`EINVAL`) while the port is in manual mode with counters bound, and `EOPNOTSUPP` on a
//!   device without hardware statistics. It binds QPs **as they are modified to INIT**
//!   (`rdma_counter_bind_qp_auto`): QPs set up before it was turned on stay on the port's
//!   counters. Binding needs the driver's `counter_alloc_stats` and `counter_bind_qp`
//!   (mlx5 only in 7.2); elsewhere the mode is accepted and no counter ever appears.
//! - `RDMA_NLDEV_CMD_STAT_GET` (17) with `DEV_INDEX`, `PORT_INDEX`, `STAT_RES` = QP and
//!   `STAT_MODE` (any value: it only selects the mode query) answers the port's mode:
//!   `STAT_MODE` and, in auto mode, `STAT_AUTO_MODE_MASK` (`stat_get_doit_qp`).
//! - The same command as a dump with `STAT_RES` = QP lists the counters
//!   (`nldev_res_get_counter_dumpit`): per message `DEV_INDEX`, `DEV_NAME` and a nest
//!   `STAT_COUNTER` (77) of `STAT_COUNTER_ENTRY` (78) = `PORT_INDEX`, `STAT_COUNTER_ID` (79),
//!   `STAT_MODE`, then in auto mode `RES_TYPE` (by QP type) and `RES_PID` or `RES_KERN_NAME`
//!   (by PID), the nest `RES_QP` of `RES_QP_ENTRY` = `RES_LQPN` (the QPs bound), and the nest
//!   `STAT_HWCOUNTERS` (80) of name-value entries, read from the device at the dump.

use serde::{Deserialize, Serialize};

use super::super::netlink::{self, NetlinkError};
use super::resources::{ATTR_RES_KERN_NAME, ATTR_RES_LQPN, ATTR_RES_PID, ATTR_RES_QP};
use super::resources::{ATTR_RES_QP_ENTRY, ATTR_RES_TYPE};
use super::{
    ATTR_DEV_INDEX, ATTR_PORT_INDEX, ATTR_STAT_HWCOUNTERS, CMD_STAT_GET, RdmaError, RdmaNetlink,
    decode_hwcounters_nest, missing,
};
use crate::{Reading, Unavailable};

const CMD_STAT_SET: u16 = 16;
const ATTR_STAT_MODE: u16 = 74;
const ATTR_STAT_RES: u16 = 75;
const ATTR_STAT_AUTO_MODE_MASK: u16 = 76;
const ATTR_STAT_COUNTER: u16 = 77;
const ATTR_STAT_COUNTER_ENTRY: u16 = 78;
const ATTR_STAT_COUNTER_ID: u16 = 79;

/// `enum rdma_nl_counter_mode`.
pub const MODE_NONE: u32 = 0;
pub const MODE_AUTO: u32 = 1;
pub const MODE_MANUAL: u32 = 2;

/// `enum rdma_nl_counter_mask`: what auto mode groups QPs by.
pub mod mask {
    /// One counter per QP type (all RC QPs of the port together, ...).
    pub const QP_TYPE: u32 = 1;
    /// One counter per process.
    pub const PID: u32 = 2;
}

/// A port's counter-binding mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterMode {
    /// QPs count on the port's counters only.
    None,
    /// New QPs are bound by the mask's criteria.
    Auto { mask: u32 },
    /// QPs are bound by hand (`rdma statistic qp bind`).
    Manual,
    /// A mode this reader does not know.
    Other(u32),
}

/// One bound counter of a port: its group and its hardware counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCounter {
    pub dev_index: u32,
    pub port: u32,
    pub id: u32,
    /// The group's QP type (auto mode by type), `enum ib_qp_type`.
    pub qp_type: Option<u8>,
    /// The group's process (auto mode by PID).
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
    /// The QPs bound to it.
    pub lqpns: Vec<u32>,
    /// Its hardware counters, in the kernel's order.
    pub hw: Vec<(String, u64)>,
}

/// The name of a mask, as `rdma statistic qp mode` prints it: `type`, `pid`, `type,pid`.
pub fn mask_name(m: u32) -> String {
    let mut v = Vec::new();
    if m & mask::QP_TYPE != 0 {
        v.push("type");
    }
    if m & mask::PID != 0 {
        v.push("pid");
    }
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// Decodes the mode reply of `RDMA_NLDEV_CMD_STAT_GET` (QP resource, not a dump).
pub fn decode_mode(payload: &[u8]) -> Result<CounterMode, NetlinkError> {
    let (mut mode, mut m) = (None, 0);
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        match a.kind {
            ATTR_STAT_MODE => mode = Some(a.u32("RDMA_NLDEV_ATTR_STAT_MODE")?),
            ATTR_STAT_AUTO_MODE_MASK => m = a.u32("RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK")?,
            _ => {}
        }
    }
    Ok(
        match mode.ok_or_else(|| missing("RDMA_NLDEV_ATTR_STAT_MODE in a mode reply"))? {
            MODE_NONE => CounterMode::None,
            MODE_AUTO => CounterMode::Auto { mask: m },
            MODE_MANUAL => CounterMode::Manual,
            x => CounterMode::Other(x),
        },
    )
}

/// Decodes one message of the counter dump: the counters it carries.
pub fn decode_counters(payload: &[u8]) -> Result<Vec<QpCounter>, NetlinkError> {
    let mut dev_index = None;
    let mut out = Vec::new();
    for a in netlink::attrs(payload, 0) {
        let a = a?;
        match a.kind {
            ATTR_DEV_INDEX => dev_index = Some(a.u32("RDMA_NLDEV_ATTR_DEV_INDEX")?),
            ATTR_STAT_COUNTER => {
                let dev_index = dev_index
                    .ok_or_else(|| missing("RDMA_NLDEV_ATTR_DEV_INDEX before the counters"))?;
                for e in a.nested() {
                    let e = e?;
                    if e.kind != ATTR_STAT_COUNTER_ENTRY {
                        continue;
                    }
                    out.push(decode_entry(dev_index, &e)?);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn decode_entry(dev_index: u32, e: &netlink::Attr<'_>) -> Result<QpCounter, NetlinkError> {
    let mut c = QpCounter {
        dev_index,
        ..QpCounter::default()
    };
    let (mut have_id, mut have_port) = (false, false);
    for f in e.nested() {
        let f = f?;
        match f.kind {
            ATTR_PORT_INDEX => {
                c.port = f.u32("RDMA_NLDEV_ATTR_PORT_INDEX")?;
                have_port = true;
            }
            ATTR_STAT_COUNTER_ID => {
                c.id = f.u32("RDMA_NLDEV_ATTR_STAT_COUNTER_ID")?;
                have_id = true;
            }
            ATTR_RES_TYPE => c.qp_type = Some(f.u8("RDMA_NLDEV_ATTR_RES_TYPE")?),
            ATTR_RES_PID => c.pid = Some(f.u32("RDMA_NLDEV_ATTR_RES_PID")?),
            ATTR_RES_KERN_NAME => c.kern_name = Some(f.string("RDMA_NLDEV_ATTR_RES_KERN_NAME")?),
            ATTR_RES_QP => {
                for q in f.nested() {
                    let q = q?;
                    if q.kind != ATTR_RES_QP_ENTRY {
                        continue;
                    }
                    for l in q.nested() {
                        let l = l?;
                        if l.kind == ATTR_RES_LQPN {
                            c.lqpns.push(l.u32("RDMA_NLDEV_ATTR_RES_LQPN")?);
                        }
                    }
                }
            }
            ATTR_STAT_HWCOUNTERS => c.hw = decode_hwcounters_nest(&f)?,
            _ => {}
        }
    }
    if !have_id || !have_port {
        return Err(NetlinkError::Malformed {
            what: "attribute RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY".into(),
            offset: e.offset,
            detail: "counter entry without RDMA_NLDEV_ATTR_STAT_COUNTER_ID or PORT_INDEX".into(),
        });
    }
    Ok(c)
}

impl RdmaNetlink {
    fn unavailable_or<T>(what: String, e: NetlinkError) -> Result<Reading<T>, RdmaError> {
        match e.errno().and_then(|n| Unavailable::from_errno(n, &what)) {
            Some(u) => Ok(Reading::Unavailable(u)),
            None => Err(RdmaError::Netlink { what, source: e }),
        }
    }

    /// The counter-binding mode of a port; unavailable where the kernel or device has none.
    pub fn qp_counter_mode(
        &mut self,
        dev_index: u32,
        port: u32,
    ) -> Result<Reading<CounterMode>, RdmaError> {
        let attrs = [
            (ATTR_DEV_INDEX, dev_index),
            (ATTR_PORT_INDEX, port),
            (ATTR_STAT_RES, u32::from(ATTR_RES_QP)),
            (ATTR_STAT_MODE, MODE_MANUAL),
        ];
        match self.request("STAT_GET mode", CMD_STAT_GET, false, &attrs, |m| {
            decode_mode(m.payload)
        }) {
            Ok(v) => match v.into_iter().next() {
                Some(m) => Ok(Reading::Read(m)),
                None => Err(RdmaError::Netlink {
                    what: format!("RDMA_NLDEV_CMD_STAT_GET mode of {dev_index}/{port}"),
                    source: missing("a mode reply"),
                }),
            },
            Err(e) => Self::unavailable_or(
                format!("RDMA_NLDEV_CMD_STAT_GET mode of {dev_index}/{port}"),
                e,
            ),
        }
    }

    /// Turns a port's auto mode on with `mask`, or off with 0 (needs `CAP_NET_ADMIN`).
    pub fn set_qp_counter_auto(
        &mut self,
        dev_index: u32,
        port: u32,
        mask: u32,
    ) -> Result<Reading<()>, RdmaError> {
        let attrs = [
            (ATTR_DEV_INDEX, dev_index),
            (ATTR_PORT_INDEX, port),
            (ATTR_STAT_RES, u32::from(ATTR_RES_QP)),
            (ATTR_STAT_MODE, MODE_AUTO),
            (ATTR_STAT_AUTO_MODE_MASK, mask),
        ];
        match self.request("STAT_SET auto", CMD_STAT_SET, false, &attrs, |_| Ok(())) {
            Ok(_) => Ok(Reading::Read(())),
            Err(e) => Self::unavailable_or(
                format!(
                    "RDMA_NLDEV_CMD_STAT_SET auto mode {} on {dev_index}/{port}",
                    mask_name(mask)
                ),
                e,
            ),
        }
    }

    /// The bound counters of a port, with their values now.
    pub fn qp_counters(
        &mut self,
        dev_index: u32,
        port: u32,
    ) -> Result<Reading<Vec<QpCounter>>, RdmaError> {
        let attrs = [
            (ATTR_DEV_INDEX, dev_index),
            (ATTR_PORT_INDEX, port),
            (ATTR_STAT_RES, u32::from(ATTR_RES_QP)),
        ];
        match self.request("STAT_GET counters dump", CMD_STAT_GET, true, &attrs, |m| {
            decode_counters(m.payload)
        }) {
            // The dump filters by device; the port filter is applied here as well.
            Ok(v) => Ok(Reading::Read(
                v.into_iter().flatten().filter(|c| c.port == port).collect(),
            )),
            Err(e) => Self::unavailable_or(
                format!("RDMA_NLDEV_CMD_STAT_GET counter dump of {dev_index}/{port}"),
                e,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testbytes::{nest, nla, nla_str};
    use super::*;

    fn u32a(k: u16, v: u32) -> Vec<u8> {
        nla(k, &v.to_ne_bytes())
    }

    fn hw(name: &str, v: u64) -> Vec<u8> {
        nest(81, &[nla_str(82, name), nla(83, &v.to_ne_bytes())])
    }

    /// One counter entry as `fill_res_counter_entry` lays it out (7.2): port, id, mode, the
    /// group (type and PID in auto mode by both), the bound QPs, the hardware counters.
    fn entry(
        port: u32,
        id: u32,
        pid: Option<u32>,
        qps: &[u32],
        counters: &[(&str, u64)],
    ) -> Vec<u8> {
        let mut f = vec![
            u32a(3, port),
            u32a(79, id),
            u32a(74, MODE_AUTO),
            nla(26, &[2u8]),
        ];
        if let Some(p) = pid {
            f.push(u32a(28, p));
        } else {
            f.push(nla_str(29, "nvme-rdma"));
        }
        f.push(nest(
            19,
            &qps.iter()
                .map(|&q| nest(20, &[u32a(21, q)]))
                .collect::<Vec<_>>(),
        ));
        f.push(nest(
            80,
            &counters.iter().map(|&(n, v)| hw(n, v)).collect::<Vec<_>>(),
        ));
        nest(78, &f)
    }

    #[test]
    fn decodes_the_mode_reply() {
        let mut p = u32a(1, 3);
        p.extend(nla_str(2, "mlx5_0"));
        p.extend(u32a(3, 1));
        p.extend(u32a(74, MODE_AUTO));
        p.extend(u32a(76, mask::QP_TYPE | mask::PID));
        assert_eq!(decode_mode(&p).unwrap(), CounterMode::Auto { mask: 3 });
        let mut p = u32a(1, 3);
        p.extend(u32a(74, MODE_NONE));
        assert_eq!(decode_mode(&p).unwrap(), CounterMode::None);
        let mut p = u32a(1, 3);
        p.extend(u32a(74, 9));
        assert_eq!(decode_mode(&p).unwrap(), CounterMode::Other(9));
        let e = decode_mode(&u32a(1, 3)).unwrap_err();
        assert!(e.to_string().contains("STAT_MODE"), "{e}");
        assert_eq!(mask_name(3), "type,pid");
        assert_eq!(mask_name(0), "none");
    }

    #[test]
    fn decodes_the_counter_dump() {
        let mut p = u32a(1, 4);
        p.extend(nla_str(2, "mlx5_1"));
        p.extend(nest(
            77,
            &[
                entry(
                    1,
                    7,
                    Some(4242),
                    &[0x11, 0x12],
                    &[("out_of_sequence", 3), ("local_ack_timeout_err", 1 << 33)],
                ),
                entry(1, 8, None, &[0x40], &[("rnr_nak_retry_err", 0)]),
            ],
        ));
        let v = decode_counters(&p).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0],
            QpCounter {
                dev_index: 4,
                port: 1,
                id: 7,
                qp_type: Some(2),
                pid: Some(4242),
                kern_name: None,
                lqpns: vec![0x11, 0x12],
                hw: vec![
                    ("out_of_sequence".into(), 3),
                    ("local_ack_timeout_err".into(), 1 << 33)
                ],
            }
        );
        assert_eq!(v[1].kern_name.as_deref(), Some("nvme-rdma"));
        assert_eq!(v[1].lqpns, vec![0x40]);
        // A message without counters (the dump's last) is empty.
        assert!(decode_counters(&u32a(1, 4)).unwrap().is_empty());
        // An entry without its id is malformed, and truncation is an error, never a panic.
        let bad = [u32a(1, 4), nest(77, &[nest(78, &[u32a(3, 1)])])].concat();
        let e = decode_counters(&bad).unwrap_err();
        assert!(e.to_string().contains("COUNTER_ENTRY"), "{e}");
        for cut in 1..p.len() {
            let _ = decode_counters(&p[..cut]);
        }
        // Counters before the device index: an error naming it.
        let e = decode_counters(&nest(77, &[])).unwrap_err();
        assert!(e.to_string().contains("DEV_INDEX"), "{e}");
    }
}
