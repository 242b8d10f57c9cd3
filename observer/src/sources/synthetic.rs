//! Synthetic RoCEv2 / PFC frames and a synthetic traffic source through the userspace
//! [`Datapath`]: for the collector's tests, the benchmark and `--synthetic-qps` (the live
//! command's lifecycle without BPF). The frames are well-formed (IPv4 header checksum set,
//! ICRC computed), so the parser treats them like captured ones.

use observer_common::frames;
use observer_common::maps::Policy;

use crate::sources::datapath::Datapath;

/// One RoCEv2 packet's fields.
#[derive(Clone, Copy, Debug)]
pub struct Roce {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub sport: u16,
    pub qp: u32,
    pub psn: u32,
    pub opcode: u8,
    pub dscp: u8,
    pub ecn: u8,
    /// 802.1Q priority, or None for untagged.
    pub pcp: Option<u8>,
    /// Payload bytes after the BTH (and AETH for ACKs), before the ICRC.
    pub payload: usize,
    /// AETH syndrome for opcode 0x11.
    pub syndrome: u8,
}

impl Roce {
    pub fn data(src: [u8; 4], dst: [u8; 4], qp: u32, psn: u32) -> Roce {
        Roce {
            src,
            dst,
            sport: 49152,
            qp,
            psn,
            opcode: 0x0a,
            dscp: 26,
            ecn: 2,
            pcp: None,
            payload: 1024,
            syndrome: 0,
        }
    }

    /// The frame (built by `observer_common::frames`): from 02:00:00:00:00:01 to
    /// 02:00:00:00:00:02, VLAN 10 when tagged, IPv4 id 0 with DF, BTH P_Key 0xffff with AckReq
    /// clear, an AETH with MSN 1 for ACKs, payload bytes 0xab; not padded.
    pub fn frame(&self) -> Vec<u8> {
        let mut r = frames::Roce::v4(self.src, self.dst)
            .macs([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2])
            .min_len(0)
            .mark(self.dscp, self.ecn)
            .ports(self.sport, frames::ROCE_PORT)
            .bth(frames::Bth::new(self.opcode, self.qp, self.psn))
            .payload_pattern(self.payload, 0xab, 0);
        if let Some(p) = self.pcp {
            r = r.tag(frames::Tag::dot1q(p & 7, 10));
        }
        if self.opcode == 0x11 {
            r = r.aeth(self.syndrome, 1);
        }
        r.build()
    }
}

/// A PFC frame: `enable` bit p = priority p, `times[p]` its pause quanta.
pub fn pfc_frame(src_mac: [u8; 6], enable: u8, times: [u16; 8]) -> Vec<u8> {
    frames::MacControl::pfc(src_mac, enable as u16, times).build()
}

/// An 802.3x PAUSE frame.
pub fn pause_frame(src_mac: [u8; 6], quanta: u16) -> Vec<u8> {
    frames::MacControl::pause(src_mac, quanta).build()
}

/// `n` QPs between 10.77.x.y hosts, each sending `per_qp` well-marked data packets per step
/// (or, with `mix`, a different amount and its own faults per QP: [`Synthetic::step`]).
pub struct Synthetic {
    pub dp: Datapath,
    pub qps: u32,
    pub per_qp: u32,
    /// Varied traffic with faults ([`Synthetic::mixed`]).
    mix: bool,
    psn: Vec<u32>,
}

impl Synthetic {
    pub fn new(policy: Policy, qps: u32, per_qp: u32) -> Synthetic {
        let mut dp = Datapath::new(policy, qps as usize + 16);
        dp.check_icrc = false;
        Synthetic {
            dp,
            qps,
            per_qp,
            mix: false,
            psn: vec![0; qps as usize],
        }
    }

    /// `qps` QPs of varied traffic with faults ([`Synthetic::step_mixed`]; `--synthetic-mix`),
    /// room for the responders' keys too.
    pub fn mixed(policy: Policy, qps: u32) -> Synthetic {
        let mut s = Synthetic::new(policy, qps, 1);
        s.dp = Datapath::new(policy, 2 * qps as usize + 16);
        s.dp.check_icrc = false;
        s.mix = true;
        s
    }

    /// Pushes one step of traffic stamped `t_ns`: QP `q` (0x100 + q, from 10.77.(q>>8).(q&255)
    /// to 10.77.200.1) sends `per_qp` data packets; with `mix`, [`Synthetic::step_mixed`].
    pub fn step(&mut self, t_ns: u64) {
        if self.mix {
            return self.step_mixed(t_ns);
        }
        for q in 0..self.qps {
            let src = [10, 77, (q >> 8) as u8 & 0x3f, q as u8];
            let mut r = Roce::data(src, [10, 77, 200, 1], 0x100 + q, 0);
            r.payload = 256;
            for _ in 0..self.per_qp {
                let i = q as usize;
                r.psn = self.psn[i];
                self.psn[i] = (self.psn[i] + 1) & 0xff_ffff;
                let f = r.frame();
                self.dp.process(&f, f.len() as u32, t_ns, 0);
            }
        }
    }
}

/// Where QP `q`'s requester is.
fn requester(q: u32) -> [u8; 4] {
    [10, 77, (q >> 8) as u8 & 0x3f, q as u8]
}

const RESPONDER: [u8; 4] = [10, 77, 200, 1];

impl Synthetic {
    /// One step of varied traffic: QP `q` sends 1 + q % 8 data packets; and by `q`, faults
    /// that differ between QPs: q % 5 == 1 CE on 1 + q % 3 of them, answered by as many CNPs
    /// from the responder (to QP 0x800 + q) unless q % 10 == 6; q % 6 == 2 a PSN gap;
    /// q % 4 == 3 DSCP 0 instead of the policy's; q % 9 == 4 the last packet sent again; the
    /// responder sends a NAK (PSN sequence error) when q % 7 == 5, an RNR NAK when q % 11 == 8;
    /// and two PFC XOFF frames on priority 3 (65535 quanta) per step.
    pub fn step_mixed(&mut self, t_ns: u64) {
        for q in 0..self.qps {
            let n = 1 + q % 8;
            let ce = if q % 5 == 1 { (1 + q % 3).min(n) } else { 0 };
            let mut r = Roce::data(requester(q), RESPONDER, 0x100 + q, 0);
            r.payload = 256;
            if q % 4 == 3 {
                r.dscp = 0;
            }
            for k in 0..n {
                let i = q as usize;
                if q % 6 == 2 && k + 1 == n {
                    self.psn[i] = (self.psn[i] + 1) & 0xff_ffff;
                }
                r.psn = self.psn[i];
                r.ecn = if k < ce { 3 } else { 2 };
                self.psn[i] = (self.psn[i] + 1) & 0xff_ffff;
                self.send(&r, t_ns);
            }
            if q % 9 == 4 {
                r.ecn = 2;
                self.send(&r, t_ns);
            }
            self.answer(q, ce, r.psn, t_ns);
        }
        // the responder's NIC pauses priority 3 twice a step
        let pfc = pfc_frame([2, 0, 0, 0, 0, 9], 0b1000, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
        for _ in 0..2 {
            self.dp.process(&pfc, pfc.len() as u32, t_ns, 0);
        }
    }

    /// The responder's CNPs and NAKs to QP `q`'s requester.
    fn answer(&mut self, q: u32, ce: u32, psn: u32, t_ns: u64) {
        let mut back = Roce::data(RESPONDER, requester(q), 0x800 + q, psn);
        let cnps = if q % 10 == 6 { 0 } else { ce };
        for _ in 0..cnps {
            back.opcode = 0x81;
            back.dscp = 48;
            back.ecn = 0;
            back.payload = 16;
            self.send(&back, t_ns);
        }
        for (on, syndrome) in [(q % 7 == 5, 0x60), (q % 11 == 8, 0x21)] {
            if on {
                back.opcode = 0x11;
                back.dscp = 26;
                back.ecn = 2;
                back.payload = 0;
                back.syndrome = syndrome;
                self.send(&back, t_ns);
            }
        }
    }

    fn send(&mut self, r: &Roce, t_ns: u64) {
        let f = r.frame();
        self.dp.process(&f, f.len() as u32, t_ns, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::parse::{self, kind};

    #[test]
    fn frames_parse_as_intended() {
        let mut r = Roce::data([10, 77, 0, 1], [10, 77, 0, 2], 0x42, 7);
        r.pcp = Some(5);
        r.dscp = 10;
        r.ecn = 3;
        let f = r.frame();
        let p = parse::classify(&f[..]);
        assert_eq!(p.kind, kind::ROCE);
        assert_eq!(
            (p.bth.dest_qp, p.bth.psn, p.dscp, p.ecn, p.pcp),
            (0x42, 7, 10, 3, 5)
        );
        assert_eq!(
            observer_common::icrc::verify(&f[..], &p),
            observer_common::icrc::Verdict::Ok
        );
        let m =
            parse::classify(&pfc_frame([2, 0, 0, 0, 0, 9], 0b1000, [0, 0, 0, 100, 0, 0, 0, 0])[..]);
        assert_eq!(m.kind, kind::MAC_CONTROL);
        assert_eq!(m.mac_ctrl.times[3], 100);
        assert_eq!(
            parse::classify(&pause_frame([2, 0, 0, 0, 0, 9], 5)[..]).kind,
            kind::MAC_CONTROL
        );
    }
}
