//! A small netlink toolkit shared by the generic-netlink (ethtool), rtnetlink (dcbnl) and RDMA
//! netlink readers: a message builder, bounds-checked message and attribute (TLV) iterators, and a
//! blocking request/reply socket.
//!
//! Layouts follow `include/uapi/linux/netlink.h` (`struct nlmsghdr`, 16 bytes; `struct nlattr`,
//! 4 bytes; `NLMSG_ALIGN`/`NLA_ALIGN` = 4; `NLA_F_NESTED` = 1<<15, `NLA_F_NET_BYTEORDER` = 1<<14;
//! `struct nlmsgerr` = `int error` + the request header; `NLMSGERR_ATTR_MSG` = 1 with
//! `NLM_F_ACK_TLVS`) and `include/uapi/linux/genetlink.h` (`struct genlmsghdr`, 4 bytes;
//! `GENL_ID_CTRL` = 16, `CTRL_CMD_GETFAMILY` = 3, `CTRL_ATTR_FAMILY_ID` = 1 (u16),
//! `CTRL_ATTR_FAMILY_NAME` = 2).
//!
//! Nothing here indexes past a buffer: every length read from the kernel is checked against what
//! is left, and a short or inconsistent message or attribute is an error that names the attribute
//! (or message) and its byte offset.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use thiserror::Error;

/// `sizeof(struct nlmsghdr)`.
pub const NLMSG_HDRLEN: usize = 16;
/// `sizeof(struct nlattr)`.
pub const NLA_HDRLEN: usize = 4;
/// `NLA_F_NESTED`.
pub const NLA_F_NESTED: u16 = 1 << 15;
/// `NLA_TYPE_MASK`: the type without the nested / byte-order flags.
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_CAPPED: u16 = 0x100;
pub const NLM_F_ACK_TLVS: u16 = 0x200;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// `NLMSGERR_ATTR_MSG`: extended-ack error string.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NETLINK_EXT_ACK` socket option (SOL_NETLINK).
const NETLINK_EXT_ACK: libc::c_int = 11;

/// Generic netlink controller (`include/uapi/linux/genetlink.h`).
pub const GENL_ID_CTRL: u16 = 16;
pub const GENL_HDRLEN: usize = 4;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// Receive buffer size. Kernel dump skbs are at most ~32 KiB (`netlink_dump`), one reply message
/// fits; a datagram larger than this is reported (`MSG_TRUNC`), never silently cut.
const RECV_BUF: usize = 64 * 1024;
/// Bounds for one request: total reply bytes and messages (a dump of every RDMA port of a big
/// host is a few hundred KiB).
const MAX_REPLY_BYTES: usize = 32 * 1024 * 1024;
const MAX_REPLY_MSGS: usize = 100_000;
/// Receive timeout so a lost reply never blocks the reader forever.
const RECV_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Error)]
pub enum NetlinkError {
    #[error("netlink {op} failed")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("truncated {what} at offset {offset}: needs {need} bytes, {have} left")]
    Truncated {
        what: String,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("malformed {what} at offset {offset}: {detail}")]
    Malformed {
        what: String,
        offset: usize,
        detail: String,
    },
    #[error("kernel answered errno {errno} ({text}){}", ext_ack_suffix(.message))]
    Kernel {
        errno: i32,
        text: String,
        message: Option<String>,
    },
    #[error("reply exceeds the bound of {limit} {unit}")]
    TooLarge { limit: usize, unit: &'static str },
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

fn ext_ack_suffix(m: &Option<String>) -> String {
    m.as_ref().map(|s| format!(": {s}")).unwrap_or_default()
}

impl NetlinkError {
    /// The errno when the kernel (or a syscall) refused, for "unavailable" classification.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            NetlinkError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    fn kernel(errno: i32, message: Option<String>) -> Self {
        let text = io::Error::from_raw_os_error(errno).to_string();
        NetlinkError::Kernel {
            errno,
            text,
            message,
        }
    }
}

pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Reads a native-endian integer of `N` bytes at `off`, or `None` past the end.
fn ne<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    buf.get(off..off.checked_add(N)?)?.try_into().ok()
}

pub fn ne_u16(buf: &[u8], off: usize) -> Option<u16> {
    ne::<2>(buf, off).map(u16::from_ne_bytes)
}
pub fn ne_u32(buf: &[u8], off: usize) -> Option<u32> {
    ne::<4>(buf, off).map(u32::from_ne_bytes)
}
pub fn ne_u64(buf: &[u8], off: usize) -> Option<u64> {
    ne::<8>(buf, off).map(u64::from_ne_bytes)
}

// ---------------------------------------------------------------------------------------------
// Building

/// Builds one netlink message: header, optional fixed family header, attributes, nests.
#[derive(Debug, Clone)]
pub struct MsgBuilder {
    buf: Vec<u8>,
}

impl MsgBuilder {
    pub fn new(ty: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set by finish()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it
        MsgBuilder { buf }
    }

    /// Appends a fixed header (e.g. `struct genlmsghdr`, `struct dcbmsg`), padded to 4.
    pub fn header(mut self, bytes: &[u8]) -> Self {
        self.buf.extend_from_slice(bytes);
        self.pad();
        self
    }

    fn pad(&mut self) {
        let n = align4(self.buf.len()) - self.buf.len();
        self.buf.extend(std::iter::repeat_n(0u8, n));
    }

    pub fn attr(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        let len = (NLA_HDRLEN + data.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }

    pub fn attr_u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr(kind, &v.to_ne_bytes())
    }

    /// A NUL-terminated string attribute (`NLA_NUL_STRING` / `nla_put_string`).
    pub fn attr_str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut v = Vec::with_capacity(s.len() + 1);
        v.extend_from_slice(s.as_bytes());
        v.push(0);
        self.attr(kind, &v)
    }

    /// Opens a nest (type gets `NLA_F_NESTED`, which strict parsers such as ethtool require).
    pub fn nest_start(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        at
    }

    pub fn nest_end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// One netlink message inside a receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    /// Bytes after the 16-byte header, up to `nlmsg_len`.
    pub payload: &'a [u8],
    /// Offset of the message header in the buffer.
    pub offset: usize,
}

/// Iterates the messages of a buffer; stops after the first error.
pub struct MsgIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

pub fn messages(buf: &[u8]) -> MsgIter<'_> {
    MsgIter {
        buf,
        pos: 0,
        failed: false,
    }
}

impl<'a> Iterator for MsgIter<'a> {
    type Item = Result<Msg<'a>, NetlinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let r = self.parse_one();
        self.failed = r.is_err();
        Some(r)
    }
}

impl<'a> MsgIter<'a> {
    fn parse_one(&mut self) -> Result<Msg<'a>, NetlinkError> {
        let off = self.pos;
        let rest = &self.buf[off..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(NetlinkError::Truncated {
                what: "netlink message header".into(),
                offset: off,
                need: NLMSG_HDRLEN,
                have: rest.len(),
            });
        }
        let len = ne_u32(rest, 0).unwrap_or(0) as usize;
        if len < NLMSG_HDRLEN {
            return Err(NetlinkError::Malformed {
                what: "netlink message".into(),
                offset: off,
                detail: format!("nlmsg_len {len} is shorter than the header"),
            });
        }
        if len > rest.len() {
            return Err(NetlinkError::Truncated {
                what: "netlink message".into(),
                offset: off,
                need: len,
                have: rest.len(),
            });
        }
        let msg = Msg {
            ty: ne_u16(rest, 4).unwrap_or(0),
            flags: ne_u16(rest, 6).unwrap_or(0),
            seq: ne_u32(rest, 8).unwrap_or(0),
            pid: ne_u32(rest, 12).unwrap_or(0),
            payload: &rest[NLMSG_HDRLEN..len],
            offset: off,
        };
        self.pos = off.saturating_add(align4(len)).min(self.buf.len());
        Ok(msg)
    }
}

/// One attribute. `kind` has the nested / byte-order flags masked off.
#[derive(Debug, Clone, Copy)]
pub struct Attr<'a> {
    pub kind: u16,
    pub nested_flag: bool,
    pub data: &'a [u8],
    /// Offset of the attribute header, counted from the start of the message payload that
    /// [`attrs`] was first called on (nested iterators keep counting from there).
    pub offset: usize,
}

impl<'a> Attr<'a> {
    fn exact<const N: usize>(&self, name: &str) -> Result<[u8; N], NetlinkError> {
        self.data.try_into().map_err(|_| NetlinkError::Malformed {
            what: format!("attribute {name} (type {})", self.kind),
            offset: self.offset,
            detail: format!("payload is {} bytes, expected {N}", self.data.len()),
        })
    }

    pub fn u8(&self, name: &str) -> Result<u8, NetlinkError> {
        self.exact::<1>(name).map(|b| b[0])
    }
    pub fn u16(&self, name: &str) -> Result<u16, NetlinkError> {
        self.exact::<2>(name).map(u16::from_ne_bytes)
    }
    pub fn u32(&self, name: &str) -> Result<u32, NetlinkError> {
        self.exact::<4>(name).map(u32::from_ne_bytes)
    }
    pub fn u64(&self, name: &str) -> Result<u64, NetlinkError> {
        self.exact::<8>(name).map(u64::from_ne_bytes)
    }

    /// A string attribute: up to the first NUL (a missing NUL is accepted), lossy UTF-8.
    pub fn string(&self, name: &str) -> Result<String, NetlinkError> {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.data.len());
        if end == 0 && self.data.is_empty() {
            return Err(NetlinkError::Malformed {
                what: format!("attribute {name} (type {})", self.kind),
                offset: self.offset,
                detail: "empty string payload".into(),
            });
        }
        Ok(String::from_utf8_lossy(&self.data[..end]).into_owned())
    }

    /// The payload as a fixed-size C struct of at least `size` bytes (a longer payload, from a
    /// newer kernel, is accepted; the known prefix is returned).
    pub fn structure(&self, name: &str, size: usize) -> Result<&'a [u8], NetlinkError> {
        if self.data.len() < size {
            return Err(NetlinkError::Truncated {
                what: format!("attribute {name} (type {})", self.kind),
                offset: self.offset,
                need: size,
                have: self.data.len(),
            });
        }
        Ok(&self.data[..size])
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> AttrIter<'a> {
        AttrIter {
            buf: self.data,
            pos: 0,
            base: self.offset + NLA_HDRLEN,
            failed: false,
        }
    }
}

/// Iterates attributes; stops after the first error.
pub struct AttrIter<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    failed: bool,
}

/// Attributes in `buf`; `base` is the offset of `buf` used in error messages.
pub fn attrs(buf: &[u8], base: usize) -> AttrIter<'_> {
    AttrIter {
        buf,
        pos: 0,
        base,
        failed: false,
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Result<Attr<'a>, NetlinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let r = self.parse_one();
        self.failed = r.is_err();
        Some(r)
    }
}

impl<'a> AttrIter<'a> {
    fn parse_one(&mut self) -> Result<Attr<'a>, NetlinkError> {
        let off = self.base + self.pos;
        let rest = &self.buf[self.pos..];
        if rest.len() < NLA_HDRLEN {
            return Err(NetlinkError::Truncated {
                what: "attribute header".into(),
                offset: off,
                need: NLA_HDRLEN,
                have: rest.len(),
            });
        }
        let len = ne_u16(rest, 0).unwrap_or(0) as usize;
        let raw = ne_u16(rest, 2).unwrap_or(0);
        let kind = raw & NLA_TYPE_MASK;
        if len < NLA_HDRLEN {
            return Err(NetlinkError::Malformed {
                what: format!("attribute type {kind}"),
                offset: off,
                detail: format!("nla_len {len} is shorter than the attribute header"),
            });
        }
        if len > rest.len() {
            return Err(NetlinkError::Truncated {
                what: format!("attribute type {kind}"),
                offset: off,
                need: len,
                have: rest.len(),
            });
        }
        let attr = Attr {
            kind,
            nested_flag: raw & NLA_F_NESTED != 0,
            data: &rest[NLA_HDRLEN..len],
            offset: off,
        };
        self.pos = self.pos.saturating_add(align4(len)).min(self.buf.len());
        Ok(attr)
    }
}

/// Decodes an `NLMSG_ERROR` payload: `Ok(())` for an ACK (error 0), the kernel error otherwise
/// (with the extended-ACK message when the kernel sent one).
pub fn decode_error(msg: &Msg<'_>) -> Result<(), NetlinkError> {
    let p = msg.payload;
    let err = ne_u32(p, 0).ok_or_else(|| NetlinkError::Truncated {
        what: "nlmsgerr".into(),
        offset: msg.offset + NLMSG_HDRLEN,
        need: 4,
        have: p.len(),
    })? as i32;
    if err == 0 {
        return Ok(());
    }
    let mut message = None;
    if msg.flags & NLM_F_ACK_TLVS != 0 {
        // The TLVs follow the echoed request: its header only when capped, else all of it.
        let echoed = if msg.flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            ne_u32(p, 4).map(|l| l as usize).unwrap_or(NLMSG_HDRLEN)
        };
        let start = 4usize.saturating_add(align4(echoed));
        if let Some(tlvs) = p.get(start..) {
            for a in attrs(tlvs, msg.offset + NLMSG_HDRLEN + start).flatten() {
                if a.kind == NLMSGERR_ATTR_MSG {
                    message = a.string("NLMSGERR_ATTR_MSG").ok();
                }
            }
        }
    }
    Err(NetlinkError::kernel(err.saturating_neg(), message))
}

// ---------------------------------------------------------------------------------------------
// Socket

/// A blocking netlink socket bound to the current network namespace.
pub struct NlSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn last_os(op: &'static str) -> NetlinkError {
    NetlinkError::Io {
        op,
        source: io::Error::last_os_error(),
    }
}

impl NlSocket {
    /// Opens a socket of `protocol` (`NETLINK_ROUTE` = 0, `NETLINK_GENERIC` = 16,
    /// `NETLINK_RDMA` = 20).
    pub fn open(protocol: libc::c_int) -> Result<Self, NetlinkError> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(last_os("socket"));
        }
        // SAFETY: fd is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zero is a valid value for every field.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sa_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: sa is a valid sockaddr_nl of sa_len bytes.
        let rc = unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), sa_len) };
        if rc < 0 {
            return Err(last_os("bind"));
        }
        let tv = libc::timeval {
            tv_sec: RECV_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
        // Extended ACK error strings: best effort (older kernels lack the option).
        let _ = setsockopt(&fd, libc::SOL_NETLINK, NETLINK_EXT_ACK, &1 as &libc::c_int);
        Ok(NlSocket {
            fd,
            seq: 1,
            buf: vec![0; RECV_BUF],
        })
    }

    /// The sequence number to put in the next request.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    fn send(&self, msg: &[u8]) -> Result<(), NetlinkError> {
        // SAFETY: sockaddr_nl zeroed = the kernel (pid 0).
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sa_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: msg is a valid buffer of msg.len() bytes; sa as above.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&raw const sa).cast(),
                sa_len,
            )
        };
        if n < 0 {
            return Err(last_os("sendto"));
        }
        Ok(())
    }

    fn recv(&mut self) -> Result<usize, NetlinkError> {
        loop {
            // SAFETY: buf is a valid writable buffer of buf.len() bytes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(NetlinkError::Io {
                    op: "recv",
                    source: e,
                });
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(NetlinkError::TooLarge {
                    limit: self.buf.len(),
                    unit: "bytes per datagram",
                });
            }
            return Ok(n);
        }
    }

    /// Sends `msg` (built with sequence number `seq`) and feeds every reply message of that
    /// sequence to `on_msg` until the kernel ends the exchange: `NLMSG_DONE` for a dump, the
    /// ACK (`NLMSG_ERROR` with error 0) otherwise. Send requests with `NLM_F_ACK` unless they are
    /// dumps. A kernel error ends the exchange with [`NetlinkError::Kernel`].
    pub fn transact<E: From<NetlinkError>>(
        &mut self,
        msg: &[u8],
        seq: u32,
        mut on_msg: impl FnMut(&Msg<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.send(msg)?;
        let (mut bytes, mut count) = (0usize, 0usize);
        loop {
            let n = self.recv()?;
            bytes += n;
            if bytes > MAX_REPLY_BYTES {
                return Err(NetlinkError::TooLarge {
                    limit: MAX_REPLY_BYTES,
                    unit: "bytes",
                }
                .into());
            }
            let buf = std::mem::take(&mut self.buf);
            let r = Self::dispatch(&buf[..n], seq, &mut count, &mut on_msg);
            self.buf = buf;
            if r? {
                return Ok(());
            }
        }
    }

    /// Handles one datagram; `Ok(true)` when the exchange is over.
    fn dispatch<E: From<NetlinkError>>(
        buf: &[u8],
        seq: u32,
        count: &mut usize,
        on_msg: &mut impl FnMut(&Msg<'_>) -> Result<(), E>,
    ) -> Result<bool, E> {
        for m in messages(buf) {
            let m = m?;
            *count += 1;
            if *count > MAX_REPLY_MSGS {
                return Err(NetlinkError::TooLarge {
                    limit: MAX_REPLY_MSGS,
                    unit: "messages",
                }
                .into());
            }
            if m.seq != seq {
                tracing::debug!(
                    got = m.seq,
                    want = seq,
                    "netlink: skipping message of another request"
                );
                continue;
            }
            if m.flags & NLM_F_DUMP_INTR != 0 {
                tracing::debug!(
                    "netlink: dump interrupted by a concurrent change; data may be inconsistent"
                );
            }
            match m.ty {
                NLMSG_NOOP => {}
                NLMSG_ERROR => {
                    decode_error(&m)?;
                    return Ok(true);
                }
                NLMSG_DONE => {
                    // Since 4.x the DONE payload carries the dump's error code.
                    if let Some(e) = ne_u32(m.payload, 0).map(|v| v as i32).filter(|&e| e < 0) {
                        return Err(NetlinkError::kernel(e.saturating_neg(), None).into());
                    }
                    return Ok(true);
                }
                _ => on_msg(&m)?,
            }
        }
        Ok(false)
    }
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> Result<(), NetlinkError> {
    // SAFETY: v points to a live T of size_of::<T>() bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(last_os("setsockopt"));
    }
    Ok(())
}

/// Resolves a generic netlink family id by name (`CTRL_CMD_GETFAMILY`). A missing family is a
/// kernel error with errno `ENOENT`.
pub fn genl_family_id(sock: &mut NlSocket, name: &str) -> Result<u16, NetlinkError> {
    let seq = sock.next_seq();
    let mut b = MsgBuilder::new(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, seq).header(&[
        CTRL_CMD_GETFAMILY,
        1,
        0,
        0,
    ]);
    b.attr_str(CTRL_ATTR_FAMILY_NAME, name);
    let mut id = None;
    sock.transact(&b.finish(), seq, |m| -> Result<(), NetlinkError> {
        id = id.or(decode_family_id(m.payload, m.offset)?);
        Ok(())
    })?;
    id.ok_or_else(|| NetlinkError::Unexpected(format!("no CTRL_ATTR_FAMILY_ID for family {name}")))
}

/// `CTRL_ATTR_FAMILY_ID` from a controller reply payload (genlmsghdr + attributes).
pub fn decode_family_id(payload: &[u8], msg_off: usize) -> Result<Option<u16>, NetlinkError> {
    let body = payload
        .get(GENL_HDRLEN..)
        .ok_or_else(|| NetlinkError::Truncated {
            what: "genlmsghdr".into(),
            offset: msg_off + NLMSG_HDRLEN,
            need: GENL_HDRLEN,
            have: payload.len(),
        })?;
    for a in attrs(body, GENL_HDRLEN) {
        let a = a?;
        if a.kind == CTRL_ATTR_FAMILY_ID {
            return Ok(Some(a.u16("CTRL_ATTR_FAMILY_ID")?));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::testbytes::nlmsg as raw_msg;
    use super::*;

    #[test]
    fn builder_layout_matches_uapi() {
        let mut b = MsgBuilder::new(0x1234, NLM_F_REQUEST, 7).header(&[3, 1, 0, 0]);
        b.attr_str(2, "ethtool");
        let n = b.nest_start(1);
        b.attr_u32(3, 4);
        b.nest_end(n);
        let m = b.finish();
        // 16 header + 4 genl + (4+8) string + nest (4 + 8)
        assert_eq!(m.len(), 16 + 4 + 12 + 12);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()),
            m.len() as u32
        );
        assert_eq!(&m[20..22], &12u16.to_ne_bytes());
        assert_eq!(&m[24..32], b"ethtool\0");
        assert_eq!(&m[34..36], &(1u16 | NLA_F_NESTED).to_ne_bytes());
        assert_eq!(&m[32..34], &12u16.to_ne_bytes());
    }

    #[test]
    fn attrs_parse_and_bounds() {
        // type 1 u32 = 5, type 2 string "ab\0" (len 7, padded to 8)
        let mut b = vec![8, 0, 1, 0, 5, 0, 0, 0, 7, 0, 2, 0, b'a', b'b', 0, 0];
        if cfg!(target_endian = "big") {
            b = vec![0, 8, 0, 1, 0, 0, 0, 5, 0, 7, 0, 2, b'a', b'b', 0, 0];
        }
        let v: Vec<_> = attrs(&b, 0).collect::<Result<_, _>>().unwrap();
        assert_eq!(v[0].u32("A").unwrap(), 5);
        assert_eq!(v[1].string("B").unwrap(), "ab");
        assert!(v[0].u64("A").is_err(), "width check");
        // length beyond the buffer
        let mut t = b.clone();
        t.truncate(13);
        let e = attrs(&t, 100).nth(1).unwrap().unwrap_err();
        assert!(
            matches!(e, NetlinkError::Truncated { offset: 108, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("type 2"), "{e}");
        // nla_len below the header size
        let bad = [2u8, 0, 1, 0];
        let e = attrs(&bad, 0).next().unwrap().unwrap_err();
        assert!(matches!(e, NetlinkError::Malformed { .. }));
        // 2 stray bytes
        let e = attrs(&[1, 2], 0).next().unwrap().unwrap_err();
        assert!(matches!(
            e,
            NetlinkError::Truncated {
                need: 4,
                have: 2,
                ..
            }
        ));
    }

    #[test]
    fn messages_bounds() {
        let m = raw_msg(NLMSG_DONE, 0, 1, &[0, 0, 0, 0]);
        let v: Vec<_> = messages(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].ty, NLMSG_DONE);
        let e = messages(&m[..10]).next().unwrap().unwrap_err();
        assert!(matches!(e, NetlinkError::Truncated { .. }));
        let mut long = m.clone();
        long[0..4].copy_from_slice(&64u32.to_ne_bytes());
        let e = messages(&long).next().unwrap().unwrap_err();
        assert!(matches!(
            e,
            NetlinkError::Truncated {
                need: 64,
                have: 20,
                ..
            }
        ));
        let mut short = m.clone();
        short[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            messages(&short).next().unwrap(),
            Err(NetlinkError::Malformed { .. })
        ));
    }

    #[test]
    fn error_with_ext_ack() {
        // nlmsgerr: error -95, echoed header (capped), then NLMSGERR_ATTR_MSG "no dcb"
        let mut p = Vec::new();
        p.extend_from_slice(&(-95i32).to_ne_bytes());
        p.extend_from_slice(&raw_msg(78, 1, 9, &[])[..16]);
        p.extend_from_slice(&11u16.to_ne_bytes());
        p.extend_from_slice(&1u16.to_ne_bytes());
        p.extend_from_slice(b"no dcb\0\0");
        let m = raw_msg(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 9, &p);
        let msg = messages(&m).next().unwrap().unwrap();
        let e = decode_error(&msg).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        assert!(e.to_string().contains("no dcb"), "{e}");
        let ack = raw_msg(NLMSG_ERROR, 0, 9, &[0; 20]);
        assert!(decode_error(&messages(&ack).next().unwrap().unwrap()).is_ok());
        let short = raw_msg(NLMSG_ERROR, 0, 9, &[0; 2]);
        assert!(decode_error(&messages(&short).next().unwrap().unwrap()).is_err());
    }

    #[test]
    fn dispatch_state_machine() {
        let mut seen = Vec::new();
        let mut count = 0;
        let mut on = |m: &Msg<'_>| -> Result<(), NetlinkError> {
            seen.push((m.ty, m.seq));
            Ok(())
        };
        // a stale message of another request, two dump parts, then DONE (error 0)
        let mut buf = raw_msg(100, NLM_F_MULTI, 4, &[0; 4]);
        buf.extend(raw_msg(100, NLM_F_MULTI, 5, &[0; 4]));
        buf.extend(raw_msg(101, NLM_F_MULTI, 5, &[0; 4]));
        assert!(
            !NlSocket::dispatch(&buf, 5, &mut count, &mut on).unwrap(),
            "not over yet"
        );
        let done = raw_msg(NLMSG_DONE, NLM_F_MULTI, 5, &0i32.to_ne_bytes());
        assert!(NlSocket::dispatch(&done, 5, &mut count, &mut on).unwrap());
        assert_eq!(seen, vec![(100, 5), (101, 5)]);
        // DONE carrying a dump error
        let bad = raw_msg(NLMSG_DONE, NLM_F_MULTI, 5, &(-22i32).to_ne_bytes());
        let e = NlSocket::dispatch(&bad, 5, &mut count, &mut |_: &Msg<'_>| {
            Ok::<(), NetlinkError>(())
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        // reply then ACK in one datagram
        let mut buf = raw_msg(78, 0, 6, &[0; 8]);
        buf.extend(raw_msg(NLMSG_ERROR, 0, 6, &[0; 20]));
        let mut n = 0;
        let over = NlSocket::dispatch(&buf, 6, &mut count, &mut |_: &Msg<'_>| {
            n += 1;
            Ok::<(), NetlinkError>(())
        });
        assert!(over.unwrap());
        assert_eq!(n, 1);
        // a truncated datagram is an error, not a panic
        assert!(
            NlSocket::dispatch(&buf[..30], 6, &mut count, &mut |_: &Msg<'_>| Ok::<
                (),
                NetlinkError,
            >(
                ()
            ))
            .is_err()
        );
    }

    #[test]
    fn family_id_decoding() {
        // genlmsghdr (cmd NEWFAMILY=1, version 2), FAMILY_NAME "ethtool", FAMILY_ID u16 = 21
        let mut p = vec![1u8, 2, 0, 0];
        p.extend_from_slice(&12u16.to_ne_bytes());
        p.extend_from_slice(&2u16.to_ne_bytes());
        p.extend_from_slice(b"ethtool\0");
        p.extend_from_slice(&6u16.to_ne_bytes());
        p.extend_from_slice(&1u16.to_ne_bytes());
        p.extend_from_slice(&21u16.to_ne_bytes());
        p.extend_from_slice(&[0, 0]);
        assert_eq!(decode_family_id(&p, 0).unwrap(), Some(21));
        assert!(decode_family_id(&p[..2], 0).is_err());
        // FAMILY_ID with a 4-byte payload is malformed
        let mut bad = vec![1u8, 2, 0, 0];
        bad.extend_from_slice(&8u16.to_ne_bytes());
        bad.extend_from_slice(&1u16.to_ne_bytes());
        bad.extend_from_slice(&21u32.to_ne_bytes());
        let e = decode_family_id(&bad, 0).unwrap_err();
        assert!(e.to_string().contains("CTRL_ATTR_FAMILY_ID"), "{e}");
    }

    #[test]
    fn live_genl_ctrl_resolves_nlctrl() {
        // The controller family itself always exists ("nlctrl" = GENL_ID_CTRL).
        let mut s = match NlSocket::open(libc::NETLINK_GENERIC) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("generic netlink unavailable here: {e}");
                return;
            }
        };
        assert_eq!(genl_family_id(&mut s, "nlctrl").unwrap(), GENL_ID_CTRL);
        let e = genl_family_id(&mut s, "nosuchfamx").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    }
}
