//! `roce-observe nic --iface IF`: a one-shot bring-up check of one host's NIC. Reads what
//! `ethtool -S`, `ethtool -a`, `rdma statistic`, `mlnx_qos` / `dcb` and the sysfs, debugfs and
//! configfs trees say (through [`crate`]), twice, `--sample` apart; prints the
//! configuration, a verdict per configuration check against the expected policy, and the
//! vendor-neutral counter deltas over the window. Exit status 1 when a check fails, 2 on usage
//! errors and a missing interface.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use observer_common::maps::{ANY, class};
use serde::Serialize;

use crate::checks::{self, Check, Trust, Verdict};
use crate::config::OfedEcn;
use crate::counters::diff_counters;
use crate::dcb::APP_SEL_DSCP;
use crate::normalize::{GaugeReading, Src, normalize};
use crate::rdma::GidEntry;
use crate::{
    Driver, DrvInfo, LiveNicReader, LiveOptions, NicError, NicReader, NicSample, PauseStats,
    Quantity, Reading, SourceKind, SourceReport, SourceStatus, UnavailableReason, run_checks,
};
use contract::cli::ExitStatus;
use contract::cli::parse_duration;
use contract::policy::PolicyConfig;
use contract::vendor::Vendor;

#[derive(Debug, clap::Args)]
pub struct NicArgs {
    /// Interface to check (the netdev; its RDMA device is found through RDMA netlink or sysfs).
    /// A name that is not UTF-8: as its bytes, or with `\xNN` for each byte that is not.
    #[arg(
        long = "iface",
        value_name = "IFACE",
        value_parser = contract::cli::iface_arg(),
        required_unless_present = "from"
    )]
    pub iface: Option<String>,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Expected configuration profile: PFC on priority 3, data DSCP 26, CNP DSCP 48, CNP
    /// priority 6 (nvidia) or 7 (broadcom), trust DSCP.
    #[arg(long, value_name = "VENDOR", value_enum, default_value_t = Vendor::Nvidia)]
    pub profile: Vendor,
    /// Policy TOML file (overrides --profile; see docs/policy.md): rdma_priority, data.dscp,
    /// cnp.dscp, cnp.pcp are used here.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Time between the two samples the counter deltas are taken over (`1s`, `500ms`, `2`).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub sample: Duration,
    /// An unknown check fails the command too (exit 1): for automation, a setting that could
    /// not be read is not verified.
    #[arg(long)]
    pub strict: bool,
    /// Also write the two samples (everything read: counters, configuration, what could not be
    /// read) to FILE, for `--from` on another machine (a support engineer's).
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub save: Option<PathBuf>,
    /// Check the samples a `--save` wrote instead of reading a NIC (under this command's
    /// policy or profile); or a directory of two reads of `ethtool -i`, `ethtool -S` and
    /// `rdma statistic` text a customer took (DIR/1, DIR/2; docs/nic.md#a-customers-dump).
    #[arg(long, value_name = "FILE|DIR")]
    pub from: Option<PathBuf>,
}

/// What `--save` writes and `--from` reads.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct SavedSamples {
    /// 1.
    pub version: u32,
    pub window_s: f64,
    pub first: NicSample,
    pub second: NicSample,
}

/// The expectations of the configuration checks from the project's policy: the RDMA priority,
/// the data and CNP DSCP, the CNP priority (the CNP class's PCP when the policy sets one, else
/// the profile's), and the trust mode (PCP when the policy sets a data PCP but no data DSCP).
/// The profile is the one the policy starts from (`cfg.profile`: a file's `profile`, or
/// `--profile`), the same for the live command's NIC check and `roce-observe nic`. Also returns
/// notes on values that the policy leaves open ("any") and the profile filled in.
pub fn check_policy(cfg: &PolicyConfig) -> (checks::Policy, Vec<String>) {
    let profile = cfg.profile;
    let base = checks::Policy::from_profile(profile.profile());
    let e = &cfg.expected;
    let mut notes = Vec::new();
    let mut dscp = |c: usize, fallback: u8| match e.dscp[c] {
        d if d <= 63 => d,
        _ => {
            notes.push(format!(
                "{}.dscp is \"any\" in the policy: checking DSCP {fallback} (profile {profile})",
                class::NAMES[c]
            ));
            fallback
        }
    };
    let data_dscp = dscp(class::DATA, base.data_dscp);
    let cnp_dscp = dscp(class::CNP, base.cnp_dscp);
    // a PCP of tagged frames (PCP_IF_TAGGED | p) or of every frame (p); not "any" or untagged
    let pcp_of = |v: u8| (v != ANY && v & 0x0f <= 7).then_some(v & 7);
    let cnp_priority = pcp_of(e.pcp[class::CNP]).unwrap_or(base.cnp_priority);
    let trust = if e.dscp[class::DATA] == ANY && pcp_of(e.pcp[class::DATA]).is_some() {
        Trust::Pcp
    } else {
        Trust::Dscp
    };
    let p = checks::Policy {
        rdma_priority: e.rdma_priority,
        data_dscp,
        cnp_dscp,
        cnp_priority,
        trust,
    };
    (p, notes)
}

// ---------------------------------------------------------------------------------------------
// The report: one structure, printed as text or serialized as JSON.

#[derive(Debug, Serialize)]
pub struct NicReport {
    pub interface: String,
    /// `CLOCK_REALTIME` nanoseconds of the second sample.
    pub time_ns: u64,
    /// Seconds between the two samples (measured).
    pub window_s: f64,
    pub netdev: NetdevInfo,
    /// The RDMA port bound to the interface, when its counters were read.
    pub rdma: Option<RdmaInfo>,
    pub sources: Vec<SourceReport>,
    pub policy: PolicyInfo,
    pub config: ConfigView,
    pub checks: Vec<Check>,
    pub counters: CountersView,
    pub summary: Summary,
}

#[derive(Debug, Serialize)]
pub struct NetdevInfo {
    /// `ETHTOOL_GDRVINFO`: driver, version, fw_version, bus_info; null when unavailable.
    pub drvinfo: Option<DrvInfo>,
    /// Driver family used to name counters (mlx5, bnxt, ice, rxe, other).
    pub family: Driver,
}

#[derive(Debug, Serialize)]
pub struct RdmaInfo {
    pub device: String,
    pub port: u32,
    /// "netlink" or "sysfs".
    pub via: String,
    pub family: Driver,
    pub fw_version: Reading<String>,
}

#[derive(Debug, Serialize)]
pub struct PolicyInfo {
    /// "profile nvidia", or the policy file's path.
    pub source: String,
    pub expected: checks::Policy,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct DscpPriority {
    pub dscp: u16,
    pub priority: u8,
}

/// The RoCE-relevant configuration, each value read or unavailable with the reason.
#[derive(Debug, Serialize)]
pub struct ConfigView {
    /// Priorities with PFC enabled (IEEE `pfc_en`).
    pub pfc_enabled: Reading<Vec<u8>>,
    /// 802.3x global pause settings and frame counters; null when unread (see `sources`).
    pub global_pause: Option<PauseStats>,
    /// DSCP when the APP table has DSCP entries (mlx5 trust state), else PCP.
    pub trust: Reading<Trust>,
    /// IEEE APP table DSCP (selector 5) entries, by DSCP.
    pub dscp_priority: Reading<Vec<DscpPriority>>,
    /// ETS priority -> traffic class.
    pub prio_tc: Reading<[u8; 8]>,
    /// DSCP of the CNPs this host sends (mlx5 debugfs `np_cnp_dscp`, or OFED `cnp_dscp`).
    pub cnp_dscp: Reading<u64>,
    /// 802.1p priority of the CNPs (`np_cnp_prio`, or OFED `cnp_802p_prio`).
    pub cnp_priority: Reading<u64>,
    /// rdma_cm default ToS byte (DSCP << 2 | ECN).
    pub default_roce_tos: Reading<u8>,
    pub default_roce_mode: Reading<String>,
    pub gid_types: Reading<Vec<GidEntry>>,
}

#[derive(Debug, Serialize)]
pub struct RawCounts {
    /// Number of `ethtool -S` counters in the second sample (null: unavailable).
    pub ethtool: Option<usize>,
    /// Number of RDMA port hw counters (null: unavailable).
    pub rdma: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct QuantityRow {
    pub quantity: Quantity,
    /// Delta over the window; null when absent in either sample.
    pub delta: Option<u64>,
    pub rate_per_s: Option<f64>,
    pub reset: bool,
    pub src: Src,
    pub raw: String,
}

#[derive(Debug, Serialize)]
pub struct RawRow {
    pub src: Src,
    pub name: String,
    pub delta: u64,
    pub rate_per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct CountersView {
    pub raw_counts: RawCounts,
    /// Every vendor-neutral quantity the driver maps, with its delta over the window.
    pub quantities: Vec<QuantityRow>,
    /// Counters without a vendor-neutral name that changed over the window.
    pub raw_changed: Vec<RawRow>,
    pub gauges: Vec<GaugeReading>,
    pub resets: u32,
    pub wraps: u32,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub fail: usize,
    pub unknown: usize,
    /// "fail" when a check failed; else "incomplete" when a check is unknown (nothing failed,
    /// but not everything was verified; `--strict` fails on it); else "pass".
    pub result: &'static str,
}

fn reading_of<T>(v: Option<T>, why: impl FnOnce() -> Reading<T>) -> Reading<T> {
    match v {
        Some(v) => Reading::Read(v),
        None => why(),
    }
}

/// The DCB field, or why it is not there.
fn from_dcb<T>(
    s: &NicSample,
    what: &str,
    f: impl FnOnce(&crate::DcbIeee) -> Option<T>,
) -> Reading<T> {
    match &s.dcb {
        Reading::Read(d) => reading_of(f(d), || {
            Reading::unavailable(
                UnavailableReason::NotSupported,
                format!("the driver does not report {what}"),
            )
        }),
        Reading::Unavailable(u) => Reading::Unavailable(u.clone()),
    }
}

/// A CNP parameter from mlx5 debugfs, else the OFED file (as the checks read it).
fn cnp_reading(s: &NicSample, cc_name: &str, ofed: &Reading<u64>) -> Reading<u64> {
    if let Some(v) = s.config.cc(cc_name) {
        return Reading::Read(v);
    }
    if let Reading::Read(v) = ofed {
        return Reading::Read(*v);
    }
    let r1 = s
        .config
        .mlx5_cc
        .reason()
        .map(|u| u.detail.clone())
        .unwrap_or_else(|| format!("{cc_name} unreadable"));
    let (reason, r2) = match ofed.reason() {
        Some(u) => (u.reason, u.detail.clone()),
        None => (UnavailableReason::Absent, String::new()),
    };
    Reading::unavailable(reason, format!("{r1}; {r2}"))
}

fn config_view(s: &NicSample) -> ConfigView {
    let ecn: &OfedEcn = &s.config.ofed_ecn;
    ConfigView {
        pfc_enabled: from_dcb(s, "IEEE PFC", |d| d.pfc.as_ref().map(|p| p.enabled())),
        global_pause: s.pause.clone(),
        trust: from_dcb(s, "an APP table", |d| {
            Some(if d.has_dscp_app() {
                Trust::Dscp
            } else {
                Trust::Pcp
            })
        }),
        dscp_priority: from_dcb(s, "an APP table", |d| {
            let mut v: Vec<DscpPriority> = d
                .app
                .iter()
                .filter(|a| a.selector == APP_SEL_DSCP)
                .map(|a| DscpPriority {
                    dscp: a.protocol,
                    priority: a.priority,
                })
                .collect();
            v.sort_by_key(|e| (e.dscp, e.priority));
            Some(v)
        }),
        prio_tc: from_dcb(s, "IEEE ETS", |d| d.ets.as_ref().map(|e| e.prio_tc)),
        cnp_dscp: cnp_reading(s, "np_cnp_dscp", &ecn.cnp_dscp),
        cnp_priority: cnp_reading(s, "np_cnp_prio", &ecn.cnp_802p_prio),
        default_roce_tos: s.config.default_roce_tos.clone(),
        default_roce_mode: s.config.default_roce_mode.clone(),
        gid_types: s.config.gid_types.clone(),
    }
}

fn counters_view(a: &NicSample, b: &NicSample, window_s: f64) -> CountersView {
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
        Src::Ethtool,
        a.ethtool.as_deref(),
        b.ethtool.as_deref(),
    );
    let rdma_counters = |s: &NicSample| s.rdma.as_ref().map(|r| r.counters.clone());
    let (ra, rb) = (rdma_counters(a), rdma_counters(b));
    let rdma = diff_counters(rdma_driver, Src::Rdma, ra.as_deref(), rb.as_deref());
    let n = normalize(eth_driver, &eth, rdma_driver, &rdma);
    let rate = |d: u64| {
        if window_s > 0.0 {
            d as f64 / window_s
        } else {
            0.0
        }
    };
    CountersView {
        raw_counts: RawCounts {
            ethtool: b.ethtool.as_ref().map(Vec::len),
            rdma: b.rdma.as_ref().map(|r| r.counters.len()),
        },
        quantities: n
            .quantities
            .iter()
            .map(|q| QuantityRow {
                quantity: q.quantity,
                delta: q.delta,
                rate_per_s: q.delta.map(rate),
                reset: q.reset,
                src: q.src,
                raw: q.raw.clone(),
            })
            .collect(),
        raw_changed: n
            .raw
            .iter()
            .filter_map(|r| {
                let d = r.delta.filter(|d| *d > 0)?;
                Some(RawRow {
                    src: r.src,
                    name: r.name.clone(),
                    delta: d,
                    rate_per_s: rate(d),
                })
            })
            .collect(),
        gauges: n.gauges,
        resets: eth.resets + rdma.resets,
        wraps: eth.wraps + rdma.wraps,
    }
}

fn summary(checks: &[Check]) -> Summary {
    let count = |f: fn(&Verdict) -> bool| checks.iter().filter(|c| f(&c.verdict)).count();
    let fail = count(|v| *v == Verdict::Fail);
    Summary {
        pass: count(|v| *v == Verdict::Pass),
        fail,
        unknown: count(|v| matches!(v, Verdict::Unknown(_))),
        result: if fail > 0 {
            "fail"
        } else if checks
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Unknown(_)))
        {
            "incomplete"
        } else {
            "pass"
        },
    }
}

/// Builds the report from two samples of one interface (`a` before `b`).
pub fn build_report(a: &NicSample, b: &NicSample, window_s: f64, policy: PolicyInfo) -> NicReport {
    let checks = run_checks(&policy.expected, b);
    let rdma = b.rdma.as_ref().map(|r| RdmaInfo {
        device: r.dev.clone(),
        port: r.port,
        via: r.via.clone(),
        family: Driver::from_rdma(
            b.config.rdma_parent_driver.value().map(String::as_str),
            Some(&r.dev),
        ),
        fw_version: b.config.rdma_fw_version.clone(),
    });
    NicReport {
        interface: b.ifname.clone(),
        time_ns: b.time_ns,
        window_s,
        netdev: NetdevInfo {
            drvinfo: b.drvinfo.clone(),
            family: b
                .drvinfo
                .as_ref()
                .map(|d| Driver::from_ethtool(&d.driver))
                .unwrap_or(Driver::Other),
        },
        rdma,
        sources: b.sources.clone(),
        policy,
        config: config_view(b),
        counters: counters_view(a, b, window_s),
        summary: summary(&checks),
        checks,
    }
}

// ---------------------------------------------------------------------------------------------
// Text.

/// Columns to lay the text out in: the terminal's width when stdout is one (`COLUMNS` first),
/// else 80; kept between 60 and 140.
fn text_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return c.clamp(60, 140);
    }
    let out = std::io::stdout();
    if out.is_terminal() {
        // SAFETY: TIOCGWINSZ writes one `struct winsize` into the zeroed value we own.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
        if r == 0 && ws.ws_col > 0 {
            return (ws.ws_col as usize).clamp(60, 140);
        }
    }
    80
}

/// Greedy word wrap to `width` columns; a word longer than the width gets a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(10);
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let need = if cur.is_empty() {
            word.chars().count()
        } else {
            cur.chars().count() + 1 + word.chars().count()
        };
        if need > width && !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `prefix` then `text` wrapped to the width, continuation lines indented under the text.
fn field(out: &mut String, prefix: &str, text: &str, width: usize) {
    let indent = prefix.chars().count();
    for (i, line) in wrap(text, width.saturating_sub(indent)).iter().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "{prefix}{line}");
        } else {
            let _ = writeln!(out, "{:indent$}{line}", "");
        }
    }
}

/// A command to copy: each alternative (the checks separate them with three spaces) kept on one
/// line when it fits after the label, else on a line of its own with a small indent; words are
/// broken only when even that does not fit.
fn command_field(out: &mut String, prefix: &str, cmd: &str, width: usize) {
    let indent = prefix.chars().count();
    let avail = width.saturating_sub(indent);
    let mut first = true;
    for seg in cmd.split("   ").map(str::trim).filter(|s| !s.is_empty()) {
        let n = seg.chars().count();
        let lead = if first {
            prefix.to_string()
        } else {
            " ".repeat(indent)
        };
        if n <= avail {
            let _ = writeln!(out, "{lead}{seg}");
        } else if n + 6 <= width {
            if first {
                let _ = writeln!(out, "{}", prefix.trim_end());
            }
            let _ = writeln!(out, "      {seg}");
        } else {
            field(out, &lead, seg, width);
        }
        first = false;
    }
}

fn source_name(k: SourceKind) -> &'static str {
    match k {
        SourceKind::EthtoolStats => "ethtool_stats",
        SourceKind::EthtoolDrvinfo => "ethtool_drvinfo",
        SourceKind::EthtoolPause => "ethtool_pause",
        SourceKind::RdmaCounters => "rdma_counters",
        SourceKind::Dcb => "dcb",
        SourceKind::Config => "config",
    }
}

fn family_name(d: Driver) -> &'static str {
    match d {
        Driver::Mlx5 => "mlx5",
        Driver::Bnxt => "bnxt",
        Driver::Ice => "ice",
        Driver::Rxe => "rxe",
        Driver::Other => "other",
    }
}

/// A value, or why not: the reason in full, or a pointer to the source above that gave the
/// same reason (DCB, RDMA) so the header's reason is not repeated on every line.
fn show<T>(sources: &[SourceReport], r: &Reading<T>, f: impl FnOnce(&T) -> String) -> String {
    match r {
        Reading::Read(v) => f(v),
        Reading::Unavailable(u) => {
            let same = sources
                .iter()
                .find(|s| matches!(&s.status, SourceStatus::Unavailable(x) if x == u));
            match same {
                Some(s) => format!("unavailable (see {} above)", source_name(s.source)),
                None => format!("unavailable ({u})"),
            }
        }
    }
}

fn list(v: &[u8]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
    }
}

/// DSCP ranges per priority: `p0 0-7,9 | p3 24-31`.
fn dscp_map_text(v: &[DscpPriority]) -> String {
    if v.is_empty() {
        return "no DSCP entries in the APP table".into();
    }
    let mut parts = Vec::new();
    for p in 0..8u8 {
        let mut ds: Vec<u16> = v
            .iter()
            .filter(|e| e.priority == p)
            .map(|e| e.dscp)
            .collect();
        if ds.is_empty() {
            continue;
        }
        ds.sort_unstable();
        ds.dedup();
        let mut ranges: Vec<String> = Vec::new();
        let mut i = 0;
        while i < ds.len() {
            let mut j = i;
            while j + 1 < ds.len() && ds[j + 1] == ds[j] + 1 {
                j += 1;
            }
            ranges.push(if i == j {
                ds[i].to_string()
            } else {
                format!("{}-{}", ds[i], ds[j])
            });
            i = j + 1;
        }
        parts.push(format!("prio {p}: DSCP {}", ranges.join(",")));
    }
    parts.join("; ")
}

fn gid_text(g: &[GidEntry]) -> String {
    if g.is_empty() {
        return "no GIDs".into();
    }
    let v2 = g.iter().filter(|e| e.gid_type == "RoCE v2").count();
    let v1 = g.iter().filter(|e| e.gid_type == "IB/RoCE v1").count();
    let other = g.len() - v1 - v2;
    let mut s = format!("{v2} RoCE v2, {v1} IB/RoCE v1");
    if other > 0 {
        let _ = write!(s, ", {other} other");
    }
    s
}

fn rate_text(r: f64) -> String {
    if r >= 1e9 {
        format!("{:.2}G", r / 1e9)
    } else if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e4 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.1}")
    }
}

/// Most unmapped changed counters listed in the text (all are in `--json`).
const RAW_LINES: usize = 12;

/// The text report, laid out for `width` columns: the header (netdev, RDMA port, sources,
/// policy), the configuration, the checks, the counters, the result line.
pub fn render_text(r: &NicReport, width: usize) -> String {
    let mut o = String::new();
    let w = width;
    let _ = writeln!(o, "roce-observe nic: {}", r.interface);
    field(&mut o, "  netdev    ", &netdev_text(&r.netdev), w);
    field(&mut o, "  RDMA      ", &rdma_text(r.rdma.as_ref()), w);
    sources_text(&mut o, &r.sources, w);
    policy_text(&mut o, &r.policy, w);
    configuration_text(&mut o, r, w);
    checks_text(&mut o, &r.checks, w);
    counters_text(&mut o, &r.counters, r.window_s, w);
    result_text(&mut o, &r.summary, w);
    o
}

fn trust_name(t: &Trust) -> &'static str {
    match t {
        Trust::Dscp => "dscp",
        Trust::Pcp => "pcp",
    }
}

/// The header's netdev line: driver, counter naming, firmware, bus.
fn netdev_text(n: &NetdevInfo) -> String {
    let Some(d) = &n.drvinfo else {
        return "driver information unavailable".into();
    };
    let or_na = |s: &str| {
        if s.is_empty() {
            "n/a".to_string()
        } else {
            s.to_string()
        }
    };
    format!(
        "driver {} {} ({}), firmware {}, bus {}",
        d.driver,
        d.version,
        match n.family {
            Driver::Other => "no vendor counter mapping".to_string(),
            f => format!("{} counter names", family_name(f)),
        },
        or_na(&d.fw_version),
        or_na(&d.bus_info)
    )
}

/// The header's RDMA line: the port whose counters were read.
fn rdma_text(rdma: Option<&RdmaInfo>) -> String {
    match rdma {
        Some(x) => format!(
            "{} port {} ({}, via {}), firmware {}",
            x.device,
            x.port,
            family_name(x.family),
            x.via,
            x.fw_version.value().map(String::as_str).unwrap_or("n/a")
        ),
        None => "none read (see rdma_counters below)".into(),
    }
}

/// The header's sources: the ones that answered on one line, then one line per unavailable or
/// failed source with the reason.
fn sources_text(o: &mut String, sources: &[SourceReport], w: usize) {
    let answered: Vec<String> = sources
        .iter()
        .filter_map(|s| match &s.status {
            SourceStatus::Answered { via } => Some(format!("{} ({via})", source_name(s.source))),
            _ => None,
        })
        .collect();
    let answered = if answered.is_empty() {
        "none".to_string()
    } else {
        answered.join(", ")
    };
    field(o, "  answered  ", &answered, w);
    for s in sources {
        match &s.status {
            SourceStatus::Answered { .. } => {}
            SourceStatus::Unavailable(u) => {
                let t = format!("{}: {u}", source_name(s.source));
                field(o, "  unavail.  ", &t, w);
            }
            SourceStatus::Failed { error } => {
                let t = format!("{}: {error}", source_name(s.source));
                field(o, "  FAILED    ", &t, w);
            }
        }
    }
}

/// The header's policy line (where the expectations come from, and what they are) and notes.
fn policy_text(o: &mut String, policy: &PolicyInfo, w: usize) {
    let p = &policy.expected;
    let pol = format!(
        "{}: PFC priority {}, data DSCP {}, CNP DSCP {} / priority {}, trust {}",
        policy.source,
        p.rdma_priority,
        p.data_dscp,
        p.cnp_dscp,
        p.cnp_priority,
        trust_name(&p.trust)
    );
    field(o, "  policy    ", &pol, w);
    for n in &policy.notes {
        field(o, "  note      ", n, w);
    }
}

/// `Configuration`: one labelled line per setting, its value or why it is unavailable.
fn configuration_text(o: &mut String, r: &NicReport, w: usize) {
    let _ = writeln!(o, "\nConfiguration");
    for (k, v) in configuration_rows(&r.sources, &r.config) {
        field(o, &format!("  {k:<14}"), &v, w);
    }
}

fn configuration_rows(sources: &[SourceReport], c: &ConfigView) -> Vec<(&'static str, String)> {
    vec![
        (
            "PFC enabled",
            show(sources, &c.pfc_enabled, |v| {
                format!("priorities {}", list(v))
            }),
        ),
        ("global pause", global_pause_text(c.global_pause.as_ref())),
        ("trust", show(sources, &c.trust, |t| trust_name(t).into())),
        (
            "DSCP -> prio",
            show(sources, &c.dscp_priority, |v| dscp_map_text(v)),
        ),
        (
            "ETS prio->TC",
            show(sources, &c.prio_tc, |v| {
                v.iter()
                    .enumerate()
                    .map(|(p, tc)| format!("{p}:{tc}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        ),
        ("CNP DSCP", show(sources, &c.cnp_dscp, |v| v.to_string())),
        (
            "CNP priority",
            show(sources, &c.cnp_priority, |v| v.to_string()),
        ),
        (
            "RoCE ToS",
            show(sources, &c.default_roce_tos, |t| {
                format!("{t} (DSCP {}, ECN bits {:02b})", t >> 2, t & 3)
            }),
        ),
        (
            "RoCE mode",
            show(sources, &c.default_roce_mode, |m| m.clone()),
        ),
        ("GID types", show(sources, &c.gid_types, |g| gid_text(g))),
    ]
}

fn global_pause_text(p: Option<&PauseStats>) -> String {
    match p {
        Some(p) => {
            let on = |b: Option<bool>| match b {
                Some(true) => "on",
                Some(false) => "off",
                None => "?",
            };
            format!("rx {}, tx {}", on(p.rx_pause), on(p.tx_pause))
        }
        None => "unavailable (see ethtool_pause above)".into(),
    }
}

/// `Checks`: a verdict per check with what was observed; for a failed or unknown check also
/// why, what was expected, the setting and a command to look at it.
fn checks_text(o: &mut String, checks: &[Check], w: usize) {
    let _ = writeln!(o, "\nChecks");
    let name_w = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for ch in checks {
        check_text(o, ch, name_w, w);
    }
}

fn check_text(o: &mut String, ch: &Check, name_w: usize, w: usize) {
    let verdict = match ch.verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::Unknown(_) => "UNKNOWN",
    };
    let prefix = format!("  {verdict:<8}{:<name_w$}  ", ch.name);
    if prefix.chars().count() + 20 <= w {
        field(o, &prefix, &ch.observed, w);
    } else {
        let _ = writeln!(o, "{}", prefix.trim_end());
        field(o, "            ", &ch.observed, w);
    }
    let detail = |o: &mut String, label: &str, text: &str| {
        field(o, &format!("            {label:<10}"), text, w);
    };
    match &ch.verdict {
        Verdict::Pass => {}
        Verdict::Fail => {
            detail(o, "expected", &ch.expected);
            detail(o, "setting", &ch.setting);
            command_field(o, "            command   ", &ch.command, w);
        }
        Verdict::Unknown(why) => {
            detail(o, "why", why);
            detail(o, "expected", &ch.expected);
            detail(o, "setting", &ch.setting);
            command_field(o, "            command   ", &ch.command, w);
        }
    }
}

/// `Counters over N s`: how many counters were read, the vendor-neutral quantities that
/// changed, the unmapped counters that changed.
fn counters_text(o: &mut String, k: &CountersView, window_s: f64, w: usize) {
    let count = |n: Option<usize>| n.map(|n| n.to_string()).unwrap_or_else(|| "n/a".into());
    let _ = writeln!(o, "\nCounters over {window_s:.2} s");
    let head = format!(
        "ethtool {}, RDMA {} counters read; {} reset(s), {} 32-bit wrap(s)",
        count(k.raw_counts.ethtool),
        count(k.raw_counts.rdma),
        k.resets,
        k.wraps
    );
    field(o, "  raw       ", &head, w);
    quantities_text(o, &k.quantities, w);
    unmapped_text(o, &k.raw_changed, w);
}

/// The vendor-neutral quantities that changed over the window, with their raw counter's name
/// when the width leaves room for it.
fn quantities_text(o: &mut String, quantities: &[QuantityRow], w: usize) {
    let changed: Vec<&QuantityRow> = quantities
        .iter()
        .filter(|q| q.delta.is_some_and(|d| d > 0))
        .collect();
    if changed.is_empty() {
        let why = if quantities.is_empty() {
            "no vendor-neutral quantities for this driver (counters kept raw)"
        } else {
            "no vendor-neutral quantity changed"
        };
        field(o, "  neutral   ", why, w);
        return;
    }
    // the raw name column only when it has room
    let raw_w = w.saturating_sub(51);
    let raw_col = raw_w >= 16;
    let head = format!("  {:<24} {:>12} {:>9}", "quantity", "delta", "per s");
    if raw_col {
        let _ = writeln!(o, "{head}  raw name");
    } else {
        let _ = writeln!(o, "{head}");
    }
    for q in changed {
        let mut line = format!(
            "  {:<24} {:>12} {:>9}",
            q.quantity.name(),
            q.delta.unwrap_or(0),
            rate_text(q.rate_per_s.unwrap_or(0.0)),
        );
        if raw_col {
            let _ = write!(line, "  {}", fit(&q.raw, raw_w));
        }
        if q.reset {
            line.push_str(" (reset)");
        }
        let _ = writeln!(o, "{line}");
    }
}

/// The counters without a vendor-neutral name that changed, at most [`RAW_LINES`] of them.
fn unmapped_text(o: &mut String, raw_changed: &[RawRow], w: usize) {
    if raw_changed.is_empty() {
        return;
    }
    let _ = writeln!(o, "  unmapped counters that changed: {}", raw_changed.len());
    let name_w = w.saturating_sub(37).clamp(12, 40);
    for x in raw_changed.iter().take(RAW_LINES) {
        let src = match x.src {
            Src::Ethtool => "ethtool",
            Src::Rdma => "rdma",
        };
        let _ = writeln!(
            o,
            "    {src:<8}{:<name_w$} {:>12} {:>9}/s",
            fit(&x.name, name_w),
            x.delta,
            rate_text(x.rate_per_s)
        );
    }
    if raw_changed.len() > RAW_LINES {
        let _ = writeln!(
            o,
            "    ... {} more (--json lists them all)",
            raw_changed.len() - RAW_LINES
        );
    }
}

/// The closing `Result:` line, after a blank line.
fn result_text(o: &mut String, s: &Summary, w: usize) {
    let mut line = format!(
        "\nResult: {}: {} failed, {} passed, {} unknown",
        s.result.to_uppercase(),
        s.fail,
        s.pass,
        s.unknown
    );
    if s.unknown > 0 {
        line.push_str(
            " (unknown = the setting could not be read here: not verified; --strict fails on it)",
        );
    }
    let mut tail = String::new();
    field(&mut tail, "", line.trim_start(), w);
    let _ = write!(o, "\n{tail}");
}

/// A name cut to `width` columns, the cut marked with `~` (table cells only; `--json` has
/// every name whole).
fn fit(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        name.to_string()
    } else {
        let mut s: String = name.chars().take(width.saturating_sub(1)).collect();
        s.push('~');
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The command.

fn usage_error(message: String) -> anyhow::Error {
    ExitStatus::usage(message).into()
}

fn read_error(iface: &str, e: NicError) -> anyhow::Error {
    match e {
        NicError::NoSuchInterface { .. } => usage_error(format!(
            "{} (see: ip link show; in another namespace: ip netns exec NS roce-observe nic --iface {iface})",
            contract::error::chain(&e)
        )),
        NicError::InvalidInterface { .. } => usage_error(contract::error::chain(&e)),
        other => anyhow::Error::new(other).context(format!("reading {iface}")),
    }
}

/// The policy of `--policy` (a usage error when unreadable) or `--profile`, and where it came
/// from.
pub fn policy_of(args: &NicArgs) -> anyhow::Result<(PolicyConfig, String)> {
    Ok(match &args.policy {
        Some(f) => {
            let cfg =
                PolicyConfig::from_file(f).map_err(|e| usage_error(contract::error::chain(&e)))?;
            (cfg, f.display().to_string())
        }
        None => (
            PolicyConfig::of(args.profile),
            format!("profile {}", args.profile),
        ),
    })
}

pub fn run(args: NicArgs) -> anyhow::Result<()> {
    let (cfg, source) = policy_of(&args)?;
    let (expected, notes) = check_policy(&cfg);
    let policy = PolicyInfo {
        source,
        expected,
        notes,
    };
    let (a, b, window_s) = match (&args.from, &args.iface) {
        (Some(d), _) if d.is_dir() => crate::dump::read_dump(d)?,
        (Some(f), _) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", f.display()))?;
            let s: SavedSamples = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not samples written by `roce-observe nic --save`: {e}",
                    f.display()
                )
            })?;
            if s.version != 1 {
                anyhow::bail!(
                    "{}: samples of version {} (this roce-observe reads version 1)",
                    f.display(),
                    s.version
                );
            }
            (s.first, s.second, s.window_s)
        }
        (None, Some(iface)) => {
            let mut reader = LiveNicReader::new(iface, LiveOptions::default())
                .map_err(|e| read_error(iface, e))?;
            let a = reader.read().map_err(|e| read_error(iface, e))?;
            let t0 = Instant::now();
            std::thread::sleep(args.sample);
            let b = reader.read().map_err(|e| read_error(iface, e))?;
            (a, b, t0.elapsed().as_secs_f64())
        }
        (None, None) => anyhow::bail!("--iface IFACE or --from FILE is needed"),
    };
    if let Some(f) = &args.save {
        let saved = SavedSamples {
            version: 1,
            window_s,
            first: a,
            second: b,
        };
        let mut j = serde_json::to_string_pretty(&saved)?;
        j.push('\n');
        std::fs::write(f, j).map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", f.display()))?;
        return run_report(&args, &saved.first, &saved.second, window_s, policy);
    }
    run_report(&args, &a, &b, window_s, policy)
}

/// The report of two samples, printed; the exit status of the checks.
fn run_report(
    args: &NicArgs,
    a: &NicSample,
    b: &NicSample,
    window_s: f64,
    policy: PolicyInfo,
) -> anyhow::Result<()> {
    let report = build_report(a, b, window_s, policy);
    let text = if args.json {
        let mut j = serde_json::to_string_pretty(&report)?;
        j.push('\n');
        j
    } else {
        render_text(&report, text_width())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    if report.summary.fail > 0 {
        return Err(ExitStatus {
            code: 1,
            message: None,
        }
        .into());
    }
    if args.strict && report.summary.unknown > 0 {
        return Err(ExitStatus {
            code: 1,
            message: Some(format!(
                "--strict: {} checks unknown (not verified)",
                report.summary.unknown
            )),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CcParam;
    use crate::dcb::{DcbApp, DcbIeee, IeeeEts, IeeePfc};
    use crate::{RdmaPort, Unavailable};

    fn mlx5_sample(t: u64, pause3: u64, cnp: u64) -> NicSample {
        let mut s = NicSample::empty("ens1f0np0", t);
        s.drvinfo = Some(DrvInfo {
            driver: "mlx5_core".into(),
            version: "6.8.0".into(),
            fw_version: "28.39.1002 (MT_0000000834)".into(),
            bus_info: "0000:3b:00.0".into(),
            n_stats: 3,
        });
        s.ethtool = Some(vec![
            ("rx_prio3_pause".into(), pause3),
            ("rx_bytes".into(), 1000 + pause3),
            ("rx_vport_rdma_unicast_packets".into(), 7),
        ]);
        s.rdma = Some(RdmaPort {
            dev: "mlx5_0".into(),
            port: 1,
            counters: vec![("np_cnp_sent".into(), cnp)],
            via: "netlink".into(),
        });
        let mut app: Vec<DcbApp> = (0..64u16)
            .map(|d| DcbApp {
                selector: 5,
                priority: (d / 8) as u8,
                protocol: d,
            })
            .collect();
        app[48].priority = 6;
        s.dcb = Reading::Read(DcbIeee {
            pfc: Some(IeeePfc {
                pfc_en: 0x08,
                ..Default::default()
            }),
            ets: Some(IeeeEts {
                prio_tc: [0, 1, 2, 3, 4, 5, 6, 7],
                ..Default::default()
            }),
            app,
            ..Default::default()
        });
        s.pause = Some(PauseStats {
            rx_pause: Some(false),
            tx_pause: Some(false),
            ..Default::default()
        });
        s.config.mlx5_cc = Reading::Read(vec![
            CcParam {
                name: "np_cnp_dscp".into(),
                value: Reading::Read(48),
            },
            CcParam {
                name: "np_cnp_prio".into(),
                value: Reading::Read(6),
            },
        ]);
        s.config.default_roce_tos = Reading::Read(106);
        s.sources = vec![
            SourceReport {
                source: SourceKind::EthtoolStats,
                status: SourceStatus::Answered { via: "ioctl".into() },
            },
            SourceReport {
                source: SourceKind::Config,
                status: SourceStatus::Failed {
                    error: "a deliberately long error text that has to wrap at eighty columns without garbage".into(),
                },
            },
        ];
        s
    }

    fn report(profile: &str) -> NicReport {
        let cfg = PolicyConfig::profile(profile).unwrap();
        let (expected, notes) = check_policy(&cfg);
        let a = mlx5_sample(1, 10, 100);
        let b = mlx5_sample(2, 30, 150);
        let pi = PolicyInfo {
            source: format!("profile {profile}"),
            expected,
            notes,
        };
        build_report(&a, &b, 0.5, pi)
    }

    #[test]
    fn policy_mapping() {
        let (p, notes) = check_policy(&PolicyConfig::profile("nvidia").unwrap());
        assert_eq!(p, checks::Policy::nvidia());
        assert!(notes.is_empty());
        let (p, _) = check_policy(&PolicyConfig::profile("broadcom").unwrap());
        assert_eq!(p, checks::Policy::broadcom());
        let toml = "profile = \"broadcom\"\nrdma_priority = 4\n[data]\ndscp = \"any\"\npcp = 4\n[cnp]\ndscp = 46\npcp = 5\n";
        let cfg = PolicyConfig::from_toml(toml, "t.toml").unwrap();
        let (p, notes) = check_policy(&cfg);
        assert_eq!(
            p,
            checks::Policy {
                rdma_priority: 4,
                data_dscp: 26,
                cnp_dscp: 46,
                cnp_priority: 5,
                trust: Trust::Pcp
            }
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn report_on_a_good_mlx5_sample() {
        let r = report("nvidia");
        assert_eq!(r.summary.fail, 0, "{:?}", r.checks);
        let q = |n: Quantity| {
            r.counters
                .quantities
                .iter()
                .find(|x| x.quantity == n)
                .unwrap()
        };
        assert_eq!(q(Quantity::PfcRxFrames(3)).delta, Some(20));
        assert_eq!(q(Quantity::PfcRxFrames(3)).rate_per_s, Some(40.0));
        assert_eq!(q(Quantity::CnpSent).delta, Some(50));
        assert_eq!(r.counters.raw_counts.ethtool, Some(3));
        assert_eq!(r.counters.raw_changed.len(), 1, "rx_bytes");
        assert_eq!(r.config.cnp_dscp, Reading::Read(48));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["summary"]["result"], "incomplete");
        assert_eq!(j["config"]["pfc_enabled"]["read"][0], 3);
        assert_eq!(j["rdma"]["device"], "mlx5_0");
        // broadcom expects CNP priority 7
        let r = report("broadcom");
        assert_eq!(r.summary.fail, 1);
        assert_eq!(r.summary.result, "fail");
    }

    #[test]
    fn text_fits_the_width() {
        let r = report("broadcom");
        for w in [60, 80, 120] {
            let t = render_text(&r, w);
            for line in t.lines() {
                // a single word longer than the width (after its label) is the only exception
                let fits = line.chars().count() <= w || line.split_whitespace().count() <= 2;
                assert!(fits, "width {w}: {line:?}");
            }
            let flat = t.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                flat.contains("FAIL config_cnp_priority CNP priority 6"),
                "{t}"
            );
            assert!(flat.contains("pfc_rx_frames_p3 20 40.0"), "{t}");
            assert!(flat.contains("prio 3: DSCP 24-31; prio 4"), "{t}");
            assert!(flat.contains("Result: FAIL: 1 failed"), "{t}");
            if w == 80 {
                println!("{t}");
            }
        }
    }

    #[test]
    fn wrap_words() {
        assert_eq!(wrap("aaaa bbbb cccc", 10), vec!["aaaa bbbb", "cccc"]);
        assert_eq!(wrap("", 10), vec![""]);
        assert_eq!(
            wrap("x /a/very/long/path y", 10),
            vec!["x", "/a/very/long/path", "y"]
        );
        assert_eq!(
            dscp_map_text(&[
                DscpPriority {
                    dscp: 1,
                    priority: 0
                },
                DscpPriority {
                    dscp: 2,
                    priority: 0
                },
                DscpPriority {
                    dscp: 5,
                    priority: 0
                },
                DscpPriority {
                    dscp: 26,
                    priority: 3
                },
            ]),
            "prio 0: DSCP 1-2,5; prio 3: DSCP 26"
        );
    }

    /// A report that reaches the text's other branches: no drvinfo or RDMA port, unavailable
    /// and failed sources, readings unavailable for the same reason as a source (pointed to)
    /// and for their own, policy notes, unknown checks with a long name and a long command, no
    /// vendor-neutral quantities, more unmapped counters than are listed.
    fn degraded_report() -> NicReport {
        let mut r = report("nvidia");
        let dcb_gone = Unavailable::new(UnavailableReason::NotSupported, "no dcbnl_ops");
        r.netdev.drvinfo = None;
        r.rdma = None;
        r.sources = vec![
            SourceReport {
                source: SourceKind::Dcb,
                status: SourceStatus::Unavailable(dcb_gone.clone()),
            },
            SourceReport {
                source: SourceKind::RdmaCounters,
                status: SourceStatus::Unavailable(Unavailable::new(
                    UnavailableReason::NoSuchDevice,
                    "no RDMA device bound to ens1f0np0",
                )),
            },
            SourceReport {
                source: SourceKind::EthtoolPause,
                status: SourceStatus::Failed {
                    error: "netlink: malformed reply".into(),
                },
            },
        ];
        r.policy.notes =
            vec!["data.dscp is \"any\" in the policy: checking DSCP 26 (profile nvidia)".into()];
        r.config.pfc_enabled = Reading::Unavailable(dcb_gone.clone());
        r.config.global_pause = None;
        r.config.trust = Reading::Read(Trust::Pcp);
        r.config.dscp_priority = Reading::Read(Vec::new());
        r.config.prio_tc = Reading::Unavailable(dcb_gone);
        r.config.cnp_dscp = Reading::unavailable(
            UnavailableReason::Permission,
            "/sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_dscp: permission denied",
        );
        r.config.default_roce_mode = Reading::Read("RoCE v2".into());
        r.config.gid_types = Reading::Read(vec![
            GidEntry {
                index: 0,
                gid_type: "IB/RoCE v1".into(),
                ndev: None,
            },
            GidEntry {
                index: 1,
                gid_type: "RoCE v2".into(),
                ndev: Some("ens1f0np0".into()),
            },
            GidEntry {
                index: 2,
                gid_type: "something else".into(),
                ndev: None,
            },
        ]);
        r.checks.push(Check {
            name: "config_a_check_with_a_rather_long_name".into(),
            verdict: Verdict::Unknown("the DCB netlink interface is not supported".into()),
            observed: "unreadable".into(),
            expected: "PFC on priority 3 only".into(),
            setting: "IEEE 802.1Qaz PFC".into(),
            command: "mlnx_qos -i ens1f0np0   dcb pfc show dev ens1f0np0 and a very long tail that does not fit on any line at all, however wide   x".into(),
        });
        r.summary = summary(&r.checks);
        r.counters.raw_counts = RawCounts {
            ethtool: None,
            rdma: Some(0),
        };
        r.counters.quantities.clear();
        r.counters.raw_changed = (0..15u64)
            .map(|i| RawRow {
                src: if i % 2 == 0 { Src::Ethtool } else { Src::Rdma },
                name: format!("a_counter_with_a_long_vendor_specific_name_number_{i}"),
                delta: i * 1_000_003,
                rate_per_s: i as f64 * 2_000_006.0,
            })
            .collect();
        r.counters.resets = 1;
        r.counters.wraps = 2;
        r
    }

    fn render_at(r: &NicReport, widths: &[usize]) -> String {
        widths
            .iter()
            .map(|&w| format!("--- width {w}\n{}", render_text(r, w)))
            .collect()
    }

    #[test]
    fn golden_text_report() {
        let mut quiet = report("nvidia");
        for q in &mut quiet.counters.quantities {
            q.delta = Some(0);
        }
        quiet.netdev.family = Driver::Other;
        if let Some(d) = &mut quiet.netdev.drvinfo {
            d.fw_version.clear();
            d.bus_info.clear();
        }
        let mut reset = report("broadcom");
        reset.window_s = 0.0;
        for q in &mut reset.counters.quantities {
            q.reset = true;
            q.raw = "a_very_long_raw_counter_name_that_is_cut_to_the_column".into();
        }
        let got = [
            render_at(&report("broadcom"), &[60, 80]),
            render_at(&degraded_report(), &[60, 140]),
            render_text(&quiet, 80),
            render_text(&reset, 100),
        ]
        .join("=====\n");
        assert_eq!(got, GOLDEN_TEXT);
    }

    const GOLDEN_TEXT: &str = r#"--- width 60
roce-observe nic: ens1f0np0
  netdev    driver mlx5_core 6.8.0 (mlx5 counter names),
            firmware 28.39.1002 (MT_0000000834), bus
            0000:3b:00.0
  RDMA      mlx5_0 port 1 (mlx5, via netlink), firmware n/a
  answered  ethtool_stats (ioctl)
  FAILED    config: a deliberately long error text that has
            to wrap at eighty columns without garbage
  policy    profile broadcom: PFC priority 3, data DSCP 26,
            CNP DSCP 48 / priority 7, trust dscp

Configuration
  PFC enabled   priorities 3
  global pause  rx off, tx off
  trust         dscp
  DSCP -> prio  prio 0: DSCP 0-7; prio 1: DSCP 8-15; prio 2:
                DSCP 16-23; prio 3: DSCP 24-31; prio 4: DSCP
                32-39; prio 5: DSCP 40-47; prio 6: DSCP
                48-55; prio 7: DSCP 56-63
  ETS prio->TC  0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7
  CNP DSCP      48
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     unavailable (absent: not read)
  GID types     unavailable (absent: not read)

Checks
  PASS    config_pfc_priorities      PFC enabled on: 3
                                     (pfc_en=0x08)
  PASS    config_global_pause_off    rx off, tx off
  PASS    config_trust_mode          trust dscp (64 DSCP APP
                                     entries)
  PASS    config_data_dscp_priority  DSCP 26 -> priority 3
  PASS    config_cnp_dscp            CNP DSCP 48
  FAIL    config_cnp_priority        CNP priority 6
            expected  CNP priority 7
            setting   /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
            command   cat
                      /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
  UNKNOWN config_ecn_rp_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file;
                      upstream kernels expose no
                      per-priority ECN enable)
            expected  ECN reaction point (rate reduction on
                      CNP) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command
      cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file;
                      upstream kernels expose no
                      per-priority ECN enable)
            expected  ECN notification point (CNP on CE)
                      enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command
      cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos    ToS 106 = DSCP 26, ECN
                                     bits 10
  UNKNOWN config_roce_v2_gid         unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)

Counters over 0.50 s
  raw       ethtool 3, RDMA 1 counters read; 0 reset(s), 0
            32-bit wrap(s)
  quantity                        delta     per s
  pfc_rx_frames_p3                   20      40.0
  cnp_sent                           50     100.0
  unmapped counters that changed: 1
    ethtool rx_bytes                          20      40.0/s

Result: FAIL: 1 failed, 6 passed, 3 unknown (unknown = the
setting could not be read here: not verified; --strict fails
on it)
--- width 80
roce-observe nic: ens1f0np0
  netdev    driver mlx5_core 6.8.0 (mlx5 counter names), firmware 28.39.1002
            (MT_0000000834), bus 0000:3b:00.0
  RDMA      mlx5_0 port 1 (mlx5, via netlink), firmware n/a
  answered  ethtool_stats (ioctl)
  FAILED    config: a deliberately long error text that has to wrap at eighty
            columns without garbage
  policy    profile broadcom: PFC priority 3, data DSCP 26, CNP DSCP 48 /
            priority 7, trust dscp

Configuration
  PFC enabled   priorities 3
  global pause  rx off, tx off
  trust         dscp
  DSCP -> prio  prio 0: DSCP 0-7; prio 1: DSCP 8-15; prio 2: DSCP 16-23; prio 3:
                DSCP 24-31; prio 4: DSCP 32-39; prio 5: DSCP 40-47; prio 6: DSCP
                48-55; prio 7: DSCP 56-63
  ETS prio->TC  0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7
  CNP DSCP      48
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     unavailable (absent: not read)
  GID types     unavailable (absent: not read)

Checks
  PASS    config_pfc_priorities      PFC enabled on: 3 (pfc_en=0x08)
  PASS    config_global_pause_off    rx off, tx off
  PASS    config_trust_mode          trust dscp (64 DSCP APP entries)
  PASS    config_data_dscp_priority  DSCP 26 -> priority 3
  PASS    config_cnp_dscp            CNP DSCP 48
  FAIL    config_cnp_priority        CNP priority 6
            expected  CNP priority 7
            setting   /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
            command
      cat /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
  UNKNOWN config_ecn_rp_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels
                      expose no per-priority ECN enable)
            expected  ECN reaction point (rate reduction on CNP) enabled on
                      priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels
                      expose no per-priority ECN enable)
            expected  ECN notification point (CNP on CE) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos    ToS 106 = DSCP 26, ECN bits 10
  UNKNOWN config_roce_v2_gid         unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)

Counters over 0.50 s
  raw       ethtool 3, RDMA 1 counters read; 0 reset(s), 0 32-bit wrap(s)
  quantity                        delta     per s  raw name
  pfc_rx_frames_p3                   20      40.0  rx_prio3_pause
  cnp_sent                           50     100.0  np_cnp_sent
  unmapped counters that changed: 1
    ethtool rx_bytes                                           20      40.0/s

Result: FAIL: 1 failed, 6 passed, 3 unknown (unknown = the setting could not be
read here: not verified; --strict fails on it)
=====
--- width 60
roce-observe nic: ens1f0np0
  netdev    driver information unavailable
  RDMA      none read (see rdma_counters below)
  answered  none
  unavail.  dcb: not_supported: no dcbnl_ops
  unavail.  rdma_counters: no_such_device: no RDMA device
            bound to ens1f0np0
  FAILED    ethtool_pause: netlink: malformed reply
  policy    profile nvidia: PFC priority 3, data DSCP 26,
            CNP DSCP 48 / priority 6, trust dscp
  note      data.dscp is "any" in the policy: checking DSCP
            26 (profile nvidia)

Configuration
  PFC enabled   unavailable (see dcb above)
  global pause  unavailable (see ethtool_pause above)
  trust         pcp
  DSCP -> prio  no DSCP entries in the APP table
  ETS prio->TC  unavailable (see dcb above)
  CNP DSCP      unavailable (permission:
                /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_dscp:
                permission denied)
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     RoCE v2
  GID types     1 RoCE v2, 1 IB/RoCE v1, 1 other

Checks
  PASS    config_pfc_priorities
            PFC enabled on: 3 (pfc_en=0x08)
  PASS    config_global_pause_off
            rx off, tx off
  PASS    config_trust_mode
            trust dscp (64 DSCP APP entries)
  PASS    config_data_dscp_priority
            DSCP 26 -> priority 3
  PASS    config_cnp_dscp
            CNP DSCP 48
  PASS    config_cnp_priority
            CNP priority 6
  UNKNOWN config_ecn_rp_enabled
            unreadable
            why       absent: not read (MLNX_OFED-only file;
                      upstream kernels expose no
                      per-priority ECN enable)
            expected  ECN reaction point (rate reduction on
                      CNP) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command
      cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled
            unreadable
            why       absent: not read (MLNX_OFED-only file;
                      upstream kernels expose no
                      per-priority ECN enable)
            expected  ECN notification point (CNP on CE)
                      enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command
      cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos
            ToS 106 = DSCP 26, ECN bits 10
  UNKNOWN config_roce_v2_gid
            unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)
  UNKNOWN config_a_check_with_a_rather_long_name
            unreadable
            why       the DCB netlink interface is not
                      supported
            expected  PFC on priority 3 only
            setting   IEEE 802.1Qaz PFC
            command   mlnx_qos -i ens1f0np0
                      dcb pfc show dev ens1f0np0 and a very
                      long tail that does not fit on any
                      line at all, however wide
                      x

Counters over 0.50 s
  raw       ethtool n/a, RDMA 0 counters read; 1 reset(s), 2
            32-bit wrap(s)
  neutral   no vendor-neutral quantities for this driver
            (counters kept raw)
  unmapped counters that changed: 15
    ethtool a_counter_with_a_long_~            0       0.0/s
    rdma    a_counter_with_a_long_~      1000003     2.00M/s
    ethtool a_counter_with_a_long_~      2000006     4.00M/s
    rdma    a_counter_with_a_long_~      3000009     6.00M/s
    ethtool a_counter_with_a_long_~      4000012     8.00M/s
    rdma    a_counter_with_a_long_~      5000015    10.00M/s
    ethtool a_counter_with_a_long_~      6000018    12.00M/s
    rdma    a_counter_with_a_long_~      7000021    14.00M/s
    ethtool a_counter_with_a_long_~      8000024    16.00M/s
    rdma    a_counter_with_a_long_~      9000027    18.00M/s
    ethtool a_counter_with_a_long_~     10000030    20.00M/s
    rdma    a_counter_with_a_long_~     11000033    22.00M/s
    ... 3 more (--json lists them all)

Result: INCOMPLETE: 0 failed, 7 passed, 4 unknown (unknown =
the setting could not be read here: not verified; --strict
fails on it)
--- width 140
roce-observe nic: ens1f0np0
  netdev    driver information unavailable
  RDMA      none read (see rdma_counters below)
  answered  none
  unavail.  dcb: not_supported: no dcbnl_ops
  unavail.  rdma_counters: no_such_device: no RDMA device bound to ens1f0np0
  FAILED    ethtool_pause: netlink: malformed reply
  policy    profile nvidia: PFC priority 3, data DSCP 26, CNP DSCP 48 / priority 6, trust dscp
  note      data.dscp is "any" in the policy: checking DSCP 26 (profile nvidia)

Configuration
  PFC enabled   unavailable (see dcb above)
  global pause  unavailable (see ethtool_pause above)
  trust         pcp
  DSCP -> prio  no DSCP entries in the APP table
  ETS prio->TC  unavailable (see dcb above)
  CNP DSCP      unavailable (permission: /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_dscp: permission denied)
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     RoCE v2
  GID types     1 RoCE v2, 1 IB/RoCE v1, 1 other

Checks
  PASS    config_pfc_priorities                   PFC enabled on: 3 (pfc_en=0x08)
  PASS    config_global_pause_off                 rx off, tx off
  PASS    config_trust_mode                       trust dscp (64 DSCP APP entries)
  PASS    config_data_dscp_priority               DSCP 26 -> priority 3
  PASS    config_cnp_dscp                         CNP DSCP 48
  PASS    config_cnp_priority                     CNP priority 6
  UNKNOWN config_ecn_rp_enabled                   unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels expose no per-priority ECN enable)
            expected  ECN reaction point (rate reduction on CNP) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled                   unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels expose no per-priority ECN enable)
            expected  ECN notification point (CNP on CE) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos                 ToS 106 = DSCP 26, ECN bits 10
  UNKNOWN config_roce_v2_gid                      unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)
  UNKNOWN config_a_check_with_a_rather_long_name  unreadable
            why       the DCB netlink interface is not supported
            expected  PFC on priority 3 only
            setting   IEEE 802.1Qaz PFC
            command   mlnx_qos -i ens1f0np0
                      dcb pfc show dev ens1f0np0 and a very long tail that does not fit on any line at all, however wide
                      x

Counters over 0.50 s
  raw       ethtool n/a, RDMA 0 counters read; 1 reset(s), 2 32-bit wrap(s)
  neutral   no vendor-neutral quantities for this driver (counters kept raw)
  unmapped counters that changed: 15
    ethtool a_counter_with_a_long_vendor_specific_n~            0       0.0/s
    rdma    a_counter_with_a_long_vendor_specific_n~      1000003     2.00M/s
    ethtool a_counter_with_a_long_vendor_specific_n~      2000006     4.00M/s
    rdma    a_counter_with_a_long_vendor_specific_n~      3000009     6.00M/s
    ethtool a_counter_with_a_long_vendor_specific_n~      4000012     8.00M/s
    rdma    a_counter_with_a_long_vendor_specific_n~      5000015    10.00M/s
    ethtool a_counter_with_a_long_vendor_specific_n~      6000018    12.00M/s
    rdma    a_counter_with_a_long_vendor_specific_n~      7000021    14.00M/s
    ethtool a_counter_with_a_long_vendor_specific_n~      8000024    16.00M/s
    rdma    a_counter_with_a_long_vendor_specific_n~      9000027    18.00M/s
    ethtool a_counter_with_a_long_vendor_specific_n~     10000030    20.00M/s
    rdma    a_counter_with_a_long_vendor_specific_n~     11000033    22.00M/s
    ... 3 more (--json lists them all)

Result: INCOMPLETE: 0 failed, 7 passed, 4 unknown (unknown = the setting could not be read here: not verified; --strict fails on it)
=====
roce-observe nic: ens1f0np0
  netdev    driver mlx5_core 6.8.0 (no vendor counter mapping), firmware n/a,
            bus n/a
  RDMA      mlx5_0 port 1 (mlx5, via netlink), firmware n/a
  answered  ethtool_stats (ioctl)
  FAILED    config: a deliberately long error text that has to wrap at eighty
            columns without garbage
  policy    profile nvidia: PFC priority 3, data DSCP 26, CNP DSCP 48 / priority
            6, trust dscp

Configuration
  PFC enabled   priorities 3
  global pause  rx off, tx off
  trust         dscp
  DSCP -> prio  prio 0: DSCP 0-7; prio 1: DSCP 8-15; prio 2: DSCP 16-23; prio 3:
                DSCP 24-31; prio 4: DSCP 32-39; prio 5: DSCP 40-47; prio 6: DSCP
                48-55; prio 7: DSCP 56-63
  ETS prio->TC  0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7
  CNP DSCP      48
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     unavailable (absent: not read)
  GID types     unavailable (absent: not read)

Checks
  PASS    config_pfc_priorities      PFC enabled on: 3 (pfc_en=0x08)
  PASS    config_global_pause_off    rx off, tx off
  PASS    config_trust_mode          trust dscp (64 DSCP APP entries)
  PASS    config_data_dscp_priority  DSCP 26 -> priority 3
  PASS    config_cnp_dscp            CNP DSCP 48
  PASS    config_cnp_priority        CNP priority 6
  UNKNOWN config_ecn_rp_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels
                      expose no per-priority ECN enable)
            expected  ECN reaction point (rate reduction on CNP) enabled on
                      priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels
                      expose no per-priority ECN enable)
            expected  ECN notification point (CNP on CE) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos    ToS 106 = DSCP 26, ECN bits 10
  UNKNOWN config_roce_v2_gid         unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)

Counters over 0.50 s
  raw       ethtool 3, RDMA 1 counters read; 0 reset(s), 0 32-bit wrap(s)
  neutral   no vendor-neutral quantity changed
  unmapped counters that changed: 1
    ethtool rx_bytes                                           20      40.0/s

Result: INCOMPLETE: 0 failed, 7 passed, 3 unknown (unknown = the setting could
not be read here: not verified; --strict fails on it)
=====
roce-observe nic: ens1f0np0
  netdev    driver mlx5_core 6.8.0 (mlx5 counter names), firmware 28.39.1002 (MT_0000000834), bus
            0000:3b:00.0
  RDMA      mlx5_0 port 1 (mlx5, via netlink), firmware n/a
  answered  ethtool_stats (ioctl)
  FAILED    config: a deliberately long error text that has to wrap at eighty columns without
            garbage
  policy    profile broadcom: PFC priority 3, data DSCP 26, CNP DSCP 48 / priority 7, trust dscp

Configuration
  PFC enabled   priorities 3
  global pause  rx off, tx off
  trust         dscp
  DSCP -> prio  prio 0: DSCP 0-7; prio 1: DSCP 8-15; prio 2: DSCP 16-23; prio 3: DSCP 24-31; prio 4:
                DSCP 32-39; prio 5: DSCP 40-47; prio 6: DSCP 48-55; prio 7: DSCP 56-63
  ETS prio->TC  0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7
  CNP DSCP      48
  CNP priority  6
  RoCE ToS      106 (DSCP 26, ECN bits 10)
  RoCE mode     unavailable (absent: not read)
  GID types     unavailable (absent: not read)

Checks
  PASS    config_pfc_priorities      PFC enabled on: 3 (pfc_en=0x08)
  PASS    config_global_pause_off    rx off, tx off
  PASS    config_trust_mode          trust dscp (64 DSCP APP entries)
  PASS    config_data_dscp_priority  DSCP 26 -> priority 3
  PASS    config_cnp_dscp            CNP DSCP 48
  FAIL    config_cnp_priority        CNP priority 6
            expected  CNP priority 7
            setting   /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
            command   cat /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/np_cnp_prio
  UNKNOWN config_ecn_rp_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels expose no per-priority
                      ECN enable)
            expected  ECN reaction point (rate reduction on CNP) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3
  UNKNOWN config_ecn_np_enabled      unreadable
            why       absent: not read (MLNX_OFED-only file; upstream kernels expose no per-priority
                      ECN enable)
            expected  ECN notification point (CNP on CE) enabled on priority 3
            setting   /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
            command   cat /sys/class/net/ens1f0np0/ecn/roce_np/enable/3
  PASS    config_default_roce_tos    ToS 106 = DSCP 26, ECN bits 10
  UNKNOWN config_roce_v2_gid         unreadable
            why       absent: not read
            expected  at least one RoCE v2 GID
            setting   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/*
            command   rdma link show
                      (and: show_gids)

Counters over 0.00 s
  raw       ethtool 3, RDMA 1 counters read; 0 reset(s), 0 32-bit wrap(s)
  quantity                        delta     per s  raw name
  pfc_rx_frames_p3                   20      40.0  a_very_long_raw_counter_name_that_is_cut_to_the_~ (reset)
  cnp_sent                           50     100.0  a_very_long_raw_counter_name_that_is_cut_to_the_~ (reset)
  unmapped counters that changed: 1
    ethtool rx_bytes                                           20      40.0/s

Result: FAIL: 1 failed, 6 passed, 3 unknown (unknown = the setting could not be read here: not
verified; --strict fails on it)
"#;
}
