//! Addresses as the outputs print them.

use std::net::IpAddr;

/// A key's address as printed everywhere: IPv4-mapped addresses as dotted quads.
pub fn ip_of(a: &[u8; 16]) -> IpAddr {
    IpAddr::from(*a).to_canonical()
}
