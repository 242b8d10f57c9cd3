//! `roce-analyze`: offline checks over roce-observe's Parquet flow logs.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analysis::load::load;
use analysis::report::{Expect, Figures, Verdict, checks, compare};
use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

/// Offline checks over roce-observe's Parquet flow logs (the `--out` directory of
/// `roce-observe` or `roce-observe replay`).
#[derive(Parser)]
#[command(name = "roce-analyze", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Expected marking: nvidia or broadcom (data DSCP 26, CNP DSCP 48, RDMA priority 3).
    #[arg(long, global = true, default_value = "nvidia")]
    profile: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring-up checks (marking, ECN/CNP, go-back-N, PFC, PAUSE, MTU); exit 1 when one fails.
    Report {
        dir: PathBuf,
        /// Print the figures and checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Record the figures of a good run as a golden baseline (JSON).
    Baseline {
        dir: PathBuf,
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Compare a run against a baseline; exit 1 when a figure got worse.
    Compare {
        baseline: PathBuf,
        dir: PathBuf,
        /// Relative tolerance (0.1 = 10% worse is still fine).
        #[arg(long, default_value_t = 0.1)]
        tolerance: f64,
        /// Absolute slack added to the tolerance (in the figure's unit).
        #[arg(long, default_value_t = 0.0)]
        slack: f64,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let Some(expect) = Expect::profile(&cli.profile) else {
        bail!(
            "unknown profile {:?} ({})",
            cli.profile,
            observer::vendor::names()
        )
    };
    match cli.cmd {
        Cmd::Report { dir, json } => report(&dir, json, &expect),
        Cmd::Baseline { dir, out } => baseline(&dir, &out, &expect),
        Cmd::Compare {
            baseline,
            dir,
            tolerance,
            slack,
        } => compare_run(&baseline, &dir, tolerance, slack, &expect),
    }
}

/// `report`: the checks, exit 1 when one fails.
fn report(dir: &Path, json: bool, expect: &Expect) -> anyhow::Result<ExitCode> {
    let ds = load(dir)?;
    let f = Figures::of(&ds, expect);
    let c = checks(&f, expect);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"figures": f, "checks": c}))?
        );
    } else {
        println!(
            "{} QP keys, {} data packets, {} files from {}",
            f.qps,
            f.data_pkts,
            ds.files,
            dir.display()
        );
        for x in &c {
            println!(
                "{:<5} {:<30} {}",
                format!("{:?}", x.verdict).to_uppercase(),
                x.name,
                x.detail
            );
        }
        if !f.alerts.is_empty() {
            println!("alerts: {:?}", f.alerts);
        }
    }
    Ok(if c.iter().any(|x| x.verdict == Verdict::Fail) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `baseline`: a good run's figures to a JSON file.
fn baseline(dir: &Path, out: &Path, expect: &Expect) -> anyhow::Result<ExitCode> {
    let f = Figures::of(&load(dir)?, expect);
    std::fs::write(out, serde_json::to_string_pretty(&f)?)
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "baseline of {} QP keys, {} data packets written to {}",
        f.qps,
        f.data_pkts,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `compare`: exit 1 when a figure got worse than the baseline's.
fn compare_run(
    baseline: &Path,
    dir: &Path,
    tolerance: f64,
    slack: f64,
    expect: &Expect,
) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(baseline)
        .with_context(|| format!("reading {}", baseline.display()))?;
    let base: Figures = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a baseline", baseline.display()))?;
    let now = Figures::of(&load(dir)?, expect);
    let r = compare(&base, &now, tolerance, slack);
    for x in &r {
        println!(
            "WORSE {:<28} baseline {:.3} now {:.3}",
            x.figure, x.baseline, x.now
        );
    }
    if r.is_empty() {
        println!("no figure worse than the baseline (tolerance {tolerance}, slack {slack})");
    }
    Ok(if r.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
