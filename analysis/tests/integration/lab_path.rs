//! `roce-analyze path` over the output trees of the lab's two observers (`roce-observe lab
//! --scenario dscp-remap --out DIR`, the fallback observer, in this process): the same changes
//! as the lab's own path view, at the same points, over the time both trees cover (the two
//! observers end their intervals on the same whole seconds, a few ms apart: rows that only one
//! of them covers whole are left out, so no more packets than the switch re-marked; the run
//! lasts several intervals, so there is time to compare). Needs root (network namespaces):
//! skipped outside CI, a failure under CI=true.

use lab::{LabArgs, ObserverMode};
use observer::testutil::require_root;
use serde_json::Value;

use crate::support::{heavy, tmp};

#[test]
fn roce_analyze_path_reads_the_lab_trees() {
    if !require_root("roce_analyze_path_reads_the_lab_trees") {
        return;
    }
    // The lab's timing (two observers, intervals on whole seconds) as when it ran alone.
    let _heavy = heavy();
    let (_dir, dir) = tmp("lab-path");
    let args = LabArgs {
        scenario: "dscp-remap".into(),
        observer: ObserverMode::Userspace,
        out: Some(dir.clone()),
        quiet_observer: true,
        // several intervals: the trees' common time leaves out only the rows at the ends
        rounds: 600,
        ..LabArgs::default()
    };
    let r = lab::run_scenario(&args, "dscp-remap", 70).expect("dscp-remap");
    assert!(r.ok(), "{}", r.disagreements().join("\n"));
    let injected = |what: &str| {
        r.rows
            .iter()
            .find(|x| x.what == what)
            .unwrap_or_else(|| panic!("no row {what}"))
            .injected as i64
    };
    let (h1, h2) = (dir.join("dscp-remap/h1"), dir.join("dscp-remap/h2"));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roce-analyze"))
        .args(["path", "--json"])
        .args([&h1, &h2])
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(
        o.status.code(),
        Some(1),
        "DSCP 26 -> 24 is against the profile"
    );
    assert_eq!(
        j["totals"]["keys"], 8,
        "4 data and 4 ACK keys, each at two points"
    );
    for k in j["keys"].as_array().unwrap() {
        let names: Vec<&str> = k["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["point"].as_str().unwrap())
            .collect();
        let changes: Vec<(String, String, i64, i64, bool)> = k["hops"][0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let s = |f: &str| c[f].as_str().unwrap().to_string();
                let to = c["to"].as_i64().unwrap();
                (
                    s("field"),
                    s("class"),
                    to,
                    c["pkts"].as_i64().unwrap(),
                    c["violates"] == true,
                )
            })
            .collect();
        if k["src"] == "10.77.0.2" {
            assert_eq!(names, ["lab-h2/h2-eth0/egress", "lab-h1/h1-eth0/ingress"]);
            assert!(
                changes.is_empty(),
                "nothing re-marked on the way back: {changes:?}"
            );
            continue;
        }
        assert_eq!(names, ["lab-h1/h1-eth0/egress", "lab-h2/h2-eth0/ingress"]);
        let qp = k["qp"].as_i64().unwrap();
        let mut want = Vec::new();
        if qp == 0x201 || qp == 0x203 {
            want.push(("DSCP", format!("QP {qp:#08x} data DSCP 26 → 24"), 24, true));
        }
        want.push(("PCP", format!("QP {qp:#08x} data PCP 0 → 3"), 3, false));
        assert_eq!(changes.len(), want.len(), "qp {qp:#x}: {changes:?}");
        for ((field, class, to, pkts, violates), (wf, row, wto, wv)) in changes.iter().zip(&want) {
            assert_eq!(
                (field.as_str(), class.as_str(), *to, *violates),
                (*wf, "data", *wto, *wv)
            );
            let n = injected(row);
            assert!(*pkts > 0 && *pkts <= n, "{row}: {pkts} of {n} re-marked");
        }
    }
}
