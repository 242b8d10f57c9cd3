//! Shared by the eBPF tests: frame descriptions built by `observer_common::frames` (RoCEv2 over
//! IPv4/IPv6 with VLAN tags, PFC and PAUSE, GRE/ERSPAN mirror encapsulation) and the
//! kernel-vs-userspace comparison.
#![allow(dead_code)]

use etherparse::EtherType;
use observer::sources::Snapshot;
use observer_common::frames;
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

    /// The whole Ethernet frame, built by `observer_common::frames`: from MAC_A to MAC_B,
    /// padded to 60 bytes; IPv4 id 0 with DF; IPv6 flow label 0; BTH P_Key 0xffff, AckReq set;
    /// payload bytes 0, 1, 2, ... with no ICRC computed (the payload includes its 4 bytes).
    pub fn build(&self) -> Vec<u8> {
        let r = match self.v6 {
            Some((s, d)) => frames::Roce::v6(s, d),
            None => {
                let r = frames::Roce::v4(self.src4, self.dst4).fragment(
                    true,
                    self.more_fragments,
                    self.frag_offset,
                );
                r.ip_options(&vec![1; self.options]) // NOP options
            }
        };
        let mut bth = frames::Bth::new(self.opcode, self.dest_qp, self.psn);
        bth.set_flags(self.flags);
        bth.ack_req = true;
        let mut r = r
            .macs(MAC_A, MAC_B)
            .tags(&tags(&self.tags))
            .mark(self.dscp, self.ecn)
            .ports(self.sport, self.dport)
            .bth(bth)
            .payload_pattern(self.payload, 0, 1)
            .icrc(frames::Icrc::Absent);
        if let Some(a) = self.aeth {
            r = r.ext(&a.to_be_bytes());
        }
        r.build()
    }
}

/// An RC RDMA READ request (0x0c) of `len` bytes at `psn`, on the key of `Roce::data` (IP_A to
/// IP_B, QP 0x11): BTH, RETH and 4 bytes of ICRC space.
pub fn read_request(psn: u32, len: u32) -> Vec<u8> {
    let mut bth = frames::Bth::new(0x0c, 0x11, psn);
    bth.ack_req = true;
    frames::Roce::v4(IP_A, IP_B)
        .fragment(true, false, 0)
        .macs(MAC_A, MAC_B)
        .mark(26, 2)
        .ports(49152, 4791)
        .bth(bth)
        .reth(0x1000, 0x1234, len)
        .payload_pattern(4, 0, 1)
        .icrc(frames::Icrc::Absent)
        .build()
}

fn tags(tags: &[Tag]) -> Vec<frames::Tag> {
    tags.iter()
        .map(|&(tpid, pcp, vid)| frames::Tag::new(tpid, pcp, vid))
        .collect()
}

/// Ethernet header, stacked tags (outermost first), then `payload`; padded to 60 bytes.
pub fn ethernet(
    src: [u8; 6],
    dst: [u8; 6],
    tags_: &[Tag],
    et: EtherType,
    payload: &[u8],
) -> Vec<u8> {
    let mut e = frames::Eth::new(src, dst);
    e.tags = tags(tags_);
    e.frame(et.0, payload)
}

/// A PFC frame (802.1Qbb): class-enable vector and 8 pause times.
pub fn pfc(src: [u8; 6], tags_: &[Tag], enable: u16, times: [u16; 8]) -> Vec<u8> {
    let mut m = frames::MacControl::pfc(src, enable, times);
    m.eth.tags = tags(tags_);
    m.build()
}

/// An 802.3x PAUSE frame.
pub fn pause(src: [u8; 6], time: u16) -> Vec<u8> {
    frames::MacControl::pause(src, time).build()
}

/// Mirror encapsulations.
#[derive(Clone, Copy, Debug)]
pub enum Mirror {
    GreTeb,
    Erspan2,
    Erspan3,
}

/// `inner` mirrored inside outer Ethernet/IPv4/GRE (and ERSPAN II / III headers): from
/// 02:00:00:00:09:01 / 10.77.9.1 to 02:00:00:00:09:02 / 10.77.9.2; ERSPAN II with GRE sequence
/// 7, session 1; ERSPAN III with sequence 9, session 1, no platform subheader.
pub fn mirrored(m: Mirror, inner: &[u8]) -> Vec<u8> {
    match m {
        Mirror::GreTeb => frames::Mirror::gre_teb(),
        Mirror::Erspan2 => frames::Mirror::erspan2(7, frames::erspan2_header(0, 1, 0)),
        Mirror::Erspan3 => frames::Mirror::erspan3(9, &frames::erspan3_header(0, 1, 0, None)),
    }
    .wrap(inner)
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
