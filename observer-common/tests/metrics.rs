//! Every rule of metrics.md, on frames built with etherparse, through the one parser and the
//! one per-QP state machine (userspace ops).

mod support;

use observer_common::icrc;
use observer_common::maps::{IfaceStats, PfcCounters, Policy, QpValue, class, policy_flags};
use observer_common::parse::{self, Frame, PCP_NONE, classify, encap, kind, reason};
use observer_common::qp::{self, Plain, PsnStep, ev};
use observer_common::qp_table::{HistKey, KValue, QpSlot, add_overflow, hist};
use support::*;

fn excluded(f: &Frame) -> Option<&'static str> {
    (f.kind == kind::EXCLUDED).then(|| reason::NAMES[f.reason as usize])
}

/// Runs frames through classify + update for one key; returns the value.
fn run(frames: &[Vec<u8>]) -> QpValue {
    let mut v = QpValue::ZERO;
    for (i, fr) in frames.iter().enumerate() {
        let f = classify(&fr[..]);
        assert_eq!(f.kind, kind::ROCE, "frame {i} not RoCE: {f:?}");
        unsafe {
            qp::update::<Plain, _>(&mut v, &f, fr.len() as u32, 1000 + i as u64, &Policy::NONE)
        };
    }
    v
}

fn data(psn: u32) -> Vec<u8> {
    Pkt::roce(0x0a, 0x11, psn, 64).build()
}

/// An RC RDMA READ request (0x0c) at `psn` for `len` bytes: BTH and RETH, no payload.
fn read_req(psn: u32, len: u32) -> Vec<u8> {
    let mut p = Pkt::roce(0x0c, 0x11, psn, 0);
    p.payload
        .extend(observer_common::frames::reth(0x1000, 0x1234, len));
    p.build()
}

/// (gaps, missing, retrans, behind) of a value.
fn psn_counts(v: &QpValue) -> (u64, u64, u64, u64) {
    (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind)
}

#[test]
fn rule1_runt() {
    for n in 0..14 {
        let f = classify(&vec![0u8; n][..]);
        assert_eq!(excluded(&f), Some("runt"), "len {n}");
    }
}

#[test]
fn rule2_pfc_counts_only_enabled_priorities() {
    // Priority 3 XOFF 0xffff, priority 5 XON, priority 1 quanta present but bit clear.
    let mut times = [0u16; 8];
    times[3] = 0xffff;
    times[5] = 0;
    times[1] = 777;
    let fr = pfc((1 << 3) | (1 << 5), times);
    let f = classify(&fr[..]);
    assert_eq!(f.kind, kind::MAC_CONTROL);
    assert_eq!(f.mac_ctrl.opcode, parse::MAC_CONTROL_PFC);
    assert_eq!(f.mac_ctrl.src_mac, MAC_A);
    let mut c = PfcCounters::default();
    qp::account_mac_control(&mut c, &f.mac_ctrl);
    assert_eq!(c.pfc_frames, 1);
    assert_eq!(c.enabled, [0, 0, 0, 1, 0, 1, 0, 0]);
    assert_eq!(c.xoff, [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(c.xon, [0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(c.quanta, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
    assert_eq!(c.pause, 0);
}

#[test]
fn rule2_pause_and_other_opcodes() {
    let mut c = PfcCounters::default();
    for t in [0u16, 100, 0xffff] {
        let f = classify(&pause(t)[..]);
        assert_eq!(f.kind, kind::MAC_CONTROL);
        qp::account_mac_control(&mut c, &f.mac_ctrl);
    }
    assert_eq!((c.pause, c.pause_xon, c.pause_quanta), (3, 1, 100 + 0xffff));
    let mut other = pause(5);
    other[15] = 0x02;
    let f = classify(&other[..]);
    qp::account_mac_control(&mut c, &f.mac_ctrl);
    assert_eq!(c.other_opcode, 1);
    assert_eq!(c.pfc_frames, 0);
    // A VLAN-tagged PFC frame is still MAC control (ethertype after the tags).
    let mut tagged = pfc(1, [1, 0, 0, 0, 0, 0, 0, 0]);
    tagged.splice(12..12, [0x81, 0x00, 0x60, 0x01]);
    assert_eq!(classify(&tagged[..]).kind, kind::MAC_CONTROL);
    // Cut inside the PFC body.
    let cut = &pfc(1, [1; 8])[..20];
    assert_eq!(excluded(&classify(cut)), Some("truncated"));
}

#[test]
fn rule3_bad_ip_header() {
    let mut fr = data(1);
    fr[14] = 0x44; // IHL 4 words
    assert_eq!(excluded(&classify(&fr[..])), Some("bad_ip_header"));
    let mut fr = data(1);
    fr[14] = 0x65; // version 6 under ethertype IPv4
    assert_eq!(excluded(&classify(&fr[..])), Some("bad_ip_header"));
}

#[test]
fn rule4_fragments_including_first() {
    let mut p = Pkt::roce(0x0a, 1, 1, 64);
    p.more_fragments = true;
    assert_eq!(excluded(&classify(&p.build()[..])), Some("ip_fragment"));
    let mut p = Pkt::roce(0x0a, 1, 1, 64);
    p.frag_offset = 10;
    assert_eq!(excluded(&classify(&p.build()[..])), Some("ip_fragment"));
}

#[test]
fn rule5_roce_and_short_bth() {
    let fr = data(7);
    let f = classify(&fr[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert_eq!((f.bth.opcode, f.bth.dest_qp, f.bth.psn), (0x0a, 0x11, 7));
    assert_eq!((f.dscp, f.ecn, f.pcp), (26, 2, PCP_NONE));
    assert_eq!(f.udp_payload_len as usize, 12 + 64 + 4);
    assert_eq!(f.ip_len as usize, 20 + 8 + 12 + 64 + 4);
    // UDP payload of 11 bytes by the length field, padded by Ethernet to 60 bytes.
    let mut p = Pkt::roce(0x0a, 1, 1, 0);
    p.payload.truncate(11);
    p.icrc = false;
    let mut fr = p.build();
    fr.resize(60, 0);
    assert_eq!(excluded(&classify(&fr[..])), Some("short_bth"));
    // Capture cut inside the BTH.
    let fr = data(1);
    let cut = &fr[..14 + 20 + 8 + 6];
    assert_eq!(excluded(&classify(cut)), Some("short_bth"));
    // Garbage on 4791 with a full 12 bytes is RoCE (and suspect when its fields say so).
    let mut p = Pkt::roce(0x0a, 1, 1, 0);
    p.payload = vec![0xee; 20];
    let f = classify(&p.build()[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert!(qp::is_suspect(&f));
}

#[test]
fn rule6_source_port_only_and_rule7_other() {
    let mut p = Pkt::roce(0x0a, 1, 1, 8);
    p.sport = 4791;
    p.dport = 5000;
    assert_eq!(
        excluded(&classify(&p.build()[..])),
        Some("udp_src_port_only")
    );
    let mut p = Pkt::roce(0x0a, 1, 1, 8);
    p.dport = 5000;
    assert_eq!(classify(&p.build()[..]).kind, kind::NOT_ROCE);
    let mut arp = Vec::new();
    eth(&mut arp, &[], 0x0806);
    arp.resize(60, 0);
    assert_eq!(classify(&arp[..]).kind, kind::NOT_ROCE);
}

#[test]
fn ipv4_options_vlan_qinq_ipv6() {
    let mut p = Pkt::roce(0x04, 9, 3, 32);
    p.ip_options = vec![1, 1, 1, 0]; // NOP NOP NOP EOL: IHL 6
    let f = classify(&p.build()[..]);
    assert_eq!(
        (f.kind, f.bth.dest_qp, f.ip_off, f.udp_off),
        (kind::ROCE, 9, 14, 14 + 24)
    );
    assert_eq!(icrc::verify(&p.build(), &f), icrc::Verdict::Ok);

    // QinQ: the outermost (S-tag) priority counts.
    let mut p = Pkt::roce(0x04, 9, 3, 32);
    p.vlans = vec![(0x88a8, 5), (0x8100, 3)];
    let f = classify(&p.build()[..]);
    assert_eq!((f.kind, f.pcp), (kind::ROCE, 5));

    let mut p = Pkt::roce(0x04, 9, 3, 32);
    p.vlans = vec![(0x8100, 3)];
    assert_eq!(classify(&p.build()[..]).pcp, 3);

    let mut p = Pkt::roce(0x04, 9, 3, 32);
    p.v6 = true;
    p.dscp = 48;
    p.ecn = 3;
    let fr = p.build();
    let f = classify(&fr[..]);
    assert_eq!(
        (f.kind, f.ip_version, f.dscp, f.ecn),
        (kind::ROCE, 6, 48, 3)
    );
    assert_eq!(f.ip_len as usize, fr.len() - 14);
    assert_eq!(icrc::verify(&fr, &f), icrc::Verdict::Ok);
}

#[test]
fn mirror_encapsulations_are_opened() {
    let mut p = Pkt::roce(0x0a, 0x42, 100, 200);
    p.vlans = vec![(0x8100, 3)];
    let inner = p.build();
    let cases = [
        (gre_wrap(&inner, 0, 0x6558, &[], &[]), encap::GRE_TEB),
        (gre_wrap(&inner, 0, 0x88be, &[], &[]), encap::ERSPAN1),
        (
            gre_wrap(&inner, 0x1000, 0x88be, &[0, 0, 0, 9], &erspan2_hdr()),
            encap::ERSPAN2,
        ),
        (
            gre_wrap(&inner, 0x1000, 0x22eb, &[0, 0, 0, 9], &erspan3_hdr(false)),
            encap::ERSPAN3,
        ),
        (
            gre_wrap(&inner, 0x1000, 0x22eb, &[0, 0, 0, 9], &erspan3_hdr(true)),
            encap::ERSPAN3,
        ),
        // Key and checksum present.
        (
            gre_wrap(&inner, 0xa000, 0x6558, &[0; 8], &[]),
            encap::GRE_TEB,
        ),
    ];
    for (fr, e) in cases {
        let f = classify(&fr[..]);
        assert_eq!((f.kind, f.encap), (kind::ROCE, e), "{f:?}");
        assert_eq!(
            (f.bth.dest_qp, f.bth.psn, f.pcp, f.dscp),
            (0x42, 100, 3, 26)
        );
        assert_eq!(fr.len() - f.l2_off as usize, inner.len());
        assert_eq!(icrc::verify(&fr, &f), icrc::Verdict::Ok);
        let mut v = QpValue::ZERO;
        unsafe { qp::update::<Plain, _>(&mut v, &f, fr.len() as u32, 1, &Policy::NONE) };
        assert_eq!(
            v.bytes_l2 as usize,
            inner.len(),
            "L2 bytes are the mirrored frame's"
        );
        // Cut inside the ERSPAN/GRE header, or inside the mirrored Ethernet header.
        let cut = &fr[..14 + 20 + 6];
        assert_eq!(excluded(&classify(cut)), Some("truncated"));
        let cut = &fr[..f.l2_off as usize + 10];
        assert_eq!(excluded(&classify(cut)), Some("truncated"));
    }
    // A complete mirror packet whose outer IP length leaves 10 bytes of mirrored frame: a runt.
    let runt = gre_wrap(&[0x02; 10], 0, 0x6558, &[], &[]);
    assert_eq!(excluded(&classify(&runt[..])), Some("runt"));
    // GRE carrying something else is not RoCE; version 1 (PPTP) neither.
    assert_eq!(
        classify(&gre_wrap(&inner, 0, 0x0800, &[], &[])[..]).kind,
        kind::NOT_ROCE
    );
    assert_eq!(
        classify(&gre_wrap(&inner, 1, 0x6558, &[], &[])[..]).kind,
        kind::NOT_ROCE
    );
}

#[test]
fn per_qp_counts_bytes_and_histograms() {
    let mut p = Pkt::roce(0x0a, 0x11, 5, 1000);
    p.vlans = vec![(0x8100, 3)];
    let big = p.build();
    let mut ack = Pkt::roce(0x11, 0x11, 5, 0);
    ack.payload.extend_from_slice(&[0x00, 0, 0, 1]); // AETH: ACK
    ack.dscp = 26;
    let ackf = ack.build();
    let mut cnp = Pkt::roce(0x81, 0x11, 0, 16);
    cnp.dscp = 48;
    cnp.ecn = 1;
    let cnpf = cnp.build();
    let mut ce = Pkt::roce(0x0a, 0x11, 6, 10);
    ce.ecn = 3;
    let cef = ce.build();
    let v = run(&[big.clone(), ackf.clone(), cnpf.clone(), cef.clone()]);
    assert_eq!(v.pkts, 4);
    let l2 = (big.len() + ackf.len() + cnpf.len() + cef.len()) as u64;
    assert_eq!(v.bytes_l2, l2);
    assert_eq!(v.bytes_ip, l2 - 4 * 14 - 4);
    assert_eq!(v.bytes_udp, v.bytes_ip - 4 * 28);
    assert_eq!(v.max_udp_payload as usize, 12 + 1000 + 4);
    assert_eq!(
        (v.class_pkts(class::DATA), v.class_pkts(class::ACK), v.cnp()),
        (2, 1, 1)
    );
    assert_eq!((v.acks(), v.ce(), v.naks), (1, 1, 0));
    assert_eq!(v.dscp_hist[class::DATA][26], 2);
    assert_eq!(v.dscp_hist[class::CNP][48], 1);
    assert_eq!(v.ecn_hist[class::DATA], [0, 0, 1, 1]);
    assert_eq!(v.ecn_hist[class::CNP], [0, 1, 0, 0]);
    assert_eq!(v.pcp_hist[class::DATA][3], 1);
    assert_eq!(v.pcp_hist[class::DATA][8], 1, "untagged counts as none");
    assert_eq!(v.opcode_hist[qp::opcode_bucket(0x0a)], 2);
    assert_eq!(v.opcode_hist[qp::opcode_bucket(0x81)], 1);
    assert_eq!((v.first_ns, v.last_ns), (1000, 1003));
    // Ack and CNP are not PSN-analysed: only PSN 5 and 6, a clean step.
    assert_eq!((v.psn_gaps, v.psn_retrans, v.psn_max()), (0, 0, Some(6)));
}

#[test]
fn aeth_syndromes() {
    let mk = |op: u8, syn: u8| {
        let mut p = Pkt::roce(op, 7, 1, 0);
        p.payload.extend_from_slice(&[syn, 0, 0, 9]);
        p.build()
    };
    let v = run(&[
        mk(0x11, 0x00), // ACK
        mk(0x11, 0x60), // NAK PSN sequence error
        mk(0x11, 0x61), // NAK invalid request
        mk(0x11, 0x20), // RNR NAK
        mk(0x11, 0x3f), // RNR NAK (timer field)
        mk(0x10, 0x00), // READ RESPONSE ONLY with AETH
    ]);
    assert_eq!(
        (v.acks(), v.naks, v.nak_psn_seq_err, v.rnr_naks),
        (5, 2, 1, 2)
    );
    // An AETH cut off by the UDP length is not read.
    let mut p = Pkt::roce(0x11, 7, 1, 0);
    p.payload.extend_from_slice(&[0x60, 0]);
    p.icrc = false;
    let f = classify(&p.build()[..]);
    assert_eq!((f.kind, f.has_aeth), (kind::ROCE, 0));
}

#[test]
fn psn_go_back_n_episode() {
    // 0 1 2 | 3 4 lost | 5 (gap) 6 (one more in flight) | resend 3 4 5 6 | 7
    let v = run(&[0, 1, 2, 5, 6, 3, 4, 5, 6, 7].map(data));
    // L = 2 lost, k = 1 more in flight after the gap: gaps 1, missing L, retrans L+k+1,
    // behind L+k.
    assert_eq!(
        (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind),
        (1, 2, 4, 3)
    );
}

#[test]
fn psn_wrap_is_a_step_not_a_gap() {
    let v = run(&[0xfffffe, 0xffffff, 0, 1].map(data));
    assert_eq!((v.psn_gaps, v.psn_retrans, v.psn_max()), (0, 0, Some(1)));
    let v = run(&[0xfffffe, 0xffffff, 2].map(data));
    assert_eq!((v.psn_gaps, v.psn_missing), (1, 2));
    // Behind across the wrap.
    let v = run(&[0xffffff, 1, 0xfffffe].map(data));
    assert_eq!(
        (v.psn_gaps, v.psn_missing, v.psn_retrans, v.psn_behind),
        (1, 1, 1, 1)
    );
}

/// Runs data packets `(psn, time_ns)` through one key under `pol`.
fn run_timed(pkts: &[(u32, u64)], pol: &Policy) -> QpValue {
    let mut v = QpValue::ZERO;
    for &(psn, t) in pkts {
        let fr = data(psn);
        let f = classify(&fr[..]);
        unsafe { qp::update::<Plain, _>(&mut v, &f, fr.len() as u32, t, pol) };
    }
    v
}

#[test]
fn qp_number_reuse_restarts_the_psn_analysis() {
    const S: u64 = 1_000_000_000;
    let pol = Policy::NONE; // 10 s idle by default
    assert_eq!(pol.incarnation_idle_ms, 10_000);
    // A new QP with the same number after 11 s idle, its initial PSN behind the old one's:
    // without the restart every one of its packets would be a retransmission.
    let old: Vec<(u32, u64)> = (0..5).map(|i| (5000 + i, S + i as u64)).collect();
    let new: Vec<(u32, u64)> = (0..5).map(|i| (100 + i, 12 * S + i as u64)).collect();
    let v = run_timed(&[old.clone(), new.clone()].concat(), &pol);
    assert_eq!(
        (v.qp_incarnations, v.psn_retrans, v.psn_gaps, v.psn_max()),
        (1, 0, 0, Some(104))
    );
    // Idle, but the next PSN: the same QP resuming, no new incarnation.
    let v = run_timed(&[old.clone(), vec![(5005, 30 * S)]].concat(), &pol);
    assert_eq!((v.qp_incarnations, v.psn_gaps), (0, 0));
    // A go-back-N resend after a shorter timeout (4.3 s) stays a retransmission.
    let v = run_timed(&[old.clone(), vec![(5002, 5 * S)]].concat(), &pol);
    assert_eq!((v.qp_incarnations, v.psn_retrans), (0, 1));
    // With the idle criterion off, the same reuse is counted as PSN analysis would.
    let off = Policy {
        incarnation_idle_ms: 0,
        ..Policy::NONE
    };
    let v = run_timed(&[old.clone(), new.clone()].concat(), &off);
    assert_eq!((v.qp_incarnations, v.psn_retrans), (0, 5));
    // A jump of 2^22 or more is a new QP whatever the idle time; 2^22 - 1 is a gap.
    let v = run_timed(&[(0, 1), (1 << 22, 2), ((1 << 22) + 1, 3)], &pol);
    assert_eq!((v.qp_incarnations, v.psn_gaps), (1, 0));
    let v = run_timed(&[(0, 1), ((1 << 22) - 1, 2)], &pol);
    assert_eq!(
        (v.qp_incarnations, v.psn_gaps, v.psn_missing),
        (0, 1, (1 << 22) - 2)
    );
    let v = run_timed(&[(1 << 22, 1), (0, 2)], &pol);
    assert_eq!((v.qp_incarnations, v.psn_behind), (1, 0), "behind by 2^22");
    // Capture times near the end of u64 (a fuzzed capture): no overflow, no new incarnation.
    let v = run_timed(&[(1, u64::MAX - 5), (3, u64::MAX)], &pol);
    assert_eq!((v.qp_incarnations, v.psn_gaps), (0, 1));
    assert!(qp::new_incarnation(-(1 << 22), 0, false));
    assert!(!qp::new_incarnation(-(1 << 22) + 1, 0, false));
    // after a READ window w, d in 1 ..= 1 + w is the next PSN, also after an idle time
    assert!(!qp::new_incarnation(5, 4, true));
    assert!(qp::new_incarnation(6, 4, true));
    assert!(qp::new_incarnation(0, 4, true));
    assert!(!qp::new_incarnation(6, 4, false));
}

#[test]
fn rnr_retry_and_duplicates() {
    let v = run(&[10, 11, 11].map(data));
    assert_eq!((v.psn_retrans, v.psn_behind), (1, 0));
    assert_eq!(qp::psn_diff(0, 0xffffff), 1);
    assert_eq!(qp::psn_diff(0x800000, 0), -0x800000);
    assert_eq!(qp::psn_diff(0x7fffff, 0), 0x7fffff);
}

#[test]
fn suspect_opcodes_and_tver() {
    let mut op = Pkt::roce(0x30, 1, 1, 0).build();
    let mut tv = Pkt::roce(0x04, 1, 2, 0).build();
    let _ = &mut op;
    tv[14 + 20 + 8 + 1] = 0x01; // TVer 1
    let v = run(&[op, tv]);
    assert_eq!(v.suspect, 2);
    assert_eq!(v.opcode_hist[qp::OPCODE_OTHER], 1);
    for b in 0..64 {
        if let Some(op) = qp::bucket_opcode(b) {
            assert_eq!(qp::opcode_bucket(op), b);
        }
    }
}

#[test]
fn events_fire_once_per_key_and_follow_the_policy() {
    let mut pol = Policy::NONE;
    pol.flags = policy_flags::ENABLED;
    pol.dscp = [26, 26, 48];
    pol.pcp = [3, 3, 6];
    pol.ecn_capable = [1, 0, 0];
    let mut v = QpValue::ZERO;
    let mut bleached = Pkt::roce(0x0a, 1, 1, 8);
    bleached.dscp = 0;
    bleached.ecn = 0;
    bleached.vlans = vec![(0x8100, 3)];
    let f = classify(&bleached.build()[..]);
    let o = unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 1, &pol) };
    let want = (1 << ev::NEW_QP) | (1 << ev::DSCP) | (1 << ev::NOT_ECT);
    assert_eq!(o.new_events, want);
    assert_eq!(o.psn, PsnStep::First);
    bleached.payload = support::bth(0x0a, 1, 2);
    let f = classify(&bleached.build()[..]);
    let o = unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 2, &pol) };
    assert_eq!(o.new_events, 0, "second occurrence is not an event");
    let mut gap = Pkt::roce(0x0a, 1, 9, 8);
    gap.vlans = vec![(0x8100, 3)];
    let f = classify(&gap.build()[..]);
    let o = unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 3, &pol) };
    assert_eq!(o.new_events, 1 << ev::PSN_GAP);
    assert_eq!(o.psn, PsnStep::Ahead(7));
    // CNP on priority 0 untagged: PCP mismatch for the CNP class, and the CNP event.
    let cnp = Pkt::roce(0x81, 1, 0, 16);
    let mut c = cnp.clone();
    c.dscp = 48;
    let f = classify(&c.build()[..]);
    let o = unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 4, &pol) };
    assert_eq!(o.new_events, (1 << (ev::PCP + 2)) | (1 << ev::CNP));
    // Without ENABLED nothing marking-related fires.
    let mut v = QpValue::ZERO;
    let f = classify(&cnp.build()[..]);
    let o = unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 4, &Policy::NONE) };
    assert_eq!(o.new_events, (1 << ev::NEW_QP) | (1 << ev::CNP));
}

#[test]
fn iface_accounting_counts_every_outcome() {
    let mut s = IfaceStats::default();
    let inner = data(1);
    let frames: Vec<Vec<u8>> = vec![
        data(1),
        vec![0; 10],
        pfc(1 << 3, [0, 0, 0, 5, 0, 0, 0, 0]),
        pause(1),
        gre_wrap(&inner, 0x1000, 0x88be, &[0, 0, 0, 1], &erspan2_hdr()),
        {
            let mut p = Pkt::roce(0x0a, 1, 1, 8);
            p.dport = 53;
            p.build()
        },
    ];
    let mut bytes = 0;
    for fr in &frames {
        bytes += fr.len() as u64;
        qp::account_iface(&mut s, &classify(&fr[..]), fr.len() as u32);
    }
    assert_eq!((s.frames, s.bytes, s.roce, s.not_roce), (6, bytes, 2, 1));
    assert_eq!(s.excluded[reason::RUNT as usize], 1);
    assert_eq!(s.encap[encap::ERSPAN2 as usize], 1);
    assert_eq!(
        (
            s.pfc.pfc_frames,
            s.pfc.xoff[3],
            s.pfc.quanta[3],
            s.pfc.pause
        ),
        (1, 1, 5, 1)
    );
}

#[test]
fn real_softroce_capture_icrc_and_keys() {
    // 105 RoCEv2 frames of a real rxe session, all with valid ICRCs (SOURCES.md).
    let d = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../observer/tests/data/captures/oferby_proxy_roce.pcap"
    ))
    .expect("the golden capture observer/tests/data/captures/oferby_proxy_roce.pcap");
    assert_eq!(&d[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    let mut off = 24;
    let (mut roce, mut ok) = (0, 0);
    let mut keys = std::collections::BTreeSet::new();
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let fr = &d[off + 16..off + 16 + incl];
        off += 16 + incl;
        let f = classify(fr);
        if f.kind == kind::ROCE {
            roce += 1;
            ok += (icrc::verify(fr, &f) == icrc::Verdict::Ok) as usize;
            keys.insert((f.src_ip, f.dst_ip, f.bth.dest_qp));
        }
    }
    assert_eq!((roce, ok), (105, 105));
    assert_eq!(
        keys.len(),
        2,
        "one key per direction of the one RC connection"
    );
}

/// The kernel's split update (counts into the value or, when its lock is taken, into the spill
/// value; state always in the value) gives, once the spill's counts are added back, exactly the
/// value of the single-value update: every field, whatever packets went to the spill. Both for
/// full values and for the kernel's slot of compact values (`QpSlot::merged`, with the buckets
/// beyond its cells added back as from `QPHIST`).
#[test]
fn split_update_with_spill_equals_single_update() {
    let mut frames = Vec::new();
    for psn in [1u32, 2, 3, 7, 5, 8, 9, 9, 0x00ff_fffe, 4] {
        let mut p = Pkt::roce(0x0a, 0x11, psn, 64);
        p.dscp = (psn % 3) as u8 * 10;
        p.ecn = (psn % 4) as u8;
        frames.push(p.build());
    }
    frames.push(Pkt::roce(0x11, 0x11, 3, 4).build()); // ACK
    frames.push(Pkt::roce(0x81, 0x11, 0, 16).build()); // CNP
    let pol = Policy::NONE;
    for mask in [0u32, 0b1, 0b1010_1010_1010, 0xfff] {
        let mut single = QpValue::ZERO;
        let (mut value, mut spill) = (QpValue::ZERO, QpValue::ZERO);
        let mut slot = QpSlot::ZERO;
        let mut over = std::collections::BTreeMap::<HistKey, u64>::new();
        for (i, fr) in frames.iter().enumerate() {
            let f = classify(&fr[..]);
            let t = 1000 + i as u64;
            let a = unsafe { qp::update::<Plain, _>(&mut single, &f, fr.len() as u32, t, &pol) };
            let counts: *mut QpValue = if mask & (1 << i) != 0 {
                &mut spill
            } else {
                &mut value
            };
            let b = unsafe {
                qp::update_split(
                    &Plain,
                    counts,
                    &Plain,
                    &mut value,
                    &f,
                    fr.len() as u32,
                    t,
                    &pol,
                )
            };
            assert_eq!(a, b, "mask {mask:#x} frame {i}: outcomes");
            let kcounts: *mut KValue = if mask & (1 << i) != 0 {
                &mut slot.spill
            } else {
                &mut slot.value
            };
            let k = unsafe {
                qp::update_split(
                    &Plain,
                    kcounts,
                    &Plain,
                    &mut slot.value,
                    &f,
                    fr.len() as u32,
                    t,
                    &pol,
                )
            };
            // the buckets beyond the cells, to a side table as the kernel's QPHIST
            assert_eq!(
                qp::Outcome { overflow: 0, ..k },
                a,
                "mask {mask:#x} frame {i}"
            );
            let tags = qp::hist_tags(&f);
            for h in 0..hist::COUNT {
                if k.overflow & (1 << h) != 0 {
                    let key = HistKey {
                        slot: 0,
                        hist: h,
                        tag: tags[h as usize],
                        _pad: 0,
                    };
                    *over.entry(key).or_default() += 1;
                }
            }
        }
        let mut merged = value;
        qp::add_counts(&mut merged, &spill);
        assert_eq!(merged, single, "mask {mask:#x}");
        let mut kmerged = slot.merged();
        let over: Vec<(HistKey, u64)> = over.into_iter().collect();
        add_overflow(&mut kmerged, &over);
        assert_eq!(kmerged, single, "mask {mask:#x}: compact slot");
        if mask == 0 {
            // 5 (class, DSCP) pairs in one value's 4 cells (a spill has cells of its own)
            assert!(!over.is_empty(), "one DSCP beyond the cells");
        }
        if mask != 0 {
            assert!(spill.pkts > 0 && value.pkts < single.pkts);
        }
    }
}

/// metrics.md "RDMA READ requests": the parser hands the RETH's DMA length of a READ request
/// (and of no other opcode) to the PSN analysis; a RETH cut by the capture is no length.
#[test]
fn read_request_dma_length_is_parsed() {
    let fr = read_req(7, 65536);
    let f = classify(&fr[..]);
    assert_eq!((f.bth.opcode, f.has_reth, f.dma_len), (0x0c, 1, 65536));
    assert_eq!(qp::read_window(&f), (16, 240));
    // RDMA WRITE FIRST carries a RETH too, but consumes one PSN: not parsed as a READ
    let mut p = Pkt::roce(0x06, 0x11, 7, 0);
    p.payload
        .extend(observer_common::frames::reth(0x1000, 0x1234, 65536));
    let f = classify(&p.build()[..]);
    assert_eq!((f.has_reth, f.dma_len), (0, 0));
    assert_eq!(qp::read_window(&f), (1, 0));
    // cut inside the RETH (ICRC 4 bytes, then the last 4 bytes of the RETH)
    let f = classify(&fr[..fr.len() - 6]);
    assert_eq!((f.kind, f.has_reth), (kind::ROCE, 0));
    assert_eq!(qp::read_window(&f), (1, qp::READ_UNKNOWN_WINDOW));
}

/// n_min = max(1, ceil(L / 4096)), n_max = max(1, ceil(L / 256)), w = n_max - n_min, at the
/// boundaries of the shifts.
#[test]
fn read_window_of_lengths() {
    let w = |len: u32| {
        let f = classify(&read_req(0, len)[..]);
        qp::read_window(&f)
    };
    for (len, nmin, nmax) in [
        (0u32, 1u32, 1u32),
        (1, 1, 1),
        (256, 1, 1),
        (257, 1, 2),
        (4096, 1, 16),
        (4097, 2, 17),
        (65536, 16, 256),
        (1 << 31, 1 << 19, 1 << 23),
        (u32::MAX, 1 << 20, 1 << 24),
    ] {
        assert_eq!(w(len), (nmin, nmax - nmin), "length {len}");
        // the same by division, for every path MTU
        let n = |pmtu: u64| (len as u64).div_ceil(pmtu).max(1) as u32;
        assert_eq!((n(4096), n(256)), (nmin, nmax), "length {len}");
    }
}

/// The soft-RoCE ib_read_bw case: back-to-back READs of 64 KiB with no loss are no gaps at any
/// path MTU (800 READs gave 799 gaps before READ windows).
#[test]
fn reads_without_loss_are_no_gaps_at_any_mtu() {
    for pmtu in [256u32, 512, 1024, 2048, 4096] {
        let n = 65536 / pmtu;
        let frames: Vec<_> = (0..800u32)
            .map(|i| read_req((0xff_ff00 + i * n) & 0xff_ffff, 65536))
            .collect();
        let v = run(&frames);
        assert_eq!(psn_counts(&v), (0, 0, 0, 0), "pmtu {pmtu}");
        // the last READ at p: max = p + n_min - 1
        let last = (0xff_ff00 + 799 * n) & 0xff_ffff;
        assert_eq!(v.psn_max(), Some((last + 15) & 0xff_ffff), "pmtu {pmtu}");
        assert_eq!(v.psn_read, 240);
    }
}

/// A READ followed by WRITEs: the first WRITE anywhere in the READ's window is the next PSN; the
/// WRITE closes the window, so the WRITEs after it follow the plain rule.
#[test]
fn read_then_write() {
    // 8 KiB: n_min 2, n_max 32, w 30; at pmtu 1024 the READ takes 10..=17
    let v = run(&[data(9), read_req(10, 8192), data(18), data(19), data(21)]);
    assert_eq!(psn_counts(&v), (1, 1, 0, 0));
    assert_eq!((v.psn_max(), v.psn_read), (Some(21), 0));
    // at the smallest MTU the READ takes 10..=41, at the largest 10..=11: both no gap
    for next in [12, 42] {
        let v = run(&[data(9), read_req(10, 8192), data(next)]);
        assert_eq!(psn_counts(&v), (0, 0, 0, 0), "next {next}");
    }
    // beyond the largest possible READ: a gap, missing the excess (a lower bound)
    let v = run(&[data(9), read_req(10, 8192), data(45)]);
    assert_eq!(psn_counts(&v), (1, 3, 0, 0));
    // a READ of 0 or 256 bytes consumes one PSN: the plain rule
    for len in [0, 256] {
        let v = run(&[read_req(10, len), data(11), read_req(12, len), data(14)]);
        assert_eq!(psn_counts(&v), (1, 1, 0, 0), "length {len}");
    }
}

/// Loss around READs: a lost READ request is a gap of the PSNs it consumed; a loss after a READ
/// counts beyond the READ's largest end; a READ whose RETH was cut has the widest window.
#[test]
fn lost_read_requests_and_losses_after_reads() {
    // READs of 4 KiB at pmtu 1024 (4 PSNs each): 20, 24, [28 lost], 32
    let v = run(&[read_req(20, 4096), read_req(24, 4096), read_req(32, 4096)]);
    // after 24: max 24, w 15; 32 is d = 8 <= 16: the lost READ is hidden in the window
    assert_eq!(psn_counts(&v), (0, 0, 0, 0));
    // READs of 256 bytes consume one PSN at every MTU: a lost one is seen
    let v = run(&[read_req(20, 256), read_req(21, 256), read_req(23, 256)]);
    assert_eq!(psn_counts(&v), (1, 1, 0, 0));
    // a lost READ request of n = 3 PSNs (7..=9) after WRITEs: the next request at 10 is a gap
    // of the PSNs it consumed
    let v = run(&[data(5), data(6), data(7 + 3)]);
    assert_eq!(psn_counts(&v), (1, 3, 0, 0));
    // a lost packet after a READ still counts: 16 KiB (n_min 4, n_max 64, w 60) at p = 100,
    // then PSN 100 + 64 + 5: missing 5 beyond the largest READ
    let v = run(&[read_req(100, 16384), data(169)]);
    assert_eq!(psn_counts(&v), (1, 5, 0, 0));
    // the RETH cut by the capture: any next PSN up to 2^23 is no gap
    let fr = read_req(100, 16384);
    let cut = fr[..fr.len() - 6].to_vec();
    let v = run(&[cut, data(100 + (1 << 21))]);
    assert_eq!((psn_counts(&v), v.qp_incarnations), ((0, 0, 0, 0), 0));
}

/// Retransmitted READ requests: a go-back-N resend of a READ is a retransmission and keeps the
/// window; a READ re-issued from a lost response's PSN is one while it is not beyond
/// p + n_min - 1, and a new request beyond (metrics.md: ambiguous).
#[test]
fn retransmitted_read_requests() {
    // READ 64 KiB at 0 (n_min 16, w 240; pmtu 1024: PSNs 0..=63), WRITE 64, WRITE 65 lost,
    // go-back-N: READ at 0 again, WRITE 64, 65, 66
    let v = run(&[
        read_req(0, 65536),
        data(64),
        data(66),
        read_req(0, 65536),
        data(64),
        data(65),
        data(66),
    ]);
    // 66 after 64 (w 0): gap 1 missing 1; resend 0 behind, 64 behind, 65 behind, 66 same
    assert_eq!(psn_counts(&v), (1, 1, 4, 3));
    assert_eq!(v.psn_max(), Some(66));
    // a resend of the READ right after it: behind (its PSN is before p + n_min - 1), window
    // kept, so the next request is no gap
    let v = run(&[read_req(0, 65536), read_req(0, 65536), data(64)]);
    assert_eq!(psn_counts(&v), (0, 0, 1, 1));
    // re-issued from response 10 for the rest (54 KiB): a retransmission (10 <= 15)
    let v = run(&[read_req(0, 65536), read_req(10, 65536 - 10240), data(64)]);
    assert_eq!(psn_counts(&v), (0, 0, 1, 1));
    // re-issued from response 40 for the rest (24 KiB): beyond 15, taken as a new request whose
    // window (n_min 6, w 90) admits the next request at 64
    let v = run(&[read_req(0, 65536), read_req(40, 65536 - 40960), data(64)]);
    assert_eq!(psn_counts(&v), (0, 0, 0, 0));
    assert_eq!(v.psn_max(), Some(64));
}
