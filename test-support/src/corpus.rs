//! Generated capture corpus: one file per case of metrics.md, frames built by
//! `observer_common::frames` (ICRCs computed with observer_common::icrc, verified against the
//! real oferby capture), written with the tiny pcap/pcapng writers below (pcap-parser does not
//! write).
//!
//! Shared by the tests of observer, roce-observe and analysis, by `cargo xtask bench-replay` and
//! by the fuzz seeds' generator.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use observer_common::frames::{self, Bth, Icrc, MacControl, Tag};

pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_SLL: u32 = 113;
pub const LINKTYPE_SLL2: u32 = 276;

/// One record of a capture.
#[derive(Clone, Debug)]
pub struct Rec {
    pub ts_ns: u64,
    pub data: Vec<u8>,
    /// pcapng interface (0 for pcap).
    pub iface: u32,
    /// pcapng `epb_flags` (bits 0-1: 1 inbound, 2 outbound); 0 writes no option.
    pub epb_flags: u32,
}

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// How a RoCE frame is built.
#[derive(Clone, Debug)]
pub struct Roce {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    /// AETH syndrome (ACK opcodes); MSN is the PSN.
    pub syndrome: Option<u8>,
    /// Payload after BTH (+ AETH/RETH), before the ICRC.
    pub payload: usize,
    pub dscp: u8,
    pub ecn: u8,
    /// Tags outermost first: (TPID, PCP).
    pub tags: Vec<(u16, u8)>,
    /// IPv4 options bytes (multiple of 4, up to 40).
    pub ip_options: usize,
    /// IPv4 (more fragments, offset in 8-byte units).
    pub frag: Option<(bool, u16)>,
    pub bad_icrc: bool,
    pub tver: u8,
    pub becn: bool,
    /// RETH DMA length of an RDMA READ request (opcode 0x0c).
    pub dma_len: u32,
}

impl Roce {
    pub fn v4(src: [u8; 4], dst: [u8; 4], qp: u32, psn: u32) -> Roce {
        Roce {
            src: IpAddr::from(src),
            dst: IpAddr::from(dst),
            sport: 49152 + (qp as u16 & 0x3fff),
            dport: 4791,
            opcode: 0x0a, // RDMA WRITE ONLY
            dest_qp: qp,
            psn,
            syndrome: None,
            payload: 1024,
            dscp: 26,
            ecn: 2,
            tags: vec![(0x8100, 3)],
            ip_options: 0,
            frag: None,
            bad_icrc: false,
            tver: 0,
            becn: false,
            dma_len: 0,
        }
    }
    /// An RC RDMA READ request (0x0c) of `len` bytes: BTH and RETH, no payload.
    pub fn read(mut self, len: u32) -> Roce {
        self.opcode = 0x0c;
        self.payload = 0;
        self.dma_len = len;
        self
    }
    /// An RDMA READ response packet (0x0d first, 0x0e middle, 0x0f last, 0x10 only) of
    /// `payload` bytes; first, last and only carry an AETH (ACK).
    pub fn read_response(mut self, opcode: u8, payload: usize) -> Roce {
        self.opcode = opcode;
        self.payload = payload;
        self.syndrome = (opcode != 0x0e).then_some(0x1f);
        self
    }
    /// An ACK (0x11) with `syndrome` from this key's reverse direction.
    pub fn ack(mut self, syndrome: u8) -> Roce {
        self.opcode = 0x11;
        self.syndrome = Some(syndrome);
        self.payload = 0;
        self
    }
    pub fn cnp(mut self) -> Roce {
        self.opcode = 0x81;
        self.payload = 16;
        self.dscp = 48;
        self.tags = vec![(0x8100, 6)];
        self.becn = true;
        self
    }
    pub fn opcode(mut self, op: u8) -> Roce {
        self.opcode = op;
        self
    }
    pub fn payload(mut self, n: usize) -> Roce {
        self.payload = n;
        self
    }
    pub fn mark(mut self, dscp: u8, ecn: u8) -> Roce {
        self.dscp = dscp;
        self.ecn = ecn;
        self
    }
    pub fn tags(mut self, t: &[(u16, u8)]) -> Roce {
        self.tags = t.to_vec();
        self
    }
    pub fn sport(mut self, p: u16) -> Roce {
        self.sport = p;
        self
    }

    /// The Ethernet frame, built by `observer_common::frames`: from MAC_A to MAC_B, VLAN ids
    /// 100, 101, ...; padded to 60 bytes; IPv4 options NOPs ending with an EOL, fragments
    /// without DF and with id 0x4242; IPv6 flow label 0x12345; BTH AckReq set; the AETH's MSN
    /// is the PSN; a RETH (VA 0x1000, R_Key 0x1234, the payload length) on RDMA WRITE FIRST /
    /// ONLY, (VA 0x2000, R_Key 0x5678, `dma_len`) on RDMA READ requests; payload byte
    /// i = i * 31 + PSN.
    pub fn frame(&self) -> Vec<u8> {
        let mut r = ip(self.src, self.dst, self.ip_options, self.frag)
            .tags(&tags(&self.tags))
            .mark(self.dscp, self.ecn)
            .ports(self.sport, self.dport)
            .bth(Bth {
                tver: self.tver,
                becn: self.becn,
                ack_req: true,
                ..Bth::new(self.opcode, self.dest_qp, self.psn)
            });
        if let Some(s) = self.syndrome {
            r = r.aeth(s, self.psn);
        }
        if matches!(self.opcode, 0x06 | 0x0a) {
            r = r.reth(0x1000, 0x1234, self.payload as u32);
        }
        if self.opcode == 0x0c {
            r = r.reth(0x2000, 0x5678, self.dma_len);
        }
        r.payload_pattern(self.payload, self.psn as u8, 31)
            .icrc(if self.bad_icrc {
                Icrc::Xor(0xdead_beef)
            } else {
                Icrc::Computed
            })
            .build()
    }
}

/// The IP layer of a corpus frame (MAC_A to MAC_B, UDP 49152 to 4791, no BTH yet).
fn ip(src: IpAddr, dst: IpAddr, ip_options: usize, frag: Option<(bool, u16)>) -> frames::Roce {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut r = frames::Roce::v4(s.octets(), d.octets());
            if ip_options > 0 {
                let opts: Vec<u8> = (0..ip_options)
                    .map(|i| if i + 1 == ip_options { 0 } else { 1 })
                    .collect();
                r = r.ip_options(&opts);
            }
            if let Some((mf, off)) = frag {
                r = r.fragment(false, mf, off).ip_id(0x4242);
            }
            r
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            frames::Roce::v6(s.octets(), d.octets()).flow_label(0x12345)
        }
        _ => panic!("mixed address families"),
    }
    .macs(MAC_A, MAC_B)
}

fn tags(t: &[(u16, u8)]) -> Vec<Tag> {
    t.iter()
        .enumerate()
        .map(|(i, &(tpid, pcp))| Tag::new(tpid, pcp, 100 + i as u16))
        .collect()
}

/// A plain UDP frame (not RoCE, garbage on 4791, short BTH, ...).
pub fn udp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    ip(IpAddr::from(src), IpAddr::from(dst), 0, None)
        .mark(0, 0)
        .ports(sport, dport)
        .no_bth()
        .payload_bytes(payload)
        .icrc(Icrc::Absent)
        .build()
}

/// PFC frame (802.1Qbb) from `src`.
pub fn pfc(src: [u8; 6], enable: u16, times: [u16; 8]) -> Vec<u8> {
    MacControl::pfc(src, enable, times).build()
}

/// 802.3x PAUSE frame.
pub fn pause(src: [u8; 6], time: u16) -> Vec<u8> {
    MacControl::pause(src, time).build()
}

/// ERSPAN (type II when `v3` is false, else type III) / GRE / IPv4 / Ethernet around `inner`:
/// from 02:00:00:00:00:99 / 10.99.0.1 to 02:00:00:00:00:98 / 10.99.0.2, GRE sequence 7,
/// session 1.
pub fn erspan(inner: &[u8], v3: bool) -> Vec<u8> {
    if v3 {
        frames::Mirror::erspan3(7, &frames::erspan3_header(0, 1, 0, None))
    } else {
        frames::Mirror::erspan2(7, frames::erspan2_header(0, 1, 0))
    }
    .outer(
        [0x02, 0, 0, 0, 0, 0x99],
        [0x02, 0, 0, 0, 0, 0x98],
        [10, 99, 0, 1],
        [10, 99, 0, 2],
    )
    .wrap(inner)
}

/// Linux cooked (SLL) form of an untagged Ethernet frame.
pub fn to_sll(eth: &[u8], outgoing: bool) -> Vec<u8> {
    let mut f = Vec::with_capacity(eth.len() + 2);
    f.extend_from_slice(&(if outgoing { 4u16 } else { 0 }).to_be_bytes());
    f.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
    f.extend_from_slice(&6u16.to_be_bytes());
    f.extend_from_slice(&eth[6..12]);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&eth[12..14]);
    f.extend_from_slice(&eth[14..]);
    f
}

/// Linux cooked v2 (SLL2) form of an untagged Ethernet frame.
pub fn to_sll2(eth: &[u8], outgoing: bool) -> Vec<u8> {
    let mut f = Vec::with_capacity(eth.len() + 6);
    f.extend_from_slice(&eth[12..14]);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&3u32.to_be_bytes());
    f.extend_from_slice(&1u16.to_be_bytes());
    f.push(if outgoing { 4 } else { 0 });
    f.push(6);
    f.extend_from_slice(&eth[6..12]);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&eth[14..]);
    f
}

/// Writes a classic pcap file (little-endian; nanosecond magic when `nanos`).
pub fn write_pcap<W: Write>(
    w: &mut W,
    linktype: u32,
    snaplen: u32,
    nanos: bool,
    recs: &[Rec],
) -> std::io::Result<()> {
    write_pcap_header(w, linktype, snaplen, nanos)?;
    for r in recs {
        write_pcap_record(w, snaplen, nanos, r.ts_ns, &r.data)?;
    }
    Ok(())
}

pub fn write_pcap_header<W: Write>(
    w: &mut W,
    linktype: u32,
    snaplen: u32,
    nanos: bool,
) -> std::io::Result<()> {
    let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    w.write_all(&magic.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&0i32.to_le_bytes())?;
    w.write_all(&0u32.to_le_bytes())?;
    w.write_all(&snaplen.to_le_bytes())?;
    w.write_all(&linktype.to_le_bytes())
}

pub fn write_pcap_record<W: Write>(
    w: &mut W,
    snaplen: u32,
    nanos: bool,
    ts_ns: u64,
    data: &[u8],
) -> std::io::Result<()> {
    let cap = data.len().min(snaplen as usize);
    let sec = (ts_ns / 1_000_000_000) as u32;
    let frac = if nanos {
        ts_ns % 1_000_000_000
    } else {
        (ts_ns % 1_000_000_000) / 1000
    } as u32;
    w.write_all(&sec.to_le_bytes())?;
    w.write_all(&frac.to_le_bytes())?;
    w.write_all(&(cap as u32).to_le_bytes())?;
    w.write_all(&(data.len() as u32).to_le_bytes())?;
    w.write_all(&data[..cap])
}

/// Writes a pcapng file: one section, interfaces (linktype, name, if_tsresol), EPBs.
pub fn write_pcapng<W: Write>(
    w: &mut W,
    ifaces: &[(u32, &str, u8)],
    recs: &[Rec],
) -> std::io::Result<()> {
    fn block<W: Write>(w: &mut W, ty: u32, body: &[u8]) -> std::io::Result<()> {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        w.write_all(&ty.to_le_bytes())?;
        w.write_all(&len.to_le_bytes())?;
        w.write_all(body)?;
        w.write_all(&[0u8; 3][..pad])?;
        w.write_all(&len.to_le_bytes())
    }
    fn opt(b: &mut Vec<u8>, code: u16, v: &[u8]) {
        b.extend_from_slice(&code.to_le_bytes());
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v);
        b.resize(b.len() + (4 - v.len() % 4) % 4, 0);
    }
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(w, 0x0a0d_0d0a, &shb)?;
    for &(lt, name, tsresol) in ifaces {
        let mut idb = Vec::new();
        idb.extend_from_slice(&(lt as u16).to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&0u32.to_le_bytes());
        opt(&mut idb, 2, name.as_bytes());
        opt(&mut idb, 9, &[tsresol]);
        opt(&mut idb, 0, &[]);
        block(w, 1, &idb)?;
    }
    for r in recs {
        let resol = ifaces[r.iface as usize].2;
        let units: u128 = if resol & 0x80 != 0 {
            1u128 << (resol & 0x7f)
        } else {
            10u128.pow(resol as u32)
        };
        let ts = (r.ts_ns as u128 * units / 1_000_000_000) as u64;
        let mut epb = Vec::with_capacity(r.data.len() + 24);
        epb.extend_from_slice(&r.iface.to_le_bytes());
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&r.data);
        epb.resize(epb.len() + (4 - r.data.len() % 4) % 4, 0);
        if r.epb_flags != 0 {
            opt(&mut epb, 2, &r.epb_flags.to_le_bytes());
            opt(&mut epb, 0, &[]);
        }
        block(w, 6, &epb)?;
    }
    Ok(())
}

/// One corpus file.
pub struct Case {
    pub name: &'static str,
    pub linktype: u32,
    pub snaplen: u32,
    /// pcapng with these interfaces (linktype, name, tsresol) instead of pcap.
    pub pcapng: Option<Vec<(u32, &'static str, u8)>>,
    pub nanos: bool,
    pub recs: Vec<Rec>,
    /// tshark needs `-d udp.port==P,infiniband` for RoCE from source port P < 4791.
    pub decode_as_port: Option<u16>,
}

impl Case {
    pub fn file_name(&self) -> String {
        format!(
            "{}.{}",
            self.name,
            if self.pcapng.is_some() {
                "pcapng"
            } else {
                "pcap"
            }
        )
    }
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let p = dir.join(self.file_name());
        let mut w = std::io::BufWriter::new(std::fs::File::create(&p)?);
        match &self.pcapng {
            Some(ifs) => write_pcapng(&mut w, ifs, &self.recs)?,
            None => write_pcap(&mut w, self.linktype, self.snaplen, self.nanos, &self.recs)?,
        }
        w.flush()?;
        Ok(p)
    }
}

const A: [u8; 4] = [10, 77, 1, 1];
const B: [u8; 4] = [10, 77, 1, 2];
const C: [u8; 4] = [10, 77, 1, 3];
const T0: u64 = 1_700_000_000_000_000_000;

fn seq(frames: Vec<Vec<u8>>, step_ns: u64) -> Vec<Rec> {
    frames
        .into_iter()
        .enumerate()
        .map(|(i, data)| Rec {
            ts_ns: T0 + i as u64 * step_ns,
            data,
            iface: 0,
            epb_flags: 0,
        })
        .collect()
}

fn case(name: &'static str, frames: Vec<Vec<u8>>) -> Case {
    Case {
        name,
        linktype: LINKTYPE_ETHERNET,
        snaplen: 65535,
        pcapng: None,
        nanos: false,
        recs: seq(frames, 100_000),
        decode_as_port: None,
    }
}

/// Request stream A->B (QP 0x11) with ACKs B->A (QP 0x22), PSNs as given.
fn exchange(psns: &[u32], ack_every: usize) -> Vec<Vec<u8>> {
    let mut f = Vec::new();
    for (i, &p) in psns.iter().enumerate() {
        f.push(Roce::v4(A, B, 0x11, p).frame());
        if (i + 1) % ack_every == 0 {
            f.push(Roce::v4(B, A, 0x22, p).ack(0x1f).frame());
        }
    }
    f
}

/// Every case of metrics.md.
pub fn corpus() -> Vec<Case> {
    let mut v = Vec::new();

    // Clean traffic, two connections, mixed opcodes and sizes.
    let mut f = exchange(&(0..40).collect::<Vec<_>>(), 4);
    for p in 100..120u32 {
        f.push(
            Roce::v4(C, B, 0x33, p)
                .opcode(0x04)
                .payload(256 + (p as usize % 7) * 100)
                .frame(),
        );
        f.push(Roce::v4(B, C, 0x44, p).ack(0x1f).frame());
    }
    v.push(case("clean", f));

    // Go-back-N: 3 and 4 lost, 5 and 6 arrive, NAK PSN sequence error, resend from 3.
    let mut f = Vec::new();
    for p in [0, 1, 2, 5, 6] {
        f.push(Roce::v4(A, B, 0x11, p).frame());
    }
    f.push(Roce::v4(B, A, 0x22, 3).ack(0x60).frame());
    for p in 3..10 {
        f.push(Roce::v4(A, B, 0x11, p).frame());
    }
    f.push(Roce::v4(B, A, 0x22, 9).ack(0x1f).frame());
    v.push(case("go_back_n", f));

    // PSN wrap without loss, and with 0xffffff and 0 lost.
    let psns: Vec<u32> = (0xff_fff8..=0xff_ffff).chain(0..8).collect();
    v.push(case("psn_wrap", exchange(&psns, 4)));
    let psns: Vec<u32> = (0xff_fff8..0xff_ffff).chain(1..8).collect();
    v.push(case("psn_wrap_loss", exchange(&psns, 100)));

    // RDMA READs (metrics.md "RDMA READ requests"), path MTU 1024: READ requests A->B (QP
    // 0x11) answered by READ responses B->A (QP 0x22, one PSN each). Three READs of 64 KiB back
    // to back (64 PSNs each), a WRITE, a READ of 4 KiB lost (193..=196), a WRITE (a gap of 4),
    // a READ of 64 KiB whose next WRITE is 2 PSNs late (hidden in the READ's window), a
    // go-back-N resend of that READ, a WRITE, and a READ of 0 bytes (one PSN) with a WRITE after
    // it. The responses' key sees only the READ responses' PSNs: a jump wherever the requester
    // sent other requests.
    let mut f = Vec::new();
    let read = |f: &mut Vec<Vec<u8>>, p: u32, len: u32| {
        f.push(Roce::v4(A, B, 0x11, p).read(len).frame());
        let n = (len as usize).div_ceil(1024).max(1) as u32;
        for i in 0..n {
            let op = match (i, n) {
                (_, 1) => 0x10,
                (0, _) => 0x0d,
                (i, n) if i == n - 1 => 0x0f,
                _ => 0x0e,
            };
            let pl = (len as usize - (i as usize * 1024).min(len as usize)).min(1024);
            f.push(
                Roce::v4(B, A, 0x22, (p + i) & 0xff_ffff)
                    .read_response(op, pl)
                    .frame(),
            );
        }
    };
    for p in [0, 64, 128] {
        read(&mut f, p, 65536);
    }
    f.push(Roce::v4(A, B, 0x11, 192).frame());
    f.push(Roce::v4(A, B, 0x11, 197).frame());
    read(&mut f, 198, 65536);
    f.push(Roce::v4(A, B, 0x11, 198 + 64 + 2).frame());
    f.push(Roce::v4(A, B, 0x11, 198).read(65536).frame());
    f.push(Roce::v4(A, B, 0x11, 265).frame());
    read(&mut f, 266, 0);
    f.push(Roce::v4(A, B, 0x11, 267).frame());
    v.push(case("rdma_read", f));

    // RNR NAK then a retry of the same PSN.
    let mut f = exchange(&[0, 1, 2], 100);
    f.push(Roce::v4(B, A, 0x22, 3).ack(0x20 | 0x0e).frame());
    f.push(Roce::v4(A, B, 0x11, 3).frame());
    f.push(Roce::v4(A, B, 0x11, 3).frame());
    f.push(Roce::v4(B, A, 0x22, 3).ack(0x1f).frame());
    v.push(case("rnr_retry", f));

    // Duplicate ACKs.
    let mut f = exchange(&[0, 1, 2, 3], 100);
    for _ in 0..5 {
        f.push(Roce::v4(B, A, 0x22, 3).ack(0x1f).frame());
    }
    v.push(case("dup_acks", f));

    // ECN CE on data, answered by CNPs to the sender's QP.
    let mut f = Vec::new();
    for p in 0..20u32 {
        let ecn = if p % 3 == 0 { 3 } else { 2 };
        f.push(Roce::v4(A, B, 0x11, p).mark(26, ecn).frame());
        if ecn == 3 {
            f.push(Roce::v4(B, A, 0x22, 0).cnp().frame());
        }
    }
    v.push(case("ecn_ce_cnp", f));

    // Not-ECT data.
    v.push(case(
        "not_ect",
        (0..10)
            .map(|p| Roce::v4(A, B, 0x11, p).mark(26, 0).frame())
            .collect(),
    ));

    // DSCP and PCP bleached (DSCP 0, priority 0) and untagged.
    let mut f: Vec<Vec<u8>> = (0..10)
        .map(|p| {
            Roce::v4(A, B, 0x11, p)
                .mark(0, 2)
                .tags(&[(0x8100, 0)])
                .frame()
        })
        .collect();
    f.extend((10..15).map(|p| Roce::v4(A, B, 0x11, p).mark(0, 2).tags(&[]).frame()));
    v.push(case("bleached", f));

    // CNPs on the data class (DSCP 26, priority 3).
    let f = (0..6)
        .map(|_| {
            Roce::v4(B, A, 0x22, 0)
                .cnp()
                .mark(26, 2)
                .tags(&[(0x8100, 3)])
                .frame()
        })
        .collect();
    v.push(case("cnp_on_data_class", f));

    // PFC: XOFF/XON on priority 3, quanta on disabled priorities, XOFF on priority 0, other
    // opcode.
    let mut f = Vec::new();
    for i in 0..10u16 {
        f.push(pfc(MAC_A, 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]));
        f.push(pfc(MAC_A, 1 << 3, [0, 0, 0, 0, 0, 0, 0, 0]));
        f.push(pfc(MAC_B, 1 << 3, [9, 9, 9, 100 + i, 9, 9, 9, 9]));
    }
    f.push(pfc(MAC_B, 0x09, [500, 0, 0, 0, 0, 0, 0, 0]));
    let mut other = pause(MAC_A, 0);
    other[15] = 0x02; // opcode 0x0002 (GATE-ish): other MAC control
    f.push(other);
    v.push(case("pfc", f));

    // PFC storm: 2000 XOFF frames on priority 3 at 1 per 0.5 ms.
    let mut c = case(
        "pfc_storm",
        (0..2000)
            .map(|_| pfc(MAC_B, 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]))
            .collect(),
    );
    c.recs = seq(c.recs.into_iter().map(|r| r.data).collect(), 500_000);
    v.push(c);

    // 802.3x PAUSE.
    v.push(case(
        "pause_8023x",
        vec![pause(MAC_A, 0xffff), pause(MAC_A, 0), pause(MAC_B, 300)],
    ));

    // IPv6 RoCE.
    let a6: IpAddr = "fd77::1".parse().unwrap();
    let b6: IpAddr = "fd77::2".parse().unwrap();
    let mut f = Vec::new();
    for p in 0..12u32 {
        let mut r = Roce::v4(A, B, 0x55, p);
        r.src = a6;
        r.dst = b6;
        if p == 5 {
            r.ecn = 3;
        }
        f.push(r.frame());
        let mut k = Roce::v4(B, A, 0x66, p).ack(0x1f);
        k.src = b6;
        k.dst = a6;
        f.push(k.frame());
    }
    v.push(case("ipv6", f));

    // QinQ: 802.1ad S-tag priority 5 over a C-tag priority 3; and 0x9100.
    let mut f: Vec<Vec<u8>> = (0..8)
        .map(|p| {
            Roce::v4(A, B, 0x11, p)
                .tags(&[(0x88a8, 5), (0x8100, 3)])
                .frame()
        })
        .collect();
    f.extend((8..12).map(|p| {
        Roce::v4(A, B, 0x11, p)
            .tags(&[(0x9100, 1), (0x8100, 3)])
            .frame()
    }));
    v.push(case("qinq", f));

    // IPv4 options.
    let f = (0..8)
        .map(|p| {
            let mut r = Roce::v4(A, B, 0x11, p);
            r.ip_options = if p % 2 == 0 { 4 } else { 12 };
            r.frame()
        })
        .collect();
    v.push(case("ipv4_options", f));

    // Fragments (first with MF, a later one with an offset) between whole packets.
    let mut f = vec![Roce::v4(A, B, 0x11, 0).frame()];
    let mut r = Roce::v4(A, B, 0x11, 1);
    r.frag = Some((true, 0));
    f.push(r.frame());
    let mut r = Roce::v4(A, B, 0x11, 1);
    r.frag = Some((false, 128));
    f.push(r.frame());
    f.push(Roce::v4(A, B, 0x11, 2).frame());
    v.push(case("fragments", f));

    // Short BTH (UDP payload 8 and 11 bytes), garbage on 4791, UDP source 4791 only, runts.
    let mut f = vec![
        udp_frame(A, B, 50000, 4791, &[0x0a; 8]),
        udp_frame(A, B, 50000, 4791, &[0x0a; 11]),
        udp_frame(A, B, 4791, 50000, &[0u8; 40]),
        vec![0xffu8; 10],
    ];
    let mut x: u32 = 0x1234_5678;
    for n in [20usize, 64, 200, 333] {
        let g: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        f.push(udp_frame(A, B, 50000, 4791, &g));
    }
    f.push(udp_frame(
        A,
        B,
        50000,
        53,
        b"not roce at all, a dns-ish payload",
    ));
    v.push(case("garbage_short_bth", f));

    // Snaplen cuts: 128-byte snaplen (as switch mirrors truncate) and one cut inside the BTH.
    let mut c = case("snaplen_128", exchange(&(0..10).collect::<Vec<_>>(), 2));
    c.snaplen = 128;
    v.push(c);
    let mut c = case("snaplen_in_bth", exchange(&(0..4).collect::<Vec<_>>(), 100));
    c.snaplen = 14 + 4 + 20 + 8 + 6;
    v.push(c);

    // RoCE from UDP source port 69 (old soft-RoCE captures).
    let mut c = case(
        "low_sport",
        (0..10u32)
            .flat_map(|p| {
                [
                    Roce::v4(A, B, 0x11, p).sport(69).frame(),
                    Roce::v4(B, A, 0x22, p).sport(69).ack(0x1f).frame(),
                ]
            })
            .collect(),
    );
    c.decode_as_port = Some(69);
    v.push(c);

    // ICRC: a correct stream and one with bad ICRCs every other packet.
    let f = (0..10u32)
        .map(|p| {
            let mut r = Roce::v4(A, B, 0x11, p);
            r.bad_icrc = p % 2 == 1;
            r.frame()
        })
        .collect();
    v.push(case("bad_icrc", f));

    // ERSPAN II and III mirror traffic.
    let f = (0..10u32)
        .map(|p| erspan(&Roce::v4(A, B, 0x11, p).frame(), p % 2 == 1))
        .collect();
    v.push(case("erspan", f));

    // Suspect packets: TVer != 0 and an undefined opcode.
    let mut f: Vec<Vec<u8>> = (0..4).map(|p| Roce::v4(A, B, 0x11, p).frame()).collect();
    let mut r = Roce::v4(A, B, 0x11, 4);
    r.tver = 1;
    f.push(r.frame());
    f.push(Roce::v4(A, B, 0x11, 5).opcode(0x1c).frame());
    v.push(case("suspect", f));

    // Linux cooked captures (SLL and SLL2), untagged, one direction outgoing.
    // A->C frames keep their 802.1Q tag inside the cooked capture (protocol 0x8100).
    let frames: Vec<(Vec<u8>, bool)> = (0..10u32)
        .flat_map(|p| {
            [
                (Roce::v4(A, B, 0x11, p).tags(&[]).frame(), true),
                (Roce::v4(B, A, 0x22, p).tags(&[]).ack(0x1f).frame(), false),
                (
                    Roce::v4(A, C, 0x77, p)
                        .tags(&[(0x8100, 5)])
                        .payload(64)
                        .frame(),
                    false,
                ),
            ]
        })
        .collect();
    let mut c = case("sll", frames.iter().map(|(f, o)| to_sll(f, *o)).collect());
    c.linktype = LINKTYPE_SLL;
    v.push(c);
    let mut c = case("sll2", frames.iter().map(|(f, o)| to_sll2(f, *o)).collect());
    c.linktype = LINKTYPE_SLL2;
    v.push(c);

    // pcapng, two interfaces with different time resolutions (ns and 2^-20 s), nanosecond
    // pcap.
    let mut recs = Vec::new();
    for p in 0..10u32 {
        recs.push(Rec {
            ts_ns: T0 + p as u64 * 1000,
            data: Roce::v4(A, B, 0x11, p).frame(),
            iface: 0,
            epb_flags: 0,
        });
        recs.push(Rec {
            ts_ns: T0 + p as u64 * 1000 + 500,
            data: Roce::v4(B, A, 0x22, p).ack(0x1f).frame(),
            iface: 1,
            epb_flags: 0,
        });
    }
    v.push(Case {
        name: "pcapng_two_ifaces",
        linktype: LINKTYPE_ETHERNET,
        snaplen: 65535,
        pcapng: Some(vec![
            (LINKTYPE_ETHERNET, "swp1", 9),
            (LINKTYPE_ETHERNET, "swp2", 0x80 | 20),
        ]),
        nanos: false,
        recs,
        decode_as_port: None,
    });
    // pcapng with epb_flags: what this host sent (outbound) and received (inbound).
    let mut recs = seq(exchange(&(0..10).collect::<Vec<_>>(), 2), 1000);
    for r in &mut recs {
        // Requests A->B leave this host, ACKs B->A arrive.
        r.epb_flags = if r.data.len() > 100 { 2 } else { 1 };
    }
    v.push(Case {
        name: "pcapng_direction",
        linktype: LINKTYPE_ETHERNET,
        snaplen: 65535,
        pcapng: Some(vec![(LINKTYPE_ETHERNET, "mlx5_0", 6)]),
        nanos: false,
        recs,
        decode_as_port: None,
    });
    let mut c = case("nanos", exchange(&(0..10).collect::<Vec<_>>(), 2));
    c.nanos = true;
    c.recs = seq(c.recs.into_iter().map(|r| r.data).collect(), 333);
    v.push(c);
    v
}

/// Writes every case into `dir`; returns (case, path).
pub fn write_corpus(dir: &Path) -> std::io::Result<Vec<(Case, PathBuf)>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for c in corpus() {
        let p = c.write(dir)?;
        out.push((c, p));
    }
    Ok(out)
}

/// The fields tshark extracts for the tshark comparison test, and the same set the replay
/// benchmark times tshark on.
pub const TSHARK_FIELDS: &[&str] = &[
    "frame.len",
    "frame.cap_len",
    "frame.time_epoch",
    "frame.interface_name",
    "frame.packet_flags_direction",
    "sll.pkttype",
    "ieee8021ad.priority",
    "vlan.priority",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "ip.len",
    "ipv6.plen",
    "ip.flags.mf",
    "ip.frag_offset",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "ipv6.tclass",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "infiniband.bth.opcode",
    "infiniband.bth.tver",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.aeth.syndrome",
    "infiniband.reth.dmalen",
    "macc.opcode",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c0",
    "macc.cbfc.pause_time.c1",
    "macc.cbfc.pause_time.c2",
    "macc.cbfc.pause_time.c3",
    "macc.cbfc.pause_time.c4",
    "macc.cbfc.pause_time.c5",
    "macc.cbfc.pause_time.c6",
    "macc.cbfc.pause_time.c7",
    "macc.pause_time",
];
