//! Faults injected in the switch namespace with real kernel tools: nftables rules in the bridge
//! family on RoCE data entering from h1 (random drop, DSCP re-marking to 0, ECN CE marking, and
//! per-QP re-marking of DSCP, ECN and the 802.1Q priority, as switches at a trust boundary do),
//! each with a named counter that is the ground truth of what was injected; and PFC / 802.3x PAUSE
//! frames sent with AF_PACKET from the switch port toward h2 (the bridge does not forward the
//! 01:80:c2:00:00:01 group address, so they are sent on the port itself, as a switch would).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use netns::Netns;

use super::sock::RawSock;
use super::topo::{SW_P1, SW_P2, SW_P2_MAC};
use super::{LabError, stop_requested, wire};

/// nftables faults on h1 -> h2 RoCE traffic.
#[derive(Clone, Debug, Default)]
pub struct NftFaults {
    /// Drop this percentage of packets (`numgen random mod 100 < N`).
    pub loss_pct: u8,
    /// Re-mark every packet of the QP using this UDP source port to DSCP 0 ...
    pub bleach_sport: Option<u16>,
    /// ... and this percentage of the others.
    pub bleach_pct: u8,
    /// Set ECN to CE on this percentage of packets.
    pub ce_pct: u8,
    /// Per-QP re-marking, in order (after the drop, the bleach and the CE marking).
    pub remarks: Vec<RemarkRule>,
}

/// What a re-marking rule sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remark {
    /// The DSCP.
    Dscp(u8),
    /// ECN to Not-ECT (0): the switch bleaches ECN.
    NotEct,
    /// The 802.1Q tag to this priority in VLAN `vid` (the whole TCI is written: nftables
    /// writes a tag the kernel holds in metadata only whole).
    Pcp { pcp: u8, vid: u16 },
}

impl Remark {
    /// The field it changes, as the path view names it (`DSCP`, `PCP`, `ECN`), and the value
    /// it sets (ECN Not-ECT: 0).
    pub fn field_value(self) -> (&'static str, i16) {
        match self {
            Remark::Dscp(d) => ("DSCP", d.into()),
            Remark::NotEct => ("ECN", 0),
            Remark::Pcp { pcp, .. } => ("PCP", pcp.into()),
        }
    }

    fn statement(self) -> String {
        match self {
            Remark::Dscp(d) => format!("ip dscp set {d}"),
            Remark::NotEct => "ip ecn set not-ect".into(),
            Remark::Pcp { pcp, vid } => {
                let tci = (u16::from(pcp & 7) << 13) | (vid & 0xfff);
                format!("@ll,112,16 set {tci:#06x}")
            }
        }
    }

    /// What a packet must match for the statement to apply (before any IP match: nftables
    /// wants the VLAN header's match first).
    fn guard(self) -> Option<String> {
        match self {
            Remark::Pcp { vid, .. } => Some(format!("vlan id {vid}")),
            _ => None,
        }
    }
}

/// One per-QP re-marking: the packets of the QP whose UDP source port is `sport` (all, or
/// `pct` % of them at random; only those whose DSCP is in `dscp_in`, when given) get `action`,
/// counted by the named counter `counter` (the ground truth of what was injected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemarkRule {
    pub counter: String,
    /// The QP's index in the scenario.
    pub qp: usize,
    pub sport: u16,
    pub pct: Option<u8>,
    pub dscp_in: Vec<u8>,
    pub action: Remark,
}

impl RemarkRule {
    /// The rule for packets entering at `iif`.
    fn rule(&self, iif: &str) -> String {
        let mut r = format!("iifname \"{iif}\"");
        if let Some(g) = self.action.guard() {
            r += &format!(" {g}");
        }
        r += &format!(" udp dport {} udp sport {}", wire::ROCE_PORT, self.sport);
        if let Some(p) = self.pct {
            r += &format!(" numgen random mod 100 < {p}");
        }
        if !self.dscp_in.is_empty() {
            let set: Vec<String> = self.dscp_in.iter().map(u8::to_string).collect();
            r += &format!(" ip dscp {{ {} }}", set.join(", "));
        }
        format!(
            "{r} {} counter name \"{}\"",
            self.action.statement(),
            self.counter
        )
    }
}

/// Counter values read back from the switch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftCounts {
    /// Packets seen entering from h1 (RoCE, UDP 4791).
    pub seen: u64,
    pub dropped: u64,
    pub bleached: u64,
    pub ce_marked: u64,
    /// The re-marking rules' counters, by name.
    pub remarked: BTreeMap<String, u64>,
}

impl NftFaults {
    /// The ruleset: order matters (a dropped packet is neither re-marked nor CE-marked).
    pub fn ruleset(&self) -> String {
        let m = format!("iifname \"{SW_P1}\" udp dport {}", wire::ROCE_PORT);
        let mut rules = vec![format!("{m} counter name \"seen\"")];
        if self.loss_pct > 0 {
            rules.push(format!(
                "{m} numgen random mod 100 < {} counter name \"loss\" drop",
                self.loss_pct
            ));
        }
        if let Some(sp) = self.bleach_sport {
            rules.push(format!(
                "{m} udp sport {sp} ip dscp set 0 counter name \"bleach\""
            ));
            if self.bleach_pct > 0 {
                rules.push(format!(
                    "{m} udp sport != {sp} numgen random mod 100 < {} ip dscp set 0 counter name \"bleach\"",
                    self.bleach_pct
                ));
            }
        } else if self.bleach_pct > 0 {
            rules.push(format!(
                "{m} numgen random mod 100 < {} ip dscp set 0 counter name \"bleach\"",
                self.bleach_pct
            ));
        }
        if self.ce_pct > 0 {
            rules.push(format!(
                "{m} numgen random mod 100 < {} ip ecn set ce counter name \"ce\"",
                self.ce_pct
            ));
        }
        rules.extend(self.remarks.iter().map(|r| r.rule(SW_P1)));
        let mut s = String::from(
            "table bridge rolab {\n  counter seen {}\n  counter loss {}\n  counter bleach {}\n  counter ce {}\n",
        );
        for r in &self.remarks {
            s += &format!("  counter {} {{}}\n", r.counter);
        }
        s.push_str("  chain faults {\n    type filter hook forward priority 0; policy accept;\n");
        for r in rules {
            s.push_str("    ");
            s.push_str(&r);
            s.push('\n');
        }
        s.push_str("  }\n}\n");
        s
    }

    pub fn install(&self, sw: &Netns) -> Result<(), LabError> {
        let path = std::env::temp_dir().join(format!("ro-lab-nft-{}.nft", sw.name));
        std::fs::write(&path, self.ruleset()).map_err(|source| LabError::Sys {
            what: path.display().to_string(),
            source,
        })?;
        let r = sw.exec("nft", &["-f", &path.to_string_lossy()]);
        let _ = std::fs::remove_file(&path);
        r.map_err(|source| LabError::FaultsCommand {
            what: format!("nft -f in {}", sw.name),
            source,
        })?;
        Ok(())
    }
}

/// Reads the named counters (`nft -j list counters`).
pub fn read_counters(sw: &Netns) -> Result<NftCounts, LabError> {
    let out = sw
        .exec(
            "nft",
            &["-j", "list", "counters", "table", "bridge", "rolab"],
        )
        .map_err(|source| LabError::FaultsCommand {
            what: "nft list counters".into(),
            source,
        })?;
    parse_counters(&out)
}

pub fn parse_counters(json: &str) -> Result<NftCounts, LabError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|source| LabError::FaultsOutput {
            what: "nft -j output".into(),
            source,
        })?;
    let mut c = NftCounts::default();
    let items = v["nftables"]
        .as_array()
        .ok_or_else(|| LabError::Faults("nft -j output has no \"nftables\" array".into()))?;
    for it in items {
        let Some(ctr) = it.get("counter") else {
            continue;
        };
        let n = ctr["packets"].as_u64().unwrap_or(0);
        match ctr["name"].as_str() {
            Some("seen") => c.seen = n,
            Some("loss") => c.dropped = n,
            Some("bleach") => c.bleached = n,
            Some("ce") => c.ce_marked = n,
            Some(other) => {
                c.remarked.insert(other.to_string(), n);
            }
            None => {}
        }
    }
    Ok(c)
}

/// PFC / PAUSE frames to send toward h2.
#[derive(Clone, Copy, Debug, Default)]
pub struct PfcPlan {
    /// XOFF frames on the RDMA priority (a storm: one per `gap`), then one XON.
    pub rdma_xoff: u32,
    pub rdma_priority: u8,
    /// XOFF frames on another priority (misconfiguration), then one XON.
    pub other_xoff: u32,
    pub other_priority: u8,
    /// 802.3x PAUSE frames (quanta 0xffff), then one with quanta 0.
    pub pause: u32,
    pub gap: Duration,
}

/// What was actually sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcSent {
    pub xoff: [u64; 8],
    pub xon: [u64; 8],
    pub pfc_frames: u64,
    pub pause: u64,
    pub pause_xon: u64,
    /// From the first to the last XOFF frame of the RDMA priority (the storm's length).
    pub rdma_storm: Duration,
}

/// Sends the plan from `sw-p2`; runs on its own thread in the switch namespace.
pub fn send_pfc(sw: &Netns, plan: PfcPlan) -> Result<PfcSent, LabError> {
    let _in = sw.enter().map_err(|source| LabError::Topology {
        what: "entering the switch",
        source,
    })?;
    let s = RawSock::open(SW_P2)?;
    let mut sent = PfcSent::default();
    let pfc = |s: &RawSock, sent: &mut PfcSent, prio: u8, q: u16| -> Result<(), LabError> {
        let mut times = [0u16; 8];
        times[prio as usize] = q;
        s.send(&wire::pfc_frame(SW_P2_MAC, 1 << prio, times))?;
        sent.pfc_frames += 1;
        if q > 0 {
            sent.xoff[prio as usize] += 1;
        } else {
            sent.xon[prio as usize] += 1;
        }
        Ok(())
    };
    let start = Instant::now();
    let mut last_rdma_xoff = None;
    let total = plan.rdma_xoff.max(plan.other_xoff).max(plan.pause);
    for i in 0..total {
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        if i < plan.rdma_xoff {
            pfc(&s, &mut sent, plan.rdma_priority, 0xffff)?;
            last_rdma_xoff = Some(Instant::now());
        }
        if i < plan.other_xoff {
            pfc(&s, &mut sent, plan.other_priority, 0x8000)?;
        }
        if i < plan.pause {
            s.send(&wire::pause_frame(SW_P2_MAC, 0xffff))?;
            sent.pause += 1;
        }
        // Paced against the clock, not sleep drift.
        let due = start + plan.gap * (i + 1);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    if plan.rdma_xoff > 0 {
        sent.rdma_storm = last_rdma_xoff.map_or(Duration::ZERO, |t| t - start);
        pfc(&s, &mut sent, plan.rdma_priority, 0)?;
    }
    if plan.other_xoff > 0 {
        pfc(&s, &mut sent, plan.other_priority, 0)?;
    }
    if plan.pause > 0 {
        s.send(&wire::pause_frame(SW_P2_MAC, 0))?;
        sent.pause += 1;
        sent.pause_xon += 1;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_orders_drop_before_marking_and_splits_bleach() {
        let f = NftFaults {
            loss_pct: 3,
            bleach_sport: Some(49154),
            bleach_pct: 10,
            ce_pct: 20,
            remarks: Vec::new(),
        };
        let r = f.ruleset();
        let drop = r.find("drop").unwrap();
        assert!(drop < r.find("dscp set 0").unwrap());
        assert!(r.find("dscp set 0").unwrap() < r.find("ecn set ce").unwrap());
        assert!(r.contains("udp sport != 49154 numgen random mod 100 < 10"));
        assert!(!NftFaults::default().ruleset().contains("numgen"));
    }

    #[test]
    fn remark_rules_with_their_counters() {
        let f = NftFaults {
            remarks: vec![
                RemarkRule {
                    counter: "q1_pcp".into(),
                    qp: 1,
                    sport: 49154,
                    pct: Some(30),
                    dscp_in: Vec::new(),
                    action: Remark::Pcp { pcp: 0, vid: 100 },
                },
                RemarkRule {
                    counter: "q0_map".into(),
                    qp: 0,
                    sport: 49153,
                    pct: None,
                    dscp_in: vec![24, 26],
                    action: Remark::Pcp { pcp: 3, vid: 100 },
                },
                RemarkRule {
                    counter: "q2_ecn".into(),
                    qp: 2,
                    sport: 49155,
                    pct: None,
                    dscp_in: Vec::new(),
                    action: Remark::NotEct,
                },
            ],
            ..Default::default()
        };
        let r = f.ruleset();
        assert!(r.contains("counter q1_pcp {}"), "{r}");
        assert!(r.contains("iifname \"sw-p1\" vlan id 100 udp dport 4791 udp sport 49154 numgen random mod 100 < 30 @ll,112,16 set 0x0064 counter name \"q1_pcp\""), "{r}");
        assert!(r.contains("vlan id 100 udp dport 4791 udp sport 49153 ip dscp { 24, 26 } @ll,112,16 set 0x6064 counter name \"q0_map\""), "{r}");
        assert!(r.contains("iifname \"sw-p1\" udp dport 4791 udp sport 49155 ip ecn set not-ect counter name \"q2_ecn\""), "{r}");
        assert_eq!(Remark::NotEct.field_value(), ("ECN", 0));
        let j = r#"{"nftables": [{"counter": {"name": "q1_pcp", "packets": 7}}, {"counter": {"name": "seen", "packets": 9}}]}"#;
        let c = parse_counters(j).unwrap();
        assert_eq!((c.seen, c.remarked.get("q1_pcp")), (9, Some(&7)));
    }

    #[test]
    fn counters_are_read_by_name() {
        let j = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"counter": {"family": "bridge", "name": "loss", "table": "rolab", "handle": 2, "packets": 13, "bytes": 884}}, {"counter": {"family": "bridge", "name": "ce", "table": "rolab", "handle": 4, "packets": 74, "bytes": 5032}}]}"#;
        let c = parse_counters(j).unwrap();
        assert_eq!((c.dropped, c.ce_marked, c.bleached), (13, 74, 0));
        assert!(parse_counters("{").is_err());
    }
}
