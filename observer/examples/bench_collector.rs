//! Collector benchmark (`cargo xtask bench-collector`): CPU time per interval with 10k and 100k
//! active QPs (delta + alert rules + Parquet encode + write of one interval), against a baseline
//! measured in the same run (copying the snapshot: the least any reader of the values costs),
//! and Parquet bytes per QP row. Prints a table of medians.
//!
//! Usage: bench_collector [--intervals N] [--sizes 10000,100000] [--many 1000000:100000] [--live-only]
//! (`--many TRACKED:ACTIVE`: the realistic case of many tracked keys of which a tenth are active
//! each interval, with snapshots that say which entries changed, as the kernel and replay
//! sources' do, and without, where the collector compares every key; `--many 0:0` leaves it
//! out; as root also on a real kernel table of TRACKED keys, with and without the snapshot
//! given back for the next read; `--live-only`, root: only the live cases with the snapshot given
//! back, one per size and the many-keys one). Every case prints its
//! peak RSS (VmHWM, reset before the case through /proc/self/clear_refs).
//! (`BENCH_NO_JOURNAL=1`: without the crash journal, to measure what it costs). The largest
//! size also runs with the Prometheus sink on (`--metrics`), beside the same case without it,
//! with the CPU time of encoding one scrape.

use std::time::Instant;

use contract::error::chain;

use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::{Changed, Snapshot};
use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};
use observer_common::qp::opcode_bucket;

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

fn key(i: u32) -> QpKey {
    let mut src = [0u8; 16];
    src[10] = 0xff;
    src[11] = 0xff;
    src[12..].copy_from_slice(&[10, 77, (i >> 16) as u8, (i >> 8) as u8]);
    let mut dst = src;
    dst[15] = i as u8;
    QpKey {
        src_ip: src,
        dst_ip: dst,
        dest_qp: 0x100 + i,
        dir: dir::INGRESS,
        _pad: [0; 3],
    }
}

/// Advances `active` of the keys by a realistic interval of traffic (data with one DSCP / ECN
/// / PCP bucket, a few CE and ACKs, one opcode mix).
/// Returns the positions advanced.
fn advance(s: &mut Snapshot, active: usize, round: u64, t_ns: u64) -> Vec<u32> {
    let n = s.qps.len();
    let mut moved = Vec::with_capacity(active);
    for j in 0..active {
        let idx = (j + (round as usize * active)) % n;
        moved.push(idx as u32);
        let v = &mut s.qps[idx].1;
        // packets per interval vary per key and interval (1..4096), as in real traffic
        let mut x = (idx as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ round.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 31;
        let p = 1 + (x % 4096);
        if x & 0xff == 0 {
            v.ecn_hist[class::DATA][3] += 1; // occasional CE mark
        }
        v.pkts += p + 2;
        v.bytes_l2 += p * 4158 + 2 * 62;
        v.bytes_ip += p * 4140 + 2 * 44;
        v.bytes_udp += p * 4112 + 2 * 24;
        v.opcode_hist[opcode_bucket(0x07)] += p as u32 - 1;
        v.opcode_hist[opcode_bucket(0x08)] += 1;
        v.opcode_hist[opcode_bucket(0x11)] += 2;
        v.dscp_hist[class::DATA][26] += p as u32;
        v.ecn_hist[class::DATA][2] += p as u32 - 1;
        v.ecn_hist[class::DATA][3] += 1;
        v.pcp_hist[class::DATA][3] += p as u32;
        v.dscp_hist[class::ACK][26] += 2;
        v.ecn_hist[class::ACK][0] += 2;
        v.pcp_hist[class::ACK][3] += 2;
        v.max_udp_payload = 4112;
        v.psn_max_p1 = ((v.psn_max_p1 as u64 + p) & 0xff_ffff) as u32 + 1;
        if v.first_ns == 0 {
            v.first_ns = t_ns;
        }
        v.last_ns = t_ns;
    }
    s.time_ns = t_ns;
    s.iface_stats[0].frames += active as u64 * 100;
    s.iface_stats[0].roce += active as u64 * 100;
    moved
}

/// What a source that tracks changes says of the snapshot after [`advance`] moved `moved`
/// (`None`: the snapshot says nothing, the collector compares every key).
fn say_changed(s: &mut Snapshot, moved: Vec<u32>, on: bool) {
    s.changed = on.then(|| Changed {
        base: s.changed.as_ref().map(|c| c.id),
        id: observer::sources::snapshot::next_snapshot_id(),
        positions: moved,
        gone: Vec::new(),
        blocks: Vec::new(),
        sparse: None,
    });
}

/// Resets the process's peak RSS (VmHWM) to its current RSS.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak RSS (VmHWM) in KiB since the last [`reset_peak_rss`].
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

struct Row {
    label: String,
    /// Peak RSS during the case (MiB), and what it was when the case began.
    peak_mib: f64,
    start_mib: f64,
    /// Median CPU ms of encoding one scrape (the Prometheus sink on), else 0.
    scrape_ms: f64,
    series: usize,
    qps: usize,
    active: usize,
    cpu_ms: f64,
    base_ms: f64,
    wall_ms: f64,
    bytes_per_row: f64,
    /// Median CPU ms of one search for eviction candidates (no key idle: every key looked at).
    idle_ms: f64,
}

fn run(qps: usize, active: usize, intervals: usize, metrics: bool, changed: bool) -> Row {
    reset_peak_rss();
    let start_kib = peak_rss_kib();
    let out = std::env::temp_dir().join(format!(
        "ro-bench-collector-{}-{qps}-{active}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    let policy = PolicyConfig::profile("nvidia").expect("profile");
    let mut cfg = CollectorConfig::new(out.clone(), "bench", "live", policy);
    cfg.rotate_secs = 3600;
    cfg.rotate_bytes = 1 << 30;
    cfg.journal = std::env::var_os("BENCH_NO_JOURNAL").is_none();
    let mut col = Collector::new(cfg).expect("collector");
    let expo = metrics.then(|| {
        use observer::sinks::prometheus::{ExporterConfig, MetricsSink};
        let sink = MetricsSink::new(ExporterConfig {
            top_pairs: 20,
            expected_dscp: [26, 26, 48],
            max_qps: qps as u64,
        });
        let e = sink.exposition();
        col.add_sink(Box::new(sink));
        e
    });
    let (mut scrape, mut series) = (Vec::new(), 0usize);
    let mut snap = Snapshot {
        iface: "bench0".into(),
        time_ns: 0,
        link_speed_bps: Some(400_000_000_000),
        qps: (0..qps as u32).map(|i| (key(i), QpValue::ZERO)).collect(),
        iface_stats: [IfaceStats::default(); dir::COUNT],
        macs: Vec::new(),
        changed: None,
    };
    let t0 = 1_795_239_299_000_000_000u64;
    col.begin("bench0", t0, Some(400_000_000_000));
    // first interval: every key appears (new keys), not measured
    let moved = advance(&mut snap, qps, 0, t0 + 1_000_000_000);
    say_changed(&mut snap, moved, changed);
    col.on_snapshot(&snap).expect("snapshot");
    let (mut cpu, mut base, mut wall) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=intervals as u64 {
        let moved = advance(&mut snap, active, r, t0 + (r + 1) * 1_000_000_000);
        say_changed(&mut snap, moved, changed);
        // baseline: one copy of the snapshot's values
        let c0 = thread_cpu_ns();
        let copy = std::hint::black_box(snap.qps.clone());
        base.push(thread_cpu_ns() - c0);
        drop(copy);
        let w0 = Instant::now();
        let c0 = thread_cpu_ns();
        col.on_snapshot(&snap).expect("snapshot");
        cpu.push(thread_cpu_ns() - c0);
        wall.push(w0.elapsed().as_nanos() as u64);
        if let Some(e) = &expo {
            let c0 = thread_cpu_ns();
            let body = std::hint::black_box(e.render());
            scrape.push(thread_cpu_ns() - c0);
            series = body.lines().filter(|l| !l.starts_with('#')).count();
        }
    }
    // The search for eviction candidates the live loop makes every interval once its table is
    // 90 % full (a tenth of the keys at most; none idle for 60 s here, so every key is looked at).
    let mut idle = Vec::new();
    for _ in 0..5 {
        let c0 = thread_cpu_ns();
        let n = col
            .idle_keys(
                "bench0",
                t0 + (intervals as u64 + 1) * 1_000_000_000,
                60_000_000_000,
                qps / 10,
            )
            .len();
        idle.push(thread_cpu_ns() - c0);
        assert_eq!(n, 0, "no key is idle for 60 s");
    }
    // As the live command finishes (it reads the output statistics only).
    let summary = col.finish_without_qps().expect("finish");
    let peak_kib = peak_rss_kib();
    let rows = summary["output"]["flows"]["rows"].as_u64().unwrap_or(0);
    let bytes = summary["output"]["flows"]["bytes"].as_u64().unwrap_or(0);
    let _ = std::fs::remove_dir_all(&out);
    let scrape_ms = if scrape.is_empty() {
        0.0
    } else {
        median(&mut scrape) as f64 / 1e6
    };
    Row {
        label: match (active == qps, metrics) {
            (true, false) => format!("{}k active", qps / 1000),
            (true, true) => format!("{}k active, --metrics", qps / 1000),
            _ if changed => format!(
                "{}k tracked, {}k active, changed",
                qps / 1000,
                active / 1000
            ),
            _ => format!("{}k tracked, {}k active", qps / 1000, active / 1000),
        },
        peak_mib: peak_kib as f64 / 1024.0,
        start_mib: start_kib as f64 / 1024.0,
        scrape_ms,
        series,
        qps,
        active,
        cpu_ms: median(&mut cpu) as f64 / 1e6,
        base_ms: median(&mut base) as f64 / 1e6,
        wall_ms: median(&mut wall) as f64 / 1e6,
        idle_ms: median(&mut idle) as f64 / 1e6,
        bytes_per_row: if rows > 0 {
            bytes as f64 / rows as f64
        } else {
            0.0
        },
    }
}

/// Median CPU time of one full read of a kernel per-QP map holding `n` keys (the mapped table
/// plus the per-CPU interface and MAC maps), filled through BPF_PROG_TEST_RUN. Needs root.
fn kernel_read(n: u32, reads: usize) -> Result<(f64, f64), String> {
    use observer::sources::kernel::ProgTester;
    use observer::sources::synthetic::Roce;
    let policy = PolicyConfig::profile("nvidia")
        .map_err(|e| chain(&e))?
        .expected;
    let mut t = ProgTester::load(n + 1024, &policy).map_err(|e| chain(&e))?;
    for i in 0..n {
        let f = Roce::data(
            [10, 77, (i >> 16) as u8, (i >> 8) as u8],
            [10, 78, 0, i as u8],
            0x100 + i,
            0,
        )
        .frame();
        t.run_tc(&f, false).map_err(|e| chain(&e))?;
    }
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    for _ in 0..reads {
        let w = Instant::now();
        let c0 = thread_cpu_ns();
        let s = t.snapshot("bench0", 0).map_err(|e| chain(&e))?;
        cpu.push(thread_cpu_ns() - c0);
        wall.push(w.elapsed().as_nanos() as u64);
        if s.qps.len() != n as usize {
            return Err(format!("read {} keys, expected {n}", s.qps.len()));
        }
    }
    Ok((
        median(&mut cpu) as f64 / 1e6,
        median(&mut wall) as f64 / 1e6,
    ))
}

/// The whole live interval on a real kernel table of `tracked` keys: each interval `active` of
/// them (the next window, round robin) receive their next data packet (next PSN, so no key
/// alerts) through the tc ingress program (BPF_PROG_TEST_RUN, not timed; an XDP test run waits
/// for two RCU grace periods to switch the XDP dispatcher), then the timed part drains the
/// kernel's events into the collector, reads the mapped table and the per-CPU maps
/// (`snapshot`) and runs `Collector::on_snapshot` (deltas, alert rules, Parquet encode and
/// write), as the live loop does. `recycle`: the snapshot is given back after use, as the live
/// loop does, so the next read expands only the keys whose packets moved; without it every key
/// is expanded at every read (as before 2026-11-24). Needs root. Median CPU ms per interval:
/// (all of it, the read alone).
fn live_interval(
    tracked: u32,
    active: u32,
    intervals: usize,
    recycle: bool,
) -> Result<(f64, f64), String> {
    use observer::sources::kernel::{ProgTester, prog};
    use observer::sources::synthetic::Roce;
    let policy = PolicyConfig::profile("nvidia").map_err(|e| chain(&e))?;
    let mut t = ProgTester::load(tracked + 1024, &policy.expected).map_err(|e| chain(&e))?;
    let frame = |i: u32, psn: u32| {
        let mut r = Roce::data(
            [10, 77, (i >> 16) as u8, (i >> 8) as u8],
            [10, 78, 0, i as u8],
            0x100 + i,
            psn,
        );
        r.payload = 256;
        r.frame()
    };
    let out = std::env::temp_dir().join(format!(
        "ro-bench-collector-{}-live-{tracked}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    let mut cfg = CollectorConfig::new(out.clone(), "bench", "live", policy);
    cfg.rotate_secs = 3600;
    cfg.rotate_bytes = 1 << 30;
    cfg.journal = std::env::var_os("BENCH_NO_JOURNAL").is_none();
    let mut col = Collector::new(cfg).map_err(|e| chain(&e))?;
    let t0 = 1_795_239_299_000_000_000u64;
    col.begin("bench0", t0, Some(400_000_000_000));
    let (mut cpu, mut read, mut rows, mut events) = (Vec::new(), Vec::new(), 0usize, Vec::new());
    let mut psn = vec![0u32; tracked as usize];
    let mut next = 0u32;
    for r in 0..=intervals as u32 {
        // the first interval gives every key its first packet (not measured)
        let n = if r == 0 { tracked } else { active };
        for _ in 0..n {
            let i = next;
            next = (next + 1) % tracked;
            psn[i as usize] += 1;
            t.run(prog::TC_INGRESS, &frame(i, psn[i as usize]), 1)
                .map_err(|e| chain(&e))?;
        }
        let c0 = thread_cpu_ns();
        events.clear();
        t.drain_events(&mut events);
        col.on_events("bench0", &events);
        let s = t
            .snapshot("bench0", t0 + (r as u64 + 1) * 1_000_000_000)
            .map_err(|e| chain(&e))?;
        let c1 = thread_cpu_ns();
        col.on_snapshot(&s).map_err(|e| chain(&e))?;
        rows = s.qps.len();
        if recycle {
            t.recycle(s);
        } else {
            drop(s);
        }
        let c = thread_cpu_ns() - c0;
        if r > 0 {
            cpu.push(c);
            read.push(c1 - c0);
        }
    }
    col.finish().map_err(|e| chain(&e))?;
    let _ = std::fs::remove_dir_all(&out);
    if rows != tracked as usize {
        return Err(format!("read {rows} keys, expected {tracked}"));
    }
    Ok((
        median(&mut cpu) as f64 / 1e6,
        median(&mut read) as f64 / 1e6,
    ))
}

fn main() {
    if std::env::var_os("BENCH_NO_TUNE").is_none() {
        observer::pipeline::tune_allocator();
    }
    let args: Vec<String> = std::env::args().collect();
    let mut intervals = 7usize;
    let mut sizes = vec![10_000usize, 100_000];
    let mut many = (1_000_000usize, 100_000usize);
    let mut live_only = false;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--intervals" => {
                intervals = args
                    .get(i + 1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(intervals);
                i += 1;
            }
            "--sizes" => {
                sizes = args
                    .get(i + 1)
                    .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
                    .unwrap_or(sizes);
                i += 1;
            }
            "--many" => {
                many = args
                    .get(i + 1)
                    .and_then(|s| s.split_once(':'))
                    .and_then(|(t, a)| Some((t.parse().ok()?, a.parse().ok()?)))
                    .unwrap_or(many);
                i += 1;
            }
            "--live-only" => live_only = true,
            other => {
                eprintln!(
                    "unknown argument {other} (use --intervals N, --sizes A,B, --many TRACKED:ACTIVE, --live-only)"
                );
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let mut rows = Vec::new();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if live_only && !root {
        eprintln!("--live-only measures the live cases on a kernel table: needs root");
        std::process::exit(2);
    }
    for &n in sizes.iter().filter(|_| !live_only) {
        rows.push(run(n, n, intervals, false, false));
    }
    if let Some(&n) = sizes.iter().max().filter(|_| !live_only) {
        rows.push(run(n, n, intervals, true, false));
        rows.push(run(n, n / 100, intervals, false, false));
    }
    if many.0 > 0 && !live_only {
        rows.push(run(many.0, many.1.min(many.0), intervals, false, false));
        rows.push(run(many.0, many.1.min(many.0), intervals, false, true));
    }
    println!(
        "collector: one interval = read deltas of every tracked key + alert rules + Parquet encode (zstd) + write"
    );
    println!(
        "medians of {intervals} intervals; baseline = one copy of the snapshot's values (same run); % core at --interval 1s"
    );
    println!(
        "{:<36} {:>9} {:>9} {:>13} {:>12} {:>10} {:>9} {:>14} {:>13} {:>11}",
        "case",
        "tracked",
        "rows",
        "cpu ms/intvl",
        "baseline ms",
        "ratio",
        "% core",
        "parquet B/row",
        "peak RSS MiB",
        "KiB / key"
    );
    for r in &rows {
        println!(
            "{:<36} {:>9} {:>9} {:>13.1} {:>12.1} {:>9.1}x {:>8.1}% {:>14.1} {:>13.0} {:>11.2}",
            r.label,
            r.qps,
            r.active,
            r.cpu_ms,
            r.base_ms,
            if r.base_ms > 0.0 {
                r.cpu_ms / r.base_ms
            } else {
                0.0
            },
            r.cpu_ms / 10.0,
            r.bytes_per_row,
            r.peak_mib,
            (r.peak_mib - r.start_mib) * 1024.0 / r.qps as f64
        );
        let _ = r.wall_ms;
    }
    for r in rows.iter().filter(|r| r.qps != r.active) {
        println!(
            "{}: one search for eviction candidates (every interval once the table is 90 % full) {:.2} ms CPU (median of 5; every key looked at)",
            r.label, r.idle_ms
        );
    }
    for r in rows.iter().filter(|r| r.series > 0) {
        println!(
            "{}: one scrape encodes {} series in {:.2} ms CPU (median; O(series), not O(QPs))",
            r.label, r.series, r.scrape_ms
        );
    }
    // the source's side: reading the real kernel map (root only)
    if root {
        println!();
        println!(
            "kernel per-QP table read (memory-mapped, plus the IFACE and MACS per-CPU maps), median of 5 reads"
        );
        println!(
            "{:<26} {:>13} {:>12} {:>9}",
            "keys in map", "cpu ms/read", "wall ms", "% core"
        );
        for &n in sizes.iter().filter(|_| !live_only) {
            match kernel_read(n as u32, 5) {
                Ok((c, w)) => println!("{:<26} {:>13.1} {:>12.1} {:>8.1}%", n, c, w, c / 10.0),
                Err(e) => println!("{n:<26} unavailable: {e}"),
            }
        }
        println!();
        println!(
            "live interval on the kernel table: the active keys get their next data packet through tc ingress (untimed), then events + read + delta + rules + Parquet + write (timed), median of {intervals}; the snapshot given back after use (as the live loop does) or not (every key expanded at every read)"
        );
        println!(
            "{:<30} {:>9} {:>9} {:>13} {:>12} {:>9}",
            "case", "tracked", "active", "cpu ms/intvl", "of it read", "% core"
        );
        let mut cases: Vec<(u32, u32, bool)> =
            sizes.iter().map(|&n| (n as u32, n as u32, true)).collect();
        if many.0 > 0 {
            let (tr, ac) = (many.0 as u32, many.1.min(many.0) as u32);
            if !live_only {
                cases.push((tr, ac, false));
            }
            cases.push((tr, ac, true));
        }
        for (tr, ac, recycle) in cases {
            let label = format!(
                "{}k tracked, {}k active{}",
                tr / 1000,
                ac / 1000,
                if recycle { "" } else { ", no reuse" }
            );
            match live_interval(tr, ac, intervals, recycle) {
                Ok((c, rd)) => println!(
                    "{:<30} {:>9} {:>9} {:>13.1} {:>12.1} {:>8.1}%",
                    label,
                    tr,
                    ac,
                    c,
                    rd,
                    c / 10.0
                ),
                Err(e) => println!("{label:<30} unavailable: {e}"),
            }
        }
    } else {
        println!("(kernel map read not measured: needs root)");
    }
}
