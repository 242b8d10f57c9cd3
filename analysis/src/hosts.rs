//! `roce-analyze hosts`: the fleet answer. One row per host of the trees, judged from what a
//! hardware-RoCE host has (its NIC's own counters, the NIC configuration checks' alerts, its
//! QPs from the RDMA subsystem): FAIL, UNKNOWN (nothing to judge by: no NIC rows, or a NIC
//! that reports none of the counters checked) or PASS, failing hosts first (most faults
//! first), then the unknown ones, then the rest. Trees without flow logs are read (a
//! hardware-RoCE host's). One SQL query (`sql/hosts/hosts.sql`), portable like the report's.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::{Engine, EngineError, render};
use crate::report::{Row, col_int, col_str, rows};
use contract::nic::Quantity;
use contract::policy::PolicyConfig;

pub const HOSTS_SQL: &str = include_str!("../sql/hosts/hosts.sql");

/// A host's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostVerdict {
    Fail,
    Unknown,
    Pass,
}

/// One host: its verdict, why, and the figures it was judged by (sums over the run).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Host {
    pub host: String,
    pub verdict: HostVerdict,
    /// What failed, or why it is unknown; for a pass, what was checked.
    pub why: Vec<String>,
    /// The NIC's driver family (`mlx5`, `bnxt`, ...; `mixed` when its interfaces differ).
    pub driver: Option<String>,
    pub ifaces: i64,
    pub nic_rows: i64,
    /// Receive drops on the RDMA priority (port, buffer and congestion discards).
    pub rdma_drops: i64,
    /// Receive drops on the other priorities and at the port (lossy classes may drop).
    pub other_drops: i64,
    pub pfc_rdma: i64,
    /// PFC frames, received and sent, on priorities other than the RDMA priority.
    pub pfc_other: i64,
    pub storms: i64,
    pub pause_frames: i64,
    /// Out-of-sequence packets and NAK sequence errors.
    pub seq_errors: i64,
    pub ack_timeouts: i64,
    /// RoCE packets that found no receive WQE posted (dropped, or answered by an RNR NAK).
    pub no_buffer: i64,
    pub cnp_sent: i64,
    pub counter_resets: i64,
    /// NIC configuration checks that failed (distinct `config_*` alert rules).
    pub config_failed: i64,
    pub host_qps: i64,
    pub qp_errors: i64,
    pub qp_off_policy: i64,
    pub first_us: Option<i64>,
    pub last_us: Option<i64>,
}

impl Host {
    /// Faults counted for the order of failing hosts.
    fn faults(&self) -> i64 {
        [
            self.rdma_drops,
            self.pfc_other,
            self.storms,
            self.pause_frames,
            self.seq_errors,
            self.ack_timeouts,
            self.no_buffer,
            self.config_failed,
            self.qp_errors,
            self.qp_off_policy,
        ]
        .iter()
        .map(|v| v.max(&0))
        .sum()
    }
}

/// The query's parameters: sums and tests over the per-priority columns of the nic table,
/// spelled out from the quantities (no query names the eight priorities).
pub fn params(p: &PolicyConfig) -> BTreeMap<&'static str, String> {
    let rdma = p.expected.rdma_priority & 7;
    let col = |q: Quantity| q.name();
    let sum = |qs: &[Quantity]| -> String {
        if qs.is_empty() {
            return "0".into();
        }
        qs.iter()
            .map(|q| format!("COALESCE({}, 0)", col(*q)))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let known = |qs: &[Quantity]| -> String {
        let t: Vec<String> = qs
            .iter()
            .map(|q| format!("{} IS NOT NULL", col(*q)))
            .collect();
        format!("({})", t.join(" OR "))
    };
    let drops_at = |pr: &dyn Fn(u8) -> bool| -> Vec<Quantity> {
        (0..8u8)
            .filter(|p| pr(*p))
            .flat_map(|p| {
                [
                    Quantity::RxPrioDiscards(p),
                    Quantity::RxPrioBufDiscards(p),
                    Quantity::RxPrioCongDiscards(p),
                ]
            })
            .collect()
    };
    let pfc_at = |pr: &dyn Fn(u8) -> bool| -> Vec<Quantity> {
        (0..8u8)
            .filter(|p| pr(*p))
            .flat_map(|p| [Quantity::PfcRxFrames(p), Quantity::PfcTxFrames(p)])
            .collect()
    };
    let rdma_drops = drops_at(&|p| p == rdma);
    let mut other_drops = drops_at(&|p| p != rdma);
    other_drops.extend([Quantity::PortRxDiscards, Quantity::PortTxDiscards]);
    let all_drops: Vec<Quantity> = rdma_drops.iter().chain(&other_drops).copied().collect();
    let pfc_all = pfc_at(&|_| true);
    let mut m = BTreeMap::new();
    m.insert("rdma_drops", sum(&rdma_drops));
    m.insert("other_drops", sum(&other_drops));
    m.insert("pfc_rdma", sum(&pfc_at(&|p| p == rdma)));
    m.insert("pfc_other", sum(&pfc_at(&|p| p != rdma)));
    m.insert("drops_known", known(&all_drops));
    m.insert("pfc_known", known(&pfc_all));
    m.insert(
        "errors_known",
        known(&[
            Quantity::OutOfSequence,
            Quantity::NakSeqErrRx,
            Quantity::AckTimeouts,
            Quantity::PauseStormEvents,
            Quantity::ImpliedNakSeqErr,
            Quantity::RdmaRxOutOfBuffer,
        ]),
    );
    m
}

/// The query with the policy's parameters substituted (what `hosts --emit-sql` writes).
pub fn sql(p: &PolicyConfig) -> Result<String, EngineError> {
    render("hosts", HOSTS_SQL, &params(p))
}

fn int(r: &Row, k: &str) -> i64 {
    col_int(r, k).unwrap_or(0)
}

/// Judges one host's row.
pub fn judge(r: &Row, rdma_priority: u8) -> Host {
    let mut h = Host {
        host: col_str(r, "host").unwrap_or("").to_string(),
        verdict: HostVerdict::Pass,
        why: Vec::new(),
        driver: match (col_str(r, "driver"), col_str(r, "driver_max")) {
            (Some(a), Some(b)) if a != b => Some("mixed".into()),
            (Some(a), _) => Some(a.to_string()),
            _ => None,
        },
        ifaces: int(r, "ifaces"),
        nic_rows: int(r, "nic_rows"),
        rdma_drops: int(r, "rdma_drops"),
        other_drops: int(r, "other_drops"),
        pfc_rdma: int(r, "pfc_rdma"),
        pfc_other: int(r, "pfc_other"),
        storms: int(r, "storms"),
        pause_frames: int(r, "pause_frames"),
        seq_errors: int(r, "seq_errors"),
        ack_timeouts: int(r, "ack_timeouts"),
        no_buffer: int(r, "no_buffer"),
        cnp_sent: int(r, "cnp_sent"),
        counter_resets: int(r, "counter_resets"),
        config_failed: int(r, "config_failed"),
        host_qps: int(r, "host_qps"),
        qp_errors: int(r, "qp_errors"),
        qp_off_policy: int(r, "qp_off_policy"),
        first_us: col_int(r, "first_t0"),
        last_us: col_int(r, "last_t1"),
    };
    let p = rdma_priority;
    let mut fail = Vec::new();
    if h.rdma_drops > 0 {
        fail.push(format!(
            "{} packets dropped on the RDMA priority {p}",
            h.rdma_drops
        ));
    }
    if h.pfc_other > 0 {
        fail.push(format!(
            "{} PFC frames on priorities other than {p}",
            h.pfc_other
        ));
    }
    if h.storms > 0 {
        fail.push(format!("{} pause-storm events", h.storms));
    }
    if h.pause_frames > 0 {
        fail.push(format!("{} 802.3x PAUSE frames", h.pause_frames));
    }
    if h.seq_errors > 0 {
        fail.push(format!(
            "{} out-of-sequence packets or NAK sequence errors (go-back-N)",
            h.seq_errors
        ));
    }
    if h.ack_timeouts > 0 {
        fail.push(format!("{} ACK timeouts", h.ack_timeouts));
    }
    if h.no_buffer > 0 {
        fail.push(format!(
            "{} RoCE packets found no receive buffer posted (out_of_buffer: dropped or RNR NAK)",
            h.no_buffer
        ));
    }
    if h.config_failed > 0 {
        let first = col_str(r, "config_first").unwrap_or("config_*");
        fail.push(format!(
            "{} NIC configuration check(s) failed ({first}{})",
            h.config_failed,
            if h.config_failed > 1 { ", ..." } else { "" }
        ));
    }
    if h.qp_errors > 0 {
        fail.push(format!("{} QPs in error", h.qp_errors));
    }
    if h.qp_off_policy > 0 {
        fail.push(format!(
            "{} QPs off the policy's marking or lossy",
            h.qp_off_policy
        ));
    }
    let drops_known = int(r, "drops_known") > 0;
    let pfc_known = int(r, "pfc_known") > 0;
    let errors_known = int(r, "errors_known") > 0;
    if !fail.is_empty() {
        h.verdict = HostVerdict::Fail;
        h.why = fail;
    } else if h.nic_rows == 0 {
        h.verdict = HostVerdict::Unknown;
        h.why.push(
            "no NIC rows (a replay, --no-nic, or no NIC source): nothing of the NIC to judge by"
                .into(),
        );
    } else if !drops_known && !pfc_known && !errors_known {
        h.verdict = HostVerdict::Unknown;
        h.why.push(format!(
            "the NIC ({}) reports none of the counters checked (drops, PFC, sequence errors)",
            h.driver.as_deref().unwrap_or("?")
        ));
    } else {
        let mut ok = Vec::new();
        if drops_known {
            ok.push(format!("no drop on priority {p}"));
        }
        if pfc_known {
            ok.push(format!("PFC only on {p} ({} frames)", h.pfc_rdma));
        }
        if errors_known {
            ok.push("no sequence error, timeout or storm".into());
        }
        let missing: Vec<&str> = [
            (!drops_known, "drops"),
            (!pfc_known, "PFC"),
            (!errors_known, "sequence errors"),
        ]
        .iter()
        .filter(|(m, _)| *m)
        .map(|(_, n)| *n)
        .collect();
        if !missing.is_empty() {
            ok.push(format!("not reported by the NIC: {}", missing.join(", ")));
        }
        h.why = ok;
    }
    if h.other_drops > 0 {
        h.why.push(format!(
            "{} drops on other priorities or at the port (lossy classes may drop)",
            h.other_drops
        ));
    }
    if h.counter_resets > 0 {
        h.why.push(format!("{} counter resets", h.counter_resets));
    }
    h
}

/// Every host of the engine's trees, worst first: failing hosts by their faults, then the
/// unknown ones, then those that pass (each group by name).
pub fn hosts(eng: &Engine, p: &PolicyConfig) -> Result<Vec<Host>, EngineError> {
    let rs = rows(&eng.run(&sql(p)?)?);
    let mut hs: Vec<Host> = rs
        .iter()
        .map(|r| judge(r, p.expected.rdma_priority & 7))
        .collect();
    hs.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then(b.faults().cmp(&a.faults()))
            .then(a.host.cmp(&b.host))
    });
    Ok(hs)
}

/// The table as text: a count line, then one line per host.
pub fn render_text(hs: &[Host], policy_source: &str, rdma_priority: u8) -> String {
    use std::fmt::Write;
    let n = |v: HostVerdict| hs.iter().filter(|h| h.verdict == v).count();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} hosts: {} FAIL, {} UNKNOWN, {} PASS (the NIC's counters and configuration checks, the host's QPs; RDMA priority {rdma_priority})",
        hs.len(),
        n(HostVerdict::Fail),
        n(HostVerdict::Unknown),
        n(HostVerdict::Pass)
    );
    let _ = writeln!(s, "policy: {policy_source}");
    let w = hs.iter().map(|h| h.host.len()).max().unwrap_or(4).max(4);
    for h in hs {
        let _ = writeln!(
            s,
            "{:<7} {:<w$} {:<6} {}",
            format!("{:?}", h.verdict).to_uppercase(),
            h.host,
            h.driver.as_deref().unwrap_or("-"),
            h.why.join("; ")
        );
    }
    s
}

/// Exit status: 1 when a host failed, or (`strict`) when one is unknown.
pub fn failed(hs: &[Host], strict: bool) -> bool {
    hs.iter()
        .any(|h| h.verdict == HostVerdict::Fail || (strict && h.verdict == HostVerdict::Unknown))
}
