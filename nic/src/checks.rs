//! Configuration checks of one [`NicSample`] against an expected RoCE policy.
//!
//! Each [`Check`] names the exact setting and a command that shows it, so an operator can verify
//! or fix it. A setting that cannot be read gives [`Verdict::Unknown`] with the reason.
//! Facts used (see the module docs of [`super::dcb`], [`super::config`], [`super::rdma`]):
//! PFC enable bits from `struct ieee_pfc.pfc_en`; mlx5 creates `rx_prio<N>_pause` ethtool strings
//! only for PFC-enabled priorities (`en_stats.c` `mlx5e_query_pfc_combined`), used when DCB is
//! unavailable; trust = DSCP iff the APP table holds selector-5 entries (mlx5 `en_dcbnl.c`);
//! CNP DSCP / priority from mlx5 debugfs `cc_params` (`cong.c`) or OFED `ecn/roce_np`; ECN enable
//! per priority from OFED `ecn/roce_{rp,np}/enable/<p>`; ToS = DSCP << 2 | ECN from rdma_cm
//! configfs (`cma_configfs.c`); GID types from sysfs (`cache.c` `gid_type_str`).

use serde::{Deserialize, Serialize};

use super::normalize::Driver;
use super::{NicSample, Reading};

/// What the switch and NIC classify on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    Dscp,
    Pcp,
}

/// The expected configuration, as plain values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The one priority PFC is expected on.
    pub rdma_priority: u8,
    /// DSCP of RoCE data.
    pub data_dscp: u8,
    /// DSCP of CNPs.
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs.
    pub cnp_priority: u8,
    pub trust: Trust,
}

impl Policy {
    /// From a vendor profile of [`contract::vendor`] (DSCP trust).
    pub fn from_profile(v: &contract::vendor::Profile) -> Self {
        Policy {
            rdma_priority: v.rdma_priority,
            data_dscp: v.data_dscp,
            cnp_dscp: v.cnp_dscp,
            cnp_priority: v.cnp_priority,
            trust: Trust::Dscp,
        }
    }
    /// NVIDIA ConnectX defaults ([`contract::vendor::NVIDIA`]).
    pub fn nvidia() -> Self {
        Self::from_profile(&contract::vendor::NVIDIA)
    }
    /// Broadcom Thor2 defaults ([`contract::vendor::BROADCOM`]).
    pub fn broadcom() -> Self {
        Self::from_profile(&contract::vendor::BROADCOM)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    Unknown(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// Stable snake_case name with the `config_` prefix.
    pub name: String,
    pub verdict: Verdict,
    pub observed: String,
    pub expected: String,
    /// The exact setting to look at.
    pub setting: String,
    /// A command that shows it.
    pub command: String,
}

struct Ctx<'a> {
    s: &'a NicSample,
    p: &'a Policy,
    ifname: &'a str,
    rdma_dev: String,
    rdma_port: u32,
}

fn check(
    name: &str,
    verdict: Verdict,
    observed: String,
    expected: String,
    setting: String,
    command: String,
) -> Check {
    Check {
        name: name.into(),
        verdict,
        observed,
        expected,
        setting,
        command,
    }
}

fn pass_if(ok: bool) -> Verdict {
    if ok { Verdict::Pass } else { Verdict::Fail }
}

fn prio_list(v: &[u8]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs every check.
pub fn run_checks(policy: &Policy, sample: &NicSample) -> Vec<Check> {
    let c = Ctx {
        s: sample,
        p: policy,
        ifname: &sample.ifname,
        rdma_dev: sample
            .rdma
            .as_ref()
            .map(|r| r.dev.clone())
            .unwrap_or_else(|| "<rdma-dev>".into()),
        rdma_port: sample.rdma.as_ref().map(|r| r.port).unwrap_or(1),
    };
    vec![
        pfc_priorities(&c),
        global_pause(&c),
        trust_mode(&c),
        data_dscp_priority(&c),
        cnp_dscp(&c),
        cnp_priority(&c),
        ecn_enable(&c, true),
        ecn_enable(&c, false),
        default_roce_tos(&c),
        roce_v2_gid(&c),
    ]
}

/// PFC priorities from mlx5 ethtool names (`rx_prio<N>_pause` exists only for PFC-enabled N).
fn pfc_from_mlx5_names(s: &NicSample) -> Option<Vec<u8>> {
    let names = s.ethtool.as_ref()?;
    let eth = s.drvinfo.as_ref().map(|d| Driver::from_ethtool(&d.driver));
    if eth != Some(Driver::Mlx5) {
        return None;
    }
    let mut v: Vec<u8> = (0..8u8)
        .filter(|p| names.iter().any(|(n, _)| *n == format!("rx_prio{p}_pause")))
        .collect();
    v.dedup();
    Some(v)
}

fn pfc_priorities(c: &Ctx<'_>) -> Check {
    let want = vec![c.p.rdma_priority];
    let expected = format!("PFC enabled on priority {} only", c.p.rdma_priority);
    let setting = "IEEE PFC pfc_en bitmap (dcbnl DCB_ATTR_IEEE_PFC)".to_string();
    let cmd = format!("mlnx_qos -i {0}   (or: dcb pfc show dev {0})", c.ifname);
    match (&c.s.dcb, c.s.dcb.value().and_then(|d| d.pfc.as_ref())) {
        (_, Some(pfc)) => {
            let on = pfc.enabled();
            let obs = format!(
                "PFC enabled on: {} (pfc_en=0x{:02x})",
                prio_list(&on),
                pfc.pfc_en
            );
            check(
                "config_pfc_priorities",
                pass_if(on == want),
                obs,
                expected,
                setting,
                cmd,
            )
        }
        (dcb, None) => {
            if let Some(on) = pfc_from_mlx5_names(c.s) {
                let obs = format!(
                    "PFC enabled on: {} (from ethtool -S rx_prio<N>_pause names)",
                    prio_list(&on)
                );
                let cmd = format!("ethtool -S {} | grep -E 'prio[0-7]_pause'", c.ifname);
                let setting =
                    "mlx5 per-priority pause counters (present only for PFC-enabled priorities)"
                        .into();
                return check(
                    "config_pfc_priorities",
                    pass_if(on == want),
                    obs,
                    expected,
                    setting,
                    cmd,
                );
            }
            let why = match dcb {
                Reading::Unavailable(u) => u.to_string(),
                Reading::Read(_) => "the driver does not report IEEE PFC".into(),
            };
            check(
                "config_pfc_priorities",
                Verdict::Unknown(why),
                "unreadable".into(),
                expected,
                setting,
                cmd,
            )
        }
    }
}

fn global_pause(c: &Ctx<'_>) -> Check {
    let expected = "802.3x global pause off (rx off, tx off)".to_string();
    let setting = "ethtool pause parameters (ETHTOOL_MSG_PAUSE_GET rx/tx)".to_string();
    let cmd = format!("ethtool -a {}", c.ifname);
    let pause = c.s.pause.as_ref();
    match (
        pause.and_then(|p| p.rx_pause),
        pause.and_then(|p| p.tx_pause),
    ) {
        (Some(rx), Some(tx)) => {
            let obs = format!(
                "rx {}, tx {}",
                if rx { "on" } else { "off" },
                if tx { "on" } else { "off" }
            );
            check(
                "config_global_pause_off",
                pass_if(!rx && !tx),
                obs,
                expected,
                setting,
                cmd,
            )
        }
        _ => {
            let why = source_reason(
                c.s,
                super::SourceKind::EthtoolPause,
                "pause parameters not reported",
            );
            check(
                "config_global_pause_off",
                Verdict::Unknown(why),
                "unreadable".into(),
                expected,
                setting,
                cmd,
            )
        }
    }
}

fn source_reason(s: &NicSample, kind: super::SourceKind, default: &str) -> String {
    match s.status(kind) {
        Some(super::SourceStatus::Unavailable(u)) => u.to_string(),
        Some(super::SourceStatus::Failed { error }) => format!("error: {error}"),
        _ => default.to_string(),
    }
}

fn trust_mode(c: &Ctx<'_>) -> Check {
    let expected = match c.p.trust {
        Trust::Dscp => "trust dscp",
        Trust::Pcp => "trust pcp",
    };
    let setting =
        "port trust state (mlx5: DSCP iff the IEEE APP table has DSCP (selector 5) entries)"
            .to_string();
    let cmd = format!(
        "mlnx_qos -i {0}   (or: dcb app show dev {0} dscp-prio)",
        c.ifname
    );
    match &c.s.dcb {
        Reading::Read(d) => {
            let n = d
                .app
                .iter()
                .filter(|a| a.selector == super::dcb::APP_SEL_DSCP)
                .count();
            let observed = if n > 0 { Trust::Dscp } else { Trust::Pcp };
            let obs = format!(
                "trust {} ({n} DSCP APP entries)",
                if n > 0 { "dscp" } else { "pcp" }
            );
            check(
                "config_trust_mode",
                pass_if(observed == c.p.trust),
                obs,
                expected.into(),
                setting,
                cmd,
            )
        }
        Reading::Unavailable(u) => check(
            "config_trust_mode",
            Verdict::Unknown(u.to_string()),
            "unreadable".into(),
            expected.into(),
            setting,
            cmd,
        ),
    }
}

fn data_dscp_priority(c: &Ctx<'_>) -> Check {
    let p = c.p;
    let expected = format!("DSCP {} -> priority {}", p.data_dscp, p.rdma_priority);
    let setting = format!(
        "IEEE APP table entry selector 5 (DSCP) protocol {}",
        p.data_dscp
    );
    let cmd = format!(
        "dcb app show dev {} dscp-prio   (or: mlnx_qos -i {})",
        c.ifname, c.ifname
    );
    if p.trust == Trust::Pcp {
        let why = "trust PCP: the priority comes from the VLAN PCP the sender sets, not from a host table".to_string();
        return check(
            "config_data_dscp_priority",
            Verdict::Unknown(why),
            "n/a".into(),
            format!("PCP {} on RoCE data", p.rdma_priority),
            "egress VLAN priority of the RoCE traffic".into(),
            cmd,
        );
    }
    match &c.s.dcb {
        Reading::Read(d) => {
            let got = d.dscp_priorities(p.data_dscp);
            let obs = if got.is_empty() {
                format!("DSCP {} not in the APP table", p.data_dscp)
            } else {
                format!("DSCP {} -> priority {}", p.data_dscp, prio_list(&got))
            };
            check(
                "config_data_dscp_priority",
                pass_if(got == [p.rdma_priority]),
                obs,
                expected,
                setting,
                cmd,
            )
        }
        Reading::Unavailable(u) => check(
            "config_data_dscp_priority",
            Verdict::Unknown(u.to_string()),
            "unreadable".into(),
            expected,
            setting,
            cmd,
        ),
    }
}

/// A CNP parameter from mlx5 debugfs, or the OFED ecn file.
fn cnp_param(
    c: &Ctx<'_>,
    cc_name: &str,
    ofed: &Reading<u64>,
    ofed_file: &str,
) -> (Option<u64>, String, String, String) {
    let bdf =
        c.s.drvinfo
            .as_ref()
            .map(|d| d.bus_info.clone())
            .unwrap_or_else(|| "<pci>".into());
    let debugfs = format!("/sys/kernel/debug/mlx5/{bdf}/cc_params/{cc_name}");
    let ofed_path = format!("/sys/class/net/{}/ecn/roce_np/{ofed_file}", c.ifname);
    if let Some(v) = c.s.config.cc(cc_name) {
        return (
            Some(v),
            debugfs.clone(),
            format!("cat {debugfs}"),
            String::new(),
        );
    }
    if let Some(v) = ofed.value() {
        return (
            Some(*v),
            ofed_path.clone(),
            format!("cat {ofed_path}"),
            String::new(),
        );
    }
    let r1 =
        c.s.config
            .mlx5_cc
            .reason()
            .map(|u| u.to_string())
            .unwrap_or_else(|| format!("{cc_name} unreadable"));
    let r2 = ofed.reason().map(|u| u.to_string()).unwrap_or_default();
    (
        None,
        format!("{debugfs} or {ofed_path}"),
        format!("cat {ofed_path}   (root: cat {debugfs})"),
        format!("{r1}; {r2}"),
    )
}

fn cnp_dscp(c: &Ctx<'_>) -> Check {
    let (v, setting, cmd, why) =
        cnp_param(c, "np_cnp_dscp", &c.s.config.ofed_ecn.cnp_dscp, "cnp_dscp");
    let expected = format!("CNP DSCP {}", c.p.cnp_dscp);
    match v {
        Some(v) => check(
            "config_cnp_dscp",
            pass_if(v == c.p.cnp_dscp as u64),
            format!("CNP DSCP {v}"),
            expected,
            setting,
            cmd,
        ),
        None => check(
            "config_cnp_dscp",
            Verdict::Unknown(why),
            "unreadable".into(),
            expected,
            setting,
            cmd,
        ),
    }
}

fn cnp_priority(c: &Ctx<'_>) -> Check {
    let (v, setting, cmd, why) = cnp_param(
        c,
        "np_cnp_prio",
        &c.s.config.ofed_ecn.cnp_802p_prio,
        "cnp_802p_prio",
    );
    let expected = format!("CNP priority {}", c.p.cnp_priority);
    let mode =
        c.s.config
            .cc("np_cnp_prio_mode")
            .map(|m| format!(" (np_cnp_prio_mode {m})"))
            .unwrap_or_default();
    match v {
        Some(v) => check(
            "config_cnp_priority",
            pass_if(v == c.p.cnp_priority as u64),
            format!("CNP priority {v}{mode}"),
            expected,
            setting,
            cmd,
        ),
        None => check(
            "config_cnp_priority",
            Verdict::Unknown(why),
            "unreadable".into(),
            expected,
            setting,
            cmd,
        ),
    }
}

fn ecn_enable(c: &Ctx<'_>, rp: bool) -> Check {
    let (name, side, what) = if rp {
        (
            "config_ecn_rp_enabled",
            "roce_rp",
            "reaction point (rate reduction on CNP)",
        )
    } else {
        (
            "config_ecn_np_enabled",
            "roce_np",
            "notification point (CNP on CE)",
        )
    };
    let prio = c.p.rdma_priority as usize % 8;
    let arr = if rp {
        &c.s.config.ofed_ecn.roce_rp_enable
    } else {
        &c.s.config.ofed_ecn.roce_np_enable
    };
    let path = format!("/sys/class/net/{}/ecn/{side}/enable/{prio}", c.ifname);
    let expected = format!("ECN {what} enabled on priority {prio}");
    match &arr[prio] {
        Reading::Read(on) => check(
            name,
            pass_if(*on),
            format!("{}", *on as u8),
            expected,
            path.clone(),
            format!("cat {path}"),
        ),
        Reading::Unavailable(u) => {
            let why = format!(
                "{u} (MLNX_OFED-only file; upstream kernels expose no per-priority ECN enable)"
            );
            check(
                name,
                Verdict::Unknown(why),
                "unreadable".into(),
                expected,
                path.clone(),
                format!("cat {path}"),
            )
        }
    }
}

fn default_roce_tos(c: &Ctx<'_>) -> Check {
    let path = format!(
        "/sys/kernel/config/rdma_cm/{}/ports/{}/default_roce_tos",
        c.rdma_dev, c.rdma_port
    );
    let expected = format!(
        "ToS DSCP {} (ToS byte {} with ECN bits 00, {} with ECT(0))",
        c.p.data_dscp,
        (c.p.data_dscp as u16) << 2,
        ((c.p.data_dscp as u16) << 2) | 2
    );
    let cmd = format!("cat {path}");
    match &c.s.config.default_roce_tos {
        Reading::Read(tos) => {
            let (dscp, ecn) = (tos >> 2, tos & 3);
            let obs = format!("ToS {tos} = DSCP {dscp}, ECN bits {ecn:02b}");
            check(
                "config_default_roce_tos",
                pass_if(dscp == c.p.data_dscp),
                obs,
                expected,
                path,
                cmd,
            )
        }
        Reading::Unavailable(u) => {
            let why = format!(
                "{u} (the rdma_cm configfs group exists only after mkdir; applications may set ToS themselves, e.g. NCCL_IB_TC)"
            );
            check(
                "config_default_roce_tos",
                Verdict::Unknown(why),
                "unreadable".into(),
                expected,
                path,
                cmd,
            )
        }
    }
}

fn roce_v2_gid(c: &Ctx<'_>) -> Check {
    let setting = format!(
        "/sys/class/infiniband/{}/ports/{}/gid_attrs/types/*",
        c.rdma_dev, c.rdma_port
    );
    let cmd = "rdma link show   (and: show_gids)".to_string();
    let expected = "at least one RoCE v2 GID".to_string();
    match &c.s.config.gid_types {
        Reading::Read(g) => {
            let v2 = g.iter().filter(|e| e.gid_type == "RoCE v2").count();
            let obs = format!("{v2} RoCE v2 of {} GIDs", g.len());
            check(
                "config_roce_v2_gid",
                pass_if(v2 > 0),
                obs,
                expected,
                setting,
                cmd,
            )
        }
        Reading::Unavailable(u) => check(
            "config_roce_v2_gid",
            Verdict::Unknown(u.to_string()),
            "unreadable".into(),
            expected,
            setting,
            cmd,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{CcParam, NicConfig};
    use super::super::dcb::{DcbApp, DcbIeee, IeeePfc};
    use super::super::rdma::GidEntry;
    use super::super::{DrvInfo, PauseStats, RdmaPort, UnavailableReason};
    use super::*;

    fn good_sample() -> NicSample {
        let mut s = NicSample::empty("ens1f0np0", 1);
        s.drvinfo = Some(DrvInfo {
            driver: "mlx5_core".into(),
            bus_info: "0000:3b:00.0".into(),
            ..Default::default()
        });
        s.pause = Some(PauseStats {
            rx_pause: Some(false),
            tx_pause: Some(false),
            ..Default::default()
        });
        s.rdma = Some(RdmaPort {
            dev: "mlx5_0".into(),
            port: 1,
            counters: vec![],
            via: "netlink".into(),
        });
        let app = vec![
            DcbApp {
                selector: 5,
                priority: 3,
                protocol: 26,
            },
            DcbApp {
                selector: 5,
                priority: 6,
                protocol: 48,
            },
        ];
        s.dcb = Reading::Read(DcbIeee {
            pfc: Some(IeeePfc {
                pfc_en: 0x08,
                ..Default::default()
            }),
            app,
            ..Default::default()
        });
        let cc = vec![
            CcParam {
                name: "np_cnp_dscp".into(),
                value: Reading::Read(48),
            },
            CcParam {
                name: "np_cnp_prio".into(),
                value: Reading::Read(6),
            },
        ];
        let mut cfg = NicConfig {
            mlx5_cc: Reading::Read(cc),
            default_roce_tos: Reading::Read(106),
            ..Default::default()
        };
        cfg.ofed_ecn.roce_rp_enable[3] = Reading::Read(true);
        cfg.ofed_ecn.roce_np_enable[3] = Reading::Read(true);
        cfg.gid_types = Reading::Read(vec![GidEntry {
            index: 3,
            gid_type: "RoCE v2".into(),
            ndev: Some("ens1f0np0".into()),
        }]);
        s.config = cfg;
        s
    }

    fn by_name<'a>(v: &'a [Check], n: &str) -> &'a Check {
        v.iter()
            .find(|c| c.name == n)
            .unwrap_or_else(|| panic!("no check {n}"))
    }

    #[test]
    fn all_pass_on_a_good_config() {
        let v = run_checks(&Policy::nvidia(), &good_sample());
        for c in &v {
            assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
            assert!(c.name.starts_with("config_"));
            assert!(!c.command.is_empty() && !c.setting.is_empty());
        }
        assert_eq!(v.len(), 10);
        assert!(
            by_name(&v, "config_cnp_dscp")
                .setting
                .contains("0000:3b:00.0/cc_params/np_cnp_dscp")
        );
    }

    #[test]
    fn failures_are_named() {
        let mut s = good_sample();
        if let Reading::Read(d) = &mut s.dcb {
            d.pfc.as_mut().unwrap().pfc_en = 0x18; // prio 3 and 4
            d.app[0].priority = 0; // DSCP 26 -> 0
        }
        s.pause.as_mut().unwrap().rx_pause = Some(true);
        s.config.default_roce_tos = Reading::Read(0);
        s.config.ofed_ecn.roce_np_enable[3] = Reading::Read(false);
        s.config.gid_types = Reading::Read(vec![GidEntry {
            index: 0,
            gid_type: "IB/RoCE v1".into(),
            ndev: None,
        }]);
        let v = run_checks(&Policy::broadcom(), &s);
        let pfc = by_name(&v, "config_pfc_priorities");
        assert_eq!(pfc.verdict, Verdict::Fail);
        assert!(pfc.observed.contains("3,4"), "{}", pfc.observed);
        assert_eq!(
            by_name(&v, "config_data_dscp_priority").verdict,
            Verdict::Fail
        );
        assert_eq!(
            by_name(&v, "config_global_pause_off").verdict,
            Verdict::Fail
        );
        assert_eq!(
            by_name(&v, "config_cnp_priority").verdict,
            Verdict::Fail,
            "broadcom expects 7"
        );
        assert_eq!(by_name(&v, "config_cnp_dscp").verdict, Verdict::Pass);
        assert_eq!(
            by_name(&v, "config_default_roce_tos").verdict,
            Verdict::Fail
        );
        assert_eq!(by_name(&v, "config_ecn_np_enabled").verdict, Verdict::Fail);
        assert_eq!(by_name(&v, "config_ecn_rp_enabled").verdict, Verdict::Pass);
        assert_eq!(by_name(&v, "config_roce_v2_gid").verdict, Verdict::Fail);
        let mut pcp = Policy::nvidia();
        pcp.trust = Trust::Pcp;
        let v = run_checks(&pcp, &good_sample());
        assert_eq!(by_name(&v, "config_trust_mode").verdict, Verdict::Fail);
        assert!(matches!(
            by_name(&v, "config_data_dscp_priority").verdict,
            Verdict::Unknown(_)
        ));
    }

    #[test]
    fn unknown_when_unreadable_and_mlx5_name_fallback() {
        let mut s = NicSample::empty("veth0", 1);
        s.dcb = Reading::unavailable(
            UnavailableReason::NotSupported,
            "DCB unavailable on veth0: no dcbnl_ops",
        );
        let v = run_checks(&Policy::nvidia(), &s);
        for c in &v {
            assert!(matches!(c.verdict, Verdict::Unknown(_)), "{c:?}");
        }
        let Verdict::Unknown(why) = &by_name(&v, "config_pfc_priorities").verdict else {
            unreachable!()
        };
        assert!(why.contains("DCB unavailable"), "{why}");
        let Verdict::Unknown(why) = &by_name(&v, "config_ecn_rp_enabled").verdict else {
            unreachable!()
        };
        assert!(why.contains("OFED"), "{why}");
        // mlx5 without DCB answers: PFC from the ethtool string set
        s.drvinfo = Some(DrvInfo {
            driver: "mlx5_core".into(),
            ..Default::default()
        });
        s.ethtool = Some(vec![
            ("rx_prio3_pause".into(), 1),
            ("tx_prio3_pause".into(), 0),
            ("rx_bytes".into(), 9),
        ]);
        let v = run_checks(&Policy::nvidia(), &s);
        let pfc = by_name(&v, "config_pfc_priorities");
        assert_eq!(pfc.verdict, Verdict::Pass, "{pfc:?}");
        assert!(pfc.command.contains("ethtool -S veth0"));
        let j = serde_json::to_string(&v).unwrap();
        assert!(j.contains("\"unknown\""));
    }
}
