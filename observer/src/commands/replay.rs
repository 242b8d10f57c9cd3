//! `roce-observe replay FILE... | -`: options, and the run that wires the capture source to the
//! collector and prints the summary.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use observer_common::maps::{Policy, policy_flags};
use serde_json::{Value, json};

use super::args::{
    parse_duration, parse_host, parse_link_speed, parse_point_label, parse_rotate_mb,
};
use crate::pipeline::alerts::Severity;
use crate::pipeline::rules::Rule;
use crate::pipeline::{Collector, CollectorConfig, PolicyConfig};
use crate::sinks::evidence::Evidence;
use crate::sinks::summary_json::{QpList, SummaryDoc, interfaces_json};
use crate::sinks::summary_text;
use crate::sources::capture::{CaptureSource, ReplayError, ReplayOptions};
use crate::sources::offload::Offload;
use crate::sources::{Discard, Source, Stop};
use contract::vendor::Vendor;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Capture files (pcap or pcapng), or `-` for standard input (read as a stream).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory, as for live capture: Parquet tables flows/, interfaces/, alerts/,
    /// alerts.jsonl and summary.json (the collector, with capture timestamps).
    #[arg(long, value_name = "DIR", default_value = "./roce-flows")]
    pub out: PathBuf,
    /// Write no files: only print the summary. No alert rule runs, so it is refused with
    /// `--fail-on` (a gate that can never fail).
    #[arg(long, conflicts_with_all = ["out", "fail_on"])]
    pub no_out: bool,
    /// Snapshot interval in capture time: `1s`, `500ms`, `10` (seconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Expected marking profile: nvidia, broadcom, or `none` (count only, check no marking).
    #[arg(long, value_name = "VENDOR", value_enum, default_value_t = ReplayProfile::Nvidia)]
    pub profile: ReplayProfile,
    /// Policy TOML file (overrides --profile).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Largest number of QP keys per interface (as the kernel map's size).
    #[arg(long, default_value_t = 65536)]
    pub max_qps: u32,
    /// Link speed for turning PFC quanta into seconds: Gb/s as for live (`100`), or bit/s, or
    /// with a suffix (`100G`, `400g`, `25000000000`).
    #[arg(long, value_name = "SPEED", value_parser = parse_link_speed)]
    pub link_speed: Option<u64>,
    /// Close a Parquet file after this much capture time (seconds; suffixes accepted) ...
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = parse_duration)]
    pub rotate: Duration,
    /// ... or this many MiB, whichever comes first.
    #[arg(long, value_name = "MIB", default_value = "128", value_parser = parse_rotate_mb)]
    pub rotate_mb: u64,
    /// Do not verify ICRCs (faster; ICRC counts stay 0).
    #[arg(long)]
    pub no_icrc: bool,
    /// Measure passive per-QP latency (docs/latency.md): the flows table's latency columns,
    /// summary.json's `latency`, the `latency_high` alert. Off by default until its cost is
    /// within 10 % (docs/benchmarks.md).
    #[arg(long)]
    pub latency: bool,
    /// Print the final totals as JSON (`summary::summary_json` form) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when an alert of this severity or higher was raised (`info`,
    /// `warning`, `critical`): gates a CI job on what a capture shows. The summary is printed
    /// first.
    #[arg(long, value_name = "SEVERITY", value_parser = parse_severity)]
    pub fail_on: Option<Severity>,
    /// Host name written into output file names (default: this host's name).
    #[arg(long, value_parser = parse_host)]
    pub host: Option<String>,
    /// Label of the observation point the captures were taken at (`tor1-mirror`), in the
    /// `point` column of every table and in summary.json: trees from several points of a
    /// fleet, side by side, are told apart and joined (`roce-analyze path`).
    #[arg(long, value_name = "LABEL", value_parser = parse_point_label)]
    pub point_label: Option<String>,
    /// Keep the crash journal also when every input is a regular file. By default only a
    /// stream (`-`, a FIFO, a character device) is journaled: it cannot be read again, while a
    /// replay of files killed before its end is run again from the files (the window it was
    /// writing is then left out: its part file is removed at the next start).
    #[arg(long)]
    pub journal: bool,
    /// Write the frames that broke a rule (marking, PSN gap, resend, NAK, bad ICRC, PFC on
    /// another priority, 802.3x PAUSE) to this pcapng file, each with a comment naming its
    /// rules, to open in Wireshark; at most `--evidence-per-key` frames per rule and key.
    #[arg(long, value_name = "FILE.pcapng")]
    pub evidence: Option<PathBuf>,
    #[command(flatten)]
    pub evidence_limits: super::args::EvidenceLimits,
    /// Run the outputs (rows, alert rules, Parquet encoding, summaries) on the thread that
    /// reads the packets, one after the other, instead of on a thread of their own beside it:
    /// one core, the same outputs.
    #[arg(long, conflicts_with = "no_out")]
    pub inline_outputs: bool,
    /// Captures of different observation points (files of different stems) read at once, at
    /// most this many (default: the cores this process may use, less one for the outputs'
    /// thread unless `--no-out`; a reader beyond that reads ahead only while the outputs wait);
    /// files of one stem are read one after another. `1`: every input one after another. The
    /// outputs are the same.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub readers: Option<u16>,
}

/// Whether a replay of `files` keeps the crash journal: with `forced` (`--journal`), or when
/// an input is a stream (standard input, or not a regular file: a FIFO, a character device),
/// whose packets could not be read again after a crash. A file that cannot be looked at counts
/// as a stream (the journal is the safe side; the replay reports the error itself).
pub fn journal_for(files: &[PathBuf], forced: bool) -> bool {
    forced
        || files
            .iter()
            .any(|f| f.as_os_str() == "-" || std::fs::metadata(f).map_or(true, |m| !m.is_file()))
}

/// `roce-observe replay`: every input through the capture source into the collector, then the
/// summary (table or JSON) on stdout. SIGINT / SIGTERM / SIGHUP stop reading: what was read is
/// accounted, the files are closed and the summary printed (exit 0).
pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    init_logs();
    // An input that cannot be opened is said at once, before anything is read or written (not
    // after an empty summary).
    for f in args.files.iter().filter(|f| f.as_os_str() != "-") {
        if let Err(e) = std::fs::File::open(f) {
            anyhow::bail!("{}: cannot open: {e}", f.display());
        }
        if f.is_dir() {
            anyhow::bail!("{}: is a directory, not a capture file", f.display());
        }
    }
    let policy_cfg = policy(&args)?;
    let collector = if args.no_out {
        None
    } else {
        Some(collector(&args, policy_cfg.as_ref())?)
    };
    let mut dp_policy = policy_cfg.as_ref().map_or(Policy::NONE, |c| c.expected);
    if policy_cfg.is_some() {
        dp_policy.flags |= policy_flags::ENABLED;
    }
    let opts = ReplayOptions {
        policy: dp_policy,
        max_qps: args.max_qps as usize,
        interval_ns: args.interval.as_nanos() as u64,
        link_speed_bps: args.link_speed,
        check_icrc: !args.no_icrc,
        latency: args.latency,
        progress: std::io::stderr().is_terminal(),
        stop: None,
        pace: None,
    };
    let mut source = CaptureSource::new(opts, args.files.clone());
    if let Some(p) = &args.evidence {
        source.evidence = Some(Evidence::create(
            p,
            "roce-observe replay --evidence",
            args.evidence_limits.evidence_per_key,
            args.evidence_limits.evidence_max,
        )?);
    }
    let stop = Stop::on_signals();
    let started = Instant::now();
    // By default the outputs run on a thread of their own, handed each interval's changes:
    // the packet path does not wait for them (sources/offload.rs).
    let mut qps = None;
    let units = source.units();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // By default one reader per core, less the outputs' thread's when the outputs are on: on 2
    // cores a second reader beside them cost 6-15 % of wall time at 20,000 keys (the outputs
    // are the slower side there), while it halves it at 64 keys (`--readers 2`).
    let readers = args.readers.map_or(
        if args.no_out {
            cores
        } else {
            cores.saturating_sub(1).max(1)
        },
        usize::from,
    );
    // Separate observation points are read at once, each through its own lane to the outputs
    // (done one lane after another: the same outputs), unless one thread is asked for, or the
    // evidence capture is written (by one reader, in the frames' order).
    let parallel =
        units.len() > 1 && readers > 1 && source.evidence.is_none() && !args.inline_outputs;
    let collector = match collector {
        Some(c) if !args.inline_outputs => {
            let off = if parallel {
                // the consumer's lane's reader and the outputs take two cores; the readers of
                // the lanes after the next cores - 2 read ahead only while the outputs wait
                let (off, lanes) = Offload::start_lanes(c, units.len(), cores.saturating_sub(2))
                    .context("starting the outputs' thread")?;
                let lanes = lanes
                    .into_iter()
                    .map(|l| {
                        let p = l.pacer();
                        (l, Some(p))
                    })
                    .collect();
                source.run_units(units, lanes, readers, &stop);
                off
            } else {
                let mut off = Offload::start(c).context("starting the outputs' thread")?;
                let Ok(()) = source.run(&mut *off, &stop);
                off
            };
            // while the outputs' thread writes the last interval: the QPs in summary order
            qps = Some(QpList::new(&source.snapshots));
            let (c, errors) = off.finish();
            source
                .errors
                .extend(errors.into_iter().map(ReplayError::Consumer));
            Some(c)
        }
        Some(mut c) => {
            let Ok(()) = source.run(&mut c, &stop);
            Some(c)
        }
        None if parallel => {
            let discards = units.iter().map(|_| (Discard, None)).collect();
            source.run_units(units, discards, readers, &stop);
            None
        }
        None => {
            let Ok(()) = source.run(&mut Discard, &stop);
            None
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    // The summary is printed even when the output could not be finished (a full or read-only
    // disk): the totals are in memory; the error follows it.
    let (collector_summary, output_err) = match collector.map(Collector::finish_reporting) {
        Some((v, e)) => (Some(v), e),
        None => (None, None),
    };
    let evidence = source.evidence.take().map(|e| {
        let file = e.path().display().to_string();
        (file, e.finish())
    });
    let mut summary = summary(&args, &source, collector_summary, elapsed, &stop);
    let mut evidence_err = None;
    if let (Some((file, st)), Some(r)) = (evidence, summary.get_mut("replay")) {
        match st {
            Ok(st) => {
                r["evidence"] = st.summary(&file);
            }
            Err(e) => evidence_err = Some(e),
        }
    }
    if let (Some(e), Some(r)) = (&output_err, summary.get_mut("replay")) {
        // the text then says the output is incomplete instead of where it is
        r["output_error"] = json!(contract::error::chain(e));
    }
    // The QPs are serialized from the final values (no JSON tree of every key).
    let qps = qps.unwrap_or_else(|| QpList::new(&source.snapshots));
    if args.json {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        SummaryDoc {
            head: summary.as_object().context("summary is an object")?,
            qps: &qps,
            // summary.json has the latency section; the printed totals do not
            latency: &[],
        }
        .write(&mut out)?;
        writeln!(out)?;
        out.flush()?;
    } else {
        let top = qps.top_by_pkts(summary_text::MAX_QP_ROWS);
        // interface names come from the capture: their control characters as text
        let text = summary_text::render_with_qps(&summary, &top, qps.len(), args.link_speed);
        print!("{}", contract::error::visible(&text));
    }
    if let Some(e) = evidence_err {
        return Err(anyhow::Error::new(e).context("the summary above is complete"));
    }
    if let Some(e) = output_err {
        return Err(anyhow::Error::new(e).context(format!(
            "writing the output under {} (the summary above is complete)",
            args.out.display()
        )));
    }
    if let Some(min) = args.fail_on {
        let raised = raised_at_least(&summary, min);
        if !raised.is_empty() {
            return Err(super::ExitStatus {
                code: 1,
                message: Some(format!(
                    "--fail-on {}: alerts raised: {}",
                    min.as_str(),
                    raised.join(", ")
                )),
            }
            .into());
        }
    }
    let mut errors = source.errors;
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0).into()),
        n => {
            for e in &errors {
                eprintln!(
                    "error: {}",
                    contract::error::visible(&contract::error::chain(e))
                );
            }
            anyhow::bail!("{n} inputs failed")
        }
    }
}

/// Warnings and errors on stderr (`RUST_LOG` overrides): what the outputs could not do (a
/// journal or a file not written, rows recovered from a crashed run or lost, an input stopped
/// early) is said, not dropped. The per-interval lines of a live run (`info`) are not.
fn init_logs() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::sinks::tui::term::log_writer)
        // no colour codes: the writer shows every control character as text
        .with_ansi(false)
        .try_init();
}

/// `rule (count)` of every alert rule in the summary at `min` severity or higher.
fn raised_at_least(summary: &Value, min: Severity) -> Vec<String> {
    let Some(Value::Object(alerts)) = summary.get("alerts") else {
        return Vec::new();
    };
    alerts
        .iter()
        .filter(|(rule, _)| Rule::from_name(rule).is_some_and(|r| r.severity() >= min))
        .map(|(rule, n)| format!("{rule} ({n})"))
        .collect()
}

fn parse_severity(s: &str) -> Result<Severity, String> {
    match s {
        "info" => Ok(Severity::Info),
        "warning" => Ok(Severity::Warning),
        "critical" => Ok(Severity::Critical),
        _ => Err(format!("{s:?}: one of info, warning, critical")),
    }
}

/// `--profile` of replay: a vendor profile, or `none` (count only, check no marking).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayProfile {
    /// NVIDIA ConnectX ([`contract::vendor::NVIDIA`]).
    Nvidia,
    /// Broadcom Thor2 ([`contract::vendor::BROADCOM`]).
    Broadcom,
    /// Count only, check no marking.
    None,
}

impl ReplayProfile {
    /// The vendor profile (`None` for `none`).
    pub fn vendor(self) -> Option<Vendor> {
        match self {
            ReplayProfile::Nvidia => Some(Vendor::Nvidia),
            ReplayProfile::Broadcom => Some(Vendor::Broadcom),
            ReplayProfile::None => None,
        }
    }
}

/// The policy of `--policy` or `--profile`; `None` for `--profile none`.
fn policy(args: &ReplayArgs) -> Result<Option<PolicyConfig>, ReplayError> {
    match (&args.policy, args.profile.vendor()) {
        (Some(p), _) => PolicyConfig::from_file(p).map(Some),
        (None, v) => Ok(v.map(PolicyConfig::of)),
    }
    .map_err(ReplayError::Policy)
}

fn collector(args: &ReplayArgs, policy: Option<&PolicyConfig>) -> anyhow::Result<Collector> {
    // The collector needs a policy for its interval rules: with `--profile none` it gets
    // nvidia's thresholds with nothing expected of the marking.
    let cfg = match policy {
        Some(c) => c.clone(),
        None => {
            let mut c = PolicyConfig::of(Vendor::Nvidia);
            c.expected = Policy::NONE;
            c.expected_mtu = 0; // nothing expected: no MTU check either
            c
        }
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating the output directory {}", args.out.display()))?;
    let host = args.host.clone().unwrap_or_else(crate::pipeline::host_name);
    let mut cc = CollectorConfig::new(args.out.clone(), &host, "replay", cfg);
    cc.point_label = args.point_label.clone();
    cc.rotate_secs = args.rotate.as_secs().max(1);
    cc.rotate_bytes = args.rotate_mb << 20;
    cc.flush_on_events = false;
    cc.journal = journal_for(&args.files, args.journal);
    Ok(Collector::new(cc)?)
}

/// Replay's own totals, with the collector's additions (alerts, alert occurrences, PFC storm
/// figures, output files): the per-QP and interface totals stay replay's (the same numbers).
/// Without the QPs, which are streamed from `source.snapshots` ([`QpList`]).
fn summary(
    args: &ReplayArgs,
    source: &CaptureSource,
    collector_summary: Option<Value>,
    elapsed: f64,
    stop: &Stop,
) -> Value {
    let mut summary = Value::Object(interfaces_json(&source.snapshots));
    let Value::Object(m) = &mut summary else {
        return summary;
    };
    if let Some(Value::Object(c)) = collector_summary {
        for (k, v) in c {
            if k != "interfaces" && k != "qps" {
                m.insert(k, v);
            }
        }
    }
    let mut ev: Vec<_> = source.event_counts.iter().collect();
    ev.sort();
    m.insert(
        "first_events".into(),
        Value::Object(
            ev.into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect(),
        ),
    );
    m.insert(
        "replay".into(),
        json!({
            // in the order read (capture::read_units: a stem's files together, by their first packets)
            "inputs": source.inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "frames": source.frames,
            "seconds": elapsed,
            "errors": source.errors.iter().map(|e| contract::error::chain(e)).collect::<Vec<_>>(),
            "out": (!args.no_out).then(|| args.out.display().to_string()),
            "stopped_by": stop.is_set().then(|| stop.reason_name()),
        }),
    );
    summary
}

#[cfg(test)]
mod tests {
    use super::journal_for;
    use std::path::PathBuf;

    /// Files are not journaled; standard input, a FIFO, a character device and a path that
    /// cannot be looked at are; `--journal` forces it.
    #[test]
    fn only_streams_are_journaled() {
        let dir = std::env::temp_dir().join(format!("replay-journal-for-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.pcap");
        std::fs::write(&file, b"not read here").unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path of a directory this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let f = |p: &[&PathBuf]| p.iter().map(|x| (*x).clone()).collect::<Vec<_>>();
        let (stdin, null, missing) = (
            PathBuf::from("-"),
            PathBuf::from("/dev/null"),
            dir.join("missing.pcap"),
        );
        assert!(!journal_for(&f(&[&file]), false));
        assert!(!journal_for(&f(&[&file, &file]), false));
        assert!(journal_for(&f(&[&file]), true), "--journal");
        assert!(journal_for(&f(&[&stdin]), false));
        assert!(
            journal_for(&f(&[&file, &stdin]), false),
            "one stream among files"
        );
        assert!(journal_for(&f(&[&fifo]), false));
        assert!(journal_for(&f(&[&null]), false), "a character device");
        assert!(journal_for(&f(&[&missing]), false));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
