//! `roce-observe nic`: the built binary on a veth pair in a network namespace (root), on a
//! missing interface, and its text layout.

use std::process::{Command, Output};

use netns::VethPair;
use serde_json::Value;
use test_support::require_root;

const BIN: &str = env!("CARGO_BIN_EXE_roce-observe");

fn run_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, BIN])
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("run ip netns exec")
}

fn source<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["sources"]
        .as_array()
        .expect("sources array")
        .iter()
        .find(|s| s["source"] == name)
        .unwrap_or_else(|| panic!("source {name} not reported: {j:#}"))
}

#[test]
fn nic_json_on_veth() {
    if !require_root("nic_json_on_veth") {
        return;
    }
    let v = VethPair::new("nic", "10.77.40.1", "10.77.40.2").expect("veth pair");
    let out = run_in(
        &v.a.name,
        &["nic", "--iface", &v.a_if, "--json", "--sample", "200ms"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let j: Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(j["interface"], "veth-a");
    assert!(j["window_s"].as_f64().unwrap() >= 0.2, "{}", j["window_s"]);

    let eth = source(&j, "ethtool_stats");
    assert_eq!(eth["status"], "answered", "{eth}");
    let n = j["counters"]["raw_counts"]["ethtool"].as_u64().unwrap();
    assert!(n >= 1, "veth reports counters (peer_ifindex, ...)");
    assert!(
        j["counters"]["gauges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "peer_ifindex"),
        "{:#}",
        j["counters"]
    );
    assert_eq!(j["netdev"]["drvinfo"]["driver"], "veth");

    let dcb = source(&j, "dcb");
    assert_eq!(dcb["status"], "unavailable", "DCB on veth: {dcb}");
    assert!(!dcb["detail"].as_str().unwrap().is_empty(), "{dcb}");
    assert!(dcb["reason"].is_string(), "{dcb}");
    let rdma = source(&j, "rdma_counters");
    assert_eq!(rdma["status"], "unavailable", "{rdma}");
    assert!(j["rdma"].is_null());
    for s in j["sources"].as_array().unwrap() {
        assert_ne!(s["status"], "failed", "{s}");
    }

    let checks = j["checks"].as_array().unwrap();
    assert!(checks.len() >= 10, "{checks:?}");
    for c in checks {
        let v = &c["verdict"];
        let ok = v == "pass" || v == "fail" || v["unknown"].is_string();
        assert!(ok, "check without a verdict: {c}");
        assert!(c["name"].as_str().unwrap().starts_with("config_"), "{c}");
    }
    let pfc = checks
        .iter()
        .find(|c| c["name"] == "config_pfc_priorities")
        .expect("PFC check");
    let why = pfc["verdict"]["unknown"].as_str().expect("PFC unknown");
    assert!(!why.is_empty());
    assert_eq!(j["summary"]["fail"], 0);
    // nothing failed, but unknown is not verified: never "pass" (it once was, with nothing
    // verified at all)
    assert_eq!(j["summary"]["result"], "incomplete");
    assert_eq!(
        j["config"]["pfc_enabled"]["unavailable"]["reason"],
        dcb["reason"]
    );
}

#[test]
fn nic_missing_interface_exits_2() {
    let out = Command::new(BIN)
        .args(["nic", "--iface", "ro-no-such-if0", "--sample", "10ms"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("ro-no-such-if0"), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(out.stdout.is_empty());
    // usage errors are 2 as well
    let out = Command::new(BIN)
        .args(["nic", "--iface", "lo", "--sample", "fast"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(BIN)
        .args(["nic", "--iface", "lo", "--policy", "/nonexistent/p.toml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/p.toml"));
}

/// The text report at the default width (80, stdout not a terminal), on loopback in the test's
/// own namespace: no root needed.
#[test]
fn nic_text_on_loopback() {
    let out = Command::new(BIN)
        .args(["nic", "--iface", "lo", "--sample", "50ms"])
        .env_remove("COLUMNS")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{stderr}");
    for name in [
        "config_pfc_priorities",
        "config_global_pause_off",
        "config_trust_mode",
        "config_data_dscp_priority",
        "config_cnp_dscp",
        "config_cnp_priority",
        "config_ecn_rp_enabled",
        "config_ecn_np_enabled",
        "config_default_roce_tos",
        "config_roce_v2_gid",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    for part in [
        "roce-observe nic: lo",
        "Configuration",
        "Checks",
        "Counters over",
        "Result: INCOMPLETE: 0 failed",
    ] {
        assert!(text.contains(part), "{part} missing:\n{text}");
    }
    assert!(text.contains("UNKNOWN"), "{text}");
    assert!(text.contains("not verified"), "{text}");
    // for automation: --strict fails on unknown
    let out = Command::new(BIN)
        .args(["nic", "--iface", "lo", "--sample", "50ms", "--strict"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--strict") && stderr.contains("unknown"),
        "{stderr}"
    );
    for line in text.lines() {
        let n = line.chars().count();
        // only a single word longer than the width may overflow
        assert!(
            n <= 80 || line.split_whitespace().count() <= 2,
            "line of {n} columns:\n{line}"
        );
    }
}

/// `--save FILE` keeps the two samples; `--from FILE` checks them on another machine (here: outside
/// the namespace, where the interface does not exist) with the same result, and under another
/// profile; a file that is not saved samples is a clear error naming it.
#[test]
fn nic_samples_saved_and_checked_elsewhere() {
    if !require_root("nic_samples_saved_and_checked_elsewhere") {
        return;
    }
    let tmp = test_support::TempDir::new("nic-save");
    let f = tmp.path().join("samples.json");
    let v = VethPair::new("nsv", "10.77.41.1", "10.77.41.2").expect("veth pair");
    let out = run_in(
        &v.a.name,
        &[
            "nic",
            "--iface",
            &v.a_if,
            "--json",
            "--sample",
            "200ms",
            "--save",
            f.to_str().unwrap(),
        ],
    );
    let live: Value = serde_json::from_slice(&out.stdout).expect("json");
    let from = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["nic", "--json", "--from"])
            .arg(&f)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, saved, err) = from(&[]);
    assert_eq!(code, out.status.code(), "{err}");
    for k in ["checks", "counters", "summary", "config", "netdev"] {
        assert_eq!(saved[k], live[k], "{k}");
    }
    assert_eq!(saved["netdev"]["drvinfo"]["driver"], "veth", "{saved:#}");
    // under another profile: the same samples, the broadcom expectations
    let (_, b, _) = from(&["--profile", "broadcom"]);
    assert_ne!(b["policy"], saved["policy"]);
    // not samples
    std::fs::write(&f, "{\"version\": 1}").unwrap();
    let (code, _, err) = from(&[]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("samples.json: not samples written by `roce-observe nic --save`"),
        "{err}"
    );
}

/// `--from DIR`: a customer's dump of two reads of `ethtool -i`, `ethtool -S` and `rdma
/// statistic` text (laid out as mlx5 prints them: en_stats.c / counters.c names) is checked like
/// a live host: the counters' deltas over the time between the reads, the configuration it does
/// not hold unknown; a line that is not the command's output is an error naming file and line.
#[test]
fn nic_a_customers_text_dump_is_checked() {
    let tmp = test_support::TempDir::new("nic-dump");
    let d = tmp.path();
    std::fs::write(d.join("iface"), "ens1f0np0\n").unwrap();
    let read = |n: &str, t: &str, pause: u64, disc: u64, oob: u64, cnp: u64| {
        let r = d.join(n);
        std::fs::create_dir_all(&r).unwrap();
        std::fs::write(r.join("time"), t).unwrap();
        std::fs::write(
            r.join("ethtool-i.txt"),
            "driver: mlx5_core\nversion: 6.1.0-18-amd64\nfirmware-version: 28.39.1002 (MT_0000000838)\nexpansion-rom-version: \nbus-info: 0000:3b:00.0\nsupports-statistics: yes\n",
        )
        .unwrap();
        std::fs::write(
            r.join("ethtool-S.txt"),
            format!(
                "NIC statistics:\n     rx_packets: 1000\n     rx_prio3_pause: {pause}\n     rx_prio3_discards: {disc}\n     tx_pause_storm_warning_events : 0\n"
            ),
        )
        .unwrap();
        std::fs::write(
            r.join("rdma-statistic.txt"),
            format!("link mlx5_0/1 out_of_buffer {oob} out_of_sequence 4 np_cnp_sent {cnp} roce_adp_retrans 0\n"),
        )
        .unwrap();
    };
    read("1", "1764400000.0\n", 40, 2, 1, 10);
    read("2", "1764400010.5\n", 100, 7, 3, 30);
    let run = || {
        let out = Command::new(BIN)
            .args(["nic", "--json", "--from"])
            .arg(d)
            .output()
            .unwrap();
        (
            out.status.code(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, j, err) = run();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j["interface"], "ens1f0np0");
    assert_eq!(j["window_s"].as_f64(), Some(10.5));
    let q = |name: &str| {
        j["counters"]["quantities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["quantity"] == name)
            .map(|x| x["delta"].as_u64().unwrap())
    };
    assert_eq!(q("pfc_rx_frames_p3"), Some(60), "{:#}", j["counters"]);
    assert_eq!(q("rx_discards_p3"), Some(5));
    assert_eq!(q("rdma_rx_out_of_buffer"), Some(2));
    assert_eq!(q("cnp_sent"), Some(20));
    assert_eq!(q("out_of_sequence"), Some(0));
    assert_eq!(source(&j, "dcb")["status"], "unavailable");
    assert!(
        source(&j, "dcb")["detail"]
            .as_str()
            .unwrap()
            .contains("not in the dump")
    );
    assert_eq!(source(&j, "ethtool_stats")["status"], "answered");
    assert_eq!(
        j["summary"]["result"], "incomplete",
        "the configuration is not in it"
    );
    // a line that is not `ethtool -S` output
    std::fs::write(
        d.join("2/ethtool-S.txt"),
        "NIC statistics:\n     rx_packets: 1000\n     rx_prio3_pause: lots\n",
    )
    .unwrap();
    let (code, _, err) = run();
    assert_ne!(code, Some(0));
    assert!(
        err.contains("2/ethtool-S.txt:3: not a count: \"lots\""),
        "{err}"
    );
}
