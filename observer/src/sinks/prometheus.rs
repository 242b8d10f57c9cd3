//! The Prometheus endpoint (`--metrics ADDR`): the interval results as OpenMetrics text,
//! through `prometheus-client`, served by axum on a thread of its own.
//!
//! The sink updates counters (atomics) once per interval from the rows the other sinks get, in
//! O(rows + series); a scrape encodes the registry, O(series), and never waits for the
//! collector (a scrape and an update only meet on a family's lock when a new series is made).
//! Counters end in `_total`, times are seconds, sizes bytes; labels are few: `iface`, `dir`,
//! `priority`, `reason`, `class`, `rule`, `severity`, and `src` / `dst` for the top IP pairs
//! (the first N pairs by packets get their own series, and up to N more pairs with faults; the
//! rest add up in `src="other"`, `dst="other"`). docs/monitoring.md lists every metric.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow::array::{Array, AsArray, Int64Array, StringArray};
use arrow::datatypes::{Int16Type, Int64Type};
use arrow::record_batch::RecordBatch;
use observer_common::maps::{ANY, class};
use observer_common::parse::reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

use super::parquet_files::OutputError;
use super::{IntervalRows, RunInfo, Sink};
use contract::alert::Alert;
use contract::schema::{self, ColumnError};
use nic::Quantity;

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics {addr}: cannot listen there")]
    Bind {
        addr: SocketAddr,
        #[source]
        err: std::io::Error,
    },
    #[error("--metrics: starting the HTTP server thread")]
    Thread(#[source] std::io::Error),
}

type F64Counter = Counter<f64, std::sync::atomic::AtomicU64>;
type F64Gauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfDir {
    iface: String,
    dir: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfDirPrio {
    iface: String,
    dir: String,
    priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfDirReason {
    iface: String,
    dir: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Pair {
    iface: String,
    dir: String,
    src: String,
    dst: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    severity: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfaceOnly {
    iface: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfacePrio {
    iface: String,
    priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Output {
    output: String,
}

/// Per interface direction, from the `interfaces` rows.
#[derive(Default)]
struct IfaceMetrics {
    frames: Family<IfDir, Counter>,
    bytes: Family<IfDir, Counter>,
    roce: Family<IfDir, Counter>,
    untracked: Family<IfDir, Counter>,
    excluded: Family<IfDirReason, Counter>,
    pfc_frames: Family<IfDir, Counter>,
    xoff: Family<IfDirPrio, Counter>,
    xon: Family<IfDirPrio, Counter>,
    paused: Family<IfDirPrio, F64Counter>,
    requested: Family<IfDirPrio, F64Counter>,
    xoff_peak: Family<IfDirPrio, Gauge>,
    pause_frames: Family<IfDir, Counter>,
    pause_paused: Family<IfDir, F64Counter>,
    tracked: Family<IfDir, Gauge>,
    active: Family<IfDir, Gauge>,
    /// `events_lost`, `qp_insert_failed`, ... (IFACE_HEALTH): `roce_observer_<name>_total`.
    health: Vec<(&'static str, Family<IfDir, Counter>)>,
}

/// Per IP pair (top N), from the `flows` rows.
#[derive(Default)]
struct PairMetrics {
    pkts: Family<Pair, Counter>,
    ce: Family<Pair, Counter>,
    cnp: Family<Pair, Counter>,
    naks: Family<Pair, Counter>,
    gaps: Family<Pair, Counter>,
    retrans: Family<Pair, Counter>,
    off_dscp: Family<Pair, Counter>,
    not_ect: Family<Pair, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevState {
    device: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevMarking {
    device: String,
    marking: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevOnly {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevDirection {
    device: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevCommandCounter {
    device: String,
    command: String,
    counter: String,
}

/// The host's QPs (the RDMA subsystem's inventory): per device, never per QP.
#[derive(Default)]
struct HostQpMetrics {
    qps: Family<DevState, Gauge>,
    marking: Family<DevMarking, Gauge>,
    /// Label sets of `marking` set by the last read.
    last_marking: HashSet<DevMarking>,
    errors: Family<DevOnly, Counter>,
    packets: Family<DevDirection, Counter>,
    /// Per-QP-group counter increments (`--qp-counters`), added up per device, command and
    /// counter name: never per QP or per process.
    counters: Family<DevCommandCounter, Counter>,
    /// Label sets of `qps` set by the last read (set to 0 when a state empties).
    last: HashSet<DevState>,
}

/// The exporter's own health.
#[derive(Default)]
struct SelfMetrics {
    intervals: Family<IfaceOnly, Counter>,
    map_fill: Family<IfaceOnly, F64Gauge>,
    alerts: Family<RuleLabels, Counter>,
    write_failures: Family<Output, Counter>,
    last_interval: Family<IfaceOnly, F64Gauge>,
}

/// Registers `m` as `name` (with `unit`) in `reg` and records the sample name a scrape shows
/// for it (`roce_<prefix><name>[_<unit>]` plus `_total` for a counter, `_info` for info).
#[allow(clippy::too_many_arguments)]
fn add<M>(
    reg: &mut Registry,
    names: &mut Vec<String>,
    prefix: &str,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    m: M,
) where
    M: prometheus_client::registry::Metric + TypedMetric,
{
    let mut full = format!("roce_{prefix}{name}");
    if let Some(u) = &unit {
        full = format!("{full}_{}", u.as_str());
    }
    match M::TYPE {
        MetricType::Counter => full.push_str("_total"),
        MetricType::Info => full.push_str("_info"),
        _ => {}
    }
    names.push(full);
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, m),
        None => reg.register(name, help, m),
    }
}

/// The Int64 flow columns summed per pair, in the order of the sums (then off-policy DSCP).
const PAIR_COLUMNS: [&str; 7] = [
    "pkts",
    "ce",
    "cnp",
    "naks",
    "psn_gaps",
    "psn_retrans",
    "not_ect_data",
];

type FastHash = foldhash::fast::RandomState;

/// What the sink needs to know about the run.
#[derive(Clone, Debug)]
pub struct ExporterConfig {
    /// IP pairs per interface direction with their own series.
    pub top_pairs: usize,
    /// Expected DSCP per class (`ANY`: not checked), for the off-policy count.
    pub expected_dscp: [u8; class::COUNT],
    /// The per-QP table's size (map fill).
    pub max_qps: u64,
}

/// The metrics sink; its HTTP server stops when it is dropped.
pub struct MetricsSink {
    cfg: ExporterConfig,
    iface: IfaceMetrics,
    pairs: PairMetrics,
    me: SelfMetrics,
    host_qps: HostQpMetrics,
    nic: Vec<(Quantity, String)>,
    nic_families: HashMap<String, NicFamily>,
    /// Pairs with their own series (`src\0dst`), per interface direction (`iface\0dir`).
    named: HashMap<String, HashSet<String, FastHash>, FastHash>,
    registry: Arc<Registry>,
    /// Every sample name a scrape can show (docs, tests).
    names: Vec<String>,
    server: Option<MetricsServer>,
    /// The server's refused connections (registered whether it runs or not).
    server_counts: ServerCounts,
}

/// One NIC quantity's family (per priority or per interface).
enum NicFamily {
    Prio(Family<IfacePrio, F64Counter>),
    Iface(Family<IfaceOnly, F64Counter>),
}

impl MetricsSink {
    /// Registers every metric and starts serving on `addr` (bound before this returns, so a
    /// bad address fails at start-up).
    pub fn start(addr: SocketAddr, cfg: ExporterConfig) -> Result<MetricsSink, MetricsError> {
        Self::start_with(addr, cfg, SERVER_LIMITS)
    }

    /// As [`MetricsSink::start`], with other server limits (tests).
    pub fn start_with(
        addr: SocketAddr,
        cfg: ExporterConfig,
        limits: ServerLimits,
    ) -> Result<MetricsSink, MetricsError> {
        let mut s = MetricsSink::new(cfg);
        s.server = Some(MetricsServer::start_with(
            addr,
            Arc::clone(&s.registry),
            limits,
            s.server_counts.clone(),
        )?);
        Ok(s)
    }

    /// Every metric registered, no server (tests, `render`).
    pub fn new(cfg: ExporterConfig) -> MetricsSink {
        let mut reg = Registry::with_prefix("roce");
        let mut s = MetricsSink {
            cfg,
            iface: IfaceMetrics::default(),
            pairs: PairMetrics::default(),
            me: SelfMetrics::default(),
            host_qps: HostQpMetrics::default(),
            nic: Quantity::all().into_iter().map(|q| (q, q.name())).collect(),
            nic_families: HashMap::new(),
            named: HashMap::default(),
            registry: Arc::new(Registry::default()),
            names: Vec::new(),
            server: None,
            server_counts: ServerCounts::default(),
        };
        s.register(&mut reg);
        s.registry = Arc::new(reg);
        s
    }

    /// Every metric's sample name (counters with `_total`), series or not yet.
    pub fn metric_names(&self) -> &[String] {
        &self.names
    }

    /// A handle that renders what a scrape gets, usable after the sink moved into the
    /// collector (benchmarks).
    pub fn exposition(&self) -> Exposition {
        Exposition(Arc::clone(&self.registry))
    }

    /// The exposition a scrape would get now.
    pub fn render(&self) -> String {
        let mut body = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
        body
    }

    /// The server's counts (refused connections, whether it serves).
    pub fn server_counts(&self) -> &ServerCounts {
        &self.server_counts
    }

    /// The address the server listens on.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|s| s.addr)
    }

    /// Long by design: one line per metric (a declaration, not logic).
    fn register(&mut self, reg: &mut Registry) {
        let n = &mut self.names;
        let i = &self.iface;
        let secs = || Some(Unit::Seconds);
        add(
            reg,
            n,
            "",
            "frames",
            "Frames the programs saw",
            None,
            i.frames.clone(),
        );
        add(
            reg,
            n,
            "",
            "frame",
            "Wire bytes of those frames",
            Some(Unit::Bytes),
            i.bytes.clone(),
        );
        add(
            reg,
            n,
            "",
            "rocev2_packets",
            "RoCEv2 packets",
            None,
            i.roce.clone(),
        );
        add(
            reg,
            n,
            "",
            "untracked_packets",
            "RoCEv2 packets not kept per QP (the per-QP table full)",
            None,
            i.untracked.clone(),
        );
        add(
            reg,
            n,
            "",
            "excluded_frames",
            "Frames excluded, by reason (docs/metrics.md)",
            None,
            i.excluded.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_frames",
            "PFC frames",
            None,
            i.pfc_frames.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_xoff_frames",
            "PFC XOFF per priority",
            None,
            i.xoff.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_xon_frames",
            "PFC XON per priority",
            None,
            i.xon.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_paused",
            "Time the priority was paused (union of pause windows)",
            secs(),
            i.paused.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_requested_pause",
            "Pause time requested (quanta x 512 bit times, overlaps summed)",
            secs(),
            i.requested.clone(),
        );
        add(
            reg,
            n,
            "",
            "pfc_xoff_peak_per_second",
            "Largest XOFF count in one second during the last interval (the storm figure)",
            None,
            i.xoff_peak.clone(),
        );
        add(
            reg,
            n,
            "",
            "pause_frames",
            "802.3x PAUSE frames",
            None,
            i.pause_frames.clone(),
        );
        add(
            reg,
            n,
            "",
            "pause_paused",
            "Time paused by 802.3x PAUSE (union of pause windows)",
            secs(),
            i.pause_paused.clone(),
        );
        add(
            reg,
            n,
            "",
            "tracked_qps",
            "QP keys in the per-QP table",
            None,
            i.tracked.clone(),
        );
        add(
            reg,
            n,
            "",
            "active_qps",
            "QP keys with packets in the last interval",
            None,
            i.active.clone(),
        );
        let p = &self.pairs;
        add(
            reg,
            n,
            "",
            "pair_packets",
            "RoCEv2 packets per IP pair",
            None,
            p.pkts.clone(),
        );
        add(
            reg,
            n,
            "",
            "pair_ce_packets",
            "Packets marked CE",
            None,
            p.ce.clone(),
        );
        add(
            reg,
            n,
            "",
            "pair_cnp_packets",
            "CNPs carrying the pair's keys",
            None,
            p.cnp.clone(),
        );
        add(reg, n, "", "pair_naks", "NAKs", None, p.naks.clone());
        add(
            reg,
            n,
            "",
            "pair_psn_gaps",
            "PSN gaps (loss seen by the PSN analysis)",
            None,
            p.gaps.clone(),
        );
        add(
            reg,
            n,
            "",
            "pair_retransmitted_packets",
            "Packets whose PSN was not ahead (go-back-N resends)",
            None,
            p.retrans.clone(),
        );
        add(
            reg,
            n,
            "",
            "pair_dscp_off_policy_packets",
            "Packets whose DSCP is not the policy's for their class",
            None,
            p.off_dscp.clone(),
        );
        add(
            reg,
            n,
            "",
            "pair_not_ect_packets",
            "Data packets sent Not-ECT",
            None,
            p.not_ect.clone(),
        );
        let obs = reg.sub_registry_with_prefix("observer");
        let m = &self.me;
        let o = "observer_";
        add(
            obs,
            n,
            o,
            "intervals",
            "Intervals accounted",
            None,
            m.intervals.clone(),
        );
        add(
            obs,
            n,
            o,
            "qp_map_fill_ratio",
            "Tracked keys over the per-QP table's size",
            None,
            m.map_fill.clone(),
        );
        add(
            obs,
            n,
            o,
            "alerts",
            "Alerts emitted, by rule",
            None,
            m.alerts.clone(),
        );
        add(
            obs,
            n,
            o,
            "output_write_failures",
            "Failed writes of an output (output_write_failed alerts)",
            None,
            m.write_failures.clone(),
        );
        add(
            obs,
            n,
            o,
            "last_interval_end_timestamp",
            "End of the last interval accounted (UNIX time)",
            secs(),
            m.last_interval.clone(),
        );
        add(
            obs,
            n,
            o,
            "metrics_connections_refused",
            "Connections to this endpoint refused or closed by it, by reason (limit, descriptors, timeout, dropped)",
            None,
            self.server_counts.refused.clone(),
        );
        for r in Refused::ALL {
            // every reason a series from the start, 0 until it happens
            self.server_counts.refused(r);
        }
        for c in contract::schema::IFACE_HEALTH {
            let f = Family::<IfDir, Counter>::default();
            add(obs, n, o, c.name, c.doc, None, f.clone());
            self.iface.health.push((c.name, f));
        }
        let build = Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]);
        add(obs, n, o, "build", "roce-observe's version", None, build);
        self.register_nic(reg);
        self.register_host_qps(reg);
    }

    /// `roce_host_*`: the host's QPs per RDMA device (docs/qps.md).
    fn register_host_qps(&mut self, reg: &mut Registry) {
        let (n, h) = (&mut self.names, &self.host_qps);
        let reg = reg.sub_registry_with_prefix("host");
        add(
            reg,
            n,
            "host_",
            "qps",
            "QPs of the host per RDMA device and state (the last read)",
            None,
            h.qps.clone(),
        );
        add(
            reg,
            n,
            "host_",
            "qps_marking",
            "QPs of the host per RDMA device and marking verdict (ok, off_policy, lossy, unknown; the last read)",
            None,
            h.marking.clone(),
        );
        add(
            reg,
            n,
            "host_",
            "qp_errors",
            "QPs that moved to ERR or SQE, per RDMA device",
            None,
            h.errors.clone(),
        );
        add(
            reg,
            n,
            "host_",
            "qp_packets",
            "Packets of the host's QPs from their PSNs (first transmissions sent, in-sequence received), per RDMA device and direction (tx, rx)",
            None,
            h.packets.clone(),
        );
        add(
            reg,
            n,
            "host_",
            "qp_counter_events",
            "Increments of the per-QP-group hardware counters (counter binding, --qp-counters), added up per RDMA device, command of the group's process (\"-\" when grouped by QP type only) and counter name",
            None,
            h.counters.clone(),
        );
    }

    fn on_qps(&mut self, b: &RecordBatch) -> Result<(), ColumnError> {
        let t = schema::qps();
        let dev = t.strings(b, "device", ROWS)?;
        let state = t.strings(b, "state", ROWS)?;
        let marking = t.strings(b, "marking", ROWS)?;
        let (tx, rx) = (t.ints(b, "tx_pkts", ROWS)?, t.ints(b, "rx_pkts", ROWS)?);
        let mut now: HashMap<DevState, i64> = HashMap::new();
        let mut verdicts: HashMap<DevMarking, i64> = HashMap::new();
        let mut packets: HashMap<DevDirection, u64> = HashMap::new();
        for row in 0..b.num_rows() {
            let device = dev.value(row).to_string();
            *verdicts
                .entry(DevMarking {
                    device: device.clone(),
                    marking: marking.value(row).to_string(),
                })
                .or_default() += 1;
            *now.entry(DevState {
                device: device.clone(),
                state: state.value(row).to_string(),
            })
            .or_default() += 1;
            for (direction, c) in [("tx", tx), ("rx", rx)] {
                if !c.is_null(row) {
                    *packets
                        .entry(DevDirection {
                            device: device.clone(),
                            direction: direction.into(),
                        })
                        .or_default() += c.value(row).max(0) as u64;
                }
            }
        }
        let h = &mut self.host_qps;
        for gone in h.last.iter().filter(|l| !now.contains_key(*l)) {
            h.qps.get_or_create(gone).set(0);
        }
        for (l, v) in &now {
            h.qps.get_or_create(l).set(*v);
        }
        h.last = now.into_keys().collect();
        for gone in h.last_marking.iter().filter(|l| !verdicts.contains_key(*l)) {
            h.marking.get_or_create(gone).set(0);
        }
        for (l, v) in &verdicts {
            h.marking.get_or_create(l).set(*v);
        }
        h.last_marking = verdicts.into_keys().collect();
        for (l, v) in packets {
            h.packets.get_or_create(&l).inc_by(v);
        }
        Ok(())
    }

    /// The NIC's vendor-neutral counters: `roce_nic_<name>_total` (µs as seconds).
    fn register_nic(&mut self, reg: &mut Registry) {
        let nic = reg.sub_registry_with_prefix("nic");
        for (q, name) in &self.nic {
            let (base, unit) = nic_metric_name(*q, name);
            if self.nic_families.contains_key(&base) {
                continue;
            }
            let help = format!("NIC counter {name} (docs/nic.md)");
            let n = &mut self.names;
            let fam = if q.priority().is_some() {
                let f = Family::default();
                add(nic, n, "nic_", &base, &help, unit, f.clone());
                NicFamily::Prio(f)
            } else {
                let f = Family::default();
                add(nic, n, "nic_", &base, &help, unit, f.clone());
                NicFamily::Iface(f)
            };
            self.nic_families.insert(base, fam);
        }
    }

    fn on_interfaces(&mut self, b: &RecordBatch) -> Result<(), ColumnError> {
        let t = schema::interfaces();
        let (ifc, dir) = (t.strings(b, "iface", ROWS)?, t.strings(b, "dir", ROWS)?);
        for row in 0..b.num_rows() {
            let l = IfDir {
                iface: ifc.value(row).to_string(),
                dir: dir.value(row).to_string(),
            };
            let v = |n: &str| int_at(b, n, row);
            let f = |n: &str| float_at(b, n, row);
            let i = &self.iface;
            i.frames.get_or_create(&l).inc_by(v("frames")?);
            i.bytes.get_or_create(&l).inc_by(v("bytes")?);
            i.roce.get_or_create(&l).inc_by(v("roce")?);
            i.untracked.get_or_create(&l).inc_by(v("roce_untracked")?);
            for r in reason::NAMES {
                let k = IfDirReason {
                    iface: l.iface.clone(),
                    dir: l.dir.clone(),
                    reason: r.to_string(),
                };
                i.excluded
                    .get_or_create(&k)
                    .inc_by(v(&format!("excluded_{r}"))?);
            }
            i.pfc_frames.get_or_create(&l).inc_by(v("pfc_frames")?);
            for p in 0..8 {
                let k = IfDirPrio {
                    iface: l.iface.clone(),
                    dir: l.dir.clone(),
                    priority: p.to_string(),
                };
                i.xoff
                    .get_or_create(&k)
                    .inc_by(v(&format!("pfc_xoff_p{p}"))?);
                i.xon.get_or_create(&k).inc_by(v(&format!("pfc_xon_p{p}"))?);
                i.paused
                    .get_or_create(&k)
                    .inc_by(f(&format!("pfc_paused_s_p{p}"))?);
                i.requested
                    .get_or_create(&k)
                    .inc_by(f(&format!("pfc_pause_s_p{p}"))?);
                i.xoff_peak
                    .get_or_create(&k)
                    .set(v(&format!("pfc_xoff_peak_1s_p{p}"))? as i64);
            }
            i.pause_frames.get_or_create(&l).inc_by(v("pause_frames")?);
            i.pause_paused
                .get_or_create(&l)
                .inc_by(f("pause_paused_s")?);
            let tracked = v("tracked_qps")?;
            i.tracked.get_or_create(&l).set(tracked as i64);
            i.active.get_or_create(&l).set(v("active_qps")? as i64);
            for (name, fam) in &i.health {
                fam.get_or_create(&l).inc_by(v(name)?);
            }
            let me = IfaceOnly {
                iface: l.iface.clone(),
            };
            if l.dir == "ingress" {
                self.me.intervals.get_or_create(&me).inc();
                let fill = tracked as f64 / self.cfg.max_qps.max(1) as f64;
                self.me.map_fill.get_or_create(&me).set(fill);
            }
        }
        Ok(())
    }

    /// Per-pair sums of the interval's flow rows, then into the pair series: O(rows) with one
    /// hash per row and no allocation per row; at most `top_pairs` named series plus `other`
    /// per interface direction are touched.
    fn on_flows(&mut self, b: &RecordBatch) -> Result<(), ColumnError> {
        let t = schema::flows();
        let s = |n: &str| t.strings(b, n, ROWS);
        let (ifc, dir, src, dst) = (s("iface")?, s("dir")?, s("src")?, s("dst")?);
        let ints: Vec<&Int64Array> = PAIR_COLUMNS
            .iter()
            .map(|n| t.ints(b, n, ROWS))
            .collect::<Result<_, _>>()?;
        let off = self.off_policy_dscp(b)?;
        let row_sums = |row: usize, e: &mut [u64; 8]| {
            for (j, c) in ints.iter().enumerate() {
                if !c.is_null(row) {
                    e[j] += c.value(row).max(0) as u64;
                }
            }
            e[7] += off[row];
        };
        // Is there room for a new named pair on a side with rows (one interface per batch; a
        // side not seen yet has room too)?
        let mut sides = [false; observer_common::maps::dir::COUNT];
        for row in 0..b.num_rows() {
            let d = dir.value(row);
            if let Some(k) = observer_common::maps::dir::NAMES
                .iter()
                .position(|n| *n == d)
            {
                sides[k] = true;
            }
        }
        let room = sides
            .iter()
            .zip(observer_common::maps::dir::NAMES)
            .any(|(&on, d)| {
                let side = format!("{}\0{d}", if b.num_rows() > 0 { ifc.value(0) } else { "" });
                on && self
                    .named
                    .get(&side)
                    .is_none_or(|v| v.len() < self.cfg.top_pairs)
            });
        if !room {
            // every side full: a row is a named pair's or `other`'s, one small lookup each
            let mut named_sums: HashMap<usize, [u64; 8], FastHash> = HashMap::default();
            let mut first: HashMap<&str, usize, FastHash> = HashMap::default();
            let mut unnamed: HashMap<(&str, &str, &str, &str), [u64; 8], FastHash> =
                HashMap::default();
            let (mut side, mut pair) = (String::new(), String::new());
            for row in 0..b.num_rows() {
                let (i, d) = (ifc.value(row), dir.value(row));
                side.clear();
                side.push_str(i);
                side.push('\0');
                side.push_str(d);
                pair.clear();
                pair.push_str(src.value(row));
                pair.push('\0');
                pair.push_str(dst.value(row));
                let own = self
                    .named
                    .get(side.as_str())
                    .and_then(|n| n.get(pair.as_str()));
                match own {
                    Some(key) => {
                        let r0 = *first.entry(key.as_str()).or_insert(row);
                        row_sums(row, named_sums.entry(r0).or_default());
                    }
                    None => row_sums(
                        row,
                        unnamed
                            .entry((i, d, src.value(row), dst.value(row)))
                            .or_default(),
                    ),
                }
            }
            for (r0, v) in named_sums {
                self.pair_inc(
                    ifc.value(r0),
                    dir.value(r0),
                    src.value(r0),
                    dst.value(r0),
                    &v,
                );
            }
            // A pair with faults gets a series of its own while the fault slots (`top_pairs`
            // more) last, the most faults first: the one bad pair never hides in `other`.
            let mut unnamed: Vec<_> = unnamed.into_iter().collect();
            unnamed.sort_by(|a, b| {
                fault_count(&b.1)
                    .cmp(&fault_count(&a.1))
                    .then(b.1[0].cmp(&a.1[0]))
                    .then(a.0.cmp(&b.0))
            });
            let mut other: HashMap<(&str, &str), [u64; 8], FastHash> = HashMap::default();
            for ((i, d, sr, ds), v) in unnamed {
                let side = format!("{i}\0{d}");
                let named = self.named.entry(side).or_default();
                if faulty(&v) && named.len() < 2 * self.cfg.top_pairs {
                    named.insert(format!("{sr}\0{ds}"));
                    self.pair_inc(i, d, sr, ds, &v);
                } else {
                    let o = other.entry((i, d)).or_default();
                    for (x, y) in o.iter_mut().zip(v) {
                        *x += y;
                    }
                }
            }
            for ((i, d), v) in other {
                self.pair_inc(i, d, "other", "other", &v);
            }
            return Ok(());
        }
        // [pkts, ce, cnp, naks, gaps, retrans, not_ect, off-policy DSCP] per pair
        let mut idx: HashMap<(&str, &str, &str, &str), usize, FastHash> =
            HashMap::with_capacity_and_hasher(b.num_rows(), FastHash::default());
        let mut sums: Vec<(usize, [u64; 8])> = Vec::new();
        for row in 0..b.num_rows() {
            let k = (
                ifc.value(row),
                dir.value(row),
                src.value(row),
                dst.value(row),
            );
            let i = *idx.entry(k).or_insert_with(|| {
                sums.push((row, [0; 8]));
                sums.len() - 1
            });
            row_sums(row, &mut sums[i].1);
        }
        // newcomers get series by packets, largest first
        sums.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then(a.0.cmp(&b.0)));
        let mut other: HashMap<(&str, &str), [u64; 8], FastHash> = HashMap::default();
        let (mut side, mut pair) = (String::new(), String::new());
        for (r0, v) in sums {
            let (i, d) = (ifc.value(r0), dir.value(r0));
            side.clear();
            side.push_str(i);
            side.push('\0');
            side.push_str(d);
            pair.clear();
            pair.push_str(src.value(r0));
            pair.push('\0');
            pair.push_str(dst.value(r0));
            if !self.named.contains_key(side.as_str()) {
                self.named.insert(side.clone(), HashSet::default());
            }
            let named = self.named.get_mut(side.as_str()).expect("inserted above");
            let own = named.contains(pair.as_str())
                || ((named.len() < self.cfg.top_pairs
                    || (faulty(&v) && named.len() < 2 * self.cfg.top_pairs))
                    && named.insert(pair.clone()));
            if own {
                self.pair_inc(i, d, src.value(r0), dst.value(r0), &v);
            } else {
                let o = other.entry((i, d)).or_default();
                for (x, y) in o.iter_mut().zip(v) {
                    *x += y;
                }
            }
        }
        for ((i, d), v) in other {
            self.pair_inc(i, d, "other", "other", &v);
        }
        Ok(())
    }

    /// Adds one pair's interval sums to its series.
    fn pair_inc(&self, iface: &str, dir: &str, src: &str, dst: &str, v: &[u64; 8]) {
        let l = Pair {
            iface: iface.to_string(),
            dir: dir.to_string(),
            src: src.to_string(),
            dst: dst.to_string(),
        };
        let p = &self.pairs;
        for (fam, x) in [
            (&p.pkts, v[0]),
            (&p.ce, v[1]),
            (&p.cnp, v[2]),
            (&p.naks, v[3]),
            (&p.gaps, v[4]),
            (&p.retrans, v[5]),
            (&p.not_ect, v[6]),
            (&p.off_dscp, v[7]),
        ] {
            fam.get_or_create(&l).inc_by(x);
        }
    }

    /// Per row: packets whose DSCP differs from the policy's for their class (the histogram
    /// lists read through their offsets: no array per row).
    fn off_policy_dscp(&self, b: &RecordBatch) -> Result<Vec<u64>, ColumnError> {
        let mut off = vec![0u64; b.num_rows()];
        for (c, name) in class::NAMES.iter().enumerate() {
            let want = self.cfg.expected_dscp[c];
            if want == ANY {
                continue;
            }
            let col = schema::flows().lists(b, &format!("dscp_{name}"), ROWS)?;
            let items = col.values().as_struct();
            let vals = items.column(0).as_primitive::<Int16Type>().values();
            let pkts = items.column(1).as_primitive::<Int64Type>().values();
            let offs = col.value_offsets();
            for (row, o) in off.iter_mut().enumerate() {
                if col.is_null(row) {
                    continue;
                }
                let (lo, hi) = (offs[row] as usize, offs[row + 1] as usize);
                for k in lo..hi.min(vals.len()).min(pkts.len()) {
                    if vals[k] != want as i16 {
                        *o += pkts[k].max(0) as u64;
                    }
                }
            }
        }
        Ok(off)
    }

    fn on_nic(&mut self, b: &RecordBatch) -> Result<(), ColumnError> {
        let t = schema::nic();
        let ifc = t.strings(b, "iface", ROWS)?;
        let cols: Vec<&Int64Array> = self
            .nic
            .iter()
            .map(|(_, name)| t.ints(b, name, ROWS))
            .collect::<Result<_, _>>()?;
        for row in 0..b.num_rows() {
            for ((q, name), c) in self.nic.iter().zip(&cols) {
                if c.is_null(row) {
                    continue;
                }
                let (base, unit) = nic_metric_name(*q, name);
                let x = c.value(row).max(0) as f64;
                let x = if matches!(unit, Some(Unit::Seconds)) {
                    x / 1e6
                } else {
                    x
                };
                let iface = ifc.value(row).to_string();
                match self.nic_families.get(&base) {
                    Some(NicFamily::Prio(f)) => {
                        let l = IfacePrio {
                            iface,
                            priority: q.priority().unwrap_or(0).to_string(),
                        };
                        f.get_or_create(&l).inc_by(x);
                    }
                    Some(NicFamily::Iface(f)) => {
                        f.get_or_create(&IfaceOnly { iface }).inc_by(x);
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }
}

/// What a scrape encodes (the registry), shareable.
#[derive(Clone)]
pub struct Exposition(Arc<Registry>);

impl Exposition {
    /// The OpenMetrics text a scrape gets now.
    pub fn render(&self) -> String {
        let mut body = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.0);
        body
    }
}

/// A NIC quantity's metric name (without `roce_nic_` and `_total`) and unit: the priority
/// suffix dropped (it is a label), `_us` as seconds.
fn nic_metric_name(q: Quantity, name: &str) -> (String, Option<Unit>) {
    let base = match q.priority() {
        Some(p) => name
            .strip_suffix(&format!("_p{p}"))
            .unwrap_or(name)
            .to_string(),
        None => name.to_string(),
    };
    if let Some(b) = base.strip_suffix("_us") {
        return (b.to_string(), Some(Unit::Seconds));
    }
    if let Some(b) = base.strip_suffix("_bytes") {
        return (b.to_string(), Some(Unit::Bytes));
    }
    (base, None)
}

/// A pair's interval faults ([`PAIR_COLUMNS`] order plus off-policy DSCP): NAKs, PSN gaps,
/// resends, Not-ECT data packets and packets off the DSCP policy (CE is congestion, not a
/// fault).
fn fault_count(v: &[u64; 8]) -> u64 {
    v[3] + v[4] + v[5] + v[6] + v[7]
}

fn faulty(v: &[u64; 8]) -> bool {
    fault_count(v) > 0
}

/// Where the sink's batches come from, as its column errors name it.
const ROWS: &str = "the interval's rows";

/// Value of the `interfaces` table's Int64 column `n` at `row`, read through the schema (null:
/// 0; negative clamped to 0; an undefined, missing or retyped column is an error).
fn int_at(b: &RecordBatch, n: &str, row: usize) -> Result<u64, ColumnError> {
    let c = schema::interfaces().ints(b, n, ROWS)?;
    Ok(if c.is_null(row) {
        0
    } else {
        c.value(row).max(0) as u64
    })
}

/// Value of the `interfaces` table's Float64 column `n` at `row` (null: 0, as without a link
/// speed), read through the schema.
fn float_at(b: &RecordBatch, n: &str, row: usize) -> Result<f64, ColumnError> {
    let c = schema::interfaces().floats(b, n, ROWS)?;
    Ok(if c.is_null(row) {
        0.0
    } else {
        c.value(row).max(0.0)
    })
}

impl Sink for MetricsSink {
    fn name(&self) -> &'static str {
        "metrics"
    }
    fn alert(&mut self, a: &Alert, _run: &RunInfo) {
        let l = RuleLabels {
            rule: a.rule.name().to_string(),
            severity: a.severity.as_str().to_string(),
        };
        self.me.alerts.get_or_create(&l).inc();
        if a.rule == contract::alert::Rule::OutputWriteFailed {
            let o = Output {
                output: a.key.other.clone().unwrap_or_default(),
            };
            self.me.write_failures.get_or_create(&o).inc();
        }
        if a.rule == contract::alert::Rule::QpError {
            let d = DevOnly {
                device: a.key.iface.clone(),
            };
            self.host_qps.errors.get_or_create(&d).inc();
        }
    }
    fn interval(&mut self, rows: &IntervalRows<'_>) -> Result<(), OutputError> {
        self.on_interfaces(rows.interfaces)?;
        self.on_flows(rows.flows)?;
        if let Some(ifc) = rows
            .interfaces
            .column_by_name("iface")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .filter(|c| !c.is_empty())
        {
            let me = IfaceOnly {
                iface: ifc.value(0).to_string(),
            };
            self.me
                .last_interval
                .get_or_create(&me)
                .set(rows.end_ns as f64 / 1e9);
        }
        Ok(())
    }
    fn nic(&mut self, rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        self.on_nic(rows)?;
        Ok(())
    }
    fn qps(&mut self, rows: &RecordBatch, _t_ns: u64) -> Result<(), OutputError> {
        self.on_qps(rows)?;
        Ok(())
    }
    fn qp_counters(
        &mut self,
        groups: &[qps::counters::CounterGroup],
        _t_ns: u64,
    ) -> Result<(), OutputError> {
        for g in groups {
            for (name, v) in g.delta.iter().filter(|(_, v)| **v > 0) {
                let l = DevCommandCounter {
                    device: g.dev.clone(),
                    command: g.comm.clone().unwrap_or_else(|| "-".into()),
                    counter: name.clone(),
                };
                self.host_qps.counters.get_or_create(&l).inc_by(*v);
            }
        }
        Ok(())
    }
    fn stats(&self) -> Option<serde_json::Value> {
        let addr = self.addr()?;
        let c = &self.server_counts;
        let refused: serde_json::Map<String, serde_json::Value> = Refused::ALL
            .iter()
            .map(|r| (r.name().to_string(), c.refused(*r).into()))
            .collect();
        Some(serde_json::json!({
            "listen": addr.to_string(),
            "serving": c.serving(),
            "connections_refused": refused,
        }))
    }
}

/// The HTTP server's bounds (docs/monitoring.md#the-endpoint).
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Connections served at once; one more is closed as soon as it is accepted (counted,
    /// `reason="limit"`).
    pub max_connections: usize,
    /// A connection that sends no complete request header within this (also between the
    /// requests of a kept-alive connection) is closed (counted, `reason="timeout"`).
    pub header_timeout: Duration,
    /// A connection is closed after this long, even if busy (a reader that never reads).
    pub max_lifetime: Duration,
    /// After a descriptor shortage (EMFILE, ENFILE) accepting pauses this long.
    pub accept_backoff: Duration,
    /// At stop, requests in progress get this long; connections still open are then dropped.
    pub stop_grace: Duration,
}

/// The limits `--metrics` serves with.
pub const SERVER_LIMITS: ServerLimits = ServerLimits {
    max_connections: 64,
    header_timeout: Duration::from_secs(10),
    max_lifetime: Duration::from_secs(60),
    accept_backoff: Duration::from_millis(100),
    stop_grace: Duration::from_secs(1),
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedReason {
    reason: String,
}

/// Why a connection was refused or closed by the server, the `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// More than [`ServerLimits::max_connections`] at once: closed when accepted.
    Limit,
    /// Accepting failed for want of file descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM): the
    /// connection waits in the kernel's backlog; counted per failed accept.
    Descriptors,
    /// No complete request header in [`ServerLimits::header_timeout`].
    Timeout,
    /// Still open after [`ServerLimits::max_lifetime`], or at stop after the grace: dropped.
    Dropped,
}

impl Refused {
    pub const ALL: [Refused; 4] = [
        Refused::Limit,
        Refused::Descriptors,
        Refused::Timeout,
        Refused::Dropped,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Refused::Limit => "limit",
            Refused::Descriptors => "descriptors",
            Refused::Timeout => "timeout",
            Refused::Dropped => "dropped",
        }
    }
}

/// The server's counts, shared with the registry (`roce_observer_metrics_connections_refused_total`).
#[derive(Clone, Default)]
pub struct ServerCounts {
    refused: Family<RefusedReason, Counter>,
    serving: Arc<AtomicBool>,
}

impl ServerCounts {
    fn inc(&self, r: Refused) {
        self.refused
            .get_or_create(&RefusedReason {
                reason: r.name().to_string(),
            })
            .inc();
    }
    /// Connections refused or closed for `r` so far.
    pub fn refused(&self, r: Refused) -> u64 {
        self.refused
            .get_or_create(&RefusedReason {
                reason: r.name().to_string(),
            })
            .get()
    }
    /// Whether the server thread is serving (false once it stopped, for whatever reason).
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }
}

/// The HTTP server: a thread with a single-threaded tokio runtime serving `/metrics`.
pub struct MetricsServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
    counts: ServerCounts,
}

impl MetricsServer {
    /// Binds `addr` now (errors name it), then serves from a thread with [`SERVER_LIMITS`].
    pub fn start(addr: SocketAddr, reg: Arc<Registry>) -> Result<MetricsServer, MetricsError> {
        Self::start_with(addr, reg, SERVER_LIMITS, ServerCounts::default())
    }

    /// As [`MetricsServer::start`], with other limits, counting into `counts`.
    pub fn start_with(
        addr: SocketAddr,
        reg: Arc<Registry>,
        limits: ServerLimits,
        counts: ServerCounts,
    ) -> Result<MetricsServer, MetricsError> {
        let l =
            std::net::TcpListener::bind(addr).map_err(|err| MetricsError::Bind { addr, err })?;
        l.set_nonblocking(true)
            .map_err(|err| MetricsError::Bind { addr, err })?;
        let bound = l.local_addr().unwrap_or(addr);
        let (tx, rx) = tokio::sync::watch::channel(false);
        counts.serving.store(true, Ordering::Relaxed);
        let c = counts.clone();
        let thread = std::thread::Builder::new()
            .name("roce-metrics".into())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| serve(l, reg, rx, limits, c.clone()));
                let stopped = std::panic::catch_unwind(run);
                c.serving.store(false, Ordering::Relaxed);
                match stopped {
                    Ok(true) => {}
                    Ok(false) => tracing::error!(
                        addr = %bound,
                        "metrics server stopped before the run: scrapes are refused from now on"
                    ),
                    Err(_) => tracing::error!(
                        addr = %bound,
                        "metrics server thread panicked: scrapes are refused from now on"
                    ),
                }
            })
            .map_err(MetricsError::Thread)?;
        tracing::info!(addr = %bound, max_connections = limits.max_connections, "serving Prometheus metrics on /metrics");
        Ok(MetricsServer {
            addr: bound,
            stop: Some(tx),
            thread: Some(thread),
            counts,
        })
    }

    /// The server's counts.
    pub fn counts(&self) -> &ServerCounts {
        &self.counts
    }
}

/// EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or the system is out of descriptors or
/// buffers; the connection stays in the backlog until one is free.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Serves until the stop; true if stopped on request, false if it could not go on.
fn serve(
    l: std::net::TcpListener,
    reg: Arc<Registry>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: ServerLimits,
    counts: ServerCounts,
) -> bool {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "metrics server: no runtime");
            return false;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(l) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "metrics server: listener");
                return false;
            }
        };
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move |headers: axum::http::HeaderMap| {
                    let reg = Arc::clone(&reg);
                    async move {
                        let accept = headers
                            .get(axum::http::header::ACCEPT)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("");
                        scrape(&reg, wants_openmetrics(accept))
                    }
                }),
            )
            .route(
                "/",
                axum::routing::get(|| async { "roce-observe: metrics at /metrics\n" }),
            );
        let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        let mut conns = tokio::task::JoinSet::new();
        // descriptor shortage: failed accepts since it began (logged when it begins and ends)
        let mut short: u64 = 0;
        loop {
            let accepted = tokio::select! {
                _ = stop.changed() => break,
                a = listener.accept() => a,
                // reap finished connections as they end
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            };
            let sock = match accepted {
                Ok((sock, _peer)) => sock,
                Err(e) if out_of_descriptors(&e) => {
                    counts.inc(Refused::Descriptors);
                    short += 1;
                    if short == 1 {
                        tracing::warn!(error = %e, backoff_ms = limits.accept_backoff.as_millis() as u64,
                            connections = conns.len(),
                            "metrics server out of file descriptors: not accepting for now (counted)");
                    }
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(limits.accept_backoff) => continue,
                    }
                }
                Err(e) => {
                    // the peer gave up before the accept (ECONNABORTED, ...): the next one
                    tracing::debug!(error = %e, "metrics server: accept failed");
                    continue;
                }
            };
            if short > 0 {
                tracing::info!(failed_accepts = short, "metrics server accepting again");
                short = 0;
            }
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                counts.inc(Refused::Limit);
                drop(sock);
                continue;
            };
            let svc = hyper_util::service::TowerToHyperService::new(app.clone());
            let (c, s) = (counts.clone(), stop.clone());
            conns.spawn(async move {
                connection(sock, svc, s, limits, &c).await;
                drop(permit);
            });
        }
        drop(listener);
        // the connections saw the stop: each ends within the grace; a margin, then dropped
        let all = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(limits.stop_grace + Duration::from_millis(200), all)
            .await
            .is_err()
        {
            conns.abort_all();
        }
        true
    })
}

/// One connection, HTTP/1 with the header timeout, closed at the stop or after its lifetime
/// (gracefully, then dropped after the grace).
async fn connection(
    sock: tokio::net::TcpStream,
    svc: hyper_util::service::TowerToHyperService<axum::Router>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: ServerLimits,
    counts: &ServerCounts,
) {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let conn = b.serve_connection(hyper_util::rt::TokioIo::new(sock), svc);
    tokio::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = stop.changed() => None,
        _ = tokio::time::sleep(limits.max_lifetime) => None,
    };
    let ended = match ended {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(limits.stop_grace, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => {
                    counts.inc(Refused::Dropped);
                    return;
                }
            }
        }
    };
    if let Err(e) = ended {
        if e.is_timeout() {
            counts.inc(Refused::Timeout);
        } else {
            tracing::debug!(error = %e, "metrics connection ended with an error");
        }
    }
}

/// Whether a scrape's `Accept` header takes OpenMetrics: Prometheus asks for it first, and an
/// empty or `*/*` header gets it as before; a client naming the classic text format
/// (`text/plain; version=0.0.4`: promtool's users, older scrapers) without OpenMetrics gets
/// that ([`classic_text`]).
pub fn wants_openmetrics(accept: &str) -> bool {
    let a = accept.to_ascii_lowercase();
    a.is_empty() || a.contains("application/openmetrics-text") || !a.contains("text/plain")
}

fn scrape(reg: &Registry, openmetrics: bool) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, reg) {
        Ok(()) if openmetrics => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            classic_text(&body),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n").into_response(),
    }
}

/// OpenMetrics text as the classic Prometheus text format (0.0.4): a counter family's `HELP`
/// and `TYPE` named as its `_total` samples, an info family as a gauge of its `_info` samples,
/// no `UNIT` lines, no `# EOF`. The samples are the same lines.
pub fn classic_text(om: &str) -> String {
    let mut kinds: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for l in om.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            kinds.insert(name, kind);
        }
    }
    let renamed = |name: &str| -> (String, Option<&str>) {
        match kinds.get(name).copied() {
            Some("counter") => (format!("{name}_total"), None),
            Some("info") => (format!("{name}_info"), Some("gauge")),
            Some("unknown") => (name.to_string(), Some("untyped")),
            Some(k) => (name.to_string(), Some(k)),
            None => (name.to_string(), None),
        }
    };
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = l.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            let (n, k) = renamed(name);
            out.push_str(&format!("# TYPE {n} {}\n", k.unwrap_or(kind)));
            continue;
        }
        if let Some(rest) = l.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
        {
            out.push_str(&format!("# HELP {} {help}\n", renamed(name).0));
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

impl Drop for MetricsServer {
    /// Stops within [`ServerLimits::stop_grace`] (and a margin): requests in progress get the
    /// grace, connections still open are then dropped.
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    /// The classic text format: counters' and infos' metadata named as their samples, no
    /// UNIT or EOF; OpenMetrics only when asked or when anything is.
    #[test]
    fn classic_text_for_clients_that_ask_for_it() {
        let om = "# HELP a_frames Frames.\n# TYPE a_frames counter\n# UNIT a_frames bytes\n\
                  a_frames_total{x=\"1\"} 3\n# HELP b Build.\n# TYPE b info\nb_info{v=\"1\"} 1\n\
                  # TYPE c gauge\nc 2\n# EOF\n";
        assert_eq!(
            super::classic_text(om),
            "# HELP a_frames_total Frames.\n# TYPE a_frames_total counter\n\
             a_frames_total{x=\"1\"} 3\n# HELP b_info Build.\n# TYPE b_info gauge\n\
             b_info{v=\"1\"} 1\n# TYPE c gauge\nc 2\n"
        );
        assert!(super::wants_openmetrics(""));
        assert!(super::wants_openmetrics("*/*"));
        assert!(super::wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        ));
        assert!(!super::wants_openmetrics("text/plain; version=0.0.4"));
    }

    use super::*;
    use crate::pipeline::rows::{FlowsBuilder, flows_schema};
    use observer_common::maps::{QpKey, QpValue, dir};

    fn key(pair: u8, qp: u32) -> QpKey {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        src[12..].copy_from_slice(&[10, 0, 0, pair]);
        let mut dst = src;
        dst[15] = 200;
        QpKey {
            src_ip: src,
            dst_ip: dst,
            dest_qp: qp,
            dir: dir::INGRESS,
            _pad: [0; 3],
        }
    }

    /// One interval: pair p (1..=n) sends p * 10 packets on two QPs, DSCP 0 on QP 2.
    fn flows(n: u8, scale: u64) -> RecordBatch {
        flows_of(1..=n, scale, true)
    }

    /// Pairs `10.0.0.p -> 10.0.0.200` for p in `pairs`, two QPs each with p * 5 * scale packets,
    /// QP 2's at DSCP 0 (off the policy) when `off`.
    fn flows_of(pairs: std::ops::RangeInclusive<u8>, scale: u64, off: bool) -> RecordBatch {
        let mut b = FlowsBuilder::new("h", "live", "e0", 0, 1_000_000_000);
        for p in pairs {
            for qp in [1, 2] {
                let mut v = QpValue::ZERO;
                v.pkts = p as u64 * 5 * scale;
                v.ecn_hist[class::DATA][2] = v.pkts as u32;
                let d = if qp == 2 && off { 0 } else { 26 };
                v.dscp_hist[class::DATA][d] = v.pkts as u32;
                b.push(&key(p, qp), &v, false, false, 0);
            }
        }
        b.finish(&flows_schema()).unwrap()
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The sink reads its rows through the schema: a column renamed or retyped in the rows is
    /// an error naming it (the collector reports it as a failed output), never a zero.
    #[test]
    fn a_renamed_or_retyped_column_is_an_error_not_zero() {
        let mut s = MetricsSink::new(ExporterConfig {
            top_pairs: 3,
            expected_dscp: [26, 26, 48],
            max_qps: 100,
        });
        let good = flows(3, 1);
        s.on_flows(&good).unwrap();
        for (col, renamed) in [
            ("pkts", true),
            ("dst", true),
            ("dscp_data", true),
            ("pkts", false),
        ] {
            let mut fields: Vec<arrow::datatypes::Field> = good
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            let mut cols = good.columns().to_vec();
            let i = fields.iter().position(|f| f.name() == col).unwrap();
            if renamed {
                fields[i] = fields[i].clone().with_name(format!("{col}_renamed"));
            } else {
                cols[i] =
                    arrow::compute::cast(&cols[i], &arrow::datatypes::DataType::Int32).unwrap();
                fields[i] = fields[i]
                    .clone()
                    .with_data_type(arrow::datatypes::DataType::Int32);
            }
            let b = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols)
                .unwrap();
            let e = s.on_flows(&b).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{col:?}")) && e.contains("flows"),
                "{e}"
            );
        }
    }

    /// The host's QPs per device and state (a state that empties goes to 0, not stale), their
    /// packets per direction, and errors from `qp_error` alerts: never one series per QP.
    #[test]
    fn host_qps_are_series_per_device_never_per_qp() {
        use crate::pipeline::qp_stage::qps_batch;
        let mut s = MetricsSink::new(ExporterConfig {
            top_pairs: 20,
            expected_dscp: [26, 26, 48],
            max_qps: 1024,
        });
        let row = |lqpn: u32, state: &str| qps::QpRow {
            dev: "mlx5_0".into(),
            dev_index: 1,
            lqpn,
            qp_type: "RC".into(),
            state: state.into(),
            ..qps::QpRow::default()
        };
        let inv = |rows: Vec<qps::QpRow>| qps::Inventory {
            time_ns: 2_000_000_000,
            qps: rows,
            ..qps::Inventory::default()
        };
        let prog = |sent: u32| {
            vec![
                qps::Progress {
                    dev_index: 1,
                    lqpn: 1,
                    sent: Some(sent),
                    received: Some(1),
                },
                qps::Progress {
                    dev_index: 1,
                    lqpn: 2,
                    ..qps::Progress::default()
                },
            ]
        };
        let a = inv(vec![row(1, "RTS"), row(2, "RTS")]);
        s.on_qps(&qps_batch("h", "live", 0, &a, &prog(10), &[]).unwrap())
            .unwrap();
        let b = inv(vec![row(1, "RTS"), row(2, "ERR")]);
        let policy = nic::Policy::nvidia();
        let port = qps::verdict::PortQos::default();
        let checks = [
            qps::verdict::check(None, &policy, &port),
            qps::verdict::check(
                Some(qps::verdict::QpMarking {
                    traffic_class: 0,
                    sl: 0,
                }),
                &policy,
                &port,
            ),
        ];
        s.on_qps(&qps_batch("h", "live", 0, &b, &prog(5), &checks).unwrap())
            .unwrap();
        let alert = Alert::candidate(
            contract::alert::Rule::QpError,
            contract::alert::AlertKey {
                iface: "mlx5_0".into(),
                qp: Some(2),
                ..Default::default()
            },
            1,
            String::new(),
            String::new(),
            1,
            "qps",
        );
        let run = RunInfo {
            host: "h".into(),
            source: "live",
        };
        s.alert(&alert, &run);
        let text = s.render();
        let v = |series: &str| value(&text, series);
        assert_eq!(
            v(r#"roce_host_qps{device="mlx5_0",state="RTS"}"#),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            v(r#"roce_host_qps{device="mlx5_0",state="ERR"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"roce_host_qp_packets_total{device="mlx5_0",direction="tx"}"#),
            Some(15.0)
        );
        assert_eq!(
            v(r#"roce_host_qp_errors_total{device="mlx5_0"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"roce_host_qps_marking{device="mlx5_0",marking="off_policy"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"roce_host_qps_marking{device="mlx5_0",marking="unknown"}"#),
            Some(1.0)
        );
        // both QPs gone: every state of the device reads 0
        s.on_qps(&qps_batch("h", "live", 0, &inv(vec![]), &[], &[]).unwrap())
            .unwrap();
        let text = s.render();
        assert_eq!(
            value(&text, r#"roce_host_qps{device="mlx5_0",state="RTS"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                r#"roce_host_qps_marking{device="mlx5_0",marking="off_policy"}"#
            ),
            Some(0.0)
        );
        assert!(!text.contains("lqpn"), "no QP label: {text}");
    }

    /// Counter-group increments add up per device, command and counter: two processes of one
    /// command are one series, a group by type only is command "-", zero increments make none.
    #[test]
    fn qp_counter_groups_are_series_per_command_never_per_qp_or_pid() {
        let mut s = MetricsSink::new(ExporterConfig {
            top_pairs: 3,
            expected_dscp: [26, 26, 48],
            max_qps: 100,
        });
        let g =
            |id: u32, pid: Option<u32>, comm: Option<&str>, ooo: u64| qps::counters::CounterGroup {
                dev: "mlx5_0".into(),
                dev_index: 1,
                port: 1,
                id,
                pid,
                comm: comm.map(Into::into),
                lqpns: vec![id + 10],
                delta: [
                    ("out_of_sequence".to_string(), ooo),
                    ("rnr_nak_retry_err".to_string(), 0),
                ]
                .into_iter()
                .collect(),
                ..Default::default()
            };
        Sink::qp_counters(
            &mut s,
            &[
                g(1, Some(10), Some("train.py"), 3),
                g(2, Some(11), Some("train.py"), 4),
                g(3, None, None, 5),
            ],
            0,
        )
        .unwrap();
        let text = s.render();
        let v = |k: &str| value(&text, k);
        assert_eq!(
            v(
                r#"roce_host_qp_counter_events_total{device="mlx5_0",command="train.py",counter="out_of_sequence"}"#
            ),
            Some(7.0)
        );
        assert_eq!(
            v(
                r#"roce_host_qp_counter_events_total{device="mlx5_0",command="-",counter="out_of_sequence"}"#
            ),
            Some(5.0)
        );
        assert!(!text.contains("rnr_nak_retry_err"), "{text}");
        assert!(!text.contains("pid="), "{text}");
    }

    #[test]
    fn top_pairs_get_series_the_rest_add_up_in_other() {
        let mut s = MetricsSink::new(ExporterConfig {
            top_pairs: 3,
            expected_dscp: [26, 26, 48],
            max_qps: 100,
        });
        s.on_flows(&flows(10, 1)).unwrap();
        let t = s.render();
        let series = |src: &str| {
            format!(
                "roce_pair_packets_total{{iface=\"e0\",dir=\"ingress\",src=\"{src}\",dst=\"10.0.0.200\"}}"
            )
        };
        let other =
            "roce_pair_packets_total{iface=\"e0\",dir=\"ingress\",src=\"other\",dst=\"other\"}";
        // the three busiest pairs (10, 9, 8: 100, 90, 80 packets) by name, then (every pair
        // has packets off the policy) three more in the fault slots, the rest summed
        assert_eq!(value(&t, &series("10.0.0.10")), Some(100.0), "{t}");
        assert_eq!(value(&t, &series("10.0.0.8")), Some(80.0));
        assert_eq!(value(&t, &series("10.0.0.5")), Some(50.0));
        assert_eq!(value(&t, &series("10.0.0.4")), None);
        assert_eq!(
            value(&t, other),
            Some((1..=4).map(|p| p as f64 * 10.0).sum())
        );
        let off = "roce_pair_dscp_off_policy_packets_total{iface=\"e0\",dir=\"ingress\",src=\"10.0.0.9\",dst=\"10.0.0.200\"}";
        assert_eq!(value(&t, off), Some(45.0), "QP 2's half");
        // next interval: pair 1 is now the busiest, but the named ones keep their series
        // (counters stay monotonic) and the series count stays bounded
        s.on_flows(&flows(10, 2)).unwrap();
        let t = s.render();
        assert_eq!(value(&t, &series("10.0.0.10")), Some(300.0));
        assert_eq!(value(&t, &series("10.0.0.1")), None);
        assert_eq!(
            value(&t, other),
            Some(3.0 * (1..=4).map(|p| p as f64 * 10.0).sum::<f64>())
        );
        let pair_series = t
            .lines()
            .filter(|l| l.starts_with("roce_pair_packets_total{"))
            .count();
        assert_eq!(pair_series, 7, "3 named + 3 for faults + other");
    }

    /// The slots filled by busy clean pairs, a small pair that turns up with packets off the
    /// policy still gets a series of its own (before, it was summed into `other`), as long as
    /// the fault slots last; beyond them faulty pairs add up in `other` too.
    #[test]
    fn a_faulty_pair_never_hides_in_other() {
        let mut s = MetricsSink::new(cfg());
        s.on_flows(&flows_of(7..=10, 10, false)).unwrap();
        let series = |src: &str| {
            format!(
                "roce_pair_dscp_off_policy_packets_total{{iface=\"e0\",dir=\"ingress\",src=\"{src}\",dst=\"10.0.0.200\"}}"
            )
        };
        // then pairs 1..=4, small and off the policy (QP 2's half of p * 5 packets)
        s.on_flows(&flows_of(1..=4, 1, true)).unwrap();
        let t = s.render();
        for p in [4, 3, 2] {
            assert_eq!(
                value(&t, &series(&format!("10.0.0.{p}"))),
                Some(p as f64 * 5.0),
                "pair {p}: {t}"
            );
        }
        assert_eq!(
            value(&t, &series("10.0.0.1")),
            None,
            "the fault slots are full"
        );
        let other = "roce_pair_dscp_off_policy_packets_total{iface=\"e0\",dir=\"ingress\",src=\"other\",dst=\"other\"}";
        assert_eq!(value(&t, other), Some(5.0), "{t}");
    }

    fn cfg() -> ExporterConfig {
        ExporterConfig {
            top_pairs: 3,
            expected_dscp: [26, 26, 48],
            max_qps: 100,
        }
    }

    /// One scrape on a connection of its own: the whole response, or the error.
    fn scrape_once(addr: SocketAddr) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(2)))?;
        c.set_write_timeout(Some(Duration::from_secs(2)))?;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    }

    /// A scrape answered 200 within `tries` attempts 100 ms apart (bounded).
    fn scrape_until_ok(addr: SocketAddr, tries: usize) -> Option<String> {
        for _ in 0..tries {
            match scrape_once(addr) {
                Ok(r) if r.starts_with("HTTP/1.1 200") => return Some(r),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        None
    }

    fn refused_in(text: &str, reason: &str) -> Option<f64> {
        value(
            text,
            &format!("roce_observer_metrics_connections_refused_total{{reason=\"{reason}\"}}"),
        )
    }

    /// More idle connections than the limit: those over it are closed at once and counted,
    /// the held ones are closed after the header timeout (counted), and scrapes go on.
    #[test]
    fn idle_connections_over_the_limit_are_closed_counted_and_scrapes_go_on() {
        let limits = ServerLimits {
            max_connections: 4,
            header_timeout: Duration::from_millis(300),
            ..SERVER_LIMITS
        };
        let s = MetricsSink::start_with("127.0.0.1:0".parse().unwrap(), cfg(), limits).unwrap();
        let addr = s.addr().unwrap();
        let idle: Vec<_> = (0..40)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let c = s.server_counts();
        // every idle connection ends as one or the other (bounded wait)
        for _ in 0..200 {
            if c.refused(Refused::Limit) + c.refused(Refused::Timeout) >= 40 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            c.refused(Refused::Limit) + c.refused(Refused::Timeout),
            40,
            "limit {} timeout {}",
            c.refused(Refused::Limit),
            c.refused(Refused::Timeout)
        );
        assert!(c.refused(Refused::Limit) >= 1);
        assert!(c.refused(Refused::Timeout) >= 4, "the first 4 held a slot");
        let body = scrape_until_ok(addr, 50).expect("a scrape while idle clients stay connected");
        assert!(refused_in(&body, "limit").unwrap() >= 1.0, "{body}");
        assert!(refused_in(&body, "timeout").unwrap() >= 4.0, "{body}");
        assert_eq!(refused_in(&body, "descriptors"), Some(0.0));
        assert!(c.serving());
        let stats = s.stats().unwrap();
        assert_eq!(stats["serving"], true);
        assert!(stats["connections_refused"]["limit"].as_u64().unwrap() >= 1);
        drop(idle);
    }

    /// A client holding a half-sent request does not hold the stop: dropping the server
    /// returns within the grace (and a margin), and the client's connection is closed.
    #[test]
    fn a_half_sent_request_does_not_hold_the_stop() {
        use std::io::{Read, Write};
        let s = MetricsSink::start("127.0.0.1:0".parse().unwrap(), cfg()).unwrap();
        let addr = s.addr().unwrap();
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
            .unwrap();
        // accepted in order: once a later scrape is answered, the slow one is being served
        scrape_until_ok(addr, 50).expect("scrape");
        let (tx, rx) = std::sync::mpsc::channel();
        let stopper = std::thread::spawn(move || {
            let t = std::time::Instant::now();
            drop(s);
            let _ = tx.send(t.elapsed());
        });
        let bound = SERVER_LIMITS.stop_grace + Duration::from_secs(3);
        let took = rx.recv_timeout(bound);
        // unblock an old server that waits for the client, then judge
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let read = slow.read_to_end(&mut rest);
        // EOF or a reset: closed by the server; a timeout: still held open
        let closed = !matches!(&read, Err(e) if matches!(e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
        drop(slow);
        stopper.join().unwrap();
        let took = took.expect("the stop waited for the half-sent request");
        assert!(took < bound, "{took:?}");
        assert!(closed, "{read:?}");
    }
}
