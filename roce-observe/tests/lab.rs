//! The lab as integration tests: every scenario on a fresh namespaced fabric, each asserting its
//! injected-vs-observed table. `live_*` run the real roce-observe binary (XDP/tc) as the
//! observer; `userspace_*` run the labelled fallback (AF_PACKET capture + the userspace
//! datapath), which checks the lab's ground truth and the shared per-QP logic.
//! Needs root (namespaces, nftables, AF_PACKET, BPF): skipped outside CI, a failure under CI=true.

use std::sync::Mutex;

use lab::{LabArgs, ObserverMode};
use netns::run;
use test_support::{TempDir, require, require_root};

/// One fabric at a time: the scenarios share two cores with everything else.
static SERIAL: Mutex<()> = Mutex::new(());

fn scenario(name: &str, mode: ObserverMode, run_no: usize) -> lab::report::ScenarioReport {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = LabArgs {
        scenario: name.into(),
        observer: mode,
        observer_bin: Some(env!("CARGO_BIN_EXE_roce-observe").into()),
        quiet_observer: true,
        ..LabArgs::default()
    };
    let r =
        lab::run_scenario(&args, name, run_no).unwrap_or_else(|e| panic!("scenario {name}: {e}"));
    println!("{}", r.render());
    // Torn down: no namespace of this run is left.
    let list = run("ip", &["netns", "list"]).unwrap();
    let tag = format!("-{}-{run_no}", std::process::id());
    assert!(
        !list.lines().any(|l| l.contains(&tag)),
        "namespaces left behind:\n{list}"
    );
    assert!(
        r.ok(),
        "scenario {name}: injected and observed disagree:\n{}",
        r.disagreements().join("\n")
    );
    r
}

fn row(r: &lab::report::ScenarioReport, prefix: &str) -> u64 {
    r.rows
        .iter()
        .find(|x| x.what.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix}"))
        .injected
}

/// The per-QP re-marking rows (`QP 0x... data FIELD a → b`): (title, injected), each of which
/// the report has already compared with the path view's count at h2's ingress.
fn qp_rows(r: &lab::report::ScenarioReport) -> Vec<(String, u64)> {
    r.rows
        .iter()
        .filter(|x| x.what.starts_with("QP 0x"))
        .map(|x| {
            assert_eq!(x.observed, Some(x.injected), "{}", x.what);
            (x.what.clone(), x.injected)
        })
        .collect()
}

/// The trust-boundary scenarios: each per-QP re-marking happened (a QP re-marked whole has
/// all of its data packets re-marked, one re-marked in part some), the path view counts the
/// same changes per QP at h2's ingress (checked by the report), and its lines say which go
/// against the policy.
fn assert_remarked(r: &lab::report::ScenarioReport, want: &[(&str, bool)]) {
    let rows = qp_rows(r);
    let titles: Vec<&str> = rows.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        titles,
        want.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        "per-QP rows"
    );
    let sent_per_qp = row(r, "RoCE data packets sent") / 4;
    for ((t, n), (_, whole)) in rows.iter().zip(want) {
        if *whole {
            assert_eq!(*n, sent_per_qp, "{t}: every data packet of the QP");
        } else {
            assert!(
                *n > 0 && *n < sent_per_qp,
                "{t}: some of the QP's packets ({n})"
            );
        }
    }
    assert_eq!(row(r, "marking changes h2 → h1"), 0);
    assert!(
        r.path.iter().any(|l| l.contains("FAIL data")),
        "{:#?}",
        r.path
    );
}

/// Each scenario must actually contain its fault (a table of zeros would agree trivially).
fn assert_fault_present(name: &str, r: &lab::report::ScenarioReport) {
    match name {
        "clean" => {
            assert_eq!(row(r, "data packets dropped"), 0);
            assert_eq!(row(r, "resent"), 0);
            assert_eq!(row(r, "CNPs"), 0);
            assert_latency_measured(r, "0.000 ms");
        }
        "delay" => assert_latency_measured(r, "2.000 ms"),
        "delay20" => assert_latency_measured(r, "20.000 ms"),
        "lossy" => {
            assert!(row(r, "data packets dropped") > 0);
            assert!(row(r, "NAKs") > 0);
            assert!(row(r, "PSN gaps") > 0);
            assert!(row(r, "resent") >= row(r, "data packets dropped"));
        }
        "bleached" => assert!(row(r, "data not at DSCP") > 0),
        "congested" => {
            assert!(row(r, "CE-marked") > 0);
            assert!(row(r, "CNPs") > 0 && row(r, "CNPs") <= row(r, "CE-marked"));
            assert!(row(r, "RNR NAKs") > 0);
        }
        "pfc-storm" => {
            assert_eq!(row(r, "PFC XOFF on priority 3"), 2500);
            assert_eq!(row(r, "PFC XOFF on priority 5"), 20);
            assert_eq!(row(r, "802.3x PAUSE"), 4);
        }
        "pcp-remark" => assert_remarked(
            r,
            &[
                ("QP 0x000201 data PCP 3 → 0", false),
                ("QP 0x000202 data PCP 3 → 0", true),
            ],
        ),
        "dscp-remap" => {
            assert_remarked(
                r,
                &[
                    ("QP 0x000201 data DSCP 26 → 24", true),
                    ("QP 0x000203 data DSCP 26 → 24", false),
                    ("QP 0x000201 data PCP 0 → 3", true),
                    ("QP 0x000202 data PCP 0 → 3", true),
                    ("QP 0x000203 data PCP 0 → 3", true),
                    ("QP 0x000204 data PCP 0 → 3", true),
                ],
            );
            // the priority it maps to is the right one: not against the policy
            assert!(
                r.path.iter().any(|l| l.contains("ok   data PCP 0 → 3")),
                "{:#?}",
                r.path
            );
            assert!(!r.path.iter().any(|l| l.contains("FAIL data PCP")));
        }
        "ecn-bleach" => assert_remarked(
            r,
            &[
                ("QP 0x000201 data ECN 2 → 0", false),
                ("QP 0x000202 data ECN 2 → 0", true),
            ],
        ),
        _ => unreachable!(),
    }
}

/// The latency scenarios measured the ACK round trips of h1's capture against the responder's
/// delay (what they checked is in the report; `ok()` requires every check to hold).
fn assert_latency_measured(r: &lab::report::ScenarioReport, delay: &str) {
    assert_eq!(r.latency.len(), 3, "{:#?}", r.latency);
    assert!(r.latency.iter().all(|c| c.ok), "{:#?}", r.latency);
    assert!(
        r.latency
            .iter()
            .any(|c| c.what == format!("every ACK round trip at least the delay ({delay})")),
        "{:#?}",
        r.latency
    );
}

macro_rules! lab_tests {
    ($($fn_user:ident, $fn_live:ident, $name:literal, $n:literal;)*) => {$(
        #[test]
        fn $fn_user() {
            if !require_root(stringify!($fn_user)) {
                return;
            }
            let r = scenario($name, ObserverMode::Userspace, $n);
            assert_fault_present($name, &r);
            assert!(!r.alerts.is_empty(), "alerts must be checked");
        }

        #[test]
        fn $fn_live() {
            if !require_root(stringify!($fn_live)) {
                return;
            }
            let r = scenario($name, ObserverMode::Live, 100 + $n);
            assert_fault_present($name, &r);
            assert!(!r.alerts.is_empty(), "alerts must be checked");
        }
    )*};
}

lab_tests! {
    userspace_clean, live_clean, "clean", 1;
    userspace_delay, live_delay, "delay", 9;
    userspace_delay20, live_delay20, "delay20", 10;
    userspace_lossy, live_lossy, "lossy", 2;
    userspace_bleached, live_bleached, "bleached", 3;
    userspace_congested, live_congested, "congested", 4;
    userspace_pfc_storm, live_pfc_storm, "pfc-storm", 5;
    userspace_pcp_remark, live_pcp_remark, "pcp-remark", 6;
    userspace_dscp_remap, live_dscp_remap, "dscp-remap", 7;
    userspace_ecn_bleach, live_ecn_bleach, "ecn-bleach", 8;
}

fn tshark_count(pcap: &std::path::Path, filter: &str) -> u64 {
    let out = run(
        "tshark",
        &[
            "-r",
            &pcap.to_string_lossy(),
            "-Y",
            filter,
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
    )
    .unwrap_or_else(|e| panic!("tshark: {e}"));
    out.lines().filter(|l| !l.trim().is_empty()).count() as u64
}

/// Wireshark's own InfiniBand dissector, reading the receiver's capture, counts what the lab's
/// table says: the emulated NICs' frames are real RoCEv2 to an independent decoder.
#[test]
fn userspace_congested_capture_decodes_in_tshark_as_the_table_says() {
    if !require_root("userspace_congested_capture_decodes_in_tshark_as_the_table_says") {
        return;
    }
    if !require(
        run("tshark", &["-v"]).is_ok(),
        "userspace_congested_capture_decodes_in_tshark_as_the_table_says",
        "tshark",
    ) {
        return;
    }
    let tmp = TempDir::new("lab-pcap");
    let dir = tmp.path().to_path_buf();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = LabArgs {
        scenario: "congested".into(),
        observer: ObserverMode::Userspace,
        pcap: Some(dir.clone()),
        ..LabArgs::default()
    };
    let r = lab::run_scenario(&args, "congested", 50).expect("congested scenario");
    assert!(r.ok(), "{}", r.disagreements().join("\n"));
    let p = dir.join("congested-h2-eth0.pcap");
    let from_h1 = "ip.src==10.77.0.1 && infiniband.bth.opcode < 0x11";
    assert_eq!(
        tshark_count(&p, from_h1),
        row(&r, "RoCE data packets sent") - row(&r, "data packets dropped")
    );
    assert_eq!(
        tshark_count(&p, &format!("{from_h1} && ip.dsfield.ecn == 3")),
        row(&r, "CE-marked")
    );
    assert_eq!(
        tshark_count(
            &p,
            "ip.src==10.77.0.2 && infiniband.bth.opcode == 0x81 && ip.dsfield.dscp == 48"
        ),
        row(&r, "CNPs")
    );
    assert_eq!(
        tshark_count(&p, "infiniband.aeth.syndrome == 0x2e"),
        row(&r, "RNR NAKs")
    );
    assert!(row(&r, "RNR NAKs") > 0);
}

/// A scenario that fails (here: the observer binary does not exist) still tears the fabric
/// down, and says what failed.
#[test]
fn a_failing_run_leaves_no_namespace() {
    if !require_root("a_failing_run_leaves_no_namespace") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = LabArgs {
        scenario: "clean".into(),
        observer: ObserverMode::Live,
        observer_bin: Some("/nonexistent/roce-observe".into()),
        quiet_observer: true,
        ..LabArgs::default()
    };
    let e = match lab::run_scenario(&args, "clean", 60) {
        Ok(_) => panic!("a run without an observer binary must fail"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("roce-observe"), "error names the observer: {e}");
    let list = run("ip", &["netns", "list"]).unwrap();
    let tag = format!("-{}-60", std::process::id());
    assert!(
        !list.lines().any(|l| l.contains(&tag)),
        "namespaces left behind:\n{list}"
    );
}

/// Ctrl-C (SIGINT) or SIGTERM in the middle of a run: the lab stops, exits non-zero, and leaves
/// no namespace, no observer process and no temporary output behind.
fn interrupted(mode: &str, sig: i32, after: std::time::Duration) {
    use std::process::{Command, Stdio};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args([
            "lab",
            "--scenario",
            "lossy",
            "--rounds",
            "1000",
            "--quiet-observer",
            "--observer",
            mode,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce-observe lab");
    let pid = child.id();
    std::thread::sleep(after);
    let before = run("ip", &["netns", "list"]).unwrap();
    assert!(
        before.contains(&format!("ro-lab-h1-{pid}-0")),
        "the fabric was up:\n{before}"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, sig) };
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the lab did not stop within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "an interrupted lab must exit non-zero");
    assert!(
        err.contains("interrupted"),
        "says it was interrupted: {err}"
    );
    let after_list = run("ip", &["netns", "list"]).unwrap();
    assert!(
        !after_list.contains(&format!("-{pid}-")),
        "namespaces left behind:\n{after_list}"
    );
    let out = std::env::temp_dir().join(format!("ro-lab-out-{pid}"));
    assert!(!out.exists(), "{} left behind", out.display());
    let ps = run("ps", &["-eo", "args"]).unwrap();
    assert!(
        !ps.lines().any(|l| l.contains(&format!("ro-lab-out-{pid}"))),
        "an observer is still running:\n{ps}"
    );
}

#[test]
fn sigint_tears_the_fabric_down() {
    if !require_root("sigint_tears_the_fabric_down") {
        return;
    }
    interrupted(
        "userspace",
        libc::SIGINT,
        std::time::Duration::from_millis(1500),
    );
}

#[test]
fn sigterm_with_live_observers_tears_everything_down() {
    if !require_root("sigterm_with_live_observers_tears_everything_down") {
        return;
    }
    interrupted("live", libc::SIGTERM, std::time::Duration::from_secs(4));
}
