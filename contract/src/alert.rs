//! What an alert is, defined once below the collector that raises alerts and the sinks that
//! write, serve and push them: the [`Rule`]s (stable names: `alerts.jsonl`, the `alerts` table,
//! Prometheus, Alertmanager, the lab's checks), their [`Severity`], the [`AlertKey`] an alert is
//! about, and the [`Alert`] with its `alerts.jsonl` form ([`AlertJson`]) and its `alerts` table
//! row ([`crate::rows::Cell`]s in the table's column order).

use observer_common::maps::{QpKey, class, dir};

use crate::addr::ip_of;
use crate::rows::Cell;
use crate::time::rfc3339;

/// An alert rule. Names are stable: `alerts.jsonl`, the alerts table, the lab's checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    DscpMismatch,
    PcpMismatch,
    NotEct,
    Pause8023x,
    PfcWrongPriority,
    PfcStorm,
    PsnGap,
    GoBackN,
    /// Packets whose invariant CRC (ICRC) does not verify: corrupted on the way, or rewritten
    /// in a field the ICRC covers (the receiving NIC drops them). Replay only: the kernel does
    /// not compute the ICRC.
    IcrcBad,
    CeWithoutCnp,
    PfcWithoutEcn,
    MtuBelowExpected,
    /// A QP's requests wait: the 99th percentile of its ACK round trip or READ latency in an
    /// interval is over the policy's `latency_p99_us` (docs/latency.md).
    LatencyHigh,
    /// One QP's marking (DSCP, PCP or ECN of a class) changed between two observation points
    /// of one process, to a value the policy does not expect ([`super::marking`]).
    MarkingChanged,
    /// New QP keys could not be tracked: the per-QP map is full (`--max-qps`).
    QpMapFull,
    /// Kernel events were dropped (ring buffer full); interval rules still see the counts.
    EventsLost,
    /// A flow-log, alert or summary file could not be written (disk full, unwritable), or alerts
    /// were dropped on the way out (alerts.jsonl unwritable too long, an Alertmanager that does
    /// not keep up).
    OutputWriteFailed,
    /// The observed interface disappeared (deleted, or deleted and re-created).
    IfaceGone,
    /// The NIC dropped packets of the RDMA priority (per-priority discard counters).
    RdmaClassDrops,
    /// The NIC received CNPs and ignored them: congestion control is off on that priority.
    CnpIgnored,
    /// The NIC's QoS configuration differs from the policy (one rule per check, `config_*`).
    ConfigPfcPriorities,
    ConfigGlobalPauseOff,
    ConfigTrustMode,
    ConfigDataDscpPriority,
    ConfigCnpDscp,
    ConfigCnpPriority,
    ConfigEcnRpEnabled,
    ConfigEcnNpEnabled,
    ConfigDefaultRoceTos,
    ConfigRoceV2Gid,
    /// A QP of the host (the RDMA subsystem's inventory) moved to ERR or SQE.
    QpError,
    /// A QP of the host was set up with a marking the policy does not expect, or one that lands
    /// in a priority without PFC.
    QpMarking,
    /// An RC QP of the host in RTS has packets sent and not acknowledged, and neither its send
    /// PSN nor its acknowledged PSN moved for the policy's `qp_stall_s`.
    QpStalled,
}

impl Rule {
    /// Every rule, in documentation order.
    pub const ALL: [Rule; 33] = [
        Rule::DscpMismatch,
        Rule::PcpMismatch,
        Rule::NotEct,
        Rule::Pause8023x,
        Rule::PfcWrongPriority,
        Rule::PfcStorm,
        Rule::PsnGap,
        Rule::GoBackN,
        Rule::IcrcBad,
        Rule::CeWithoutCnp,
        Rule::PfcWithoutEcn,
        Rule::MtuBelowExpected,
        Rule::LatencyHigh,
        Rule::MarkingChanged,
        Rule::QpMapFull,
        Rule::EventsLost,
        Rule::OutputWriteFailed,
        Rule::IfaceGone,
        Rule::RdmaClassDrops,
        Rule::CnpIgnored,
        Rule::ConfigPfcPriorities,
        Rule::ConfigGlobalPauseOff,
        Rule::ConfigTrustMode,
        Rule::ConfigDataDscpPriority,
        Rule::ConfigCnpDscp,
        Rule::ConfigCnpPriority,
        Rule::ConfigEcnRpEnabled,
        Rule::ConfigEcnNpEnabled,
        Rule::ConfigDefaultRoceTos,
        Rule::ConfigRoceV2Gid,
        Rule::QpError,
        Rule::QpMarking,
        Rule::QpStalled,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Rule::DscpMismatch => "dscp_mismatch",
            Rule::PcpMismatch => "pcp_mismatch",
            Rule::NotEct => "not_ect",
            Rule::Pause8023x => "pause_802_3x",
            Rule::PfcWrongPriority => "pfc_wrong_priority",
            Rule::PfcStorm => "pfc_storm",
            Rule::PsnGap => "psn_gap",
            Rule::GoBackN => "go_back_n",
            Rule::IcrcBad => "icrc_bad",
            Rule::CeWithoutCnp => "ce_without_cnp",
            Rule::PfcWithoutEcn => "pfc_without_ecn",
            Rule::MtuBelowExpected => "mtu_below_expected",
            Rule::LatencyHigh => "latency_high",
            Rule::MarkingChanged => "marking_changed",
            Rule::QpMapFull => "qp_map_full",
            Rule::EventsLost => "events_lost",
            Rule::OutputWriteFailed => "output_write_failed",
            Rule::IfaceGone => "iface_gone",
            Rule::RdmaClassDrops => "rdma_class_drops",
            Rule::CnpIgnored => "cnp_ignored",
            Rule::ConfigPfcPriorities => "config_pfc_priorities",
            Rule::ConfigGlobalPauseOff => "config_global_pause_off",
            Rule::ConfigTrustMode => "config_trust_mode",
            Rule::ConfigDataDscpPriority => "config_data_dscp_priority",
            Rule::ConfigCnpDscp => "config_cnp_dscp",
            Rule::ConfigCnpPriority => "config_cnp_priority",
            Rule::ConfigEcnRpEnabled => "config_ecn_rp_enabled",
            Rule::ConfigEcnNpEnabled => "config_ecn_np_enabled",
            Rule::ConfigDefaultRoceTos => "config_default_roce_tos",
            Rule::ConfigRoceV2Gid => "config_roce_v2_gid",
            Rule::QpError => "qp_error",
            Rule::QpMarking => "qp_marking",
            Rule::QpStalled => "qp_stalled",
        }
    }

    /// Whether the rule is a configuration check of the NIC (`config_*`).
    pub fn is_config(self) -> bool {
        self.name().starts_with("config_")
    }

    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.name() == name)
    }

    pub const fn severity(self) -> Severity {
        match self {
            Rule::PfcStorm
            | Rule::Pause8023x
            | Rule::NotEct
            | Rule::CeWithoutCnp
            | Rule::OutputWriteFailed
            | Rule::IfaceGone
            | Rule::RdmaClassDrops
            | Rule::ConfigPfcPriorities
            | Rule::ConfigTrustMode
            | Rule::ConfigDataDscpPriority
            | Rule::QpError
            | Rule::QpMarking
            | Rule::QpStalled => Severity::Critical,
            Rule::EventsLost => Severity::Info,
            _ => Severity::Warning,
        }
    }

    /// What one alert of the rule is about (the hold-down key, with the rule).
    pub const fn key(self) -> &'static str {
        match self {
            Rule::DscpMismatch | Rule::PcpMismatch | Rule::NotEct => "QP key and class",
            Rule::PsnGap | Rule::GoBackN | Rule::IcrcBad | Rule::MtuBelowExpected => "QP key",
            Rule::MarkingChanged => "QP key, class, field and the two points",
            Rule::LatencyHigh => "QP key and latency (ack or read)",
            Rule::PfcWrongPriority | Rule::PfcStorm => "interface, direction and priority",
            Rule::Pause8023x | Rule::QpMapFull | Rule::EventsLost => "interface and direction",
            Rule::CeWithoutCnp => "interface and IP pair",
            Rule::PfcWithoutEcn => "interface",
            Rule::OutputWriteFailed => "output (table or file)",
            Rule::IfaceGone => "interface",
            Rule::RdmaClassDrops | Rule::CnpIgnored => "interface (NIC counters)",
            Rule::QpError | Rule::QpMarking | Rule::QpStalled => "RDMA device and QP number",
            _ => "interface (NIC configuration)",
        }
    }

    /// Whether kernel first-occurrence events raise the rule besides interval deltas.
    pub const fn raised_by_events(self) -> bool {
        matches!(
            self,
            Rule::DscpMismatch | Rule::PcpMismatch | Rule::NotEct | Rule::PsnGap | Rule::GoBackN
        )
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// What an alert is about (the dedup key with the rule).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertKey {
    pub iface: String,
    pub dir: Option<u8>,
    pub class: Option<u8>,
    pub src: Option<[u8; 16]>,
    pub dst: Option<[u8; 16]>,
    pub qp: Option<u32>,
    pub priority: Option<u8>,
    /// Other subject (e.g. an output table, or the marking field of `marking_changed`).
    pub other: Option<String>,
    /// The later of two observation points (`marking_changed`: `iface` and `dir` are the
    /// earlier one).
    pub to_iface: Option<String>,
    pub to_dir: Option<u8>,
}

impl AlertKey {
    pub fn qp(iface: &str, k: &QpKey) -> AlertKey {
        AlertKey {
            iface: iface.into(),
            dir: Some(k.dir),
            src: Some(k.src_ip),
            dst: Some(k.dst_ip),
            qp: Some(k.dest_qp),
            ..Default::default()
        }
    }
    pub fn with_class(mut self, c: usize) -> AlertKey {
        self.class = Some(c as u8);
        self
    }
}

fn dir_name(d: u8) -> &'static str {
    dir::NAMES[(d as usize).min(dir::COUNT - 1)]
}

#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// When it was raised (event time, or the end of the interval).
    pub time_ns: u64,
    /// First occurrence this alert covers.
    pub first_ns: u64,
    pub rule: Rule,
    pub severity: Severity,
    pub key: AlertKey,
    pub observed: String,
    pub expected: String,
    /// Occurrences this alert covers (packets, frames, gaps, ... per rule).
    pub count: u64,
    /// True for a hold-down summary of occurrences after the first alert.
    pub summary: bool,
    /// "event" (kernel first-occurrence event) or "interval" (interval deltas).
    pub origin: &'static str,
    /// The observation point's label (`--point-label`), set by the collector when it emits.
    pub point: Option<String>,
    /// QP keys this alert stands for: 1, or N for an alert aggregated over N keys that broke
    /// the rule alike in one interval (`thresholds.aggregate_keys`).
    pub subjects: u64,
    /// An aggregated alert's keys (`10.0.4.1 -> 10.0.5.1 qp 0x000011 (17)`), at most
    /// [`MAX_KEYS_LISTED`], then `and N more`; empty otherwise.
    pub keys: Vec<String>,
}

/// Keys an aggregated alert lists.
pub const MAX_KEYS_LISTED: usize = 100;

/// An alert as JSON ([`Alert::json_view`]). Fields in sorted order: the order of the keys of
/// [`Alert::json`]'s object, so a line written from the view and one printed from the object are
/// the same bytes (a test checks).
#[derive(serde::Serialize)]
pub struct AlertJson<'a> {
    class: Option<&'static str>,
    count: u64,
    dir: Option<&'static str>,
    dst: Option<String>,
    expected: &'a str,
    first_time: String,
    host: &'a str,
    iface: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    keys: &'a [String],
    message: String,
    observed: &'a str,
    origin: &'static str,
    point: Option<&'a str>,
    priority: Option<u8>,
    qp: Option<u32>,
    qp_hex: Option<String>,
    rule: &'static str,
    severity: &'static str,
    source: &'a str,
    src: Option<String>,
    subject: Option<&'a str>,
    subjects: u64,
    summary: bool,
    time: String,
    time_ns: u64,
    to_dir: Option<&'static str>,
    to_iface: Option<&'a str>,
}

impl Alert {
    /// `dscp_mismatch on ens1f0 ingress 10.0.0.1 -> 10.0.0.2 qp 0x000011 (17) (data): observed
    /// ..., expected ...`: the rule, [`Alert::place`], [`Alert::finding`].
    pub fn message(&self) -> String {
        format!(
            "{} on {}: {}",
            self.rule.name(),
            self.place(),
            self.finding()
        )
    }

    /// Where it was seen: the interface and, as the rule has them, direction, addresses, QP,
    /// class, priority.
    pub fn place(&self) -> String {
        let mut s = self.key.iface.to_string();
        if let Some(d) = self.key.dir {
            s += &format!(" {}", dir_name(d));
        }
        if let Some(to) = &self.key.to_iface {
            s += &format!(" → {to}");
            if let Some(d) = self.key.to_dir {
                s += &format!(" {}", dir_name(d));
            }
        }
        if let (Some(a), Some(b)) = (self.key.src, self.key.dst) {
            s += &format!(" {} -> {}", ip_of(&a), ip_of(&b));
        }
        if let Some(q) = self.key.qp {
            s += &format!(" qp 0x{q:06x} ({q})");
        }
        if let Some(c) = self.key.class {
            s += &format!(" ({})", class::NAMES[(c as usize).min(class::COUNT - 1)]);
        }
        if let Some(p) = self.key.priority {
            s += &format!(" priority {p}");
        }
        if let Some(o) = &self.key.other {
            s += &format!(" {o}");
        }
        s
    }

    /// What was seen against what the policy expects (for a hold-down summary, the occurrences
    /// held back: one count per line, the latest interval's `observed` stays in the JSON).
    pub fn finding(&self) -> String {
        if self.summary {
            format!(
                "{} more occurrences since the first alert, expected {}",
                self.count, self.expected
            )
        } else {
            format!("observed {}, expected {}", self.observed, self.expected)
        }
    }

    pub fn json(&self, host: &str, source: &str) -> serde_json::Value {
        serde_json::to_value(self.json_view(host, source)).unwrap_or_default()
    }

    /// The alert's JSON object as a typed view, serialized without building a
    /// `serde_json::Value` (the `alerts.jsonl` line): the same keys in the same (sorted) order
    /// as [`Alert::json`], which is made from it.
    pub fn json_view<'a>(&'a self, host: &'a str, source: &'a str) -> AlertJson<'a> {
        AlertJson {
            class: self
                .key
                .class
                .map(|c| class::NAMES[(c as usize).min(class::COUNT - 1)]),
            count: self.count,
            dir: self
                .key
                .dir
                .map(|d| dir::NAMES[(d as usize).min(dir::COUNT - 1)]),
            dst: self.key.dst.map(|a| ip_of(&a).to_string()),
            expected: &self.expected,
            first_time: rfc3339(self.first_ns),
            host,
            iface: &self.key.iface,
            keys: &self.keys,
            message: self.message(),
            observed: &self.observed,
            origin: self.origin,
            point: self.point.as_deref(),
            priority: self.key.priority,
            qp: self.key.qp,
            qp_hex: self.key.qp.map(|q| format!("0x{q:06x}")),
            rule: self.rule.name(),
            severity: self.severity.as_str(),
            source,
            src: self.key.src.map(|a| ip_of(&a).to_string()),
            subject: self.key.other.as_deref(),
            subjects: self.subjects,
            summary: self.summary,
            time: rfc3339(self.time_ns),
            time_ns: self.time_ns,
            to_dir: self.key.to_dir.map(dir_name),
            to_iface: self.key.to_iface.as_deref(),
        }
    }

    /// A row of the alerts table (in [`contract::schema::alerts`] column order).
    pub fn row(&self, host: &str, source: &str) -> Vec<Cell> {
        vec![
            Cell::S(host.into()),
            Cell::S(source.into()),
            Cell::T(self.time_ns),
            Cell::T(self.first_ns),
            Cell::S(self.rule.name().into()),
            Cell::S(self.severity.as_str().into()),
            Cell::S(self.key.iface.clone()),
            Cell::OS(
                self.key
                    .dir
                    .map(|d| dir::NAMES[(d as usize).min(dir::COUNT - 1)].into()),
            ),
            Cell::OS(self.point.clone()),
            Cell::OS(self.key.to_iface.clone()),
            Cell::OS(self.key.to_dir.map(|d| dir_name(d).into())),
            Cell::OS(
                self.key
                    .class
                    .map(|c| class::NAMES[(c as usize).min(class::COUNT - 1)].into()),
            ),
            Cell::OS(self.key.src.map(|a| ip_of(&a).to_string())),
            Cell::OS(self.key.dst.map(|a| ip_of(&a).to_string())),
            Cell::OI(self.key.qp.map(|q| q as i64)),
            Cell::OS(self.key.qp.map(|q| format!("0x{q:06x}"))),
            Cell::OI(self.key.priority.map(|q| q as i64)),
            Cell::S(self.observed.clone()),
            Cell::S(self.expected.clone()),
            Cell::I(self.count as i64),
            Cell::S(if self.summary { "true" } else { "false" }.into()),
            Cell::S(self.origin.into()),
            Cell::S(self.message()),
            Cell::OI(Some(self.subjects as i64)),
            Cell::OS((!self.keys.is_empty()).then(|| self.keys.join("; "))),
        ]
    }

    pub fn candidate(
        rule: Rule,
        key: AlertKey,
        time_ns: u64,
        observed: String,
        expected: String,
        count: u64,
        origin: &'static str,
    ) -> Alert {
        Alert {
            time_ns,
            first_ns: time_ns,
            rule,
            severity: rule.severity(),
            key,
            observed,
            expected,
            count,
            summary: false,
            origin,
            point: None,
            subjects: 1,
            keys: Vec::new(),
        }
    }
}
