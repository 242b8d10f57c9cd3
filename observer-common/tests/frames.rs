//! The frame builder (`observer_common::frames`, feature `frames`) against the one parser: every
//! kind of frame it builds classifies to the fields it was given, and its ICRC verifies.

use observer_common::frames::{
    self, Bth, Icrc, Ipv6Ext, MacControl, Mirror, Roce, Tag, erspan2_header, erspan3_header,
};
use observer_common::icrc::{self, Verdict};
use observer_common::parse::{
    self, MAC_CONTROL_PAUSE, MAC_CONTROL_PFC, PCP_NONE, classify, encap, kind, reason,
};

const A4: [u8; 4] = [10, 77, 0, 1];
const B4: [u8; 4] = [10, 77, 0, 2];
const A6: [u8; 16] = [0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const B6: [u8; 16] = [0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&ip);
    m
}

/// A RoCE frame with every BTH field set to something other than its default.
fn write_first() -> Roce {
    Roce::v4(A4, B4)
        .mark(26, 2)
        .ports(50001, frames::ROCE_PORT)
        .bth(Bth {
            se: true,
            migreq: true,
            tver: 0,
            pkey: 0x8001,
            becn: true,
            ack_req: true,
            ..Bth::new(0x06, 0x00ab_cdef, 0x00ff_fffe)
        })
        .reth(0x1000, 0x42, 4099)
        .payload_pattern(4099, 7, 3)
        .pad_to_4()
}

#[test]
fn ipv4_roce_classifies_to_its_fields_and_its_icrc_verifies() {
    let r = write_first();
    let b = r.build();
    let f = classify(&b[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert_eq!((f.ip_version, f.dscp, f.ecn, f.pcp), (4, 26, 2, PCP_NONE));
    assert_eq!((f.src_ip, f.dst_ip), (mapped(A4), mapped(B4)));
    assert_eq!(f.udp_sport, 50001);
    assert_eq!((f.l2_off, f.ip_off, f.udp_off, f.bth_off), (0, 14, 34, 42));
    // BTH + RETH + 4099 bytes + 1 pad byte + ICRC.
    assert_eq!(f.udp_payload_len as usize, 12 + 16 + 4099 + 1 + 4);
    assert_eq!(f.ip_len as usize, 20 + 8 + f.udp_payload_len as usize);
    assert_eq!(b.len(), 14 + f.ip_len as usize);
    assert_eq!(f.bth.opcode, 0x06);
    // SE, M, PadCnt 1, TVer 0.
    assert_eq!(f.bth.flags, 0x80 | 0x40 | 0x10);
    assert_eq!(f.bth.pkey, 0x8001);
    assert!(f.bth.becn());
    assert_eq!(f.bth.ack_req, 1);
    assert_eq!((f.bth.dest_qp, f.bth.psn), (0x00ab_cdef, 0x00ff_fffe));
    assert_eq!(&b[54..70], &frames::reth(0x1000, 0x42, 4099));
    assert_eq!((b[70], b[71], b[72]), (7, 10, 13));
    assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    // The IPv4 header checksum is right: the header sums to 0xffff.
    let mut sum: u32 = b[14..34]
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
        .sum();
    sum = (sum & 0xffff) + (sum >> 16);
    assert_eq!(sum, 0xffff);

    // A deliberately wrong ICRC, a given one, and a cut frame.
    let bad = r.clone().icrc(Icrc::Xor(1)).build();
    assert_eq!(icrc::verify(&bad, &classify(&bad[..])), Verdict::Bad);
    let stored = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap());
    let given = r.clone().icrc(Icrc::Value(stored)).build();
    assert_eq!(given, b);
    let cut = r.clone().truncate(128).build();
    assert_eq!(cut.len(), 128);
    let fc = classify(&cut[..]);
    assert_eq!(fc.kind, kind::ROCE);
    assert_eq!(icrc::verify(&cut, &fc), Verdict::Unverifiable);
    // TVer and the header checksum as given.
    let odd = r.clone().bth_flags(0x01).ip_checksum(0x1234).build();
    assert_eq!(classify(&odd[..]).bth.tver(), 1);
    assert_eq!(&odd[24..26], &[0x12, 0x34]);
}

#[test]
fn ipv4_options_ttl_id_and_fragments() {
    let r = Roce::v4(A4, B4)
        .ip_options(&[1, 1, 1, 0, 1, 1, 1, 1])
        .ttl(3)
        .ip_id(0x4242)
        .mark(46, 1)
        .qp(9)
        .psn(3)
        .payload_pattern(32, 0, 1);
    let b = r.build();
    let f = classify(&b[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert_eq!(
        (f.udp_off, b[14], b[22], &b[18..20]),
        (42, 0x47, 3, &[0x42, 0x42][..])
    );
    assert_eq!((f.dscp, f.ecn, f.bth.dest_qp, f.bth.psn), (46, 1, 9, 3));
    assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    for (mf, off) in [(true, 0), (false, 185)] {
        let b = r.clone().fragment(false, mf, off).build();
        let f = classify(&b[..]);
        assert_eq!((f.kind, f.reason), (kind::EXCLUDED, reason::IP_FRAGMENT));
        assert_eq!(
            u16::from_be_bytes([b[20], b[21]]),
            ((mf as u16) << 13) | off
        );
    }
}

#[test]
fn vlan_tags_stack_outermost_first() {
    let r = Roce::v4(A4, B4)
        .tags(&[Tag::dot1ad(5, 200), Tag::dot1q(3, 100)])
        .opcode(0x04)
        .payload_pattern(64, 0x5a, 0);
    let b = r.build();
    assert_eq!(
        &b[12..22],
        &[0x88, 0xa8, 0xa0, 200, 0x81, 0x00, 0x60, 100, 0x08, 0x00]
    );
    let f = classify(&b[..]);
    assert_eq!((f.kind, f.pcp, f.ip_off), (kind::ROCE, 5, 22));
    assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    let mut dei = Tag::dot1q(7, 0xfff);
    dei.dei = true;
    let b = r.clone().tags(&[dei]).build();
    assert_eq!(&b[12..16], &[0x81, 0x00, 0xff, 0xff]);
    assert_eq!(classify(&b[..]).pcp, 7);
}

#[test]
fn ipv6_with_extension_headers() {
    let r = Roce::v6(A6, B6)
        .mark(26, 3)
        .flow_label(0x12345)
        .ttl(9)
        .ipv6_ext(Ipv6Ext::options(0))
        .ipv6_ext(Ipv6Ext::options(60))
        .opcode(0x0a)
        .qp(0x55)
        .psn(12)
        .reth(0, 1, 100)
        .payload_pattern(100, 1, 1);
    let b = r.build();
    let f = classify(&b[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert_eq!((f.ip_version, f.dscp, f.ecn), (6, 26, 3));
    assert_eq!((f.src_ip, f.dst_ip), (A6, B6));
    assert_eq!((f.ip_off, f.udp_off), (14, 14 + 40 + 16));
    assert_eq!((f.bth.opcode, f.bth.dest_qp, f.bth.psn), (0x0a, 0x55, 12));
    assert_eq!(f.ip_len as usize, b.len() - 14);
    // Version 6, traffic class, flow label; next headers 0 -> 60 -> 17; hop limit.
    assert_eq!(&b[14..18], &[0x66, 0xb1, 0x23, 0x45]);
    assert_eq!((b[20], b[21], b[54], b[62]), (0, 9, 60, 17));
    assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    // A fragment header with more fragments: excluded; an atomic fragment is parsed past.
    let frag = Roce::v6(A6, B6)
        .ipv6_ext(Ipv6Ext::fragment(0, true, 7))
        .build();
    let f = classify(&frag[..]);
    assert_eq!((f.kind, f.reason), (kind::EXCLUDED, reason::IP_FRAGMENT));
    let atomic = Roce::v6(A6, B6)
        .ipv6_ext(Ipv6Ext::fragment(0, false, 7))
        .build();
    let f = classify(&atomic[..]);
    assert_eq!(f.kind, kind::ROCE);
    assert_eq!(icrc::verify(&atomic, &f), Verdict::Ok);
}

#[test]
fn ack_carries_the_aeth_and_short_frames_are_padded() {
    let b = Roce::v4(B4, A4)
        .opcode(0x11)
        .qp(0x22)
        .psn(5)
        .aeth(0x60, 3)
        .build();
    assert_eq!(b.len(), 62);
    let f = classify(&b[..]);
    assert_eq!((f.kind, f.has_aeth, f.aeth), (kind::ROCE, 1, 0x6000_0003));
    assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    // A plain UDP frame, padded to 60 bytes (or not, with min_len 0).
    let u = Roce::v4(A4, B4)
        .ports(50000, 53)
        .no_bth()
        .payload_bytes(b"dns")
        .icrc(Icrc::Absent);
    let b = u.build();
    assert_eq!(b.len(), 60);
    assert_eq!(classify(&b[..]).kind, kind::NOT_ROCE);
    assert_eq!(u.clone().min_len(0).build().len(), 14 + 20 + 8 + 3);
    // A short BTH on 4791.
    let s = Roce::v4(A4, B4)
        .no_bth()
        .payload_bytes(&[0x0a; 8])
        .icrc(Icrc::Absent);
    let f = classify(&s.build()[..]);
    assert_eq!((f.kind, f.reason), (kind::EXCLUDED, reason::SHORT_BTH));
}

#[test]
fn pfc_and_pause() {
    let src = [0x02, 0, 0, 0, 0, 9];
    let times = [1, 2, 3, 0xffff, 5, 6, 7, 8];
    let b = MacControl::pfc(src, 0b1000_1000, times).build();
    assert_eq!(b.len(), 60);
    assert_eq!(&b[..6], &frames::MAC_CONTROL_DST);
    let f = classify(&b[..]);
    assert_eq!(f.kind, kind::MAC_CONTROL);
    assert_eq!(
        (f.mac_ctrl.opcode, f.mac_ctrl.class_enable, f.mac_ctrl.times),
        (MAC_CONTROL_PFC, 0b1000_1000, times)
    );
    assert_eq!(f.mac_ctrl.src_mac, src);
    // Tagged PFC (as some switches send it).
    let t = MacControl::pfc(src, 1, [9; 8])
        .tags(&[Tag::dot1q(7, 0)])
        .build();
    let f = classify(&t[..]);
    assert_eq!((f.kind, f.mac_ctrl.times[0]), (kind::MAC_CONTROL, 9));
    let p = MacControl::pause(src, 300).build();
    let f = classify(&p[..]);
    assert_eq!(f.kind, kind::MAC_CONTROL);
    assert_eq!(
        (f.mac_ctrl.opcode, f.mac_ctrl.times[0]),
        (MAC_CONTROL_PAUSE, 300)
    );
    assert_eq!(&p[12..18], &[0x88, 0x08, 0x00, 0x01, 0x01, 0x2c]);
}

#[test]
fn mirrors_wrap_the_inner_frame() {
    let inner_r = Roce::v4(A4, B4)
        .tag(Tag::dot1q(3, 100))
        .mark(26, 2)
        .qp(0x42)
        .psn(100)
        .payload_pattern(200, 0, 1);
    let inner = inner_r.build();
    let cases = [
        (Mirror::gre_teb(), encap::GRE_TEB, 14 + 20 + 4),
        (Mirror::erspan1(), encap::ERSPAN1, 14 + 20 + 4),
        (
            Mirror::erspan2(7, erspan2_header(100, 7, 0)),
            encap::ERSPAN2,
            14 + 20 + 8 + 8,
        ),
        (
            Mirror::erspan3(9, &erspan3_header(0, 1, 0, None)),
            encap::ERSPAN3,
            14 + 20 + 8 + 12,
        ),
        (
            Mirror::erspan3(9, &erspan3_header(0, 1, 0, Some([0; 8]))),
            encap::ERSPAN3,
            14 + 20 + 8 + 20,
        ),
    ];
    for (m, e, off) in cases {
        let b = m.wrap(&inner);
        assert_eq!(&b[off..], &inner[..], "encap {e}");
        let f = classify(&b[..]);
        assert_eq!((f.kind, f.encap, f.l2_off as usize), (kind::ROCE, e, off));
        assert_eq!((f.pcp, f.dscp, f.ecn), (3, 26, 2));
        assert_eq!(
            (f.src_ip, f.bth.dest_qp, f.bth.psn),
            (mapped(A4), 0x42, 100)
        );
        assert_eq!(icrc::verify(&b, &f), Verdict::Ok);
    }
    // Other outer addresses; GRE with key and checksum fields.
    let mut m = Mirror::gre_teb().outer([2; 6], [4; 6], [192, 0, 2, 1], [192, 0, 2, 2]);
    m.gre_flags = frames::GRE_C | frames::GRE_K;
    m.gre_opt = vec![0; 8];
    let b = m.wrap(&inner);
    assert_eq!(
        (&b[..6], &b[6..12], &b[26..30]),
        (&[4u8; 6][..], &[2u8; 6][..], &[192, 0, 2, 1][..])
    );
    let f = classify(&b[..]);
    assert_eq!(
        (f.kind, f.encap, f.l2_off),
        (kind::ROCE, encap::GRE_TEB, 14 + 20 + 12)
    );
}

#[test]
fn eth_frame_and_parse_constants_agree() {
    assert_eq!(frames::PFC_OPCODE, parse::MAC_CONTROL_PFC);
    assert_eq!(frames::PAUSE_OPCODE, parse::MAC_CONTROL_PAUSE);
    let e = frames::Eth::new(frames::MAC_A, frames::MAC_B);
    let arp = e.frame(0x0806, &[0; 28]);
    assert_eq!(arp.len(), 60);
    assert_eq!(classify(&arp[..]).kind, kind::NOT_ROCE);
}
