//! Lifecycle of the live command and the writers: SIGTERM (flush, close, exit 0, every row on
//! disk), SIGKILL (every final-named file readable, at most the open window lost), disk full
//! (alert, counting continues, writing resumes when space returns). The signal tests run the
//! real binary with its synthetic source (no BPF); the netns tests with real XDP are in
//! collector_netns.rs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::run;
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig, rule};
use observer::sources::synthetic::Synthetic;
use test_support::require_root;

use test_support::TempDir;
use test_support::collector::*;

fn spawn(out: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args([
            "--synthetic-qps",
            "50",
            "--interval",
            "200ms",
            "--plain",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce-observe")
}

fn wait_bounded(c: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("roce-observe did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_file(dir: &std::path::Path, limit: Duration) {
    let t = Instant::now();
    while t.elapsed() < limit {
        if all_files(dir)
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "parquet"))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "no Parquet file appeared under {} within {limit:?}",
        dir.display()
    );
}

/// Signals the running observer with `sig` after two intervals' worth of time: it must flush,
/// close every file, say why it stopped and exit 0, with every counted packet in the flow logs.
fn stops_cleanly_on(sig: libc::c_int, name: &str) {
    let tmp = TempDir::new(name);
    let out = tmp.path().to_path_buf();
    let mut c = spawn(&out, &[]);
    std::thread::sleep(Duration::from_millis(1300));
    // SAFETY: signalling the child we spawned, by its pid.
    unsafe { libc::kill(c.id() as i32, sig) };
    let st = wait_bounded(&mut c, Duration::from_secs(15));
    let err = std::io::read_to_string(c.stderr.take().unwrap()).unwrap();
    assert!(st.success(), "exit {st:?}; stderr:\n{err}");
    assert!(err.contains(&format!("stopped ({name})")), "{err}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    // The documented fields only (docs/summary-json.md), each of its type.
    let c = observer::sinks::summary_json::check(&summary);
    assert!(c.problems.is_empty(), "{}", c.problems.join("\n"));
    let total: u64 = summary["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["pkts"].as_u64().unwrap())
        .sum();
    assert!(
        total >= 50 * 4 * 2,
        "at least two intervals of 50 QPs x 4 packets: {total}"
    );
    assert_eq!(total % 200, 0, "whole synthetic steps only: {total}");
    // everything counted is in the flow logs: nothing lost on a clean stop
    let flows = pyarrow_read(&out, "flows", &["pkts"], false);
    assert_eq!(flows["sums"]["pkts"], total);
    assert_eq!(summary["output"]["flows"]["rows"], flows["rows"]);
    assert_no_tmp_files(&out);
}

#[test]
fn sigterm_flushes_closes_and_exits_cleanly() {
    stops_cleanly_on(libc::SIGTERM, "SIGTERM");
}

/// A closed SSH session sends SIGHUP: the run stops as on SIGTERM, with every file written.
/// (Before, SIGHUP's default action killed the process and nothing was written.)
#[test]
fn sighup_stops_like_sigterm() {
    stops_cleanly_on(libc::SIGHUP, "SIGHUP");
}

/// An `--out` that can never be written (its parent cannot exist, or a file is in the way)
/// stops the live command at start, before anything is attached, naming `--out`: it used to run
/// on with an error every interval.
#[test]
fn an_out_that_can_never_be_written_fails_at_start() {
    let tmp = TempDir::new("out-never");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    for out in [
        std::path::PathBuf::from("/proc/roce-observe-nope/out"),
        file.join("out"),
    ] {
        let t = std::time::Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
            .args([
                "--synthetic-qps",
                "5",
                "--plain",
                "--duration",
                "5s",
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "{:?}: {err}",
            t.elapsed()
        );
        assert!(
            err.contains(&format!(
                "--out {}: the output directory cannot be created",
                out.display()
            )),
            "{err}"
        );
        assert!(!err.contains(" interval "), "{err}");
    }
}

/// A SIGKILL (an OOM kill, a power loss) in the middle of a 300 s rotation window: every
/// interval the run logged is journaled durably, and the next start writes them into the
/// Parquet file the window would have become. At most the interval being read is lost (before,
/// the whole open window was).
#[test]
fn sigkill_loses_at_most_the_current_interval() {
    let tmp = TempDir::new("sigkill-journal");
    let out = tmp.path().to_path_buf();
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["--synthetic-qps", "50", "--interval", "200ms", "--plain"])
        .args(["--host", "first", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    c.kill().unwrap(); // SIGKILL
    let _ = wait_bounded(&mut c, Duration::from_secs(5));
    let err = std::io::read_to_string(c.stderr.take().unwrap()).unwrap();
    let intervals = err.lines().filter(|l| l.contains(" interval ")).count() as u64;
    assert!(intervals >= 3, "{err}");
    let before = pyarrow_read(&out, "flows", &["pkts"], false);
    assert_eq!(before["rows"], 0, "the window was open: no final file yet");
    // the next start recovers the journal
    let mut c = spawn(&out, &["--duration", "300ms", "--host", "second"]);
    let st = wait_bounded(&mut c, Duration::from_secs(15));
    let err2 = std::io::read_to_string(c.stderr.take().unwrap()).unwrap();
    assert!(st.success(), "{err2}");
    assert!(err2.contains("recovered"), "{err2}");
    let t = pyarrow_read(&out, "flows", &["pkts"], true);
    let first: u64 = t["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["host"] == "first")
        .map(|r| r["pkts"].as_u64().unwrap())
        .sum();
    // every logged interval (50 QPs x 4 packets each), the one being read at the kill at most
    // lost: its rows are journaled only once accounted
    assert!(
        first >= intervals * 200 && first.is_multiple_of(200),
        "{first} packets recovered for {intervals} logged intervals"
    );
    assert_no_tmp_files(&out);
    assert!(
        std::fs::read_dir(out.join(".journal"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "journals left after a clean stop"
    );
}

/// Intervals of many rows (100,000 QPs, the writer's checkpoint threshold) are made
/// durable by checkpoints of their row groups, not by the journal: at the kill the journal
/// holds no rows, and recovery writes every logged interval from the part file and its
/// checkpoint log, read back by pyarrow with every column of the table.
#[test]
fn sigkill_with_checkpointed_intervals_recovers_every_logged_one() {
    const QPS: u64 = 100_000;
    let tmp = TempDir::new("sigkill-ckpt");
    let out = tmp.path().to_path_buf();
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["--synthetic-qps", &QPS.to_string(), "--interval", "1s"])
        .args(["--plain", "--host", "first", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // count the logged intervals as they come; kill after the second
    let (tx, rx) = std::sync::mpsc::channel();
    let err = c.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if l.contains(" interval ") {
                let _ = tx.send(());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let t = Instant::now();
    let mut seen = 0;
    while seen < 2 {
        let left = Duration::from_secs(120).saturating_sub(t.elapsed());
        if rx.recv_timeout(left).is_err() {
            let _ = c.kill();
            panic!(
                "fewer than 2 intervals in 120 s: {}",
                reader.join().unwrap()
            );
        }
        seen += 1;
    }
    let journals: Vec<_> = all_files(&out.join(".journal"));
    c.kill().unwrap(); // SIGKILL
    let _ = wait_bounded(&mut c, Duration::from_secs(5));
    let err = reader.join().unwrap();
    let intervals = err.lines().filter(|l| l.contains(" interval ")).count() as u64;
    let journal: Vec<_> = journals
        .iter()
        .filter(|p| {
            p.to_string_lossy().contains("/flows-") && p.extension().is_some_and(|e| e == "journal")
        })
        .collect();
    assert_eq!(journal.len(), 1, "{journals:?}");
    let size = std::fs::metadata(journal[0]).map(|m| m.len()).unwrap_or(0);
    assert!(
        size < 64 << 10,
        "the journal holds no interval's rows: {size} bytes"
    );
    assert!(
        journals
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "ckpt")),
        "{journals:?}"
    );
    let r = observer::sinks::parquet_files::recover_journals(
        &out,
        "flows",
        Some(&observer::sinks::parquet_files::flows_columns),
    )
    .unwrap();
    assert_eq!(r.rows_lost, 0);
    let t = pyarrow_read(&out, "flows", &["pkts"], false);
    let rows = t["rows"].as_u64().unwrap();
    // every logged interval, the one being read at the kill at most lost
    assert!(
        rows >= intervals * QPS && rows.is_multiple_of(QPS),
        "{rows} rows recovered for {intervals} logged intervals"
    );
    assert_eq!(r.rows, rows);
    assert_eq!(t["sums"]["pkts"].as_u64().unwrap(), 4 * rows, "{t}");
    let columns = t["columns"].as_array().unwrap();
    for f in contract::schema::flows().arrow_schema().fields() {
        assert!(
            columns.iter().any(|c| c == f.name().as_str()),
            "{} missing",
            f.name()
        );
    }
    assert!(
        all_files(&out.join(".journal"))
            .iter()
            .all(|p| !p.to_string_lossy().contains("/flows-"))
    );
}

#[test]
fn sigkill_leaves_only_readable_final_files() {
    let tmp = TempDir::new("sigkill");
    let out = tmp.path().to_path_buf();
    // rotate every second of data, so completed files exist before the kill
    let mut c = spawn(&out, &["--rotate", "1s"]);
    wait_for_file(&out.join("flows"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(700));
    c.kill().unwrap(); // SIGKILL
    let _ = wait_bounded(&mut c, Duration::from_secs(5));
    let files = all_files(&out);
    let parquet: Vec<_> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "parquet"))
        .cloned()
        .collect();
    assert!(!parquet.is_empty(), "{files:?}");
    let bad = unreadable_parquet(&parquet);
    assert!(
        bad.is_empty(),
        "unreadable final files after SIGKILL: {bad:?}"
    );
    // complete intervals only: each flows file holds whole synthetic steps of 50 QPs
    let flows = pyarrow_read(&out, "flows", &["pkts"], false);
    let rows = flows["rows"].as_u64().unwrap();
    assert!(rows > 0 && rows.is_multiple_of(50), "{rows}");
    assert_eq!(flows["sums"]["pkts"].as_u64().unwrap(), rows * 4);
    assert!(
        !out.join("summary.json").exists(),
        "no summary after SIGKILL"
    );
}

/// An output directory that becomes unwritable during the run (here: replaced by a file; the
/// files rotate every second, so a write fails mid-run) is alerted and retried while counting
/// goes on; the exit says the last files were not written.
/// (One that can never be written is refused at start: the test above.)
#[test]
fn unwritable_output_directory_alerts_and_counting_continues() {
    let tmp = TempDir::new("unwritable");
    let out = tmp.path().join("flows-here");
    let c = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args([
            "--synthetic-qps",
            "10",
            "--interval",
            "200ms",
            "--plain",
            "--rotate",
            "1s",
            "--duration",
            "3s",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, b"not a directory").unwrap();
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // counting ran (interval log lines), the failure was alerted, and the end says what was lost
    assert!(err.contains("active_qps=10"), "{err}");
    assert!(err.contains("CRITICAL output_write_failed"), "{err}");
    assert!(
        err.contains("Not a directory") || err.contains("File exists"),
        "{err}"
    );
    assert!(
        !o.status.success(),
        "the last files could not be written: a failing exit"
    );
    assert!(err.contains("finishing the output files"), "{err}");
}

#[test]
fn bad_policy_and_missing_interface_are_clear_errors() {
    let tmp = TempDir::new("cli");
    let dir = tmp.path().to_path_buf();
    let p = dir.join("p.toml");
    std::fs::write(&p, "rdma_priority = 3\n[cnp]\ndscp = 99\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["--iface", "lo", "--policy"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!(
            "{}:3: cnp.dscp: 99 is out of range 0..=63",
            p.display()
        )),
        "{err}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["--iface", "nosuch0", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("no such interface: nosuch0"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for s in [
        "[default: ./roce-flows]",
        "[default: 1s]",
        "--capture-port",
        "--xdp-mode",
        "--max-qps",
        "--duration",
    ] {
        assert!(help.contains(s), "--help lacks {s}:\n{help}");
    }
}

/// An interface name is text from outside: one holding an escape sequence (Linux allows any
/// byte but `/`, `:` and white space) reaches error messages and `--plain` logs as visible text,
/// never as a control sequence for the terminal; and RUST_BACKTRACE=1 (common on build hosts)
/// does not turn an environment error into a stack trace.
#[test]
fn control_characters_in_an_interface_name_are_shown_as_text() {
    let tmp = TempDir::new("cli-esc");
    let o = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["--iface", "no\u{1b}[2Jx", "--plain", "--out"])
        .arg(tmp.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!o.stderr.contains(&0x1b), "raw escape in: {err:?}");
    assert!(err.contains("no\\u{1b}[2Jx"), "{err}");
    assert!(!err.contains("stack backtrace"), "{err}");
    if !require_root("control_characters_in_an_interface_name_are_shown_as_text") {
        return;
    }
    let ns = netns::Netns::new("roesc").unwrap();
    let name = "d\u{1b}[31mx";
    ns.exec(
        "ip",
        &[
            "link", "add", "name", name, "type", "veth", "peer", "name", "esc-peer",
        ],
    )
    .unwrap();
    ns.exec("ip", &["link", "set", name, "up"]).unwrap();
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(env!("CARGO_BIN_EXE_roce-observe"))
        .args([
            "--iface",
            name,
            "--plain",
            "--no-nic",
            "--no-host-qps",
            "--interval",
            "500ms",
            "--duration",
            "2s",
            "--out",
        ])
        .arg(tmp.path().join("live"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!o.stderr.contains(&0x1b), "raw escape in the logs: {err:?}");
    assert!(err.contains("d\\u{1b}[31mx"), "{err}");
}

/// An interface whose name is not UTF-8 (Linux names are bytes) is observed, given as its
/// bytes or spelled with `\xNN` escapes, and named with the escapes in the outputs (before,
/// `--iface` refused it as invalid UTF-8).
#[test]
fn an_interface_name_that_is_not_utf8_is_observed() {
    use std::os::unix::ffi::OsStrExt;
    if !require_root("an_interface_name_that_is_not_utf8_is_observed") {
        return;
    }
    let tmp = TempDir::new("cli-nonutf8");
    let ns = netns::Netns::new("ronu8").unwrap();
    let raw = std::ffi::OsStr::from_bytes(b"v\xff1");
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.name, "ip", "link", "add", "name"])
        .arg(raw)
        .args(["type", "veth", "peer", "name", "nu8-peer"])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.name, "ip", "link", "set"])
        .arg(raw)
        .arg("up")
        .status()
        .unwrap();
    assert!(st.success());
    for (i, arg) in [raw, std::ffi::OsStr::new("v\\xff1")]
        .into_iter()
        .enumerate()
    {
        let out = tmp.path().join(format!("live{i}"));
        let o = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(env!("CARGO_BIN_EXE_roce-observe"))
            .arg("--iface")
            .arg(arg)
            .args([
                "--plain",
                "--no-nic",
                "--no-host-qps",
                "--interval",
                "500ms",
                "--duration",
                "2s",
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{arg:?}: {err}");
        let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
        let j: serde_json::Value = serde_json::from_str(&summary).unwrap();
        assert!(
            j["interfaces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["iface"] == "v\\xff1"),
            "{arg:?}: {summary}"
        );
    }
    // the NIC view reads it too (veth: its driver by ioctl)
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["nic", "--iface"])
        .arg(raw)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("roce-observe nic: v\\xff1") && text.contains("driver veth"),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn unprivileged_run_says_what_is_needed() {
    if !require_root("unprivileged_run_says_what_is_needed") {
        return;
    }
    // A copy nobody can run whatever directory the checkout is in (a clone under /root is not
    // searchable by nobody).
    let tmp = TempDir::new("unpriv");
    let dir = tmp.path().to_path_buf();
    let bin = dir.join("roce-observe");
    std::fs::copy(env!("CARGO_BIN_EXE_roce-observe"), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [(&dir, 0o755), (&bin, 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // drop to nobody without capabilities
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&bin)
        .args(["--iface", "lo", "--plain", "--out", "/tmp"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("not permitted") && err.contains("CAP_BPF"),
        "{err}"
    );
}

/// The capabilities the packages and the DaemonSet grant are exactly what the live command
/// needs: with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON only (root's other capabilities out of
/// its bounding set) it attaches to a veth and writes its summary; without CAP_PERFMON it is
/// refused naming it (it used to get as far as the verifier and fail with "Permission denied").
#[test]
fn the_granted_capabilities_are_enough_and_each_is_needed() {
    if !require_root("the_granted_capabilities_are_enough_and_each_is_needed") {
        return;
    }
    let pair = netns::VethPair::new("cap", "10.77.6.1", "10.77.6.2").unwrap();
    let tmp = TempDir::new("caps");
    let run_with = |caps: &str, out: &str| {
        Command::new("ip")
            .args(["netns", "exec", &pair.b.name, "setpriv"])
            .arg(format!("--bounding-set=-all,{caps}"))
            .arg("--inh-caps=-all")
            .arg(env!("CARGO_BIN_EXE_roce-observe"))
            .args([
                "--iface",
                &pair.b_if,
                "--plain",
                "--duration",
                "2s",
                "--out",
            ])
            .arg(tmp.path().join(out))
            .output()
            .expect("setpriv (util-linux)")
    };
    let granted = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/capabilities"),
    )
    .unwrap();
    let caps: Vec<String> = granted
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    assert_eq!(caps, ["+bpf", "+net_admin", "+perfmon"]);
    let o = run_with(&caps.join(","), "granted");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("attached ingress"), "{err}");
    assert!(tmp.path().join("granted/summary.json").exists());
    for (without, name) in [
        ("+bpf,+net_admin", "CAP_PERFMON"),
        ("+bpf,+perfmon", "CAP_NET_ADMIN"),
        ("+net_admin,+perfmon", "CAP_BPF"),
    ] {
        let o = run_with(without, "refused");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{without}: {err}");
        assert!(
            err.contains("not permitted") && err.contains(&format!("missing: {name}")),
            "{without}: {err}"
        );
    }
}

/// A small tmpfs, unmounted (and its directory removed) on drop, also on panic.
struct Tmpfs {
    dir: std::path::PathBuf,
    // Dropped after `drop` unmounted the tmpfs: removes the directory.
    _tmp: TempDir,
}

impl Tmpfs {
    fn new(name: &str, size: &str) -> Tmpfs {
        let tmp = TempDir::new(name);
        let dir = tmp.path().to_path_buf();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                &dir.display().to_string(),
            ],
        )
        .expect("mount tmpfs");
        Tmpfs { dir, _tmp: tmp }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = run("umount", &[&self.dir.display().to_string()]);
    }
}

#[test]
fn disk_full_alerts_keeps_counting_and_recovers() {
    if !require_root("disk_full_alerts_keeps_counting_and_recovers") {
        return;
    }
    let fs = Tmpfs::new("diskfull", "1m");
    let out = fs.dir.join("out");
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut cfg = CollectorConfig::new(out.clone(), "h", "live", policy.clone());
    cfg.rotate_secs = 1;
    let mut col = Collector::new(cfg).unwrap();
    let mut src = Synthetic::new(policy.expected, 200, 2);
    let t0 = 1_795_239_299_000_000_000u64;
    let s = 1_000_000_000u64;
    // fill the tmpfs
    let filler = fs.dir.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 1 << 20]);
    let mut t = t0;
    for _ in 0..4 {
        t += s;
        src.step(t);
        col.on_snapshot(&src.dp.snapshot("e", t, None))
            .expect("counting continues on a full disk");
    }
    let st = col.output_stats();
    assert!(st["flows"]["write_errors"].as_u64().unwrap() > 0, "{st}");
    assert!(st["flows"]["pending_files"].as_u64().unwrap() > 0, "{st}");
    assert!(
        col.alert_counts()
            .get(rule::OUTPUT_WRITE_FAILED)
            .copied()
            .unwrap_or(0)
            >= 1
    );
    // space returns: pending files are written on the next intervals
    std::fs::remove_file(&filler).unwrap();
    for _ in 0..2 {
        t += s;
        src.step(t);
        col.on_snapshot(&src.dp.snapshot("e", t, None)).unwrap();
    }
    let summary = col.finish().expect("finish after recovery");
    assert_eq!(summary["output"]["flows"]["rows_lost"], 0);
    assert_eq!(summary["output"]["flows"]["pending_files"], 0);
    let flows = pyarrow_read(&out, "flows", &["pkts"], false);
    assert_eq!(
        flows["sums"]["pkts"],
        6 * 200 * 2,
        "every interval's rows reached the disk"
    );
    let al = alerts_jsonl(&out);
    assert!(
        al.iter()
            .any(|a| a["rule"] == rule::OUTPUT_WRITE_FAILED && a["severity"] == "critical"),
        "{al:?}"
    );
    // every alert once, every line whole (a write cut by the full disk is undone, not retried
    // on top of its first half)
    let emitted: u64 = summary["alerts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(al.len() as u64, emitted, "{al:?}");
    let parquet: Vec<_> = all_files(&out)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "parquet"))
        .collect();
    assert!(unreadable_parquet(&parquet).is_empty());
}
