//! `roce-analyze hosts`, the fleet answer: four hosts' trees written by the real collector (a
//! NIC that drops on the RDMA priority (and finds no receive WQE), pauses another priority, has PFC configured on the
//! wrong priority and a QP in error; a clean NIC; a NIC whose driver maps none of the counters
//! checked; a replay tree with no NIC rows) give one table, the failing host first with each
//! fault named, then the two unknown ones saying why, then the clean one; the exit status says
//! whether a host failed (with --strict, also whether one is unknown). Trees without flow logs
//! are read.

use serde_json::Value;

use crate::support::{NicSpec, run, tmp, write_host_qps, write_logs, write_nic};

fn hosts(args: &[&std::path::Path], extra: &[&str]) -> (Option<i32>, String, String) {
    let mut a: Vec<&std::ffi::OsStr> = vec!["hosts".as_ref()];
    a.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    a.extend(args.iter().map(|p| p.as_os_str()));
    let o = run(&a);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn hosts_are_judged_worst_first_and_unknown_is_unknown() {
    let (_t, base) = tmp("analyze-hosts");
    let (bad, good, other, replayed) = (
        base.join("bad"),
        base.join("good"),
        base.join("other"),
        base.join("replayed"),
    );
    // mlx5: 7 packets dropped on priority 3, 5 PFC frames on priority 0, PFC enabled on
    // priority 0 only (the configuration check fails), one QP in ERR (write_host_qps)
    write_nic(
        &bad,
        "h-bad",
        &NicSpec {
            driver: "mlx5_core",
            eth: [
                &[
                    ("rx_prio3_discards", 0),
                    ("rx_prio0_pause", 0),
                    ("rx_prio3_pause", 0),
                ],
                &[
                    ("rx_prio3_discards", 4),
                    ("rx_prio0_pause", 5),
                    ("rx_prio3_pause", 10),
                ],
                &[
                    ("rx_prio3_discards", 7),
                    ("rx_prio0_pause", 5),
                    ("rx_prio3_pause", 20),
                ],
            ],
            rdma: [
                &[("out_of_sequence", 0), ("out_of_buffer", 0)],
                &[("out_of_sequence", 0), ("out_of_buffer", 3)],
                &[("out_of_sequence", 0), ("out_of_buffer", 3)],
            ],
            pfc_en: 0x01,
        },
    );
    write_host_qps(&bad, "h-bad");
    // mlx5, clean: PFC on priority 3 only (300 frames), enabled there
    write_nic(
        &good,
        "h-good",
        &NicSpec {
            driver: "mlx5_core",
            eth: [
                &[
                    ("rx_prio3_discards", 0),
                    ("rx_prio3_pause", 0),
                    ("tx_prio3_pause", 0),
                ],
                &[
                    ("rx_prio3_discards", 0),
                    ("rx_prio3_pause", 100),
                    ("tx_prio3_pause", 50),
                ],
                &[
                    ("rx_prio3_discards", 0),
                    ("rx_prio3_pause", 200),
                    ("tx_prio3_pause", 100),
                ],
            ],
            rdma: [
                &[("out_of_sequence", 0)],
                &[("out_of_sequence", 0)],
                &[("out_of_sequence", 0)],
            ],
            pfc_en: 0x08,
        },
    );
    // a driver none of whose counters map (veth-like): nothing to judge by
    write_nic(
        &other,
        "h-other",
        &NicSpec {
            driver: "veth",
            eth: [
                &[("peer_ifindex", 3)],
                &[("peer_ifindex", 3)],
                &[("peer_ifindex", 3)],
            ],
            rdma: [&[], &[], &[]],
            pfc_en: 0x08,
        },
    );
    // a replay: flow logs, no NIC rows (host "t")
    write_logs(&replayed, &["clean"]);
    assert!(
        !bad.join("flows").exists(),
        "the NIC trees have no flow logs"
    );

    let (code, out, err) = hosts(&[&good, &other, &replayed, &bad], &["--json"]);
    assert_eq!(code, Some(1), "a host failed: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let hs = v["hosts"].as_array().unwrap();
    let order: Vec<(&str, &str)> = hs
        .iter()
        .map(|h| (h["host"].as_str().unwrap(), h["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        order,
        [
            ("h-bad", "fail"),
            ("h-other", "unknown"),
            ("t", "unknown"),
            ("h-good", "pass")
        ],
        "{v:#}"
    );
    let h = &hs[0];
    assert_eq!(
        (
            h["rdma_drops"].as_i64(),
            h["pfc_other"].as_i64(),
            h["pfc_rdma"].as_i64(),
            h["qp_errors"].as_i64(),
            h["driver"].as_str()
        ),
        (Some(7), Some(5), Some(20), Some(1), Some("mlx5")),
        "{h:#}"
    );
    assert!(h["config_failed"].as_i64().unwrap() >= 1, "{h:#}");
    // mlx5's out_of_buffer, mapped since the first nic tables (rdma_rx_out_of_buffer)
    assert_eq!(h["no_buffer"].as_i64(), Some(3), "{h:#}");
    let why = h["why"].to_string();
    for w in [
        "7 packets dropped on the RDMA priority 3",
        "5 PFC frames on priorities other than 3",
        "NIC configuration check(s) failed (config_",
        "QPs in error",
        "3 RoCE packets found no receive buffer posted",
    ] {
        assert!(why.contains(w), "{w}: {why}");
    }
    assert!(
        hs[1]["why"]
            .to_string()
            .contains("reports none of the counters checked"),
        "{v:#}"
    );
    assert!(hs[2]["why"].to_string().contains("no NIC rows"), "{v:#}");
    assert_eq!(hs[3]["pfc_rdma"].as_i64(), Some(300), "{v:#}");
    assert!(
        hs[3]["why"]
            .to_string()
            .contains("PFC only on 3 (300 frames)"),
        "{v:#}"
    );

    // the text: a count line, then the same order
    let (code, out, _) = hosts(&[&good, &other, &replayed, &bad], &[]);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("4 hosts: 1 FAIL, 2 UNKNOWN, 1 PASS"),
        "{out}"
    );
    assert!(lines[2].starts_with("FAIL    h-bad"), "{out}");
    assert!(lines[5].starts_with("PASS    h-good"), "{out}");

    // no failing host: exit 0, unless unknown counts (--strict)
    let (code, _, err) = hosts(&[&good, &replayed], &[]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, _) = hosts(&[&good, &replayed], &["--strict"]);
    assert_eq!(code, Some(1));
    // a directory with no table at all is an error naming it
    let empty = base.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, _, err) = hosts(&[&good, &empty], &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("empty: no roce-observe tables"), "{err}");
}
