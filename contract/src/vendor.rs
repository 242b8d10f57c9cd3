//! The vendor marking profiles, defined once. `--profile` of the live command, of replay and of
//! `roce-analyze`, the policy file's `profile = ...`, the lab's emulated NICs and the NIC check
//! all take their values from here (see docs/policy.md; the values are those of the vendors'
//! RoCE defaults: data and ACKs DSCP 26 with ECT, CNPs DSCP 48, PFC on priority 3).

/// What a vendor's NICs send, and what the fabric is configured for, by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    /// DSCP of RoCE data packets.
    pub data_dscp: u8,
    /// DSCP of ACKs (opcodes 0x11, 0x12, 0x51, 0x52).
    pub ack_dscp: u8,
    /// DSCP of CNPs (opcode 0x81).
    pub cnp_dscp: u8,
    /// ECN codepoint the NIC sends data, ACKs and CNPs with (2 = ECT(0), 0 = Not-ECT).
    pub data_ecn: u8,
    pub ack_ecn: u8,
    pub cnp_ecn: u8,
    /// The one priority PFC is enabled on (the RDMA traffic class).
    pub rdma_priority: u8,
    /// 802.1p priority of CNPs (matters where PCP is trusted).
    pub cnp_priority: u8,
    /// Expected RoCE path MTU, bytes.
    pub mtu: u32,
}

/// NVIDIA ConnectX defaults.
pub const NVIDIA: Profile = Profile {
    name: "nvidia",
    data_dscp: 26,
    ack_dscp: 26,
    cnp_dscp: 48,
    data_ecn: 2,
    ack_ecn: 2,
    cnp_ecn: 0,
    rdma_priority: 3,
    cnp_priority: 6,
    mtu: 4096,
};

/// Broadcom Thor2 defaults: NVIDIA's DSCPs, CNPs on priority 7.
pub const BROADCOM: Profile = Profile {
    name: "broadcom",
    cnp_priority: 7,
    ..NVIDIA
};

/// Every profile, in documentation order.
pub const PROFILES: [Profile; 2] = [NVIDIA, BROADCOM];

/// A vendor profile by name: what `--profile` and a policy file's `profile = ...` take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Vendor {
    /// NVIDIA ConnectX ([`NVIDIA`]).
    #[default]
    Nvidia,
    /// Broadcom Thor2 ([`BROADCOM`]).
    Broadcom,
}

impl Vendor {
    /// Every vendor, in [`PROFILES`] order.
    pub const ALL: [Vendor; 2] = [Vendor::Nvidia, Vendor::Broadcom];

    /// Its profile.
    pub fn profile(self) -> &'static Profile {
        match self {
            Vendor::Nvidia => &NVIDIA,
            Vendor::Broadcom => &BROADCOM,
        }
    }

    /// `nvidia` or `broadcom`.
    pub fn name(self) -> &'static str {
        self.profile().name
    }

    /// The vendor named `name`.
    pub fn from_name(name: &str) -> Option<Vendor> {
        Vendor::ALL.into_iter().find(|v| v.name() == name)
    }
}

impl std::fmt::Display for Vendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The profile named `name`.
pub fn profile(name: &str) -> Option<&'static Profile> {
    Vendor::from_name(name).map(Vendor::profile)
}

/// `nvidia, broadcom`: for error messages.
pub fn names() -> String {
    PROFILES.map(|p| p.name).join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_by_name() {
        assert_eq!(profile("nvidia"), Some(&NVIDIA));
        assert_eq!(profile("broadcom").map(|p| p.cnp_priority), Some(7));
        assert_eq!(profile("cisco"), None);
        assert_eq!(names(), "nvidia, broadcom");
    }

    #[test]
    fn vendors_are_the_profiles() {
        use clap::ValueEnum;
        assert_eq!(Vendor::ALL.len(), PROFILES.len());
        for (v, p) in Vendor::ALL.into_iter().zip(PROFILES) {
            assert_eq!(v.profile(), &p);
            // the command line spells them as the profiles are named
            assert_eq!(v.to_possible_value().unwrap().get_name(), p.name);
            assert_eq!(Vendor::from_name(p.name), Some(v));
        }
    }
}
