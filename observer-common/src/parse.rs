//! Frame classification, exactly as `metrics.md` "Frame classification" defines it: the first
//! rule that matches decides. Bounded (at most [`MAX_VLAN_TAGS`] tags, [`MAX_IPV6_EXT`] IPv6
//! extension headers, one level of mirror encapsulation), no recursion, every read through
//! [`Bytes::load`], so the same function passes the eBPF verifier and runs on the host.

use crate::cursor::Bytes;

pub const ETH_HLEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Pre-standard QinQ S-tag, still emitted by some switches.
pub const ETHERTYPE_QINQ_9100: u16 = 0x9100;
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
pub const MAC_CONTROL_PAUSE: u16 = 0x0001;
pub const MAC_CONTROL_PFC: u16 = 0x0101;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_GRE: u8 = 47;
pub const ROCEV2_PORT: u16 = 4791;
pub const GRE_PROTO_TEB: u16 = 0x6558;
pub const GRE_PROTO_ERSPAN: u16 = 0x88be;
pub const GRE_PROTO_ERSPAN3: u16 = 0x22eb;
pub const BTH_LEN: usize = 12;
pub const AETH_LEN: usize = 4;
/// RDMA Extended Transport Header: VA (8), R_Key (4), DMA length (4).
pub const RETH_LEN: usize = 16;
/// RC RDMA READ request, whose RETH's DMA length says how many PSNs it consumes (metrics.md
/// "RDMA READ requests").
pub const OPCODE_RC_READ_REQUEST: u8 = 0x0c;
pub const UDP_HLEN: usize = 8;
pub const MAX_VLAN_TAGS: usize = 4;
pub const MAX_IPV6_EXT: usize = 4;
/// `pcp` of an untagged frame.
pub const PCP_NONE: u8 = 8;

/// What a frame is ([`Frame::kind`]).
pub mod kind {
    /// RoCEv2: UDP destination port 4791 with a complete BTH.
    pub const ROCE: u8 = 0;
    /// Ethertype 0x8808: PFC, 802.3x PAUSE or another MAC control opcode.
    pub const MAC_CONTROL: u8 = 1;
    /// Excluded for the reason in [`Frame::reason`](super::Frame::reason).
    pub const EXCLUDED: u8 = 2;
    /// Anything else: counted, not kept.
    pub const NOT_ROCE: u8 = 3;
}

/// Exclusion reasons ([`Frame::reason`] when `kind == EXCLUDED`).
pub mod reason {
    /// Frame shorter than 14 bytes (a mirrored frame: by the outer IP length).
    pub const RUNT: u8 = 0;
    /// IPv4 with IHL under 5 words (or a version field that does not match the ethertype, or a
    /// total length shorter than the header).
    pub const BAD_IP_HEADER: u8 = 1;
    /// IPv4 fragment (MF set or offset > 0), the first fragment included; IPv6 fragment header
    /// with MF or an offset.
    pub const IP_FRAGMENT: u8 = 2;
    /// UDP destination 4791 whose payload (by the UDP length field) is under 12 bytes, or
    /// whose capture ends inside the BTH.
    pub const SHORT_BTH: u8 = 3;
    /// UDP source port 4791 with another destination port: not RoCEv2 by destination.
    pub const UDP_SRC_PORT_ONLY: u8 = 4;
    /// The capture ends inside a VLAN tag, IP, UDP, GRE/ERSPAN, mirrored Ethernet or MAC control
    /// header.
    pub const TRUNCATED: u8 = 5;
    pub const COUNT: usize = 6;
    /// Stable names, used in logs, Parquet columns and alerts.
    pub const NAMES: [&str; COUNT] = [
        "runt",
        "bad_ip_header",
        "ip_fragment",
        "short_bth",
        "udp_src_port_only",
        "truncated",
    ];
}

/// Mirror encapsulation a frame arrived in ([`Frame::encap`]).
pub mod encap {
    pub const NONE: u8 = 0;
    /// GRE protocol 0x6558, transparent Ethernet bridging.
    pub const GRE_TEB: u8 = 1;
    /// GRE protocol 0x88BE without a sequence number: ERSPAN type I (no ERSPAN header).
    pub const ERSPAN1: u8 = 2;
    /// GRE protocol 0x88BE with an 8-byte ERSPAN type II header.
    pub const ERSPAN2: u8 = 3;
    /// GRE protocol 0x22EB with a 12-byte ERSPAN type III header (+8 with the platform
    /// subheader).
    pub const ERSPAN3: u8 = 4;
    pub const COUNT: usize = 5;
    pub const NAMES: [&str; COUNT] = ["none", "gre_teb", "erspan1", "erspan2", "erspan3"];
}

/// InfiniBand Base Transport Header, raw fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    /// Byte 1: SE(7) M(6) PadCnt(5:4) TVer(3:0).
    pub flags: u8,
    pub pkey: u16,
    /// Byte 4: FECN(7) BECN(6) reserved.
    pub fecn_becn: u8,
    /// Byte 8 bit 7.
    pub ack_req: u8,
    pub _pad: [u8; 2],
    /// 24-bit destination QP.
    pub dest_qp: u32,
    /// 24-bit PSN.
    pub psn: u32,
}

impl Bth {
    #[inline(always)]
    pub fn tver(&self) -> u8 {
        self.flags & 0x0f
    }
    #[inline(always)]
    pub fn becn(&self) -> bool {
        self.fecn_becn & 0x40 != 0
    }
}

/// MAC control (ethertype 0x8808) fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MacControl {
    pub opcode: u16,
    /// PFC class-enable vector (bit p = priority p); 0 for PAUSE.
    pub class_enable: u16,
    /// PFC: pause time per priority, in quanta. PAUSE: `times[0]` is the pause time.
    pub times: [u16; 8],
    pub src_mac: [u8; 6],
    pub _pad: [u8; 2],
}

/// Result of [`classify`]. Raw integers, not enums: it is built on the eBPF stack.
/// 8-aligned, so the addresses (offset 24) are copied into the QP key as 64-bit words.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// One of [`kind`].
    pub kind: u8,
    /// One of [`reason`] when `kind == kind::EXCLUDED`.
    pub reason: u8,
    /// One of [`encap`].
    pub encap: u8,
    /// Outermost tag's PCP of the (inner, when mirrored) frame, [`PCP_NONE`] when untagged.
    pub pcp: u8,
    /// 4 or 6 when an IP header was parsed, else 0.
    pub ip_version: u8,
    pub dscp: u8,
    pub ecn: u8,
    /// 1 when `aeth` holds an AETH (opcode carries one and it was captured).
    pub has_aeth: u8,
    /// Offset of the (inner) Ethernet header: L2 bytes = wire length - `l2_off`.
    pub l2_off: u16,
    pub ip_off: u16,
    pub udp_off: u16,
    pub bth_off: u16,
    pub udp_sport: u16,
    /// UDP length - 8 (by the UDP length field, not the capture).
    pub udp_payload_len: u16,
    /// IPv4 total length, or IPv6 payload length + 40.
    pub ip_len: u32,
    /// IPv6, or IPv4-mapped IPv6 (`::ffff:a.b.c.d`).
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub bth: Bth,
    /// AETH: syndrome in bits 31:24, MSN in 23:0.
    pub aeth: u32,
    pub mac_ctrl: MacControl,
    /// RC RDMA READ request ([`OPCODE_RC_READ_REQUEST`]) only: the RETH's DMA length, when
    /// `has_reth`.
    pub dma_len: u32,
    /// 1 when `dma_len` holds a READ request's DMA length (its RETH was captured).
    pub has_reth: u8,
    pub _pad: [u8; 3],
}

// The address fields are 8-aligned (Frame is align(8)): they are written and read as words.
const _: () = assert!(core::mem::offset_of!(Frame, src_ip) % 8 == 0);
const _: () = assert!(core::mem::offset_of!(Frame, dst_ip) % 8 == 0);

impl Frame {
    /// Sets the addresses to IPv4-mapped IPv6 (`::ffff:a.b.c.d`), as two 64-bit stores each:
    /// byte stores followed by the per-QP key's 64-bit loads stalled store-to-load forwarding
    /// (measured in the eBPF datapath).
    #[inline(always)]
    pub fn set_mapped_ipv4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        let hi = |a: [u8; 4]| u64::from_ne_bytes([0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3]]);
        // SAFETY: both fields are 16 bytes at 8-aligned offsets of an 8-aligned struct
        // (asserted above), so two aligned u64 writes each stay inside them.
        unsafe {
            let s = self.src_ip.as_mut_ptr() as *mut u64;
            s.write(0);
            s.add(1).write(hi(src));
            let d = self.dst_ip.as_mut_ptr() as *mut u64;
            d.write(0);
            d.add(1).write(hi(dst));
        }
    }

    /// The addresses as four 64-bit words (source low, high, destination low, high; native
    /// byte order, as [`crate::table::hash`] reads a key).
    #[inline(always)]
    pub fn addr_words(&self) -> [u64; 4] {
        // SAFETY: as in `set_mapped_ipv4`: aligned u64 reads inside the two fields.
        unsafe {
            let s = self.src_ip.as_ptr() as *const u64;
            let d = self.dst_ip.as_ptr() as *const u64;
            [s.read(), s.add(1).read(), d.read(), d.add(1).read()]
        }
    }
}

impl Default for Frame {
    fn default() -> Self {
        Frame {
            kind: kind::NOT_ROCE,
            reason: 0,
            encap: encap::NONE,
            pcp: PCP_NONE,
            ip_version: 0,
            dscp: 0,
            ecn: 0,
            has_aeth: 0,
            l2_off: 0,
            ip_off: 0,
            udp_off: 0,
            bth_off: 0,
            udp_sport: 0,
            udp_payload_len: 0,
            ip_len: 0,
            src_ip: [0; 16],
            dst_ip: [0; 16],
            bth: Bth::default(),
            aeth: 0,
            mac_ctrl: MacControl::default(),
            dma_len: 0,
            has_reth: 0,
            _pad: [0; 3],
        }
    }
}

impl Frame {
    #[inline(always)]
    fn exclude(&mut self, r: u8) {
        self.kind = kind::EXCLUDED;
        self.reason = r;
    }
    #[inline(always)]
    pub fn aeth_syndrome(&self) -> u8 {
        (self.aeth >> 24) as u8
    }
    #[inline(always)]
    pub fn is_roce(&self) -> bool {
        self.kind == kind::ROCE
    }
}

/// Whether `opcode` carries an AETH right after the BTH (RC ACK, ATOMIC ACK, RDMA READ
/// RESPONSE FIRST/LAST/ONLY).
#[inline(always)]
pub fn opcode_has_aeth(opcode: u8) -> bool {
    matches!(opcode, 0x0d | 0x0f | 0x10 | 0x11 | 0x12)
}

#[inline(always)]
fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

/// Skips stacked 802.1Q / 802.1ad tags. Returns (ethertype, L3 offset, outermost PCP).
#[inline(always)]
fn ethernet<B: Bytes + ?Sized>(b: &B, off: usize) -> Result<(u16, usize, u8), u8> {
    let Some(et) = b.load::<2>(off + 12) else {
        return Err(reason::RUNT);
    };
    let mut et = be16(et);
    let mut cur = off + ETH_HLEN;
    let mut pcp = PCP_NONE;
    for _ in 0..MAX_VLAN_TAGS {
        if et != ETHERTYPE_VLAN && et != ETHERTYPE_QINQ && et != ETHERTYPE_QINQ_9100 {
            break;
        }
        let Some(tag) = b.load::<4>(cur) else {
            return Err(reason::TRUNCATED);
        };
        if pcp == PCP_NONE {
            pcp = tag[0] >> 5;
        }
        et = be16([tag[2], tag[3]]);
        cur += 4;
    }
    Ok((et, cur, pcp))
}

/// IP layer facts needed further on.
struct L3 {
    proto: u8,
    l4_off: usize,
}

#[inline(always)]
fn ipv4<B: Bytes + ?Sized>(b: &B, off: usize, f: &mut Frame) -> Result<L3, u8> {
    let Some(h) = b.load::<20>(off) else {
        return Err(reason::TRUNCATED);
    };
    let ihl = ((h[0] & 0x0f) as usize) * 4;
    let total = be16([h[2], h[3]]);
    if h[0] >> 4 != 4 || ihl < 20 || (total as usize) < ihl {
        return Err(reason::BAD_IP_HEADER);
    }
    let frag = be16([h[6], h[7]]);
    if frag & 0x2000 != 0 || frag & 0x1fff != 0 {
        return Err(reason::IP_FRAGMENT);
    }
    f.ip_version = 4;
    f.ip_off = off as u16;
    f.dscp = h[1] >> 2;
    f.ecn = h[1] & 3;
    f.ip_len = total as u32;
    f.set_mapped_ipv4([h[12], h[13], h[14], h[15]], [h[16], h[17], h[18], h[19]]);
    Ok(L3 {
        proto: h[9],
        l4_off: off + ihl,
    })
}

#[inline(always)]
fn ipv6<B: Bytes + ?Sized>(b: &B, off: usize, f: &mut Frame) -> Result<L3, u8> {
    let Some(h) = b.load::<40>(off) else {
        return Err(reason::TRUNCATED);
    };
    if h[0] >> 4 != 6 {
        return Err(reason::BAD_IP_HEADER);
    }
    let tclass = (h[0] << 4) | (h[1] >> 4);
    f.ip_version = 6;
    f.ip_off = off as u16;
    f.dscp = tclass >> 2;
    f.ecn = tclass & 3;
    f.ip_len = be16([h[4], h[5]]) as u32 + 40;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&h[8..24]);
    dst.copy_from_slice(&h[24..40]);
    f.src_ip = src;
    f.dst_ip = dst;
    let mut next = h[6];
    let mut cur = off + 40;
    for _ in 0..MAX_IPV6_EXT {
        match next {
            // Hop-by-hop, routing, destination options: (len + 1) * 8 bytes.
            0 | 43 | 60 => {
                let Some(e) = b.load::<2>(cur) else {
                    return Err(reason::TRUNCATED);
                };
                next = e[0];
                cur += (e[1] as usize + 1) * 8;
            }
            // Fragment header: an atomic fragment (offset 0, no M) is parsed past.
            44 => {
                let Some(e) = b.load::<4>(cur) else {
                    return Err(reason::TRUNCATED);
                };
                if be16([e[2], e[3]]) & 0xfff9 != 0 {
                    return Err(reason::IP_FRAGMENT);
                }
                next = e[0];
                cur += 8;
            }
            // Authentication header: (len + 2) * 4 bytes.
            51 => {
                let Some(e) = b.load::<2>(cur) else {
                    return Err(reason::TRUNCATED);
                };
                next = e[0];
                cur += (e[1] as usize + 2) * 4;
            }
            _ => break,
        }
    }
    Ok(L3 {
        proto: next,
        l4_off: cur,
    })
}

/// GRE (RFC 2784/2890) and ERSPAN: returns (inner Ethernet offset, encap kind), or `None` when
/// this GRE packet carries no mirrored Ethernet.
#[inline(always)]
fn gre<B: Bytes + ?Sized>(b: &B, off: usize) -> Result<Option<(usize, u8)>, u8> {
    let Some(h) = b.load::<4>(off) else {
        return Err(reason::TRUNCATED);
    };
    let flags = be16([h[0], h[1]]);
    // Version 0 only, no source routing (R bit).
    if flags & 0x0007 != 0 || flags & 0x4000 != 0 {
        return Ok(None);
    }
    let proto = be16([h[2], h[3]]);
    let seq = flags & 0x1000 != 0;
    let mut hdr = 4;
    if flags & 0x8000 != 0 {
        hdr += 4;
    }
    if flags & 0x2000 != 0 {
        hdr += 4;
    }
    if seq {
        hdr += 4;
    }
    let cur = off + hdr;
    match proto {
        GRE_PROTO_TEB => Ok(Some((cur, encap::GRE_TEB))),
        GRE_PROTO_ERSPAN if !seq => Ok(Some((cur, encap::ERSPAN1))),
        GRE_PROTO_ERSPAN => {
            let Some(e) = b.load::<8>(cur) else {
                return Err(reason::TRUNCATED);
            };
            if e[0] >> 4 != 1 {
                return Ok(None);
            }
            Ok(Some((cur + 8, encap::ERSPAN2)))
        }
        GRE_PROTO_ERSPAN3 => {
            let Some(e) = b.load::<12>(cur) else {
                return Err(reason::TRUNCATED);
            };
            if e[0] >> 4 != 2 {
                return Ok(None);
            }
            let sub = if e[11] & 1 != 0 { 8 } else { 0 };
            Ok(Some((cur + 12 + sub, encap::ERSPAN3)))
        }
        _ => Ok(None),
    }
}

#[inline(always)]
fn mac_control<B: Bytes + ?Sized>(b: &B, l2: usize, off: usize, f: &mut Frame) {
    let Some(op) = b.load::<2>(off) else {
        f.exclude(reason::TRUNCATED);
        return;
    };
    let Some(src) = b.load::<6>(l2 + 6) else {
        f.exclude(reason::TRUNCATED);
        return;
    };
    f.kind = kind::MAC_CONTROL;
    f.mac_ctrl.src_mac = src;
    let op = be16(op);
    f.mac_ctrl.opcode = op;
    if op == MAC_CONTROL_PFC {
        let Some(p) = b.load::<18>(off + 2) else {
            f.exclude(reason::TRUNCATED);
            return;
        };
        f.mac_ctrl.class_enable = be16([p[0], p[1]]);
        let mut i = 0;
        while i < 8 {
            f.mac_ctrl.times[i] = be16([p[2 + 2 * i], p[3 + 2 * i]]);
            i += 1;
        }
    } else if op == MAC_CONTROL_PAUSE {
        let Some(p) = b.load::<2>(off + 2) else {
            f.exclude(reason::TRUNCATED);
            return;
        };
        f.mac_ctrl.times[0] = be16(p);
    }
}

#[inline(always)]
fn udp<B: Bytes + ?Sized>(b: &B, off: usize, f: &mut Frame) {
    let Some(h) = b.load::<8>(off) else {
        f.exclude(reason::TRUNCATED);
        return;
    };
    let sport = be16([h[0], h[1]]);
    let dport = be16([h[2], h[3]]);
    if dport != ROCEV2_PORT {
        if sport == ROCEV2_PORT {
            f.exclude(reason::UDP_SRC_PORT_ONLY);
            return;
        }
        f.kind = kind::NOT_ROCE;
        return;
    }
    let ulen = be16([h[4], h[5]]) as usize;
    f.udp_off = off as u16;
    f.udp_sport = sport;
    f.udp_payload_len = ulen.saturating_sub(UDP_HLEN) as u16;
    if ulen < UDP_HLEN + BTH_LEN {
        f.exclude(reason::SHORT_BTH);
        return;
    }
    let bth_off = off + UDP_HLEN;
    let Some(t) = b.load::<12>(bth_off) else {
        f.exclude(reason::SHORT_BTH);
        return;
    };
    f.kind = kind::ROCE;
    f.bth_off = bth_off as u16;
    f.bth = Bth {
        opcode: t[0],
        flags: t[1],
        pkey: be16([t[2], t[3]]),
        fecn_becn: t[4],
        ack_req: t[8] >> 7,
        _pad: [0; 2],
        dest_qp: u32::from_be_bytes([0, t[5], t[6], t[7]]),
        psn: u32::from_be_bytes([0, t[9], t[10], t[11]]),
    };
    if opcode_has_aeth(t[0])
        && ulen >= UDP_HLEN + BTH_LEN + AETH_LEN
        && let Some(a) = b.load::<4>(bth_off + BTH_LEN)
    {
        f.has_aeth = 1;
        f.aeth = u32::from_be_bytes(a);
    }
    // a READ request's DMA length: the RETH's last 4 bytes, after the VA and R_Key
    if t[0] == OPCODE_RC_READ_REQUEST
        && ulen >= UDP_HLEN + BTH_LEN + RETH_LEN
        && let Some(l) = b.load::<4>(bth_off + BTH_LEN + 12)
    {
        f.has_reth = 1;
        f.dma_len = u32::from_be_bytes(l);
    }
}

/// Classifies one captured frame. `b` holds the captured bytes starting at the Ethernet
/// header. Never fails: every outcome is a [`Frame`] whose `kind` says what it is.
#[inline(always)]
pub fn classify<B: Bytes + ?Sized>(b: &B) -> Frame {
    let mut f = Frame::default();
    classify_into(b, &mut f);
    f
}

/// [`classify`] into a caller-provided [`Frame`] (the eBPF programs keep it in a per-CPU map:
/// a `Frame` returned by value would be copied on the 512-byte BPF stack). `f` is overwritten.
#[inline(always)]
pub fn classify_into<B: Bytes + ?Sized>(b: &B, f: &mut Frame) {
    *f = Frame::default();
    if b.len() < ETH_HLEN {
        f.exclude(reason::RUNT);
        return;
    }
    let mut l2 = 0usize;
    // Outer frame, then at most one mirrored inner frame.
    for depth in 0..2 {
        let (et, l3, pcp) = match ethernet(b, l2) {
            Ok(v) => v,
            Err(r) => {
                f.exclude(r);
                return;
            }
        };
        f.pcp = pcp;
        f.l2_off = l2 as u16;
        let l3r = match et {
            ETHERTYPE_MAC_CONTROL => {
                mac_control(b, l2, l3, f);
                return;
            }
            ETHERTYPE_IPV4 => ipv4(b, l3, f),
            ETHERTYPE_IPV6 => ipv6(b, l3, f),
            _ => return,
        };
        let l3r = match l3r {
            Ok(v) => v,
            Err(r) => {
                f.exclude(r);
                return;
            }
        };
        match l3r.proto {
            IPPROTO_UDP => {
                udp(b, l3r.l4_off, f);
                return;
            }
            IPPROTO_GRE if depth == 0 => match gre(b, l3r.l4_off) {
                Ok(Some((inner, e))) => {
                    // The mirrored frame ends where the outer IP packet ends.
                    let ip_end = f.ip_off as usize + f.ip_len as usize;
                    // A mirrored frame starts over: its own tags, IP, UDP.
                    *f = Frame::default();
                    f.encap = e;
                    if ip_end < inner + ETH_HLEN {
                        // The outer packet says the mirrored frame is shorter than 14 bytes.
                        f.exclude(reason::RUNT);
                        return;
                    }
                    if b.len() < inner + ETH_HLEN {
                        // The capture ends inside the mirrored Ethernet header.
                        f.exclude(reason::TRUNCATED);
                        return;
                    }
                    l2 = inner;
                }
                Ok(None) => return,
                Err(r) => {
                    f.exclude(r);
                    return;
                }
            },
            _ => return,
        }
    }
}
