//! The lab's fabric: hosts `h1` and `h2` and a switch `sw` (Linux bridge `br0`), each in its own
//! network namespace, joined by veth pairs:
//!
//! ```text
//!  ro-lab-h1-PID            ro-lab-sw-PID                 ro-lab-h2-PID
//!  h1-eth0 10.77.0.1 ---- sw-p1 [br0: nft faults] sw-p2 ---- h2-eth0 10.77.0.2
//! ```
//!
//! Frames may carry an 802.1Q tag (VLAN 100): the switch ports send it in the frame.
//!
//! Only 10.77.0.0/24 inside these namespaces is used. Dropping the [`Topology`] deletes the
//! namespaces (and with them every veth, the bridge and the nftables rules), also on panic;
//! namespaces left by a lab that was killed (its PID gone) are removed at the next start.

use netns::{Netns, NetnsError, run};

use super::LabError;

pub const H1_IF: &str = "h1-eth0";
pub const H2_IF: &str = "h2-eth0";
pub const SW_P1: &str = "sw-p1";
pub const SW_P2: &str = "sw-p2";
pub const H1_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0x01];
pub const H2_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0x02];
pub const SW_P2_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0xf2];
pub const SW_P1_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0xf1];
pub const H1_IP: [u8; 4] = [10, 77, 0, 1];
pub const H2_IP: [u8; 4] = [10, 77, 0, 2];
/// Jumbo frames end to end, as a RoCE fabric with path MTU 4096 needs.
pub const LINK_MTU: u32 = 9000;

pub fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn ip_str(a: &[u8; 4]) -> String {
    std::net::Ipv4Addr::from(*a).to_string()
}

/// Three namespaces, deleted on drop.
pub struct Topology {
    pub h1: Netns,
    pub sw: Netns,
    pub h2: Netns,
}

fn e(what: &'static str) -> impl Fn(NetnsError) -> LabError {
    move |source| LabError::Topology { what, source }
}

impl Topology {
    /// Builds the fabric; `tag` makes the names unique (the PID, plus a run number).
    pub fn create(tag: &str) -> Result<Topology, LabError> {
        remove_stale();
        let h1 = Netns::new(&format!("ro-lab-h1-{tag}")).map_err(e("netns h1"))?;
        let sw = Netns::new(&format!("ro-lab-sw-{tag}")).map_err(e("netns sw"))?;
        let h2 = Netns::new(&format!("ro-lab-h2-{tag}")).map_err(e("netns h2"))?;
        let t = Topology { h1, sw, h2 };
        t.build().map_err(e("building the fabric"))?;
        Ok(t)
    }

    /// The observed hosts as (namespace, interface, name): h2 first, then h1.
    pub fn observed_hosts(&self) -> [(&Netns, &'static str, &'static str); 2] {
        [(&self.h2, H2_IF, "h2"), (&self.h1, H1_IF, "h1")]
    }

    /// The links, the bridge, the addresses, the hosts' firewall and neighbours, in that order;
    /// returns once both switch ports are up.
    fn build(&self) -> Result<(), NetnsError> {
        let (h1, sw, h2) = (&self.h1, &self.sw, &self.h2);
        for ns in [h1, sw, h2] {
            // Quiet links: no IPv6 router solicitations or MLD reports in the observed traffic.
            ns.exec("sysctl", &["-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])?;
            ns.exec(
                "sysctl",
                &["-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        self.add_links()?;
        self.address_hosts()?;
        self.host_rules_and_neighbours()?;
        // Let the bridge learn both hosts before any fault rule counts a frame.
        wait_oper_up(sw, SW_P1)?;
        wait_oper_up(sw, SW_P2)?;
        Ok(())
    }

    /// The bridge and the two veth pairs (jumbo MTU, fixed MACs), the switch ports enslaved and
    /// everything in the switch up.
    fn add_links(&self) -> Result<(), NetnsError> {
        let (h1, sw, h2) = (&self.h1, &self.sw, &self.h2);
        let mtu = LINK_MTU.to_string();
        sw.exec(
            "ip",
            &["link", "add", "br0", "type", "bridge", "stp_state", "0"],
        )?;
        for (ns, dev, port) in [(h1, H1_IF, SW_P1), (h2, H2_IF, SW_P2)] {
            ns.exec(
                "ip",
                &[
                    "link", "add", dev, "type", "veth", "peer", "name", port, "netns", &sw.name,
                ],
            )?;
        }
        for (ns, dev, mac) in [
            (h1, H1_IF, H1_MAC),
            (h2, H2_IF, H2_MAC),
            (sw, SW_P1, SW_P1_MAC),
            (sw, SW_P2, SW_P2_MAC),
        ] {
            let mac = mac_str(&mac);
            ns.exec("ip", &["link", "set", dev, "address", &mac, "mtu", &mtu])?;
        }
        sw.exec("ip", &["link", "set", "br0", "mtu", &mtu])?;
        for p in [SW_P1, SW_P2] {
            sw.exec("ip", &["link", "set", p, "master", "br0"])?;
            sw.exec("ip", &["link", "set", p, "up"])?;
            // The switch ports put an 802.1Q tag back into the frame they send, as a switch
            // does on the wire: the bridge keeps a received tag in skb metadata, which a veth
            // would hand over as such, where the hosts' XDP programs do not see it.
            sw.exec("ethtool", &["-K", p, "txvlan", "off"])?;
        }
        sw.exec("ip", &["link", "set", "br0", "up"])?;
        Ok(())
    }

    /// The hosts' addresses, then their interfaces up.
    fn address_hosts(&self) -> Result<(), NetnsError> {
        let hosts = [(&self.h1, H1_IF, H1_IP), (&self.h2, H2_IF, H2_IP)];
        for (ns, dev, ip) in hosts {
            let addr = format!("{}/24", ip_str(&ip));
            ns.exec("ip", &["addr", "add", &addr, "dev", dev])?;
        }
        for (ns, dev, _) in hosts {
            ns.exec("ip", &["link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// On each host: a firewall rule that keeps the kernel off UDP 4791, and the other host as
    /// a static neighbour.
    fn host_rules_and_neighbours(&self) -> Result<(), NetnsError> {
        // The emulated NICs own UDP 4791: the hosts' kernels must not answer it with ICMP
        // port-unreachable (AF_PACKET sockets and XDP/tc see the frames before this rule).
        let host_rules = "table inet rolab_host {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    udp dport 4791 drop\n  }\n}\n";
        let rules_path = std::env::temp_dir().join(format!("ro-lab-host-{}.nft", self.h1.name));
        std::fs::write(&rules_path, host_rules).map_err(|source| NetnsError::Sys {
            what: format!("writing {}", rules_path.display()),
            source,
        })?;
        let r = [
            (&self.h1, H1_IF, H2_IP, H2_MAC),
            (&self.h2, H2_IF, H1_IP, H1_MAC),
        ]
        .into_iter()
        .try_for_each(|(ns, dev, peer_ip, peer_mac)| {
            ns.exec("nft", &["-f", &rules_path.to_string_lossy()])?;
            // Static neighbours, so nothing but the lab's own frames crosses the links.
            ns.exec(
                "ip",
                &[
                    "neigh",
                    "replace",
                    &ip_str(&peer_ip),
                    "lladdr",
                    &mac_str(&peer_mac),
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )
            .map(drop)
        });
        let _ = std::fs::remove_file(&rules_path);
        r
    }
}

fn wait_oper_up(ns: &Netns, dev: &str) -> Result<(), NetnsError> {
    for _ in 0..100 {
        let s = ns.exec("cat", &[&format!("/sys/class/net/{dev}/operstate")])?;
        if s.trim() == "up" {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Err(NetnsError::Timeout {
        what: format!("{dev} in {} coming up (2 s)", ns.name),
    })
}

/// Deletes `ro-lab-*-PID[-N]` namespaces whose PID no longer runs (a lab killed by SIGKILL).
pub fn remove_stale() {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("ro-lab-") else {
            continue;
        };
        let mut parts = rest.split('-');
        let _role = parts.next();
        let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(
                netns = name,
                pid,
                "removing a namespace left by a lab that is gone"
            );
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}
