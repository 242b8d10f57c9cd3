//! RoCEv2 frames as the lab's emulated NICs put them on the wire: Ethernet [/ 802.1Q] / IPv4 /
//! UDP 4791 /
//! BTH [/ RETH | AETH | CNP reserved bytes] / payload / ICRC, and the parse of the frames they
//! receive. Built by `observer_common::frames`; parsed with etherparse's header types and
//! checked with `observer_common::icrc`: the lab's own parse (not the observer's
//! `parse::classify`), so the ground truth is independent.

use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, UdpHeader};
use observer_common::{frames, icrc};

pub const ROCE_PORT: u16 = 4791;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;
const ETH_LEN: usize = 14;
const UDP_LEN: usize = 8;

/// RC and CNP opcodes the lab uses.
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_ONLY: u8 = 0x04;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const ACK: u8 = 0x11;
    pub const CNP: u8 = 0x81;

    /// Whether `o` carries a RETH (RDMA WRITE FIRST / ONLY).
    pub fn has_reth(o: u8) -> bool {
        o == WRITE_FIRST || o == WRITE_ONLY
    }
    /// Whether `o` starts a SEND (consumes a receive WQE).
    pub fn starts_send(o: u8) -> bool {
        o == SEND_FIRST || o == SEND_ONLY
    }
    /// Whether `o` ends a message.
    pub fn ends_message(o: u8) -> bool {
        matches!(o, SEND_LAST | SEND_ONLY | WRITE_LAST | WRITE_ONLY)
    }
}

/// AETH syndromes.
pub mod syndrome {
    /// ACK with an unlimited credit count (0b000_11111).
    pub const ACK: u8 = 0x1f;
    /// RNR NAK, bits 6:5 = 01, timer field 5 bits (0x0e = 1.28 ms in the IBA table).
    pub const RNR_NAK: u8 = 0x20 | 0x0e;
    /// NAK, PSN sequence error.
    pub const NAK_PSN_SEQ_ERR: u8 = 0x60;
    pub fn kind(s: u8) -> u8 {
        (s >> 5) & 3
    }
}

pub const PSN_MASK: u32 = 0x00ff_ffff;

/// Signed distance `a - b` between two 24-bit PSNs, in [-2^23, 2^23).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// L2/L3 addressing and marking of one frame.
#[derive(Clone, Copy, Debug)]
pub struct Addr {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub udp_sport: u16,
    pub dscp: u8,
    pub ecn: u8,
    pub ip_id: u16,
    /// An 802.1Q tag: (PCP, VLAN id); `None`: untagged.
    pub tag: Option<(u8, u16)>,
}

/// The BTH fields the lab sets.
#[derive(Clone, Copy, Debug, Default)]
pub struct BthFields {
    pub opcode: u8,
    pub solicited: bool,
    pub pad: u8,
    pub pkey: u16,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
}

/// A complete frame (built by `observer_common::frames`): headers, `ext` (RETH/AETH/CNP
/// reserved bytes), `payload_len` bytes of payload (a pattern derived from the PSN), padding to
/// 4 bytes, and the ICRC. IPv4 with DF, UDP checksum 0 (RoCEv2 NICs send 0: the ICRC protects
/// the payload).
pub fn frame(a: &Addr, bth: &BthFields, ext: &[u8], payload_len: usize) -> Vec<u8> {
    let b = frames::Bth {
        opcode: bth.opcode,
        se: bth.solicited,
        pad: bth.pad,
        pkey: bth.pkey,
        becn: bth.becn,
        dest_qp: bth.dest_qp & 0xff_ffff,
        ack_req: bth.ack_req,
        psn: bth.psn & PSN_MASK,
        ..frames::Bth::default()
    };
    let mut r = frames::Roce::v4(a.src_ip, a.dst_ip);
    if let Some((pcp, vid)) = a.tag {
        r = r.tag(frames::Tag::dot1q(pcp & 7, vid & 0xfff));
    }
    r.macs(a.src_mac, a.dst_mac)
        .min_len(0)
        .mark(a.dscp & 0x3f, a.ecn & 3)
        .ip_id(a.ip_id)
        .ports(a.udp_sport, ROCE_PORT)
        .bth(b)
        .ext(ext)
        .payload_pattern(payload_len, bth.psn as u8, 1)
        .pad_to_4()
        .build()
}

pub use observer_common::frames::{aeth, reth};

/// A received RoCEv2 frame, as the lab's NICs read it.
#[derive(Clone, Copy, Debug)]
pub struct Rx {
    pub src_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub dscp: u8,
    pub ecn: u8,
    /// The 802.1Q tag's priority; `None`: untagged.
    pub pcp: Option<u8>,
    pub udp_sport: u16,
    pub opcode: u8,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    /// AETH syndrome and MSN (ACK opcode only).
    pub syndrome: u8,
    pub msn: u32,
    pub icrc_ok: bool,
}

/// Parses an IPv4 RoCEv2 frame, untagged or with one 802.1Q tag; `None` for anything else.
pub fn parse(f: &[u8]) -> Option<Rx> {
    let (eth, rest) = Ethernet2Header::from_slice(f).ok()?;
    let (ether_type, pcp, rest, ip_start) = if eth.ether_type == EtherType::VLAN_TAGGED_FRAME {
        let tag = rest.get(..4)?;
        let inner = EtherType(u16::from_be_bytes([tag[2], tag[3]]));
        (inner, Some(tag[0] >> 5), &rest[4..], ETH_LEN + 4)
    } else {
        (eth.ether_type, None, rest, ETH_LEN)
    };
    if ether_type != EtherType::IPV4 {
        return None;
    }
    let (ip, rest) = Ipv4Header::from_slice(rest).ok()?;
    if ip.protocol != IpNumber::UDP || ip.more_fragments || ip.fragment_offset.value() != 0 {
        return None;
    }
    let ihl = ip.header_len();
    let (udp, _) = UdpHeader::from_slice(rest).ok()?;
    if udp.destination_port != ROCE_PORT {
        return None;
    }
    let udp_payload_len = (udp.length as usize).checked_sub(UDP_LEN)?;
    let pl = ip_start + ihl + UDP_LEN;
    if udp_payload_len < BTH_LEN + ICRC_LEN || f.len() < pl + udp_payload_len {
        return None;
    }
    let b = &f[pl..pl + udp_payload_len];
    let (syndrome, msn) = if b[0] == op::ACK && b.len() >= BTH_LEN + AETH_LEN + ICRC_LEN {
        (
            b[BTH_LEN],
            u32::from_be_bytes([0, b[BTH_LEN + 1], b[BTH_LEN + 2], b[BTH_LEN + 3]]),
        )
    } else {
        (0, 0)
    };
    let end = pl + udp_payload_len;
    let stored = u32::from_le_bytes([f[end - 4], f[end - 3], f[end - 2], f[end - 1]]);
    let icrc_ok = icrc::compute(&f[ip_start..end - 4], ihl, false) == stored;
    Some(Rx {
        src_mac: eth.source,
        src_ip: ip.source,
        dst_ip: ip.destination,
        dscp: ip.dscp.value(),
        ecn: ip.ecn.value(),
        pcp,
        udp_sport: udp.source_port,
        opcode: b[0],
        becn: b[4] & 0x40 != 0,
        dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        ack_req: b[8] & 0x80 != 0,
        psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        syndrome,
        msn,
        icrc_ok,
    })
}

/// An 802.1Qbb PFC frame: class-enable vector and eight pause times (quanta).
pub fn pfc_frame(src_mac: [u8; 6], class_enable: u8, times: [u16; 8]) -> Vec<u8> {
    frames::MacControl::pfc(src_mac, class_enable as u16, times).build()
}

/// An 802.3x PAUSE frame with one pause time (quanta).
pub fn pause_frame(src_mac: [u8; 6], quanta: u16) -> Vec<u8> {
    frames::MacControl::pause(src_mac, quanta).build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::parse::{classify, kind};

    fn addr() -> Addr {
        Addr {
            src_mac: [2, 0x77, 0, 0, 0, 1],
            dst_mac: [2, 0x77, 0, 0, 0, 2],
            src_ip: [10, 77, 0, 1],
            dst_ip: [10, 77, 0, 2],
            udp_sport: 49153,
            dscp: 26,
            ecn: 2,
            ip_id: 7,
            tag: None,
        }
    }

    #[test]
    fn write_first_round_trips_with_valid_icrc_and_the_shared_parser_agrees() {
        let b = BthFields {
            opcode: op::WRITE_FIRST,
            pkey: 0xffff,
            dest_qp: 0x000201,
            psn: 0xfffffe,
            ack_req: false,
            ..Default::default()
        };
        let f = frame(&addr(), &b, &reth(0x1000, 0x42, 9000), 4095);
        let rx = parse(&f).expect("parses");
        assert!(rx.icrc_ok);
        assert_eq!(
            (rx.opcode, rx.dest_qp, rx.psn, rx.dscp, rx.ecn),
            (0x06, 0x201, 0xfffffe, 26, 2)
        );
        let c = classify(f.as_slice());
        assert_eq!(c.kind, kind::ROCE);
        assert_eq!(
            (c.bth.dest_qp, c.bth.psn, c.dscp, c.ecn),
            (0x201, 0xfffffe, 26, 2)
        );
        assert_eq!(
            observer_common::icrc::verify(&f, &c),
            observer_common::icrc::Verdict::Ok
        );
        // One flipped payload bit breaks the ICRC; a changed TOS (a switch re-marking) does not.
        let mut bad = f.clone();
        bad[70] ^= 1;
        assert!(!parse(&bad).unwrap().icrc_ok);
        let mut remarked = f.clone();
        remarked[15] = 0x03;
        assert!(parse(&remarked).unwrap().icrc_ok);
    }

    /// A tagged frame: the lab's parse and the shared parser read the same PCP, the ICRC
    /// (which does not cover the Ethernet header) still holds, and a switch's new priority in
    /// the tag leaves it valid.
    #[test]
    fn tagged_frames_round_trip() {
        let mut a = addr();
        a.tag = Some((3, 100));
        let b = BthFields {
            opcode: op::SEND_ONLY,
            dest_qp: 0x201,
            psn: 9,
            ..Default::default()
        };
        let f = frame(&a, &b, &[], 64);
        assert_eq!(&f[12..16], &[0x81, 0x00, 0x60, 0x64]);
        let rx = parse(&f).unwrap();
        assert_eq!(
            (rx.pcp, rx.dest_qp, rx.psn, rx.icrc_ok),
            (Some(3), 0x201, 9, true)
        );
        let c = classify(f.as_slice());
        assert_eq!((c.kind, c.pcp, c.bth.psn), (kind::ROCE, 3, 9));
        let mut remarked = f.clone();
        remarked[14] &= 0x1f;
        let rx = parse(&remarked).unwrap();
        assert_eq!((rx.pcp, rx.icrc_ok), (Some(0), true));
        assert_eq!(parse(&frame(&addr(), &b, &[], 64)).unwrap().pcp, None);
    }

    #[test]
    fn ack_and_nak_carry_the_aeth() {
        let b = BthFields {
            opcode: op::ACK,
            dest_qp: 0x101,
            psn: 5,
            ..Default::default()
        };
        let f = frame(&addr(), &b, &aeth(syndrome::NAK_PSN_SEQ_ERR, 3), 0);
        let rx = parse(&f).unwrap();
        assert_eq!((rx.syndrome, rx.msn, rx.psn), (0x60, 3, 5));
        assert_eq!(classify(f.as_slice()).aeth >> 24, 0x60);
    }

    #[test]
    fn psn_arithmetic_wraps() {
        assert_eq!(psn_diff(0, 0xffffff), 1);
        assert_eq!(psn_diff(0xffffff, 0), -1);
        assert_eq!(psn_add(0xffffff, 2), 1);
    }

    #[test]
    fn pfc_frame_is_parsed_by_the_shared_parser() {
        let f = pfc_frame([2, 0x77, 0, 0, 0, 9], 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
        let c = classify(f.as_slice());
        assert_eq!(c.kind, kind::MAC_CONTROL);
        assert_eq!(c.mac_ctrl.class_enable, 8);
        assert_eq!(c.mac_ctrl.times[3], 0xffff);
        let p = classify(pause_frame([2, 0x77, 0, 0, 0, 9], 100).as_slice());
        assert_eq!((p.mac_ctrl.opcode, p.mac_ctrl.times[0]), (1, 100));
    }
}
