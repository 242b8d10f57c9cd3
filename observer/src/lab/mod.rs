//! `roce-observe lab`: a RoCE fabric in network namespaces with injected faults, observed by
//! roce-observe, with an injected-vs-observed table. STUB: the lab work fills this in.

#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// clean, lossy, bleached, congested, pfc-storm or all.
    #[arg(long, default_value = "all")]
    pub scenario: String,
}

pub fn run(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("the lab is not implemented yet")
}
