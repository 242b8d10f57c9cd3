//! `roce-observe qps`: the built binary on this host. Where the kernel has no RDMA subsystem
//! (ib_core not loaded: the RDMA netlink socket is refused) it says so and exits 2; where it has
//! one, the JSON report lists what the kernel's dumps hold. Usage errors exit 2. (Real QPs are
//! listed and checked against `rdma res show qp` in the soft-RoCE VM, docs/qps.md.)

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_roce-observe");

/// Whether this kernel answers RDMA netlink (ib_core loaded).
fn rdma_netlink() -> bool {
    // SAFETY: a plain socket(2) call; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 20) };
    if fd >= 0 {
        // SAFETY: the descriptor just opened.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

#[test]
fn qps_reports_the_rdma_subsystem_or_its_absence() {
    let out = Command::new(BIN)
        .args(["qps", "--json", "--sample", "100ms"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if rdma_netlink() {
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{:?} {stderr}",
            out.status
        );
        let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert!(j["devices"].is_array() && j["qps"].is_array(), "{j}");
        let fail = j["qps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["verdict"] == "error");
        assert_eq!(j["result"], if fail { "fail" } else { "pass" });
        assert_eq!(out.status.code(), Some(if fail { 1 } else { 0 }));
    } else {
        assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
        assert!(
            stderr.contains("no RDMA subsystem on this host"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing on stdout");
        // a named device that cannot exist says the subsystem is missing first, not the name
        let out = Command::new(BIN)
            .args(["qps", "--device", "mlx5_99"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2));
    }
    let out = Command::new(BIN)
        .args(["qps", "--sample", "fast"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad duration is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sample"));
}
