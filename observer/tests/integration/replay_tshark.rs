//! Replay against an independent decoder: every corpus file (and the real oferby capture) is
//! decoded by tshark (`-T fields`), the per-QP and PFC totals are derived in this test from
//! tshark's fields with the metrics.md definitions, and compared field by field with
//! `roce-observe replay --json`.
//!
//! tshark quirks handled here (see toolchain.md):
//! - RoCE from a UDP source port below 4791 that is a registered port (69, TFTP) is decoded as
//!   that protocol: such files are decoded with `-d udp.port==P,infiniband`.
//! - tshark decodes IP fragments (and the non-first fragment's bytes as UDP/BTH); metrics.md
//!   excludes every fragment, so frames with MF set or an offset are not RoCE here.
//! - tshark shows a BTH cut by the snaplen partially; a RoCE packet needs a complete BTH, i.e.
//!   tshark's `infiniband.bth.psn` (its last field) present.
//! - L2 bytes: `frame.len` for Ethernet; for Linux cooked captures replay reconstructs an
//!   Ethernet length (frame.len - 16 + 14 for SLL, - 20 + 14 for SLL2); for mirrored (ERSPAN/GRE)
//!   frames the inner frame's length is 14 + 4 per inner tag + the inner IP length (tshark has no
//!   field for the inner frame's length; corpus RoCE frames are never Ethernet-padded).
//! - Direction: egress when the Linux cooked packet type is OUTGOING (`sll.pkttype` 4) or the
//!   pcapng `epb_flags` say outbound (`frame.packet_flags_direction` 2), as replay decides.
//! - The 802.1ad S-tag priority is `ieee8021ad.priority`, 802.1Q (and 0x9100) is
//!   `vlan.priority`; the outermost wins.
//! - ICRC verdicts are not compared (tshark does not verify the ICRC); they are tested against
//!   the real capture and the generated good/bad streams in tests/replay.rs.

use test_support::corpus;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use observer::sources::Discard;
use observer::sources::capture::{Replay, ReplayOptions};
use serde_json::{Map, Value, json};

use corpus::TSHARK_FIELDS as FIELDS;

fn col(name: &str) -> usize {
    FIELDS.iter().position(|f| *f == name).unwrap()
}

/// One tshark row: every occurrence of every field.
struct Row(Vec<Vec<String>>);

impl Row {
    fn all(&self, f: &str) -> &[String] {
        &self.0[col(f)]
    }
    fn first(&self, f: &str) -> Option<&str> {
        self.all(f).first().map(String::as_str)
    }
    fn last(&self, f: &str) -> Option<&str> {
        self.all(f).last().map(String::as_str)
    }
    fn num(&self, f: &str) -> Option<u64> {
        self.last(f).map(parse_num)
    }
}

fn parse_num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s}")),
        None => s.parse().unwrap_or_else(|_| panic!("bad number {s:?}")),
    }
}

/// "1700000000.000100000" to nanoseconds, exactly.
fn epoch_ns(s: &str) -> u64 {
    let (a, b) = s.split_once('.').unwrap_or((s, "0"));
    let mut frac = b.to_string();
    frac.truncate(9);
    while frac.len() < 9 {
        frac.push('0');
    }
    a.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

fn tshark(path: &Path, decode_as: Option<u16>) -> Vec<Row> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(path);
    if let Some(p) = decode_as {
        cmd.args(["-d", &format!("udp.port=={p},infiniband")]);
    }
    cmd.args([
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .expect("tshark is installed by scripts/setup.sh");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let cols: Vec<Vec<String>> = l
                .split('\t')
                .map(|c| {
                    if c.is_empty() {
                        vec![]
                    } else {
                        c.split(',').map(str::to_string).collect()
                    }
                })
                .collect();
            assert_eq!(cols.len(), FIELDS.len(), "row {l:?}");
            Row(cols)
        })
        .collect()
}

fn class_of(op: u64) -> &'static str {
    match op {
        0x81 => "cnp",
        0x11 | 0x12 | 0x51 | 0x52 => "ack",
        _ => "data",
    }
}

fn defined(op: u64) -> bool {
    matches!(op, 0x00..=0x17 | 0x20..=0x2b | 0x40..=0x55 | 0x64..=0x65 | 0x81)
}

#[derive(Default)]
struct Qp {
    pkts: u64,
    bytes_l2: u64,
    bytes_ip: u64,
    bytes_udp: u64,
    first_ns: u64,
    last_ns: u64,
    class: BTreeMap<&'static str, u64>,
    cnp: u64,
    ce: u64,
    acks: u64,
    naks: u64,
    nak_psn_seq_err: u64,
    rnr_naks: u64,
    suspect: u64,
    psn_max: Option<u64>,
    /// The window of the last READ request that moved `psn_max` (metrics.md "RDMA READ
    /// requests"), 0 otherwise.
    psn_window: u64,
    psn_gaps: u64,
    psn_missing: u64,
    psn_retrans: u64,
    psn_behind: u64,
    qp_incarnations: u64,
    max_udp_payload: u64,
    last_udp_sport: u64,
    opcodes: BTreeMap<String, u64>,
    dscp: BTreeMap<&'static str, BTreeMap<String, u64>>,
    ecn: BTreeMap<&'static str, BTreeMap<String, u64>>,
    pcp: BTreeMap<&'static str, BTreeMap<String, u64>>,
}

fn per_class(m: &BTreeMap<&'static str, BTreeMap<String, u64>>) -> Value {
    let mut o = Map::new();
    for c in ["data", "ack", "cnp"] {
        let h = m.get(c).cloned().unwrap_or_default();
        o.insert(c.into(), json!(h));
    }
    Value::Object(o)
}

/// Per-QP totals and PFC totals derived from tshark's rows.
fn derive(rows: &[Row], linktype: u32, stem: &str) -> (BTreeMap<String, Value>, Value, u64) {
    let mut qps: BTreeMap<(String, String, String, String, u64), Qp> = BTreeMap::new();
    let mut enabled = [0u64; 8];
    let mut xoff = [0u64; 8];
    let mut xon = [0u64; 8];
    let mut quanta = [0u64; 8];
    let (mut pfc_frames, mut pause, mut pause_xon, mut pause_quanta, mut other) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut roce = 0u64;
    for r in rows {
        if let Some(op) = r.num("macc.opcode") {
            match op {
                0x0101 => {
                    pfc_frames += 1;
                    let en = r.num("macc.cbfc.enbv").unwrap();
                    for p in 0..8 {
                        if en & (1 << p) != 0 {
                            let q = r.num(&format!("macc.cbfc.pause_time.c{p}")).unwrap();
                            enabled[p] += 1;
                            quanta[p] += q;
                            if q > 0 {
                                xoff[p] += 1;
                            } else {
                                xon[p] += 1;
                            }
                        }
                    }
                }
                0x0001 => {
                    pause += 1;
                    let q = r.num("macc.pause_time").unwrap();
                    pause_quanta += q;
                    if q == 0 {
                        pause_xon += 1;
                    }
                }
                _ => other += 1,
            }
            continue;
        }
        // RoCEv2 by metrics.md: UDP destination 4791, UDP payload >= 12, complete BTH, not a
        // fragment.
        if r.num("udp.dstport") != Some(4791)
            || r.num("udp.length").unwrap_or(0) < 20
            || r.last("infiniband.bth.psn").is_none()
            || r.num("ip.flags.mf").unwrap_or(0) != 0
            || r.num("ip.frag_offset").unwrap_or(0) != 0
        {
            continue;
        }
        roce += 1;
        let v6 = r.last("ip.src").is_none();
        let (src, dst) = if v6 {
            (r.last("ipv6.src").unwrap(), r.last("ipv6.dst").unwrap())
        } else {
            (r.last("ip.src").unwrap(), r.last("ip.dst").unwrap())
        };
        let qpn = r.num("infiniband.bth.destqp").unwrap();
        let iface = match r.first("frame.interface_name") {
            Some(n) if linktype == 0 => format!("{stem}:{n}"),
            _ => stem.to_string(),
        };
        let outbound =
            r.num("sll.pkttype") == Some(4) || r.num("frame.packet_flags_direction") == Some(2);
        let dir = if outbound { "egress" } else { "ingress" };
        let q = qps
            .entry((
                iface,
                dir.to_string(),
                src.to_string(),
                dst.to_string(),
                qpn,
            ))
            .or_default();
        let frame_len = r.num("frame.len").unwrap();
        let ip_len = if v6 {
            r.num("ipv6.plen").unwrap() + 40
        } else {
            r.num("ip.len").unwrap()
        };
        let tags = r.all("ieee8021ad.priority").len() + r.all("vlan.priority").len();
        let l2 = if r.all("ip.src").len() > 1 {
            14 + 4 * tags as u64 + ip_len
        } else {
            match linktype {
                corpus::LINKTYPE_SLL => frame_len - 16 + 14,
                corpus::LINKTYPE_SLL2 => frame_len - 20 + 14,
                _ => frame_len,
            }
        };
        let op = r.num("infiniband.bth.opcode").unwrap();
        let c = class_of(op);
        let (dscp, ecn) = if v6 {
            let tc = r.num("ipv6.tclass").unwrap();
            (tc >> 2, tc & 3)
        } else {
            (
                r.num("ip.dsfield.dscp").unwrap(),
                r.num("ip.dsfield.ecn").unwrap(),
            )
        };
        let pcp = r
            .first("ieee8021ad.priority")
            .or(r.first("vlan.priority"))
            .map(str::to_string)
            .unwrap_or_else(|| "none".into());
        let ts = epoch_ns(r.first("frame.time_epoch").unwrap());
        let udp_payload = r.num("udp.length").unwrap() - 8;
        q.pkts += 1;
        q.bytes_l2 += l2;
        q.bytes_ip += ip_len;
        q.bytes_udp += udp_payload;
        let prev_ns = q.last_ns;
        if q.first_ns == 0 {
            q.first_ns = ts;
        }
        q.last_ns = ts;
        *q.class.entry(c).or_default() += 1;
        if c == "cnp" {
            q.cnp += 1;
        }
        if ecn == 3 {
            q.ce += 1;
        }
        if op == 0x11 {
            q.acks += 1;
        }
        if let Some(s) = r.num("infiniband.aeth.syndrome") {
            match s & 0x60 {
                0x60 => {
                    q.naks += 1;
                    if s == 0x60 {
                        q.nak_psn_seq_err += 1;
                    }
                }
                0x20 => q.rnr_naks += 1,
                _ => {}
            }
        }
        if r.num("infiniband.bth.tver").unwrap_or(0) != 0 || !defined(op) {
            q.suspect += 1;
        }
        if c == "data" {
            let psn = r.num("infiniband.bth.psn").unwrap() & 0xff_ffff;
            // metrics.md "RDMA READ requests": an RC READ request of DMA length L (tshark's RETH
            // field) asks for max(1, ceil(L / pmtu)) responses, pmtu 256 ..= 4096 unknown; one
            // without its RETH may have any length up to 2^31: 1 ..= 2^23 responses. Every
            // other packet consumes one PSN.
            let (n_min, window) = if op == 0x0c {
                match r.num("infiniband.reth.dmalen") {
                    Some(l) => {
                        let n = |pmtu: u64| l.div_ceil(pmtu).max(1);
                        (n(4096), n(256) - n(4096))
                    }
                    None => (1, (1 << 23) - 1),
                }
            } else {
                (1, 0)
            };
            let moved = (psn + n_min - 1) % (1 << 24);
            match q.psn_max {
                None => (q.psn_max, q.psn_window) = (Some(moved), window),
                Some(max) => {
                    let mut d = (psn as i64 - max as i64).rem_euclid(1 << 24);
                    if d >= 1 << 23 {
                        d -= 1 << 24;
                    }
                    // the next new PSN: anywhere in the last READ's window
                    let next = d >= 1 && d <= 1 + q.psn_window as i64;
                    // metrics.md "QP number reuse": idle over 10 s (the default) and not the
                    // next PSN, or a jump of 2^22 or more: a new QP, the analysis restarts.
                    let idle = prev_ns != 0 && ts > prev_ns + 10_000_000_000;
                    if (idle && !next) || d.abs() >= 1 << 22 {
                        (q.psn_max, q.psn_window) = (Some(moved), window);
                        q.qp_incarnations += 1;
                    } else if d >= 1 {
                        if !next {
                            q.psn_gaps += 1;
                            q.psn_missing += (d - 1) as u64 - q.psn_window;
                        }
                        (q.psn_max, q.psn_window) = (Some(moved), window);
                    } else {
                        q.psn_retrans += 1;
                        if d < 0 {
                            q.psn_behind += 1;
                        }
                    }
                }
            }
        }
        q.max_udp_payload = q.max_udp_payload.max(udp_payload);
        q.last_udp_sport = r.num("udp.srcport").unwrap();
        let name = if defined(op) {
            format!("0x{op:02x}")
        } else {
            "other".into()
        };
        *q.opcodes.entry(name).or_default() += 1;
        *q.dscp
            .entry(c)
            .or_default()
            .entry(dscp.to_string())
            .or_default() += 1;
        *q.ecn
            .entry(c)
            .or_default()
            .entry(ecn.to_string())
            .or_default() += 1;
        *q.pcp.entry(c).or_default().entry(pcp).or_default() += 1;
    }
    let mut out = BTreeMap::new();
    for ((iface, dir, src, dst, qpn), q) in qps {
        let v = json!({
            "iface": iface, "dir": dir, "src": src, "dst": dst, "qp": qpn,
            "pkts": q.pkts, "bytes_l2": q.bytes_l2, "bytes_ip": q.bytes_ip, "bytes_udp": q.bytes_udp,
            "first_ns": q.first_ns, "last_ns": q.last_ns,
            "data_pkts": q.class.get("data").copied().unwrap_or(0),
            "ack_pkts": q.class.get("ack").copied().unwrap_or(0),
            "cnp": q.cnp, "ce": q.ce, "acks": q.acks, "naks": q.naks,
            "nak_psn_seq_err": q.nak_psn_seq_err, "rnr_naks": q.rnr_naks, "suspect": q.suspect,
            "psn_gaps": q.psn_gaps, "psn_missing": q.psn_missing, "psn_retrans": q.psn_retrans,
            "psn_behind": q.psn_behind, "qp_incarnations": q.qp_incarnations,
            "max_udp_payload": q.max_udp_payload,
            "last_udp_sport": q.last_udp_sport,
            "opcodes": q.opcodes,
            "dscp": per_class(&q.dscp), "ecn": per_class(&q.ecn), "pcp": per_class(&q.pcp),
        });
        out.insert(format!("{iface} {dir} {src} {dst} {qpn:#x}"), v);
    }
    let pfc = json!({
        "pfc": { "frames": pfc_frames, "enabled": enabled, "xoff": xoff, "xon": xon, "quanta": quanta },
        "pause": { "frames": pause, "xon": pause_xon, "quanta": pause_quanta },
        "mac_control_other": other,
    });
    (out, pfc, roce)
}

/// Replay's summary for one file: what `roce-observe replay --profile none --json FILE` prints
/// under "interfaces" and "qps" (the same engine and `summary_json`; the CLI itself is tested in
/// tests/replay.rs).
fn replay_json(path: &Path) -> Value {
    let mut out = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut out);
    rp.feed_path(path)
        .unwrap_or_else(|e| panic!("replay {}: {e}", path.display()));
    observer::sinks::summary_json::summary_json(&rp.snapshots())
}

/// Sums replay's per-interface PFC totals in the same shape as [`derive`]'s.
fn replay_pfc(s: &Value) -> (Value, u64) {
    let mut enabled = [0u64; 8];
    let mut xoff = [0u64; 8];
    let mut xon = [0u64; 8];
    let mut quanta = [0u64; 8];
    let (mut frames, mut pause, mut pause_xon, mut pause_quanta, mut other, mut roce) =
        (0, 0, 0, 0, 0, 0);
    for i in s["interfaces"].as_array().unwrap() {
        let p = &i["pfc"];
        frames += p["frames"].as_u64().unwrap();
        for k in 0..8 {
            enabled[k] += p["enabled"][k].as_u64().unwrap();
            xoff[k] += p["xoff"][k].as_u64().unwrap();
            xon[k] += p["xon"][k].as_u64().unwrap();
            quanta[k] += p["quanta"][k].as_u64().unwrap();
        }
        pause += i["pause"]["frames"].as_u64().unwrap();
        pause_xon += i["pause"]["xon"].as_u64().unwrap();
        pause_quanta += i["pause"]["quanta"].as_u64().unwrap();
        other += i["mac_control_other"].as_u64().unwrap();
        roce += i["roce"].as_u64().unwrap();
    }
    (
        json!({
            "pfc": { "frames": frames, "enabled": enabled, "xoff": xoff, "xon": xon, "quanta": quanta },
            "pause": { "frames": pause, "xon": pause_xon, "quanta": pause_quanta },
            "mac_control_other": other,
        }),
        roce,
    )
}

fn compare(name: &str, path: &Path, linktype: u32, decode_as: Option<u16>) -> usize {
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let rows = tshark(path, decode_as);
    let (want, want_pfc, want_roce) = derive(&rows, linktype, &stem);
    let s = replay_json(path);
    let mut got = BTreeMap::new();
    for q in s["qps"].as_array().unwrap() {
        let key = format!(
            "{} {} {} {} {:#x}",
            q["iface"].as_str().unwrap(),
            q["dir"].as_str().unwrap(),
            q["src"].as_str().unwrap(),
            q["dst"].as_str().unwrap(),
            q["qp"].as_u64().unwrap()
        );
        got.insert(key, q.clone());
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{name}: QP keys differ"
    );
    let mut fields = 0;
    for (k, w) in &want {
        let g = &got[k];
        for (f, wv) in w.as_object().unwrap() {
            // replay's histograms list only non-zero buckets, as derived here.
            let gv = &g[f];
            assert_eq!(
                gv, wv,
                "{name}: QP {k}: field {f}: replay {gv} vs tshark {wv}"
            );
            fields += 1;
        }
    }
    let (got_pfc, got_roce) = replay_pfc(&s);
    assert_eq!(got_pfc, want_pfc, "{name}: PFC/PAUSE totals");
    assert_eq!(got_roce, want_roce, "{name}: RoCEv2 packets");
    fields
}

#[test]
fn corpus_matches_tshark_field_by_field() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("replay-tshark-{}", std::process::id()));
    let files = corpus::write_corpus(&dir).unwrap();
    let mut total = 0;
    for (c, p) in &files {
        let lt = if c.pcapng.is_some() { 0 } else { c.linktype };
        let n = compare(c.name, p, lt, c.decode_as_port);
        eprintln!("{}: {n} fields equal", c.name);
        total += n;
    }
    assert!(files.len() >= 25);
    assert!(total > 1000, "compared {total} fields");
}

#[test]
fn oferby_matches_tshark_field_by_field() {
    let p = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/captures/oferby_proxy_roce.pcap"
    ));
    let n = compare("oferby", p, corpus::LINKTYPE_ETHERNET, Some(69));
    assert!(n > 50);
}
