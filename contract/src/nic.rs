//! The NIC's vendor-neutral quantities: the `nic` table's per-quantity columns
//! (docs/schema.md), the Prometheus `roce_nic_*` series and the NIC view's names. The
//! per-driver mapping from raw counter names to these is the NIC view's (its `normalize`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A vendor-neutral quantity. All are deltas of cumulative counters over the sample interval;
/// the unit is in each variant's doc. `p` is the 802.1p priority 0..7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Quantity {
    /// `pfc_tx_frames_p<p>`: PFC frames sent for priority p (frames). ice: XOFF frames only.
    PfcTxFrames(u8),
    /// `pfc_rx_frames_p<p>`: PFC frames received for priority p (frames). ice: XOFF only.
    PfcRxFrames(u8),
    /// `pfc_tx_pause_us_p<p>`: time priority p was paused by this host's PFC (µs).
    PfcTxPauseUs(u8),
    /// `pfc_rx_pause_us_p<p>`: time priority p was paused by the peer (µs).
    PfcRxPauseUs(u8),
    /// `pfc_tx_transitions_p<p>`: pause state transitions sent (count).
    PfcTxTransitions(u8),
    /// `pfc_rx_transitions_p<p>`: XOFF->XON transitions received (count).
    PfcRxTransitions(u8),
    /// `global_pause_tx_frames`: 802.3x PAUSE frames sent (frames).
    GlobalPauseTxFrames,
    /// `global_pause_rx_frames`: 802.3x PAUSE frames received (frames).
    GlobalPauseRxFrames,
    /// `global_pause_tx_us`: 802.3x pause duration sent (µs).
    GlobalPauseTxUs,
    /// `global_pause_rx_us`: 802.3x pause duration received (µs).
    GlobalPauseRxUs,
    /// `global_pause_rx_transitions` (count).
    GlobalPauseRxTransitions,
    /// `rx_discards_p<p>`: packets of priority p discarded at the port (packets).
    RxPrioDiscards(u8),
    /// `rx_buf_discards_p<p>`: priority p dropped for lack of receive buffer (packets).
    RxPrioBufDiscards(u8),
    /// `rx_cong_discards_p<p>`: priority p dropped by per-host congestion (WRED) (packets).
    RxPrioCongDiscards(u8),
    /// `port_rx_discards`: port-level receive drops (packets).
    PortRxDiscards,
    /// `port_tx_discards`: port-level transmit drops (packets).
    PortTxDiscards,
    /// `pause_storm_events`: the device kept sending pause past the storm threshold (events).
    PauseStormEvents,
    /// `pause_storm_tx_disabled`: pause transmission was disabled after a storm (events).
    PauseStormTxDisabled,
    /// `cnp_sent`: CNPs sent by the notification point (packets).
    CnpSent,
    /// `cnp_received`: CNPs received (packets).
    CnpReceived,
    /// `cnp_handled`: CNPs acted on by the reaction point (packets).
    CnpHandled,
    /// `cnp_ignored`: CNPs received and ignored by the reaction point (packets).
    CnpIgnored,
    /// `ecn_marked_rx`: CE-marked RoCE packets received (packets).
    EcnMarkedRx,
    /// `out_of_sequence`: out-of-sequence packets received by the responder (packets).
    OutOfSequence,
    /// `nak_seq_err_rx`: NAK-sequence-error packets received by the requester (packets).
    NakSeqErrRx,
    /// `ack_timeouts`: ACK timer expirations / timeout retransmissions (events).
    AckTimeouts,
    /// `duplicate_requests`: duplicate requests received by the responder (packets).
    DuplicateRequests,
    /// `rnr_nak_rx`: RNR NAKs received by the requester (packets).
    RnrNakRx,
    /// `rdma_rx_packets` (packets).
    RdmaRxPackets,
    /// `rdma_rx_bytes` (bytes).
    RdmaRxBytes,
    /// `rdma_tx_packets` (packets).
    RdmaTxPackets,
    /// `rdma_tx_bytes` (bytes).
    RdmaTxBytes,
}

pub const FIXED_NAMES: &[(Quantity, &str)] = &[
    (Quantity::GlobalPauseTxFrames, "global_pause_tx_frames"),
    (Quantity::GlobalPauseRxFrames, "global_pause_rx_frames"),
    (Quantity::GlobalPauseTxUs, "global_pause_tx_us"),
    (Quantity::GlobalPauseRxUs, "global_pause_rx_us"),
    (
        Quantity::GlobalPauseRxTransitions,
        "global_pause_rx_transitions",
    ),
    (Quantity::PortRxDiscards, "port_rx_discards"),
    (Quantity::PortTxDiscards, "port_tx_discards"),
    (Quantity::PauseStormEvents, "pause_storm_events"),
    (Quantity::PauseStormTxDisabled, "pause_storm_tx_disabled"),
    (Quantity::CnpSent, "cnp_sent"),
    (Quantity::CnpReceived, "cnp_received"),
    (Quantity::CnpHandled, "cnp_handled"),
    (Quantity::CnpIgnored, "cnp_ignored"),
    (Quantity::EcnMarkedRx, "ecn_marked_rx"),
    (Quantity::OutOfSequence, "out_of_sequence"),
    (Quantity::NakSeqErrRx, "nak_seq_err_rx"),
    (Quantity::AckTimeouts, "ack_timeouts"),
    (Quantity::DuplicateRequests, "duplicate_requests"),
    (Quantity::RnrNakRx, "rnr_nak_rx"),
    (Quantity::RdmaRxPackets, "rdma_rx_packets"),
    (Quantity::RdmaRxBytes, "rdma_rx_bytes"),
    (Quantity::RdmaTxPackets, "rdma_tx_packets"),
    (Quantity::RdmaTxBytes, "rdma_tx_bytes"),
];

pub type PrioCtor = fn(u8) -> Quantity;

pub const PRIO_NAMES: &[(&str, PrioCtor)] = &[
    ("pfc_tx_frames_p", Quantity::PfcTxFrames),
    ("pfc_rx_frames_p", Quantity::PfcRxFrames),
    ("pfc_tx_pause_us_p", Quantity::PfcTxPauseUs),
    ("pfc_rx_pause_us_p", Quantity::PfcRxPauseUs),
    ("pfc_tx_transitions_p", Quantity::PfcTxTransitions),
    ("pfc_rx_transitions_p", Quantity::PfcRxTransitions),
    ("rx_discards_p", Quantity::RxPrioDiscards),
    ("rx_buf_discards_p", Quantity::RxPrioBufDiscards),
    ("rx_cong_discards_p", Quantity::RxPrioCongDiscards),
];

impl Quantity {
    /// Every quantity: the per-priority ones for priorities 0-7, then the others, in the order
    /// of the `nic` table's columns.
    pub fn all() -> Vec<Quantity> {
        let mut v: Vec<Quantity> = PRIO_NAMES.iter().flat_map(|(_, c)| (0..8).map(c)).collect();
        v.extend(FIXED_NAMES.iter().map(|(q, _)| *q));
        v
    }

    /// The unit of a quantity's values (the `nic` table's documentation).
    pub fn unit(self) -> &'static str {
        use Quantity::*;
        match self {
            PfcTxPauseUs(_) | PfcRxPauseUs(_) | GlobalPauseTxUs | GlobalPauseRxUs => "µs",
            PfcTxFrames(_) | PfcRxFrames(_) | GlobalPauseTxFrames | GlobalPauseRxFrames => "frames",
            RdmaRxBytes | RdmaTxBytes => "bytes",
            PfcTxTransitions(_)
            | PfcRxTransitions(_)
            | GlobalPauseRxTransitions
            | PauseStormEvents
            | PauseStormTxDisabled
            | AckTimeouts => "events",
            _ => "packets",
        }
    }

    /// The priority of a per-priority quantity.
    pub fn priority(self) -> Option<u8> {
        use Quantity::*;
        match self {
            PfcTxFrames(p)
            | PfcRxFrames(p)
            | PfcTxPauseUs(p)
            | PfcRxPauseUs(p)
            | PfcTxTransitions(p)
            | PfcRxTransitions(p)
            | RxPrioDiscards(p)
            | RxPrioBufDiscards(p)
            | RxPrioCongDiscards(p) => Some(p),
            _ => None,
        }
    }

    /// The stable snake_case name.
    pub fn name(self) -> String {
        if let Some(p) = self.priority() {
            let base = PRIO_NAMES
                .iter()
                .find(|(_, c)| c(p) == self)
                .map(|(n, _)| *n)
                .unwrap_or("unknown_p");
            return format!("{base}{p}");
        }
        FIXED_NAMES
            .iter()
            .find(|(q, _)| *q == self)
            .map(|(_, n)| n.to_string())
            .unwrap_or_default()
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Quantity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((_, q)) = FIXED_NAMES
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(q, n)| (n, *q))
        {
            return Ok(q);
        }
        for (base, ctor) in PRIO_NAMES {
            if let Some(d) = s.strip_prefix(base).and_then(prio_digit) {
                return Ok(ctor(d));
            }
        }
        Err(format!("unknown quantity {s:?}"))
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

pub fn prio_digit(s: &str) -> Option<u8> {
    match s.as_bytes() {
        [d @ b'0'..=b'7'] => Some(d - b'0'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let all: Vec<Quantity> = FIXED_NAMES
            .iter()
            .map(|(q, _)| *q)
            .chain(PRIO_NAMES.iter().flat_map(|(_, c)| (0..8).map(c)))
            .collect();
        let mut names: Vec<String> = all.iter().map(|q| q.name()).collect();
        for (q, n) in all.iter().zip(&names) {
            assert_eq!(n.parse::<Quantity>().unwrap(), *q, "{n}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{n}"
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "names are unique");
        assert_eq!(Quantity::PfcRxFrames(3).name(), "pfc_rx_frames_p3");
        assert_eq!(
            serde_json::to_string(&Quantity::CnpSent).unwrap(),
            "\"cnp_sent\""
        );
        assert!("pfc_rx_frames_p8".parse::<Quantity>().is_err());
    }
}
