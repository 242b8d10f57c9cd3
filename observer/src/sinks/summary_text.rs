//! The end-of-run summary as readable text tables, rendered from the summary JSON (so the table
//! and `--json` cannot disagree).

use std::fmt::Write;

use serde_json::Value;

/// QP rows shown; the rest are summarised in one line (all are in `--json`).
const MAX_QP_ROWS: usize = 50;

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

pub fn render(s: &Value, link_speed: Option<u64>) -> String {
    let mut o = String::new();
    let empty = Vec::new();
    let ifaces = s
        .get("interfaces")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let qps = s.get("qps").and_then(Value::as_array).unwrap_or(&empty);

    let _ = writeln!(o, "== Interfaces");
    let _ = writeln!(
        o,
        "{:<24} {:<7} {:>10} {:>14} {:>10} {:>10}  exclusions / encapsulation",
        "iface", "dir", "frames", "bytes", "roce", "not_roce"
    );
    for i in ifaces {
        let mut notes = Vec::new();
        if let Some(Value::Object(ex)) = i.get("excluded") {
            for (k, n) in ex {
                if n.as_u64().unwrap_or(0) > 0 {
                    notes.push(format!("{k}={n}"));
                }
            }
        }
        if let Some(Value::Object(en)) = i.get("encap") {
            for (k, n) in en {
                if n.as_u64().unwrap_or(0) > 0 {
                    notes.push(format!("{k}={n}"));
                }
            }
        }
        for k in ["roce_untracked", "qp_insert_failed", "mac_insert_failed"] {
            if u(i, k) > 0 {
                notes.push(format!("{k}={}", u(i, k)));
            }
        }
        let _ = writeln!(
            o,
            "{:<24} {:<7} {:>10} {:>14} {:>10} {:>10}  {}",
            i["iface"].as_str().unwrap_or("?"),
            i["dir"].as_str().unwrap_or("?"),
            u(i, "frames"),
            u(i, "bytes"),
            u(i, "roce"),
            u(i, "not_roce"),
            if notes.is_empty() {
                "-".into()
            } else {
                notes.join(" ")
            }
        );
    }

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
    if !any {
        let _ = writeln!(o, "none");
    }

    let _ = writeln!(o, "\n== QPs ({})", qps.len());
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
    let mut sorted: Vec<&Value> = qps.iter().collect();
    sorted.sort_by_key(|q| std::cmp::Reverse(u(q, "pkts")));
    for q in sorted.iter().take(MAX_QP_ROWS) {
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
            format!("{:#x}", u(q, "qp")),
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
    if sorted.len() > MAX_QP_ROWS {
        let _ = writeln!(
            o,
            "... {} more QPs (all of them with --json)",
            sorted.len() - MAX_QP_ROWS
        );
    }

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
        for (iface, f) in st {
            if let Some(Value::Object(dirs)) = f.get("max_xoff_per_s") {
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
    if let Some(r) = s.get("replay") {
        let _ = writeln!(
            o,
            "\nreplayed {} frames in {:.2} s",
            u(r, "frames"),
            r.get("seconds").and_then(Value::as_f64).unwrap_or(0.0)
        );
        if let Some(out) = r.get("out").and_then(Value::as_str) {
            let _ = writeln!(o, "flow logs, alerts and summary.json in {out}");
        }
        if let Some(Value::Array(e)) = r.get("errors") {
            for x in e {
                let _ = writeln!(o, "ERROR: {}", x.as_str().unwrap_or("?"));
            }
        }
    }
    o
}
