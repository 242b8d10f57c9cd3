//! The live command's options and main loop. STUB: the collector work fills this in.

#[derive(Debug, clap::Args)]
pub struct LiveArgs {
    /// Interface to observe (repeatable).
    #[arg(long = "iface")]
    pub iface: Vec<String>,
}

pub fn run_live(_args: LiveArgs) -> anyhow::Result<()> {
    anyhow::bail!("live collection is not implemented yet")
}
