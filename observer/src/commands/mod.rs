//! The commands: options (clap), wiring of a source to the pipeline and its sinks, and the
//! messages a person reads when something is wrong. The only place `anyhow` is used.

pub mod args;
pub mod lab;
pub mod live;
pub mod nic;
pub mod replay;

use clap::{Parser, Subcommand};

/// Observe RoCEv2 traffic: per-QP marking, ECN/CNP, PSN gaps, PFC; Parquet flow logs and alerts.
#[derive(Debug, Parser)]
#[command(name = "roce-observe", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    live: live::LiveArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Read pcap/pcapng captures (or a stream on standard input) through the same per-QP logic.
    Replay(replay::ReplayArgs),
    /// Run a RoCE fabric in network namespaces with injected faults and check what is observed.
    Lab(crate::lab::LabArgs),
    /// Check one host's NIC for RoCE: counters, PFC / trust / DSCP / CNP / ToS configuration
    /// against the expected policy (exit 1 when a check fails).
    Nic(nic::NicArgs),
}

/// A command's exit status other than 0, as an error: `message` (if any) is printed on stderr,
/// then the process exits with `code` (1: a check failed, already reported on stdout; 2: a
/// usage error such as a missing interface).
#[derive(Debug)]
pub struct ExitStatus {
    pub code: i32,
    pub message: Option<String>,
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => f.write_str(m),
            None => write!(f, "exit status {}", self.code),
        }
    }
}

impl std::error::Error for ExitStatus {}

/// Parses the command line and runs the command it names.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Some(Cmd::Replay(a)) => replay::run(a),
        Some(Cmd::Lab(a)) => lab::run(a),
        Some(Cmd::Nic(a)) => nic::run(a),
        None => live::run_live(cli.live),
    };
    if let Err(e) = &r
        && let Some(x) = e.downcast_ref::<ExitStatus>()
    {
        if let Some(m) = &x.message {
            eprintln!("Error: {m}");
        }
        std::process::exit(x.code);
    }
    r
}
