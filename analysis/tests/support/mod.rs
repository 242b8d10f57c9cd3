//! Flow-log trees written by the real collector, shared by the tests.
#![allow(dead_code)]

pub use test_support::corpus;

use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::datapath::Datapath;

/// Corpus cases with every fault the report checks (PSN gaps, go-back-N, CE and CNPs, bleached
/// DSCP, CNPs on the data class, PFC, 802.3x PAUSE, QinQ) beside a clean one.
pub const FAULTS: [&str; 9] = [
    "clean",
    "go_back_n",
    "psn_wrap_loss",
    "ecn_ce_cnp",
    "bleached",
    "cnp_on_data_class",
    "pfc",
    "pause_8023x",
    "qinq",
];

/// Runs the Ethernet cases named `names` through Datapath + Collector into `out`; returns the
/// collector's summary JSON.
pub fn write_logs(out: &std::path::Path, names: &[&str]) -> serde_json::Value {
    write_logs_with(out, names, PolicyConfig::profile("nvidia").unwrap(), "t")
}

/// [`write_logs`] under `policy`, as host `host`.
pub fn write_logs_with(
    out: &std::path::Path,
    names: &[&str],
    policy: PolicyConfig,
    host: &str,
) -> serde_json::Value {
    let mut col = Collector::new(CollectorConfig::new(
        out.to_path_buf(),
        host,
        "replay",
        policy.clone(),
    ))
    .unwrap();
    let t0 = 1_700_000_000_000_000_000u64;
    // One interface per case: cases reuse keys and PSNs.
    for c in corpus::corpus()
        .into_iter()
        .filter(|c| names.contains(&c.name))
    {
        assert_eq!(c.linktype, corpus::LINKTYPE_ETHERNET, "{}", c.name);
        let mut dp = Datapath::new(policy.expected, 10_000);
        for (i, r) in c.recs.iter().enumerate() {
            dp.process(&r.data, r.data.len() as u32, t0 + r.ts_ns, 0);
            col.on_events(c.name, &dp.take_events());
            if i % 7 == 6 {
                col.on_snapshot(&dp.snapshot(c.name, t0 + r.ts_ns, Some(100_000_000_000)))
                    .unwrap();
            }
        }
        let end = c.recs.last().map(|r| r.ts_ns).unwrap_or(0) + 1_000_000_000;
        col.on_snapshot(&dp.snapshot(c.name, t0 + end, Some(100_000_000_000)))
            .unwrap();
    }
    col.finish().unwrap()
}
