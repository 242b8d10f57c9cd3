//! Passive latency (docs/latency.md) end to end through replay: a capture of RC connections with
//! known turnaround times, coalesced ACKs, a READ, a resend, a NAK and its go-back, CE marks and
//! CNPs, and two connections of one address pair; the flows table's histograms and summary.json
//! against a reference that computes the samples from tshark's dissection of the same file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use observer_common::frames::Roce;
use observer_common::latency::{self, kind};
use serde_json::Value;
use test_support::TempDir;
use test_support::collector::pyarrow_read;
use test_support::corpus::{LINKTYPE_ETHERNET, Rec, write_pcap};

const T0: u64 = 1_700_000_000_000_000_000;

/// One RC connection: requester `a` (QP `qa`) to responder `b` (QP `qb`).
struct Conn {
    a: [u8; 4],
    b: [u8; 4],
    qa: u32,
    qb: u32,
    psn: u32,
}

fn pkt(src: [u8; 4], dst: [u8; 4], qp: u32, op: u8, psn: u32) -> Roce {
    Roce::v4(src, dst)
        .mark(26, 2)
        .opcode(op)
        .qp(qp)
        .psn(psn & 0xff_ffff)
}

fn ack(c: &Conn, psn: u32, syndrome: u8) -> Vec<u8> {
    pkt(c.b, c.a, c.qa, 0x11, psn).aeth(syndrome, 1).build()
}

/// The capture's frames (time, bytes) and the turnaround each responder answer was given.
fn traffic() -> Vec<(u64, Vec<u8>)> {
    let conns = [
        Conn {
            a: [10, 88, 0, 1],
            b: [10, 88, 0, 2],
            qa: 0x101,
            qb: 0x201,
            psn: 0xff_ff00,
        },
        // the same address pair, another connection: the pairing must tell them apart by PSN
        Conn {
            a: [10, 88, 0, 1],
            b: [10, 88, 0, 2],
            qa: 0x102,
            qb: 0x202,
            psn: 0x40_0000,
        },
        Conn {
            a: [10, 88, 0, 3],
            b: [10, 88, 0, 1],
            qa: 0x103,
            qb: 0x203,
            psn: 1000,
        },
    ];
    let mut out = Vec::new();
    for (ci, c) in conns.iter().enumerate() {
        let mut t = T0 + ci as u64 * 7_000;
        let mut psn = c.psn;
        // the responder answers in order: never before its previous answer
        let mut last_answer = 0u64;
        fn answer(
            last: &mut u64,
            t_req: u64,
            turnaround: u64,
            frame: Vec<u8>,
            out: &mut Vec<(u64, Vec<u8>)>,
        ) {
            let at = (t_req + turnaround).max(*last + 1_000);
            *last = at;
            out.push((at, frame));
        }
        for m in 0..300u32 {
            // a turnaround of 20 µs to 2 ms, varying (tens of µs on connection 1, the rest
            // longer), and every 50th message 40 ms (a pause)
            let base = if ci == 0 { 20_000 } else { 150_000 };
            let mut turnaround = base + (m as u64 * 7919 % 97) * 1_000 * (ci as u64 + 1);
            if m % 50 == 49 {
                turnaround = 40_000_000;
            }
            let ce = ci == 1 && m % 10 == 3;
            if ci == 0 && m == 100 {
                // an RDMA READ of 2 KiB (2 responses at a 1 KiB MTU)
                let req = pkt(c.a, c.b, c.qb, 0x0c, psn)
                    .reth(0x2000, 0x5678, 2048)
                    .build();
                out.push((t, req));
                answer(
                    &mut last_answer,
                    t,
                    turnaround,
                    pkt(c.b, c.a, c.qa, 0x0d, psn)
                        .aeth(0, 1)
                        .payload_pattern(1024, 0, 1)
                        .build(),
                    &mut out,
                );
                answer(
                    &mut last_answer,
                    t,
                    turnaround,
                    pkt(c.b, c.a, c.qa, 0x0f, psn + 1)
                        .aeth(0, 1)
                        .payload_pattern(1024, 0, 1)
                        .build(),
                    &mut out,
                );
                psn += 2;
                t += 60_000;
                continue;
            }
            if ci == 0 && m == 150 {
                // PSN psn lost before the observation point: the next is seen, the responder
                // NAKs the one it expects, the requester goes back
                let p = psn;
                out.push((
                    t,
                    pkt(c.a, c.b, c.qb, 0x0a, p + 1)
                        .ack_req(true)
                        .payload_pattern(256, 0, 1)
                        .build(),
                ));
                answer(&mut last_answer, t, 30_000, ack(c, p, 0x60), &mut out);
                let resend = last_answer + 25_000;
                out.push((
                    resend,
                    pkt(c.a, c.b, c.qb, 0x0a, p)
                        .ack_req(true)
                        .payload_pattern(256, 0, 1)
                        .build(),
                ));
                out.push((
                    resend + 5_000,
                    pkt(c.a, c.b, c.qb, 0x0a, p + 1)
                        .ack_req(true)
                        .payload_pattern(256, 0, 1)
                        .build(),
                ));
                answer(
                    &mut last_answer,
                    resend + 5_000,
                    turnaround,
                    ack(c, p + 1, 0x1f),
                    &mut out,
                );
                psn += 2;
                t = resend + 60_000;
                continue;
            }
            // a message of 1 to 3 packets, AckReq on its last
            let n = 1 + m % 3;
            let ops: &[u8] = match n {
                1 => &[0x0a],
                2 => &[0x06, 0x08],
                _ => &[0x06, 0x07, 0x08],
            };
            // packet i of the message, at PSN p: AckReq on its last, a RETH on its first
            let message_pkt = |i: usize, op: u8, p: u32| {
                let r = pkt(c.a, c.b, c.qb, op, p)
                    .ack_req(i + 1 == ops.len())
                    .payload_pattern(1024, 0, 1);
                if op == 0x0a || op == 0x06 {
                    r.reth(0x1000, 0x1234, 1024 * n)
                } else {
                    r
                }
            };
            for (i, &op) in ops.iter().enumerate() {
                let last = i + 1 == ops.len();
                let mut r = message_pkt(i, op, psn);
                if ce && last {
                    r = r.mark(26, 3);
                }
                out.push((t + i as u64 * 1_000, r.build()));
                psn += 1;
            }
            let end = t + (n as u64 - 1) * 1_000;
            if ce {
                out.push((
                    end + 12_000,
                    pkt(c.b, c.a, c.qa, 0x81, 0)
                        .becn(true)
                        .payload_pattern(16, 0, 0)
                        .build(),
                ));
            }
            if ci == 2 && m == 200 {
                // the last message resent (a timeout): its ACK cannot be timed (Karn)
                for (i, &op) in ops.iter().enumerate() {
                    let r = message_pkt(i, op, psn - n + i as u32);
                    out.push((end + 5_000 + i as u64 * 1_000, r.build()));
                }
            }
            // coalesced: the responder ACKs every second message (its last PSN)
            // (the last two messages of connection 2 are never answered: unmatched at the end)
            if (m % 2 == 1 || ci == 2) && !(ci == 1 && m == 299) {
                answer(
                    &mut last_answer,
                    end,
                    turnaround,
                    ack(c, psn - 1, 0x1f),
                    &mut out,
                );
            }
            // after a long wait the requester's window was full: it resumes after the answer
            t = if m % 50 == 49 {
                last_answer + 60_000
            } else {
                t + 60_000
            };
        }
    }
    out.sort_by_key(|e| e.0);
    out
}

/// One packet as tshark dissects it.
struct Pkt {
    t: u64,
    src: String,
    dst: String,
    qp: u32,
    op: u8,
    psn: u32,
    ack_req: bool,
    syndrome: Option<u8>,
    ecn: u8,
}

/// tshark's fields of every RoCE packet of `file`.
fn tshark(file: &Path) -> Vec<Pkt> {
    let o = Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args(["-Y", "infiniband", "-T", "fields", "-E", "separator=|"])
        .args([
            "-e",
            "frame.time_epoch",
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "infiniband.bth.a",
            "-e",
            "infiniband.aeth.syndrome",
            "-e",
            "ip.dsfield.ecn",
        ])
        .output()
        .expect("tshark runs");
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let num = |s: &str| -> u64 {
        let s = s.trim();
        if let Some(h) = s.strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap()
        } else {
            s.parse().unwrap_or_else(|_| panic!("number {s:?}"))
        }
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            // seconds.nanoseconds, exactly (no float)
            let (s, frac) = f[0].split_once('.').unwrap();
            let frac = format!("{frac:0<9}");
            Pkt {
                t: s.parse::<u64>().unwrap() * 1_000_000_000 + frac[..9].parse::<u64>().unwrap(),
                src: f[1].into(),
                dst: f[2].into(),
                qp: num(f[3]) as u32,
                op: num(f[4]) as u8,
                psn: num(f[5]) as u32,
                ack_req: matches!(f[6], "1" | "True" | "true"),
                syndrome: (!f[7].is_empty()).then(|| num(f[7]) as u8),
                ecn: num(f[8]) as u8,
            }
        })
        .collect()
}

/// Per requester key (src, dst, qp) and kind: the samples' bucket positions, sorted, and the
/// unmatched and ambiguous counts.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    buckets: [Vec<usize>; kind::COUNT],
    unmatched: [u64; kind::COUNT],
    ambiguous: u64,
    /// Open at the end (summary.json only).
    open: [u64; kind::COUNT],
}

type KeyName = (String, String, u32);

/// docs/latency.md's rules, written again from the page over tshark's fields: the two keys of
/// each connection are known here (`pairs`: the key of the answers -> the key of the requests).
fn reference(
    pkts: &[Pkt],
    pairs: &BTreeMap<KeyName, KeyName>,
) -> (BTreeMap<KeyName, Expected>, Vec<u64>) {
    #[derive(Default)]
    struct Open {
        /// (psn, t, read, ambiguous)
        entries: Vec<(u32, u64, bool, bool)>,
        max: Option<u32>,
        nak: Option<(u32, u64)>,
        ce: Option<u64>,
    }
    let later = |a: u32, b: u32| -> i32 { ((a.wrapping_sub(b) << 8) as i32) >> 8 };
    let mut open: BTreeMap<KeyName, Open> = BTreeMap::new();
    let mut exp: BTreeMap<KeyName, Expected> = BTreeMap::new();
    let mut ack_samples = Vec::new();
    let timeout = latency::DEFAULT_TIMEOUT_NS;
    for p in pkts {
        let key = (p.src.clone(), p.dst.clone(), p.qp);
        let response = matches!(p.op, 0x0d..=0x12 | 0x81);
        if !response {
            let o = open.entry(key.clone()).or_default();
            let e = exp.entry(key.clone()).or_default();
            if let Some((np, t0)) = o.nak
                && np == p.psn
            {
                e.buckets[kind::NAK as usize].push(latency::bucket(p.t - t0));
                o.nak = None;
            }
            if p.ecn == 3 && o.ce.is_none() {
                o.ce = Some(p.t);
            }
            let fresh = o.max.is_none_or(|m| later(p.psn, m) > 0);
            if fresh {
                // a READ consumes its responses' PSNs (2 here)
                let last = if p.op == 0x0c { p.psn + 1 } else { p.psn };
                o.max = Some(last);
                // RC requests only: UC and UD are never acknowledged
                if p.op < 0x20 && (p.op == 0x0c || p.ack_req) {
                    o.entries.push((p.psn, p.t, p.op == 0x0c, false));
                }
            } else {
                for x in o.entries.iter_mut().filter(|x| later(x.0, p.psn) >= 0) {
                    x.3 = true;
                }
            }
            continue;
        }
        let Some(rk) = pairs.get(&key) else { continue };
        let o = open.entry(rk.clone()).or_default();
        let e = exp.entry(rk.clone()).or_default();
        if p.op == 0x81 {
            if let Some(t0) = o.ce.take() {
                e.buckets[kind::CNP as usize].push(latency::bucket(p.t - t0));
            }
            continue;
        }
        let (inclusive, read_first) = match (p.op, p.syndrome) {
            (0x0d | 0x10, _) => (false, true),
            (0x0e | 0x0f, _) => (false, false),
            (_, Some(s)) if s & 0x60 == 0 => (true, false),
            (_, Some(s)) if s & 0x60 == 0x60 => {
                if s & 0x1f == 0 && o.nak.is_none() {
                    o.nak = Some((p.psn, p.t));
                }
                (false, false)
            }
            _ => (false, false),
        };
        while let Some(&(psn, t0, read, amb)) = o.entries.first() {
            let d = later(psn, p.psn);
            let ends = d < 0 || (d == 0 && (inclusive || (read_first && read)));
            if !ends {
                break;
            }
            o.entries.remove(0);
            let k = if read { kind::READ } else { kind::ACK } as usize;
            if read && d < 0 {
                e.unmatched[k] += 1;
            } else if amb {
                e.ambiguous += 1;
            } else if p.t - t0 > timeout {
                e.unmatched[k] += 1;
            } else {
                e.buckets[k].push(latency::bucket(p.t - t0));
                if k == kind::ACK as usize {
                    ack_samples.push(p.t - t0);
                }
            }
        }
    }
    // open at the end
    for (k, o) in open {
        let e = exp.entry(k).or_default();
        for x in o.entries {
            e.open[if x.2 { kind::READ } else { kind::ACK } as usize] += 1;
        }
        e.open[kind::NAK as usize] += o.nak.is_some() as u64;
        e.open[kind::CNP as usize] += o.ce.is_some() as u64;
    }
    exp.retain(|_, e| *e != Expected::default());
    for e in exp.values_mut() {
        for b in &mut e.buckets {
            b.sort_unstable();
        }
    }
    (exp, ack_samples)
}

fn write_capture(dir: &Path) -> std::path::PathBuf {
    let recs: Vec<Rec> = traffic()
        .into_iter()
        .map(|(ts_ns, data)| Rec {
            ts_ns,
            data,
            iface: 0,
            epb_flags: 0,
        })
        .collect();
    let p = dir.join("latency.pcap");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    write_pcap(&mut w, LINKTYPE_ETHERNET, 65535, true, &recs).unwrap();
    std::io::Write::flush(&mut w).unwrap();
    p
}

/// The flows table's latency columns summed per key: the same form as [`Expected`].
fn observed(out: &Path) -> BTreeMap<KeyName, Expected> {
    let t = pyarrow_read(out, "flows", &[], true);
    let mut m: BTreeMap<KeyName, Expected> = BTreeMap::new();
    for r in t["records"].as_array().unwrap() {
        let key = (
            r["src"].as_str().unwrap().to_string(),
            r["dst"].as_str().unwrap().to_string(),
            r["qp"].as_u64().unwrap() as u32,
        );
        if r["latency_ambiguous"].is_null() {
            assert!(r["latency_ack"].is_null(), "{r}");
            continue;
        }
        let e = m.entry(key).or_default();
        for (k, name) in kind::NAMES.iter().enumerate() {
            for b in r[format!("latency_{name}")].as_array().unwrap() {
                let pos = latency::position_of(b["value"].as_i64().unwrap() as i16).unwrap();
                for _ in 0..b["pkts"].as_u64().unwrap() {
                    e.buckets[k].push(pos);
                }
            }
            e.unmatched[k] += r[format!("latency_{name}_unmatched")].as_u64().unwrap();
        }
        e.ambiguous += r["latency_ambiguous"].as_u64().unwrap();
        assert_eq!(r["latency_ring_full"].as_u64(), Some(0), "{r}");
    }
    m.retain(|_, e| *e != Expected::default());
    for e in m.values_mut() {
        for b in &mut e.buckets {
            b.sort_unstable();
        }
    }
    m
}

#[test]
fn latency_samples_equal_a_reference_from_tsharks_frame_times() {
    let dir = TempDir::new("latency-replay");
    let cap = write_capture(dir.path());
    let out = dir.join("out");
    // latency_high on any interval whose ACK p99 is certainly over 10 ms (the 40 ms waits)
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "[thresholds]\nlatency_p99_us = 10000\nlatency_min_samples = 1\n",
    )
    .unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_roce-observe"))
        .args(["replay", "--latency", "--interval", "5ms", "--policy"])
        .arg(&policy)
        .arg("--out")
        .arg(&out)
        .arg(&cap)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let pkts = tshark(&cap);
    assert_eq!(
        pkts.len(),
        traffic().len(),
        "tshark dissects every frame as RoCE"
    );
    let name = |a: [u8; 4]| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
    let mut pairs = BTreeMap::new();
    for (a, b, qa, qb) in [
        ([10, 88, 0, 1], [10, 88, 0, 2], 0x101, 0x201),
        ([10, 88, 0, 1], [10, 88, 0, 2], 0x102, 0x202),
        ([10, 88, 0, 3], [10, 88, 0, 1], 0x103, 0x203),
    ] {
        pairs.insert((name(b), name(a), qa), (name(a), name(b), qb));
    }
    let (want, ack_samples) = reference(&pkts, &pairs);
    let got = observed(&out);
    // what the capture holds, so that the comparison covers every rule
    let r1 = &want[&("10.88.0.1".into(), "10.88.0.2".into(), 0x201)];
    assert_eq!(r1.buckets[kind::READ as usize].len(), 1, "{r1:?}");
    assert_eq!(r1.buckets[kind::NAK as usize].len(), 1, "{r1:?}");
    let r2 = &want[&("10.88.0.1".into(), "10.88.0.2".into(), 0x202)];
    assert_eq!(r2.buckets[kind::CNP as usize].len(), 30, "{r2:?}");
    assert_eq!(r2.open[kind::ACK as usize], 2, "{r2:?}");
    let r3 = &want[&("10.88.0.3".into(), "10.88.0.1".into(), 0x203)];
    assert!(r3.ambiguous >= 1, "{r3:?}");
    assert!(
        want.values()
            .all(|e| e.buckets[kind::ACK as usize].len() > 100)
    );
    // the flows rows hold what was decided; what was open at the end is summary.json's
    let open: BTreeMap<KeyName, [u64; kind::COUNT]> =
        want.iter().map(|(k, e)| (k.clone(), e.open)).collect();
    let mut want = want;
    for e in want.values_mut() {
        e.open = [0; kind::COUNT];
    }
    want.retain(|_, e| *e != Expected::default());
    assert_eq!(
        got, want,
        "flows' latency columns against the tshark reference"
    );

    // summary.json: per key, samples and percentiles as the histograms give them
    let s: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let c = observer::sinks::summary_json::check(&s);
    assert_eq!(
        c.problems,
        Vec::<String>::new(),
        "summary.json against docs/summary-json.md"
    );
    for path in [
        "latency[].ack.p999_us",
        "latency[].read.samples",
        "latency[].ce_cnp.p50_us",
        "latency[].ambiguous",
    ] {
        assert!(c.seen.contains(path), "{path}");
    }
    let lat = s["latency"].as_array().expect("summary.json latency");
    assert_eq!(lat.len(), want.len());
    for q in lat {
        let key = (
            q["src"].as_str().unwrap().to_string(),
            q["dst"].as_str().unwrap().to_string(),
            q["qp"].as_u64().unwrap() as u32,
        );
        let e = &want[&key];
        let acks = &e.buckets[kind::ACK as usize];
        assert_eq!(q["ack"]["samples"].as_u64(), Some(acks.len() as u64), "{q}");
        assert_eq!(
            q["ack"]["open"].as_u64(),
            Some(open[&key][kind::ACK as usize]),
            "{q}"
        );
        for (field, num, den) in [
            ("p50_us", 1u64, 2u64),
            ("p99_us", 99, 100),
            ("p999_us", 999, 1000),
        ] {
            let rank = ((num * acks.len() as u64).div_ceil(den)).max(1) as usize;
            let want_us = latency::UPPER_NS[acks[rank - 1]] as f64 / 1e3;
            assert_eq!(q["ack"][field].as_f64(), Some(want_us), "{field} of {q}");
        }
    }
    // latency_high: one alert per requester key (its ACKs; the READ is fast), then held down
    let alerts: Vec<Value> = std::fs::read_to_string(out.join("alerts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|a: &Value| a["rule"] == "latency_high")
        .collect();
    let first: Vec<(String, u64, String)> = alerts
        .iter()
        .filter(|a| a["summary"] == false)
        .map(|a| {
            assert_eq!(a["subject"], "ack", "{a}");
            assert!(
                a["observed"]
                    .as_str()
                    .unwrap()
                    .starts_with("ACK round trip p99 "),
                "{a}"
            );
            (
                a["src"].as_str().unwrap().into(),
                a["qp"].as_u64().unwrap(),
                a["dst"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        first,
        vec![
            ("10.88.0.1".to_string(), 0x201, "10.88.0.2".to_string()),
            ("10.88.0.1".to_string(), 0x202, "10.88.0.2".to_string()),
            ("10.88.0.3".to_string(), 0x203, "10.88.0.1".to_string()),
        ],
        "{alerts:?}"
    );
    assert_eq!(
        s["alerts"]["latency_high"].as_u64(),
        Some(alerts.len() as u64)
    );

    // the turnarounds given: 20 µs to 2 ms, and 40 ms pauses; p50 within them, p999 the pauses
    let p50 = lat[0]["ack"]["p50_us"].as_f64().unwrap();
    assert!((20.0..2_000.0 * 1.19).contains(&p50), "{p50}");
    let max = *ack_samples.iter().max().unwrap();
    assert!((40_000_000..41_000_000).contains(&max), "{max}");
}
