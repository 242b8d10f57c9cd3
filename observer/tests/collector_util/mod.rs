//! Helpers for the collector's integration tests: an independent Parquet reader (pyarrow, via
//! python3) and small file utilities.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Reads every final-named Parquet file of `table` under `out` with pyarrow (Hive
/// partitioning) and returns `{"rows": n, "sums": {col: sum}, "files": n, "columns": [...],
/// "records": [...]}` (records only when `records` is true).
pub fn pyarrow_read(out: &Path, table: &str, sum_cols: &[&str], records: bool) -> Value {
    let script = r#"
import json, sys, glob, os
import pyarrow as pa, pyarrow.dataset as ds, pyarrow.compute as pc
root, table, cols, want_records = sys.argv[1], sys.argv[2], [c for c in sys.argv[3].split(',') if c], sys.argv[4] == '1'
files = sorted(glob.glob(os.path.join(root, table, 'date=*', 'hour=*', '*.parquet')))
if not files:
    print(json.dumps({"rows": 0, "files": 0, "sums": {c: 0 for c in cols}, "columns": [], "records": []})); sys.exit(0)
d = ds.dataset(files, format='parquet', partitioning='hive', partition_base_dir=os.path.join(root, table))
t = d.to_table()
sums = {c: (pc.sum(t[c]).as_py() or 0) for c in cols}
recs = []
if want_records:
    for r in t.to_pylist():
        recs.append({k: (str(v) if not isinstance(v, (int, float, str, bool, type(None), list)) else v) for k, v in r.items()})
print(json.dumps({"rows": t.num_rows, "files": len(files), "sums": sums, "columns": t.column_names, "records": recs}, default=str))
"#;
    let o = Command::new("python3")
        .args([
            "-c",
            script,
            &out.display().to_string(),
            table,
            &sum_cols.join(","),
            if records { "1" } else { "0" },
        ])
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "pyarrow read failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json from pyarrow script")
}

/// Opens each file with pyarrow.parquet (footer + all row groups); returns those that fail.
pub fn unreadable_parquet(files: &[PathBuf]) -> Vec<String> {
    let script = r#"
import sys, pyarrow.parquet as pq
bad = []
for f in sys.argv[1:]:
    try:
        pq.read_table(f)
    except Exception as e:
        bad.append(f + ': ' + str(e))
print('\n'.join(bad))
"#;
    let mut args = vec!["-c".to_string(), script.to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let o = Command::new("python3")
        .args(&args)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Every file under `dir`, recursively.
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ro-coll-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// alerts.jsonl as JSON values.
pub fn alerts_jsonl(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("each alerts.jsonl line is JSON"))
        .collect()
}

/// Every file under `dir` is final-named: none is left as `*.tmp`.
pub fn assert_no_tmp_files(dir: &Path) {
    let files = all_files(dir);
    assert!(
        files.iter().all(|f| !f.to_string_lossy().ends_with(".tmp")),
        "{files:?}"
    );
}
