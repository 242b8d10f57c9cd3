//! `cargo xtask <command>`: project tasks that are not tests.
//!
//! - `bench-ebpf [--repeat N] [--runs N]`: ns per packet of the kernel programs under
//!   BPF_PROG_TEST_RUN (needs root), as a table.
mod bench_ebpf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench-ebpf") => bench_ebpf::main(&args[1..]),
        Some(other) => anyhow::bail!("unknown xtask command {other:?} (known: bench-ebpf)"),
        None => anyhow::bail!("usage: cargo xtask <command>; commands: bench-ebpf"),
    }
}
