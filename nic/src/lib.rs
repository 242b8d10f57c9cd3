//! NIC-side view of RoCE: what a host can read about RDMA traffic that the NIC handles itself
//! (hardware RoCE never reaches the netdev, see docs on where RoCE packets are visible).
//!
//! Sources, each read in the network namespace the process is in:
//! - driver statistics through the `SIOCETHTOOL` ioctl ([`ethtool`]), standard pause statistics
//!   through ethtool generic netlink;
//! - RDMA port hardware counters through RDMA netlink, sysfs as fallback ([`rdma`]);
//! - IEEE DCB (PFC, ETS, APP table, buffers) through rtnetlink dcbnl ([`dcb`]);
//! - congestion-control / ECN / RoCE ToS / GID-type configuration from sysfs, debugfs and
//!   configfs ([`config`]).
//!
//! A [`NicReader`] returns one [`NicSample`] per call. A source that the kernel or the device does
//! not offer is *unavailable* (with a reason, see [`Unavailable`]), which is not an error; an error
//! is something that should have worked and did not (malformed kernel reply, a bound exceeded).
//! [`counters`] turns two samples into deltas, [`normalize`] maps driver-specific names onto one
//! vendor-neutral schema, and [`checks`] compares the configuration with an expected policy.

pub mod checks;
pub mod command;
pub mod config;
pub mod counters;
pub mod dcb;
pub mod dump;
pub mod ethtool;
pub mod netlink;
pub mod normalize;
pub mod rdma;
pub mod reader;
pub mod sysfs;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use checks::{Check, Policy, Trust, Verdict, run_checks};
pub use config::NicConfig;
pub use counters::{CounterDiff, diff_counters};
pub use dcb::DcbIeee;
pub use ethtool::{DrvInfo, PauseStats};
pub use normalize::{Driver, Normalized, Quantity, normalize};
pub use reader::{LiveNicReader, LiveOptions, ScriptedReader};

/// Why a source or setting could not be read, when that is a property of the host and not a
/// failure: the kernel, driver or device does not offer it, the device does not exist, or the
/// process lacks the permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnavailableReason {
    /// The kernel or driver does not implement it (`EOPNOTSUPP`, no `dcbnl_ops`, no stats).
    NotSupported,
    /// No such interface or RDMA device (`ENODEV`), or no RDMA device bound to the interface.
    NoSuchDevice,
    /// `EPERM` / `EACCES` (e.g. debugfs is root-only, mode 0600).
    Permission,
    /// The file or directory does not exist (module not loaded, OFED-only file on an upstream
    /// kernel, configfs group not created, debugfs not mounted).
    Absent,
}

/// An unavailable source or setting, with a human-readable detail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    pub reason: UnavailableReason,
    pub detail: String,
}

impl Unavailable {
    pub fn new(reason: UnavailableReason, detail: impl Into<String>) -> Self {
        Unavailable {
            reason,
            detail: detail.into(),
        }
    }

    /// Classifies an errno: `Some` when it means "not offered here", `None` when it is an error.
    pub fn from_errno(errno: i32, what: &str) -> Option<Self> {
        let reason = match errno {
            libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT | libc::EAFNOSUPPORT => {
                UnavailableReason::NotSupported
            }
            libc::ENODEV | libc::ENXIO => UnavailableReason::NoSuchDevice,
            libc::EPERM | libc::EACCES => UnavailableReason::Permission,
            libc::ENOENT => UnavailableReason::Absent,
            _ => return None,
        };
        let text = std::io::Error::from_raw_os_error(errno);
        Some(Unavailable::new(reason, format!("{what}: {text}")))
    }

    /// Classifies an I/O error of a file read (absent file, permission).
    pub fn from_io(e: &std::io::Error, what: &str) -> Option<Self> {
        match e.kind() {
            std::io::ErrorKind::NotFound => Some(Unavailable::new(
                UnavailableReason::Absent,
                format!("{what}: not present"),
            )),
            std::io::ErrorKind::PermissionDenied => Some(Unavailable::new(
                UnavailableReason::Permission,
                format!("{what}: permission denied"),
            )),
            _ => e
                .raw_os_error()
                .and_then(|n| Unavailable::from_errno(n, what)),
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = serde_json::to_value(self.reason).ok();
        let r = r.as_ref().and_then(|v| v.as_str()).unwrap_or("unavailable");
        write!(f, "{r}: {}", self.detail)
    }
}

/// A value that was read, or the reason it could not be (never a made-up 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading<T> {
    Read(T),
    Unavailable(Unavailable),
}

impl<T> Reading<T> {
    pub fn unavailable(reason: UnavailableReason, detail: impl Into<String>) -> Self {
        Reading::Unavailable(Unavailable::new(reason, detail))
    }
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Read(v) => Some(v),
            Reading::Unavailable(_) => None,
        }
    }
    pub fn into_value(self) -> Option<T> {
        match self {
            Reading::Read(v) => Some(v),
            Reading::Unavailable(_) => None,
        }
    }
    pub fn reason(&self) -> Option<&Unavailable> {
        match self {
            Reading::Read(_) => None,
            Reading::Unavailable(u) => Some(u),
        }
    }
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Read(v) => Reading::Read(f(v)),
            Reading::Unavailable(u) => Reading::Unavailable(u),
        }
    }
}

/// The sources of one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// `SIOCETHTOOL` `ETHTOOL_GSTATS` (driver-private `ethtool -S`).
    EthtoolStats,
    /// `SIOCETHTOOL` `ETHTOOL_GDRVINFO`.
    EthtoolDrvinfo,
    /// ethtool netlink `ETHTOOL_MSG_PAUSE_GET` with statistics.
    EthtoolPause,
    /// RDMA port hw counters (netlink `RDMA_NLDEV_CMD_STAT_GET` or sysfs).
    RdmaCounters,
    /// rtnetlink dcbnl `DCB_CMD_IEEE_GET`.
    Dcb,
    /// sysfs / debugfs / configfs configuration.
    Config,
}

/// How a source fared in one read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum SourceStatus {
    /// Read; `via` names the path used (e.g. "netlink", "sysfs").
    Answered {
        via: String,
    },
    Unavailable(Unavailable),
    /// An error (malformed reply, bound exceeded, unexpected errno); the field is `None`.
    Failed {
        error: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    pub source: SourceKind,
    #[serde(flatten)]
    pub status: SourceStatus,
}

/// RDMA port counters of the RDMA device bound to the interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// RDMA device name (e.g. `mlx5_0`, `mlx5_bond_0`, `rocep1s0f0`, `rxe0`).
    pub dev: String,
    pub port: u32,
    /// Raw hw counter name -> value, in kernel order.
    pub counters: Vec<(String, u64)>,
    /// "netlink" or "sysfs".
    pub via: String,
}

/// DCB state: read, or unavailable (veth, lo and most virtual devices have no `dcbnl_ops`).
pub type DcbState = Reading<DcbIeee>;

/// One sample of everything the NIC tells about RoCE on one interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicSample {
    pub ifname: String,
    /// `CLOCK_REALTIME` nanoseconds at the start of the read.
    pub time_ns: u64,
    pub drvinfo: Option<DrvInfo>,
    /// `ethtool -S` name -> value in driver order; `None` = unavailable (see `sources`).
    pub ethtool: Option<Vec<(String, u64)>>,
    pub pause: Option<PauseStats>,
    pub rdma: Option<RdmaPort>,
    pub dcb: DcbState,
    pub config: NicConfig,
    pub sources: Vec<SourceReport>,
}

impl NicSample {
    /// An empty sample (every source unavailable) to start from.
    pub fn empty(ifname: &str, time_ns: u64) -> Self {
        NicSample {
            ifname: ifname.to_string(),
            time_ns,
            drvinfo: None,
            ethtool: None,
            pause: None,
            rdma: None,
            dcb: Reading::unavailable(UnavailableReason::NotSupported, "not read"),
            config: NicConfig::default(),
            sources: Vec::new(),
        }
    }

    pub fn status(&self, source: SourceKind) -> Option<&SourceStatus> {
        self.sources
            .iter()
            .find(|r| r.source == source)
            .map(|r| &r.status)
    }

    /// The driver family for name mapping (ethtool driver first, then the RDMA device).
    pub fn driver(&self) -> Driver {
        let eth = self.drvinfo.as_ref().map(|d| d.driver.as_str());
        let rdma_dev = self.rdma.as_ref().map(|r| r.dev.as_str());
        Driver::detect(
            eth,
            self.config.rdma_parent_driver.value().map(|s| s.as_str()),
            rdma_dev,
        )
    }
}

#[derive(Debug, Error)]
pub enum NicError {
    #[error("invalid interface name {name:?}: {why}")]
    InvalidInterface { name: String, why: &'static str },
    #[error("interface {name} does not exist in this network namespace")]
    NoSuchInterface {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ethtool")]
    Ethtool(#[from] ethtool::EthtoolError),
    #[error("RDMA")]
    Rdma(#[from] rdma::RdmaError),
    #[error("DCB")]
    Dcb(#[from] dcb::DcbError),
    #[error("configuration")]
    Config(#[from] config::ConfigError),
    #[error("scripted reader has no more samples")]
    Exhausted,
}

/// Reads one sample per call. The live implementation ([`LiveNicReader`]) reads the kernel; tests
/// use [`ScriptedReader`].
pub trait NicReader {
    fn read(&mut self) -> Result<NicSample, NicError>;
}

/// Byte builders for tests, written from the UAPI layouts independently of the decoders.
#[cfg(test)]
pub(crate) mod testbytes {
    /// `struct nlattr` + payload + padding to 4.
    pub fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }
    /// A nested attribute (`NLA_F_NESTED` set) holding the concatenated children.
    pub fn nest(ty: u16, children: &[Vec<u8>]) -> Vec<u8> {
        nla(ty | 0x8000, &children.concat())
    }
    pub fn nla_str(ty: u16, s: &str) -> Vec<u8> {
        let mut p = s.as_bytes().to_vec();
        p.push(0);
        nla(ty, &p)
    }
    /// `struct nlmsghdr` + payload.
    pub fn nlmsg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classification() {
        let u = Unavailable::from_errno(libc::EOPNOTSUPP, "dcb").unwrap();
        assert_eq!(u.reason, UnavailableReason::NotSupported);
        assert_eq!(
            Unavailable::from_errno(libc::ENODEV, "x").unwrap().reason,
            UnavailableReason::NoSuchDevice
        );
        assert_eq!(
            Unavailable::from_errno(libc::EACCES, "x").unwrap().reason,
            UnavailableReason::Permission
        );
        assert!(Unavailable::from_errno(libc::EINVAL, "x").is_none());
        assert!(u.to_string().starts_with("not_supported: dcb"), "{u}");
    }

    #[test]
    fn reading_serializes_reason() {
        let r: Reading<u8> = Reading::unavailable(UnavailableReason::Absent, "no file");
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(
            j,
            r#"{"unavailable":{"reason":"absent","detail":"no file"}}"#
        );
        assert_eq!(
            serde_json::to_string(&Reading::Read(3u8)).unwrap(),
            r#"{"read":3}"#
        );
    }
}

/// The vendor-neutral counters of the interval between two samples of one interface: every
/// ethtool and RDMA counter's delta (wraps, resets and absent counters handled by
/// [`counters`]), mapped onto [`Quantity`] for the driver, the rest kept raw.
pub fn interval_between(a: &NicSample, b: &NicSample) -> Normalized {
    let eth_driver = b
        .drvinfo
        .as_ref()
        .map(|d| Driver::from_ethtool(&d.driver))
        .unwrap_or(Driver::Other);
    let rdma_driver = Driver::from_rdma(
        b.config.rdma_parent_driver.value().map(String::as_str),
        b.rdma.as_ref().map(|r| r.dev.as_str()),
    );
    let eth = diff_counters(
        eth_driver,
        normalize::Src::Ethtool,
        a.ethtool.as_deref(),
        b.ethtool.as_deref(),
    );
    fn rdma_counters(s: &NicSample) -> Option<&[(String, u64)]> {
        s.rdma.as_ref().map(|r| r.counters.as_slice())
    }
    let rdma = diff_counters(
        rdma_driver,
        normalize::Src::Rdma,
        rdma_counters(a),
        rdma_counters(b),
    );
    normalize(eth_driver, &eth, rdma_driver, &rdma)
}

/// What a first sample says the NIC source will read, one line per source: for the live
/// command's start-up report.
pub fn startup_lines(s: &NicSample) -> Vec<String> {
    let mut out = Vec::new();
    let drv = s
        .drvinfo
        .as_ref()
        .map(|d| {
            format!(
                "driver {}, firmware {}, bus {}",
                d.driver, d.fw_version, d.bus_info
            )
        })
        .unwrap_or_else(|| "driver unknown".into());
    let rdma = s
        .rdma
        .as_ref()
        .map(|r| format!("RDMA device {} port {}", r.dev, r.port))
        .unwrap_or_else(|| "no RDMA device".into());
    out.push(format!("{}: NIC: {drv}; {rdma}", s.ifname));
    match &s.config.gid_types {
        Reading::Read(g) => {
            let v2 = g.iter().filter(|e| e.gid_type == "RoCE v2").count();
            out.push(format!(
                "{}: NIC: {} GIDs, {v2} of them RoCE v2",
                s.ifname,
                g.len()
            ));
        }
        Reading::Unavailable(u) => {
            out.push(format!(
                "{}: NIC: GID types unavailable ({})",
                s.ifname, u.detail
            ));
        }
    }
    for r in &s.sources {
        let what = match &r.status {
            SourceStatus::Answered { via } => format!("read ({via})"),
            SourceStatus::Unavailable(u) => format!("unavailable ({:?}: {})", u.reason, u.detail),
            SourceStatus::Failed { error } => format!("FAILED: {error}"),
        };
        out.push(format!("{}: NIC source {:?}: {what}", s.ifname, r.source));
    }
    if let Some(e) = &s.ethtool {
        out.push(format!(
            "{}: NIC: {} ethtool counters each interval",
            s.ifname,
            e.len()
        ));
    }
    out
}
