//! AF_PACKET raw sockets bound to one interface of the namespace the calling thread is in:
//! the lab's emulated NICs send and receive whole Ethernet frames through them. A received
//! frame whose 802.1Q tag the kernel took into metadata (VLAN offload) gets it back in place,
//! as it was on the wire (as libpcap does), from the packet's auxiliary data.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::LabError;

const ETH_P_ALL: u16 = 0x0003;
/// `SOL_PACKET` option: a `tpacket_auxdata` control message with every received frame.
const PACKET_AUXDATA: libc::c_int = 8;
/// `tp_status` bits: the frame had a tag (in metadata), and its TPID is given.
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `struct tpacket_auxdata` (linux/if_packet.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct AuxData {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}
/// `sll_pkttype` of frames this host sent (seen by a capture socket).
pub const PACKET_OUTGOING: u8 = 4;

pub struct RawSock {
    fd: OwnedFd,
    ifindex: i32,
}

fn os_err(what: &str) -> LabError {
    LabError::Sys {
        what: what.to_string(),
        source: std::io::Error::last_os_error(),
    }
}

/// How long [`RawSock::send`] waits out a full transmit queue before it fails.
pub const SEND_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(2);

impl RawSock {
    /// Opens a socket on `iface` (in the current thread's namespace) receiving every frame.
    pub fn open(iface: &str) -> Result<RawSock, LabError> {
        let name = CString::new(iface).map_err(|e| LabError::Sys {
            what: format!("bad interface name {iface:?}"),
            source: e.into(),
        })?;
        // SAFETY: plain libc calls with valid arguments; the fd is owned right away.
        unsafe {
            let ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            if ifindex == 0 {
                return Err(os_err(&format!("if_nametoindex({iface})")));
            }
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                (ETH_P_ALL.to_be()) as i32,
            );
            if fd < 0 {
                return Err(os_err("socket(AF_PACKET)"));
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = ETH_P_ALL.to_be();
            sll.sll_ifindex = ifindex;
            if libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            ) != 0
            {
                return Err(os_err(&format!("bind AF_PACKET to {iface}")));
            }
            let on: libc::c_int = 1;
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_AUXDATA,
                &on as *const _ as *const libc::c_void,
                4,
            ) != 0
            {
                return Err(os_err("setsockopt(PACKET_AUXDATA)"));
            }
            let buf: libc::c_int = 32 << 20;
            // Root can exceed rmem_max with SO_RCVBUFFORCE; fall back silently to SO_RCVBUF.
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &buf as *const _ as *const libc::c_void,
                4,
            ) != 0
            {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &buf as *const _ as *const libc::c_void,
                    4,
                );
            }
            let s = RawSock { fd, ifindex };
            // Frames queued before bind may belong to any interface: drain them.
            let mut b = [0u8; 64];
            while s.recv(&mut b).is_some() {}
            let _ = s.drops();
            Ok(s)
        }
    }

    /// Sends one frame. A full transmit queue (ENOBUFS / EAGAIN: the peer's softirq has not
    /// drained it yet, which a slow or busy CPU makes common) is waited out: retried with a
    /// growing pause (50 us doubling to 5 ms) for at most [`SEND_RETRY_FOR`]; then the error.
    pub fn send(&self, frame: &[u8]) -> Result<(), LabError> {
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(50);
        loop {
            // SAFETY: sending from a valid buffer; the socket is bound to its interface.
            let n = unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    frame.as_ptr() as *const libc::c_void,
                    frame.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            let transient = matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN));
            if !transient || start.elapsed() >= SEND_RETRY_FOR {
                return Err(LabError::Sys {
                    what: format!(
                        "send on ifindex {}{}",
                        self.ifindex,
                        if transient {
                            format!(
                                " (queue still full after {} ms)",
                                SEND_RETRY_FOR.as_millis()
                            )
                        } else {
                            String::new()
                        }
                    ),
                    source: e,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
        }
    }

    /// Receives one frame if one is waiting: (length, packet type). Non-blocking. A tag the
    /// kernel took into metadata is put back after the MAC addresses (`buf` keeps 4 bytes
    /// for it: frames are cut at `buf.len() - 4`).
    pub fn recv(&self, buf: &mut [u8]) -> Option<(usize, u8)> {
        if buf.len() < 18 {
            return None;
        }
        let room = buf.len() - 4;
        let mut ctrl = [0u64; 16];
        // SAFETY: recvmsg into a valid buffer (`room` bytes), a correctly sized address and a
        // control buffer of the size given; control messages are walked with the CMSG macros
        // within `msg_controllen`, and the auxdata is read unaligned.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: room,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = &mut sll as *mut libc::sockaddr_ll as *mut libc::c_void;
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
            let n = libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC);
            if n < 0 {
                return None;
            }
            let mut n = (n as usize).min(room);
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                    let aux = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const AuxData);
                    n = reinsert_tag(buf, n, &aux);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            Some((n, sll.sll_pkttype))
        }
    }

    /// Waits up to `timeout_ms` for a frame to be readable.
    pub fn wait(&self, timeout_ms: i32) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) };
    }

    /// Frames the kernel dropped for this socket (receive buffer full) since the last call.
    pub fn drops(&self) -> u32 {
        // SAFETY: getsockopt into a tpacket_stats of the right size.
        unsafe {
            let mut st: libc::tpacket_stats = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tpacket_stats>() as u32;
            if libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            ) != 0
            {
                return 0;
            }
            st.tp_drops
        }
    }
}

/// Puts a tag the kernel took into metadata back after the MAC addresses of the `n`-byte frame
/// in `buf` (which has 4 bytes of room); returns the frame's new length.
fn reinsert_tag(buf: &mut [u8], n: usize, aux: &AuxData) -> usize {
    if aux.tp_status & TP_STATUS_VLAN_VALID == 0 || n < 12 || buf.len() < n + 4 {
        return n;
    }
    let tpid = if aux.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
        aux.tp_vlan_tpid
    } else {
        0x8100
    };
    buf.copy_within(12..n, 16);
    buf[12..14].copy_from_slice(&tpid.to_be_bytes());
    buf[14..16].copy_from_slice(&aux.tp_vlan_tci.to_be_bytes());
    n + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RawSock over one end of a non-blocking AF_UNIX datagram pair with a small send buffer
    /// (the retry is about the errno, whatever the socket); the other end to drain.
    fn full_pair() -> (RawSock, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: a socketpair into a two-element array; both fds owned right after.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
        // SAFETY: fds the kernel just returned, each owned once.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let s = RawSock { fd: a, ifindex: 7 };
        let frame = [0u8; 512];
        // Fill the queue until the kernel says EAGAIN (bounded: a few thousand frames at most).
        for _ in 0..100_000 {
            // SAFETY: as in `send`.
            let n = unsafe {
                libc::send(
                    s.fd.as_raw_fd(),
                    frame.as_ptr() as *const libc::c_void,
                    512,
                    0,
                )
            };
            if n < 0 {
                assert_eq!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN)
                );
                return (s, b);
            }
        }
        panic!("the datagram queue never filled");
    }

    #[test]
    fn a_full_queue_is_waited_out_within_the_bound() {
        let (s, peer) = full_pair();
        // The peer drains one frame after 100 ms: the send waits for it instead of failing.
        let drain = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut b = [0u8; 512];
            // SAFETY: receiving into a valid buffer.
            let n = unsafe { libc::recv(peer.as_raw_fd(), b.as_mut_ptr() as *mut _, 512, 0) };
            assert_eq!(n, 512);
            peer
        });
        let t = std::time::Instant::now();
        s.send(&[1u8; 512]).unwrap();
        assert!(
            t.elapsed() >= std::time::Duration::from_millis(90),
            "{:?}",
            t.elapsed()
        );
        drop(drain.join().unwrap());
    }

    #[test]
    fn a_queue_that_stays_full_fails_after_the_bound_naming_it() {
        let (s, _peer) = full_pair();
        let t = std::time::Instant::now();
        let e = s.send(&[1u8; 512]).unwrap_err().to_string();
        let took = t.elapsed();
        assert!(
            took >= SEND_RETRY_FOR && took < SEND_RETRY_FOR * 2,
            "{took:?}"
        );
        assert!(
            e.contains("ifindex 7") && e.contains("queue still full"),
            "{e}"
        );
    }

    #[test]
    fn a_tag_in_metadata_is_put_back_after_the_macs() {
        let aux = |status, tci, tpid| AuxData {
            tp_status: status,
            tp_len: 0,
            tp_snaplen: 0,
            tp_mac: 0,
            tp_net: 0,
            tp_vlan_tci: tci,
            tp_vlan_tpid: tpid,
        };
        let frame: Vec<u8> = (0..20u8).collect();
        let mut buf = frame.clone();
        buf.resize(24, 0xee);
        let n = reinsert_tag(&mut buf, 20, &aux(TP_STATUS_VLAN_VALID, 0x6064, 0));
        assert_eq!(n, 24);
        assert_eq!(&buf[..12], &frame[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x60, 0x64]);
        assert_eq!(&buf[16..24], &frame[12..20]);
        let mut buf2 = frame.clone();
        buf2.resize(24, 0);
        let both = TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID;
        assert_eq!(reinsert_tag(&mut buf2, 20, &aux(both, 3, 0x88a8)), 24);
        assert_eq!(&buf2[12..16], &[0x88, 0xa8, 0, 3]);
        // no tag: unchanged
        let mut buf3 = buf.clone();
        assert_eq!(reinsert_tag(&mut buf3, 20, &aux(0, 5, 0)), 20);
        assert_eq!(buf3, buf);
    }
}
