//! The report on the query engine, over trees written by the real collector: verdicts counted
//! per interval exactly as the alert rules fire, the recorded policy as default, the filters,
//! the per-key timeline, `roce-analyze sql`, and the error messages.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::support::{FAULTS, run, tmp, write_logs, write_logs_with};
use analysis::engine::{Engine, Filters, Options};
use analysis::report::{Report, report, rows};
use contract::policy::PolicyConfig;
use observer::pipeline::rules::Rule;

fn engine(dirs: &[PathBuf], f: &Filters) -> Engine {
    Engine::open(dirs, f, &Options::default()).unwrap()
}

/// The alert rule each report part counts.
fn rule_of(part: &str, check: &str) -> String {
    match part {
        p if p.starts_with("dscp_") => "dscp_mismatch".into(),
        p if p.starts_with("pcp_") => "pcp_mismatch".into(),
        p if p.starts_with("ecn_") => "not_ect".into(),
        p if p.starts_with("priority ") && check == "no PFC storm" => "pfc_storm".into(),
        p if p.starts_with("priority ") => "pfc_wrong_priority".into(),
        p => p.into(),
    }
}

/// With no hold-down every firing of a rule is one alert record: the report's violations per
/// rule (one per subject and interval) must equal the interval alerts the collector wrote, for
/// every rule the report checks, under a policy with thresholds away from the defaults (rules
/// that kernel events raise first: between the interval alerts and those plus the events).
#[test]
fn verdicts_count_what_the_alert_rules_fire() {
    let (_dir, dir) = tmp("sql-verdicts");
    let policy = PolicyConfig::from_toml(
        "[data]\npcp = \"untagged\"\n[thresholds]\nhold_down_s = 0\npfc_storm_xoff_per_s = 1\nce_without_cnp_min_ce = 1\n",
        "test",
    )
    .unwrap();
    let mut cases = FAULTS.to_vec();
    cases.push("bad_icrc");
    write_logs_with(&dir, &cases, policy.clone(), "t");
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let r = report(&eng, &policy, "test", 100, None).unwrap();
    let mut from_report: BTreeMap<String, i64> = BTreeMap::new();
    for c in &r.checks {
        for p in &c.parts {
            *from_report.entry(rule_of(&p.part, c.name)).or_default() += p.violations;
        }
    }
    for c in r.checks.iter().filter(|c| c.name == "QP table") {
        for w in &c.worst {
            *from_report.entry(w.part.clone()).or_default() += w.violations;
        }
    }
    let alerts = rows(
        &eng.run(
            "SELECT rule, origin, COUNT(*) AS n FROM alerts \
             WHERE COALESCE(summary, 'false') <> 'true' GROUP BY rule, origin",
        )
        .unwrap(),
    );
    let mut by_origin: BTreeMap<(String, String), i64> = BTreeMap::new();
    for r in &alerts {
        by_origin.insert(
            (
                r["rule"].as_str().unwrap().into(),
                r["origin"].as_str().unwrap().into(),
            ),
            r["n"].as_i64().unwrap(),
        );
    }
    let n = |rule: &str, origin: &str| {
        by_origin
            .get(&(rule.into(), origin.into()))
            .copied()
            .unwrap_or(0)
    };
    for rule in RULES {
        let got = from_report.get(rule).copied().unwrap_or(0);
        let r = Rule::from_name(rule).unwrap();
        if r.raised_by_events() {
            // the packet behind a first-occurrence event is counted once, by the event: an
            // interval whose only such packet it was raises no interval alert
            let (iv, ev) = (n(rule, "interval"), n(rule, "event"));
            assert!(
                iv <= got && got <= iv + ev,
                "{rule}: report {got}, alerts {iv} interval + {ev} event"
            );
        } else {
            assert_eq!(got, n(rule, "interval"), "{rule}");
        }
    }
    // the cases exercise these rules, so the comparison is not vacuous
    for rule in [
        "dscp_mismatch",
        "pcp_mismatch",
        "psn_gap",
        "go_back_n",
        "icrc_bad",
        "pfc_wrong_priority",
        "pause_802_3x",
    ] {
        assert!(
            from_report.get(rule).is_some_and(|n| *n > 0),
            "{rule}: {from_report:?}"
        );
    }
}

/// The alert rules the report counts.
const RULES: [&str; 14] = [
    "dscp_mismatch",
    "pcp_mismatch",
    "not_ect",
    "psn_gap",
    "go_back_n",
    "icrc_bad",
    "ce_without_cnp",
    "pfc_wrong_priority",
    "pfc_storm",
    "pause_802_3x",
    "pfc_without_ecn",
    "mtu_below_expected",
    "qp_map_full",
    "events_lost",
];

fn check<'a>(r: &'a Report, name: &str) -> &'a analysis::report::Check {
    r.checks.iter().find(|c| c.name == name).unwrap()
}

/// The worst subjects are named with their figures, worst first, and `--top` bounds them.
#[test]
fn the_worst_subjects_are_named_worst_first() {
    let (_dir, dir) = tmp("sql-worst");
    write_logs(&dir, &FAULTS);
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let p = PolicyConfig::profile("nvidia").unwrap();
    let r = report(&eng, &p, "test", 2, None).unwrap();
    let g = check(&r, "no go-back-N");
    assert!(!g.worst.is_empty());
    for part in ["psn_gap", "go_back_n"] {
        let w: Vec<_> = g.worst.iter().filter(|w| w.part == part).collect();
        assert!(w.len() <= 2, "{w:?}");
        assert!(w.windows(2).all(|x| x[0].figure >= x[1].figure), "{w:?}");
        assert!(w.iter().all(|s| s.qp.is_some() && s.src.is_some()), "{w:?}");
    }
    // the part totals cover every subject, not only the named ones
    let all = report(&eng, &p, "test", 1000, None).unwrap();
    let sum = |r: &Report| -> i64 {
        check(r, "no go-back-N")
            .worst
            .iter()
            .map(|w| w.figure)
            .sum()
    };
    let parts: i64 = check(&r, "no go-back-N")
        .parts
        .iter()
        .map(|p| p.figure)
        .sum();
    assert_eq!(parts, sum(&all));
}

/// The policy recorded in the tree is the default; --profile and --policy override it; trees
/// with different recorded policies need a choice.
#[test]
fn the_runs_policy_is_the_default() {
    let (_a, a) = tmp("sql-policy-a");
    let (_b, b) = tmp("sql-policy-b");
    // a site that marks RDMA data with DSCP 0 and does not care for PCP (an rxe lab, say): its
    // run raises no marking alert
    let site = PolicyConfig::from_toml(
        "[data]\ndscp = 0\npcp = \"any\"\n[ack]\ndscp = 0\npcp = \"any\"\n",
        "site",
    )
    .unwrap();
    write_logs_with(&a, &["bleached"], site, "ha");
    write_logs_with(
        &b,
        &["bleached"],
        PolicyConfig::profile("nvidia").unwrap(),
        "hb",
    );
    assert!(a.join("policy-ha.toml").is_file());
    let out = run(&["report".as_ref(), a.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("policy-ha.toml (recorded by the run)"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("PASS  data marking")),
        "{text}"
    );
    let out = run(&[
        "report".as_ref(),
        "--profile".as_ref(),
        "nvidia".as_ref(),
        a.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("FAIL  data marking")),
        "{text}"
    );
    let pf = a.join("given.toml");
    std::fs::write(&pf, "[data]\ndscp = \"any\"\n[ack]\ndscp = \"any\"\n").unwrap();
    let out = run(&[
        "report".as_ref(),
        "--policy".as_ref(),
        pf.as_os_str(),
        a.as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("given.toml (--policy)"), "{text}");
    let out = run(&["report".as_ref(), a.as_os_str(), b.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("different policies") && err.contains("--policy"),
        "{err}"
    );
}

/// Each filter selects exactly the rows a WHERE clause on the unfiltered tables selects.
#[test]
fn filters_select_the_rows_they_name() {
    let (_dir, dir) = tmp("sql-filters");
    write_logs(&dir, &FAULTS);
    let all = engine(std::slice::from_ref(&dir), &Filters::default());
    let count = |e: &Engine, q: &str| rows(&e.run(q).unwrap())[0]["n"].as_i64().unwrap();
    let one = rows(
        &all.run("SELECT qp, iface, src FROM flows ORDER BY pkts DESC LIMIT 1")
            .unwrap(),
    );
    let (qp, iface, src) = (
        one[0]["qp"].as_i64().unwrap(),
        one[0]["iface"].as_str().unwrap().to_string(),
        one[0]["src"].as_str().unwrap().to_string(),
    );
    let times = rows(&all.run("SELECT MIN(CAST(interval_start AS BIGINT)) AS a, MAX(CAST(interval_end AS BIGINT)) AS b FROM flows").unwrap());
    let (a, b) = (
        times[0]["a"].as_i64().unwrap(),
        times[0]["b"].as_i64().unwrap(),
    );
    let mid = a + (b - a) / 2;
    let cases: Vec<(Filters, String)> = vec![
        (
            Filters {
                qps: vec![qp],
                ..Filters::default()
            },
            format!("qp = {qp}"),
        ),
        (
            Filters {
                ifaces: vec![iface.clone()],
                ..Filters::default()
            },
            format!("iface = '{iface}'"),
        ),
        (
            Filters {
                srcs: vec![src.clone()],
                qps: vec![qp],
                ..Filters::default()
            },
            format!("src = '{src}' AND qp = {qp}"),
        ),
        (
            Filters {
                since_us: Some(mid),
                ..Filters::default()
            },
            format!("CAST(interval_end AS BIGINT) > {mid}"),
        ),
        (
            Filters {
                until_us: Some(mid),
                ..Filters::default()
            },
            format!("CAST(interval_start AS BIGINT) < {mid}"),
        ),
        (
            Filters {
                hosts: vec!["nobody".into()],
                ..Filters::default()
            },
            "host = 'nobody'".into(),
        ),
    ];
    for (f, wher) in cases {
        let e = engine(std::slice::from_ref(&dir), &f);
        let got = count(&e, "SELECT COUNT(*) AS n FROM flows");
        let want = count(
            &all,
            &format!("SELECT COUNT(*) AS n FROM flows WHERE {wher}"),
        );
        assert_eq!(got, want, "{wher}");
        // the report's views see the filtered rows too
        assert_eq!(
            count(&e, "SELECT COUNT(*) AS n FROM v_flows"),
            want,
            "{wher}"
        );
    }
    // report --qp: the key's timeline, one row per interval
    let out = run(&[
        "report".as_ref(),
        "--qp".as_ref(),
        format!("{qp:#x}").as_ref(),
        dir.as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let want = count(
        &all,
        &format!("SELECT COUNT(*) AS n FROM flows WHERE qp = {qp}"),
    );
    assert!(text.contains(&format!("timeline ({want} rows)")), "{text}");
}

/// The host's QPs (the live observer's `qps` table) are a table of the tree: queried by name,
/// and left alone by `--iface` (they belong to RDMA devices, not to an interface).
#[test]
fn host_qps_are_a_table_of_the_tree() {
    let (_dir, dir) = tmp("sql-host-qps");
    write_logs(&dir, &["clean"]);
    let mut col = observer::pipeline::Collector::new(observer::pipeline::CollectorConfig::new(
        dir.clone(),
        "t",
        "live",
        PolicyConfig::profile("nvidia").unwrap(),
    ))
    .unwrap();
    col.quiet_stderr();
    let row = |lqpn: u32, state: &str| qps::QpRow {
        dev: "mlx5_0".into(),
        dev_index: 1,
        lqpn,
        qp_type: "RC".into(),
        state: state.into(),
        pid: Some(4242),
        comm: Some("all_reduce_perf".into()),
        ..qps::QpRow::default()
    };
    let inv = qps::Inventory {
        time_ns: 1_700_000_010_000_000_000,
        qps: vec![row(17, "RTS"), row(18, "ERR")],
        ..qps::Inventory::default()
    };
    let (progress, fates) = qps::compare(&qps::Inventory::default(), &inv);
    col.on_qps(1_700_000_000_000_000_000, &inv, &progress, &fates)
        .unwrap();
    col.finish().unwrap();
    for filter in [&[][..], &["--iface".as_ref(), "clean".as_ref()][..]] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["sql".as_ref(), "-d".as_ref(), dir.as_os_str()];
        args.extend_from_slice(filter);
        args.extend_from_slice(&[
            "--format".as_ref(),
            "csv".as_ref(),
            "SELECT device, lqpn, state, comm, error FROM qps ORDER BY lqpn".as_ref(),
        ]);
        let out = run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "device,lqpn,state,comm,error\nmlx5_0,17,RTS,all_reduce_perf,false\nmlx5_0,18,ERR,all_reduce_perf,true\n",
            "{filter:?}"
        );
    }
}

/// The report judges the host's QPs: QPs off the policy by QP and by owner (process, pod,
/// container), the busiest first, and a QP in ERR, each failing its check; a tree without an
/// inventory says so instead of passing.
#[test]
fn the_report_names_host_qps_off_policy_by_owner_and_in_error() {
    let (_dir, dir) = tmp("report-host-qps");
    write_logs(&dir, &["clean"]);
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let r = report(&eng, &policy, "test", 10, None).unwrap();
    let m = check(&r, "host QP marking");
    assert_eq!(m.verdict, analysis::report::Verdict::Info, "{}", m.detail);
    assert!(m.detail.contains("no host QP inventory"), "{}", m.detail);
    drop(eng);
    crate::support::write_host_qps(&dir, "t");
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let r = report(&eng, &policy, "test", 10, None).unwrap();
    assert_eq!(r.figures.host_qps, 4);
    let m = check(&r, "host QP marking");
    assert_eq!(m.verdict, analysis::report::Verdict::Fail, "{}", m.detail);
    let qp_rows: Vec<(String, i64, i64)> = m
        .worst
        .iter()
        .filter(|s| s.part == "qp_off_policy")
        .map(|s| (s.name(), s.violations, s.figure))
        .collect();
    assert_eq!(
        qp_rows,
        vec![
            (
                "t/mlx5_0 ib_write_bw[88] container c0ffee -> 10.0.4.2 qp 0x000022".to_string(),
                2,
                500
            ),
            (
                "t/mlx5_0 python3[77] pod pod-a -> 10.0.4.2 qp 0x000021".to_string(),
                2,
                500
            ),
        ]
    );
    let owners: Vec<(String, i64, i64)> = m
        .worst
        .iter()
        .filter(|s| s.part == "owner_off_policy")
        .map(|s| (s.name(), s.figure, s.peak))
        .collect();
    assert_eq!(
        owners,
        vec![
            (
                "t/mlx5_0 ib_write_bw[88] container c0ffee".to_string(),
                2,
                1
            ),
            ("t/mlx5_0 python3[77] pod pod-a".to_string(), 2, 1),
        ]
    );
    let e = check(&r, "host QPs not in error");
    assert_eq!(e.verdict, analysis::report::Verdict::Fail, "{}", e.detail);
    assert_eq!(e.worst.len(), 1);
    assert_eq!(e.worst[0].qp, Some(0x23));
    assert_eq!(e.worst[0].violations, 1);
    let text = analysis::report::render_text(&r, 10);
    assert!(text.contains("python3[77] pod pod-a"), "{text}");
}

/// `roce-analyze sql`: JSON rows, CSV and a table; a bad query is an error, not a panic.
#[test]
fn ad_hoc_sql() {
    let (_dir, dir) = tmp("sql-adhoc");
    write_logs(&dir, &["clean", "ecn_ce_cnp"]);
    let d = dir.as_os_str();
    let out = run(&[
        "sql".as_ref(),
        "-d".as_ref(),
        d,
        "--format".as_ref(),
        "json".as_ref(),
        "SELECT SUM(pkts) AS pkts, COUNT(*) AS n FROM flows".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        j["pkts"].as_i64().unwrap() > 0 && j["n"].as_i64().unwrap() > 0,
        "{j}"
    );
    let out = run(&[
        "sql".as_ref(),
        "-d".as_ref(),
        d,
        "--format".as_ref(),
        "csv".as_ref(),
        "SELECT hist, SUM(pkts) AS p FROM v_hist GROUP BY hist ORDER BY hist".as_ref(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("hist,p\n") && text.contains("dscp_data,"),
        "{text}"
    );
    let out = run(&[
        "sql".as_ref(),
        "-d".as_ref(),
        d,
        "SELECT nope FROM flows".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("query failed") && err.contains("nope"),
        "{err}"
    );
}

/// `roce-analyze sql` reads the given trees and nothing else, and never writes a tree: an
/// external table over another file and `COPY ... TO` are refused (once `COPY` into the tree's
/// flows directory wiped the flow log); with `--allow-files` other files may be read and
/// written, a path inside the tree still may not (also spelled with `..`); every refusal is
/// exit 1 with the reason, and the tree's files are as they were.
#[test]
fn sql_reads_only_the_trees_and_never_writes_them() {
    let (_dir, dir) = tmp("sql-access");
    write_logs(&dir, &["clean"]);
    let (_out, outside) = tmp("sql-access-out");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("secret.csv");
    std::fs::write(&secret, "a\n1\n").unwrap();
    let listing = || {
        let mut v: Vec<(PathBuf, u64)> = walk(&dir)
            .into_iter()
            .map(|p| {
                let n = std::fs::metadata(&p).unwrap().len();
                (p, n)
            })
            .collect();
        v.sort();
        v
    };
    let before = listing();
    assert!(!before.is_empty());
    let sql = |q: &str, allow: bool| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["sql".as_ref(), "-d".as_ref(), dir.as_os_str()];
        if allow {
            args.push("--allow-files".as_ref());
        }
        args.push(q.as_ref());
        run(&args)
    };
    let refused = |q: &str, allow: bool, why: &str| {
        let o = sql(q, allow);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{q}: {err}");
        assert!(err.contains("refused") && err.contains(why), "{q}: {err}");
    };
    let read_secret = format!(
        "CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true'); SELECT * FROM s",
        secret.display()
    );
    refused(&read_secret, false, "--allow-files");
    let flows_dir = dir.join("flows");
    let into_tree = format!(
        "COPY (SELECT 1 AS x) TO '{}/x.parquet' STORED AS PARQUET",
        flows_dir.display()
    );
    refused(&into_tree, false, "--allow-files");
    refused(&into_tree, true, "never writes a tree");
    let dotted = format!(
        "COPY (SELECT 1 AS x) TO '{}/../{}/flows/y.csv' STORED AS CSV",
        dir.display(),
        dir.file_name().unwrap().to_str().unwrap()
    );
    refused(&dotted, true, "never writes a tree");
    refused(
        &format!(
            "CREATE EXTERNAL TABLE f STORED AS PARQUET LOCATION '{}/'",
            flows_dir.display()
        ),
        true,
        "inside the tree",
    );
    refused(
        "CREATE TABLE m (x INT); INSERT INTO m VALUES (1)",
        false,
        "--allow-files",
    );
    assert_eq!(listing(), before, "the tree was written");
    // allowed: another file read, another one written
    let o = sql(&read_secret, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains('1'));
    let target = outside.join("copy.csv");
    let o = sql(
        &format!(
            "COPY (SELECT COUNT(*) AS n FROM flows) TO '{}' STORED AS CSV",
            target.display()
        ),
        true,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(target.exists());
    // in-memory views and tables need no permission
    let o = sql(
        "CREATE VIEW v AS SELECT COUNT(*) AS n FROM flows; SELECT n FROM v",
        false,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(listing(), before, "the tree was written");
}

/// Every file under `d`.
fn walk(d: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A QP whose messages each fit one packet (ONLY opcodes) never warns about the MTU, however
/// small its payloads; the multi-packet case below the expected MTU does.
#[test]
fn no_mtu_warning_from_single_packet_messages() {
    let (_dir, dir) = tmp("sql-mtu");
    write_logs(&dir, &["clean", "ecn_ce_cnp", "bleached"]);
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let r = report(
        &eng,
        &PolicyConfig::profile("nvidia").unwrap(),
        "t",
        5,
        None,
    )
    .unwrap();
    let full: i64 = rows(&eng.run("SELECT COALESCE(SUM(pkts), 0) AS n FROM v_hist WHERE hist = 'opcodes' AND value IN (0, 1, 6, 7, 13, 14, 32, 33, 38, 39)").unwrap())[0]["n"].as_i64().unwrap();
    let small = r.figures.max_payloads.keys().all(|p| *p < 4096 + 16);
    assert!(small, "{:?}", r.figures.max_payloads);
    let mtu = check(&r, "path MTU");
    if full == 0 {
        assert_eq!(
            mtu.verdict,
            analysis::report::Verdict::Pass,
            "{}",
            mtu.detail
        );
    } else {
        assert_eq!(
            mtu.verdict,
            analysis::report::Verdict::Warn,
            "{}",
            mtu.detail
        );
    }
}

/// Errors: a missing path says it does not exist, a foreign Parquet file is named with what is
/// wrong, and swapped compare arguments get a usage hint.
#[test]
fn errors_say_what_is_wrong() {
    let (_dir, dir) = tmp("sql-errors");
    write_logs(&dir, &["clean"]);
    let out = run(&["report".as_ref(), dir.join("nope").as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope does not exist"));
    // a Parquet file of another tool under flows/
    let foreign = dir.join("flows/date=2026-01-01/hour=00/other.parquet");
    std::fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("x", arrow::datatypes::DataType::Int64, false),
    ]));
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&foreign).unwrap(),
        schema.clone(),
        None,
    )
    .unwrap();
    w.write(&arrow::array::RecordBatch::new_empty(schema))
        .unwrap();
    w.close().unwrap();
    let out = run(&["report".as_ref(), dir.as_os_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("other.parquet") && err.contains("not a roce-observe table"),
        "{err}"
    );
    assert!(err.contains("\"host\"") || err.contains("missing"), "{err}");
    std::fs::remove_file(&foreign).unwrap();
    let out = run(&[
        "compare".as_ref(),
        dir.as_os_str(),
        dir.join("flows").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("compare takes the baseline file first"));
    // a misspelt filter is not a pass: it once printed "0 QP keys ... PASS" and exited 0
    for args in [
        &["--host", "nosuchhost", "report"][..],
        &["--iface", "eth9", "--qp", "0x11", "report"][..],
        &["--host", "nosuchhost", "html", "--out", "/dev/null"][..],
    ] {
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
        a.push(dir.as_os_str());
        let out = run(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("select no row of the trees"),
            "{args:?}: {err}"
        );
        assert!(err.contains(args[1]), "{args:?}: {err}");
    }
    // a filter that selects rows still reports
    let out = run(&[
        "--iface".as_ref(),
        "clean".as_ref(),
        "report".as_ref(),
        dir.as_os_str(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("QP keys"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The report of a tree whose small files are read once at open (the default), whose files
/// are all scanned by every query, and half and half, is one report: where a row is read from
/// changes the cost, never a figure.
#[test]
fn small_files_read_once_or_scanned_give_one_report() {
    let (_dir, dir) = tmp("sql-resident");
    let policy = PolicyConfig::profile("nvidia").unwrap();
    write_logs(&dir, &FAULTS);
    let dirs = std::slice::from_ref(&dir);
    let open = |resident_max_rows: u64| {
        let opts = Options {
            resident_max_rows,
            ..Options::default()
        };
        Engine::open(dirs, &Filters::default(), &opts).unwrap()
    };
    let json = |eng: &Engine| {
        let r = report(eng, &policy, "test", 100, None).unwrap();
        serde_json::to_value(&r).unwrap()
    };
    let resident = open(Options::default().resident_max_rows);
    assert!(resident.file_count() > 2, "{}", resident.file_count());
    assert_eq!(
        resident.scanned_count(),
        0,
        "every file of the tree is small"
    );
    assert!(resident.resident_bytes > 0);
    let scanned = open(0);
    assert_eq!(scanned.scanned_count(), scanned.file_count());
    assert_eq!(scanned.resident_bytes, 0);
    let want = json(&scanned);
    assert_eq!(json(&resident), want);
    // a threshold between the files' row counts: some read once, some scanned
    let mut counts: Vec<u64> = resident
        .files
        .values()
        .flatten()
        .map(|(_, p)| analysis::load::row_count(p).unwrap())
        .collect();
    counts.sort();
    let mid = counts[counts.len() / 2];
    let mixed = open(mid);
    assert!(
        (1..mixed.file_count()).contains(&mixed.scanned_count()),
        "{} of {} files scanned at {mid} rows ({counts:?})",
        mixed.scanned_count(),
        mixed.file_count()
    );
    assert_eq!(json(&mixed), want);
    // the rows read once stay within their budget (a quarter of --memory-limit by default):
    // beyond it files are scanned
    let budget = resident.resident_bytes / 4;
    let tight = Engine::open(
        dirs,
        &Filters::default(),
        &Options {
            resident_budget: Some(budget),
            ..Options::default()
        },
    )
    .unwrap();
    assert!(
        tight.scanned_count() > 0 && tight.resident_bytes <= budget + budget / 2,
        "{} of {} files scanned, {} bytes read once, budget {budget}",
        tight.scanned_count(),
        tight.file_count(),
        tight.resident_bytes
    );
    assert_eq!(json(&tight), want);
}

/// Rewrites every Parquet file of `from` into `to` with DuckDB (`COPY (SELECT * FROM
/// read_parquet(f)) TO ...`: list items named `element`, every field nullable); other files
/// copied as they are.
fn rewrite_with_duckdb(from: &std::path::Path, to: &std::path::Path) {
    let script = r#"
import os, shutil, sys
import duckdb
src, dst = sys.argv[1], sys.argv[2]
for root, _, files in os.walk(src):
    for f in files:
        s = os.path.join(root, f)
        d = os.path.join(dst, os.path.relpath(s, src))
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if f.endswith(".parquet"):
            duckdb.sql(f"COPY (SELECT * FROM read_parquet('{s}')) TO '{d}' (FORMAT parquet)")
        else:
            shutil.copy(s, d)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tree whose files DuckDB rewrote (nullable list items named `element`) gives the report of
/// the tree it was rewritten from, whether its files are read once or scanned (before, every
/// query failed with a cast error that named no file); a file whose column cannot be read as
/// the table's is an error naming the file and the column.
#[test]
fn a_tree_rewritten_by_duckdb_reads_as_the_original() {
    const TEST: &str = "a_tree_rewritten_by_duckdb_reads_as_the_original";
    let have = std::process::Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !crate::support::require(have, TEST, "python3 module duckdb (scripts/setup.sh)") {
        return;
    }
    let (_dir, base) = tmp("sql-duckdb-rewrite");
    let (orig, duck) = (base.join("orig"), base.join("duck"));
    write_logs(&orig, &FAULTS);
    rewrite_with_duckdb(&orig, &duck);
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let json = |dir: &PathBuf, resident_max_rows: u64| {
        let opts = Options {
            resident_max_rows,
            ..Options::default()
        };
        let eng = Engine::open(std::slice::from_ref(dir), &Filters::default(), &opts).unwrap();
        let r = report(&eng, &policy, "test", 100, None).unwrap();
        let mut v = serde_json::to_value(&r).unwrap();
        v["policy_source"] = serde_json::Value::Null;
        v
    };
    let want = json(&orig, 0);
    assert_eq!(json(&duck, 0), want, "scanned");
    assert_eq!(json(&duck, u64::MAX), want, "read once");
    // counts written narrower (INTEGER for BIGINT, SMALLINT for INTEGER) are widened
    let narrow = base.join("narrow");
    rewrite_with_duckdb(&orig, &narrow);
    for f in walk(&narrow.join("flows")) {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import duckdb, sys; f = sys.argv[1]; \
                 duckdb.sql(f\"COPY (SELECT * REPLACE (CAST(pkts AS INTEGER) AS pkts, CAST(max_udp_payload AS SMALLINT) AS max_udp_payload) FROM read_parquet('{f}')) TO '{f}.new' (FORMAT parquet)\")",
            ])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(f.with_extension("parquet.new"), &f).unwrap();
    }
    assert_eq!(json(&narrow, 0), want, "narrow, scanned");
    assert_eq!(json(&narrow, u64::MAX), want, "narrow, read once");
    // pkts as text: no reading of it as a count
    let bad = base.join("bad");
    rewrite_with_duckdb(&orig, &bad);
    let victim = walk(&bad.join("flows"))[0].clone();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import duckdb, sys; f = sys.argv[1]; \
             duckdb.sql(f\"COPY (SELECT * REPLACE (CAST(pkts AS VARCHAR) AS pkts) FROM read_parquet('{f}')) TO '{f}.new' (FORMAT parquet)\")",
        ])
        .arg(&victim)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(victim.with_extension("parquet.new"), &victim).unwrap();
    for resident_max_rows in [0, u64::MAX] {
        let opts = Options {
            resident_max_rows,
            ..Options::default()
        };
        let e = match Engine::open(std::slice::from_ref(&bad), &Filters::default(), &opts) {
            Ok(_) => panic!("a text pkts column was accepted"),
            Err(e) => e,
        };
        let text = contract::error::cli_text(&e);
        assert!(
            text.contains(&victim.display().to_string()) && text.contains("pkts"),
            "{text}"
        );
    }
}

/// Which value, which class, since when: each marking subject carries the values off the
/// policy with their packets and first interval, and the check's text names them (a bleach to
/// DSCP 0 and a CNP on the data class's DSCP 26 read differently), in text and HTML.
#[test]
fn off_policy_marking_names_its_values_and_first_time() {
    let (_dir, dir) = tmp("sql-offvalues");
    write_logs(&dir, &FAULTS);
    let eng = engine(std::slice::from_ref(&dir), &Filters::default());
    let p = PolicyConfig::profile("nvidia").unwrap();
    let r = report(&eng, &p, "test", 100, None).unwrap();
    let subject = |check_name: &str, part: &str, iface: &str| {
        check(&r, check_name)
            .worst
            .iter()
            .find(|w| w.part == part && w.iface.as_deref() == Some(iface))
            .unwrap_or_else(|| panic!("{part} on {iface}: {:?}", check(&r, check_name).worst))
            .clone()
    };
    let data = subject("data marking", "dscp_data", "bleached");
    assert_eq!(
        data.values
            .iter()
            .map(|v| (v.value, v.pkts))
            .collect::<Vec<_>>(),
        vec![(0, 15)]
    );
    assert_eq!(data.values[0].first_us, data.first_us);
    let pcp = subject("data marking", "pcp_data", "bleached");
    // 10 tagged with priority 0; the 5 untagged pass (tags are optional by default)
    assert_eq!(
        pcp.values
            .iter()
            .map(|v| (v.value, v.pkts))
            .collect::<Vec<_>>(),
        vec![(0, 10)]
    );
    let cnp = subject("CNP marking", "dscp_cnp", "cnp_on_data_class");
    assert_eq!(
        cnp.values
            .iter()
            .map(|v| (v.value, v.pkts))
            .collect::<Vec<_>>(),
        vec![(26, 6)]
    );
    let d = &check(&r, "data marking").detail;
    assert!(
        d.contains("dscp_data carried DSCP 0 (bleached to best effort) x15"),
        "{d}"
    );
    let d = &check(&r, "CNP marking").detail;
    assert!(d.contains("dscp_cnp carried DSCP 26 (AF31) x6"), "{d}");
    let text = analysis::report::render_text(&r, 100);
    assert!(
        text.contains("; DSCP 0 (bleached to best effort) x15 from "),
        "{text}"
    );
    // subjects of other checks carry none
    assert!(
        check(&r, "no go-back-N")
            .worst
            .iter()
            .all(|w| w.values.is_empty())
    );
}
