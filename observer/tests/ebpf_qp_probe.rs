//! The modify-QP probe end to end with soft-RoCE (rdma_rxe): two namespaces joined by a veth
//! pair, an rxe device on each end, the probe attached, then a perftest `ib_write_bw` pair
//! (`--tclass=106`) and an `ibv_rc_pingpong` pair (traffic class 0) between them. Each QP's
//! record must carry its QP number, the peer's as destination, the traffic class, the source
//! GID index and the peer's address, the process, and the states RTR then RTS; `rdma res show
//! qp` agrees where it still lists the QPs. QP set-up (modify to RTR/RTS) happens as soon as
//! the out-of-band TCP exchange is done, so this checks on kernels where rxe carries no traffic
//! between namespaces (6.1, 6.12) as well as on 7.x. Needs root, the rdma_rxe module,
//! iproute2's `rdma`, perftest and ibverbs-utils (the VM rig: scripts/vm-tests.sh).
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::VethPair;
use observer::sources::kernel::qp_probe::QpProbe;
use observer_common::qp_setup::{QpSetupRecord, mask, state};

const TEST: &str = "modify_qp_records_match_the_qps";
/// Bound on each pair's set-up (TCG is slow: a perftest start takes seconds).
const SETUP_LIMIT: Duration = Duration::from_secs(90);

fn tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The rxe devices, the namespaces and the processes: all removed on drop, even on failure.
struct Rig {
    pair: VethPair,
    devs: Vec<String>,
    children: Vec<Child>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for (d, ns) in self.devs.iter().zip([&self.pair.a.name, &self.pair.b.name]) {
            let _ = run("ip", &["netns", "exec", ns, "rdma", "link", "del", d]);
        }
    }
}

/// The GID index of `ip` (IPv4-mapped, RoCE v2) on port 1 of `dev`, waited for (bounded).
fn gid_index(dev: &str, ip: [u8; 4]) -> Option<u32> {
    let want = format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        for i in 0..16 {
            let g = format!("/sys/class/infiniband/{dev}/ports/1/gids/{i}");
            let t = format!("/sys/class/infiniband/{dev}/ports/1/gid_attrs/types/{i}");
            let gid = std::fs::read_to_string(&g).unwrap_or_default();
            let ty = std::fs::read_to_string(&t).unwrap_or_default();
            if gid.trim() == want && ty.contains("v2") {
                return Some(i);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// `ib_device.index` of `dev` (`rdma dev show` "ifindex").
fn dev_index(dev: &str) -> u32 {
    let out = run("rdma", &["-j", "dev", "show", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["ifindex"].as_u64().unwrap() as u32
}

/// (device index, lqpn) -> (rqpn, pid) of the connected QPs `rdma res show qp` lists now.
fn rdma_res() -> HashMap<(u32, u32), (u32, u32)> {
    let mut m = HashMap::new();
    let Ok(out) = run("rdma", &["-j", "res", "show", "qp"]) else {
        return m;
    };
    let Ok(serde_json::Value::Array(qps)) = serde_json::from_str::<serde_json::Value>(&out) else {
        return m;
    };
    for q in qps {
        let (Some(i), Some(l)) = (q["ifindex"].as_u64(), q["lqpn"].as_u64()) else {
            continue;
        };
        // Before RTR a QP has no remote QP yet: only connected ones count.
        let Some(r) = q["rqpn"].as_u64().filter(|&r| r != 0) else {
            continue;
        };
        let p = q["pid"].as_u64().unwrap_or(0) as u32;
        m.insert((i as u32, l as u32), (r as u32, p));
    }
    m
}

/// One line for a record.
fn brief(r: &QpSetupRecord) -> String {
    format!(
        "dev {} qpn {} type {} tgid {} comm {:?} mask {:#x} ret {} state {} dest {} tclass {}",
        r.dev_index,
        r.qp_num,
        r.qp_type,
        r.tgid(),
        String::from_utf8_lossy(&r.comm).trim_end_matches('\0'),
        r.attr_mask,
        r.ret,
        state::name(r.qp_state),
        r.dest_qp_num,
        r.traffic_class
    )
}

struct Side<'a> {
    ns: &'a str,
    dev: &'a str,
    gid: u32,
    dev_index: u32,
    ip: [u8; 4],
}

/// Runs one client/server pair (`args(side)` builds a side's command; the client gets the
/// server's address last) until the probe has seen both processes' QPs in RTS, then checks
/// the records.
/// One pair: its name, the traffic class both QPs must carry, the server QP's last state.
struct Case<'a> {
    name: &'a str,
    tclass: u8,
    server_final: u32,
}

fn pair_case(
    rig: &mut Rig,
    probe: &mut QpProbe,
    case: Case,
    server: &Side,
    client: &Side,
    args: &dyn Fn(&Side) -> Vec<String>,
) {
    let Case {
        name,
        tclass,
        server_final,
    } = case;
    let spawn = |side: &Side, extra: Option<String>, log: &str| -> Child {
        let mut a: Vec<String> = vec!["netns".into(), "exec".into(), side.ns.into()];
        a.extend(args(side));
        a.extend(extra);
        let f = std::fs::File::create(log).unwrap();
        // `ip netns exec` execs the tool: the child's pid is the tool's tgid.
        Command::new("ip")
            .args(&a)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap()
    };
    let dir = std::env::temp_dir();
    let slog = dir.join(format!("qp-probe-{name}-server.log"));
    let clog = dir.join(format!("qp-probe-{name}-client.log"));
    let s = spawn(server, None, slog.to_str().unwrap());
    let spid = s.id();
    rig.children.push(s);
    // The client gives up at once when nobody listens: wait for the server (slow under TCG).
    let listening = Instant::now();
    while !run(
        "ip",
        &["netns", "exec", server.ns, "ss", "-Hltn", "sport = :18515"],
    )
    .is_ok_and(|o| !o.trim().is_empty())
    {
        assert!(
            listening.elapsed() < SETUP_LIMIT,
            "{name}: the server never listened: {}",
            std::fs::read_to_string(&slog).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ip = server.ip;
    let c = spawn(
        client,
        Some(format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])),
        clog.to_str().unwrap(),
    );
    let cpid = c.id();
    rig.children.push(c);

    let mut events: Vec<QpSetupRecord> = Vec::new();
    let mut res = HashMap::new();
    let start = Instant::now();
    let of = |events: &[QpSetupRecord], tgid: u32, dev: u32| -> Vec<QpSetupRecord> {
        events
            .iter()
            .filter(|r| r.tgid() == tgid && r.dev_index == dev)
            .copied()
            .collect()
    };
    let reached = |events: &[QpSetupRecord], tgid: u32, dev: u32, st: u32| {
        of(events, tgid, dev)
            .iter()
            .any(|r| r.fields & mask::STATE != 0 && r.qp_state == st)
    };
    loop {
        probe.drain(&mut events);
        let now = rdma_res();
        res.extend(now);
        if reached(&events, spid, server.dev_index, server_final)
            && reached(&events, cpid, client.dev_index, state::RTS)
        {
            // The QPs may still be listed: once more.
            res.extend(rdma_res());
            break;
        }
        if start.elapsed() > SETUP_LIMIT {
            let logs = format!(
                "server: {}\nclient: {}",
                std::fs::read_to_string(&slog).unwrap_or_default(),
                std::fs::read_to_string(&clog).unwrap_or_default()
            );
            let seen: Vec<String> = events.iter().map(brief).collect();
            panic!(
                "{name}: the QPs did not reach their states (server pid {spid}: {}, client pid \
                 {cpid}: RTS) within \
                 {SETUP_LIMIT:?}; records:\n{}\n{logs}",
                state::name(server_final),
                seen.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "{name}: both QPs set up {:.1} s after the server started",
        start.elapsed().as_secs_f64()
    );
    for c in &mut rig.children {
        let _ = c.kill();
        let _ = c.wait();
    }
    rig.children.clear();

    let s_ev = of(&events, spid, server.dev_index);
    let c_ev = of(&events, cpid, client.dev_index);
    let merged = |ev: &[QpSetupRecord]| {
        let qpn = ev.last().unwrap().qp_num;
        probe
            .get(ev.last().unwrap().dev_index, qpn)
            .copied()
            .unwrap()
    };
    let (sr, cr) = (merged(&s_ev), merged(&c_ev));
    for (who, side, peer, r, ev, pid, fin) in [
        ("server", server, client, sr, &s_ev, spid, server_final),
        ("client", client, server, cr, &c_ev, cpid, state::RTS),
    ] {
        let states: Vec<&str> = ev
            .iter()
            .filter(|e| e.fields & mask::STATE != 0)
            .map(|e| state::name(e.qp_state))
            .collect();
        eprintln!(
            "{name} {who}: dev {} qpn {} -> {} tclass {} sgid_index {} hop_limit {} mtu {} \
             rq_psn {} sq_psn {} timeout {} retry {} rnr {} type {} ah_type {} comm {:?} \
             cgroup {} states {states:?}",
            r.dev_index,
            r.qp_num,
            r.dest_qp_num,
            r.traffic_class,
            r.sgid_index,
            r.hop_limit,
            r.path_mtu,
            r.rq_psn,
            r.sq_psn,
            r.timeout,
            r.retry_cnt,
            r.rnr_retry,
            r.qp_type,
            r.ah_type,
            String::from_utf8_lossy(&r.comm).trim_end_matches('\0'),
            r.cgroup_id,
        );
        let want_states: &[&str] = if fin == state::RTS {
            &["INIT", "RTR", "RTS"]
        } else {
            &["INIT", "RTR"]
        };
        assert!(
            states.windows(want_states.len()).any(|w| w == want_states),
            "{name} {who}: states {states:?}"
        );
        assert_eq!(r.tgid(), pid, "{name} {who}: tgid");
        assert_eq!(r.qp_state, fin, "{name} {who}");
        assert_eq!(r.qp_type, 2, "{name} {who}: IB_QPT_RC");
        assert_eq!(r.traffic_class, tclass, "{name} {who}: traffic class");
        assert_eq!(r.sgid_index as u32, side.gid, "{name} {who}: sgid_index");
        assert_eq!(r.ah_type, 2, "{name} {who}: RDMA_AH_ATTR_TYPE_ROCE");
        assert_eq!(
            &r.dgid[10..],
            &[0xff, 0xff, peer.ip[0], peer.ip[1], peer.ip[2], peer.ip[3]],
            "{name} {who}: dgid is the peer's IPv4-mapped GID"
        );
        let mut want = mask::STATE | mask::AV | mask::DEST_QPN | mask::RQ_PSN | mask::PATH_MTU;
        if fin == state::RTS {
            want |= mask::SQ_PSN | mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY;
        }
        assert_eq!(
            r.fields & want,
            want,
            "{name} {who}: fields {:#x}",
            r.fields
        );
        assert_eq!(r.ret, 0);
        let kernel = probe
            .kernel_table()
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == r.key())
            .map(|(_, v)| v);
        assert_eq!(kernel, Some(r), "{name} {who}: the kernel table agrees");
        match res.get(&(r.dev_index, r.qp_num)) {
            Some(&(rqpn, rpid)) => {
                assert_eq!((rqpn, rpid), (r.dest_qp_num, pid), "{name} {who}: rdma res");
                eprintln!("{name} {who}: rdma res show qp agrees (rqpn {rqpn}, pid {rpid})");
            }
            None => eprintln!("{name} {who}: gone from rdma res show qp before it was read"),
        }
    }
    assert_eq!(sr.dest_qp_num, cr.qp_num, "{name}: server's destination");
    assert_eq!(cr.dest_qp_num, sr.qp_num, "{name}: client's destination");
}

#[test]
fn modify_qp_records_match_the_qps() {
    if !test_support::require_root(TEST) {
        return;
    }
    let rxe = Command::new("modprobe")
        .arg("rdma_rxe")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let tools = ["rdma", "ib_write_bw", "ibv_rc_pingpong"]
        .iter()
        .all(|t| tool(t));
    if !test_support::require(
        rxe && tools && Path::new("/sys/module/ib_core").exists(),
        TEST,
        "the rdma_rxe module (modprobe rdma_rxe), rdma, ib_write_bw (perftest), ibv_rc_pingpong",
    ) {
        return;
    }
    let release = run("uname", &["-r"]).unwrap_or_default();
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let mut probe = QpProbe::attach().unwrap_or_else(|e| panic!("attach: {e:#?}"));
    let o = *probe.offsets();
    eprintln!(
        "kernel {}: attached at {}; offsets ib_qp.device {} .qp_num {} .qp_type {}, \
         ib_device.index {}, ib_qp_attr.qp_state {} .path_mtu {} .rq_psn {} .sq_psn {} \
         .dest_qp_num {} .timeout {} .retry_cnt {} .rnr_retry {}, ah_attr.grh.dgid {} \
         .flow_label {} .sgid_index {} .hop_limit {} .traffic_class {}, ah_attr.sl {} .type {}",
        release.trim(),
        probe.attach_point(),
        o.qp_device,
        o.qp_num,
        o.qp_type,
        o.device_index,
        o.attr_qp_state,
        o.attr_path_mtu,
        o.attr_rq_psn,
        o.attr_sq_psn,
        o.attr_dest_qp_num,
        o.attr_timeout,
        o.attr_retry_cnt,
        o.attr_rnr_retry,
        o.av_dgid,
        o.av_flow_label,
        o.av_sgid_index,
        o.av_hop_limit,
        o.av_traffic_class,
        o.av_sl,
        o.av_type
    );

    let (ip_a, ip_b) = ([10, 78, 0, 1], [10, 78, 0, 2]);
    let pair = VethPair::new("qpp", "10.78.0.1", "10.78.0.2").unwrap();
    let pid = std::process::id();
    let (dev_a, dev_b) = (format!("qpa{pid}"), format!("qpb{pid}"));
    let mut rig = Rig {
        pair,
        devs: Vec::new(),
        children: Vec::new(),
    };
    for (ns, dev, ifname) in [
        (rig.pair.a.name.clone(), &dev_a, rig.pair.a_if.clone()),
        (rig.pair.b.name.clone(), &dev_b, rig.pair.b_if.clone()),
    ] {
        run(
            "ip",
            &[
                "netns", "exec", &ns, "rdma", "link", "add", dev, "type", "rxe", "netdev", &ifname,
            ],
        )
        .unwrap();
        rig.devs.push(dev.clone());
    }
    let ga = gid_index(&dev_a, ip_a).expect("GID of 10.78.0.1 on the rxe device");
    let gb = gid_index(&dev_b, ip_b).expect("GID of 10.78.0.2 on the rxe device");
    let (na, nb) = (rig.pair.a.name.clone(), rig.pair.b.name.clone());
    let a = Side {
        ns: &na,
        dev: &dev_a,
        gid: ga,
        dev_index: dev_index(&dev_a),
        ip: ip_a,
    };
    let b = Side {
        ns: &nb,
        dev: &dev_b,
        gid: gb,
        dev_index: dev_index(&dev_b),
        ip: ip_b,
    };
    eprintln!(
        "{dev_a} index {} gid {ga}, {dev_b} index {} gid {gb}",
        a.dev_index, b.dev_index
    );

    // perftest, traffic class 106 (DSCP 26, ECT(0)): server in b, client in a. A one-way
    // test's server only receives: its QP stays in RTR.
    let perftest = |s: &Side| -> Vec<String> {
        [
            "ib_write_bw",
            "-d",
            s.dev,
            "-x",
            &s.gid.to_string(),
            "--tclass=106",
            "-n",
            "5",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let case = Case {
        name: "ib_write_bw",
        tclass: 106,
        server_final: state::RTR,
    };
    pair_case(&mut rig, &mut probe, case, &b, &a, &perftest);
    // ibv_rc_pingpong, default traffic class 0: server in a, client in b.
    let pingpong = |s: &Side| -> Vec<String> {
        [
            "ibv_rc_pingpong",
            "-d",
            s.dev,
            "-g",
            &s.gid.to_string(),
            "-n",
            "5",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let case = Case {
        name: "ibv_rc_pingpong",
        tclass: 0,
        server_final: state::RTS,
    };
    pair_case(&mut rig, &mut probe, case, &a, &b, &pingpong);

    let c = probe.counters().unwrap();
    eprintln!("counters: {c:?}");
    // The GSI QPs of the two devices (3 each) and the test's 4 QPs (11 modifies).
    assert!(c.recorded >= 17, "{c:?}");
    assert_eq!(
        (c.read_failed, c.stash_full, c.ring_full, c.table_full),
        (0, 0, 0, 0)
    );
    let [(n_in, t_in), (n_out, t_out)] = probe.run_stats().unwrap();
    if let Some(per_call) = (t_in + t_out).checked_div(n_in) {
        eprintln!(
            "cost: {n_in} modify-QP calls; entry {} ns, return {} ns, {per_call} ns per \
             modify-QP (run_time_ns/run_cnt, BPF_ENABLE_STATS)",
            t_in / n_in,
            t_out / n_out.max(1),
        );
    } else {
        eprintln!("cost: BPF statistics unavailable on this kernel");
    }
}
