//! ethtool: driver statistics (`ethtool -S`) and driver info through the `SIOCETHTOOL` ioctl,
//! standard pause statistics through ethtool generic netlink.
//!
//! ioctl path (`include/uapi/linux/ethtool.h`, `include/uapi/linux/sockios.h`,
//! `net/ethtool/ioctl.c` `dev_ethtool`): `ioctl(sock, SIOCETHTOOL = 0x8946, struct ifreq)` with
//! `ifr_data` pointing at the command struct. `ETHTOOL_GSSET_INFO` (0x37) gives the current count
//! of the `ETH_SS_STATS` (1) set, `ETHTOOL_GSTRINGS` (0x1b) the names in 32-byte NUL-padded slots
//! (`ETH_GSTRING_LEN`), `ETHTOOL_GSTATS` (0x1d) the u64 values in the same order;
//! `ETHTOOL_GDRVINFO` (0x03) driver, firmware and bus info. All four are in the "no
//! CAP_NET_ADMIN needed" list of `dev_ethtool`.
//!
//! The count can change between calls: mlx5 creates `rx_prio<N>_pause` strings only for
//! priorities with PFC enabled (`drivers/net/ethernet/mellanox/mlx5/core/en_stats.c`,
//! `mlx5e_query_pfc_combined`), bnxt's extended list depends on the firmware. Older kernels
//! overwrite `len` / `n_stats` with the current count; newer ones return 0 on a mismatch. The
//! reader therefore checks the returned count of every call and starts over on a mismatch. A PFC
//! change from one priority to another keeps the count and changes the names, so by default the
//! names are read before and after the values and compared ([`NameRefresh::Always`]).
//!
//! Netlink path (`include/uapi/linux/ethtool_netlink.h`, `net/ethtool/pause.c`):
//! `ETHTOOL_MSG_PAUSE_GET` (21) with `ETHTOOL_A_HEADER_FLAGS` = `ETHTOOL_FLAG_STATS` (1<<2)
//! returns `ETHTOOL_A_PAUSE_AUTONEG/RX/TX` (u8) and the nest `ETHTOOL_A_PAUSE_STATS` (5) with
//! `ETHTOOL_A_PAUSE_STAT_TX_FRAMES` (2) / `_RX_FRAMES` (3) (u64, IEEE 802.3 30.3.4.2/30.3.4.3:
//! 802.3x global pause, not per priority). A statistic the driver does not fill is left out.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::netlink::{self, MsgBuilder, NetlinkError, NlSocket};
use super::{Reading, Unavailable, UnavailableReason};

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// `sizeof(struct ethtool_drvinfo)`.
const DRVINFO_LEN: usize = 196;

/// Upper bound on the number of statistics accepted (2 MiB of names, 512 KiB of values).
pub const MAX_STATS: u32 = 65_536;
/// Attempts when the count changes under the reader.
const MAX_ATTEMPTS: usize = 4;

const ETHTOOL_GENL_NAME: &str = "ethtool";
const ETHTOOL_MSG_PAUSE_GET: u8 = 21;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_HEADER_FLAGS: u16 = 3;
const ETHTOOL_FLAG_STATS: u32 = 1 << 2;
const ETHTOOL_A_PAUSE_HEADER: u16 = 1;
const ETHTOOL_A_PAUSE_AUTONEG: u16 = 2;
const ETHTOOL_A_PAUSE_RX: u16 = 3;
const ETHTOOL_A_PAUSE_TX: u16 = 4;
const ETHTOOL_A_PAUSE_STATS: u16 = 5;
const ETHTOOL_A_PAUSE_STAT_TX_FRAMES: u16 = 2;
const ETHTOOL_A_PAUSE_STAT_RX_FRAMES: u16 = 3;

#[derive(Debug, Error)]
pub enum EthtoolError {
    #[error("invalid interface name {name:?}: {why}")]
    InvalidName { name: String, why: &'static str },
    #[error("cannot open a socket for SIOCETHTOOL")]
    Socket(#[source] io::Error),
    #[error("SIOCETHTOOL {cmd} on {ifname} failed")]
    Ioctl {
        cmd: &'static str,
        ifname: String,
        #[source]
        source: io::Error,
    },
    #[error("{ifname} reports {count} statistics, more than the bound of {max}")]
    TooManyStats {
        ifname: String,
        count: u32,
        max: u32,
    },
    #[error("the statistics of {ifname} changed {attempts} times in a row while being read")]
    Unstable { ifname: String, attempts: usize },
    #[error("ethtool netlink request for {ifname} failed")]
    Netlink {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
}

/// Checks an interface name (a name that is not UTF-8 spelled with `\xNN` escapes,
/// [`contract::cli::iface_name`]) and returns its bytes as the NUL-terminated `ifr_name` field.
pub fn ifname_field(name: &str) -> Result<[libc::c_char; libc::IFNAMSIZ], EthtoolError> {
    let bad = |why| EthtoolError::InvalidName {
        name: name.to_string(),
        why,
    };
    let bytes = kernel_name(name);
    if bytes.is_empty() {
        return Err(bad("empty"));
    }
    if bytes.len() >= libc::IFNAMSIZ {
        return Err(bad("longer than 15 bytes (IFNAMSIZ)"));
    }
    if bytes
        .iter()
        .any(|&b| b == 0 || b == b'/' || b.is_ascii_whitespace())
    {
        return Err(bad("contains NUL, '/' or whitespace"));
    }
    let mut f = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in f.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(f)
}

/// The bytes of the interface `name` names ([`contract::cli::iface_os`]).
pub fn kernel_name(name: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStringExt;
    contract::cli::iface_os(name).into_vec()
}

/// `struct ethtool_drvinfo`, the fields a RoCE tool needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DrvInfo {
    /// Driver name: `mlx5_core`, `bnxt_en`, `ice`, `veth`, ...
    pub driver: String,
    pub version: String,
    pub fw_version: String,
    /// PCI bus address (`0000:3b:00.0`) for PCI devices; names the mlx5 debugfs directory.
    pub bus_info: String,
    pub n_stats: u32,
}

/// Decodes a `struct ethtool_drvinfo` (offsets: driver 4, version 36, fw_version 68,
/// bus_info 100, erom_version 132, n_stats 180).
pub fn decode_drvinfo(b: &[u8]) -> Option<DrvInfo> {
    if b.len() < DRVINFO_LEN {
        return None;
    }
    Some(DrvInfo {
        driver: cstr(&b[4..36]),
        version: cstr(&b[36..68]),
        fw_version: cstr(&b[68..100]),
        bus_info: cstr(&b[100..132]),
        n_stats: netlink::ne_u32(b, 180)?,
    })
}

/// A NUL-padded C string field, lossy UTF-8.
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Splits an `ETHTOOL_GSTRINGS` data area into names.
pub fn decode_strings(data: &[u8], count: usize) -> Vec<String> {
    data.as_chunks::<ETH_GSTRING_LEN>()
        .0
        .iter()
        .take(count)
        .map(|c| cstr(c))
        .collect()
}

/// When to re-read the statistic names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NameRefresh {
    /// Before and after every value read, compared (catches a PFC move between priorities that
    /// keeps the count). Costs two `GSTRINGS` per read.
    #[default]
    Always,
    /// Only when the count changes.
    OnCountChange,
}

/// An 8-byte-aligned ioctl argument buffer.
struct IoBuf(Vec<u64>);

impl IoBuf {
    fn new(bytes: usize) -> Self {
        IoBuf(vec![0u64; bytes.div_ceil(8)])
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 slice is valid as bytes (no padding, any bit pattern is a valid u8).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 8) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; the borrow is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 8) }
    }
    fn put_u32(&mut self, off: usize, v: u32) {
        self.bytes_mut()[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put_u64(&mut self, off: usize, v: u64) {
        self.bytes_mut()[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    fn u32(&self, off: usize) -> u32 {
        netlink::ne_u32(self.bytes(), off).unwrap_or(0)
    }
}

/// Statistic name -> value, in driver order.
pub type NamedValues = Vec<(String, u64)>;

/// A step of a read that may have to start over because the count changed.
enum Step<T> {
    Done(T),
    Changed,
}

/// Reads `ethtool -S` and driver info of one interface (in the caller's network namespace).
pub struct EthtoolReader {
    ifname: String,
    ifr_name: [libc::c_char; libc::IFNAMSIZ],
    fd: OwnedFd,
    names: Vec<String>,
    refresh: NameRefresh,
    pause: Option<(NlSocket, u16)>,
}

impl EthtoolReader {
    pub fn new(ifname: &str, refresh: NameRefresh) -> Result<Self, EthtoolError> {
        let ifr_name = ifname_field(ifname)?;
        let fd = open_ioctl_socket().map_err(EthtoolError::Socket)?;
        Ok(EthtoolReader {
            ifname: ifname.to_string(),
            ifr_name,
            fd,
            names: Vec::new(),
            refresh,
            pause: None,
        })
    }

    fn ioctl(&self, buf: &mut IoBuf) -> io::Result<()> {
        // SAFETY: ifreq is plain data; zeroed is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name = self.ifr_name;
        ifr.ifr_ifru.ifru_data = buf.0.as_mut_ptr().cast();
        // SAFETY: ifr is valid and ifru_data points at a buffer sized for the command in it
        // (the kernel copies at most the sizes encoded in the command struct).
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifr) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Runs one ioctl; an errno meaning "not offered" becomes `Ok(Err(unavailable))`.
    fn call(
        &self,
        cmd: &'static str,
        buf: &mut IoBuf,
    ) -> Result<Result<(), Unavailable>, EthtoolError> {
        match self.ioctl(buf) {
            Ok(()) => Ok(Ok(())),
            Err(e) => match e
                .raw_os_error()
                .and_then(|n| Unavailable::from_errno(n, &format!("{cmd} on {}", self.ifname)))
            {
                Some(u) => Ok(Err(u)),
                None => Err(EthtoolError::Ioctl {
                    cmd,
                    ifname: self.ifname.clone(),
                    source: e,
                }),
            },
        }
    }

    /// `ETHTOOL_GDRVINFO`.
    pub fn drvinfo(&self) -> Result<Reading<DrvInfo>, EthtoolError> {
        let mut b = IoBuf::new(DRVINFO_LEN);
        b.put_u32(0, ETHTOOL_GDRVINFO);
        if let Err(u) = self.call("ETHTOOL_GDRVINFO", &mut b)? {
            return Ok(Reading::Unavailable(u));
        }
        Ok(decode_drvinfo(b.bytes())
            .map(Reading::Read)
            .unwrap_or_else(|| {
                Reading::unavailable(UnavailableReason::NotSupported, "short ethtool_drvinfo")
            }))
    }

    /// Current number of `ETH_SS_STATS` strings (`ETHTOOL_GSSET_INFO`, falling back to
    /// `ETHTOOL_GDRVINFO.n_stats` when the former is not supported).
    pub fn stats_count(&self) -> Result<Reading<u32>, EthtoolError> {
        // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[1]; }
        let mut b = IoBuf::new(24);
        b.put_u32(0, ETHTOOL_GSSET_INFO);
        b.put_u64(8, 1 << ETH_SS_STATS);
        match self.call("ETHTOOL_GSSET_INFO", &mut b)? {
            Ok(()) => {
                let mask = netlink::ne_u64(b.bytes(), 8).unwrap_or(0);
                // The kernel clears the bit of a set the driver does not have.
                Ok(Reading::Read(if mask & (1 << ETH_SS_STATS) != 0 {
                    b.u32(16)
                } else {
                    0
                }))
            }
            Err(u) if u.reason == UnavailableReason::NotSupported => {
                Ok(self.drvinfo()?.map(|d| d.n_stats))
            }
            Err(u) => Ok(Reading::Unavailable(u)),
        }
    }

    fn strings(&self, count: u32) -> Result<Reading<Step<Vec<String>>>, EthtoolError> {
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
        let mut b = IoBuf::new(12 + count as usize * ETH_GSTRING_LEN);
        b.put_u32(0, ETHTOOL_GSTRINGS);
        b.put_u32(4, ETH_SS_STATS);
        b.put_u32(8, count);
        if let Err(u) = self.call("ETHTOOL_GSTRINGS", &mut b)? {
            return Ok(Reading::Unavailable(u));
        }
        if b.u32(8) != count {
            return Ok(Reading::Read(Step::Changed));
        }
        Ok(Reading::Read(Step::Done(decode_strings(
            &b.bytes()[12..],
            count as usize,
        ))))
    }

    fn values(&self, count: u32) -> Result<Reading<Step<Vec<u64>>>, EthtoolError> {
        // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
        let mut b = IoBuf::new(8 + count as usize * 8);
        b.put_u32(0, ETHTOOL_GSTATS);
        b.put_u32(4, count);
        if let Err(u) = self.call("ETHTOOL_GSTATS", &mut b)? {
            return Ok(Reading::Unavailable(u));
        }
        if b.u32(4) != count {
            return Ok(Reading::Read(Step::Changed));
        }
        Ok(Reading::Read(Step::Done(
            b.0[1..1 + count as usize].to_vec(),
        )))
    }

    /// Reads `ethtool -S`: names and values, consistent with each other.
    pub fn stats(&mut self) -> Result<Reading<NamedValues>, EthtoolError> {
        for attempt in 0..MAX_ATTEMPTS {
            let count = match self.stats_count()? {
                Reading::Read(c) => c,
                Reading::Unavailable(u) => return Ok(Reading::Unavailable(u)),
            };
            if count == 0 {
                return Ok(Reading::unavailable(
                    UnavailableReason::NotSupported,
                    format!(
                        "{}: the driver reports no statistics (ETH_SS_STATS count 0)",
                        self.ifname
                    ),
                ));
            }
            if count > MAX_STATS {
                return Err(EthtoolError::TooManyStats {
                    ifname: self.ifname.clone(),
                    count,
                    max: MAX_STATS,
                });
            }
            match self.stats_once(count)? {
                Reading::Read(Step::Done(v)) => return Ok(Reading::Read(v)),
                Reading::Read(Step::Changed) => {
                    tracing::debug!(ifname = %self.ifname, attempt, "ethtool statistics changed while read; retrying");
                }
                Reading::Unavailable(u) => return Ok(Reading::Unavailable(u)),
            }
        }
        Err(EthtoolError::Unstable {
            ifname: self.ifname.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }

    fn stats_once(&mut self, count: u32) -> Result<Reading<Step<NamedValues>>, EthtoolError> {
        let stale = self.names.len() != count as usize;
        if stale || self.refresh == NameRefresh::Always {
            match self.strings(count)? {
                Reading::Read(Step::Done(n)) => {
                    if stale {
                        tracing::info!(ifname = %self.ifname, count, "ethtool statistic names (re)read");
                    }
                    self.names = n;
                }
                Reading::Read(Step::Changed) => return Ok(Reading::Read(Step::Changed)),
                Reading::Unavailable(u) => return Ok(Reading::Unavailable(u)),
            }
        }
        let values = match self.values(count)? {
            Reading::Read(Step::Done(v)) => v,
            Reading::Read(Step::Changed) => return Ok(Reading::Read(Step::Changed)),
            Reading::Unavailable(u) => return Ok(Reading::Unavailable(u)),
        };
        if self.refresh == NameRefresh::Always {
            match self.strings(count)? {
                Reading::Read(Step::Done(n)) if n == self.names => {}
                Reading::Read(_) => {
                    self.names.clear();
                    return Ok(Reading::Read(Step::Changed));
                }
                Reading::Unavailable(u) => return Ok(Reading::Unavailable(u)),
            }
        }
        Ok(Reading::Read(Step::Done(
            self.names.iter().cloned().zip(values).collect(),
        )))
    }

    /// Standard pause settings and statistics over ethtool netlink (socket and family id are
    /// kept between calls).
    pub fn pause(&mut self) -> Result<Reading<PauseStats>, EthtoolError> {
        let nl = |source| EthtoolError::Netlink {
            ifname: self.ifname.clone(),
            source,
        };
        if self.pause.is_none() {
            let mut sock = match NlSocket::open(libc::NETLINK_GENERIC) {
                Ok(s) => s,
                Err(e) => return unavailable_or(e, "generic netlink socket").map_err(nl),
            };
            let id = match netlink::genl_family_id(&mut sock, ETHTOOL_GENL_NAME) {
                Ok(id) => id,
                Err(e) if e.errno() == Some(libc::ENOENT) => {
                    return Ok(Reading::unavailable(
                        UnavailableReason::NotSupported,
                        "ethtool netlink family not registered (kernel older than 5.6 or ETHTOOL_NETLINK off)",
                    ));
                }
                Err(e) => return Err(nl(e)),
            };
            self.pause = Some((sock, id));
        }
        let Some((sock, family)) = self.pause.as_mut() else {
            unreachable!("set above")
        };
        let r = request_pause(sock, *family, &self.ifname);
        r.or_else(|e| unavailable_or(e, &format!("ETHTOOL_MSG_PAUSE_GET on {}", self.ifname)))
            .map_err(|source| EthtoolError::Netlink {
                ifname: self.ifname.clone(),
                source,
            })
    }
}

fn unavailable_or<T>(e: NetlinkError, what: &str) -> Result<Reading<T>, NetlinkError> {
    match e.errno().and_then(|n| Unavailable::from_errno(n, what)) {
        Some(u) => Ok(Reading::Unavailable(u)),
        None => Err(e),
    }
}

fn open_ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2); checked below.
    let mut fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        // Hosts without IPv4: any socket reaches dev_ioctl (net/socket.c sock_do_ioctl).
        // SAFETY: as above.
        fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Standard pause parameters and IEEE 802.3 pause-frame counters (global pause, not PFC).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PauseStats {
    pub autoneg: Option<bool>,
    /// 802.3x pause reception enabled (`ethtool -a`: RX).
    pub rx_pause: Option<bool>,
    /// 802.3x pause transmission enabled.
    pub tx_pause: Option<bool>,
    /// PAUSE frames sent (`ETHTOOL_A_PAUSE_STAT_TX_FRAMES`); `None` when the driver does not
    /// report it.
    pub tx_pause_frames: Option<u64>,
    /// PAUSE frames received (`ETHTOOL_A_PAUSE_STAT_RX_FRAMES`).
    pub rx_pause_frames: Option<u64>,
}

fn request_pause(
    sock: &mut NlSocket,
    family: u16,
    ifname: &str,
) -> Result<Reading<PauseStats>, NetlinkError> {
    let seq = sock.next_seq();
    let flags = netlink::NLM_F_REQUEST | netlink::NLM_F_ACK;
    let mut b = MsgBuilder::new(family, flags, seq).header(&[ETHTOOL_MSG_PAUSE_GET, 1, 0, 0]);
    let h = b.nest_start(ETHTOOL_A_PAUSE_HEADER);
    let mut name = kernel_name(ifname);
    name.push(0);
    b.attr(ETHTOOL_A_HEADER_DEV_NAME, &name);
    b.attr_u32(ETHTOOL_A_HEADER_FLAGS, ETHTOOL_FLAG_STATS);
    b.nest_end(h);
    let mut out = None;
    sock.transact(&b.finish(), seq, |m| -> Result<(), NetlinkError> {
        if m.ty == family {
            out = Some(decode_pause_reply(m.payload)?);
        }
        Ok(())
    })?;
    match out {
        Some(p) => Ok(Reading::Read(p)),
        None => Err(NetlinkError::Unexpected(
            "no ETHTOOL_MSG_PAUSE_GET_REPLY".into(),
        )),
    }
}

/// Decodes an `ETHTOOL_MSG_PAUSE_GET_REPLY` payload (genlmsghdr + attributes). Offsets in errors
/// count from the start of the payload.
pub fn decode_pause_reply(payload: &[u8]) -> Result<PauseStats, NetlinkError> {
    let body = payload
        .get(netlink::GENL_HDRLEN..)
        .ok_or_else(|| NetlinkError::Truncated {
            what: "genlmsghdr".into(),
            offset: 0,
            need: netlink::GENL_HDRLEN,
            have: payload.len(),
        })?;
    let mut p = PauseStats::default();
    for a in netlink::attrs(body, netlink::GENL_HDRLEN) {
        let a = a?;
        match a.kind {
            ETHTOOL_A_PAUSE_AUTONEG => p.autoneg = Some(a.u8("ETHTOOL_A_PAUSE_AUTONEG")? != 0),
            ETHTOOL_A_PAUSE_RX => p.rx_pause = Some(a.u8("ETHTOOL_A_PAUSE_RX")? != 0),
            ETHTOOL_A_PAUSE_TX => p.tx_pause = Some(a.u8("ETHTOOL_A_PAUSE_TX")? != 0),
            ETHTOOL_A_PAUSE_STATS => {
                for s in a.nested() {
                    let s = s?;
                    match s.kind {
                        ETHTOOL_A_PAUSE_STAT_TX_FRAMES => {
                            p.tx_pause_frames = Some(s.u64("ETHTOOL_A_PAUSE_STAT_TX_FRAMES")?)
                        }
                        ETHTOOL_A_PAUSE_STAT_RX_FRAMES => {
                            p.rx_pause_frames = Some(s.u64("ETHTOOL_A_PAUSE_STAT_RX_FRAMES")?)
                        }
                        _ => {} // _PAD and newer statistics
                    }
                }
            }
            _ => {} // header nest, ETHTOOL_A_PAUSE_STATS_SRC, newer attributes
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::super::testbytes::{nest, nla, nla_str};
    use super::*;

    #[test]
    fn ifname_checks() {
        assert!(ifname_field("eth0").is_ok());
        assert!(ifname_field("").is_err());
        assert!(ifname_field("a-very-long-name0").is_err());
        assert!(ifname_field("a\0b").is_err());
        assert!(ifname_field("../x").is_err());
        let f = ifname_field("lo").unwrap();
        assert_eq!((f[0] as u8, f[1] as u8, f[2] as u8), (b'l', b'o', 0));
    }

    #[test]
    fn drvinfo_and_strings_from_uapi_layout() {
        let mut b = vec![0u8; 196];
        b[0..4].copy_from_slice(&3u32.to_ne_bytes());
        b[4..13].copy_from_slice(b"mlx5_core");
        b[68..80].copy_from_slice(b"22.39.1002 (");
        b[100..112].copy_from_slice(b"0000:3b:00.0");
        b[180..184].copy_from_slice(&1234u32.to_ne_bytes());
        let d = decode_drvinfo(&b).unwrap();
        assert_eq!(d.driver, "mlx5_core");
        assert_eq!(d.bus_info, "0000:3b:00.0");
        assert_eq!(d.fw_version, "22.39.1002 (");
        assert_eq!(d.n_stats, 1234);
        assert!(decode_drvinfo(&b[..150]).is_none());

        let mut s = vec![0u8; 3 * 32];
        s[0..14].copy_from_slice(b"rx_prio3_pause");
        // a full 32-byte name without NUL
        s[32..64].copy_from_slice(&[b'x'; 32]);
        s[64..94].copy_from_slice(b"tx_pause_storm_warning_events ");
        let n = decode_strings(&s, 3);
        assert_eq!(n[0], "rx_prio3_pause");
        assert_eq!(n[1].len(), 32);
        assert_eq!(n[2], "tx_pause_storm_warning_events ");
        // asking for more names than the data holds never panics
        assert_eq!(decode_strings(&s[..40], 3).len(), 1);
    }

    fn pause_payload(stats: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![22u8, 1, 0, 0]; // ETHTOOL_MSG_PAUSE_GET_REPLY, version 1
        p.extend(nest(1, &[nla(1, &2u32.to_ne_bytes()), nla_str(2, "eth0")]));
        p.extend(nla(2, &[0]));
        p.extend(nla(3, &[1]));
        p.extend(nla(4, &[1]));
        p.extend(nest(5, stats));
        p
    }

    #[test]
    fn pause_reply_decoding() {
        let p = pause_payload(&[
            nla(1, &[]),
            nla(2, &7u64.to_ne_bytes()),
            nla(3, &9u64.to_ne_bytes()),
        ]);
        let s = decode_pause_reply(&p).unwrap();
        assert_eq!(s.autoneg, Some(false));
        assert_eq!((s.rx_pause, s.tx_pause), (Some(true), Some(true)));
        assert_eq!((s.tx_pause_frames, s.rx_pause_frames), (Some(7), Some(9)));
        // driver fills only RX
        let p = pause_payload(&[nla(3, &5u64.to_ne_bytes())]);
        let s = decode_pause_reply(&p).unwrap();
        assert_eq!((s.tx_pause_frames, s.rx_pause_frames), (None, Some(5)));
        // truncated: cut inside the stats nest
        let full = pause_payload(&[nla(2, &7u64.to_ne_bytes())]);
        let e = decode_pause_reply(&full[..full.len() - 3]).unwrap_err();
        assert!(matches!(e, NetlinkError::Truncated { .. }), "{e}");
        // malformed: TX_FRAMES with 4 bytes
        let bad = pause_payload(&[nla(2, &7u32.to_ne_bytes())]);
        let e = decode_pause_reply(&bad).unwrap_err();
        assert!(
            e.to_string().contains("ETHTOOL_A_PAUSE_STAT_TX_FRAMES"),
            "{e}"
        );
        assert!(decode_pause_reply(&[22, 1]).is_err());
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// Real ioctl on `lo`: loopback has no driver statistics, so the reader must say
    /// "unavailable" with a reason, not fail and not return zeros.
    #[test]
    fn live_loopback() {
        let mut r = EthtoolReader::new("lo", NameRefresh::Always).unwrap();
        match r.stats().unwrap() {
            Reading::Read(v) => assert!(!v.is_empty()),
            Reading::Unavailable(u) => {
                assert_eq!(u.reason, UnavailableReason::NotSupported, "{u}");
                eprintln!("lo: {u}");
            }
        }
        if let Reading::Read(d) = r.drvinfo().unwrap() {
            eprintln!("lo driver {:?}", d.driver);
        }
        // pause on lo: no get_pauseparam -> unavailable
        match r.pause().unwrap() {
            Reading::Unavailable(u) => eprintln!("lo pause: {u}"),
            Reading::Read(p) => eprintln!("lo pause: {p:?}"),
        }
        let mut missing = EthtoolReader::new("nosuchif0", NameRefresh::Always).unwrap();
        let u = missing.stats().unwrap();
        assert_eq!(
            u.reason().map(|u| u.reason),
            Some(UnavailableReason::NoSuchDevice)
        );
    }

    /// A veth pair (root only): veth has driver statistics (`peer_ifindex`, per-queue counters).
    #[test]
    fn live_veth_when_root() {
        if !is_root() {
            eprintln!("not root: veth test skipped");
            return;
        }
        let name = format!("nict{}", std::process::id() % 100_000);
        let peer = format!("{name}p");
        let ok = std::process::Command::new("ip")
            .args(["link", "add", &name, "type", "veth", "peer", "name", &peer])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("cannot create a veth here: test skipped");
            return;
        }
        let res = std::panic::catch_unwind(|| {
            let mut r = EthtoolReader::new(&name, NameRefresh::Always).unwrap();
            let d = r.drvinfo().unwrap().into_value().unwrap();
            assert_eq!(d.driver, "veth");
            let v = r
                .stats()
                .unwrap()
                .into_value()
                .expect("veth has statistics");
            assert!(v.iter().any(|(n, _)| n == "peer_ifindex"), "{v:?}");
            let again = r.stats().unwrap().into_value().unwrap();
            assert_eq!(v.len(), again.len());
        });
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &name])
            .status();
        if let Err(p) = res {
            std::panic::resume_unwind(p);
        }
    }
}
