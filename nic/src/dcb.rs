//! IEEE DCB state through rtnetlink dcbnl: PFC, ETS, APP table (DSCP -> priority), buffers.
//!
//! Sources: `include/uapi/linux/dcbnl.h`, `net/dcb/dcbnl.c` (`dcb_doit`, `dcbnl_ieee_fill`).
//! Request: `RTM_GETDCB` (78) with `struct dcbmsg { u8 dcb_family = AF_UNSPEC; u8 cmd =
//! DCB_CMD_IEEE_GET (21); u16 pad; }` and `DCB_ATTR_IFNAME` (1). GET needs no CAP_NET_ADMIN.
//! Reply: `DCB_ATTR_IFNAME`, the nest `DCB_ATTR_IEEE` (13) and `DCB_ATTR_DCBX` (14, u8).
//! Inside the IEEE nest: `DCB_ATTR_IEEE_ETS` (1, `struct ieee_ets`, 59 bytes),
//! `DCB_ATTR_IEEE_PFC` (2, `struct ieee_pfc`, 136 bytes), `DCB_ATTR_IEEE_APP_TABLE` (3, nest of
//! `DCB_ATTR_IEEE_APP` (1) / `DCB_ATTR_DCB_APP` (2) each a 4-byte `struct dcb_app`),
//! `DCB_ATTR_IEEE_MAXRATE` (7, `struct ieee_maxrate`, 8 x u64 kbit/s), `DCB_ATTR_DCB_BUFFER`
//! (10, `struct dcbnl_buffer`, 44 bytes).
//!
//! `dcb_doit` answers `-EOPNOTSUPP` for a netdev without `dcbnl_ops` (veth, lo, most virtual
//! devices) and `-ENODEV` for an unknown name; kernels before 4.x answered `-EINVAL` for both and
//! for any namespace other than `init_net`. These are reported as "DCB unavailable", not errors.
//!
//! Trust: mlx5 accepts only DSCP APP entries and switches the port to DSCP trust with the first
//! one (`drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c` `mlx5e_dcbnl_ieee_setapp`,
//! `mlx5e_trust_initialize`, `mlx5e_dcbnl_init_app`): trust = DSCP iff the APP table holds
//! selector-5 entries, and their priorities are the DSCP -> priority map.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::netlink::{self, Attr, MsgBuilder, NetlinkError, NlSocket};
use super::{DcbState, Reading, Unavailable, UnavailableReason};

const RTM_GETDCB: u16 = 78;
const DCB_CMD_IEEE_GET: u8 = 21;
const DCB_ATTR_IFNAME: u16 = 1;
const DCB_ATTR_IEEE: u16 = 13;
const DCB_ATTR_DCBX: u16 = 14;
const DCB_ATTR_IEEE_ETS: u16 = 1;
const DCB_ATTR_IEEE_PFC: u16 = 2;
const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
const DCB_ATTR_IEEE_MAXRATE: u16 = 7;
const DCB_ATTR_DCB_BUFFER: u16 = 10;
const DCB_ATTR_IEEE_APP: u16 = 1;
const DCB_ATTR_DCB_APP: u16 = 2;
/// `IEEE_8021QAZ_APP_SEL_DSCP`: protocol = DSCP 0..63.
pub const APP_SEL_DSCP: u8 = 5;

const IEEE_ETS_LEN: usize = 59;
const IEEE_PFC_LEN: usize = 136;
const DCB_APP_LEN: usize = 4;
const IEEE_MAXRATE_LEN: usize = 64;
const DCB_BUFFER_LEN: usize = 44;

#[derive(Debug, Error)]
pub enum DcbError {
    #[error("cannot open an rtnetlink socket")]
    Socket(#[source] NetlinkError),
    #[error("RTM_GETDCB DCB_CMD_IEEE_GET for {ifname} failed")]
    Request {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
}

/// `struct ieee_ets`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IeeeEts {
    pub willing: u8,
    pub ets_cap: u8,
    pub cbs: u8,
    /// Per-TC transmit bandwidth share, percent.
    pub tc_tx_bw: [u8; 8],
    pub tc_rx_bw: [u8; 8],
    /// Per-TC transmission selection algorithm (`IEEE_8021QAZ_TSA_*`: 0 strict, 1 CBS, 2 ETS,
    /// 255 vendor).
    pub tc_tsa: [u8; 8],
    /// Priority -> traffic class.
    pub prio_tc: [u8; 8],
    pub tc_reco_bw: [u8; 8],
    pub tc_reco_tsa: [u8; 8],
    pub reco_prio_tc: [u8; 8],
}

/// `struct ieee_pfc`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IeeePfc {
    pub pfc_cap: u8,
    /// Bit p set = PFC enabled on priority p.
    pub pfc_en: u8,
    pub mbc: u8,
    /// mlx5: the cable length (`mlx5e_dcbnl_ieee_getpfc`).
    pub delay: u16,
    /// PFC frames sent per priority (counters; mlx5 from cached pport stats).
    pub requests: [u64; 8],
    /// PFC frames received per priority (counters).
    pub indications: [u64; 8],
}

impl IeeePfc {
    /// Priorities with PFC enabled, ascending.
    pub fn enabled(&self) -> Vec<u8> {
        (0..8u8).filter(|p| self.pfc_en & (1 << p) != 0).collect()
    }
}

/// `struct dcb_app`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcbApp {
    /// 1 ethertype, 2 TCP/SCTP port, 3 UDP/DCCP port, 4 any, 5 DSCP, 255 PCP (`DCB_APP_SEL_PCP`).
    pub selector: u8,
    pub priority: u8,
    pub protocol: u16,
}

/// `struct dcbnl_buffer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcbBuffer {
    pub prio2buffer: [u8; 8],
    /// Bytes.
    pub buffer_size: [u32; 8],
    pub total_size: u32,
}

/// The IEEE DCB state of an interface. Fields the driver does not implement are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcbIeee {
    pub ets: Option<IeeeEts>,
    pub pfc: Option<IeeePfc>,
    /// kbit/s per TC.
    pub maxrate: Option<[u64; 8]>,
    pub app: Vec<DcbApp>,
    pub buffer: Option<DcbBuffer>,
    /// `DCB_CAP_DCBX_*` flags: 0x1 host, 0x2 LLD managed, 0x4 CEE, 0x8 IEEE, 0x10 static.
    pub dcbx: Option<u8>,
}

impl DcbIeee {
    /// True when the APP table holds DSCP entries (mlx5: port trust = DSCP).
    pub fn has_dscp_app(&self) -> bool {
        self.app.iter().any(|a| a.selector == APP_SEL_DSCP)
    }

    /// Priorities the APP table maps `dscp` to (usually one).
    pub fn dscp_priorities(&self, dscp: u8) -> Vec<u8> {
        let mut v: Vec<u8> = self
            .app
            .iter()
            .filter(|a| a.selector == APP_SEL_DSCP && a.protocol == dscp as u16)
            .map(|a| a.priority)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

fn arr8<T: Copy + Default>(f: impl Fn(usize) -> T) -> [T; 8] {
    let mut a = [T::default(); 8];
    for (i, x) in a.iter_mut().enumerate() {
        *x = f(i);
    }
    a
}

fn bytes8(b: &[u8], off: usize) -> [u8; 8] {
    arr8(|i| b[off + i])
}

pub fn decode_ets(b: &[u8]) -> IeeeEts {
    IeeeEts {
        willing: b[0],
        ets_cap: b[1],
        cbs: b[2],
        tc_tx_bw: bytes8(b, 3),
        tc_rx_bw: bytes8(b, 11),
        tc_tsa: bytes8(b, 19),
        prio_tc: bytes8(b, 27),
        tc_reco_bw: bytes8(b, 35),
        tc_reco_tsa: bytes8(b, 43),
        reco_prio_tc: bytes8(b, 51),
    }
}

/// `struct ieee_pfc`: u8 pfc_cap @0, pfc_en @1, mbc @2, u16 delay @4, u64 requests[8] @8,
/// u64 indications[8] @72 (natural C alignment).
pub fn decode_pfc(b: &[u8]) -> IeeePfc {
    IeeePfc {
        pfc_cap: b[0],
        pfc_en: b[1],
        mbc: b[2],
        delay: netlink::ne_u16(b, 4).unwrap_or(0),
        requests: arr8(|i| netlink::ne_u64(b, 8 + 8 * i).unwrap_or(0)),
        indications: arr8(|i| netlink::ne_u64(b, 72 + 8 * i).unwrap_or(0)),
    }
}

/// `struct dcbnl_buffer`: u8 prio2buffer[8] @0, u32 buffer_size[8] @8, u32 total_size @40.
pub fn decode_buffer(b: &[u8]) -> DcbBuffer {
    DcbBuffer {
        prio2buffer: bytes8(b, 0),
        buffer_size: arr8(|i| netlink::ne_u32(b, 8 + 4 * i).unwrap_or(0)),
        total_size: netlink::ne_u32(b, 40).unwrap_or(0),
    }
}

fn decode_app_table(a: &Attr<'_>, out: &mut Vec<DcbApp>) -> Result<(), NetlinkError> {
    for e in a.nested() {
        let e = e?;
        if e.kind != DCB_ATTR_IEEE_APP && e.kind != DCB_ATTR_DCB_APP {
            continue;
        }
        let b = e.structure("DCB_ATTR_IEEE_APP", DCB_APP_LEN)?;
        out.push(DcbApp {
            selector: b[0],
            priority: b[1],
            protocol: netlink::ne_u16(b, 2).unwrap_or(0),
        });
    }
    Ok(())
}

fn decode_ieee_nest(a: &Attr<'_>, d: &mut DcbIeee) -> Result<(), NetlinkError> {
    for x in a.nested() {
        let x = x?;
        match x.kind {
            DCB_ATTR_IEEE_ETS => {
                d.ets = Some(decode_ets(x.structure("DCB_ATTR_IEEE_ETS", IEEE_ETS_LEN)?))
            }
            DCB_ATTR_IEEE_PFC => {
                d.pfc = Some(decode_pfc(x.structure("DCB_ATTR_IEEE_PFC", IEEE_PFC_LEN)?))
            }
            DCB_ATTR_IEEE_APP_TABLE => decode_app_table(&x, &mut d.app)?,
            DCB_ATTR_IEEE_MAXRATE => {
                let b = x.structure("DCB_ATTR_IEEE_MAXRATE", IEEE_MAXRATE_LEN)?;
                d.maxrate = Some(arr8(|i| netlink::ne_u64(b, 8 * i).unwrap_or(0)));
            }
            DCB_ATTR_DCB_BUFFER => {
                d.buffer = Some(decode_buffer(
                    x.structure("DCB_ATTR_DCB_BUFFER", DCB_BUFFER_LEN)?,
                ))
            }
            _ => {} // QCN, peer tables, trust / rewrite tables
        }
    }
    Ok(())
}

/// Decodes the payload of an `RTM_GETDCB` reply to `DCB_CMD_IEEE_GET` (dcbmsg + attributes).
/// Offsets in errors count from the start of the payload.
pub fn decode_ieee_reply(payload: &[u8]) -> Result<DcbIeee, NetlinkError> {
    let body = payload.get(4..).ok_or_else(|| NetlinkError::Truncated {
        what: "struct dcbmsg".into(),
        offset: 0,
        need: 4,
        have: payload.len(),
    })?;
    let mut d = DcbIeee::default();
    for a in netlink::attrs(body, 4) {
        let a = a?;
        match a.kind {
            DCB_ATTR_IEEE => decode_ieee_nest(&a, &mut d)?,
            DCB_ATTR_DCBX => d.dcbx = Some(a.u8("DCB_ATTR_DCBX")?),
            _ => {}
        }
    }
    Ok(d)
}

/// Reads the IEEE DCB state of `ifname` over `sock` (an rtnetlink socket, see [`open`]).
pub fn read(sock: &mut NlSocket, ifname: &str) -> Result<DcbState, DcbError> {
    let seq = sock.next_seq();
    let b = MsgBuilder::new(RTM_GETDCB, netlink::NLM_F_REQUEST | netlink::NLM_F_ACK, seq)
        .header(&[libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0]);
    let mut b = b;
    b.attr_str(DCB_ATTR_IFNAME, ifname);
    let mut out = None;
    let r = sock.transact(&b.finish(), seq, |m| -> Result<(), NetlinkError> {
        if m.ty == RTM_GETDCB {
            out = Some(decode_ieee_reply(m.payload)?);
        }
        Ok(())
    });
    match r {
        Ok(()) => match out {
            Some(d) => Ok(Reading::Read(d)),
            None => Err(DcbError::Request {
                ifname: ifname.into(),
                source: NetlinkError::Unexpected("ACK without an RTM_GETDCB reply".into()),
            }),
        },
        Err(e) => classify(e, ifname),
    }
}

fn classify(e: NetlinkError, ifname: &str) -> Result<DcbState, DcbError> {
    let what = format!("DCB unavailable on {ifname}");
    let u = match e.errno() {
        Some(libc::EOPNOTSUPP) => Some(Unavailable::new(
            UnavailableReason::NotSupported,
            format!("{what}: the driver has no DCB support (no dcbnl_ops, EOPNOTSUPP)"),
        )),
        Some(libc::EINVAL) => Some(Unavailable::new(
            UnavailableReason::NotSupported,
            format!(
                "{what}: EINVAL (older kernels answer this for devices without DCB or outside the initial network namespace)"
            ),
        )),
        Some(n) => Unavailable::from_errno(n, &what),
        None => None,
    };
    match u {
        Some(u) => {
            tracing::debug!(ifname, reason = %u, "DCB unavailable");
            Ok(Reading::Unavailable(u))
        }
        None => Err(DcbError::Request {
            ifname: ifname.into(),
            source: e,
        }),
    }
}

/// Opens the rtnetlink socket used by [`read`].
pub fn open() -> Result<NlSocket, DcbError> {
    NlSocket::open(libc::NETLINK_ROUTE).map_err(DcbError::Socket)
}

#[cfg(test)]
mod tests {
    use super::super::testbytes::{nest, nla, nla_str};
    use super::*;

    /// `struct ieee_pfc` written field by field from the UAPI layout.
    fn pfc_bytes(pfc_en: u8, req3: u64, ind3: u64) -> Vec<u8> {
        let mut b = vec![0u8; 136];
        b[0] = 8; // pfc_cap
        b[1] = pfc_en;
        b[2] = 0; // mbc
        b[4..6].copy_from_slice(&7u16.to_ne_bytes()); // delay
        b[8 + 3 * 8..8 + 4 * 8].copy_from_slice(&req3.to_ne_bytes());
        b[72 + 3 * 8..72 + 4 * 8].copy_from_slice(&ind3.to_ne_bytes());
        b
    }

    fn ets_bytes() -> Vec<u8> {
        let mut b = vec![0u8; 59];
        b[1] = 8; // ets_cap
        b[3..11].copy_from_slice(&[10, 10, 10, 50, 10, 10, 0, 0]); // tc_tx_bw
        b[19..27].copy_from_slice(&[2, 2, 2, 2, 2, 2, 0, 0]); // tc_tsa
        b[27..35].copy_from_slice(&[0, 1, 2, 3, 4, 5, 6, 6]); // prio_tc
        b
    }

    fn app(sel: u8, prio: u8, proto: u16) -> Vec<u8> {
        let mut b = vec![sel, prio];
        b.extend_from_slice(&proto.to_ne_bytes());
        b
    }

    fn buffer_bytes() -> Vec<u8> {
        let mut b = vec![0u8; 44];
        b[0..8].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
        b[8..12].copy_from_slice(&130_944u32.to_ne_bytes());
        b[12..16].copy_from_slice(&130_944u32.to_ne_bytes());
        b[40..44].copy_from_slice(&524_288u32.to_ne_bytes());
        b
    }

    /// A reply payload as mlx5 would send it: PFC on prio 3, DSCP 26 -> 3 and 48 -> 6.
    fn mlx5_like_reply() -> Vec<u8> {
        let mut p = vec![0u8, 21, 0, 0]; // dcbmsg
        p.extend(nla_str(1, "ens1f0np0"));
        let table = nest(
            3,
            &[
                nla(1, &app(5, 3, 26)),
                nla(1, &app(5, 6, 48)),
                nla(2, &app(255, 3, 3)),
            ],
        );
        p.extend(nest(
            13,
            &[
                nla(1, &ets_bytes()),
                nla(2, &pfc_bytes(0x08, 11, 22)),
                nla(10, &buffer_bytes()),
                table,
            ],
        ));
        p.extend(nla(14, &[0x8 | 0x1]));
        p
    }

    #[test]
    fn decodes_byte_built_ieee_reply() {
        let d = decode_ieee_reply(&mlx5_like_reply()).unwrap();
        let pfc = d.pfc.as_ref().unwrap();
        assert_eq!(pfc.enabled(), vec![3]);
        assert_eq!((pfc.pfc_cap, pfc.delay), (8, 7));
        assert_eq!((pfc.requests[3], pfc.indications[3]), (11, 22));
        assert_eq!(pfc.requests[2], 0);
        let ets = d.ets.as_ref().unwrap();
        assert_eq!(ets.prio_tc, [0, 1, 2, 3, 4, 5, 6, 6]);
        assert_eq!(ets.tc_tx_bw[3], 50);
        assert_eq!(d.app.len(), 3);
        assert!(d.has_dscp_app());
        assert_eq!(d.dscp_priorities(26), vec![3]);
        assert_eq!(d.dscp_priorities(48), vec![6]);
        assert!(d.dscp_priorities(0).is_empty());
        assert_eq!(
            d.app[2],
            DcbApp {
                selector: 255,
                priority: 3,
                protocol: 3
            }
        );
        let buf = d.buffer.as_ref().unwrap();
        assert_eq!(
            (buf.prio2buffer[3], buf.buffer_size[1], buf.total_size),
            (1, 130_944, 524_288)
        );
        assert_eq!(d.dcbx, Some(9));
        assert!(d.maxrate.is_none());
    }

    #[test]
    fn truncated_and_malformed_replies() {
        let full = mlx5_like_reply();
        // cut in the middle of the IEEE nest: its length now exceeds the buffer
        let e = decode_ieee_reply(&full[..60]).unwrap_err();
        assert!(matches!(e, NetlinkError::Truncated { .. }), "{e}");
        assert!(decode_ieee_reply(&[0, 21]).is_err());
        // ieee_pfc shorter than the struct
        let mut p = vec![0u8, 21, 0, 0];
        p.extend(nest(13, &[nla(2, &pfc_bytes(8, 0, 0)[..100])]));
        let e = decode_ieee_reply(&p).unwrap_err();
        assert!(e.to_string().contains("DCB_ATTR_IEEE_PFC"), "{e}");
        assert!(matches!(
            e,
            NetlinkError::Truncated {
                need: 136,
                have: 100,
                ..
            }
        ));
        // a dcb_app of 2 bytes
        let mut p = vec![0u8, 21, 0, 0];
        p.extend(nest(13, &[nest(3, &[nla(1, &[5, 3])])]));
        let e = decode_ieee_reply(&p).unwrap_err();
        assert!(e.to_string().contains("DCB_ATTR_IEEE_APP"), "{e}");
        // DCBX of 4 bytes
        let mut p = vec![0u8, 21, 0, 0];
        p.extend(nla(14, &[1, 2, 3, 4]));
        assert!(decode_ieee_reply(&p).is_err());
        // an empty IEEE nest (driver with only getdcbx): everything None, no error
        let mut p = vec![0u8, 21, 0, 0];
        p.extend(nest(13, &[]));
        let d = decode_ieee_reply(&p).unwrap();
        assert!(d.pfc.is_none() && d.app.is_empty());
    }

    #[test]
    fn live_dcb_on_loopback_is_unavailable() {
        let mut s = match open() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rtnetlink unavailable: {e}");
                return;
            }
        };
        match read(&mut s, "lo").unwrap() {
            Reading::Unavailable(u) => {
                assert_eq!(u.reason, UnavailableReason::NotSupported, "{u}");
                assert!(u.detail.contains("DCB unavailable"));
            }
            Reading::Read(d) => panic!("lo has DCB? {d:?}"),
        }
        let r = read(&mut s, "nosuchif0").unwrap();
        assert!(r.reason().is_some());
    }
}
