//! Counter semantics between two samples: width-aware deltas, resets, absent counters, gauges.
//!
//! - Width: mlx5 RDMA Q counters are read with `be32_to_cpu` and wrap at 2^32
//!   (`drivers/infiniband/hw/mlx5/counters.c` `mlx5_ib_query_q_counters`, arrays `basic_q_cnts`,
//!   `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`, `roce_accl_cnts`); so does the
//!   mlx5e `rx_out_of_buffer` (`en_stats.c`, `MLX5E_READ_CTR32_CPU`). Everything else is 64-bit
//!   (mlx5 cong/PPCNT counters, bnxt, irdma accumulates into u64, rxe atomic64).
//! - A decrease on a 64-bit counter, or one a single 32-bit wrap cannot explain, is a reset
//!   (driver reload, FW reset): the delta is the new value and the reset is counted. A 32-bit
//!   decrease counts as a wrap when the wrapped delta is at most 2^31 (a plausible interval);
//!   otherwise it is a reset.
//! - A counter absent in either sample has no delta (`None`), never 0. Names that appear or
//!   disappear between samples (mlx5 `rx_prio<N>_pause` exist only for PFC-enabled priorities)
//!   are listed.
//! - Gauges are levels, reported as the current value: bnxt_re `active_*`, `watermark_*`,
//!   `db_fifo_register` (`drivers/infiniband/hw/bnxt_re/hw_counters.c`), and `max_*` of
//!   Broadcom's own bnxt_re (`max_qp`), mlx5e
//!   `outbound_pci_stalled_rd` / `_wr` (percent; their `*_events` are counters), veth
//!   `peer_ifindex`.
//! - Duplicate names inside one sample (some drivers repeat per-queue names) get `#2`, `#3`
//!   suffixes in order of appearance so each is tracked on its own.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::normalize::{Driver, Src};

/// Counter width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Width {
    W32,
    W64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Counter(Width),
    Gauge,
}

/// mlx5 RDMA Q counters (32-bit).
const MLX5_Q_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
];

const BNXT_RE_GAUGES: &[&str] = &[
    "active_pds",
    "active_ahs",
    "active_qps",
    "active_rc_qps",
    "active_ud_qps",
    "active_srqs",
    "active_cqs",
    "active_mrs",
    "active_mws",
    "db_fifo_register",
];

/// How a counter behaves, by driver, source and raw name.
pub fn kind_of(driver: Driver, src: Src, name: &str) -> Kind {
    let name = name.trim_end();
    match (driver, src) {
        (Driver::Mlx5, Src::Rdma) => {
            // switchdev representors carry a `vport_` prefix
            let base = name.strip_prefix("vport_").unwrap_or(name);
            if MLX5_Q_COUNTERS.contains(&base) {
                return Kind::Counter(Width::W32);
            }
        }
        (Driver::Mlx5, Src::Ethtool) => match name {
            "rx_out_of_buffer" => return Kind::Counter(Width::W32),
            "outbound_pci_stalled_rd" | "outbound_pci_stalled_wr" => return Kind::Gauge,
            _ => {}
        },
        // Broadcom's own bnxt_re also reports levels as `active_qp`, `max_qp`, ...: gauges too
        (Driver::Bnxt, Src::Rdma)
            if BNXT_RE_GAUGES.contains(&name)
                || name.starts_with("watermark_")
                || name.starts_with("active_")
                || name.starts_with("max_") =>
        {
            return Kind::Gauge;
        }
        _ => {}
    }
    if src == Src::Ethtool && name == "peer_ifindex" {
        return Kind::Gauge;
    }
    Kind::Counter(Width::W64)
}

/// A delta between two readings of one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub value: u64,
    pub reset: bool,
    pub wrapped: bool,
}

/// Width-aware delta from `prev` to `cur`.
pub fn delta(width: Width, prev: u64, cur: u64) -> Delta {
    if cur >= prev {
        return Delta {
            value: cur - prev,
            reset: false,
            wrapped: false,
        };
    }
    if width == Width::W32 && prev <= u32::MAX as u64 {
        let wrapped = (1u64 << 32) - prev + cur;
        if wrapped <= 1u64 << 31 {
            return Delta {
                value: wrapped,
                reset: false,
                wrapped: true,
            };
        }
    }
    Delta {
        value: cur,
        reset: true,
        wrapped: false,
    }
}

/// One counter over an interval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    pub name: String,
    /// `None` when the counter is absent in either sample.
    pub delta: Option<u64>,
    pub reset: bool,
    pub wrapped: bool,
}

/// A gauge's current value (`None` when absent now).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaugeValue {
    pub name: String,
    pub value: Option<u64>,
}

/// The deltas of one source between two samples.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDiff {
    /// Current-sample order, then names only in the previous sample.
    pub counters: Vec<CounterDelta>,
    pub gauges: Vec<GaugeValue>,
    pub resets: u32,
    pub wraps: u32,
    /// Names present now and not before.
    pub appeared: Vec<String>,
    /// Names present before and not now.
    pub disappeared: Vec<String>,
}

impl CounterDiff {
    pub fn get(&self, name: &str) -> Option<&CounterDelta> {
        self.counters.iter().find(|c| c.name == name)
    }
}

/// Gives repeated names `#2`, `#3`, ... suffixes (first occurrence unchanged).
pub fn unique_names(v: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut seen: HashMap<&str, u32> = HashMap::with_capacity(v.len());
    v.iter()
        .map(|(n, x)| {
            let c = seen.entry(n.as_str()).or_insert(0);
            *c += 1;
            if *c == 1 {
                (n.clone(), *x)
            } else {
                (format!("{n}#{c}"), *x)
            }
        })
        .collect()
}

/// Deltas of one source between `prev` and `cur` (`None` = source unavailable in that sample).
pub fn diff_counters(
    driver: Driver,
    src: Src,
    prev: Option<&[(String, u64)]>,
    cur: Option<&[(String, u64)]>,
) -> CounterDiff {
    let prev = prev.map(unique_names).unwrap_or_default();
    let cur = cur.map(unique_names).unwrap_or_default();
    let before: HashMap<&str, u64> = prev.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let now: HashMap<&str, u64> = cur.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut d = CounterDiff::default();
    for (name, v) in &cur {
        let old = before.get(name.as_str()).copied();
        match kind_of(driver, src, name) {
            Kind::Gauge => d.gauges.push(GaugeValue {
                name: name.clone(),
                value: Some(*v),
            }),
            Kind::Counter(w) => {
                let x = old.map(|o| delta(w, o, *v));
                d.resets += x.is_some_and(|x| x.reset) as u32;
                d.wraps += x.is_some_and(|x| x.wrapped) as u32;
                d.counters.push(CounterDelta {
                    name: name.clone(),
                    delta: x.map(|x| x.value),
                    reset: x.is_some_and(|x| x.reset),
                    wrapped: x.is_some_and(|x| x.wrapped),
                });
            }
        }
        if old.is_none() && !before.is_empty() {
            d.appeared.push(name.clone());
        }
    }
    for (name, _) in prev.iter().filter(|(n, _)| !now.contains_key(n.as_str())) {
        if !now.is_empty() {
            d.disappeared.push(name.clone());
        }
        match kind_of(driver, src, name) {
            Kind::Gauge => d.gauges.push(GaugeValue {
                name: name.clone(),
                value: None,
            }),
            Kind::Counter(_) => d.counters.push(CounterDelta {
                name: name.clone(),
                delta: None,
                reset: false,
                wrapped: false,
            }),
        }
    }
    if d.resets > 0 {
        tracing::info!(
            ?src,
            resets = d.resets,
            "NIC counters reset between samples"
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::super::normalize::{Quantity, normalize};
    use super::*;

    fn s(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(n, x)| (n.to_string(), *x)).collect()
    }

    #[test]
    fn delta_rules() {
        assert_eq!(
            delta(Width::W64, 10, 15),
            Delta {
                value: 5,
                reset: false,
                wrapped: false
            }
        );
        // 32-bit wrap: 0xffff_fff0 -> 0x10 is 0x20 increments
        assert_eq!(
            delta(Width::W32, 0xffff_fff0, 0x10),
            Delta {
                value: 0x20,
                reset: false,
                wrapped: true
            }
        );
        // 64-bit decrease: reset, delta = new value
        assert_eq!(
            delta(Width::W64, 1000, 7),
            Delta {
                value: 7,
                reset: true,
                wrapped: false
            }
        );
        // 32-bit decrease from a low value: a wrap would be > 2^31 increments -> reset
        assert_eq!(
            delta(Width::W32, 1000, 7),
            Delta {
                value: 7,
                reset: true,
                wrapped: false
            }
        );
        // 32-bit counter holding a value above 2^32: cannot be a 32-bit wrap
        assert!(delta(Width::W32, 1 << 33, 5).reset);
    }

    #[test]
    fn mlx5_rdma_wrap_reset_and_absent() {
        let prev = s(&[
            ("out_of_sequence", 0xffff_ff00),
            ("np_cnp_sent", 500),
            ("rp_cnp_handled", 9),
            ("packet_seq_err", 3),
        ]);
        let cur = s(&[
            ("out_of_sequence", 0x100),
            ("np_cnp_sent", 20),
            ("rp_cnp_handled", 9),
            ("cc_rx_ce_pkts", 4),
        ]);
        let d = diff_counters(Driver::Mlx5, Src::Rdma, Some(&prev), Some(&cur));
        let oos = d.get("out_of_sequence").unwrap();
        assert_eq!(
            (oos.delta, oos.wrapped, oos.reset),
            (Some(0x200), true, false)
        );
        let cnp = d.get("np_cnp_sent").unwrap();
        assert_eq!(
            (cnp.delta, cnp.reset),
            (Some(20), true),
            "64-bit cong counter decrease = reset"
        );
        assert_eq!(d.get("rp_cnp_handled").unwrap().delta, Some(0));
        assert_eq!(
            d.get("cc_rx_ce_pkts").unwrap().delta,
            None,
            "new counter: null, not 0"
        );
        assert_eq!(
            d.get("packet_seq_err").unwrap().delta,
            None,
            "gone counter: null, not 0"
        );
        assert_eq!((d.resets, d.wraps), (1, 1));
        assert_eq!(d.appeared, vec!["cc_rx_ce_pkts"]);
        assert_eq!(d.disappeared, vec!["packet_seq_err"]);
        // normalized: the quantities keep the nulls
        let n = normalize(Driver::Other, &CounterDiff::default(), Driver::Mlx5, &d);
        assert_eq!(n.get(Quantity::OutOfSequence).unwrap().delta, Some(0x200));
        assert_eq!(n.get(Quantity::NakSeqErrRx).unwrap().delta, None);
        assert!(n.get(Quantity::CnpSent).unwrap().reset);
        // the optional CE counter fills the CE quantity (no np_ecn_marked_roce_packets here),
        // null in the interval it appeared
        let ce = n.get(Quantity::EcnMarkedRx).unwrap();
        assert_eq!((ce.raw.as_str(), ce.delta), ("cc_rx_ce_pkts", None));
    }

    #[test]
    fn mlx5_pfc_reconfigured_prio3_to_prio4() {
        // PFC on prio 3 only; then PFC moved to prio 4: same count, different names.
        let prev = s(&[
            ("rx_packets_phy", 100),
            ("rx_prio3_pause", 40),
            ("tx_prio3_pause", 2),
            ("rx_prio3_pause_duration", 800),
        ]);
        let cur = s(&[
            ("rx_packets_phy", 150),
            ("rx_prio4_pause", 1),
            ("tx_prio4_pause", 0),
            ("rx_prio4_pause_duration", 10),
        ]);
        let d = diff_counters(Driver::Mlx5, Src::Ethtool, Some(&prev), Some(&cur));
        assert_eq!(d.get("rx_packets_phy").unwrap().delta, Some(50));
        assert_eq!(d.get("rx_prio4_pause").unwrap().delta, None);
        assert_eq!(d.get("rx_prio3_pause").unwrap().delta, None);
        assert_eq!(d.appeared.len(), 3);
        assert_eq!(d.disappeared.len(), 3);
        let n = normalize(Driver::Mlx5, &d, Driver::Other, &CounterDiff::default());
        assert_eq!(n.get(Quantity::PfcRxFrames(4)).unwrap().delta, None);
        assert_eq!(n.get(Quantity::PfcRxFrames(3)).unwrap().delta, None);
        assert!(
            n.raw
                .iter()
                .any(|r| r.name == "rx_packets_phy" && r.delta == Some(50))
        );
        // next interval: prio 4 now has deltas
        let next = s(&[
            ("rx_packets_phy", 160),
            ("rx_prio4_pause", 6),
            ("tx_prio4_pause", 0),
            ("rx_prio4_pause_duration", 70),
        ]);
        let d2 = diff_counters(Driver::Mlx5, Src::Ethtool, Some(&cur), Some(&next));
        let n2 = normalize(Driver::Mlx5, &d2, Driver::Other, &CounterDiff::default());
        assert_eq!(n2.get(Quantity::PfcRxFrames(4)).unwrap().delta, Some(5));
        assert_eq!(n2.get(Quantity::PfcRxPauseUs(4)).unwrap().delta, Some(60));
        assert!(d2.appeared.is_empty() && d2.disappeared.is_empty());
    }

    #[test]
    fn bnxt_gauges_are_values() {
        let prev = s(&[
            ("active_qps", 10),
            ("watermark_qps", 12),
            ("to_retransmits", 5),
            ("seq_err_naks_rcvd", 1),
        ]);
        let cur = s(&[
            ("active_qps", 4),
            ("watermark_qps", 12),
            ("to_retransmits", 9),
            ("seq_err_naks_rcvd", 1),
        ]);
        let d = diff_counters(Driver::Bnxt, Src::Rdma, Some(&prev), Some(&cur));
        assert_eq!(
            d.gauges,
            vec![
                GaugeValue {
                    name: "active_qps".into(),
                    value: Some(4)
                },
                GaugeValue {
                    name: "watermark_qps".into(),
                    value: Some(12)
                }
            ]
        );
        assert_eq!(d.resets, 0, "a falling gauge is not a reset");
        let n = normalize(Driver::Other, &CounterDiff::default(), Driver::Bnxt, &d);
        assert_eq!(n.get(Quantity::AckTimeouts).unwrap().delta, Some(4));
        assert_eq!(n.get(Quantity::NakSeqErrRx).unwrap().delta, Some(0));
        assert_eq!(n.gauges.len(), 2);
        // Broadcom's own driver's levels (`active_qp`, `max_qp`): values, not deltas or resets
        let prev = s(&[("active_qp", 10), ("max_qp", 64), ("cnp_tx_pkts", 5)]);
        let cur = s(&[("active_qp", 3), ("max_qp", 64), ("cnp_tx_pkts", 8)]);
        let d = diff_counters(Driver::Bnxt, Src::Rdma, Some(&prev), Some(&cur));
        assert_eq!(d.gauges.len(), 2, "{:?}", d.gauges);
        assert_eq!(d.resets, 0);
        let n = normalize(Driver::Other, &CounterDiff::default(), Driver::Bnxt, &d);
        assert_eq!(n.get(Quantity::CnpSent).unwrap().delta, Some(3));
    }

    #[test]
    fn ice_irdma_and_rxe_fixtures() {
        let prev = s(&[
            ("rx_priority_3_xoff.nic", 10),
            ("rx_priority_3_xon.nic", 10),
            ("rx_dropped.nic", 0),
        ]);
        let cur = s(&[
            ("rx_priority_3_xoff.nic", 13),
            ("rx_priority_3_xon.nic", 12),
            ("rx_dropped.nic", 1),
        ]);
        let e = diff_counters(Driver::Ice, Src::Ethtool, Some(&prev), Some(&cur));
        let rp = s(&[
            ("cnpHandled", 1),
            ("cnpIgnored", 0),
            ("cnpSent", 5),
            ("RxECNMrkd", 5),
        ]);
        let rc = s(&[
            ("cnpHandled", 3),
            ("cnpIgnored", 0),
            ("cnpSent", 9),
            ("RxECNMrkd", 10),
        ]);
        let r = diff_counters(Driver::Ice, Src::Rdma, Some(&rp), Some(&rc));
        let n = normalize(Driver::Ice, &e, Driver::Ice, &r);
        assert_eq!(n.get(Quantity::PfcRxFrames(3)).unwrap().delta, Some(3));
        assert_eq!(n.get(Quantity::PortRxDiscards).unwrap().delta, Some(1));
        assert_eq!(n.get(Quantity::CnpSent).unwrap().delta, Some(4));
        assert_eq!(n.get(Quantity::EcnMarkedRx).unwrap().delta, Some(5));
        assert!(
            n.raw
                .iter()
                .any(|x| x.name == "rx_priority_3_xon.nic" && x.delta == Some(2))
        );
        // rxe on a veth: netdev side has no mapping, RDMA side has
        let xp = s(&[
            ("rcvd_seq_err", 0),
            ("duplicate_request", 0),
            ("sent_pkts", 100),
        ]);
        let xc = s(&[
            ("rcvd_seq_err", 2),
            ("duplicate_request", 1),
            ("sent_pkts", 180),
        ]);
        let x = diff_counters(Driver::Rxe, Src::Rdma, Some(&xp), Some(&xc));
        let veth = diff_counters(
            Driver::Other,
            Src::Ethtool,
            Some(&s(&[("peer_ifindex", 5)])),
            Some(&s(&[("peer_ifindex", 5)])),
        );
        let n = normalize(Driver::Other, &veth, Driver::Rxe, &x);
        assert_eq!(n.get(Quantity::NakSeqErrRx).unwrap().delta, Some(2));
        assert_eq!(n.get(Quantity::RdmaTxPackets).unwrap().delta, Some(80));
        assert_eq!(n.gauges[0].name, "peer_ifindex");
    }

    #[test]
    fn source_unavailable_and_duplicates() {
        let cur = s(&[("a", 1), ("a", 2), ("b", 3)]);
        let d = diff_counters(Driver::Other, Src::Ethtool, None, Some(&cur));
        assert!(d.counters.iter().all(|c| c.delta.is_none()));
        assert_eq!(d.counters[1].name, "a#2");
        assert!(d.appeared.is_empty(), "first sample: nothing 'appeared'");
        let d = diff_counters(
            Driver::Other,
            Src::Ethtool,
            Some(&cur),
            Some(&s(&[("a", 5), ("a", 2), ("b", 3)])),
        );
        assert_eq!(d.get("a").unwrap().delta, Some(4));
        assert_eq!(d.get("a#2").unwrap().delta, Some(0));
        let d = diff_counters(Driver::Other, Src::Ethtool, Some(&cur), None);
        assert!(d.counters.iter().all(|c| c.delta.is_none()));
        assert!(
            d.disappeared.is_empty(),
            "source gone: not per-name disappearance"
        );
    }
}
