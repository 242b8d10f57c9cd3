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

use test_support::corpus;

use std::path::Path;

use observer::sources::Discard;
use observer::sources::Snapshot;
use observer::sources::capture::link_layer::{self as link, LinkType};
use observer::sources::capture::pcap_reader::{self as reader, Item};
use observer::sources::capture::{Replay, ReplayOptions};
use observer::sources::kernel::ProgTester;
use observer_common::maps::{Policy, QpKey, QpValue, dir};

/// Runs a capture through the eBPF programs, one fresh (reset) object per capture interface;
/// returns one snapshot per interface, in the capture's interface order.
fn through_kernel(t: &mut ProgTester, path: &Path, name: &str) -> Vec<Snapshot> {
    let data = std::fs::read(path).unwrap();
    // Records grouped by interface, in order; interfaces' link types.
    let mut links: Vec<LinkType> = Vec::new();
    let mut frames: Vec<Vec<(Vec<u8>, bool)>> = Vec::new();
    let mut scratch = Vec::new();
    reader::read_capture_slice(name, &data, |item| {
        match item {
            Item::Iface(i) => {
                links.push(i.link);
                frames.push(Vec::new());
            }
            Item::Record(r) => {
                let view = link::to_ethernet(links[r.iface], r.data, r.orig_len, &mut scratch);
                if view.bytes.len() >= 14 {
                    let egress = view.direction == dir::EGRESS || r.outbound == Some(true);
                    frames[r.iface].push((view.bytes.to_vec(), egress));
                }
            }
        }
        Ok(())
    })
    .unwrap();
    let mut out = Vec::new();
    for (i, fs) in frames.iter().enumerate() {
        t.reset().expect("reset the maps");
        for (f, egress) in fs {
            if *egress {
                t.run_tc(f, true).expect("tc test run");
            } else {
                t.run_xdp(f).expect("xdp test run");
            }
        }
        out.push(
            t.snapshot(&format!("{name}#{i}"), 0)
                .expect("read the maps"),
        );
    }
    out
}

/// Replay's snapshots, one per capture interface.
fn through_replay(path: &Path) -> Vec<Snapshot> {
    let mut out = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut out);
    rp.feed_path(path).unwrap();
    rp.snapshots()
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

fn compare(t: &mut ProgTester, name: &str, path: &Path, cut: bool) -> usize {
    let ks = through_kernel(t, path, name);
    let rs = through_replay(path);
    assert_eq!(ks.len(), rs.len(), "{name}: interfaces");
    let mut n = 0;
    for (k, r) in ks.iter().zip(&rs) {
        let mut kq: Vec<(QpKey, QpValue)> = k
            .qps
            .iter()
            .map(|(a, b)| (*a, comparable(b, !cut)))
            .collect();
        let mut rq: Vec<(QpKey, QpValue)> = r
            .qps
            .iter()
            .map(|(a, b)| (*a, comparable(b, !cut)))
            .collect();
        kq.sort_by_key(|a| a.0);
        rq.sort_by_key(|a| a.0);
        assert_eq!(
            kq.iter().map(|x| x.0).collect::<Vec<_>>(),
            rq.iter().map(|x| x.0).collect::<Vec<_>>(),
            "{name} {}: QP keys",
            r.iface
        );
        for ((key, a), (_, b)) in kq.iter().zip(&rq) {
            assert_eq!(a, b, "{name} {}: QP {key:?}: kernel vs replay", r.iface);
        }
        for d in 0..dir::COUNT {
            assert_eq!(
                k.iface_stats[d].pfc, r.iface_stats[d].pfc,
                "{name}: PFC totals, dir {d}"
            );
            assert_eq!(
                k.iface_stats[d].roce, r.iface_stats[d].roce,
                "{name}: RoCE packets, dir {d}"
            );
        }
        n += kq.len();
    }
    n
}

#[test]
fn corpus_per_qp_totals_equal_through_xdp_and_replay() {
    if !observer::testutil::require_root("corpus_per_qp_totals_equal_through_xdp_and_replay") {
        return;
    }
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("replay-xdp-{}", std::process::id()));
    let files = corpus::write_corpus(&dir).unwrap();
    let mut t = ProgTester::load(65536, &Policy::NONE).expect("load the eBPF programs");
    let mut keys = 0;
    for (c, p) in &files {
        keys += compare(&mut t, c.name, p, c.snaplen < 65535);
    }
    keys += compare(
        &mut t,
        "oferby",
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/captures/oferby_proxy_roce.pcap"
        )),
        false,
    );
    assert!(keys > 40, "compared {keys} QP keys");
}
