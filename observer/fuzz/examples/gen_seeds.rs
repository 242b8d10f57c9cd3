//! Writes the fuzz targets' seed corpora (`corpus/<target>/`), from the tests' capture corpus
//! and frame builder (`test_support::corpus`, `observer_common::frames`), the
//! observer's own Parquet writer (a replay through the collector) and a list of policy files.
//! Run from observer/fuzz: `AYA_BUILD_SKIP=1 cargo run --example gen_seeds` (it replaces the
//! seed directories). Every seed is kept small: the corpora are a few hundred KB in all.

use std::fs;
use std::path::{Path, PathBuf};

use test_support::corpus::{self, LINKTYPE_ETHERNET, Rec, Roce};

const T0: u64 = 1_700_000_000_000_000_000;
const A: [u8; 4] = [10, 77, 1, 1];
const B: [u8; 4] = [10, 77, 1, 2];
/// Records kept of each test-corpus case.
const KEEP: usize = 6;
/// Corpus cases used (the rest are covered by these or by the structural seeds below).
const CASES: &[&str] = &[
    "clean",
    "go_back_n",
    "ecn_ce_cnp",
    "pfc",
    "ipv6",
    "qinq",
    "fragments",
    "garbage_short_bth",
    "snaplen_in_bth",
    "erspan",
    "sll",
    "sll2",
    "pcapng_two_ifaces",
    "pcapng_direction",
    "nanos",
];

fn small_exchange(n: u32) -> Vec<Vec<u8>> {
    let mut f = Vec::new();
    for p in 0..n {
        f.push(Roce::v4(A, B, 0x11, p).payload(32).frame());
        f.push(Roce::v4(B, A, 0x22, p).ack(0x1f).frame());
    }
    f
}

fn recs(frames: Vec<Vec<u8>>, iface: u32) -> Vec<Rec> {
    frames
        .into_iter()
        .enumerate()
        .map(|(i, data)| Rec {
            ts_ns: T0 + i as u64 * 1000,
            data,
            iface,
            epb_flags: 0,
        })
        .collect()
}

/// A big-endian pcap (microseconds; `modified`: the 24-byte record headers of the "modified"
/// pcap format, magic a1b2cd34).
fn pcap_be(frames: &[Vec<u8>], modified: bool) -> Vec<u8> {
    let mut w = Vec::new();
    let magic: u32 = if modified { 0xa1b2_cd34 } else { 0xa1b2_c3d4 };
    w.extend_from_slice(&magic.to_be_bytes());
    w.extend_from_slice(&2u16.to_be_bytes());
    w.extend_from_slice(&4u16.to_be_bytes());
    w.extend_from_slice(&0i32.to_be_bytes());
    w.extend_from_slice(&0u32.to_be_bytes());
    w.extend_from_slice(&65535u32.to_be_bytes());
    w.extend_from_slice(&LINKTYPE_ETHERNET.to_be_bytes());
    for (i, f) in frames.iter().enumerate() {
        w.extend_from_slice(&(1_700_000_000u32 + i as u32).to_be_bytes());
        w.extend_from_slice(&(i as u32 * 10).to_be_bytes());
        w.extend_from_slice(&(f.len() as u32).to_be_bytes());
        w.extend_from_slice(&(f.len() as u32).to_be_bytes());
        if modified {
            w.extend_from_slice(&3u32.to_be_bytes()); // ifindex
            w.extend_from_slice(&0x0800u16.to_be_bytes()); // protocol
            w.push(0); // packet type
            w.push(0); // pad
        }
        w.extend_from_slice(f);
    }
    w
}

/// A little-endian pcap whose link-type field carries a 4-byte FCS (bit 26, length in 16-bit
/// words in bits 28-31); every frame gets 4 bytes of FCS appended.
fn pcap_fcs(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    corpus::write_pcap_header(&mut w, 1 | (1 << 26) | (2 << 28), 65535, false).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let mut f = f.clone();
        f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        corpus::write_pcap_record(&mut w, 65535, false, T0 + i as u64 * 1000, &f).unwrap();
    }
    w
}

/// One pcapng block.
fn block(w: &mut Vec<u8>, ty: u32, body: &[u8]) {
    let pad = (4 - body.len() % 4) % 4;
    let len = (12 + body.len() + pad) as u32;
    w.extend_from_slice(&ty.to_le_bytes());
    w.extend_from_slice(&len.to_le_bytes());
    w.extend_from_slice(body);
    w.extend_from_slice(&[0u8; 3][..pad]);
    w.extend_from_slice(&len.to_le_bytes());
}

/// pcapng: one section with `n_ifaces` option-less Ethernet IDBs, `frames` as EPBs on the last
/// interface, and the first frame again as a Simple Packet Block (interface 0).
fn pcapng_many_ifaces(n_ifaces: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    corpus::write_pcapng(&mut w, &[], &[]).unwrap(); // the SHB only
    for _ in 0..n_ifaces {
        let mut idb = Vec::new();
        idb.extend_from_slice(&1u16.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&0u32.to_le_bytes());
        block(&mut w, 1, &idb);
    }
    for (i, f) in frames.iter().enumerate() {
        let mut epb = Vec::new();
        epb.extend_from_slice(&(n_ifaces - 1).to_le_bytes());
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&(i as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(f);
        epb.resize(epb.len() + (4 - f.len() % 4) % 4, 0);
        block(&mut w, 6, &epb);
    }
    // A Simple Packet Block (interface 0) too.
    if let Some(f) = frames.first() {
        let mut spb = (f.len() as u32).to_le_bytes().to_vec();
        spb.extend_from_slice(f);
        block(&mut w, 3, &spb);
    }
    w
}

/// pcapng with two sections of two interfaces each (names, ns and 2^-20 s resolutions).
fn pcapng_sections(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    let ifs = [
        (LINKTYPE_ETHERNET, "swp1", 9u8),
        (LINKTYPE_ETHERNET, "swp2", 0x80 | 20),
    ];
    let mut r = recs(frames.to_vec(), 0);
    for (i, x) in r.iter_mut().enumerate() {
        x.iface = (i % 2) as u32;
        x.epb_flags = if i % 2 == 0 { 2 } else { 1 };
    }
    corpus::write_pcapng(&mut w, &ifs, &r).unwrap();
    let first: Vec<Rec> = r[..r.len() / 2]
        .iter()
        .map(|x| Rec {
            iface: 0,
            ..x.clone()
        })
        .collect();
    corpus::write_pcapng(&mut w, &ifs[..1], &first).unwrap();
    w
}

/// Big-endian pcapng: SHB, one IDB, EPBs.
fn pcapng_be(frames: &[Vec<u8>]) -> Vec<u8> {
    fn block_be(w: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        w.extend_from_slice(&ty.to_be_bytes());
        w.extend_from_slice(&len.to_be_bytes());
        w.extend_from_slice(body);
        w.extend_from_slice(&[0u8; 3][..pad]);
        w.extend_from_slice(&len.to_be_bytes());
    }
    let mut w = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_be_bytes());
    shb.extend_from_slice(&1u16.to_be_bytes());
    shb.extend_from_slice(&0u16.to_be_bytes());
    shb.extend_from_slice(&(-1i64).to_be_bytes());
    block_be(&mut w, 0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_be_bytes());
    idb.extend_from_slice(&0u16.to_be_bytes());
    idb.extend_from_slice(&0u32.to_be_bytes());
    block_be(&mut w, 1, &idb);
    for (i, f) in frames.iter().enumerate() {
        let mut epb = Vec::new();
        epb.extend_from_slice(&0u32.to_be_bytes());
        epb.extend_from_slice(&0u32.to_be_bytes());
        epb.extend_from_slice(&(i as u32).to_be_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_be_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_be_bytes());
        epb.extend_from_slice(f);
        epb.resize(epb.len() + (4 - f.len() % 4) % 4, 0);
        block_be(&mut w, 6, &epb);
    }
    w
}

fn write(dir: &Path, name: &str, data: &[u8]) {
    fs::write(dir.join(name), data).unwrap();
}

/// Every capture seed: (name, bytes).
fn captures() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for mut c in corpus::corpus()
        .into_iter()
        .filter(|c| CASES.contains(&c.name))
    {
        c.recs.truncate(KEEP);
        let mut w = Vec::new();
        match &c.pcapng {
            Some(ifs) => corpus::write_pcapng(&mut w, ifs, &c.recs).unwrap(),
            None => corpus::write_pcap(&mut w, c.linktype, c.snaplen, c.nanos, &c.recs).unwrap(),
        }
        out.push((c.file_name(), w));
    }
    let f = small_exchange(4);
    let mut le = Vec::new();
    corpus::write_pcap(
        &mut le,
        LINKTYPE_ETHERNET,
        65535,
        false,
        &recs(f.clone(), 0),
    )
    .unwrap();
    let mut ns = Vec::new();
    corpus::write_pcap(&mut ns, LINKTYPE_ETHERNET, 65535, true, &recs(f.clone(), 0)).unwrap();
    out.push(("le_usec.pcap".into(), le.clone()));
    out.push(("le_nsec.pcap".into(), ns));
    out.push(("be_usec.pcap".into(), pcap_be(&f, false)));
    out.push(("be_modified.pcap".into(), pcap_be(&f, true)));
    out.push(("fcs4.pcap".into(), pcap_fcs(&f)));
    let sections = pcapng_sections(&f);
    out.push(("two_sections.pcapng".into(), sections.clone()));
    out.push(("be.pcapng".into(), pcapng_be(&f)));
    out.push((
        "many_ifaces.pcapng".into(),
        pcapng_many_ifaces(1000, &f[..2]),
    ));
    // Truncated: in the file header, in a record header, in a record's data; a pcapng cut in
    // the SHB, in a block, and before its trailing length.
    out.push(("cut_header.pcap".into(), le[..13].to_vec()));
    out.push(("cut_rec_header.pcap".into(), le[..24 + 9].to_vec()));
    out.push(("cut_rec_data.pcap".into(), le[..le.len() - 7].to_vec()));
    out.push(("cut_shb.pcapng".into(), sections[..20].to_vec()));
    out.push((
        "cut_block.pcapng".into(),
        sections[..sections.len() / 2 + 3].to_vec(),
    ));
    out.push((
        "cut_trailer.pcapng".into(),
        sections[..sections.len() - 2].to_vec(),
    ));
    // Corrupt lengths: caplen 0xffffffff; caplen > snaplen (65535) but present; orig_len <
    // caplen; pcapng block length not a multiple of 4, below the minimum, huge, and a trailing
    // length that differs.
    let mut x = le.clone();
    x[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    out.push(("caplen_max.pcap".into(), x));
    let mut x = le.clone();
    x[24 + 8..24 + 12].copy_from_slice(&70_000u32.to_le_bytes());
    out.push(("caplen_over_snaplen.pcap".into(), x));
    let mut x = le.clone();
    x[24 + 12..24 + 16].copy_from_slice(&10u32.to_le_bytes());
    out.push(("origlen_short.pcap".into(), x));
    // The first block after the SHB (28 bytes) is the first IDB.
    for (name, len) in [
        ("blocklen_odd.pcapng", 23u32),
        ("blocklen_tiny.pcapng", 8),
        ("blocklen_huge.pcapng", 0x7fff_fff0),
    ] {
        let mut x = sections.clone();
        x[28 + 4..28 + 8].copy_from_slice(&len.to_le_bytes());
        out.push((name.into(), x));
    }
    // A Process Information Block (0x80000001) of length 10: pcap-parser 0.17 computes
    // `block_len - 12` (an overflow panic where overflow checks are on, e.g. debug builds).
    let mut x = sections[..28].to_vec();
    x.extend_from_slice(&0x8000_0001u32.to_le_bytes());
    x.extend_from_slice(&10u32.to_le_bytes());
    x.extend_from_slice(&[0; 8]);
    out.push(("pib_len_10.pcapng".into(), x));
    let mut x = sections.clone();
    let idb_len = u32::from_le_bytes(x[32..36].try_into().unwrap()) as usize;
    x[28 + idb_len - 4..28 + idb_len].copy_from_slice(&999u32.to_le_bytes());
    out.push(("blocklen_trailer_differs.pcapng".into(), x));
    out
}

/// The streamed target's form: `[k][k piece sizes][capture]`.
fn streamed(sizes: &[u8], cap: &[u8]) -> Vec<u8> {
    let mut v = vec![sizes.len() as u8];
    v.extend_from_slice(sizes);
    v.extend_from_slice(cap);
    v
}

const POLICIES: &[(&str, &str)] = &[
    (
        "every_key.toml",
        "profile = \"broadcom\"\nrdma_priority = 4\nexpected_mtu = 1024\n\n[data]\ndscp = 24\npcp = 4\necn = \"ect\"\n\n[ack]\ndscp = \"any\"\npcp = \"any\"\necn = \"any\"\n\n[cnp]\ndscp = 48\npcp = \"untagged\"\necn = \"any\"\n\n[thresholds]\npfc_storm_xoff_per_s = 50\nce_without_cnp_min_ce = 3\npfc_without_ecn_min_xoff = 2\nhold_down_s = 2.5\n",
    ),
    ("empty.toml", ""),
    (
        "nvidia_int_hold.toml",
        "profile = \"nvidia\"\n[thresholds]\nhold_down_s = 0\n",
    ),
    ("err_syntax.toml", "rdma_priority = \n[data\n"),
    ("err_unknown_key.toml", "rdma_prio = 3\n"),
    (
        "err_unknown_section_key.toml",
        "[data]\ndscp = 26\ncolour = 1\n",
    ),
    ("err_unknown_section.toml", "[pfc]\nenabled = true\n"),
    ("err_unknown_profile.toml", "profile = \"acme\"\n"),
    ("err_profile_type.toml", "profile = 3\n"),
    ("err_range.toml", "rdma_priority = 3\n\n[data]\ndscp = 64\n"),
    ("err_type.toml", "[cnp]\npcp = \"high\"\n"),
    ("err_mtu.toml", "expected_mtu = 1500\n"),
    ("err_ecn.toml", "[data]\necn = 2\n"),
    (
        "err_threshold_zero.toml",
        "[thresholds]\npfc_storm_xoff_per_s = 0\n",
    ),
    ("err_hold_down.toml", "[thresholds]\nhold_down_s = -1.5\n"),
    (
        "err_hold_down_nan.toml",
        "[thresholds]\nhold_down_s = nan\n",
    ),
    (
        "err_duplicate.toml",
        "rdma_priority = 3\nrdma_priority = 4\n",
    ),
    ("err_section_not_table.toml", "data = 5\n"),
];

/// A flows table written by the real collector: the `ecn_ce_cnp` and `clean` cases replayed.
/// Returns (flows file, interfaces file).
fn parquet_files(tmp: &Path) -> (Vec<u8>, Vec<u8>) {
    use observer::pipeline::{Collector, CollectorConfig, PolicyConfig};
    use observer::sources::capture::{Replay, ReplayOptions};
    let policy = PolicyConfig::profile("nvidia").unwrap();
    let out = tmp.join("out");
    let mut col = Collector::new(CollectorConfig::new(
        out.clone(),
        "f",
        "replay",
        policy.clone(),
    ))
    .unwrap();
    col.quiet_stderr();
    {
        let opts = ReplayOptions {
            policy: policy.expected,
            ..ReplayOptions::default()
        };
        let mut r = Replay::new(opts, &mut col);
        for c in corpus::corpus()
            .into_iter()
            .filter(|c| ["clean", "ecn_ce_cnp"].contains(&c.name))
        {
            let mut c = c;
            c.recs.truncate(12);
            let mut w = Vec::new();
            corpus::write_pcap(&mut w, c.linktype, c.snaplen, c.nanos, &c.recs).unwrap();
            r.feed_slice(c.name, c.name, &w).unwrap();
        }
    }
    col.finish().unwrap();
    let find = |table: &str| -> Vec<u8> {
        let mut stack = vec![out.join(table)];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "parquet") {
                    return fs::read(p).unwrap();
                }
            }
        }
        panic!("no {table} file written");
    };
    (find("flows"), find("interfaces"))
}

/// `struct nlattr` + payload, padded to 4 bytes.
fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
    v.extend(ty.to_ne_bytes());
    v.extend(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

fn nest(ty: u16, children: &[Vec<u8>]) -> Vec<u8> {
    nla(ty | 0x8000, &children.concat())
}

/// mlx5 raw QP contexts (both payload layouts) of QP 0x1a2 whose remote QP is the number the
/// target reads from the first three bytes, and RDMA netlink replies: a QP dump message and a
/// counter dump message as the kernel lays them out (docs/qps.md).
fn rdma_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let m = qps::mlx5::Mlx5Qp {
        qpn: 0x1a2,
        state: 3,
        st: 0,
        mtu: 5,
        // The dump's first bytes: the info segment's header 00 04 ff fe.
        remote_qpn: 0x0004ff,
        tclass: 106,
        eth_prio: 3,
        rgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 4, 2],
        next_send_psn: 0x100,
        last_acked_psn: 0xf0,
        next_rcv_psn: 7,
        qpc_offset: 24,
    };
    let u32a = |k: u16, v: u32| nla(k, &v.to_ne_bytes());
    let qp_entry = nest(
        20,
        &[
            u32a(3, 1),
            u32a(21, 0x1a2),
            u32a(28, 4242),
            u32a(22, 0x4ff),
            u32a(23, 7),
            u32a(24, 0x100),
            nla(26, &[2]),
            nla(27, &[3]),
        ],
    );
    let mut qp_msg = u32a(1, 3);
    qp_msg.extend(nla(2, b"mlx5_0\0"));
    qp_msg.extend(nest(19, &[qp_entry]));
    let hw = |n: &str, v: u64| {
        let mut name = n.as_bytes().to_vec();
        name.push(0);
        nest(81, &[nla(82, &name), nla(83, &v.to_ne_bytes())])
    };
    let counter = nest(
        78,
        &[
            u32a(3, 1),
            u32a(79, 7),
            u32a(74, 1),
            nla(26, &[2]),
            u32a(28, 4242),
            nest(19, &[nest(20, &[u32a(21, 0x1a2)])]),
            nest(80, &[hw("out_of_sequence", 3), hw("local_ack_timeout_err", 1)]),
        ],
    );
    let mut counter_msg = u32a(1, 3);
    counter_msg.extend(nla(2, b"mlx5_0\0"));
    counter_msg.extend(nest(77, &[counter]));
    vec![
        ("mlx5_query_qp_out.bin", qps::mlx5::lay_out(&m, true)),
        ("mlx5_qpc.bin", qps::mlx5::lay_out(&m, false)),
        ("nl_qp_dump.bin", qp_msg),
        ("nl_counter_dump.bin", counter_msg),
    ]
}

fn main() {
    let root = PathBuf::from("corpus");
    let dir = |t: &str| {
        let d = root.join(t);
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    };
    let caps = captures();
    let (slice, stream, replay) = (dir("pcap_slice"), dir("pcap_stream"), dir("replay"));
    let patterns: [&[u8]; 3] = [&[1], &[7, 64, 0, 13], &[200, 2, 255]];
    for (i, (name, data)) in caps.iter().enumerate() {
        write(&slice, name, data);
        write(&replay, name, data);
        write(&stream, name, &streamed(patterns[i % patterns.len()], data));
    }
    let policy = dir("policy");
    for (name, text) in POLICIES {
        write(&policy, name, text.as_bytes());
    }
    let load = dir("analyze_load");
    let tmp = std::env::temp_dir().join(format!("roce-fuzz-seeds-{}", std::process::id()));
    let (flows, ifaces) = parquet_files(&tmp);
    let _ = fs::remove_dir_all(&tmp);
    write(&load, "flows.parquet", &flows);
    write(&load, "interfaces_as_flows.parquet", &ifaces);
    write(&load, "flows_cut.parquet", &flows[..flows.len() / 2]);
    write(&load, "flows_no_footer.parquet", &flows[..flows.len() - 8]);
    let rdma = dir("rdma_decode");
    for (name, data) in rdma_seeds() {
        write(&rdma, name, &data);
    }
    for t in [
        "pcap_slice",
        "pcap_stream",
        "replay",
        "policy",
        "rdma_decode",
        "analyze_load",
    ] {
        let (n, bytes) = fs::read_dir(root.join(t))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .fold((0, 0), |(n, b), l| (n + 1, b + l));
        println!("corpus/{t}: {n} seeds, {bytes} bytes");
    }
}
