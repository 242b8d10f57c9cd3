//! `cargo xtask bench-ebpf`: ns per packet of the kernel datapath under BPF_PROG_TEST_RUN.
//!
//! Per case: a fresh load of the object (fresh maps), one warm-up run (which inserts the QP key
//! and emits its first-occurrence events), then `runs` test runs of `repeat` packets each; the
//! kernel reports the average ns per packet of each run and the table shows the median. The
//! baseline is the object's `xdp_empty` (returns XDP_PASS, nothing else), or `tc_empty` for the
//! tc rows (the tc test run builds an skb and costs more), on the same frame in the same load,
//! so the test-run harness cost (and the frame copy) is in both.
//!
//! The same frame is repeated, so after the warm-up every data packet of a case takes the
//! retransmission branch of the PSN analysis (d = 0: no compare-and-swap); a packet with a new
//! PSN adds one CAS on an uncontended cache line. The thread is pinned to one CPU, as an RX
//! queue's packets are processed on one CPU: that CPU inserts the key and owns its value, so
//! every packet takes the plain-instruction path (see `observer_common::qp_table::QpSlot`).
//!
//! The many-keys case (`--keys N`, default 100,000; `--passes N`, default 3): N keys (QP numbers)
//! hit in random order, one test run per packet, beside one key and the empty program measured
//! the same way; then the maps' kernel memory (memlock in /proc/self/fdinfo) per key, and the
//! time of one dependent memory load over as much memory as the table takes (a userspace
//! pointer chase): the floor of a cache-cold lookup on this machine.
//!
//! Every case but "(no ticker)" runs the packet clock ticker thread as `LiveIface` does (the
//! per-QP times then come from the `CLOCK` map); "(no ticker)" shows the coarse clock fallback.

use anyhow::{Context, Result, bail};
use observer::sources::kernel::{ProgTester, prog};
use observer_common::frames::{self, Bth, Icrc, Tag};
use observer_common::maps::Policy;

struct Case {
    name: &'static str,
    prog: &'static str,
    frame: Vec<u8>,
    /// Runs the packet clock ticker as `LiveIface` does (else the programs fall back to the
    /// coarse clock helper, as in the tests).
    clock: bool,
}

/// A RoCEv2 frame from 10.77.0.1 to 10.77.0.2 with a C-tag (VLAN 100), UDP 49152 -> 4791, BTH to
/// QP 0x11 with AckReq, `extra` bytes of 0x5a after the BTH (and AETH) and no ICRC computed
/// (the kernel does not check it).
fn roce(pcp: u8, opcode: u8, psn: u32, aeth: Option<u32>, extra: usize, dscp_ecn: u8) -> Vec<u8> {
    let mut r = frames::Roce::v4([10, 77, 0, 1], [10, 77, 0, 2])
        .tag(Tag::dot1q(pcp, 100))
        .mark(dscp_ecn >> 2, dscp_ecn & 3)
        .bth(Bth {
            ack_req: true,
            ..Bth::new(opcode, 0x11, psn)
        })
        .payload_pattern(extra, 0x5a, 0)
        .icrc(Icrc::Absent);
    if let Some(a) = aeth {
        r = r.ext(&a.to_be_bytes());
    }
    r.build()
}

/// A tagged RoCEv2 RC SEND data frame of exactly `len` bytes.
fn roce_data(len: usize) -> Vec<u8> {
    let hdr = 14 + 4 + 20 + 8 + 12;
    roce(3, 0x04, 7, None, len - hdr, 26 << 2 | 2)
}

fn cases() -> Vec<Case> {
    let ack = roce(3, 0x11, 7, Some(5), 4, 26 << 2);
    let cnp = roce(6, 0x81, 0, None, 20, 48 << 2 | 1);
    // PFC XOFF on priority 3 (to MAC_B rather than the MAC control address).
    let mut pfc = frames::MacControl::pfc(frames::MAC_A, 0x08, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
    pfc.eth.dst = frames::MAC_B;
    let pfc = pfc.build();
    let udp = frames::Roce::v4([10, 77, 0, 1], [10, 77, 0, 2])
        .ports(49152, 53)
        .no_bth()
        .payload_bytes(&[0u8; 100])
        .icrc(Icrc::Absent)
        .build();
    // ERSPAN II: GRE with sequence 7, protocol 0x88be, 8-byte ERSPAN header, inner frame.
    let inner = roce_data(1100 - (14 + 20 + 8 + 8));
    let erspan = frames::Mirror::erspan2(7, frames::erspan2_header(0, 1, 0))
        .outer(frames::MAC_A, frames::MAC_B, [10, 77, 0, 1], [10, 77, 0, 2])
        .wrap(&inner);
    vec![
        Case {
            name: "RoCE data 1100 B",
            prog: prog::XDP,
            frame: roce_data(1100),
            clock: true,
        },
        Case {
            name: "RoCE data 4200 B",
            prog: prog::XDP,
            frame: roce_data(4200),
            clock: true,
        },
        Case {
            name: "RoCE ACK",
            prog: prog::XDP,
            frame: ack,
            clock: true,
        },
        Case {
            name: "RoCE CNP",
            prog: prog::XDP,
            frame: cnp,
            clock: true,
        },
        Case {
            name: "PFC frame",
            prog: prog::XDP,
            frame: pfc,
            clock: true,
        },
        Case {
            name: "non-RoCE UDP",
            prog: prog::XDP,
            frame: udp,
            clock: true,
        },
        Case {
            name: "ERSPAN II RoCE 1100 B",
            prog: prog::XDP,
            frame: erspan,
            clock: true,
        },
        Case {
            name: "RoCE data 1100 B (no ticker)",
            prog: prog::XDP,
            frame: roce_data(1100),
            clock: false,
        },
        Case {
            name: "RoCE data 1100 B (tc egress)",
            prog: prog::TC_EGRESS,
            frame: roce_data(1100),
            clock: true,
        },
    ]
}

fn median(mut v: Vec<u128>) -> u128 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn measure(t: &mut ProgTester, p: &str, frame: &[u8], runs: usize, repeat: u32) -> Result<u128> {
    // Warm-up: inserts the key, emits the first-occurrence events, warms the caches.
    t.run(p, frame, 1000)
        .with_context(|| format!("{p} warm-up"))?;
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (_, d) = t
            .run(p, frame, repeat)
            .with_context(|| format!("{p} run"))?;
        v.push(d.as_nanos());
    }
    Ok(median(v))
}

/// One CPU runs every packet, as one RX queue's packets are processed on its CPU: the per-QP
/// value's owner (the inserting CPU) is the CPU of every later packet.
fn pin_to_this_cpu() -> Result<()> {
    // SAFETY: sched_getcpu has no preconditions; sched_setaffinity reads the set we own and
    // affects this thread only.
    let cpu_no = unsafe { libc::sched_getcpu() };
    if cpu_no >= 0 {
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu_no as usize, &mut set);
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                bail!("sched_setaffinity: {}", std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The kernel release and the CPU model, for the report's header.
fn machine() -> (String, String) {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    (kernel, cpu)
}

/// Sum of `memlock` over the BPF maps this process holds (bytes), from /proc/self/fdinfo: the
/// kernel memory the maps take (per-CPU maps counted for every CPU).
fn maps_memlock() -> u64 {
    let mut sum = 0u64;
    let Ok(dir) = std::fs::read_dir("/proc/self/fdinfo") else {
        return 0;
    };
    for e in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if !info.contains("map_type:") {
            continue;
        }
        sum += info
            .lines()
            .find_map(|l| l.strip_prefix("memlock:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    sum
}

/// Kernel memory of the maps at two table sizes: (bytes at `a` keys, bytes per key between `a`
/// and `b`).
fn memory_per_key(a: u32, b: u32) -> Result<(u64, f64)> {
    let base = maps_memlock();
    let ta = ProgTester::load(a, &Policy::NONE)?;
    let ma = maps_memlock() - base;
    drop(ta);
    let tb = ProgTester::load(b, &Policy::NONE)?;
    let mb = maps_memlock() - base;
    drop(tb);
    Ok((ma, (mb as f64 - ma as f64) / (b - a) as f64))
}

/// A tagged 1100-byte RoCE data frame to QP `qp` (the key varies by its QP number).
fn data_to_qp(template: &[u8], qp: u32) -> Vec<u8> {
    // BTH after Ethernet (14), the C-tag (4), IPv4 (20) and UDP (8); its destination QP is
    // bytes 5..8.
    let mut f = template.to_vec();
    f[46 + 5..46 + 8].copy_from_slice(&qp.to_be_bytes()[1..]);
    f
}

/// ns per packet, one BPF_PROG_TEST_RUN per packet (repeat 1), as the kernel times it: the
/// median and the mean over every packet of `passes` passes over `frames` in a random order
/// (the same order for every program), after one warm-up pass in order (which inserts the keys).
fn per_packet(
    t: &mut ProgTester,
    p: &str,
    frames: &[Vec<u8>],
    passes: usize,
) -> Result<(u128, f64)> {
    for f in frames {
        t.run(p, f, 1).with_context(|| format!("{p} warm-up"))?;
    }
    let mut order: Vec<usize> = (0..frames.len()).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut v = Vec::with_capacity(frames.len() * passes);
    for _ in 0..passes {
        // Fisher-Yates with xorshift: a new random order each pass.
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            let (_, d) = t
                .run(p, &frames[i], 1)
                .with_context(|| format!("{p} run"))?;
            v.push(d.as_nanos());
        }
    }
    let mean = v.iter().sum::<u128>() as f64 / v.len().max(1) as f64;
    Ok((median(v), mean))
}

/// Nanoseconds of one memory load that depends on the one before, over `bytes` of memory in a
/// random order (a pointer chase through a random cycle of 64-byte lines, in userspace): the
/// least a lookup whose line is not in the caches waits, on this machine. Median of 3 chases of
/// 2,000,000 loads.
fn dependent_load_ns(bytes: usize) -> f64 {
    const LINE: usize = 8; // u64s per 64-byte line
    let lines = (bytes / 64).max(2);
    let mut next = vec![0u64; lines * LINE];
    // Sattolo's algorithm: a random permutation that is one cycle through every line
    let mut perm: Vec<usize> = (0..lines).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        perm.swap(i, (x % i as u64) as usize);
    }
    for i in 0..lines {
        next[perm[i] * LINE] = (perm[(i + 1) % lines] * LINE) as u64;
    }
    let mut runs = Vec::new();
    let mut p = 0usize;
    for _ in 0..3 {
        let steps = 2_000_000u32;
        let t = std::time::Instant::now();
        for _ in 0..steps {
            p = next[p] as usize;
        }
        runs.push(t.elapsed().as_nanos() as f64 / steps as f64);
    }
    std::hint::black_box(p);
    runs.sort_by(f64::total_cmp);
    runs[1]
}

/// The kernel's random-keys case above the empty program, in dependent memory loads over a
/// table of that size (the floor measured beside it): the regression guard.
const MAX_LOADS: f64 = 2.3;

/// The many-keys case: `keys` keys hit in random order (cache-cold: the table is far larger than
/// the caches), beside one key and the empty program measured the same way (one test run per
/// packet), and the kernel memory per key of the maps.
fn many_keys(keys: u32, passes: usize) -> Result<()> {
    let template = roce_data(1100);
    let frames: Vec<Vec<u8>> = (0..keys)
        .map(|i| data_to_qp(&template, 0x1000 + i))
        .collect();
    let one = vec![template.clone()];
    let mut t = ProgTester::load(keys.max(65536), &Policy::NONE)?;
    t.start_clock()?;
    let (empty, empty_mean) = per_packet(&mut t, prog::XDP_EMPTY, &frames, passes)?;
    let (one_med, one_mean) = per_packet(&mut t, prog::XDP, &one, passes * keys as usize)?;
    drop(t);
    let mut t = ProgTester::load(keys.max(65536), &Policy::NONE)?;
    t.start_clock()?;
    let (many, many_mean) = per_packet(&mut t, prog::XDP, &frames, passes)?;
    let tracked = t.table_len();
    drop(t);
    println!();
    println!(
        "RoCE data 1100 B, one BPF_PROG_TEST_RUN per packet (repeat 1: the kernel's per-run time \
         includes its clock reads, so compare with the empty program measured the same way); \
         {passes} passes in random order after a warm-up pass; {tracked} keys in the table"
    );
    println!(
        "{:<36} {:>9} {:>9} {:>11} {:>11}",
        "case", "median ns", "mean ns", "empty ns", "med - empty"
    );
    for (name, med, mean) in [
        ("empty program (xdp_empty)", empty, empty_mean),
        ("one key, repeated", one_med, one_mean),
        ("100k-style: keys in random order", many, many_mean),
    ] {
        let name = if name.starts_with("100k") {
            format!("{keys} keys in random order")
        } else {
            name.to_string()
        };
        println!(
            "{:<36} {:>9} {:>9.1} {:>11} {:>11}",
            name,
            med,
            mean,
            empty,
            med as i128 - empty as i128
        );
    }
    let (at_default, per_key) = memory_per_key(65536, 131072)?;
    println!(
        "kernel memory of the maps (memlock): {:.1} MiB at --max-qps 65536; {:.0} bytes ({:.2} KiB) per key \
         (the difference to 131072 keys); 1,000,000 keys: {:.2} GiB",
        at_default as f64 / (1 << 20) as f64,
        per_key,
        per_key / 1024.0,
        per_key * 1e6 / (1u64 << 30) as f64
    );
    let table = (per_key * keys as f64) as usize;
    let load = dependent_load_ns(table);
    let loads = (many as f64 - empty as f64) / load;
    println!(
        "one dependent memory load over {:.0} MB in random order ({keys} keys x {:.0} bytes, the \
         table's kernel memory; userspace pointer chase, median of 3): {:.1} ns; the random \
         case above the empty program is {:.1} such loads (regression guard: at most {MAX_LOADS}, {})",
        table as f64 / 1e6,
        per_key,
        load,
        loads,
        if loads <= MAX_LOADS { "met" } else { "NOT MET" }
    );
    Ok(())
}

pub fn main(args: &[String]) -> Result<()> {
    let mut repeat: u32 = 1_000_000;
    let mut runs: usize = 9;
    let mut only: Option<String> = None;
    let mut keys: u32 = 100_000;
    let mut passes: usize = 3;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--repeat" => repeat = it.next().context("--repeat N")?.parse()?,
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            "--only" => only = Some(it.next().context("--only TEXT")?.clone()),
            "--keys" => keys = it.next().context("--keys N")?.parse()?,
            "--passes" => passes = it.next().context("--passes N")?.parse()?,
            other => bail!(
                "unknown argument {other:?} (--repeat N, --runs N, --only TEXT, --keys N (0: no many-keys case), --passes N)"
            ),
        }
    }
    if runs == 0 || repeat == 0 {
        bail!("--runs and --repeat must be positive");
    }
    pin_to_this_cpu()?;
    let (kernel, cpu) = machine();
    println!(
        "kernel datapath, BPF_PROG_TEST_RUN, median of {runs} runs x {repeat} packets; kernel {}; {cpu}",
        kernel.trim()
    );
    let probe = ProgTester::load(1024, &Policy::NONE)?;
    println!("multi-buffer frame length: {}", probe.xdp_len_path());
    drop(probe);
    println!(
        "{:<30} {:>7} {:>9} {:>11} {:>7} {:>11}",
        "case", "bytes", "ns/pkt", "empty ns", "ratio", "ns - empty"
    );
    for c in cases() {
        if only.as_deref().is_some_and(|o| !c.name.contains(o)) {
            continue;
        }
        // Fresh maps per case.
        let mut t = ProgTester::load(65536, &Policy::NONE)?;
        if c.clock {
            t.start_clock()?;
        }
        let ns = measure(&mut t, c.prog, &c.frame, runs, repeat)?;
        // The baseline of the program's own kind: the tc test run (an skb) costs more.
        let base = if c.prog == prog::XDP {
            prog::XDP_EMPTY
        } else {
            prog::TC_EMPTY
        };
        let empty = measure(&mut t, base, &c.frame, runs, repeat)?;
        let ratio = if empty > 0 {
            ns as f64 / empty as f64
        } else {
            f64::NAN
        };
        println!(
            "{:<30} {:>7} {:>9} {:>11} {:>7.2} {:>11}",
            c.name,
            c.frame.len(),
            ns,
            empty,
            ratio,
            ns as i128 - empty as i128
        );
    }
    if keys > 0
        && passes > 0
        && only
            .as_deref()
            .is_none_or(|o| "keys in random order".contains(o))
    {
        many_keys(keys, passes)?;
    }
    Ok(())
}
