//! The one frame builder of the tests, the benchmarks, the synthetic source and the lab
//! (feature `frames`; userspace only, never compiled into the eBPF object).
//!
//! - [`Roce`]: Ethernet (MACs, stacked VLAN tags [`Tag`]) / IPv4 ([`Ipv4`]: DSCP, ECN, TTL, id,
//!   DF/MF, fragment offset, options, header checksum) or IPv6 ([`Ipv6`]: traffic class, flow
//!   label, extension headers) / UDP ([`Udp`]) / BTH ([`Bth`]) / extension header bytes (RETH
//!   [`reth`], AETH [`aeth`], anything else) / payload ([`Payload`]) / ICRC ([`Icrc`]: computed
//!   with [`crate::icrc`], deliberately wrong, given, or absent); padding to a minimum length
//!   and truncation. Without a BTH it is a plain UDP frame.
//! - [`MacControl`]: 802.1Qbb PFC (class-enable vector, eight pause times) and 802.3x PAUSE.
//! - [`Mirror`]: an inner frame wrapped in Ethernet / IPv4 / GRE (TEB, ERSPAN I, II, III).
//!
//! Every field is public and every default is written down here, so a frame's bytes follow
//! from its description; the chaining methods are shorthand for setting fields.

use alloc::vec::Vec;

use crate::icrc;

pub const ROCE_PORT: u16 = 4791;
/// The Ethernet minimum frame length without the FCS.
pub const ETH_MIN_LEN: usize = 60;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// 802.1Q C-tag and 802.1ad S-tag TPIDs.
pub const TPID_8021Q: u16 = 0x8100;
pub const TPID_8021AD: u16 = 0x88a8;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_GRE: u8 = 47;
/// The MAC control destination address (01:80:C2:00:00:01).
pub const MAC_CONTROL_DST: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0x01];
/// MAC control opcodes.
pub const PAUSE_OPCODE: u16 = 0x0001;
pub const PFC_OPCODE: u16 = 0x0101;
/// GRE protocols: transparent Ethernet bridging, ERSPAN I/II, ERSPAN III.
pub const GRE_PROTO_TEB: u16 = 0x6558;
pub const GRE_PROTO_ERSPAN2: u16 = 0x88be;
pub const GRE_PROTO_ERSPAN3: u16 = 0x22eb;
/// GRE flag bits: checksum, key and sequence number present.
pub const GRE_C: u16 = 0x8000;
pub const GRE_K: u16 = 0x2000;
pub const GRE_S: u16 = 0x1000;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;

/// One VLAN tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub tpid: u16,
    /// Priority (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id (12 bits).
    pub vid: u16,
}

impl Tag {
    pub const fn new(tpid: u16, pcp: u8, vid: u16) -> Tag {
        Tag {
            tpid,
            pcp,
            dei: false,
            vid,
        }
    }
    /// An 802.1Q C-tag (TPID 0x8100).
    pub const fn dot1q(pcp: u8, vid: u16) -> Tag {
        Tag::new(TPID_8021Q, pcp, vid)
    }
    /// An 802.1ad S-tag (TPID 0x88a8).
    pub const fn dot1ad(pcp: u8, vid: u16) -> Tag {
        Tag::new(TPID_8021AD, pcp, vid)
    }
    fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

/// The Ethernet header: addresses, tags (outermost first) and the minimum frame length the
/// frame is zero-padded to (0: no padding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eth {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub tags: Vec<Tag>,
    pub min_len: usize,
}

impl Eth {
    /// Untagged, padded to [`ETH_MIN_LEN`].
    pub fn new(src: [u8; 6], dst: [u8; 6]) -> Eth {
        Eth {
            dst,
            src,
            tags: Vec::new(),
            min_len: ETH_MIN_LEN,
        }
    }
    pub fn header_len(&self) -> usize {
        14 + 4 * self.tags.len()
    }
    /// Destination, source, each tag (TPID, TCI), then `ethertype`.
    pub fn write_header(&self, ethertype: u16, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst);
        out.extend_from_slice(&self.src);
        for t in &self.tags {
            out.extend_from_slice(&t.tpid.to_be_bytes());
            out.extend_from_slice(&t.tci().to_be_bytes());
        }
        out.extend_from_slice(&ethertype.to_be_bytes());
    }
    /// Header, `payload`, zero padding to `min_len`.
    pub fn frame(&self, ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(self.header_len() + payload.len().max(self.min_len));
        self.write_header(ethertype, &mut f);
        f.extend_from_slice(payload);
        self.pad(&mut f);
        f
    }
    fn pad(&self, f: &mut Vec<u8>) {
        if f.len() < self.min_len {
            f.resize(self.min_len, 0);
        }
    }
}

/// An IPv4 header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub dscp: u8,
    pub ecn: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    /// In 8-byte units (13 bits).
    pub frag_offset: u16,
    pub ttl: u8,
    pub protocol: u8,
    /// Option bytes, zero-padded to a multiple of 4 (at most 40).
    pub options: Vec<u8>,
    /// Total length; `None`: header + payload.
    pub total_len: Option<u16>,
    /// Header checksum; `None`: computed.
    pub checksum: Option<u16>,
}

impl Ipv4 {
    /// DSCP 0, ECN 0, id 0, DF, TTL 64, no options, lengths and checksum computed.
    pub fn new(src: [u8; 4], dst: [u8; 4], protocol: u8) -> Ipv4 {
        Ipv4 {
            src,
            dst,
            dscp: 0,
            ecn: 0,
            id: 0,
            df: true,
            mf: false,
            frag_offset: 0,
            ttl: 64,
            protocol,
            options: Vec::new(),
            total_len: None,
            checksum: None,
        }
    }
    pub fn header_len(&self) -> usize {
        20 + self.options.len().div_ceil(4) * 4
    }
    /// Writes the header for `payload_len` bytes of payload; returns the header length.
    pub fn write(&self, payload_len: usize, out: &mut Vec<u8>) -> usize {
        let hl = self.header_len();
        let start = out.len();
        let total = self.total_len.unwrap_or((hl + payload_len) as u16);
        let frag =
            ((self.df as u16) << 14) | ((self.mf as u16) << 13) | (self.frag_offset & 0x1fff);
        out.push(0x40 | (hl / 4) as u8);
        out.push((self.dscp << 2) | (self.ecn & 3));
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&frag.to_be_bytes());
        out.extend_from_slice(&[self.ttl, self.protocol, 0, 0]);
        out.extend_from_slice(&self.src);
        out.extend_from_slice(&self.dst);
        out.extend_from_slice(&self.options);
        out.resize(start + hl, 0);
        let ck = self
            .checksum
            .unwrap_or_else(|| ipv4_checksum(&out[start..start + hl]));
        out[start + 10..start + 12].copy_from_slice(&ck.to_be_bytes());
        hl
    }
}

/// The IPv4 header checksum of `h` (its checksum field taken as 0).
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for (i, c) in h.chunks(2).enumerate() {
        if i != 5 {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One IPv6 extension header: `bytes` is the whole header (a multiple of 8 bytes, its length
/// byte included); its first byte is overwritten with the next header's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv6Ext {
    /// This header's type (0 hop-by-hop, 43 routing, 44 fragment, 60 destination options).
    pub kind: u8,
    pub bytes: Vec<u8>,
}

impl Ipv6Ext {
    /// An options header (hop-by-hop 0, destination options 60) of 8 bytes holding PadN.
    pub fn options(kind: u8) -> Ipv6Ext {
        Ipv6Ext {
            kind,
            bytes: alloc::vec![0, 0, 1, 4, 0, 0, 0, 0],
        }
    }
    /// A fragment header: offset in 8-byte units, more fragments, identification.
    pub fn fragment(offset: u16, more: bool, id: u32) -> Ipv6Ext {
        let o = ((offset & 0x1fff) << 3) | more as u16;
        let mut bytes = alloc::vec![0, 0];
        bytes.extend_from_slice(&o.to_be_bytes());
        bytes.extend_from_slice(&id.to_be_bytes());
        Ipv6Ext { kind: 44, bytes }
    }
}

/// An IPv6 header and its extension headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub dscp: u8,
    pub ecn: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub hop_limit: u8,
    /// The upper-layer protocol (after the extension headers).
    pub next_header: u8,
    pub ext: Vec<Ipv6Ext>,
    /// Payload length; `None`: extension headers + payload.
    pub payload_len: Option<u16>,
}

impl Ipv6 {
    /// Traffic class 0, flow label 0, hop limit 64, no extension headers.
    pub fn new(src: [u8; 16], dst: [u8; 16], next_header: u8) -> Ipv6 {
        Ipv6 {
            src,
            dst,
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            hop_limit: 64,
            next_header,
            ext: Vec::new(),
            payload_len: None,
        }
    }
    pub fn header_len(&self) -> usize {
        40 + self.ext.iter().map(|e| e.bytes.len()).sum::<usize>()
    }
    /// Writes the header and extension headers for `payload_len` bytes of upper-layer
    /// payload; returns their length.
    pub fn write(&self, payload_len: usize, out: &mut Vec<u8>) -> usize {
        let hl = self.header_len();
        let tc = (self.dscp << 2) | (self.ecn & 3);
        let w0 = (6u32 << 28) | ((tc as u32) << 20) | (self.flow_label & 0xf_ffff);
        out.extend_from_slice(&w0.to_be_bytes());
        let plen = self.payload_len.unwrap_or((hl - 40 + payload_len) as u16);
        out.extend_from_slice(&plen.to_be_bytes());
        let first = self.ext.first().map_or(self.next_header, |e| e.kind);
        out.extend_from_slice(&[first, self.hop_limit]);
        out.extend_from_slice(&self.src);
        out.extend_from_slice(&self.dst);
        for (i, e) in self.ext.iter().enumerate() {
            let next = self.ext.get(i + 1).map_or(self.next_header, |n| n.kind);
            let at = out.len();
            out.extend_from_slice(&e.bytes);
            if !e.bytes.is_empty() {
                out[at] = next;
            }
        }
        hl
    }
}

/// The IP layer of a [`Roce`] frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ip {
    V4(Ipv4),
    V6(Ipv6),
}

impl Ip {
    pub fn set_mark(&mut self, dscp: u8, ecn: u8) {
        match self {
            Ip::V4(h) => (h.dscp, h.ecn) = (dscp, ecn),
            Ip::V6(h) => (h.dscp, h.ecn) = (dscp, ecn),
        }
    }
    pub fn set_ttl(&mut self, ttl: u8) {
        match self {
            Ip::V4(h) => h.ttl = ttl,
            Ip::V6(h) => h.hop_limit = ttl,
        }
    }
    fn ethertype(&self) -> u16 {
        match self {
            Ip::V4(_) => ETHERTYPE_IPV4,
            Ip::V6(_) => ETHERTYPE_IPV6,
        }
    }
    fn write(&self, payload_len: usize, out: &mut Vec<u8>) -> usize {
        match self {
            Ip::V4(h) => h.write(payload_len, out),
            Ip::V6(h) => h.write(payload_len, out),
        }
    }
}

/// The UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Udp {
    pub sport: u16,
    pub dport: u16,
    /// Length field; `None`: 8 + payload (ICRC included).
    pub len: Option<u16>,
    /// RoCEv2 senders put 0 here (the ICRC protects the payload).
    pub checksum: u16,
}

/// The InfiniBand Base Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    /// Migration request.
    pub migreq: bool,
    /// Pad count (2 bits); [`Roce::pad_to_4`] sets it.
    pub pad: u8,
    /// Transport header version (4 bits; 0 is the only defined one).
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

impl Bth {
    /// P_Key 0xffff, no flags, AckReq clear.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            pkey: 0xffff,
            dest_qp,
            psn,
            ..Bth::default()
        }
    }
    /// Byte 1: SE(7) M(6) PadCnt(5:4) TVer(3:0).
    pub fn flags(&self) -> u8 {
        ((self.se as u8) << 7)
            | ((self.migreq as u8) << 6)
            | ((self.pad & 3) << 4)
            | (self.tver & 0x0f)
    }
    /// Sets SE, M, PadCnt and TVer from byte 1.
    pub fn set_flags(&mut self, b: u8) {
        self.se = b & 0x80 != 0;
        self.migreq = b & 0x40 != 0;
        self.pad = (b >> 4) & 3;
        self.tver = b & 0x0f;
    }
    pub fn bytes(&self) -> [u8; BTH_LEN] {
        let mut h = [0u8; BTH_LEN];
        h[0] = self.opcode;
        h[1] = self.flags();
        h[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        h[4] = ((self.fecn as u8) << 7) | ((self.becn as u8) << 6);
        h[5..8].copy_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        h[8] = (self.ack_req as u8) << 7;
        h[9..12].copy_from_slice(&self.psn.to_be_bytes()[1..]);
        h
    }
}

/// RETH: virtual address, R_Key, DMA length.
pub fn reth(va: u64, rkey: u32, dma_len: u32) -> [u8; RETH_LEN] {
    let mut r = [0u8; RETH_LEN];
    r[0..8].copy_from_slice(&va.to_be_bytes());
    r[8..12].copy_from_slice(&rkey.to_be_bytes());
    r[12..16].copy_from_slice(&dma_len.to_be_bytes());
    r
}

/// AETH: syndrome and 24-bit MSN.
pub fn aeth(syndrome: u8, msn: u32) -> [u8; AETH_LEN] {
    let m = msn.to_be_bytes();
    [syndrome, m[1], m[2], m[3]]
}

/// The payload after the BTH and the extension headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// `len` bytes, byte i = `first + i * step` (wrapping): `step` 0 repeats one byte.
    Pattern {
        len: usize,
        first: u8,
        step: u8,
    },
    Bytes(Vec<u8>),
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Pattern { len, .. } => *len,
            Payload::Bytes(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Payload::Pattern { len, first, step } => {
                out.extend((0..*len).map(|i| first.wrapping_add((i as u8).wrapping_mul(*step))))
            }
            Payload::Bytes(b) => out.extend_from_slice(b),
        }
    }
}

/// The ICRC at the end of the UDP payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icrc {
    /// Computed with [`icrc::compute`].
    Computed,
    /// Computed, then XORed with this value (a nonzero value makes it wrong).
    Xor(u32),
    /// These 4 bytes, as stored (little-endian).
    Value(u32),
    /// No ICRC bytes: the payload ends the UDP payload.
    Absent,
}

/// One UDP frame: RoCEv2 when `bth` is set (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roce {
    pub eth: Eth,
    pub ip: Ip,
    pub udp: Udp,
    /// `None`: no BTH (a plain UDP frame, `payload` is the whole UDP payload).
    pub bth: Option<Bth>,
    /// Bytes after the BTH: RETH, AETH, a CNP's reserved bytes, anything.
    pub ext: Vec<u8>,
    pub payload: Payload,
    /// Zero bytes after the payload up to a multiple of 4, and the BTH pad count set to their
    /// number.
    pub pad_to_4: bool,
    pub icrc: Icrc,
    /// Cut the finished frame to this many bytes (as a snaplen does).
    pub truncate: Option<usize>,
}

/// The defaults' addresses.
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

impl Roce {
    fn with_ip(ip: Ip) -> Roce {
        Roce {
            eth: Eth::new(MAC_A, MAC_B),
            ip,
            udp: Udp {
                sport: 49152,
                dport: ROCE_PORT,
                len: None,
                checksum: 0,
            },
            bth: Some(Bth::new(0x04, 0, 0)),
            ext: Vec::new(),
            payload: Payload::Bytes(Vec::new()),
            pad_to_4: false,
            icrc: Icrc::Computed,
            truncate: None,
        }
    }
    /// From [`MAC_A`] to [`MAC_B`], untagged, padded to 60 bytes; IPv4 as [`Ipv4::new`] (UDP);
    /// UDP 49152 -> 4791, checksum 0; BTH as [`Bth::new`] with opcode 0x04 (RC SEND ONLY), QP
    /// 0, PSN 0; no extension headers or payload; ICRC computed.
    pub fn v4(src: [u8; 4], dst: [u8; 4]) -> Roce {
        Roce::with_ip(Ip::V4(Ipv4::new(src, dst, IPPROTO_UDP)))
    }
    /// As [`Roce::v4`] with IPv6 as [`Ipv6::new`].
    pub fn v6(src: [u8; 16], dst: [u8; 16]) -> Roce {
        Roce::with_ip(Ip::V6(Ipv6::new(src, dst, IPPROTO_UDP)))
    }

    fn v4_mut(&mut self) -> &mut Ipv4 {
        match &mut self.ip {
            Ip::V4(h) => h,
            Ip::V6(_) => panic!("an IPv4 field set on an IPv6 frame"),
        }
    }
    fn v6_mut(&mut self) -> &mut Ipv6 {
        match &mut self.ip {
            Ip::V6(h) => h,
            Ip::V4(_) => panic!("an IPv6 field set on an IPv4 frame"),
        }
    }
    fn bth_mut(&mut self) -> &mut Bth {
        self.bth.get_or_insert_with(|| Bth::new(0x04, 0, 0))
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Roce {
        (self.eth.src, self.eth.dst) = (src, dst);
        self
    }
    /// Adds a tag inside the ones already there.
    pub fn tag(mut self, t: Tag) -> Roce {
        self.eth.tags.push(t);
        self
    }
    pub fn tags(mut self, t: &[Tag]) -> Roce {
        self.eth.tags = t.to_vec();
        self
    }
    pub fn min_len(mut self, n: usize) -> Roce {
        self.eth.min_len = n;
        self
    }
    pub fn mark(mut self, dscp: u8, ecn: u8) -> Roce {
        self.ip.set_mark(dscp, ecn);
        self
    }
    /// IPv4 TTL or IPv6 hop limit.
    pub fn ttl(mut self, ttl: u8) -> Roce {
        self.ip.set_ttl(ttl);
        self
    }
    pub fn ip_id(mut self, id: u16) -> Roce {
        self.v4_mut().id = id;
        self
    }
    /// IPv4 DF, MF and fragment offset.
    pub fn fragment(mut self, df: bool, mf: bool, offset: u16) -> Roce {
        let h = self.v4_mut();
        (h.df, h.mf, h.frag_offset) = (df, mf, offset);
        self
    }
    pub fn ip_options(mut self, o: &[u8]) -> Roce {
        self.v4_mut().options = o.to_vec();
        self
    }
    pub fn ip_checksum(mut self, c: u16) -> Roce {
        self.v4_mut().checksum = Some(c);
        self
    }
    pub fn flow_label(mut self, l: u32) -> Roce {
        self.v6_mut().flow_label = l;
        self
    }
    pub fn ipv6_ext(mut self, e: Ipv6Ext) -> Roce {
        self.v6_mut().ext.push(e);
        self
    }
    pub fn ports(mut self, sport: u16, dport: u16) -> Roce {
        (self.udp.sport, self.udp.dport) = (sport, dport);
        self
    }
    pub fn udp_len(mut self, len: u16) -> Roce {
        self.udp.len = Some(len);
        self
    }
    pub fn bth(mut self, b: Bth) -> Roce {
        self.bth = Some(b);
        self
    }
    /// No BTH: a plain UDP frame.
    pub fn no_bth(mut self) -> Roce {
        self.bth = None;
        self
    }
    pub fn opcode(mut self, op: u8) -> Roce {
        self.bth_mut().opcode = op;
        self
    }
    pub fn qp(mut self, qp: u32) -> Roce {
        self.bth_mut().dest_qp = qp;
        self
    }
    pub fn psn(mut self, psn: u32) -> Roce {
        self.bth_mut().psn = psn;
        self
    }
    pub fn ack_req(mut self, a: bool) -> Roce {
        self.bth_mut().ack_req = a;
        self
    }
    /// BTH byte 1 (SE, M, PadCnt, TVer).
    pub fn bth_flags(mut self, b: u8) -> Roce {
        self.bth_mut().set_flags(b);
        self
    }
    pub fn becn(mut self, b: bool) -> Roce {
        self.bth_mut().becn = b;
        self
    }
    /// Appends extension header bytes.
    pub fn ext(mut self, b: &[u8]) -> Roce {
        self.ext.extend_from_slice(b);
        self
    }
    pub fn reth(self, va: u64, rkey: u32, dma_len: u32) -> Roce {
        self.ext(&reth(va, rkey, dma_len))
    }
    pub fn aeth(self, syndrome: u8, msn: u32) -> Roce {
        self.ext(&aeth(syndrome, msn))
    }
    /// `len` payload bytes of `first + i * step`.
    pub fn payload_pattern(mut self, len: usize, first: u8, step: u8) -> Roce {
        self.payload = Payload::Pattern { len, first, step };
        self
    }
    pub fn payload_bytes(mut self, b: &[u8]) -> Roce {
        self.payload = Payload::Bytes(b.to_vec());
        self
    }
    pub fn pad_to_4(mut self) -> Roce {
        self.pad_to_4 = true;
        self
    }
    pub fn icrc(mut self, i: Icrc) -> Roce {
        self.icrc = i;
        self
    }
    pub fn truncate(mut self, n: usize) -> Roce {
        self.truncate = Some(n);
        self
    }

    /// The frame's bytes.
    pub fn build(&self) -> Vec<u8> {
        let pad = if self.pad_to_4 {
            (4 - self.payload.len() % 4) % 4
        } else {
            0
        };
        let icrc_len = if self.icrc == Icrc::Absent {
            0
        } else {
            ICRC_LEN
        };
        let bth_len = if self.bth.is_some() { BTH_LEN } else { 0 };
        let l4_len = 8 + bth_len + self.ext.len() + self.payload.len() + pad + icrc_len;
        let mut f = Vec::with_capacity(self.eth.header_len() + 60 + l4_len);
        self.eth.write_header(self.ip.ethertype(), &mut f);
        let ip_off = f.len();
        let l4_off = self.ip.write(l4_len, &mut f);
        f.extend_from_slice(&self.udp.sport.to_be_bytes());
        f.extend_from_slice(&self.udp.dport.to_be_bytes());
        f.extend_from_slice(&self.udp.len.unwrap_or(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&self.udp.checksum.to_be_bytes());
        if let Some(b) = &self.bth {
            let mut b = *b;
            if self.pad_to_4 {
                b.pad = pad as u8;
            }
            f.extend_from_slice(&b.bytes());
        }
        f.extend_from_slice(&self.ext);
        self.payload.write(&mut f);
        f.resize(f.len() + pad, 0);
        let v6 = matches!(self.ip, Ip::V6(_));
        let stored = match self.icrc {
            Icrc::Computed => Some(icrc::compute(&f[ip_off..], l4_off, v6)),
            Icrc::Xor(x) => Some(icrc::compute(&f[ip_off..], l4_off, v6) ^ x),
            Icrc::Value(v) => Some(v),
            Icrc::Absent => None,
        };
        if let Some(c) = stored {
            f.extend_from_slice(&c.to_le_bytes());
        }
        self.eth.pad(&mut f);
        if let Some(n) = self.truncate {
            f.truncate(n);
        }
        f
    }
}

/// A MAC control frame (ethertype 0x8808) to [`MAC_CONTROL_DST`], padded to 60 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MacControl {
    pub eth: Eth,
    pub opcode: u16,
    /// PFC only.
    pub class_enable: u16,
    /// PFC: the pause time of each priority; other opcodes (PAUSE): `times[0]` only.
    pub times: [u16; 8],
}

impl MacControl {
    /// 802.1Qbb PFC: class-enable vector (bit p = priority p) and eight pause times (quanta).
    pub fn pfc(src: [u8; 6], class_enable: u16, times: [u16; 8]) -> MacControl {
        MacControl {
            eth: Eth::new(src, MAC_CONTROL_DST),
            opcode: PFC_OPCODE,
            class_enable,
            times,
        }
    }
    /// 802.3x PAUSE with one pause time (quanta).
    pub fn pause(src: [u8; 6], quanta: u16) -> MacControl {
        let mut times = [0; 8];
        times[0] = quanta;
        MacControl {
            eth: Eth::new(src, MAC_CONTROL_DST),
            opcode: PAUSE_OPCODE,
            class_enable: 0,
            times,
        }
    }
    pub fn tags(mut self, t: &[Tag]) -> MacControl {
        self.eth.tags = t.to_vec();
        self
    }
    pub fn build(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(20);
        p.extend_from_slice(&self.opcode.to_be_bytes());
        if self.opcode == PFC_OPCODE {
            p.extend_from_slice(&self.class_enable.to_be_bytes());
            for t in self.times {
                p.extend_from_slice(&t.to_be_bytes());
            }
        } else {
            p.extend_from_slice(&self.times[0].to_be_bytes());
        }
        self.eth.frame(ETHERTYPE_MAC_CONTROL, &p)
    }
}

/// ERSPAN type II header (version 1): VLAN, session id, index (COS, En, T zero).
pub fn erspan2_header(vlan: u16, session: u16, index: u32) -> [u8; 8] {
    let v = (1u16 << 12) | (vlan & 0x0fff);
    let s = session & 0x03ff;
    let i = index & 0x000f_ffff;
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&v.to_be_bytes());
    h[2..4].copy_from_slice(&s.to_be_bytes());
    h[4..8].copy_from_slice(&i.to_be_bytes());
    h
}

/// ERSPAN type III header (version 2): VLAN, session id, timestamp (other fields zero), and
/// with `platform` the O bit set and the 8-byte platform-specific subheader appended.
pub fn erspan3_header(
    vlan: u16,
    session: u16,
    timestamp: u32,
    platform: Option<[u8; 8]>,
) -> Vec<u8> {
    let v = (2u16 << 12) | (vlan & 0x0fff);
    let s = session & 0x03ff;
    let mut h = Vec::with_capacity(20);
    h.extend_from_slice(&v.to_be_bytes());
    h.extend_from_slice(&s.to_be_bytes());
    h.extend_from_slice(&timestamp.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, platform.is_some() as u8]);
    if let Some(p) = platform {
        h.extend_from_slice(&p);
    }
    h
}

/// Mirror encapsulation: Ethernet / IPv4 (protocol 47) / GRE (flags, protocol, optional
/// fields) / ERSPAN header / the inner frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    pub eth: Eth,
    pub ip: Ipv4,
    /// GRE flags and version (C, K, S bits: [`GRE_C`], [`GRE_K`], [`GRE_S`]).
    pub gre_flags: u16,
    pub gre_proto: u16,
    /// The GRE optional fields the flags announce (checksum, key, sequence number).
    pub gre_opt: Vec<u8>,
    /// The ERSPAN header (empty for GRE-TEB and ERSPAN I).
    pub erspan: Vec<u8>,
}

impl Mirror {
    /// From 02:00:00:00:09:01 / 10.77.9.1 to 02:00:00:00:09:02 / 10.77.9.2, the outer IPv4
    /// header as [`Ipv4::new`], padded to 60 bytes; GRE without optional fields.
    pub fn gre(gre_proto: u16) -> Mirror {
        Mirror {
            eth: Eth::new([0x02, 0, 0, 0, 9, 1], [0x02, 0, 0, 0, 9, 2]),
            ip: Ipv4::new([10, 77, 9, 1], [10, 77, 9, 2], IPPROTO_GRE),
            gre_flags: 0,
            gre_proto,
            gre_opt: Vec::new(),
            erspan: Vec::new(),
        }
    }
    /// GRE transparent Ethernet bridging (0x6558).
    pub fn gre_teb() -> Mirror {
        Mirror::gre(GRE_PROTO_TEB)
    }
    /// ERSPAN type I: GRE 0x88be without a sequence number, no ERSPAN header.
    pub fn erspan1() -> Mirror {
        Mirror::gre(GRE_PROTO_ERSPAN2)
    }
    /// ERSPAN type II: GRE 0x88be with sequence number `seq`, then `header`.
    pub fn erspan2(seq: u32, header: [u8; 8]) -> Mirror {
        Mirror::gre(GRE_PROTO_ERSPAN2).sequenced(seq, &header)
    }
    /// ERSPAN type III: GRE 0x22eb with sequence number `seq`, then `header`.
    pub fn erspan3(seq: u32, header: &[u8]) -> Mirror {
        Mirror::gre(GRE_PROTO_ERSPAN3).sequenced(seq, header)
    }
    fn sequenced(mut self, seq: u32, header: &[u8]) -> Mirror {
        self.gre_flags = GRE_S;
        self.gre_opt = seq.to_be_bytes().to_vec();
        self.erspan = header.to_vec();
        self
    }
    /// The outer addresses.
    pub fn outer(
        mut self,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: [u8; 4],
        dst: [u8; 4],
    ) -> Mirror {
        (self.eth.src, self.eth.dst) = (src_mac, dst_mac);
        (self.ip.src, self.ip.dst) = (src, dst);
        self
    }
    /// `inner` (an Ethernet frame) wrapped.
    pub fn wrap(&self, inner: &[u8]) -> Vec<u8> {
        let gre_len = 4 + self.gre_opt.len() + self.erspan.len() + inner.len();
        let mut l3 = Vec::with_capacity(self.ip.header_len() + gre_len);
        self.ip.write(gre_len, &mut l3);
        l3.extend_from_slice(&self.gre_flags.to_be_bytes());
        l3.extend_from_slice(&self.gre_proto.to_be_bytes());
        l3.extend_from_slice(&self.gre_opt);
        l3.extend_from_slice(&self.erspan);
        l3.extend_from_slice(inner);
        self.eth.frame(ETHERTYPE_IPV4, &l3)
    }
}
