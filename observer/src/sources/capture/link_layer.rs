//! Link types replay understands, and their conversion to the Ethernet-shaped view the shared
//! parser (`observer_common::parse::classify`) reads.
//!
//! Linux cooked captures (SLL, what `tcpdump -i any` writes; SLL2 since libpcap 1.10) carry no
//! Ethernet header: replay synthesises one (destination 00:00:00:00:00:00, source = the SLL
//! link-layer address when it is 6 bytes long, ethertype = the SLL protocol field) in front of the
//! payload. L2 byte counts of such captures are therefore *reconstructed Ethernet lengths*:
//! original length - SLL header (16, or 20 for SLL2) + 14. A VLAN tag the capture holds (protocol
//! 0x8100 followed by the tag) is parsed as usual; a tag stripped before the capture point is not
//! in the capture, so such frames count as untagged (PCP `none`).

use observer_common::maps::dir;

/// A supported link type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_LINUX_SLL (113), 16-byte header.
    Sll,
    /// LINKTYPE_LINUX_SLL2 (276), 20-byte header.
    Sll2,
}

impl LinkType {
    pub fn from_number(n: u32) -> Option<LinkType> {
        match n {
            1 => Some(LinkType::Ethernet),
            113 => Some(LinkType::Sll),
            276 => Some(LinkType::Sll2),
            _ => None,
        }
    }
}

/// Name of a well-known link type number, for error messages.
pub fn linktype_name(n: u32) -> &'static str {
    match n {
        0 => "NULL/loopback",
        1 => "Ethernet",
        101 => "raw IP",
        105 => "IEEE 802.11",
        113 => "Linux SLL",
        127 => "802.11 radiotap",
        197 => "ERF",
        228 => "raw IPv4",
        229 => "raw IPv6",
        247 => "InfiniBand",
        276 => "Linux SLL2",
        _ => "unknown",
    }
}

/// SLL packet type "sent by us".
const PACKET_OUTGOING: u16 = 4;
const ETH_HLEN: usize = 14;

/// A frame as the parser sees it.
pub struct View<'a> {
    pub bytes: &'a [u8],
    /// Wire length of the (reconstructed) Ethernet frame.
    pub wire_len: u32,
    pub direction: u8,
}

/// Converts a captured frame to the Ethernet view. `scratch` is reused for SLL frames. Frames
/// too short to hold their link header are passed on as they are (the parser counts them
/// `runt`).
pub fn to_ethernet<'a>(
    link: LinkType,
    data: &'a [u8],
    orig_len: u32,
    scratch: &'a mut Vec<u8>,
) -> View<'a> {
    let (hlen, proto_off, pkttype, addr) = match link {
        LinkType::Ethernet => {
            return View {
                bytes: data,
                wire_len: orig_len,
                direction: dir::INGRESS,
            };
        }
        LinkType::Sll => {
            if data.len() < 16 {
                return passthrough(data, orig_len);
            }
            let pkttype = u16::from_be_bytes([data[0], data[1]]);
            let alen = u16::from_be_bytes([data[4], data[5]]) as usize;
            (16usize, 14usize, pkttype, (alen == 6).then(|| &data[6..12]))
        }
        LinkType::Sll2 => {
            if data.len() < 20 {
                return passthrough(data, orig_len);
            }
            let pkttype = data[10] as u16;
            let alen = data[11] as usize;
            (20, 0, pkttype, (alen == 6).then(|| &data[12..18]))
        }
    };
    scratch.clear();
    scratch.extend_from_slice(&[0u8; 6]);
    match addr {
        Some(a) => scratch.extend_from_slice(a),
        None => scratch.extend_from_slice(&[0u8; 6]),
    }
    scratch.extend_from_slice(&data[proto_off..proto_off + 2]);
    scratch.extend_from_slice(&data[hlen..]);
    View {
        bytes: scratch.as_slice(),
        wire_len: (orig_len as usize)
            .saturating_sub(hlen)
            .saturating_add(ETH_HLEN) as u32,
        direction: if pkttype == PACKET_OUTGOING {
            dir::EGRESS
        } else {
            dir::INGRESS
        },
    }
}

fn passthrough(data: &[u8], orig_len: u32) -> View<'_> {
    View {
        bytes: data,
        wire_len: orig_len,
        direction: dir::INGRESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sll_becomes_ethernet() {
        // SLL: outgoing, ARPHRD_ETHER, 6-byte address, protocol IPv4, then 4 payload bytes.
        let mut f = vec![0, 4, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 20]);
        let mut s = Vec::new();
        let v = to_ethernet(LinkType::Sll, &f, 100, &mut s);
        assert_eq!(v.wire_len, 98);
        assert_eq!(v.direction, dir::EGRESS);
        assert_eq!(&v.bytes[6..12], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&v.bytes[12..14], &[0x08, 0x00]);
        assert_eq!(&v.bytes[14..], &[0x45, 0, 0, 20]);
    }

    #[test]
    fn sll2_becomes_ethernet() {
        let mut f = vec![
            0x86, 0xdd, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 9, 9, 9, 9, 9, 9, 0, 0,
        ];
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        let mut s = Vec::new();
        let v = to_ethernet(LinkType::Sll2, &f, 24, &mut s);
        assert_eq!(v.wire_len, 18);
        assert_eq!(v.direction, dir::INGRESS);
        assert_eq!(&v.bytes[12..14], &[0x86, 0xdd]);
        assert_eq!(v.bytes.len(), 18);
        // Too short for its header: passed on, the parser counts it.
        let v = to_ethernet(LinkType::Sll2, &f[..10], 10, &mut s);
        assert_eq!(v.bytes.len(), 10);
    }
}
