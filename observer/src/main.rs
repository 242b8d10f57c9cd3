//! `roce-observe`: live observer (default), `replay`, `lab` (see `observer::commands`).

fn main() -> anyhow::Result<()> {
    observer::commands::main()
}
