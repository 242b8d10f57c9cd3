//! Host-QP inventory benchmark (`cargo xtask bench-host-qps`, or `cargo run --release -p
//! observer --example bench_host_qps`): the CPU cost of one interval of the host's QPs at N QPs
//! (default 10,000 and 100,000): decoding the RDMA netlink dump messages (laid out as the
//! kernel's `fill_res_qp_entry` writes them, about 300 QPs per 32 KiB message), the inventory's
//! joins (process and cgroup of 64 processes, rdma_cm ids of a tenth of the QPs), the PSN
//! deltas and fates against the previous read, and the collector's `qps` rows written to
//! Parquet; beside the collector's own interval cost in the same run (1,000 active QPs of
//! 10,000 tracked, the `bench_nic` baseline). Prints medians, and the process's peak RSS.
//! The kernel's side of a dump (one `ib_query_qp` per QP: a firmware command on mlx5) is not
//! in it: it needs real devices.
//!
//! Usage: bench_host_qps [--intervals N] [--qps 10000,100000]

use std::collections::VecDeque;

use nic::netlink::MsgBuilder;
use nic::rdma::{RdmaCmId, RdmaDevice, RdmaError, RdmaQp};
use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::host_qps::QpFeed;
use observer::sources::synthetic::Synthetic;
use qps::inventory::{Procfs, QpSource};

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

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The dump of read `r`: `n` RC QPs of device 1 in messages of at most 300 entries, their PSNs
/// advanced by `r` times a per-QP rate.
fn dump(n: u32, r: u32) -> Vec<Vec<u8>> {
    let mut msgs = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(300) {
        let mut b = MsgBuilder::new(0, 0, 0);
        b.attr_u32(1, 1);
        b.attr_str(2, "mlx5_0");
        let t = b.nest_start(19);
        for &i in chunk {
            let e = b.nest_start(20);
            b.attr_u32(3, 1);
            b.attr_u32(21, 0x100 + i);
            b.attr_u32(60, 3);
            b.attr_u32(28, 1000 + i % 64);
            b.attr_u32(22, 0x8000 + i);
            b.attr_u32(23, (i * 7 + r * (i % 50)) & 0xff_ffff);
            b.attr_u32(24, (i * 13 + r * (i % 100)) & 0xff_ffff);
            b.attr(25, &[0]);
            b.attr(26, &[2]);
            b.attr(27, &[3]);
            b.nest_end(e);
        }
        b.nest_end(t);
        // the payload after the 16-byte netlink header
        msgs.push(b.finish()[16..].to_vec());
    }
    msgs
}

/// The RDMA subsystem of the benchmark: each read decodes its dump's messages.
struct Bench {
    n: u32,
    reads: VecDeque<Vec<Vec<u8>>>,
}

impl QpSource for Bench {
    fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        Ok(vec![RdmaDevice {
            index: 1,
            name: "mlx5_0".into(),
            ..RdmaDevice::default()
        }])
    }
    fn qps(&mut self, _dev: u32) -> Result<Vec<RdmaQp>, RdmaError> {
        let mut out = Vec::new();
        for m in self.reads.pop_front().unwrap_or_default() {
            out.extend(nic::rdma::resources::decode_qps(&m).expect("decodes"));
        }
        Ok(out)
    }
    fn cm_ids(&mut self, _dev: u32) -> Result<Vec<RdmaCmId>, RdmaError> {
        Ok((0..self.n / 10)
            .map(|i| RdmaCmId {
                dev_index: 1,
                lqpn: Some(0x100 + i * 10),
                dst: Some(std::net::SocketAddr::from((
                    [10, 0, (i >> 8) as u8, i as u8],
                    4791,
                ))),
                ..RdmaCmId::default()
            })
            .collect())
    }
}

fn main() {
    observer::pipeline::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let intervals: u32 = arg("--intervals")
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let sizes: Vec<u32> = arg("--qps")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let root = std::env::temp_dir().join(format!("ro-bench-host-qps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // 64 processes with a command and a pod's cgroup
    for p in 0..64 {
        let d = root.join(format!("proc/{}", 1000 + p));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("comm"), "all_reduce_perf\n").unwrap();
        std::fs::write(
            d.join("cgroup"),
            format!("0::/kubepods.slice/kubepods-pod1b2c3d4e_0f1a_4b2c_9d3e_4f5a6b7c{p:04x}.slice/cri-containerd-{}.scope\n", "ab".repeat(32)),
        )
        .unwrap();
    }
    let policy = PolicyConfig::profile("nvidia").unwrap();
    for &n in &sizes {
        let out = root.join(format!("out-{n}"));
        let mut col =
            Collector::new(CollectorConfig::new(out, "bench", "live", policy.clone())).unwrap();
        col.quiet_stderr();
        let mut feed = QpFeed::new(
            Box::new(Bench {
                n,
                reads: (0..=intervals).map(|r| dump(n, r)).collect(),
            }),
            Procfs { root: root.clone() },
            1 << 20,
        );
        feed.begin(1);
        feed.read_into(&mut col).unwrap();
        // the collector's own interval in the same run: 1,000 active of 10,000 keys
        let mut syn = Synthetic::new(policy.expected, 10_000, 1);
        let t0 = 1_795_239_299_000_000_000u64;
        syn.step(t0);
        col.on_snapshot(&syn.dp.snapshot("ens1f0np0", t0, None))
            .unwrap();
        syn.qps = 1_000;
        let (mut q_ns, mut c_ns) = (Vec::new(), Vec::new());
        for r in 1..=intervals as u64 {
            let c0 = thread_cpu_ns();
            feed.read_into(&mut col).unwrap();
            q_ns.push(thread_cpu_ns() - c0);
            let t = t0 + r * 1_000_000_000;
            syn.step(t);
            let snap = syn.dp.snapshot("ens1f0np0", t, None);
            let c0 = thread_cpu_ns();
            col.on_snapshot(&snap).unwrap();
            c_ns.push(thread_cpu_ns() - c0);
        }
        let (q, c) = (median(&mut q_ns), median(&mut c_ns));
        println!(
            "host QPs, one interval, {n} QPs: {:.1} ms CPU, {:.0} ns per QP (median of {intervals}); collector interval (1000 active of 10000 keys) {:.1} ms; ratio {:.2}; peak RSS so far {} MiB",
            q as f64 / 1e6,
            q as f64 / n as f64,
            c as f64 / 1e6,
            q as f64 / c as f64,
            peak_rss_kib() / 1024
        );
        drop(col);
    }
    let _ = std::fs::remove_dir_all(&root);
}
