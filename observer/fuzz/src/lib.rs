//! Shared by the fuzz targets: the capture reader's invariants, checked on every item it hands
//! out, and the chunked reader that delivers a capture in pieces of fuzzer-chosen sizes.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, Read};

use observer::sources::capture::ReplayError;
use observer::sources::capture::pcap_reader::{Item, MAX_IFACES, MAX_NAME_CHARS};

/// One record as the reader handed it out (the frame as a length and a hash).
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub iface: usize,
    pub ts_ns: u64,
    pub len: usize,
    pub hash: u64,
    pub orig_len: u32,
    pub outbound: Option<bool>,
    pub offset: u64,
}

/// What one reading produced: the interfaces and records in order, and how it ended.
#[derive(Debug, Default)]
pub struct Reading {
    pub ifaces: usize,
    pub records: Vec<Seen>,
    /// Ok(bytes consumed) or the error's kind and offset.
    pub end: Option<Result<u64, (String, u64)>>,
}

impl Reading {
    /// The sink of `read_capture` / `read_capture_slice` over an input of `input_len` bytes:
    /// checks every item as it comes.
    pub fn item(&mut self, it: Item<'_>, input_len: usize) {
        match it {
            Item::Iface(i) => {
                self.ifaces += 1;
                assert!(self.ifaces <= MAX_IFACES, "more than MAX_IFACES interfaces");
                if let Some(n) = &i.name {
                    assert!(n.chars().count() <= MAX_NAME_CHARS, "name not cut: {n:?}");
                    assert!(!n.chars().any(char::is_control), "control char in {n:?}");
                }
            }
            Item::Record(r) => {
                assert!(
                    r.iface < self.ifaces,
                    "record on interface {} of {}",
                    r.iface,
                    self.ifaces
                );
                assert!(
                    r.data.len() as u64 <= r.orig_len as u64,
                    "data {} > orig_len {}",
                    r.data.len(),
                    r.orig_len
                );
                if let Some(last) = self.records.last() {
                    assert!(
                        r.offset > last.offset,
                        "offset {} after {}",
                        r.offset,
                        last.offset
                    );
                }
                assert!(
                    r.offset as usize + r.data.len() <= input_len,
                    "record at {} + {} beyond the input ({input_len})",
                    r.offset,
                    r.data.len()
                );
                let mut h = DefaultHasher::new();
                r.data.hash(&mut h);
                self.records.push(Seen {
                    iface: r.iface,
                    ts_ns: r.ts_ns,
                    len: r.data.len(),
                    hash: h.finish(),
                    orig_len: r.orig_len,
                    outbound: r.outbound,
                    offset: r.offset,
                });
            }
        }
    }

    /// How the reading ended; checks the consumed length and the error's offset.
    pub fn end(&mut self, res: Result<u64, ReplayError>, input_len: usize) {
        let end = match res {
            Ok(n) => {
                assert!(n as usize <= input_len, "consumed {n} of {input_len}");
                if let Some(last) = self.records.last() {
                    assert!(
                        last.offset < n,
                        "record at {} past the end {n}",
                        last.offset
                    );
                }
                Ok(n)
            }
            Err(ReplayError::Corrupt { offset, .. }) => {
                assert!(
                    offset as usize <= input_len,
                    "corrupt at {offset} of {input_len}"
                );
                Err(("corrupt".to_string(), offset))
            }
            Err(ReplayError::UnsupportedLinkType { .. }) => Err(("linktype".to_string(), 0)),
            Err(e) => panic!("unexpected error from an in-memory input: {e:?}"),
        };
        self.end = Some(end);
    }
}

/// Delivers `data` in pieces whose sizes cycle through `sizes`; a size of 0 is one
/// `ErrorKind::Interrupted` (which the reader must retry; never twice in a row, as a real
/// input would not fail forever).
pub struct Chunked<'a> {
    pub data: &'a [u8],
    pub pos: usize,
    pub sizes: &'a [u8],
    pub i: usize,
    pub interrupted: bool,
}

impl<'a> Chunked<'a> {
    pub fn new(data: &'a [u8], sizes: &'a [u8]) -> Chunked<'a> {
        Chunked {
            data,
            pos: 0,
            sizes,
            i: 0,
            interrupted: false,
        }
    }
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let s = if self.sizes.is_empty() {
            usize::MAX
        } else {
            self.sizes[self.i % self.sizes.len()] as usize
        };
        self.i += 1;
        let s = match (s, self.interrupted) {
            (0, false) => {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            (0, true) => 1,
            (s, _) => s,
        };
        self.interrupted = false;
        // Pieces of 1..=255 bytes, times 61 when the size is odd (so that records of a few
        // KiB also arrive in a few pieces, not hundreds).
        let s = if s == usize::MAX {
            s
        } else if s % 2 == 1 {
            s * 61
        } else {
            s
        };
        let n = s.min(buf.len()).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The `pcap_stream` input: `[k][k piece sizes][capture]` (k = first byte % 16). Returns the
/// piece sizes and the capture.
pub fn split_stream_input(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((&k, rest)) = data.split_first() else {
        return (&[], &[]);
    };
    let k = (k % 16) as usize;
    let k = k.min(rest.len());
    rest.split_at(k)
}
