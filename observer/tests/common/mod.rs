//! Shared by the eBPF tests: frames built with etherparse (RoCEv2 over IPv4/IPv6 with VLAN
//! tags, PFC and PAUSE, GRE/ERSPAN mirror encapsulation) and the kernel-vs-userspace comparison.
#![allow(dead_code)]

use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options,
    Ipv6FlowLabel, Ipv6Header, SingleVlanHeader, UdpHeader, VlanId, VlanPcp,
};
use observer::sources::Snapshot;
use observer_common::maps::{Event, QpKey, QpValue};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
pub const IP_A: [u8; 4] = [10, 77, 0, 1];
pub const IP_B: [u8; 4] = [10, 77, 0, 2];

/// A VLAN tag: (TPID, PCP, VID).
pub type Tag = (u16, u8, u16);

/// One RoCEv2 packet to build.
#[derive(Clone, Debug)]
pub struct Roce {
    pub src4: [u8; 4],
    pub dst4: [u8; 4],
    /// IPv6 addresses instead of IPv4 when set.
    pub v6: Option<([u8; 16], [u8; 16])>,
    pub tags: Vec<Tag>,
    pub dscp: u8,
    pub ecn: u8,
    pub sport: u16,
    pub dport: u16,
    pub opcode: u8,
    /// BTH byte 1 (SE, M, PadCnt, TVer).
    pub flags: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub aeth: Option<u32>,
    /// Bytes after the BTH (and AETH), ICRC included.
    pub payload: usize,
    /// IPv4 options bytes (multiple of 4, at most 40).
    pub options: usize,
    pub more_fragments: bool,
    pub frag_offset: u16,
}

impl Default for Roce {
    fn default() -> Self {
        Roce {
            src4: IP_A,
            dst4: IP_B,
            v6: None,
            tags: Vec::new(),
            dscp: 26,
            ecn: 2,
            sport: 49152,
            dport: 4791,
            opcode: 0x04, // RC SEND ONLY
            flags: 0,
            dest_qp: 0x11,
            psn: 100,
            aeth: None,
            payload: 64 + 4,
            options: 0,
            more_fragments: false,
            frag_offset: 0,
        }
    }
}

impl Roce {
    pub fn data(psn: u32) -> Roce {
        Roce {
            psn,
            ..Roce::default()
        }
    }

    /// UDP payload: BTH, optional AETH, payload bytes.
    pub fn udp_payload(&self) -> Vec<u8> {
        let mut p = vec![
            self.opcode,
            self.flags,
            0xff,
            0xff,
            0,
            (self.dest_qp >> 16) as u8,
            (self.dest_qp >> 8) as u8,
            self.dest_qp as u8,
            0x80,
            (self.psn >> 16) as u8,
            (self.psn >> 8) as u8,
            self.psn as u8,
        ];
        if let Some(a) = self.aeth {
            p.extend_from_slice(&a.to_be_bytes());
        }
        p.extend((0..self.payload).map(|i| i as u8));
        p
    }

    /// The whole Ethernet frame.
    pub fn build(&self) -> Vec<u8> {
        let payload = self.udp_payload();
        let udp = UdpHeader::without_ipv4_checksum(self.sport, self.dport, payload.len()).unwrap();
        let mut l3 = Vec::new();
        let et = if let Some((s, d)) = self.v6 {
            let h = Ipv6Header {
                traffic_class: (self.dscp << 2) | self.ecn,
                flow_label: Ipv6FlowLabel::try_new(0).unwrap(),
                payload_length: (8 + payload.len()) as u16,
                next_header: IpNumber::UDP,
                hop_limit: 64,
                source: s,
                destination: d,
            };
            h.write(&mut l3).unwrap();
            EtherType::IPV6
        } else {
            let mut h = Ipv4Header::new(
                (8 + payload.len()) as u16,
                64,
                IpNumber::UDP,
                self.src4,
                self.dst4,
            )
            .unwrap();
            h.dscp = IpDscp::try_new(self.dscp).unwrap();
            h.ecn = IpEcn::try_new(self.ecn).unwrap();
            h.more_fragments = self.more_fragments;
            h.fragment_offset = IpFragOffset::try_new(self.frag_offset).unwrap();
            if self.options > 0 {
                let opts: Vec<u8> = vec![1; self.options]; // NOP options
                h.options = Ipv4Options::try_from(&opts[..]).unwrap();
                h.set_payload_len(8 + payload.len()).unwrap();
            }
            h.header_checksum = h.calc_header_checksum();
            h.write(&mut l3).unwrap();
            EtherType::IPV4
        };
        udp.write(&mut l3).unwrap();
        l3.extend_from_slice(&payload);
        ethernet(MAC_A, MAC_B, &self.tags, et, &l3)
    }
}

/// Ethernet header, stacked tags (outermost first), then `payload`; padded to 60 bytes.
pub fn ethernet(
    src: [u8; 6],
    dst: [u8; 6],
    tags: &[Tag],
    et: EtherType,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    let first = tags.first().map(|t| EtherType(t.0)).unwrap_or(et);
    Ethernet2Header {
        source: src,
        destination: dst,
        ether_type: first,
    }
    .write(&mut f)
    .unwrap();
    for (i, &(_, pcp, vid)) in tags.iter().enumerate() {
        let next = tags.get(i + 1).map(|t| EtherType(t.0)).unwrap_or(et);
        SingleVlanHeader {
            pcp: VlanPcp::try_new(pcp).unwrap(),
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(vid).unwrap(),
            ether_type: next,
        }
        .write(&mut f)
        .unwrap();
    }
    f.extend_from_slice(payload);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// A PFC frame (802.1Qbb): class-enable vector and 8 pause times.
pub fn pfc(src: [u8; 6], tags: &[Tag], enable: u16, times: [u16; 8]) -> Vec<u8> {
    let mut p = vec![0x01, 0x01];
    p.extend_from_slice(&enable.to_be_bytes());
    for t in times {
        p.extend_from_slice(&t.to_be_bytes());
    }
    ethernet(
        src,
        [0x01, 0x80, 0xc2, 0, 0, 0x01],
        tags,
        EtherType(0x8808),
        &p,
    )
}

/// An 802.3x PAUSE frame.
pub fn pause(src: [u8; 6], time: u16) -> Vec<u8> {
    let mut p = vec![0x00, 0x01];
    p.extend_from_slice(&time.to_be_bytes());
    ethernet(
        src,
        [0x01, 0x80, 0xc2, 0, 0, 0x01],
        &[],
        EtherType(0x8808),
        &p,
    )
}

/// Mirror encapsulations.
#[derive(Clone, Copy, Debug)]
pub enum Mirror {
    GreTeb,
    Erspan2,
    Erspan3,
}

/// `inner` mirrored inside outer Ethernet/IPv4/GRE (and ERSPAN II / III headers).
pub fn mirrored(m: Mirror, inner: &[u8]) -> Vec<u8> {
    let mut gre_payload = Vec::new();
    match m {
        Mirror::GreTeb => {
            gre_payload.extend_from_slice(&[0x00, 0x00, 0x65, 0x58]);
        }
        Mirror::Erspan2 => {
            // GRE with the sequence number bit, protocol 0x88be, sequence 7.
            gre_payload.extend_from_slice(&[0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 7]);
            // ERSPAN II: version 1, VLAN 0, COS/En/T, session 1, index 0.
            gre_payload.extend_from_slice(&[0x10, 0x00, 0x00, 0x01, 0, 0, 0, 0]);
        }
        Mirror::Erspan3 => {
            gre_payload.extend_from_slice(&[0x10, 0x00, 0x22, 0xeb, 0, 0, 0, 9]);
            // ERSPAN III: version 2, ..., timestamp, SGT, flags (O bit clear: no subheader).
            gre_payload.extend_from_slice(&[0x20, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
        }
    }
    gre_payload.extend_from_slice(inner);
    let mut h = Ipv4Header::new(
        gre_payload.len() as u16,
        64,
        IpNumber::GRE,
        [10, 77, 9, 1],
        [10, 77, 9, 2],
    )
    .unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut l3 = Vec::new();
    h.write(&mut l3).unwrap();
    l3.extend_from_slice(&gre_payload);
    ethernet(
        [0x02, 0, 0, 0, 9, 1],
        [0x02, 0, 0, 0, 9, 2],
        &[],
        EtherType::IPV4,
        &l3,
    )
}

/// A snapshot with what legitimately differs between the kernel and userspace taken out:
/// times (monotonic clock vs the given times), ICRC verdicts (replay only), `dropped`
/// (drop-after-observe happens only in the kernel); sorted.
pub fn normalized(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    s.iface = String::new();
    s.time_ns = 0;
    s.link_speed_bps = None;
    for (_, v) in s.qps.iter_mut() {
        v.first_ns = 0;
        v.last_ns = 0;
        v.icrc_ok = 0;
        v.icrc_bad = 0;
        v.icrc_unverifiable = 0;
    }
    for st in s.iface_stats.iter_mut() {
        st.dropped = 0;
    }
    s.qps.sort_by_key(|(k, _)| *k);
    s.macs.sort_by_key(|(k, _)| *k);
    s
}

/// Asserts the two snapshots agree field by field (after [`normalized`]).
pub fn assert_same(case: &str, kernel: &Snapshot, user: &Snapshot) {
    let (k, u) = (normalized(kernel), normalized(user));
    assert_eq!(
        k.iface_stats, u.iface_stats,
        "{case}: per-interface counters differ"
    );
    assert_eq!(k.macs, u.macs, "{case}: per-MAC PFC counters differ");
    let kk: Vec<QpKey> = k.qps.iter().map(|(k, _)| *k).collect();
    let uk: Vec<QpKey> = u.qps.iter().map(|(k, _)| *k).collect();
    assert_eq!(kk, uk, "{case}: QP keys differ");
    for ((key, kv), (_, uv)) in k.qps.iter().zip(u.qps.iter()) {
        assert_eq!(kv, uv, "{case}: QP {key:?} differs");
    }
}

/// Events with their times zeroed, for comparison.
pub fn untimed(ev: &[Event]) -> Vec<Event> {
    ev.iter().map(|e| Event { ts_ns: 0, ..*e }).collect()
}

/// The one QP value of a snapshot (panics naming the case otherwise).
pub fn only_qp(case: &str, s: &Snapshot) -> (QpKey, QpValue) {
    assert_eq!(
        s.qps.len(),
        1,
        "{case}: expected exactly one QP, got {:?}",
        s.qps.len()
    );
    s.qps[0]
}

/// IPv4-mapped IPv6, as the QP key holds IPv4 addresses.
pub fn mapped(ip: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
    ]
}
