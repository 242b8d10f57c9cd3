//! `cargo xtask bench-replay [--packets N] [--keys 20000,200000] [--many-packets N]
//! [--only friendly|many|files] [--keep]`: replay throughput against tshark (`--generate FILE KEYS`:
//! only write one many-keys capture of `--many-packets`, given before it, for profiling).
//!
//! Two sets of cases. "many" (the realistic one, a GPU cluster's mirror port): for each of
//! `--keys` a capture of `--many-packets` (default 2,000,000) frames over that many QP keys
//! (keys / 2 RC connections, each a requester's QP and its responder's: RDMA WRITE ONLY of 64 B,
//! an ACK per two writes, 3 % of writes CE-marked each answered by a CNP, 1 % of writes answered
//! by a PSN-sequence NAK and a go-back-N of 3 PSNs; a fifth of the connections VLAN-tagged;
//! connections picked at random, 10 s of capture time so that ten 1 s intervals close). It times
//! the user's default command `roce-observe replay --out DIR FILE` (collector on: Parquet,
//! alerts, summary.json; the text summary on stdout), the same with `--no-out` and with
//! `--inline-outputs` (the outputs on the packets' thread), the default
//! command with `--interval 20ms` (500 intervals: peak RSS must not grow with them), and `tshark
//! -T fields` with 8 fields (addresses, QP, PSN, opcode, DSCP, ECN, VLAN priority) on the same file.
//!
//! "friendly" (the earlier benchmark):
//! Generates a capture of N (default 2,000,000) RoCEv2 frames over 64 QP keys (32 connections,
//! RDMA WRITEs of mixed sizes, an ACK per two writes, a CNP per 64 writes, 1 in 50 writes with
//! ECN CE), plus a 10x smaller capture of the same mix and a 128-byte-snaplen copy (what a
//! truncating switch mirror delivers). Times the release `roce-observe replay` (median of 3, with
//! and without ICRC verification), reads each run's peak RSS with wait4(2), runs
//! `tshark -T fields` with the tshark comparison test's fields once on the same file, and prints
//! a table with the ratio. Replay runs as a user runs it: collector on (Parquet, alerts,
//! summary.json into a temporary directory), nvidia profile, JSON summary on stdout.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use test_support::corpus;

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
    let mut many_packets: u64 = 2_000_000;
    let mut keys: Vec<u32> = vec![20_000, 200_000];
    let mut only: Option<String> = None;
    let mut keep = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--packets" => packets = it.next().context("--packets N")?.parse()?,
            "--many-packets" => many_packets = it.next().context("--many-packets N")?.parse()?,
            "--keys" => {
                keys = it
                    .next()
                    .context("--keys N,N")?
                    .split(',')
                    .map(|k| k.trim().parse::<u32>().map(|k| k.max(2)))
                    .collect::<Result<_, _>>()?
            }
            "--only" => only = Some(it.next().context("--only friendly|many|files")?.clone()),
            "--keep" => keep = true,
            "--generate" => {
                // Only writes one many-keys capture (for profiling): --generate FILE KEYS.
                let file = PathBuf::from(it.next().context("--generate FILE KEYS")?);
                let k: u32 = it.next().context("--generate FILE KEYS")?.parse()?;
                let st = generate_many(&file, many_packets, k.max(2) / 2, 10)?;
                println!("{}: {} bytes", file.display(), st.bytes);
                return Ok(());
            }
            other => bail!(
                "unknown option {other} (options: --packets N, --keys N,N, --many-packets N, --only friendly|many|files, --keep)"
            ),
        }
    }
    let dir = std::env::temp_dir().join(format!("roce-bench-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bin = build_binary(&dir)?;
    if only.as_deref().is_none_or(|o| o == "many") {
        many_keys(&bin, &dir, many_packets, &keys, keep)?;
    }
    if only.as_deref().is_none_or(|o| o == "files") {
        two_files(&bin, &dir, many_packets, &[64, 20_000])?;
    }
    if only.as_deref().is_none_or(|o| o == "friendly") {
        let inputs = generate_inputs(&dir, packets)?;
        let t = time_all(&bin, &dir, &inputs)?;
        report(&inputs, &t);
    }
    if keep {
        println!("captures kept in {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// Two captures of separate observation points in one command (two stems read at once,
/// `--readers 2`) against one of them alone, and against the two read one after another
/// (`--readers 1`), with the outputs and with `--no-out`; for each of `keys` (a capture of
/// `packets` generated as the many-keys case's, copied under a second name). Goal: the two at
/// least 1.7x the rate of one, by wall time.
fn two_files(bin: &Path, dir: &Path, packets: u64, keys: &[u32]) -> anyhow::Result<()> {
    let out = dir.join("out");
    let out = out.to_str().context("temporary directory not UTF-8")?;
    let mut lines = Vec::new();
    for &k in keys {
        let (a, b) = (
            dir.join(format!("point-a-{k}.pcap")),
            dir.join(format!("point-b-{k}.pcap")),
        );
        eprintln!("generating {packets} packets over {k} QP keys, twice...");
        generate_many(&a, packets, k / 2, 10)?;
        std::fs::copy(&a, &b)?;
        for f in [&a, &b] {
            std::io::copy(&mut std::fs::File::open(f)?, &mut std::io::sink())?;
        }
        eprintln!("timing one and two captures ({k} keys)...");
        for (what, base) in [
            ("outputs on", vec!["--out", out]),
            ("--no-out", vec!["--no-out"]),
        ] {
            let one = replay3_files(bin, dir, &[&a], &base)?;
            let mut two_args = base.clone();
            two_args.extend(["--readers", "2"]);
            let two = replay3_files(bin, dir, &[&a, &b], &two_args)?;
            let mut seq_args = base.clone();
            seq_args.extend(["--readers", "1"]);
            let seq = replay3_files(bin, dir, &[&a, &b], &seq_args)?;
            let rate = |r: &Run, n: f64| n * packets as f64 / r.wall / 1e6;
            let ratio = rate(&two, 2.0) / rate(&one, 1.0);
            lines.push(format!(
                concat!(
                    "{:>6} keys, {:<10}: one {:.3} s ({:.2} Mpps), two at once {:.3} s ({:.2} Mpps, ",
                    "{:.2} cores, {:.1} MB), one after another {:.3} s ({:.2} Mpps): two at once ",
                    "{:.2}x the rate of one (goal >= 1.7x: {}), {:.2}x one after another"
                ),
                k,
                what,
                one.wall,
                rate(&one, 1.0),
                two.wall,
                rate(&two, 2.0),
                two.cpu / two.wall,
                two.rss_kib as f64 / 1024.0,
                seq.wall,
                rate(&seq, 2.0),
                ratio,
                if ratio >= 1.7 { "met" } else { "not met" },
                seq.wall / two.wall,
            ));
        }
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
    }
    println!(
        "\nTwo captures of separate points in one command (median of 3, wall time; load {:.2}):",
        load_average()
    );
    for l in lines {
        println!("{l}");
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
            "roce-observe",
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

/// tshark's fields for the many-keys cases: what a user extracts to count per QP (8 fields).
const TSHARK_8: [&str; 8] = [
    "ip.src",
    "ip.dst",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.opcode",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "vlan.priority",
];

/// A small deterministic generator (xorshift64*), so every run generates the same capture.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in 0..n.
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }
}

/// What a many-keys capture holds (counted while generating it).
#[derive(Default)]
struct ManyStats {
    bytes: u64,
    writes: u64,
    acks: u64,
    ce: u64,
    cnps: u64,
    naks: u64,
}

/// A capture of `packets` frames over `conns` RC connections (2 keys each: the requester's
/// writes to the responder's QP, the responder's ACKs / NAKs / CNPs to the requester's QP),
/// connections in random order, `secs` seconds of capture time. See the module's doc.
fn generate_many(path: &Path, packets: u64, conns: u32, secs: u64) -> anyhow::Result<ManyStats> {
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    corpus::write_pcap_header(&mut w, corpus::LINKTYPE_ETHERNET, 65535, true)?;
    let t0: u64 = 1_700_000_000_000_000_000;
    let gap = secs * 1_000_000_000 / packets.max(1);
    let mut psn = vec![0u32; conns as usize];
    let mut writes = vec![0u32; conns as usize];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut st = ManyStats::default();
    let mut n = 0u64;
    while n < packets {
        let c = rng.below(conns as u64) as u32;
        // 4 QPs (connections) per host pair, as NCCL opens several per peer.
        let pair = c / 4;
        let a = [10, 1, (pair >> 8) as u8, pair as u8];
        let b = [10, 2, (pair >> 8) as u8, pair as u8];
        let (req_qp, resp_qp) = (0x10_0000 + c, 0x40_0000 + c);
        let tags: &[(u16, u8)] = if c.is_multiple_of(5) {
            &[(0x8100, 3)]
        } else {
            &[]
        };
        let p = psn[c as usize];
        let roll = rng.below(100);
        let ce = roll < 3;
        let write = corpus::Roce::v4(a, b, resp_qp, p)
            .payload(64)
            .tags(tags)
            .mark(26, if ce { 3 } else { 2 });
        let mut frames = vec![write.frame()];
        st.writes += 1;
        let k = writes[c as usize];
        writes[c as usize] = k.wrapping_add(1);
        let mut next = (p + 1) & 0xff_ffff;
        if roll == 99 && p >= 3 {
            // A lost write seen by the responder: NAK (PSN sequence error), the requester goes
            // back 3 PSNs.
            frames.push(
                corpus::Roce::v4(b, a, req_qp, p)
                    .ack(0x60)
                    .tags(tags)
                    .frame(),
            );
            st.naks += 1;
            next = (p - 3) & 0xff_ffff;
        } else if k % 2 == 1 {
            frames.push(
                corpus::Roce::v4(b, a, req_qp, p)
                    .ack(0x1f)
                    .tags(tags)
                    .frame(),
            );
            st.acks += 1;
        }
        if ce {
            st.ce += 1;
            let mut cnp = corpus::Roce::v4(b, a, req_qp, 0).cnp();
            if tags.is_empty() {
                cnp = cnp.tags(&[]);
            }
            frames.push(cnp.frame());
            st.cnps += 1;
        }
        psn[c as usize] = next;
        for f in frames {
            if n == packets {
                break;
            }
            corpus::write_pcap_record(&mut w, 65535, true, t0 + n * gap, &f)?;
            n += 1;
        }
    }
    w.flush()?;
    st.bytes = std::fs::metadata(path)?.len();
    Ok(st)
}

/// Median of 3 runs of `roce-observe replay` with `args` before the file, each with a fresh
/// output directory.
fn replay3(bin: &Path, dir: &Path, file: &Path, args: &[&str]) -> anyhow::Result<Run> {
    replay3_files(bin, dir, &[file], args)
}

/// [`replay3`] of several files in one command.
fn replay3_files(bin: &Path, dir: &Path, files: &[&Path], args: &[&str]) -> anyhow::Result<Run> {
    let out_dir = dir.join("out");
    let mut runs = Vec::new();
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut c = Command::new(bin);
        c.current_dir(dir).arg("replay").args(args).args(files);
        runs.push(timed(&mut c)?);
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    Ok(median(&runs))
}

/// The many-keys cases: one capture per entry of `keys`, timed and printed as a table.
fn many_keys(bin: &Path, dir: &Path, packets: u64, keys: &[u32], keep: bool) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut lat_rows = Vec::new();
    for &k in keys {
        let file = dir.join(format!("many-{k}.pcap"));
        eprintln!("generating {packets} packets over {k} QP keys...");
        let t = Instant::now();
        let st = generate_many(&file, packets, k / 2, 10)?;
        eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());
        std::io::copy(&mut std::fs::File::open(&file)?, &mut std::io::sink())?;
        eprintln!("timing replay ({k} keys)...");
        let out = dir.join("out");
        let out = out.to_str().context("temporary directory not UTF-8")?;
        let default = replay3(bin, dir, &file, &["--out", out])?;
        let no_out = replay3(bin, dir, &file, &["--no-out"])?;
        // the outputs on the packets' thread (before they had their own): the same bytes
        let inline = replay3(bin, dir, &file, &["--out", out, "--inline-outputs"])?;
        // Passive latency's cost (docs/latency.md): the same commands with it, same run
        let lat = replay3(bin, dir, &file, &["--out", out, "--latency"])?;
        let no_out_lat = replay3(bin, dir, &file, &["--no-out", "--latency"])?;
        // The same capture cut into 500 intervals instead of 10: memory must not grow with them.
        let short = replay3(bin, dir, &file, &["--out", out, "--interval", "20ms"])?;
        // Beyond the default --max-qps (65536, as the kernel table) the default command tracks
        // the first 65536 keys and counts the rest `roce_untracked`: also time it tracking all.
        let max_qps = (k > 65536).then(|| k.next_power_of_two().to_string());
        let all = match &max_qps {
            Some(m) => Some(replay3(bin, dir, &file, &["--out", out, "--max-qps", m])?),
            None => None,
        };
        eprintln!("timing tshark once ({k} keys, slow)...");
        let mut tc = Command::new("tshark");
        tc.arg("-r").arg(&file).args(["-T", "fields"]);
        for f in TSHARK_8 {
            tc.args(["-e", f]);
        }
        let tshark = timed(&mut tc)?;
        if !keep {
            std::fs::remove_file(&file)?;
        }
        rows.push((k, st, default, no_out, inline, short, tshark, all, max_qps));
        lat_rows.push((k, lat, no_out_lat));
    }
    let mpps = |secs: f64| packets as f64 / secs / 1e6;
    println!();
    println!(
        "replay, many QP keys: {packets} packets per capture (64 B RDMA WRITEs, ACKs, 3 % CE + CNP, \
         1 % NAK + go-back-N, 1/5 VLAN-tagged, random connection order, 10 s of capture time); \
         release build, median of 3 runs (tshark: 1 run, 8 fields); load average {:.1} at the end",
        load_average()
    );
    println!(
        "| keys | command | wall s | cpu s | Mpps (wall) | Mpps (cpu) | peak RSS MB | RSS KiB / key | x tshark (wall) | x tshark (cpu) |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (k, st, default, no_out, inline, short, tshark, all, max_qps) in &rows {
        let all_name = format!(
            "roce-observe replay --out DIR --max-qps {} FILE (every key tracked)",
            max_qps.as_deref().unwrap_or("")
        );
        let mut cases = vec![
            ("roce-observe replay --out DIR FILE (default)", default),
            ("roce-observe replay --no-out FILE", no_out),
            (
                "roce-observe replay --out DIR --inline-outputs FILE (one thread)",
                inline,
            ),
            (
                "roce-observe replay --out DIR --interval 20ms FILE (500 intervals)",
                short,
            ),
        ];
        if let Some(a) = all {
            cases.push((all_name.as_str(), a));
        }
        cases.push(("tshark -T fields (8 fields)", tshark));
        for (name, r) in cases {
            println!(
                "| {k} | {name} | {:.3} | {:.3} | {:.2} | {:.2} | {:.1} | {:.2} | {:.0}x | {:.0}x |",
                r.wall,
                r.cpu,
                mpps(r.wall),
                mpps(r.cpu),
                r.rss_kib as f64 / 1024.0,
                r.rss_kib as f64 / *k as f64,
                tshark.wall / r.wall,
                tshark.cpu / r.cpu,
            );
        }
        println!(
            "|  | capture: {:.0} MB, {} writes, {} ACKs, {} CE, {} CNPs, {} NAKs |  |  |  |  |  |  |  |  |",
            st.bytes as f64 / 1e6,
            st.writes,
            st.acks,
            st.ce,
            st.cnps,
            st.naks
        );
    }
    for (k, _, default, no_out, inline, short, tshark, all, _) in &rows {
        println!(
            "{k} keys, outputs against the packet path: the default command {:.2} Mpps by wall time, \
             {:.2}x the --no-out rate ({:.2} Mpps, same run; goal at least 0.8x); with \
             --inline-outputs {:.2}x",
            mpps(default.wall),
            no_out.wall / default.wall,
            mpps(no_out.wall),
            no_out.wall / inline.wall,
        );
        let default = all.as_ref().unwrap_or(default);
        let goal_mb = 64.0 + 4.0 * *k as f64 / 1024.0;
        println!(
            "{k} keys, every key tracked: {:.2} Mpps (wall), {:.2} Mpps (cpu), {:.0}x tshark (cpu); peak RSS {:.1} MB against the goal of {:.1} MB (64 MB + 4 KiB per key)",
            mpps(default.wall),
            mpps(default.cpu),
            tshark.cpu / default.cpu,
            default.rss_kib as f64 / 1024.0,
            goal_mb
        );
        println!(
            "{k} keys, memory against intervals: peak RSS {:.1} MB with 10 intervals, {:.1} MB with 500",
            default.rss_kib as f64 / 1024.0,
            short.rss_kib as f64 / 1024.0
        );
    }
    for ((k, _, default, no_out, ..), (_, lat, no_out_lat)) in rows.iter().zip(&lat_rows) {
        let ns = |r: &Run| r.cpu * 1e9 / packets as f64;
        println!(
            "{k} keys, passive latency's cost: the packet path (--no-out) {:.1} ns per packet with --latency against {:.1} without it \
             (same run): {:.3}x; the default command {:.1} against {:.1} ns per packet (cpu): {:.3}x, peak RSS {:.1} against {:.1} MB \
             (goal at most 1.10x)",
            ns(no_out_lat),
            ns(no_out),
            no_out_lat.cpu / no_out.cpu,
            ns(lat),
            ns(default),
            lat.cpu / default.cpu,
            lat.rss_kib as f64 / 1024.0,
            default.rss_kib as f64 / 1024.0,
        );
    }
    // many keys against the smallest key count of the same run, every key tracked (goal: the
    // largest at least 0.5x the rate of 20,000)
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        // the default command's rate, or tracking every key where the default does not
        let tracked =
            |r: &(u32, _, Run, _, _, _, _, Option<Run>, _)| mpps(r.7.as_ref().unwrap_or(&r.2).wall);
        let (a, b) = (tracked(first), tracked(last));
        println!(
            "{} keys every key tracked against {} keys: {:.2}x the rate by wall time ({:.2} against {:.2} Mpps)",
            last.0,
            first.0,
            b / a,
            b,
            a
        );
    }
    Ok(())
}

fn load_average() -> f64 {
    let mut l = [0f64; 3];
    // SAFETY: plain libc query into our array.
    unsafe { libc::getloadavg(l.as_mut_ptr(), 3) };
    l[0]
}
