//! `roce-analyze`: offline checks over roce-observe's Parquet flow logs.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analysis::load::{load, quiet_decoder_panics};
use analysis::report::{Expect, Figures, Verdict, checks, compare, parse_margin, read_baseline};
use anyhow::{Context, bail};
use clap::{CommandFactory, Parser, Subcommand};

/// Offline checks over roce-observe's Parquet flow logs (the `--out` directory of
/// `roce-observe` or `roce-observe replay`).
#[derive(Parser)]
#[command(name = "roce-analyze", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Expected marking: nvidia or broadcom (data DSCP 26, CNP DSCP 48, RDMA priority 3).
    #[arg(long, global = true, default_value = "nvidia", value_parser = parse_profile)]
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
        /// The baseline file (`roce-analyze baseline -o FILE`).
        baseline: PathBuf,
        /// The run's output directory.
        dir: PathBuf,
        /// Relative tolerance (0.1 = 10% worse is still fine); finite, 0 or more.
        #[arg(long, default_value_t = 0.1, value_parser = parse_margin, allow_hyphen_values = true)]
        tolerance: f64,
        /// Absolute slack added to the tolerance (in the figure's unit); finite, 0 or more.
        #[arg(long, default_value_t = 0.0, value_parser = parse_margin, allow_hyphen_values = true)]
        slack: f64,
    },
    /// Did the marking (DSCP, PCP, ECN) survive every point between sender and receiver? The
    /// trees of several hosts, mirror ports or captures, compared QP key by QP key; exit 1 when
    /// a marking changed against the profile, 2 on errors.
    Path {
        /// Output directories (`--out` of roce-observe or roce-observe replay), in the order
        /// that breaks ties between points.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--profile`: a vendor profile's name (a usage error otherwise).
fn parse_profile(s: &str) -> Result<String, String> {
    match Expect::profile(s) {
        Some(_) => Ok(s.to_string()),
        None => Err(format!(
            "unknown profile {s:?} ({})",
            observer::vendor::names()
        )),
    }
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    quiet_decoder_panics();
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
        } => {
            swapped_hint(&baseline, &dir);
            compare_run(&baseline, &dir, tolerance, slack, &expect)
        }
        Cmd::Path { dirs, json } => Ok(path(&dirs, json, &expect)),
    }
}

/// `path`: exit 1 when a marking changed against the profile, 2 when a tree cannot be read
/// (so that 1 means only that).
fn path(dirs: &[PathBuf], json: bool, expect: &Expect) -> ExitCode {
    let r = match analysis::path::path(dirs, expect) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {:?}", anyhow::Error::new(e));
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&r) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("Error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", analysis::path::render(&r));
    }
    if r.totals.violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
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

/// A usage error (exit 2) when `compare`'s arguments are the wrong way round: a directory
/// where the baseline file is expected, or a file where the run's directory is expected.
fn swapped_hint(baseline: &Path, dir: &Path) {
    let which = if baseline.is_dir() {
        format!("{} is a directory", baseline.display())
    } else if dir.exists() && !dir.is_dir() {
        format!("{} is not a directory", dir.display())
    } else {
        return;
    };
    Cli::command()
        .error(
            clap::error::ErrorKind::InvalidValue,
            format!(
                "{which}: compare takes the baseline file first, then the run's directory \
                 (roce-analyze compare BASELINE.json DIR)"
            ),
        )
        .exit()
}

/// `compare`: exit 1 when a figure got worse than the baseline's.
fn compare_run(
    baseline: &Path,
    dir: &Path,
    tolerance: f64,
    slack: f64,
    expect: &Expect,
) -> anyhow::Result<ExitCode> {
    let base: Figures = read_baseline(baseline)?;
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
