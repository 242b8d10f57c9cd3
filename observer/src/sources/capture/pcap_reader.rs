//! Streaming capture reader: pcap (both byte orders, microsecond or nanosecond, the "modified"
//! variant in both byte orders, the FCS length of the link-type field) and pcapng (every
//! interface's own time resolution, offset and FCS length) over any [`Read`]: pcapng through
//! pcap-parser's streaming reader, pcap through [`LegacyStream`] (pcap-parser's legacy reader
//! knows no big-endian "modified" pcap). Nothing is read ahead beyond one buffer, so standard
//! input works as a live stream. The byte offset of every record is counted here, so damage is
//! reported where it is. Trailing FCS bytes are removed here, before any counting.

use std::cell::RefCell;
use std::io::{self, Read};
use std::rc::Rc;

use pcap_parser::pcapng::{
    Block, EnhancedPacketBlock, InterfaceDescriptionBlock, SimplePacketBlock,
};
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{LegacyPcapBlock, PcapBlockOwned, PcapError, PcapHeader, PcapNGReader};

use super::ReplayError;
use super::link_layer::LinkType;

/// Initial buffer; grown up to [`MAX_RECORD`] for a larger record.
const BUF_CAPACITY: usize = 1 << 20;
/// Largest record (pcap record or pcapng block) accepted; larger is treated as corruption.
pub const MAX_RECORD: usize = 64 << 20;
/// Most capture interfaces (pcapng Interface Description Blocks) one input may declare; beyond
/// it the input is rejected as corrupt (each declared interface costs memory here even without
/// a packet).
pub const MAX_IFACES: usize = 65_536;
/// Longest capture interface name kept (characters); longer names are cut.
pub const MAX_NAME_CHARS: usize = 64;

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
    /// Bytes of FCS at the end of every frame (pcap link-type field, pcapng `if_fcslen`),
    /// removed before the frame is handed on.
    pub fcs_len: u32,
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
    /// Original length on the wire without the FCS (at least `data.len()`).
    pub orig_len: u32,
    /// pcapng `epb_flags` direction: Some(true) outbound, Some(false) inbound.
    pub outbound: Option<bool>,
    /// Byte offset of the record in the input.
    pub offset: u64,
    /// The first bytes of a record a few records ahead in the same input (legacy pcap only;
    /// empty when unknown): a hint to prefetch the state its packet will update. Nothing but
    /// a hint: it may be of another interface or cut short.
    pub ahead: &'a [u8],
}

/// How many records ahead [`Record::ahead`] is.
const AHEAD_RECORDS: usize = 4;
/// How many bytes of it are copied (the headers up to the BTH of a tagged, encapsulated frame).
const AHEAD_BYTES: usize = 128;

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
        if prefix.len() < 4 || LegacyFormat::of(magic).is_none() {
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
        let r = LegacyStream::new(BUF_CAPACITY, reader).map_err(|e| match e {
            Some(e) => io_err(0, e),
            None => corrupt(0, "pcap file header cut short".into()),
        })?;
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
    /// Legacy pcap: header read, and its byte order (for [`Record::ahead`]).
    legacy_known: bool,
    legacy_be: bool,
    ahead_buf: [u8; AHEAD_BYTES],
    ahead_len: usize,
    /// pcap: FCS bytes at the end of every record.
    legacy_fcs: u32,
    stalls: u32,
    /// pcapng: the current section's byte order.
    big_endian: bool,
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
        legacy_known: false,
        legacy_be: false,
        ahead_buf: [0; AHEAD_BYTES],
        ahead_len: 0,
        legacy_fcs: 0,
        stalls: 0,
        big_endian: false,
    };
    loop {
        if ng && let Some(len) = short_block(r.data(), d.big_endian) {
            return Err(d.corrupt(format!(
                "pcapng block of length {len}: shorter than the 12 bytes every block has"
            )));
        }
        if !ng && d.legacy_known {
            d.peek_ahead(r.data());
        }
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
    /// Copies the start of the legacy record [`AHEAD_RECORDS`] after the one at the start of
    /// `data` into `ahead_buf` (nothing when the buffer does not hold it yet).
    #[inline]
    fn peek_ahead(&mut self, data: &[u8]) {
        self.ahead_len = 0;
        let u32_at = |o: usize| -> Option<u32> {
            let b: [u8; 4] = data.get(o..o + 4)?.try_into().ok()?;
            Some(if self.legacy_be {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            })
        };
        let mut off = 0usize;
        for _ in 0..AHEAD_RECORDS {
            let Some(incl) = u32_at(off + 8) else {
                return;
            };
            off += 16 + incl as usize;
        }
        let Some(incl) = u32_at(off + 8) else {
            return;
        };
        let start = off + 16;
        let end = (start + (incl as usize).min(AHEAD_BYTES)).min(data.len());
        if end > start {
            self.ahead_len = end - start;
            self.ahead_buf[..self.ahead_len].copy_from_slice(&data[start..end]);
        }
    }

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
                self.legacy_be = h.is_bigendian();
                self.legacy_known = true;
                let (lt, fcs_len) = legacy_link(h.network.0 as u32);
                let link = LinkType::from_number(lt).ok_or_else(|| self.unsupported(lt, 0))?;
                self.legacy_fcs = fcs_len;
                self.ifaces.push(Iface {
                    link,
                    name: None,
                    index: 0,
                    section: 0,
                    snaplen: h.snaplen,
                    fcs_len,
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
                let (data, orig_len) = strip_fcs(data, b.origlen, self.legacy_fcs);
                sink(Item::Record(Record {
                    iface: 0,
                    ts_ns,
                    data,
                    orig_len,
                    outbound: None,
                    offset: self.offset,
                    ahead: &self.ahead_buf[..self.ahead_len],
                }))
            }
            PcapBlockOwned::NG(Block::SectionHeader(ref shb)) => {
                self.big_endian = shb.big_endian();
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
        if self.ifaces.len() >= MAX_IFACES {
            return Err(self.corrupt(format!(
                "more than {MAX_IFACES} interface description blocks: refusing the rest"
            )));
        }
        let link = LinkType::from_number(lt).ok_or_else(|| self.unsupported(lt, index))?;
        let units_per_s = ts_resolution(idb.if_tsresol).ok_or_else(|| {
            self.corrupt(format!(
                "interface {index}: invalid if_tsresol {:#04x}",
                idb.if_tsresol
            ))
        })?;
        // if_name (2), as text without control characters, bounded; if_fcslen (13).
        let name = idb
            .options
            .iter()
            .find(|o| o.code.0 == 2)
            .and_then(|o| o.as_bytes().ok())
            .map(|v| sanitize_name(&String::from_utf8_lossy(v)))
            .filter(|n| !n.is_empty());
        let fcs_len = idb
            .options
            .iter()
            .find(|o| o.code.0 == 13)
            .and_then(|o| o.as_bytes().ok())
            .and_then(|v| v.first())
            .map_or(0, |&v| fcslen_option(v));
        self.ifaces.push(Iface {
            link,
            name,
            index,
            section: self.section,
            snaplen: idb.snaplen,
            fcs_len,
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
        // epb_flags (option 2): bits 0-1 = 01 inbound, 10 outbound; bits 5-8 the FCS length
        // in bytes (0: the interface's).
        let flags = epb
            .options
            .iter()
            .find(|o| o.code.0 == 2 && o.value.len() >= 4)
            .map_or(0, |o| {
                let v = o.value();
                if epb.big_endian() {
                    u32::from_be_bytes([v[0], v[1], v[2], v[3]])
                } else {
                    u32::from_le_bytes([v[0], v[1], v[2], v[3]])
                }
            });
        let outbound = match flags & 3 {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        };
        let fcs = match (flags >> 5) & 0xf {
            0 => ifc.fcs_len,
            n => n,
        };
        let (data, orig_len) = strip_fcs(data, epb.origlen, fcs);
        sink(Item::Record(Record {
            iface: i,
            ts_ns,
            data,
            orig_len,
            outbound,
            offset: self.offset,
            ahead: &[],
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
        let (data, orig_len) = strip_fcs(data, spb.origlen, self.ifaces[i].fcs_len);
        sink(Item::Record(Record {
            iface: i,
            ts_ns: 0,
            data,
            orig_len,
            outbound: None,
            offset: self.offset,
            ahead: &[],
        }))
    }

    /// What pcap-parser says instead of a block: more input needed (read it), a record larger
    /// than the buffer (grow it, bounded), or damage (an error naming the offset).
    fn not_a_block<P: PcapReaderIterator>(
        &mut self,
        fault: Fault,
        r: &mut P,
    ) -> Result<(), ReplayError> {
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
            Fault::UnexpectedEof => Err(self.corrupt(self.incomplete(r.data()))),
            Fault::ReadError => Err(self.io_error()),
            Fault::Damage(what) => Err(self.corrupt(what)),
        }
    }
}

impl Driver<'_> {
    /// Why the block (pcapng) or record (pcap) at the start of `rest`, the file's last bytes,
    /// does not fit in them: the file ends inside it (cut short), or its length field is corrupt
    /// (pcapng: a whole block, its trailing length copy included, ends earlier and a whole block
    /// or the end of the file follows; pcap: a length above the snap length or the frame's own
    /// length).
    fn incomplete(&self, rest: &[u8]) -> String {
        let have = rest.len();
        if self.ng {
            let be = if rest.get(..4) == Some(&PCAPNG_SHB[..]) {
                rest.get(8..12) == Some(&[0x1a, 0x2b, 0x3c, 0x4d][..])
            } else {
                self.big_endian
            };
            let u32_at = |o: usize| -> Option<u32> {
                let b: [u8; 4] = rest.get(o..o.checked_add(4)?)?.try_into().ok()?;
                Some(if be {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                })
            };
            let Some(len) = u32_at(4) else {
                return format!(
                    "truncated: the file ends inside a block header ({have} bytes left)"
                );
            };
            // a whole block of `l` bytes at `at`: a plausible length and its trailing copy
            let whole = |at: usize, l: u32| {
                l >= 12
                    && l.is_multiple_of(4)
                    && at.checked_add(l as usize).is_some_and(|e| e <= have)
                    && u32_at(at + l as usize - 4) == Some(l)
            };
            let mut end = 12;
            while end <= have {
                if u32_at(end - 4) == Some(end as u32)
                    && (end == have || u32_at(end + 4).is_some_and(|l| whole(end, l)))
                {
                    return format!(
                        "corrupt block length: the block starting here says {len} bytes, but a \
                         block of {end} bytes ends with its length copy and {} follow",
                        if end == have {
                            "the end of the file".to_string()
                        } else {
                            format!("{} bytes of whole blocks", have - end)
                        }
                    );
                }
                end += 4;
            }
            return format!(
                "truncated: the block starting here is {len} bytes, the file ends {have} bytes \
                 into it"
            );
        }
        let u32_at = |o: usize| -> Option<u32> {
            let b: [u8; 4] = rest.get(o..o + 4)?.try_into().ok()?;
            Some(if self.legacy_be {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            })
        };
        let snap = self.ifaces.first().map_or(0, |i| i.snaplen);
        match (u32_at(8), u32_at(12)) {
            (Some(incl), Some(orig)) if incl > orig => {
                format!("corrupt record length: {incl} bytes captured of a {orig}-byte frame")
            }
            (Some(incl), _) if snap != 0 && incl > snap => format!(
                "corrupt record length: {incl} bytes captured, above the snap length {snap}"
            ),
            (Some(incl), _) => format!(
                "truncated: the record starting here is {} bytes, the file ends {have} bytes \
                 into it",
                16 + incl as u64
            ),
            _ => format!("truncated: the file ends inside a record header ({have} bytes left)"),
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

/// The link type and the FCS length in bytes of a pcap header's link-type field. libpcap and
/// Wireshark (`LT_FCS_LENGTH_PRESENT`): bit 26 set, the FCS length in 16-bit words in bits
/// 28-31, the link type in bits 0-15. The first pcap drafts: bit 28 set, the length in bits
/// 29-31. Without either flag there is no FCS.
fn legacy_link(network: u32) -> (u32, u32) {
    let fcs_words = if network & 0x0400_0000 != 0 {
        network >> 28
    } else if network & 0x1000_0000 != 0 {
        (network >> 29) & 7
    } else {
        0
    };
    (network & 0xffff, fcs_words * 2)
}

/// pcapng `if_fcslen` in bytes. The specification says bits but gives '4' as its example, and
/// writers (Wireshark) store bytes: small values are bytes, multiples of 8 from 16 up are bits.
fn fcslen_option(v: u8) -> u32 {
    match v {
        0..=8 => v as u32,
        _ if v.is_multiple_of(8) => v as u32 / 8,
        _ => 0,
    }
}

/// Removes `fcs` trailing FCS bytes: the original length loses them, and the captured bytes
/// are cut to it (a frame cut by the snaplen may hold none or part of the FCS).
#[inline]
fn strip_fcs(data: &[u8], orig_len: u32, fcs: u32) -> (&[u8], u32) {
    let orig = orig_len.max(data.len() as u32);
    if fcs == 0 {
        return (data, orig);
    }
    let orig = orig.saturating_sub(fcs);
    (&data[..data.len().min(orig as usize)], orig)
}

/// A capture interface's name as it may be printed: control characters (terminal escapes,
/// newlines) and bidirectional-text overrides replaced by `?`, at most [`MAX_NAME_CHARS`]
/// characters.
pub fn sanitize_name(raw: &str) -> String {
    raw.chars()
        .take(MAX_NAME_CHARS)
        .map(|c| {
            let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || bidi { '?' } else { c }
        })
        .collect()
}

/// The variant of a pcap file, from its magic number read little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LegacyFormat {
    big_endian: bool,
    nanos: bool,
    /// Kuznetsov's "modified" pcap: 24-byte record headers (ifindex, protocol, packet type).
    modified: bool,
}

impl LegacyFormat {
    fn of(magic_le: u32) -> Option<LegacyFormat> {
        let (big_endian, nanos, modified) = match magic_le {
            0xa1b2_c3d4 => (false, false, false),
            0xa1b2_3c4d => (false, true, false),
            0xa1b2_cd34 => (false, false, true),
            0xd4c3_b2a1 => (true, false, false),
            0x4d3c_b2a1 => (true, true, false),
            0x34cd_b2a1 => (true, false, true),
            _ => return None,
        };
        Some(LegacyFormat {
            big_endian,
            nanos,
            modified,
        })
    }

    fn parser(self) -> LegacyParse {
        match (self.modified, self.big_endian) {
            (false, false) => pcap_parser::parse_pcap_frame,
            (false, true) => pcap_parser::parse_pcap_frame_be,
            (true, false) => pcap_parser::parse_pcap_frame_modified,
            (true, true) => parse_frame_modified_be,
        }
    }
}

/// The 24-byte pcap file header in either byte order, any variant, and its record parser. The
/// header's magic number is given in its little-endian form (so `is_nanosecond_precision`
/// holds for both byte orders). None: not a pcap header (or fewer than 24 bytes).
fn legacy_header(b: &[u8]) -> Option<(PcapHeader, LegacyParse)> {
    let b: &[u8; 24] = b.get(..24)?.try_into().ok()?;
    let fmt = LegacyFormat::of(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))?;
    let u16_at = |o: usize| {
        let v = [b[o], b[o + 1]];
        if fmt.big_endian {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        }
    };
    let u32_at = |o: usize| {
        let v = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if fmt.big_endian {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        }
    };
    let magic_number = match (fmt.modified, fmt.nanos) {
        (true, _) => 0xa1b2_cd34,
        (false, true) => 0xa1b2_3c4d,
        (false, false) => 0xa1b2_c3d4,
    };
    let h = PcapHeader {
        magic_number,
        version_major: u16_at(4),
        version_minor: u16_at(6),
        thiszone: u32_at(8) as i32,
        sigfigs: u32_at(12),
        snaplen: u32_at(16),
        network: pcap_parser::Linktype(u32_at(20) as i32),
    };
    Some((h, fmt.parser()))
}

/// A big-endian "modified" pcap record: the 16-byte record header, 8 more bytes (ifindex,
/// protocol, packet type, padding), the data.
fn parse_frame_modified_be(i: &[u8]) -> nom::IResult<&[u8], LegacyPcapBlock<'_>, PcapError<&[u8]>> {
    const HDR: usize = 24;
    if i.len() < HDR {
        return Err(nom::Err::Incomplete(nom::Needed::new(HDR - i.len())));
    }
    let at = |o: usize| u32::from_be_bytes([i[o], i[o + 1], i[o + 2], i[o + 3]]);
    let caplen = at(8);
    let end = HDR.saturating_add(caplen as usize);
    if i.len() < end {
        return Err(nom::Err::Incomplete(nom::Needed::new(end - i.len())));
    }
    Ok((
        &i[end..],
        LegacyPcapBlock {
            ts_sec: at(0),
            ts_usec: at(4),
            caplen,
            origlen: at(12),
            data: &i[HDR..end],
        },
    ))
}

/// Streaming pcap reader (every variant of [`legacy_header`]) over any [`Read`], with
/// pcap-parser's reader interface: the header first, then one record per `next`, from one
/// buffer that is refilled (and grown for a larger record) on demand.
struct LegacyStream<R> {
    header: PcapHeader,
    parse: LegacyParse,
    header_given: bool,
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    consumed: usize,
    exhausted: bool,
}

impl<R: Read> LegacyStream<R> {
    /// Reads the file header. Err(None): the input ended before a whole, known header (the
    /// caller has checked it, so this is a short read).
    fn new(capacity: usize, mut reader: R) -> Result<LegacyStream<R>, Option<io::Error>> {
        let mut buf = vec![0u8; capacity.max(64)];
        let mut end = 0;
        while end < 24 {
            match reader.read(&mut buf[end..]) {
                Ok(0) => break,
                Ok(n) => end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Some(e)),
            }
        }
        let (header, parse) = legacy_header(&buf[..end]).ok_or(None)?;
        Ok(LegacyStream {
            header,
            parse,
            header_given: false,
            reader,
            buf,
            start: 0,
            end,
            consumed: 0,
            exhausted: false,
        })
    }
}

impl<R: Read> PcapReaderIterator for LegacyStream<R> {
    fn next(&mut self) -> Result<(usize, PcapBlockOwned<'_>), PcapError<&[u8]>> {
        if !self.header_given {
            self.header_given = true;
            return Ok((
                self.header.size(),
                PcapBlockOwned::from(self.header.clone()),
            ));
        }
        let data = &self.buf[self.start..self.end];
        if data.is_empty() && self.exhausted {
            return Err(PcapError::Eof);
        }
        match (self.parse)(data) {
            Ok((rem, b)) => Ok((data.len() - rem.len(), PcapBlockOwned::from(b))),
            Err(nom::Err::Error(e)) | Err(nom::Err::Failure(e)) => Err(e),
            Err(nom::Err::Incomplete(_)) if self.exhausted => Err(PcapError::UnexpectedEof),
            Err(nom::Err::Incomplete(nom::Needed::Size(n))) => {
                if data.len().saturating_add(n.get()) >= self.buf.len() {
                    Err(PcapError::BufferTooSmall)
                } else {
                    Err(PcapError::Incomplete(n.get()))
                }
            }
            Err(nom::Err::Incomplete(nom::Needed::Unknown)) => Err(PcapError::Incomplete(0)),
        }
    }
    fn consume(&mut self, offset: usize) {
        self.start = (self.start + offset).min(self.end);
        self.consumed += offset;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    fn consume_noshift(&mut self, offset: usize) {
        self.consume(offset)
    }
    fn consumed(&self) -> usize {
        self.consumed
    }
    fn refill(&mut self) -> Result<(), PcapError<&[u8]>> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            return Ok(());
        }
        let n = self
            .reader
            .read(&mut self.buf[self.end..])
            .map_err(|_| PcapError::ReadError)?;
        self.exhausted = n == 0;
        self.end += n;
        Ok(())
    }
    fn position(&self) -> usize {
        self.start
    }
    fn grow(&mut self, new_size: usize) -> bool {
        if new_size > self.buf.len() {
            self.buf.resize(new_size, 0);
        }
        true
    }
    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    fn reader_exhausted(&self) -> bool {
        self.exhausted
    }
}

/// The length of the pcapng block `data` starts with when it is under 12 bytes (type, length and
/// trailing length): corrupt. Refused before pcap-parser sees it: pcap-parser 0.17 subtracts 12
/// from the length after checking it against the shorter header of some block types (a Process
/// Information Block of length 4 to 11 overflows, a panic with overflow checks). `None` also
/// when fewer than 8 bytes (12 for a section header, whose byte order is inside it) are here.
fn short_block(data: &[u8], big_endian: bool) -> Option<u32> {
    let word = |at: usize| -> Option<[u8; 4]> { data.get(at..at + 4)?.try_into().ok() };
    let be = if data.get(..4) == Some(&PCAPNG_SHB[..]) {
        word(8)? == [0x1a, 0x2b, 0x3c, 0x4d]
    } else {
        big_endian
    };
    let len = word(4)?;
    let len = if be {
        u32::from_be_bytes(len)
    } else {
        u32::from_le_bytes(len)
    };
    (len < 12).then_some(len)
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
    let mut m = [0u8; 4];
    let n = data.len().min(4);
    m[..n].copy_from_slice(&data[..n]);
    let magic = u32::from_le_bytes(m);
    if n < 4 || LegacyFormat::of(magic).is_none() {
        return Err(corrupt(format!(
            "not a pcap or pcapng file (magic {magic:#010x})"
        )));
    }
    let Some((h, parse)) = legacy_header(data) else {
        return Err(corrupt("pcap file header cut short".into()));
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

    /// A section header, then a block of length 4..=11 (a Process Information Block, whose
    /// header pcap-parser 0.17 checks against 4 bytes before subtracting 12): a corrupt-input
    /// error at the block's offset, from the in-memory and the streaming reader alike, in both
    /// byte orders, and never the overflow panic (these tests run with overflow checks).
    #[test]
    fn pcapng_block_shorter_than_12_is_corrupt_not_a_panic() {
        for be in [false, true] {
            let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            for len in [0u32, 4, 8, 10, 11] {
                let mut f = Vec::new();
                f.extend_from_slice(&PCAPNG_SHB);
                f.extend_from_slice(&w(28));
                f.extend_from_slice(&w(0x1a2b_3c4d));
                f.extend_from_slice(&(if be { [0, 1, 0, 0] } else { [1, 0, 0, 0] }));
                f.extend_from_slice(&[0xff; 8]);
                f.extend_from_slice(&w(28));
                f.extend_from_slice(&w(0x8000_0001));
                f.extend_from_slice(&w(len));
                f.extend_from_slice(&[0; 8]);
                let check = |r: Result<u64, ReplayError>, how: &str| match r {
                    Err(ReplayError::Corrupt { offset, what, .. }) => {
                        assert_eq!(offset, 28, "{how} be={be} len={len}");
                        assert!(what.contains(&format!("length {len}")), "{what}");
                    }
                    other => panic!("{how} be={be} len={len}: {other:?}"),
                };
                check(read_capture_slice("x", &f, |_| Ok(())), "slice");
                check(read_capture("x", &f[..], |_| Ok(())), "stream");
            }
        }
    }
}
