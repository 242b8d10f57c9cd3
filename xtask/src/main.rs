//! `cargo xtask <task>`: benchmarks and chores.
mod bench_replay;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench-replay") => bench_replay::run(&args[1..]),
        _ => anyhow::bail!("usage: cargo xtask <bench-replay> [options]"),
    }
}
