//! The live command end to end, in network namespaces: `roce-observe --iface veth-b` runs inside
//! namespace B (real XDP + tc egress), frames with known marking faults, a PSN gap, PFC and
//! PAUSE are sent from namespace A with AF_PACKET. Asserts the exact alerts (with the time a
//! mis-marked packet takes to be alerted), the Parquet rows read back by pyarrow summing to what
//! was sent, a clean SIGTERM (flush, close, programs detached), and after a SIGKILL: every
//! final-named file readable and nothing left attached.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use netns::{Netns, VethPair};
use observer::pipeline::rule;
use observer::sources::synthetic::{Roce, pause_frame, pfc_frame};
use serde_json::Value;
use test_support::require_root;

use test_support::TempDir;
use test_support::collector::*;

/// (rule, qp, class, priority)
type AlertId = (String, Option<u64>, Option<String>, Option<u64>);

const A: [u8; 4] = [10, 77, 1, 1];
const B: [u8; 4] = [10, 77, 1, 2];
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];

/// Sends raw frames out of `iface` from inside namespace `ns` (AF_PACKET, SOCK_RAW).
fn send_raw(ns: &Netns, iface: &str, frames: &[Vec<u8>]) {
    netns::send_raw(ns, iface, frames).unwrap();
}

/// The observer running in a namespace ([`NsProcess`]).
struct Observer;

impl Observer {
    fn start(
        ns: &Netns,
        iface: &str,
        out: &std::path::Path,
        policy: &std::path::Path,
    ) -> NsProcess {
        Self::start_with(ns, iface, out, policy, &[])
    }

    fn start_with(
        ns: &Netns,
        iface: &str,
        out: &std::path::Path,
        policy: &std::path::Path,
        extra: &[&str],
    ) -> NsProcess {
        let mut args: Vec<std::ffi::OsString> =
            ["--iface", iface, "--plain", "--interval", "1s", "--out"]
                .iter()
                .map(|a| a.into())
                .collect();
        args.push(out.into());
        args.push("--policy".into());
        args.push(policy.into());
        args.extend(extra.iter().map(|a| a.into()));
        NsProcess::roce_observe(env!("CARGO_BIN_EXE_roce-observe"), ns, &args, 1)
    }
}

fn wait_alert(out: &std::path::Path, rule: &str, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if alerts_jsonl(out).iter().any(|a| a["rule"] == rule) {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

fn nothing_attached(ns: &Netns, iface: &str) -> Result<(), String> {
    let link = ns
        .exec("ip", &["link", "show", "dev", iface])
        .map_err(|e| contract::error::chain(&e))?;
    if link.contains("xdp") {
        return Err(format!("XDP still attached: {link}"));
    }
    let bpftool = ns
        .exec("bpftool", &["net", "show", "dev", iface])
        .unwrap_or_default();
    if bpftool.contains("roce_") {
        return Err(format!("programs still attached: {bpftool}"));
    }
    Ok(())
}

fn fault_frames() -> (Vec<Vec<u8>>, u64) {
    let mut f = Vec::new();
    let mut roce = 0;
    let mut push = |r: Roce, f: &mut Vec<Vec<u8>>| {
        f.push(r.frame());
        roce += 1;
    };
    for psn in 0..10 {
        push(Roce::data(A, B, 0x11, psn), &mut f);
    }
    for psn in 0..5 {
        let mut r = Roce::data(A, B, 0x12, psn);
        r.dscp = 0;
        push(r, &mut f);
    }
    for psn in 0..4 {
        let mut r = Roce::data(A, B, 0x13, psn);
        r.ecn = 0;
        push(r, &mut f);
    }
    for psn in [0, 1, 2, 5, 6] {
        push(Roce::data(A, B, 0x14, psn), &mut f);
    }
    let mut cnp = Roce::data(A, B, 0x24, 0);
    cnp.opcode = 0x81;
    cnp.dscp = 46;
    cnp.ecn = 0;
    cnp.payload = 16;
    push(cnp, &mut f);
    for _ in 0..3 {
        f.push(pfc_frame(MAC, 1 << 3, [0, 0, 0, 200, 0, 0, 0, 0]));
    }
    for _ in 0..2 {
        f.push(pfc_frame(MAC, 1 << 5, [0, 0, 0, 0, 0, 100, 0, 0]));
    }
    f.push(pause_frame(MAC, 9));
    (f, roce)
}

#[test]
fn live_observer_alerts_and_logs_what_was_sent() {
    if !require_root("live_observer_alerts_and_logs_what_was_sent") {
        return;
    }
    let pair = VethPair::new("cn", "10.77.1.1", "10.77.1.2").unwrap();
    let tmp = TempDir::new("netns");
    let out = tmp.path().to_path_buf();
    let policy = out.join("policy.toml");
    // pfc_without_ecn is left to the datapath test (it depends on PFC and RoCE sharing an interval)
    std::fs::write(&policy, "profile = \"nvidia\"\n[thresholds]\npfc_without_ecn_min_xoff = 1000000\nhold_down_s = 60\n").unwrap();
    let flows_out = out.join("run");
    let mut obs = Observer::start(&pair.b, &pair.b_if, &flows_out, &policy);
    // a second observer on the same interface: the XDP slot is taken, said clearly
    let taken = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.b.name,
            env!("CARGO_BIN_EXE_roce-observe"),
            "--iface",
            &pair.b_if,
            "--plain",
            "--xdp-mode",
            "native",
            "--duration",
            "1s",
        ])
        .arg("--out")
        .arg(out.join("second"))
        .output()
        .unwrap();
    let terr = String::from_utf8_lossy(&taken.stderr);
    assert!(!taken.status.success());
    assert!(
        terr.contains("already attached") && terr.contains("--xdp-mode generic"),
        "{terr}"
    );
    let second = |mode: &str, iface: &str, dir: &str| {
        Command::new("ip")
            .args(["netns", "exec", &pair.b.name])
            .arg(env!("CARGO_BIN_EXE_roce-observe"))
            .args(["--iface", iface, "--plain", "--no-nic", "--xdp-mode", mode])
            .args(["--duration", "1s", "--out"])
            .arg(out.join(dir))
            .output()
            .unwrap()
    };
    // ... in generic mode it is not told to use generic mode
    let g = second("generic", &pair.b_if, "second-generic");
    let gerr = String::from_utf8_lossy(&g.stderr);
    assert!(!g.status.success());
    assert!(gerr.contains("already attached"), "{gerr}");
    assert!(!gerr.contains("run with --xdp-mode generic"), "{gerr}");
    // native XDP on an interface whose driver has none (loopback): said so, not a bare
    // bpf_link_create error
    let n = second("native", "lo", "lo-native");
    let nerr = String::from_utf8_lossy(&n.stderr);
    assert!(!n.status.success());
    assert!(nerr.contains("has no native XDP"), "{nerr}");
    let (frames, roce) = fault_frames();
    send_raw(&pair.a, &pair.a_if, &frames);
    let latency = wait_alert(&flows_out, rule::DSCP_MISMATCH, Duration::from_secs(3))
        .unwrap_or_else(|| panic!("no dscp_mismatch alert within 3 s:\n{}", obs.err()));
    eprintln!("mis-marked packet alerted {latency:?} after sending (interval 1 s)");
    assert!(latency < Duration::from_millis(1500), "{latency:?}");
    // let an interval pass so the deltas are read, then stop
    std::thread::sleep(Duration::from_millis(1300));
    let st = obs.signal(libc::SIGTERM);
    let err = obs.err();
    assert!(st.success(), "exit {st:?}:\n{err}");
    assert!(err.contains("stopped (SIGTERM)"), "{err}");
    assert!(
        err.contains("no RDMA device is bound"),
        "start-up diagnosis missing:\n{err}"
    );
    // --plain: the start-up lines are log records like the rest (one format), and the attach
    // is said once (it was said twice, once bare and once as a log record)
    let attached: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("attached ingress"))
        .collect();
    assert_eq!(attached.len(), 1, "{err}");
    for l in err
        .lines()
        .filter(|l| l.contains("attached ingress") || l.contains("no RDMA device is bound"))
    {
        assert!(
            l.starts_with("20") && l.contains(" INFO "),
            "not a log record: {l}"
        );
    }
    nothing_attached(&pair.b, &pair.b_if).unwrap();

    // exact alerts: one alert per (rule, key), totals of occurrences over alert + summary
    let al = alerts_jsonl(&flows_out);
    let mut totals: BTreeMap<AlertId, u64> = BTreeMap::new();
    let mut firsts: BTreeMap<AlertId, u64> = BTreeMap::new();
    for a in &al {
        let k = (
            a["rule"].as_str().unwrap().to_string(),
            a["qp"].as_u64(),
            a["class"].as_str().map(String::from),
            a["priority"].as_u64(),
        );
        *totals.entry(k.clone()).or_default() += a["count"].as_u64().unwrap();
        if a["summary"] == false {
            *firsts.entry(k).or_default() += 1;
        }
    }
    let s = |x: &str| Some(x.to_string());
    let want: BTreeMap<_, _> = [
        (
            (rule::DSCP_MISMATCH.to_string(), Some(0x12), s("data"), None),
            5,
        ),
        (
            (rule::DSCP_MISMATCH.to_string(), Some(0x24), s("cnp"), None),
            1,
        ),
        ((rule::NOT_ECT.to_string(), Some(0x13), s("data"), None), 4),
        ((rule::PSN_GAP.to_string(), Some(0x14), None, None), 1),
        (
            (rule::PFC_WRONG_PRIORITY.to_string(), None, None, Some(5)),
            2,
        ),
        ((rule::PAUSE_802_3X.to_string(), None, None, None), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        totals,
        want,
        "alerts:\n{}",
        al.iter()
            .map(|a| a["message"].to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        firsts.values().all(|&n| n == 1),
        "one alert per key within the hold-down: {firsts:?}"
    );
    let d = al
        .iter()
        .find(|a| a["rule"] == rule::DSCP_MISMATCH && a["qp"] == 0x12)
        .unwrap();
    assert_eq!(
        (d["src"].as_str(), d["dst"].as_str(), d["iface"].as_str()),
        (Some("10.77.1.1"), Some("10.77.1.2"), Some("veth-b"))
    );
    assert_eq!(d["origin"], "event");

    // Parquet read back by pyarrow: sums equal what was sent
    let flows = pyarrow_read(
        &flows_out,
        "flows",
        &["pkts", "psn_gaps", "psn_missing", "cnp", "not_ect_data"],
        false,
    );
    assert_eq!(flows["sums"]["pkts"], roce);
    assert_eq!(flows["sums"]["psn_gaps"], 1);
    assert_eq!(flows["sums"]["psn_missing"], 2);
    assert_eq!(flows["sums"]["cnp"], 1);
    assert_eq!(flows["sums"]["not_ect_data"], 4);
    let ifs = pyarrow_read(
        &flows_out,
        "interfaces",
        &[
            "roce",
            "pfc_frames",
            "pfc_xoff_p3",
            "pfc_xoff_p5",
            "pfc_quanta_p3",
            "pause_frames",
            "pause_events_lost",
        ],
        true,
    );
    assert_eq!(ifs["sums"]["roce"], roce);
    // the PAUSES ring carried every PFC frame: the densest second holds the 3 XOFF on p3, and
    // the paused time is at most the 3 requested pauses (they overlap: sent back to back)
    assert_eq!(ifs["sums"]["pause_events_lost"], 0);
    let recs = ifs["records"].as_array().unwrap();
    let peak = recs
        .iter()
        .map(|r| r["pfc_xoff_peak_1s_p3"].as_u64().unwrap())
        .max();
    assert_eq!(peak, Some(3), "{recs:?}");
    for r in recs {
        if let (Some(bps), Some(paused)) =
            (r["link_speed_bps"].as_f64(), r["pfc_paused_s_p3"].as_f64())
        {
            assert!(paused <= 3.0 * 200.0 * 512.0 / bps + 1e-12, "{r}");
        }
    }
    let paused: f64 = recs
        .iter()
        .filter_map(|r| r["pfc_paused_s_p3"].as_f64())
        .sum();
    let speed = recs.iter().find_map(|r| r["link_speed_bps"].as_f64());
    if let Some(bps) = speed {
        assert!(
            paused >= 200.0 * 512.0 / bps - 1e-9,
            "paused {paused} at {bps} bit/s"
        );
    }
    assert_eq!(ifs["sums"]["pfc_frames"], 5);
    assert_eq!(ifs["sums"]["pfc_xoff_p3"], 3);
    assert_eq!(ifs["sums"]["pfc_xoff_p5"], 2);
    assert_eq!(ifs["sums"]["pfc_quanta_p3"], 600);
    assert_eq!(ifs["sums"]["pause_frames"], 1);
    // The NIC source ran on the veth: real ethtool reads every interval into the nic table;
    // DCB and RDMA are reported unavailable at start-up, not as errors.
    let nic = pyarrow_read(&flows_out, "nic", &[], true);
    assert!(nic["rows"].as_u64().unwrap() >= 1, "{nic}");
    assert_eq!(nic["records"][0]["iface"], pair.b_if.as_str());
    assert_eq!(nic["records"][0]["rdma_device"], Value::Null);
    let err = obs.err();
    assert!(err.contains("NIC source EthtoolStats: read"), "{err}");
    assert!(err.contains("NIC source Dcb: unavailable"), "{err}");
    assert!(!err.contains("FAILED"), "{err}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(flows_out.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["alerts"][rule::PAUSE_802_3X], 1);
    let parquet: Vec<_> = all_files(&flows_out)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "parquet"))
        .collect();
    assert!(unreadable_parquet(&parquet).is_empty());

    // SIGKILL: final files readable, nothing left attached (bpf links die with the process)
    let kill_out = out.join("killed");
    let mut obs = Observer::start(&pair.b, &pair.b_if, &kill_out, &policy);
    send_raw(&pair.a, &pair.a_if, &frames);
    std::thread::sleep(Duration::from_millis(2500));
    let _ = obs.signal(libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(300));
    nothing_attached(&pair.b, &pair.b_if).unwrap();
    let files = all_files(&kill_out);
    let parquet: Vec<_> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "parquet"))
        .cloned()
        .collect();
    assert!(unreadable_parquet(&parquet).is_empty(), "{files:?}");
    assert!(
        alerts_jsonl(&kill_out)
            .iter()
            .any(|a| a["rule"] == rule::DSCP_MISMATCH),
        "alerts.jsonl is written as alerts happen"
    );
    drop(pair);
}

/// The packet clock ticks in the kernel: packets that arrive while roce-observe is stopped
/// (SIGSTOP) get their own times, not the time it was stopped at.
#[test]
fn packet_times_go_on_while_the_observer_is_stopped() {
    if !require_root("packet_times_go_on_while_the_observer_is_stopped") {
        return;
    }
    let pair = VethPair::new("cs", "10.77.4.1", "10.77.4.2").unwrap();
    let tmp = TempDir::new("netns-sigstop");
    let out = tmp.path().to_path_buf();
    let policy = out.join("policy.toml");
    std::fs::write(&policy, "profile = \"nvidia\"\n").unwrap();
    let run = out.join("run");
    let mut obs = Observer::start(&pair.b, &pair.b_if, &run, &policy);
    // Each packet leaves somewhere between the start and the end of its send_raw (a process
    // start, slow on a loaded machine): the true gap lies between these bounds.
    let a_start = std::time::Instant::now();
    send_raw(&pair.a, &pair.a_if, &[Roce::data(A, B, 0x700, 0).frame()]);
    let a_end = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(obs.child.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1500));
    let b_start = std::time::Instant::now();
    send_raw(&pair.a, &pair.a_if, &[Roce::data(A, B, 0x701, 0).frame()]);
    let b_end = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: as above.
    unsafe { libc::kill(obs.child.id() as i32, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(1200));
    let st = obs.signal(libc::SIGTERM);
    assert!(st.success(), "{}", obs.err());
    let flows = pyarrow_read(&run, "flows", &["pkts"], true);
    let first_pkt = |qp: u64| -> String {
        let r = flows["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["qp"] == qp)
            .unwrap_or_else(|| panic!("no row of qp {qp}: {flows}"));
        r["first_pkt"].as_str().unwrap().to_string()
    };
    let secs = |s: String| -> f64 {
        // "YYYY-MM-DD HH:MM:SS.ffffff(+00:00)": the seconds of the day suffice here
        let t = s.split(' ').nth(1).unwrap();
        let t = &t[..t.find('+').unwrap_or(t.len())];
        let p: Vec<f64> = t.split(':').map(|x| x.parse().unwrap()).collect();
        p[0] * 3600.0 + p[1] * 60.0 + p[2]
    };
    let (a, b) = (secs(first_pkt(0x700)), secs(first_pkt(0x701)));
    let gap = (b - a).rem_euclid(86400.0);
    // 50 ms of slack for the two clocks (the kernel's and ours); the lower bound is at least
    // 1.7 s, so a clock frozen while the observer was stopped (gap 0) fails
    let lo = (b_start - a_end).as_secs_f64() - 0.05;
    let hi = (b_end - a_start).as_secs_f64() + 0.05;
    assert!(
        (lo..=hi).contains(&gap),
        "second packet stamped {gap} s after the first (sent between {lo} and {hi} s later; 0 \
         would be a frozen clock)"
    );
}

#[test]
fn full_map_eviction_keeps_every_packet_accounted() {
    if !require_root("full_map_eviction_keeps_every_packet_accounted") {
        return;
    }
    let pair = VethPair::new("ce", "10.77.2.1", "10.77.2.2").unwrap();
    let tmp = TempDir::new("netns-evict");
    let out = tmp.path().to_path_buf();
    let policy = out.join("policy.toml");
    std::fs::write(&policy, "profile = \"nvidia\"\n").unwrap();
    let run = out.join("run");
    let mut obs = Observer::start_with(
        &pair.b,
        &pair.b_if,
        &run,
        &policy,
        &["--max-qps", "20", "--idle-evict", "1s"],
    );
    let burst = |first: u32, n: u32| -> Vec<Vec<u8>> {
        (first..first + n)
            .flat_map(|q| (0..2).map(move |psn| Roce::data(A, B, 0x500 + q, psn).frame()))
            .collect()
    };
    // 30 QPs into a map of 20: 10 keys are not tracked (their packets counted untracked)
    send_raw(&pair.a, &pair.a_if, &burst(0, 30));
    // idle for > 1 s in a 90 % full map: idle keys are evicted with their final values
    std::thread::sleep(Duration::from_millis(3200));
    send_raw(&pair.a, &pair.a_if, &burst(100, 10));
    std::thread::sleep(Duration::from_millis(1500));
    let st = obs.signal(libc::SIGTERM);
    assert!(st.success(), "{}", obs.err());
    let sent = 40 * 2;
    let flows = pyarrow_read(&run, "flows", &["pkts"], true);
    let ifs = pyarrow_read(
        &run,
        "interfaces",
        &["roce", "roce_untracked", "qp_insert_failed", "evictions"],
        false,
    );
    assert_eq!(ifs["sums"]["roce"], sent);
    let tracked = flows["sums"]["pkts"].as_u64().unwrap();
    let untracked = ifs["sums"]["roce_untracked"].as_u64().unwrap();
    assert_eq!(
        tracked + untracked,
        sent,
        "every RoCE packet is in a flow row or counted untracked"
    );
    assert!(ifs["sums"]["qp_insert_failed"].as_u64().unwrap() >= 10);
    let evictions = ifs["sums"]["evictions"].as_u64().unwrap();
    assert!(evictions >= 1, "no eviction: {}", obs.err());
    let evicted_rows: Vec<_> = flows["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["evicted"] == true)
        .collect();
    assert_eq!(
        evicted_rows.len() as u64,
        evictions,
        "every eviction has its last row flagged evicted"
    );
    assert!(
        evicted_rows.iter().all(|r| r["pkts"] == 0),
        "idle keys had no packets since their last row: {evicted_rows:?}"
    );
    // new keys took the freed slots
    let late: u64 = flows["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["qp"].as_u64().unwrap() >= 0x500 + 100)
        .map(|r| r["pkts"].as_u64().unwrap())
        .sum();
    assert!(late >= 2, "no new QP tracked after eviction");
    let al = alerts_jsonl(&run);
    assert!(al.iter().any(|a| a["rule"] == rule::QP_MAP_FULL), "{al:?}");
    drop(pair);
}

/// The observed interface is deleted and re-created with the same name: `iface_gone` is raised
/// at once, the programs are attached again to the new interface, and the packets of both
/// lives are counted (before, the collector wrote rows of zeros and never counted the new
/// interface's traffic).
#[test]
fn a_deleted_and_recreated_interface_is_alerted_and_observed_again() {
    if !require_root("a_deleted_and_recreated_interface_is_alerted_and_observed_again") {
        return;
    }
    let pair = VethPair::new("cg", "10.77.3.1", "10.77.3.2").unwrap();
    let tmp = TempDir::new("netns-gone");
    let out = tmp.path().to_path_buf();
    let policy = out.join("policy.toml");
    std::fs::write(&policy, "profile = \"nvidia\"\n").unwrap();
    let run = out.join("run");
    let mut obs = Observer::start_with(&pair.b, &pair.b_if, &run, &policy, &["--no-nic"]);
    let data = |qp: u32, n: u32| -> Vec<Vec<u8>> {
        (0..n)
            .map(|psn| Roce::data(A, B, qp, psn).frame())
            .collect()
    };
    send_raw(&pair.a, &pair.a_if, &data(0x31, 10));
    std::thread::sleep(Duration::from_millis(1500));
    // delete the pair (both ends go), wait for the alert
    pair.a.exec("ip", &["link", "del", &pair.a_if]).unwrap();
    assert!(
        wait_alert(&run, rule::IFACE_GONE, Duration::from_secs(5)).is_some(),
        "no iface_gone within 5 s:\n{}",
        obs.err()
    );
    // the same names again
    pair.a
        .exec(
            "ip",
            &[
                "link",
                "add",
                &pair.a_if,
                "type",
                "veth",
                "peer",
                "name",
                &pair.b_if,
                "netns",
                &pair.b.name,
            ],
        )
        .unwrap();
    pair.a
        .exec("ip", &["link", "set", &pair.a_if, "up"])
        .unwrap();
    pair.b
        .exec("ip", &["link", "set", &pair.b_if, "up"])
        .unwrap();
    let t = Instant::now();
    while !obs.err().contains("the interface is back; attached again") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not attached again:\n{}",
            obs.err()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    send_raw(&pair.a, &pair.a_if, &data(0x31, 7));
    std::thread::sleep(Duration::from_millis(1500));
    let st = obs.signal(libc::SIGTERM);
    assert!(st.success(), "{}", obs.err());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let pkts: u64 = summary["qps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["qp"] == 0x31)
        .map(|q| q["pkts"].as_u64().unwrap())
        .sum();
    assert_eq!(
        pkts,
        17,
        "both lives of the interface counted: {summary}\n{}",
        obs.err()
    );
    let flows = pyarrow_read(&run, "flows", &["pkts"], false);
    assert_eq!(flows["sums"]["pkts"], 17);
}

/// `--evidence` live: the kernel programs sample the offending frames, the evidence capture
/// is readable by tshark while the observer runs (flushed every interval), and at the end holds
/// at most `--evidence-per-key` frames per rule and QP key, each as it was on the wire with a
/// comment naming its rules; summary.json and the stop line count what was left out. With
/// `--evidence-rate 1`, frames over the kernel's budget are counted: written + left out is
/// every offending frame. A capture that cannot be created is an error before attaching.
#[test]
fn live_evidence_samples_the_offending_frames() {
    if !require_root("live_evidence_samples_the_offending_frames") {
        return;
    }
    let pair = VethPair::new("cv", "10.77.1.1", "10.77.1.2").unwrap();
    let tmp = TempDir::new("netns-evidence");
    let out = tmp.path().to_path_buf();
    let policy = out.join("policy.toml");
    std::fs::write(&policy, "profile = \"nvidia\"\n").unwrap();
    let ev = out.join("ev.pcapng");
    let run = out.join("run");
    let ev_arg = ev.to_str().unwrap();
    let mut obs = Observer::start_with(
        &pair.b,
        &pair.b_if,
        &run,
        &policy,
        &["--no-nic", "--evidence", ev_arg, "--evidence-per-key", "2"],
    );
    let (frames, _) = fault_frames();
    send_raw(&pair.a, &pair.a_if, &frames);
    let tshark = |file: &std::path::Path| -> Vec<Vec<String>> {
        let t = Command::new("tshark")
            .arg("-r")
            .arg(file)
            .args(["-T", "fields", "-E", "separator=/t"])
            .args(["-e", "frame.comment", "-e", "ip.dsfield.dscp"])
            .args(["-e", "ip.dsfield.ecn", "-e", "infiniband.bth.destqp"])
            .args(["-e", "infiniband.bth.psn", "-e", "frame.interface_name"])
            .output()
            .unwrap();
        assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
        String::from_utf8_lossy(&t.stdout)
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    };
    // readable while the observer runs: flushed at every interval's end
    let t0 = Instant::now();
    let mut during = Vec::new();
    while t0.elapsed() < Duration::from_secs(5) && during.len() < 6 {
        std::thread::sleep(Duration::from_millis(200));
        if ev.exists() {
            during = tshark(&ev);
        }
    }
    assert_eq!(during.len(), 6, "{during:?}\n{}", obs.err());
    let st = obs.signal(libc::SIGTERM);
    let err = obs.err();
    assert!(st.success(), "exit {st:?}:\n{err}");
    let rows = tshark(&ev);
    // QP 0x12: 5 at DSCP 0, 2 written; 0x13: 4 Not-ECT, 2 written; 0x14: the gap at PSN 5;
    // the CNP at DSCP 46. The PFC and PAUSE frames are not sampled live.
    let mut got: Vec<(String, String, String, String, String)> = rows
        .iter()
        .map(|r| {
            assert!(r[5].ends_with("veth-b"), "{r:?}");
            (
                r[0].clone(),
                r[1].clone(),
                r[2].clone(),
                r[3].clone(),
                r[4].clone(),
            )
        })
        .collect();
    got.sort();
    let row = |c: &str, dscp: &str, ecn: &str, qp: &str, psn: &str| {
        (
            c.to_string(),
            dscp.to_string(),
            ecn.to_string(),
            qp.to_string(),
            psn.to_string(),
        )
    };
    let mut want = vec![
        row("dscp_data", "0", "2", "0x000012", "0"),
        row("dscp_data", "0", "2", "0x000012", "1"),
        row("not_ect_data", "26", "0", "0x000013", "0"),
        row("not_ect_data", "26", "0", "0x000013", "1"),
        row("psn_gap", "26", "2", "0x000014", "5"),
        row("dscp_cnp", "46", "0", "0x000024", "0"),
    ];
    want.sort();
    assert_eq!(got, want, "{rows:?}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let e = &summary["evidence"];
    assert_eq!(
        (
            e["frames"].as_u64(),
            e["over_per_key"].as_u64(),
            e["over_rate"].as_u64(),
            e["lost"].as_u64(),
            e["file"].as_str()
        ),
        (Some(6), Some(5), Some(0), Some(0), Some(ev_arg)),
        "{e}"
    );
    assert!(
        err.contains("evidence: 6 frames that broke a rule in")
            && err.contains("5 over the per-key limit"),
        "{err}"
    );

    // one a second and CPU: the rest counted, none unaccounted for (11 offending frames)
    let ev1 = out.join("ev1.pcapng");
    let run1 = out.join("run1");
    let mut obs = Observer::start_with(
        &pair.b,
        &pair.b_if,
        &run1,
        &policy,
        &[
            "--no-nic",
            "--evidence",
            ev1.to_str().unwrap(),
            "--evidence-rate",
            "1",
        ],
    );
    send_raw(&pair.a, &pair.a_if, &frames);
    std::thread::sleep(Duration::from_millis(1500));
    let st = obs.signal(libc::SIGTERM);
    assert!(st.success(), "exit {st:?}:\n{}", obs.err());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run1.join("summary.json")).unwrap()).unwrap();
    let e = &summary["evidence"];
    let n = |k: &str| e[k].as_u64().unwrap();
    let ncpu = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(n("frames") >= 1 && n("frames") <= ncpu, "{e}");
    assert!(n("over_rate") >= 11 - ncpu, "{e}");
    assert_eq!(
        n("frames") + n("over_per_key") + n("over_rate") + n("lost"),
        11,
        "{e}"
    );
    assert_eq!(tshark(&ev1).len() as u64, n("frames"));

    // a capture that cannot be created: refused before attaching
    let bad = Command::new("ip")
        .args(["netns", "exec", &pair.b.name])
        .arg(env!("CARGO_BIN_EXE_roce-observe"))
        .args([
            "--iface",
            &pair.b_if,
            "--plain",
            "--no-nic",
            "--duration",
            "1s",
        ])
        .arg("--out")
        .arg(out.join("bad"))
        .arg("--evidence")
        .arg(out.join("no-such-dir").join("ev.pcapng"))
        .output()
        .unwrap();
    let berr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        berr.contains("--evidence") && berr.contains("no-such-dir") && !berr.contains("attached"),
        "{berr}"
    );
    nothing_attached(&pair.b, &pair.b_if).unwrap();
    drop(pair);
}
