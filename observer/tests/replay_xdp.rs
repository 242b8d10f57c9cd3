//! The same capture gives the same per-QP totals through replay (userspace datapath) and through
//! the eBPF programs (BPF_PROG_TEST_RUN, frame by frame): every corpus file and the oferby
//! capture.
//!
//! What is compared: every per-QP counter and histogram, and the PFC/PAUSE totals. Not compared:
//! ICRC verdicts (the kernel does not compute the ICRC), first/last packet times (the kernel
//! stamps CLOCK_MONOTONIC at test-run time, replay uses capture time). Frames shorter than 14
//! bytes cannot be test-run (the kernel rejects them) and are skipped on both sides. Files cut by
//! a snaplen: the kernel sees only the captured bytes, so its wire length is the cut length;
//! those files are compared on every field except `bytes_l2` (which replay takes from the
//! original length). Linux cooked captures are run as replay's reconstructed Ethernet frames;
//! frames replay puts on egress are run through the tc egress program.

#[path = "support/corpus.rs"]
mod corpus;

use std::path::Path;

use observer::live::ProgTester;
use observer::replay::link::{self, LinkType};
use observer::replay::reader::{self, Item};
use observer::replay::{NoOutput, Replay, ReplayOptions};
use observer::snapshot::Snapshot;
use observer_common::maps::{Policy, QpKey, QpValue, dir};

/// Runs a capture through the eBPF programs; returns their snapshot.
fn through_kernel(path: &Path, name: &str) -> Snapshot {
    let data = std::fs::read(path).unwrap();
    let mut t = ProgTester::load(65536, &Policy::NONE).expect("load the eBPF programs");
    let mut links: Vec<LinkType> = Vec::new();
    let mut scratch = Vec::new();
    reader::read_capture_slice(name, &data, |item| {
        match item {
            Item::Iface(i) => links.push(i.link),
            Item::Record(r) => {
                let view = link::to_ethernet(links[r.iface], r.data, r.orig_len, &mut scratch);
                if view.bytes.len() < 14 {
                    return Ok(());
                }
                if view.direction == dir::EGRESS || r.outbound == Some(true) {
                    t.run_tc(view.bytes, true).expect("tc test run");
                } else {
                    t.run_xdp(view.bytes).expect("xdp test run");
                }
            }
        }
        Ok(())
    })
    .unwrap();
    t.snapshot(name, 0).expect("read the maps")
}

/// Replay's snapshot, with frames under 14 bytes left out as they are on the kernel side.
fn through_replay(path: &Path) -> Snapshot {
    let mut out = NoOutput;
    let mut rp = Replay::new(ReplayOptions::default(), &mut out);
    rp.feed_path(path).unwrap();
    let mut s = rp.snapshots();
    assert_eq!(s.len(), 1);
    s.remove(0)
}

fn comparable(v: &QpValue, with_l2: bool) -> QpValue {
    let mut v = *v;
    v.icrc_ok = 0;
    v.icrc_bad = 0;
    v.icrc_unverifiable = 0;
    v.first_ns = 0;
    v.last_ns = 0;
    if !with_l2 {
        v.bytes_l2 = 0;
    }
    v
}

fn compare(name: &str, path: &Path, cut: bool) -> usize {
    let k = through_kernel(path, name);
    let r = through_replay(path);
    let mut kq: Vec<(QpKey, QpValue)> = k.qps.iter().map(|(a, b)| (*a, comparable(b, !cut))).collect();
    let mut rq: Vec<(QpKey, QpValue)> = r.qps.iter().map(|(a, b)| (*a, comparable(b, !cut))).collect();
    kq.sort_by(|a, b| a.0.cmp(&b.0));
    rq.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        kq.iter().map(|x| x.0).collect::<Vec<_>>(),
        rq.iter().map(|x| x.0).collect::<Vec<_>>(),
        "{name}: QP keys"
    );
    for ((key, a), (_, b)) in kq.iter().zip(&rq) {
        assert_eq!(a, b, "{name}: QP {key:?}: kernel vs replay");
    }
    for d in 0..dir::COUNT {
        assert_eq!(k.iface_stats[d].pfc, r.iface_stats[d].pfc, "{name}: PFC totals, dir {d}");
        assert_eq!(k.iface_stats[d].roce, r.iface_stats[d].roce, "{name}: RoCE packets, dir {d}");
    }
    kq.len()
}

#[test]
fn corpus_per_qp_totals_equal_through_xdp_and_replay() {
    if !observer::testutil::require_root("corpus_per_qp_totals_equal_through_xdp_and_replay") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("replay-xdp-{}", std::process::id()));
    let files = corpus::write_corpus(&dir).unwrap();
    let mut keys = 0;
    for (c, p) in &files {
        keys += compare(c.name, p, c.snaplen < 65535);
    }
    keys += compare(
        "oferby",
        Path::new("/work/shared/captures/oferby_proxy_roce.pcap"),
        false,
    );
    assert!(keys > 40, "compared {keys} QP keys");
}
