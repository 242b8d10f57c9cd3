//! Replay's inputs under hostile or unusual captures: many interface description blocks with
//! few packets (cost follows packets), every pcap byte order and variant, trailing FCS bytes,
//! a non-blocking standard input, the kernel's PFC source-MAC limit, and interface names with
//! control characters. Every capture is generated here.

use test_support::{TempDir, corpus};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use observer::sources::capture::pcap_reader::{MAX_IFACES, MAX_NAME_CHARS};
use observer::sources::capture::{Replay, ReplayError, ReplayOptions};
use observer::sources::datapath::Datapath;
use observer::sources::{Consumer, ConsumerError, Discard, Snapshot};
use observer_common::maps::{Event, Policy};
use serde_json::Value;

use corpus::Roce;

/// Capture time of the first frame (whole microseconds, so every variant stores it exactly).
const T0: u64 = 1_700_000_000_000_000_000;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_roce-observe")
}

/// A few frames of every kind the counts distinguish: RoCE writes of two QPs, an ACK, a CNP,
/// a PFC frame; 10 us apart.
fn frames() -> Vec<(u64, Vec<u8>)> {
    let mut v = Vec::new();
    for psn in 0..8 {
        v.push(Roce::v4([10, 0, 0, 1], [10, 0, 0, 2], 0x11, psn).payload(256 + psn as usize));
        v.push(Roce::v4([10, 0, 0, 3], [10, 0, 0, 4], 0x22, psn).payload(64));
    }
    v.push(Roce::v4([10, 0, 0, 2], [10, 0, 0, 1], 0x33, 7).ack(0));
    v.push(Roce::v4([10, 0, 0, 2], [10, 0, 0, 1], 0x44, 0).cnp());
    let mut f: Vec<Vec<u8>> = v.iter().map(Roce::frame).collect();
    f.push(corpus::pfc(
        corpus::MAC_A,
        0x08,
        [0, 0, 0, 0xffff, 0, 0, 0, 0],
    ));
    f.into_iter()
        .enumerate()
        .map(|(i, d)| (T0 + i as u64 * 10_000, d))
        .collect()
}

/// A pcap file in one of its six forms. `linktype` is the whole link-type field (FCS bits
/// included); `fcs` bytes are appended to every frame (and counted in its original length);
/// records are cut at `snaplen`.
#[derive(Clone, Copy)]
struct PcapForm {
    big_endian: bool,
    nanos: bool,
    modified: bool,
    linktype: u32,
    fcs: usize,
    snaplen: u32,
}

impl Default for PcapForm {
    fn default() -> Self {
        PcapForm {
            big_endian: false,
            nanos: false,
            modified: false,
            linktype: 1,
            fcs: 0,
            snaplen: 65535,
        }
    }
}

fn write_pcap(form: PcapForm, frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let u32b = |v: u32| {
        if form.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if form.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let magic: u32 = match (form.modified, form.nanos) {
        (true, _) => 0xa1b2_cd34,
        (false, true) => 0xa1b2_3c4d,
        (false, false) => 0xa1b2_c3d4,
    };
    out.extend_from_slice(&u32b(magic));
    out.extend_from_slice(&u16b(2));
    out.extend_from_slice(&u16b(4));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(form.snaplen));
    out.extend_from_slice(&u32b(form.linktype));
    for (ts, data) in frames {
        let mut data = data.clone();
        data.extend(std::iter::repeat_n(0xa5, form.fcs));
        let cap = data.len().min(form.snaplen as usize);
        let frac = if form.nanos {
            ts % 1_000_000_000
        } else {
            ts % 1_000_000_000 / 1000
        };
        out.extend_from_slice(&u32b((ts / 1_000_000_000) as u32));
        out.extend_from_slice(&u32b(frac as u32));
        out.extend_from_slice(&u32b(cap as u32));
        out.extend_from_slice(&u32b(data.len() as u32));
        if form.modified {
            out.extend_from_slice(&u32b(3)); // ifindex
            out.extend_from_slice(&u16b(0x0800)); // protocol
            out.extend_from_slice(&[0, 0]); // packet type, padding
        }
        out.extend_from_slice(&data[..cap]);
    }
    out
}

/// A pcapng interface: name option bytes (None: no if_name), if_fcslen, link type.
struct NgIface<'a> {
    name: Option<&'a [u8]>,
    fcslen: Option<u8>,
}

/// A pcapng record: interface, time (ns; if_tsresol is the default microseconds), frame,
/// trailing FCS bytes appended, epb_flags (0: none).
struct NgRec<'a> {
    iface: u32,
    ts: u64,
    data: &'a [u8],
    fcs: usize,
    flags: u32,
}

fn write_pcapng(ifaces: &[NgIface<'_>], recs: &[NgRec<'_>]) -> Vec<u8> {
    fn block(w: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        w.extend_from_slice(&ty.to_le_bytes());
        w.extend_from_slice(&len.to_le_bytes());
        w.extend_from_slice(body);
        w.extend_from_slice(&[0u8; 3][..pad]);
        w.extend_from_slice(&len.to_le_bytes());
    }
    fn opt(b: &mut Vec<u8>, code: u16, v: &[u8]) {
        b.extend_from_slice(&code.to_le_bytes());
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v);
        b.resize(b.len() + (4 - v.len() % 4) % 4, 0);
    }
    let mut w = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut w, 0x0a0d_0d0a, &shb);
    for ifc in ifaces {
        let mut idb = Vec::new();
        idb.extend_from_slice(&1u16.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&0u32.to_le_bytes());
        if ifc.name.is_some() || ifc.fcslen.is_some() {
            if let Some(n) = ifc.name {
                opt(&mut idb, 2, n);
            }
            if let Some(f) = ifc.fcslen {
                opt(&mut idb, 13, &[f]);
            }
            opt(&mut idb, 0, &[]);
        }
        block(&mut w, 1, &idb);
    }
    for r in recs {
        let mut data = r.data.to_vec();
        data.extend(std::iter::repeat_n(0xa5, r.fcs));
        let ts = r.ts / 1000;
        let mut epb = Vec::new();
        epb.extend_from_slice(&r.iface.to_le_bytes());
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&data);
        epb.resize(epb.len() + (4 - data.len() % 4) % 4, 0);
        if r.flags != 0 {
            opt(&mut epb, 2, &r.flags.to_le_bytes());
            opt(&mut epb, 0, &[]);
        }
        block(&mut w, 6, &epb);
    }
    w
}

/// Records what the collector would get.
#[derive(Default)]
struct Recorder {
    begun: Vec<String>,
    snaps: Vec<Snapshot>,
    events: Vec<(String, Event)>,
}
impl Consumer for Recorder {
    fn begin(&mut self, iface: &str, _start_ns: u64, _link_speed_bps: Option<u64>) {
        self.begun.push(iface.to_string());
    }
    fn events(&mut self, iface: &str, ev: &[Event]) -> Result<(), ConsumerError> {
        self.events
            .extend(ev.iter().map(|e| (iface.to_string(), *e)));
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> Result<(), ConsumerError> {
        self.snaps.push(s.clone());
        Ok(())
    }
}

/// The summary of one capture held in memory, read both ways (streamed and from the slice,
/// which must agree), named `x`.
fn summary_of(data: &[u8]) -> Result<Value, ReplayError> {
    let mut o1 = Discard;
    let mut a = Replay::new(ReplayOptions::default(), &mut o1);
    let ra = a.feed("x", "x", data, None);
    let mut o2 = Discard;
    let mut b = Replay::new(ReplayOptions::default(), &mut o2);
    let rb = b.feed_slice("x", "x", data);
    let sa = observer::sinks::summary_json::summary_json(&a.snapshots());
    let sb = observer::sinks::summary_json::summary_json(&b.snapshots());
    assert_eq!(sa, sb, "streamed and in-memory readings differ");
    match (ra, rb) {
        (Ok(x), Ok(y)) => {
            assert_eq!(x.frames, y.frames);
            Ok(sa)
        }
        (Err(e), Err(_)) => Err(e),
        (x, y) => panic!("streamed {x:?}, in memory {y:?}"),
    }
}

fn iface_frames(s: &Value) -> u64 {
    s["interfaces"][0]["frames"].as_u64().unwrap()
}

// 1. Many interface description blocks, few packets.

#[test]
fn declared_interfaces_without_packets_cost_nothing() {
    let n = 4000;
    let ifaces: Vec<NgIface<'_>> = (0..n)
        .map(|_| NgIface {
            name: None,
            fcslen: None,
        })
        .collect();
    let f = Roce::v4([10, 0, 0, 1], [10, 0, 0, 2], 0x11, 0).frame();
    // Six packets, one second apart, on interfaces 7 and 3999: five intervals.
    let recs: Vec<NgRec<'_>> = (0..6)
        .map(|i| NgRec {
            iface: if i % 2 == 0 { 7 } else { 3999 },
            ts: T0 + i * 1_000_000_000,
            data: &f,
            fcs: 0,
            flags: 0,
        })
        .collect();
    let data = write_pcapng(&ifaces, &recs);
    let t = Instant::now();
    let mut rec = Recorder::default();
    let mut rp = Replay::new(ReplayOptions::default(), &mut rec);
    let st = rp.feed("m.pcapng", "m", &data[..], None).unwrap();
    let finals = rp.snapshots();
    drop(rp);
    let took = t.elapsed();
    assert_eq!(st.frames, 6);
    let names: Vec<&str> = finals.iter().map(|s| s.iface.as_str()).collect();
    assert_eq!(names, ["m:if7", "m:if3999"]);
    assert!(
        rec.snaps
            .iter()
            .all(|s| s.iface == "m:if7" || s.iface == "m:if3999"),
        "a snapshot of an interface without packets"
    );
    // Boundaries at +1 s .. +5 s, then the end (+5 s): each interval is snapshotted for the
    // interface that had its packet (an interface without a frame since its last snapshot is
    // quiet, no snapshot): one per packet.
    assert_eq!(rec.snaps.len(), 6, "{}", rec.snaps.len());
    assert_eq!(rec.begun, ["m:if7", "m:if3999"]);
    assert!(took < Duration::from_secs(2), "{n} IDBs took {took:?}");

    // Through the binary with the collector: the interfaces table and the summary hold only
    // the two interfaces with packets.
    let tmp = TempDir::new("replay-inputs-many-idbs");
    let d = tmp.path().to_path_buf();
    let p = d.join("m.pcapng");
    std::fs::write(&p, &data).unwrap();
    let t = Instant::now();
    let out = Command::new(bin())
        .args(["replay", "--profile", "none", "--json", "--out"])
        .arg(d.join("out"))
        .arg(&p)
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["interfaces"].as_array().unwrap().len(), 2, "{s:#}");
    assert!(took < Duration::from_secs(10), "the CLI took {took:?}");
}

#[test]
fn interface_count_is_bounded() {
    let f = Roce::v4([10, 0, 0, 1], [10, 0, 0, 2], 0x11, 0).frame();
    let ifaces: Vec<NgIface<'_>> = (0..MAX_IFACES + 1)
        .map(|_| NgIface {
            name: None,
            fcslen: None,
        })
        .collect();
    let mut data = write_pcapng(&ifaces[..1], &[]);
    // A packet of interface 0, then the rest of the interfaces (SHB + first IDB written).
    let rest = write_pcapng(
        &ifaces[..MAX_IFACES + 1],
        &[NgRec {
            iface: 0,
            ts: T0,
            data: &f,
            fcs: 0,
            flags: 0,
        }],
    );
    // rest = SHB, IDB * (MAX+1), EPB: keep its EPB first, then its IDBs after the first.
    let shb_len = 28;
    let idb_len = 20;
    let epb_start = shb_len + idb_len * (MAX_IFACES + 1);
    data.extend_from_slice(&rest[epb_start..]);
    data.extend_from_slice(&rest[shb_len + idb_len..epb_start]);
    let mut o = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut o);
    let e = rp.feed("big.pcapng", "big", &data[..], None).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, ReplayError::Corrupt { .. }) && msg.contains(&MAX_IFACES.to_string()),
        "{msg}"
    );
    // Everything before the limit was processed.
    assert_eq!(rp.frames, 1);
    assert_eq!(rp.snapshots().len(), 1);
}

// 2. Every pcap byte order and variant.

#[test]
fn pcap_in_every_byte_order_and_variant() {
    let fr = frames();
    let reference = summary_of(&write_pcap(PcapForm::default(), &fr)).unwrap();
    assert_eq!(iface_frames(&reference), fr.len() as u64);
    for big_endian in [false, true] {
        for (nanos, modified) in [(false, false), (true, false), (false, true)] {
            let form = PcapForm {
                big_endian,
                nanos,
                modified,
                ..PcapForm::default()
            };
            let s = summary_of(&write_pcap(form, &fr)).unwrap_or_else(|e| {
                panic!("big_endian {big_endian} nanos {nanos} modified {modified}: {e}")
            });
            assert_eq!(
                s, reference,
                "big_endian {big_endian} nanos {nanos} modified {modified}"
            );
        }
    }
    // Cut short inside a big-endian modified record: the damage is where that record starts.
    let data = write_pcap(
        PcapForm {
            big_endian: true,
            modified: true,
            ..PcapForm::default()
        },
        &fr,
    );
    let first = 24 + 24 + fr[0].1.len();
    let e = summary_of(&data[..first + 30]).unwrap_err();
    assert!(
        matches!(e, ReplayError::Corrupt { offset, .. } if offset == first as u64),
        "{e}"
    );
}

// 3. Trailing FCS bytes.

#[test]
fn fcs_is_removed_before_counting() {
    let fr = frames();
    let plain = summary_of(&write_pcap(PcapForm::default(), &fr)).unwrap();
    // libpcap / Wireshark: bit 26 (FCS length present), 2 16-bit words in bits 28-31.
    let libpcap = PcapForm {
        linktype: 1 | 0x0400_0000 | (2 << 28),
        fcs: 4,
        ..PcapForm::default()
    };
    assert_eq!(summary_of(&write_pcap(libpcap, &fr)).unwrap(), plain);
    // The first pcap drafts: bit 28 (FCS present), 2 words in bits 29-31.
    let draft = PcapForm {
        linktype: 1 | 0x1000_0000 | (2 << 29),
        fcs: 4,
        ..PcapForm::default()
    };
    assert_eq!(summary_of(&write_pcap(draft, &fr)).unwrap(), plain);
    // Big-endian, and cut by a snaplen (the FCS is not captured, the original length still
    // holds it).
    for snaplen in [60, 1000] {
        let cut_plain = summary_of(&write_pcap(
            PcapForm {
                snaplen,
                ..PcapForm::default()
            },
            &fr,
        ))
        .unwrap();
        let cut_fcs = PcapForm {
            big_endian: true,
            snaplen,
            ..libpcap
        };
        assert_eq!(
            summary_of(&write_pcap(cut_fcs, &fr)).unwrap(),
            cut_plain,
            "snaplen {snaplen}"
        );
    }
    // pcapng: if_fcslen (bytes, and 32 meaning bits), and epb_flags bits 5-8.
    let ng = |fcslen: Option<u8>, fcs: usize, flags: u32| {
        let recs: Vec<NgRec<'_>> = fr
            .iter()
            .map(|(ts, d)| NgRec {
                iface: 0,
                ts: *ts,
                data: d,
                fcs,
                flags,
            })
            .collect();
        summary_of(&write_pcapng(&[NgIface { name: None, fcslen }], &recs)).unwrap()
    };
    let ng_plain = ng(None, 0, 0);
    assert_eq!(
        ng_plain["qps"], plain["qps"],
        "pcapng and pcap of the same frames"
    );
    assert_eq!(ng(Some(4), 4, 0), ng_plain, "if_fcslen 4");
    assert_eq!(ng(Some(32), 4, 0), ng_plain, "if_fcslen 32 (bits)");
    assert_eq!(ng(None, 4, 4 << 5), ng_plain, "epb_flags FCS length 4");
}

// 4. A non-blocking standard input.

#[test]
fn non_blocking_stdin_is_waited_for() {
    let fr = frames();
    let capture = write_pcap(PcapForm::default(), &fr);
    let mut fds = [0i32; 2];
    // SAFETY: a fresh pipe; both ends are owned below. Close-on-exec, so that no child (of
    // this or a concurrent test) inherits the write end and keeps the pipe open.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fcntl on the pipe's read end, which this test owns.
    unsafe {
        let fl = libc::fcntl(fds[0], libc::F_GETFL);
        assert!(fl >= 0);
        assert_eq!(libc::fcntl(fds[0], libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
    }
    use std::os::fd::FromRawFd;
    // SAFETY: the pipe's ends, owned from here on.
    let (rd, wr) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let child = Command::new(bin())
        .args(["replay", "--no-out", "--profile", "none", "--json", "-"])
        .stdin(Stdio::from(rd))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Slowly: nothing for a while (the first read finds an empty non-blocking pipe), then
    // small pieces with pauses.
    let writer = std::thread::spawn(move || {
        let mut wr = wr;
        std::thread::sleep(Duration::from_millis(300));
        for c in capture.chunks(333) {
            wr.write_all(c).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // Bounded: a replay that never sees the end of its input is killed, and the test fails.
    let pid = child.id() as i32;
    let watchdog = std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: signal 0 only checks that our child still exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return false;
            }
        }
        // SAFETY: our child, by its pid.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        true
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(!watchdog.join().unwrap(), "replay did not end within 60 s");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(iface_frames(&s), fr.len() as u64, "{s:#}");
    assert_eq!(s["qps"].as_array().unwrap().len(), 4, "{s:#}");
}

// 5. The kernel's source-MAC limit.

#[test]
fn pfc_source_macs_are_limited_like_the_kernel() {
    let dp = Datapath::new(Policy::NONE, 65536);
    assert_eq!(
        dp.max_macs,
        observer::sources::kernel::MAX_MACS as usize,
        "the userspace datapath keeps as many MACs as the kernel's MACS map"
    );
    let extra = 76;
    let n = observer::sources::kernel::MAX_MACS as usize + extra;
    let fr: Vec<(u64, Vec<u8>)> = (0..n)
        .map(|i| {
            let mac = [0x02, 0, 0, 0, (i >> 8) as u8, i as u8];
            (
                T0 + i as u64 * 1000,
                corpus::pfc(mac, 0x08, [0, 0, 0, 0xffff, 0, 0, 0, 0]),
            )
        })
        .collect();
    let mut o = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut o);
    rp.feed_slice("pfc", "pfc", &write_pcap(PcapForm::default(), &fr))
        .unwrap();
    let s = &rp.snapshots()[0];
    assert_eq!(s.macs.len(), observer::sources::kernel::MAX_MACS as usize);
    assert_eq!(s.iface_stats[0].mac_insert_failed, extra as u64);
    assert_eq!(s.iface_stats[0].pfc.pfc_frames, n as u64);
}

// 6. Interface names from the capture.

#[test]
fn interface_names_are_made_printable() {
    let long = "n".repeat(300);
    let names: [&[u8]; 5] = [
        b"eth0\x1b[2J\x1b]0;owned\x07",
        b"a\nb\rc\x7f",
        long.as_bytes(),
        "x\u{202e}gpj.exe".as_bytes(),
        b"\xff\xfebad utf8",
    ];
    let ifaces: Vec<NgIface<'_>> = names
        .iter()
        .map(|n| NgIface {
            name: Some(n),
            fcslen: None,
        })
        .collect();
    let f = Roce::v4([10, 0, 0, 1], [10, 0, 0, 2], 0x11, 0).frame();
    let recs: Vec<NgRec<'_>> = (0..names.len() as u32)
        .map(|i| NgRec {
            iface: i,
            ts: T0 + i as u64,
            data: &f,
            fcs: 0,
            flags: 0,
        })
        .collect();
    let data = write_pcapng(&ifaces, &recs);
    let mut o = Discard;
    let mut rp = Replay::new(ReplayOptions::default(), &mut o);
    rp.feed_slice("n", "n", &data).unwrap();
    let got: Vec<String> = rp.snapshots().into_iter().map(|s| s.iface).collect();
    assert_eq!(got.len(), names.len(), "{got:?}");
    assert_eq!(got[0], "n:eth0?[2J?]0;owned?");
    assert_eq!(got[1], "n:a?b?c?");
    assert_eq!(got[2], format!("n:{}", "n".repeat(MAX_NAME_CHARS)));
    assert_eq!(got[3], "n:x?gpj.exe");
    assert!(got[4].ends_with("bad utf8"), "{got:?}");
    for g in &got {
        assert!(!g.chars().any(char::is_control), "{g:?}");
    }
    // Nothing raw reaches the terminal: the table and the JSON summary.
    let tmp = TempDir::new("replay-inputs-names");
    let d = tmp.path().to_path_buf();
    let p = d.join("n.pcapng");
    std::fs::write(&p, &data).unwrap();
    for json in [false, true] {
        let mut cmd = Command::new(bin());
        cmd.args(["replay", "--no-out", "--profile", "none"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(&p).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains('\x1b') && !text.contains('\x07') && !text.contains('\r'),
            "{text:?}"
        );
    }
}

// 7. The crash journal: a stream's, not a file's.

/// `pkts` of the flows table under `out`, summed per host (every final Parquet file).
fn flows_pkts_per_host(out: &Path) -> std::collections::BTreeMap<String, i64> {
    use arrow::array::{Array, Int64Array, StringArray};
    fn files(d: &Path, v: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, v);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                v.push(p);
            }
        }
    }
    let mut v = Vec::new();
    files(&out.join("flows"), &mut v);
    let mut m = std::collections::BTreeMap::new();
    for f in v {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for b in r {
            let b = b.unwrap();
            let host = b.column_by_name("host").unwrap();
            let host = host.as_any().downcast_ref::<StringArray>().unwrap();
            let pkts = b.column_by_name("pkts").unwrap();
            let pkts = pkts.as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..b.num_rows() {
                assert!(!pkts.is_null(i));
                *m.entry(host.value(i).to_string()).or_insert(0) += pkts.value(i);
            }
        }
    }
    m
}

/// A replay from standard input (a stream: its packets cannot be read again) journals its
/// rows, so a SIGKILL loses at most the interval being read and the next start recovers the
/// rest; a replay of files keeps no journal (it is run again from the files), unless
/// `--journal`. summary.json says which (`output.<table>.journal`).
#[test]
fn a_stream_is_journaled_and_recovered_files_are_not_journaled() {
    let tmp = TempDir::new("replay-inputs-journal");
    let dir = tmp.path().to_path_buf();
    let out = dir.join("out");
    // 60 writes of one QP, 1 ms apart: six intervals of 10 ms, ten writes each; the last one
    // stays open (no later frame closes it)
    let frames: Vec<(u64, Vec<u8>)> = (0..60u32)
        .map(|i| {
            let r = Roce::v4([10, 0, 0, 1], [10, 0, 0, 2], 0x11, i).payload(64);
            (T0 + i as u64 * 1_000_000, r.frame())
        })
        .collect();
    let capture = write_pcap(PcapForm::default(), &frames);
    let replay = |host: &str, extra: &[&str], input: &str| {
        let mut c = Command::new(bin());
        c.args([
            "replay",
            "--profile",
            "none",
            "--interval",
            "10ms",
            "--host",
            host,
        ])
        .arg("--out")
        .arg(&out)
        .args(extra)
        .arg(input);
        c
    };

    // the stream, killed while it waits for more input
    let mut child = replay("stream", &[], "-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&capture).unwrap();
    stdin.flush().unwrap();
    // Bounded: the flows journal holds the five closed intervals' rows (one key: a row each;
    // complete IPC messages only), or the test fails after 20 s.
    let journal_rows = || {
        let mut rows = 0;
        for e in std::fs::read_dir(out.join(".journal"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let n = e.file_name().to_string_lossy().into_owned();
            if !(n.starts_with("flows-") && n.ends_with(".journal")) {
                continue;
            }
            let Ok(f) = std::fs::File::open(e.path()) else {
                continue;
            };
            if let Ok(r) = arrow::ipc::reader::StreamReader::try_new(f, None) {
                rows += r.map_while(Result::ok).map(|b| b.num_rows()).sum::<usize>();
            }
        }
        rows
    };
    let t = Instant::now();
    while journal_rows() < 5 {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the flows journal under {} holds {} rows after 20 s, 5 expected",
                out.display(),
                journal_rows()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    drop(stdin);
    assert!(
        flows_pkts_per_host(&out).is_empty(),
        "the window was open: no final file yet"
    );

    // the files: the next start recovers the stream's closed intervals (and removes its crash
    // files), and keeps no journal of its own
    let file = dir.join("same.pcap");
    std::fs::write(&file, &capture).unwrap();
    let o = replay("files", &[], file.to_str().unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("recovered a window a crashed run had not completed"),
        "the recovery is said on stderr: {err}"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    for t in ["flows", "interfaces", "alerts"] {
        assert_eq!(summary["output"][t]["journal"], false, "{t}: {summary:#}");
    }
    let pkts = flows_pkts_per_host(&out);
    assert_eq!(
        pkts.get("stream"),
        Some(&50),
        "five closed intervals recovered: {pkts:?}"
    );
    assert_eq!(
        pkts.get("files"),
        Some(&60),
        "every write of the file: {pkts:?}"
    );
    assert_eq!(
        std::fs::read_dir(out.join(".journal")).map_or(0, |d| d.count()),
        0,
        "crash files left"
    );

    // --journal: a file run journaled too
    let o = replay("forced", &["--journal"], file.to_str().unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["output"]["flows"]["journal"], true, "{summary:#}");
    assert_eq!(flows_pkts_per_host(&out).get("forced"), Some(&60));
}
