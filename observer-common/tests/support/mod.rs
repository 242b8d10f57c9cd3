//! Frame builders for the host tests (etherparse headers, real checksums and ICRC).
#![allow(dead_code)]

use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv4Options, Ipv6Header,
    SingleVlanHeader, UdpHeader, VlanId, VlanPcp,
};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
pub const IP_A: [u8; 4] = [10, 77, 0, 1];
pub const IP_B: [u8; 4] = [10, 77, 0, 2];

/// BTH bytes.
pub fn bth(opcode: u8, dest_qp: u32, psn: u32) -> Vec<u8> {
    let q = dest_qp.to_be_bytes();
    let p = psn.to_be_bytes();
    vec![
        opcode, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0x80, p[1], p[2], p[3],
    ]
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

    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut payload = self.payload.clone();
        let icrc_len = if self.icrc { 4 } else { 0 };
        let udp_len = (8 + payload.len() + icrc_len) as u16;
        let udp = UdpHeader {
            source_port: self.sport,
            destination_port: self.dport,
            length: udp_len,
            checksum: 0,
        };
        let mut ip = Vec::new();
        let (l3_type, l4_off);
        if self.v6 {
            l3_type = EtherType::IPV6;
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s[..4].copy_from_slice(&[0xfd, 0, 0, 0x77]);
            s[12..].copy_from_slice(&self.src);
            d[..4].copy_from_slice(&[0xfd, 0, 0, 0x77]);
            d[12..].copy_from_slice(&self.dst);
            let h = Ipv6Header {
                traffic_class: (self.dscp << 2) | self.ecn,
                flow_label: Default::default(),
                payload_length: udp_len,
                next_header: IpNumber::UDP,
                hop_limit: 64,
                source: s,
                destination: d,
            };
            h.write(&mut ip).unwrap();
            l4_off = 40;
        } else {
            l3_type = EtherType::IPV4;
            let mut h = Ipv4Header::new(udp_len, 64, IpNumber::UDP, self.src, self.dst).unwrap();
            h.dscp = IpDscp::try_new(self.dscp).unwrap();
            h.ecn = IpEcn::try_new(self.ecn).unwrap();
            h.options = Ipv4Options::try_from(&self.ip_options[..]).unwrap();
            h.set_payload_len(udp_len as usize).unwrap();
            h.more_fragments = self.more_fragments;
            h.dont_fragment = !self.more_fragments && self.frag_offset == 0;
            h.fragment_offset = self.frag_offset.try_into().unwrap();
            h.identification = 0x1234;
            h.header_checksum = h.calc_header_checksum();
            h.write(&mut ip).unwrap();
            l4_off = ip.len();
        }
        ip.extend_from_slice(&udp.to_bytes());
        ip.append(&mut payload);
        if self.icrc {
            let c = observer_common::icrc::compute(&ip, l4_off, self.v6);
            ip.extend_from_slice(&c.to_le_bytes());
        }
        eth(&mut out, &self.vlans, l3_type.0);
        out.extend_from_slice(&ip);
        out
    }
}

/// Ethernet header (+ tags) with the given inner ethertype.
pub fn eth(out: &mut Vec<u8>, vlans: &[(u16, u8)], ether_type: u16) {
    let first = vlans.first().map(|v| v.0).unwrap_or(ether_type);
    Ethernet2Header {
        source: MAC_A,
        destination: MAC_B,
        ether_type: EtherType(first),
    }
    .write(out)
    .unwrap();
    for (i, (_, pcp)) in vlans.iter().enumerate() {
        let next = vlans.get(i + 1).map(|v| v.0).unwrap_or(ether_type);
        SingleVlanHeader {
            pcp: VlanPcp::try_new(*pcp).unwrap(),
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(100 + i as u16).unwrap(),
            ether_type: EtherType(next),
        }
        .write(out)
        .unwrap();
    }
}

/// A PFC frame from MAC_A: class-enable vector and eight pause times.
pub fn pfc(class_enable: u16, times: [u16; 8]) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0x01];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x88, 0x08, 0x01, 0x01]);
    f.extend_from_slice(&class_enable.to_be_bytes());
    for t in times {
        f.extend_from_slice(&t.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

/// An 802.3x PAUSE frame.
pub fn pause(time: u16) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0x01];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x88, 0x08, 0x00, 0x01]);
    f.extend_from_slice(&time.to_be_bytes());
    f.resize(60, 0);
    f
}

/// Wraps `inner` (an Ethernet frame) in outer Ethernet/IPv4/GRE with the given GRE flags,
/// protocol and ERSPAN header bytes.
pub fn gre_wrap(inner: &[u8], gre_flags: u16, proto: u16, extra: &[u8], erspan: &[u8]) -> Vec<u8> {
    let mut gre = Vec::new();
    gre.extend_from_slice(&gre_flags.to_be_bytes());
    gre.extend_from_slice(&proto.to_be_bytes());
    gre.extend_from_slice(extra);
    gre.extend_from_slice(erspan);
    gre.extend_from_slice(inner);
    let mut h = Ipv4Header::new(
        gre.len() as u16,
        64,
        IpNumber::GRE,
        [192, 0, 2, 1],
        [192, 0, 2, 2],
    )
    .unwrap();
    h.dscp = IpDscp::try_new(0).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut out = Vec::new();
    eth(&mut out, &[], 0x0800);
    h.write(&mut out).unwrap();
    out.extend_from_slice(&gre);
    out
}

/// ERSPAN type II header (version 1) with a session id.
pub fn erspan2_hdr() -> Vec<u8> {
    vec![0x10, 0x64, 0x00, 0x07, 0, 0, 0, 0]
}

/// ERSPAN type III header (version 2), with the optional 8-byte platform subheader when `o`.
pub fn erspan3_hdr(o: bool) -> Vec<u8> {
    let mut h = vec![
        0x20,
        0x64,
        0x00,
        0x07,
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        if o { 1 } else { 0 },
    ];
    if o {
        h.extend_from_slice(&[0; 8]);
    }
    h
}
