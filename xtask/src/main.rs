//! `cargo xtask <command>`: project tasks that are not tests.
//!
//! - `bench-ebpf [--repeat N] [--runs N] [--only TEXT] [--keys N] [--passes N]`: ns per packet
//!   of the kernel programs under BPF_PROG_TEST_RUN (needs root), as a table (`--only`: the
//!   cases whose name contains TEXT; `random`: only the many-keys case), then N keys (default
//!   100,000) in random order beside one key and the empty program, and the maps' kernel memory
//!   per key.
//! - `bench-collector [--intervals N] [--sizes 10000,100000] [--many 1000000:100000]`:
//!   collector CPU time per interval, Parquet bytes per QP row and peak RSS (release build of
//!   observer's `bench_collector` example); `--many TRACKED:ACTIVE` the many-keys case (as root
//!   also on a real kernel table).
//! - `jit-dump [--out DIR] [--max-qps N]`: the loaded programs' JIT images and verifier-rewritten
//!   instructions, for profiling the datapath with perf (needs root).
//! - `bench-replay [--packets N] [--keys 20000,200000] [--many-packets N] [--only friendly|many]
//!   [--keep]`: replay packets per second beside tshark on generated captures (many QP keys:
//!   the default command; 64 keys: the earlier cases), peak RSS; `--generate FILE KEYS` only
//!   writes one many-keys capture.
//! - `bench-nic [--intervals N] [--iface IF]`: the NIC view's CPU per interval with 2,000
//!   ethtool counters beside the collector's interval cost, and one real read's wall time.
//! - `bench-host-qps [--intervals N] [--qps 10000,100000]`: the host-QP inventory's CPU per
//!   interval (dump decoding, joins, PSN deltas, `qps` rows) at N QPs beside the collector's
//!   interval cost, and peak RSS.
//! - `bench-analyze [--hosts N --keys N --minutes N --interval S --runs N --keep --tree DIR
//!   --rotate S --debug]`: `roce-analyze report` and `path` over a generated fleet tree (default
//!   36 million flow rows) beside DuckDB running the report's queries: wall time, peak RSS,
//!   ratio. `--small-files`: the report over one file per interval against the same rows in
//!   300 s files.
//! - `schema-doc`: writes docs/schema.md from the output schema's one definition
//!   (`contract::schema`).
//! - `summary-doc`: writes docs/summary-json.md from summary.json's field definitions
//!   (`observer::sinks::summary_json::fields`).
mod bench_analyze;
mod bench_ebpf;
mod bench_replay;
mod jit_dump;

fn bench_collector(args: &[String]) -> anyhow::Result<()> {
    run_example("bench_collector", args)
}

/// Runs an example of the observer crate, built in release mode.
fn run_example(name: &str, args: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "observer",
            "--example",
            name,
            "--",
        ])
        .args(args)
        .status()?;
    anyhow::ensure!(st.success(), "{name} failed");
    Ok(())
}

fn schema_doc() -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema.md");
    std::fs::write(&path, contract::schema::markdown())?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn summary_doc() -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/summary-json.md");
    std::fs::write(&path, observer::sinks::summary_json::markdown())?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench-ebpf") => bench_ebpf::main(&args[1..]),
        Some("bench-collector") => bench_collector(&args[1..]),
        Some("bench-nic") => run_example("bench_nic", &args[1..]),
        Some("bench-host-qps") => run_example("bench_host_qps", &args[1..]),
        Some("bench-replay") => bench_replay::run(&args[1..]),
        Some("bench-analyze") => bench_analyze::run(&args[1..]),
        Some("jit-dump") => jit_dump::main(&args[1..]),
        Some("jit-lines") => jit_dump::lines(&args[1..]),
        Some("schema-doc") => schema_doc(),
        Some("summary-doc") => summary_doc(),
        Some(other) => anyhow::bail!(
            "unknown xtask command {other:?} (known: bench-ebpf, bench-collector, bench-analyze, bench-nic, bench-host-qps, bench-replay, jit-dump, jit-lines, schema-doc, summary-doc)"
        ),
        None => anyhow::bail!(
            "usage: cargo xtask <command>; commands: bench-ebpf, bench-collector, bench-analyze, bench-nic, bench-host-qps, bench-replay, jit-dump, jit-lines, schema-doc, summary-doc"
        ),
    }
}
