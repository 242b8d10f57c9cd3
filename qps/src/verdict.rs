//! Is a QP's marking the lossless one? A QP's address vector (traffic class, service level)
//! checked against the policy and against the port's own QoS configuration.
//!
//! RoCE v2: the GRH traffic class is the IP header's ToS byte (DSCP = tclass >> 2, ECN =
//! tclass & 3). Where the frame lands on the port: with DSCP trust (the IEEE APP table holds
//! DSCP entries, mlx5 `en_dcbnl.c`) the APP table maps the DSCP to a priority (a DSCP without an
//! entry: the driver's default, DSCP >> 3 on mlx5); with PCP trust the priority is the VLAN PCP,
//! which mlx5 takes from the QP's service level. Lossless when PFC is enabled on that priority.
//! A QP whose address vector is not known is `unknown`, never guessed.

use nic::checks::{Policy, Trust};
use nic::dcb::DcbIeee;
use serde::{Deserialize, Serialize};

/// What a QP asked the NIC for at set-up (`ib_qp_attr.ah_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpMarking {
    pub traffic_class: u8,
    pub sl: u8,
}

impl QpMarking {
    pub fn dscp(self) -> u8 {
        self.traffic_class >> 2
    }
    pub fn ecn(self) -> u8 {
        self.traffic_class & 3
    }
}

/// The verdict of one QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The policy's DSCP, landing on a PFC-enabled priority (or PFC configuration unknown but
    /// the DSCP and priority as the policy expects).
    Ok,
    /// Not the DSCP the policy expects for RoCE data.
    OffPolicy,
    /// Lands on a priority without PFC.
    Lossy,
    /// The QP's marking is not known.
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::OffPolicy => "off_policy",
            Verdict::Lossy => "lossy",
            Verdict::Unknown => "unknown",
        }
    }
}

/// The port's QoS configuration as far as it was read.
#[derive(Clone, Debug, Default)]
pub struct PortQos {
    pub dcb: Option<DcbIeee>,
}

/// A QP's marking checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkingCheck {
    pub verdict: Verdict,
    pub dscp: Option<u8>,
    pub ecn: Option<u8>,
    /// The priority the frames land in, where the port's configuration says.
    pub priority: Option<u8>,
    pub lossless: Option<bool>,
    /// One sentence: what it sends, where that lands, what the policy expects.
    pub reason: String,
}

/// Checks `m` (or the lack of it) against the policy and the port.
pub fn check(m: Option<QpMarking>, p: &Policy, port: &PortQos) -> MarkingCheck {
    let Some(m) = m else {
        return MarkingCheck {
            verdict: Verdict::Unknown,
            dscp: None,
            ecn: None,
            priority: None,
            lossless: None,
            reason: "marking unknown: the QP was set up before the observer's probe and its \
                     device offers no raw QP context"
                .into(),
        };
    };
    let (dscp, ecn) = (m.dscp(), m.ecn());
    let trust = port.dcb.as_ref().map(|d| {
        if d.has_dscp_app() {
            Trust::Dscp
        } else {
            Trust::Pcp
        }
    });
    let priority = match (trust.unwrap_or(p.trust), port.dcb.as_ref()) {
        (Trust::Dscp, Some(d)) => Some(
            d.dscp_priorities(dscp)
                .first()
                .copied()
                .unwrap_or(dscp >> 3),
        ),
        (Trust::Dscp, None) => None,
        (Trust::Pcp, _) => Some(m.sl & 7),
    };
    let lossless = match (priority, port.dcb.as_ref().and_then(|d| d.pfc.as_ref())) {
        (Some(pr), Some(pfc)) => Some(pfc.pfc_en & (1 << pr) != 0),
        _ => None,
    };
    let lands = match (priority, lossless) {
        (Some(pr), Some(true)) => format!("priority {pr} (PFC on)"),
        (Some(pr), Some(false)) => format!("priority {pr} (PFC off: lossy)"),
        (Some(pr), None) => format!("priority {pr} (PFC configuration unread)"),
        (None, _) => "a priority the port's configuration does not say".into(),
    };
    let sends = format!(
        "traffic class {} (DSCP {dscp}, ECN {ecn}), SL {}",
        m.traffic_class, m.sl
    );
    let verdict = if dscp != p.data_dscp {
        Verdict::OffPolicy
    } else if lossless == Some(false) {
        Verdict::Lossy
    } else if priority.is_some_and(|pr| pr != p.rdma_priority) {
        Verdict::OffPolicy
    } else {
        Verdict::Ok
    };
    MarkingCheck {
        verdict,
        dscp: Some(dscp),
        ecn: Some(ecn),
        priority,
        lossless,
        reason: format!(
            "sends {sends}, lands in {lands}; the policy expects DSCP {} on priority {}",
            p.data_dscp, p.rdma_priority
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::dcb::{DcbApp, IeeePfc};

    fn dcb(pfc_en: u8, app: &[(u8, u8)]) -> PortQos {
        PortQos {
            dcb: Some(DcbIeee {
                pfc: Some(IeeePfc {
                    pfc_en,
                    ..IeeePfc::default()
                }),
                app: app
                    .iter()
                    .map(|&(dscp, prio)| DcbApp {
                        selector: nic::dcb::APP_SEL_DSCP,
                        protocol: dscp as u16,
                        priority: prio,
                    })
                    .collect(),
                ..DcbIeee::default()
            }),
        }
    }

    #[test]
    fn nccl_ib_tc_unset_lands_in_the_lossy_priority() {
        let p = Policy::nvidia();
        let port = dcb(1 << 3, &[(26, 3), (48, 6), (0, 0)]);
        let ok = check(
            Some(QpMarking {
                traffic_class: 106,
                sl: 0,
            }),
            &p,
            &port,
        );
        assert_eq!(ok.verdict, Verdict::Ok, "{}", ok.reason);
        assert_eq!(
            (ok.dscp, ok.ecn, ok.priority, ok.lossless),
            (Some(26), Some(2), Some(3), Some(true))
        );
        let tc0 = check(
            Some(QpMarking {
                traffic_class: 0,
                sl: 0,
            }),
            &p,
            &port,
        );
        assert_eq!(tc0.verdict, Verdict::OffPolicy);
        assert_eq!((tc0.priority, tc0.lossless), (Some(0), Some(false)));
        assert!(
            tc0.reason.contains("DSCP 0") && tc0.reason.contains("lossy"),
            "{}",
            tc0.reason
        );
    }

    #[test]
    fn the_right_dscp_on_a_port_without_pfc_there_is_lossy() {
        let p = Policy::nvidia();
        let port = dcb(1 << 4, &[(26, 3)]);
        let v = check(
            Some(QpMarking {
                traffic_class: 104,
                sl: 0,
            }),
            &p,
            &port,
        );
        assert_eq!(v.verdict, Verdict::Lossy, "{}", v.reason);
        // No APP entry for the DSCP: the driver's default, DSCP >> 3.
        let port = dcb(1 << 3, &[(46, 5)]);
        let v = check(
            Some(QpMarking {
                traffic_class: 104,
                sl: 0,
            }),
            &p,
            &port,
        );
        assert_eq!((v.priority, v.verdict), (Some(3), Verdict::Ok));
    }

    #[test]
    fn pcp_trust_takes_the_service_level_and_unknown_stays_unknown() {
        let p = Policy::nvidia();
        let port = dcb(1 << 3, &[]);
        let v = check(
            Some(QpMarking {
                traffic_class: 104,
                sl: 3,
            }),
            &p,
            &port,
        );
        assert_eq!((v.priority, v.verdict), (Some(3), Verdict::Ok));
        let v = check(
            Some(QpMarking {
                traffic_class: 104,
                sl: 0,
            }),
            &p,
            &port,
        );
        assert_eq!(v.verdict, Verdict::Lossy);
        let v = check(None, &p, &port);
        assert_eq!((v.verdict, v.dscp), (Verdict::Unknown, None));
        // Nothing read of the port: the DSCP is still checked, the priority is not guessed.
        let v = check(
            Some(QpMarking {
                traffic_class: 0,
                sl: 0,
            }),
            &p,
            &PortQos::default(),
        );
        assert_eq!((v.verdict, v.priority), (Verdict::OffPolicy, None));
    }
}
