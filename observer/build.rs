//! Builds the eBPF object (`observer-ebpf`, target bpfel-unknown-none) with aya-build and leaves
//! it in OUT_DIR for `aya::include_bytes_aligned!` (the aya-template pattern).
//!
//! The eBPF build needs unstable features (`-Z build-std=core`, `core_intrinsics` for the BPF
//! atomics) on the pinned stable toolchain: RUSTC_BOOTSTRAP=1 is set for that inner build only,
//! as the Linux kernel does for its Rust code. `AYA_BUILD_SKIP=1` skips it (an empty object is
//! embedded; loading then fails with a clear error).
use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("MetadataCommand::exec")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "observer-ebpf")
        .ok_or_else(|| anyhow!("observer-ebpf package not found"))?;
    let root = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    // The eBPF object also depends on the shared parser and state machine.
    let common = root
        .parent()
        .ok_or_else(|| anyhow!("no workspace root above {root}"))?
        .join("observer-common")
        .join("src");
    println!("cargo::rerun-if-changed={common}");

    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    println!("cargo::rerun-if-env-changed=AYA_BUILD_SKIP");
    // SAFETY: build scripts are single-threaded; the variable is inherited by the inner cargo.
    unsafe { std::env::set_var("RUSTC_BOOTSTRAP", "1") };
    let toolchain = std::env::var("RUSTUP_TOOLCHAIN").unwrap_or_else(|_| "1.98.0".to_string());
    println!("cargo::rerun-if-env-changed=RUSTUP_TOOLCHAIN");
    // Builds the object with `features` (aya-build leaves it as OUT_DIR/observer) and keeps it
    // as OUT_DIR/`name`; with AYA_BUILD_SKIP an empty file stands for it.
    let build = |features: &[&str], name: &str| -> anyhow::Result<()> {
        if skip {
            std::fs::write(out.join(name), b"").context("write empty object")?;
            std::fs::write(out.join("qp-probe"), b"").context("write empty object")?;
            return Ok(());
        }
        aya_build::build_ebpf(
            [aya_build::Package {
                name: ebpf.name.as_str(),
                root_dir: root.as_str(),
                features,
                ..Default::default()
            }],
            Toolchain::Custom(&toolchain),
        )?;
        if name != "observer" {
            std::fs::rename(out.join("observer"), out.join(name))
                .with_context(|| format!("keeping the object {name}"))?;
        }
        Ok(())
    };
    // Three objects: with the programs' rare-path reports (feature kernel-log, loaded for
    // --log-level debug); the compat object for kernels before 5.18 (no multi-buffer XDP, no
    // bpf_loop: chosen at load by probing the kernel, docs/datapath.md "Kernel versions"); and
    // the default (aya-log's mere presence costs the packet path 8 ns here, measured with
    // bench-ebpf, even with its level off). The default last: aya-build's own name.
    // Each build also leaves the modify-QP probe's object (bin `qp-probe`, no features) as
    // OUT_DIR/qp-probe.
    build(&["kernel-log"], "observer-log")?;
    build(&["compat"], "observer-compat")?;
    build(&[], "observer")
}
