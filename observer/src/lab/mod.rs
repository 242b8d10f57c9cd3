//! `roce-observe lab`: a RoCE fabric in network namespaces (two hosts and a bridge "switch"),
//! RC traffic emulated in userspace (RDMA WRITE and SEND, ACK, NAK and go-back-N, RNR NAK, CNP
//! and a DCQCN-like rate cut, several QPs), faults injected in the switch with nftables and
//! crafted PFC/PAUSE frames, roce-observe running on the hosts' interfaces, and a table of what
//! was injected beside what was observed. Exits non-zero when they disagree.
//!
//! Scenarios: `clean`, `lossy`, `bleached`, `congested`, `pfc-storm`, `all` (each in turn, each
//! on a fresh fabric). Everything it creates lives in `ro-lab-{h1,sw,h2}-<pid>[-n]` namespaces
//! and is deleted on exit, on Ctrl-C / SIGTERM (the run stops and unwinds) and on failure.

pub mod faults;
pub mod netns;
pub mod observe;
pub mod rc;
pub mod report;
pub mod sock;
pub mod topo;
pub mod wire;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use faults::{NftCounts, NftFaults, PfcPlan, PfcSent};
pub use observe::ObserverMode;
use rc::{Endpoint, Marking, Msg, MsgKind, QpPlan, RcConfig, ReqStats, Responder};
use report::{AlertCheck, Row, ScenarioReport, SelfCheck, Summaries};
use topo::{H1_IF, H1_IP, H1_MAC, H2_IF, H2_IP, H2_MAC, Topology, ip_str};

use crate::pipeline::{PolicyConfig, rule};

pub const SCENARIOS: [&str; 5] = ["clean", "lossy", "bleached", "congested", "pfc-storm"];

#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// clean, lossy, bleached, congested, pfc-storm or all.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Who observes: the live roce-observe binary, or the labelled userspace fallback.
    #[arg(long, value_enum, default_value = "live")]
    pub observer: ObserverMode,
    /// The roce-observe binary to run (default: this executable).
    #[arg(long)]
    pub observer_bin: Option<PathBuf>,
    /// Extra arguments for each roce-observe (repeatable), e.g. `--observer-arg=--xdp-mode=generic`.
    #[arg(long = "observer-arg", allow_hyphen_values = true)]
    pub observer_args: Vec<String>,
    /// Where roce-observe writes (one sub-directory per scenario and host); default: a
    /// temporary directory, removed at the end unless `--keep-out`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also capture both host interfaces (AF_PACKET) into DIR/<scenario>-<iface>.pcap, for
    /// `roce-observe replay` and tshark.
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
    /// Keep the output directory (Parquet, alerts.jsonl, summary.json, observer.log).
    #[arg(long)]
    pub keep_out: bool,
    /// Queue pairs per scenario.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub qps: u32,
    /// Message rounds per QP (each: RDMA WRITE 64 B, 1 KiB, 4 KiB, 8 KiB, 64 KiB; SEND 256 B,
    /// 4 KiB, 16 KiB: 27 packets at path MTU 4096).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Initial (and target) rate per QP, packets per second.
    #[arg(long, default_value_t = 4000.0)]
    pub rate_pps: f64,
    /// Minimum time between two CNPs of one QP, microseconds (NICs: 4-1000 us).
    #[arg(long, default_value_t = 1000)]
    pub cnp_interval_us: u64,
    /// Do not echo roce-observe's own output (its live alerts) while the lab runs.
    #[arg(long)]
    pub quiet_observer: bool,
    /// Vendor marking profile of the emulated NICs and of roce-observe's policy (nvidia, broadcom).
    #[arg(long, default_value = "nvidia")]
    pub profile: String,
}

impl Default for LabArgs {
    fn default() -> Self {
        LabArgs {
            scenario: "all".into(),
            observer: ObserverMode::Live,
            observer_bin: None,
            observer_args: Vec::new(),
            out: None,
            pcap: None,
            keep_out: false,
            qps: 4,
            rounds: 30,
            rate_pps: 4000.0,
            cnp_interval_us: 1000,
            quiet_observer: false,
            profile: "nvidia".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("the lab needs root (network namespaces, nftables, AF_PACKET, BPF)")]
    NotRoot,
    #[error("unknown scenario {0:?} (known: clean, lossy, bleached, congested, pfc-storm, all)")]
    UnknownScenario(String),
    #[error("unknown profile {0:?} (the lab knows: nvidia, broadcom)")]
    UnknownProfile(String),
    #[error("topology: {what}")]
    Topology {
        what: &'static str,
        #[source]
        source: crate::lab::netns::NetnsError,
    },
    #[error("faults: {0}")]
    Faults(String),
    #[error("traffic: {0}")]
    Traffic(String),
    #[error("observer: {0}")]
    Observer(String),
    #[error("{0}")]
    Io(String),
    #[error("interrupted (Ctrl-C / SIGTERM); the fabric was torn down")]
    Interrupted,
    #[error("injected and observed disagree in: {0}")]
    Disagree(String),
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT / SIGTERM arrived: every loop of the lab checks it and unwinds.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Everything one scenario does to the fabric.
#[derive(Clone, Debug, Default)]
pub struct ScenarioSpec {
    pub name: String,
    pub nft: NftFaults,
    pub pfc: Option<PfcPlan>,
    /// Index of a QP whose receive queue runs dry (RNR NAKs).
    pub rnr_qp: Option<usize>,
    /// Alert rules that must fire / must stay silent.
    pub must_fire: Vec<&'static str>,
    pub must_not_fire: Vec<&'static str>,
}

const DATA_DSCP: u8 = 26;

pub fn udp_sport(i: usize) -> u16 {
    49153 + i as u16
}

/// The fault set of a named scenario, and the alerts it must and must not raise. Every rule of
/// `collector::rule::ALL` that the scenario gives no cause for must stay silent.
pub fn spec(name: &str) -> Result<ScenarioSpec, LabError> {
    let pfc_rules = [
        rule::PFC_STORM,
        rule::PFC_WRONG_PRIORITY,
        rule::PAUSE_802_3X,
        rule::PFC_WITHOUT_ECN,
    ];
    let mut s = ScenarioSpec {
        name: name.to_string(),
        ..Default::default()
    };
    match name {
        "clean" => {}
        "lossy" => {
            s.nft.loss_pct = 2;
            s.must_fire = vec![rule::PSN_GAP, rule::GO_BACK_N];
        }
        "bleached" => {
            s.nft.bleach_sport = Some(udp_sport(1));
            s.nft.bleach_pct = 5;
            s.must_fire = vec![rule::DSCP_MISMATCH];
        }
        "congested" => {
            s.nft.ce_pct = 15;
            s.rnr_qp = Some(0);
            // RNR retries are retransmissions: go_back_n is required; no PSN gap may appear,
            // and every CE is answered by CNPs (ce_without_cnp stays silent).
            s.must_fire = vec![rule::GO_BACK_N];
        }
        "pfc-storm" => {
            // 2500 XOFF on priority 3 at 5000/s: above the default storm threshold (1000 XOFF
            // per priority per second) in any 1 s interval the storm overlaps by >= 0.2 s.
            s.pfc = Some(PfcPlan {
                rdma_xoff: 2500,
                rdma_priority: 3,
                other_xoff: 20,
                other_priority: 5,
                pause: 3,
                gap: Duration::from_micros(200),
            });
            // Clean traffic without any CE while pauses flow: pfc_without_ecn too.
            s.must_fire = pfc_rules.to_vec();
        }
        _ => return Err(LabError::UnknownScenario(name.to_string())),
    }
    for r in rule::ALL {
        if !s.must_fire.contains(&r) {
            s.must_not_fire.push(r);
        }
    }
    Ok(s)
}

/// The traffic of a scenario.
pub fn rc_config(args: &LabArgs, spec: &ScenarioSpec) -> Result<RcConfig, LabError> {
    let marking = match args.profile.as_str() {
        "nvidia" => Marking::NVIDIA,
        "broadcom" => Marking::BROADCOM,
        p => return Err(LabError::UnknownProfile(p.to_string())),
    };
    // Start PSNs: one QP crosses the 24-bit wrap during the run.
    let starts = [0x000000u32, 0xfffe80, 0x123456, 0x7fff00];
    let round: Vec<Msg> = [
        (MsgKind::Write, 64),
        (MsgKind::Write, 1024),
        (MsgKind::Write, 4096),
        (MsgKind::Write, 8192),
        (MsgKind::Write, 65536),
        (MsgKind::Send, 256),
        (MsgKind::Send, 4096),
        (MsgKind::Send, 16384),
    ]
    .into_iter()
    .map(|(kind, len)| Msg { kind, len })
    .collect();
    let qps = (0..args.qps as usize)
        .map(|i| QpPlan {
            req_qpn: 0x000100 + i as u32 + 1,
            resp_qpn: 0x000200 + i as u32 + 1,
            start_psn: starts[i % starts.len()].wrapping_add((i / starts.len()) as u32 * 0x10000)
                & wire::PSN_MASK,
            udp_sport: udp_sport(i),
            msgs: (0..args.rounds)
                .flat_map(|_| round.iter().copied())
                .collect(),
            rq: (spec.rnr_qp == Some(i)).then_some((2, Duration::from_millis(6))),
        })
        .collect();
    Ok(RcConfig {
        qps,
        mtu: 4096,
        window: 32,
        rate_pps: args.rate_pps,
        min_rate_pps: args.rate_pps / 16.0,
        ack_every: 16,
        // Local ACK timeout 4.096 us x 2^16 (a common RoCE setting), long enough that a
        // scheduling stall of the responder on a loaded machine does not look like loss: the
        // clean scenarios require that nothing is resent.
        ack_timeout: Duration::from_micros(4096 * 64),
        rnr_timer: Duration::from_millis(2),
        cnp_interval: Duration::from_micros(args.cnp_interval_us),
        marking,
        deadline: Duration::from_secs(30),
        h1: Endpoint {
            mac: H1_MAC,
            ip: H1_IP,
        },
        h2: Endpoint {
            mac: H2_MAC,
            ip: H2_IP,
        },
    })
}

/// Ground truth of one scenario run.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    pub req: Vec<ReqStats>,
    pub resp: Responder,
    pub nft: NftCounts,
    pub pfc: PfcSent,
}

/// Runs one scenario on a fresh fabric and returns its report (check [`ScenarioReport::ok`]).
pub fn run_scenario(args: &LabArgs, name: &str, run_no: usize) -> Result<ScenarioReport, LabError> {
    let t0 = Instant::now();
    let spec = spec(name)?;
    let cfg = rc_config(args, &spec)?;
    let tag = format!("{}-{run_no}", std::process::id());
    let topo = Topology::create(&tag)?;
    spec.nft.install(&topo.sw)?;
    tracing::info!(scenario = name, ns_h1 = %topo.h1.name, ns_sw = %topo.sw.name, ns_h2 = %topo.h2.name, "fabric up");

    let out_root = match &args.out {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join(format!("ro-lab-out-{}", std::process::id())),
    };
    let kept = args.out.is_some() || args.keep_out;
    // Removes this scenario's temporary observer output on every exit path unless it is kept.
    let _out_guard = RemoveOnDrop((!kept).then(|| out_root.join(name)));
    let policy = PolicyConfig::profile(&args.profile)
        .map_err(|e| LabError::UnknownProfile(e.to_string()))?;
    let done = AtomicBool::new(false);
    let cap_ready = [AtomicBool::new(false), AtomicBool::new(false)];
    let resp_ready = AtomicBool::new(false);

    // Live observers start (and attach) before any traffic.
    let mut live = Vec::new();
    if args.observer == ObserverMode::Live {
        let exe = match &args.observer_bin {
            Some(p) => p.clone(),
            None => {
                std::env::current_exe().map_err(|e| LabError::Io(format!("current_exe: {e}")))?
            }
        };
        for (ns, iface, host) in [(&topo.h2, H2_IF, "h2"), (&topo.h1, H1_IF, "h1")] {
            let mut extra = vec![
                "--profile".to_string(),
                args.profile.clone(),
                "--host".into(),
                format!("lab-{host}"),
            ];
            extra.extend(args.observer_args.iter().cloned());
            let dir = out_root.join(name).join(host);
            let _ = std::fs::remove_dir_all(&dir);
            live.push(observe::start_live(
                &exe,
                ns,
                iface,
                &dir,
                120,
                &extra,
                !args.quiet_observer,
            )?);
        }
        // Both start in parallel; traffic begins once both are attached.
        for o in live.iter_mut() {
            o.wait_attached(Duration::from_secs(60))?;
        }
    }

    let (truth, captured) = std::thread::scope(
        |s| -> Result<(Truth, Vec<(serde_json::Value, u64)>), LabError> {
            let mut caps = Vec::new();
            if args.observer == ObserverMode::Userspace || args.pcap.is_some() {
                for (i, (ns, iface, host)) in [(&topo.h2, H2_IF, "h2"), (&topo.h1, H1_IF, "h1")]
                    .into_iter()
                    .enumerate()
                {
                    let (done, ready) = (&done, &cap_ready[i]);
                    let pcap = args
                        .pcap
                        .as_ref()
                        .map(|d| d.join(format!("{name}-{iface}.pcap")));
                    let col = (args.observer == ObserverMode::Userspace).then(|| {
                        observe::FallbackCollector {
                            out_dir: out_root.join(name).join(host),
                            host: format!("lab-{host}"),
                            policy: policy.clone(),
                        }
                    });
                    caps.push(s.spawn(move || {
                        observe::userspace_capture(ns, iface, done, ready, pcap.as_deref(), col)
                    }));
                }
                wait_flags(&cap_ready[..], &caps)?;
            }
            let resp = {
                let (cfg, done, ready, h2) = (&cfg, &done, &resp_ready, &topo.h2);
                s.spawn(move || -> Result<Responder, LabError> {
                    let _in = h2.enter().map_err(|source| LabError::Topology {
                        what: "entering h2",
                        source,
                    })?;
                    rc::run_responder(cfg, H2_IF, done, ready)
                })
            };
            wait_flags(
                std::slice::from_ref(&resp_ready),
                std::slice::from_ref(&resp),
            )?;
            let pfc = spec.pfc.map(|plan| {
                let sw = &topo.sw;
                s.spawn(move || faults::send_pfc(sw, plan))
            });
            let req = {
                let (cfg, h1) = (&cfg, &topo.h1);
                s.spawn(move || -> Result<Vec<ReqStats>, LabError> {
                    let _in = h1.enter().map_err(|source| LabError::Topology {
                        what: "entering h1",
                        source,
                    })?;
                    rc::run_requester(cfg, H1_IF)
                })
            };
            let req = join(req);
            let pfc = pfc.map(join).transpose();
            // Stragglers (last ACKs) reach the observers before they stop.
            std::thread::sleep(Duration::from_millis(50));
            done.store(true, Ordering::SeqCst);
            let resp = join(resp);
            let caps: Vec<_> = caps.into_iter().map(join).collect();
            let req = req?;
            let pfc = pfc?.unwrap_or_default();
            let resp = resp?;
            let caps = caps.into_iter().collect::<Result<Vec<_>, _>>()?;
            Ok((
                Truth {
                    req,
                    resp,
                    nft: NftCounts::default(),
                    pfc,
                },
                caps,
            ))
        },
    )?;
    let mut truth = truth;
    truth.nft = faults::read_counters(&topo.sw)?;

    let mut observed = observe::Observed::default();
    if args.observer == ObserverMode::Userspace {
        let mut alerts = std::collections::BTreeMap::new();
        for (v, drops) in captured {
            add_alerts(&mut alerts, v.get("alerts"));
            observed.summaries.push(v);
            observed.capture_drops += drops;
        }
        for host in ["h2", "h1"] {
            let d = out_root.join(name).join(host);
            observed.parquet_files += observe::count_ext(&d, "parquet");
            observed.flow_rows += observe::parquet_rows(&d.join("flows"))?;
            observed.alert_lines += observe::jsonl_lines(&d.join("alerts.jsonl"));
        }
        observed.alerts = Some(alerts);
    }
    if args.observer == ObserverMode::Live {
        std::thread::sleep(Duration::from_millis(300));
        let mut alerts = std::collections::BTreeMap::new();
        for o in live.drain(..) {
            let (v, a, lines, parquet, rows, log) = o.finish(Duration::from_secs(20))?;
            observed.flow_rows += rows;
            add_alerts(&mut alerts, a.as_ref());
            observed.summaries.push(v);
            observed.alert_lines += lines;
            observed.parquet_files += parquet;
            observed.logs.push(log);
        }
        observed.alerts = Some(alerts);
    }
    drop(topo);
    let mut r = build_report(args, &spec, &cfg, &truth, &observed);
    if kept {
        r.info.push((
            "roce-observe output kept in".into(),
            out_root.join(name).display().to_string(),
        ));
    }
    r.secs = t0.elapsed().as_secs_f64();
    Ok(r)
}

fn add_alerts(to: &mut std::collections::BTreeMap<String, u64>, a: Option<&serde_json::Value>) {
    if let Some(obj) = a.and_then(|a| a.as_object()) {
        for (k, n) in obj {
            *to.entry(k.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
        }
    }
}

/// Deletes a directory (and its parent when that is left empty) when dropped.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
            if let Some(p) = d.parent() {
                let _ = std::fs::remove_dir(p);
            }
        }
    }
}

fn wait_flags<T>(
    flags: &[AtomicBool],
    handles: &[std::thread::ScopedJoinHandle<'_, Result<T, LabError>>],
) -> Result<(), LabError> {
    let t0 = Instant::now();
    while !flags.iter().all(|f| f.load(Ordering::SeqCst)) {
        if handles.iter().any(|h| h.is_finished()) {
            return Err(LabError::Traffic(
                "a lab thread failed at start (see the error below)".into(),
            ));
        }
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(LabError::Traffic(
                "lab threads did not start within 10 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn join<T>(h: std::thread::ScopedJoinHandle<'_, Result<T, LabError>>) -> Result<T, LabError> {
    h.join()
        .unwrap_or_else(|_| Err(LabError::Traffic("a lab thread panicked".into())))
}

/// The table: ground truth beside roce-observe's summary, plus the lab's self-checks.
pub fn build_report(
    args: &LabArgs,
    spec: &ScenarioSpec,
    cfg: &RcConfig,
    t: &Truth,
    o: &observe::Observed,
) -> ScenarioReport {
    let s = Summaries { docs: &o.summaries };
    let (h1, h2) = (ip_str(&H1_IP), ip_str(&H2_IP));
    let sum_req = |f: fn(&ReqStats) -> u64| t.req.iter().map(f).sum::<u64>();
    let sum_resp = |f: fn(&rc::RespStats) -> u64| t.resp.qps.iter().map(f).sum::<u64>();
    // ACK-direction packets: the receiver's tc egress when it has one, else the sender's ingress.
    let (ack_if, ack_dir) = if s.has(H2_IF, "egress") {
        (H2_IF, "egress")
    } else {
        (H1_IF, "ingress")
    };
    let data_in = |f: &str| s.qp_sum(H2_IF, "ingress", &h1, &h2, f);
    let data_out = |f: &str| s.qp_sum(H1_IF, "egress", &h1, &h2, f);
    let acks = |f: &str| s.qp_sum(ack_if, ack_dir, &h2, &h1, f);
    let at_in = format!("{H2_IF} ingress");
    let at_out = format!("{H1_IF} egress");
    let at_ack = format!("{ack_if} {ack_dir}");
    let row = |what: &str, injected: u64, isrc: &str, observed: Option<u64>, osrc: &str| Row {
        what: what.to_string(),
        injected,
        injected_src: isrc.to_string(),
        observed,
        observed_src: osrc.to_string(),
    };
    let sent_obs = data_out("data_pkts");
    let rcvd_obs = data_in("data_pkts");
    let mut rows = vec![
        row(
            "RoCE data packets sent",
            sum_req(|r| r.data_sent),
            "requester log",
            sent_obs,
            &at_out,
        ),
        row(
            "data packets dropped in switch",
            t.nft.dropped,
            "nft counter loss",
            sent_obs.zip(rcvd_obs).map(|(a, b)| a.saturating_sub(b)),
            &format!("{at_out} - {at_in}"),
        ),
        row(
            "resent (go-back-N, RNR, timeout)",
            sum_req(|r| r.resent()),
            "requester log",
            data_out("psn_retrans"),
            &format!("{at_out} psn_retrans"),
        ),
        row(
            "PSN gaps at the receiver",
            sum_resp(|r| r.stream.gaps),
            "responder arrivals",
            data_in("psn_gaps"),
            &at_in,
        ),
        row(
            "PSNs missing at the receiver",
            sum_resp(|r| r.stream.missing),
            "responder arrivals",
            data_in("psn_missing"),
            &at_in,
        ),
        row(
            "retransmits at the receiver",
            sum_resp(|r| r.stream.retrans),
            "responder arrivals",
            data_in("psn_retrans"),
            &at_in,
        ),
        row(
            "NAKs (PSN sequence error)",
            sum_resp(|r| r.naks_sent),
            "responder log",
            acks("nak_psn_seq_err"),
            &at_ack,
        ),
        row(
            "RNR NAKs",
            sum_resp(|r| r.rnr_naks_sent),
            "responder log",
            acks("rnr_naks"),
            &at_ack,
        ),
        row(
            "CE-marked data packets",
            t.nft.ce_marked,
            "nft counter ce",
            data_in("ce"),
            &at_in,
        ),
        row(
            "CNPs (<= 1 per QP per interval)",
            sum_resp(|r| r.cnps_sent),
            "responder log",
            acks("cnp"),
            &at_ack,
        ),
        row(
            &format!("data not at DSCP {DATA_DSCP} (re-marked)"),
            t.nft.bleached,
            "nft counter bleach",
            s.data_dscp_not(H2_IF, "ingress", &h1, &h2, DATA_DSCP),
            &at_in,
        ),
    ];
    let pfc_at = format!("{H2_IF} ingress");
    for p in [3usize, 5] {
        rows.push(row(
            &format!("PFC XOFF on priority {p}"),
            t.pfc.xoff[p],
            "frames sent from sw-p2",
            s.iface(H2_IF, "ingress", &["pfc", "xoff", &p.to_string()]),
            &pfc_at,
        ));
        rows.push(row(
            &format!("PFC XON on priority {p}"),
            t.pfc.xon[p],
            "frames sent from sw-p2",
            s.iface(H2_IF, "ingress", &["pfc", "xon", &p.to_string()]),
            &pfc_at,
        ));
    }
    rows.push(row(
        "802.3x PAUSE frames",
        t.pfc.pause,
        "frames sent from sw-p2",
        s.iface(H2_IF, "ingress", &["pause", "frames"]),
        &pfc_at,
    ));
    if args.observer == ObserverMode::Userspace {
        rows.push(row(
            "ICRC failures",
            0,
            "every frame built with a valid ICRC",
            data_in("icrc_bad"),
            &at_in,
        ));
    }

    // The lab's own ground truth must hold together before it can judge the observer.
    let mut checks = Vec::new();
    let mut check = |what: &str, ok: bool, detail: String| {
        checks.push(SelfCheck {
            what: what.into(),
            ok,
            detail,
        })
    };
    let done = t.req.iter().all(|r| r.completed);
    check(
        "every message completed",
        done,
        format!(
            "{} QPs, {} messages each",
            t.req.len(),
            t.req.first().map_or(0, |r| r.msgs)
        ),
    );
    let rcvd = sum_resp(|r| r.data_rcvd);
    let sent = sum_req(|r| r.data_sent);
    check(
        "responder got sent - dropped",
        rcvd + t.nft.dropped == sent,
        format!("sent {sent}, dropped {}, received {rcvd}", t.nft.dropped),
    );
    check(
        "switch saw every data packet",
        t.nft.seen == sent,
        format!("nft seen {}, sent {sent}", t.nft.seen),
    );
    check(
        "responder lost no frame",
        t.resp.socket_drops == 0,
        format!("AF_PACKET drops {}", t.resp.socket_drops),
    );
    let ce_rcvd = sum_resp(|r| r.ce_rcvd);
    check(
        "responder saw every CE mark",
        ce_rcvd == t.nft.ce_marked,
        format!("CE received {ce_rcvd}, nft ce {}", t.nft.ce_marked),
    );
    let dscp_off: u64 = t
        .resp
        .qps
        .iter()
        .map(|r| r.data_rcvd - r.dscp_rcvd[DATA_DSCP as usize])
        .sum();
    check(
        "responder saw every re-marking",
        dscp_off == t.nft.bleached,
        format!(
            "data not at DSCP {DATA_DSCP}: {dscp_off}, nft bleach {}",
            t.nft.bleached
        ),
    );
    let spacing = t.resp.qps.iter().filter_map(|r| r.min_cnp_spacing).min();
    check(
        "CNP interval respected per QP",
        spacing.is_none_or(|d| d >= cfg.cnp_interval),
        format!(
            "interval {:?}, smallest spacing {:?}",
            cfg.cnp_interval, spacing
        ),
    );
    let cnps = sum_resp(|r| r.cnps_sent);
    let cnps_rcvd = sum_req(|r| r.cnps_rcvd);
    check(
        "requester cut its rate on every CNP",
        cnps_rcvd == cnps && sum_req(|r| r.rate_cuts) == cnps,
        format!("CNPs sent {cnps}, received {cnps_rcvd}"),
    );
    let icrc_bad = sum_resp(|r| r.icrc_bad);
    check(
        "every ICRC valid at the responder",
        icrc_bad == 0,
        format!("bad {icrc_bad}"),
    );
    if spec.nft.loss_pct > 0 {
        check(
            "loss scenario dropped something",
            t.nft.dropped > 0,
            format!("{} dropped", t.nft.dropped),
        );
    }
    if spec.nft.ce_pct > 0 {
        check(
            "congestion scenario marked CE",
            t.nft.ce_marked > 0 && cnps > 0,
            format!("{} CE, {cnps} CNPs", t.nft.ce_marked),
        );
    }
    if spec.rnr_qp.is_some() {
        check(
            "RNR scenario sent RNR NAKs",
            sum_resp(|r| r.rnr_naks_sent) > 0,
            String::new(),
        );
    }
    if args.observer == ObserverMode::Userspace {
        check(
            "fallback capture lost no frame",
            o.capture_drops == 0,
            format!("AF_PACKET drops {}", o.capture_drops),
        );
    }
    check(
        "roce-observe wrote Parquet flow logs",
        o.flow_rows > 0,
        format!(
            "{} Parquet files, {} flow rows",
            o.parquet_files, o.flow_rows
        ),
    );

    let mut alerts = Vec::new();
    if let Some(a) = &o.alerts {
        for r in &spec.must_fire {
            alerts.push(AlertCheck {
                rule: r.to_string(),
                must_fire: true,
                count: Some(*a.get(*r).unwrap_or(&0)),
            });
        }
        for r in &spec.must_not_fire {
            alerts.push(AlertCheck {
                rule: r.to_string(),
                must_fire: false,
                count: Some(*a.get(*r).unwrap_or(&0)),
            });
        }
    }
    let mut info = vec![
        (
            "requester".to_string(),
            format!(
                "{} QPs, {} packets planned, {} NAKs and {} RNR NAKs received, {} timeouts, {} rate cuts, lowest rate {:.0} pps",
                t.req.len(),
                sum_req(|r| r.pkts_planned),
                sum_req(|r| r.naks_rcvd),
                sum_req(|r| r.rnr_naks_rcvd),
                sum_req(|r| r.timeouts),
                sum_req(|r| r.rate_cuts),
                t.req
                    .iter()
                    .map(|r| r.min_rate_pps)
                    .fold(f64::INFINITY, f64::min)
            ),
        ),
        (
            "responder".to_string(),
            format!(
                "{} accepted, {} out of order dropped, {} duplicates, {} ACKs, {} CE received, {} CNPs suppressed by the interval",
                sum_resp(|r| r.accepted),
                sum_resp(|r| r.out_of_order_dropped),
                sum_resp(|r| r.duplicates),
                sum_resp(|r| r.acks_sent),
                ce_rcvd,
                sum_resp(|r| r.cnps_suppressed)
            ),
        ),
    ];
    {
        info.push((
            "roce-observe output".into(),
            format!(
                "{} Parquet files ({} flow rows), {} alert lines",
                o.parquet_files, o.flow_rows, o.alert_lines
            ),
        ));
    }
    ScenarioReport {
        scenario: spec.name.clone(),
        observer: args.observer.label().to_string(),
        rows,
        alerts,
        all_alerts: o.alerts.clone().unwrap_or_default(),
        self_checks: checks,
        info,
        secs: 0.0,
    }
}

/// Runs the requested scenario(s), printing each table; returns the reports.
pub fn run_lab(args: &LabArgs) -> Result<Vec<ScenarioReport>, LabError> {
    if !crate::lab::netns::is_root() {
        return Err(LabError::NotRoot);
    }
    let names: Vec<&str> = if args.scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        spec(&args.scenario)?;
        vec![args.scenario.as_str()]
    };
    install_signal_handlers();
    let mut reports = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let r = run_scenario(args, n, i)?;
        println!("{}", r.render());
        reports.push(r);
    }
    Ok(reports)
}
