//! The report's SQL is portable: the queries `roce-analyze report --emit-sql` writes give the
//! same rows on Apache DataFusion (roce-analyze), DuckDB (PyPI) and Apache Spark in local mode
//! (PySpark from PyPI on Debian's JDK), over one tree written by the real collector with faults;
//! so do the views each engine's generated SQL creates, every row and column. The tree holds
//! host QPs too (the qps table and its check), and a NIC's rows (the nic table and the fleet
//! answer's query, `roce-analyze hosts`).
//! Spark listens on 127.0.0.1 only, inside a network namespace the test creates and removes.
//!
//! Needs root (the namespace), python3 with duckdb and pyspark, and java: outside CI a missing
//! one skips the test with a message; with CI=true it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{FAULTS, Netns, heavy, require, require_root, tmp, write_logs};
use analysis::engine::{Engine, Filters, Options};
use analysis::report::rows;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/integration/engines/run_queries.py"
);

const TEST: &str = "the_report_queries_give_the_same_rows_on_duckdb_and_spark";

fn have_python_module(m: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {m}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the Python runner for `engine` inside `ns`, bounded in time; its rows per query file.
fn other_engine(
    ns: &Netns,
    engine: &str,
    tree: &Path,
    qdir: &Path,
    out: &Path,
    limit: Duration,
) -> BTreeMap<String, Vec<serde_json::Value>> {
    let t = Instant::now();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0, "python3", SCRIPT, engine])
        .arg(tree)
        .arg(qdir)
        .arg(out)
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        .env("PYSPARK_PYTHON", "python3")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{engine}: no result within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut err = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "{engine} failed: {err}");
    eprintln!("{engine}: {:.1} s", t.elapsed().as_secs_f64());
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

#[test]
fn the_report_queries_give_the_same_rows_on_duckdb_and_spark() {
    if !require_root(TEST) {
        return;
    }
    for m in ["duckdb", "pyspark"] {
        if !require(
            have_python_module(m),
            TEST,
            &format!("python3 module {m} (scripts/setup.sh installs it)"),
        ) {
            return;
        }
    }
    if !require(
        Command::new("java").arg("-version").output().is_ok(),
        TEST,
        "java (scripts/setup.sh installs it)",
    ) {
        return;
    }
    // Spark and DuckDB take both cores for minutes: alone.
    let _heavy = heavy();
    let (_base, base) = tmp("analyze-engines");
    let tree = base.join("tree");
    let qdir = base.join("queries");
    write_logs(&tree, &FAULTS);
    crate::support::write_host_qps(&tree, "t");
    // latency histograms, the latency_high check firing (its default thresholds)
    crate::support::write_latency(&tree, "t");
    crate::support::write_nic(
        &tree,
        "t",
        &crate::support::NicSpec {
            driver: "mlx5_core",
            eth: [
                &[
                    ("rx_prio3_discards", 0),
                    ("rx_prio0_pause", 0),
                    ("rx_prio3_pause", 0),
                ],
                &[
                    ("rx_prio3_discards", 2),
                    ("rx_prio0_pause", 3),
                    ("rx_prio3_pause", 40),
                ],
                &[
                    ("rx_prio3_discards", 9),
                    ("rx_prio0_pause", 3),
                    ("rx_prio3_pause", 90),
                ],
            ],
            rdma: [
                &[("out_of_sequence", 0)],
                &[("out_of_sequence", 4)],
                &[("out_of_sequence", 4)],
            ],
            pfc_en: 0x01,
        },
    );
    let out = Command::new(env!("CARGO_BIN_EXE_roce-analyze"))
        .args(["report", "--top", "3", "--emit-sql"])
        .arg(&qdir)
        .arg(&tree)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the faults fail checks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The fleet answer's query (roce-analyze hosts) too
    std::fs::write(
        qdir.join("hosts.sql"),
        analysis::hosts::sql(&contract::policy::PolicyConfig::profile("nvidia").unwrap()).unwrap(),
    )
    .unwrap();
    // Every row and column of every view, so that each dialect's rendering of the generated
    // views is compared whole, not only the columns the report reads.
    for v in analysis::sql_views::views() {
        let order: Vec<String> = v.selects[0]
            .items
            .iter()
            .map(|i| format!("{} NULLS LAST", i.alias))
            .collect();
        std::fs::write(
            qdir.join(format!("view.{}.sql", v.name)),
            format!("SELECT * FROM {} ORDER BY {}", v.name, order.join(", ")),
        )
        .unwrap();
    }
    // DataFusion, through the engine roce-analyze uses
    let eng = Engine::open(
        std::slice::from_ref(&tree),
        &Filters::default(),
        &Options::default(),
    )
    .unwrap();
    let mut ours: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&qdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.ends_with(".sql") && !n.starts_with("engine.")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 20, "{files:?}");
    for f in &files {
        let q = std::fs::read_to_string(f).unwrap();
        let r = rows(
            &eng.run(&q)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display())),
        );
        ours.insert(
            f.file_name().unwrap().to_str().unwrap().to_string(),
            r.into_iter()
                .map(|m| serde_json::Value::Object(m.into_iter().collect()))
                .collect(),
        );
    }
    let nonempty = ours.values().filter(|v| !v.is_empty()).count();
    assert!(
        nonempty >= 10,
        "too few queries with rows to compare: {nonempty}"
    );
    assert!(!ours["marking.subjects.sql"].is_empty() && !ours["go_back_n.subjects.sql"].is_empty());
    assert!(!ours["host_qps.subjects.sql"].is_empty() && !ours["view.v_qps.sql"].is_empty());
    assert!(!ours["hosts.sql"].is_empty() && !ours["view.v_nic.sql"].is_empty());
    for q in [
        "latency_high.subjects.sql",
        "latency_high.intervals.sql",
        "latency_kinds.sql",
        "latency_lost.sql",
        "latency_qps.sql",
        "latency_intervals.sql",
        "view.v_latency.sql",
    ] {
        assert!(!ours[q].is_empty(), "{q}: no rows to compare");
    }
    assert_eq!(
        ours["hosts.sql"][0]["rdma_drops"], 9,
        "{:?}",
        ours["hosts.sql"]
    );
    let ns = Netns::new(&format!("roce-an-{}", std::process::id()));
    for (engine, limit) in [("duckdb", 120), ("spark", 600)] {
        let theirs = other_engine(
            &ns,
            engine,
            &tree,
            &qdir,
            &base.join(format!("{engine}.json")),
            Duration::from_secs(limit),
        );
        assert_eq!(theirs.len(), ours.len(), "{engine}: queries run");
        for (name, rows) in &ours {
            assert_eq!(
                &theirs[name], rows,
                "{name}: {engine} and roce-analyze (DataFusion) differ"
            );
        }
    }
    drop(ns);
}
