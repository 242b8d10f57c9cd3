//! Synthetic RoCEv2 / PFC frames and a synthetic traffic source through the userspace
//! [`Datapath`]: for the collector's tests, the benchmark and `--synthetic-qps` (the live
//! command's lifecycle without BPF). The frames are well-formed (IPv4 header checksum set,
//! ICRC computed), so the parser treats them like captured ones.

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

    pub fn frame(&self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        if let Some(p) = self.pcp {
            f.extend_from_slice(&[0x81, 0x00, (p & 7) << 5, 10]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let aeth = if self.opcode == 0x11 { 4 } else { 0 };
        let udp_len = 8 + 12 + aeth + self.payload + 4;
        let ip_len = 20 + udp_len;
        let ip0 = f.len();
        f.extend_from_slice(&[0x45, (self.dscp << 2) | (self.ecn & 3)]);
        f.extend_from_slice(&(ip_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&self.src);
        f.extend_from_slice(&self.dst);
        let mut sum: u32 = f[ip0..ip0 + 20]
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let ck = !(sum as u16);
        f[ip0 + 10..ip0 + 12].copy_from_slice(&ck.to_be_bytes());
        f.extend_from_slice(&self.sport.to_be_bytes());
        f.extend_from_slice(&4791u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&[self.opcode, 0, 0xff, 0xff, 0]);
        f.extend_from_slice(&self.qp.to_be_bytes()[1..]);
        f.push(0);
        f.extend_from_slice(&self.psn.to_be_bytes()[1..]);
        if aeth > 0 {
            f.extend_from_slice(&[self.syndrome, 0, 0, 1]);
        }
        f.resize(f.len() + self.payload, 0xab);
        // ICRC (IBA A17) over the masked headers, little-endian.
        let l2 = if self.pcp.is_some() { 18 } else { 14 };
        let mut m = vec![0xffu8; 8];
        m.extend_from_slice(&f[l2..]);
        let ipm = 8;
        m[ipm + 1] = 0xff; // TOS
        m[ipm + 8] = 0xff; // TTL
        m[ipm + 10] = 0xff; // checksum
        m[ipm + 11] = 0xff;
        m[ipm + 20 + 6] = 0xff; // UDP checksum
        m[ipm + 20 + 7] = 0xff;
        m[ipm + 28 + 4] = 0xff; // BTH reserved byte
        let crc = crc32(&m);
        f.extend_from_slice(&crc.to_le_bytes());
        f
    }
}

fn crc32(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A PFC frame: `enable` bit p = priority p, `times[p]` its pause quanta.
pub fn pfc_frame(src_mac: [u8; 6], enable: u8, times: [u16; 8]) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0x01];
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x88, 0x08, 0x01, 0x01, 0, enable]);
    for t in times {
        f.extend_from_slice(&t.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

/// An 802.3x PAUSE frame.
pub fn pause_frame(src_mac: [u8; 6], quanta: u16) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0x01];
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x88, 0x08, 0x00, 0x01]);
    f.extend_from_slice(&quanta.to_be_bytes());
    f.resize(60, 0);
    f
}

/// `n` QPs between 10.77.x.y hosts, each sending `per_qp` well-marked data packets per step.
pub struct Synthetic {
    pub dp: Datapath,
    pub qps: u32,
    pub per_qp: u32,
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
            psn: vec![0; qps as usize],
        }
    }

    /// Pushes one step of traffic stamped `t_ns`.
    pub fn step(&mut self, t_ns: u64) {
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
