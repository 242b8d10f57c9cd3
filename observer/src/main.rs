//! `roce-observe`: live observer (default), `replay`, `lab`.
use clap::{Parser, Subcommand};

use observer::collector;
use observer::lab::LabArgs;
use observer::replay::ReplayArgs;

/// Observe RoCEv2 traffic: per-QP marking, ECN/CNP, PSN gaps, PFC; Parquet flow logs and alerts.
#[derive(Debug, Parser)]
#[command(name = "roce-observe", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    live: collector::cli::LiveArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Read pcap/pcapng captures (or a stream on standard input) through the same per-QP logic.
    Replay(ReplayArgs),
    /// Run a RoCE fabric in network namespaces with injected faults and check what is observed.
    Lab(LabArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Replay(a)) => observer::replay::run(a),
        Some(Cmd::Lab(a)) => observer::lab::run(a),
        None => collector::cli::run_live(cli.live),
    }
}
