//! Property tests: every truncation length of every kind of frame, arbitrary bytes, the PSN
//! state machine against a reference model, and the ICRC against corruption.

mod support;

use observer_common::icrc;
use observer_common::maps::{Policy, QpValue};
use observer_common::parse::{Frame, classify, kind, reason};
use observer_common::qp::{self, Plain};
use proptest::prelude::*;
use support::*;

/// A frame of one of the shapes the parser knows, from a few parameters.
fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..8,
        any::<u8>(),
        any::<u32>(),
        0usize..300,
        0u8..64,
        0u8..4,
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(shape, op, psn, extra, dscp, ecn, tags, v6)| {
            let mut p = Pkt::roce(op, psn >> 8, psn & 0xffffff, extra);
            p.dscp = dscp;
            p.ecn = ecn;
            p.v6 = v6;
            p.vlans = [(0x88a8, 5), (0x8100, 3)][..tags.min(2)].to_vec();
            match shape {
                0 => p.build(),
                1 => {
                    p.ip_options = vec![1; 8];
                    p.v6 = false;
                    p.build()
                }
                2 => pfc(psn as u16, [psn as u16; 8]),
                3 => pause(psn as u16),
                4 => gre_wrap(&p.build(), 0x1000, 0x88be, &[0, 0, 0, 1], &erspan2_hdr()),
                5 => gre_wrap(
                    &p.build(),
                    0x1000,
                    0x22eb,
                    &[0, 0, 0, 1],
                    &erspan3_hdr(op & 1 == 1),
                ),
                6 => gre_wrap(&p.build(), 0x2000, 0x6558, &[1, 2, 3, 4], &[]),
                _ => {
                    p.dport = 4000;
                    p.build()
                }
            }
        })
}

/// Equal but for the headers after the BTH (AETH, a READ request's RETH), which a cut frame may
/// lack.
fn same_except_aeth(a: &Frame, b: &Frame) -> bool {
    let mut a = *a;
    let mut b = *b;
    for f in [&mut a, &mut b] {
        f.has_aeth = 0;
        f.aeth = 0;
        f.has_reth = 0;
        f.dma_len = 0;
    }
    a == b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Every prefix of a valid frame classifies without panicking, to the full frame's result
    /// once the headers are complete, and to a truncation reason before that.
    #[test]
    fn every_truncation_length(fr in frame_strategy()) {
        let full = classify(&fr[..]);
        let headers_end = match full.kind {
            kind::ROCE => full.bth_off as usize + 12,
            kind::MAC_CONTROL => fr.len().min(14 + 2 + 18),
            _ => fr.len(),
        };
        for n in 0..=fr.len() {
            let f = classify(&fr[..n]);
            if n >= headers_end {
                prop_assert!(same_except_aeth(&f, &full), "len {n}: {f:?} vs {full:?}");
            } else if f.kind != full.kind || f.kind == kind::EXCLUDED {
                prop_assert_eq!(f.kind, kind::EXCLUDED, "len {}: {:?}", n, f);
                prop_assert!(
                    [reason::RUNT, reason::TRUNCATED, reason::SHORT_BTH].contains(&f.reason),
                    "len {}: {:?}", n, f
                );
            }
        }
    }

    /// Arbitrary bytes never panic, and a RoCE verdict always has its BTH inside the capture.
    #[test]
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let f = classify(&b[..]);
        if f.kind == kind::ROCE {
            prop_assert!(f.bth_off as usize + 12 <= b.len());
            let mut v = QpValue::ZERO;
            unsafe { qp::update::<Plain, _>(&mut v, &f, b.len() as u32, 1, &Policy::NONE) };
            prop_assert_eq!(v.pkts, 1);
            let _ = icrc::verify(&b, &f);
        }
    }

    /// The PSN analysis equals a straightforward model of metrics.md.
    #[test]
    fn psn_matches_reference_model(
        start in 0u32..0x1000000,
        steps in proptest::collection::vec(-40i32..40, 1..200)
    ) {
        let mut v = QpValue::ZERO;
        let (mut max, mut gaps, mut missing, mut retrans, mut behind) = (None::<i64>, 0, 0, 0, 0);
        let mut cur = start as i64;
        for s in steps {
            cur += s as i64;
            let psn = cur.rem_euclid(1 << 24) as u32;
            let mut f = Frame { kind: kind::ROCE, ..Frame::default() };
            f.bth.opcode = 0x06;
            f.bth.psn = psn;
            unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 1, &Policy::NONE) };
            match max {
                None => max = Some(psn as i64),
                Some(m) => {
                    let mut d = (psn as i64 - m).rem_euclid(1 << 24);
                    if d >= 1 << 23 { d -= 1 << 24; }
                    if d >= 1 {
                        max = Some(psn as i64);
                        if d > 1 { gaps += 1; missing += d - 1; }
                    } else {
                        retrans += 1;
                        if d < 0 { behind += 1; }
                    }
                }
            }
        }
        prop_assert_eq!(v.psn_max().map(|m| m as i64), max);
        prop_assert_eq!((v.psn_gaps, v.psn_missing as i64, v.psn_retrans, v.psn_behind),
            (gaps, missing, retrans, behind));
    }

    /// With RDMA READ requests among the packets (random DMA lengths, some with the RETH cut),
    /// the PSN analysis equals a model of metrics.md "RDMA READ requests" written with
    /// divisions, and the state a packet leaves is the model's.
    #[test]
    fn psn_with_reads_matches_reference_model(
        start in 0u32..0x1000000,
        steps in proptest::collection::vec(
            (-40i32..300, 0u8..4, prop_oneof![0u32..20_000, any::<u32>()]),
            1..150,
        )
    ) {
        let mut v = QpValue::ZERO;
        let (mut max, mut w) = (None::<i64>, 0i64);
        let (mut gaps, mut missing, mut retrans, mut behind) = (0, 0, 0, 0);
        let mut cur = start as i64;
        for (s, kind_, len) in steps {
            cur += s as i64;
            let psn = cur.rem_euclid(1 << 24) as u32;
            let mut f = Frame { kind: kind::ROCE, ..Frame::default() };
            f.bth.psn = psn;
            // 0, 1: a READ request (1: its RETH not captured); else an RDMA WRITE
            let (n_min, window) = if kind_ < 2 {
                f.bth.opcode = 0x0c;
                f.has_reth = (kind_ == 0) as u8;
                f.dma_len = if kind_ == 0 { len } else { 0 };
                if kind_ == 0 {
                    let n = |pmtu: i64| ((len as i64 + pmtu - 1) / pmtu).max(1);
                    (n(4096), n(256) - n(4096))
                } else {
                    // any length up to 2^31: 1 ..= 2^23 responses
                    (1, (1 << 23) - 1)
                }
            } else {
                f.bth.opcode = 0x06;
                (1, 0)
            };
            unsafe { qp::update::<Plain, _>(&mut v, &f, 100, 1, &Policy::NONE) };
            let moved = (psn as i64 + n_min - 1).rem_euclid(1 << 24);
            match max {
                None => (max, w) = (Some(moved), window),
                Some(m) => {
                    let mut d = (psn as i64 - m).rem_euclid(1 << 24);
                    if d >= 1 << 23 { d -= 1 << 24; }
                    if d.abs() >= 1 << 22 {
                        (max, w) = (Some(moved), window);
                    } else if d >= 1 {
                        if d > 1 + w { gaps += 1; missing += d - 1 - w; }
                        (max, w) = (Some(moved), window);
                    } else {
                        retrans += 1;
                        if d < 0 { behind += 1; }
                    }
                }
            }
            prop_assert_eq!(v.psn_max().map(|m| m as i64), max);
            prop_assert_eq!(v.psn_read as i64, w);
        }
        prop_assert_eq!((v.psn_gaps, v.psn_missing as i64, v.psn_retrans, v.psn_behind),
            (gaps, missing, retrans, behind));
    }

    /// A correct ICRC verifies; corrupting any byte that is not a masked field breaks it; a
    /// cut payload is unverifiable.
    #[test]
    fn icrc_detects_corruption(extra in 0usize..100, at in any::<prop::sample::Index>(), v6 in any::<bool>()) {
        let mut p = Pkt::roce(0x04, 3, 9, extra);
        p.v6 = v6;
        let fr = p.build();
        let f = classify(&fr[..]);
        prop_assert_eq!(icrc::verify(&fr, &f), icrc::Verdict::Ok);
        // Masked: IPv4 TOS/TTL/checksum, IPv6 first 4 bytes and hop limit, UDP checksum,
        // BTH byte 4. Any other byte from the IP header on is covered.
        let ip = 14;
        let masked: Vec<usize> = if v6 {
            vec![ip, ip + 1, ip + 2, ip + 3, ip + 7]
        } else {
            vec![ip + 1, ip + 8, ip + 10, ip + 11]
        };
        let udp = f.udp_off as usize;
        let covered: Vec<usize> = (ip..fr.len())
            .filter(|i| !masked.contains(i) && *i != udp + 6 && *i != udp + 7 && *i != udp + 8 + 4)
            // Length fields change what is parsed; corrupt payload and identity fields only.
            .filter(|i| !(ip..ip + 8).contains(i) || v6)
            .filter(|i| !(udp..udp + 6).contains(i))
            .collect();
        let i = covered[at.index(covered.len())];
        let mut bad = fr.clone();
        bad[i] ^= 0x01;
        let fb = classify(&bad[..]);
        if fb.kind == kind::ROCE {
            prop_assert_eq!(icrc::verify(&bad, &fb), icrc::Verdict::Bad, "byte {}", i);
        }
        let mut masked_change = fr.clone();
        masked_change[udp + 8 + 4] ^= 0xff;
        prop_assert_eq!(icrc::verify(&masked_change, &classify(&masked_change[..])), icrc::Verdict::Ok);
        let cut = &fr[..fr.len() - 1];
        prop_assert_eq!(icrc::verify(cut, &classify(cut)), icrc::Verdict::Unverifiable);
    }
}

/// The fuzz target's seed corpus (real frames from the soft-RoCE capture, PFC, PAUSE, every
/// mirror encapsulation, QinQ) stays classifiable: a regression run of the fuzz body.
#[test]
fn fuzz_seed_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/classify");
    let mut n = 0;
    let mut roce = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let b = std::fs::read(e.unwrap().path()).unwrap();
        let f = classify(&b[..]);
        if f.kind == kind::ROCE {
            roce += 1;
            assert_eq!(icrc::verify(&b, &f), icrc::Verdict::Ok);
        }
        n += 1;
    }
    assert!(n >= 10, "seed corpus has {n} files");
    assert!(roce >= 7, "{roce} RoCE seeds");
}
