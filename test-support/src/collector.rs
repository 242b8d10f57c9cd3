//! Helpers for the collector's integration tests: an independent Parquet reader (pyarrow, via
//! python3), small file utilities and a process run inside a test's network namespace.

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

/// A process inside a test's network namespace (`ip netns exec NS PROGRAM ARGS`, which execs
/// it: the child's pid is the process's), its stderr collected by a thread; killed when dropped
/// if still running.
pub struct NsProcess {
    name: String,
    pub child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl NsProcess {
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(
        ns: &netns::Netns,
        program: &str,
        args: &[S],
    ) -> NsProcess {
        use std::io::Read;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, program])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let mut err = child.stderr.take().unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let s2 = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s2.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        NsProcess {
            name: program.to_string(),
            child,
            stderr,
        }
    }

    /// roce-observe (the binary `bin`) with `args`, once it said `attached ingress` `ifaces`
    /// times (20 s at most).
    pub fn roce_observe<S: AsRef<std::ffi::OsStr>>(
        bin: &str,
        ns: &netns::Netns,
        args: &[S],
        ifaces: usize,
    ) -> NsProcess {
        let p = NsProcess::spawn(ns, bin, args);
        let t = std::time::Instant::now();
        while p.err().matches("attached ingress").count() < ifaces {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(20),
                "roce-observe not attached after 20 s:\n{}",
                p.err()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        p
    }

    /// What it wrote on stderr so far.
    pub fn err(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends `sig` and waits for the exit (20 s at most, then kills it and fails).
    pub fn signal(&mut self, sig: i32) -> std::process::ExitStatus {
        // SAFETY: signalling our own child by pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        let t = std::time::Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if t.elapsed() > std::time::Duration::from_secs(20) {
                let _ = self.child.kill();
                panic!("{} did not exit:\n{}", self.name, self.err());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
