//! Expected marking and alert thresholds: vendor profiles and the `--policy` TOML file.
//!
//! STUB: the collector work fills this in (TOML parsing with key and line in errors).

use observer_common::maps::Policy;

#[derive(Clone, Debug)]
pub struct Thresholds {
    /// PFC storm: XOFF frames per priority per second above this.
    pub pfc_storm_xoff_per_s: u64,
}

#[derive(Clone, Debug)]
pub struct PolicyConfig {
    /// Kernel form (DSCP / PCP / ECN-capable per class, RDMA priority).
    pub expected: Policy,
    /// Expected RoCE MTU (largest UDP payload a QP should reach), bytes.
    pub expected_mtu: u32,
    pub thresholds: Thresholds,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown profile {0:?} (known: nvidia, broadcom)")]
    UnknownProfile(String),
    #[error("{0}")]
    Other(String),
}

impl PolicyConfig {
    /// `nvidia` or `broadcom` (roce-domain.md "Markings a RoCE fabric expects").
    pub fn profile(name: &str) -> Result<PolicyConfig, PolicyError> {
        Err(PolicyError::UnknownProfile(name.to_string()))
    }
    pub fn from_file(_path: &std::path::Path) -> Result<PolicyConfig, PolicyError> {
        Err(PolicyError::Other("not implemented".into()))
    }
}
