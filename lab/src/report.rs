//! The injected-vs-observed table: what the lab did (requester/responder logs, nftables
//! counters, PFC frames sent) beside what roce-observe reported (summary.json, alerts), and the
//! lab's own consistency checks of its ground truth.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// One compared quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub what: String,
    /// Ground truth and where it comes from.
    pub injected: u64,
    pub injected_src: String,
    /// roce-observe's number (None when the observer did not report it) and where it was read.
    pub observed: Option<u64>,
    pub observed_src: String,
}

impl Row {
    pub fn agrees(&self) -> bool {
        self.observed == Some(self.injected)
    }
}

/// Expectation on one alert rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertCheck {
    pub rule: String,
    /// true: must fire at least once; false: must not fire.
    pub must_fire: bool,
    pub count: Option<u64>,
}

impl AlertCheck {
    pub fn agrees(&self) -> bool {
        match self.count {
            Some(n) => (n > 0) == self.must_fire,
            None => false,
        }
    }
}

/// A check that holds or not, with what it read: of the lab's own ground truth
/// (`self_checks`), or of the passive latency measured ([`ScenarioReport::latency`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfCheck {
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Default)]
pub struct ScenarioReport {
    pub scenario: String,
    pub observer: String,
    pub rows: Vec<Row>,
    /// Expectations on alert rules (empty when no alert counts were read).
    pub alerts: Vec<AlertCheck>,
    pub all_alerts: BTreeMap<String, u64>,
    pub self_checks: Vec<SelfCheck>,
    /// The latency scenarios: the ACK round trips of h1's capture, replayed with latency on,
    /// against the responder's delay (`crate::latency`).
    pub latency: Vec<SelfCheck>,
    pub info: Vec<(String, String)>,
    /// The path view: `roce-analyze path`'s comparison of the observers' output, for people.
    pub path: Vec<String>,
    pub secs: f64,
}

impl ScenarioReport {
    pub fn ok(&self) -> bool {
        self.rows.iter().all(Row::agrees)
            && self.alerts.iter().all(AlertCheck::agrees)
            && self.self_checks.iter().all(|c| c.ok)
            && self.latency.iter().all(|c| c.ok)
    }

    pub fn disagreements(&self) -> Vec<String> {
        let mut v = Vec::new();
        for r in self.rows.iter().filter(|r| !r.agrees()) {
            v.push(format!(
                "{}: injected {} ({}), observed {} ({})",
                r.what,
                r.injected,
                r.injected_src,
                r.observed.map_or("-".into(), |n| n.to_string()),
                r.observed_src
            ));
        }
        for a in self.alerts.iter().filter(|a| !a.agrees()) {
            v.push(format!(
                "alert {}: expected {}, got {}",
                a.rule,
                if a.must_fire { "to fire" } else { "silence" },
                a.count.map_or("no count".into(), |n| n.to_string())
            ));
        }
        for c in self.self_checks.iter().filter(|c| !c.ok) {
            v.push(format!("lab self-check {}: {}", c.what, c.detail));
        }
        for c in self.latency.iter().filter(|c| !c.ok) {
            v.push(format!("latency {}: {}", c.what, c.detail));
        }
        v
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n=== scenario {} ({:.1} s) — observer: {}",
            self.scenario, self.secs, self.observer
        );
        let w = self
            .rows
            .iter()
            .map(|r| r.what.len())
            .max()
            .unwrap_or(10)
            .max(10);
        let _ = writeln!(
            s,
            "{:<w$}  {:>9}  {:>9}  {:<5}  injected from / observed at",
            "quantity", "injected", "observed", ""
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<w$}  {:>9}  {:>9}  {:<5}  {} / {}",
                r.what,
                r.injected,
                r.observed.map_or("-".into(), |n| n.to_string()),
                if r.agrees() { "ok" } else { "DIFF" },
                r.injected_src,
                r.observed_src
            );
        }
        if !self.alerts.is_empty() {
            let _ = writeln!(s, "alerts (roce-observe alerts.jsonl / summary.json):");
            for a in &self.alerts {
                let _ = writeln!(
                    s,
                    "  {:<22} expected {:<8} got {:>6}  {}",
                    a.rule,
                    if a.must_fire { "to fire" } else { "silence" },
                    a.count.map_or("-".into(), |n| n.to_string()),
                    if a.agrees() { "ok" } else { "DIFF" }
                );
            }
            let others: Vec<String> = self
                .all_alerts
                .iter()
                .filter(|(k, _)| !self.alerts.iter().any(|a| &a.rule == *k))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !others.is_empty() {
                let _ = writeln!(s, "  other alerts (not asserted): {}", others.join(", "));
            }
        }
        for c in &self.self_checks {
            let _ = writeln!(
                s,
                "lab self-check {:<40} {}  {}",
                c.what,
                if c.ok { "ok" } else { "FAIL" },
                c.detail
            );
        }
        if !self.latency.is_empty() {
            let _ = writeln!(
                s,
                "latency (tcpdump on h1-eth0, replayed with latency on; docs/latency.md):"
            );
            for c in &self.latency {
                let _ = writeln!(
                    s,
                    "  {:<50} {}  {}",
                    c.what,
                    if c.ok { "ok" } else { "FAIL" },
                    c.detail
                );
            }
        }
        if !self.path.is_empty() {
            let _ = writeln!(
                s,
                "path view (roce-analyze path's comparison of the observers' output):"
            );
            for l in &self.path {
                let _ = writeln!(s, "  {l}");
            }
        }
        for (k, v) in &self.info {
            let _ = writeln!(s, "  {k}: {v}");
        }
        let _ = writeln!(
            s,
            "=> {}",
            if self.ok() {
                "injected and observed AGREE"
            } else {
                "injected and observed DISAGREE"
            }
        );
        s
    }
}

/// Reads per-QP and per-interface numbers out of summary.json documents.
pub struct Summaries<'a> {
    pub docs: &'a [Value],
}

impl Summaries<'_> {
    fn qps(&self) -> impl Iterator<Item = &Value> {
        self.docs
            .iter()
            .flat_map(|d| d["qps"].as_array().map(|a| a.iter()).into_iter().flatten())
    }

    /// Whether any interface entry exists for (iface, dir).
    pub fn has(&self, iface: &str, dir: &str) -> bool {
        self.docs.iter().any(|d| {
            d["interfaces"]
                .as_array()
                .is_some_and(|a| a.iter().any(|i| i["iface"] == iface && i["dir"] == dir))
        }) || self.qps().any(|q| q["iface"] == iface && q["dir"] == dir)
    }

    /// Sum of a numeric per-QP field over the keys (iface, dir, src, dst).
    pub fn qp_sum(&self, iface: &str, dir: &str, src: &str, dst: &str, field: &str) -> Option<u64> {
        let mut any = false;
        let mut n = 0;
        for q in self.qps() {
            if q["iface"] == iface && q["dir"] == dir && q["src"] == src && q["dst"] == dst {
                any = true;
                n += q[field].as_u64()?;
            }
        }
        if any || self.has(iface, dir) {
            Some(n)
        } else {
            None
        }
    }

    /// Data packets whose DSCP is not `expected` over the keys (iface, dir, src, dst).
    pub fn data_dscp_not(
        &self,
        iface: &str,
        dir: &str,
        src: &str,
        dst: &str,
        expected: u8,
    ) -> Option<u64> {
        if !self.has(iface, dir) {
            return None;
        }
        let mut n = 0;
        for q in self.qps() {
            if q["iface"] == iface && q["dir"] == dir && q["src"] == src && q["dst"] == dst {
                let h = q["dscp"]["data"].as_object()?;
                for (k, v) in h {
                    if k != &expected.to_string() {
                        n += v.as_u64()?;
                    }
                }
            }
        }
        Some(n)
    }

    /// The densest second of XOFF frames of `priority` on an interface direction over the run
    /// (summary.json `pfc_storm_figures`), the largest over the summaries.
    pub fn storm_peak(&self, iface: &str, dir: &str, priority: usize) -> Option<u64> {
        self.docs
            .iter()
            .filter_map(|d| d["pfc_storm_figures"][iface]["max_xoff_per_s"][dir][priority].as_f64())
            .map(|v| v as u64)
            .max()
    }

    /// An interface counter: `path` like ["pfc", "xoff", "3"] or ["pause", "frames"].
    pub fn iface(&self, iface: &str, dir: &str, path: &[&str]) -> Option<u64> {
        for d in self.docs {
            for i in d["interfaces"].as_array()?.iter() {
                if i["iface"] == iface && i["dir"] == dir {
                    let mut v = i;
                    for p in path {
                        v = match p.parse::<usize>() {
                            Ok(ix) if v.is_array() => &v[ix],
                            _ => &v[*p],
                        };
                    }
                    return v.as_u64();
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_sum_by_key_and_read_interface_arrays() {
        let d = vec![json!({
            "interfaces": [{"iface": "h2-eth0", "dir": "ingress", "pfc": {"xoff": [0,0,0,7,0,0,0,0]}, "pause": {"frames": 2}}],
            "qps": [
                {"iface": "h2-eth0", "dir": "ingress", "src": "10.77.0.1", "dst": "10.77.0.2", "qp": 1, "psn_gaps": 2, "dscp": {"data": {"26": 5, "0": 3}}},
                {"iface": "h2-eth0", "dir": "ingress", "src": "10.77.0.1", "dst": "10.77.0.2", "qp": 2, "psn_gaps": 1, "dscp": {"data": {"0": 1}}},
                {"iface": "h2-eth0", "dir": "egress", "src": "10.77.0.2", "dst": "10.77.0.1", "qp": 9, "psn_gaps": 100}
            ]
        })];
        let s = Summaries { docs: &d };
        assert_eq!(
            s.qp_sum("h2-eth0", "ingress", "10.77.0.1", "10.77.0.2", "psn_gaps"),
            Some(3)
        );
        assert_eq!(
            s.data_dscp_not("h2-eth0", "ingress", "10.77.0.1", "10.77.0.2", 26),
            Some(4)
        );
        assert_eq!(
            s.iface("h2-eth0", "ingress", &["pfc", "xoff", "3"]),
            Some(7)
        );
        assert_eq!(s.iface("h2-eth0", "ingress", &["pause", "frames"]), Some(2));
        assert_eq!(
            s.qp_sum("h1-eth0", "egress", "10.77.0.1", "10.77.0.2", "psn_gaps"),
            None
        );
    }

    #[test]
    fn a_missing_observation_is_a_disagreement() {
        let r = ScenarioReport {
            rows: vec![Row {
                what: "x".into(),
                injected: 0,
                injected_src: "a".into(),
                observed: None,
                observed_src: "b".into(),
            }],
            ..Default::default()
        };
        assert!(!r.ok());
        assert_eq!(r.disagreements().len(), 1);
    }
}
