//! The refreshing terminal view (stdout is a terminal): busiest QPs of the last interval, recent
//! alerts, interface PFC. Plain ANSI escapes, no dependency.

use std::collections::{BTreeMap, VecDeque};

use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};

use super::parquet_files::rfc3339;
use crate::pipeline::IntervalStats;
use crate::pipeline::alerts::{Alert, Severity};
use crate::sinks::summary_json::ip_of;

/// One QP line of the view.
#[derive(Clone, Debug)]
pub struct TopRow {
    pub iface: String,
    pub key: QpKey,
    pub pkts: u64,
    pub bytes: u64,
    pub ce: u64,
    pub cnp: u64,
    pub gaps: u64,
    pub retrans: u64,
    pub dscp: Option<u8>,
}

impl TopRow {
    pub fn new(iface: &str, k: &QpKey, d: &QpValue) -> TopRow {
        let h = &d.dscp_hist[class::DATA];
        let dscp = h
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(_, n)| **n)
            .map(|(i, _)| i as u8);
        TopRow {
            iface: iface.into(),
            key: *k,
            pkts: d.pkts,
            bytes: d.bytes_l2,
            ce: d.ce(),
            cnp: d.cnp(),
            gaps: d.psn_gaps,
            retrans: d.psn_retrans,
            dscp,
        }
    }
}

#[derive(Default)]
pub struct ViewState {
    top: BTreeMap<String, (IntervalStats, Vec<TopRow>)>,
    pfc: BTreeMap<String, String>,
    alerts: VecDeque<(Severity, String)>,
}

const TOP_N: usize = 15;

fn rate(bytes: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    let bps = bytes as f64 * 8.0 / secs;
    match bps {
        b if b >= 1e9 => format!("{:.2} Gb/s", b / 1e9),
        b if b >= 1e6 => format!("{:.2} Mb/s", b / 1e6),
        b => format!("{:.0} kb/s", b / 1e3),
    }
}

impl ViewState {
    pub fn push_alert(&mut self, a: &Alert) {
        if self.alerts.len() == 8 {
            self.alerts.pop_front();
        }
        self.alerts.push_back((
            a.severity,
            format!("{} {}", rfc3339(a.time_ns), a.message()),
        ));
    }

    pub fn update(
        &mut self,
        s: &IntervalStats,
        mut top: Vec<TopRow>,
        cum: &[IfaceStats; dir::COUNT],
        link: Option<u64>,
        max_xoff: [[f64; 8]; dir::COUNT],
    ) {
        if top.len() > TOP_N {
            top.select_nth_unstable_by(TOP_N, |a, b| b.bytes.cmp(&a.bytes));
            top.truncate(TOP_N);
        }
        top.sort_by_key(|r| std::cmp::Reverse(r.bytes));
        self.top.insert(s.iface.clone(), (s.clone(), top));
        let mut line = format!("{:<12}", s.iface);
        for (d, c) in cum.iter().enumerate() {
            if c.frames == 0 && d != 0 {
                continue;
            }
            let prios: Vec<String> = (0..8)
                .filter(|&p| c.pfc.enabled[p] > 0)
                .map(|p| {
                    let secs = link
                        .map(|b| format!(" {:.3}s", c.pfc.quanta[p] as f64 * 512.0 / b as f64))
                        .unwrap_or_default();
                    format!(
                        "p{p}: {} XOFF/{} XON{secs} max {:.0}/s",
                        c.pfc.xoff[p], c.pfc.xon[p], max_xoff[d][p]
                    )
                })
                .collect();
            line += &format!(
                " {} PFC {} [{}] PAUSE {}",
                dir::NAMES[d],
                c.pfc.pfc_frames,
                if prios.is_empty() {
                    "-".into()
                } else {
                    prios.join("; ")
                },
                c.pfc.pause
            );
        }
        self.pfc.insert(s.iface.clone(), line);
    }

    /// The whole screen, starting with clear-screen and cursor-home.
    pub fn render(&self, title: &str) -> String {
        let mut o = String::from("\x1b[2J\x1b[H");
        o += &format!("\x1b[1m{title}\x1b[0m  (Ctrl-C to stop)\n\n");
        for (iface, (s, rows)) in &self.top {
            let secs = s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9;
            o += &format!(
                "\x1b[1m{iface}\x1b[0m  {}  tracked {}  active {}  new {}  evicted {}\n",
                rfc3339(s.end_ns),
                s.tracked_qps,
                s.active_qps,
                s.new_qps,
                s.evictions
            );
            let w = rows
                .iter()
                .map(|r| {
                    ip_of(&r.key.src_ip)
                        .to_string()
                        .len()
                        .max(ip_of(&r.key.dst_ip).to_string().len())
                })
                .max()
                .unwrap_or(0)
                .max(3);
            o += &format!(
                "  {:<7} {:<w$} {:<w$} {:>8} {:>10} {:>12} {:>4} {:>6} {:>6} {:>5} {:>7}\n",
                "dir", "src", "dst", "qp", "pkts", "rate", "dscp", "ce", "cnp", "gaps", "retrans"
            );
            for r in rows {
                o += &format!(
                    "  {:<7} {:<w$} {:<w$} {:>8} {:>10} {:>12} {:>4} {:>6} {:>6} {:>5} {:>7}\n",
                    dir::NAMES[(r.key.dir as usize).min(1)],
                    ip_of(&r.key.src_ip).to_string(),
                    ip_of(&r.key.dst_ip).to_string(),
                    format!("0x{:06x}", r.key.dest_qp),
                    r.pkts,
                    rate(r.bytes, secs),
                    r.dscp.map(|d| d.to_string()).unwrap_or("-".into()),
                    r.ce,
                    r.cnp,
                    r.gaps,
                    r.retrans
                );
            }
            o += "\n";
        }
        o += "\x1b[1mPFC / PAUSE (cumulative)\x1b[0m\n";
        for l in self.pfc.values() {
            o += &format!("  {l}\n");
        }
        o += "\n\x1b[1mRecent alerts\x1b[0m\n";
        if self.alerts.is_empty() {
            o += "  none\n";
        }
        for (sev, a) in &self.alerts {
            let color = match sev {
                Severity::Critical => "\x1b[31m",
                Severity::Warning => "\x1b[33m",
                Severity::Info => "",
            };
            o += &format!("  {color}{a}\x1b[0m\n");
        }
        o
    }
}

impl super::Sink for ViewState {
    fn name(&self) -> &'static str {
        "terminal view"
    }
    fn alert(&mut self, a: &Alert, _run: &super::RunInfo) {
        self.push_alert(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::alerts::AlertKey;

    #[test]
    fn renders_busiest_qps_pfc_and_alerts() {
        let mut v = ViewState::default();
        let mut rows = Vec::new();
        for q in 0..20u32 {
            let k = QpKey {
                dest_qp: q,
                ..Default::default()
            };
            let mut d = QpValue::ZERO;
            d.pkts = q as u64 + 1;
            d.bytes_l2 = (q as u64 + 1) * 1000;
            d.dscp_hist[class::DATA][26] = q + 1;
            rows.push(TopRow::new("eth0", &k, &d));
        }
        let s = IntervalStats {
            iface: "eth0".into(),
            start_ns: 0,
            end_ns: 1_000_000_000,
            tracked_qps: 20,
            active_qps: 20,
            ..Default::default()
        };
        let mut cum = [IfaceStats::default(); dir::COUNT];
        cum[0].frames = 10;
        cum[0].pfc.pfc_frames = 4;
        cum[0].pfc.enabled[3] = 4;
        cum[0].pfc.xoff[3] = 3;
        cum[0].pfc.xon[3] = 1;
        v.update(&s, rows, &cum, None, [[0.0; 8]; dir::COUNT]);
        let a = Alert::candidate(
            crate::pipeline::rules::Rule::PfcStorm,
            AlertKey {
                iface: "eth0".into(),
                priority: Some(3),
                ..Default::default()
            },
            1,
            "x".into(),
            "y".into(),
            1,
            "interval",
        );
        v.push_alert(&a);
        let out = v.render("t");
        assert!(out.starts_with("\x1b[2J\x1b[H"));
        // the 15 busiest, largest first: qp 19 first, qp 5 last, qp 4 not shown
        let first = out.find("0x000013").unwrap();
        let last = out.find("0x000005").unwrap();
        assert!(first < last);
        assert!(!out.contains("0x000004"));
        assert!(out.contains("p3: 3 XOFF/1 XON"), "{out}");
        assert!(out.contains("pfc_storm on eth0"), "{out}");
    }
}
