//! NIC source benchmark (`cargo xtask bench-nic`, or `cargo run --release -p observer
//! --example bench_nic`): the CPU cost of one interval of the NIC view with 2,000 ethtool
//! counters (the size of an mlx5 port with many queues) and 60 RDMA counters: deltas,
//! vendor-neutral mapping, rules and the `nic` row written, beside the collector's own interval
//! cost measured in the same run (1,000 active QPs of 10,000 tracked, through the same
//! collector). Also the wall time of one real read of an interface (`--iface`, default `lo`):
//! the ioctls, netlink requests and sysfs files of `LiveNicReader::read`. Prints medians.
//!
//! Usage: bench_nic [--intervals N] [--iface IF]

use std::time::Instant;

use nic::{self, DrvInfo, LiveNicReader, LiveOptions, NicReader, NicSample, RdmaPort};
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::synthetic::Synthetic;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// 2,000 ethtool counters in mlx5's naming: the per-priority and port ones the mapping knows,
/// and per-queue ones (kept raw).
fn ethtool_names() -> Vec<String> {
    let mut v = Vec::new();
    for p in 0..8 {
        for f in [
            "rx_prio{p}_pause",
            "tx_prio{p}_pause",
            "rx_prio{p}_pause_duration",
            "tx_prio{p}_pause_duration",
            "rx_prio{p}_pause_transition",
            "rx_prio{p}_discards",
            "rx_prio{p}_bytes",
            "rx_prio{p}_packets",
            "tx_prio{p}_bytes",
            "tx_prio{p}_packets",
        ] {
            v.push(f.replace("{p}", &p.to_string()));
        }
    }
    for f in [
        "rx_global_pause",
        "tx_global_pause",
        "rx_discards_phy",
        "tx_discards_phy",
        "tx_pause_storm_warning_events",
        "rx_vport_rdma_unicast_packets",
    ] {
        v.push(f.into());
    }
    let mut q = 0;
    while v.len() < 2000 {
        for f in ["packets", "bytes", "csum_complete", "xdp_drop", "wqe_err"] {
            if v.len() < 2000 {
                v.push(format!("rx{q}_{f}"));
            }
        }
        q += 1;
    }
    v
}

fn rdma_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "np_cnp_sent",
        "rp_cnp_handled",
        "rp_cnp_ignored",
        "np_ecn_marked_roce_packets",
        "out_of_sequence",
        "packet_seq_err",
        "local_ack_timeout_err",
        "duplicate_request",
        "rnr_nak_retry_err",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    while v.len() < 60 {
        v.push(format!("req_cqe_error_{}", v.len()));
    }
    v
}

fn sample(t: u64, round: u64, eth: &[String], rdma: &[String]) -> NicSample {
    let mut s = NicSample::empty("ens1f0np0", t);
    s.drvinfo = Some(DrvInfo {
        driver: "mlx5_core".into(),
        version: "6.8".into(),
        fw_version: "28.39".into(),
        bus_info: "0000:3b:00.0".into(),
        n_stats: eth.len() as u32,
    });
    // every counter moves a little each interval (a busy port)
    let val = |i: usize| (i as u64 + 1) * 1000 + round * (i as u64 % 7);
    s.ethtool = Some(
        eth.iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), val(i)))
            .collect(),
    );
    s.rdma = Some(RdmaPort {
        dev: "mlx5_0".into(),
        port: 1,
        counters: rdma
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), val(i)))
            .collect(),
        via: "netlink".into(),
    });
    s
}

fn main() {
    observer::pipeline::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let intervals: u64 = arg("--intervals")
        .and_then(|s| s.parse().ok())
        .unwrap_or(21);
    let iface = arg("--iface").cloned().unwrap_or_else(|| "lo".into());
    let out = std::env::temp_dir().join(format!("ro-bench-nic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let mut cfg = CollectorConfig::new(out.clone(), "bench", "live", policy.clone());
    cfg.nic_policy = Some(nic::Policy::nvidia());
    let mut col = Collector::new(cfg).unwrap();
    col.quiet_stderr();
    let (eth, rdma) = (ethtool_names(), rdma_names());
    let t0 = 1_795_239_299_000_000_000u64;
    let mut prev = sample(t0, 0, &eth, &rdma);
    col.on_nic("ens1f0np0", &prev, None).unwrap();
    // 10,000 tracked keys, 1,000 of them active each interval
    let mut syn = Synthetic::new(policy.expected, 10_000, 1);
    syn.step(t0);
    col.on_snapshot(&syn.dp.snapshot("ens1f0np0", t0, None))
        .unwrap();
    syn.qps = 1_000;
    let (mut nic_ns, mut col_ns) = (Vec::new(), Vec::new());
    for r in 1..=intervals {
        let t = t0 + r * 1_000_000_000;
        let s = sample(t, r, &eth, &rdma);
        let c0 = thread_cpu_ns();
        let n = nic::interval_between(&prev, &s);
        col.on_nic("ens1f0np0", &s, Some(&n)).unwrap();
        nic_ns.push(thread_cpu_ns() - c0);
        prev = s;
        syn.step(t);
        let snap = syn.dp.snapshot("ens1f0np0", t, None);
        let c0 = thread_cpu_ns();
        col.on_snapshot(&snap).unwrap();
        col_ns.push(thread_cpu_ns() - c0);
    }
    let (nic_m, col_m) = (median(&mut nic_ns), median(&mut col_ns));
    println!(
        "NIC view, one interval, 2000 ethtool + 60 RDMA counters: {:.1} us CPU (median of {intervals})",
        nic_m as f64 / 1e3
    );
    println!(
        "collector, one interval, 1000 active of 10000 keys:     {:.1} us CPU (same run)",
        col_m as f64 / 1e3
    );
    println!(
        "ratio NIC / collector interval: {:.3}",
        nic_m as f64 / col_m as f64
    );
    drop(col);
    let _ = std::fs::remove_dir_all(&out);
    match LiveNicReader::new(&iface, LiveOptions::default()) {
        Ok(mut r) => {
            let mut ns = Vec::new();
            let mut counters = 0;
            for _ in 0..intervals {
                let t = Instant::now();
                let s = r.read().expect("read");
                ns.push(t.elapsed().as_nanos() as u64);
                counters = s.ethtool.as_ref().map_or(0, |e| e.len());
            }
            println!(
                "one real read of {iface} ({counters} ethtool counters): {:.1} us wall (median of {intervals})",
                median(&mut ns) as f64 / 1e3
            );
        }
        Err(e) => println!("no real read of {iface}: {}", contract::error::chain(&e)),
    }
}
