//! End to end on a veth pair between two network namespaces: `LiveIface` attaches to one end
//! (XDP native, then XDP generic, then tc ingress; tc egress each time), real frames are sent
//! from the other namespace with AF_PACKET (VLAN-tagged RoCE data, CNPs, PFC, PAUSE) and from
//! the observed namespace itself (egress), and `snapshot()` must hold exact counts.
mod common;

use std::time::{Duration, Instant};

use common::*;
use netns::{Netns, VethPair};
use observer::sources::Snapshot;
use observer::sources::kernel::{IngressHook, LiveIface, LiveOptions, XdpMode};
use observer_common::maps::{ANY, Policy, SAMPLE_SNAP, class, dir, policy_flags};
use observer_common::parse::PCP_NONE;
use observer_common::qp::ev;

/// Sends raw frames out of `iface` from inside namespace `ns` (AF_PACKET, SOCK_RAW).
fn send_raw(ns: &Netns, iface: &str, frames: &[Vec<u8>]) {
    netns::send_raw(ns, iface, frames).unwrap();
}

/// Polls until `done` holds (bounded: 5 s), returning the last snapshot.
fn wait_for(live: &mut LiveIface, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let start = Instant::now();
    loop {
        let s = live.snapshot(0).unwrap();
        if done(&s) || start.elapsed() > Duration::from_secs(5) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn quiet(ns: &Netns) {
    // No IPv6 (router solicitations, MLD, DAD) or other chatter: every frame counted is ours.
    for k in ["all", "default"] {
        let _ = ns.exec(
            "sysctl",
            &["-qw", &format!("net.ipv6.conf.{k}.disable_ipv6=1")],
        );
    }
    let _ = ns.exec("sysctl", &["-qw", "net.ipv6.conf.veth-a.disable_ipv6=1"]);
    let _ = ns.exec("sysctl", &["-qw", "net.ipv6.conf.veth-b.disable_ipv6=1"]);
}

fn check_mode(pair: &VethPair, hook: IngressHook, want_ingress: &str) {
    // Data is expected at DSCP 46: every data frame below breaks it and is sampled.
    let opts = LiveOptions {
        iface: pair.a_if.clone(),
        xdp_mode: XdpMode::Auto,
        max_qps: 256,
        policy: Policy {
            dscp: [46, ANY, ANY],
            flags: policy_flags::ENABLED,
            ..Policy::NONE
        },
        egress: true,
        sample_per_sec: 1000,
    };
    let mut live = {
        let _in_a = pair.a.enter().unwrap();
        LiveIface::attach_with(&opts, hook).unwrap_or_else(|e| panic!("{want_ingress}: {e}"))
    };
    assert_eq!(live.attached().ingress, want_ingress);
    assert_eq!(live.attached().egress.as_deref(), Some("tc-egress"));
    assert!(live.events_fd().is_some());
    assert!(
        live.clock_running(),
        "{want_ingress}: the packet clock ticker runs while attached"
    );

    // From the peer namespace: 5 VLAN-tagged (PCP 3) RoCE data packets, 2 CNPs, 3 PFC
    // frames (XOFF on priority 3), 1 PAUSE frame.
    let data: Vec<Vec<u8>> = (1..=5)
        .map(|psn| {
            Roce {
                tags: vec![(0x8100, 3, 100)],
                dest_qp: 0x21,
                psn,
                ..Roce::default()
            }
            .build()
        })
        .collect();
    let cnp = Roce {
        opcode: 0x81,
        src4: IP_B,
        dst4: IP_A,
        dest_qp: 0x22,
        dscp: 48,
        ecn: 1,
        payload: 20,
        ..Roce::default()
    }
    .build();
    let pfc_f = pfc(MAC_B, &[], 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
    let pause_f = pause(MAC_B, 0x10);
    let mut from_b = data.clone();
    from_b.extend([cnp.clone(), cnp.clone()]);
    from_b.extend([pfc_f.clone(), pfc_f.clone(), pfc_f]);
    from_b.push(pause_f);
    send_raw(&pair.b, &pair.b_if, &from_b);
    // Out of the observed interface itself: 4 RoCE packets, seen by tc egress.
    let out: Vec<Vec<u8>> = (10..14)
        .map(|psn| {
            Roce {
                dest_qp: 0x31,
                psn,
                ..Roce::default()
            }
            .build()
        })
        .collect();
    send_raw(&pair.a, &pair.a_if, &out);

    let s = wait_for(&mut live, |s| {
        s.iface_stats[0].frames >= from_b.len() as u64 && s.iface_stats[1].frames >= 4
    });
    let i = s.iface_stats[dir::INGRESS as usize];
    let e = s.iface_stats[dir::EGRESS as usize];
    let m = want_ingress;
    assert_eq!(i.frames, from_b.len() as u64, "{m}: ingress frames");
    assert_eq!(
        i.bytes,
        from_b.iter().map(|f| f.len() as u64).sum::<u64>(),
        "{m}: bytes"
    );
    assert_eq!(i.roce, 7, "{m}");
    assert_eq!(i.not_roce, 0, "{m}");
    assert_eq!(i.pfc.pfc_frames, 3, "{m}");
    assert_eq!(
        (i.pfc.enabled[3], i.pfc.xoff[3], i.pfc.xon[3]),
        (3, 3, 0),
        "{m}"
    );
    assert_eq!(i.pfc.quanta[3], 3 * 0xffff, "{m}");
    assert_eq!((i.pfc.pause, i.pfc.pause_quanta), (1, 0x10), "{m}");
    assert_eq!(e.frames, 4, "{m}: egress frames");
    assert_eq!(e.roce, 4, "{m}");

    let q = |qpn: u32, d: u8| {
        s.qps
            .iter()
            .find(|(k, _)| k.dest_qp == qpn && k.dir == d)
            .unwrap_or_else(|| panic!("{m}: no QP {qpn:#x} dir {d}"))
            .1
    };
    let v = q(0x21, dir::INGRESS);
    assert_eq!(v.pkts, 5, "{m}");
    assert_eq!(v.pcp_hist[class::DATA][3], 5, "{m}: PCP of the VLAN tag");
    assert_eq!(
        v.bytes_l2,
        data.iter().map(|f| f.len() as u64).sum::<u64>(),
        "{m}"
    );
    assert_eq!((v.psn_gaps, v.psn_retrans), (0, 0), "{m}");
    assert_eq!(v.psn_max(), Some(5));
    // Live first/last times (from the ticked CLOCK map) come out as wall-clock UNIX ns.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(
        v.first_ns <= v.last_ns && v.last_ns <= now && v.first_ns + 60_000_000_000 > now,
        "{m}: first_ns {} last_ns {} now {now}",
        v.first_ns,
        v.last_ns
    );
    let c = q(0x22, dir::INGRESS);
    assert_eq!(c.cnp(), 2, "{m}");
    assert_eq!(c.pcp_hist[class::CNP][PCP_NONE as usize], 2, "{m}");
    let o = q(0x31, dir::EGRESS);
    assert_eq!(o.pkts, 4, "{m}");
    assert_eq!(
        s.qps.len(),
        3,
        "{m}: keys {:?}",
        s.qps.iter().map(|(k, _)| k.dest_qp)
    );
    assert_eq!(s.macs.len(), 1, "{m}");
    assert_eq!(s.macs[0].0.mac, MAC_B);
    assert_eq!(s.macs[0].1.xoff[3], 3);

    let mut events = Vec::new();
    live.drain_events(&mut events);
    let new_qps = events.iter().filter(|e| e.kind == ev::NEW_QP).count();
    assert_eq!(new_qps, 3, "{m}: one new_qp event per key");
    assert_eq!(
        events.iter().filter(|e| e.kind == ev::CNP).count(),
        1,
        "{m}"
    );

    // The samples (`--evidence`) are the frames as they were on the wire: the tagged data as
    // sent, whether the hook saw the tag in the frame (XDP) or the kernel had taken it out
    // (tc ingress: VLAN untagging before the hook; put back from the sample's tag fields).
    let mut samples = Vec::new();
    live.drain_samples(&mut samples);
    let mut got: Vec<Vec<u8>> = samples
        .iter()
        .map(|s| {
            let mut buf = [0u8; SAMPLE_SNAP + 4];
            let n = s.frame_into(&mut buf);
            assert_eq!(s.offenses, 1 << ev::DSCP, "{m}: the DSCP rule");
            assert_eq!(s.wire_len as usize, n, "{m}: whole frames");
            buf[..n].to_vec()
        })
        .collect();
    let mut want: Vec<Vec<u8>> = data.iter().chain(&out).cloned().collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{m}: the sampled frames");
    if want_ingress == "tc-ingress" {
        assert!(
            samples.iter().any(|s| s.vlan_present == 1),
            "{m}: the tag was offloaded and put back"
        );
    }
    let c = live.sampler_counts().unwrap();
    assert_eq!((c.sampled, c.over_rate, c.lost), (9, 0, 0), "{m}");

    // Eviction returns the last value and removes the key.
    let k = s.qps.iter().find(|(k, _)| k.dest_qp == 0x31).unwrap().0;
    let gone = live.evict(&[k]).unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].1.pkts, 4);
    assert_eq!(live.snapshot(0).unwrap().qps.len(), 2);
    drop(live); // detaches
}

#[test]
fn veth_xdp_native_generic_and_tc() {
    if !observer::testutil::require_root("veth_xdp_native_generic_and_tc") {
        return;
    }
    let pair = VethPair::new("ebpf", "10.77.41.1", "10.77.41.2").unwrap();
    quiet(&pair.a);
    quiet(&pair.b);
    check_mode(&pair, IngressHook::Xdp(XdpMode::Native), "xdp-native");
    check_mode(&pair, IngressHook::Xdp(XdpMode::Generic), "xdp-generic");
    check_mode(&pair, IngressHook::TcIngress, "tc-ingress");
    // Auto takes native XDP where the driver has it (veth does).
    check_mode(&pair, IngressHook::Xdp(XdpMode::Auto), "xdp-native");
}

#[test]
fn attach_errors_are_specific() {
    if !observer::testutil::require_root("attach_errors_are_specific") {
        return;
    }
    let opts = LiveOptions {
        iface: "ro-no-such-if0".into(),
        xdp_mode: XdpMode::Auto,
        max_qps: 16,
        policy: Policy::NONE,
        egress: false,
        sample_per_sec: 0,
    };
    match LiveIface::attach(&opts) {
        Err(observer::sources::kernel::LiveError::NoSuchInterface(n)) => {
            assert_eq!(n, "ro-no-such-if0")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("attached to a missing interface"),
    }
    // A second native XDP program on the same interface: the slot is taken.
    let pair = VethPair::new("ebpfslot", "10.77.42.1", "10.77.42.2").unwrap();
    let _in_a = pair.a.enter().unwrap();
    let opts = LiveOptions {
        iface: pair.a_if.clone(),
        egress: false,
        ..opts
    };
    let first = LiveIface::attach_with(&opts, IngressHook::Xdp(XdpMode::Native)).unwrap();
    match LiveIface::attach_with(&opts, IngressHook::Xdp(XdpMode::Native)) {
        Err(observer::sources::kernel::LiveError::XdpSlotTaken(i)) => assert_eq!(i, pair.a_if),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("two XDP programs attached"),
    }
    drop(first);
    // Once detached, the slot is free again.
    LiveIface::attach_with(&opts, IngressHook::Xdp(XdpMode::Native)).unwrap();
}
