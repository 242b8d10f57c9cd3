//! Streaming capture reader: pcap (any byte order, microsecond or nanosecond, the "modified"
//! variant) and pcapng (every interface's own time resolution and offset) over any [`Read`],
//! through pcap-parser's streaming readers. Nothing is read ahead beyond one buffer, so standard
//! input works as a live stream. The byte offset of every record is counted here, so damage is
//! reported where it is.

use std::cell::RefCell;
use std::io::{self, Read};
use std::rc::Rc;

use pcap_parser::pcapng::{
    Block, EnhancedPacketBlock, InterfaceDescriptionBlock, SimplePacketBlock,
};
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{LegacyPcapReader, PcapBlockOwned, PcapError, PcapNGReader};

use super::ReplayError;
use super::link_layer::LinkType;

/// Initial buffer; grown up to [`MAX_RECORD`] for a larger record.
const BUF_CAPACITY: usize = 1 << 20;
/// Largest record (pcap record or pcapng block) accepted; larger is treated as corruption.
pub const MAX_RECORD: usize = 64 << 20;

/// One capture interface (the pcap file, or one pcapng Interface Description Block).
#[derive(Clone, Debug)]
pub struct Iface {
    pub link: LinkType,
    /// pcapng `if_name`, when present.
    pub name: Option<String>,
    /// Index in the capture: 0 for pcap, the IDB's index for pcapng.
    pub index: usize,
    /// pcapng section number (0 for pcap).
    pub section: usize,
    pub snaplen: u32,
    /// Timestamp units per second and offset in seconds.
    units_per_s: u64,
    offset_s: i64,
}

/// One captured frame as the capture stored it.
pub struct Record<'a> {
    /// Index into the interfaces reported so far (see [`Item::Iface`]).
    pub iface: usize,
    pub ts_ns: u64,
    pub data: &'a [u8],
    /// Original length on the wire (at least `data.len()`).
    pub orig_len: u32,
    /// pcapng `epb_flags` direction: Some(true) outbound, Some(false) inbound.
    pub outbound: Option<bool>,
    /// Byte offset of the record in the input.
    pub offset: u64,
}

/// What the reader hands to its consumer.
pub enum Item<'a> {
    /// A new capture interface; its index is the position in the sequence of these items.
    Iface(&'a Iface),
    Record(Record<'a>),
}

/// Counts bytes read and keeps the I/O error pcap-parser drops.
struct Counting<R> {
    inner: R,
    prefix: Vec<u8>,
    prefix_pos: usize,
    err: Rc<RefCell<Option<io::Error>>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.prefix_pos < self.prefix.len() {
            let n = (self.prefix.len() - self.prefix_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.prefix[self.prefix_pos..self.prefix_pos + n]);
            self.prefix_pos += n;
            return Ok(n);
        }
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let kind = e.kind();
                    *self.err.borrow_mut() = Some(e);
                    return Err(io::Error::from(kind));
                }
                Ok(n) => return Ok(n),
            }
        }
    }
}

/// Reads until `buf` holds `want` bytes or the input ends.
fn fill_to<R: Read>(r: &mut R, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
    while buf.len() < want {
        let mut chunk = vec![0u8; want - buf.len()];
        match r.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

const PCAPNG_SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Reads a whole capture, calling `sink` for every interface and record, in order. Returns the
/// number of bytes consumed. On damage, everything before it has been passed to `sink`.
pub fn read_capture<R, F>(file: &str, input: R, mut sink: F) -> Result<u64, ReplayError>
where
    R: Read,
    F: FnMut(Item<'_>) -> Result<(), ReplayError>,
{
    let corrupt = |offset: u64, what: String| ReplayError::Corrupt {
        file: file.to_string(),
        offset,
        what,
    };
    let io_err = |offset: u64, e: io::Error| ReplayError::Io {
        file: file.to_string(),
        offset,
        source: e,
    };
    // Read the file header (pcap: 24 bytes; pcapng: the whole Section Header Block) before
    // handing the input to pcap-parser, whose constructors parse it from a single read().
    let mut input = input;
    let mut prefix = Vec::with_capacity(64);
    fill_to(&mut input, &mut prefix, 12).map_err(|e| io_err(0, e))?;
    if prefix.is_empty() {
        return Err(corrupt(0, "empty input: no pcap or pcapng header".into()));
    }
    let ng = prefix.len() >= 4 && prefix[..4] == PCAPNG_SHB;
    if ng {
        if prefix.len() < 12 {
            return Err(corrupt(0, "pcapng section header block cut short".into()));
        }
        let le = prefix[8..12] == [0x4d, 0x3c, 0x2b, 0x1a];
        let b = [prefix[4], prefix[5], prefix[6], prefix[7]];
        let len = if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        } as usize;
        if !(28..=MAX_RECORD).contains(&len) {
            return Err(corrupt(
                0,
                format!("pcapng section header block length {len} is invalid"),
            ));
        }
        fill_to(&mut input, &mut prefix, len).map_err(|e| io_err(0, e))?;
    } else {
        fill_to(&mut input, &mut prefix, 24).map_err(|e| io_err(0, e))?;
        let magic = u32::from_le_bytes([
            prefix[0],
            prefix.get(1).copied().unwrap_or(0),
            prefix.get(2).copied().unwrap_or(0),
            prefix.get(3).copied().unwrap_or(0),
        ]);
        let known = [
            0xa1b2_c3d4u32,
            0xa1b2_3c4d,
            0xa1b2_cd34,
            0xd4c3_b2a1,
            0x4d3c_b2a1,
        ];
        if prefix.len() < 4 || !known.contains(&magic) {
            return Err(corrupt(
                0,
                format!("not a pcap or pcapng file (magic {magic:#010x})"),
            ));
        }
        if prefix.len() < 24 {
            return Err(corrupt(0, "pcap file header cut short".into()));
        }
    }
    let err = Rc::new(RefCell::new(None));
    let reader = Counting {
        inner: input,
        prefix,
        prefix_pos: 0,
        err: err.clone(),
    };
    if ng {
        let r = PcapNGReader::new(BUF_CAPACITY, reader)
            .map_err(|e| corrupt(0, format!("pcapng header: {e:?}")))?;
        drive(file, r, true, &err, &mut sink)
    } else {
        let r = LegacyPcapReader::new(BUF_CAPACITY, reader)
            .map_err(|e| corrupt(0, format!("pcap header: {e:?}")))?;
        drive(file, r, false, &err, &mut sink)
    }
}

/// The state of one reading: where it is, the capture interfaces declared so far, and the
/// buffer's growth.
struct Driver<'a> {
    file: &'a str,
    ng: bool,
    err: &'a Rc<RefCell<Option<io::Error>>>,
    offset: u64,
    ifaces: Vec<Iface>,
    /// pcapng: this section's interfaces (IDB index -> position in `ifaces`).
    section_ifaces: Vec<usize>,
    section: usize,
    capacity: usize,
    legacy_ts_ns: bool,
    stalls: u32,
}

fn drive<P, F>(
    file: &str,
    mut r: P,
    ng: bool,
    err: &Rc<RefCell<Option<io::Error>>>,
    sink: &mut F,
) -> Result<u64, ReplayError>
where
    P: PcapReaderIterator,
    F: FnMut(Item<'_>) -> Result<(), ReplayError>,
{
    let mut d = Driver {
        file,
        ng,
        err,
        offset: 0,
        ifaces: Vec::new(),
        section_ifaces: Vec::new(),
        section: 0,
        capacity: BUF_CAPACITY,
        legacy_ts_ns: false,
        stalls: 0,
    };
    loop {
        match r.next() {
            Ok((len, block)) => {
                d.stalls = 0;
                d.block(block, sink)?;
                r.consume(len);
                d.offset += len as u64;
            }
            Err(PcapError::Eof) => break,
            Err(e) => {
                let fault = Fault::of(e, ng);
                d.not_a_block(fault, &mut r)?
            }
        }
    }
    Ok(d.offset)
}

impl Driver<'_> {
    fn corrupt(&self, what: String) -> ReplayError {
        ReplayError::Corrupt {
            file: self.file.to_string(),
            offset: self.offset,
            what,
        }
    }

    /// The I/O error pcap-parser reported without its cause (kept by `Counting`).
    fn io_error(&self) -> ReplayError {
        ReplayError::Io {
            file: self.file.to_string(),
            offset: self.offset,
            source: self
                .err
                .borrow_mut()
                .take()
                .unwrap_or_else(|| io::Error::other("read failed")),
        }
    }

    fn unsupported(&self, linktype: u32, iface: usize) -> ReplayError {
        ReplayError::UnsupportedLinkType {
            file: self.file.to_string(),
            linktype,
            iface,
        }
    }

    /// One block (pcap: the header or a record).
    #[inline]
    fn block<F>(&mut self, block: PcapBlockOwned<'_>, sink: &mut F) -> Result<(), ReplayError>
    where
        F: FnMut(Item<'_>) -> Result<(), ReplayError>,
    {
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                self.legacy_ts_ns = h.is_nanosecond_precision();
                let lt = (h.network.0 as u32) & 0x0fff_ffff;
                let link = LinkType::from_number(lt).ok_or_else(|| self.unsupported(lt, 0))?;
                self.ifaces.push(Iface {
                    link,
                    name: None,
                    index: 0,
                    section: 0,
                    snaplen: h.snaplen,
                    units_per_s: if self.legacy_ts_ns {
                        1_000_000_000
                    } else {
                        1_000_000
                    },
                    offset_s: 0,
                });
                sink(Item::Iface(&self.ifaces[0]))
            }
            PcapBlockOwned::Legacy(b) => {
                let sub = if self.legacy_ts_ns { 1 } else { 1000 };
                let ts_ns = (b.ts_sec as u64) * 1_000_000_000 + b.ts_usec as u64 * sub;
                let data = &b.data[..(b.caplen as usize).min(b.data.len())];
                sink(Item::Record(Record {
                    iface: 0,
                    ts_ns,
                    data,
                    orig_len: b.origlen.max(data.len() as u32),
                    outbound: None,
                    offset: self.offset,
                }))
            }
            PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                if self.offset != 0 {
                    self.section += 1;
                }
                self.section_ifaces.clear();
                Ok(())
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => self.idb(&idb, sink),
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => self.epb(&epb, sink),
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => self.spb(&spb, sink),
            PcapBlockOwned::NG(_) => Ok(()),
        }
    }

    /// pcapng interface description: a new capture interface of this section.
    fn idb<F>(
        &mut self,
        idb: &InterfaceDescriptionBlock<'_>,
        sink: &mut F,
    ) -> Result<(), ReplayError>
    where
        F: FnMut(Item<'_>) -> Result<(), ReplayError>,
    {
        let lt = idb.linktype.0 as u32;
        let index = self.section_ifaces.len();
        let link = LinkType::from_number(lt).ok_or_else(|| self.unsupported(lt, index))?;
        let units_per_s = ts_resolution(idb.if_tsresol).ok_or_else(|| {
            self.corrupt(format!(
                "interface {index}: invalid if_tsresol {:#04x}",
                idb.if_tsresol
            ))
        })?;
        let name = idb.if_name().and_then(|n| n.ok()).map(str::to_string);
        self.ifaces.push(Iface {
            link,
            name,
            index,
            section: self.section,
            snaplen: idb.snaplen,
            units_per_s,
            offset_s: idb.if_tsoffset,
        });
        self.section_ifaces.push(self.ifaces.len() - 1);
        sink(Item::Iface(&self.ifaces[self.ifaces.len() - 1]))
    }

    /// pcapng enhanced packet: a record of a declared interface, with its direction flag.
    #[inline]
    fn epb<F>(&mut self, epb: &EnhancedPacketBlock<'_>, sink: &mut F) -> Result<(), ReplayError>
    where
        F: FnMut(Item<'_>) -> Result<(), ReplayError>,
    {
        let Some(&i) = self.section_ifaces.get(epb.if_id as usize) else {
            return Err(self.corrupt(format!(
                "packet block names interface {} which has no description block",
                epb.if_id
            )));
        };
        let ifc = &self.ifaces[i];
        let data = epb.packet_data();
        let ts = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
        let ts_ns = ts_to_ns(ts, ifc.units_per_s, ifc.offset_s);
        // epb_flags (option 2): bits 0-1 = 01 inbound, 10 outbound.
        let outbound = epb
            .options
            .iter()
            .find(|o| o.code.0 == 2 && o.value.len() >= 4)
            .and_then(|o| {
                let v = o.value();
                let f = if epb.big_endian() {
                    u32::from_be_bytes([v[0], v[1], v[2], v[3]])
                } else {
                    u32::from_le_bytes([v[0], v[1], v[2], v[3]])
                };
                match f & 3 {
                    1 => Some(false),
                    2 => Some(true),
                    _ => None,
                }
            });
        sink(Item::Record(Record {
            iface: i,
            ts_ns,
            data,
            orig_len: epb.origlen.max(data.len() as u32),
            outbound,
            offset: self.offset,
        }))
    }

    /// pcapng simple packet: a record of the section's first interface, cut to its snaplen.
    fn spb<F>(&mut self, spb: &SimplePacketBlock<'_>, sink: &mut F) -> Result<(), ReplayError>
    where
        F: FnMut(Item<'_>) -> Result<(), ReplayError>,
    {
        let Some(&i) = self.section_ifaces.first() else {
            return Err(
                self.corrupt("simple packet block before any interface description block".into())
            );
        };
        let snap = self.ifaces[i].snaplen;
        let mut data = spb.packet_data();
        if snap != 0 && data.len() > snap as usize {
            data = &data[..snap as usize];
        }
        sink(Item::Record(Record {
            iface: i,
            ts_ns: 0,
            data,
            orig_len: spb.origlen.max(data.len() as u32),
            outbound: None,
            offset: self.offset,
        }))
    }

    /// What pcap-parser says instead of a block: more input needed (read it), a record larger
    /// than the buffer (grow it, bounded), or damage (an error naming the offset).
    fn not_a_block<P: PcapReaderIterator>(
        &mut self,
        fault: Fault,
        r: &mut P,
    ) -> Result<(), ReplayError> {
        let unit = if self.ng { "block" } else { "record" };
        match fault {
            Fault::Incomplete => {
                let before = r.data().len();
                r.refill().map_err(|_| self.io_error())?;
                // A read that brings nothing new (and is not the end, which the next call
                // reports) repeated many times means the reader cannot make progress.
                if r.data().len() == before && !r.reader_exhausted() {
                    self.stalls += 1;
                    if self.stalls > 1000 {
                        return Err(self.corrupt("input makes no progress".into()));
                    }
                } else {
                    self.stalls = 0;
                }
                Ok(())
            }
            Fault::BufferTooSmall => {
                if self.capacity >= MAX_RECORD {
                    return Err(self.corrupt(format!(
                        "record longer than {} MiB: corrupt length field",
                        MAX_RECORD >> 20
                    )));
                }
                self.capacity = (self.capacity * 4).min(MAX_RECORD);
                r.grow(self.capacity);
                r.refill().map_err(|_| self.io_error())
            }
            Fault::UnexpectedEof => {
                let have = r.data().len();
                Err(self.corrupt(format!(
                    "truncated: the {unit} starting here is incomplete ({have} bytes left)"
                )))
            }
            Fault::ReadError => Err(self.io_error()),
            Fault::Damage(what) => Err(self.corrupt(what)),
        }
    }
}

/// A pcap-parser error, owned (it borrows the reader's buffer, which handling it refills).
enum Fault {
    Incomplete,
    BufferTooSmall,
    UnexpectedEof,
    ReadError,
    Damage(String),
}

impl Fault {
    fn of(e: PcapError<&[u8]>, ng: bool) -> Fault {
        let unit = if ng { "block" } else { "record" };
        match e {
            PcapError::Incomplete(_) => Fault::Incomplete,
            PcapError::BufferTooSmall => Fault::BufferTooSmall,
            PcapError::UnexpectedEof => Fault::UnexpectedEof,
            PcapError::ReadError => Fault::ReadError,
            PcapError::NomError(_, k) | PcapError::OwnedNomError(_, k) => {
                Fault::Damage(format!("invalid {unit} ({k:?})"))
            }
            PcapError::HeaderNotRecognized => Fault::Damage("header not recognized".into()),
            other => Fault::Damage(format!("{other:?}")),
        }
    }
}

/// `if_tsresol` to units per second (pcap-parser 0.17 rejects every power-of-two resolution
/// above 2^-63 before masking the mode bit, so 0x94 = 2^-20 s would fail there).
fn ts_resolution(r: u8) -> Option<u64> {
    if r & 0x80 != 0 {
        let e = r & 0x7f;
        (e <= 63).then(|| 1u64 << e)
    } else {
        (r <= 19).then(|| 10u64.pow(r as u32))
    }
}

/// A capture already in memory (a memory-mapped file): the same block parsers as the streaming
/// readers, without copying the data through a buffer.
struct SliceReader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Legacy pcap: the header and the record parser for its byte order / variant.
    legacy: Option<(pcap_parser::PcapHeader, LegacyParse)>,
    big_endian: bool,
}

type LegacyParse =
    for<'b> fn(
        &'b [u8],
    )
        -> nom::IResult<&'b [u8], pcap_parser::LegacyPcapBlock<'b>, PcapError<&'b [u8]>>;

use pcap_parser::nom;

impl PcapReaderIterator for SliceReader<'_> {
    fn next(&mut self) -> Result<(usize, PcapBlockOwned<'_>), PcapError<&[u8]>> {
        let data = &self.data[self.pos..];
        if let Some((h, parse)) = &self.legacy {
            if self.pos == 0 {
                return Ok((h.size(), PcapBlockOwned::from(h.clone())));
            }
            if data.is_empty() {
                return Err(PcapError::Eof);
            }
            return match parse(data) {
                Ok((rem, b)) => Ok((data.len() - rem.len(), PcapBlockOwned::from(b))),
                Err(nom::Err::Incomplete(_)) => Err(PcapError::UnexpectedEof),
                Err(nom::Err::Error(e)) | Err(nom::Err::Failure(e)) => Err(e),
            };
        }
        if data.is_empty() {
            return Err(PcapError::Eof);
        }
        let parse = if self.big_endian {
            pcap_parser::pcapng::parse_block_be
        } else {
            pcap_parser::pcapng::parse_block_le
        };
        match parse(data) {
            Ok((rem, b)) => {
                if let Block::SectionHeader(ref shb) = b {
                    self.big_endian = shb.big_endian();
                }
                Ok((data.len() - rem.len(), PcapBlockOwned::from(b)))
            }
            Err(nom::Err::Incomplete(_)) => Err(PcapError::UnexpectedEof),
            Err(nom::Err::Error(e)) | Err(nom::Err::Failure(e)) => Err(e),
        }
    }
    fn consume(&mut self, offset: usize) {
        self.pos = (self.pos + offset).min(self.data.len());
    }
    fn consume_noshift(&mut self, offset: usize) {
        self.consume(offset)
    }
    fn consumed(&self) -> usize {
        self.pos
    }
    fn refill(&mut self) -> Result<(), PcapError<&[u8]>> {
        Ok(())
    }
    fn position(&self) -> usize {
        self.pos
    }
    fn grow(&mut self, _new_size: usize) -> bool {
        true
    }
    fn data(&self) -> &[u8] {
        &self.data[self.pos..]
    }
    fn reader_exhausted(&self) -> bool {
        true
    }
}

/// Like [`read_capture`], over a capture held in memory.
pub fn read_capture_slice<F>(file: &str, data: &[u8], mut sink: F) -> Result<u64, ReplayError>
where
    F: FnMut(Item<'_>) -> Result<(), ReplayError>,
{
    let corrupt = |what: String| ReplayError::Corrupt {
        file: file.to_string(),
        offset: 0,
        what,
    };
    if data.is_empty() {
        return Err(corrupt("empty input: no pcap or pcapng header".into()));
    }
    let err = Rc::new(RefCell::new(None));
    if data.len() >= 4 && data[..4] == PCAPNG_SHB {
        let r = SliceReader {
            data,
            pos: 0,
            legacy: None,
            big_endian: false,
        };
        return drive(file, r, true, &err, &mut sink);
    }
    let h = match pcap_parser::parse_pcap_header(data) {
        Ok((_, h)) => h,
        Err(nom::Err::Incomplete(_)) => return Err(corrupt("pcap file header cut short".into())),
        Err(_) => {
            let mut m = [0u8; 4];
            let n = data.len().min(4);
            m[..n].copy_from_slice(&data[..n]);
            return Err(corrupt(format!(
                "not a pcap or pcapng file (magic {:#010x})",
                u32::from_le_bytes(m)
            )));
        }
    };
    let parse: LegacyParse = if h.is_modified_format() {
        pcap_parser::parse_pcap_frame_modified
    } else if h.is_bigendian() {
        pcap_parser::parse_pcap_frame_be
    } else {
        pcap_parser::parse_pcap_frame
    };
    let r = SliceReader {
        data,
        pos: 0,
        legacy: Some((h, parse)),
        big_endian: false,
    };
    drive(file, r, false, &err, &mut sink)
}

/// Timestamp in interface units to nanoseconds since the epoch.
fn ts_to_ns(ts: u64, units_per_s: u64, offset_s: i64) -> u64 {
    let units = units_per_s.max(1) as u128;
    let ns = (ts as u128 / units) * 1_000_000_000 + (ts as u128 % units) * 1_000_000_000 / units;
    let ns = ns as i128 + offset_s as i128 * 1_000_000_000;
    ns.clamp(0, u64::MAX as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_resolutions() {
        assert_eq!(ts_to_ns(1_500_000, 1_000_000, 0), 1_500_000_000);
        assert_eq!(ts_to_ns(1_500_000_001, 1_000_000_000, 0), 1_500_000_001);
        // 2^-10 s units.
        assert_eq!(ts_to_ns(1024 + 512, 1024, 0), 1_500_000_000);
        assert_eq!(ts_to_ns(1, 1000, 10), 10_001_000_000);
        assert_eq!(ts_resolution(0x94), Some(1 << 20));
        assert_eq!(ts_resolution(6), Some(1_000_000));
        assert_eq!(ts_resolution(20), None);
    }
}
