//! The commands: options (clap), wiring of a source to the pipeline and its sinks, and the
//! messages a person reads when something is wrong. The only place `anyhow` is used.

pub mod args;
pub mod lab;
pub mod live;
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
}

/// Parses the command line and runs the command it names.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Replay(a)) => replay::run(a),
        Some(Cmd::Lab(a)) => lab::run(a),
        None => live::run_live(cli.live),
    }
}
