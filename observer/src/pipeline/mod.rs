//! The collector, as stages: a [`Snapshot`] of one interface becomes interval deltas per key
//! and per interface ([`deltas`], [`prev_values`], [`ip_pairs`]), rows and alert candidates
//! ([`rules`]), the hold-down ([`alerts::Dedup`]), and then every output through the
//! [`crate::sinks::Sink`] trait. Driven by the live source and by replay alike: intervals are
//! the times of the snapshots (wall clock live, capture time in replay), never the collector's
//! own clock.

pub mod alerts;
pub mod deltas;
pub mod ip_pairs;
pub mod latency;
pub mod marking;
pub mod nic_stage;
pub mod pause;

pub mod prev_values;
pub mod qp_stage;
pub mod rows;
pub mod rules;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IsTerminal;
use std::path::PathBuf;

use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, QpKey, QpValue, class, dir,
};
use serde_json::{Value, json};

use crate::sinks::parquet_files::OutputError;
use crate::sinks::summary_json::QpList;
use crate::sinks::{IntervalRows, JsonlSink, RunInfo, Sink, StderrSink, TableKind, TableSink};
use crate::sources::Snapshot;
use crate::sources::snapshot::CounterWords;
use alerts::{Alert, AlertKey, Dedup};
use rows::{self as tables, FlowsBuilder, IfaceExtra};
use rules::{IfaceInterval, Rule};

pub use contract::policy::PolicyConfig;
use ip_pairs::PairIndex;

/// Alert rule names as strings (stable: alerts.jsonl, the alerts table, the lab's checks),
/// from [`rules::Rule`], where every rule is defined.
pub mod rule {
    use super::rules::Rule;
    pub const DSCP_MISMATCH: &str = Rule::DscpMismatch.name();
    pub const PCP_MISMATCH: &str = Rule::PcpMismatch.name();
    pub const NOT_ECT: &str = Rule::NotEct.name();
    pub const PAUSE_802_3X: &str = Rule::Pause8023x.name();
    pub const PFC_WRONG_PRIORITY: &str = Rule::PfcWrongPriority.name();
    pub const PFC_STORM: &str = Rule::PfcStorm.name();
    pub const PSN_GAP: &str = Rule::PsnGap.name();
    pub const GO_BACK_N: &str = Rule::GoBackN.name();
    pub const ICRC_BAD: &str = Rule::IcrcBad.name();
    pub const CE_WITHOUT_CNP: &str = Rule::CeWithoutCnp.name();
    pub const PFC_WITHOUT_ECN: &str = Rule::PfcWithoutEcn.name();
    pub const MTU_BELOW_EXPECTED: &str = Rule::MtuBelowExpected.name();
    pub const LATENCY_HIGH: &str = Rule::LatencyHigh.name();
    pub const MARKING_CHANGED: &str = Rule::MarkingChanged.name();
    pub const QP_MAP_FULL: &str = Rule::QpMapFull.name();
    pub const EVENTS_LOST: &str = Rule::EventsLost.name();
    pub const OUTPUT_WRITE_FAILED: &str = Rule::OutputWriteFailed.name();
    pub const IFACE_GONE: &str = Rule::IfaceGone.name();
    /// Every packet rule's name, in documentation order (the NIC and configuration rules
    /// follow in `Rule::ALL`).
    pub const ALL: [&str; 17] = {
        let mut a = [""; 17];
        let mut i = 0;
        while i < 17 {
            a[i] = Rule::ALL[i].name();
            i += 1;
        }
        a
    };
}

#[derive(Clone, Debug)]
pub struct CollectorConfig {
    /// Root of the Hive-style output tree (`flows/`, `interfaces/`, `alerts/`, `alerts.jsonl`,
    /// `summary.json`).
    pub out_dir: PathBuf,
    /// Host name written into file names.
    pub host: String,
    /// The observation point's label (`--point-label`): the `point` column of every table and
    /// `point` in summary.json (`None`: null).
    pub point_label: Option<String>,
    /// "live" or "replay".
    pub source: &'static str,
    pub policy: PolicyConfig,
    /// Close a Parquet file after this many seconds of data ...
    pub rotate_secs: u64,
    /// ... or this many bytes, whichever comes first.
    pub rotate_bytes: u64,
    /// The terminal view (added as a sink by the live command) shows the intervals: no
    /// `interval` log lines, no alert lines on stderr when stderr is that terminal.
    pub terminal: bool,
    /// `--log-format json`: alerts go to the log as structured events, stderr has JSON only.
    pub log_json: bool,
    /// What the NIC's QoS configuration is checked against (`None`: not checked).
    pub nic_policy: Option<nic::Policy>,
    /// Journal every interval's rows durably, so a crash loses at most the interval being read
    /// (on by default).
    pub journal: bool,
    /// Write the outputs that should not wait for the interval (`alerts.jsonl`, Alertmanager)
    /// after every batch of events (on by default: live). Replay turns it off: its events come
    /// with nearly every packet of a bad capture, and its intervals pass in milliseconds of
    /// wall time; the interval's end writes them.
    pub flush_on_events: bool,
}

impl CollectorConfig {
    /// Defaults: rotation every 300 s or 128 MiB, no terminal view.
    pub fn new(
        out_dir: PathBuf,
        host: &str,
        source: &'static str,
        policy: PolicyConfig,
    ) -> CollectorConfig {
        CollectorConfig {
            out_dir,
            host: host.to_string(),
            point_label: None,
            source,
            policy,
            rotate_secs: 300,
            rotate_bytes: 128 << 20,
            terminal: false,
            log_json: false,
            nic_policy: None,
            journal: true,
            flush_on_events: true,
        }
    }
}

/// Keeps freed heap memory for reuse instead of returning it to the kernel (glibc `mallopt`):
/// every interval allocates and frees the same large column buffers, and fresh pages cost a
/// page fault and a page clear each (a third of the collector's CPU time at 100k QPs without
/// this). Called by the live command and the benchmark; process-wide, so not by `Collector`.
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes glibc allocator thresholds; called before heavy allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// This machine's host name (for file names), sanitised to `[A-Za-z0-9._-]`.
pub fn host_name() -> String {
    let raw =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
    let s: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "localhost".into() } else { s }
}

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("cannot create output directory {path}")]
    OutDir {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("building a record batch")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("encoding summary.json")]
    Json(#[from] serde_json::Error),
}

/// Keys ahead of the scan whose `pkts` lines (current and previous value) are prefetched.
const PREFETCH_HEAD: usize = 8;
/// Keys ahead of the scan whose whole values are prefetched when active.
const PREFETCH_FULL: usize = 2;

/// Collector state of one interface.
#[derive(Default)]
struct IfaceState {
    prev: prev_values::PrevStore,
    /// IP pair ids of the tracked keys (their `prev` tags) and the interval's pair sums.
    pairs: PairIndex,
    prev_iface: [IfaceStats; dir::COUNT],
    prev_macs: HashMap<MacKey, PfcCounters>,
    prev_time: Option<u64>,
    start_ns: Option<u64>,
    link_bps: Option<u64>,
    /// Final values of keys the source removed (idle eviction), not yet accounted.
    evicted: Vec<(QpKey, QpValue)>,
    /// Id of the last snapshot accounted ([`crate::sources::Changed::id`]), when the source
    /// gave one: the next snapshot's changes are against it.
    last_snapshot_id: Option<u64>,
    /// Last values of keys no longer in the map (for the summary).
    retired: HashMap<QpKey, QpValue>,
    /// Largest XOFF frames per second (densest one-second window) seen per direction and
    /// priority.
    max_xoff_per_s: [[f64; 8]; dir::COUNT],
    /// Pause clocks and XOFF windows, from the PFC / PAUSE frames.
    pause: pause::PauseTracker,
    evictions_total: u64,
    /// Rows written in the last interval (sizes the next interval's builders).
    last_active: usize,
    /// Histogram buckets written per `flows` histogram column in the last interval (likewise).
    last_hist_sizes: Vec<usize>,
    /// The interface's counters of earlier attachments (it was deleted and came back): added
    /// to the current ones in the summary.
    before_restart: [IfaceStats; dir::COUNT],
    /// Likewise each key's counts of earlier attachments.
    qps_before_restart: HashMap<QpKey, QpValue>,
    /// Latency outcomes per key since the last interval's rows, and over the run.
    lat_interval: latency::Pending,
    lat_run: latency::Pending,
}

impl IfaceState {
    /// The interface came back and is observed afresh, its counters from zero: every key's
    /// last values are kept for the summary, the previous values are forgotten (the new
    /// counters are deltas from nothing), the interface's totals so far are kept aside.
    fn restart(&mut self) {
        for (k, v) in self.prev.iter() {
            match self.qps_before_restart.get_mut(k) {
                Some(b) => observer_common::qp::add_counts(b, v),
                None => {
                    self.qps_before_restart.insert(*k, *v);
                }
            }
        }
        for d in 0..dir::COUNT {
            self.before_restart[d].add(&self.prev_iface[d]);
        }
        self.prev = prev_values::PrevStore::default();
        self.last_snapshot_id = None;
        self.pairs = PairIndex::default();
        self.prev_iface = [IfaceStats::default(); dir::COUNT];
        self.prev_macs.clear();
    }
}

/// Figures of the last interval (for the view, logs and tests).
#[derive(Clone, Debug, Default)]
pub struct IntervalStats {
    pub iface: String,
    // `alerts`: emitted for this interface since its previous interval, events included.
    pub start_ns: u64,
    pub end_ns: u64,
    pub tracked_qps: u64,
    pub active_qps: u64,
    pub new_qps: u64,
    pub evictions: u64,
    pub alerts: u64,
}

pub struct Collector {
    cfg: CollectorConfig,
    run: RunInfo,
    ifaces: BTreeMap<String, IfaceState>,
    dedup: Dedup,
    /// Per-key alerts of many keys alike, held for one alert naming them.
    groups: rules::Groups,
    /// Every output, in the order they are written: the tables, then `alerts.jsonl` (so an
    /// alert raised by a table's failure is in the same flush), then stderr lines, then the
    /// outputs the live command adds (the terminal view, metrics, Alertmanager).
    sinks: Vec<Box<dyn Sink>>,
    alert_counts: BTreeMap<&'static str, u64>,
    occurrences: BTreeMap<&'static str, u64>,
    clock_offset_ns: i64,
    failing: HashSet<&'static str>,
    /// Events since the sinks were last flushed (`flush_on_events` off: flushed at 4096 too,
    /// so what waits for the interval stays bounded).
    unflushed_events: usize,
    startup_err: Option<String>,
    /// Scratch delta and its non-zero buckets (hot path, reused every key).
    scratch: Box<deltas::Scratch>,
    /// The NIC view of each interface (its configuration, its interval's start).
    nics: BTreeMap<String, nic_stage::NicState>,
    /// The host's QPs (the RDMA subsystem's inventory), live only.
    host_qps: qp_stage::HostQpState,
    /// The marking comparison across this process's interfaces (`marking_changed`).
    marking: marking::MarkingStage,
    /// Alerts emitted per interface since its last interval log line (events between
    /// intervals included).
    alerts_since_log: BTreeMap<String, u64>,
    /// Sections a command adds to summary.json (the live command's `evidence`).
    summary_extra: serde_json::Map<String, Value>,
    pub last: IntervalStats,
}

/// What one interval of one interface accumulates while its keys are scanned.
struct KeyPass {
    fb: FlowsBuilder,
    cands: Vec<Alert>,
    new_qps: [u64; dir::COUNT],
    active: [u64; dir::COUNT],
    evictions: [u64; dir::COUNT],
    tracked: [u64; dir::COUNT],
    /// Largest CE-marked data count of one key (ce_without_cnp is skipped when 0).
    ce_data_max: u64,
    ce_total: u64,
    /// The rows' marking for the comparison across interfaces (two interfaces or more).
    marks: Option<marking::Feed>,
    /// Latency outcomes of the interval per key, taken by the key's row ...
    lat: latency::Pending,
    /// ... and added to the run's.
    lat_run: latency::Pending,
}

/// The interval's fixed facts, shared by every key.
struct KeyCtx<'a> {
    iface: &'a str,
    /// The observation point's label.
    point: Option<&'a str>,
    end: u64,
    off: i64,
    policy: &'a PolicyConfig,
}

impl KeyPass {
    /// One active key: its flows row, its interval rules, its IP pair's sums.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn row(
        &mut self,
        cx: &KeyCtx<'_>,
        k: &QpKey,
        d: &QpValue,
        nz: &[u16],
        new: bool,
        evicted: bool,
        pairs: &mut PairIndex,
        pair: u32,
    ) {
        let p = cx.policy;
        self.fb.push_nz(k, d, nz, new, evicted, cx.off);
        if !self.lat.is_empty() {
            let l = self.lat.remove(k);
            if let Some(l) = &l {
                self.lat_run.entry(*k).or_default().merge(l);
                rules::latency_high(cx.iface, k, l, &p.thresholds, cx.end, &mut self.cands);
            }
            self.fb.push_latency(l);
        }
        if let Some(m) = self.marks.as_mut() {
            m.push(k, d, nz);
        }
        rules::qp_interval_nz(
            cx.iface,
            k,
            d,
            nz,
            &p.expected,
            p.expected_mtu,
            cx.end,
            &mut self.cands,
        );
        let ce = d.ecn_hist[class::DATA][3] as u64;
        pairs.add(pair, (ce, d.cnp(), d.pkts));
        self.ce_data_max = self.ce_data_max.max(ce);
        self.ce_total += d.ce();
    }
}

/// Keys the source evicted, with their final values: their last deltas in a row flagged
/// `evicted` (written even when the key had no packet since the last interval, as an idle key
/// evicted from a nearly full map), then they are retired.
fn account_evicted(
    st: &mut IfaceState,
    sc: &mut deltas::Scratch,
    cx: &KeyCtx<'_>,
    kp: &mut KeyPass,
) {
    for (k, v) in std::mem::take(&mut st.evicted) {
        let (prev, pair) = match st.prev.remove(&k) {
            Some((p, pair)) => (p, pair),
            None => (QpValue::ZERO, st.pairs.acquire((k.src_ip, k.dst_ip))),
        };
        st.pairs.release(pair);
        sc.delta(&v, &prev);
        let di = (k.dir as usize).min(dir::COUNT - 1);
        kp.evictions[di] += 1;
        st.evictions_total += 1;
        // Always a row: it says the key left the map (an idle key's last row has no packets).
        if sc.d.pkts > 0 {
            kp.active[di] += 1;
        }
        kp.row(
            cx,
            &k,
            &sc.d,
            &sc.nz,
            prev.pkts == 0 && sc.d.pkts > 0,
            true,
            &mut st.pairs,
            pair,
        );
        st.retired.insert(k, v);
    }
}

/// Keys with latency outcomes in the interval and no packet in it (the ACK of their last
/// request came after it): a row of zero counts that carries them.
fn latency_rows(st: &mut IfaceState, sc: &mut deltas::Scratch, cx: &KeyCtx<'_>, kp: &mut KeyPass) {
    if kp.lat.is_empty() {
        return;
    }
    let mut left: Vec<(QpKey, latency::KeyLatency)> = kp.lat.drain().collect();
    left.sort_unstable_by_key(|e| e.0);
    for (k, l) in left {
        let v = st
            .prev
            .get(&k)
            .or_else(|| st.retired.get(&k))
            .copied()
            .unwrap_or(QpValue::ZERO);
        sc.delta(&v, &v);
        kp.fb.push_nz(&k, &sc.d, &sc.nz, false, false, cx.off);
        rules::latency_high(
            cx.iface,
            &k,
            &l,
            &cx.policy.thresholds,
            cx.end,
            &mut kp.cands,
        );
        kp.lat_run.entry(k).or_default().merge(&l);
        kp.fb.push_latency(Some(l));
    }
}

/// Every key of the snapshot against its previous value: rows for the active ones. The hot
/// path of the collector (100,000 keys per interval and more): prefetches a few keys ahead and
/// finds a key's previous value by its position when the source's order did not change. When
/// the source says which entries changed since the snapshot this state was last given
/// ([`crate::sources::Changed`]), only those and the keys gone are looked at: the idle keys
/// cost nothing.
fn account_keys(
    st: &mut IfaceState,
    sc: &mut deltas::Scratch,
    snap: &Snapshot,
    cx: &KeyCtx<'_>,
    kp: &mut KeyPass,
) {
    let hinted = snap.changed.as_ref().filter(|c| {
        (c.base.is_some() && c.base == st.last_snapshot_id)
            // a sparse first snapshot: every key is among its changed ones, and none is known
            || (c.sparse.is_some()
                && c.base.is_none()
                && st.last_snapshot_id.is_none()
                && st.prev.is_empty())
    });
    st.last_snapshot_id = snap.changed.as_ref().map(|c| c.id);
    if let Some(ch) = hinted {
        st.prev.begin_scan(snap.len());
        // gone first: a key gone and back in the same read is a new key
        for k in &ch.gone {
            vanish(st, kp, k);
        }
        // the new values' non-zero histogram blocks, when the source says (else each value is
        // read whole to find them)
        let blocks = (ch.blocks.len() == ch.positions.len()).then_some(&ch.blocks[..]);
        if let Some(sp) = &ch.sparse {
            // the changed entries kept compactly: each written whole into one value in turn
            let mut v = QpValue::ZERO;
            for (n, &pos) in ch.positions.iter().enumerate().take(sp.values.len()) {
                if let Some(&p) = ch.positions.get(n + PREFETCH_FULL)
                    && let Some((pv, pb)) = st.prev.hinted(p as usize)
                {
                    deltas::prefetch_blocks(pv, pb);
                }
                let k = sp.values.expand(n, &mut v);
                account_one(st, sc, cx, kp, pos as usize, &k, &v, blocks.map(|b| b[n]));
            }
            kp.tracked = st.prev.per_dir();
            return;
        }
        for (n, &pos) in ch.positions.iter().enumerate() {
            if let Some(&p) = ch.positions.get(n + PREFETCH_FULL)
                && let Some((_, nv)) = snap.qps.get(p as usize)
            {
                match blocks {
                    Some(b) => deltas::prefetch_blocks(nv, b[n + PREFETCH_FULL]),
                    None => deltas::prefetch(nv, usize::MAX),
                }
                if let Some((pv, pb)) = st.prev.hinted(p as usize) {
                    deltas::prefetch_blocks(pv, pb);
                }
            }
            let pos = pos as usize;
            if let Some((k, v)) = snap.qps.get(pos) {
                account_one(st, sc, cx, kp, pos, k, v, blocks.map(|b| b[n]));
            }
        }
        kp.tracked = st.prev.per_dir();
        return;
    }
    if snap.changed.as_ref().is_some_and(|c| c.sparse.is_some()) {
        // Only the consumer that had the snapshot's base may be given a sparse one (the
        // offloaded outputs check it): without the unchanged keys' values nothing can be
        // compared. Said, never silently taken as every key gone.
        tracing::error!(iface = %snap.iface, "a sparse snapshot not following its base: its keys are not accounted");
        return;
    }
    st.prev.begin_scan(snap.qps.len());
    for (pos, (k, v)) in snap.qps.iter().enumerate() {
        // Prefetch: the `pkts` line of the new value PREFETCH_HEAD keys ahead (the previous
        // packet counts are a dense array); PREFETCH_FULL keys ahead when that key is active
        // (most keys idle: one line of the snapshot each), all lines of the new value and the
        // lines the delta pass reads of the previous one (its counters and non-zero histogram
        // blocks: `prefetch_blocks`).
        if let Some((_, nv)) = snap.qps.get(pos + PREFETCH_HEAD) {
            deltas::prefetch(nv, 1);
        }
        if let Some((_, nv)) = snap.qps.get(pos + PREFETCH_FULL)
            && st
                .prev
                .hinted_pkts(pos + PREFETCH_FULL)
                .is_some_and(|p| p != nv.pkts)
            && let Some((pv, blocks)) = st.prev.hinted(pos + PREFETCH_FULL)
        {
            deltas::prefetch(nv, usize::MAX);
            deltas::prefetch_blocks(pv, blocks);
        }
        let di = (k.dir as usize).min(dir::COUNT - 1);
        kp.tracked[di] += 1;
        account_one(st, sc, cx, kp, pos, k, v, None);
    }
    // Keys that vanished without an eviction report: their last read values stand (a scan of
    // two flat arrays: cheap; also right when a read returned a key twice).
    for k in st.prev.vanished() {
        vanish(st, kp, &k);
    }
}

/// One key of the snapshot, at position `pos`, against its previous value. `blocks`: a
/// superset of `v`'s non-zero histogram blocks, when the source says
/// ([`crate::sources::Changed::blocks`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn account_one(
    st: &mut IfaceState,
    sc: &mut deltas::Scratch,
    cx: &KeyCtx<'_>,
    kp: &mut KeyPass,
    pos: usize,
    k: &QpKey,
    v: &QpValue,
    blocks: Option<u64>,
) {
    let di = (k.dir as usize).min(dir::COUNT - 1);
    match st.prev.find(pos, k) {
        Some(slot) => {
            if st.prev.pkts(slot) == v.pkts {
                return;
            }
            let (pv, pb) = st.prev.value_blocks_mut(slot);
            sc.update(v, blocks, pv, pb);
            st.prev.sync_pkts(slot);
            kp.active[di] += 1;
            let pair = st.prev.tag(slot);
            kp.row(cx, k, &sc.d, &sc.nz, false, false, &mut st.pairs, pair);
        }
        None => {
            let pair = st.pairs.acquire((k.src_ip, k.dst_ip));
            st.prev.insert(pos, *k, *v, pair);
            st.retired.remove(k);
            kp.new_qps[di] += 1;
            if v.pkts > 0 {
                kp.active[di] += 1;
                sc.nz.clear();
                deltas::nonzero_buckets(v, &mut sc.nz);
                kp.row(cx, k, v, &sc.nz, true, false, &mut st.pairs, pair);
            }
        }
    }
}

/// A key no longer in the map without an eviction report: its last read value stands.
fn vanish(st: &mut IfaceState, kp: &mut KeyPass, k: &QpKey) {
    if let Some((v, pair)) = st.prev.remove(k) {
        st.pairs.release(pair);
        kp.evictions[(k.dir as usize).min(dir::COUNT - 1)] += 1;
        st.evictions_total += 1;
        st.retired.insert(*k, v);
    }
}

/// `mac=frames,...` of the source MACs that sent PFC or PAUSE in direction `d`, counting
/// `frames(counters)` per MAC (MACs with none are left out).
fn src_macs(
    mac_delta: &[(MacKey, PfcCounters)],
    d: usize,
    frames: impl Fn(&PfcCounters) -> u64,
) -> Option<String> {
    // most frames first, then by address: the same text whatever order the source's table
    // gives (a hash table's, which differs from run to run)
    let mut senders: Vec<(u64, [u8; 6])> = mac_delta
        .iter()
        .filter(|(k, c)| k.dir as usize == d && frames(c) > 0)
        .map(|(k, c)| (frames(c), k.mac))
        .collect();
    senders.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let macs: Vec<String> = senders
        .iter()
        .map(|&(n, m)| {
            format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}={}",
                m[0], m[1], m[2], m[3], m[4], m[5], n
            )
        })
        .collect();
    (!macs.is_empty()).then(|| macs.join(","))
}

/// The interface's deltas per direction: its `interfaces` rows and the interface rules
/// (including `pfc_without_ecn` over both directions).
fn account_iface(
    st: &mut IfaceState,
    snap: &Snapshot,
    cx: &KeyCtx<'_>,
    kp: &mut KeyPass,
    run: &RunInfo,
    start: u64,
) -> Vec<Vec<tables::Cell>> {
    let (iface, end) = (cx.iface, cx.end);
    let secs = end.saturating_sub(start) as f64 / 1e9;
    let mut mac_delta: Vec<(MacKey, PfcCounters)> = Vec::new();
    for (k, v) in &snap.macs {
        let prev = st.prev_macs.get(k).copied().unwrap_or_default();
        let d = deltas::pfc_delta(v, &prev);
        if d.pfc_frames != 0 || d.pause != 0 {
            mac_delta.push((*k, d));
        }
        st.prev_macs.insert(*k, *v);
    }
    let mut rows = Vec::new();
    let (mut xoff_all, mut roce_all) = (0u64, 0u64);
    for d in 0..dir::COUNT {
        let di = deltas::iface_delta(&snap.iface_stats[d], &st.prev_iface[d]);
        st.prev_iface[d] = snap.iface_stats[d];
        xoff_all += di.pfc.xoff.iter().sum::<u64>();
        roce_all += di.roce;
        let macs = src_macs(&mac_delta, d, |c| c.pfc_frames + c.pause);
        // the 802.3x alert names the senders of PAUSE only, with their PAUSE frames
        let pause_macs = src_macs(&mac_delta, d, |c| c.pause);
        // and the PFC alerts the senders of each priority's XOFF and XON frames, with theirs
        let pfc_macs: [Option<String>; 8] =
            std::array::from_fn(|p| src_macs(&mac_delta, d, |c| c.xoff[p] + c.xon[p]));
        let pf = st.pause.take(d, end);
        let x = IfaceInterval {
            iface,
            dir: d as u8,
            delta: &di,
            secs,
            end_ns: end,
            pause_src_macs: pause_macs.as_deref(),
            pfc_src_macs: &pfc_macs,
            xoff_peak_1s: pf.xoff_peak_1s,
        };
        let rates = rules::iface_interval(
            &x,
            &cx.policy.expected,
            &cx.policy.thresholds,
            &mut kp.cands,
        );
        for (m, r) in st.max_xoff_per_s[d].iter_mut().zip(rates) {
            *m = m.max(r);
        }
        if d == dir::INGRESS as usize || snap.iface_stats[d].frames != 0 {
            let x = IfaceExtra {
                tracked_qps: kp.tracked[d],
                active_qps: kp.active[d],
                new_qps: kp.new_qps[d],
                evictions: kp.evictions[d],
                pfc_src_macs: macs,
                pause: pf,
            };
            rows.push(tables::iface_row(
                &run.host,
                run.source,
                cx.point,
                iface,
                d,
                start,
                end,
                st.link_bps,
                &di,
                &x,
            ));
        }
    }
    let th = &cx.policy.thresholds;
    rules::pfc_without_ecn(
        iface,
        end,
        xoff_all,
        roce_all,
        kp.ce_total,
        th,
        &mut kp.cands,
    );
    // pairs only matter when some key saw CE
    if kp.ce_data_max > 0 {
        rules::ce_without_cnp(iface, end, &st.pairs, th, &mut kp.cands);
    }
    rows
}

/// The file a run records its policy in, in the output directory: `policy-<host>.toml`.
pub fn policy_file_name(host: &str) -> String {
    format!("policy-{host}.toml")
}

/// Writes the policy file (a temporary name, then renamed: a reader never sees half a file).
fn write_policy(dir: &std::path::Path, host: &str, p: &PolicyConfig) -> std::io::Result<()> {
    let path = dir.join(policy_file_name(host));
    let tmp = dir.join(format!("{}.tmp", policy_file_name(host)));
    std::fs::write(&tmp, p.to_toml())?;
    std::fs::rename(&tmp, &path)
}

impl Collector {
    pub fn new(cfg: CollectorConfig) -> Result<Collector, CollectorError> {
        // An output directory that cannot be created now is not fatal: counting starts, an
        // output_write_failed alert is raised and every write retries (as on a full disk).
        let startup_err = std::fs::create_dir_all(&cfg.out_dir).err().map(|err| {
            let e = CollectorError::OutDir { path: cfg.out_dir.display().to_string(), err };
            let e = contract::error::chain(&e);
            tracing::error!(error = %e, "output directory unusable; counting continues, writing will be retried each interval");
            e
        });
        // The policy the run observes with, for roce-analyze's default (`policy-<host>.toml`).
        let startup_err =
            startup_err.or_else(|| {
                write_policy(&cfg.out_dir, &cfg.host, &cfg.policy).err().map(|err| {
                let path = cfg.out_dir.join(policy_file_name(&cfg.host));
                let e = CollectorError::OutDir { path: path.display().to_string(), err };
                let e = contract::error::chain(&e);
                tracing::error!(error = %e, "cannot record the policy in the output directory");
                e
            })
            });
        let (rs, rb) = (cfg.rotate_secs, cfg.rotate_bytes);
        let table = |k| {
            Box::new(TableSink::new(
                k,
                &cfg.out_dir,
                &cfg.host,
                rs,
                rb,
                cfg.journal,
            )) as Box<dyn Sink>
        };
        let mut sinks = vec![
            table(TableKind::Flows),
            table(TableKind::Interfaces),
            table(TableKind::Alerts),
            table(TableKind::Nic),
            table(TableKind::Qps),
            Box::new(JsonlSink::new(cfg.out_dir.join("alerts.jsonl"))),
        ];
        if cfg.log_json {
            sinks.push(Box::new(StderrSink::json()));
        } else if !cfg.terminal || !std::io::stderr().is_terminal() {
            sinks.push(Box::new(StderrSink::default()));
        }
        Ok(Collector {
            run: RunInfo {
                host: cfg.host.clone(),
                source: cfg.source,
            },
            dedup: Dedup::new(cfg.policy.thresholds.hold_down_ns),
            groups: rules::Groups::new(
                cfg.policy.thresholds.aggregate_keys,
                cfg.policy.thresholds.hold_down_ns.max(10_000_000_000),
            ),
            ifaces: BTreeMap::new(),
            sinks,
            alert_counts: BTreeMap::new(),
            occurrences: BTreeMap::new(),
            clock_offset_ns: 0,
            failing: HashSet::new(),
            unflushed_events: 0,
            startup_err,
            scratch: Box::default(),
            nics: BTreeMap::new(),
            host_qps: qp_stage::HostQpState::default(),
            marking: marking::MarkingStage::new(&cfg.policy.expected),
            alerts_since_log: BTreeMap::new(),
            summary_extra: serde_json::Map::new(),
            last: IntervalStats::default(),
            cfg,
        })
    }

    /// Adds an output (the Prometheus and Alertmanager sinks plug in here).
    pub fn add_sink(&mut self, s: Box<dyn Sink>) {
        self.sinks.push(s);
    }

    /// No alert lines on stderr (tests, or when another sink shows them).
    pub fn quiet_stderr(&mut self) {
        self.sinks.retain(|s| s.name() != "stderr");
    }

    /// Raises the start-up output failure, if any, once the first interval time is known.
    fn startup_output_check(&mut self, t: u64) {
        if let Some(e) = self.startup_err.take() {
            self.failing.insert("output directory");
            self.output_failed("output directory", &e, t);
        }
    }

    /// Offset added to per-QP packet times (`first_ns`/`last_ns`) to make them UNIX ns (the
    /// kernel stamps packets with CLOCK_MONOTONIC). 0 (the default) for replay.
    pub fn set_packet_clock_offset(&mut self, offset_ns: i64) {
        self.clock_offset_ns = offset_ns;
    }

    /// Declares when observation of `iface` started (the first interval's start) and its
    /// link speed. Without it the first interval starts at its first packet.
    pub fn begin(&mut self, iface: &str, start_ns: u64, link_speed_bps: Option<u64>) {
        let st = self.ifaces.entry(iface.to_string()).or_default();
        st.start_ns = Some(start_ns);
        st.link_bps = link_speed_bps;
        st.pause.set_link_speed(link_speed_bps);
    }

    /// PFC / PAUSE frames of `iface`, in arrival order: the pause clocks and XOFF windows.
    pub fn on_pauses(&mut self, iface: &str, pauses: &[PauseEvent]) {
        let st = self.ifaces.entry(iface.to_string()).or_default();
        for e in pauses {
            st.pause.frame(e);
        }
    }

    /// Keys the source removed from its map with their last values (idle eviction): accounted
    /// in the next [`Collector::on_snapshot`] of `iface`, so nothing is lost.
    pub fn on_evicted(&mut self, iface: &str, finals: &[(QpKey, QpValue)]) {
        let st = self.ifaces.entry(iface.to_string()).or_default();
        st.evicted.extend_from_slice(finals);
    }

    /// Keys with no packet since `idle_ns` before `now_ns` (candidates for eviction), at most `max`.
    pub fn idle_keys(&self, iface: &str, now_ns: u64, idle_ns: u64, max: usize) -> Vec<QpKey> {
        let Some(st) = self.ifaces.get(iface) else {
            return Vec::new();
        };
        let limit = (now_ns as i64)
            .saturating_sub(idle_ns as i64)
            .saturating_sub(self.clock_offset_ns);
        st.prev.idle(limit).take(max).copied().collect()
    }

    /// Alerts emitted so far, per rule.
    pub fn alert_counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.alert_counts
    }

    fn emit(&mut self, mut a: Alert) {
        a.point = self.cfg.point_label.clone();
        *self.alert_counts.entry(a.rule.name()).or_default() += 1;
        *self.occurrences.entry(a.rule.name()).or_default() += a.count;
        for s in &mut self.sinks {
            s.alert(&a, &self.run);
        }
        *self
            .alerts_since_log
            .entry(a.key.iface.clone())
            .or_default() += 1;
    }

    fn offer(&mut self, a: Alert) {
        let Some(a) = self.groups.admit(a) else {
            return;
        };
        if let Some(a) = self.dedup.offer(a) {
            self.emit(a);
        }
    }

    /// Runs `step` on every sink; a failure raises `output_write_failed` (once per episode)
    /// and is retried at the next step, a success after failures says so.
    fn each_sink(&mut self, t: u64, step: impl Fn(&mut dyn Sink) -> Result<(), OutputError>) {
        for i in 0..self.sinks.len() {
            let res = step(self.sinks[i].as_mut());
            let name = self.sinks[i].name();
            match res {
                Err(e) => self.output_failed(name, &contract::error::chain(&e), t),
                Ok(()) => self.output_ok(name),
            }
        }
    }

    /// Kernel (or replay) events for `iface`: first occurrences, alerted at once.
    pub fn on_events(&mut self, iface: &str, events: &[Event]) {
        let p = self.cfg.policy.expected;
        for e in events {
            if let Some(a) = rules::from_event(iface, e, &p) {
                self.offer(a);
            }
        }
        self.unflushed_events += events.len();
        if !events.is_empty() && (self.cfg.flush_on_events || self.unflushed_events >= 4096) {
            self.unflushed_events = 0;
            let t = events.iter().map(|e| e.ts_ns).max().unwrap_or(0);
            self.each_sink(t, |s| s.flush(t));
        }
    }

    fn output_failed(&mut self, what: &'static str, err: &str, t: u64) {
        if self.failing.insert(what) {
            tracing::error!(output = what, error = %err, "cannot write output; counting continues, writing will be retried each interval");
        }
        let a = Alert::candidate(
            Rule::OutputWriteFailed,
            AlertKey {
                iface: "-".into(),
                other: Some(what.to_string()),
                ..Default::default()
            },
            t,
            err.to_string(),
            "a writable output directory".into(),
            1,
            "interval",
        );
        self.offer(a);
    }

    fn output_ok(&mut self, what: &'static str) {
        if self.failing.remove(what) {
            tracing::info!(
                output = what,
                "output working again; what was pending is written"
            );
        }
    }

    /// One interval's cumulative state of one interface: deltas against the previous snapshot
    /// of that interface (keys, then the interface), rows and alert candidates, the hold-down,
    /// then every sink. Long by design: it reads as the list of stages, each a function above.
    pub fn on_snapshot(&mut self, snap: &Snapshot) -> Result<(), CollectorError> {
        self.startup_output_check(snap.time_ns);
        let off = self.clock_offset_ns;
        // With one interface a key's two directions are different keys: nothing to join.
        let multi = self.ifaces.len() + usize::from(!self.ifaces.contains_key(&snap.iface)) >= 2;
        let st = self.ifaces.entry(snap.iface.clone()).or_default();
        if snap.link_speed_bps.is_some() {
            st.link_bps = snap.link_speed_bps;
            st.pause.set_link_speed(snap.link_speed_bps);
        }
        let end = snap.time_ns;
        let start = interval_start(st, snap, off).min(end);
        let cap = snap.len().min(st.last_active.saturating_mul(2).max(1024)) + st.evicted.len();
        let (host, source) = (&self.run.host, self.run.source);
        let mut kp = KeyPass {
            fb: FlowsBuilder::with_capacity(host, source, &snap.iface, start, end, cap)
                .with_hist_sizes(&st.last_hist_sizes)
                .with_point(self.cfg.point_label.as_deref()),
            cands: Vec::new(),
            new_qps: [0; dir::COUNT],
            active: [0; dir::COUNT],
            evictions: [0; dir::COUNT],
            tracked: [0; dir::COUNT],
            ce_data_max: 0,
            ce_total: 0,
            marks: multi.then(|| self.marking.take_feed()),
            lat: std::mem::take(&mut st.lat_interval),
            lat_run: std::mem::take(&mut st.lat_run),
        };
        let cx = KeyCtx {
            iface: &snap.iface,
            point: self.cfg.point_label.as_deref(),
            end,
            off,
            policy: &self.cfg.policy,
        };
        st.pairs.begin_interval();
        let sc = &mut *self.scratch;
        account_evicted(st, sc, &cx, &mut kp);
        account_keys(st, sc, snap, &cx, &mut kp);
        latency_rows(st, sc, &cx, &mut kp);
        // the interval's map is empty now: kept, with its capacity, for the next one
        st.lat_interval = std::mem::take(&mut kp.lat);
        st.lat_run = std::mem::take(&mut kp.lat_run);
        if let Some(f) = kp.marks.take() {
            self.marking.add(&snap.iface, f);
        }
        let iface_rows = account_iface(st, snap, &cx, &mut kp, &self.run, start);
        st.pairs.end_interval();
        st.prev_time = Some(end);
        st.last_active = kp.active.iter().sum::<u64>() as usize;
        st.last_hist_sizes = kp.fb.hist_sizes();
        self.last = IntervalStats {
            iface: snap.iface.clone(),
            start_ns: start,
            end_ns: end,
            tracked_qps: kp.tracked.iter().sum(),
            active_qps: kp.active.iter().sum(),
            new_qps: kp.new_qps.iter().sum(),
            evictions: kp.evictions.iter().sum(),
            alerts: 0,
        };
        let flows = kp.fb.finish(&tables::flows_schema())?;
        let interfaces =
            tables::rows_batch(&contract::schema::interfaces().arrow_schema(), &iface_rows)?;
        let rows = IntervalRows {
            start_ns: start,
            end_ns: end,
            flows: &flows,
            interfaces: &interfaces,
        };
        self.each_sink(end, |s| s.interval(&rows));
        let per_dir = kp.tracked;
        for a in kp.cands {
            self.offer(a);
        }
        // many keys breaking a rule alike: one alert naming those held since the last interval
        let tracked = |_: &str, d: Option<u8>| d.and_then(|d| per_dir.get(d as usize).copied());
        for a in self.groups.flush(Some(&snap.iface), end, tracked) {
            if let Some(a) = self.dedup.offer(a) {
                self.emit(a);
            }
        }
        for a in self.dedup.tick(end, false) {
            self.emit(a);
        }
        self.unflushed_events = 0;
        self.each_sink(end, |s| s.end_interval(end));
        self.last.alerts = self.alerts_since_log.remove(&snap.iface).unwrap_or(0);
        if !self.cfg.terminal {
            let s = &self.last;
            tracing::info!(
                iface = %s.iface,
                interval_s = end.saturating_sub(start) as f64 / 1e9,
                tracked_qps = s.tracked_qps,
                active_qps = s.active_qps,
                new_qps = s.new_qps,
                evictions = s.evictions,
                alerts = s.alerts,
                "interval"
            );
        }
        Ok(())
    }

    /// Output statistics per table.
    pub fn output_stats(&self) -> Value {
        let mut m = serde_json::Map::new();
        for s in &self.sinks {
            match (s.name(), s.stats()) {
                ("alerts.jsonl", Some(v)) => {
                    m.insert("alerts_jsonl_lines_lost".into(), v["lines_lost"].clone());
                }
                (name, Some(v)) => {
                    m.insert(name.into(), v);
                }
                _ => {}
            }
        }
        Value::Object(m)
    }

    /// Final-named files written so far (the most recent 64 per table).
    pub fn written_files(&self) -> Vec<PathBuf> {
        self.sinks.iter().flat_map(|s| s.written_files()).collect()
    }

    /// One interface's last snapshot without its QPs (the interface and MAC counters, with the
    /// counts from before a restart added).
    fn last_snapshot_head(name: &str, st: &IfaceState) -> Snapshot {
        let mut macs: Vec<(MacKey, PfcCounters)> =
            st.prev_macs.iter().map(|(k, v)| (*k, *v)).collect();
        macs.sort_by_key(|a| a.0);
        let mut iface_stats = st.prev_iface;
        for (s, b) in iface_stats.iter_mut().zip(&st.before_restart) {
            s.add(b);
        }
        Snapshot {
            iface: name.to_string(),
            time_ns: st.prev_time.unwrap_or(0),
            link_speed_bps: st.link_bps,
            qps: Vec::new(),
            iface_stats,
            macs,
            changed: None,
        }
    }

    /// An interface's QPs as copies: the last values read, keys evicted earlier, the counts
    /// from before a restart added.
    fn merged_qps(st: &IfaceState) -> Vec<(QpKey, QpValue)> {
        let mut qps: Vec<(QpKey, QpValue)> = st.prev.iter().map(|(k, v)| (*k, *v)).collect();
        qps.extend(
            st.retired
                .iter()
                .filter(|(k, _)| !st.prev.contains(k))
                .map(|(k, v)| (*k, *v)),
        );
        if !st.qps_before_restart.is_empty() {
            let idx: HashMap<QpKey, usize> =
                qps.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
            for (k, b) in &st.qps_before_restart {
                match idx.get(k) {
                    Some(&i) => observer_common::qp::add_counts(&mut qps[i].1, b),
                    None => qps.push((*k, *b)),
                }
            }
        }
        qps
    }

    /// The summary's per-interface heads and, for the interfaces restarted during the run
    /// (whose QPs are merged copies), their QPs.
    fn summary_snapshots(&self) -> (Vec<Snapshot>, Vec<Snapshot>) {
        let heads: Vec<Snapshot> = self
            .ifaces
            .iter()
            .map(|(name, st)| Self::last_snapshot_head(name, st))
            .collect();
        let restarted = self
            .ifaces
            .iter()
            .filter(|(_, st)| !st.qps_before_restart.is_empty())
            .map(|(name, st)| {
                let mut s = Self::last_snapshot_head(name, st);
                s.qps = Self::merged_qps(st);
                s
            })
            .collect();
        (heads, restarted)
    }

    /// Every QP of the summary, by reference to the collector's last values (copies only for
    /// restarted interfaces, from `restarted`).
    fn summary_qps<'a>(&'a self, restarted: &'a [Snapshot]) -> QpList<'a> {
        let mut groups = Vec::new();
        for (name, st) in &self.ifaces {
            if let Some(r) = restarted.iter().find(|r| r.iface == *name) {
                groups.push(r.qps.iter().map(|(k, v)| (name.as_str(), k, v)).collect());
                continue;
            }
            let mut g: Vec<(&str, &QpKey, &QpValue)> =
                st.prev.iter().map(|(k, v)| (name.as_str(), k, v)).collect();
            g.extend(
                st.retired
                    .iter()
                    .filter(|(k, _)| !st.prev.contains(k))
                    .map(|(k, v)| (name.as_str(), k, v)),
            );
            groups.push(g);
        }
        QpList::from_groups(groups)
    }

    /// The observation points of the run: (host, iface, dir, label) of every interface's
    /// ingress, and of its egress when it saw frames, with the name `roce-analyze path` gives
    /// them (`host/iface/dir[label]`).
    fn points_json(&self) -> Value {
        let mut out = Vec::new();
        for (name, st) in &self.ifaces {
            for d in 0..dir::COUNT {
                let frames = st.prev_iface[d].frames + st.before_restart[d].frames;
                if d != dir::INGRESS as usize && frames == 0 {
                    continue;
                }
                let base = format!("{}/{name}/{}", self.cfg.host, dir::NAMES[d]);
                let full = match &self.cfg.point_label {
                    Some(l) => format!("{base}[{l}]"),
                    None => base,
                };
                out.push(json!({
                    "host": self.cfg.host,
                    "iface": name,
                    "dir": dir::NAMES[d],
                    "point": self.cfg.point_label,
                    "name": full,
                }));
            }
        }
        Value::Array(out)
    }

    /// Adds section `key` to summary.json (written by [`Collector::finish`]).
    pub fn add_to_summary(&mut self, key: &str, v: Value) {
        self.summary_extra.insert(key.to_string(), v);
    }

    /// Flushes and closes every output, writes `summary.json` (`summary_json` of the last
    /// snapshots plus `"alerts": {rule: count}`) and returns it.
    pub fn finish(self) -> Result<Value, CollectorError> {
        self.finish_inner(true)
    }

    /// [`Collector::finish`], returning the summary without its QPs (no "qps"): for a caller
    /// that has the QPs itself (replay), without building a JSON tree of every key.
    /// `summary.json` is written in full either way, its QPs streamed.
    pub fn finish_without_qps(self) -> Result<Value, CollectorError> {
        self.finish_inner(false)
    }

    /// [`Collector::finish_without_qps`] that keeps the summary when an output could not be
    /// finished: the run's totals and alerts are in memory whatever the disk did, and the
    /// caller prints them beside the error.
    pub fn finish_reporting(self) -> (Value, Option<CollectorError>) {
        self.finish_both(false)
    }

    fn finish_inner(self, with_qps: bool) -> Result<Value, CollectorError> {
        match self.finish_both(with_qps) {
            (_, Some(e)) => Err(e),
            (v, None) => Ok(v),
        }
    }

    fn finish_both(mut self, with_qps: bool) -> (Value, Option<CollectorError>) {
        let t = self
            .ifaces
            .values()
            .filter_map(|s| s.prev_time)
            .max()
            .unwrap_or(0);
        for a in self.groups.flush(None, t, |_, _| None) {
            if let Some(a) = self.dedup.offer(a) {
                self.emit(a);
            }
        }
        for a in self.dedup.tick(t, true) {
            self.emit(a);
        }
        let mut first_err: Option<CollectorError> = None;
        for s in &mut self.sinks {
            if let Err(e) = s.finish(t) {
                tracing::error!(output = s.name(), error = %contract::error::chain(&e), "could not write the last output");
                first_err.get_or_insert(e.into());
            }
        }
        let (heads, restarted) = self.summary_snapshots();
        let mut head = self.summary_head(&heads);
        head.extend(std::mem::take(&mut self.summary_extra));
        let lat_owned = self.latency_qps();
        let lat: Vec<latency::LatencyQp<'_>> = lat_owned
            .iter()
            .map(|(iface, key, lat)| latency::LatencyQp { iface, key, lat })
            .collect();
        let qps = self.summary_qps(&restarted);
        let path = self.cfg.out_dir.join("summary.json");
        let tmp = self.cfg.out_dir.join("summary.json.tmp");
        let write = || -> std::io::Result<()> {
            let mut w = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(&tmp)?);
            crate::sinks::summary_json::SummaryDoc {
                head: &head,
                qps: &qps,
                latency: &lat,
            }
            .write(&mut w)?;
            w.into_inner().map_err(|e| e.into_error())?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(err) = write() {
            let _ = std::fs::remove_file(&tmp);
            tracing::error!(path = %path.display(), error = %err, "could not write summary.json");
            first_err.get_or_insert(CollectorError::Output(OutputError::Io {
                path: path.display().to_string(),
                err,
            }));
        }
        if with_qps {
            match serde_json::to_value(&qps) {
                Ok(v) => {
                    head.insert("qps".into(), v);
                }
                Err(e) => {
                    first_err.get_or_insert(e.into());
                }
            }
            if !lat.is_empty() {
                match serde_json::to_value(&lat) {
                    Ok(v) => {
                        head.insert("latency".into(), v);
                    }
                    Err(e) => {
                        first_err.get_or_insert(e.into());
                    }
                }
            }
        }
        (Value::Object(head), first_err)
    }

    /// summary.json's `latency`: every QP key with latency outcomes over the run (with those
    /// of an interval not yet written), sorted by interface and key (docs/latency.md).
    fn latency_qps(&mut self) -> Vec<(String, QpKey, latency::KeyLatency)> {
        let mut out = Vec::new();
        for (name, st) in &mut self.ifaces {
            for (k, l) in st.lat_interval.drain() {
                st.lat_run.entry(k).or_default().merge(&l);
            }
            let mut keys: Vec<(QpKey, latency::KeyLatency)> = st.lat_run.drain().collect();
            keys.sort_unstable_by_key(|e| e.0);
            out.extend(keys.into_iter().map(|(k, l)| (name.clone(), k, l)));
        }
        out
    }

    /// The run's totals but the QPs: the interfaces of `heads` (`summary_json` form), alerts
    /// per rule, occurrences, PFC storm figures, output statistics.
    fn summary_head(&self, heads: &[Snapshot]) -> serde_json::Map<String, Value> {
        let mut m = crate::sinks::summary_json::interfaces_json(heads);
        let counts = |m: &BTreeMap<&'static str, u64>| -> serde_json::Map<String, Value> {
            m.iter().map(|(k, n)| (k.to_string(), json!(n))).collect()
        };
        let mut storms = serde_json::Map::new();
        for (name, st) in &self.ifaces {
            let per_dir: BTreeMap<_, _> = st
                .max_xoff_per_s
                .iter()
                .enumerate()
                .map(|(d, a)| (dir::NAMES[d], a.to_vec()))
                .collect();
            storms.insert(
                name.clone(),
                json!({"max_xoff_per_s": per_dir, "evictions": st.evictions_total}),
            );
        }
        m.insert("alerts".into(), Value::Object(counts(&self.alert_counts)));
        m.insert(
            "alert_occurrences".into(),
            Value::Object(counts(&self.occurrences)),
        );
        m.insert("pfc_storm_figures".into(), Value::Object(storms));
        m.insert("host_qps".into(), self.host_qps.json());
        m.insert("output".into(), self.output_stats());
        m.insert("host".into(), json!(self.cfg.host));
        m.insert("source".into(), json!(self.cfg.source));
        m.insert("point".into(), json!(self.cfg.point_label));
        m.insert("points".into(), self.points_json());
        m
    }
}

/// The pipeline as every source's consumer.
impl crate::sources::Consumer for Collector {
    fn begin(&mut self, iface: &str, start_ns: u64, link_speed_bps: Option<u64>) {
        Collector::begin(self, iface, start_ns, link_speed_bps);
    }
    fn quiet(&mut self, iface: &str, t_ns: u64) {
        if let Some(st) = self.ifaces.get_mut(iface) {
            st.prev_time = Some(st.prev_time.map_or(t_ns, |p| p.max(t_ns)));
        }
    }
    fn events(
        &mut self,
        iface: &str,
        events: &[Event],
    ) -> Result<(), crate::sources::ConsumerError> {
        self.on_events(iface, events);
        Ok(())
    }
    fn pauses(
        &mut self,
        iface: &str,
        pauses: &[PauseEvent],
    ) -> Result<(), crate::sources::ConsumerError> {
        self.on_pauses(iface, pauses);
        Ok(())
    }
    fn latency(
        &mut self,
        iface: &str,
        records: &[observer_common::latency::Record],
    ) -> Result<(), crate::sources::ConsumerError> {
        let st = self.ifaces.entry(iface.to_string()).or_default();
        latency::gather(&mut st.lat_interval, &mut st.lat_run, records);
        Ok(())
    }
    fn snapshot(&mut self, snap: &Snapshot) -> Result<(), crate::sources::ConsumerError> {
        Ok(self.on_snapshot(snap)?)
    }
    fn evicted(&mut self, iface: &str, finals: &[(QpKey, QpValue)]) {
        self.on_evicted(iface, finals);
    }
    fn idle_keys(&self, iface: &str, now_ns: u64, idle_ns: u64, max: usize) -> Vec<QpKey> {
        Collector::idle_keys(self, iface, now_ns, idle_ns, max)
    }
    fn iface_gone(&mut self, iface: &str, t_ns: u64) {
        let a = Alert::candidate(
            Rule::IfaceGone,
            AlertKey {
                iface: iface.into(),
                ..Default::default()
            },
            t_ns,
            "the interface was deleted".into(),
            "the observed interface present (it is attached again when it comes back)".into(),
            1,
            "interval",
        );
        self.offer(a);
        self.each_sink(t_ns, |s| s.flush(t_ns));
    }
    fn iface_restarted(&mut self, iface: &str, _t_ns: u64) {
        if let Some(st) = self.ifaces.get_mut(iface) {
            st.restart();
        }
    }
    fn nic(
        &mut self,
        iface: &str,
        sample: &nic::NicSample,
        counters: Option<&nic::Normalized>,
    ) -> Result<(), crate::sources::ConsumerError> {
        Ok(self.on_nic(iface, sample, counters)?)
    }
    fn qps(
        &mut self,
        start_ns: u64,
        inv: &qps::Inventory,
        progress: &[qps::Progress],
        fates: &[qps::Fate],
    ) -> Result<(), crate::sources::ConsumerError> {
        Ok(self.on_qps(start_ns, inv, progress, fates)?)
    }
    /// Compares the interfaces' marking (every snapshot of the interval is in).
    fn interval_done(&mut self, t_ns: u64) {
        let changed = self.marking.evaluate(t_ns);
        if !changed.is_empty() {
            for a in changed {
                self.offer(a);
            }
            self.each_sink(t_ns, |s| s.flush(t_ns));
        }
    }
}

/// The interval's start: the previous snapshot's time, else the declared start of observation,
/// else the first packet of the snapshot (replay without `begin`).
fn interval_start(st: &IfaceState, snap: &Snapshot, off: i64) -> u64 {
    st.prev_time.or(st.start_ns).unwrap_or_else(|| {
        let sparse = snap.changed.as_ref().and_then(|c| c.sparse.as_ref());
        let sparse_first = sparse
            .into_iter()
            .flat_map(|sp| (0..sp.values.len()).map(|n| sp.values.first_ns(n)));
        snap.qps
            .iter()
            .map(|(_, v)| v.first_ns)
            .chain(sparse_first)
            .filter(|&t| t != 0)
            .map(|t| (t as i64).saturating_add(off).max(0) as u64)
            .min()
            .unwrap_or(snap.time_ns)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[10, 0, 0, last]);
        a
    }

    fn key(src: u8, dst: u8, qp: u32) -> QpKey {
        QpKey {
            src_ip: ip(src),
            dst_ip: ip(dst),
            dest_qp: qp,
            ..Default::default()
        }
    }

    /// Adds `pkts` data packets, `ce` of them CE-marked, and `cnp` CNPs to a cumulative value.
    fn add(v: &mut QpValue, pkts: u32, ce: u32, cnp: u32) {
        v.pkts += (pkts + cnp) as u64;
        v.ecn_hist[class::DATA][3] += ce;
        v.ecn_hist[class::DATA][2] += pkts - ce;
        v.ecn_hist[class::CNP][2] += cnp;
        v.dscp_hist[class::DATA][26] += pkts;
        v.dscp_hist[class::CNP][48] += cnp;
        v.pcp_hist[class::DATA][3] += pkts;
        v.pcp_hist[class::CNP][3] += cnp;
    }

    /// A collector with the nvidia profile writing under a fresh temporary directory named
    /// after `name` (returned, to be removed), `source` as its source, `tune` applied to its
    /// configuration; stderr alerts off.
    fn test_collector(
        name: &str,
        source: &'static str,
        tune: impl FnOnce(&mut CollectorConfig),
    ) -> (Collector, std::path::PathBuf) {
        let out = std::env::temp_dir().join(format!("ro-col-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let policy = PolicyConfig::profile("nvidia").unwrap();
        let mut cfg = CollectorConfig::new(out.clone(), "h", source, policy);
        tune(&mut cfg);
        let mut col = Collector::new(cfg).unwrap();
        col.quiet_stderr();
        (col, out)
    }

    /// ce_without_cnp sums CE over all keys of an IP pair, evicted keys included, and looks
    /// at the reverse pair's CNPs and packets of the same interval; pair ids survive keys
    /// coming and going.
    #[test]
    fn ce_without_cnp_per_ip_pair_over_intervals() {
        // every interval's alert is emitted
        let (mut col, out) =
            test_collector("pairs", "replay", |c| c.policy.thresholds.hold_down_ns = 1);
        let t0 = 1_795_239_299_000_000_000u64;
        col.begin("e0", t0, None);
        // pair 1->2: two keys with 6 CE each (12 >= 10), reverse 2->1 sends packets, no CNP
        // pair 3->4: 12 CE on one key, reverse 4->3 sends CNPs: no alert
        // pair 5->6: 12 CE, no reverse key: no alert
        // pair 7->8: 5 CE now + 5 CE on an evicted key of the same pair
        let keys = [
            key(1, 2, 1),
            key(1, 2, 2),
            key(2, 1, 3),
            key(3, 4, 4),
            key(4, 3, 5),
            key(5, 6, 6),
            key(7, 8, 7),
            key(8, 7, 8),
        ];
        let mut vals = [QpValue::ZERO; 8];
        let mut snap = Snapshot {
            iface: "e0".into(),
            time_ns: t0,
            link_speed_bps: None,
            qps: Vec::new(),
            iface_stats: [IfaceStats::default(); dir::COUNT],
            macs: Vec::new(),
            changed: None,
        };
        let mut ce_alerts = Vec::new();
        let mut seen_lines = 0;
        for round in 1..=3u64 {
            add(&mut vals[0], 100, 6, 0);
            add(&mut vals[1], 100, 6, 0);
            add(&mut vals[2], 50, 0, 0);
            add(&mut vals[3], 100, 12, 0);
            add(&mut vals[4], 10, 0, 3);
            add(&mut vals[5], 100, 12, 0);
            add(&mut vals[6], 100, 5, 0);
            add(&mut vals[7], 20, 0, 0);
            let mut gone = key(7, 8, 70 + round as u32);
            let mut last = QpValue::ZERO;
            add(&mut last, 9, 5, 0);
            gone.dir = 0;
            col.on_evicted("e0", &[(gone, last)]);
            // the key order changes between intervals, and round 2 drops 1->2's second key
            let mut qps: Vec<(QpKey, QpValue)> =
                keys.iter().copied().zip(vals.iter().copied()).collect();
            qps.rotate_left(round as usize);
            if round == 2 {
                qps.retain(|(k, _)| *k != keys[1]);
            }
            snap.qps = qps;
            snap.time_ns = t0 + round * 1_000_000_000;
            col.on_snapshot(&snap).unwrap();
            let text = std::fs::read_to_string(out.join("alerts.jsonl")).unwrap_or_default();
            let lines: Vec<Value> = text
                .lines()
                .skip(seen_lines)
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            seen_lines += lines.len();
            let mut got: Vec<(String, String, u64)> = lines
                .iter()
                .filter(|a| a["rule"] == rule::CE_WITHOUT_CNP)
                .map(|a| {
                    let s = |f: &str| a[f].as_str().unwrap().to_string();
                    (s("src"), s("dst"), a["count"].as_u64().unwrap())
                })
                .collect();
            got.sort();
            ce_alerts.push(got);
        }
        let a = |s: &str, d: &str, n| (s.to_string(), d.to_string(), n);
        assert_eq!(
            ce_alerts,
            vec![
                vec![a("10.0.0.1", "10.0.0.2", 12), a("10.0.0.7", "10.0.0.8", 10)],
                // key 1->2 #2 vanished (its last values stand: no delta), 6 CE left
                vec![a("10.0.0.7", "10.0.0.8", 10)],
                // it is back as a new key: its whole cumulative value is the delta (18 CE)
                vec![a("10.0.0.1", "10.0.0.2", 24), a("10.0.0.7", "10.0.0.8", 10)],
            ]
        );
        let _ = std::fs::remove_dir_all(&out);
    }

    /// With `flush_on_events` off (replay), alerts from events reach alerts.jsonl at the
    /// interval's end, or once 4096 events are waiting; with it on (live), after every batch.
    #[test]
    fn events_are_flushed_per_batch_or_per_interval() {
        use observer_common::maps::Event;
        let t0 = 1_795_239_299_000_000_000u64;
        let gap = |i: u32| Event {
            ts_ns: t0 + i as u64,
            key: QpKey {
                dest_qp: i,
                ..Default::default()
            },
            kind: observer_common::qp::ev::PSN_GAP,
            psn: 10,
            detail: 1,
            opcode: 0x0a,
            dscp: 26,
            ecn: 2,
            pcp: 3,
        };
        let lines = |out: &std::path::Path| {
            std::fs::read_to_string(out.join("alerts.jsonl"))
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        for per_batch in [true, false] {
            let (mut col, out) = test_collector(&format!("flush-{per_batch}"), "replay", |c| {
                c.flush_on_events = per_batch;
                c.journal = false;
                // one line per key: what is flushed when, not how keys are grouped
                c.policy.thresholds.aggregate_keys = 0;
            });
            col.begin("e0", t0, None);
            col.on_events("e0", &[gap(1)]);
            col.on_events("e0", &[gap(2), gap(3)]);
            assert_eq!(lines(&out), if per_batch { 3 } else { 0 }, "{per_batch}");
            let snap = Snapshot {
                iface: "e0".into(),
                time_ns: t0 + 1_000_000_000,
                link_speed_bps: None,
                qps: Vec::new(),
                iface_stats: [IfaceStats::default(); dir::COUNT],
                macs: Vec::new(),
                changed: None,
            };
            col.on_snapshot(&snap).unwrap();
            assert_eq!(lines(&out), 3, "the interval's end writes them");
            // a burst: 4000 events wait, the 4096th writes them all
            let burst: Vec<Event> = (100..5100).map(gap).collect();
            for chunk in burst[..4000].chunks(1000) {
                col.on_events("e0", chunk);
            }
            assert_eq!(lines(&out), if per_batch { 4003 } else { 3 }, "{per_batch}");
            col.on_events("e0", &burst[4000..]);
            assert_eq!(lines(&out), 5003, "{per_batch}");
            let _ = std::fs::remove_dir_all(&out);
        }
    }

    /// The eviction candidates are the keys whose last packet is older than the idle time, from
    /// the last packet times kept with the previous values (updated as keys move), at most `max`.
    #[test]
    fn idle_keys_follow_the_last_packet_times() {
        let (mut col, out) = test_collector("idle", "live", |c| c.journal = false);
        let s = 1_000_000_000u64;
        let t0 = 1_795_239_299_000_000_000u64;
        col.begin("e0", t0, None);
        let mut qps: Vec<(QpKey, QpValue)> = (0..3u32)
            .map(|i| {
                let mut v = QpValue::ZERO;
                add(&mut v, 10, 0, 0);
                v.first_ns = t0;
                v.last_ns = t0 + (1 + 4 * i as u64) * s; // 1 s, 5 s, 9 s
                (key(1, 2, i), v)
            })
            .collect();
        let mut snap = Snapshot {
            iface: "e0".into(),
            time_ns: t0 + 10 * s,
            link_speed_bps: None,
            qps: qps.clone(),
            iface_stats: [IfaceStats::default(); dir::COUNT],
            macs: Vec::new(),
            changed: None,
        };
        col.on_snapshot(&snap).unwrap();
        let idle = |col: &Collector, max| {
            let mut v: Vec<u32> = col
                .idle_keys("e0", t0 + 10 * s, 3 * s, max)
                .iter()
                .map(|k| k.dest_qp)
                .collect();
            v.sort();
            v
        };
        assert_eq!(idle(&col, 10), vec![0, 1]);
        assert_eq!(idle(&col, 1).len(), 1);
        // key 0 sends again: no longer idle
        add(&mut qps[0].1, 5, 0, 0);
        qps[0].1.last_ns = t0 + 10 * s;
        snap.qps = qps;
        snap.time_ns = t0 + 11 * s;
        col.on_snapshot(&snap).unwrap();
        assert_eq!(idle(&col, 10), vec![1]);
        assert!(col.idle_keys("other", t0, 0, 10).is_empty());
        let _ = std::fs::remove_dir_all(&out);
    }

    use crate::sinks::parquet_files::OutputError;
    use crate::sinks::{IntervalRows, Sink};
    use arrow::array::{ArrayRef, RecordBatch};

    /// Records every interval's flows and interfaces batches.
    struct Rows(std::sync::Arc<std::sync::Mutex<Vec<(RecordBatch, RecordBatch)>>>);
    impl Sink for Rows {
        fn name(&self) -> &'static str {
            "rows"
        }
        fn interval(&mut self, r: &IntervalRows<'_>) -> Result<(), OutputError> {
            self.0
                .lock()
                .unwrap()
                .push((r.flows.clone(), r.interfaces.clone()));
            Ok(())
        }
    }

    /// A source that says which entries changed (the live kernel source's incremental read)
    /// gives the same rows as one that does not: the collector looks at the changed entries
    /// and the gone keys only, and falls back to every key when the base is not the snapshot
    /// it saw last. Keys move, come, go (with and without an eviction report) and come back.
    /// With the changed entries' non-zero histogram blocks said (exact, or a superset), the
    /// same rows again.
    #[test]
    fn changed_entries_give_the_rows_of_a_full_comparison() {
        use crate::sources::Changed;
        // hinted: the source says what changed; with_blocks: and the entries' blocks
        let run = |hinted: bool, with_blocks: bool| {
            let (mut col, out) =
                test_collector(&format!("changed-{hinted}-{with_blocks}"), "live", |c| {
                    c.journal = false
                });
            let rows = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            col.add_sink(Box::new(Rows(rows.clone())));
            let t0 = 1_795_239_299_000_000_000u64;
            col.begin("e0", t0, None);
            let mut next = crate::testutil::xorshift(0x9e37_79b9_7f4a_7c15);
            let mut rnd = |n: u64| next() % n;
            // the source's table: (key, value), in its order
            let mut table: Vec<(QpKey, QpValue)> = Vec::new();
            let mut next_qp = 0u32;
            let mut last_id = None;
            for round in 0..12u64 {
                let mut positions = Vec::new();
                let mut gone = Vec::new();
                // a few keys leave (every third with an eviction report, as the live loop's
                // idle eviction), the last entry taking the place (the kernel reader's order)
                for _ in 0..rnd(4) {
                    if table.is_empty() {
                        break;
                    }
                    let p = rnd(table.len() as u64) as usize;
                    let (k, v) = table.swap_remove(p);
                    gone.push(k);
                    if rnd(3) == 0 {
                        col.on_evicted("e0", &[(k, v)]);
                    }
                }
                // new keys, among them sometimes one that left earlier
                for _ in 0..3 + rnd(20) {
                    next_qp += 1;
                    let q = if rnd(5) == 0 {
                        1 + rnd(next_qp as u64) as u32
                    } else {
                        next_qp
                    };
                    let k = key((q % 7) as u8, (q % 5) as u8 + 10, q);
                    if table.iter().any(|(t, _)| *t == k) {
                        continue;
                    }
                    let mut v = QpValue::ZERO;
                    add(&mut v, 1 + rnd(50) as u32, rnd(2) as u32, 0);
                    v.first_ns = t0 + round * 1_000_000_000;
                    v.last_ns = v.first_ns;
                    table.push((k, v));
                    positions.push(table.len() as u32 - 1);
                }
                // a third of the keys move
                for (p, (_, v)) in table.iter_mut().enumerate() {
                    if rnd(3) == 0 && !positions.contains(&(p as u32)) {
                        let n = 1 + rnd(100) as u32;
                        add(v, n, (rnd(3) as u32).min(n), rnd(2) as u32);
                        v.last_ns = t0 + round * 1_000_000_000 + 5;
                        positions.push(p as u32);
                    }
                }
                // round 6: the base is not the last snapshot (a snapshot the collector did
                // not see): it must compare every key
                let id = 100 + round;
                let base = if round == 6 { Some(7) } else { last_id };
                last_id = Some(id);
                let blocks = if with_blocks {
                    positions
                        .iter()
                        .map(|&p| {
                            let b = deltas::nonzero_blocks(&table[p as usize].1);
                            // odd rounds: a superset (blocks that are zero said non-zero;
                            // not from `rnd`, which would change the other runs' traffic)
                            let extra = (p as u64 + round).wrapping_mul(0x2545_f491_4f6c_dd1d);
                            if round % 2 == 1 { b | extra } else { b }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let snap = Snapshot {
                    iface: "e0".into(),
                    time_ns: t0 + (round + 1) * 1_000_000_000,
                    link_speed_bps: None,
                    qps: table.clone(),
                    iface_stats: [IfaceStats::default(); dir::COUNT],
                    macs: Vec::new(),
                    changed: hinted.then(|| Changed {
                        base,
                        id,
                        positions: positions.clone(),
                        gone: gone.clone(),
                        blocks,
                        sparse: None,
                    }),
                };
                col.on_snapshot(&snap).unwrap();
                assert_eq!(
                    col.last.tracked_qps,
                    table.len() as u64,
                    "round {round} (hinted {hinted})"
                );
            }
            let _ = std::fs::remove_dir_all(&out);
            rows.lock().unwrap().clone()
        };
        let (full, hinted, with_blocks) = (run(false, false), run(true, false), run(true, true));
        assert_eq!(full.len(), 12);
        assert_eq!(with_blocks.len(), 12);
        let sorted = |b: &RecordBatch| {
            // rows in a canonical order (the hinted pass meets the keys in another order)
            let cols: Vec<ArrayRef> = b.columns().to_vec();
            let idx = arrow::compute::lexsort_to_indices(
                &[arrow::compute::SortColumn {
                    values: b.column_by_name("qp").unwrap().clone(),
                    options: None,
                }],
                None,
            )
            .unwrap();
            let cols: Vec<ArrayRef> = cols
                .iter()
                .map(|c| arrow::compute::take(c, &idx, None).unwrap())
                .collect();
            RecordBatch::try_new(b.schema(), cols).unwrap()
        };
        for (i, ((f, fi), (h, hi))) in full.iter().zip(&hinted).enumerate() {
            assert!(f.num_rows() > 0, "interval {i}: rows expected");
            assert_eq!(sorted(f), sorted(h), "interval {i}: flows rows differ");
            assert_eq!(fi, hi, "interval {i}: interfaces rows differ");
            let (b, bi) = &with_blocks[i];
            assert_eq!(
                sorted(f),
                sorted(b),
                "interval {i}: flows rows differ (blocks said)"
            );
            assert_eq!(fi, bi, "interval {i}: interfaces rows differ (blocks said)");
        }
    }
}
