//! The live command: options, start-up diagnosis, attach; then the kernel source (or the
//! synthetic one) runs on the wall clock into the collector (`sources::paced`) until
//! SIGINT / SIGTERM / SIGHUP or `--duration`; then flush, close, detach.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use observer_common::maps::policy_flags;

use super::args::{
    parse_duration, parse_host, parse_link_speed, parse_point_label, parse_rotate_mb,
};
use crate::pipeline::{self, Collector, CollectorConfig, PolicyConfig};
use crate::sinks::alertmanager::AlertmanagerSink;
use crate::sinks::evidence::{Evidence, LiveEvidence};
use crate::sinks::prometheus::{ExporterConfig, MetricsSink};
use crate::sinks::tui::{self, HeaderInfo, Tui};
use crate::sources::host_qps::QpFeed;
use crate::sources::kernel::diagnosis as diag;
use crate::sources::kernel::interfaces::{KernelSource, NicFeed, Observed};
use crate::sources::kernel::qp_probe::QpProbe;
use crate::sources::kernel::{Attached, LiveError, LiveIface, LiveOptions, XdpMode};
use crate::sources::paced::{Paced, Polled, SyntheticFeed};
use crate::sources::synthetic::Synthetic;
use crate::sources::{Source, Stop};
use contract::vendor::Vendor;
use nic::{self, LiveNicReader, NicReader};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpModeArg {
    /// Native (driver) XDP, else generic XDP, else tc ingress.
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (SKB) XDP: works on every interface, slower.
    Generic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct LiveArgs {
    /// Interface to observe (repeatable: --iface ens1f0 --iface ens1f1). A name that is not
    /// UTF-8 is taken as it is and written with `\xNN` for each byte that is not (`eth\xff0`),
    /// which `--iface` also accepts.
    #[arg(long = "iface", value_name = "IFACE", value_parser = contract::cli::iface_arg())]
    pub iface: Vec<String>,
    /// Output directory: Parquet tables flows/, interfaces/, alerts/ (Hive partitions
    /// date=YYYY-MM-DD/hour=HH), alerts.jsonl and summary.json.
    #[arg(long, value_name = "DIR", default_value = "./roce-flows")]
    pub out: PathBuf,
    /// Flow-log interval (seconds; suffixes ms, s, m, h accepted).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Expected marking profile (data DSCP 26 + ECT, CNP DSCP 48, PFC on priority 3).
    #[arg(long, value_name = "VENDOR", value_enum, default_value_t = Vendor::Nvidia)]
    pub profile: Vendor,
    /// Policy TOML: expected DSCP / PCP / ECN per class (data, ack, cnp), RDMA priority,
    /// expected RoCE MTU, alert thresholds and hold-down (overrides --profile; see README).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// XDP attach mode for ingress.
    #[arg(long, value_name = "MODE", value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// Dedicated capture port (mirror/ERSPAN): drop frames after observing them (XDP_DROP),
    /// which keeps the host stack out of the way at line rate. Never use on a production port.
    #[arg(long)]
    pub capture_port: bool,
    /// Do not attach tc egress (what this host sends is then not observed).
    #[arg(long)]
    pub no_egress: bool,
    /// Stop after this long (seconds; suffixes ms, s, m, h). Default: until SIGINT/SIGTERM.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Most keys in the kernel's per-QP table (784 bytes of kernel memory each). When it is
    /// 90% full, keys idle longer than --idle-evict are evicted (their counts are kept).
    #[arg(long, value_name = "KEYS", default_value_t = 65536)]
    pub max_qps: u32,
    /// Idle time after which a QP key may be evicted from a nearly full map.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub idle_evict: Duration,
    /// Link speed for PFC pause seconds (default: read from the interface): `100G`, `400g`,
    /// a plain number under 100000 as Gb/s (`100`), or bit/s.
    #[arg(long, value_name = "SPEED", value_parser = parse_link_speed)]
    pub link_speed: Option<u64>,
    /// Close a Parquet file after this much data time (seconds; suffixes accepted) ...
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = parse_duration)]
    pub rotate: Duration,
    /// ... or this many MiB, whichever comes first.
    #[arg(long, value_name = "MIB", default_value = "128", value_parser = parse_rotate_mb)]
    pub rotate_mb: u64,
    /// Host name in file names and rows (default: this machine's).
    #[arg(long, value_name = "NAME", value_parser = parse_host)]
    pub host: Option<String>,
    /// Label of this observation point (`tor1-mirror`), in the `point` column of every table
    /// and in summary.json: trees from several points, side by side, are told apart and joined.
    #[arg(long, value_name = "LABEL", value_parser = parse_point_label)]
    pub point_label: Option<String>,
    /// Serve Prometheus metrics (OpenMetrics text) on http://ADDR/metrics, e.g.
    /// 127.0.0.1:9847; off by default; binds exactly ADDR (docs/monitoring.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// IP pairs per interface direction with their own metric series (the first ones by
    /// packets), and as many more for pairs with faults; the others add up in src="other",
    /// dst="other".
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub metrics_top_pairs: usize,
    /// Post every alert to this Alertmanager (v2 API; http://[USER:PASSWORD@]HOST:PORT, the
    /// user information sent as basic authentication and never shown; repeatable), resolved
    /// once the policy's `resolve_after_s` (default 300) passes quietly.
    #[arg(long = "alertmanager", value_name = "URL")]
    pub alertmanager: Vec<String>,
    /// Keep a bounded sample of the frames that broke a rule (marking, PSN gap, resend, NAK, RNR
    /// NAK) in this pcapng file, each with a comment naming its rules, to open in Wireshark:
    /// the kernel programs copy the first 128 bytes of at most `--evidence-rate` offending
    /// frames per second and CPU, at most `--evidence-per-key` per rule and QP key are written.
    #[arg(long, value_name = "FILE.pcapng")]
    pub evidence: Option<PathBuf>,
    #[command(flatten)]
    pub evidence_limits: super::args::EvidenceLimits,
    /// Offending frames the kernel programs sample per second on each CPU for `--evidence`
    /// (the others are counted, not copied).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub evidence_rate: u32,
    /// Plain logs even when stdout is a terminal (no refreshing view).
    #[arg(long)]
    pub plain: bool,
    /// Log format of the plain logs on stderr.
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Do not read the NIC's own counters and QoS configuration (ethtool statistics, RDMA port
    /// counters, DCB, congestion-control settings), which are read every interval by default.
    #[arg(long)]
    pub no_nic: bool,
    /// Do not read the host's QPs from the RDMA subsystem (every QP of every RDMA device, its
    /// process, state and packets from its PSNs: the `qps` table, docs/qps.md), which are read
    /// every interval by default.
    #[arg(long)]
    pub no_host_qps: bool,
    /// Per-QP-group hardware counters by counter binding, grouped by `type`, `pid` or
    /// `type,pid`: turns the RDMA ports' counter auto mode on where it is off (and off again at
    /// exit), so QPs set up from then on count out-of-sequence packets, sequence errors, local
    /// ACK timeouts and RNR retries per group (mlx5; needs CAP_NET_ADMIN; docs/qps.md).
    #[arg(long, value_name = "GROUPING", value_parser = qps::counters::parse_mask, conflicts_with = "no_host_qps")]
    pub qp_counters: Option<u32>,
    /// Log level of roce-observe's own messages: error, warn, info, debug or trace (default:
    /// warn under the terminal view, else info; RUST_LOG, when set, wins). `debug` also turns
    /// on the eBPF programs' rare-path reports (table full, events lost, exclusions).
    #[arg(long, value_name = "LEVEL", value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub log_level: Option<String>,
    /// Testing and demos without BPF: feed N synthetic QPs through the userspace datapath
    /// instead of attaching to an interface.
    #[arg(long, value_name = "N", hide = true)]
    pub synthetic_qps: Option<u32>,
    /// With --synthetic-qps: varied traffic per QP, with CE and CNPs, PSN gaps, off-policy
    /// DSCP, retransmissions, NAKs and RNR NAKs (docs/testing.md).
    #[arg(long, hide = true, requires = "synthetic_qps")]
    pub synthetic_mix: bool,
    /// With --synthetic-qps: no more traffic after this long (the keys stay, idle).
    #[arg(
        long,
        value_name = "DURATION",
        hide = true,
        requires = "synthetic_qps",
        value_parser = parse_duration
    )]
    pub synthetic_stop_after: Option<Duration>,
}

fn init_logs(args: &LiveArgs, terminal: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if terminal { "warn" } else { "info" };
    let level = args.log_level.as_deref().unwrap_or(default);
    // Our targets at the level asked for; the libraries (hyper, axum, ...) at warn at most.
    let ours = format!("warn,observer={level},roce_observe={level}");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(ours));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(tui::term::log_writer)
        // no colour codes: the writer shows every control character as text
        .with_ansi(false);
    let _ = match args.log_format {
        LogFormat::Json => b.json().try_init(),
        LogFormat::Text => b.try_init(),
    };
    // without the terminal view the log is the output: start-up lines join it (at info); the
    // view keeps them as plain lines (its log shows warnings only)
    let in_log = !terminal && tracing::enabled!(target: "roce_observe", tracing::Level::INFO);
    SAY_IN_LOG.store(in_log, std::sync::atomic::Ordering::Relaxed);
}

pub fn load_policy(args: &LiveArgs) -> anyhow::Result<PolicyConfig> {
    let mut p = match &args.policy {
        Some(f) => PolicyConfig::from_file(f)?,
        None => PolicyConfig::of(args.profile),
    };
    if args.capture_port {
        p.expected.flags |= policy_flags::DROP_AFTER_OBSERVE;
    }
    Ok(p)
}

/// A live error with what to do about it.
fn explain(iface: &str, e: LiveError, mode: XdpModeArg) -> anyhow::Error {
    match e {
        // Generic XDP is the way around a native program, not around a generic one.
        LiveError::XdpSlotTaken(_) if mode == XdpModeArg::Generic => anyhow::anyhow!(
            "{e} in generic mode\n  see what holds it: `ip link show dev {iface}` / `bpftool net show dev {iface}`, and detach it"
        ),
        LiveError::XdpSlotTaken(_) => anyhow::anyhow!(
            "{e}\n  see what holds it: `ip link show dev {iface}` / `bpftool net show dev {iface}`; or run with --xdp-mode generic"
        ),
        LiveError::Verifier { .. } => anyhow::anyhow!(
            "{e}\n  this is a bug in roce-observe's eBPF program for this kernel: please report it with `uname -r` and the log above"
        ),
        other => anyhow::Error::new(other).context(iface.to_string()),
    }
}

pub fn run_live(args: LiveArgs) -> anyhow::Result<()> {
    let terminal = std::io::stdout().is_terminal() && !args.plain;
    pipeline::tune_allocator();
    init_logs(&args, terminal);
    let policy = load_policy(&args)?;
    if args.iface.is_empty() && args.synthetic_qps.is_none() {
        anyhow::bail!("give at least one interface: roce-observe --iface IFACE (see --help)");
    }
    check_out_dir(&args.out)?;
    let host = args.host.clone().unwrap_or_else(pipeline::host_name);
    let mut cfg = CollectorConfig::new(args.out.clone(), &host, "live", policy.clone());
    cfg.rotate_secs = args.rotate.as_secs().max(1);
    cfg.rotate_bytes = args.rotate_mb << 20;
    cfg.terminal = terminal;
    cfg.log_json = args.log_format == LogFormat::Json;
    cfg.point_label = args.point_label.clone();
    if !args.no_nic {
        cfg.nic_policy = Some(nic::command::check_policy(&policy).0);
    }
    let evidence = match &args.evidence {
        Some(p) if args.synthetic_qps.is_none() => Some(LiveEvidence::new(
            Evidence::create(
                p,
                "roce-observe --evidence",
                args.evidence_limits.evidence_per_key,
                args.evidence_limits.evidence_max,
            )
            .context("--evidence")?,
        )),
        Some(_) => anyhow::bail!("--evidence samples frames in the kernel: it needs --iface"),
        None => None,
    };
    let stop = Stop::on_signals();
    let (mut col, res, evidence) = if let Some(n) = args.synthetic_qps {
        tracing::warn!(
            qps = n,
            "synthetic source: no BPF, {n} QPs through the userspace datapath"
        );
        let synth = match args.synthetic_mix {
            true => Synthetic::mixed(policy.expected, n),
            false => Synthetic::new(policy.expected, n, 4),
        };
        let link = args.link_speed.or(Some(100_000_000_000));
        let iface = "synthetic0";
        let mut feed = SyntheticFeed::new(synth, iface, link);
        feed.stop_after = args.synthetic_stop_after;
        let (col, res, _) = observe(feed, cfg, &args, &stop, vec![iface.into()], Vec::new())?;
        (col, res, None)
    } else {
        let (mut source, notes) = attach_all(&args, &policy)?;
        source.evidence = evidence;
        let (col, res, mut source) = observe(source, cfg, &args, &stop, args.iface.clone(), notes)?;
        let evidence = source.finish_evidence();
        // the programs are detached here
        drop(source);
        (col, res, evidence)
    };
    let mut evidence_err = None;
    if let Some((path, st)) = evidence {
        match st {
            Ok(st) => col.add_to_summary("evidence", st.summary(&path.display().to_string())),
            Err(e) => evidence_err = Some(e),
        }
    }
    if let Err(e) = res {
        // An interval could not be accounted, or the view failed: still close every file
        // written so far.
        if let Err(f) = col.finish_without_qps() {
            tracing::error!(error = %contract::error::chain(&f), "could not finish the output files");
        }
        return Err(e);
    }
    finish(
        col,
        &args,
        if stop.is_set() {
            stop.reason_name()
        } else {
            "duration"
        },
    )?;
    match evidence_err {
        Some(e) => Err(anyhow::Error::new(e).context("--evidence")),
        None => Ok(()),
    }
}

/// Runs `source` into a new collector until the stop or `--duration`, with the terminal view
/// when `cfg.terminal`; the view is closed (the terminal restored) before this returns. The
/// collector, how the run ended, and the source.
fn observe<P: Polled>(
    source: P,
    cfg: CollectorConfig,
    args: &LiveArgs,
    stop: &Stop,
    ifaces: Vec<String>,
    notes: Vec<String>,
) -> anyhow::Result<(Collector, anyhow::Result<()>, P)> {
    let terminal = cfg.terminal;
    let info = HeaderInfo {
        host: cfg.host.clone(),
        out: args.out.display().to_string(),
        interval: args.interval,
        ifaces,
        notes,
    };
    let dscp = cfg.policy.expected.dscp;
    let mut col = collector(cfg, args)?;
    let view = match terminal {
        true => {
            let (view, sink) =
                Tui::start(info, dscp, stop).context("starting the terminal view")?;
            col.add_sink(Box::new(sink));
            Some(view)
        }
        false => None,
    };
    let mut paced = paced(source, args);
    let res = paced.run(&mut col, stop);
    let closed = view.map(Tui::close).transpose();
    let res = res
        .map_err(|e| anyhow::Error::new(e).context("accounting an interval"))
        .and_then(|_| closed.map(|_| ()).context("the terminal view"));
    Ok((col, res, paced.inner))
}

fn collector(cfg: CollectorConfig, args: &LiveArgs) -> anyhow::Result<Collector> {
    let expected_dscp = cfg.policy.expected.dscp;
    let resolve_after_ns = cfg.policy.thresholds.resolve_after_ns;
    let mut col =
        Collector::new(cfg).with_context(|| format!("output directory {}", args.out.display()))?;
    if let Some(addr) = args.metrics {
        let cfg = ExporterConfig {
            top_pairs: args.metrics_top_pairs,
            expected_dscp,
            max_qps: args.max_qps as u64,
        };
        col.add_sink(Box::new(MetricsSink::start(addr, cfg)?));
    }
    if !args.alertmanager.is_empty() {
        let am = AlertmanagerSink::start(&args.alertmanager, resolve_after_ns)?;
        col.add_sink(Box::new(am));
    }
    Ok(col)
}

fn paced<P: Polled>(inner: P, args: &LiveArgs) -> Paced<P> {
    Paced {
        inner,
        interval: args.interval,
        duration: args.duration,
    }
}

/// Start-up diagnosis of every interface, then the programs attached to each; with what the
/// terminal view must say from the start ([`diag::Diagnosis::view_note`]).
fn attach_all(
    args: &LiveArgs,
    policy: &PolicyConfig,
) -> anyhow::Result<(KernelSource, Vec<String>)> {
    let root = std::path::Path::new("/");
    let mut diags = Vec::new();
    for i in &args.iface {
        diags.push(diag::diagnose(root, i)?);
    }
    diag::check_privileges()?;
    diag::check_btf(root)?;
    let json = args.log_format == LogFormat::Json;
    for d in &diags {
        for l in d.report() {
            say(json, &l);
        }
    }
    // The host's QPs and the modify-QP probe first: QPs set up once an interface says it is
    // attached have their marking seen.
    let host_qps = (!args.no_host_qps)
        .then(|| host_qps_feed(json, args.qp_counters))
        .flatten();
    let mut ifaces = Vec::new();
    for d in &diags {
        let opts = LiveOptions {
            iface: d.iface.clone(),
            xdp_mode: match args.xdp_mode {
                XdpModeArg::Auto => XdpMode::Auto,
                XdpModeArg::Native => XdpMode::Native,
                XdpModeArg::Generic => XdpMode::Generic,
            },
            max_qps: args.max_qps,
            policy: policy.expected,
            egress: !args.no_egress,
            sample_per_sec: if args.evidence.is_some() {
                args.evidence_rate
            } else {
                0
            },
        };
        let l = LiveIface::attach(&opts).map_err(|e| explain(&d.iface, e, args.xdp_mode))?;
        say(json, &attached_line(l.attached(), args.capture_port));
        let ifindex = Some(l.attached().ifindex);
        ifaces.push(Observed {
            name: d.iface.clone(),
            opts,
            ifindex,
            link_speed_bps: args.link_speed.or(d.speed_bps),
            iface: l,
            nic: (!args.no_nic).then(|| nic_feed(&d.iface, json)).flatten(),
            sampler_seen: Default::default(),
        });
    }
    let src = KernelSource::new(ifaces, args.max_qps, args.idle_evict);
    let notes = diags
        .iter()
        .filter_map(diag::Diagnosis::view_note)
        .collect();
    Ok((
        match host_qps {
            Some(f) => src.with_host_qps(f),
            None => src,
        },
        notes,
    ))
}

/// The host's QPs read every interval, after one read that says what it sees; `None` (said at
/// start-up) when the host has no RDMA subsystem.
fn host_qps_feed(json: bool, qp_counters: Option<u32>) -> Option<QpFeed> {
    let proc = qps::Procfs::default();
    let mut nl = match nic::rdma::RdmaNetlink::open() {
        Ok(nic::Reading::Read(nl)) => nl,
        Ok(nic::Reading::Unavailable(u)) => {
            say(
                json,
                &format!("host QPs: not read ({}; no RDMA subsystem)", u.detail),
            );
            return None;
        }
        Err(e) => {
            say(
                json,
                &format!("host QPs: not read ({})", contract::error::chain(&e)),
            );
            return None;
        }
    };
    match qps::read(&mut nl, &proc, qps::inventory::DEFAULT_MAX_QPS) {
        Ok(inv) => {
            say(
                json,
                &format!(
                    "host QPs: {} on {} RDMA device(s), read every interval from the RDMA subsystem (qps table)",
                    inv.qps.len(),
                    inv.devices.len()
                ),
            );
            // Stalls and the set-ups of QPs the probe cannot see need mlx5's raw QP context.
            let sysfs = nic::rdma::RdmaSysfs::new("/");
            let mut others: Vec<String> = Vec::new();
            for d in &inv.devices {
                // A driver not known: its raw context is tried, and used only if it decodes.
                if let Ok(nic::Reading::Read(drv)) = sysfs.parent_driver(&d.name)
                    && !qps::raw::decodes_raw_context(Some(&drv))
                {
                    others.push(format!("{} ({drv})", d.name));
                }
            }
            if !others.is_empty() {
                say(
                    json,
                    &format!(
                        "host QPs: reduced on {}: no raw QP context decoded (mlx5 only): qp_stalled is not judged there, and QPs set up before the probe stay marking unknown",
                        others.join(", ")
                    ),
                );
            }
        }
        Err(e) => say(
            json,
            &format!(
                "host QPs: the first read failed ({}); retrying every interval",
                contract::error::chain(&e)
            ),
        ),
    }
    let mut feed = QpFeed::new(Box::new(nl), proc, qps::inventory::DEFAULT_MAX_QPS);
    if let Some(mask) = qp_counters {
        for line in feed.enable_counters(mask) {
            say(json, &format!("host QPs: counters {line}"));
        }
    }
    // Each QP's marking: the modify-QP probe sees every set-up from now on.
    Some(match QpProbe::attach() {
        Ok(p) => {
            say(
                json,
                &format!(
                    "host QPs: the modify-QP probe is attached ({}): QPs set up from now on have their marking checked; those set up before are marking unknown",
                    p.attach_point()
                ),
            );
            feed.with_probe(p)
        }
        Err(e) => {
            say(
                json,
                &format!(
                    "host QPs: reduced: no modify-QP probe ({}): every QP's marking is unknown",
                    contract::error::chain(&e)
                ),
            );
            feed
        }
    })
}

/// A start-up line for a person: on stderr as it is, or with `--log-format json` as a log
/// event (stderr then carries JSON lines only).
/// Fails before anything is attached when `--out` can never be written: it cannot be created
/// or is not a writable directory (a missing parent on a pseudo file system, a file in the way,
/// no permission, a read-only file system). A full disk or quota is not refused: counting
/// starts, writing is retried every interval and `output_write_failed` says so.
fn check_out_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::io::ErrorKind as K;
    let never = |e: &std::io::Error| {
        matches!(
            e.kind(),
            K::NotFound
                | K::NotADirectory
                | K::PermissionDenied
                | K::ReadOnlyFilesystem
                | K::AlreadyExists
                | K::InvalidInput
                | K::InvalidFilename
        )
    };
    let refuse = |what: &str, e: std::io::Error| {
        anyhow::Error::new(e).context(format!(
            "--out {}: {what}; give a writable directory",
            contract::error::visible(&dir.display().to_string())
        ))
    };
    match std::fs::create_dir_all(dir) {
        Err(e) if never(&e) => return Err(refuse("the output directory cannot be created", e)),
        Err(_) => return Ok(()), // the collector reports it and retries
        Ok(()) => {}
    }
    let probe = dir.join(format!(".roce-observe-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == K::AlreadyExists => Ok(()),
        Err(e) if never(&e) => Err(refuse("no file can be created in it", e)),
        Err(_) => Ok(()),
    }
}

/// Whether start-up lines go to the log (plain or JSON, no terminal view): then in the log's
/// one format, not as bare lines between its records.
static SAY_IN_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn say(json: bool, line: &str) {
    if json || SAY_IN_LOG.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(target: "roce_observe", "{line}");
    } else {
        eprintln!("{}", contract::error::visible(line));
    }
}

/// The NIC source of `iface`, after one read that says what it will read.
fn nic_feed(iface: &str, json: bool) -> Option<NicFeed> {
    let mut r = match LiveNicReader::new(iface, nic::LiveOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(iface, error = %contract::error::chain(&e), "the NIC's counters cannot be read");
            return None;
        }
    };
    match r.read() {
        Ok(s) => nic::startup_lines(&s).iter().for_each(|l| say(json, l)),
        Err(e) => {
            tracing::warn!(iface, error = %contract::error::chain(&e), "NIC: first read failed")
        }
    }
    Some(NicFeed::new(Box::new(r)))
}

fn attached_line(a: &Attached, capture_port: bool) -> String {
    format!(
        "{}: attached ingress {}{}{}{}",
        a.iface,
        a.ingress,
        a.xdp_len
            .as_ref()
            .map(|p| format!(" (multi-buffer frame length: {p})"))
            .unwrap_or_default(),
        a.egress
            .as_deref()
            .map(|e| format!(", egress {e}"))
            .unwrap_or_else(|| ", egress not observed".into()),
        if capture_port {
            " (capture port: frames dropped after observing)"
        } else {
            ""
        }
    )
}

/// Flush and close every file, write summary.json, say where everything went.
fn finish(col: Collector, args: &LiveArgs, stop_reason: &str) -> anyhow::Result<()> {
    // summary.json is written in full; this reads the output statistics only.
    let summary = col
        .finish_without_qps()
        .context("finishing the output files")?;
    let out = &summary["output"];
    tracing::info!(reason = stop_reason, out = %args.out.display(), "stopped: files flushed and closed, programs detached");
    let alerts = summary
        .get("alerts")
        .map(|a| a.to_string())
        .unwrap_or_default();
    let evidence = summary
        .get("evidence")
        .map(crate::sinks::summary_text::evidence_line);
    if args.log_format == LogFormat::Json {
        if let Some(e) = &evidence {
            tracing::info!(evidence = %summary["evidence"], "{e}");
        }
        tracing::info!(reason = stop_reason, flow_rows = out["flows"]["rows"].as_u64(),
            flow_files = out["flows"]["files"].as_u64(), alerts = %alerts,
            summary = %args.out.join("summary.json").display(), "stopped");
        return Ok(());
    }
    let line = format!(
        "roce-observe: stopped ({stop_reason}); {} flow rows in {} files, alerts {alerts}; summary in {}",
        out["flows"]["rows"],
        out["flows"]["files"],
        args.out.join("summary.json").display()
    );
    eprintln!("{}", contract::error::visible(&line));
    if let Some(e) = evidence {
        eprintln!("{}", contract::error::visible(&e));
    }
    Ok(())
}
