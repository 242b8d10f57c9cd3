//! A scenario's report, built from what the lab did ([`Truth`]) and what roce-observe reported
//! ([`observe::Observed`]): one row per compared quantity (the re-marking counts through the
//! path view, [`super::path_view`]), the lab's checks of its own ground truth, the alert rules
//! that must fire or stay silent, the path view itself, and a few lines of information.
//!
//! The order of the rows and checks is the order in which the report prints them.

use super::faults::{Remark, RemarkRule};
use super::observe::{self, ObserverMode};
use super::path_view::{self, PathView};
use super::rc::{RcConfig, ReqStats, RespStats};
use super::report::{AlertCheck, Row, ScenarioReport, SelfCheck, Summaries};
use super::topo::{H1_IF, H1_IP, H2_IF, H2_IP, ip_str};
use super::{DATA_DSCP, LabArgs, ScenarioSpec, Truth};
use std::time::Duration;

use contract::marking::Marking;
use observer::pipeline::PolicyConfig;

/// The table: ground truth beside roce-observe's summary, plus the lab's self-checks and the
/// path view judged against the observers' `policy`.
pub fn build_report(
    args: &LabArgs,
    spec: &ScenarioSpec,
    cfg: &RcConfig,
    t: &Truth,
    o: &observe::Observed,
    policy: &PolicyConfig,
) -> ScenarioReport {
    let sums = Totals(t, &spec.nft.remarks);
    let seen = Readings::new(&o.summaries);
    let view = path_view::path_view(&o.summaries, &Marking::of(&policy.expected));
    let mut rows = traffic_rows(&sums, &seen);
    rows.extend(reply_and_marking_rows(&sums, &seen));
    rows.extend(path_rows(args, spec, cfg, &sums, &seen, &view));
    rows.extend(pause_rows(t, &seen));
    if args.observer == ObserverMode::Userspace {
        rows.push(row(
            "ICRC failures",
            0,
            "every frame built with a valid ICRC",
            seen.data_in("icrc_bad"),
            &seen.at_in,
        ));
    }
    // The lab's own ground truth must hold together before it can judge the observer.
    let mut self_checks = delivery_checks(&sums);
    self_checks.extend(marking_and_rate_checks(cfg, &sums));
    self_checks.extend(remark_checks(spec, cfg, &sums));
    self_checks.extend(scenario_checks(args, spec, &sums, o));
    ScenarioReport {
        scenario: spec.name.clone(),
        observer: args.observer.label().to_string(),
        rows,
        alerts: alert_checks(spec, o),
        all_alerts: o.alerts.clone().unwrap_or_default(),
        self_checks,
        latency: match (spec.reply_delay, &o.latency) {
            (Some(d), Some(l)) => crate::latency::checks(d, l),
            (Some(_), None) => vec![crate::report::SelfCheck {
                what: "latency measured".into(),
                ok: false,
                detail: "no capture was replayed".into(),
            }],
            _ => Vec::new(),
        },
        info: info_lines(&sums, o),
        path: view.render(),
        secs: 0.0,
    }
}

/// Sums over the QPs of the ground truth, and the scenario's re-marking rules.
struct Totals<'a>(&'a Truth, &'a [RemarkRule]);

impl Totals<'_> {
    /// A requester counter summed over its QPs.
    fn req(&self, f: fn(&ReqStats) -> u64) -> u64 {
        self.0.req.iter().map(f).sum()
    }

    /// A responder counter summed over its QPs.
    fn resp(&self, f: fn(&RespStats) -> u64) -> u64 {
        self.0.resp.qps.iter().map(f).sum()
    }

    /// Packets the per-QP re-marking rules whose action is `which` counted.
    fn remarked(&self, which: impl Fn(Remark) -> bool) -> u64 {
        self.1
            .iter()
            .filter(|r| which(r.action))
            .filter_map(|r| self.0.nft.remarked.get(&r.counter))
            .sum()
    }
}

/// Where roce-observe's numbers are read: data packets at h1's egress (as sent) and h2's ingress
/// (as received); ACK-direction packets at h2's tc egress when it has one, else at h1's ingress.
struct Readings<'a> {
    s: Summaries<'a>,
    h1: String,
    h2: String,
    ack_if: &'static str,
    ack_dir: &'static str,
    at_in: String,
    at_out: String,
    at_ack: String,
    /// Where the ACK direction arrives: h1's ingress.
    at_ack_in: String,
}

impl<'a> Readings<'a> {
    fn new(docs: &'a [serde_json::Value]) -> Self {
        let s = Summaries { docs };
        let (ack_if, ack_dir) = if s.has(H2_IF, "egress") {
            (H2_IF, "egress")
        } else {
            (H1_IF, "ingress")
        };
        Readings {
            s,
            h1: ip_str(&H1_IP),
            h2: ip_str(&H2_IP),
            ack_if,
            ack_dir,
            at_in: format!("{H2_IF} ingress"),
            at_out: format!("{H1_IF} egress"),
            at_ack: format!("{ack_if} {ack_dir}"),
            at_ack_in: format!("{H1_IF} ingress"),
        }
    }

    /// A per-QP field of the data direction (h1 -> h2) as h2 received it.
    fn data_in(&self, field: &str) -> Option<u64> {
        self.s.qp_sum(H2_IF, "ingress", &self.h1, &self.h2, field)
    }

    /// A per-QP field of the data direction (h1 -> h2) as h1 sent it.
    fn data_out(&self, field: &str) -> Option<u64> {
        self.s.qp_sum(H1_IF, "egress", &self.h1, &self.h2, field)
    }

    /// A per-QP field of the ACK direction (h2 -> h1).
    fn acks(&self, field: &str) -> Option<u64> {
        self.s
            .qp_sum(self.ack_if, self.ack_dir, &self.h2, &self.h1, field)
    }

    /// An interface counter of h2's ingress (PFC, PAUSE).
    fn h2_iface(&self, path: &[&str]) -> Option<u64> {
        self.s.iface(H2_IF, "ingress", path)
    }
}

fn row(what: &str, injected: u64, isrc: &str, observed: Option<u64>, osrc: &str) -> Row {
    Row {
        what: what.to_string(),
        injected,
        injected_src: isrc.to_string(),
        observed,
        observed_src: osrc.to_string(),
    }
}

/// Data packets: sent, dropped, resent, and the PSN analysis at the receiver.
fn traffic_rows(t: &Totals, o: &Readings) -> Vec<Row> {
    let sent_obs = o.data_out("data_pkts");
    let rcvd_obs = o.data_in("data_pkts");
    let resp_log = "responder arrivals";
    vec![
        row(
            "RoCE data packets sent",
            t.req(|r| r.data_sent),
            "requester log",
            sent_obs,
            &o.at_out,
        ),
        row(
            "data packets dropped in switch",
            t.0.nft.dropped,
            "nft counter loss",
            sent_obs.zip(rcvd_obs).map(|(a, b)| a.saturating_sub(b)),
            &format!("{} - {}", o.at_out, o.at_in),
        ),
        row(
            "resent (go-back-N, RNR, timeout)",
            t.req(|r| r.resent()),
            "requester log",
            o.data_out("psn_retrans"),
            &format!("{} psn_retrans", o.at_out),
        ),
        row(
            "PSN gaps at the receiver",
            t.resp(|r| r.stream.gaps),
            resp_log,
            o.data_in("psn_gaps"),
            &o.at_in,
        ),
        row(
            "PSNs missing at the receiver",
            t.resp(|r| r.stream.missing),
            resp_log,
            o.data_in("psn_missing"),
            &o.at_in,
        ),
        row(
            "retransmits at the receiver",
            t.resp(|r| r.stream.retrans),
            resp_log,
            o.data_in("psn_retrans"),
            &o.at_in,
        ),
    ]
}

/// The responder's replies (NAKs, RNR NAKs, CNPs) and the switch's markings (CE, DSCP).
fn reply_and_marking_rows(t: &Totals, o: &Readings) -> Vec<Row> {
    let nft = &t.0.nft;
    vec![
        row(
            "NAKs (PSN sequence error)",
            t.resp(|r| r.naks_sent),
            "responder log",
            o.acks("nak_psn_seq_err"),
            &o.at_ack,
        ),
        row(
            "RNR NAKs",
            t.resp(|r| r.rnr_naks_sent),
            "responder log",
            o.acks("rnr_naks"),
            &o.at_ack,
        ),
        row(
            "CE-marked data packets",
            nft.ce_marked,
            "nft counter ce",
            o.data_in("ce"),
            &o.at_in,
        ),
        row(
            "CNPs (<= 1 per QP per interval)",
            t.resp(|r| r.cnps_sent),
            "responder log",
            o.acks("cnp"),
            &o.at_ack,
        ),
        row(
            &format!("data not at DSCP {DATA_DSCP} (re-marked)"),
            nft.bleached + t.remarked(|a| matches!(a, Remark::Dscp(d) if d != DATA_DSCP)),
            "nft counters bleach, DSCP re-marking",
            o.s.data_dscp_not(H2_IF, "ingress", &o.h1, &o.h2, DATA_DSCP),
            &o.at_in,
        ),
    ]
}

/// The marking changes along the path ([`super::path_view`]): every change the switch made
/// (bleach, CE, per-QP re-marking) against those the path view finds from h1's egress to h2's
/// ingress, none on the way back; then each per-QP re-marking of the scenario with its QP's
/// changes to that value.
fn path_rows(
    args: &LabArgs,
    spec: &ScenarioSpec,
    cfg: &RcConfig,
    t: &Totals,
    o: &Readings,
    view: &PathView,
) -> Vec<Row> {
    let nft = &t.0.nft;
    let path = format!("path {} → {}", o.at_out, o.at_in);
    let back = format!("path {} → {}", o.at_ack, o.at_ack_in);
    let mut rows = vec![
        row(
            "marking changes h1 → h2 (path view)",
            nft.bleached + nft.ce_marked + nft.remarked.values().sum::<u64>(),
            "nft counters bleach, ce, re-marking",
            Some(view.changed(&o.h1, &o.h2) as u64),
            &path,
        ),
        row(
            "marking changes h2 → h1 (path view)",
            0,
            "no fault on the way back",
            Some(view.changed(&o.h2, &o.h1) as u64),
            &back,
        ),
    ];
    for r in spec.nft.remarks.iter().filter(|r| r.qp < args.qps as usize) {
        let qpn = cfg.qps[r.qp].resp_qpn;
        let (field, to) = r.action.field_value();
        let m = &cfg.marking;
        let from = match field {
            "DSCP" => i16::from(m.data_dscp),
            "ECN" => i16::from(m.data_ecn),
            _ => m.vlan.map_or(-1, |v| i16::from(v.data_pcp)),
        };
        let got = view.changed_to((&o.h1, &o.h2, qpn as u64), "data", field, to);
        let show = contract::marking::show_value;
        rows.push(row(
            &format!("QP {qpn:#08x} data {field} {} → {}", show(from), show(to)),
            t.0.nft.remarked.get(&r.counter).copied().unwrap_or(0),
            &format!("nft counter {}", r.counter),
            Some(got as u64),
            &path,
        ));
    }
    rows
}

/// PFC XOFF / XON on priorities 3 and 5 and 802.3x PAUSE frames, as h2 received them.
fn pause_rows(t: &Truth, o: &Readings) -> Vec<Row> {
    let from = "frames sent from sw-p2";
    let pfc_at = format!("{H2_IF} ingress");
    let mut rows = Vec::new();
    for p in [3usize, 5] {
        let prio = p.to_string();
        rows.push(row(
            &format!("PFC XOFF on priority {p}"),
            t.pfc.xoff[p],
            from,
            o.h2_iface(&["pfc", "xoff", &prio]),
            &pfc_at,
        ));
        rows.push(row(
            &format!("PFC XON on priority {p}"),
            t.pfc.xon[p],
            from,
            o.h2_iface(&["pfc", "xon", &prio]),
            &pfc_at,
        ));
    }
    rows.push(row(
        "802.3x PAUSE frames",
        t.pfc.pause,
        from,
        o.h2_iface(&["pause", "frames"]),
        &pfc_at,
    ));
    // A storm shorter than a second is whole in one one-second window, wherever the observer's
    // interval boundaries fall: its densest second is every XOFF sent (never two halves).
    let storm = t.pfc.rdma_storm;
    if t.pfc.xoff[3] > 0 && storm < Duration::from_millis(900) {
        rows.push(row(
            &format!(
                "densest second of PFC XOFF on priority 3 (a {} ms storm)",
                storm.as_millis()
            ),
            t.pfc.xoff[3],
            from,
            o.s.storm_peak(H2_IF, "ingress", 3),
            &format!("{pfc_at}, summary.json pfc_storm_figures"),
        ));
    }
    rows
}

fn check(what: &str, ok: bool, detail: String) -> SelfCheck {
    SelfCheck {
        what: what.into(),
        ok,
        detail,
    }
}

/// Every message completed and every data packet is accounted for between requester, switch
/// and responder.
fn delivery_checks(t: &Totals) -> Vec<SelfCheck> {
    let truth = t.0;
    let (sent, rcvd, dropped) = (
        t.req(|r| r.data_sent),
        t.resp(|r| r.data_rcvd),
        truth.nft.dropped,
    );
    vec![
        check(
            "every message completed",
            truth.req.iter().all(|r| r.completed),
            format!(
                "{} QPs, {} messages each",
                truth.req.len(),
                truth.req.first().map_or(0, |r| r.msgs)
            ),
        ),
        check(
            "responder got sent - dropped",
            rcvd + dropped == sent,
            format!("sent {sent}, dropped {dropped}, received {rcvd}"),
        ),
        check(
            "switch saw every data packet",
            truth.nft.seen == sent,
            format!("nft seen {}, sent {sent}", truth.nft.seen),
        ),
        check(
            "responder lost no frame",
            truth.resp.socket_drops == 0,
            format!("AF_PACKET drops {}", truth.resp.socket_drops),
        ),
    ]
}

/// The responder saw every marking the switch made, kept the CNP interval, the requester cut
/// its rate on every CNP, and every ICRC was valid.
fn marking_and_rate_checks(cfg: &RcConfig, t: &Totals) -> Vec<SelfCheck> {
    let truth = t.0;
    let ce_rcvd = t.resp(|r| r.ce_rcvd);
    let dscp_off = t.resp(|r| r.data_rcvd - r.dscp_rcvd[DATA_DSCP as usize]);
    let dscp_remarked =
        truth.nft.bleached + t.remarked(|a| matches!(a, Remark::Dscp(d) if d != DATA_DSCP));
    let spacing = truth
        .resp
        .qps
        .iter()
        .filter_map(|r| r.min_cnp_spacing)
        .min();
    let cnps = t.resp(|r| r.cnps_sent);
    let cnps_rcvd = t.req(|r| r.cnps_rcvd);
    let icrc_bad = t.resp(|r| r.icrc_bad);
    vec![
        check(
            "responder saw every CE mark",
            ce_rcvd == truth.nft.ce_marked,
            format!("CE received {ce_rcvd}, nft ce {}", truth.nft.ce_marked),
        ),
        check(
            "responder saw every re-marking",
            dscp_off == dscp_remarked,
            format!(
                "data not at DSCP {DATA_DSCP}: {dscp_off}, nft bleach and DSCP re-marking {dscp_remarked}"
            ),
        ),
        check(
            "CNP interval respected per QP",
            spacing.is_none_or(|d| d >= cfg.cnp_interval),
            format!(
                "interval {:?}, smallest spacing {:?}",
                cfg.cnp_interval, spacing
            ),
        ),
        check(
            "requester cut its rate on every CNP",
            cnps_rcvd == cnps && t.req(|r| r.rate_cuts) == cnps,
            format!("CNPs sent {cnps}, received {cnps_rcvd}"),
        ),
        check(
            "every ICRC valid at the responder",
            icrc_bad == 0,
            format!("bad {icrc_bad}"),
        ),
    ]
}

/// The responder saw the priority and ECN re-marking the switch counted: data packets off the
/// priority they were sent at, and Not-ECT data (the NICs send ECT).
fn remark_checks(spec: &ScenarioSpec, cfg: &RcConfig, t: &Totals) -> Vec<SelfCheck> {
    let mut out = Vec::new();
    let pcp = t.remarked(|a| matches!(a, Remark::Pcp { .. }));
    if pcp > 0
        || spec
            .nft
            .remarks
            .iter()
            .any(|r| matches!(r.action, Remark::Pcp { .. }))
    {
        let sent = cfg.marking.vlan.map_or(8, |v| v.data_pcp as usize & 7);
        let off: u64 =
            t.resp(|r| r.data_rcvd) - t.0.resp.qps.iter().map(|r| r.pcp_rcvd[sent]).sum::<u64>();
        out.push(check(
            "responder saw every priority change",
            off == pcp,
            format!("data off priority {sent}: {off}, nft priority re-marking {pcp}"),
        ));
    }
    let not_ect = t.remarked(|a| a == Remark::NotEct);
    if not_ect > 0 || spec.nft.remarks.iter().any(|r| r.action == Remark::NotEct) {
        let got = t.resp(|r| r.ecn_rcvd[0]);
        out.push(check(
            "responder saw every ECN bleach",
            cfg.marking.data_ecn != 0 && got == not_ect,
            format!("Not-ECT data received {got}, nft ECN bleach {not_ect}"),
        ));
    }
    if !spec.nft.remarks.is_empty() {
        out.push(check(
            "re-marking scenario re-marked something",
            t.0.nft.remarked.values().sum::<u64>() > 0,
            format!("{:?}", t.0.nft.remarked),
        ));
    }
    out
}

/// The scenario's fault did something, the fallback capture lost nothing, and roce-observe
/// wrote flow logs.
fn scenario_checks(
    args: &LabArgs,
    spec: &ScenarioSpec,
    t: &Totals,
    o: &observe::Observed,
) -> Vec<SelfCheck> {
    let nft = &t.0.nft;
    let mut checks = Vec::new();
    if spec.nft.loss_pct > 0 {
        checks.push(check(
            "loss scenario dropped something",
            nft.dropped > 0,
            format!("{} dropped", nft.dropped),
        ));
    }
    if spec.nft.ce_pct > 0 {
        let cnps = t.resp(|r| r.cnps_sent);
        checks.push(check(
            "congestion scenario marked CE",
            nft.ce_marked > 0 && cnps > 0,
            format!("{} CE, {cnps} CNPs", nft.ce_marked),
        ));
    }
    if spec.rnr_qp.is_some() {
        checks.push(check(
            "RNR scenario sent RNR NAKs",
            t.resp(|r| r.rnr_naks_sent) > 0,
            String::new(),
        ));
    }
    if args.observer == ObserverMode::Userspace {
        checks.push(check(
            "fallback capture lost no frame",
            o.capture_drops == 0,
            format!("AF_PACKET drops {}", o.capture_drops),
        ));
    }
    checks.push(check(
        "roce-observe wrote Parquet flow logs",
        o.flow_rows > 0,
        format!(
            "{} Parquet files, {} flow rows",
            o.parquet_files, o.flow_rows
        ),
    ));
    checks
}

/// Each rule that must fire, then each that must stay silent, with its count (none when no
/// alert counts were read).
fn alert_checks(spec: &ScenarioSpec, o: &observe::Observed) -> Vec<AlertCheck> {
    let Some(a) = &o.alerts else {
        return Vec::new();
    };
    let expect = |rule: &&str, must_fire| AlertCheck {
        rule: rule.to_string(),
        must_fire,
        count: Some(*a.get(*rule).unwrap_or(&0)),
    };
    let fire = spec.must_fire.iter().map(|r| expect(r, true));
    let silent = spec.must_not_fire.iter().map(|r| expect(r, false));
    fire.chain(silent).collect()
}

/// What the requester, the responder and roce-observe did, beyond the compared quantities.
fn info_lines(t: &Totals, o: &observe::Observed) -> Vec<(String, String)> {
    let truth = t.0;
    let lowest_rate = truth
        .req
        .iter()
        .map(|r| r.min_rate_pps)
        .fold(f64::INFINITY, f64::min);
    vec![
        (
            "requester".to_string(),
            format!(
                "{} QPs, {} packets planned, {} NAKs and {} RNR NAKs received, {} timeouts, {} rate cuts, lowest rate {:.0} pps",
                truth.req.len(),
                t.req(|r| r.pkts_planned),
                t.req(|r| r.naks_rcvd),
                t.req(|r| r.rnr_naks_rcvd),
                t.req(|r| r.timeouts),
                t.req(|r| r.rate_cuts),
                lowest_rate
            ),
        ),
        (
            "responder".to_string(),
            format!(
                "{} accepted, {} out of order dropped, {} duplicates, {} ACKs, {} CE received, {} CNPs suppressed by the interval",
                t.resp(|r| r.accepted),
                t.resp(|r| r.out_of_order_dropped),
                t.resp(|r| r.duplicates),
                t.resp(|r| r.acks_sent),
                t.resp(|r| r.ce_rcvd),
                t.resp(|r| r.cnps_suppressed)
            ),
        ),
        (
            "roce-observe output".into(),
            format!(
                "{} Parquet files ({} flow rows), {} alert lines",
                o.parquet_files, o.flow_rows, o.alert_lines
            ),
        ),
    ]
}
