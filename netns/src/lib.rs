//! Network namespaces, veth pairs and raw frames for the lab and the privileged tests: every
//! namespace is deleted when its guard drops (also on panic), and only addresses inside the
//! namespaces are used.

use std::process::Command;

/// A namespace or command step that failed, with what was run.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("{cmd}: could not run")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{cmd}: {stderr}")]
    Failed { cmd: String, stderr: String },
    #[error("{what}: not done within the time allowed")]
    Timeout { what: String },
    #[error("{what}")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// Whether this process can load BPF programs and create namespaces (root).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a command, returning its stdout, or an error with its stderr.
pub fn run(cmd: &str, args: &[&str]) -> Result<String, NetnsError> {
    let line = || format!("{cmd} {}", args.join(" "));
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|source| NetnsError::Spawn {
            cmd: line(),
            source,
        })?;
    if !out.status.success() {
        return Err(NetnsError::Failed {
            cmd: line(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A network namespace that is deleted when dropped (also on panic).
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates namespace `name` (deleting a stale one of that name first) with loopback up.
    pub fn new(name: &str) -> Result<Netns, NetnsError> {
        let _ = run("ip", &["netns", "del", name]);
        run("ip", &["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.exec("ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, cmd: &str, args: &[&str]) -> Result<String, NetnsError> {
        let mut a = vec!["netns", "exec", self.name.as_str(), cmd];
        a.extend_from_slice(args);
        run("ip", &a)
    }

    /// Enters the namespace on the current thread (for sockets and BPF attach from this
    /// process). Returns a guard that moves the thread back when dropped.
    pub fn enter(&self) -> Result<NetnsEnter, NetnsError> {
        use std::os::fd::AsRawFd;
        let sys = |what: String| move |source| NetnsError::Sys { what, source };
        let orig = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(sys("open /proc/thread-self/ns/net".into()))?;
        let target = std::fs::File::open(format!("/var/run/netns/{}", self.name))
            .map_err(sys(format!("open netns {}", self.name)))?;
        // SAFETY: setns on valid namespace fds affects only this thread.
        if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(NetnsError::Sys {
                what: format!("setns {}", self.name),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(NetnsEnter { orig })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// Moves the thread back to its original namespace when dropped.
pub struct NetnsEnter {
    orig: std::fs::File,
}

impl Drop for NetnsEnter {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: setns back to the namespace this thread came from.
        unsafe { libc::setns(self.orig.as_raw_fd(), libc::CLONE_NEWNET) };
    }
}

/// Two namespaces joined by a veth pair (`a_if` in `a`, `b_if` in `b`), both up, with the
/// given IPv4 addresses (/24) inside the namespaces only. Dropping deletes both namespaces,
/// which deletes the veth pair.
pub struct VethPair {
    pub a: Netns,
    pub b: Netns,
    pub a_if: String,
    pub b_if: String,
}

impl VethPair {
    pub fn new(prefix: &str, a_addr: &str, b_addr: &str) -> Result<VethPair, NetnsError> {
        let pid = std::process::id();
        let a = Netns::new(&format!("ro-{prefix}-a-{pid}"))?;
        let b = Netns::new(&format!("ro-{prefix}-b-{pid}"))?;
        let a_if = "veth-a".to_string();
        let b_if = "veth-b".to_string();
        a.exec(
            "ip",
            &[
                "link", "add", &a_if, "type", "veth", "peer", "name", &b_if, "netns", &b.name,
            ],
        )?;
        a.exec(
            "ip",
            &["addr", "add", &format!("{a_addr}/24"), "dev", &a_if],
        )?;
        b.exec(
            "ip",
            &["addr", "add", &format!("{b_addr}/24"), "dev", &b_if],
        )?;
        a.exec("ip", &["link", "set", &a_if, "up"])?;
        b.exec("ip", &["link", "set", &b_if, "up"])?;
        Ok(VethPair { a, b, a_if, b_if })
    }
}

/// Sends raw Ethernet frames out of `iface` from inside namespace `ns` (AF_PACKET, SOCK_RAW).
/// Every frame must be sent whole.
pub fn send_raw(ns: &Netns, iface: &str, frames: &[Vec<u8>]) -> Result<(), NetnsError> {
    let _in_ns = ns.enter()?;
    let name = std::ffi::CString::new(iface).map_err(|e| NetnsError::Sys {
        what: format!("interface name {iface:?}"),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    // SAFETY: plain socket calls on a socket owned here, closed before returning.
    unsafe {
        let ifindex = libc::if_nametoindex(name.as_ptr());
        if ifindex == 0 {
            return Err(NetnsError::Sys {
                what: format!("{iface} in {}", ns.name),
                source: std::io::Error::last_os_error(),
            });
        }
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        if fd < 0 {
            return Err(NetnsError::Sys {
                what: "AF_PACKET socket".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        sll.sll_halen = 6;
        let mut res = Ok(());
        for f in frames {
            let n = libc::sendto(
                fd,
                f.as_ptr() as *const _,
                f.len(),
                0,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            if n != f.len() as isize {
                res = Err(NetnsError::Sys {
                    what: format!("sendto {iface}"),
                    source: std::io::Error::last_os_error(),
                });
                break;
            }
        }
        libc::close(fd);
        res
    }
}
