//! What the terminal view shows, kept by the collector's side: every tracked QP key with its
//! totals since it was first seen (rows stay after traffic stops; an evicted key drops off),
//! each interface's last interval and its PFC figures, the alerts. Fed through the
//! [`crate::sinks::Sink`] trait with the same rows as the Parquet tables, and handed to the
//! terminal thread as an immutable [`ViewData`] after every interval.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use arrow::array::{
    Array, AsArray, BooleanArray, Int32Array, Int64Array, ListArray, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{Float64Type, Int16Type, Int64Type, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use observer_common::maps::{ANY, class};

use crate::sinks::parquet_files::OutputError;
use crate::sinks::{IntervalRows, RunInfo, Sink};
use contract::alert::{Alert, Severity};

/// Most alerts kept for the alerts pane.
pub const MAX_ALERTS: usize = 500;

/// One QP key's line: totals since the key was first seen by this run.
#[derive(Clone, Debug)]
pub struct QpRow {
    pub iface: Arc<str>,
    /// `ingress` or `egress`.
    pub dir: &'static str,
    pub src: Arc<str>,
    pub dst: Arc<str>,
    pub src_ip: Option<IpAddr>,
    pub dst_ip: Option<IpAddr>,
    pub qp: u32,
    pub pkts: u64,
    pub bytes: u64,
    /// CE-marked packets (all classes) from src to dst.
    pub ce: u64,
    /// CNPs carried by this key (addressed to dst).
    pub cnp: u64,
    /// CNPs sent back by dst to src (the reverse IP pair, every QP) on the same interface: the
    /// answer to this row's CE. Filled when published.
    pub cnp_back: u64,
    pub gaps: u64,
    pub retrans: u64,
    /// Packets whose DSCP is not the policy's for their class.
    pub off_dscp: u64,
    /// The DSCP values of those packets with their packets, most first (at most 64 values).
    pub off_values: Vec<(u8, u64)>,
    /// Data packets not ECN-capable (Not-ECT).
    pub not_ect: u64,
    /// Start of the first interval with a packet off the policy's DSCP or Not-ECT (ns since
    /// the epoch).
    pub first_bad_ns: Option<u64>,
    pub naks: u64,
    pub rnr_naks: u64,
    /// Data DSCP most packets had in the key's last interval with packets.
    pub dscp: Option<u8>,
    /// Time of the key's last packet (ns since the epoch).
    pub last_pkt_ns: Option<u64>,
    /// Bits per second (L2) in the interval that ended at `active_end_ns`.
    pub rate_bps: f64,
    pub active_end_ns: u64,
}

/// PFC figures of one priority in one direction, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PfcFigures {
    pub xoff: u64,
    /// Time actually paused (`pfc_paused_s` summed); `None` without a link speed.
    pub paused_s: Option<f64>,
    /// The storm figure: largest `pfc_xoff_peak_1s` (XOFF in one second) so far.
    pub peak_1s: u64,
}

/// One interface: its last interval and its PFC / PAUSE figures.
#[derive(Clone, Debug, Default)]
pub struct IfaceView {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub tracked: u64,
    pub active: u64,
    pub new: u64,
    pub evicted: u64,
    /// Per direction (ingress, egress), per priority.
    pub pfc: [[PfcFigures; 8]; 2],
    /// 802.3x PAUSE frames per direction.
    pub pause: [u64; 2],
}

/// One alert line.
#[derive(Clone, Debug)]
pub struct AlertLine {
    pub time_ns: u64,
    pub severity: Severity,
    pub text: String,
}

/// One of the host's QPs as the RDMA subsystem last listed it (the `qps` table's last read):
/// the pane that shows something on hardware-RoCE hosts, where no packet reaches XDP.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostQp {
    pub device: String,
    pub lqpn: u32,
    pub state: String,
    /// `comm[pid]`, `kernel`, or `-`; with the container or pod when known.
    pub owner: String,
    /// Packets sent / received in the last interval (from the PSNs; `None`: new QP).
    pub tx: Option<u64>,
    pub rx: Option<u64>,
    pub dscp: Option<u8>,
    pub priority: Option<u8>,
    /// `ok`, `off_policy`, `lossy`, `unknown`.
    pub marking: String,
    /// In ERR or SQE.
    pub error: bool,
}

impl HostQp {
    /// Rank for the pane: errors first, then QPs off the policy or lossy, then unknown
    /// marking, then the rest; busiest first within each.
    pub fn rank(&self) -> (u8, std::cmp::Reverse<u64>) {
        let r = match (self.error, self.marking.as_str()) {
            (true, _) => 0,
            (false, "off_policy" | "lossy") => 1,
            (false, "unknown") => 2,
            _ => 3,
        };
        (
            r,
            std::cmp::Reverse(self.tx.unwrap_or(0) + self.rx.unwrap_or(0)),
        )
    }
}

/// One of the NIC's configuration checks as the NIC pane shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicCheckLine {
    pub name: String,
    /// `fail`, `unknown` or `pass`.
    pub verdict: &'static str,
    /// What was observed against what the policy expects (for an unknown: why).
    pub text: String,
}

/// One interface's NIC as its own counters and configuration show it: the pane that has data
/// on hardware-RoCE hosts, where no packet reaches XDP.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NicView {
    pub iface: String,
    /// Driver family the counters were mapped by (`mlx5`, `bnxt`, `ice`, `rxe`, `other`).
    pub driver: String,
    pub rdma_device: Option<String>,
    /// End of the last interval read (ns since the epoch; 0: none yet).
    pub end_ns: u64,
    /// PFC frames per priority in the last interval, received and sent (`None`: not reported).
    pub pfc_rx: [Option<u64>; 8],
    pub pfc_tx: [Option<u64>; 8],
    /// Time paused per priority in the last interval by the peer's and by this host's PFC (µs).
    pub pfc_rx_us: [Option<u64>; 8],
    pub pfc_tx_us: [Option<u64>; 8],
    /// PFC frames per priority since the start, received and sent.
    pub pfc_rx_total: [u64; 8],
    pub pfc_tx_total: [u64; 8],
    /// The other quantities that moved in the last interval, `(column, delta, a fault)`: faults
    /// (discards, pause storms, out-of-sequence, NAKs, timeouts, ...) first.
    pub moved: Vec<(String, i64, bool)>,
    /// Counters of the NIC's own names (no neutral quantity) that moved in the last interval.
    pub raw_moved: usize,
    /// Counters that went backwards in the last interval.
    pub counter_resets: i64,
    /// The configuration checks of the last time it was checked: failed, unknown, then passed.
    pub checks: Vec<NicCheckLine>,
}

impl NicView {
    /// Checks that failed and that could not be decided.
    pub fn check_counts(&self) -> (usize, usize, usize) {
        let n = |v: &str| self.checks.iter().filter(|c| c.verdict == v).count();
        (n("fail"), n("unknown"), n("pass"))
    }
}

/// Whether a NIC quantity moving is a fault to look at (drops, storms, sequence errors).
fn nic_fault(q: nic::Quantity) -> bool {
    use nic::Quantity as Q;
    matches!(
        q,
        Q::RxPrioDiscards(_)
            | Q::RxPrioBufDiscards(_)
            | Q::RxPrioCongDiscards(_)
            | Q::PortRxDiscards
            | Q::PortTxDiscards
            | Q::PauseStormEvents
            | Q::PauseStormTxDisabled
            | Q::PauseStormRoceEvents
            | Q::RdmaRxOutOfBuffer
            | Q::ImpliedNakSeqErr
            | Q::GlobalPauseTxFrames
            | Q::GlobalPauseRxFrames
            | Q::CnpIgnored
            | Q::OutOfSequence
            | Q::NakSeqErrRx
            | Q::AckTimeouts
            | Q::DuplicateRequests
            | Q::RnrNakRx
    )
}

/// Everything the screen shows of the data, as of one interval's end.
#[derive(Debug, Default)]
pub struct ViewData {
    /// The latest interval end: the rows' ages are counted from it.
    pub now_ns: u64,
    pub ifaces: Vec<IfaceView>,
    pub rows: Vec<QpRow>,
    /// The host's QPs, errors and marking faults first ([`HostQp::rank`]); `None` when the
    /// inventory does not run (`--no-host-qps`, no RDMA subsystem).
    pub host_qps: Option<Vec<HostQp>>,
    /// Each interface's NIC (empty with `--no-nic`).
    pub nics: Vec<NicView>,
}

/// What the collector hands to the terminal thread: the latest data (a newer one replaces one
/// not yet taken) and the alerts since the last take (the oldest dropped beyond
/// [`MAX_ALERTS`]). Both sides hold a lock only to swap or move, so the collector never waits
/// for the screen, even when the terminal blocks its writes.
#[derive(Debug, Default)]
pub struct Mailbox {
    data: Mutex<Option<Arc<ViewData>>>,
    alerts: Mutex<VecDeque<AlertLine>>,
}

impl Mailbox {
    pub fn put_data(&self, d: Arc<ViewData>) {
        *lock(&self.data) = Some(d);
    }

    pub fn put_alert(&self, a: AlertLine) {
        let mut q = lock(&self.alerts);
        if q.len() == MAX_ALERTS {
            q.pop_front();
        }
        q.push_back(a);
    }

    pub fn take_data(&self) -> Option<Arc<ViewData>> {
        lock(&self.data).take()
    }

    pub fn take_alerts(&self) -> VecDeque<AlertLine> {
        std::mem::take(&mut *lock(&self.alerts))
    }
}

/// A lock whose holder cannot have left the value half-changed (every critical section is a
/// swap or a push), so a poisoned one is used as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type RowKey = (Arc<str>, &'static str, Arc<str>, Arc<str>, u32);

/// The terminal view as a sink of the collector: keeps the rows, publishes them.
pub struct ViewSink {
    rows: HashMap<RowKey, QpRow>,
    host_qps: Option<Vec<HostQp>>,
    ifaces: BTreeMap<String, (Arc<str>, IfaceView)>,
    nics: BTreeMap<String, NicView>,
    expected_dscp: [u8; class::COUNT],
    mailbox: Arc<Mailbox>,
}

impl ViewSink {
    /// A sink that posts to `mailbox`, counting off-DSCP packets against `expected_dscp` (per
    /// class, [`ANY`]: not checked).
    pub fn new(expected_dscp: [u8; class::COUNT], mailbox: Arc<Mailbox>) -> ViewSink {
        ViewSink {
            rows: HashMap::new(),
            host_qps: None,
            ifaces: BTreeMap::new(),
            nics: BTreeMap::new(),
            expected_dscp,
            mailbox,
        }
    }

    fn iface(&mut self, name: &str) -> (Arc<str>, &mut IfaceView) {
        let e = self.ifaces.entry(name.to_string()).or_insert_with(|| {
            let v = IfaceView {
                name: name.to_string(),
                ..Default::default()
            };
            (Arc::from(name), v)
        });
        (e.0.clone(), &mut e.1)
    }

    /// The interval's flows rows: totals added, evicted keys removed.
    fn on_flows(&mut self, b: &RecordBatch, secs: f64, end_ns: u64) {
        let Some(c) = FlowCols::of(b) else {
            return;
        };
        for i in 0..b.num_rows() {
            let (iface, _) = self.iface(c.iface.value(i));
            let dir = dir_name(c.dir.value(i));
            let (src, dst) = (c.src.value(i), c.dst.value(i));
            let qp = c.qp.value(i) as u32;
            let key: RowKey = (iface.clone(), dir, src.into(), dst.into(), qp);
            if c.evicted.value(i) {
                self.rows.remove(&key);
                continue;
            }
            let r = self
                .rows
                .entry(key)
                .or_insert_with_key(|k| QpRow::new(k.0.clone(), dir, k.2.clone(), k.3.clone(), qp));
            c.add_to(r, i, &self.expected_dscp);
            r.rate_bps = if secs > 0.0 {
                c.int(1, i) as f64 * 8.0 / secs
            } else {
                0.0
            };
            r.active_end_ns = end_ns;
        }
    }

    /// The interval's interfaces rows (one per direction).
    fn on_interfaces(&mut self, b: &RecordBatch, start_ns: u64, end_ns: u64) {
        let s = |n: &str| b.column_by_name(n).and_then(|c| c.as_string_opt::<i32>());
        let (Some(ifc), Some(dir)) = (s("iface"), s("dir")) else {
            return;
        };
        let mut seen = Vec::new();
        for row in 0..b.num_rows() {
            let v = |n: &str| int_at(b, n, row);
            let (_, iv) = self.iface(ifc.value(row));
            if !seen.contains(&ifc.value(row)) {
                seen.push(ifc.value(row));
                (iv.tracked, iv.active, iv.new, iv.evicted) = (0, 0, 0, 0);
            }
            (iv.start_ns, iv.end_ns) = (start_ns, end_ns);
            iv.tracked += v("tracked_qps");
            iv.active += v("active_qps");
            iv.new += v("new_qps");
            iv.evicted += v("evictions");
            let d = usize::from(dir.value(row) == "egress");
            iv.pause[d] += v("pause_frames");
            for (p, f) in iv.pfc[d].iter_mut().enumerate() {
                f.xoff += v(&format!("pfc_xoff_p{p}"));
                f.peak_1s = f.peak_1s.max(v(&format!("pfc_xoff_peak_1s_p{p}")));
                if let Some(s) = float_at(b, &format!("pfc_paused_s_p{p}"), row) {
                    *f.paused_s.get_or_insert(0.0) += s;
                }
            }
        }
    }

    /// Every row as of `now_ns`, with the CNPs each IP pair's reverse pair sent.
    pub fn data(&self, now_ns: u64) -> ViewData {
        let mut cnps: HashMap<(&str, &str, &str), u64> = HashMap::new();
        for r in self.rows.values() {
            *cnps.entry((&r.iface, &r.src, &r.dst)).or_default() += r.cnp;
        }
        let rows = self
            .rows
            .values()
            .map(|r| {
                let mut r = r.clone();
                r.cnp_back = cnps.get(&(&r.iface, &r.dst, &r.src)).copied().unwrap_or(0);
                r
            })
            .collect();
        ViewData {
            now_ns,
            ifaces: self.ifaces.values().map(|(_, v)| v.clone()).collect(),
            rows,
            host_qps: self.host_qps.clone(),
            nics: self.nics.values().cloned().collect(),
        }
    }

    fn nic_view(&mut self, iface: &str) -> &mut NicView {
        self.nics
            .entry(iface.to_string())
            .or_insert_with(|| NicView {
                iface: iface.to_string(),
                ..NicView::default()
            })
    }

    /// The interval's `nic` rows (one per interface): its PFC per priority, what moved.
    fn on_nic(&mut self, b: &RecordBatch) {
        let s = |n: &str| b.column_by_name(n).and_then(|c| c.as_string_opt::<i32>());
        let (Some(ifc), Some(driver)) = (s("iface"), s("driver")) else {
            return;
        };
        let rdma = s("rdma_device");
        let end = b
            .column_by_name("interval_end")
            .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>());
        let all = nic::Quantity::all();
        let cols: Vec<Option<&Int64Array>> = all
            .iter()
            .map(|q| {
                b.column_by_name(&q.to_string())
                    .and_then(|c| c.as_primitive_opt::<Int64Type>())
            })
            .collect();
        let raw = b.column_by_name("raw").and_then(|c| c.as_list_opt::<i32>());
        for row in 0..b.num_rows() {
            let v = self.nic_view(ifc.value(row));
            v.driver = driver.value(row).to_string();
            v.rdma_device = rdma
                .filter(|c| !c.is_null(row))
                .map(|c| c.value(row).to_string());
            if let Some(e) = end {
                v.end_ns = (e.value(row).max(0) as u64).saturating_mul(1000);
            }
            v.pfc_rx = [None; 8];
            v.pfc_tx = [None; 8];
            v.pfc_rx_us = [None; 8];
            v.pfc_tx_us = [None; 8];
            v.moved.clear();
            let mut faults = Vec::new();
            for (q, c) in all.iter().zip(&cols) {
                let Some(val) = c.filter(|c| !c.is_null(row)).map(|c| c.value(row)) else {
                    continue;
                };
                let u = val.max(0) as u64;
                match *q {
                    nic::Quantity::PfcRxFrames(p) => {
                        v.pfc_rx[p as usize & 7] = Some(u);
                        v.pfc_rx_total[p as usize & 7] += u;
                    }
                    nic::Quantity::PfcTxFrames(p) => {
                        v.pfc_tx[p as usize & 7] = Some(u);
                        v.pfc_tx_total[p as usize & 7] += u;
                    }
                    nic::Quantity::PfcRxPauseUs(p) => v.pfc_rx_us[p as usize & 7] = Some(u),
                    nic::Quantity::PfcTxPauseUs(p) => v.pfc_tx_us[p as usize & 7] = Some(u),
                    q if val != 0 => {
                        if nic_fault(q) {
                            faults.push((q.to_string(), val, true));
                        } else {
                            v.moved.push((q.to_string(), val, false));
                        }
                    }
                    _ => {}
                }
            }
            faults.append(&mut v.moved);
            v.moved = faults;
            v.counter_resets = int_at(b, "counter_resets", row) as i64;
            v.raw_moved = raw.map_or(0, |l| {
                if l.is_null(row) {
                    0
                } else {
                    l.value(row).len()
                }
            });
        }
    }

    /// The NIC configuration checks of `iface`, as last run.
    fn on_nic_checks(&mut self, iface: &str, checks: &[nic::Check]) {
        let mut lines: Vec<NicCheckLine> = checks
            .iter()
            .map(|c| {
                let (verdict, text) = match &c.verdict {
                    nic::Verdict::Fail => {
                        ("fail", format!("{} (expected {})", c.observed, c.expected))
                    }
                    nic::Verdict::Unknown(why) => ("unknown", why.clone()),
                    nic::Verdict::Pass => ("pass", c.observed.clone()),
                };
                NicCheckLine {
                    name: c.name.clone(),
                    verdict,
                    text,
                }
            })
            .collect();
        let rank = |v: &str| match v {
            "fail" => 0,
            "unknown" => 1,
            _ => 2,
        };
        lines.sort_by_key(|l| rank(l.verdict));
        self.nic_view(iface).checks = lines;
    }

    /// One read of the host's QPs (the `qps` table's rows): replaces the previous read.
    fn on_host_qps(&mut self, b: &RecordBatch) {
        let s = |n: &str| b.column_by_name(n).and_then(|c| c.as_string_opt::<i32>());
        let i = |n: &str| {
            b.column_by_name(n)
                .and_then(|c| c.as_primitive_opt::<Int64Type>())
        };
        let flag = |n: &str| b.column_by_name(n).and_then(|c| c.as_boolean_opt());
        let (Some(dev), Some(lqpn), Some(state), Some(marking)) =
            (s("device"), i("lqpn"), s("state"), s("marking"))
        else {
            return;
        };
        let (pid, comm, pod, ctr) = (i("pid"), s("comm"), s("pod_uid"), s("container_id"));
        let (tx, rx, dscp, prio) = (i("tx_pkts"), i("rx_pkts"), i("dscp"), i("priority"));
        let (kernel, error) = (flag("kernel"), flag("error"));
        let opt = |c: Option<&Int64Array>, r: usize| {
            c.filter(|c| !c.is_null(r))
                .map(|c| c.value(r).max(0) as u64)
        };
        let text = |c: Option<&StringArray>, r: usize| {
            c.filter(|c| !c.is_null(r)).map(|c| c.value(r).to_string())
        };
        let mut qps: Vec<HostQp> = (0..b.num_rows())
            .map(|r| {
                let mut owner = match (text(comm, r), opt(pid, r)) {
                    (Some(c), Some(p)) => format!("{c}[{p}]"),
                    (None, Some(p)) => format!("[{p}]"),
                    _ if kernel.is_some_and(|k| k.value(r)) => "kernel".into(),
                    _ => "-".into(),
                };
                if let Some(p) = text(pod, r) {
                    owner += &format!(" pod {}", &p[..p.len().min(8)]);
                } else if let Some(c) = text(ctr, r) {
                    owner += &format!(" ctr {}", &c[..c.len().min(12)]);
                }
                HostQp {
                    device: dev.value(r).to_string(),
                    lqpn: lqpn.value(r).max(0) as u32,
                    state: state.value(r).to_string(),
                    owner,
                    tx: opt(tx, r),
                    rx: opt(rx, r),
                    dscp: opt(dscp, r).map(|d| d as u8),
                    priority: opt(prio, r).map(|p| p as u8),
                    marking: marking.value(r).to_string(),
                    error: error.is_some_and(|e| e.value(r)),
                }
            })
            .collect();
        qps.sort_by_key(|q| q.rank());
        self.host_qps = Some(qps);
    }
}

impl QpRow {
    fn new(iface: Arc<str>, dir: &'static str, src: Arc<str>, dst: Arc<str>, qp: u32) -> QpRow {
        QpRow {
            src_ip: src.parse().ok(),
            dst_ip: dst.parse().ok(),
            iface,
            dir,
            src,
            dst,
            qp,
            pkts: 0,
            bytes: 0,
            ce: 0,
            cnp: 0,
            cnp_back: 0,
            gaps: 0,
            retrans: 0,
            off_dscp: 0,
            off_values: Vec::new(),
            not_ect: 0,
            first_bad_ns: None,
            naks: 0,
            rnr_naks: 0,
            dscp: None,
            last_pkt_ns: None,
            rate_bps: 0.0,
            active_end_ns: 0,
        }
    }
}

fn dir_name(s: &str) -> &'static str {
    if s == "egress" { "egress" } else { "ingress" }
}

fn int_at(b: &RecordBatch, name: &str, row: usize) -> u64 {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .map_or(0, |c| c.value(row).max(0) as u64)
}

fn float_at(b: &RecordBatch, name: &str, row: usize) -> Option<f64> {
    let c = b.column_by_name(name)?.as_primitive_opt::<Float64Type>()?;
    (!c.is_null(row)).then(|| c.value(row))
}

/// The flows columns the view reads, resolved once per batch.
struct FlowCols<'a> {
    iface: &'a StringArray,
    dir: &'a StringArray,
    src: &'a StringArray,
    dst: &'a StringArray,
    qp: &'a Int32Array,
    evicted: &'a BooleanArray,
    /// [`COUNTS`], in order.
    counts: Vec<&'a Int64Array>,
    /// `dscp_<class>` per class.
    dscp: Vec<Option<&'a ListArray>>,
    last_pkt: Option<&'a TimestampMicrosecondArray>,
    interval_start: Option<&'a TimestampMicrosecondArray>,
    not_ect: Option<&'a Int64Array>,
}

/// The counts of a row the view adds up, in [`FlowCols::counts`] order.
const COUNTS: [&str; 8] = [
    "pkts",
    "bytes_l2",
    "ce",
    "cnp",
    "naks",
    "rnr_naks",
    "psn_gaps",
    "psn_retrans",
];

impl<'a> FlowCols<'a> {
    fn of(b: &'a RecordBatch) -> Option<FlowCols<'a>> {
        let s = |n: &str| b.column_by_name(n).and_then(|c| c.as_string_opt::<i32>());
        let counts = COUNTS
            .iter()
            .map(|n| b.column_by_name(n)?.as_primitive_opt::<Int64Type>())
            .collect::<Option<Vec<_>>>()?;
        Some(FlowCols {
            iface: s("iface")?,
            dir: s("dir")?,
            src: s("src")?,
            dst: s("dst")?,
            qp: b.column_by_name("qp")?.as_primitive_opt()?,
            evicted: b.column_by_name("evicted")?.as_boolean_opt()?,
            counts,
            dscp: class::NAMES
                .iter()
                .map(|c| b.column_by_name(&format!("dscp_{c}"))?.as_list_opt::<i32>())
                .collect(),
            last_pkt: b
                .column_by_name("last_pkt")
                .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>()),
            interval_start: b
                .column_by_name("interval_start")
                .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>()),
            not_ect: b
                .column_by_name("not_ect_data")
                .and_then(|c| c.as_primitive_opt::<Int64Type>()),
        })
    }

    /// Count `n` of [`COUNTS`] at row `i`.
    fn int(&self, n: usize, i: usize) -> u64 {
        self.counts[n].value(i).max(0) as u64
    }

    /// Adds row `i`'s interval counts to `r`.
    fn add_to(&self, r: &mut QpRow, i: usize, expected: &[u8; class::COUNT]) {
        let n: [u64; 8] = std::array::from_fn(|k| self.int(k, i));
        r.pkts += n[0];
        r.bytes += n[1];
        r.ce += n[2];
        r.cnp += n[3];
        r.naks += n[4];
        r.rnr_naks += n[5];
        r.gaps += n[6];
        r.retrans += n[7];
        let mut top: Option<(i16, u64)> = None;
        let mut bad = false;
        if let Some(c) = self.not_ect.filter(|c| !c.is_null(i)) {
            let n = c.value(i).max(0) as u64;
            r.not_ect += n;
            bad |= n > 0;
        }
        for (c, col) in self.dscp.iter().enumerate() {
            for (v, n) in hist(*col, i) {
                if expected[c] != ANY && v != expected[c] as i16 && n > 0 {
                    r.off_dscp += n;
                    bad = true;
                    let v = v.clamp(0, 63) as u8;
                    match r.off_values.iter_mut().find(|(x, _)| *x == v) {
                        Some(e) => e.1 += n,
                        None => r.off_values.push((v, n)),
                    }
                }
                if c == class::DATA && top.is_none_or(|(_, m)| n > m) {
                    top = Some((v, n));
                }
            }
        }
        if let Some((v, _)) = top {
            r.dscp = u8::try_from(v).ok();
        }
        r.off_values
            .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if bad
            && r.first_bad_ns.is_none()
            && let Some(t) = self.interval_start.filter(|c| !c.is_null(i))
        {
            r.first_bad_ns = Some((t.value(i).max(0) as u64).saturating_mul(1000));
        }
        if let Some(t) = self.last_pkt.filter(|c| !c.is_null(i)) {
            r.last_pkt_ns = Some((t.value(i).max(0) as u64).saturating_mul(1000));
        }
    }
}

/// (value, packets) of a histogram column at row `i`.
fn hist(col: Option<&ListArray>, i: usize) -> Vec<(i16, u64)> {
    let Some(col) = col.filter(|c| !c.is_null(i)) else {
        return Vec::new();
    };
    let h = col.value(i);
    let h = h.as_struct();
    let vals = h.column(0).as_primitive::<Int16Type>();
    let pkts = h.column(1).as_primitive::<Int64Type>();
    (0..h.len())
        .map(|j| (vals.value(j), pkts.value(j).max(0) as u64))
        .collect()
}

impl Sink for ViewSink {
    fn name(&self) -> &'static str {
        "terminal view"
    }

    fn alert(&mut self, a: &Alert, _run: &RunInfo) {
        // what first, then where: at 80 columns the observed value is what must not be cut
        let line = AlertLine {
            time_ns: a.time_ns,
            severity: a.severity,
            text: format!("{}: {} | {}", a.rule.name(), a.finding(), a.place()),
        };
        self.mailbox.put_alert(line);
    }

    fn interval(&mut self, rows: &IntervalRows<'_>) -> Result<(), OutputError> {
        let secs = rows.end_ns.saturating_sub(rows.start_ns) as f64 / 1e9;
        self.on_flows(rows.flows, secs, rows.end_ns);
        self.on_interfaces(rows.interfaces, rows.start_ns, rows.end_ns);
        Ok(())
    }

    fn qps(&mut self, rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        self.on_host_qps(rows);
        Ok(())
    }

    fn nic(&mut self, rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        self.on_nic(rows);
        Ok(())
    }

    fn nic_checks(&mut self, iface: &str, checks: &[nic::Check]) {
        self.on_nic_checks(iface, checks);
    }

    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        self.mailbox.put_data(Arc::new(self.data(t_ns)));
        Ok(())
    }

    fn finish(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{Collector, CollectorConfig, PolicyConfig};
    use crate::sources::synthetic::Synthetic;

    const S: u64 = 1_000_000_000;
    const LINK: Option<u64> = Some(100_000_000_000);

    fn row<'a>(d: &'a ViewData, src: &str, qp: u32) -> &'a QpRow {
        d.rows
            .iter()
            .find(|r| &*r.src == src && r.qp == qp)
            .unwrap_or_else(|| panic!("no row {src} {qp:#x}"))
    }

    /// The collector's rows into the view: every key's totals equal its cumulative value, CE
    /// beside the reverse pair's CNPs, PFC summed; rows stay when idle, evicted ones go.
    #[test]
    fn rows_keep_totals_pair_cnps_and_drop_evicted_keys() {
        let out = std::env::temp_dir().join(format!("ro-tui-model-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let policy = PolicyConfig::profile("nvidia").unwrap();
        let mut cfg = CollectorConfig::new(out.clone(), "h", "replay", policy.clone());
        cfg.journal = false;
        let mut col = Collector::new(cfg).unwrap();
        col.quiet_stderr();
        let mb = Arc::new(Mailbox::default());
        col.add_sink(Box::new(ViewSink::new(policy.expected.dscp, mb.clone())));
        let mut syn = Synthetic::mixed(policy.expected, 12);
        let t0 = 1_800_000_000 * S;
        col.begin("s0", t0, LINK);
        let mut snap = None;
        for i in 1..=3 {
            syn.step(t0 + i * S);
            col.on_pauses("s0", &syn.dp.take_pauses());
            let s = syn.dp.snapshot("s0", t0 + i * S, LINK);
            col.on_snapshot(&s).unwrap();
            snap = Some(s);
        }
        let snap = snap.unwrap();
        let d = mb.take_data().unwrap();
        assert_eq!(d.now_ns, t0 + 3 * S);
        assert_eq!(d.rows.len(), snap.qps.len());
        for (k, v) in &snap.qps {
            let src = crate::sinks::summary_json::ip_of(&k.src_ip).to_string();
            let r = row(&d, &src, k.dest_qp);
            let got = (r.pkts, r.ce, r.cnp, r.gaps, r.retrans, r.naks, r.rnr_naks);
            let want = (
                v.pkts,
                v.ce(),
                v.cnp(),
                v.psn_gaps,
                v.psn_retrans,
                v.naks,
                v.rnr_naks,
            );
            assert_eq!(got, want, "{src} {:#x}", k.dest_qp);
            assert_eq!(r.last_pkt_ns, Some(t0 + 3 * S));
        }
        // QP 1: 2 CE a step, answered; QP 6: 1 CE a step, never answered; QP 3 off-DSCP
        let (q1, q6, q3) = (
            row(&d, "10.77.0.1", 0x101),
            row(&d, "10.77.0.6", 0x106),
            row(&d, "10.77.0.3", 0x103),
        );
        assert_eq!((q1.ce, q1.cnp_back), (6, 6));
        assert_eq!((q6.ce, q6.cnp_back), (3, 0));
        assert_eq!((q3.off_dscp, q3.pkts, q3.dscp), (12, 12, Some(0)));
        // which value, since when: DSCP 0 from the first interval on
        assert_eq!(q3.off_values, vec![(0, 12)]);
        assert_eq!(q3.first_bad_ns, Some(t0));
        assert_eq!(
            (q1.off_values.len(), q1.not_ect, q1.first_bad_ns),
            (0, 0, None)
        );
        assert_eq!(row(&d, "10.77.0.2", 0x102).gaps, 3);
        let pfc = d.ifaces[0].pfc[0][3];
        assert_eq!((pfc.xoff, pfc.peak_1s), (6, 2));
        assert!(pfc.paused_s.is_some_and(|s| s > 0.0), "{pfc:?}");
        assert_eq!(d.ifaces[0].tracked, snap.qps.len() as u64);
        // no traffic: the rows stay as they were
        let mut idle = syn.dp.snapshot("s0", t0 + 10 * S, LINK);
        col.on_snapshot(&idle).unwrap();
        let d2 = mb.take_data().unwrap();
        assert_eq!(d2.rows.len(), d.rows.len());
        assert_eq!(row(&d2, "10.77.0.1", 0x101).pkts, q1.pkts);
        assert_eq!(d2.ifaces[0].active, 0);
        // an evicted key drops off
        let gone = idle
            .qps
            .iter()
            .position(|(k, _)| k.dest_qp == 0x101)
            .unwrap();
        let (k, v) = idle.qps.remove(gone);
        col.on_evicted("s0", &[(k, v)]);
        idle.time_ns += S;
        col.on_snapshot(&idle).unwrap();
        let d3 = mb.take_data().unwrap();
        assert_eq!(d3.rows.len(), d.rows.len() - 1);
        assert!(!d3.rows.iter().any(|r| r.qp == 0x101));
        let _ = std::fs::remove_dir_all(&out);
    }

    /// The host's QPs through the collector into the view: the last read replaces the one
    /// before; errors first, then the QP off the policy, then the rest by packets; owners as
    /// `comm[pid]` with the pod.
    #[test]
    fn host_qps_reach_the_view_errors_and_faults_first() {
        let out = std::env::temp_dir().join(format!("ro-tui-hostqps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let policy = PolicyConfig::profile("nvidia").unwrap();
        let mut cfg = CollectorConfig::new(out.clone(), "h", "live", policy.clone());
        cfg.journal = false;
        let mut col = Collector::new(cfg).unwrap();
        col.quiet_stderr();
        let mb = Arc::new(Mailbox::default());
        col.add_sink(Box::new(ViewSink::new(policy.expected.dscp, mb.clone())));
        let row = |lqpn: u32, state: &str, tc: u8, sq: u32| qps::QpRow {
            dev: "mlx5_0".into(),
            dev_index: 1,
            port: Some(1),
            lqpn,
            qp_type: "RC".into(),
            state: state.into(),
            sq_psn: Some(sq),
            pid: Some(4242),
            comm: Some("python3".into()),
            workload: Some(std::sync::Arc::new(qps::cgroup::Workload {
                pod_uid: Some("0f1e2d3c-aaaa-bbbb-cccc-111122223333".into()),
                ..Default::default()
            })),
            setup: Some(qps::SetUp {
                traffic_class: tc,
                ..qps::SetUp::default()
            }),
            ..qps::QpRow::default()
        };
        let t0 = 1_800_000_000 * S;
        let mut prev = qps::Inventory::default();
        for (i, sq) in [(1u64, 100u32), (2, 600)] {
            let inv = qps::Inventory {
                time_ns: t0 + i * S,
                qps: vec![
                    row(0x10, "RTS", 106, sq),
                    row(0x11, "RTS", 106, sq / 2),
                    row(0x12, "RTS", 0, sq),
                    row(0x13, if i == 2 { "ERR" } else { "RTS" }, 106, 7),
                ],
                ..qps::Inventory::default()
            };
            let (p, f) = qps::compare(&prev, &inv);
            col.on_qps(t0 + (i - 1) * S, &inv, &p, &f).unwrap();
            prev = inv;
        }
        col.begin("s0", t0, LINK);
        let snap = Synthetic::mixed(policy.expected, 1)
            .dp
            .snapshot("s0", t0 + 2 * S, LINK);
        col.on_snapshot(&snap).unwrap();
        let d = mb.take_data().unwrap();
        let h = d.host_qps.as_ref().expect("host QPs in the view");
        let got: Vec<(u32, &str, &str, Option<u64>)> = h
            .iter()
            .map(|q| (q.lqpn, q.state.as_str(), q.marking.as_str(), q.tx))
            .collect();
        assert_eq!(
            got,
            vec![
                (0x13, "ERR", "ok", Some(0)),
                (0x12, "RTS", "off_policy", Some(500)),
                (0x10, "RTS", "ok", Some(500)),
                (0x11, "RTS", "ok", Some(250)),
            ]
        );
        assert!(h[0].error);
        assert_eq!(h[0].owner, "python3[4242] pod 0f1e2d3c");
        assert_eq!((h[1].dscp, h[1].priority), (Some(0), None));
        let _ = std::fs::remove_dir_all(&out);
    }
}
