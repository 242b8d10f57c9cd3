//! Replay: golden tests on the real captures, damage handling, streaming, intervals, and the
//! metrics.md cases of the generated corpus.

use test_support::{TempDir, corpus};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use observer::sources::Snapshot;
use observer::sources::capture::{Replay, ReplayError, ReplayOptions};
use observer::sources::{Consumer, ConsumerError, Discard};
use observer_common::maps::Event;
use serde_json::Value;

const OFERBY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../observer/tests/data/captures/oferby_proxy_roce.pcap"
);
const ERF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../observer/tests/data/captures/srinivaskoritala_infiniband_erf.pcap"
);

/// The public captures (copied unmodified, see SOURCES.md there).
fn captures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../observer/tests/data/captures")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_roce-observe")
}

/// Replays paths through the library; returns the summary JSON and the per-input errors.
fn replay(paths: &[&Path]) -> (Value, Vec<ReplayError>) {
    let mut out = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut out);
    let mut errs = Vec::new();
    for p in paths {
        if let Err(e) = rp.feed_path(p) {
            errs.push(e);
        }
    }
    (
        observer::sinks::summary_json::summary_json(&rp.snapshots()),
        errs,
    )
}

fn qp<'a>(s: &'a Value, src: &str, dst: &str, qpn: u64) -> &'a Value {
    s["qps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["src"] == src && q["dst"] == dst && q["qp"] == qpn)
        .unwrap_or_else(|| panic!("no QP {src}->{dst} {qpn:#x} in {s:#}"))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn golden_oferby_matches_tshark() {
    let p = captures_dir().join("oferby_proxy_roce.pcap");
    let (s, errs) = replay(&[&p]);
    assert!(errs.is_empty(), "{errs:?}");
    // Expected values from `tshark -r oferby_proxy_roce.pcap -d udp.port==69,infiniband`
    // (fields ip.src, ip.dst, infiniband.bth.destqp, frame.len, ip.len, udp.length,
    // infiniband.bth.opcode), aggregated by hand.
    let ifc = &s["interfaces"][0];
    assert_eq!(u(ifc, "frames"), 123);
    assert_eq!(u(ifc, "roce"), 105);
    assert_eq!(s["qps"].as_array().unwrap().len(), 2);
    let a = qp(&s, "192.168.70.6", "192.168.70.4", 0x45);
    assert_eq!(
        (
            u(a, "pkts"),
            u(a, "bytes_l2"),
            u(a, "bytes_ip"),
            u(a, "bytes_udp")
        ),
        (68, 71124, 70172, 68268)
    );
    assert_eq!(a["opcodes"]["0x00"], 33);
    assert_eq!(a["opcodes"]["0x03"], 33);
    assert_eq!(a["opcodes"]["0x05"], 1);
    assert_eq!(a["opcodes"]["0x11"], 1);
    assert_eq!(u(a, "icrc_ok"), 68);
    let b = qp(&s, "192.168.70.4", "192.168.70.6", 0x48);
    assert_eq!(
        (
            u(b, "pkts"),
            u(b, "bytes_l2"),
            u(b, "bytes_ip"),
            u(b, "bytes_udp")
        ),
        (37, 2438, 1920, 884)
    );
    assert_eq!(b["opcodes"]["0x11"], 36);
    assert_eq!(b["opcodes"]["0x05"], 1);
    assert_eq!(u(b, "icrc_ok"), 37);
    for q in [a, b] {
        assert_eq!(u(q, "icrc_bad") + u(q, "icrc_unverifiable"), 0);
        assert_eq!(
            q["dscp"]["data"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            vec!["0"]
        );
        assert_eq!(u(q, "ce"), 0);
    }
    assert_eq!(u(b, "last_udp_sport"), 69);
}

#[test]
fn golden_erf_is_rejected_with_its_number() {
    let out = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", ERF])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unsupported link type 197 (ERF)"), "{err}");
    assert!(
        err.contains("srinivaskoritala_infiniband_erf.pcap"),
        "{err}"
    );
}

#[test]
fn truncated_file_is_processed_up_to_the_damage() {
    let data = std::fs::read(OFERBY).unwrap();
    let tmp = TempDir::new("replay-trunc");
    let d = tmp.path().to_path_buf();
    // Cut in the middle of a record: the offset is that record's start.
    let p = d.join("cut.pcap");
    std::fs::write(&p, &data[..5000]).unwrap();
    let (s, errs) = replay(&[&p]);
    // Record starts: 24, then each record is 16 + caplen; find the last start <= 5000 by walking.
    let mut off = 24usize;
    let mut whole = 0u64;
    loop {
        let cap = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        if off + 16 + cap > 5000 {
            break;
        }
        off += 16 + cap;
        whole += 1;
    }
    match &errs[..] {
        [ReplayError::Corrupt { file, offset, .. }] => {
            assert!(file.ends_with("cut.pcap"));
            assert_eq!(*offset, off as u64);
        }
        other => panic!("expected one Corrupt error, got {other:?}"),
    }
    assert_eq!(u(&s["interfaces"][0], "frames"), whole);
    // A corrupt length field: caplen of the 3rd record set to 0x7fffffff.
    let mut bad = data.clone();
    let mut off = 24usize;
    for _ in 0..2 {
        let cap = u32::from_le_bytes(bad[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + cap;
    }
    bad[off + 8..off + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let p = d.join("badlen.pcap");
    std::fs::write(&p, &bad).unwrap();
    let (s, errs) = replay(&[&p]);
    match &errs[..] {
        [ReplayError::Corrupt { offset, .. }] => assert_eq!(*offset, off as u64),
        other => panic!("expected one Corrupt error, got {other:?}"),
    }
    assert_eq!(u(&s["interfaces"][0], "frames"), 2);
    // Not a capture at all, and an empty file: clear errors at offset 0, no panic.
    let p = d.join("text.pcap");
    std::fs::write(&p, b"hello, this is not a capture file at all").unwrap();
    let (_, errs) = replay(&[&p]);
    assert!(
        matches!(&errs[..], [ReplayError::Corrupt { offset: 0, .. }]),
        "{errs:?}"
    );
    let p = d.join("empty.pcap");
    std::fs::write(&p, b"").unwrap();
    let (_, errs) = replay(&[&p]);
    assert!(
        matches!(&errs[..], [ReplayError::Corrupt { offset: 0, .. }]),
        "{errs:?}"
    );
    // Every prefix of a pcapng corpus file: never a panic, frames never exceed the whole.
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "pcapng_two_ifaces")
        .unwrap();
    let p = c.write(&d).unwrap();
    let ng = std::fs::read(&p).unwrap();
    let mut last = 0;
    let mut damaged = 0;
    for cut in (0..ng.len()).step_by(7) {
        let q = d.join("ngcut.pcapng");
        std::fs::write(&q, &ng[..cut]).unwrap();
        let (s, errs) = replay(&[&q]);
        // A cut exactly at a block boundary is a valid, shorter file.
        assert!(errs.len() <= 1, "cut at {cut}: {errs:?}");
        damaged += errs.len();
        let frames: u64 = s["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| u(i, "frames"))
            .sum();
        assert!(frames >= last && frames <= 20);
        last = frames;
    }
    assert!(
        damaged > ng.len() / 7 / 2,
        "most cuts fall inside a block: {damaged}"
    );
    assert_eq!(last, 20 - 1, "the last cut loses only the last block");
}

/// A corrupt length field in the middle of a pcapng is named corrupt, a file cut inside a
/// block truncated, each at the block's offset with everything before it processed (before,
/// both read "truncated"). Likewise a pcap record longer than its frame.
#[test]
fn a_corrupt_block_is_not_called_truncated() {
    let tmp = TempDir::new("replay-corrupt-block");
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "pcapng_two_ifaces")
        .unwrap();
    let ng = std::fs::read(c.write(&d).unwrap()).unwrap();
    // block starts (little-endian corpus file)
    let mut starts = Vec::new();
    let mut off = 0usize;
    while off + 8 <= ng.len() {
        starts.push(off);
        off += u32::from_le_bytes(ng[off + 4..off + 8].try_into().unwrap()) as usize;
    }
    assert_eq!(off, ng.len());
    let what = |errs: &[ReplayError]| match errs {
        [ReplayError::Corrupt { offset, what, .. }] => (*offset as usize, what.clone()),
        other => panic!("expected one Corrupt error, got {other:?}"),
    };
    // the sixth block says it runs 64 bytes past the end of the file
    let at = starts[starts.len() - 6];
    let mut bad = ng.clone();
    let len = (ng.len() - at + 64) as u32;
    bad[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
    let p = d.join("badlen.pcapng");
    std::fs::write(&p, &bad).unwrap();
    let (s, errs) = replay(&[&p]);
    let (offset, text) = what(&errs);
    assert_eq!(offset, at);
    assert!(text.starts_with("corrupt block length"), "{text}");
    assert!(text.contains(&format!("says {len} bytes")), "{text}");
    let frames: u64 = s["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| u(i, "frames"))
        .sum();
    assert!(frames > 0 && frames < 20, "{frames}");
    // the same file cut 20 bytes into its sixth-last block
    let p = d.join("cut.pcapng");
    std::fs::write(&p, &ng[..at + 20]).unwrap();
    let (_, errs) = replay(&[&p]);
    let (offset, text) = what(&errs);
    assert_eq!(offset, at);
    assert!(text.starts_with("truncated"), "{text}");
    // pcap: a record of 100 bytes captured of a 60-byte frame, at the end of the file
    let data = std::fs::read(OFERBY).unwrap();
    let mut off = 24usize;
    for _ in 0..2 {
        let cap = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + cap;
    }
    let mut bad = data[..off + 16 + 40].to_vec();
    bad[off + 8..off + 12].copy_from_slice(&100u32.to_le_bytes());
    bad[off + 12..off + 16].copy_from_slice(&60u32.to_le_bytes());
    let p = d.join("badlen.pcap");
    std::fs::write(&p, &bad).unwrap();
    let (_, errs) = replay(&[&p]);
    let (offset, text) = what(&errs);
    assert_eq!(offset, off);
    assert!(text.starts_with("corrupt record length"), "{text}");
}

/// `--evidence`: the frames that broke a rule go to a pcapng that tshark reads, each with a
/// comment naming its rules, at most `--evidence-per-key` per rule and key, the rest counted
/// in the summary; tshark's own dissection of the written frames agrees with the comments.
#[test]
fn evidence_writes_the_offending_frames_for_wireshark() {
    let tmp = TempDir::new("replay-evidence");
    let d = tmp.path().to_path_buf();
    let files: Vec<PathBuf> = ["bleached", "go_back_n", "clean"]
        .iter()
        .map(|n| {
            corpus::corpus()
                .into_iter()
                .find(|c| c.name == *n)
                .unwrap()
                .write(&d)
                .unwrap()
        })
        .collect();
    let ev = d.join("evidence.pcapng");
    let out = Command::new(bin())
        .args(["replay", "--no-out", "--json", "--evidence"])
        .arg(&ev)
        .args(["--evidence-per-key", "3"])
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &v["replay"]["evidence"];
    // bleached: 15 data packets at DSCP 0, the first 10 tagged with priority 0: 3 written
    // (dscp_data and pcp_data each at 3), 12 over; go_back_n: the gap, the NAK, 3 of the 4
    // resends written, 1 over; clean: nothing
    assert_eq!(u(e, "frames"), 8, "{e}");
    assert_eq!(u(e, "over_per_key"), 13, "{e}");
    assert_eq!(u(e, "over_total") + u(e, "over_subjects"), 0, "{e}");
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&ev)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.interface_name",
            "-e",
            "frame.comment",
            "-e",
            "ip.dsfield.dscp",
            "-e",
            "infiniband.bth.psn",
        ])
        .output()
        .unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 8, "{rows:?}");
    let of = |iface: &str| -> Vec<&Vec<String>> {
        rows.iter().filter(|r| r[0].ends_with(iface)).collect()
    };
    let bleached = of("bleached");
    assert_eq!(bleached.len(), 3, "{rows:?}");
    assert!(
        bleached
            .iter()
            .all(|r| r[1] == "dscp_data; pcp_data" && r[2] == "0"),
        "{rows:?}"
    );
    let gbn: Vec<(String, String)> = of("go_back_n")
        .iter()
        .map(|r| (r[1].clone(), r[3].clone()))
        .collect();
    let want: Vec<(String, String)> = [
        ("psn_gap", "5"),
        ("nak", "3"),
        ("retrans", "3"),
        ("retrans", "4"),
        ("retrans", "5"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(gbn, want, "{rows:?}");
    assert!(of("clean").is_empty(), "{rows:?}");
    // an evidence file that cannot be created: a clear error before anything is read
    let out = Command::new(bin())
        .args(["replay", "--no-out", "--evidence"])
        .arg(d.join("no/such/dir/e.pcapng"))
        .arg(&files[0])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("e.pcapng: cannot write the evidence capture"),
        "{err}"
    );
}

#[test]
fn cli_reports_damage_with_file_and_offset() {
    let data = std::fs::read(OFERBY).unwrap();
    let tmp = TempDir::new("replay-cli-trunc");
    let d = tmp.path().to_path_buf();
    let p = d.join("cut.pcap");
    std::fs::write(&p, &data[..5000]).unwrap();
    let out = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.pcap") && err.contains("byte offset 4958"),
        "{err}"
    );
    // The summary of what came before the damage is still printed.
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(u(&s["interfaces"][0], "roce") > 0);
}

#[test]
fn stdin_stream_equals_file() {
    let file = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", "--json", OFERBY])
        .output()
        .unwrap();
    assert!(file.status.success());
    let mut child = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Write in small uneven pieces, as a pipe from tcpdump delivers them.
    let data = std::fs::read(OFERBY).unwrap();
    let mut w = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for c in data.chunks(97) {
            w.write_all(c).unwrap();
            w.flush().unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let a: Value = serde_json::from_slice(&file.stdout).unwrap();
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    let strip = |v: &Value| {
        let mut q = v["qps"].clone();
        for x in q.as_array_mut().unwrap() {
            x.as_object_mut().unwrap().remove("iface");
        }
        q
    };
    assert_eq!(strip(&a), strip(&b));
    assert_eq!(b["qps"][0]["iface"], "stdin");
}

/// Records what the collector would get.
#[derive(Default)]
struct Recorder {
    snaps: Vec<Snapshot>,
    events: Vec<(String, Event)>,
}
impl Consumer for Recorder {
    fn events(&mut self, iface: &str, ev: &[Event]) -> Result<(), ConsumerError> {
        self.events
            .extend(ev.iter().map(|e| (iface.to_string(), *e)));
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> Result<(), ConsumerError> {
        self.snaps.push(s.clone());
        Ok(())
    }
}

#[test]
fn intervals_follow_capture_time() {
    let tmp = TempDir::new("replay-intervals");
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "pfc_storm")
        .unwrap();
    let p = c.write(&d).unwrap();
    let mut rec = Recorder::default();
    let opts = ReplayOptions {
        interval_ns: 100_000_000,
        ..ReplayOptions::default()
    };
    let mut rp = Replay::new(opts, &mut rec);
    let st = rp.feed_path(&p).unwrap();
    drop(rp);
    // 2000 frames 0.5 ms apart span 999.5 ms from T0 (a whole second): 9 boundaries crossed,
    // then the final snapshot at the last frame.
    assert_eq!(st.frames, 2000);
    assert_eq!(
        rec.snaps.len(),
        10,
        "{:?}",
        rec.snaps.iter().map(|s| s.time_ns).collect::<Vec<_>>()
    );
    let t0 = c.recs[0].ts_ns;
    for (i, s) in rec.snaps.iter().take(9).enumerate() {
        assert_eq!(s.time_ns, t0 + (i as u64 + 1) * 100_000_000);
        // Cumulative: every frame before the boundary.
        assert_eq!(s.iface_stats[0].pfc.pfc_frames, 200 * (i as u64 + 1));
    }
    let last = rec.snaps.last().unwrap();
    assert_eq!(last.time_ns, c.recs.last().unwrap().ts_ns);
    assert_eq!(last.iface_stats[0].pfc.xoff[3], 2000);
}

#[test]
fn events_reach_the_output_with_capture_times() {
    let tmp = TempDir::new("replay-events");
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "go_back_n")
        .unwrap();
    let p = c.write(&d).unwrap();
    let mut rec = Recorder::default();
    let mut rp = Replay::new(ReplayOptions::default(), &mut rec);
    rp.feed_path(&p).unwrap();
    drop(rp);
    let gap = rec
        .events
        .iter()
        .find(|(_, e)| e.kind == observer_common::qp::ev::PSN_GAP)
        .expect("psn gap event");
    assert_eq!(gap.0, "go_back_n");
    assert_eq!(gap.1.psn, 5);
    assert_eq!(gap.1.detail, 2);
    // The 4th frame of the capture carried PSN 5.
    assert_eq!(gap.1.ts_ns, c.recs[3].ts_ns);
}

fn corpus_summary(name: &str) -> Value {
    let tmp = TempDir::new(&format!("replay-case-{name}"));
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap();
    let p = c.write(&d).unwrap();
    let (s, errs) = replay(&[&p]);
    assert!(errs.is_empty(), "{errs:?}");
    s
}

#[test]
fn corpus_metrics_cases() {
    // Go-back-N: 3, 4 lost; 5, 6 seen; resend 3..9.
    let s = corpus_summary("go_back_n");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(
        (
            u(q, "psn_gaps"),
            u(q, "psn_missing"),
            u(q, "psn_retrans"),
            u(q, "psn_behind")
        ),
        (1, 2, 4, 3)
    );
    let k = qp(&s, "10.77.1.2", "10.77.1.1", 0x22);
    assert_eq!(
        (u(k, "naks"), u(k, "nak_psn_seq_err"), u(k, "acks")),
        (1, 1, 2)
    );
    // Wrap: no gap; wrap with loss of 0xffffff and 0: one gap of 2.
    let s = corpus_summary("psn_wrap");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!((u(q, "psn_gaps"), u(q, "psn_retrans")), (0, 0));
    let s = corpus_summary("psn_wrap_loss");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!((u(q, "psn_gaps"), u(q, "psn_missing")), (1, 2));
    // RDMA READs (metrics.md "RDMA READ requests"): back-to-back READs are no gaps; the lost
    // READ of 4 KiB is a gap of its 4 PSNs (pmtu 1024); the WRITE 2 PSNs late after a READ is
    // hidden in its window; the resent READ is behind. The responses' key jumps where the
    // requester sent WRITEs or lost a READ (192..=197: 6, 262..=265: 4).
    let s = corpus_summary("rdma_read");
    let psn = |q: &Value| {
        (
            u(q, "psn_gaps"),
            u(q, "psn_missing"),
            u(q, "psn_retrans"),
            u(q, "psn_behind"),
        )
    };
    assert_eq!(psn(qp(&s, "10.77.1.1", "10.77.1.2", 0x11)), (1, 4, 1, 1));
    assert_eq!(psn(qp(&s, "10.77.1.2", "10.77.1.1", 0x22)), (2, 10, 0, 0));
    // RNR: one RNR NAK (not a NAK), the retry of PSN 3 counts retrans 1, behind 0.
    let s = corpus_summary("rnr_retry");
    let k = qp(&s, "10.77.1.2", "10.77.1.1", 0x22);
    assert_eq!((u(k, "rnr_naks"), u(k, "naks")), (1, 0));
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!((u(q, "psn_retrans"), u(q, "psn_behind")), (1, 0));
    // Duplicate ACKs are ACKs, never PSN-analysed.
    let s = corpus_summary("dup_acks");
    let k = qp(&s, "10.77.1.2", "10.77.1.1", 0x22);
    assert_eq!((u(k, "acks"), u(k, "psn_retrans")), (5, 0));
    // CE and CNPs.
    let s = corpus_summary("ecn_ce_cnp");
    assert_eq!(u(qp(&s, "10.77.1.1", "10.77.1.2", 0x11), "ce"), 7);
    let c = qp(&s, "10.77.1.2", "10.77.1.1", 0x22);
    assert_eq!(u(c, "cnp"), 7);
    assert_eq!(c["dscp"]["cnp"]["48"], 7);
    assert_eq!(c["pcp"]["cnp"]["6"], 7);
    // QinQ: the outermost (S-tag) priority.
    let s = corpus_summary("qinq");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(q["pcp"]["data"]["5"], 8);
    assert_eq!(q["pcp"]["data"]["1"], 4);
    // Fragments excluded, options parsed past.
    let s = corpus_summary("fragments");
    assert_eq!(s["interfaces"][0]["excluded"]["ip_fragment"], 2);
    assert_eq!(u(qp(&s, "10.77.1.1", "10.77.1.2", 0x11), "pkts"), 2);
    let s = corpus_summary("ipv4_options");
    assert_eq!(u(qp(&s, "10.77.1.1", "10.77.1.2", 0x11), "icrc_ok"), 8);
    // Short BTH, garbage, source port only, runt.
    let s = corpus_summary("garbage_short_bth");
    let i = &s["interfaces"][0];
    assert_eq!(i["excluded"]["short_bth"], 2);
    assert_eq!(i["excluded"]["udp_src_port_only"], 1);
    assert_eq!(i["excluded"]["runt"], 1);
    assert_eq!(u(i, "roce"), 4);
    assert_eq!(u(i, "not_roce"), 1);
    // PFC.
    let s = corpus_summary("pfc");
    let pfc = &s["interfaces"][0]["pfc"];
    assert_eq!(u(pfc, "frames"), 31);
    assert_eq!(pfc["enabled"][3], 31);
    assert_eq!(pfc["xoff"][3], 20);
    assert_eq!(pfc["xon"][3], 11);
    assert_eq!(pfc["enabled"][0], 1);
    assert_eq!(pfc["xoff"][0], 1);
    assert_eq!(pfc["quanta"][0], 500);
    assert_eq!(
        pfc["quanta"][1], 0,
        "quanta of disabled priorities are ignored"
    );
    assert_eq!(pfc["quanta"][3], 10 * 0xffff + (100..110).sum::<u64>());
    assert_eq!(s["interfaces"][0]["mac_control_other"], 1);
    let s = corpus_summary("pause_8023x");
    let p = &s["interfaces"][0]["pause"];
    assert_eq!(
        (u(p, "frames"), u(p, "xon"), u(p, "quanta")),
        (3, 1, 0xffff + 300)
    );
    // ICRC verdicts.
    let s = corpus_summary("bad_icrc");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(
        (u(q, "icrc_ok"), u(q, "icrc_bad"), u(q, "icrc_unverifiable")),
        (5, 5, 0)
    );
    for name in [
        "clean",
        "ipv6",
        "qinq",
        "erspan",
        "sll",
        "sll2",
        "pcapng_two_ifaces",
        "low_sport",
    ] {
        let s = corpus_summary(name);
        for q in s["qps"].as_array().unwrap() {
            assert_eq!(u(q, "icrc_ok"), u(q, "pkts"), "{name}: {q}");
        }
    }
    // Snaplen: L2 bytes from the original length, ICRC unverifiable.
    let s = corpus_summary("snaplen_128");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(u(q, "icrc_unverifiable"), 10);
    assert_eq!(
        u(q, "bytes_l2"),
        10 * (14 + 4 + 20 + 8 + 12 + 16 + 1024 + 4)
    );
    let s = corpus_summary("snaplen_in_bth");
    assert_eq!(s["interfaces"][0]["excluded"]["short_bth"], 4);
    // ERSPAN: counted by encapsulation, inner frame's keys.
    let s = corpus_summary("erspan");
    assert_eq!(s["interfaces"][0]["encap"]["erspan2"], 5);
    assert_eq!(s["interfaces"][0]["encap"]["erspan3"], 5);
    assert_eq!(u(qp(&s, "10.77.1.1", "10.77.1.2", 0x11), "pkts"), 10);
    // SLL: direction from the packet type, L2 bytes reconstructed as Ethernet.
    for name in ["sll", "sll2"] {
        let s = corpus_summary(name);
        let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
        assert_eq!(q["dir"], "egress", "{name}");
        assert_eq!(
            u(q, "bytes_l2"),
            10 * (14 + 20 + 8 + 12 + 16 + 1024 + 4),
            "{name}"
        );
        assert_eq!(qp(&s, "10.77.1.2", "10.77.1.1", 0x22)["dir"], "ingress");
        // The tag kept inside the cooked capture is parsed: PCP 5, 4 more L2 bytes.
        let t = qp(&s, "10.77.1.1", "10.77.1.3", 0x77);
        assert_eq!(t["pcp"]["data"]["5"], 10, "{name}");
        assert_eq!(
            u(t, "bytes_l2"),
            10 * (14 + 4 + 20 + 8 + 12 + 16 + 64 + 4),
            "{name}"
        );
    }
    // pcapng: one datapath per named interface, both time resolutions decoded.
    let s = corpus_summary("pcapng_two_ifaces");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(q["iface"], "pcapng_two_ifaces:swp1");
    assert_eq!(u(q, "first_ns"), 1_700_000_000_000_000_000);
    let k = qp(&s, "10.77.1.2", "10.77.1.1", 0x22);
    assert_eq!(k["iface"], "pcapng_two_ifaces:swp2");
    // 2^-20 s units: within one unit (954 ns) of the written time.
    let want = 1_700_000_000_000_000_000u64 + 500;
    assert!(
        u(k, "first_ns").abs_diff(want) < 954,
        "{}",
        u(k, "first_ns")
    );
    let s = corpus_summary("nanos");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(u(q, "last_ns") - u(q, "first_ns"), 333 * 13);
    // pcapng epb_flags: outbound requests are egress, inbound ACKs ingress.
    let s = corpus_summary("pcapng_direction");
    let q = qp(&s, "10.77.1.1", "10.77.1.2", 0x11);
    assert_eq!(
        (q["dir"].as_str(), q["iface"].as_str()),
        (Some("egress"), Some("pcapng_direction:mlx5_0"))
    );
    assert_eq!(u(q, "pkts"), 10);
    assert_eq!(qp(&s, "10.77.1.2", "10.77.1.1", 0x22)["dir"], "ingress");
    // Suspect.
    let s = corpus_summary("suspect");
    assert_eq!(u(qp(&s, "10.77.1.1", "10.77.1.2", 0x11), "suspect"), 2);
}

#[test]
fn max_qps_counts_untracked() {
    let tmp = TempDir::new("replay-maxqps");
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "clean")
        .unwrap();
    let p = c.write(&d).unwrap();
    let mut out = Discard;
    let mut rp = Replay::new(
        ReplayOptions {
            max_qps: 2,
            ..ReplayOptions::default()
        },
        &mut out,
    );
    rp.feed_path(&p).unwrap();
    let snaps = rp.snapshots();
    assert_eq!(snaps[0].qps.len(), 2);
    let st = &snaps[0].iface_stats[0];
    assert!(st.roce_untracked > 0);
    assert_eq!(
        st.roce_untracked,
        st.roce - snaps[0].qps.iter().map(|(_, v)| v.pkts).sum::<u64>()
    );
}

#[test]
fn cli_table_summary() {
    let out = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", OFERBY])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("== QPs (2)"), "{t}");
    assert!(
        t.contains("192.168.70.6") && t.contains("0x000045") && t.contains("68/0/0"),
        "{t}"
    );
}

#[test]
fn in_memory_reader_equals_streaming_reader() {
    let tmp = TempDir::new("replay-slice");
    let d = tmp.path().to_path_buf();
    let files = corpus::write_corpus(&d).unwrap();
    let mut paths: Vec<PathBuf> = files.into_iter().map(|(_, p)| p).collect();
    paths.push(PathBuf::from(OFERBY));
    for p in &paths {
        let data = std::fs::read(p).unwrap();
        let mut o1 = Discard;
        let mut a = Replay::new(ReplayOptions::default(), &mut o1);
        a.feed("x", "x", std::fs::File::open(p).unwrap(), None)
            .unwrap();
        let mut o2 = Discard;
        let mut b = Replay::new(ReplayOptions::default(), &mut o2);
        b.feed_slice("x", "x", &data).unwrap();
        let (sa, sb) = (
            observer::sinks::summary_json::summary_json(&a.snapshots()),
            observer::sinks::summary_json::summary_json(&b.snapshots()),
        );
        assert_eq!(sa, sb, "{}", p.display());
        assert!(a.frames > 0);
        // Damage: the same error at the same offset.
        let cut = &data[..data.len() - 3];
        let mut o3 = Discard;
        let e1 = Replay::new(ReplayOptions::default(), &mut o3)
            .feed("x", "x", cut, None)
            .unwrap_err();
        let mut o4 = Discard;
        let e2 = Replay::new(ReplayOptions::default(), &mut o4)
            .feed_slice("x", "x", cut)
            .unwrap_err();
        match (&e1, &e2) {
            (ReplayError::Corrupt { offset: a, .. }, ReplayError::Corrupt { offset: b, .. }) => {
                assert_eq!(a, b)
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Through the real collector: Parquet tables, alerts and summary.json with capture timestamps,
/// checked with an independent Parquet reader (pyarrow, installed by scripts/setup.sh).
#[test]
fn cli_writes_flow_logs_and_alerts_in_capture_time() {
    let tmp = TempDir::new("replay-collector");
    let d = tmp.path().to_path_buf();
    let mut paths = Vec::new();
    for c in corpus::corpus() {
        if [
            "not_ect",
            "bleached",
            "pfc_storm",
            "pause_8023x",
            "go_back_n",
            "pfc",
            "clean",
        ]
        .contains(&c.name)
        {
            paths.push(c.write(&d).unwrap());
        }
    }
    let out = d.join("out");
    let res = Command::new(bin())
        .args(["replay", "--json", "--link-speed", "100G", "--out"])
        .arg(&out)
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let s: Value = serde_json::from_slice(&res.stdout).unwrap();
    for rule in [
        "not_ect",
        "dscp_mismatch",
        "pfc_storm",
        "pause_802_3x",
        "go_back_n",
        "pfc_wrong_priority",
    ] {
        assert!(
            s["alerts"][rule].as_u64().unwrap_or(0) >= 1,
            "alert {rule} missing: {}",
            s["alerts"]
        );
    }
    assert_eq!(s["source"], "replay");
    // alerts.jsonl: every alert stamped with capture time (the corpus starts at T0 and lasts
    // about a second).
    let t0 = 1_700_000_000_000_000_000u64;
    let jl = std::fs::read_to_string(out.join("alerts.jsonl")).unwrap();
    let mut n = 0;
    for line in jl.lines() {
        let a: Value = serde_json::from_str(line).unwrap();
        let t = a["time_ns"].as_u64().unwrap();
        assert!(
            (t0..t0 + 2_000_000_000).contains(&t),
            "alert time {t}: {line}"
        );
        n += 1;
    }
    assert!(n >= 6);
    // summary.json has the documented fields only (docs/summary-json.md), each of its type.
    let written: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let c = observer::sinks::summary_json::check(&written);
    assert!(
        c.problems.is_empty(),
        "summary.json against docs/summary-json.md:\n{}",
        c.problems.join("\n")
    );
    // Flow rows summed by pyarrow equal replay's per-QP packet totals.
    let want: u64 = s["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| u(q, "pkts"))
        .sum();
    let py = format!(
        "import glob, pyarrow.parquet as pq, pyarrow.compute as pc\n\
         fs = glob.glob('{}/flows/date=2023-11-14/**/*.parquet', recursive=True)\n\
         print(sum(pc.sum(pq.read_table(f)['pkts']).as_py() for f in fs))",
        out.display()
    );
    let got = Command::new("python3").args(["-c", &py]).output().unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let got: u64 = String::from_utf8_lossy(&got.stdout).trim().parse().unwrap();
    assert_eq!(got, want);
    assert!(want > 100);
}

/// A stream is processed as it arrives: by the time the reader has been asked for the bytes
/// of the last intervals, snapshots of the earlier intervals have already gone out (nothing
/// waits for the end of the input).
#[test]
fn stream_emits_intervals_before_the_input_ends() {
    use std::cell::RefCell;
    use std::rc::Rc;

    struct Shared(Rc<RefCell<Vec<u64>>>);
    impl Consumer for Shared {
        fn events(&mut self, _: &str, _: &[Event]) -> Result<(), ConsumerError> {
            Ok(())
        }
        fn snapshot(&mut self, s: &Snapshot) -> Result<(), ConsumerError> {
            self.0.borrow_mut().push(s.time_ns);
            Ok(())
        }
    }
    /// Hands out the capture in 1000-byte pieces and records how many snapshots existed when
    /// each piece was asked for.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        seen: Rc<RefCell<Vec<u64>>>,
        at: Vec<(usize, usize)>,
    }
    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.at.push((self.pos, self.seen.borrow().len()));
            let n = buf.len().min(1000).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }
    let tmp = TempDir::new("replay-trickle");
    let d = tmp.path().to_path_buf();
    let c = corpus::corpus()
        .into_iter()
        .find(|c| c.name == "pfc_storm")
        .unwrap();
    let p = c.write(&d).unwrap();
    let data = std::fs::read(&p).unwrap();
    let len = data.len();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut out = Shared(seen.clone());
    let mut t = Trickle {
        data,
        pos: 0,
        seen: seen.clone(),
        at: Vec::new(),
    };
    let mut rp = Replay::new(
        ReplayOptions {
            interval_ns: 100_000_000,
            ..ReplayOptions::default()
        },
        &mut out,
    );
    rp.feed("stdin", "stdin", &mut t, None).unwrap();
    drop(rp);
    // When the last tenth of the capture was requested, at least 8 of the 9 interval
    // snapshots were already out.
    let (_, before_last) =
        t.at.iter()
            .find(|(pos, _)| *pos >= len * 9 / 10)
            .copied()
            .unwrap();
    assert!(before_last >= 8, "{:?}", t.at);
    assert_eq!(seen.borrow().len(), 10);
}

/// Random damage anywhere in pcap, pcapng and cooked captures: never a panic; either a result or
/// an error that names the file and an offset inside it.
#[test]
fn random_corruption_never_panics() {
    let tmp = TempDir::new("replay-mutate");
    let d = tmp.path().to_path_buf();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut errors = 0;
    let mut runs = 0;
    let cases = corpus::corpus();
    let n = cases.len();
    for c in cases {
        let orig = std::fs::read(c.write(&d).unwrap()).unwrap();
        for _ in 0..60 {
            let mut m = orig.clone();
            for _ in 0..1 + rnd() % 8 {
                let i = (rnd() as usize) % m.len();
                m[i] = rnd() as u8;
            }
            let mut out = Discard;
            let mut rp = Replay::new(ReplayOptions::default(), &mut out);
            match rp.feed_slice("m.pcap", "m", &m) {
                Ok(_) => {}
                Err(ReplayError::Corrupt { file, offset, .. }) => {
                    assert_eq!(file, "m.pcap");
                    assert!(offset <= m.len() as u64);
                    errors += 1;
                }
                Err(ReplayError::UnsupportedLinkType { .. }) => errors += 1,
                Err(e) => panic!("unexpected error {e}"),
            }
            let mut out = Discard;
            let mut rp = Replay::new(ReplayOptions::default(), &mut out);
            let _ = rp.feed("m.pcap", "m", &m[..], None);
            let _ = rp.snapshots();
            runs += 1;
        }
    }
    assert_eq!(runs, n * 60);
    assert!(
        errors > 0,
        "some mutations must hit a header or length field"
    );
}

/// metrics.md "PFC and 802.3x PAUSE": a 5,000 XOFF/s storm lasting half a second inside a 10 s
/// interval reads 2,500 XOFF/s (its densest second), not the interval average of 250; the time
/// priority 3 was paused is the union of the pause windows (about 0.5 s), not the requested
/// quanta's sum (0.84 s).
#[test]
fn half_second_storm_reads_its_densest_second_and_its_real_pause_time() {
    let tmp = TempDir::new("replay-storm-half");
    let d = tmp.path().to_path_buf();
    let t0 = 1_700_000_000_000_000_000u64;
    let mac = [2, 0, 0, 0, 0, 0xbb];
    let xoff = corpus::pfc(mac, 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
    let xon = corpus::pfc(mac, 1 << 3, [0; 8]);
    let rec = |ts_ns: u64, data: &Vec<u8>| corpus::Rec {
        ts_ns,
        data: data.clone(),
        iface: 0,
        epb_flags: 0,
    };
    let mut recs = vec![rec(t0, &xon)];
    recs.extend((0..2500u64).map(|i| rec(t0 + 3_000_000_000 + i * 200_000, &xoff)));
    recs.push(rec(t0 + 9_900_000_000, &xon));
    let p = d.join("storm.pcap");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    corpus::write_pcap(&mut f, 1, 65535, true, &recs).unwrap();
    drop(f);
    let out = d.join("out");
    let res = Command::new(bin())
        .args([
            "replay",
            "--json",
            "--link-speed",
            "100G",
            "--interval",
            "10s",
        ])
        .arg("--out")
        .arg(&out)
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let s: Value = serde_json::from_slice(&res.stdout).unwrap();
    assert_eq!(s["alerts"]["pfc_storm"], 1, "{}", s["alerts"]);
    let jl = std::fs::read_to_string(out.join("alerts.jsonl")).unwrap();
    let storm: Value = jl
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|a| a["rule"] == "pfc_storm")
        .unwrap();
    assert_eq!(storm["count"], 1, "one interval in storm: {storm}");
    assert!(
        storm["observed"]
            .as_str()
            .unwrap()
            .starts_with("2500 XOFF/s"),
        "{storm}"
    );
    let cols = "pfc_xoff_p3,pfc_xoff_per_s_p3,pfc_xoff_peak_1s_p3,pfc_pause_s_p3,pfc_paused_s_p3";
    let script = r#"
import sys, glob, json, pyarrow.parquet as pq
t = pq.read_table(glob.glob(sys.argv[1] + '/interfaces/*/*/*.parquet')[0])
print(json.dumps([t.column(c).to_pylist() for c in sys.argv[2].split(',')]))
"#;
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(&out)
        .arg(cols)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0], serde_json::json!([2500]), "one interval: {v}");
    let f = |i: usize| v[i][0].as_f64().unwrap();
    assert!(
        (f(1) - 2500.0 / 9.9).abs() < 1e-6,
        "interval average {}",
        f(1)
    );
    assert_eq!(v[2][0], 2500, "densest second");
    let quantum_s = 512.0 / 100e9;
    assert!(
        (f(3) - 2500.0 * 65535.0 * quantum_s).abs() < 1e-6,
        "requested {}",
        f(3)
    );
    // paused from the first XOFF to 335.5 us after the last (0.4998 s later)
    let want = 0.4998 + 65535.0 * quantum_s;
    assert!((f(4) - want).abs() < 1e-8, "paused {} want {want}", f(4));
}

/// Cost follows packets and active interfaces: a pcapng of 300 interfaces, each with one
/// packet in its own second, writes one interfaces row and one flows row per interface (it
/// once snapshotted every interface that had a packet at every later interval: 45,150 rows),
/// with the same totals; an interface's row covers its own interval, not the quiet ones before.
#[test]
fn one_packet_per_interface_writes_a_row_per_interface_not_per_interval() {
    const N: u32 = 300;
    let tmp = TempDir::new("replay-many-ifaces");
    let dir = tmp.path();
    let names: Vec<String> = (0..N).map(|i| format!("e{i}")).collect();
    let ifaces: Vec<(u32, &str, u8)> = names
        .iter()
        .map(|n| (corpus::LINKTYPE_ETHERNET, n.as_str(), 9))
        .collect();
    let recs: Vec<corpus::Rec> = (0..N)
        .map(|i| corpus::Rec {
            ts_ns: i as u64 * 1_000_000_000 + 500_000_000,
            data: corpus::Roce::v4([10, 77, 0, 1], [10, 77, 0, 2], 0x100 + i, 0).frame(),
            iface: i,
            epb_flags: 0,
        })
        .collect();
    let file = dir.join("many.pcapng");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
    corpus::write_pcapng(&mut w, &ifaces, &recs).unwrap();
    w.flush().unwrap();
    drop(w);
    let out = dir.join("out");
    let o = Command::new(bin())
        .args(["replay", "--json", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["qps"].as_array().unwrap().len(), N as usize);
    let ifs = test_support::collector::pyarrow_read(&out, "interfaces", &["roce"], false);
    assert_eq!(ifs["rows"], N as u64, "one row per interface");
    assert_eq!(ifs["sums"]["roce"], N as u64);
    let script = r#"
import sys, glob, pyarrow.parquet as pq, pyarrow as pa
t = pa.concat_tables([pq.read_table(f) for f in glob.glob(sys.argv[1] + '/interfaces/*/*/*.parquet')])
print(max((e - s).total_seconds() for s, e in zip(t['interval_start'].to_pylist(), t['interval_end'].to_pylist())))
"#;
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let longest: f64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(
        longest <= 1.0,
        "a row spans more than its interval: {longest} s"
    );
    let flows = test_support::collector::pyarrow_read(&out, "flows", &["pkts"], false);
    assert_eq!(flows["rows"], N as u64);
    assert_eq!(flows["sums"]["pkts"], N as u64);
}

/// A capture of many keys over many intervals: RDMA WRITEs from 3,000 QPs arriving over 4 s
/// (new keys in every interval, keys quiet for several), ACKs, CE marks answered by CNPs,
/// PSN-sequence NAKs and go-back-N, DSCP off the policy, PFC frames.
fn many_keys_capture(path: &Path) {
    write_recs(path, &many_keys_recs());
}

fn write_recs(path: &Path, recs: &[corpus::Rec]) {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    corpus::write_pcap(&mut w, corpus::LINKTYPE_ETHERNET, 65535, true, recs).unwrap();
}

fn many_keys_recs() -> Vec<corpus::Rec> {
    let t0 = 1_700_000_000_000_000_000u64;
    let mut recs = Vec::new();
    let mut psn = vec![0u32; 3000];
    for i in 0..40_000u64 {
        let live = 200 + (i / 15) as usize; // keys appear as time goes on
        let c = ((i * 2_654_435_761) % live.min(3000) as u64) as usize;
        let a = [10, 5, (c >> 8) as u8, c as u8];
        let b = [10, 6, 0, (c % 7) as u8 + 1];
        let qp = 0x1000 + c as u32;
        let t = t0 + i * 100_000;
        let p = psn[c];
        psn[c] = (p + 1) & 0xff_ffff;
        let dscp = if c.is_multiple_of(97) { 0 } else { 26 };
        let ecn = if i % 31 == 0 { 3 } else { 2 };
        let mut push = |dt: u64, data: Vec<u8>| {
            recs.push(corpus::Rec {
                ts_ns: t + dt,
                data,
                iface: 0,
                epb_flags: 0,
            })
        };
        push(
            0,
            corpus::Roce::v4(a, b, qp, p)
                .payload(64)
                .mark(dscp, ecn)
                .frame(),
        );
        if p % 2 == 1 {
            push(
                1,
                corpus::Roce::v4(b, a, 0x9000 + c as u32, p)
                    .ack(0x1f)
                    .frame(),
            );
        }
        if ecn == 3 {
            push(2, corpus::Roce::v4(b, a, qp, 0).cnp().mark(48, 1).frame());
        }
        if i % 211 == 0 && p > 3 {
            push(
                3,
                corpus::Roce::v4(b, a, 0x9000 + c as u32, p)
                    .ack(0x60)
                    .frame(),
            );
            for back in (p - 3)..=p {
                push(
                    4,
                    corpus::Roce::v4(a, b, qp, back)
                        .payload(64)
                        .mark(26, 2)
                        .frame(),
                );
            }
        }
        if i % 1009 == 0 {
            push(
                5,
                corpus::pfc([2, 0, 0, 0, 0, 9], 0x08, [0, 0, 0, 0x200, 0, 0, 0, 0]),
            );
        }
    }
    recs
}

/// Every file of a tree (relative path, bytes).
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The outputs run on a thread of their own by default: the files they write (Parquet tables,
/// alerts.jsonl, summary.json, the policy copy) and the summary printed are the same bytes as
/// with `--inline-outputs` (one thread), on every corpus capture, the public captures, a
/// capture of many keys over many intervals, and several files in one command.
#[test]
fn outputs_on_their_own_thread_are_the_same_bytes() {
    let tmp = TempDir::new("replay-offload");
    let written = corpus::write_corpus(&tmp.path().join("corpus")).unwrap();
    let many = tmp.path().join("many.pcap");
    many_keys_capture(&many);
    let mut runs: Vec<(String, Vec<PathBuf>, Vec<&str>)> = Vec::new();
    for (c, p) in &written {
        runs.push((c.name.to_string(), vec![p.clone()], vec![]));
    }
    runs.push(("oferby".into(), vec![PathBuf::from(OFERBY)], vec![]));
    for interval in ["1s", "100ms", "7ms"] {
        runs.push((
            format!("many {interval}"),
            vec![many.clone()],
            vec!["--interval", interval],
        ));
    }
    let two: Vec<PathBuf> = written
        .iter()
        .filter(|(c, _)| ["go_back_n", "pfc", "pcapng_two_ifaces"].contains(&c.name))
        .map(|(_, p)| p.clone())
        .chain([many.clone()])
        .collect();
    assert_eq!(two.len(), 4);
    runs.push(("several files".into(), two, vec!["--interval", "250ms"]));
    let (mut compared, mut with_flows) = (0, 0);
    for (name, files, extra) in &runs {
        let mut outputs = Vec::new();
        for mode in [&[][..], &["--inline-outputs"][..]] {
            let out = tmp.path().join(format!("out-{}-{}", compared, mode.len()));
            let r = Command::new(bin())
                .args(["replay", "--host", "h", "--json", "--out"])
                .arg(&out)
                .args(mode)
                .args(extra)
                .args(files)
                .output()
                .unwrap();
            let mut summary: Value = serde_json::from_slice(&r.stdout)
                .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&r.stderr)));
            // the only figures that differ: the time taken and the directory named
            summary["replay"]
                .as_object_mut()
                .unwrap()
                .retain(|k, _| k != "seconds" && k != "out");
            outputs.push((r.status.code(), summary, tree(&out)));
        }
        let (a, b) = (&outputs[0], &outputs[1]);
        assert_eq!(a.0, b.0, "{name}: exit status");
        assert_eq!(a.1, b.1, "{name}: the summary printed");
        assert_eq!(
            a.2.keys().collect::<Vec<_>>(),
            b.2.keys().collect::<Vec<_>>(),
            "{name}: the files written"
        );
        for (p, bytes) in &a.2 {
            if bytes != &b.2[p] {
                let keep = tmp.path().to_path_buf();
                std::mem::forget(tmp);
                panic!(
                    "{name}: {} differs in {} run {compared}",
                    p.display(),
                    keep.display()
                );
            }
        }
        with_flows += a.2.keys().any(|p| p.starts_with("flows")) as usize;
        if !written.iter().any(|(c, _)| c.name == name) {
            assert!(
                a.2.keys().any(|p| p.starts_with("flows")),
                "{name}: flow logs written"
            );
        }
        compared += 1;
    }
    assert_eq!(compared, runs.len());
    assert!(
        with_flows > runs.len() / 2,
        "{with_flows} of {} runs wrote flow logs",
        runs.len()
    );
}

/// Captures of separate observation points (files of different stems) are read at once
/// (`--readers`): the summary printed and every file written are the same bytes as with every
/// input read one after another (`--readers 1`), by default, with two readers, with six,
/// with a capture split across files of one stem among them, with a damaged file among them
/// (its error in its place), and without outputs (`--no-out`).
#[test]
fn points_read_at_once_are_the_same_bytes() {
    let tmp = TempDir::new("replay-readers");
    let recs = many_keys_recs();
    let n = recs.len();
    let mut files = Vec::new();
    for (name, range) in [
        ("tor1.pcap", 0..n),
        ("tor2.pcap", n / 4..n),
        ("split.pcap1", n / 2..n),
        ("tor3.pcap", 0..n / 2),
        ("split.pcap", 0..n / 2),
    ] {
        let p = tmp.path().join(name);
        write_recs(&p, &recs[range]);
        files.push(p);
    }
    // a damaged capture: its header and a record cut short
    let bad = tmp.path().join("bad.pcap");
    let mut bytes = std::fs::read(&files[3]).unwrap();
    bytes.truncate(24 + 16 + 10);
    std::fs::write(&bad, &bytes).unwrap();
    files.insert(2, bad.clone());
    let run = |tag: &str, extra: &[&str]| {
        let out = tmp.path().join(format!("out-{tag}"));
        let r = Command::new(bin())
            .args(["replay", "--host", "h", "--json", "--interval", "100ms"])
            .args(extra)
            .args(if extra.contains(&"--no-out") {
                vec![]
            } else {
                vec!["--out".into(), out.display().to_string()]
            })
            .args(&files)
            .output()
            .unwrap();
        let mut summary: Value = serde_json::from_slice(&r.stdout)
            .unwrap_or_else(|e| panic!("{tag}: {e}: {}", String::from_utf8_lossy(&r.stderr)));
        summary["replay"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k != "seconds" && k != "out");
        let files = if out.exists() {
            tree(&out)
        } else {
            Default::default()
        };
        (r.status.code(), summary, files)
    };
    let one = run("one", &["--readers", "1"]);
    assert_eq!(one.0, Some(1), "the damaged file fails the command");
    let errors = one.1["replay"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].as_str().unwrap().contains("bad.pcap"),
        "{errors:?}"
    );
    let inputs: Vec<&str> = one.1["replay"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        inputs,
        [
            "tor1.pcap",
            "tor2.pcap",
            "bad.pcap",
            "split.pcap",
            "split.pcap1",
            "tor3.pcap"
        ],
        "a stem's files together, in time order"
    );
    assert!(
        one.2.keys().any(|p| p.starts_with("flows")),
        "flow logs written"
    );
    for (tag, extra) in [
        ("default", &[][..]),
        ("two", &["--readers", "2"][..]),
        ("six", &["--readers", "6"][..]),
    ] {
        let r = run(tag, extra);
        assert_eq!(r.0, one.0, "{tag}: exit status");
        assert_eq!(r.1, one.1, "{tag}: the summary printed");
        assert_eq!(
            r.2.keys().collect::<Vec<_>>(),
            one.2.keys().collect::<Vec<_>>(),
            "{tag}: the files written"
        );
        for (p, bytes) in &one.2 {
            if bytes != &r.2[p] {
                let keep = tmp.path().to_path_buf();
                std::mem::forget(tmp);
                panic!("{tag}: {} differs (in {})", p.display(), keep.display());
            }
        }
    }
    let (a, b) = (
        run("no-out-one", &["--no-out", "--readers", "1"]),
        run("no-out", &["--no-out", "--readers", "3"]),
    );
    assert_eq!(a.0, b.0, "--no-out: exit status");
    assert_eq!(a.1, b.1, "--no-out: the summary printed");
    assert_eq!(
        a.1["qps"].as_array().map(|q| q.len()),
        one.1["qps"].as_array().map(|q| q.len()),
        "--no-out: the same QPs"
    );
}

/// One capture split across files of one stem, as `tcpdump -C` writes them (`cap.pcap`,
/// `cap.pcap1`, `cap.pcap10`): given in any order (a shell's glob lists `cap.pcap10` before
/// `cap.pcap2`), they are read together, at the place of the first of them, in the order of
/// their first packets, so the outputs are those of the files given in that order.
#[test]
fn files_of_one_capture_are_read_in_time_order() {
    let tmp = TempDir::new("replay-order");
    let recs = many_keys_recs();
    let n = recs.len();
    let parts = [
        ("cap.pcap", 0..n / 3),
        ("cap.pcap1", n / 3..2 * n / 3),
        ("cap.pcap10", 2 * n / 3..n),
    ];
    let mut paths = Vec::new();
    for (name, range) in parts {
        let p = tmp.path().join(name);
        write_recs(&p, &recs[range]);
        paths.push(p);
    }
    let other = tmp.path().join("other.pcap");
    write_recs(&other, &recs[..500]);
    let run = |files: &[&PathBuf], tag: &str| {
        let out = tmp.path().join(format!("out-{tag}"));
        let r = Command::new(bin())
            .args([
                "replay",
                "--host",
                "h",
                "--json",
                "--interval",
                "250ms",
                "--out",
            ])
            .arg(&out)
            .args(files)
            .output()
            .unwrap();
        assert!(
            r.status.success(),
            "{tag}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let mut summary: Value = serde_json::from_slice(&r.stdout).unwrap();
        summary["replay"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k != "seconds" && k != "out");
        (
            summary,
            tree(&out),
            String::from_utf8_lossy(&r.stderr).into_owned(),
        )
    };
    let [a, b, c] = [&paths[0], &paths[1], &paths[2]];
    // (given, the same files given in time order within their stem's places)
    let cases = [
        ("glob", vec![&other, a, c, b], vec![&other, a, b, c]),
        ("reversed", vec![c, &other, b, a], vec![a, b, c, &other]),
    ];
    let mut in_order = None;
    for (tag, given, sorted) in cases {
        let want = run(&sorted, &format!("{tag}-sorted"));
        let r = run(&given, tag);
        let inputs: Vec<String> = sorted.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            r.0["replay"]["inputs"],
            serde_json::json!(inputs),
            "{tag}: read in time order"
        );
        assert_eq!(r.0, want.0, "{tag}: the summary");
        assert_eq!(
            r.1.keys().collect::<Vec<_>>(),
            want.1.keys().collect::<Vec<_>>(),
            "{tag}: the files written"
        );
        for (p, bytes) in &want.1 {
            assert!(bytes == &r.1[p], "{tag}: {} differs", p.display());
        }
        in_order.get_or_insert(want);
    }
    let in_order = in_order.unwrap();
    // one interface "cap" over the three files, and "other"
    let ifaces: std::collections::BTreeSet<&str> = in_order.0["qps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["iface"].as_str().unwrap())
        .collect();
    assert_eq!(ifaces, ["cap", "other"].into(), "one interface per stem");
}
