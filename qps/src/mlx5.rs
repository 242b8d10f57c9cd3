//! mlx5's raw QP context (`rdma res show qp -r`, `RDMA_NLDEV_CMD_RES_QP_GET_RAW`): the
//! firmware's resource dump of one QP, which holds what the QP listing does not: the address
//! path it was set up with (traffic class, Ethernet priority, remote GID) and its last
//! acknowledged PSN.
//!
//! Layout (kernel `include/linux/mlx5/mlx5_ifc.h`, as of 6.12 and 7.2; big-endian, bit offsets
//! as the header's `reserved_at_XX` names count them):
//! - the dump (`drivers/infiniband/hw/mlx5/restrack.c`, `dump_rsc` of
//!   `MLX5_SGMT_TYPE_PRM_QUERY_QP`, up to 1,024 bytes copied as the firmware wrote them) is a
//!   sequence of segments, each starting with `resource_dump_segment_header` (`length_dw`
//!   16 bits, the whole segment's length in dwords, header included; `segment_type` 16 bits).
//!   Types `0xfff9..=0xffff` are the notice, command, terminate, error, reference, info and
//!   menu segments; a type up to `0xfeff` is a resource (data) segment,
//!   `resource_dump_resource_segment`: header, 4 reserved bytes, `index1` (the QP number),
//!   `index2`, then the payload from byte 16. Its type number comes from the firmware's menu
//!   (the kernel looks `PRM_QUERY_QP` up by name), so it is not fixed here.
//! - the payload is the QP in the PRM `QUERY_QP` format. Whether it starts with the command
//!   output's 24-byte header (`query_qp_out`: status, syndrome, `opt_param_mask`, `ece`, then
//!   `qpc` at byte 24) or at `qpc` itself is not documented publicly, so both are tried and the
//!   one whose state, service type and remote QP number agree with the QP listing
//!   (`RES_QP_GET`) is taken; when neither agrees the context is not used (never guessed).
//! - `qpc`: `state` bits 0x0-0x3 (`MLX5_QPC_STATE_*`), `st` 0x8 (`MLX5_QPC_ST_*`, RC = 0),
//!   `mtu` 0x40 (3 bits, `enum ib_mtu` values), `remote_qpn` 0xa8 (24 bits),
//!   `primary_address_path` at 0xc0 (`ads`, 44 bytes), `next_send_psn` 0x3c8,
//!   `last_acked_psn` 0x448, `next_rcv_psn` 0x4a8 (24 bits each).
//! - `ads`: `tclass` 0x64 (8 bits: the GRH traffic class, DSCP and ECN; `mlx5_set_path` copies
//!   the address vector's), `rgid_rip` 0x80 (16 bytes), `dscp` 0x10a, `eth_prio` 0x121
//!   (3 bits; the service level for RoCE), `sl` 0x124.

use serde::{Deserialize, Serialize};

use crate::inventory::SetUp;

/// What a raw context says of a QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mlx5Qp {
    /// The QP number (`index1` of the resource segment).
    pub qpn: u32,
    /// `MLX5_QPC_STATE_*`.
    pub state: u8,
    /// `MLX5_QPC_ST_*` (RC 0, UC 1, UD 2, ...).
    pub st: u8,
    pub mtu: u8,
    pub remote_qpn: u32,
    pub tclass: u8,
    pub eth_prio: u8,
    pub rgid: [u8; 16],
    pub next_send_psn: u32,
    pub last_acked_psn: u32,
    pub next_rcv_psn: u32,
    /// Where `qpc` started in the payload: 24 (after `query_qp_out`'s header) or 0.
    pub qpc_offset: u8,
}

/// Why a raw context was not used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RawError {
    #[error("raw QP context: {0}")]
    Malformed(String),
    #[error("raw QP context: the firmware reported error syndrome {syndrome:#x}: {text}")]
    Firmware { syndrome: u16, text: String },
    #[error("raw QP context: no resource segment for QP {0}")]
    NoResource(u32),
    #[error(
        "raw QP context of QP {qpn}: neither layout agrees with the QP listing (state, service type, remote QP)"
    )]
    Mismatch { qpn: u32 },
}

const SEG_ERROR: u16 = 0xfffc;
const SEG_TERMINATE: u16 = 0xfffb;
const SEG_DATA_MAX: u16 = 0xfeff;
/// Bytes of `qpc` needed up to `next_rcv_psn`.
const QPC_NEEDED: usize = 152;
/// `query_qp_out`'s header before `qpc`.
const QUERY_QP_OUT_HEADER: usize = 24;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The resource segment of QP `qpn` in a dump: its payload.
fn payload(dump: &[u8], qpn: u32) -> Result<&[u8], RawError> {
    let mut off = 0;
    // Segments are at least one dword each: at most len/4 of them.
    while off + 4 <= dump.len() {
        let len = usize::from(u16::from_be_bytes([dump[off], dump[off + 1]])) * 4;
        let ty = u16::from_be_bytes([dump[off + 2], dump[off + 3]]);
        if len == 0 {
            return Err(RawError::Malformed(format!(
                "a segment of length 0 at byte {off}"
            )));
        }
        let Some(seg) = dump.get(off..off + len) else {
            return Err(RawError::Malformed(format!(
                "segment type {ty:#x} at byte {off} runs past the end ({len} bytes, {} left)",
                dump.len() - off
            )));
        };
        match ty {
            SEG_ERROR => {
                let syndrome = if seg.len() >= 8 {
                    u16::from_be_bytes([seg[6], seg[7]])
                } else {
                    0
                };
                let text: String = seg
                    .get(16..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| {
                        if c.is_ascii_graphic() || c == b' ' {
                            c as char
                        } else {
                            '?'
                        }
                    })
                    .collect();
                return Err(RawError::Firmware { syndrome, text });
            }
            SEG_TERMINATE => break,
            t if t <= SEG_DATA_MAX && seg.len() >= 16 && be32(seg, 8) == qpn => {
                return Ok(&seg[16..]);
            }
            _ => {}
        }
        off += len;
    }
    Err(RawError::NoResource(qpn))
}

fn decode_at(p: &[u8], at: usize, qpn: u32) -> Option<Mlx5Qp> {
    let q = p.get(at..at + QPC_NEEDED)?;
    let ads = &q[24..68];
    let mut rgid = [0u8; 16];
    rgid.copy_from_slice(&ads[16..32]);
    Some(Mlx5Qp {
        qpn,
        state: q[0] >> 4,
        st: q[1],
        mtu: q[8] >> 5,
        remote_qpn: be32(q, 20) & 0xff_ffff,
        tclass: ((be32(ads, 12) >> 20) & 0xff) as u8,
        eth_prio: (ads[36] >> 4) & 7,
        rgid,
        next_send_psn: be32(q, 120) & 0xff_ffff,
        last_acked_psn: be32(q, 136) & 0xff_ffff,
        next_rcv_psn: be32(q, 148) & 0xff_ffff,
        qpc_offset: at as u8,
    })
}

/// `MLX5_QPC_STATE_*` as `enum ib_qp_state` (`to_ib_qp_state`); `None` for SUSPENDED and
/// unknown values.
pub fn ib_state(mlx5: u8) -> Option<u8> {
    Some(match mlx5 {
        0 => 0,     // RST -> RESET
        1 => 1,     // INIT
        2 => 2,     // RTR
        3 => 3,     // RTS
        4 => 5,     // SQER -> SQE
        5 | 7 => 4, // SQD, SQ_DRAINING -> SQD
        6 => 6,     // ERR
        _ => return None,
    })
}

/// `MLX5_QPC_ST_*` as `enum ib_qp_type` for the types a listing can show.
fn ib_type(st: u8) -> Option<u8> {
    Some(match st {
        0 => 2, // RC
        1 => 3, // UC
        2 => 4, // UD
        7 => 0, // QP0 -> SMI
        8 => 1, // QP1 -> GSI
        _ => return None,
    })
}

/// What the QP listing says of the QP, to check a raw context against.
#[derive(Clone, Copy, Debug, Default)]
pub struct Listed {
    pub state: Option<u8>,
    pub qp_type: Option<u8>,
    pub rqpn: Option<u32>,
}

fn agrees(m: &Mlx5Qp, l: &Listed) -> bool {
    let state = l.state.is_none_or(|s| ib_state(m.state) == Some(s));
    let ty = l.qp_type.is_none_or(|t| ib_type(m.st) == Some(t));
    let rqpn = l.rqpn.is_none_or(|r| m.remote_qpn == r);
    state && ty && rqpn
}

/// Decodes QP `qpn`'s raw context and checks it against its listing.
pub fn decode(dump: &[u8], qpn: u32, listed: &Listed) -> Result<Mlx5Qp, RawError> {
    let p = payload(dump, qpn)?;
    let mut any = false;
    // With query_qp_out's header first (its status byte 0), then qpc at the payload's start.
    for at in [QUERY_QP_OUT_HEADER, 0] {
        if at == QUERY_QP_OUT_HEADER && p.first().is_some_and(|&s| s != 0) {
            continue;
        }
        if let Some(m) = decode_at(p, at, qpn) {
            any = true;
            if agrees(&m, listed) {
                return Ok(m);
            }
        }
    }
    if !any {
        return Err(RawError::Malformed(format!(
            "the QP's payload is {} bytes, too short for a QP context",
            p.len()
        )));
    }
    Err(RawError::Mismatch { qpn })
}

impl Mlx5Qp {
    /// The address path as a set-up, for a connected QP (RC, UC) past INIT; `None` before it
    /// has one (a QP in RESET or INIT, or a datagram QP, whose path is per work request).
    pub fn set_up(&self) -> Option<SetUp> {
        let connected = matches!(self.st, 0 | 1);
        let has_path = matches!(ib_state(self.state), Some(2..=6));
        if !(connected && has_path) {
            return None;
        }
        Some(SetUp {
            traffic_class: self.tclass,
            sl: self.eth_prio,
            dgid: self.rgid,
            path_mtu: self.mtu,
            ..SetUp::default()
        })
    }

    /// Packets sent and not yet acknowledged: from the last acknowledged PSN to the next PSN
    /// to send, modulo 2^24.
    pub fn unacknowledged(&self) -> u32 {
        self.next_send_psn
            .wrapping_sub(self.last_acked_psn)
            .wrapping_sub(1)
            & 0xff_ffff
    }
}

/// Lays out a QP's raw context as mlx5 dumps it, from `mlx5_ifc.h` (tests, fuzz seeds): an info segment, the command
/// segment, the resource segment (type 0x4000 as one firmware's menu numbers
/// `PRM_QUERY_QP`) with `query_qp_out` (24-byte header + `qpc` + the rest, 272 bytes) or
/// `qpc` alone, and the terminate segment.
pub fn lay_out(q: &Mlx5Qp, with_header: bool) -> Vec<u8> {
    let mut qpc = vec![0u8; 232];
    qpc[0] = q.state << 4;
    qpc[1] = q.st;
    qpc[8] = q.mtu << 5;
    qpc[20..24].copy_from_slice(&(q.remote_qpn & 0xff_ffff).to_be_bytes());
    let ads = 24;
    qpc[ads + 12..ads + 16]
        .copy_from_slice(&((u32::from(q.tclass) << 20) | 0x1_2345).to_be_bytes());
    qpc[ads + 16..ads + 32].copy_from_slice(&q.rgid);
    qpc[ads + 33] = (q.tclass >> 2) & 0x3f;
    qpc[ads + 36] = (q.eth_prio << 4) | q.eth_prio;
    qpc[120..124].copy_from_slice(&q.next_send_psn.to_be_bytes());
    qpc[136..140].copy_from_slice(&q.last_acked_psn.to_be_bytes());
    qpc[148..152].copy_from_slice(&q.next_rcv_psn.to_be_bytes());
    let payload = if with_header {
        let mut p = vec![0u8; 24];
        p.extend(&qpc);
        p.extend([0u8; 16]);
        p
    } else {
        qpc
    };
    let seg = |ty: u16, body: &[u8]| {
        let mut v = (((4 + body.len()) / 4) as u16).to_be_bytes().to_vec();
        v.extend(ty.to_be_bytes());
        v.extend(body);
        v
    };
    let mut out = seg(0xfffe, &[0, 0, 0, 1, 0, 0, 0, 0, 0x10, 0x1c, 0, 0xd8]);
    let mut cmd = vec![0x40, 0, 0, 0];
    cmd.extend(q.qpn.to_be_bytes());
    cmd.extend([0u8; 4]);
    cmd.extend([0, 1, 0, 0]);
    out.extend(seg(0xfffa, &cmd));
    let mut res = vec![0u8; 4];
    res.extend(q.qpn.to_be_bytes());
    res.extend([0u8; 4]);
    res.extend(&payload);
    out.extend(seg(0x4000, &res));
    out.extend(seg(0xfffb, &[]));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    pub use super::lay_out as dump;
    use super::*;

    pub fn rts_rc(qpn: u32, rqpn: u32) -> Mlx5Qp {
        Mlx5Qp {
            qpn,
            state: 3,
            st: 0,
            mtu: 5,
            remote_qpn: rqpn,
            tclass: 106,
            eth_prio: 3,
            rgid: std::net::Ipv4Addr::new(10, 0, 4, 2)
                .to_ipv6_mapped()
                .octets(),
            next_send_psn: 0x100,
            last_acked_psn: 0xff,
            next_rcv_psn: 0x42,
            qpc_offset: 24,
        }
    }

    fn listed(rqpn: u32) -> Listed {
        Listed {
            state: Some(3),
            qp_type: Some(2),
            rqpn: Some(rqpn),
        }
    }

    #[test]
    fn decodes_both_layouts_and_checks_them_against_the_listing() {
        let q = rts_rc(0x1a2, 0x3b4);
        assert_eq!(decode(&dump(&q, true), 0x1a2, &listed(0x3b4)), Ok(q));
        let d = decode(&dump(&q, false), 0x1a2, &listed(0x3b4)).unwrap();
        assert_eq!(d, Mlx5Qp { qpc_offset: 0, ..q });
        let s = d.set_up().unwrap();
        assert_eq!((s.traffic_class, s.sl, s.path_mtu), (106, 3, 5));
        assert_eq!(s.dgid_ip().to_string(), "10.0.4.2");
        assert_eq!(d.unacknowledged(), 0);
        // A listing that disagrees (another remote QP): not used.
        assert_eq!(
            decode(&dump(&q, true), 0x1a2, &listed(0x999)),
            Err(RawError::Mismatch { qpn: 0x1a2 })
        );
        // Another QP's dump.
        assert_eq!(
            decode(&dump(&q, true), 0x1a3, &listed(0x3b4)),
            Err(RawError::NoResource(0x1a3))
        );
    }

    #[test]
    fn unacknowledged_wraps_and_paths_only_for_connected_qps_past_init() {
        let mut q = rts_rc(1, 2);
        q.next_send_psn = 5;
        q.last_acked_psn = 0xff_fffd;
        assert_eq!(q.unacknowledged(), 7);
        q.state = 1; // INIT
        assert_eq!(q.set_up(), None);
        q.state = 3;
        q.st = 2; // UD
        assert_eq!(q.set_up(), None);
        assert_eq!(ib_state(4), Some(5));
        assert_eq!(ib_state(7), Some(4));
        assert_eq!(ib_state(9), None);
    }

    #[test]
    fn bad_dumps_are_errors_never_panics() {
        let q = rts_rc(7, 8);
        let good = dump(&q, true);
        for cut in 0..good.len() {
            let _ = decode(&good[..cut], 7, &listed(8));
        }
        // A zero-length segment, and one running past the end.
        assert!(matches!(
            decode(&[0, 0, 0xff, 0xfe], 7, &listed(8)),
            Err(RawError::Malformed(_))
        ));
        assert!(matches!(
            decode(&[0, 9, 0x40, 0, 0, 0], 7, &listed(8)),
            Err(RawError::Malformed(_))
        ));
        // An error segment: its syndrome and text.
        let mut e = vec![0, 12, 0xff, 0xfc, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0];
        e.extend(b"no such QP\0");
        e.resize(48, 0);
        assert_eq!(
            decode(&e, 7, &listed(8)),
            Err(RawError::Firmware {
                syndrome: 0x1234,
                text: "no such QP".into()
            })
        );
        // A resource segment too short for a QP context.
        let mut short = vec![0, 6, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0];
        short.extend([0u8; 8]);
        assert!(matches!(
            decode(&short, 7, &listed(8)),
            Err(RawError::Malformed(m)) if m.contains("too short")
        ));
    }
}
