//! `tcpdump ... | roce-observe replay -` stopped with Ctrl-C: what was read is accounted, the
//! files are closed, the summary is printed and the exit status is 0, like the live command.
//! (Before, SIGINT killed replay and everything was lost.) Runs the real binary on a pipe that
//! stays open, so the replay is blocked in a read when the signal comes.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use observer::sources::synthetic::Roce;
use test_support::TempDir;

fn pcap_header() -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
    h
}

fn record(ts_s: u32, frame: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&ts_s.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    r.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    r.extend_from_slice(frame);
    r
}

fn stopped_by(sig: libc::c_int, name: &str) {
    let tmp = TempDir::new(&format!("replay-sig-{name}"));
    let out = tmp.join("out");
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["replay", "-", "--json", "--out"])
        .arg(&out)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce-observe replay");
    let mut stdin = c.stdin.take().unwrap();
    let mut bytes = pcap_header();
    // 300 packets over three seconds of capture time: two closed intervals and an open one
    for i in 0..300u32 {
        let f = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], 0x11, i).frame();
        bytes.extend(record(1_795_000_000 + i / 100, &f));
    }
    stdin.write_all(&bytes).unwrap();
    stdin.flush().unwrap();
    // The pipe stays open: replay has read everything and waits for more.
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: signalling the child we spawned, by its pid.
    unsafe { libc::kill(c.id() as i32, sig) };
    let t = Instant::now();
    let st = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "replay did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let stdout = std::io::read_to_string(c.stdout.take().unwrap()).unwrap();
    let stderr = std::io::read_to_string(c.stderr.take().unwrap()).unwrap();
    assert!(st.success(), "exit {st:?}; stderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("the summary on stdout");
    assert_eq!(v["replay"]["frames"], 300, "{stdout}");
    assert_eq!(v["replay"]["stopped_by"], name);
    assert_eq!(v["qps"][0]["pkts"], 300);
    assert_eq!(
        v["replay"]["errors"].as_array().unwrap().len(),
        0,
        "{stdout}"
    );
    // The collector closed its files: summary.json written, the flows hold every packet.
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["output"]["flows"]["rows"], 3, "one row per interval: {s}");
}

#[test]
fn sigint_on_a_streamed_replay_accounts_what_was_read_and_exits_0() {
    stopped_by(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_on_a_streamed_replay_accounts_what_was_read_and_exits_0() {
    stopped_by(libc::SIGTERM, "SIGTERM");
}
