//! One vendor-neutral schema for NIC counters, with a per-driver table from the raw names
//! (ethtool strings and RDMA hw counter names, spelled as in the kernel sources) to
//! [`Quantity`]s. Every counter without a mapping is kept as raw name -> delta, so nothing the NIC
//! reports is dropped.
//!
//! Raw names come from:
//! - mlx5 ethtool: `drivers/net/ethernet/mellanox/mlx5/core/en_stats.c`
//!   (`pport_per_prio_pfc_stats_desc`, `pport_pfc_stall_stats_desc`,
//!   `pport_per_prio_traffic_stats_desc`, `pport_per_tc_prio_stats_desc`,
//!   `pport_per_tc_congest_prio_stats_desc`, `pport_2863_stats_desc`, `vport_stats_desc`);
//! - mlx5 RDMA: `drivers/infiniband/hw/mlx5/counters.c` (`cong_cnts`, `out_of_seq_q_cnts`,
//!   `retrans_q_cnts`);
//! - bnxt_en: `drivers/net/ethernet/broadcom/bnxt/bnxt_ethtool.c` (`bnxt_port_stats_arr`,
//!   `bnxt_port_stats_ext_arr`, `bnxt_tx_port_stats_ext_arr`); bnxt_re:
//!   `drivers/infiniband/hw/bnxt_re/hw_counters.c` (`bnxt_re_stat_descs`);
//! - ice: `drivers/net/ethernet/intel/ice/ice_ethtool.c` (`ice_gstrings_pf_stats`, per-priority
//!   XON/XOFF in `ice_get_strings`); irdma: `drivers/infiniband/hw/irdma/verbs.c`
//!   (`irdma_hw_stat_names`);
//! - rxe: `drivers/infiniband/sw/rxe/rxe_hw_counters.c` (`rxe_counter_descs`).

use serde::{Deserialize, Serialize};

use super::counters::CounterDiff;
pub use contract::nic::Quantity;
use contract::nic::{PrioCtor, prio_digit};

/// Driver family, chosen separately for the netdev (ethtool) and the RDMA device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// ConnectX: netdev `mlx5_core`, RDMA `mlx5_ib` (`mlx5_<n>`, `mlx5_bond_<n>`).
    Mlx5,
    /// Broadcom: netdev `bnxt_en`, RDMA `bnxt_re`.
    Bnxt,
    /// Intel E810: netdev `ice`, RDMA `irdma`.
    Ice,
    /// Soft-RoCE `rdma_rxe` (RDMA side only; its netdev is any Ethernet device).
    Rxe,
    /// Anything else: no mapping, every counter kept raw.
    Other,
}

impl Driver {
    /// From the ethtool driver name (`ETHTOOL_GDRVINFO`).
    pub fn from_ethtool(driver: &str) -> Driver {
        match driver {
            "mlx5_core" => Driver::Mlx5,
            "bnxt_en" => Driver::Bnxt,
            "ice" => Driver::Ice,
            _ => Driver::Other,
        }
    }

    /// From the RDMA device: its parent's driver when known (`mlx5_core`, `bnxt_en`, `ice`),
    /// else the default device-name prefix (`mlx5_`, `bnxt_re`, `irdma`, `rxe`). Renamed devices
    /// (`rocep1s0f0`) need the parent driver.
    pub fn from_rdma(parent_driver: Option<&str>, dev: Option<&str>) -> Driver {
        if parent_driver == Some(super::rdma::RXE_DRIVER) {
            return Driver::Rxe;
        }
        if let Some(d) = parent_driver
            .map(Driver::from_ethtool)
            .filter(|d| *d != Driver::Other)
        {
            return d;
        }
        let dev = dev.unwrap_or("");
        if dev.starts_with("mlx5_") {
            Driver::Mlx5
        } else if dev.starts_with("bnxt_re") {
            Driver::Bnxt
        } else if dev.starts_with("irdma") {
            Driver::Ice
        } else if dev.starts_with("rxe") {
            Driver::Rxe
        } else {
            Driver::Other
        }
    }

    /// One family for both sides (netdev driver first).
    pub fn detect(
        ethtool_driver: Option<&str>,
        rdma_parent: Option<&str>,
        rdma_dev: Option<&str>,
    ) -> Driver {
        match ethtool_driver.map(Driver::from_ethtool) {
            Some(d) if d != Driver::Other => d,
            _ => Driver::from_rdma(rdma_parent, rdma_dev),
        }
    }
}

/// Which counter source a raw name comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Src {
    /// `ethtool -S` strings.
    Ethtool,
    /// RDMA port hw counters.
    Rdma,
}

/// A mapping rule: a raw name, or a template with `{p}` standing for the priority digit.
enum Rule {
    Fixed(&'static str, Quantity),
    Prio(&'static str, PrioCtor),
}

use Quantity as Q;
use Rule::{Fixed as F, Prio as P};

/// mlx5e `ethtool -S` (en_stats.c).
const MLX5_ETHTOOL: &[Rule] = &[
    P("rx_prio{p}_pause", Q::PfcRxFrames),
    P("tx_prio{p}_pause", Q::PfcTxFrames),
    P("rx_prio{p}_pause_duration", Q::PfcRxPauseUs),
    P("tx_prio{p}_pause_duration", Q::PfcTxPauseUs),
    P("rx_prio{p}_pause_transition", Q::PfcRxTransitions),
    F("rx_global_pause", Q::GlobalPauseRxFrames),
    F("tx_global_pause", Q::GlobalPauseTxFrames),
    F("rx_global_pause_duration", Q::GlobalPauseRxUs),
    F("tx_global_pause_duration", Q::GlobalPauseTxUs),
    F("rx_global_pause_transition", Q::GlobalPauseRxTransitions),
    P("rx_prio{p}_discards", Q::RxPrioDiscards),
    P("rx_prio{p}_buf_discard", Q::RxPrioBufDiscards),
    P("rx_prio{p}_cong_discard", Q::RxPrioCongDiscards),
    F("rx_discards_phy", Q::PortRxDiscards),
    F("tx_discards_phy", Q::PortTxDiscards),
    F("tx_pause_storm_warning_events", Q::PauseStormEvents),
    F("tx_pause_storm_error_events", Q::PauseStormTxDisabled),
    P("rx_prio{p}_marked", Q::RxPrioEcnMarked),
    F("rx_pause_ctrl_phy", Q::PauseCtrlRxFrames),
    F("tx_pause_ctrl_phy", Q::PauseCtrlTxFrames),
    F("rx_vport_rdma_unicast_packets", Q::RdmaRxPackets),
    F("rx_vport_rdma_unicast_bytes", Q::RdmaRxBytes),
    F("tx_vport_rdma_unicast_packets", Q::RdmaTxPackets),
    F("tx_vport_rdma_unicast_bytes", Q::RdmaTxBytes),
];

/// mlx5_ib port hw counters (counters.c).
const MLX5_RDMA: &[Rule] = &[
    F("np_cnp_sent", Q::CnpSent),
    F("rp_cnp_handled", Q::CnpHandled),
    F("rp_cnp_ignored", Q::CnpIgnored),
    F("np_ecn_marked_roce_packets", Q::EcnMarkedRx),
    F("out_of_sequence", Q::OutOfSequence),
    F("packet_seq_err", Q::NakSeqErrRx),
    F("local_ack_timeout_err", Q::AckTimeouts),
    F("duplicate_request", Q::DuplicateRequests),
    F("rnr_nak_retry_err", Q::RnrNakRx),
    F("out_of_buffer", Q::RdmaRxOutOfBuffer),
    F("implied_nak_seq_err", Q::ImpliedNakSeqErr),
    F("roce_adp_retrans", Q::AdaptiveRetrans),
    F("roce_adp_retrans_to", Q::AdaptiveRetransTimeouts),
    F("roce_slow_restart", Q::SlowRestarts),
    F("roce_slow_restart_cnps", Q::SlowRestartCnps),
    F("roce_slow_restart_trans", Q::SlowRestartTransitions),
    // the optional congestion counters (netlink only, once enabled) count what the NP
    // counters do: the first one read fills the quantity, the other stays raw
    F("cc_rx_ce_pkts", Q::EcnMarkedRx),
    F("cc_tx_cnp_pkts", Q::CnpSent),
];

/// bnxt_en `ethtool -S` (bnxt_ethtool.c).
const BNXT_ETHTOOL: &[Rule] = &[
    P("rx_pfc_ena_frames_pri{p}", Q::PfcRxFrames),
    P("tx_pfc_ena_frames_pri{p}", Q::PfcTxFrames),
    P("pfc_pri{p}_rx_duration_us", Q::PfcRxPauseUs),
    P("pfc_pri{p}_tx_duration_us", Q::PfcTxPauseUs),
    P("pfc_pri{p}_rx_transitions", Q::PfcRxTransitions),
    P("pfc_pri{p}_tx_transitions", Q::PfcTxTransitions),
    F("rx_pause_frames", Q::GlobalPauseRxFrames),
    F("tx_pause_frames", Q::GlobalPauseTxFrames),
    F("rx_stat_discard", Q::PortRxDiscards),
    F("tx_stat_discard", Q::PortTxDiscards),
    F("continuous_pause_events", Q::PauseStormEvents),
    F("continuous_roce_pause_events", Q::PauseStormRoceEvents),
    F("rx_pfc_frames", Q::PfcRxFramesAllPrio),
    F("tx_pfc_frames", Q::PfcTxFramesAllPrio),
];

/// bnxt_re hw counters (hw_counters.c `bnxt_re_stat_descs`).
const BNXT_RDMA: &[Rule] = &[
    F("tx_cnp_pkts", Q::CnpSent),
    F("rx_cnp_pkts", Q::CnpReceived),
    F("rx_ecn_marked_pkts", Q::EcnMarkedRx),
    F("oos_drop_count", Q::OutOfSequence),
    F("seq_err_naks_rcvd", Q::NakSeqErrRx),
    F("to_retransmits", Q::AckTimeouts),
    F("dup_req", Q::DuplicateRequests),
    F("rnr_naks_rcvd", Q::RnrNakRx),
    F("rx_pkts", Q::RdmaRxPackets),
    F("rx_bytes", Q::RdmaRxBytes),
    F("tx_pkts", Q::RdmaTxPackets),
    F("tx_bytes", Q::RdmaTxBytes),
    // Broadcom's own bnxt_re (the NetXtreme package's driver, not the kernel's) spells some
    // of them differently; one driver reports one spelling, so nothing is counted twice.
    F("cnp_tx_pkts", Q::CnpSent),
    F("cnp_rx_pkts", Q::CnpReceived),
    F("dup_reqs", Q::DuplicateRequests),
    F("res_oos_drop_count", Q::OutOfSequence),
    F("rx_out_of_buffer", Q::RdmaRxOutOfBuffer),
];

/// ice `ethtool -S` (ice_ethtool.c). XON counters stay raw.
const ICE_ETHTOOL: &[Rule] = &[
    P("rx_priority_{p}_xoff.nic", Q::PfcRxFrames),
    P("tx_priority_{p}_xoff.nic", Q::PfcTxFrames),
    F("link_xoff_rx.nic", Q::GlobalPauseRxFrames),
    F("link_xoff_tx.nic", Q::GlobalPauseTxFrames),
    F("rx_dropped.nic", Q::PortRxDiscards),
];

/// irdma gen2 hw counters (verbs.c `irdma_hw_stat_names`).
const IRDMA_RDMA: &[Rule] = &[
    F("cnpSent", Q::CnpSent),
    F("cnpHandled", Q::CnpHandled),
    F("cnpIgnored", Q::CnpIgnored),
    F("RxECNMrkd", Q::EcnMarkedRx),
    F("RxUDP", Q::RdmaRxPackets),
    F("TxUDP", Q::RdmaTxPackets),
];

/// rxe hw counters (rxe_hw_counters.c `rxe_counter_descs`).
const RXE_RDMA: &[Rule] = &[
    F("sent_pkts", Q::RdmaTxPackets),
    F("rcvd_pkts", Q::RdmaRxPackets),
    F("duplicate_request", Q::DuplicateRequests),
    F("out_of_seq_request", Q::OutOfSequence),
    F("rcvd_rnr_err", Q::RnrNakRx),
    F("rcvd_seq_err", Q::NakSeqErrRx),
];

fn table(driver: Driver, src: Src) -> &'static [Rule] {
    match (driver, src) {
        (Driver::Mlx5, Src::Ethtool) => MLX5_ETHTOOL,
        (Driver::Mlx5, Src::Rdma) => MLX5_RDMA,
        (Driver::Bnxt, Src::Ethtool) => BNXT_ETHTOOL,
        (Driver::Bnxt, Src::Rdma) => BNXT_RDMA,
        (Driver::Ice, Src::Ethtool) => ICE_ETHTOOL,
        (Driver::Ice, Src::Rdma) => IRDMA_RDMA,
        (Driver::Rxe, Src::Rdma) => RXE_RDMA,
        _ => &[],
    }
}

fn match_template(template: &str, name: &str) -> Option<u8> {
    let (pre, post) = template.split_once("{p}")?;
    let mid = name.strip_prefix(pre)?.strip_suffix(post)?;
    prio_digit(mid)
}

/// Maps a raw counter name to its quantity for a driver. Trailing whitespace is ignored (old
/// mlx5 kernels spelled `"tx_pause_storm_warning_events "`).
pub fn map_name(driver: Driver, src: Src, raw: &str) -> Option<Quantity> {
    let name = raw.trim_end();
    table(driver, src).iter().find_map(|r| match r {
        Rule::Fixed(n, q) => (*n == name).then_some(*q),
        Rule::Prio(t, c) => match_template(t, name).map(c),
    })
}

/// One normalized quantity of an interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantityValue {
    pub quantity: Quantity,
    /// Delta over the interval; `None` when absent in either sample.
    pub delta: Option<u64>,
    /// The counter was reset during the interval (the delta is the new value).
    pub reset: bool,
    pub src: Src,
    /// The raw name it came from.
    pub raw: String,
}

/// A raw counter without a mapping (or a second raw source of an already-filled quantity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawValue {
    pub src: Src,
    pub name: String,
    pub delta: Option<u64>,
    pub reset: bool,
}

/// A gauge (a level, not a count), reported as its current value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaugeReading {
    pub src: Src,
    pub name: String,
    pub value: Option<u64>,
}

/// An interval in the vendor-neutral schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Normalized {
    /// Sorted by quantity.
    pub quantities: Vec<QuantityValue>,
    pub raw: Vec<RawValue>,
    pub gauges: Vec<GaugeReading>,
}

impl Normalized {
    pub fn get(&self, q: Quantity) -> Option<&QuantityValue> {
        self.quantities.iter().find(|v| v.quantity == q)
    }
}

/// Normalizes the ethtool and RDMA counter deltas of one interval.
pub fn normalize(
    eth_driver: Driver,
    eth: &CounterDiff,
    rdma_driver: Driver,
    rdma: &CounterDiff,
) -> Normalized {
    let mut out = Normalized::default();
    for (driver, src, diff) in [
        (eth_driver, Src::Ethtool, eth),
        (rdma_driver, Src::Rdma, rdma),
    ] {
        for c in &diff.counters {
            let mapped = map_name(driver, src, &c.name);
            match mapped {
                Some(q) if out.get(q).is_none() => out.quantities.push(QuantityValue {
                    quantity: q,
                    delta: c.delta,
                    reset: c.reset,
                    src,
                    raw: c.name.clone(),
                }),
                _ => {
                    if let Some(q) = mapped {
                        tracing::debug!(quantity = %q, raw = %c.name, "quantity already filled; kept raw");
                    }
                    out.raw.push(RawValue {
                        src,
                        name: c.name.clone(),
                        delta: c.delta,
                        reset: c.reset,
                    });
                }
            }
        }
        for g in &diff.gauges {
            out.gauges.push(GaugeReading {
                src,
                name: g.name.clone(),
                value: g.value,
            });
        }
    }
    out.quantities.sort_by_key(|v| v.quantity);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx5_names_from_kernel_sources() {
        let m = |n| map_name(Driver::Mlx5, Src::Ethtool, n);
        assert_eq!(m("rx_prio3_pause"), Some(Q::PfcRxFrames(3)));
        assert_eq!(m("tx_prio3_pause"), Some(Q::PfcTxFrames(3)));
        assert_eq!(m("rx_prio3_pause_duration"), Some(Q::PfcRxPauseUs(3)));
        assert_eq!(m("tx_prio0_pause_duration"), Some(Q::PfcTxPauseUs(0)));
        assert_eq!(m("rx_prio7_pause_transition"), Some(Q::PfcRxTransitions(7)));
        assert_eq!(m("rx_prio3_discards"), Some(Q::RxPrioDiscards(3)));
        assert_eq!(m("rx_prio3_buf_discard"), Some(Q::RxPrioBufDiscards(3)));
        assert_eq!(m("rx_prio3_cong_discard"), Some(Q::RxPrioCongDiscards(3)));
        assert_eq!(m("rx_global_pause"), Some(Q::GlobalPauseRxFrames));
        assert_eq!(
            m("tx_pause_storm_warning_events "),
            Some(Q::PauseStormEvents),
            "old trailing space"
        );
        assert_eq!(
            m("tx_pause_storm_error_events"),
            Some(Q::PauseStormTxDisabled)
        );
        assert_eq!(m("rx_discards_phy"), Some(Q::PortRxDiscards));
        assert_eq!(m("rx_vport_rdma_unicast_bytes"), Some(Q::RdmaRxBytes));
        assert_eq!(m("rx_prio8_pause"), None);
        assert_eq!(m("rx_prio33_pause"), None);
        assert_eq!(m("rx_prio3_bytes"), None, "per-prio traffic stays raw");
        let r = |n| map_name(Driver::Mlx5, Src::Rdma, n);
        assert_eq!(r("np_cnp_sent"), Some(Q::CnpSent));
        assert_eq!(r("rp_cnp_handled"), Some(Q::CnpHandled));
        assert_eq!(r("rp_cnp_ignored"), Some(Q::CnpIgnored));
        assert_eq!(r("np_ecn_marked_roce_packets"), Some(Q::EcnMarkedRx));
        assert_eq!(r("out_of_sequence"), Some(Q::OutOfSequence));
        assert_eq!(r("packet_seq_err"), Some(Q::NakSeqErrRx));
        assert_eq!(r("local_ack_timeout_err"), Some(Q::AckTimeouts));
        assert_eq!(r("duplicate_request"), Some(Q::DuplicateRequests));
        assert_eq!(r("rnr_nak_retry_err"), Some(Q::RnrNakRx));
        assert_eq!(r("rx_prio3_pause"), None, "ethtool name on the RDMA side");
        // the counters a ConnectX fleet's first dumps left unmapped
        assert_eq!(r("out_of_buffer"), Some(Q::RdmaRxOutOfBuffer));
        assert_eq!(r("implied_nak_seq_err"), Some(Q::ImpliedNakSeqErr));
        assert_eq!(r("roce_adp_retrans"), Some(Q::AdaptiveRetrans));
        assert_eq!(r("roce_adp_retrans_to"), Some(Q::AdaptiveRetransTimeouts));
        assert_eq!(r("roce_slow_restart"), Some(Q::SlowRestarts));
        assert_eq!(r("roce_slow_restart_cnps"), Some(Q::SlowRestartCnps));
        assert_eq!(
            r("roce_slow_restart_trans"),
            Some(Q::SlowRestartTransitions)
        );
        assert_eq!(r("cc_rx_ce_pkts"), Some(Q::EcnMarkedRx));
        assert_eq!(r("cc_tx_cnp_pkts"), Some(Q::CnpSent));
        assert_eq!(m("rx_pause_ctrl_phy"), Some(Q::PauseCtrlRxFrames));
        assert_eq!(m("tx_pause_ctrl_phy"), Some(Q::PauseCtrlTxFrames));
        assert_eq!(m("rx_prio3_marked"), Some(Q::RxPrioEcnMarked(3)));
        assert_eq!(
            m("rx_out_of_buffer"),
            None,
            "the Ethernet RQs' drops, not RoCE's"
        );
    }

    /// The optional congestion counters and the NP counters count the same packets: the first
    /// one read fills the quantity, the other stays raw (no packet counted twice).
    #[test]
    fn an_optional_counter_beside_its_np_counter_is_counted_once() {
        use crate::counters::{CounterDelta, CounterDiff};
        let c = |name: &str, d: u64| CounterDelta {
            name: name.into(),
            delta: Some(d),
            reset: false,
            wrapped: false,
        };
        let rdma = CounterDiff {
            counters: vec![c("np_ecn_marked_roce_packets", 40), c("cc_rx_ce_pkts", 40)],
            ..Default::default()
        };
        let n = normalize(Driver::Mlx5, &CounterDiff::default(), Driver::Mlx5, &rdma);
        assert_eq!(n.get(Q::EcnMarkedRx).and_then(|v| v.delta), Some(40));
        assert_eq!(
            n.get(Q::EcnMarkedRx).map(|v| v.raw.as_str()),
            Some("np_ecn_marked_roce_packets")
        );
        assert_eq!(
            n.raw.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["cc_rx_ce_pkts"]
        );
    }

    #[test]
    fn bnxt_ice_irdma_rxe_names() {
        let b = |n| map_name(Driver::Bnxt, Src::Ethtool, n);
        assert_eq!(b("rx_pfc_ena_frames_pri3"), Some(Q::PfcRxFrames(3)));
        assert_eq!(b("tx_pfc_ena_frames_pri3"), Some(Q::PfcTxFrames(3)));
        assert_eq!(b("pfc_pri3_rx_duration_us"), Some(Q::PfcRxPauseUs(3)));
        assert_eq!(b("pfc_pri5_tx_transitions"), Some(Q::PfcTxTransitions(5)));
        assert_eq!(b("continuous_pause_events"), Some(Q::PauseStormEvents));
        assert_eq!(
            b("continuous_roce_pause_events"),
            Some(Q::PauseStormRoceEvents)
        );
        assert_eq!(b("rx_pfc_frames"), Some(Q::PfcRxFramesAllPrio));
        assert_eq!(b("tx_pfc_frames"), Some(Q::PfcTxFramesAllPrio));
        assert_eq!(b("rx_discard_packets_cos3"), None, "CoS queue != priority");
        let br = |n| map_name(Driver::Bnxt, Src::Rdma, n);
        assert_eq!(br("seq_err_naks_rcvd"), Some(Q::NakSeqErrRx));
        assert_eq!(br("to_retransmits"), Some(Q::AckTimeouts));
        assert_eq!(br("dup_req"), Some(Q::DuplicateRequests));
        // Broadcom's own driver's spellings
        assert_eq!(br("cnp_tx_pkts"), Some(Q::CnpSent));
        assert_eq!(br("cnp_rx_pkts"), Some(Q::CnpReceived));
        assert_eq!(br("dup_reqs"), Some(Q::DuplicateRequests));
        assert_eq!(br("res_oos_drop_count"), Some(Q::OutOfSequence));
        assert_eq!(br("tx_cnp_pkts"), Some(Q::CnpSent));
        assert_eq!(br("rx_ecn_marked_pkts"), Some(Q::EcnMarkedRx));
        assert_eq!(br("rx_out_of_buffer"), Some(Q::RdmaRxOutOfBuffer));
        let i = |n| map_name(Driver::Ice, Src::Ethtool, n);
        assert_eq!(i("rx_priority_3_xoff.nic"), Some(Q::PfcRxFrames(3)));
        assert_eq!(i("tx_priority_3_xoff.nic"), Some(Q::PfcTxFrames(3)));
        assert_eq!(i("rx_priority_3_xon.nic"), None);
        assert_eq!(i("link_xoff_rx.nic"), Some(Q::GlobalPauseRxFrames));
        let ir = |n| map_name(Driver::Ice, Src::Rdma, n);
        assert_eq!(ir("cnpHandled"), Some(Q::CnpHandled));
        assert_eq!(ir("RxECNMrkd"), Some(Q::EcnMarkedRx));
        assert_eq!(ir("cnphandled"), None, "case matters");
        let x = |n| map_name(Driver::Rxe, Src::Rdma, n);
        assert_eq!(x("rcvd_seq_err"), Some(Q::NakSeqErrRx));
        assert_eq!(x("out_of_seq_request"), Some(Q::OutOfSequence));
        assert_eq!(x("rcvd_rnr_err"), Some(Q::RnrNakRx));
        assert_eq!(x("send_rnr_err"), None);
        assert_eq!(map_name(Driver::Other, Src::Rdma, "np_cnp_sent"), None);
    }

    #[test]
    fn driver_detection() {
        assert_eq!(Driver::from_ethtool("mlx5_core"), Driver::Mlx5);
        assert_eq!(Driver::from_ethtool("veth"), Driver::Other);
        assert_eq!(
            Driver::from_rdma(Some("bnxt_en"), Some("rocep1s0f0")),
            Driver::Bnxt
        );
        assert_eq!(Driver::from_rdma(None, Some("mlx5_bond_0")), Driver::Mlx5);
        assert_eq!(Driver::from_rdma(None, Some("rxe0")), Driver::Rxe);
        // a renamed soft-RoCE device (`rdma link add rxa type rxe ...`), known by its sysfs
        assert_eq!(
            Driver::from_rdma(Some("rdma_rxe"), Some("rxa")),
            Driver::Rxe
        );
        assert_eq!(
            Driver::detect(Some("veth"), Some("rdma_rxe"), Some("rxa")),
            Driver::Rxe
        );
        assert_eq!(Driver::from_rdma(None, Some("irdma1")), Driver::Ice);
        assert_eq!(
            Driver::detect(Some("veth"), None, Some("rxe0")),
            Driver::Rxe
        );
    }
}
