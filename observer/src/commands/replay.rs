//! `roce-observe replay FILE... | -`: options, and the run that wires the capture source to the
//! collector and prints the summary.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use observer_common::maps::{Policy, policy_flags};
use serde_json::{Value, json};

use super::args::{parse_duration, parse_host, parse_link_speed, parse_rotate_mb};
use crate::pipeline::{Collector, CollectorConfig, PolicyConfig};
use crate::sinks::summary_json::summary_json;
use crate::sinks::summary_text;
use crate::sources::capture::{NoOutput, Output, Replay, ReplayError, ReplayOptions};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Capture files (pcap or pcapng), or `-` for standard input (read as a stream).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory, as for live capture: Parquet tables flows/, interfaces/, alerts/,
    /// alerts.jsonl and summary.json (the collector, with capture timestamps).
    #[arg(long, value_name = "DIR", default_value = "./roce-flows")]
    pub out: PathBuf,
    /// Write no files: only print the summary (no alert rules run).
    #[arg(long, conflicts_with = "out")]
    pub no_out: bool,
    /// Snapshot interval in capture time: `1s`, `500ms`, `10` (seconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Expected marking profile: nvidia, broadcom, or `none` (count only, check no marking).
    #[arg(long, value_name = "VENDOR", default_value = "nvidia", value_parser = ["nvidia", "broadcom", "none"])]
    pub profile: String,
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
    /// Print the final totals as JSON (`summary::summary_json` form) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Host name written into output file names (default: this host's name).
    #[arg(long, value_parser = parse_host)]
    pub host: Option<String>,
}

/// `roce-observe replay`: every input through the capture source into the collector, then the
/// summary (table or JSON) on stdout.
pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let none = args.policy.is_none() && args.profile == "none";
    let policy_cfg: Option<PolicyConfig> = match (&args.policy, none) {
        (Some(p), _) => Some(PolicyConfig::from_file(p).map_err(ReplayError::Policy)?),
        (None, true) => None,
        (None, false) => Some(PolicyConfig::profile(&args.profile).map_err(ReplayError::Policy)?),
    };
    let mut dp_policy = match &policy_cfg {
        Some(c) => c.expected,
        None => Policy::NONE,
    };
    if policy_cfg.is_some() {
        dp_policy.flags |= policy_flags::ENABLED;
    }
    let mut collector = if args.no_out {
        None
    } else {
        // The collector needs a policy for its interval rules: with `--profile none` it gets
        // nvidia's thresholds with nothing expected of the marking.
        let cfg = match &policy_cfg {
            Some(c) => c.clone(),
            None => {
                let mut c = PolicyConfig::profile("nvidia").map_err(ReplayError::Policy)?;
                c.expected = Policy::NONE;
                c
            }
        };
        std::fs::create_dir_all(&args.out)?;
        let host = args.host.clone().unwrap_or_else(crate::pipeline::host_name);
        let mut cc = CollectorConfig::new(args.out.clone(), &host, "replay", cfg);
        cc.rotate_secs = args.rotate.as_secs().max(1);
        cc.rotate_bytes = args.rotate_mb << 20;
        Some(Collector::new(cc)?)
    };
    let opts = ReplayOptions {
        policy: dp_policy,
        max_qps: args.max_qps as usize,
        interval_ns: args.interval.as_nanos() as u64,
        link_speed_bps: args.link_speed,
        check_icrc: !args.no_icrc,
        progress: std::io::stderr().is_terminal(),
    };
    let mut null = NoOutput;
    let mut errors: Vec<ReplayError> = Vec::new();
    let started = Instant::now();
    let (snaps, frames, event_counts) = {
        let out: &mut dyn Output = match collector.as_mut() {
            Some(c) => c,
            None => &mut null,
        };
        let mut rp = Replay::new(opts, out);
        for f in &args.files {
            if let Err(e) = rp.feed_path(f) {
                tracing::error!(error = %e, "replay input failed");
                errors.push(e);
            }
        }
        (rp.snapshots(), rp.frames, rp.event_counts.clone())
    };
    let elapsed = started.elapsed().as_secs_f64();
    let collector_summary = match collector {
        Some(c) => Some(c.finish()?),
        None => None,
    };
    let mut summary = summary_json(&snaps);
    if let Value::Object(m) = &mut summary {
        // The collector's own additions (alerts, alert occurrences, PFC storm figures, output
        // files): the per-QP and interface totals stay replay's (the same numbers).
        if let Some(Value::Object(c)) = &collector_summary {
            for (k, v) in c {
                if k != "interfaces" && k != "qps" {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        let mut ev: Vec<_> = event_counts.into_iter().collect();
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
                "inputs": args.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "frames": frames,
                "seconds": elapsed,
                "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
                "out": (!args.no_out).then(|| args.out.display().to_string()),
            }),
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", summary_text::render(&summary, args.link_speed));
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0).into()),
        n => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            anyhow::bail!("{n} inputs failed")
        }
    }
}
