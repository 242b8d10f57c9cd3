//! RoCEv2 invariant CRC (IBA Annex A17): CRC-32 over 8 bytes of 0xff, the IP header with its
//! variant fields set to all ones (IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop
//! limit), the UDP header with checksum 0xffff, the BTH with byte 4 set to 0xff, then the rest of
//! the packet up to the ICRC, which is stored little-endian in the last 4 bytes of the UDP
//! payload.

use crate::parse::{BTH_LEN, Frame, UDP_HLEN, kind};

/// Outcome of an ICRC check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Bad,
    /// The payload was not fully captured (or the packet is not RoCE).
    Unverifiable,
}

/// ICRC of `ip`, which holds an IP packet from its first header byte to the end of the UDP
/// payload *without* the 4 ICRC bytes. `l4_off` is the UDP header's offset inside `ip`
/// (IPv4 IHL * 4, or 40 + extension headers).
pub fn compute(ip: &[u8], l4_off: usize, ipv6: bool) -> u32 {
    // The masked prefix (8 x 0xff, IP header, UDP header, BTH) is assembled in one buffer and
    // hashed with one call: several small updates cost more than the CRC of the bytes.
    let mut buf = [0u8; 8 + 60 + UDP_HLEN + BTH_LEN];
    buf[..8].fill(0xff);
    let fixed = if ipv6 { 40 } else { l4_off.min(60) };
    let fixed = fixed.min(ip.len());
    let m = &mut buf[8..8 + fixed];
    m.copy_from_slice(&ip[..fixed]);
    if ipv6 {
        if fixed >= 8 {
            m[0] |= 0x0f;
            m[1] = 0xff;
            m[2] = 0xff;
            m[3] = 0xff;
            m[7] = 0xff;
        }
    } else if fixed >= 12 {
        m[1] = 0xff;
        m[8] = 0xff;
        m[10] = 0xff;
        m[11] = 0xff;
    }
    let mut n = 8 + fixed;
    let mut h = crc32fast::Hasher::new();
    if ipv6 && l4_off > fixed {
        h.update(&buf[..n]);
        h.update(&ip[fixed..l4_off.min(ip.len())]);
        n = 0;
    }
    if ip.len() >= l4_off + UDP_HLEN + BTH_LEN {
        buf[n..n + UDP_HLEN + BTH_LEN].copy_from_slice(&ip[l4_off..l4_off + UDP_HLEN + BTH_LEN]);
        buf[n + 6] = 0xff;
        buf[n + 7] = 0xff;
        buf[n + UDP_HLEN + 4] = 0xff;
        n += UDP_HLEN + BTH_LEN;
        h.update(&buf[..n]);
        h.update(&ip[l4_off + UDP_HLEN + BTH_LEN..]);
    } else {
        h.update(&buf[..n]);
    }
    h.finalize()
}

/// Checks the ICRC of a classified RoCE frame. `bytes` are the captured bytes the frame was
/// classified from.
pub fn verify(bytes: &[u8], f: &Frame) -> Verdict {
    if f.kind != kind::ROCE {
        return Verdict::Unverifiable;
    }
    let ip = f.ip_off as usize;
    let udp = f.udp_off as usize;
    let end = udp + UDP_HLEN + f.udp_payload_len as usize;
    if f.udp_payload_len < (BTH_LEN + 4) as u16 || end > bytes.len() || udp < ip {
        return Verdict::Unverifiable;
    }
    let stored = u32::from_le_bytes([
        bytes[end - 4],
        bytes[end - 3],
        bytes[end - 2],
        bytes[end - 1],
    ]);
    if compute(&bytes[ip..end - 4], udp - ip, f.ip_version == 6) == stored {
        Verdict::Ok
    } else {
        Verdict::Bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward form (one update per part), kept as the reference for `compute`.
    fn compute_reference(ip: &[u8], l4_off: usize, ipv6: bool) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        let mut masked = [0u8; 60];
        let fixed = if ipv6 { 40 } else { l4_off.min(60) };
        let fixed = fixed.min(ip.len());
        masked[..fixed].copy_from_slice(&ip[..fixed]);
        if ipv6 {
            if fixed >= 8 {
                masked[0] |= 0x0f;
                masked[1] = 0xff;
                masked[2] = 0xff;
                masked[3] = 0xff;
                masked[7] = 0xff;
            }
        } else if fixed >= 12 {
            masked[1] = 0xff;
            masked[8] = 0xff;
            masked[10] = 0xff;
            masked[11] = 0xff;
        }
        h.update(&masked[..fixed]);
        if ipv6 && l4_off > fixed {
            h.update(&ip[fixed..l4_off.min(ip.len())]);
        }
        if ip.len() >= l4_off + UDP_HLEN + BTH_LEN {
            let mut udp = [0u8; UDP_HLEN];
            udp.copy_from_slice(&ip[l4_off..l4_off + UDP_HLEN]);
            udp[6] = 0xff;
            udp[7] = 0xff;
            h.update(&udp);
            let mut bth = [0u8; BTH_LEN];
            bth.copy_from_slice(&ip[l4_off + UDP_HLEN..l4_off + UDP_HLEN + BTH_LEN]);
            bth[4] = 0xff;
            h.update(&bth);
            h.update(&ip[l4_off + UDP_HLEN + BTH_LEN..]);
        }
        h.finalize()
    }

    #[test]
    fn single_buffer_equals_reference() {
        let mut x: u32 = 0x9e37_79b9;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..2000 {
            let ipv6 = rnd() % 2 == 0;
            let l4_off = if ipv6 {
                40 + 8 * (rnd() % 4) as usize
            } else {
                20 + 4 * (rnd() % 11) as usize
            };
            let len = (rnd() % 200) as usize;
            let ip: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            assert_eq!(
                compute(&ip, l4_off, ipv6),
                compute_reference(&ip, l4_off, ipv6),
                "len {len} l4 {l4_off} v6 {ipv6}"
            );
        }
    }
}
