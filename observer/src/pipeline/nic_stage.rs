//! The NIC stage of the collector: each interval's sample of an interface's NIC becomes a
//! `nic` row (vendor-neutral quantities, the other counters raw, gauges, the configuration when
//! it changed), candidates of the NIC counter rules, and, at start-up and whenever the
//! configuration changes, the `config_*` checks against the policy.

use super::rows::{self, NicRow};
use super::rules::{self, NicInterval};
use super::{Collector, CollectorError};
use nic::{Check, NicSample, Normalized, Quantity, run_checks};

/// What the collector keeps of one interface's NIC between samples.
#[derive(Default)]
pub struct NicState {
    /// The configuration as last seen (JSON), to notice a change.
    config: Option<String>,
    /// A changed configuration not yet written in a row.
    config_unwritten: Option<String>,
    /// The previous sample's time: the next row's interval start.
    prev_time: Option<u64>,
    /// The PFC frames of the last intervals that make up the trailing second (at least), for
    /// the storm rule's rate: (the interval's length in s, frames received per priority, frames
    /// sent per priority), oldest first.
    pfc_window: std::collections::VecDeque<(f64, [u64; 8], [u64; 8])>,
}

/// Adds an interval's PFC frames to `w` and drops the oldest intervals the trailing second no
/// longer needs (those before the newest ones that together last at least 1 s); returns the
/// window's length and frames received and sent per priority.
fn pfc_window(
    w: &mut std::collections::VecDeque<(f64, [u64; 8], [u64; 8])>,
    secs: f64,
    rx: [u64; 8],
    tx: [u64; 8],
) -> (f64, [u64; 8], [u64; 8]) {
    w.push_back((secs, rx, tx));
    // bounded: at most the intervals of one second, and never more than 10,000
    while w.len() > 1 {
        let rest: f64 = w.iter().skip(1).map(|e| e.0).sum();
        if rest >= 1.0 || w.len() > 10_000 {
            w.pop_front();
        } else {
            break;
        }
    }
    let (mut len, mut r, mut t) = (0.0, [0u64; 8], [0u64; 8]);
    for (s, a, b) in w.iter() {
        len += s;
        for p in 0..8 {
            r[p] = r[p].saturating_add(a[p]);
            t[p] = t[p].saturating_add(b[p]);
        }
    }
    (len, r, t)
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
        nic::normalize::Src::Ethtool => "ethtool",
        nic::normalize::Src::Rdma => "rdma",
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
        self.host_qps.note_nic_sample(s);
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
                    .filter(|c| c.verdict == nic::Verdict::Fail)
                    .count(),
                "NIC configuration checked"
            );
            cands.extend(
                checks
                    .iter()
                    .filter_map(|c| rules::config_check(iface, c, t)),
            );
            for k in self.sinks.iter_mut() {
                k.nic_checks(iface, &checks);
            }
        }
        if let (Some(n), Some(start)) = (counters, start) {
            let secs = t.saturating_sub(start) as f64 / 1e9;
            // PFC rates over the trailing second at least: an interval shorter than a second
            // (a short --interval, the partial last one at a stop) is not extrapolated
            let frames = |q: fn(u8) -> Quantity| {
                std::array::from_fn(|p| n.get(q(p as u8)).and_then(|v| v.delta).unwrap_or(0))
            };
            let (window_secs, window_rx, window_tx) = pfc_window(
                &mut st.pfc_window,
                secs,
                frames(Quantity::PfcRxFrames),
                frames(Quantity::PfcTxFrames),
            );
            let x = NicInterval {
                iface,
                counters: n,
                secs,
                window_secs,
                window_rx,
                window_tx,
                end_ns: t,
            };
            let pol = &self.cfg.policy;
            rules::nic_interval(&x, &pol.expected, &pol.thresholds, &mut cands);
            let row = nic_row(iface, start, s, n, st.config_unwritten.take());
            let batch = rows::nic_batch(&self.run.host, self.run.source, &[row])?;
            self.each_sink(t, |k| k.nic(&batch, start));
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

    #[test]
    fn the_pfc_window_spans_the_trailing_second() {
        let mut w = std::collections::VecDeque::new();
        let one = |n: u64| {
            let mut a = [0u64; 8];
            a[3] = n;
            a
        };
        // 1 s intervals: the window is the interval itself
        assert_eq!(
            pfc_window(&mut w, 1.0, one(10), one(1)),
            (1.0, one(10), one(1))
        );
        assert_eq!(
            pfc_window(&mut w, 1.0, one(20), one(0)),
            (1.0, one(20), one(0))
        );
        // a partial interval of 20 ms joins the second before it
        let (len, rx, _) = pfc_window(&mut w, 0.02, one(5), one(0));
        assert!((len - 1.02).abs() < 1e-9);
        assert_eq!(rx, one(25));
        // 100 ms intervals: ten of them make the window, the older ones leave it
        let mut w = std::collections::VecDeque::new();
        let mut last = (0.0, [0; 8], [0; 8]);
        for i in 0..25u64 {
            last = pfc_window(&mut w, 0.1, one(i), one(0));
        }
        assert!(w.len() <= 11, "{}", w.len());
        assert!(last.0 >= 1.0 - 1e-9 && last.0 < 1.1 + 1e-9, "{}", last.0);
        // the newest intervals: 24, 23, ... as many as make a second
        let want: u64 = (25 - w.len() as u64..25).sum();
        assert_eq!(last.1, one(want));
    }
}
