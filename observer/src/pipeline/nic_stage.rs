//! The NIC stage of the collector: each interval's sample of an interface's NIC becomes a
//! `nic` row (vendor-neutral quantities, the other counters raw, gauges, the configuration when
//! it changed), candidates of the NIC counter rules, and, at start-up and whenever the
//! configuration changes, the `config_*` checks against the policy.

use super::rules::{self, NicInterval};
use super::{Collector, CollectorError};
use crate::sinks::row_builders::{self, NicRow};
use crate::sources::nic::{Check, NicSample, Normalized, Quantity, run_checks};

/// What the collector keeps of one interface's NIC between samples.
#[derive(Default)]
pub struct NicState {
    /// The configuration as last seen (JSON), to notice a change.
    config: Option<String>,
    /// A changed configuration not yet written in a row.
    config_unwritten: Option<String>,
    /// The previous sample's time: the next row's interval start.
    prev_time: Option<u64>,
    /// The length of the previous interval between samples, s.
    prev_secs: f64,
}

/// The configuration part of a sample, as the `config` column holds it.
fn config_json(s: &NicSample) -> String {
    serde_json::json!({"dcb": s.dcb, "config": s.config, "driver": s.drvinfo}).to_string()
}

/// The row of one interval.
fn nic_row(
    iface: &str,
    start: u64,
    s: &NicSample,
    n: &Normalized,
    config: Option<String>,
) -> NicRow {
    let all = Quantity::all();
    let quantities = all
        .iter()
        .map(|q| n.get(*q).and_then(|v| v.delta).map(|d| d as i64))
        .collect();
    let prefix = |src| match src {
        crate::sources::nic::normalize::Src::Ethtool => "ethtool",
        crate::sources::nic::normalize::Src::Rdma => "rdma",
    };
    let raw = n
        .raw
        .iter()
        .filter(|r| r.delta != Some(0))
        .map(|r| {
            (
                format!("{}:{}", prefix(r.src), r.name),
                r.delta.map(|d| d as i64),
            )
        })
        .collect();
    let gauges = n
        .gauges
        .iter()
        .map(|g| {
            (
                format!("{}:{}", prefix(g.src), g.name),
                g.value.map(|v| v as i64),
            )
        })
        .collect();
    let resets =
        n.quantities.iter().filter(|q| q.reset).count() + n.raw.iter().filter(|r| r.reset).count();
    NicRow {
        iface: iface.to_string(),
        start_ns: start,
        end_ns: s.time_ns,
        driver: format!("{:?}", s.driver()).to_lowercase(),
        rdma_device: s.rdma.as_ref().map(|r| r.dev.clone()),
        quantities,
        counter_resets: resets as i64,
        raw,
        gauges,
        config,
    }
}

impl Collector {
    /// One sample of `iface`'s NIC, with the vendor-neutral counters since the previous sample
    /// (`None` for the first: only the configuration is looked at).
    pub fn on_nic(
        &mut self,
        iface: &str,
        s: &NicSample,
        counters: Option<&Normalized>,
    ) -> Result<(), CollectorError> {
        let t = s.time_ns;
        let json = config_json(s);
        let st = self.nics.entry(iface.to_string()).or_default();
        let changed = st.config.as_deref() != Some(json.as_str());
        if changed {
            st.config = Some(json.clone());
            st.config_unwritten = Some(json);
        }
        let start = st.prev_time.replace(t);
        let mut cands = Vec::new();
        if changed && let Some(p) = &self.cfg.nic_policy {
            let checks: Vec<Check> = run_checks(p, s);
            tracing::info!(
                iface,
                checks = checks.len(),
                failed = checks
                    .iter()
                    .filter(|c| c.verdict == crate::sources::nic::Verdict::Fail)
                    .count(),
                "NIC configuration checked"
            );
            cands.extend(
                checks
                    .iter()
                    .filter_map(|c| rules::config_check(iface, c, t)),
            );
        }
        if let (Some(n), Some(start)) = (counters, start) {
            let secs = t.saturating_sub(start) as f64 / 1e9;
            // a partial interval (the last, at a stop) is not extrapolated to a rate
            let rate_secs = secs.max(st.prev_secs);
            st.prev_secs = secs;
            let x = NicInterval {
                iface,
                counters: n,
                secs,
                rate_secs,
                end_ns: t,
            };
            let pol = &self.cfg.policy;
            rules::nic_interval(&x, &pol.expected, &pol.thresholds, &mut cands);
            let row = nic_row(iface, start, s, n, st.config_unwritten.take());
            let batch = row_builders::nic_batch(&self.run.host, self.run.source, &[row])?;
            self.each_sink(t, |k| k.nic(&batch, start));
        }
        for a in cands {
            self.offer(a);
        }
        self.each_sink(t, |k| k.flush(t));
        Ok(())
    }
}
