//! `roce-observe lab`: a RoCE fabric in network namespaces (two hosts and a bridge "switch"),
//! RC traffic emulated in userspace (RDMA WRITE and SEND, ACK, NAK and go-back-N, RNR NAK, CNP
//! and a DCQCN-like rate cut, several QPs), faults injected in the switch with nftables and
//! crafted PFC/PAUSE frames, roce-observe running on the hosts' interfaces, and a table of what
//! was injected beside what was observed. Exits non-zero when they disagree.
//!
//! Scenarios: `clean`, `lossy`, `bleached`, `congested`, `pfc-storm`, with 802.1Q-tagged
//! frames `pcp-remark`, `dscp-remap`, `ecn-bleach`, and `delay`, `delay20` (the passive latency
//! of h1's capture against the responder's delay: [`latency`]); `all` (each in turn, each on a
//! fresh fabric). The report includes the path view: `roce-analyze path`'s comparison of the two
//! observers' output. Everything it creates lives in `ro-lab-{h1,sw,h2}-<pid>[-n]` namespaces
//! and is deleted on exit, on Ctrl-C / SIGTERM (the run stops and unwinds) and on failure.
//!
//! Above the observer library (its pipeline, sinks and sources) and below the `roce-observe`
//! binary, which dispatches `roce-observe lab` to [`command`].

pub mod command;
pub mod compare;
pub mod faults;
pub mod latency;
pub mod observe;
pub mod path_view;
pub mod rc;
pub mod report;
pub mod sock;
pub mod topo;
pub mod traffic;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use compare::build_report;
use faults::{NftCounts, NftFaults, PfcPlan, PfcSent, Remark, RemarkRule};
pub use observe::ObserverMode;
use rc::{Endpoint, Marking, Msg, MsgKind, QpPlan, RcConfig, ReqStats, Responder, Vlan};
use report::ScenarioReport;
use topo::{H1_IP, H1_MAC, H2_IP, H2_MAC, Topology};

use contract::vendor::Vendor;
use observer::pipeline::{PolicyConfig, rule};

pub const SCENARIOS: [&str; 10] = [
    "clean",
    "delay",
    "delay20",
    "lossy",
    "bleached",
    "congested",
    "pfc-storm",
    "pcp-remark",
    "dscp-remap",
    "ecn-bleach",
];

/// The VLAN of the tagged scenarios.
pub const LAB_VID: u16 = 100;

#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// clean, delay, delay20, lossy, bleached, congested, pfc-storm, pcp-remark, dscp-remap,
    /// ecn-bleach or all.
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
    #[arg(long, value_enum, default_value_t = Vendor::Nvidia)]
    pub profile: Vendor,
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
            profile: Vendor::Nvidia,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("the lab needs root (network namespaces, nftables, AF_PACKET, BPF)")]
    NotRoot,
    #[error(
        "unknown scenario {0:?} (known: clean, delay, delay20, lossy, bleached, congested, pfc-storm, pcp-remark, dscp-remap, ecn-bleach, all)"
    )]
    UnknownScenario(String),
    #[error("topology: {what}")]
    Topology {
        what: &'static str,
        #[source]
        source: netns::NetnsError,
    },
    /// A fault could not be set up or read back, for a reason the lab found itself.
    #[error("faults: {0}")]
    Faults(String),
    /// An nft command in the switch failed.
    #[error("faults: {what}")]
    FaultsCommand {
        what: String,
        #[source]
        source: netns::NetnsError,
    },
    /// nft's JSON output could not be read.
    #[error("faults: {what}")]
    FaultsOutput {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("traffic: {0}")]
    Traffic(String),
    /// roce-observe (live or fallback) misbehaved, as the lab saw it.
    #[error("observer: {0}")]
    Observer(String),
    /// roce-observe could not be started, or its files read.
    #[error("observer: {what}")]
    ObserverIo {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// roce-observe's summary.json is not JSON.
    #[error("observer: {what}")]
    ObserverOutput {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// One of roce-observe's Parquet files could not be read.
    #[error("observer: {what}")]
    ObserverParquet {
        what: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// The fallback observer's collector failed.
    #[error("observer: {what}")]
    Collector {
        what: String,
        #[source]
        source: observer::pipeline::CollectorError,
    },
    /// The policy of the chosen vendor profile could not be built.
    #[error("policy of profile {profile}")]
    Policy {
        profile: Vendor,
        #[source]
        source: contract::policy::PolicyError,
    },
    /// A system call or file operation of the lab itself (sockets, files it writes).
    #[error("{what}")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
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

/// How the emulated NICs tag their frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tagging {
    /// Untagged, as behind DSCP-trust ports.
    #[default]
    Untagged,
    /// In VLAN [`LAB_VID`] with the profile's priorities: data and ACKs on the RDMA priority,
    /// CNPs on theirs (a PCP-trust fabric).
    Profile,
    /// In VLAN [`LAB_VID`] at priority 0, every class: a NIC that leaves the priority to a
    /// DSCP-trust switch.
    Zero,
}

/// Everything one scenario does to the fabric.
#[derive(Clone, Debug, Default)]
pub struct ScenarioSpec {
    pub name: String,
    /// The emulated NICs' tag.
    pub tagging: Tagging,
    /// The observers expect every frame tagged with the profile's priorities (a PCP-trust
    /// fabric: the policy's `pcp` of data, ACKs and CNPs with `tags = "required"`); otherwise
    /// the profile's own check (tagged frames on those priorities, untagged pass), or none
    /// where the NICs tag at priority 0 for a DSCP-trust switch ([`Tagging::Zero`]).
    pub expect_pcp: bool,
    pub nft: NftFaults,
    pub pfc: Option<PfcPlan>,
    /// Index of a QP whose receive queue runs dry (RNR NAKs).
    pub rnr_qp: Option<usize>,
    /// The passive latency is measured (h1's port captured by tcpdump, replayed with latency
    /// on) with the responder's replies held this long (zero: no delay).
    pub reply_delay: Option<Duration>,
    /// Alert rules that must fire / must stay silent.
    pub must_fire: Vec<&'static str>,
    pub must_not_fire: Vec<&'static str>,
}

const DATA_DSCP: u8 = 26;

pub fn udp_sport(i: usize) -> u16 {
    49153 + i as u16
}

/// A per-QP re-marking of QP `qp` (`pct` % of its packets, or all), counted as `q<qp>_<what>`.
fn remark(qp: usize, what: &str, pct: Option<u8>, action: Remark) -> RemarkRule {
    RemarkRule {
        counter: format!("q{qp}_{what}"),
        qp,
        sport: udp_sport(qp),
        pct,
        dscp_in: Vec::new(),
        action,
    }
}

/// The switches at a trust boundary, with tagged frames (`pcp-remark`, `dscp-remap`,
/// `ecn-bleach`): what they re-mark, and the alert it must raise.
fn trust_boundary(s: &mut ScenarioSpec, v: &contract::vendor::Profile) {
    let prio = v.rdma_priority;
    match s.name.as_str() {
        "pcp-remark" => {
            // trusts PCP and re-marks it: priority 3 -> 0 on all of QP 1, 30 % of QP 0
            s.tagging = Tagging::Profile;
            s.expect_pcp = true;
            let to0 = Remark::Pcp {
                pcp: 0,
                vid: LAB_VID,
            };
            s.nft.remarks = vec![remark(0, "pcp", Some(30), to0), remark(1, "pcp", None, to0)];
            s.must_fire = vec![rule::PCP_MISMATCH];
        }
        "dscp-remap" => {
            // trusts DSCP: rewrites DSCP 26 -> 24 on all of QP 0 and half of QP 2, and gives
            // every data packet the priority its DSCP maps to (24 and 26: the RDMA priority)
            s.tagging = Tagging::Zero;
            let to24 = Remark::Dscp(24);
            s.nft.remarks = vec![
                remark(0, "dscp", None, to24),
                remark(2, "dscp", Some(50), to24),
            ];
            for qp in 0..16 {
                let mut r = remark(
                    qp,
                    "map",
                    None,
                    Remark::Pcp {
                        pcp: prio,
                        vid: LAB_VID,
                    },
                );
                r.dscp_in = vec![24, v.data_dscp];
                s.nft.remarks.push(r);
            }
            s.must_fire = vec![rule::DSCP_MISMATCH];
        }
        "ecn-bleach" => {
            // bleaches ECN to Not-ECT: all of QP 1, 20 % of QP 0 (the priority is kept)
            s.tagging = Tagging::Profile;
            s.expect_pcp = true;
            s.nft.remarks = vec![
                remark(0, "ecn", Some(20), Remark::NotEct),
                remark(1, "ecn", None, Remark::NotEct),
            ];
            s.must_fire = vec![rule::NOT_ECT];
        }
        _ => {}
    }
}

/// The fault set of a named scenario (with the emulated NICs of vendor profile `v`), and the
/// alerts it must and must not raise. Every rule of `collector::rule::ALL` that the scenario
/// gives no cause for must stay silent.
pub fn spec(name: &str, v: &contract::vendor::Profile) -> Result<ScenarioSpec, LabError> {
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
        // the latency at h1 with no delay, 2 ms and 20 ms added to the way back
        "clean" => s.reply_delay = Some(Duration::ZERO),
        "delay" => s.reply_delay = Some(Duration::from_millis(2)),
        "delay20" => s.reply_delay = Some(Duration::from_millis(20)),
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
        "pcp-remark" | "dscp-remap" | "ecn-bleach" => trust_boundary(&mut s, v),
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
    let v = profile(args)?;
    let mut marking = Marking::of(v);
    marking.vlan = match spec.tagging {
        Tagging::Untagged => None,
        Tagging::Profile => Some(Vlan::of(v, LAB_VID)),
        Tagging::Zero => Some(Vlan {
            vid: LAB_VID,
            data_pcp: 0,
            ack_pcp: 0,
            cnp_pcp: 0,
        }),
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
        reply_delay: spec.reply_delay.unwrap_or_default(),
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

/// The vendor profile of `--profile`.
fn profile(args: &LabArgs) -> Result<&'static contract::vendor::Profile, LabError> {
    Ok(args.profile.profile())
}

/// The observers' policy: the profile's; with every frame required to carry the profile's
/// priorities where the scenario expects them; with PCP unchecked where the NICs tag at
/// priority 0 (a DSCP-trust fabric). Written to `dir/policy.toml` (both observers read that
/// file) unless it is the profile's.
fn scenario_policy(
    args: &LabArgs,
    spec: &ScenarioSpec,
    dir: &Path,
) -> Result<(PolicyConfig, Option<PathBuf>), LabError> {
    let perr = |source| LabError::Policy {
        profile: args.profile,
        source,
    };
    let v = profile(args)?;
    let text = if spec.expect_pcp {
        let (d, c) = (v.rdma_priority, v.cnp_priority);
        let req = "tags = \"required\"";
        format!(
            "profile = \"{}\"\n[data]\npcp = {d}\n{req}\n[ack]\npcp = {d}\n{req}\n[cnp]\npcp = {c}\n{req}\n",
            v.name
        )
    } else if spec.tagging == Tagging::Zero {
        let any = "pcp = \"any\"";
        format!(
            "profile = \"{}\"\n[data]\n{any}\n[ack]\n{any}\n[cnp]\n{any}\n",
            v.name
        )
    } else {
        return Ok((PolicyConfig::of(args.profile), None));
    };
    let path = dir.join("policy.toml");
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, text))
        .map_err(|source| LabError::Sys {
            what: path.display().to_string(),
            source,
        })?;
    Ok((PolicyConfig::from_file(&path).map_err(perr)?, Some(path)))
}

/// Ground truth of one scenario run.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    pub req: Vec<ReqStats>,
    pub resp: Responder,
    pub nft: NftCounts,
    pub pfc: PfcSent,
}

/// Runs one scenario on a fresh fabric and returns its report (check [`ScenarioReport::ok`]):
/// set-up (fabric, faults, observers), traffic, collection of what was injected and observed,
/// and the comparison. The fabric, the observers and the temporary output are removed on every
/// exit path.
pub fn run_scenario(args: &LabArgs, name: &str, run_no: usize) -> Result<ScenarioReport, LabError> {
    let t0 = Instant::now();
    let spec = spec(name, profile(args)?)?;
    let cfg = rc_config(args, &spec)?;
    let topo = Topology::create(&format!("{}-{run_no}", std::process::id()))?;
    spec.nft.install(&topo.sw)?;
    tracing::info!(scenario = name, ns_h1 = %topo.h1.name, ns_sw = %topo.sw.name, ns_h2 = %topo.h2.name, "fabric up");
    let out = ScenarioOut::new(args, name);
    let (policy, policy_file) = scenario_policy(args, &spec, &out.dir)?;
    // Live observers start (and attach) before any traffic.
    let live = match args.observer {
        ObserverMode::Live => start_live_observers(args, &topo, &out.dir, policy_file.as_deref())?,
        ObserverMode::Userspace => Vec::new(),
    };
    // The latency scenarios: h1's port captured by tcpdump (kernel time stamps) meanwhile.
    let tcpdump = match spec.reply_delay {
        Some(_) => Some(latency::Tcpdump::start(
            &topo.h1,
            topo::H1_IF,
            &out.dir.join("h1-capture.pcap"),
        )?),
        None => None,
    };
    let traffic = traffic::TrafficRun::new(args, &spec, &cfg, &topo, &out.dir, &policy);
    let (mut truth, captured) = traffic.run()?;
    truth.nft = faults::read_counters(&topo.sw)?;
    let lat = match tcpdump {
        Some(t) => Some(latency::measure(&t.stop()?)?),
        None => None,
    };
    let mut observed = match args.observer {
        ObserverMode::Userspace => observe::collect_userspace(captured, &out.dir)?,
        ObserverMode::Live => observe::collect_live(live)?,
    };
    observed.latency = lat;
    drop(topo);
    let mut r = build_report(args, &spec, &cfg, &truth, &observed, &policy);
    if out.kept {
        r.info.push((
            "roce-observe output kept in".into(),
            out.dir.display().to_string(),
        ));
    }
    r.secs = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Where one scenario's observers write (`<out>/<scenario>`, by default under a temporary
/// directory), removed when dropped unless `--out` or `--keep-out` keeps it.
struct ScenarioOut {
    dir: PathBuf,
    kept: bool,
    _remove: RemoveOnDrop,
}

impl ScenarioOut {
    fn new(args: &LabArgs, name: &str) -> Self {
        let root = match &args.out {
            Some(p) => p.clone(),
            None => std::env::temp_dir().join(format!("ro-lab-out-{}", std::process::id())),
        };
        let dir = root.join(name);
        let kept = args.out.is_some() || args.keep_out;
        ScenarioOut {
            _remove: RemoveOnDrop((!kept).then(|| dir.clone())),
            dir,
            kept,
        }
    }
}

/// Starts roce-observe on h2 and h1 (in parallel) and waits until both are attached; with
/// `policy`, both check that policy file.
fn start_live_observers(
    args: &LabArgs,
    topo: &Topology,
    out_dir: &Path,
    policy: Option<&Path>,
) -> Result<Vec<observe::LiveObserver>, LabError> {
    let exe = match &args.observer_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|source| LabError::Sys {
            what: "current_exe".into(),
            source,
        })?,
    };
    let mut live = Vec::new();
    for (ns, iface, host) in topo.observed_hosts() {
        let mut extra = vec![
            "--profile".to_string(),
            args.profile.to_string(),
            "--host".into(),
            format!("lab-{host}"),
        ];
        if let Some(p) = policy {
            extra.extend(["--policy".to_string(), p.display().to_string()]);
        }
        extra.extend(args.observer_args.iter().cloned());
        let dir = out_dir.join(host);
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
    Ok(live)
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

/// Runs the requested scenario(s), printing each table; returns the reports.
pub fn run_lab(args: &LabArgs) -> Result<Vec<ScenarioReport>, LabError> {
    if !netns::is_root() {
        return Err(LabError::NotRoot);
    }
    let names: Vec<&str> = if args.scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        spec(&args.scenario, profile(args)?)?;
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

/// The lab's error prints its cause once, as observer's errors do (observer's
/// `error_chain_tests`): its message says what failed, the cause is only its `source()`.
#[cfg(test)]
mod error_chain_tests {
    use super::LabError;
    use contract::error::chain;
    use observer::pipeline::CollectorError;

    /// The text of the innermost cause.
    const CAUSE: &str = "the-innermost-cause";

    fn lab_error() -> Box<dyn std::error::Error + Send + Sync + 'static> {
        Box::new(LabError::Collector {
            what: "fallback collector on veth0".into(),
            source: CollectorError::OutDir {
                path: "/out".into(),
                err: std::io::Error::other(CAUSE),
            },
        })
    }

    #[test]
    fn every_cause_is_printed_once() {
        test_support::errors::assert_cause_printed_once("LabError::Collector", lab_error(), CAUSE);
    }

    /// The message still says what failed, and with what.
    #[test]
    fn messages_name_what_failed() {
        let (name, e) = ("LabError::Collector", lab_error());
        let text = chain(&*e);
        assert!(text.contains("/out"), "{name}: {text}");
        assert!(text.ends_with(CAUSE), "{name}: {text}");
    }
}
