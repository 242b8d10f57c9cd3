//! `roce-observe`: live observer (default), `replay` (`observer::commands`), `lab` (the lab
//! crate's command), `nic` (the nic crate's command) and `qps` (the qps crate's).

use clap::{Parser, Subcommand};
use contract::cli::ExitStatus;
use observer::commands::{live, replay};

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
    Lab(lab::LabArgs),
    /// Check one host's NIC for RoCE: counters, PFC / trust / DSCP / CNP / ToS configuration
    /// against the expected policy (exit 1 when a check fails).
    Nic(nic::command::NicArgs),
    /// List every QP of the host from the kernel's RDMA subsystem: process, container, state,
    /// packet rates, fate (exit 1 when a QP is in error).
    Qps(qps::command::QpsArgs),
}

/// Parses the command line and runs the command it names.
fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Some(Cmd::Replay(a)) => replay::run(a),
        Some(Cmd::Lab(a)) => lab::command::run(a),
        Some(Cmd::Nic(a)) => nic::command::run(a),
        Some(Cmd::Qps(a)) => qps::command::run(a),
        None => live::run_live(cli.live),
    };
    match &r {
        Ok(()) => Ok(()),
        Err(e) => {
            if let Some(x) = e.downcast_ref::<ExitStatus>() {
                if let Some(m) = &x.message {
                    eprintln!("Error: {}", contract::error::visible(m));
                }
                std::process::exit(x.code);
            }
            // The error and its causes, once each, with control characters made visible (an
            // interface name may hold an escape sequence); never a backtrace.
            eprintln!("{}", contract::error::cli_text(e.as_ref()));
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NIC configuration checks of the live command and of `roce-observe nic` expect the
    /// same of one policy file, whatever `--profile` says: the profile is the file's. (With
    /// `profile = "broadcom"` in the file the live command once expected CNPs on priority 6,
    /// `--profile`'s default, and `nic --policy` on 7.)
    #[test]
    fn live_and_nic_check_one_policy_file_alike() {
        let dir = test_support::TempDir::new("policy-profile");
        for (text, cnp_priority) in [
            ("profile = \"broadcom\"\n", 7),
            ("profile = \"nvidia\"\n", 6),
            ("rdma_priority = 4\n", 6),
            (
                "profile = \"broadcom\"\n[data]\ndscp = \"any\"\n[cnp]\npcp = 5\n",
                5,
            ),
        ] {
            let f = dir.path().join("p.toml");
            std::fs::write(&f, text).unwrap();
            let f = f.to_str().unwrap();
            for profile in ["nvidia", "broadcom"] {
                let argv = [
                    "roce-observe",
                    "--iface",
                    "lo",
                    "--profile",
                    profile,
                    "--policy",
                    f,
                ];
                let Cli { live, cmd: None } = Cli::try_parse_from(argv).unwrap() else {
                    panic!("the live command")
                };
                let live = nic::command::check_policy(&live::load_policy(&live).unwrap());
                let argv = [
                    "roce-observe",
                    "nic",
                    "--iface",
                    "lo",
                    "--profile",
                    profile,
                    "--policy",
                    f,
                ];
                let Some(Cmd::Nic(n)) = Cli::try_parse_from(argv).unwrap().cmd else {
                    panic!("the nic command")
                };
                let nic = nic::command::check_policy(&nic::command::policy_of(&n).unwrap().0);
                assert_eq!(live, nic, "{text:?} with --profile {profile}");
                assert_eq!(
                    live.0.cnp_priority, cnp_priority,
                    "{text:?} --profile {profile}"
                );
            }
        }
    }
}
