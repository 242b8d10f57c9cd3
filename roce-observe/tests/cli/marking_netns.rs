//! `marking_changed`, live: one roce-observe (real XDP + tc egress) observes two interfaces of
//! one namespace, `h-a` (what it sends: tc egress) and `h-b` (what comes back: XDP ingress),
//! joined through a bridge "switch" in a second namespace whose nftables rules re-mark chosen
//! packets on the way: DSCP 26 -> 0 on one QP, ECN to Not-ECT on another, CE on a third (a
//! change the policy allows). The alerts must name the QP, the class, the field and the two
//! points, and their counts (first alert plus hold-down summaries) must equal the switch's
//! counters exactly, although the traffic crosses several interval edges. Also: the point label
//! in the alerts table and summary.json. Only addresses inside the namespaces; both are deleted
//! on every path (guards), the observer killed if the test fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use netns::{Netns, send_raw};
use observer::pipeline::rule;
use observer::sources::synthetic::Roce;
use serde_json::Value;
use test_support::require_root;

use test_support::TempDir;
use test_support::collector::{NsProcess, alerts_jsonl, pyarrow_read};

const SRC: [u8; 4] = [10, 77, 9, 1];
const DST: [u8; 4] = [10, 77, 9, 2];
/// UDP source ports the switch re-marks: DSCP 0, ECN Not-ECT, ECN CE.
const SPORT_DSCP0: u16 = 50000;
const SPORT_NOT_ECT: u16 = 50001;
const SPORT_CE: u16 = 50002;

/// The host namespace (two interfaces into the switch) and the switch (a bridge with nftables
/// counters that re-mark), deleted when dropped.
struct Fabric {
    h: Netns,
    sw: Netns,
}

fn fabric() -> Fabric {
    let pid = std::process::id();
    let h = Netns::new(&format!("ro-mk-h-{pid}")).unwrap();
    let sw = Netns::new(&format!("ro-mk-sw-{pid}")).unwrap();
    let f = Fabric { h, sw };
    for ns in [&f.h, &f.sw] {
        ns.exec("sysctl", &["-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])
            .unwrap();
        ns.exec(
            "sysctl",
            &["-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"],
        )
        .unwrap();
    }
    let sw_name = f.sw.name.clone();
    for (dev, port) in [("h-a", "sw-a"), ("h-b", "sw-b")] {
        f.h.exec(
            "ip",
            &[
                "link", "add", dev, "type", "veth", "peer", "name", port, "netns", &sw_name,
            ],
        )
        .unwrap();
    }
    f.sw.exec(
        "ip",
        &["link", "add", "br0", "type", "bridge", "stp_state", "0"],
    )
    .unwrap();
    for p in ["sw-a", "sw-b"] {
        f.sw.exec("ip", &["link", "set", p, "master", "br0", "up"])
            .unwrap();
    }
    f.sw.exec("ip", &["link", "set", "br0", "up"]).unwrap();
    for d in ["h-a", "h-b"] {
        f.h.exec("ip", &["link", "set", d, "up"]).unwrap();
    }
    let rules = format!(
        "table bridge mk {{\n  counter dscp0 {{}}\n  counter notect {{}}\n  counter ce {{}}\n  chain remark {{\n    type filter hook forward priority 0; policy accept;\n    iifname \"sw-a\" udp dport 4791 udp sport {SPORT_DSCP0} ip dscp set 0 counter name \"dscp0\"\n    iifname \"sw-a\" udp dport 4791 udp sport {SPORT_NOT_ECT} ip ecn set not-ect counter name \"notect\"\n    iifname \"sw-a\" udp dport 4791 udp sport {SPORT_CE} ip ecn set ce counter name \"ce\"\n  }}\n}}\n"
    );
    let path = std::env::temp_dir().join(format!("ro-mk-{pid}.nft"));
    std::fs::write(&path, rules).unwrap();
    let r = f.sw.exec("nft", &["-f", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
    r.unwrap();
    for p in ["sw-a", "sw-b"] {
        let t = Instant::now();
        while f
            .sw
            .exec("cat", &[&format!("/sys/class/net/{p}/operstate")])
            .unwrap()
            .trim()
            != "up"
        {
            assert!(t.elapsed() < Duration::from_secs(5), "{p} not up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    f
}

/// The switch's counters: packets re-marked by each rule.
fn counters(sw: &Netns) -> BTreeMap<String, u64> {
    let out = sw
        .exec("nft", &["-j", "list", "counters", "table", "bridge", "mk"])
        .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i.get("counter"))
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["packets"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// roce-observe on both interfaces ([`NsProcess`]), once attached to both.
fn start_observer(ns: &Netns, out: &Path) -> NsProcess {
    let mut args: Vec<std::ffi::OsString> = [
        "--iface",
        "h-a",
        "--iface",
        "h-b",
        "--plain",
        "--no-nic",
        "--interval",
        "500ms",
        "--profile",
        "nvidia",
        "--host",
        "mk",
        "--point-label",
        "loop 1",
        "--out",
    ]
    .iter()
    .map(|a| a.into())
    .collect();
    args.push(out.into());
    NsProcess::roce_observe(env!("CARGO_BIN_EXE_roce-observe"), ns, &args, 2)
}

/// SIGINT, and a clean exit.
fn stop_observer(obs: &mut NsProcess) {
    let s = obs.signal(libc::SIGINT);
    assert!(s.success(), "exit {s:?}:\n{}", obs.err());
}

/// Burst `b` of 20 frames: 5 each of QPs 0x31 (every other one to be re-marked DSCP 0), 0x32
/// (every other one to lose ECT), 0x33 (every other one CE-marked) and 0x34 (untouched).
fn burst(b: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..5u32 {
        let psn = b * 5 + i;
        let odd = psn % 2 == 1;
        for (qp, sport) in [
            (0x31, SPORT_DSCP0),
            (0x32, SPORT_NOT_ECT),
            (0x33, SPORT_CE),
            (0x34, 49152),
        ] {
            let mut r = Roce::data(SRC, DST, qp, psn);
            if odd {
                r.sport = sport;
            }
            out.push(r.frame());
        }
    }
    out
}

/// (qp, class, field) -> (packets over every alert, alerts) of `marking_changed`.
fn marking_totals(al: &[Value]) -> BTreeMap<(u64, String, String), (u64, u64)> {
    let mut m = BTreeMap::new();
    for a in al.iter().filter(|a| a["rule"] == rule::MARKING_CHANGED) {
        let k = (
            a["qp"].as_u64().unwrap(),
            a["class"].as_str().unwrap().to_string(),
            a["subject"].as_str().unwrap().to_string(),
        );
        let e: &mut (u64, u64) = m.entry(k).or_default();
        e.0 += a["count"].as_u64().unwrap();
        e.1 += 1;
    }
    m
}

#[test]
fn one_observer_on_two_interfaces_raises_marking_changed_with_exact_counts() {
    if !require_root("one_observer_on_two_interfaces_raises_marking_changed_with_exact_counts") {
        return;
    }
    let f = fabric();
    let tmp = TempDir::new("marking");
    let out = tmp.join("run");
    let mut obs = start_observer(&f.h, &out);
    // 60 bursts, one every 50 ms: 3 s of traffic across several 500 ms interval edges
    let t0 = Instant::now();
    for b in 0..60u32 {
        send_raw(&f.h, "h-a", &burst(b)).unwrap();
        let due = t0 + Duration::from_millis(50) * (b + 1);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    std::thread::sleep(Duration::from_millis(1200));
    stop_observer(&mut obs);
    let c = counters(&f.sw);
    assert_eq!(
        (c["dscp0"], c["notect"], c["ce"]),
        (150, 150, 150),
        "the switch re-marked every other packet of each QP"
    );

    let al = alerts_jsonl(&out);
    let lines: Vec<String> = al.iter().map(|a| a["message"].to_string()).collect();
    let t = marking_totals(&al);
    eprintln!("switch counters {c:?}; marking_changed (packets, alerts) {t:?}");
    let key = |qp: u64, field: &str| (qp, "data".to_string(), field.to_string());
    assert_eq!(
        t.iter().map(|(k, v)| (k.clone(), v.0)).collect::<Vec<_>>(),
        vec![
            (key(0x31, "dscp"), c["dscp0"]),
            (key(0x32, "ecn"), c["notect"])
        ],
        "marking_changed: exactly the packets re-marked against the policy (CE is allowed):\n{}\n{}",
        lines.join("\n"),
        obs.err()
    );
    let first = al
        .iter()
        .find(|a| a["rule"] == rule::MARKING_CHANGED && a["qp"] == 0x31 && a["summary"] == false)
        .expect("a first alert");
    let s = |k: &str| first[k].as_str().unwrap_or("-").to_string();
    assert_eq!(
        [
            s("iface"),
            s("dir"),
            s("to_iface"),
            s("to_dir"),
            s("severity"),
            s("expected"),
            s("point"),
            s("src"),
            s("dst"),
        ],
        [
            "h-a",
            "egress",
            "h-b",
            "ingress",
            "warning",
            "dscp 26",
            "loop 1",
            "10.77.9.1",
            "10.77.9.2"
        ]
    );
    assert!(
        s("observed").starts_with("dscp 26 → 0 x"),
        "{}",
        s("observed")
    );
    assert!(
        s("message").contains("h-a egress → h-b ingress"),
        "{}",
        s("message")
    );
    let notect = al
        .iter()
        .find(|a| a["rule"] == rule::MARKING_CHANGED && a["qp"] == 0x32)
        .unwrap();
    assert_eq!(notect["expected"], "ECT(0), ECT(1) or CE");

    // the alerts table has the same alerts, with both points and the label
    let tab = pyarrow_read(&out, "alerts", &[], true);
    let recs: Vec<&Value> = tab["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rule"] == rule::MARKING_CHANGED)
        .collect();
    let sum: u64 = recs.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(sum, c["dscp0"] + c["notect"]);
    assert!(
        recs.iter()
            .all(|r| r["to_iface"] == "h-b" && r["to_dir"] == "ingress" && r["point"] == "loop 1")
    );
    for table in ["flows", "interfaces"] {
        let t = pyarrow_read(&out, table, &[], true);
        assert!(
            t["records"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["point"] == "loop 1"),
            "{table}"
        );
    }

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["point"], "loop 1");
    let names: Vec<&str> = summary["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for n in ["mk/h-a/egress[loop 1]", "mk/h-b/ingress[loop 1]"] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert_eq!(
        summary["alert_occurrences"][rule::MARKING_CHANGED].as_u64(),
        Some(c["dscp0"] + c["notect"])
    );
    drop(obs);
    drop(f);
}
