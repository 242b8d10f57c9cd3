//! BPF_PROG_TEST_RUN of the kernel programs on frames built with etherparse, one test per case
//! of metrics.md. Each case asserts the exact map contents, and that the kernel's snapshot and
//! events equal the userspace `Datapath`'s on the same frames (one parser and one state machine,
//! checked both ways). Every case runs through the XDP program and both tc programs.
mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};

use common::*;
use observer::sources::Snapshot;
use observer::sources::datapath::Datapath;
use observer::sources::kernel::{ProgTester, XdpLenPath, prog};
use observer_common::maps::{
    ANY, Event, IfaceStats, MacKey, PauseEvent, PfcCounters, Policy, QpKey, QpValue, class, dir,
    policy_flags,
};
use observer_common::parse::{PCP_NONE, encap, reason};
use observer_common::qp::{self, ev, opcode_bucket};

const MAX_QPS: u32 = 1024;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const TC_ACT_OK: u32 = 0;
const TC_ACT_SHOT: u32 = 2;

/// One loaded object for the whole test binary (loading verifies four programs); each case
/// empties its maps first.
fn tester() -> MutexGuard<'static, ProgTester> {
    static T: OnceLock<Mutex<ProgTester>> = OnceLock::new();
    let m = T.get_or_init(|| {
        Mutex::new(ProgTester::load(MAX_QPS, &Policy::NONE).unwrap_or_else(|e| panic!("{e}")))
    });
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one case produced in the kernel.
struct Run {
    snap: Snapshot,
    events: Vec<Event>,
    /// The PAUSES ring's records (times zeroed).
    pauses: Vec<PauseEvent>,
    rets: Vec<u32>,
}

/// Runs `frames` through program `p` on a fresh map state, and the userspace datapath on the same
/// frames; asserts both agree; returns the kernel's result.
fn run_on(t: &mut ProgTester, case: &str, p: &str, policy: &Policy, frames: &[Vec<u8>]) -> Run {
    t.set_policy(policy).unwrap();
    t.reset().unwrap();
    let d = if p == prog::TC_EGRESS {
        dir::EGRESS
    } else {
        dir::INGRESS
    };
    let mut dp = Datapath::new(*policy, MAX_QPS as usize);
    dp.check_icrc = false;
    let mut rets = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let (r, _) = t.run(p, f, 1).unwrap_or_else(|e| panic!("{case} {p}: {e}"));
        rets.push(r);
        dp.process(f, f.len() as u32, 1_000 + i as u64, d);
    }
    let snap = t.snapshot("test", 0).unwrap();
    let mut events = Vec::new();
    t.drain_events(&mut events);
    let user = dp.snapshot("test", 0, None);
    assert_same(&format!("{case} ({p})"), &snap, &user);
    assert_eq!(
        untimed(&events),
        untimed(&dp.take_events()),
        "{case} ({p}): events differ from userspace"
    );
    // every PFC / PAUSE frame to the PAUSES ring, as userspace records it
    let (mut kp, mut up) = (Vec::new(), dp.take_pauses());
    t.drain_pauses(&mut kp);
    assert!(
        kp.iter().all(|e| e.ts_ns > 0),
        "{case} ({p}): untimed pause record"
    );
    for e in kp.iter_mut().chain(up.iter_mut()) {
        e.ts_ns = 0;
    }
    assert_eq!(kp, up, "{case} ({p}): pause records differ from userspace");
    Run {
        snap,
        events,
        pauses: kp,
        rets,
    }
}

/// Runs the case through XDP, tc ingress and tc egress (each against userspace); returns the
/// XDP run for the case's own assertions, after checking that the tc runs saw the same.
fn run_case(case: &str, policy: &Policy, frames: &[Vec<u8>]) -> Run {
    if !observer::testutil::require_root(case) {
        return Run {
            snap: empty_snapshot(),
            events: Vec::new(),
            pauses: Vec::new(),
            rets: Vec::new(),
        };
    }
    let mut t = tester();
    let x = run_on(&mut t, case, prog::XDP, policy, frames);
    let ti = run_on(&mut t, case, prog::TC_INGRESS, policy, frames);
    let te = run_on(&mut t, case, prog::TC_EGRESS, policy, frames);
    let xs = normalized(&x.snap);
    assert_eq!(
        xs.iface_stats[dir::INGRESS as usize],
        normalized(&ti.snap).iface_stats[0]
    );
    let es = normalized(&te.snap);
    assert_eq!(
        xs.iface_stats[dir::INGRESS as usize],
        es.iface_stats[dir::EGRESS as usize],
        "{case}: egress counts differ from ingress"
    );
    assert_eq!(es.iface_stats[dir::INGRESS as usize], IfaceStats::default());
    assert!(
        te.snap.qps.iter().all(|(k, _)| k.dir == dir::EGRESS),
        "{case}: egress keys"
    );
    x
}

fn empty_snapshot() -> Snapshot {
    Snapshot {
        iface: String::new(),
        time_ns: 0,
        link_speed_bps: None,
        qps: Vec::new(),
        iface_stats: [IfaceStats::default(); dir::COUNT],
        macs: Vec::new(),
        changed: None,
    }
}

fn ingress(r: &Run) -> IfaceStats {
    r.snap.iface_stats[dir::INGRESS as usize]
}

/// Skips (returns true) when not root; the run_case call above already reported it.
fn skipped() -> bool {
    !observer::testutil::is_root()
}

fn policy_enabled() -> Policy {
    Policy {
        dscp: [26, ANY, ANY],
        pcp: [3, ANY, ANY],
        ecn_capable: [1, 0, 0],
        flags: policy_flags::ENABLED,
        ..Policy::NONE
    }
}

#[test]
fn runt_frames() {
    if !observer::testutil::require_root("runt_frames") {
        return;
    }
    // The kernel cannot hand a program a frame under 14 bytes (BPF_PROG_TEST_RUN refuses it),
    // so the runt rule is checked in userspace here and on a mirrored inner frame below.
    let short = vec![0u8; 13];
    assert!(
        tester().run_xdp(&short).is_err(),
        "13-byte frame accepted by PROG_TEST_RUN"
    );
    let mut dp = Datapath::new(Policy::NONE, 16);
    dp.process(&short, 13, 1, dir::INGRESS);
    assert_eq!(dp.iface[0].excluded[reason::RUNT as usize], 1);

    // ERSPAN II outer headers are 50 bytes: a 10-byte inner frame makes a 60-byte frame with
    // no padding, whose inner frame is a runt.
    let inner = vec![0x02u8; 10];
    let f = mirrored(Mirror::Erspan2, &inner);
    assert_eq!(f.len(), 60);
    let r = run_case("runt_frames", &Policy::NONE, &[f]);
    let s = ingress(&r);
    assert_eq!(s.frames, 1);
    assert_eq!(s.excluded[reason::RUNT as usize], 1);
    assert_eq!(s.encap[encap::ERSPAN2 as usize], 1);
    assert_eq!(s.roce, 0);
}

#[test]
fn bad_ip_header() {
    let mut f = Roce::default().build();
    f[14] = 0x44; // IHL 4 words
    let r = run_case("bad_ip_header", &Policy::NONE, &[f]);
    if skipped() {
        return;
    }
    let s = ingress(&r);
    assert_eq!((s.frames, s.roce), (1, 0));
    assert_eq!(s.excluded[reason::BAD_IP_HEADER as usize], 1);
    assert!(r.snap.qps.is_empty());
}

#[test]
fn ip_fragments() {
    let first = Roce {
        more_fragments: true,
        ..Roce::default()
    }
    .build();
    let later = Roce {
        frag_offset: 100,
        ..Roce::default()
    }
    .build();
    let r = run_case("ip_fragments", &Policy::NONE, &[first, later]);
    if skipped() {
        return;
    }
    let s = ingress(&r);
    assert_eq!(s.excluded[reason::IP_FRAGMENT as usize], 2);
    assert_eq!(s.roce, 0);
}

#[test]
fn short_bth() {
    // By the UDP length field: 11 bytes of UDP payload (the frame carries more: padding).
    let mut by_len = Roce::default().build();
    let ulen_off = 14 + 20 + 4;
    by_len[ulen_off..ulen_off + 2].copy_from_slice(&(8u16 + 11).to_be_bytes());
    // By the capture: the frame ends 6 bytes into the BTH.
    let mut cut = Roce::default().build();
    cut.truncate(14 + 20 + 8 + 6);
    // Ethernet padding is not payload: 4 bytes of UDP payload in a 60-byte frame.
    let padded = {
        let mut p = Roce {
            payload: 0,
            ..Roce::default()
        }
        .build();
        p[ulen_off..ulen_off + 2].copy_from_slice(&(8u16 + 4).to_be_bytes());
        p
    };
    let r = run_case("short_bth", &Policy::NONE, &[by_len, cut, padded]);
    if skipped() {
        return;
    }
    let s = ingress(&r);
    assert_eq!(s.excluded[reason::SHORT_BTH as usize], 3);
    assert_eq!(s.excluded[reason::TRUNCATED as usize], 0);
    assert_eq!(s.roce, 0);
}

#[test]
fn udp_source_port_only_and_not_roce() {
    let src_only = Roce {
        sport: 4791,
        dport: 50000,
        ..Roce::default()
    }
    .build();
    let dns = Roce {
        dport: 53,
        ..Roce::default()
    }
    .build();
    let arp = ethernet(
        MAC_A,
        [0xff; 6],
        &[],
        etherparse::EtherType(0x0806),
        &[0u8; 28],
    );
    let r = run_case("udp_source_port_only", &Policy::NONE, &[src_only, dns, arp]);
    if skipped() {
        return;
    }
    let s = ingress(&r);
    assert_eq!(s.frames, 3);
    assert_eq!(s.excluded[reason::UDP_SRC_PORT_ONLY as usize], 1);
    assert_eq!(s.not_roce, 2);
    assert_eq!(s.roce, 0);
}

#[test]
fn vlan_and_qinq_outermost_pcp() {
    let single = Roce {
        tags: vec![(0x8100, 3, 100)],
        dest_qp: 1,
        ..Roce::default()
    }
    .build();
    let qinq = Roce {
        tags: vec![(0x88a8, 5, 10), (0x8100, 3, 100)],
        dest_qp: 2,
        ..Roce::default()
    }
    .build();
    let untagged = Roce {
        dest_qp: 3,
        ..Roce::default()
    }
    .build();
    let lens = [single.len(), qinq.len(), untagged.len()];
    let r = run_case("vlan_and_qinq", &Policy::NONE, &[single, qinq, untagged]);
    if skipped() {
        return;
    }
    assert_eq!(ingress(&r).roce, 3);
    for (qpn, pcp, len) in [
        (1, 3usize, lens[0]),
        (2, 5, lens[1]),
        (3, PCP_NONE as usize, lens[2]),
    ] {
        let (_, v) = r
            .snap
            .qps
            .iter()
            .find(|(k, _)| k.dest_qp == qpn)
            .expect("qp");
        assert_eq!(v.pcp_hist[class::DATA][pcp], 1, "qp {qpn}");
        assert_eq!(v.pkts, 1);
        assert_eq!(
            v.bytes_l2, len as u64,
            "qp {qpn}: L2 bytes include the tags"
        );
    }
}

#[test]
fn ipv4_options_are_parsed_past() {
    let f = Roce {
        options: 8,
        ..Roce::default()
    }
    .build();
    let r = run_case("ipv4_options", &Policy::NONE, &[f]);
    if skipped() {
        return;
    }
    let (k, v) = only_qp("ipv4_options", &r.snap);
    assert_eq!(k.src_ip, mapped(IP_A));
    assert_eq!(k.dst_ip, mapped(IP_B));
    assert_eq!(k.dest_qp, 0x11);
    let udp_payload = 12 + 68;
    assert_eq!(v.bytes_udp, udp_payload);
    assert_eq!(v.bytes_ip, 28 + 8 + udp_payload);
}

#[test]
fn ipv6_roce() {
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s[0] = 0xfd;
    s[15] = 1;
    d[0] = 0xfd;
    d[15] = 2;
    let f = Roce {
        v6: Some((s, d)),
        dscp: 26,
        ecn: 1,
        ..Roce::default()
    }
    .build();
    let r = run_case("ipv6_roce", &Policy::NONE, &[f]);
    if skipped() {
        return;
    }
    let (k, v) = only_qp("ipv6_roce", &r.snap);
    assert_eq!((k.src_ip, k.dst_ip), (s, d));
    assert_eq!(v.dscp_hist[class::DATA][26], 1);
    assert_eq!(v.ecn_hist[class::DATA][1], 1);
    assert_eq!(v.bytes_ip, 40 + 8 + 12 + 68);
}

#[test]
fn mirrored_roce() {
    let frames: Vec<Vec<u8>> = [
        (Mirror::GreTeb, 1u32),
        (Mirror::Erspan2, 2),
        (Mirror::Erspan3, 3),
    ]
    .iter()
    .map(|&(m, qpn)| {
        let inner = Roce {
            dest_qp: qpn,
            tags: vec![(0x8100, 4, 7)],
            ..Roce::default()
        }
        .build();
        mirrored(m, &inner)
    })
    .collect();
    let inner_len = Roce {
        tags: vec![(0x8100, 4, 7)],
        ..Roce::default()
    }
    .build()
    .len() as u64;
    let r = run_case("mirrored_roce", &Policy::NONE, &frames);
    if skipped() {
        return;
    }
    let s = ingress(&r);
    assert_eq!(s.roce, 3);
    assert_eq!(s.encap[encap::GRE_TEB as usize], 1);
    assert_eq!(s.encap[encap::ERSPAN2 as usize], 1);
    assert_eq!(s.encap[encap::ERSPAN3 as usize], 1);
    assert_eq!(r.snap.qps.len(), 3);
    for (k, v) in &r.snap.qps {
        assert_eq!(k.src_ip, mapped(IP_A), "the inner packet's addresses");
        assert_eq!(v.pcp_hist[class::DATA][4], 1, "the inner frame's PCP");
        assert_eq!(v.bytes_l2, inner_len, "L2 bytes of the inner frame");
    }
}

#[test]
fn acks_naks_rnr() {
    let ack = |syndrome: u8| {
        Roce {
            opcode: 0x11,
            aeth: Some(((syndrome as u32) << 24) | 5),
            payload: 4,
            ..Roce::default()
        }
        .build()
    };
    let frames = vec![ack(0x00), ack(0x60), ack(0x20), ack(0x61)];
    let r = run_case("acks_naks_rnr", &Policy::NONE, &frames);
    if skipped() {
        return;
    }
    let (_, v) = only_qp("acks_naks_rnr", &r.snap);
    assert_eq!(v.acks(), 4);
    assert_eq!(v.class_pkts(class::ACK), 4);
    assert_eq!(v.naks, 2);
    assert_eq!(v.nak_psn_seq_err, 1);
    assert_eq!(v.rnr_naks, 1);
    assert_eq!(v.psn_max_p1, 0, "ACKs are not PSN-analysed");
    assert_eq!(v.psn_retrans, 0);
    let kinds: Vec<u32> = r.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![ev::NEW_QP, ev::NAK, ev::RNR_NAK]);
    assert_eq!(r.events[1].detail, 0x6000_0005);
    assert_eq!(r.events[2].detail, 0x2000_0005);
}

#[test]
fn cnp() {
    let f = Roce {
        opcode: 0x81,
        payload: 16 + 4,
        ecn: 1,
        dscp: 48,
        ..Roce::default()
    }
    .build();
    let r = run_case("cnp", &Policy::NONE, &[f.clone(), f]);
    if skipped() {
        return;
    }
    let (_, v) = only_qp("cnp", &r.snap);
    assert_eq!(v.cnp(), 2);
    assert_eq!(v.dscp_hist[class::CNP][48], 2);
    assert_eq!(v.opcode_hist[opcode_bucket(0x81)], 2);
    assert_eq!(v.psn_max_p1, 0);
    let kinds: Vec<u32> = r.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![ev::NEW_QP, ev::CNP]);
}

/// One key with more opcodes, DSCPs and PCPs than its compact kernel value has cells for
/// (8 opcodes, 4 DSCP and 4 PCP cells): the buckets beyond them go to the `QPHIST` map, and the
/// snapshot's histograms still equal userspace's, bucket for bucket (`run_case`); evicting the
/// key deletes its `QPHIST` entries.
#[test]
fn histograms_beyond_the_compact_cells_stay_exact() {
    let opcodes = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0a, 0x0b,
    ];
    let mut frames = Vec::new();
    for (i, &opcode) in opcodes.iter().enumerate() {
        for j in 0..3u32 {
            let n = i as u32 * 3 + j;
            frames.push(
                Roce {
                    opcode,
                    psn: 100 + n,
                    dscp: [26, 0, 46, 10, 12, 34][n as usize % 6],
                    tags: vec![(0x8100, (n % 8) as u8, 100)],
                    ..Roce::default()
                }
                .build(),
            );
        }
    }
    let r = run_case("histograms_beyond_cells", &Policy::NONE, &frames);
    if skipped() {
        return;
    }
    let (k, v) = only_qp("histograms_beyond_cells", &r.snap);
    assert_eq!(v.pkts, frames.len() as u64);
    for &op in &opcodes {
        assert_eq!(v.opcode_hist[opcode_bucket(op)], 3, "opcode {op:#x}");
    }
    assert_eq!(
        v.dscp_hist[class::DATA].iter().filter(|&&n| n > 0).count(),
        6
    );
    assert_eq!(v.pcp_hist[class::DATA][..8], [5, 4, 4, 4, 4, 4, 4, 4]);
    assert_eq!(ingress(&r).hist_overflow_lost, 0);
    // Again through XDP alone, holding the tester (other tests share it): 3 opcodes, 2 DSCPs
    // and 4 PCPs beyond the cells; eviction takes them along.
    let mut t = tester();
    t.reset().unwrap();
    for f in &frames {
        t.run(prog::XDP, f, 1).unwrap();
    }
    assert_eq!(t.hist_overflow_entries().unwrap(), 3 + 2 + 4);
    let keys: Vec<_> = t
        .snapshot("t", 0)
        .unwrap()
        .qps
        .iter()
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(keys, vec![k]);
    let gone = t.evict(&keys).unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(
        gone[0].1.opcode_hist, v.opcode_hist,
        "the evicted value has every bucket"
    );
    assert_eq!(gone[0].1.dscp_hist, v.dscp_hist);
    assert_eq!(gone[0].1.pcp_hist, v.pcp_hist);
    assert_eq!(
        t.hist_overflow_entries().unwrap(),
        0,
        "evicted with its key"
    );
}

/// The live loop gives each snapshot back and the next read updates it in place, expanding
/// only the slots whose packets moved: over rounds of random traffic (a third of 400 keys
/// active per round, up to 12 DSCPs so some buckets go to QPHIST, keys evicted and coming
/// back), every incremental snapshot equals a full read of the table, and expands no more
/// than this round's and the last round's active keys.
#[test]
fn incremental_reads_equal_full_reads() {
    if !observer::testutil::require_root("incremental_reads_equal_full_reads") {
        return;
    }
    let mut t = tester();
    t.set_policy(&Policy::NONE).unwrap();
    t.reset().unwrap();
    let frame = |q: u32, psn: u32, dscp: u8| {
        Roce {
            src4: [10, 9, (q >> 8) as u8, q as u8],
            dest_qp: 0x300 + q,
            psn,
            dscp,
            ..Roce::default()
        }
        .build()
    };
    let sorted = |mut v: Vec<(QpKey, QpValue)>| {
        for (_, x) in v.iter_mut() {
            // the snapshot's times are wall-clock, the full read's monotonic
            x.first_ns = 0;
            x.last_ns = 0;
        }
        v.sort_by_key(|(k, _)| *k);
        v
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut psn = vec![0u32; 400];
    let mut kept_total = 0usize;
    let mut snap: Option<Snapshot> = None;
    let (mut last_id, mut evicted): (Option<u64>, Vec<QpKey>) = (None, Vec::new());
    for round in 0..16 {
        let mut active = std::collections::BTreeSet::new();
        for _ in 0..130 {
            let q = rnd(400) as u32;
            for _ in 0..1 + rnd(3) {
                psn[q as usize] += 1;
                let dscp = (rnd(12) * 4) as u8;
                t.run(prog::XDP, &frame(q, psn[q as usize], dscp), 1)
                    .unwrap();
            }
            active.insert(q);
        }
        if let Some(s) = snap.take() {
            t.recycle(s);
        }
        let s = t.snapshot("t", 0).unwrap();
        let full = t.read_all_qps().unwrap();
        assert_eq!(
            sorted(s.qps.clone()),
            sorted(full.clone()),
            "round {round}: the incremental snapshot differs from a full read"
        );
        let expanded = t.last_read_expansions();
        // what the snapshot says changed: the expanded entries, the keys evicted since
        let ch = s
            .changed
            .clone()
            .expect("the kernel source says what changed");
        assert_eq!(ch.base, last_id, "round {round}: the base is the last read");
        last_id = Some(ch.id);
        if round > 0 {
            assert_eq!(ch.positions.len(), expanded, "round {round}");
            let mut gone = ch.gone.clone();
            gone.sort();
            // the evicted keys' entries are gone, but for those that got a packet since and
            // were inserted into their old slot again (then they are listed at a position)
            let listed: std::collections::BTreeSet<QpKey> =
                ch.positions.iter().map(|&p| s.qps[p as usize].0).collect();
            let present: std::collections::BTreeSet<QpKey> =
                s.qps.iter().map(|(k, _)| *k).collect();
            let evicted = std::mem::take(&mut evicted);
            for k in &evicted {
                assert!(
                    gone.contains(k) || listed.contains(k),
                    "round {round}: evicted {k:?} neither gone nor listed"
                );
                if !present.contains(k) {
                    assert!(gone.contains(k), "round {round}: {k:?} absent, not gone");
                }
            }
            assert!(
                gone.iter().all(|k| evicted.contains(k)),
                "round {round}: only evicted keys are gone"
            );
            for &p in &ch.positions {
                assert!((p as usize) < s.qps.len());
            }
            // beside each position, its value's non-zero histogram blocks (the collector
            // reads only those of the value)
            assert_eq!(ch.blocks.len(), ch.positions.len(), "round {round}");
            for (&p, &b) in ch.positions.iter().zip(&ch.blocks) {
                let v = &s.qps[p as usize].1;
                assert_eq!(
                    b,
                    observer::pipeline::deltas::nonzero_blocks(v),
                    "round {round}: blocks of {:?}",
                    s.qps[p as usize].0
                );
            }
            let moved: std::collections::BTreeSet<u32> = s
                .qps
                .iter()
                .map(|(k, _)| k.dest_qp - 0x300)
                .filter(|q| active.contains(q))
                .collect();
            let listed: std::collections::BTreeSet<u32> = ch
                .positions
                .iter()
                .map(|&p| s.qps[p as usize].0.dest_qp - 0x300)
                .collect();
            assert!(
                listed.is_superset(&moved),
                "round {round}: every key with packets is listed"
            );
        }
        if round > 0 {
            assert!(
                expanded <= active.len(),
                "round {round}: {expanded} slots expanded, {} keys active (only marked slots)",
                active.len()
            );
            kept_total += full.len() - expanded;
        }
        // every fourth round: evict a tenth of the keys (they come back as new keys later)
        if round % 4 == 3 {
            let gone: Vec<QpKey> = s.qps.iter().step_by(10).map(|(k, _)| *k).collect();
            assert_eq!(t.evict(&gone).unwrap().len(), gone.len());
            evicted = gone;
            evicted.sort();
        }
        snap = Some(s);
    }
    assert!(
        kept_total > 1000,
        "entries kept without expansion: {kept_total}"
    );
    assert!(
        t.hist_overflow_entries().unwrap() > 0,
        "the traffic should have put buckets into QPHIST"
    );
    t.reset().unwrap();
}

/// An incremental read visits the slots whose `QPDIRTY` bit a packet set since the last read,
/// and keeps every other entry as it is. Simulated from userspace between reads: writes with
/// the bit are taken; writes without it (which no program run makes: every run ends by setting
/// its bit when clear, and a run that found it set has ended, its writes visible, before the
/// read that took the bit looks at the slot) are not, until a packet sets the bit.
#[test]
fn a_read_visits_the_slots_packets_marked_and_only_those() {
    if !observer::testutil::require_root("a_read_visits_the_slots_packets_marked") {
        return;
    }
    let mut t = tester();
    t.set_policy(&Policy::NONE).unwrap();
    t.reset().unwrap();
    t.run(prog::XDP, &Roce::default().build(), 1).unwrap();
    let s1 = t.snapshot("t", 0).unwrap();
    let (k, v1) = only_qp("marked", &s1);
    t.recycle(s1);
    // written with the bit: visited and expanded
    assert!(t.poke_slot(&k, true, |s| {
        s.value.pkts += 1;
        s.value.bytes_l2 += 100;
    }));
    let s2 = t.snapshot("t", 0).unwrap();
    assert_eq!(t.last_read_expansions(), 1);
    assert_eq!(s2.qps[0].1.pkts, v1.pkts + 1);
    assert_eq!(s2.qps[0].1.bytes_l2, v1.bytes_l2 + 100);
    assert_eq!(
        s2.changed.as_ref().map(|c| c.positions.clone()),
        Some(vec![0])
    );
    t.recycle(s2);
    // the bit was taken: the next read visits nothing
    let s3 = t.snapshot("t", 0).unwrap();
    assert_eq!(t.last_read_expansions(), 0, "nothing marked: kept");
    assert_eq!(s3.changed.as_ref().map(|c| c.positions.len()), Some(0));
    t.recycle(s3);
    // written without the bit: not visited
    assert!(t.poke_slot(&k, false, |s| s.value.rnr_naks += 1));
    let s4 = t.snapshot("t", 0).unwrap();
    assert_eq!(t.last_read_expansions(), 0, "no bit: not visited");
    assert_eq!(s4.qps[0].1.rnr_naks, v1.rnr_naks);
    t.recycle(s4);
    // a packet sets it: everything is taken
    t.run(prog::XDP, &Roce::default().build(), 1).unwrap();
    let s5 = t.snapshot("t", 0).unwrap();
    assert_eq!(t.last_read_expansions(), 1, "the packet set the bit");
    assert_eq!(s5.qps[0].1.rnr_naks, v1.rnr_naks + 1);
    assert_eq!(s5.qps[0].1.pkts, v1.pkts + 2);
    assert_eq!(s5.qps[0].1.bytes_l2, 2 * v1.bytes_l2 + 100);
    let full = t.read_all_qps().unwrap();
    assert_eq!(full.len(), 1);
    assert_eq!(full[0].1.pkts, s5.qps[0].1.pkts);
    assert_eq!(full[0].1.bytes_l2, s5.qps[0].1.bytes_l2);
    assert_eq!(full[0].1.rnr_naks, s5.qps[0].1.rnr_naks);
    t.reset().unwrap();
}

fn psn_frames(psns: &[u32]) -> Vec<Vec<u8>> {
    psns.iter().map(|&p| Roce::data(p).build()).collect()
}

#[test]
fn psn_gap() {
    let r = run_case("psn_gap", &Policy::NONE, &psn_frames(&[10, 11, 15]));
    if skipped() {
        return;
    }
    let (_, v) = only_qp("psn_gap", &r.snap);
    assert_eq!(
        (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind),
        (1, 3, 0, 0)
    );
    assert_eq!(v.psn_max(), Some(15));
    let gap: Vec<&Event> = r.events.iter().filter(|e| e.kind == ev::PSN_GAP).collect();
    assert_eq!(gap.len(), 1);
    assert_eq!((gap[0].psn, gap[0].detail), (15, 3));
}

/// [`read_request`] cut by `cut` bytes (the 4-byte ICRC space included).
fn read_frame(psn: u32, len: u32, cut: usize) -> Vec<u8> {
    let mut f = read_request(psn, len);
    f.truncate(f.len() - cut);
    f
}

/// metrics.md "RDMA READ requests": READ windows in the kernel as in userspace (run_case
/// compares the two, the PSN state word included). pmtu 1024: READs of 64 KiB consume 64 PSNs
/// (n_min 16, w 240), 8 KiB ones 8 (n_min 2, w 30).
#[test]
fn rdma_read_windows() {
    let mut f = vec![read_frame(10, 65536, 0), read_frame(74, 65536, 0)];
    // the next WRITE, then 139 lost
    f.extend(psn_frames(&[138, 140]));
    // an 8 KiB READ at 141 (141..=172 at most), then the next WRITE at 176: 173..=175 missing
    f.push(read_frame(141, 8192, 0));
    f.extend(psn_frames(&[176]));
    // a resend of that READ; a READ whose DMA length was cut: any next PSN up to 2^23 is no gap
    f.push(read_frame(141, 8192, 0));
    f.push(read_frame(177, 8192, 6));
    f.extend(psn_frames(&[1177]));
    let r = run_case("rdma_read", &Policy::NONE, &f);
    if skipped() {
        return;
    }
    let (_, v) = only_qp("rdma_read", &r.snap);
    assert_eq!(
        (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind),
        (2, 1 + 3, 1, 1)
    );
    assert_eq!((v.psn_max(), v.psn_read), (Some(1177), 0));
    let gap: Vec<&Event> = r.events.iter().filter(|e| e.kind == ev::PSN_GAP).collect();
    assert_eq!(gap.len(), 1);
    assert_eq!((gap[0].psn, gap[0].detail), (140, 1));
    // back-to-back READs alone: no gap, the state after the last one is its window
    let r = run_case(
        "rdma_read_only",
        &Policy::NONE,
        &(0..50)
            .map(|i| read_frame(i * 64, 65536, 0))
            .collect::<Vec<_>>(),
    );
    let (_, v) = only_qp("rdma_read_only", &r.snap);
    assert_eq!((v.psn_gaps, v.psn_retrans), (0, 0));
    assert_eq!((v.psn_max(), v.psn_read), (Some(49 * 64 + 15), 240));
}

#[test]
fn go_back_n_episode() {
    // L = 3 lost (102..104), k = 2 more in flight after 105 (106, 107), then resend from 102.
    let psns = [100, 101, 105, 106, 107, 102, 103, 104, 105, 106, 107];
    let r = run_case("go_back_n", &Policy::NONE, &psn_frames(&psns));
    if skipped() {
        return;
    }
    let (_, v) = only_qp("go_back_n", &r.snap);
    let (l, k) = (3, 2);
    assert_eq!(v.psn_gaps, 1);
    assert_eq!(v.psn_missing, l);
    assert_eq!(v.psn_retrans, l + k + 1);
    assert_eq!(v.psn_behind, l + k);
    assert_eq!(v.pkts, psns.len() as u64);
}

/// metrics.md "QP number reuse": a jump of 2^22 or more restarts the PSN analysis in the kernel
/// as in userspace (run_case compares the two).
#[test]
fn qp_reuse_by_psn_jump() {
    let r = run_case(
        "qp_reuse_jump",
        &Policy::NONE,
        &psn_frames(&[7, 8, 8 + (1 << 22), 9 + (1 << 22), 3 + (1 << 22)]),
    );
    if skipped() {
        return;
    }
    let (_, v) = only_qp("qp_reuse_jump", &r.snap);
    assert_eq!(
        (v.qp_incarnations, v.psn_gaps, v.psn_retrans, v.psn_behind),
        (1, 0, 1, 1)
    );
    assert_eq!(v.psn_max(), Some(9 + (1 << 22)));
}

/// The idle criterion with the kernel's packet clock: a key idle longer than the policy's
/// incarnation idle time whose next PSN is not the next one is a new QP; with the criterion off
/// the same packets are a retransmission.
#[test]
fn qp_reuse_after_idle_in_the_kernel() {
    if !observer::testutil::require_root("qp_reuse_after_idle_in_the_kernel") {
        return;
    }
    let mut t = tester();
    let mut run = |idle_ms: u32| {
        let pol = Policy {
            incarnation_idle_ms: idle_ms,
            ..Policy::NONE
        };
        t.set_policy(&pol).unwrap();
        t.reset().unwrap();
        for (i, f) in psn_frames(&[500, 501, 40, 41]).iter().enumerate() {
            if i == 2 {
                // well past 5 ms on the coarse clock (one tick is 1-4 ms)
                std::thread::sleep(std::time::Duration::from_millis(40));
            }
            t.run(prog::XDP, f, 1).unwrap();
        }
        let snap = t.snapshot("test", 0).unwrap();
        let (_, v) = only_qp("qp_reuse_idle", &snap);
        (v.qp_incarnations, v.psn_retrans, v.psn_max())
    };
    assert_eq!(run(5), (1, 0, Some(41)));
    assert_eq!(run(0), (0, 2, Some(501)));
    t.set_policy(&Policy::NONE).unwrap();
}

/// The idle criterion's other half in the kernel: a key idle longer than the policy's
/// incarnation idle time whose next PSN is the next one is the same QP resuming (metrics.md
/// "QP number reuse"), on the XDP and the tc programs, as in replay. Found on real soft-RoCE
/// traffic (rdma_cm's MAD QP resuming after a pause): the object once counted a new incarnation
/// here, a miscompiled range check (docs/datapath.md "Compiler pitfalls").
#[test]
fn qp_resumed_after_idle_in_the_kernel() {
    if !observer::testutil::require_root("qp_resumed_after_idle_in_the_kernel") {
        return;
    }
    let mut t = tester();
    let pol = Policy {
        incarnation_idle_ms: 5,
        ..Policy::NONE
    };
    t.set_policy(&pol).unwrap();
    for p in [prog::XDP, prog::TC_INGRESS, prog::TC_EGRESS] {
        t.reset().unwrap();
        for (i, f) in psn_frames(&[500, 501, 502, 503]).iter().enumerate() {
            if i == 2 {
                // well past 5 ms on the coarse clock (one tick is 1-4 ms)
                std::thread::sleep(std::time::Duration::from_millis(40));
            }
            t.run(p, f, 1).unwrap();
        }
        let snap = t.snapshot("test", 0).unwrap();
        let (_, v) = only_qp("qp_resumed_idle", &snap);
        assert_eq!(
            (v.qp_incarnations, v.psn_retrans, v.psn_gaps, v.psn_max()),
            (0, 0, 0, Some(503)),
            "program {p:?}"
        );
    }
    t.set_policy(&Policy::NONE).unwrap();
}

#[test]
fn psn_wrap_is_not_a_gap() {
    let r = run_case(
        "psn_wrap",
        &Policy::NONE,
        &psn_frames(&[0xfffffe, 0xffffff, 0, 1]),
    );
    if skipped() {
        return;
    }
    let (_, v) = only_qp("psn_wrap", &r.snap);
    assert_eq!(
        (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind),
        (0, 0, 0, 0)
    );
    assert_eq!(v.psn_max(), Some(1));
}

#[test]
fn suspect_opcode_and_tver() {
    let bad_op = Roce {
        opcode: 0x30,
        ..Roce::default()
    }
    .build();
    let bad_tver = Roce {
        flags: 0x01,
        psn: 101,
        ..Roce::default()
    }
    .build();
    let r = run_case("suspect", &Policy::NONE, &[bad_op, bad_tver]);
    if skipped() {
        return;
    }
    let (_, v) = only_qp("suspect", &r.snap);
    assert_eq!(v.suspect, 2);
    assert_eq!(v.opcode_hist[qp::OPCODE_OTHER], 1);
    assert!(r.events.iter().any(|e| e.kind == ev::SUSPECT));
}

#[test]
fn pfc_enabled_priorities_only() {
    // Priorities 3 (XOFF, 0xffff quanta) and 4 (XON) enabled; priority 5 has a time but its
    // enable bit is clear, so it is ignored.
    let f = pfc(MAC_A, &[], 0b0001_1000, [0, 0, 0, 0xffff, 0, 100, 0, 0]);
    let r = run_case("pfc", &Policy::NONE, &[f.clone(), f]);
    if skipped() {
        return;
    }
    let mut want = PfcCounters {
        pfc_frames: 2,
        ..PfcCounters::default()
    };
    want.enabled[3] = 2;
    want.xoff[3] = 2;
    want.quanta[3] = 2 * 0xffff;
    want.enabled[4] = 2;
    want.xon[4] = 2;
    assert_eq!(ingress(&r).pfc, want);
    assert_eq!(r.pauses.len(), 2, "one PAUSES record per frame");
    let e = r.pauses[0];
    assert_eq!(
        (
            e.opcode,
            e.class_enable,
            e.times[3],
            e.times[5],
            e.src_mac,
            e.dir
        ),
        (0x0101, 0b0001_1000, 0xffff, 100, MAC_A, dir::INGRESS)
    );
    assert_eq!(
        r.snap.macs,
        vec![(
            MacKey {
                mac: MAC_A,
                dir: dir::INGRESS,
                _pad: 0
            },
            want
        )]
    );
}

#[test]
fn pause_8023x() {
    let r = run_case(
        "pause",
        &Policy::NONE,
        &[pause(MAC_B, 0x100), pause(MAC_B, 0)],
    );
    if skipped() {
        return;
    }
    let want = PfcCounters {
        pause: 2,
        pause_xon: 1,
        pause_quanta: 0x100,
        ..PfcCounters::default()
    };
    assert_eq!(ingress(&r).pfc, want);
    assert_eq!(r.snap.macs.len(), 1);
    assert_eq!(r.snap.macs[0].1, want);
}

#[test]
fn policy_mismatch_events_first_occurrence_only() {
    let bad = Roce {
        dscp: 0,
        ecn: 0,
        dest_qp: 1,
        ..Roce::default()
    }
    .build();
    let good = Roce {
        dscp: 26,
        ecn: 2,
        tags: vec![(0x8100, 3, 100)],
        dest_qp: 2,
        ..Roce::default()
    }
    .build();
    let bad2 = Roce {
        dscp: 0,
        ecn: 0,
        dest_qp: 1,
        psn: 101,
        ..Roce::default()
    }
    .build();
    let r = run_case("policy_events", &policy_enabled(), &[bad, bad2, good]);
    if skipped() {
        return;
    }
    let on = |q: u32| -> Vec<u32> {
        r.events
            .iter()
            .filter(|e| e.key.dest_qp == q)
            .map(|e| e.kind)
            .collect()
    };
    let d = class::DATA as u32;
    assert_eq!(
        on(1),
        vec![ev::NEW_QP, ev::DSCP + d, ev::PCP + d, ev::NOT_ECT + d]
    );
    assert_eq!(on(2), vec![ev::NEW_QP]);
    let e = r.events.iter().find(|e| e.kind == ev::DSCP + d).unwrap();
    assert_eq!((e.dscp, e.ecn, e.pcp), (0, 0, PCP_NONE));
    // Policy::NONE checks nothing: the same frames give only new_qp.
    let r2 = run_case("policy_none", &Policy::NONE, &[Roce::default().build()]);
    assert_eq!(
        r2.events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![ev::NEW_QP]
    );
}

#[test]
fn drop_after_observe() {
    if !observer::testutil::require_root("drop_after_observe") {
        return;
    }
    let policy = Policy {
        flags: policy_flags::DROP_AFTER_OBSERVE,
        ..Policy::NONE
    };
    let frames = vec![Roce::default().build(), pfc(MAC_A, &[], 1, [1; 8])];
    let mut t = tester();
    let x = run_on(&mut t, "drop", prog::XDP, &policy, &frames);
    assert_eq!(x.rets, vec![XDP_DROP, XDP_DROP]);
    assert_eq!(ingress(&x).dropped, 2);
    assert_eq!(ingress(&x).roce, 1, "observed before being dropped");
    let tc = run_on(&mut t, "drop", prog::TC_EGRESS, &policy, &frames);
    assert_eq!(tc.rets, vec![TC_ACT_SHOT, TC_ACT_SHOT]);
    assert_eq!(tc.snap.iface_stats[dir::EGRESS as usize].dropped, 2);
    // And without the flag nothing is dropped.
    let pass = run_on(&mut t, "pass", prog::XDP, &Policy::NONE, &frames);
    assert_eq!(pass.rets, vec![XDP_PASS, XDP_PASS]);
    assert_eq!(ingress(&pass).dropped, 0);
    let pass = run_on(&mut t, "pass", prog::TC_INGRESS, &Policy::NONE, &frames);
    assert_eq!(pass.rets, vec![TC_ACT_OK, TC_ACT_OK]);
}

#[test]
fn full_qp_map_counts_untracked() {
    if !observer::testutil::require_root("full_qp_map_counts_untracked") {
        return;
    }
    let mut t = ProgTester::load(2, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let frames: Vec<Vec<u8>> = (1..=3)
        .map(|q| {
            Roce {
                dest_qp: q,
                ..Roce::default()
            }
            .build()
        })
        .collect();
    let mut dp = Datapath::new(Policy::NONE, 2);
    dp.check_icrc = false;
    for (i, f) in frames.iter().chain(frames.iter()).enumerate() {
        t.run_xdp(f).unwrap();
        dp.process(f, f.len() as u32, i as u64, dir::INGRESS);
    }
    let s = t.snapshot("test", 0).unwrap();
    assert_same("full_qp_map", &s, &dp.snapshot("test", 0, None));
    let st = s.iface_stats[0];
    assert_eq!(s.qps.len(), 2);
    assert_eq!(st.roce, 6);
    assert_eq!(st.qp_insert_failed, 2);
    assert_eq!(st.roce_untracked, 2);
    // Evicting one key returns its last value and frees a slot for the third QP.
    let k = s.qps[0].0;
    let ev = t.evict(&[k]).unwrap();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1.pkts, 2);
    assert!(t.evict(&[k]).unwrap().is_empty(), "already gone");
    t.run_xdp(&frames[2]).unwrap();
    let s = t.snapshot("test", 0).unwrap();
    assert_eq!(s.qps.len(), 2);
    assert!(s.qps.iter().any(|(k, _)| k.dest_qp == 3));
}

#[test]
fn snapshot_times_are_wall_clock() {
    if !observer::testutil::require_root("snapshot_times_are_wall_clock") {
        return;
    }
    let mut t = tester();
    t.set_policy(&Policy::NONE).unwrap();
    t.reset().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    t.run_xdp(&Roce::default().build()).unwrap();
    let s = t.snapshot("test", 0).unwrap();
    let (_, v) = only_qp("times", &s);
    let slack = 5_000_000_000;
    assert!(
        v.first_ns + slack > now && v.first_ns < now + slack,
        "first_ns {}",
        v.first_ns
    );
    assert!(v.last_ns >= v.first_ns);
    let mut e = Vec::new();
    t.drain_events(&mut e);
    assert_eq!(e.len(), 1);
    assert!(e[0].ts_ns + slack > now && e[0].ts_ns < now + slack);
}

#[test]
fn jumbo_frame_counts_every_fragment() {
    // A 4096-MTU data packet (~4.2 KB frame) is larger than a page: XDP sees it as a
    // multi-buffer frame; the wire length must still be the whole frame. Sizes around the
    // test run's linear part (one page less headroom and shared info, 3520 bytes here) and
    // well past it, through both ways the program takes the length (kfunc, helper).
    let sizes = [1500usize, 3520, 3521, 3600, 4200, 6000, 9000];
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| {
            let f = Roce {
                payload: n - (14 + 20 + 8 + 12),
                ..Roce::default()
            }
            .build();
            assert_eq!(f.len(), n);
            f
        })
        .collect();
    if !observer::testutil::require_root("jumbo_frame") {
        return;
    }
    let mut kf = tester();
    if let XdpLenPath::Linear(_) = kf.xdp_len_path() {
        // The compat object (kernels before 5.18): single-buffer XDP only. Frames that fit one
        // buffer count whole; a larger one the kernel does not give such a program at all (a
        // driver refuses to attach it on an MTU above a page; tc ingress observes there).
        let fit: Vec<Vec<u8>> = frames.iter().filter(|f| f.len() <= 3520).cloned().collect();
        assert_eq!(fit.len(), 2);
        let r = run_on(
            &mut kf,
            "jumbo_frame (compat)",
            prog::XDP,
            &Policy::NONE,
            &fit,
        );
        let total: usize = fit.iter().map(Vec::len).sum();
        assert_eq!(only_qp("jumbo_frame", &r.snap).1.bytes_l2, total as u64);
        assert_eq!(ingress(&r).frames, 2);
        // BPF_PROG_TEST_RUN (unlike a driver, which refuses to attach a single-buffer program
        // on an MTU above a page) builds a multi-buffer frame even for such a program: it sees
        // the first buffer only. This is why the compat object must not be offered large frames.
        kf.reset().unwrap();
        if kf.run(prog::XDP, &frames[6], 1).is_ok() {
            let snap = kf.snapshot("test", 0).unwrap();
            let (_, v) = only_qp("jumbo_frame (compat)", &snap);
            assert!(v.bytes_l2 > 0 && v.bytes_l2 <= 3520, "{}", v.bytes_l2);
        }
        return;
    }
    // Where the kernel's BTF has the layout, the kfunc path must pass its load-time check.
    if let Ok(k) = observer::sources::kernel::kfunc::Btf::vmlinux()
        .and_then(|b| observer::sources::kernel::kfunc::Kfuncs::from_btf(&b))
    {
        assert_eq!(
            *kf.xdp_len_path(),
            XdpLenPath::Kfunc,
            "kernel layout {k:?} but the kfunc path is not used"
        );
    }
    let mut helper = ProgTester::load_helper_len(MAX_QPS, &Policy::NONE).unwrap();
    assert!(matches!(helper.xdp_len_path(), XdpLenPath::Helper(_)));
    for t in [&mut *kf, &mut helper] {
        let path = t.xdp_len_path().to_string();
        // XDP only: BPF_PROG_TEST_RUN takes no skb larger than a page for tc.
        let r = run_on(t, "jumbo_frame", prog::XDP, &Policy::NONE, &frames);
        let (_, v) = only_qp("jumbo_frame", &r.snap);
        let total: usize = sizes.iter().sum();
        assert_eq!(v.bytes_l2, total as u64, "{path}");
        assert_eq!(v.max_udp_payload as usize, 9000 - (14 + 20 + 8), "{path}");
        assert_eq!(ingress(&r).bytes, total as u64, "{path}");
        assert_eq!(ingress(&r).frames, sizes.len() as u64, "{path}");
    }
}

#[test]
fn snapshot_reads_many_keys_from_the_mapped_table() {
    if !observer::testutil::require_root("snapshot_reads_many_keys_from_the_mapped_table") {
        return;
    }
    // More keys than fit in one bucket pair: they spread over the table.
    let mut t = ProgTester::load(1024, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    let n = 600u32;
    for q in 0..n {
        let f = Roce {
            dest_qp: q,
            ..Roce::default()
        }
        .build();
        t.run_xdp(&f).unwrap();
    }
    let s = t.snapshot("test", 0).unwrap();
    assert_eq!(t.table_len(), n as u64, "the kernel's key count");
    assert_eq!(s.qps.len(), n as usize);
    let mut qpns: Vec<u32> = s.qps.iter().map(|(k, _)| k.dest_qp).collect();
    qpns.sort_unstable();
    assert_eq!(qpns, (0..n).collect::<Vec<_>>(), "every key exactly once");
    assert!(s.qps.iter().all(|(_, v)| v.pkts == 1));
}

/// Threads of this process named like the packet clock ticker.
fn clock_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "roce-clock")
        .count()
}

#[test]
fn clock_ticker_times_are_wall_clock_and_it_stops_on_drop() {
    if !observer::testutil::require_root("clock_ticker_times_are_wall_clock_and_it_stops_on_drop") {
        return;
    }
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    // Only this test starts a ticker in this binary.
    assert_eq!(clock_threads(), 0);
    let mut t = ProgTester::load(16, &Policy::NONE).unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.clock_running());
    t.start_clock().unwrap();
    assert!(t.clock_running());
    // The kernel ticks it (a perf event program): no thread of this process does.
    assert!(t.clock_in_kernel(), "the perf event ticker did not attach");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        clock_threads(),
        0,
        "a ticker thread runs beside the kernel's"
    );
    let f = Roce::default().build();
    let before = wall();
    t.run_xdp(&f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    t.run_xdp(&f).unwrap();
    let after = wall();
    let s = t.snapshot("test", 0).unwrap();
    let (_, v) = only_qp("ticker times", &s);
    assert_eq!(v.pkts, 2);
    // The ticked clock lags by at most a tick plus the ticker's scheduling delay.
    let slack = 1_000_000_000;
    assert!(
        v.first_ns + slack > before && v.first_ns <= after,
        "first_ns {} not in [{before} - 1 s, {after}]",
        v.first_ns
    );
    assert!(
        v.last_ns > v.first_ns && v.last_ns <= after,
        "last_ns {} first_ns {} after {after}: the clock did not advance with the ticker",
        v.last_ns,
        v.first_ns
    );
    drop(t);
    assert_eq!(clock_threads(), 0);
}

#[test]
fn every_truncation_agrees_with_userspace() {
    // Each header the parser reads, cut at every length from the shortest frame a test run
    // takes (14 bytes) to the whole: the kernel's bounded loads (8/4/2/1-byte wide) must
    // classify each prefix exactly as the userspace parser does, in XDP, tc ingress and tc
    // egress (`run_case` compares every counter, key and event).
    let mut s6 = [0u8; 16];
    s6[0] = 0xfd;
    s6[15] = 1;
    let mut d6 = s6;
    d6[15] = 2;
    let vlan_ack = Roce {
        tags: vec![(0x88a8, 5, 100), (0x8100, 3, 7)],
        opcode: 0x11,
        aeth: Some(0x6000_0005),
        payload: 4,
        ..Roce::default()
    }
    .build();
    let bases = [
        vlan_ack.clone(),
        Roce {
            v6: Some((s6, d6)),
            payload: 8,
            ..Roce::default()
        }
        .build(),
        Roce {
            options: 12,
            payload: 8,
            ..Roce::default()
        }
        .build(),
        mirrored(Mirror::Erspan2, &vlan_ack),
        mirrored(Mirror::Erspan3, &vlan_ack),
        mirrored(Mirror::GreTeb, &vlan_ack),
        pfc(
            MAC_A,
            &[(0x8100, 3, 1)],
            0x0009,
            [7, 0, 0, 65535, 0, 0, 0, 0],
        ),
        pause(MAC_B, 100),
    ];
    let frames: Vec<Vec<u8>> = bases
        .iter()
        .flat_map(|b| (14..=b.len()).map(move |n| b[..n].to_vec()))
        .collect();
    assert!(frames.len() > 500, "{} prefixes", frames.len());
    if !observer::testutil::require_root("every_truncation") {
        return;
    }
    let mut t = tester();
    let x = run_on(
        &mut t,
        "every_truncation",
        prog::XDP,
        &Policy::NONE,
        &frames,
    );
    let s = ingress(&x);
    assert_eq!(s.frames, frames.len() as u64);
    // The whole RoCE frames (and the prefixes that only cut the payload) are RoCE, the cut
    // headers excluded: both must be there.
    assert!(s.roce >= bases.len() as u64 - 2, "{s:?}");
    assert!(s.excluded.iter().sum::<u64>() > 100, "{s:?}");
    // The tc test run refuses an untagged IPv4 / IPv6 frame shorter than its IP header.
    let tc_frames: Vec<Vec<u8>> = frames
        .into_iter()
        .filter(|f| match [f[12], f[13]] {
            [0x08, 0x00] => f.len() >= 14 + 20,
            [0x86, 0xdd] => f.len() >= 14 + 40,
            _ => true,
        })
        .collect();
    drop(t);
    let r = run_case("every_truncation (tc)", &Policy::NONE, &tc_frames);
    assert_eq!(ingress(&r).frames, tc_frames.len() as u64);
}

/// Live evidence (`--evidence`): with a sample rate set, every offending RoCE frame, and no
/// clean one, is copied to the SAMPLES ring by XDP and both tc hooks: its first SAMPLE_SNAP
/// bytes exactly (odd lengths: the 4/2/1-byte tail; long ones cut), its length, its key and
/// the rules it broke as the userspace datapath computes them. Over the rate, frames are
/// counted, not copied; at rate 0 nothing is.
#[test]
fn offending_frames_are_sampled_as_they_were() {
    use observer_common::maps::{SAMPLE_SNAP, Sample};
    if !observer::testutil::require_root("offending_frames_are_sampled_as_they_were") {
        return;
    }
    let mut s6 = [0u8; 16];
    s6[0] = 0xfd;
    s6[15] = 1;
    let mut d6 = s6;
    d6[15] = 2;
    let tagged = vec![(0x8100, 3, 100)];
    let frames = vec![
        // clean
        Roce {
            tags: tagged.clone(),
            dest_qp: 2,
            psn: 1,
            ..Roce::default()
        }
        .build(),
        // bleached, an odd length (63 bytes)
        Roce {
            dscp: 0,
            dest_qp: 1,
            payload: 9,
            ..Roce::default()
        }
        .build(),
        // clean, then a PSN gap on the same key
        Roce {
            tags: tagged.clone(),
            dest_qp: 2,
            psn: 2,
            ..Roce::default()
        }
        .build(),
        Roce {
            tags: tagged.clone(),
            dest_qp: 2,
            psn: 6,
            ..Roce::default()
        }
        .build(),
        // IPv6, two tags, Not-ECT and longer than a sample
        Roce {
            v6: Some((s6, d6)),
            tags: vec![(0x88a8, 5, 100), (0x8100, 3, 7)],
            ecn: 0,
            dest_qp: 3,
            payload: 300,
            ..Roce::default()
        }
        .build(),
        // a NAK (sequence error) back
        Roce {
            src4: IP_B,
            dst4: IP_A,
            tags: tagged.clone(),
            opcode: 0x11,
            aeth: Some(0x6000_0005),
            dest_qp: 4,
            payload: 4,
            ..Roce::default()
        }
        .build(),
    ];
    let policy = policy_enabled();
    let mut t = tester();
    for p in [prog::XDP, prog::TC_INGRESS, prog::TC_EGRESS] {
        let d = if p == prog::TC_EGRESS {
            dir::EGRESS
        } else {
            dir::INGRESS
        };
        t.set_policy(&policy).unwrap();
        t.reset().unwrap();
        t.set_sample_rate(1000).unwrap();
        let mut dp = Datapath::new(policy, MAX_QPS as usize);
        dp.check_icrc = false;
        dp.offenses = true;
        let mut want = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            t.run(p, f, 1).unwrap();
            dp.process(f, f.len() as u32, 1_000 + i as u64, d);
            if dp.last_offense != 0 {
                want.push((i, dp.last_offense, dp.last_key.unwrap()));
            }
        }
        assert_eq!(
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            [1, 3, 4, 5],
            "{p}: the offending frames"
        );
        let mut got: Vec<Sample> = Vec::new();
        t.drain_samples(&mut got);
        assert_eq!(got.len(), want.len(), "{p}: one sample per offending frame");
        for (s, (i, bits, key)) in got.iter().zip(&want) {
            let f = &frames[*i];
            let n = f.len().min(SAMPLE_SNAP);
            assert_eq!(
                (s.offenses, s.key, s.cap_len as usize, s.wire_len as usize),
                (*bits, *key, n, f.len()),
                "{p}: frame {i}"
            );
            assert_eq!(&s.bytes[..n], &f[..n], "{p}: frame {i}'s bytes");
            assert_eq!(s.vlan_present, 0, "{p}: no offload under BPF_PROG_TEST_RUN");
            assert!(s.ts_ns > 0, "{p}: frame {i} timed");
        }
        assert_eq!(frames[1].len(), 63, "an odd length");
        assert!(frames[4].len() > SAMPLE_SNAP, "longer than a sample");
        let c = t.sampler_counts().unwrap();
        assert_eq!(
            (c.sampled, c.over_rate, c.lost),
            (want.len() as u64, 0, 0),
            "{p}"
        );
    }
    // Two a second: two copied, the others counted.
    t.reset().unwrap();
    t.set_sample_rate(2).unwrap();
    for f in &frames {
        t.run(prog::XDP, f, 1).unwrap();
    }
    let mut got: Vec<Sample> = Vec::new();
    t.drain_samples(&mut got);
    let c = t.sampler_counts().unwrap();
    assert_eq!((got.len(), c.sampled, c.over_rate), (2, 2, 2));
    // Off: nothing copied, nothing counted.
    t.reset().unwrap();
    t.set_sample_rate(0).unwrap();
    for f in &frames {
        t.run(prog::XDP, f, 1).unwrap();
    }
    got.clear();
    t.drain_samples(&mut got);
    let c = t.sampler_counts().unwrap();
    assert_eq!((got.len(), c.sampled, c.over_rate, c.lost), (0, 0, 0, 0));
}
