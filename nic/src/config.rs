//! Congestion-control, ECN and RoCE marking configuration read from files: mlx5 debugfs
//! `cc_params`, the MLNX_OFED `ecn/` sysfs tree, rdma_cm configfs defaults, GID types.
//! Every path is taken under a root directory (tests use a fake tree). A file that is absent or
//! unreadable gives `Reading::Unavailable` with the reason, never 0.
//!
//! - mlx5 debugfs [upstream]: `/sys/kernel/debug/mlx5/<pci-bdf>/cc_params/<name>`, one `"%d\n"`
//!   per file, mode 0600 (root and a mounted debugfs), present when the device allows congestion
//!   control queries (`drivers/infiniband/hw/mlx5/cong.c` `mlx5_ib_dbg_cc_name[]`,
//!   `mlx5_ib_dbg_param_read`). `np_cnp_dscp` / `np_cnp_prio` / `np_cnp_prio_mode` describe the
//!   CNPs this host sends.
//! - MLNX_OFED only (`mlnx-ofa_kernel` `drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c`,
//!   `en_ecn.c`): `/sys/class/net/<if>/ecn/roce_np/enable/<0..7>` and `.../roce_rp/enable/<0..7>`
//!   ("%d\n", 0/1), `.../roce_np/cnp_dscp`, `.../roce_np/cnp_802p_prio`,
//!   `.../roce_np/min_time_between_cnps`. Absent from upstream kernels.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::rdma::GidEntry;
use super::sysfs::{self, component, under};
use super::{Reading, UnavailableReason};

/// `mlx5_ib_dbg_cc_name[]` (`drivers/infiniband/hw/mlx5/cong.c`).
pub const MLX5_CC_PARAMS: &[&str] = &[
    "rp_clamp_tgt_rate",
    "rp_clamp_tgt_rate_ati",
    "rp_time_reset",
    "rp_byte_reset",
    "rp_threshold",
    "rp_ai_rate",
    "rp_max_rate",
    "rp_hai_rate",
    "rp_min_dec_fac",
    "rp_min_rate",
    "rp_rate_to_set_on_first_cnp",
    "rp_dce_tcp_g",
    "rp_dce_tcp_rtt",
    "rp_rate_reduce_monitor_period",
    "rp_initial_alpha_value",
    "rp_gd",
    "np_min_time_between_cnps",
    "np_cnp_dscp",
    "np_cnp_prio_mode",
    "np_cnp_prio",
    "rtt_resp_dscp_valid",
    "rtt_resp_dscp",
];

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("invalid name {0:?} for a configuration path")]
    BadName(String),
    #[error("RDMA configuration")]
    Rdma(#[from] super::rdma::RdmaError),
}

/// One mlx5 congestion-control parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CcParam {
    pub name: String,
    pub value: Reading<u64>,
}

/// MLNX_OFED `ecn/` settings of a netdev (per priority 0..7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OfedEcn {
    /// `roce_rp/enable/<p>`: reaction point (rate reduction on CNP) enabled.
    pub roce_rp_enable: [Reading<bool>; 8],
    /// `roce_np/enable/<p>`: notification point (CNP generation on CE) enabled.
    pub roce_np_enable: [Reading<bool>; 8],
    pub cnp_dscp: Reading<u64>,
    pub cnp_802p_prio: Reading<u64>,
    pub min_time_between_cnps: Reading<u64>,
}

impl<T> Default for Reading<T> {
    fn default() -> Self {
        Reading::unavailable(UnavailableReason::Absent, "not read")
    }
}

/// Configuration relevant to RoCE on one interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NicConfig {
    /// RDMA device firmware version (`RDMA_NLDEV_ATTR_FW_VERSION`).
    pub rdma_fw_version: Reading<String>,
    /// Driver of the RDMA device's parent device (`mlx5_core`, `bnxt_en`, `ice`).
    pub rdma_parent_driver: Reading<String>,
    /// mlx5 debugfs `cc_params`; unavailable when the directory cannot be read.
    pub mlx5_cc: Reading<Vec<CcParam>>,
    pub ofed_ecn: OfedEcn,
    /// rdma_cm default ToS byte (DSCP << 2 | ECN).
    pub default_roce_tos: Reading<u8>,
    pub default_roce_mode: Reading<String>,
    pub gid_types: Reading<Vec<GidEntry>>,
}

impl NicConfig {
    /// A readable mlx5 cc parameter by name.
    pub fn cc(&self, name: &str) -> Option<u64> {
        self.mlx5_cc
            .value()?
            .iter()
            .find(|p| p.name == name)?
            .value
            .value()
            .copied()
    }
}

/// Reads mlx5 debugfs `cc_params` for the PCI function `bdf` (ethtool `bus_info`).
pub fn read_mlx5_cc(root: &Path, bdf: &str) -> Result<Reading<Vec<CcParam>>, ConfigError> {
    let bdf = component(bdf).ok_or_else(|| ConfigError::BadName(bdf.into()))?;
    let dir = under(root, "sys/kernel/debug/mlx5")
        .join(bdf)
        .join("cc_params");
    if let Err(e) = std::fs::read_dir(&dir) {
        let mut u = sysfs::io_unavailable(&e, &dir);
        if u.reason == UnavailableReason::Absent {
            u.detail
                .push_str(" (needs root, debugfs mounted, and a device that allows CC queries)");
        }
        return Ok(Reading::Unavailable(u));
    }
    let params = MLX5_CC_PARAMS
        .iter()
        .map(|n| CcParam {
            name: n.to_string(),
            value: sysfs::read_u64_setting(&dir.join(n)),
        })
        .collect();
    Ok(Reading::Read(params))
}

fn read_bool(path: &Path) -> Reading<bool> {
    match sysfs::read_u64_setting(path) {
        Reading::Read(0) => Reading::Read(false),
        Reading::Read(1) => Reading::Read(true),
        Reading::Read(v) => Reading::unavailable(
            UnavailableReason::NotSupported,
            format!("{}: unexpected value {v}", path.display()),
        ),
        Reading::Unavailable(u) => Reading::Unavailable(u),
    }
}

/// Reads the MLNX_OFED `ecn/` tree of `ifname`.
pub fn read_ofed_ecn(root: &Path, ifname: &str) -> Result<OfedEcn, ConfigError> {
    let ifname = component(ifname).ok_or_else(|| ConfigError::BadName(ifname.into()))?;
    let ecn: PathBuf = under(root, "sys/class/net").join(ifname).join("ecn");
    let prio = |side: &str| -> [Reading<bool>; 8] {
        std::array::from_fn(|p| read_bool(&ecn.join(side).join("enable").join(p.to_string())))
    };
    Ok(OfedEcn {
        roce_rp_enable: prio("roce_rp"),
        roce_np_enable: prio("roce_np"),
        cnp_dscp: sysfs::read_u64_setting(&ecn.join("roce_np/cnp_dscp")),
        cnp_802p_prio: sysfs::read_u64_setting(&ecn.join("roce_np/cnp_802p_prio")),
        min_time_between_cnps: sysfs::read_u64_setting(&ecn.join("roce_np/min_time_between_cnps")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn root(tag: &str) -> PathBuf {
        let r = std::env::temp_dir().join(format!("nic-config-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&r);
        r
    }

    #[test]
    fn mlx5_cc_from_fake_debugfs() {
        let r = root("cc");
        let d = r.join("sys/kernel/debug/mlx5/0000:3b:00.0/cc_params");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("np_cnp_dscp"), "48\n").unwrap();
        fs::write(d.join("np_cnp_prio"), "6\n").unwrap();
        fs::write(d.join("rp_gd"), "bogus\n").unwrap();
        let cc = read_mlx5_cc(&r, "0000:3b:00.0").unwrap();
        let cfg = NicConfig {
            mlx5_cc: cc,
            ..Default::default()
        };
        assert_eq!(cfg.cc("np_cnp_dscp"), Some(48));
        assert_eq!(cfg.cc("np_cnp_prio"), Some(6));
        assert_eq!(cfg.cc("rp_gd"), None, "unparsable is not 0");
        assert_eq!(cfg.cc("np_cnp_prio_mode"), None, "absent is not 0");
        let params = cfg.mlx5_cc.value().unwrap();
        let mode = params
            .iter()
            .find(|p| p.name == "np_cnp_prio_mode")
            .unwrap();
        assert_eq!(
            mode.value.reason().unwrap().reason,
            UnavailableReason::Absent
        );
        let none = read_mlx5_cc(&r, "0000:00:00.0").unwrap();
        assert!(none.reason().unwrap().detail.contains("debugfs"));
        assert!(read_mlx5_cc(&r, "..").is_err());
        let _ = fs::remove_dir_all(&r);
    }

    #[test]
    fn ofed_ecn_from_fake_sysfs() {
        let r = root("ecn");
        let e = r.join("sys/class/net/ens1f0np0/ecn");
        fs::create_dir_all(e.join("roce_rp/enable")).unwrap();
        fs::create_dir_all(e.join("roce_np/enable")).unwrap();
        for p in 0..8 {
            fs::write(
                e.join(format!("roce_rp/enable/{p}")),
                if p == 3 { "1\n" } else { "0\n" },
            )
            .unwrap();
        }
        fs::write(e.join("roce_np/enable/3"), "1\n").unwrap();
        fs::write(e.join("roce_np/enable/4"), "7\n").unwrap();
        fs::write(e.join("roce_np/cnp_dscp"), "48\n").unwrap();
        let ecn = read_ofed_ecn(&r, "ens1f0np0").unwrap();
        assert_eq!(ecn.roce_rp_enable[3], Reading::Read(true));
        assert_eq!(ecn.roce_rp_enable[0], Reading::Read(false));
        assert_eq!(ecn.roce_np_enable[3], Reading::Read(true));
        assert!(ecn.roce_np_enable[0].reason().is_some());
        assert_eq!(
            ecn.roce_np_enable[4].reason().unwrap().reason,
            UnavailableReason::NotSupported
        );
        assert_eq!(ecn.cnp_dscp, Reading::Read(48));
        assert_eq!(
            ecn.cnp_802p_prio.reason().unwrap().reason,
            UnavailableReason::Absent
        );
        let upstream = read_ofed_ecn(&r, "eth0").unwrap();
        assert!(upstream.roce_rp_enable.iter().all(|x| x.value().is_none()));
        let _ = fs::remove_dir_all(&r);
    }
}
