//! A fleet's output tree for the analysis benchmark (`cargo xtask bench-analyze`): `--hosts`
//! hosts, each with `--keys` QP keys on one interface, `--minutes` of `--interval`-second
//! intervals, written by the observer's own collector (`Collector::on_snapshot`: deltas, alert
//! rules, row builders, the Parquet writers with their schema, encodings, rotation and Hive
//! partitions, `policy-<host>.toml`), one collector per host, hosts spread over the cores.
//!
//! Usage: fleet_tree --out DIR [--hosts 100] [--keys 1000] [--minutes 60] [--interval 10]
//! [--rotate 300] (seconds per Parquet file, the observer's default)
//!
//! Each host sends `keys / 4` flows to other hosts: a flow is a data key (sender egress,
//! receiver ingress) and its reverse ACK / CNP key (receiver egress, sender ingress), so every
//! key is seen at two points (what `roce-analyze path` compares) and each host holds about
//! `keys` keys. Values are deterministic per flow and interval: 1,000-200,000 data packets of
//! 4096 B payload per interval, one ACK per 16, the NVIDIA profile's marking (DSCP 26 / 48,
//! PCP 3 / 6, ECT(0)); 4 % of flows see CE at the receiver (CNPs back, except 1 % of flows:
//! CE without CNP), 1 % have PSN gaps in some intervals, host 5 sends its data with DSCP 0
//! (off the policy) and host 3's interface receives PFC pauses on priority 3 for ten minutes.
//! Prints rows, files and bytes written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
use observer::sources::Snapshot;
use observer_common::maps::{IfaceStats, QpKey, QpValue, class, dir};
use observer_common::qp::opcode_bucket;

struct Args {
    out: PathBuf,
    hosts: usize,
    keys: usize,
    minutes: u64,
    interval: u64,
    rotate: u64,
}

fn args() -> Args {
    let mut a = Args {
        out: PathBuf::new(),
        hosts: 100,
        keys: 1000,
        minutes: 60,
        interval: 10,
        rotate: 300,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let val = v.get(i + 1).cloned().unwrap_or_default();
        let num = || -> u64 {
            val.parse()
                .unwrap_or_else(|_| panic!("{} needs a number", v[i]))
        };
        match v[i].as_str() {
            "--out" => a.out = PathBuf::from(&val),
            "--hosts" => a.hosts = num() as usize,
            "--keys" => a.keys = num() as usize,
            "--minutes" => a.minutes = num(),
            "--interval" => a.interval = num(),
            "--rotate" => a.rotate = num(),
            o => panic!("unknown option {o}"),
        }
        i += 2;
    }
    assert!(!a.out.as_os_str().is_empty(), "--out DIR is required");
    assert!(a.hosts >= 2 && a.keys >= 4 && a.interval >= 1);
    a
}

/// ::ffff:10.0.h.1 (IPv4-mapped, as the kernel keys IPv4).
fn ip(h: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&[10, (h >> 8) as u8, h as u8, 1]);
    a
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// One flow: sender host, receiver host, its global number.
#[derive(Clone, Copy)]
struct Flow {
    from: usize,
    to: usize,
    id: u64,
}

impl Flow {
    fn data_qp(&self) -> u32 {
        0x10000 + 2 * self.id as u32
    }
    fn ack_qp(&self) -> u32 {
        self.data_qp() + 1
    }
    /// Data packets sent in round `r`.
    fn pkts(&self, r: u64) -> u64 {
        1000 + mix(self.id << 20 ^ r) % 199_000
    }
    fn ce_share(&self) -> bool {
        self.id.is_multiple_of(25)
    }
    fn cnp_missing(&self) -> bool {
        self.id.is_multiple_of(100)
    }
    /// PSN gaps at the receiver in this round.
    fn gap(&self, r: u64) -> bool {
        self.id % 97 == 1 && r % 20 == 5
    }
}

fn flows(hosts: usize, per_host: usize) -> Vec<Flow> {
    let mut v = Vec::with_capacity(hosts * per_host);
    for h in 0..hosts {
        for j in 0..per_host {
            v.push(Flow {
                from: h,
                to: (h + 1 + j % (hosts - 1)) % hosts,
                id: (h * per_host + j) as u64,
            });
        }
    }
    v
}

/// What a key of a flow carries.
#[derive(Clone, Copy)]
enum Role {
    Data,
    Ack,
}

struct KeyOf {
    flow: Flow,
    role: Role,
    /// At the receiving end of this key (ingress).
    rx: bool,
}

fn qp_key(k: &KeyOf) -> QpKey {
    let (src, dst, qp) = match k.role {
        Role::Data => (k.flow.from, k.flow.to, k.flow.data_qp()),
        Role::Ack => (k.flow.to, k.flow.from, k.flow.ack_qp()),
    };
    QpKey {
        src_ip: ip(src),
        dst_ip: ip(dst),
        dest_qp: qp,
        dir: if k.rx { dir::INGRESS } else { dir::EGRESS },
        _pad: [0; 3],
    }
}

/// Adds round `r`'s packets of key `k` to its cumulative value.
fn advance(k: &KeyOf, v: &mut QpValue, r: u64, t_ns: u64, interval_ns: u64) -> u64 {
    let f = &k.flow;
    let p = f.pkts(r);
    let gap = k.rx && f.gap(r);
    let ce = if k.rx && f.ce_share() { p / 50 } else { 0 };
    let n = match k.role {
        Role::Data => {
            let p = if gap { p - 8 } else { p };
            let dscp = if f.from == 5 { 0 } else { 26 };
            v.opcode_hist[opcode_bucket(0x06)] += (p / 64) as u32;
            v.opcode_hist[opcode_bucket(0x08)] += (p / 64) as u32;
            v.opcode_hist[opcode_bucket(0x07)] += (p - 2 * (p / 64)) as u32;
            v.dscp_hist[class::DATA][dscp] += p as u32;
            v.ecn_hist[class::DATA][2] += (p - ce) as u32;
            v.ecn_hist[class::DATA][3] += ce as u32;
            v.pcp_hist[class::DATA][3] += p as u32;
            v.bytes_l2 += p * 4158;
            v.bytes_ip += p * 4140;
            v.bytes_udp += p * 4112;
            v.max_udp_payload = 4112;
            if gap {
                v.psn_gaps += 1;
                v.psn_missing += 8;
            }
            v.psn_max_p1 = ((v.psn_max_p1 as u64 + p) & 0xff_ffff) as u32 + 1;
            p
        }
        Role::Ack => {
            let acks = p / 16 + 1;
            let cnps = if f.ce_share() && !f.cnp_missing() {
                p / 500 + 1
            } else {
                0
            };
            v.opcode_hist[opcode_bucket(0x11)] += acks as u32;
            v.dscp_hist[class::ACK][26] += acks as u32;
            v.ecn_hist[class::ACK][2] += acks as u32;
            v.pcp_hist[class::ACK][3] += acks as u32;
            if cnps > 0 {
                v.opcode_hist[opcode_bucket(0x81)] += cnps as u32;
                v.dscp_hist[class::CNP][48] += cnps as u32;
                v.ecn_hist[class::CNP][0] += cnps as u32;
                v.pcp_hist[class::CNP][6] += cnps as u32;
            }
            v.bytes_l2 += acks * 62 + cnps * 78;
            v.bytes_ip += acks * 44 + cnps * 60;
            v.bytes_udp += acks * 24 + cnps * 40;
            v.max_udp_payload = v.max_udp_payload.max(if cnps > 0 { 32 } else { 16 });
            acks + cnps
        }
    };
    v.pkts += n;
    v.last_udp_sport = 49152 + (f.id % 16384) as u16;
    if v.first_ns == 0 {
        v.first_ns = t_ns - interval_ns + 1_000_000;
    }
    v.last_ns = t_ns - 2_000_000;
    n
}

fn host_tree(a: &Args, all: &[Flow], h: usize, t0: u64) -> anyhow::Result<u64> {
    let mut keys: Vec<KeyOf> = Vec::new();
    for f in all {
        if f.from == h {
            keys.push(KeyOf {
                flow: *f,
                role: Role::Data,
                rx: false,
            });
            keys.push(KeyOf {
                flow: *f,
                role: Role::Ack,
                rx: true,
            });
        }
        if f.to == h {
            keys.push(KeyOf {
                flow: *f,
                role: Role::Data,
                rx: true,
            });
            keys.push(KeyOf {
                flow: *f,
                role: Role::Ack,
                rx: false,
            });
        }
    }
    let host = format!("gpu{h:03}");
    let policy = PolicyConfig::profile("nvidia").map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cfg = CollectorConfig::new(a.out.clone(), &host, "live", policy);
    // the observer's defaults (300 s, or --rotate, or 128 MiB per file), no crash journal (a
    // benchmark input)
    cfg.rotate_secs = a.rotate;
    cfg.journal = false;
    let mut col = Collector::new(cfg)?;
    col.quiet_stderr();
    let iface = "rdma0";
    let mut snap = Snapshot {
        iface: iface.into(),
        time_ns: t0,
        link_speed_bps: Some(400_000_000_000),
        qps: keys.iter().map(|k| (qp_key(k), QpValue::ZERO)).collect(),
        iface_stats: [IfaceStats::default(); dir::COUNT],
        macs: Vec::new(),
        changed: None,
    };
    col.begin(iface, t0, Some(400_000_000_000));
    let ins = a.interval * 1_000_000_000;
    let rounds = a.minutes * 60 / a.interval;
    for r in 1..=rounds {
        let t = t0 + r * ins;
        let mut frames = [0u64; dir::COUNT];
        let mut bytes = [0u64; dir::COUNT];
        for (k, (qk, v)) in keys.iter().zip(snap.qps.iter_mut()) {
            let before = v.bytes_l2;
            let n = advance(k, v, r, t, ins);
            frames[qk.dir as usize] += n;
            bytes[qk.dir as usize] += v.bytes_l2 - before;
        }
        for d in 0..dir::COUNT {
            let s = &mut snap.iface_stats[d];
            s.frames += frames[d] + 40;
            s.roce += frames[d];
            s.not_roce += 40;
            s.bytes += bytes[d] + 40 * 90;
        }
        // host 3: PFC pauses on priority 3 received for ten minutes
        if h == 3 && (20 * 60..30 * 60).contains(&(r * a.interval)) {
            let p = &mut snap.iface_stats[dir::INGRESS as usize].pfc;
            p.pfc_frames += 400;
            p.enabled[3] += 400;
            p.xoff[3] += 300;
            p.xon[3] += 100;
            p.quanta[3] += 300 * 0xffff;
        }
        snap.time_ns = t;
        col.on_snapshot(&snap)?;
    }
    col.finish()?;
    Ok(rounds * keys.len() as u64)
}

fn du(p: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                let (f, b) = du(&e.path());
                files += f;
                bytes += b;
            } else {
                files += 1;
                bytes += m.len();
            }
        }
    }
    (files, bytes)
}

fn main() -> anyhow::Result<()> {
    let a = args();
    let t0 = 1_795_168_800u64 * 1_000_000_000; // 2026-11-20T10:00:00Z, an hour's start
    let all = flows(a.hosts, a.keys / 4);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = AtomicUsize::new(0);
    let rows = std::sync::atomic::AtomicU64::new(0);
    let w = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let h = next.fetch_add(1, Ordering::Relaxed);
                        if h >= a.hosts {
                            return Ok(());
                        }
                        rows.fetch_add(host_tree(&a, &all, h, t0)?, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in hs {
            t.join().expect("generator thread")?;
        }
        Ok(())
    })?;
    let (files, bytes) = du(&a.out);
    println!(
        "fleet tree: {} hosts, {} flow rows, {files} files, {:.1} MiB, generated in {:.1} s",
        a.hosts,
        rows.load(Ordering::Relaxed),
        bytes as f64 / (1u64 << 20) as f64,
        w.elapsed().as_secs_f64()
    );
    Ok(())
}
