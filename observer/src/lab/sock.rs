//! AF_PACKET raw sockets bound to one interface of the namespace the calling thread is in:
//! the lab's emulated NICs send and receive whole Ethernet frames through them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::LabError;

const ETH_P_ALL: u16 = 0x0003;
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

    /// Sends one frame.
    pub fn send(&self, frame: &[u8]) -> Result<(), LabError> {
        // SAFETY: sending from a valid buffer; the socket is bound to its interface.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOBUFS) || e.raw_os_error() == Some(libc::EAGAIN) {
                // Transient queue full: one retry after a short pause.
                std::thread::sleep(std::time::Duration::from_micros(200));
                // SAFETY: as above.
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
            }
            return Err(LabError::Sys {
                what: format!("send on ifindex {}", self.ifindex),
                source: e,
            });
        }
        Ok(())
    }

    /// Receives one frame if one is waiting: (length, packet type). Non-blocking.
    pub fn recv(&self, buf: &mut [u8]) -> Option<(usize, u8)> {
        // SAFETY: recvfrom into a valid buffer with a correctly sized address.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            let n = libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_TRUNC,
                &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                &mut len,
            );
            if n < 0 {
                return None;
            }
            Some(((n as usize).min(buf.len()), sll.sll_pkttype))
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
