//! `cargo xtask bench-replay [--packets N] [--keep]`: replay throughput against tshark.
//!
//! Generates a capture of N (default 2,000,000) RoCEv2 frames over 64 QP keys (32 connections,
//! RDMA WRITEs of mixed sizes, an ACK per two writes, a CNP per 64 writes, 1 in 50 writes with
//! ECN CE), plus a 10x smaller capture of the same mix and a 128-byte-snaplen copy (what a
//! truncating switch mirror delivers). Times the release `roce-observe replay` (median of 3, with
//! and without ICRC verification), reads each run's peak RSS with wait4(2), runs
//! `tshark -T fields` with the tshark comparison test's fields once on the same file, and prints
//! a table with the ratio. Replay runs as a user runs it: collector on (Parquet, alerts,
//! summary.json into a temporary directory), nvidia profile, JSON summary on stdout.

#[path = "../../observer/tests/support/corpus.rs"]
#[allow(dead_code, clippy::all)]
mod corpus;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

const SIZES: [usize; 8] = [1024, 256, 64, 1024, 128, 512, 64, 4096];

fn generate(path: &Path, packets: u64, snaplen: u32) -> anyhow::Result<u64> {
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    corpus::write_pcap_header(&mut w, corpus::LINKTYPE_ETHERNET, snaplen, true)?;
    let t0: u64 = 1_700_000_000_000_000_000;
    let conns = 32u32;
    let mut psn = vec![0u32; conns as usize];
    let mut n = 0u64;
    let mut i = 0u64;
    // Templates per (connection, size) would be faster; building each frame keeps the
    // generator obviously right, and it takes a few seconds.
    while n < packets {
        let c = (i % conns as u64) as u32;
        let a = [10, 77, 2, (c % 200) as u8 + 1];
        let b = [10, 77, 3, (c % 200) as u8 + 1];
        let p = psn[c as usize];
        let write = corpus::Roce::v4(a, b, 0x100 + c, p)
            .payload(SIZES[(i / conns as u64 % 8) as usize])
            .mark(26, if i % 50 == 49 { 3 } else { 2 });
        let mut frames = vec![write.frame()];
        if p % 2 == 1 {
            frames.push(corpus::Roce::v4(b, a, 0x200 + c, p).ack(0x1f).frame());
        }
        if p % 64 == 63 {
            frames.push(corpus::Roce::v4(b, a, 0x200 + c, 0).cnp().frame());
        }
        for f in frames {
            if n == packets {
                break;
            }
            corpus::write_pcap_record(&mut w, snaplen, true, t0 + n * 100, &f)?;
            n += 1;
        }
        psn[c as usize] = (p + 1) & 0xff_ffff;
        i += 1;
    }
    w.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// One run: wall seconds, CPU seconds (user + system), peak RSS in KiB.
#[derive(Clone, Copy)]
struct Run {
    wall: f64,
    cpu: f64,
    rss_kib: u64,
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Runs a command to completion, measured with wait4(2).
fn timed(cmd: &mut Command) -> anyhow::Result<Run> {
    let start = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let mut status = 0i32;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let secs = start.elapsed().as_secs_f64();
    if rc != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} failed (status {status})");
    }
    Ok(Run {
        wall: secs,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        rss_kib: ru.ru_maxrss as u64,
    })
}

/// Median of wall and of CPU time (each on its own), largest RSS.
fn median(v: &[Run]) -> Run {
    let mid = |mut x: Vec<f64>| {
        x.sort_by(|a, b| a.partial_cmp(b).unwrap());
        x[x.len() / 2]
    };
    Run {
        wall: mid(v.iter().map(|r| r.wall).collect()),
        cpu: mid(v.iter().map(|r| r.cpu).collect()),
        rss_kib: v.iter().map(|r| r.rss_kib).max().unwrap_or(0),
    }
}

/// Fields tshark extracts: the tshark comparison test's set.
use corpus::TSHARK_FIELDS;

/// The generated captures and their sizes.
struct Inputs {
    packets: u64,
    big: PathBuf,
    small: PathBuf,
    cut: PathBuf,
    big_bytes: u64,
    small_bytes: u64,
    cut_bytes: u64,
}

/// The medians measured.
struct Timings {
    big: Run,
    noicrc: Run,
    small: Run,
    cut: Run,
    tshark: Run,
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let mut packets: u64 = 2_000_000;
    let mut keep = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--packets" => packets = it.next().context("--packets N")?.parse()?,
            "--keep" => keep = true,
            other => bail!("unknown option {other} (options: --packets N, --keep)"),
        }
    }
    let dir = std::env::temp_dir().join(format!("roce-bench-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bin = build_binary(&dir)?;
    let inputs = generate_inputs(&dir, packets)?;
    let t = time_all(&bin, &dir, &inputs)?;
    report(&inputs, &t);
    if keep {
        println!("captures kept in {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// A release build of roce-observe, copied into `dir` (the target directory may be shared with
/// other builds).
fn build_binary(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building roce-observe (release)...");
    let st = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "observer",
            "--bin",
            "roce-observe",
        ])
        .status()?;
    if !st.success() {
        bail!("cargo build failed");
    }
    let bin = dir.join("roce-observe");
    std::fs::copy(target.join("release/roce-observe"), &bin)?;
    Ok(bin)
}

fn generate_inputs(dir: &Path, packets: u64) -> anyhow::Result<Inputs> {
    let big = dir.join("bench.pcap");
    let small = dir.join("bench-small.pcap");
    let cut = dir.join("bench-snap128.pcap");
    eprintln!("generating {packets} packets in {}...", dir.display());
    let t = Instant::now();
    let big_bytes = generate(&big, packets, 65535)?;
    let small_bytes = generate(&small, packets / 10, 65535)?;
    let cut_bytes = generate(&cut, packets, 128)?;
    eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());
    // Warm the page cache so replay and tshark both read from memory.
    for f in [&big, &small, &cut] {
        std::io::copy(&mut std::fs::File::open(f)?, &mut std::io::sink())?;
    }
    Ok(Inputs {
        packets,
        big,
        small,
        cut,
        big_bytes,
        small_bytes,
        cut_bytes,
    })
}

/// Replay as a user runs it (the collector on: Parquet flow logs, alerts, summary.json into a
/// fresh directory per run, the summary as JSON on stdout), median of 3; tshark once.
fn time_all(bin: &Path, dir: &Path, i: &Inputs) -> anyhow::Result<Timings> {
    let out_dir = dir.join("out");
    let replay = |file: &Path, extra: &[&str]| -> anyhow::Result<Run> {
        let mut runs = Vec::new();
        for _ in 0..3 {
            let _ = std::fs::remove_dir_all(&out_dir);
            let mut c = Command::new(bin);
            c.args(["replay", "--profile", "nvidia", "--json", "--out"])
                .arg(&out_dir)
                .args(extra)
                .arg(file);
            runs.push(timed(&mut c)?);
        }
        Ok(median(&runs))
    };
    eprintln!("timing replay...");
    let big = replay(&i.big, &[])?;
    let noicrc = replay(&i.big, &["--no-icrc"])?;
    let small = replay(&i.small, &[])?;
    let cut = replay(&i.cut, &[])?;
    eprintln!("timing tshark once (slow)...");
    let mut tc = Command::new("tshark");
    tc.arg("-r").arg(&i.big).args(["-T", "fields"]);
    for f in TSHARK_FIELDS {
        tc.args(["-e", f]);
    }
    let tshark = timed(&mut tc)?;
    Ok(Timings {
        big,
        noicrc,
        small,
        cut,
        tshark,
    })
}

fn report(i: &Inputs, t: &Timings) {
    let packets = i.packets;
    let mpps = |secs: f64, n: u64| n as f64 / secs / 1e6;
    // SAFETY: plain libc query.
    let load = {
        let mut l = [0f64; 3];
        unsafe { libc::getloadavg(l.as_mut_ptr(), 3) };
        l[0]
    };
    println!();
    println!(
        "replay benchmark: {packets} packets, 64 QP keys, release build, median of 3 runs \
         (tshark: 1 run); {} cores, load average {load:.1} at the end",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("Mpps(wall) = packets / elapsed time; Mpps(cpu) = packets / (user + system CPU time)");
    println!(
        "| input | packets | file MB | wall s | cpu s | Mpps (wall) | Mpps (cpu) | peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    let row = |name: &str, n: u64, bytes: u64, r: &Run| {
        println!(
            "| {name} | {n} | {:.0} | {:.3} | {:.3} | {:.2} | {:.2} | {:.1} |",
            bytes as f64 / 1e6,
            r.wall,
            r.cpu,
            mpps(r.wall, n),
            mpps(r.cpu, n),
            r.rss_kib as f64 / 1024.0
        );
    };
    row(
        "replay, full frames, ICRC verified",
        packets,
        i.big_bytes,
        &t.big,
    );
    row(
        "replay, full frames, --no-icrc",
        packets,
        i.big_bytes,
        &t.noicrc,
    );
    row(
        "replay, snaplen 128 (mirror-truncated)",
        packets,
        i.cut_bytes,
        &t.cut,
    );
    row(
        "replay, 1/10 of the packets",
        packets / 10,
        i.small_bytes,
        &t.small,
    );
    row(
        "tshark -T fields (same fields), once",
        packets,
        i.big_bytes,
        &t.tshark,
    );
    println!();
    println!(
        "replay vs tshark on the same file: {:.0}x faster by wall time, {:.0}x by CPU time",
        t.tshark.wall / t.big.wall,
        t.tshark.cpu / t.big.cpu,
    );
    println!(
        "memory: peak RSS {:.1} MB for {} packets vs {:.1} MB for {} packets (same 64 QPs)",
        t.big.rss_kib as f64 / 1024.0,
        packets,
        t.small.rss_kib as f64 / 1024.0,
        packets / 10
    );
}
