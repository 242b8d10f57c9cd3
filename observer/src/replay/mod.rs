//! `roce-observe replay FILE... | -`: pcap/pcapng files and streams through the userspace
//! datapath and the collector. STUB: the replay work fills this in.

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Capture files (pcap or pcapng), or `-` for standard input.
    #[arg(required = true)]
    pub files: Vec<std::path::PathBuf>,
}

pub fn run(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("replay is not implemented yet")
}
