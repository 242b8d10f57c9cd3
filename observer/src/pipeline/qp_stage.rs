//! The host-QP stage of the collector: each interval's inventory of the host's QPs (the RDMA
//! subsystem's, `qps` crate) becomes `qps` rows (one per QP, with its packets in the interval
//! from its PSNs and its marking checked), a `qp_error` alert for each QP that moved to ERR or
//! SQE, a `qp_marking` alert for each QP set up off the policy, and the run's figures in
//! `summary.json` (`host_qps`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::record_batch::RecordBatch;
use contract::alert::{Alert, AlertKey, Rule};
use contract::schema;
use qps::verdict::{self, MarkingCheck, PortQos, Verdict};
use qps::{Fate, Inventory, Progress, QpRow};
use serde_json::{Value, json};

use super::{Collector, CollectorError};

/// The run's figures of the host's QPs.
#[derive(Default)]
pub struct HostQpState {
    pub reads: u64,
    /// The last read's QPs by device and state.
    pub by_state: BTreeMap<String, BTreeMap<String, u64>>,
    pub qps: u64,
    /// QPs seen moving to ERR or SQE (or in it at the first read) over the run.
    pub errors: u64,
    pub appeared: u64,
    pub gone: u64,
    pub excluded_duplicates: u64,
    pub excluded_over_limit: u64,
    pub cm_ids_unmatched: u64,
    /// Device reads that failed (each logged with its error).
    pub device_errors: u64,
    /// The last read's QPs by marking verdict.
    pub marking: BTreeMap<&'static str, u64>,
    /// Each QP's last marking verdict (a `qp_marking` alert when it becomes off the policy).
    verdicts: std::collections::HashMap<(u32, u32), Verdict, crate::sources::datapath::FastHash>,
    /// The QoS configuration of each RDMA device's port, from the NIC source's last sample of
    /// the interface bound to it: (device, port) -> DCB. Ports of interfaces the NIC source
    /// does not read are absent: their QPs' priority stays unknown.
    pub port_qos: BTreeMap<(String, u32), PortQos>,
    /// Counter binding (`--qp-counters`): the last read's ports and grouping, and each group's
    /// increments over the run.
    pub counters: Option<CounterRun>,
    /// The raw QP contexts' figures of the last read (mlx5), when tried.
    pub raw: Option<qps::raw::RawRead>,
    /// Stalls raised: each QP's stall by the time its acknowledged PSN stopped (one alert per
    /// stall), and how many over the run.
    stalled: std::collections::HashMap<(u32, u32), u64>,
    pub stalls: u64,
    /// The last read's device traffic-class overrides: `DEV/PORT` -> traffic class.
    pub tc_override: BTreeMap<String, u8>,
}

/// A counter group: (device, port, counter id).
pub type GroupKey = (String, u32, u32);

/// The run's per-QP-group counters.
#[derive(Default)]
pub struct CounterRun {
    pub last: qps::counters::CounterRead,
    /// (device, port, counter id) -> the group as last read and its increments over the run.
    pub groups: BTreeMap<GroupKey, (qps::counters::CounterGroup, BTreeMap<String, u64>)>,
    /// Groups not kept over the run (beyond `qps::counters::MAX_GROUPS`).
    pub groups_over_limit: u64,
}

impl CounterRun {
    fn add(&mut self, read: &qps::counters::CounterRead) {
        for g in &read.groups {
            let key = (g.dev.clone(), g.port, g.id);
            if !self.groups.contains_key(&key) && self.groups.len() >= qps::counters::MAX_GROUPS {
                self.groups_over_limit += 1;
                continue;
            }
            let e = self.groups.entry(key).or_default();
            e.0 = g.clone();
            e.0.delta.clear();
            for (k, v) in &g.delta {
                *e.1.entry(k.clone()).or_default() += v;
            }
        }
        self.last = read.clone();
        self.last.groups.clear();
    }

    fn json(&self) -> Value {
        let groups: Vec<Value> = self
            .groups
            .values()
            .map(|(g, inc)| {
                json!({
                    "device": g.dev,
                    "port": g.port,
                    "counter_id": g.id,
                    "qp_type": g.qp_type,
                    "pid": g.pid,
                    "command": g.comm,
                    "qps": g.lqpns.len(),
                    "increments": inc,
                })
            })
            .collect();
        use qps::counters::PortState;
        let ports: Vec<Value> = self
            .last
            .ports
            .iter()
            .map(|p| {
                let (state, detail) = match &p.state {
                    PortState::TurnedOn => ("turned_on", None),
                    PortState::AlreadyAuto(m) => ("already_auto", Some(m)),
                    PortState::Manual => ("manual", None),
                    PortState::Unavailable(r) => ("unavailable", Some(r)),
                    PortState::Failed(e) => ("failed", Some(e)),
                };
                json!({"device": p.dev, "port": p.port, "state": state, "detail": detail})
            })
            .collect();
        json!({
            "grouping": self.last.grouping,
            "ports": ports,
            "groups": groups,
            "excluded": {
                "over_limit": self.last.excluded_over_limit + self.groups_over_limit,
            },
            "read_errors": self.last.read_errors,
        })
    }
}

impl HostQpState {
    /// Keeps the port QoS of the RDMA port bound to the sample's interface (the DCB as last
    /// read; unread DCB leaves the port without a configuration).
    pub fn note_nic_sample(&mut self, s: &nic::NicSample) {
        let Some(r) = &s.rdma else { return };
        let qos = PortQos {
            dcb: s.dcb.value().cloned(),
        };
        self.port_qos.insert((r.dev.clone(), r.port), qos);
    }

    /// The port QoS of a QP's device and port (a QP without a port, e.g. not yet bound: the
    /// device's only port, if it has one known).
    fn qos_of(&self, dev: &str, port: Option<u32>) -> PortQos {
        if let Some(p) = port {
            return self
                .port_qos
                .get(&(dev.to_string(), p))
                .cloned()
                .unwrap_or_default();
        }
        let mut ports = self
            .port_qos
            .range((dev.to_string(), 0)..=(dev.to_string(), u32::MAX));
        match (ports.next(), ports.next()) {
            (Some((_, q)), None) => q.clone(),
            _ => PortQos::default(),
        }
    }
}

impl HostQpState {
    /// `summary.json`'s `host_qps` (null when the inventory never ran).
    pub fn json(&self) -> Value {
        if self.reads == 0 {
            return Value::Null;
        }
        json!({
            "reads": self.reads,
            "qps": self.qps,
            "by_state": self.by_state,
            "errors": self.errors,
            "appeared": self.appeared,
            "gone": self.gone,
            "excluded": {
                "duplicates": self.excluded_duplicates,
                "over_limit": self.excluded_over_limit,
                "cm_ids_unmatched": self.cm_ids_unmatched,
            },
            "device_errors": self.device_errors,
            "marking": self.marking,
            "counters": self.counters.as_ref().map_or(Value::Null, CounterRun::json),
            "stalls": self.stalls,
            "tc_override": self.tc_override,
            "raw_context": self.raw.as_ref().map_or(Value::Null, |r| json!({
                "reads": r.reads,
                "setups": r.setups,
                "errors": r.errors,
                "deferred": r.deferred,
                "unsupported": r.unsupported,
            })),
        })
    }
}

/// The `qps` rows of one read as a batch.
pub fn qps_batch(
    host: &str,
    source: &str,
    start_ns: u64,
    inv: &Inventory,
    progress: &[Progress],
    checks: &[MarkingCheck],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let rows = &inv.qps;
    let n = rows.len();
    // compare() gives one progress per QP of the read, in the read's order.
    let prog: Vec<Option<&Progress>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| progress.get(i).filter(|p| (p.dev_index, p.lqpn) == r.key()))
        .collect();
    // Columns of borrowed strings are built straight from the rows (no String per cell).
    let strs = |f: &dyn for<'a> Fn(&'a QpRow) -> Option<&'a str>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let owned = |f: &dyn Fn(&QpRow) -> Option<String>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let ints = |f: &dyn Fn(&QpRow) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let ts = |t: u64| -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(vec![(t / 1000) as i64; n]).with_timezone("UTC"))
    };
    let progress_col = |f: &dyn Fn(&Progress) -> Option<u32>| -> ArrayRef {
        Arc::new(Int64Array::from(
            prog.iter()
                .map(|p| p.and_then(f).map(i64::from))
                .collect::<Vec<_>>(),
        ))
    };
    let workload = |f: &dyn for<'a> Fn(&'a qps::cgroup::Workload) -> Option<&'a str>| -> ArrayRef {
        strs(&|r| r.workload.as_deref().and_then(f))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![host; n])),
        Arc::new(StringArray::from(vec![source; n])),
        ts(start_ns),
        ts(inv.time_ns),
        strs(&|r| Some(r.dev.as_str())),
        ints(&|r| r.port.map(i64::from)),
        ints(&|r| Some(i64::from(r.lqpn))),
        ints(&|r| r.rqpn.map(i64::from)),
        strs(&|r| Some(r.qp_type.as_str())),
        strs(&|r| Some(r.state.as_str())),
        ints(&|r| r.sq_psn.map(i64::from)),
        ints(&|r| r.rq_psn.map(i64::from)),
        progress_col(&|p| p.sent),
        progress_col(&|p| p.received),
        ints(&|r| r.pid.map(i64::from)),
        strs(&|r| r.comm.as_deref()),
        Arc::new(BooleanArray::from(
            rows.iter().map(|r| r.kernel).collect::<Vec<_>>(),
        )),
        workload(&|w| Some(w.cgroup.as_str())),
        workload(&|w| w.container_id.as_deref()),
        workload(&|w| w.pod_uid.as_deref()),
        owned(&|r| r.src.map(|a| a.to_string())),
        owned(&|r| r.dst.map(|a| a.to_string())),
        ints(&|r| r.setup.map(|s| i64::from(s.traffic_class))),
        ints(&|r| r.setup.map(|s| i64::from(s.traffic_class >> 2))),
        ints(&|r| r.setup.map(|s| i64::from(s.traffic_class & 3))),
        ints(&|r| r.setup.map(|s| i64::from(s.sl))),
        owned(&|r| r.setup.map(|s| s.dgid_ip().to_string())),
        strs(&|r| r.setup.map(|s| s.source.as_str())),
        Arc::new(Int64Array::from(
            (0..n)
                .map(|i| checks.get(i).and_then(|c| c.priority).map(i64::from))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            rows.iter().map(in_error).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            (0..n)
                .map(|i| {
                    checks
                        .get(i)
                        .map_or(Verdict::Unknown, |c| c.verdict)
                        .as_str()
                })
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(schema::qps().arrow_schema(), cols)
}

fn in_error(r: &QpRow) -> bool {
    matches!(r.state.as_str(), "ERR" | "SQE")
}

/// Who a QP belongs to, for an alert: `pid 4242 (ib_write_bw, pod ...)`.
fn owner(r: &QpRow) -> String {
    let mut s = match (r.pid, &r.comm) {
        (Some(p), Some(c)) => format!("pid {p} ({c}"),
        (Some(p), None) => format!("pid {p} (command unknown"),
        (None, Some(c)) => format!("kernel ({c}"),
        (None, None) => "unknown owner (".to_string(),
    };
    if let Some(w) = r.workload.as_ref().and_then(|w| w.short()) {
        s += ", ";
        s += &w;
    }
    s.push(')');
    s
}

impl Collector {
    /// One read of the host's QPs: the rows of the interval from `start_ns` to the read, the
    /// `qp_error` alerts, the run's figures.
    pub fn on_qps(
        &mut self,
        start_ns: u64,
        inv: &Inventory,
        progress: &[Progress],
        fates: &[Fate],
    ) -> Result<(), CollectorError> {
        let t = inv.time_ns;
        let st = &mut self.host_qps;
        st.reads += 1;
        if let Some(c) = &inv.counters {
            st.counters.get_or_insert_with(CounterRun::default).add(c);
        }
        st.tc_override = inv
            .tc_override
            .iter()
            .map(|o| (format!("{}/{}", o.dev, o.port), o.traffic_class))
            .collect();
        if let Some(r) = &inv.raw {
            let mut keep = r.clone();
            keep.waiting.clear();
            st.raw = Some(keep);
        }
        st.qps = inv.qps.len() as u64;
        st.by_state.clear();
        for r in &inv.qps {
            // Looked up by reference: a key is allocated once per device and state, not per QP.
            let dev = match st.by_state.get_mut(r.dev.as_str()) {
                Some(m) => m,
                None => st.by_state.entry(r.dev.clone()).or_default(),
            };
            match dev.get_mut(r.state.as_str()) {
                Some(c) => *c += 1,
                None => {
                    dev.insert(r.state.clone(), 1);
                }
            }
        }
        st.excluded_duplicates += inv.excluded.duplicates;
        st.excluded_over_limit += inv.excluded.over_limit;
        st.cm_ids_unmatched += inv.excluded.cm_ids_unmatched;
        st.device_errors += inv.devices.iter().filter(|d| d.error.is_some()).count() as u64;
        if inv.excluded.over_limit > 0 {
            tracing::warn!(
                over_limit = inv.excluded.over_limit,
                kept = inv.qps.len(),
                "more QPs on the host than the inventory keeps; the rest are counted, not listed"
            );
        }
        let mut cands = Vec::new();
        for f in fates {
            match f {
                Fate::Appeared { .. } => st.appeared += 1,
                Fate::Gone { .. } => st.gone += 1,
                Fate::Error { row, from } => {
                    st.errors += 1;
                    let key = AlertKey {
                        iface: row.dev.clone(),
                        qp: Some(row.lqpn),
                        ..Default::default()
                    };
                    let counters = inv
                        .counters
                        .as_ref()
                        .and_then(|c| c.group_of(row.dev_index, row.lqpn))
                        .map(|g| {
                            format!(
                                "; its counter group {} ({} QPs) in the interval: {}",
                                g.id,
                                g.lqpns.len(),
                                g.describe_delta()
                            )
                        })
                        .unwrap_or_default();
                    let observed = format!(
                        "QP {} of {} ({} to peer QP {}) of {} moved from {from} to {}; send PSN {}, receive PSN {}{}{counters}",
                        row.lqpn,
                        row.dev,
                        row.qp_type,
                        row.rqpn.map_or("-".into(), |q| q.to_string()),
                        owner(row),
                        row.state,
                        row.sq_psn.map_or("-".into(), |p| p.to_string()),
                        row.rq_psn.map_or("-".into(), |p| p.to_string()),
                        row.dst.map(|d| format!(", peer {d}")).unwrap_or_default(),
                    );
                    cands.push(Alert::candidate(
                        Rule::QpError,
                        key,
                        t,
                        observed,
                        "QPs in RTS (a QP in ERR: its requester ran out of retries, a fatal remote error, or its owner moved it there)".into(),
                        1,
                        "qps",
                    ));
                }
            }
        }
        // Stalls: packets not acknowledged and no progress for the policy's qp_stall_s.
        let stall_ns = self.cfg.policy.thresholds.qp_stall_ns;
        let st = &mut self.host_qps;
        let waiting = inv
            .raw
            .as_ref()
            .map(|r| r.waiting.as_slice())
            .unwrap_or(&[]);
        st.stalled.retain(|k, since| {
            waiting
                .iter()
                .any(|w| (w.dev_index, w.lqpn) == *k && w.since_ns == *since)
        });
        for w in waiting {
            let key = (w.dev_index, w.lqpn);
            let stuck_ns = t.saturating_sub(w.since_ns);
            if stuck_ns < stall_ns || st.stalled.get(&key) == Some(&w.since_ns) {
                continue;
            }
            let Ok(i) = inv.qps.binary_search_by_key(&key, QpRow::key) else {
                continue;
            };
            let row = &inv.qps[i];
            st.stalled.insert(key, w.since_ns);
            st.stalls += 1;
            let counters = inv
                .counters
                .as_ref()
                .and_then(|c| c.group_of(row.dev_index, row.lqpn))
                .map(|g| format!("; its counter group {}: {}", g.id, g.describe_delta()))
                .unwrap_or_default();
            cands.push(Alert::candidate(
                Rule::QpStalled,
                AlertKey {
                    iface: row.dev.clone(),
                    qp: Some(row.lqpn),
                    ..Default::default()
                },
                t,
                format!(
                    "QP {} of {} ({} to peer QP {}) of {}: {} packets sent and not acknowledged, no progress for {:.1} s (next send PSN {}, last acknowledged PSN {}){}{counters}",
                    row.lqpn,
                    row.dev,
                    row.qp_type,
                    row.rqpn.map_or("-".into(), |q| q.to_string()),
                    owner(row),
                    w.unacknowledged,
                    stuck_ns as f64 / 1e9,
                    w.next_send_psn,
                    w.last_acked_psn,
                    row.dst.map(|d| format!(", peer {d}")).unwrap_or_default(),
                ),
                format!(
                    "acknowledgements within {} s of sending (policy qp_stall_s)",
                    stall_ns as f64 / 1e9
                ),
                1,
                "qps",
            ));
        }
        // Each QP's marking against the policy and its port's QoS configuration (trust mode,
        // DSCP to priority, PFC-enabled priorities) as the NIC source last read it.
        let policy = self
            .cfg
            .nic_policy
            .clone()
            .unwrap_or_else(|| nic::command::check_policy(&self.cfg.policy).0);
        // One port QoS per (device, port) of the read, not one copy per QP.
        let mut qos_of: std::collections::HashMap<(&str, Option<u32>), PortQos> =
            std::collections::HashMap::new();
        let checks: Vec<MarkingCheck> = inv
            .qps
            .iter()
            .map(|r| {
                let qos = qos_of
                    .entry((r.dev.as_str(), r.port))
                    .or_insert_with(|| self.host_qps.qos_of(&r.dev, r.port));
                // The device's traffic-class override replaces what a QP set up through the
                // kernel asked for (the probe's record); mlx5's raw context already holds what
                // the device applied.
                let over = inv
                    .tc_override_of(&r.dev, r.port)
                    .filter(|_| r.setup.is_some_and(|s| s.source == qps::SetUpSource::Probe));
                let marking = r.setup.map(|s| {
                    let mut m = s.marking();
                    if let Some(t) = over {
                        m.traffic_class = t;
                    }
                    m
                });
                let mut c = verdict::check(marking, &policy, qos);
                if let (Some(t), Some(s)) = (over, r.setup)
                    && t != s.traffic_class
                {
                    c.reason = format!(
                        "{} (the device's override tc/{}/traffic_class = {t} replaces the traffic class {} the QP asked for)",
                        c.reason,
                        r.port.unwrap_or(0),
                        s.traffic_class
                    );
                }
                c
            })
            .collect();
        let st = &mut self.host_qps;
        st.marking.clear();
        let mut seen = std::collections::HashMap::with_capacity_and_hasher(
            inv.qps.len(),
            crate::sources::datapath::FastHash::default(),
        );
        for (r, c) in inv.qps.iter().zip(&checks) {
            *st.marking.entry(c.verdict.as_str()).or_default() += 1;
            let before = st.verdicts.get(&r.key()).copied();
            seen.insert(r.key(), c.verdict);
            let off = matches!(c.verdict, Verdict::OffPolicy | Verdict::Lossy);
            if off && before != Some(c.verdict) {
                let key = AlertKey {
                    iface: r.dev.clone(),
                    qp: Some(r.lqpn),
                    ..Default::default()
                };
                let peer = r
                    .setup
                    .map(|s| format!(" to {}", s.dgid_ip()))
                    .unwrap_or_default();
                cands.push(Alert::candidate(
                    Rule::QpMarking,
                    key,
                    t,
                    format!(
                        "QP {} of {} ({}{}) of {}: {}",
                        r.lqpn,
                        r.dev,
                        r.qp_type,
                        peer,
                        owner(r),
                        c.reason
                    ),
                    format!(
                        "RoCE data QPs set up with DSCP {} on the lossless priority {}",
                        policy.data_dscp, policy.rdma_priority
                    ),
                    1,
                    "qps",
                ));
            }
        }
        st.verdicts = seen;
        let batch = qps_batch(
            &self.run.host,
            self.run.source,
            start_ns,
            inv,
            progress,
            &checks,
        )?;
        self.each_sink(t, |k| k.qps(&batch, start_ns));
        if let Some(c) = &inv.counters {
            self.each_sink(t, |k| k.qp_counters(&c.groups, t));
        }
        for a in cands {
            self.offer(a);
        }
        self.each_sink(t, |k| k.flush(t));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    fn row(lqpn: u32, state: &str) -> QpRow {
        QpRow {
            dev: "mlx5_0".into(),
            dev_index: 1,
            port: Some(1),
            lqpn,
            rqpn: Some(lqpn + 100),
            qp_type: "RC".into(),
            state: state.into(),
            sq_psn: Some(10),
            rq_psn: Some(20),
            pid: Some(4242),
            comm: Some("all_reduce_perf".into()),
            ..QpRow::default()
        }
    }

    #[test]
    fn a_batch_follows_the_table_and_lines_progress_up_with_its_qp() {
        let inv = Inventory {
            time_ns: 2_000_000_000,
            qps: vec![row(17, "RTS"), row(18, "ERR")],
            ..Inventory::default()
        };
        // no progress for 17 (new), progress for 18
        let p = vec![
            Progress {
                dev_index: 1,
                lqpn: 17,
                ..Progress::default()
            },
            Progress {
                dev_index: 1,
                lqpn: 18,
                sent: Some(5),
                received: Some(7),
            },
        ];
        let b = qps_batch("h", "live", 1_000_000_000, &inv, &p, &[]).unwrap();
        assert_eq!(b.num_rows(), 2);
        let t = schema::qps();
        let tx = t.ints(&b, "tx_pkts", "test").unwrap();
        assert!(tx.is_null(0));
        assert_eq!(tx.value(1), 5);
        assert_eq!(t.ints(&b, "rx_pkts", "test").unwrap().value(1), 7);
        let err = b
            .column_by_name("error")
            .unwrap()
            .as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap();
        assert!(!err.value(0) && err.value(1));
        assert_eq!(
            t.strings(&b, "marking", "test").unwrap().value(0),
            "unknown"
        );
    }
}
