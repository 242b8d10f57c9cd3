//! The end-of-run summary as readable text tables, rendered from the summary JSON (so the table
//! and `--json` cannot disagree).

use std::fmt::Write;

use serde_json::Value;

/// QP rows shown; the rest are summarised in one line (all are in `--json`).
pub const MAX_QP_ROWS: usize = 50;

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// "26:100 0:3" from a {value: count} map, largest first.
fn hist(v: Option<&Value>) -> String {
    let Some(Value::Object(m)) = v else {
        return "-".into();
    };
    let mut e: Vec<(&String, u64)> = m
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
        .collect();
    e.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if e.is_empty() {
        return "-".into();
    }
    e.iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Merges a per-class histogram ({data: {..}, ack: {..}, cnp: {..}}) for display.
fn merged(v: Option<&Value>) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(Value::Object(classes)) = v {
        for h in classes.values() {
            if let Value::Object(m) = h {
                for (k, n) in m {
                    let cur = out.get(k).and_then(Value::as_u64).unwrap_or(0);
                    out.insert(k.clone(), Value::from(cur + n.as_u64().unwrap_or(0)));
                }
            }
        }
    }
    Value::Object(out)
}

/// All the tables: interfaces, PFC / PAUSE, QPs, alerts, then the replay's own lines.
pub fn render(s: &Value, link_speed: Option<u64>) -> String {
    let empty = Vec::new();
    let qps = s.get("qps").and_then(Value::as_array).unwrap_or(&empty);
    let mut sorted: Vec<&Value> = qps.iter().collect();
    sorted.sort_by_key(|q| std::cmp::Reverse(u(q, "pkts")));
    sorted.truncate(MAX_QP_ROWS);
    let top: Vec<Value> = sorted.into_iter().cloned().collect();
    render_with_qps(s, &top, qps.len(), link_speed)
}

/// [`render`] with the QP rows given: `top`, the (up to [`MAX_QP_ROWS`]) QPs with the most
/// packets, most first, of `total` QPs (`s`'s "qps" is not read).
pub fn render_with_qps(s: &Value, top: &[Value], total: usize, link_speed: Option<u64>) -> String {
    let mut o = String::new();
    let empty = Vec::new();
    let ifaces = s
        .get("interfaces")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    interfaces_table(&mut o, ifaces);
    pfc_pause_section(&mut o, ifaces, link_speed);
    qp_table(&mut o, top, total);
    alerts_section(&mut o, s);
    if let Some(r) = s.get("replay") {
        replay_lines(&mut o, r);
    }
    o
}

/// `== Interfaces`: one row per interface and direction.
fn interfaces_table(o: &mut String, ifaces: &[Value]) {
    let _ = writeln!(o, "== Interfaces");
    let _ = writeln!(
        o,
        "{:<24} {:<7} {:>10} {:>14} {:>10} {:>10}  exclusions / encapsulation",
        "iface", "dir", "frames", "bytes", "roce", "not_roce"
    );
    for i in ifaces {
        let _ = writeln!(
            o,
            "{:<24} {:<7} {:>10} {:>14} {:>10} {:>10}  {}",
            i["iface"].as_str().unwrap_or("?"),
            i["dir"].as_str().unwrap_or("?"),
            u(i, "frames"),
            u(i, "bytes"),
            u(i, "roce"),
            u(i, "not_roce"),
            interface_notes(i)
        );
    }
}

/// The non-zero exclusions, encapsulations and insert failures of one interface ("-": none).
fn interface_notes(i: &Value) -> String {
    let mut notes = Vec::new();
    for group in ["excluded", "encap"] {
        if let Some(Value::Object(m)) = i.get(group) {
            for (k, n) in m {
                if n.as_u64().unwrap_or(0) > 0 {
                    notes.push(format!("{k}={n}"));
                }
            }
        }
    }
    for k in ["roce_untracked", "qp_insert_failed", "mac_insert_failed"] {
        if u(i, k) > 0 {
            notes.push(format!("{k}={}", u(i, k)));
        }
    }
    if notes.is_empty() {
        "-".into()
    } else {
        notes.join(" ")
    }
}

/// `== PFC / PAUSE`: the interfaces that saw MAC control frames, each with its priorities.
fn pfc_pause_section(o: &mut String, ifaces: &[Value], link_speed: Option<u64>) {
    let _ = writeln!(o, "\n== PFC / PAUSE");
    let mut any = false;
    for i in ifaces {
        let pfc = &i["pfc"];
        let pause = &i["pause"];
        if u(pfc, "frames") == 0 && u(pause, "frames") == 0 && u(i, "mac_control_other") == 0 {
            continue;
        }
        any = true;
        let _ = writeln!(
            o,
            "{} {}: PFC frames {}, 802.3x PAUSE frames {} (xon {}, quanta {}), other MAC control {}",
            i["iface"].as_str().unwrap_or("?"),
            i["dir"].as_str().unwrap_or("?"),
            u(pfc, "frames"),
            u(pause, "frames"),
            u(pause, "xon"),
            u(pause, "quanta"),
            u(i, "mac_control_other"),
        );
        pfc_priority_rows(o, pfc, link_speed);
    }
    if !any {
        let _ = writeln!(o, "none");
    }
}

/// The per-priority PFC table of one interface: the priorities with PFC enabled, and the time
/// paused when the link speed is known.
fn pfc_priority_rows(o: &mut String, pfc: &Value, link_speed: Option<u64>) {
    let arr = |k: &str| -> Vec<u64> {
        pfc.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
            .unwrap_or_else(|| vec![0; 8])
    };
    let (en, xoff, xon, q) = (arr("enabled"), arr("xoff"), arr("xon"), arr("quanta"));
    let _ = writeln!(
        o,
        "  {:>4} {:>10} {:>10} {:>10} {:>14} {:>14}",
        "prio", "enabled", "xoff", "xon", "quanta", "pause_s"
    );
    for p in 0..8 {
        if en.get(p).copied().unwrap_or(0) == 0 {
            continue;
        }
        let secs = match link_speed {
            Some(b) => format!("{:.6}", q[p] as f64 * 512.0 / b as f64),
            None => "(--link-speed)".into(),
        };
        let _ = writeln!(
            o,
            "  {:>4} {:>10} {:>10} {:>10} {:>14} {:>14}",
            p, en[p], xoff[p], xon[p], q[p], secs
        );
    }
}

/// `== QPs (n)`: the busiest QPs first, at most [`MAX_QP_ROWS`] rows.
fn qp_table(o: &mut String, top: &[Value], total: usize) {
    let _ = writeln!(o, "\n== QPs ({total})");
    let _ = writeln!(
        o,
        "{:<16} {:<15} {:<15} {:>8} {:>9} {:>12} {:>7} {:>6} {:>5} {:>5} {:>5} {:>4} {:>5} {:>7} {:>7} {:>6} {:>14}  dscp / ecn / pcp",
        "iface",
        "src",
        "dst",
        "qp",
        "pkts",
        "bytes_l2",
        "data",
        "ack",
        "cnp",
        "ce",
        "naks",
        "rnr",
        "gaps",
        "missing",
        "retrans",
        "mtu",
        "icrc ok/bad/u"
    );
    for q in top.iter().take(MAX_QP_ROWS) {
        qp_row(o, q);
    }
    if total > MAX_QP_ROWS {
        let _ = writeln!(
            o,
            "... {} more QPs (all of them with --json)",
            total - MAX_QP_ROWS
        );
    }
}

/// One QP's row; `(e)` after the interface marks egress.
fn qp_row(o: &mut String, q: &Value) {
    let _ = writeln!(
        o,
        "{:<16} {:<15} {:<15} {:>8} {:>9} {:>12} {:>7} {:>6} {:>5} {:>5} {:>5} {:>4} {:>5} {:>7} {:>7} {:>6} {:>14}  {} / {} / {}",
        format!(
            "{}{}",
            q["iface"].as_str().unwrap_or("?"),
            if q["dir"] == "egress" { "(e)" } else { "" }
        ),
        q["src"].as_str().unwrap_or("?"),
        q["dst"].as_str().unwrap_or("?"),
        format!("0x{:06x}", u(q, "qp")),
        u(q, "pkts"),
        u(q, "bytes_l2"),
        u(q, "data_pkts"),
        u(q, "ack_pkts"),
        u(q, "cnp"),
        u(q, "ce"),
        u(q, "naks"),
        u(q, "rnr_naks"),
        u(q, "psn_gaps"),
        u(q, "psn_missing"),
        u(q, "psn_retrans"),
        u(q, "max_udp_payload"),
        format!(
            "{}/{}/{}",
            u(q, "icrc_ok"),
            u(q, "icrc_bad"),
            u(q, "icrc_unverifiable")
        ),
        hist(Some(&merged(q.get("dscp")))),
        hist(Some(&merged(q.get("ecn")))),
        hist(Some(&merged(q.get("pcp")))),
    );
}

/// `== Alerts`: the count per rule (or why there are none), the PFC storm figures, the first
/// occurrences of per-QP events.
fn alerts_section(o: &mut String, s: &Value) {
    let _ = writeln!(o, "\n== Alerts");
    match s.get("alerts") {
        Some(Value::Object(a)) if !a.is_empty() => {
            for (k, n) in a {
                let _ = writeln!(o, "{k:<24} {n}");
            }
        }
        Some(Value::Object(_)) => {
            let _ = writeln!(o, "none");
        }
        _ => {
            let _ = writeln!(o, "(--no-out: alert rules not run)");
        }
    }
    if let Some(Value::Object(st)) = s.get("pfc_storm_figures") {
        storm_figure_lines(o, st);
    }
    if let Some(Value::Object(ev)) = s.get("first_events")
        && !ev.is_empty()
    {
        let _ = writeln!(
            o,
            "first occurrences per QP: {}",
            ev.iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}

/// The largest XOFF rate per priority, one line per interface and direction that had any.
fn storm_figure_lines(o: &mut String, st: &serde_json::Map<String, Value>) {
    for (iface, f) in st {
        let Some(Value::Object(dirs)) = f.get("max_xoff_per_s") else {
            continue;
        };
        for (d, arr) in dirs {
            let v: Vec<u64> = arr
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default();
            if v.iter().any(|&x| x > 0) {
                let _ = writeln!(
                    o,
                    "largest XOFF frames per second per priority, {iface} {d}: {v:?}"
                );
            }
        }
    }
}

/// The replay's frames and time, where its files went, and its errors.
fn replay_lines(o: &mut String, r: &Value) {
    let _ = writeln!(
        o,
        "\nreplayed {} frames in {:.2} s",
        u(r, "frames"),
        r.get("seconds").and_then(Value::as_f64).unwrap_or(0.0)
    );
    match (
        r.get("out").and_then(Value::as_str),
        r.get("output_error").and_then(Value::as_str),
    ) {
        (Some(out), Some(e)) => {
            let _ = writeln!(
                o,
                "the output under {out} is incomplete (the totals above are complete): {e}"
            );
        }
        (Some(out), None) => {
            let _ = writeln!(o, "flow logs, alerts and summary.json in {out}");
        }
        _ => {}
    }
    if let Some(e) = r.get("evidence") {
        let _ = writeln!(o, "{}", evidence_line(e));
    }
    if let Some(Value::Array(e)) = r.get("errors") {
        for x in e {
            let _ = writeln!(o, "ERROR: {}", x.as_str().unwrap_or("?"));
        }
    }
}

/// The line saying where the evidence capture is and what it left out (`evidence` of the
/// replay's summary or of the live command's summary.json).
pub fn evidence_line(e: &Value) -> String {
    let reasons = [
        ("over_per_key", "over the per-key limit"),
        ("over_total", "over the total"),
        ("over_subjects", "over the keys remembered"),
        ("over_rate", "over the kernel's sampling rate"),
        ("lost", "lost to a full sample ring"),
    ];
    let left: u64 = reasons.iter().map(|(k, _)| u(e, k)).sum();
    let why: Vec<String> = reasons
        .iter()
        .filter(|(k, _)| u(e, k) > 0)
        .map(|(k, what)| format!("{} {what}", u(e, k)))
        .collect();
    format!(
        "evidence: {} frames that broke a rule in {} (open it in Wireshark; each frame's comment names its rules){}",
        u(e, "frames"),
        e.get("file").and_then(Value::as_str).unwrap_or("?"),
        if left > 0 {
            format!("; {left} more not written ({})", why.join(", "))
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    /// An output that could not be finished is said where the output's place would be.
    #[test]
    fn an_unfinished_output_is_said_not_its_place() {
        let mut o = String::new();
        super::replay_lines(
            &mut o,
            &serde_json::json!({"frames": 3, "seconds": 0.5, "out": "/tmp/x",
                "output_error": "cannot write /tmp/x/summary.json: disk full", "errors": []}),
        );
        assert!(
            o.contains("the output under /tmp/x is incomplete (the totals above are complete): cannot write /tmp/x/summary.json: disk full"),
            "{o}"
        );
        assert!(!o.contains("flow logs, alerts and summary.json in"), "{o}");
    }

    use serde_json::{Value, json};

    use super::*;

    /// Two interfaces (one with exclusions, encapsulation and insert failures, PFC on two
    /// priorities and 802.3x PAUSE; one quiet), 53 QPs (3 past the row cap, one egress, one
    /// with nothing but a key), alerts, storm figures, first events and a replay with errors.
    fn summary() -> Value {
        let mut qps = vec![
            json!({
                "iface": "ens1f0np0", "dir": "ingress", "src": "10.0.0.1", "dst": "10.0.0.2",
                "qp": 0x12, "pkts": 900, "bytes_l2": 1_234_567, "data_pkts": 800, "ack_pkts": 90,
                "cnp": 10, "ce": 40, "naks": 2, "rnr_naks": 1, "psn_gaps": 3, "psn_missing": 7,
                "psn_retrans": 5, "max_udp_payload": 4096, "icrc_ok": 850, "icrc_bad": 1,
                "icrc_unverifiable": 49,
                "dscp": {"data": {"26": 800}, "ack": {"26": 90}, "cnp": {"48": 10}},
                "ecn": {"data": {"2": 760, "3": 40}, "ack": {"0": 90}, "cnp": {"1": 10}},
                "pcp": {"data": {"3": 800}, "ack": {"3": 90}, "cnp": {"untagged": 10}}
            }),
            json!({
                "iface": "ens1f0np0", "dir": "egress", "src": "10.0.0.2", "dst": "10.0.0.1",
                "qp": 0xabcdef, "pkts": 700, "bytes_l2": 70_000, "data_pkts": 0, "ack_pkts": 700,
                "max_udp_payload": 1024, "dscp": {"ack": {"0": 700}}, "ecn": {}, "pcp": {}
            }),
            json!({"iface": "lo", "qp": 1}),
        ];
        for i in 0..50u64 {
            qps.push(json!({
                "iface": "ens1f1np1", "dir": "ingress", "src": format!("192.168.1.{i}"),
                "dst": "192.168.1.200", "qp": 0x100 + i, "pkts": 10 + i % 7, "bytes_l2": 1000 * i,
                "data_pkts": 10 + i % 7, "dscp": {"data": {"26": 10 + i % 7}}
            }));
        }
        let mut pfc_en = vec![0u64; 8];
        pfc_en[3] = 1;
        pfc_en[6] = 1;
        json!({
            "interfaces": [
                {
                    "iface": "ens1f0np0", "dir": "ingress", "frames": 12345, "bytes": 9_876_543,
                    "roce": 12000, "not_roce": 345,
                    "excluded": {"ipv6": 3, "fragment": 0, "short": 1},
                    "encap": {"vlan": 20, "vxlan": 0},
                    "roce_untracked": 4, "qp_insert_failed": 0, "mac_insert_failed": 2,
                    "mac_control_other": 1,
                    "pfc": {
                        "frames": 30, "enabled": pfc_en,
                        "xoff": [0, 0, 0, 25, 0, 0, 3, 0], "xon": [0, 0, 0, 2, 0, 0, 0, 0],
                        "quanta": [0, 0, 0, 65535, 0, 0, 100, 0]
                    },
                    "pause": {"frames": 4, "xon": 1, "quanta": 2000}
                },
                {
                    "iface": "ens1f0np0", "dir": "egress", "frames": 10, "bytes": 640,
                    "roce": 10, "not_roce": 0, "excluded": {}, "encap": {},
                    "pfc": {"frames": 0}, "pause": {"frames": 0}
                },
                {
                    "iface": "ens1f1np1", "dir": "ingress", "frames": 5, "bytes": 500,
                    "roce": 0, "not_roce": 5, "pfc": {"frames": 2}
                },
                {}
            ],
            "qps": qps,
            "alerts": {"ce_without_cnp": 2, "pfc_storm": 1},
            "pfc_storm_figures": {
                "ens1f0np0": {"max_xoff_per_s": {
                    "egress": [0, 0, 0, 0, 0, 0, 0, 0],
                    "ingress": [0, 0, 0, 1500, 0, 0, 7, 0]
                }, "evictions": 0},
                "ens1f1np1": {"max_xoff_per_s": {"ingress": [0.0, 2.5, 0.0]}, "evictions": 0}
            },
            "first_events": {"psn_gap": 3, "rnr_nak": 1},
            "replay": {
                "frames": 12355, "seconds": 1.23456, "out": "/tmp/out",
                "errors": ["capture.pcap: truncated record at byte 4096", 7]
            }
        })
    }

    #[test]
    fn golden_summary_tables() {
        let s = summary();
        let got = format!(
            "{}=====\n{}",
            render(&s, Some(100_000_000_000)),
            render(&json!({"interfaces": s["interfaces"]}), None)
        );
        assert_eq!(got, GOLDEN_SUMMARY);
    }

    /// What is left when a summary lacks the optional parts (`--no-out`: no alert rules run).
    #[test]
    fn golden_summary_minimal() {
        let got = format!(
            "{}=====\n{}=====\n{}",
            render(&json!({}), None),
            render(
                &json!({"alerts": {}, "first_events": {}, "replay": {}}),
                None
            ),
            render(
                &json!({"interfaces": [], "qps": [], "alerts": 3, "replay": {"frames": 2, "seconds": 0.5, "errors": []}}),
                None
            )
        );
        assert_eq!(got, GOLDEN_MINIMAL);
    }

    const GOLDEN_SUMMARY: &str = r#"== Interfaces
iface                    dir         frames          bytes       roce   not_roce  exclusions / encapsulation
ens1f0np0                ingress      12345        9876543      12000        345  ipv6=3 short=1 vlan=20 roce_untracked=4 mac_insert_failed=2
ens1f0np0                egress          10            640         10          0  -
ens1f1np1                ingress          5            500          0          5  -
?                        ?                0              0          0          0  -

== PFC / PAUSE
ens1f0np0 ingress: PFC frames 30, 802.3x PAUSE frames 4 (xon 1, quanta 2000), other MAC control 1
  prio    enabled       xoff        xon         quanta        pause_s
     3          1         25          2          65535       0.000336
     6          1          3          0            100       0.000001
ens1f1np1 ingress: PFC frames 2, 802.3x PAUSE frames 0 (xon 0, quanta 0), other MAC control 0
  prio    enabled       xoff        xon         quanta        pause_s

== QPs (53)
iface            src             dst                   qp      pkts     bytes_l2    data    ack   cnp    ce  naks  rnr  gaps missing retrans    mtu  icrc ok/bad/u  dscp / ecn / pcp
ens1f0np0        10.0.0.1        10.0.0.2        0x000012       900      1234567     800     90    10    40     2    1     3       7       5   4096       850/1/49  26:890 48:10 / 2:760 0:90 3:40 1:10 / 3:890 untagged:10
ens1f0np0(e)     10.0.0.2        10.0.0.1        0xabcdef       700        70000       0    700     0     0     0    0     0       0       0   1024          0/0/0  0:700 / - / -
ens1f1np1        192.168.1.6     192.168.1.200   0x000106        16         6000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.13    192.168.1.200   0x00010d        16        13000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.20    192.168.1.200   0x000114        16        20000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.27    192.168.1.200   0x00011b        16        27000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.34    192.168.1.200   0x000122        16        34000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.41    192.168.1.200   0x000129        16        41000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.48    192.168.1.200   0x000130        16        48000      16      0     0     0     0    0     0       0       0      0          0/0/0  26:16 / - / -
ens1f1np1        192.168.1.5     192.168.1.200   0x000105        15         5000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.12    192.168.1.200   0x00010c        15        12000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.19    192.168.1.200   0x000113        15        19000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.26    192.168.1.200   0x00011a        15        26000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.33    192.168.1.200   0x000121        15        33000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.40    192.168.1.200   0x000128        15        40000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.47    192.168.1.200   0x00012f        15        47000      15      0     0     0     0    0     0       0       0      0          0/0/0  26:15 / - / -
ens1f1np1        192.168.1.4     192.168.1.200   0x000104        14         4000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.11    192.168.1.200   0x00010b        14        11000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.18    192.168.1.200   0x000112        14        18000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.25    192.168.1.200   0x000119        14        25000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.32    192.168.1.200   0x000120        14        32000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.39    192.168.1.200   0x000127        14        39000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.46    192.168.1.200   0x00012e        14        46000      14      0     0     0     0    0     0       0       0      0          0/0/0  26:14 / - / -
ens1f1np1        192.168.1.3     192.168.1.200   0x000103        13         3000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.10    192.168.1.200   0x00010a        13        10000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.17    192.168.1.200   0x000111        13        17000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.24    192.168.1.200   0x000118        13        24000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.31    192.168.1.200   0x00011f        13        31000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.38    192.168.1.200   0x000126        13        38000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.45    192.168.1.200   0x00012d        13        45000      13      0     0     0     0    0     0       0       0      0          0/0/0  26:13 / - / -
ens1f1np1        192.168.1.2     192.168.1.200   0x000102        12         2000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.9     192.168.1.200   0x000109        12         9000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.16    192.168.1.200   0x000110        12        16000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.23    192.168.1.200   0x000117        12        23000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.30    192.168.1.200   0x00011e        12        30000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.37    192.168.1.200   0x000125        12        37000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.44    192.168.1.200   0x00012c        12        44000      12      0     0     0     0    0     0       0       0      0          0/0/0  26:12 / - / -
ens1f1np1        192.168.1.1     192.168.1.200   0x000101        11         1000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.8     192.168.1.200   0x000108        11         8000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.15    192.168.1.200   0x00010f        11        15000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.22    192.168.1.200   0x000116        11        22000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.29    192.168.1.200   0x00011d        11        29000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.36    192.168.1.200   0x000124        11        36000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.43    192.168.1.200   0x00012b        11        43000      11      0     0     0     0    0     0       0       0      0          0/0/0  26:11 / - / -
ens1f1np1        192.168.1.0     192.168.1.200   0x000100        10            0      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
ens1f1np1        192.168.1.7     192.168.1.200   0x000107        10         7000      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
ens1f1np1        192.168.1.14    192.168.1.200   0x00010e        10        14000      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
ens1f1np1        192.168.1.21    192.168.1.200   0x000115        10        21000      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
ens1f1np1        192.168.1.28    192.168.1.200   0x00011c        10        28000      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
ens1f1np1        192.168.1.35    192.168.1.200   0x000123        10        35000      10      0     0     0     0    0     0       0       0      0          0/0/0  26:10 / - / -
... 3 more QPs (all of them with --json)

== Alerts
ce_without_cnp           2
pfc_storm                1
largest XOFF frames per second per priority, ens1f0np0 ingress: [0, 0, 0, 1500, 0, 0, 7, 0]
first occurrences per QP: psn_gap=3 rnr_nak=1

replayed 12355 frames in 1.23 s
flow logs, alerts and summary.json in /tmp/out
ERROR: capture.pcap: truncated record at byte 4096
ERROR: ?
=====
== Interfaces
iface                    dir         frames          bytes       roce   not_roce  exclusions / encapsulation
ens1f0np0                ingress      12345        9876543      12000        345  ipv6=3 short=1 vlan=20 roce_untracked=4 mac_insert_failed=2
ens1f0np0                egress          10            640         10          0  -
ens1f1np1                ingress          5            500          0          5  -
?                        ?                0              0          0          0  -

== PFC / PAUSE
ens1f0np0 ingress: PFC frames 30, 802.3x PAUSE frames 4 (xon 1, quanta 2000), other MAC control 1
  prio    enabled       xoff        xon         quanta        pause_s
     3          1         25          2          65535 (--link-speed)
     6          1          3          0            100 (--link-speed)
ens1f1np1 ingress: PFC frames 2, 802.3x PAUSE frames 0 (xon 0, quanta 0), other MAC control 0
  prio    enabled       xoff        xon         quanta        pause_s

== QPs (0)
iface            src             dst                   qp      pkts     bytes_l2    data    ack   cnp    ce  naks  rnr  gaps missing retrans    mtu  icrc ok/bad/u  dscp / ecn / pcp

== Alerts
(--no-out: alert rules not run)
"#;
    const GOLDEN_MINIMAL: &str = r#"== Interfaces
iface                    dir         frames          bytes       roce   not_roce  exclusions / encapsulation

== PFC / PAUSE
none

== QPs (0)
iface            src             dst                   qp      pkts     bytes_l2    data    ack   cnp    ce  naks  rnr  gaps missing retrans    mtu  icrc ok/bad/u  dscp / ecn / pcp

== Alerts
(--no-out: alert rules not run)
=====
== Interfaces
iface                    dir         frames          bytes       roce   not_roce  exclusions / encapsulation

== PFC / PAUSE
none

== QPs (0)
iface            src             dst                   qp      pkts     bytes_l2    data    ack   cnp    ce  naks  rnr  gaps missing retrans    mtu  icrc ok/bad/u  dscp / ecn / pcp

== Alerts
none

replayed 0 frames in 0.00 s
=====
== Interfaces
iface                    dir         frames          bytes       roce   not_roce  exclusions / encapsulation

== PFC / PAUSE
none

== QPs (0)
iface            src             dst                   qp      pkts     bytes_l2    data    ack   cnp    ce  naks  rnr  gaps missing retrans    mtu  icrc ok/bad/u  dscp / ecn / pcp

== Alerts
(--no-out: alert rules not run)

replayed 2 frames in 0.50 s
"#;
}
