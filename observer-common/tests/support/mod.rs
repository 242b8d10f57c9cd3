//! The host tests' frame descriptions, built by `observer_common::frames` (real checksums and
//! ICRC).
#![allow(dead_code)]

use observer_common::frames::{self, Bth, Eth, Icrc, MacControl, Mirror, Roce, Tag};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
pub const IP_A: [u8; 4] = [10, 77, 0, 1];
pub const IP_B: [u8; 4] = [10, 77, 0, 2];

/// BTH bytes (P_Key 0xffff, AckReq set).
pub fn bth(opcode: u8, dest_qp: u32, psn: u32) -> Vec<u8> {
    Bth {
        ack_req: true,
        ..Bth::new(opcode, dest_qp, psn)
    }
    .bytes()
    .to_vec()
}

/// Description of one RoCE (or other UDP) packet.
#[derive(Clone)]
pub struct Pkt {
    pub vlans: Vec<(u16, u8)>, // (TPID, PCP), outermost first
    pub v6: bool,
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub dscp: u8,
    pub ecn: u8,
    pub ip_options: Vec<u8>,
    pub more_fragments: bool,
    pub frag_offset: u16,
    pub sport: u16,
    pub dport: u16,
    /// UDP payload (BTH + rest), ICRC appended when `icrc`.
    pub payload: Vec<u8>,
    pub icrc: bool,
}

impl Pkt {
    pub fn roce(opcode: u8, qp: u32, psn: u32, extra: usize) -> Pkt {
        let mut payload = bth(opcode, qp, psn);
        payload.extend(std::iter::repeat_n(0x5a, extra));
        Pkt {
            vlans: vec![],
            v6: false,
            src: IP_A,
            dst: IP_B,
            dscp: 26,
            ecn: 2,
            ip_options: vec![],
            more_fragments: false,
            frag_offset: 0,
            sport: 49152,
            dport: 4791,
            payload,
            icrc: true,
        }
    }

    /// The frame, built by `observer_common::frames` (VLAN ids 100, 101, ...; IPv6 addresses
    /// fd00:77::`src`; IPv4 id 0x1234, DF unless a fragment; no padding).
    pub fn build(&self) -> Vec<u8> {
        let ip = if self.v6 {
            let v6 = |a: [u8; 4]| {
                let mut s = [0u8; 16];
                s[..4].copy_from_slice(&[0xfd, 0, 0, 0x77]);
                s[12..].copy_from_slice(&a);
                s
            };
            Roce::v6(v6(self.src), v6(self.dst))
        } else {
            Roce::v4(self.src, self.dst)
                .ip_options(&self.ip_options)
                .fragment(
                    !self.more_fragments && self.frag_offset == 0,
                    self.more_fragments,
                    self.frag_offset,
                )
                .ip_id(0x1234)
        };
        ip.macs(MAC_A, MAC_B)
            .tags(&tags(&self.vlans))
            .min_len(0)
            .mark(self.dscp, self.ecn)
            .ports(self.sport, self.dport)
            .no_bth()
            .payload_bytes(&self.payload)
            .icrc(if self.icrc {
                Icrc::Computed
            } else {
                Icrc::Absent
            })
            .build()
    }
}

fn tags(vlans: &[(u16, u8)]) -> Vec<Tag> {
    vlans
        .iter()
        .enumerate()
        .map(|(i, &(tpid, pcp))| Tag::new(tpid, pcp, 100 + i as u16))
        .collect()
}

/// Ethernet header (+ tags) with the given inner ethertype.
pub fn eth(out: &mut Vec<u8>, vlans: &[(u16, u8)], ether_type: u16) {
    let mut e = Eth::new(MAC_A, MAC_B);
    e.tags = tags(vlans);
    e.write_header(ether_type, out);
}

/// A PFC frame from MAC_A: class-enable vector and eight pause times.
pub fn pfc(class_enable: u16, times: [u16; 8]) -> Vec<u8> {
    MacControl::pfc(MAC_A, class_enable, times).build()
}

/// An 802.3x PAUSE frame.
pub fn pause(time: u16) -> Vec<u8> {
    MacControl::pause(MAC_A, time).build()
}

/// Wraps `inner` (an Ethernet frame) in outer Ethernet/IPv4/GRE with the given GRE flags,
/// protocol and ERSPAN header bytes.
pub fn gre_wrap(inner: &[u8], gre_flags: u16, proto: u16, extra: &[u8], erspan: &[u8]) -> Vec<u8> {
    let mut m = Mirror::gre(proto).outer(MAC_A, MAC_B, [192, 0, 2, 1], [192, 0, 2, 2]);
    m.eth.min_len = 0;
    m.gre_flags = gre_flags;
    m.gre_opt = extra.to_vec();
    m.erspan = erspan.to_vec();
    m.wrap(inner)
}

/// ERSPAN type II header (version 1), VLAN 100, session 7.
pub fn erspan2_hdr() -> Vec<u8> {
    frames::erspan2_header(100, 7, 0).to_vec()
}

/// ERSPAN type III header (version 2), VLAN 100, session 7, timestamp 1, with the optional
/// 8-byte platform subheader when `o`.
pub fn erspan3_hdr(o: bool) -> Vec<u8> {
    frames::erspan3_header(100, 7, 1, o.then_some([0; 8]))
}
