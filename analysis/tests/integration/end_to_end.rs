//! Flow logs written by the real collector (driven by the userspace datapath over the replay
//! corpus's generated frames) read back by roce-analyze: its figures must equal the collector's
//! own summary, and the baseline comparison must flag a lossy run against a clean one.

use analysis::report::{Report, Verdict, analyze, compare};
use contract::policy::PolicyConfig;

/// The report of one tree under the nvidia profile.
fn report_of(dir: &std::path::Path) -> Result<Report, analysis::engine::EngineError> {
    analyze(
        &[dir.to_path_buf()],
        &PolicyConfig::profile("nvidia").unwrap(),
    )
}
use crate::support::{tmp, write_logs};

fn sum(summary: &serde_json::Value, field: &str) -> i64 {
    summary["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q[field].as_i64().unwrap())
        .sum()
}

#[test]
fn figures_equal_the_collectors_summary() {
    let (_d, dir) = tmp("analyze-e2e");
    let names = [
        "clean",
        "go_back_n",
        "ecn_ce_cnp",
        "bleached",
        "pfc",
        "pause_8023x",
    ];
    let summary = write_logs(&dir, &names);
    let r = report_of(&dir).unwrap();
    let f = &r.figures;
    assert_eq!(f.qps as usize, summary["qps"].as_array().unwrap().len());
    assert_eq!(f.data_pkts, sum(&summary, "data_pkts"));
    assert_eq!(f.cnp_pkts, sum(&summary, "cnp"));
    assert_eq!(f.ce, sum(&summary, "ce"));
    assert_eq!(f.psn_gaps, sum(&summary, "psn_gaps"));
    assert_eq!(f.psn_missing, sum(&summary, "psn_missing"));
    assert_eq!(f.psn_retrans, sum(&summary, "psn_retrans"));
    assert_eq!(f.naks, sum(&summary, "naks"));
    assert!(f.psn_gaps > 0 && f.ce > 0 && f.cnp_pkts > 0, "{f:?}");
    let iface_sum = |k: &str, i: usize| -> i64 {
        summary["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["pfc"][k][i].as_i64().unwrap())
            .sum()
    };
    for p in 0..8 {
        assert_eq!(f.pfc_xoff[p], iface_sum("xoff", p), "priority {p}");
    }
    let pause: i64 = summary["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["pause"]["frames"].as_i64().unwrap())
        .sum();
    assert_eq!(f.pause_frames, pause);
    assert!(f.pause_frames > 0);
    let c = &r.checks;
    let verdict = |n: &str| c.iter().find(|x| x.name == n).unwrap().verdict;
    assert_eq!(verdict("no go-back-N"), Verdict::Fail);
    assert_eq!(verdict("no 802.3x PAUSE"), Verdict::Fail);
    assert_eq!(
        verdict("data marking"),
        Verdict::Fail,
        "the bleached case has DSCP 0 data"
    );
}

#[test]
fn baseline_flags_a_lossy_run_and_not_a_clean_one() {
    let (_b, base_dir) = tmp("analyze-base");
    let (_r, run_dir) = tmp("analyze-run");
    write_logs(&base_dir, &["clean"]);
    write_logs(&run_dir, &["clean", "go_back_n"]);
    let base_r = report_of(&base_dir).unwrap();
    let base = base_r.figures.clone();
    let same = report_of(&base_dir).unwrap().figures;
    assert!(compare(&base, &same, 0.1, 0.0).is_empty());
    assert!(
        base_r.checks.iter().all(|c| c.verdict != Verdict::Fail),
        "{:?}",
        base_r.checks
    );
    let now = report_of(&run_dir).unwrap().figures;
    let r = compare(&base, &now, 0.1, 0.0);
    let names: Vec<_> = r.iter().map(|x| x.figure).collect();
    assert!(
        names.contains(&"PSN gaps per M") && names.contains(&"retransmits per M"),
        "{names:?}"
    );
    // A missing directory is a clear error, not a panic.
    let err = report_of(&run_dir.join("nope")).err().unwrap().to_string();
    assert!(err.contains("nope does not exist"), "{err}");
}

#[test]
fn command_line_exit_codes_and_json() {
    let (_b, base) = tmp("analyze-cli-base");
    let (_r, run) = tmp("analyze-cli-run");
    write_logs(&base, &["clean"]);
    write_logs(&run, &["clean", "go_back_n"]);
    let bin = env!("CARGO_BIN_EXE_roce-analyze");
    let out = std::process::Command::new(bin)
        .args(["report", "--json"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a failing check exits 1");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["figures"]["psn_gaps"].as_i64().unwrap() >= 1);
    let ok = std::process::Command::new(bin)
        .arg("report")
        .arg(&base)
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let bl = base.join("baseline.json");
    let st = std::process::Command::new(bin)
        .args(["baseline", "-o"])
        .arg(&bl)
        .arg(&base)
        .status()
        .unwrap();
    assert!(st.success());
    let cmp = std::process::Command::new(bin)
        .arg("compare")
        .arg(&bl)
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(cmp.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&cmp.stdout).contains("WORSE PSN gaps per M"));
    let missing = std::process::Command::new(bin)
        .arg("report")
        .arg(run.join("missing"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
}
