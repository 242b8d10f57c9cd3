//! Live source: loads the eBPF object for one interface, attaches XDP (ingress; tc ingress as
//! the fallback) and tc egress, writes the policy, reads the maps into [`Snapshot`]s and drains
//! the event ring buffer.
//!
//! One loaded object per interface: its maps (the per-QP table `QPS`/`QPIDX`/`QPCOUNT`/
//! `QPDIRTY`, `IFACE`, `MACS`, `POLICY`, `EVENTS`, `CLOCK`) belong to that interface only. Map
//! reads:
//! - The per-QP table (`observer_common::qp_table`, BPF_F_MMAPABLE arrays) is mapped into this
//!   process and read straight from shared memory (`table.rs`); eviction marks slots dead,
//!   waits for an RCU grace period and then takes the final values, so the last increments of
//!   an evicted key are returned, not lost.
//! - `IFACE` (per-CPU array, 2 entries) and `MACS` (per-CPU hash) through aya, summed over CPUs.
//!
//! Times: the kernel stamps with CLOCK_MONOTONIC (`bpf_ktime_get_ns`); snapshots, evicted values
//! and events come out converted to wall-clock UNIX ns (`first_ns`/`last_ns`, `Event::ts_ns`)
//! with the offset between the two clocks taken at the time of the read. The per-QP first/last
//! packet times come from the `CLOCK` map, which the `clock_tick` program (a 1 ms CPU-clock perf
//! event; a thread where perf events are unavailable) sets to CLOCK_MONOTONIC every
//! [`CLOCK_TICK`] (see `clock.rs`): their resolution is 1 ms. Without a ticker (a [`ProgTester`] unless
//! [`ProgTester::start_clock`]) the programs use the coarse clock (one kernel tick, 1-4 ms).

mod clock;
pub mod diagnosis;
pub mod interfaces;
pub mod kfunc;
mod mapped_table;
#[cfg(any(test, feature = "test-support"))]
mod prog_tester;
pub mod qp_probe;
mod sys;

#[cfg(any(test, feature = "test-support"))]
pub use prog_tester::{ProgTester, SharedRunner};

pub use clock::TICK as CLOCK_TICK;

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Array, Map, MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::{
    ProgramError, SchedClassifier, TcAttachType, TestRun, TestRunOptions, Xdp,
    XdpMode as AyaXdpMode,
};
use aya::{Ebpf, EbpfError, EbpfLoader};
use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, Policy, QpKey, QpValue, Sample,
    SamplerState, dir,
};
use observer_common::qp_table::buckets_for;

use crate::sources::Snapshot;
use crate::sources::snapshot::CounterWords;

/// The eBPF object built by `observer/build.rs` (aya-build) from `observer-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));
/// The same programs with their rare-path reports (aya-log), loaded for `--log-level debug`.
static OBJECT_LOG: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer-log"));

/// The same programs for kernels before 5.18 (`observer-ebpf` feature `compat`): XDP without
/// multi-buffer, the insert lock's wait without `bpf_loop`.
static OBJECT_COMPAT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer-compat"));

/// The environment variable that chooses the object instead of the kernel probe: `full` or
/// `compat` (the tests run the compat object on newer kernels with it).
pub const OBJECT_ENV: &str = "ROCE_OBSERVE_EBPF";

/// Which embedded object this kernel runs, from probing it once per process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// The full datapath: multi-buffer XDP, `bpf_loop` (Linux 5.18 and later, or a kernel with
    /// the same BPF features backported).
    Full,
    /// The compat object, with why: what the kernel lacks (or that it was asked for).
    Compat(String),
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectKind::Full => write!(f, "full"),
            ObjectKind::Compat(why) => write!(
                f,
                "compat ({why}): XDP without multi-buffer frames (on MTUs above a page the driver \
                 refuses it and tc ingress observes instead), the per-QP insert lock waited for \
                 {} attempts instead of {} (an insert that gives up is counted qp_insert_failed)",
                observer_common::qp_table::LOCK_WAIT_LOOPS_COMPAT,
                observer_common::qp_table::LOCK_WAIT_LOOPS
            ),
        }
    }
}

/// What the probe found (cached: the kernel does not change under a process).
#[derive(Clone, Debug)]
enum Probe {
    Kind(ObjectKind),
    TooOld {
        feature: &'static str,
        since: &'static str,
    },
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn probe_object() -> Probe {
    match std::env::var(OBJECT_ENV).as_deref() {
        Ok("compat") => return Probe::Kind(ObjectKind::Compat(format!("{OBJECT_ENV}=compat"))),
        Ok("full") => return Probe::Kind(ObjectKind::Full),
        Ok(other) => tracing::warn!(
            value = other,
            "{OBJECT_ENV} is neither `full` nor `compat`: ignored, the kernel is probed"
        ),
        Err(_) => {}
    }
    match sys::has_atomic_fetch() {
        Ok(false) => {
            return Probe::TooOld {
                feature: "the BPF atomic instructions with fetch (compare-and-exchange, \
                          exchange, fetch-and-add) that the per-QP table is built on",
                since: "5.12",
            };
        }
        // Not permitted (the load reports that next) or an unexpected answer: the load decides.
        Err(e) => tracing::debug!(error = %e, "BPF atomics probe inconclusive"),
        Ok(true) => {}
    }
    use aya::programs::ProgramType;
    use aya::sys::{BpfHelper, is_helper_supported};
    let mut missing = Vec::new();
    for (helper, what) in [
        (BpfHelper::BPF_FUNC_loop, "bpf_loop (5.17)"),
        (
            BpfHelper::BPF_FUNC_xdp_get_buff_len,
            "multi-buffer XDP (bpf_xdp_get_buff_len, xdp.frags: 5.18)",
        ),
    ] {
        match is_helper_supported(ProgramType::Xdp, helper) {
            Ok(true) => {}
            Ok(false) => missing.push(format!("no {what}")),
            Err(e) => missing.push(format!("{what} not probed: {e}")),
        }
    }
    if missing.is_empty() {
        Probe::Kind(ObjectKind::Full)
    } else {
        Probe::Kind(ObjectKind::Compat(missing.join(", ")))
    }
}

/// The object this kernel runs; an error naming the missing feature and the minimum version
/// where it can run none. Logged once, at the first load: a reduced capability is named.
pub fn object_kind() -> Result<ObjectKind, LiveError> {
    static P: std::sync::OnceLock<Probe> = std::sync::OnceLock::new();
    let p = P.get_or_init(|| {
        let p = probe_object();
        match &p {
            Probe::Kind(k @ ObjectKind::Compat(_)) => tracing::warn!(
                kernel = %kernel_release(), object = %k,
                "reduced capability: this kernel runs the compat datapath"),
            Probe::Kind(ObjectKind::Full) => {
                tracing::debug!(kernel = %kernel_release(), "full datapath")
            }
            Probe::TooOld { .. } => {}
        }
        p
    });
    match p {
        Probe::Kind(k) => Ok(k.clone()),
        Probe::TooOld { feature, since } => Err(LiveError::KernelTooOld {
            release: kernel_release(),
            feature,
            since,
        }),
    }
}

/// Program names in the object.
pub mod prog {
    /// XDP, ingress.
    pub const XDP: &str = "roce_xdp";
    /// tc ingress (fallback where XDP cannot attach).
    pub const TC_INGRESS: &str = "roce_tc_in";
    /// tc egress.
    pub const TC_EGRESS: &str = "roce_tc_eg";
    /// An XDP program that returns XDP_PASS and does nothing (benchmark baseline).
    pub const XDP_EMPTY: &str = "xdp_empty";
    /// A tc program that returns TC_ACT_OK and does nothing (baseline of the tc rows).
    pub const TC_EMPTY: &str = "tc_empty";
    /// The load-time check of the kfunc path for the multi-buffer length (`live/kfunc.rs`).
    pub const XDP_LEN_PROBE: &str = "xdp_len_probe";
    pub const ALL: [&str; 5] = [XDP, TC_INGRESS, TC_EGRESS, XDP_EMPTY, TC_EMPTY];
}

/// Size of the event ring buffer (bytes, a power of two multiple of the page size).
pub const EVENTS_BYTES: u32 = 1 << 20;
/// Size of the PFC / PAUSE frame ring buffer: 21,845 records of 48 bytes, drained every 100 ms
/// (about 218,000 MAC control frames per second before `pause_events_lost` counts).
pub const PAUSES_BYTES: u32 = 1 << 20;
/// Size of the live sample ring (`--evidence`): 5,461 records of 192 bytes (plus 8 of header),
/// drained every 100 ms.
pub const SAMPLES_BYTES: u32 = 1 << 20;
/// Largest number of source MACs with PFC/PAUSE counters (per-CPU values; MAC control senders
/// are the link peers, a handful per interface).
pub const MAX_MACS: u32 = 1024;
/// Most events one `drain_events` call takes.
pub const MAX_DRAIN: usize = 65536;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native (driver) XDP, falling back to generic (SKB) XDP, then to tc ingress.
    #[default]
    Auto,
    Native,
    Generic,
}

#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub iface: String,
    pub xdp_mode: XdpMode,
    /// Size of the per-QP map (keys).
    pub max_qps: u32,
    pub policy: Policy,
    /// Attach tc egress too (what this host sends).
    pub egress: bool,
    /// Offending frames sampled per second and CPU for the evidence capture (`--evidence`);
    /// 0: none.
    pub sample_per_sec: u32,
}

/// The live sampler's counts, summed over CPUs (cumulative since the object was loaded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerCounts {
    /// Frames copied to the sample ring.
    pub sampled: u64,
    /// Offending frames not sampled: a CPU's budget for the second was spent.
    pub over_rate: u64,
    /// Offending frames not sampled: the sample ring was full.
    pub lost: u64,
}

/// What was attached where, for the start-up report.
#[derive(Clone, Debug)]
pub struct Attached {
    pub iface: String,
    pub ifindex: u32,
    /// "xdp-native", "xdp-generic" or "tc-ingress".
    pub ingress: String,
    /// "tc-egress" when attached.
    pub egress: Option<String>,
    /// With XDP ingress: how it takes a multi-buffer frame's length.
    pub xdp_len: Option<XdpLenPath>,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("not permitted to load BPF programs: run as root (or with CAP_BPF and CAP_NET_ADMIN)")]
    NotPermitted,
    #[error("no such interface: {0}")]
    NoSuchInterface(String),
    #[error("the kernel verifier rejected {prog}; last lines of its log:\n{log_tail}")]
    Verifier { prog: String, log_tail: String },
    /// The kernel lacks a BPF feature neither object can do without.
    #[error(
        "this kernel ({release}) lacks {feature}: roce-observe's eBPF datapath needs Linux \
         {since} or later (replay of captures and the NIC view work on any kernel)"
    )]
    KernelTooOld {
        release: String,
        feature: &'static str,
        since: &'static str,
    },
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux missing)")]
    NoBtf,
    #[error("an XDP program is already attached to {0}")]
    XdpSlotTaken(String),
    /// The driver has no native XDP (`--xdp-mode native` on such an interface).
    #[error("{iface}: the driver has no native XDP (use --xdp-mode auto or generic)")]
    NativeXdpUnsupported {
        iface: String,
        #[source]
        source: ProgramError,
    },
    /// A load, map or attach step that failed, with the error it failed with (aya's
    /// `MapError`, `ProgramError`, `EbpfError`, an I/O error, ...).
    #[error("{what}")]
    Op {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A step found something wrong that has no underlying error: a program or map missing
    /// from the object, a probe that disagreed, an impossible option.
    #[error("{0}")]
    Setup(String),
}

impl LiveError {
    /// `what` failed with `source` (its cause is kept).
    pub fn op(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> LiveError {
        LiveError::Op {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Last `n` lines of a verifier log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The errno somewhere in an error's source chain.
fn errno_of(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(n) = io.raw_os_error()
        {
            return Some(n);
        }
        cur = err.source();
    }
    None
}

fn program_error(prog: &str, e: ProgramError) -> LiveError {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            if io_error.raw_os_error() == Some(libc::EPERM) {
                return LiveError::NotPermitted;
            }
            LiveError::Verifier {
                prog: prog.to_string(),
                log_tail: format!("{}\n({io_error})", tail(&verifier_log.to_string(), 20)),
            }
        }
        other => match errno_of(&other) {
            Some(libc::EPERM) => LiveError::NotPermitted,
            _ => LiveError::op(prog.to_string(), other),
        },
    }
}

fn ebpf_error(e: EbpfError) -> LiveError {
    if OBJECT.is_empty() {
        return LiveError::Setup(
            "this binary was built with AYA_BUILD_SKIP=1: it carries no eBPF object".into(),
        );
    }
    if matches!(e, EbpfError::BtfError(_))
        && !std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
    {
        return LiveError::NoBtf;
    }
    match errno_of(&e) {
        Some(libc::EPERM) => LiveError::NotPermitted,
        _ => LiveError::op("loading the eBPF object", e),
    }
}

/// Wall-clock minus monotonic time now, in ns.
fn mono_to_wall_offset() -> i128 {
    let mut m = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut r = m;
    // SAFETY: clock_gettime writes into the valid timespec it is given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut m);
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut r);
    }
    let ns = |t: libc::timespec| t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
    ns(r) - ns(m)
}

fn to_wall(mono: u64, off: i128) -> u64 {
    if mono == 0 {
        return 0;
    }
    (mono as i128 + off).max(0) as u64
}

fn value_to_wall(v: &mut QpValue, off: i128) {
    v.first_ns = to_wall(v.first_ns, off);
    v.last_ns = to_wall(v.last_ns, off);
}

/// How the XDP program takes the length of a multi-buffer frame (`live/kfunc.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XdpLenPath {
    /// Reads it from the kernel's `xdp_buff` through kfuncs, checked against the helper at load.
    Kfunc,
    /// Calls `bpf_xdp_get_buff_len` (8-10 ns more per multi-buffer frame), with the reason.
    Helper(String),
    /// The compat object (no multi-buffer XDP on this kernel): the linear length, which is the
    /// whole frame's, since such a program is never given a multi-buffer frame; with the reason.
    Linear(String),
}

impl std::fmt::Display for XdpLenPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XdpLenPath::Kfunc => write!(f, "kfunc (xdp_buff fields, checked against the helper)"),
            XdpLenPath::Helper(why) => write!(f, "helper bpf_xdp_get_buff_len ({why})"),
            XdpLenPath::Linear(why) => {
                write!(f, "linear (compat object: single-buffer XDP only; {why})")
            }
        }
    }
}

/// The kernel's layout for the kfunc path, read once per process.
fn kfuncs() -> &'static Result<kfunc::Kfuncs, String> {
    static K: std::sync::OnceLock<Result<kfunc::Kfuncs, String>> = std::sync::OnceLock::new();
    K.get_or_init(|| {
        kfunc::Btf::vmlinux()
            .and_then(|b| kfunc::Kfuncs::from_btf(&b))
            .map_err(|e| contract::error::chain(&e))
    })
}

/// Loads the object (maps created, `progs` loaded). The XDP program takes a multi-buffer
/// frame's length through the kfunc path when the kernel's BTF describes it and the probe
/// program, loaded and run on a single-buffer and a multi-buffer frame, gets the helper's
/// length for both; otherwise the object is loaded again with the helper path.
fn load_object(
    max_qps: u32,
    buckets: u32,
    progs: &[&str],
    allow_kfunc: bool,
) -> Result<(Ebpf, XdpLenPath), LiveError> {
    let kind = object_kind()?;
    if let ObjectKind::Compat(why) = &kind {
        let ebpf = load_with(max_qps, buckets, progs, None, true)?;
        return Ok((ebpf, XdpLenPath::Linear(why.clone())));
    }
    let why = match kfuncs() {
        _ if !allow_kfunc => "asked for".to_string(),
        Ok(k) if progs.contains(&prog::XDP) => {
            match load_with(max_qps, buckets, progs, Some(k), false) {
                Ok(mut ebpf) => match check_kfunc_len(&mut ebpf) {
                    Ok(()) => return Ok((ebpf, XdpLenPath::Kfunc)),
                    Err(e) => contract::error::chain(&e),
                },
                Err(e @ LiveError::NotPermitted) => return Err(e),
                Err(e) => contract::error::chain(&e),
            }
        }
        Ok(_) => "no XDP program loaded".to_string(),
        Err(e) => e.clone(),
    };
    if progs.contains(&prog::XDP) {
        tracing::info!(reason = %why, "multi-buffer XDP length through the helper");
    }
    let ebpf = load_with(max_qps, buckets, progs, None, false)?;
    Ok((ebpf, XdpLenPath::Helper(why)))
}

/// The programs' aya-log level: debug (4) when this process logs `roce_observe::ebpf` at debug
/// (`--log-level debug`): the object with the rare-path reports is loaded then; else 0 and the
/// default object, which has none.
fn kernel_log_level() -> u8 {
    if tracing::enabled!(target: "roce_observe::ebpf", tracing::Level::DEBUG) {
        4
    } else {
        0
    }
}

fn load_with(
    max_qps: u32,
    buckets: u32,
    progs: &[&str],
    kfuncs: Option<&kfunc::Kfuncs>,
    compat: bool,
) -> Result<Ebpf, LiveError> {
    if OBJECT.is_empty() {
        return Err(LiveError::Setup(
            "this binary was built with AYA_BUILD_SKIP=1: it carries no eBPF object".into(),
        ));
    }
    // The compat object has no rare-path reports (its log would be a fourth object).
    let log_level = if compat { 0 } else { kernel_log_level() };
    let base = match (compat, log_level > 0) {
        (true, _) => OBJECT_COMPAT,
        (false, true) => OBJECT_LOG,
        (false, false) => OBJECT,
    };
    let (object, _) = kfunc::patch_object(base, kfuncs)
        .map_err(|e| LiveError::op("relocating kfunc calls", e))?;
    let layout = kfuncs.map(|k| k.layout).unwrap_or_default();
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("QPS", buckets * observer_common::qp_table::WAYS as u32)
        .map_max_entries("QPIDX", buckets)
        .map_max_entries("QPDIRTY", observer_common::qp_table::dirty_words(buckets))
        .map_max_entries(
            "QPHIST",
            observer_common::qp_table::hist_overflow_entries(max_qps),
        )
        .override_global("QP_BUCKETS", &buckets, true)
        .override_global("QP_LIMIT", &max_qps, true)
        .override_global("XDP_LEN", &layout, !compat)
        .override_global("AYA_LOG_LEVEL", &log_level, log_level > 0)
        .map_max_entries("MACS", MAX_MACS)
        .map_max_entries("EVENTS", EVENTS_BYTES)
        .map_max_entries("PAUSES", PAUSES_BYTES)
        .map_max_entries("SAMPLES", SAMPLES_BYTES)
        .load(object.bytes())
        .map_err(ebpf_error)?;
    let extra: &[&str] = if kfuncs.is_some() {
        &[prog::XDP_LEN_PROBE]
    } else {
        &[]
    };
    for &name in progs.iter().chain(extra) {
        let p = ebpf
            .program_mut(name)
            .ok_or_else(|| LiveError::Setup(format!("program {name} missing from the object")))?;
        let r = match p {
            aya::programs::Program::Xdp(x) => x.load(),
            aya::programs::Program::SchedClassifier(c) => c.load(),
            _ => return Err(LiveError::Setup(format!("{name}: unexpected program type"))),
        };
        r.map_err(|e| program_error(name, e))?;
    }
    Ok(ebpf)
}

/// Runs the probe on a single-buffer (100 B) and a multi-buffer (9000 B) frame: each must get
/// the helper's length through the kfunc path.
fn check_kfunc_len(ebpf: &mut Ebpf) -> Result<(), LiveError> {
    let p: &mut Xdp = ebpf
        .program_mut(prog::XDP_LEN_PROBE)
        .ok_or_else(|| LiveError::Setup("program xdp_len_probe missing".into()))?
        .try_into()
        .map_err(|e: ProgramError| LiveError::op("loading the program", e))?;
    for len in [100usize, 9000] {
        let frame = vec![0u8; len];
        let r = p
            .test_run(TestRunOptions {
                data_in: Some(&frame),
                repeat: 1,
                ..TestRunOptions::default()
            })
            .map_err(|e| LiveError::op("BPF_PROG_TEST_RUN xdp_len_probe", e))?;
        if r.return_value != XDP_PASS {
            return Err(LiveError::Setup(format!(
                "the kfunc path got a {len}-byte frame's length wrong on this kernel"
            )));
        }
    }
    Ok(())
}

/// `XDP_PASS`.
const XDP_PASS: u32 = 2;

/// A loaded object: programs (loaded on demand) and the maps taken out of it.
struct Loaded {
    /// Declared first so it stops before the object is dropped.
    ticker: Option<clock::ClockTicker>,
    clock: Option<Array<MapData, u64>>,
    ebpf: Ebpf,
    /// The per-QP table, memory-mapped (its maps are kept open beside it).
    table: mapped_table::QpTable,
    _table_maps: [Map; 4],
    iface: PerCpuArray<MapData, IfaceStats>,
    macs: PerCpuHashMap<MapData, MacKey, PfcCounters>,
    policy: Array<MapData, Policy>,
    events: RingBuf<MapData>,
    pauses: RingBuf<MapData>,
    /// Sampled offending frames (`--evidence`), their per-CPU sampler and its rate.
    samples: RingBuf<MapData>,
    sampler: PerCpuArray<MapData, SamplerState>,
    sample_rate: Array<MapData, u32>,
    /// The programs' rare-path log records (aya-log), when kernel logging is on.
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    /// The last snapshot's per-QP entries, given back ([`Loaded::recycle`]): the next snapshot
    /// updates them in place (only keys whose packets moved are read again).
    spare: Option<Vec<(QpKey, QpValue)>>,
    /// How the XDP program takes a multi-buffer frame's length.
    xdp_len: XdpLenPath,
}

fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, LiveError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| LiveError::Setup(format!("map {name} missing from the eBPF object")))?;
    T::try_from(m).map_err(|e| LiveError::op(format!("map {name}"), e))
}

impl Loaded {
    fn new(
        max_qps: u32,
        policy: &Policy,
        progs: &[&str],
        allow_kfunc: bool,
    ) -> Result<Loaded, LiveError> {
        if max_qps == 0 {
            return Err(LiveError::Setup(
                "the per-QP map needs at least one key".into(),
            ));
        }
        let buckets = buckets_for(max_qps);
        let (mut ebpf, xdp_len) = load_object(max_qps, buckets, progs, allow_kfunc)?;
        let mut table_map = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| LiveError::Setup(format!("map {name} missing from the eBPF object")))
        };
        let maps = [
            table_map("QPIDX")?,
            table_map("QPS")?,
            table_map("QPCOUNT")?,
            table_map("QPDIRTY")?,
        ];
        let fd = |m: &Map| match m {
            Map::Array(d) => Ok(d.fd().as_fd().as_raw_fd()),
            _ => Err(LiveError::Setup("per-QP table maps must be arrays".into())),
        };
        let hist = take(&mut ebpf, "QPHIST")?;
        let table = mapped_table::QpTable::map(
            [fd(&maps[0])?, fd(&maps[1])?, fd(&maps[2])?, fd(&maps[3])?],
            buckets,
            hist,
        )
        .map_err(|e| LiveError::op("mapping the per-QP table", e))?;
        let iface = take(&mut ebpf, "IFACE")?;
        let macs = take(&mut ebpf, "MACS")?;
        let policy_map = take(&mut ebpf, "POLICY")?;
        let events = take(&mut ebpf, "EVENTS")?;
        let pauses = take(&mut ebpf, "PAUSES")?;
        let samples = take(&mut ebpf, "SAMPLES")?;
        let sampler = take(&mut ebpf, "SAMPLER")?;
        let sample_rate = take(&mut ebpf, "SAMPLE_RATE")?;
        let logger = if kernel_log_level() > 0 {
            match aya_log::EbpfLogger::init(&mut ebpf) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "the programs' debug log cannot be read");
                    None
                }
            }
        } else {
            None
        };
        let clock = take(&mut ebpf, "CLOCK")?;
        let mut l = Loaded {
            ticker: None,
            clock: Some(clock),
            ebpf,
            table,
            _table_maps: maps,
            iface,
            macs,
            policy: policy_map,
            events,
            pauses,
            samples,
            sampler,
            sample_rate,
            logger,
            spare: None,
            xdp_len,
        };
        l.set_policy(policy)?;
        Ok(l)
    }

    /// Starts the packet clock ticker (no-op when running).
    fn start_clock(&mut self) -> Result<(), LiveError> {
        if let Some(map) = self.clock.take() {
            self.ticker = Some(clock::ClockTicker::start(&mut self.ebpf, map)?);
        }
        Ok(())
    }

    fn clock_running(&self) -> bool {
        self.ticker.as_ref().is_some_and(|t| t.running())
    }

    fn clock_in_kernel(&self) -> bool {
        self.ticker.as_ref().is_some_and(|t| t.in_kernel())
    }

    fn set_policy(&mut self, p: &Policy) -> Result<(), LiveError> {
        self.policy
            .set(0, p, 0)
            .map_err(|e| LiveError::op("writing the policy", e))
    }

    /// Offending frames to sample per second on each CPU (0: none).
    fn set_sample_rate(&mut self, per_sec: u32) -> Result<(), LiveError> {
        self.sample_rate
            .set(0, &per_sec, 0)
            .map_err(|e| LiveError::op("writing the sample rate", e))
    }

    fn sampler_counts(&self) -> Result<SamplerCounts, LiveError> {
        let per_cpu = self
            .sampler
            .get(&0, 0)
            .map_err(|e| LiveError::op("reading SAMPLER", e))?;
        let mut c = SamplerCounts::default();
        for s in per_cpu.iter() {
            c.sampled += s.sampled;
            c.over_rate += s.over_rate;
            c.lost += s.lost;
        }
        Ok(c)
    }

    fn drain_samples(&mut self, out: &mut Vec<Sample>) -> usize {
        let off = mono_to_wall_offset();
        drain_ring(&mut self.samples, out, |e: &mut Sample| {
            e.ts_ns = to_wall(e.ts_ns, off)
        })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Every (key, value) of the per-QP table, every value expanded (not the incremental
    /// read of [`Loaded::snapshot`]; its cache is left alone).
    fn read_qps(
        &mut self,
        each: impl FnMut(&mut QpValue),
    ) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        self.table
            .read(each)
            .map_err(|e| LiveError::op("reading the per-QP table", e))
    }

    fn snapshot(&mut self, iface: &str, time_ns: u64) -> Result<Snapshot, LiveError> {
        let off = mono_to_wall_offset();
        // times converted while each value is in the cache (not a second pass over the values);
        // the entries of keys whose packets did not move keep their conversion of an earlier
        // read
        let (qps, changed) = self
            .table
            .read_into(self.spare.take(), |v| value_to_wall(v, off))
            .map_err(|e| LiveError::op("reading the per-QP table", e))?;
        let mut iface_stats = [IfaceStats::default(); dir::COUNT];
        for (d, slot) in iface_stats.iter_mut().enumerate() {
            let per_cpu = self
                .iface
                .get(&(d as u32), 0)
                .map_err(|e| LiveError::op("reading IFACE", e))?;
            for s in per_cpu.iter() {
                slot.add(s);
            }
        }
        let mut macs = Vec::new();
        for kv in self.macs.iter() {
            let (k, per_cpu) = match kv {
                Ok(kv) => kv,
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => return Err(LiveError::op("reading MACS", e)),
            };
            let mut sum = PfcCounters::default();
            for c in per_cpu.iter() {
                sum.add(c);
            }
            macs.push((k, sum));
        }
        Ok(Snapshot {
            iface: iface.to_string(),
            time_ns,
            link_speed_bps: link_speed(iface),
            qps,
            iface_stats,
            macs,
            changed: Some(changed),
        })
    }

    /// Gives a snapshot back once it has been used: its per-QP entries are the next
    /// snapshot's starting point.
    fn recycle(&mut self, snap: Snapshot) {
        self.spare = Some(snap.qps);
    }

    fn evict(&mut self, keys: &[QpKey]) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        let off = mono_to_wall_offset();
        self.table
            .evict(keys, |v| value_to_wall(v, off))
            .map_err(|e| LiveError::op("evicting from the per-QP table", e))
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Empties every map (tests reuse one loaded object across cases).
    fn reset(&mut self) -> Result<(), LiveError> {
        let keys: Vec<QpKey> = self.read_qps(|_| {})?.into_iter().map(|(k, _)| k).collect();
        let evicted = self.evict(&keys)?.len();
        // `evict` skips a key it cannot find: a key left here would carry its state into the
        // next case (a once-seen second incarnation in a fresh case on 6.1), so say so.
        let left = self.read_qps(|_| {})?;
        if !left.is_empty() {
            let names: Vec<String> = left.iter().map(|(k, _)| format!("{k:?}")).collect();
            return Err(LiveError::Setup(format!(
                "reset left {} of {} keys in the per-QP table ({evicted} evicted): {}",
                left.len(),
                keys.len(),
                names.join(", ")
            )));
        }
        let mac_keys: Vec<MacKey> = self.macs.keys().filter_map(Result::ok).collect();
        for k in mac_keys {
            self.macs
                .remove(&k)
                .map_err(|e| LiveError::op("clearing MACS", e))?;
        }
        let ncpu = aya::util::nr_cpus()
            .map_err(|(what, e)| LiveError::op(what.to_string(), e))?
            .get() as usize;
        for d in 0..dir::COUNT as u32 {
            let zeros = aya::maps::PerCpuValues::try_from(vec![IfaceStats::default(); ncpu])
                .map_err(|e| LiveError::op("clearing IFACE", e))?;
            self.iface
                .set(d, zeros, 0)
                .map_err(|e| LiveError::op("clearing IFACE", e))?;
        }
        let mut sink = Vec::new();
        self.drain_events(&mut sink);
        let mut sink = Vec::new();
        self.drain_pauses(&mut sink);
        let mut sink = Vec::new();
        self.drain_samples(&mut sink);
        let ncpu = aya::util::nr_cpus()
            .map_err(|(what, e)| LiveError::op(what.to_string(), e))?
            .get() as usize;
        let zeros = aya::maps::PerCpuValues::try_from(vec![SamplerState::default(); ncpu])
            .map_err(|e| LiveError::op("clearing SAMPLER", e))?;
        self.sampler
            .set(0, zeros, 0)
            .map_err(|e| LiveError::op("clearing SAMPLER", e))?;
        Ok(())
    }

    fn drain_events(&mut self, out: &mut Vec<Event>) -> usize {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
        let off = mono_to_wall_offset();
        drain_ring(&mut self.events, out, |e: &mut Event| {
            e.ts_ns = to_wall(e.ts_ns, off)
        })
    }

    fn drain_pauses(&mut self, out: &mut Vec<PauseEvent>) -> usize {
        let off = mono_to_wall_offset();
        drain_ring(&mut self.pauses, out, |e: &mut PauseEvent| {
            e.ts_ns = to_wall(e.ts_ns, off)
        })
    }
}

/// Appends the records waiting in `ring` (each a `T` written by the eBPF programs), `fix`
/// applied to each. Bounded, so a producer faster than us cannot keep the caller here: the rest
/// waits for the next call (the ring's fd stays readable).
fn drain_ring<T: aya::Pod>(
    ring: &mut RingBuf<MapData>,
    out: &mut Vec<T>,
    mut fix: impl FnMut(&mut T),
) -> usize {
    let mut n = 0;
    for _ in 0..MAX_DRAIN {
        let Some(item) = ring.next() else {
            break;
        };
        if item.len() < size_of::<T>() {
            tracing::warn!(
                len = item.len(),
                want = size_of::<T>(),
                "short record in a ring buffer"
            );
            continue;
        }
        // SAFETY: the record holds a `T` written by the eBPF program (same #[repr(C)] layout,
        // every bit pattern valid: `Pod`); read_unaligned copes with any alignment.
        let mut e = unsafe { std::ptr::read_unaligned(item.as_ptr() as *const T) };
        fix(&mut e);
        out.push(e);
        n += 1;
    }
    n
}

/// Link speed from sysfs (Mbit/s there), when the driver reports one.
fn link_speed(iface: &str) -> Option<u64> {
    let dev = std::path::Path::new("/sys/class/net").join(contract::cli::iface_os(iface));
    let s = std::fs::read_to_string(dev.join("speed")).ok()?;
    let mbit: i64 = s.trim().parse().ok()?;
    (mbit > 0).then_some(mbit as u64 * 1_000_000)
}

/// The interface's index now (`None`: no interface of that name).
pub fn current_ifindex(name: &str) -> Option<u32> {
    ifindex(name).ok()
}

fn ifindex(name: &str) -> Result<u32, LiveError> {
    use std::os::unix::ffi::OsStringExt;
    let c = std::ffi::CString::new(contract::cli::iface_os(name).into_vec())
        .map_err(|_| LiveError::NoSuchInterface(name.into()))?;
    // SAFETY: if_nametoindex reads a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(LiveError::NoSuchInterface(name.into()));
    }
    Ok(i)
}

/// One interface being observed. Dropping it detaches the programs and stops its clock ticker.
pub struct LiveIface {
    loaded: Loaded,
    attached: Attached,
}

/// Where the ingress program goes ([`LiveIface::attach_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IngressHook {
    /// XDP in this mode (Auto falls back to tc ingress).
    Xdp(XdpMode),
    /// tc ingress only (what Auto falls back to where XDP cannot attach).
    TcIngress,
}

impl LiveIface {
    /// Loads a fresh object and attaches it to `opts.iface` (interface names resolve in the
    /// calling thread's network namespace).
    pub fn attach(opts: &LiveOptions) -> Result<LiveIface, LiveError> {
        Self::attach_with(opts, IngressHook::Xdp(opts.xdp_mode))
    }

    /// [`LiveIface::attach`] with an explicit ingress hook.
    pub fn attach_with(opts: &LiveOptions, hook: IngressHook) -> Result<LiveIface, LiveError> {
        let ifindex = ifindex(&opts.iface)?;
        let mut progs = match hook {
            IngressHook::Xdp(XdpMode::Auto) => vec![prog::XDP, prog::TC_INGRESS],
            IngressHook::Xdp(_) => vec![prog::XDP],
            IngressHook::TcIngress => vec![prog::TC_INGRESS],
        };
        if opts.egress {
            progs.push(prog::TC_EGRESS);
        }
        let mut loaded = Loaded::new(opts.max_qps, &opts.policy, &progs, true)?;
        loaded.set_sample_rate(opts.sample_per_sec)?;
        // Before attaching: no packet is stamped with the fallback clock.
        loaded.start_clock()?;
        let ingress = match hook {
            IngressHook::Xdp(mode) => attach_ingress(&mut loaded.ebpf, opts, mode, ifindex)?,
            IngressHook::TcIngress => {
                attach_tc(
                    &mut loaded.ebpf,
                    prog::TC_INGRESS,
                    ifindex,
                    TcAttachType::Ingress,
                )?;
                "tc-ingress".to_string()
            }
        };
        let egress = if opts.egress {
            attach_tc(
                &mut loaded.ebpf,
                prog::TC_EGRESS,
                ifindex,
                TcAttachType::Egress,
            )?;
            Some("tc-egress".to_string())
        } else {
            None
        };
        let xdp_len = ingress.starts_with("xdp").then(|| loaded.xdp_len.clone());
        // the command says it once, in words (`attached_line`); the fields for debugging
        tracing::debug!(iface = %opts.iface, ifindex, ingress = %ingress,
            egress = egress.as_deref().unwrap_or("none"), max_qps = opts.max_qps,
            xdp_len = %xdp_len.as_ref().map_or("n/a".to_string(), |x| x.to_string()),
            "attached");
        Ok(LiveIface {
            loaded,
            attached: Attached {
                iface: opts.iface.clone(),
                ifindex,
                ingress,
                egress,
                xdp_len,
            },
        })
    }
    pub fn attached(&self) -> &Attached {
        &self.attached
    }
    /// Whether the packet clock ticker thread runs (it does from attach until drop).
    pub fn clock_running(&self) -> bool {
        self.loaded.clock_running()
    }
    /// Whether the packet clock ticks in the kernel (it goes on while this process is stopped).
    pub fn clock_in_kernel(&self) -> bool {
        self.loaded.clock_in_kernel()
    }
    pub fn set_policy(&mut self, p: &Policy) -> Result<(), LiveError> {
        self.loaded.set_policy(p)
    }
    /// Cumulative state of every map; `time_ns` is wall-clock UNIX ns.
    pub fn snapshot(&mut self, time_ns: u64) -> Result<Snapshot, LiveError> {
        let name = self.attached.iface.clone();
        self.loaded.snapshot(&name, time_ns)
    }
    /// Gives a snapshot back after use, so the next [`Self::snapshot`] reads only the keys
    /// whose packets moved (and costs O(active keys) expansions, not O(keys)).
    pub fn recycle(&mut self, snap: Snapshot) {
        self.loaded.recycle(snap)
    }
    /// Removes keys (idle QPs) atomically with their last value, so nothing is lost.
    pub fn evict(&mut self, keys: &[QpKey]) -> Result<Vec<(QpKey, QpValue)>, LiveError> {
        self.loaded.evict(keys)
    }
    /// Non-blocking: appends the events waiting in the ring buffer (times already converted to
    /// wall-clock UNIX ns). Returns how many.
    pub fn drain_events(&mut self, out: &mut Vec<Event>) -> usize {
        self.loaded.drain_events(out)
    }
    /// Non-blocking: appends the PFC / PAUSE frames waiting in their ring buffer (times in
    /// wall-clock UNIX ns). Returns how many.
    pub fn drain_pauses(&mut self, out: &mut Vec<PauseEvent>) -> usize {
        self.loaded.drain_pauses(out)
    }
    /// Non-blocking: appends the sampled offending frames waiting in their ring buffer (times
    /// in wall-clock UNIX ns). Returns how many.
    pub fn drain_samples(&mut self, out: &mut Vec<Sample>) -> usize {
        self.loaded.drain_samples(out)
    }
    /// The live sampler's counts since attach.
    pub fn sampler_counts(&self) -> Result<SamplerCounts, LiveError> {
        self.loaded.sampler_counts()
    }
    /// The ring buffer's fd, for `tokio::io::unix::AsyncFd` readiness.
    pub fn events_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.loaded.events.as_raw_fd())
    }
}

fn xdp_attach_error(iface: &str, e: ProgramError, native: bool) -> LiveError {
    match errno_of(&e) {
        Some(libc::EBUSY | libc::EEXIST) => LiveError::XdpSlotTaken(iface.to_string()),
        Some(libc::EPERM) => LiveError::NotPermitted,
        Some(libc::EOPNOTSUPP | libc::EINVAL) if native => LiveError::NativeXdpUnsupported {
            iface: iface.to_string(),
            source: e,
        },
        _ => LiveError::op(format!("attaching XDP to {iface}"), e),
    }
}

fn attach_ingress(
    ebpf: &mut Ebpf,
    opts: &LiveOptions,
    xdp_mode: XdpMode,
    ifindex: u32,
) -> Result<String, LiveError> {
    let modes: &[(AyaXdpMode, &str)] = match xdp_mode {
        XdpMode::Auto => &[
            (AyaXdpMode::Driver, "xdp-native"),
            (AyaXdpMode::Skb, "xdp-generic"),
        ],
        XdpMode::Native => &[(AyaXdpMode::Driver, "xdp-native")],
        XdpMode::Generic => &[(AyaXdpMode::Skb, "xdp-generic")],
    };
    let xdp: &mut Xdp = ebpf
        .program_mut(prog::XDP)
        .ok_or_else(|| LiveError::Setup("program roce_xdp missing".into()))?
        .try_into()
        .map_err(|e: ProgramError| LiveError::op("loading the program", e))?;
    let mut last = None;
    for &(mode, name) in modes {
        match xdp.attach(ifindex, mode) {
            Ok(_) => return Ok(name.to_string()),
            Err(e) => {
                let err = xdp_attach_error(&opts.iface, e, name == "xdp-native");
                if matches!(err, LiveError::XdpSlotTaken(_) | LiveError::NotPermitted) {
                    return Err(err);
                }
                tracing::info!(iface = %opts.iface, mode = name, error = %contract::error::chain(&err), "XDP attach failed");
                last = Some(err);
            }
        }
    }
    if xdp_mode != XdpMode::Auto {
        return Err(last.unwrap_or_else(|| LiveError::Setup("XDP attach failed".into())));
    }
    attach_tc(ebpf, prog::TC_INGRESS, ifindex, TcAttachType::Ingress)?;
    Ok("tc-ingress".to_string())
}

fn attach_tc(ebpf: &mut Ebpf, name: &str, ifindex: u32, at: TcAttachType) -> Result<(), LiveError> {
    let p: &mut SchedClassifier = ebpf
        .program_mut(name)
        .ok_or_else(|| LiveError::Setup(format!("program {name} missing")))?
        .try_into()
        .map_err(|e: ProgramError| LiveError::op("loading the program", e))?;
    let err = |e: ProgramError| match errno_of(&e) {
        Some(libc::EPERM) => LiveError::NotPermitted,
        Some(libc::ENODEV) => LiveError::NoSuchInterface(format!("ifindex {ifindex}")),
        _ => LiveError::op(format!("attaching {name}"), e),
    };
    let first = match p.attach(ifindex, at) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    // Kernels before 6.6 have no TCX: aya attaches through netlink, under the interface's clsact
    // qdisc, which must exist. Added here when it is missing (an empty clsact qdisc changes no
    // traffic), then the attach is tried once more.
    if !matches!(first, ProgramError::TcError(_)) {
        return Err(err(first));
    }
    match aya::programs::tc::qdisc_add_clsact(ifindex) {
        Ok(()) => {
            tracing::info!(
                ifindex,
                program = name,
                "no TCX on this kernel: added the clsact qdisc the tc programs attach under (left in place at exit)"
            );
        }
        Err(e) if errno_of(&e) == Some(libc::EEXIST) => return Err(err(first)),
        Err(e) => {
            return Err(LiveError::op(
                format!("adding the clsact qdisc for {name} (the attach said: {first})"),
                e,
            ));
        }
    }
    p.attach(ifindex, at).map(|_| ()).map_err(err)
}
