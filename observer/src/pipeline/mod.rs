//! The collector: per-interval deltas of [`Snapshot`]s, Parquet flow logs, live alerts, the
//! terminal view, and the end-of-run summary. Driven by the live source and by replay alike:
//! intervals are the times of the snapshots (wall clock live, capture time in replay), never
//! the collector's own clock.

pub mod alerts;
pub mod deltas;
pub mod ip_pairs;
pub mod policy;
pub mod prev_values;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IsTerminal;
use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use observer_common::maps::{Event, IfaceStats, MacKey, PfcCounters, QpKey, QpValue, class, dir};
use serde_json::{Value, json};

use crate::sinks::parquet_files::{JsonlWriter, TableWriter};
use crate::sinks::row_builders::{self as tables, Cell, FlowsBuilder, IfaceExtra};
use crate::sinks::{parquet_files as output, terminal_view as view};
use crate::sources::Snapshot;
use alerts::{Alert, AlertKey, Dedup, severity_of};

/// Human (stderr) alert lines per rule per interval; the rest are summarised in one line.
pub const HUMAN_LINES_PER_RULE: u64 = 20;
use ip_pairs::PairIndex;
pub use policy::PolicyConfig;

/// Alert rule names (stable: alerts.jsonl, the alerts Parquet table, the lab's checks).
pub mod rule {
    pub const DSCP_MISMATCH: &str = "dscp_mismatch";
    pub const PCP_MISMATCH: &str = "pcp_mismatch";
    pub const NOT_ECT: &str = "not_ect";
    pub const PAUSE_802_3X: &str = "pause_802_3x";
    pub const PFC_WRONG_PRIORITY: &str = "pfc_wrong_priority";
    pub const PFC_STORM: &str = "pfc_storm";
    pub const PSN_GAP: &str = "psn_gap";
    pub const GO_BACK_N: &str = "go_back_n";
    pub const CE_WITHOUT_CNP: &str = "ce_without_cnp";
    pub const PFC_WITHOUT_ECN: &str = "pfc_without_ecn";
    pub const MTU_BELOW_EXPECTED: &str = "mtu_below_expected";
    /// New QP keys could not be tracked: the per-QP map is full (`--max-qps`).
    pub const QP_MAP_FULL: &str = "qp_map_full";
    /// Kernel events were dropped (ring buffer full); interval rules still see the counts.
    pub const EVENTS_LOST: &str = "events_lost";
    /// A flow-log, alert or summary file could not be written (disk full, unwritable).
    pub const OUTPUT_WRITE_FAILED: &str = "output_write_failed";
    /// Every rule, in documentation order.
    pub const ALL: [&str; 14] = [
        DSCP_MISMATCH,
        PCP_MISMATCH,
        NOT_ECT,
        PAUSE_802_3X,
        PFC_WRONG_PRIORITY,
        PFC_STORM,
        PSN_GAP,
        GO_BACK_N,
        CE_WITHOUT_CNP,
        PFC_WITHOUT_ECN,
        MTU_BELOW_EXPECTED,
        QP_MAP_FULL,
        EVENTS_LOST,
        OUTPUT_WRITE_FAILED,
    ];
}

#[derive(Clone, Debug)]
pub struct CollectorConfig {
    /// Root of the Hive-style output tree (`flows/`, `interfaces/`, `alerts/`, `alerts.jsonl`,
    /// `summary.json`).
    pub out_dir: PathBuf,
    /// Host name written into file names.
    pub host: String,
    /// "live" or "replay".
    pub source: &'static str,
    pub policy: PolicyConfig,
    /// Close a Parquet file after this many seconds of data ...
    pub rotate_secs: u64,
    /// ... or this many bytes, whichever comes first.
    pub rotate_bytes: u64,
    /// Draw the refreshing terminal view (stdout is a terminal) instead of plain logs.
    pub terminal: bool,
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
            source,
            policy,
            rotate_secs: 300,
            rotate_bytes: 128 << 20,
            terminal: false,
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
    #[error("cannot create output directory {path}: {err}")]
    OutDir { path: String, err: std::io::Error },
    #[error(transparent)]
    Output(#[from] output::OutputError),
    #[error("building a record batch: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("{0}")]
    Other(String),
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
    /// Last values of keys no longer in the map (for the summary).
    retired: HashMap<QpKey, QpValue>,
    /// Largest XOFF frames per second seen per direction and priority.
    max_xoff_per_s: [[f64; 8]; dir::COUNT],
    evictions_total: u64,
    /// Rows written in the last interval (sizes the next interval's builders).
    last_active: usize,
}

/// Figures of the last interval (for the view, logs and tests).
#[derive(Clone, Debug, Default)]
pub struct IntervalStats {
    pub iface: String,
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
    ifaces: BTreeMap<String, IfaceState>,
    dedup: Dedup,
    flows: TableWriter,
    ifw: TableWriter,
    alw: TableWriter,
    iface_schema: SchemaRef,
    alert_schema: SchemaRef,
    flows_schema: SchemaRef,
    jsonl: JsonlWriter,
    alert_rows: Vec<Vec<Cell>>,
    alert_counts: BTreeMap<&'static str, u64>,
    occurrences: BTreeMap<&'static str, u64>,
    clock_offset_ns: i64,
    failing: HashSet<&'static str>,
    human_alerts: bool,
    startup_err: Option<String>,
    /// Human alert lines per rule since the last interval, and those held back.
    human_shown: BTreeMap<&'static str, u64>,
    human_held: BTreeMap<&'static str, u64>,
    /// Scratch delta and its non-zero buckets (hot path, reused every key).
    scratch: Box<deltas::Scratch>,
    pub view: view::ViewState,
    pub last: IntervalStats,
}

impl Collector {
    pub fn new(cfg: CollectorConfig) -> Result<Collector, CollectorError> {
        // An output directory that cannot be created now is not fatal: counting starts, an
        // output_write_failed alert is raised and every write retries (as on a full disk).
        let startup_err = std::fs::create_dir_all(&cfg.out_dir).err().map(|err| {
            let e = CollectorError::OutDir { path: cfg.out_dir.display().to_string(), err };
            tracing::error!(error = %e, "output directory unusable; counting continues, writing will be retried each interval");
            e.to_string()
        });
        let flows_schema = tables::flows_schema();
        let iface_schema = crate::schema::interfaces().arrow_schema();
        let alert_schema = crate::schema::alerts().arrow_schema();
        let (rs, rb) = (cfg.rotate_secs, cfg.rotate_bytes);
        let flows = TableWriter::new(
            &cfg.out_dir,
            "flows",
            &cfg.host,
            flows_schema.clone(),
            rs,
            rb,
        )
        .with_encodings(tables::flows_encoding);
        let ifw = TableWriter::new(
            &cfg.out_dir,
            "interfaces",
            &cfg.host,
            iface_schema.clone(),
            rs,
            rb,
        );
        let alw = TableWriter::new(
            &cfg.out_dir,
            "alerts",
            &cfg.host,
            alert_schema.clone(),
            rs,
            rb,
        );
        let jsonl = JsonlWriter::new(cfg.out_dir.join("alerts.jsonl"));
        let human_alerts = !cfg.terminal || !std::io::stderr().is_terminal();
        Ok(Collector {
            dedup: Dedup::new(cfg.policy.thresholds.hold_down_ns),
            ifaces: BTreeMap::new(),
            flows,
            ifw,
            alw,
            iface_schema,
            alert_schema,
            flows_schema,
            jsonl,
            alert_rows: Vec::new(),
            alert_counts: BTreeMap::new(),
            occurrences: BTreeMap::new(),
            clock_offset_ns: 0,
            failing: HashSet::new(),
            human_alerts,
            startup_err,
            human_shown: BTreeMap::new(),
            human_held: BTreeMap::new(),
            scratch: Box::default(),
            view: view::ViewState::default(),
            last: IntervalStats::default(),
            cfg,
        })
    }

    /// Offset added to per-QP packet times (`first_ns`/`last_ns`) to make them UNIX ns (the
    /// kernel stamps packets with CLOCK_MONOTONIC). 0 (the default) for replay.
    /// Raises the start-up output failure, if any, once the first interval time is known.
    fn startup_output_check(&mut self, t: u64) {
        if let Some(e) = self.startup_err.take() {
            self.failing.insert("output directory");
            self.output_failed("output directory", &e, t);
        }
    }

    pub fn set_packet_clock_offset(&mut self, offset_ns: i64) {
        self.clock_offset_ns = offset_ns;
    }

    /// Declares when observation of `iface` started (the first interval's start) and its
    /// link speed. Without it the first interval starts at its first packet.
    pub fn begin(&mut self, iface: &str, start_ns: u64, link_speed_bps: Option<u64>) {
        let st = self.ifaces.entry(iface.to_string()).or_default();
        st.start_ns = Some(start_ns);
        st.link_bps = link_speed_bps;
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
        st.prev
            .iter()
            .filter(|(_, v)| (v.last_ns as i64) < limit)
            .map(|(k, _)| *k)
            .take(max)
            .collect()
    }

    /// Alerts emitted so far, per rule.
    pub fn alert_counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.alert_counts
    }

    fn emit(&mut self, a: Alert) {
        *self.alert_counts.entry(a.rule).or_default() += 1;
        *self.occurrences.entry(a.rule).or_default() += a.count;
        let shown = self.human_shown.entry(a.rule).or_default();
        *shown += 1;
        if self.human_alerts && *shown > HUMAN_LINES_PER_RULE {
            *self.human_held.entry(a.rule).or_default() += 1;
        } else if self.human_alerts {
            eprintln!(
                "{} {:<8} {}",
                output::rfc3339(a.time_ns),
                a.severity.as_str().to_uppercase(),
                a.message()
            );
        }
        self.jsonl
            .push(a.json(&self.cfg.host, self.cfg.source).to_string());
        self.alert_rows.push(a.row(&self.cfg.host, self.cfg.source));
        self.view.push_alert(&a);
        self.last.alerts += 1;
    }

    /// One line per rule whose human alert lines were capped in this interval (many keys at
    /// once, e.g. DSCP bleached on every QP): the rest are in alerts.jsonl and the alerts table.
    fn human_summary(&mut self, t: u64) {
        for (rule, n) in std::mem::take(&mut self.human_held) {
            eprintln!(
                "{} {:<8} {rule}: {n} more alerts on other keys not shown here (see alerts.jsonl)",
                output::rfc3339(t),
                severity_of(rule).as_str().to_uppercase()
            );
        }
        self.human_shown.clear();
    }

    fn offer(&mut self, a: Alert) {
        if let Some(a) = self.dedup.offer(a) {
            self.emit(a);
        }
    }

    /// Kernel (or replay) events for `iface`: first occurrences, alerted at once.
    pub fn on_events(&mut self, iface: &str, events: &[Event]) {
        let p = self.cfg.policy.expected;
        for e in events {
            if let Some(a) = alerts::from_event(iface, e, &p) {
                self.offer(a);
            }
        }
        if !events.is_empty() {
            let t = events.iter().map(|e| e.ts_ns).max().unwrap_or(0);
            self.flush_jsonl(t);
        }
    }

    fn flush_jsonl(&mut self, t: u64) {
        if let Err(e) = self.jsonl.flush() {
            self.output_failed("alerts.jsonl", &e.to_string(), t);
        } else {
            self.output_ok("alerts.jsonl");
        }
    }

    fn output_failed(&mut self, what: &'static str, err: &str, t: u64) {
        if self.failing.insert(what) {
            tracing::error!(output = what, error = %err, "cannot write output; counting continues, writing will be retried each interval");
        }
        let a = Alert::candidate(
            rule::OUTPUT_WRITE_FAILED,
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
                "output writable again; pending files written"
            );
        }
    }

    /// One interval's cumulative state of one interface: deltas against the previous snapshot
    /// of that interface, Parquet rows, interval alert rules.
    pub fn on_snapshot(&mut self, snap: &Snapshot) -> Result<(), CollectorError> {
        self.startup_output_check(snap.time_ns);
        let off = self.clock_offset_ns;
        let pol = self.cfg.policy.expected;
        let mtu = self.cfg.policy.expected_mtu;
        let th = self.cfg.policy.thresholds.clone();
        let want_top = self.cfg.terminal;
        let host = self.cfg.host.clone();
        let source = self.cfg.source;
        let st = self.ifaces.entry(snap.iface.clone()).or_default();
        if snap.link_speed_bps.is_some() {
            st.link_bps = snap.link_speed_bps;
        }
        let end = snap.time_ns;
        let start = st.prev_time.or(st.start_ns).unwrap_or_else(|| {
            snap.qps
                .iter()
                .filter(|(_, v)| v.first_ns != 0)
                .map(|(_, v)| (v.first_ns as i64).saturating_add(off).max(0) as u64)
                .min()
                .unwrap_or(end)
        });
        let start = start.min(end);
        let iface = snap.iface.as_str();
        let cap = snap
            .qps
            .len()
            .min(st.last_active.saturating_mul(2).max(1024))
            + st.evicted.len();
        let mut fb = FlowsBuilder::with_capacity(&host, source, iface, start, end, cap);
        let mut cands: Vec<Alert> = Vec::new();
        let mut new_qps = [0u64; dir::COUNT];
        let mut active = [0u64; dir::COUNT];
        let mut evictions = [0u64; dir::COUNT];
        let mut tracked = [0u64; dir::COUNT];
        // (src, dst) -> (CE on data, CNPs, packets) in this interval, for ce_without_cnp
        st.pairs.begin_interval();
        let mut ce_data_max = 0u64;
        let mut ce_total = 0u64;
        let mut top: Vec<view::TopRow> = Vec::new();

        // one flows row, the key's interval rules, its pair's sums
        let mut row = |k: &QpKey,
                       d: &QpValue,
                       nz: &[u16],
                       new: bool,
                       evicted: bool,
                       pairs: &mut PairIndex,
                       pair: u32| {
            fb.push_nz(k, d, nz, new, evicted, off);
            alerts::qp_interval_nz(iface, k, d, nz, &pol, mtu, end, &mut cands);
            let ce = d.ecn_hist[class::DATA][3] as u64;
            pairs.add(pair, (ce, d.cnp(), d.pkts));
            ce_data_max = ce_data_max.max(ce);
            ce_total += d.ce();
            if want_top {
                top.push(view::TopRow::new(iface, k, d));
            }
        };

        // Keys the source evicted, with their final values.
        let sc = &mut *self.scratch;
        for (k, v) in std::mem::take(&mut st.evicted) {
            let (prev, pair) = match st.prev.remove(&k) {
                Some((p, pair)) => (p, pair),
                None => (QpValue::ZERO, st.pairs.acquire((k.src_ip, k.dst_ip))),
            };
            st.pairs.release(pair);
            sc.delta(&v, &prev);
            let di = (k.dir as usize).min(dir::COUNT - 1);
            evictions[di] += 1;
            st.evictions_total += 1;
            if sc.d.pkts > 0 {
                active[di] += 1;
                let (d, nz, new) = (&sc.d, &sc.nz, prev.pkts == 0);
                row(&k, d, nz, new, true, &mut st.pairs, pair);
            }
            st.retired.insert(k, v);
        }
        st.prev.begin_scan(snap.qps.len());
        for (pos, (k, v)) in snap.qps.iter().enumerate() {
            // Prefetch: the `pkts` line of both values PREFETCH_HEAD keys ahead; all lines of
            // the values PREFETCH_FULL keys ahead when that key is active (most keys idle: read
            // one line each).
            if let Some((_, nv)) = snap.qps.get(pos + PREFETCH_HEAD) {
                deltas::prefetch(nv, 1);
                if let Some(pv) = st.prev.hinted(pos + PREFETCH_HEAD) {
                    deltas::prefetch(pv, 1);
                }
            }
            if let Some((_, nv)) = snap.qps.get(pos + PREFETCH_FULL)
                && let Some(pv) = st.prev.hinted(pos + PREFETCH_FULL)
                && nv.pkts != pv.pkts
            {
                deltas::prefetch(nv, usize::MAX);
                deltas::prefetch(pv, usize::MAX);
            }
            let di = (k.dir as usize).min(dir::COUNT - 1);
            tracked[di] += 1;
            match st.prev.find(pos, k) {
                Some(slot) => {
                    let pv = st.prev.value_mut(slot);
                    if pv.pkts == v.pkts {
                        continue;
                    }
                    sc.update(v, pv);
                    active[di] += 1;
                    let pair = st.prev.tag(slot);
                    let (d, nz) = (&sc.d, &sc.nz);
                    row(k, d, nz, false, false, &mut st.pairs, pair);
                }
                None => {
                    let pair = st.pairs.acquire((k.src_ip, k.dst_ip));
                    st.prev.insert(pos, *k, *v, pair);
                    st.retired.remove(k);
                    new_qps[di] += 1;
                    if v.pkts > 0 {
                        active[di] += 1;
                        sc.nz.clear();
                        deltas::nonzero_buckets(v, &mut sc.nz);
                        let nz = &sc.nz;
                        row(k, v, nz, true, false, &mut st.pairs, pair);
                    }
                }
            }
        }
        // Keys that vanished without an eviction report: their last read values stand.
        // (a scan of two flat arrays: cheap; also right when a read returned a key twice)
        {
            for k in st.prev.vanished() {
                if let Some((v, pair)) = st.prev.remove(&k) {
                    st.pairs.release(pair);
                    evictions[(k.dir as usize).min(dir::COUNT - 1)] += 1;
                    st.evictions_total += 1;
                    st.retired.insert(k, v);
                }
            }
        }

        // Per-interface deltas and rules.
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
        let mut iface_rows = Vec::new();
        let mut xoff_all = 0u64;
        let mut roce_all = 0u64;
        for d in 0..dir::COUNT {
            let di = deltas::iface_delta(&snap.iface_stats[d], &st.prev_iface[d]);
            st.prev_iface[d] = snap.iface_stats[d];
            xoff_all += di.pfc.xoff.iter().sum::<u64>();
            roce_all += di.roce;
            let macs: Vec<String> = mac_delta
                .iter()
                .filter(|(k, _)| k.dir as usize == d)
                .map(|(k, c)| {
                    let m = k.mac;
                    format!(
                        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}={}",
                        m[0],
                        m[1],
                        m[2],
                        m[3],
                        m[4],
                        m[5],
                        c.pfc_frames + c.pause
                    )
                })
                .collect();
            let macs = (!macs.is_empty()).then(|| macs.join(","));
            let key = AlertKey {
                iface: iface.into(),
                dir: Some(d as u8),
                ..Default::default()
            };
            let mk = |r, key: AlertKey, obs: String, exp: String, n| {
                Alert::candidate(r, key, end, obs, exp, n, "interval")
            };
            if di.pfc.pause > 0 {
                let from = macs
                    .as_deref()
                    .map(|m| format!(" from {m}"))
                    .unwrap_or_default();
                cands.push(mk(
                    rule::PAUSE_802_3X,
                    key.clone(),
                    format!(
                        "{} PAUSE frames ({} XON){from}",
                        di.pfc.pause, di.pfc.pause_xon
                    ),
                    "no 802.3x PAUSE in a RoCE fabric".into(),
                    di.pfc.pause,
                ));
            }
            for p in 0..8 {
                let n = di.pfc.xoff[p] + di.pfc.xon[p];
                if p as u8 != pol.rdma_priority && n > 0 {
                    let mut k2 = key.clone();
                    k2.priority = Some(p as u8);
                    cands.push(mk(
                        rule::PFC_WRONG_PRIORITY,
                        k2,
                        format!(
                            "PFC on priority {p}: {} XOFF, {} XON",
                            di.pfc.xoff[p], di.pfc.xon[p]
                        ),
                        format!("PFC only on priority {}", pol.rdma_priority),
                        n,
                    ));
                }
                if secs > 0.0 {
                    let rate = di.pfc.xoff[p] as f64 / secs;
                    if rate > st.max_xoff_per_s[d][p] {
                        st.max_xoff_per_s[d][p] = rate;
                    }
                    if rate > th.pfc_storm_xoff_per_s as f64 {
                        let mut k2 = key.clone();
                        k2.priority = Some(p as u8);
                        cands.push(mk(
                            rule::PFC_STORM,
                            k2,
                            format!(
                                "{rate:.0} XOFF/s on priority {p} ({} in {secs:.3} s)",
                                di.pfc.xoff[p]
                            ),
                            format!("<= {} XOFF/s", th.pfc_storm_xoff_per_s),
                            di.pfc.xoff[p],
                        ));
                    }
                }
            }
            if di.qp_insert_failed > 0 {
                cands.push(mk(
                    rule::QP_MAP_FULL,
                    key.clone(),
                    format!(
                        "{} new QP keys not tracked, {} RoCE packets untracked",
                        di.qp_insert_failed, di.roce_untracked
                    ),
                    "room in the per-QP map (raise --max-qps)".into(),
                    di.qp_insert_failed,
                ));
            }
            if di.events_lost > 0 {
                cands.push(mk(
                    rule::EVENTS_LOST,
                    key.clone(),
                    format!("{} events lost (ring buffer full)", di.events_lost),
                    "no lost events (interval counts are still complete)".into(),
                    di.events_lost,
                ));
            }
            if d == dir::INGRESS as usize || snap.iface_stats[d].frames != 0 {
                let x = IfaceExtra {
                    tracked_qps: tracked[d],
                    active_qps: active[d],
                    new_qps: new_qps[d],
                    evictions: evictions[d],
                    pfc_src_macs: macs,
                };
                iface_rows.push(tables::iface_row(
                    &host,
                    source,
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
        if xoff_all >= th.pfc_without_ecn_min_xoff && roce_all > 0 && ce_total == 0 {
            cands.push(Alert::candidate(
                rule::PFC_WITHOUT_ECN,
                AlertKey {
                    iface: iface.into(),
                    ..Default::default()
                },
                end,
                format!("{xoff_all} XOFF frames, 0 CE-marked RoCE packets"),
                "ECN marking (CE) before PFC pauses".into(),
                xoff_all,
                "interval",
            ));
        }
        // pairs only matter when some key saw CE
        let pair_sums = st.pairs.touched().filter(|_| ce_data_max > 0);
        for (&(a, b), (ce, _, _)) in pair_sums {
            if ce >= th.ce_without_cnp_min_ce {
                let (_, cnp_back, pkts_back) = st.pairs.sums_of(&(b, a));
                if cnp_back == 0 && pkts_back > 0 {
                    cands.push(Alert::candidate(
                        rule::CE_WITHOUT_CNP,
                        AlertKey {
                            iface: iface.into(),
                            src: Some(a),
                            dst: Some(b),
                            ..Default::default()
                        },
                        end,
                        format!(
                            "{ce} CE-marked data packets, 0 CNPs back ({pkts_back} packets back)"
                        ),
                        "CNPs from the receiver for CE-marked data".into(),
                        ce,
                        "interval",
                    ));
                }
            }
        }
        st.pairs.end_interval();
        st.prev_time = Some(end);
        st.last_active = active.iter().sum::<u64>() as usize;
        let tracked_all: u64 = tracked.iter().sum();
        let stats = IntervalStats {
            iface: iface.to_string(),
            start_ns: start,
            end_ns: end,
            tracked_qps: tracked_all,
            active_qps: active.iter().sum(),
            new_qps: new_qps.iter().sum(),
            evictions: evictions.iter().sum(),
            alerts: 0,
        };
        let max_xoff = st.max_xoff_per_s;
        let link = st.link_bps;

        // Write the interval's rows.
        let flows_batch = fb.finish(&self.flows_schema)?;
        if let Err(e) = self.flows.write(&flows_batch, start) {
            self.output_failed("flows", &e.to_string(), end);
        } else {
            self.output_ok("flows");
        }
        let ib = tables::rows_batch(&self.iface_schema, &iface_rows)?;
        if let Err(e) = self.ifw.write(&ib, start) {
            self.output_failed("interfaces", &e.to_string(), end);
        } else {
            self.output_ok("interfaces");
        }

        self.last = stats;
        for a in cands {
            self.offer(a);
        }
        for a in self.dedup.tick(end, false) {
            self.emit(a);
        }
        self.flush_alerts(end)?;
        self.human_summary(end);
        if want_top {
            self.view
                .update(&self.last, top, &snap.iface_stats, link, max_xoff);
        }
        if !self.cfg.terminal {
            let s = &self.last;
            tracing::info!(
                iface = %s.iface,
                interval_s = secs,
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

    fn flush_alerts(&mut self, t: u64) -> Result<(), CollectorError> {
        let rows = std::mem::take(&mut self.alert_rows);
        let b = tables::rows_batch(&self.alert_schema, &rows)?;
        if let Err(e) = self.alw.write(&b, t) {
            self.output_failed("alerts", &e.to_string(), t);
        } else {
            self.output_ok("alerts");
        }
        // alerts raised by the failure above go to the next interval's batch
        self.flush_jsonl(t);
        Ok(())
    }

    /// Output statistics per table.
    pub fn output_stats(&self) -> Value {
        let w = |t: &TableWriter| {
            json!({"files": t.stats.files, "rows": t.stats.rows, "bytes": t.stats.bytes,
                   "write_errors": t.stats.write_errors, "rows_lost": t.stats.rows_lost,
                   "pending_files": t.pending_files()})
        };
        json!({"flows": w(&self.flows), "interfaces": w(&self.ifw), "alerts": w(&self.alw),
               "alerts_jsonl_lines_lost": self.jsonl.lines_lost})
    }

    /// Final-named files written so far (the most recent 64 per table).
    pub fn written_files(&self) -> Vec<PathBuf> {
        self.flows
            .recent
            .iter()
            .chain(self.ifw.recent.iter())
            .chain(self.alw.recent.iter())
            .cloned()
            .collect()
    }

    /// Snapshots of the collector's view of every interface: the last values read, plus keys
    /// evicted earlier (summary).
    fn last_snapshots(&self) -> Vec<Snapshot> {
        self.ifaces
            .iter()
            .map(|(name, st)| {
                let mut qps: Vec<(QpKey, QpValue)> =
                    st.prev.iter().map(|(k, v)| (*k, *v)).collect();
                qps.extend(
                    st.retired
                        .iter()
                        .filter(|(k, _)| !st.prev.contains(k))
                        .map(|(k, v)| (*k, *v)),
                );
                let mut macs: Vec<(MacKey, PfcCounters)> =
                    st.prev_macs.iter().map(|(k, v)| (*k, *v)).collect();
                macs.sort_by_key(|a| a.0);
                Snapshot {
                    iface: name.clone(),
                    time_ns: st.prev_time.unwrap_or(0),
                    link_speed_bps: st.link_bps,
                    qps,
                    iface_stats: st.prev_iface,
                    macs,
                }
            })
            .collect()
    }

    /// Flushes and closes every file, writes `summary.json` (`summary::summary_json` of the last
    /// snapshots plus `"alerts": {rule: count}`) and returns it.
    pub fn finish(mut self) -> Result<Value, CollectorError> {
        let t = self
            .ifaces
            .values()
            .filter_map(|s| s.prev_time)
            .max()
            .unwrap_or(0);
        for a in self.dedup.tick(t, true) {
            self.emit(a);
        }
        self.human_summary(t);
        let rows = std::mem::take(&mut self.alert_rows);
        let b = tables::rows_batch(&self.alert_schema, &rows)?;
        let mut first_err: Option<CollectorError> = None;
        if let Err(e) = self.alw.write(&b, t) {
            self.output_failed("alerts", &e.to_string(), t);
        }
        for (name, w) in [
            ("flows", &mut self.flows),
            ("interfaces", &mut self.ifw),
            ("alerts", &mut self.alw),
        ] {
            if let Err(e) = w.finish() {
                tracing::error!(table = name, error = %e, pending_files = w.pending_files(), "could not write the last files");
                first_err.get_or_insert(e.into());
            }
        }
        if let Err(e) = self.jsonl.flush() {
            tracing::error!(error = %e, "could not write alerts.jsonl");
            first_err.get_or_insert(e.into());
        }
        let mut v = crate::sinks::summary_json::summary_json(&self.last_snapshots());
        let counts: serde_json::Map<String, Value> = self
            .alert_counts
            .iter()
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect();
        let occ: serde_json::Map<String, Value> = self
            .occurrences
            .iter()
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect();
        let mut storms = serde_json::Map::new();
        for (name, st) in &self.ifaces {
            storms.insert(name.clone(), json!({"max_xoff_per_s": st.max_xoff_per_s.iter().enumerate().map(|(d, a)| (dir::NAMES[d], a.to_vec())).collect::<BTreeMap<_, _>>(), "evictions": st.evictions_total}));
        }
        if let Value::Object(m) = &mut v {
            m.insert("alerts".into(), Value::Object(counts));
            m.insert("alert_occurrences".into(), Value::Object(occ));
            m.insert("pfc_storm_figures".into(), Value::Object(storms));
            m.insert("output".into(), self.output_stats());
            m.insert("host".into(), json!(self.cfg.host));
            m.insert("source".into(), json!(self.cfg.source));
        }
        let path = self.cfg.out_dir.join("summary.json");
        let tmp = self.cfg.out_dir.join("summary.json.tmp");
        let text =
            serde_json::to_string_pretty(&v).map_err(|e| CollectorError::Other(e.to_string()))?;
        if let Err(err) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            tracing::error!(path = %path.display(), error = %err, "could not write summary.json");
            first_err.get_or_insert(CollectorError::Output(output::OutputError::Io {
                path: path.display().to_string(),
                err,
            }));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }
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

    /// ce_without_cnp sums CE over all keys of an IP pair, evicted keys included, and looks
    /// at the reverse pair's CNPs and packets of the same interval; pair ids survive keys
    /// coming and going.
    #[test]
    fn ce_without_cnp_per_ip_pair_over_intervals() {
        let out = std::env::temp_dir().join(format!("ro-col-pairs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let policy = PolicyConfig::profile("nvidia").unwrap();
        let mut cfg = CollectorConfig::new(out.clone(), "h", "replay", policy);
        cfg.policy.thresholds.hold_down_ns = 1; // every interval's alert is emitted
        let mut col = Collector::new(cfg).unwrap();
        col.human_alerts = false;
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
}
