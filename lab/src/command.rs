//! `roce-observe lab`: runs the lab's scenarios and prints their summary; a disagreement
//! between what was injected and what was observed is an error.

use crate::{LabArgs, LabError, run_lab};

/// The lab command.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let reports = run_lab(&args)?;
    println!("\n=== lab summary (observer: {})", args.observer.label());
    let mut bad = Vec::new();
    for r in &reports {
        println!(
            "  {:<10} {:>5.1} s  {}",
            r.scenario,
            r.secs,
            if r.ok() { "agree" } else { "DISAGREE" }
        );
        if !r.ok() {
            bad.push(format!("{}: {}", r.scenario, r.disagreements().join("; ")));
        }
    }
    if !bad.is_empty() {
        return Err(LabError::Disagree(bad.join(" | ")).into());
    }
    Ok(())
}
